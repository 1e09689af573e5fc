"""Landing folder → raw tables, one file per transaction, each file loaded once.

A file is identified by its normalized content (`pipelines.ledger.deliveries.content_sha256`:
decompressed, CRLF→LF, BOM stripped): the same export under any name, compressed or not, loads
once. A provider's delivery manifest is recorded in `raw.manifests` (status `manifest`), not read
as billing data; after the files, the ledger's rules (`pipelines.ledger.rules`) put every billing
file in its delivery and mark it `loaded`, `incomplete` or `superseded`. A file no
connector recognises is listed with the reason and skipped; a file a connector claims but cannot
read is marked failed with the connector's message; neither stops the other files. Because each
file loads inside one transaction, a crash or kill mid-file leaves the warehouse as it was.

Only what is inside the landing folder is read: a symbolic link that leads outside it is refused
(listed with status `refused`, never opened), and directory links are not walked into, so a link
cycle cannot loop. Paths and details are stored with unprintable characters escaped (`\x1b`), so a
hostile file name cannot drive a terminal or forge log lines; a failure names the line and
column, never quoting the file's content.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from connectors.base import ZIP_MAGIC, Connector, ConnectorError, ReadContext, printable
from connectors.registry import all_connectors, detect
from pipelines.ingest import progress
from pipelines.ledger import rules
from pipelines.lake.layout import lake_of_connection, version_files
from pipelines.lake.writer import WrittenVersion, sweep_and_check, write_version
from pipelines.ledger.deliveries import BOM, content_sha256, file_mtime, layout_of, read_manifest
from pipelines.warehouse.connection import ensure_warehouse, fetch_all, record_file_slices

log = logging.getLogger(__name__)
HASH_CHUNK = 1 << 20
# Statuses of a file version that is never read again.
# A version with one of these is what its path holds now: seen again, it is skipped. A `replaced`
# version is not: the same bytes back at their path (a re-export reverted) are that path's content again.
DONE_STATUSES = ("loaded", "incomplete", "superseded", "duplicate", "manifest")
DONE_SQL = ", ".join(f"'{s}'" for s in DONE_STATUSES)
# Statuses of a version none of whose rows count: a path holding an earlier version again replaces it.
UNSETTLED_SQL = "'failed', 'unrecognized', 'refused', 'quarantined'"
# Files read at once. Telemetry arrives as many files (a host a file): two parsed side by side use
# both cores of a small machine (polars and Arrow work outside the GIL); 25 nvidia-smi files of
# 80,000 samples took 3.0-3.2 s instead of 3.8-5.2 s on the 2-core development machine. Memory is
# that of the batches in flight, per file.
READ_AHEAD = 2


@dataclass
class FileOutcome:
    path: str
    status: str
    connector: str | None = None
    rows_loaded: int = 0
    rows_quarantined: int = 0
    detail: str = ""

    def __post_init__(self) -> None:
        self.path, self.detail = printable(self.path), printable(self.detail)


@dataclass
class IngestSummary:
    outcomes: list[FileOutcome] = field(default_factory=list)
    already_loaded: int = 0
    superseded: list[str] = field(default_factory=list)  # billing files a newer delivery of their export replaced
    incomplete: list[dict] = field(default_factory=list)  # deliveries whose parts are not all here yet

    def by_status(self, status: str) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def rows_loaded(self) -> int:
        return sum(o.rows_loaded for o in self.outcomes)

    @property
    def rows_quarantined(self) -> int:
        return sum(o.rows_quarantined for o in self.outcomes)


@dataclass(frozen=True)
class FileDigest:
    sha256: str
    # Not gzip nor zip, no UTF-8 BOM and no CR anywhere: the normalized content (content_sha256) is the bytes
    # themselves, so its digest is `sha256` and the file need not be read a second time.
    plain: bool

    def content_sha256(self, path: Path) -> str:
        return self.sha256 if self.plain else content_sha256(path)


def digest_of(path: Path) -> FileDigest:
    """The file's SHA-256, and whether its normalized content is its bytes, in one read."""
    digest, plain, first = hashlib.sha256(), True, True
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
            if first:
                plain, first = not chunk.startswith((b"\x1f\x8b", BOM, ZIP_MAGIC)), False
            plain = plain and b"\r" not in chunk
    return FileDigest(digest.hexdigest(), plain)


