"""Engines that build the SQL models of `sql/`: DuckDB (the default, in pipelines/orchestration/assets.py) and
Apache Spark (pipelines/engines/spark.py, with the DuckDB → Spark translation in spark_sql.py)."""
