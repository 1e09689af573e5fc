"""`make bench` part two: the GPU-minute rollup over 100 million samples, in bounded memory.

1,000 GPUs sampled every 10 s for 12 days (103,680,000 samples) are written into a warehouse's
lake as the ingest lays telemetry out (`raw/gpu_samples/day=<YYYY-MM-DD>/file=<sha256>/`), and
`core.gpu_samples` and `core.gpu_minutes` are built as a run's first build does
(`pipelines.warehouse.models.build_model`: a few days per statement), with DuckDB held to a memory
limit (spilling to disk beyond it). Reports rows per second, the process's peak memory, and the
floor: one query grouping the same samples to minutes.

    python -m tests.bench_rollup [--gpus 1000] [--days 12] [--memory-limit 4GB]
"""

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from models.schemas import GPU_SAMPLE, duckdb_type
from pipelines.engines.resource import SqlEngineResource
from pipelines.lake.layout import lake_of, table_root
from pipelines.settings import FinopsSettings
from pipelines.warehouse import periods
from pipelines.warehouse.connection import connect, fetch_all, prepare
from pipelines.warehouse.models import build_model

GENERATED = {
    "ts": "TIMESTAMPTZ '2026-09-01 00:00:00+00' + to_seconds(t * 10)",
    "host": "'node-' || lpad((g // 8)::VARCHAR, 3, '0')",
    "gpu_uuid": "'GPU-' || g::VARCHAR",
    "gpu_index": "(g % 8)::INTEGER",
    "gpu_model": "'NVIDIA H100 80GB HBM3'",
    # A busy day, an idle night, and GPUs out of step with one another.
    "util_pct": "CASE WHEN (t // 360 + g) % 24 < 16 THEN ((g * 7 + t * 13) % 61 + 40) ELSE (t % 3) END::DOUBLE",
    "util_kind": "'dcgm_gpu_util'",
    "mem_used_mib": "((g * 31 + t) % 80000)::DOUBLE",
    "power_w": "(100 + (t % 600))::DOUBLE",
    "source": "'bench'",
    "x_Connector": "'bench'",
    "x_SourceFile": "'bench/samples.parquet'",
    "x_SourceSha256": "'bench'",
    "x_SourceRow": "(g * 1000000 + t)::BIGINT",
    "x_IngestedAt": "TIMESTAMPTZ '2026-11-29 00:00:00+00'",
}


def select_list() -> str:
    return ",\n".join(f"({GENERATED.get(f.name, 'NULL')})::{duckdb_type(f.type)} AS \"{f.name}\"" for f in GPU_SAMPLE)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--days", type=int, default=12)
    parser.add_argument("--memory-limit", default="4GB")
    args = parser.parse_args()
    samples_per_gpu = args.days * 24 * 360
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        conn = connect(tmp / "bench.duckdb")
        conn.execute(f"SET temp_directory = '{tmp / 'spill'}'")
        prepare(conn, always_set_up=True)  # the raw views over the lake beside the warehouse
        samples_root = table_root(lake_of(tmp / "bench.duckdb"), "telemetry")
        t0 = time.perf_counter()
        conn.execute(f"COPY (SELECT *, strftime(ts, '%Y-%m-%d') AS day, 'bench' AS file FROM "
                     f"(SELECT {select_list()} FROM range({args.gpus}) AS gs(g), range({samples_per_gpu}) AS ts(t))) "
                     f"TO '{samples_root}' (FORMAT parquet, PARTITION_BY (day, file), OVERWRITE_OR_IGNORE, ROW_GROUP_SIZE 1000000)")
        t1 = time.perf_counter()
        conn.execute(f"SET memory_limit = '{args.memory_limit}'")  # for the models and the floor, not the generator
        conn.execute("INSERT INTO raw.files (path, sha256, size_bytes, connector, kind, status, rows_read, rows_loaded, ingested_at) "
                     "VALUES ('bench/samples.parquet', 'bench', 0, 'bench', 'telemetry', 'loaded', ?, ?, now())",
                     [args.gpus * samples_per_gpu] * 2)
        settings, engine = FinopsSettings(landing_dir=str(tmp)), SqlEngineResource()
        built = build_model(conn, "core.gpu_samples", settings, engine)
        t2 = time.perf_counter()
        try:
            build_model(conn, "core.gpu_minutes", settings, engine)
            minutes_error = None
        except duckdb.OutOfMemoryException as exc:  # a finding to report, not a reason to stop `make bench`
            minutes_error = f"out of memory at {args.memory_limit}: {str(exc).splitlines()[0]}"
        t3 = time.perf_counter()
        # The floor: one query grouping the same samples to GPU-minutes (mean utilization), under the
        # same memory limit, against the two models that dedupe, merge and time-weight them.
        floor = fetch_all(conn, f"""
            SELECT count(*) FROM (SELECT host, gpu_uuid, date_trunc('minute', ts) AS minute, avg(util_pct) AS util
                                  FROM read_parquet('{samples_root}/**/*.parquet') GROUP BY ALL)""")[0][0]
        t4 = time.perf_counter()
        samples = fetch_all(conn, "SELECT count(*) FROM core.gpu_samples")[0][0]
        report = {
            "samples": samples,
            "days": len(built["periods"]),
            "statements_per_model": len(periods.batches(conn, "core.gpu_minutes", built["periods"])),
            "generate_parquet_s": round(t1 - t0, 1),
            "parquet_mib": round(sum(f.stat().st_size for f in samples_root.rglob("*.parquet")) / 2**20),
            "core_gpu_samples_s": round(t2 - t1, 1),
            "floor_one_query_s": round(t4 - t3, 1),
            "floor_gpu_minutes": floor,
            "duckdb_memory_limit": args.memory_limit,
        }
        if minutes_error:
            report["core_gpu_minutes"] = minutes_error
        else:
            minutes, busy_hours = fetch_all(conn, "SELECT count(*), sum(busy_fraction * coverage) / 60 FROM core.gpu_minutes")[0]
            report.update({
                "gpu_minutes": minutes,
                "busy_gpu_hours": round(busy_hours, 1),
                "core_gpu_minutes_s": round(t3 - t2, 1),
                "rollup_samples_per_s": round(samples / (t3 - t1)),
                "rollup_vs_floor": round((t3 - t1) / (t4 - t3), 2),
            })
        report["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        conn.close()
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
