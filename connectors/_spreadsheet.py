"""Excel workbooks (.xlsx) as frames of text, the way `stream_csv_as_strings` gives a CSV's.

Many GPU clouds' consoles export invoices only as workbooks. python-calamine (Rust's calamine)
reads them with each cell's type, and is imported only when a workbook is met. A sheet is read
row by row into frames of FRAME_ROWS rows.

Every visible worksheet whose first rows hold the header is read, in the workbook's order (a
month a sheet); hidden sheets (a template) and sheets without the header (a summary) are not.
Rows are numbered across the sheets read, from 1 under the first sheet's header; an empty row
keeps its number and is no row.

Cells become the text a person sees in Excel, so the connector parses them as it parses a CSV's:
- a number cell is written with Excel's 15 significant digits (`355.2`, not `355.19999999999999`;
  a formula's `0.1+0.2` is `0.3`), never in exponent form, a whole number without `.0`, with the
  mapping's decimal separator; a text cell stays as written, digits and leading zeros included;
- a date-and-time cell as `2026-09-01 08:00:00` (milliseconds where it has them), a date cell as
  `2026-09-01`, in no zone: the mapping's zone reads them;
- a boolean as `true` or `false`, a duration as `36:00:00`;
- a range of merged cells has its value on each of its rows and columns, as Excel shows it, but
  in the columns the reader names (an amount merged across a group's rows counts once);
- a formula reads as the value the file stores for it; an error cell (`#N/A`) reads as empty.
"""

from __future__ import annotations

import functools
import re
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from xml.etree import ElementTree

import polars as pl

from connectors._tabular import HEADER_SEARCH_LINES, ROW_NUMBER, WHERE
from connectors.base import ZIP_MAGIC, ConnectorError, printable

WORKBOOK_SUFFIXES = (".xlsx", ".xlsm")
# calamine holds a sheet as a dense range of its used extent: one stray cell at XFD20000 makes
# 327 million cells (some 10 GB). A sheet whose extent is larger than this is refused, named.
MAX_SHEET_CELLS = 10_000_000
# The time formats a workbook's date cells are written in (see the module docstring).
WORKBOOK_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S%.3f", "%Y-%m-%d")
FRAME_ROWS = 50_000


def is_workbook(path: Path, head: bytes) -> bool:
    """An .xlsx (or .xlsm) file: a zip archive by content, a workbook by name."""
    return head.startswith(ZIP_MAGIC) and path.suffix.lower() in WORKBOOK_SUFFIXES


def _calamine():
    import python_calamine

    return python_calamine


def _visible_worksheets(book) -> list[str]:
    kinds = _calamine()
    return [m.name for m in book.sheets_metadata
            if m.typ == kinds.SheetTypeEnum.WorkSheet and m.visible == kinds.SheetVisibleEnum.Visible]


@functools.lru_cache(maxsize=32)
def _top_rows(path: str, version: tuple) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
    """Each visible worksheet's name and first rows as stripped text, kept per file version (its
    inode, size and times), since every mapping connector asks the same workbook for its header."""
    parts = sheet_parts(Path(path))
    book = _calamine().CalamineWorkbook.from_path(path)
    try:
        sheets = []
        for name in _visible_worksheets(book):
            if oversized(Path(path), parts.get(name)) is not None:
                continue  # not opened: `workbook_problems` says why
            rows = []
            for row in book.get_sheet_by_name(name).iter_rows():
                rows.append(tuple(_cell_text(cell, ".") or "" for cell in row))
                if len(rows) == HEADER_SEARCH_LINES:
                    break
            sheets.append((name, tuple(tuple(c.strip() for c in row) for row in rows)))
        return tuple(sheets)
    finally:
        book.close()


def workbook_problems(path: Path) -> list[str]:
    """What keeps sheets of the workbook from being read: each sheet too large to open."""
    parts = sheet_parts(path)
    return [f"sheet {printable(name)!r} {problem}" for name, part in parts.items()
            if (problem := oversized(path, part)) is not None]


def find_workbook_headers(path: Path, wanted) -> list[tuple[str, int]]:
    """Each visible worksheet whose first rows name every column in `wanted`, as (sheet, row of
    its header, 0 the sheet's first); empty where none does or the file is no workbook calamine can
    open."""
    wanted = set(wanted)
    try:
        stat = path.stat()
        sheets = _top_rows(str(path), (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns))
    except Exception:  # noqa: BLE001 - calamine's errors (a damaged archive, an encrypted book) are many
        return []
    found = []
    for name, rows in sheets:
        row = next((index for index, cells in enumerate(rows) if wanted <= set(cells)), None)
        if row is not None:
            found.append((name, row))
    return found


