"""The day's report: every section present, charts inline, text from data escaped, KPIs and money
shown as a reader expects them."""

from datetime import date
from decimal import Decimal

from pathlib import Path

import pytest
from rich.console import Console

from pipelines.cli.summary import print_summary
from pipelines.report.daily import kpi_cards, money, render
from pipelines.report.figures import with_shown_shares

EVIL = "<script>alert(1)</script>|x"


def report_data(**overrides) -> dict:
    anomaly = {"anomaly_id": "a1", "state": "new", "status": "open", "resolution": None, "new": True, "kind": "new",
               "direction": "up", "metric": "cost", "series": f"AWS / {EVIL} / EC2 / idle", "first_day": date(2026, 9, 26),
               "last_day": date(2026, 9, 26), "days": 1, "peak_day": date(2026, 9, 26), "actual": Decimal("50"),
               "expected": Decimal("0"), "change": Decimal("50"), "unit": "USD", "driver": "new spend",
               "summary": f"EC2 on {EVIL}: cost 50.00 USD"}
    finding = {"rank": 1, "severity": "high", "kind": "egress", "subkind": "repeated_download", "resource": EVIL,
               "title": f"Repeated downloads from {EVIL}", "period": "2026-09", "items": 2,
               "avoidable_cost": Decimal("1800"), "wasted_cost": Decimal("2000"), "currency": "CNY",
               "avoidable_cost_reporting": Decimal("1234.565"), "wasted_cost_reporting": Decimal("1400"),
               "reporting_currency": "USD", "recommendation": EVIL}
    data = {
        "date": "2026-09-28", "scored_day": "2026-09-26", "spend_by_phase": [], "day_cost": [], "daily_by_phase": [],
        "findings": [finding], "anomalies": [anomaly], "suppressed": [], "anomaly_series": [],
        "tco": {"note": "no usage"}, "tco_chart_svg": None, "kpis": {},
    }
    return {**data, **overrides}


def test_text_from_data_is_escaped_in_html_and_markdown():
    page, markdown, machine = render(report_data())
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown and "\\|x" in markdown
    assert '"resource": "<script>alert(1)</script>|x"' in machine  # JSON carries the value itself, safely quoted
    assert "NEW: EC2 on &lt;script&gt;" in page  # the headline too
    # The largest leak is named in the reporting currency, rounded half-up, with its billing amount beside it.
    assert "Largest leak: Repeated downloads from &lt;script&gt;alert(1)&lt;/script&gt;|x in 2026-09: 1,234.57 USD avoidable (1,800.00 CNY)" in page


def test_money_has_thousands_separators_and_its_currency():
    assert money(Decimal("4671.3733333328"), "CNY") == "4,671.37 CNY"
    assert money(Decimal("0.005"), "USD") == "0.01 USD"  # half-up, as an invoice rounds
    assert money(None, "USD") == "—" and money(Decimal("-1234.5")) == "-1,234.50"


def test_headers_are_words_and_an_idle_row_has_no_cost_per_busy_gpu_hour():
    phases = [{"phase": p, "reporting_currency": "USD", "cost_reporting": Decimal(c), "share_pct": 50.0, "gpu_hours_paid": 10.0,
               "gpu_hours_busy": b, "utilization_pct": 10.0 * b, "typical_util_pct_low": None, "typical_util_pct_high": None,
               "cost_per_busy_gpu_hour": Decimal("33.67"), "cost_by_billing_currency": {"CNY": Decimal("7000")}}
              for p, c, b in (("idle", "1000", 0.1), ("inference", "1000", 1.0))]
    page, markdown, _ = render(report_data(spend_by_phase=phases))
    assert "Cost per busy GPU-hour (USD)" in page and "GPU utilization (busy ÷ paid)" in page
    assert "cost_reporting" not in page and "utilization_pct" not in page  # no snake_case headers
    idle_row = next(line for line in markdown.splitlines() if line.startswith("| Idle (paid, nothing ran)"))
    assert "33.67" not in idle_row and "—" in idle_row and "7,000.00 CNY" in idle_row
    assert "33.67" in next(line for line in markdown.splitlines() if line.startswith("| Inference"))


