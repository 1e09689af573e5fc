"""Azure cost details exports: every header variant in the samples, actual vs amortized."""

import csv
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.azure_cost import AzureCostConnector, key
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context, sample


def read_all(path):
    ctx = read_context(path.name)
    table = pa.Table.from_batches(list(AzureCostConnector().read(path, ctx)), schema=COST_LINE)
    return table, ctx


def own_total(path) -> Decimal:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.DictReader(fh))
    column = next(h for h in rows[0] if key(h) in ("costinbillingcurrency", "cost", "pretaxcost"))
    return sum((Decimal(r[column]) for r in rows if r[column]), Decimal(0))


def sum_of(table, column) -> Decimal:
    return (pc.sum(table[column]).as_py() or Decimal(0)).quantize(Decimal("0.01"))


@pytest.mark.parametrize("name, rows", [
    ("billing/azure_ea_actual_cost_focusconverters_fixture.csv", 27),
    ("billing/azure_payg_legacy_camelcase_koku.csv", 3),
    ("billing/azure_payg_legacy_costreport_koku.csv", 3),
    ("billing/azure_export_header_variants_opencost/Enterprise.csv", 1),
    ("billing/azure_export_header_variants_opencost/EnterpriseCamel.csv", 1),
    ("billing/azure_export_header_variants_opencost/PayAsYouGo.csv", 1),
])
def test_header_variants_load_and_reconcile_to_the_cent(name, rows):
    path = sample(name)
    assert detect(path).connector.name == "azure_cost"
    table, ctx = read_all(path)
    assert table.num_rows == rows and not ctx.quarantined
    assert sum_of(table, "BilledCost") == own_total(path).quantize(Decimal("0.01"))


def test_actual_and_amortized_exports_of_one_month():
    actual, _ = read_all(sample("billing/azure_ea_actual_cost_finopstoolkit.csv"))
    amortized, _ = read_all(sample("billing/azure_ea_amortized_cost_finopstoolkit.csv"))
    # Actual: the reservation purchase is billed, and amortized away from EffectiveCost.
    assert (actual.num_rows, sum_of(actual, "BilledCost"), sum_of(actual, "EffectiveCost")) == (11, Decimal("8.55"), Decimal("5.30"))
    assert "Purchase" in actual["ChargeCategory"].to_pylist()
    # Amortized: covered usage carries its share of the commitment as EffectiveCost and bills nothing.
    assert (amortized.num_rows, sum_of(amortized, "EffectiveCost")) == (28, own_total(sample("billing/azure_ea_amortized_cost_finopstoolkit.csv")).quantize(Decimal("0.01")))
    assert sum_of(amortized, "BilledCost") < sum_of(amortized, "EffectiveCost")
    assert set(amortized["PricingCategory"].to_pylist()) >= {"Committed"}


def test_a_fake_currency_and_an_empty_row_are_quarantined_not_loaded():
    table, ctx = read_all(sample("billing/azure_ea_export_v2_koku.csv"))
    assert table.num_rows == 0 and [q["reason"] for q in ctx.quarantined] == ["currency 'MC' is not an ISO 4217 code"] * 5
    table, ctx = read_all(sample("billing/azure_export_header_variants_opencost/BOM.csv"))
    assert table.num_rows == 0 and [q["reason"] for q in ctx.quarantined] == ["cost is empty"]


def test_localized_headers_carry_the_english_name():
    assert key("Kosten (Cost)") == "cost" and key("CostInBillingCurrency") == "costinbillingcurrency"


def test_service_categories_and_pricing_currency():
    table, _ = read_all(sample("billing/azure_ea_actual_cost_focusconverters_fixture.csv"))
    assert set(table["ServiceCategory"].to_pylist()) == {"Integration", "Compute", "Storage", "Networking"}
    camel, _ = read_all(sample("billing/azure_export_header_variants_opencost/EnterpriseCamel.csv"))
    row = camel.to_pylist()[0]
    assert (row["PricingCurrency"], row["PricingCurrencyEffectiveCost"], row["BilledCost"]) == ("USD", Decimal("0.012000"), Decimal("0.012000"))


