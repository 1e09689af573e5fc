"""The terminal summary of a run, read back from the warehouse."""

from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from pipelines.warehouse import connect, fetch_all, fetch_dicts, table_exists

SHOW_SKIPPED = 5  # unrecognised files listed by name; the rest are counted
TABLES = ("raw.files", "raw.quarantine", "core.cost_lines", "core.gpu_samples", "core.gpu_minutes",
          "core.workloads", "core.fx_rates", "marts.cost_attribution", "marts.daily_cost", "marts.spend_by_phase")


def summary_dict(warehouse: Path) -> dict:
    """What the published warehouse holds now (a run whose steps failed left the one before it)."""
    if not warehouse.exists():  # a first run that failed published nothing
        return {"files": [], "problems": [], "spend_by_phase": [], "conservation": [], "tables": {}}
    conn = connect(warehouse, read_only=True)
    try:
        if not table_exists(conn, "marts.spend_by_phase") or not table_exists(conn, "marts.cost_attribution"):
            return {
                "files": fetch_dicts(conn, "SELECT status, count(*) AS files, sum(rows_loaded) AS rows_loaded, "
                                           "sum(rows_quarantined) AS rows_quarantined FROM raw.files GROUP BY status ORDER BY status")
                if table_exists(conn, "raw.files") else [],
                "problems": [], "spend_by_phase": [], "conservation": [],
                "tables": {t: fetch_all(conn, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES if table_exists(conn, t)},
            }
        return {
            "files": fetch_dicts(conn, "SELECT status, count(*) AS files, sum(rows_loaded) AS rows_loaded, "
                                       "sum(rows_quarantined) AS rows_quarantined FROM raw.files GROUP BY status ORDER BY status"),
            "problems": fetch_dicts(conn, "SELECT path, status, detail FROM raw.files "
                                          "WHERE status IN ('failed', 'unrecognized') ORDER BY path"),
            "tables": {t: fetch_all(conn, f"SELECT count(*) FROM {t}")[0][0] for t in TABLES},
            "spend_by_phase": fetch_dicts(conn, "SELECT phase, reporting_currency, cost_reporting, share_pct, gpu_hours_paid, "
                                                "gpu_hours_busy, utilization_pct, cost_per_busy_gpu_hour, cost_by_billing_currency "
                                                "FROM marts.spend_by_phase WHERE period = 'all'"),
            "conservation": fetch_dicts(conn, """
                SELECT c.BillingCurrency AS currency, sum(c.EffectiveCost) AS cost_lines_total,
                       (SELECT sum(a.amount_billing) FROM marts.cost_attribution a JOIN core.cost_lines l USING (x_ChargeId)
                        WHERE l.BillingCurrency = c.BillingCurrency) AS attributed_total
                FROM core.cost_lines c GROUP BY c.BillingCurrency ORDER BY currency"""),
        }
    finally:
        conn.close()


def _money(value) -> str:
    return "—" if value is None else f"{value:,.2f}"


def print_summary(console: Console, s: dict, warehouse: Path, elapsed: float) -> None:
    files = Table("status", "files", "rows loaded", "rows quarantined", title="landing files")
    for f in s["files"]:
        files.add_row(f["status"], str(f["files"]), f"{f['rows_loaded'] or 0:,}", f"{f['rows_quarantined'] or 0:,}")
    console.print(files)
    for p in (p for p in s["problems"] if p["status"] == "failed"):
        console.print(Text.assemble(("failed", "red"), f": {p['path']} — {p['detail']}"), highlight=False)
    skipped = [p for p in s["problems"] if p["status"] == "unrecognized"]
    for p in skipped[:SHOW_SKIPPED]:
        console.print(Text.assemble(("skipped", "yellow"), f": {p['path']} — {p['detail']}"), highlight=False)
    if len(skipped) > SHOW_SKIPPED:
        console.print(f"[yellow]skipped[/]: {len(skipped) - SHOW_SKIPPED} more files no connector recognises "
                      "(SELECT path, detail FROM raw.files WHERE status = 'unrecognized')", highlight=False)

    phases = Table("phase", "cost", "share %", "GPU-h paid", "GPU-h busy", "util %", "cost / busy GPU-h", "by billing currency",
                   title=f"spend by phase ({s['spend_by_phase'][0]['reporting_currency'] if s['spend_by_phase'] else ''})")
    for p in s["spend_by_phase"]:
        by_currency = ", ".join(f"{k} {_money(v)}" for k, v in (p["cost_by_billing_currency"] or {}).items())
        phases.add_row(p["phase"], _money(p["cost_reporting"]), f"{p['share_pct'] or 0:.1f}", f"{p['gpu_hours_paid']:,.1f}",
                       f"{p['gpu_hours_busy']:,.1f}", "—" if p["utilization_pct"] is None else f"{p['utilization_pct']:.1f}",
                       _money(p["cost_per_busy_gpu_hour"]), by_currency)
    console.print(phases)

    balance = Table("currency", "cost lines", "attributed to phases", "conserved", title="money conservation")
    for c in s["conservation"]:
        balance.add_row(c["currency"], _money(c["cost_lines_total"]), _money(c["attributed_total"]),
                        "yes" if c["cost_lines_total"] == c["attributed_total"] else "[red]NO[/]")
    console.print(balance)
    console.print("tables: " + ", ".join(f"{t} {n:,}" for t, n in s["tables"].items()))
    console.print(Text(f"warehouse: {warehouse}  ({elapsed:.1f} s)"))
    console.print(Text(f"open it:   python -c \"import duckdb; print(duckdb.connect('{warehouse}', read_only=True)"
                  ".sql(\\\"FROM marts.spend_by_phase WHERE period = 'all'\\\"))\""), highlight=False)
