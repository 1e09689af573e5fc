import csv
import json
from decimal import Decimal

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from connectors.base import ConnectorError
from connectors.focus import FocusConnector
from connectors.registry import detect
from models.schemas import COST_LINE
from tests.conftest import read_context, sample

FOCUS_SAMPLE = "billing/focus10_sample_multicloud_1000.csv"


def read_all(path, ctx=None):
    ctx = ctx or read_context(path.name)
    batches = list(FocusConnector().read(path, ctx))
    return (pa.Table.from_batches(batches, schema=COST_LINE) if batches else COST_LINE.empty_table()), ctx


def file_sum(path, column) -> Decimal:
    with open(path, newline="") as fh:
        return sum((Decimal(r[column]) for r in csv.DictReader(fh) if r[column] not in ("", "NULL")), Decimal(0))


def test_foundation_sample_loads_every_row_and_billed_cost_reconciles_to_the_cent():
    path = sample(FOCUS_SAMPLE)
    table, ctx = read_all(path)
    assert table.num_rows == 1000
    assert ctx.quarantined == []
    assert table.schema.field("BilledCost").type == pa.decimal128(38, 10)
    loaded = pc.sum(table["BilledCost"]).as_py()
    assert loaded.quantize(Decimal("0.01")) == file_sum(path, "BilledCost").quantize(Decimal("0.01")) == Decimal("20.52")
    assert pc.sum(table["EffectiveCost"]).as_py().quantize(Decimal("0.01")) == file_sum(path, "EffectiveCost").quantize(Decimal("0.01"))


def test_null_strings_timestamps_and_extra_columns():
    table, _ = read_all(sample(FOCUS_SAMPLE))
    first = table.slice(0, 1).to_pylist()[0]
    assert first["AvailabilityZone"] is None  # the sample writes NULL as the string NULL
    assert first["ChargePeriodStart"].isoformat() == "2024-09-18T22:00:00+00:00"
    assert first["ChargePeriodStart"].utcoffset().total_seconds() == 0
    assert json.loads(first["x_ExtraColumns"]) == {"Id": "11472"}  # non-FOCUS column kept
    assert first["ListUnitPrice"] == Decimal("0.0000004")  # unit prices keep sub-micro precision
    providers = dict(zip(*pc.value_counts(table["ProviderName"]).flatten()))
    assert {k.as_py(): v.as_py() for k, v in providers.items()} == {"AWS": 942, "Microsoft": 51, "Oracle": 7}


def test_focus_1_2_spec_example_with_blank_lines_and_x_columns(tmp_path):
    # The spec's examples are excerpts without BillingCurrency, so detection rightly refuses them;
    # with the currency added they must load, blank lines skipped and x_ columns kept.
    source = sample("billing/focus12_spec_examples/one_hundred_percent_utilization_with_commitment_discount_flexibility_with_2_resources.csv")
    assert detect(source).connector is None
    lines = source.read_text().splitlines()
    path = tmp_path / "spec_example.csv"
    path.write_text("\n".join([lines[0] + ",BillingCurrency"] + [(l + ",USD") if l.strip() else l for l in lines[1:]]) + "\n")
    assert detect(path).connector.name == "focus"
    table, ctx = read_all(path)
    assert table.num_rows == 3 and not ctx.quarantined
    extras = [json.loads(x) for x in table["x_ExtraColumns"].to_pylist()]
    assert all("x_CommitmentDiscountUnitPrice" in e for e in extras)
    assert table["CommitmentDiscountStatus"].to_pylist().count("Used") >= 1


def test_parquet_export_reads_like_csv(tmp_path):
    source = sample(FOCUS_SAMPLE)
    frame = pl.read_csv(source, null_values="NULL", infer_schema_length=0).with_columns(
        pl.col("BilledCost", "EffectiveCost", "ListCost").cast(pl.Decimal(20, 11)),
        pl.col("ChargePeriodStart", "ChargePeriodEnd").str.to_datetime("%Y-%m-%d %H:%M:%S", time_zone="UTC"),
    )
    path = tmp_path / "export.parquet"
    frame.write_parquet(path)
    assert detect(path).connector.name == "focus"
    table, ctx = read_all(path)
    csv_table, _ = read_all(source)
    assert table.num_rows == 1000 and not ctx.quarantined
    assert pc.sum(table["BilledCost"]).as_py() == pc.sum(csv_table["BilledCost"]).as_py()
    assert table["ChargePeriodStart"].to_pylist() == csv_table["ChargePeriodStart"].to_pylist()