def test_gpu_vm_size_from_additional_info(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text("SubscriptionId,MeterCategory,MeterId,Date,CostInBillingCurrency,BillingCurrencyCode,ResourceId,AdditionalInfo,ChargeType\n"
                    's-1,Virtual Machines,m-1,09/01/2026,786.48,USD,/subscriptions/s-1/providers/Microsoft.Compute/virtualMachines/gpu-1,'
                    '"{""ServiceType"": ""Standard_ND96amsr_A100_v4"", ""VMName"": ""gpu-1""}",Usage\n')
    table, ctx = read_all(path)
    row = table.to_pylist()[0]
    assert (row["x_GpuModel"], row["x_GpuCount"], row["ServiceCategory"]) == ("A100-80GB", 8, "Compute")


def test_each_export_says_its_dataset_and_ten_charges_pair_by_key():
    actual, _ = read_all(sample("billing/azure_ea_actual_cost_finopstoolkit.csv"))
    amortized, _ = read_all(sample("billing/azure_ea_amortized_cost_finopstoolkit.csv"))
    assert set(actual["x_AzureDataset"].to_pylist()) == {"actual"} and set(amortized["x_AzureDataset"].to_pylist()) == {"amortized"}
    keys = lambda t: t["x_AzureChargeKey"].to_pylist()  # noqa: E731
    assert len(set(keys(actual))) == 11 and len(set(keys(amortized))) == 28
    assert len(set(keys(actual)) & set(keys(amortized))) == 10  # every usage charge; the purchase is actual's alone
    # The savings plan's usage names its benefit (no ReservationId): CommitmentDiscountId from benefitId.
    plan = [r for r in amortized.to_pylist() if r["CommitmentDiscountType"] == "Savings Plan"]
    assert [(r["CommitmentDiscountCategory"], r["CommitmentDiscountStatus"], r["BilledCost"]) for r in plan] == [("Spend", "Used", Decimal("0"))]
    assert plan[0]["CommitmentDiscountId"].lower().startswith("/providers/microsoft.billingbenefits/savingsplanorders/")


def test_the_billing_period_ends_where_focus_says_it_does():
    """Cost details name the period's last day (BillingPeriodEndDate 09/30/2023); FOCUS's
    BillingPeriodEnd is exclusive, the first instant after it. An end already exclusive is kept."""
    from datetime import datetime, timezone

    for name, start, end in (("billing/azure_ea_actual_cost_finopstoolkit.csv", datetime(2023, 9, 1), datetime(2023, 10, 1)),
                             ("billing/azure_ea_actual_cost_focusconverters_fixture.csv", datetime(2023, 9, 1), datetime(2023, 10, 1)),
                             ("billing/azure_export_header_variants_opencost/Enterprise.csv", datetime(2021, 5, 1), datetime(2021, 6, 1))):
        table, _ = read_all(sample(name))
        periods = set(zip(table["BillingPeriodStart"].to_pylist(), table["BillingPeriodEnd"].to_pylist()))
        assert periods == {(start.replace(tzinfo=timezone.utc), end.replace(tzinfo=timezone.utc))}, name
        assert all(c <= end.replace(tzinfo=timezone.utc) for c in table["ChargePeriodEnd"].to_pylist()), name


def test_an_exclusive_billing_period_end_is_kept(tmp_path):
    from datetime import datetime, timezone

    path = tmp_path / "exclusive.csv"
    path.write_text("BillingPeriodStartDate,BillingPeriodEndDate,SubscriptionId,Date,MeterId,MeterCategory,CostInBillingCurrency,"
                    "BillingCurrencyCode\n2026-10-01,2026-11-01,sub-1,2026-10-31,m-1,Virtual Machines,1.00,USD\n"
                    "2026-10-01,2026-10-15,sub-1,2026-10-14,m-1,Virtual Machines,1.00,USD\n")
    table, ctx = read_all(path)
    assert not ctx.quarantined
    assert table["BillingPeriodEnd"].to_pylist() == [datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 10, 15, tzinfo=timezone.utc)]


def test_quantities_in_blocks_are_counted_in_the_distinct_unit_at_the_price_of_one():
    """Cost details count Quantity in UnitOfMeasure, a block that it prices: a '10K' line of 0.1351 at
    0.0005 costs 0.00006755, 1,351 operations. ConsumedUnit was written as it came ('10K', '1 Hour'),
    with no PricingQuantity or PricingUnit at all. Now every quantity is in the distinct unit, and
    the unit price is the price of one, so cost = unit price × PricingQuantity (FOCUS)."""
    table, _ = read_all(sample("billing/azure_ea_amortized_cost_finopstoolkit.csv"))
    rows = table.to_pylist()
    ops = next(r for r in rows if r["ConsumedQuantity"] == Decimal("1351"))
    assert (ops["ConsumedUnit"], ops["PricingQuantity"], ops["PricingUnit"], ops["ListUnitPrice"]) == (
        "Units", Decimal("1351"), "Units", Decimal("0.00000005"))
    assert ops["PricingQuantity"] * ops["ListUnitPrice"] == ops["EffectiveCost"] == Decimal("0.00006755")
    hours = next(r for r in rows if r["ConsumedQuantity"] == Decimal("24"))
    assert (hours["ConsumedUnit"], hours["PricingQuantity"], hours["PricingUnit"]) == ("Hours", Decimal("24"), "Hours")
    storage = {(r["ConsumedUnit"], r["PricingUnit"]) for r in rows if r["ConsumedUnit"] and "Month" in r["ConsumedUnit"]}
    assert storage == {("GB/Month", "GB/Month"), ("Units/Month", "Units/Month")}
    # A reservation's purchase consumes nothing, and is priced: 1 Hour at 3.25.
    purchase = next(r for r in read_all(sample("billing/azure_ea_actual_cost_finopstoolkit.csv"))[0].to_pylist()
                    if r["ChargeCategory"] == "Purchase")
    assert (purchase["ConsumedQuantity"], purchase["ConsumedUnit"], purchase["PricingQuantity"], purchase["PricingUnit"],
            purchase["BilledCost"]) == (None, None, Decimal("1"), "Hours", Decimal("3.25"))
    # '100 Hours' (OpenCost's pay-as-you-go sample): 3 blocks at 0.025 are 300 hours at 0.00025.
    payg, _ = read_all(sample("billing/azure_export_header_variants_opencost/PayAsYouGo.csv"))
    line = payg.to_pylist()[0]
    assert (line["ConsumedQuantity"], line["ConsumedUnit"], line["PricingQuantity"], line["PricingUnit"], line["ListUnitPrice"]) == (
        Decimal("300"), "Hours", Decimal("300"), "Hours", Decimal("0.00025"))


