"""GPU model names as invoices, telemetry and the price catalog spell them, made one."""

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
