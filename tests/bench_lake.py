"""`make bench` part five: the lake's targets, as ratios measured in one run on this machine.

Each measurement is a fresh `finops run` process (wall time and its own peak RSS, from wait4):

- the one-query floor: DuckDB casting the same CUR CSV to Parquet;
- `finops run` over a 200k-row and a 1M-row AWS CUR (the focus_converters fixture repeated);
- the same warehouse run again with no new file, and a run over an empty landing folder;
- a second month's delivery (a fifth of the rows) landed after the 1M-row month: against the same
  delivery run into an empty warehouse (a new CUR delivery costs its own size, not the history's);
- telemetry: nvidia-smi files (hosts x 8 GPUs x samples at 10 s) against the floor of one DuckDB
  query parsing them and grouping to GPU-minutes, and a second day of samples landed after the first
  (against the same day's samples run into an empty warehouse);
- the connector alone, for the CUR and for the nvidia-smi files: a process that only reads the files
  through it (parsing, checks, FOCUS or sample columns), writing nothing. A run reads its files
  through the connector, so this is the least a run can take as the code stands: its ratio to the
  floor says how close to the floor a run can come without a reader of its own;
- a reader of DuckDB's own for the same nvidia-smi files (one statement parsing every column the
  connector keeps and writing them to Parquet by day, no checks): what storing the samples costs at
  the least, whatever reads them.

Each bench starts with an empty reference cache of its own (pipelines/warehouse/reference_cache.py),
as on a machine that never ran a pipeline: its first run derives the FX rates and the later new
warehouses copy them. `FINOPS_CACHE_DIR=off` measures every run deriving them.

    python -m tests.bench_lake [--rows 1000000] [--hosts 25 --samples 10000] [--huge-rows 10000000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.bench_cur import write_scaled

REPO = Path(__file__).resolve().parent.parent
FINOPS = [sys.executable, "-m", "pipelines.cli.main"]


def timed(command: list[str], **kwargs) -> dict:
    """Run `command`; its wall seconds and peak RSS (MiB), from the kernel's accounting of that child."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    return {"s": round(seconds, 2), "rss_mib": round(usage.ru_maxrss / 1024), "rc": os.waitstatus_to_exitcode(status),
            "tail": output.decode(errors="replace").strip().splitlines()[-1:] }


def finops_run(landing: Path, warehouse: Path, as_of: str = "2026-11-30") -> dict:
    return timed([*FINOPS, "run", "--landing", str(landing), "--warehouse", str(warehouse), "--as-of", as_of])


def floor_cur(csv: Path, out: Path) -> dict:
    sql = f"COPY (SELECT * FROM read_csv('{csv}')) TO '{out}' (FORMAT parquet)"
    return timed([sys.executable, "-c", f"import duckdb; duckdb.connect().execute({sql!r})"])


def write_cur_month(source: Path, target: Path, month: str) -> None:
    """The same lines moved into another billing month (a second delivery of the export): November
    2023's days into `month` (YYYY-MM, a month of 30 days or more), and the period's end, the first
    of December, to the first of the month after. The end first: the start's new month must not be
    caught by the end's pattern."""
    year, number = (int(p) for p in month.split("-"))
    following = f"{year + number // 12}-{number % 12 + 1:02d}-01"
    text = source.read_text().replace("2023-12-01", following).replace("2023-11-", f"{month}-")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def write_nvidia_smi(folder: Path, hosts: int, samples: int, start: datetime) -> int:
    """nvidia-smi --query-gpu CSV, one file per host, 8 GPUs sampled every 10 s (written by DuckDB)."""
    import duckdb

    folder.mkdir(parents=True, exist_ok=True)
    conn = duckdb.connect()
    for h in range(hosts):
        path = folder / f"gpu-node-{h:03d}.csv"
        conn.execute(f"""COPY (
            SELECT strftime(TIMESTAMP '{start:%Y-%m-%d %H:%M:%S}' + INTERVAL (t * 10) SECOND, '%Y/%m/%d %H:%M:%S.000')
                   || ', ' || g || ', GPU-{h:04d}-' || lpad(g::VARCHAR, 4, '0') || ', NVIDIA A100-SXM4-80GB, 00000000:0' || g
                   || ':00.0, P0, ' || ((t * 7 + g * 13) % 101) || ' %, 81920 MiB, ' || ((t * 31) % 81920) || ' MiB, '
                   || (60 + (t % 300)) || '.00 W' AS line
            FROM range({samples}) AS s(t), range(8) AS gs(g) ORDER BY t, g)
            TO '{path}' (FORMAT csv, HEADER false, QUOTE '', ESCAPE '')""")
        body = path.read_text()
        path.write_text("timestamp, index, uuid, name, pci.bus_id, pstate, utilization.gpu [%], memory.total [MiB], "
                        "memory.used [MiB], power.draw [W]\n" + body)
    return hosts * 8 * samples