def test_shares_and_utilization_are_rounded_once_from_the_exact_figures():
    """The mart keeps share_pct and utilization_pct to two decimals; shown to one, they are rounded
    again from the exact amounts and hours, not from the rounded figure: an idle share of exactly
    13.647 % (share_pct 13.65) reads 13.6 %, as the header's idle share does, not 13.7 %."""
    costs = (("pretraining", "485.00", 48.5), ("finetuning", "249.00", 24.9), ("inference", "26.00", 2.6),
             ("idle", "136.47", 13.65), ("unattributed", "103.53", 10.35))
    phases = [{"phase": p, "reporting_currency": "USD", "cost_reporting": Decimal(c), "share_pct": s,
               "gpu_hours_paid": 2668.0, "gpu_hours_busy": 1734.933, "utilization_pct": 65.03,
               "typical_util_pct_low": None, "typical_util_pct_high": None, "cost_per_busy_gpu_hour": None,
               "cost_by_billing_currency": {}} for p, c, s in costs]
    _, markdown, _ = render(report_data(spend_by_phase=with_shown_shares(phases)))
    idle_row = next(line for line in markdown.splitlines() if line.startswith("| Idle (paid, nothing ran)"))
    assert "| 13.6 % |" in idle_row and "13.7" not in idle_row
    assert "| 65.0 % |" in idle_row  # 1,734.933 of 2,668 GPU-hours is 65.027 %, not the 65.03 rounded again
    console = Console(record=True, width=200)
    print_summary(console, {"files": [], "problems": [], "spend_by_phase": phases, "conservation": [], "tables": {}},
                  Path("wh.duckdb"), 1.0)
    idle_line = next(line for line in console.export_text().splitlines() if "idle" in line)
    assert "13.6" in idle_line and "13.7" not in idle_line and "65.0" in idle_line


def test_kpi_cards_say_what_each_number_is_against():
    k = {"currency": "USD", "day": date(2026, 10, 10), "month_start": date(2026, 10, 1), "month_end": date(2026, 10, 31),
         "mtd": Decimal("713.0732899552"), "prev_mtd": Decimal("818.7617809929"), "prev_days_billed": 10,
         "forecast": Decimal("2154.0764917861"), "run_rate_per_day": Decimal("68.6192000871"), "run_rate_days": 7, "days_left": 21,
         "avoidable_this_month": Decimal("524.8484157364"), "leaks_this_month": 2, "unrated_leaks": 0,
         "idle_share_pct": 73.6, "idle_cost": Decimal("525.0893634801"), "cost_per_busy_gpu_hour": Decimal("1.8130633959"),
         "gpu_cost": Decimal("683.7732899552"), "busy_gpu_hours": 377.137, "paid_gpu_hours": 2640.0}
    cards = {c["label"]: c for c in kpi_cards({"kpis": k})}
    assert cards["Spend, Oct 1–10"]["value"] == "713.07 USD"
    assert cards["Spend, Oct 1–10"]["note"] == "818.76 USD at the same point last month (-12.9 %)"
    assert cards["Forecast to Oct 31"]["value"] == "2,154.08 USD"
    assert cards["Avoidable this month"]["value"] == "524.85 USD"
    assert cards["Idle share"]["value"] == "73.6 %" and cards["Cost per busy GPU-hour"]["value"] == "1.81 USD"


def test_money_in_the_json_is_plain_digits_even_when_zero():
    """A zero summed at 10 decimals is Decimal('0E-10'): the machine-readable report writes 0.0000000000."""
    import json

    finding = {**report_data()["findings"][0], "avoidable_cost": Decimal("0E-10"), "wasted_cost": Decimal("1.5E+3")}
    _, _, machine = render(report_data(findings=[finding]))
    assert "E-10" not in machine and "E+3" not in machine
    written = json.loads(machine)["findings"][0]
    assert (written["avoidable_cost"], written["wasted_cost"]) == ("0.0000000000", "1500")


