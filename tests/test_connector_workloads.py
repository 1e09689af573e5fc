from datetime import UTC, datetime

import pyarrow as pa

from connectors.registry import detect
from connectors.workloads_csv import WorkloadsCsvConnector
from models.schemas import WORKLOAD
from tests.conftest import read_context


def read_all(path, timezone="UTC"):
    ctx = read_context(path.name, timezone)
    batches = list(WorkloadsCsvConnector().read(path, ctx))
    return (pa.Table.from_batches(batches, schema=WORKLOAD).to_pylist() if batches else []), ctx


def test_workloads_parse_normalise_phase_and_quarantine_bad_rows(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(
        "workload_id,phase,host,gpu_count,started_at,ended_at\n"
        "pt-1,Pre-Training,gpu-01,8,2026-09-01T00:00:00Z,2026-09-21T00:00:00Z\n"
        "ft-1,fine_tuning,gpu-01,4,2026-09-21 08:00:00,\n"
        "bad-phase,gaming,gpu-01,1,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n"
        "bad-gpus,inference,gpu-02,two,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z\n"
        "bad-order,inference,gpu-02,1,2026-09-03T00:00:00Z,2026-09-02T00:00:00Z\n"
    )
    assert detect(path).connector.name == "workloads_csv"
    rows, ctx = read_all(path, timezone="Asia/Shanghai")
    assert [(r["workload_id"], r["phase"], r["gpu_count"]) for r in rows] == [("pt-1", "pretraining", 8), ("ft-1", "finetuning", 4)]
    assert rows[0]["started_at"] == datetime(2026, 9, 1, tzinfo=UTC)
    assert rows[1]["started_at"] == datetime(2026, 9, 21, 0, 0, tzinfo=UTC)  # 08:00 in Shanghai
    assert rows[1]["ended_at"] is None  # still running
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [
        (3, "phase 'gaming' is not one of pretraining, finetuning, inference"),
        (4, "gpu_count 'two' is not a whole number ≥ 0"),
        (5, "ended_at is before started_at"),
    ]
