"""Cost of ownership of each purchasing strategy over the parameters' years (3 by default), from
the GPU-hours actually used.

Every amount is a Decimal. The measured period (the hourly profile in marts.gpu_hours_profile) is
scaled to a year; each strategy is then priced over `years`. Costs that depend on how much the
fleet is used are linear in its utilization, so the break-even utilization of any two strategies
is where their lines cross.
"""

import json
import math
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import yaml

DEFAULT_PARAMS = Path(__file__).resolve().parent / "data" / "tco.yaml"
HOURS_PER_YEAR = Decimal(8760)
HOURS_PER_MONTH = Decimal(730)
CENT = Decimal("0.01")
TRAINING = ("pretraining", "finetuning")
CATALOG = "catalog"  # a price read from the price catalog: the model's own, in the TCO currency
UNKNOWN = "unknown"  # gpu_model of hosts whose GPU model no telemetry or charge names


def D(value) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return merged


# The amounts of money among the parameters, by section: what a change of currency converts.
MONEY_KEYS = {"buy": ("price_per_kwh", "server_price", "ops_per_server_year"),
              "rent": ("on_demand_per_card_hour", "spot_per_card_hour", "commit_1y_per_card_hour", "commit_3y_per_card_hour",
                       "monthly_per_card"),
              "hybrid": ("inference_card_hour",)}


def _shared_first(bundled: dict, mine: dict) -> dict:
    """The bundled parameters without the per-model values a user's shared value replaces. A value
    of the user's under `buy`, `rent` or `hybrid` is meant for every model; merged as it was, a
    bundled `models.<gpu_model>` value of the same key still won, and the user's was silently
    ignored for every model the bundled file prices (their A100 spot price, say)."""
    out = {**bundled, "models": {}}
    for model, sections in (bundled.get("models") or {}).items():
        theirs = ((mine.get("models") or {}).get(model) or {})
        kept = {}
        for section, values in sections.items():
            kept[section] = {k: v for k, v in values.items()
                             if k not in (mine.get(section) or {}) or k in (theirs.get(section) or {})}
        out["models"][model] = kept
    return out


def _money_paths(params: dict) -> list[tuple[str, ...]]:
    """Where the amounts of money stand in a parameters mapping (a `catalog` price is no amount)."""
    paths = []
    for prefix, sections in [((), params), *((("models", m), v) for m, v in (params.get("models") or {}).items())]:
        for section, keys in MONEY_KEYS.items():
            for key in keys:
                if not isinstance((sections.get(section) or {}).get(key, CATALOG), str):
                    paths.append((*prefix, section, key))
    return paths


class NoRateToConvert(ValueError):
    """A user's currency the bundled amounts left in place cannot be converted into: no rate."""


def _converted(bundled: dict, mine: dict, currency: str, rate) -> dict:
    """The bundled amounts the user's file leaves in place, converted into the user's currency. A
    file giving only `currency: USD` used to relabel the bundled CNY prices as USD, beside catalog
    prices truly in USD. `rate(from, to)` gives (rate, its date) or None; with no rate, the amounts
    left in the bundled currency are refused, naming them."""
    left = [p for p in _money_paths(bundled) if not _has(mine, p)]
    if not left:
        return bundled
    found = rate(bundled["currency"], currency) if rate else None
    names = ", ".join(".".join(p) for p in left)
    if found is None:
        raise NoRateToConvert(f"currency {currency}: the bundled amounts are in {bundled['currency']} and no "
                         f"{bundled['currency']}→{currency} rate is known to convert them ({names}); "
                         f"give them in {currency} in your parameters file")
    value, day = D(found[0]), found[1]
    out = json.loads(json.dumps(bundled, default=str))  # a deep copy
    for path in left:
        section = out
        for part in path[:-1]:
            section = section[part]
        section[path[-1]] = D(section[path[-1]]) * value
    out["converted"] = {"from_currency": bundled["currency"], "rate": str(value), "rate_date": str(day), "keys": names}
    return out


def _has(values: dict, path: tuple[str, ...]) -> bool:
    for part in path:
        if not isinstance(values, dict) or part not in values:
            return False
        values = values[part]
    return True


def load_params(path: Path | None = None, rate=None) -> dict:
    """The bundled defaults, overridden by the values a user's file gives (checked first: an unknown
    key or a value out of range is refused with ValueError, models/tco_params.py). A user's shared
    value replaces the bundled per-model ones too; a currency of the user's converts the bundled
    amounts their file does not replace (`rate(from, to)` → (rate, date) or None; see _converted)."""
    params = yaml.safe_load(DEFAULT_PARAMS.read_text())
    if not path:
        return params
    mine, params = checked_params_file(path, params)
    currency = mine.get("currency", params["currency"])
    if currency != params["currency"]:
        params = _converted(params, mine, currency, rate)
    # The models the user's file prices: `finops tco` names those no measured model has.
    return {**_merge(params, mine), "own_model_keys": list(mine.get("models") or {})}


