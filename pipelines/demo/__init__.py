"""The bundled demo scenario."""
