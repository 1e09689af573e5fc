"""`finops run` as a user runs it: any folder, bad files included, summary at the end."""

import shutil

from typer.testing import CliRunner

from pipelines.cli.main import app
from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import sample


def test_run_over_a_folder_with_unreadable_and_unknown_files(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(sample("billing/focus10_sample_multicloud_1000.csv"), landing / "focus.csv")
    shutil.copy(sample("telemetry/nvidia_smi_dmon_h100_load.txt"), landing / "dmon.txt")  # claimed, cannot be dated
    shutil.copy(sample("telemetry/philly_node_sequence_head5000.csv"), landing / "philly.csv")  # nobody's format
    warehouse = tmp_path / "wh.duckdb"
    result = CliRunner().invoke(app, ["run", "--landing", str(landing), "--warehouse", str(warehouse),
                                      "--reports", str(tmp_path / "reports")], terminal_width=200)
    assert result.exit_code == 1, result.output  # a file that failed fails the run; the others still load
    assert result.output.splitlines()[-2] == "1 file(s) did not load:"
    assert result.output.splitlines()[-1].startswith("failed: dmon.txt — dmon.txt, line 1: dmon output without timestamps")
    assert "skipped: philly.csv — no connector recognises its content (header)" in result.output
    # Its GPU instances are identified, so strategies are sized; no workload held them and the catalog
    # prices none of them in the parameters' currency, so the only priced strategy is a 0.00 hybrid:
    # no chart of zeros, and the run says why.
    assert not (tmp_path / "reports" / "tco.svg").exists()
    assert "no purchasing chart: every priced strategy comes to nothing" in result.output
    conn = connect(warehouse, read_only=True)
    assert fetch_all(conn, "SELECT count(*) FROM core.cost_lines") == [(1000,)]
    # The FOCUS 1.0 sample's GPU instances, named only in ChargeDescription: 8 × g5.4xlarge, 2 × g3.4xlarge.
    assert fetch_all(conn, "SELECT x_GpuModel, count(*), sum(x_GpuCount) FROM core.cost_lines WHERE x_GpuCount > 0 "
                           "GROUP BY 1 ORDER BY 1") == [("A10G", 8, 8), ("M60", 2, 2)]
    # Each identified model is sized on its own, then the fleet: 7 strategies each, and the fleet's cheapest mix.
    assert fetch_all(conn, "SELECT gpu_model, count(*) FROM marts.tco_scenarios GROUP BY 1 ORDER BY 1") == [
        ("A10G", 7), ("M60", 7), ("fleet", 8)]
    conn.close()
    assert (tmp_path / "reports" / "run_summary.json").exists()


def test_run_over_every_public_sample_conserves_and_reconciles_money(tmp_path, monkeypatch):
    """Every billing and telemetry sample in one landing folder, as a new user would try it."""
    from tests.conftest import SAMPLES

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    warehouse = tmp_path / "wh.duckdb"
    result = CliRunner().invoke(app, ["run", "--landing", str(SAMPLES), "--warehouse", str(warehouse)], terminal_width=200)
    # Some public samples cannot load: a dmon output without timestamps, and two Azure files every row
    # of which is quarantined. Those, and only those, fail the run (the CUR whose rows are one column
    # short loads, its last column empty, with a warning).
    assert result.exit_code == 1, result.output[-3000:]
    listed = result.output.split("3 file(s) did not load:\n")[1].splitlines()
    assert [line.split(" — ")[0] for line in listed] == [
        "quarantined: billing/azure_ea_export_v2_koku.csv",
        "quarantined: billing/azure_export_header_variants_opencost/BOM.csv",
        "failed: telemetry/nvidia_smi_dmon_h100_load.txt",
    ], listed
    assert "check failed" not in result.output
    conn = connect(warehouse, read_only=True)
    try:
        connectors = dict(fetch_all(conn, "SELECT connector, count(*) FROM raw.files WHERE status = 'loaded' GROUP BY 1"))
        assert {"focus", "aws_cur", "azure_cost", "gcp_billing", "oci_cost", "nvidia_smi", "dcgm_exporter", "alibaba_gpu_trace"} <= set(connectors)
        assert fetch_all(conn, """SELECT count(*) FROM (SELECT x_ChargeId FROM core.cost_lines GROUP BY 1 HAVING count(*) > 1)""") == [(0,)]
        unbalanced = fetch_all(conn, """
            SELECT c.BillingCurrency, sum(c.EffectiveCost), (SELECT sum(a.amount_billing) FROM marts.cost_attribution a
                JOIN core.cost_lines l USING (x_ChargeId) WHERE l.BillingCurrency = c.BillingCurrency)
            FROM core.cost_lines c GROUP BY 1 HAVING sum(c.EffectiveCost) <> (SELECT sum(a.amount_billing) FROM marts.cost_attribution a
                JOIN core.cost_lines l USING (x_ChargeId) WHERE l.BillingCurrency = c.BillingCurrency)""")
        assert unbalanced == []
    finally:
        conn.close()
