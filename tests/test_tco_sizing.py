"""The purchasing model as an analyst deciding what to buy or rent meets it: a fleet sized for the
GPUs held at once, parameters of their own read as they mean them, commitments paid for whole
terms, spot offered for interruptible work only. Each figure is worked out beside it."""

import json
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import duckdb
import pytest
from typer.testing import CliRunner

from tests.conftest import warehouse_from_files
from models.tco import bundled_catalog_prices, load_params, model_params, profile_from_rows, scenario_rows, scenarios
from pipelines.analysis import tco
from pipelines.cli.main import app

START = datetime(2026, 9, 1, tzinfo=UTC)


def rows_of(strategies: list, params: dict) -> dict:
    return {r["scenario"]: r for r in scenario_rows(strategies, params)}


def hours(count: int, **phases) -> list[dict]:
    """`count` hours of A100-80GB rows: phase → (load, GPU-hours held, busy) every hour."""
    return [{"hour": START + timedelta(hours=h), "gpu_model": "A100-80GB", "phase": phase, "load": load,
             "gpu_hours_held": held, "gpu_hours_busy": busy}
            for h in range(count) for phase, (load, held, busy) in phases.items()]


def write_params(tmp_path, text: str):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    return path


def test_a_currency_of_ones_own_converts_the_bundled_amounts_it_leaves(tmp_path):
    """`currency: USD` alone used to relabel the bundled CNY prices as USD (a 1,332 CNY monthly card
    became 1,332 USD, beside catalog prices truly in USD)."""
    mine = write_params(tmp_path, "currency: USD\nmodels:\n  A100-80GB:\n    rent:\n      spot_per_card_hour: 1.10\n")
    params = load_params(mine, rate=lambda a, b: (Decimal("0.14"), "2026-10-30") if (a, b) == ("CNY", "USD") else None)
    a100 = params["models"]["A100-80GB"]
    assert a100["rent"]["monthly_per_card"] == Decimal("186.48")  # 1,332 × 0.14
    assert a100["buy"]["server_price"] == Decimal("112000.00")  # 800,000 × 0.14
    assert params["buy"]["price_per_kwh"] == Decimal("0.168")  # 1.2 × 0.14
    assert a100["rent"]["spot_per_card_hour"] == 1.10  # the user's own, already in USD
    assert params["rent"]["on_demand_per_card_hour"] == "catalog"  # read in USD from the catalog
    assert params["converted"]["rate"] == "0.14" and "models.A100-80GB.rent.monthly_per_card" in params["converted"]["keys"]
    strategies = scenarios(profile_from_rows(hours(24, finetuning=("recurring", 8.0, 6.0))), params, bundled_catalog_prices())
    rows = rows_of(strategies, params)
    assert rows["rent_monthly"]["currency"] == "USD"
    assert rows["rent_monthly"]["tco"] == Decimal("53706.24")  # 8 × 186.48 × 36
    assert rows["on_demand"]["tco"] == Decimal("376329.60")  # 70,080 GPU-hours a year × 1.79 (Lambda, USD) × 3
    # No rate: refused, naming what stays in CNY.
    with pytest.raises(ValueError, match=r"currency USD: the bundled amounts are in CNY and no CNY→USD rate is known.*"
                                         r"models\.A100-80GB\.rent\.monthly_per_card"):
        load_params(mine, rate=lambda a, b: None)


def test_a_currency_of_ones_own_on_a_warehouse_uses_the_rate_of_the_measured_periods_last_day(tmp_path):
    warehouse = tmp_path / "wh.duckdb"
    conn = duckdb.connect(str(warehouse))
    conn.execute("CREATE SCHEMA core")
    conn.execute("CREATE TABLE core.fx_rates (rate_date DATE, from_currency VARCHAR, to_currency VARCHAR, rate DECIMAL(18, 10))")
    conn.execute("INSERT INTO core.fx_rates VALUES ('2026-10-01', 'CNY', 'USD', 0.1400), ('2026-10-30', 'CNY', 'USD', 0.1500)")
    assert tco.newest_rate(conn, date(2026, 10, 31))("CNY", "USD") == (Decimal("0.1500000000"), date(2026, 10, 30))
    # The mart, the report and `finops tco` convert at the rate of the measured period's last day,
    # whatever day they run on.
    assert tco.newest_rate(conn, date(2026, 10, 15))("CNY", "USD") == (Decimal("0.1400000000"), date(2026, 10, 1))
    assert tco.newest_rate(conn, date(2026, 10, 31))("CNY", "EUR") is None
    conn.close()


