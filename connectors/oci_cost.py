"""Oracle Cloud (OCI) cost reports into FOCUS charges.

A line is one resource's usage in an interval: `cost/myCost` is what the tenancy pays for it
(BilledCost and EffectiveCost), `cost/unitPrice` × `usage/billedQuantity` its list price.
Corrections (`lineItem/isCorrection` = true) keep their sign and carry ChargeClass Correction.
`tags/NAMESPACE.KEY` columns become the Tags object.

The quantity's unit comes from `cost/billingUnitReadable` ("<block> <size> <time> <measure>":
`1 GiB MONTHS STORAGE_SIZE`, `1 GiB HOURS DATA_TRANSFERRED`, `1000000 NONE NONE DATAPOINTS`), which
states what `usage/billedQuantity` counts; `cost/skuUnitDescription` is the price list's wording and
says `GB Months` for outbound data transfer and `TB` for TiB-months of storage. Data transferred is
a size (the time there is the metering interval); anything else with a size is size × time
(`GiB-Months`), without one its measure × time (`OCPU-Hours`), and an instance's hours are plain
`Hours` (its running time, as the GPU-hour readings take it); a block stays a
block (`1000000 Datapoints`). A SKU whose description names GPUs keeps it (`GPU Per Hour`): the
GPU-hour readings are written against it.
"""

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, first_reason, header_fields, parse_decimal, parse_utc, split_rejected, stream_csv_as_strings, to_canonical
from connectors.kit import Connector, ReadContext
from models.currencies import ISO4217
from models.gpus import count_from_usage, instance_gpus_expr

SIGNATURE = ("lineItem/intervalUsageStart", "product/service", "cost/myCost", "cost/currencyCode")
CATEGORIES = {"COMPUTE": "Compute", "BLOCK_STORAGE": "Storage", "OBJECT_STORAGE": "Storage", "OBJECTSTORE": "Storage",
              "DATABASE": "Databases", "MYSQL": "Databases", "NETWORK": "Networking", "TELEMETRY": "Management and Governance",
              "ORACLE_STREAMING_SERVICE": "Analytics"}
SIZES = {"B": "Bytes", "KB": "KB", "MB": "MB", "GB": "GB", "TB": "TB", "PB": "PB",
         "KIB": "KiB", "MIB": "MiB", "GIB": "GiB", "TIB": "TiB", "PIB": "PiB"}
TIMES = {"SECONDS": "Seconds", "MINUTES": "Minutes", "HOURS": "Hours", "DAYS": "Days", "MONTHS": "Months", "YEARS": "Years"}
MEASURES = {"OCPUS": "OCPU", "ECPUS": "ECPU", "GPUS": "GPU"}
INSTANCE = ("INSTANCE", "INSTANCES")  # an instance's hours are its running time: plain `Hours`


def readable_unit(readable: pl.Expr, sku_unit: pl.Expr) -> pl.Expr:
    """The FOCUS unit of `usage/billedQuantity` from `cost/billingUnitReadable` (module doc), else
    the SKU's unit as written."""
    parts = readable.str.replace_all(r"\s+", " ").str.to_uppercase().str.split(" ")
    block, size, time, measure = (parts.list.get(i, null_on_oob=True) for i in range(4))
    size_unit = size.replace_strict(SIZES, default=None, return_dtype=pl.String)
    time_unit = time.replace_strict(TIMES, default=None, return_dtype=pl.String)
    measure_unit = pl.coalesce(measure.replace_strict(MEASURES, default=None, return_dtype=pl.String),
                               measure.str.replace_all("_", " ").str.to_titlecase())
    base = pl.when(size == "NONE").then(measure_unit).otherwise(size_unit)
    unit = (pl.when(measure == "DATA_TRANSFERRED").then(base)
            .when((time == "NONE") & ~((size == "NONE") & measure.is_in(INSTANCE))).then(base)
            .when((size == "NONE") & measure.is_in(INSTANCE)).then(pl.coalesce(time_unit, pl.lit("Instances")))
            .otherwise(pl.concat_str(base, pl.lit("-"), time_unit)))
    unit = pl.when(block == "1").then(unit).otherwise(pl.concat_str(block, pl.lit(" "), unit))
    understood = (parts.list.len() == 4) & block.str.contains(r"^[0-9]+$") & ((size == "NONE") | size_unit.is_not_null()) \
        & ((time == "NONE") | time_unit.is_not_null()) & ((size != "NONE") | (measure != "NONE"))
    return (pl.when(sku_unit.str.contains(r"(?i)\bgpus?\b")).then(sku_unit)
            .when(understood.fill_null(False)).then(unit).otherwise(sku_unit))


