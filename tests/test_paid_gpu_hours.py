"""GPU-hours paid count the hours usage lines pay for: a credit on a GPU charge lowers its cost, not
doubles its hours, and busy time nobody held is paid time too.

One host (h-1, 8 GPUs) for a day at 480 USD, with a 96 USD credit on the same instance; a
pre-training job holds its GPUs 00:00-12:00, and telemetry shows them busy at 90 % 12:00-24:00
with no job (busy_telemetry, unattributed)."""

from datetime import UTC, datetime
from decimal import Decimal

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline, smi_minutes

DETAILS = "\"{\"\"GpuCount\"\": 8, \"\"InstanceType\"\": \"\"p5.48xlarge\"\"}\""
CHARGES = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
           "ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,SkuId,SkuPriceDetails\n"
           f"480.00,480.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-1,h-1,,SKU-P5,{DETAILS}\n"
           f"-96.00,-96.00,USD,Credit,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-1,h-1,,SKU-P5,{DETAILS}\n")
JOBS = "workload_id,phase,host,gpu_count,started_at,ended_at\npt-1,pretraining,h-1,8,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z\n"


def telemetry() -> str:
    return smi_minutes(datetime(2026, 9, 1, 12, tzinfo=UTC), 12 * 60, 8, lambda minute, gpu: 90, "GPU-h1-", power="600.00 W")


def run_the_day(tmp_path):
    """The day above run into a new warehouse; a read-only connection to it."""
    landing = tmp_path / "landing"
    (landing / "host=h-1").mkdir(parents=True)
    (landing / "charges.csv").write_text(CHARGES)
    (landing / "jobs.csv").write_text(JOBS)
    (landing / "host=h-1" / "smi.csv").write_text(telemetry())
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    return connect(tmp_path / "wh.duckdb", read_only=True)


def test_a_credit_pays_for_no_gpu_hours_and_busy_unheld_time_is_paid(tmp_path):
    conn = run_the_day(tmp_path)
    try:
        # The credit is split like its charge, money only.
        assert fetch_all(conn, """SELECT c.ChargeCategory, a.phase, a.method, a.amount_billing, a.gpu_seconds
                                  FROM marts.cost_attribution AS a JOIN core.cost_lines AS c USING (x_ChargeId)
                                  ORDER BY 1, 2""") == [
            ("Credit", "pretraining", "workload_overlap", Decimal("-48.0000000000"), None),
            ("Credit", "unattributed", "busy_telemetry", Decimal("-48.0000000000"), None),
            ("Usage", "pretraining", "workload_overlap", Decimal("240.0000000000"), 345600),
            ("Usage", "unattributed", "busy_telemetry", Decimal("240.0000000000"), 345600),
        ]
        # 96 GPU-hours paid each (they were 192 and 0: the credit's hours doubled the job's, and the
        # busy part's were left out).
        assert fetch_all(conn, """SELECT phase, cost_reporting, gpu_hours_paid, gpu_hours_busy, utilization_pct
                                  FROM marts.spend_by_phase WHERE period = 'all' AND phase IN ('pretraining', 'unattributed')
                                  ORDER BY phase""") == [
            ("pretraining", Decimal("192.0000000000"), 96.0, 0.0, None),  # no telemetry while it ran
            ("unattributed", Decimal("192.0000000000"), 96.0, 86.4, 90.0),
        ]
        # The purchasing model sees 8 GPUs paid each hour of the day, not 16.
        assert fetch_all(conn, """SELECT count(*), sum(gpus_paid) FROM (SELECT DISTINCT hour, gpu_model, gpus_paid
                                  FROM marts.gpu_hours_profile WHERE gpus_paid > 0)""") == [(24, 192.0)]
    finally:
        conn.close()


def test_without_workloads_the_purchasing_model_sizes_the_gpus_paid_for_and_their_busy_hours(tmp_path):
    """No workload export at all, telemetry showing the 8 paid GPUs busy at 50 % all day: the
    purchasing model sizes 8 cards held every hour, busy half of them (it was one card with no load)."""
    landing = tmp_path / "landing"
    (landing / "host=h-1").mkdir(parents=True)
    (landing / "charges.csv").write_text(CHARGES)
    (landing / "host=h-1" / "smi.csv").write_text(
        smi_minutes(datetime(2026, 9, 1, tzinfo=UTC), 24 * 60, 8, lambda minute, gpu: 50, "GPU-h1-", power="400.00 W"))
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, """SELECT gpu_model, count(*), sum(gpus_paid), sum(gpu_hours_busy_any)
                                  FROM (SELECT DISTINCT hour, gpu_model, gpus_paid, gpu_hours_busy_any FROM marts.gpu_hours_profile)
                                  GROUP BY ALL""") == [("H100-80GB", 24, 192.0, Decimal("96"))]
        rows = fetch_all(conn, """SELECT scenario, inputs->>'demand', (inputs->>'peak_gpus')::INT,
                                         (inputs->>'held_gpu_hours_per_year')::DOUBLE, (inputs->>'busy_gpu_hours_per_year')::DOUBLE
                                  FROM marts.tco_scenarios WHERE gpu_model = 'H100-80GB' AND scenario IN ('buy', 'on_demand')
                                  ORDER BY scenario""")
        # A year of the day measured: 192 GPU-hours held and 96 busy a day, 8 cards at the peak.
        assert rows == [("buy", "paid", 8, 192.0 * 365, 96.0 * 365), ("on_demand", "paid", 8, 192.0 * 365, 96.0 * 365)]
    finally:
        conn.close()


def test_beside_workloads_the_purchasing_model_sizes_busy_hours_no_workload_held(tmp_path):
    """The job holds h-1's 8 GPUs 00:00-12:00; they are busy at 90 % 12:00-24:00 with no job. The
    purchasing model counts those 86.4 busy GPU-hours as unattributed recurring demand (before, only
    the job's hours: the H100s' afternoons were left out of every strategy's sizing)."""
    conn = run_the_day(tmp_path)
    try:
        assert fetch_all(conn, """SELECT count(*), round(sum(gpu_hours_busy_unheld), 6) FROM (SELECT DISTINCT hour, gpu_model, gpu_hours_busy_unheld
                                  FROM marts.gpu_hours_profile WHERE gpu_hours_busy_unheld > 0)""") == [(12, 86.4)]
        rows = fetch_all(conn, """SELECT scenario, inputs->>'demand', (inputs->>'peak_gpus')::INT,
                                         (inputs->>'unheld_busy_gpu_hours_measured')::DOUBLE,
                                         (inputs->>'held_gpu_hours_per_year')::DOUBLE, (inputs->>'busy_gpu_hours_per_year')::DOUBLE
                                  FROM marts.tco_scenarios WHERE gpu_model = 'H100-80GB' AND scenario = 'on_demand'""")
        # The one-off job's 96 GPU-hours once, and the busy afternoon's 86.4 a day, recurring.
        assert rows == [("on_demand", "workloads", 8, 86.4, 31632.0, 31536.0)]
    finally:
        conn.close()
