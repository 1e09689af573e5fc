"""core.workloads is one job per node: a multi-node job written once per host in the workloads CSV
holds GPUs on every host, and a job exported again keeps its newest copy whole."""

from decimal import Decimal

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline

CHARGES = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
           "ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,SkuId,SkuPriceDetails\n"
           + "".join(f"384.00,384.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-{h},{h},,"
                     "SKU-P5,\"{\"\"GpuCount\"\": 8, \"\"InstanceType\"\": \"\"p5.48xlarge\"\"}\"\n" for h in ("h-1", "h-2", "h-3")))
HEADER = "workload_id,phase,host,gpu_count,started_at,ended_at\n"


def run(tmp_path, files: dict[str, str]):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(CHARGES)
    for name, text in files.items():
        (landing / name).write_text(HEADER + text)
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    return connect(tmp_path / "wh.duckdb", read_only=True)


def test_a_job_on_two_hosts_holds_the_gpus_of_both(tmp_path):
    conn = run(tmp_path, {"jobs.csv": "job-7,pretraining,h-1,8,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n"
                                      "job-7,pretraining,h-2,8,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n"})
    try:
        assert fetch_all(conn, "SELECT workload_id, host, gpu_count FROM core.workloads ORDER BY host") == [
            ("job-7", "h-1", 8), ("job-7", "h-2", 8)]
        # Each host's day is pre-training; h-3, where no workload ran, is idle.
        assert fetch_all(conn, """SELECT c.ResourceName, a.phase, a.method, a.amount_billing
                                  FROM marts.cost_attribution AS a JOIN core.cost_lines AS c USING (x_ChargeId)
                                  ORDER BY 1, 2""") == [
            ("h-1", "pretraining", "workload_overlap", Decimal("384.0000000000")),
            ("h-2", "pretraining", "workload_overlap", Decimal("384.0000000000")),
            ("h-3", "idle", "no_workload", Decimal("384.0000000000")),
        ]
        # One job, seen once: a one-off run for the purchasing model, not a recurring family.
        assert fetch_all(conn, """SELECT load, round(sum(gpu_hours_held), 6) FROM marts.gpu_hours_profile
                                  WHERE phase = 'pretraining' AND gpu_hours_held > 0 GROUP BY load""") == [("one_off", 384.0)]
    finally:
        conn.close()


def test_the_newest_export_of_a_job_wins_whole_and_a_requeued_job_leaves_its_old_node(tmp_path):
    # jobs-1 (loaded first, by name): job-7 running on two hosts, job-9 running on h-1.
    # jobs-2: job-7 ended at noon on both; job-9 requeued onto h-2 and ended there at 06:00.
    conn = run(tmp_path, {
        "jobs-1.csv": "job-7,pretraining,h-1,8,2026-09-01T00:00:00Z,\n"
                      "job-7,pretraining,h-2,8,2026-09-01T00:00:00Z,\n"
                      "job-9,finetuning,h-1,8,2026-09-01T00:00:00Z,\n",
        "jobs-2.csv": "job-7,pretraining,h-1,8,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z\n"
                      "job-7,pretraining,h-2,8,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z\n"
                      "job-9,finetuning,h-2,8,2026-09-01T00:00:00Z,2026-09-01T06:00:00Z\n",
    })
    try:
        assert fetch_all(conn, """SELECT workload_id, host, strftime(ended_at, '%H:%M'), x_SourceFile
                                  FROM core.workloads ORDER BY 1, 2""") == [
            ("job-7", "h-1", "12:00", "jobs-2.csv"), ("job-7", "h-2", "12:00", "jobs-2.csv"),
            ("job-9", "h-2", "06:00", "jobs-2.csv")]
    finally:
        conn.close()
