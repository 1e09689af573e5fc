"""GPU identity on native FOCUS exports: SkuPriceDetails, then instance types through instance_gpus.csv;
GPU spend reaches the workload's phase; a GPU charge nobody can identify is named in the run summary."""

import csv
import json
from decimal import Decimal

import polars as pl
import pyarrow as pa
from rich.console import Console

from connectors.focus import FocusConnector
from pipelines.cli.summary import print_summary, summary_dict, unidentified_gpu_line
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import read_context, run_pipeline, sample

HOUR = {"ChargePeriodStart": "2026-09-01T00:00:00Z", "ChargePeriodEnd": "2026-09-01T01:00:00Z"}
COMMON = {"BillingAccountId": "acct-1", "BillingAccountName": "ml", "BillingCurrency": "USD",
          "BillingPeriodStart": "2026-09-01T00:00:00Z", "BillingPeriodEnd": "2026-10-01T00:00:00Z",
          "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based", "PricingCategory": "Standard",
          "ServiceCategory": "Compute", "InvoiceIssuerName": "Cloud", "PublisherName": "Cloud",
          "ConsumedQuantity": "1", "ConsumedUnit": "Hours", "PricingQuantity": "1", "PricingUnit": "Hours", **HOUR}
# (ResourceName, expected model, expected count, the columns that say it)
ROWS = [
    ("gpu-p5", "H100-80GB", 8, {"ProviderName": "AWS", "ServiceName": "Amazon Elastic Compute Cloud", "SkuId": "AAAA1111",
                           "SkuPriceId": "AAAA1111.JRTC", "SkuPriceDetails": json.dumps({"GpuCount": 8, "InstanceType": "p5.48xlarge", "CoreCount": 192}),
                           "BilledCost": "55.04"}),
    ("gpu-nd", "A100-40GB", 8, {"ProviderName": "Microsoft", "ServiceName": "Virtual Machines", "SkuId": "Standard_ND96asr_v4",
                               "BilledCost": "27.197"}),
    ("gpu-a2", "A100-40GB", 8, {"ProviderName": "Google Cloud", "ServiceName": "Compute Engine", "ResourceType": "a2-highgpu-8g",
                               "SkuId": "6E4F-2C8A-B1D3", "BilledCost": "29.39"}),
    ("gpu-oci", "H100-80GB", 8, {"ProviderName": "Oracle", "ServiceName": "COMPUTE", "SkuId": "BM.GPU.H100.8", "BilledCost": "80.00"}),
    ("gpu-meter", "A100-80GB", 8, {"ProviderName": "Microsoft", "ServiceName": "Virtual Machines", "SkuId": "DZH318Z0BQ4L",
                                  "x_SkuMeterName": "ND96amsr A100 v4", "BilledCost": "32.77"}),
    ("gpu-details", "A100-80GB", 1, {"ProviderName": "Microsoft", "ServiceName": "Virtual Machines", "SkuId": "DZH318Z0BQ4M",
                                    "x_SkuDetails": json.dumps({"ServiceType": "Standard_NC24ads_A100_v4", "VCPUs": 24}), "BilledCost": "3.67"}),
    ("gpu-usage-type", "A10G", 8, {"ProviderName": "AWS", "ServiceName": "Amazon Elastic Compute Cloud", "SkuId": "BBBB2222",
                                   "x_UsageType": "USE1-BoxUsage:g5.48xlarge", "BilledCost": "16.29"}),
    ("gpu-l40s", "L40S", 4, {"ProviderName": "AWS", "ServiceName": "Amazon Elastic Compute Cloud", "SkuId": "CCCC3333",
                             "SkuPriceId": "CCCC3333.X", "SkuPriceDetails": json.dumps({"InstanceType": "g6e.12xlarge"}), "BilledCost": "10.49"}),
    ("gpu-type-key", "H100-80GB", 2, {"ProviderName": "Google Cloud", "ServiceName": "Compute Engine", "SkuId": "77AA-1",
                                 "SkuPriceId": "77AA-1-p", "SkuPriceDetails": json.dumps({"GpuCount": 2, "x_GpuType": "nvidia-h100-80gb"}),
                                 "BilledCost": "22.00"}),
    # A GPU SKU billed per GPU-time: 8 GPU-hours in a one-hour charge are 8 GPUs.
    ("gpu-gcp-sku", "A100-40GB", 8, {"ProviderName": "Google Cloud", "ServiceName": "Compute Engine", "SkuId": "039F-9A4B-2FA1",
                                    "ChargeDescription": "Nvidia Tesla A100 GPU running in Americas", "ConsumedQuantity": "28800",
                                    "ConsumedUnit": "seconds", "PricingQuantity": "8", "PricingUnit": "hour", "BilledCost": "23.47"}),
    ("cpu-only", None, None, {"ProviderName": "AWS", "ServiceName": "Amazon Elastic Compute Cloud", "SkuId": "DDDD4444",
                              "ChargeDescription": "$0.096 per On Demand Linux m5.large Instance Hour", "BilledCost": "0.096"}),
    ("gpu-unknown", None, None, {"ProviderName": "AWS", "ServiceName": "Amazon Elastic Compute Cloud", "SkuId": "EEEE5555",
                                 "ChargeDescription": "$99.00 per On Demand Linux p7.48xlarge Instance Hour", "BilledCost": "99.00"}),
]
COLUMNS = sorted({*COMMON, "ResourceId", "ResourceName", "ResourceType", "ChargeDescription", "SkuId", "SkuPriceId",
                  "SkuPriceDetails", "EffectiveCost", "ListCost", "Tags", "ProviderName", "ServiceName", "BilledCost",
                  "x_SkuMeterName", "x_SkuDetails", "x_UsageType"})