def checked_params_file(path: Path, bundled: dict | None = None) -> tuple[dict, dict]:
    """A user's parameters file checked on its own (models/tco_params.py) and merged over the
    bundled values: (the file's mapping, the bundled values it leaves), or ValueError. A server's
    busy power below its idle power is refused however the two were given (one in the user's file,
    one bundled): power then fell as its GPUs worked."""
    from models.tco_params import check_file

    bundled = bundled if bundled is not None else yaml.safe_load(DEFAULT_PARAMS.read_text())
    mine = check_file(path)
    left = _shared_first(bundled, mine)
    merged = _merge(left, mine)
    for where, own in [("buy", {}), *((f"models.{m}.buy", v) for m, v in (merged.get("models") or {}).items())]:
        buy = {**merged.get("buy", {}), **(own or {}).get("buy", {})}
        if "power_kw_idle" in buy and "power_kw_busy" in buy and D(buy["power_kw_busy"]) < D(buy["power_kw_idle"]):
            raise ValueError(f"{path}: {where}: power_kw_busy {buy['power_kw_busy']} is below "
                             f"power_kw_idle {buy['power_kw_idle']}")
    return mine, left


def one_off_counting(runs) -> str:
    """How the yearly sizing counted a one-off run (annualize.one_off_runs_per_year): 0 leaves it out."""
    runs = Decimal(str(runs))
    if runs == 0:
        return "one-off runs left out"
    times = {1: "once", 2: "twice"}.get(runs, f"{runs.normalize():f} times")
    return f"one-off runs counted {times} a year"


@dataclass(frozen=True)
class UsageProfile:
    """What the measured period says about one GPU model's demand, per hour, phase and load.

    Recurring load (inference, job families seen repeating) is scaled from the measured period to a
    year; one-off load (a job seen once, such as a pre-training run) is counted `one_off_runs` times
    a year (once by default), never scaled."""

    hours: int  # length of the measured period
    peak_gpus: int  # most GPUs of this model held at once
    gpu_hours_held: dict[str, Decimal]  # by phase, both loads
    gpu_hours_busy: dict[str, Decimal]
    # GPUs held by every phase but inference, hour by hour, as steps (GPUs, of which one-off, fraction
    # of the hour): each level training held and for how long where the mart gives its instants, else
    # one step at the hour's average.
    training_steps_by_hour: list[list[tuple[Decimal, Decimal, Decimal]]]
    gpu_model: str | None = None
    one_off_held: dict[str, Decimal] = field(default_factory=dict)  # the one-off part of gpu_hours_held, by phase
    one_off_busy: dict[str, Decimal] = field(default_factory=dict)
    # What the demand was measured from: the GPUs workloads held, or, where no workload held this
    # model but telemetry shows its cards at work, the GPUs paid for (see profiles_by_model).
    demand: str = "workloads"
    # Of gpu_hours_held["unattributed"], the busy GPU-hours no workload held (see unheld_busy_rows).
    unheld_busy: Decimal = Decimal(0)
    # Most GPUs of recurring load held at once: the fleet when one-off runs count 0 times a year.
    peak_recurring_gpus: int | None = None
    # Of gpu_hours_held, by phase, those on hosts telemetry did not cover: their busy hours are unknown.
    unseen_held: dict[str, Decimal] = field(default_factory=dict)

    def fleet(self, runs_per_year=1) -> int:
        """The cards a fixed strategy needs: the most held at once, one-off runs left out when they
        count 0 times a year (at least one card: what owning one would cost)."""
        if D(runs_per_year) == 0 and self.peak_recurring_gpus is not None:
            return max(self.peak_recurring_gpus, 1)
        return max(self.peak_gpus, 1)

    @property
    def per_year(self) -> Decimal:
        return HOURS_PER_YEAR / D(self.hours)

    def one_off_weight(self, runs_per_year=1) -> Decimal:
        """How many times a year a one-off run counts: `runs_per_year`, but never more often than the
        measured period repeats (a period longer than a year saw its one-off run less than yearly)."""
        return min(D(runs_per_year), self.per_year)

    def held(self, phases=None) -> Decimal:
        return sum((v for p, v in self.gpu_hours_held.items() if phases is None or p in phases), Decimal(0))

    def busy(self, phases=None) -> Decimal:
        return sum((v for p, v in self.gpu_hours_busy.items() if phases is None or p in phases), Decimal(0))

    def _one_off(self, values: dict, phases) -> Decimal:
        return sum((v for p, v in values.items() if phases is None or p in phases), Decimal(0))

    def held_year(self, phases=None, runs_per_year=1) -> Decimal:
        """GPU-hours held in a year: recurring × periods a year + one-off × runs a year."""
        one_off = self._one_off(self.one_off_held, phases)
        return (self.held(phases) - one_off) * self.per_year + one_off * self.one_off_weight(runs_per_year)

    def busy_year(self, phases=None, runs_per_year=1) -> Decimal:
        one_off = self._one_off(self.one_off_busy, phases)
        return (self.busy(phases) - one_off) * self.per_year + one_off * self.one_off_weight(runs_per_year)

    def training_year(self, runs_per_year=1) -> list[tuple[Decimal, Decimal]]:
        """(GPUs held for training at once, hours a year like it): the year as the measured hours
        repeated, the one-off runs in `one_off_weight` of the repeats only."""
        with_runs = self.one_off_weight(runs_per_year)
        rows = []
        for steps in self.training_steps_by_hour:
            for total, once, fraction in steps:
                if once and with_runs:
                    rows += [(total, with_runs * fraction), (total - once, (self.per_year - with_runs) * fraction)]
                else:
                    rows.append((total - once, self.per_year * fraction))
        return [(g, w) for g, w in rows if w > 0]