def test_the_purchasing_table_shows_priced_strategies_and_says_what_is_not_priced_or_not_held():
    """A GPU model with no price in the TCO currency was a row of dashes per strategy (21 on the
    public billing samples), and one no workload held was priced at no load without a word."""
    from datetime import UTC, datetime, timedelta
    import json

    from models.tco import fleet_rows, load_params, profile_from_rows, scenario_rows, scenarios

    params = load_params()
    start = datetime(2026, 9, 1, tzinfo=UTC)

    def hours(model, held, busy, paid):
        return [{"hour": start + timedelta(hours=h), "gpu_model": model, "phase": "finetuning", "load": "recurring",
                 "gpu_hours_held": held, "gpu_hours_busy": busy, "gpus_paid": paid} for h in range(24)]

    per_model = {"A100-80GB": scenarios(profile_from_rows(hours("A100-80GB", 8.0, 6.0, 8.0)), params),
                 "A10G": scenarios(profile_from_rows(hours("A10G", 0.0, 0.0, 1.0)), params)}
    rows = [r for items in per_model.values() for r in scenario_rows(items, params)] + fleet_rows(per_model, params)
    tco = {"scenarios": rows, "break_even": [], "utilization": 0.75, "main_model": "A100-80GB", "currency": "CNY",
           "rate": None, "rate_date": None, "reporting_currency": None,
           "years": 3, "one_off_runs_per_year": 1}
    page, markdown, machine = render(report_data(tco=tco))

    table = [line for line in markdown.split("### Purchasing strategy")[1].splitlines() if line.startswith("| ")][1:]
    shown = [tuple(cell.strip() for cell in line.split("|")[1:3]) for line in table]
    assert shown.count(("A100-80GB", "buy")) == 1 and len([s for s in shown if s[0] == "A100-80GB"]) == 7
    assert [s for s in shown if s[0] == "A10G"] == [("A10G", "hybrid")]  # the one strategy a load of nothing prices
    assert not any(" — |" in line.split("|")[4] + " |" for line in table)  # no 3-year TCO left blank
    assert ("Not priced, for want of a price in CNY in the TCO parameters or the price catalog: "
            "A10G: buy, rent monthly, commit 1y, commit 3y, on demand, spot.") in markdown
    assert "No workload held the A10G GPUs paid for in the measured period" in page
    assert "No workload held the A100-80GB" not in page and "Measured utilization of A100-80GB" in page
    # Nothing held anywhere: no utilization of 0.0 % is stated, the caveat says why.
    alone = {"A10G": per_model["A10G"]}
    unheld = [r for items in alone.values() for r in scenario_rows(items, params)] + fleet_rows(alone, params)
    page, _, _ = render(report_data(tco={**tco, "scenarios": unheld, "utilization": 0.0, "main_model": "A10G"}))
    assert "Measured utilization" not in page and "No workload held the A10G GPUs" in page
    # report.json keeps every row, as marts.tco_scenarios does.
    assert len(json.loads(machine)["tco"]["scenarios"]) == len(rows)
    # Priced from the bundled example parameters (CNY) for an estate billed in USD or EUR: the report says so.
    bundled = "Purchase, rental and power prices are the bundled example parameters (in CNY); give your own with --tco-params"
    assert bundled not in markdown
    _, markdown, _ = render(report_data(tco={**tco, "bundled_params": True}))
    assert bundled in markdown


@pytest.mark.parametrize("years, runs, counted", [
    (5, 2, "one-off runs counted twice a year"),
    (1, 0, "one-off runs left out"),
    (3, 1, "one-off runs counted once a year"),
    (4, Decimal("0.5"), "one-off runs counted 0.5 times a year"),
])
def test_the_purchasing_section_says_the_years_and_one_off_runs_it_was_sized_for(years, runs, counted):
    """The title and the TCO columns said 3 years and the note one run a year whatever the parameters
    said: with `years: 5` the figures are 5-year ones, and `one_off_runs_per_year: 0` leaves the run out."""
    from datetime import UTC, datetime, timedelta

    from models.tco import fleet_rows, load_params, profile_from_rows, scenario_rows, scenarios

    params = load_params()
    params = {**params, "years": years, "annualize": {"one_off_runs_per_year": runs}}
    start = datetime(2026, 9, 1, tzinfo=UTC)
    hours = [{"hour": start + timedelta(hours=h), "gpu_model": "A100-80GB", "phase": "finetuning", "load": "recurring",
              "gpu_hours_held": 8.0, "gpu_hours_busy": 6.0, "gpus_paid": 8.0} for h in range(24)]
    per_model = {"A100-80GB": scenarios(profile_from_rows(hours), params)}
    rows = [r for items in per_model.values() for r in scenario_rows(items, params)] + fleet_rows(per_model, params)
    tco = {"scenarios": rows, "break_even": [], "utilization": 0.75, "main_model": "A100-80GB", "currency": "CNY",
           "rate": Decimal("0.14"), "rate_date": "2026-09-25", "reporting_currency": "USD",
           "years": years, "one_off_runs_per_year": runs}
    page, markdown, _ = render(report_data(tco=tco))
    assert f"<h3>Purchasing strategy ({years}-year TCO, CNY)</h3>" in page
    assert f"### Purchasing strategy ({years}-year TCO, CNY)" in markdown
    assert (f"<th class='num'>{years}-year TCO (USD)</th><th class='num'>{years}-year TCO (CNY)</th>") in page
    assert f"| Cards | {years}-year TCO (USD) | {years}-year TCO (CNY) | Capex (CNY) |" in markdown
    note = ("Measured utilization of A100-80GB (GPU-hours held over the card-hours the strategies size for; "
            f"recurring load a year, {counted}): 75.0 %. Amounts in USD at 0.140000 per CNY (2026-09-25).")
    assert f"<p>{note}</p>" in page and f"\n\n{note}" in markdown
    if years != 3:
        assert "3-year TCO" not in page + markdown


