"""Charts as self-contained SVG (matplotlib, Agg backend: no display, no network)."""

import io
from decimal import Decimal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)


def tco_chart(scenario_table: list[dict], break_even_lines: list[dict], utilization: float, currency: str, years: int) -> str:
    """Left: each strategy's TCO. Right: cost against fleet utilization for the strategies whose
    cost is a line in it, with the measured utilization marked, so break-evens can be read off."""
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(11, 4.2))
    ordered = sorted(scenario_table, key=lambda r: r["tco"])
    names = [r["scenario"] for r in ordered]
    values = [float(r["tco"]) / 1000 for r in ordered]
    bars.barh(names, values, color=["#2f7d4a" if i == 0 else "#6b8fb5" for i in range(len(values))])
    bars.invert_yaxis()
    bars.set_xlabel(f"{years}-year TCO (thousand {currency})")
    bars.set_title("cost of each strategy for the measured usage")
    for y, v in enumerate(values):
        bars.text(v, y, f" {v:,.0f}k", va="center", fontsize=8)
    xs = [i / 100 for i in range(0, 101, 5)]
    for line in break_even_lines:
        ys = [(float(line["fixed_cost"]) + float(line["cost_per_utilization"]) * x) / 1000 for x in xs]
        lines.plot([x * 100 for x in xs], ys, label=line["scenario"])
    lines.axvline(utilization * 100, color="black", linestyle="--", linewidth=1)
    lines.text(utilization * 100, lines.get_ylim()[1] * 0.95, f" measured {utilization:.0%}", fontsize=8)
    lines.set_xlabel("fleet utilization (% of card-hours needed)")
    lines.set_ylabel(f"thousand {currency}")
    lines.set_title("where strategies break even")
    lines.legend(fontsize=7)
    return to_svg(fig)


def to_svg(fig) -> str:
    """The figure as an SVG document, and the figure closed."""
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    return buffer.getvalue()


def as_float(value) -> float:
    return float(value) if isinstance(value, Decimal) else value
