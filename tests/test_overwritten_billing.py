"""A billing file rewritten at its path: the new version replaces what it restates, never more.
A bucket sync or an export job that writes one name (`latest.csv`) leaves exactly these layouts."""

from decimal import Decimal

import pytest

from pipelines.warehouse.connection import connect, fetch_all
from tests.conftest import run_pipeline

HEADER = ("BilledCost,EffectiveCost,BillingCurrency,ChargeCategory,ChargePeriodStart,ChargePeriodEnd,ProviderName,"
          "ServiceName,ServiceCategory,ResourceId,ResourceName,ConsumedQuantity,ConsumedUnit,CommitmentDiscountId,"
          "CommitmentDiscountStatus,Tags,x_GpuModel,x_GpuCount\n")


def line(cost: str, start: str, end: str, resource: str = "ins-a") -> str:
    return f"{cost},{cost},USD,Usage,{start},{end},GpuCloud,GPU,Compute,{resource},gpu-a,24,GPU-Hours,,,,A100 80G,1\n"


SEPTEMBER = HEADER + line("100.00", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z")


def rewrite(tmp_path, first: str, then: str) -> tuple[list, list]:
    """Run over `first` at latest.csv, rewrite it as `then`, run again: the counted total and the
    path's versions."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "latest.csv").write_text(first)
    assert run_pipeline(landing, tmp_path / "wh.duckdb").success
    (landing / "latest.csv").write_text(then)
    assert run_pipeline(landing, tmp_path / "wh.duckdb").success
    conn = connect(tmp_path / "wh.duckdb", read_only=True)
    try:
        counted = fetch_all(conn, "SELECT strftime(BillingPeriodStart, '%Y-%m'), sum(BilledCost) FROM core.cost_lines "
                                  "GROUP BY ALL ORDER BY 1")
        versions = fetch_all(conn, "SELECT status, rows_loaded FROM raw.files WHERE path = 'latest.csv' ORDER BY ingested_at")
        return counted, versions
    finally:
        conn.close()


@pytest.mark.parametrize("then, status", [
    (HEADER, "loaded"),  # the export job wrote the header before its data
    (HEADER + line("n/a", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z"), "quarantined"),
], ids=["header only", "every row quarantined"])
def test_a_version_without_lines_leaves_the_one_before_counting(tmp_path, then, status):
    counted, versions = rewrite(tmp_path, SEPTEMBER, then)
    assert counted == [("2026-09", Decimal("100.0000000000"))]  # was: nothing counted, exit 0
    assert versions == [("loaded", 1), (status, 0)]


def test_a_restated_month_at_the_same_path_replaces_it(tmp_path):
    counted, versions = rewrite(tmp_path, SEPTEMBER, HEADER + line("90.00", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z"))
    assert counted == [("2026-09", Decimal("90.0000000000"))]
    assert versions == [("replaced", 1), ("loaded", 1)]
