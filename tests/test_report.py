"""The day's report: every section present, charts inline, text from data escaped."""

from datetime import date
from decimal import Decimal

from pipelines.report import render


def test_text_from_data_is_escaped_in_html_and_markdown():
    evil = "<script>alert(1)</script>|x"
    data = {
        "date": "2026-09-26", "spend_by_phase": [], "day_cost": [], "daily_by_phase": [],
        "findings": [{"severity": "high", "kind": "egress", "subkind": "repeated_download", "resource": evil,
                      "avoidable_cost": Decimal("243"), "currency": "USD", "recommendation": evil}],
        "tco": {"note": "no usage"}, "tco_chart_svg": None,
    }
    page, markdown, machine = render(data)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown and "\\|x" in markdown
    assert '"resource": "<script>alert(1)</script>|x"' in machine  # JSON carries the value itself, safely quoted


def test_the_demo_report_has_every_section_and_its_charts(demo_run):
    folder = demo_run.out / "reports" / "2026-10-10"
    page = (folder / "report.html").read_text()
    for title in ("Daily cost by phase", "Spend by phase this month", "Cost on 2026-10-10", "Top hidden costs",
                  "Purchasing strategy (3-year TCO, CNY)"):
        assert title in page
    assert page.count("<svg") == 2  # daily cost by phase, and the purchasing chart
    assert "hybrid" in (folder / "report.md").read_text()
    assert date.fromisoformat(__import__("json").loads((folder / "report.json").read_text())["date"]) == date(2026, 10, 10)
