"""Purchasing strategies over the measured usage: read the hourly profile, price every strategy,
and write marts.tco_scenarios and marts.tco_break_even. Used by the asset and by `finops tco`."""

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from models.tco import break_even, load_params, profile_from_rows, scenario_rows, scenarios
from pipelines.warehouse import fetch_dicts

TCO_SCENARIOS = pa.schema([
    ("scenario", pa.string()), ("description", pa.string()), ("gpu_model", pa.string()), ("cards", pa.int32()),
    ("currency", pa.string()), ("years", pa.int32()),
    *((name, pa.decimal128(18, 2)) for name in ("capex", "yearly_power", "yearly_ops", "yearly_rent", "residual",
                                                 "financing", "tco", "cost_per_busy_gpu_hour")),
    ("elasticity", pa.string()), ("inputs", pa.string()),
])
TCO_BREAK_EVEN = pa.schema([("strategy_a", pa.string()), ("strategy_b", pa.string()),
                            ("break_even_utilization", pa.float64()), ("cheaper_below", pa.string())])


class NoUsageMeasured(ValueError):
    """The warehouse holds no GPU charges or workloads to size strategies from."""


@dataclass
class TcoResult:
    scenarios: list[dict]  # marts.tco_scenarios rows, cheapest first
    break_even: list[dict]  # marts.tco_break_even rows
    params: dict
    lines: list[dict]  # cost = fixed_cost + cost_per_utilization × u, for the line-shaped strategies
    utilization: float  # the measured fleet utilization

    def chart_svg(self) -> str:
        from pipelines.charts import tco_chart

        return tco_chart(self.scenarios, self.lines, self.utilization, self.params["currency"], int(self.params["years"]))


def compute(conn, params_file: str | None = None) -> TcoResult:
    rows = fetch_dicts(conn, "SELECT hour, phase, gpu_hours_held, gpu_hours_busy FROM marts.gpu_hours_profile")
    if not rows:
        raise NoUsageMeasured("marts.gpu_hours_profile is empty: no GPU charges (x_GpuCount) or workloads loaded yet")
    params = load_params(Path(params_file) if params_file else None)
    profile = profile_from_rows(rows)
    items = scenarios(profile, params)
    busy_year = profile.busy() * profile.per_year
    lines = [{"scenario": s.scenario, "fixed_cost": s.fixed_cost, "cost_per_utilization": s.cost_per_utilization}
             for s in items if s.scenario != "hybrid"]
    return TcoResult(scenario_rows(items, params, busy_year), break_even(items), params, lines,
                     items[0].inputs["utilization"])


def write(conn, scenario_table: list[dict], break_even_table: list[dict]) -> None:
    for name, table, schema in (("marts.tco_scenarios", scenario_table, TCO_SCENARIOS),
                                ("marts.tco_break_even", break_even_table, TCO_BREAK_EVEN)):
        conn.register("tco_rows", pa.Table.from_pylist(table, schema=schema))
        conn.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM tco_rows")
        conn.unregister("tco_rows")


def cheapest(scenario_table: list[dict]) -> dict:
    return min(scenario_table, key=lambda r: r["tco"] if r["tco"] is not None else Decimal("Infinity"))
