"""Purchasing strategies over the measured usage: read the hourly profile, price every strategy,
and write marts.tco_scenarios and marts.tco_break_even. Used by the asset and by `finops tco`."""

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa

from models.tco import (FLEET, UNKNOWN, NoRateToConvert, break_even, bundled_catalog_prices, fleet_rows, load_params, profiles_by_model, scenario_rows,
                        scenarios)
from pipelines.warehouse.connection import SQL_DIR, fetch_dicts, table_exists

TCO_SCENARIOS = pa.schema([
    ("scenario", pa.string()), ("description", pa.string()), ("gpu_model", pa.string()), ("cards", pa.int32()),
    ("currency", pa.string()), ("years", pa.int32()),
    *((name, pa.decimal128(18, 2)) for name in ("capex", "yearly_power", "yearly_ops", "yearly_rent", "residual",
                                                 "financing", "tco", "cost_per_busy_gpu_hour")),
    ("elasticity", pa.string()), ("inputs", pa.string()),
])
TCO_BREAK_EVEN = pa.schema([("gpu_model", pa.string()), ("strategy_a", pa.string()), ("strategy_b", pa.string()),
                            ("break_even_utilization", pa.float64()), ("cheaper_below", pa.string())])


class NoUsageMeasured(ValueError):
    """The warehouse holds no GPU charges or workloads to size strategies from."""


# What leaves the strategies unpriced without failing the run: nothing measured yet, or a
# parameters file whose currency the bundled amounts cannot be converted into. The report and the
# asset say why; `finops tco` prints it and exits 1.
NotPriced = (NoUsageMeasured, NoRateToConvert)


@dataclass
class TcoResult:
    scenarios: list[dict]  # marts.tco_scenarios rows: each GPU model's strategies, then the fleet's totals
    break_even: list[dict]  # marts.tco_break_even rows, per GPU model
    params: dict
    lines: list[dict]  # cost = fixed_cost + cost_per_utilization × u, for the main model's line-shaped strategies
    utilization: float  # the main model's measured utilization
    main_model: str = ""  # the model with the most GPU-hours a year: the chart's lines are its own

    @property
    def unmatched_model_keys(self) -> list[str]:
        """The `models.<key>` of the user's parameters that no measured GPU model has (a GPU not
        bought yet, or a key spelt otherwise than the billing spells the model)."""
        return [k for k in self.params.get("own_model_keys", []) if k not in self.gpu_models]

    def no_chart_reason(self) -> str:
        """Why chart_svg() drew nothing, in words."""
        if not any(r["tco"] is not None for r in self.scenarios):
            return "no strategy is priced"
        return "every priced strategy comes to nothing (no workload held its GPUs)"

    def model_rows(self, gpu_model: str) -> list[dict]:
        return [r for r in self.scenarios if r["gpu_model"] == gpu_model]

    @property
    def gpu_models(self) -> list[str]:
        return list(dict.fromkeys(r["gpu_model"] for r in self.scenarios if r["gpu_model"] != FLEET))

    def chart_svg(self) -> str | None:
        """The strategies' TCO over the parameters' years and the break-even chart; None when every priced strategy comes to
        nothing (no workload held a model priced only by use): an axis of zeros says nothing."""
        from pipelines.report.charts import tco_chart

        fleet = [r for r in self.model_rows(FLEET) if r["tco"] is not None]
        rows = fleet or [r for r in self.model_rows(self.main_model) if r["tco"] is not None]
        if not any(r["tco"] for r in rows):
            return None
        return tco_chart(rows, self.lines, self.utilization, self.params["currency"], int(self.params["years"]), self.main_model)


def catalog_prices(conn) -> list[dict]:
    """GPU prices per GPU-hour from core.price_catalog (the bundled catalog where it is not built yet)."""
    if not table_exists(conn, "core.price_catalog"):
        return bundled_catalog_prices()
    return fetch_dicts(conn, """
        SELECT gpu_model, term, currency, price_per_gpu_hour, provider, sku, source FROM core.price_catalog
        WHERE gpu_model IS NOT NULL AND price_per_gpu_hour IS NOT NULL""")


def newest_rate(conn, day: date):
    """rate(from, to) → (one unit of `from` in `to`, the rate's date), the newest core.fx_rates
    holds on or before `day`, or None: what converts the bundled purchasing amounts into a user's
    currency."""
    def rate(from_currency: str, to_currency: str):
        if not table_exists(conn, "core.fx_rates"):
            return None
        rows = fetch_dicts(conn, (SQL_DIR / "queries" / "newest_rate.sql").read_text(),
                           {"from_currency": from_currency, "to_currency": to_currency, "day": day})
        return (rows[0]["rate"], rows[0]["rate_date"]) if rows else None
    return rate


