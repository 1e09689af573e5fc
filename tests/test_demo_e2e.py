"""`finops demo` end to end: the bundled scenario's truths come back out of the warehouse."""

import json
from datetime import date
from decimal import Decimal

import pytest

from pipelines.demo.scenario import TELEMETRY_TZ
from pipelines.lake.layout import copy_warehouse
from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import run_pipeline, unbalanced_days

CONTRACT_TABLES = {
    "raw": {"files", "cost_lines", "gpu_samples", "workloads", "storage_events", "quarantine"},
    "core": {"cost_lines", "gpu_samples", "gpu_minutes", "workloads", "storage_events", "fx_rates"},
    "marts": {"cost_attribution", "daily_cost", "spend_by_phase"},
}


def cents(value) -> Decimal:
    return Decimal(str(value)).quantize(Decimal("0.01"))


def test_demo_command_succeeds_and_prints_the_summary(demo_run):
    assert demo_run.returncode == 0, demo_run.output[-3000:]
    for text in ("spend by phase", "pretraining", "money conservation", "CNY", "USD", "warehouse:"):
        assert text in demo_run.output
    assert "NO" not in demo_run.output.split("money conservation")[1].split("tables:")[0]
    assert (demo_run.out / "reports" / "run_summary.json").exists()
    assert (demo_run.out / "reports" / "tco.svg").read_text().lstrip().startswith("<?xml")


def test_the_analysts_tables_exist_with_the_scenarios_row_counts(demo_run, demo_db):
    tables = {}
    for schema, name in fetch_all(demo_db, "SELECT table_schema, table_name FROM information_schema.tables"):
        tables.setdefault(schema, set()).add(name)
    for schema, names in CONTRACT_TABLES.items():
        assert names <= tables.get(schema, set()), f"{schema}: missing {names - tables.get(schema, set())}"
    rows = demo_run.truths["rows"]
    count = lambda t: fetch_all(demo_db, f"SELECT count(*) FROM {t}")[0][0]
    assert count("core.cost_lines") == rows["cost_lines"] == 206
    assert count("core.gpu_samples") == rows["gpu_samples"] == 633_600
    assert count("core.gpu_minutes") == rows["gpu_minutes"]
    assert count("core.workloads") == rows["workloads"]
    assert count("raw.quarantine") == 0
    files = sum(len(v) for v in demo_run.truths["files"].values())
    assert fetch_all(demo_db, "SELECT status, count(*) FROM raw.files GROUP BY status") == [("loaded", files)]
    assert sorted(r[0] for r in fetch_all(demo_db, "SELECT DISTINCT BillingCurrency FROM core.cost_lines")) == ["CNY", "USD"]


def test_money_is_conserved_every_day_and_phase_totals_match_the_truths(demo_run, demo_db):
    truths = demo_run.truths
    unbalanced = unbalanced_days(demo_db)
    assert unbalanced == []
    totals = dict(fetch_all(demo_db, "SELECT BillingCurrency, sum(EffectiveCost) FROM core.cost_lines GROUP BY 1"))
    assert {k: cents(v) for k, v in totals.items()} == {"CNY": Decimal("18316.80"), "USD": Decimal("386.87")}
    assert {k: cents(v) for k, v in totals.items()} == {k: cents(v) for k, v in truths["totals"].items()}
    by_phase = fetch_all(demo_db, """
        SELECT a.phase || '|' || c.BillingCurrency, sum(a.amount_billing)
        FROM marts.cost_attribution a JOIN core.cost_lines c USING (x_ChargeId) GROUP BY 1""")
    assert {k: cents(v) for k, v in by_phase} == {k: cents(v) for k, v in truths["phase_cost"].items()}
    # The design's story, in numbers: 20 days of 8 cards at 1.85 CNY per card-hour.
    assert cents(truths["phase_cost"]["pretraining|CNY"]) == Decimal("7104.00")


