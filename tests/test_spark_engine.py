"""The SQL models on Apache Spark (pipelines/engines): every model translates, runs, and gives the
same money as DuckDB, to the cent (in fact to the last of its 10 decimals).

Skipped, with the reason, where the Spark extra or a Java runtime is missing; `.ci/run` installs
Java so CI always runs them. One Spark session (local[2]) serves the whole module. The 1M-row CUR
test runs by default (a few minutes on 2 cores); FINOPS_SPARK_BIG=0 runs a 5,000-row CUR instead.
"""

import json
import os
from decimal import Decimal
from pathlib import Path

import pytest

from pipelines.engines.spark import spark_available

READY, WHY = spark_available()
pytestmark = pytest.mark.skipif(not READY, reason=f"Spark tests skipped: {WHY}")

# The totals the issue names, compared exactly; ORDER BY makes the row lists comparable.
TOTALS = {
    "core.cost_lines per currency": """
        SELECT BillingCurrency, sum(EffectiveCost), sum(BilledCost), sum(ListCost), sum(x_EffectiveCostReporting), count(*)
        FROM core.cost_lines GROUP BY 1 ORDER BY 1""",
    "marts.spend_by_phase": """
        SELECT period, phase, cost_reporting, cost_by_billing_currency, share_pct, gpu_hours_paid, gpu_hours_busy,
               utilization_pct, cost_per_busy_gpu_hour
        FROM marts.spend_by_phase ORDER BY period, phase""",
    "findings.hidden_costs": """
        SELECT kind, subkind, count(*), sum(wasted_cost), sum(avoidable_cost), sum(wasted_cost_reporting),
               sum(avoidable_cost_reporting), list(finding_id ORDER BY finding_id)
        FROM findings.hidden_costs GROUP BY ALL ORDER BY kind, subkind""",
    "marts.cost_attribution": """
        SELECT phase, method, sum(amount_billing), sum(amount_reporting), count(*)
        FROM marts.cost_attribution GROUP BY ALL ORDER BY phase, method""",
}


def totals(path: Path) -> dict:
    from pipelines.warehouse.connection import connect

    conn = connect(path, read_only=True)
    try:
        return {name: conn.execute(sql).fetchall() for name, sql in TOTALS.items()}
    finally:
        conn.close()


def cents(rows: list[tuple]) -> list[tuple]:
    from decimal import Decimal

    return [tuple(round(v, 2) if isinstance(v, Decimal) else v for v in row) for row in rows]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from pipelines.engines.spark import SparkEngine

    engine = SparkEngine(lake_dir=str(tmp_path_factory.mktemp("spark-lake")))
    engine.session()  # the one start-up of the module
    return engine


def build_on_spark(engine, duckdb_warehouse: Path, target: Path, settings, tables: list[str] | None = None) -> Path:
    """A copy of a DuckDB-built warehouse with every SQL model (or `tables`) rebuilt on Spark."""
    from pipelines.engines.spark import run_models
    from pipelines.lake.layout import copy_warehouse
    from pipelines.warehouse.connection import connect

    copy_warehouse(duckdb_warehouse, target)  # with its lake: the raw views read the lake's Parquet
    conn = connect(target)
    try:
        run_models(conn, engine, settings, tables)
    finally:
        conn.close()
    return target


def demo_settings(demo_run):
    from pipelines.demo.scenario import TELEMETRY_TZ
    from pipelines.settings import FinopsSettings

    return FinopsSettings(landing_dir=str(demo_run.out / "landing"), timezone=TELEMETRY_TZ, reporting_currency="USD")


@pytest.fixture(scope="module")
def spark_demo(engine, demo_run, tmp_path_factory) -> Path:
    assert demo_run.returncode == 0, demo_run.output
    return build_on_spark(engine, demo_run.out / "warehouse.duckdb", tmp_path_factory.mktemp("spark") / "warehouse.duckdb",
                          demo_settings(demo_run))


