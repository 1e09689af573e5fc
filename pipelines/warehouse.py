"""Small helpers around a DuckDB connection: schemas, raw tables, SQL files, fetching results.

DuckDB 2 streams results: a statement's result must be drained before the next statement on the
same connection, so every read here fetches everything it asks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import duckdb

from models.schemas import QUARANTINE, RAW_TABLES, SCHEMAS, duckdb_columns, duckdb_type

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
SCHEMAS_IN_WAREHOUSE = ("raw", "core", "marts", "findings")

Params = Mapping[str, object] | Sequence[object] | None


def fetch_all(conn: duckdb.DuckDBPyConnection, sql: str, params: Params = None) -> list[tuple]:
    return conn.execute(sql, params).fetchall() if params is not None else conn.execute(sql).fetchall()


def fetch_value(conn: duckdb.DuckDBPyConnection, sql: str, params: Params = None):
    rows = fetch_all(conn, sql, params)
    return rows[0][0] if rows else None


def fetch_dicts(conn: duckdb.DuckDBPyConnection, sql: str, params: Params = None) -> list[dict]:
    cursor = conn.execute(sql, params) if params is not None else conn.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def table_exists(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether `schema.table` exists (a run that stopped early has built only some tables)."""
    schema, name = table.split(".")
    return bool(fetch_all(conn, "SELECT 1 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, name]))


def sql_text(name: str) -> str:
    """The text of `sql/<schema>/<table>.sql` for a table named `schema.table`."""
    schema, table = name.split(".")
    return (SQL_DIR / schema / f"{table}.sql").read_text()


def run_sql_file(conn: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, object] | None = None) -> None:
    """Run the SQL file that builds `name`, binding only the named parameters it uses."""
    text = sql_text(name)
    used = {k: v for k, v in (params or {}).items() if f"${k}" in text}
    conn.execute(text, used) if used else conn.execute(text)


RAW_REGISTRY_DDL = """
CREATE TABLE IF NOT EXISTS raw.files (
    path VARCHAR NOT NULL,            -- relative to the landing folder
    sha256 VARCHAR NOT NULL,
    size_bytes BIGINT NOT NULL,
    connector VARCHAR,
    kind VARCHAR,
    status VARCHAR NOT NULL,          -- loaded | quarantined | duplicate | replaced | restated | unrecognized | failed | refused
    rows_read BIGINT NOT NULL DEFAULT 0,
    rows_loaded BIGINT NOT NULL DEFAULT 0,
    rows_quarantined BIGINT NOT NULL DEFAULT 0,
    source_total DECIMAL(38, 6),      -- billing files: the money the file states, all rows
    quarantined_total DECIMAL(38, 6), -- billing files: the part of it on quarantined rows
    detail VARCHAR,
    ingested_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (path, sha256)
)
"""


class WarehouseSchemaError(RuntimeError):
    pass


def ensure_warehouse(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the schemas and the raw tables (from the canonical Arrow schemas) if missing, and
    bring the raw tables of a warehouse made by an older version up to the current schemas."""
    for schema in SCHEMAS_IN_WAREHOUSE:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    conn.execute(RAW_REGISTRY_DDL)
    for column in ("source_total", "quarantined_total"):  # added after the first release
        conn.execute(f"ALTER TABLE raw.files ADD COLUMN IF NOT EXISTS {column} DECIMAL(38, 6)")
    for table, schema in [*((t, SCHEMAS[k]) for k, t in RAW_TABLES.items()), ("raw.quarantine", QUARANTINE)]:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (\n    {duckdb_columns(schema)}\n)")
        _migrate(conn, table, schema)


def _migrate(conn: duckdb.DuckDBPyConnection, table: str, schema) -> None:
    """Columns the canonical schema added are added (NULL for old rows); a column that became
    optional drops NOT NULL. A changed type is refused: it needs a deliberate migration."""
    schema_name, table_name = table.split(".")
    existing = {name: (dtype, nullable == "YES") for name, dtype, nullable in fetch_all(conn, """
        SELECT column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_schema = ? AND table_name = ?""", [schema_name, table_name])}
    for field in schema:
        wanted = duckdb_type(field.type)
        if field.name not in existing:
            conn.execute(f'ALTER TABLE {table} ADD COLUMN "{field.name}" {wanted}')
            continue
        dtype, nullable = existing[field.name]
        if dtype.replace(" ", "") != wanted.replace(" ", "") and not (wanted == "TIMESTAMPTZ" and dtype == "TIMESTAMP WITH TIME ZONE"):
            raise WarehouseSchemaError(f"{table}.{field.name} is {dtype} in the warehouse but {wanted} in this version")
        if field.nullable and not nullable:
            conn.execute(f'ALTER TABLE {table} ALTER COLUMN "{field.name}" DROP NOT NULL')


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection whose timestamps come back in UTC, whatever the machine's zone."""
    conn = duckdb.connect(str(path), read_only=read_only)
    conn.execute("SET TimeZone = 'UTC'")
    return conn
