"""The ledger with the layouts a bucket sync leaves: each case gives the provider's total to 1e-6,
across several runs where the case says so, and the same totals whatever order the files arrive in.

Provider totals: a whole sample loaded once on its own is the reference (the CUR fixture gives
1.682309 USD EffectiveCost once money is kept to 10 decimals, 1.682291 while lines are rounded to 6).
"""

import csv
import gzip
import io
import json
import os
import shutil
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from pipelines.ledger.deliveries import content_sha256, layout_of, read_manifest
from pipelines.warehouse.connection import connect, fetch_all, fetch_dicts
from tests.conftest import run_pipeline, sample

CUR = "billing/aws_cur_legacy_csv_focusconverters_fixture.csv"
GCP = "billing/gcp_bigquery_export_flat_2020-11_koku.csv"
OCI = "billing/oci_cost_report_focusconverters_fixture.csv"
REPORT, RANGE, ACCOUNT = "gpu-cur", "20231101-20231201", "123412340534"
ASSEMBLY_A = "4c3b4f5e-1111-4a2b-9c8d-0123456789ab"
ASSEMBLY_B = "9e8d7c6b-2222-4f3e-8a1b-ba9876543210"
T1, T2 = 1_699_000_000, 1_699_500_000  # the manifests' LastModified, as `aws s3 sync` leaves them
TOLERANCE = Decimal("0.000001")


def totals(warehouse: Path, where: str = "TRUE") -> tuple[Decimal, int]:
    conn = connect(warehouse, read_only=True)
    try:
        total, lines = fetch_all(conn, f"SELECT coalesce(sum(EffectiveCost), 0), count(*) FROM core.cost_lines WHERE {where}")[0]
    finally:
        conn.close()
    return total, lines


def run(landing: Path, warehouse: Path) -> None:
    assert run_pipeline(landing, warehouse).success


def close(a: Decimal, b: Decimal) -> bool:
    return abs(a - b) <= TOLERANCE


@pytest.fixture(scope="module")
def provider_totals(tmp_path_factory):
    """Each sample's own total: the whole file loaded once, alone."""
    out = {}
    for name in (CUR, GCP, OCI):
        root = tmp_path_factory.mktemp("reference")
        (root / "landing").mkdir()
        shutil.copy(sample(name), root / "landing" / Path(name).name)
        run(root / "landing", root / "wh.duckdb")
        conn = connect(root / "wh.duckdb", read_only=True)
        out[name] = fetch_all(conn, """SELECT sum(EffectiveCost), count(*),
                                              sum(BilledCost) FILTER (WHERE ChargeCategory = 'Usage') FROM core.cost_lines""")[0]
        conn.close()
    assert abs(out[CUR][0] - Decimal("1.682309")) <= Decimal("0.00002")  # the figure, before per-line rounding
    return out


# -- a CUR legacy delivery as S3 holds it -------------------------------------------------------------

def cur_lines() -> tuple[str, list[str]]:
    text = sample(CUR).read_text()
    lines = text.splitlines(keepends=True)
    return lines[0], lines[1:]


def corrected(header: str, line: str, delta: Decimal) -> str:
    """The line with `delta` added to its unblended cost (a Usage line: effective = billed)."""
    names = next(csv.reader([header]))
    row = next(csv.reader([line]))
    i = names.index("lineItem/UnblendedCost")
    row[i] = str(Decimal(row[i]) + delta)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(row)
    return buf.getvalue()


def first_usage_line(header: str, rows: list[str]) -> int:
    names = next(csv.reader([header]))
    kind, cost = names.index("lineItem/LineItemType"), names.index("lineItem/UnblendedCost")
    return next(n for n, line in enumerate(rows) if (r := next(csv.reader([line])))[kind] == "Usage" and Decimal(r[cost]) > 0)


def cur_manifest(assembly: str, keys: list[str]) -> str:
    """A CUR legacy manifest in the shape AWS writes (project-koku/nise aws-template-manifest.json)."""
    return json.dumps({
        "assemblyId": assembly, "account": ACCOUNT,
        "columns": [{"category": "identity", "name": "LineItemId"}, {"category": "lineItem", "name": "UnblendedCost"}],
        "charset": "UTF-8", "compression": "GZIP", "contentType": "text/csv",
        "reportId": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", "reportName": REPORT,
        "billingPeriod": {"start": "20231101T000000.000Z", "end": "20231201T000000.000Z"},
        "bucket": "finops-billing", "reportKeys": keys, "additionalArtifactKeys": [],
    }, indent=2)


def part_key(assembly: str, n: int) -> str:
    return f"cur/{REPORT}/{RANGE}/{assembly}/{REPORT}-{n:05d}.csv.gz"


