"""Core: dtypes, shapes, the IR, primitives and the tracing machinery (imports nothing above it)."""
