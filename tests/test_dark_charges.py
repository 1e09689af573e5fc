"""A GPU charge whose host reported no telemetry, but which workloads held: the finding counts only
the GPU-hours nobody held, as the attribution does (the held hours went to the workloads' phases).

Three 1-GPU charges of a day (24.00 USD, 1.00 an hour), no telemetry anywhere: gpu-free held by no
one (the whole 24.00 is the finding's), gpu-part held by a fine-tuning job for 18 hours (6.00), and
gpu-held held all day by an inference service (no finding: before, it was 'paid for but reported no
telemetry at all ... release it' at 24.00, while the attribution gave all 24.00 to inference)."""

from decimal import Decimal

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline

CHARGES = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
           "ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,x_GpuModel,x_GpuCount\n"
           + "".join(f"24.00,24.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-{h},gpu-{h},,H100,1\n"
                     for h in ("free", "part", "held")))
WORKLOADS = """workload_id,phase,host,gpu_count,started_at,ended_at
ft-1,finetuning,gpu-part,1,2026-09-01T00:00:00Z,2026-09-01T18:00:00Z
svc-1,inference,gpu-held,1,2026-08-31T00:00:00Z,
"""


def test_a_dark_charge_counts_only_the_hours_no_workload_held(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(CHARGES)
    (landing / "jobs.csv").write_text(WORKLOADS)
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        found = fetch_all(conn, """SELECT host, wasted_cost, json_extract(evidence, '$.held_gpu_hours')::DOUBLE, recommendation
                                   FROM findings.unused_gpu WHERE subkind = 'no_telemetry' ORDER BY host""")
        idle = dict(fetch_all(conn, """SELECT c.ResourceName, sum(a.amount_billing) FROM marts.cost_attribution AS a
                                       JOIN core.cost_lines AS c USING (x_ChargeId) WHERE a.phase = 'idle' GROUP BY ALL"""))
    finally:
        conn.close()
    assert [(host, wasted, held) for host, wasted, held, _ in found] == [
        ("gpu-free", Decimal("24.00"), 0.0), ("gpu-part", Decimal("6.00"), 18.0)]
    # The finding is the attribution's idle part of each charge.
    assert idle == {"gpu-free": Decimal("24.00"), "gpu-part": Decimal("6.00")}
    assert "no telemetry at all" in found[0][3]
    assert "workloads held 18.0 of its 24.0 GPU-hours" in found[1][3]
