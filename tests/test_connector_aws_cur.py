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


def test_a_cur_whose_header_is_longer_than_the_first_look_loads_every_row(tmp_path):
    """Two thousand cost allocation tags make a header of some 100 KiB: names read from the first
    64 KiB alone were fewer than the fields, and every row was quarantined."""
    source = sample("billing/aws_cur_legacy_csv_focusconverters_fixture.csv")
    rows = list(csv.reader(source.open(encoding="utf-8", newline="")))
    tags = [f"resourceTags/user:cost-allocation-tag-of-a-large-organisation-{n:04d}" for n in range(2000)]
    path = tmp_path / "wide-cur.csv"
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(rows[0] + tags)
        for n, row in enumerate(rows[1:]):
            writer.writerow(row + [""] * 1999 + ["llm" if n == 0 else ""])
    assert len(rows[0]) + len(tags) > 2000 and path.read_bytes().index(b"\n") > 64 * 1024
    table, ctx = read_all(path)
    assert table.num_rows == 1281 and not ctx.quarantined and not ctx.warnings
    assert pc.sum(table["BilledCost"]).as_py().quantize(Decimal("0.01")) == Decimal("1.68")
    assert '"cost-allocation-tag-of-a-large-organisation-1999":"llm"' in table["Tags"][0].as_py()


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
    usage, covered, fee, credit, unused = rows
    assert (usage["x_GpuModel"], usage["x_GpuCount"], usage["Tags"]) == ("A100-80GB", 8, '{"phase":"pretraining"}')
    assert (covered["x_GpuModel"], covered["BilledCost"], covered["EffectiveCost"]) == ("H100-80GB", Decimal("0.000000"), Decimal("30.500000"))
    # The recurring fee is a purchase; the unused part of the reservation it states is its own Usage row.
    assert (fee["ChargeCategory"], fee["BilledCost"], fee["EffectiveCost"]) == ("Purchase", Decimal("1000.000000"), Decimal("0.000000"))
    assert (unused["ChargeCategory"], unused["BilledCost"], unused["EffectiveCost"], unused["x_SourceRow"]) == (
        "Usage", Decimal("0.000000"), Decimal("120.000000"), 3)
    assert (credit["ChargeCategory"], credit["EffectiveCost"]) == ("Credit", Decimal("-5.000000"))
    assert usage["ServiceCategory"] == "Compute"


def test_the_final_month_restates_the_open_one_even_when_both_arrive_together(tmp_path):
    import shutil

    from pipelines.ingest.landing import ingest_landing
    from pipelines.warehouse.connection import connect, fetch_all

    landing = tmp_path / "landing"
    landing.mkdir()
    # The pair are plain uploads (no manifest): each is a delivery of its own. koku's open copy names
    # another payer account (9999999999999); here it is the final one's account, so both are the
    # same export, scope and month, and the final one (bill/InvoiceId set) outranks the open one.
    # The ledger never matches lines by identity/LineItemId alone: AWS does not keep it stable.
    final = sample("billing/aws_cur_legacy_csv_savingsplan_koku.csv")
    shutil.copy(final, landing / final.name)
    notfinal = sample("billing/aws_cur_legacy_csv_savingsplan_notfinal_koku.csv").read_text()
    (landing / "aws_cur_legacy_csv_savingsplan_notfinal_koku.csv").write_text(notfinal.replace("9999999999999", "0099999999999"))
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    assert summary.superseded == ["aws_cur_legacy_csv_savingsplan_notfinal_koku.csv"]
    status = dict(fetch_all(conn, "SELECT path, status FROM raw.files"))
    assert status == {"aws_cur_legacy_csv_savingsplan_koku.csv": "loaded",
                      "aws_cur_legacy_csv_savingsplan_notfinal_koku.csv": "superseded"}
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


RI_ARN = "arn:aws:ec2:us-east-1:111122223333:reserved-instances/ri-0abc"
SP_ARN = "arn:aws:savingsplans::111122223333:savingsplan/sp-0def"


