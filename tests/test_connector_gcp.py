"""Google Cloud billing export: usage lines plus one Credit line per applied credit."""

import csv
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.base import money_sum
from connectors.gcp_billing import GcpBillingConnector, parse_credits
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context, sample


def test_gcp_export_loads_with_credits_as_their_own_rows_and_reconciles():
    path = sample("billing/gcp_bigquery_export_flat_2020-11_koku.csv")
    assert detect(path).connector.name == "gcp_billing"
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(GcpBillingConnector().read(path, ctx)), schema=COST_LINE)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    credits = [c for r in rows for c in parse_credits(r["credits"])]
    assert (len(rows), len(credits)) == (25, 8) and not ctx.quarantined
    assert table.num_rows == 25 + 8
    cost = sum(Decimal(r["cost"]) for r in rows)
    credited = sum(Decimal(c["amount"]) for c in credits)
    assert pc.sum(table["BilledCost"]).as_py() == (cost + credited).quantize(Decimal("0.000001")) == Decimal("0")  # a free trial
    by_category = {k.as_py(): v.as_py() for k, v in zip(*pc.value_counts(table["ChargeCategory"]).flatten())}
    assert by_category == {"Usage": 25, "Credit": 8}
    assert table["BillingPeriodStart"][0].as_py().isoformat() == "2020-11-01T00:00:00+00:00"  # invoice.month 202011
    assert set(zip(table["ServiceName"].to_pylist(), table["ServiceCategory"].to_pylist())) == {
        ("BigQuery", "Databases"), ("Security Command Center", "Security"), ("Stackdriver Logging", "Other")}  # an old name


def test_credits_written_as_json_or_python_lists():
    assert parse_credits('[{"name": "A", "amount": -1.5, "type": "SUD"}]') == [{"name": "A", "amount": "-1.5", "type": "SUD"}]
    assert parse_credits("[{'name': 'B', 'amount': -2, 'full_name': None, 'type': 'PROMOTION'}]") == [
        {"name": "B", "amount": "-2", "type": "PROMOTION"}]
    assert parse_credits("[]") == [] and parse_credits(None) == []


def test_the_same_export_as_json_lines(tmp_path):
    import ast
    import json

    csv_path = sample("billing/gcp_bigquery_export_flat_2020-11_koku.csv")
    lines = []
    with open(csv_path, newline="") as fh:
        for r in csv.DictReader(fh):
            nested: dict = {}
            for name, value in r.items():
                if name in ("credits", "labels", "project.labels", "system_labels"):
                    value = ast.literal_eval(value) if value else []
                target = nested
                *parents, leaf = name.split(".")
                for p in parents:
                    target = target.setdefault(p, {})
                target[leaf] = value if value != "" else None
            lines.append(json.dumps(nested))
    path = tmp_path / "export.json"
    path.write_text("\n".join(lines) + "\n")
    assert detect(path).connector.name == "gcp_billing"
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(GcpBillingConnector().read(path, ctx)), schema=COST_LINE)
    assert table.num_rows == 33 and not ctx.quarantined
    assert pc.sum(table["BilledCost"]).as_py() == Decimal("0")


def test_gpu_skus_give_model_and_count(tmp_path):
    header = "billing_account_id,service.description,sku.id,sku.description,usage_start_time,usage_end_time,cost,currency,usage.amount,usage.unit,credits,invoice.month\n"
    path = tmp_path / "gpu.csv"
    path.write_text(header + "A-1,Compute Engine,9E4A,Nvidia Tesla A100 GPU running in Americas,"
                    "2026-09-01 00:00:00+00:00,2026-09-01 01:00:00+00:00,11.76,USD,28800,seconds,[],202609\n")
    row = pa.Table.from_batches(list(GcpBillingConnector().read(path, read_context("gpu.csv"))), schema=COST_LINE).to_pylist()[0]
    assert (row["x_GpuModel"], row["x_GpuCount"]) == ("A100-40GB", 8)  # 8 GPU-hours in one hour


def read_gcp(path):
    ctx = read_context(path.name)
    return pa.Table.from_batches(list(GcpBillingConnector().read(path, ctx)), schema=COST_LINE), ctx


