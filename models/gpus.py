"""GPU model names as invoices, telemetry and the price catalog spell them, made one."""

import csv
import re
from functools import cache
from pathlib import Path

import polars as pl

MODELS_TABLE = Path(__file__).resolve().parent / "data" / "gpu_models.csv"


@cache
def model_rules() -> tuple[tuple[str, str], ...]:
    """(pattern, canonical gpu_model) rows of models/data/gpu_models.csv, in file order: the first
    pattern that matches a name gives its key, so the more specific patterns come first."""
    with open(MODELS_TABLE, newline="") as fh:
        return tuple((r["pattern"], r["gpu_model"]) for r in csv.DictReader(fh))


def known_models() -> tuple[str, ...]:
    """Every canonical gpu_model key, in table order."""
    return tuple(dict.fromkeys(model for _, model in model_rules()))


@cache
def _compiled_models() -> tuple[tuple[re.Pattern, str], ...]:
    return tuple((re.compile(pattern), model) for pattern, model in model_rules())


def canonical_gpu_model(name: str | None) -> str | None:
    """The canonical gpu_model key of a GPU name as telemetry (nvidia-smi `name`, DCGM `modelName`),
    invoices or the price catalog spell it: 'NVIDIA A100-SXM4-80GB' and 'A100 80G' → 'A100-80GB'.
    A key maps to itself. A name no row matches comes back as its trimmed text (see
    `is_known_gpu_model`): never dropped, never guessed. Blank → None."""
    if name is None or not name.strip():
        return None
    for rule, model in _compiled_models():
        if rule.search(name):
            return model
    return name.strip()


def is_known_gpu_model(key: str | None) -> bool | None:
    return None if key is None else key in known_models()


def gpu_model_expr(name: pl.Expr) -> pl.Expr:
    """`canonical_gpu_model` as a polars expression."""
    expr = name.str.strip_chars().replace("", None)
    for pattern, model in reversed(model_rules()):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(model)).otherwise(expr)
    return expr


# A MIG profile names its GPU instance's compute slices and memory: '3g.40gb', '1c.3g.40gb' (a
# compute instance using one of a 3g instance's three slices), '1g.10gb+me', Kubernetes' resource
# 'nvidia.com/mig-1g.10gb', a Slurm gres type 'nvidia_a100_3g.40gb'. Only at the end of the name,
# and only once.
MIG_PROFILE = re.compile(r"(?:^|[^0-9a-z])(?:(\d+)c\.)?(\d+)g\.(\d+)gb(?:[+.\-][a-z.]+)?$", re.IGNORECASE)
# The compute slices a card splits into under MIG (NVIDIA's MIG user guide, "Supported GPUs": its
# maximum number of instances), for every card this release knows that runs MIG.
MIG_CARD_SLICES = {"GB200": 7, "B200": 7, "H200": 7, "H100-NVL-94GB": 7, "H100-80GB": 7, "H800-80GB": 7, "H20": 7,
                   "GH200": 7, "A100-80GB": 7, "A100-40GB": 7, "A800-40GB": 7, "A800-80GB": 7, "A30": 4,
                   "RTX-PRO-6000": 4, "RTX-PRO-5000": 2, "RTX-PRO-4500": 2}
DEFAULT_MIG_CARD_SLICES = 7
# Profiles (GPU instance slices, GB) only one card has, for a name that does not say its card
# ("Supported MIG Profiles"): the A30's (6 GB a slice), the RTX PRO 4500's, the RTX PRO 6000's whole
# card. 2g.48gb is half an RTX PRO 6000 and a whole RTX PRO 5000, and no card of seven slices: a
# GPU of unknown size without its card. 1g.24gb is 1/7 of an H100 NVL (and H100 96GB), 1/4 of an
# RTX PRO 6000 and 1/2 of an RTX PRO 5000: sevenths without its card, as every other profile.
ONE_CARD_PROFILES = {(1, 6): "A30", (2, 12): "A30", (4, 24): "A30", (1, 16): "RTX-PRO-4500", (2, 32): "RTX-PRO-4500",
                     (4, 96): "RTX-PRO-6000"}
UNSIZED_WITHOUT_CARD = {(2, 48)}


def mig_card_slices(card: str | None) -> int | None:
    """The compute slices of the card `card` names (a GPU model as any source spells it); None
    when it names no MIG card this release knows."""
    return MIG_CARD_SLICES.get(canonical_gpu_model(card.replace("_", " ")) if card else None)


def mig_profile_match(profile: str | None) -> re.Match | None:
    """The one MIG profile `profile` ends with (its groups: compute slices, GPU instance slices,
    GB), or None when it names none or more than one."""
    text = (profile or "").strip()
    found = MIG_PROFILE.search(text)
    return found if found and len(re.findall(r"\d+g\.\d+gb", text, re.IGNORECASE)) == 1 else None