def test_odd_units_refunds_and_blank_units_keep_quantities_whole(tmp_path):
    """A unit in another case is the table's; a '0 <unit>' is no block (it would zero the quantity);
    a blank unit is none, and its quantity is priced in plain Units (FOCUS wants every usage line
    priced, PricingQuantity-C-005-C); a refund is priced by nothing (its GB would count as
    transferred again)."""
    path = tmp_path / "units.csv"
    head = "SubscriptionId,MeterCategory,MeterId,Date,CostInBillingCurrency,BillingCurrencyCode,Quantity,UnitOfMeasure,UnitPrice,ChargeType\n"
    path.write_text(head + "s-1,Storage,m-1,09/01/2026,0.0005,USD,0.25,10k,0.002,Usage\n"
                           "s-1,Other,m-2,09/01/2026,0.00,USD,7,0 Unassigned,0,Usage\n"
                           "s-1,Other,m-3,09/01/2026,1.00,USD,5,   ,0.2,Usage\n"
                           "s-1,Bandwidth,m-4,09/01/2026,-8.70,USD,100,1 GB,0.087,Refund\n"
                           "s-1,Storage,m-5,09/01/2026,0.75,USD,3,100000000000,0.25,Usage\n")
    table, ctx = read_all(path)
    assert not ctx.quarantined
    got = [(r["ConsumedQuantity"], r["ConsumedUnit"], r["PricingQuantity"], r["PricingUnit"]) for r in table.to_pylist()]
    assert got == [(Decimal("2500"), "Units", Decimal("2500"), "Units"),
                   (Decimal("7"), "0 Unassigned", Decimal("7"), "0 Unassigned"),
                   (Decimal("5"), None, Decimal("5"), "Units"),
                   (None, None, None, None),
                   (Decimal("300000000000"), "Units", Decimal("300000000000"), "Units")]
    # 0.25 per 10^11 Units is a price of one that twelve decimals cannot hold: unknown, not rounded to 0.
    # A refund is priced by nothing: no unit price either.
    assert [r["ListUnitPrice"] for r in table.to_pylist()] == [Decimal("0.0000002"), Decimal("0"), Decimal("0.2"), None, None]


def test_list_and_contracted_costs_are_their_prices_times_the_quantity():
    """ListCost was the line's cost and ContractedCost was left to core.cost_lines: Azure's savings
    against list and negotiated prices read as nothing. PayGPrice is the list price and UnitPrice the
    contracted one, each per block; a list price of 0 (some covered lines state none) is none."""
    path = sample("billing/azure_ea_amortized_cost_finopstoolkit.csv")
    rows = read_all(path)[0].to_pylist()
    # 24 Hours at 0.0816 on demand, list 0.0816: list, contracted and effective cost alike.
    hours = next(r for r in rows if r["ConsumedQuantity"] == Decimal("24") and r["ListUnitPrice"] == Decimal("0.0816"))
    assert (hours["ListCost"], hours["ContractedCost"], hours["EffectiveCost"]) == (Decimal("1.9584"),) * 3
    # 8 hours of a reservation-covered VM: PayGPrice 0 (none stated), UnitPrice 0.146, effective 0.061644.
    covered = next(r for r in rows if r["ConsumedQuantity"] == Decimal("8"))
    assert (covered["ListUnitPrice"], covered["ContractedUnitPrice"], covered["ListCost"], covered["ContractedCost"],
            covered["EffectiveCost"]) == (Decimal("0.146"), Decimal("0.146"), Decimal("1.168"), Decimal("1.168"), Decimal("0.493152"))
    # '10K' at 0.0005 a block: per Unit 0.00000005, and the cost is the same either way.
    ops = next(r for r in rows if r["ConsumedQuantity"] == Decimal("1351"))
    assert ops["ContractedUnitPrice"] * ops["PricingQuantity"] == ops["ContractedCost"] == Decimal("0.00006755")
    # A credit, tax or adjustment is its own cost at list.
    assert all(r["ListCost"] == r["BilledCost"] for r in rows if r["ChargeCategory"] not in ("Usage", "Purchase"))


