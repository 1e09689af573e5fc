"""`make bench` part: a new day of telemetry after a month of history costs what the day costs alone.

A fleet of `--gpus` GPUs (8 a host) sampled every `--interval` seconds for `--days` days, with a
job a day on every host (pre-training, fine-tuning or inference, by host) writing a checkpoint
every 2 hours, is written into a warehouse's lake as the ingest lays it out, and every SQL model is
built as a run's models step builds it (`pipelines.warehouse.models.build_model`, in dependency
order). Then one more day (its samples, jobs and checkpoints, a new file of each) is added and the models built again: that is the new
day's cost after the history. The same day alone, into an empty warehouse, is what the day costs
by itself. Reports each model's seconds for both, and their ratio: a model whose time grows with the
history stands out. No Dagster and no ingest here (bench_lake measures whole runs): the models alone.

    python -m tests.bench_history [--gpus 200] [--days 30] [--interval 60]
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from models.schemas import STORAGE_EVENT, WORKLOAD, duckdb_type
from pipelines.engines.resource import SqlEngineResource
from pipelines.lake.layout import lake_of, table_root
from pipelines.settings import FinopsSettings
from pipelines.warehouse.connection import connect, fetch_all, prepare
from pipelines.warehouse.models import build_model, sql_model_order
from pipelines.warehouse.publish import staging_path
from tests import bench_rollup

START = "TIMESTAMPTZ '2026-09-01 00:00:00+00'"

# One job a day on every host, 00:00-16:00 UTC, holding its 8 GPUs; the phase by host.
WORKLOADS = {
    "workload_id": "'job-' || h::VARCHAR || '-' || d::VARCHAR",
    "phase": "['pretraining', 'finetuning', 'inference'][h % 3 + 1]",
    "host": "'node-' || lpad(h::VARCHAR, 3, '0')",
    "gpu_count": "8",
    "started_at": f"{START} + to_days(d)",
    "ended_at": f"{START} + to_days(d) + INTERVAL 16 HOUR",
    "source": "'bench'",
    "x_Connector": "'bench'",
    "x_SourceRow": "(d * 100000 + h)::BIGINT",
    "x_IngestedAt": "TIMESTAMPTZ '2026-11-29 00:00:00+00'",
}

# Every 2 hours of the job, each host writes a 10-minute checkpoint of 200 GB (findings.slow_disk_idle).
CHECKPOINTS = {
    "event_id": "'ckpt-' || h::VARCHAR || '-' || d::VARCHAR || '-' || c::VARCHAR",
    "kind": "'checkpoint'",
    "host": "'node-' || lpad(h::VARCHAR, 3, '0')",
    "workload_id": "'job-' || h::VARCHAR || '-' || d::VARCHAR",
    "bytes": "200000000000",
    "started_at": f"{START} + to_days(d) + to_hours(c * 2 + 1)",
    "ended_at": f"{START} + to_days(d) + to_hours(c * 2 + 1) + INTERVAL 10 MINUTE",
    "storage_class": "'cloud_disk'",
    "path": "'/ckpt'",
    "x_Connector": "'bench'",
    "x_SourceRow": "(d * 100000 + h * 10 + c)::BIGINT",
    "x_IngestedAt": "TIMESTAMPTZ '2026-11-29 00:00:00+00'",
}


class Fleet:
    """A warehouse whose lake receives days of generated telemetry and jobs, a file version each."""

    def __init__(self, folder: Path, gpus: int, interval: int):
        self.gpus, self.interval = gpus, interval
        self.warehouse = folder / "bench.duckdb"
        self.conn = connect(self.warehouse)
        self.conn.execute(f"SET temp_directory = '{folder / 'spill'}'")
        prepare(self.conn, always_set_up=True)
        self.settings, self.engine = FinopsSettings(landing_dir=str(folder)), SqlEngineResource()

    def _register(self, tag: str, kind: str, rows: int) -> None:
        self.conn.execute("INSERT INTO raw.files (path, sha256, size_bytes, connector, kind, status, rows_read, rows_loaded, "
                          "ingested_at) VALUES (?, ?, 0, 'bench', ?, 'loaded', ?, ?, now())",
                          [f"bench/{tag}", tag, kind, rows, rows])

    def add_days(self, first_day: int, days: int, tag: str) -> int:
        """Samples and jobs of days [first_day, first_day + days), as one file version of each."""
        per_day = 86400 // self.interval
        lake = lake_of(self.warehouse)
        bench_rollup.GENERATED.update({
            "ts": f"{START} + to_seconds(t * {self.interval})",
            # Busy by day, idle at night, GPUs out of step with one another.
            "util_pct": f"CASE WHEN (t // {3600 // self.interval} + g) % 24 < 16 THEN ((g * 7 + t * 13) % 61 + 40) ELSE (t % 3) END::DOUBLE",
            "x_SourceFile": f"'bench/{tag}-samples'", "x_SourceSha256": f"'{tag}-samples'",
        })
        self.conn.execute(
            f"COPY (SELECT *, strftime(ts, '%Y-%m-%d') AS day, '{tag}-samples' AS file FROM "
            f"(SELECT {bench_rollup.select_list()} FROM range({self.gpus}) AS gs(g), "
            f"range({first_day * per_day}, {(first_day + days) * per_day}) AS ts(t))) "
            f"TO '{table_root(lake, 'telemetry')}' (FORMAT parquet, PARTITION_BY (day, file), OVERWRITE_OR_IGNORE)")
        self._register(f"{tag}-samples", "telemetry", self.gpus * days * per_day)
        jobs = {**WORKLOADS, "x_SourceFile": f"'bench/{tag}-jobs'", "x_SourceSha256": f"'{tag}-jobs'"}
        columns = ", ".join(f"({jobs.get(f.name, 'NULL')})::{duckdb_type(f.type)} AS \"{f.name}\"" for f in WORKLOAD)
        hosts = max(1, self.gpus // 8)
        folder = table_root(lake, "workload") / f"file={tag}-jobs"
        folder.mkdir(parents=True, exist_ok=True)
        self.conn.execute(f"COPY (SELECT {columns} FROM range({hosts}) AS hs(h), range({first_day}, {first_day + days}) AS ds(d)) "
                          f"TO '{folder / 'data_0.parquet'}' (FORMAT parquet)")
        self._register(f"{tag}-jobs", "workload", hosts * days)
        writes = {**CHECKPOINTS, "x_SourceFile": f"'bench/{tag}-checkpoints'", "x_SourceSha256": f"'{tag}-checkpoints'"}
        columns = ", ".join(f"({writes.get(f.name, 'NULL')})::{duckdb_type(f.type)} AS \"{f.name}\"" for f in STORAGE_EVENT)
        folder = table_root(lake, "storage") / f"file={tag}-checkpoints"
        folder.mkdir(parents=True, exist_ok=True)
        self.conn.execute(f"COPY (SELECT {columns} FROM range({hosts}) AS hs(h), range({first_day}, {first_day + days}) AS ds(d), "
                          f"range(8) AS cs(c)) TO '{folder / 'data_0.parquet'}' (FORMAT parquet)")
        self._register(f"{tag}-checkpoints", "storage", hosts * days * 8)
        return self.gpus * days * per_day

    def build(self) -> dict[str, float]:
        """Every SQL model as a run builds it: the seconds of each that built something."""
        prepare(self.conn, always_set_up=True)  # the raw views over the versions registered since
        seconds = {}
        for table in sql_model_order():
            started = time.perf_counter()
            built = build_model(self.conn, table, self.settings, self.engine)
            if built.get("built") not in ("nothing changed", "unchanged: its inputs are as they were"):
                seconds[table] = round(time.perf_counter() - started, 2)
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--interval", type=int, default=60, help="seconds between samples")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as history_dir, tempfile.TemporaryDirectory() as alone_dir:
        history = Fleet(Path(history_dir), args.gpus, args.interval)
        samples = history.add_days(0, args.days, "month")
        started = time.perf_counter()
        history.build()
        first_build = time.perf_counter() - started
        minutes = fetch_all(history.conn, "SELECT count(*) FROM core.gpu_minutes")[0][0]
        # Every later run copies the warehouse file to stage its work (pipelines/warehouse/publish.py),
        # so what the file holds of the history is paid again by each run: reported, to watch it grow.
        history.conn.execute("CHECKPOINT")
        warehouse, staging = history.warehouse, staging_path(history.warehouse)
        started = time.perf_counter()
        shutil.copyfile(warehouse, staging)
        staging_copy = time.perf_counter() - started
        warehouse_mib = warehouse.stat().st_size / 2**20
        staging.unlink()
        history.add_days(args.days, 1, "next-day")
        after_history = history.build()

        alone = Fleet(Path(alone_dir), args.gpus, args.interval)
        day_samples = alone.add_days(args.days, 1, "next-day")
        alone.build()  # the reference tables too (FX rates, the catalog): what any first run builds
        alone_again = {}
        for model in after_history:  # again, the models the new day rebuilt after the history, in order
            # Forgotten as built, so the model is built again: the day's cost with nothing before it.
            alone.conn.execute("DELETE FROM core.period_builds WHERE model = ?", [model])
            started = time.perf_counter()
            build_model(alone.conn, model, alone.settings, alone.engine)
            alone_again[model] = round(time.perf_counter() - started, 2)
        history.conn.close()
        alone.conn.close()
    total_history, total_alone = sum(after_history.values()), sum(alone_again.values())
    report = {
        "history": {"gpus": args.gpus, "days": args.days, "interval_s": args.interval, "samples": samples,
                    "gpu_minutes": minutes, "first_build_s": round(first_build, 1),
                    "warehouse_file_mib": round(warehouse_mib), "staging_copy_s": round(staging_copy, 2)},
        "new_day_samples": day_samples,
        "new_day_after_history_s": round(total_history, 2),
        "same_day_alone_s": round(total_alone, 2),
        "after_history_vs_alone": round(total_history / total_alone, 2) if total_alone else None,
        "models": {m: {"after_history_s": s, "alone_s": alone_again.get(m)} for m, s in after_history.items()},
    }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
