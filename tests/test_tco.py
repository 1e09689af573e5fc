"""The purchasing model and the published-claims check, pinned to hand-computed figures."""

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from typer.testing import CliRunner

from models.tco import (FLEET, break_even, bundled_catalog_prices, fleet_rows, load_params, profile_from_rows, profiles_by_model,
                        scenario_rows, scenarios)
from models.tco_claims import check_claims
from pipelines.cli.main import app


def flat_day() -> list[dict]:
    """24 hours of A100-80GB: 8 GPUs training at 80 % busy and 1 GPU serving at 25 %, every hour (all recurring)."""
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows = []
    for h in range(24):
        hour = start + timedelta(hours=h)
        rows += [{"hour": hour, "gpu_model": "A100-80GB", "phase": "pretraining", "load": "recurring", "gpu_hours_held": 8.0,
                  "gpu_hours_busy": 6.4},
                 {"hour": hour, "gpu_model": "A100-80GB", "phase": "inference", "load": "recurring", "gpu_hours_held": 1.0,
                  "gpu_hours_busy": 0.25}]
    return rows


@pytest.fixture
def priced():
    params = load_params()
    profile = profile_from_rows(flat_day())
    items = scenarios(profile, params)
    rows = {r["scenario"]: r for r in scenario_rows(items, params)}
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
    # Training on spot, inference on demand: (70,080 × 1.15 rework × 1.40 + 8,760 × 3.50) × 3.
    assert rows["spot"]["tco"] == Decimal("430466.40")
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
    mine.write_text("models:\n  A100-80GB:\n    rent:\n      monthly_per_card: 1000\n")
    params = load_params(mine)
    a100 = params["models"]["A100-80GB"]
    assert a100["rent"]["monthly_per_card"] == 1000 and a100["rent"]["commit_1y_per_card_hour"] == 2.40
    assert params["rent"]["on_demand_per_card_hour"] == "catalog" and params["buy"]["pue"] == 1.5
    assert a100["buy"]["server_price"] == 800000 and "RTX-6000-Ada" in params["models"]


