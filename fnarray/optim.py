"""Gradient-based optimizers as pure (init, update) pairs over pytrees (mirrors ``optax``).

A ``GradientTransformation`` is ``(init, update)``: ``state = init(params)`` and
``updates, state = update(grads, state, params=None)``; ``apply_updates(params, updates)``
adds the updates to the parameters. Nothing is mutated, and states are pytrees of arrays
(NamedTuples), so a whole training step can be ``jit``-ed::

    opt = fnarray.optim.adam(1e-3)
    state = opt.init(params)

    @fnarray.jit
    def step(params, state, batch):
        grads = fnarray.grad(loss)(params, batch)
        updates, state = opt.update(grads, state, params)
        return fnarray.optim.apply_updates(params, updates), state

Learning rates are floats or schedules (``step -> learning rate``, the step being an
``int32`` array counting from 0); the schedules below are such functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes, lax
from fnarray.core.errors import PyTreeError

__all__ = [
    "EmptyState",
    "GradientTransformation",
    "ScaleByAdamState",
    "ScaleByRStdDevState",
    "ScaleByRmsState",
    "ScaleByScheduleState",
    "TraceState",
    "adam",
    "adamw",
    "add_decayed_weights",
    "apply_updates",
    "chain",
    "clip_by_global_norm",
    "constant_schedule",
    "cosine_decay_schedule",
    "exponential_decay",
    "global_norm",
    "identity",
    "linear_schedule",
    "momentum",
    "rmsprop",
    "scale",
    "scale_by_adam",
    "scale_by_learning_rate",
    "scale_by_rms",
    "scale_by_schedule",
    "scale_by_stddev",
    "sgd",
    "trace",
]


class GradientTransformation(NamedTuple):
    """A pure optimizer: ``init(params) -> state`` and ``update(grads, state, params=None) -> (updates, state)``."""

    init: Callable[[Any], Any]
    update: Callable[..., tuple]


class EmptyState(NamedTuple):
    """The state of a stateless transformation."""


class ScaleByScheduleState(NamedTuple):
    count: Any   # int32[]: the number of updates so far


class TraceState(NamedTuple):
    trace: Any   # pytree like the params: the momentum buffer


class ScaleByAdamState(NamedTuple):
    count: Any   # int32[]
    mu: Any      # first moments, like the params
    nu: Any      # second moments, like the params


class ScaleByRmsState(NamedTuple):
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    mu: Any
    nu: Any


# ----------------------------------------------------------------------------- helpers


def _np():
    from fnarray import numpy as fnp
    return fnp


def _tree_map(f, tree, *rest, names=None):
    """``tree_map`` whose structure mismatch names the trees (``names``, default: updates vs optimizer state)."""
    try:
        return tree_util.tree_map(f, tree, *rest)
    except ValueError as e:
        if not rest:
            raise
        names = names or ("updates", *(["the optimizer state (made by init)"] * len(rest)))
        why = tree_util.describe_mismatch(names, (tree, *rest))
        if why is None:
            raise
        raise PyTreeError(f"fnarray.optim: {why}. Pass updates (gradients) with the structure of the params that "
                          "init(params) was called with, or call init again for the new params.") from e


def _zeros_like_tree(params):
    fnp = _np()
    return _tree_map(lambda p: fnp.zeros_like(fnp.asarray(p)), params)


def _count0():
    return _np().zeros((), dtype=dtypes.int32)


def _increment(count):
    """``count + 1``, saturating at the int32 maximum instead of wrapping."""
    top = np.int32(np.iinfo(np.int32).max)
    return lax.select(lax.lt(count, top), lax.add(count, np.int32(1)), count)


def _as_dtype(v, like):
    """``v`` (an array or scalar) cast to the dtype of the array ``like``."""
    fnp = _np()
    if isinstance(v, (int, float)):
        return v
    v = fnp.asarray(v)
    return v.astype(like.dtype) if v.dtype != like.dtype else v


def _check_rate(value, name):
    if not callable(value) and not isinstance(value, (int, float, np.number)) and not hasattr(value, "dtype"):
        raise TypeError(f"{name} must be a number or a schedule (a function of the step count), "
                        f"got {type(value).__name__}")


def _bias_correction(moment, decay, count):
    """``moment / (1 - decay**count)`` leaf by leaf.

    ``1 - decay**count`` is computed as ``-expm1(count * log(decay))`` with ``log(decay)`` taken in
    float64 on the host: in float32, ``1 - 0.999`` alone would lose four digits.
    """
    fnp = _np()
    if decay == 0:
        return moment
    t = lax.convert_element_type(count, dtypes.float32)
    correction = -fnp.expm1(t * np.float32(math.log(decay)))
    return _tree_map(lambda m: m / _as_dtype(correction, m), moment)


# ----------------------------------------------------------------------------- building blocks


def identity() -> GradientTransformation:
    """Leaves the updates unchanged (mirrors ``optax.identity``)."""
    return GradientTransformation(lambda params: EmptyState(), lambda updates, state, params=None: (updates, state))


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply ``transforms`` in sequence (mirrors ``optax.chain``); the state is a tuple of their states."""
    for i, t in enumerate(transforms):
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"chain: argument {i} is a {type(t).__name__}, not a GradientTransformation")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        if not isinstance(state, tuple) or len(state) != len(transforms):
            raise ValueError(f"chain of {len(transforms)} transformations got a state that is not a tuple of "
                             f"{len(transforms)} states; pass the state made by this chain's init")
        new_states = []
        for t, s in zip(transforms, state, strict=True):
            updates, s = t.update(updates, s, params)
            new_states.append(s)
        return updates, tuple(new_states)

    return GradientTransformation(init, update)