def test_every_model_translates():
    """Every SQL model of the graph parses with SQLGlot (DuckDB) and gives Spark SQL that parses,
    each statement of a multi-statement model (core.cost_lines: a temp table, then the model)."""
    import sqlglot

    from pipelines.warehouse.models import sql_model_order
    from pipelines.engines.spark_sql import Spark4, parse_model, transpile_query

    models = sql_model_order()
    assert len(models) >= 20
    failures = {}
    for table in models:
        try:
            for query in parse_model(table).queries:
                assert sqlglot.parse_one(transpile_query(query), read=Spark4) is not None, table
        except Exception as exc:  # every model's failure at once, not the first
            failures[table] = f"{type(exc).__name__}: {exc}"
    assert not failures, failures
    assert [s.kind for s in parse_model("core.cost_lines").steps] == ["temp", "model", "drop"]


def test_demo_totals_identical_on_both_engines(demo_run, spark_demo):
    duck, spark = totals(demo_run.out / "warehouse.duckdb"), totals(spark_demo)
    for name in TOTALS:
        assert cents(spark[name]) == cents(duck[name]), f"{name} differs to the cent"
        assert spark[name] == duck[name], f"{name} differs beyond the cent"
    assert duck["core.cost_lines per currency"] and duck["findings.hidden_costs"]


def test_every_model_runs_on_both_engines_with_the_same_columns(demo_run, spark_demo):
    """Each model built on Spark has DuckDB's column names, order and types, and its row count."""
    from pipelines.warehouse.models import sql_model_order
    from pipelines.warehouse.connection import connect

    duck, spark = connect(demo_run.out / "warehouse.duckdb", read_only=True), connect(spark_demo, read_only=True)
    try:
        for table in sql_model_order():
            assert spark.execute(f"DESCRIBE {table}").fetchall() == duck.execute(f"DESCRIBE {table}").fetchall(), table
            assert spark.execute(f"SELECT count(*) FROM {table}").fetchall() == \
                duck.execute(f"SELECT count(*) FROM {table}").fetchall(), table
    finally:
        duck.close()
        spark.close()


def billing_lines_on_both(engine, tmp_path, files: dict[str, str], query: str) -> tuple[list, list]:
    """`query`'s answer over core.billing_lines built on DuckDB, then on Spark, from a landing
    folder of `files` (name → text) ingested once."""
    from pipelines.engines.resource import SqlEngineResource
    from pipelines.ingest.landing import ingest_landing
    from pipelines.settings import FinopsSettings
    from pipelines.warehouse.connection import connect, prepare

    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    for name, text in files.items():
        (landing / name).write_bytes(text.encode())
    settings = FinopsSettings(landing_dir=str(landing))
    conn = connect(warehouse)
    try:
        prepare(conn)
        ingest_landing(conn, landing)
    finally:
        conn.close()
    (tmp_path / "spark").mkdir()
    spark = build_on_spark(engine, warehouse, tmp_path / "spark" / "warehouse.duckdb", settings, ["core.billing_lines"])
    conn = connect(warehouse)
    try:
        SqlEngineResource().build(conn, "core.billing_lines", settings.sql_params(), {})
    finally:
        conn.close()
    [duck], [on_spark] = (answers_of(path, [query]) for path in (warehouse, spark))
    return duck, on_spark


def test_a_plain_upload_counting_for_part_of_its_days_on_both_engines(engine, tmp_path):
    """Downloads of days 1-8 and 8-14: the first counts for days 1-7 only (raw.delivery_slices.counts_for),
    and Spark keeps the same lines of it as DuckDB."""
    from tests.test_ledger_deliveries import cur_days, days_total

    duck, spark = billing_lines_on_both(engine, tmp_path, {"early.csv": cur_days(1, 8), "late.csv": cur_days(8, 14)},
                                        "SELECT sum(BilledCost), count(*) FROM core.billing_lines")
    text = cur_days(1, 14)
    assert duck == spark == [(days_total(text), len(text.splitlines()) - 1)]