OUTSIDE = "symlink to outside the landing folder"


@dataclass
class LandingScan:
    files: list[Path] = field(default_factory=list)  # to load, in a stable order
    refused: list[tuple[Path, str]] = field(default_factory=list)  # (link, why), never opened


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


def refusal(path: Path, root: str) -> str | None:
    """Why the file at `path` must not be read, or None: it, or a link on its way, leads outside
    the landing folder (`root`, resolved), or it is a link to nothing."""
    target = os.path.realpath(path)
    if not _inside(target, root):
        return OUTSIDE
    if path.is_symlink() and not os.path.exists(target):
        return "symlink to nothing (its target is missing, or the link loops)"
    return None


def scan_landing(landing: Path) -> LandingScan:
    """Every regular file below the landing folder, hidden ones excepted, and the links refused.

    Directory links are not walked into: one inside the folder leads to files listed in their own
    place (and a link cycle cannot loop), one outside it is refused. A file link inside the folder
    is loaded under its own name unless its target is listed already; one outside is refused."""
    root = os.path.realpath(landing)
    scan = LandingScan()
    real: list[Path] = []
    links: list[Path] = []
    for folder, dirs, names in os.walk(landing, followlinks=False):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in dirs:
            path = base / name
            if path.is_symlink() and refusal(path, root) == OUTSIDE:
                scan.refused.append((path, f"directory {OUTSIDE}"))
        for name in names:
            if name.startswith("."):
                continue
            path = base / name
            if path.is_symlink():
                links.append(path)
            elif path.is_file():  # sockets, pipes and devices are not files to load
                real.append(path)
    seen = {os.path.realpath(p) for p in real}
    for path in sorted(links):
        why = refusal(path, root)
        if why:
            scan.refused.append((path, why))
        elif os.path.isfile(path) and (target := os.path.realpath(path)) not in seen:
            seen.add(target)
            real.append(path)
    scan.files = sorted(real)
    scan.refused.sort()
    return scan


def landing_files(landing: Path) -> list[Path]:
    """Every file below the landing folder that may be loaded, hidden ones excepted, in a stable order."""
    return scan_landing(landing).files


def landing_path(path: Path, landing: Path) -> str:
    """The path as stored and shown: relative to the landing folder, unprintable characters escaped."""
    return printable(path.relative_to(landing).as_posix())


