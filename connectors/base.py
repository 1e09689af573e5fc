"""What a connector is: a name, a kind, a content sniffer and a streaming reader."""

from __future__ import annotations

import gzip
import io
import json
import unicodedata
import zipfile
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from itertools import islice
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Context, Decimal
from pathlib import Path
from typing import Final

import pyarrow as pa

from models.currencies import is_iso4217
from models.schemas import QUARANTINE, SCHEMAS

KINDS = tuple(SCHEMAS)  # billing, telemetry, workload, storage

# How much of a file detection may look at: enough for any header, small enough to be cheap.
SNIFF_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"


ZIP_MAGIC = b"PK\x03\x04"
# What opening or reading a damaged compressed file raises: a gzip or zip cut short or corrupt, a
# zip member encrypted (RuntimeError) or compressed in a way Python cannot read (Deflate64, AES).
DECOMPRESSION_ERRORS = (OSError, EOFError, zlib.error, zipfile.BadZipFile, RuntimeError, NotImplementedError)
# What archivers add beside the file (macOS's Compress: resource forks and Finder's folder state).
_ARCHIVE_LITTER = ("__MACOSX/", ".DS_Store")


def zip_members(path: Path) -> list[str] | None:
    """The files a `.zip` archive holds (a zip by content and by name: an Excel workbook is a zip
    too, and is no archive of files), or None where the file is none or cannot be opened."""
    if not path.name.lower().endswith(".zip"):
        return None
    with open(path, "rb") as fh:
        if fh.read(4) != ZIP_MAGIC:
            return None
    try:
        with zipfile.ZipFile(path) as archive:
            return [member.filename for member in archive.infolist() if not member.is_dir()
                    and not member.filename.startswith(_ARCHIVE_LITTER[0])
                    and member.filename.rsplit("/", 1)[-1] != _ARCHIVE_LITTER[1]]
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None


def open_maybe_gzip(path: Path):
    """The file's bytes, decompressed when it is gzip (by content, whatever its name) or a `.zip`
    archive of one file (AWS's ZIP-compressed CUR, consoles' downloads); a zip of several files is
    read as its bytes, which no connector recognises (the registry says why)."""
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic[:2] == GZIP_MAGIC:
        return gzip.open(path, "rb")
    if magic == ZIP_MAGIC and len(members := zip_members(path) or []) == 1:
        # The member stays readable once the archive is closed: they share the file, which closes
        # with the last of them.
        with zipfile.ZipFile(path) as archive:
            return archive.open(members[0])
    return open(path, "rb")


def open_text(path: Path):
    """The file's text (decompressed as `open_maybe_gzip` does), UTF-8 with undecodable bytes
    replaced, lines split at \\n only (a lone \\r is no line break in JSON lines)."""
    return io.TextIOWrapper(open_maybe_gzip(path), encoding="utf-8", errors="replace", newline="\n")


def read_whole(path: Path, source_file: str) -> bytes:
    """The file's bytes, decompressed, for a reader of whole documents (JSON); a compressed file cut
    short or damaged is refused, naming why."""
    try:
        with open_maybe_gzip(path) as fh:
            return fh.read()
    except DECOMPRESSION_ERRORS as exc:
        raise _damaged(source_file, exc) from exc


def text_lines(fh, count: int, source_file: str) -> list[str]:
    """The next `count` lines of an `open_text` file; a compressed file cut short or damaged is
    refused, naming why."""
    try:
        return list(islice(fh, count))
    except DECOMPRESSION_ERRORS as exc:
        raise _damaged(source_file, exc) from exc


def _damaged(source_file: str, exc: BaseException) -> "ConnectorError":
    return ConnectorError(source_file, f"compressed file cut short or damaged ({type(exc).__name__}: {exc}): "
                          "a partial file is refused whole")


# Characters that must not reach a terminal or a log raw: controls (ESC starts terminal escape
# sequences), format characters (bidi overrides), surrogates (undecodable bytes in file names),
# private-use and unassigned code points, line and paragraph separators.
_UNPRINTABLE = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def printable(text: str) -> str:
    """`text` with every unprintable character written as its Python escape (`\\x1b`, `\\u202e`),
    so file names and messages are safe to store, log and print."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        ch.encode("unicode_escape", "backslashreplace").decode("ascii")
        if unicodedata.category(ch) in _UNPRINTABLE else ch
        for ch in text
    )


class ConnectorError(Exception):
    """A file a connector claimed but cannot read. Names the file and, where known, the line.

    The message is made printable; it must name where the problem is (line, column), never quote
    the file's content, which may be large, sensitive or hostile to a terminal."""

    def __init__(self, source_file: str, message: str, line: int | None = None):
        self.source_file = source_file
        self.line = line
        where = f"{source_file}, line {line}" if line is not None else source_file
        super().__init__(printable(f"{where}: {message}"))