def scale(step_size) -> GradientTransformation:
    """Multiply the updates by the scalar ``step_size`` (mirrors ``optax.scale``)."""
    def update(updates, state, params=None):
        return _tree_map(lambda u: u * _as_dtype(step_size, u), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """Multiply the updates by ``step_size_fn(count)``, ``count`` the number of earlier updates
    (mirrors ``optax.scale_by_schedule``)."""
    if not callable(step_size_fn):
        raise TypeError(f"scale_by_schedule needs a function of the step count, got {type(step_size_fn).__name__}")

    def init(params):
        return ScaleByScheduleState(count=_count0())

    def update(updates, state, params=None):
        step_size = step_size_fn(state.count)
        updates = _tree_map(lambda u: u * _as_dtype(step_size, u), updates)
        return updates, ScaleByScheduleState(count=_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate, *, flip_sign: bool = True) -> GradientTransformation:
    """Multiply by ``-learning_rate`` (a number or a schedule) (mirrors ``optax.scale_by_learning_rate``)."""
    _check_rate(learning_rate, "learning_rate")
    sign = -1.0 if flip_sign else 1.0
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
    """Momentum: ``t = g + decay * t``; the update is ``t`` (or ``g + decay * t`` with Nesterov)
    (mirrors ``optax.trace``)."""
    def init(params):
        return TraceState(trace=_zeros_like_tree(params))

    def update(updates, state, params=None):
        new_trace = _tree_map(lambda g, t: g + decay * t, updates, state.trace)
        out = _tree_map(lambda g, t: g + decay * t, updates, new_trace) if nesterov else new_trace
        return out, TraceState(trace=new_trace)

    return GradientTransformation(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0
                  ) -> GradientTransformation:
    """Adam's rescaling (Kingma and Ba 2015; mirrors ``optax.scale_by_adam``).

    ``mu = b1 mu + (1-b1) g``, ``nu = b2 nu + (1-b2) g²``, bias-corrected by ``1 - b**t``; the
    update is ``mu_hat / (sqrt(nu_hat + eps_root) + eps)``.
    """
    def init(params):
        return ScaleByAdamState(count=_count0(), mu=_zeros_like_tree(params), nu=_zeros_like_tree(params))

    def update(updates, state, params=None):
        mu = _tree_map(lambda g, m: (1 - b1) * g + b1 * m, updates, state.mu)
        nu = _tree_map(lambda g, v: (1 - b2) * (g * g) + b2 * v, updates, state.nu)
        count = _increment(state.count)
        mu_hat = _bias_correction(mu, b1, count)
        nu_hat = _bias_correction(nu, b2, count)
        fnp = _np()
        out = _tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return out, ScaleByAdamState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0) -> GradientTransformation:
    """RMSProp's rescaling: ``nu = decay nu + (1-decay) g²``, update ``g / sqrt(nu + eps)``
    (mirrors ``optax.scale_by_rms`` with its default ``eps_in_sqrt=True``)."""
    fnp = _np()

    def init(params):
        return ScaleByRmsState(nu=_tree_map(lambda p: fnp.full_like(fnp.asarray(p), initial_scale), params))

    def update(updates, state, params=None):
        nu = _tree_map(lambda g, v: (1 - decay) * (g * g) + decay * v, updates, state.nu)
        out = _tree_map(lambda g, v: g * lax.rsqrt(v + eps), updates, nu)
        return out, ScaleByRmsState(nu=nu)

    return GradientTransformation(init, update)


