"""Oracle Cloud cost report: every line loads and the cost reconciles to the cent."""

import csv
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

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
