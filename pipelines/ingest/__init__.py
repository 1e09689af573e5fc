"""Landing files into the lake and the registry, through the connectors; reference data (FX)."""
