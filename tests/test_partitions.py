"""Partitioned runs: a run rebuilds only the billing months and telemetry days its new files
changed; `finops run --since/--until` rebuilds a range whatever changed; the result always equals a
build from scratch."""

import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
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


def read(warehouse: Path, sql: str) -> list[tuple]:
    """The rows of `sql` over the published warehouse, read-only."""
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def month_totals(warehouse: Path) -> list[tuple]:
    return read(warehouse, "SELECT strftime(BillingPeriodStart, '%Y-%m'), count(*), sum(BilledCost), sum(x_EffectiveCostReporting) "
                           "FROM core.cost_lines GROUP BY 1 ORDER BY 1")


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


def smi_minutes(start: str, minutes: int, idle_gpu0: bool = True) -> str:
    """nvidia-smi CSV, one sample a minute from `start` (UTC): GPU 0 idle (0 %) when `idle_gpu0`,
    GPU 1 busy (80 %)."""
    from datetime import datetime

    first = datetime.fromisoformat(start)
    return "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n" + "".join(
        f"{first + timedelta(minutes=t):%Y/%m/%d %H:%M:%S}.000, {i}, GPU-n{i}, NVIDIA A100, {util} %, 100 MiB, 300.00 W\n"
        for t in range(minutes) for i, util in ((0, 0 if idle_gpu0 else 80), (1, 80)))


