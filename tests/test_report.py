"""The day's report: every section present, charts inline, text from data escaped."""

from datetime import date
from decimal import Decimal

from pipelines.report import render


def test_text_from_data_is_escaped_in_html_and_markdown():
    evil = "<script>alert(1)</script>|x"
    anomaly = {"anomaly_id": "a1", "state": "new", "status": "open", "resolution": None, "new": True, "kind": "new",
               "direction": "up", "metric": "cost", "series": f"AWS / {evil} / EC2 / idle", "first_day": date(2026, 9, 26),
               "days": 1, "peak_day": date(2026, 9, 26), "actual": Decimal("50"), "expected": Decimal("0"),
               "change": Decimal("50"), "unit": "USD", "driver": "new spend", "summary": f"EC2 on {evil}: cost 50.00 USD"}
    data = {
        "date": "2026-09-28", "scored_day": "2026-09-26", "spend_by_phase": [], "day_cost": [], "daily_by_phase": [],
        "findings": [{"severity": "high", "kind": "egress", "subkind": "repeated_download", "resource": evil,
                      "avoidable_cost": Decimal("243"), "avoidable_cost_reporting": Decimal("243"), "reporting_currency": "USD",
                      "currency": "USD", "recommendation": evil}],
        "anomalies": [anomaly], "suppressed": [], "anomaly_series": [],
        "tco": {"note": "no usage"}, "tco_chart_svg": None,
    }
    page, markdown, machine = render(data)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown and "\\|x" in markdown
    assert '"resource": "<script>alert(1)</script>|x"' in machine  # JSON carries the value itself, safely quoted
    assert "NEW: EC2 on &lt;script&gt;" in page  # the headline too
