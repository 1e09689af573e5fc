"""The connector contract: the checks every connector, built-in or plug-in, passes on a fixture file.

    from connectors.kit_contract import check_connector
    check_connector(MyConnector(), "fixtures/invoice.csv", rows=4, expected_total="1234.56")

raises ContractFailure (an AssertionError, so pytest shows it as a failed test) listing every check
that failed, and returns a ContractReport otherwise. For one pytest test per check:

    from connectors.kit_contract import contract_tests
    test_contract = contract_tests(MyConnector, "fixtures/invoice.csv", rows=4)

The checks (CHECKS), in the order they run:

- detects_fixture: `detect` claims the fixture (its first 64 KiB, as the landing ingest reads them);
- rejects_other_formats: `detect` claims none of a few other formats (FOCUS, workloads, nvidia-smi,
  DCGM, JSON lines, binary junk; each skipped for the built-in connector it belongs to);
- reads_fixture: `read` loads at least one row, every batch in the kind's canonical schema;
- rows_accounted: every source row is loaded or quarantined, never both (`rows`: how many data rows
  the fixture has, or their numbers; counted for a .csv fixture when not given);
- quarantine_reasons: every quarantined row has a reason, and the quarantine builds its Arrow batch;
- money_reconciles (billing): the money the file states = loaded x_SourceCost + quarantined money,
  exactly, and equals `expected_total` when given;
- required_columns: every REQUIRED_COLUMNS column and lineage column is filled on every row;
- rereads_identical: reading the file again gives the same batches, quarantine and money;
- truncation: the fixture cut short at `truncations` places, plain and gzip, raises nothing but
  ConnectorError and keeps the invariants above;
- corruption: `corruptions` copies with a few bytes overwritten (seeded, so a failure replays)
  raise nothing but ConnectorError and keep the invariants.

Needs no test framework: pytest is imported only by `contract_tests`.
"""

from __future__ import annotations

import csv
import gzip
import io
import random
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from connectors.kit import (
    DECOMPRESSION_ERRORS,
    LINEAGE_COLUMNS,
    REQUIRED_COLUMNS,
    SNIFF_BYTES,
    Connector,
    ConnectorError,
    ReadContext,
    read_head,
)

CHECKS = ("detects_fixture", "rejects_other_formats", "reads_fixture", "rows_accounted", "quarantine_reasons",
          "money_reconciles", "required_columns", "rereads_identical", "truncation", "corruption")
# Reads are stamped now (telemetry refuses samples from after their ingest), the same for every read.
INGESTED_AT = datetime.now(UTC).replace(microsecond=0)

# A few files of other formats, each with the built-in connector it belongs to (not asked to reject it).
OTHER_FORMATS: tuple[tuple[str, str, bytes], ...] = (
    ("focus", "focus.csv", b"BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd\n"
                           b"12.50,12.50,USD,Usage,2026-09-01T00:00:00Z,2026-09-01T01:00:00Z\n"),
    ("workloads_csv", "jobs.csv", b"workload_id,phase,host,gpu_count,started_at,ended_at\n"
                                  b"ft-1,finetuning,gpu-a100-02,2,2026-09-01T02:00:00Z,2026-09-02T20:00:00Z\n"),
    ("nvidia_smi", "gpu-node-07.csv",
     b"timestamp, name, pci.bus_id, utilization.gpu [%], memory.used [MiB], memory.total [MiB], power.draw [W]\n"
     b"2026/09/01 08:12:38.123, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 97 %, 65000 MiB, 81559 MiB, 650.12 W\n"),
    ("dcgm_exporter", "dcgm.prom", b"# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                                   b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a88f",Hostname="gpu-a100-02"} 97\n'),
    ("checkpoint_events", "checkpoints.jsonl",
     b'{"job": "pt-7b", "host": "gpu-a100-01", "started_at": "2026-09-01T05:52:00Z", "bytes": 2000, "storage_class": "nfs"}\n'),
    ("", "notes.txt", b"Quarterly notes\nnothing tabular here, just prose, with, some, commas\n"),
    ("", "blob.bin", bytes(random.Random(7).randrange(256) for _ in range(512))),
)


class ContractFailure(AssertionError):
    """One or more contract checks failed; the message lists each with what went wrong."""


@dataclass
class ContractReport:
    connector: str
    fixture: str
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def fail(self, check: str, message: str) -> None:
        self.failed.setdefault(check, message)

    def __str__(self) -> str:
        lines = [f"contract of connector {self.connector} on {self.fixture}: "
                 f"{len(self.passed)} passed, {len(self.failed)} failed"]
        lines += [f"  FAILED {check}: {message}" for check, message in self.failed.items()]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


@dataclass
class _Read:
    batches: list[pa.RecordBatch]
    ctx: ReadContext


def _read(connector: Connector, path: Path, timezone: str) -> _Read:
    ctx = ReadContext(source_file=path.name, ingested_at=INGESTED_AT, source_sha256="0" * 64, timezone=timezone)
    return _Read(list(connector.read(path, ctx)), ctx)