def test_a_shared_value_of_ones_own_applies_to_every_model(tmp_path):
    """A user's `rent.spot_per_card_hour` was ignored for the A100, whose bundled per-model price won."""
    mine = write_params(tmp_path, "buy:\n  server_price: 400000\nrent:\n  spot_per_card_hour: 0.5\n  monthly_per_card: 900\n"
                                  "models:\n  A100-80GB:\n    rent:\n      monthly_per_card: 1000\n")
    params = load_params(mine)
    a100 = model_params(params, "A100-80GB", [])
    assert a100["rent"]["spot_per_card_hour"] == 0.5  # the user's shared value over the bundled 1.40
    assert a100["rent"]["monthly_per_card"] == 1000  # the user's own per-model value over their shared one
    assert a100["rent"]["commit_3y_per_card_hour"] == 1.90  # what the user left alone
    assert model_params(params, "RTX-6000-Ada", [])["buy"]["gpus_per_server"] == 4
    rows = rows_of(scenarios(profile_from_rows(hours(24, finetuning=("recurring", 8.0, 6.0))), params, bundled_catalog_prices()), params)
    assert rows["spot"]["tco"] == Decimal("120888.00")  # 70,080 × 0.5 × 1.15 rework × 3
    assert rows["buy"]["capex"] == Decimal("400000.00")


def test_empty_values_and_billing_spellings_of_model_keys_are_refused(tmp_path):
    """`pue:` with no value crashed the pricing (null over the default); `models: {A100 80G: …}`
    matched no model and was ignored without a word; a server drawing less busy than idle made its
    power fall as its GPUs worked."""
    for text, problem in (
            ("buy:\n  pue:\n", "buy.pue: no value (leave the key out to keep the default)"),
            ("rent:\n", "rent: no value (leave the key out to keep the default)"),
            ("models:\n  A100 80G:\n    rent:\n      monthly_per_card: 500\n", "models.A100 80G: not a GPU model key (did you mean A100-80GB?)"),
            ("models:\n  h100-80gb:\n    rent:\n      monthly_per_card: 500\n", "models.h100-80gb: not a GPU model key (did you mean H100-80GB?)"),
            ("models:\n  A100-80GB:\n    buy:\n      power_kw_idle: 3\n      power_kw_busy: 2\n",
             "models.A100-80GB.buy: power_kw_busy 2 is below power_kw_idle 3"),
            # Busy power of the user's own against the bundled idle 1.2 of the A100.
            ("models:\n  A100-80GB:\n    buy:\n      power_kw_busy: 1.0\n", "models.A100-80GB.buy: power_kw_busy 1.0 is below power_kw_idle 1.2")):
        mine = write_params(tmp_path, text)
        with pytest.raises(ValueError) as refused:
            load_params(mine)
        assert str(refused.value) == f"{mine}: {problem}"
        result = CliRunner().invoke(app, ["tco", "--params", str(mine), "--warehouse", str(tmp_path / "none.duckdb")], terminal_width=400)
        assert result.exit_code == 2 and problem in result.output, result.output
    # A GPU the bundled table does not list keeps its billing name, even one close to a listed name
    # (GB300 beside GB200): refused, it could not be priced at all.
    for model in ("Gaudi3", "GB300", "MI300A"):
        assert load_params(write_params(tmp_path, f"models:\n  {model}:\n    rent:\n      monthly_per_card: 500\n"))["models"][model]