def profile_from_rows(rows: list[dict]) -> UsageProfile:
    """Rows of marts.gpu_hours_profile (hour, phase, gpu_hours_held, gpu_hours_busy and optionally
    load, gpus_held_peak and gpus_held_peak_recurring) for one GPU model. A row without `load` is
    recurring.

    The fleet a fixed strategy needs is the most GPUs held at once: the mart's gpus_held_peak where
    a row has it (workloads), else the hour's average (GPUs paid, busy hours no workload held: no
    instant is known), the two added in an hour that has both. Sized from averages, 8-GPU jobs of 15
    minutes each hour came to 2 cards."""
    hours = sorted({r["hour"] for r in rows})
    held: dict[str, Decimal] = {}
    busy: dict[str, Decimal] = {}
    once_held: dict[str, Decimal] = {}
    once_busy: dict[str, Decimal] = {}
    unseen: dict[str, Decimal] = {}
    # Training's average held, and its one-off part, of the rows that do not give training's levels
    # (training_levels: hand-built rows, GPUs paid, busy hours no workload held) and of those that do.
    training: dict = {h: [Decimal(0)] * 4 for h in hours}
    levels: dict = {}
    # Per hour: [average held where no instant is known, the same of recurring load, the most held
    # at once, the same of recurring load, the average held of rows that know their instants (and
    # of their recurring load)].
    at_once: dict = {h: [Decimal(0)] * 6 for h in hours}
    for r in rows:
        h_held, h_busy = D(round(r["gpu_hours_held"], 6)), D(round(r["gpu_hours_busy"], 6))
        one_off = r.get("load") == "one_off"
        held[r["phase"]] = held.get(r["phase"], Decimal(0)) + h_held
        busy[r["phase"]] = busy.get(r["phase"], Decimal(0)) + h_busy
        unseen[r["phase"]] = unseen.get(r["phase"], Decimal(0)) + D(round(r.get("gpu_hours_held_unseen") or 0, 6))
        if one_off:
            once_held[r["phase"]] = once_held.get(r["phase"], Decimal(0)) + h_held
            once_busy[r["phase"]] = once_busy.get(r["phase"], Decimal(0)) + h_busy
        level = at_once[r["hour"]]
        if r.get("gpus_held_peak") is None:
            level[0] += h_held
            level[1] += Decimal(0) if one_off else h_held
        else:
            level[2] = max(level[2], D(round(r["gpus_held_peak"], 6)))
            level[3] = max(level[3], D(round(r.get("gpus_held_peak_recurring") or 0, 6)))
            level[4] += h_held
            level[5] += Decimal(0) if one_off else h_held
        if r.get("training_levels"):
            levels.setdefault(r["hour"], json.loads(r["training_levels"], parse_float=Decimal))
        if r["phase"] != "inference":
            at = 2 if "training_levels" in r else 0
            training[r["hour"]][at] += h_held
            training[r["hour"]][at + 1] += h_held if one_off else Decimal(0)
    # The most held at once is never below the hour's average (rounding aside).
    peak = max((a + max(p, m) for a, _, p, _, m, _ in at_once.values()), default=Decimal(0))
    recurring_peak = max((a + max(p, m) for _, a, _, p, _, m in at_once.values()), default=Decimal(0))
    models = {r.get("gpu_model") for r in rows}
    return UsageProfile(len(hours), math.ceil(peak), held, busy, [training_steps(training[h], levels.get(h)) for h in hours],
                        gpu_model=models.pop() if len(models) == 1 else None, one_off_held=once_held, one_off_busy=once_busy,
                        peak_recurring_gpus=math.ceil(recurring_peak), unseen_held=unseen)


def training_steps(averages: list[Decimal], levels: list[dict] | None) -> list[tuple[Decimal, Decimal, Decimal]]:
    """An hour of training as steps (GPUs, of which one-off, fraction of the hour). With the mart's
    levels, each level and how long it lasted, the demand no instant is known for added to each;
    otherwise one step at the hour's average. Averaged, an 8-GPU job of 15 minutes was 2 GPUs all
    hour: the hybrid strategy's monthly baseline covered it and rented nothing above."""
    unknown, unknown_once, known, known_once = averages
    if not levels:
        return [(unknown + known, unknown_once + known_once, Decimal(1))]
    return [(D(round(step["gpus"], 6)) + unknown, D(round(step["one_off_gpus"], 6)) + unknown_once, D(step["seconds"]) / 3600)
            for step in levels]


def profiles_by_model(rows: list[dict]) -> dict[str, UsageProfile]:
    """One profile per GPU model of marts.gpu_hours_profile that workloads held or charges paid for.

    Where no workload held any GPU in the measured period (no workload export is loaded, or none of
    its hosts is known), a model whose cards telemetry shows at work is sized from what is paid for:
    each hour's GPUs paid for as held, its cards' busy hours (gpu_hours_busy_any, at most the GPUs
    paid for) as busy, all recurring and unattributed. Once workloads are loaded, every model is
    sized from what they held and from the busy hours no workload held (unheld_busy_rows; a model
    only those hours size says `demand` "busy"); a model neither held nor busy, at one card with
    no load: what owning it would cost."""
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        by_model.setdefault(r.get("gpu_model") or UNKNOWN, []).append(r)
    no_workloads = not any(r["gpu_hours_held"] for r in rows)
    unheld = {} if no_workloads else unheld_busy_rows(rows)
    profiles = {}
    for model, model_rows in sorted(by_model.items()):
        if not any(r["gpu_hours_held"] or r.get("gpus_paid") or r.get("gpu_hours_busy_unheld") for r in model_rows):
            continue
        paid_demand = paid_demand_rows(model_rows) if no_workloads else []
        if paid_demand:
            profiles[model] = replace(profile_from_rows(paid_demand), demand="paid")
        elif model in unheld:
            # "busy": no workload held this model; its demand is the busy hours no workload held.
            held_any = any(r["gpu_hours_held"] for r in model_rows)
            profiles[model] = replace(profile_from_rows(model_rows + unheld[model]), demand="workloads" if held_any else "busy",
                                      unheld_busy=sum((r["gpu_hours_held"] for r in unheld[model]), Decimal(0)))
        else:
            profiles[model] = profile_from_rows(model_rows)
    return profiles