def ingest_landing(
    conn: duckdb.DuckDBPyConnection,
    landing: Path,
    timezone: str = "UTC",
    connectors: tuple[Connector, ...] | None = None,
) -> IngestSummary:
    ensure_warehouse(conn)
    lake = lake_of_connection(conn)
    sweep_and_check(conn, lake)  # what a killed run left in the lake, and rows a copied warehouse lacks
    connectors = connectors if connectors is not None else all_connectors()
    summary = IngestSummary()
    # One time for the whole run (lineage). Which delivery counts never depends on it, except as
    # the last tie-break between plain uploads that nothing else orders (see the README's ledger).
    batch_time = datetime.now(UTC)
    scan = scan_landing(landing)
    root = os.path.realpath(landing)
    for link, why in scan.refused:
        rel = landing_path(link, landing)
        _record(conn, rel, "", 0, None, None, "refused", 0, 0, why, batch_time)
        summary.outcomes.append(FileOutcome(rel, "refused", detail=why))
        log.warning("%s: refused, %s", rel, why)
    files = scan.files
    settled: dict[int, FileOutcome] = {}  # by position: outcomes are listed in landing order
    # Paths with a version that failed or counts for nothing: if such a path holds a version read
    # before it again, that version is what the path holds (see _settle_returned).
    unsettled = {path for (path,) in fetch_all(conn, f"""
        SELECT path FROM raw.files WHERE status <> 'manifest'
        QUALIFY row_number() OVER (PARTITION BY path ORDER BY ingested_at DESC) = 1 AND status IN ({UNSETTLED_SQL})""")}
    returned: list[tuple[str, str, datetime]] = []

    def seen_again(rel: str, version: tuple[str, datetime]) -> None:
        """A file version read before, which its path holds (again): not read."""
        summary.already_loaded += 1
        if rel in unsettled:
            returned.append((rel, *version))
    done_count = 0

    def settle(position: int, path: Path, outcome: FileOutcome, started: float) -> None:
        nonlocal done_count
        done_count += 1
        seconds = max(time.perf_counter() - started, 1e-6)
        progress.report(done_count, len(files), outcome.path, outcome.rows_loaded, path.stat().st_size / 2**20 / seconds)
        settled[position] = outcome
        log.info("%s: %s %s", outcome.path, outcome.status, outcome.detail)

    # The next files are read (parsed and written to the lake's staging) on worker threads while
    # the earlier ones are registered; registering stays in landing order, on this connection.
    with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="finops-read") as pool:
        reading: deque[_Reading] = deque()
        for position, path in enumerate(files, start=1):
            rel = landing_path(path, landing)
            if why := refusal(path, root):  # changed into a link since the scan: still never read
                _record(conn, rel, "", 0, None, None, "refused", 0, 0, why, batch_time)
                settled[position] = FileOutcome(rel, "refused", detail=why)
                log.warning("%s: refused, %s", rel, why)
                continue
            # Unchanged since it was read (same size and modification time, as make and rsync judge):
            # not hashed again, so files already read cost a stat each, not a read of their bytes.
            stat = path.stat()
            if done := fetch_all(conn, f"SELECT sha256, ingested_at FROM raw.files WHERE path = ? AND size_bytes = ? "
                                       f"AND file_mtime = ? AND status IN ({DONE_SQL})",
                                 [rel, stat.st_size, datetime.fromtimestamp(stat.st_mtime, UTC)]):
                seen_again(rel, done[0])
                continue
            started = time.perf_counter()
            digest = digest_of(path)
            done = fetch_all(
                conn,
                f"SELECT sha256, ingested_at FROM raw.files WHERE path = ? AND sha256 = ? AND status IN ({DONE_SQL})",
                [rel, digest.sha256],
            )
            if done:
                seen_again(rel, done[0])
                continue
            step = _start_file(conn, path, rel, digest, timezone, connectors, batch_time, position)
            if isinstance(step, FileOutcome):
                settle(position, path, step, started)
                continue
            alone = not step.connector.reads_concurrently
            while reading and (alone or len(reading) >= READ_AHEAD):  # the files before it finish first
                _finish_reading(conn, lake, reading.popleft(), batch_time, settle)
            step.started = started
            step.start(lake, pool)
            reading.append(step)
            if alone:
                _finish_reading(conn, lake, reading.popleft(), batch_time, settle)
        while reading:
            _finish_reading(conn, lake, reading.popleft(), batch_time, settle)
    _settle_returned(conn, returned, batch_time)
    summary.outcomes.extend(settled[position] for position in sorted(settled))
    state = rules.refresh(conn)
    summary.superseded, summary.incomplete = state.superseded, state.incomplete
    for d in state.incomplete:
        log.warning("delivery %s (%s %s): %s of %s parts so far", d["delivery_id"], d["provider"], d["export_name"],
                    d["parts_seen"], d["parts_expected"])
    return summary


@dataclass
class _Reading:
    """A file whose rows a worker thread is writing to the lake's staging folder."""

    position: int
    path: Path
    rel: str
    digest: FileDigest
    size: int
    connector: Connector
    extra: dict
    ctx: ReadContext
    started: float = 0.0
    written: Future | None = None  # of the WrittenVersion

    def start(self, lake: Path, pool: ThreadPoolExecutor) -> None:
        # The rows stream into the lake's staging folder first: nothing is visible until registered.
        # (Staging is per landing position: the same bytes at two paths may be read at once.)
        self.written = pool.submit(self._write, lake)

    def _write(self, lake: Path) -> WrittenVersion:
        # `read` is called here, on the worker: one that is no generator may fail at the call itself.
        return write_version(lake, self.connector.kind, self.digest.sha256, self.connector.read(self.path, self.ctx),
                             str(self.position))


