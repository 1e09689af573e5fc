"""`make bench` part five: the SQL models on DuckDB and on Spark local mode over a 1M-row CUR.

The CUR is bench_cur's file (the anonymised sample's rows repeated), loaded once through the
connectors into a warehouse (its lake); then every SQL model (or, with `tables`, only those the
named tables need) is built on a copy with DuckDB and on another copy with Spark (local[2], 4
shuffle partitions; raw tables read from the copy's lake in place), and the money totals of both
are compared.
Spark's start-up is timed apart from its build. On one machine expect Spark to be slower: it pays
for JVM start-up, Parquet hand-offs between models and shuffles that DuckDB does not need.

    python -m tests.bench_spark [--rows 1000000] [--compared-only]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

TOTALS = {
    "cost_lines": "SELECT BillingCurrency, sum(EffectiveCost), sum(x_EffectiveCostReporting), count(*) FROM core.cost_lines GROUP BY 1 ORDER BY 1",
    "spend_by_phase": "SELECT period, phase, cost_reporting, gpu_hours_paid FROM marts.spend_by_phase ORDER BY 1, 2",
    "hidden_costs": "SELECT kind, subkind, count(*), sum(wasted_cost), sum(avoidable_cost) FROM findings.hidden_costs GROUP BY ALL ORDER BY 1, 2",
}


def _settings(landing: Path):
    from pipelines.settings import FinopsSettings

    # Every finding listed (min_finding_cost 0): at the default, the CUR's small egress lines would
    # all fall under it and findings.hidden_costs would be empty on both engines, proving nothing.
    return FinopsSettings(landing_dir=str(landing), min_finding_cost=0)


def _totals(conn) -> dict:
    return {name: conn.execute(sql).fetchall() for name, sql in TOTALS.items()}


# The tables the issue compares; `needed_models(COMPARED)` is what building them takes.
COMPARED = ("core.cost_lines", "marts.spend_by_phase", "findings.hidden_costs")


def needed_models(targets) -> list[str]:
    """The SQL models `targets` read, directly or not, and `targets` themselves, in build order."""
    from pipelines.warehouse.models import SQL_MODELS, sql_model_order

    wanted, todo = set(), list(targets)
    while todo:
        table = todo.pop()
        if table in SQL_MODELS and table not in wanted:
            wanted.add(table)
            todo.extend(SQL_MODELS[table].deps)
    return [t for t in sql_model_order() if t in wanted]


def build_both(engine, folder: Path, rows: int, tables: list[str] | None = None) -> dict:
    """Load a `rows`-line CUR, build the SQL models (all, or `tables` in their order) with DuckDB
    and with Spark (`engine`), and return the times, whether the totals are identical, and the two
    warehouses (`duckdb_warehouse`, `spark_warehouse`)."""
    from pipelines.warehouse.connection import prepare
    from pipelines.warehouse.models import SQL_MODELS, sql_model_order
    from pipelines.engines.resource import SqlEngineResource
    from pipelines.engines.spark import run_models
    from pipelines.ingest.landing import ingest_landing
    from pipelines.lake.layout import copy_warehouse
    from pipelines.warehouse.connection import connect
    from tests.bench_cur import write_scaled

    landing = folder / "landing"
    landing.mkdir(parents=True, exist_ok=True)
    write_scaled(landing / f"cur-{rows}.csv", rows)
    loaded = folder / "loaded.duckdb"
    conn = connect(loaded)
    started = time.perf_counter()
    prepare(conn)
    ingest_landing(conn, landing)
    conn.close()
    ingest_s = time.perf_counter() - started
    settings = _settings(landing)

    copy_warehouse(loaded, folder / "duckdb.duckdb")
    conn = connect(folder / "duckdb.duckdb")
    prepare(conn)
    duck = SqlEngineResource()
    started = time.perf_counter()
    tables = tables or sql_model_order()
    for table in tables:
        inputs = SQL_MODELS[table].inputs(settings) if SQL_MODELS[table].inputs else {}
        duck.build(conn, table, settings.sql_params(), inputs)
    duckdb_s = time.perf_counter() - started
    duck_totals = _totals(conn)
    lines = conn.execute("SELECT count(*) FROM core.cost_lines").fetchall()[0][0]
    conn.close()

    copy_warehouse(loaded, folder / "spark.duckdb")
    conn = connect(folder / "spark.duckdb")
    started = time.perf_counter()
    stats = run_models(conn, engine, settings, tables)
    spark_s = time.perf_counter() - started
    spark_totals = _totals(conn)
    conn.close()
    slowest = sorted(stats, key=lambda s: -s.seconds)[:5]
    return {"cur_rows": rows, "cost_lines": lines, "models": len(tables), "ingest_s": round(ingest_s, 1),
            "duckdb_models_s": round(duckdb_s, 1), "spark_models_s": round(spark_s, 1),
            "spark_slowest_models": {s.table: round(s.seconds, 1) for s in slowest},
            "identical_totals": duck_totals == spark_totals,
            "duckdb_warehouse": str(folder / "duckdb.duckdb"), "spark_warehouse": str(folder / "spark.duckdb")}


def main() -> None:
    import tempfile

    from pipelines.engines.spark import SparkEngine, spark_available

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--compared-only", action="store_true", help=f"build only what {', '.join(COMPARED)} need")
    args = parser.parse_args()
    ready, why = spark_available()
    if not ready:
        print(json.dumps({"spark": f"skipped: {why}"}))
        return
    with tempfile.TemporaryDirectory() as tmp:
        engine = SparkEngine(master=args.master, lake_dir=str(Path(tmp) / "lake"))
        started = time.perf_counter()
        engine.session()
        startup = time.perf_counter() - started
        result = build_both(engine, Path(tmp), args.rows, needed_models(COMPARED) if args.compared_only else None)
        result = {k: v for k, v in result.items() if not k.endswith("_warehouse")}
    result = {"machine": f"{os.cpu_count()} cores", "spark_master": args.master, "spark_startup_s": round(startup, 1), **result}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
