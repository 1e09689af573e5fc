"""`make bench`'s lake measurements that a typo would only show at bench time: the connector alone."""

from datetime import UTC, datetime

from tests.bench_cur import write_scaled
from tests.bench_lake import connector_alone, write_nvidia_smi


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
