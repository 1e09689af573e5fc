"""The command line's clean refusals and exit codes (README, "Exit codes"), run as a user runs them.

Bad arguments: exit 2, one line on stderr, no traceback, nothing run. A run in which a file failed or
had every row quarantined, or no file a connector reads: exit 1, the files listed. An empty landing folder:
exit 66, nothing run.
FINOPS_* variables are option defaults. Data echoed to the terminal carries no control characters.
"""

import csv
import gzip
import io
import os
import shutil
import subprocess
import sys
from datetime import date, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines.cli.main import EXIT_NO_INPUT, app
from pipelines.settings import finding_kinds
from pipelines.text import for_terminal
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import REPO, sample

FOCUS = "billing/focus10_sample_multicloud_1000.csv"
FINOPS_VARS = ("FINOPS_LANDING", "FINOPS_WAREHOUSE", "FINOPS_REPORTS", "FINOPS_TIMEZONE", "FINOPS_REPORTING_CURRENCY",
               "FINOPS_FX_RATES", "FINOPS_PHASE_RULES", "FINOPS_CHARGE_RULES", "FINOPS_PRICE_CATALOG", "FINOPS_TCO_PARAMS",
               "FINOPS_PLANNED_RUNS", "FINOPS_WEBHOOK_URL", "FINOPS_HOST_NAMES")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in FINOPS_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))


def finops(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed entry point as a shell runs it: real exit code, real stdout and stderr."""
    full_env = {k: v for k, v in os.environ.items() if k not in FINOPS_VARS}
    full_env.update({"PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})})
    return subprocess.run([sys.executable, "-c", "from pipelines.cli.main import main; main()", *args],
                          capture_output=True, text=True, env=full_env, cwd=REPO, timeout=600)


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(app, list(args), env=env, terminal_width=200)


def landing_with(tmp_path: Path, **files: bytes | Path) -> Path:
    landing = tmp_path / "landing"
    landing.mkdir(exist_ok=True)
    for name, content in files.items():
        target = landing / name.replace("__", ".")
        if isinstance(content, Path):
            shutil.copy(content, target)
        else:
            target.write_bytes(content)
    return landing


def focus_rows(n: int, **overrides: str) -> bytes:
    """The first n rows of the FOCUS sample, with some columns overwritten."""
    with open(sample(FOCUS), newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [row for _, row in zip(range(n), reader)]
        fields = reader.fieldnames
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields)
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, **overrides})
    return out.getvalue().encode()


# --- 1. bad arguments: exit 2, one line on stderr, before any work --------------------------------------------------

def refusals(tmp_path: Path) -> list[tuple[list[str], str]]:
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS))
    wh = str(tmp_path / "wh.duckdb")
    run = ["run", "--landing", str(landing), "--warehouse", wh]
    (tmp_path / "hosts.csv").write_text("hostname,instance\nip-10-0-1-23,i-0abc\n")
    (tmp_path / "twice.csv").write_text("host,resource_id\nip-10-0-1-23,i-0abc\nip-10-0-1-99,i-0abc\n")
    return [
        ([*run, "--host-names", str(tmp_path / "hosts.csv")], "a host names CSV needs the columns host and resource_id"),
        ([*run, "--host-names", str(tmp_path / "twice.csv")],
         "resource i-0abc is named ip-10-0-1-23 (twice.csv, line 2) and ip-10-0-1-99 (twice.csv, line 3)"),
        ([*run, "--as-of", "12/10/2026"], "'12/10/2026' is not a date written YYYY-MM-DD"),
        ([*run, "--as-of", "20261210"], "is not a date written YYYY-MM-DD"),
        ([*run, "--as-of", "2026-02-30"], "is not a real date"),
        (["report", "--date", "2026-13-01", "--warehouse", wh], "'2026-13-01' is not a real date"),
        (["report", "--date", "yesterday", "--warehouse", wh], "is not a date written YYYY-MM-DD"),
        ([*run, "--timezone", "Mars/Olympus"], "'Mars/Olympus' is not an IANA time zone"),
        ([*run, "--timezone", "../../etc/passwd"], "is not an IANA time zone"),
        ([*run, "--reporting-currency", "dollars"], "'dollars' is not an ISO 4217 currency code"),
        ([*run, "--reporting-currency", "U5D"], "is not an ISO 4217 currency code"),
        ([*run, "--reporting-currency", "XYZ"], "'XYZ' is not an ISO 4217 currency code"),
        # An ISO code no rate reaches: every reported amount would be empty.
        ([*run, "--reporting-currency", "ARS"], "--reporting-currency ARS: no exchange rate reaches it"),
        (["findings", "--kind", "bogus", "--warehouse", wh], "'bogus' is not a finding kind; one of: egress"),
        (["findings", "--limit", "0", "--warehouse", wh], "--limit"),
        (["run", "--landing", str(tmp_path / "nowhere"), "--warehouse", wh], "does not exist"),
        (["run", "--warehouse", wh], "Missing option '--landing'"),
        (["no-such-command"], "No such command"),
    ]


def test_every_bad_argument_is_refused_in_one_line_with_exit_2_before_any_work(tmp_path):
    for args, message in refusals(tmp_path):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stdout == "", (args, result.stdout)
        lines = result.stderr.splitlines()
        assert len(lines) == 1, (args, result.stderr)
        assert message in lines[0], (args, lines[0])
        assert "Traceback" not in result.output and "╭" not in result.output
    # Nothing ran: no warehouse, no reports, no Dagster run.
    assert not (tmp_path / "wh.duckdb").exists() and not (tmp_path / "reports").exists()


def test_refusals_from_the_real_entry_point(tmp_path):
    """Through the console script's code path (sys.exit, real stderr), as a shell or scheduler sees it."""
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS))
    for args in (["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--as-of", "12/10/2026"],
                 ["report", "--date", "2026-13-01", "--warehouse", str(tmp_path / "wh.duckdb")],
                 ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--timezone", "Mars/Olympus"],
                 ["findings", "--kind", "bogus"]):
        done = finops(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stdout == ""
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "wh.duckdb").exists()


