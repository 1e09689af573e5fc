"""One writer per warehouse file, and readers that never see a half-built one.

A run never opens the published file for writing. It builds into a staging copy beside it
(`<warehouse>.staging-<pid>`) and, when it is done, publishes that copy with one `os.replace`.
So a reader's `duckdb.connect(path, read_only=True)` never meets DuckDB's writer lock and sees the
state before or after a run; a connection opened before the replace keeps reading the old file.
A kill -9 leaves the published file untouched; the next writer deletes the orphaned staging file.

Writers queue on `<warehouse>.lock` (filelock: an OS lock, released by the kernel when the holder
dies); `<warehouse>.lock.holder` says who holds it, for the message a waiting run prints.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
from filelock import FileLock, Timeout

from pipelines.warehouse import lake_tables
from pipelines.warehouse.connection import connect

EX_TEMPFAIL = 75  # sysexits.h: "try again later", the exit code of `--no-wait` when the warehouse is busy


def lock_path(warehouse: Path) -> Path:
    return warehouse.with_name(warehouse.name + ".lock")


def holder_path(warehouse: Path) -> Path:
    return warehouse.with_name(warehouse.name + ".lock.holder")


def staging_path(warehouse: Path, pid: int | None = None) -> Path:
    return warehouse.with_name(f"{warehouse.name}.staging-{pid or os.getpid()}")


def wal_path(database: Path) -> Path:
    return database.with_name(database.name + ".wal")


@dataclass(frozen=True)
class Holder:
    pid: int | None
    started: str | None
    command: str | None = None

    def describe(self) -> str:
        if self.pid is None:
            return "another run (holder unknown)"
        return f"pid {self.pid}, started {self.started}" + (f" ({self.command})" if self.command else "")


class WarehouseBusy(RuntimeError):
    def __init__(self, warehouse: Path, holder: Holder):
        super().__init__(f"{warehouse} is being written by {holder.describe()}")
        self.warehouse, self.holder = warehouse, holder


class WarehouseOpenForWriting(RuntimeError):
    """Another process holds the published file open for writing (`duckdb.connect(path)` without
    `read_only=True`): a run would replace the file under it, and what it writes there would be lost."""

    def __init__(self, warehouse: Path, detail: str):
        super().__init__(f"{warehouse} is open for writing in another process ({detail}): close that connection, "
                         "or open the warehouse with read_only=True, and run again")
        self.warehouse, self.detail = warehouse, detail


def foreign_writer(warehouse: Path) -> str | None:
    """DuckDB's word on who holds the published file's writer lock, or None when nobody does.
    Readers share the file (a read-only connection never blocks a run); a writer does not."""
    if not warehouse.exists():
        return None
    try:
        duckdb.connect(str(warehouse), read_only=True).close()
    except duckdb.IOException as exc:
        message = str(exc)
        if "lock" not in message.lower():
            raise
        held = re.search(r"held in (.+?) \(PID (\d+)\)", message)
        return f"{held.group(1)}, pid {held.group(2)}" if held else message.splitlines()[0]
    return None


def read_holder(warehouse: Path) -> Holder:
    try:
        data = json.loads(holder_path(warehouse).read_text())
        return Holder(int(data["pid"]), data.get("started"), data.get("command"))
    except (OSError, ValueError, KeyError, TypeError):
        return Holder(None, None)  # between the holder's lock and its note, or a note already removed


# One lock object per warehouse in this process: `finops run` holds it around the run and the run's
# resource takes it again, so it must re-enter (a second flock on the same file would deadlock).
_locks: dict[Path, FileLock] = {}
_locks_guard = threading.Lock()


def _lock(warehouse: Path) -> FileLock:
    with _locks_guard:
        key = warehouse.resolve()
        if key not in _locks:
            # preserve_lock_file: deleting a lock file others may be waiting on races; it is empty anyway.
            _locks[key] = FileLock(lock_path(key), thread_local=False, preserve_lock_file=True)
        return _locks[key]


@contextmanager
def writer_lock(warehouse: Path, wait: bool = True, on_wait: Callable[[Holder], None] | None = None) -> Iterator[None]:
    """Hold the warehouse's writer lock. Busy: raise WarehouseBusy (wait=False), or call `on_wait`
    once with the holder and block until it is free. Re-entrant within this process."""
    warehouse = Path(warehouse)
    warehouse.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(warehouse)
    outermost = not lock.is_locked
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = read_holder(warehouse)
        if not wait:
            raise WarehouseBusy(warehouse, holder) from None
        if on_wait:
            on_wait(holder)
        lock.acquire()
    try:
        if outermost:
            _write_atomically(holder_path(warehouse), json.dumps({
                "pid": os.getpid(), "started": datetime.now(UTC).isoformat(timespec="seconds"),
                "command": " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:3]))}))
        yield
    finally:
        if outermost:
            holder_path(warehouse).unlink(missing_ok=True)
        lock.release()


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def remove_stale_staging(warehouse: Path) -> list[Path]:
    """Delete staging files (and their WALs) left beside the warehouse. Only call it holding the
    writer lock: then no other process is building, so any staging file is an orphan of a dead run."""
    removed = []
    for path in warehouse.parent.glob(glob.escape(warehouse.name) + ".staging-*"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def start_staging(warehouse: Path, fresh: bool = False) -> Path:
    """The staging file this process builds into: a copy of the published warehouse (empty when
    `fresh` or when none is published yet). The caller holds the writer lock."""
    remove_stale_staging(warehouse)
    lake_tables.remove_unreferenced(warehouse)  # what a killed run wrote into the lake
    staging = staging_path(warehouse)
    if not fresh and warehouse.exists():
        # Copying costs about the file's size in I/O (the demo's: see README); it buys readers that
        # never wait and a published file no crash can damage.
        shutil.copyfile(warehouse, staging)
        if wal_path(warehouse).exists():
            # Only a warehouse last written in place by an older version (and not closed) has one:
            # it carries committed changes, so it travels with the copy and DuckDB replays it there.
            shutil.copyfile(wal_path(warehouse), wal_path(staging))
    return staging


def publish(staging: Path, warehouse: Path) -> bool:
    """Checkpoint the staging file into one self-contained file, make it durable, and atomically
    put it in the warehouse's place. Every connection to `staging` must be closed already."""
    if not staging.exists():
        return False  # the run never opened the warehouse: nothing to publish
    conn = connect(staging)  # held to the memory limit: a checkpoint of a large run buffers too
    try:
        conn.execute("CHECKPOINT")
    finally:
        conn.close()
    if wal_path(staging).exists():
        raise RuntimeError(f"{staging} still has a WAL after its checkpoint; a connection is still open")
    _fsync(staging)
    # A legacy WAL beside the published file belongs to the old file; the new one already holds it.
    wal_path(warehouse).unlink(missing_ok=True)
    os.replace(staging, warehouse)
    _fsync(warehouse.parent, directory=True)
    return True