@cache  # a pure function of two names, asked per row by the Slurm and workloads CSV connectors
def mig_card_share(profile: str | None, card: str | None = None) -> float | None:
    """The part of a physical card a MIG profile is: its compute slices (a compute instance's own,
    '1c.3g.40gb' 1; else its GPU instance's, '3g.40gb' 3) over the card's (MIG_CARD_SLICES; 7 on
    the A100, H100, H200 and B200). The card is `card` (a node's GPU product), else the one the
    name itself gives (a Slurm type 'nvidia_rtx_pro_6000_1g.24gb', a node's single-strategy product
    'NVIDIA-A30-MIG-1g.6gb'), else the one only its profile can be (ONE_CARD_PROFILES); else seven
    slices. None when `profile` is not one MIG profile, or one only its card can size (2g.48gb)."""
    found = mig_profile_match(profile)
    if not found:
        return None
    compute, instance_slices, gigabytes = found.group(1), int(found.group(2)), int(found.group(3))
    card_slices = mig_card_slices(card) or mig_card_slices(found.string[:found.start()])
    if card_slices is None:
        if (instance_slices, gigabytes) in UNSIZED_WITHOUT_CARD:
            return None
        only = ONE_CARD_PROFILES.get((instance_slices, gigabytes))
        card_slices = MIG_CARD_SLICES[only] if only else DEFAULT_MIG_CARD_SLICES
    slices = min(int(compute), instance_slices) if compute else instance_slices
    return min(slices, card_slices) / card_slices if slices else None


MACRO_BEGIN = "-- BEGIN gpu_model_key: generated from models/data/gpu_models.csv by `python -m models.gpus`; do not edit"
MACRO_END = "-- END gpu_model_key"


def sql_macros() -> str:
    """The SQL twins of `canonical_gpu_model`, `is_known_gpu_model` and MIG_CARD_SLICES, for sql/macros.sql."""
    quote = lambda text: "'" + text.replace("'", "''") + "'"  # noqa: E731
    whens = "\n".join(f"    WHEN regexp_matches(name, {quote(p)}) THEN {quote(m)}" for p, m in model_rules())
    keys = ", ".join(quote(m) for m in known_models())
    slices = "".join(f" WHEN model_key = {quote(m)} THEN {n}" for m, n in MIG_CARD_SLICES.items() if n != DEFAULT_MIG_CARD_SLICES)
    return (f"{MACRO_BEGIN}\n"
            "-- A GPU's canonical model key, whoever names it: telemetry ('NVIDIA A100-SXM4-80GB'), invoices\n"
            "-- ('A100 80G') and the price catalog all become 'A100-80GB'. A name no pattern knows stays as its\n"
            "-- trimmed text, and gpu_model_known() says false for it.\n"
            "CREATE OR REPLACE MACRO gpu_model_key(name) AS CASE\n"
            "    WHEN name IS NULL OR trim(name) = '' THEN NULL\n"
            f"{whens}\n"
            "    ELSE trim(name)\n"
            "END;\n"
            f"CREATE OR REPLACE MACRO gpu_model_known(key) AS key IN ({keys});\n"
            "-- The compute slices a card splits into under MIG (models.gpus.MIG_CARD_SLICES, from NVIDIA's MIG\n"
            "-- user guide). A MIG instance's profile names its own ('3g.40gb'), so its share of the card is\n"
            "-- its slices over these (core.gpu_minutes' gpu_share).\n"
            f"CREATE OR REPLACE MACRO mig_card_slices(model_key) AS CASE{slices} ELSE {DEFAULT_MIG_CARD_SLICES} END;\n"
            f"{MACRO_END}")


INSTANCE_TABLE = Path(__file__).resolve().parent / "data" / "instance_gpus.csv"
USAGE = "usage"  # gpu_count of a SKU billed per GPU-time: the usage quantity gives the count


def instance_rules() -> list[tuple[str, str, str]]:
    """(pattern, model, count) rows: the count may be a back-reference such as `\\1`, or `usage`."""
    with open(INSTANCE_TABLE, newline="") as fh:
        return [(r["pattern"], r["gpu_model"], r["gpu_count"]) for r in csv.DictReader(fh)]


GPU_STRUCT = pl.Struct({"model": pl.String, "count": pl.Int32, "per_usage": pl.Boolean})


@cache
def _compiled_rules() -> list[tuple[re.Pattern, str, str]]:
    return [(re.compile(pattern), model, count) for pattern, model, count in instance_rules()]


