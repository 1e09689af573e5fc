"""Slurm, Kubernetes, checkpoint events, node_exporter disk counters and S3 access logs."""

import json
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from connectors.checkpoints_jsonl import CheckpointEventsConnector
from connectors.kubernetes import KubernetesPodsConnector
from connectors.node_exporter import NodeExporterDiskConnector
from connectors.registry import detect
from connectors.s3_access_log import S3AccessLogConnector
from connectors.slurm import SlurmSacctConnector, expand_nodelist, gpus_in_tres
from models.schemas import STORAGE_EVENT, WORKLOAD
from tests.conftest import read_context


def read_all(connector, path, schema, timezone="UTC"):
    ctx = read_context(path.name, timezone)
    batches = list(connector.read(path, ctx))
    return (pa.Table.from_batches(batches, schema=schema).to_pylist() if batches else []), ctx


@pytest.mark.parametrize("nodelist, nodes", [
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("gpu-a100-01", ["gpu-a100-01"]),
    ("node[8-11],login1", ["node8", "node9", "node10", "node11", "login1"]),
    ("rack1-[001-002]-ib", ["rack1-001-ib", "rack1-002-ib"]),
    ("None assigned", []),
])
def test_slurm_node_ranges_expand(nodelist, nodes):
    assert expand_nodelist(nodelist) == nodes


def test_slurm_gpu_counts_from_alloc_tres():
    assert gpus_in_tres("billing=64,cpu=64,gres/gpu=8,mem=1T,node=1") == 8
    assert gpus_in_tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=1") == 3
    assert gpus_in_tres("cpu=8,mem=10G") == 0


SACCT = """JobID|JobName|Account|Partition|AllocTRES|Start|End|NodeList|State
1001|pretrain-llm-7b|research|a100|billing=128,cpu=128,gres/gpu=16,node=2|2026-09-01T08:00:00|2026-09-21T08:00:00|gpu[01-02]|COMPLETED
1001.batch|batch|research||cpu=64,gres/gpu=8|2026-09-01T08:00:00|2026-09-21T08:00:00|gpu01|COMPLETED
1002|lora-sweep|research|a100|cpu=16,gres/gpu:a100=3|2026-09-22T08:00:00|Unknown|gpu[03-04]|RUNNING
1003|queued|research|a100|gres/gpu=8|Unknown|Unknown|None assigned|PENDING
"""


def test_slurm_sacct_jobs_become_per_node_workloads(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(SACCT)
    assert detect(path).connector.name == "slurm_sacct"
    rows, ctx = read_all(SlurmSacctConnector(), path, WORKLOAD, timezone="Asia/Shanghai")
    got = [(r["workload_id"], r["host"], r["gpu_count"], r["started_at"], r["ended_at"], r["state"]) for r in rows]
    assert got == [
        ("slurm:1001@gpu01", "gpu01", 8, datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 9, 21, tzinfo=UTC), "COMPLETED"),
        ("slurm:1001@gpu02", "gpu02", 8, datetime(2026, 9, 1, tzinfo=UTC), datetime(2026, 9, 21, tzinfo=UTC), "COMPLETED"),
        ("slurm:1002@gpu03", "gpu03", 2, datetime(2026, 9, 22, tzinfo=UTC), None, "RUNNING"),  # 3 GPUs over 2 nodes
        ("slurm:1002@gpu04", "gpu04", 1, datetime(2026, 9, 22, tzinfo=UTC), None, "RUNNING"),
    ]
    assert rows[0]["account"] == "research" and rows[0]["partition"] == "a100" and rows[0]["phase"] is None
    assert [q["reason"] for q in ctx.quarantined] == ["job 1003 has not started (Start '')"]


def pod(name, namespace, node, gpus, start, phase="Running", finished=None, labels=None):
    status = {"phase": phase}
    if start:
        status["startTime"] = start
    if finished:
        status["containerStatuses"] = [{"state": {"terminated": {"finishedAt": finished}}}]
    return {"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]},
            "status": status}


def test_kubernetes_pod_listing(tmp_path):
    listing = {"apiVersion": "v1", "kind": "List", "items": [
        pod("sd-serving-7f9c", "inference", "gpu-rtx-01.cluster.local", 1, "2026-09-01T00:00:00Z"),
        pod("sft-job-1", "research", "gpu-a100-01", 8, "2026-09-02T00:00:00Z", "Succeeded", "2026-09-02T06:00:00Z",
            labels={"ml-phase": "Fine-Tuning", "team": "nlp"}),
        pod("pending", "research", None, 8, None, "Pending"),
        pod("odd", "research", "gpu-a100-02", 1, "2026-09-03T00:00:00Z", labels={"phase": "gaming"}),
    ]}
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(listing))
    assert detect(path).connector.name == "kubernetes_pods"
    rows, ctx = read_all(KubernetesPodsConnector(), path, WORKLOAD)
    assert [(r["workload_id"], r["host"], r["gpu_count"], r["phase"], r["ended_at"]) for r in rows] == [
        ("k8s:inference/sd-serving-7f9c", "gpu-rtx-01", 1, None, None),
        ("k8s:research/sft-job-1", "gpu-a100-01", 8, "finetuning", datetime(2026, 9, 2, 6, tzinfo=UTC)),
    ]
    assert json.loads(rows[1]["labels"]) == {"ml-phase": "Fine-Tuning", "team": "nlp"}
    assert [q["reason"] for q in ctx.quarantined] == [
        "pod never started (no status.startTime)", "phase label 'gaming' is not one of pretraining, finetuning, inference"]


