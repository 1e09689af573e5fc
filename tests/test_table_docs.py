"""The warehouse explains itself: every table and column carries its description (COMMENT ON,
from models/data/table_docs.yaml), the README's table section names only what the warehouse has,
and the commands the CLI prints run as printed."""

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from models.focus import FOCUS_COLUMN_NAMES
from pipelines.cli.hints import describe_table_command, finops_command, open_warehouse_command
from pipelines.warehouse.table_docs import (DOCUMENTED_SCHEMAS, README_BEGIN, README_END, TableDoc, apply_docs, docs, load_docs,
                                  quote_identifier, quote_literal, render_readme)

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MUST_BE_DOCUMENTED = ("core", "marts", "findings")  # every column; raw too where the docs file says
TABLE_TOKEN = re.compile(r"`((?:raw|core|marts|findings)\.[A-Za-z_]+)(?:\.([A-Za-z_]+))?`")


def _bare_env() -> dict:
    """A shell without this virtual environment on PATH, as a new terminal has it."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}


def _readme_rows() -> dict[str, str]:
    """table → its row's third cell, from the README's generated table section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(README_BEGIN):text.index(README_END)]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`") and "." in cells[0]:
            rows[cells[0].strip("`")] = cells[2]
    return rows


def _readme_columns(cell: str) -> set[str]:
    listed = cell.split("Columns:", 1)[1]
    return {name for name in re.findall(r"`([^`]+)`", listed) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)}


def _warehouse_columns(conn) -> dict[str, list[tuple[str, str | None]]]:
    out: dict[str, list[tuple[str, str | None]]] = {}
    for schema, table, column, comment in conn.execute(
            "SELECT schema_name, table_name, column_name, comment FROM duckdb_columns() "
            "WHERE schema_name IN ('raw', 'core', 'marts', 'findings') ORDER BY schema_name, table_name, column_index").fetchall():
        out.setdefault(f"{schema}.{table}", []).append((column, comment))
    return out


# ----------------------------------------------------------------------------- fast: no warehouse


def test_quoting_survives_quotes_in_descriptions_and_names():
    conn = duckdb.connect()
    conn.execute('CREATE SCHEMA core; CREATE TABLE core.t (plain INTEGER, "odd ""name" VARCHAR)')
    doc = TableDoc("core.t", "one test row", "The analyst's table; '; DROP TABLE core.t; -- stays text.",
                   {"plain": "It's a count, in GPU-hours.", 'odd "name': "A name with a \"quote\" and a backslash \\n."},
                   own=("plain", 'odd "name'))
    from pipelines.warehouse import table_docs

    statements = table_docs.comment_statements(conn, "core.t", doc)
    table_docs.write_comments(conn, statements)  # in one call, as apply_docs runs them: no text ends a statement
    assert conn.execute("SELECT comment FROM duckdb_tables() WHERE table_name = 't'").fetchall() == [
        ("Grain: one test row. The analyst's table; '; DROP TABLE core.t; -- stays text.",)]
    assert dict(conn.execute("SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 't'").fetchall()) == {
        "plain": "It's a count, in GPU-hours.", 'odd "name': 'A name with a "quote" and a backslash \\n.'}
    assert quote_literal("it's") == "'it''s'" and quote_identifier('a"b') == '"a""b"'
    with pytest.raises(ValueError):
        quote_literal("nul\x00")


def test_comments_land_on_a_view_too():
    """The storage layer may turn a core table into a view over Parquet: its comments still land."""
    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA core")
    conn.execute("CREATE VIEW core.fx_rates AS SELECT DATE '2026-01-01' AS rate_date, 'EUR' AS from_currency, "
                 "'USD' AS to_currency, 1.1 AS rate, 'test' AS source")
    written = apply_docs(conn, "core.fx_rates")
    assert written == 1 + 5
    view_comment = conn.execute("SELECT comment FROM duckdb_views() WHERE view_name = 'fx_rates'").fetchall()[0][0]
    assert view_comment.startswith("Grain: day × currency pair.")
    comments = dict(conn.execute("SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'fx_rates'").fetchall())
    assert all(comments.values()), comments
    assert "12 decimals" in comments["rate"]


def test_applying_to_a_missing_or_undocumented_table_writes_nothing():
    conn = duckdb.connect()
    conn.execute("CREATE SCHEMA core; CREATE TABLE core.not_documented (a INTEGER)")
    assert apply_docs(conn, "core.gpu_minutes", "core.not_documented") == 0


def test_docs_file_describes_in_words():
    d = load_docs()
    for name, t in d.tables.items():
        assert name.split(".")[0] in DOCUMENTED_SCHEMAS, name
        assert t.grain and len(t.description) > 40, f"{name}: say what the table holds and how it is built"
        for column, text in t.columns.items():
            words = re.findall(r"[A-Za-z]+", text)
            # A description that only restates the name ("Cost reporting.") says nothing.
            assert len(words) >= 2 and text.strip().rstrip(".").lower() != column.replace("_", " ").lower(), f"{name}.{column}: {text!r}"


def test_readme_table_section_is_generated_from_the_docs_file():
    text = README.read_text(encoding="utf-8")
    assert render_readme(text) == text, "run: .venv/bin/python -m pipelines.warehouse.table_docs --readme README.md"


# ----------------------------------------------------------------------------- the demo warehouse


