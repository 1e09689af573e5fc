"""`nvidia-smi dmon` output into GPU samples.

dmon prints whitespace-aligned columns under `#` header lines, repeated now and then. With
`-o DT` each line carries its date and time (local, read in the configured zone). Without them
the start time must be in the file name (`gpu-node-07_20260714T081238.txt`); each cycle over the
GPUs is then one second later (dmon's default interval), which the note in `recognises` says.
"""

from collections.abc import Iterator
from datetime import timedelta
from itertools import islice
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, CompleteLines, first_reason, quarantine_tail, split_rejected, to_canonical
from connectors._telemetry import LocalClock, sample_checks
from connectors.kit import Connector, ConnectorError, ReadContext
from connectors.dcgm import NAME_TIME, file_time
from connectors.nvidia_smi import host_from_path

COLUMNS = {"gpu": "gpu_index", "pwr": "power_w", "gtemp": "temperature_c", "sm": "util_pct", "fb": "mem_used_mib"}
CHUNK_LINES = 100_000


def header_tokens(line: str) -> list[str]:
    return line.lstrip("#").lower().split()


class NvidiaSmiDmonConnector(Connector):
    name = "nvidia_smi_dmon"
    kind = "telemetry"
    recognises = ("nvidia-smi dmon output (-o DT for timestamps; else a start time in the file name and "
                  "1-second cycles); host from host=NAME folder or file stem")

    def detect(self, path: Path, head: bytes) -> bool:
        lines = head.decode("utf-8", errors="replace").splitlines()
        first = header_tokens(lines[0]) if lines and lines[0].startswith("#") else []
        # pmon shares the layout but is per process (a pid column): not GPU samples.
        return ("gpu" in first and "pid" not in first and ("sm" in first or "pwr" in first)
                and len(lines) > 1 and "idx" in lines[1].lower())

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        host = host_from_path(path)
        clock = LocalClock(ctx.timezone)  # the file's wall clock, read in order (the autumn hour twice)
        # Complete lines only: a last line cut short (or a gzip stream that ends early) is quarantined
        # after the whole lines before it loaded.
        stream = CompleteLines(path)
        lines = (text.decode("utf-8", errors="replace") for _, text in stream.numbered_lines())
        try:
            names = header_tokens(next(lines, ""))
            has_time = names[:2] == ["date", "time"]
            if not has_time and not NAME_TIME.search(path.name):
                raise ConnectorError(ctx.source_file, "dmon output without timestamps: record it with "
                                     "`nvidia-smi dmon -o DT`, or put the start time in the file name "
                                     "(gpu-node-07_20260714T081238.txt)", line=1)
            start = None if has_time else file_time(path, ctx.timezone)
            line_no, cycle, last_gpu = 1, -1, None
            while True:
                chunk = list(islice(lines, CHUNK_LINES))
                if not chunk:
                    break
                rows = []
                for line in chunk:
                    line_no += 1
                    if line.startswith("#") or not line.strip():
                        continue  # repeated headers and blank lines are layout, not data
                    values = line.split()
                    record = dict(zip(names, values))
                    record[ROW_NUMBER] = line_no
                    record["__raw"] = line.rstrip("\n")
                    if len(values) != len(names):
                        ctx.quarantine(self.name, line_no, f"expected {len(names)} columns, got {len(values)}", record["__raw"])
                        continue
                    if not has_time:
                        gpu = int(record["gpu"]) if record.get("gpu", "").isdigit() else -1
                        if last_gpu is None or gpu <= last_gpu:
                            cycle += 1
                        last_gpu = gpu
                        record["__ts"] = start + timedelta(seconds=cycle)
                    rows.append(record)
                if rows:
                    batch = self._to_samples(pl.DataFrame(rows, infer_schema_length=None), host, has_time, ctx, clock)
                    if batch is not None:
                        yield batch
        finally:
            stream.close()
        if tail := stream.truncated_tail():
            quarantine_tail(ctx, self.name)(tail)

    def _to_samples(self, frame: pl.DataFrame, host: str, has_time: bool, ctx: ReadContext, clock: LocalClock):
        number = {c: pl.col(c).replace("-", None).cast(pl.Float64, strict=False) for c in COLUMNS if c in frame.columns}
        if has_time:
            local = frame.select(pl.concat_str("date", "time", separator=" ")
                                 .str.to_datetime("%Y%m%d %H:%M:%S", strict=False, time_unit="us").alias("local"))
            ts = pl.lit(clock.to_utc(local, "local"))
        else:
            ts = pl.col("__ts").dt.replace_time_zone("UTC") if frame.schema["__ts"].time_zone is None else pl.col("__ts")
        util = number.get("sm", pl.lit(None, dtype=pl.Float64))
        frame = frame.with_columns(ts.dt.cast_time_unit("us").alias("ts"))
        gpu = number.get("gpu", pl.lit(None, dtype=pl.Float64))
        checks = [*sample_checks(pl.col("ts"), util, ctx.ingested_at),
                  (gpu.is_not_null() & gpu.cast(pl.Int32, strict=False).is_null(), "gpu index is not a whole number")]
        accepted = split_rejected(frame, first_reason(checks), ctx, self.name, ["__raw"])
        if not accepted.height:
            return None
        out = accepted.select(
            "ts", ROW_NUMBER, pl.lit(host).alias("host"),
            *(expr.alias(COLUMNS[c]) for c, expr in number.items()),
            pl.when(util.is_not_null()).then(pl.lit("nvidia_smi_dmon_sm")).alias("util_kind"),
            pl.lit("nvidia-smi dmon").alias("source"),
        ).with_columns(pl.col("gpu_index").cast(pl.Int32))
        return to_canonical(out, self.schema, self.name, ctx)