def discard(staging: Path) -> None:
    staging.unlink(missing_ok=True)
    wal_path(staging).unlink(missing_ok=True)


@dataclass
class StagedWrite:
    """One run's write to a warehouse: the lock held, the staging file, and whether it published."""
    warehouse: Path
    staging: Path
    published: bool | None = None  # None until closed
    _stack: ExitStack | None = None

    @classmethod
    def begin(cls, warehouse: Path, fresh: bool = False, wait: bool = True,
              on_wait: Callable[[Holder], None] | None = None) -> StagedWrite:
        warehouse = Path(warehouse).resolve()
        stack = ExitStack()
        stack.enter_context(writer_lock(warehouse, wait=wait, on_wait=on_wait))
        try:
            if detail := foreign_writer(warehouse):
                raise WarehouseOpenForWriting(warehouse, detail)
            staging = start_staging(warehouse, fresh)
        except BaseException:
            stack.close()
            raise
        return cls(warehouse, staging, None, stack)

    def finish(self, publish_it: bool) -> bool:
        """Publish (or throw away) the staging file, then release the lock. Returns whether it published."""
        try:
            if publish_it:
                lake_tables.keep_for_one_more_run(self.warehouse)  # what the file about to be replaced reads
                self.published = publish(self.staging, self.warehouse)
                if self.published:  # the builds the new file superseded, but those the replaced one read
                    lake_tables.remove_unreferenced(self.warehouse)
            else:
                self.published = False
        finally:
            if not self.published:
                discard(self.staging)
            _outcomes[self.warehouse] = bool(self.published)
            if self._stack is not None:
                self._stack.close()
                self._stack = None
        return bool(self.published)


# Whether the last run of this process on a warehouse published, for the CLI's closing words.
_outcomes: dict[Path, bool] = {}


def last_published(warehouse: Path) -> bool | None:
    return _outcomes.get(Path(warehouse).resolve())


def forget_outcome(warehouse: Path) -> None:
    _outcomes.pop(Path(warehouse).resolve(), None)
