"""GCP GPU lines labelled with their phase reach that phase, their sustained-use credits with them
(issue: before, the lines went to idle and the credits to unattributed, a -20.5 % share)."""

import csv
from decimal import Decimal

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline

HEADER = ["billing_account_id", "service.id", "service.description", "sku.id", "sku.description", "usage_start_time",
          "usage_end_time", "project.id", "project.name", "project.labels", "labels", "system_labels", "location.region",
          "export_time", "cost", "currency", "currency_conversion_rate", "usage.amount", "usage.unit", "credits",
          "invoice.month", "cost_type"]


def row(sku: str, description: str, labels: str, cost: str, credit: str, start: str, end: str) -> dict:
    credits = f"[{{'name': 'SustainedUseDiscount', 'amount': {credit}, 'type': 'SUSTAINED_USAGE_DISCOUNT'}}]" if credit else "[]"
    return {"billing_account_id": "0A0A0A-0B0B0B-0C0C0C", "service.id": "6F81-5844-456A", "service.description": "Compute Engine",
            "sku.id": sku, "sku.description": description, "usage_start_time": start, "usage_end_time": end,
            "project.id": "ml-train", "project.name": "ml-train", "project.labels": "[]", "labels": labels,
            "system_labels": "[]", "location.region": "us-central1", "export_time": "2026-09-02 04:00:00+00:00",
            "cost": cost, "currency": "USD", "currency_conversion_rate": "1.0", "usage.amount": "28800",
            "usage.unit": "seconds", "credits": credits, "invoice.month": "202609", "cost_type": "regular"}


def test_labelled_gpu_lines_and_their_credits_reach_their_phases(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    rows = [
        row("A100-SKU", "Nvidia Tesla A100 GPU running in Americas", "[{'key': 'phase', 'value': 'pretraining'}]",
            "235.20", "-48.30", "2026-09-01 00:00:00+00:00", "2026-09-01 01:00:00+00:00"),
        row("A100-SKU", "Nvidia Tesla A100 GPU running in Americas", "[{'key': 'ml-phase', 'value': 'Fine-Tuning'}]",
            "58.80", "-12.10", "2026-09-01 01:00:00+00:00", "2026-09-01 02:00:00+00:00"),
    ]
    with open(landing / "gcp_billing_export.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, HEADER)
        writer.writeheader()
        writer.writerows(rows)
    run_pipeline(landing, tmp_path / "wh.duckdb")
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        gpus = fetch_all(conn, "SELECT x_GpuModel, x_GpuCount FROM core.cost_lines WHERE ChargeCategory = 'Usage' ORDER BY 1")
        assert {g for g, _ in gpus} == {"A100-40GB"} and all(n for _, n in gpus)
        split = dict(fetch_all(conn, "SELECT phase, sum(amount_billing) FROM marts.cost_attribution GROUP BY 1"))
        # Each line with its own credit: 235.20 - 48.30 and 58.80 - 12.10; nothing idle, nothing unattributed.
        assert split == {"pretraining": Decimal("186.90"), "finetuning": Decimal("46.70")}
        methods = {m for (m,) in fetch_all(conn, "SELECT DISTINCT method FROM marts.cost_attribution")}
        assert methods == {"tag"}
        # Each source row's charges numbered in the documented order (the line first, then its
        # credit): the ids stay what they were when every line was numbered, not just these.
        ids = fetch_all(conn, """
            SELECT x_SourceRow, ChargeCategory, x_ChargeId = md5(x_SourceSha256 || ':' || x_SourceRow || ':' || row_number() OVER (
                       PARTITION BY x_SourceSha256, x_SourceRow ORDER BY ChargeCategory DESC, ChargeDescription, BilledCost))
            FROM core.cost_lines ORDER BY 1, 2""")
        assert ids == [(1, "Credit", True), (1, "Usage", True), (2, "Credit", True), (2, "Usage", True)]
    finally:
        conn.close()
