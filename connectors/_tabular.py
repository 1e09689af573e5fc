"""Shared plumbing for text connectors: streaming CSV as strings, parsing values with polars,
and shaping a frame into a canonical Arrow batch with lineage."""

from __future__ import annotations

import csv
import functools
import io
import queue
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from connectors.base import DECOMPRESSION_ERRORS, GZIP_MAGIC, ZIP_MAGIC, ConnectorError, ReadContext, open_maybe_gzip
from models.currencies import ISO4217

BLOCK_SIZE = 8 << 20  # bytes per streamed CSV block: bounds memory whatever the file size
ROW_NUMBER = "__source_row"
# Where a row stands in its file, where a row number alone does not say (a workbook's sheet and row,
# `sheet 'Sep' row 14`): a quarantined row's reason opens with it.
WHERE = "__where"


def header_fields(head: bytes, delimiter: str = ",", line: int = 1) -> list[str]:
    """Line `line` (1: the first) of a text file as a list of stripped field names (BOM removed)."""
    text = head.decode("utf-8-sig", errors="replace")
    lines = text.splitlines() if line == 1 else physical_lines(text)
    chosen = lines[line - 1] if len(lines) >= line else ""
    return [f.strip() for f in next(csv.reader(io.StringIO(chosen), delimiter=delimiter), [])]


def physical_lines(text: str) -> list[str]:
    """The text's lines as a CSV reader counts them: split at \\n, \\r\\n or \\r only (`str.splitlines`
    also splits at form feeds and Unicode line separators, which a CSV line may hold)."""
    return re.split(r"\r\n|\r|\n", text)


# How far down a file `find_header_line` looks for its header: an export's title, account and
# period lines above it are a handful, never pages.
HEADER_SEARCH_LINES = 30


def first_lines_fields(head: bytes, delimiter: str = ",", max_lines: int = HEADER_SEARCH_LINES) -> list[set[str]]:
    """The stripped fields of each of the file's first `max_lines` lines (a line the CSV reader
    cannot split has none): where a header is looked for, below a title or not."""
    found = []
    for raw in physical_lines(head.decode("utf-8-sig", errors="replace"))[:max_lines]:
        try:
            found.append({f.strip() for f in next(csv.reader(io.StringIO(raw), delimiter=delimiter), [])})
        except csv.Error:
            found.append(set())
    return found


def find_header_line(head: bytes, wanted, delimiter: str = ",", max_lines: int = HEADER_SEARCH_LINES) -> int | None:
    """The line (1: the first) of the first of the file's first `max_lines` lines that names every
    column in `wanted`: the header of a file whose export puts a title, an account or a period
    above it. None when no such line is there."""
    wanted = set(wanted)
    return next((number for number, fields in enumerate(first_lines_fields(head, delimiter, max_lines), 1)
                 if wanted <= fields), None)


# A header as long as this is no header: a CUR's header with hundreds of tag columns is some 100 KiB.
MAX_HEADER_BYTES = 64 << 20


def head_through_line(path: Path, line: int = 1, tolerate_cut: bool = False) -> bytes | None:
    """The file's first bytes, through the end of line `line` (or the whole file, if shorter): the
    sniff's 64 KiB, read on where a header is longer (a CUR with two thousand tag columns), so it
    is never cut into fewer names than the rows have fields. None past MAX_HEADER_BYTES."""
    size = 1 << 16
    while True:
        head = read_head(path, size, tolerate_cut=tolerate_cut)
        if len(head) < size or len(physical_lines(head.decode("utf-8", errors="replace"))) > line:
            return head
        if size >= MAX_HEADER_BYTES:
            return None
        size *= 4


