"""Checkpoint policies (``jax.checkpoint_policies``): which values a ``checkpoint`` saves for the backward pass.

A policy is called as ``policy(primitive, *in_avals, **params)`` for every equation of the checkpointed
function's forward computation and returns true when that equation's outputs may be saved as residuals;
what it refuses is recomputed in the backward pass from saved values and the function's inputs (JAX's
``ad_checkpoint.py``: ``saveable``/``Recompute``). The policies are small frozen objects, so a program that
holds one in its ``remat`` equation prints it by name and compares equal when built again.
"""

from __future__ import annotations

import dataclasses

from fnarray.core import primitives as P

__all__ = ["everything_saveable", "nothing_saveable", "dots_saveable", "checkpoint_dots",
           "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims", "save_only_these_names",
           "save_any_names_but_these", "save_anything_except_these_names", "save_from_both_policies",
           "offload_dot_with_no_batch_dims", "save_and_offload_only_these_names"]


@dataclasses.dataclass(frozen=True)
class _Everything:
    def __call__(self, prim, *avals, **params):
        return True

    def __repr__(self):
        return "everything_saveable"


@dataclasses.dataclass(frozen=True)
class _Nothing:
    def __call__(self, prim, *avals, **params):
        return False

    def __repr__(self):
        return "nothing_saveable"


@dataclasses.dataclass(frozen=True)
class _Dots:
    only_if_no_batch_dims: bool = False

    def __call__(self, prim, *avals, **params):
        if prim is not P.dot_general:
            return False
        if not self.only_if_no_batch_dims:
            return True
        (_, _), (lhs_batch, rhs_batch) = params["dimension_numbers"]
        return not lhs_batch and not rhs_batch

    def __repr__(self):
        return "dots_with_no_batch_dims_saveable" if self.only_if_no_batch_dims else "dots_saveable"


@dataclasses.dataclass(frozen=True)
class _Names:
    names: frozenset
    only_these: bool  # True: save the named values in ``names``; False: every named value except those

    def __call__(self, prim, *avals, **params):
        if prim is not P.name_p:
            return False
        return (params["name"] in self.names) == self.only_these

    def __repr__(self):
        what = "save_only_these_names" if self.only_these else "save_any_names_but_these"
        return f"{what}({', '.join(repr(n) for n in sorted(self.names))})"


@dataclasses.dataclass(frozen=True)
class _Both:
    first: object
    second: object

    def __call__(self, prim, *avals, **params):
        return bool(self.first(prim, *avals, **params)) or bool(self.second(prim, *avals, **params))

    def __repr__(self):
        return f"save_from_both_policies({self.first!r}, {self.second!r})"


everything_saveable = _Everything()
"""Save every value (no recomputation: ``checkpoint`` then changes nothing)."""

nothing_saveable = _Nothing()
"""Save only the checkpointed function's inputs; recompute everything else (the default, ``policy=None``)."""

dots_saveable = _Dots(False)
"""Save the results of matrix products (``dot_general``), recompute the rest."""

checkpoint_dots = dots_saveable

dots_with_no_batch_dims_saveable = _Dots(True)
"""Save the results of matrix products without batch dimensions, recompute the rest."""

checkpoint_dots_with_no_batch_dims = dots_with_no_batch_dims_saveable


def save_only_these_names(*names):
    """A policy saving the values named (``checkpoint_name(x, name)``) with one of ``names``, nothing else.

    Args:
      *names: strings (JAX's call form).
    Returns:
      the policy (hashable, printed with its names).
    """
    return _Names(frozenset(names), True)


def save_any_names_but_these(*names):
    """A policy saving every named value whose name is not in ``names``, nothing unnamed.

    Args:
      *names: strings.
    Returns:
      the policy.
    """
    return _Names(frozenset(names), False)


save_anything_except_these_names = save_any_names_but_these


def save_from_both_policies(policy_1, policy_2):
    """A policy saving what either ``policy_1`` or ``policy_2`` saves.

    Args:
      policy_1, policy_2: policies (callables ``(primitive, *avals, **params) -> bool``).
    Returns:
      the policy.
    """
    return _Both(policy_1, policy_2)


def _no_offload(what):
    def policy(*args, **kwargs):
        raise NotImplementedError(
            f"checkpoint_policies.{what} moves residuals to host memory, which fnarray does not do (its "
            "backends share one memory with the host or manage it themselves); use dots_with_no_batch_dims_saveable "
            "or save_only_these_names, which save the same values on the device")
    policy.__name__ = what
    return policy


def offload_dot_with_no_batch_dims(offload_src="device", offload_dst="pinned_host"):
    """JAX's offloading policy; raises ``NotImplementedError`` naming the policies that work."""
    return _no_offload("offload_dot_with_no_batch_dims")(offload_src, offload_dst)


def save_and_offload_only_these_names(*, names_which_can_be_saved=(), names_which_can_be_offloaded=(),
                                      offload_src="device", offload_dst="pinned_host"):
    """JAX's offloading policy; raises ``NotImplementedError`` naming the policies that work."""
    return _no_offload("save_and_offload_only_these_names")()