def write_in(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def deliver(settings: FinopsSettings, warehouse: Path, instance, path: Path, text: str, built) -> dict[str, object]:
    """Write one landing file, run, and return `built(warehouse)`: each period → when it was built."""
    write_in(path, text)
    assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
    return built(warehouse)


def rebuilt(before: dict[str, object], after: dict[str, object]) -> set[str]:
    return {period for period in after if after[period] != before.get(period)}


def span_builds(warehouse: Path) -> dict[str, object]:
    return dict(read(warehouse, "SELECT period, built_at FROM core.period_builds "
                                "WHERE model = 'marts.gpu_spans_by_day' AND period <> '*'"))


def idle_runs(warehouse: Path) -> list[tuple]:
    return read(warehouse, "SELECT resource, period_start, period_end, evidence->>'idle_minutes' FROM findings.unused_gpu "
                           "WHERE subkind = 'idle_run' ORDER BY ALL")


def test_idle_runs_are_judged_whole_across_days_built_apart_and_equal_a_fresh_build(tmp_path):
    """findings.unused_gpu reads marts.gpu_spans_by_day, each GPU's stretches per UTC day, built for
    the days core.gpu_minutes rebuilt: an idle run crossing midnight is joined back together and
    judged whole, whichever run brought its days, and a new day rebuilds its own stretches only."""
    from datetime import UTC, datetime

    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    # GPU 0 idle from 20:00 on 1 November to 04:00 on the 2nd: 240 minutes a day, 480 in all
    # (the shortest run reported is 360: neither day alone holds one).
    with DagsterInstance.ephemeral() as instance:
        first = deliver(settings, warehouse, instance, landing / "1" / "node-a.csv", smi_minutes("2026-11-01T20:00:00", 480),
                        span_builds)
        assert set(first) == {"2026-10-31", "2026-11-01", "2026-11-02", "2026-11-03"}  # core.gpu_minutes' days
        assert idle_runs(warehouse) == [("node-a/GPU-n0", datetime(2026, 11, 1, 20, tzinfo=UTC),
                                         datetime(2026, 11, 2, 4, tzinfo=UTC), "480")]

        # Two more idle hours on the 2nd: the run grows to 600 minutes. The stretches are rebuilt
        # for the days core.gpu_minutes rebuilt (the 2nd and the days beside it), no others.
        second = deliver(settings, warehouse, instance, landing / "2" / "node-a.csv", smi_minutes("2026-11-02T04:00:00", 120),
                         span_builds)
        assert rebuilt(first, second) == {"2026-11-01", "2026-11-02", "2026-11-03"}
        assert idle_runs(warehouse) == [("node-a/GPU-n0", datetime(2026, 11, 1, 20, tzinfo=UTC),
                                         datetime(2026, 11, 2, 6, tzinfo=UTC), "600")]

        # Two idle hours on the 5th, after a gap: a run of their own, too short to report; the
        # days beside the 5th only.
        third = deliver(settings, warehouse, instance, landing / "3" / "node-a.csv", smi_minutes("2026-11-05T10:00:00", 120),
                        span_builds)
        assert rebuilt(second, third) == {"2026-11-04", "2026-11-05", "2026-11-06"}
        assert len(idle_runs(warehouse)) == 1
        spans = read(warehouse, "SELECT day, idle, count(*), sum(minutes) FROM marts.gpu_spans_by_day GROUP BY ALL ORDER BY ALL")
        assert spans == [(date(2026, 11, 1), False, 1, 240), (date(2026, 11, 1), True, 1, 240),
                         (date(2026, 11, 2), False, 1, 360), (date(2026, 11, 2), True, 1, 360),
                         (date(2026, 11, 5), False, 1, 120), (date(2026, 11, 5), True, 1, 120)]
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    for table in ("marts.gpu_spans_by_day", "findings.unused_gpu"):
        assert sorted(read(fresh, f"SELECT * FROM {table}"), key=repr) == sorted(read(warehouse, f"SELECT * FROM {table}"), key=repr)


def busy_builds(warehouse: Path) -> dict[str, object]:
    return dict(read(warehouse, "SELECT period, built_at FROM core.period_builds "
                                "WHERE model = 'marts.gpu_busy_by_workload_hour' AND period <> '*'"))


def test_busy_gpu_minutes_rebuild_the_days_of_new_telemetry_and_new_workloads_and_equal_a_fresh_build(tmp_path):
    """marts.spend_by_phase sums marts.gpu_busy_by_workload_hour, built per UTC day: new telemetry
    rebuilds the days core.gpu_minutes rebuilt, a new workload file the days its workloads run on."""
    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    # node-a: GPU 0 idle, GPU 1 busy at 80 %, from 20:00 on 1 November to 04:00 on the 2nd.
    write_in(landing / "1" / "node-a.csv", smi_minutes("2026-11-01T20:00:00", 480))
    jobs = "workload_id,phase,host,gpu_count,started_at,ended_at\n"
    with DagsterInstance.ephemeral() as instance:
        first = deliver(settings, warehouse, instance, landing / "jobs-a.csv",
                        jobs + "pt-a,pretraining,node-a,2,2026-11-01T20:00:00Z,2026-11-01T22:00:00Z\n", busy_builds)
        assert set(first) == {"2026-10-31", "2026-11-01", "2026-11-02", "2026-11-03"}
        busy = dict(read(warehouse, "SELECT phase, gpu_hours_busy FROM marts.spend_by_phase WHERE period = 'all'"))
        # pre-training held both GPUs 20:00-22:00 (GPU 1 busy at 80 %: 1.6 GPU-hours); after it GPU 1
        # ran unattributed for 6 hours (4.8), GPU 0 sat idle.
        assert (busy["pretraining"], busy["unattributed"], busy["idle"]) == (1.6, 4.8, 0.0)

        # A fine-tuning job on the 2nd: that day only.
        second = deliver(settings, warehouse, instance, landing / "jobs-b.csv",
                         jobs + "ft-b,finetuning,node-a,2,2026-11-02T02:00:00Z,2026-11-02T03:00:00Z\n", busy_builds)
        assert rebuilt(first, second) == {"2026-11-02"}
        busy = dict(read(warehouse, "SELECT phase, gpu_hours_busy FROM marts.spend_by_phase WHERE period = 'all'"))
        assert (busy["pretraining"], busy["finetuning"], busy["unattributed"]) == (1.6, 0.8, 4.0)

        # Telemetry on the 5th: the days core.gpu_minutes rebuilt, the 4th to the 6th.
        third = deliver(settings, warehouse, instance, landing / "2" / "node-a.csv", smi_minutes("2026-11-05T10:00:00", 60),
                        busy_builds)
        assert rebuilt(second, third) == {"2026-11-04", "2026-11-05", "2026-11-06"}
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert read(fresh, "SELECT * FROM marts.spend_by_phase") == read(warehouse, "SELECT * FROM marts.spend_by_phase")
    # Busy GPU-minutes are a float sum, whose last bits follow the order DuckDB's threads add in.
    by_hour = "SELECT hour, host, workload_id, phase, busy_gpu_minutes FROM marts.gpu_busy_by_workload_hour ORDER BY ALL"
    assert [(*r[:4], pytest.approx(r[4], rel=1e-12)) for r in read(fresh, by_hour)] == read(warehouse, by_hour)


def test_a_run_after_a_backfill_builds_the_days_the_backfill_left_out(tmp_path):
    """A backfill that reads a new file builds its range's telemetry days, not the file's other
    days: it is no complete run, so the plain run after it runs the graph (no "nothing new") and
    builds them, and equals a fresh build. A plain run after that one has nothing new."""
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    write_in(landing / "host=n1" / "d1.csv", smi_minutes("2026-08-01T00:00:00", 60))

    def run(target: Path, *extra: str) -> str:
        done = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(target), "--reports",
                                        str(tmp_path / "reports"), "--as-of", "2026-09-03", *extra], terminal_width=200)
        assert done.exit_code == 0, done.output
        return done.output

    def sample_days(target: Path) -> list[tuple]:
        return read(target, "SELECT strftime(ts, '%Y-%m-%d'), count(*) FROM core.gpu_samples GROUP BY 1 ORDER BY 1")

    run(warehouse)
    write_in(landing / "host=n1" / "d2.csv", smi_minutes("2026-08-05T00:00:00", 60))
    run(warehouse, "--since", "2026-08-01", "--until", "2026-08-01")
    assert sample_days(warehouse) == [("2026-08-01", 120)]  # the backfill's range only
    after = run(warehouse)
    assert "nothing new" not in after, after
    assert sample_days(warehouse) == [("2026-08-01", 120), ("2026-08-05", 120)]
    assert "nothing new since the last run" in run(warehouse)  # a plain run after a plain run still skips
    fresh = tmp_path / "fresh.duckdb"
    run(fresh)
    assert sample_days(fresh) == sample_days(warehouse) and gpu_minutes(fresh) == gpu_minutes(warehouse)