def _invariants(connector: Connector, got: _Read) -> dict[str, str]:
    """What must hold of any read that did not raise: {check: what went wrong}."""
    problems: dict[str, str] = {}
    for batch in got.batches:
        if not batch.schema.equals(connector.schema):
            problems["reads_fixture"] = f"a batch's schema is not the canonical {connector.kind} schema (kit.schema_of)"
            return problems
    try:
        got.ctx.quarantine_batch()
    except Exception as exc:
        problems["quarantine_reasons"] = f"the quarantine does not build its batch: {type(exc).__name__}: {exc}"
    for q in got.ctx.quarantined:
        if not (isinstance(q.get("reason"), str) and q["reason"].strip()):
            problems["quarantine_reasons"] = f"row {q.get('x_SourceRow')} is quarantined without a reason"
            break
    loaded = {r for b in got.batches for r in b.column("x_SourceRow").to_pylist()}
    both = loaded & {q["x_SourceRow"] for q in got.ctx.quarantined}
    if both:
        problems["rows_accounted"] = f"rows both loaded and quarantined: {sorted(both)[:10]}"
    for batch in got.batches:
        for name in REQUIRED_COLUMNS[connector.kind] + LINEAGE_COLUMNS:
            nulls = batch.column(name).null_count
            if nulls:
                problems["required_columns"] = f"required column {name} is empty on {nulls} loaded row(s)"
                break
    if connector.kind == "billing":
        money = sum((v for b in got.batches for v in b.column("x_SourceCost").to_pylist() if v is not None), Decimal(0))
        ctx = got.ctx
        if ctx.source_total != money + ctx.quarantined_total:
            problems["money_reconciles"] = (
                f"the file's declared money {ctx.source_total} != loaded x_SourceCost {money} + quarantined "
                f"{ctx.quarantined_total} (declare it with split_rejected(amount=...) or ctx.declare_money)")
    return problems


def _csv_rows(path: Path) -> set[int]:
    """Data rows of a headed CSV: records after the header that are not empty."""
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        records = list(csv.reader(fh))
    return {n for n, record in enumerate(records[1:], start=1) if any(v.strip() for v in record)}


def cut_positions(length: int, count: int) -> list[int]:
    """`count` places to cut a file of `length` bytes, spread over it, the first and last bytes included."""
    if length <= 1:
        return [0]
    spread = {length * i // count for i in range(count)} | {1, length - 1}
    return sorted(p for p in spread if 0 <= p < length)


def corrupted(content: bytes, count: int, seed: int) -> Iterable[tuple[str, bytes]]:
    """`count` copies of `content`, each with one to four bytes overwritten (seeded: replays alike)."""
    rng = random.Random(seed)
    specials = b'\x00\n\r",;|\xff\xfe{}[]-9.eE'
    for n in range(count):
        out = bytearray(content)
        edits = []
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(out)) if out else 0
            value = rng.choice(specials) if rng.random() < 0.6 else rng.randrange(256)
            if out:
                out[at] = value
            edits.append(f"{at}={value:#04x}")
        yield f"corruption {n} (seed {seed}: bytes {', '.join(edits)})", bytes(out)


def _claims(connector: Connector, path: Path) -> bool | Exception:
    try:  # as the registry sniffs: what arrived of a cut gzip stream, nothing of an unreadable one
        head = read_head(path, SNIFF_BYTES, tolerate_cut=True)
    except DECOMPRESSION_ERRORS:
        head = b""
    if not head.strip():
        return False
    try:
        return bool(connector.detect(path, head))
    except Exception as exc:  # the registry logs a sniffer failure and asks the next connector
        return exc


