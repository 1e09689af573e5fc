"""Charts as self-contained SVG (matplotlib, Agg backend: no display, no network)."""

import io
from decimal import Decimal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

# Labels come from data (services, resources): a `$` in them is text, never mathtext to parse.
matplotlib.rcParams["text.parse_math"] = False
# Figures are about 9 inches wide and shown at the page's width (~1200 px, or scrolled at 560 px on
# a phone): 11-point text stays readable at either.
matplotlib.rcParams.update({"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
                            "ytick.labelsize": 10, "legend.fontsize": 10, "axes.spines.top": False,
                            "axes.spines.right": False})
PHASE_COLORS = {"pretraining": "#9467bd", "finetuning": "#1f77b4", "inference": "#2ca02c", "idle": "#d62728",
                "unattributed": "#8c8c8c"}
PHASE_LABELS = {"pretraining": "Pre-training", "finetuning": "Fine-tuning", "inference": "Inference",
                "idle": "Idle (paid, nothing ran)", "unattributed": "Unattributed"}


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
    if break_even_lines:  # a legend of no lines only warns (and the warning reached the terminal)
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


def _thousands(ax, axis: str = "y") -> None:
    from matplotlib.ticker import StrMethodFormatter

    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _day_ticks(ax, labels: list[str], every: int) -> None:
    """A tick label every few days, horizontal, instead of 30 rotated ones."""
    ax.set_xticks(range(0, len(labels), every), [labels[i] for i in range(0, len(labels), every)])


def daily_cost_chart(rows: list[dict], currency: str, width: float = 9) -> str | None:
    """Stacked daily cost by phase over the report's window, in the reporting currency."""
    if not rows:
        return None
    days = sorted({r["day"] for r in rows})
    order = list(PHASE_COLORS)
    phases = sorted({r["phase"] for r in rows}, key=lambda p: order.index(p) if p in order else len(order))
    cost = {(r["day"], r["phase"]): as_float(r["cost"] or 0) for r in rows}
    fig, ax = plt.subplots(figsize=(width, 3.4 if width > 6 else 3.6))
    bottom = [0.0] * len(days)
    for phase in phases:
        values = [cost.get((d, phase), 0.0) for d in days]
        ax.bar(range(len(days)), values, bottom=bottom, label=PHASE_LABELS.get(phase, phase),
               color=PHASE_COLORS.get(phase), width=0.8)
        bottom = [b + v for b, v in zip(bottom, values)]
    _day_ticks(ax, [d.strftime("%b %-d") for d in days], max(1, len(days) // (6 if width > 6 else 3)))
    ax.set_ylabel(f"{currency} per day")
    _thousands(ax)
    ncols = min(len(phases), 5 if width > 6 else 2)
    ax.legend(ncols=ncols, loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=9)
    return to_svg(fig)


def anomaly_charts(panels: list[dict], width: float = 9) -> str:
    """One panel per anomalous series: actual (solid) against expected (dashed), alerted days in red."""
    cols = min(len(panels), 2 if width > 6 else 1)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(width, 2.9 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        labels = [d.strftime("%b %-d") for d in panel["days"]]
        xs = list(range(len(labels)))
        ax.plot(xs, [as_float(v) for v in panel["actual"]], color="#1f77b4", label="actual")
        ax.plot(xs, [as_float(v) for v in panel["expected"]], color="#7f7f7f", linestyle="--", label="expected")
        alert_x = [x for x, f in zip(xs, panel["flagged"]) if f]
        alert_y = [as_float(v) for v, f in zip(panel["actual"], panel["flagged"]) if f]
        ax.scatter(alert_x, alert_y, color="#d62728", zorder=3, label="anomalous")
        ax.set_title(panel["title"][:60], fontsize=11)
        if panel.get("unit"):
            ax.set_ylabel(f"{panel['unit']} per day")
        _day_ticks(ax, labels, max(1, len(labels) // 4))
        _thousands(ax)
        ax.legend(fontsize=9, frameon=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    return to_svg(fig)


def hidden_costs_chart(findings: list[dict], width: float = 9) -> str | None:
    """The leaks by avoidable cost (reporting currency), largest on top, each bar labelled with its
    amount; by wasted cost when nothing is known to be avoidable (a dark instance's leak), and no
    chart at all when every amount is zero (bars of nothing on an axis of zeros say nothing)."""
    which = "avoidable" if any(f.get("avoidable_cost_reporting") for f in findings) else "wasted"
    rows = [f for f in findings if f.get(f"{which}_cost_reporting") is not None]
    if not any(f[f"{which}_cost_reporting"] for f in rows):
        return None
    currency = rows[0]["reporting_currency"] if rows else ""
    narrow = width <= 6
    fig, ax = plt.subplots(figsize=(width, (0.62 if narrow else 0.42) * max(len(rows), 1) + 1.0))
    labels = []
    for f in rows:
        name = str(f.get("title") or f"{f['kind']}: {f['resource']}")
        limit = 26 if narrow else 44
        name = name if len(name) <= limit else name[:limit - 1] + "…"
        period = f" ({f['period']})" if f.get("period") else ""
        labels.append(f"{name}\n{period.strip()}" if narrow and period else name + period)
    values = [as_float(f[f"{which}_cost_reporting"]) for f in rows]
    ax.barh(range(len(values)), values, color="#ff7f0e")
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    places = 0 if max(values) >= 100 else 2  # small leaks keep their cents, not a row of "0"
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,.{places}f}", va="center", fontsize=10)
    ax.set_xlim(0, max([*values, 1e-9]) * 1.15)  # room for the labels; never an empty range
    ax.set_xlabel(f"{which} cost ({currency})")
    _thousands(ax, "x")
    return to_svg(fig)


def utilization_chart(phases: list[dict], width: float = 9) -> str:
    """GPU utilization of each phase (the month to the scored day), against its typical range where there is one."""
    rows = [p for p in phases if p.get("utilization_pct") is not None]
    fig, ax = plt.subplots(figsize=(width, 2.8 if width > 6 else 3.2))
    short = {"idle": "Idle"} if width <= 6 else {}
    names = [short.get(p["phase"]) or PHASE_LABELS.get(p["phase"], p["phase"]) for p in rows]
    ax.bar(range(len(rows)), [float(p["utilization_pct"]) for p in rows], color="#2ca02c", label="measured", width=0.6)
    for i, p in enumerate(rows):
        ax.text(i, float(p["utilization_pct"]) + 1, f"{float(p['utilization_pct']):.0f} %", ha="center", va="bottom", fontsize=10,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        if p.get("typical_util_pct_low") is not None:
            ax.plot([i - 0.4, i + 0.4], [float(p["typical_util_pct_low"])] * 2, color="black", linestyle=":")
            ax.plot([i - 0.4, i + 0.4], [float(p["typical_util_pct_high"])] * 2, color="black", linestyle=":")
    ax.set_xticks(range(len(rows)), names)
    ax.set_ylabel("busy ÷ paid GPU-hours (%)")
    ax.set_ylim(0, 105)
    ax.set_title("GPU utilization by phase (dotted: typical range)" if width > 6 else "GPU utilization\n(dotted: typical range)",
                 fontsize=11)
    return to_svg(fig)
