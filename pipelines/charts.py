"""Charts as self-contained SVG (matplotlib, Agg backend: no display, no network)."""

import io
from decimal import Decimal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

# Labels come from data (services, resources): a `$` in them is text, never mathtext to parse.
matplotlib.rcParams["text.parse_math"] = False


def tco_chart(scenario_table: list[dict], break_even_lines: list[dict], utilization: float, currency: str, years: int,
              lines_model: str = "") -> str:
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
    lines.set_title(f"where {lines_model} strategies break even" if lines_model else "where strategies break even")
    lines.legend(fontsize=7)
    return to_svg(fig)


def to_svg(fig) -> str:
    """The figure as an SVG document, and the figure closed."""
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})  # the same data draws the same file
    plt.close(fig)
    return buffer.getvalue()


def as_float(value) -> float:
    return float(value) if isinstance(value, Decimal) else value


def anomaly_charts(panels: list[dict]) -> str:
    """One small panel per anomaly: actual (solid) against expected (dashed), alerted days in red."""
    cols = min(len(panels), 2)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.8 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        days = [d.isoformat()[5:] for d in panel["days"]]
        ax.plot(days, [as_float(v) for v in panel["actual"]], color="#1f77b4", label="actual")
        ax.plot(days, [as_float(v) for v in panel["expected"]], color="#7f7f7f", linestyle="--", label="expected")
        alert_x = [d for d, f in zip(days, panel["flagged"]) if f]
        alert_y = [as_float(v) for v, f in zip(panel["actual"], panel["flagged"]) if f]
        ax.scatter(alert_x, alert_y, color="#d62728", zorder=3, label="anomalous")
        ax.set_title(panel["title"][:80], fontsize=9)
        ax.tick_params(axis="x", labelrotation=90, labelsize=6)
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    return to_svg(fig)


def hidden_costs_chart(findings: list[dict]) -> str:
    """The top hidden costs by avoidable cost (reporting currency), largest on top."""
    rows = [f for f in findings if f.get("avoidable_cost_reporting") is not None]
    fig, ax = plt.subplots(figsize=(11, 0.45 * max(len(rows), 1) + 1.2))
    labels = [f"{f['kind']}/{f['subkind']}: {str(f['resource'])[:48]}" for f in rows]
    values = [float(f["avoidable_cost_reporting"]) for f in rows]
    ax.barh(labels, values, color="#ff7f0e")
    ax.invert_yaxis()
    ax.set_xlabel(f"avoidable cost ({rows[0]['reporting_currency'] if rows else ''})")
    ax.set_title("top hidden costs")
    ax.tick_params(axis="y", labelsize=7)
    return to_svg(fig)


def utilization_chart(phases: list[dict]) -> str:
    """GPU utilization of each phase this month, against its typical range where there is one."""
    rows = [p for p in phases if p.get("utilization_pct") is not None]
    fig, ax = plt.subplots(figsize=(11, 3.2))
    names = [p["phase"] for p in rows]
    ax.bar(names, [float(p["utilization_pct"]) for p in rows], color="#2ca02c", label="measured")
    for i, p in enumerate(rows):
        if p.get("typical_util_pct_low") is not None:
            ax.plot([i - 0.4, i + 0.4], [float(p["typical_util_pct_low"])] * 2, color="black", linestyle=":")
            ax.plot([i - 0.4, i + 0.4], [float(p["typical_util_pct_high"])] * 2, color="black", linestyle=":")
    ax.set_ylabel("busy / paid GPU-hours (%)")
    ax.set_ylim(0, 100)
    ax.set_title("utilization by phase (dotted: typical range)")
    return to_svg(fig)