def write(path: Path, data: bytes, mtime: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime:
        os.utime(path, (mtime, mtime))


class CurDelivery:
    """One assembly: its parts' bytes and its manifests, placed as `aws s3 sync s3://bucket/cur/ landing/` would."""

    def __init__(self, assembly: str, parts: list[str], mtime: int):
        self.assembly, self.parts, self.mtime = assembly, parts, mtime

    def local(self, key: str) -> str:
        return key.removeprefix("cur/")

    def place_part(self, landing: Path, n: int) -> None:
        write(landing / self.local(part_key(self.assembly, n)), gzip.compress(self.parts[n - 1].encode()), self.mtime)

    def place_manifests(self, landing: Path, date_range_too: bool = True) -> None:
        manifest = cur_manifest(self.assembly, [part_key(self.assembly, n) for n in range(1, len(self.parts) + 1)]).encode()
        write(landing / REPORT / RANGE / self.assembly / f"{REPORT}-Manifest.json", manifest, self.mtime)
        if date_range_too:  # the date-range-level manifest: AWS overwrites it with each new delivery
            write(landing / REPORT / RANGE / f"{REPORT}-Manifest.json", manifest, self.mtime)

    def place(self, landing: Path, date_range_too: bool = True) -> None:
        for n in range(1, len(self.parts) + 1):
            self.place_part(landing, n)
        self.place_manifests(landing, date_range_too)


def two_deliveries(delta: Decimal = Decimal("1.5")):
    header, rows = cur_lines()
    half = len(rows) // 2
    a = CurDelivery(ASSEMBLY_A, [header + "".join(rows[:half]), header + "".join(rows[half:])], T1)
    fixed = list(rows)
    i = first_usage_line(header, rows[:half])
    fixed[i] = corrected(header, rows[i], delta)
    # The restatement changes one line of part 1; its part 2 is the same content as the old one's.
    b = CurDelivery(ASSEMBLY_B, [header + "".join(fixed[:half]), a.parts[1]], T2)
    return a, b, rows, half


def test_a_delivery_in_two_parts_is_incomplete_until_its_second_part_arrives(tmp_path, provider_totals):
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    a, _, rows, half = two_deliveries()
    a.place_manifests(landing)
    a.place_part(landing, 1)
    run(landing, warehouse)

    conn = connect(warehouse, read_only=True)
    delivery = fetch_dicts(conn, "SELECT * FROM raw.deliveries")
    status = dict(fetch_all(conn, "SELECT path, status FROM raw.files"))
    conn.close()
    assert [(d["delivery_id"], d["export_name"], d["scope"], str(d["billing_period"]), d["parts_expected"], d["parts_seen"],
             d["complete"], d["status"], d["source"]) for d in delivery] == [
        (f"aws-cur:{ASSEMBLY_A}", REPORT, ACCOUNT, "2023-11-01", 2, 1, False, "incomplete", "manifest")]
    assert status == {f"{REPORT}/{RANGE}/{REPORT}-Manifest.json": "manifest",
                      f"{REPORT}/{RANGE}/{ASSEMBLY_A}/{REPORT}-Manifest.json": "manifest",
                      f"{REPORT}/{RANGE}/{ASSEMBLY_A}/{REPORT}-00001.csv.gz": "incomplete"}
    part1_total, part1_lines = totals(warehouse)
    assert part1_lines == half and Decimal(0) < part1_total < provider_totals[CUR][0]

    a.place_part(landing, 2)  # part 2 synced after the daily run
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0]) and lines == len(rows)
    conn = connect(warehouse, read_only=True)
    assert fetch_all(conn, "SELECT parts_seen, complete, status FROM raw.deliveries") == [(2, True, "current")]
    assert fetch_all(conn, "SELECT DISTINCT x_DeliveryId FROM core.cost_lines") == [(f"aws-cur:{ASSEMBLY_A}",)]
    conn.close()


