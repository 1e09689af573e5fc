"""A telemetry file cut short (a copy still being written, a download that stopped) keeps every
complete row; the broken tail is quarantined with a reason naming its line."""

import gzip
import zlib

import pyarrow as pa
import pytest

from connectors.alibaba_trace import AlibabaGpuTraceConnector
from connectors.dcgm import DcgmScrapeConnector
from connectors.nvidia_smi import NvidiaSmiConnector
from connectors.nvidia_smi_dmon import NvidiaSmiDmonConnector
from models.schemas import GPU_SAMPLE
from pipelines.ingest.landing import ingest_landing
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import read_context, sample

HEADER = "timestamp, index, uuid, name, utilization.gpu [%], memory.used [MiB], power.draw [W]\n"
ROWS = 20_000


def smi_csv(rows: int = ROWS) -> bytes:
    return (HEADER + "".join(
        f"2026/07/14 {8 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.125, {i % 8}, GPU-{i % 8}, NVIDIA H100 80GB HBM3, "
        f"{i % 101} %, {1000 + i} MiB, {100 + i % 300}.25 W\n" for i in range(rows))).encode()


def read(connector, path, source="host=h100-01/smi.csv"):
    ctx = read_context(source)
    batches = list(connector.read(path, ctx))
    return (pa.Table.from_batches(batches, schema=GPU_SAMPLE).to_pylist() if batches else []), ctx


def cut_mid_row(data: bytes, line: int, into: int | None) -> bytes:
    """`data` cut `into` bytes into its `line`-th line (1-based); a negative `into` counts back from
    the line's end, None keeps the whole line but its newline."""
    start = 0
    for _ in range(line - 1):
        start = data.index(b"\n", start) + 1
    end = data.index(b"\n", start)
    return data[:end if into is None else (end + into if into < 0 else start + into)]


@pytest.mark.parametrize("line,into", [
    (22, 1), (2000, 10), (10_001, 25), (14_148, 48),  # inside a field, after a separator, mid-name
    (19_999, -3), (ROWS + 1, None),  # in the last field; a last row whole but for its newline
])
def test_nvidia_smi_cut_mid_row_keeps_the_complete_rows(tmp_path, line, into):
    data = smi_csv()
    cut = cut_mid_row(data, line, into)
    assert not cut.endswith(b"\n")
    path = tmp_path / "smi.csv"
    path.write_bytes(cut)
    rows, ctx = read(NvidiaSmiConnector(), path)
    assert len(rows) == line - 2  # the header and the data rows before the cut
    assert [r["x_SourceRow"] for r in rows[-1:]] == ([line - 2] if line > 2 else [])
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(line - 1, f"file ends mid-row at line {line}")]
    assert ctx.quarantined[0]["raw_record"] == cut[cut.rindex(b"\n") + 1:].decode()
    assert ctx.warnings == [f"file ends mid-row at line {line}: the incomplete row is quarantined, the rows before it loaded"]


def test_the_real_sample_cut_mid_row(tmp_path):
    data = sample("telemetry/nvidia_smi_query_gpu_h100_h200_l40s_idle_load.csv").read_bytes()
    path = tmp_path / "smi.csv"
    path.write_bytes(cut_mid_row(data, 6, 40))
    rows, ctx = read(NvidiaSmiConnector(), path)
    assert len(rows) == 4
    assert [q["reason"] for q in ctx.quarantined] == ["file ends mid-row at line 6"]


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.77])
def test_a_gzip_stream_that_ends_early_keeps_what_arrived(tmp_path, fraction):
    packed = gzip.compress(smi_csv())
    cut = packed[:int(len(packed) * fraction)]
    arrived = zlib.decompressobj(wbits=31).decompress(cut)  # what any reader can get out of it
    complete = arrived.count(b"\n") - 1
    path = tmp_path / "smi.csv.gz"
    path.write_bytes(cut)
    rows, ctx = read(NvidiaSmiConnector(), path)
    assert 0 < complete < ROWS and len(rows) == complete
    tail_line = complete + 2
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [
        (complete + 1, f"file ends mid-row at line {tail_line} (compressed stream cut short)")]


def test_a_gzip_stream_cut_at_a_row_boundary_warns(tmp_path):
    data = smi_csv(50)
    # A stream flushed after each row and then cut: every row arrived whole, the end marker did not.
    compressor = zlib.compressobj(wbits=31)
    packed = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    path = tmp_path / "smi.csv.gz"
    path.write_bytes(packed)
    rows, ctx = read(NvidiaSmiConnector(), path)
    assert len(rows) == 50 and not ctx.quarantined
    assert ctx.warnings == ["compressed stream ends early after line 51: the rows before it loaded, any after it are missing"]


