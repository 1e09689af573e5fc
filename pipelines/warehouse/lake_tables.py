"""Built tables that live in the lake: Parquet per period, one build folder each, read through a view.

    <warehouse name>.lake/core/cost_lines/billing_period=<YYYY-MM>/build=<token>/data_0.parquet
    <warehouse name>.lake/core/cost_lines/_schema/build=<token>/data_0.parquet   (zero rows: the columns)

A table that grows with history (`core.cost_lines`, `marts.cost_attribution`,
`marts.egress_lines_by_billing_month`: a row per line or charge) is not kept in the warehouse file, which every
run copies to stage its work (pipelines/warehouse/publish.py) and checkpoints: a run would cost
the size of the history. Each build of a period writes a new folder, and `core.lake_builds`, in
the warehouse file, names the folder that is current for each period. The table's name is a view
over exactly those folders' files, so a staged run can write new folders while readers of the
published file go on reading the old ones; publishing the file is what switches them. Folders no
published warehouse names (superseded builds, a killed run's) are removed when a run publishes
and when the next one starts.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import duckdb

from pipelines.lake.layout import is_table, lake_of, lake_of_connection

LAKE_BUILDS_DDL = """
CREATE TABLE IF NOT EXISTS core.lake_builds (
    model VARCHAR NOT NULL,   -- schema.table
    period VARCHAR NOT NULL,  -- the period folder's value; '_schema' for the zero-row file of the columns
    folder VARCHAR NOT NULL,  -- relative to the lake: <schema>/<table>/<partition>=<period>/build=<token>
    built_at TIMESTAMPTZ NOT NULL
)
"""
SCHEMA_PERIOD = "_schema"
DATA_FILE = "data_0.parquet"
BUILD_PREFIX = "build="


def model_root(lake: Path, table: str) -> Path:
    schema, name = table.split(".")
    return lake / schema / name


def new_folder(lake: Path, table: str, partition: str, period: str) -> Path:
    """A folder for one new build of `period` (never an existing one: builds are never overwritten)."""
    part = SCHEMA_PERIOD if period == SCHEMA_PERIOD else f"{partition}={period}"
    folder = model_root(lake, table) / part / f"{BUILD_PREFIX}{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    return folder


def sql_string(text: str) -> str:
    """A SQL string literal (a path in COPY or a view's definition: DDL takes no bound parameters)."""
    return "'" + text.replace("'", "''") + "'"


def copy_to(folder: Path) -> str:
    """The tail of a COPY statement writing one Parquet file into `folder`: zstd, which every
    Parquet reader takes, in row groups of 30,720 rows. Measured on a 1M-line CUR month (2-core
    machine, the model's query writing it): DuckDB's default 122,880-row groups 4.1-5.4 s, 30,720
    2.9-3.0 s (and 22 MB), against 3.5 s for the same rows into a table of the warehouse file;
    larger groups took 24-25 s, and snappy instead of zstd 5.0-7.2 s."""
    return f"TO {sql_string(str(folder / DATA_FILE))} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 30720)"


def is_in_lake(conn: duckdb.DuckDBPyConnection, table: str) -> bool:
    """`table` is the view over its lake builds, and its columns were recorded (a `_schema` build)."""
    schema, name = table.split(".")
    is_view = conn.execute("SELECT count(*) FROM duckdb_views() WHERE schema_name = ? AND view_name = ? "
                           "AND database_name = current_database()", [schema, name]).fetchall()[0][0]
    if not is_view or not is_table(conn, "core.lake_builds"):
        return False
    return conn.execute("SELECT count(*) FROM core.lake_builds WHERE model = ? AND period = ?",
                        [table, SCHEMA_PERIOD]).fetchall()[0][0] > 0


def register(conn: duckdb.DuckDBPyConnection, table: str, built: dict[str, Path | None], everything: bool = False) -> None:
    """Record each period's new folder (None: the period has no rows any more), then point the view
    at the current folders. `everything`: a full build, whose periods replace all the table's."""
    lake = lake_of_connection(conn)
    conn.execute(LAKE_BUILDS_DDL)
    if everything:
        conn.execute("DELETE FROM core.lake_builds WHERE model = ?", [table])
    else:
        conn.execute("DELETE FROM core.lake_builds WHERE model = ? AND list_contains(?, period)", [table, list(built)])
    rows = [(table, period, folder.relative_to(lake).as_posix()) for period, folder in built.items() if folder is not None]
    if rows:
        conn.executemany("INSERT INTO core.lake_builds VALUES (?, ?, ?, now())", rows)
    create_view(conn, table)


def create_view(conn: duckdb.DuckDBPyConnection, table: str) -> None:
    """`table` as the view over the files of its current builds (a table of that name, built
    before the lake or by Spark, is dropped: the lake holds its rows now)."""
    lake = lake_of_connection(conn)
    folders = [r[0] for r in conn.execute(
        "SELECT folder FROM core.lake_builds WHERE model = ? ORDER BY period = ? DESC, period", [table, SCHEMA_PERIOD]).fetchall()]
    files = ", ".join(sql_string(str(lake / folder / DATA_FILE)) for folder in folders)
    if is_table(conn, table):
        conn.execute(f"DROP TABLE {table}")
    conn.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet([{files}], hive_partitioning = false)")


def refresh_views(conn: duckdb.DuckDBPyConnection) -> None:
    """Point every lake table's view at this warehouse's lake (a warehouse moved with its lake)."""
    if not is_table(conn, "core.lake_builds"):
        return
    lake = str(lake_of_connection(conn))
    for (table,) in conn.execute("SELECT DISTINCT model FROM core.lake_builds").fetchall():
        schema, name = table.split(".")
        found = conn.execute("SELECT sql FROM duckdb_views() WHERE schema_name = ? AND view_name = ? "
                             "AND database_name = current_database()", [schema, name]).fetchall()
        if found and lake not in found[0][0]:
            create_view(conn, table)


def referenced_folders(warehouse: Path) -> set[str] | None:
    """The build folders (relative to the lake) the published `warehouse` reads; None when it
    cannot be read (then nothing may be removed)."""
    if not warehouse.exists():
        return set()
    try:
        conn = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.Error:
        return None
    try:
        if not conn.execute("SELECT 1 FROM duckdb_tables() WHERE schema_name = 'core' AND table_name = 'lake_builds'").fetchall():
            return set()
        return {r[0] for r in conn.execute("SELECT folder FROM core.lake_builds").fetchall()}
    finally:
        conn.close()


# The builds the warehouse published before the last one read: kept one run longer, so a connection
# opened before a run's swap (a notebook, a dashboard) still finds the Parquet files its views name.
PREVIOUS_BUILDS = "previous-builds.txt"


def keep_for_one_more_run(warehouse: Path) -> None:
    """Record the build folders the published `warehouse` reads, before a run replaces it: the next
    removal keeps them (a reader opened before the swap still reads them). Written whole or not at all
    (a temporary file renamed), before the swap, so a kill at any point leaves a record naming folders
    that are either still read or kept one run too long, never too few. Left as it was when the
    warehouse cannot be read."""
    referenced = referenced_folders(warehouse)
    lake = lake_of(warehouse)
    if referenced is None or not lake.exists():
        return
    staged = lake / f"{PREVIOUS_BUILDS}.{os.getpid()}"
    staged.write_text("".join(f"{folder}\n" for folder in sorted(referenced)))
    os.replace(staged, lake / PREVIOUS_BUILDS)


def remove_unreferenced(warehouse: Path) -> list[Path]:
    """Delete the build folders that neither the published `warehouse` nor the one it replaced read
    (as keep_for_one_more_run recorded): builds two runs old, and what a killed run left. The caller
    holds the writer lock."""
    referenced = referenced_folders(warehouse)
    if referenced is None:
        return []
    lake = lake_of(warehouse)
    record = lake / PREVIOUS_BUILDS
    try:
        previous = set(record.read_text().split()) if record.exists() else set()
    except OSError:
        previous = set()
    keep = referenced | previous
    removed = []
    # <schema>/<table>/<period>/build=<token>; the raw tables' folders are file=<sha256>, never build=.
    for folder in lake.glob(f"*/*/*/{BUILD_PREFIX}*") if lake.exists() else ():
        if folder.relative_to(lake).as_posix() not in keep:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
            if not any(folder.parent.iterdir()):
                folder.parent.rmdir()
    return removed