def _start_file(conn, path: Path, rel: str, digest: FileDigest, timezone: str, connectors,
                now: datetime, position: int) -> FileOutcome | _Reading:
    """Settle a file that is not read as rows (a manifest, a file no connector claims, content
    already loaded), or make ready to read it."""
    sha = digest.sha256
    size = path.stat().st_size
    mtime = file_mtime(path)
    manifest = read_manifest(path, rel)
    if manifest is not None:  # a delivery's manifest: recorded, never read as billing data
        _record(conn, rel, sha, size, None, None, "manifest", 0, 0, manifest.detail, now, file_mtime=mtime,
                delivery_id=manifest.delivery_id)
        conn.execute("DELETE FROM raw.manifests WHERE path = ? AND sha256 = ?", [rel, sha])
        conn.execute("INSERT INTO raw.manifests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            rel, sha, manifest.format, manifest.provider, manifest.export_name, manifest.scope, manifest.billing_period,
            manifest.delivery_id, manifest.created_at, mtime, manifest.mode, manifest.latest_pointer, manifest.parts, now])
        _replace_older_versions(conn, rel, sha)
        return FileOutcome(rel, "manifest", detail=manifest.detail)
    detection = detect(path, connectors)
    connector = detection.connector
    if connector is None:
        _record(conn, rel, sha, size, None, None, "unrecognized", 0, 0, detection.reason, now)
        return FileOutcome(rel, "unrecognized", detail=detection.reason)

    content = digest.content_sha256(path)
    layout = layout_of(rel, connector.name)
    extra = dict(content_sha256=content, file_mtime=mtime, layout_delivery_id=layout.delivery_id,
                 layout_export=layout.export_name, layout_period=layout.billing_period, layout_seq=layout.seq)
    if duplicate := _duplicate_of(conn, rel, sha, size, connector, content, now, extra):
        return duplicate
    ctx = ReadContext(source_file=rel, ingested_at=now, timezone=timezone, source_sha256=sha)
    return _Reading(position, path, rel, digest, size, connector, extra, ctx)


def _duplicate_of(conn, rel: str, sha: str, size: int, connector: Connector, content: str, now: datetime,
                  extra: dict) -> FileOutcome | None:
    """Record the file as a duplicate if its content is loaded already, under another name or as an
    earlier version of this path (rewritten with other line endings, a BOM, or compressed)."""
    # A version since replaced at its own path still holds its rows in the lake (under its content's
    # hash): read again under another name, the content is that version's, not rows of its own (two
    # paths' rows in one lake folder failed the money check on every run after).
    # (At its own path the version is simply read again: the same rows into the same folder.)
    twin = fetch_all(conn, "SELECT path FROM raw.files WHERE coalesce(content_sha256, sha256) = ? "
                           "AND (status IN ('loaded', 'incomplete', 'superseded') "
                           "     OR (status = 'replaced' AND rows_loaded > 0 AND path <> ?)) "
                           "ORDER BY status = 'replaced', ingested_at, path LIMIT 1", [content, rel])
    if not twin:
        return None
    detail = (f"same content as the version of this file already loaded" if twin[0][0] == rel
              else f"same content as {twin[0][0]}, already loaded")
    _record(conn, rel, sha, size, connector.name, connector.kind, "duplicate", 0, 0, detail, now, **extra)
    # The versions of this path holding the same content keep counting: replacing them by this
    # duplicate of themselves would leave nothing loaded at the path.
    _replace_older_versions(conn, rel, sha, keep_content=content)
    return FileOutcome(rel, "duplicate", connector.name, detail=detail)