def test_a_month_so_far_line_an_invoice_bills_part_of_on_both_engines(engine, tmp_path):
    """A GPU cloud's month-so-far line beside the first week's invoice (core.billing_lines'
    invoiced_in_part): Spark keeps the same remainder, start and quantity as DuckDB, to the unit."""
    from tests.test_overwritten_billing import GPU_CLOUD, month_so_far

    files = {"mtd.csv": GPU_CLOUD + month_so_far("", "ins-a", 1, 12, "1100.00") + month_so_far("", "ins-b", 1, 12, "550.00"),
             "week-1.csv": GPU_CLOUD + month_so_far("INV-W1", "ins-a", 1, 8, "700.00") + month_so_far("INV-W1", "ins-b", 3, 6, "300.00")}
    duck, spark = billing_lines_on_both(engine, tmp_path, files, (
        "SELECT x_SourceFile, ResourceId, ChargePeriodStart, BilledCost, EffectiveCost, ConsumedQuantity, PricingQuantity "
        "FROM core.billing_lines ORDER BY ALL"))
    assert duck == spark
    assert [(r[0], r[1], r[3]) for r in duck] == [
        ("mtd.csv", "ins-a", Decimal("400.0000000000")), ("mtd.csv", "ins-b", Decimal("400.0000000000")),
        ("week-1.csv", "ins-a", Decimal("700.0000000000")), ("week-1.csv", "ins-b", Decimal("300.0000000000"))]


@pytest.mark.skipif(os.environ.get("FINOPS_SPARK_BIG") != "0",
                    reason="the 1M-row CUR test below covers this small CUR (run when FINOPS_SPARK_BIG=0 skips that one)")
def test_scaled_cur_totals_identical(engine, tmp_path):
    """A CUR of repeated sample lines (bench_spark's file, small here) gives the same totals: the
    quick stand-in for the 1M-row test where that one is switched off."""
    from tests.bench_spark import build_both

    result = build_both(engine, tmp_path, rows=5_000)
    assert result["identical_totals"], result


def test_unit_macros_read_blocks_alike_on_both_engines(engine):
    """focus_unit and time_unit_seconds on units with and without a block count: the same answers on
    Spark (their bodies expanded and flattened by pipelines/engines/spark_sql.py) as on DuckDB."""
    import duckdb
    import sqlglot

    from pipelines.engines.spark_sql import SQL_DIR, expand_macros, load_macros, rewrite, to_spark_text

    units = ["100 Hours", "10 Hours", "1 Hour", "10K", "1 GB/Month", "Hours", "1000 Tokens", "Hrs", "GB-Month", "2 gibibyte month", "Units/3 Months", "10Hours"]
    sql = ("SELECT u, focus_unit(u), time_unit_seconds(u) FROM (VALUES " + ", ".join(f"('{u}')" for u in units)
           + ", (NULL)) AS v(u) ORDER BY u NULLS LAST")
    spark_rows = [tuple(r) for r in engine.session().sql(
        to_spark_text(rewrite(expand_macros(sqlglot.parse_one(sql, read="duckdb"), load_macros())))).collect()]
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    assert spark_rows == conn.execute(sql).fetchall()
    assert ("10 Hours", "10 Hours", 36000.0) in spark_rows and ("1 Hour", "Hours", 3600.0) in spark_rows


