"""Azure cost details exports (EA, MCA, pay-as-you-go; actual and amortized) into FOCUS charges.

Header spellings differ across agreements and years (PascalCase, camelCase, `PreTaxCost` vs
`CostInBillingCurrency`, localized headers carrying the English name in parentheses, a UTF-8
BOM): every name is reduced to a lower-case key and matched against the aliases below.
Commitment handling follows FOCUS where the export says what a line is (ChargeType,
PricingModel): usage a reservation or savings plan covered bills nothing and is effective at its
amortized cost; a commitment purchase bills its price and is effective at zero.
"""

import csv
import re
from functools import cache
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors._tabular import ROW_NUMBER, first_reason, header_fields, parse_decimal, parse_utc, split_rejected, stream_csv_as_strings, to_canonical
from connectors.base import Connector, ReadContext
from models.currencies import ISO4217
from models.gpus import instance_gpus_expr

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
    "unit_price": ("unitprice", "effectiveprice", "resourcerate"),
    "charge_type": ("chargetype",),
    "pricing_model": ("pricingmodel",),
    "reservation": ("reservationid",),
    "tags": ("tags",),
    "publisher": ("publishername",),
    "consumed_service": ("consumedservice",),
    "pricing_currency": ("pricingcurrency", "pricingcurrencycode"),
    "exchange_rate": ("exchangeratepricingtobilling", "exchangerate"),
    "additional_info": ("additionalinfo",),
    "meter_subcategory": ("metersubcategory",),
}
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


