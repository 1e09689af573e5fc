"""The connector kit (connectors.kit) and its contract suite (connectors.kit_contract): every built-in
connector passes the contract on its fuzz seed, and the suite catches broken connectors."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from connectors import kit
from connectors.kit import Connector, ReadContext
from connectors.kit_contract import ContractFailure, check_connector
from connectors.registry import all_connectors
from tests.fuzz.seeds import all_seeds
from tests.test_fuzz_connectors import expected_rows

CONNECTORS = {c.name: c for c in all_connectors()}
SEEDS = all_seeds()
# A FOCUS read costs seconds (its polars plan is wide): fewer mutations there, the fuzz suite covers the rest.
SLOW = {"focus": dict(truncations=2, corruptions=2)}


def seed_file(tmp_path: Path, seed) -> Path:
    path = tmp_path / re.sub(r"\W", "_", seed.id) / seed.filename
    path.parent.mkdir(parents=True)
    path.write_bytes(seed.content)
    return path


@pytest.mark.parametrize("seed", SEEDS, ids=[s.id for s in SEEDS])
def test_every_builtin_connector_passes_the_contract(seed, tmp_path):
    path = seed_file(tmp_path, seed)
    report = check_connector(CONNECTORS[seed.connector], path, rows=expected_rows(seed.connector, path),
                             **SLOW.get(seed.connector, {}))
    assert not report.failed


def test_builtin_connectors_import_the_project_only_through_the_kit():
    """The kit cannot rot: no built-in connector reaches past it into connectors.base or _tabular."""
    internal = {"connectors.base", "connectors._tabular"}
    plumbing = {"__init__.py", "base.py", "_tabular.py", "_telemetry.py", "_spreadsheet.py", "kit.py", "kit_contract.py", "registry.py",
                "mapping_schema.py"}
    for module in sorted(Path(kit.__file__).parent.glob("*.py")):
        if module.name in plumbing:
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in internal, f"{module.name} imports {node.module}: import from connectors.kit"


def test_to_canonical_says_what_a_frame_without_row_numbers_lacks():
    ctx = ReadContext(source_file="f.csv", ingested_at=datetime(2026, 1, 1, tzinfo=UTC))
    frame = pl.DataFrame({"workload_id": ["a"], "gpu_count": [1]})
    with pytest.raises(TypeError, match="number_rows"):
        kit.to_canonical(frame, "workload", "mine", ctx)
    batch = kit.to_canonical(kit.number_rows(frame), "workload", "mine", ctx)
    assert batch.schema.equals(kit.schema_of("workload"))
    assert batch.column("x_SourceRow").to_pylist() == [1] and batch.column("x_Connector").to_pylist() == ["mine"]


def test_units_money_and_declared_money_are_exact():
    frame = pl.DataFrame({"d": ["90 min", "2h", "5400 s", "3 parsec", "x"], "m": ["0.1", "0.2", "1e3", "10.0000000001", ""]})
    out = frame.select(kit.parse_unit("d", "h").alias("h"), kit.parse_money("m").alias("m"))
    assert out.get_column("h").to_list()[:3] == [Decimal("1.5"), Decimal(2), Decimal("1.5")]
    assert out.get_column("h").to_list()[3:] == [None, None]
    assert out.get_column("m").to_list()[:2] == [Decimal("0.1"), Decimal("0.2")]
    assert out.get_column("m").to_list()[3] == Decimal("10.0000000001")
    ctx = ReadContext(source_file="f", ingested_at=datetime(2026, 1, 1, tzinfo=UTC))
    ctx.declare_money("0.1", quarantined="0.1")
    ctx.declare_money(Decimal("0.2"))
    assert (ctx.source_total, ctx.quarantined_total) == (Decimal("0.3"), Decimal("0.1"))
    with pytest.raises(TypeError):
        ctx.declare_money(0.1)


# --- deliberately broken connectors: the suite must catch each --------------------------------

INVOICE = b"instance,amount\ni-1,10.50\ni-2,20.25\ni-3,bad\n"


class _Invoice(Connector):
    """A small, correct billing connector the broken ones below each spoil in one way."""

    name = "test_invoice"
    kind = "billing"
    recognises = "test invoices"

    def detect(self, path, head):
        return kit.header_fields(head) == ["instance", "amount"]

    def frames(self, path, ctx):
        return kit.stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name)

    def read(self, path, ctx) -> Iterator[pa.RecordBatch]:
        for frame in self.frames(path, ctx):
            amount = kit.parse_money("amount")
            reason = kit.first_reason([(amount.is_null(), "amount is not a number")])
            accepted = kit.split_rejected(frame, reason, ctx, self.name, ["instance", "amount"], amount=amount)
            yield kit.to_canonical(self.shape(accepted), "billing", self.name, ctx)

    def shape(self, frame):
        amount = kit.parse_money("amount")
        return frame.select(amount.alias("BilledCost"), amount.alias("EffectiveCost"), amount.alias("x_SourceCost"),
                            pl.lit("USD").alias("BillingCurrency"), pl.lit("Usage").alias("ChargeCategory"),
                            pl.lit("2026-09-01").str.to_datetime(time_zone="UTC").alias("ChargePeriodStart"),
                            pl.lit("2026-09-02").str.to_datetime(time_zone="UTC").alias("ChargePeriodEnd"),
                            kit.SOURCE_ROW)


class _DropsARow(_Invoice):
    def read(self, path, ctx):  # the bad row vanishes: neither loaded nor quarantined
        for frame in self.frames(path, ctx):
            amount = kit.parse_money("amount")
            ctx.declare_money(str(frame.select(amount.sum()).item()))
            yield kit.to_canonical(self.shape(frame.filter(amount.is_not_null())), "billing", self.name, ctx)


class _MoneyDoesNotReconcile(_Invoice):
    def read(self, path, ctx):  # declares no money at all
        for frame in self.frames(path, ctx):
            amount = kit.parse_money("amount")
            kit.split_rejected(frame, pl.when(amount.is_null()).then(pl.lit("bad")), ctx, self.name, ["amount"])
            yield kit.to_canonical(self.shape(frame.filter(amount.is_not_null())), "billing", self.name, ctx)


class _KeyErrorWhenCut(_Invoice):
    def read(self, path, ctx):  # trusts the file to be whole
        rows = path.read_bytes().decode("utf-8", errors="replace").splitlines()
        if not rows[-1].count(","):
            raise KeyError("amount")
        yield from super().read(path, ctx)


class _ClaimsEverything(_Invoice):
    def detect(self, path, head):
        return True


@pytest.mark.parametrize("broken, check", [
    (_DropsARow(), "rows_accounted"),
    (_MoneyDoesNotReconcile(), "money_reconciles"),
    (_KeyErrorWhenCut(), "truncation"),
    (_ClaimsEverything(), "rejects_other_formats"),
], ids=["drops-a-row", "money-does-not-reconcile", "keyerror-on-truncation", "claims-everything"])
def test_the_contract_catches_a_broken_connector(broken, check, tmp_path):
    fixture = tmp_path / "invoice.csv"
    fixture.write_bytes(INVOICE)
    check_connector(_Invoice(), fixture, rows=3, expected_total="30.75")  # the sound one passes
    with pytest.raises(ContractFailure, match=f"FAILED {check}"):
        check_connector(broken, fixture, rows=3)


def test_a_check_whose_message_quotes_an_empty_cell_still_rejects_its_row():
    """`pl.format` of a null is null: the row was flagged but had no reason, so it loaded (a
    scaffolded connector's empty amount reached core.cost_lines as a NULL cost)."""
    import polars as pl

    from connectors._tabular import UNWORDED, _reasons, first_reason

    frame = pl.DataFrame({"amount": [None, "1.00"]}, schema={"amount": pl.String})
    reason = first_reason([(pl.col("amount").is_null(), pl.format("amount '{}' is not an amount", pl.col("amount")))])
    assert _reasons(frame, reason).to_list() == [UNWORDED, None]
    assert frame.select(reason).to_series().to_list() == [UNWORDED, None]


def test_a_quarantine_reason_says_a_blank_cell_is_empty_and_quotes_any_other_fit_to_print():
    """`cell_reason`: a blank cell (null, empty, spaces) is empty, never quoted as ''; another is
    quoted with control, format and line-separator characters replaced (a U+2028 split the reason
    over two lines) and clipped at 40 characters."""
    from connectors.kit import cell_reason

    cells = [None, "", "  ", "12,5x", "a\u2028b\u2029c", "q\x1b[31mz", "9" * 45]
    reasons = pl.DataFrame({"amount": cells}, schema={"amount": pl.String}).select(
        cell_reason("amount", "amount", "not a number")).to_series().to_list()
    assert reasons == ["amount is empty", "amount is empty", "amount is empty", "amount '12,5x' is not a number",
                       "amount 'a?b?c' is not a number", "amount 'q?[31mz' is not a number",
                       f"amount '{'9' * 40}…' is not a number"]


def test_quarantined_money_is_declared_by_the_currency_the_connector_loads_or_not_said():
    """`split_rejected(currency=)` (kit 1.4) declares the rejected money by each row's currency as
    the connector loads it; a code that is no ISO 4217 one (as the connector would refuse it) is
    none. A connector of kit 1.3, passing no currency, says nothing of it: the report then takes
    the currency of the file's loaded lines, as before."""
    from decimal import Decimal

    import polars as pl

    from connectors.kit import ROW_NUMBER, ReadContext, first_reason, parse_money, split_rejected
    from pipelines.ingest.landing import set_aside_by_currency
    from tests.conftest import read_context

    frame = pl.DataFrame({"amount": ["1.00", "2.00", "3.00", "4.00", "5.00"], "currency": ["USD", "usd", "EUR", "USD", "US$"],
                          ROW_NUMBER: [1, 2, 3, 4, 5]})
    reason = first_reason([(pl.col(ROW_NUMBER) > 1, "bad")])
    said = read_context()
    split_rejected(frame, reason, said, "t", ["amount", "currency"], amount=parse_money("amount"), currency=pl.col("currency"))
    assert (said.source_total, said.quarantined_total) == (Decimal("15"), Decimal("14"))
    assert said.quarantined_by_currency == {"EUR": Decimal("3"), "USD": Decimal("4"), None: Decimal("7")}
    assert set_aside_by_currency(said) == [{"currency": "EUR", "amount": Decimal("3")}, {"currency": "USD", "amount": Decimal("4")},
                                           {"currency": None, "amount": Decimal("7")}]
    unsaid = read_context()
    split_rejected(frame, reason, unsaid, "t", ["amount", "currency"], amount=parse_money("amount"))
    assert (unsaid.quarantined_total, unsaid.quarantined_by_currency, set_aside_by_currency(unsaid)) == (Decimal("14"), {}, None)
    assert isinstance(unsaid, ReadContext)