def test_a_bad_value_in_the_environment_is_refused_too(tmp_path):
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS))
    result = invoke("run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"),
                    env={"FINOPS_TIMEZONE": "Mars/Olympus"})
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert "FINOPS_TIMEZONE" in result.stderr and "Mars/Olympus" in result.stderr


def test_good_arguments_are_accepted_and_normalised():
    from pipelines.cli.main import check_finding_kind
    from pipelines.settings import check_currency, check_timezone, parse_iso_date

    assert parse_iso_date("2026-10-12") == date(2026, 10, 12)
    assert check_timezone("Asia/Shanghai") == "Asia/Shanghai" and check_timezone("UTC") == "UTC"
    assert check_currency("eur") == "EUR"
    assert check_finding_kind("EGRESS") == "egress"


def test_finding_kinds_come_from_the_hidden_costs_sql_and_are_listed_in_help():
    kinds = finding_kinds()
    assert {"egress", "slow_disk_idle", "unused_gpu", "unused_commitment", "overprovisioned_inference"} <= set(kinds)
    for kind in kinds:  # each is a per-kind table whose rows carry that kind
        assert f"'{kind}' AS kind" in (REPO / "sql" / "findings" / f"{kind}.sql").read_text()
    help_text = "".join(invoke("findings", "--help").stdout.replace("│", "").split())  # the table may wrap a name
    assert f"Onlythiskind:{','.join(kinds)}." in help_text


# --- 2. files that did not load, and an empty landing folder -------------------------------------------------------

def test_a_run_with_a_failed_file_exits_1_and_lists_it(tmp_path):
    packed = gzip.compress(sample(FOCUS).read_bytes())
    truncated = packed[: len(packed) // 2]  # a gzip cut short mid-stream, its head still recognisable
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS), cut__csv__gz=truncated)
    warehouse = tmp_path / "wh.duckdb"
    result = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse), "--reports", str(tmp_path / "reports"))
    assert result.exit_code == 1, result.output[-3000:]
    assert "Traceback" not in result.output
    tail = result.stdout.splitlines()
    assert tail[-2] == "1 file(s) did not load:", tail[-5:]
    assert tail[-1].startswith("failed: cut.csv.gz — "), tail[-1]
    conn = connect(warehouse, read_only=True)
    try:  # the good file still loaded
        assert fetch_all(conn, "SELECT count(*) FROM core.cost_lines") == [(1000,)]
        assert fetch_all(conn, "SELECT status FROM raw.files WHERE path = 'cut.csv.gz'") == [("failed",)]
    finally:
        conn.close()


def test_a_first_run_whose_step_fails_says_so_and_leaves_no_warehouse(tmp_path):
    """Nothing is published when a step fails; on a first run there is then no warehouse at all, and
    the command says what happened in plain lines (no traceback from reading a file that is not there)."""
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS))
    broken = tmp_path / "planned.yaml"
    broken.write_text("planned_runs: [{name: x, start: not-a-date}]\n")  # the anomaly step fails on it
    warehouse = tmp_path / "wh.duckdb"
    result = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse), "--planned-runs", str(broken),
                    "--reports", str(tmp_path / "reports"))
    assert result.exit_code == 1, result.output[-3000:]
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    assert "was left as it was before the run" in result.output
    assert not warehouse.exists()