def connector_alone(name: str, paths: list[Path]) -> dict:
    """A fresh process reading `paths` through the connector `name` and dropping the batches: its
    wall time and peak RSS, starting up included, as the floors' processes include theirs."""
    script = ("import sys; from datetime import UTC, datetime; from pathlib import Path; "
              "from connectors.base import ReadContext; from connectors.registry import builtin_connectors; "
              "c = next(c for c in builtin_connectors() if c.name == sys.argv[1]); "
              "rows = sum(b.num_rows for p in sys.argv[2:] for b in c.read(Path(p), "
              "ReadContext(source_file=p, ingested_at=datetime.now(UTC)))); print(rows)")
    return timed([sys.executable, "-c", script, name, *map(str, paths)], cwd=REPO)


def floor_telemetry(folder: Path) -> dict:
    sql = (f"SELECT count(*) FROM (SELECT regexp_extract(filename, '([^/]+)\\.csv$', 1) AS host, idx AS gpu, "
           f"date_trunc('minute', strptime(ts, '%Y/%m/%d %H:%M:%S.%g')) AS minute, "
           f"avg(CAST(trim(replace(util, '%', '')) AS DOUBLE)) AS util "
           f"FROM read_csv('{folder}/*.csv', header = true, all_varchar = true, filename = true, "
           f"names = ['ts', 'idx', 'uuid', 'name', 'bus', 'pstate', 'util', 'mem_total', 'mem_used', 'power']) GROUP BY ALL)")
    return timed([sys.executable, "-c", f"import duckdb; print(duckdb.connect().execute({sql!r}).fetchall())"])


