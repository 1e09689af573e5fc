"""A MIG instance is a slice of a card, not a GPU: busy GPU-hours, what a charge's idle part costs and
the idle findings count each instance as its share of the card (core.gpu_minutes.gpu_share).

One A100 on host mig-1 is billed 48.00 USD for a day (1 GPU, 2.00 USD an hour). dcgm-exporter shows
its MIG instances all day: a 3g.40gb busy at 80 % and 2g.20gb, 1g.10gb, 1g.10gb idle. Counted as
whole GPUs (before), the three idle slices were three idle GPUs worth 144.00 USD on a 48.00 USD card,
and the busy slice made the whole card busy."""

import json
from datetime import UTC, datetime
from decimal import Decimal

import duckdb
import pytest

from pipelines.warehouse.connection import SQL_DIR, connect, fetch_all
from tests.conftest import run_pipeline

CENT = Decimal("0.01")
CHARGE = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,Tags,x_GpuCount\n"
          "48.00,48.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,GpuCloud,GPU,Compute,mig-1,mig-1,,1\n")
DAY_START = int(datetime(2026, 9, 1, tzinfo=UTC).timestamp())


def mig_series(instance: str | None, profile: str | None, util: float, minutes=range(24 * 60), day: int = 1,
               host: str = "mig-1", uuid: str = "GPU-m0", gpu: str = "0", pod: str | None = None,
               model: str = "NVIDIA A100-SXM4-80GB") -> dict:
    """One DCGM_FI_DEV_GPU_UTIL series of a Prometheus range query, a sample a minute of `minutes`
    on 1 September + (day - 1): a MIG instance (its id, GPU instance profile or None), or a whole
    GPU (instance None); `pod`: the pod dcgm-exporter maps it to (namespace ml), if any."""
    labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": host, "gpu": gpu, "UUID": uuid, "modelName": model}
    if pod:
        labels |= {"pod": pod, "namespace": "ml", "container": "main"}
    if instance is not None:
        labels["GPU_I_ID"] = instance
    if profile:
        labels["GPU_I_PROFILE"] = profile
    start = DAY_START + (day - 1) * 86400
    return {"metric": labels, "values": [[start + 60 * m, str(util)] for m in minutes]}


def dcgm(*series: dict) -> str:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(series)}})


def dcgm_mig(instances: list[tuple[str, str | None, float]]) -> str:
    """A day of a sample a minute per MIG instance: (instance id, profile or None, utilization %)."""
    return dcgm(*(mig_series(instance, profile, util) for instance, profile, util in instances))


def build(tmp_path, instances=None, files: dict[str, str] | None = None):
    landing = tmp_path / "landing"
    landing.mkdir()
    files = files or {"charges.csv": CHARGE, "dcgm-mig.json": dcgm_mig(instances)}
    for name, text in files.items():
        (landing / name).write_text(text)
    outcome = run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD")
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    return connect(tmp_path / "wh.duckdb", read_only=True)


def test_mig_instances_count_as_their_profile_share_of_the_card(tmp_path):
    conn = build(tmp_path, [("0", "3g.40gb", 80), ("1", "2g.20gb", 0), ("2", "1g.10gb", 0), ("3", "1g.10gb", 0)])
    try:
        assert fetch_all(conn, "SELECT DISTINCT gpu_key, gpu_share FROM core.gpu_minutes ORDER BY 1") == [
            ("mig-1/GPU-m0/mig0", pytest.approx(3 / 7)), ("mig-1/GPU-m0/mig1", pytest.approx(2 / 7)),
            ("mig-1/GPU-m0/mig2", pytest.approx(1 / 7)), ("mig-1/GPU-m0/mig3", pytest.approx(1 / 7))]
        # The card is 3/7 busy: that part of its 48.00 USD ran unattributed, the rest sat idle (it was
        # all busy_telemetry before: one busy slice made the card busy). Split by GPU-seconds.
        split = fetch_all(conn, "SELECT phase, amount_billing, gpu_seconds FROM marts.cost_attribution ORDER BY 1")
        assert [(phase, amount.quantize(CENT), seconds) for phase, amount, seconds in split] == [
            ("idle", Decimal("27.43"), 49371), ("unattributed", Decimal("20.57"), 37029)]
        assert sum(amount for _, amount, _ in split) == Decimal("48.0000000000")
        # Busy GPU-hours: 80 % of 3/7 of a card for 24 hours (19.2 before).
        assert fetch_all(conn, "SELECT sum(busy_gpu_minutes) / 60 FROM marts.gpu_busy_by_host_hour") == [(pytest.approx(8.228571, abs=1e-5),)]
        # The idle slices are 4/7 of the card: 27.43 USD, not 3 × 48.00.
        runs = fetch_all(conn, """SELECT resource, wasted_cost, evidence->>'idle_gpu_hours', recommendation
                                  FROM findings.unused_gpu WHERE subkind = 'idle_run' ORDER BY resource""")
        assert [(r, cost.quantize(CENT), hours) for r, cost, hours, _ in runs] == [
            ("mig-1/GPU-m0/mig1", Decimal("13.71"), "6.86"), ("mig-1/GPU-m0/mig2", Decimal("6.86"), "3.43"),
            ("mig-1/GPU-m0/mig3", Decimal("6.86"), "3.43")]
        assert "for 24.0 hours from 2026-09-01 00:00 UTC (a MIG instance, 0.29 of its card: 6.9 GPU-hours)" in runs[0][3]
        assert fetch_all(conn, """SELECT title, wasted_cost FROM findings.hidden_costs WHERE kind = 'unused_gpu'""") == [
            ("3 idle MIG instances on mig-1", Decimal("27.4285714286"))]
    finally:
        conn.close()


def test_without_profiles_each_instance_is_its_share_of_the_instances_seen(tmp_path):
    # Seven idle instances and no profile label: each is 1/7 of the card, and together they are the
    # one idle GPU that was paid for (336.00 USD before: seven GPUs).
    conn = build(tmp_path, [(str(i), None, 0) for i in range(1, 8)])
    try:
        assert fetch_all(conn, "SELECT count(DISTINCT gpu_key), min(gpu_share), max(gpu_share) FROM core.gpu_minutes") == [
            (7, pytest.approx(1 / 7), pytest.approx(1 / 7))]
        # Each 24/7 GPU-hours at 2.00 (6.8571428572 USD, rounded at money's 10^-10 each).
        assert fetch_all(conn, """SELECT count(*), round(sum(wasted_cost), 2), min(wasted_cost), max(wasted_cost)
                                  FROM findings.unused_gpu WHERE subkind = 'idle_run'""") == [
            (7, Decimal("48.00"), Decimal("6.8571428572"), Decimal("6.8571428572"))]
        assert fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution") == [("idle", Decimal("48.0000000000"))]
    finally:
        conn.close()


def test_a_card_splits_into_four_slices_on_an_a30_and_seven_elsewhere():
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    assert conn.execute("SELECT mig_card_slices(gpu_model_key('NVIDIA A30')), mig_card_slices(gpu_model_key('NVIDIA H100 80GB HBM3')), "
                        "mig_card_slices(gpu_model_key('NVIDIA A100-SXM4-40GB')), "
                        "mig_card_slices(gpu_model_key('NVIDIA RTX PRO 6000 Blackwell Server Edition')), "
                        "mig_card_slices(gpu_model_key('NVIDIA RTX PRO 5000 Blackwell'))").fetchall() == [(4, 7, 7, 4, 2)]


