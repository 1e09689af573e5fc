"""A real GPU's telemetry, captured by the project on an NVIDIA H200 (driver 580.159.04): 20 s idle,
40 s of bf16 matmuls, 30 s of a 0.5 s on / 0.5 s off duty cycle, 20 s idle, logged at 1 s by
`nvidia-smi --query-gpu` and `nvidia-smi dmon` at once (tests/fixtures/capture_gpu_telemetry.sh,
tests/fixtures/samples/telemetry/SOURCES.md)."""

import shutil
from datetime import UTC, date, datetime

import pyarrow as pa
from connectors.base import ReadContext
from connectors.nvidia_smi import NvidiaSmiConnector
from connectors.nvidia_smi_dmon import NvidiaSmiDmonConnector
from models.schemas import GPU_SAMPLE
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline, sample

QUERY = "telemetry/nvidia_smi_query_gpu_h200_1s_idle_busy_halfduty.csv"
DMON = "telemetry/nvidia_smi_dmon_h200_1s_idle_busy_halfduty_20261204T142221.txt"
UUID = "GPU-00000000-0000-0000-0000-000000000000"  # the capture's uuid, masked
HALF_DUTY = (datetime(2026, 12, 4, 14, 23, 27, tzinfo=UTC), datetime(2026, 12, 4, 14, 23, 54, tzinfo=UTC))


def read(connector, relative):
    path = sample(relative)
    ctx = ReadContext(path.name, ingested_at=datetime(2026, 12, 4, 15, tzinfo=UTC))  # loaded after the capture
    rows = pa.Table.from_batches(list(connector.read(path, ctx)), schema=GPU_SAMPLE).to_pylist()
    return rows, ctx


def test_the_query_capture_reads_whole_with_nvidia_smis_own_header():
    # nvidia-smi names the clocks.sm field `clocks.current.sm [MHz]` and prints temperature.gpu without a unit.
    rows, ctx = read(NvidiaSmiConnector(), QUERY)
    assert len(rows) == 115 and not ctx.quarantined and not ctx.warnings
    first, busy = rows[0], rows[24]
    assert first["ts"] == datetime(2026, 12, 4, 14, 22, 21, 636000, tzinfo=UTC)
    assert (first["gpu_uuid"], first["gpu_index"], first["gpu_model"]) == (UUID, 0, "NVIDIA H200")
    assert (first["util_pct"], first["mem_used_mib"], first["mem_total_mib"], first["power_w"], first["temperature_c"]) == (
        0.0, 0.0, 143771.0, 76.93, 39.0)
    assert busy["ts"] == datetime(2026, 12, 4, 14, 22, 45, 688000, tzinfo=UTC)
    assert (busy["util_pct"], busy["mem_used_mib"], busy["power_w"]) == (100.0, 1139.0, 341.67)


def test_the_dmon_capture_reads_whole_timed_from_its_file_name():
    rows, ctx = read(NvidiaSmiDmonConnector(), DMON)
    assert len(rows) == 115 and not ctx.quarantined  # its header, printed three times, is layout
    assert [r["ts"] for r in (rows[0], rows[-1])] == [datetime(2026, 12, 4, 14, 22, 21, tzinfo=UTC),
                                                       datetime(2026, 12, 4, 14, 24, 15, tzinfo=UTC)]
    assert (rows[0]["gpu_index"], rows[0]["gpu_uuid"], rows[0]["power_w"], rows[0]["util_pct"]) == (0, None, 76.0, 0.0)


def test_a_duty_cycle_at_the_polling_period_reads_as_busy_to_one_tool_and_idle_to_the_other():
    """What the capture shows, kept as a fact the tests hold: under a 1 s duty cycle polled every
    second, `utilization.gpu` read 98-100 % and dmon's `sm` 0-2 % at the same seconds, while both
    report ~435 W, between the 77-119 W idle and ~690 W busy. A sampled busy signal can alias
    against a periodic workload; power is the tell."""
    query, _ = read(NvidiaSmiConnector(), QUERY)
    dmon, _ = read(NvidiaSmiDmonConnector(), DMON)

    def in_window(rows, column):
        values = [r[column] for r in rows if HALF_DUTY[0] <= r["ts"] <= HALF_DUTY[1]]
        return len(values), round(sum(values) / len(values), 2)

    assert in_window(query, "util_pct") == (27, 98.89)
    assert in_window(dmon, "util_pct") == (28, 1.82)
    assert in_window(query, "power_w") == (27, 438.12)
    assert in_window(dmon, "power_w") == (28, 433.71)


def gpu_minutes(tmp_path, files):
    landing = tmp_path / "landing" / "host=h200-01"
    landing.mkdir(parents=True)
    for path in files:
        shutil.copy(path, landing / path.name)
    warehouse = tmp_path / "wh.duckdb"
    outcome = run_pipeline(tmp_path / "landing", warehouse, as_of=date(2026, 12, 4))
    assert outcome.success and not outcome.failed_checks, outcome.failed_checks
    conn = connect(warehouse, read_only=True)
    try:
        return (fetch_all(conn, """SELECT gpu_key, strftime(minute, '%H:%M'), samples, busy_samples, util_kind,
                                          round(busy_fraction * coverage, 7)
                                   FROM core.gpu_minutes ORDER BY minute"""),
                fetch_all(conn, "SELECT source, gpu_key, count(*) FROM core.gpu_samples GROUP BY ALL ORDER BY 1, 2"))
    finally:
        conn.close()


def test_both_tools_logging_one_card_give_one_gpu(tmp_path):
    """dmon names the card by index only: its samples take the uuid nvidia-smi gives index 0 on that
    host that day, so the card is one GPU with both sources' samples, busy from the better signal
    (utilization.gpu), not two GPUs whose busy minutes and idle findings would count twice."""
    minutes, samples = gpu_minutes(tmp_path, [sample(QUERY), sample(DMON)])
    key = f"h200-01/{UUID}"
    assert samples == [("nvidia-smi", key, 115), ("nvidia-smi dmon", key, 115)]
    assert minutes == [
        (key, "14:22", 78, 39, "nvidia_smi_utilization_gpu", 0.2380325),
        (key, "14:23", 121, 61, "nvidia_smi_utilization_gpu", 0.9233375),
        (key, "14:24", 33, 17, "nvidia_smi_utilization_gpu", 0.0),
    ]


def test_an_index_with_two_uuids_that_day_stays_keyed_by_its_index(tmp_path):
    """Two cards at index 0 on one host in one day (one swapped for another): which one dmon saw is
    unknown, so its samples stay host/gpu0."""
    swapped = tmp_path / "later-card.csv"  # the same log two hours later, from another card at index 0
    swapped.write_text(sample(QUERY).read_text().replace(UUID, "GPU-00000000-0000-0000-0000-000000000001").replace(" 14:2", " 16:2"))
    minutes, samples = gpu_minutes(tmp_path, [sample(QUERY), sample(DMON), swapped])
    assert [(source, key) for source, key, _ in samples] == [
        ("nvidia-smi", "h200-01/GPU-00000000-0000-0000-0000-000000000000"),
        ("nvidia-smi", "h200-01/GPU-00000000-0000-0000-0000-000000000001"),
        ("nvidia-smi dmon", "h200-01/gpu0"),
    ]
    assert len({key for key, *_ in minutes}) == 3

