"""The connector kit: the one module a connector imports from gpu-finops.

A connector is a class with a `name`, a `kind` (one of KINDS), a `recognises` sentence, a
`detect(path, head)` that claims a file by its first bytes, and a `read(path, ctx)` that yields
Arrow record batches in the canonical schema of its kind. Everything it needs for that is here:

- the canonical schemas (`SCHEMAS`, `schema_of(kind)`) and the columns every row must fill
  (`REQUIRED_COLUMNS`); lineage columns (`LINEAGE_COLUMNS`) are filled by `to_canonical`;
- reading: `stream_csv_as_strings` (a headed CSV as polars frames of text, in bounded memory,
  each row numbered in the `SOURCE_ROW` column; `header_line=` for a header below a title, which
  `find_header_line` finds), `stream_parquet_as_strings`, `header_fields`, `read_head`,
  `open_maybe_gzip`, `number_rows` for frames built any other way; Excel workbooks: `is_workbook`,
  `find_workbook_headers` (the sheets whose header, below a title maybe, names the columns) and
  `stream_workbook_as_strings` (cells as the text Excel shows, date cells in `WORKBOOK_TIME_FORMATS`);
- parsing, never through a float: `parse_money` / `parse_decimal` (exact decimals), `money_sum` (an
  exact sum of amounts, at money's full width), `parse_utc` (and
  `parse_utc_series`, the same over a frame's column at the cost of one format)
  (times with an offset keep it, times without one are read in a zone), `parse_unit` (durations and
  sizes with their unit written, "90 min", "1.5 GiB", converted to one unit), `failed` (the source
  had a value but parsing gave nothing), `gpu_model_expr`, `normalise_host`, `ISO4217`;
- rejecting: `first_reason` (the first failing check per row) and `split_rejected` (rows with a
  reason go to the quarantine; with `amount=` the money the file states is declared for the
  per-file reconciliation), `ReadContext.quarantine` for one row, `ReadContext.declare_money` for
  money read outside a frame, `ConnectorError` to refuse a whole file;
- shaping: `to_canonical(frame, kind, connector_name, ctx)`.

Billing connectors must declare the money each file states: the ingest checks, per file, that
declared = sum(loaded x_SourceCost) + quarantined money, exactly. `connectors.kit_contract`
proves a connector right against a fixture file (`check_connector`).

API_VERSION follows semantic versioning: a minor version adds names, a major one removes or
changes one; every change is listed in the README's "Connector kit changelog".
"""

from __future__ import annotations

from decimal import Decimal

import polars as pl
import pyarrow as pa

from connectors._tabular import (
    HEADER_SEARCH_LINES,
    ROW_NUMBER,
    WHERE,
    CompleteLines,
    TruncatedTail,
    failed,
    find_header_line,
    first_lines_fields,
    first_reason,
    header_fields,
    is_parquet,
    number_rows,
    parse_decimal,
    parse_utc,
    parse_utc_series,
    quarantine_tail,
    read_head,
    short_value,
    cell_reason,
    split_rejected,
    stream_csv_as_strings,
    stream_parquet_as_strings,
    to_canonical,
)
from connectors._spreadsheet import (
    NOT_COMPUTED,
    WORKBOOK_TIME_FORMATS,
    find_workbook_headers,
    is_workbook,
    stream_workbook_as_strings,
    workbook_problems,
)
from connectors._telemetry import normalise_host
from connectors.base import (
    DECOMPRESSION_ERRORS,
    KINDS,
    SNIFF_BYTES,
    Connector,
    ConnectorError,
    ReadContext,
    money_sum,
    open_maybe_gzip,
    open_text,
    printable,
    read_whole,
    text_lines,
)
from models.currencies import ISO4217
from models.focus import FOCUS_COLUMNS
from models.gpus import gpu_model_expr
from models.schemas import LINEAGE_FIELDS, MONEY_TYPE, PRICE_TYPE, QUANTITY_TYPE, SCHEMAS, UTC_TIMESTAMP

API_VERSION = "1.4"  # 1.1: parse_utc_series; 1.2: Connector.reads_concurrently; 1.3: find_header_line, money_sum, workbooks;
# 1.4: split_rejected(currency=), declare_money(currency=), WHERE, NOT_COMPUTED

# The column of a frame that holds each record's row in the source file (1 = the first data row).
SOURCE_ROW = ROW_NUMBER

LINEAGE_COLUMNS = tuple(f.name for f in LINEAGE_FIELDS)