def test_the_sample_carries_consumed_quantity_labels_and_no_resource():
    path = sample("billing/gcp_bigquery_export_flat_2020-11_koku.csv")
    table, ctx = read_gcp(path)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    usage = [r for r in table.to_pylist() if r["ChargeCategory"] == "Usage"]
    credits = [r for r in table.to_pylist() if r["ChargeCategory"] == "Credit"]
    assert sum(r["ConsumedQuantity"] for r in usage) == sum(Decimal(r["usage.amount"]) for r in rows) == Decimal("2161915377483")
    assert [r["ConsumedUnit"] for r in usage] == [r["usage.unit"] for r in rows]
    assert {r["ConsumedQuantity"] for r in credits} == {None} and {r["ConsumedUnit"] for r in credits} == {None}
    assert {r["Tags"] for r in usage} == {None, '{"goog-resource-type":"bigquery_resource"}',
                                         '{"goog-resource-type":"bigquery_dataset"}', '{"goog-resource-type":"bigquery_project"}'}
    assert sum(r["Tags"] is not None for r in usage) == 10
    # The standard export has no resource columns: no resource, rather than a guess.
    assert set(table["ResourceId"].to_pylist()) == set(table["ResourceName"].to_pylist()) == {None}
    assert not ctx.warnings


GCP_HEADER = ["billing_account_id", "service.description", "sku.id", "sku.description", "usage_start_time", "usage_end_time",
              "project.id", "project.labels", "labels", "system_labels", "resource.name", "resource.global_name", "cost",
              "currency", "usage.amount", "usage.unit", "usage.amount_in_pricing_units", "usage.pricing_unit", "credits",
              "invoice.month", "cost_type"]
VM = "//compute.googleapis.com/projects/train-prod/zones/us-central1-a/instances/1234567890"


def gcp_rows() -> list[dict]:
    base = {"billing_account_id": "A-1", "service.description": "Compute Engine", "usage_start_time": "2026-09-01 00:00:00+00:00",
            "usage_end_time": "2026-09-01 01:00:00+00:00", "project.id": "train-prod", "currency": "USD",
            "invoice.month": "202609", "credits": "[]", "project.labels": "[]", "labels": "[]", "system_labels": "[]"}
    return [
        {**base, "sku.id": "9E4A", "sku.description": "Nvidia Tesla A100 GPU running in Americas", "cost": "11.76",
         "usage.amount": "28800", "usage.unit": "seconds", "usage.amount_in_pricing_units": "8", "usage.pricing_unit": "hour",
         "cost_type": "regular", "resource.name": "trainer-0", "resource.global_name": VM,
         "project.labels": "[{'key': 'team', 'value': 'ml-platform'}, {'key': 'env', 'value': 'prod'}]",
         "labels": "[{'key': 'team', 'value': 'ml-research'}, {'key': 'phase', 'value': 'pretraining'}]",
         "system_labels": "[{'key': 'compute.googleapis.com/machine_spec', 'value': 'a2-highgpu-8g'}]",
         "credits": "[{'name': 'Committed use discount: A100', 'amount': -4.5, 'full_name': None, 'type': 'COMMITTED_USAGE_DISCOUNT'}]"},
        {**base, "sku.id": "TAX1", "sku.description": "Tax", "cost": "1.23", "usage.amount": "0", "usage.unit": "",
         "cost_type": "tax"},
        {**base, "sku.id": "ADJ1", "sku.description": "Billing adjustment", "cost": "-2.5", "cost_type": "adjustment"},
        {**base, "sku.id": "RND1", "sku.description": "Rounding error", "cost": "0.000001", "cost_type": "rounding_error"},
        {**base, "sku.id": "CPU1", "sku.description": "N1 Predefined Instance Core running in Americas", "cost": "0.5",
         "usage.amount": "3600", "usage.unit": "seconds", "cost_type": "REGULAR"},
    ]


