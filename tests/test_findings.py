"""Hidden costs on small hand-built data whose right answers are worked out by hand."""

import json
from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_dicts
from tests.conftest import run_pipeline

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,CommitmentDiscountId,"
          "CommitmentDiscountStatus,Tags,x_GpuModel,x_GpuCount\n")
DAY = "2026-09-01T00:00:00Z,2026-09-02T00:00:00Z"
CHARGES = [
    f"355.20,355.20,CNY,Usage,{DAY},GpuCloud,GPU,Compute,ins-k,gpu-k,192,GPU-Hours,,,,A100 80G,8",  # 1.85 per GPU-hour
    f"44.40,44.40,CNY,Usage,{DAY},GpuCloud,GPU,Compute,ins-dark,gpu-dark,24,GPU-Hours,,,,A100 80G,1",  # nobody reports
    f"10.00,10.00,USD,Usage,{DAY},AWS,EC2,Compute,,,,,sp-123,Unused,,,",
    f"2.70,2.70,USD,Usage,{DAY},AWS,AWS Data Transfer,Networking,arn:aws:s3:::bucket-e,bucket-e,30,GB,,,,,",
    f"0.90,0.90,USD,Usage,{DAY},AWS,AWS Data Transfer,Networking,arn:aws:s3:::bucket-e,,10,GB,,,,,",  # same bucket, ARN only
    f"24.00,24.00,CNY,Usage,{DAY},GpuCloud,GPU,Compute,ins-i,gpu-i,24,GPU-Hours,,,,RTX 6000 Ada,1",  # 1.00 per hour
]
WORKLOADS = """workload_id,phase,host,gpu_count,started_at,ended_at
job-a,pretraining,gpu-k,4,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
job-b,finetuning,gpu-k,4,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
job-s,pretraining,gpu-s,4,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z
svc-i,inference,gpu-i,1,2026-09-01T00:00:00Z,
"""


def serving_lines():
    """Half busy for 12 hours, then a 2 % valley for 12 hours."""
    lines = ["timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for minute in range(24 * 60):
        hh, mm = divmod(minute, 60)
        lines.append(f"2026/09/01 {hh:02d}:{mm:02d}:00.000, 0, GPU-i0, NVIDIA RTX 6000 Ada Generation, "
                     f"{50 if hh < 12 else 2} %, 100 MiB, 80.00 W")
    return "\n".join(lines) + "\n"
CHECKPOINTS = ('{"job": "job-a", "host": "gpu-k", "started_at": "2026-09-01T00:00:00Z", "ended_at": "2026-09-01T00:08:00Z", '
               '"bytes": 200000000000, "path": "/ckpt/1", "storage_class": "cloud_disk"}\n')


def smi_lines():
    lines = ["timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for minute in range(4):  # telemetry for only the first half of the checkpoint window
        lines += [f"2026/09/01 00:{minute:02d}:00.000, {g}, GPU-k{g}, NVIDIA A100-SXM4-80GB, 0 %, 100 MiB, 80.00 W" for g in range(8)]
    for minute in range(60, 60 + 7 * 60):  # GPU 0 idle at 1 % for 7 hours; GPU 1 idle for 5 hours only
        hh, mm = divmod(minute, 60)
        lines.append(f"2026/09/01 {hh:02d}:{mm:02d}:00.000, 0, GPU-k0, NVIDIA A100-SXM4-80GB, 1 %, 100 MiB, 80.00 W")
        if minute < 60 + 5 * 60:
            lines.append(f"2026/09/01 {hh:02d}:{mm:02d}:00.000, 1, GPU-k1, NVIDIA A100-SXM4-80GB, 1 %, 100 MiB, 80.00 W")
    return "\n".join(lines) + "\n"


T0 = 1788220800  # 2026-09-01 00:00 UTC


def signature_files():
    """gpu-s: no checkpoint events, but node_exporter shows 4 minutes of 500 MB/s writes (10:00–10:04)
    while its 4 GPUs sit at 1 %; a later fast write while the GPUs are busy is not a checkpoint stall."""
    smi = ["timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for minute in list(range(600, 604)) + list(range(720, 722)):
        busy = 1 if minute < 700 else 90
        smi += [f"2026/09/01 {minute // 60:02d}:{minute % 60:02d}:00.000, {g}, GPU-s{g}, NVIDIA A100-SXM4-80GB, {busy} %, 1 MiB, 80.00 W"
                for g in range(4)]
    written, values = 0, []
    for minute in range(599, 606):
        written += 30_000_000_000 if 600 <= minute < 604 else 0  # 30 GB a minute = 500 MB/s
        values.append([T0 + (minute + 1) * 60, str(written)])
    values.append([T0 + 722 * 60, str(written + 60_000_000_000)])  # busy GPUs: someone else's write
    export = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "node_disk_written_bytes_total", "instance": "gpu-s:9100", "device": "sda"}, "values": values}]}}
    return "\n".join(smi) + "\n", json.dumps(export)