def stream_workbook_as_strings(path: Path, source_file: str, sheets: list[tuple[str, int]],
                               decimal_separator: str = ".", unmerged: Iterable[str] = (),
                               where: bool = False) -> Iterator[pl.DataFrame]:
    """The rows under each sheet's header (sheet, header row; see `find_workbook_headers`) as
    frames of text, numbered across the sheets in SOURCE_ROW; ConnectorError when the workbook
    cannot be read or a header names a column twice. Number cells are written with
    `decimal_separator`, so a reader told the file writes `1234,5` reads them as it reads text.
    A merged range's value is given to each cell it spans but in the `unmerged` columns (an
    amount: money merged across a group's rows is the group's once, never once a row). With `where`,
    each frame also says where each row is (column WHERE: `sheet 'S' row 9`, the row Excel shows)."""
    try:
        parts = sheet_parts(path)
        for name, _ in sheets:
            if (too_large := oversized(path, parts.get(name))) is not None:
                raise ConnectorError(source_file, f"sheet {printable(name)!r} {too_large}")
        book = _calamine().CalamineWorkbook.from_path(str(path))
        computed_by_excel = left_to_excel(path)
    except ConnectorError:
        raise
    except Exception as exc:  # noqa: BLE001 - see find_workbook_headers
        raise ConnectorError(source_file, f"unreadable workbook: {type(exc).__name__}: {exc}") from exc
    rows_before = 0
    try:
        for name, header_row in sheets:
            part = parts.get(name)
            try:
                sheet = book.get_sheet_by_name(name)
                # Rows come from the sheet's first row, columns from its first used one (the sheet's
                # start); merged ranges and cell references count from A1.
                first_column = (sheet.start or (0, 0))[1]
                merges = _Merges(sheet.merged_cell_ranges or [], first_column)
                errors = _cells_as_written(path, part, first_column, computed_by_excel) if part else {}
                rows = enumerate(sheet.iter_rows())
                header = None
                for index, row in rows:
                    merges.see(index, row)
                    if index == header_row:  # a title merged across the header's columns names the first
                        header = [(_cell_text(c, ".") or "").strip() for c in row]
                        break
                if header is None:
                    raise ValueError(f"no row {header_row + 1}, where its header was found")
            except Exception as exc:  # noqa: BLE001
                raise ConnectorError(source_file, f"unreadable workbook (sheet {printable(name)!r}): "
                                     f"{type(exc).__name__}: {exc}", line=header_row + 1) from exc
            names = _column_names(header, source_file, name, header_row)
            merges.keep_first({n for n, column in enumerate(names) if column in set(unmerged)})
            number = rows_before
            columns: list[list[str | None]] = [[] for _ in names]
            numbers: list[int] = []
            wheres: list[str] = []
            sheet_name = printable(name)
            for index, row in _named_rows(rows, source_file, name):
                number += 1
                if index in errors:  # `#N/A`, a formula not computed: never read as empty (a merged range's too)
                    row = list(row)
                    for column, error in errors[index].items():
                        if column < len(row):
                            row[column] = error
                merges.see(index, row)
                own = [_cell_text(cell, decimal_separator) for cell in row]
                if not any(t and t.strip() for t in own):  # a spacer row a merged id runs through is no line
                    continue
                texts = merges.fill_texts(index, own, lambda cell: _cell_text(cell, decimal_separator))
                texts += [None] * (len(names) - len(texts))
                for column, text in zip(columns, texts, strict=False):
                    column.append(text)
                numbers.append(number)
                if where:
                    wheres.append(f"sheet {sheet_name!r} row {index + 1}")  # the row Excel shows
                if len(numbers) == FRAME_ROWS:
                    yield _frame(names, columns, numbers, wheres)
            if numbers:
                yield _frame(names, columns, numbers, wheres)
            rows_before = number
    finally:
        book.close()


