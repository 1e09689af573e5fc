"""Landing safety: only what is inside the landing folder is read, names cannot drive a terminal,
failures say where without quoting the data, and webhook URLs never leak."""

import logging
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

import pipelines.ingest.landing as ingest
from pipelines.ingest.landing import ingest_landing, landing_files
from pipelines.warehouse.connection import connect, fetch_all
from pipelines.report.webhook import DeliveryError, deliver, redact_url
from tests.conftest import sample

FOCUS_SAMPLE = "billing/focus10_sample_multicloud_1000.csv"
SMI_SAMPLE = "telemetry/nvidia_smi_query_gpu_h100_h200_l40s_idle_load.csv"
FOCUS_HEADER = "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd\n"
MARKER = "ZZ_PLANTED_MARKER_91f3"


@pytest.fixture
def opened(monkeypatch):
    """Every path the ingest hashed or sniffed, resolved: a refused file must never be among them."""
    seen: list[str] = []
    real_sha, real_detect = ingest.digest_of, ingest.detect

    def sha(path):
        seen.append(os.path.realpath(path))
        return real_sha(path)

    def detect(path, connectors=None):
        seen.append(os.path.realpath(path))
        return real_detect(path, connectors)

    monkeypatch.setattr(ingest, "digest_of", sha)
    monkeypatch.setattr(ingest, "detect", detect)
    return seen


def test_a_link_to_a_file_or_folder_outside_the_landing_is_refused_and_never_read(tmp_path, opened):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "other_team_bill.csv"  # recognisable billing content: it would load if read
    shutil.copy(sample(FOCUS_SAMPLE), secret)
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(sample(SMI_SAMPLE), landing / "smi.csv")
    (landing / "bill.csv").symlink_to(secret)
    (landing / "passwd").symlink_to("/etc/passwd")
    (landing / "elsewhere").symlink_to(outside, target_is_directory=True)
    (landing / "dangling.csv").symlink_to(tmp_path / "missing.csv")
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    refused = {o.path: o.detail for o in summary.by_status("refused")}
    assert refused == {"bill.csv": "symlink to outside the landing folder",
                       "passwd": "symlink to outside the landing folder",
                       "elsewhere": "directory symlink to outside the landing folder",
                       "dangling.csv": "symlink to outside the landing folder"}
    assert [o.path for o in summary.by_status("loaded")] == ["smi.csv"]
    assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines") == [(0,)]
    rows = fetch_all(conn, "SELECT path, status, detail, rows_read FROM raw.files WHERE status = 'refused' ORDER BY path")
    assert [(p, s, r) for p, s, _, r in rows] == [(p, "refused", 0) for p in sorted(refused)]
    assert str(secret) not in opened and "/etc/passwd" not in opened
    assert not any(p.startswith(str(outside)) for p in opened)
    assert landing_files(landing) == [landing / "smi.csv"]  # the sensor's digest ignores them too
    # A second run lists them again, still without reading them.
    again = ingest_landing(conn, landing)
    assert sorted(o.path for o in again.by_status("refused")) == sorted(refused)
    assert fetch_all(conn, "SELECT count(*) FROM raw.files WHERE status = 'refused'") == [(4,)]


def test_a_link_inside_the_landing_loads_once(tmp_path, opened):
    landing = tmp_path / "landing"
    (landing / "billing").mkdir(parents=True)
    (landing / ".archive").mkdir()
    shutil.copy(sample(FOCUS_SAMPLE), landing / "billing" / "focus.csv")
    (landing / "latest.csv").symlink_to(Path("billing") / "focus.csv")  # the same file under another name
    (landing / "current").symlink_to(landing / "billing", target_is_directory=True)  # a folder already walked
    shutil.copy(sample(SMI_SAMPLE), landing / ".archive" / "smi.csv")
    (landing / "smi.csv").symlink_to(landing / ".archive" / "smi.csv")  # a hidden file, linked on purpose
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    assert [(o.path, o.status, o.rows_loaded) for o in summary.outcomes] == [
        ("billing/focus.csv", "loaded", 1000), ("smi.csv", "loaded", 8)]
    assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines") == [(1000,)]


