import shutil
import subprocess
import sys
import textwrap

import pytest

from pipelines.ingest.landing import ingest_landing
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import REPO, sample

FOCUS_SAMPLE = "billing/focus10_sample_multicloud_1000.csv"
SMI_SAMPLE = "telemetry/nvidia_smi_query_gpu_h100_h200_l40s_idle_load.csv"


@pytest.fixture
def landing(tmp_path):
    folder = tmp_path / "landing"
    (folder / "billing").mkdir(parents=True)
    (folder / "host=h100-01").mkdir()
    shutil.copy(sample(FOCUS_SAMPLE), folder / "billing" / "focus.csv")
    shutil.copy(sample(SMI_SAMPLE), folder / "host=h100-01" / "smi.csv")
    shutil.copy(sample("telemetry/acme_cluster_summary.csv"), folder / "cluster_summary.csv")
    return folder


def counts(conn):
    return {t: fetch_all(conn, f"SELECT count(*) FROM {t}")[0][0]
            for t in ("raw.files", "raw.cost_lines", "raw.gpu_samples", "raw.quarantine")}


def test_each_file_loads_once_unrecognised_ones_are_listed(tmp_path, landing):
    conn = connect(tmp_path / "wh.duckdb")
    first = ingest_landing(conn, landing)
    assert sorted((o.path, o.status) for o in first.outcomes) == [
        ("billing/focus.csv", "loaded"), ("cluster_summary.csv", "unrecognized"), ("host=h100-01/smi.csv", "loaded")]
    before = counts(conn)
    assert before == {"raw.files": 3, "raw.cost_lines": 1000, "raw.gpu_samples": 8, "raw.quarantine": 0}
    assert fetch_all(conn, "SELECT DISTINCT host FROM raw.gpu_samples") == [("h100-01",)]

    second = ingest_landing(conn, landing)
    assert second.already_loaded == 2
    assert [o.status for o in second.outcomes] == ["unrecognized"]  # re-examined: a connector may have arrived
    assert counts(conn) == before

    shutil.copy(landing / "billing" / "focus.csv", landing / "billing" / "focus-copy.csv")
    third = ingest_landing(conn, landing)
    assert [(o.path, o.status) for o in third.outcomes if o.status != "unrecognized"] == [("billing/focus-copy.csv", "duplicate")]
    assert counts(conn)["raw.cost_lines"] == 1000


def test_a_re_export_at_the_same_path_replaces_the_earlier_file(tmp_path, landing):
    conn = connect(tmp_path / "wh.duckdb")
    ingest_landing(conn, landing)
    path = landing / "billing" / "focus.csv"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:501]))  # the provider re-exported the file with 500 rows
    ingest_landing(conn, landing)
    statuses = fetch_all(conn, "SELECT status, rows_loaded FROM raw.files WHERE path = 'billing/focus.csv' ORDER BY ingested_at")
    assert statuses == [("replaced", 1000), ("loaded", 500)]
    current = fetch_all(conn, """SELECT count(*) FROM raw.cost_lines c JOIN raw.files f
                                 ON f.path = c.x_SourceFile AND f.sha256 = c.x_SourceSha256 AND f.status = 'loaded'
                                 WHERE f.kind = 'billing'""")
    assert current == [(500,)]