def _finish_reading(conn, lake: Path, reading: _Reading, now: datetime, settle) -> None:
    """Wait for a file's rows to be written, then register them in one transaction (or the failure)."""
    rel, sha, size, connector, ctx = reading.rel, reading.digest.sha256, reading.size, reading.connector, reading.ctx
    written, in_transaction = None, False
    try:
        written = reading.written.result()
        # A file read beside an earlier one with the same content: that one was registered first.
        if duplicate := _duplicate_of(conn, rel, sha, size, connector, reading.extra["content_sha256"], now, reading.extra):
            written.discard()
            settle(reading.position, reading.path, duplicate, reading.started)
            return
        loaded = written.rows
        quarantined = len(ctx.quarantined)
        status = "quarantined" if loaded == 0 and quarantined > 0 else "loaded"
        detail = f"{loaded} rows loaded" + (f", {quarantined} quarantined" if quarantined else "")
        if status == "quarantined":
            detail = f"every row quarantined ({quarantined}), first reason: {ctx.quarantined[0]['reason']}"
        detail += "".join(f"; warning: {w}" for w in ctx.warnings)
        totals = ((ctx.source_total, ctx.quarantined_total, set_aside_by_currency(ctx)) if connector.kind == "billing"
                  else (None, None, None))
        conn.execute("BEGIN TRANSACTION")
        in_transaction = True
        # A file all of whose rows were quarantined is retried by later runs (its mapping may have
        # been fixed meanwhile): its earlier quarantine rows give way to this read's.
        conn.execute("DELETE FROM raw.quarantine WHERE x_SourceFile = ? AND x_SourceSha256 = ?", [rel, sha])
        if quarantined:
            conn.register("incoming_quarantine", ctx.quarantine_batch())
            conn.execute("INSERT INTO raw.quarantine BY NAME SELECT * FROM incoming_quarantine")
            conn.unregister("incoming_quarantine")
        if connector.kind == "billing" and loaded:
            record_file_slices(conn, rel, sha, written.parquet_glob(), connector.invoices_are_deliveries)
        # A billing version without a line that counts (header only: an export written before its
        # data; or every row quarantined) names no charge, so it retracts none: the version before
        # it keeps counting until content with lines replaces it.
        if connector.kind == "billing" and loaded == 0 and _loaded_versions(conn, rel, sha):
            detail += "; no lines: the version read before it keeps counting"
        _record(conn, rel, sha, size, connector.name, connector.kind, status, loaded, quarantined, detail, now, totals,
                **reading.extra)
        if loaded or connector.kind != "billing":
            _replace_older_versions(conn, rel, sha)
        # Rows into the table before the registry names them: a crash between the two leaves
        # folders no registry names (swept by the next run), never a registered file without rows.
        written.publish(lake)
        conn.execute("COMMIT")
        outcome = FileOutcome(rel, status, connector.name, loaded, quarantined, detail)
    except Exception as exc:
        if written is not None:
            written.discard()
        if in_transaction:
            conn.execute("ROLLBACK")
        message = str(exc) if isinstance(exc, ConnectorError) else f"{rel}: {_unexpected(exc)}"
        _record(conn, rel, sha, size, connector.name, connector.kind, "failed", 0, 0, message, now)
        outcome = FileOutcome(rel, "failed", connector.name, detail=message)
    settle(reading.position, reading.path, outcome, reading.started)


def _settle_returned(conn, returned: list[tuple[str, str, datetime]], now: datetime) -> None:
    """A path whose newer version failed (or was unrecognised, refused, wholly quarantined) and
    that holds a version read before it again (the bad download replaced by the good one): the
    newer version is what the path no longer holds, `replaced`, as a re-export replaces a version.
    (A later month's bill that counts beside an earlier one at its path keeps counting when the
    earlier one is sent again: a bill delivered stays delivered.)
    Otherwise it stayed the path's newest, and the report listed the path as failed for good."""
    for rel, sha, ingested_at in returned:
        conn.execute(
            f"""UPDATE raw.files SET status = 'replaced', status_changed_at = ?,
                   detail = detail || '; replaced: the path holds the version read before it again (' || ? || ')'
               WHERE path = ? AND sha256 <> ? AND status IN ({UNSETTLED_SQL}) AND ingested_at > ?""",
            [now, sha[:12], rel, sha, ingested_at])


def _loaded_versions(conn, rel: str, sha: str) -> int:
    """Versions of the path other than `sha` whose lines count."""
    return fetch_all(conn, "SELECT count(*) FROM raw.files WHERE path = ? AND sha256 <> ? "
                           "AND status IN ('loaded', 'incomplete', 'superseded') AND rows_loaded > 0", [rel, sha])[0][0]


