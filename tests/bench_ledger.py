"""`make bench` part: the ledger's rules (pipelines/ledger/deliveries.sql) on a synthetic Azure estate.

One EA billing account, a month: DEPTS department exports (SUBS subscriptions among them) and TEAMS
subscription exports, each with RUNS daily month-to-date runs of two datasets (actual, amortized)
in PARTS parts, every part named as Azure names it (`part_<n>.csv` in each run's folder). The
registry, manifests and per-file facts are written straight into the raw tables (no lines: the
rules read only those), then the rules are timed once. Each department's export holds its
subscriptions' exports, and each export's latest run replaces the runs before it.

    python -m tests.bench_ledger [--subs 5000 --depts 20 --teams 400 --runs 31 --parts 4]
"""

from __future__ import annotations

import argparse
import time

import duckdb

from pipelines.ledger.rules import RULES_SQL
from pipelines.warehouse import connection as c


def estate(conn: duckdb.DuckDBPyConnection, subs: int, depts: int, teams: int, runs: int, parts: int) -> int:
    """The raw tables of the synthetic estate; the number of billing files (a part billing none of an
    export's subscriptions is a header-only file, as an export writes it)."""
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("CREATE SCHEMA IF NOT EXISTS raw")
    for ddl in (c.RAW_REGISTRY_DDL, c.RAW_MANIFESTS_DDL, c.RAW_DELIVERIES_DDL, c.RAW_DELIVERY_SLICES_DDL, c.RAW_FILE_SLICES_DDL):
        conn.execute(ddl)
    for table, added in (("raw.files", c.RAW_FILES_ADDED), ("raw.delivery_slices", c.RAW_DELIVERY_SLICES_ADDED),
                         ("raw.file_slices", c.RAW_FILE_SLICES_ADDED)):
        for column, dtype in added:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {dtype}")
    conn.execute("""CREATE TEMP TABLE exports AS
        SELECT 'dept-' || d AS e, '/providers/Microsoft.Billing/billingAccounts/ea-1/departments/d-' || d AS scope,
               range(d, $subs, $depts) AS subs FROM range($depts) AS t(d)
        UNION ALL SELECT 'team-' || t, '/subscriptions/s-' || t, [t] FROM range($teams) AS x(t)""",
                 {"subs": subs, "depts": depts, "teams": teams})
    conn.execute("""CREATE TEMP TABLE runs AS
        SELECT e, scope, subs, ds, day, e || '-' || ds || '/20261001-20261031/run-' || day AS folder,
               'azure:' || e || '-' || ds || '-' || day AS delivery_id
        FROM exports, range(1, $runs + 1) AS b(day), (VALUES ('actual'), ('amortized')) AS c(ds)""", {"runs": runs})
    conn.execute("""INSERT INTO raw.manifests BY NAME
        SELECT folder || '/manifest.json' AS path, md5(folder) AS sha256, 'azure_export' AS format, 'Microsoft' AS provider,
               e || '-' || ds AS export_name, scope, DATE '2026-10-01' AS billing_period, delivery_id,
               TIMESTAMPTZ '2026-10-01' + to_days(day) AS created_at, 'replace' AS mode, false AS latest_pointer,
               list_transform(range($parts), lambda p: folder || '/part_' || p || '.csv') AS parts, now() AS ingested_at
        FROM runs""", {"parts": parts})
    conn.execute("""INSERT INTO raw.files BY NAME
        SELECT path, sha256, 1 AS size_bytes, 'manifest' AS connector, 'manifest' AS kind, 'manifest' AS status, now() AS ingested_at
        FROM raw.manifests""")
    conn.execute("""CREATE TEMP TABLE parts AS
        SELECT r.*, r.folder || '/part_' || p || '.csv' AS path, md5(r.folder || p) AS sha256,
               list_filter(r.subs, lambda s: s % $parts = p) AS part_subs
        FROM runs AS r, range($parts) AS q(p)""", {"parts": parts})
    conn.execute("""INSERT INTO raw.files BY NAME
        SELECT path, sha256, 1 AS size_bytes, 'azure_cost' AS connector, 'billing' AS kind, 'loaded' AS status,
               10 * len(part_subs) AS rows_read, 10 * len(part_subs) AS rows_loaded, now() AS ingested_at
        FROM parts""")
    conn.execute("""INSERT INTO raw.file_slices BY NAME
        SELECT path, sha256, 'Microsoft' AS line_provider, 'ea-1' AS line_account, TIMESTAMPTZ '2026-10-01' AS line_period,
               10 * len(part_subs) AS lines, false AS final, TIMESTAMPTZ '2026-10-01' + to_days(day) AS max_charge_end,
               ds AS dataset, false AS by_invoice, TIMESTAMPTZ '2026-10-01' AS min_charge_start,
               TIMESTAMPTZ '2026-10-01' + to_days(day - 1) AS max_charge_start,
               TIMESTAMPTZ '2026-10-01' + to_days(day) AS last_start_end,
               list_transform(part_subs, lambda s: {'id': 's-' || s, 'first_start': TIMESTAMPTZ '2026-10-01',
                                                    'last_start': TIMESTAMPTZ '2026-10-01' + to_days(day - 1),
                                                    'last_start_end': TIMESTAMPTZ '2026-10-01' + to_days(day)}) AS sub_account_reach
        FROM parts WHERE len(part_subs) > 0""")
    return conn.execute("SELECT count(*) FROM raw.files WHERE kind = 'billing'").fetchone()[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subs", type=int, default=5000)
    parser.add_argument("--depts", type=int, default=20)
    parser.add_argument("--teams", type=int, default=400)
    parser.add_argument("--runs", type=int, default=31)
    parser.add_argument("--parts", type=int, default=4)
    args = parser.parse_args()
    conn = duckdb.connect()
    files = estate(conn, args.subs, args.depts, args.teams, args.runs, args.parts)
    started = time.perf_counter()
    conn.execute(RULES_SQL.read_text())
    seconds = time.perf_counter() - started
    counting = conn.execute("SELECT count(*) FROM raw.files WHERE kind = 'billing' AND status = 'loaded'").fetchone()[0]
    print(f"ledger rules over {files:,} billing files ({args.depts} department and {args.teams} subscription exports, "
          f"{args.runs} runs x 2 datasets x {args.parts} parts): {seconds:.2f} s; {counting:,} files count")


if __name__ == "__main__":
    main()