def test_the_same_file_rewritten_in_place_with_crlf_line_endings_keeps_counting(tmp_path, landing):
    """A sync tool or an editor rewrites a file with other line endings: the same content at the same
    path. The loaded version keeps counting; the rewrite is a duplicate of it (it once replaced it
    and, being a duplicate, left nothing of the file loaded)."""
    conn = connect(tmp_path / "wh.duckdb")
    ingest_landing(conn, landing)
    for path in (landing / "billing" / "focus.csv", landing / "host=h100-01" / "smi.csv"):
        path.write_bytes(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    second = ingest_landing(conn, landing)
    assert sorted((o.path, o.status, o.detail) for o in second.outcomes if o.status != "unrecognized") == [
        ("billing/focus.csv", "duplicate", "same content as the version of this file already loaded"),
        ("host=h100-01/smi.csv", "duplicate", "same content as the version of this file already loaded")]
    assert fetch_all(conn, "SELECT path, status, rows_loaded FROM raw.files WHERE status <> 'unrecognized' ORDER BY path, ingested_at") == [
        ("billing/focus.csv", "loaded", 1000), ("billing/focus.csv", "duplicate", 0),
        ("host=h100-01/smi.csv", "loaded", 8), ("host=h100-01/smi.csv", "duplicate", 0)]
    assert fetch_all(conn, """SELECT f.kind, count(*) FROM raw.files AS f
                              JOIN (SELECT x_SourceFile, x_SourceSha256 FROM raw.cost_lines
                                    UNION ALL SELECT x_SourceFile, x_SourceSha256 FROM raw.gpu_samples) AS r
                                ON f.path = r.x_SourceFile AND f.sha256 = r.x_SourceSha256
                              WHERE f.status = 'loaded' GROUP BY 1 ORDER BY 1""") == [("billing", 1000), ("telemetry", 8)]
    # Changed again, for real this time: the new content replaces both earlier versions.
    path = landing / "billing" / "focus.csv"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:501]))
    ingest_landing(conn, landing)
    assert fetch_all(conn, "SELECT status, rows_loaded FROM raw.files WHERE path = 'billing/focus.csv' ORDER BY ingested_at") == [
        ("replaced", 1000), ("replaced", 0), ("loaded", 500)]


def test_a_claimed_file_that_cannot_be_parsed_fails_alone_naming_file_and_line(tmp_path, landing):
    broken = landing / "billing" / "broken.csv"
    broken.write_bytes(b"BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd\n"
                       b"1.0,1.0,USD,Usage,2026-09-01,2026-09-02\n"
                       b"2.0,2.0,USD,Usage \xe9,2026-09-01,2026-09-02\n")  # not UTF-8 text
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    failed = summary.by_status("failed")
    assert [o.path for o in failed] == ["billing/broken.csv"]
    assert "billing/broken.csv, line 3: malformed CSV: column ChargeCategory: not valid utf-8 text" in failed[0].detail
    assert counts(conn)["raw.cost_lines"] == 1000  # the good file loaded; nothing of the broken one did
    assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines WHERE x_SourceFile = 'billing/broken.csv'") == [(0,)]


def test_a_row_with_surplus_fields_is_quarantined_alone(tmp_path, landing):
    (landing / "billing" / "surplus.csv").write_text(
        "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd\n"
        "1.0,1.0,USD,Usage,2026-09-01,2026-09-02\n"
        "2.0,2.0,USD,Usage,2026-09-01,2026-09-02,surplus,fields\n")
    conn = connect(tmp_path / "wh.duckdb")
    ingest_landing(conn, landing)
    assert fetch_all(conn, "SELECT status, rows_loaded, rows_quarantined FROM raw.files WHERE path = 'billing/surplus.csv'") == [
        ("loaded", 1, 1)]
    assert fetch_all(conn, "SELECT x_SourceRow, reason FROM raw.quarantine WHERE x_SourceFile = 'billing/surplus.csv'") == [
        (2, "line 3: Expected 6 columns, got 8: values past the last column, ChargePeriodEnd")]


KILLER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from connectors.focus import FocusConnector
    from pipelines.ingest.landing import ingest_landing
    from pipelines.warehouse.connection import connect

    class DiesMidFile(FocusConnector):
        def read(self, path, ctx):
            for batch in super().read(path, ctx):
                yield batch
                os.kill(os.getpid(), signal.SIGKILL)  # the machine dies after the first batch

    ingest_landing(connect({warehouse!r}), Path({landing!r}), connectors=(DiesMidFile(),))
