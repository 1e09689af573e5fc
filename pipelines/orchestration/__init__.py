"""The Dagster code location: assets, checks, schedules and sensors, and the in-process runner."""