def test_spend_by_phase_gpu_hours_and_utilization(demo_run, demo_db):
    truths = demo_run.truths
    rows = {r["phase"]: r for r in fetch_dicts(demo_db, "SELECT * FROM marts.spend_by_phase WHERE period = 'all'")}
    assert list(rows) == ["pretraining", "finetuning", "inference", "idle", "unattributed"]
    for phase, busy in truths["busy_gpu_hours"].items():
        assert rows[phase]["gpu_hours_busy"] == pytest.approx(busy, abs=0.01), phase
    assert rows["inference"]["gpu_hours_busy"] == pytest.approx(137, abs=0.5)  # 137 busy hours in all
    assert rows["idle"]["gpu_hours_paid"] == pytest.approx(truths["idle_gpu_hours_paid"])
    assert rows["pretraining"]["gpu_hours_paid"] == 3840.0  # 8 GPUs × 20 days
    assert 75 <= rows["pretraining"]["utilization_pct"] <= 85  # busy pre-training minus checkpoint stalls
    assert sum(r["share_pct"] for r in rows.values()) == pytest.approx(100, abs=0.05)
    total = sum(r["cost_reporting"] for r in rows.values())
    assert total == fetch_all(demo_db, "SELECT sum(x_EffectiveCostReporting) FROM core.cost_lines")[0][0]
    assert rows["pretraining"]["cost_by_billing_currency"]["CNY"] == Decimal("7104.000000")


def test_spend_by_phase_per_month_adds_up_to_the_whole(demo_db):
    months = fetch_all(demo_db, """SELECT period, count(*), sum(cost_reporting) FROM marts.spend_by_phase
                                   WHERE period <> 'all' GROUP BY period ORDER BY period""")
    assert [(m, n) for m, n, _ in months] == [("2026-09", 5), ("2026-10", 5)]
    whole = fetch_all(demo_db, "SELECT sum(cost_reporting) FROM marts.spend_by_phase WHERE period = 'all'")[0][0]
    assert sum(total for _, _, total in months) == whole
    shares = fetch_all(demo_db, "SELECT period, sum(share_pct) FROM marts.spend_by_phase GROUP BY period")
    assert all(abs(share - 100) < 0.05 for _, share in shares)


def test_telemetry_local_times_were_converted_to_utc(demo_run, demo_db):
    first, last = fetch_all(demo_db, "SELECT min(ts), max(ts) FROM core.gpu_samples")[0]
    assert first.isoformat() == demo_run.truths["period"]["start"].replace("Z", "+00:00")
    assert TELEMETRY_TZ == "Asia/Shanghai"


def test_loading_the_same_folder_again_changes_nothing(demo_run, demo_db, tmp_path):
    snapshot_sql = {
        "files": "SELECT path, sha256, status, rows_loaded FROM raw.files ORDER BY path",
        "raw": "SELECT (SELECT count(*) FROM raw.cost_lines), (SELECT count(*) FROM raw.gpu_samples), (SELECT count(*) FROM raw.workloads)",
        "phases": "SELECT period, phase, cost_reporting, gpu_hours_paid, gpu_hours_busy FROM marts.spend_by_phase",
        "daily": "SELECT * FROM marts.daily_cost ORDER BY ALL",
        "findings": "SELECT finding_id, wasted_cost, avoidable_cost FROM findings.hidden_costs ORDER BY finding_id",
    }
    before = {k: fetch_all(demo_db, q) for k, q in snapshot_sql.items()}
    # On a copy (with its lake): a run dated today would rescore the shared demo's anomalies for the tests after this one.
    warehouse = tmp_path / "warehouse.duckdb"
    copy_warehouse(demo_run.out / "warehouse.duckdb", warehouse)
    outcome = run_pipeline(demo_run.out / "landing", warehouse, timezone=TELEMETRY_TZ)
    assert outcome.success and not outcome.failed_checks
    conn = connect(warehouse, read_only=True)
    try:
        assert {k: fetch_all(conn, q) for k, q in snapshot_sql.items()} == before
    finally:
        conn.close()


