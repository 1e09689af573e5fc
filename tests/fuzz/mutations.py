"""Rewriting one cell of a valid seed file, whatever its format, and the values to write there."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from datetime import datetime

from hypothesis import strategies as st

from tests.fuzz.seeds import Seed

BOM = "\ufeff"

# --- values -------------------------------------------------------------------------------

NASTY_TEXT = ["", " ", "\x00", BOM, "\u202e", "NULL", "null", "None", "N/A", "[N/A]", '"', '""', "'", "\\", "\n", "\r\n",
              "\r", ",", "|", ";", "\t", "{", "}", "[", "]", "{}", "[]", "%", "-", "#", "# comment", "𝟘𝟙", "١٢٣",
              "ß" * 60, "\u00a0", "\u2028", "\x1c", "😀", "e\u0301", "a" * 5000, "=1+1", "\ud7ff", "0", "-1", "1.5", "true", "null", "[1]", "{\"a\": 1}", "[[]]"]
EXTREME_NUMBERS = ["1e308", "-1e308", "1e309", "-0", "-0.0", "0", "NaN", "nan", "-nan", "inf", "-inf", "Infinity",
                   "-Infinity", "1000000000000000", "-1000000000000000", "1e15", "1E+15", "1e-12", "0.000000000001",
                   "-1e-12", "9" * 400, "-" + "9" * 40, "0." + "0" * 30 + "1", "123456789012.1234567", "1_000", "0x10",
                   "1,5", "1.2.3", "+5", ".5", "5.", "00012", " 12 ", "\u22121", "1e", "e5", "--1", "9223372036854775808",
                   "-9223372036854775809", "2147483647", "2147483648", "4294967296", "140737488355328", "1e-400"]
ODD_DATES = ["", " ", "0001-01-01T00:00:00Z", "0001-01-01", "9999-12-31T23:59:59Z", "9999-12-31 23:59:59.999999",
             "2026-02-30", "2026-02-30T00:00:00Z", "2026-02-29 12:00:00", "2024-02-29T00:00:00Z", "2016-12-31T23:59:60Z",
             "2016-12-31 23:59:60", "2026-09-01T00:00:00+14:00", "2026-09-01T00:00:00-12:00", "2026-09-01T00:00:00+99:99",
             "2026-09-01T00:00:00+1400", "2026-09-01 00:00:00 +14:00", "2026-09-01T24:00:00", "2026-09-01T25:61:61",
             "2026-13-01", "0000-00-00 00:00:00", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026/09/01 08:00:00.000",
             "2026-09-01T00:00:00.123456789Z", "2026-09-01T00:00:00.1234567890123Z", "+275760-09-13", "-0001-01-01",
             "2026-03-29 02:30:00", "2026-11-01 01:30:00", "20260901", "20260230", "99999999", "1e12",
             "99999999999999999999", "-62135596800", "253402300800", "1662858720.0", "Unknown", "None",
             "01/02/2026", "13/13/2026", "02/30/2026", "09/01/2026 00:00:00", "31/Dec/9999:23:59:59 +1400",
             "01/Jan/0001:00:00:00 -1200", "29/Feb/2026:00:00:00 +0000", "30/Jun/2015:23:59:60 +0000",
             "99:99:99", "23:59:60", "00:00:00", "2026-W36-1", "Tue, 01 Sep 2026 00:00:00 GMT"]

TIME_FORMATS = ["%Y-%m-%dT%H:%M:%S{z}", "%Y-%m-%d %H:%M:%S{z}", "%Y-%m-%dT%H:%M:%S.%f{z}", "%Y/%m/%d %H:%M:%S.%f",
                "%Y-%m-%d", "%m/%d/%Y", "%d/%b/%Y:%H:%M:%S {zc}", "%Y%m%d", "%H:%M:%S"]


@st.composite
def generated_dates(draw) -> str:
    """Any instant from year 1 to 9999, any offset from -14:00 to +14:00, in the formats sources write."""
    moment = draw(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
    minutes = draw(st.integers(-14 * 60, 14 * 60))
    fmt = draw(st.sampled_from(TIME_FORMATS))
    sign, hm = ("-" if minutes < 0 else "+"), divmod(abs(minutes), 60)
    z = draw(st.sampled_from(["Z", "", f"{sign}{hm[0]:02d}:{hm[1]:02d}", f"{sign}{hm[0]:02d}{hm[1]:02d}"]))
    return moment.strftime(fmt.replace("{z}", z).replace("{zc}", f"{sign}{hm[0]:02d}{hm[1]:02d}"))


unicode_values = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=40))
number_values = st.one_of(
    st.sampled_from(EXTREME_NUMBERS),
    st.floats().map(repr),
    st.integers(-10**30, 10**30).map(str),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
)
date_values = st.one_of(st.sampled_from(ODD_DATES), generated_dates())

NUMERIC = re.compile(r"^\s*[-+]?(\d[\d.,]*|\.\d+)([eE][-+]?\d+)?\s*(%|MiB|GiB|W|MHz|C)?\s*$")
DATE = re.compile(r"\d{4}[-/]\d{2}[-/]\d{2}|^\d{2}:\d{2}:\d{2}$|^\d{8}$|\d{2}/[A-Za-z]{3}/\d{4}|^\d{2}/\d{2}/\d{4}|^\d{10}(\.\d+)?$")
KINDS: dict[str, Callable[[str], bool]] = {
    "any": lambda v: True,
    "number": lambda v: bool(NUMERIC.match(v)) and not DATE.search(v),
    "date": lambda v: bool(DATE.search(v)),
}

# --- cells --------------------------------------------------------------------------------


def _decode(content: bytes) -> tuple[str, bool]:
    text = content.decode("utf-8", errors="replace")
    return (text[1:], True) if text.startswith(BOM) else (text, False)


def _encode(text: str, bom: bool) -> bytes:
    return ((BOM if bom else "") + text).encode("utf-8", errors="surrogatepass")


class Cells:
    """The cells of one seed that a mutation may rewrite, and how to write a new value into one."""

    def __init__(self, seed: Seed):
        self.seed = seed
        self.text, self.bom = _decode(seed.content) if seed.fmt != "parquet" else ("", False)
        self.cells: list[tuple] = []  # (location, original value as text)
        getattr(self, f"_index_{seed.fmt}")()

    def choices(self, kind: str) -> list[int]:
        wanted = [i for i, (_, v) in enumerate(self.cells) if KINDS[kind](v)]
        return wanted or list(range(len(self.cells)))

    def rewrite(self, index: int, value: str) -> bytes:
        location, _ = self.cells[index]
        return getattr(self, f"_rewrite_{self.seed.fmt}")(location, value)

    # CSV: a whole-file parse; data rows only (row 0 is the header), written back with csv quoting.
    def _index_csv(self):
        self.rows = list(csv.reader(io.StringIO(self.text, newline=""), delimiter=self.seed.delimiter))
        self.cells = [((r, c), v) for r, row in enumerate(self.rows) if r > 0 for c, v in enumerate(row)]

    def _rewrite_csv(self, location, value):
        r, c = location
        rows = [list(row) for row in self.rows]
        rows[r][c] = value
        out = io.StringIO(newline="")
        csv.writer(out, delimiter=self.seed.delimiter, lineterminator="\n").writerows(rows)
        return _encode(out.getvalue(), self.bom)

    # Whitespace-aligned lines (nvidia-smi dmon, S3 access logs): a token, keeping [..] or "..".
    _TOKEN = re.compile(r'\[[^\]]*\]|"[^"]*"|\S+')

    def _data_lines(self):
        lines = self.text.splitlines(keepends=True)
        return lines, [i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")]

    def _index_ws(self):
        lines, data = self._data_lines()
        for i in data:
            for m in self._TOKEN.finditer(lines[i]):
                token = m.group()
                inner = token[1:-1] if token[:1] in "[\"" and len(token) > 1 else token
                self.cells.append(((i, m.start(), m.end(), token[:1] if inner != token else ""), inner))

    def _rewrite_ws(self, location, value):
        i, start, end, wrap = location
        lines = self.text.splitlines(keepends=True)
        close = {"[": "]", '"': '"'}.get(wrap, "")
        lines[i] = lines[i][:start] + wrap + value + close + lines[i][end:]
        return _encode("".join(lines), self.bom)

    # Prometheus text: label values, the sample value and its timestamp.
    _SAMPLE = re.compile(r'^(?P<name>[^\s{]+)(?P<labels>\{.*\})?\s+(?P<value>\S+)(\s+(?P<ts>\S+))?\s*$')
    _LABEL = re.compile(r'="((?:[^"\\]|\\.)*)"')

    def _index_prom(self):
        lines = self.text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            m = self._SAMPLE.match(line.rstrip("\n"))
            if line.startswith("#") or not m:
                continue
            if m.group("labels"):
                base = m.start("labels")
                for lm in self._LABEL.finditer(m.group("labels")):
                    self.cells.append(((i, base + lm.start(1), base + lm.end(1)), lm.group(1)))
            for g in ("value", "ts"):
                if m.group(g):
                    self.cells.append(((i, m.start(g), m.end(g)), m.group(g)))

    def _rewrite_prom(self, location, value):
        i, start, end = location
        lines = self.text.splitlines(keepends=True)
        lines[i] = lines[i][:start] + value + lines[i][end:]
        return _encode("".join(lines), self.bom)

    # JSON documents and JSON lines: any node below the root, objects and arrays too (so the shape
    # changes: `"items": "x"`); a number, or JSON text put where an object was, stays a bare token.
    def _nodes(self, node, path=()):
        if isinstance(node, (dict, list)):
            if path:
                yield path, node, ""  # a container: only "any" mutations pick it
            for k, v in (node.items() if isinstance(node, dict) else enumerate(node)):
                yield from self._nodes(v, (*path, k))
        else:
            yield path, node, "" if node is None else str(node)

    def _index_json(self):
        self.cells = [((None, p, v), text) for p, v, text in self._nodes(json.loads(self.text))]

    def _index_jsonl(self):
        self.lines = self.text.splitlines(keepends=True)
        for i, line in enumerate(self.lines):
            if line.strip():
                self.cells += [((i, p, v), text) for p, v, text in self._nodes(json.loads(line))]

    @staticmethod
    def _replace(doc, path, original, value) -> str:
        marker = "\u0000FUZZ\u0000"
        node = doc
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = marker
        text = json.dumps(doc, ensure_ascii=False)
        bare = isinstance(original, (int, float)) and not isinstance(original, bool) and re.fullmatch(
            r"-?(\d[\d.eE+-]*|NaN|Infinity|inf|nan)", value.strip())
        if isinstance(original, (dict, list)):
            try:
                json.loads(value)
                bare = True
            except ValueError:
                pass
        return text.replace(json.dumps(marker), value.strip() if bare else json.dumps(value))

    def _rewrite_json(self, location, value):
        _, path, original = location
        return _encode(self._replace(json.loads(self.text), path, original, value), self.bom)

    def _rewrite_jsonl(self, location, value):
        i, path, original = location
        lines = list(self.lines)
        lines[i] = self._replace(json.loads(lines[i]), path, original, value) + "\n"
        return _encode("".join(lines), self.bom)

    def _index_parquet(self):
        self.cells = []


@st.composite
def rewritten_cell(draw, cells: Cells, kind: str, values) -> bytes:
    """The seed with one cell (of `kind`, where it has any) replaced by a drawn value."""
    index = draw(st.sampled_from(cells.choices(kind)))
    return cells.rewrite(index, draw(values))