def lookup_instance(value: str) -> dict:
    """The first table row that matches `value`: its model, count (a back-reference such as `\\1`
    reads the count from the match) and whether the count comes from usage instead."""
    for rule, model, count in _compiled_rules():
        if match := rule.search(value):
            if count == USAGE:
                return {"model": model, "count": None, "per_usage": True}
            if count.startswith("\\"):
                digits = match.group(int(count[1:])) or ""
                return {"model": model, "count": int(digits) if digits.isdigit() else None, "per_usage": False}
            return {"model": model, "count": int(count), "per_usage": False}
    return {"model": None, "count": None, "per_usage": None}


def _lookup_series(values: pl.Series) -> pl.Series:
    # A bill names few distinct instance types: each is looked up once, then joined back to the rows.
    # (A when/then chain over the ~100 table rows, repeated per field, made polars plans explode.)
    distinct = values.drop_nulls().unique()
    found = pl.DataFrame({"value": distinct, "gpus": [lookup_instance(v) for v in distinct.to_list()]},
                         schema={"value": pl.String, "gpus": GPU_STRUCT})
    joined = pl.DataFrame({"value": values.cast(pl.String)}).join(found, on="value", how="left", maintain_order="left")
    return joined.get_column("gpus")


def instance_gpus_expr(instance_type: pl.Expr) -> pl.Expr:
    """Instance type, VM size, shape or accelerator SKU name → struct{model, count, per_usage} from
    models/data/instance_gpus.csv (first match). `per_usage` rows (accelerator SKUs billed per GPU-time,
    e.g. "Nvidia Tesla A100 GPU running in Americas") leave `count` null: the usage quantity says it."""
    return instance_type.map_batches(_lookup_series, return_dtype=GPU_STRUCT)


def known_instance_pattern() -> str:
    """One regular expression that matches whatever some row of the table matches."""
    return "|".join(f"(?:{pattern})" for pattern, _, _ in instance_rules())


# An instance type, VM size or shape inside a longer text: AWS `p5.48xlarge` (also inside a usage type
# such as `USE1-BoxUsage:p5.48xlarge` or a description), Azure `Standard_ND96asr_v4`, GCP `a2-highgpu-8g`,
# OCI `BM.GPU.H100.8`.
INSTANCE_TOKEN = (r"(?i)\b[a-z][a-z0-9]*(?:-[a-z0-9]+)?\.(?:\d*xlarge|large|medium|small|micro|nano|metal(?:-\d+xl)?)\b"
                  r"|\bStandard_[a-z0-9_]+|\b[a-z]\d[a-z]?-[a-z]+-\d+g?\b|\b(?:BM|VM)\.[a-z0-9]+(?:\.[a-z0-9-]+)*")
# Azure meter names spell the VM size with spaces and without `Standard_`: "ND96asr A100 v4", "NC6s v3".
AZURE_METER_SIZE = r"(?i)\b(N[CDV]C?\d+[a-z]*(?: (?:A100|H100|H200|MI300X|T4|A10))? v\d)\b"
# A charge that looks like GPU compute: a GPU-family instance type, VM size, machine type or shape, or a
# SKU, service or description that says GPU. Used to name GPU charges whose GPUs could not be identified.
GPU_INSTANCE_TOKEN = (r"(?i)\b(?:p\d+[a-z]*|g\d+[a-z]*|gr\d+)(?:-[a-z0-9]+)?\.(?:\d*xlarge|metal)\b"
                      r"|\bStandard_N[CDV][a-z0-9_]*|\b[a-z]\d+[a-z]?-[a-z]*gpu-\d+g\b|\bg2-standard-\d+\b|\b(?:BM|VM)\.GPU[a-z0-9]*(?:\.[a-z0-9-]+)*")
GPU_LOOKING = r"(?i)\bgpus?\b|\bnvidia\b|\btesla\b|" + GPU_INSTANCE_TOKEN.removeprefix("(?i)")

# SkuPriceDetails keys read for GPU identity: the FOCUS-defined ones (1.1 drafts spelt them with `F_`),
# and the `x_` keys providers use for the GPU model.
SKU_GPU_COUNT_KEYS = ("GpuCount", "F_GpuCount", "x_GpuCount")
SKU_INSTANCE_TYPE_KEYS = ("InstanceType", "F_InstanceType", "x_InstanceType")
SKU_GPU_MODEL_KEYS = ("x_GpuModel", "x_GpuType", "x_AcceleratorType", "x_GpuName")


def _json_key(details: pl.Expr, keys: tuple[str, ...]) -> pl.Expr:
    return pl.coalesce([details.str.json_path_match(f"$.{k}").str.strip_chars().replace("", None) for k in keys])


