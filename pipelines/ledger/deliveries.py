"""Finding deliveries: provider manifests, folder layouts, file names, and a file's content identity.

A billing file belongs to a delivery of an export. What is known about the delivery comes, best
first, from:

1. a provider manifest that lists the file (AWS CUR legacy `<report>-Manifest.json`, AWS Data
   Exports `metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json`, Azure `manifest.json`);
2. the folder layout the provider writes (`<report>/<yyyymmdd-yyyymmdd>/<assemblyId>/…` for CUR,
   `<export>/data/BILLING_PERIOD=YYYY-MM/<executionId>/…` for Data Exports,
   `<export>/<yyyymmdd-yyyymmdd>/<run id>/part_*.csv` for Azure), or the file name's counter (OCI);
3. the rows themselves (GCP `export_time`);
4. nothing: a plain upload is a delivery of its own.

Manifests are read here (`read_manifest`); which file belongs to which delivery, and which
delivery counts, is decided in SQL over every raw row (`pipelines.ledger.rules`), so it never
depends on which run loaded which file.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path, PurePosixPath

from connectors.base import DECOMPRESSION_ERRORS, ZIP_MAGIC, open_maybe_gzip

CHUNK = 1 << 20
BOM = b"\xef\xbb\xbf"
MANIFEST_MAX_BYTES = 64 << 20
INCREMENTAL_CONNECTORS = {"gcp_billing": "Google Cloud", "oci_cost": "Oracle"}
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
DATE_RANGE = re.compile(r"^(\d{8})-(\d{8})$")


# -- content identity ---------------------------------------------------------------------------

def content_sha256(path: Path) -> str:
    """The SHA-256 of the file's content, normalized: gzip or a one-file zip decompressed, a UTF-8
    BOM stripped and CRLF line ends read as LF. A `.csv`, a `.csv.gz`, a `.csv.zip` and a CRLF copy
    of one export hash alike.
    A gzip stream that cannot be read whole hashes as its raw bytes (the connector refuses it)."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic[:2] == b"\x1f\x8b" or magic == ZIP_MAGIC:
        try:
            with open_maybe_gzip(path) as fh:
                return _normalized_digest(fh)
        except DECOMPRESSION_ERRORS:
            pass
    with open(path, "rb") as fh:
        return _normalized_digest(fh)


def _normalized_digest(fh) -> str:
    digest = hashlib.sha256()
    first, carry = True, b""
    while chunk := fh.read(CHUNK):
        chunk = carry + chunk
        if first:
            if len(chunk) < len(BOM) and BOM.startswith(chunk):
                carry = chunk
                continue
            chunk, first = chunk.removeprefix(BOM), False
        carry = b"\r" if chunk.endswith(b"\r") else b""  # a CR at the chunk's end may start a CRLF
        digest.update((chunk[:-1] if carry else chunk).replace(b"\r\n", b"\n"))
    digest.update(carry)
    return digest.hexdigest()


# -- manifests -----------------------------------------------------------------------------------

@dataclass
class Manifest:
    """One delivery manifest as the provider wrote it."""

    format: str  # aws_cur | aws_data_exports | azure_export
    provider: str
    export_name: str | None
    scope: str | None
    billing_period: date | None
    delivery_id: str
    created_at: datetime | None  # the provider's own time, where the manifest states one
    mode: str  # replace | incremental
    parts: list[str] = field(default_factory=list)
    # An AWS manifest the provider overwrites with each new delivery (CUR's date-range-level one,
    # the Data Exports period manifest): the delivery it names is the newest.
    latest_pointer: bool = False

    @property
    def detail(self) -> str:
        period = self.billing_period.isoformat() if self.billing_period else "?"
        return (f"{self.format} manifest of delivery {self.delivery_id} (export {self.export_name}, "
                f"scope {self.scope}, period {period}, {len(self.parts)} parts)")


def is_manifest_name(path: Path) -> bool:
    name = path.name.lower()
    return name == "manifest.json" or name.endswith("-manifest.json")


def read_manifest(path: Path, rel: str) -> Manifest | None:
    """The manifest at `path`, or None when the file is not one of the manifests the ledger knows."""
    if not is_manifest_name(path) or path.stat().st_size > MANIFEST_MAX_BYTES:
        return None
    try:
        doc = json.loads(path.read_bytes().removeprefix(BOM))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    try:
        if "assemblyId" in doc and "reportKeys" in doc:
            return _aws_cur(doc, rel)
        if "executionId" in doc or "dataFiles" in doc:
            return _aws_data_exports(doc, rel)
        if "runInfo" in doc and ("blobs" in doc or "exportConfig" in doc):
            return _azure(doc)
    except (TypeError, AttributeError, ValueError):
        return None
    return None


def _aws_cur(doc: dict, rel: str) -> Manifest:
    """CUR legacy: `<report>/<yyyymmdd-yyyymmdd>/<report>-Manifest.json` (overwritten by each new
    delivery) and `<report>/<yyyymmdd-yyyymmdd>/<assemblyId>/<report>-Manifest.json` (never)."""
    assembly = str(doc["assemblyId"])
    period = (doc.get("billingPeriod") or {}).get("start")
    folder = PurePosixPath(rel).parent.name
    return Manifest(
        format="aws_cur", provider="AWS", export_name=doc.get("reportName"), scope=_text(doc.get("account")),
        billing_period=_period(period), delivery_id=f"aws-cur:{assembly}", created_at=_time(doc.get("creationTime")),
        mode="replace", parts=[_key(k) for k in doc.get("reportKeys") or []],
        latest_pointer=bool(DATE_RANGE.match(folder)) and folder != assembly,
    )


