"""Finding connectors: the built-in ones, plus any that installed packages register.

A package registers a connector with an entry point in the `gpu_finops.connectors` group whose
value is a Connector instance, a Connector subclass, or a zero-argument factory returning one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

from connectors._spreadsheet import is_workbook, workbook_problems
from connectors.base import (
    DECOMPRESSION_ERRORS,
    KINDS,
    SNIFF_BYTES,
    ZIP_MAGIC,
    Connector,
    open_maybe_gzip,
    printable,
    zip_members,
)
from connectors.alibaba_trace import AlibabaGpuTraceConnector
from connectors.aws_cur import AwsCurConnector
from connectors.azure_cost import AzureCostConnector
from connectors.checkpoints_jsonl import CheckpointEventsConnector
from connectors.dcgm import DcgmScrapeConnector, PrometheusDcgmConnector
from connectors.focus import FocusConnector
from connectors.gcp_billing import GcpBillingConnector
from connectors.gpu_rental import GpuRentalConnector, InvalidMapping, invalid_mappings, mapping_connectors
from connectors.mapping_schema import MappingError
from connectors.kubernetes import KubernetesPodsConnector
from connectors.node_exporter import NodeExporterDiskConnector
from connectors.nvidia_smi import NvidiaSmiConnector
from connectors.oci_cost import OciCostConnector
from connectors.nvidia_smi_dmon import NvidiaSmiDmonConnector
from connectors.s3_access_log import S3AccessLogConnector
from connectors.slurm import SlurmSacctConnector
from connectors.workloads_csv import WorkloadsCsvConnector

ENTRY_POINT_GROUP = "gpu_finops.connectors"
log = logging.getLogger(__name__)


def builtin_connectors() -> list[Connector]:
    """The built-in connectors, then one per GPU-rental mapping file (bundled, then FINOPS_MAPPINGS).
    An invalid mapping, or one taking a built-in's name, is kept as an InvalidMapping: listed with
    its error by `finops connectors`, reported by a run, claiming no file."""
    core: list[Connector] = [
        FocusConnector(), AwsCurConnector(), AzureCostConnector(), GcpBillingConnector(), OciCostConnector(),
        NvidiaSmiConnector(), NvidiaSmiDmonConnector(), DcgmScrapeConnector(), PrometheusDcgmConnector(),
        AlibabaGpuTraceConnector(),
        WorkloadsCsvConnector(), SlurmSacctConnector(), KubernetesPodsConnector(),
        CheckpointEventsConnector(), NodeExporterDiskConnector(), S3AccessLogConnector(),
    ]
    taken = {c.name for c in core}
    for mapping in mapping_connectors():
        if mapping.name in taken and not isinstance(mapping, InvalidMapping):
            mapping = InvalidMapping(MappingError(mapping.source, f"name: '{mapping.name}' is a built-in connector's name"))
        core.append(mapping)
    return core


def _instantiate(obj: object) -> Connector:
    if isinstance(obj, Connector):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Connector):
            return made
    raise TypeError(f"{obj!r} is not a Connector, a Connector class or a factory of one")


@cache
def all_connectors() -> tuple[Connector, ...]:
    """Built-ins first, then entry points in name order; a duplicate name is refused loudly."""
    found = builtin_connectors()
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            connector = _instantiate(ep.load())
        except Exception as exc:  # a broken plug-in must not take the pipeline down
            log.error("connector entry point %s could not be loaded: %s", ep.name, exc)
            continue
        if connector.kind not in KINDS:
            log.error("connector %s has unknown kind %r", connector.name, connector.kind)
            continue
        holder = next((c for c in found if c.name == connector.name), None)
        if holder is not None:
            by = f"the mapping {holder.source}" if getattr(holder, "source", None) else "a built-in connector"
            log.error("connector name %s is already taken by %s; entry point %s ignored (rename one of them)",
                      connector.name, by, ep.name)
            continue
        found.append(connector)
    return tuple(found)


@dataclass(frozen=True)
class Detection:
    connector: Connector | None
    reason: str  # why no connector claimed the file, or which one did


def read_head(path: Path) -> bytes:
    with open_maybe_gzip(path) as fh:
        try:
            return fh.read(SNIFF_BYTES)
        except (EOFError, OSError):  # a gzip cut short: sniff what did arrive
            return b""


def detect(path: Path, connectors: tuple[Connector, ...] | None = None) -> Detection:
    """The first connector that recognises the file's content, or the reason none did."""
    connectors = connectors if connectors is not None else all_connectors()
    try:
        head = read_head(path)
    except DECOMPRESSION_ERRORS as exc:  # opening it, or its first bytes: an encrypted zip, a corrupt stream
        return Detection(None, f"a compressed file that cannot be read ({type(exc).__name__}: {printable(str(exc))[:200]})")
    if not head.strip():
        return Detection(None, "empty file")
    if (reason := archive_reason(path, head)) is not None:
        return Detection(None, reason)
    if (reason := encoding_reason(head)) is not None:
        return Detection(None, reason)
    mappings = []  # mapping connectors that claim the file, in order: (columns required, order, connector)
    for order, connector in enumerate(connectors):
        try:
            if not connector.detect(path, head):
                continue
        except Exception as exc:  # a sniffer bug must not hide the file from the others
            log.warning("connector %s failed while sniffing %s: %s", connector.name, printable(str(path)), type(exc).__name__)
            continue
        if not isinstance(connector, GpuRentalConnector):
            if not mappings:
                return Detection(connector, f"recognised by {connector.name}")
            continue
        mappings.append((len(set(connector.required)), order, connector))
    if mappings:
        # Several mappings whose columns the header has: the one naming the most of them is the
        # one written for this file (a user's own over the bundled generic one it extends); at
        # equal length the later, so a user's mapping (FINOPS_MAPPINGS, read after the bundled).
        chosen = max(mappings, key=lambda m: (m[0], m[1]))[2]
        others = [m[2].name for m in mappings if m[2] is not chosen]
        return Detection(chosen, f"recognised by {chosen.name}" + (f" (also matched: {', '.join(others)})" if others else ""))
    if is_workbook(path, head):
        if problems := workbook_problems(path):
            return Detection(None, "an Excel workbook whose sheets cannot all be opened: " + "; ".join(problems))
        return Detection(None, "an Excel workbook none of whose visible sheets names the columns of a mapping in its first "
                               "30 rows (or one that cannot be opened): see `finops connectors` for each mapping's columns")
    if (reason := unread_spreadsheet(path, head)) is not None:
        return Detection(None, reason)
    return Detection(None, closest_match(head, connectors))


