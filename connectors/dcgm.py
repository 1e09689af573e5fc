"""DCGM telemetry: dcgm-exporter Prometheus text scrapes and Prometheus `query_range` JSON exports.

Both arrive as one metric per series. Each chunk is pivoted to one row per GPU (or MIG instance)
and instant; rows the chunking split are merged again in `core.gpu_samples`. The busy signal is
`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, else `DCGM_FI_PROF_SM_ACTIVE`, else `DCGM_FI_DEV_GPU_UTIL`, and
`util_kind` records which. DCGM's blank sentinels become NULL. Prometheus text is parsed by
prometheus_client's parser; lines it would choke on are quarantined first, and a last line cut short
(the file or its gzip stream ends mid-line) is quarantined while the lines before it load.
"""

import io
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pyarrow as pa
from prometheus_client.parser import text_fd_to_metric_families

from connectors.kit import ROW_NUMBER, CompleteLines, first_reason, quarantine_tail, split_rejected, to_canonical
from connectors._telemetry import normalise_host, normalise_host_value, sample_checks, without_dcgm_blanks
from connectors.kit import Connector, ConnectorError, ReadContext, read_whole
from connectors.nvidia_smi import host_from_path

# metric → (column, factor to the column's unit)
METRICS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gr_engine_active", 100.0),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 1.0),
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", 1.0),
    "DCGM_FI_DEV_FB_TOTAL": ("mem_total_mib", 1.0),
    "DCGM_FI_DEV_FB_FREE": ("fb_free_mib", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1.0),
}
VALUE_COLUMNS = sorted({c for c, _ in METRICS.values()})
# Label spellings differ across dcgm-exporter versions and Prometheus relabelling. On Kubernetes,
# dcgm-exporter's own Hostname is its pod's name unless the pod is given NODE_NAME (releases before
# 3.1, and DaemonSets without it): a node label Prometheus adds from service discovery names the
# node itself, so it comes first.
LABELS = {
    "host": ("kubernetes_node", "node", "Hostname", "hostname", "host"),
    "gpu_index": ("gpu", "GPU"),
    "gpu_uuid": ("UUID", "uuid"),
    "gpu_model": ("modelName", "DCGM_FI_DEV_NAME"),
    "pod": ("pod", "pod_name", "exported_pod"),
    "namespace": ("namespace", "pod_namespace", "exported_namespace"),
    "container": ("container", "container_name", "exported_container"),
    "mig_instance": ("GPU_I_ID",),
    "mig_profile": ("GPU_I_PROFILE",),
    "instance": ("instance",),
}
IDENTITY = ["host", "gpu_index", "gpu_uuid", "gpu_model", "pod", "namespace", "container", "mig_instance", "mig_profile"]
CHUNK_SAMPLES = 200_000
SAMPLE_LINE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{.*\})?\s+\S+(\s+-?\d+)?\s*$")
NAME_TIME = re.compile(r"(\d{4})-?(\d{2})-?(\d{2})[T_ -]?(\d{2}):?(\d{2}):?(\d{2})(Z?)")


def identity_columns(labels: dict[str, str]) -> dict[str, str | None]:
    row = {}
    for column, spellings in LABELS.items():
        row[column] = next((labels[s] for s in spellings if labels.get(s) not in (None, "")), None)
    return row