def test_a_bucket_prefix_synced_into_a_folder_of_another_name_keeps_its_deliveries(tmp_path, provider_totals):
    """`aws s3 sync s3://bucket/cur/ landing/aws`: the manifests' keys (cur/…) and the landing paths
    (aws/…) share no tail but their last three segments. Before, no part matched its manifest, every
    delivery counted through its folder as complete, and half a restatement replaced the whole
    month (15,368.26 USD fell to 7,933.88 in a daily run, exit 0)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    a, b, rows, half = two_deliveries()
    a.place(landing / "aws")
    run(landing, warehouse)
    first = totals(warehouse)
    assert close(first[0], provider_totals[CUR][0]) and first[1] == len(rows)
    b.place_manifests(landing / "aws")
    b.place_part(landing / "aws", 1)  # part 2 comes with the next sync
    run(landing, warehouse)
    assert totals(warehouse) == first
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, "SELECT delivery_id, parts_seen, complete, status FROM raw.deliveries ORDER BY delivery_id") == [
            (f"aws-cur:{ASSEMBLY_A}", 2, True, "current"), (f"aws-cur:{ASSEMBLY_B}", 1, False, "incomplete")]
    finally:
        conn.close()


def test_two_accounts_exports_of_one_name_synced_under_other_names_stay_apart(tmp_path):
    """Two payers' Data Exports named cur2 in overwrite mode, under the prefixes billing/ and exports/,
    synced into landing/aws-prod and landing/aws-dev: the keys' last three segments are the same, so
    they say nothing of which export a file is. Neither file may become the other's part (prod's file
    was dev's delivery's, and each delivery sat 'incomplete' on every run); both months count whole."""
    text = sample(CUR).read_text()
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    for folder, prefix, account, body, execution in (("aws-prod", "billing", "123412340534", text, "exec-prod-1"),
                                                     ("aws-dev", "exports", "567856780934",
                                                      text.replace("1234123405", "5678567809"), "exec-dev-1")):
        name = "cur2/data/BILLING_PERIOD=2023-11/cur2-00001.csv.gz"
        write(landing / folder / name, gzip.compress(body.encode(), mtime=0), T1)
        write(landing / folder / "cur2/metadata/BILLING_PERIOD=2023-11/cur2-Manifest.json", json.dumps({
            "executionId": execution, "exportArn": f"arn:aws:bcm-data-exports:us-east-1:{account}:export/cur2-abc",
            "billingPeriod": {"start": "2023-11-01T00:00:00.000Z"}, "columns": [],
            "dataFiles": [f"s3://{folder}-bucket/{prefix}/{name}"]}).encode(), T1)
    run(landing, warehouse)
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, "SELECT BillingAccountId, count(*) FROM core.cost_lines GROUP BY 1 ORDER BY 1") == [
            ("123412340534", 1281), ("567856780934", 1281)]
        assert fetch_all(conn, "SELECT count(*) FROM raw.files WHERE delivery_id LIKE 'aws-dataexports:%' "
                               "AND status <> 'manifest'") == [(0,)]
    finally:
        conn.close()


ORDERS = {
    "old-then-new-then-old-copy": ["a", "b", "copy"],
    "new-then-old-then-old-copy": ["b", "a", "copy"],
    "all-at-once": ["a+b+copy"],
    "old-copy-first": ["copy", "b", "a"],
}


@pytest.mark.parametrize("order", ORDERS)
def test_a_restated_delivery_replaces_the_old_one_and_the_old_seen_again_never_wins(tmp_path, provider_totals, order):
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    delta = Decimal("1.5")
    a, b, rows, _ = two_deliveries(delta)

    def place(step: str) -> None:
        for what in step.split("+"):
            if what == "a":
                # The old assembly; its date-range manifest only if the new one is not there yet
                # (the provider overwrote that key when it delivered B).
                a.place(landing, date_range_too=not (landing / REPORT / RANGE / f"{REPORT}-Manifest.json").exists())
            elif what == "b":
                b.place(landing)
            else:  # the old assembly's part 1 synced again under another name
                write(landing / "restored" / f"{REPORT}-old-00001.csv.gz", gzip.compress(a.parts[0].encode()))

    for step in ORDERS[order]:
        place(step)
        run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0] + delta), total  # the new delivery's total: not the old, not both
    assert lines == len(rows)
    conn = connect(warehouse, read_only=True)
    deliveries = dict(fetch_all(conn, "SELECT delivery_id, status FROM raw.deliveries"))
    assert deliveries == {f"aws-cur:{ASSEMBLY_A}": "superseded", f"aws-cur:{ASSEMBLY_B}": "current"}
    assert fetch_all(conn, "SELECT DISTINCT x_DeliveryId FROM core.cost_lines") == [(f"aws-cur:{ASSEMBLY_B}",)]
    copy = fetch_all(conn, "SELECT status, delivery_id FROM raw.files WHERE path LIKE 'restored/%'")
    assert copy in ([("superseded", f"aws-cur:{ASSEMBLY_A}")], [("duplicate", f"aws-cur:{ASSEMBLY_A}")])
    conn.close()


def test_the_same_export_as_csv_gzip_crlf_and_bom_counts_once(tmp_path, provider_totals):
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    data = sample(CUR).read_bytes()
    (landing / "cur.csv").write_bytes(data)
    (landing / "cur.csv.gz").write_bytes(gzip.compress(data))
    (landing / "cur-crlf.csv").write_bytes(data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    (landing / "cur-bom.csv").write_bytes(b"\xef\xbb\xbf" + data)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]
    conn = connect(warehouse, read_only=True)
    assert sorted(s for (s,) in fetch_all(conn, "SELECT status FROM raw.files")) == ["duplicate", "duplicate", "duplicate", "loaded"]
    assert fetch_all(conn, "SELECT count(DISTINCT content_sha256), count(DISTINCT delivery_id) FROM raw.files") == [(1, 1)]
    conn.close()


def gcp_halves() -> tuple[str, str]:
    lines = sample(GCP).read_text().splitlines(keepends=True)
    half = 1 + (len(lines) - 1) // 2
    return lines[0] + "".join(lines[1:half]), lines[0] + "".join(lines[half:])


@pytest.mark.parametrize("reverse", [False, True])
def test_a_gcp_export_split_in_two_runs_appends(tmp_path, provider_totals, reverse):
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    halves = list(enumerate(gcp_halves(), start=1))
    for n, text in (halves[::-1] if reverse else halves):
        (landing / f"gcp-billing-export-{n}.csv").write_text(text)
        run(landing, warehouse)
    conn = connect(warehouse, read_only=True)
    got = fetch_all(conn, """SELECT sum(EffectiveCost), count(*), sum(BilledCost) FILTER (WHERE ChargeCategory = 'Usage')
                             FROM core.cost_lines""")[0]
    assert fetch_all(conn, "SELECT DISTINCT mode, status FROM raw.deliveries") == [("incremental", "current")]
    conn.close()
    assert got == provider_totals[GCP] and got[2] > 0
    # The whole file arriving too (an overlapping re-export) adds nothing: each line counts once.
    (landing / "gcp-billing-export-all.csv").write_text(sample(GCP).read_text())
    run(landing, warehouse)
    conn = connect(warehouse, read_only=True)
    assert fetch_all(conn, """SELECT sum(EffectiveCost), count(*), sum(BilledCost) FILTER (WHERE ChargeCategory = 'Usage')
                              FROM core.cost_lines""")[0] == provider_totals[GCP]
    conn.close()


def oci_corrected() -> tuple[str, Decimal, Decimal, str]:
    text = sample(OCI).read_text()
    lines = text.splitlines(keepends=True)
    names = next(csv.reader([lines[0]]))
    cost, ref = names.index("cost/myCost"), names.index("lineItem/referenceNo")
    row = next(csv.reader([lines[5]]))
    old, new = Decimal(row[cost]), Decimal(row[cost]) + Decimal("0.25")
    row[cost] = str(new)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(row)
    lines[5] = buf.getvalue()
    return "".join(lines), old, new, row[ref]


@pytest.mark.parametrize("order", ["original-first", "correction-first"])
def test_an_oci_report_redelivered_with_one_corrected_line(tmp_path, provider_totals, order):
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    folder = landing / "reports" / "cost-csv"
    folder.mkdir(parents=True)
    text, old, new, reference = oci_corrected()
    files = [("0001000000000001.csv", sample(OCI).read_text()), ("0001000000000002.csv", text)]
    for name, body in (files if order == "original-first" else files[::-1]):
        (folder / name).write_text(body)
        run(landing, warehouse)
    total, lines = totals(warehouse)
    original_total, original_lines = provider_totals[OCI][:2]
    assert lines == original_lines
    assert close(total, original_total - old + new) or close(total, original_total + Decimal("0.25")), (total, original_total)
    conn = connect(warehouse, read_only=True)
    assert fetch_all(conn, "SELECT x_DeliveryId FROM core.cost_lines WHERE x_ExtraColumns LIKE ?", [f"%{reference}%"]) == [
        ("oci:reports/cost-csv/0001000000000002",)]
    conn.close()


# -- discovery units ---------------------------------------------------------------------------------

def test_content_identity_ignores_compression_line_ends_and_bom(tmp_path):
    data = b"a,b\r\n1,2\r\n"
    (tmp_path / "x.csv").write_bytes(data)
    (tmp_path / "x.csv.gz").write_bytes(gzip.compress(data.replace(b"\r\n", b"\n")))
    (tmp_path / "y.csv").write_bytes(b"\xef\xbb\xbf" + data.replace(b"\r\n", b"\n"))
    (tmp_path / "z.csv").write_bytes(b"a,b\n1,3\n")
    hashes = {p.name: content_sha256(p) for p in tmp_path.iterdir()}
    assert hashes["x.csv"] == hashes["x.csv.gz"] == hashes["y.csv"] != hashes["z.csv"]


def test_manifests_of_aws_data_exports_and_azure_are_read(tmp_path):
    exports = tmp_path / "focus-export" / "metadata" / "BILLING_PERIOD=2026-09" / "focus-export-Manifest.json"
    exports.parent.mkdir(parents=True)
    exports.write_text(json.dumps({
        "executionId": "exec-42", "exportArn": "arn:aws:bcm-data-exports:us-east-1:111122223333:export/focus-export-abc",
        "columns": [], "dataFiles": ["s3://bucket/prefix/focus-export/data/BILLING_PERIOD=2026-09/focus-export-00001.csv.gz"],
        "additionalOutputFiles": []}))
    m = read_manifest(exports, "focus-export/metadata/BILLING_PERIOD=2026-09/focus-export-Manifest.json")
    assert (m.format, m.delivery_id, m.scope, str(m.billing_period), m.parts, m.latest_pointer) == (
        "aws_data_exports", "aws-dataexports:exec-42", "111122223333", "2026-09-01",
        ["prefix/focus-export/data/BILLING_PERIOD=2026-09/focus-export-00001.csv.gz"], True)

    azure = tmp_path / "manifest.json"
    azure.write_text(json.dumps({
        "manifestVersion": "2024-04-01", "byteCount": 10, "blobCount": 1, "dataRowCount": 3,
        "exportConfig": {"exportName": "daily-actual", "type": "ActualCost", "timeFrame": "MonthToDate",
                         "resourceId": "/providers/Microsoft.Billing/billingAccounts/8611537/providers/Microsoft.CostManagement/exports/daily-actual"},
        "deliveryConfig": {"partitionData": True, "dataOverwriteBehavior": "OverwritePreviousReport"},
        "runInfo": {"executionType": "Scheduled", "submittedTime": "2026-09-14T03:12:00Z", "runId": "5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
                    "startDate": "2026-09-01T00:00:00", "endDate": "2026-09-30T00:00:00"},
        "blobs": [{"blobName": "exports/daily-actual/20260901-20260930/5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b/part_0_0001.csv",
                   "byteCount": 10, "dataRowCount": 3}]}))
    m = read_manifest(azure, "exports/daily-actual/20260901-20260930/5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b/manifest.json")
    assert (m.format, m.delivery_id, m.export_name, m.scope, str(m.billing_period), m.created_at.isoformat(), len(m.parts)) == (
        "azure_export", "azure:5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b", "daily-actual",
        "/providers/Microsoft.Billing/billingAccounts/8611537", "2026-09-01", "2026-09-14T03:12:00+00:00", 1)
    # Without a manifest, Azure's folder layout still names the run.
    assert layout_of("daily-actual/20260901-20260930/5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b/part_0_0001.csv", "azure_cost").delivery_id == \
        "azure:5f0c1a2b-3c4d-4e5f-8a9b-0c1d2e3f4a5b"
    assert read_manifest(tmp_path / "nothing.json", "nothing.json") is None


def test_a_warehouse_from_before_the_ledger_keeps_its_restated_files_out(tmp_path):
    from datetime import UTC, datetime

    from pipelines.warehouse.connection import ensure_warehouse

    conn = connect(tmp_path / "old.duckdb")
    ensure_warehouse(conn)
    conn.execute("INSERT INTO raw.files (path, sha256, size_bytes, kind, status, ingested_at) VALUES (?, ?, 1, 'billing', 'restated', ?)",
                 ["old.csv", "0" * 64, datetime(2026, 9, 1, tzinfo=UTC)])
    ensure_warehouse(conn)
    assert fetch_all(conn, "SELECT status FROM raw.files") == [("superseded",)]  # never read again as new
    conn.close()


# -- reloads that lost or doubled a month (found by a review with bucket-sync layouts) -------------------

def test_a_parts_content_still_counts_when_the_copy_read_first_is_overwritten(tmp_path, provider_totals):
    """A copy of part 1 lands beside the assembly under a name that sorts first, so its rows are the
    ones stored and the real part is a `duplicate`. The copy is then overwritten: part 1 still holds
    that content, so the month keeps it (it lost 640 lines). The GCP export written over it is
    another bill (none of the copy's months), so it counts beside it, and keeps counting when the
    copy's bytes come back: a bill delivered stays delivered."""
    header, rows = cur_lines()
    half = len(rows) // 2
    a = CurDelivery(ASSEMBLY_A, [header + "".join(rows[:half]), header + "".join(rows[half:])], T1)
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    a.place(landing)
    write(landing / "adhoc" / "latest.csv", a.parts[0].encode(), T1)
    run(landing, warehouse)
    cur_month = "BillingPeriodStart = TIMESTAMPTZ '2023-11-01 00:00:00+00'"
    assert close(totals(warehouse, cur_month)[0], provider_totals[CUR][0])
    write(landing / "adhoc" / "latest.csv", sample(GCP).read_bytes(), T2)  # overwritten with another export
    run(landing, warehouse)
    total, lines = totals(warehouse, cur_month)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]
    assert totals(warehouse, f"NOT ({cur_month})")[1] == provider_totals[GCP][1]
    write(landing / "adhoc" / "latest.csv", a.parts[0].encode(), T2 + 60)  # and put back
    run(landing, warehouse)
    total, lines = totals(warehouse, cur_month)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]
    assert totals(warehouse, f"NOT ({cur_month})")[1] == provider_totals[GCP][1]