def test_the_demo_exercises_every_telemetry_workload_and_storage_format(demo_run, demo_db):
    connectors = {r[0] for r in fetch_all(demo_db, "SELECT DISTINCT connector FROM raw.files")}
    assert connectors == {"focus", "gpu_rental_cn", "nvidia_smi", "prometheus_dcgm", "dcgm_exporter", "slurm_sacct", "workloads_csv",
                          "kubernetes_pods", "checkpoint_events", "s3_access_log"}
    kinds = dict(fetch_all(demo_db, "SELECT util_kind, count(DISTINCT gpu_key) FROM core.gpu_minutes GROUP BY 1"))
    assert kinds == {"nvidia_smi_utilization_gpu": 9, "dcgm_gpu_util": 2}
    rules = dict(fetch_all(demo_db, "SELECT phase_rule, count(*) FROM core.workloads GROUP BY 1"))
    slurm_jobs = fetch_all(demo_db, "SELECT count(*) FROM core.workloads WHERE source = 'slurm'")[0][0]
    assert rules["rule 1: pretraining-by-name"] == 1
    assert rules["rule 2: finetuning-by-name"] == slurm_jobs - 1  # the Slurm fine-tuning jobs, phased by rule
    csv_jobs = fetch_all(demo_db, "SELECT count(*) FROM core.workloads WHERE source = 'workloads_csv'")[0][0]
    assert rules["explicit (workloads_csv)"] == csv_jobs == 15  # the plain CSV states its phases
    assert fetch_all(demo_db, "SELECT phase, host, phase_rule FROM core.workloads WHERE source = 'kubernetes'") == [
        ("inference", "gpu-rtx6000-01", "rule 3: inference-by-name")]
    storage = dict(fetch_all(demo_db, "SELECT kind, count(*) FROM core.storage_events GROUP BY 1"))
    assert storage == {"checkpoint": demo_run.truths["rows"]["checkpoint_events"], "object_get": demo_run.truths["rows"]["object_gets"]}
    pulled_gb = fetch_all(demo_db, "SELECT sum(bytes) / 1e9 FROM core.storage_events WHERE kind = 'object_get'")[0][0]
    assert pulled_gb == demo_run.truths["egress"]["gb"] == 3000


def test_purchasing_strategies_are_priced_from_the_measured_usage(demo_run, demo_db):
    rows = fetch_dicts(demo_db, "SELECT * FROM marts.tco_scenarios")
    strategies = {"buy", "rent_monthly", "commit_1y", "commit_3y", "on_demand", "spot", "hybrid"}
    assert {(r["gpu_model"], r["scenario"]) for r in rows} == {
        *((m, s) for m in ("A100-80GB", "RTX-6000-Ada", "fleet") for s in strategies), ("fleet", "cheapest_mix")}
    assert all(r["currency"] == "CNY" and r["years"] == 3 for r in rows)
    a100 = {r["scenario"]: r for r in rows if r["gpu_model"] == "A100-80GB"}
    assert all(r["tco"] > 0 for r in a100.values())
    assert a100["hybrid"]["tco"] < a100["rent_monthly"]["tco"]  # a small monthly baseline, the one-off run on demand
    # The year's median training hour holds the 2 fine-tuning cards: the one-off pre-training run is not a baseline.
    assert json.loads(a100["hybrid"]["inputs"])["training_baseline_cards"] == 2
    profile = fetch_all(demo_db, "SELECT count(DISTINCT hour), sum(gpu_hours_held) FROM marts.gpu_hours_profile")[0]
    assert profile[0] == 40 * 24
    held = fetch_all(demo_db, "SELECT sum(gpu_hours_paid) FROM marts.spend_by_phase WHERE phase <> 'idle' AND period = 'all'")[0][0]
    assert profile[1] == pytest.approx(held)  # the hourly profile and the attribution agree on GPU-hours held


