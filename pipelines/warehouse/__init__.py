"""The DuckDB warehouse: connections and SQL files, publishing runs, run state, table docs, FOCUS checks."""