def test_a_file_put_back_to_its_earlier_content_counts_that_content_again(tmp_path, provider_totals):
    header, rows = cur_lines()
    i = first_usage_line(header, rows)
    original, restated = header + "".join(rows), header + "".join(rows[:i] + [corrected(header, rows[i], Decimal(1000))] + rows[i + 1:])
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    for text, mtime, expected in ((original, T1, Decimal(0)), (restated, T2, Decimal(1000)), (original, T2 + 60, Decimal(0))):
        write(landing / "cur-2023-11.csv", text.encode(), mtime)
        run(landing, warehouse)
        assert close(totals(warehouse)[0], provider_totals[CUR][0] + expected), expected


@pytest.mark.parametrize("restatement_is_newer", [True, False])
def test_two_plain_uploads_of_a_month_in_one_run_count_the_newer_file(tmp_path, provider_totals, restatement_is_newer):
    """Loaded in the same run, two plain uploads of one month tie on every rule the ledger has; the
    file modified later counts, not the one whose content hash sorts last (a 0.30 restatement lost
    to the original by its hash)."""
    header, rows = cur_lines()
    i = first_usage_line(header, rows)
    restated = header + "".join(rows[:i] + [corrected(header, rows[i], Decimal("-0.3"))] + rows[i + 1:])
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    write(landing / "cur-november.csv", (header + "".join(rows)).encode(), T1 if restatement_is_newer else T2)
    write(landing / "cur-november-restated.csv", restated.encode(), T2 if restatement_is_newer else T1)
    run(landing, warehouse)
    expected = provider_totals[CUR][0] - (Decimal("0.3") if restatement_is_newer else 0)
    assert close(totals(warehouse)[0], expected)