class _Merges:
    """A sheet's merged ranges, filled as the rows go by: each cell of a range takes the value of
    its first (top left) cell, as Excel shows one value across the range (an invoice id merged down
    its lines names each of them). Ranges are indexed by row, so a sheet of many costs no more."""

    def __init__(self, ranges, first_column: int = 0):
        self.starting: dict[int, list[int]] = {}
        self.covering: dict[int, list[tuple[tuple[int, int], int, int]]] = {}
        for (top, absolute_left), (bottom, absolute_right) in ranges:
            left, right = absolute_left - first_column, absolute_right - first_column
            if right < 0:
                continue
            left = max(left, 0)
            self.starting.setdefault(top, []).append(left)
            for index in range(top, bottom + 1):
                self.covering.setdefault(index, []).append(((top, left), left, right))
        self.first_values: dict[tuple[int, int], object] = {}
        self.unfilled: set[int] = set()

    def keep_first(self, columns: set[int]) -> None:
        """Columns whose merged value stays on its range's first row alone."""
        self.unfilled = columns

    def see(self, index: int, row: list) -> None:
        for left in self.starting.get(index, ()):
            if left < len(row):
                self.first_values[(index, left)] = row[left]

    def fill_texts(self, index: int, texts: list, as_text) -> list:
        """The row's texts with each merged range's first value (as text) in the cells it spans."""
        covering = self.covering.get(index)
        if not covering:
            return texts
        texts = list(texts)
        for first, left, right in covering:
            if first in self.first_values:
                if right >= len(texts):
                    texts += [None] * (right + 1 - len(texts))
                for column in range(left, right + 1):
                    if (index, column) != first and column not in self.unfilled:
                        texts[column] = as_text(self.first_values[first])
        return texts


def _named_rows(rows, source_file: str, sheet: str):
    """The sheet's rows; a cell calamine cannot turn into a value (a duration of 10^10 days)
    refuses the workbook naming the sheet and the row, not a bare library error."""
    index = None
    while True:
        try:
            index, row = next(rows)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - calamine's value errors (OverflowError, ValueError)
            where = f"after row {index + 1}" if index is not None else "in its first rows"
            raise ConnectorError(source_file, f"sheet {printable(sheet)!r}: a cell {where} cannot be read "
                                 f"({type(exc).__name__}: {exc})") from exc
        yield index, row


# -- the sheets' XML parts: their extent and their error cells, which calamine does not say -------

_MAIN = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_RELATIONSHIP = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_CELL = re.compile(r"([A-Z]+)(\d+)")


def sheet_parts(path: Path) -> dict[str, str]:
    """Each sheet's name → its XML part in the archive, from the workbook and its relationships;
    empty where they cannot be read (the sheets are then read without these checks)."""
    try:
        with zipfile.ZipFile(path) as archive:
            book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
            relations = ElementTree.fromstring(archive.read("xl/_rels/workbook.xml.rels"))
    except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, OSError):
        return {}
    targets = {r.get("Id"): r.get("Target") or "" for r in relations}
    parts = {}
    for sheet in book.iter(f"{_MAIN}sheet"):
        target = targets.get(sheet.get(_RELATIONSHIP), "")
        if target:
            parts[sheet.get("name")] = target.lstrip("/") if target.startswith("/") else f"xl/{target}"
    return parts


def _column_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - ord("A") + 1
    return number


@dataclass(frozen=True)
class SheetScan:
    """What one streamed pass over a sheet's XML finds: its extent as its cells' references say
    (a stale or missing `<dimension>` cannot hide a stray cell far away), whether any cell is
    an error (`t="e"`), whether any formula stores no result, and whether it has formulas at all
    (a workbook left to Excel stores 0 for them): only then is the sheet's XML parsed for its cells."""

    last_row: int
    last_column: int
    first_row: int
    first_column: int
    has_errors: bool
    has_unvalued_formulas: bool = False
    has_formulas: bool = False

    @property
    def cells(self) -> int:
        if not self.last_row:
            return 0
        return (self.last_row - self.first_row + 1) * (self.last_column - self.first_column + 1)


_REF = {width: re.compile(rb"""\sr=["']([A-Z]{%d})(\d+)["']""" % width) for width in (3, 2, 1)}
_ROW = re.compile(rb"""<(?:\w+:)?row\b[^>]*?\sr=["'](\d+)["']""")
_ERROR = re.compile(rb"""\st=["']e["']""")
# Any formula; and a formula's end (`</f>`, or a shared formula's `<f .../>`) followed by the cell's
# end or an empty `<v/>` (openpyxl's): no result stored. In a workbook left to Excel any formula has
# its cell read from the XML (a stored 0 is no result there); elsewhere only these.
_FORMULA = re.compile(rb"<(?:\w+:)?f[\s>/]")
_FORMULA_END = rb"(?:</(?:\w+:)?f\s*>|<(?:\w+:)?f\b[^>]*/>)\s*"
_UNVALUED_FORMULA = re.compile(_FORMULA_END + rb"(?:</(?:\w+:)?c\s*>|<(?:\w+:)?v\s*/>|<(?:\w+:)?v\s*>\s*</(?:\w+:)?v\s*>)")
_OVERLAP = 512  # bytes carried from one chunk to the next: no attribute or formula's end is cut unseen


