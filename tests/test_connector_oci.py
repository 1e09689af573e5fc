"""Oracle Cloud cost report: every line loads and the cost reconciles to the cent."""

import csv
import json
import shutil
from decimal import Decimal

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from connectors.base import money_sum
from connectors.oci_cost import OciCostConnector, readable_unit
from connectors.registry import detect
from models.focus import UNIT_FORMAT_REGEX
from models.schemas import COST_LINE
from tests.conftest import read_context, run_pipeline, sample


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


def test_units_are_what_the_billed_quantity_counts():
    """`cost/billingUnitReadable` states what `usage/billedQuantity` counts; the SKU's wording does
    not: outbound data transfer says `GB Months`, Exadata storage `TB` (TiB-months), monitoring
    `Million Datapoints` (a block of a million)."""
    path = sample("billing/oci_cost_report_focusconverters_fixture.csv")
    table = pa.Table.from_batches(list(OciCostConnector().read(path, read_context(path.name))), schema=COST_LINE)
    units = {(r["ChargeDescription"], r["ConsumedUnit"], r["PricingUnit"])
             for r in table.select(["ChargeDescription", "ConsumedUnit", "PricingUnit"]).to_pylist()}
    assert {
        ("Outbound Data Transfer Zone 1", "GiB", "GiB"),
        ("Oracle Autonomous Transaction Processing - Exadata Storage", "TiB-Months", "TiB-Months"),
        ("Monitoring Service - Retrieval", "1000000 Datapoints", "1000000 Datapoints"),
        ("Standard - E4", "OCPU-Hours", "OCPU-Hours"),
        ("Standard - E4 - Memory", "GiB-Hours", "GiB-Hours"),
        ("MySQL Database for HeatWave - Standard - Node per hour", "Hours", "Hours"),
        ("Streaming - Storage", "GiB-Hours", "GiB-Hours"),
        ("Streaming - PUT or GET", "GiB", "GiB"),
    } <= units
    conn = duckdb.connect()
    assert all(conn.execute("SELECT regexp_matches(?, ?)", [u, UNIT_FORMAT_REGEX]).fetchone()[0] for _, u, _ in units)


def test_a_sku_naming_gpus_or_an_unreadable_unit_keeps_the_skus_unit():
    frame = pl.DataFrame({"readable": ["1 NONE HOURS GPUS", "1 NONE HOURS INSTANCE", None, "per hour", "1 FOO HOURS X", "1 NONE NONE INSTANCE"],
                          "sku": ["GPU Per Hour", "GPU Per Hour", "Hours", "Hours", "Each", "Each"]})
    got = frame.select(readable_unit(pl.col("readable"), pl.col("sku"))).to_series().to_list()
    # GPU SKUs keep the wording the GPU-hour readings (time_unit_seconds, count_from_usage) are written against.
    assert got == ["GPU Per Hour", "GPU Per Hour", "Hours", "Hours", "Each", "Instances"]


def test_outbound_data_transfer_is_egress(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(sample("billing/oci_cost_report_focusconverters_fixture.csv"), landing)
    run_pipeline(landing, tmp_path / "w.duckdb")
    conn = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    found = conn.execute("""SELECT subkind, count(*), sum(gb), sum(wasted_cost) FROM findings.egress GROUP BY subkind""").fetchall()
    # 40 hourly lines of 'Outbound Data Transfer Zone 1' on one VNIC: 0.0020903861 GiB, 0.0000127702 USD.
    assert found == [("internet", 1, Decimal("0.0022445351"), Decimal("0.0000127702"))]
