"""Stream a connector's record batches into the lake, one landing file version at a time.

Arrow's dataset writer takes the batches from the connector's generator as they come and writes
them partitioned (Hive folders) into a staging folder of their own, so memory stays that of a few
batches whatever the file's size and no Python loop touches a row. Only when the connector has
read the whole file are the partition folders moved into the table (`os.replace` of each
`file=<sha256>` folder); the caller then registers the version in raw.files. A crash before that
leaves folders no registry names: invisible to every view, and removed by `sweep_and_check`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from models.schemas import SCHEMAS
from pipelines.lake.layout import MIGRATED, PARTITIONING, REGISTERED_VERSIONS, SCHEMA_FOLDER, staging_root, table_root

COMPRESSION = "zstd"
ROW_GROUP_SIZE = 122_880  # DuckDB's own row group size: files stay readable in parallel


@dataclass
class WrittenVersion:
    """A file version's rows, written to staging and not yet in the table."""

    kind: str
    sha256: str
    staging: Path
    rows: int = 0
    error: BaseException | None = None  # what the connector raised, as it raised it
    folders: list[Path] = field(default_factory=list)  # staging folders, relative to `staging`

    def parquet_glob(self) -> str:
        return str(self.staging) + "/**/*.parquet"

    def publish(self, lake: Path) -> None:
        """Move every partition folder of this version into the table (replacing a folder left by an
        earlier, unregistered attempt), then drop the staging folder."""
        root = table_root(lake, self.kind)
        for relative in self.folders:
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(self.staging / relative, target)
        self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


def write_version(lake: Path, kind: str, sha256: str, batches: Iterable[pa.RecordBatch], attempt: str = "") -> WrittenVersion:
    """Write `batches` (the connector's output for one file version) to a staging folder,
    partitioned as the kind's table is. Raises whatever the connector raises, leaving nothing.
    `attempt` tells apart the staging folders of the same version written at once (the same bytes
    under two names, read side by side).

    Arrow's dataset writer streams the batches as they come; DuckDB's partitioned COPY from the same
    live stream took 26 s and 1.9 GB for a 1M-row CUR against 8 s and 0.9 GB here (measured side by
    side on the 2-core machine)."""
    staging = staging_root(lake) / f"{sha256}-{os.getpid()}{'-' + attempt if attempt else ''}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    written = WrittenVersion(kind, sha256, staging)
    parts = PARTITIONING[kind]
    keys = pa.schema([(name, pa.string()) for name in parts.names])
    schema = pa.schema([*SCHEMAS[kind], *keys])

    def with_keys():
        for batch in _counting(batches, written):
            columns = [compute(batch) for _, _, compute in parts.columns]
            yield pa.RecordBatch.from_arrays([*batch.columns, *columns, pa.repeat(pa.scalar(sha256, pa.string()), batch.num_rows)],
                                             schema=schema)

    try:
        ds.write_dataset(pa.RecordBatchReader.from_batches(schema, with_keys()), staging, format="parquet",
                         partitioning=ds.partitioning(keys, flavor="hive"), basename_template="data_{i}.parquet",
                         existing_data_behavior="overwrite_or_ignore", max_partitions=1 << 20,
                         min_rows_per_group=ROW_GROUP_SIZE // 2, max_rows_per_group=ROW_GROUP_SIZE,
                         file_options=ds.ParquetFileFormat().make_write_options(compression=COMPRESSION))
    except BaseException as exc:
        written.discard()
        # The writer may re-raise a failure inside the stream as its own error: give back the
        # connector's (a ConnectorError carries the line and the reason the file was refused).
        if written.error is not None and written.error is not exc:
            raise written.error from None
        raise
    if written.rows == 0:
        written.discard()
        return written
    written.folders = sorted(p.relative_to(staging) for p in staging.rglob(f"file={sha256}") if p.is_dir())
    return written


def _counting(batches: Iterable[pa.RecordBatch], written: WrittenVersion):
    try:
        for batch in batches:
            written.rows += batch.num_rows
            yield batch
    except BaseException as exc:
        written.error = exc
        raise


class LakeIncomplete(RuntimeError):
    """The registry names file versions whose rows are not in the lake."""


def sweep_and_check(conn: duckdb.DuckDBPyConnection, lake: Path) -> list[Path]:
    """At the start of an ingest, in one scan of the lake: remove staging folders and file-version
    folders no registry row names (what a killed run left behind), then refuse to go on if a version
    registered with rows has no folder — building on a registry whose rows are gone would drop money
    silently (most often the warehouse was copied or moved without its `.lake` folder). Call it
    holding the writer lock, with `conn` on the registry this run starts from: published snapshots
    name no more than it does. Returns the folders removed."""
    removed: list[Path] = []
    staging = staging_root(lake)
    if staging.exists():
        for folder in staging.iterdir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    registered = {row[0] for row in conn.execute(REGISTERED_VERSIONS).fetchall()}
    present: set[str] = set()
    for kind in PARTITIONING:
        root = table_root(lake, kind)
        if not root.exists():
            continue
        for folder in root.rglob("file=*"):
            version = folder.name.removeprefix("file=")
            if not folder.is_dir() or version in (SCHEMA_FOLDER, MIGRATED):
                continue
            if version in registered:
                present.add(version)
            else:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    missing = [row for row in conn.execute(
        "SELECT path, sha256 FROM raw.files WHERE rows_loaded > 0 ORDER BY path").fetchall() if row[1] not in present]
    if missing:
        raise LakeIncomplete(
            f"the lake {lake} lacks the rows of {len(missing)} file(s) the warehouse registers (first: {missing[0][0]}); "
            f"copy or move a warehouse together with its {lake.name} folder")
    return removed
