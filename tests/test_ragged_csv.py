"""Ragged and truncated CSV files (the ledger, item 7).

A row with fewer fields than the header loads with its missing last columns empty and a warning on
the file; a row with more fields is quarantined with its reason; quoted values with commas and
newlines are read as they are; a billing file cut short (mid-row, or a gzip stream that ends early)
is refused whole, naming the line where it ends, and the run exits non-zero.
"""

import csv
import gzip
from decimal import Decimal

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import connectors._tabular as tabular
from connectors.aws_cur import AwsCurConnector
from connectors.base import ConnectorError
from models.schemas import COST_LINE
from pipelines.cli.main import app
from pipelines.ingest.landing import ingest_landing
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import read_context, sample

KOKU = "billing/aws_cur_legacy_csv_usage_koku.csv"
HEADER = ("lineItem/LineItemType,lineItem/UsageStartDate,lineItem/UnblendedCost,lineItem/CurrencyCode,"
          "lineItem/LineItemDescription,lineItem/ProductCode,resourceTags/user:phase\n")


def line(n: int, cost: str = "1.25", description: str = "GPU hours", phase: str = "training") -> str:
    return f"Usage,2026-09-{1 + n % 28:02d}T00:00:00Z,{cost},USD,{description},AmazonEC2,{phase}\n"


def read(path, source="cur.csv"):
    ctx = read_context(source)
    batches = list(AwsCurConnector().read(path, ctx))
    return pa.Table.from_batches(batches, schema=COST_LINE).to_pylist(), ctx


def own_total(path) -> Decimal:
    with open(path, newline="") as fh:
        return sum((Decimal(r["lineItem/UnblendedCost"] or 0) for r in csv.DictReader(fh)), Decimal(0))


# --- fewer fields: padded, with a warning ---------------------------------------------------------------------------

def test_the_koku_cur_loads_every_row_with_its_last_column_empty(tmp_path):
    path = sample(KOKU)
    rows, ctx = read(path, KOKU)
    assert len(rows) == 19 and not ctx.quarantined
    assert [r["x_SourceRow"] for r in rows] == list(range(1, 20))
    total = sum(r["x_SourceCost"] for r in rows)
    assert total == ctx.source_total
    # The file's own sum has up to 16 decimals; lines are kept at the connector's scale (6 today).
    assert abs(total - own_total(path)) <= Decimal("0.0000005") * 19
    assert ctx.warnings == ["19 rows with fewer fields than the header's 131: the missing last columns are empty "
                            "(first at line 2, 130 fields)"]


def test_the_warning_reaches_raw_files_and_the_run_passes(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "koku.csv").write_bytes(sample(KOKU).read_bytes())
    conn = connect(tmp_path / "wh.duckdb")
    outcome = ingest_landing(conn, landing).outcomes[0]
    assert (outcome.status, outcome.rows_loaded) == ("loaded", 19)
    (detail,) = fetch_all(conn, "SELECT detail FROM raw.files WHERE path = 'koku.csv'")[0]
    assert "warning: 19 rows with fewer fields than the header's 131" in detail
    (loaded,) = fetch_all(conn, "SELECT sum(x_SourceCost) FROM raw.cost_lines WHERE x_SourceFile = 'koku.csv'")[0]
    assert abs(loaded - own_total(sample(KOKU))) <= Decimal("0.0000005") * 19