def file_time(path: Path, timezone: str) -> datetime:
    """When a scrape without sample timestamps was taken: a time in the file name, else its mtime."""
    m = NAME_TIME.search(path.name)
    if m:
        y, mo, d, h, mi, s, z = m.groups()
        naive = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s))
        if z:
            return naive.replace(tzinfo=UTC)
        from zoneinfo import ZoneInfo
        return naive.replace(tzinfo=ZoneInfo(timezone)).astimezone(UTC)
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def long_to_samples(long: pl.DataFrame, path: Path, ctx: ReadContext, connector: str) -> pl.DataFrame:
    """Long rows (metric, value, ts_s, identity labels, row) → one row per GPU and instant."""
    long = long.with_columns(
        pl.col("metric").replace_strict({m: c for m, (c, _) in METRICS.items()}, default=None).alias("column"),
        (without_dcgm_blanks(pl.col("value")) * pl.col("metric").replace_strict(
            {m: f for m, (_, f) in METRICS.items()}, default=None, return_dtype=pl.Float64)).alias("value"),
    ).filter(pl.col("column").is_not_null())
    if long.is_empty():
        return long
    fallback_host = host_from_path(path)
    long = long.with_columns(
        pl.coalesce(pl.col("host"), pl.col("instance").str.replace(r":\d+$", ""), pl.lit(fallback_host)).alias("host"),
    )
    keys = [*IDENTITY, "ts_s"]
    wide = long.pivot(on="column", index=keys, values="value", aggregate_function="first")
    rows = long.group_by(keys).agg(pl.col(ROW_NUMBER).min())
    wide = wide.join(rows, on=keys, how="left", nulls_equal=True)
    for column in VALUE_COLUMNS:
        if column not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(column))
    busy = pl.coalesce("gr_engine_active", pl.col("sm_active") * 100, "gpu_util")
    kind = (pl.when(pl.col("gr_engine_active").is_not_null()).then(pl.lit("dcgm_gr_engine_active"))
            .when(pl.col("sm_active").is_not_null()).then(pl.lit("dcgm_sm_active"))
            .when(pl.col("gpu_util").is_not_null()).then(pl.lit("dcgm_gpu_util")))
    ts = pl.from_epoch((pl.col("ts_s") * 1_000_000).round().cast(pl.Int64, strict=False), time_unit="us").dt.replace_time_zone("UTC")
    wide = wide.with_columns(
        ts.alias("ts"), busy.alias("util_pct"), kind.alias("util_kind"),
        normalise_host(pl.col("host")).alias("host"),
        pl.col("gpu_index").cast(pl.Int32, strict=False),
        pl.coalesce("mem_total_mib", pl.col("mem_used_mib") + pl.col("fb_free_mib")).alias("mem_total_mib"),
        pl.lit("dcgm").alias("source"),
    )
    reason = first_reason(sample_checks(pl.col("ts"), pl.col("util_pct"), ctx.ingested_at))
    return split_rejected(wide, reason, ctx, connector, [*keys, *VALUE_COLUMNS])


