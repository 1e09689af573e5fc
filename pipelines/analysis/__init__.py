"""Analyses written back to the warehouse from Python: anomaly episodes and purchasing (TCO)."""
