"""GPUs waiting on checkpoint writes, as real fleets log them: a job on two nodes, each node (or
each rank) logging its own shard's write, and a write node_exporter sees on a volume and on the
disk under it. Each stall counts the job's GPUs once."""

import json
from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,CommitmentDiscountId,"
          "CommitmentDiscountStatus,Tags,x_GpuModel,x_GpuCount\n")
HOURS = "2026-09-07T00:00:00Z,2026-09-07T02:00:00Z"
SACCT = ("JobID|JobName|Account|Partition|AllocTRES|Start|End|NodeList|State\n"
         "5001|pretrain-70b|research|h100|billing=256,cpu=256,gres/gpu=16,node=2|2026-09-07T00:00:00|2026-09-07T02:00:00|"
         "gpu[01-02]|COMPLETED\n")
SMI = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"


def telemetry(host: str, idle_minutes: range) -> str:
    """8 GPUs every minute from 00:00 to 02:00: at 0 % through `idle_minutes`, 85 % otherwise."""
    lines = [SMI]
    for minute in range(120):
        busy = 0 if minute in idle_minutes else 85
        lines += [f"2026/09/07 {minute // 60:02d}:{minute % 60:02d}:00.000, {g}, GPU-{host}-{g}, NVIDIA A100-SXM4-80GB, "
                  f"{busy} %, 100 MiB, 80.00 W" for g in range(8)]
    return "\n".join(lines) + "\n"


def checkpoint_events(per: str) -> str:
    """One synchronous checkpoint, 01:00-01:20: each node writes its 100 GB shard to NFS, logged once
    a node, or once a rank (eight 12.5 GB parts, 0.1 s apart)."""
    events = []
    for host in ("gpu01", "gpu02"):
        if per == "node":
            events.append({"job": "5001", "host": host, "started_at": "2026-09-07T01:00:00Z", "ended_at": "2026-09-07T01:20:00Z",
                           "bytes": 100_000_000_000, "path": f"/mnt/nfs/ckpt/{host}", "storage_class": "nfs"})
        else:
            events += [{"job": "5001", "host": host, "started_at": f"2026-09-07T01:00:00.{rank}00Z",
                        "ended_at": "2026-09-07T01:20:00Z", "bytes": 12_500_000_000, "path": f"/mnt/nfs/ckpt/{host}/rank{rank}",
                        "storage_class": "nfs"} for rank in range(8)]
    return "".join(json.dumps(e) + "\n" for e in events)


@pytest.mark.parametrize("per", ["node", "rank"])
def test_a_two_node_jobs_checkpoint_counts_each_nodes_gpus_once(tmp_path, per):
    """16 GPUs × 20 minutes at 2.00 USD a GPU-hour: 10.67 wasted; 100 GB a node at 3 GB/s is 33.3 s
    of the 1,200, so 10.37 avoidable. Before: the nodes' events shared an id and one node's stall
    vanished (5.33); logged per rank, each rank's event counted its node's 8 GPUs (42.67)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(HEADER + "".join(
        f"32.00,32.00,USD,Usage,{HOURS},GpuCloud,GPU,Compute,ins-{h},{h},16,GPU-Hours,,,,A100 80G,8\n" for h in ("gpu01", "gpu02")))
    (landing / "sacct.txt").write_text(SACCT)
    for host in ("gpu01", "gpu02"):
        (landing / f"{host}.csv").write_text(telemetry(host, range(60, 80)))
    (landing / "checkpoints.jsonl").write_text(checkpoint_events(per))
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        rows = fetch_all(conn, """SELECT host, round(sum(wasted_cost), 2), round(sum(avoidable_cost), 2), count(*)
                                  FROM findings.slow_disk_idle GROUP BY host ORDER BY host""")
    finally:
        conn.close()
    assert rows == [("gpu01", Decimal("5.33"), Decimal("5.19"), 1), ("gpu02", Decimal("5.33"), Decimal("5.19"), 1)]


T0 = 1788220800  # 2026-09-01 00:00 UTC


@pytest.mark.parametrize("devices", [["sda"], ["dm-0", "nvme0n1"]], ids=["one disk", "a volume over its disk"])
def test_a_write_seen_on_a_volume_and_its_disk_is_one_stall(tmp_path, devices):
    """node_exporter counts an LVM volume's writes on dm-0 and on the NVMe disk under it: 4 minutes
    of 500 MB/s while 4 GPUs sit at 1 % are one stall of 16 GPU-minutes, not one per device."""
    landing = tmp_path / "landing"
    landing.mkdir()
    smi = [SMI] + [f"2026/09/01 10:0{m}:00.000, {g}, GPU-s{g}, NVIDIA A100-SXM4-80GB, 1 %, 1 MiB, 80.00 W"
                   for m in range(4) for g in range(4)]
    (landing / "gpu-s.csv").write_text("\n".join(smi) + "\n")
    (landing / "jobs.csv").write_text("workload_id,phase,host,gpu_count,started_at,ended_at\n"
                                      "job-s,pretraining,gpu-s,4,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n")
    written, values = 0, []
    for minute in range(599, 606):
        written += 30_000_000_000 if 600 <= minute < 604 else 0  # 30 GB a minute = 500 MB/s
        values.append([T0 + (minute + 1) * 60, str(written)])
    (landing / "node_exporter.json").write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "node_disk_written_bytes_total", "instance": "gpu-s:9100", "device": d}, "values": values}
        for d in devices]}}))
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        rows = fetch_all(conn, """SELECT count(*), sum(CAST(evidence->>'wasted_gpu_hours' AS DOUBLE)),
                                         any_value(CAST(evidence->>'bytes' AS BIGINT)) FROM findings.slow_disk_idle""")
    finally:
        conn.close()
    assert rows == [(1, pytest.approx(16 / 60, abs=1e-4), 120_000_000_000)]


def leaks_on_one_node(tmp_path, job_gpus: int | None, smi: str | None, write: tuple[str, str],
                      writers: tuple[str, ...] = ("job-1",)) -> list[tuple]:
    """gpu01 (8 GPUs, 32.00 for 00:00-02:00), job-1 holding `job_gpus` of them (None: no workload
    file), telemetry `smi` (None: none) and one checkpoint write (start, end) to NFS; idle runs from
    30 minutes: hidden costs by kind."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(HEADER + f"32.00,32.00,USD,Usage,{HOURS},GpuCloud,GPU,Compute,ins-gpu01,gpu01,16,"
                                                  "GPU-Hours,,,,A100 80G,8\n")
    if job_gpus is not None:
        (landing / "jobs.csv").write_text("workload_id,phase,host,gpu_count,started_at,ended_at\n"
                                          f"job-1,pretraining,gpu01,{job_gpus},2026-09-07T00:00:00Z,2026-09-07T02:00:00Z\n")
    if smi is not None:
        (landing / "gpu01.csv").write_text(smi)
    (landing / "checkpoints.jsonl").write_text("".join(json.dumps({
        "job": job, "host": "gpu01", "started_at": write[0], "ended_at": write[1],
        "bytes": 100_000_000_000, "path": "/mnt/nfs/ckpt", "storage_class": "nfs"}) + "\n" for job in writers))
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD", idle_min_minutes=30).success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        return fetch_all(conn, "SELECT kind, subkind, round(sum(wasted_cost), 2) FROM findings.hidden_costs GROUP BY ALL ORDER BY 1")
    finally:
        conn.close()


