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