def test_every_injected_leak_is_found_within_one_percent_of_the_truth(demo_run, demo_db):
    leaks = demo_run.truths["leaks"]
    found = {(k, s): (n, w, a) for k, s, n, w, a in fetch_all(demo_db, """
        SELECT kind, subkind, sum(items), sum(wasted_cost), sum(avoidable_cost) FROM findings.hidden_costs GROUP BY ALL""")}
    assert set(found) == {("egress", "repeated_download"), ("slow_disk_idle", "checkpoint"), ("unused_gpu", "idle_run"),
                          ("overprovisioned_inference", "no_gpu_mode")}
    _, wasted, avoidable = found[("overprovisioned_inference", "no_gpu_mode")]
    # Wasted is what the card paid above a right-sized fleet (its valley hours), not all it paid.
    assert float(wasted) == pytest.approx(leaks["overprovisioned_inference"]["wasted_cny"], rel=0.01)
    assert float(wasted) < leaks["overprovisioned_inference"]["paid_cny"]
    assert float(avoidable) == pytest.approx(leaks["overprovisioned_inference"]["avoidable_cny"], rel=0.01)
    assert leaks["overprovisioned_inference"]["peak_valley_ratio"] > 8  # the design's 10x swing
    n, wasted, avoidable = found[("slow_disk_idle", "checkpoint")]
    assert n == leaks["slow_disk_idle"]["checkpoints"] == 80
    assert float(wasted) == pytest.approx(leaks["slow_disk_idle"]["wasted_cny"], rel=0.01)
    assert float(avoidable) == pytest.approx(leaks["slow_disk_idle"]["avoidable_cny"], rel=0.01)
    _, wasted, _ = found[("unused_gpu", "idle_run")]
    assert float(wasted) == pytest.approx(leaks["unused_gpu"]["wasted_cny"], rel=0.01)
    _, wasted, avoidable = found[("egress", "repeated_download")]
    assert (wasted, avoidable) == (Decimal("270.000000"), Decimal("243.000000"))  # 10 × 300 GB; 9 pulls avoidable
    idle_week = fetch_all(demo_db, """SELECT count(*), any_value(title) FROM findings.hidden_costs
                                      WHERE host = 'gpu-a100-02' AND period_end >= TIMESTAMPTZ '2026-10-10 23:00:00+00'""")[0]
    assert idle_week == (1, "2 idle GPUs on gpu-a100-02")  # the two monthly cards idle for the last week: one finding