@functools.lru_cache(maxsize=64)
def _scan_part(path: str, version: tuple, part: str) -> SheetScan | None:
    try:
        with zipfile.ZipFile(path) as archive, archive.open(part) as fh:
            first_row = first_column = None
            last_row = last_column = 0
            has_errors = unvalued = formulas = False
            carry = b""
            while chunk := fh.read(1 << 20):
                text = carry + chunk
                has_errors = has_errors or _ERROR.search(text) is not None
                unvalued = unvalued or _UNVALUED_FORMULA.search(text) is not None
                formulas = formulas or _FORMULA.search(text) is not None
                rows = [int(r) for r in _ROW.findall(text)]
                for width, pattern in _REF.items():  # same-width letters compare as numbers do
                    if refs := pattern.findall(text):
                        last_column = max(last_column, _column_number(max(refs, key=lambda r: r[0])[0].decode()))
                        first_column = min(first_column or 1 << 20, _column_number(min(refs, key=lambda r: r[0])[0].decode()))
                        rows += (int(refs[0][1]), int(refs[-1][1]))
                if rows:
                    last_row, first_row = max(last_row, *rows), min(first_row or 1 << 40, *rows)
                carry = text[-_OVERLAP:]
    except (KeyError, zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError):
        return None
    return SheetScan(last_row, last_column, first_row or 1, first_column or 1, has_errors, unvalued, formulas)


def scan_part(path: Path, part: str | None) -> SheetScan | None:
    if part is None:
        return None
    stat = path.stat()
    return _scan_part(str(path), (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns), part)


def oversized(path: Path, part: str | None) -> str | None:
    """Why the sheet in `part` is too large to open (its cells' extent past MAX_SHEET_CELLS), or None."""
    scan = scan_part(path, part)
    if scan is None or scan.cells <= MAX_SHEET_CELLS:
        return None
    extent = f"{_column_letters(scan.first_column)}{scan.first_row}:{_column_letters(scan.last_column)}{scan.last_row}"
    return (f"spans {extent}, {scan.cells:,} cells, past the {MAX_SHEET_CELLS:,} read: a stray cell far right or down? "
            "Clear it, or export the sheet as CSV")


def _column_letters(number: int) -> str:
    letters = ""
    while number:
        number, rest = divmod(number - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def left_to_excel(path: Path) -> bool:
    """Whether the workbook asks Excel to compute every formula when it opens it (`fullCalcOnLoad`),
    as the libraries that write workbooks without computing do: a formula's stored 0 is then no result."""
    try:
        with zipfile.ZipFile(path) as archive:
            book = ElementTree.fromstring(archive.read("xl/workbook.xml"))
    except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, OSError):
        return False
    calc = book.find(f"{_MAIN}calcPr")
    return calc is not None and calc.get("fullCalcOnLoad") in ("1", "true")


# What an uncomputed formula cell reads as: like an error cell, no number and no text a mapping's
# default stands in for, naming the formula (`#NOT COMPUTED: =A2*B2`).
NOT_COMPUTED = "#NOT COMPUTED"


def _not_computed(formula: str | None) -> str:
    return f"{NOT_COMPUTED}: ={formula}" if formula else NOT_COMPUTED