def test_a_wholly_quarantined_file_exits_1_and_is_listed(tmp_path):
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS), bad__csv=focus_rows(20, BillingCurrency=""))
    warehouse = tmp_path / "wh.duckdb"
    result = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert result.exit_code == 1, result.output[-3000:]
    tail = result.stdout.splitlines()
    assert tail[-2] == "1 file(s) did not load:", tail[-5:]
    assert tail[-1].startswith("quarantined: bad.csv — every row quarantined (20 rows, nothing loaded)"), tail[-1]
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, "SELECT rows_loaded, rows_quarantined FROM raw.files WHERE path = 'bad.csv'") == [(0, 20)]
    finally:
        conn.close()
    # Run again: the file is retried (a mapping may have been fixed meanwhile), fails again, exits 1 again.
    again = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert again.exit_code == 1, again.output[-3000:]
    assert again.stdout.splitlines()[-1].startswith("quarantined: bad.csv — every row quarantined (20 rows")
    # Once the file is taken away, nothing fails and the run exits 0; the quarantine kept its rows.
    (landing / "bad.csv").unlink()
    clean = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert clean.exit_code == 0, clean.output[-3000:]
    assert "did not load" not in clean.output


def test_an_empty_landing_folder_says_so_and_runs_nothing(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / ".hidden").write_text("skipped like every hidden file")
    warehouse = tmp_path / "wh.duckdb"
    result = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert result.exit_code == EXIT_NO_INPUT == 66
    assert result.output.strip() == f"no files in {landing.resolve()}: nothing loaded, no report written"
    assert not warehouse.exists() and not (tmp_path / "reports").exists()


def test_a_landing_folder_no_connector_reads_fails_the_run(tmp_path):
    """Files, but none a connector reads (a wrong folder, an unknown export): exit 1 every run, the
    folder named; beside a file that loads, the same stray file is only skipped."""
    landing = tmp_path / "landing"
    (landing / "billing").mkdir(parents=True)
    (landing / "billing" / "mystery.csv").write_text("foo,bar,baz\n1,2,3\n")
    (landing / "notes.txt").write_text("hello\n")
    warehouse = tmp_path / "wh.duckdb"
    for _ in range(2):  # unrecognised files are looked at again by every run, and fail it again
        result = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
        assert result.exit_code == 1, result.output[-3000:]
        assert result.stdout.splitlines()[-1].startswith(
            f"nothing recognised: {landing.resolve()} — no connector reads any of its 2 files")
        assert "skipped: billing/mystery.csv" in result.output
        # The schedule's runs say so too: a warning on raw.files (Dagster's run itself succeeds).
        assert "check warned: raw/files:some_file_recognised — billing/mystery.csv, notes.txt" in result.output
    # A new version at the same path is still one file.
    (landing / "billing" / "mystery.csv").write_text("foo,bar,baz\n4,5,6\n")
    result = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert result.exit_code == 1 and "no connector reads any of its 2 files" in result.stdout.splitlines()[-1]
    shutil.copy(sample(FOCUS), landing / "focus.csv")
    loaded = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert loaded.exit_code == 0, loaded.output[-3000:]
    assert "nothing recognised" not in loaded.output and "skipped: billing/mystery.csv" in loaded.output
    assert "some_file_recognised" not in loaded.output
    # The export moved away and the folder keeps only what no connector reads: what the warehouse
    # loaded before does not make the run a success.
    (landing / "focus.csv").unlink()
    moved = invoke("run", "--landing", str(landing), "--warehouse", str(warehouse))
    assert moved.exit_code == 1, moved.output[-3000:]
    assert moved.stdout.splitlines()[-1].startswith(f"nothing recognised: {landing.resolve()} — no connector reads any of its 2 files")


# --- 3. FINOPS_* as option defaults; a report beside its warehouse -------------------------------------------------

