"""GPU telemetry connectors on the real public samples and on small hand-made files."""

import json
import shutil
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from connectors.alibaba_trace import AlibabaGpuTraceConnector
from connectors.base import ConnectorError
from connectors.dcgm import DcgmScrapeConnector, PrometheusDcgmConnector
from connectors.nvidia_smi_dmon import NvidiaSmiDmonConnector
from connectors.registry import detect
from models.schemas import GPU_SAMPLE
from tests.conftest import read_context, sample


def read_all(connector, path, timezone="UTC"):
    ctx = read_context(path.name, timezone)
    batches = list(connector.read(path, ctx))
    return (pa.Table.from_batches(batches, schema=GPU_SAMPLE).to_pylist() if batches else []), ctx


def test_dcgm_exporter_sample_units_identity_and_counters(tmp_path):
    path = tmp_path / "dcgm_20240901T000000Z.prom"
    shutil.copy(sample("telemetry/dcgm_exporter_scrape_datadog_fixture_t4_a10g.prom"), path)
    assert detect(path).connector.name == "dcgm_exporter"
    rows, ctx = read_all(DcgmScrapeConnector(), path)
    assert not ctx.quarantined
    by_host = {r["host"]: r for r in rows}
    # The A10G line carries only DCGM_FI_PROF_DRAM_ACTIVE, which is not a tracked metric.
    assert set(by_host) == {"424773df46e0", "551bdf382151"}
    t4 = by_host["424773df46e0"]
    assert (t4["gpu_index"], t4["gpu_uuid"], t4["gpu_model"]) == (0, "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "Tesla T4")
    assert (t4["util_pct"], t4["util_kind"]) == (0.0, "dcgm_gpu_util")
    assert (t4["mem_used_mib"], t4["mem_total_mib"], t4["power_w"], t4["temperature_c"]) == (0.0, 15109.0, 8.969, 25.0)
    assert t4["energy_mj"] == 128996013.0  # a counter: the parser's `_total` suffix is undone
    assert t4["ts"] == datetime(2024, 9, 1, tzinfo=UTC)  # no sample timestamps: the file name's time
    other = by_host["551bdf382151"]
    assert other["mem_total_mib"] == 15109.0 and other["util_pct"] is None and other["mem_used_mib"] is None


SCRAPE = """# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",hostname="Node-1.cluster.local",pod_name="trainer-0",pod_namespace="llm"} 0.75 1725148800000
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="1",UUID="GPU-b",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1",GPU_I_ID="3",GPU_I_PROFILE="1g.10gb"} 0.5 1725148800000
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",hostname="Node-1.cluster.local",pod_name="trainer-0",pod_namespace="llm"} 100 1725148800000
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",hostname="Node-1.cluster.local",pod_name="trainer-0",pod_namespace="llm"} 40000 1725148800000
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",hostname="Node-1.cluster.local"} 9223372036854775794 1725148800000
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",hostname="node-1"} 250 1725148860000
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",hostname="node-1"} 20 4102444800000
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",hostn"""


def test_dcgm_busy_signal_preference_labels_mig_sentinels_and_truncation(tmp_path):
    path = tmp_path / "scrapes.prom"
    path.write_text(SCRAPE)
    rows, ctx = read_all(DcgmScrapeConnector(), path)
    gpu0 = next(r for r in rows if r["gpu_uuid"] == "GPU-a" and r["util_pct"] is not None)
    assert (gpu0["host"], gpu0["pod"], gpu0["namespace"]) == ("node-1", "trainer-0", "llm")  # label drift, host normalised
    assert (gpu0["util_pct"], gpu0["util_kind"]) == (75.0, "dcgm_gr_engine_active")  # preferred over GPU_UTIL's 100
    assert gpu0["mem_used_mib"] == 40000.0
    assert all(r["power_w"] is None for r in rows)  # DCGM's int64 blank is a missing value
    mig = next(r for r in rows if r["gpu_uuid"] == "GPU-b")
    assert (mig["mig_instance"], mig["mig_profile"], mig["util_pct"]) == ("3", "1g.10gb", 50.0)
    reasons = sorted(q["reason"] for q in ctx.quarantined)
    assert reasons == ["file ends mid-line at line 14", "timestamp 2100-01-01T00:00:00Z is in the future",
                       "utilization out of 0–100: 250.0"]
    assert ctx.warnings == ["file ends mid-line at line 14: the incomplete line is quarantined, the lines before it loaded"]


def test_prometheus_query_range_export(tmp_path):
    export = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "gpu-07", "gpu": "0", "UUID": "GPU-x", "modelName": "NVIDIA A100-SXM4-80GB"},
         "values": [[1725148800, "10"], [1725148860, "90"], [1725148920, "NaN"]]},
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "Hostname": "gpu-07", "gpu": "0", "UUID": "GPU-x", "modelName": "NVIDIA A100-SXM4-80GB"},
         "values": [[1725148800, "1024"], [1725148860, "2048"]]},
        {"metric": {"__name__": "DCGM_FI_PROF_SM_ACTIVE", "instance": "10.1.2.3:9400", "gpu": "1", "UUID": "GPU-y"},
         "values": [[1725148800, "0.42"], [1725148860, "lots"]]},
    ]}}
    path = tmp_path / "dcgm_export.json"
    path.write_text(json.dumps(export))
    assert detect(path).connector.name == "prometheus_dcgm"
    rows, ctx = read_all(PrometheusDcgmConnector(), path)
    x = sorted((r["ts"].isoformat(), r["util_pct"], r["mem_used_mib"]) for r in rows if r["gpu_uuid"] == "GPU-x")
    assert x == [("2024-09-01T00:00:00+00:00", 10.0, 1024.0), ("2024-09-01T00:01:00+00:00", 90.0, 2048.0),
                 ("2024-09-01T00:02:00+00:00", None, None)]  # NaN is missing, never zero
    y = next(r for r in rows if r["gpu_uuid"] == "GPU-y")
    assert (y["host"], y["util_pct"], y["sm_active"], y["util_kind"]) == ("10.1.2.3", 42.0, 0.42, "dcgm_sm_active")
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(7, "point is not [unix time, number]")]


