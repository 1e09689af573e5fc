"""The same GPU activity sampled every 10 s, 60 s and 300 s gives the same answers.

One host (gpu-t, 8 GPUs) over two days, paid 2.00 USD per GPU-hour:
  00:00–30:00  pre-training pt-t (GPUs 0–5) and fine-tuning ft-t (GPUs 6–7), busy 78–96 %;
               10:00–10:10 pt-t writes a checkpoint and its 6 GPUs drop to 1 % (ft-t's stay busy)
  30:00–36:30  no workload, every GPU idle at 1 %                    → idle, and 8 idle runs of 6.5 h
  36:30–36:50  no telemetry at all (a 20-minute gap)                 → missing: idle money, no minutes
  36:50–48:00  no workload, GPUs busy 78–96 %                        → unattributed (busy telemetry)
and an inference host (gpu-inf, 1 GPU, 1.00 USD per hour) at 2 % by night and 50 % by day.
"""

import json
import math
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import run_pipeline

REPO = Path(__file__).resolve().parent.parent

T0 = datetime(2026, 9, 1, tzinfo=UTC)
MINUTES = 48 * 60
WORK_END, IDLE_END, GAP_END = 30 * 60, 36 * 60 + 30, 36 * 60 + 50
CKPT = (600, 610)
INTERVALS = (10, 60, 300)
SMI_HEADER = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"

# A native FOCUS 1.2 export: the GPUs are named only where FOCUS puts them, in SkuPriceDetails.
CHARGES = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
           "ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,SkuId,SkuPriceDetails\n"
           "768.00,768.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-03T00:00:00Z,GpuCloud,GPU,Compute,ins-t,gpu-t,,"
           "SKU-P5,\"{\"\"GpuCount\"\": 8, \"\"InstanceType\"\": \"\"p5.48xlarge\"\"}\"\n"
           "48.00,48.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-03T00:00:00Z,GpuCloud,GPU,Compute,ins-inf,gpu-inf,,"
           "SKU-G6E,\"{\"\"InstanceType\"\": \"\"g6e.xlarge\"\"}\"\n")
WORKLOADS = """workload_id,phase,host,gpu_count,started_at,ended_at
pt-t,pretraining,gpu-t,6,2026-09-01T00:00:00Z,2026-09-02T06:00:00Z
ft-t,finetuning,gpu-t,2,2026-09-01T00:00:00Z,2026-09-02T06:00:00Z
svc-inf,inference,gpu-inf,1,2026-09-01T00:00:00Z,
"""
CHECKPOINT = json.dumps({"workload_id": "pt-t", "host": "gpu-t", "started_at": "2026-09-01T10:00:00Z",
                         "ended_at": "2026-09-01T10:10:00Z", "bytes": 300_000_000_000, "path": "/ckpt/pt-t/1",
                         "storage_class": "cloud_disk"}) + "\n"


def busy_pct(seconds: int, gpu: int) -> float:
    """A training load wandering between 78 and 96 %, out of step with any sampling interval."""
    return 87 + 9 * math.sin(seconds / 1020 + gpu)


def training_util(seconds: int, gpu: int) -> float | None:
    minute = seconds // 60
    if IDLE_END <= minute < GAP_END:
        return None  # nothing reported
    if WORK_END <= minute < IDLE_END:
        return 1
    if CKPT[0] <= minute < CKPT[1] and gpu < 6:
        return 1
    return busy_pct(seconds, gpu)


