"""Oracle Cloud cost report: every line loads and the cost reconciles to the cent."""

import csv
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from connectors.base import money_sum
from connectors.oci_cost import OciCostConnector
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context, sample


def test_oci_report_loads_and_reconciles():
    path = sample("billing/oci_cost_report_focusconverters_fixture.csv")
    assert detect(path).connector.name == "oci_cost"
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(OciCostConnector().read(path, ctx)), schema=COST_LINE)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert table.num_rows == len(rows) == 506 and not ctx.quarantined
    own = sum((Decimal(r["cost/myCost"] or 0) for r in rows), Decimal(0))
    assert pc.sum(table["BilledCost"]).as_py().quantize(Decimal("0.01")) == own.quantize(Decimal("0.01")) == Decimal("2.52")
    assert {"Databases", "Compute", "Networking", "Storage"} <= set(table["ServiceCategory"].to_pylist())
    first = table.slice(0, 1).to_pylist()[0]
    assert first["ChargePeriodStart"].isoformat() == "2023-11-13T10:00:00+00:00"  # OCI writes 2023-11-13T10:00Z
    assert json.loads(first["Tags"])["Oracle-Tags.CreatedBy"] == "default/phil.newman@oracle.com"


def test_amounts_past_28_digits_reconcile_exactly(tmp_path):
    """A line near 10^19 with 10 decimals has 30 significant digits: the file's stated total must not
    be rounded by Python's default 28-digit decimal context (found by `make fuzz`)."""
    source = sample("billing/oci_cost_report_focusconverters_fixture.csv")
    with open(source, newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = reader.fieldnames, list(reader)[:3]
    for row, cost in zip(rows, ("10000000000000000000.0925386149", "0.0000000001", "-3.5"), strict=True):
        row["cost/myCost"] = cost
    path = tmp_path / "oci-huge.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(OciCostConnector().read(path, ctx)), schema=COST_LINE)
    stated = money_sum(Decimal(r["cost/myCost"] or 0) for r in rows)
    assert ctx.source_total == stated == money_sum(table["x_SourceCost"].to_pylist())
    assert stated == Decimal("9999999999999999996.5925386150")