def test_exact_division_of_money_units(engine):
    """DuckDB's HUGEINT `//` (truncating) at money-unit sizes Spark's `div` would wrap or round."""
    import sqlglot

    from pipelines.engines.spark_sql import Spark4, fin_idiv

    # Quotients up to 10^29 (10^19 in money), divisors up to 10^19; the fraction near 1 is the
    # case DECIMAL(38, 9) rounding alone would get wrong.
    cases = [(10**28 + 7, 3), (-(10**28 + 7), 3), (10**22, 86_400 * 8), (-7, 2), (7, -2), (10**28 - 1, 10**18 + 3),
             (123456789012345678901234567, 999999999999999989), (10**18 - 1, 10**18), (-(10**18 - 1), 10**18)]
    spark = engine.session()

    def divide(a: int, b: int) -> int:
        expr = fin_idiv(sqlglot.parse_one(f"CAST({a} AS DECIMAL(38, 0))"), sqlglot.parse_one(f"{b}"))
        return int(spark.sql(f"SELECT {expr.sql(dialect=Spark4)}").collect()[0][0])

    for a, b in cases:
        assert divide(a, b) == abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1), (a, b)
    # Past its range it fails (ANSI), never a wrong amount.
    with pytest.raises(Exception, match="NUMERIC_VALUE_OUT_OF_RANGE|cannot be represented"):
        divide(10**30 + 7, 3)


@pytest.mark.skipif(os.environ.get("FINOPS_SPARK_BIG") == "0",
                    reason="1M-row CUR on both engines skipped: FINOPS_SPARK_BIG=0 (unset it to run; about 3 minutes on 2 cores)")
def test_million_row_cur_totals_identical(engine, tmp_path):
    """The 1M-row CUR of `make bench` gives the same core.cost_lines totals per currency,
    marts.spend_by_phase and findings.hidden_costs (and marts.cost_attribution, on their way) on
    both engines, to the last decimal. Only the models those tables need are built, on each engine
    (the module's Spark session, warm by now); Spark reads the raw lines from the lake in place."""
    from tests.bench_spark import COMPARED, build_both, needed_models

    result = build_both(engine, tmp_path, rows=1_000_000, tables=needed_models(COMPARED))
    assert result["cost_lines"] == 1_000_000, result
    duck, spark = totals(Path(result["duckdb_warehouse"])), totals(Path(result["spark_warehouse"]))
    for name in TOTALS:
        assert cents(spark[name]) == cents(duck[name]), f"{name} differs to the cent"
        assert spark[name] == duck[name], f"{name} differs beyond the cent"
    assert duck["core.cost_lines per currency"] and duck["marts.spend_by_phase"] and duck["findings.hidden_costs"]
    assert result["identical_totals"], result


def test_ctes_spark_would_compute_again_are_chosen_and_the_split_query_answers_the_same(demo_run):
    """spark_sql.shared_ctes: the CTEs Spark would compute SHARED_CTE_COMPUTATIONS times or more
    become views of their own (marts.cost_attribution's `classified`, read by eight); run as DuckDB
    temp tables, then the rest, every model so split gives its own query's rows."""
    import duckdb
    import sqlglot

    from pipelines.engines.spark_sql import parse_model, shared_ctes
    from pipelines.warehouse.connection import connect
    from pipelines.warehouse.models import SQL_MODELS, sql_model_order

    views, rest = shared_ctes(sqlglot.parse_one(
        "WITH a AS (SELECT 1 AS x), b AS (SELECT * FROM a UNION ALL SELECT * FROM a), "
        "c AS (SELECT * FROM b UNION ALL SELECT * FROM b) SELECT * FROM c UNION ALL SELECT * FROM c", read="duckdb"))
    # c is computed twice, b four times (twice in each c): b is written; a, read twice by b, then twice.
    assert [name for name, _ in views] == ["b"]
    scratch = duckdb.connect()
    scratch.execute(f"CREATE TEMP TABLE b AS {views[0][1].sql('duckdb')}")
    assert scratch.execute(rest.sql("duckdb")).fetchall() == [(1,)] * 8
    assert "classified" in [name for name, _ in shared_ctes(parse_model("marts.cost_attribution").query)[0]]

    settings = demo_settings(demo_run)
    conn = connect(demo_run.out / "warehouse.duckdb", read_only=True)
    split = []
    try:
        # The split models but those over every GPU-minute (seconds each on DuckDB, twice over;
        # the demo's Spark build above runs them split).
        heavy = {"core.gpu_samples", "core.gpu_minutes", "marts.gpu_busy_by_workload_hour", "marts.gpu_hours_profile"}
        for table in sql_model_order():
            model = parse_model(table)
            if [s.kind for s in model.steps] != ["model"] or table in heavy:
                continue  # temp steps need their temp tables first (core.cost_lines): run on Spark above
            views, rest = shared_ctes(model.query)
            if not views:
                continue
            params = {**settings.sql_params(), "billing_months": ["*"], "days": ["*"]}
            for name, arrow in (SQL_MODELS[table].inputs(settings) if SQL_MODELS[table].inputs else {}).items():
                conn.register(name, arrow)

            def rows(sql: str) -> list[tuple]:
                used = {k: v for k, v in params.items() if f"${k}" in sql}
                return sorted(map(repr, conn.execute(sql, used).fetchall()))

            whole = rows(model.query.sql("duckdb"))
            for name, query in views:
                sql = query.sql("duckdb")
                used = {k: v for k, v in params.items() if f"${k}" in sql}
                conn.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}", used)
            assert rows(rest.sql("duckdb")) == whole, table
            for name, _ in views:
                conn.execute(f"DROP TABLE temp.main.{name}")
            split.append(table)
    finally:
        conn.close()
    assert "marts.cost_attribution" in split and len(split) >= 4, split


