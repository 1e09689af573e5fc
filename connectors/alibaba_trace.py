"""Public GPU cluster traces as GPU samples: Alibaba's GenTD26 pod GPU duty cycle and GPU memory.

The two files share their columns in a different order (`value,timestamp_anon,container_ip` for
duty cycle in %, `timestamp_anon,value,container_ip` for memory in bytes). Each pod (container
IP hash) is one GPU; its host is `pod-<first 12 hex digits>`. Timestamps are the trace's shifted
Unix seconds, read as UTC.
"""

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import (
    ROW_NUMBER, first_reason, header_fields, quarantine_tail, read_head, short_value, split_rejected, stream_csv_as_strings,
    to_canonical,
)
from connectors._telemetry import sample_checks
from connectors.kit import Connector, ReadContext

DUTY_CYCLE = ["value", "timestamp_anon", "container_ip"]
MEMORY = ["timestamp_anon", "value", "container_ip"]


class AlibabaGpuTraceConnector(Connector):
    name = "alibaba_gpu_trace"
    kind = "telemetry"
    recognises = "Alibaba GenTD26 trace: pod_gpu_duty_cycle (value,timestamp_anon,container_ip) and pod_gpu_memory_used_bytes (timestamp_anon,value,container_ip)"

    def detect(self, path: Path, head: bytes) -> bool:
        return header_fields(head) in (DUTY_CYCLE, MEMORY)

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        is_memory = header_fields(read_head(path, 4096, tolerate_cut=True)) == MEMORY
        for frame in stream_csv_as_strings(path, ctx.source_file, on_truncated=quarantine_tail(ctx, self.name), ctx=ctx, connector=self.name):
            value = pl.col("value").cast(pl.Float64, strict=False)
            seconds = pl.col("timestamp_anon").cast(pl.Float64, strict=False)
            ts = pl.from_epoch((seconds * 1_000_000).round().cast(pl.Int64, strict=False), time_unit="us").dt.replace_time_zone("UTC")
            checks = [(value.is_null(), pl.format("value '{}' is not a number", short_value("value"))),
                      (pl.col("container_ip").is_null(), "container_ip is empty"),
                      *sample_checks(ts, None if is_memory else value, ctx.ingested_at)]
            if is_memory:
                checks.append((value < 0, "negative memory"))
            accepted = split_rejected(frame, first_reason(checks), ctx, self.name, [*DUTY_CYCLE])
            if not accepted.height:
                continue
            metric = (value / 1048576).alias("mem_used_mib") if is_memory else value.alias("util_pct")
            out = accepted.select(
                ts.alias("ts"), metric, ROW_NUMBER,
                pl.concat_str(pl.lit("pod-"), pl.col("container_ip").str.slice(0, 12)).alias("host"),
                pl.col("container_ip").alias("pod"),
                pl.lit(0, dtype=pl.Int32).alias("gpu_index"),
                pl.lit(None if is_memory else "trace_duty_cycle", dtype=pl.String).alias("util_kind"),
                pl.lit("alibaba-gentd26").alias("source"),
            )
            yield to_canonical(out, self.schema, self.name, ctx)
