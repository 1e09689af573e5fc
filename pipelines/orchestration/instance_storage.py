"""Dagster's SQLite storage with the event log's connections kept open (dagster.yaml's `storage`).

Dagster's SQLite event log opens a new SQLAlchemy engine for every event it records and closes it
after the write; closing the last connection of a WAL database checkpoints it and deletes the WAL
file. A `finops run` over 2M telemetry samples records ~216 events, and that open-write-close cost
3.0-3.2 s of the run (~14 ms an event, measured on the 2-core development machine). Here each
database file (the index and a run's shard) keeps one engine while the process lives, and commits
run at SQLite's `synchronous=NORMAL`: in WAL mode that is always consistent, and a process killed
loses no committed event; only an operating-system crash or power loss may lose the last few.
A run's own file is still checkpointed at every commit, since a webserver following the run
watches that file (not its WAL). The same 216 events cost 1.0-1.4 s.

Everything else is Dagster's own SQLite storage: the same files under DAGSTER_HOME, readable by a
Dagster without this class (the webserver, `dagster dev`), and the same schema migrations.
Pinned to dagster==1.13.27: `_connect(shard)` is the one method replaced, and
tests/test_instance_storage.py fails if its signature or role moves.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator

from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage, _event_logs_directory
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

# The index and the run being written are the shards a run uses; a webserver reading many runs'
# logs goes on opening the others as Dagster does, the least recently used engine closed first.
KEPT_ENGINES = 4

# Closed at exit, so a run's files are checkpointed and its WAL file gone, as Dagster leaves them.
_OPEN_STORAGES: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for storage in list(_OPEN_STORAGES):
        storage._close_engines()


def _pragmas_on_connect(*pragmas: str):
    """A SQLAlchemy `connect` listener setting these PRAGMAs on each new SQLite connection."""
    def on_connect(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()
    return on_connect


# Every file: commits without an fsync each (WAL stays consistent; see the module's docstring).
INDEX_PRAGMAS = _pragmas_on_connect("synchronous=NORMAL")
# A run's file also checkpointed at every commit: a webserver watching a run learns of its new events
# when the run's .db file changes (Dagster's watchdog looks at that file, not at the WAL), as it did
# when each write closed its connection.
RUN_PRAGMAS = _pragmas_on_connect("synchronous=NORMAL", "wal_autocheckpoint=1")


class KeptOpenSqliteEventLogStorage(SqliteEventLogStorage):
    """SQLite event log storage reusing one engine per database file within a process."""

    def __init__(self, base_dir: str, inst_data=None):
        # Set before Dagster's __init__, which creates a new index database through _connect.
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_pid = os.getpid()
        self._engines_lock = threading.Lock()
        _OPEN_STORAGES.add(self)
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            if self._engines_pid != os.getpid():
                # A forked child must not share the parent's SQLite handles: forget them unclosed.
                for engine in self._engines.values():
                    engine.dispose(close=False)
                self._engines.clear()
                self._engines_pid = os.getpid()
            engine = self._engines.pop(shard, None)
            if engine is None:
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
                )
                event.listen(engine, "connect", INDEX_PRAGMAS if shard == INDEX_SHARD_NAME else RUN_PRAGMAS)
            self._engines[shard] = engine
            while len(self._engines) > KEPT_ENGINES:
                _, oldest = self._engines.popitem(last=False)
                oldest.dispose()
            return engine

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # As Dagster's: one connection at a time per storage, the database set up on first use.
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                with conn.begin():
                    yield conn

    def _close_engines(self) -> None:
        with self._engines_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()

    def wipe(self) -> None:
        # The run shards' files are deleted: no engine may keep writing to an unlinked file.
        with self._db_lock:
            self._close_engines()
        super().wipe()

    def upgrade(self) -> None:
        super().upgrade()
        self._close_engines()

    def dispose(self) -> None:
        self._close_engines()
        super().dispose()


class KeptOpenSqliteStorage(DagsterSqliteStorage):
    """Dagster's SQLite storage (runs, schedules, event log) with the event log above."""

    def __init__(self, base_dir: str, inst_data=None):
        super().__init__(base_dir, inst_data=inst_data)
        self._event_log_storage = KeptOpenSqliteEventLogStorage(_event_logs_directory(base_dir))

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)