class OciCostConnector(Connector):
    name = "oci_cost"
    kind = "billing"
    recognises = "Oracle Cloud cost reports (lineItem/…, product/…, cost/myCost, cost/currencyCode)"

    def detect(self, path: Path, head: bytes) -> bool:
        return set(SIGNATURE) <= set(header_fields(head))

    def missing_columns(self, head: bytes) -> list[str] | None:
        names = set(header_fields(head))
        return [c for c in SIGNATURE if c not in names] if "cost/myCost" in names else None

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        for frame in stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name):
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            get = lambda c: pl.col(c).str.strip_chars() if c in frame.columns else pl.lit(None, dtype=pl.String)  # noqa: E731
            cost = parse_decimal("cost/myCost", 38, 10)
            start, end = parse_utc("lineItem/intervalUsageStart", "UTC"), parse_utc("lineItem/intervalUsageEnd", "UTC") if "lineItem/intervalUsageEnd" in frame.columns else pl.lit(None, dtype=pl.Datetime("us", "UTC"))
            frame = frame.with_columns(cost.alias("__cost"), start.alias("__start"), end.alias("__end"))
            reason = first_reason([
                (pl.col("__cost").is_null(), pl.format("cost/myCost '{}' is not a number", pl.col("cost/myCost").fill_null(""))),
                (pl.col("__start").is_null(), pl.format("lineItem/intervalUsageStart '{}' is not a time",
                                                        pl.col("lineItem/intervalUsageStart").fill_null(""))),
                (~get("cost/currencyCode").is_in(ISO4217).fill_null(False),
                 pl.format("currency '{}' is not an ISO 4217 code", get("cost/currencyCode").fill_null(""))),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns, amount=pl.col("__cost"),
                                      currency=get("cost/currencyCode"))
            if not accepted.height:
                continue
            tag_columns = [c for c in accepted.columns if c.startswith("tags/")]
            tags = pl.struct([pl.col(c).alias(c.removeprefix("tags/")) for c in tag_columns]).struct.json_encode() if tag_columns \
                else pl.lit(None, dtype=pl.String)
            unit = readable_unit(get("cost/billingUnitReadable"), get("cost/skuUnitDescription"))
            quantity = parse_decimal("usage/billedQuantity", 28, 10) if "usage/billedQuantity" in accepted.columns else pl.lit(None, dtype=pl.Decimal(28, 10))
            unit_price = parse_decimal("cost/unitPrice", 28, 12) if "cost/unitPrice" in accepted.columns else pl.lit(None, dtype=pl.Decimal(28, 12))
            # GPU shapes (BM.GPU.H100.8) and GPU SKUs billed per GPU-hour, through models/data/instance_gpus.csv.
            gpus = instance_gpus_expr(get("product/Description"))
            gpu_count = pl.when(gpus.struct.field("per_usage")).then(count_from_usage(
                quantity.cast(pl.Float64), pl.coalesce(get("cost/skuUnitDescription"), pl.lit("hours")),
                (pl.col("__end") - pl.col("__start")).dt.total_seconds())).otherwise(gpus.struct.field("count"))
            out = accepted.select(
                pl.col("__cost").alias("BilledCost"), pl.col("__cost").alias("EffectiveCost"), pl.col("__cost").alias("x_SourceCost"),
                pl.coalesce((quantity * unit_price).cast(pl.Decimal(38, 10), strict=False), pl.col("__cost")).alias("ListCost"),
                get("cost/currencyCode").alias("BillingCurrency"), pl.lit("Usage").alias("ChargeCategory"),
                pl.when(get("lineItem/isCorrection") == "true").then(pl.lit("Correction")).alias("ChargeClass"),
                pl.lit("Usage-Based").alias("ChargeFrequency"), pl.lit("Standard").alias("PricingCategory"),
                pl.col("__start").alias("ChargePeriodStart"), pl.coalesce("__end", "__start").alias("ChargePeriodEnd"),
                get("lineItem/tenantId").alias("BillingAccountId"), get("product/compartmentId").alias("SubAccountId"),
                get("product/compartmentName").alias("SubAccountName"), pl.lit("Oracle").alias("ProviderName"),
                pl.lit("Oracle").alias("PublisherName"), pl.lit("Oracle").alias("InvoiceIssuerName"),
                get("product/service").alias("ServiceName"),
                get("product/service").replace_strict(CATEGORIES, default="Other").alias("ServiceCategory"),
                get("product/Description").alias("ChargeDescription"), get("cost/productSku").alias("SkuId"),
                get("product/region").alias("RegionId"), get("product/availabilityDomain").alias("AvailabilityZone"),
                get("product/resourceId").alias("ResourceId"), quantity.alias("ConsumedQuantity"),
                unit.alias("ConsumedUnit"), unit_price.alias("ListUnitPrice"),
                # The unit price is per billed quantity, in its unit (FOCUS: every usage line is priced).
                # A quantity in no stated unit is priced in plain Units, as the other connectors price one.
                quantity.alias("PricingQuantity"),
                pl.when(quantity.is_not_null()).then(pl.coalesce(unit, pl.lit("Units"))).alias("PricingUnit"),
                get("cost/subscriptionId").alias("CommitmentDiscountId"), tags.alias("Tags"),
                gpus.struct.field("model").alias("x_GpuModel"), gpu_count.alias("x_GpuCount"),
                pl.struct(get("lineItem/referenceNo").alias("reference_no")).struct.json_encode().alias("x_ExtraColumns"),
                ROW_NUMBER,
            )
            yield to_canonical(out, self.schema, self.name, ctx)