def test_gpus_idle_through_a_long_write_are_one_leak_not_an_idle_run_too(tmp_path):
    """A synchronous write of an hour (00:30-01:30) with the node's 8 GPUs at 0 %, idle runs from 30
    minutes: 8 GPU-hours at 2.00 are 16.00 wasted, the checkpoint's. Before, the same GPU-hours were
    an idle run too (32.00 in all)."""
    assert leaks_on_one_node(tmp_path, 8, telemetry("gpu01", range(30, 90)),
                             ("2026-09-07T00:30:00Z", "2026-09-07T01:30:00Z")) == [("slow_disk_idle", "checkpoint", Decimal("16.00"))]


def test_idle_cards_beside_a_stalled_job_stay_an_idle_run(tmp_path):
    """The job holds cards 0-3 and stalls 20 minutes on a write; cards 4-7 nobody holds sit at 0 %
    all along: their idle run keeps every hour (4 × 2 h × 2.00 = 16.00), the stall has the job's
    (4 × 1/3 h × 2.00 = 2.67)."""
    lines = [SMI]
    for minute in range(120):
        lines += [f"2026/09/07 {minute // 60:02d}:{minute % 60:02d}:00.000, {g}, GPU-gpu01-{g}, NVIDIA A100-SXM4-80GB, "
                  f"{0 if g >= 4 or 60 <= minute < 80 else 85} %, 100 MiB, 80.00 W" for g in range(8)]
    assert leaks_on_one_node(tmp_path, 4, "\n".join(lines) + "\n", ("2026-09-07T01:00:00Z", "2026-09-07T01:20:00Z")) == [
        ("slow_disk_idle", "checkpoint", Decimal("2.67")), ("unused_gpu", "idle_run", Decimal("16.00"))]


def test_a_checkpoint_on_a_node_no_workload_file_names_is_a_stall_of_its_gpus(tmp_path):
    """Checkpoint logs and telemetry, but no scheduler export (a job started by hand on a rented
    node): the job's GPUs are the 8 busy just before the write, and the write of 01:00-01:20 with
    them at 0 % is 8 × 1/3 GPU-hour at 2.00, 5.33 wasted (before: no finding, its job's GPUs
    unknown). It names where its GPUs came from."""
    assert leaks_on_one_node(tmp_path, None, telemetry("gpu01", range(60, 80)), ("2026-09-07T01:00:00Z", "2026-09-07T01:20:00Z")) == [
        ("slow_disk_idle", "checkpoint", Decimal("5.33"))]
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        [(evidence,)] = fetch_all(conn, "SELECT evidence FROM findings.slow_disk_idle")
    finally:
        conn.close()
    evidence = json.loads(evidence)
    assert (evidence["gpus"], evidence["workloads"], evidence["idle_share"]) == (8, None, 1.0)
    assert evidence["gpus_from"] == "the GPUs busy on the host just before the write (no workload record)"