def _input_stream(path: Path):
    """A pyarrow input stream over the file, decompressing gzip found by content and a one-file
    `.zip` archive."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic[:2] == GZIP_MAGIC:
        return pa.CompressedInputStream(pa.OSFile(str(path)), "gzip")
    if magic == ZIP_MAGIC:  # open_maybe_gzip decides: the one file of a .zip, else the bytes
        return pa.PythonFile(open_maybe_gzip(path), mode="r")
    return pa.OSFile(str(path))


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
        self._ready = bytearray()  # whole lines not handed out yet
        self._pending = b""  # what follows the last newline read so far
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

    def _whole_lines(self, size: int) -> bytearray:
        """About `size` more bytes of the file up to its last newline in them (the pending part line
        first), read into one buffer; empty at the end. Arrow asks a block (8 MB) at a time: reading
        it in 1 MB pieces, each copied twice, had doubled the time Arrow took to parse it."""
        while not self._eof:
            held = len(self._pending)
            buffer = bytearray(held + max(size - held, self.CHUNK))
            buffer[:held] = self._pending
            try:  # one read at most: a gzip stream cut short then loses nothing decompressed before the cut
                got = self._raw.readinto1(memoryview(buffer)[held:])
            except EOFError:  # gzip: "Compressed file ended before the end-of-stream marker was reached"
                self.stream_cut, got = True, 0
            if not got:
                self._eof, self.tail, self._pending = True, self._pending, b""
                break
            del buffer[held + got:]
            cut = buffer.rfind(b"\n") + 1
            if not cut and len(buffer) <= self.LONGEST_LINE:
                self._pending = bytes(buffer)  # no line ends in it yet
                continue
            cut = cut or len(buffer)  # past LONGEST_LINE: passed on whole, for Arrow to refuse
            self.lines += buffer.count(b"\n", 0, cut)
            self._pending = bytes(buffer[cut:])
            del buffer[cut:]
            return buffer
        return bytearray()

    def read(self, size: int = -1) -> bytes | bytearray:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(self.CHUNK), b""))
        if not self._ready:
            self._ready = self._whole_lines(size)
        if len(self._ready) <= size:
            out, self._ready = self._ready, bytearray()
            return out
        out = bytes(self._ready[:size])  # a line longer than asked for: the rest on the next read
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


# Cells (rows x columns) a ragged file's Python read gathers into one frame: each is a Python string
# until the frame is built, so this bounds its memory (the common path is Arrow's, by block).
FALLBACK_BATCH_CELLS = 1_000_000
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes surrogateescape kept: not text in the encoding


def _ends_inside_quotes(text: str, delimiter: str, quote: str = '"') -> bool:
    """True when `text`, the raw lines of one record, ends inside a quoted value: the record was cut
    short. Python's csv reader (not strict) hands such a record on as if complete, so the last
    record of a file is checked with this small state machine, which reads quotes as csv does."""
    state = 0  # 0 start of a field, 1 in an unquoted field, 2 in a quoted field, 3 a quote inside one
    for ch in text:
        if state == 2:
            if ch == quote:
                state = 3
        elif ch == delimiter or ch in "\r\n":
            state = 0
        elif state == 0:
            state = 2 if ch == quote else 1
        elif state == 3:
            state = 2 if ch == quote else 1
    return state == 2


def _records(lines: CompleteLines, encoding: str, delimiter: str, source_file: str) -> Iterator[tuple[int, list[str], str]]:
    """Each CSV record of the file's complete lines as (its first line, its fields, its raw text),
    parsed by Python's csv module; a quoted value may span lines."""
    consumed: list[str] = []

    def feed() -> Iterator[str]:
        for _, raw in lines.numbered_lines():
            text = raw.decode(encoding, errors="surrogateescape")
            consumed.append(text)
            yield text

    reader = csv.reader(feed(), delimiter=delimiter)
    first = 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a bare carriage return inside an unquoted value, above all
            what = "a line break inside an unquoted value" if "new-line" in str(exc) else str(exc)
            raise ConnectorError(source_file, f"malformed CSV: {what}", line=reader.line_num) from exc
        yield first, fields, "".join(consumed)
        consumed.clear()
        first = reader.line_num + 1