def _replace_older_versions(conn, rel: str, sha: str, keep_content: str | None = None) -> None:
    """New content at a path already loaded is a re-export of that file (or the provider's
    overwritten manifest): it replaces the old version, which no longer counts; a version that
    failed, was refused or unrecognised (a broken download the good copy replaced) is settled, so
    the checks and the summary stop naming it. Versions whose content is `keep_content` are kept.

    A billing file uploaded as it is (no folder layout names its delivery) is not replaced by a
    version billing none of its months (nor its invoices, where invoices are deliveries): an export
    job writing one name (`latest.csv`: October, then November) leaves October counting, the two
    versions then counting as two uploads of different months do (_ANOTHER_MONTHS_BILL)."""
    dropped = _charges_the_new_version_drops(conn, rel, sha, keep_content)
    conn.execute(
        f"""UPDATE raw.files AS o SET status = 'replaced', detail = detail || '; replaced by ' || ?
           WHERE path = ? AND sha256 <> ?
             AND status IN ('loaded', 'quarantined', 'incomplete', 'superseded', 'duplicate', 'manifest',
                            'failed', 'unrecognized', 'refused')
             AND coalesce(content_sha256, sha256) IS DISTINCT FROM ?
             AND NOT ({_ANOTHER_MONTHS_BILL})""",
        [sha[:12], rel, sha, keep_content, rel, sha],
    )
    kept = fetch_all(conn, f"""
        SELECT DISTINCT strftime(fs.line_period, '%Y-%m') AS period
        FROM raw.files AS o JOIN raw.file_slices AS fs ON fs.path = o.path AND fs.sha256 = o.sha256
        WHERE o.path = ? AND o.sha256 <> ? AND o.status IN ('loaded', 'incomplete', 'superseded') AND o.rows_loaded > 0
          AND ({_ANOTHER_MONTHS_BILL})
        ORDER BY period""", [rel, sha, rel, sha])
    if kept:
        conn.execute("UPDATE raw.files SET detail = detail || ? WHERE path = ? AND sha256 = ?",
                     ["; the version before it is not replaced: it bills other months or invoices ("
                      + ", ".join(p for (p,) in kept if p) + ")", rel, sha])
    if dropped:
        conn.execute("UPDATE raw.files SET detail = detail || ? WHERE path = ? AND sha256 = ?", [dropped, rel, sha])


def _charges_the_new_version_drops(conn, rel: str, sha: str, keep_content: str | None) -> str | None:
    """A warning for raw.files.detail when the loaded billing version(s) this one replaces billed
    charges it does not hold: starting before its first charge (a rolling window written to one
    name drops its oldest days), or of a billing month it does not bill. They stop counting, which
    is right for a restatement that withdrew them and money lost for a rolling window; the run
    names them either way (README: Idempotent). None when nothing is dropped."""
    old = [s for (s,) in fetch_all(conn, f"""
        SELECT o.sha256 FROM raw.files AS o
        WHERE o.path = ? AND o.sha256 <> ? AND o.kind = 'billing' AND o.rows_loaded > 0
          AND o.status IN ('loaded', 'incomplete', 'superseded')
          AND coalesce(o.content_sha256, o.sha256) IS DISTINCT FROM ?
          AND NOT ({_ANOTHER_MONTHS_BILL})""", [rel, sha, keep_content, rel, sha])]
    if not old:
        return None
    lake = lake_of_connection(conn)
    globs = [g for g in (version_files(lake, "billing", s) for s in old) if g]
    if not globs:
        return None
    rows = fetch_all(conn, """
        WITH new AS (
            SELECT min(min_charge_start) AS first_start, bool_or(line_period IS NULL) AS any_period,
                   list(line_period) FILTER (WHERE line_period IS NOT NULL) AS periods
            FROM raw.file_slices
            WHERE (path, sha256) IN (SELECT path, sha256 FROM raw.files
                                     WHERE coalesce(content_sha256, sha256) = (SELECT coalesce(content_sha256, sha256)
                                                                               FROM raw.files WHERE path = $path AND sha256 = $sha))
        ),
        dropped AS (
            SELECT o.ChargePeriodStart, coalesce(o.ChargePeriodEnd, o.ChargePeriodStart) AS ChargePeriodEnd,
                   o.BillingCurrency, o.BilledCost
            FROM read_parquet($globs, hive_partitioning = false, union_by_name = true) AS o, new AS n
            WHERE o.ChargePeriodStart < n.first_start
               OR (o.BillingPeriodStart IS NOT NULL AND NOT n.any_period
                   AND NOT coalesce(list_bool_or(list_transform(n.periods,
                           lambda p: abs(epoch(p) - epoch(o.BillingPeriodStart)) < 129600)), false))
        )
        SELECT count(*), min(ChargePeriodStart), max(ChargePeriodEnd),
               (SELECT list({'currency': BillingCurrency, 'amount': total} ORDER BY BillingCurrency)
                FROM (SELECT BillingCurrency, sum(BilledCost) AS total FROM dropped GROUP BY ALL))
        FROM dropped""", {"path": rel, "sha": sha, "globs": globs})
    lines, first, last, by_currency = rows[0]
    if not lines:
        return None
    money = "; ".join(f"{e['amount'].normalize():f} {e['currency'] or '(currency not stated)'}" for e in by_currency)
    return (f"; warning: the version it replaced billed {lines:,} line{'' if lines == 1 else 's'} it does not hold, "
            f"charges from {first.astimezone(UTC):%Y-%m-%d %H:%M} to {last.astimezone(UTC):%Y-%m-%d %H:%M} (UTC), billed {money}: "
            "they no longer count. A file rewritten at its path replaces its earlier version whole; if it is a rolling "
            "window, give each export its own name (README: Idempotent)")