def test_a_commitment_is_paid_for_whole_terms(tmp_path):
    """A 3-year commitment over a 1-year horizon was prorated to a year (166,440) and ranked ahead of
    the 1-year one it cannot undercut. Past its last whole term, a further term or 1-year
    commitments pay the years left, whichever costs less."""
    profile = profile_from_rows(hours(24, finetuning=("recurring", 10.0, 6.0)))
    # 10 cards × 8,760 h: 166,440 a year on 3-year terms (1.90), 210,240 on 1-year ones (2.40).
    for years, commit_3y, commit_1y, how in (
            (1, "499320.00", "210240.00", ", paid for whole terms: 1 × 3 years"),  # the whole term
            (3, "499320.00", "630720.00", ""),
            (4, "709560.00", "840960.00", ", paid for whole terms: 1 × 3 years + 1 year(s) of 1-year commitments"),  # 499,320 + 210,240
            (5, "919800.00", "1051200.00", ", paid for whole terms: 1 × 3 years + 2 year(s) of 1-year commitments"),  # + 2 × 210,240
            (7, "1208880.00", "1471680.00", ", paid for whole terms: 2 × 3 years + 1 year(s) of 1-year commitments")):
        params = load_params(write_params(tmp_path, f"years: {years}\n"))
        rows = rows_of(scenarios(profile, params, bundled_catalog_prices()), params)
        assert (rows["commit_3y"]["tco"], rows["commit_1y"]["tco"], rows["commit_3y"]["description"]) == (
            Decimal(commit_3y), Decimal(commit_1y), f"10 A100-80GB on 3-year commitments{how}"), years
        assert rows["commit_3y"]["yearly_rent"] == Decimal("166440.00")
    # Without a 1-year price, 5 years are two 3-year terms.
    params = load_params(write_params(tmp_path, "years: 5\n"))
    params["models"]["A100-80GB"]["rent"].pop("commit_1y_per_card_hour")
    commit_3y = rows_of(scenarios(profile, params, bundled_catalog_prices()), params)["commit_3y"]
    assert (commit_3y["tco"], commit_3y["description"]) == (Decimal("998640.00"), "10 A100-80GB on 3-year commitments, paid for whole terms: 2 × 3 years")


def test_spot_serves_training_and_leaves_the_rest_on_demand():
    """Spot was priced on every hour held, and ranked cheapest for a round-the-clock serving load;
    load of no known phase (GPUs paid for, busy hours no workload held) may be serving too."""
    params = load_params()
    serving = profile_from_rows(hours(24, inference=("recurring", 4.0, 2.0)))
    rows = rows_of(scenarios(serving, params, bundled_catalog_prices()), params)
    assert rows["spot"]["tco"] == rows["on_demand"]["tco"] == Decimal("367920.00")  # 35,040 h × 3.50 × 3
    assert rows["spot"]["description"] == "A100-80GB no training to put on spot: all on demand"
    mixed = profile_from_rows(hours(24, finetuning=("recurring", 8.0, 6.0), unattributed=("recurring", 2.0, 2.0)))
    spot = rows_of(scenarios(mixed, params, bundled_catalog_prices()), params)["spot"]
    # (70,080 × 1.40 × 1.15 rework + 17,520 × 3.50) × 3.
    assert (spot["tco"], spot["description"]) == (Decimal("522446.40"), "A100-80GB training on spot, with rework after preemptions, the rest on demand")
    # Without an on-demand price there is nothing to serve the rest with: spot is not priced.
    no_on_demand = {**params, "rent": {k: v for k, v in params["rent"].items() if k != "on_demand_per_card_hour"}}
    spot = rows_of(scenarios(serving, no_on_demand, []), no_on_demand)["spot"]
    assert spot["tco"] is None and "(spot serves interruptible training only)" in spot["description"]


