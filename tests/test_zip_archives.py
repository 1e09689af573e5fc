"""Files delivered as `.zip` archives: AWS's ZIP-compressed CUR, consoles' invoice downloads."""

import io
import zipfile
from decimal import Decimal

import pyarrow as pa

from connectors.registry import detect
from models.schemas import COST_LINE
from pipelines.ingest.landing import digest_of, ingest_landing
from pipelines.ledger.deliveries import content_sha256
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import read_context, sample, smi_minutes

CUR = "billing/aws_cur_legacy_csv_focusconverters_fixture.csv"


def zipped(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def read(path):
    found = detect(path)
    assert found.connector is not None, found.reason
    ctx = read_context(path.name)
    return found.connector.name, pa.Table.from_batches(list(found.connector.read(path, ctx)), schema=COST_LINE), ctx


def test_a_zip_compressed_cur_loads_every_row_and_reconciles(tmp_path):
    path = zipped(tmp_path / "report-00001.csv.zip", {"report-00001.csv": sample(CUR).read_bytes()})
    name, table, ctx = read(path)
    assert (name, table.num_rows, len(ctx.quarantined)) == ("aws_cur", 1281, 0)
    assert ctx.source_total.quantize(Decimal("0.01")) == Decimal("1.68")


def test_a_ragged_line_in_a_zipped_invoice_is_read_on_row_by_row(tmp_path):
    """Arrow refuses the ragged row; the row-by-row reader reads the archive's file again."""
    header = "Invoice ID,Account ID,Instance ID,Instance Name,Region,GPU Model,GPU Count,Billing Mode,Start Time,End Time,Amount,Currency"
    line = "INV-1,acc,{},n,us,H100,8,on-demand,2026-09-01 00:00:00,2026-09-01 10:00:00,{},USD"
    text = "\n".join([header, line.format("i-1", "100.00"), line.format("i-2", "200.00") + ",extra", line.format("i-3", "300.00")])
    path = zipped(tmp_path / "invoice.zip", {"invoice.csv": (text + "\n").encode()})
    name, table, ctx = read(path)
    assert name == "gpu_rental_generic"
    assert table["ResourceId"].to_pylist() == ["i-1", "i-3"] and [q["x_SourceRow"] for q in ctx.quarantined] == [2]


def test_zipped_telemetry_loads(tmp_path):
    from datetime import UTC, datetime

    text = smi_minutes(datetime(2026, 10, 1, tzinfo=UTC), 10, 2, lambda m, g: 50, "GPU-z-")
    path = zipped(tmp_path / "smi.csv.zip", {"smi.csv": text.encode()})
    found = detect(path)
    assert found.connector.name == "nvidia_smi"
    ctx = read_context(path.name)
    assert sum(batch.num_rows for batch in found.connector.read(path, ctx)) == 20


def test_a_zip_and_its_file_are_one_content(tmp_path):
    data = sample(CUR).read_bytes()
    (tmp_path / "cur.csv").write_bytes(data)
    path = zipped(tmp_path / "cur.csv.zip", {"cur.csv": data.replace(b"\n", b"\r\n")})
    assert not digest_of(path).plain
    assert content_sha256(path) == content_sha256(tmp_path / "cur.csv")


def test_in_the_landing_a_zip_beside_its_file_loads_once_and_a_zip_of_several_files_is_said_why(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    data = sample(CUR).read_bytes()
    (landing / "cur.csv").write_bytes(data)
    zipped(landing / "cur.csv.zip", {"cur.csv": data})
    zipped(landing / "two.zip", {"a.csv": data, "b.csv": data})
    damaged = io.BytesIO()
    zipped(damaged, {"c.csv": data})
    (landing / "damaged.csv.zip").write_bytes(damaged.getvalue()[:300])
    conn = connect(tmp_path / "wh.duckdb")
    try:
        summary = ingest_landing(conn, landing)
        outcomes = {o.path: (o.status, o.rows_loaded) for o in summary.outcomes}
        reasons = dict(fetch_all(conn, "SELECT path, detail FROM raw.files WHERE status = 'unrecognized'"))
        assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines") == [(1281,)]
    finally:
        conn.close()
    assert outcomes["cur.csv"] == ("loaded", 1281) and outcomes["cur.csv.zip"] == ("duplicate", 0)
    assert outcomes["two.zip"][0] == outcomes["damaged.csv.zip"][0] == "unrecognized"
    assert reasons["two.zip"].startswith("a zip archive of 2 files: unzip it into the landing folder")


def test_a_damaged_archive_is_said_unreadable_and_the_other_files_load(tmp_path):
    """A small member whose CRC does not match (a byte flipped in transit) raised out of the sniff
    and stopped the whole ingest; it is now left unrecognised with the reason."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "cur.csv").write_bytes(sample(CUR).read_bytes())
    text = smi_minutes_text()
    archive = tmp_path / "smi.csv.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_STORED) as out:
        out.writestr("smi.csv", text)
    data = bytearray(archive.read_bytes())
    data[data.index(b"NVIDIA")] ^= 1  # inside the stored member: its CRC no longer matches
    (landing / "smi.csv.zip").write_bytes(bytes(data))
    conn = connect(tmp_path / "wh.duckdb")
    try:
        summary = ingest_landing(conn, landing)
        files = dict(fetch_all(conn, "SELECT path, status FROM raw.files"))
        reason = fetch_all(conn, "SELECT detail FROM raw.files WHERE path = 'smi.csv.zip'")[0][0]
    finally:
        conn.close()
    assert files == {"cur.csv": "loaded", "smi.csv.zip": "unrecognized"} and summary.outcomes
    assert reason == "a compressed file that cannot be read (BadZipFile: Bad CRC-32 for file 'smi.csv')"


def test_json_exports_in_an_archive_or_gzip_are_read_decompressed(tmp_path):
    """The JSON readers opened the file's own bytes, so a zipped (or gzipped) pod listing or
    checkpoint log was claimed by the sniff and then failed or quarantined binary as rows."""
    import gzip
    import json

    from tests.test_connector_workloads_storage import pod

    listing = json.dumps({"kind": "List", "items": [pod("sft", "research", "gpu-a100-01", 8, "2026-09-02T00:00:00Z")]})
    events = ('{"job": "pt", "host": "gpu-a100-01", "started_at": "2026-09-01T05:52:00Z", '
              '"ended_at": "2026-09-01T06:00:00Z", "bytes": 1024}\n')
    for name, text, connector in (("pods.json", listing, "kubernetes_pods"), ("ckpt.jsonl", events, "checkpoint_events")):
        for packed, data in ((f"{name}.zip", None), (f"{name}.gz", gzip.compress(text.encode()))):
            path = tmp_path / packed
            if data is None:
                zipped(path, {name: text.encode()})
            else:
                path.write_bytes(data)
            found = detect(path)
            assert found.connector.name == connector, packed
            ctx = read_context(packed)
            assert sum(batch.num_rows for batch in found.connector.read(path, ctx)) == 1 and not ctx.quarantined, packed


def test_macos_archive_litter_beside_the_file_is_not_a_second_file(tmp_path):
    path = zipped(tmp_path / "cur.csv.zip", {"cur.csv": sample(CUR).read_bytes(), "__MACOSX/._cur.csv": b"\x00\x05",
                                              ".DS_Store": b"\x00"})
    name, table, _ = read(path)
    assert (name, table.num_rows) == ("aws_cur", 1281)


def test_an_archive_cut_short_is_said_so(tmp_path):
    whole = zipped(tmp_path / "whole.zip", {"cur.csv": sample(CUR).read_bytes()}).read_bytes()
    cut = tmp_path / "cur.csv.zip"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    assert detect(cut).reason == "a .zip file that cannot be opened as an archive (cut short while syncing?)"


def smi_minutes_text() -> str:
    from datetime import UTC, datetime

    return smi_minutes(datetime(2026, 10, 1, tzinfo=UTC), 30, 2, lambda m, g: 50, "GPU-z-")


def test_a_zip_of_a_workbook_parquet_or_gzip_and_a_workbook_named_zip_say_what_to_do(tmp_path):
    import gzip

    from tests.test_invoice_layouts import HEADER, SEPT_1, cells, workbook

    book = workbook(tmp_path / "账单.xlsx", {"S": [HEADER.split(","), cells("ins-a", SEPT_1, 1.0)]})
    renamed = tmp_path / "账单.zip"
    renamed.write_bytes(book.read_bytes())
    assert detect(renamed).reason == "an Excel workbook named .zip: rename it .xlsx"
    zipped_book = zipped(tmp_path / "book.xlsx.zip", {"账单.xlsx": book.read_bytes()})
    assert detect(zipped_book).reason == ("a zip archive of an Excel workbook or another archive (账单.xlsx): unzip it "
                                         "into the landing folder")
    zipped_gzip = zipped(tmp_path / "cur.csv.gz.zip", {"cur.csv.gz": gzip.compress(sample(CUR).read_bytes())})
    assert detect(zipped_gzip).reason == "a zip archive of a gzip file (cur.csv.gz): unzip it into the landing folder"
