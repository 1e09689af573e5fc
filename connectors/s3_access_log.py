"""Object-store access logs in the Amazon S3 server access log format → storage events.

Each request is one event: GETs of objects (`REST.GET.OBJECT`) are `object_get`, PUTs are
`object_put`, the rest `object_other`, with bytes sent, the requester and the remote IP, so
repeated downloads of the same dataset can be counted and told apart from internal traffic.
The format is space-separated with bracketed and quoted fields; a regular expression reads it
(no maintained parser for this format exists on PyPI that is worth a dependency).
"""

import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import polars as pl
import pyarrow as pa

from connectors.kit import ROW_NUMBER, first_reason, split_rejected, to_canonical
from connectors.kit import Connector, ReadContext

FIELDS = ("bucket_owner", "bucket", "time", "remote_ip", "requester", "request_id", "operation", "key",
          "request_uri", "http_status", "error_code", "bytes_sent", "object_size", "total_time_ms",
          "turnaround_time_ms", "referrer", "user_agent")
LINE = (r'^(\S+) (\S+) \[([^\]]+)\] (\S+) (\S+) (\S+) (\S+) (\S+) "([^"]*)" (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)'
        r' "([^"]*)" "([^"]*)"')
CHUNK_LINES = 100_000


def _dash_to_null(column: str) -> pl.Expr:
    return pl.when(pl.col(column) == "-").then(None).otherwise(pl.col(column))


class S3AccessLogConnector(Connector):
    name = "s3_access_log"
    kind = "storage"
    recognises = "Amazon S3 server access logs (bucket owner, bucket, [time], remote IP, requester, operation, key, …)"

    def detect(self, path: Path, head: bytes) -> bool:
        first = head.decode("utf-8", errors="replace").split("\n", 1)[0]
        return pl.Series([first]).str.contains(LINE + r".*REST\.|" + LINE).item() and " REST." in first

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        # Lines end at "\n" only: a "\r" inside a field is data, not a line break (CRLF endings are stripped).
        with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
            first_number = 1
            while chunk := list(islice(fh, CHUNK_LINES)):
                lines = pl.DataFrame({"line": [l.rstrip("\r\n") for l in chunk]}).with_columns(
                    pl.int_range(first_number, first_number + len(chunk), dtype=pl.Int64).alias(ROW_NUMBER))
                first_number += len(chunk)
                lines = lines.filter(pl.col("line").str.strip_chars() != "")
                yield from self._emit(lines, ctx)

    def _emit(self, lines: pl.DataFrame, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        parsed = lines.with_columns(pl.col("line").str.extract_groups(LINE).struct.rename_fields(list(FIELDS)).alias("f")).unnest("f")
        received = pl.col("time").str.to_datetime("%d/%b/%Y:%H:%M:%S %z", strict=False, time_unit="us").dt.convert_time_zone("UTC")
        sent = _dash_to_null("bytes_sent").cast(pl.Int64, strict=False)
        reason = first_reason([
            (pl.col("bucket").is_null(), "not an S3 access log line"),
            (received.is_null(), pl.format("time '{}' is not [dd/Mon/yyyy:HH:MM:SS +zone]", pl.col("time").fill_null(""))),
            (pl.col("bytes_sent").is_not_null() & (pl.col("bytes_sent") != "-") & sent.is_null(), "bytes_sent is not a number"),
        ])
        accepted = split_rejected(parsed, reason, ctx, self.name, ["line"])
        if not accepted.height:
            return
        total_ms = _dash_to_null("total_time_ms").cast(pl.Int64, strict=False).fill_null(0)
        details = pl.struct(
            pl.col("operation"), pl.col("http_status"), _dash_to_null("error_code").alias("error_code"),
            _dash_to_null("object_size").cast(pl.Int64, strict=False).alias("object_size"),
            _dash_to_null("user_agent").alias("user_agent"),
        ).struct.json_encode()
        kind = (pl.when(pl.col("operation") == "REST.GET.OBJECT").then(pl.lit("object_get"))
                .when(pl.col("operation") == "REST.PUT.OBJECT").then(pl.lit("object_put"))
                .otherwise(pl.lit("object_other")))
        out = accepted.select(
            pl.concat_str(pl.lit("s3:"), "request_id").alias("event_id"), kind.alias("kind"),
            pl.col("bucket").alias("resource_id"), pl.col("key").alias("path"), sent.alias("bytes"),
            received.alias("started_at"), (received + pl.duration(milliseconds=total_ms)).alias("ended_at"),
            _dash_to_null("remote_ip").alias("remote_ip"), _dash_to_null("requester").alias("requester"),
            details.alias("details"), ROW_NUMBER,
        )
        yield to_canonical(out, self.schema, self.name, ctx)
