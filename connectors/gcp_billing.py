"""Google Cloud billing export (BigQuery standard export flattened to CSV, dotted column names).

Each line becomes a charge at its `cost`, of the ChargeCategory its `cost_type` says (regular →
Usage, tax → Tax, adjustment and rounding_error → Adjustment); each entry of its `credits` array
becomes a Credit charge of its own (FOCUS keeps credits as their own rows), so the lines of a day sum
to what the invoice bills. Times carry their offset; `invoice.month` (YYYYMM) is the billing period.

Usage lines carry what was consumed (`usage.amount` in `usage.unit`) and priced
(`usage.amount_in_pricing_units` in `usage.pricing_unit`). Tags are one JSON object of the line's
labels: the project's labels first, then the system labels, then the resource's own labels, a later
one winning on the same key (a resource label overrides the project's). The resource-level export's
`resource.global_name` and `resource.name` are ResourceId and ResourceName; the standard export has
neither, and they stay null.
"""

import ast
import csv
import json
from functools import cache
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, cell_reason, first_reason, header_fields, parse_decimal, parse_utc, split_rejected, stream_csv_as_strings, to_canonical
from connectors.kit import Connector, ConnectorError, ReadContext, open_text, read_head, text_lines
from models.currencies import ISO4217
from models.gpus import gpu_model_expr

CATEGORIES = Path(__file__).resolve().parent.parent / "models" / "data" / "gcp_service_categories.csv"
SIGNATURE = ("billing_account_id", "service.description", "sku.id", "usage_start_time", "cost", "currency")
CREDIT = pl.Struct({"name": pl.String, "amount": pl.String, "type": pl.String})
# cost_type → FOCUS ChargeCategory; a line without one (older exports) is usage.
COST_TYPES = {"regular": "Usage", "tax": "Tax", "adjustment": "Adjustment", "rounding_error": "Adjustment"}
# Label columns in the order they merge into Tags: a later one wins on the same key.
LABEL_COLUMNS = ("project.labels", "system_labels", "labels")


@cache
def service_categories() -> dict[str, str]:
    """GCP service description → FOCUS ServiceCategory (focus_converters' mapping, models/data/SOURCES.md)."""
    with open(CATEGORIES, newline="") as fh:
        return {r["ConsumedService"]: r["ServiceCategory"] for r in csv.DictReader(fh)}


def flat_keys(record: dict, prefix: str = "") -> list[str]:
    """{"service": {"description": …}} → ["service.description"]: the CSV flattening's names."""
    keys = []
    for name, value in record.items():
        if isinstance(value, dict):
            keys += flat_keys(value, f"{prefix}{name}.")
        else:
            keys.append(prefix + name)
    return keys


def flatten(record: dict, prefix: str = "") -> dict[str, str | None]:
    row: dict[str, str | None] = {}
    for name, value in record.items():
        if isinstance(value, dict):
            row.update(flatten(value, f"{prefix}{name}."))
        elif isinstance(value, list):
            row[prefix + name] = json.dumps(value)
        else:
            row[prefix + name] = None if value is None else str(value)
    return row


def stream_json_lines(path: Path, ctx: ReadContext, chunk: int = 50_000) -> Iterator[pl.DataFrame]:
    """The BigQuery export as JSON lines, flattened to the CSV export's dotted columns, in chunks."""
    with open_text(path) as fh:  # "\r" alone is no line break; gzip or a one-file zip decompressed
        number = 0
        while lines := text_lines(fh, chunk, ctx.source_file):
            rows = []
            for line in lines:
                number += 1
                if not line.strip():
                    continue
                try:
                    rows.append({**flatten(json.loads(line)), ROW_NUMBER: number})
                except (ValueError, AttributeError) as exc:  # AttributeError: valid JSON, but not an object
                    ctx.quarantine("gcp_billing", number, f"not a JSON object: {exc}", line.rstrip("\n"))
            if rows:
                columns = sorted({k for r in rows for k in r if k != ROW_NUMBER})
                yield pl.DataFrame([{c: r.get(c) for c in columns} | {ROW_NUMBER: r[ROW_NUMBER]} for r in rows],
                                   schema={**{c: pl.String for c in columns}, ROW_NUMBER: pl.Int64})


def parse_credits(text: str | None) -> list[dict]:
    """The export writes credits as JSON or as a Python-style list (single quotes, None)."""
    if not text or text.strip() in ("[]", ""):
        return []
    try:
        try:
            items = json.loads(text)
        except ValueError:
            items = ast.literal_eval(text)  # a literal only: no code runs
        return [{"name": i.get("full_name") or i.get("name"), "amount": str(i.get("amount")), "type": i.get("type")} for i in items]
    except (ValueError, TypeError, SyntaxError, AttributeError, MemoryError, RecursionError, SystemError):  # SystemError: CPython's parser on some unicode
        return None  # not a list of credits: the row is quarantined