def check_connector(connector: Connector, fixture: str | Path, *, rows: int | Iterable[int] | None = None,
                    expected_total: Decimal | str | int | None = None,
                    other_formats: Sequence[tuple[str, bytes]] | None = None, truncations: int = 12,
                    corruptions: int = 12, seed: int = 0, checks: Iterable[str] | None = None,
                    timezone: str = "UTC") -> ContractReport:
    """Run the contract on `connector` with `fixture`, a valid file of its format; see the module doc.
    `other_formats`: (file name, content) pairs it must not claim (default: OTHER_FORMATS).
    `checks`: run only these (default: all of CHECKS). Raises ContractFailure when any fails."""
    fixture = Path(fixture)
    wanted = set(CHECKS if checks is None else checks)
    unknown = wanted - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown contract checks {sorted(unknown)}: the checks are {', '.join(CHECKS)}")
    report = ContractReport(getattr(connector, "name", type(connector).__name__), str(fixture))
    content = fixture.read_bytes()

    with tempfile.TemporaryDirectory(prefix="finops-contract-") as tmp:
        def placed(name: str, data: bytes) -> Path:
            path = Path(tmp) / name
            path.write_bytes(data)
            return path

        if "detects_fixture" in wanted:
            claimed = _claims(connector, placed(fixture.name, content))
            if claimed is not True:
                report.fail("detects_fixture", "detect raised " + type(claimed).__name__ if isinstance(claimed, Exception)
                            else "detect does not claim the fixture")

        if "rejects_other_formats" in wanted:
            others = other_formats if other_formats is not None else [
                (name, data) for owner, name, data in OTHER_FORMATS if owner != report.connector]
            for name, data in others:
                sub = Path(tmp) / "other"
                sub.mkdir(exist_ok=True)
                path = sub / name
                path.write_bytes(data)
                if _claims(connector, path) is True:
                    report.fail("rejects_other_formats", f"detect claims {name}, a file of another format")
                    break

        fixture_checks = {"reads_fixture", "rows_accounted", "quarantine_reasons", "money_reconciles",
                          "required_columns", "rereads_identical"}
        if wanted & fixture_checks:
            path = placed(fixture.name, content)
            try:
                first = _read(connector, path, timezone)
            except Exception as exc:
                report.fail("reads_fixture", f"reading the fixture raised {type(exc).__name__}: {exc}")
                first = None
            if first is not None:
                problems = _invariants(connector, first)
                if not sum(b.num_rows for b in first.batches) and "reads_fixture" not in problems:
                    problems["reads_fixture"] = "the fixture loads no row: a fixture must show rows that load"
                loaded = {r for b in first.batches for r in b.column("x_SourceRow").to_pylist()}
                accounted = loaded | {q["x_SourceRow"] for q in first.ctx.quarantined}
                expected = (set(range(1, rows + 1)) if isinstance(rows, int) else set(rows) if rows is not None
                            else _csv_rows(path) if fixture.name.lower().endswith(".csv") else None)
                if expected is None:
                    report.notes.append("rows_accounted: the fixture's row count is unknown (pass rows=): only "
                                        "checked that no row is both loaded and quarantined")
                elif expected - accounted:
                    problems.setdefault("rows_accounted", f"rows neither loaded nor quarantined: {sorted(expected - accounted)[:10]}")
                elif accounted - expected:
                    problems.setdefault("rows_accounted", f"rows loaded or quarantined that the fixture does not have: "
                                                          f"{sorted(accounted - expected)[:10]}")
                if connector.kind == "billing" and expected_total is not None and "money_reconciles" not in problems:
                    if first.ctx.source_total != Decimal(str(expected_total)):
                        problems["money_reconciles"] = (f"the file's declared money is {first.ctx.source_total}, "
                                                        f"the fixture states {expected_total}")
                if connector.kind == "billing" and loaded and first.ctx.source_total == 0 and "money_reconciles" not in problems:
                    report.notes.append("money_reconciles: the fixture's rows declare no money (all zero?)")
                for check, message in problems.items():
                    report.fail(check, message)
                if "rereads_identical" in wanted:
                    try:
                        second = _read(connector, path, timezone)
                    except Exception as exc:
                        report.fail("rereads_identical", f"the second read raised {type(exc).__name__}: {exc}")
                    else:
                        same_rows = (pa.Table.from_batches(first.batches, schema=connector.schema)
                                     .equals(pa.Table.from_batches(second.batches, schema=connector.schema)))
                        if not same_rows:
                            report.fail("rereads_identical", "a second read of the same file gives other rows")
                        elif first.ctx.quarantined != second.ctx.quarantined:
                            report.fail("rereads_identical", "a second read quarantines other rows")
                        elif (first.ctx.source_total, first.ctx.quarantined_total) != (second.ctx.source_total, second.ctx.quarantined_total):
                            report.fail("rereads_identical", "a second read declares other money")

        variants: list[tuple[str, bytes]] = []
        if "truncation" in wanted:
            packed = gzip.compress(content, mtime=0)
            variants += [(f"truncation at byte {n}", content[:n]) for n in cut_positions(len(content), truncations)]
            variants += [(f"gzip truncated at byte {n}", packed[:n]) for n in cut_positions(len(packed), max(truncations // 2, 1))]
        if "corruption" in wanted:
            variants += list(corrupted(content, corruptions, seed))
        for label, data in variants:
            check = "truncation" if "truncat" in label else "corruption"
            if check in report.failed:
                continue
            path = placed(fixture.name, data)
            if _claims(connector, path) is not True:
                continue  # not claimed: the landing ingest would not read it with this connector
            try:
                got = _read(connector, path, timezone)
            except ConnectorError as exc:
                if not str(exc).strip():
                    report.fail(check, f"{label}: a ConnectorError without a message")
                continue
            except Exception as exc:
                report.fail(check, f"{label}: raised {type(exc).__name__}: {exc} (only ConnectorError may escape read)")
                continue
            problems = _invariants(connector, got)
            if problems:
                report.fail(check, f"{label}: " + "; ".join(f"{k}: {v}" for k, v in problems.items()))

    report.passed = [c for c in CHECKS if c in wanted and c not in report.failed]
    if report.failed:
        raise ContractFailure(str(report))
    return report


def contract_tests(connector: Connector | Callable[[], Connector], fixture: str | Path, **options):
    """A pytest test function, parametrized with one case per contract check:
    `test_contract = contract_tests(MyConnector, "fixtures/invoice.csv")` in a test module."""
    import pytest

    @pytest.mark.parametrize("check", CHECKS)
    def test_connector_contract(check: str) -> None:
        made = connector if isinstance(connector, Connector) else connector()
        check_connector(made, fixture, checks=[check], **options)

    return test_connector_contract
