"""3-year cost of ownership of each purchasing strategy, from the GPU-hours actually used.

Every amount is a Decimal. The measured period (the hourly profile in marts.gpu_hours_profile) is
scaled to a year; each strategy is then priced over `years`. Costs that depend on how much the
fleet is used are linear in its utilization, so the break-even utilization of any two strategies
is where their lines cross.
"""

import json
import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import yaml

DEFAULT_PARAMS = Path(__file__).resolve().parent / "data" / "tco.yaml"
HOURS_PER_YEAR = Decimal(8760)
HOURS_PER_MONTH = Decimal(730)
CENT = Decimal("0.01")
TRAINING = ("pretraining", "finetuning")


def D(value) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def money(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return merged


def load_params(path: Path | None = None) -> dict:
    """The bundled defaults, overridden by the values a user's file gives."""
    params = yaml.safe_load(DEFAULT_PARAMS.read_text())
    if path:
        params = _merge(params, yaml.safe_load(Path(path).read_text()) or {})
    return params


@dataclass(frozen=True)
class UsageProfile:
    """What the measured period says about demand, per hour and per phase."""

    hours: int  # length of the measured period
    peak_gpus: int  # most GPUs held at once
    gpu_hours_held: dict[str, Decimal]  # by phase
    gpu_hours_busy: dict[str, Decimal]
    training_gpus_by_hour: list[Decimal]  # GPUs held by pre-training and fine-tuning, hour by hour

    @property
    def per_year(self) -> Decimal:
        return HOURS_PER_YEAR / D(self.hours)

    def held(self, phases=None) -> Decimal:
        return sum((v for p, v in self.gpu_hours_held.items() if phases is None or p in phases), Decimal(0))

    def busy(self, phases=None) -> Decimal:
        return sum((v for p, v in self.gpu_hours_busy.items() if phases is None or p in phases), Decimal(0))


def profile_from_rows(rows: list[dict]) -> UsageProfile:
    """Rows of marts.gpu_hours_profile (hour, phase, gpu_hours_held, gpu_hours_busy, gpus_paid)."""
    hours = sorted({r["hour"] for r in rows})
    held: dict[str, Decimal] = {}
    busy: dict[str, Decimal] = {}
    per_hour: dict = {h: Decimal(0) for h in hours}
    training: dict = {h: Decimal(0) for h in hours}
    for r in rows:
        h_held, h_busy = D(round(r["gpu_hours_held"], 6)), D(round(r["gpu_hours_busy"], 6))
        held[r["phase"]] = held.get(r["phase"], Decimal(0)) + h_held
        busy[r["phase"]] = busy.get(r["phase"], Decimal(0)) + h_busy
        per_hour[r["hour"]] += h_held
        if r["phase"] in TRAINING:
            training[r["hour"]] += h_held
    peak = max(per_hour.values(), default=Decimal(0))
    return UsageProfile(len(hours), math.ceil(peak), held, busy, [training[h] for h in hours])


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

    def tco(self, years: int) -> Decimal:
        return money(self.capex + years * (self.yearly_power + self.yearly_ops + self.yearly_rent) - self.residual + self.financing)


def _quantile(values: list[Decimal], q: Decimal) -> Decimal:
    ordered = sorted(values)
    if not ordered:
        return Decimal(0)
    return ordered[min(len(ordered) - 1, int((D(q) * (len(ordered) - 1)).to_integral_value(ROUND_HALF_EVEN)))]


def annuity_interest(principal: Decimal, rate: Decimal, years: int) -> Decimal:
    """Interest paid over a loan of `principal` repaid in equal yearly instalments."""
    if rate == 0:
        return Decimal(0)
    instalment = principal * rate / (1 - (1 + rate) ** -years)
    return instalment * years - principal


def scenarios(profile: UsageProfile, params: dict) -> list[Scenario]:
    years = int(params["years"])
    buy, rent, hybrid = params["buy"], params["rent"], params["hybrid"]
    cards = max(profile.peak_gpus, 1)
    held_year = profile.held() * profile.per_year  # GPU-hours needed per year
    busy_year = profile.busy() * profile.per_year
    fleet_hours = D(cards) * HOURS_PER_YEAR
    utilization = held_year / fleet_hours
    busy_share = profile.busy() / profile.held() if profile.held() else Decimal(0)
    out = []

    # Buy: enough servers for the peak; power follows how busy the GPUs are.
    servers = math.ceil(cards / int(buy["gpus_per_server"]))
    capex = D(buy["server_price"]) * servers
    idle_kw, busy_kw = D(buy["power_kw_idle"]) * servers, D(buy["power_kw_busy"]) * servers
    energy_price = HOURS_PER_YEAR * D(buy["pue"]) * D(buy["price_per_kwh"])
    busy_fraction = busy_year / (D(servers * int(buy["gpus_per_server"])) * HOURS_PER_YEAR)
    power = (idle_kw + (busy_kw - idle_kw) * busy_fraction) * energy_price
    residual = capex * (1 - D(buy["depreciation_per_year"])) ** years
    interest = annuity_interest(capex, D(buy["financing_rate"]), years)
    out.append(Scenario(
        "buy", f"{servers} server(s) of {buy['gpus_per_server']} GPUs, owned", servers * int(buy["gpus_per_server"]),
        capex=capex, yearly_power=power, yearly_ops=D(buy["ops_per_server_year"]) * servers, residual=residual,
        financing=interest, elasticity="fixed",
        fixed_cost=capex + years * (idle_kw * energy_price + D(buy["ops_per_server_year"]) * servers) - residual + interest,
        cost_per_utilization=years * (busy_kw - idle_kw) * energy_price * busy_share * D(cards) / D(servers * int(buy["gpus_per_server"])),
        inputs={"servers": servers, "busy_fraction": float(round(busy_fraction, 4)), **buy},
    ))

    monthly = D(rent["monthly_per_card"]) * 12 * cards
    out.append(Scenario("rent_monthly", f"{cards} cards on monthly plans", cards, yearly_rent=monthly,
                        fixed_cost=years * monthly, inputs={"monthly_per_card": rent["monthly_per_card"]}))
    for name, key, term in (("commit_1y", "commit_1y_per_card_hour", "1-year"), ("commit_3y", "commit_3y_per_card_hour", "3-year")):
        yearly = D(rent[key]) * HOURS_PER_YEAR * cards
        out.append(Scenario(name, f"{cards} cards on {term} commitments", cards, yearly_rent=yearly,
                            fixed_cost=years * yearly, inputs={key: rent[key]}))
    for name, key, rework, what in (("on_demand", "on_demand_per_card_hour", Decimal(0), "on demand, only the hours used"),
                                    ("spot", "spot_per_card_hour", D(rent["spot_rework"]),
                                     "spot, with rework after preemptions (interruptible work only)")):
        rate = D(rent[key]) * (1 + rework)
        out.append(Scenario(name, what, cards, yearly_rent=held_year * rate, elasticity="elastic",
                            cost_per_utilization=years * fleet_hours * rate,
                            inputs={key: rent[key], **({"spot_rework": rent["spot_rework"]} if rework else {})}))

    # Hybrid: monthly cards for the training baseline, on demand above it, inference on cheaper
    # cards sized to the load, nothing in the valleys.
    baseline = math.ceil(_quantile(profile.training_gpus_by_hour, D(hybrid["training_baseline_quantile"])))
    overflow = sum((max(Decimal(0), g - baseline) for g in profile.training_gpus_by_hour), Decimal(0)) * profile.per_year
    inference_hours = (profile.busy(("inference",)) * profile.per_year
                       / D(hybrid["inference_target_utilization"]) / D(hybrid["inference_speed_vs_main_card"]))
    hybrid_year = (D(rent["monthly_per_card"]) * 12 * baseline + overflow * D(rent["on_demand_per_card_hour"])
                   + inference_hours * D(hybrid["inference_card_hour"]))
    out.append(Scenario(
        "hybrid", f"{baseline} monthly cards for training, on demand above, inference on {hybrid['inference_card']} scaled to load",
        baseline, yearly_rent=hybrid_year, elasticity="mixed", fixed_cost=years * hybrid_year,
        inputs={"training_baseline_cards": baseline, "training_overflow_gpu_hours_per_year": float(round(overflow, 1)),
                "inference_card_hours_per_year": float(round(inference_hours, 1)), **hybrid},
    ))
    for s in out:
        s.inputs = {"measured_hours": profile.hours, "peak_gpus": profile.peak_gpus, "utilization": float(round(utilization, 4)),
                    "busy_gpu_hours_per_year": float(round(busy_year, 1)), **s.inputs}
    return out


def break_even(items: list[Scenario]) -> list[dict]:
    """Fleet utilization at which each pair of line-shaped strategies costs the same (None if never in 0–100 %)."""
    lines = [s for s in items if s.scenario != "hybrid"]
    rows = []
    for i, a in enumerate(lines):
        for b in lines[i + 1:]:
            slope = a.cost_per_utilization - b.cost_per_utilization
            u = (b.fixed_cost - a.fixed_cost) / slope if slope else None
            # Two strategies that both cost nothing at zero use only "cross" there: no break-even.
            within = u is not None and 0 < u <= 1
            # Below the crossing the strategy with the smaller fixed part is the cheaper one.
            cheaper_below = (a.scenario if a.fixed_cost < b.fixed_cost else b.scenario) if within else None
            rows.append({"strategy_a": a.scenario, "strategy_b": b.scenario,
                         "break_even_utilization": float(round(u, 4)) if within else None,
                         "cheaper_below": cheaper_below})
    return rows


def scenario_rows(items: list[Scenario], params: dict, busy_gpu_hours_per_year: Decimal) -> list[dict]:
    years = int(params["years"])
    rows = []
    for s in items:
        tco = s.tco(years)
        rows.append({
            "scenario": s.scenario, "description": s.description, "gpu_model": params["gpu_model"], "cards": s.cards,
            "currency": params["currency"], "years": years,
            "capex": money(s.capex), "yearly_power": money(s.yearly_power), "yearly_ops": money(s.yearly_ops),
            "yearly_rent": money(s.yearly_rent), "residual": money(s.residual), "financing": money(s.financing),
            "tco": tco,
            "cost_per_busy_gpu_hour": money(tco / (busy_gpu_hours_per_year * years)) if busy_gpu_hours_per_year else None,
            "elasticity": s.elasticity,
            "inputs": json.dumps(s.inputs, default=str, sort_keys=True),
        })
    return sorted(rows, key=lambda r: r["tco"])
