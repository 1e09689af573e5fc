"""One canonical gpu_model key for telemetry, billing and the price catalog (models/data/gpu_models.csv)."""

import csv

import duckdb
import pytest

from models.gpus import MODELS_TABLE, canonical_gpu_model, gpu_model_expr, is_known_gpu_model, known_models, sql_macros
from pipelines.warehouse.connection import SQL_DIR

# Names as each source spells them: nvidia-smi `name` / DCGM `modelName` (tests/fixtures/samples and
# the demo), invoices' x_GpuModel and the price catalog.
NAMES = {
    "NVIDIA A100-SXM4-80GB": "A100-80GB",  # telemetry (demo)
    "A100 80G": "A100-80GB",  # billing (demo) and the price catalog
    "NVIDIA A100 80GB PCIe": "A100-80GB",
    "NVIDIA A100-PCIE-40GB": "A100-40GB",
    "A100 40G": "A100-40GB",
    "NVIDIA H100 80GB HBM3": "H100-80GB",  # tests/fixtures/samples/telemetry/nvidia_smi_*
    "H100": "H100-80GB",
    "NVIDIA H100 NVL": "H100-NVL-94GB",
    "NVIDIA H200": "H200",
    "NVIDIA GH200 480GB": "GH200",
    "NVIDIA L40S": "L40S",
    "Tesla T4": "T4",  # DCGM modelName in the samples
    "NVIDIA A10G": "A10G",
    "NVIDIA A10": "A10",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada",  # telemetry (demo)
    "RTX 6000 Ada": "RTX-6000-Ada",  # billing (demo) and the price catalog
    "rtx6000ada": "RTX-6000-Ada",
    "Quadro RTX 6000": "Quadro-RTX-6000",  # the Turing card: not the Ada one
    "NVIDIA RTX A6000": "RTX-A6000",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "Tesla V100-SXM2-32GB": "V100-32GB",
    "Tesla V100-SXM2-16GB": "V100-16GB",
    "NVIDIA B200": "B200",
    "NVIDIA GB200": "GB200",
}


@pytest.mark.parametrize(("name", "key"), NAMES.items())
def test_every_source_spelling_becomes_one_key(name, key):
    assert canonical_gpu_model(name) == key
    assert canonical_gpu_model(key) == key  # a key is its own key
    assert is_known_gpu_model(key) is True


def test_an_unknown_name_stays_visible_and_flagged():
    assert canonical_gpu_model("  Moore Threads MTT S4000 ") == "Moore Threads MTT S4000"
    assert is_known_gpu_model("Moore Threads MTT S4000") is False
    assert canonical_gpu_model("") is None and canonical_gpu_model(None) is None


def test_the_table_lists_each_key_with_examples_that_map_to_it():
    with open(MODELS_TABLE, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["gpu_model"] for r in rows] == list(known_models())  # one row per key
    for r in rows:
        for example in r["examples"].split(";"):
            assert canonical_gpu_model(example.split("(")[0]) == r["gpu_model"], example


def test_sql_macros_are_generated_from_the_table():
    # sql/macros.sql carries the generated block verbatim: `python -m models.gpus` rewrites it.
    assert sql_macros() in (SQL_DIR / "macros.sql").read_text()


def test_sql_polars_and_python_agree():
    import polars as pl

    names = [*NAMES, "  Moore Threads MTT S4000 ", None]
    conn = duckdb.connect()
    conn.execute((SQL_DIR / "macros.sql").read_text())
    sql = conn.execute("SELECT gpu_model_key(n), gpu_model_known(gpu_model_key(n)) FROM unnest($names) AS t(n)",
                       {"names": names}).fetchall()
    polars = pl.DataFrame({"n": names}).select(gpu_model_expr(pl.col("n"))).to_series().to_list()
    python = [canonical_gpu_model(n) for n in names]
    assert [k for k, _ in sql] == python == polars
    assert [known for _, known in sql] == [is_known_gpu_model(k) for k in python]


def test_bundled_catalog_and_instance_table_use_the_keys():
    from models.gpus import instance_rules

    known = set(known_models())
    assert {model for _, model, _ in instance_rules()} <= known
    with open(MODELS_TABLE.parent / "price_catalog.csv", newline="") as fh:
        assert {r["gpu_model"] for r in csv.DictReader(fh) if r["gpu_model"]} <= known