def one_pass_telemetry(folder: Path, out: Path) -> dict:
    """The least a reader of DuckDB's own could take for the same files: one statement parsing every
    column the nvidia-smi connector keeps (time, GPU, model, utilization, memory, power; the host from
    the file name) and writing them to Parquet by UTC day, with no checks, quarantine or lineage. A
    run stores every sample, so this bounds any design that does: the connector plus the lake writer
    is what it would replace."""
    number = "TRY_CAST(rtrim({}, ' %MiBW') AS DOUBLE)"  # '81920 MiB' → 81920: the units' letters cut from the end
    sql = (f"COPY (SELECT *, CAST(ts AS DATE) AS day FROM (SELECT strptime(trim(ts), '%Y/%m/%d %H:%M:%S.%g') AS ts, "
           f"regexp_extract(filename, '([^/]+)\\.csv$', 1) AS host, trim(uuid) AS gpu_uuid, "
           f"TRY_CAST(trim(idx) AS INTEGER) AS gpu_index, trim(name) AS gpu_model, {number.format('util')} AS util_pct, "
           f"{number.format('mem_used')} AS mem_used_mib, {number.format('mem_total')} AS mem_total_mib, "
           f"{number.format('power')} AS power_w "
           f"FROM read_csv('{folder}/*.csv', header = true, all_varchar = true, filename = true, "
           f"names = ['ts', 'idx', 'uuid', 'name', 'bus', 'pstate', 'util', 'mem_total', 'mem_used', 'power']))) "
           f"TO '{out}' (FORMAT parquet, PARTITION_BY (day), OVERWRITE)")
    return timed([sys.executable, "-c", f"import duckdb; duckdb.connect().execute({sql!r})"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=25)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--huge-rows", type=int, default=0,
                        help="Also time one run over a CUR this size (10000000: about 8 GB of CSV) and its peak RSS; 0 skips it.")
    args = parser.parse_args()
    out: dict = {"machine": f"{os.cpu_count()} cores", "rows": args.rows}
    cache = tempfile.TemporaryDirectory()  # the bench's own reference cache; the runs' processes inherit it
    os.environ.setdefault("FINOPS_CACHE_DIR", cache.name)
    out["reference_cache"] = os.environ["FINOPS_CACHE_DIR"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # Billing.
        small, big = tmp / "cur-small" / "landing", tmp / "cur-big" / "landing"
        small.mkdir(parents=True)
        big.mkdir(parents=True)
        write_scaled(small / "cur.csv", args.rows // 5)
        write_scaled(big / "cur.csv", args.rows)
        out["floor_cur"] = floor_cur(big / "cur.csv", tmp / "floor.parquet")
        out["connector_alone_cur"] = connector_alone("aws_cur", [big / "cur.csv"])
        out["run_cur_small"] = finops_run(small, tmp / "cur-small" / "warehouse.duckdb")
        out["run_cur_big"] = finops_run(big, tmp / "cur-big" / "warehouse.duckdb")
        out["rerun_no_new_file"] = finops_run(big, tmp / "cur-big" / "warehouse.duckdb")
        empty = tmp / "empty"
        empty.mkdir()
        out["run_empty_landing"] = finops_run(empty, tmp / "empty" / "warehouse.duckdb")
        # A second month's delivery (rows/5 lines) after the 1M-row month is loaded: it should cost
        # about what the same delivery costs into an empty warehouse, not what the history costs.
        write_cur_month(small / "cur.csv", big / "2023-12" / "cur.csv", "2023-12")
        out["run_second_delivery"] = finops_run(big, tmp / "cur-big" / "warehouse.duckdb")
        shutil.rmtree(tmp / "cur-big")
        # Telemetry.
        telemetry = tmp / "telemetry" / "landing"
        start = datetime(2026, 11, 1, tzinfo=UTC)
        out["samples"] = write_nvidia_smi(telemetry / "day1", args.hosts, args.samples, start)
        out["floor_telemetry"] = floor_telemetry(telemetry / "day1")
        out["connector_alone_telemetry"] = connector_alone("nvidia_smi", sorted((telemetry / "day1").glob("*.csv")))
        out["one_pass_telemetry"] = one_pass_telemetry(telemetry / "day1", tmp / "one-pass")
        out["run_telemetry"] = finops_run(telemetry, tmp / "telemetry" / "warehouse.duckdb")
        write_nvidia_smi(telemetry / "day2", args.hosts, args.samples // 10, start + timedelta(days=2))
        out["run_telemetry_next_day"] = finops_run(telemetry, tmp / "telemetry" / "warehouse.duckdb")
        # The same day's samples into an empty warehouse: what the day costs on its own.
        alone = tmp / "telemetry-alone" / "landing"
        write_nvidia_smi(alone / "day2", args.hosts, args.samples // 10, start + timedelta(days=2))
        out["run_telemetry_day_alone"] = finops_run(alone, tmp / "telemetry-alone" / "warehouse.duckdb")
    if args.huge_rows:
        with tempfile.TemporaryDirectory() as tmp:
            huge = Path(tmp) / "landing"
            huge.mkdir()
            write_scaled(huge / "cur.csv", args.huge_rows)
            out["run_cur_huge"] = {"rows": args.huge_rows, **finops_run(huge, Path(tmp) / "warehouse.duckdb")}
    floor, big_run = out["floor_cur"], out["run_cur_big"]
    out["ratios"] = {
        "cur_run_vs_floor": round(big_run["s"] / floor["s"], 2),
        # The least a run can take as the code stands: reading the file through its connector.
        "cur_connector_alone_vs_floor": round(out["connector_alone_cur"]["s"] / floor["s"], 2),
        "cur_rss_big_vs_small": round(big_run["rss_mib"] / out["run_cur_small"]["rss_mib"], 2),
        "no_new_file_vs_empty": round(out["rerun_no_new_file"]["s"] / out["run_empty_landing"]["s"], 2),
        # A delivery of rows/5 lines into a warehouse holding rows lines, against the same size into an empty one.
        "second_delivery_vs_same_size_first": round(out["run_second_delivery"]["s"] / out["run_cur_small"]["s"], 2),
        "telemetry_run_minus_empty_vs_floor": round((out["run_telemetry"]["s"] - out["run_empty_landing"]["s"])
                                                    / out["floor_telemetry"]["s"], 2),
        "telemetry_connector_alone_vs_floor": round(out["connector_alone_telemetry"]["s"] / out["floor_telemetry"]["s"], 2),
        # A reader of DuckDB's own, parsing what the connector keeps and writing it: what storing the samples costs.
        "telemetry_one_pass_vs_floor": round(out["one_pass_telemetry"]["s"] / out["floor_telemetry"]["s"], 2),
        "telemetry_next_day_vs_first": round(out["run_telemetry_next_day"]["s"] / out["run_telemetry"]["s"], 2),
        # A day of samples landed after the first, against the same day into an empty warehouse.
        "telemetry_next_day_vs_same_day_alone": round(out["run_telemetry_next_day"]["s"] / out["run_telemetry_day_alone"]["s"], 2),
    }
    cache.cleanup()
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