def answers_of(warehouse, queries) -> list[list[tuple]]:
    """Each query's rows in `warehouse` (the DuckDB-built one, or the file Spark's tables were copied to)."""
    from pipelines.warehouse.connection import connect

    conn = connect(warehouse, read_only=True)
    try:
        return [conn.execute(q).fetchall() for q in queries]
    finally:
        conn.close()


def test_an_instance_linked_to_its_hostname_on_both_engines(engine, tmp_path):
    """core.host_names from a workload file and from the user's file, and the price and attribution
    that read it (tests/test_host_names.py's instance billed as i-0gpu1, reporting as ip-10-0-1-23):
    Spark gives the same links, prices and phases as DuckDB."""
    from datetime import date

    from pipelines.settings import FinopsSettings
    from tests.conftest import run_pipeline
    from tests.test_host_names import land_instance_reporting_its_hostname

    landing = tmp_path / "landing"
    land_instance_reporting_its_hostname(landing)
    (landing / "jobs.csv").write_text("workload_id,phase,host,resource_id,gpu_count,started_at,ended_at\n"
                                      "ft-1,finetuning,ip-10-0-1-23,i-0gpu1,2,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z\n"
                                      "ft-2,finetuning,gpu-b.cluster.local,i-0gpu2,1,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z\n")
    (tmp_path / "hosts.csv").write_text("host,resource_id\nip-10-0-7-7,i-0gpu2\n")
    settings = FinopsSettings(landing_dir=str(landing), reporting_currency="USD", host_names_files=[str(tmp_path / "hosts.csv")])
    assert run_pipeline(landing, tmp_path / "wh.duckdb", as_of=date(2026, 9, 4), reporting_currency="USD",
                        host_names_files=[str(tmp_path / "hosts.csv")]).success
    (tmp_path / "spark").mkdir()
    spark = build_on_spark(engine, tmp_path / "wh.duckdb", tmp_path / "spark" / "warehouse.duckdb", settings,
                           ["core.host_names", "marts.gpu_hour_prices", "marts.cost_attribution"])
    queries = ("SELECT resource_id, host, source FROM core.host_names ORDER BY ALL",
               "SELECT host, count(*), sum(price_per_gpu_hour) FROM marts.gpu_hour_prices GROUP BY ALL ORDER BY ALL",
               "SELECT phase, sum(amount_billing) FROM marts.cost_attribution GROUP BY ALL ORDER BY ALL")
    answers = [answers_of(path, queries) for path in (tmp_path / "wh.duckdb", spark)]
    assert answers[0] == answers[1]
    assert answers[0][0] == [("i-0gpu1", "ip-10-0-1-23", "workloads"), ("i-0gpu2", "ip-10-0-7-7", "host names file hosts.csv")]
    assert answers[0][1] == [("ip-10-0-1-23", 48, Decimal("120.0000000000"))]


