"""--timezone reads local times of the files a run reads; a file is read once, so a later run with
another zone leaves the files already read as they were, and says so."""

from datetime import UTC, datetime

from typer.testing import CliRunner

from pipelines.cli.main import app
from tests.conftest import smi_minutes


def test_a_run_with_another_time_zone_says_the_files_already_read_keep_theirs(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "gpu-1.csv").write_text(smi_minutes(datetime(2026, 9, 1, tzinfo=UTC), 30, 1, lambda m, g: 50, "GPU-t"))
    base = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "r")]

    def run(*extra: str) -> str:
        result = CliRunner().invoke(app, [*base, *extra], terminal_width=400)
        assert result.exit_code == 0, result.output[-2000:]
        return result.output

    assert "--timezone" not in run()
    output = run("--timezone", "Asia/Shanghai")
    assert ("--timezone Asia/Shanghai: the files this warehouse already read keep the times they were read with (UTC); "
            "only new files are read in Asia/Shanghai.") in output
    assert "--timezone" not in run("--timezone", "Asia/Shanghai")  # the same zone again: nothing to say
