"""Property-based fuzzing of every registered connector.

Each connector starts from one valid seed file (tests/fuzz/seeds.py) and is fed random bytes,
the seed cut short at any position (plain and gzip), and the seed with one cell rewritten to random
unicode, an extreme number or an odd date. Whatever the input, once the connector's own sniffer
claims the file (as the landing ingest requires before it reads one):

- `read` raises nothing but ConnectorError (a whole-file refusal, which ingest records as failed);
- every batch has the connector's canonical schema, and the quarantine builds its batch;
- every quarantined row has a non-empty reason;
- every input row is loaded or quarantined, never both, where the row count is knowable (CSV,
  line-based formats, pod listings);
- a billing file's money reconciles exactly: source_total = sum(loaded x_SourceCost) +
  quarantined_total, the identity the `billing_money_reconciles` check tests to the cent.

Budgets: FINOPS_FUZZ_PROFILE=ci (the default, `make test`) runs a few examples per property;
FINOPS_FUZZ_PROFILE=fuzz (`make fuzz`) keeps drawing examples for FUZZ_MINUTES over all tests.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors._tabular import ROW_NUMBER, stream_csv_as_strings
from connectors.base import MONEY_CONTEXT, ConnectorError, ReadContext, money_sum, open_maybe_gzip
from connectors.registry import all_connectors, read_head
from tests.fuzz.mutations import Cells, date_values, number_values, rewritten_cell, unicode_values
from tests.fuzz.seeds import Seed, all_seeds

pytestmark = pytest.mark.fuzz

PROFILE = os.environ.get("FINOPS_FUZZ_PROFILE", "ci")
FUZZ_MINUTES = float(os.environ.get("FUZZ_MINUTES", "10"))
_common = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
settings.register_profile("ci", max_examples=10, derandomize=True, database=None, **_common)
settings.register_profile("fuzz", max_examples=50, **_common)  # one round; rounds repeat until the time is up
FUZZ_SETTINGS = settings.get_profile(PROFILE)

CONNECTORS = {c.name: c for c in all_connectors()}
SEEDS = all_seeds()
SEED_IDS = [s.id for s in SEEDS]
PROPERTIES = 5  # hypothesis tests per seed below; FUZZ_MINUTES is shared between them and the every-position cut
INGESTED_AT = datetime(2026, 11, 29, tzinfo=UTC)
WORKDIR = Path(tempfile.mkdtemp(prefix="finops-fuzz-"))


def keep_fuzzing(prop) -> None:
    """Run a hypothesis property once (ci), or round after round until its share of FUZZ_MINUTES
    is spent (fuzz): each round draws fresh examples; a failure stops at once and is shrunk."""
    prop()
    if PROFILE != "fuzz":
        return
    stop = time.monotonic() + FUZZ_MINUTES * 60 / (len(SEEDS) * (PROPERTIES + 1))
    while time.monotonic() < stop:
        prop()


# --- the invariants -----------------------------------------------------------------------


def write(seed: Seed, content: bytes) -> Path:
    folder = WORKDIR / re.sub(r"\W", "_", seed.id)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / seed.filename
    path.write_bytes(content)
    return path


def decompressed(path: Path) -> bytes:
    """The file's bytes as a connector reads them: gunzipped, up to where a cut stream ends."""
    out = bytearray()
    with open_maybe_gzip(path) as fh:
        try:
            while chunk := fh.read(1 << 16):
                out += chunk
        except (EOFError, OSError, zlib.error):
            pass
    return bytes(out)


