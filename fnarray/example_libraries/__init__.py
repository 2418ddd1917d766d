"""``jax.example_libraries``'s two small libraries under the same names: ``optimizers`` (the
``(init, update, get_params)`` triples) and ``stax`` (layers as ``(init_fun, apply_fun)`` pairs), so
that a program written against them ports with an import change. New code may prefer ``fnarray.optim``
and ``fnarray.nn``."""
