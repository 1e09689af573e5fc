"""AWS Cost and Usage Reports into FOCUS charges: legacy CSV (`lineItem/UnblendedCost` headers,
gzip or not) and CUR 2.0 / Athena snake_case names (`line_item_unblended_cost`).

Amortization follows FOCUS 1.2 (the commitment-discount scenarios of its appendix): BilledCost is
what the line bills (UnblendedCost); EffectiveCost is the reservation's or savings plan's effective
cost for covered usage (`DiscountedUsage`, `SavingsPlanCoveredUsage`) and zero on the lines whose
money amortization moves there: `SavingsPlanNegation`, the upfront `SavingsPlanUpfrontFee` and the
upfront `Fee` of a reservation (a `Fee` line with a reservation ARN). The recurring `RIFee` and
`SavingsPlanRecurringFee` lines are purchases (EffectiveCost 0); the unused part of the commitment
they state (`reservation/UnusedAmortizedUpfrontFeeForBillingPeriod` + `UnusedRecurringFee`,
`savingsPlan/TotalCommitmentToDate` − `UsedCommitment`) becomes a row of its own, a Usage charge with
BilledCost 0 and CommitmentDiscountStatus "Unused", as FOCUS shows unused commitment. So a month's
EffectiveCost adds up to AWS's amortized cost and its BilledCost to the invoice.

Line keys: `identity/LineItemId` is unique only within one time interval of one report, and AWS does
not keep it between reports, so `x_SourceLineId` is never the id alone: it is the id, the line's usage
interval, usage type and resource together (`<id>|<start>/<end>|<usage type>|<resource>`). Even so it
only says "the same line in the same report definition"; a restated delivery may give every line a
new id, so replacing deliveries must not rely on it.
"""

import csv
import re
from functools import cache
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import (
    ROW_NUMBER, cell_reason, failed, first_reason, short_value, header_fields, is_parquet, parse_decimal, parse_utc_series, split_rejected,
    stream_csv_as_strings, stream_parquet_as_strings, to_canonical,
)
from connectors.kit import Connector, ReadContext
from models.currencies import ISO4217
from models.gpus import instance_gpus_expr

CATEGORIES = Path(__file__).resolve().parent.parent / "models" / "data" / "aws_service_categories.csv"
SIGNATURE = ("line_item_unblended_cost", "line_item_usage_start_date", "line_item_line_item_type")
MONEY = ("line_item_unblended_cost", "reservation_effective_cost", "savings_plan_savings_plan_effective_cost",
         "savings_plan_total_commitment_to_date", "savings_plan_used_commitment",
         "reservation_unused_amortized_upfront_fee_for_billing_period", "reservation_unused_recurring_fee",
         "pricing_public_on_demand_cost")
CATEGORY = {"Tax": "Tax", "Credit": "Credit", "Refund": "Credit", "Fee": "Purchase", "RIFee": "Purchase",
            "SavingsPlanUpfrontFee": "Purchase", "SavingsPlanRecurringFee": "Purchase",
            # Discounts AWS applies to the bill reduce charges: FOCUS Credits.
            "BundledDiscount": "Credit", "EdpDiscount": "Credit", "PrivateRateDiscount": "Credit",
            "SppDiscount": "Credit", "DistributorDiscount": "Credit"}
# Both CUR generations' spellings: legacy `reservation/ReservationARN` snakes to `…_arn`, CUR 2.0
# and Athena write `…_a_r_n`; koku's exports spell the savings plan's `SavingsPlanArn`.
RESERVATION_ARN = ("reservation_reservation_arn", "reservation_reservation_a_r_n")
SAVINGS_PLAN_ARN = ("savings_plan_savings_plan_arn", "savings_plan_savings_plan_a_r_n")
COVERED = ("DiscountedUsage", "SavingsPlanCoveredUsage", "SavingsPlanNegation")
MARKETPLACE = "AWS Marketplace"


@cache
def service_categories() -> dict[str, str]:
    """AWS product code → FOCUS ServiceCategory (focus_converters' mapping, models/data/SOURCES.md)."""
    with open(CATEGORIES, newline="") as fh:
        return {r["product_code"]: r["ServiceCategory"] for r in csv.DictReader(fh)}