# Sums of money at DECIMAL(38, 10) need up to 38 significant digits and more: Python's default
# decimal context keeps 28 and would round a sum near 10^19 (found by `make fuzz`).
MONEY_CONTEXT = Context(prec=76)


def money_sum(values) -> Decimal:
    """The exact sum of decimal amounts (None skipped), at money's full width."""
    total = Decimal(0)
    for value in values:
        if value is not None:
            total = MONEY_CONTEXT.add(total, value)
    return total


# `declare_money`'s currency when the connector does not say it (a connector of kit 1.3).
NOT_SAID: Final = "<not said>"


@dataclass
class ReadContext:
    """Everything a read needs besides the file: lineage values, settings, and the quarantine."""

    source_file: str
    ingested_at: datetime
    source_sha256: str = ""
    timezone: str = "UTC"  # for sources that write local wall-clock times
    quarantined: list[dict] = field(default_factory=list)
    # Billing files: the money the file states on every row it has (its own cost column), and the
    # part of it on rows sent to quarantine, so loaded + quarantined = source can be checked.
    source_total: Decimal = Decimal(0)
    quarantined_total: Decimal = Decimal(0)
    # The quarantined money by the currency its rows state (None: a row's currency is no ISO code), so
    # a report can say 100 USD and 700 CNY rather than 800. Money whose currency the connector did
    # not say is in `quarantined_total` only.
    quarantined_by_currency: dict[str | None, Decimal] = field(default_factory=dict)
    # Things the user should know about a file that still loaded (a truncated tail), for its detail.
    warnings: list[str] = field(default_factory=list)

    def declare_money(self, stated: Decimal | int | str, quarantined: Decimal | int | str = 0,
                      currency: str | None = NOT_SAID) -> None:
        """Billing files: add money the file states (its own cost column, on rows read so far) to
        `source_total`, and the part of it on rows sent to quarantine to `quarantined_total`, in
        `currency`, the currency those rows state: an ISO 4217 code as the connector loads it, or
        None where they state none that is one (any other text counts as None). Without it the
        quarantined money's currency is not said, and the report takes the file's loaded lines'.
        Amounts are exact decimals (a float is refused: it is not the money the file states).
        `split_rejected(..., amount=..., currency=...)` does this for a frame; call this for money
        read otherwise."""
        for value in (stated, quarantined):
            if isinstance(value, float):
                raise TypeError("money is declared as a Decimal (or int or text), never a float")
        self.source_total = MONEY_CONTEXT.add(self.source_total, Decimal(stated))
        self.quarantined_total = MONEY_CONTEXT.add(self.quarantined_total, Decimal(quarantined))
        if Decimal(quarantined) != 0 and currency is not NOT_SAID:
            code = currency if is_iso4217(currency) else None
            held = self.quarantined_by_currency.get(code, Decimal(0))
            self.quarantined_by_currency[code] = MONEY_CONTEXT.add(held, Decimal(quarantined))

    def warn(self, message: str) -> None:
        self.warnings.append(printable(message))

    def quarantine(self, connector: str, source_row: int, reason: str, record: object) -> None:
        self.quarantined.append(
            {
                "x_Connector": connector,
                "x_SourceFile": self.source_file,
                "x_SourceSha256": self.source_sha256,
                "x_SourceRow": source_row,
                "x_IngestedAt": self.ingested_at,
                "reason": reason,
                "raw_record": record if isinstance(record, str) else json.dumps(record, default=str),
            }
        )

    def quarantine_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(self.quarantined, schema=QUARANTINE)


class Connector(ABC):
    """A source format. Subclasses set the class attributes and implement detect and read."""

    name: str
    kind: str  # one of KINDS
    recognises: str  # what files it claims, in words, for `finops connectors`
    # The ingest reads up to two files at once, on threads: `read` keeps a file's state in its own
    # locals and `ctx`. A connector that keeps it on `self` sets this False and is read one file at a time.
    reads_concurrently: bool = True
    # Billing only: whether the provider re-sends invoice by invoice. Then a file's lines of another
    # invoice id add to the month (weekly invoices, one file each) and a file re-sending an invoice
    # replaces that invoice's lines; otherwise a newer delivery of a month replaces the month's lines.
    invoices_are_deliveries: bool = False

    @abstractmethod
    def detect(self, path: Path, head: bytes) -> bool:
        """True when the file's content (its first bytes, `head`) is this connector's format."""

    @abstractmethod
    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        """Stream the file as record batches in the canonical schema of `kind`.

        Rows that cannot be accepted go to `ctx.quarantine` with a reason; a file that cannot be
        read at all raises ConnectorError.
        """

    def missing_columns(self, head: bytes) -> list[str] | None:
        """For connectors that recognise files by their header: the columns this header lacks.
        None for connectors that recognise files otherwise. Used to tell a user which connector a
        rejected file came closest to, and what it missed."""
        return None

    @property
    def schema(self) -> pa.Schema:
        return SCHEMAS[self.kind]
