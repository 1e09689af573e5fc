"""The purchasing model and the published-claims check, pinned to hand-computed figures."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from models.tco import break_even, load_params, profile_from_rows, scenario_rows, scenarios
from models.tco_claims import check_claims
from pipelines.cli import app


def flat_day() -> list[dict]:
    """24 hours: 8 GPUs training at 80 % busy and 1 GPU serving at 25 %, every hour."""
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows = []
    for h in range(24):
        hour = start + timedelta(hours=h)
        rows += [{"hour": hour, "phase": "pretraining", "gpu_hours_held": 8.0, "gpu_hours_busy": 6.4},
                 {"hour": hour, "phase": "inference", "gpu_hours_held": 1.0, "gpu_hours_busy": 0.25}]
    return rows


@pytest.fixture
def priced():
    params = load_params()
    profile = profile_from_rows(flat_day())
    items = scenarios(profile, params)
    rows = {r["scenario"]: r for r in scenario_rows(items, params, profile.busy() * profile.per_year)}
    return profile, items, rows


def test_profile_scales_the_measured_day_to_a_year(priced):
    profile, _, _ = priced
    assert (profile.hours, profile.peak_gpus, profile.per_year) == (24, 9, Decimal(365))
    assert profile.held() == Decimal(216) and profile.busy() == Decimal("159.6")


def test_buy_with_utilization_dependent_power_and_depreciation(priced):
    _, _, rows = priced
    buy = rows["buy"]
    assert (buy["cards"], buy["capex"], buy["residual"], buy["yearly_ops"]) == (16, Decimal("1600000.00"), Decimal("345600.00"), Decimal("200000.00"))
    # Two servers: (2.4 kW idle + 10.6 kW × 6.65/16 busy) × 8760 h × PUE 1.5 × 1.2 CNY/kWh.
    assert buy["yearly_power"] == Decimal("107311.10")
    assert buy["tco"] == Decimal("2176333.28")  # 1.6 M + 3 × (107,311.095 + 200,000) − 345,600


def test_rentals_commitments_spot_and_hybrid(priced):
    _, _, rows = priced
    assert rows["rent_monthly"]["tco"] == Decimal("431568.00")  # 9 cards × 1,332 × 36 months
    assert rows["on_demand"]["tco"] == Decimal("827820.00")  # 78,840 GPU-hours a year × 3.50 × 3
    assert rows["commit_3y"]["tco"] == Decimal("449388.00")  # 9 × 8,760 × 1.90 × 3
    assert rows["spot"]["tco"] == Decimal("380797.20")  # 78,840 × 1.15 rework × 1.40 × 3
    # 8 monthly cards for training, none above it; inference 0.25 × 8,760 / 0.6 = 3,650 h at 0.58.
    assert rows["hybrid"]["cards"] == 8 and rows["hybrid"]["tco"] == Decimal("389967.00")
    assert rows["hybrid"]["cost_per_busy_gpu_hour"] == Decimal("2.23")  # ÷ (159.6 × 365 × 3)


def test_break_even_utilization_between_strategies(priced):
    _, items, _ = priced
    crossings = {(b["strategy_a"], b["strategy_b"]): b for b in break_even(items)}
    monthly = crossings[("rent_monthly", "on_demand")]
    assert monthly["break_even_utilization"] == pytest.approx(1332 * 12 / (8760 * 3.5), abs=1e-4)  # 52.1 %
    assert monthly["cheaper_below"] == "on_demand"
    assert crossings[("on_demand", "spot")]["break_even_utilization"] is None  # spot is cheaper at every level
    assert crossings[("buy", "rent_monthly")]["break_even_utilization"] is None  # 16 owned GPUs never pay off here


def test_user_parameters_override_only_what_they_give(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("rent:\n  monthly_per_card: 1000\n")
    params = load_params(mine)
    assert params["rent"]["monthly_per_card"] == 1000 and params["rent"]["on_demand_per_card_hour"] == 3.50
    assert params["buy"]["pue"] == 1.5


def test_published_claims_are_recomputed_and_judged():
    checks = {c.id: c for c in check_claims()}
    assert checks["onprem_3y"].recomputed == Decimal("1.04") and checks["onprem_3y"].follows is False
    assert "residual = 0.30" in checks["onprem_3y"].to_reproduce
    assert checks["onprem_residual"].recomputed == Decimal("0.1728") and "33.0567 % a year" in checks["onprem_residual"].to_reproduce
    assert checks["customer_rtx_inference"].recomputed == Decimal("79.46") and checks["customer_rtx_inference"].follows is False
    assert checks["customer_a100_month"].recomputed == Decimal("7104.00") and "price 5.72917" in checks["customer_a100_month"].to_reproduce
    assert checks["cloud_monthly_3y"].follows is False
    assert checks["customer_saving"].follows is True  # (76 − 44) / 76 = 42.1 %
    assert checks["hybrid_3y"].follows is None and checks["hybrid_3y"].to_reproduce.startswith("needs:")


def test_tco_command_on_the_demo_warehouse(demo_run):
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(demo_run.out / "warehouse.duckdb"), "--check"], terminal_width=250)
    assert result.exit_code == 0, result.output
    for text in ("purchasing strategies", "hybrid", "rent_monthly", "break-even", "cheapest for this usage profile",
                 "published claims", "79.46", "1.04"):
        assert text in result.output


def test_claims_from_a_users_file_are_printed_as_text_not_markup(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text('claims:\n  - {id: x, text: "[/] GPU [red]deal[/red]", kind: rate, unit: CNY, stated: 10, price: 2, quantity: 5}\n')
    result = CliRunner().invoke(app, ["tco", "--check", "--claims", str(claims), "--warehouse", str(tmp_path / "none.duckdb")],
                                terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "[/] GPU [red]deal[/red]" in result.output and "yes" in result.output  # 5 × 2 = 10 follows
