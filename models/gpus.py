"""GPU model names as invoices, telemetry and the price catalog spell them, made one."""

import csv
from pathlib import Path

import polars as pl

# First match wins: the more specific patterns come first.
MODEL_PATTERNS = (
    (r"(?i)A100.*80", "A100 80G"),
    (r"(?i)A100", "A100 40G"),
    (r"(?i)H200", "H200"),
    (r"(?i)H100", "H100"),
    (r"(?i)B200", "B200"),
    (r"(?i)L40S", "L40S"),
    (r"(?i)RTX\s*6000\s*Ada", "RTX 6000 Ada"),
)


def gpu_model_expr(name: pl.Expr) -> pl.Expr:
    expr = name.str.strip_chars()
    for pattern, model in reversed(MODEL_PATTERNS):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(model)).otherwise(expr)
    return expr


INSTANCE_TABLE = Path(__file__).resolve().parent / "data" / "instance_gpus.csv"


def instance_rules() -> list[tuple[str, str, str]]:
    """(pattern, model, count) rows: the count may be a back-reference such as `\\1`."""
    with open(INSTANCE_TABLE, newline="") as fh:
        return [(r["pattern"], r["gpu_model"], r["gpu_count"]) for r in csv.DictReader(fh)]


def instance_gpus_expr(instance_type: pl.Expr) -> pl.Expr:
    """Instance type or VM size → struct{model, count} from models/data/instance_gpus.csv (first match)."""
    model = pl.lit(None, dtype=pl.String)
    count = pl.lit(None, dtype=pl.Int32)
    for pattern, gpu_model, gpu_count in reversed(instance_rules()):
        hit = instance_type.str.contains(pattern)
        if gpu_count.startswith("\\"):
            value = instance_type.str.extract(pattern, int(gpu_count[1:])).cast(pl.Int32, strict=False)
        else:
            value = pl.lit(int(gpu_count), dtype=pl.Int32)
        model = pl.when(hit).then(pl.lit(gpu_model)).otherwise(model)
        count = pl.when(hit).then(value).otherwise(count)
    return pl.struct(model.alias("model"), count.alias("count"))
