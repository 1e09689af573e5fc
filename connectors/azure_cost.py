"""Azure cost details exports (EA, MCA, pay-as-you-go; actual and amortized) into FOCUS charges.

Header spellings differ across agreements and years (PascalCase, camelCase, `PreTaxCost` vs
`CostInBillingCurrency`, localized headers carrying the English name in parentheses, a UTF-8
BOM): every name is reduced to a lower-case key and matched against the aliases below.
Commitment handling follows FOCUS where the export says what a line is (ChargeType,
PricingModel): usage a reservation or savings plan covered bills nothing and is effective at its
amortized cost; a commitment purchase bills its price and is effective at zero; an
`UnusedReservation`/`UnusedSavingsPlan` row is Usage with CommitmentDiscountStatus Unused, bills
nothing and has no ConsumedQuantity (its hours are the CommitmentDiscountQuantity).

Azure writes the same charges twice, as an actual-cost and an amortized-cost dataset. Every row
says which one its file is (`x_AzureDataset`, see `dataset_of`) and carries `x_AzureChargeKey`,
the columns that name one charge identically in both datasets, so that the warehouse can merge
the two into one row per charge (BilledCost from actual, EffectiveCost from amortized: the
`azure_actual_amortized` macro in sql/macros.sql).
"""

import csv
import json
import re
from functools import cache
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, cell_reason, first_reason, header_fields, parse_decimal, parse_utc, split_rejected, stream_csv_as_strings, to_canonical
from connectors.kit import Connector, ReadContext
from models.currencies import ISO4217
from models.gpus import AZURE_METER_SIZE, GPU_STRUCT, instance_gpus_expr

SERVICES = Path(__file__).resolve().parent.parent / "models" / "data" / "azure_services.csv"