def test_checkpoint_events_jsonl(tmp_path):
    path = tmp_path / "checkpoints.jsonl"
    path.write_text(
        '{"job": "pt-llm-7b", "host": "GPU-A100-01", "started_at": "2026-09-01T05:52:00Z", "ended_at": "2026-09-01T06:00:00Z", '
        '"bytes": 214748364800, "path": "/mnt/ckpt/step-1000", "storage_class": "cloud_disk"}\n'
        "{not json\n"
        '{"job": "pt-llm-7b", "host": "gpu-a100-01", "started_at": "2026-09-01T11:52:00Z", "ended_at": "2026-09-01T11:50:00Z", "bytes": 1}\n')
    assert detect(path).connector.name == "checkpoint_events"
    rows, ctx = read_all(CheckpointEventsConnector(), path, STORAGE_EVENT)
    assert len(rows) == 1
    r = rows[0]
    assert (r["kind"], r["host"], r["workload_id"], r["bytes"], r["storage_class"]) == ("checkpoint", "gpu-a100-01", "pt-llm-7b", 214748364800, "cloud_disk")
    assert (r["ended_at"] - r["started_at"]).total_seconds() == 480
    assert [(q["x_SourceRow"], q["reason"][:17]) for q in ctx.quarantined] == [(2, "not a JSON object"), (3, "ended_at is befor")]


def test_node_exporter_counters_become_write_intervals_with_resets(tmp_path):
    base = 1725148800
    export = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "node_disk_written_bytes_total", "instance": "gpu-a100-01:9100", "device": "nvme0n1"},
         "values": [[base, "1000"], [base + 60, "1000"], [base + 120, "420001000"], [base + 180, "500"]]},
        {"metric": {"__name__": "node_disk_io_time_seconds_total", "instance": "gpu-a100-01:9100", "device": "nvme0n1"},
         "values": [[base, "10"], [base + 60, "10"], [base + 120, "70"], [base + 180, "1"]]},
    ]}}
    path = tmp_path / "node.json"
    path.write_text(json.dumps(export))
    assert detect(path).connector.name == "node_exporter_disk"
    rows, _ = read_all(NodeExporterDiskConnector(), path, STORAGE_EVENT)
    got = sorted((r["started_at"].timestamp() - base, r["bytes"], r["io_seconds"]) for r in rows)
    # 60–120 s: 420 MB written in 60 s of disk time; 120–180 s: the counter reset (reboot), 500 bytes since.
    assert got == [(60, 420_000_000, 60.0), (120, 500, 1.0)]
    assert {(r["host"], r["path"], r["kind"]) for r in rows} == {("gpu-a100-01", "nvme0n1", "disk_write")}


S3_LOG = (
    '79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be llm-datasets [06/Sep/2026:10:00:00 +0000] 203.0.113.7 '
    'arn:aws:iam::123456789012:user/trainer 3E57427F3EXAMPLE REST.GET.OBJECT corpus-v3/shard-000.tar "GET /corpus-v3/shard-000.tar HTTP/1.1" '
    '200 - 322122547200 322122547200 600000 70 "-" "aws-cli/2.15" - hostid SigV4 TLS_AES_128_GCM_SHA256 AuthHeader llm-datasets.s3.amazonaws.com TLSv1.3 - -\n'
    '79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be llm-datasets [06/Sep/2026:11:00:00 +0000] 10.0.0.5 '
    '- 4F57427F3EXAMPLE REST.HEAD.OBJECT corpus-v3/shard-000.tar "HEAD /corpus-v3/shard-000.tar HTTP/1.1" 200 - - 322122547200 3 - "-" "boto3" -\n'
    'garbage line that is not a log\n'
)


def test_s3_access_log(tmp_path):
    path = tmp_path / "access.log"
    path.write_text(S3_LOG)
    assert detect(path).connector.name == "s3_access_log"
    rows, ctx = read_all(S3AccessLogConnector(), path, STORAGE_EVENT)
    get, head = rows
    assert (get["kind"], get["resource_id"], get["path"], get["bytes"], get["remote_ip"]) == (
        "object_get", "llm-datasets", "corpus-v3/shard-000.tar", 322122547200, "203.0.113.7")
    assert get["started_at"] == datetime(2026, 9, 6, 10, tzinfo=UTC) and (get["ended_at"] - get["started_at"]).total_seconds() == 600
    assert json.loads(get["details"])["http_status"] == "200"
    assert (head["kind"], head["bytes"], head["requester"]) == ("object_other", None, None)
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(3, "not an S3 access log line")]


def test_a_nodelist_that_does_not_parse_names_no_node():
    assert expand_nodelist("gpu[01-") == [] and expand_nodelist(None) == []