def test_a_profile_is_sized_by_its_card_where_a_source_names_it():
    from connectors.kubernetes import pod_gpus
    from connectors.slurm import mig_cards_in_tres
    from models.gpus import mig_card_share

    # 1g.24gb is 1/7 of an H100 NVL, 1/4 of an RTX PRO 6000 and 1/2 of an RTX PRO 5000: the card decides.
    assert mig_card_share("1g.24gb", "NVIDIA-H100-NVL") == pytest.approx(1 / 7)
    assert mig_card_share("1g.24gb", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition") == 1 / 4
    assert mig_card_share("2g.48gb", "NVIDIA RTX PRO 5000 Blackwell") == 1.0
    # Without a card: seven slices, unless only one card has the profile (an A30's, an RTX PRO 4500's,
    # an RTX PRO 6000's whole card); 2g.48gb is half one card and the whole of another: unsized.
    assert [mig_card_share(p) for p in ("1g.24gb", "2g.12gb", "1g.16gb-me", "2g.32gb", "4g.96gb", "2g.48gb+gfx")] == [
        pytest.approx(1 / 7), 2 / 4, 1 / 2, 1.0, 1.0, None]
    # A card no table names, or one without MIG (a name before the profile that reads as an L4 or
    # a P4), leaves the profile's own rule.
    assert mig_card_share("1g.24gb", "Acme Tensor 9000") == pytest.approx(1 / 7)
    assert [mig_card_share("p4_1g.6gb"), mig_card_share("l4_4g.96gb"), mig_card_share("2g.12gb", "NVIDIA L4")] == [1 / 4, 1.0, 2 / 4]
    # The name itself can say the card: a Slurm type, a single-strategy node's product label.
    assert mig_cards_in_tres("gres/gpu=2,gres/gpu:nvidia_rtx_pro_6000_blackwell_server_edition_1g.24gb=2") == 2 / 4
    assert mig_card_share("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition-MIG-1g.24gb") == 1 / 4
    assert mig_cards_in_tres("gres/gpu=1,gres/gpu:nvidia_a100_3g.40gb=1") == pytest.approx(3 / 7)
    limits = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.24gb": "1", "nvidia.com/gpu": "1"}}}]}}
    assert pod_gpus(limits, card="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition") == (2, 1.25)
    assert pod_gpus(limits) == (2, pytest.approx(1 + 1 / 7))


def test_an_rtx_pro_6000_splits_into_quarters_on_both_sides(tmp_path):
    # An RTX PRO 6000 billed 48.00 for the day, four 1g.24gb instances; pod sft-1 holds one (the node's
    # product label in the listing says which card) and keeps it 90 % busy, the other three idle.
    # A quarter each, on the telemetry side and the pod's: 12.00 to fine-tuning, 36.00 idle
    # (as sevenths, the pod was charged 6.86 and the idle instances were 3/7 of the card).
    card = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    telemetry = dcgm(*(mig_series(str(i), "1g.24gb", 90 if i == 1 else 0, model=card, pod="sft-1" if i == 1 else None)
                       for i in range(1, 5)))
    listing = with_node(pods(("sft-1", "fine-tuning", {"nvidia.com/mig-1g.24gb": "1"})),
                        {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.product": card.replace(" ", "-")})
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry, "pods.json": listing})
    try:
        assert fetch_all(conn, "SELECT DISTINCT gpu_model, gpu_share FROM core.gpu_minutes") == [("RTX-PRO-6000", 0.25)]
        assert fetch_all(conn, "SELECT workload_id, gpu_count, gpu_cards FROM core.workloads") == [("k8s:ml/sft-1", 1, 0.25)]
        split = fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution ORDER BY 1")
        assert [(phase, amount.quantize(CENT)) for phase, amount in split] == [("finetuning", Decimal("12.00")), ("idle", Decimal("36.00"))]
        assert busy_hours(conn) == [("k8s:ml/sft-1", pytest.approx(0.9 / 4 * 24, abs=1e-4))]
    finally:
        conn.close()


def test_a_day_added_later_gives_what_a_fresh_build_of_both_days_gives(tmp_path):
    # Day 1: two instances with profiles (3/7 busy, 4/7 idle); day 2, delivered later: the card
    # re-partitioned into three instances without profiles (1/3 each), in two files.
    def day(number: int, instances) -> str:
        return dcgm(*(mig_series(instance, profile, util, day=number) for instance, profile, util in instances))

    landing = tmp_path / "landing"
    landing.mkdir()
    # The same card billed for both days: 96.00 USD.
    (landing / "charges.csv").write_text(CHARGE.replace("48.00,48.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z",
                                                        "96.00,96.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-03T00:00:00Z"))
    (landing / "day1.json").write_text(day(1, [("1", "3g.40gb", 70), ("2", "4g.40gb", 0)]))
    warehouse, fresh = tmp_path / "wh.duckdb", tmp_path / "fresh.duckdb"
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    (landing / "day2a.json").write_text(day(2, [("1", None, 0), ("3", None, 50)]))
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    (landing / "day2b.json").write_text(day(2, [("2", None, 0)]))
    assert run_pipeline(landing, warehouse, reporting_currency="USD").success
    assert run_pipeline(landing, fresh, reporting_currency="USD").success
    tables = ["core.gpu_minutes", "marts.gpu_busy_by_workload_hour", "marts.gpu_busy_by_host_hour", "marts.gpu_spans_by_day",
              "marts.cost_attribution", "findings.unused_gpu"]
    built, rebuilt = connect(warehouse, read_only=True), connect(fresh, read_only=True)
    try:
        for table in tables:
            query = f"SELECT * FROM {table} ORDER BY ALL"
            assert fetch_all(built, query) == fetch_all(rebuilt, query), table
        assert fetch_all(rebuilt, "SELECT count(DISTINCT gpu_key), min(gpu_share), max(gpu_share) FROM core.gpu_minutes "
                                  "WHERE minute >= TIMESTAMPTZ '2026-09-02 00:00:00+00'") == [(3, pytest.approx(1 / 3), pytest.approx(1 / 3))]
        assert fetch_all(rebuilt, "SELECT sum(amount_billing) FROM marts.cost_attribution") == [(Decimal("96.0000000000"),)]
    finally:
        built.close()
        rebuilt.close()


def test_instances_without_a_profile_share_what_the_profiled_ones_leave_of_the_card(tmp_path):
    # A 4g.40gb with a profile and three instances without one, all idle: 4/7 and 1/7 each, one card
    # in all (1/4 each for the three made the card 1.32 cards, 63.43 USD of findings on 48.00).
    conn = build(tmp_path, [("0", "4g.40gb", 0), ("1", None, 0), ("2", None, 0), ("3", None, 0)])
    try:
        assert fetch_all(conn, "SELECT DISTINCT gpu_key, gpu_share FROM core.gpu_minutes ORDER BY 1") == [
            ("mig-1/GPU-m0/mig0", pytest.approx(4 / 7))] + [(f"mig-1/GPU-m0/mig{i}", pytest.approx(1 / 7)) for i in (1, 2, 3)]
        assert fetch_all(conn, "SELECT round(sum(wasted_cost), 2) FROM findings.unused_gpu") == [(Decimal("48.00"),)]
    finally:
        conn.close()


def test_a_card_split_again_at_noon_is_one_card_all_day(tmp_path):
    # No profiles: two instances until noon, three others after it, all idle. Each is shared with the
    # instances reporting in its minute (1/2, then 1/3), so the card is idle 24 hours: 48.00 (a day's
    # 1/5 each gave 12 card-hours, 24.00).
    morning, afternoon = range(0, 720), range(720, 1440)
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm-mig.json": dcgm(
        *(mig_series(str(i), None, 0, morning) for i in (1, 2)), *(mig_series(str(i), None, 0, afternoon) for i in (3, 4, 5)))})
    try:
        assert fetch_all(conn, "SELECT round(sum(coverage * gpu_share) / 60, 6) FROM core.gpu_minutes") == [(24.0,)]
        assert fetch_all(conn, "SELECT round(sum(wasted_cost), 2) FROM findings.unused_gpu") == [(Decimal("48.00"),)]
    finally:
        conn.close()