def compute(conn, params_file: str | None = None) -> TcoResult:
    rows = fetch_dicts(conn, "SELECT * FROM marts.gpu_hours_profile")
    profiles = profiles_by_model(rows)
    if not profiles:
        raise NoUsageMeasured("marts.gpu_hours_profile is empty: no GPU charge (a billing line with x_GpuCount) is loaded yet, "
                               "and its hours are the hours GPUs were paid for; workloads alone do not make one")
    # Converted at the rate of the measured period's last day: the same in the mart, the report and
    # `finops tco`, whatever day they run (a report of the 3rd and the mart disagreed by the rates between).
    last_day = max(r["hour"] for r in rows).date()
    params = load_params(Path(params_file) if params_file else None, rate=newest_rate(conn, last_day))
    prices = catalog_prices(conn)
    per_model = {m: scenarios(p, params, prices) for m, p in profiles.items()}
    table = [row for items in per_model.values() for row in scenario_rows(items, params)]
    table += fleet_rows(per_model, params)
    # The chart's model: the one with the most GPU-hours among those with a priced strategy (one
    # no price covers draws no line), by name on a tie.
    main = max(per_model, key=lambda m: (m != UNKNOWN, any(s.priced for s in per_model[m]),
                                         per_model[m][0].inputs["held_gpu_hours_per_year"], m))
    lines = [{"scenario": s.scenario, "fixed_cost": s.fixed_cost, "cost_per_utilization": s.cost_per_utilization}
             for s in per_model[main] if s.scenario != "hybrid" and s.priced]
    crossings = [b for items in per_model.values() for b in break_even(items)]
    return TcoResult(table, crossings, params, lines, per_model[main][0].inputs["utilization"], main)


def write(conn, scenario_table: list[dict], break_even_table: list[dict]) -> None:
    for name, table, schema in (("marts.tco_scenarios", scenario_table, TCO_SCENARIOS),
                                ("marts.tco_break_even", break_even_table, TCO_BREAK_EVEN)):
        conn.register("tco_rows", pa.Table.from_pylist(table, schema=schema))
        conn.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM tco_rows")
        conn.unregister("tco_rows")


def cheapest(scenario_table: list[dict]) -> dict | None:
    """The cheapest strategy for the whole fleet; None when none is priced for every GPU model (a
    model's cheapest is then no answer for the fleet)."""
    fleet = [r for r in scenario_table if r["gpu_model"] == FLEET and r["tco"] is not None]
    return min(fleet, key=lambda r: r["tco"]) if fleet else None


def unpriced_models(scenario_table: list[dict]) -> list[str]:
    """The GPU models no strategy is priced for (of a known model: the fleet's totals leave out GPUs
    of unknown model)."""
    models = dict.fromkeys(r["gpu_model"] for r in scenario_table if r["gpu_model"] not in (FLEET, UNKNOWN))
    return [m for m in models if not any(r["tco"] is not None for r in scenario_table if r["gpu_model"] == m)]


def whole_terms_notes(scenario_table: list[dict]) -> list[str]:
    """Commitments paid for more years than the horizon, or laddered: a table shows their yearly
    rent and TCO only, so how the years were paid is said beside it."""
    return [f"{r['scenario'].replace('_', ' ')} ({r['gpu_model']}): {r['description'].split(', ', 1)[1]}."
            for r in scenario_table if r["gpu_model"] != FLEET and ", paid for whole terms" in (r["description"] or "")]


def unknown_left_out(scenario_table: list[dict]) -> str | None:
    """What the fleet's totals leave out: the GPUs of hosts whose GPU model nothing names."""
    rows = [r for r in scenario_table if r["gpu_model"] == UNKNOWN]
    if not rows:
        return None
    held = json.loads(rows[0]["inputs"] or "{}").get("held_gpu_hours_per_year") or 0
    what = (f"{held:,.1f} GPU-hours a year held by workloads" if held
            else "GPUs paid for that no workload held (their hours are not known)")
    return (f"Left out of the fleet's totals: {what} on hosts whose GPU model no telemetry or charge names (model "
            "unknown); name their GPU in the workload or telemetry files to price them.")
