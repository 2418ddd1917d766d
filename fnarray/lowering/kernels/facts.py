"""What the kernel compiler knows of each primitive, in one table keyed by primitive.

``FACTS[primitive]`` is a ``KernelFact``:

- ``emit``: how it becomes kernel code: ``"func"`` (one math function of the kernel IR, named by ``func``;
  a renderer without that function leaves the primitive to its decomposition), ``"rule"`` (an element rule
  in ``rules.ELEMENTWISE``), ``"index"`` (index arithmetic in ``emitter.STRUCTURAL``), ``"group"`` (a kernel
  group of its own: a module of ``kernels/groups/`` lists it in its ``GROUPS``), ``"inline"`` (a call: its
  program is inlined) or ``"host"`` (control flow driven from the host).
- ``group``: the kernel group it joins: ``"map"`` (fused into any elementwise kernel), for a group of its own the
  name of the ``kernels/groups/`` module whose ``GROUPS`` lists it (``"reduce"``, ``"dot"``, ``"conv"``...: these
  rows are added by ``add_group_fact`` when ``schedule.py`` collects the groups), ``"call"``, ``"control"``.
- ``cost``: ``"free"`` (a view or a cast: inlined anywhere), ``"cheap"`` or ``"expensive"`` (a
  transcendental: materialised rather than recomputed under a broadcast).
- ``complex_ok``: whether its kernels accept complex operands.

Each family gives its members a default (``fnarray.core.families``); below it, one line per member says only
what differs. The scheduler's cost sets, the element rules' function names, ``ir.OPS``'s functions and the
backends' complex checks are all read from here.
"""

from __future__ import annotations

from typing import NamedTuple

from fnarray.core import families
from fnarray.core import primitives as P
from fnarray.core.fft import fft_p

__all__ = ["KernelFact", "FACTS", "funcs", "with_cost", "complex_ok", "in_group", "add_group_fact"]


class KernelFact(NamedTuple):
    emit: str
    group: str
    cost: str = "cheap"
    complex_ok: bool = False
    func: str | None = None


FACTS: dict = {}

_FAMILY_DEFAULTS = {
    "unary": KernelFact("rule", "map"),
    "binary": KernelFact("rule", "map"),
    "structural": KernelFact("index", "map", complex_ok=True),
    "reduce": KernelFact("group", "reduce"),          # the groups' own rows replace these (add_group_fact)
    "cumulative": KernelFact("group", "cumulative"),
    "control": KernelFact("host", "control"),
}
for _kind, _default in _FAMILY_DEFAULTS.items():
    families.on_family(_kind, lambda p, d=_default: FACTS.setdefault(p, d))


def _set(prims, **changes):
    for p in prims:
        FACTS[p] = FACTS[p]._replace(**changes)


# One kernel-IR math function each (OpenCL C's names); expensive but for the roundings. The primitives C's math
# library has by their own name (``Primitive.library``) from that flag, then the others.
def _func(p, name):
    FACTS[p] = FACTS[p]._replace(emit="func", func=name, cost="cheap" if name in ("floor", "ceil", "rint") else
                                 "expensive")


families.on_family("unary", lambda p: p.library and _func(p, p.name))
for _p, _f in {P.floor: "floor", P.ceil: "ceil", P.round_p: "rint", P.log2: "log2", P.rsqrt: "rsqrt",
               P.erf: "erf", P.erfc: "erfc", P.lgamma: "lgamma"}.items():
    _func(_p, _f)
# exp is an element rule (it takes complex operands), not the function.
FACTS[P.exp] = KernelFact("rule", "map")

# The members of family "other", each its own kind of kernel.
FACTS[P.select_n] = KernelFact("rule", "map", complex_ok=True)
FACTS[P.gather] = KernelFact("index", "map", complex_ok=True)
for _p in (P.call, P.remat, P.custom_jvp_call, P.custom_vjp_call):
    FACTS[_p] = KernelFact("inline", "call")

_set([P.exp, P.logistic, P.pow_p, P.erf_inv, P.digamma, P.atan2], cost="expensive")
_set([P.reshape, P.broadcast_in_dim, P.transpose, P.copy_p, P.name_p, P.stop_gradient, P.convert_element_type],
     cost="free")
# Complex operands: what the element rules expand into real arithmetic (structural ops move complex values as
# they are; of the groups, the sums, products, matrix products and additive scatters).
_set([P.add, P.sub, P.mul, P.div, P.neg, P.exp, P.abs_p, P.sign, P.real, P.imag, P.conj, P.complex_p, P.eq, P.ne,
      P.convert_element_type, P.copy_p, P.name_p, P.stop_gradient, P.reduce_sum, P.reduce_prod, P.cumsum, P.cumprod],
     complex_ok=True)
_set([P.iota], complex_ok=True)
# Of the primitives with a kernel group of their own (their rows come from the groups, below), those whose
# kernels take complex operands: the matrix products, additive scatters and the FFT.
_GROUP_COMPLEX_OK = frozenset({P.dot_general, P.scatter, P.scatter_add, P.scatter_mul, fft_p})


def add_group_fact(prim, group: str) -> None:
    """Record that ``prim`` starts a kernel of group ``group`` (a ``kernels/groups/`` module's name); called by
    ``schedule.py`` for each entry of the group modules' ``GROUPS`` (the reductions and cumulative ops keep
    their family's cost)."""
    old = FACTS.get(prim)
    cost = old.cost if old is not None else "cheap"
    FACTS[prim] = KernelFact("group", group, cost, prim in _GROUP_COMPLEX_OK or (old is not None and old.complex_ok))


def funcs() -> dict:
    """``{primitive: kernel-IR function}`` of the primitives that are one math function."""
    return {p: f.func for p, f in FACTS.items() if f.emit == "func"}


def with_cost(cost: str) -> frozenset:
    return frozenset(p for p, f in FACTS.items() if f.cost == cost)


def in_group(group: str) -> frozenset:
    """The primitives that join kernel group ``group``."""
    return frozenset(p for p, f in FACTS.items() if f.group == group)


def complex_ok() -> frozenset:
    return frozenset(p for p, f in FACTS.items() if f.complex_ok)