def test_one_off_runs_left_out_of_the_year_size_no_cards():
    """`one_off_runs_per_year: 0` left the run's GPU-hours out but still sized the fleet for its 8 cards."""
    rows = [r for h in range(960) for r in (
        {"hour": START + timedelta(hours=h), "gpu_model": "A100-80GB", "phase": "pretraining", "load": "one_off",
         "gpu_hours_held": 8.0 if h < 480 else 0.0, "gpu_hours_busy": 6.4 if h < 480 else 0.0},
        {"hour": START + timedelta(hours=h), "gpu_model": "A100-80GB", "phase": "finetuning", "load": "recurring",
         "gpu_hours_held": 2.0, "gpu_hours_busy": 1.3})]
    profile = profile_from_rows(rows)
    out = {}
    for runs in (1, 0):
        params = {**load_params(), "annualize": {"one_off_runs_per_year": runs}}
        out[runs] = rows_of(scenarios(profile, params, bundled_catalog_prices()), params)
    assert (out[1]["rent_monthly"]["cards"], out[1]["rent_monthly"]["tco"]) == (10, Decimal("479520.00"))  # 10 × 1,332 × 36
    assert (out[0]["rent_monthly"]["cards"], out[0]["rent_monthly"]["tco"]) == (2, Decimal("95904.00"))  # 2 × 1,332 × 36
    assert out[0]["commit_3y"]["tco"] == Decimal("99864.00")  # 2 × 8,760 × 1.90 × 3
    assert out[0]["on_demand"]["tco"] == Decimal("183960.00")  # 17,520 h × 3.50 × 3: now dearer than monthly
    # A model only one-off runs held is one card with no load then, and the report says why, not that
    # no workload held it.
    from pipelines.report.daily import tco_caveats

    only_once = profile_from_rows([r for r in rows if r["phase"] == "pretraining"])
    params = {**load_params(), "annualize": {"one_off_runs_per_year": 0}}
    notes = tco_caveats(scenario_rows(scenarios(only_once, params, bundled_catalog_prices()), params), "CNY")
    assert any(n.startswith("The A100-80GB GPUs held only one-off runs, which your parameters leave out") for n in notes)
    assert not any(n.startswith("No workload held the A100-80GB") for n in notes)


FOCUS_HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
                "ServiceName,ServiceCategory,ResourceId,ResourceName,SkuId,SkuPriceDetails\n")