# Whether the older version `o` of a billing file, uploaded as it is, bills only billing months the
# new version at its path (bound: path, sha256) holds none of: another month's bill, not a
# restatement. Months are compared by their start give or take a day and a half (a billing month
# read in another --timezone starts hours apart), and lines without a stated period share every
# month, as do providers and accounts (a spelling changed between versions is still a
# restatement). Two invoice ids tell two bills of one month apart; a line without one (a month to
# date) is restated by any. The new version's slices are its content's (a duplicate's are its
# twin's). Where the two share a month the old version is replaced whole, as any re-export.
_ANOTHER_MONTHS_BILL = """
    o.kind = 'billing' AND o.layout_delivery_id IS NULL
    AND EXISTS (SELECT 1 FROM raw.file_slices AS os WHERE os.path = o.path AND os.sha256 = o.sha256)
    AND NOT EXISTS (
        SELECT 1 FROM raw.file_slices AS os
        JOIN raw.file_slices AS ns
          ON (os.line_period IS NULL OR ns.line_period IS NULL
              OR abs(epoch(ns.line_period) - epoch(os.line_period)) < 129600)
         AND (NOT coalesce(os.by_invoice, false) OR os.line_invoice IS NULL OR ns.line_invoice IS NULL
              OR ns.line_invoice = os.line_invoice)
        JOIN raw.files AS nf ON nf.path = ns.path AND nf.sha256 = ns.sha256
        WHERE os.path = o.path AND os.sha256 = o.sha256
          AND coalesce(nf.content_sha256, nf.sha256) IN (
              SELECT coalesce(content_sha256, sha256) FROM raw.files WHERE path = ? AND sha256 = ?))"""


def _unexpected(exc: Exception) -> str:
    """An error no connector anticipated, told briefly: its type and the start of its first line.
    Library messages may quote the data they choked on; the clip keeps a whole row out."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first[:UNEXPECTED_CLIP]}{'…' if len(first) > UNEXPECTED_CLIP else ''}".rstrip(": ")


UNEXPECTED_CLIP = 80


def set_aside_by_currency(ctx) -> list[dict] | None:
    """The quarantined money by the currency its rows state, for raw.files.quarantined_by_currency;
    None where the connector said no currency (the report then takes the loaded lines')."""
    entries = [{"currency": currency, "amount": amount}
               for currency, amount in sorted(ctx.quarantined_by_currency.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))
               if amount]
    return entries or None


def _record(conn, rel, sha, size, connector, kind, status, loaded, quarantined, detail, now, totals=(None, None, None),
            **extra) -> None:
    """`extra`: the ledger's columns of raw.files (content_sha256, file_mtime, layout_*, delivery_id)."""
    detail = printable(detail)
    # A file retried after a failure or a new connector replaces its earlier verdict.
    conn.execute("DELETE FROM raw.files WHERE path = ? AND sha256 = ?", [rel, sha])
    names = ", ".join(extra)
    conn.execute(
        f"""INSERT INTO raw.files (path, sha256, size_bytes, connector, kind, status, rows_read, rows_loaded,
                                  rows_quarantined, source_total, quarantined_total, quarantined_by_currency, detail,
                                  ingested_at{", " + names if extra else ""})
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::STRUCT(currency VARCHAR, amount DECIMAL(38, 10))[], ?, ?{", ?" * len(extra)})""",
        [rel, sha, size, connector, kind, status, loaded + quarantined, loaded, quarantined, *totals, detail, now, *extra.values()],
    )