def unheld_busy_rows(rows: list[dict]) -> dict[str, list[dict]]:
    """Each model's busy hours no workload held (gpu_hours_busy_unheld: GPU-minutes at or over the
    busy threshold that no workload record names), hour by hour, as unattributed recurring demand.
    Workloads on a host telemetry does not cover in the hour (or known by their resource id alone:
    gpu_hours_held_unseen) may be on those very cards, whose minutes the busy split then gives no
    workload: their GPU-hours are taken off their model's, so no card is sized twice. Those of model
    'unknown' (a host no telemetry or charge names) are not: that model is left out of the fleet's
    totals, and taken off a known model's they counted nowhere (a job on an unnamed host beside 8
    busy A100s left the fleet at one card and nothing). Busy time is the cards' load (a card at half
    load for an hour is half a GPU-hour), so this is the least those cards took. One 1-GPU job
    beside an 8-GPU host busy with no workload sizes 9 cards, not 1."""
    hours: dict = {}
    for r in rows:  # gpu_hours_busy_unheld is the same on each of a model's hour's rows
        model = r.get("gpu_model") or UNKNOWN
        h = hours.setdefault(r["hour"], {}).setdefault(model, {
            "unseen": Decimal(0), "unheld": D(round(r.get("gpu_hours_busy_unheld") or 0, 6))})
        h["unseen"] += D(round(r.get("gpu_hours_held_unseen") or 0, 6))
    out: dict[str, list[dict]] = {}
    for hour, models in hours.items():
        for model, h in sorted(models.items()):
            gpus = max(h["unheld"] - h["unseen"], Decimal(0))
            if model != UNKNOWN and gpus > 0:
                out.setdefault(model, []).append({"hour": hour, "gpu_model": model, "phase": "unattributed",
                                                  "load": "recurring", "gpu_hours_held": gpus, "gpu_hours_busy": gpus})
    return out


def paid_demand_rows(rows: list[dict]) -> list[dict]:
    """One model's rows as paid demand (an hour's GPUs paid for held, and its cards' busy hours
    busy, at most the GPUs paid for, by no workload), where telemetry shows its cards busy; else []."""
    if not any(r.get("gpu_hours_busy_any") for r in rows):
        return []
    by_hour = {}
    for r in rows:  # gpus_paid and gpu_hours_busy_any are the same on each of an hour's rows
        paid = D(round(r.get("gpus_paid") or 0, 6))
        # Busy cards no charge pays for (a host billed elsewhere) are not this model's paid fleet.
        busy = min(D(round(r.get("gpu_hours_busy_any") or 0, 6)), paid)
        by_hour.setdefault(r["hour"], {"hour": r["hour"], "gpu_model": r.get("gpu_model"), "phase": "unattributed",
                                       "load": "recurring", "gpu_hours_held": paid, "gpu_hours_busy": busy})
    return list(by_hour.values())


@dataclass
class Scenario:
    scenario: str
    description: str
    cards: int
    capex: Decimal = Decimal(0)
    yearly_power: Decimal = Decimal(0)
    yearly_ops: Decimal = Decimal(0)
    yearly_rent: Decimal = Decimal(0)
    residual: Decimal = Decimal(0)
    financing: Decimal = Decimal(0)
    elasticity: str = "fixed"  # fixed: paid whether used or not; elastic: follows usage; mixed
    # Cost as a line in fleet utilization u (held GPU-hours ÷ cards × hours): fixed + slope × u.
    fixed_cost: Decimal = Decimal(0)
    cost_per_utilization: Decimal = Decimal(0)
    inputs: dict = field(default_factory=dict)
    priced: bool = True  # False: the parameters and catalog give no price for it (description says which)
    gpu_model: str | None = None
    busy_year: Decimal = Decimal(0)  # busy GPU-hours a year it serves
    rent_paid: Decimal | None = None  # the rent over the horizon, where it is not `years` × yearly_rent (whole terms)

    def tco(self, years: int) -> Decimal | None:
        if not self.priced:
            return None
        rent = years * self.yearly_rent if self.rent_paid is None else self.rent_paid
        return money(self.capex + years * (self.yearly_power + self.yearly_ops) + rent - self.residual + self.financing)


def annuity_interest(principal: Decimal, rate: Decimal, years: int) -> Decimal:
    """Interest paid over a loan of `principal` repaid in equal yearly instalments."""
    if rate == 0:
        return Decimal(0)
    instalment = principal * rate / (1 - (1 + rate) ** -years)
    return instalment * years - principal