def schema_of(kind: str) -> pa.Schema:
    """The canonical Arrow schema of a kind of record: billing, telemetry, workload or storage."""
    if kind not in SCHEMAS:
        raise KeyError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    return SCHEMAS[kind]


def _required(kind: str) -> tuple[str, ...]:
    schema = SCHEMAS[kind]
    names = [f.name for f in schema if not f.nullable and f.name not in LINEAGE_COLUMNS]
    if kind == "billing":
        # FOCUS's mandatory money, currency, category and period, and the amount as the file states
        # it, which the per-file money reconciliation adds up.
        names += [c.name for c in FOCUS_COLUMNS if c.required] + ["x_SourceCost"]
    return tuple(dict.fromkeys(names))


# Columns every row of a kind must fill (not null), lineage aside (to_canonical fills that).
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {kind: _required(kind) for kind in KINDS}


def parse_money(column: str) -> pl.Expr:
    """Text → an exact amount (DECIMAL(38, 10), the canonical money type); null where it is not a
    number or has more than 28 integer digits. Never through a float."""
    return parse_decimal(column, MONEY_TYPE.precision, MONEY_TYPE.scale)


# Units `parse_unit` knows, in their base unit (seconds or bytes).
_SECONDS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "min": 60, "mins": 60, "minute": 60,
            "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
            "d": 86400, "day": 86400, "days": 86400}
_BYTES = {"b": 1, "byte": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
UNITS: dict[str, dict[str, int]] = {"duration": _SECONDS, "size": _BYTES}
_NUMBER_AND_UNIT = r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))\s*([A-Za-z]*)$"


def parse_unit(column: str, to: str, default_unit: str | None = None) -> pl.Expr:
    """Text such as "90 min", "2h", "1.5 GiB", "3600" → an exact quantity (DECIMAL(28, 10)) in unit
    `to` (any of UNITS: s, min, h, d; B, KB, MB, GB, TB, KiB, MiB, GiB, TiB). A value without a unit
    is in `default_unit` (default: `to`); an unknown unit, a unit of another dimension or text that
    is no number gives null, so `failed(column, parsed)` finds it."""
    target = to.lower()
    table = next((t for t in UNITS.values() if target in t), None)
    if table is None:
        raise ValueError(f"unknown unit {to!r}: one of {', '.join(u for t in UNITS.values() for u in t)}")
    default = (default_unit or to).lower()
    if default not in table:
        raise ValueError(f"default unit {default_unit!r} is not a unit of the same kind as {to!r}")
    text = pl.col(column).str.strip_chars()
    number = text.str.extract(_NUMBER_AND_UNIT, 1).cast(pl.Decimal(28, 10), strict=False)
    unit = text.str.extract(_NUMBER_AND_UNIT, 2).str.to_lowercase()
    unit = pl.when(unit == "").then(pl.lit(default)).otherwise(unit)
    factor = unit.replace_strict({u: f for u, f in table.items()}, default=None, return_dtype=pl.Int64)
    base = number * factor.cast(pl.Decimal(38, 0))
    return (base / pl.lit(Decimal(table[target]))).cast(_QUANTITY, strict=False)


_QUANTITY = pl.Decimal(QUANTITY_TYPE.precision, QUANTITY_TYPE.scale)

__all__ = [
    "API_VERSION", "KINDS", "SCHEMAS", "HEADER_SEARCH_LINES", "REQUIRED_COLUMNS", "LINEAGE_COLUMNS", "SOURCE_ROW", "WHERE", "SNIFF_BYTES", "UNITS",
    "MONEY_TYPE", "PRICE_TYPE", "QUANTITY_TYPE", "UTC_TIMESTAMP", "ISO4217",
    "Connector", "ConnectorError", "ReadContext", "CompleteLines", "TruncatedTail",
    "schema_of", "header_fields", "find_header_line", "first_lines_fields", "read_head", "open_maybe_gzip", "open_text", "read_whole", "text_lines", "DECOMPRESSION_ERRORS", "is_parquet", "printable",
    "stream_csv_as_strings", "stream_parquet_as_strings", "stream_workbook_as_strings", "is_workbook",
    "find_workbook_headers", "workbook_problems", "WORKBOOK_TIME_FORMATS", "NOT_COMPUTED", "number_rows", "quarantine_tail",
    "parse_money", "parse_decimal", "money_sum", "parse_utc", "parse_utc_series", "parse_unit", "failed", "short_value", "cell_reason",
    "gpu_model_expr", "normalise_host", "first_reason", "split_rejected", "to_canonical",
]