""")


def test_a_run_killed_mid_file_leaves_the_warehouse_as_before(tmp_path, landing):
    warehouse = tmp_path / "wh.duckdb"
    conn = connect(warehouse)
    ingest_landing(conn, landing)  # a first, complete run
    before = counts(conn)
    conn.close()
    extra = landing / "billing" / "september.csv"
    lines = sample(FOCUS_SAMPLE).read_text().splitlines(keepends=True)
    extra.write_text(lines[0] + "".join(lines[1:400]))  # new content, not yet loaded
    script = KILLER.format(repo=str(REPO), warehouse=str(warehouse), landing=str(landing))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert result.returncode == -9, result.stderr.decode()[-2000:]
    conn = connect(warehouse)
    assert counts(conn) == before  # the half-loaded file left no trace
    assert fetch_all(conn, "SELECT count(*) FROM raw.files WHERE path = 'billing/september.csv'") == [(0,)]
    summary = ingest_landing(conn, landing)  # and the next run loads it normally
    assert [(o.path, o.status, o.rows_loaded) for o in summary.outcomes if o.status == "loaded"] == [("billing/september.csv", "loaded", 399)]


def test_a_warehouse_from_an_older_version_is_brought_up_to_the_current_schemas(tmp_path):
    from pipelines.warehouse.connection import WarehouseSchemaError, ensure_warehouse

    conn = connect(tmp_path / "old.duckdb")
    conn.execute("CREATE SCHEMA raw")
    # raw.workloads as the first release made it: phase required, no account / labels columns.
    conn.execute("""CREATE TABLE raw.workloads (workload_id VARCHAR NOT NULL, phase VARCHAR NOT NULL, host VARCHAR,
                    gpu_count INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL, ended_at TIMESTAMPTZ)""")
    conn.execute("INSERT INTO raw.workloads VALUES ('old-1', 'inference', 'gpu-1', 1, '2026-09-01 00:00:00+00', NULL)")
    ensure_warehouse(conn)
    columns = dict(fetch_all(conn, "SELECT column_name, is_nullable FROM information_schema.columns "
                                   "WHERE table_schema = 'raw' AND table_name = 'workloads'"))
    assert {"account", "labels", "x_SourceSha256"} <= columns.keys() and columns["phase"] == "YES"
    assert fetch_all(conn, "SELECT workload_id, phase, account FROM raw.workloads") == [("old-1", "inference", None)]
    conn.execute("ALTER TABLE raw.quarantine ALTER COLUMN reason TYPE INTEGER USING 0")
    with pytest.raises(WarehouseSchemaError, match="raw.quarantine.reason is INTEGER in the warehouse but VARCHAR"):
        ensure_warehouse(conn)


FOCUS_HEADER = "BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,BillingPeriodStart,BillingPeriodEnd,ProviderName,BillingAccountId\n"


def focus_month(amounts, month="2026-09", account="acct-1"):
    period = f"{month}-01T00:00:00Z,2026-10-01T00:00:00Z,AWS,{account}"
    return FOCUS_HEADER + "".join(f"{a},{a},USD,Usage,{month}-0{d + 1}T00:00:00Z,{month}-0{d + 2}T00:00:00Z,{period}\n"
                                  for d, a in enumerate(amounts))


def current_total(warehouse):
    """Build core.cost_lines with its own SQL file and total it."""
    from pipelines.settings import ALL_PERIODS
    from pipelines.warehouse.connection import run_sql_file

    conn = connect(warehouse)
    conn.execute((REPO / "sql" / "macros.sql").read_text())
    conn.execute("CREATE TABLE IF NOT EXISTS core.fx_rates (rate_date DATE, from_currency VARCHAR, to_currency VARCHAR, rate DECIMAL(24,10), source VARCHAR)")
    run_sql_file(conn, "core.billing_lines")
    run_sql_file(conn, "core.service_names_by_billing_month", {"billing_months": [ALL_PERIODS]})
    run_sql_file(conn, "core.cost_lines", {"reporting_currency": "USD", "max_rate_age_days": 45,
                                           "billing_months": [ALL_PERIODS]})
    total = fetch_all(conn, "SELECT sum(EffectiveCost), count(*) FROM core.cost_lines")[0]
    conn.close()
    return total


def test_a_restated_month_replaces_the_earlier_delivery_and_parts_of_one_delivery_add_up(tmp_path):
    from decimal import Decimal

    landing = tmp_path / "landing"
    warehouse = tmp_path / "wh.duckdb"
    # One delivery in two parts (the Data Exports layout names it: data/BILLING_PERIOD=…/<execution>/).
    first = landing / "focus-export" / "data" / "BILLING_PERIOD=2026-09" / "exec-1"
    first.mkdir(parents=True)
    (first / "part0.csv").write_text(focus_month(["10.00", "20.00"]))
    (first / "part1.csv").write_text(focus_month(["5.00"]))
    conn = connect(warehouse)
    conn.execute("CREATE SCHEMA IF NOT EXISTS core")
    assert ingest_landing(conn, landing).superseded == []
    conn.close()
    assert current_total(warehouse) == (Decimal("35.000000"), 3)
    # The provider restates the month in a new delivery: only it counts now (no manifest says when
    # each was made, so the one with the later line dates is the newer).
    second = landing / "focus-export" / "data" / "BILLING_PERIOD=2026-09" / "exec-2"
    second.mkdir()
    (second / "part0.csv").write_text(focus_month(["11.00", "20.00", "5.00", "0.50"]))
    conn = connect(warehouse)
    summary = ingest_landing(conn, landing)
    old = ["focus-export/data/BILLING_PERIOD=2026-09/exec-1/part0.csv", "focus-export/data/BILLING_PERIOD=2026-09/exec-1/part1.csv"]
    assert summary.superseded == old
    assert fetch_all(conn, "SELECT path, status, delivery_id FROM raw.files ORDER BY path") == [
        (old[0], "superseded", "aws-dataexports:exec-1"), (old[1], "superseded", "aws-dataexports:exec-1"),
        ("focus-export/data/BILLING_PERIOD=2026-09/exec-2/part0.csv", "loaded", "aws-dataexports:exec-2")]
    assert "superseded by aws-dataexports:exec-2" in fetch_all(conn, "SELECT delivery_note FROM raw.files WHERE path = ?", [old[0]])[0][0]
    conn.close()
    assert current_total(warehouse) == (Decimal("36.500000"), 4)  # never 71.50: the month counts once
    # Another account's month is a different key: it replaces nothing.
    (landing / "other-account.csv").write_text(focus_month(["1.00"], account="acct-2"))
    conn = connect(warehouse)
    assert ingest_landing(conn, landing).superseded == old
    conn.close()
    assert current_total(warehouse) == (Decimal("37.500000"), 5)


def test_plain_uploads_of_one_month_are_each_a_delivery_the_later_line_dates_win(tmp_path):
    from decimal import Decimal

    landing = tmp_path / "landing"
    landing.mkdir()
    warehouse = tmp_path / "wh.duckdb"
    # No manifest, no layout: each file is a delivery of its own, and of two deliveries of the same
    # provider, account and month, the one reaching the later day counts, whichever loaded first.
    (landing / "b-month-to-date.csv").write_text(focus_month(["10.00", "20.00", "30.00"]))
    (landing / "a-earlier.csv").write_text(focus_month(["10.00", "20.00"]))
    conn = connect(warehouse)
    conn.execute("CREATE SCHEMA IF NOT EXISTS core")
    assert ingest_landing(conn, landing).superseded == ["a-earlier.csv"]
    conn.close()
    assert current_total(warehouse) == (Decimal("60.000000"), 3)


def test_compressed_truncated_encoded_and_odd_files_get_clear_outcomes(tmp_path):
    import gzip

    landing = tmp_path / "landing"
    landing.mkdir()
    good = focus_month(["1.00", "2.00"])
    (landing / "export.csv.gz").write_bytes(gzip.compress(good.encode()))  # compressed: read as is
    cut = gzip.compress(focus_month([f"{n}.00" for n in range(1, 8)] * 3000).encode())
    (landing / "cut.csv.gz").write_bytes(cut[: len(cut) // 2])  # a download that stopped half way
    (landing / "twice.csv").write_text(FOCUS_HEADER.strip() + ",BilledCost\n")  # a column named twice
    (landing / "latin1.csv").write_bytes(FOCUS_HEADER.encode() + "1.00,1.00,USD,Usage,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,Caf\xe9,acct-9\n".encode("latin-1"))
    (landing / "almost_focus.csv").write_text("BilledCost,EffectiveCost,ChargeCategory,ChargePeriodStart\n1,1,Usage,2026-09-01\n")
    (landing / "empty.csv").write_text("")
    conn = connect(tmp_path / "wh.duckdb")
    outcomes = {o.path: o for o in ingest_landing(conn, landing).outcomes}
    assert (outcomes["export.csv.gz"].status, outcomes["export.csv.gz"].rows_loaded) == ("loaded", 2)
    assert outcomes["cut.csv.gz"].status == "failed" and "cut.csv.gz" in outcomes["cut.csv.gz"].detail
    assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines WHERE x_SourceFile = 'cut.csv.gz'") == [(0,)]
    assert outcomes["twice.csv"].status == "failed"
    assert "header names a column more than once: BilledCost" in outcomes["twice.csv"].detail
    assert outcomes["latin1.csv"].status == "failed" and "latin1.csv" in outcomes["latin1.csv"].detail
    assert outcomes["almost_focus.csv"].status == "unrecognized"
    assert outcomes["almost_focus.csv"].detail.endswith("closest: focus, missing BillingCurrency")
    assert (outcomes["empty.csv"].status, outcomes["empty.csv"].detail) == ("unrecognized", "empty file")


def test_each_loaded_file_is_reported_for_progress(tmp_path, landing):
    from pipelines.ingest import progress

    seen = []
    progress.set_reporter(lambda done, total, path, rows, rate: seen.append((done, total, path, rows, rate > 0)))
    try:
        ingest_landing(connect(tmp_path / "wh.duckdb"), landing)
    finally:
        progress.set_reporter(None)
    # Reported as each file is done: files are read two at a time, so not always in landing order.
    assert [(d, t) for d, t, *_ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert sorted((p, r) for _, _, p, r, _ in seen) == [
        ("billing/focus.csv", 1000), ("cluster_summary.csv", 0), ("host=h100-01/smi.csv", 8)]
    assert all(fast for *_, fast in seen)


def test_billing_money_reconciles_per_file_including_quarantined_rows(tmp_path):
    from decimal import Decimal

    landing = tmp_path / "landing"
    landing.mkdir()
    text = focus_month(["10.00", "20.00", "5.25"]).replace("2026-09-02T00:00:00Z,2026-09-03", "not a time,2026-09-03")
    (landing / "focus.csv").write_text(text)  # the 20.00 line has no valid start: quarantined, money kept in view
    conn = connect(tmp_path / "wh.duckdb")
    ingest_landing(conn, landing)
    assert fetch_all(conn, "SELECT rows_loaded, rows_quarantined, source_total, quarantined_total FROM raw.files") == [
        (2, 1, Decimal("35.250000"), Decimal("20.000000"))]
    assert fetch_all(conn, "SELECT sum(x_SourceCost) FROM raw.cost_lines") == [(Decimal("15.250000"),)]


def test_one_read_gives_both_digests_and_the_content_digest_is_the_ledgers(tmp_path):
    """digest_of hashes a file once; where the normalized content is the bytes themselves (no gzip,
    no BOM, no CR) that hash is also its content digest, and otherwise the content digest is computed
    as the ledger always did: every variant of one export keeps one content digest."""
    import gzip

    from pipelines.ingest.landing import digest_of
    from pipelines.ledger.deliveries import content_sha256

    text = "a,b\n1,2\n" * 50_000  # several read chunks
    variants = {"plain.csv": text.encode(), "crlf.csv": text.replace("\n", "\r\n").encode(),
                "bom.csv": b"\xef\xbb\xbf" + text.encode(), "gz.csv.gz": gzip.compress(text.encode()),
                "late_cr.csv": text.encode() + b"\r\n", "bom_prefix_only.csv": b"\xef\xbb", "empty.csv": b""}
    plain = {"plain.csv", "bom_prefix_only.csv", "empty.csv"}
    for name, data in variants.items():
        (tmp_path / name).write_bytes(data)
        digest = digest_of(tmp_path / name)
        assert digest.plain == (name in plain), name
        assert digest.content_sha256(tmp_path / name) == content_sha256(tmp_path / name), name
    same = {digest_of(tmp_path / n).content_sha256(tmp_path / n) for n in ("plain.csv", "crlf.csv", "bom.csv", "gz.csv.gz")}
    assert len(same) == 1


def test_the_same_bytes_under_several_names_in_one_run_load_once(tmp_path, landing):
    """Files are read two at a time: copies read side by side are told apart when registered."""
    import gzip

    body = (landing / "billing" / "focus.csv").read_bytes()
    for name in ("a.csv", "b.csv", "c.csv"):
        (landing / "billing" / name).write_bytes(body)
    (landing / "billing" / "d.csv.gz").write_bytes(gzip.compress(body))
    conn = connect(tmp_path / "wh.duckdb")
    summary = ingest_landing(conn, landing)
    billing = [(o.path, o.status) for o in summary.outcomes if o.path.startswith("billing/")]
    assert billing == [("billing/a.csv", "loaded"), ("billing/b.csv", "duplicate"), ("billing/c.csv", "duplicate"),
                       ("billing/d.csv.gz", "duplicate"), ("billing/focus.csv", "duplicate")]
    assert fetch_all(conn, "SELECT count(*), count(DISTINCT x_SourceFile) FROM raw.cost_lines") == [(1000, 1)]
    # The copies' rows were written to staging and dropped there: only the loaded version is in the lake.
    lake = tmp_path / "wh.lake"
    assert not (lake / "_staging").exists() or not any((lake / "_staging").iterdir())
    [(loaded,)] = fetch_all(conn, "SELECT sha256 FROM raw.files WHERE status = 'loaded' AND kind = 'billing'")
    versions = {p.name for p in (lake / "raw" / "cost_lines").rglob("file=*")} - {"file=schema"}
    assert versions == {f"file={loaded}"}


def test_a_connector_that_keeps_state_is_read_alone(tmp_path, landing):
    import threading

    from connectors.focus import FocusConnector
    from connectors.registry import all_connectors

    reading, overlapped = threading.Event(), []

    class Stateful(FocusConnector):
        reads_concurrently = False

        def read(self, path, ctx):
            reading.set()
            try:
                yield from super().read(path, ctx)
            finally:
                reading.clear()

    class Watched(type(next(c for c in all_connectors() if c.name == "nvidia_smi"))):
        def read(self, path, ctx):
            overlapped.append(reading.is_set())
            yield from super().read(path, ctx)

    for n in range(3):
        smi = (landing / "host=h100-01" / "smi.csv").read_text().splitlines(keepends=True)
        (landing / f"h100-0{n + 2}.csv").write_text("".join(smi[:len(smi) - n - 1]))  # each its own content
        (landing / "billing" / f"part{n}.csv").write_text(
            (landing / "billing" / "focus.csv").read_text().replace("2024", f"20{30 + n}"))
    summary = ingest_landing(connect(tmp_path / "wh.duckdb"), landing, connectors=(Stateful(), Watched()))
    assert sorted(o.status for o in summary.outcomes if o.connector) == ["loaded"] * 8
    assert overlapped and not any(overlapped)


@pytest.mark.parametrize("same_mtime", [True, False])
def test_a_path_holding_its_loaded_version_again_no_longer_counts_as_failed(tmp_path, landing, same_mtime):
    """A good download, a broken one over it (the run fails it; the good version's lines still
    count), then the good one again: before, the broken version stayed the path's newest and the
    daily report listed the file as failed every day after. Now the broken version is `replaced`,
    whether the good bytes come back with their own modification time or a new one."""
    import os

    from pipelines.report.daily import files_behind

    focus = landing / "billing" / "focus.csv"
    good, stat = focus.read_bytes(), focus.stat()
    conn = connect(tmp_path / "wh.duckdb")
    ingest_landing(conn, landing)
    focus.write_bytes(good + b"1.0,\xe9\n")  # text not UTF-8: the run fails the file
    assert [o.status for o in ingest_landing(conn, landing).outcomes if o.path == "billing/focus.csv"] == ["failed"]
    def listed():  # the landing's cluster_summary.csv is listed too, unrecognised, all along
        return [(f["path"], f["status"], f["earlier_version_counts"]) for f in files_behind(conn)["files_to_look_at"]]

    assert listed() == [("billing/focus.csv", "failed", True), ("cluster_summary.csv", "unrecognized", False)]
    focus.write_bytes(good)
    if same_mtime:
        os.utime(focus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = ingest_landing(conn, landing)
    assert again.already_loaded == 2 and not [o for o in again.outcomes if o.path == "billing/focus.csv"]
    assert listed() == [("cluster_summary.csv", "unrecognized", False)]
    assert sorted(fetch_all(conn, "SELECT status, rows_loaded, detail LIKE '%the path holds the version read before it again%' "
                                  "FROM raw.files WHERE path = 'billing/focus.csv'")) == [("loaded", 1000, False), ("replaced", 0, True)]
    assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines") == [(1000,)]
