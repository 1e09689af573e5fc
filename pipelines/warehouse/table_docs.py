"""The warehouse explains itself: table and column descriptions from models/data/table_docs.yaml,
written as COMMENT ON after each table (or view) is built, and the README's table section
generated from the same file.

`python -m pipelines.warehouse.table_docs --readme README.md` rewrites the README's section between the
markers; `--check` only says whether it is up to date (the tests run that check).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import duckdb
import yaml

DOCS_FILE = Path(__file__).resolve().parents[2] / "models" / "data" / "table_docs.yaml"
README_BEGIN = "<!-- table-docs:begin (generated from models/data/table_docs.yaml by python -m pipelines.warehouse.table_docs --readme README.md) -->"
README_END = "<!-- table-docs:end -->"
DOCUMENTED_SCHEMAS = ("raw", "core", "marts", "findings")


@dataclass(frozen=True)
class TableDoc:
    name: str
    grain: str
    description: str
    columns: dict[str, str]  # column → description, included sets first, the table's own after
    include: tuple[str, ...] = ()
    own: tuple[str, ...] = field(default=())  # columns the table describes itself, in order

    @property
    def comment(self) -> str:
        return f"Grain: {self.grain}. {self.description}"


@dataclass(frozen=True)
class Docs:
    tables: dict[str, TableDoc]
    sets: dict[str, dict]  # name → {"readme": str | None, "columns": {column: description}}


def load_docs(path: Path = DOCS_FILE) -> Docs:
    # libyaml's loader where PyYAML has one: the pure-Python loader takes 0.14 s of every run on this file.
    raw = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    sets = {name: {"readme": s.get("readme"), "columns": dict(s["columns"])} for name, s in raw["column_sets"].items()}
    tables = {}
    for name, t in raw["tables"].items():
        include = tuple(t.get("include", ()))
        columns: dict[str, str] = {}
        for set_name in include:
            if set_name not in sets:
                raise ValueError(f"{path}: {name} includes unknown column set {set_name!r}")
            columns.update(sets[set_name]["columns"])
        own = dict(t.get("columns") or {})
        columns.update(own)
        for column, text in columns.items():
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}: {name}.{column} has no description")
        tables[name] = TableDoc(name, str(t["grain"]).strip(), " ".join(str(t["description"]).split()), columns, include, tuple(own))
    return Docs(tables, sets)


@lru_cache(maxsize=1)
def docs() -> Docs:
    return load_docs()


def quote_identifier(name: str) -> str:
    """A DuckDB identifier, double-quoted (FOCUS PascalCase and any odd name survive)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str) -> str:
    """A SQL string literal: COMMENT ON cannot take a bound parameter, so the text is quoted here
    (single quotes doubled; DuckDB's standard strings treat no other character specially)."""
    if "\x00" in text:
        raise ValueError("a description cannot contain a NUL character")
    return "'" + text.replace("'", "''") + "'"


def qualified(table: str) -> str:
    schema, name = table.split(".", 1)
    return f"{quote_identifier(schema)}.{quote_identifier(name)}"


def comment_statements(conn, table: str, doc: TableDoc | None = None) -> list[str]:
    """The COMMENT ON statements for `table` as it exists now: COMMENT ON VIEW for a view, TABLE
    otherwise, and one COMMENT ON COLUMN per existing column that has a description."""
    doc = doc or docs().tables.get(table)
    if doc is None:
        return []
    schema, name = table.split(".", 1)
    is_view = bool(conn.execute("SELECT count(*) FROM duckdb_views() WHERE schema_name = ? AND view_name = ?",
                                [schema, name]).fetchall()[0][0])
    exists = is_view or bool(conn.execute("SELECT count(*) FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?",
                                          [schema, name]).fetchall()[0][0])
    if not exists:
        return []
    columns = [r[0] for r in conn.execute(
        "SELECT column_name FROM duckdb_columns() WHERE schema_name = ? AND table_name = ? ORDER BY column_index",
        [schema, name]).fetchall()]
    target = qualified(table)
    statements = [f"COMMENT ON {'VIEW' if is_view else 'TABLE'} {target} IS {quote_literal(doc.comment)}"]
    statements += [f"COMMENT ON COLUMN {target}.{quote_identifier(c)} IS {quote_literal(doc.columns[c])}"
                   for c in columns if c in doc.columns]
    return statements


def apply_docs(conn, *tables: str) -> int:
    """Write the descriptions of `tables` (schema.table, tables or views) into the warehouse, in
    one transaction when none is open. Run it after building a table: CREATE OR REPLACE drops
    comments. Returns the number of comments written; an undocumented table gets none."""
    return write_comments(conn, [s for t in tables for s in comment_statements(conn, t)])


def write_comments(conn, statements: list[str]) -> int:
    """Run COMMENT ON `statements` in one call (each call has its own overhead), in one transaction
    when none is open."""
    if not statements:
        return 0
    try:
        conn.execute("BEGIN TRANSACTION")
        own_transaction = True
    except duckdb.TransactionException:  # a transaction is already open: the caller's commit covers these too
        own_transaction = False
    try:
        conn.execute(";\n".join(statements))
    except Exception:
        if own_transaction:
            conn.execute("ROLLBACK")
        raise
    if own_transaction:
        conn.execute("COMMIT")
    return len(statements)


# --------------------------------------------------------------------------- README section


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def readme_section(d: Docs | None = None) -> str:
    """The README's table section: one row per documented table, its grain, what it holds and
    its columns (the column sets by their summary)."""
    d = d or docs()
    lines = [
        README_BEGIN,
        "| table | grain | what it holds and its columns |",
        "|---|---|---|",
    ]
    for name, t in d.tables.items():
        parts, from_sets = [], set()
        for set_name in t.include:
            s = d.sets[set_name]
            from_sets.update(s["columns"])
            parts.append(s["readme"] or ", ".join(f"`{c}`" for c in s["columns"]))
        if own := [c for c in t.own if c not in from_sets]:  # a set's column the table re-describes stays in the set's place
            parts.append(", ".join(f"`{c}`" for c in own))
        lines.append(f"| `{name}` | {_cell(t.grain)} | {_cell(t.description)} Columns: {_cell('; '.join(parts))} |")
    lines.append(README_END)
    return "\n".join(lines)


def render_readme(text: str, d: Docs | None = None) -> str:
    start, end = text.find(README_BEGIN.split(" (")[0]), text.find(README_END)
    if start < 0 or end < 0:
        raise ValueError(f"README has no {README_BEGIN.split(' (')[0]} … {README_END} markers")
    return text[:start] + readme_section(d) + text[end + len(README_END):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.warehouse.table_docs", description=__doc__.splitlines()[0])
    parser.add_argument("--readme", type=Path, required=True, help="README to rewrite (between its table-docs markers)")
    parser.add_argument("--check", action="store_true", help="Only check that the section is up to date (exit 1 if not)")
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    rendered = render_readme(text)
    if args.check:
        if rendered != text:
            print(f"{args.readme}: the table section is out of date; run python -m pipelines.warehouse.table_docs --readme {args.readme}",
                  file=sys.stderr)
            return 1
        return 0
    if rendered != text:
        args.readme.write_text(rendered, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
