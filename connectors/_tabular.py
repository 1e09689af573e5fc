"""Shared plumbing for text connectors: streaming CSV as strings, parsing values with polars,
and shaping a frame into a canonical Arrow batch with lineage."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
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


# The raw text of a quarantined tail is kept up to this many bytes (a row, not a whole bad block).
TAIL_RECORD_BYTES = 4096


@dataclass(frozen=True)
class TruncatedTail:
    """The end of a file that stops mid-row: its line number, the data row it would have been, and
    its bytes; `stream_cut` when a compressed stream ended before its end marker."""

    line: int
    row: int
    raw: bytes
    stream_cut: bool


class CompleteLines:
    """The file's (decompressed) bytes up to its last newline, as a file object for pyarrow.

    What follows the last newline, a row cut short, is held back as `tail`; a gzip stream that ends
    early ends the stream there instead of raising. Only one read chunk and one partial line are
    held at a time, so memory stays bounded whatever the file size.
    """

    CHUNK = 1 << 20
    LONGEST_LINE = 64 << 20  # past this a "line" is not a row: pass it on and let Arrow refuse it

    def __init__(self, path: Path):
        self._raw = open_maybe_gzip(path)
        self._ready = bytearray()
        self._pending = b""
        self._eof = False
        self.lines = 0  # newlines passed on
        self.tail = b""
        self.stream_cut = False
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return False

    def _fill(self) -> None:
        try:
            read = getattr(self._raw, "read1", self._raw.read)
            data = read(self.CHUNK)
        except EOFError:  # gzip: "Compressed file ended before the end-of-stream marker was reached"
            self.stream_cut, data = True, b""
        if not data:
            self._eof, self.tail, self._pending = True, self._pending, b""
            return
        data = self._pending + data
        cut = data.rfind(b"\n") + 1
        if not cut and len(data) > self.LONGEST_LINE:
            cut = len(data)
        self.lines += data.count(b"\n", 0, cut)
        self._ready += memoryview(data)[:cut]
        self._pending = data[cut:]

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size is None or size < 0 or len(self._ready) < size):
            self._fill()
        size = len(self._ready) if size is None or size < 0 else size
        out = bytes(self._ready[:size])
        del self._ready[:size]
        return out

    def close(self) -> None:
        self._raw.close()
        self.closed = True

    def numbered_lines(self) -> Iterator[tuple[int, bytes]]:
        """Every complete line with its number from 1, newline included; `tail` after the last."""
        number, carry = 0, b""
        while chunk := self.read(self.CHUNK):
            # A read of CHUNK bytes can end mid-line: the part after its last newline waits for the next.
            parts = (carry + chunk).split(b"\n")
            carry = parts.pop()
            for part in parts:
                number += 1
                yield number, part + b"\n"
        if carry:  # only an absurdly long line passed on without its newline
            number += 1
            yield number, carry
        self.close()

    def truncated_tail(self, row: int | None = None) -> "TruncatedTail | None":
        """The broken end of the file once it has been read, or None when it ended cleanly.
        `row` is the data row it would have been; by default its line number."""
        if not (self.tail or self.stream_cut):
            return None
        return TruncatedTail(self.lines + 1, self.lines + 1 if row is None else row, self.tail, self.stream_cut)


def read_head(path: Path, size: int = 1 << 16, tolerate_cut: bool = False) -> bytes:
    """The first `size` (decompressed) bytes; with `tolerate_cut`, what arrived of a gzip stream
    that ends early instead of an error."""
    out = bytearray()
    with open_maybe_gzip(path) as fh:
        read = getattr(fh, "read1", fh.read)
        while len(out) < size:
            try:
                data = read(size - len(out))
            except EOFError:
                if not tolerate_cut:
                    raise
                break
            if not data:
                break
            out += data
    return bytes(out)


def quarantine_tail(ctx: ReadContext, connector: str, unit: str = "row") -> Callable[[TruncatedTail], None]:
    """For telemetry: a file cut mid-row keeps its complete rows; the broken last row goes to the
    quarantine with a reason naming its line, and the file's detail carries a warning."""

    def handle(tail: TruncatedTail) -> None:
        cut = " (compressed stream cut short)" if tail.stream_cut else ""
        if tail.raw.strip():
            reason = f"file ends mid-{unit} at line {tail.line}{cut}"
            ctx.quarantine(connector, tail.row, reason, tail.raw[:TAIL_RECORD_BYTES].decode("utf-8", errors="replace"))
            ctx.warn(f"{reason}: the incomplete {unit} is quarantined, the {unit}s before it loaded")
        elif tail.stream_cut:
            ctx.warn(f"compressed stream ends early after line {tail.line - 1}: the rows before it loaded, any after it are missing")

    return handle


def _arrow_reason(exc: Exception) -> str:
    """Arrow's complaint without the row text it quotes ("Expected 3 columns, got 2: <row>")."""
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for pattern in (r"Expected \d+ columns, got \d+", r"In CSV column #\d+: CSV conversion error to \w+: invalid UTF8 data",
                    r"straddling object straddles two block boundaries"):
        if m := re.search(pattern, message):
            return m.group(0)
    if message.startswith("CSV parse error:"):
        return message.split(":", 2)[1].strip() or "CSV parse error"
    return message[:120]