def _names(fields: list[str], names: list[str]) -> bool:
    """Whether a record's fields are the header's `names` (as read: BOM and spaces stripped)."""
    return [f.lstrip("\ufeff").strip() for f in fields] == names


def _is_header(lines: "CompleteLines", names: list[str], encoding: str, delimiter: str) -> bool:
    """Whether what follows the file's last newline, read to its end, is the header line itself."""
    try:
        fields = next(csv.reader([lines.tail.decode(encoding, errors="replace")], delimiter=delimiter), [])
    except csv.Error:
        return False
    return not lines.stream_cut and _names(fields, names)


def _python_frames(path: Path, source_file: str, names: list[str], null_values: Sequence[str], delimiter: str,
                   encoding: str, on_truncated: Callable[[TruncatedTail], None] | None, skip: int,
                   ctx: ReadContext | None, connector: str | None, header_line: int = 1) -> Iterator[pl.DataFrame]:
    """The file read again from its start with Python's csv module, for what Arrow refuses: data
    rows 1..`skip` (already passed on) are skipped, the rest come as frames numbered like Arrow's.

    A row with fewer fields than the header gets its missing last columns empty (one warning on the
    file says how many); a row with more is quarantined with its reason (without a `ctx` the file
    is refused). The last record decides truncation: a file that ends mid-row (inside a quoted value,
    or a last line without its newline and short of fields, or a gzip stream cut short) is refused
    whole, naming the line, or with `on_truncated` (telemetry) hands its tail on as Arrow's path does.
    Memory stays bounded: one frame of rows and one record at a time.
    """
    width, nulls = len(names), frozenset(null_values)
    batch_rows = max(1, FALLBACK_BATCH_CELLS // width)
    lines = CompleteLines(path)
    columns: list[list[str | None]] = [[] for _ in names]
    numbers: list[int] = []
    row = 0
    short: list[tuple[int, int]] = []  # (line, fields) of the first short row, and a count
    short_rows = 0

    def refuse_cut(line: int) -> ConnectorError:
        cut = " (compressed stream cut short)" if lines.stream_cut else ""
        return ConnectorError(source_file, f"file ends mid-row at line {line}{cut}: a partial file is refused whole", line=line)

    def take(line: int, fields: list[str], raw: str) -> None:
        nonlocal row, short_rows
        row += 1
        if row <= skip:
            return
        if _UNDECODABLE.search(raw) is not None:
            column = next((n for n, v in zip(names, fields) if _UNDECODABLE.search(v)), names[0])
            raise ConnectorError(source_file, f"malformed CSV: column {column}: not valid {encoding} text", line=line)
        if len(fields) > width:
            reason = (f"Expected {width} columns, got {len(fields)}: values past the last column, {names[-1]}")
            if ctx is None:
                raise ConnectorError(source_file, f"malformed CSV: {reason}", line=line)
            ctx.quarantine(connector or "", row, f"line {line}: {reason}",
                           raw.rstrip("\r\n")[:TAIL_RECORD_BYTES])
            return
        if len(fields) < width:
            short_rows += 1
            if not short:
                short.append((line, len(fields)))
            fields = fields + [""] * (width - len(fields))
        for column, value in zip(columns, fields):
            column.append(None if value in nulls else value)
        numbers.append(row)

    def frame() -> pl.DataFrame:
        out = pl.DataFrame({n: c for n, c in zip(names, columns)}, schema={n: pl.String for n in names})
        out = out.with_columns(pl.Series(ROW_NUMBER, numbers, dtype=pl.Int64))
        for column in columns:
            column.clear()
        numbers.clear()
        return out

    records = _records(lines, encoding, delimiter, source_file)
    try:
        if header_line == 1:
            header_passed = next(records, None) is not None  # the header, read already
        else:
            # The lines above the header are passed by finding the header itself: Arrow and the
            # header's search count lines at every \r or \n, this reader's records at \n and across
            # quoted values, so a count could start below the header and lose lines unseen.
            header_passed = False
            for _, fields, _ in records:
                if _names(fields, names):
                    header_passed = True
                    break
        if not header_passed and _is_header(lines, names, encoding, delimiter):
            return  # the file is its header without a newline: no rows (not the header read as one)
        if not header_passed and header_line != 1:
            raise ConnectorError(source_file, f"the header found at line {header_line} is not there reading the "
                                 "file record by record (a quote opened above it and never closed?)", line=header_line)
        last = None
        for record in records:
            if last is not None and last[1]:  # an empty line is no row (Arrow skips them too)
                take(*last)
                if len(numbers) >= batch_rows:
                    yield frame()
            last = record
        tail = None
        if last is not None and last[1]:
            if _ends_inside_quotes(last[2], delimiter):  # the complete lines end inside a quoted value
                if on_truncated is None:
                    raise refuse_cut(last[0])
                tail = TruncatedTail(last[0], row + 1, last[2].encode(encoding, errors="surrogateescape") + lines.tail,
                                     lines.stream_cut)
            else:
                take(*last)
        tail = tail or lines.truncated_tail(row=row + 1)
        if tail is not None and on_truncated is None:
            try:
                fields = next(csv.reader([tail.raw.decode(encoding, errors="surrogateescape")], delimiter=delimiter), [])
            except csv.Error:  # a bare carriage return in the tail: not a row that can be complete
                fields = []
            complete = (not tail.stream_cut and len(fields) >= width
                        and not _ends_inside_quotes(tail.raw.decode(encoding, errors="replace"), delimiter))
            if tail.raw.strip() and not complete:
                raise refuse_cut(tail.line)
            if tail.stream_cut:
                raise ConnectorError(source_file, f"compressed stream ends early after line {tail.line - 1}: "
                                     "a partial file is refused whole", line=tail.line)
            if fields:  # a last row whole but for its newline
                take(tail.line, fields, tail.raw.decode(encoding, errors="surrogateescape"))
            tail = None
    finally:
        lines.close()
    if numbers:
        yield frame()
    if short_rows and ctx is not None:
        line, got = short[0]
        ctx.warn(f"{short_rows} row{'s' if short_rows > 1 else ''} with fewer fields than the header's {width}: "
                 f"the missing last columns are empty (first at line {line}, {got} fields)")
    if tail is not None and on_truncated is not None:
        on_truncated(tail)


def _refuse_cut_stream(path: Path, source_file: str) -> ConnectorError:
    """A billing file whose compressed stream ends early, refused naming the line it ends on (the
    lines are counted again, only after the failure)."""
    lines = CompleteLines(path)
    while lines.read(CompleteLines.CHUNK * 8):
        pass
    lines.close()
    line = lines.lines + 1
    if lines.tail.strip():
        return ConnectorError(source_file, f"file ends mid-row at line {line} (compressed stream cut short): "
                              "a partial file is refused whole", line=line)
    return ConnectorError(source_file, f"compressed stream ends early after line {line - 1}: "
                          "a partial file is refused whole", line=line)


def stream_csv_as_strings(
    path: Path,
    source_file: str,
    null_values: Sequence[str] = ("",),
    delimiter: str = ",",
    encoding: str = "utf-8",
    on_truncated: Callable[[TruncatedTail], None] | None = None,
    ctx: ReadContext | None = None,
    connector: str | None = None,
    header_line: int = 1,
) -> Iterator[pl.DataFrame]:
    """Stream a headed CSV as polars frames of strings, numbering data rows from 1.

    The header is line `header_line` of the file (`find_header_line` finds it below a title); the
    lines above it are no rows.

    Everything is read as text so each connector decides how to parse, and a bad value becomes a
    quarantined row instead of a failed file.

    Arrow reads the file block by block (the common, fast path). What Arrow refuses, a ragged row
    above all, is read on from that point by Python's csv module (`_python_frames`): a row with fewer
    fields than the header loads with its missing last columns empty and a warning on `ctx`; a row
    with more fields is quarantined on `ctx` under `connector` with its reason (refused without a
    `ctx`); text not in `encoding` refuses the file naming the line and column, never quoting the row.

    With `on_truncated` (telemetry), a file that ends mid-row, or a gzip stream that ends early,
    loads every complete row and hands the broken tail to `on_truncated`; without it (billing) such
    a file fails whole, naming the line where it ends.
    """
    try:
        head = head_through_line(path, header_line, tolerate_cut=on_truncated is not None)
    except DECOMPRESSION_ERRORS as exc:
        raise ConnectorError(source_file, f"unreadable compressed file: {exc}", line=1) from exc
    if head is None:
        raise ConnectorError(source_file, f"the header is longer than {MAX_HEADER_BYTES >> 20} MiB", line=header_line)
    names = header_fields(head.decode(encoding, errors="replace").encode(), delimiter, header_line)
    if not names or not any(names):
        raise ConnectorError(source_file, "no header line", line=header_line)
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConnectorError(source_file, f"header names a column more than once: {', '.join(twice)}", line=header_line)

    def python_from(rows_before: int) -> Iterator[pl.DataFrame]:
        return _python_frames(path, source_file, names, null_values, delimiter, encoding, on_truncated,
                              rows_before, ctx, connector, header_line)

    lines = CompleteLines(path) if on_truncated is not None else None
    try:
        reader = pacsv.open_csv(
            pa.PythonFile(lines, mode="r") if lines is not None else _input_stream(path),
            # Our own (stripped, BOM-free) names, so every column is typed as text whatever its spacing.
            read_options=pacsv.ReadOptions(
                block_size=BLOCK_SIZE, encoding=encoding, column_names=names, skip_rows=header_line
            ),
            parse_options=pacsv.ParseOptions(delimiter=delimiter),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names},
                null_values=list(null_values),
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid:
        if lines is not None:
            lines.close()
        yield from python_from(0)
        return
    except (EOFError, OSError) as exc:
        raise _refuse_cut_stream(path, source_file) from exc
    rows_before = 0
    ahead = _read_ahead(reader)
    while True:
        try:
            batch = next(ahead)
        except StopIteration:
            break
        except pa.ArrowInvalid:
            if lines is not None:
                lines.close()
            yield from python_from(rows_before)
            return
        except (EOFError, OSError) as exc:  # a gzip cut short
            raise _refuse_cut_stream(path, source_file) from exc
        try:
            frame = pl.from_arrow(batch)
        except pl.exceptions.DuplicateError as exc:  # names that differ only in bytes Arrow drops (NUL)
            raise ConnectorError(source_file, "header names a column more than once", line=header_line) from exc
        yield frame.with_columns(
            pl.int_range(rows_before + 1, rows_before + 1 + batch.num_rows, dtype=pl.Int64).alias(ROW_NUMBER)
        )
        rows_before += batch.num_rows
    if lines is not None:
        lines.close()
        if tail := lines.truncated_tail(row=rows_before + 1):
            on_truncated(tail)


def _read_ahead(reader: pacsv.CSVStreamingReader, depth: int = 2) -> Iterator[pa.RecordBatch]:
    """The reader's batches, the next ones parsed on a thread while the caller maps this one.

    Arrow's streaming CSV reader parses on the calling thread only (half of a 1M-line CUR's
    connector time), and both it and polars release the GIL: reading ahead puts the parse on the
    other core. Errors come out where the batch would have, in order, so the caller's fallbacks
    (a ragged row, a cut gzip) see exactly the batches before them. At most `depth` batches wait."""
    waiting: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def read() -> None:
        try:
            while not stop.is_set():
                waiting.put(reader.read_next_batch())
        except StopIteration:
            waiting.put(end)
        except BaseException as exc:  # handed to the caller, raised there
            waiting.put(exc)

    thread = threading.Thread(target=read, name="csv-read-ahead", daemon=True)
    thread.start()
    try:
        while (item := waiting.get()) is not end:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:  # the caller stopped early: let the reader finish its batch and go
        stop.set()
        while thread.is_alive():
            try:
                waiting.get(timeout=0.05)
            except queue.Empty:
                pass
        thread.join()


def short_value(column: str | pl.Expr, limit: int = 40) -> pl.Expr:
    """A source value fit to quote in a quarantine reason: control characters replaced, clipped."""
    text = (pl.col(column) if isinstance(column, str) else column).str.replace_all(r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]", "?")
    return pl.when(text.str.len_chars() > limit).then(text.str.slice(0, limit) + pl.lit("…")).otherwise(text)


def cell_reason(label: str, cell: str | pl.Expr, is_not: str) -> pl.Expr:
    """A quarantine reason naming a cell the connector cannot read: `cost is empty` for a blank
    one, else the cell quoted (`cost '12,5x' is not a number`), fit to print."""
    text = (pl.col(cell) if isinstance(cell, str) else cell).fill_null("")
    return pl.when(text.str.strip_chars() == "").then(pl.lit(f"{label} is empty")) \
        .otherwise(pl.format(f"{label} '{{}}' is {is_not}", short_value(text)))


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


def _utc_candidates(column: str, local_tz: str, naive_formats: Sequence[str]) -> list[pl.Expr]:
    return list(_built_candidates(column, local_tz, tuple(naive_formats)))


# Built once per column and zone: building sixteen expressions in Python cost more than parsing a
# frame's dates with the chosen one (a 1M-line CUR parses four date columns in each of ~100 frames).
@functools.lru_cache(maxsize=256)
def _built_candidates(column: str, local_tz: str, naive_formats: tuple[str, ...]) -> tuple[pl.Expr, ...]:
    text = pl.col(column).str.strip_chars()
    aware = [text.str.to_datetime(f, strict=False, time_unit="us", time_zone="UTC") for f in _AWARE_FORMATS]
    naive = [
        text.str.to_datetime(f, strict=False, time_unit="us")
        .dt.replace_time_zone(local_tz, ambiguous="earliest", non_existent="null")
        .dt.convert_time_zone("UTC")
        for f in naive_formats
    ]
    return tuple(aware + naive)


def parse_utc(column: str, local_tz: str = "UTC", naive_formats: Sequence[str] = _NAIVE_FORMATS) -> pl.Expr:
    """Text → UTC timestamp. Times with an offset keep it; times without one are read in local_tz."""
    return pl.coalesce(_utc_candidates(column, local_tz, naive_formats))


def parse_utc_series(frame: pl.DataFrame, column: str, local_tz: str = "UTC",
                     naive_formats: Sequence[str] = _NAIVE_FORMATS) -> pl.Series:
    """`parse_utc` of a frame's column, at the cost of one format instead of sixteen.

    Polars evaluates every branch of a coalesce, so trying each format costs each format's parse
    over the whole column (the dates were 70 % of the AWS CUR connector's time). A column is nearly
    always written in one format: the one its first value parses with is tried on every row, and
    only the rows it leaves empty go through the whole list — the same result as `parse_utc`.

    A column that repeats its values (a billing export's hourly periods: a few hundred distinct
    times in a million lines) is parsed once per distinct value and joined back."""
    candidates = _utc_candidates(column, local_tz, naive_formats)
    if column not in frame.columns:
        return pl.Series(column, [None] * frame.height, dtype=pl.Datetime("us", "UTC"))
    if frame.height == 0:
        return frame.select(pl.coalesce(candidates)).to_series()
    # In first-seen order, so the format chosen below is the one the column's first value picks.
    values = frame.get_column(column)
    distinct = values.drop_nulls().unique(maintain_order=True)
    if distinct.len() * 2 <= frame.height:
        parsed = _parse_with_one_format(distinct.to_frame(), column, candidates)
        # A null is no time: it maps to the default.
        return values.replace_strict(distinct, parsed, default=None, return_dtype=parsed.dtype).alias(column)
    return _parse_with_one_format(frame, column, candidates)


def _parse_with_one_format(frame: pl.DataFrame, column: str, candidates: list[pl.Expr]) -> pl.Series:
    """parse_utc_series over every row: the format the first value parses with, then the whole list
    for the rows it leaves empty."""
    text = frame.get_column(column).str.strip_chars()
    first = frame.filter(text.is_not_null() & (text != "")).head(1)
    if first.height == 0:
        return frame.select(pl.coalesce(candidates)).to_series()
    # Which formats parse it, as booleans: a parsed year outside Python's (-0001) must not reach Python.
    tried = first.select([c.is_not_null().alias(str(i)) for i, c in enumerate(candidates)]).row(0)
    chosen = next((i for i, parses in enumerate(tried) if parses), None)
    if chosen is None:
        return frame.select(pl.coalesce(candidates)).to_series()
    parsed = frame.select(candidates[chosen].alias(column)).to_series()
    missed = (parsed.is_null() & text.is_not_null() & (text != "")).arg_true()
    if len(missed):
        rest = frame[missed].select(pl.coalesce(candidates).alias(column)).to_series()
        parsed = parsed.scatter(missed, rest)
    return parsed


def parse_decimal(column: str, precision: int, scale: int) -> pl.Expr:
    """Text → exact decimal; never through a float. Digits past `scale` are cut off (money is parsed
    at DECIMAL(38, 10): providers' lines carry up to 10 decimals); a value too wide gives null."""
    return pl.col(column).str.strip_chars().cast(pl.Decimal(precision, scale), strict=False)


def failed(column: str, parsed: pl.Expr) -> pl.Expr:
    """True where the source had a value but parsing it gave nothing."""
    return pl.col(column).is_not_null() & (pl.col(column).str.strip_chars() != "") & parsed.is_null()


def split_rejected(frame: pl.DataFrame, reason: pl.Expr, ctx: ReadContext, connector: str,
                   raw_columns: Sequence[str], amount: pl.Expr | None = None,
                   currency: pl.Expr | None = None) -> pl.DataFrame:
    """Send rows with a non-null `reason` to the quarantine; return the accepted rows.

    `amount` (billing files) is the row's money as the source states it: its total over all rows
    and over the rejected ones is added to the context, for the reconciliation check. `currency`
    is the row's currency as the connector loads it (the expression its ISO 4217 check reads): the
    rejected money is declared by currency (an ISO code, or none where the row's is not one), so
    it is never added across currencies.
    """
    frame = frame.with_columns(_reasons(frame, reason))
    if WHERE in frame.columns:  # `sheet 'Sep' row 14: amount is empty`: findable in the workbook
        frame = frame.with_columns(pl.when(pl.col("__reason").is_not_null() & pl.col(WHERE).is_not_null())
                                   .then(pl.format("{}: {}", pl.col(WHERE), pl.col("__reason")))
                                   .otherwise(pl.col("__reason")).alias("__reason"))
    rejected = frame.filter(pl.col("__reason").is_not_null())
    if amount is not None:
        stated = frame.select(amount.sum()).item()
        ctx.declare_money(str(stated or 0))
        if rejected.height and currency is None:
            ctx.declare_money(0, str(rejected.select(amount.sum()).item() or 0))
        elif rejected.height:
            by_currency = (rejected.select(pl.when(currency.is_in(ISO4217)).then(currency).alias("currency"), amount.alias("amount"))
                           .group_by("currency").agg(pl.col("amount").sum()).sort("currency", nulls_last=True))
            for code_of, money in by_currency.iter_rows():
                ctx.declare_money(0, str(money or 0), code_of)
    for row in rejected.select(ROW_NUMBER, "__reason", *(c for c in raw_columns if c in rejected.columns)).iter_rows(named=True):
        record = {c: row[c] for c in raw_columns if c in row}
        ctx.quarantine(connector, row[ROW_NUMBER], row["__reason"], record)
    return frame.filter(pl.col("__reason").is_null()).drop("__reason")


def _reasons(frame: pl.DataFrame, reason: pl.Expr) -> pl.Series:
    """`reason` over the frame, as column `__reason`. A `first_reason` expression is worded for the
    rows one of its checks flags, only: polars evaluates every branch of a when/then over the whole
    frame, so messages that format a value (a timestamp, a short quote of the cell) cost more than
    the parse they report on (1.5 s of 2M nvidia-smi samples). The result is the same: a row no
    check flags has no reason either way."""
    checks = getattr(reason, "_finops_checks", None)
    if checks is None:
        return frame.select(reason.alias("__reason")).to_series()
    if not checks or frame.height == 0:
        return pl.Series("__reason", [None] * frame.height, dtype=pl.String)
    flagged = frame.select(pl.any_horizontal([cond.fill_null(False) for cond, _ in checks])).to_series().arg_true()
    reasons = pl.Series("__reason", [None] * frame.height, dtype=pl.String)
    if len(flagged):
        reasons = reasons.scatter(flagged, frame[flagged].select(reason.cast(pl.String)).to_series())
    return reasons


UNWORDED = "rejected by a check whose message quotes an empty cell"


def first_reason(checks: Sequence[tuple[pl.Expr, pl.Expr | str]]) -> pl.Expr:
    """The message of the first failing check per row, or null when all pass. (`split_rejected`
    words it for the rows a check flags only; any other use evaluates it as it stands.)"""
    checks = list(checks)
    # A message that formats an empty cell is itself empty (`pl.format` of a null): the row is still
    # flagged, never let through for want of words.
    reason = pl.coalesce(
        [pl.when(cond).then(pl.coalesce(msg, pl.lit(UNWORDED)) if isinstance(msg, pl.Expr) else pl.lit(msg))
         for cond, msg in checks]
        + [pl.lit(None, dtype=pl.String)]
    )
    reason._finops_checks = tuple(checks)
    return reason


def number_rows(frame: pl.DataFrame, start: int = 1) -> pl.DataFrame:
    """`frame` with its source row numbers (column ROW_NUMBER), counting from `start`: for frames a
    connector builds itself (JSON, a custom parser), so every canonical row names its source row."""
    return frame.with_columns(pl.int_range(start, start + frame.height, dtype=pl.Int64).alias(ROW_NUMBER))


def to_canonical(frame: pl.DataFrame, schema: pa.Schema | str, connector: str, ctx: ReadContext) -> pa.RecordBatch:
    """Order, fill and type the columns exactly as `schema` (or the schema of a kind) says, adding
    lineage: x_Connector, x_SourceFile, x_SourceSha256, x_IngestedAt from `ctx`, and x_SourceRow
    from the frame's ROW_NUMBER column, which the streaming readers add and `number_rows` adds to
    any other frame. A frame without it is a connector bug, refused with a TypeError saying so."""
    from models.schemas import SCHEMAS

    if isinstance(schema, str):
        if schema not in SCHEMAS:
            raise TypeError(f"unknown kind {schema!r}: one of {', '.join(SCHEMAS)}")
        schema = SCHEMAS[schema]
    if ROW_NUMBER not in frame.columns:
        raise TypeError(
            f"connector {connector}: the frame has no {ROW_NUMBER!r} column (the source row of each record, for lineage). "
            f"Keep the SOURCE_ROW column the streaming readers give in your select, or add it with number_rows(frame)")
    frame = frame.with_columns(
        pl.lit(connector).alias("x_Connector"),
        pl.lit(ctx.source_file).alias("x_SourceFile"),
        pl.lit(ctx.source_sha256).alias("x_SourceSha256"),
        pl.col(ROW_NUMBER).cast(pl.Int64).alias("x_SourceRow"),
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
        for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            # A corrupt page can decode to text that is not UTF-8: Arrow's full validation refuses it
            # here, before polars panics on it later.
            batch.validate(full=True)
            yield batch
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
