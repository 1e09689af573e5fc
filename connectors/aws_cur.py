"""AWS Cost and Usage Reports into FOCUS charges: legacy CSV (`lineItem/UnblendedCost` headers,
gzip or not) and CUR 2.0 / Athena snake_case names (`line_item_unblended_cost`).

Amortization follows FOCUS: BilledCost is what the line bills (UnblendedCost); EffectiveCost is
the reservation's or savings plan's effective cost for covered usage, zero for the negation and
upfront-fee lines that amortization moves elsewhere, the unused part for recurring RI and savings
plan fees, and the billed cost for everything else.
"""

import csv
import re
from functools import cache
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors._tabular import (
    ROW_NUMBER, failed, first_reason, header_fields, is_parquet, parse_decimal, parse_utc, split_rejected,
    stream_csv_as_strings, stream_parquet_as_strings, to_canonical,
)
from connectors.base import Connector, ReadContext
from models.gpus import instance_gpus_expr

CATEGORIES = Path(__file__).resolve().parent.parent / "models" / "data" / "aws_service_categories.csv"
SIGNATURE = ("line_item_unblended_cost", "line_item_usage_start_date", "line_item_line_item_type")
MONEY = ("line_item_unblended_cost", "reservation_effective_cost", "savings_plan_savings_plan_effective_cost",
         "savings_plan_total_commitment_to_date", "savings_plan_used_commitment",
         "reservation_unused_amortized_upfront_fee_for_billing_period", "reservation_unused_recurring_fee",
         "pricing_public_on_demand_cost")
