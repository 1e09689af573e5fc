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
