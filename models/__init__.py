"""Canonical schemas, reference data and the analytic models that are code rather than SQL."""