def test_two_files_giving_one_gpu_and_instant_other_values_merge_by_path_whatever_the_load_order(tmp_path):
    """Two files logging one card at the same instants with other values: the merged sample takes
    the first file by path (then row), loaded first or last, built incrementally or fresh. Both
    ways round, so the order of the files' lake folders (their sha256) cannot decide it."""

    def smi(util: int, watts: int) -> str:
        return "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n" + "".join(
            f"2026/09/01 00:{m:02d}:00.000, 0, GPU-x, NVIDIA A100, {util} %, 100 MiB, {watts}.00 W\n" for m in range(10))

    def samples(warehouse: Path) -> list[tuple]:
        return read(warehouse, "SELECT ts, util_pct, power_w, x_SourceFile FROM core.gpu_samples ORDER BY ts")

    for a, b in (((10, 200), (90, 300)), ((90, 300), (10, 200))):
        root = tmp_path / f"a{a[0]}"
        landing, warehouse = root / "landing", root / "wh.duckdb"
        settings = FinopsSettings(landing_dir=str(landing))
        with DagsterInstance.ephemeral() as instance:
            write_in(landing / "host=n1" / "b.csv", smi(*b))  # the later path loaded first
            assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
            write_in(landing / "host=n1" / "a.csv", smi(*a))
            assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
            assert run_graph(settings, root / "fresh.duckdb", instance=instance, as_of=AS_OF).success
        incremental = samples(warehouse)
        assert [row[1:] for row in incremental] == [(float(a[0]), float(a[1]), "host=n1/a.csv")] * 10
        assert samples(root / "fresh.duckdb") == incremental
        assert gpu_minutes(root / "fresh.duckdb") == gpu_minutes(warehouse)


def test_a_hosts_busy_hour_is_whole_minutes_never_shares(tmp_path):
    """marts.gpu_busy_by_host_hour adds a host's busy GPU-minutes whole: three GPUs fully busy for an
    hour under three one-GPU workloads are exactly 180 (thirds of each minute, added up, are not),
    so findings.overprovisioned_inference rounds 3 busy GPUs up to 5 at 60 %, not 6."""
    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    write_in(landing / "node-c.csv", "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n" + "".join(
        f"2026/11/01 10:{m:02d}:00.000, {i}, GPU-c{i}, NVIDIA A100, 100 %, 100 MiB, 300.00 W\n" for m in range(60) for i in range(3)))
    write_in(landing / "jobs.csv", "workload_id,phase,host,gpu_count,started_at,ended_at\n" + "".join(
        f"inf-{j},inference,node-c,1,2026-11-01T00:00:00Z,2026-11-02T00:00:00Z\n" for j in range(3)))
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(FinopsSettings(landing_dir=str(landing)), warehouse, instance=instance, as_of=AS_OF).success
    assert read(warehouse, "SELECT hour, host, busy_gpu_minutes FROM marts.gpu_busy_by_host_hour") == [
        (datetime(2026, 11, 1, 10, tzinfo=UTC), "node-c", 180.0)]
    split = read(warehouse, "SELECT workload_id, busy_gpu_minutes FROM marts.gpu_busy_by_workload_hour ORDER BY 1")
    assert [w for w, _ in split] == ["inf-0", "inf-1", "inf-2"] and sum(m for _, m in split) == pytest.approx(180.0)


def rows_of(conn, table: str) -> list[tuple]:
    return sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)


def whole_build(conn, table: str, settings: FinopsSettings) -> list[tuple]:
    """`table` as its SQL builds it in one statement over every period (['*']), beside the table."""
    from pipelines.warehouse.connection import run_sql_text, sql_text

    text = sql_text(table).replace(f"CREATE OR REPLACE TABLE {table} AS", "CREATE OR REPLACE TEMP TABLE whole_rows AS")
    run_sql_text(conn, text, settings.sql_params())
    return rows_of(conn, "whole_rows")