RENT_TERMS = {"on_demand_per_card_hour": "on_demand", "spot_per_card_hour": "spot", "commit_1y_per_card_hour": "commit_1y",
              "commit_3y_per_card_hour": "commit_3y", "monthly_per_card": "monthly"}
BUNDLED_CATALOG = Path(__file__).resolve().parent / "data" / "price_catalog.csv"


def bundled_catalog_prices() -> list[dict]:
    """The bundled price catalog's GPU rows as core.price_catalog gives them (canonical gpu_model,
    price per GPU-hour), for use without a warehouse."""
    import csv

    from models.gpus import canonical_gpu_model

    per_hours = {"gpu_hour": Decimal(1), "instance_hour": None, "gpu_month": Decimal(720)}
    rows = []
    with open(BUNDLED_CATALOG, newline="") as fh:
        for r in csv.DictReader(fh):
            if not r["gpu_model"] or r["unit"] not in per_hours:
                continue
            count = D(r["gpu_count"] or 1)
            divisor = count * (per_hours[r["unit"]] or 1)
            rows.append({"gpu_model": canonical_gpu_model(r["gpu_model"]), "term": r["term"], "currency": r["currency"].upper(),
                         "price_per_gpu_hour": D(r["price"]) / divisor, "provider": r["provider"], "sku": r["sku"],
                         "source": r["source"]})
    return rows


def catalog_price(prices: list[dict], gpu_model: str, term: str, currency: str) -> dict | None:
    """The cheapest catalog price per GPU-hour of this model and term in `currency` (no conversion:
    a price in another currency is not this buyer's quote)."""
    found = [p for p in prices if p["gpu_model"] == gpu_model and p["term"] == term and p["currency"] == currency
             and p["price_per_gpu_hour"] is not None]
    return min(found, key=lambda p: (D(p["price_per_gpu_hour"]), p["provider"], p["sku"]), default=None)


def model_params(params: dict, gpu_model: str, prices: list[dict]) -> dict:
    """The parameters that price one GPU model: the shared `buy`, `rent` and `hybrid` sections, with
    `models.<gpu_model>` over them; every `catalog` price read from the catalog (monthly as 720 h).
    A price neither gives is absent: the strategies that need it are not priced for this model."""
    own = (params.get("models") or {}).get(gpu_model) or {}
    out = {"buy": {**params.get("buy", {}), **own.get("buy", {})}, "rent": {**params.get("rent", {}), **own.get("rent", {})},
           "hybrid": {**params.get("hybrid", {}), **own.get("hybrid", {})}, "sources": {}}
    for key, term in RENT_TERMS.items():
        if out["rent"].get(key) == CATALOG:
            found = catalog_price(prices, gpu_model, term, params["currency"])
            if found is None:
                del out["rent"][key]
                continue
            price = D(found["price_per_gpu_hour"]) * (720 if term == "monthly" else 1)
            out["rent"][key] = price
            out["sources"][key] = f"{found['provider']} {found['sku']}: {found['source']}"
    from models.gpus import canonical_gpu_model

    # The card as the catalog keys it, however the user spelt it ('rtx 6000 ada' → RTX-6000-Ada).
    card = canonical_gpu_model(out["hybrid"].get("inference_card"))
    if out["hybrid"].get("inference_card_hour") == CATALOG:
        found = catalog_price(prices, card, "on_demand", params["currency"]) if card else None
        if found is None:
            del out["hybrid"]["inference_card_hour"]
        else:
            out["hybrid"]["inference_card_hour"] = D(found["price_per_gpu_hour"])
            out["sources"]["inference_card_hour"] = f"{found['provider']} {found['sku']}: {found['source']}"
    return out


def _unpriced(name: str, gpu_model: str, what: str) -> Scenario:
    # No elasticity either: an unpriced strategy is neither paid whether used nor paid by use.
    return Scenario(name, f"not priced for {gpu_model}: no {what}", 0, priced=False, elasticity="—")


def _source(key: str, sources: dict) -> dict:
    return {"price_source": sources[key]} if key in sources else {}


def on_demand(gpu_model: str, rent: dict, sources: dict, held_year: Decimal, fleet_hours: Decimal, cards: int, years: int) -> Scenario:
    """Every GPU-hour held, on demand."""
    key = "on_demand_per_card_hour"
    if key not in rent:
        return _unpriced("on_demand", gpu_model, "on-demand price")
    rate = D(rent[key])
    return Scenario("on_demand", f"{gpu_model} on demand, only the hours used", cards, yearly_rent=held_year * rate,
                    elasticity="elastic", cost_per_utilization=years * fleet_hours * rate, inputs={key: rent[key], **_source(key, sources)})


