"""Shape-polymorphic eager calls: a backend's own rules for namespace functions on concrete arrays of any shape.

An eager call of ``fnarray.numpy``'s functions is keyed by its arrays' avals (``fnarray.transforms.eager_jit``):
each new shape takes the general path once (its primitives' eager misses, its record), however cheap the
backend's own operation is. A loop whose shapes grow (a decode loop's cache) then pays that at every step: on
mlx:0, whose operations are lazy graph nodes that take any shape, ~450 Python calls a step against raw MLX's
~30 (issue 28). A backend whose operations need no per-shape work registers here, by the namespace function's
qualified name (``"fnarray.numpy.exp"``), a rule ``rule(args, kwargs) -> ArrayImpl | None`` that computes the
call directly on its devices' buffers where it can tell from the arguments alone (dtypes, ranks, static
arguments) that the general path would run the same operations, and returns None everywhere else (the call then
takes the keyed path unchanged). ``eager_jit``'s wrapper asks the rule first, while no thread stages anything,
the profiler and ``debug_nans``/``debug_infs`` are off and no eager call is being recorded (``eager_tape``).

The one backend with rules is mlx (``fnarray.lowering.mlx.shapeless``, registered when its backend is made).
"""

from __future__ import annotations

__all__ = ["RULES", "SERVED", "register"]

#: qualified name of a namespace function -> its rule (one registry for all backends: a backend's rule returns
#: None for another backend's arrays, and a second backend's rule for the same name is asked after the first)
RULES: dict = {}

#: id(device) -> the dtypes whose arrays the rules of its backend take (``eager_ops``' operators leave such arrays
#: to the namespace functions at once: their per-aval entries would be learned for each new shape)
SERVED: dict = {}


def register(rules: dict, devices=(), dtypes=frozenset()) -> None:
    """Add ``{qualified name: rule}`` to ``RULES`` (a name that has a rule already asks both, the older first),
    and ``dtypes`` to what the rules serve on each of ``devices`` (``SERVED``)."""
    for d in devices:
        SERVED[id(d)] = SERVED.get(id(d), frozenset()) | frozenset(dtypes)
    for name, rule in rules.items():
        old = RULES.get(name)
        RULES[name] = rule if old is None or old is rule else _either(old, rule)


def _either(first, second):
    def rule(args, kwargs):
        out = first(args, kwargs)
        return second(args, kwargs) if out is None else out
    return rule
