"""An hour of a GPU is priced at what was paid for it, once (marts.gpu_hour_prices and the findings
that read it), on small hand-built bills whose answers are worked out by hand:

  gpu-a    (FOCUS, 2 GPUs, 1-4 Sep)  288.00 usage (2.00/GPU-h), a -36.00 credit over the same 72 h
           (-0.25) and a -12.00 negative usage line on 2 Sep (-0.25): paid 1.75, 1.50, 1.75 a GPU-hour.
           GPU 0 idles all 72 h; pt-a writes a 10-minute checkpoint on 2 Sep.
  inf-1    (FOCUS, 1 GPU, 1-3 Sep)   48.00 usage (1.00) and a -24.00 credit: paid 0.50 a GPU-hour.
           Serves inference at 2 % by night and 70 % by day.
  gpu-x    (FOCUS, 2 GPUs, 1 Sep)    100.00 usage and a -20.00 credit, no telemetry: 80.00 paid.
  i-0gpu1  (AWS CUR, p4d = 8 GPUs)   48 hours covered by a savings plan (32.7726 on demand, 20.00
           effective: 2.50 a GPU-hour), each with its zero-cost negation, and a -100.00 refund
           (a correction: not the hours' rate). GPU 0 busy on 1 Sep, idle on 2 Sep.
"""

import csv
import io
import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import run_pipeline, smi_minutes

T0 = datetime(2026, 9, 1, tzinfo=UTC)
CENT = Decimal("0.01")
FOCUS = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
         "ServiceName,ServiceCategory,ResourceId,ResourceName,x_GpuCount\n"
         "288.00,288.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-04T00:00:00Z,GpuCloud,GPU,Compute,ins-a,gpu-a,2\n"
         "-36.00,-36.00,USD,Credit,2026-09-01T00:00:00Z,2026-09-04T00:00:00Z,GpuCloud,GPU,Compute,ins-a,gpu-a,2\n"
         "-12.00,-12.00,USD,Usage,2026-09-02T00:00:00Z,2026-09-03T00:00:00Z,GpuCloud,GPU,Compute,ins-a,gpu-a,2\n"
         "48.00,48.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-03T00:00:00Z,GpuCloud,GPU,Compute,inf-1,inf-1,1\n"
         "-24.00,-24.00,USD,Credit,2026-09-01T00:00:00Z,2026-09-03T00:00:00Z,GpuCloud,GPU,Compute,inf-1,inf-1,1\n"
         "100.00,100.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-x,gpu-x,2\n"
         "-20.00,-20.00,USD,Credit,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-x,gpu-x,2\n")
JOBS = """workload_id,phase,host,gpu_count,started_at,ended_at
pt-a,pretraining,gpu-a,2,2026-09-01T00:00:00Z,2026-09-04T00:00:00Z
svc-1,inference,inf-1,1,2026-09-01T00:00:00Z,
"""
CHECKPOINT = json.dumps({"workload_id": "pt-a", "host": "gpu-a", "started_at": "2026-09-02T10:00:00Z",
                         "ended_at": "2026-09-02T10:10:00Z", "bytes": 300_000_000_000, "path": "/ckpt/pt-a/1",
                         "storage_class": "cloud_disk"}) + "\n"
CUR_COLUMNS = ["identity/LineItemId", "bill/PayerAccountId", "bill/BillingPeriodStartDate", "bill/BillingPeriodEndDate",
               "lineItem/UsageAccountId", "lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UsageEndDate",
               "lineItem/ProductCode", "lineItem/UsageType", "lineItem/ResourceId", "lineItem/UsageAmount",
               "lineItem/CurrencyCode", "lineItem/UnblendedCost", "product/instanceType", "savingsPlan/SavingsPlanARN",
               "savingsPlan/SavingsPlanEffectiveCost"]