def test_a_slice_a_workload_holds_counts_as_one_gpu_of_the_workloads(tmp_path):
    # Host mix-1, two cards for 96.00: card 0 whole and busy with no job; card 1 in seven 1g slices,
    # job-j holding one of them (gpu_count 1, as a workload source counts a slice) at 90 %, six idle.
    # While a workload holds GPUs, busy GPUs are counted as workloads count them: card 0 is busy
    # beyond what job-j holds, unattributed, never idle; the six idle slices are 6/7 of a card.
    charges = CHARGE.replace("48.00,48.00", "96.00,96.00").replace("mig-1,mig-1,,1", "mix-1,mix-1,,2")
    telemetry = dcgm(mig_series(None, None, 100, host="mix-1", uuid="GPU-w0", gpu="0"),
                     mig_series("1", "1g.10gb", 90, host="mix-1", uuid="GPU-m1", gpu="1"),
                     *(mig_series(str(i), "1g.10gb", 0, host="mix-1", uuid="GPU-m1", gpu="1") for i in range(2, 8)))
    jobs = "workload_id,phase,host,gpu_count,started_at,ended_at\njob-j,finetuning,mix-1,1,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n"
    conn = build(tmp_path, files={"charges.csv": charges, "dcgm.json": telemetry, "jobs.csv": jobs})
    try:
        assert fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution ORDER BY 1") == [
            ("finetuning", Decimal("48.0000000000")), ("unattributed", Decimal("48.0000000000"))]
        assert fetch_all(conn, "SELECT round(sum(wasted_cost), 2), count(*) FROM findings.unused_gpu") == [(Decimal("41.14"), 6)]
    finally:
        conn.close()