def _locate_bad_row(path: Path, names: list[str], delimiter: str, encoding: str) -> tuple[int, str] | None:
    """Where a CSV Arrow refused goes wrong: (line, what is wrong there, naming the column), found
    by streaming the file again with Python's csv reader. Only ever run after a failure."""
    try:
        with open_maybe_gzip(path) as raw:
            text = io.TextIOWrapper(raw, encoding=encoding, errors="surrogateescape", newline="")
            reader = csv.reader(text, delimiter=delimiter)
            next(reader, None)  # the header
            for record in reader:
                if not record:
                    continue  # Arrow skips empty lines too
                if len(record) < len(names):
                    return reader.line_num, (f"Expected {len(names)} columns, got {len(record)}: "
                                             f"no value for column {names[len(record)]}")
                if len(record) > len(names):
                    return reader.line_num, (f"Expected {len(names)} columns, got {len(record)}: "
                                             f"values past the last column, {names[-1]}")
                for name, value in zip(names, record):
                    if any("\udc80" <= ch <= "\udcff" for ch in value):
                        return reader.line_num, f"column {name}: not valid {encoding} text"
    except (EOFError, OSError, UnicodeError, csv.Error):
        return None
    return None


def stream_csv_as_strings(
    path: Path,
    source_file: str,
    null_values: Sequence[str] = ("",),
    delimiter: str = ",",
    encoding: str = "utf-8",
    on_truncated: Callable[[TruncatedTail], None] | None = None,
) -> Iterator[pl.DataFrame]:
    """Stream a headed CSV as polars frames of strings, numbering data rows from 1.

    Everything is read as text so each connector decides how to parse, and a bad value becomes a
    quarantined row instead of a failed file.

    With `on_truncated` (telemetry), a file that ends mid-row, or a gzip stream that ends early,
    loads every complete row and hands the broken tail to `on_truncated`; without it (billing) such
    a file fails whole. A file Arrow cannot parse fails naming the line and column, never quoting
    the row.
    """
    try:
        head = read_head(path, tolerate_cut=on_truncated is not None)
    except (EOFError, OSError) as exc:
        raise ConnectorError(source_file, f"unreadable compressed file: {exc}", line=1) from exc
    names = header_fields(head.decode(encoding, errors="replace").encode(), delimiter)
    if not names or not any(names):
        raise ConnectorError(source_file, "no header line", line=1)
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConnectorError(source_file, f"header names a column more than once: {', '.join(twice)}", line=1)
    lines = CompleteLines(path) if on_truncated is not None else None
    try:
        reader = pacsv.open_csv(
            pa.PythonFile(lines, mode="r") if lines is not None else _input_stream(path),
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
        where = _locate_bad_row(path, names, delimiter, encoding)
        if where:
            raise ConnectorError(source_file, f"malformed CSV: {where[1]}", line=where[0]) from exc
        raise ConnectorError(source_file, f"not a readable CSV: {_arrow_reason(exc)}", line=1) from exc
    rows_before = 0
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            break
        except (EOFError, OSError) as exc:  # a gzip cut short
            raise ConnectorError(source_file, f"file ends early after data row {rows_before}: {exc}",
                                 line=rows_before + 2) from exc
        except pa.ArrowInvalid as exc:
            where = _locate_bad_row(path, names, delimiter, encoding)
            if where:
                raise ConnectorError(source_file, f"malformed CSV: {where[1]}", line=where[0]) from exc
            raise ConnectorError(
                source_file, f"malformed CSV after data row {rows_before}: {_arrow_reason(exc)}", line=rows_before + 2
            ) from exc
        frame = pl.from_arrow(batch)
        yield frame.with_columns(
            pl.int_range(rows_before + 1, rows_before + 1 + batch.num_rows, dtype=pl.Int64).alias(ROW_NUMBER)
        )
        rows_before += batch.num_rows
    if lines is not None:
        lines.close()
        if tail := lines.truncated_tail(row=rows_before + 1):
            on_truncated(tail)


def short_value(column: str, limit: int = 40) -> pl.Expr:
    """A source value fit to quote in a quarantine reason: control characters replaced, clipped."""
    text = pl.col(column).str.replace_all(r"[\p{Cc}\p{Cf}]", "?")
    return pl.when(text.str.len_chars() > limit).then(text.str.slice(0, limit) + pl.lit("…")).otherwise(text)


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
    """Text → exact decimal; never through a float. Digits past `scale` are cut off (money is parsed
    at DECIMAL(38, 10): providers' lines carry up to 10 decimals); a value too wide gives null."""
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
        try:
            frame = pl.from_arrow(batch)
            frame = frame.with_columns(
                (pl.col(c).struct.json_encode() if isinstance(dt, pl.Struct)
                 else pl.col(c).cast(pl.String) if not isinstance(dt, pl.List) else pl.col(c).list.join(","))
                for c, dt in frame.schema.items()
            ).with_columns(pl.col(pl.String).replace({s: None for s in null_values}))
        except pl.exceptions.PanicException as exc:  # a corrupt page polars cannot convert (a BaseException)
            raise ConnectorError(source_file or str(path), f"not a readable Parquet file (row group after row {rows_before})") from exc
        yield frame.with_columns(
            pl.int_range(rows_before + 1, rows_before + 1 + frame.height, dtype=pl.Int64).alias(ROW_NUMBER)
        )
        rows_before += frame.height