def data_exports_manifest(execution: str, keys: list[str], account: str) -> str:
    """An AWS Data Exports manifest whose ARN names the export by its id and the account it was
    created in (a member account here, not the payer the lines bill), without an exportName."""
    return json.dumps({"executionId": execution, "exportArn": f"arn:aws:bcm-data-exports:us-east-1:{account}:export/gpu-cur2-5f2a9c1e",
                       "billingPeriod": {"start": "2023-11-01T00:00:00.000Z"}, "columns": [],
                       "dataFiles": [f"s3://finops-billing/exports/{k}" for k in keys]})


def test_a_data_exports_refresh_seen_only_through_its_folder_competes_with_the_export(tmp_path, provider_totals):
    """Create-new mode: each refresh writes an execution folder and overwrites the period's one
    manifest. A refresh whose manifest was overwritten before the sync is known by its folder
    alone; it is still that export of that account, so the newest refresh replaces it rather than
    adding to it (the month was 1.31 too high)."""
    header, rows = cur_lines()
    i = first_usage_line(header, rows)
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"

    def refresh(execution: str, delta: Decimal, mtime: int, manifest: bool) -> None:
        body = header + "".join(rows[:i] + [corrected(header, rows[i], delta)] + rows[i + 1:])
        keys = [f"gpu-cur2/data/BILLING_PERIOD=2023-11/{execution}/gpu-cur2-00001.csv.gz"]
        write(landing / keys[0], gzip.compress(body.encode(), mtime=0), mtime)
        if manifest:
            write(landing / "gpu-cur2" / "metadata" / "BILLING_PERIOD=2023-11" / "gpu-cur2-Manifest.json",
                  data_exports_manifest(execution, keys, "999988887777").encode(), mtime)

    refresh("exec-0001", Decimal(0), T1, manifest=True)
    run(landing, warehouse)
    refresh("exec-0002", Decimal("1.0"), T2, manifest=False)
    refresh("exec-0003", Decimal("1.5"), T2 + 3600, manifest=True)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0] + Decimal("1.5")) and lines == provider_totals[CUR][1]