def test_writes_of_jobs_no_record_names_on_one_node_are_one_wait(tmp_path):
    """Three jobs' checkpoints (job-a, job-b, job-c) from 00:30 to 01:30 on gpu01, no workload file,
    its 8 GPUs busy before and idle during: one wait of 8 GPU-hours, 16.00, not three (48.00 for a
    node paid 32.00)."""
    assert leaks_on_one_node(tmp_path, None, telemetry("gpu01", range(30, 90)), ("2026-09-07T00:30:00Z", "2026-09-07T01:30:00Z"),
                             writers=("job-a", "job-b", "job-c")) == [("slow_disk_idle", "checkpoint", Decimal("16.00"))]


def test_without_a_workload_file_cards_idle_before_the_write_are_not_the_jobs(tmp_path):
    """No workload file; cards 0-3 run at 85 % throughout (the job writes asynchronously, and never
    waits) and cards 4-7 sit at 0 % all along: no stall, and the idle cards' run keeps every hour
    (4 × 2 h × 2.00 = 16.00). Taking every card seen as the job's made it a stall of 2.67 and cut
    the idle run to 13.33."""
    lines = [SMI]
    for minute in range(120):
        lines += [f"2026/09/07 {minute // 60:02d}:{minute % 60:02d}:00.000, {g}, GPU-gpu01-{g}, NVIDIA A100-SXM4-80GB, "
                  f"{0 if g >= 4 else 85} %, 100 MiB, 80.00 W" for g in range(8)]
    assert leaks_on_one_node(tmp_path, None, "\n".join(lines) + "\n", ("2026-09-07T01:00:00Z", "2026-09-07T01:20:00Z")) == [
        ("unused_gpu", "idle_run", Decimal("16.00"))]


def test_a_long_write_on_a_node_no_workload_file_names_is_one_leak(tmp_path):
    """The hour-long write (00:30-01:30) with no workload file: the stall's GPUs are the 8 busy
    before it, so its 8 GPU-hours are not an idle run too (16.00 in all, not 32.00); with no
    telemetry either, its GPUs are unknown and the paid hours are what is left to say (no_telemetry)."""
    assert leaks_on_one_node(tmp_path, None, telemetry("gpu01", range(30, 90)),
                             ("2026-09-07T00:30:00Z", "2026-09-07T01:30:00Z")) == [("slow_disk_idle", "checkpoint", Decimal("16.00"))]
    blind = tmp_path / "blind"
    blind.mkdir()
    assert [kind for kind, *_ in leaks_on_one_node(blind, None, None, ("2026-09-07T00:30:00Z", "2026-09-07T01:30:00Z"))] == [
        "unused_gpu"]


def telemetry_every_10_s(host: str, idle_from: int, idle_until: int) -> str:
    """8 GPUs every 10 s from 00:00 to 02:00: at 0 % from second `idle_from` to `idle_until`, 85 % otherwise."""
    lines = [SMI]
    for second in range(0, 7200, 10):
        busy = 0 if idle_from <= second < idle_until else 85
        lines += [f"2026/09/07 {second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}.000, {g}, GPU-{host}-{g}, "
                  f"NVIDIA A100-SXM4-80GB, {busy} %, 100 MiB, 80.00 W" for g in range(8)]
    return "\n".join(lines) + "\n"


def test_a_write_starting_within_a_minute_counts_its_whole_wait(tmp_path):
    """A checkpoint from 01:00:30 to 01:20:30, the job's 8 GPUs idle exactly then (10 s samples):
    20 minutes of 8 GPUs at 2.00 USD a GPU-hour is 5.33. Its first and last minutes are half the
    job's own work, busy on average; counted as not waiting they made it 19 minutes of 21 (4.83)."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "charges.csv").write_text(HEADER + f"32.00,32.00,USD,Usage,{HOURS},GpuCloud,GPU,Compute,ins-gpu01,gpu01,16,GPU-Hours,,,,A100 80G,8\n")
    (landing / "sacct.txt").write_text(SACCT.replace("gres/gpu=16,node=2", "gres/gpu=8,node=1").replace("gpu[01-02]", "gpu01"))
    (landing / "gpu01.csv").write_text(telemetry_every_10_s("gpu01", 3630, 4830))
    (landing / "checkpoints.jsonl").write_text(json.dumps(
        {"job": "5001", "host": "gpu01", "started_at": "2026-09-07T01:00:30Z", "ended_at": "2026-09-07T01:20:30Z",
         "bytes": 100_000_000_000, "path": "/mnt/nfs/ckpt/gpu01", "storage_class": "nfs"}) + "\n")
    assert run_pipeline(landing, tmp_path / "wh.duckdb", reporting_currency="USD").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        rows = fetch_all(conn, "SELECT host, round(wasted_cost, 2), round(avoidable_cost, 2) FROM findings.slow_disk_idle")
    finally:
        conn.close()
    assert rows == [("gpu01", Decimal("5.33"), Decimal("5.19"))]