def test_a_misspelt_key_or_a_value_out_of_range_is_refused_naming_each(tmp_path):
    """A typo used to keep the default silently, and a negative price priced a strategy below zero:
    either changed a recommendation without a word. Both are refused, before any work (exit 2)."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("buy:\n  price_per_kwH: 2.0\n  depreciation_per_year: 1.5\nrent:\n  spot_per_card_hour: -1\n"
                    "models:\n  A100-80GB:\n    buy:\n      gpus_per_servr: 8\nbogus: 3\n")
    with pytest.raises(ValueError) as refused:
        load_params(mine)
    assert str(refused.value) == (
        f"{mine}: buy.depreciation_per_year: Input should be less than or equal to 1 (got 1.5); "
        "buy.price_per_kwH: not a parameter (did you mean price_per_kwh?); "
        "rent.spot_per_card_hour: Input should be greater than or equal to 0 (got -1); "
        "models.A100-80GB.buy.gpus_per_servr: not a parameter (did you mean gpus_per_server?); "
        "bogus: not a parameter (one of: currency, years, gpu_model, annualize, buy, rent, hybrid, models)")
    result = CliRunner().invoke(app, ["tco", "--params", str(mine), "--warehouse", str(tmp_path / "none.duckdb")],
                                terminal_width=400)
    assert result.exit_code == 2 and "did you mean price_per_kwh?" in result.output, result.output
    # `catalog` stays a price, and the bundled file passes its own schema.
    mine.write_text("rent:\n  spot_per_card_hour: catalog\nmodels:\n  H100-80GB:\n    buy:\n      server_price: 2500000\n")
    assert load_params(mine)["rent"]["spot_per_card_hour"] == "catalog"


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
                 "published claims", "79.46", "1.04", "A100-80GB", "RTX-6000-Ada", "fleet total"):
        assert text in result.output


def test_the_demo_warehouse_shares_one_gpu_model_key_and_prices_each_model(demo_db):
    # Telemetry's 'NVIDIA A100-SXM4-80GB' and billing's 'A100 80G' are one key; the raw name stays beside it.
    minutes = demo_db.execute("SELECT DISTINCT gpu_model, gpu_model_name, gpu_model_known FROM core.gpu_minutes ORDER BY 1").fetchall()
    assert minutes == [("A100-80GB", "NVIDIA A100-SXM4-80GB", True), ("RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation", True)]
    billed = demo_db.execute("SELECT DISTINCT x_GpuModel FROM core.cost_lines WHERE x_GpuModel IS NOT NULL ORDER BY 1").fetchall()
    assert billed == [("A100-80GB",), ("RTX-6000-Ada",)]
    assert demo_db.execute("SELECT count(*) FROM core.price_catalog WHERE gpu_model = 'RTX-6000-Ada'").fetchone()[0] >= 2
    rows = {(m, s): (cards, tco) for m, s, cards, tco in demo_db.execute(
        "SELECT gpu_model, scenario, cards, tco FROM marts.tco_scenarios").fetchall()}
    assert rows[("A100-80GB", "rent_monthly")][0] == 10 and rows[("RTX-6000-Ada", "on_demand")][0] == 1
    assert rows[("RTX-6000-Ada", "on_demand")][1] == Decimal("15242.40")  # 8,760 h × 0.58 × 3
    # 3,840 one-off pre-training GPU-hours once + 2,668 recurring fine-tuning GPU-hours × 9.125, at 3.50, for 3 years.
    assert rows[("A100-80GB", "on_demand")][1] == Decimal("295947.75")


def test_claims_from_a_users_file_are_printed_as_text_not_markup(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text('claims:\n  - {id: x, text: "[/] GPU [red]deal[/red]", kind: rate, unit: CNY, stated: 10, price: 2, quantity: 5}\n')
    result = CliRunner().invoke(app, ["tco", "--check", "--claims", str(claims), "--warehouse", str(tmp_path / "none.duckdb")],
                                terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "[/] GPU [red]deal[/red]" in result.output and "yes" in result.output  # 5 × 2 = 10 follows


def test_a_stated_figure_is_judged_at_the_precision_it_was_written_with(tmp_path):
    # YAML reads 1.10 as 1.1; the author wrote it to the hundredth, so 1.14 does not round to it.
    claims = tmp_path / "claims.yaml"
    claims.write_text(
        "claims:\n"
        "  - {id: hundredth, text: t, kind: sum, stated: 1.10, terms: {a: {amount: 1.14, count: 1}}}\n"
        "  - {id: tenth, text: t, kind: sum, stated: 1.1, terms: {a: {amount: 1.14, count: 1}}}\n"
        '  - {id: quoted, text: t, kind: sum, stated: "1.10", terms: {a: {amount: 1.14, count: 1}}}\n'
        "  - {id: pct_tenth, text: t, kind: saving, stated: 40.0, baseline: 100, alternative: 59.6}\n"
        "  - {id: pct_whole, text: t, kind: saving, stated: 40, baseline: 100, alternative: 59.6}\n")
    checks = {c.id: c for c in check_claims(claims)}
    assert {i: c.follows for i, c in checks.items()} == {
        "hundredth": False, "tenth": True, "quoted": False, "pct_tenth": False, "pct_whole": True}
    assert str(checks["hundredth"].stated) == "1.10" and checks["pct_tenth"].recomputed == Decimal("40.4")
    result = CliRunner().invoke(app, ["tco", "--check", "--claims", str(claims), "--warehouse", str(tmp_path / "none.duckdb")],
                                terminal_width=250)
    assert result.exit_code == 0 and "│ 1.10 " in result.output, result.output  # the stated column, as written


@pytest.mark.parametrize("claim, field", [
    ("{id: no_hours, text: t, kind: rate, stated: 10, price: 2, quantity: 0}", "quantity"),
    ("{id: free, text: t, kind: rate, stated: 10, price: 0.0, quantity: 5}", "price"),
    ("{id: never, text: t, kind: sum, stated: 1, terms: {a: {amount: 1, count: 1}, b: {amount: 2, count: 0}}}", "terms.b.count"),
    ("{id: nothing, text: t, kind: saving, stated: 10, baseline: 0, alternative: 5}", "baseline"),
    ("{id: worthless, text: t, kind: depreciation, stated: 0.2, price: 0, rate: 0.4, years: 3}", "price"),
    ("{id: at_once, text: t, kind: depreciation, stated: 0.2, price: 1, rate: 0.4, years: 0}", "years"),
])
def test_a_claim_with_a_zero_the_check_divides_by_is_refused_in_one_line(tmp_path, claim, field):
    claims = tmp_path / "claims.yaml"
    claims.write_text(f"claims:\n  - {claim}\n")
    claim_id = claim.split(",")[0].removeprefix("{id: ")
    with pytest.raises(ValueError) as refused:
        check_claims(claims)
    assert str(refused.value) == f"{claims}: claim {claim_id}: {field} is 0, but the check divides by it"
    result = CliRunner().invoke(app, ["tco", "--check", "--claims", str(claims), "--warehouse", str(tmp_path / "none.duckdb")],
                                terminal_width=400, prog_name="finops")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"finops tco: Invalid value for '--claims': {claims}: claim {claim_id}: {field} is 0, but the check divides by it "
        "(see finops tco --help)"]



def test_a_depreciation_over_part_of_a_year_is_worked_as_stated(tmp_path):
    """Years were cut to whole ones: 2.5 was worked as 2 (0.288, no), and 0.5 as 0, then divided by."""
    claims = tmp_path / "claims.yaml"
    claims.write_text("claims:\n  - {id: half, text: t, kind: depreciation, stated: 0.22, price: 0.80, rate: 0.40, years: 2.5}\n"
                      "  - {id: months, text: t, kind: depreciation, stated: 0.77, price: 1, rate: 0.4, years: 0.5}\n")
    checks = {c.id: c for c in check_claims(claims)}
    assert round(checks["half"].recomputed, 6) == Decimal("0.223084") and checks["half"].follows is True  # 0.80 × 0.6^2.5
    assert "^2.5 =" in checks["half"].working
    assert round(checks["months"].recomputed, 6) == Decimal("0.774597") and checks["months"].follows is True  # 0.6^0.5

@pytest.mark.parametrize("text, problem", [
    ("claims:\n  - {id: half, text: t, kind: rate, stated: 10, price: 2}\n", "claim half: no quantity"),
    ("claims:\n  - {id: words, text: t, kind: rate, stated: 10, price: two, quantity: 3}\n",
     "claim words: a figure is not a number (or its terms not a mapping)"),
    ("claims:\n  - {text: t, kind: saving, stated: 10, baseline: 20}\n", "claim #1: no id"),
    ("claims: 3\n", "the file must hold a list of claims under `claims:`"),
    ("claims:\n  - {id: over, text: t, kind: depreciation, stated: 0.1, price: 1, rate: 1.2, years: 2.5}\n",
     "claim over: rate is 1.2, not between 0 and 1"),
])
def test_a_claim_missing_a_field_or_not_a_number_is_refused_in_one_line(tmp_path, text, problem):
    """A claim without its quantity, or with a price in words, ended in a KeyError or decimal traceback."""
    claims = tmp_path / "claims.yaml"
    claims.write_text(text)
    with pytest.raises(ValueError) as refused:
        check_claims(claims)
    assert str(refused.value) == f"{claims}: {problem}"
    result = CliRunner().invoke(app, ["tco", "--check", "--claims", str(claims), "--warehouse", str(tmp_path / "none.duckdb")],
                                terminal_width=400, prog_name="finops")
    assert result.exit_code == 2 and problem in result.output, result.output

def demo_shaped() -> list[dict]:
    """40 days as the bundled scenario has them: a one-off pre-training run on 8 A100-80GB for the first
    20 days, recurring fine-tuning on 2 more A100-80GB throughout, and an RTX 6000 Ada serving inference."""
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows = []
    for h in range(960):
        hour = start + timedelta(hours=h)
        rows += [{"hour": hour, "gpu_model": "A100-80GB", "phase": "pretraining", "load": "one_off",
                  "gpu_hours_held": 8.0 if h < 480 else 0.0, "gpu_hours_busy": 6.4 if h < 480 else 0.0},
                 {"hour": hour, "gpu_model": "A100-80GB", "phase": "finetuning", "load": "recurring", "gpu_hours_held": 2.0,
                  "gpu_hours_busy": 1.3},
                 {"hour": hour, "gpu_model": "RTX-6000-Ada", "phase": "inference", "load": "recurring", "gpu_hours_held": 1.0,
                  "gpu_hours_busy": 0.15}]
    return rows


@pytest.fixture
def per_model():
    params = load_params()
    models = {m: scenarios(p, params, bundled_catalog_prices()) for m, p in profiles_by_model(demo_shaped()).items()}
    rows = {(r["gpu_model"], r["scenario"]): r for items in models.values() for r in scenario_rows(items, params)}
    rows.update({(FLEET, r["scenario"]): r for r in fleet_rows(models, params)})
    return params, models, rows


def test_each_gpu_model_is_sized_on_its_own(per_model):
    _, models, rows = per_model
    assert set(models) == {"A100-80GB", "RTX-6000-Ada"}
    # 8 pre-training + 2 fine-tuning A100s at the peak, not 11 cards of the fleet priced as A100.
    assert rows[("A100-80GB", "rent_monthly")]["cards"] == 10 and rows[("RTX-6000-Ada", "on_demand")]["cards"] == 1
    assert rows[("A100-80GB", "rent_monthly")]["tco"] == Decimal("479520.00")  # 10 × 1,332 × 36
    assert rows[("RTX-6000-Ada", "buy")]["cards"] == 4  # one 4-GPU RTX server, at its own price
    assert rows[("RTX-6000-Ada", "buy")]["capex"] == Decimal("280000.00")


def test_on_demand_is_priced_at_each_models_own_catalog_price(per_model):
    _, _, rows = per_model
    rtx = rows[("RTX-6000-Ada", "on_demand")]
    # 8,760 RTX 6000 Ada hours a year at 0.58 CNY (the catalog's Lumen GPU Cloud price), not at the A100's 3.50.
    assert rtx["tco"] == Decimal("15242.40")  # 8,760 × 0.58 × 3
    assert json.loads(rtx["inputs"])["on_demand_per_card_hour"] == "0.58"
    assert "Lumen GPU Cloud rtx-6000-ada-on-demand" in json.loads(rtx["inputs"])["price_source"]
    assert json.loads(rows[("A100-80GB", "on_demand")]["inputs"])["on_demand_per_card_hour"] == "3.50"
    # A strategy with no price for a model is said so, never priced with another model's numbers.
    assert rows[("RTX-6000-Ada", "rent_monthly")]["tco"] is None
    assert rows[(FLEET, "rent_monthly")]["tco"] is None and "RTX-6000-Ada" in rows[(FLEET, "rent_monthly")]["description"]


def test_a_one_off_run_is_counted_once_not_scaled_to_a_year(per_model):
    params, models, rows = per_model
    a100 = models["A100-80GB"][0]
    # 3,840 one-off pre-training GPU-hours once + 1,920 recurring fine-tuning GPU-hours × 9.125.
    assert a100.inputs["held_gpu_hours_per_year"] == 21360.0 and a100.inputs["one_off_gpu_hours_measured"] == 3840.0
    assert rows[("A100-80GB", "on_demand")]["tco"] == Decimal("224280.00")  # 21,360 × 3.50 × 3 (×9.125 would be 551,880)
    # Hybrid: the year's median training hour holds 2 cards (monthly); the run above them is on demand once.
    hybrid = rows[("A100-80GB", "hybrid")]
    assert hybrid["cards"] == 2 and json.loads(hybrid["inputs"])["training_overflow_gpu_hours_per_year"] == 3840.0
    assert hybrid["tco"] == Decimal("136224.00")  # (2 × 1,332 × 12 + 3,840 × 3.50) × 3
    assert rows[(FLEET, "on_demand")]["tco"] == Decimal("239522.40")  # 224,280 + 15,242.40
    twice = {**params, "annualize": {"one_off_runs_per_year": 2}}
    again = scenario_rows(scenarios(profiles_by_model(demo_shaped())["A100-80GB"], twice, bundled_catalog_prices()), twice)
    assert next(r for r in again if r["scenario"] == "on_demand")["tco"] == Decimal("264600.00")  # (7,680 + 17,520) × 3.50 × 3


def test_a_model_no_workload_held_is_sized_from_the_gpus_paid_when_telemetry_shows_it_busy():
    """Paid for 4 GPUs, busy 3 GPU-hours an hour by telemetry, no workload: 4 cards held, 3 busy, one
    recurring load; paid for with nothing busy either: one card with no load, as before."""
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows = [{"hour": start + timedelta(hours=h), "gpu_model": model, "phase": phase, "load": load, "gpu_hours_held": 0.0,
             "gpu_hours_busy": 0.0, "gpus_paid": 4.0, "gpu_hours_busy_any": Decimal(3) if model == "L40S" else Decimal(0)}
            for h in range(48) for model in ("L40S", "A10G") for phase in ("pretraining", "inference", "unattributed")
            for load in ("recurring", "one_off")]
    profiles = profiles_by_model(rows)
    busy, unheld = profiles["L40S"], profiles["A10G"]
    assert (busy.demand, busy.peak_gpus, busy.held(), busy.busy(), busy.held_year(), busy.busy_year()) == \
        ("paid", 4, Decimal(192), Decimal(144), Decimal(4 * 8760), Decimal(3 * 8760))
    assert busy.gpu_hours_held == {"unattributed": Decimal(192)} and not busy.one_off_held
    assert (unheld.demand, unheld.peak_gpus, unheld.held()) == ("workloads", 0, Decimal(0))
    params = load_params()
    params["models"]["L40S"] = {"rent": {"monthly_per_card": 1000}}
    rent = {s.scenario: s for s in scenarios(busy, params, bundled_catalog_prices())}
    assert rent["rent_monthly"].cards == 4 and rent["rent_monthly"].inputs["demand"] == "paid"


def test_paid_sizing_holds_only_without_workloads_and_busy_never_exceeds_the_gpus_paid():
    """A workload held any GPU (here 8 on a host no charge or telemetry names: model 'unknown'):
    every model is sized from what workloads held and from the busy hours none held: 16 busy H100s
    (the unknown host's job is its own model's, left out of the fleet's totals, not taken off them).
    Without it, busy telemetry past the GPUs paid for (a host billed elsewhere) counts at most the GPUs paid."""
    start = datetime(2026, 9, 1, tzinfo=UTC)
    h100 = [{"hour": start + timedelta(hours=h), "gpu_model": "H100-80GB", "phase": "unattributed", "load": "recurring",
             "gpu_hours_held": 0.0, "gpu_hours_busy": 0.0, "gpus_paid": 8.0, "gpu_hours_busy_any": 16.0,
             "gpu_hours_busy_unheld": 16.0, "gpu_hours_held_unseen": 0.0} for h in range(24)]
    unknown = [{"hour": start + timedelta(hours=h), "gpu_model": "unknown", "phase": "finetuning", "load": "recurring",
                "gpu_hours_held": 8.0, "gpu_hours_busy": 0.0, "gpus_paid": 0.0, "gpu_hours_busy_any": 0.0,
                "gpu_hours_busy_unheld": 0.0, "gpu_hours_held_unseen": 8.0} for h in range(24)]
    alone = profiles_by_model(h100)["H100-80GB"]
    assert (alone.demand, alone.peak_gpus, alone.held(), alone.busy()) == ("paid", 8, Decimal(192), Decimal(192))
    beside = profiles_by_model(h100 + unknown)
    assert (beside["H100-80GB"].demand, beside["H100-80GB"].peak_gpus, beside["H100-80GB"].unheld_busy) == ("busy", 16, Decimal(384))
    assert beside["unknown"].peak_gpus == 8


def hour_rows(hours: int, model: str, held: float, busy_unheld: float, paid: float, unseen: float = 0.0) -> list[dict]:
    start = datetime(2026, 9, 1, tzinfo=UTC)
    return [{"hour": start + timedelta(hours=h), "gpu_model": model, "phase": "finetuning", "load": "recurring",
             "gpu_hours_held": held, "gpu_hours_busy": held, "gpus_paid": paid, "gpu_hours_busy_any": held + busy_unheld,
             "gpu_hours_busy_unheld": busy_unheld, "gpu_hours_held_unseen": unseen} for h in range(hours)]


@pytest.mark.parametrize("paid", [9.0, 1.0])
def test_beside_workloads_busy_hours_no_workload_held_are_demand(paid):
    """One 1-GPU job all day beside an 8-GPU host busy with no workload: 9 cards (it was 1), however
    many GPUs are paid for (busy cards on premises, or billed elsewhere, are demand too)."""
    profile = profiles_by_model(hour_rows(24, "H100-80GB", 1.0, 8.0, paid))["H100-80GB"]
    assert (profile.demand, profile.peak_gpus, profile.unheld_busy) == ("workloads", 9, Decimal(8 * 24))
    assert profile.held() == Decimal(9 * 24) and profile.held(["unattributed"]) == Decimal(8 * 24)


def test_busy_hours_no_workload_held_leave_out_what_workloads_telemetry_does_not_see_held():
    """A 4-GPU job known by its resource id alone (its host unknown to telemetry, so its own busy
    minutes are no workload's in the busy split) beside 3.6 busy GPU-hours an hour no workload held:
    they may be its own, so 4 cards, not 8. A job on a host no telemetry or charge names (model
    'unknown') is taken off none: that model is left out of the fleet's totals, and taken off the
    others' its hours counted nowhere. An L4 job telemetry sees is taken off none either."""
    alone = profiles_by_model(hour_rows(24, "H100-80GB", 4.0, 3.6, 8.0, unseen=4.0))["H100-80GB"]
    assert (alone.peak_gpus, alone.unheld_busy) == (4, Decimal(0))
    rows = hour_rows(24, "H100-80GB", 0.0, 6.0, 8.0) + hour_rows(24, "A100-80GB", 0.0, 2.0, 0.0) \
        + hour_rows(24, "L4", 8.0, 0.0, 0.0) + hour_rows(24, "unknown", 4.0, 0.0, 0.0, unseen=4.0)
    profiles = profiles_by_model(rows)
    assert (profiles["H100-80GB"].peak_gpus, profiles["H100-80GB"].unheld_busy) == (6, Decimal(6 * 24))
    assert (profiles["A100-80GB"].peak_gpus, profiles["A100-80GB"].unheld_busy) == (2, Decimal(2 * 24))
    assert (profiles["L4"].peak_gpus, profiles["unknown"].peak_gpus) == (8, 4)
    assert profiles["A100-80GB"].demand == "busy"
