"""Pallas kernels written with ``fnarray.experimental.pallas``, each checked against fnarray's own operations
(``tests/test_kernel_examples.py``, on every backend; ``docs/kernels.md`` walks through them)."""