def test_every_table_and_column_carries_a_description(demo_run, demo_db):
    assert demo_run.returncode in (0, 1), demo_run.output[-3000:]
    tables = dict(demo_db.execute(
        "SELECT schema_name || '.' || table_name, comment FROM duckdb_tables() WHERE schema_name IN ('raw', 'core', 'marts', 'findings') "
        "UNION ALL SELECT schema_name || '.' || view_name, comment FROM duckdb_views() "
        "WHERE NOT internal AND schema_name IN ('raw', 'core', 'marts', 'findings')").fetchall())
    columns = _warehouse_columns(demo_db)

    required = {t: c for t, c in tables.items() if t.split(".")[0] in MUST_BE_DOCUMENTED}
    assert len(required) >= 23
    assert [t for t, c in required.items() if not c] == [], "tables without a description in models/data/table_docs.yaml"

    undocumented = [f"{t}.{col}" for t, cols in columns.items() if t in required for col, comment in cols if not comment]
    total = sum(len(cols) for t, cols in columns.items() if t in required)
    assert total >= 386
    # Every column, not just 90 %: a new column fails here by name until models/data/table_docs.yaml describes it.
    assert undocumented == [], f"describe these columns in models/data/table_docs.yaml: {undocumented}"

    # The raw tables the docs file covers are fully described as well.
    for table in (t for t in docs().tables if t.startswith("raw.")):
        assert tables.get(table), table
        assert [c for c, comment in columns[table] if not comment] == [], table


def test_the_docs_file_names_nothing_the_warehouse_lacks(demo_db):
    columns = {t: {c for c, _ in cols} for t, cols in _warehouse_columns(demo_db).items()}
    stale = [f"{t}.{c}" for t, doc in docs().tables.items() for c in doc.columns if c not in columns.get(t, set())]
    missing_tables = [t for t in docs().tables if t not in columns]
    assert missing_tables == [] and stale == [], f"described but not in the warehouse: {missing_tables + stale}"


def test_readme_names_only_tables_and_columns_the_warehouse_has(demo_db):
    columns = {t: [c for c, _ in cols] for t, cols in _warehouse_columns(demo_db).items()}
    rows = _readme_rows()
    assert set(rows) == set(docs().tables)
    for table, cell in rows.items():
        assert table in columns, f"README names {table}, which the warehouse lacks"
        named = _readme_columns(cell)
        assert named - set(columns[table]) == set(), f"README names columns {table} lacks: {named - set(columns[table])}"
        listed = set(named)
        if "every FOCUS" in cell:
            assert set(FOCUS_COLUMN_NAMES) <= set(columns[table]), table
            listed |= set(FOCUS_COLUMN_NAMES)
        assert listed == set(columns[table]), f"README's {table} row misses {set(columns[table]) - listed}"
    # raw.quarantine, which the README once listed wrong, exactly as the warehouse has it.
    assert _readme_columns(rows["raw.quarantine"]) == set(columns["raw.quarantine"]) == {
        "x_Connector", "x_SourceFile", "x_SourceSha256", "x_SourceRow", "x_IngestedAt", "reason", "raw_record"}
    # Every `schema.table` or `schema.table.column` anywhere in the README exists.
    for table, column in TABLE_TOKEN.findall(README.read_text(encoding="utf-8")):
        assert table in columns, f"README mentions {table}"
        assert not column or column in columns[table], f"README mentions {table}.{column}"


# ----------------------------------------------------------------------------- hints run as printed


def _printed(output: str, label: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(label)]
    assert lines, f"no {label!r} line in:\n{output[-2000:]}"
    return lines[-1][len(label):].strip()


def test_open_it_hint_runs_as_printed(demo_run):
    command = _printed(demo_run.output, "open it:")
    assert command.startswith(str(Path(sys.executable).parent)), command  # this installation's Python, not the system's
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=_bare_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pretraining" in done.stdout and "inference" in done.stdout

    explain = _printed(demo_run.output, "explain:")
    done = subprocess.run(["bash", "-c", explain], capture_output=True, text=True, env=_bare_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "x_EffectiveCostReporting" in done.stdout and "reporting currency" in done.stdout


def test_hints_quote_odd_warehouse_paths(demo_run, tmp_path):
    odd = tmp_path / "my wh's $HOME `x`"
    odd.mkdir()
    (odd / "w.duckdb").write_bytes((demo_run.out / "warehouse.duckdb").read_bytes())
    for command in (open_warehouse_command(odd / "w.duckdb"), describe_table_command(odd / "w.duckdb", "raw.quarantine")):
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=_bare_env(), timeout=120)
        assert done.returncode == 0, (command, done.stderr)
    assert "raw_record" in done.stdout


def test_no_warehouse_hint_names_a_finops_that_runs(tmp_path):
    finops = Path(sys.executable).parent / "finops"
    done = subprocess.run([str(finops), "findings", "--warehouse", str(tmp_path / "none.duckdb")], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)
    assert done.returncode == 1
    hint = re.search(r"run `(.+?) demo` or `(.+?) run` first", done.stdout + done.stderr)
    assert hint, done.stdout + done.stderr
    assert hint.group(1) == finops_command()
    # As printed, from a shell without the virtual environment on PATH (the demo itself is too long to run here).
    helped = subprocess.run(["bash", "-c", f"{hint.group(1)} demo --help"], capture_output=True, text=True, env=_bare_env(),
                            timeout=120)
    assert helped.returncode == 0 and "--out" in helped.stdout, helped.stderr
