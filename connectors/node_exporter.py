"""node_exporter disk counters from a Prometheus `query_range` JSON export → write intervals.

`node_disk_written_bytes_total` and `node_disk_io_time_seconds_total` are counters; between two
consecutive points of a host and device, the difference is what was written (and how long the
disk was busy). A counter that went down was reset (a reboot): the interval counts from zero.
Intervals in which nothing was written are left out.
"""

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, to_canonical
from connectors.kit import normalise_host
from connectors.kit import Connector, ReadContext
from connectors.dcgm import _head_is_query_range, read_query_range, valid_points

WRITTEN = "node_disk_written_bytes_total"
IO_TIME = "node_disk_io_time_seconds_total"
HOST_LABELS = ("hostname", "nodename", "Hostname", "node", "instance")


class NodeExporterDiskConnector(Connector):
    name = "node_exporter_disk"
    kind = "storage"
    recognises = "Prometheus query_range JSON exports of node_disk_written_bytes_total / node_disk_io_time_seconds_total"

    def detect(self, path: Path, head: bytes) -> bool:
        return _head_is_query_range(head, '"node_disk_')

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        points = read_query_range(path, ctx.source_file)
        if points.is_empty():
            return
        points = valid_points(points, ctx, self.name)
        host = pl.coalesce([pl.col(c) for c in HOST_LABELS if c in points.columns]).str.replace(r":\d+$", "")
        device = pl.col("device") if "device" in points.columns else pl.lit(None, dtype=pl.String)
        counters = (points.filter(pl.col("ts_s").is_not_null() & pl.col("value").is_not_null()
                                  & pl.col("__name__").is_in([WRITTEN, IO_TIME]))
                    .select(normalise_host(host).alias("host"), device.alias("device"), "ts_s", "value", "__name__", ROW_NUMBER)
                    .sort("host", "device", "__name__", "ts_s"))
        deltas = counters.with_columns(
            pl.col("ts_s").shift().over("host", "device", "__name__").alias("prev_ts"),
            pl.col("value").shift().over("host", "device", "__name__").alias("prev"),
        ).filter(pl.col("prev_ts").is_not_null()).with_columns(
            # A counter that went down restarted from zero.
            pl.when(pl.col("value") >= pl.col("prev")).then(pl.col("value") - pl.col("prev")).otherwise(pl.col("value")).alias("delta"),
        )
        wide = deltas.pivot(on="__name__", index=["host", "device", "prev_ts", "ts_s"], values="delta", aggregate_function="first")
        rows = deltas.group_by("host", "device", "prev_ts", "ts_s").agg(pl.col(ROW_NUMBER).min())
        wide = wide.join(rows, on=["host", "device", "prev_ts", "ts_s"], how="left", nulls_equal=True)
        for column in (WRITTEN, IO_TIME):
            if column not in wide.columns:
                wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
        wide = wide.filter(pl.col(WRITTEN) > 0)
        if wide.is_empty():
            return
        to_ts = lambda c: pl.from_epoch((pl.col(c) * 1_000_000).round().cast(pl.Int64, strict=False), time_unit="us").dt.replace_time_zone("UTC")
        out = wide.select(
            pl.concat_str(pl.lit("disk:"), "host", pl.lit(":"), pl.col("device").fill_null("?"), pl.lit("@"),
                          pl.col("prev_ts").cast(pl.Int64, strict=False).cast(pl.String)).alias("event_id"),
            pl.lit("disk_write").alias("kind"), "host", pl.col("device").alias("resource_id"), pl.col("device").alias("path"),
            pl.col(WRITTEN).round().cast(pl.Int64, strict=False).alias("bytes"), pl.col(IO_TIME).alias("io_seconds"),
            to_ts("prev_ts").alias("started_at"), to_ts("ts_s").alias("ended_at"), ROW_NUMBER,
        )
        yield to_canonical(out, self.schema, self.name, ctx)
