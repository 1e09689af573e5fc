"""One small valid seed file per registered connector, for the fuzz tests to mutate.

Connectors with a vendored public sample (tests/fixtures/samples, see SOURCES.md there) start from
its first rows, cut at a line boundary, so every mutation stays cheap to read. Connectors without
one (GPU-rental mappings, workloads, storage, Prometheus exports) get a small file written here in
the shape pipelines/demo/scenario.py writes. A seed names the format it is in, so the mutators know
how to rewrite one cell of it.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SAMPLES = Path(os.environ.get("FINOPS_SAMPLES", Path(__file__).resolve().parent.parent / "fixtures" / "samples"))
HEAD_ROWS = 20


@dataclass(frozen=True)
class Seed:
    id: str          # test id: the connector's name, or name:variant for an extra seed
    connector: str   # the registered connector it feeds
    filename: str    # some connectors read the host or the start time from the file name
    fmt: str         # csv | ws (whitespace columns) | prom | json | jsonl | parquet
    content: bytes
    delimiter: str = ","


def head_lines(path: Path, rows: int = HEAD_ROWS) -> bytes:
    """The header and the first `rows` data lines, extended until quotes balance (no cut mid-field)."""
    lines = path.read_bytes().splitlines(keepends=True)
    out, n = [], 0
    for line in lines:
        out.append(line)
        text = b"".join(out)
        if text.count(b'"') % 2 == 0:
            n += 1
            if n > rows:
                break
    return b"".join(out)


def _sample(relative: str, rows: int | None = HEAD_ROWS) -> bytes:
    path = SAMPLES / relative
    return path.read_bytes() if rows is None else head_lines(path, rows)


GPU_RENTAL_GENERIC = """\
Invoice ID,Account ID,Instance ID,Instance Name,Region,GPU Model,GPU Count,Billing Mode,Start Time,End Time,Hours,Unit Price (per GPU-hour),Amount,Currency
INV-2026-09,acct-17,i-h100-01,gpu-h100-01,us-east-1,H100 80GB,8,on-demand,2026-09-01 00:00:00,2026-09-02 00:00:00,24,2.49,478.08,USD
INV-2026-09,acct-17,i-h100-02,gpu-h100-02,us-east-1,H100 80GB,8,monthly,2026-09-01 00:00:00,2026-10-01 00:00:00,720,1.89,10886.40,USD
INV-2026-09,acct-17,i-a100-03,gpu-a100-03,eu-west-1,A100 40GB,4,spot,2026-09-03T06:00:00,2026-09-03T18:30:00,12.5,0.79,39.50,usd
INV-2026-09,acct-17,i-l40s-04,gpu-l40s-04,eu-west-1,L40S,1,pay-as-you-go,2026/09/04 10:00:00,2026/09/04 11:00:00,1,0.99,0.99,
"""

GPU_RENTAL_CN = """\
云厂商,账单编号,账号ID,实例ID,实例名称,地域,GPU型号,GPU数量,计费方式,开始时间,结束时间,时长(小时),单价(元/卡时),金额,币种
Lumen GPU Cloud,LGC-2026-09,lgc-778812,ins-a100-01,gpu-a100-01,cn-east-1,A100 80G,8,包月,2026-09-01 08:00:00,2026-09-02 08:00:00,24,1.85,355.20,CNY
Lumen GPU Cloud,LGC-2026-09,lgc-778812,ins-a100-01,gpu-a100-01,cn-east-1,A100 80G,8,包月,2026-09-02 08:00:00,2026-09-03 08:00:00,24,1.85,355.20,CNY
Lumen GPU Cloud,LGC-2026-09,lgc-778812,ins-4090-02,gpu-4090-02,cn-south-1,RTX 4090,2,按量计费,2026-09-02 10:00,2026-09-02 13:30,3.5,2.10,14.70,CNY
Lumen GPU Cloud,LGC-2026-09,lgc-778812,ins-h800-03,gpu-h800-03,cn-north-2,H800,8,竞价,2026/09/05 00:00:00,2026/09/05 06:00:00,6,3.20,153.60,
"""

WORKLOADS_CSV = """\
workload_id,name,phase,host,gpu_count,started_at,ended_at,namespace
ft-a100-02-10,finetune-lora-10,finetuning,gpu-a100-02,2,2026-09-01T02:00:00Z,2026-09-02T20:00:00Z,ml
pt-a100-02-11,pretrain-11,Pre-Training,GPU-A100-02.cluster.local,8,2026-09-03 02:00:00,2026-09-04 23:00:00+02:00,ml
inf-a100-02-12,serve-12,inference,gpu-a100-02,1,2026-09-05T06:00:00+05:30,,serving
adhoc-13,notebook,,10.0.0.7,0,2026-09-06,2026-09-06T01:00,
"""

SLURM_SACCT = """\
JobID|JobName|Account|Partition|AllocTRES|Start|End|NodeList|State
41000|pretrain-llm-7b|ml-research|a100|billing=64,cpu=64,gres/gpu=8,node=1|2026-09-01T08:00:00|2026-09-21T08:00:00|gpu-a100-01|COMPLETED
41000.batch|batch|ml-research||cpu=64,gres/gpu=8,node=1|2026-09-01T08:00:00|2026-09-21T08:00:00|gpu-a100-01|COMPLETED
41001|finetune-sft-01|ml-research|a100|cpu=128,gres/gpu:a100=4,gres/gpu:h100=2,node=3|2026-09-21T14:00:00|Unknown|gpu[01-02,07]|RUNNING
41002|eval|ml-research|a100|cpu=8|None|Unknown|None assigned|PENDING
41003|serve-mig|ml-serving|mig|cpu=4,gres/gpu=2,gres/gpu:nvidia_a100_1g.10gb=2|2026-09-22T00:00:00|Unknown|gpu-mig-01|RUNNING
"""

KUBERNETES_PODS = {
    "apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "stable-diffusion-serving-7f9c4", "namespace": "inference", "labels": {"app": "sd"}},
         "spec": {"nodeName": "gpu-rtx6000-01.cluster.local",
                  "containers": [{"name": "server", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
         "status": {"phase": "Running", "startTime": "2026-09-01T00:00:00Z"}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "train-7b-0", "namespace": "ml", "labels": {"ml-phase": "pretraining"}},
         "spec": {"nodeName": "gpu-a100-01",
                  "containers": [{"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": 8}}}]},
         "status": {"phase": "Succeeded", "startTime": "2026-09-02T00:00:00Z", "containerStatuses": [
             {"state": {"terminated": {"finishedAt": "2026-09-03T12:00:00Z"}}}]}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "pending-0", "namespace": "ml"},
         "spec": {"containers": [{"name": "c", "resources": {}}]},
         "status": {"phase": "Pending"}},
        # MIG: a mixed-strategy slice, and one nvidia.com/gpu on a single-strategy node listed below.
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "serve-mig-0", "namespace": "inference"},
         "spec": {"nodeName": "gpu-mig-01",
                  "containers": [{"name": "server", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}]},
         "status": {"phase": "Running", "startTime": "2026-09-04T00:00:00Z"}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "serve-single-0", "namespace": "inference"},
         "spec": {"nodeName": "gpu-mig-02",
                  "containers": [{"name": "server", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
         "status": {"phase": "Running", "startTime": "2026-09-04T00:00:00Z"}},
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "gpu-mig-02", "labels": {"nvidia.com/mig.strategy": "single",
                                                       "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}}},
    ],
}

CHECKPOINTS_JSONL = """\
{"job": "pt-llm-7b", "host": "gpu-a100-01", "started_at": "2026-09-01T05:52:00Z", "ended_at": "2026-09-01T06:00:00Z", "bytes": 200000000000, "path": "/mnt/cloud-disk/ckpt/step-000000", "storage_class": "cloud_disk"}
{"workload_id": "slurm:41000", "host": "GPU-A100-01.cluster", "started_at": "2026-09-01 11:52:00", "ended_at": "2026-09-01 12:00:00", "bytes": "1048576", "path": "/nvme/ckpt/step-003000", "storage_class": "local_nvme"}
{"job": "ft-7", "host": "gpu-a100-02", "started_at": "2026-09-02T17:52:00+02:00", "bytes": 0, "storage_class": "nfs"}
"""

S3_ACCESS_LOG = (
    '79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be llm-datasets [03/Sep/2026:09:00:00 +0000] '
    '203.0.113.10 arn:aws:iam::210987654321:user/gpucloud-trainer REQ000000000000 REST.GET.OBJECT corpus-v3/corpus-v3.tar '
    '"GET /llm-datasets/corpus-v3/corpus-v3.tar HTTP/1.1" 200 - 300000000000 300000000000 2400000 45 "-" "aws-cli/2.15.0" '
    '- host0 SigV4 ECDHE-RSA-AES128-GCM-SHA256 AuthHeader llm-datasets.s3.us-east-1.amazonaws.com TLSv1.2 - -\n'
    '79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be llm-datasets [06/Sep/2026:10:00:00 +0530] '
    '198.51.100.11 - REQ000000000001 REST.PUT.OBJECT ckpt/step-1 "PUT /llm-datasets/ckpt/step-1 HTTP/1.1" 200 - - 1048576 '
    '830 12 "-" "boto3/1.34"\n'
    '79a59df900b949e55d96a1e698fbacedfd6e09d98eacf8f8d5218e7cd47ef2be llm-datasets [10/Sep/2026:11:00:00 -0800] '
    '203.0.113.12 arn:aws:iam::210987654321:user/x REQ000000000002 REST.HEAD.OBJECT corpus-v3/index.json '
    '"HEAD /llm-datasets/corpus-v3/index.json HTTP/1.1" 404 NoSuchKey 243 - 9 - "-" "curl/8.5"\n'
)

BASE_TS = 1788220800  # 2026-09-01T00:00:00Z


def _query_range(series: list[tuple[dict, list]]) -> bytes:
    result = [{"metric": metric, "values": values} for metric, values in series]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


PROMETHEUS_DCGM = _query_range([
    ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": "GPU-a88f", "modelName": "NVIDIA A100-SXM4-80GB",
      "Hostname": "gpu-a100-02", "instance": "gpu-a100-02:9400"},
     [[BASE_TS, "2"], [BASE_TS + 60, "97"], [BASE_TS + 120, "NaN"]]),
    ({"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "UUID": "GPU-a88f", "Hostname": "gpu-a100-02"},
     [[BASE_TS, "1024"], [BASE_TS + 60, "65000"]]),
    ({"__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu": "1", "UUID": "GPU-b77e", "instance": "10.1.2.3:9400"},
     [[BASE_TS + 0.5, "0.42"], [BASE_TS + 60.5, "1"]]),
])

NODE_EXPORTER = _query_range([
    ({"__name__": "node_disk_written_bytes_total", "instance": "gpu-a100-01:9100", "device": "nvme0n1"},
     [[BASE_TS, "1000"], [BASE_TS + 60, "1000"], [BASE_TS + 120, "420001000"], [BASE_TS + 180, "500"]]),
    ({"__name__": "node_disk_io_time_seconds_total", "instance": "gpu-a100-01:9100", "device": "nvme0n1"},
     [[BASE_TS, "10"], [BASE_TS + 60, "10"], [BASE_TS + 120, "70"], [BASE_TS + 180, "1"]]),
    ({"__name__": "node_disk_written_bytes_total", "hostname": "gpu-a100-02", "device": "sda"},
     [[BASE_TS, "0"], [BASE_TS + 60, "4096"]]),
])

GCP_JSONL = "\n".join(json.dumps(r) for r in [
    {"billing_account_id": "01A2B3-C4D5E6-F7G8H9", "service": {"id": "6F81-5844-456A", "description": "Compute Engine"},
     "sku": {"id": "A2F4-1C0A-B2C7", "description": "Nvidia Tesla A100 GPU running in Americas"},
     "usage_start_time": "2026-09-01T00:00:00-07:00", "usage_end_time": "2026-09-01T01:00:00-07:00",
     "project": {"id": "ml-prod", "name": "ML prod"}, "location": {"region": "us-central1", "zone": "us-central1-a"},
     "cost": 2.934, "currency": "USD", "usage": {"amount": 7200, "unit": "seconds", "amount_in_pricing_units": 2,
                                                 "pricing_unit": "hour"},
     "credits": [{"name": "Committed use discount", "amount": -0.5, "type": "COMMITTED_USAGE_DISCOUNT"}],
     "invoice": {"month": "202609"}, "cost_type": "regular"},
    {"billing_account_id": "01A2B3-C4D5E6-F7G8H9", "service": {"id": "95FF-2EF5-5EA1", "description": "Cloud Storage"},
     "sku": {"id": "E5F0-6A5D-7BAD", "description": "Standard Storage US Multi-region"},
     "usage_start_time": "2026-09-01T00:00:00Z", "usage_end_time": "2026-09-02T00:00:00Z",
     "cost": 0.12, "currency": "USD", "credits": [], "invoice": {"month": "202609"}},
]).encode() + b"\n"


def _parquet_of_csv(csv_bytes: bytes) -> bytes:
    """The same rows as Parquet, every column text (the FOCUS connector reads Parquet too)."""
    names = pacsv.read_csv(io.BytesIO(csv_bytes)).column_names
    table = pacsv.read_csv(io.BytesIO(csv_bytes), convert_options=pacsv.ConvertOptions(
        column_types={n: pa.string() for n in names}))
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=8)
    return sink.getvalue()


def all_seeds() -> list[Seed]:
    focus_head = _sample("billing/focus10_sample_multicloud_1000.csv")
    return [
        Seed("focus", "focus", "focus-2024-09.csv", "csv", focus_head),
        Seed("focus:parquet", "focus", "focus-2024-09.parquet", "parquet", _parquet_of_csv(focus_head)),
        Seed("aws_cur", "aws_cur", "cur-2023-06.csv", "csv", _sample("billing/aws_cur_legacy_csv_savingsplan_koku.csv", None)),
        Seed("azure_cost", "azure_cost", "azure-ea-actual.csv", "csv", _sample("billing/azure_ea_actual_cost_finopstoolkit.csv", None)),
        Seed("gcp_billing", "gcp_billing", "gcp-2020-11.csv", "csv", _sample("billing/gcp_bigquery_export_flat_2020-11_koku.csv", 12)),
        Seed("gcp_billing:jsonl", "gcp_billing", "gcp-2026-09.jsonl", "jsonl", GCP_JSONL),
        Seed("oci_cost", "oci_cost", "oci-cost.csv", "csv", _sample("billing/oci_cost_report_focusconverters_fixture.csv", 12)),
        Seed("nvidia_smi", "nvidia_smi", "gpu-node-07.csv", "csv",
             _sample("telemetry/nvidia_smi_query_gpu_h100_h200_l40s_idle_load.csv", None)),
        Seed("nvidia_smi_dmon", "nvidia_smi_dmon", "gpu-node-07_20260714T081238.txt", "ws",
             _sample("telemetry/nvidia_smi_dmon_h100_load.txt", None)),
        Seed("dcgm_exporter", "dcgm_exporter", "dcgm-2026-07-14T08:12:38Z.prom", "prom",
             _sample("telemetry/dcgm_exporter_scrape_datadog_fixture_t4_a10g.prom", None)),
        Seed("prometheus_dcgm", "prometheus_dcgm", "dcgm-query_range.json", "json", PROMETHEUS_DCGM),
        Seed("alibaba_gpu_trace", "alibaba_gpu_trace", "pod_gpu_duty_cycle.csv", "csv",
             _sample("telemetry/alibaba_gentd26_format_pod_gpu_duty_cycle_generated.csv")),
        Seed("workloads_csv", "workloads_csv", "jobs.csv", "csv", WORKLOADS_CSV.encode()),
        Seed("slurm_sacct", "slurm_sacct", "sacct.txt", "csv", SLURM_SACCT.encode(), delimiter="|"),
        Seed("kubernetes_pods", "kubernetes_pods", "pods.json", "json", json.dumps(KUBERNETES_PODS, indent=1).encode()),
        Seed("checkpoint_events", "checkpoint_events", "checkpoints.jsonl", "jsonl", CHECKPOINTS_JSONL.encode()),
        Seed("node_exporter_disk", "node_exporter_disk", "node-disk.json", "json", NODE_EXPORTER),
        Seed("s3_access_log", "s3_access_log", "s3-access.log", "ws", S3_ACCESS_LOG.encode()),
        Seed("gpu_rental_cn", "gpu_rental_cn", "账单明细-2026-09.csv", "csv", GPU_RENTAL_CN.encode()),
        Seed("gpu_rental_generic", "gpu_rental_generic", "invoice-2026-09.csv", "csv", GPU_RENTAL_GENERIC.encode()),
    ]
