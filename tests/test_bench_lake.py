"""`make bench`'s lake measurements that a typo would only show at bench time: the connector alone,
and the reader of DuckDB's own that bounds the telemetry target."""

from datetime import UTC, datetime

from tests.bench_cur import write_scaled
import duckdb

from connectors.base import ReadContext
from connectors.registry import builtin_connectors
from tests.bench_lake import connector_alone, one_pass_telemetry, write_nvidia_smi


def test_connector_alone_reads_every_sample_of_the_nvidia_smi_files(tmp_path):
    samples = write_nvidia_smi(tmp_path / "day1", hosts=2, samples=5, start=datetime(2026, 11, 1, tzinfo=UTC))
    result = connector_alone("nvidia_smi", sorted((tmp_path / "day1").glob("*.csv")))
    assert result["rc"] == 0, result
    assert result["tail"] == [str(samples)] == ["80"]


def test_connector_alone_reads_every_line_of_the_cur(tmp_path):
    write_scaled(tmp_path / "cur.csv", 2_000)
    result = connector_alone("aws_cur", [tmp_path / "cur.csv"])
    assert result["rc"] == 0, result
    assert result["tail"] == ["2000"]


def test_one_pass_reader_parses_and_writes_every_sample_as_the_connector_reads_it(tmp_path):
    # The bound is only a bound if it does the connector's parsing: every sample, every kept column,
    # the same values (host from the file name, numbers without their units).
    write_nvidia_smi(tmp_path / "day1", hosts=2, samples=5, start=datetime(2026, 11, 1, 23, 59, 30, tzinfo=UTC))
    result = one_pass_telemetry(tmp_path / "day1", tmp_path / "out")
    assert result["rc"] == 0, result
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["day=2026-11-01", "day=2026-11-02"]
    rows = duckdb.sql(f"SELECT host, gpu_index, gpu_uuid, gpu_model, util_pct, mem_used_mib, mem_total_mib, power_w, ts "
                      f"FROM read_parquet('{tmp_path}/out/*/*.parquet') ORDER BY host, ts, gpu_index").fetchall()
    assert len(rows) == 80
    assert rows[-1][:8] == ("gpu-node-001", 7, "GPU-0001-0007", "NVIDIA A100-SXM4-80GB", 18.0, 124.0, 81920.0, 64.0)
    connector = next(c for c in builtin_connectors() if c.name == "nvidia_smi")
    read = []
    for path in sorted((tmp_path / "day1").glob("*.csv")):
        for batch in connector.read(path, ReadContext(source_file=str(path), ingested_at=datetime(2026, 11, 3, tzinfo=UTC))):
            read += [(r["host"], r["gpu_index"], r["gpu_uuid"], r["gpu_model"], r["util_pct"], r["mem_used_mib"], r["mem_total_mib"],
                      r["power_w"], r["ts"].replace(tzinfo=None)) for r in batch.to_pylist()]
    assert sorted(read, key=lambda r: (r[0], r[8], r[1])) == rows