class DcgmScrapeConnector(Connector):
    name = "dcgm_exporter"
    kind = "telemetry"
    recognises = ("dcgm-exporter Prometheus text scrapes (DCGM_FI_* metrics); one scrape or many with sample "
                  "timestamps; without timestamps the time comes from the file name or its mtime")

    def detect(self, path: Path, head: bytes) -> bool:
        text = head.decode("utf-8", errors="replace")
        return bool(re.search(r"^(# (TYPE|HELP) )?DCGM_FI_\w+", text, re.M)) and not text.lstrip().startswith("{")

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        default_ts = file_time(path, ctx.timezone).timestamp()
        buffer: list[dict] = []
        ordinal = 0
        # Whole lines only: a last line cut short (or a gzip stream that ends early) is quarantined
        # once the lines before it are parsed. `at` is the line the parser last saw, for errors.
        stream = CompleteLines(path)
        at = [0]
        try:
            for family in text_fd_to_metric_families(self._complete_lines(stream.numbered_lines(), ctx, at)):
                for sample in family.samples:
                    ordinal += 1
                    # The parser names a counter's samples `<family>_total`; DCGM's own name is the family's.
                    metric = family.name if sample.name in (family.name, f"{family.name}_total") else sample.name
                    if metric not in METRICS:
                        continue
                    buffer.append({
                        "metric": metric, "value": float(sample.value),
                        "ts_s": sample.timestamp if sample.timestamp is not None else default_ts,
                        **identity_columns(sample.labels), ROW_NUMBER: ordinal,
                    })
                if len(buffer) >= CHUNK_SAMPLES:
                    yield from self._emit(buffer, path, ctx)
                    buffer = []
        except UnicodeDecodeError as exc:
            raise ConnectorError(ctx.source_file, f"not UTF-8 text (byte {exc.start + 1} of the line)", line=at[0]) from exc
        except (ValueError, OverflowError) as exc:
            # The parser's message quotes the line; name where it is instead.
            raise ConnectorError(ctx.source_file, "not Prometheus text format", line=at[0]) from exc
        finally:
            stream.close()
        yield from self._emit(buffer, path, ctx)
        if tail := stream.truncated_tail():
            quarantine_tail(ctx, self.name, unit="line")(tail)

    def _complete_lines(self, lines: Iterable[tuple[int, bytes]], ctx: ReadContext, at: list[int]) -> Iterator[str]:
        """Pass the parser only well-formed lines; quarantine the rest with their number."""
        for number, raw in lines:
            at[0] = number
            line = raw.decode("utf-8")
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                yield line
            elif not SAMPLE_LINE.match(stripped):
                ctx.quarantine(self.name, number, "not a Prometheus sample line", line)
            else:
                yield line if line.endswith("\n") else line + "\n"

    def _emit(self, buffer: list[dict], path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        if not buffer:
            return
        long = pl.DataFrame(buffer, schema={"metric": pl.String, "value": pl.Float64, "ts_s": pl.Float64,
                                            **{c: pl.String for c in LABELS}, ROW_NUMBER: pl.Int64})
        samples = long_to_samples(long, path, ctx, self.name)
        if samples.height:
            yield to_canonical(samples, self.schema, self.name, ctx)


def read_query_range(path: Path, source_file: str) -> pl.DataFrame:
    """A Prometheus `query_range` JSON export → one row per series point: labels, ts_s, value."""
    try:
        document = pl.read_json(io.BytesIO(read_whole(path, source_file)), infer_schema_length=None)
    except Exception as exc:  # polars raises several types for broken JSON
        raise ConnectorError(source_file, f"not a readable Prometheus query_range JSON export: {exc}") from exc
    if "data" not in document.columns:
        raise ConnectorError(source_file, "JSON has no 'data' member")
    try:  # a member of the wrong JSON type (values not [time, value] pairs, a string for a list)
        series = document.select(pl.col("data").struct.field("result")).explode("result").unnest("result")
        if series.is_empty() or "values" not in series.columns:
            return pl.DataFrame()
        series = series.with_row_index("series").unnest("metric")
        value = pl.col("values").list.get(1).cast(pl.Float64, strict=False)
        points = series.explode("values").drop_nulls("values").with_columns(
            pl.col("values").list.get(0).cast(pl.Float64, strict=False).alias("ts_s"),
            # Prometheus writes NaN (and ±Inf) for a value it does not have: missing, never a number.
            pl.when(value.is_finite()).then(value).alias("value"),
            (value.is_null() & pl.col("values").list.get(1).is_not_null()).alias("__not_a_number"),
        ).drop("values")
        return points.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias(ROW_NUMBER))
    except pl.exceptions.PolarsError as exc:
        raise ConnectorError(source_file, f"not a Prometheus query_range export of the usual shape: {exc}") from exc


def valid_points(points: pl.DataFrame, ctx: ReadContext, connector: str) -> pl.DataFrame:
    """Quarantine points whose time or value is not a number; keep the rest (NaN kept as missing)."""
    bad = pl.col("ts_s").is_null() | pl.col("__not_a_number")
    for row in points.filter(bad).iter_rows(named=True):
        ctx.quarantine(connector, row[ROW_NUMBER], "point is not [unix time, number]", row)
    return points.filter(~bad).drop("__not_a_number")


def _head_is_query_range(head: bytes, metric_prefix: str) -> bool:
    text = head.decode("utf-8", errors="replace").lstrip()
    return text.startswith("{") and '"resultType"' in text and metric_prefix in text


class PrometheusDcgmConnector(Connector):
    name = "prometheus_dcgm"
    kind = "telemetry"
    recognises = "Prometheus query_range JSON exports of DCGM_FI_* metrics"

    def detect(self, path: Path, head: bytes) -> bool:
        return _head_is_query_range(head, '"DCGM_FI_')

    def read(self, path: Path, ctx: ReadContext) -> Iterator[pa.RecordBatch]:
        points = read_query_range(path, ctx.source_file)
        if points.is_empty():
            return
        points = valid_points(points, ctx, self.name)
        labels = {c: pl.coalesce([pl.col(s) for s in spellings if s in points.columns] or [pl.lit(None, dtype=pl.String)])
                  for c, spellings in LABELS.items()}
        long = points.select(
            pl.col("__name__").alias("metric"), "value", "ts_s", *(e.alias(c) for c, e in labels.items()), ROW_NUMBER,
        )
        for chunk in long.iter_slices(CHUNK_SAMPLES * 5):
            samples = long_to_samples(chunk, path, ctx, self.name)
            if samples.height:
                yield to_canonical(samples, self.schema, self.name, ctx)