def _cells_as_written(path: Path, part: str, first_column: int, left_to_excel: bool) -> dict[int, dict[int, str]]:
    """The cells calamine misreads, by row and column as the rows are read, with what they are:
    - error cells (`#N/A`, `#DIV/0!`), which calamine reads as empty (and an empty cell takes the
      mapping's default);
    - formulas without a computed result, which calamine reads as empty or 0 (a workbook written by
      a library leaves them to Excel): a line's amount would load as nothing or as 0. A formula
      storing no result (no `<v>`, or an empty one for a number), or a numeric 0 in a workbook
      `left_to_excel`, reads `#NOT COMPUTED`, so its line is quarantined naming it. Any other stored
      result is taken as written (a text formula's empty result too).
    Most sheets have neither, and the scan says so before any parse."""
    scan = scan_part(path, part)
    if scan is None or not (scan.has_errors or scan.has_unvalued_formulas or (left_to_excel and scan.has_formulas)):
        return {}
    cells: dict[int, dict[int, str]] = {}
    row_number = column = 0  # where a cell without its (optional) `r` reference stands: by position
    try:
        with zipfile.ZipFile(path) as archive, archive.open(part) as fh:
            for event, element in ElementTree.iterparse(fh, events=("start", "end")):
                if element.tag == f"{_MAIN}row":
                    if event == "start":
                        number = element.get("r")
                        row_number, column = (int(number) if number and number.isdigit() else row_number + 1), 0
                    else:
                        element.clear()  # its cells are read: keep no row of a large sheet
                    continue
                if event != "end" or element.tag != f"{_MAIN}c":
                    continue
                found = _CELL.fullmatch(element.get("r") or "")
                row, column = (int(found.group(2)), _column_number(found.group(1))) if found else (row_number, column + 1)
                value, formula = element.find(f"{_MAIN}v"), element.find(f"{_MAIN}f")
                stored = value.text if value is not None else None
                text = None
                if element.get("t") == "e":
                    text = stored or "#ERROR"
                elif formula is not None and _not_a_result(element.get("t"), value, stored, left_to_excel):
                    text = _not_computed(formula.text)
                if text is not None and row >= 1:
                    cells.setdefault(row - 1, {})[column - 1 - first_column] = text
                element.clear()
    except (KeyError, zipfile.BadZipFile, ElementTree.ParseError, OSError, RuntimeError, NotImplementedError):
        return {}
    return cells


def _not_a_result(kind: str | None, value, stored: str | None, left_to_excel: bool) -> bool:
    """Whether a formula cell's stored value (its `<v>`, of type `kind`) is no computed result: none
    at all (an inline string's `<is>` is one), an empty `<v/>` for a number (openpyxl's; a text
    formula's empty result is one), or a numeric 0 in a workbook left to Excel."""
    if value is None:
        return kind != "inlineStr"
    numeric = kind in (None, "n")
    return numeric and (not (stored or "").strip() or (left_to_excel and _is_zero(stored or "")))


def _is_zero(text: str) -> bool:
    try:
        return float(text) == 0
    except ValueError:
        return False


def _column_names(header: list[str], source_file: str, sheet: str, header_row: int) -> list[str]:
    """The header's names; a blank one is `(column N)` (a column of notes with no title)."""
    names = [text or f"(column {n})" for n, text in enumerate(header, 1)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConnectorError(source_file, f"sheet {printable(sheet)!r}: header names a column more than once: "
                             f"{', '.join(printable(n) for n in twice)}", line=header_row + 1)
    return names


def _frame(names: list[str], columns: list[list[str | None]], numbers: list[int], wheres: list[str]) -> pl.DataFrame:
    frame = pl.DataFrame({n: c for n, c in zip(names, columns, strict=True)}, schema={n: pl.String for n in names})
    frame = frame.with_columns(pl.Series(ROW_NUMBER, numbers, dtype=pl.Int64))
    if wheres:
        frame = frame.with_columns(pl.Series(WHERE, wheres, dtype=pl.String))
    for column in (*columns, numbers, wheres):
        column.clear()
    return frame


def _cell_text(cell, decimal_separator: str) -> str | None:
    """A typed cell as the text Excel shows (see the module docstring); None for an empty cell."""
    if cell is None or cell == "":
        return None
    if isinstance(cell, str):
        return cell
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, int):
        return str(cell)
    if isinstance(cell, float):
        return number_text(cell).replace(".", decimal_separator)
    if isinstance(cell, datetime):
        moment = cell + timedelta(microseconds=500)  # to the millisecond: Excel keeps times as fractions of days
        moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
        return moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if moment.microsecond else moment.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(cell, date):
        return cell.strftime("%Y-%m-%d")
    if isinstance(cell, time):
        return cell.strftime("%H:%M:%S")
    if isinstance(cell, timedelta):  # a duration, as Excel's [h]:mm:ss shows it: 36:00:00
        sign, seconds = ("-", -cell) if cell < timedelta(0) else ("", cell)
        hours, rest = divmod(int(seconds.total_seconds()), 3600)
        return f"{sign}{hours}:{rest // 60:02d}:{rest % 60:02d}"
    return str(cell)


def number_text(value: float) -> str:
    """A cell's number as Excel shows it: 15 significant digits, no exponent, no trailing zeros. A
    whole number a double holds exactly (below 2**53) is written whole: an id of 16 digits written
    as a number stays itself, never rounded into another's."""
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    text = format(Decimal(f"{value:.15g}"), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
