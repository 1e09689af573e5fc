"""Small helpers around a DuckDB connection: schemas, raw tables, SQL files, fetching results.

DuckDB 2 streams results: a statement's result must be drained before the next statement on the
same connection, so every read here fetches everything it asks for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import duckdb

from models.schemas import QUARANTINE, RAW_TABLES, SCHEMAS, duckdb_columns, duckdb_type
from pipelines.lake.layout import adopt_table, create_views, is_table, lake_of_connection
from pipelines.warehouse import lake_tables

SQL_DIR = Path(__file__).resolve().parents[2] / "sql"
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
    # The catalog's own functions, tables first (most lookups are of tables), and only the names:
    # information_schema.tables joins both and costs 2-3 times as much, and a run asks ~140 times.
    return bool(fetch_all(conn, "SELECT 1 FROM duckdb_tables() WHERE schema_name = ? AND table_name = ?", [schema, name])
                or fetch_all(conn, "SELECT 1 FROM duckdb_views() WHERE schema_name = ? AND view_name = ?", [schema, name]))


QUARANTINED_BY_CURRENCY_TYPE = "STRUCT(currency VARCHAR, amount DECIMAL(38, 10))[]"


def raw_files_source(conn: duckdb.DuckDBPyConnection) -> str:
    """`raw.files` as its readers query it: a warehouse an older version published, opened read-only
    (a report, a failed run's summary), lacks the columns added since, which read as NULL."""
    have = {name for (name,) in fetch_all(conn, "SELECT column_name FROM duckdb_columns() "
                                                "WHERE schema_name = 'raw' AND table_name = 'files'")}
    missing = [f"NULL::{dtype} AS {column}" for column, dtype in RAW_FILES_ADDED if column not in have]
    return f"(SELECT *, {', '.join(missing)} FROM raw.files)" if missing and have else "raw.files"


def sql_text(name: str) -> str:
    """The text of `sql/<schema>/<table>.sql` for a table named `schema.table`."""
    schema, table = name.split(".")
    return (SQL_DIR / schema / f"{table}.sql").read_text()


def run_sql_file(conn: duckdb.DuckDBPyConnection, name: str, params: Mapping[str, object] | None = None) -> None:
    """Run the SQL file that builds `name`, binding only the named parameters it uses."""
    run_sql_text(conn, sql_text(name), params)


def run_sql_text(conn: duckdb.DuckDBPyConnection, text: str, params: Mapping[str, object] | None = None) -> None:
    if not any(f"${k}" in text for k in (params or {})):
        conn.execute(text)
        return
    # A file of several statements: each is prepared on its own, with the parameters it names.
    for statement in duckdb.extract_statements(text):
        used = {k: v for k, v in (params or {}).items() if k in statement.named_parameters}
        conn.execute(statement, used) if used else conn.execute(statement)


RAW_REGISTRY_DDL = """
CREATE TABLE IF NOT EXISTS raw.files (
    path VARCHAR NOT NULL,            -- relative to the landing folder
    sha256 VARCHAR NOT NULL,
    size_bytes BIGINT NOT NULL,
    connector VARCHAR,
    kind VARCHAR,
    -- loaded | incomplete | superseded | duplicate | replaced | manifest | quarantined | unrecognized | failed | refused
    -- (the ledger's statuses are explained in the README's ledger table)
    status VARCHAR NOT NULL,
    rows_read BIGINT NOT NULL DEFAULT 0,
    rows_loaded BIGINT NOT NULL DEFAULT 0,
    rows_quarantined BIGINT NOT NULL DEFAULT 0,
    source_total DECIMAL(38, 10),      -- billing files: the money the file states, all rows
    quarantined_total DECIMAL(38, 10), -- billing files: the part of it on quarantined rows
    -- that part by the currency its rows state (NULL currency: not stated, or no ISO code)
    quarantined_by_currency STRUCT(currency VARCHAR, amount DECIMAL(38, 10))[],
    detail VARCHAR,
    ingested_at TIMESTAMPTZ NOT NULL,
    content_sha256 VARCHAR,           -- normalized content (gunzipped, CRLF→LF, BOM stripped): one file however it arrives
    file_mtime TIMESTAMPTZ,           -- as synced (aws s3 sync keeps the object's LastModified)
    layout_delivery_id VARCHAR,       -- what the folder layout or file name says (pipelines/ledger/deliveries.py)
    layout_export VARCHAR,
    layout_period DATE,
    layout_seq BIGINT,                -- the provider's counter in the file name (OCI)
    delivery_id VARCHAR,              -- the delivery the ledger's rules put the file in (raw.deliveries)
    delivery_note VARCHAR,            -- why the ledger gave the file its status
    status_changed_at TIMESTAMPTZ,    -- when the ledger last changed its status (the run that did says why)
    PRIMARY KEY (path, sha256)
)
"""

# Columns raw.files gained after its first release, added to older warehouses.
RAW_FILES_ADDED = (("source_total", "DECIMAL(38, 10)"), ("quarantined_total", "DECIMAL(38, 10)"),
                   ("content_sha256", "VARCHAR"), ("file_mtime", "TIMESTAMPTZ"), ("layout_delivery_id", "VARCHAR"),
                   ("layout_export", "VARCHAR"), ("layout_period", "DATE"), ("layout_seq", "BIGINT"),
                   ("delivery_id", "VARCHAR"), ("delivery_note", "VARCHAR"), ("status_changed_at", "TIMESTAMPTZ"),
                   ("quarantined_by_currency", "STRUCT(currency VARCHAR, amount DECIMAL(38, 10))[]"))  # QUARANTINED_BY_CURRENCY_TYPE

# One row per delivery manifest file version read (pipelines/ledger/deliveries.py: read_manifest).
RAW_MANIFESTS_DDL = """
CREATE TABLE IF NOT EXISTS raw.manifests (
    path VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL,
    format VARCHAR NOT NULL,          -- aws_cur | aws_data_exports | azure_export
    provider VARCHAR,
    export_name VARCHAR,
    scope VARCHAR,                    -- billing account / export scope
    billing_period DATE,              -- first day
    delivery_id VARCHAR NOT NULL,
    created_at TIMESTAMPTZ,           -- the provider's creation time, where the manifest states it
    file_mtime TIMESTAMPTZ,           -- the manifest file's time as synced (the object's LastModified)
    mode VARCHAR NOT NULL,            -- replace | incremental
    latest_pointer BOOLEAN NOT NULL,  -- a manifest the provider overwrites to name its newest delivery
    parts VARCHAR[] NOT NULL,         -- object keys of the delivery's data files
    ingested_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (path, sha256)
)
"""

# The ledger's view of deliveries, rebuilt from every raw row after each ingest
# (pipelines/ledger/deliveries.sql): one row per delivery of an export.
RAW_DELIVERIES_DDL = """
CREATE TABLE IF NOT EXISTS raw.deliveries (
    delivery_id VARCHAR PRIMARY KEY,  -- aws-cur:<assemblyId> | aws-dataexports:<executionId> | azure:<runId> | gcp:… | oci:… | file:<content>
    provider VARCHAR,
    export_name VARCHAR,              -- '' for a plain upload
    scope VARCHAR,                    -- billing account / export scope, where the delivery states one
    billing_period DATE,              -- first day, where the delivery states one
    mode VARCHAR NOT NULL,            -- replace | incremental
    source VARCHAR NOT NULL,          -- manifest | layout | rows | file: where the delivery's identity came from
    created_at TIMESTAMPTZ,           -- the provider's creation time (manifest, run info, export_time, synced LastModified)
    seq BIGINT,                       -- the provider's counter (OCI file names)
    parts_expected INTEGER,           -- from the manifest; NULL when no manifest says
    parts_seen INTEGER NOT NULL,
    complete BOOLEAN NOT NULL,        -- every expected part is here (true when nothing says how many to expect)
    counts BOOLEAN NOT NULL,          -- some of its lines count in core.billing_lines
    status VARCHAR NOT NULL,          -- current | incomplete | superseded
    superseded_by VARCHAR,            -- the deliveries that replaced it
    files INTEGER NOT NULL,
    lines BIGINT NOT NULL,
    final BOOLEAN,                    -- its lines carry invoice ids (a closed AWS month)
    max_charge_end TIMESTAMPTZ,
    first_seen_at TIMESTAMPTZ,        -- when its first file was loaded: the last tie-break only
    manifests VARCHAR[]
)
"""

# One row per delivery × the (provider, billing account, billing period) its lines state: the unit
# a newer delivery replaces (for a plain upload spanning several accounts or months, each slice on its own).
RAW_DELIVERY_SLICES_DDL = """
CREATE TABLE IF NOT EXISTS raw.delivery_slices (
    delivery_id VARCHAR NOT NULL,
    line_provider VARCHAR,            -- the lines' ProviderName, BillingAccountId, BillingPeriodStart as stated
    line_account VARCHAR,
    line_period TIMESTAMPTZ,
    provider VARCHAR,                 -- the key a newer delivery replaces: provider, export, scope, period
    export_name VARCHAR,
    scope VARCHAR,
    billing_period DATE,
    mode VARCHAR NOT NULL,
    lines BIGINT NOT NULL,
    rank INTEGER NOT NULL,            -- 1: the delivery whose lines count for this key
    counts BOOLEAN NOT NULL,
    winner VARCHAR,
    line_invoice VARCHAR,             -- an invoice's own slice, where invoices are deliveries (part of the key)
    by_invoice BOOLEAN,
    covered_by VARCHAR,               -- another export of the same provider, scope and period counts instead
    counts_for STRUCT(since TIMESTAMPTZ, until TIMESTAMPTZ)[]  -- a plain upload counting for part of its charge time: its lines lying there (NULL: all)
)
"""
RAW_DELIVERY_SLICES_ADDED = (("line_invoice", "VARCHAR"), ("by_invoice", "BOOLEAN"), ("covered_by", "VARCHAR"),
                             ("counts_for", "STRUCT(since TIMESTAMPTZ, until TIMESTAMPTZ)[]"))


# What the ledger needs to know of a billing file's lines, computed once when the file is read
# (pipelines/lake/facts.sql), so the delivery rules never scan the lines themselves.
RAW_FILE_SLICES_DDL = """
CREATE TABLE IF NOT EXISTS raw.file_slices (
    path VARCHAR NOT NULL,            -- the file version (raw.files' key)
    sha256 VARCHAR NOT NULL,
    line_provider VARCHAR,            -- the lines' ProviderName, BillingAccountId, BillingPeriodStart as stated
    line_account VARCHAR,
    line_period TIMESTAMPTZ,
    lines BIGINT NOT NULL,
    final BOOLEAN NOT NULL,           -- some line carries an invoice id (a closed AWS month)
    max_charge_end TIMESTAMPTZ,
    export_time TIMESTAMPTZ,          -- Google Cloud: the newest export_time of its lines
    dataset VARCHAR,                  -- Azure: actual | amortized
    line_invoice VARCHAR,             -- the lines' InvoiceId, where invoices are deliveries (by_invoice)
    by_invoice BOOLEAN,               -- the connector's invoices_are_deliveries
    min_charge_start TIMESTAMPTZ,     -- the earliest ChargePeriodStart (plain uploads of disjoint days add up)
    max_charge_start TIMESTAMPTZ,     -- the latest ChargePeriodStart (how far an export has come)
    last_start_end TIMESTAMPTZ,       -- the earliest ChargePeriodEnd of its lines starting last (how far an hourly export has come)
    -- Per SubAccountId its lines bill, its earliest and latest charge start and the earliest end of its
    -- lines starting last: which narrower exports it holds, and when (a billing profile's, its subscriptions').
    sub_account_reach STRUCT(id VARCHAR, first_start TIMESTAMPTZ, last_start TIMESTAMPTZ, last_start_end TIMESTAMPTZ)[]
)
"""
RAW_FILE_SLICES_ADDED = (("line_invoice", "VARCHAR"), ("by_invoice", "BOOLEAN"), ("min_charge_start", "TIMESTAMPTZ"), ("max_charge_start", "TIMESTAMPTZ"),
                         ("last_start_end", "TIMESTAMPTZ"), ("sub_account_reach", "STRUCT(id VARCHAR, first_start TIMESTAMPTZ, last_start TIMESTAMPTZ, last_start_end TIMESTAMPTZ)[]"))


class WarehouseSchemaError(RuntimeError):
    pass


# The setup a warehouse last had (ensure_warehouse and the macros), by the code that did it and the
# lake it points at: a step whose warehouse is already set up by this code skips the ~40 DDL
# statements and 30 macros (0.1 s a step, 3-4 s a run of the whole graph).
SETUP_TABLE = "main.finops_setup"


def setup_digest(conn: duckdb.DuckDBPyConnection) -> str:
    import hashlib

    from pipelines.warehouse.run_state import code_digest

    return hashlib.sha256(f"{code_digest()}\0{lake_of_connection(conn)}".encode()).hexdigest()


def is_set_up(conn: duckdb.DuckDBPyConnection) -> bool:
    try:
        return fetch_value(conn, f"SELECT digest FROM {SETUP_TABLE}") == setup_digest(conn)
    except duckdb.CatalogException:
        return False


def set_up(conn: duckdb.DuckDBPyConnection) -> None:
    """Schemas, raw tables and views (ensure_warehouse) and the SQL macros, then the stamp."""
    ensure_warehouse(conn)
    conn.execute((SQL_DIR / "macros.sql").read_text())
    conn.execute(f"CREATE OR REPLACE TABLE {SETUP_TABLE} AS SELECT ?::VARCHAR AS digest", [setup_digest(conn)]).fetchall()


def ensure_warehouse(conn: duckdb.DuckDBPyConnection) -> None:
    """Create the schemas and the raw tables (from the canonical Arrow schemas) if missing, and
    bring the raw tables of a warehouse made by an older version up to the current schemas."""
    for schema in SCHEMAS_IN_WAREHOUSE:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    conn.execute(RAW_REGISTRY_DDL)
    for column, dtype in RAW_FILES_ADDED:
        conn.execute(f"ALTER TABLE raw.files ADD COLUMN IF NOT EXISTS {column} {dtype}")
    for column in ("source_total", "quarantined_total"):  # widened to 10 decimals with money
        widen_column(conn, "raw.files", column, "DECIMAL(38, 10)")
    # `restated` was the status before the ledger: the rules recompute it as `superseded` (or
    # `loaded`) at the next ingest, and the file is not read again.
    conn.execute("UPDATE raw.files SET status = 'superseded' WHERE status = 'restated'")
    conn.execute(RAW_MANIFESTS_DDL)
    conn.execute(RAW_DELIVERIES_DDL)
    conn.execute(RAW_DELIVERY_SLICES_DDL)
    conn.execute(RAW_FILE_SLICES_DDL)
    # A per-sub-account fact recorded in an earlier shape (without first_start, or the list of ids
    # it replaced) is dropped, so the files get it again from their lines.
    reach_type = fetch_value(conn, """SELECT any_value(data_type) FROM duckdb_columns()
        WHERE database_name = current_database() AND schema_name = 'raw' AND table_name = 'file_slices'
          AND column_name = 'sub_account_reach'""")
    if reach_type is not None and "first_start" not in reach_type:
        conn.execute("ALTER TABLE raw.file_slices DROP COLUMN sub_account_reach")
    conn.execute("ALTER TABLE raw.file_slices DROP COLUMN IF EXISTS sub_accounts")
    # Facts added since the table was made: its files get them from their lines, once (below).
    had_line_facts = fetch_value(conn, """SELECT count(*) FROM duckdb_columns()
        WHERE database_name = current_database() AND schema_name = 'raw' AND table_name = 'file_slices'
          AND column_name IN ('max_charge_start', 'last_start_end', 'sub_account_reach')""") == 3
    for table, added in (("raw.delivery_slices", RAW_DELIVERY_SLICES_ADDED), ("raw.file_slices", RAW_FILE_SLICES_ADDED)):
        for column, dtype in added:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {dtype}")
    conn.execute(f"CREATE TABLE IF NOT EXISTS raw.quarantine (\n    {duckdb_columns(QUARANTINE)}\n)")
    _migrate(conn, "raw.quarantine", QUARANTINE)
    # The raw rows live in the lake beside the warehouse; raw.* are views over it. A warehouse made
    # before the lake has them as tables: brought up to the current columns, then moved in.
    lake = lake_of_connection(conn)
    for kind, table in RAW_TABLES.items():
        if is_table(conn, table):
            _migrate(conn, table, SCHEMAS[kind])
            adopt_table(conn, lake, kind)
    create_views(conn, lake)
    lake_tables.refresh_views(conn)
    backfill_file_slices(conn)
    if not had_line_facts:
        backfill_line_facts(conn)
    if is_table(conn, "core.billing_lines"):  # a table before the lake; a view over it since
        conn.execute("DROP TABLE core.billing_lines")


_DECIMAL = re.compile(r"DECIMAL\((\d+),(\d+)\)")


def is_widening(old: str, new: str) -> bool:
    """Whether DECIMAL type `old` fits in `new` without losing a digit: as many decimals or more,
    and as many integer digits or more (DECIMAL(18,6) → DECIMAL(38,10) keeps every value exactly)."""
    a, b = _DECIMAL.fullmatch(old.replace(" ", "")), _DECIMAL.fullmatch(new.replace(" ", ""))
    if not (a and b):
        return False
    (p1, s1), (p2, s2) = map(int, a.groups()), map(int, b.groups())
    return s2 >= s1 and p2 - s2 >= p1 - s1


def _widens_stored_values(conn: duckdb.DuckDBPyConnection, table: str, column: str, old: str, new: str) -> bool:
    """A type change that keeps every stored value exactly: a widening, or more decimals at the same
    width (DECIMAL(38,6) → DECIMAL(38,10)) where every stored value fits the fewer integer digits."""
    if is_widening(old, new):
        return True
    a, b = _DECIMAL.fullmatch(old.replace(" ", "")), _DECIMAL.fullmatch(new.replace(" ", ""))
    if not (a and b) or int(b.group(2)) < int(a.group(2)):
        return False
    integer_digits = int(b.group(1)) - int(b.group(2))
    return bool(fetch_value(conn, f'SELECT coalesce(max(abs("{column}")) < CAST(10 AS DOUBLE) ^ {integer_digits}, true) FROM {table}'))


def widen_column(conn: duckdb.DuckDBPyConnection, table: str, column: str, wanted: str) -> None:
    """Widen a DECIMAL column of an existing table to `wanted`, every stored value kept exactly;
    a change that would lose a digit, or of another kind, is refused."""
    schema_name, table_name = table.split(".")
    dtype = fetch_value(conn, """SELECT data_type FROM information_schema.columns
        WHERE table_schema = ? AND table_name = ? AND column_name = ?""", [schema_name, table_name, column])
    if dtype is None or dtype.replace(" ", "") == wanted.replace(" ", ""):
        return
    if not _widens_stored_values(conn, table, column, dtype, wanted):
        raise WarehouseSchemaError(f"{table}.{column} is {dtype} in the warehouse but {wanted} in this version")
    conn.execute(f'ALTER TABLE {table} ALTER COLUMN "{column}" TYPE {wanted}')


def _migrate(conn: duckdb.DuckDBPyConnection, table: str, schema) -> None:
    """Columns the canonical schema added are added (NULL for old rows); a column that became
    optional drops NOT NULL; a DECIMAL that became wider (money from DECIMAL(18,6) to
    DECIMAL(38,10)) is widened in place, every stored value kept. Any other changed type is
    refused: it needs a deliberate migration."""
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
            widen_column(conn, table, field.name, wanted)
        if field.nullable and not nullable:
            conn.execute(f'ALTER TABLE {table} ALTER COLUMN "{field.name}" DROP NOT NULL')


# DuckDB's working memory per connection (spilling to disk beyond it), for every connection the
# pipeline opens, the run's and its readers': left at DuckDB's default (80 % of the machine), the
# summary's money-conservation join of a 10M-line warehouse alone took 1.5 GB more than the whole
# run before it. FINOPS_DUCKDB_MEMORY_LIMIT overrides.
DEFAULT_MEMORY_LIMIT = "1GB"


def memory_limit() -> str:
    return os.environ.get("FINOPS_DUCKDB_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT


_SIZE_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}


def memory_limit_bytes(conn: duckdb.DuckDBPyConnection) -> int:
    """The connection's memory limit in bytes, from DuckDB's own spelling of it ('953.6 MiB', one
    decimal cut, not rounded): read as the middle of that tenth, so setting it back prints the same."""
    return _setting_bytes(conn, "memory_limit")


def _setting_bytes(conn: duckdb.DuckDBPyConnection, setting: str) -> int:
    text = conn.execute("SELECT current_setting(?)", [setting]).fetchall()[0][0]
    number, unit = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]+)\s*", text).groups()
    tenth = 0.05 if "." in number else 0
    return int((float(number) + tenth) * _SIZE_UNITS[unit])