def test_a_history_is_built_a_few_periods_per_statement_and_equals_one_statement(tmp_path, monkeypatch):
    """A first build (or one after new code) builds each telemetry model a few periods per
    statement, so its memory is a batch's, not the history's: 100M samples in one statement ran
    out of memory. Here every day is its own statement; the tables equal one statement's build,
    and a backfill rebuilding several periods in place, one per statement, leaves them equal too.
    Billing months too: each ServiceName's labels are decided over every month's counts, whatever
    the months a statement builds."""
    from datetime import UTC, datetime

    from pipelines.warehouse import periods
    from pipelines.warehouse.connection import connect, prepare
    from tests.bench_lake import write_nvidia_smi

    monkeypatch.setattr(periods, "BATCH_ROWS", 1)
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    write_month(landing, "2026-08", AUGUST)
    write_month(landing, "2026-09", SEPTEMBER)
    # One host, 8 GPUs at 10 s, 50 hours from 22:00 on 1 November: samples on three days.
    write_nvidia_smi(landing / "smi", 1, 50 * 360, datetime(2026, 11, 1, 22, tzinfo=UTC))
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        events = instance.get_latest_materialization_events([AssetKey(["core", t]) for t in ("cost_lines", "gpu_minutes")])
        meta = {k.path[-1]: e.asset_materialization.metadata for k, e in events.items()}
        assert meta["cost_lines"]["statements"].value == 2  # a month each
        assert meta["gpu_minutes"]["statements"].value == 5  # 31 October to 4 November: the days beside count
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF, days=(date(2026, 8, 1), date(2026, 11, 30))).success

    assert [r[:2] for r in month_totals(warehouse)] == [("2026-08", 31), ("2026-09", 30)]
    conn = connect(warehouse)
    try:
        prepare(conn)
        assert conn.execute("SELECT count(*) FROM core.gpu_samples").fetchall()[0][0] == 8 * 50 * 360
        assert conn.execute("SELECT count(*) FROM core.gpu_minutes").fetchall()[0][0] == 8 * 50 * 60
        for table in ("core.cost_lines", "core.gpu_samples", "core.gpu_minutes"):
            assert rows_of(conn, table) == whole_build(conn, table, settings), table
        # Periods with a gap rebuilt in one statement: the models test each row's day, the day
        # between keeps its rows.
        params = settings.sql_params()
        for table in ("core.gpu_samples", "core.gpu_minutes"):
            assert periods.build_periods(conn, table, params, [["2026-11-01", "2026-11-03"]])
            assert rows_of(conn, table) == whole_build(conn, table, settings), table
        # The per-day marts read the days the same way (macro in_listed_days); their busy minutes
        # are float sums, equal up to the order the last bits are added in.
        for table in ("marts.gpu_spans_by_day", "marts.gpu_busy_by_host_hour"):
            assert periods.build_periods(conn, table, params, [["2026-11-01", "2026-11-03"]])
            whole = [tuple(pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for v in row)
                     for row in whole_build(conn, table, settings)]
            assert rows_of(conn, table) == whole, table
    finally:
        conn.close()


def test_batches_cut_sorted_periods_by_their_rows_in_the_lake(tmp_path):
    """The batches follow the lake's Parquet footers: consecutive periods up to the budget, a
    period over it alone, a period without files costing nothing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.lake.layout import lake_of, table_root
    from pipelines.warehouse import periods
    from pipelines.warehouse.connection import connect

    root = table_root(lake_of(tmp_path / "wh.duckdb"), "telemetry")
    for day, sha, rows in [("2026-11-01", "a", 3), ("2026-11-02", "a", 2), ("2026-11-02", "b", 2), ("2026-11-03", "b", 9),
                           ("2026-11-05", "c", 1)]:
        folder = root / f"day={day}" / f"file={sha}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"x": list(range(rows))}), folder / "data_0.parquet")
    conn = connect(tmp_path / "wh.duckdb")
    try:
        days = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04", "2026-11-05"]
        assert periods.period_rows(conn, "core.gpu_samples", days) == {
            "2026-11-01": 3, "2026-11-02": 4, "2026-11-03": 9, "2026-11-04": 0, "2026-11-05": 1}
        assert periods.batches(conn, "core.gpu_samples", days, max_rows=8) == [
            ["2026-11-01", "2026-11-02"], ["2026-11-03"], ["2026-11-04", "2026-11-05"]]
        assert periods.batches(conn, "core.gpu_samples", days, max_rows=100) == [days]
        assert periods.batches(conn, "core.gpu_samples", []) == []
        # A gap, and rows without a date: each run is a time range, the undated rows alone.
        assert periods.batches(conn, "core.gpu_samples", ["2026-11-01", "2026-11-03", "2026-11-04", "unknown"], max_rows=100) == [
            ["2026-11-01"], ["2026-11-03", "2026-11-04"], ["unknown"]]
    finally:
        conn.close()


def test_the_batch_size_comes_from_the_environment_and_a_bad_one_is_refused(monkeypatch):
    import pytest

    from pipelines.warehouse import periods

    monkeypatch.delenv("FINOPS_PERIOD_BATCH_ROWS", raising=False)
    assert periods.batch_rows() == periods.BATCH_ROWS
    monkeypatch.setenv("FINOPS_PERIOD_BATCH_ROWS", " 250000 ")
    assert periods.batch_rows() == 250_000
    for bad in ("0", "-5", "1e6", "lots"):
        monkeypatch.setenv("FINOPS_PERIOD_BATCH_ROWS", bad)
        with pytest.raises(ValueError, match="FINOPS_PERIOD_BATCH_ROWS must be a whole number"):
            periods.batch_rows()


def test_clearing_periods_keeps_the_rows_of_the_days_and_months_between_them():
    """Clearing a list of periods deletes exactly their rows: by time range when they have no gap,
    by range and each row's period when they do, by period alone for rows without a date."""
    from pipelines.warehouse import periods
    from pipelines.warehouse.periods import PERIOD_MODELS

    minutes, lines = PERIOD_MODELS["core.gpu_minutes"], PERIOD_MODELS["core.cost_lines"]
    assert minutes.contiguous(["2026-10-31", "2026-11-01"]) and not minutes.contiguous(["2026-11-01", "2026-11-03"])
    assert lines.contiguous(["2026-11", "2026-12", "2027-01"]) and not lines.contiguous(["2026-11", "2027-01"])
    assert lines.bounds(["2026-11", "2026-12"]) == (date(2026, 11, 1), date(2027, 1, 1))
    assert minutes.bounds(["2026-11-01", "unknown"]) is None
    conn = duckdb.connect()
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute("CREATE SCHEMA core")
    conn.execute("CREATE TABLE core.gpu_minutes AS SELECT TIMESTAMPTZ '2026-10-31 23:59:00+00' + to_minutes(i) AS minute "
                 "FROM range(4 * 1440 + 2) AS r(i) UNION ALL SELECT NULL")

    def days_left():
        return conn.execute("SELECT coalesce(strftime(minute, '%Y-%m-%d'), 'unknown') AS d, count(*) FROM core.gpu_minutes "
                            "GROUP BY d ORDER BY d").fetchall()

    periods._clear(conn, minutes, ["2026-11-01", "2026-11-03"])
    assert days_left() == [("2026-10-31", 1), ("2026-11-02", 1440), ("2026-11-04", 1440), ("2026-11-05", 1), ("unknown", 1)]
    periods._clear(conn, minutes, ["2026-11-04", "2026-11-05"])
    assert days_left() == [("2026-10-31", 1), ("2026-11-02", 1440), ("unknown", 1)]
    periods._clear(conn, minutes, ["unknown"])
    assert days_left() == [("2026-10-31", 1), ("2026-11-02", 1440)]


