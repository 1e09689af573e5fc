"""GPU-rental invoices through the declarative mappings: English and Chinese headers."""

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa

from connectors.gpu_rental import GpuRentalConnector, MAPPINGS_DIR
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context

GENERIC = """Invoice ID,Account ID,Instance ID,Instance Name,Region,GPU Model,GPU Count,Billing Mode,Start Time,End Time,Hours,Unit Price (per GPU-hour),Amount,Currency,Project
INV-1,acc-9,ins-1,gpu-node-01,us-west,NVIDIA A100-SXM4-80GB,8,Monthly,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,720,1.25,7200.00,usd,llm
INV-1,acc-9,ins-2,gpu-node-02,us-west,NVIDIA H100 80GB HBM3,1,On-Demand,2026-09-03T00:00:00Z,2026-09-03T10:00:00Z,10,2.49,24.90,USD,llm
INV-1,acc-9,ins-3,gpu-node-03,us-west,L40S,2,barter,2026-09-03T00:00:00Z,2026-09-03T10:00:00Z,10,1.00,20.00,USD,llm
"""
CHINESE = """账单编号,账号ID,实例ID,实例名称,地域,GPU型号,GPU数量,计费方式,开始时间,结束时间,时长(小时),单价(元/卡时),金额,币种
B-1,u-7,ins-a,gpu-a100-01,华东1,A100 80G,8,包月,2026-09-01 08:00:00,2026-09-02 08:00:00,24,1.85,355.20,CNY
B-1,u-7,ins-r,gpu-rtx6000-01,华东1,RTX 6000 Ada,1,按量计费,2026-09-01 08:00:00,2026-09-01 09:00:00,1,0.58,0.58,CNY
B-1,u-7,ins-x,gpu-x,华东1,A100 80G,1,包月,昨天,2026-09-01 09:00:00,1,1.85,1.85,CNY
"""


def read(mapping, text, tmp_path, name):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    connector = GpuRentalConnector.from_file(MAPPINGS_DIR / mapping)
    assert detect(path).connector.name == connector.name
    ctx = read_context(name)
    return pa.Table.from_batches(list(connector.read(path, ctx)), schema=COST_LINE).to_pylist(), ctx


def test_english_invoice_becomes_focus_charges(tmp_path):
    rows, ctx = read("gpu_rental_generic.yaml", GENERIC, tmp_path, "invoice.csv")
    monthly, on_demand = rows
    assert (monthly["BilledCost"], monthly["BillingCurrency"], monthly["x_GpuModel"], monthly["x_GpuCount"]) == (
        Decimal("7200.000000"), "USD", "A100 80G", 8)
    assert (monthly["PricingCategory"], monthly["ChargeFrequency"], monthly["ConsumedQuantity"]) == ("Committed", "Recurring", Decimal("5760"))
    assert monthly["ListCost"] == Decimal("7200.000000")  # 5,760 card-hours × 1.25
    assert (on_demand["PricingCategory"], on_demand["x_GpuModel"], on_demand["ResourceName"]) == ("Standard", "H100", "gpu-node-02")
    assert monthly["x_ExtraColumns"] == '{"Project":"llm"}'
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(3, "billing mode 'barter' is not in the mapping")]


def test_chinese_invoice_in_china_standard_time(tmp_path):
    rows, ctx = read("gpu_rental_cn.yaml", CHINESE, tmp_path, "账单.csv")
    a100, rtx = rows
    assert a100["ChargePeriodStart"] == datetime(2026, 9, 1, tzinfo=UTC)  # 08:00 in Shanghai
    assert (a100["BilledCost"], a100["PricingCategory"], a100["ProviderName"], a100["x_GpuCount"]) == (
        Decimal("355.200000"), "Committed", "GPU 云", 8)
    assert (rtx["BilledCost"], rtx["PricingCategory"], rtx["x_GpuModel"]) == (Decimal("0.580000"), "Standard", "RTX 6000 Ada")
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(3, "start '昨天' is not a time")]


def test_currencies_must_be_iso_codes_and_months_are_billing_periods(tmp_path):
    bad = GENERIC.replace(",usd,llm", ",[/],llm")
    rows, ctx = read("gpu_rental_generic.yaml", bad, tmp_path, "invoice.csv")
    assert [q["reason"] for q in ctx.quarantined][:1] == ["currency '[/]' is not an ISO 4217 code"]
    rows, _ = read("gpu_rental_cn.yaml", CHINESE, tmp_path, "账单.csv")
    # 2026-09-01 08:00 in Shanghai opens September there: the period starts at 2026-08-31 16:00 UTC.
    assert rows[0]["BillingPeriodStart"] == datetime(2026, 8, 31, 16, tzinfo=UTC)
    assert rows[0]["BillingPeriodEnd"] == datetime(2026, 9, 30, 16, tzinfo=UTC)


def test_a_gbk_encoded_invoice_reads_with_its_mapping(tmp_path):
    import yaml

    mapping = yaml.safe_load((MAPPINGS_DIR / "gpu_rental_cn.yaml").read_text(encoding="utf-8"))
    mapping["encoding"] = "gbk"  # many Chinese consoles export GBK
    path = tmp_path / "gbk.csv"
    path.write_bytes(CHINESE.encode("gbk"))
    ctx = read_context("gbk.csv")
    rows = pa.Table.from_batches(list(GpuRentalConnector(mapping).read(path, ctx)), schema=COST_LINE).to_pylist()
    assert [r["BilledCost"] for r in rows] == [Decimal("355.200000"), Decimal("0.580000")]