SP = "arn:aws:savingsplans::111:savingsplan/sp-1"


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def cur() -> str:
    rows = []

    def add(kind, start, end, cost, **more):
        rows.append({c: "" for c in CUR_COLUMNS} | {
            "identity/LineItemId": f"id{len(rows)}", "bill/PayerAccountId": "111", "lineItem/UsageAccountId": "222",
            "bill/BillingPeriodStartDate": "2026-09-01T00:00:00Z", "bill/BillingPeriodEndDate": "2026-10-01T00:00:00Z",
            "lineItem/ProductCode": "AmazonEC2", "lineItem/CurrencyCode": "USD", "lineItem/LineItemType": kind,
            "lineItem/UsageStartDate": stamp(start), "lineItem/UsageEndDate": stamp(end), "lineItem/UnblendedCost": cost,
            "lineItem/UsageType": "BoxUsage:p4d.24xlarge", "lineItem/ResourceId": "i-0gpu1",
            "product/instanceType": "p4d.24xlarge"} | more)

    for h in range(48):
        start, end = T0 + timedelta(hours=h), T0 + timedelta(hours=h + 1)
        add("SavingsPlanCoveredUsage", start, end, "32.7726", **{"lineItem/UsageAmount": "1", "savingsPlan/SavingsPlanARN": SP,
                                                                  "savingsPlan/SavingsPlanEffectiveCost": "20.0"})
        add("SavingsPlanNegation", start, end, "-32.7726", **{"lineItem/UsageAmount": "1", "savingsPlan/SavingsPlanARN": SP})
    add("Refund", T0, T0 + timedelta(hours=48), "-100")
    out = io.StringIO()
    writer = csv.DictWriter(out, CUR_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def smi(hours: int, name: str, util) -> str:
    """One GPU (uuid GPU-<name>0) for `hours`, at util(minute) percent."""
    return smi_minutes(T0, hours * 60, 1, lambda minute, _: util(minute), f"GPU-{name}")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_hour_prices")
    landing = root / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(FOCUS)
    (landing / "cur.csv").write_text(cur())
    (landing / "jobs.csv").write_text(JOBS)
    (landing / "checkpoints.jsonl").write_text(CHECKPOINT)
    (landing / "gpu-a.csv").write_text(smi(72, "a", lambda m: 1))
    (landing / "inf-1.csv").write_text(smi(48, "inf", lambda m: 2 if (m // 60) % 24 < 12 else 70))
    (landing / "i-0gpu1.csv").write_text(smi(48, "p", lambda m: 90 if m < 1440 else 1))
    outcome = run_pipeline(landing, root / "wh.duckdb", as_of=date(2026, 9, 4), reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    conn = connect(root / "wh.duckdb", read_only=True)
    yield conn
    conn.close()


def test_credits_and_negations_are_netted_into_the_price_never_kept_as_prices(warehouse):
    prices = fetch_all(warehouse, """SELECT strftime(period_start, '%d %H'), strftime(period_end, '%d %H'), gpu_count,
                                            usage_price_per_gpu_hour, price_per_gpu_hour, len(adjustment_ids)
                                     FROM marts.gpu_hour_prices WHERE host = 'gpu-a' ORDER BY period_start""")
    assert prices == [("01 00", "02 00", 2, Decimal("2.00"), Decimal("1.75"), 1),
                      ("02 00", "03 00", 2, Decimal("2.00"), Decimal("1.50"), 2),
                      ("03 00", "04 00", 2, Decimal("2.00"), Decimal("1.75"), 1)]
    assert fetch_all(warehouse, "SELECT DISTINCT price_per_gpu_hour FROM marts.gpu_hour_prices WHERE host = 'inf-1'") == [
        (Decimal("0.50"),)]
    # The savings plan's negations cost nothing and the refund is a correction: 2.50 every hour, no zero price.
    assert fetch_all(warehouse, """SELECT count(*), min(price_per_gpu_hour), max(price_per_gpu_hour)
                                   FROM marts.gpu_hour_prices WHERE host = 'i-0gpu1'""") == [(48, Decimal("2.50"), Decimal("2.50"))]
    # Never a price below zero, and never two rows of one resource for the same instant.
    assert fetch_all(warehouse, """SELECT count(*) FILTER (WHERE price_per_gpu_hour < 0),
                                          (SELECT count(*) FROM marts.gpu_hour_prices a JOIN marts.gpu_hour_prices b
                                             ON a.resource_id = b.resource_id AND a.period_start < b.period_end
                                            AND b.period_start < a.period_end AND a.period_start <> b.period_start)
                                   FROM marts.gpu_hour_prices""") == [(0, 0)]


def test_an_idle_run_is_priced_at_what_each_of_its_hours_was_paid(warehouse):
    runs = fetch_dicts(warehouse, "SELECT host, wasted_cost, evidence FROM findings.unused_gpu WHERE subkind = 'idle_run' ORDER BY host")
    found = {r["host"]: (r["wasted_cost"].quantize(CENT), json.loads(r["evidence"])["idle_gpu_hours"]) for r in runs}
    # gpu-a: 24 h × 1.75 + 24 h × 1.50 + 24 h × 1.75 = 120.00 (the mean of the charge and its credits, 0.50, gave 36.00),
    # less the 10 minutes its job's checkpoint stall holds (findings.slow_disk_idle counts them): 71.83 h at the
    # run's mean price, 119.72.
    # i-0gpu1: 24 h × 2.50 = 60.00 (the mean of 24 hours at 2.50, 24 at 0 and the refund gave 29.26).
    assert found == {"gpu-a": (Decimal("119.72"), 71.83), "i-0gpu1": (Decimal("60.00"), 24.0)}


def test_a_charge_without_telemetry_is_one_finding_at_what_was_paid(warehouse):
    dark = fetch_all(warehouse, "SELECT resource, wasted_cost FROM findings.unused_gpu WHERE subkind = 'no_telemetry'")
    # 100.00 less its -20.00 credit; the credit is no GPU paid for and no finding of its own.
    assert dark == [("ins-x", Decimal("80.00"))]


def test_overprovisioned_inference_counts_each_hour_once_at_the_net_price(warehouse):
    [f] = fetch_dicts(warehouse, "SELECT * FROM findings.overprovisioned_inference WHERE host = 'inf-1'")
    evidence = json.loads(f["evidence"])
    # 48 hours of 1 GPU at 0.50 (1.00 less the credit), not 96 (the charge's row and the credit's).
    assert (evidence["hours"], evidence["paid_gpu_hours"], evidence["busy_gpu_hours"], evidence["valley_hours"]) == (48, 48, 17.28, 24)
    assert (f["paid_cost"], f["wasted_cost"], f["avoidable_cost"], f["subkind"]) == (
        Decimal("24.00"), Decimal("12.00"), Decimal("12.00"), "no_gpu_mode")
    # The cheapest catalog card costs more than the 0.50 paid: moving the valleys to it saves nothing.
    assert Decimal(str(evidence["cheaper_card_saving"])) == 0


def test_a_checkpoint_is_priced_at_the_hour_it_was_written_net_of_credits(warehouse):
    [f] = fetch_dicts(warehouse, "SELECT wasted_cost, avoidable_cost, evidence FROM findings.slow_disk_idle")
    # 2 GPUs × 10 min, all waiting, on 2 Sep at 1.50: 0.50 (the gross 2.00 gave 0.67); 100 s of it on a fast disk.
    assert json.loads(f["evidence"])["price_per_gpu_hour"] == 1.5
    assert (f["wasted_cost"].quantize(CENT), f["avoidable_cost"].quantize(CENT)) == (Decimal("0.50"), Decimal("0.42"))