# Spreadsheet formats no connector reads, by their first bytes: an .xls is an OLE2 compound file, an
# .ods a zip whose first member is its media type, stored uncompressed.
OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
ODS_MEDIA_TYPE = b"application/vnd.oasis.opendocument.spreadsheet"


def unread_spreadsheet(path: Path, head: bytes) -> str | None:
    """Why a legacy Excel (.xls) or OpenDocument (.ods) spreadsheet is read by no connector, and what
    to do. In an .xls the reader cannot tell an error cell (`#N/A`) from an empty one, which a
    mapping's default would fill (a USD line read as the default CNY); .ods is not supported."""
    if head.startswith(OLE2_MAGIC):
        return ("an Excel 97-2003 workbook (.xls), a password-protected workbook, or another OLE2 document: not "
                "read (an .xls's error cells read as empty); save it as .xlsx without a password (Excel: File > Save "
                "As) or export the sheet as CSV")
    if head.startswith(ZIP_MAGIC) and ODS_MEDIA_TYPE in head[:200]:
        return "an OpenDocument spreadsheet (.ods): not read; save it as .xlsx or export the sheet as CSV"
    return None


def archive_reason(path: Path, head: bytes) -> str | None:
    """Why a `.zip` file is read by no connector, where its being an archive is why. `head` is its
    first bytes as read: the one file's, decompressed, where it holds one."""
    if not path.name.lower().endswith(".zip"):
        return None
    with open(path, "rb") as fh:
        if fh.read(4) != ZIP_MAGIC:
            return None
    members = zip_members(path)
    if members is None:
        return "a .zip file that cannot be opened as an archive (cut short while syncing?)"
    if "xl/workbook.xml" in members:
        return "an Excel workbook named .zip: rename it .xlsx"
    if len(members) > 1:
        return f"a zip archive of {len(members)} files: unzip it into the landing folder, or zip one file per archive"
    inner = {ZIP_MAGIC: "an Excel workbook or another archive", b"PAR1": "a Parquet file", b"\x1f\x8b": "a gzip file"}
    what = next((name for magic, name in inner.items() if head.startswith(magic)), None)
    return f"a zip archive of {what} ({printable(members[0])}): unzip it into the landing folder" if what else None


def encoding_reason(head: bytes) -> str | None:
    """Why a UTF-16 text file is read by no connector (Excel's "Unicode Text", PowerShell's
    `Out-File`): every reader takes UTF-8, and read as such it would look cut short or unknown."""
    utf16 = head.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(head) >= 8 and head[1:8:2] == b"\x00" * 4)
    if not utf16:
        return None
    return "UTF-16 text: save it as UTF-8 (Excel: CSV UTF-8; PowerShell: -Encoding utf8) and land it again"


def separated_by_semicolons(head: bytes) -> bool:
    """Whether the header's fields are separated by ';' rather than ',' (a CSV saved with a
    spreadsheet's regional settings)."""
    first = head.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0]
    return first.count(b";") >= 2 and first.count(b",") == 0


def closest_match(head: bytes, connectors: tuple[Connector, ...]) -> str:
    """Why no connector took the file, naming the one whose header it came closest to."""
    best = None
    for connector in connectors:
        try:
            missing = connector.missing_columns(head)
        except Exception:  # a sniffer bug must not hide the file
            continue
        if missing and (best is None or len(missing) < len(best[1])):
            best = (connector, missing)
    reason = "no connector recognises its content (header)"
    if separated_by_semicolons(head):
        reason += "; its fields are separated by ';' (saved with a spreadsheet's regional settings?): save it comma-separated"
    elif best and len(best[1]) <= 3:
        reason += f"; closest: {best[0].name}, missing {', '.join(best[1])}"
    broken = invalid_mappings(connectors)
    if broken:  # the file may be the one a broken mapping was written for
        reason += f"; not tried: invalid mapping {', '.join(m.error.source for m in broken)} (see `finops connectors`)"
    return reason
