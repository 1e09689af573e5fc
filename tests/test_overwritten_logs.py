"""Telemetry, workload and storage files are logs: a file written again at its path (nvidia-smi
restarted with `-f`, a daily `sacct` dump to one name, a checkpoint log rotated) keeps the rows
its earlier version held, and where the two give one GPU instant or one job, the newer wins.
Billing files are not logs: a new version at a path is a re-export and replaces the old one."""

from datetime import UTC, datetime

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline, smi_minutes

WORKLOADS_HEADER = "workload_id,phase,host,gpu_count,started_at,ended_at\n"


def run(landing, warehouse):
    outcome = run_pipeline(landing, warehouse, reporting_currency="USD")
    assert outcome.success, outcome.failed_steps


def statuses(warehouse) -> dict:
    conn = connect(warehouse, read_only=True)
    try:
        return dict(fetch_all(conn, "SELECT sha256[:8] || ' ' || path, status FROM raw.files ORDER BY ingested_at"))
    finally:
        conn.close()


def test_an_nvidia_smi_log_written_again_keeps_its_earlier_samples(tmp_path):
    """A day of 2 GPUs sampled 60 times, then the log restarted at the same path with the next
    hour (its first minute repeating the last one at another utilization): 119 minutes a GPU, the
    repeated minute at the newer value."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    (landing / "telemetry").mkdir(parents=True)
    log = landing / "telemetry" / "gpu-node-1.csv"
    log.write_text(smi_minutes(datetime(2026, 9, 1, 10, tzinfo=UTC), 60, 2, lambda m, g: 50, "GPU-a"))
    run(landing, warehouse)
    log.write_text(smi_minutes(datetime(2026, 9, 1, 10, 59, tzinfo=UTC), 61, 2, lambda m, g: 90, "GPU-a"))
    run(landing, warehouse)
    assert sorted(statuses(warehouse).values()) == ["loaded", "replaced"]
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, """SELECT count(*), count(DISTINCT gpu_key), min(ts), max(ts) FROM core.gpu_samples""") == [
            (2 * 120, 2, datetime(2026, 9, 1, 10, tzinfo=UTC), datetime(2026, 9, 1, 11, 59, tzinfo=UTC))]
        assert fetch_all(conn, """SELECT DISTINCT util_pct FROM core.gpu_samples
                                  WHERE ts = '2026-09-01 10:59:00+00'""") == [(90.0,)]
    finally:
        conn.close()


def test_a_workloads_dump_written_again_keeps_the_jobs_it_no_longer_lists(tmp_path):
    """Monday's dump lists job a (ended) and job b (running); Tuesday's, at the same path, lists
    b (now ended) and c. All three jobs count, b as Tuesday's dump has it."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    dump = landing / "jobs.csv"
    dump.write_text(WORKLOADS_HEADER
                    + "a,pretraining,gpu-node-1,8,2026-09-01T00:00:00Z,2026-09-01T06:00:00Z\n"
                    + "b,finetuning,gpu-node-1,8,2026-09-01T06:00:00Z,\n")
    run(landing, warehouse)
    dump.write_text(WORKLOADS_HEADER
                    + "b,finetuning,gpu-node-1,8,2026-09-01T06:00:00Z,2026-09-02T03:00:00Z\n"
                    + "c,inference,gpu-node-1,8,2026-09-02T03:00:00Z,2026-09-02T09:00:00Z\n")
    run(landing, warehouse)
    assert sorted(statuses(warehouse).values()) == ["loaded", "replaced"]
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, "SELECT workload_id, phase, ended_at FROM core.workloads ORDER BY workload_id") == [
            ("a", "pretraining", datetime(2026, 9, 1, 6, tzinfo=UTC)),
            ("b", "finetuning", datetime(2026, 9, 2, 3, tzinfo=UTC)),
            ("c", "inference", datetime(2026, 9, 2, 9, tzinfo=UTC))]
    finally:
        conn.close()


def test_a_corrected_workloads_dump_wins_over_the_version_it_replaced(tmp_path):
    """The dump rewritten to correct job a (finetuning, ended at 06:00, not pretraining to 18:00):
    the correction holds, though the version it replaced says the job ran longer."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    dump = landing / "jobs.csv"
    dump.write_text(WORKLOADS_HEADER + "a,pretraining,gpu-node-1,8,2026-09-01T00:00:00Z,2026-09-01T18:00:00Z\n")
    run(landing, warehouse)
    dump.write_text(WORKLOADS_HEADER + "a,finetuning,gpu-node-1,8,2026-09-01T00:00:00Z,2026-09-01T06:00:00Z\n")
    run(landing, warehouse)
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, "SELECT workload_id, phase, ended_at FROM core.workloads") == [
            ("a", "finetuning", datetime(2026, 9, 1, 6, tzinfo=UTC))]
    finally:
        conn.close()