def test_a_truncated_file_loads_with_a_warning_in_its_detail(tmp_path):
    landing = tmp_path / "landing" / "host=h100-01"
    landing.mkdir(parents=True)
    (landing / "smi.csv").write_bytes(cut_mid_row(smi_csv(), 22_148 - 8000, 30))  # not to hold 22k rows twice
    packed = gzip.compress(smi_csv(), mtime=0)
    (landing / "smi2.csv.gz").write_bytes(packed[: len(packed) // 2])
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, tmp_path / "landing")
    outcome = {o.path: o for o in summary.outcomes}
    first = outcome["host=h100-01/smi.csv"]
    assert (first.status, first.rows_loaded, first.rows_quarantined) == ("loaded", 14_146, 1)
    assert first.detail == ("14146 rows loaded, 1 quarantined; warning: file ends mid-row at line 14148: "
                            "the incomplete row is quarantined, the rows before it loaded")
    second = outcome["host=h100-01/smi2.csv.gz"]
    assert second.status == "loaded" and second.rows_quarantined == 1 and "compressed stream cut short" in second.detail
    assert fetch_all(conn, "SELECT reason FROM raw.quarantine WHERE x_SourceFile = 'host=h100-01/smi.csv'") == [
        ("file ends mid-row at line 14148",)]
    assert fetch_all(conn, "SELECT count(*) FROM raw.gpu_samples") == [(14_146 + second.rows_loaded,)]


def test_dmon_cut_mid_row(tmp_path):
    data = sample("telemetry/nvidia_smi_dmon_h100_load.txt").read_bytes()
    path = tmp_path / "h100-node-3_20260714T081253.txt"
    path.write_bytes(cut_mid_row(data, 6, 30))
    rows, ctx = read(NvidiaSmiDmonConnector(), path, path.name)
    assert len(rows) == 3  # lines 3-5; lines 1-2 are headers
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [(6, "file ends mid-row at line 6")]
    # and gzip-compressed, cut short
    packed = gzip.compress(data * 200)
    gz = tmp_path / "h100-node-3_20260714T081253.txt.gz"
    gz.write_bytes(packed[:-8])  # the end marker (CRC and size) lost
    rows, ctx = read(NvidiaSmiDmonConnector(), gz, gz.name)
    assert len(rows) == 5 * 200 and not ctx.quarantined
    assert ctx.warnings and ctx.warnings[0].startswith("compressed stream ends early after line 1400")


def test_alibaba_trace_cut_mid_row(tmp_path):
    data = sample("telemetry/alibaba_gentd26_format_pod_gpu_duty_cycle_generated.csv").read_bytes()
    path = tmp_path / "pod_gpu_duty_cycle.csv"
    path.write_bytes(cut_mid_row(data, 3001, 9))
    rows, ctx = read(AlibabaGpuTraceConnector(), path, path.name)
    assert len(rows) + len(ctx.quarantined) == 3000
    assert ctx.quarantined[-1]["reason"] == "file ends mid-row at line 3001"


def test_dcgm_scrape_cut_inside_a_value_is_not_loaded_as_a_smaller_value(tmp_path):
    text = ('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 45 1725148800000\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1"} 47 1725148860000\n')
    path = tmp_path / "scrape.prom"
    path.write_text(text[:-9])  # `47 17251488` parses, as a wrong timestamp
    rows, ctx = read(DcgmScrapeConnector(), path, path.name)
    assert [r["util_pct"] for r in rows] == [45.0]
    assert [q["reason"] for q in ctx.quarantined] == ["file ends mid-line at line 3"]
    gz = tmp_path / "scrape.prom.gz"
    gz.write_bytes(gzip.compress(text.encode())[:-8])
    rows, ctx = read(DcgmScrapeConnector(), gz, gz.name)
    assert len(rows) == 2 and ctx.warnings[0].startswith("compressed stream ends early")


def test_billing_files_still_fail_whole_when_cut(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    data = sample("billing/focus10_sample_multicloud_1000.csv").read_bytes()
    packed = gzip.compress(data)
    (landing / "focus.csv.gz").write_bytes(packed[: len(packed) // 2])
    [outcome] = ingest_landing(connect(tmp_path / "wh.duckdb"), landing).outcomes
    assert outcome.status == "failed" and outcome.rows_loaded == 0


def test_complete_lines_never_split_a_line_at_a_read_boundary(tmp_path):
    """Reads of CHUNK bytes end mid-line; every numbered line must still be whole (a 2.5 MiB scrape
    once had a line split in two at the 1 MiB boundary and quarantined as 'not a Prometheus sample line')."""
    from connectors._tabular import CompleteLines

    path = tmp_path / "big.prom"
    lines = [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i % 8}",Hostname="h"}} {i % 100} {1791644940000 + i}\n'.encode() for i in range(40_000)]
    path.write_bytes(b"".join(lines))
    assert path.stat().st_size > 2 * CompleteLines.CHUNK
    read = list(CompleteLines(path).numbered_lines())
    assert [raw for _, raw in read] == lines
    assert [n for n, _ in read] == list(range(1, len(lines) + 1))


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("size", [7, 4096, 1 << 20, 8 << 20])
def test_complete_lines_passes_on_exactly_the_bytes_up_to_the_last_newline(tmp_path, packed, size):
    """Whatever size is asked for (Arrow asks 8 MB; a line may be longer than a read), the reads
    together are the file up to its last newline, none longer than asked; the rest is the tail."""
    from connectors._tabular import CompleteLines

    long_line = b"x" * (3 * CompleteLines.CHUNK) + b"\n"  # longer than a read of 1 MB
    body = b"".join(f"{i},{'y' * (i % 50)}\n".encode() for i in range(60_000)) + long_line + b"last,row\n"
    data = body + b"cut,mid-r"
    path = tmp_path / "t.csv"
    path.write_bytes(gzip.compress(data) if packed else data)
    lines = CompleteLines(path)
    reads = []
    while chunk := lines.read(size):
        assert len(chunk) <= size
        reads.append(bytes(chunk))
    assert b"".join(reads) == body
    assert lines.lines == body.count(b"\n") and lines.tail == b"cut,mid-r" and not lines.stream_cut
    assert CompleteLines(path).read() == body  # everything at once