def test_prices_are_billing_money_and_a_zero_or_discounted_price_is_none(tmp_path):
    """An MCA export states UnitPrice and PayGPrice in its pricing currency: they are billing money
    only at its rate. A price of 0 on a line that costs something (all MCA reservation usage,
    Marketplace charges) states no price, and EffectivePrice, after commitment discounts, is neither
    list nor contracted: those lines keep their own cost at list, as before."""
    path = tmp_path / "prices.csv"
    head = ("SubscriptionId,MeterCategory,MeterId,Date,CostInBillingCurrency,BillingCurrency,PricingCurrency,"
            "ExchangeRatePricingToBilling,Quantity,UnitOfMeasure,UnitPrice,PayGPrice,ChargeType\n")
    path.write_text(head + "s-1,Virtual Machines,m-1,09/01/2026,9.00,EUR,USD,0.9,10,1 Hour,1.0,1.2,Usage\n"
                           "s-1,Virtual Machines,m-2,09/01/2026,9.00,EUR,USD,,10,1 Hour,1.0,1.2,Usage\n"
                           "s-1,Virtual Machines,m-3,09/01/2026,25.00,EUR,EUR,1,10,1 Hour,0,0,Usage\n"
                           "s-1,Virtual Machines,m-4,09/01/2026,0.00,EUR,EUR,1,10,1 Hour,0,0,Usage\n")
    table, ctx = read_all(path)
    assert not ctx.quarantined
    got = [(r["ListUnitPrice"], r["ContractedUnitPrice"], r["ListCost"], r["ContractedCost"]) for r in table.to_pylist()]
    assert got == [
        (Decimal("1.08"), Decimal("0.9"), Decimal("10.8"), Decimal("9")),   # USD prices at 0.9 EUR
        (None, None, Decimal("9"), None),                                   # no rate: no price in EUR
        (None, None, Decimal("25"), None),                                  # 0 stated for a line costing 25
        (Decimal("0"), Decimal("0"), Decimal("0"), Decimal("0")),           # a free meter is free
    ]
    camel, _ = read_all(sample("billing/azure_export_header_variants_opencost/EnterpriseCamel.csv"))
    (line,) = camel.to_pylist()  # states effectivePrice and PayGPrice, no UnitPrice: a list price, no contracted one
    assert (line["ListUnitPrice"], line["ContractedUnitPrice"], line["ListCost"]) == (Decimal("0.004"), None, Decimal("0.012"))


def test_a_pay_as_you_go_month_to_date_export_restated_counts_once(tmp_path):
    """Pay-as-you-go's legacy layout states no billing period. Each day's month-to-date export
    restates the month: the charge's calendar month is its period, so the next day's export (one
    line restated to 0.5) replaces the day before's, and no line counts twice."""
    from pipelines.warehouse.connection import connect, fetch_all
    from tests.conftest import run_pipeline

    path = sample("billing/azure_payg_legacy_costreport_koku.csv")
    table, _ = read_all(path)
    assert {(str(s)[:10], str(e)[:10]) for s, e in zip(table["BillingPeriodStart"].to_pylist(),
                                                      table["BillingPeriodEnd"].to_pylist())} == {("2019-07-01", "2019-08-01")}
    text = path.read_text(encoding="utf-8-sig")
    restated = text.replace(",0.00010368,", ",0.5,")
    assert restated != text
    landing = tmp_path / "landing" / "costexports" / "payg-daily" / "20190701-20190731"
    landing.mkdir(parents=True)
    (landing / "payg-daily_0728.csv").write_text(text)
    assert run_pipeline(tmp_path / "landing", tmp_path / "wh.duckdb").success
    (landing / "payg-daily_0729.csv").write_text(restated)
    assert run_pipeline(tmp_path / "landing", tmp_path / "wh.duckdb").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        lines, total = fetch_all(conn, "SELECT count(*), sum(EffectiveCost) FROM core.cost_lines")[0]
        statuses = dict(fetch_all(conn, "SELECT regexp_extract(path, '[^/]+$'), status FROM raw.files"))
    finally:
        conn.close()
    assert (lines, total) == (3, own_total(path) - Decimal("0.00010368") + Decimal("0.5"))
    assert statuses == {"payg-daily_0728.csv": "superseded", "payg-daily_0729.csv": "loaded"}
