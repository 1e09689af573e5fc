"""GPU-rental clouds that export no FOCUS: one declarative mapping file per provider.

A mapping (connectors/mappings/*.yaml) names the file's columns for each canonical field, maps its
billing-mode words to monthly / on-demand / spot, and says how times are written. The connector
turns each invoice line into a FOCUS charge: costs exact, GPU model and count as x_ columns,
monthly plans as Committed/Recurring, on-demand as Standard/Usage-Based.
"""

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import yaml

from connectors._tabular import (
    ROW_NUMBER,
    failed,
    first_reason,
    header_fields,
    parse_decimal,
    parse_utc,
    split_rejected,
    stream_csv_as_strings,
    to_canonical,
)
from connectors.base import Connector, ConnectorError, ReadContext
from models.gpus import gpu_model_expr

MAPPINGS_DIR = Path(__file__).resolve().parent / "mappings"
PRICING = {"monthly": ("Committed", "Recurring"), "commit_1y": ("Committed", "Recurring"),
           "commit_3y": ("Committed", "Recurring"), "on_demand": ("Standard", "Usage-Based"),
           "spot": ("Dynamic", "Usage-Based")}


class GpuRentalConnector(Connector):
    kind = "billing"

    def __init__(self, mapping: dict, source: Path | None = None):
        self.mapping = mapping
        self.name = mapping["name"]
        self.columns: dict[str, str] = mapping["columns"]
        self.required = [self.columns[f] for f in mapping.get("required", [])]
        self.recognises = (f"GPU-rental invoices mapped by {source.name if source else self.name}: "
                           f"header has {', '.join(self.required)}")

    @classmethod
    def from_file(cls, path: Path) -> "GpuRentalConnector":
        return cls(yaml.safe_load(path.read_text(encoding="utf-8")), path)

    def detect(self, path: Path, head: bytes) -> bool:
        try:
            fields = set(header_fields(head.decode(self.mapping.get("encoding", "utf-8"), errors="strict").encode()))
        except UnicodeDecodeError:
            return False
        return set(self.required) <= fields

    def missing_columns(self, head: bytes) -> list[str] | None:
        try:
            names = set(header_fields(head.decode(self.mapping.get("encoding", "utf-8")).encode()))
        except UnicodeDecodeError:
            return None
        return [c for c in self.required if c not in names]

    def col(self, field: str) -> pl.Expr:
        return pl.col(self.columns[field]) if field in self.columns else pl.lit(None, dtype=pl.String)

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        timezone = self.mapping.get("timezone") or ctx.timezone
        encoding = self.mapping.get("encoding", "utf-8")
        formats = tuple(self.mapping.get("time_formats") or ())
        parse_time = (lambda c: parse_utc(c, timezone, formats)) if formats else (lambda c: parse_utc(c, timezone))  # noqa: E731
        for frame in stream_csv_as_strings(path, ctx.source_file, encoding=encoding):
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            missing = [c for c in self.required if c not in frame.columns]
            if missing:
                raise ConnectorError(ctx.source_file, f"columns missing for {self.name}: {', '.join(missing)}", line=1)
            frame = frame.with_columns(pl.col(source_columns).str.strip_chars())
            frame = frame.with_columns(
                parse_time(self.columns["start"]).alias("__start"),
                parse_time(self.columns["end"]).alias("__end"),
                parse_decimal(self.columns["amount"], 18, 6).alias("__amount"),
                self.col("gpu_count").cast(pl.Int32, strict=False).alias("__gpus"),
                self.col("billing_mode").str.to_lowercase().replace_strict(self._mode_words(), default=None).alias("__mode"),
            )
            reason = first_reason([
                (pl.col("__start").is_null(), pl.format("start '{}' is not a time", self.col("start").fill_null(""))),
                (pl.col("__end").is_null(), pl.format("end '{}' is not a time", self.col("end").fill_null(""))),
                (pl.col("__end") < pl.col("__start"), "end is before start"),
                (pl.col("__amount").is_null(), pl.format("amount '{}' is not a number", self.col("amount").fill_null(""))),
                (pl.col("__gpus").is_null() | (pl.col("__gpus") < 0), pl.format("GPU count '{}' is not a whole number", self.col("gpu_count").fill_null(""))),
                (pl.col("__mode").is_null(), pl.format("billing mode '{}' is not in the mapping", self.col("billing_mode").fill_null(""))),
                (~self._currency().str.contains(r"^[A-Z]{3}$").fill_null(False),
                 pl.format("currency '{}' is not an ISO 4217 code", self._currency().fill_null(""))),
                *( [(failed(self.columns["hours"], parse_decimal(self.columns["hours"], 28, 10)), "hours is not a number")]
                   if "hours" in self.columns and self.columns["hours"] in frame.columns else []),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns, amount=pl.col("__amount"))
            if accepted.height:
                yield to_canonical(self._to_focus(accepted), self.schema, self.name, ctx)

    def _currency(self) -> pl.Expr:
        return pl.coalesce(self.col("currency").str.strip_chars().str.to_uppercase(), pl.lit(self.mapping.get("default_currency")))

    def _mode_words(self) -> dict[str, str]:
        return {word.lower(): mode for mode, words in self.mapping["billing_modes"].items() for word in words}

    def _to_focus(self, frame: pl.DataFrame) -> pl.DataFrame:
        present = lambda field: field in self.columns and self.columns[field] in frame.columns  # noqa: E731
        get = lambda field: self.col(field) if present(field) else pl.lit(None, dtype=pl.String)  # noqa: E731
        hours = parse_decimal(self.columns["hours"], 28, 10) if present("hours") else pl.lit(None, dtype=pl.Decimal(28, 10))
        unit_price = parse_decimal(self.columns["unit_price"], 28, 12) if present("unit_price") else pl.lit(None, dtype=pl.Decimal(28, 12))
        provider = pl.coalesce(get("provider"), pl.lit(self.mapping["provider"]))
        currency = self._currency()
        # Invoices name no billing period: it is the calendar month of the charge, in the
        # provider's zone, so a re-exported month restates the earlier export.
        zone = self.mapping.get("timezone") or "UTC"
        month = pl.col("__start").dt.convert_time_zone(zone).dt.truncate("1mo")
        period_start = month.dt.convert_time_zone("UTC")
        period_end = month.dt.offset_by("1mo").dt.convert_time_zone("UTC")
        pricing = pl.col("__mode").replace_strict({m: p for m, (p, _) in PRICING.items()}, default="Other")
        frequency = pl.col("__mode").replace_strict({m: f for m, (_, f) in PRICING.items()}, default="Usage-Based")
        card_hours = hours * pl.col("__gpus").cast(pl.Decimal(28, 10))
        return frame.select(
            pl.col("__amount").alias("BilledCost"), pl.col("__amount").alias("EffectiveCost"), pl.col("__amount").alias("x_SourceCost"),
            pl.coalesce((card_hours * unit_price).cast(pl.Decimal(18, 6), strict=False), pl.col("__amount")).alias("ListCost"),
            currency.alias("BillingCurrency"), get("account_id").alias("BillingAccountId"), get("account_id").alias("SubAccountId"),
            pl.lit("Usage").alias("ChargeCategory"), frequency.alias("ChargeFrequency"), pricing.alias("PricingCategory"),
            pl.col("__start").alias("ChargePeriodStart"), pl.col("__end").alias("ChargePeriodEnd"),
            period_start.alias("BillingPeriodStart"), period_end.alias("BillingPeriodEnd"),
            pl.format("{}x {} {}", pl.col("__gpus"), get("gpu_model"), pl.col("__mode")).alias("ChargeDescription"),
            card_hours.alias("ConsumedQuantity"), pl.lit("GPU-Hours").alias("ConsumedUnit"),
            card_hours.alias("PricingQuantity"), pl.lit("GPU-Hours").alias("PricingUnit"),
            unit_price.alias("ListUnitPrice"), unit_price.alias("ContractedUnitPrice"),
            get("invoice_id").alias("InvoiceId"), provider.alias("ProviderName"), provider.alias("PublisherName"),
            provider.alias("InvoiceIssuerName"), get("region").alias("RegionId"), get("region").alias("RegionName"),
            get("resource_id").alias("ResourceId"), get("resource_name").alias("ResourceName"),
            pl.lit("GPU instance").alias("ResourceType"), pl.lit("Compute").alias("ServiceCategory"),
            pl.lit("GPU Instances").alias("ServiceName"),
            pl.concat_str(gpu_model_expr(get("gpu_model")), pl.lit("-"), pl.col("__mode")).alias("SkuId"),
            gpu_model_expr(get("gpu_model")).alias("x_GpuModel"), pl.col("__gpus").alias("x_GpuCount"),
            pl.struct([pl.col(c) for c in frame.columns if c not in self.columns.values() and not c.startswith("__") and c != ROW_NUMBER]
                      or [pl.lit(None).alias("none")]).struct.json_encode().alias("x_ExtraColumns"),
            ROW_NUMBER,
        )


def mapping_connectors() -> list[GpuRentalConnector]:
    """One connector per mapping file shipped in connectors/mappings/."""
    return [GpuRentalConnector.from_file(p) for p in sorted(MAPPINGS_DIR.glob("*.yaml"))]