def scale_by_stddev(decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0) -> GradientTransformation:
    """Centered RMSProp's rescaling: ``g / sqrt(nu - mu² + eps)`` with running means ``mu`` of ``g``
    and ``nu`` of ``g²`` (mirrors ``optax.scale_by_stddev``)."""
    fnp = _np()

    def init(params):
        return ScaleByRStdDevState(mu=_zeros_like_tree(params),
                                   nu=_tree_map(lambda p: fnp.full_like(fnp.asarray(p), initial_scale), params))

    def update(updates, state, params=None):
        mu = _tree_map(lambda g, m: (1 - decay) * g + decay * m, updates, state.mu)
        nu = _tree_map(lambda g, v: (1 - decay) * (g * g) + decay * v, updates, state.nu)
        out = _tree_map(lambda g, m, v: g * lax.rsqrt(v - m * m + eps), updates, mu, nu)
        return out, ScaleByRStdDevState(mu=mu, nu=nu)

    return GradientTransformation(init, update)


def add_decayed_weights(weight_decay: float = 0.0, mask=None) -> GradientTransformation:
    """Add ``weight_decay * params`` to the updates (decoupled weight decay; mirrors
    ``optax.add_decayed_weights``). ``mask``: a pytree of bools like the params (or a function of
    the params returning one) choosing which leaves decay."""
    def update(updates, state, params=None):
        if params is None:
            raise ValueError("add_decayed_weights (and adamw) needs the params: call "
                             "update(grads, state, params)")
        m = mask(params) if callable(mask) else mask
        if m is None:
            return _tree_map(lambda u, p: u + weight_decay * p, updates, params, names=("updates", "params")), state
        return _tree_map(lambda u, p, keep: u + weight_decay * p if keep else u, updates, params, m,
                         names=("updates", "params", "mask")), state
    return GradientTransformation(lambda params: EmptyState(), update)


def global_norm(tree):
    """The l2 norm of all leaves of ``tree`` together (mirrors ``optax.global_norm``); a float scalar."""
    fnp = _np()
    leaves = tree_util.tree_leaves(tree)
    if not leaves:
        return fnp.asarray(0.0)
    total = None
    for leaf in leaves:
        s = lax.reduce_sum(fnp.asarray(leaf) * fnp.asarray(leaf), tuple(range(fnp.asarray(leaf).ndim)))
        s = lax.convert_element_type(s, dtypes.float32) if s.dtype != dtypes.float64 else s
        total = s if total is None else total + s
    return fnp.sqrt(total)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale the updates down so that their global norm is at most ``max_norm``
    (mirrors ``optax.clip_by_global_norm``)."""
    def update(updates, state, params=None):
        norm = global_norm(updates)
        limit = np.asarray(max_norm, norm.dtype)[()]
        factor = lax.select(lax.lt(norm, limit), lax.full((), 1, norm.dtype), lax.div(limit, norm))
        return _tree_map(lambda u: u * _as_dtype(factor, u), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


# ----------------------------------------------------------------------------- optimizers


def sgd(learning_rate, momentum: float | None = None, nesterov: bool = False) -> GradientTransformation:
    """Stochastic gradient descent, with optional (Nesterov) momentum (mirrors ``optax.sgd``).

    ``updates = -learning_rate * g`` or, with momentum, ``-learning_rate * t`` where
    ``t = g + momentum * t``.

    Args:
      learning_rate: a number or a schedule ``step -> rate``.
      momentum: the momentum decay, or ``None`` for plain SGD.
      nesterov: use Nesterov's momentum.
    Returns: a ``GradientTransformation``.
    Raises: ``TypeError`` for a learning rate that is neither a number nor a function.
    """
    _check_rate(learning_rate, "learning_rate")
    parts = [trace(momentum, nesterov)] if momentum is not None else []
    return chain(*parts, scale_by_learning_rate(learning_rate))


def momentum(learning_rate, beta: float = 0.9, nesterov: bool = False) -> GradientTransformation:
    """SGD with (Nesterov) momentum ``beta``: same as ``sgd(learning_rate, beta, nesterov)``."""
    return sgd(learning_rate, momentum=beta, nesterov=nesterov)


def adam(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0
         ) -> GradientTransformation:
    """Adam (Kingma and Ba 2015; mirrors ``optax.adam``).

    Args:
      learning_rate: a number or a schedule.
      b1, b2: decay rates of the first and second moments.
      eps: added to the root of the second moment; eps_root: added inside the root.
    Returns: a ``GradientTransformation`` whose state is ``(ScaleByAdamState, ...)``.
    """
    _check_rate(learning_rate, "learning_rate")
    return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate))


def adamw(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0,
          weight_decay: float = 1e-4, mask=None) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov and Hutter 2019; mirrors ``optax.adamw``).

    The update is ``-learning_rate * (adam_direction + weight_decay * params)``; ``update`` needs
    ``params``.

    Args: as ``adam``, plus ``weight_decay`` and an optional ``mask`` (see ``add_decayed_weights``).
    Returns: a ``GradientTransformation``.
    Raises: ``ValueError`` from ``update`` when ``params`` is not given.
    """
    _check_rate(learning_rate, "learning_rate")
    return chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate, decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0,
            centered: bool = False, momentum: float | None = None, nesterov: bool = False
            ) -> GradientTransformation:
    """RMSProp (Tieleman and Hinton 2012; mirrors ``optax.rmsprop``).

    ``nu = decay nu + (1-decay) g²``; the direction is ``g / sqrt(nu + eps)`` (centered:
    ``g / sqrt(nu - mu² + eps)``), optionally followed by momentum, times ``-learning_rate``.

    Returns: a ``GradientTransformation``.
    """
    _check_rate(learning_rate, "learning_rate")
    first = scale_by_stddev(decay, eps, initial_scale) if centered else scale_by_rms(decay, eps, initial_scale)
    parts = [first] + ([trace(momentum, nesterov)] if momentum is not None else [])
    return chain(*parts, scale_by_learning_rate(learning_rate))