def test_the_fleet_is_sized_for_the_gpus_held_at_once_not_the_hours_average(tmp_path):
    """Two 8-GPU nodes each run an 8-GPU job for the first 15 minutes of every hour, both at once:
    4 GPU-hours held an hour, but 16 cards busy at once. Sized from the hour's average, the fleet was
    4 cards, which cannot run one of the jobs, and monthly rental came out cheaper than on demand."""
    charges = FOCUS_HEADER + "".join(
        f'384.00,384.00,USD,Usage,2026-09-0{d}T00:00:00Z,2026-09-0{d + 1}T00:00:00Z,GpuCloud,GPU,Compute,ins-{n},{n},SKU-P5,'
        f'"{{""GpuCount"": 8, ""InstanceType"": ""p5.48xlarge""}}"\n' for d in (1, 2) for n in ("h-1", "h-2"))
    jobs = "workload_id,phase,host,gpu_count,started_at,ended_at\n" + "".join(
        f"batch-{n}-{h:04d},finetuning,{n},8,{(START + timedelta(hours=h)).isoformat()},{(START + timedelta(hours=h, minutes=15)).isoformat()}\n"
        for h in range(48) for n in ("h-1", "h-2"))
    # One job at 00:50-01:10 beside them on h-1: the 01:00 hour starts with 8 cards held already.
    jobs += "late-01,finetuning,h-1,8,2026-09-01T00:50:00+00:00,2026-09-01T01:10:00+00:00\n"
    warehouse = warehouse_from_files(tmp_path, {"charges.csv": charges, "jobs.csv": jobs})
    conn = duckdb.connect(str(warehouse), read_only=True)
    peaks = conn.execute("""SELECT hour, any_value(gpus_held_peak), sum(gpu_hours_held) FROM marts.gpu_hours_profile
                            WHERE gpu_model = 'H100-80GB' AND hour < '2026-09-01 03:00:00+00' GROUP BY hour ORDER BY hour""").fetchall()
    assert [(float(p), float(h)) for _, p, h in peaks] == [(16.0, 4 + 8 / 6), (24.0, 4 + 8 / 6), (16.0, 4.0)]
    levels = conn.execute("""SELECT DISTINCT training_levels FROM marts.gpu_hours_profile
                             WHERE gpu_model = 'H100-80GB' AND hour = '2026-09-01 01:00:00+00'""").fetchall()
    assert [(float(x["gpus"]), float(x["one_off_gpus"]), x["seconds"]) for x in json.loads(levels[0][0])] == [
        (0.0, 0.0, 2700), (16.0, 0.0, 300), (24.0, 8.0, 600)]  # 01:15-02:00, 01:10-01:15, 01:00-01:10
    mine = tmp_path / "h100.yaml"
    mine.write_text("models:\n  H100-80GB:\n    rent:\n      monthly_per_card: 2000\n      on_demand_per_card_hour: 5\n")
    result = tco.compute(conn, str(mine))
    conn.close()
    rows = {r["scenario"]: r for r in result.model_rows("H100-80GB")}
    assert rows["rent_monthly"]["cards"] == 24  # the most held at once: 01:00-01:10
    assert rows["rent_monthly"]["tco"] == Decimal("1728000.00")  # 24 × 2,000 × 36
    # On demand pays the hours held: 192 GPU-hours of recurring jobs in 2 days × 182.5, and the
    # one-off job's 8 × 20 minutes once: 35,042.67 a year × 5 × 3.
    assert rows["on_demand"]["tco"] == Decimal("525640.00")
    # The hybrid's monthly baseline is the median of training's cards held at each instant: none
    # three quarters of the time, so every GPU-hour runs on demand. Sized from the hour's averages
    # it kept 4 monthly cards and rented nothing above them: 288,000, the cheapest, for a fleet
    # that could not run one job.
    assert (rows["hybrid"]["cards"], rows["hybrid"]["tco"]) == (0, Decimal("525640.00"))
    assert tco.cheapest(result.scenarios)["tco"] == Decimal("525640.00")


def profile_warehouse(path, models: dict[str, float]):
    """A warehouse holding only marts.gpu_hours_profile: each model's GPUs fine-tuning for 30 days."""
    conn = duckdb.connect(str(path))
    conn.execute("CREATE SCHEMA marts")
    conn.execute("""CREATE TABLE marts.gpu_hours_profile (hour TIMESTAMPTZ, gpu_model VARCHAR, phase VARCHAR, load VARCHAR,
                    gpu_hours_held DECIMAL(38, 6), gpu_hours_busy DECIMAL(38, 9), gpus_paid DECIMAL(38, 6),
                    gpu_hours_busy_any DECIMAL(38, 9), gpu_hours_busy_unheld DECIMAL(38, 9), gpu_hours_held_unseen DECIMAL(38, 6))""")
    conn.executemany("INSERT INTO marts.gpu_hours_profile VALUES (?, ?, 'finetuning', 'recurring', ?, ?, 0, ?, 0, 0)",
                     [(START + timedelta(hours=h), model, gpus, gpus * 0.75, gpus * 0.75) for h in range(720) for model, gpus in models.items()])
    conn.close()
    return path


def test_a_model_no_price_covers_is_named_not_answered_for_by_another(tmp_path):
    """With B200s no price covers beside priced A100s, `finops tco` called the A100's spot price the
    fleet's cheapest, charted nothing (saying no workload held GPUs), and measured the B200."""
    warehouse = profile_warehouse(tmp_path / "wh.duckdb", {"A100-80GB": 8.0, "B200": 8.0})
    chart = tmp_path / "tco.svg"
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(warehouse), "--chart", str(chart)], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "cheapest for this usage profile" not in result.output
    assert "no strategy is priced for the whole fleet: no price for B200 (models.<gpu_model> in the TCO parameters)" in result.output
    assert "measured utilization of A100-80GB: 100.0%" in result.output
    assert chart.exists() and f"chart written to {chart}" in result.output
    # Nothing priced at all: the chart's absence says so.
    only = profile_warehouse(tmp_path / "b200.duckdb", {"B200": 8.0})
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(only), "--chart", str(tmp_path / "none.svg")], terminal_width=300)
    assert "no chart: no strategy is priced" in result.output, result.output