class AzureCostConnector(Connector):
    name = "azure_cost"
    kind = "billing"
    recognises = "Azure cost details exports: EA, MCA and pay-as-you-go, actual or amortized, any header spelling"

    def detect(self, path: Path, head: bytes) -> bool:
        fields = _resolve(header_fields(head))
        markers = {key(h) for h in header_fields(head)} & {"metercategory", "meterid", "subscriptionguid", "subscriptionid"}
        return {"cost", "date"} <= fields.keys() and len(markers) >= 2

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        for frame in stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name):
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            fields = _resolve(source_columns)
            get = lambda f: pl.col(fields[f]).str.strip_chars() if f in fields else pl.lit(None, dtype=pl.String)  # noqa: E731
            cost = parse_decimal(fields["cost"], 18, 6)
            # Azure writes dates as MM/DD/YYYY in many exports and ISO in others; both are UTC days.
            day = pl.coalesce(get("date").str.to_datetime("%m/%d/%Y", strict=False, time_unit="us", time_zone="UTC"),
                              parse_utc(fields["date"], "UTC"))
            currency = get("currency").str.to_uppercase()
            frame = frame.with_columns(cost.alias("__cost"), day.alias("__day"), currency.alias("__currency"))
            reason = first_reason([
                (pl.col("__cost").is_null(), pl.format("cost '{}' is not a number", pl.col(fields["cost"]).fill_null(""))),
                (pl.col("__day").is_null(), pl.format("date '{}' is not a date", pl.col(fields["date"]).fill_null(""))),
                (~pl.col("__currency").is_in(ISO4217).fill_null(False),
                 pl.format("currency '{}' is not an ISO 4217 code", pl.col("__currency").fill_null(""))),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns, amount=pl.col("__cost"))
            if not accepted.height:
                continue
            charge_type = get("charge_type").fill_null("Usage")
            committed = get("pricing_model").is_in(["Reservation", "SavingsPlan"])
            covered = committed & (charge_type == "Usage")
            purchase_of_commitment = (charge_type == "Purchase") & (committed | get("reservation").is_not_null())
            zero = pl.lit(0).cast(pl.Decimal(18, 6))
            by_type, sub_by_type, by_service = service_categories()
            resource_type = get("resource_id").str.to_lowercase().str.extract(r"/providers/([^/]+/[^/]+)")
            rate = parse_decimal(fields["exchange_rate"], 28, 12) if "exchange_rate" in fields else pl.lit(None, dtype=pl.Decimal(28, 12))
            # The VM size is in AdditionalInfo's ServiceType (e.g. Standard_ND96amsr_A100_v4).
            vm_size = pl.coalesce(get("additional_info").str.extract(r'"ServiceType"\s*:\s*"([^"]+)"'),
                                  get("meter_subcategory").str.extract(r"(Standard_[A-Za-z0-9_]+)"))
            gpus = instance_gpus_expr(vm_size)
            tags = get("tags")
            tags = pl.when(tags.is_null() | (tags == "")).then(None).when(tags.str.starts_with("{")).then(tags) \
                .otherwise(pl.concat_str(pl.lit("{"), tags, pl.lit("}")))  # some exports drop the braces
            out = accepted.select(
                pl.when(covered).then(zero).otherwise(pl.col("__cost")).alias("BilledCost"),
                pl.when(purchase_of_commitment).then(zero).otherwise(pl.col("__cost")).alias("EffectiveCost"),
                pl.col("__cost").alias("ListCost"), pl.col("__cost").alias("x_SourceCost"),
                pl.col("__currency").alias("BillingCurrency"),
                charge_type.replace_strict(CATEGORY, default="Usage").alias("ChargeCategory"),
                pl.when(charge_type.is_in(["UnusedReservation", "UnusedSavingsPlan"])).then(pl.lit("Unused"))
                  .when(covered).then(pl.lit("Used")).alias("CommitmentDiscountStatus"),
                get("reservation").alias("CommitmentDiscountId"),
                pl.when(committed).then(pl.lit("Committed")).when(get("pricing_model") == "Spot").then(pl.lit("Dynamic"))
                  .when(charge_type == "Usage").then(pl.lit("Standard")).alias("PricingCategory"),
                pl.col("__day").alias("ChargePeriodStart"), pl.col("__day").dt.offset_by("1d").alias("ChargePeriodEnd"),
                *((pl.coalesce(get(src).str.to_datetime("%m/%d/%Y", strict=False, time_unit="us", time_zone="UTC"),
                               parse_utc(fields[src], "UTC") if src in fields else pl.lit(None, dtype=pl.Datetime("us", "UTC")))
                   .alias(dst)) for src, dst in (("period_start", "BillingPeriodStart"), ("period_end", "BillingPeriodEnd"))),
                pl.coalesce(get("billing_account"), get("subscription")).alias("BillingAccountId"),
                get("billing_account_name").alias("BillingAccountName"),
                get("subscription").alias("SubAccountId"), get("subscription_name").alias("SubAccountName"),
                pl.lit("Microsoft").alias("ProviderName"), pl.coalesce(get("publisher"), pl.lit("Microsoft")).alias("PublisherName"),
                pl.lit("Microsoft").alias("InvoiceIssuerName"),
                get("service").alias("ServiceName"), get("meter").alias("ChargeDescription"),
                get("resource_id").alias("ResourceId"), get("resource_name").alias("ResourceName"),
                get("region").alias("RegionId"), parse_decimal(fields["quantity"], 28, 10).alias("ConsumedQuantity") if "quantity" in fields
                else pl.lit(None).alias("ConsumedQuantity"),
                get("unit").alias("ConsumedUnit"),
                parse_decimal(fields["unit_price"], 28, 12).alias("ListUnitPrice") if "unit_price" in fields else pl.lit(None).alias("ListUnitPrice"),
                tags.alias("Tags"),
                gpus.struct.field("model").alias("x_GpuModel"), gpus.struct.field("count").alias("x_GpuCount"),
                pl.coalesce(resource_type.replace_strict(by_type, default=None),
                            get("consumed_service").str.to_lowercase().replace_strict(by_service, default=None),
                            pl.lit("Other")).alias("ServiceCategory"),
                resource_type.replace_strict(sub_by_type, default=None).alias("ServiceSubcategory"),
                get("pricing_currency").str.to_uppercase().alias("PricingCurrency"),
                # Costs are in the billing currency; the pricing-currency cost divides by the exchange rate.
                pl.when(get("pricing_currency").is_not_null() & rate.is_not_null() & (rate > 0))
                  .then((pl.col("__cost").cast(pl.Decimal(38, 12)) / rate).cast(pl.Decimal(18, 6)))
                  .alias("PricingCurrencyEffectiveCost"),
                ROW_NUMBER,
            )
            yield to_canonical(out, self.schema, self.name, ctx)
