"""Shared plumbing for text connectors: streaming CSV as strings, parsing values with polars,
and shaping a frame into a canonical Arrow batch with lineage."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from connectors.base import GZIP_MAGIC, ConnectorError, ReadContext, open_maybe_gzip

BLOCK_SIZE = 8 << 20  # bytes per streamed CSV block: bounds memory whatever the file size
ROW_NUMBER = "__source_row"


def header_fields(head: bytes, delimiter: str = ",") -> list[str]:
    """The first line of a text file as a list of stripped field names (BOM removed)."""
    text = head.decode("utf-8-sig", errors="replace")
    first = text.splitlines()[0] if text else ""
    return [f.strip() for f in next(csv.reader(io.StringIO(first), delimiter=delimiter), [])]


def _input_stream(path: Path):
    """A pyarrow input stream over the file, decompressing gzip found by content."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == GZIP_MAGIC
    return pa.CompressedInputStream(pa.OSFile(str(path)), "gzip") if gz else pa.OSFile(str(path))


def stream_csv_as_strings(
    path: Path,
    source_file: str,
    null_values: Sequence[str] = ("",),
    delimiter: str = ",",
    encoding: str = "utf-8",
) -> Iterator[pl.DataFrame]:
    """Stream a headed CSV as polars frames of strings, numbering data rows from 1.

    Everything is read as text so each connector decides how to parse, and a bad value becomes a
    quarantined row instead of a failed file.
    """
    with open_maybe_gzip(path) as fh:
        try:
            names = header_fields(fh.read(1 << 16).decode(encoding, errors="replace").encode(), delimiter)
        except (EOFError, OSError) as exc:
            raise ConnectorError(source_file, f"unreadable compressed file: {exc}", line=1) from exc
    if not names or not any(names):
        raise ConnectorError(source_file, "no header line", line=1)
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConnectorError(source_file, f"header names a column more than once: {', '.join(twice)}", line=1)
    try:
        reader = pacsv.open_csv(
            _input_stream(path),
            # Our own (stripped, BOM-free) names, so every column is typed as text whatever its spacing.
            read_options=pacsv.ReadOptions(
                block_size=BLOCK_SIZE, encoding=encoding, column_names=names, skip_rows=1
            ),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                null_values=list(null_values),
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise ConnectorError(source_file, f"not a readable CSV: {exc}", line=1) from exc
    rows_before = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except (EOFError, OSError) as exc:  # a gzip cut short
            raise ConnectorError(source_file, f"file ends early after data row {rows_before}: {exc}",
                                 line=rows_before + 2) from exc
        except pa.ArrowInvalid as exc:
            # Arrow reports the offending row itself ("Row #N"); add our running position.
            raise ConnectorError(
                source_file, f"malformed CSV after data row {rows_before}: {exc}", line=rows_before + 2
            ) from exc
        frame = pl.from_arrow(batch)
        yield frame.with_columns(
            pl.int_range(rows_before + 1, rows_before + 1 + batch.num_rows, dtype=pl.Int64).alias(ROW_NUMBER)
        )
        rows_before += batch.num_rows


_AWARE_FORMATS = (
    "%Y-%m-%dT%H:%M:%S%.f%#z",
    "%Y-%m-%d %H:%M:%S%.f%#z",
    "%Y-%m-%dT%H:%M:%S%#z",
    "%Y-%m-%d %H:%M:%S%#z",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S%.fZ",
    "%Y-%m-%dT%H:%MZ",
)
_NAIVE_FORMATS = (
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
    "%Y/%m/%d %H:%M:%S%.f",
    "%Y/%m/%d %H:%M:%S",
)


def parse_utc(column: str, local_tz: str = "UTC", naive_formats: Sequence[str] = _NAIVE_FORMATS) -> pl.Expr:
    """Text → UTC timestamp. Times with an offset keep it; times without one are read in local_tz."""
    text = pl.col(column).str.strip_chars()
    aware = [text.str.to_datetime(f, strict=False, time_unit="us", time_zone="UTC") for f in _AWARE_FORMATS]
    naive = [
        text.str.to_datetime(f, strict=False, time_unit="us")
        .dt.replace_time_zone(local_tz, ambiguous="earliest", non_existent="null")
        .dt.convert_time_zone("UTC")
        for f in naive_formats
    ]
    return pl.coalesce(aware + naive)


def parse_decimal(column: str, precision: int, scale: int) -> pl.Expr:
    """Text → exact decimal; never through a float."""
    return pl.col(column).str.strip_chars().cast(pl.Decimal(precision, scale), strict=False)


def failed(column: str, parsed: pl.Expr) -> pl.Expr:
    """True where the source had a value but parsing it gave nothing."""
    return pl.col(column).is_not_null() & (pl.col(column).str.strip_chars() != "") & parsed.is_null()


def split_rejected(frame: pl.DataFrame, reason: pl.Expr, ctx: ReadContext, connector: str,
                   raw_columns: Sequence[str], amount: pl.Expr | None = None) -> pl.DataFrame:
    """Send rows with a non-null `reason` to the quarantine; return the accepted rows.

    `amount` (billing files) is the row's money as the source states it: its total over all rows
    and over the rejected ones is added to the context, for the reconciliation check.
    """
    frame = frame.with_columns(reason.alias("__reason"))
    rejected = frame.filter(pl.col("__reason").is_not_null())
    if amount is not None:
        totals = frame.select(amount.sum().alias("all"), amount.filter(pl.col("__reason").is_not_null()).sum().alias("bad"))
        ctx.source_total += Decimal(str(totals.item(0, "all") or 0))
        ctx.quarantined_total += Decimal(str(totals.item(0, "bad") or 0))
    for row in rejected.select(ROW_NUMBER, "__reason", *(c for c in raw_columns if c in rejected.columns)).iter_rows(named=True):
        record = {c: row[c] for c in raw_columns if c in row}
        ctx.quarantine(connector, row[ROW_NUMBER], row["__reason"], record)
    return frame.filter(pl.col("__reason").is_null()).drop("__reason")


def first_reason(checks: Sequence[tuple[pl.Expr, pl.Expr | str]]) -> pl.Expr:
    """The message of the first failing check per row, or null when all pass."""
    return pl.coalesce(
        [pl.when(cond).then(msg if isinstance(msg, pl.Expr) else pl.lit(msg)) for cond, msg in checks]
        + [pl.lit(None, dtype=pl.String)]
    )


def to_canonical(frame: pl.DataFrame, schema: pa.Schema, connector: str, ctx: ReadContext) -> pa.RecordBatch:
    """Order, fill and type the columns exactly as `schema` says, adding lineage."""
    frame = frame.with_columns(
        pl.lit(connector).alias("x_Connector"),
        pl.lit(ctx.source_file).alias("x_SourceFile"),
        pl.lit(ctx.source_sha256).alias("x_SourceSha256"),
        pl.col(ROW_NUMBER).alias("x_SourceRow"),
        pl.lit(ctx.ingested_at).dt.convert_time_zone("UTC").dt.cast_time_unit("us").alias("x_IngestedAt"),
    )
    arrays = []
    for field in schema:
        if field.name in frame.columns:
            arrays.append(frame.get_column(field.name).to_arrow().cast(field.type))
        else:
            arrays.append(pa.nulls(frame.height, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


PARQUET_BATCH_ROWS = 64 * 1024


def is_parquet(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PAR1"


def _parquet_batches(path: Path, source_file: str | None) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    try:
        yield from pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS)
    except (pa.ArrowException, OSError) as exc:  # a corrupt footer, page header or page
        raise ConnectorError(source_file or str(path), f"not a readable Parquet file: {exc}") from exc


def stream_parquet_as_strings(path: Path, null_values: Sequence[str] = ("",), source_file: str | None = None) -> Iterator[pl.DataFrame]:
    """Parquet row groups as frames of text, numbered like CSV rows, so one parser serves both
    formats (structs and maps become JSON)."""
    rows_before = 0
    for batch in _parquet_batches(path, source_file):
        frame = pl.from_arrow(batch)
        frame = frame.with_columns(
            (pl.col(c).struct.json_encode() if isinstance(dt, pl.Struct)
             else pl.col(c).cast(pl.String) if not isinstance(dt, pl.List) else pl.col(c).list.join(","))
            for c, dt in frame.schema.items()
        ).with_columns(pl.col(pl.String).replace({s: None for s in null_values}))
        yield frame.with_columns(
            pl.int_range(rows_before + 1, rows_before + 1 + frame.height, dtype=pl.Int64).alias(ROW_NUMBER)
        )
        rows_before += frame.height