def test_spend_without_an_fx_rate_is_named_beside_the_totals_it_is_not_in(tmp_path):
    """A charge is never converted at 1.0 nor at a stale rate, so the reporting-currency totals leave
    it out: the spend card, the headline and the phase table say what they leave out, in the currency
    it was billed in (ARS has no ECB reference rate), where the totals alone read as the whole spend."""
    from tests.conftest import run_pipeline
    from pipelines.report.daily import gather, headline
    from pipelines.warehouse.connection import connect

    landing = tmp_path / "landing"
    landing.mkdir()
    day = "2026-09-01T00:00:00Z,2026-09-02T00:00:00Z"
    (landing / "charges.csv").write_text(
        "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
        "ServiceName,ServiceCategory,ResourceId,ResourceName\n"
        f"100.00,100.00,USD,Usage,{day},AWS,EC2,Compute,i-1,web\n"
        f"1000.00,1000.00,ARS,Usage,{day},NubeAR,GPU,Compute,g-1,gpu-ar\n"
        f"250.50,250.50,ARS,Usage,{day},NubeAR,Storage,Storage,s-1,disk-ar\n")
    run_pipeline(landing, tmp_path / "w.duckdb", reporting_currency="USD")
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    data = gather(conn, date(2026, 9, 3))
    k = data["kpis"]
    assert (k["mtd"], k["mtd_without_rate"]) == (Decimal("100.0000000000"), 2)
    assert k["mtd_without_rate_billed"] == [{"currency": "ARS", "amount": Decimal("1250.5000000000")}]
    spend = next(c for c in kpi_cards(data) if c["label"].startswith("Spend"))
    assert spend["value"] == "100.00 USD"
    assert spend["note"].endswith("; not in it: 1,250.50 ARS in 2 lines without an FX rate (core.cost_lines.x_FxStatus)")
    _, lines = headline(data)
    assert lines[0] == "Cost on 2026-09-01: 100.00 USD, and 1,250.50 ARS without an FX rate (not in that total)"
    page, markdown, _ = render(data)
    assert "Costs in USD leave out what has no FX rate: 1,250.50 ARS in 2 lines" in page
    assert "Costs in USD leave out what has no FX rate: 1,250.50 ARS in 2 lines" in markdown


def test_markdown_keeps_an_ampersand_in_data_as_written():
    from pipelines.report.daily import _md_escape

    assert _md_escape("llm &amp; co <b>") == "llm &amp;amp; co &lt;b&gt;"


def test_the_leak_chart_shows_wasted_money_when_nothing_is_avoidable_and_nothing_when_all_is_zero():
    from pipelines.report.charts import hidden_costs_chart

    leak = {**report_data()["findings"][0], "avoidable_cost_reporting": Decimal("0"), "wasted_cost_reporting": Decimal("0.42")}
    svg = hidden_costs_chart([leak])
    assert svg is not None and "wasted cost (USD)" in svg and "0.42" in svg
    assert hidden_costs_chart([{**leak, "wasted_cost_reporting": Decimal("0")}]) is None
    page, _, _ = render(report_data(findings=[{**leak, "wasted_cost_reporting": Decimal("0")}]))
    assert "<svg" not in page.split("Leaks to act on")[1].split("<h2>Detail")[0]  # no chart of zeros


def test_no_purchasing_chart_when_every_priced_strategy_comes_to_nothing():
    """On the public billing samples the only priced strategy is a 0.00 hybrid (no workload held the
    cards): the chart was an axis from -0.04 to 0.04 labelled 0k."""
    from models.tco import FLEET
    from pipelines.analysis.tco import TcoResult

    rows = [{"gpu_model": FLEET, "scenario": "hybrid", "tco": Decimal("0")}, {"gpu_model": FLEET, "scenario": "buy", "tco": None}]
    result = TcoResult(scenarios=rows, break_even=[], params={"currency": "CNY", "years": 3}, lines=[], utilization=0.0)
    assert result.chart_svg() is None


