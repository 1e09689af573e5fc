"""AWS CUR on the public samples: totals to the cent, amortization, GPU instances."""

import csv
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.aws_cur import AwsCurConnector, snake
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context, sample


def read_all(path):
    ctx = read_context(path.name)
    return pa.Table.from_batches(list(AwsCurConnector().read(path, ctx)), schema=COST_LINE), ctx


def own_total(path) -> Decimal:
    with open(path, newline="") as fh:
        return sum((Decimal(r["lineItem/UnblendedCost"] or 0) for r in csv.DictReader(fh)), Decimal(0))


def test_column_names_of_both_cur_generations_meet():
    assert snake("lineItem/UnblendedCost") == "line_item_unblended_cost"
    assert snake("savingsPlan/SavingsPlanEffectiveCost") == "savings_plan_savings_plan_effective_cost"
    assert snake("line_item_unblended_cost") == "line_item_unblended_cost"
    assert snake("resourceTags/user:phase") == "tag:phase"


def test_anonymised_cur_loads_every_row_and_reconciles_to_the_cent():
    path = sample("billing/aws_cur_legacy_csv_focusconverters_fixture.csv")
    assert detect(path).connector.name == "aws_cur"
    table, ctx = read_all(path)
    assert table.num_rows == 1281 and not ctx.quarantined
    assert pc.sum(table["BilledCost"]).as_py().quantize(Decimal("0.01")) == own_total(path).quantize(Decimal("0.01")) == Decimal("1.68")
    categories = {k.as_py(): v.as_py() for k, v in zip(*pc.value_counts(table["ChargeCategory"]).flatten())}
    assert categories == {"Usage": 1269, "Tax": 12}
    assert set(table["ServiceCategory"].to_pylist()) >= {"Storage", "Integration", "Networking"}


@pytest.mark.parametrize("name, invoice", [("aws_cur_legacy_csv_savingsplan_koku.csv", True),
                                           ("aws_cur_legacy_csv_savingsplan_notfinal_koku.csv", False)])
def test_savings_plan_covered_usage_is_amortized(name, invoice):
    table, ctx = read_all(sample(f"billing/{name}"))
    assert table.num_rows == 3 and not ctx.quarantined
    rows = table.to_pylist()
    assert {r["BillingCurrency"] for r in rows} == {"NOK"}
    assert sum(r["BilledCost"] for r in rows) == Decimal("30.000000")  # the on-demand price, billed
    assert sum(r["EffectiveCost"] for r in rows) == Decimal("0.300000")  # what the savings plan made it cost
    assert {r["PricingCategory"] for r in rows} == {"Committed"}
    assert all((r["InvoiceId"] is not None) == invoice for r in rows)  # not final: no invoice yet


def test_a_cur_whose_rows_are_one_column_short_loads_with_a_warning():
    """koku's usage CUR: a 131-column header over rows of 130. The missing last column
    (costCategory/CostCenter) is empty on every row; every row loads, and the file says so."""
    path = sample("billing/aws_cur_legacy_csv_usage_koku.csv")
    table, ctx = read_all(path)
    assert table.num_rows == 19 and not ctx.quarantined
    assert table["x_SourceRow"].to_pylist() == list(range(1, 20))
    # Per-line money is kept at the connector's scale (6 decimals today): within half a unit per line.
    assert abs(pc.sum(table["BilledCost"]).as_py() - own_total(path)) <= Decimal("0.0000005") * 19
    assert ctx.source_total == pc.sum(table["x_SourceCost"]).as_py()
    assert ctx.warnings == ["19 rows with fewer fields than the header's 131: the missing last columns are empty "
                            "(first at line 2, 130 fields)"]


def test_gpu_instances_and_line_types(tmp_path):
    header = ("lineItem/LineItemType,lineItem/UsageStartDate,lineItem/UsageEndDate,lineItem/UnblendedCost,"
              "lineItem/CurrencyCode,lineItem/ProductCode,product/instanceType,reservation/EffectiveCost,"
              "reservation/UnusedAmortizedUpfrontFeeForBillingPeriod,reservation/UnusedRecurringFee,resourceTags/user:phase\n")
    path = tmp_path / "cur.csv"
    path.write_text(header
                    + "Usage,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z,40.9657,USD,AmazonEC2,p4de.24xlarge,,,,pretraining\n"
                    + "DiscountedUsage,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z,0,USD,AmazonEC2,p5.48xlarge,30.50,,,\n"
                    + "RIFee,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,1000,USD,AmazonEC2,,,100,20,\n"
                    + "Credit,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,-5,USD,AmazonEC2,,,,,\n")
    rows = read_all(path)[0].to_pylist()
    usage, covered, fee, credit = rows
    assert (usage["x_GpuModel"], usage["x_GpuCount"], usage["Tags"]) == ("A100 80G", 8, '{"phase":"pretraining"}')
    assert (covered["x_GpuModel"], covered["BilledCost"], covered["EffectiveCost"]) == ("H100", Decimal("0.000000"), Decimal("30.500000"))
    assert (fee["ChargeCategory"], fee["BilledCost"], fee["EffectiveCost"]) == ("Purchase", Decimal("1000.000000"), Decimal("120.000000"))
    assert (credit["ChargeCategory"], credit["EffectiveCost"]) == ("Credit", Decimal("-5.000000"))
    assert usage["ServiceCategory"] == "Compute"


def test_the_final_month_restates_the_open_one_even_when_both_arrive_together(tmp_path):
    import shutil

    from pipelines.ingest import ingest_landing
    from pipelines.warehouse import connect, fetch_all

    landing = tmp_path / "landing"
    landing.mkdir()
    # The pair names two payer accounts (9999999999999 open, 0099999999999 final) but the same three
    # line items (identity/LineItemId): the final export's lines restate the open one's.
    for name in ("aws_cur_legacy_csv_savingsplan_notfinal_koku.csv", "aws_cur_legacy_csv_savingsplan_koku.csv"):
        shutil.copy(sample(f"billing/{name}"), landing / name)
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    assert summary.restated == ["aws_cur_legacy_csv_savingsplan_notfinal_koku.csv"]
    status = dict(fetch_all(conn, "SELECT path, status FROM raw.files"))
    assert status == {"aws_cur_legacy_csv_savingsplan_koku.csv": "loaded",
                      "aws_cur_legacy_csv_savingsplan_notfinal_koku.csv": "restated"}
    conn.close()
    # And the totals never include both: core.cost_lines keeps only the final month's 30 NOK.
    from tests.test_ingest import current_total

    assert current_total(tmp_path / "wh.duckdb") == (Decimal("0.300000"), 3)  # EffectiveCost after the savings plan


def test_cur_2_parquet_with_typed_columns(tmp_path):
    import polars as pl

    source = sample("billing/aws_cur_legacy_csv_focusconverters_fixture.csv")
    frame = pl.read_csv(source, infer_schema_length=0)
    frame = frame.rename({c: snake(c) for c in frame.columns}).with_columns(
        pl.col("line_item_unblended_cost").cast(pl.Float64),  # CUR 2.0 Parquet types its costs
        pl.col("line_item_usage_start_date").str.to_datetime(time_zone="UTC"),
    )
    path = tmp_path / "cur2.parquet"
    frame.write_parquet(path)
    assert detect(path).connector.name == "aws_cur"
    table, ctx = read_all(path)
    assert table.num_rows == 1281 and not ctx.quarantined
    assert pc.sum(table["BilledCost"]).as_py().quantize(Decimal("0.01")) == Decimal("1.68")
    assert table["ChargePeriodStart"][0].as_py().isoformat().endswith("+00:00")
