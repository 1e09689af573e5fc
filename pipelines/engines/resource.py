"""The engine the SQL assets build with: a Dagster resource (`sql_engine`).

DuckDB (the default) runs each `sql/` file on the warehouse connection. Spark builds the same
models on a Spark session (pipelines/engines/spark.py) and publishes them in the same warehouse.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

ENGINES = ("duckdb", "spark")


class SqlEngineResource(ConfigurableResource):
    engine: str = Field(default="duckdb", description="Engine of the SQL models: duckdb (one machine) or spark.")
    spark_master: str = Field(default="local[2]", description="Spark master: local[N], spark://host:7077, yarn, "
                                                                "k8s://https://host:443, or sc://host:15002 (Spark Connect).")
    spark_lake: str | None = Field(default=None, description="Folder (or s3a://, abfss://, hdfs:// URL) Spark writes the "
                                                             "models' Parquet to; default: <warehouse>.spark-lake beside it.")
    spark_read_lake: bool | None = Field(default=None, description="Spark reads the raw tables from the warehouse's lake in "
                                                                   "place (default: in local mode only; a cluster whose "
                                                                   "executors see that folder at the same path can set true).")
    spark_conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings (spark.executor.memory, ...).")
    _spark: object | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"sql_engine.engine is {self.engine!r}; one of {', '.join(ENGINES)}")
        self._spark = None  # a run starts with nothing built: its inputs may have changed

    def spark(self):
        if self._spark is None:
            from pipelines.engines.spark import SparkEngine

            self._spark = SparkEngine(master=self.spark_master, lake_dir=self.spark_lake, conf=dict(self.spark_conf),
                                      read_lake=self.spark_read_lake)
        return self._spark

    def build(self, conn, table: str, params: Mapping[str, object], inputs: Mapping[str, pa.Table]) -> None:
        """(Re)build `table` in the warehouse on `conn` (prepared: UTC, macros)."""
        if self.engine == "spark":
            self.spark().build(conn, table, params, inputs)
            return
        from pipelines.warehouse.connection import run_sql_file

        for name, arrow_table in inputs.items():
            conn.register(name, arrow_table)
        run_sql_file(conn, table, params)
        for name in inputs:
            conn.unregister(name)