def test_a_member_accounts_data_export_beside_the_payers_cur_counts_once(tmp_path, provider_totals):
    """A Data Export created in a member account (its ARN's account, not the payer its lines bill)
    beside the payer's CUR of the same month: the payer's export holds the member's charges, so the
    member's export does not add to them (they were counted twice); alone, it counts."""
    header, rows = cur_lines()
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    member = header + "".join(rows[: len(rows) // 3])
    keys = ["gpu-cur2/data/BILLING_PERIOD=2023-11/exec-0001/gpu-cur2-00001.csv.gz"]
    write(landing / keys[0], gzip.compress(member.encode(), mtime=0), T2)
    write(landing / "gpu-cur2" / "metadata" / "BILLING_PERIOD=2023-11" / "gpu-cur2-Manifest.json",
          data_exports_manifest("exec-0001", keys, "999988887777").encode(), T2)
    run(landing, warehouse)
    assert totals(warehouse) == totals_of(member)
    CurDelivery(ASSEMBLY_A, [header + "".join(rows)], T1).place(landing)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]
    assert file_verdicts(warehouse)[keys[0]][0] == "superseded"


def restated(delta: Decimal, drop_zero_line: bool = False) -> str:
    """The CUR month with its first usage line changed by `delta` (and, if asked, one zero-cost
    line left out, so the file has one line fewer and the same money otherwise)."""
    header, rows = cur_lines()
    i = first_usage_line(header, rows)
    body = rows[:i] + [corrected(header, rows[i], delta)] + rows[i + 1:]
    if drop_zero_line:
        cost = next(csv.reader([header])).index("lineItem/UnblendedCost")
        zero = next(n for n, line in enumerate(body) if n != i and Decimal(next(csv.reader([line]))[cost] or 0) == 0)
        del body[zero]
    return header + "".join(body)


def file_verdicts(warehouse: Path) -> dict[str, tuple[str, str | None]]:
    conn = connect(warehouse, read_only=True)
    try:
        return {r["path"]: (r["status"], r["delivery_note"]) for r in fetch_dicts(
            conn, "SELECT path, status, delivery_note FROM raw.files WHERE kind = 'billing'")}
    finally:
        conn.close()


@pytest.mark.parametrize("download_first", [False, True])
def test_a_console_download_beside_the_synced_export_never_adds_to_it(tmp_path, provider_totals, download_first):
    """A month downloaded by hand (a plain upload) next to the export that delivers the same payer
    and month: the same charges, so one counts, the export's (the month was counted twice)."""
    header, rows = cur_lines()
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    export = CurDelivery(ASSEMBLY_A, [header + "".join(rows)], T1)
    download = landing / "downloads" / "gpu-cur-november.csv"
    if download_first:
        write(download, restated(Decimal("0.3")).encode(), T2)
        run(landing, warehouse)
        assert close(totals(warehouse)[0], provider_totals[CUR][0] + Decimal("0.3"))
    export.place(landing)
    if not download_first:
        run(landing, warehouse)
        write(download, restated(Decimal("0.3")).encode(), T2)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]
    status, note = file_verdicts(warehouse)["downloads/gpu-cur-november.csv"]
    assert status == "superseded" and f"superseded by aws-cur:{ASSEMBLY_A}" in note


