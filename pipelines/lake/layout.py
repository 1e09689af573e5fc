"""Where the lake keeps each kind of raw row, and the warehouse views that read it.

    <warehouse folder>/<warehouse name>.lake/
        raw/cost_lines/provider=<ProviderName>/billing_period=<YYYY-MM>/file=<sha256>/data_N.parquet
        raw/gpu_samples/day=<YYYY-MM-DD>/file=<sha256>/data_N.parquet
        raw/workloads/file=<sha256>/data_N.parquet
        raw/storage_events/file=<sha256>/data_N.parquet
        _staging/<sha256>-<pid>/...        a file being written (never read; removed if orphaned)
        core/cost_lines/...                built billing lines (pipelines/warehouse/lake_tables.py)
        marts/cost_attribution/...         their phases, and the transfer lines of each month
        marts/egress_lines_by_billing_month/...

A landing file version (its sha256) is the unit of writing: its rows land in a folder of their
own under every partition they touch, moved into place whole (a directory rename) once the
connector has read the file to its end. Which of those folders count is the warehouse's business:
raw.files registers a version once its rows are in place, and the raw.* views read only the
folders of registered versions. So a reader of a published warehouse file sees exactly the rows
that file's registry names, however many folders a running (or killed) ingest has added since;
the ledger supersedes a delivery without moving any data; and any Parquet reader (DuckDB, Spark,
Trino, Athena) can read the folders as a Hive-partitioned table.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.schemas import RAW_TABLES, SCHEMAS

# A version registered with rows in place: its folders count. (A file whose rows were all
# quarantined, or that failed, has none.)
REGISTERED_VERSIONS = "SELECT sha256 FROM raw.files WHERE rows_loaded > 0"
SCHEMA_FOLDER = "schema"  # a zero-row file per table: the view's columns even before any data arrives
MIGRATED = "migrated"  # rows of a warehouse made before the lake, moved in by `ensure_lake`


def _provider_key(batch: pa.RecordBatch) -> pa.Array:
    name = pc.replace_substring_regex(batch.column("ProviderName"), "[^A-Za-z0-9._-]", "_")
    return pc.fill_null(pc.if_else(pc.equal(name, ""), None, name), "unknown")


def _utc_day_text(ts: pa.Array, length: int) -> pa.Array:
    """'YYYY-MM-DD'[:length] of each UTC timestamp, 'unknown' where it is null. Through a date cast,
    not strftime (which converts every value through the time zone database: 6× slower), and one
    value repeated where the batch holds one day, as a batch of telemetry or billing lines mostly does."""
    days = pc.cast(pc.cast(ts, pa.timestamp("us")), pa.date32())  # Arrow keeps UTC values: dropping the zone keeps the UTC day
    if days.null_count == 0 and len(days):
        low, high = pc.min_max(days).values()
        if low == high:
            return pa.repeat(pa.scalar(low.as_py().isoformat()[:length], pa.string()), len(days))
    text = pc.cast(days, pa.string())
    return pc.fill_null(text if length == 10 else pc.utf8_slice_codeunits(text, 0, length), "unknown")


def _period_key(batch: pa.RecordBatch) -> pa.Array:
    start = pc.coalesce(batch.column("BillingPeriodStart"), batch.column("ChargePeriodStart"))
    return _utc_day_text(start, len("YYYY-MM"))


def _day_key(batch: pa.RecordBatch) -> pa.Array:
    return _utc_day_text(batch.column("ts"), len("YYYY-MM-DD"))


@dataclass(frozen=True)
class Partitioning:
    """How one raw table is laid out: Hive partition columns, followed by the source file version.
    Each column is computed twice alike — from an Arrow batch (the ingest's streaming writer) and
    in SQL (moving an older warehouse's table in) — so both are kept here, side by side."""

    columns: tuple[tuple[str, str, Callable[[pa.RecordBatch], pa.Array]], ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.columns] + ["file"]

    def sql(self) -> list[tuple[str, str]]:
        return [(name, expr) for name, expr, _ in self.columns]


PARTITIONING: dict[str, Partitioning] = {
    # Billing by provider and billing period (the ledger's unit of replacement), then file version.
    "billing": Partitioning((
        ("provider", "coalesce(nullif(regexp_replace(ProviderName, '[^A-Za-z0-9._-]', '_', 'g'), ''), 'unknown')", _provider_key),
        ("billing_period", "coalesce(strftime(coalesce(BillingPeriodStart, ChargePeriodStart), '%Y-%m'), 'unknown')", _period_key),
    )),
    # Telemetry by UTC day: a day's new samples cost their own size.
    "telemetry": Partitioning((("day", "coalesce(strftime(ts, '%Y-%m-%d'), 'unknown')", _day_key),)),
    "workload": Partitioning(()),
    "storage": Partitioning(()),
}


def lake_of(database: str | Path) -> Path:
    """The lake folder of a warehouse file: beside it, named after it (`warehouse.duckdb` →
    `warehouse.lake`). A run's staging copy (`warehouse.duckdb.staging-<pid>`) shares the lake of
    the warehouse it will be published as."""
    path = Path(re.sub(r"\.staging-\d+$", "", str(database)))
    return path.with_name(path.stem + ".lake")


def lake_of_connection(conn: duckdb.DuckDBPyConnection) -> Path:
    """The lake of the warehouse file `conn` has open (an in-memory database gets a temporary one)."""
    rows = conn.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    row = rows[0] if rows else None
    if not row or not row[0]:
        return Path(tempfile.gettempdir()) / f"finops-memory-{id(conn)}.lake"
    return lake_of(Path(row[0]).resolve())


def table_root(lake: Path, kind: str) -> Path:
    schema, name = RAW_TABLES[kind].split(".")
    return lake / schema / name


def version_files(lake: Path, kind: str, sha256: str) -> str | None:
    """A glob of one file version's Parquet files in its table, under every partition it touched;
    None when it has none there."""
    pattern = Path(*("*" for _ in PARTITIONING[kind].columns), f"file={sha256}", "*.parquet")
    root = table_root(lake, kind)
    return str(root / pattern) if any(root.glob(str(pattern))) else None


def staging_root(lake: Path) -> Path:
    return lake / "_staging"


def _sql_string(text: str) -> str:
    """A SQL string literal (a path in a view's definition; DDL cannot take bound parameters)."""
    return "'" + text.replace("'", "''") + "'"


def schema_file(lake: Path, kind: str) -> Path:
    parts = PARTITIONING[kind]
    return table_root(lake, kind).joinpath(*(f"{n}=_" for n, _ in parts.sql()), f"file={SCHEMA_FOLDER}", "data_0.parquet")


def write_schema_file(lake: Path, kind: str) -> None:
    """The table's zero-row file, in a partition folder of its own (`file=schema`), so the view has
    its columns with no data yet and Hive readers see one consistent layout. Rewritten each time:
    a column the canonical schema gained reaches the view at once."""
    target = schema_file(lake, kind)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".data_0.parquet.tmp-{id(target)}")
    pq.write_table(pa.Table.from_batches([], schema=SCHEMAS[kind]), tmp)
    tmp.replace(target)


def view_sql(lake: Path, kind: str) -> str:
    """The raw.* view of one kind: the rows of registered file versions (and of a migrated
    pre-lake table), with the canonical columns only."""
    parts = PARTITIONING[kind]
    glob = str(table_root(lake, kind)) + "/**/*.parquet"
    columns = ", ".join(f'"{f.name}"' for f in SCHEMAS[kind])
    return (f"CREATE OR REPLACE VIEW {RAW_TABLES[kind]} AS\n"
            f"SELECT {columns}\n"
            f"FROM read_parquet({_sql_string(glob)}, hive_partitioning = true, union_by_name = true,\n"
            f"                  hive_types = {{{', '.join(repr(n) + ': VARCHAR' for n in parts.names)}}})\n"
            f"WHERE file IN ({REGISTERED_VERSIONS}) OR file = '{MIGRATED}'")


def create_views(conn: duckdb.DuckDBPyConnection, lake: Path) -> None:
    """(Re)create each raw view where it is missing, reads another lake (a warehouse moved with its
    lake) or lacks a column of the canonical schema; a current view is left alone, keeping its comments."""
    for kind, table in RAW_TABLES.items():
        schema, name = table.split(".")
        found = conn.execute("SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = ? "
                             "AND database_name = current_database()", [schema, name]).fetchall()
        columns = [r[0] for r in conn.execute("SELECT column_name FROM duckdb_columns() WHERE schema_name = ? "
                                              "AND table_name = ? AND database_name = current_database() ORDER BY column_index",
                                              [schema, name]).fetchall()]
        current = (found and str(table_root(lake, kind)) in found[0][0] and columns == [f.name for f in SCHEMAS[kind]]
                   and schema_file(lake, kind).exists())  # every asset step passes here: a stat, not a scan of the lake
        if not current:
            write_schema_file(lake, kind)
            conn.execute(view_sql(lake, kind))


def adopt_table(conn: duckdb.DuckDBPyConnection, lake: Path, kind: str) -> int:
    """Move the rows of a raw table made before the lake (a warehouse of an older version) into
    the lake, each under its own file version (`migrated` where an old row has none), and drop the
    table: the view takes its name. Returns the rows moved."""
    table = RAW_TABLES[kind]
    rows = conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    if rows:
        parts = PARTITIONING[kind]
        partition_columns = "".join(f", {expr} AS {name}" for name, expr in parts.sql())
        target = table_root(lake, kind)
        target.mkdir(parents=True, exist_ok=True)
        conn.execute(
            f"COPY (SELECT *{partition_columns}, coalesce(x_SourceSha256, '{MIGRATED}') AS file FROM {table}) "
            f"TO {_sql_string(str(target))} (FORMAT parquet, COMPRESSION zstd, PARTITION_BY ({', '.join(parts.names)}), "
            f"OVERWRITE_OR_IGNORE, FILENAME_PATTERN 'migrated_{{i}}')")
    conn.execute(f"DROP TABLE {table}")
    return rows


def is_table(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    schema, name = table.split(".")
    return bool(conn.execute("SELECT 1 FROM duckdb_tables() WHERE schema_name = ? AND table_name = ? AND database_name = current_database()",
                             [schema, name]).fetchall())


def copy_warehouse(source: Path, target: Path) -> None:
    """Copy a warehouse with its lake: the file alone names rows it does not hold."""
    import shutil

    shutil.copyfile(source, target)
    if lake_of(source).exists():
        shutil.copytree(lake_of(source), lake_of(target), dirs_exist_ok=True)