def spot(profile: "UsageProfile", gpu_model: str, rent: dict, sources: dict, runs, held_year: Decimal, fleet_hours: Decimal,
         cards: int, years: int) -> Scenario:
    """Training (pre-training, fine-tuning) on spot, with rework after preemptions; the rest on
    demand: inference, which a preemption interrupts for its users, and load of no known phase,
    which may be serving. Priced on every hour held, spot was offered for a serving load."""
    training = profile.held_year(TRAINING, runs)
    rest = held_year - training
    # A model with no training puts nothing on spot: without a spot price it is still priced (all on
    # demand), so the fleet's spot total is not left blank for want of a price it needs for nothing.
    if "spot_per_card_hour" not in rent and training:
        return _unpriced("spot", gpu_model, "spot price")
    if (rest or not training) and "on_demand_per_card_hour" not in rent:  # with no training, spot is on demand
        return _unpriced("spot", gpu_model, "on-demand price for inference and load of no known phase "
                                            "(spot serves interruptible training only)")
    rework = D(rent.get("spot_rework", 0))
    spot_rate = D(rent.get("spot_per_card_hour", 0)) * (1 + rework)
    yearly = training * spot_rate + rest * D(rent.get("on_demand_per_card_hour", 0))
    what = ("training on spot, with rework after preemptions" + (", the rest on demand" if rest else "")
            if training else "no training to put on spot: all on demand")
    return Scenario("spot", f"{gpu_model} {what}", cards, yearly_rent=yearly, elasticity="elastic",
                    # Linear in utilization: the mix of training and the rest stays the measured one.
                    # (With nothing held there is no training either: all of it would be on demand.)
                    cost_per_utilization=years * fleet_hours * (yearly / held_year if held_year else D(rent["on_demand_per_card_hour"])),
                    inputs={"spot_per_card_hour": rent.get("spot_per_card_hour"), **({"spot_rework": rent["spot_rework"]} if rework else {}),
                            "spot_gpu_hours_per_year": float(round(training, 1)),
                            **({"on_demand_gpu_hours_per_year": float(round(rest, 1)),
                                "on_demand_per_card_hour": rent["on_demand_per_card_hour"]} if rest else {}),
                            **_source("spot_per_card_hour", sources)})


def commitment(name: str, key: str, term_years: int, rent: dict, gpu_model: str, cards: int, years: int) -> Scenario:
    """The fleet on commitments of `term_years`, paid for whole terms. A horizon shorter than the
    term pays the whole term (prorated, a 3-year commitment over one year looked cheaper than it
    binds); the years after the last whole term that fits are paid by a further term or, where
    cheaper, by 1-year commitments (4 years: 3 + 1, not 3 + 3)."""
    if key not in rent:
        return _unpriced(name, gpu_model, f"{term_years}-year commitment price")
    yearly = D(rent[key]) * HOURS_PER_YEAR * cards
    terms, left = divmod(years, term_years)
    one_year = D(rent["commit_1y_per_card_hour"]) * HOURS_PER_YEAR * cards if "commit_1y_per_card_hour" in rent else None
    if terms == 0:
        terms, left = 1, 0
    ladder = left and one_year is not None and left * one_year < term_years * yearly
    if left and not ladder:
        terms, left = terms + 1, 0
    paid = terms * term_years * yearly + (left * one_year if ladder else 0)
    how = [f"{terms} × {term_years} years"] + ([f"{left} year(s) of 1-year commitments"] if ladder else [])
    whole = "" if terms * term_years == years else f", paid for whole terms: {' + '.join(how)}"
    return Scenario(name, f"{cards} {gpu_model} on {term_years}-year commitments{whole}", cards, yearly_rent=yearly, rent_paid=paid,
                    fixed_cost=paid, inputs={key: rent[key], "commitment_terms": terms, "paid_years": terms * term_years + left,
                                             **({"one_year_commitment_years": left} if ladder else {})})