# marts.cost_attribution per billing month: two months of GPU rental on one host, each with a GPU
# charge of one day, a storage line and a tagged line.
HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,ServiceName,"
          "ServiceCategory,ResourceId,ResourceName,Tags,x_GpuCount,BillingPeriodStart,BillingPeriodEnd\n")


def gpu_month(day: str, gpu_cost: str = "48.00") -> str:
    start, end = f"{day}T00:00:00Z", f"{date.fromisoformat(day) + timedelta(days=1)}T00:00:00Z"
    return HEADER + "\n".join([
        f"{gpu_cost},{gpu_cost},USD,Usage,{start},{end},GpuCloud,GPU,Compute,ins-a,gpu-a,,2,,",
        f"3.00,3.00,USD,Usage,{start},{end},GpuCloud,Storage,Storage,disk-a,,,,,",
        f'5.00,5.00,USD,Usage,{start},{end},GpuCloud,Storage,Storage,disk-b,,"{{""ml_phase"": ""inference""}}",,,',
    ]) + "\n"


WORKLOADS_A = """workload_id,phase,host,gpu_count,started_at,ended_at
pt-a,pretraining,gpu-a,2,2026-08-10T00:00:00Z,2026-08-10T12:00:00Z
"""
WORKLOADS_B = """workload_id,phase,host,gpu_count,started_at,ended_at
inf-a,inference,gpu-a,1,2026-09-10T00:00:00Z,2026-09-10T06:00:00Z
"""


MONTHLY_MARTS = ("marts.cost_attribution", "marts.daily_cost_by_billing_month", "marts.daily_series_by_billing_month")


# Billed in September (its billing period stated), used on 10 August: a storage line without a rule.
LATE_LINE = "4.00,4.00,USD,Usage,2026-08-10T00:00:00Z,2026-08-11T00:00:00Z,GpuCloud,Storage,Storage,disk-c,,,,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z\n"


def storage_on_10_august(warehouse: Path) -> list[tuple]:
    """(billing month, cost, charges) of 10 August's unattributed storage, per month, in marts.daily_cost and in
    marts.daily_series (its usage added up over billing months)."""
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        where = "day = DATE '2026-08-10' AND service_name = 'Storage' AND phase = 'unattributed'"
        return conn.execute(f"""
            SELECT strftime(billing_period_start, '%Y-%m'), cost_billing, charge_lines FROM marts.daily_cost_by_billing_month WHERE {where}
            UNION ALL SELECT 'all', cost_billing, charge_lines FROM marts.daily_cost WHERE {where}
            UNION ALL SELECT 'series', cost, charge_lines FROM marts.daily_series
            WHERE day = DATE '2026-08-10' AND service = 'Storage' AND phase = 'unattributed' ORDER BY 1""").fetchall()
    finally:
        conn.close()