def test_the_purchasing_table_says_a_model_no_workload_held_is_sized_from_the_gpus_paid():
    from datetime import UTC, datetime, timedelta

    from models.tco import fleet_rows, load_params, profiles_by_model, scenario_rows, scenarios

    params = load_params()
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows = [{"hour": start + timedelta(hours=h), "gpu_model": "A100-80GB", "phase": "unattributed", "load": "recurring",
             "gpu_hours_held": 0.0, "gpu_hours_busy": 0.0, "gpus_paid": 8.0, "gpu_hours_busy_any": 4.0} for h in range(24)]
    per_model = {m: scenarios(p, params) for m, p in profiles_by_model(rows).items()}
    table = [r for items in per_model.values() for r in scenario_rows(items, params)] + fleet_rows(per_model, params)
    tco = {"scenarios": table, "break_even": [], "utilization": 1.0, "main_model": "A100-80GB", "currency": "CNY",
           "rate": None, "rate_date": None, "reporting_currency": None,
           "years": 3, "one_off_runs_per_year": 1}
    page, _, _ = render(report_data(tco=tco))
    assert ("No workload held the A100-80GB GPUs, but their telemetry shows them at work: each is sized from the GPUs "
            "paid for") in page
    assert "sized for one card with no load" not in page
    assert "Measured utilization" not in page  # every paid hour is held: 100 % would say nothing


@pytest.mark.parametrize("held", [1.0, 0.0], ids=["beside its workloads", "no workload of its own"])
def test_the_purchasing_table_says_busy_hours_no_workload_held_are_sized_as_demand(held):
    """Busy hours no workload held size a model beside its workloads; where they alone size the
    main model (workloads held only another's), no utilization is stated: every hour sized is held."""
    from datetime import UTC, datetime, timedelta

    from models.tco import fleet_rows, load_params, profiles_by_model, scenario_rows, scenarios

    params = load_params()
    start = datetime(2026, 9, 1, tzinfo=UTC)
    rows = [{"hour": start + timedelta(hours=h), "gpu_model": "A100-80GB", "phase": "finetuning", "load": "recurring",
             "gpu_hours_held": held, "gpu_hours_busy": held, "gpus_paid": 8.0, "gpu_hours_busy_any": 3.6 + held,
             "gpu_hours_busy_unheld": 3.6} for h in range(24)]
    rows += [{"hour": start + timedelta(hours=h), "gpu_model": "L4", "phase": "inference", "load": "recurring",
              "gpu_hours_held": 0.5, "gpu_hours_busy": 0.5, "gpus_paid": 1.0, "gpu_hours_busy_any": 0.5,
              "gpu_hours_busy_unheld": 0.0} for h in range(24)]
    per_model = {m: scenarios(p, params) for m, p in profiles_by_model(rows).items()}
    table = [r for items in per_model.values() for r in scenario_rows(items, params)] + fleet_rows(per_model, params)
    tco = {"scenarios": table, "break_even": [], "utilization": 0.5, "main_model": "A100-80GB", "currency": "CNY",
           "rate": None, "rate_date": None, "reporting_currency": None,
           "years": 3, "one_off_runs_per_year": 1}
    page, _, _ = render(report_data(tco=tco))
    assert ("Busy GPU-hours no workload held are sized as demand of no known phase, recurring (A100-80GB: 86.4 in the "
            "measured period), less what workloads on hosts telemetry does not cover held") in page
    assert ("Measured utilization of A100-80GB" in page) is bool(held) and "No workload held the" not in page


def test_a_phase_without_telemetry_shows_its_utilization_unknown_not_zero():
    """Pre-training on a VM no telemetry covers: the mart's utilization is NULL (busy hours missing),
    which the report and the terminal showed as 0.0 %. Idle time is 0 % busy by definition."""
    phases = [{"phase": p, "reporting_currency": "USD", "cost_reporting": Decimal(c), "share_pct": None,
               "gpu_hours_paid": paid, "gpu_hours_busy": 0.0, "utilization_pct": None,
               "typical_util_pct_low": None, "typical_util_pct_high": None, "cost_per_busy_gpu_hour": None,
               "cost_by_billing_currency": {}} for p, c, paid in (("pretraining", "900.00", 3456.0), ("idle", "100.00", 8.0))]
    shown = {r["phase"]: r["utilization_shown"] for r in with_shown_shares(phases)}
    assert shown == {"pretraining": None, "idle": Decimal("0.0")}
    _, markdown, _ = render(report_data(spend_by_phase=with_shown_shares(phases)))
    pretraining_row = next(line for line in markdown.splitlines() if line.startswith("| Pre-training"))
    cells = [c.strip() for c in pretraining_row.split("|")]
    assert cells[5:7] == ["0.0", "—"]  # busy GPU-hours seen: none; utilization: unknown (was 0.0 %)