@pytest.mark.parametrize("finer_is_newer", [True, False])
def test_two_cur_definitions_of_one_payer_count_once_and_the_finer_stays_chosen(tmp_path, provider_totals, finer_is_newer):
    """Two CUR reports of one payer account (an hourly and a daily definition, say) deliver the
    same charges: the month counts once, from the export with more lines, whichever refreshed last,
    so the choice does not flip with each refresh (both counted, the month was twice its cost)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    header, rows = cur_lines()
    finer = CurDelivery(ASSEMBLY_A, [header + "".join(rows)], T2 if finer_is_newer else T1)
    finer.place(landing)
    coarse_report, coarse_assembly = "gpu-cur-daily", ASSEMBLY_B
    key = f"cur/{coarse_report}/{RANGE}/{coarse_assembly}/{coarse_report}-00001.csv.gz"
    manifest = json.loads(cur_manifest(coarse_assembly, [key]))
    manifest["reportName"] = coarse_report
    mtime = T1 if finer_is_newer else T2
    write(landing / key.removeprefix("cur/"), gzip.compress(restated(Decimal("0.3"), drop_zero_line=True).encode()), mtime)
    write(landing / coarse_report / RANGE / coarse_assembly / f"{coarse_report}-Manifest.json", json.dumps(manifest).encode(), mtime)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]
    conn = connect(warehouse, read_only=True)
    try:
        slices = {r["delivery_id"]: r for r in fetch_dicts(conn, "SELECT delivery_id, counts, winner, covered_by FROM raw.delivery_slices")}
        status = dict(fetch_all(conn, "SELECT delivery_id, status FROM raw.deliveries"))
    finally:
        conn.close()
    coarse = slices[f"aws-cur:{coarse_assembly}"]
    assert not coarse["counts"] and coarse["winner"] == f"aws-cur:{ASSEMBLY_A}" and coarse["covered_by"] == REPORT
    assert status == {f"aws-cur:{ASSEMBLY_A}": "current", f"aws-cur:{coarse_assembly}": "superseded"}


def test_a_plain_upload_of_a_month_no_export_delivers_still_counts(tmp_path, provider_totals):
    """The export covers another payer: the download is the only copy of its month and counts."""
    header, rows = cur_lines()
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    other = json.loads(cur_manifest(ASSEMBLY_A, [part_key(ASSEMBLY_A, 1)]))
    other["account"] = "999900001111"
    write(landing / REPORT / RANGE / ASSEMBLY_A / f"{REPORT}-00001.csv.gz",
          gzip.compress((header + "".join(rows)).replace("123412340534", "999900001111").encode()), T1)
    write(landing / REPORT / RANGE / ASSEMBLY_A / f"{REPORT}-Manifest.json", json.dumps(other).encode(), T1)
    write(landing / "downloads" / "gpu-cur-november.csv", (header + "".join(rows)).encode(), T2)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, 2 * provider_totals[CUR][0]) and lines == 2 * provider_totals[CUR][1]


def test_the_run_says_a_download_no_longer_counts_because_the_export_delivers_its_month(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from pipelines.cli.main import app

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    header, rows = cur_lines()
    landing = tmp_path / "landing"
    write(landing / "downloads" / "gpu-cur-november.csv", restated(Decimal("0.3")).encode(), T2)
    args = ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"), "--reports", str(tmp_path / "reports")]
    first = CliRunner().invoke(app, args, terminal_width=400)
    assert first.exit_code == 0 and "superseded" not in first.output, first.output[-2000:]
    CurDelivery(ASSEMBLY_A, [header + "".join(rows)], T1).place(landing)
    second = CliRunner().invoke(app, args, terminal_width=400)
    assert second.exit_code == 0, second.output[-2000:]
    assert (f"superseded: downloads/gpu-cur-november.csv — its lines no longer count: the export {REPORT} delivers the same "
            "provider, billing account and month") in second.output, second.output[-2000:]


def test_a_delivery_whose_lines_state_two_billing_accounts_counts_whole(tmp_path, provider_totals):
    """One CUR delivery, one manifest, lines of two payers: its two slices share the manifest's key
    and rank as one delivery (the second payer's 641 lines were replaced by their own delivery)."""
    header, rows = cur_lines()
    half = len(rows) // 2
    mixed = header + "".join(rows[:half]) + "".join(rows[half:]).replace("123412340534,", "999900001111,")
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    CurDelivery(ASSEMBLY_A, [mixed], T1).place(landing)
    run(landing, warehouse)
    total, lines = totals(warehouse)
    assert close(total, provider_totals[CUR][0]) and lines == provider_totals[CUR][1]


def cur_days(first: int, last: int, account: str = ACCOUNT, delta: Decimal = Decimal(0)) -> str:
    """The CUR month's lines whose charges start on days `first`..`last` (month-long lines left out)."""
    header, rows = cur_lines()
    names = next(csv.reader([header]))
    start, end = names.index("lineItem/UsageStartDate"), names.index("lineItem/UsageEndDate")
    kept = []
    for line in rows:
        r = next(csv.reader([line]))
        days = (date.fromisoformat(r[end][:10]) - date.fromisoformat(r[start][:10])).days
        if days <= 1 and first <= int(r[start][8:10]) <= last:
            kept.append(line)
    body = header + "".join(kept)
    if delta:
        body = header + corrected(header, kept[0], delta) + "".join(kept[1:])
    return body.replace(ACCOUNT + ",", account + ",")


def days_total(text: str) -> Decimal:
    names, *rows = list(csv.reader(io.StringIO(text)))
    i = names.index("lineItem/UnblendedCost")
    return sum((Decimal(r[i]) for r in rows), Decimal(0))


def totals_of(text: str) -> tuple[Decimal, int]:
    """A CUR text's total and line count."""
    return days_total(text), len(text.splitlines()) - 1


def test_plain_uploads_that_share_days_each_count_for_the_days_no_later_one_covers(tmp_path):
    """Downloads of days 1-5, 4-9 and 8-14, one a run: 8-14 counts whole, 4-9 for days 4-7 and 1-5
    for days 1-3; every day once. (Each file counted or not as a whole: days 6 and 7 were lost.)"""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    for name, (first, last) in (("x.csv", (1, 5)), ("y.csv", (4, 9)), ("z.csv", (8, 14))):
        write(landing / name, cur_days(first, last).encode())
        run(landing, warehouse)
    assert totals(warehouse) == totals_of(cur_days(1, 14))
    verdicts = file_verdicts(warehouse)
    assert {p: s for p, (s, _) in verdicts.items()} == {"x.csv": "loaded", "y.csv": "loaded", "z.csv": "loaded"}
    conn = connect(warehouse, read_only=True)
    try:
        ids = dict(fetch_all(conn, "SELECT path, delivery_id FROM raw.files WHERE kind = 'billing'"))
        counts_for = dict(fetch_all(conn, """
            SELECT f.path, list_transform(s.counts_for, lambda r: [CAST(r.since AS DATE), CAST(r.until AS DATE)])
            FROM raw.delivery_slices AS s JOIN raw.files AS f USING (delivery_id)"""))
    finally:
        conn.close()
    assert counts_for == {"x.csv": [[date(2023, 11, 1), date(2023, 11, 4)]],
                          "y.csv": [[date(2023, 11, 4), date(2023, 11, 8)]], "z.csv": None}
    assert verdicts["x.csv"][1] == f"delivery {ids['x.csv']}; the charge time it shares with {ids['y.csv']} counts there"


@pytest.mark.parametrize("order", ["in order", "later file first", "one run"])
def test_a_download_of_days_1_to_8_beside_one_of_8_to_14_keeps_days_1_to_7(tmp_path, order):
    """Two console downloads sharing day 8 (the first taken while day 8 was under way): the later
    one counts for day 8, the earlier for days 1-7, whatever order they arrive in."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    files = [("early.csv", cur_days(1, 8, delta=Decimal("-0.25"))), ("late.csv", cur_days(8, 14))]
    if order == "later file first":
        files.reverse()
    for name, text in files:
        write(landing / name, text.encode())
        if order != "one run":
            run(landing, warehouse)
    if order == "one run":
        run(landing, warehouse)
    expected = days_total(cur_days(1, 8, delta=Decimal("-0.25"))) - days_total(cur_days(8, 8)) + days_total(cur_days(8, 14))
    assert totals(warehouse)[0] == expected
    assert totals(warehouse)[1] == totals_of(cur_days(1, 14))[1]


def test_a_gcp_focus_export_beside_the_standard_export_counts_once(tmp_path, provider_totals):
    """Google Cloud's standard export (incremental rows) and its FOCUS export of the same billing
    account and invoice month, synced side by side: the standard export counts, the FOCUS one is the
    same charges again (its last charge starts on the same day)."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    landing.mkdir()
    shutil.copy(sample(GCP), landing / "gcp-standard.csv")
    month = ["2020-11-01T00:00:00Z", "2020-12-01T00:00:00Z"]
    with open(landing / "gcp-focus.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["ProviderName", "BillingAccountId", "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
                         "ChargePeriodEnd", "BilledCost", "EffectiveCost", "BillingCurrency", "ChargeCategory", "ServiceName"])
        writer.writerow(["Google Cloud", "000000-B0BBA4-940A77", *month, "2020-11-11T00:00:00Z", "2020-11-11T01:00:00Z",
                         "5.00", "5.00", "USD", "Usage", "Compute Engine"])
    run(landing, warehouse)
    assert totals(warehouse) == provider_totals[GCP][:2]
    assert {p: s for p, (s, _) in file_verdicts(warehouse).items()} == {"gcp-standard.csv": "loaded", "gcp-focus.csv": "superseded"}