def attribution_builds(warehouse: Path) -> dict[str, object]:
    """month → when marts.cost_attribution built it; marts.daily_cost_by_billing_month built the same months."""
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        built = {table: dict(conn.execute("SELECT period, built_at FROM core.period_builds WHERE model = ? AND period <> '*'",
                                          [table]).fetchall()) for table in MONTHLY_MARTS}
    finally:
        conn.close()
    attributed, *following = built.values()
    assert all(set(f) == set(attributed) and all(f[m] >= attributed[m] for m in f) for f in following)
    return attributed


def attribution(warehouse: Path) -> list[tuple]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return [conn.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
                for table in (*MONTHLY_MARTS, "marts.daily_cost", "marts.daily_series", "marts.spend_by_phase")]
    finally:
        conn.close()


def phases_of(warehouse: Path, resource: str, month: str) -> dict[str, tuple]:
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        return {phase: (method, amount) for phase, method, amount in conn.execute(
            "SELECT a.phase, a.method, a.amount_billing FROM marts.cost_attribution AS a JOIN core.cost_lines AS c USING (x_ChargeId) "
            "WHERE c.ResourceId = ? AND strftime(a.billing_period_start, '%Y-%m') = ?", [resource, month]).fetchall()}
    finally:
        conn.close()


def months_money_checked(instance) -> list[str]:
    """The billing months the last run's money check of marts.cost_attribution judged."""
    from dagster import AssetCheckKey, AssetKey

    key = AssetCheckKey(AssetKey(["marts", "cost_attribution"]), "attribution_conserves_money")
    [latest] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    evaluation = latest.event.dagster_event.event_specific_data
    assert evaluation.passed
    return evaluation.metadata["months_checked"].value


def test_cost_attribution_rebuilds_the_billing_months_whose_inputs_changed_and_equals_a_fresh_build(tmp_path):
    """A new month's delivery attributes that month only; telemetry re-attributes the months whose
    GPU charges cover its days; new workloads the months with GPU charges; a restated month its own."""
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    (landing / "gpu-2026-08.csv").write_text(gpu_month("2026-08-10"))
    (landing / "jobs-a.csv").write_text(WORKLOADS_A)
    with DagsterInstance.ephemeral() as instance:
        def run() -> dict[str, object]:
            assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
            return attribution_builds(warehouse)

        first = run()
        assert set(first) == {"2026-08"}
        # 48 GPU-hours paid: pre-training held 24, nobody held the rest (no telemetry: idle).
        assert phases_of(warehouse, "ins-a", "2026-08") == {"pretraining": ("workload_overlap", Decimal("24.0000000000")),
                                                            "idle": ("no_workload", Decimal("24.0000000000"))}

        # September's delivery: September is attributed, August left as it was built. One of its
        # lines was used on 10 August: that day's storage cost sums both billing months.
        (landing / "gpu-2026-09.csv").write_text(gpu_month("2026-09-10", "96.00") + LATE_LINE)
        second = run()
        assert second["2026-08"] == first["2026-08"] and set(second) == {"2026-08", "2026-09"}
        assert months_money_checked(instance) == ["2026-09"]  # the money check judged the month attributed
        assert storage_on_10_august(warehouse) == [("2026-08", Decimal("3.0000000000"), 1),
                                                   ("2026-09", Decimal("4.0000000000"), 1),
                                                   ("all", Decimal("7.0000000000"), 2),
                                                   ("series", Decimal("7.0000000000"), 2)]

        # Telemetry on 10 August: gpu-a's two GPUs busy from 12:00 to 18:00, while nobody held them.
        smi = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n" + "".join(
            f"2026/08/10 {h:02d}:{m:02d}:00.000, {i}, GPU-a{i}, NVIDIA A100, 90 %, 100 MiB, 300.00 W\n"
            for h in range(12, 18) for m in range(60) for i in (0, 1))
        (landing / "gpu-a.csv").write_text(smi)
        third = run()
        assert third["2026-09"] == second["2026-09"] and third["2026-08"] > second["2026-08"]
        assert phases_of(warehouse, "ins-a", "2026-08") == {
            "pretraining": ("workload_overlap", Decimal("24.0000000000")),
            "unattributed": ("busy_telemetry", Decimal("12.0000000000")),
            "idle": ("no_workload", Decimal("12.0000000000"))}

        # New workloads: every month with GPU charges is attributed again (the workloads are not by month).
        (landing / "jobs-b.csv").write_text(WORKLOADS_B)
        fourth = run()
        assert fourth["2026-08"] > third["2026-08"] and fourth["2026-09"] > third["2026-09"]
        assert phases_of(warehouse, "ins-a", "2026-09")["inference"] == ("workload_overlap", Decimal("12.0000000000"))

        # August restated without its storage line: August only, and the line's part is gone.
        (landing / "gpu-2026-08.csv").write_text("\n".join(gpu_month("2026-08-10").splitlines()[:2] + gpu_month("2026-08-10").splitlines()[3:]) + "\n")
        fifth = run()
        assert fifth["2026-09"] == fourth["2026-09"] and fifth["2026-08"] > fourth["2026-08"]
        assert phases_of(warehouse, "disk-a", "2026-08") == {}
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert attribution(fresh) == attribution(warehouse)
    parts, by_month, _, daily, *_ = attribution(warehouse)
    assert len(parts) == 9  # August: 3 GPU parts and the tag; September: 2, two storage lines, the tag
    assert (len(by_month), len(daily)) == (9, 9)  # August restated without the line the late one shared a day with


