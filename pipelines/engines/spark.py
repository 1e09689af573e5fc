"""Build the SQL models of `sql/` on Apache Spark, and publish them in the DuckDB warehouse.

For each model the engine
  1. exports the warehouse tables it reads and the Arrow inputs the asset registers (fx rates,
     price catalog, rules) as Parquet into the engine's lake folder and registers them as Spark
     temp views (a table Spark built earlier in the run is read back from its own Parquet);
  2. runs the model's SQL, translated once by `spark_sql.transpile_model`;
  3. writes the result as Parquet (`<lake>/<schema>/<table>/`) and loads it into the warehouse
     file under the model's own name, with the column names and types DuckDB itself gives the
     model (bound, never run, on the warehouse connection), so analysts' queries and the report
     see the same tables whichever engine built them.

The lake folder must be reachable by the driver and by the executors: a local folder in local
mode; on a cluster, a shared path (`spark_lake`: s3a://, abfss://, hdfs://, dbfs:/ ...).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.engines import spark_sql
from pipelines.engines.spark_sql import (ROWID, SPARK_CONF, SPARK_FUNCTIONS, parse_model, referenced_tables, transpile_query,
                                         view_name)

DEFAULT_MASTER = "local[2]"
# Small shuffles suit one machine; a cluster sets its own (spark_conf).
# The driver is the executor in local mode: 1 GB (the default) is too little to broadcast a 1M-line
# CUR's join sides. Read when the JVM starts; a cluster sizes its own (spark_conf).
LOCAL_CONF = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
              "spark.driver.memory": os.environ.get("FINOPS_SPARK_DRIVER_MEMORY", "6g")}


def java_available() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def spark_available() -> tuple[bool, str]:
    """Whether this machine can run the Spark engine, and if not, why (for a plain skip reason)."""
    try:
        import pyspark  # noqa: F401
        import sqlglot  # noqa: F401
    except ImportError as exc:
        return False, f"the Spark extra is not installed ({exc.name}): pip install 'gpu-finops[spark]'"
    if not java_available():
        return False, "no Java runtime (java not on PATH, JAVA_HOME unset): Spark needs one (openjdk-17-jre-headless)"
    return True, ""


def get_session(master: str = DEFAULT_MASTER, conf: Mapping[str, str] | None = None, app_name: str = "gpu-finops"):
    """The process's Spark session (created once), with the settings the translation relies on."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master.startswith("sc://"):
        builder = builder.remote(master)  # Spark Connect (Databricks Connect uses its own session builder)
    else:
        builder = builder.master(master)
        for key, value in ({**LOCAL_CONF} if master.startswith("local") else {}).items():
            builder = builder.config(key, value)
    # Parquet timestamps as INT64 microseconds marked UTC: DuckDB reads them back as TIMESTAMPTZ.
    builder = builder.config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    for key, value in {**SPARK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in SPARK_CONF.items():  # a session that already existed gets them too
        spark.conf.set(key, value)
    for statement in SPARK_FUNCTIONS:
        spark.sql(statement)
    return spark


def _spark_arg(value):
    """A model parameter as a Spark SQL argument (named marker :name): lists and lists of
    records become array / array<struct> literals."""
    from pyspark.sql import functions as F

    if isinstance(value, list) and value and isinstance(value[0], dict):
        return F.array(*[F.struct(*[F.lit(v).alias(k) for k, v in item.items()]) for item in value])
    if isinstance(value, list):
        return F.array(*[F.lit(v) for v in value])
    return value


_CREATE = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(?:(TEMP|TEMPORARY)\s+)?(?:TABLE|VIEW)\s+([\w.\"]+)\s+AS\s", re.I)


def model_statements(table: str) -> list[tuple[str, str, str]]:
    """A model file's statements as (kind, name, query text), DuckDB's own split: kind is
    'temp' (CREATE TEMP TABLE name AS query), 'model' (the model's CREATE) or 'other'."""
    import duckdb

    schema, name = table.split(".")
    text = (spark_sql.SQL_DIR / schema / f"{name}.sql").read_text()
    out = []
    for statement in duckdb.extract_statements(text):
        sql = re.sub(r"^(\s*--[^\n]*\n)*", "", statement.query)
        match = _CREATE.match(sql)
        if match and match.group(2).replace('"', "").lower() == table.lower():
            out.append(("model", table, sql[match.end():].rstrip().rstrip(";")))
        elif match and match.group(1):
            out.append(("temp", match.group(2), sql[match.end():].rstrip().rstrip(";")))
        else:
            out.append(("other", "", sql))
    if [k for k, _, _ in out].count("model") != 1:
        raise ValueError(f"{table}: no single CREATE OR REPLACE TABLE|VIEW {table} AS in its file")
    return out


def model_query_text(table: str) -> str:
    """The query of `CREATE OR REPLACE TABLE <table> AS <query>`, as written (DuckDB)."""
    return next(q for kind, _, q in model_statements(table) if kind == "model")


@dataclass
class BuildStats:
    table: str
    rows: int
    seconds: float
    sql: str = ""


@dataclass
class SparkEngine:
    master: str = DEFAULT_MASTER
    lake_dir: str | None = None  # default: <warehouse>.spark-lake beside the warehouse file
    conf: dict[str, str] = field(default_factory=dict)
    # Raw tables read from the warehouse's lake in place (None: in local mode, where the driver's
    # folders are the executors' too); else exported into the engine's lake folder, as on a cluster
    # that does not mount the warehouse's lake.
    read_lake: bool | None = None
    # Tables Spark built in this run: their Parquet is read back instead of exporting them again.
    built: dict[str, str] = field(default_factory=dict)
    stats: list[BuildStats] = field(default_factory=list)

    def session(self):
        return get_session(self.master, self.conf)

    def lake(self, conn) -> Path:
        if self.lake_dir:
            return Path(self.lake_dir)
        database = conn.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()[0][0]
        return Path(database).with_name(Path(database).name.split(".staging-")[0] + ".spark-lake")

    def begin_run(self) -> None:
        """Forget what an earlier run built: its inputs may have changed since."""
        self.built.clear()
        self.stats.clear()

    # --- inputs -----------------------------------------------------------------------------

    def _export_table(self, conn, table: str, folder: Path) -> str:
        """A warehouse table as one Parquet file (raw tables with their rowid, see spark_sql.ROWID)."""
        target = folder / "inputs" / f"{table}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        schema = table.split(".")[0]
        columns = f"*, rowid AS {ROWID}" if schema == "raw" else "*"
        try:
            conn.execute(f"COPY (SELECT {columns} FROM {table}) TO '{target}' (FORMAT parquet)").fetchall()
        except Exception:
            if columns == "*":
                raise
            conn.execute(f"COPY (SELECT * FROM {table}) TO '{target}' (FORMAT parquet)").fetchall()  # a view has no rowid
        return str(target)

    def reads_lake(self) -> bool:
        """Whether raw tables are read from the warehouse's lake folder itself, rather than exported."""
        return self.read_lake if self.read_lake is not None else self.master.startswith("local")

    def _lake_frame(self, conn, table: str):
        """A raw table as Spark reads it from the lake: the Parquet of the registered file versions
        (and of a migrated pre-lake table), with the canonical columns — what the warehouse's raw
        view reads (pipelines/lake/layout.py), read by Spark in place. None where `table` is not a
        lake view (a warehouse table such as raw.files, or a raw table an older warehouse still holds)."""
        from models.schemas import RAW_TABLES, SCHEMAS
        from pipelines.lake.layout import MIGRATED, PARTITIONING, REGISTERED_VERSIONS, is_table, lake_of_connection, table_root

        kind = {name: kind for kind, name in RAW_TABLES.items()}.get(table)
        if kind is None or is_table(conn, table):
            return None
        from pyspark.sql.pandas.types import from_arrow_schema
        from pyspark.sql.types import StringType, StructField, StructType

        spark = self.session()
        root = table_root(lake_of_connection(conn), kind)
        versions = {row[0] for row in conn.execute(REGISTERED_VERSIONS).fetchall()} | {MIGRATED}
        # The version folders only, each named: a folder the registry does not name (an ingest
        # running now, or one killed) is never listed, let alone read.
        pattern = "/".join(["*"] * len(PARTITIONING[kind].columns) + ["file=*"])
        folders = sorted(str(p) for p in root.glob(pattern) if p.is_dir() and p.name.removeprefix("file=") in versions)
        columns = from_arrow_schema(SCHEMAS[kind])
        if not folders:
            return spark.createDataFrame([], columns)
        # Explicit columns, as the view's union_by_name: a file written before a column existed
        # reads it as NULL; the Hive partition columns stay strings (never inferred), then dropped.
        partitions = [StructField(name, StringType()) for name in PARTITIONING[kind].names]
        frame = spark.read.schema(StructType(list(columns.fields) + partitions)).option("basePath", str(root)).parquet(*folders)
        return frame.select(*[f"`{f.name}`" for f in columns.fields])

    def _register(self, conn, tables: set[str], inputs: Mapping[str, pa.Table], folder: Path) -> None:
        spark = self.session()
        for table in sorted(tables):
            frame = self._lake_frame(conn, table) if table not in self.built and self.reads_lake() else None
            if frame is None:
                frame = spark.read.parquet(self.built.get(table) or self._export_table(conn, table, folder))
            frame.createOrReplaceTempView(view_name(table))
        for name, arrow in inputs.items():
            target = folder / "inputs" / f"{name}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(arrow, target)
            spark.read.parquet(str(target)).createOrReplaceTempView(name)

    # --- build -----------------------------------------------------------------------------

    def translate(self, table: str, params: Mapping[str, object], query=None) -> tuple[str, dict]:
        """Spark SQL of the model's query (or of one of its statements, `query`), and its arguments.
        Stars are resolved by Spark itself: the views a query reads must be registered."""
        spark = self.session()
        model = parse_model(table)
        args = {k: _spark_arg(v) for k, v in params.items() if k in model.params}

        def columns_of(sql: str) -> list[tuple[str, str]]:
            used = {k: v for k, v in args.items() if f":{k}" in sql}
            return [(f.name, f.dataType.simpleString()) for f in spark.sql(sql, args=used or None).schema.fields]

        return transpile_query(model.query if query is None else query, columns_of), args

    def build(self, conn, table: str, params: Mapping[str, object], inputs: Mapping[str, pa.Table] | None = None) -> int:
        """Build `table` on Spark and publish it in the warehouse on `conn`. Returns its rows."""
        started = time.perf_counter()
        # A cursor of its own: the caller's connection may hold a pending result (DuckDB 2 streams),
        # which would refuse the engine's register() calls. Same database, same macros and tables.
        cursor = conn.cursor()
        try:
            return self._build(cursor, table, params, inputs, started)
        finally:
            cursor.close()

    def _run(self, sql: str, args: dict):
        return self.session().sql(sql, args={k: v for k, v in args.items() if f":{k}" in sql} or None)

    def _build(self, conn, table: str, params, inputs, started: float) -> int:
        spark = self.session()
        folder = self.lake(conn)
        model = parse_model(table)
        self._register(conn, {t for q in model.queries for t in referenced_tables(q)}, inputs or {}, folder)
        texts, temps = [], []
        try:
            for step in spark_steps(model):
                if step.kind == "drop":
                    spark.catalog.dropTempView(step.name)
                    continue
                sql, args = self.translate(table, params, step.query)
                texts.append(sql)
                df = self._run(sql, args)
                if step.kind in ("cte", "temp"):
                    # A CTE read many times (spark_sql.shared_ctes), or a temp table of the file
                    # (core.cost_lines_conformed) → a Spark temp view, materialized as Parquet once,
                    # so what reads it sees the same rows each time. A temp table's DuckDB rowid (its
                    # later statement self-joins on it) becomes a real column (ROWID,
                    # spark_sql.rw_rowid), numbered by monotonically_increasing_id: unique, not
                    # consecutive, which is all a join key needs.
                    if step.kind == "temp":
                        from pyspark.sql import functions as F

                        df = df.withColumn(ROWID, F.monotonically_increasing_id())
                    target = folder / "_temp" / table / (f"cte_{step.name}" if step.kind == "cte" else step.name)
                    df.write.mode("overwrite").parquet(str(target))
                    spark.read.parquet(str(target)).createOrReplaceTempView(step.name)
                    temps.append(step.name)
                    continue
                if ROWID in df.columns:
                    df = df.drop(ROWID)
                target = folder / table.split(".")[0] / table.split(".")[1]
                df.write.mode("overwrite").parquet(str(target))
        finally:
            for name in temps:
                spark.catalog.dropTempView(name)
        self.built[table] = str(target)
        rows = self._load(conn, table, target, params, inputs or {})
        self.stats.append(BuildStats(table, rows, time.perf_counter() - started, ";\n".join(texts)))
        return rows

    def _expected_schema(self, conn, table: str, params: Mapping[str, object], inputs: Mapping[str, pa.Table]):
        """The columns and types DuckDB gives the model: its query bound (DESCRIBE), not run. A
        temp table the model reads (core.cost_lines) is created empty with the columns DuckDB
        binds for it, and dropped after."""
        def describe(query: str):
            used = {k: v for k, v in params.items() if f"${k}" in query}
            rows = conn.execute(f"DESCRIBE {query}", used).fetchall() if used else conn.execute(f"DESCRIBE {query}").fetchall()
            return [(r[0], r[1]) for r in rows]

        for name, arrow in inputs.items():
            conn.register(name, arrow)
        temps = []
        try:
            for kind, name, query in model_statements(table):
                if kind == "temp":
                    columns = ", ".join(f'"{c}" {t}' for c, t in describe(query))
                    conn.execute(f"CREATE OR REPLACE TEMP TABLE {name} ({columns})").fetchall()
                    temps.append(name)
                elif kind == "model":
                    return describe(query)
        finally:
            for name in temps:
                conn.execute(f"DROP TABLE IF EXISTS {name}").fetchall()
            for name in inputs:
                conn.unregister(name)

    def _load(self, conn, table: str, target: Path, params, inputs) -> int:
        expected = self._expected_schema(conn, table, params, inputs)
        files = sorted(str(p) for p in Path(target).glob("*.parquet"))
        got = [c for c in pq.read_schema(files[0]).names] if files else []
        # The same columns; their order is DuckDB's (Spark puts USING keys first in `*`).
        if files and sorted(got) != sorted(name for name, _ in expected):
            raise RuntimeError(f"{table}: Spark returned columns {sorted(set(got) ^ {n for n, _ in expected})} "
                               "that DuckDB's model does not have, or lacks them")
        if files:
            # Money is never a float: a DECIMAL column of the model that Spark computed as a
            # floating type would only look right after the cast below, so it is refused.
            arrow = pq.read_schema(files[0])
            floats = [name for name, dtype in expected if dtype.startswith("DECIMAL")
                      and pa.types.is_floating(arrow.field(name).type)]
            if floats:
                raise RuntimeError(f"{table}: Spark computed DECIMAL columns {floats} as floating point")
        select = ", ".join(f'CAST("{name}" AS {dtype}) AS "{name}"' for name, dtype in expected)
        # Spark writes a sorted result as ordered part files: read in file order, keep row order.
        # A model DuckDB builds as a view (core.billing_lines) is a table when Spark built it: its
        # rows are in the Parquet Spark wrote, which a view over the spark-lake folder would tie the
        # warehouse to. CREATE OR REPLACE TABLE does not replace a view: drop it first.
        schema, name = table.split(".")
        if conn.execute("SELECT count(*) FROM duckdb_views() WHERE schema_name = ? AND view_name = ? AND NOT internal",
                        [schema, name]).fetchall()[0][0]:
            conn.execute(f"DROP VIEW {table}").fetchall()
        conn.execute("SET preserve_insertion_order = true").fetchall()
        try:
            if files:
                conn.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {select} FROM read_parquet(?)", [files]).fetchall()
            else:  # an empty result: Spark writes no data file
                nulls = ", ".join(f'NULL AS "{name}"' for name, _ in expected)
                conn.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT {select} FROM (SELECT {nulls}) WHERE false").fetchall()
        finally:
            conn.execute("SET preserve_insertion_order = false").fetchall()
        return conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def spark_steps(model) -> list:
    """The model's statements as Spark runs them: each query's CTEs read more than once first, as
    temp views of their own (spark_sql.shared_ctes), then the rest of it."""
    steps = []
    for step in model.steps or (spark_sql.Step("model", model.table, model.query),):
        if step.kind in ("model", "temp"):
            views, rest = spark_sql.shared_ctes(step.query)
            steps.extend(spark_sql.Step("cte", name, query) for name, query in views)
            step = spark_sql.Step(step.kind, step.name, rest)
        steps.append(step)
    return steps


def run_models(conn, engine: SparkEngine, settings, tables: list[str] | None = None) -> list[BuildStats]:
    """Build the SQL models (all of pipelines.orchestration.assets' SQL assets, in their dependency order) on
    Spark into the warehouse on `conn`, as the Dagster graph does with --engine spark."""
    from pipelines.warehouse.connection import prepare
    from pipelines.warehouse.models import SQL_MODELS, sql_model_order

    prepare(conn)
    engine.begin_run()
    for table in tables or sql_model_order():
        inputs = SQL_MODELS[table].inputs(settings) if SQL_MODELS[table].inputs else {}
        engine.build(conn, table, settings.sql_params(), inputs)
    return list(engine.stats)
