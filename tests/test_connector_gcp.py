"""Google Cloud billing export: usage lines plus one Credit line per applied credit."""

import csv
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

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
    assert (row["x_GpuModel"], row["x_GpuCount"]) == ("A100 40G", 8)  # 8 GPU-hours in one hour