@contextmanager
def memory_share(conn: duckdb.DuckDBPyConnection, share: float) -> Iterator[None]:
    """Hold the statements inside to `share` of the connection's memory limit, restored after.
    For statements that stream their result out and can spill what they hold: DuckDB otherwise
    fills the whole limit with what it could have left on disk, and that is the run's peak."""
    limit = memory_limit_bytes(conn)
    conn.execute(f"SET memory_limit = '{int(limit * share)}B'").fetchall()  # a number we computed, not text from data
    try:
        yield
    finally:
        conn.execute(f"SET memory_limit = '{limit}B'").fetchall()


def keep_block_memory(conn: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Let DuckDB's block allocator keep the connection's working memory for reuse (DuckDB's
    default gives it none), up to the memory limit: the peak stays the limit's.

    Why: a large build works at the limit, where DuckDB evicts blocks, and each eviction handed
    the freed pages back to the system (a jemalloc purge, malloc_trim) for the next block to fault
    in again. On a 1M-line CUR `core.cost_lines` gave back 4 GB that way and took 0.8M page faults,
    a quarter of its CPU time in the kernel (perf and gdb on the madvise calls: BufferPool::EvictBlocks
    → TryFlushDeallocated). Kept, the whole run took 15 % fewer faults and 0.3-0.9 s less."""
    limit = memory_limit_bytes(conn)
    # The setting belongs to the database instance, which connections to one file share, and DuckDB
    # refuses to lower it: a second connection, or one opened while a write holds a share, keeps it.
    if _setting_bytes(conn, "block_allocator_memory") < limit:
        try:
            conn.execute(f"SET block_allocator_memory = '{limit}B'").fetchall()  # a number we read, not text from data
        except duckdb.InvalidInputException:
            # A memory limit above what DuckDB lets the block allocator have (80 % of the machine's
            # memory): the connection works as DuckDB's default has it, only without the reuse.
            pass
    return conn


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection whose timestamps come back in UTC, whatever the machine's zone, held to the
    pipeline's memory limit."""
    conn = duckdb.connect(str(path), read_only=read_only, config={"memory_limit": memory_limit()})
    conn.execute("SET TimeZone = 'UTC'")
    return keep_block_memory(conn)


FILE_SLICES_SQL = Path(__file__).resolve().parents[1] / "lake" / "facts.sql"


def record_file_slices(conn: duckdb.DuckDBPyConnection, path: str, sha256: str, parquet_glob: str,
                       by_invoice: bool = False) -> None:
    """The ledger's facts of one billing file version, from its rows as written (in staging);
    `by_invoice`: its connector's invoices are deliveries (each invoice id a slice of its own)."""
    conn.execute("DELETE FROM raw.file_slices WHERE path = ? AND sha256 = ?", [path, sha256])
    conn.execute(FILE_SLICES_SQL.read_text().replace("$lines", f"read_parquet({_literal(parquet_glob)}, hive_partitioning = false)"),
                 {"path": path, "sha256": sha256, "by_invoice": by_invoice})


def backfill_file_slices(conn: duckdb.DuckDBPyConnection) -> None:
    """Billing versions read before raw.file_slices existed get their facts, once, from the lake."""
    missing = fetch_all(conn, """SELECT f.path, f.sha256 FROM raw.files AS f
        WHERE f.kind = 'billing' AND f.rows_loaded > 0
          AND NOT EXISTS (SELECT 1 FROM raw.file_slices AS s WHERE s.path = f.path AND s.sha256 = f.sha256)""")
    for path, sha in missing:
        conn.execute(FILE_SLICES_SQL.read_text().replace(
            "$lines", "(SELECT * FROM raw.cost_lines WHERE x_SourceFile = $path AND x_SourceSha256 = $sha256)"),
            {"path": path, "sha256": sha, "by_invoice": False})


def backfill_line_facts(conn: duckdb.DuckDBPyConnection) -> None:
    """Facts recorded before their columns existed, once, from the lake's lines: the earliest and
    latest charge start of each slice (by which plain uploads of disjoint days add up), the earliest
    end of the lines starting last (how far an export has come; pipelines/lake/facts.sql) and how far
    it has come for each sub-account its lines bill (a billing profile's export holding a
    subscription's). Without them an upgraded warehouse's files would keep the older, coarser rules."""
    conn.execute("""
        UPDATE raw.file_slices AS fs
        SET min_charge_start = b.first_start, max_charge_start = b.last_start, last_start_end = b.last_start_end,
            sub_account_reach = b.sub_account_reach
        FROM (SELECT path, sha256, ProviderName, BillingAccountId, BillingPeriodStart, invoice,
                     min(first_start) AS first_start, max(last_start) AS last_start,
                     arg_min(last_start_end, {'start': -epoch_us(last_start), 'end': last_start_end})
                         FILTER (WHERE last_start_end IS NOT NULL) AS last_start_end,
                     coalesce(list({'id': sub_account, 'first_start': coalesce(first_day_start, first_start), 'last_start': last_start,
                                    'last_start_end': last_start_end}
                                   ORDER BY sub_account) FILTER (WHERE sub_account IS NOT NULL), []) AS sub_account_reach
              FROM (SELECT f.path, f.sha256, c.ProviderName, c.BillingAccountId, c.BillingPeriodStart,
                           CASE WHEN f.by_invoice THEN c.InvoiceId END AS invoice, c.SubAccountId AS sub_account,
                           min(c.ChargePeriodStart) AS first_start, max(c.ChargePeriodStart) AS last_start,
                           min(c.ChargePeriodStart) FILTER (WHERE c.ChargePeriodEnd <= c.ChargePeriodStart + INTERVAL 1 DAY) AS first_day_start,
                           arg_min(c.ChargePeriodEnd, {'start': -epoch_us(c.ChargePeriodStart), 'end': c.ChargePeriodEnd})
                               FILTER (WHERE c.ChargePeriodStart IS NOT NULL AND c.ChargePeriodEnd IS NOT NULL) AS last_start_end
                    FROM (SELECT DISTINCT path, sha256, coalesce(by_invoice, false) AS by_invoice FROM raw.file_slices) AS f
                    JOIN raw.cost_lines AS c ON c.x_SourceFile = f.path AND c.x_SourceSha256 = f.sha256
                    GROUP BY ALL)
              GROUP BY path, sha256, ProviderName, BillingAccountId, BillingPeriodStart, invoice) AS b
        WHERE fs.path = b.path AND fs.sha256 = b.sha256 AND fs.line_provider IS NOT DISTINCT FROM b.ProviderName
          AND fs.line_account IS NOT DISTINCT FROM b.BillingAccountId AND fs.line_period IS NOT DISTINCT FROM b.BillingPeriodStart
          AND fs.line_invoice IS NOT DISTINCT FROM b.invoice""")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def prepare(conn: duckdb.DuckDBPyConnection, always_set_up: bool = False) -> None:
    """A session as every step of a run wants it: UTC, streaming writes, the warehouse set up."""
    # Sessions speak UTC so day and minute boundaries never depend on the machine's zone.
    conn.execute("SET TimeZone = 'UTC'").fetchall()  # DuckDB 2: every result drained before the next statement
    # Large CREATE TABLE AS need not keep row order: DuckDB then streams and spills in bounded memory.
    conn.execute("SET preserve_insertion_order = false").fetchall()
    # Schemas, raw views and macros, unless this code already set this warehouse up (the ingest always does).
    if always_set_up or not is_set_up(conn):
        set_up(conn)