def test_a_directory_link_cycle_does_not_hang(tmp_path):
    landing = tmp_path / "landing"
    (landing / "a" / "b").mkdir(parents=True)
    shutil.copy(sample(SMI_SAMPLE), landing / "a" / "b" / "smi.csv")
    (landing / "a" / "b" / "loop").symlink_to(landing / "a", target_is_directory=True)
    (landing / "self").symlink_to(".", target_is_directory=True)
    (landing / "x").symlink_to("y")  # two links pointing at each other
    (landing / "y").symlink_to("x")
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the landing scan loops"))
    signal.alarm(30)
    try:
        summary = ingest_landing(connect(tmp_path / "wh.duckdb"), landing)
    finally:
        signal.alarm(0)
    assert [(o.path, o.status) for o in summary.outcomes if o.status != "refused"] == [("a/b/smi.csv", "loaded")]
    assert {o.path: o.detail for o in summary.by_status("refused")} == {
        "x": "symlink to nothing (its target is missing, or the link loops)",
        "y": "symlink to nothing (its target is missing, or the link loops)"}


def test_escape_sequences_in_file_names_are_stored_and_logged_escaped(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(sample(FOCUS_SAMPLE), landing / "bill\x1b[2J.csv")
    shutil.copy(sample(SMI_SAMPLE), landing / "gpu-7\x1b]0;pwned\x07.csv")
    (landing / "bad\x1b[31m.csv").write_text(FOCUS_HEADER + "1.0,1.0,USD,Usage,2026-09-01,2026-09-02,extra\n")
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    statuses = {o.path: o.status for o in summary.outcomes}
    # The bad file's one row has a field past the header: quarantined, so the file loaded nothing.
    assert statuses == {"bill\\x1b[2J.csv": "loaded", "gpu-7\\x1b]0;pwned\\x07.csv": "loaded", "bad\\x1b[31m.csv": "quarantined"}
    stored = fetch_all(conn, "SELECT path || coalesce(detail, '') FROM raw.files")
    stored += fetch_all(conn, "SELECT DISTINCT x_SourceFile FROM raw.cost_lines")
    stored += fetch_all(conn, "SELECT DISTINCT x_SourceFile || host FROM raw.gpu_samples")
    assert len(stored) == 5
    for (text,) in stored:
        assert "\x1b" not in text and "\x07" not in text
    assert fetch_all(conn, "SELECT DISTINCT host FROM raw.gpu_samples") == [("gpu-7]0;pwned",)]
    assert all("\x1b" not in o.detail for o in summary.outcomes)
    # The messages, not caplog.text: the capture handler's format is not ours to rely on (after the
    # Spark tests in the same worker it wrote pyspark's JSON records, which double every backslash).
    logged = "\n".join(caplog.messages)
    assert "\x1b" not in logged and "bill\\x1b[2J.csv" in logged
    # A second run finds the escaped path already loaded.
    assert ingest_landing(conn, landing).already_loaded == 2


def test_a_failure_names_line_and_column_and_never_quotes_the_line(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    landing = tmp_path / "landing"
    landing.mkdir()
    ok = "1.0,1.0,USD,Usage,2026-09-01,2026-09-02\n"
    (landing / "surplus.csv").write_text(FOCUS_HEADER + ok * 3 + f"2.0,2.0,USD,{MARKER},2026-09-01,2026-09-02,x\n")
    (landing / "short.csv").write_text(FOCUS_HEADER + ok + f"2.0,2.0,USD,{MARKER}\n" + ok)
    (landing / "latin1.csv").write_bytes((FOCUS_HEADER + ok).encode() + f"3.0,3.0,USD,{MARKER}caf\xe9,2026-09-01,2026-09-02\n".encode("latin-1"))
    (landing / "scrape.prom").write_text('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 5\n'
                                        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",,{MARKER}="1"}} 7\n')
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    failed = {o.path: o.detail for o in summary.by_status("failed")}
    assert failed == {
        "latin1.csv": "latin1.csv, line 3: malformed CSV: column ChargeCategory: not valid utf-8 text",
        "scrape.prom": "scrape.prom, line 3: not Prometheus text format",
    }
    # Ragged rows no longer fail their file: a surplus field quarantines its row, a short row is padded.
    reasons = dict(fetch_all(conn, "SELECT x_SourceFile, reason FROM raw.quarantine WHERE x_SourceFile = 'surplus.csv'"))
    assert reasons == {"surplus.csv": "line 5: Expected 6 columns, got 7: values past the last column, ChargePeriodEnd"}
    assert "fewer fields than the header" in dict(fetch_all(conn, "SELECT path, detail FROM raw.files"))["short.csv"]
    reasons = " ".join(r for (r,) in fetch_all(conn, "SELECT reason FROM raw.quarantine"))
    assert MARKER not in reasons.replace(f"'{MARKER}'", "")  # at most a short bad value, never a whole line
    details = fetch_all(conn, "SELECT string_agg(detail, ' ') FROM raw.files")[0][0]
    assert MARKER not in details and MARKER not in caplog.text
    assert "line 3" in caplog.text


def test_an_unexpected_error_is_told_briefly(tmp_path):
    from connectors.base import ReadContext
    from connectors.focus import FocusConnector

    class Chokes(FocusConnector):
        def read(self, path, ctx: ReadContext):
            raise ValueError("could not convert row: " + path.read_text())

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "focus.csv").write_text(FOCUS_HEADER + f"1.0,1.0,USD,Usage,2026-09-01,2026-09-02,{MARKER}\n" * 3)
    [outcome] = ingest_landing(connect(tmp_path / "wh.duckdb"), landing, connectors=(Chokes(),)).outcomes
    assert outcome.status == "failed" and outcome.detail.startswith("focus.csv: ValueError: could not convert row: ")
    assert MARKER not in outcome.detail and len(outcome.detail) < 130


SECRET_URLS = [
    "https://hooks.example/services/T0/B0/secretPATH",
    "https://hooks.example/services/T0%2FB0%2FsecretPATH",
    "https://hooks.example/hook?token=secretQUERY%2Fx&channel=ops",
]


@pytest.mark.parametrize("url", SECRET_URLS)
def test_webhook_urls_are_redacted_in_every_printed_form(url):
    from urllib.parse import quote, unquote, urlsplit

    parts = urlsplit(url)
    target = parts.path + ("?" + parts.query if parts.query else "")
    for form in (url, unquote(url), quote(url, safe=""), quote(quote(url, safe=""), safe=""), target,
                 quote(unquote(target), safe="/?=&"), target.replace("%2F", "%2f"),
                 f"HTTPSConnectionPool(host='hooks.example', port=443): Max retries exceeded with url: {target} (Caused by X)"):
        text = redact_url(f"error: {form} end", url)
        assert "secret" not in text, (form, text)
        assert text.startswith("error: ") and text.endswith(" end")


@pytest.mark.parametrize("path", ["/services/T0%2FB0%2FsecretPATH", "/hook?token=secretQUERY%2Fx&channel=ops",
                                  "/services/T0/B0/secret%20PATH"])
def test_webhook_delivery_errors_and_logs_never_carry_the_url(path, caplog):
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    caplog.set_level(logging.DEBUG, logger="urllib3")
    with pytest.raises(DeliveryError) as err:
        deliver(f"http://127.0.0.1:{port}{path}", {"text": "x"}, retries=1, backoff_s=0)
    assert f"127.0.0.1:{port}" in str(err.value)
    assert "secret" not in str(err.value)
    assert "Retrying" in caplog.text and "secret" not in caplog.text
