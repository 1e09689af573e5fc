"""nvidia-smi `--query-gpu=... --format=csv` output into GPU samples.

nvidia-smi writes units into both header and values (`utilization.gpu [%]`, `81559 MiB`), `[N/A]`
or `[Not Supported]` where a field does not apply, and local wall-clock timestamps. It names no
host, so the host is a `host=NAME` folder in the path, else the file name's stem.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import (
    ROW_NUMBER,
    first_reason,
    header_fields,
    quarantine_tail,
    short_value,
    split_rejected,
    stream_csv_as_strings,
    to_canonical,
)
from connectors._telemetry import LocalClock, normalise_host_value, sample_checks
from connectors.kit import Connector, ConnectorError, ReadContext

# nvidia-smi query field → canonical GPU-sample column.
FIELD_MAP = {
    "timestamp": "ts",
    "index": "gpu_index",
    "uuid": "gpu_uuid",
    "name": "gpu_model",
    "utilization.gpu": "util_pct",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "power.draw": "power_w",
    "power.draw.average": "power_w",
    "temperature.gpu": "temperature_c",
}
NUMERIC = ("util_pct", "mem_used_mib", "mem_total_mib", "power_w", "temperature_c")
# Values nvidia-smi prints instead of a number; a missing metric is NULL, never zero.
NOT_A_VALUE = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|GPU requires reset|Insufficient Permissions|GPU is lost)\]?$", re.I)
TIMESTAMP_FORMATS = ("%Y/%m/%d %H:%M:%S%.f", "%Y/%m/%d %H:%M:%S")
UNIT_SUFFIX = r"\s*(%|MiB|GiB|W|MHz|C)?\s*$"


def field_name(header: str) -> str:
    """`utilization.gpu [%]` → `utilization.gpu`."""
    return re.sub(r"\s*\[[^\]]*\]\s*$", "", header.strip())


# A capture time or day appended to a file name (`gpu-node-07_20260714T081238.txt`, a daily rotated
# `gpu-node-07_2026-07-14.csv`) is not part of the host. A day alone must be a real calendar date after
# a separator, so a host numbered like one (`rack-12345678`) keeps its number.
TIME_SUFFIX = re.compile(r"[_\-.]?\d{8}T?\d{6}Z?$|[_\-.]?\d{4}-\d{2}-\d{2}T\d{2}[:\-]?\d{2}[:\-]?\d{2}Z?$"
                         r"|[_\-.](?:19|20)\d{2}(?P<sep>-?)(?:0[1-9]|1[0-2])(?P=sep)(?:0[1-9]|[12]\d|3[01])$")


def host_from_path(path: Path) -> str:
    """A `host=NAME` folder in the path, else the file's stem, normalised like every host."""
    for part in reversed(path.parent.parts):
        if part.startswith("host="):
            return normalise_host_value(part.removeprefix("host="))
    return normalise_host_value(TIME_SUFFIX.sub("", path.stem) or path.stem)


class NvidiaSmiConnector(Connector):
    name = "nvidia_smi"
    kind = "telemetry"
    recognises = "nvidia-smi --query-gpu=timestamp,index|uuid,... --format=csv output (host from host=NAME folder or file stem)"

    def detect(self, path: Path, head: bytes) -> bool:
        fields = {field_name(h) for h in header_fields(head)}
        return "timestamp" in fields and bool(fields & {"index", "uuid"}) and bool(
            fields & {"utilization.gpu", "memory.used", "power.draw", "power.draw.average"}
        )

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        host = host_from_path(path)
        clock = LocalClock(ctx.timezone)  # the file's wall clock, read in order (the autumn hour twice)
        # A file cut mid-row (a copy still being written, a download that stopped) keeps its whole rows.
        for frame in stream_csv_as_strings(path, ctx.source_file, on_truncated=quarantine_tail(ctx, self.name), ctx=ctx, connector=self.name):
            frame = frame.rename({c: field_name(c) for c in frame.columns if c != ROW_NUMBER})
            source_columns = [c for c in frame.columns if c != ROW_NUMBER]
            if "timestamp" not in frame.columns:
                raise ConnectorError(ctx.source_file, "header has no timestamp column", line=1)
            present = {src: dst for src, dst in FIELD_MAP.items() if src in frame.columns}
            frame = frame.with_columns(pl.col(source_columns).str.strip_chars())
            frame = frame.with_columns(
                pl.when(pl.col(c).str.contains("(?i)" + NOT_A_VALUE.pattern)).then(None).otherwise(pl.col(c)).alias(c)
                for c in source_columns
            )
            frame = frame.with_columns(pl.coalesce(
                pl.col("timestamp").str.to_datetime(f, strict=False, time_unit="us") for f in TIMESTAMP_FORMATS).alias("__local"))
            frame = frame.with_columns(clock.to_utc(frame, "__local").alias("__utc"))
            parsed = {"ts": pl.col("__utc")}
            for src, dst in present.items():
                if dst in NUMERIC:
                    parsed[dst] = pl.col(src).str.replace(UNIT_SUFFIX, "").cast(pl.Float64, strict=False)
                elif dst == "gpu_index":
                    parsed[dst] = pl.col(src).cast(pl.Int32, strict=False)
                elif dst != "ts":
                    parsed[dst] = pl.col(src)
            # Parsed once into working columns: the checks and the output read them, not the parse again.
            frame = frame.with_columns(expr.alias(f"__{name}") for name, expr in parsed.items())
            parsed = {name: pl.col(f"__{name}") for name in parsed}
            util = parsed.get("util_pct", pl.lit(None, dtype=pl.Float64))
            reason = first_reason([
                (pl.col("timestamp") == "timestamp", "repeated header line"),
                (parsed["ts"].is_null(), pl.format("timestamp is not nvidia-smi's format: '{}'", short_value("timestamp"))),
                *sample_checks(parsed["ts"], util, ctx.ingested_at),
                *(
                    (pl.col(src).is_not_null() & parsed[dst].is_null(), f"{src} is not a number")
                    for src, dst in present.items() if dst in NUMERIC
                ),
            ])
            accepted = split_rejected(frame, reason, ctx, self.name, source_columns)
            if not accepted.height:
                continue
            out = accepted.select(
                *(expr.alias(name) for name, expr in parsed.items()),
                pl.lit(host).alias("host"),
                pl.when(util.is_not_null()).then(pl.lit("nvidia_smi_utilization_gpu")).alias("util_kind"),
                pl.lit("nvidia-smi").alias("source"),
                pl.col(ROW_NUMBER),
            )
            yield to_canonical(out, self.schema, self.name, ctx)
