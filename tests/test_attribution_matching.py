"""Which workloads hold a GPU charge's GPUs (marts.cost_attribution): those on a host the charge's
resource may be (its id's or its name's, read as host names), and those on another host that name
its resource id; a workload that is both counts once.

Charges (USD, FOCUS columns, no telemetry):
- i-aaa named gpu-a: 8 GPUs, 10:00-11:00, 80.00. Held by pt-host (on gpu-a, 4 GPUs), ft-rid (on
  node-17 but naming i-aaa, 2 GPUs) and inf-both (on gpu-a and naming i-aaa, 1 GPU): 40.00
  pre-training, 20.00 fine-tuning, 10.00 inference, the eighth GPU 10.00 idle. other-job (gpu-z,
  i-zzz) holds nothing of it.
- gpu-b.example.internal named gpu-b (one host both ways): 8 GPUs, 10:00-11:00, 16.00, pt-b on gpu-b
  with all 8 for half the hour: 8.00 pre-training, 8.00 idle (not counted twice over two names).
"""

from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import warehouse_from_files

CHARGES = (
    "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
    "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,x_GpuModel,x_GpuCount\n"
    "80.00,80.00,USD,Usage,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z,AWS,EC2,Compute,i-aaa,gpu-a,1,Hours,H100,8\n"
    "16.00,16.00,USD,Usage,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z,AWS,EC2,Compute,gpu-b.example.internal,gpu-b,1,Hours,H100,8\n")
WORKLOADS = """workload_id,phase,host,resource_id,gpu_count,started_at,ended_at
pt-host,pretraining,gpu-a,,4,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z
ft-rid,finetuning,node-17,i-aaa,2,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z
inf-both,inference,gpu-a,i-aaa,1,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z
other-job,pretraining,gpu-z,i-zzz,8,2026-09-01T10:00:00Z,2026-09-01T11:00:00Z
pt-b,pretraining,gpu-b,,8,2026-09-01T10:00:00Z,2026-09-01T10:30:00Z
"""


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    return warehouse_from_files(tmp_path_factory.mktemp("matching"), {"charges.csv": CHARGES, "jobs.csv": WORKLOADS},
                                reporting_currency="USD")


def test_workloads_hold_a_charge_by_its_hosts_or_its_resource_id_and_once_when_both(warehouse):
    conn = connect(warehouse, read_only=True)
    try:
        parts = fetch_all(conn, """SELECT c.ResourceName, a.phase, a.method, a.amount_billing, a.weight, a.total_weight,
                                          a.evidence->>'workloads'
                                   FROM marts.cost_attribution AS a JOIN core.cost_lines AS c USING (x_ChargeId)
                                   ORDER BY 1, 2""")
    finally:
        conn.close()
    assert parts == [
        ("gpu-a", "finetuning", "workload_overlap", Decimal("20.00"), 7200, 28800, "ft-rid"),
        ("gpu-a", "idle", "no_workload", Decimal("10.00"), 3600, 28800, None),
        ("gpu-a", "inference", "workload_overlap", Decimal("10.00"), 3600, 28800, "inf-both"),
        ("gpu-a", "pretraining", "workload_overlap", Decimal("40.00"), 14400, 28800, "pt-host"),
        ("gpu-b", "idle", "no_workload", Decimal("8.00"), 14400, 28800, None),
        ("gpu-b", "pretraining", "workload_overlap", Decimal("8.00"), 14400, 28800, "pt-b"),
    ]