@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One small warehouse, built once through the CLI with FINOPS_* variables only."""
    root = tmp_path_factory.mktemp("built")
    landing = landing_with(root, focus__csv=sample(FOCUS))
    warehouse = root / "store" / "wh.duckdb"
    done = finops("run", env={"FINOPS_LANDING": str(landing), "FINOPS_WAREHOUSE": str(warehouse),
                              "DAGSTER_HOME": str(root / "dagster_home")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (root / "store" / "reports" / "run_summary.json").exists()
    return warehouse


def test_read_commands_use_finops_warehouse(built, tmp_path):
    env = {"FINOPS_WAREHOUSE": str(built)}
    findings = invoke("findings", env=env)
    assert findings.exit_code == 0, findings.output
    assert "hidden costs by kind" in findings.output
    assert "no warehouse" not in findings.output
    tco = invoke("tco", env=env)  # that warehouse's GPU charges (never busy: no telemetry) are priced
    assert tco.exit_code == 0 and "purchasing strategies" in tco.output, tco.output
    # A warehouse that is not there is named: proof the variable was read.
    missing = invoke("findings", env={"FINOPS_WAREHOUSE": str(tmp_path / "none.duckdb")})
    assert missing.exit_code == 1 and f"no warehouse at {tmp_path / 'none.duckdb'}" in missing.output
    missing = invoke("tco", env={"FINOPS_WAREHOUSE": str(tmp_path / "none.duckdb")})
    assert missing.exit_code == 1 and "no warehouse at" in missing.output
    for command in ("findings", "report", "tco", "run"):
        assert "FINOPS_WAREHOUSE" in invoke(command, "--help").stdout


def test_report_goes_beside_its_warehouse(built, tmp_path):
    day = _last_day(built) + timedelta(days=2)
    # FINOPS_WAREHOUSE alone: the report lands in reports/ beside it.
    result = invoke("report", "--date", day.isoformat(), env={"FINOPS_WAREHOUSE": str(built)})
    assert result.exit_code == 0, result.output
    assert (built.parent / "reports" / day.isoformat() / "report.html").exists()
    # --warehouse X (a copy elsewhere): reports/ beside X, never the demo's folder.
    other = tmp_path / "elsewhere" / "copy.duckdb"
    other.parent.mkdir()
    shutil.copy(built, other)
    result = invoke("report", "--warehouse", str(other), "--date", day.isoformat())
    assert result.exit_code == 0, result.output
    assert (other.parent / "reports" / day.isoformat() / "report.json").exists()
    # --out wins.
    result = invoke("report", "--warehouse", str(other), "--date", day.isoformat(), "--out", str(tmp_path / "mine"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "mine" / day.isoformat() / "report.md").exists()


def _last_day(warehouse: Path) -> date:
    conn = connect(warehouse, read_only=True)
    try:
        return fetch_all(conn, "SELECT max(day) FROM marts.daily_cost")[0][0]
    finally:
        conn.close()


# --- 4. no control characters from data reach the terminal ---------------------------------------------------------

def test_for_terminal_drops_control_characters():
    assert for_terminal("a\x1b[31mred\x1b[0m\x07\x9b2J\u202eb") == "a[31mred[0m2Jb"
    assert for_terminal("two\nlines\tand tab") == "two lines and tab"
    assert for_terminal("two\nlines\tand tab", multiline=True) == "two\nlines\tand tab"
    assert for_terminal(None) == ""


def test_a_file_name_with_an_escape_sequence_is_printed_without_it(tmp_path):
    evil = "evil\x1b[31m.csv.gz"
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS))
    packed = gzip.compress(sample(FOCUS).read_bytes())
    (landing / evil).write_bytes(packed[: len(packed) // 2])  # claimed, then fails
    done = finops("run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"),
                  env={"DAGSTER_HOME": str(tmp_path / "dagster_home")})
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    for stream in (done.stdout, done.stderr):  # the summary, and Dagster's error log line on the console
        assert "\x1b" not in stream, [line for line in stream.splitlines() if "\x1b" in line]
    # The stored path writes the ESC byte as its escape: visible, harmless.
    assert "failed: evil\\x1b[31m.csv.gz — " in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_warehouse_open_for_writing_elsewhere_or_no_duckdb_file_is_refused_in_one_line(built, tmp_path):
    """A run replaces the published file: a process writing to it (`duckdb.connect(path)` without
    read_only) would lose what it writes, so the run refuses (exit 75) and names that process. A
    read-only reader never blocks. A file that is no warehouse is one line, not a traceback."""
    warehouse = tmp_path / "wh.duckdb"
    shutil.copy(built, warehouse)
    landing = landing_with(tmp_path, focus__csv=sample(FOCUS))
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('open', flush=True); time.sleep(120)", str(warehouse)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        before = warehouse.read_bytes()
        ran = finops("run", "--landing", str(landing), "--warehouse", str(warehouse))
        assert ran.returncode == 75 and "Traceback" not in ran.stderr
        assert "is open for writing in another process (" in ran.stderr and f"pid {holder.pid})" in ran.stderr
        assert warehouse.read_bytes() == before  # untouched
        read = invoke("findings", "--warehouse", str(warehouse))
        assert read.exit_code == 1 and "cannot open the warehouse" in read.output and "Conflicting lock" in read.output
    finally:
        holder.kill()
        holder.wait()
    not_duckdb = tmp_path / "notes.duckdb"
    not_duckdb.write_text("not a warehouse\n")
    for args in (["findings"], ["report"], ["tco"]):
        refused = invoke(*args, "--warehouse", str(not_duckdb))
        assert refused.exit_code == 1 and "not a valid DuckDB database file" in refused.output, refused.output
        assert len(refused.output.strip().splitlines()) <= 2  # one line, folded at most once
    refused = finops("run", "--landing", str(landing), "--warehouse", str(not_duckdb))
    assert refused.returncode == 1 and "cannot write" in refused.stderr and "Traceback" not in refused.stderr
    assert not_duckdb.read_text() == "not a warehouse\n"