def test_a_months_credit_over_two_billed_days_on_both_engines(engine, tmp_path):
    """A month's credit on instances billed two days (tests/test_consumed_hours.py): Spark pays it
    for the same two days, so its prices and phases are DuckDB's to the unit."""
    from datetime import date

    from pipelines.settings import FinopsSettings
    from tests.conftest import run_pipeline
    from tests.test_consumed_hours import land_a_months_credit

    landing = tmp_path / "landing"
    land_a_months_credit(landing)
    assert run_pipeline(landing, tmp_path / "wh.duckdb", as_of=date(2026, 9, 4), reporting_currency="USD").success
    (tmp_path / "spark").mkdir()
    spark = build_on_spark(engine, tmp_path / "wh.duckdb", tmp_path / "spark" / "warehouse.duckdb",
                           FinopsSettings(landing_dir=str(landing), reporting_currency="USD"),
                           ["marts.gpu_hour_prices", "marts.cost_attribution"])
    queries = ("SELECT host, period_start, price_per_gpu_hour FROM marts.gpu_hour_prices ORDER BY ALL",
               "SELECT phase, method, sum(amount_billing) FROM marts.cost_attribution GROUP BY ALL ORDER BY ALL")
    answers = [answers_of(path, queries) for path in (tmp_path / "wh.duckdb", spark)]
    assert answers[0] == answers[1]
    assert answers[0][1] == [("finetuning", "workload_overlap", Decimal("334.0000000000")),
                             ("idle", "no_workload", Decimal("668.0000000000")),
                             ("pretraining", "workload_overlap", Decimal("334.0000000000"))]


def test_a_flat_inference_load_sized_by_replicas_on_both_engines(engine, tmp_path):
    """Eight replicas, four cards at work and four idle (tests/test_findings.py): Spark sizes the
    replicas at work and keeps the idle cards as idle runs, as DuckDB does, to the unit."""
    from pipelines.settings import FinopsSettings
    from tests.test_findings import flat_inference_run, replicas

    flat_inference_run(tmp_path, lambda g: 10 if g < 4 else 1, replicas(8)).close()
    (tmp_path / "spark").mkdir()
    spark = build_on_spark(engine, tmp_path / "w.duckdb", tmp_path / "spark" / "warehouse.duckdb",
                           FinopsSettings(landing_dir=str(tmp_path / "landing")),
                           ["marts.gpu_busy_by_host_hour", "findings.overprovisioned_inference", "findings.unused_gpu"])
    queries = ("SELECT host, hour, busy_gpu_minutes, active_gpu_minutes FROM marts.gpu_busy_by_host_hour ORDER BY ALL",
               "SELECT subkind, resource, wasted_cost, avoidable_cost, paid_cost, evidence, recommendation "
               "FROM findings.overprovisioned_inference ORDER BY ALL",
               "SELECT subkind, resource, wasted_cost FROM findings.unused_gpu ORDER BY ALL")
    duck, on_spark = (answers_of(path, queries) for path in (tmp_path / "w.duckdb", spark))
    assert [row[:5] for row in on_spark[1]] == [row[:5] for row in duck[1]] == [
        ("rightsizing", "gpu-r", Decimal("144.0000000000"), Decimal("144.0000000000"), Decimal("384.0000000000"))]
    assert on_spark[0] == duck[0] and on_spark[2] == duck[2]
    assert json.loads(on_spark[1][0][5])["services"] == json.loads(duck[1][0][5])["services"]
    assert on_spark[1][0][6] == duck[1][0][6]
