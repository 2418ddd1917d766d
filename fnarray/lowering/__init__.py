"""Lowerings: one module per backend, each a table keyed by primitive (imported lazily)."""
