from datetime import UTC, datetime

import pyarrow as pa
import pytest

from connectors.nvidia_smi import NvidiaSmiConnector, host_from_path
from connectors.registry import detect
from models.schemas import GPU_SAMPLE
from tests.conftest import read_context, sample

SMI_SAMPLE = "telemetry/nvidia_smi_query_gpu_h100_h200_l40s_idle_load.csv"


def read_all(path, timezone="UTC"):
    ctx = read_context(path.name, timezone)
    batches = list(NvidiaSmiConnector().read(path, ctx))
    return (pa.Table.from_batches(batches, schema=GPU_SAMPLE).to_pylist() if batches else []), ctx


def test_sample_rows_parse_with_units_stripped_and_na_as_null():
    rows, ctx = read_all(sample(SMI_SAMPLE))
    assert len(rows) == 8 and not ctx.quarantined
    h100_idle, h100_load, mig_idle, mig_load, h200_idle, h200_load, l40s_a, l40s_b = rows
    assert h100_idle["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert (h100_idle["util_pct"], h100_idle["mem_used_mib"], h100_idle["mem_total_mib"], h100_idle["power_w"]) == (0.0, 0.0, 81559.0, 69.85)
    assert (h100_load["util_pct"], h100_load["mem_used_mib"], h100_load["power_w"], h100_load["temperature_c"]) == (100.0, 19818.0, 631.95, 59.0)
    # MIG mode: nvidia-smi prints [N/A] for utilization. Missing is NULL, never zero.
    assert mig_idle["util_pct"] is None and mig_idle["util_kind"] is None and mig_idle["mem_used_mib"] == 59.0
    assert mig_load["util_pct"] is None and mig_load["power_w"] == 433.78
    assert (h200_load["gpu_model"], h200_load["util_pct"], h200_load["mem_total_mib"]) == ("NVIDIA H200", 100.0, 143771.0)
    assert (l40s_a["gpu_model"], l40s_a["util_pct"], l40s_a["mem_used_mib"]) == ("NVIDIA L40S", 100.0, 0.0)
    assert l40s_b["util_pct"] == 9.0 and l40s_b["power_w"] == 110.23
    assert h100_idle["util_kind"] == "nvidia_smi_utilization_gpu"
    assert [r["x_SourceRow"] for r in rows] == list(range(1, 9))


def test_local_timestamps_become_utc_in_the_configured_zone():
    rows, _ = read_all(sample(SMI_SAMPLE), timezone="Europe/Berlin")
    # 2026/07/14 08:12:38.696 in Berlin (CEST, UTC+2) is 06:12:38.696 UTC.
    assert rows[0]["ts"] == datetime(2026, 7, 14, 6, 12, 38, 696000, tzinfo=UTC)
    rows_utc, _ = read_all(sample(SMI_SAMPLE))
    assert rows_utc[0]["ts"] == datetime(2026, 7, 14, 8, 12, 38, 696000, tzinfo=UTC)


def test_host_comes_from_host_folder_or_file_stem(tmp_path):
    assert host_from_path(tmp_path / "gpu-node-07.csv") == "gpu-node-07"
    assert host_from_path(tmp_path / "host=dgx-3" / "2026-09-01" / "smi.csv") == "dgx-3"
    # A capture time, or the day of a daily rotated log, is not part of the host.
    for name in ("gpu-d_20260714T081238.txt", "gpu-d_20260901.csv", "gpu-d-2026-09-01.csv", "gpu-d.2026-09-01.log"):
        assert host_from_path(tmp_path / name) == "gpu-d", name
    # A number that is no calendar date, or a date without a separator, stays.
    for name in ("rack-12345678.csv", "gpu-20261301.csv", "gpu20260901.csv", "gpu-2026-0901.csv"):
        assert host_from_path(tmp_path / name) == name.removesuffix(".csv"), name


HEADER = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"


def test_impossible_values_and_repeated_headers_are_quarantined(tmp_path):
    path = tmp_path / "gpu-node-07.csv"
    path.write_text(HEADER
                    + "2026/09/01 00:00:00.000, 0, GPU-a, NVIDIA A100, 50 %, 100 MiB, 300.00 W\n"
                    + "2026/09/01 00:01:00.000, 0, GPU-a, NVIDIA A100, 150 %, 100 MiB, 300.00 W\n"
                    + HEADER
                    + "not a time, 0, GPU-a, NVIDIA A100, 10 %, 100 MiB, 300.00 W\n"
                    + "2026/09/01 00:02:00.000, 0, GPU-a, NVIDIA A100, [Not Supported], ten MiB, [N/A]\n")
    assert detect(path).connector.name == "nvidia_smi"
    rows, ctx = read_all(path)
    assert [r["host"] for r in rows] == ["gpu-node-07"]
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [
        (2, "utilization out of 0–100: 150.0"),
        (3, "repeated header line"),
        (4, "timestamp is not nvidia-smi's format: 'not a time'"),
        (5, "memory.used is not a number"),
    ]


@pytest.mark.parametrize("content", ["", "timestamp, name\n", "a,b,c\n1,2,3\n"])
def test_files_that_are_not_nvidia_smi_are_not_claimed(tmp_path, content):
    path = tmp_path / "x.csv"
    path.write_text(content)
    d = detect(path)
    assert d.connector is None or d.connector.name != "nvidia_smi"


def test_the_repeated_autumn_hour_of_a_local_log_is_read_in_order(tmp_path):
    """Europe/Berlin steps back from 03:00 to 02:00 on 2026-10-25: a log written in local time shows
    02:00-02:59 twice. Read in order, the second pass is the later hour: 480 samples a minute apart
    are 480 distinct UTC minutes, not 420 with the first hour counted twice and the next one empty."""
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    berlin, start = ZoneInfo("Europe/Berlin"), datetime(2026, 10, 24, 20, 0, tzinfo=UTC)
    minutes = [start + timedelta(minutes=m) for m in range(8 * 60)]
    path = tmp_path / "gpu-b.csv"
    path.write_text(HEADER + "".join(f"{t.astimezone(berlin):%Y/%m/%d %H:%M:%S}.000, 0, GPU-b0, NVIDIA A100, 1 %, 100 MiB, 80.00 W\n"
                                     for t in minutes))
    rows, ctx = read_all(path, "Europe/Berlin")
    assert [r["ts"] for r in rows] == minutes and not ctx.quarantined


def test_the_local_clock_carries_a_step_back_across_frames():
    import polars as pl
    from connectors._telemetry import LocalClock

    local = [datetime(2026, 10, 25, h, m) for h, m in ((1, 45), (2, 15), (2, 45), (2, 15), (2, 45), (3, 15))]
    clock = LocalClock("Europe/Berlin")
    first = clock.to_utc(pl.DataFrame({"t": local[:3]}), "t").to_list()
    second = clock.to_utc(pl.DataFrame({"t": local[3:]}), "t").to_list()  # the step back is this frame's first row
    hours = [(t.hour, t.minute) for t in first + second]
    assert hours == [(23, 45), (0, 15), (0, 45), (1, 15), (1, 45), (2, 15)]
    # A year later the first pass is the earlier hour again: a step back is only good for the times it repeats.
    assert clock.to_utc(pl.DataFrame({"t": [datetime(2027, 10, 31, 2, 15)]}), "t").to_list()[0].hour == 0