def pods(*specs: tuple[str, str, dict]) -> str:
    """A `kubectl get pods -A -o json` listing: (name, phase label, GPU limits) per pod, each on mig-1
    for the whole of 1 September."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "Pod", "metadata": {"name": name, "namespace": "ml", "labels": {"ml-phase": phase}},
         "spec": {"nodeName": "mig-1", "containers": [{"name": "main", "resources": {"limits": limits}}]},
         "status": {"phase": "Succeeded", "startTime": "2026-09-01T00:00:00Z",
                    "containerStatuses": [{"state": {"terminated": {"finishedAt": "2026-09-02T00:00:00Z"}}}]}}
        for name, phase, limits in specs]})


def test_mig_resources_are_gpus_of_their_profile_share_of_a_card():
    from connectors.kubernetes import pod_gpus
    from connectors.slurm import mig_cards_in_tres
    from models.gpus import mig_card_share

    assert [mig_card_share(p) for p in ("3g.40gb", "1c.3g.40gb", "1g.10gb+me", "2g.12gb", "4g.24gb", "7g.141gb", "a100", None)] == [
        3 / 7, 1 / 7, 1 / 7, 2 / 4, 1.0, 1.0, None, None]  # 2g.12gb and 4g.24gb: an A30's, a card of 4 slices
    limits = lambda **l: {"spec": {"containers": [{"resources": {"limits": l}}]}}  # noqa: E731
    assert pod_gpus(limits(**{"nvidia.com/mig-1g.10gb": "2", "nvidia.com/gpu": "1"})) == (3, pytest.approx(1 + 2 / 7))
    assert pod_gpus(limits(**{"nvidia.com/gpu": "2"})) == (2, None)  # whole GPUs: no cards of its own
    assert pod_gpus({"spec": {"containers": [{"resources": {"requests": {"nvidia.com/mig-3g.40gb": 1}}}]}}) == (1, pytest.approx(3 / 7))
    # Compute instances of one 3g.40gb GPU instance: each its own slice of the card.
    assert pod_gpus(limits(**{"nvidia.com/mig-1c.3g.40gb": "2"})) == (2, pytest.approx(2 / 7))
    assert pod_gpus(limits(**{"nvidia.com/gpu": 1.0, "nvidia.com/mig-1g.10gb": "+1"})) == (2, pytest.approx(8 / 7))
    # A MIG resource this release cannot size: a GPU of unknown size (the pod unsized, read as whole cards), not a lost pod.
    unsized = []
    assert pod_gpus(limits(**{"nvidia.com/gpu": "1", "nvidia.com/mig-banana": "1"}), None, unsized) == (2, None)
    assert unsized == ["nvidia.com/mig-banana"]
    # Time-sliced resources are not read, as nvidia.com/gpu.shared is not.
    assert pod_gpus(limits(**{"nvidia.com/mig-1g.10gb.shared": "1"})) == (0, None)
    assert mig_cards_in_tres("cpu=8,gres/gpu=3,gres/gpu:nvidia_a100_3g.40gb=2") == pytest.approx(1 + 6 / 7)
    assert mig_cards_in_tres("gres/gpu=8,gres/gpu:a100=8") is None


def test_workload_sources_give_the_cards_of_mig_instances(tmp_path):
    from connectors.slurm import SlurmSacctConnector
    from connectors.workloads_csv import WorkloadsCsvConnector
    from models.schemas import WORKLOAD
    from tests.test_connector_workloads_storage import read_all

    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobID|JobName|Account|Partition|AllocTRES|Start|End|NodeList|State\n"
                     "7|sft|ml|mig|cpu=4,gres/gpu=2,gres/gpu:nvidia_a100_3g.40gb=2|2026-09-01T00:00:00|Unknown|mig-[1-2]|RUNNING\n"
                     "8|pt|ml|a100|cpu=64,gres/gpu=8|2026-09-01T00:00:00|Unknown|gpu01|RUNNING\n")
    rows, _ = read_all(SlurmSacctConnector(), sacct, WORKLOAD)
    assert [(r["host"], r["gpu_count"], r["gpu_cards"]) for r in rows] == [
        ("mig-1", 1, pytest.approx(3 / 7)), ("mig-2", 1, pytest.approx(3 / 7)), ("gpu01", 8, None)]
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("workload_id,phase,host,gpu_count,started_at,ended_at,mig_profile\n"
                    "a,inference,mig-1,2,2026-09-01T00:00:00Z,,2g.20gb\nb,inference,gpu01,1,2026-09-01T00:00:00Z,,\n"
                    "c,inference,mig-1,1,2026-09-01T00:00:00Z,,banana\nd,inference,gpu01,1,2026-09-01T00:00:00Z,, \n"
                    "e,inference,mig-1,1,2026-09-01T00:00:00Z,,1g.10gb;3g.40gb\nf,inference,gpu01,1,2026-09-01T00:00:00Z,,N/A\n"
                    "g,inference,rtx-1,1,2026-09-01T00:00:00Z,,2g.48gb\n")
    rows, ctx = read_all(WorkloadsCsvConnector(), jobs, WORKLOAD)
    # blank or N/A: whole GPUs; 2g.48gb, which only its card sizes: GPUs of unknown size (whole cards), not quarantined.
    assert [(r["workload_id"], r["gpu_count"], r["gpu_cards"]) for r in rows] == [
        ("a", 2, pytest.approx(4 / 7)), ("b", 1, None), ("d", 1, None), ("f", 1, None), ("g", 1, None)]
    assert [q["reason"] for q in ctx.quarantined] == ["mig_profile 'banana' is not a MIG profile such as 1g.10gb",
                                                      "mig_profile '1g.10gb;3g.40gb' is not a MIG profile such as 1g.10gb"]


def test_a_pod_on_a_mig_slice_is_charged_its_share_of_the_card(tmp_path):
    # One A100 for 48.00, seven 1g.10gb slices. sft-1 holds slice 1 (nvidia.com/mig-1g.10gb) and keeps
    # it 90 % busy; slices 2-7 are 80 % busy with nothing on record. Before, the pod held no GPU (the
    # MIG resource was not read) and the whole 48.00 was unattributed; counting the slice as one GPU
    # would have given sft-1 the whole card.
    telemetry = dcgm_mig([("1", "1g.10gb", 90)] + [(str(i), "1g.10gb", 80) for i in range(2, 8)])
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry,
                                  "pods.json": pods(("sft-1", "fine-tuning", {"nvidia.com/mig-1g.10gb": "1"}))})
    try:
        assert fetch_all(conn, "SELECT workload_id, gpu_count, gpu_cards FROM core.workloads") == [
            ("k8s:ml/sft-1", 1, pytest.approx(1 / 7))]
        assert fetch_all(conn, "SELECT phase, method, amount_billing, gpu_seconds FROM marts.cost_attribution ORDER BY 1") == [
            ("finetuning", "workload_overlap", Decimal("6.8572222222"), 12343),  # 1/7 of a day: 12,342.86 GPU-seconds, whole
            ("unattributed", "busy_telemetry", Decimal("41.1427777778"), 74057)]
        # The busy slices' hours: sft-1, the only workload on the host, holds one slice of seven; which
        # one is not recorded, so it is taken to hold the busiest (90 %: 3.09 hours, not the host's
        # 19.54, 570 % of what it held), as the charge's split takes the busy slices beyond it to be
        # no workload's; the other six slices' busy hours are unattributed.
        assert fetch_all(conn, "SELECT phase, round(sum(gpu_hours_held), 4), round(sum(gpu_hours_busy), 4) FROM marts.gpu_hours_profile "
                               "WHERE phase = 'finetuning' GROUP BY 1") == [("finetuning", pytest.approx(3.4286), pytest.approx(0.9 * 24 / 7, abs=1e-4))]
        assert busy_hours(conn) == [("k8s:ml/sft-1", pytest.approx(0.9 * 24 / 7, abs=1e-4)),
                                    ("unattributed", pytest.approx(0.8 * 6 / 7 * 24, abs=1e-4))]
    finally:
        conn.close()


def test_a_pod_on_a_slice_beside_idle_slices_leaves_them_idle(tmp_path):
    # The same card, sft-1 on slice 1 and pod serve-1 on a 3g.40gb, both busy; two 1g slices idle.
    # The pods hold 1/7 and 3/7 of the card: their parts of 48.00 are 6.86 and 20.57, the idle 2/7
    # (and the 1/7 no pod nor sample covers) 20.57.
    telemetry = dcgm_mig([("1", "1g.10gb", 90), ("2", "3g.40gb", 70), ("3", "1g.10gb", 0), ("4", "1g.10gb", 0)])
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry, "pods.json": pods(
        ("sft-1", "fine-tuning", {"nvidia.com/mig-1g.10gb": "1"}), ("serve-1", "inference", {"nvidia.com/mig-3g.40gb": "1"}))})
    try:
        split = fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution ORDER BY 1")
        assert [(phase, amount.quantize(CENT)) for phase, amount in split] == [
            ("finetuning", Decimal("6.86")), ("idle", Decimal("20.57")), ("inference", Decimal("20.57"))]
        assert sum(amount for _, amount in split) == Decimal("48.0000000000")
        # Busy GPU-minutes split between the pods by the cards they hold (1:3), not by their count (1:1).
        assert fetch_all(conn, "SELECT workload_id, round(sum(busy_gpu_minutes) / 60, 4) FROM marts.gpu_busy_by_workload_hour "
                               "WHERE workload_id IS NOT NULL GROUP BY 1 ORDER BY 1") == [
            ("k8s:ml/serve-1", pytest.approx((0.9 / 7 + 0.7 * 3 / 7) * 24 * 3 / 4, abs=1e-4)),
            ("k8s:ml/sft-1", pytest.approx((0.9 / 7 + 0.7 * 3 / 7) * 24 / 4, abs=1e-4))]
    finally:
        conn.close()


def busy_hours(conn) -> list[tuple]:
    """Busy GPU-hours per workload holding GPUs (workload_id NULL: the minutes no holder took, by phase)."""
    return fetch_all(conn, "SELECT coalesce(workload_id, phase), round(sum(busy_gpu_minutes) / 60, 4) FROM marts.gpu_busy_by_workload_hour "
                           "GROUP BY 1 HAVING sum(busy_gpu_minutes) > 0 OR count(workload_id) > 0 ORDER BY 1")


def phase_hours(conn, *phases: str) -> list[tuple]:
    """marts.spend_by_phase over the whole period for `phases`: GPU-hours paid, busy, utilization %."""
    return fetch_all(conn, "SELECT phase, round(gpu_hours_paid, 4), round(gpu_hours_busy, 4), round(utilization_pct, 1) "
                           "FROM marts.spend_by_phase WHERE period = 'all' AND list_contains(?, phase) ORDER BY 1", [list(phases)])


def test_busy_slices_count_for_the_pod_dcgm_names_on_them(tmp_path):
    # The card of the test above, with dcgm-exporter's pod labels: slice 1 is sft-1's, slice 2
    # serve-1's. Each pod's busy hours are its own slice's (sft-1 90 % of 1/7 of a card for 24 hours,
    # serve-1 70 % of 3/7), not the host's busy minutes split 1:3 by the cards they hold (sft-1 2.57,
    # serve-1 7.71 before). What each pod is charged does not change: that is the cards it holds.
    telemetry = dcgm(mig_series("1", "1g.10gb", 90, pod="sft-1"), mig_series("2", "3g.40gb", 70, pod="serve-1"),
                     mig_series("3", "1g.10gb", 0), mig_series("4", "1g.10gb", 0))
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry, "pods.json": pods(
        ("sft-1", "fine-tuning", {"nvidia.com/mig-1g.10gb": "1"}), ("serve-1", "inference", {"nvidia.com/mig-3g.40gb": "1"}))})
    try:
        assert busy_hours(conn) == [("k8s:ml/serve-1", pytest.approx(0.7 * 3 / 7 * 24, abs=1e-4)),
                                    ("k8s:ml/sft-1", pytest.approx(0.9 / 7 * 24, abs=1e-4))]
        phases = fetch_all(conn, "SELECT phase, round(gpu_hours_paid, 4), round(gpu_hours_busy, 4), round(utilization_pct, 1) "
                                 "FROM marts.spend_by_phase WHERE period = 'all' AND phase IN ('finetuning', 'inference') ORDER BY 1")
        assert phases == [("finetuning", pytest.approx(24 / 7, abs=1e-3), pytest.approx(0.9 / 7 * 24, abs=1e-3), 90.0),
                          ("inference", pytest.approx(72 / 7, abs=1e-3), pytest.approx(7.2, abs=1e-3), 70.0)]
        split = fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution ORDER BY 1")
        assert [(phase, amount.quantize(CENT)) for phase, amount in split] == [
            ("finetuning", Decimal("6.86")), ("idle", Decimal("20.57")), ("inference", Decimal("20.57"))]
    finally:
        conn.close()


WHOLE_GPUS = {"train-1": ("0", 90), "serve-1": ("1", 0)}  # pod -> (its GPU on mig-1, utilization %)


@pytest.mark.parametrize(("labels", "expected"), [
    # Both GPUs labelled: training 90 % busy, the inference pod idle (both 45 % split by GPUs held).
    ({"0": "train-1", "1": "serve-1"}, [("k8s:ml/serve-1", 0.0), ("k8s:ml/train-1", 21.6)]),
    # Only train-1's GPU labelled: serve-1 has the other GPU, not half of train-1's.
    ({"0": "train-1"}, [("k8s:ml/serve-1", 0.0), ("k8s:ml/train-1", 21.6)]),
    # GPU 0 labelled with a pod no record holds (a debugging shell), where serve-1's label shows the
    # labels match the records: GPU 0 ran the shell, not train-1 (it took GPU 0 before): unattributed.
    ({"0": "debug-shell", "1": "serve-1"}, [("k8s:ml/serve-1", 0.0), ("k8s:ml/train-1", 0.0), ("unattributed", 21.6)]),
    # No labels: split by the GPUs held, as before labels were read.
    ({}, [("k8s:ml/serve-1", 10.8), ("k8s:ml/train-1", 10.8)]),
    # A third GPU, 90 % busy, no pod holds nor labels: no holder has a card left for it.
    ({"0": "train-1", "1": "serve-1", "2": None}, [("k8s:ml/serve-1", 0.0), ("k8s:ml/train-1", 21.6), ("unattributed", 21.6)]),
])
def test_a_busy_and_an_idle_pod_on_one_node_are_each_their_own(tmp_path, labels, expected):
    # Two whole GPUs on mig-1 (96.00 USD for the day): train-1 keeps GPU 0 90 % busy, serve-1 leaves
    # GPU 1 idle; dcgm-exporter labels the GPUs `labels` names with their pods.
    charge = CHARGE.replace("48.00,48.00", "96.00,96.00").replace(",1\n", ",2\n")
    telemetry = dcgm(*(mig_series(None, None, 0 if gpu == "1" else 90, uuid=f"GPU-w{gpu}", gpu=gpu, pod=labels.get(gpu))
                       for gpu in sorted({"0", "1", *labels})))
    listing = pods(("train-1", "pre-training", {"nvidia.com/gpu": "1"}), ("serve-1", "inference", {"nvidia.com/gpu": "1"}))
    conn = build(tmp_path, files={"charges.csv": charge, "dcgm.json": telemetry, "pods.json": listing})
    try:
        assert busy_hours(conn) == [(name, pytest.approx(hours, abs=1e-4)) for name, hours in expected]
        if labels.get("1") == "serve-1":
            assert fetch_all(conn, "SELECT phase, round(utilization_pct, 1) FROM marts.spend_by_phase "
                                   "WHERE period = 'all' AND phase IN ('pretraining', 'inference') ORDER BY 1") == [
                ("inference", 0.0), ("pretraining", 0.0 if labels["0"] == "debug-shell" else 90.0)]
        # GPU-minutes are conserved: the host's busy hours, whatever split them.
        assert fetch_all(conn, "SELECT round(sum(busy_gpu_minutes) / 60, 4) FROM marts.gpu_busy_by_workload_hour") == \
            fetch_all(conn, "SELECT round(sum(busy_gpu_minutes) / 60, 4) FROM marts.gpu_busy_by_host_hour")
    finally:
        conn.close()


@pytest.mark.parametrize("label", [None, "debug-shell"])
def test_a_job_holding_one_of_two_busy_gpus_takes_no_more_than_its_card(tmp_path, label):
    # Two whole GPUs on mig-1, both 90 % busy all day (96.00 USD); the only record, train-1, holds one.
    # Its busy hours are its card's 21.6 (they were both GPUs' 43.2: 180 % of it); the other 21.6
    # ran on a GPU no record holds, as the charge's other half is unattributed.
    # `label`: dcgm-exporter names a pod no record holds on GPU 0 (labels naming no holder on the
    # host are as none: the same hours).
    charge = CHARGE.replace("48.00,48.00", "96.00,96.00").replace(",1\n", ",2\n")
    telemetry = dcgm(mig_series(None, None, 90, uuid="GPU-w0", gpu="0", pod=label), mig_series(None, None, 90, uuid="GPU-w1", gpu="1"))
    conn = build(tmp_path, files={"charges.csv": charge, "dcgm.json": telemetry,
                                  "pods.json": pods(("train-1", "pre-training", {"nvidia.com/gpu": "1"}))})
    try:
        assert busy_hours(conn) == [("k8s:ml/train-1", pytest.approx(21.6, abs=1e-4)), ("unattributed", pytest.approx(21.6, abs=1e-4))]
        assert phase_hours(conn, "pretraining", "unattributed") == [("pretraining", 24.0, 21.6, 90.0), ("unattributed", 24.0, 21.6, 90.0)]
        assert [(phase, method, amount.quantize(CENT)) for phase, method, amount in fetch_all(
            conn, "SELECT phase, method, amount_billing FROM marts.cost_attribution ORDER BY 1")] == [
            ("pretraining", "workload_overlap", Decimal("48.00")), ("unattributed", "busy_telemetry", Decimal("48.00"))]
        assert fetch_all(conn, "SELECT round(sum(busy_gpu_minutes) / 60, 4) FROM marts.gpu_busy_by_workload_hour") == \
            fetch_all(conn, "SELECT round(sum(busy_gpu_minutes) / 60, 4) FROM marts.gpu_busy_by_host_hour")
    finally:
        conn.close()


@pytest.mark.parametrize("gpu0_pod", [None, "debug-shell"])
def test_a_gpu_labelled_with_a_pod_no_record_holds_is_that_pods(tmp_path, gpu0_pod):
    # Three GPUs on mig-1 (144.00 USD for the day): GPU 0 100 % busy, GPU 1 60 %, GPU 2 idle and
    # labelled serve-1; the listing holds train-1 and serve-1 on a GPU each. Without a label on GPU 0,
    # train-1 is taken to hold the busier of GPUs 0 and 1 (24 busy hours). Where dcgm-exporter names
    # debug-shell on GPU 0, a pod the listing does not hold (it had ended when the listing was taken)
    # and serve-1's label shows that labels match the records here, GPU 0 ran debug-shell: train-1
    # holds GPU 1 (14.4 busy hours, 60 %) and GPU 0's 24 hours are no record's. It took GPU 0 before.
    charge = CHARGE.replace("48.00,48.00", "144.00,144.00").replace(",1\n", ",3\n")
    telemetry = dcgm(mig_series(None, None, 100, uuid="GPU-w0", gpu="0", pod=gpu0_pod), mig_series(None, None, 60, uuid="GPU-w1", gpu="1"),
                     mig_series(None, None, 0, uuid="GPU-w2", gpu="2", pod="serve-1"))
    conn = build(tmp_path, files={"charges.csv": charge, "dcgm.json": telemetry, "pods.json": pods(
        ("train-1", "pre-training", {"nvidia.com/gpu": "1"}), ("serve-1", "inference", {"nvidia.com/gpu": "1"}))})
    try:
        held, other = (24.0, 14.4) if gpu0_pod is None else (14.4, 24.0)
        assert busy_hours(conn) == [("k8s:ml/serve-1", 0.0), ("k8s:ml/train-1", pytest.approx(held, abs=1e-4)),
                                    ("unattributed", pytest.approx(other, abs=1e-4))]
        assert phase_hours(conn, "inference", "pretraining") == [("inference", 24.0, 0.0, 0.0), ("pretraining", 24.0, held, held / 24 * 100)]
    finally:
        conn.close()


def test_a_gpu_seen_half_of_each_minute_takes_half_a_card_of_the_holders(tmp_path):
    # Two GPUs on mig-1 (96.00 USD for the day); train-1 holds one. GPU 0 is 100 % busy but sampled
    # at :00, :10 and :20 of each minute only (every 10 s, then 40 s missing: half of each minute
    # covered); GPU 1 is 90 % busy, covered whole. The busiest GPU takes half of train-1's card, the
    # other half is GPU 1's: train-1 0.5 + 0.45 of a busy GPU a minute (95 %), and GPU 1's other half
    # unattributed (10.8 hours, 90 % of the 12 the charge pays for busy GPUs beyond the card held).
    charge = CHARGE.replace("48.00,48.00", "96.00,96.00").replace(",1\n", ",2\n")
    sparse = mig_series(None, None, 100, uuid="GPU-w0", gpu="0")
    sparse["values"] = [[DAY_START + 60 * m + s, "100"] for m in range(24 * 60) for s in (0, 10, 20)]
    telemetry = dcgm(sparse, mig_series(None, None, 90, uuid="GPU-w1", gpu="1"))
    conn = build(tmp_path, files={"charges.csv": charge, "dcgm.json": telemetry,
                                  "pods.json": pods(("train-1", "pre-training", {"nvidia.com/gpu": "1"}))})
    try:
        assert busy_hours(conn) == [("k8s:ml/train-1", pytest.approx(22.8, abs=1e-4)), ("unattributed", pytest.approx(10.8, abs=1e-4))]
        assert phase_hours(conn, "pretraining", "unattributed") == [("pretraining", 24.0, 22.8, 95.0), ("unattributed", 12.0, 10.8, 90.0)]
    finally:
        conn.close()


def test_beside_a_labelled_pod_an_unlabelled_holder_takes_the_busiest_gpu_left(tmp_path):
    # Four GPUs on mig-1 (192.00 USD for the day). dcgm-exporter names train-1 on GPU 0 (90 %);
    # serve-1 holds one GPU no label names: of GPUs 1-3 (2 %, 100 %, 70 %) it is taken to hold the
    # busiest, as the charge's split counts busy GPUs beyond those held as no workload's. serve-1 24
    # busy hours; GPU 3's 16.8 unattributed (70 % of the 24 GPU-hours paid for it: it was 27.2, 113 %,
    # when serve-1 took a third of each), GPU 1's 0.48 idle.
    charge = CHARGE.replace("48.00,48.00", "192.00,192.00").replace(",1\n", ",4\n")
    telemetry = dcgm(*(mig_series(None, None, util, uuid=f"GPU-w{gpu}", gpu=str(gpu), pod="train-1" if gpu == 0 else None)
                       for gpu, util in enumerate((90, 2, 100, 70))))
    listing = pods(("train-1", "pre-training", {"nvidia.com/gpu": "1"}), ("serve-1", "inference", {"nvidia.com/gpu": "1"}))
    conn = build(tmp_path, files={"charges.csv": charge, "dcgm.json": telemetry, "pods.json": listing})
    try:
        assert busy_hours(conn) == [("idle", pytest.approx(0.48, abs=1e-4)), ("k8s:ml/serve-1", pytest.approx(24.0, abs=1e-4)),
                                    ("k8s:ml/train-1", pytest.approx(21.6, abs=1e-4)), ("unattributed", pytest.approx(16.8, abs=1e-4))]
        assert phase_hours(conn, "inference", "unattributed") == [("inference", 24.0, 24.0, 100.0), ("unattributed", 24.0, 16.8, 70.0)]
    finally:
        conn.close()


def test_a_job_on_a_node_of_eight_gpus_holds_the_busiest_and_the_rest_is_no_ones(tmp_path):
    # Eight GPUs on mig-1 (384.00 USD for the day), GPUs 0-2 100 % busy, 3-7 at 4 % (under the 5 %
    # idle threshold); train-1 holds one GPU, which is not recorded. It is taken to hold a busiest
    # one, as the charge's split counts the two other busy GPUs as no workload's: train-1 24 busy
    # hours, unattributed 48 (100 % of the 48 GPU-hours its part of the charge pays), idle 4.8.
    charge = CHARGE.replace("48.00,48.00", "384.00,384.00").replace(",1\n", ",8\n")
    telemetry = dcgm(*(mig_series(None, None, 100 if gpu < 3 else 4, uuid=f"GPU-w{gpu}", gpu=str(gpu)) for gpu in range(8)))
    conn = build(tmp_path, files={"charges.csv": charge, "dcgm.json": telemetry,
                                  "pods.json": pods(("train-1", "pre-training", {"nvidia.com/gpu": "1"}))})
    try:
        assert busy_hours(conn) == [("idle", pytest.approx(4.8, abs=1e-4)), ("k8s:ml/train-1", pytest.approx(24.0, abs=1e-4)),
                                    ("unattributed", pytest.approx(48.0, abs=1e-4))]
        assert phase_hours(conn, "idle", "pretraining", "unattributed") == [
            ("idle", 120.0, 4.8, 4.0), ("pretraining", 24.0, 24.0, 100.0), ("unattributed", 48.0, 48.0, 100.0)]
        assert [(phase, method, amount.quantize(CENT)) for phase, method, amount in fetch_all(
            conn, "SELECT phase, method, amount_billing FROM marts.cost_attribution ORDER BY 1")] == [
            ("idle", "no_workload", Decimal("240.00")), ("pretraining", "workload_overlap", Decimal("48.00")),
            ("unattributed", "busy_telemetry", Decimal("96.00"))]
    finally:
        conn.close()


def test_a_pod_handing_its_gpu_over_mid_minute_keeps_its_part_of_that_minute(tmp_path):
    # GPU 0 on mig-1 90 % busy all day, sampled every 10 s: train-1's (record A, until 10:00:30; its
    # label on the samples up to 10:00:20), then serve-1's (record B, from 10:00:30). Minute 10:00
    # is labelled serve-1 (its last sample): B takes its half, and A, not named in that minute,
    # holds the other half (it went to unattributed: 0.45 GPU-minutes a hand-over).
    first = mig_series(None, None, 90, uuid="GPU-w0", pod="train-1")
    first["values"] = [[DAY_START + t, "90"] for t in range(0, 10 * 3600 + 30, 10)]
    second = mig_series(None, None, 90, uuid="GPU-w0", pod="serve-1")
    second["values"] = [[DAY_START + t, "90"] for t in range(10 * 3600 + 30, 86400, 10)]
    jobs = ("workload_id,name,namespace,phase,host,gpu_count,started_at,ended_at\n"
            "A,train-1,ml,pre-training,mig-1,1,2026-09-01T00:00:00Z,2026-09-01T10:00:30Z\n"
            "B,serve-1,ml,inference,mig-1,1,2026-09-01T10:00:30Z,2026-09-02T00:00:00Z\n")
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": dcgm(first, second), "workloads.csv": jobs})
    try:
        assert busy_hours(conn) == [("A", pytest.approx(9.0075, abs=1e-4)), ("B", pytest.approx(12.5925, abs=1e-4))]
        assert fetch_all(conn, "SELECT workload_id, busy_gpu_minutes FROM marts.gpu_busy_by_workload_hour "
                               "WHERE hour = TIMESTAMPTZ '2026-09-01 10:00:00+00' ORDER BY 1") == [("A", 0.45), ("B", 53.55)]
        # B's 12.5925 busy hours are an exact half at the third decimal: 12.593, rounded from the exact
        # sum on every engine (a rounded DOUBLE gave 12.592 on DuckDB and 12.593 on Spark).
        assert phase_hours(conn, "inference", "pretraining") == [("inference", 13.992, 12.593, 90.0), ("pretraining", 10.008, 9.008, 90.0)]
    finally:
        conn.close()


def test_a_gpu_passing_between_pods_in_a_minute_keeps_each_pods_own_namespace(tmp_path):
    # GPU 0 on mig-1, each minute: train-1 (its series without a namespace label) for the first 30 s,
    # serve-1 in namespace prod for the last 30 s. A minute names the pod its last sample names, with
    # that sample's namespace; the pod and the namespace were taken apart (train-1 in prod all day, a
    # pod no listing holds), each from any sample (which one could differ between builds and engines).
    first = mig_series(None, None, 90, uuid="GPU-w0", pod="train-1")
    del first["metric"]["namespace"]
    first["values"] = [[DAY_START + 60 * m + s, "90"] for m in range(24 * 60) for s in (0, 10, 20)]
    second = mig_series(None, None, 10, uuid="GPU-w0", pod="serve-1")
    second["metric"]["namespace"] = "prod"
    second["values"] = [[DAY_START + 60 * m + s, "10"] for m in range(24 * 60) for s in (30, 40, 50)]
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": dcgm(first, second)})
    try:
        assert fetch_all(conn, "SELECT DISTINCT pod, namespace FROM core.gpu_minutes") == [("serve-1", "prod")]
        assert fetch_all(conn, "SELECT count(*), round(sum(busy_fraction * coverage) / 60, 4) FROM core.gpu_minutes") == [(1440, 12.0)]
    finally:
        conn.close()


def test_two_files_naming_other_pods_at_one_instant_merge_a_pod_with_its_own_namespace(tmp_path):
    # GPU 0 on mig-1 logged at the same instants by two files: a.json names train-1 without a
    # namespace label, b.json serve-1 in prod. The merged sample takes the first file by path, a.json,
    # for the pod, and its namespace with it (none): not train-1 in prod, a pod no listing holds.
    first = mig_series(None, None, 90, uuid="GPU-w0", pod="train-1")
    del first["metric"]["namespace"], first["metric"]["container"]
    second = mig_series(None, None, 90, uuid="GPU-w0", pod="serve-1")
    second["metric"]["namespace"] = "prod"
    conn = build(tmp_path, files={"charges.csv": CHARGE, "a.json": dcgm(first), "b.json": dcgm(second)})
    try:
        assert fetch_all(conn, "SELECT pod, namespace, container, count(*) FROM core.gpu_samples GROUP BY ALL") == [
            ("train-1", None, None, 1440)]
        assert fetch_all(conn, "SELECT DISTINCT pod, namespace FROM core.gpu_minutes") == [("train-1", None)]
    finally:
        conn.close()


@pytest.mark.parametrize("label", [None, "debug-shell"])
def test_a_job_of_thirty_seconds_holds_half_a_minute(tmp_path, label):
    # One GPU on mig-1, 90 % busy all day (48.00 USD); 24 probes of 30 s, each from :00:30 to :01:00 of
    # an hour. Each holds the card half a minute, as the charge pays its 30 s: 0.45 busy GPU-minutes
    # (none before: no whole minute started after it), inference 90 % busy, and the other half of
    # those minutes busy with nothing on record: unattributed, not idle (0.40 USD idle before, on a
    # card busy all day). `label`: a pod no record holds named on the GPU (the labelled split).
    # A job that ended as it started (12:30:10) holds nothing.
    jobs = "workload_id,name,phase,host,gpu_count,started_at,ended_at\n" + "".join(
        f"p{h:02d},probe-{h:02d},inference,mig-1,1,2026-09-01T{h:02d}:00:30Z,2026-09-01T{h:02d}:01:00Z\n" for h in range(24)) + (
        "z0,zero,inference,mig-1,1,2026-09-01T12:30:10Z,2026-09-01T12:30:10Z\n")
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": dcgm(mig_series(None, None, 90, uuid="GPU-w0", pod=label)),
                                  "workloads.csv": jobs})
    try:
        assert busy_hours(conn) == [(f"p{h:02d}", pytest.approx(0.0075, abs=1e-6)) for h in range(24)] + [
            ("unattributed", pytest.approx(21.42, abs=1e-4))]
        assert phase_hours(conn, "inference", "unattributed") == [("inference", 0.2, 0.18, 90.0), ("unattributed", 23.8, 21.42, 90.0)]
        assert fetch_all(conn, "SELECT phase, method, amount_billing, gpu_seconds FROM marts.cost_attribution ORDER BY 1") == [
            ("inference", "workload_overlap", Decimal("0.4000000000"), 720),
            ("unattributed", "busy_telemetry", Decimal("47.6000000000"), 85680)]
    finally:
        conn.close()


@pytest.mark.parametrize(("limits", "reason"), [
    ({"nvidia.com/mig-1g.10gb": "0.5"}, "nvidia.com/mig-1g.10gb limit or request '0.5' is not a whole number ≥ 0"),
    ({"nvidia.com/mig-1g.10gb": 1.5}, "nvidia.com/mig-1g.10gb limit or request 1.5 is not a whole number ≥ 0"),  # not truncated to 1
    ({"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "-1"}, "nvidia.com/mig-1g.10gb limit or request '-1' is not a whole number ≥ 0"),
    ("nvidia.com/gpu=1", "item is not a pod object of the usual shape: resources.limits or resources.requests is not an object"),
])
def test_a_pod_whose_gpus_cannot_be_counted_is_quarantined_with_the_reason(tmp_path, limits, reason):
    from connectors.kubernetes import KubernetesPodsConnector
    from models.schemas import WORKLOAD
    from tests.test_connector_workloads_storage import read_all

    listing = tmp_path / "pods.json"
    listing.write_text(pods(("bad", "inference", limits), ("good", "inference", {"nvidia.com/mig-2g.20gb": "1"})))
    rows, ctx = read_all(KubernetesPodsConnector(), listing, WORKLOAD)
    assert [(r["name"], r["gpu_count"], r["gpu_cards"]) for r in rows] == [("good", 1, pytest.approx(2 / 7))]
    assert [q["reason"] for q in ctx.quarantined] == [reason]


def test_busy_slices_beside_a_pod_that_names_its_profile_count_as_slices(tmp_path):
    # Host mix-1, two cards for 96.00: card 0 whole and idle; card 1 in seven 1g slices: sft-1 holds
    # slice 1 (nvidia.com/mig-1g.10gb) at 90 %, slices 2-3 are 80 % busy with nothing on record,
    # 4-7 idle. The busy part nobody held is two slices, 2/7 of a card: counting busy instances as
    # whole GPUs (as for a job that names no profile) made it a whole card, 48.00, out of the idle part.
    charges = CHARGE.replace("48.00,48.00", "96.00,96.00").replace("mig-1,mig-1,,1", "mix-1,mix-1,,2")
    telemetry = dcgm(mig_series(None, None, 0, host="mix-1", uuid="GPU-w0", gpu="0"),
                     *(mig_series(str(i), "1g.10gb", {1: 90, 2: 80, 3: 80}.get(i, 0), host="mix-1", uuid="GPU-m1", gpu="1")
                       for i in range(1, 8)))
    listing = pods(("sft-1", "fine-tuning", {"nvidia.com/mig-1g.10gb": "1"})).replace('"mig-1"', '"mix-1"')
    conn = build(tmp_path, files={"charges.csv": charges, "dcgm.json": telemetry, "pods.json": listing})
    try:
        split = fetch_all(conn, "SELECT phase, method, amount_billing, gpu_seconds FROM marts.cost_attribution ORDER BY 1")
        assert [(phase, method, amount.quantize(CENT), seconds) for phase, method, amount, seconds in split] == [
            ("finetuning", "workload_overlap", Decimal("6.86"), 12343), ("idle", "no_workload", Decimal("75.43"), 135771),
            ("unattributed", "busy_telemetry", Decimal("13.71"), 24686)]
        assert sum(amount for _, _, amount, _ in split) == Decimal("96.0000000000")
    finally:
        conn.close()


def test_a_checkpoint_stall_of_a_pod_on_a_slice_costs_its_share_of_the_card(tmp_path):
    # sft-1 holds one 1g.10gb slice of the 48.00 USD card (2.00 USD a GPU-hour) and its slice sits idle
    # for the 10 minutes its checkpoint (200 GB) crawls to a network disk. Its GPUs waited 1/7 of a
    # card for 10 minutes: 0.0238 GPU-hours, 0.05 USD, not the whole card's 0.33.
    telemetry = dcgm(mig_series("1", "1g.10gb", 90, minutes=[m for m in range(24 * 60) if not 600 <= m < 610]),
                     mig_series("1", "1g.10gb", 0, minutes=range(600, 610)))
    checkpoint = json.dumps({"job": "k8s:ml/sft-1", "host": "mig-1", "started_at": "2026-09-01T10:00:00Z",
                             "ended_at": "2026-09-01T10:10:00Z", "bytes": 200_000_000_000, "storage_class": "network_disk"})
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry, "checkpoints.jsonl": checkpoint + "\n",
                                  "pods.json": pods(("sft-1", "fine-tuning", {"nvidia.com/mig-1g.10gb": "1"}))})
    try:
        rows = fetch_all(conn, """SELECT evidence->>'gpus', evidence->>'gpu_cards', evidence->>'idle_share',
                                         evidence->>'wasted_gpu_hours', wasted_cost FROM findings.slow_disk_idle""")
        assert [(gpus, cards, share, hours, cost.quantize(CENT)) for gpus, cards, share, hours, cost in rows] == [
            ("1", "0.1429", "1.0", "0.0238", Decimal("0.05"))]
    finally:
        conn.close()


def test_a_checkpoint_on_a_sliced_card_no_workload_file_names_is_its_busy_slices_share(tmp_path):
    # No pod listing: slice 0 is busy from 09:55 to 10:00, the six others idle all day, and a
    # checkpoint runs from 10:00 to 12:00. The job held slice 0 (busy just before the write): 1/7 of
    # the card for 2 hours, 0.57, and the idle runs keep the rest, so the leaks stay within the
    # 48.00 paid for the card (the stall was 7 cards' 28.00; then slice 0's idle run kept its 2 hours too).
    busy_slice = mig_series("0", "1g.10gb", 0)
    busy_slice["values"] = [[t, "90" if 595 <= minute < 600 else "0"] for minute, (t, _) in enumerate(busy_slice["values"])]
    checkpoint = json.dumps({"job": "job-x", "host": "mig-1", "started_at": "2026-09-01T10:00:00Z",
                             "ended_at": "2026-09-01T12:00:00Z", "bytes": 100_000_000_000, "storage_class": "nfs"})
    conn = build(tmp_path, files={"charges.csv": CHARGE, "checkpoints.jsonl": checkpoint + "\n",
                                  "dcgm-mig.json": dcgm(busy_slice, *(mig_series(str(i), "1g.10gb", 0) for i in range(1, 7)))})
    try:
        [(gpus, cards, cost)] = fetch_all(conn, "SELECT evidence->>'gpus', evidence->>'gpu_cards', wasted_cost FROM findings.slow_disk_idle")
        assert (gpus, cards, cost.quantize(CENT)) == ("1", "0.1429", Decimal("0.57"))
        [(leaks,)] = fetch_all(conn, "SELECT sum(wasted_cost) FROM findings.hidden_costs WHERE kind IN ('slow_disk_idle', 'unused_gpu')")
        assert Decimal("47.90") < leaks <= Decimal("48.00")
    finally:
        conn.close()


def with_node(listing: str, labels: dict) -> str:
    """The listing as `kubectl get pods,nodes -A -o json` gives it: node mig-1 with `labels` after the pods."""
    document = json.loads(listing)
    document["items"].append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "mig-1", "labels": labels}})
    return json.dumps(document)


def test_a_single_strategy_node_in_the_listing_sizes_its_pods_gpus(tmp_path):
    # Under MIG's single strategy the device plugin advertises each 1g.10gb slice as nvidia.com/gpu;
    # the node's GPU feature discovery labels say so. sft-1 asks for one nvidia.com/gpu, busy at 90 %;
    # the other six slices are idle. Sized from its node, it holds 1/7 of the 48.00 card; from the pod
    # alone it is a whole GPU (48.00, the case the README names), and the node is not quarantined.
    single = {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
              "nvidia.com/gpu.count": "7"}
    telemetry = dcgm_mig([("1", "1g.10gb", 90)] + [(str(i), "1g.10gb", 0) for i in range(2, 8)])
    listing = with_node(pods(("sft-1", "fine-tuning", {"nvidia.com/gpu": "1"})), single)
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry, "pods.json": listing})
    try:
        assert fetch_all(conn, "SELECT workload_id, gpu_count, gpu_cards FROM core.workloads") == [("k8s:ml/sft-1", 1, pytest.approx(1 / 7))]
        split = fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution ORDER BY 1")
        assert [(phase, amount.quantize(CENT)) for phase, amount in split] == [("finetuning", Decimal("6.86")), ("idle", Decimal("41.14"))]
        assert fetch_all(conn, "SELECT count(*) FROM raw.quarantine") == [(0,)]
    finally:
        conn.close()
    # A node under the mixed strategy (or without the labels): nvidia.com/gpu is a whole GPU.
    mixed = with_node(pods(("sft-1", "fine-tuning", {"nvidia.com/gpu": "1"})), {**single, "nvidia.com/mig.strategy": "mixed"})
    from connectors.kubernetes import KubernetesPodsConnector
    from models.schemas import WORKLOAD
    from tests.test_connector_workloads_storage import read_all

    (tmp_path / "mixed.json").write_text(mixed)
    rows, ctx = read_all(KubernetesPodsConnector(), tmp_path / "mixed.json", WORKLOAD)
    assert [(r["gpu_count"], r["gpu_cards"]) for r in rows] == [(1, None)] and not ctx.quarantined


def test_a_listing_with_the_nodes_sizes_a_pod_whichever_was_landed_first(tmp_path):
    # Under the single strategy a pods-only listing cannot size sft-1's nvidia.com/gpu (a whole card)
    # and a pods,nodes listing can (its node says 1g.10gb: 1/7). Landed one run after the other, in
    # either order, or both at once, the pod holds 1/7 of the card: among copies that end alike,
    # the one that sizes it wins (the later load won before: the order of landing decided).
    listing = pods(("sft-1", "fine-tuning", {"nvidia.com/gpu": "1"}))
    files = {"a-pods-nodes.json": with_node(listing, {"nvidia.com/mig.strategy": "single",
                                                      "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}),
             "b-pods.json": listing}
    telemetry = dcgm_mig([("1", "1g.10gb", 90)] + [(str(i), "1g.10gb", 0) for i in range(2, 8)])
    # Each run lands the files of one batch: one after the other, in both orders, or both at once.
    for order in ([["a-pods-nodes.json"], ["b-pods.json"]], [["b-pods.json"], ["a-pods-nodes.json"]], [list(files)]):
        folder = tmp_path / "-then-".join("+".join(batch) for batch in order)
        landing = folder / "landing"
        landing.mkdir(parents=True)
        (landing / "charges.csv").write_text(CHARGE)
        (landing / "dcgm.json").write_text(telemetry)
        for batch in order:
            for name in batch:
                (landing / name).write_text(files[name])
            outcome = run_pipeline(landing, folder / "wh.duckdb", reporting_currency="USD")
            assert outcome.success and not outcome.failed_checks, outcome.failed_checks
        conn = connect(folder / "wh.duckdb", read_only=True)
        try:
            assert fetch_all(conn, "SELECT workload_id, gpu_cards, x_SourceFile FROM core.workloads") == [
                ("k8s:ml/sft-1", pytest.approx(1 / 7), "a-pods-nodes.json")], order
            split = fetch_all(conn, "SELECT phase, amount_billing FROM marts.cost_attribution ORDER BY 1")
            assert [(phase, amount.quantize(CENT)) for phase, amount in split] == [
                ("finetuning", Decimal("6.86")), ("idle", Decimal("41.14"))], order
        finally:
            conn.close()


def test_a_pod_takes_no_more_of_its_named_slice_than_the_cards_it_holds(tmp_path):
    # An RTX PRO 6000 pod listed without its node: its 1g.24gb is read as 1/7 of a card, while the
    # telemetry knows the card and sizes the slice 1/4. Named on that slice at 90 %, the pod takes
    # 90 % of its 1/7 (utilization 90 %, not 157.5 %); the rest of the slice's busy time is no one's.
    card = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    telemetry = dcgm(*(mig_series(str(i), "1g.24gb", 90 if i == 1 else 0, model=card, pod="sft-1" if i == 1 else None)
                       for i in range(1, 5)))
    conn = build(tmp_path, files={"charges.csv": CHARGE, "dcgm.json": telemetry,
                                  "pods.json": pods(("sft-1", "fine-tuning", {"nvidia.com/mig-1g.24gb": "1"}))})
    try:
        assert busy_hours(conn) == [("k8s:ml/sft-1", pytest.approx(0.9 / 7 * 24, abs=1e-4)),
                                    ("unattributed", pytest.approx(0.9 * (1 / 4 - 1 / 7) * 24, abs=1e-4))]
        assert fetch_all(conn, "SELECT round(utilization_pct, 1) FROM marts.spend_by_phase WHERE period = 'all' AND phase = 'finetuning'") == [
            (90.0,)]
        assert fetch_all(conn, "SELECT round(sum(busy_gpu_minutes), 6) FROM marts.gpu_busy_by_workload_hour") == \
            fetch_all(conn, "SELECT round(sum(busy_gpu_minutes), 6) FROM marts.gpu_busy_by_host_hour")
    finally:
        conn.close()
