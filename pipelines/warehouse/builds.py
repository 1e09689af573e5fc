"""Which models a run must rebuild: one whose inputs are as they were when it was last built is
left as it is.

A model's rows are a function of its SQL and the code around it, the settings and the user's files
(`run_state.model_salt`), and the tables it reads (its declared deps, which a test holds equal to
what its SQL reads). Each table therefore has a version, and a model records the digest of its
inputs' versions when it is built (`core.period_builds`, period '*'):

- the raw tables (views over the lake): the registry's state — which file versions are loaded and
  what the ledger made of their deliveries. A file version's rows never change (its folder is named
  by its sha256), so the same registry means the same rows;
- a partitioned table (core.cost_lines, core.gpu_samples): the fingerprints of its periods;
- any other model: the digest it recorded when it was last built (none if another engine built it:
  then everything downstream is rebuilt).

Nothing here reads a table's rows: deciding costs O(files + models), whatever the history.
"""

from __future__ import annotations

import hashlib

import duckdb

from models.schemas import RAW_TABLES
from pipelines.warehouse.connection import fetch_value, table_exists
from pipelines.warehouse.periods import BUILDS_DDL, PERIOD_MODELS, WHOLE, whole_fingerprint

# The registry's state that decides the raw views' rows of some kinds of file ($kinds), and the
# ledger's verdicts on the billing deliveries.
REGISTRY_VERSION_SQL = """
SELECT md5(concat_ws('#',
    (SELECT string_agg(concat_ws('|', path, sha256, kind, status, rows_loaded, delivery_id), ';' ORDER BY path, sha256)
     FROM raw.files WHERE list_contains($kinds, kind)),
    (SELECT string_agg(concat_ws('|', delivery_id, status, complete, counts, superseded_by), ';' ORDER BY delivery_id)
     FROM raw.deliveries WHERE list_contains($kinds, 'billing')),
    (SELECT string_agg(concat_ws('|', delivery_id, line_provider, line_account, line_period, line_invoice, rank, counts, winner, CAST(counts_for AS VARCHAR)), ';'
                       ORDER BY delivery_id, line_provider, line_account, line_period, line_invoice, rank)
     FROM raw.delivery_slices WHERE list_contains($kinds, 'billing'))))
"""
# The raw tables besides each kind's rows: the registry and the ledger's tables (billing).
KIND_OF_RAW = {**{table: kind for kind, table in RAW_TABLES.items()}, "raw.deliveries": "billing", "raw.delivery_slices": "billing"}


def _raw_version(conn: duckdb.DuckDBPyConnection, raw_deps: list[str]) -> str:
    """The version of a model's raw inputs. A model reading raw.files beside one kind's rows (to keep
    only loaded versions) depends on the files of that kind alone: new telemetry leaves the billing
    lines' version as it was. raw.files alone stands for every kind."""
    kinds = sorted({KIND_OF_RAW[d] for d in raw_deps if d in KIND_OF_RAW}) or sorted(RAW_TABLES)
    return fetch_value(conn, REGISTRY_VERSION_SQL, {"kinds": kinds}) or ""


def _version(conn: duckdb.DuckDBPyConnection, table: str) -> str | None:
    if table not in PERIOD_MODELS:
        return whole_fingerprint(conn, table)
    if not table_exists(conn, "core.period_builds"):
        return None
    return fetch_value(conn, "SELECT md5(string_agg(period || '=' || fingerprint, ';' ORDER BY period)) "
                             "FROM core.period_builds WHERE model = ?", [table])


def inputs_fingerprint(conn: duckdb.DuckDBPyConnection, table: str, deps: tuple[str, ...], salt: str) -> str | None:
    """The digest of what `table` would be built from now; None when an input has no known version
    (never built here, or built by another engine): the model must be built."""
    raw = sorted(d for d in deps if d.startswith("raw."))
    versions = [(dep, _version(conn, dep)) for dep in sorted(deps) if not dep.startswith("raw.")]
    if raw:
        versions.append((",".join(raw), _raw_version(conn, raw)))
    if any(v is None for _, v in versions):
        return None
    return hashlib.sha256("\n".join([salt, table, *(f"{d}={v}" for d, v in versions)]).encode()).hexdigest()[:32]


def built_from(conn: duckdb.DuckDBPyConnection, table: str, fingerprint: str | None) -> bool:
    """Whether `table` exists and was last built from inputs with this fingerprint."""
    if fingerprint is None or not table_exists(conn, table) or not table_exists(conn, "core.period_builds"):
        return False
    return fetch_value(conn, "SELECT count(*) FROM core.period_builds WHERE model = ? AND period = ? AND fingerprint = ?",
                       [table, WHOLE, fingerprint]) > 0


def record(conn: duckdb.DuckDBPyConnection, table: str, fingerprint: str | None) -> None:
    """After a build: what it was built from (None: unknown, so whatever reads it is rebuilt next time)."""
    conn.execute(BUILDS_DDL)
    conn.execute("DELETE FROM core.period_builds WHERE model = ?", [table])
    if fingerprint is not None:
        conn.execute("INSERT INTO core.period_builds VALUES (?, ?, ?, now())", [table, WHOLE, fingerprint])