def test_findings_command_prints_the_ranked_list(demo_run):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    result = CliRunner().invoke(app, ["findings", "--warehouse", str(demo_run.out / "warehouse.duckdb"), "--limit", "3"],
                                terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "hidden costs by kind" in result.output and "findings, ranked" in result.output
    assert "Largest leak: 8 idle GPUs on gpu-a100-01 in 2026-10: 428.27 USD avoidable (2,871.20 CNY)" in result.output
    assert "repeated_download" in result.output and "243.00 USD" in result.output


def test_leaks_are_one_finding_per_host_and_month_with_each_gpu_in_the_evidence(demo_db):
    # gpu-a100-01's idle cards: 52 idle runs of 8 GPUs in the per-kind table (48 runs, 4 of them crossing
    # Oct 1 and split there), two findings (September, October) in the list a person reads. The job's
    # last checkpoint (09-20 23:52-24:00) begins its cards' idle run: those 8 GPU-minutes × 8 are the
    # stall's (1.97 CNY), not the run's as well.
    per_gpu = fetch_all(demo_db, """SELECT count(*), count(DISTINCT resource), sum(wasted_cost) FROM findings.unused_gpu
                                    WHERE host = 'gpu-a100-01' AND subkind = 'idle_run'""")[0]
    assert per_gpu == (52, 8, Decimal("4669.4000000000"))
    rows = fetch_dicts(demo_db, """SELECT * FROM findings.hidden_costs WHERE host = 'gpu-a100-01' AND subkind = 'idle_run'
                                   ORDER BY period""")
    assert [(r["period"], r["items"], r["title"]) for r in rows] == [("2026-09", 28, "8 idle GPUs on gpu-a100-01"),
                                                                       ("2026-10", 24, "8 idle GPUs on gpu-a100-01")]
    assert sum(r["wasted_cost"] for r in rows) == Decimal("4669.4000000000")  # nothing lost in the grouping
    assert [(r["avoidable_cost"], r["avoidable_cost_reporting"], r["severity"]) for r in rows] == [
        (Decimal("1798.2000000000"), Decimal("267.9923902284"), "medium"), (Decimal("2871.2000000000"), Decimal("428.2727379992"), "medium")]
    details = json.loads(rows[1]["evidence"])["details"]
    assert len(details) == 24 and len({d["resource"] for d in details}) == 8
    assert sum(Decimal(d["avoidable_cost"]) for d in details) == rows[1]["avoidable_cost"]  # exact decimal strings
    # One finding per thing to act on: no host, bucket or service twice in a month and kind.
    assert fetch_all(demo_db, """SELECT count(*) FROM (SELECT kind, subkind, resource, period FROM findings.hidden_costs
                                 GROUP BY ALL HAVING count(*) > 1)""") == [(0,)]
    assert fetch_all(demo_db, "SELECT count(*), sum(items) FROM findings.hidden_costs") == [(7, 160)]
    top = fetch_dicts(demo_db, "SELECT rank, title, period FROM findings.hidden_costs ORDER BY rank LIMIT 1")[0]
    assert top == {"rank": 1, "title": "8 idle GPUs on gpu-a100-01", "period": "2026-10"}


def test_the_report_headline_and_kpis_on_the_demo(demo_run):
    machine = json.loads((demo_run.out / "reports" / "2026-10-12" / "report.json").read_text())
    assert "Largest leak: 8 idle GPUs on gpu-a100-01 in 2026-10: 428.27 USD avoidable (2,871.20 CNY)" in machine["headline"]["lines"]
    cards = {c["label"]: (c["value"], c["note"]) for c in machine["kpi_cards"]}
    assert cards == {
        "Spend, Oct 1–10": ("713.07 USD", "818.76 USD at the same point last month (-12.9 %)"),
        "Forecast to Oct 31": ("2,154.08 USD", "68.62 USD a day (last 7 days) for the 21 days left"),
        "Avoidable this month": ("524.85 USD", "2 leaks to act on, below"),
        "Idle share": ("73.6 %", "of the spend of Oct 1–10 paid for GPUs nothing ran on (525.09 USD)"),
        "Cost per busy GPU-hour": ("1.81 USD", "GPU spend 683.27 USD over 377 busy of 2,640 paid GPU-hours, Oct 1–10"),
    }
    page = (demo_run.out / "reports" / "2026-10-12" / "report.html").read_text()
    assert "Largest leak: 8 idle GPUs on gpu-a100-01 in 2026-10: 428.27 USD avoidable (2,871.20 CNY)" in page
    # Planned runs: days are calendar days, whatever number of series each day flagged.
    suppressed = {s["planned_run"]: (s["days_suppressed"], s["first_day"], s["last_day"]) for s in machine["suppressed"]}
    for days, first, last in suppressed.values():
        assert days <= (date.fromisoformat(last) - date.fromisoformat(first)).days + 1


def test_findings_of_one_kind_show_that_kind_alone(demo_run):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    result = CliRunner().invoke(app, ["findings", "--warehouse", str(demo_run.out / "warehouse.duckdb"), "--kind", "egress"],
                                terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "Largest egress leak: Repeated downloads from" in result.output
    assert "unused_gpu" not in result.output and "slow_disk_idle" not in result.output
