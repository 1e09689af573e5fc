"""Connectors: one module per source format, each reading files into a canonical Arrow schema.

Connectors know nothing of Dagster or of warehouse tables. They are found through the registry
(`connectors.registry`), which third-party packages extend with the `gpu_finops.connectors`
entry-point group.
"""

from connectors.base import Connector, ConnectorError, ReadContext

__all__ = ["Connector", "ConnectorError", "ReadContext"]