def count_from_usage(quantity: pl.Expr, unit: pl.Expr, period_seconds: pl.Expr) -> pl.Expr:
    """GPUs held over the charge period by a SKU billed per GPU-time: GPU-seconds ÷ period seconds,
    at least 1 when some GPU time was billed (a GPU used for part of the period is still one GPU)."""
    seconds = (pl.when(unit.str.contains(r"(?i)^\s*(s|sec|secs|seconds?)\s*$")).then(quantity)
               .when(unit.str.contains(r"(?i)hour|hrs?\b|^\s*h\s*$")).then(quantity * 3600))
    gpus = (seconds / period_seconds.cast(pl.Float64)).round(0)
    return (pl.when(period_seconds > 0).then(pl.max_horizontal(gpus, pl.when(seconds > 0).then(pl.lit(1.0))))
            .cast(pl.Int32, strict=False))


def identify_gpus(columns: list[str], period_seconds: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(x_GpuModel, x_GpuCount) for a FOCUS frame of strings, from the first of:
    1. `SkuPriceDetails` GpuCount and the model keys, then its InstanceType through the table;
    2. an instance type / VM size / shape / accelerator SKU in SkuId, ResourceType, SkuPriceId, SkuMeter,
       ChargeDescription or any `x_` column (in file order), through models/data/instance_gpus.csv.
    A count in SkuPriceDetails wins over the table's; a SKU priced per GPU-time (PricingUnit says GPU, or
    a table row whose count is `usage`) takes its count from the usage quantity over the charge period."""
    get = lambda c: pl.col(c).str.strip_chars() if c in columns else pl.lit(None, dtype=pl.String)  # noqa: E731
    details = get("SkuPriceDetails")
    texts = [get(c) for c in ("SkuId", "ResourceType", "SkuPriceId", "SkuMeter", "ChargeDescription")]
    texts += [get(c) for c in columns if c.startswith("x_") and c not in ("x_GpuModel", "x_GpuCount")]
    candidates = [_json_key(details, SKU_INSTANCE_TYPE_KEYS)]
    candidates += [t.str.extract(f"({INSTANCE_TOKEN})", 1) for t in texts]
    candidates += [pl.concat_str(pl.lit("Standard_"), t.str.extract(AZURE_METER_SIZE, 1).str.replace_all(" ", "_"))
                   for t in texts]
    candidates += texts  # accelerator SKUs are matched by their whole description
    known = known_instance_pattern()
    instance = pl.coalesce([pl.when(c.str.contains(known)).then(c) for c in candidates])
    # With no text column at all the candidates are literals: nothing to look up (and a lookup of a
    # literal would not broadcast to the frame's height).
    texts_present = "SkuPriceDetails" in columns or any(c in columns for c in ("SkuId", "ResourceType", "SkuPriceId", "SkuMeter", "ChargeDescription")) \
        or any(c.startswith("x_") and c not in ("x_GpuModel", "x_GpuCount") for c in columns)
    table = instance_gpus_expr(instance) if texts_present else pl.lit(None, dtype=GPU_STRUCT)

    sku_count = _json_key(details, SKU_GPU_COUNT_KEYS).cast(pl.Float64, strict=False).round(0).cast(pl.Int32, strict=False)
    sku_model = _json_key(details, SKU_GPU_MODEL_KEYS)
    pricing_unit, consumed_unit = get("PricingUnit"), get("ConsumedUnit")
    per_gpu_time = pricing_unit.str.contains(r"(?i)\bgpus?\b").fill_null(False) | table.struct.field("per_usage").fill_null(False)
    from_usage = pl.coalesce(
        count_from_usage(get("ConsumedQuantity").cast(pl.Float64, strict=False), consumed_unit, period_seconds),
        count_from_usage(get("PricingQuantity").cast(pl.Float64, strict=False), pricing_unit, period_seconds))
    count = pl.when(per_gpu_time).then(from_usage).otherwise(pl.coalesce(sku_count, table.struct.field("count")))
    model = pl.coalesce(gpu_model_expr(sku_model), table.struct.field("model"))
    return model, count


def write_sql_macros(path: Path | None = None) -> bool:
    """Rewrite the generated block of sql/macros.sql from the table; True when it changed."""
    path = path or Path(__file__).resolve().parent.parent / "sql" / "macros.sql"
    text = path.read_text()
    before, rest = text.split(MACRO_BEGIN, 1)
    _, after = rest.split(MACRO_END, 1)
    updated = before + sql_macros() + after
    if updated != text:
        path.write_text(updated)
    return updated != text


if __name__ == "__main__":
    print("sql/macros.sql " + ("updated" if write_sql_macros() else "already up to date"))