def expected_rows(name: str, path: Path) -> set[int] | None:
    """The source rows a read must account for (loaded or quarantined), where that is knowable."""
    raw = path.read_bytes()
    connector = CONNECTORS[name]
    if name in ("dcgm_exporter", "prometheus_dcgm", "node_exporter_disk") or raw.startswith(b"PAR1"):
        return None  # one metric per line or point, pivoted: rows are GPUs x instants, not lines
    if name in ("nvidia_smi_dmon", "s3_access_log", "checkpoint_events") or (
            name == "gcp_billing" and raw[:1024].lstrip().startswith(b"{")):
        # Lines end at "\n" only, as the connectors split them ("\r" alone is data, not a line break).
        lines = [part.decode("utf-8", errors="replace") for part in decompressed(path).split(b"\n")]
        if lines and lines[-1] == "":
            lines.pop()
        skip_first = name == "nvidia_smi_dmon"
        return {n for n, line in enumerate(lines, start=1)
                if line.strip() and not (skip_first and (n == 1 or line.startswith("#")))}
    if name == "kubernetes_pods":
        document = json.loads(raw.decode("utf-8"))
        items = document.get("items", []) if isinstance(document, dict) else None
        # Node items are read for what their pods' GPUs are (MIG's single strategy), by design not workloads.
        return ({n for n, item in enumerate(items, start=1) if not (isinstance(item, dict) and item.get("kind") == "Node")}
                if isinstance(items, list) else None)
    delimiter = "|" if name == "slurm_sacct" else ","
    mapping = getattr(connector, "mapping", None)
    encoding = mapping.encoding if mapping is not None else "utf-8"
    rows: set[int] = set()
    # Telemetry readers keep a truncated file's complete rows and hand the cut tail on: count the same way.
    tails: list = []
    on_truncated = tails.append if connector.kind == "telemetry" else None
    # Rows with more fields than the header are quarantined by the stream itself: they count too.
    ctx = ReadContext(source_file=str(path), ingested_at=INGESTED_AT)
    for frame in stream_csv_as_strings(path, str(path), delimiter=delimiter, encoding=encoding, on_truncated=on_truncated,
                                       ctx=ctx, connector=name):
        if name == "slurm_sacct":  # job steps (123.batch) are left out by design: the job line has the GPUs
            frame = frame.filter(~pl.col("JobID").str.contains(r"\.").fill_null(False))
        rows.update(frame.get_column(ROW_NUMBER).to_list())
    rows.update(t.row for t in tails if t.raw.strip())
    rows.update(q["x_SourceRow"] for q in ctx.quarantined)
    return rows


def check_read(seed: Seed, content: bytes, timezone: str = "UTC") -> str:
    """Read `content` as the seed's connector would in the landing ingest; assert the invariants.
    Returns what happened, for hypothesis.event."""
    connector = CONNECTORS[seed.connector]
    path = write(seed, content)
    head = read_head(path)
    if not head.strip():
        return "empty: not read"
    try:
        claimed = connector.detect(path, head)
    except Exception:  # the registry logs a sniffer's failure and asks the next connector
        return "sniffer failed: not read"
    if not claimed:
        return "not claimed: not read"
    ctx = ReadContext(source_file=f"landing/{seed.filename}", ingested_at=INGESTED_AT, timezone=timezone,
                      source_sha256="0" * 64)
    try:
        batches = list(connector.read(path, ctx))
    except ConnectorError as exc:
        assert str(exc).strip(), "a ConnectorError must say why"
        return "refused (ConnectorError)"

    for batch in batches:
        assert batch.schema.equals(connector.schema), f"{connector.name}: batch schema differs from {connector.kind}"
    ctx.quarantine_batch()  # what ingest inserts into raw.quarantine must build
    for q in ctx.quarantined:
        assert isinstance(q["reason"], str) and q["reason"].strip(), f"quarantined row without a reason: {q}"

    loaded_rows = {r for b in batches for r in b.column("x_SourceRow").to_pylist()}
    quarantined_rows = {q["x_SourceRow"] for q in ctx.quarantined}
    expected = expected_rows(seed.connector, path)
    if expected is not None:
        assert not loaded_rows & quarantined_rows, f"rows both loaded and quarantined: {sorted(loaded_rows & quarantined_rows)[:10]}"
        missing = expected - loaded_rows - quarantined_rows
        assert not missing, f"rows neither loaded nor quarantined: {sorted(missing)[:10]}"

    if connector.kind == "billing":
        loaded_money = money_sum(v for b in batches for v in b.column("x_SourceCost").to_pylist())
        assert ctx.source_total == MONEY_CONTEXT.add(loaded_money, ctx.quarantined_total), (
            f"money does not reconcile: source {ctx.source_total} != loaded {loaded_money} + quarantined {ctx.quarantined_total}")
    loaded = sum(b.num_rows for b in batches)
    return f"loaded {'some' if loaded else 'none'}, quarantined {'some' if ctx.quarantined else 'none'}"