def test_a_node_label_from_prometheus_names_the_host_before_the_exporters_pod_name(tmp_path):
    """dcgm-exporter on Kubernetes without NODE_NAME labels its metrics Hostname="<its pod>"; the
    scrape's relabelling adds the node (kubernetes_node or node). The node is the host its bill and
    its workloads name: the pod name made every GPU a host of its own, unpriced and unheld."""
    export = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "nvidia-dcgm-exporter-cwbcm", "gpu": "0", "UUID": "GPU-x",
                    "kubernetes_node": "ip-172-31-54-152.ec2.internal"}, "values": [[1725148800, "10"]]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "nvidia-dcgm-exporter-q8x2m", "gpu": "0", "UUID": "GPU-y",
                    "node": "gpu-node-2"}, "values": [[1725148800, "20"]]},
    ]}}
    path = tmp_path / "dcgm_export.json"
    path.write_text(json.dumps(export))
    rows, _ = read_all(PrometheusDcgmConnector(), path)
    assert sorted((r["gpu_uuid"], r["host"]) for r in rows) == [("GPU-x", "ip-172-31-54-152"), ("GPU-y", "gpu-node-2")]


def test_dmon_sample_needs_a_start_time_and_then_loads_per_second(tmp_path):
    original = sample("telemetry/nvidia_smi_dmon_h100_load.txt")
    assert detect(original).connector.name == "nvidia_smi_dmon"
    assert detect(sample("telemetry/nvidia_smi_pmon_h100_load.txt")).connector is None  # per process, not per GPU
    with pytest.raises(ConnectorError, match="dmon output without timestamps"):
        read_all(NvidiaSmiDmonConnector(), original)
    named = tmp_path / "h100-node-3_20260714T081253.txt"
    shutil.copy(original, named)
    rows, ctx = read_all(NvidiaSmiDmonConnector(), named, timezone="Europe/Berlin")
    assert len(rows) == 5 and not ctx.quarantined
    assert rows[0]["host"] == "h100-node-3"
    assert [r["ts"].isoformat() for r in rows] == [f"2026-07-14T06:12:5{s}+00:00" for s in range(3, 8)]
    assert [(r["gpu_index"], r["power_w"], r["temperature_c"], r["util_pct"]) for r in rows][:2] == [(0, 631.0, 63.0, 100.0), (0, 634.0, 63.0, 100.0)]
    assert rows[0]["util_kind"] == "nvidia_smi_dmon_sm"


def test_dmon_with_date_and_time_columns(tmp_path):
    path = tmp_path / "gpu-9.txt"
    path.write_text("#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem\n"
                    "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %\n"
                    "20260901    08:00:00      0    300     50      -     80     10\n"
                    "20260901    08:00:00      1    100     40      -      -      0\n"
                    "20260901    08:00:01      0    305     50      -\n")
    rows, ctx = read_all(NvidiaSmiDmonConnector(), path, timezone="Asia/Shanghai")
    assert [(r["ts"].isoformat(), r["gpu_index"], r["util_pct"]) for r in rows] == [
        ("2026-09-01T00:00:00+00:00", 0, 80.0), ("2026-09-01T00:00:00+00:00", 1, None)]
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(5, "expected 8 columns, got 6")]


def test_alibaba_trace_duty_cycle_and_memory_load_as_pod_samples():
    duty, ctx = read_all(AlibabaGpuTraceConnector(), sample("telemetry/alibaba_gentd26_format_pod_gpu_duty_cycle_generated.csv"))
    assert len(duty) == 5000 and not ctx.quarantined
    assert duty[0]["ts"] == datetime.fromtimestamp(1662858720, UTC)
    assert duty[0]["pod"] == "2bbb5df93b3a815270a194e102c8d83c" and duty[0]["host"] == "pod-2bbb5df93b3a"
    assert {r["util_kind"] for r in duty} == {"trace_duty_cycle"}
    assert max(r["util_pct"] for r in duty) == 97.8
    memory, ctx = read_all(AlibabaGpuTraceConnector(), sample("telemetry/alibaba_gentd26_format_pod_gpu_memory_used_bytes_generated.csv"))
    assert len(memory) == 5000 and not ctx.quarantined
    first = memory[0]
    assert first["mem_used_mib"] == pytest.approx(23620222976 / 1048576) and first["util_pct"] is None