@cache
def service_categories() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """finops-toolkit's service table: resource type → category and subcategory, consumed service → category."""
    by_type, sub_by_type, by_service = {}, {}, {}
    with open(SERVICES, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["ResourceType"]:
                by_type.setdefault(r["ResourceType"].lower(), r["ServiceCategory"])
                sub_by_type.setdefault(r["ResourceType"].lower(), r["ServiceSubcategory"])
            if r["ConsumedService"]:
                by_service.setdefault(r["ConsumedService"].lower(), r["ServiceCategory"])
    return by_type, sub_by_type, by_service


PRICING_UNITS = SERVICES.with_name("azure_pricing_units.csv")


@cache
def pricing_units() -> tuple[dict[str, str], dict[str, int]]:
    """finops-toolkit's pricing units by lower-cased UnitOfMeasure ('10 hours', '10k', '1 gb/month'):
    its distinct unit ('Hours', 'Units', 'GB/Month') and pricing block size (10, 10000, 1)."""
    distinct, block = {}, {}
    with open(PRICING_UNITS, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            unit = r["UnitOfMeasure"].strip().lower()
            distinct.setdefault(unit, r["DistinctUnits"])
            block.setdefault(unit, int(r["PricingBlockSize"]))
    return distinct, block


# The largest block a unit the table lacks may name ('1000000 Units'); a larger or zero count is no block.
MAX_BLOCK = 1_000_000_000


def unit_columns(unit: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(distinct unit, block) of an Azure UnitOfMeasure: '10K' is (Units, 10000), '1 Hour' (Hours, 1).

    Cost details count Quantity in UnitOfMeasure, which may be a block, and price the block: a '10K'
    line of 0.1351 at 0.0005 costs 0.00006755, 1,351 operations. In the distinct unit that is
    1,351 Units at 0.00000005 (`in_units`, `price_of_one`), so cost = unit price × PricingQuantity
    still holds, as FOCUS requires, and the unit is one FOCUS's UnitFormat takes (a block of a
    compound unit, '10000 GB/Month', is not). A unit the table lacks is read as '<block> <unit>'
    where it starts with a whole number of at least one, else as a unit of its own."""
    distinct_of, block_of = pricing_units()
    key = unit.str.to_lowercase()
    parsed = unit.str.extract_groups(r"^([0-9]+)\s+(\S.*)$")
    parsed_block = parsed.struct.field("1").cast(pl.Int64, strict=False)
    parsed_ok = parsed_block.is_between(1, MAX_BLOCK).fill_null(False)
    distinct = key.replace_strict(distinct_of, default=pl.when(parsed_ok).then(parsed.struct.field("2")).otherwise(unit),
                                  return_dtype=pl.String)
    block = key.replace_strict(block_of, default=pl.when(parsed_ok).then(parsed_block).otherwise(pl.lit(1)),
                               return_dtype=pl.Int64).cast(pl.Decimal(38, 0))
    return distinct, block


def in_units(quantity: pl.Expr, block: pl.Expr) -> pl.Expr:
    return (quantity.cast(pl.Decimal(38, 10)) * block).cast(pl.Decimal(38, 10))


def price_of_one(price: pl.Expr, block: pl.Expr) -> pl.Expr:
    """A block's price per distinct unit; left unknown, not rounded, where twelve decimals cannot
    hold it (0.25 per 10^11 Units)."""
    one = (price.cast(pl.Decimal(38, 18)) / block).cast(pl.Decimal(38, 12))
    return pl.when((one * block).cast(pl.Decimal(38, 12)) == price.cast(pl.Decimal(38, 12))).then(one)


ALIASES = {
    "cost": ("costinbillingcurrency", "cost", "pretaxcost"),
    "date": ("date", "usagedatetime"),
    "currency": ("billingcurrencycode", "billingcurrency", "currency"),
    "subscription": ("subscriptionid", "subscriptionguid"),
    "subscription_name": ("subscriptionname",),
    "billing_account": ("billingaccountid",),
    "billing_account_name": ("billingaccountname",),
    "period_start": ("billingperiodstartdate",),
    "period_end": ("billingperiodenddate",),
    "resource_id": ("resourceid", "instanceid"),
    "resource_name": ("resourcename",),
    "region": ("resourcelocation",),
    "service": ("metercategory", "servicename"),
    "meter": ("metername",),
    "quantity": ("quantity", "usagequantity"),
    "unit": ("unitofmeasure",),
    "payg_price": ("paygprice",),
    "contracted_price": ("unitprice", "resourcerate"),
    "charge_type": ("chargetype",),
    "pricing_model": ("pricingmodel",),
    "reservation": ("reservationid",),
    "benefit": ("benefitid",),
    "benefit_name": ("benefitname", "reservationname"),
    "meter_id": ("meterid",),
    "tags": ("tags",),
    "publisher": ("publishername",),
    "consumed_service": ("consumedservice",),
    "pricing_currency": ("pricingcurrency", "pricingcurrencycode"),
    "exchange_rate": ("exchangeratepricingtobilling", "exchangerate"),
    "additional_info": ("additionalinfo",),
    "meter_subcategory": ("metersubcategory",),
}
UNUSED = ("UnusedReservation", "UnusedSavingsPlan")
COMMITMENT_MODELS = ("Reservation", "SavingsPlan")
CATEGORY = {"Usage": "Usage", "Purchase": "Purchase", "Refund": "Credit", "Tax": "Tax",
            "RoundingAdjustment": "Adjustment", "UnusedReservation": "Usage", "UnusedSavingsPlan": "Usage"}


def key(header: str) -> str:
    """`Kosten (Cost)` → `cost`; `CostInBillingCurrency` → `costinbillingcurrency`."""
    inner = re.search(r"\(([^()]+)\)\s*$", header)
    return re.sub(r"[^a-z0-9]", "", (inner.group(1) if inner else header).lower())


def _resolve(headers: list[str]) -> dict[str, str]:
    by_key = {key(h): h for h in headers}
    found = {}
    for field, options in ALIASES.items():
        for option in options:
            if option in by_key:
                found[field] = by_key[option]
                break
    return found


def _manifest_dataset(path: Path) -> str | None:
    """An Azure export's `manifest.json` in the file's folder says the dataset it wrote:
    exportConfig.type is ActualCost or AmortizedCost (FocusCost and others say nothing here)."""
    manifest = path.parent / "manifest.json"
    try:
        kind = str(json.loads(manifest.read_text(encoding="utf-8-sig"))["exportConfig"]["type"]).lower()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return "amortized" if "amortized" in kind else "actual" if "actual" in kind else None


def _row_evidence(frame: pl.DataFrame, fields: dict[str, str]) -> str | None:
    """What a frame's own rows prove about its dataset. Only amortized data has unused-commitment
    rows and covered usage with a cost; only actual data bills a commitment purchase (amortized
    data spreads it over the usage and shows no purchase cost)."""
    col = lambda f: pl.col(fields[f]).str.strip_chars() if f in fields else pl.lit(None, dtype=pl.String)  # noqa: E731
    charge_type, model = col("charge_type"), col("pricing_model")
    cost = pl.col(fields["cost"]).str.strip_chars().cast(pl.Float64, strict=False).fill_null(0)
    committed = model.is_in(COMMITMENT_MODELS).fill_null(False)
    found = frame.select(
        (charge_type.is_in(UNUSED).fill_null(False) | (committed & (charge_type == "Usage").fill_null(False) & (cost != 0))).any().alias("amortized"),
        (((charge_type == "Purchase").fill_null(False) & (committed | col("reservation").is_not_null() | col("benefit").is_not_null()))
         & (cost != 0)).any().alias("actual"),
    ).row(0, named=True)
    return "amortized" if found["amortized"] else "actual" if found["actual"] else None


def dataset_of(path: Path, source_file: str) -> str:
    """Whether a file is Azure's actual-cost or amortized-cost dataset: the export's manifest
    when there is one, else the first rows that prove it, else the file's name; a file that
    shows no sign either way (no commitment rows: both datasets are the same) counts as actual,
    the dataset the invoice is made of."""
    if found := _manifest_dataset(path):
        return found
    try:
        for frame in stream_csv_as_strings(path, source_file):
            fields = _resolve([c for c in frame.columns if c != ROW_NUMBER])
            if "cost" in fields and (found := _row_evidence(frame, fields)):
                return found
    except Exception:  # noqa: BLE001 - the read proper reports what is wrong with the file
        pass
    name = source_file.lower()
    return "amortized" if "amortized" in name else "actual"


def billing_period_day(src: str, get, fields: dict) -> pl.Expr:
    """A billing period date column as a UTC timestamp: MM/DD/YYYY or ISO."""
    return pl.coalesce(get(src).str.to_datetime("%m/%d/%Y", strict=False, time_unit="us", time_zone="UTC"),
                       parse_utc(fields[src], "UTC") if src in fields else pl.lit(None, dtype=pl.Datetime("us", "UTC")))


def exclusive_end(end: pl.Expr) -> pl.Expr:
    """Cost details name the period's last day (09/30/2023); FOCUS's end is exclusive: the next day,
    where that day begins a month (an end already exclusive, 10/01/2023, is kept)."""
    next_day = end.dt.offset_by("1d")
    return pl.when((next_day.dt.day() == 1) & (end.dt.time() == pl.time(0))).then(next_day).otherwise(end)


class AzureCostConnector(Connector):
    name = "azure_cost"
    kind = "billing"
    recognises = "Azure cost details exports: EA, MCA and pay-as-you-go, actual or amortized, any header spelling"

    def detect(self, path: Path, head: bytes) -> bool:
        fields = _resolve(header_fields(head))
        markers = {key(h) for h in header_fields(head)} & {"metercategory", "meterid", "subscriptionguid", "subscriptionid"}
        return {"cost", "date"} <= fields.keys() and len(markers) >= 2

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        dataset = dataset_of(path, ctx.source_file)
        for frame in stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name):
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            fields = _resolve(source_columns)
            get = lambda f: pl.col(fields[f]).str.strip_chars() if f in fields else pl.lit(None, dtype=pl.String)  # noqa: E731
            cost = parse_decimal(fields["cost"], 38, 10)
            # Azure writes dates as MM/DD/YYYY in many exports and ISO in others; both are UTC days.
            day = pl.coalesce(get("date").str.to_datetime("%m/%d/%Y", strict=False, time_unit="us", time_zone="UTC"),
                              parse_utc(fields["date"], "UTC"))
            currency = get("currency").str.to_uppercase()
            frame = frame.with_columns(cost.alias("__cost"), day.alias("__day"), currency.alias("__currency"))
            reason = first_reason([
                (pl.col("__cost").is_null(), cell_reason("cost", fields["cost"], "not a number")),
                (pl.col("__day").is_null(), cell_reason("date", fields["date"], "not a date")),
                (~pl.col("__currency").is_in(ISO4217).fill_null(False),
                 pl.format("currency '{}' is not an ISO 4217 code", pl.col("__currency").fill_null(""))),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns, amount=pl.col("__cost"),
                                      currency=pl.col("__currency"))
            if not accepted.height:
                continue
            charge_type = get("charge_type").fill_null("Usage")
            committed = get("pricing_model").is_in(COMMITMENT_MODELS)
            covered = committed & (charge_type == "Usage")
            unused = charge_type.is_in(UNUSED)
            commitment_id = pl.coalesce(get("benefit"), get("reservation"))
            purchase_of_commitment = (charge_type == "Purchase") & (committed | commitment_id.is_not_null())
            quantity = parse_decimal(fields["quantity"], 28, 10) if "quantity" in fields else pl.lit(None, dtype=pl.Decimal(28, 10))
            commitment_type = pl.when(get("pricing_model") == "SavingsPlan").then(pl.lit("Savings Plan")) \
                .when(get("pricing_model") == "Reservation").then(pl.lit("Reservation")) \
                .when(charge_type == "UnusedSavingsPlan").then(pl.lit("Savings Plan")) \
                .when(charge_type == "UnusedReservation").then(pl.lit("Reservation"))
            # The columns that name one charge alike in the actual and the amortized dataset (not
            # its cost or prices, which are what differ): day, subscription, meter, resource,
            # charge type, commitment and quantity.
            charge_key = pl.concat_str([e.fill_null("") for e in (
                pl.col("__day").dt.strftime("%Y-%m-%d"), get("subscription").str.to_lowercase(),
                pl.coalesce(get("meter_id"), get("meter")).str.to_lowercase(), get("resource_id").str.to_lowercase(),
                charge_type, commitment_id.str.to_lowercase(), quantity.cast(pl.String), get("unit"))], separator="|")
            zero = pl.lit(0).cast(pl.Decimal(38, 10))
            by_type, sub_by_type, by_service = service_categories()
            resource_type = get("resource_id").str.to_lowercase().str.extract(r"/providers/([^/]+/[^/]+)")
            rate = parse_decimal(fields["exchange_rate"], 28, 12) if "exchange_rate" in fields else pl.lit(None, dtype=pl.Decimal(28, 12))
            # The VM size is in AdditionalInfo's ServiceType (e.g. Standard_ND96amsr_A100_v4).
            vm_size = pl.coalesce(get("additional_info").str.extract(r'"ServiceType"\s*:\s*"([^"]+)"'),
                                  get("meter_subcategory").str.extract(r"(Standard_[A-Za-z0-9_]+)"),
                                  # else the meter name: "ND96amsr A100 v4" → Standard_ND96amsr_A100_v4
                                  pl.concat_str(pl.lit("Standard_"), get("meter").str.extract(AZURE_METER_SIZE, 1).str.replace_all(" ", "_")))
            # With none of the columns that name a VM size, there is nothing to look up (a lookup of a
            # literal would not broadcast to the frame's height).
            gpus = instance_gpus_expr(vm_size) if {"additional_info", "meter_subcategory", "meter"} & fields.keys() \
                else pl.lit(None, dtype=GPU_STRUCT)
            tags = get("tags")
            category = charge_type.replace_strict(CATEGORY, default="Usage")
            # FOCUS: no ConsumedQuantity on an unused commitment or on anything but Usage.
            no_consumption = unused | category.ne("Usage")
            stated_unit = get("unit")
            stated_unit = pl.when(stated_unit != "").then(stated_unit)  # a blank unit is none
            unit, block = unit_columns(stated_unit)
            consumed = in_units(quantity, block)
            # Prices per block, in the billing currency: UnitPrice (or a pay-as-you-go ResourceRate) is
            # the negotiated one (FOCUS's contracted price), PayGPrice the retail list price. An MCA
            # export states them in its pricing currency, with the rate to the billing one: without
            # that rate they cannot be billing money. A price of 0 on a line that costs something
            # (reservation usage, Marketplace charges) states no price; EffectivePrice is after
            # commitment discounts, neither list nor contracted.
            foreign = get("pricing_currency").is_not_null() & (get("pricing_currency").str.to_uppercase() != pl.col("__currency"))
            to_billing = pl.when(~foreign.fill_null(False)).then(pl.lit(1).cast(pl.Decimal(28, 12))) \
                .when(rate > 0).then(rate.cast(pl.Decimal(28, 12)))

            def price(field: str) -> pl.Expr:
                stated = parse_decimal(fields[field], 28, 12) if field in fields else pl.lit(None, dtype=pl.Decimal(28, 12))
                in_billing = (stated.cast(pl.Decimal(38, 18)) * to_billing).cast(pl.Decimal(38, 12))
                return pl.when((stated != 0) | (pl.col("__cost") == 0)).then(in_billing)

            contracted_price = price("contracted_price")
            list_price = pl.coalesce(price("payg_price"), contracted_price)
            # FOCUS prices usage and purchases (an unused commitment's hours too); a credit, tax or
            # adjustment gets no pricing quantity (a refund's GB would count as transferred again).
            priced = category.is_in(["Usage", "Purchase"])
            tags = pl.when(tags.is_null() | (tags == "")).then(None).when(tags.str.starts_with("{")).then(tags) \
                .otherwise(pl.concat_str(pl.lit("{"), tags, pl.lit("}")))  # some exports drop the braces
            out = accepted.select(
                pl.when(covered | unused).then(zero).otherwise(pl.col("__cost")).alias("BilledCost"),
                pl.when(purchase_of_commitment).then(zero).otherwise(pl.col("__cost")).alias("EffectiveCost"),
                # List and contracted cost: their price × the line's quantity, where it is priced;
                # a credit, tax or adjustment is its own cost at either.
                pl.when(priced & quantity.is_not_null() & list_price.is_not_null())
                  .then((list_price * quantity).cast(pl.Decimal(38, 10))).otherwise(pl.col("__cost")).alias("ListCost"),
                pl.when(priced & quantity.is_not_null() & contracted_price.is_not_null())
                  .then((contracted_price * quantity).cast(pl.Decimal(38, 10))).alias("ContractedCost"),
                pl.col("__cost").alias("x_SourceCost"),
                pl.col("__currency").alias("BillingCurrency"),
                category.alias("ChargeCategory"),
                pl.when(unused).then(pl.lit("Unused"))
                  .when(covered).then(pl.lit("Used")).alias("CommitmentDiscountStatus"),
                commitment_id.alias("CommitmentDiscountId"), get("benefit_name").alias("CommitmentDiscountName"),
                commitment_type.alias("CommitmentDiscountType"),
                pl.when(commitment_type == "Savings Plan").then(pl.lit("Spend"))
                  .when(commitment_type.is_not_null()).then(pl.lit("Usage")).alias("CommitmentDiscountCategory"),
                pl.when(unused | covered).then(quantity).alias("CommitmentDiscountQuantity"),
                pl.when(committed | unused).then(pl.lit("Committed")).when(get("pricing_model") == "Spot").then(pl.lit("Dynamic"))
                  .when(charge_type == "Usage").then(pl.lit("Standard")).alias("PricingCategory"),
                pl.col("__day").alias("ChargePeriodStart"), pl.col("__day").dt.offset_by("1d").alias("ChargePeriodEnd"),
                # Pay-as-you-go's legacy layout states no billing period: the charge's calendar month
                # (UTC), as core.cost_lines fills it, so the ledger sees each month-to-date export
                # restate the month (a line without a period would count beside its restatement).
                pl.coalesce(billing_period_day("period_start", get, fields),
                            pl.col("__day").dt.truncate("1mo")).alias("BillingPeriodStart"),
                pl.coalesce(exclusive_end(billing_period_day("period_end", get, fields)),
                            pl.col("__day").dt.truncate("1mo").dt.offset_by("1mo")).alias("BillingPeriodEnd"),
                pl.coalesce(get("billing_account"), get("subscription")).alias("BillingAccountId"),
                get("billing_account_name").alias("BillingAccountName"),
                get("subscription").alias("SubAccountId"), get("subscription_name").alias("SubAccountName"),
                pl.lit("Microsoft").alias("ProviderName"), pl.coalesce(get("publisher"), pl.lit("Microsoft")).alias("PublisherName"),
                pl.lit("Microsoft").alias("InvoiceIssuerName"),
                get("service").alias("ServiceName"), get("meter").alias("ChargeDescription"),
                get("resource_id").alias("ResourceId"), get("resource_name").alias("ResourceName"),
                get("region").alias("RegionId"),
                pl.when(no_consumption).then(None).otherwise(consumed).alias("ConsumedQuantity"),
                pl.when(no_consumption | quantity.is_null()).then(None).otherwise(unit).alias("ConsumedUnit"),
                # An export with a quantity in no stated unit (pay-as-you-go's legacy layout) prices it
                # in plain Units: FOCUS wants a priced quantity on every usage line (PricingQuantity-C-005-C).
                pl.when(priced & quantity.is_not_null()).then(consumed).alias("PricingQuantity"),
                pl.when(priced & quantity.is_not_null()).then(pl.coalesce(unit, pl.lit("Units"))).alias("PricingUnit"),
                pl.when(priced).then(price_of_one(list_price, block)).alias("ListUnitPrice"),
                pl.when(priced).then(price_of_one(contracted_price, block)).alias("ContractedUnitPrice"),
                tags.alias("Tags"),
                gpus.struct.field("model").alias("x_GpuModel"), gpus.struct.field("count").alias("x_GpuCount"),
                pl.coalesce(resource_type.replace_strict(by_type, default=None),
                            get("consumed_service").str.to_lowercase().replace_strict(by_service, default=None),
                            pl.lit("Other")).alias("ServiceCategory"),
                resource_type.replace_strict(sub_by_type, default=None).alias("ServiceSubcategory"),
                get("pricing_currency").str.to_uppercase().alias("PricingCurrency"),
                # Costs are in the billing currency; the pricing-currency cost divides by the exchange rate.
                pl.when(get("pricing_currency").is_not_null() & rate.is_not_null() & (rate > 0))
                  .then((pl.col("__cost").cast(pl.Decimal(38, 12)) / rate).cast(pl.Decimal(38, 10)))
                  .alias("PricingCurrencyEffectiveCost"),
                pl.lit(dataset).alias("x_AzureDataset"), charge_key.alias("x_AzureChargeKey"),
                # The meter's own category and subcategory ('Bandwidth' / 'Inter-Region'): the data
                # transfer path of a line is read from them (sql/macros.sql, transfer_path).
                pl.struct(get("service").alias("meter_category"), get("meter_subcategory").alias("meter_subcategory"))
                  .struct.json_encode().alias("x_ExtraColumns"),
                ROW_NUMBER,
            )
            yield to_canonical(out, self.schema, self.name, ctx)