# --- the properties -----------------------------------------------------------------------


def test_every_registered_connector_has_a_seed():
    assert set(CONNECTORS) == {s.connector for s in SEEDS}
    for seed in SEEDS:
        path = write(seed, seed.content)
        assert CONNECTORS[seed.connector].detect(path, read_head(path)), f"seed {seed.id} is not recognised"


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_valid_seed_reads_clean(seed):
    """The seed itself loads rows and satisfies the invariants: the fuzzing starts from a good file."""
    assert check_read(seed, seed.content).startswith("loaded some")


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_random_bytes(seed):
    header = seed.content.split(b"\n", 1)[0] + b"\n"

    @FUZZ_SETTINGS
    @given(st.one_of(
        st.binary(max_size=2048),                                       # anything at all
        st.binary(max_size=2048).map(lambda b: header + b),             # the seed's header, then junk
        st.lists(st.tuples(st.integers(0, max(len(seed.content) - 1, 0)), st.binary(min_size=1, max_size=8)),
                 min_size=1, max_size=8).map(lambda edits: _overwrite(seed.content, edits)),  # bytes flipped
    ))
    def prop(content):
        check_read(seed, content)

    keep_fuzzing(prop)


def _overwrite(content: bytes, edits) -> bytes:
    out = bytearray(content)
    for at, new in edits:
        out[at:at + len(new)] = new
    return bytes(out)


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_truncated_anywhere(seed):
    """A file cut short, plain or gzip (a transfer that stopped). Telemetry truncation may refuse the
    file or keep its good rows; either way only the invariants are asserted."""
    compressed = gzip.compress(seed.content, mtime=0)

    @FUZZ_SETTINGS
    @given(st.booleans(), st.data())
    def prop(gz, data):
        whole = compressed if gz else seed.content
        check_read(seed, whole[:data.draw(st.integers(0, len(whole)), label="cut at")])

    keep_fuzzing(prop)


def coarse_to_fine(length: int):
    """0..length, a coarse spread first and then ever finer, so a cut-off run still spans the file."""
    seen, stride = set(), 1 << max(length.bit_length() - 1, 0)
    while stride:
        for n in range(0, length + 1, stride):
            if n not in seen:
                seen.add(n)
                yield n
        stride //= 2


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_truncated_at_every_position(seed):
    """Every cut of the seed, coarse to fine (fuzz profile: all positions, or as many as its share of
    FUZZ_MINUTES allows); the ci profile tries the first 12, spread over the file."""
    stop = time.monotonic() + FUZZ_MINUTES * 60 / (len(SEEDS) * (PROPERTIES + 1))
    for i, n in enumerate(coarse_to_fine(len(seed.content))):
        if (PROFILE != "fuzz" and i >= 12) or (PROFILE == "fuzz" and time.monotonic() > stop):
            break
        try:
            check_read(seed, seed.content[:n])
        except AssertionError as exc:
            raise AssertionError(f"cut at byte {n}: {exc}") from exc
        except Exception as exc:
            raise AssertionError(f"cut at byte {n}: unhandled {type(exc).__name__}: {exc}") from exc


def _cell_property(seed: Seed, kind: str, values, timezones=st.just("UTC")):
    cells = Cells(seed)
    if not cells.cells:
        pytest.skip(f"{seed.fmt} seed has no text cells to rewrite")

    @FUZZ_SETTINGS
    @given(rewritten_cell(cells, kind, values), timezones)
    def prop(content, timezone):
        check_read(seed, content, timezone)

    keep_fuzzing(prop)


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_unicode_in_any_cell(seed):
    _cell_property(seed, "any", unicode_values)


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_extreme_numbers_in_numeric_cells(seed):
    _cell_property(seed, "number", number_values)


@pytest.mark.parametrize("seed", SEEDS, ids=SEED_IDS)
def test_odd_dates_in_time_cells(seed):
    _cell_property(seed, "date", date_values,
                   st.sampled_from(["UTC", "Pacific/Kiritimati", "America/St_Johns", "Europe/Berlin", "Asia/Kolkata"]))
