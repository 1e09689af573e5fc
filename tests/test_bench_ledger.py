"""`make bench`'s ledger estate, small, so a change to the raw tables or the rules that breaks the
bench shows in `make test`: each department's latest run counts, and holds its subscriptions'."""

import duckdb

from pipelines.ledger.rules import RULES_SQL
from tests.bench_ledger import estate


def test_the_bench_estate_counts_each_departments_latest_run_and_holds_its_subscriptions():
    conn = duckdb.connect()
    assert estate(conn, subs=40, depts=4, teams=8, runs=3, parts=2) == (4 + 8) * 3 * 2 * 2
    conn.execute(RULES_SQL.read_text())
    assert conn.execute("SELECT status, count(*) FROM raw.files WHERE kind = 'billing' GROUP BY 1 ORDER BY 1").fetchall() == \
        [("loaded", 4 * 2 * 2), ("superseded", 8 * 3 * 2 * 2 + 4 * 2 * 2 * 2)]
    assert conn.execute("""SELECT DISTINCT covered_by FROM raw.delivery_slices
                           WHERE export_name = 'team-0-actual#actual' AND covered_by IS NOT NULL""").fetchall() == \
        [("wider scope: dept-0-actual",)]
