"""Checkpoint events as JSON lines, written by training code around each checkpoint save.

One object per line: `job` (or `workload_id`), `host`, `started_at`, `ended_at`, `bytes`, `path`,
`storage_class` (e.g. `local_nvme`, `cloud_disk`, `nfs`, `object_store`). Times are ISO 8601;
without an offset they are read in the configured time zone.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, failed, first_reason, parse_utc, split_rejected, to_canonical
from connectors.kit import normalise_host
from connectors.kit import Connector, ReadContext, open_text, text_lines

CHUNK_LINES = 50_000
FIELDS = ("job", "workload_id", "host", "started_at", "ended_at", "bytes", "path", "storage_class")


class CheckpointEventsConnector(Connector):
    name = "checkpoint_events"
    kind = "storage"
    recognises = "checkpoint events as JSON lines: job, host, started_at, ended_at, bytes, path, storage_class"

    def detect(self, path: Path, head: bytes) -> bool:
        first = head.decode("utf-8", errors="replace").lstrip().split("\n", 1)[0]
        try:
            record = json.loads(first)
        except ValueError:
            return False
        return isinstance(record, dict) and {"bytes", "started_at"} <= record.keys() and bool({"job", "workload_id"} & record.keys())

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        with open_text(path) as fh:  # "\r" alone is no line break; gzip or a one-file zip decompressed
            number = 0
            while chunk := text_lines(fh, CHUNK_LINES, ctx.source_file):
                rows = []
                for line in chunk:
                    number += 1
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                        if not isinstance(record, dict):
                            raise ValueError("not a JSON object")
                    except ValueError as exc:
                        ctx.quarantine(self.name, number, f"not a JSON object: {exc}", line.rstrip("\n"))
                        continue
                    rows.append({**{f: None if record.get(f) is None else str(record[f]) for f in FIELDS}, ROW_NUMBER: number})
                if rows:
                    yield from self._emit(pl.DataFrame(rows, schema={**{f: pl.String for f in FIELDS}, ROW_NUMBER: pl.Int64}), ctx)

    def _emit(self, frame: pl.DataFrame, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        started, ended = parse_utc("started_at", ctx.timezone), parse_utc("ended_at", ctx.timezone)
        size = pl.col("bytes").cast(pl.Int64, strict=False)
        reason = first_reason([
            (pl.coalesce("job", "workload_id").is_null(), "no job"),
            (started.is_null(), pl.format("started_at '{}' is not a timestamp", pl.col("started_at").fill_null(""))),
            (failed("ended_at", ended), pl.format("ended_at '{}' is not a timestamp", "ended_at")),
            (ended < started, "ended_at is before started_at"),
            (size.is_null() | (size < 0), pl.format("bytes '{}' is not a whole number ≥ 0", pl.col("bytes").fill_null(""))),
        ])
        accepted = split_rejected(frame, reason, ctx, self.name, FIELDS)
        if not accepted.height:
            return
        workload, host = pl.coalesce("workload_id", "job"), normalise_host(pl.col("host"))
        out = accepted.select(
            # The host too: each node of a job logs its own shard's write at the same step.
            pl.concat_str(pl.lit("ckpt:"), workload, pl.lit("@"), host.fill_null(""), pl.lit("@"),
                          pl.col("started_at")).alias("event_id"),
            pl.lit("checkpoint").alias("kind"), host.alias("host"),
            workload.alias("workload_id"), size.alias("bytes"), started.alias("started_at"), ended.alias("ended_at"),
            "storage_class", "path", ROW_NUMBER,
        )
        yield to_canonical(out, self.schema, self.name, ctx)
