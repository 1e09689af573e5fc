"""Export `core.cost_lines` as a FOCUS dataset file for an outside validator: every FOCUS column
under its own name, gpu-finops extensions (`x_` columns) dropped.

    python -m tools.export_focus WAREHOUSE.duckdb OUT.parquet   (or OUT.csv)

Parquet keeps types (decimals, UTC timestamps); CSV writes timestamps as ISO 8601 with `Z`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb


def export(warehouse: Path, out: Path) -> int:
    """Write the FOCUS columns of core.cost_lines to `out`; returns the number of rows."""
    conn = duckdb.connect(str(warehouse), read_only=True)
    try:
        conn.execute("SET TimeZone = 'UTC'")
        names = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'core' AND table_name = 'cost_lines' ORDER BY ordinal_position").fetchall()]
        if not names:
            raise SystemExit(f"{warehouse}: no core.cost_lines table")
        focus = [n for n in names if not n.startswith("x_")]
        cols = ", ".join(
            # CSV: timestamps as 2024-01-01T00:00:00Z, the form FOCUS's date-time rules expect.
            f"strftime(\"{n}\", '%Y-%m-%dT%H:%M:%SZ') AS \"{n}\"" if out.suffix == ".csv" and t.startswith("TIMESTAMP")
            else f'"{n}"'
            for n, t in conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'core' AND table_name = 'cost_lines' ORDER BY ordinal_position").fetchall()
            if n in focus)
        fmt = "(FORMAT csv, HEADER)" if out.suffix == ".csv" else "(FORMAT parquet)"
        out.parent.mkdir(parents=True, exist_ok=True)
        conn.execute(f"COPY (SELECT {cols} FROM core.cost_lines) TO '{out}' {fmt}")
        return conn.execute("SELECT count(*) FROM core.cost_lines").fetchone()[0]
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = export(Path(args[0]), Path(args[1]))
    print(f"{args[1]}: {rows} rows of core.cost_lines, x_ columns dropped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