def test_a_stale_export_never_wins_by_its_month_long_lines(tmp_path, provider_totals):
    """Two CUR definitions of one payer: the finer one stopped on day 7, the other reaches day 14.
    Both carry the month's tax, dated over the whole month, so their lines all 'end' on the 1st of
    the next month; the last day a charge starts on tells them apart (the stale one won by its
    line count, and the month lost 1.08)."""
    header, rows = cur_lines()
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    CurDelivery(ASSEMBLY_A, [header + "".join(rows)], T1).place(landing)
    names = next(csv.reader([header]))
    kind = names.index("lineItem/LineItemType")
    month_long = [line for line in rows if next(csv.reader([line]))[kind] == "Tax"]
    assert month_long
    early = cur_days(1, 7)
    finer = early + "".join(month_long) + "".join(early.splitlines(keepends=True)[1:])  # the early days twice as fine
    report, key = "gpu-cur-res", f"cur/gpu-cur-res/{RANGE}/{ASSEMBLY_B}/gpu-cur-res-00001.csv.gz"
    manifest = {**json.loads(cur_manifest(ASSEMBLY_B, [key])), "reportName": report}
    write(landing / key.removeprefix("cur/"), gzip.compress(finer.encode()), T2)
    write(landing / report / RANGE / ASSEMBLY_B / f"{report}-Manifest.json", json.dumps(manifest).encode(), T2)
    run(landing, warehouse)
    assert close(totals(warehouse)[0], provider_totals[CUR][0])


def test_a_complete_download_counts_while_the_exports_delivery_misses_a_part(tmp_path, provider_totals):
    header, rows = cur_lines()
    half = len(rows) // 2
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    export = CurDelivery(ASSEMBLY_A, [header + "".join(rows[:half]), header + "".join(rows[half:])], T1)
    export.place_part(landing, 1)
    export.place_manifests(landing)
    write(landing / "downloads" / "gpu-cur-november.csv", (header + "".join(rows)).encode(), T2)
    run(landing, warehouse)
    assert close(totals(warehouse)[0], provider_totals[CUR][0])
    export.place_part(landing, 2)
    run(landing, warehouse)
    assert close(totals(warehouse)[0], provider_totals[CUR][0])
    assert file_verdicts(warehouse)["downloads/gpu-cur-november.csv"][0] == "superseded"


def test_a_warehouse_from_before_charge_starts_were_recorded_gets_them_from_the_lake(tmp_path):
    """Files read before raw.file_slices recorded charge starts: the upgrade fills them from the lake's
    lines once, so disjoint daily files loaded back then add up from the next run."""
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    write(landing / "days01-03.csv", cur_days(1, 3).encode())
    run(landing, warehouse)
    conn = connect(warehouse)
    before = fetch_all(conn, "SELECT min_charge_start, max_charge_start FROM raw.file_slices")
    conn.execute("ALTER TABLE raw.file_slices DROP COLUMN max_charge_start")
    conn.execute("ALTER TABLE raw.file_slices DROP COLUMN min_charge_start")
    conn.execute("DELETE FROM main.finops_setup")
    conn.close()
    write(landing / "days04-06.csv", cur_days(4, 6).encode())
    run(landing, warehouse)
    conn = connect(warehouse, read_only=True)
    try:
        assert fetch_all(conn, "SELECT min_charge_start, max_charge_start FROM raw.file_slices WHERE path = 'days01-03.csv'") == before
    finally:
        conn.close()
    assert totals(warehouse)[0] == days_total(cur_days(1, 6))


def test_a_header_only_file_is_loaded_with_nothing_in_it_not_superseded(tmp_path):
    header, _ = cur_lines()
    landing, warehouse = tmp_path / "landing", tmp_path / "wh.duckdb"
    write(landing / "empty.csv", header.encode())
    run(landing, warehouse)
    status, note = file_verdicts(warehouse)["empty.csv"]
    assert status == "loaded" and note.startswith("delivery file:")
