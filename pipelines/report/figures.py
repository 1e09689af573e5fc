"""Figures as a reader sees them in the report and the terminal summary: money to the cent, shares
rounded once.

Kept apart from the report (polars, the anomaly models) so the terminal summary imports nothing heavy."""

from decimal import ROUND_HALF_UP, Decimal


CENT = Decimal("0.01")


def money(value, currency: str | None = "") -> str:
    """An amount with thousands separators, rounded half-up to the cent (as an invoice rounds; a
    Decimal's own format rounds half to even), and its currency: 4,671.37 CNY."""
    if value is None:
        return "—"
    amount = (value if isinstance(value, Decimal) else Decimal(str(value))).quantize(CENT, ROUND_HALF_UP)
    return f"{amount:,.2f} {currency or ''}".rstrip()


def tenths_pct(part, whole) -> Decimal | None:
    """`part` of `whole` in percent, rounded once, half up, to one decimal (None without a whole)."""
    if part is None or not whole:
        return None
    return (Decimal(str(part)) * 100 / Decimal(str(whole))).quantize(Decimal("0.1"), ROUND_HALF_UP)


def with_shown_shares(rows: list[dict]) -> list[dict]:
    """The phases of one period with the share and utilization a reader sees, each rounded once:
    from the exact amounts and the GPU-hours, not from the mart's share_pct and utilization_pct,
    which are rounded to two decimals already (a second rounding showed 13.65 → 13.7 % where the
    exact 13.647 % is 13.6 %, as the header's idle share says)."""
    total = sum((Decimal(r["cost_reporting"] or 0) for r in rows), Decimal(0))
    return [{**r, "share_shown": tenths_pct(r["cost_reporting"] or 0, total),
             "utilization_shown": utilization_shown(r)} for r in rows]


def utilization_shown(row: dict) -> Decimal | None:
    """Busy of paid GPU-hours, rounded once; None where the mart's utilization is unknown (a phase's
    GPUs no telemetry covers: their busy hours are missing, not zero). Idle time is nobody's busy
    time by definition: 0 of its paid hours."""
    if "utilization_pct" in row and row["utilization_pct"] is None and row.get("phase") != "idle":
        return None
    return tenths_pct(row["gpu_hours_busy"], row["gpu_hours_paid"])


def json_value(value) -> str:
    """A value JSON cannot hold, as text (json.dumps' default): money in plain digits, never in
    exponent form (a zero summed at 10 decimals is Decimal('0E-10'), which str() writes as is)."""
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)
