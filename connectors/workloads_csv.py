"""The plain workloads CSV: `workload_id, phase, host, gpu_count, started_at, ended_at`.

Optional columns: `name`, `resource_id`, `account`, `partition`, `namespace`. Timestamps carry an
offset or are read in the configured time zone. `phase` is one of the work phases, or empty to
let the phase rules decide; an empty `ended_at` means still running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import (
    ROW_NUMBER,
    failed,
    first_reason,
    header_fields,
    parse_utc,
    split_rejected,
    stream_csv_as_strings,
    to_canonical,
)
from connectors.kit import normalise_host
from connectors.kit import Connector, ReadContext
from models.gpus import mig_card_share, mig_profile_match
from models.phases import PHASE_ALIASES, WORK_PHASES

REQUIRED = ("workload_id", "phase", "host", "gpu_count", "started_at", "ended_at")
OPTIONAL = ("name", "resource_id", "account", "partition", "namespace")
# Optional too: `mig_profile`, the MIG profile each of its GPUs is (`1g.10gb`): gpu_cards = gpu_count × its share.
NO_PROFILE = ("", "none", "n/a", "na", "-")


class WorkloadsCsvConnector(Connector):
    name = "workloads_csv"
    kind = "workload"
    recognises = "workloads CSV with columns workload_id, phase, host, gpu_count, started_at, ended_at"

    def detect(self, path: Path, head: bytes) -> bool:
        return set(REQUIRED) <= set(header_fields(head))

    def missing_columns(self, head: bytes) -> list[str] | None:
        names = set(header_fields(head))
        return [c for c in REQUIRED if c not in names]

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        for frame in stream_csv_as_strings(path, ctx.source_file, ctx=ctx, connector=self.name):
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            frame = frame.with_columns(pl.col(source_columns).str.strip_chars())
            key = pl.col("phase").str.to_lowercase().str.replace_all(r"[\s_\-]", "").replace(PHASE_ALIASES)
            phase = pl.when(key.is_in(WORK_PHASES)).then(key)
            gpu_count = pl.col("gpu_count").cast(pl.Int32, strict=False)
            started = parse_utc("started_at", ctx.timezone)
            ended = parse_utc("ended_at", ctx.timezone)
            # Stripped above; an empty cell (or none, N/A, -) says the GPUs are whole.
            profile = (pl.when(~pl.col("mig_profile").str.to_lowercase().is_in(NO_PROFILE)).then(pl.col("mig_profile"))
                       if "mig_profile" in frame.columns else pl.lit(None, dtype=pl.String))
            share = profile.map_elements(mig_card_share, return_dtype=pl.Float64)
            reason = first_reason([
                (pl.col("workload_id").is_null(), "workload_id is empty"),
                (phase.is_null() & pl.col("phase").is_not_null(),
                 pl.format("phase '{}' is not one of " + ", ".join(WORK_PHASES), pl.col("phase"))),
                (pl.col("host").is_null() & (pl.col("resource_id").is_null() if "resource_id" in frame.columns else pl.lit(True)),
                 "neither host nor resource_id is given"),
                (gpu_count.is_null() | (gpu_count < 0), pl.format("gpu_count '{}' is not a whole number ≥ 0", pl.col("gpu_count"))),
                # A profile only its card can size (2g.48gb) is GPUs of unknown size, as elsewhere: gpu_cards NULL.
                (profile.is_not_null() & profile.map_elements(lambda p: mig_profile_match(p) is None, return_dtype=pl.Boolean),
                 pl.format("mig_profile '{}' is not a MIG profile such as 1g.10gb", profile)),
                (started.is_null(), pl.format("started_at '{}' is not a timestamp", pl.col("started_at"))),
                (failed("ended_at", ended), pl.format("ended_at '{}' is not a timestamp", pl.col("ended_at"))),
                (ended < started, "ended_at is before started_at"),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns)
            if not accepted.height:
                continue
            optional = [pl.col(c) for c in OPTIONAL if c in accepted.columns]
            out = accepted.select(
                pl.col("workload_id"),
                *optional,
                phase.alias("phase"),
                normalise_host(pl.col("host")).alias("host"),
                gpu_count.alias("gpu_count"),
                (gpu_count * share).alias("gpu_cards"),
                started.alias("started_at"),
                ended.alias("ended_at"),
                pl.lit("workloads_csv").alias("source"),
                pl.col(ROW_NUMBER),
            )
            yield to_canonical(out, self.schema, self.name, ctx)