CATEGORY = {"Tax": "Tax", "Credit": "Credit", "Refund": "Credit", "Fee": "Purchase", "RIFee": "Purchase",
            "SavingsPlanUpfrontFee": "Purchase", "SavingsPlanRecurringFee": "Purchase"}


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
            money = {c: parse_decimal(c, 18, 6) for c in MONEY}
            start = parse_utc("line_item_usage_start_date")
            end = parse_utc("line_item_usage_end_date") if "line_item_usage_end_date" in frame.columns else pl.lit(None, dtype=pl.Datetime("us", "UTC"))
            reason = first_reason([
                (failed("line_item_unblended_cost", money["line_item_unblended_cost"]) | money["line_item_unblended_cost"].is_null(),
                 pl.format("lineItem/UnblendedCost '{}' is not a number", pl.col("line_item_unblended_cost").fill_null(""))),
                (start.is_null(), pl.format("lineItem/UsageStartDate '{}' is not a time", pl.col("line_item_usage_start_date").fill_null(""))),
                *((failed(c, e), f"{c} is not a number") for c, e in money.items() if c != "line_item_unblended_cost"),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, renamed, amount=money["line_item_unblended_cost"])
            if accepted.height:
                yield to_canonical(self._to_focus(accepted, money, start, end), self.schema, self.name, ctx)

    def _to_focus(self, frame: pl.DataFrame, money: dict, start: pl.Expr, end: pl.Expr) -> pl.DataFrame:
        get = lambda c: pl.col(c) if c in frame.columns else pl.lit(None, dtype=pl.String)  # noqa: E731
        kind = pl.col("line_item_line_item_type")
        zero = pl.lit(0).cast(pl.Decimal(18, 6))
        billed = money["line_item_unblended_cost"]
        effective = (
            pl.when(kind == "DiscountedUsage").then(pl.coalesce(money["reservation_effective_cost"], billed))
            .when(kind == "SavingsPlanCoveredUsage").then(pl.coalesce(money["savings_plan_savings_plan_effective_cost"], billed))
            .when(kind.is_in(["SavingsPlanNegation", "SavingsPlanUpfrontFee"])).then(zero)
            .when(kind == "SavingsPlanRecurringFee").then(
                pl.coalesce(money["savings_plan_total_commitment_to_date"] - money["savings_plan_used_commitment"], zero))
            .when(kind == "RIFee").then(
                pl.coalesce(money["reservation_unused_amortized_upfront_fee_for_billing_period"], zero)
                + pl.coalesce(money["reservation_unused_recurring_fee"], zero))
            .otherwise(billed)
        ).cast(pl.Decimal(18, 6))
        pricing = (pl.when(kind.is_in(["DiscountedUsage", "SavingsPlanCoveredUsage"])).then(pl.lit("Committed"))
                   .when(get("pricing_term").str.to_lowercase() == "spot").then(pl.lit("Dynamic"))
                   .when(get("line_item_usage_type").str.contains("SpotUsage")).then(pl.lit("Dynamic"))
                   .when(kind.is_in(["Usage", "SavingsPlanNegation"])).then(pl.lit("Standard")))
        tag_columns = [c for c in frame.columns if c.startswith("tag:")]
        tags = (pl.struct([pl.col(c).alias(c[4:]) for c in tag_columns]).struct.json_encode() if tag_columns
                else get("resource_tags"))
        gpus = instance_gpus_expr(get("product_instance_type"))
        quantity = parse_decimal("line_item_usage_amount", 28, 10) if "line_item_usage_amount" in frame.columns else pl.lit(None)
        return frame.select(
            billed.alias("BilledCost"), effective.alias("EffectiveCost"), billed.alias("x_SourceCost"),
            get("identity_line_item_id").alias("x_SourceLineId"),
            pl.coalesce(money["pricing_public_on_demand_cost"], billed).alias("ListCost"),
            get("line_item_currency_code").str.to_uppercase().alias("BillingCurrency"),
            kind.replace_strict(CATEGORY, default="Usage").alias("ChargeCategory"),
            pl.when(kind == "Refund").then(pl.lit("Correction")).alias("ChargeClass"),
            pricing.alias("PricingCategory"),
            start.alias("ChargePeriodStart"), pl.coalesce(end, start).alias("ChargePeriodEnd"),
            *((parse_utc(src) if src in frame.columns else pl.lit(None, dtype=pl.Datetime("us", "UTC"))).alias(dst)
              for src, dst in (("bill_billing_period_start_date", "BillingPeriodStart"),
                               ("bill_billing_period_end_date", "BillingPeriodEnd"))),
            get("bill_payer_account_id").alias("BillingAccountId"), get("line_item_usage_account_id").alias("SubAccountId"),
            get("bill_invoice_id").alias("InvoiceId"),
            pl.coalesce(get("bill_invoicing_entity"), pl.lit("Amazon Web Services, Inc.")).alias("InvoiceIssuerName"),
            pl.lit("AWS").alias("ProviderName"), pl.coalesce(get("bill_billing_entity"), pl.lit("AWS")).alias("PublisherName"),
            get("line_item_line_item_description").alias("ChargeDescription"),
            pl.coalesce(get("product_product_name"), get("product_servicename"), get("line_item_product_code")).alias("ServiceName"),
            get("line_item_resource_id").alias("ResourceId"),
            pl.coalesce(get("product_region_code"), get("product_region")).alias("RegionId"),
            get("product_location").alias("RegionName"), get("line_item_availability_zone").alias("AvailabilityZone"),
            get("product_sku").alias("SkuId"), quantity.alias("ConsumedQuantity"), get("pricing_unit").alias("ConsumedUnit"),
            pl.coalesce(get("savings_plan_savings_plan_a_r_n"), get("savings_plan_savings_plan_arn"),
                        get("reservation_reservation_a_r_n")).alias("CommitmentDiscountId"),
            tags.alias("Tags"),
            gpus.struct.field("model").alias("x_GpuModel"), gpus.struct.field("count").alias("x_GpuCount"),
            pl.struct(pl.col("line_item_line_item_type").alias("line_item_type"), get("line_item_usage_type").alias("usage_type"),
                      get("product_instance_type").alias("instance_type")).struct.json_encode().alias("x_ExtraColumns"),
            ROW_NUMBER,
            get("line_item_product_code").replace_strict(service_categories(), default="Other").alias("ServiceCategory"),
        )