def write_export(path):
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        for name, _, _, row in ROWS:
            writer.writerow({**COMMON, "ResourceId": f"id-{name}", "ResourceName": name, "EffectiveCost": row["BilledCost"],
                             "ListCost": row["BilledCost"], **row})
    return path


def test_native_focus_1_2_export_identifies_every_gpu_row(tmp_path):
    path = write_export(tmp_path / "focus12.csv")
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(FocusConnector().read(path, ctx)))
    assert table.num_rows == len(ROWS) and not ctx.quarantined
    got = {r["ResourceName"]: (r["x_GpuModel"], r["x_GpuCount"]) for r in table.to_pylist()}
    assert got == {name: (model, count) for name, model, count, _ in ROWS}


def test_explicit_x_gpu_columns_still_win(tmp_path):
    path = tmp_path / "own.csv"
    path.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,SkuId,x_GpuModel,x_GpuCount\n"
                    "1.00,1.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z,p5.48xlarge,H100,4\n"
                    "1.00,1.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z,p5.48xlarge,,\n")
    table = pa.Table.from_batches(list(FocusConnector().read(path, read_context(path.name))))
    assert table["x_GpuCount"].to_pylist() == [4, 8] and table["x_GpuModel"].to_pylist() == ["H100-80GB", "H100-80GB"]


def test_foundation_sample_gpu_instances_are_identified():
    # The FinOps Foundation's FOCUS 1.0 sample has ten GPU instance-hours: 8 × g5.4xlarge, 2 × g3.4xlarge.
    path = sample("billing/focus10_sample_multicloud_1000.csv")
    frame = pl.from_arrow(pa.Table.from_batches(list(FocusConnector().read(path, read_context(path.name)))))
    gpus = frame.filter(pl.col("x_GpuCount").is_not_null())
    assert sorted(gpus.group_by("x_GpuModel", "x_GpuCount").len().rows()) == [("A10G", 1, 8), ("M60", 1, 2)]
    assert gpus["ChargeDescription"].str.contains(r"g5\.4xlarge|g3\.4xlarge").all()


def test_gpu_spend_reaches_the_workload_phase_and_unknown_gpus_are_named(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    write_export(landing / "focus12.csv")
    (landing / "jobs.csv").write_text(
        "workload_id,phase,host,gpu_count,started_at,ended_at\n"
        "pt-1,pretraining,gpu-p5,8,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z\n"
        "ft-1,finetuning,gpu-nd,8,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z\n"
        "inf-1,inference,gpu-gcp-sku,8,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z\n")
    warehouse = tmp_path / "wh.duckdb"
    run_pipeline(landing, warehouse)
    conn = connect(warehouse, read_only=True)
    try:
        parts = fetch_all(conn, """SELECT c.ResourceName, a.phase, a.amount_billing FROM marts.cost_attribution a
                                   JOIN core.cost_lines c USING (x_ChargeId)
                                   WHERE c.ResourceName IN ('gpu-p5', 'gpu-nd', 'gpu-gcp-sku') ORDER BY 1, 2""")
    finally:
        conn.close()
    assert parts == [("gpu-gcp-sku", "inference", Decimal("23.47")), ("gpu-nd", "finetuning", Decimal("27.197")),
                     ("gpu-p5", "pretraining", Decimal("55.04"))]

    summary = summary_dict(warehouse)
    assert [(r["name"], r["charges"]) for r in summary["unidentified_gpus"]] == [("p7.48xlarge", 1)]
    line = unidentified_gpu_line(summary["unidentified_gpus"])
    assert line == "1 GPU charge with unidentified GPUs: p7.48xlarge (1); map them in models/data/instance_gpus.csv"
    console = Console(record=True, width=200)
    print_summary(console, summary, warehouse, 1.0)
    assert "unidentified GPUs: 1 GPU charge with unidentified GPUs: p7.48xlarge" in console.export_text()


def test_azure_meter_name_and_oci_gpu_sku_give_gpus():
    frame = pl.DataFrame({"meter": ["ND96amsr A100 v4", "NC6s v3", "P4 LRS Disk"]})
    from models.gpus import AZURE_METER_SIZE, instance_gpus_expr
    size = pl.concat_str(pl.lit("Standard_"), pl.col("meter").str.extract(AZURE_METER_SIZE, 1).str.replace_all(" ", "_"))
    got = frame.select(instance_gpus_expr(size).alias("g")).unnest("g")
    assert got.select("model", "count").rows() == [("A100-80GB", 8), ("V100-16GB", 1), (None, None)]