def write_focus(path, rows, header=("BilledCost", "EffectiveCost", "BillingCurrency", "ChargeCategory",
                                    "ChargePeriodStart", "ChargePeriodEnd", "ServiceName")):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_bad_rows_are_quarantined_with_reason_and_row_and_the_rest_load(tmp_path):
    path = write_focus(tmp_path / "bad.csv", [
        ("1.50", "1.50", "USD", "Usage", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z", "ok"),
        ("abc", "1.00", "USD", "Usage", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z", "bad money"),
        ("2.00", "2.00", "US Dollar", "Usage", "2026-09-01T00:00:00Z", "2026-09-02T00:00:00Z", "bad currency"),
        ("3.00", "3.00", "CNY", "Usage", "yesterday", "2026-09-02T00:00:00Z", "bad time"),
        ("4.00", "4.00", "CNY", "Usage", "2026-09-03T00:00:00Z", "2026-09-02T00:00:00Z", "end before start"),
        ("5.25", "5.25", "CNY", "Usage", "2026-09-01 08:00:00+08:00", "2026-09-02T00:00:00Z", "offset"),
    ])
    table, ctx = read_all(path)
    assert table.num_rows == 2
    assert [r["x_SourceRow"] for r in ctx.quarantined] == [2, 3, 4, 5]
    reasons = [r["reason"] for r in ctx.quarantined]
    assert reasons[0] == "BilledCost is not a valid money: 'abc'"
    assert reasons[1] == "BillingCurrency 'US Dollar' is not an ISO 4217 code"
    assert reasons[2] == "ChargePeriodStart is not a valid timestamp: 'yesterday'"
    assert reasons[3] == "ChargePeriodEnd is before ChargePeriodStart"
    assert json.loads(ctx.quarantined[0]["raw_record"])["ServiceName"] == "bad money"
    assert pc.sum(table["BilledCost"]).as_py() == Decimal("6.75")
    assert table["ChargePeriodStart"][1].as_py().isoformat() == "2026-09-01T00:00:00+00:00"


def test_missing_required_column_fails_the_file_naming_it(tmp_path):
    path = write_focus(tmp_path / "nocost.csv", [("USD", "Usage", "2026-09-01", "2026-09-02", "x")],
                       header=("BillingCurrency", "ChargeCategory", "ChargePeriodStart", "ChargePeriodEnd", "BilledCost2"))
    with pytest.raises(ConnectorError, match=r"nocost.csv, line 1: required FOCUS column BilledCost is missing"):
        # detection would not claim it; reading it directly must still fail clearly
        read_all(path, read_context("nocost.csv"))


def test_detect_claims_focus_and_not_telemetry():
    assert detect(sample(FOCUS_SAMPLE)).connector.name == "focus"
    assert detect(sample("telemetry/nvidia_smi_query_gpu_h100_h200_l40s_idle_load.csv")).connector.name != "focus"


SPEC_EXAMPLES = sorted(p.name for p in (sample("billing/focus12_spec_examples/commitment_discount_usage_scenario_1.csv").parent).glob("*.csv"))


@pytest.mark.parametrize("name", SPEC_EXAMPLES)
def test_focus_1_2_commitment_examples_keep_billed_and_effective_cost(tmp_path, name):
    """The spec's commitment purchase and usage examples: BilledCost and EffectiveCost exactly as written."""
    source = sample(f"billing/focus12_spec_examples/{name}")
    lines = source.read_text().splitlines()
    path = tmp_path / name
    path.write_text("\n".join([lines[0] + ",BillingCurrency"] + [(l + ",USD") if l.strip() else l for l in lines[1:]]) + "\n")
    table, ctx = read_all(path)
    rows = [r for r in csv.DictReader(open(source, newline="")) if any(v for v in r.values())]
    # Two of the spec's own examples write an impossible time (2023-02-01T30:00:00Z): quarantined, named.
    rejected = {q["x_SourceRow"] for q in ctx.quarantined}
    assert all(q["reason"].startswith("ChargePeriodEnd is not a valid timestamp") for q in ctx.quarantined)
    assert table.num_rows + len(rejected) == len(rows)
    kept = [r for n, r in enumerate(rows, start=1) if n not in rejected]
    for column in ("BilledCost", "EffectiveCost"):
        own = sum((Decimal(r[column]) for r in kept if r[column] not in ("", "NULL")), Decimal(0))
        assert (pc.sum(table[column]).as_py() or Decimal(0)) == own.quantize(Decimal("0.000001")), column