def serving_util(seconds: int) -> float:
    return 2 if (seconds // 3600) % 24 < 12 else 50 + 5 * math.sin(seconds / 700)


def smi_file(interval: int, gpus: int, util, name: str) -> str:
    lines = [SMI_HEADER]
    for s in range(0, MINUTES * 60, interval):
        stamp = (T0 + timedelta(seconds=s)).strftime("%Y/%m/%d %H:%M:%S.000")
        for g in range(gpus):
            u = util(s, g)
            if u is not None:
                lines.append(f"{stamp}, {g}, GPU-{name}{g}, {'NVIDIA H100 80GB HBM3' if gpus > 1 else 'NVIDIA L40S'}, "
                             f"{round(u)} %, 1000 MiB, 300.00 W")
    return "\n".join(lines) + "\n"


def run_at(root, interval, workloads=WORKLOADS):
    landing = root / f"landing-{interval}"
    landing.mkdir()
    (landing / "charges.csv").write_text(CHARGES)
    (landing / "jobs.csv").write_text(workloads)
    (landing / "checkpoints.jsonl").write_text(CHECKPOINT)
    (landing / "gpu-t.csv").write_text(smi_file(interval, 8, training_util, "t"))
    (landing / "gpu-inf.csv").write_text(smi_file(interval, 1, lambda s, g: serving_util(s), "inf"))
    warehouse = root / f"wh-{interval}.duckdb"
    outcome = run_pipeline(landing, warehouse, reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    conn = connect(warehouse, read_only=True)
    try:
        return {
            "split": fetch_dicts(conn, """
                SELECT c.ResourceId AS resource, a.phase, a.method, a.amount_billing, a.gpu_seconds, a.evidence
                FROM marts.cost_attribution a JOIN core.cost_lines c USING (x_ChargeId) ORDER BY 1, 2"""),
            "busy_hours": dict(fetch_all(conn, "SELECT host, sum(busy_fraction * coverage) / 60 FROM core.gpu_minutes GROUP BY 1")),
            "util_pct": fetch_all(conn, """SELECT 100 * sum(busy_fraction * coverage) / sum(coverage) FROM core.gpu_minutes
                                           WHERE host = 'gpu-t' AND minute < TIMESTAMPTZ '2026-09-01 10:00:00+00'""")[0][0],
            "minutes": dict(fetch_all(conn, "SELECT host, count(*) FROM core.gpu_minutes GROUP BY 1")),
            "gap_rows": fetch_all(conn, """SELECT count(*) FILTER (WHERE minute >= TIMESTAMPTZ '2026-09-02 12:30:00+00'
                                                                    AND minute < TIMESTAMPTZ '2026-09-02 12:50:00+00'),
                                                  count(*) FILTER (WHERE minute = TIMESTAMPTZ '2026-09-02 12:29:00+00'),
                                                  count(*) FILTER (WHERE minute = TIMESTAMPTZ '2026-09-02 12:50:00+00')
                                           FROM core.gpu_minutes WHERE host = 'gpu-t'""")[0],
            "idle_runs": fetch_dicts(conn, "SELECT resource, wasted_cost, evidence FROM findings.unused_gpu WHERE subkind = 'idle_run' ORDER BY 1"),
            "no_telemetry": fetch_all(conn, "SELECT count(*) FROM findings.unused_gpu WHERE subkind = 'no_telemetry'")[0][0],
            "slow_disk": fetch_dicts(conn, "SELECT subkind, wasted_cost, avoidable_cost, evidence FROM findings.slow_disk_idle"),
            "inference": fetch_dicts(conn, "SELECT subkind, wasted_cost, avoidable_cost, evidence FROM findings.overprovisioned_inference"),
            "spend": dict(fetch_all(conn, "SELECT phase, gpu_hours_busy FROM marts.spend_by_phase WHERE period = 'all'")),
        }
    finally:
        conn.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("intervals")
    return {interval: run_at(root, interval) for interval in INTERVALS}


def split_of(run, resource):
    return {(r["phase"], r["method"]): r["amount_billing"] for r in run["split"] if r["resource"] == resource}


def test_the_phase_split_is_the_same_to_the_cent_at_every_interval(runs):
    expected = {
        ("pretraining", "workload_overlap"): Decimal("360.0000000001"),  # 6 GPUs × 30 h × 2.00, + the rounding residue
        ("finetuning", "workload_overlap"): Decimal("120.000000"),  # 2 GPUs × 30 h
        ("unattributed", "busy_telemetry"): Decimal("178.6666666666"),  # 8 GPUs × 11 h 10 min, busy with no workload
        ("idle", "no_workload"): Decimal("109.3333333333"),  # 8 GPUs × (6 h 30 min idle + 20 min without telemetry)
    }
    for interval, run in runs.items():
        assert split_of(run, "ins-t") == expected, interval
        assert sum(split_of(run, "ins-t").values()) == Decimal("768.000000")
        assert split_of(run, "ins-inf") == {("inference", "workload_overlap"): Decimal("48.000000")}


def test_busy_telemetry_without_a_workload_is_unattributed_with_its_evidence(runs):
    for interval, run in runs.items():
        part = next(r for r in run["split"] if r["resource"] == "ins-t" and r["phase"] == "unattributed")
        evidence = json.loads(part["evidence"])
        assert part["gpu_seconds"] == 8 * (MINUTES - GAP_END) * 60, interval
        assert evidence["gpu_hours_busy_without_workload"] == pytest.approx(8 * (MINUTES - GAP_END) / 60, abs=1e-3)
        assert evidence["busy_minutes"] == MINUTES - GAP_END and evidence["busy_threshold"] == 0.05
        assert run["spend"]["unattributed"] > 0  # the busy hours say the same


def test_a_workload_without_a_phase_and_busy_telemetry_are_two_unattributed_parts_of_one_charge(tmp_path):
    """marts.cost_attribution has a part per charge, phase and method: the fine-tuning job, unnamed
    and unlabelled, is unattributed by workload overlap, and the busy hours nobody held are
    unattributed by busy telemetry, two parts of one phase. The daily marts count the charge once,
    and spread both parts over the charge's two days (the daily series, which the anomalies score,
    and an anomaly's contributors had spread the two as one, losing 120.00 USD of the 298.67)."""
    workloads = WORKLOADS.replace("ft-t,finetuning,", "job-t,,")
    run = run_at(tmp_path, 300, workloads)
    assert split_of(run, "ins-t") == {
        ("pretraining", "workload_overlap"): Decimal("360.0000000001"),
        ("unattributed", "workload_overlap"): Decimal("120.000000"),
        ("unattributed", "busy_telemetry"): Decimal("178.6666666666"),
        ("idle", "no_workload"): Decimal("109.3333333333"),
    }
    conn = connect(tmp_path / "wh-300.duckdb", read_only=True)
    try:
        assert fetch_all(conn, """SELECT cost_reporting, charge_lines FROM marts.daily_cost
                                  WHERE day = DATE '2026-09-01' AND phase = 'unattributed'""") == [(Decimal("298.6666666666"), 1)]
        assert fetch_all(conn, """SELECT day, cost, charge_lines FROM marts.daily_series_by_billing_month
                                  WHERE phase = 'unattributed' ORDER BY day""") == [
            (date(2026, 9, 1), Decimal("149.3333333333"), 1), (date(2026, 9, 2), Decimal("149.3333333333"), 1)]
        # Every part's money is in the daily series, to the 10^-10 unit.
        assert fetch_all(conn, "SELECT sum(cost) FROM marts.daily_series_by_billing_month") == [(Decimal("816.0000000000"),)]
        key = {"provider": "GpuCloud", "sub_account": "(none)", "service": "GPU", "phase": "unattributed"}
        movers = fetch_dicts(conn, (REPO / "sql" / "queries" / "anomaly_contributors.sql").read_text(),
                             {**key, "day": date(2026, 9, 2), "baseline_days": [], "baseline_count": 0})
        assert {(m["dimension"], m["value"]): m["actual"] for m in movers} == {
            ("resource", "gpu-t"): Decimal("149.3333333333"), ("sku", "SKU-P5"): Decimal("149.3333333333"),
            ("region", "(none)"): Decimal("149.3333333333")}
    finally:
        conn.close()


def test_a_twenty_minute_gap_is_missing_not_zero(runs):
    for interval, run in runs.items():
        # No GPU-minute inside the gap; the minutes either side are there (a 300 s sample covers 5 minutes).
        assert run["gap_rows"] == (0, 8, 8), interval
        assert run["minutes"]["gpu-t"] == 8 * (MINUTES - 20), interval
        assert run["minutes"]["gpu-inf"] == MINUTES, interval
        idle = next(r for r in run["split"] if r["resource"] == "ins-t" and r["phase"] == "idle")
        assert idle["gpu_seconds"] == 8 * (IDLE_END - WORK_END + 20) * 60  # neither busy nor a workload: idle money
        assert run["no_telemetry"] == 0


def test_busy_hours_and_utilization_agree_within_one_percent(runs):
    base = runs[10]
    for interval in (60, 300):
        for host in ("gpu-t", "gpu-inf"):
            assert runs[interval]["busy_hours"][host] == pytest.approx(base["busy_hours"][host], rel=0.01), (interval, host)
        assert runs[interval]["util_pct"] == pytest.approx(base["util_pct"], rel=0.01)
    assert 85 < base["util_pct"] < 89  # the load's true mean, about 87 %, not a fifth of it


def test_idle_runs_are_the_same_at_every_interval(runs):
    for interval, run in runs.items():
        runs_found = run["idle_runs"]
        assert [r["resource"] for r in runs_found] == [f"gpu-t/GPU-t{g}" for g in range(8)], interval
        for r in runs_found:
            assert r["wasted_cost"] == Decimal("13.000000")  # 6.5 h × 2.00
            assert json.loads(r["evidence"])["idle_minutes"] == IDLE_END - WORK_END


def test_the_checkpoint_counts_only_its_own_workloads_gpus(runs):
    for interval, run in runs.items():
        [f] = run["slow_disk"]
        evidence = json.loads(f["evidence"])
        # pt-t's 6 GPUs waited 10 minutes; ft-t's 2 GPUs on the same host kept working.
        assert (evidence["gpus"], evidence["workloads"], evidence["idle_share"]) == (6, "pt-t", 1.0), interval
        assert evidence["gpus_from"] == "the event's workload"
        assert f["wasted_cost"] == Decimal("2.000000")  # 6 GPUs × 10 min × 2.00 per GPU-hour


def test_overprovisioned_inference_is_the_same_at_every_interval(runs):
    base = runs[10]["inference"]
    assert len(base) == 1
    for interval in (60, 300):
        [f] = runs[interval]["inference"]
        assert f["subkind"] == base[0]["subkind"]
        assert float(f["avoidable_cost"]) == pytest.approx(float(base[0]["avoidable_cost"]), rel=0.01), interval
        assert json.loads(f["evidence"])["busy_gpu_hours"] == pytest.approx(json.loads(base[0]["evidence"])["busy_gpu_hours"], rel=0.01)


def test_a_cadence_that_changes_within_a_day_keeps_each_parts_own(tmp_path):
    """nvidia-smi at -l 60 until noon and -l 5 after, idle at 1 % all day, no gap anywhere. The day's
    median interval (5 s) cut each morning sample to 5 s of its 60: the morning read as one covered
    hour of twelve, and the 24-hour idle run (48.00) as a 13-hour one worth 26.00."""
    landing = tmp_path / "landing"
    (landing / "host=gpu-v").mkdir(parents=True)
    start = datetime(2026, 9, 1)

    def smi(first: int, last: int, step: int) -> str:
        return "\n".join([SMI_HEADER] + [f"{start + timedelta(seconds=s):%Y/%m/%d %H:%M:%S}.000, 0, GPU-v0, NVIDIA A100-SXM4-80GB, "
                                         "1 %, 100 MiB, 80.00 W" for s in range(first, last, step)]) + "\n"

    (landing / "host=gpu-v" / "morning.csv").write_text(smi(0, 43200, 60))
    (landing / "host=gpu-v" / "afternoon.csv").write_text(smi(43200, 86400, 5))
    (landing / "charges.csv").write_text(
        "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
        "ServiceName,ServiceCategory,ResourceId,ResourceName,x_GpuModel,x_GpuCount\n"
        "48.00,48.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-v,gpu-v,A100 80G,1\n")
    run_pipeline(landing, tmp_path / "w.duckdb")
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    covered = fetch_all(conn, """SELECT minute < TIMESTAMPTZ '2026-09-01 12:00:00+00', round(sum(coverage) / 60, 3)
                                 FROM core.gpu_minutes GROUP BY 1 ORDER BY 1""")
    assert covered == [(False, 12.0), (True, 12.0)]
    runs = fetch_all(conn, "SELECT period_start, period_end, wasted_cost FROM findings.unused_gpu WHERE subkind = 'idle_run'")
    assert runs == [(datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 9, 2, tzinfo=UTC), Decimal("48.0000000000"))]
