"""Partitioned runs: a run rebuilds only the billing months and telemetry days its new files
changed; `finops run --since/--until` rebuilds a range whatever changed; the result always equals a
build from scratch."""

import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

import duckdb
from dagster import AssetKey, DagsterInstance

from pipelines.orchestration.runner import run_graph
from pipelines.settings import FinopsSettings
from tests.test_daily_report import focus_rows

AS_OF = date(2026, 10, 2)
AUGUST = [f"{100 + (i % 7):.2f}" for i in range(31)]
SEPTEMBER = [f"{100 + ((i + 31) % 7):.2f}" for i in range(30)]


def write_month(landing: Path, month: str, amounts: list[str]) -> None:
    (landing / f"focus-{month}.csv").write_text(focus_rows(date.fromisoformat(f"{month}-01"), amounts, month))


def builds(warehouse: Path) -> dict[str, object]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return dict(conn.execute("SELECT period, built_at FROM core.period_builds WHERE model = 'core.cost_lines' AND period <> '*'").fetchall())
    finally:
        conn.close()


def month_totals(warehouse: Path) -> list[tuple]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return conn.execute("SELECT strftime(BillingPeriodStart, '%Y-%m'), count(*), sum(BilledCost), sum(x_EffectiveCostReporting) "
                            "FROM core.cost_lines GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        conn.close()


def models_run_range(instance: DagsterInstance) -> tuple[str, str] | None:
    """The month range of the last run (the models' run), or None when it built no partition."""
    run = instance.get_runs(limit=1)[0]
    tags = run.tags
    return (tags["dagster/asset_partition_range_start"], tags["dagster/asset_partition_range_end"]) \
        if "dagster/asset_partition_range_start" in tags else None


def test_a_run_rebuilds_the_months_its_files_changed_and_equals_a_fresh_build(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    write_month(landing, "2026-08", AUGUST)
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        assert models_run_range(instance) == ("2026-08-01", "2026-08-01")
        first = builds(warehouse)

        # A new month: only September's days run; August's lines stay as they were built.
        write_month(landing, "2026-09", SEPTEMBER)
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        assert models_run_range(instance) == ("2026-09-01", "2026-09-01")
        second = builds(warehouse)
        assert second["2026-08"] == first["2026-08"] and set(second) == {"2026-08", "2026-09"}
        assert instance.get_materialized_partitions(AssetKey(["core", "cost_lines"])) == {"2026-08-01", "2026-09-01"}

        # Nothing new: the models' run leaves the partitioned tables out.
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        assert models_run_range(instance) is None and builds(warehouse) == second

        # August restated in place (same path, new content): August only.
        restated = list(AUGUST)
        restated[0] = "900.00"
        write_month(landing, "2026-08", restated)
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        assert models_run_range(instance) == ("2026-08-01", "2026-08-01")
        third = builds(warehouse)
        assert third["2026-09"] == second["2026-09"] and third["2026-08"] > second["2026-08"]
    assert month_totals(warehouse) == [("2026-08", 31, Decimal("3987.0000000000"), Decimal("3987.0000000000")),
                                       ("2026-09", 30, Decimal("3091.0000000000"), Decimal("3091.0000000000"))]
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert month_totals(fresh) == month_totals(warehouse)


def test_finops_run_since_until_rebuilds_that_range_whatever_changed(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    write_month(landing, "2026-08", AUGUST)
    write_month(landing, "2026-09", SEPTEMBER)
    env_home = tmp_path / "dagster_home"
    env_home.mkdir()
    base = [sys.executable, "-m", "pipelines.cli", "run", "--landing", str(landing), "--warehouse", str(warehouse),
            "--as-of", AS_OF.isoformat()]
    env = {"DAGSTER_HOME": str(env_home), "PATH": "/usr/bin:/bin"}
    assert subprocess.run(base, capture_output=True, text=True, env=env).returncode == 0
    first = builds(warehouse)
    done = subprocess.run([*base, "--since", "2026-09-10", "--until", "2026-09-12"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    second = builds(warehouse)
    # The days fall in September: September's billing lines were rebuilt, August's were not.
    assert second["2026-08"] == first["2026-08"] and second["2026-09"] > first["2026-09"]
    assert [m[:3] for m in month_totals(warehouse)] == [("2026-08", 31, Decimal("3187.0000000000")),
                                                        ("2026-09", 30, Decimal("3091.0000000000"))]
    bad = subprocess.run([*base, "--since", "2026-09-12", "--until", "2026-09-10"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "before --since" in bad.stderr


def minute_builds(warehouse: Path) -> dict[str, object]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return dict(conn.execute("SELECT period, built_at FROM core.period_builds "
                                 "WHERE model = 'core.gpu_minutes' AND period <> '*'").fetchall())
    finally:
        conn.close()


def gpu_minutes(warehouse: Path) -> list[tuple]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return conn.execute("SELECT * FROM core.gpu_minutes ORDER BY gpu_key, minute").fetchall()
    finally:
        conn.close()


def test_a_new_day_of_telemetry_rebuilds_its_minutes_and_its_neighbours_and_equals_a_fresh_build(tmp_path):
    """core.gpu_minutes by UTC day: a day's minutes read the edges of the days beside it (a span
    crosses midnight), so new samples on a day rebuild that day and its two neighbours, no more."""
    from datetime import UTC, datetime

    from tests.bench_lake import write_nvidia_smi

    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    # One host, 8 GPUs at 10 s: two hours across the midnight of 1-2 November.
    write_nvidia_smi(landing / "a", 1, 720, datetime(2026, 11, 1, 23, 30, tzinfo=UTC))
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        first = minute_builds(warehouse)
        assert set(first) == {"2026-10-31", "2026-11-01", "2026-11-02", "2026-11-03"}

        # An hour on 5 November, far from the rest: its day and the days beside it, nothing else.
        write_nvidia_smi(landing / "b", 1, 360, datetime(2026, 11, 5, tzinfo=UTC))
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        second = minute_builds(warehouse)
        assert {d for d in second if second[d] != first.get(d)} == {"2026-11-04", "2026-11-05", "2026-11-06"}

        # Half an hour across the midnight of 2-3 November: its two days and their neighbours.
        write_nvidia_smi(landing / "c", 1, 180, datetime(2026, 11, 2, 23, 50, tzinfo=UTC))
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        third = minute_builds(warehouse)
        assert {d for d in third if third[d] != second[d]} == {"2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"}
    minutes = gpu_minutes(warehouse)
    assert len(minutes) == (120 + 60 + 30) * 8
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert gpu_minutes(fresh) == minutes
