"""Excel workbooks (.xlsx) as frames of text, the way `stream_csv_as_strings` gives a CSV's.

Many GPU clouds' consoles export invoices only as workbooks. fastexcel (Rust's calamine, through
Arrow) reads them; it is imported only when a workbook is met. A workbook is read whole, sheet by
sheet: an invoice is thousands of lines, and a sheet holds at most 1,048,576.

Cells become the text a person sees in Excel, so the connector parses them as it parses a CSV's:
- a number is written with Excel's 15 significant digits (`355.2`, not `355.19999999999999`; a
  formula's `0.1+0.2` is `0.3`), never in exponent form, and a whole number without `.0`;
- a date and time as fastexcel writes it, `2026-09-01 08:00:00`, in no zone: the mapping's zone
  reads them (`WORKBOOK_TIME_FORMATS` are tried after the mapping's own formats);
- text as it is, a boolean as `true` or `false`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import polars as pl

from connectors._tabular import HEADER_SEARCH_LINES, ROW_NUMBER
from connectors.base import ConnectorError, printable

WORKBOOK_SUFFIXES = (".xlsx", ".xlsm")
ZIP_MAGIC = b"PK\x03\x04"
# The time formats a workbook's date cells are written in (see the module docstring).
WORKBOOK_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S%.3f", "%Y-%m-%d")
FRAME_ROWS = 50_000


def is_workbook(path: Path, head: bytes) -> bool:
    """An .xlsx (or .xlsm) file: a zip archive by content, a workbook by name."""
    return head.startswith(ZIP_MAGIC) and path.suffix.lower() in WORKBOOK_SUFFIXES


def _fastexcel():
    import fastexcel

    return fastexcel


@functools.lru_cache(maxsize=32)
def _top_rows(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """Each sheet's name and first rows as stripped text; kept per file version, since every
    mapping connector asks the same workbook for its header."""
    reader = _fastexcel().read_excel(path)
    sheets = []
    for name in reader.sheet_names:
        frame = reader.load_sheet(name, header_row=None, n_rows=HEADER_SEARCH_LINES, dtypes="string").to_polars()
        sheets.append((name, tuple(tuple((cell or "").strip() for cell in row) for row in frame.iter_rows())))
    return tuple(sheets)


def find_workbook_header(path: Path, wanted) -> tuple[str, int] | None:
    """The sheet and row (0: its first) of the first row naming every column in `wanted`, within
    each sheet's first rows, in the first sheet that has one; None where none does or the file is
    no workbook fastexcel can open."""
    wanted = set(wanted)
    try:
        stat = path.stat()
        sheets = _top_rows(str(path), stat.st_mtime_ns, stat.st_size)
    except Exception:  # noqa: BLE001 - calamine's errors (a damaged archive, an encrypted book) are many
        return None
    for name, rows in sheets:
        for index, row in enumerate(rows):
            if wanted <= set(row):
                return name, index
    return None


def stream_workbook_as_strings(path: Path, source_file: str, sheet: str, header_row: int,
                               decimal_separator: str = ".") -> Iterator[pl.DataFrame]:
    """The sheet's rows under its header (row `header_row`, 0 the first) as frames of text,
    numbered from 1 in SOURCE_ROW as the sheet has them (an empty row keeps its number, and is no
    row); ConnectorError when the workbook cannot be read. Number cells are written with
    `decimal_separator`, so a reader told the file writes `1234,5` reads them as it reads the
    sheet's text cells."""
    try:
        reader = _fastexcel().read_excel(str(path))
        # Read twice: as text (dates, booleans and text as Excel shows them) and as numbers, whose
        # text fastexcel writes to 9 decimals (`1234567890.123456001`) where Excel shows 15 digits.
        texts = reader.load_sheet(sheet, header_row=header_row, dtypes="string").to_polars()
        numbers = reader.load_sheet(sheet, header_row=header_row, dtypes="float").to_polars()
    except Exception as exc:  # noqa: BLE001 - see find_workbook_header
        raise ConnectorError(source_file, f"unreadable workbook (sheet {printable(sheet)!r}): {type(exc).__name__}: {exc}",
                             line=header_row + 1) from exc
    frame = pl.DataFrame([_cell_texts(texts[c], numbers[c], decimal_separator).alias(c.strip()) for c in texts.columns])
    frame = frame.with_columns(pl.int_range(1, frame.height + 1, dtype=pl.Int64).alias(ROW_NUMBER))
    cells = [c for c in frame.columns if c != ROW_NUMBER]
    if cells:
        frame = frame.filter(pl.any_horizontal([pl.col(c).is_not_null() & (pl.col(c).str.strip_chars() != "") for c in cells]))
    for start in range(0, frame.height, FRAME_ROWS):
        yield frame.slice(start, FRAME_ROWS)


def _cell_texts(texts: pl.Series, numbers: pl.Series, decimal_separator: str) -> pl.Series:
    """A column's cells as text: a number cell as Excel shows it, any other cell as fastexcel
    writes it (a boolean, which the numbers read as 1 or 0, stays `true` or `false`)."""
    if numbers.null_count() == len(numbers):
        return texts
    return pl.Series(texts.name, [
        number_text(number).replace(".", decimal_separator) if number is not None and text not in ("true", "false") else text
        for text, number in zip(texts.to_list(), numbers.to_list(), strict=True)], dtype=pl.String)


def number_text(value: float) -> str:
    """A cell's number as Excel shows it: 15 significant digits, no exponent, no trailing zeros."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    text = format(Decimal(f"{value:.15g}"), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