def _aws_data_exports(doc: dict, rel: str) -> Manifest:
    """AWS Data Exports (CUR 2.0, FOCUS): `<export>/metadata/BILLING_PERIOD=YYYY-MM/<export>-Manifest.json`,
    rewritten after each refresh once all its data files are written."""
    arn = _text(doc.get("exportArn")) or ""
    account = arn.split(":")[4] if arn.count(":") >= 5 else None
    # The export's folder names it as its data files' layout does (`<export>/data/…`), so a refresh
    # seen only through its data folders is the same export; else the manifest's own words.
    folder = re.search(r"(?:^|/)([^/]+)/metadata/BILLING_PERIOD=\d{4}-\d{2}/[^/]+$", rel)
    name = (folder.group(1) if folder else None) or doc.get("exportName") \
        or (arn.split("export/", 1)[1].split("/")[0] if "export/" in arn else None) \
        or PurePosixPath(rel).name[: -len("-Manifest.json")]
    match = re.search(r"BILLING_PERIOD=(\d{4})-(\d{2})", rel)
    bp = doc.get("billingPeriod")
    period = _period(bp.get("start") if isinstance(bp, dict) else bp) or (
        date(int(match.group(1)), int(match.group(2)), 1) if match else None)
    execution = _text(doc.get("executionId")) or hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return Manifest(
        format="aws_data_exports", provider="AWS", export_name=name, scope=account, billing_period=period,
        delivery_id=f"aws-dataexports:{execution}", created_at=_time(doc.get("creationTime") or doc.get("executionTime")),
        mode="replace", parts=[_key(k) for k in doc.get("dataFiles") or []], latest_pointer=True,
    )


def _azure(doc: dict) -> Manifest:
    """Azure Cost Management export run: `manifest.json` with exportConfig, runInfo and blobs."""
    config, run = doc.get("exportConfig") or {}, doc.get("runInfo") or {}
    resource = _text(config.get("resourceId")) or ""
    scope = re.split(r"(?i)/providers/microsoft\.costmanagement/exports/", resource)[0] or None
    run_id = _text(run.get("runId")) or hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return Manifest(
        format="azure_export", provider="Microsoft", export_name=config.get("exportName"), scope=scope,
        billing_period=_period(run.get("startDate")), delivery_id=f"azure:{run_id}",
        created_at=_time(run.get("submittedTime")), mode="replace",
        parts=[_key(b.get("blobName", "")) for b in doc.get("blobs") or [] if isinstance(b, dict) and b.get("blobName")],
    )


def _text(value) -> str | None:
    return None if value is None or value == "" else str(value)


def _key(key: str) -> str:
    """An object key as a path: `s3://bucket/a/b` → `a/b`; a blob name keeps its folders."""
    key = str(key)
    if "://" in key:
        key = key.split("://", 1)[1].split("/", 1)[-1]
    return key.lstrip("/")


def _time(value) -> datetime | None:
    if not value:
        return None
    text = str(value).strip().replace("Z", "+00:00")
    for parse in (datetime.fromisoformat, lambda t: datetime.strptime(t, "%Y%m%dT%H%M%S.%f+00:00")):
        try:
            moment = parse(text)
            return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        except ValueError:
            continue
    return None


def _period(value) -> date | None:
    """The first day of the billing period: `20231101T000000.000Z`, `2023-11-01T00:00:00Z`, `2023-11`."""
    if not value:
        return None
    digits = re.sub(r"\D", "", str(value))
    if len(digits) < 6:
        return None
    return date(int(digits[:4]), int(digits[4:6]), 1)


# -- folder layouts and file names ----------------------------------------------------------------

@dataclass
class Layout:
    """What a billing file's path says about its delivery."""

    delivery_id: str | None = None
    export_name: str | None = None
    billing_period: date | None = None
    seq: int | None = None  # the provider's counter in the file name (OCI)


def layout_of(rel: str, connector: str | None) -> Layout:
    parts = PurePosixPath(rel).parts
    name = parts[-1] if parts else rel
    if connector == "aws_cur" and len(parts) >= 4:
        report, dates, assembly = parts[-4], parts[-3], parts[-2]
        if (m := DATE_RANGE.match(dates)) and re.fullmatch(UUID, assembly) and name.startswith(f"{report}-"):
            return Layout(f"aws-cur:{assembly}", report, _period(m.group(1)))
    if connector in ("aws_cur", "focus") and (m := re.search(r"(?:^|/)([^/]+)/data/BILLING_PERIOD=(\d{4})-(\d{2})/(?:([^/]+)/)?[^/]+$", rel)):
        period = date(int(m.group(2)), int(m.group(3)), 1)
        return Layout(f"aws-dataexports:{m.group(4)}" if m.group(4) else None, m.group(1), period)
    if connector in ("azure_cost", "focus") and len(parts) >= 4:
        export, dates, run = parts[-4], parts[-3], parts[-2]
        if (m := DATE_RANGE.match(dates)) and re.fullmatch(UUID, run) and re.match(r"(?i)part_\d+", name):
            return Layout(f"azure:{run}", export, _period(m.group(1)))
    if connector == "oci_cost":
        stem = re.sub(r"(\.(csv|gz|zip|parquet))+$", "", name, flags=re.I)
        counter = re.findall(r"\d+", stem)
        folder = PurePosixPath(rel).parent.as_posix()
        return Layout(f"oci:{'' if folder == '.' else folder + '/'}{stem}", None, None,
                      int(counter[-1]) if counter and len(counter[-1]) <= 18 else None)
    return Layout()


def file_mtime(path: Path) -> datetime:
    """The file's modification time. `aws s3 sync` and `aws s3 cp` set it to the object's
    LastModified, so for a synced manifest this is when the provider wrote it."""
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)
