"""FOCUS exports (1.0 to 1.3), as CSV or Parquet, into `core.cost_lines`' canonical schema.

FOCUS columns are parsed by their kind; every other column of the file, provider `x_` columns
included, is kept in `x_ExtraColumns` as JSON. The FinOps Foundation's sample data writes NULL as
the bare string `NULL`, so that reads as a null.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from connectors.kit import (
    ROW_NUMBER,
    failed,
    first_reason,
    header_fields,
    is_parquet,
    parse_decimal,
    parse_utc_series,
    split_rejected,
    stream_csv_as_strings,
    stream_parquet_as_strings,
    to_canonical,
)
from connectors.kit import Connector, ConnectorError, ReadContext
from models.currencies import ISO4217
from models.focus import (
    FOCUS_COLUMN_NAMES,
    FOCUS_COLUMNS,
    MONEY,
    PRICE,
    QUANTITY,
    RENAMED_COLUMNS,
    TIMESTAMP,
)
from models.gpus import gpu_model_expr, identify_gpus
from models.schemas import MONEY_TYPE, PRICE_TYPE, QUANTITY_TYPE

# A file is FOCUS when its header carries these (under their current or 1.0-preview names).
SIGNATURE = ({"BilledCost"}, {"ChargePeriodStart"}, {"BillingCurrency"}, {"ChargeCategory", "ChargeType"})
NULL_STRINGS = ("", "NULL", "null")
# Extension columns this project defines itself: read into typed columns, not into x_ExtraColumns.
OWN_EXTENSIONS = ("x_GpuModel", "x_GpuCount")
_DECIMAL_TYPES = {MONEY: MONEY_TYPE, PRICE: PRICE_TYPE, QUANTITY: QUANTITY_TYPE}


def _is_focus_header(names: set[str]) -> bool:
    return all(names & group for group in SIGNATURE)


class FocusConnector(Connector):
    name = "focus"
    kind = "billing"
    recognises = "FOCUS 1.0–1.3 cost and usage exports, CSV or Parquet (header has BilledCost, ChargePeriodStart, BillingCurrency, ChargeCategory)"

    def detect(self, path: Path, head: bytes) -> bool:
        if head.startswith(b"PAR1"):
            return _is_focus_header(set(pq.read_schema(path).names))
        return _is_focus_header(set(header_fields(head)))

    def missing_columns(self, head: bytes) -> list[str] | None:
        if head.startswith(b"PAR1"):
            return None
        names = set(header_fields(head))
        return [sorted(group)[0] for group in SIGNATURE if not names & group]

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        frames = stream_parquet_as_strings(path, NULL_STRINGS, ctx.source_file) if is_parquet(path) else stream_csv_as_strings(
            path, ctx.source_file, null_values=NULL_STRINGS, ctx=ctx, connector=self.name
        )
        for frame in frames:
            accepted = self._normalise(frame, ctx)
            if accepted.height:
                yield to_canonical(accepted, self.schema, self.name, ctx)

    def _normalise(self, frame: pl.DataFrame, ctx: ReadContext) -> pl.DataFrame:
        frame = frame.rename({old: new for old, new in RENAMED_COLUMNS.items() if old in frame.columns and new not in frame.columns})
        source_columns = [c for c in frame.columns if c != ROW_NUMBER]
        extras = [c for c in source_columns if c not in FOCUS_COLUMN_NAMES and c not in OWN_EXTENSIONS]

        parsed: dict[str, pl.Expr] = {}
        checks: list[tuple[pl.Expr, pl.Expr | str]] = []
        for col in FOCUS_COLUMNS:
            if col.name not in frame.columns:
                if col.required:
                    raise ConnectorError(ctx.source_file, f"required FOCUS column {col.name} is missing", line=1)
                continue
            if col.kind == TIMESTAMP:
                # FOCUS times are UTC by the spec, whatever --timezone says; parsed once, in one format.
                frame = frame.with_columns(parse_utc_series(frame, col.name, "UTC").alias(f"__time_{col.name}"))
                expr = pl.col(f"__time_{col.name}")
            elif col.kind in _DECIMAL_TYPES:
                t = _DECIMAL_TYPES[col.kind]
                expr = parse_decimal(col.name, t.precision, t.scale)
            else:
                expr = pl.col(col.name).str.strip_chars()
            parsed[col.name] = expr
            if col.kind != "text" and col.kind != "json":
                checks.append((failed(col.name, expr), pl.format(f"{col.name} is not a valid {col.kind}: '{{}}'", pl.col(col.name))))
            if col.required:
                checks.append((expr.is_null(), f"required {col.name} is empty"))
        if "x_GpuCount" in frame.columns:
            gpu_count = pl.col("x_GpuCount").str.strip_chars().cast(pl.Int32, strict=False)
            checks.append((failed("x_GpuCount", gpu_count), "x_GpuCount is not a whole number"))
            parsed["x_GpuCount"] = gpu_count
        if "x_GpuModel" in frame.columns:
            parsed["x_GpuModel"] = gpu_model_expr(pl.col("x_GpuModel"))  # the canonical key (models/data/gpu_models.csv)
        # Native exports carry no x_GpuCount: the GPUs come from SkuPriceDetails or the instance type
        # (models.gpus.identify_gpus); this project's own x_GpuModel/x_GpuCount columns, where given, win.
        period = (parsed["ChargePeriodEnd"] - parsed["ChargePeriodStart"]).dt.total_seconds()
        model, count = identify_gpus(source_columns, period)
        parsed["x_GpuModel"] = pl.coalesce(parsed["x_GpuModel"], model) if "x_GpuModel" in parsed else model
        parsed["x_GpuCount"] = pl.coalesce(parsed["x_GpuCount"], count) if "x_GpuCount" in parsed else count
        checks.append((
            ~parsed["BillingCurrency"].is_in(ISO4217),
            pl.format("BillingCurrency '{}' is not an ISO 4217 code", pl.col("BillingCurrency")),
        ))
        checks.append((
            pl.col("ChargePeriodEnd").is_not_null() & (parsed["ChargePeriodEnd"] < parsed["ChargePeriodStart"]),
            "ChargePeriodEnd is before ChargePeriodStart",
        ))

        accepted = split_rejected(frame, first_reason(checks), ctx, self.name, source_columns, amount=parsed["BilledCost"],
                                  currency=parsed["BillingCurrency"])
        extra_json = pl.struct(extras).struct.json_encode() if extras else pl.lit(None, dtype=pl.String)
        return accepted.select(
            *(expr.alias(name) for name, expr in parsed.items()),
            extra_json.alias("x_ExtraColumns"),
            parsed["BilledCost"].alias("x_SourceCost"),
            pl.col(ROW_NUMBER),
        )