def test_gpus_of_unknown_model_are_left_out_of_the_fleets_answer_and_unmatched_keys_named(tmp_path):
    """One notebook on a host no telemetry or charge names made the fleet's answer 'no price for
    unknown'; a key of the user's that no measured model has was silently unused."""
    warehouse = profile_warehouse(tmp_path / "wh.duckdb", {"A100-80GB": 8.0, "unknown": 1.0})
    mine = write_params(tmp_path, "models:\n  GB300:\n    rent:\n      monthly_per_card: 5000\n")
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(warehouse), "--params", str(mine)], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "cheapest for this usage profile: spot" in result.output
    assert ("Left out of the fleet's totals: 8,760.0 GPU-hours a year held by workloads on hosts whose GPU model no "
            "telemetry or charge names") in " ".join(result.output.split())
    assert "models.GB300 in your parameters names no measured GPU model (measured: A100-80GB, unknown)" in result.output
    conn = duckdb.connect(str(warehouse), read_only=True)
    fleet = {r["scenario"]: r for r in tco.compute(conn).model_rows("fleet")}
    conn.close()
    # 8 A100s on spot: 70,080 GPU-hours a year × 1.40 × 1.15 rework × 3; the unknown host's hour not in it.
    assert fleet["spot"]["tco"] == Decimal("338486.40")


def test_a_currency_no_rate_reaches_leaves_the_strategies_unpriced_not_the_run_failed(tmp_path):
    """`currency: TWD` (no CNY→TWD rate) failed the purchasing step, and the day's report with it."""
    charges = FOCUS_HEADER + "".join(
        f'384.00,384.00,USD,Usage,2026-09-0{d}T00:00:00Z,2026-09-0{d + 1}T00:00:00Z,GpuCloud,GPU,Compute,ins-h-1,h-1,SKU-P5,'
        f'"{{""GpuCount"": 8, ""InstanceType"": ""p5.48xlarge""}}"\n' for d in (1, 2))
    jobs = "workload_id,phase,host,gpu_count,started_at,ended_at\ntrain-01,finetuning,h-1,8,2026-09-01T00:00:00Z,2026-09-03T00:00:00Z\n"
    mine = write_params(tmp_path, "currency: TWD\n")
    warehouse = warehouse_from_files(tmp_path, {"charges.csv": charges, "jobs.csv": jobs}, tco_params_file=str(mine))
    conn = duckdb.connect(str(warehouse), read_only=True)
    assert conn.execute("SELECT count(*) FROM marts.tco_scenarios").fetchone() == (0,)
    conn.close()
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(warehouse), "--params", str(mine)], terminal_width=300)
    assert result.exit_code == 1 and "currency TWD: the bundled amounts are in CNY and no CNY→TWD rate is known" in result.output


def test_inference_no_telemetry_saw_is_sized_from_its_gpu_hours_held_in_the_hybrid():
    """Two GPUs serving around the clock on a host telemetry does not cover have no busy hours
    measured: the hybrid sized its inference cards from busy hours alone and came to nothing, the
    cheapest strategy."""
    rows = [{**r, "gpu_hours_held_unseen": r["gpu_hours_held"]} for r in hours(24, inference=("recurring", 2.0, 0.0))]
    params = load_params()
    hybrid = rows_of(scenarios(profile_from_rows(rows), params, bundled_catalog_prices()), params)["hybrid"]
    # 2 × 8,760 GPU-hours held a year on the RTX 6000 Ada at 0.58 (catalog), × 3 years.
    assert hybrid["tco"] == Decimal("30484.80")
    # Seen by telemetry and measured idle, the same load needs no GPU in the hybrid's valleys.
    seen = rows_of(scenarios(profile_from_rows(hours(24, inference=("recurring", 2.0, 0.0))), params, bundled_catalog_prices()), params)
    assert seen["hybrid"]["tco"] == Decimal("0.00")


