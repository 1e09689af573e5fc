"""Applying the ledger's rules: which delivery of each export counts, which files are incomplete or
superseded. The rules are SQL (`deliveries.sql` beside this file) over every raw row, run after
each ingest; `sql/core/billing_lines.sql` then keeps the lines that count, each once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from pipelines.warehouse.connection import fetch_dicts

RULES_SQL = Path(__file__).with_name("deliveries.sql")


@dataclass
class LedgerState:
    incomplete: list[dict] = field(default_factory=list)  # deliveries still missing parts
    superseded: list[str] = field(default_factory=list)  # billing files a newer delivery replaced


def refresh(conn: duckdb.DuckDBPyConnection) -> LedgerState:
    """Recompute raw.deliveries, raw.delivery_slices and the billing files' delivery and status."""
    conn.execute(RULES_SQL.read_text())
    incomplete = fetch_dicts(conn, """
        SELECT delivery_id, provider, export_name, billing_period, parts_expected, parts_seen, counts
        FROM raw.deliveries WHERE status = 'incomplete' ORDER BY delivery_id""")
    superseded = [r["path"] for r in fetch_dicts(conn, "SELECT path FROM raw.files WHERE status = 'superseded' ORDER BY path")]
    return LedgerState(incomplete, superseded)
