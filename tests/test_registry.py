from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

import connectors.registry as registry
from connectors.base import Connector, ReadContext
from pipelines.cli.main import app


class RentalInvoiceConnector(Connector):
    """A stand-in for a third-party package's connector."""

    name = "acme_rental"
    kind = "billing"
    recognises = "ACME GPU rental invoices (header starts with acme_invoice)"

    def detect(self, path: Path, head: bytes) -> bool:
        return head.startswith(b"acme_invoice")

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        return iter(())


class FakeEntryPoint:
    def __init__(self, name, target):
        self.name, self._target = name, target

    def load(self):
        return self._target


def test_entry_point_connectors_are_discovered_and_listed(monkeypatch, tmp_path):
    def fake_entry_points(group):
        assert group == "gpu_finops.connectors"
        return [FakeEntryPoint("acme", RentalInvoiceConnector), FakeEntryPoint("clash", lambda: registry.FocusConnector()),
                FakeEntryPoint("broken", "not a connector")]

    monkeypatch.setattr(registry, "entry_points", fake_entry_points)
    registry.all_connectors.cache_clear()
    try:
        names = [c.name for c in registry.all_connectors()]
        assert names[0] == "focus" and names[-1] == "acme_rental"  # built-ins first
        assert names.count("focus") == 1 and "broken" not in names  # duplicate and broken refused
        invoice = tmp_path / "inv.csv"
        invoice.write_text("acme_invoice,amount\n1,2\n")
        assert registry.detect(invoice).connector.name == "acme_rental"
        listing = CliRunner().invoke(app, ["connectors"], terminal_width=200)
        assert listing.exit_code == 0
        for name in names:
            assert name in listing.output
    finally:
        registry.all_connectors.cache_clear()


def test_unrecognised_and_empty_files_say_why(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    other = tmp_path / "summary.csv"
    other.write_text("cluster,jobs\nseren,10\n")
    assert registry.detect(empty).reason == "empty file"
    assert registry.detect(other).reason == "no connector recognises its content (header)"


def test_a_utf16_file_and_a_semicolon_separated_one_say_what_to_do(tmp_path):
    """Excel's "Unicode Text" and PowerShell write UTF-16; a spreadsheet with regional settings
    saves CSV with ';'. Either was left unrecognised with no hint (or a UTF-16 Azure export was
    refused as cut short): the reason now says how to save it."""
    from tests.conftest import sample

    text = sample("billing/azure_ea_actual_cost_focusconverters_fixture.csv").read_text(encoding="utf-8-sig")
    for name, encoding in (("utf16.csv", "utf-16"), ("utf16le.csv", "utf-16-le")):
        (tmp_path / name).write_bytes(text.encode(encoding))
        detection = registry.detect(tmp_path / name)
        assert detection.connector is None and detection.reason.startswith("UTF-16 text: save it as UTF-8"), detection
    lines = text.splitlines()
    semicolons = tmp_path / "regional.csv"
    semicolons.write_text("\n".join(line.replace(",", ";") for line in lines[:3]) + "\n")
    assert registry.detect(semicolons).reason == (
        "no connector recognises its content (header); its fields are separated by ';' (saved with a spreadsheet's "
        "regional settings?): save it comma-separated")