def access_log_line(n, ip):
    return (f"owner bucket-e [01/Sep/2026:0{n}:00:00 +0000] {ip} arn:aws:iam::1:user/x REQ{n} REST.GET.OBJECT data/set.tar "
            f'"GET /data/set.tar HTTP/1.1" 200 - 10000000000 10000000000 1000 10 "-" "curl" -\n')


@pytest.fixture(scope="module")
def findings(tmp_path_factory):
    root = tmp_path_factory.mktemp("findings")
    landing = root / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(HEADER + "\n".join(CHARGES) + "\n")
    (landing / "jobs.csv").write_text(WORKLOADS)
    (landing / "checkpoints.jsonl").write_text(CHECKPOINTS)
    (landing / "gpu-k.csv").write_text(smi_lines())
    (landing / "gpu-i.csv").write_text(serving_lines())
    smi, node = signature_files()
    (landing / "gpu-s.csv").write_text(smi)
    (landing / "node_exporter.json").write_text(node)
    (landing / "access.log").write_text("".join(access_log_line(n, "198.51.100.7") for n in range(1, 4))
                                        + access_log_line(4, "10.0.0.5"))  # the internal read is not egress
    outcome = run_pipeline(landing, root / "wh.duckdb", reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks
    conn = connect(root / "wh.duckdb", read_only=True)
    rows = fetch_dicts(conn, "SELECT * FROM findings.hidden_costs")
    conn.close()
    grouped = {}
    for r in rows:
        grouped.setdefault((r["kind"], r["subkind"]), []).append(r)
    return grouped


def one(findings, kind, subkind):
    rows = findings[(kind, subkind)]
    assert len(rows) == 1, rows
    return rows[0]


def detail(finding) -> dict:
    """The evidence of a finding's one detail (the per-GPU, per-object or per-event row it groups)."""
    details = json.loads(finding["evidence"])["details"]
    assert len(details) == finding["items"] == 1, details
    return details[0]["evidence"]


def test_slow_disk_checkpoint_with_partial_telemetry_counts_its_own_jobs_gpus(findings):
    f = one(findings, "slow_disk_idle", "checkpoint")
    evidence = detail(f)
    # The design's worked example: 200 GB in 8 minutes ≈ 417 MB/s; 67 s at 3 GB/s. The event names job-a,
    # so its 4 GPUs waited (32 GPU-minutes), not job-b's 4 beside them on the host.
    assert (evidence["gpus"], evidence["throughput_mb_s"], evidence["duration_on_fast_disk_s"]) == (4, 416.7, 66.7)
    assert evidence["workloads"] == "job-a" and evidence["gpus_from"] == "the event's workload"
    assert evidence["gpu_minutes_with_telemetry"] == 32  # the host's 8 GPUs for the first 4 minutes
    assert f["wasted_cost"] == Decimal("0.9866666666")  # 32/60 GPU-hours (in whole 10^-10 units) × 1.85 CNY, the charge's own price
    assert f["avoidable_cost"] == Decimal("0.8496296297")  # × (1 − 66.67 s / 480 s)
    assert (f["currency"], f["price_source"]) == ("CNY", "charge")


def test_a_checkpoint_stall_found_from_its_signature_alone(findings):
    f = one(findings, "slow_disk_idle", "signature")
    evidence = detail(f)
    assert f["host"] == "gpu-s" and evidence["bytes"] == 120_000_000_000 and evidence["duration_s"] == 240.0
    assert (evidence["throughput_mb_s"], evidence["gpus"], evidence["duration_on_fast_disk_s"]) == (500.0, 4, 40.0)
    # 4 GPUs × 4 minutes, every GPU-minute under the idle threshold; priced from the catalog (no charge covers gpu-s).
    assert evidence["wasted_gpu_hours"] == pytest.approx(4 * 4 / 60, abs=1e-4)  # rounded in the evidence
    assert f["price_source"].startswith("catalog:")


def test_idle_runs_need_the_minimum_length(findings):
    runs = findings[("unused_gpu", "idle_run")]
    # One finding for the host; GPU 1's 5 idle hours are under the 6-hour minimum, so only GPU 0 is in it.
    assert [(r["resource"], r["title"], r["wasted_cost"]) for r in runs] == [("gpu-k", "1 idle GPU on gpu-k", Decimal("12.950000"))]
    assert [d["resource"] for d in json.loads(runs[0]["evidence"])["details"]] == ["gpu-k/GPU-k0"]  # 7 h × 1.85
    assert "sat idle" in runs[0]["recommendation"]


def test_a_paid_gpu_without_any_telemetry(findings):
    f = one(findings, "unused_gpu", "no_telemetry")
    assert (f["resource"], f["wasted_cost"], f["currency"]) == ("ins-dark", Decimal("44.400000"), "CNY")


def test_an_unused_commitment_for_no_gpu_is_its_own_kind(findings):
    # sp-123 names no GPU model or count: an unused savings plan, not an unused GPU.
    assert ("unused_gpu", "unused_commitment") not in findings
    f = one(findings, "unused_commitment", "commitment")
    assert (f["resource"], f["wasted_cost"], f["avoidable_cost"]) == ("sp-123", Decimal("10.000000"), Decimal("10.000000"))
    assert f["title"] == "Unused commitment sp-123" and detail(f)["commitment_status"] == "Unused"


def test_repeated_downloads_from_outside_are_avoidable_egress(findings):
    f = one(findings, "egress", "repeated_download")
    assert f["resource"] == "bucket-e"  # the bucket is what one acts on; the object is in the detail
    evidence = detail(f)
    assert (evidence["downloads"], evidence["total_gb"], evidence["price_per_gb"]) == (3, 30.0, 0.09)
    # One finding priced once, though the bucket's egress lines name it two ways (bucket-e, and only its ARN).
    assert (f["wasted_cost"], f["avoidable_cost"], f["price_source"]) == (Decimal("2.700000"), Decimal("1.800000"), "charge")
    # The 30 GB the log explains are not counted again as the bucket's internet egress (the 10 GB it
    # does not explain are: test_a_logged_buckets_egress_the_downloads_do_not_explain_is_still_a_finding).
    assert detail(one(findings, "egress", "internet"))["gb"] == 10.0


def test_inference_paid_at_peak_all_day(findings):
    f = one(findings, "overprovisioned_inference", "no_gpu_mode")
    evidence = detail(f)
    assert (evidence["valley_hours"], evidence["peak_valley_ratio"]) == (12, 25.0)
    # Wasted is what it paid above a right-sized fleet, not its whole 24.00: the busy half-day needs its one
    # card (0.5 busy ÷ 60 % → 1), the 12 valley hours need none. 12 valley hours × 1.00.
    assert (f["wasted_cost"], f["avoidable_cost"]) == (Decimal("12.000000"), Decimal("12.000000"))
    assert (evidence["paid_gpu_hours"], evidence["right_sized_gpu_hours"], evidence["paid_cost"]) == (24, 12, 24.0)
    assert evidence["autoscaling_saving"] == 0  # one card is the least autoscaling keeps
    # The catalog's cheapest CNY card (RTX 6000 Ada at 0.58) in the 12 valley hours: 12 × (1.00 − 0.58).
    assert (evidence["cheaper_card_saving"], evidence["cheaper_card"]) == (5.04, "RTX-6000-Ada (Lumen GPU Cloud)")


def test_findings_are_ranked_have_stable_ids_and_reporting_amounts(findings):
    rows = [r for group in findings.values() for r in group]
    assert len({r["finding_id"] for r in rows}) == len(rows) == 8
    assert sorted(r["rank"] for r in rows) == list(range(1, 9))
    ranked = sorted(rows, key=lambda r: r["rank"])
    assert [r["avoidable_cost_reporting"] for r in ranked] == sorted((r["avoidable_cost_reporting"] for r in rows), reverse=True)
    for r in rows:
        assert r["period"] == "2026-09"
        assert r["reporting_currency"] == "USD" and r["wasted_cost_reporting"] is not None
        assert r["severity"] in ("low", "medium", "high")


def test_the_control_scenario_has_no_hidden_costs(tmp_path):
    from pipelines.demo.scenario import TELEMETRY_TZ, write_scenario

    truths = write_scenario(tmp_path, leaks=False)
    assert truths["leaks"]["unused_gpu"]["idle_gpu_hours"] == 0 and truths["leaks"]["egress"]["wasted_usd"] == 0
    outcome = run_pipeline(tmp_path / "landing", tmp_path / "wh.duckdb", timezone=TELEMETRY_TZ)
    assert outcome.success and not outcome.failed_checks
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_dicts(conn, "SELECT kind, subkind, resource, wasted_cost FROM findings.hidden_costs") == []
        events = fetch_dicts(conn, "SELECT kind, count(*) AS n FROM core.storage_events GROUP BY kind ORDER BY kind")
        assert events == [{"kind": "checkpoint", "n": 80}, {"kind": "object_get", "n": 1}]  # the data is there, the leaks are not
    finally:
        conn.close()


def smi_day(prefix: str, cards, busy) -> list[str]:
    """nvidia-smi lines for every minute of 2026-09-01, one per card of `cards` (uuid GPU-<prefix><n>),
    at `busy(card)` percent, after the header."""
    lines = ["timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for minute in range(24 * 60):
        stamp = f"2026/09/01 {minute // 60:02d}:{minute % 60:02d}:00.000"
        lines += [f"{stamp}, {g}, GPU-{prefix}{g}, NVIDIA A100-SXM4-80GB, {busy(g)} %, 100 MiB, 80.00 W" for g in cards]
    return lines


def test_idle_cards_beside_a_steady_inference_service_are_idle_runs(tmp_path):
    """An inference service holds one card of eight at a steady 50 % for a day; the other seven sit
    at 1 % with no workload. findings.overprovisioned_inference has no peak and valley to price, and
    the service's one replica is what its load needs, so the seven cards are idle runs: 7 × 24
    GPU-hours at 2.00 = 336.00, where before an inference workload hid every card of its host, all
    the time."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "gpu-m.csv").write_text("\n".join(smi_day("m", range(8), lambda g: 50 if g == 0 else 1)) + "\n")
    (landing / "charges.csv").write_text(HEADER + f"384.00,384.00,USD,Usage,{DAY},GpuCloud,GPU,Compute,ins-m,gpu-m,,,,,,A100 80G,8\n")
    (landing / "jobs.csv").write_text("workload_id,phase,host,gpu_count,started_at,ended_at\n"
                                      "svc-m,inference,gpu-m,1,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n")
    run_pipeline(landing, tmp_path / "w.duckdb")
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    runs = conn.execute("""SELECT resource, wasted_cost FROM findings.unused_gpu WHERE subkind = 'idle_run'
                           ORDER BY resource""").fetchall()
    assert runs == [(f"gpu-m/GPU-m{g}", Decimal("48.0000000000")) for g in range(1, 8)]
    assert conn.execute("SELECT count(*) FROM findings.overprovisioned_inference").fetchone() == (0,)


def flat_inference_run(tmp_path, busy, jobs: str, charge: str = f"384.00,384.00,USD,Usage,{DAY}", cards=range(8)):
    """A day of gpu-r's 8 A100s at `busy(card)` percent, paid 8 × 24 GPU-hours at 2.00 (384.00; or
    `charge`: its cost, currency, category and period), with `jobs` (workloads CSV rows); the
    warehouse's connection."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "gpu-r.csv").write_text("\n".join(smi_day("r", cards, busy)) + "\n")
    (landing / "charges.csv").write_text(HEADER + f"{charge},GpuCloud,GPU,Compute,ins-r,gpu-r,,,,,,A100 80G,8\n")
    (landing / "jobs.csv").write_text("workload_id,phase,host,gpu_count,started_at,ended_at\n" + jobs)
    assert run_pipeline(landing, tmp_path / "w.duckdb").success
    return connect(tmp_path / "w.duckdb", read_only=True)


def replicas(count: int, gpus: int = 1, name: str = "svc-r") -> str:
    return "".join(f"{name}-{n},inference,gpu-r,{gpus},2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n" for n in range(count))


def test_a_flat_inference_load_on_more_replicas_than_it_needs_is_a_finding(tmp_path):
    """Eight one-GPU replicas of one service, every card at a steady 10 % all day: 0.8 busy GPUs an
    hour, which two replicas serve at 60 %. No peak and valley, so no autoscaling finding; before,
    no finding at all. Now the six replicas above the two: 6 × 24 GPU-hours at 2.00 = 288.00."""
    conn = flat_inference_run(tmp_path, lambda g: 10, replicas(8))
    try:
        [f] = fetch_dicts(conn, "SELECT * FROM findings.overprovisioned_inference")
        assert (f["subkind"], f["resource"], f["wasted_cost"], f["avoidable_cost"], f["paid_cost"]) == (
            "rightsizing", "gpu-r", Decimal("288.0000000000"), Decimal("288.0000000000"), Decimal("384.0000000000"))
        evidence = json.loads(f["evidence"])
        assert (evidence["held_gpu_hours"], evidence["surplus_gpu_hours"], evidence["busy_gpu_hours"]) == (192.0, 144.0, 19.2)
        assert evidence["services"] == [{"service": "svc-r", "replica_cards": 1, "most_replicas": 1.0 * 8, "needed_replicas": 2,
                                         "peak_busy_gpus": 0.8}]
        assert "svc-r on 2 of its 8 replicas of 1 GPU)" in f["recommendation"], f["recommendation"]
        [leak] = fetch_dicts(conn, "SELECT title, avoidable_cost FROM findings.hidden_costs")
        assert leak == {"title": "Inference on gpu-r on more replicas than its load needs", "avoidable_cost": Decimal("288.0000000000")}
    finally:
        conn.close()


def test_a_model_sharded_over_its_cards_keeps_them_however_light_its_load(tmp_path):
    """One replica holding all 8 cards (a model sharded over them) at 10 %: it cannot run on fewer
    cards than it is split over, so no finding, and no card is idle."""
    conn = flat_inference_run(tmp_path, lambda g: 10, replicas(1, gpus=8))
    try:
        assert fetch_dicts(conn, "SELECT kind FROM findings.hidden_costs") == []
    finally:
        conn.close()


def test_idle_replicas_stay_idle_runs_and_only_the_ones_at_work_are_sized(tmp_path):
    """Eight replicas, four of their cards at 10 % and four idle at 1 %: 0.44 busy GPUs, one replica
    needed. The four idle cards are idle runs (4 × 48.00), as before; of the four at work, three are
    above the one replica needed (3 × 24 × 2.00 = 144.00). Seven cards in all, none counted twice."""
    conn = flat_inference_run(tmp_path, lambda g: 10 if g < 4 else 1, replicas(8))
    try:
        rows = fetch_dicts(conn, "SELECT kind, subkind, resource, wasted_cost FROM findings.unused_gpu ORDER BY resource")
        assert rows == [{"kind": "unused_gpu", "subkind": "idle_run", "resource": f"gpu-r/GPU-r{g}", "wasted_cost": Decimal("48.0000000000")}
                        for g in range(4, 8)]
        [f] = fetch_dicts(conn, "SELECT subkind, wasted_cost, evidence FROM findings.overprovisioned_inference")
        assert (f["subkind"], f["wasted_cost"]) == ("rightsizing", Decimal("144.0000000000"))
        assert json.loads(f["evidence"])["services"][0]["needed_replicas"] == 1
        totals = fetch_dicts(conn, "SELECT sum(wasted_cost) AS wasted FROM findings.hidden_costs")
        assert totals == [{"wasted": Decimal("336.0000000000")}]
    finally:
        conn.close()


def test_an_hour_a_charge_covers_in_part_is_priced_for_that_part(tmp_path):
    """The flat load of eight replicas, paid from 00:00 to 12:30 only (200.00: 2.00 a GPU-hour). The
    hour 12:00-13:00 is paid for half: six replicas too many at 1.00 each, not 2.00. 6 × 12 × 2.00 +
    6 × 1.00 = 150.00, and paid 200.00, the bill (before, 156.00 and 208.00)."""
    conn = flat_inference_run(tmp_path, lambda g: 10, replicas(8),
                              charge="200.00,200.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-01T12:30:00Z")
    try:
        [f] = fetch_dicts(conn, "SELECT wasted_cost, paid_cost FROM findings.overprovisioned_inference")
        assert f == {"wasted_cost": Decimal("150.0000000000"), "paid_cost": Decimal("200.0000000000")}
    finally:
        conn.close()


def test_idle_replicas_beside_another_holders_cards_at_work_are_idle_runs_only(tmp_path):
    """Four one-card replicas, card 0 at 20 % and cards 1-3 idle; cards 4-7 at 6 %, held by no
    workload. The service's only card at work is the one it needs: no rightsizing, and its three
    idle cards are idle runs (3 × 48.00), once (before, the other cards at work made its idle ones
    look busy, and they were counted in both)."""
    conn = flat_inference_run(tmp_path, lambda g: 20 if g == 0 else (0 if g < 4 else 6), replicas(4))
    try:
        assert fetch_dicts(conn, "SELECT * FROM findings.overprovisioned_inference") == []
        assert fetch_dicts(conn, "SELECT title, wasted_cost FROM findings.hidden_costs") == [
            {"title": "3 idle GPUs on gpu-r", "wasted_cost": Decimal("144.0000000000")}]
    finally:
        conn.close()


def test_replicas_on_cards_no_telemetry_covers_are_not_sized_from_the_cards_it_does(tmp_path):
    """Eight replicas, but only cards 0-3 ever report (10 %): half the service's load is not known,
    so the cards nobody saw count as busy and no replica is called too many."""
    conn = flat_inference_run(tmp_path, lambda g: 10, replicas(8), cards=range(4))
    try:
        assert fetch_dicts(conn, "SELECT * FROM findings.overprovisioned_inference") == []
    finally:
        conn.close()


def test_a_busy_service_beside_an_idle_job_is_not_taken_for_a_light_one(tmp_path):
    """Four replicas busy at 50 % on cards 0-3 (2.0 busy GPUs: all four are needed) beside a
    training job holding cards 4-7 idle at 1 %. Without pod labels the busy minutes are split by
    cards held, which made the service look half as busy and asked it to run on two replicas at
    about 100 %. Beside other holders a service is now taken as busy as the host, up to its cards:
    no rightsizing; the job's idle cards are idle runs (4 × 48.00)."""
    conn = flat_inference_run(tmp_path, lambda g: 50 if g < 4 else 1,
                              replicas(4) + "train-x,training,gpu-r,4,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n")
    try:
        assert fetch_dicts(conn, "SELECT * FROM findings.overprovisioned_inference") == []
        assert fetch_dicts(conn, "SELECT title, wasted_cost FROM findings.hidden_costs") == [
            {"title": "4 idle GPUs on gpu-r", "wasted_cost": Decimal("192.0000000000")}]
    finally:
        conn.close()


def test_deployment_pods_are_one_service_and_a_month_boundary_splits_the_finding(tmp_path):
    """Four pods of one Deployment (embed-<template hash>-<suffix>, no app label) on gpu-r from
    08-31 12:00 to 09-01 12:00, each card at 10 %: one service, which one replica serves. Three
    cards above it for 12 hours in each month, at 2.00: 72.00 in August and 72.00 in September, as
    idle runs are split at month ends (before, every pod was a service of its own, and one row put
    the whole day in August)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    lines = ["timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"]
    for minute in range(24 * 60):
        stamp = f"2026/{8 if minute < 720 else 9:02d}/{31 if minute < 720 else 1:02d} {(12 + minute // 60) % 24:02d}:{minute % 60:02d}:00.000"
        lines += [f"{stamp}, {g}, GPU-e{g}, NVIDIA A100-SXM4-80GB, 10 %, 100 MiB, 80.00 W" for g in range(4)]
    (landing / "gpu-r.csv").write_text("\n".join(lines) + "\n")
    (landing / "charges.csv").write_text(HEADER + "".join(
        f"96.00,96.00,USD,Usage,{start},{end},GpuCloud,GPU,Compute,ins-r,gpu-r,,,,,,A100 80G,4\n"
        for start, end in (("2026-08-31T12:00:00Z", "2026-09-01T00:00:00Z"), ("2026-09-01T00:00:00Z", "2026-09-01T12:00:00Z"))))
    pods = [{"kind": "Pod", "metadata": {"name": f"embed-7c6d5f4b9-{suffix}", "namespace": "serving",
                                         "labels": {"phase": "inference", "pod-template-hash": "7c6d5f4b9"}},
             "spec": {"nodeName": "gpu-r", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
             "status": {"phase": "Succeeded", "startTime": "2026-08-31T12:00:00Z",
                        "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-09-01T12:00:00Z"}}}]}}
            for suffix in ("q1w2e", "r3t4y", "u5i6o", "p7a8s")]
    (landing / "pods.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    assert run_pipeline(landing, tmp_path / "w.duckdb").success
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    try:
        rows = fetch_dicts(conn, "SELECT title, period, wasted_cost FROM findings.hidden_costs ORDER BY period")
        assert rows == [{"title": "Inference on gpu-r on more replicas than its load needs", "period": period,
                         "wasted_cost": Decimal("72.0000000000")} for period in ("2026-08", "2026-09")]
        [services] = {json.dumps(json.loads(e)["services"]) for (e,) in conn.execute(
            "SELECT evidence FROM findings.overprovisioned_inference").fetchall()}
        assert json.loads(services) == [{"service": "embed", "replica_cards": 1, "most_replicas": 4, "needed_replicas": 1,
                                         "peak_busy_gpus": 0.4}]
    finally:
        conn.close()


def test_paid_gpus_with_telemetry_for_part_of_the_time_are_a_leak(tmp_path):
    """Two hosts of 8 GPUs at 2.00 a GPU-hour for a day (384.00 each). gpu-p: only cards 0-3 ever
    report (idle at 1 % all day), so the other four are paid and unseen; gpu-q: every card reports
    once at midnight, then its exporter dies. Both used to be no finding at all: a host counted as
    dark only when it reported nothing."""
    landing = tmp_path / "landing"
    landing.mkdir()
    smi = smi_day("p", range(4), lambda g: 1)
    (landing / "gpu-p.csv").write_text("\n".join(smi) + "\n")
    (landing / "gpu-q.csv").write_text("\n".join(
        smi[:1] + [f"2026/09/01 00:00:00.000, {g}, GPU-q{g}, NVIDIA A100-SXM4-80GB, 1 %, 100 MiB, 80.00 W" for g in range(8)]) + "\n")
    (landing / "charges.csv").write_text(HEADER + "".join(
        f"384.00,384.00,USD,Usage,{DAY},GpuCloud,GPU,Compute,ins-{h},gpu-{h},,,,,,A100 80G,8\n" for h in "pq"))
    run_pipeline(landing, tmp_path / "w.duckdb")
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    found = conn.execute("""SELECT host, subkind, count(*), sum(wasted_cost) FROM findings.unused_gpu
                            GROUP BY ALL ORDER BY host, subkind""").fetchall()
    assert found == [
        ("gpu-p", "idle_run", 4, Decimal("192.0000000000")),           # the four reporting cards, idle
        ("gpu-p", "partial_telemetry", 1, Decimal("192.0000000000")),  # the four that never reported
        # 192 GPU-hours paid, 8 GPU-minutes seen: 384.00 × (691,200 − 480) ÷ 691,200.
        ("gpu-q", "partial_telemetry", 1, Decimal("383.7333333333")),
    ]
    evidence = json.loads(conn.execute("SELECT evidence FROM findings.unused_gpu WHERE host = 'gpu-q'").fetchone()[0])
    assert (evidence["covered_gpu_hours"], evidence["dark_gpu_hours"], evidence["held_gpu_hours"]) == (0.13, 191.87, 0)
    titles = {r[0] for r in conn.execute("SELECT title FROM findings.hidden_costs WHERE subkind = 'partial_telemetry'").fetchall()}
    assert titles == {"Paid GPUs with telemetry for part of the time: ins-p", "Paid GPUs with telemetry for part of the time: ins-q"}


def test_cards_that_never_report_on_an_hourly_bill_are_a_leak(tmp_path):
    """gpu-h: 8 GPUs billed by the hour at 2.00 a GPU-hour (16.00 an hour) for a day; cards 0-5
    report (busy), 6 and 7 never do: 48 GPU-hours, 96.00, paid and unseen. Each hourly line holds 2
    dark GPU-hours, under the 6-hour minimum one by one: it was no finding."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "gpu-h.csv").write_text("\n".join(smi_day("h", range(6), lambda g: 90)) + "\n")
    (landing / "charges.csv").write_text(HEADER + "".join(
        f"16.00,16.00,USD,Usage,2026-09-01T{h:02d}:00:00Z,2026-09-01T{h + 1:02d}:00:00Z,GpuCloud,GPU,Compute,ins-h,gpu-h,,,,,,"
        "A100 80G,8\n" for h in range(23))
        + "16.00,16.00,USD,Usage,2026-09-01T23:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,ins-h,gpu-h,,,,,,A100 80G,8\n")
    run_pipeline(landing, tmp_path / "w.duckdb")
    conn = connect(tmp_path / "w.duckdb", read_only=True)
    try:
        assert conn.execute("""SELECT subkind, items, wasted_cost FROM findings.hidden_costs""").fetchall() == [
            ("partial_telemetry", 24, Decimal("96.0000000000"))]
    finally:
        conn.close()


def test_a_logged_buckets_egress_the_downloads_do_not_explain_is_still_a_finding(findings):
    """bucket-e billed 40 GB (30 by name, 10 by ARN alone) at 0.09; its log shows 30 GB of pulls from
    outside: the other 10 GB (0.90) are egress no log explains. Before, a bucket with any repeated
    download had all its internet egress, every day, left out of the findings."""
    f = one(findings, "egress", "internet")
    assert (f["resource"], f["wasted_cost"], f["avoidable_cost"]) == ("bucket-e", Decimal("0.9000000000"), Decimal("0E-10"))
    assert detail(f)["gb_in_repeated_downloads"] == 30.0