def scenarios(profile: UsageProfile, params: dict, prices: list[dict] | None = None) -> list[Scenario]:
    """Every strategy for one GPU model's load, at that model's own prices (`prices`: catalog rows,
    the bundled catalog when None). A strategy the parameters and catalog cannot price comes back
    with priced=False and says what is missing."""
    gpu_model = profile.gpu_model or params.get("gpu_model") or UNKNOWN
    mp = model_params(params, gpu_model, bundled_catalog_prices() if prices is None else prices)
    years = int(params["years"])
    runs = (params.get("annualize") or {}).get("one_off_runs_per_year", 1)
    buy, rent, hybrid = mp["buy"], mp["rent"], mp["hybrid"]
    cards = profile.fleet(runs)
    held_year = profile.held_year(runs_per_year=runs)  # GPU-hours needed per year
    busy_year = profile.busy_year(runs_per_year=runs)
    fleet_hours = D(cards) * HOURS_PER_YEAR
    utilization = held_year / fleet_hours
    busy_share = busy_year / held_year if held_year else Decimal(0)
    out = []

    # Buy: enough servers for the peak; power follows how busy the GPUs are.
    if all(k in buy for k in ("server_price", "gpus_per_server", "power_kw_idle", "power_kw_busy", "ops_per_server_year")):
        per_server = int(buy["gpus_per_server"])
        servers = math.ceil(cards / per_server)
        capex = D(buy["server_price"]) * servers
        idle_kw, busy_kw = D(buy["power_kw_idle"]) * servers, D(buy["power_kw_busy"]) * servers
        energy_price = HOURS_PER_YEAR * D(buy["pue"]) * D(buy["price_per_kwh"])
        busy_fraction = busy_year / (D(servers * per_server) * HOURS_PER_YEAR)
        power = (idle_kw + (busy_kw - idle_kw) * busy_fraction) * energy_price
        residual = capex * (1 - D(buy["depreciation_per_year"])) ** years
        interest = annuity_interest(capex, D(buy["financing_rate"]), years)
        out.append(Scenario(
            "buy", f"{servers} server(s) of {per_server} {gpu_model}, owned", servers * per_server,
            capex=capex, yearly_power=power, yearly_ops=D(buy["ops_per_server_year"]) * servers, residual=residual,
            financing=interest, elasticity="fixed",
            fixed_cost=capex + years * (idle_kw * energy_price + D(buy["ops_per_server_year"]) * servers) - residual + interest,
            cost_per_utilization=years * (busy_kw - idle_kw) * energy_price * busy_share * D(cards) / D(servers * per_server),
            inputs={"servers": servers, "busy_fraction": float(round(busy_fraction, 4)), **buy},
        ))
    else:
        out.append(_unpriced("buy", gpu_model, "server price (models.<gpu_model>.buy in the TCO parameters)"))

    if "monthly_per_card" in rent:
        monthly = D(rent["monthly_per_card"]) * 12 * cards
        out.append(Scenario("rent_monthly", f"{cards} {gpu_model} on monthly plans", cards, yearly_rent=monthly,
                            fixed_cost=years * monthly, inputs={"monthly_per_card": rent["monthly_per_card"]}))
    else:
        out.append(_unpriced("rent_monthly", gpu_model, "monthly price"))
    out += [commitment("commit_1y", "commit_1y_per_card_hour", 1, rent, gpu_model, cards, years),
            commitment("commit_3y", "commit_3y_per_card_hour", 3, rent, gpu_model, cards, years)]
    out.append(on_demand(gpu_model, rent, mp["sources"], held_year, fleet_hours, cards, years))
    out.append(spot(profile, gpu_model, rent, mp["sources"], runs, held_year, fleet_hours, cards, years))

    # Hybrid: monthly cards for the training baseline, on demand above it, inference on cheaper
    # cards sized to the load, nothing in the valleys. One-off runs weigh in their own hours only.
    year = profile.training_year(runs)
    monthly_price = rent.get("monthly_per_card")
    baseline = math.ceil(_weighted_quantile(year, D(hybrid["training_baseline_quantile"]))) if monthly_price is not None else 0
    overflow = sum((max(Decimal(0), g - baseline) * w for g, w in year), Decimal(0))
    # Inference on cheaper cards, sized to its busy hours at the target utilization; where telemetry
    # did not cover its hosts their busy hours are unknown (not none), so those GPU-hours held count
    # whole: sized from busy hours alone, a serving load no telemetry saw came to nothing.
    inference_busy = profile.busy_year(("inference",), runs)
    inference_unseen = profile.unseen_held.get("inference", Decimal(0)) * profile.per_year
    inference_hours = ((inference_busy / D(hybrid["inference_target_utilization"]) + inference_unseen)
                       / D(hybrid.get("inference_speed_vs_main_card", 1)))
    missing = [what for what, needed, have in (
        ("on-demand price for training above the monthly baseline", overflow > 0, "on_demand_per_card_hour" in rent),
        (f"on-demand price of {hybrid.get('inference_card')} for inference", inference_hours > 0, "inference_card_hour" in hybrid))
        if needed and not have]
    if missing:
        out.append(_unpriced("hybrid", gpu_model, " and ".join(missing)))
    else:
        hybrid_year = (D(monthly_price or 0) * 12 * baseline + overflow * D(rent.get("on_demand_per_card_hour", 0))
                       + inference_hours * D(hybrid.get("inference_card_hour", 0)))
        out.append(Scenario(
            "hybrid", f"{baseline} {gpu_model} monthly for training, on demand above, inference on "
                      f"{hybrid.get('inference_card')} scaled to load",
            baseline, yearly_rent=hybrid_year, elasticity="mixed", fixed_cost=years * hybrid_year,
            inputs={"training_baseline_cards": baseline, "training_overflow_gpu_hours_per_year": float(round(overflow, 1)),
                    "inference_card_hours_per_year": float(round(inference_hours, 1)),
                    "on_demand_per_card_hour": rent.get("on_demand_per_card_hour"), **hybrid,
                    **({"inference_price_source": mp["sources"]["inference_card_hour"]} if "inference_card_hour" in mp["sources"] else {})},
        ))
    one_off = sum(profile.one_off_held.values(), Decimal(0))
    for s in out:
        s.gpu_model = gpu_model
        s.busy_year = busy_year
        s.inputs = {"gpu_model": gpu_model, "measured_hours": profile.hours, "peak_gpus": profile.fleet(runs),
                    # "paid": no workload held this model; its demand is the GPUs paid for, its busy hours telemetry's.
                    # "busy": workloads held others, not this one; its demand is its busy hours no workload held.
                    "demand": profile.demand,
                    # Busy GPU-hours no workload held, sized as unattributed demand (in the measured period).
                    "unheld_busy_gpu_hours_measured": float(round(profile.unheld_busy, 3)),
                    "utilization": float(round(utilization, 4)), "busy_gpu_hours_per_year": float(round(busy_year, 1)),
                    "held_gpu_hours_per_year": float(round(held_year, 1)),
                    "one_off_gpu_hours_measured": float(round(one_off, 1)), "one_off_runs_per_year": runs,
                    "recurring_scale": float(round(profile.per_year, 4)),
                    **({"converted": params["converted"]} if "converted" in params else {}), **s.inputs}
    return out