EGRESS_HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
                 "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit\n")


def egress_month(day: str, cost: str, gb: str) -> str:
    start, end = f"{day}T00:00:00Z", f"{date.fromisoformat(day) + timedelta(days=1)}T00:00:00Z"
    return EGRESS_HEADER + (f"{cost},{cost},USD,Usage,{start},{end},AWS,AWS Data Transfer,Networking,"
                            f"arn:aws:s3:::bucket-e,bucket-e,{gb},GB\n"
                            f"1.00,1.00,USD,Usage,{start},{end},AWS,EC2,Compute,i-1,i-1,1,Hours\n")


def test_egress_lines_are_found_per_billing_month_and_equal_a_fresh_build(tmp_path):
    """A new month's delivery finds that month's egress lines (the other months keep theirs), and
    findings.egress, which prices them, equals a build from scratch."""
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    (landing / "aws-2026-08.csv").write_text(egress_month("2026-08-10", "2.70", "30"))

    def egress(path: Path) -> tuple[list, list, dict]:
        conn = duckdb.connect(str(path), read_only=True)
        try:
            lines = conn.execute("SELECT strftime(billing_period_start, '%Y-%m'), resource, path, gb, EffectiveCost "
                                 "FROM marts.egress_lines_by_billing_month ORDER BY ALL").fetchall()
            found = conn.execute("SELECT resource, period_start, path, gb, wasted_cost FROM findings.egress ORDER BY ALL").fetchall()
            built = dict(conn.execute("SELECT period, built_at FROM core.period_builds "
                                      "WHERE model = 'marts.egress_lines_by_billing_month' AND period <> '*'").fetchall())
            return lines, found, built
        finally:
            conn.close()

    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        lines, _, first = egress(warehouse)
        assert lines == [("2026-08", "bucket-e", "internet", Decimal("30.0000000000"), Decimal("2.7000000000"))]
        (landing / "aws-2026-09.csv").write_text(egress_month("2026-09-10", "9.00", "100"))
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
    lines, found, second = egress(warehouse)
    assert second["2026-08"] == first["2026-08"] and set(second) == {"2026-08", "2026-09"}  # August kept as built
    assert [(month, gb) for month, _, _, gb, _ in lines] == [("2026-08", Decimal("30.0000000000")),
                                                              ("2026-09", Decimal("100.0000000000"))]
    assert [(gb, cost) for *_, gb, cost in found] == [(Decimal("30.0000000000"), Decimal("2.7000000000")),
                                                       (Decimal("100.0000000000"), Decimal("9.0000000000"))]
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert egress(fresh)[:2] == (lines, found)


SERVICE_HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
                  "ServiceName,ServiceCategory,ServiceSubcategory,ResourceId\n")


def service_month(month: str, lines: list[tuple[str, str, str]]) -> str:
    """A FOCUS export of `month`: one 1.00 line a day per (ServiceName, ServiceCategory, ServiceSubcategory)."""
    first = date.fromisoformat(f"{month}-01")
    rows = []
    for day, (name, category, subcategory) in enumerate(lines):
        start = first + timedelta(days=day)
        rows.append(f"1.00,1.00,USD,Usage,{start}T00:00:00Z,{start + timedelta(days=1)}T00:00:00Z,AWS,"
                    f"{name},{category},{subcategory},r-{day}\n")
    return SERVICE_HEADER + "".join(rows)


def service_labels(warehouse: Path) -> list[tuple]:
    return read(warehouse, "SELECT strftime(BillingPeriodStart, '%Y-%m') AS month, ServiceName, ServiceCategory, ServiceSubcategory, "
                           "count(*) FROM core.cost_lines GROUP BY ALL ORDER BY ALL")