def apply_updates(params, updates):
    """``params + updates`` leaf by leaf, keeping each parameter's dtype (mirrors ``optax.apply_updates``).

    Raises: ``PyTreeError`` (a ``ValueError``) naming both structures when the two pytrees differ.
    """
    fnp = _np()

    def add(p, u):
        p = fnp.asarray(p)
        s = p + u
        return s.astype(p.dtype) if s.dtype != p.dtype else s
    return _tree_map(add, params, updates, names=("params", "updates"))


# ----------------------------------------------------------------------------- schedules


def _step(count):
    return lax.convert_element_type(_np().asarray(count), dtypes.float32)


def constant_schedule(value: float) -> Callable:
    """``step -> value`` (mirrors ``optax.constant_schedule``)."""
    def schedule(count):
        return _np().full((), value, dtype=dtypes.float32)
    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
                    ) -> Callable:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps`` steps
    starting at ``transition_begin``, constant outside (mirrors ``optax.linear_schedule``)."""
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        fnp = _np()
        t = fnp.clip(_step(count) - transition_begin, 0.0, float(transition_steps)) / float(transition_steps)
        return init_value + (end_value - init_value) * t
    return schedule


def exponential_decay(init_value: float, transition_steps: int, decay_rate: float, transition_begin: int = 0,
                      staircase: bool = False, end_value: float | None = None) -> Callable:
    """``init_value * decay_rate ** ((step - transition_begin) / transition_steps)`` from
    ``transition_begin`` on (floored exponent with ``staircase``), bounded by ``end_value``
    (mirrors ``optax.exponential_decay``)."""
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        fnp = _np()
        p = fnp.maximum(_step(count) - transition_begin, 0.0) / float(transition_steps)
        if staircase:
            p = fnp.floor(p)
        v = init_value * fnp.power(fnp.asarray(decay_rate, dtype=dtypes.float32), p)
        if end_value is not None:
            v = fnp.maximum(v, end_value) if decay_rate < 1 else fnp.minimum(v, end_value)
        return v
    return schedule


def cosine_decay_schedule(init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
                          ) -> Callable:
    """Cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps`` steps
    (mirrors ``optax.cosine_decay_schedule``)."""
    if decay_steps <= 0:
        raise ValueError(f"cosine_decay_schedule needs decay_steps > 0, got {decay_steps}")

    def schedule(count):
        fnp = _np()
        t = fnp.minimum(_step(count), float(decay_steps)) / float(decay_steps)
        cosine = 0.5 * (1.0 + fnp.cos(math.pi * t))
        if exponent != 1.0:
            cosine = cosine ** exponent
        return init_value * ((1.0 - alpha) * cosine + alpha)
    return schedule