def snake(name: str) -> str:
    """`lineItem/UnblendedCost` → `line_item_unblended_cost` (CUR 2.0's spelling)."""
    if name.lower().startswith("resourcetags/"):
        return "tag:" + re.sub(r"^(user:)", "", name.split("/", 1)[1])
    parts = [re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", p).lower() for p in re.split(r"[/:]", name)]
    return "_".join(parts).replace(" ", "_")


# The time columns, parsed into these working columns (absent columns give nulls).
TIMES = (("line_item_usage_start_date", "__start"), ("line_item_usage_end_date", "__end"),
         ("bill_billing_period_start_date", "__period_start"), ("bill_billing_period_end_date", "__period_end"))


class AwsCurConnector(Connector):
    name = "aws_cur"
    kind = "billing"
    recognises = "AWS Cost and Usage Reports: legacy CSV (lineItem/… headers, optionally gzip) and CUR 2.0 snake_case names"

    def detect(self, path: Path, head: bytes) -> bool:
        if head.startswith(b"PAR1"):
            import pyarrow.parquet as pq

            return set(SIGNATURE) <= {snake(n) for n in pq.read_schema(path).names}
        return set(SIGNATURE) <= {snake(n) for n in header_fields(head)}

    def missing_columns(self, head: bytes) -> list[str] | None:
        names = {snake(n) for n in header_fields(head)}
        return [c for c in SIGNATURE if c not in names] if names & set(SIGNATURE) else None

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        frames = stream_parquet_as_strings(path, source_file=ctx.source_file) if is_parquet(path) else stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name)
        for frame in frames:
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            frame = frame.rename({c: snake(c) for c in source_columns})
            renamed = [c for c in frame.columns if c != ROW_NUMBER]
            for column in MONEY:
                if column not in frame.columns:
                    frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(column))
            money = {c: parse_decimal(c, 38, 10) for c in MONEY}
            # Each time column parsed once per frame (parse_utc_series: one format, not sixteen).
            frame = frame.with_columns(parse_utc_series(frame, src).alias(dst) for src, dst in TIMES)
            start = pl.col("__start")
            end = pl.col("__end")
            # A file without the column gets every line quarantined for it, not a crash.
            currency = short_value("line_item_currency_code") if "line_item_currency_code" in frame.columns \
                else pl.lit(None, dtype=pl.String)
            reason = first_reason([
                (failed("line_item_unblended_cost", money["line_item_unblended_cost"]) | money["line_item_unblended_cost"].is_null(),
                 cell_reason("lineItem/UnblendedCost", "line_item_unblended_cost", "not a number")),
                (start.is_null(), cell_reason("lineItem/UsageStartDate", "line_item_usage_start_date", "not a time")),
                (~currency.str.strip_chars().str.to_uppercase().is_in(ISO4217).fill_null(False),
                 pl.format("lineItem/CurrencyCode '{}' is not an ISO 4217 code", currency.fill_null(""))),
                *((failed(c, e), f"{c} is not a number") for c, e in money.items() if c != "line_item_unblended_cost"),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, renamed, amount=money["line_item_unblended_cost"],
                                      currency=currency.str.strip_chars().str.to_uppercase())
            if accepted.height:
                yield to_canonical(self._to_focus(accepted, money, start, end), self.schema, self.name, ctx)

    def _to_focus(self, frame: pl.DataFrame, money: dict, start: pl.Expr, end: pl.Expr) -> pl.DataFrame:
        get = lambda c: pl.col(c) if c in frame.columns else pl.lit(None, dtype=pl.String)  # noqa: E731
        first = lambda names: pl.coalesce([get(c) for c in names])  # noqa: E731
        kind = pl.col("line_item_line_item_type")
        zero = pl.lit(0).cast(pl.Decimal(38, 10))
        billed = money["line_item_unblended_cost"]
        reservation, savings_plan = first(RESERVATION_ARN), first(SAVINGS_PLAN_ARN)
        commitment = pl.coalesce(savings_plan, reservation)
        category = kind.replace_strict(CATEGORY, default="Usage")
        effective = (
            pl.when(kind == "DiscountedUsage").then(pl.coalesce(money["reservation_effective_cost"], billed))
            .when(kind == "SavingsPlanCoveredUsage").then(pl.coalesce(money["savings_plan_savings_plan_effective_cost"], billed))
            # The upfront payment of a reservation reaches EffectiveCost through the DiscountedUsage
            # and RIFee lines' amortized shares; counting the Fee too would count it twice.
            .when((kind == "Fee") & reservation.is_not_null()).then(zero)
            .when(kind.is_in(["SavingsPlanNegation", "SavingsPlanUpfrontFee", "SavingsPlanRecurringFee", "RIFee"])).then(zero)
            .otherwise(billed)
        ).cast(pl.Decimal(38, 10))
        # What of a recurring commitment fee went unused this period: its own Unused row (below).
        unused = (
            pl.when(kind == "SavingsPlanRecurringFee").then(
                pl.coalesce(money["savings_plan_total_commitment_to_date"] - money["savings_plan_used_commitment"], zero))
            .when(kind == "RIFee").then(
                pl.coalesce(money["reservation_unused_amortized_upfront_fee_for_billing_period"], zero)
                + pl.coalesce(money["reservation_unused_recurring_fee"], zero))
        ).cast(pl.Decimal(38, 10))
        pricing = (pl.when(category == "Tax").then(pl.lit(None, dtype=pl.String))
                   .when(category == "Purchase").then(pl.lit("Standard"))  # a commitment bought at the agreed rate
                   .when(kind.is_in(COVERED) & ((kind != "SavingsPlanNegation") | commitment.is_not_null()))
                   .then(pl.lit("Committed"))
                   .when(get("pricing_term").str.to_lowercase() == "spot").then(pl.lit("Dynamic"))
                   .when(get("line_item_usage_type").str.contains("SpotUsage")).then(pl.lit("Dynamic"))
                   .when(category == "Usage").then(pl.lit("Standard")))
        has_commitment = commitment.is_not_null()
        discount_type = (pl.when(savings_plan.is_not_null()).then(pl.lit("Savings Plan"))
                         .when(reservation.is_not_null()).then(pl.lit("Reserved Instance")))
        discount_category = (pl.when(savings_plan.is_not_null()).then(pl.lit("Spend"))
                             .when(reservation.is_not_null()).then(pl.lit("Usage")))
        status = pl.when(has_commitment & (category == "Usage")).then(pl.lit("Used"))
        # Marketplace lines are billed by AWS Marketplace but sold by the seller (lineItem/LegalEntity):
        # the seller is the publisher and, in FOCUS 1.3 terms, the service provider.
        marketplace = get("bill_billing_entity") == MARKETPLACE
        seller = pl.when(marketplace).then(get("line_item_legal_entity"))
        tag_columns = [c for c in frame.columns if c.startswith("tag:")]
        tags = (pl.struct([pl.col(c).alias(c[4:]) for c in tag_columns]).struct.json_encode() if tag_columns
                else get("resource_tags"))
        gpus = instance_gpus_expr(get("product_instance_type"))
        quantity = parse_decimal("line_item_usage_amount", 28, 10) if "line_item_usage_amount" in frame.columns else pl.lit(None)
        # The unused part of a fee's quantity, for its Unused row: a reservation states it
        # (reservation/UnusedQuantity); a savings plan's is the fee's hours in the unused share of
        # its commitment. Without either it is unknown (null), never the whole fee's.
        total = money["savings_plan_total_commitment_to_date"]
        unused_quantity = (
            pl.when(kind == "RIFee").then(parse_decimal("reservation_unused_quantity", 28, 10)
                                          if "reservation_unused_quantity" in frame.columns else pl.lit(None, dtype=pl.Decimal(28, 10)))
            .when((kind == "SavingsPlanRecurringFee") & (total > 0)).then(
                quantity.cast(pl.Decimal(38, 10)) * (total - pl.coalesce(money["savings_plan_used_commitment"], zero)) / total)
        ).cast(pl.Decimal(38, 10))
        stamp = lambda t: t.dt.strftime("%Y-%m-%dT%H:%M:%SZ").fill_null("")  # noqa: E731
        line_id = pl.when(get("identity_line_item_id").is_not_null()).then(pl.concat_str(
            get("identity_line_item_id"), pl.lit("|"), stamp(start), pl.lit("/"), stamp(pl.coalesce(end, start)), pl.lit("|"),
            get("line_item_usage_type").fill_null(""), pl.lit("|"), get("line_item_resource_id").fill_null("")))
        lines = frame.select(
            billed.alias("BilledCost"), effective.alias("EffectiveCost"), billed.alias("x_SourceCost"),
            line_id.alias("x_SourceLineId"),
            pl.coalesce(money["pricing_public_on_demand_cost"], billed).alias("ListCost"),
            get("line_item_currency_code").str.to_uppercase().alias("BillingCurrency"),
            category.alias("ChargeCategory"),
            pl.when(kind == "Refund").then(pl.lit("Correction")).alias("ChargeClass"),
            pricing.alias("PricingCategory"),
            start.alias("ChargePeriodStart"), pl.coalesce(end, start).alias("ChargePeriodEnd"),
            pl.col("__period_start").alias("BillingPeriodStart"), pl.col("__period_end").alias("BillingPeriodEnd"),
            get("bill_payer_account_id").alias("BillingAccountId"), get("line_item_usage_account_id").alias("SubAccountId"),
            get("bill_invoice_id").alias("InvoiceId"),
            pl.coalesce(get("bill_invoicing_entity"), pl.lit("Amazon Web Services, Inc.")).alias("InvoiceIssuerName"),
            pl.lit("AWS").alias("ProviderName"),
            pl.coalesce(seller, get("bill_billing_entity"), pl.lit("AWS")).alias("PublisherName"),
            pl.coalesce(seller, pl.lit("AWS")).alias("ServiceProviderName"),
            get("line_item_line_item_description").alias("ChargeDescription"),
            pl.coalesce(get("product_product_name"), get("product_servicename"), get("line_item_product_code")).alias("ServiceName"),
            get("line_item_resource_id").alias("ResourceId"),
            pl.coalesce(get("product_region_code"), get("product_region")).alias("RegionId"),
            get("product_location").alias("RegionName"), get("line_item_availability_zone").alias("AvailabilityZone"),
            get("product_sku").alias("SkuId"),
            # FOCUS: only usage consumes; usage and purchases are priced, in pricing/unit (a tax or a
            # credit is neither: a refunded transfer's GB would count as transferred again).
            pl.when(category == "Usage").then(quantity).alias("ConsumedQuantity"),
            pl.when(category == "Usage").then(get("pricing_unit")).alias("ConsumedUnit"),
            # A quantity in no stated unit (an upfront fee's) is priced in plain Units, as the Azure
            # connector prices one: FOCUS wants every usage and purchase line priced.
            pl.when(category.is_in(["Usage", "Purchase"])).then(quantity).alias("PricingQuantity"),
            pl.when(category.is_in(["Usage", "Purchase"]) & quantity.is_not_null())
              .then(pl.when(get("pricing_unit").str.strip_chars() != "").then(get("pricing_unit")).otherwise(pl.lit("Units")))
              .alias("PricingUnit"),
            commitment.alias("CommitmentDiscountId"), status.alias("CommitmentDiscountStatus"),
            discount_type.alias("CommitmentDiscountType"), discount_category.alias("CommitmentDiscountCategory"),
            tags.alias("Tags"),
            gpus.struct.field("model").alias("x_GpuModel"), gpus.struct.field("count").alias("x_GpuCount"),
            pl.struct(pl.col("line_item_line_item_type").alias("line_item_type"), get("line_item_usage_type").alias("usage_type"),
                      get("product_instance_type").alias("instance_type")).struct.json_encode().alias("x_ExtraColumns"),
            ROW_NUMBER,
            get("line_item_product_code").replace_strict(service_categories(), default="Other").alias("ServiceCategory"),
            unused.alias("__unused"),
            unused_quantity.alias("__unused_quantity"),
        )
        # The unused part of a recurring commitment fee: billed by the fee line already, so BilledCost
        # (and the source's own amount) 0 here; EffectiveCost carries it; nothing was consumed.
        none = lambda c: pl.lit(0).cast(lines.schema[c]).alias(c)  # noqa: E731
        unused_rows = lines.filter(pl.col("__unused").is_not_null() & (pl.col("__unused") != 0)).with_columns(
            none("BilledCost"), pl.col("__unused").cast(lines.schema["EffectiveCost"]).alias("EffectiveCost"),
            none("x_SourceCost"), none("ListCost"),
            pl.lit("Usage").alias("ChargeCategory"), pl.lit("Committed").alias("PricingCategory"),
            pl.when(pl.col("CommitmentDiscountId").is_not_null()).then(pl.lit("Unused")).alias("CommitmentDiscountStatus"),
            pl.lit(None, dtype=lines.schema["ConsumedQuantity"]).alias("ConsumedQuantity"),
            pl.lit(None, dtype=pl.String).alias("ConsumedUnit"),
            pl.col("__unused_quantity").cast(lines.schema["PricingQuantity"]).alias("PricingQuantity"),
            pl.when(pl.col("__unused_quantity").is_not_null()).then(pl.col("PricingUnit")).alias("PricingUnit"),
            pl.concat_str(pl.col("x_SourceLineId"), pl.lit("|unused")).alias("x_SourceLineId"),
            pl.concat_str(pl.lit("Unused commitment: "), pl.col("ChargeDescription").fill_null(pl.col("CommitmentDiscountType"))).alias("ChargeDescription"),
        )
        return pl.concat([lines, unused_rows], how="vertical").drop("__unused", "__unused_quantity")