def write_cur(path, header: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def reservation_month(legacy: bool) -> tuple[list[str], list[dict]]:
    """A partial-upfront reservation's month: the 100 upfront Fee, the RIFee for the recurring part
    (fully used, nothing unused), three DiscountedUsage hours whose effective cost adds to 19.5, and
    a free-tier Usage hour."""
    names = {"type": "lineItem/LineItemType", "start": "lineItem/UsageStartDate", "end": "lineItem/UsageEndDate",
             "cost": "lineItem/UnblendedCost", "currency": "lineItem/CurrencyCode", "product": "lineItem/ProductCode",
             "effective": "reservation/EffectiveCost", "arn": "reservation/ReservationARN",
             "unused_upfront": "reservation/UnusedAmortizedUpfrontFeeForBillingPeriod",
             "unused_recurring": "reservation/UnusedRecurringFee", "id": "identity/LineItemId"}
    if not legacy:
        names = {k: snake(v).replace("_arn", "_a_r_n") for k, v in names.items()}
    hour = lambda h: (f"2026-09-01T{h:02d}:00:00Z", f"2026-09-01T{h + 1:02d}:00:00Z")  # noqa: E731
    rows = [
        {"type": "Fee", "start": "2026-09-01T00:00:00Z", "end": "2026-09-01T00:00:00Z", "cost": "100", "arn": RI_ARN, "id": "a"},
        {"type": "RIFee", "start": "2026-09-01T00:00:00Z", "end": "2026-10-01T00:00:00Z", "cost": "12.25", "arn": RI_ARN,
         "unused_upfront": "0", "unused_recurring": "0", "id": "b"},
        *({"type": "DiscountedUsage", "start": hour(h)[0], "end": hour(h)[1], "cost": "0", "effective": e, "arn": RI_ARN, "id": "c"}
          for h, e in ((0, "6.5"), (1, "6.5"), (2, "6.5"))),
        {"type": "Usage", "start": hour(3)[0], "end": hour(3)[1], "cost": "0", "id": "d"},  # free tier
    ]
    for row in rows:
        row.setdefault("currency", "USD")
        row.setdefault("product", "AmazonEC2")
    return list(names.values()), [{names[k]: v for k, v in r.items()} for r in rows]


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy", "cur2"])
def test_a_reservations_upfront_fee_is_amortized_not_counted_again(tmp_path, legacy):
    header, rows = reservation_month(legacy)
    path = tmp_path / "ri.csv"
    write_cur(path, header, rows)
    table, ctx = read_all(path)
    assert not ctx.quarantined
    lines = table.to_pylist()
    assert pc.sum(table["BilledCost"]).as_py() == Decimal("112.250000")  # what AWS bills: the fee and the RIFee
    # AWS's amortized cost: 3 × 6.5 of covered usage; the fully used reservation leaves nothing unused.
    assert sum(r["EffectiveCost"] for r in lines) == Decimal("19.500000")
    fee, ri_fee, *covered, usage = lines
    assert len(lines) == 6  # no Unused row for a reservation used in full
    assert (fee["ChargeCategory"], fee["BilledCost"], fee["EffectiveCost"], fee["PricingCategory"]) == (
        "Purchase", Decimal("100.000000"), Decimal("0.000000"), "Standard")
    assert (ri_fee["ChargeCategory"], ri_fee["EffectiveCost"], ri_fee["CommitmentDiscountStatus"]) == ("Purchase", Decimal("0.000000"), None)
    for row in (fee, ri_fee, *covered):
        assert (row["CommitmentDiscountId"], row["CommitmentDiscountType"], row["CommitmentDiscountCategory"]) == (
            RI_ARN, "Reserved Instance", "Usage")
    assert {(r["CommitmentDiscountStatus"], r["PricingCategory"], r["ChargeCategory"]) for r in covered} == {("Used", "Committed", "Usage")}
    assert (usage["CommitmentDiscountId"], usage["CommitmentDiscountStatus"], usage["CommitmentDiscountType"],
            usage["CommitmentDiscountCategory"], usage["PricingCategory"]) == (None, None, None, None, "Standard")


def test_a_fee_without_a_reservation_is_its_own_effective_cost(tmp_path):
    path = tmp_path / "fee.csv"
    write_cur(path, ["lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UnblendedCost", "lineItem/CurrencyCode"],
              [{"lineItem/LineItemType": "Fee", "lineItem/UsageStartDate": "2026-09-01T00:00:00Z",
                "lineItem/UnblendedCost": "29", "lineItem/CurrencyCode": "USD"}])
    (row,) = read_all(path)[0].to_pylist()
    assert (row["ChargeCategory"], row["BilledCost"], row["EffectiveCost"], row["CommitmentDiscountId"], row["PricingCategory"]) == (
        "Purchase", Decimal("29.000000"), Decimal("29.000000"), None, "Standard")


def test_unused_reservation_and_savings_plan_commitment_become_unused_rows(tmp_path):
    header = ["lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UsageEndDate", "lineItem/UnblendedCost",
              "lineItem/CurrencyCode", "lineItem/LineItemDescription", "reservation/ReservationARN",
              "reservation/UnusedAmortizedUpfrontFeeForBillingPeriod", "reservation/UnusedRecurringFee",
              "savingsPlan/SavingsPlanARN", "savingsPlan/SavingsPlanEffectiveCost", "savingsPlan/TotalCommitmentToDate",
              "savingsPlan/UsedCommitment", "identity/LineItemId"]
    month = {"lineItem/UsageStartDate": "2026-09-01T00:00:00Z", "lineItem/UsageEndDate": "2026-10-01T00:00:00Z",
             "lineItem/CurrencyCode": "USD"}
    hour = {"lineItem/UsageStartDate": "2026-09-01T00:00:00Z", "lineItem/UsageEndDate": "2026-09-01T01:00:00Z",
            "lineItem/CurrencyCode": "USD"}
    rows = [
        {**month, "lineItem/LineItemType": "RIFee", "lineItem/UnblendedCost": "50", "reservation/ReservationARN": RI_ARN,
         "reservation/UnusedAmortizedUpfrontFeeForBillingPeriod": "3.25", "reservation/UnusedRecurringFee": "4.5",
         "lineItem/LineItemDescription": "Reserved p5 hours", "identity/LineItemId": "ri"},
        {**hour, "lineItem/LineItemType": "SavingsPlanCoveredUsage", "lineItem/UnblendedCost": "10",
         "savingsPlan/SavingsPlanARN": SP_ARN, "savingsPlan/SavingsPlanEffectiveCost": "6", "identity/LineItemId": "cov"},
        {**hour, "lineItem/LineItemType": "SavingsPlanNegation", "lineItem/UnblendedCost": "-10",
         "savingsPlan/SavingsPlanARN": SP_ARN, "identity/LineItemId": "neg"},
        {**month, "lineItem/LineItemType": "SavingsPlanRecurringFee", "lineItem/UnblendedCost": "8",
         "savingsPlan/SavingsPlanARN": SP_ARN, "savingsPlan/TotalCommitmentToDate": "8", "savingsPlan/UsedCommitment": "6",
         "identity/LineItemId": "spfee"},
        {**month, "lineItem/LineItemType": "SavingsPlanUpfrontFee", "lineItem/UnblendedCost": "120",
         "savingsPlan/SavingsPlanARN": SP_ARN, "identity/LineItemId": "spup"},
        {**month, "lineItem/LineItemType": "Tax", "lineItem/UnblendedCost": "1.5", "identity/LineItemId": "tax"},
    ]
    path = tmp_path / "commitments.csv"
    write_cur(path, header, rows)
    table, ctx = read_all(path)
    lines = table.to_pylist()
    assert pc.sum(table["BilledCost"]).as_py() == Decimal("179.500000") == ctx.source_total
    assert pc.sum(table["x_SourceCost"]).as_py() == Decimal("179.500000")  # the Unused rows add no source money
    # Amortized: covered usage 6 + unused RI 7.75 + unused savings plan 2 + tax 1.5.
    assert pc.sum(table["EffectiveCost"]).as_py() == Decimal("17.250000")
    ri_fee, covered, negation, sp_fee, sp_upfront, tax, ri_unused, sp_unused = lines
    assert [(r["ChargeCategory"], r["CommitmentDiscountStatus"], r["PricingCategory"], r["EffectiveCost"]) for r in lines] == [
        ("Purchase", None, "Standard", Decimal("0.000000")),
        ("Usage", "Used", "Committed", Decimal("6.000000")),
        ("Usage", "Used", "Committed", Decimal("0.000000")),
        ("Purchase", None, "Standard", Decimal("0.000000")),
        ("Purchase", None, "Standard", Decimal("0.000000")),
        ("Tax", None, None, Decimal("1.500000")),
        ("Usage", "Unused", "Committed", Decimal("7.750000")),
        ("Usage", "Unused", "Committed", Decimal("2.000000")),
    ]
    assert (ri_unused["BilledCost"], ri_unused["x_SourceCost"], ri_unused["ConsumedQuantity"], ri_unused["x_SourceRow"]) == (
        Decimal("0.000000"), Decimal("0.000000"), None, 1)
    assert ri_unused["ChargeDescription"] == "Unused commitment: Reserved p5 hours"
    assert ri_unused["x_SourceLineId"] == ri_fee["x_SourceLineId"] + "|unused"
    assert {(r["CommitmentDiscountId"], r["CommitmentDiscountType"], r["CommitmentDiscountCategory"])
            for r in (covered, negation, sp_fee, sp_upfront, sp_unused)} == {(SP_ARN, "Savings Plan", "Spend")}
    assert (ri_unused["CommitmentDiscountId"], ri_unused["CommitmentDiscountType"], ri_unused["CommitmentDiscountCategory"]) == (
        RI_ARN, "Reserved Instance", "Usage")
    assert tax["CommitmentDiscountId"] is None


def test_cur2_spellings_of_commitment_arns_reach_commitment_discount_id(tmp_path):
    path = tmp_path / "cur2.csv"
    write_cur(path, ["line_item_line_item_type", "line_item_usage_start_date", "line_item_unblended_cost", "line_item_currency_code",
                     "reservation_reservation_a_r_n", "savings_plan_savings_plan_a_r_n", "reservation_effective_cost",
                     "savings_plan_savings_plan_effective_cost"],
              [{"line_item_line_item_type": "DiscountedUsage", "line_item_usage_start_date": "2026-09-01T00:00:00Z",
                "line_item_unblended_cost": "0", "line_item_currency_code": "USD", "reservation_reservation_a_r_n": RI_ARN,
                "reservation_effective_cost": "1.25"},
               {"line_item_line_item_type": "SavingsPlanCoveredUsage", "line_item_usage_start_date": "2026-09-01T00:00:00Z",
                "line_item_unblended_cost": "3", "line_item_currency_code": "USD", "savings_plan_savings_plan_a_r_n": SP_ARN,
                "savings_plan_savings_plan_effective_cost": "2"}])
    ri, sp = read_all(path)[0].to_pylist()
    assert (ri["CommitmentDiscountId"], ri["CommitmentDiscountType"], ri["EffectiveCost"]) == (RI_ARN, "Reserved Instance", Decimal("1.250000"))
    assert (sp["CommitmentDiscountId"], sp["CommitmentDiscountType"], sp["EffectiveCost"]) == (SP_ARN, "Savings Plan", Decimal("2.000000"))


def test_marketplace_lines_name_the_seller_as_publisher_and_service_provider(tmp_path):
    header = ["lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UnblendedCost", "lineItem/CurrencyCode",
              "bill/BillingEntity", "lineItem/LegalEntity", "bill/InvoicingEntity", "lineItem/ProductCode"]
    path = tmp_path / "mp.csv"
    write_cur(path, header, [
        dict(zip(header, ["Usage", "2026-09-01T00:00:00Z", "42", "USD", "AWS Marketplace", "Datadog, Inc.",
                          "Amazon Web Services, Inc.", "prod-abc123"])),
        dict(zip(header, ["Usage", "2026-09-01T00:00:00Z", "1", "USD", "AWS", "Amazon Web Services, Inc.",
                          "Amazon Web Services, Inc.", "AmazonEC2"])),
    ])
    marketplace, own = read_all(path)[0].to_pylist()
    assert (marketplace["PublisherName"], marketplace["ServiceProviderName"], marketplace["ProviderName"],
            marketplace["InvoiceIssuerName"]) == ("Datadog, Inc.", "Datadog, Inc.", "AWS", "Amazon Web Services, Inc.")
    assert (own["PublisherName"], own["ServiceProviderName"]) == ("AWS", "AWS")


def test_line_ids_are_never_the_bare_identity_line_item_id(tmp_path):
    # AWS keeps identity/LineItemId unique only within one time interval of one report: two hours
    # of one resource may share it, and both must stay distinct lines.
    header = ["identity/LineItemId", "lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UsageEndDate",
              "lineItem/UnblendedCost", "lineItem/CurrencyCode", "lineItem/UsageType", "lineItem/ResourceId"]
    path = tmp_path / "ids.csv"
    write_cur(path, header, [
        dict(zip(header, ["abc", "Usage", "2026-09-01T00:00:00Z", "2026-09-01T01:00:00Z", "1", "USD", "BoxUsage:p5.48xlarge", "i-1"])),
        dict(zip(header, ["abc", "Usage", "2026-09-01T01:00:00Z", "2026-09-01T02:00:00Z", "1", "USD", "BoxUsage:p5.48xlarge", "i-1"])),
        dict(zip(header, ["", "Usage", "2026-09-01T01:00:00Z", "2026-09-01T02:00:00Z", "1", "USD", "BoxUsage:p5.48xlarge", "i-1"])),
    ])
    first, second, unnamed = read_all(path)[0].to_pylist()
    assert first["x_SourceLineId"] == "abc|2026-09-01T00:00:00Z/2026-09-01T01:00:00Z|BoxUsage:p5.48xlarge|i-1"
    assert second["x_SourceLineId"] == "abc|2026-09-01T01:00:00Z/2026-09-01T02:00:00Z|BoxUsage:p5.48xlarge|i-1"
    assert unnamed["x_SourceLineId"] is None


def test_a_line_in_a_currency_iso_4217_does_not_know_is_quarantined(tmp_path):
    source = sample("billing/aws_cur_legacy_csv_savingsplan_koku.csv").read_text()
    path = tmp_path / "cur.csv"
    path.write_text(source.replace(",NOK,", ",XYZ,", 1))
    table, ctx = read_all(path)
    assert table.num_rows == 2
    assert [q["reason"] for q in ctx.quarantined] == ["lineItem/CurrencyCode 'XYZ' is not an ISO 4217 code"]
    assert ctx.source_total == sum(table.column("x_SourceCost").to_pylist()) + ctx.quarantined_total


def test_quantities_follow_focus_usage_consumes_fees_are_priced_and_unused_rows_carry_the_unused_part(tmp_path):
    """Every usage and purchase line is priced (PricingQuantity-C-005-C: no CUR line was); only usage
    consumes (a tax's quantity is not consumption); an Unused row built from a fee carries the unused
    part of the fee's quantity, not the whole fee's (which would count the commitment twice)."""
    header = ["lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UsageEndDate", "lineItem/UnblendedCost",
              "lineItem/CurrencyCode", "lineItem/UsageAmount", "pricing/unit", "reservation/ReservationARN",
              "reservation/UnusedRecurringFee", "reservation/UnusedQuantity", "savingsPlan/SavingsPlanARN",
              "savingsPlan/TotalCommitmentToDate", "savingsPlan/UsedCommitment", "identity/LineItemId"]
    month = {"lineItem/UsageStartDate": "2026-09-01T00:00:00Z", "lineItem/UsageEndDate": "2026-10-01T00:00:00Z",
             "lineItem/CurrencyCode": "USD"}
    rows = [
        {**month, "lineItem/LineItemType": "RIFee", "lineItem/UnblendedCost": "600", "lineItem/UsageAmount": "720",
         "pricing/unit": "Hrs", "reservation/ReservationARN": RI_ARN, "reservation/UnusedRecurringFee": "60",
         "reservation/UnusedQuantity": "72", "identity/LineItemId": "ri"},
        {**month, "lineItem/LineItemType": "SavingsPlanRecurringFee", "lineItem/UnblendedCost": "100",
         "lineItem/UsageAmount": "720", "pricing/unit": "Hrs", "savingsPlan/SavingsPlanARN": SP_ARN,
         "savingsPlan/TotalCommitmentToDate": "100", "savingsPlan/UsedCommitment": "20", "identity/LineItemId": "sp"},
        {**month, "lineItem/LineItemType": "Usage", "lineItem/UnblendedCost": "9", "lineItem/UsageAmount": "100",
         "pricing/unit": "GB", "identity/LineItemId": "use"},
        {**month, "lineItem/LineItemType": "Tax", "lineItem/UnblendedCost": "1.5", "lineItem/UsageAmount": "1",
         "identity/LineItemId": "tax"},
    ]
    path = tmp_path / "quantities.csv"
    write_cur(path, header, rows)
    table, _ = read_all(path)
    got = [(r["ChargeCategory"], r["CommitmentDiscountStatus"], r["ConsumedQuantity"], r["ConsumedUnit"], r["PricingQuantity"],
            r["PricingUnit"]) for r in table.to_pylist()]
    assert got == [
        ("Purchase", None, None, None, Decimal("720"), "Hrs"),
        ("Purchase", None, None, None, Decimal("720"), "Hrs"),
        ("Usage", None, Decimal("100"), "GB", Decimal("100"), "GB"),
        ("Tax", None, None, None, None, None),
        ("Usage", "Unused", None, None, Decimal("72"), "Hrs"),    # the reservation's own unused hours
        ("Usage", "Unused", None, None, Decimal("576"), "Hrs"),   # 80 % of the plan's commitment unused
    ]


def test_an_upfront_fee_in_no_stated_unit_is_priced_in_units(tmp_path):
    """A reservation's upfront Fee states a quantity and no pricing/unit: unpriced, it broke FOCUS's
    PricingQuantity-C-005-C (the check warned on every CUR with an upfront reservation)."""
    header = ["lineItem/LineItemType", "lineItem/UsageStartDate", "lineItem/UsageEndDate", "lineItem/UnblendedCost",
              "lineItem/CurrencyCode", "lineItem/UsageAmount", "pricing/unit", "reservation/ReservationARN", "identity/LineItemId"]
    write_cur(tmp_path / "fee.csv", header, [
        {"lineItem/LineItemType": "Fee", "lineItem/UsageStartDate": "2026-09-01T00:00:00Z",
         "lineItem/UsageEndDate": "2026-09-01T00:00:00Z", "lineItem/UnblendedCost": "100", "lineItem/CurrencyCode": "USD",
         "lineItem/UsageAmount": "1", "pricing/unit": "", "reservation/ReservationARN": RI_ARN, "identity/LineItemId": "fee"}])
    (row,) = read_all(tmp_path / "fee.csv")[0].to_pylist()
    assert (row["ChargeCategory"], row["PricingQuantity"], row["PricingUnit"], row["ConsumedQuantity"]) == (
        "Purchase", Decimal("1"), "Units", None)
