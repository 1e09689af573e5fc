"""The schema of a purchasing-parameters file (models/data/tco.yaml and a user's own, which only
needs the values it changes): every key known, every value in its range.

A misspelt key (`price_per_kwH`) was silently ignored and a negative price priced a strategy below
zero, both changing a purchasing recommendation without a word; a file is now refused, naming
each key that is wrong and why. Checked with pydantic (already the schema check of the GPU-rental
mapping files); the computation keeps reading the plain merged dictionary.
"""

from __future__ import annotations

import difflib
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

NonNegative = Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[Decimal, Field(ge=0, le=1, allow_inf_nan=False)]
# A price of `catalog` is read from core.price_catalog (models/tco.py, model_params).
Price = NonNegative | Literal["catalog"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Buy(_Strict):
    pue: Annotated[Decimal, Field(ge=1, allow_inf_nan=False)] | None = None
    price_per_kwh: NonNegative | None = None
    depreciation_per_year: Fraction | None = None
    financing_rate: NonNegative | None = None
    server_price: NonNegative | None = None
    gpus_per_server: Annotated[int, Field(ge=1)] | None = None
    power_kw_idle: NonNegative | None = None
    power_kw_busy: NonNegative | None = None
    ops_per_server_year: NonNegative | None = None


class Rent(_Strict):
    on_demand_per_card_hour: Price | None = None
    spot_per_card_hour: Price | None = None
    commit_1y_per_card_hour: Price | None = None
    commit_3y_per_card_hour: Price | None = None
    monthly_per_card: Price | None = None
    spot_rework: NonNegative | None = None


class Hybrid(_Strict):
    training_baseline_quantile: Fraction | None = None
    inference_card: str | None = None
    inference_card_hour: Price | None = None
    inference_target_utilization: Annotated[Decimal, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    inference_speed_vs_main_card: Annotated[Decimal, Field(gt=0, allow_inf_nan=False)] | None = None


class Annualize(_Strict):
    one_off_runs_per_year: NonNegative | None = None


class ModelOverrides(_Strict):
    buy: Buy | None = None
    rent: Rent | None = None
    hybrid: Hybrid | None = None


class TcoParams(_Strict):
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] | None = None
    years: Annotated[int, Field(ge=1, le=30)] | None = None
    gpu_model: str | None = None
    annualize: Annualize | None = None
    buy: Buy | None = None
    rent: Rent | None = None
    hybrid: Hybrid | None = None
    models: dict[str, ModelOverrides] | None = None


SECTIONS: dict[str, type[BaseModel]] = {"annualize": Annualize, "buy": Buy, "rent": Rent, "hybrid": Hybrid}


def _known_keys(loc: tuple) -> list[str]:
    """The keys allowed where the unknown key at `loc` stands (for a suggestion beside it)."""
    parents = list(loc[:-1])
    model: type[BaseModel] = TcoParams
    if parents[:1] == ["models"] and len(parents) >= 2:  # models.<gpu_model>.<section>
        parents, model = parents[2:], ModelOverrides
    for part in parents:
        if part not in SECTIONS:
            return []
        model = SECTIONS[part]
    return list(model.model_fields)


def empty_values(values: dict, where: str = "") -> list[str]:
    """Keys written with no value (`pue:`, or a section `rent:` with nothing under it). The schema
    lets every key be left out, and YAML reads a key without a value as null: merged over the
    defaults, a null replaced the default and the computation failed on it."""
    out = []
    for key, value in values.items():
        name = f"{where}{key}"
        if value is None:
            out.append(f"{name}: no value (leave the key out to keep the default)")
        elif isinstance(value, dict):
            out += empty_values(value, f"{name}.")
    return out


def unknown_model_keys(models: object) -> list[str]:
    """`models.<key>` spelt as a billing or telemetry name ('A100 80G', 'h100-80gb') that is sized
    under another key: such a section matched no model and was ignored without a word. A name
    models/data/gpu_models.csv does not know (GB300) keeps the name its billing gives it, so it is
    allowed; `finops tco` says which keys no measured model has."""
    from models.gpus import canonical_gpu_model

    out = []
    for key in models if isinstance(models, dict) else ():
        canonical = canonical_gpu_model(str(key))
        if canonical != key:
            out.append(f"models.{key}: not a GPU model key (did you mean {canonical}?)")
    return out


def problems(values: object) -> list[str]:
    """What is wrong with a parameters mapping, one line each ([] when nothing is)."""
    if values is None:
        return []
    if not isinstance(values, dict):
        return ["the file must be a mapping of parameters (currency:, years:, buy:, rent:, hybrid:, models:)"]
    if empty := empty_values(values):
        return empty
    out = unknown_model_keys(values.get("models"))
    try:
        TcoParams.model_validate(values)
    except ValidationError as exc:
        for error in exc.errors():
            # A union (a price or `catalog`) reports each branch: keep the number's complaint.
            loc = tuple(p for p in error["loc"] if not (isinstance(p, str) and (p.startswith(("decimal", "literal", "function")) or p == "int")))
            where = ".".join(str(p) for p in loc)
            if error["type"] == "extra_forbidden":
                known = _known_keys(loc)
                close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]}?)" if close else (f" (one of: {', '.join(known)})" if known else "")
                out.append(f"{where}: not a parameter{hint}")
            elif error["type"] == "literal_error":
                continue  # the number's own message says what the value must be
            else:
                out.append(f"{where}: {error['msg']} (got {error.get('input')!r})")
    return list(dict.fromkeys(out))


def check_file(path: Path) -> dict:
    """A user's parameters file, read and checked: its mapping, or ValueError naming every problem."""
    try:
        values = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML: {exc}") from None
    if found := problems(values):
        raise ValueError(f"{path}: " + "; ".join(found))
    return values or {}