def test_one_category_per_service_name_across_months_built_apart(tmp_path):
    """FOCUS wants one ServiceCategory and one ServiceSubcategory per ServiceName across the dataset
    (ServiceName-C-005-C, -C-008-C); the most lines decide. A month delivered later that tips the
    balance rebuilds the earlier months whose labels change, and the result equals a fresh build."""
    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    august = [("Vector Store", "Databases", "NoSQL Databases")] * 3 + [("Model Garden", "AI and Machine Learning", "Machine Learning")] * 3
    september = [("Vector Store", "AI and Machine Learning", "Generative AI")] * 5 \
        + [("Model Garden", "AI and Machine Learning", "Generative AI")] * 5 + [("Other Thing", "Compute", "Virtual Machines")]
    (landing / "focus-2026-08.csv").write_text(service_month("2026-08", august))
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        first = builds(warehouse)
        assert service_labels(warehouse) == [("2026-08", "Model Garden", "AI and Machine Learning", "Machine Learning", 3),
                                             ("2026-08", "Vector Store", "Databases", "NoSQL Databases", 3)]
        (landing / "focus-2026-09.csv").write_text(service_month("2026-09", september))
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        second = builds(warehouse)
        # September tips both names: August is rebuilt with September's labels.
        assert second["2026-08"] > first["2026-08"]
        assert service_labels(warehouse) == [
            ("2026-08", "Model Garden", "AI and Machine Learning", "Generative AI", 3),
            ("2026-08", "Vector Store", "AI and Machine Learning", "Generative AI", 3),
            ("2026-09", "Model Garden", "AI and Machine Learning", "Generative AI", 5),
            ("2026-09", "Other Thing", "Compute", "Virtual Machines", 1),
            ("2026-09", "Vector Store", "AI and Machine Learning", "Generative AI", 5)]
        assert read(warehouse, "SELECT DISTINCT service_category FROM marts.daily_cost_by_billing_month "
                               "WHERE service_name = 'Vector Store'") == [("AI and Machine Learning",)]  # the marts follow
        # Nothing new: nothing is rebuilt (the labels are stable once decided).
        assert run_graph(settings, warehouse, instance=instance, as_of=AS_OF).success
        assert builds(warehouse) == second
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert service_labels(fresh) == service_labels(warehouse)


def storage_write_builds(warehouse: Path) -> dict[str, object]:
    return dict(read(warehouse, "SELECT period, built_at FROM core.period_builds "
                                "WHERE model = 'marts.gpu_minutes_in_storage_writes' AND period <> '*'"))


def checkpoint(start: str, end: str) -> str:
    return ('{"job": "pt-a", "host": "node-a", "started_at": "%s", "ended_at": "%s", "bytes": 100000000000, '
            '"path": "/ckpt", "storage_class": "cloud_disk"}\n' % (start, end))


def test_checkpoint_stalls_read_the_minutes_of_their_writes_built_by_day_and_equal_a_fresh_build(tmp_path):
    """findings.slow_disk_idle reads marts.gpu_minutes_in_storage_writes, the host-minutes storage
    writes cover, built per UTC day: a checkpoint crossing midnight is judged whole, and a new storage
    file rebuilds the days its writes cover, not the history's."""
    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    settings = FinopsSettings(landing_dir=str(landing))
    # node-a: GPU 0 idle, GPU 1 busy at 80 %, 20:00 on 1 November to 04:00 on the 2nd, both held by pt-a.
    write_in(landing / "1" / "node-a.csv", smi_minutes("2026-11-01T20:00:00", 480))
    write_in(landing / "jobs.csv", "workload_id,phase,host,gpu_count,started_at,ended_at\n"
                                   "pt-a,pretraining,node-a,2,2026-11-01T20:00:00Z,2026-11-02T04:00:00Z\n")
    stalls = "SELECT resource, period_start, evidence->>'idle_share', evidence->>'gpu_minutes_with_telemetry', " \
             "evidence->>'wasted_gpu_hours' FROM findings.slow_disk_idle ORDER BY period_start"
    with DagsterInstance.ephemeral() as instance:
        # 23:50 to 00:10: twenty minutes over midnight, one of the job's two GPUs idle in each.
        first = deliver(settings, warehouse, instance, landing / "ckpt-1" / "events.jsonl",
                        checkpoint("2026-11-01T23:50:00Z", "2026-11-02T00:10:00Z"), storage_write_builds)
        assert set(first) == {"2026-10-31", "2026-11-01", "2026-11-02", "2026-11-03"}  # core.gpu_minutes' days
        assert read(warehouse, "SELECT day, count(*), sum(gpus_seen), sum(idle_gpus) FROM marts.gpu_minutes_in_storage_writes "
                               "GROUP BY day ORDER BY day") == [(date(2026, 11, 1), 10, 20, 10), (date(2026, 11, 2), 10, 20, 10)]
        rows = read(warehouse, stalls)
        assert [(r[2], r[3], r[4]) for r in rows] == [("0.5", "40", "0.3333")]  # 2 GPUs × 1/3 h × half idle

        # A second storage file, a write at 02:00 on the 2nd: that day only.
        second = deliver(settings, warehouse, instance, landing / "ckpt-2" / "events.jsonl",
                         checkpoint("2026-11-02T02:00:00Z", "2026-11-02T02:06:00Z"), storage_write_builds)
        assert rebuilt(first, second) == {"2026-11-02"}
        assert len(read(warehouse, stalls)) == 2
    fresh = tmp_path / "fresh.duckdb"
    with DagsterInstance.ephemeral() as instance:
        assert run_graph(settings, fresh, instance=instance, as_of=AS_OF).success
    assert read(fresh, "SELECT * FROM findings.slow_disk_idle ORDER BY ALL") == read(warehouse, "SELECT * FROM findings.slow_disk_idle ORDER BY ALL")
    minutes = "SELECT day, host, minute, gpus_seen, idle_gpus, busy_sum, gpu_model FROM marts.gpu_minutes_in_storage_writes ORDER BY ALL"
    assert read(fresh, minutes) == read(warehouse, minutes)