def _weighted_quantile(values: list[tuple[Decimal, Decimal]], q: Decimal) -> Decimal:
    """The value below which a share q of the total weight lies (the lower one at a tie)."""
    ordered = sorted(values)
    total = sum((w for _, w in ordered), Decimal(0))
    if not ordered or not total:
        return Decimal(0)
    seen = Decimal(0)
    for value, weight in ordered:
        seen += weight
        if seen >= q * total:
            return value
    return ordered[-1][0]


def break_even(items: list[Scenario]) -> list[dict]:
    """Fleet utilization at which each pair of line-shaped strategies of one GPU model costs the same
    (None if never in 0–100 %)."""
    lines = [s for s in items if s.scenario != "hybrid" and s.priced]
    rows = []
    for i, a in enumerate(lines):
        for b in lines[i + 1:]:
            slope = a.cost_per_utilization - b.cost_per_utilization
            u = (b.fixed_cost - a.fixed_cost) / slope if slope else None
            # Two strategies that both cost nothing at zero use only "cross" there: no break-even.
            within = u is not None and 0 < u <= 1
            # Below the crossing the strategy with the smaller fixed part is the cheaper one.
            cheaper_below = (a.scenario if a.fixed_cost < b.fixed_cost else b.scenario) if within else None
            rows.append({"gpu_model": a.gpu_model, "strategy_a": a.scenario, "strategy_b": b.scenario,
                         "break_even_utilization": float(round(u, 4)) if within else None,
                         "cheaper_below": cheaper_below})
    return rows


FLEET = "fleet"  # gpu_model of the rows that total every model


def _row(scenario: str, description: str, gpu_model: str, cards: int, params: dict, amounts: dict, tco, busy_year: Decimal,
         elasticity: str, inputs: dict) -> dict:
    years = int(params["years"])
    return {
        "scenario": scenario, "description": description, "gpu_model": gpu_model, "cards": cards,
        "currency": params["currency"], "years": years,
        **{k: None if tco is None else money(v) for k, v in amounts.items()},
        "tco": tco,
        "cost_per_busy_gpu_hour": money(tco / (busy_year * years)) if tco is not None and busy_year else None,
        "elasticity": elasticity,
        "inputs": json.dumps(inputs, default=str, sort_keys=True),
    }


AMOUNTS = ("capex", "yearly_power", "yearly_ops", "yearly_rent", "residual", "financing")


def scenario_rows(items: list[Scenario], params: dict, busy_gpu_hours_per_year: Decimal | None = None) -> list[dict]:
    """marts.tco_scenarios rows of one GPU model's strategies, cheapest first (unpriced ones last)."""
    years = int(params["years"])
    rows = [_row(s.scenario, s.description, s.gpu_model, s.cards, params, {k: getattr(s, k) for k in AMOUNTS}, s.tco(years),
                 s.busy_year if busy_gpu_hours_per_year is None else busy_gpu_hours_per_year, s.elasticity, s.inputs)
            for s in items]
    return sorted(rows, key=lambda r: (r["tco"] is None, r["tco"] or 0))


def fleet_rows(per_model: dict[str, list[Scenario]], params: dict) -> list[dict]:
    """The fleet's totals: each strategy for every model at once (priced only where every model's
    is), and `cheapest_mix`, each model on its own cheapest strategy. GPUs of unknown model are left
    out (no price can be theirs): one notebook on an unnamed host left the fleet without an answer."""
    per_model = {m: items for m, items in per_model.items() if m != UNKNOWN}
    years = int(params["years"])
    busy = sum((items[0].busy_year for items in per_model.values() if items), Decimal(0))
    names = list(dict.fromkeys(s.scenario for items in per_model.values() for s in items))
    rows = []
    for name in names:
        chosen = {m: next((s for s in items if s.scenario == name), None) for m, items in per_model.items()}
        missing = [m for m, s in chosen.items() if s is None or not s.priced]
        parts = [s for s in chosen.values() if s is not None and s.priced]
        elasticity = {s.elasticity for s in parts}
        tco = None if missing else sum((s.tco(years) for s in parts), Decimal(0))
        description = (f"{name} for every GPU model" if not missing
                       else f"not priced for the fleet: no {name} price for {', '.join(missing)}")
        rows.append(_row(name, description, FLEET, 0 if missing else sum(s.cards for s in parts), params,
                         {k: sum((getattr(s, k) for s in parts), Decimal(0)) for k in AMOUNTS}, tco, busy,
                         elasticity.pop() if len(elasticity) == 1 else "mixed",
                         {"models": {m: (s.scenario if s and s.priced else None) for m, s in chosen.items()}}))
    best = {}
    for m, items in per_model.items():
        priced = [s for s in items if s.priced]
        if priced:
            best[m] = min(priced, key=lambda s: s.tco(years))
    if best and len(best) == len(per_model):
        parts = list(best.values())
        elasticity = {s.elasticity for s in parts}
        rows.append(_row("cheapest_mix", "each GPU model on its cheapest strategy: "
                         + ", ".join(f"{m} {s.scenario}" for m, s in best.items()), FLEET, sum(s.cards for s in parts), params,
                         {k: sum((getattr(s, k) for s in parts), Decimal(0)) for k in AMOUNTS},
                         sum((s.tco(years) for s in parts), Decimal(0)), busy,
                         elasticity.pop() if len(elasticity) == 1 else "mixed", {"models": {m: s.scenario for m, s in best.items()}}))
    return sorted(rows, key=lambda r: (r["tco"] is None, r["tco"] or 0))