def test_a_model_with_no_training_needs_no_spot_price():
    """The RTX 6000 Ada serves inference only and has no spot price: spot (all on demand for it) was
    left unpriced, which blanked the fleet's spot total."""
    params = load_params()
    rtx = [{**r, "gpu_model": "RTX-6000-Ada"} for r in hours(24, inference=("recurring", 1.0, 0.15))]
    spot = rows_of(scenarios(profile_from_rows(rtx), params, bundled_catalog_prices()), params)["spot"]
    assert (spot["tco"], spot["description"]) == (Decimal("15242.40"), "RTX-6000-Ada no training to put on spot: all on demand")  # 8,760 × 0.58 × 3


def test_only_gpus_of_unknown_model_say_so(tmp_path):
    warehouse = profile_warehouse(tmp_path / "wh.duckdb", {"unknown": 4.0})
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(warehouse)], terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "no strategy is priced: the only GPUs measured are of unknown model" in result.output
    assert "measured utilization of unknown" not in result.output


def test_the_hybrids_inference_card_is_found_however_it_is_spelt(tmp_path):
    params = load_params(write_params(tmp_path, "hybrid:\n  inference_card: rtx 6000 ada\n"))
    serving = profile_from_rows(hours(24, inference=("recurring", 2.0, 1.2)))
    hybrid = rows_of(scenarios(serving, params, bundled_catalog_prices()), params)["hybrid"]
    assert hybrid["tco"] == Decimal("30484.80")  # 1.2 busy ÷ 0.6 = 2 cards × 8,760 h × 0.58 × 3


def test_what_finops_tco_and_the_report_say_beside_the_numbers(tmp_path, monkeypatch):
    """How a commitment's years were paid was said in the report only; GPUs of unknown model paid
    for but held by no workload were '0.0 GPU-hours' left out; `finops run` said 'no workload held
    its GPUs' when nothing was priced; `finops report` ended in a traceback on a parameters file
    `run` and `tco` refuse; spot with no training drew the spot price's line, not on demand's."""
    warehouse = profile_warehouse(tmp_path / "wh.duckdb", {"A100-80GB": 8.0})
    mine = write_params(tmp_path, "years: 4\n")
    result = CliRunner().invoke(app, ["tco", "--warehouse", str(warehouse), "--params", str(mine)], terminal_width=300)
    assert "commit 3y (A100-80GB): paid for whole terms: 1 × 3 years + 1 year(s) of 1-year commitments." in result.output
    unknown = [{"gpu_model": "unknown", "tco": None, "inputs": '{"held_gpu_hours_per_year": 0.0}'}]
    assert tco.unknown_left_out(unknown).startswith(
        "Left out of the fleet's totals: GPUs paid for that no workload held (their hours are not known) on hosts")
    nothing = tco.TcoResult([{"gpu_model": "B200", "tco": None}], [], {}, [], 0.0, "B200")
    assert nothing.no_chart_reason() == "no strategy is priced"
    monkeypatch.setenv("FINOPS_TCO_PARAMS", str(write_params(tmp_path, "buy:\n  price_per_kwH: 2\n")))
    refused = CliRunner().invoke(app, ["report", "--warehouse", str(warehouse)], terminal_width=300)
    assert refused.exit_code == 2 and "buy.price_per_kwH: not a parameter (did you mean price_per_kwh?)" in " ".join(refused.output.split())
    params = load_params()
    idle = {s.scenario: s for s in scenarios(profile_from_rows(hours(24, finetuning=("recurring", 0.0, 0.0))), params,
                                             bundled_catalog_prices())}
    assert idle["spot"].cost_per_utilization == idle["on_demand"].cost_per_utilization  # 3 × 8,760 × 3.50 per card