def test_short_rows_anywhere_are_padded_and_counted(tmp_path):
    text = HEADER + line(1) + "Usage,2026-09-02T00:00:00Z,2.50,USD,GPU hours,AmazonEC2\n" + line(3) + \
        "Usage,2026-09-04T00:00:00Z,4.00,USD\n" + line(5)
    path = tmp_path / "cur.csv"
    path.write_text(text)
    rows, ctx = read(path)
    assert [r["x_SourceRow"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["x_SourceCost"] for r in rows] == [Decimal("1.25"), Decimal("2.5"), Decimal("1.25"), Decimal("4"), Decimal("1.25")]
    assert [r["Tags"] for r in rows][1] in (None, '{"phase":null}')
    assert ctx.warnings == ["2 rows with fewer fields than the header's 7: the missing last columns are empty "
                            "(first at line 3, 6 fields)"]


def test_a_ragged_row_past_the_first_block_keeps_the_numbering(tmp_path, monkeypatch):
    """Arrow streams the blocks before the ragged row; Python reads on from there, numbering on."""
    monkeypatch.setattr(tabular, "BLOCK_SIZE", 4096)
    monkeypatch.setattr(tabular, "FALLBACK_BATCH_CELLS", 700)  # frames of 100 rows
    body = [line(n, cost=f"{n}.01") for n in range(1, 1001)]
    body[700] = f"Usage,2026-09-01T00:00:00Z,701.01,USD,\"short, and\nquoted\",AmazonEC2\n"
    path = tmp_path / "cur.csv"
    path.write_text(HEADER + "".join(body))
    rows, ctx = read(path)
    assert [r["x_SourceRow"] for r in rows] == list(range(1, 1001))
    assert sum(r["x_SourceCost"] for r in rows) == sum(Decimal(f"{n}.01") for n in range(1, 1001)) == own_total(path)
    assert rows[700]["ChargeDescription"] == "short, and\nquoted"
    assert ctx.warnings == ["1 row with fewer fields than the header's 7: the missing last columns are empty "
                            "(first at line 702, 6 fields)"]


# --- more fields: that row quarantined ------------------------------------------------------------------------------

def test_a_row_with_more_fields_is_quarantined_with_its_reason(tmp_path):
    text = HEADER + line(1) + "Usage,2026-09-02T00:00:00Z,2.50,USD,GPU, hours,AmazonEC2,training\n" + line(3)
    path = tmp_path / "cur.csv"
    path.write_text(text)
    rows, ctx = read(path)
    assert [r["x_SourceRow"] for r in rows] == [1, 3]
    assert [(q["x_SourceRow"], q["reason"]) for q in ctx.quarantined] == [
        (2, "line 3: Expected 7 columns, got 8: values past the last column, resourceTags/user:phase")]
    assert ctx.quarantined[0]["raw_record"] == "Usage,2026-09-02T00:00:00Z,2.50,USD,GPU, hours,AmazonEC2,training"
    assert not ctx.warnings
    # Loaded + quarantined = source holds: a row that cannot be split into columns has no known amount.
    assert ctx.source_total == sum(r["x_SourceCost"] for r in rows) + ctx.quarantined_total


def test_a_long_row_is_quarantined_by_the_ingest_and_the_rest_loads(tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "cur.csv").write_text(HEADER + line(1) + line(2).replace("GPU hours", "GPU,hours") + line(3))
    conn = connect(tmp_path / "wh.duckdb")
    outcome = ingest_landing(conn, landing).outcomes[0]
    assert (outcome.status, outcome.rows_loaded) == ("loaded", 2)
    assert fetch_all(conn, "SELECT x_SourceRow, reason FROM raw.quarantine") == [
        (2, "line 3: Expected 7 columns, got 8: values past the last column, resourceTags/user:phase")]


# --- quoted values ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ragged", [False, True])
def test_quoted_commas_and_newlines_are_values(tmp_path, ragged):
    quoted = ['"a, b"', '"two\nlines"', '"say ""hi"", then\r\nleave"', '""']
    body = [line(n, description=d) for n, d in enumerate(quoted, start=1)]
    if ragged:  # the same values in a file that takes the Python path
        body.append("Usage,2026-09-09T00:00:00Z,9.00,USD,\"x,\ny\",AmazonEC2\n")
    path = tmp_path / "cur.csv"
    path.write_text(HEADER + "".join(body), newline="")
    rows, ctx = read(path)
    descriptions = [r["ChargeDescription"] for r in rows]
    assert descriptions[:4] == ["a, b", "two\nlines", 'say "hi", then\r\nleave', None]
    assert [r["x_SourceRow"] for r in rows] == list(range(1, len(body) + 1))
    assert not ctx.quarantined
    if ragged:
        assert descriptions[4] == "x,\ny" and ctx.warnings[0].startswith("1 row with fewer fields")
    else:
        assert not ctx.warnings


# --- truncated billing files: refused whole, naming the line ---------------------------------------------------------

def cur_rows(count: int) -> str:
    return HEADER + "".join(line(n, cost=f"{n}.5") for n in range(1, count + 1))


@pytest.mark.parametrize("ragged", [False, True])
def test_a_billing_file_cut_mid_row_is_refused_naming_the_line(tmp_path, ragged):
    text = cur_rows(50)
    if ragged:  # one short row earlier on: the Python path must still see the cut
        text = text.replace(",training\n", "\n", 1)
    cut = text[: text.index("\n", text.index("Usage,2026-09-13")) - 20]  # inside the 12th data row, line 13
    path = tmp_path / "cur.csv"
    path.write_text(cut)
    with pytest.raises(ConnectorError, match=r"cur.csv, line 13: file ends mid-row at line 13: a partial file is refused whole"):
        read(path)


def test_a_billing_file_cut_inside_a_quoted_value_is_refused(tmp_path):
    text = HEADER + line(1) + line(2, description='"begins here,\nand goes on')
    path = tmp_path / "cur.csv"
    path.write_text(text)
    with pytest.raises(ConnectorError, match=r"line 3: file ends mid-row at line 3"):
        read(path)


def test_a_last_row_whole_but_for_its_newline_loads(tmp_path):
    path = tmp_path / "cur.csv"
    path.write_text(cur_rows(3).rstrip("\n"))
    rows, _ = read(path)
    assert len(rows) == 3
    ragged = tmp_path / "ragged.csv"
    ragged.write_text(cur_rows(3).replace(",training\n", "\n", 1).rstrip("\n"))
    rows, ctx = read(ragged)
    assert len(rows) == 3 and ctx.warnings


@pytest.mark.parametrize("compress", [False, True])
def test_an_export_of_its_header_alone_without_a_newline_has_no_rows(tmp_path, compress):
    """An empty month's export is often its header with no newline after it. That line is the
    header, not a row: before, it was read as one and quarantined, so the file showed damage."""
    from connectors.nvidia_smi import NvidiaSmiConnector
    from tests.conftest import SMI_HEADER
    landing = tmp_path / "landing"
    landing.mkdir()
    for name, text in (("cur.csv", HEADER), ("smi.csv", SMI_HEADER + "\n")):
        data = text.rstrip("\n").encode()
        (landing / (name + (".gz" if compress else ""))).write_bytes(gzip.compress(data) if compress else data)
    rows, ctx = read(landing / ("cur.csv.gz" if compress else "cur.csv"))
    assert (rows, ctx.quarantined, ctx.warnings) == ([], [], [])
    smi = landing / ("smi.csv.gz" if compress else "smi.csv")
    ctx = read_context("smi.csv")
    assert sum(b.num_rows for b in NvidiaSmiConnector().read(smi, ctx)) == 0 and ctx.quarantined == []
    conn = connect(tmp_path / "wh.duckdb")
    outcomes = ingest_landing(conn, landing).outcomes
    assert sorted((o.path.split(".")[0], o.status, o.rows_loaded, o.rows_quarantined) for o in outcomes) == [
        ("cur", "loaded", 0, 0), ("smi", "loaded", 0, 0)]
    assert fetch_all(conn, "SELECT count(*) FROM raw.quarantine") == [(0,)]
    bom = tmp_path / "bom.csv"  # a BOM, then a space before the first name
    bom.write_bytes(b"\xef\xbb\xbf " + HEADER.rstrip("\n").encode())
    rows, ctx = read(bom)
    assert (rows, ctx.quarantined) == ([], [])
    titled = tmp_path / "titled.csv"  # an invoice's header below its title (the mapping connector's reading)
    titled.write_text("Usage report for September\n" + HEADER.rstrip("\n"))
    ctx = read_context("titled.csv")
    assert list(tabular.stream_csv_as_strings(titled, "titled.csv", ctx=ctx, connector="x", header_line=2)) == []
    assert ctx.quarantined == []


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_a_gzip_billing_file_that_ends_early_is_refused_naming_the_line(tmp_path, fraction):
    data = cur_rows(40_000).encode()
    packed = gzip.compress(data)
    cut = packed[: int(len(packed) * fraction)]
    import zlib

    arrived = zlib.decompressobj(wbits=31).decompress(cut)
    line_no = arrived.count(b"\n") + 1
    path = tmp_path / "cur.csv.gz"
    path.write_bytes(cut)
    with pytest.raises(ConnectorError, match=rf"cur.csv.gz, line {line_no}: (file ends mid-row at line {line_no} "
                       rf"\(compressed stream cut short\)|compressed stream ends early after line {line_no - 1})"):
        read(path, "cur.csv.gz")


def test_a_run_with_a_truncated_billing_file_exits_non_zero(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    landing.mkdir()
    text = cur_rows(20)
    (landing / "cut.csv").write_text(text[: text.index("Usage,2026-09-08") + 30])  # inside data row 7, line 8
    (landing / "koku.csv").write_bytes(sample(KOKU).read_bytes())
    result = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"),
                                      "--reports", str(tmp_path / "reports")], terminal_width=200)
    assert result.exit_code == 1, result.output[-3000:]
    assert "Traceback" not in result.output
    assert result.stdout.splitlines()[-1].startswith("failed: cut.csv — "), result.stdout.splitlines()[-3:]
    assert "line 8: file ends mid-row at line 8" in result.stdout.splitlines()[-1]
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, "SELECT count(*) FROM raw.cost_lines WHERE x_SourceFile = 'cut.csv'") == [(0,)]
        assert fetch_all(conn, "SELECT status FROM raw.files ORDER BY path") == [("failed",), ("loaded",)]
    finally:
        conn.close()


def test_a_run_says_which_loaded_files_had_rows_set_aside_or_filled_out(tmp_path, monkeypatch):
    """A file that loads with a short row (filled out with empty columns) or a quarantined row passes
    the run, and the run says so, file by file: the damage is not left to raw.files and raw.quarantine."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "cur.csv").write_text(HEADER + line(1) + "Usage,2026-09-02T00:00:00Z,2.50,USD\n"
                                     + line(3, cost="3.50").replace(",USD,", ",XYZ,") + line(4))
    result = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(tmp_path / "wh.duckdb"),
                                      "--reports", str(tmp_path / "reports")], terminal_width=300)
    assert result.exit_code == 0, result.output[-3000:]
    assert ("quarantined rows: cur.csv — 1 row quarantined (their cost in the file: 3.5, currency not known), "
            "e.g. lineItem/CurrencyCode 'XYZ' is not an ISO 4217 code") in result.output, result.output[-2000:]
    assert ("warning: cur.csv — 1 row with fewer fields than the header's 7: the missing last columns are empty "
            "(first at line 3, 4 fields)") in result.output
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        assert fetch_all(conn, "SELECT count(*), sum(EffectiveCost) FROM core.cost_lines") == [(3, Decimal("5.00"))]
    finally:
        conn.close()