def as_json_lines(rows: list[dict]) -> str:
    import ast
    import json

    lines = []
    for r in rows:
        nested: dict = {}
        for name, value in r.items():
            if name in ("credits", "labels", "project.labels", "system_labels"):
                value = ast.literal_eval(value) if value else []
            target = nested
            *parents, leaf = name.split(".")
            for p in parents:
                target = target.setdefault(p, {})
            target[leaf] = value if value != "" else None
        lines.append(json.dumps(nested))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("form", ["csv", "jsonl"])
def test_cost_types_quantities_labels_and_resources(tmp_path, form):
    rows = gcp_rows()
    path = tmp_path / f"export.{form}"
    if form == "csv":
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=GCP_HEADER)
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text(as_json_lines(rows))
    assert detect(path).connector.name == "gcp_billing"
    table, ctx = read_gcp(path)
    assert not ctx.quarantined and not ctx.warnings
    assert pc.sum(table["BilledCost"]).as_py() == Decimal("6.490001") == pc.sum(table["EffectiveCost"]).as_py()
    gpu, tax, adjustment, rounding, cpu, credit = table.to_pylist()
    assert [r["ChargeCategory"] for r in (gpu, tax, adjustment, rounding, cpu, credit)] == [
        "Usage", "Tax", "Adjustment", "Adjustment", "Usage", "Credit"]
    assert [r["BilledCost"] for r in (tax, adjustment, rounding)] == [Decimal("1.230000"), Decimal("-2.500000"), Decimal("0.000001")]
    assert (gpu["ConsumedQuantity"], gpu["ConsumedUnit"], gpu["PricingQuantity"], gpu["PricingUnit"]) == (
        Decimal("28800.0000000000"), "seconds", Decimal("8.0000000000"), "hour")
    assert (cpu["ConsumedQuantity"], cpu["ConsumedUnit"]) == (Decimal("3600.0000000000"), "seconds")
    for row in (tax, adjustment, rounding, credit):  # only usage consumes anything
        assert (row["ConsumedQuantity"], row["ConsumedUnit"], row["PricingQuantity"]) == (None, None, None)
    assert (tax["PricingCategory"], gpu["PricingCategory"]) == (None, "Standard")
    # Project labels, then system labels, then the resource's own: the resource's team wins.
    assert gpu["Tags"] == ('{"team":"ml-research","env":"prod","compute.googleapis.com/machine_spec":"a2-highgpu-8g",'
                           '"phase":"pretraining"}')
    assert credit["Tags"] == gpu["Tags"] and tax["Tags"] is None
    assert (gpu["ResourceId"], gpu["ResourceName"]) == (VM, "trainer-0")
    assert (credit["ResourceId"], credit["ResourceName"]) == (VM, "trainer-0")
    assert (tax["ResourceId"], tax["ResourceName"]) == (None, None)


def test_unreadable_labels_load_the_line_without_tags_and_warn(tmp_path):
    rows = gcp_rows()[4:]
    rows[0]["labels"] = "[{'key': 'team'"
    path = tmp_path / "bad_labels.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=GCP_HEADER)
        writer.writeheader()
        writer.writerows(rows)
    table, ctx = read_gcp(path)
    (row,) = table.to_pylist()
    assert (row["BilledCost"], row["Tags"], ctx.quarantined) == (Decimal("0.500000"), None, [])
    assert ctx.warnings == ["1 line(s) load without Tags: labels is not a list of labels (first at data row 1)"]


def test_a_credit_beside_a_huge_cost_keeps_the_source_total_exact(tmp_path):
    """Credits join the file's stated total at money's full width, not Python's 28 digits
    (found by `make fuzz`: a -10^26 cost and a -0.02 credit lost the credit)."""
    row = {**gcp_rows()[0], "cost": "-100000000000000000000000000.4",
           "credits": "[{'name': 'Promotion', 'amount': -0.02, 'full_name': None, 'type': 'PROMOTION'}]"}
    path = tmp_path / "export.json"
    path.write_text(as_json_lines([row]))
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(GcpBillingConnector().read(path, ctx)), schema=COST_LINE)
    assert ctx.source_total == Decimal("-100000000000000000000000000.42") == money_sum(table["x_SourceCost"].to_pylist())
