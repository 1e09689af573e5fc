"""The Dagster code location of gpu-finops and its `finops` command line."""