def _literal(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return ast.literal_eval(text)  # the CSV export's Python-style lists; a literal only, no code runs


def merge_labels(texts: dict[str, str | None]) -> str | None:
    """The label columns of one line (lists of {key, value}, as JSON or Python literals) as one
    compact JSON object, or None when there are none; a list that cannot be read raises ValueError."""
    tags: dict[str, str | None] = {}
    for column in LABEL_COLUMNS:
        text = texts.get(column)
        if not text or not text.strip() or text.strip() in ("[]", "{}"):
            continue
        try:
            items = _literal(text)
            if isinstance(items, dict):  # a map, as some flattenings write labels
                items = [{"key": k, "value": v} for k, v in items.items()]
            for item in items:
                tags[str(item["key"])] = None if item.get("value") is None else str(item["value"])
        except (ValueError, TypeError, SyntaxError, KeyError, AttributeError, MemoryError, RecursionError, SystemError) as exc:
            raise ValueError(f"{column} is not a list of labels") from exc
    return json.dumps(tags, separators=(",", ":"), ensure_ascii=False) if tags else None


def _tags_or_error(texts: dict[str, str | None]) -> dict[str, str | None]:
    try:
        return {"tags": merge_labels(texts), "error": None}
    except ValueError as exc:
        return {"tags": None, "error": str(exc)}


class GcpBillingConnector(Connector):
    name = "gcp_billing"
    kind = "billing"
    recognises = "Google Cloud billing export, flattened CSV or BigQuery JSON lines (billing_account_id, service.description, sku.id, cost, credits, invoice.month)"

    def detect(self, path: Path, head: bytes) -> bool:
        if head.lstrip().startswith(b"{"):
            first = head.lstrip().split(b"\n", 1)[0]
            try:
                record = json.loads(first)
            except ValueError:
                return False
            return isinstance(record, dict) and set(SIGNATURE) <= set(flat_keys(record))
        return set(SIGNATURE) <= set(header_fields(head))

    def missing_columns(self, head: bytes) -> list[str] | None:
        names = set(header_fields(head))
        return [c for c in SIGNATURE if c not in names] if "billing_account_id" in names else None

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        is_json = read_head(path, 1024, tolerate_cut=True).lstrip().startswith(b"{")
        frames = stream_json_lines(path, ctx) if is_json else stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name)
        for frame in frames:
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            if missing := [c for c in (*SIGNATURE, "usage_end_time") if c not in frame.columns]:
                raise ConnectorError(ctx.source_file, f"columns missing: {', '.join(missing)}", line=1)
            cost = parse_decimal("cost", 38, 10)
            start, end = parse_utc("usage_start_time"), parse_utc("usage_end_time")
            credits = pl.col("credits").map_elements(parse_credits, return_dtype=pl.List(CREDIT)) if "credits" in frame.columns \
                else pl.lit([], dtype=pl.List(CREDIT))
            labels = [c for c in LABEL_COLUMNS if c in frame.columns]
            tags = (pl.struct(labels).map_elements(_tags_or_error, return_dtype=pl.Struct({"tags": pl.String, "error": pl.String}))
                    if labels else pl.lit(None, dtype=pl.Struct({"tags": pl.String, "error": pl.String})))
            category = (pl.col("cost_type").str.strip_chars().str.to_lowercase().replace_strict(COST_TYPES, default="Usage")
                        .fill_null("Usage") if "cost_type" in frame.columns else pl.lit("Usage"))
            frame = frame.with_columns(cost.alias("__cost"), start.alias("__start"), end.alias("__end"), credits.alias("__credits"),
                                       tags.alias("__tags"), category.alias("__category"))
            reason = first_reason([
                (pl.col("__cost").is_null(), cell_reason("cost", "cost", "not a number")),
                (pl.col("__start").is_null(), cell_reason("usage_start_time", "usage_start_time", "not a time")),
                (~pl.col("currency").is_in(ISO4217).fill_null(False), pl.format("currency '{}' is not an ISO 4217 code", pl.col("currency").fill_null(""))),
                (pl.col("__credits").is_null() & (pl.col("credits").is_not_null() if "credits" in frame.columns else pl.lit(False)),
                 "credits is not a list of credits"),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns, amount=pl.col("__cost"),
                                      currency=pl.col("currency"))
            if not accepted.height:
                continue
            # Labels are not money: a line whose labels cannot be read loads without Tags, with a warning.
            if bad := accepted.filter(pl.col("__tags").struct.field("error").is_not_null()).height:
                first = accepted.filter(pl.col("__tags").struct.field("error").is_not_null()).row(0, named=True)
                ctx.warn(f"{bad} line(s) load without Tags: {first['__tags']['error']} (first at data row {first[ROW_NUMBER]})")
            usage = self._charges(accepted, pl.col("__cost"), pl.col("__category"),
                                  pl.col("sku.description") if "sku.description" in accepted.columns else pl.lit(None, dtype=pl.String))
            credit_rows = accepted.explode("__credits").drop_nulls("__credits").with_columns(pl.col("__credits").struct.unnest())
            credit = self._charges(credit_rows, parse_decimal("amount", 38, 10), pl.lit("Credit"),
                                   pl.concat_str(pl.lit("Credit: "), pl.col("name").fill_null(pl.col("type"))))
            # Credits are money the file states too: they belong in its source total.
            ctx.declare_money(str(credit.select(pl.col("BilledCost").sum()).item() or 0))
            yield to_canonical(pl.concat([usage, credit], how="vertical"), self.schema, self.name, ctx)

    def _charges(self, frame: pl.DataFrame, amount: pl.Expr, category: pl.Expr, description: pl.Expr) -> pl.DataFrame:
        get = lambda c: pl.col(c) if c in frame.columns else pl.lit(None, dtype=pl.String)  # noqa: E731
        month = pl.concat_str(get("invoice.month").str.slice(0, 4), pl.lit("-"), get("invoice.month").str.slice(4, 2), pl.lit("-01T00:00:00Z"))
        period_start = month.str.to_datetime("%Y-%m-%dT%H:%M:%SZ", strict=False, time_unit="us", time_zone="UTC")
        return frame.select(
            amount.alias("BilledCost"), amount.alias("EffectiveCost"), amount.alias("ListCost"), amount.alias("x_SourceCost"),
            pl.col("currency").alias("BillingCurrency"), category.alias("ChargeCategory"),
            pl.when(category == "Usage").then(pl.lit("Usage-Based")).otherwise(pl.lit("One-Time")).alias("ChargeFrequency"),
            pl.when(category == "Usage").then(pl.lit("Standard")).alias("PricingCategory"),
            pl.when(category == "Usage").then(parse_decimal("usage.amount", 28, 10) if "usage.amount" in frame.columns else pl.lit(None))
              .alias("ConsumedQuantity"),
            pl.when(category == "Usage").then(get("usage.unit")).alias("ConsumedUnit"),
            pl.col("__tags").struct.field("tags").alias("Tags"),
            pl.coalesce(get("resource.global_name"), get("resource.name")).alias("ResourceId"),
            get("resource.name").alias("ResourceName"),
            pl.col("__start").alias("ChargePeriodStart"), pl.coalesce("__end", "__start").alias("ChargePeriodEnd"),
            period_start.alias("BillingPeriodStart"), period_start.dt.offset_by("1mo").alias("BillingPeriodEnd"),
            pl.col("billing_account_id").alias("BillingAccountId"), get("project.id").alias("SubAccountId"),
            get("project.name").alias("SubAccountName"), pl.lit("Google Cloud").alias("ProviderName"),
            pl.lit("Google Cloud").alias("PublisherName"), pl.lit("Google Cloud").alias("InvoiceIssuerName"),
            # GPU time is its own SKU ("Nvidia Tesla A100 GPU running in Americas"), metered in GPU-seconds.
            pl.when((category == "Usage") & get("sku.description").str.contains(r"(?i)\bGPU\b"))
              .then(gpu_model_expr(get("sku.description").str.replace(r"(?i)^nvidia\s+(tesla\s+)?", "")
                                   .str.replace(r"(?i)\s+GPU.*$", ""))).alias("x_GpuModel"),
            pl.when((category == "Usage") & get("sku.description").str.contains(r"(?i)\bGPU\b")
                    & (get("usage.unit") == "seconds"))
              .then((get("usage.amount").cast(pl.Float64, strict=False)
                     / (pl.col("__end") - pl.col("__start")).dt.total_seconds()).round(0).cast(pl.Int32, strict=False))
              .alias("x_GpuCount"),
            get("service.description").alias("ServiceName"), get("sku.id").alias("SkuId"), description.alias("ChargeDescription"),
            get("location.region").alias("RegionId"), get("location.location").alias("RegionName"),
            get("location.zone").alias("AvailabilityZone"),
            pl.when(category == "Usage").then(parse_decimal("usage.amount_in_pricing_units", 28, 10)).alias("PricingQuantity") if "usage.amount_in_pricing_units" in frame.columns else pl.lit(None).alias("PricingQuantity"),
            pl.when(category == "Usage").then(get("usage.pricing_unit")).alias("PricingUnit"),
            get("service.description").replace_strict(service_categories(), default="Other").alias("ServiceCategory"),
            pl.struct(get("cost_type").alias("cost_type"), get("export_time").alias("export_time")).struct.json_encode().alias("x_ExtraColumns"),
            ROW_NUMBER,
        )
