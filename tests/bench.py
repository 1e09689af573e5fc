"""`make bench`: time the demo graph stage by stage on this machine and report rates and memory.

Figures are ratios and rates measured in one run (machines here are shared and noisy), not
pass/fail thresholds.
"""

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from dagster import DagsterInstance

from pipelines.demo.scenario import TELEMETRY_TZ, write_scenario
from pipelines.ingest.landing import ingest_landing
from pipelines.orchestration.runner import run_graph
from pipelines.settings import FinopsSettings
from pipelines.warehouse.connection import connect, fetch_all


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        truths = write_scenario(out)
        t1 = time.perf_counter()
        conn = connect(out / "ingest_only.duckdb")
        summary = ingest_landing(conn, out / "landing", timezone=TELEMETRY_TZ)
        conn.close()
        t2 = time.perf_counter()
        with DagsterInstance.ephemeral() as instance:
            outcome = run_graph(FinopsSettings(landing_dir=str(out / "landing"), timezone=TELEMETRY_TZ),
                                out / "warehouse.duckdb", instance=instance)
        t3 = time.perf_counter()
        conn = connect(out / "warehouse.duckdb", read_only=True)
        size_mib = (out / "warehouse.duckdb").stat().st_size / 2**20
        minutes = fetch_all(conn, "SELECT count(*) FROM core.gpu_minutes")[0][0]
        conn.close()
        report = {
            "scenario_write_s": round(t1 - t0, 2),
            "ingest_s": round(t2 - t1, 2),
            "ingest_rows": summary.rows_loaded,
            "ingest_rows_per_s": round(summary.rows_loaded / (t2 - t1)),
            "full_graph_s": round(t3 - t2, 2),
            "full_graph_rows_per_s": round(summary.rows_loaded / (t3 - t2)),
            "ingest_share_of_graph": round((t2 - t1) / (t3 - t2), 2),
            "gpu_minutes": minutes,
            "warehouse_mib": round(size_mib, 1),
            "peak_rss_mib": round(peak_rss_mib()),
            "graph_success": outcome.success,
            "truth_rows": truths["rows"],
        }
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
