"""`make bench` part three: AWS CUR normalisation rate and memory as the file grows.

The anonymised CUR sample's rows are repeated into files of 100,000 and 1,000,000 rows, each
read through the aws_cur connector in a fresh process, and the peak memory of the two is compared:
streaming means the larger file must not need ten times the memory.

    python -m tests.bench_cur
"""

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "samples" / "billing" / "aws_cur_legacy_csv_focusconverters_fixture.csv"


def write_scaled(target: Path, rows: int) -> None:
    lines = SAMPLE.read_text().splitlines(keepends=True)
    header, body = lines[0], lines[1:]
    with open(target, "w") as fh:
        fh.write(header)
        for n in range(rows):
            fh.write(body[n % len(body)])


def measure(path: Path) -> dict:
    """Read the file in this process and report rows, seconds and peak RSS."""
    from connectors.aws_cur import AwsCurConnector
    from tests.conftest import read_context

    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in AwsCurConnector().read(path, read_context(path.name)))
    seconds = time.perf_counter() - started
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
            "mib": round(path.stat().st_size / 2**20), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    if len(sys.argv) > 1:  # child: measure one file
        print(json.dumps(measure(Path(sys.argv[1]))))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rows in (100_000, 1_000_000):
            path = Path(tmp) / f"cur-{rows}.csv"
            write_scaled(path, rows)
            done = subprocess.run([sys.executable, "-m", "tests.bench_cur", str(path)], capture_output=True, text=True, check=True)
            results[rows] = json.loads(done.stdout.strip().splitlines()[-1])
    results["memory_ratio_1m_vs_100k"] = round(results[1_000_000]["peak_rss_mib"] / results[100_000]["peak_rss_mib"], 2)
    json.dump(results, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
