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
from fnarray.core.errors import PyTreeError, ShapeError, check_callable

__all__ = [
    "warmup_exponential_decay_schedule",
    "warmup_cosine_decay_schedule",
    "polynomial_schedule",
    "piecewise_constant_schedule",
    "join_schedules",
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
    """A pure optimizer: ``init(params) -> state`` and ``update(grads, state, params=None) -> (updates, state)``.

    Mirrors ``optax.GradientTransformation`` (a NamedTuple of the two functions).
    """

    init: Callable[[Any], Any]
    update: Callable[..., tuple]


class EmptyState(NamedTuple):
    """The state of a stateless transformation (mirrors ``optax.EmptyState``): an empty NamedTuple."""


class ScaleByScheduleState(NamedTuple):
    """State of ``scale_by_schedule`` (mirrors ``optax.ScaleByScheduleState``):
    ``count``, ``int32[]``, the updates so far.
    """
    count: Any   # int32[]: the number of updates so far


class TraceState(NamedTuple):
    """State of ``trace`` (mirrors ``optax.TraceState``): ``trace``, the momentum buffer, a pytree like the params."""
    trace: Any   # pytree like the params: the momentum buffer


class ScaleByAdamState(NamedTuple):
    """State of ``scale_by_adam`` (mirrors ``optax.ScaleByAdamState``).

    Fields: ``count`` (``int32[]``, saturating at the int32 maximum), ``mu`` and ``nu`` (first and
    second moments, pytrees like the params).
    """
    count: Any   # int32[]
    mu: Any      # first moments, like the params
    nu: Any      # second moments, like the params


class ScaleByRmsState(NamedTuple):
    """State of ``scale_by_rms`` (mirrors ``optax.ScaleByRmsState``):
    ``nu``, the running mean of ``g²``, like the params.
    """
    nu: Any


class ScaleByRStdDevState(NamedTuple):
    """State of ``scale_by_stddev`` (mirrors ``optax.ScaleByRStdDevState``):
    running means ``mu`` of ``g`` and ``nu`` of ``g²``.
    """
    mu: Any
    nu: Any


# ----------------------------------------------------------------------------- helpers


def _np():
    from fnarray import numpy as fnp
    return fnp


def _tree_map(f, tree, *rest, names=None):
    """``tree_map`` whose structure mismatch names the trees (``names``, default: updates vs optimizer state)."""
    names = names or ("updates", *(["the optimizer state (made by init)"] * len(rest)))

    def same_shapes(path, *leaves):
        shapes = [getattr(x, "shape", np.shape(x)) for x in leaves]
        for n, sh in zip(names[1:], shapes[1:], strict=False):
            if sh != shapes[0] and sh != () and shapes[0] != ():
                raise ShapeError(f"fnarray.optim: {names[0]} has shape {tuple(shapes[0])} at "
                                 f"{tree_util.keystr(path) or 'the root'} where {n} has {tuple(sh)}. Pass updates "
                                 "(gradients) shaped like the params that init(params) was called with, or call "
                                 "init again for the new params.")
        return f(*leaves)
    try:
        if rest:
            return tree_util.tree_map_with_path(same_shapes, tree, *rest)
        return tree_util.tree_map(f, tree)
    except ValueError as e:
        if not rest or isinstance(e, ShapeError):
            raise
        why = tree_util.describe_mismatch(names, (tree, *rest))
        if why is None:
            raise
        raise PyTreeError(f"fnarray.optim: {why}. Pass updates (gradients) with the structure of the params that "
                          "init(params) was called with, or call init again for the new params.") from e


def _check_not_mlx_order(updates, state):
    """Raise where ``update`` got a model and then no optimizer state (a tuple), as MLX's
    ``optimizer.update(model, grads)`` takes them (fnarray's gradients of a model are a model too: only the
    state tells the orders apart)."""
    from fnarray.nn._module import Module
    if isinstance(updates, Module) and not isinstance(state, tuple):
        raise TypeError(f"fnarray.optim: update got a model ({type(updates).__name__}) as its first argument, as "
                        "MLX's optimizer.update(model, grads) takes it; fnarray.optim's update is optax's "
                        "update(grads, state, params): updates, state = opt.update(grads, state, params), then "
                        "params = fnarray.optim.apply_updates(params, updates) (state = opt.init(params) once)")


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


def _check_hyper(value, name, low, high=None):
    """Refuse a number hyperparameter outside ``[low, high)`` (``[low, inf)`` without ``high``) when the
    optimizer is made, as PyTorch's optimizers do: a decay of 1 divides Adam's bias correction by zero
    and a negative ``eps`` can make its denominator zero, both silent NaN otherwise. Arrays (traced or
    injected hyperparameters) are left to the caller."""
    if not isinstance(value, (int, float, np.number)) or isinstance(value, bool):
        return
    v = float(value)
    if not (v >= low and (high is None or v < high)):
        where = f"[{low}, {high})" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {where}, got {value!r}; Adam's decays are in [0, 1) (e.g. b1=0.9, "
                         "b2=0.999) and its eps/eps_root are non-negative")


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
    """Leaves the updates unchanged (mirrors ``optax.identity``).

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``EmptyState()``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      Nothing: ``update`` returns its inputs.
    """
    return GradientTransformation(lambda params: EmptyState(), lambda updates, state, params=None: (updates, state))


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply ``transforms`` in sequence (mirrors ``optax.chain``); the state is a tuple of their states.

    Args:
      *transforms: ``GradientTransformation`` s, applied left to right.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, a tuple with one state per transform;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: an argument is not a ``GradientTransformation``.
      ValueError: (from ``update``) a state that is not a tuple of one state per transform, and the
        errors of the chained transforms.
    """
    for i, t in enumerate(transforms):
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"chain: argument {i} is a {type(t).__name__}, not a GradientTransformation")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(updates, state, params=None):
        if not isinstance(state, tuple) or len(state) != len(transforms):
            _check_not_mlx_order(updates, state)
            raise ValueError(f"chain of {len(transforms)} transformations got a state that is not a tuple of "
                             f"{len(transforms)} states; pass the state made by this chain's init")
        new_states = []
        for t, s in zip(transforms, state, strict=True):
            updates, s = t.update(updates, s, params)
            new_states.append(s)
        return updates, tuple(new_states)

    return GradientTransformation(init, update)


def scale(step_size) -> GradientTransformation:
    """Multiply the updates by the scalar ``step_size`` (mirrors ``optax.scale``).

    Args:
      step_size: a Python number (keeps each update's dtype) or an array scalar (cast to it).

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``EmptyState()``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError, ShapeError: (from ``update``) mismatched pytrees; see ``tree_util.tree_map``.
    """
    def update(updates, state, params=None):
        return _tree_map(lambda u: u * _as_dtype(step_size, u), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_schedule(step_size_fn: Callable) -> GradientTransformation:
    """Multiply the updates by ``step_size_fn(count)``, ``count`` the number of earlier updates
    (mirrors ``optax.scale_by_schedule``).

    Args:
      step_size_fn: ``count -> step size``; ``count`` is an ``int32`` scalar array.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, ``ScaleByScheduleState(count=int32[])``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: ``step_size_fn`` is not callable.
    """
    check_callable(step_size_fn, "scale_by_schedule", "step_size_fn (a function of the step count)")

    def init(params):
        return ScaleByScheduleState(count=_count0())

    def update(updates, state, params=None):
        step_size = step_size_fn(state.count)
        updates = _tree_map(lambda u: u * _as_dtype(step_size, u), updates)
        return updates, ScaleByScheduleState(count=_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(learning_rate, *, flip_sign: bool = True) -> GradientTransformation:
    """Multiply by ``-learning_rate`` (a number or a schedule) (mirrors ``optax.scale_by_learning_rate``).

    Args:
      learning_rate: a number or a schedule ``count -> rate`` (``count`` an ``int32`` scalar from 0).
      flip_sign: multiply by ``-learning_rate`` (descent) rather than ``learning_rate``.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state (``EmptyState()`` for a number, ``ScaleByScheduleState`` for a schedule);
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: ``learning_rate`` is neither a number, an array nor a function.
    """
    _check_rate(learning_rate, "learning_rate")
    sign = -1.0 if flip_sign else 1.0
    if callable(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(sign * learning_rate)


def trace(decay: float, nesterov: bool = False) -> GradientTransformation:
    """Momentum: ``t = g + decay * t``; the update is ``t`` (or ``g + decay * t`` with Nesterov)
    (mirrors ``optax.trace``; Polyak 1964 heavy ball, Nesterov 1983 / Sutskever et al. 2013).

    Args:
      decay: the momentum coefficient (a Python number).
      nesterov: use Nesterov's momentum.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, ``TraceState`` with zeros like the params;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError: (from ``update``) grads whose pytree structure differs from the state's
        (the params' given to ``init``).
      ShapeError: (from ``update``) a grad whose shape does not broadcast with its state leaf.
    """
    def init(params):
        return TraceState(trace=_zeros_like_tree(params))

    def update(updates, state, params=None):
        new_trace = _tree_map(lambda g, t: g + decay * t, updates, state.trace)
        out = _tree_map(lambda g, t: g + decay * t, updates, new_trace) if nesterov else new_trace
        return out, TraceState(trace=new_trace)

    return GradientTransformation(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0, *,
                  bias_correction: bool = True) -> GradientTransformation:
    """Adam's rescaling (Kingma and Ba 2015; mirrors ``optax.scale_by_adam``).

    ``mu = b1 mu + (1-b1) g``, ``nu = b2 nu + (1-b2) g²``, bias-corrected by ``1 - b**t``; the
    update is ``mu_hat / (sqrt(nu_hat + eps_root) + eps)``.

    Args:
      b1, b2: decay rates of the first and second moments.
      eps: added to the root of the second moment.
      eps_root: added inside the root.
      bias_correction: divide the moments by ``1 - b**t`` (optax, PyTorch); ``False`` uses the raw
        moments, as ``mlx.optimizers.Adam``/``AdamW`` do by default.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, ``ScaleByAdamState`` (``count`` ``int32[]``, zeros like the params);
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError: ``b1`` or ``b2`` outside ``[0, 1)``, or a negative ``eps`` or ``eps_root``
        (PyTorch's rule; a decay of 1 divides the bias correction by zero); (from ``update``) grads
        whose pytree structure differs from the state's (the params' given to ``init``).
      ShapeError: (from ``update``) a grad whose shape does not broadcast with its state leaf.
    """
    _check_hyper(b1, "b1", 0.0, 1.0)
    _check_hyper(b2, "b2", 0.0, 1.0)
    _check_hyper(eps, "eps", 0.0)
    _check_hyper(eps_root, "eps_root", 0.0)

    def init(params):
        return ScaleByAdamState(count=_count0(), mu=_zeros_like_tree(params), nu=_zeros_like_tree(params))

    def update(updates, state, params=None):
        mu = _tree_map(lambda g, m: (1 - b1) * g + b1 * m, updates, state.mu)
        nu = _tree_map(lambda g, v: (1 - b2) * (g * g) + b2 * v, updates, state.nu)
        count = _increment(state.count)
        mu_hat = _bias_correction(mu, b1, count) if bias_correction else mu
        nu_hat = _bias_correction(nu, b2, count) if bias_correction else nu
        fnp = _np()
        out = _tree_map(lambda m, v: m / (fnp.sqrt(v + eps_root) + eps), mu_hat, nu_hat)
        return out, ScaleByAdamState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0) -> GradientTransformation:
    """RMSProp's rescaling: ``nu = decay nu + (1-decay) g²``, update ``g / sqrt(nu + eps)``
    (mirrors ``optax.scale_by_rms`` with its default ``eps_in_sqrt=True``; Tieleman and Hinton 2012).

    Args:
      decay: the decay of the running mean of ``g²``.
      eps: added inside the root.
      initial_scale: the initial value of ``nu``.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, ``ScaleByRmsState`` (``nu`` filled with ``initial_scale``, like the params);
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError: (from ``update``) grads whose pytree structure differs from the state's
        (the params' given to ``init``).
      ShapeError: (from ``update``) a grad whose shape does not broadcast with its state leaf.
    """
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
    and ``nu`` of ``g²`` (mirrors ``optax.scale_by_stddev``; Graves 2013).

    Args:
      decay: the decay of the running means.
      eps: added inside the root.
      initial_scale: the initial value of ``nu``.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, ``ScaleByRStdDevState``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError: (from ``update``) grads whose pytree structure differs from the state's
        (the params' given to ``init``).
      ShapeError: (from ``update``) a grad whose shape does not broadcast with its state leaf.
    """
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
    """Add ``weight_decay * params`` to the updates (decoupled weight decay, Loshchilov and Hutter
    2019; mirrors ``optax.add_decayed_weights``).

    Args:
      weight_decay: the coefficient (a Python number).
      mask: a pytree of bools like the params (or a function of the params returning one)
        choosing which leaves decay; ``None``: all.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``EmptyState()``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError: (from ``update``) ``params`` is not given, or pytrees whose structures differ.
    """
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
    """The l2 norm of all leaves of ``tree`` together (mirrors ``optax.global_norm``).

    Args:
      tree: a pytree of arrays; complex leaves count with their modulus ``|x|²``.

    Returns:
      A scalar: ``float64`` when any leaf is ``float64``, else ``float32`` (``0.0`` for an empty tree).

    Raises:
      Nothing of its own; a leaf that is not array-like raises ``TypeError`` from
      ``fnarray.numpy.asarray``.
    """
    fnp = _np()
    leaves = tree_util.tree_leaves(tree)
    if not leaves:
        return fnp.asarray(0.0)
    total = None
    for leaf in leaves:
        a = fnp.asarray(leaf)
        sq = fnp.real(a * fnp.conj(a)) if dtypes.is_complex(a.dtype) else a * a  # |x|², as optax
        s = lax.reduce_sum(sq, tuple(range(a.ndim)))
        s = lax.convert_element_type(s, dtypes.float32) if s.dtype != dtypes.float64 else s
        total = s if total is None else total + s
    return fnp.sqrt(total)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale the updates down so that their global norm is at most ``max_norm``
    (mirrors ``optax.clip_by_global_norm``; Pascanu et al. 2013).

    Args:
      max_norm: the largest global l2 norm of the updates (a Python number).

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``EmptyState()``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      ValueError: ``max_norm`` is not a positive number (a negative one would flip the updates' sign).
    """
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float, np.number)) or not max_norm > 0:
        raise ValueError(f"clip_by_global_norm: max_norm must be a positive number, got {max_norm!r}")

    def update(updates, state, params=None):
        norm = global_norm(updates)
        limit = np.asarray(max_norm, norm.dtype)[()]
        factor = lax.select(lax.lt(norm, limit), lax.full((), 1, norm.dtype), lax.div(limit, norm))
        return _tree_map(lambda u: u * _as_dtype(factor, u), updates), state
    return GradientTransformation(lambda params: EmptyState(), update)


# ----------------------------------------------------------------------------- optimizers


def sgd(learning_rate, momentum: float | None = None, nesterov: bool = False) -> GradientTransformation:
    """Stochastic gradient descent, with optional (Nesterov) momentum (mirrors ``optax.sgd``; Robbins and Monro 1951).

    ``updates = -learning_rate * g`` or, with momentum, ``-learning_rate * t`` where
    ``t = g + momentum * t``.

    Args:
      learning_rate: a number or a schedule ``count -> rate`` (``count`` an ``int32`` scalar from 0).
      momentum: the momentum decay, or ``None`` for plain SGD.
      nesterov: use Nesterov's momentum.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, a tuple of the chained states;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: a learning rate that is neither a number nor a function.
    """
    _check_rate(learning_rate, "learning_rate")
    parts = [trace(momentum, nesterov)] if momentum is not None else []
    return chain(*parts, scale_by_learning_rate(learning_rate))


def momentum(learning_rate, beta: float = 0.9, nesterov: bool = False) -> GradientTransformation:
    """SGD with (Nesterov) momentum ``beta``: same as ``sgd(learning_rate, beta, nesterov)`` (no optax counterpart).

    Args:
      learning_rate: a number or a schedule ``count -> rate`` (``count`` an ``int32`` scalar from 0).
      beta: the momentum decay.
      nesterov: use Nesterov's momentum.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``(TraceState, ...)``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: a learning rate that is neither a number nor a function.
    """
    return sgd(learning_rate, momentum=beta, nesterov=nesterov)


def adam(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0, *,
         bias_correction: bool = True) -> GradientTransformation:
    """Adam (Kingma and Ba 2015, "Adam: a method for stochastic optimization"; mirrors ``optax.adam``).

    Args:
      learning_rate: a number or a schedule ``count -> rate`` (``count`` an ``int32`` scalar from 0).
      b1, b2: decay rates of the first and second moments.
      eps: added to the root of the second moment.
      eps_root: added inside the root.
      bias_correction: ``False`` for ``mlx.optimizers.Adam``'s default update (no ``1 - b**t``
        correction of the moments; see ``scale_by_adam``).

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``(ScaleByAdamState, EmptyState | ScaleByScheduleState)``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: a learning rate that is neither a number nor a function.
      ValueError: decays or eps out of range (see ``scale_by_adam``); (from ``update``) grads whose
        pytree structure differs from the state's (the params' given to ``init``).
      ShapeError: (from ``update``) a grad whose shape does not broadcast with its state leaf.
    """
    _check_rate(learning_rate, "learning_rate")
    return chain(scale_by_adam(b1, b2, eps, eps_root, bias_correction=bias_correction),
                 scale_by_learning_rate(learning_rate))


def adamw(learning_rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, eps_root: float = 0.0,
          weight_decay: float = 1e-4, mask=None, *, bias_correction: bool = True) -> GradientTransformation:
    """Adam with decoupled weight decay (Loshchilov and Hutter 2019; mirrors ``optax.adamw``).

    The update is ``-learning_rate * (adam_direction + weight_decay * params)``; ``update`` needs
    ``params``.

    Args:
      learning_rate: a number or a schedule ``count -> rate`` (``count`` an ``int32`` scalar from 0).
      b1, b2, eps, eps_root, bias_correction: as ``adam``.
      weight_decay: the decoupled decay coefficient.
      mask: which leaves decay (see ``add_decayed_weights``).

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state ``(ScaleByAdamState, EmptyState, EmptyState | ScaleByScheduleState)``;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: a learning rate that is neither a number nor a function.
      ValueError: decays or eps out of range (see ``scale_by_adam``); (from ``update``) ``params`` is
        not given.
    """
    _check_rate(learning_rate, "learning_rate")
    return chain(scale_by_adam(b1, b2, eps, eps_root, bias_correction=bias_correction),
                 add_decayed_weights(weight_decay, mask),
                 scale_by_learning_rate(learning_rate))


def rmsprop(learning_rate, decay: float = 0.9, eps: float = 1e-8, initial_scale: float = 0.0,
            centered: bool = False, momentum: float | None = None, nesterov: bool = False
            ) -> GradientTransformation:
    """RMSProp (Tieleman and Hinton 2012, Coursera lecture 6.5; mirrors ``optax.rmsprop``).

    ``nu = decay nu + (1-decay) g²``; the direction is ``g / sqrt(nu + eps)`` (centered:
    ``g / sqrt(nu - mu² + eps)``), optionally followed by momentum, times ``-learning_rate``.

    Args:
      learning_rate: a number or a schedule ``count -> rate`` (``count`` an ``int32`` scalar from 0).
      decay: the decay of the running mean of ``g²``.
      eps: added inside the root.
      initial_scale: the initial value of the running mean.
      centered: subtract the squared running mean of ``g`` (Graves 2013).
      momentum: optional momentum decay applied after the rescaling; nesterov: Nesterov's.

    Returns:
      A ``GradientTransformation``: ``init(params)`` returns the
      state, a tuple of the chained states;
      ``update(grads, state, params=None)`` returns ``(updates, new_state)``, the updates
      with the grads' structure, shapes and dtypes.

    Raises:
      TypeError: a learning rate that is neither a number nor a function.
    """
    _check_rate(learning_rate, "learning_rate")
    first = scale_by_stddev(decay, eps, initial_scale) if centered else scale_by_rms(decay, eps, initial_scale)
    parts = [first] + ([trace(momentum, nesterov)] if momentum is not None else [])
    return chain(*parts, scale_by_learning_rate(learning_rate))


def apply_updates(params, updates):
    """``params + updates`` leaf by leaf, keeping each parameter's dtype (mirrors ``optax.apply_updates``).

    Args:
      params: a pytree of arrays (or array-likes).
      updates: a pytree of the same structure, each leaf broadcastable to its parameter.

    Returns:
      The new params: same structure, each leaf ``params + updates`` cast back to the
      parameter's dtype.

    Raises:
      PyTreeError: (a ``ValueError``) the two pytrees have different structures; names both.
      ShapeError: a leaf of ``updates`` does not broadcast with its parameter.
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
    """``step -> value`` (mirrors ``optax.constant_schedule``).

    Args:
      value: the constant learning rate.

    Returns:
      ``schedule(count) -> float32[]``; ``count`` is ignored.

    Raises:
      Nothing.
    """
    def schedule(count):
        return _np().full((), value, dtype=dtypes.float32)
    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int, transition_begin: int = 0
                    ) -> Callable:
    """Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps`` steps
    starting at ``transition_begin``, constant outside (mirrors ``optax.linear_schedule``).

    Args:
      init_value, end_value: the values before and after the transition.
      transition_steps: its length; ``<= 0`` gives ``constant_schedule(init_value)``.
      transition_begin: the step it starts at.

    Returns:
      ``schedule(count) -> float32[]``: ``count`` is an integer scalar or array (step numbers from
      0); the result has ``count``'s shape.

    Raises:
      Nothing of its own; the schedule raises ``TypeError`` for a ``count`` that is not array-like.
    """
    return polynomial_schedule(init_value, end_value, 1.0, transition_steps, transition_begin)  # optax's definition


def exponential_decay(init_value: float, transition_steps: int, decay_rate: float, transition_begin: int = 0,
                      staircase: bool = False, end_value: float | None = None) -> Callable:
    """``init_value * decay_rate ** ((step - transition_begin) / transition_steps)`` from
    ``transition_begin`` on (floored exponent with ``staircase``), bounded by ``end_value``
    (mirrors ``optax.exponential_decay``).

    Args:
      init_value: the value up to ``transition_begin``.
      transition_steps: the steps per factor of ``decay_rate``; ``<= 0`` gives
        ``constant_schedule(init_value)``.
      decay_rate: the factor per ``transition_steps``.
      transition_begin: the step decay starts at.
      staircase: decay in whole steps of ``transition_steps``.
      end_value: a lower bound (an upper bound when ``decay_rate > 1``), or ``None``.

    Returns:
      ``schedule(count) -> float32[]``: ``count`` is an integer scalar or array (step numbers from
      0); the result has ``count``'s shape.

    Raises:
      Nothing of its own; the schedule raises ``TypeError`` for a ``count`` that is not array-like.
    """
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
    (mirrors ``optax.cosine_decay_schedule``; Loshchilov and Hutter 2017, SGDR).

    Args:
      init_value: the value at step 0.
      decay_steps: the steps to decay over (> 0); later steps keep the final value.
      alpha: the final value as a fraction of ``init_value``.
      exponent: the power applied to the cosine factor.

    Returns:
      ``schedule(count) -> float32[]``: ``count`` is an integer scalar or array (step numbers from
      0); the result has ``count``'s shape.

    Raises:
      ValueError: ``decay_steps <= 0``.
    """
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


def polynomial_schedule(init_value: float, end_value: float, power: float, transition_steps: int,
                        transition_begin: int = 0) -> Callable:
    """``(init_value - end_value) * (1 - t / transition_steps) ** power + end_value`` with ``t`` the steps since
    ``transition_begin``, clipped to ``[0, transition_steps]`` (mirrors ``optax.polynomial_schedule``).

    Args:
      init_value, end_value: the values before and after the transition.
      power: the polynomial's power (1 is ``linear_schedule``).
      transition_steps: its length; ``<= 0`` gives ``constant_schedule(init_value)`` (as optax).
      transition_begin: the step it starts at.

    Returns:
      ``schedule(count) -> float32[]`` of ``count``'s shape.

    Raises:
      Nothing of its own; the schedule raises ``TypeError`` for a ``count`` that is not array-like.
    """
    if transition_steps <= 0:
        return constant_schedule(init_value)

    def schedule(count):
        fnp = _np()
        t = fnp.clip(_step(count) - transition_begin, 0.0, float(transition_steps))
        frac = 1.0 - t / float(transition_steps)
        return (init_value - end_value) * (frac if power == 1 else frac ** power) + end_value
    return schedule


def piecewise_constant_schedule(init_value: float, boundaries_and_scales: dict | None = None) -> Callable:
    """``init_value`` times the product of the scales whose boundary the step has reached
    (mirrors ``optax.piecewise_constant_schedule``: at ``count == boundary`` the scale applies).

    Args:
      init_value: the value before the first boundary.
      boundaries_and_scales: ``{step: scale}``, scales non-negative, or None (a constant).

    Returns:
      ``schedule(count) -> float32[]`` of ``count``'s shape.

    Raises:
      ValueError: a scale is negative (as optax).
    """
    items = sorted((boundaries_and_scales or {}).items())
    if any(s < 0 for _, s in items):
        raise ValueError(f"piecewise_constant_schedule expects non-negative scale factors, got "
                         f"{dict(items)}; a negative learning rate is a sign flip: use scale(-1.0) in a chain")

    def schedule(count):
        fnp = _np()
        step = _step(count)
        v = fnp.full(step.shape, init_value, dtype=dtypes.float32)
        for boundary, s in items:
            v = fnp.where(step >= boundary, v * s, v)
        return v
    return schedule


def join_schedules(schedules, boundaries) -> Callable:
    """``schedules[i]`` from ``boundaries[i-1]`` on, each called with the steps since its boundary
    (mirrors ``optax.join_schedules``).

    Args:
      schedules: ``len(boundaries) + 1`` schedules.
      boundaries: increasing step numbers.

    Returns:
      ``schedule(count) -> float32[]`` of ``count``'s shape.

    Raises:
      ValueError: ``len(schedules) != len(boundaries) + 1``.
    """
    schedules, boundaries = list(schedules), list(boundaries)
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(f"join_schedules needs one schedule more than boundaries, got {len(schedules)} "
                         f"schedules and {len(boundaries)} boundaries")

    def schedule(count):
        fnp = _np()
        step = fnp.asarray(count)
        out = schedules[0](step)
        for boundary, f in zip(boundaries, schedules[1:], strict=True):
            out = fnp.where(step < boundary, out, f(step - boundary))
        return out
    return schedule


def warmup_cosine_decay_schedule(init_value: float, peak_value: float, warmup_steps: int, decay_steps: int,
                                 end_value: float = 0.0, exponent: float = 1.0) -> Callable:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then cosine decay to
    ``end_value`` at step ``decay_steps`` (the total, warmup included) (mirrors
    ``optax.warmup_cosine_decay_schedule``).

    Args:
      init_value, peak_value, end_value: the values at 0, at ``warmup_steps`` and from ``decay_steps`` on.
      warmup_steps: the warmup's length.
      decay_steps: the schedule's total length (``> warmup_steps``).
      exponent: the power applied to the cosine factor.

    Returns:
      ``schedule(count) -> float32[]`` of ``count``'s shape.

    Raises:
      ValueError: ``decay_steps <= warmup_steps``.
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent)],
                          [warmup_steps])


def warmup_exponential_decay_schedule(init_value: float, peak_value: float, warmup_steps: int,
                                      transition_steps: int, decay_rate: float, transition_begin: int = 0,
                                      staircase: bool = False, end_value: float | None = None) -> Callable:
    """Linear warmup from ``init_value`` to ``peak_value`` over ``warmup_steps``, then
    ``exponential_decay(peak_value, ...)`` counted from the warmup's end (mirrors
    ``optax.warmup_exponential_decay_schedule``).

    Args:
      init_value, peak_value: the values at 0 and at ``warmup_steps``.
      warmup_steps: the warmup's length.
      transition_steps, decay_rate, transition_begin, staircase, end_value: as ``exponential_decay``.

    Returns:
      ``schedule(count) -> float32[]`` of ``count``'s shape.

    Raises:
      Nothing of its own.
    """
    return join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
                           exponential_decay(peak_value, transition_steps, decay_rate, transition_begin,
                                             staircase, end_value)],
                          [warmup_steps])


# ----------------------------------------------------------------------------- mlx.optimizers' names
#
# MLX's optimizers are classes whose ``update(model, grads)`` changes the model in place; fnarray's are pure
# ``GradientTransformation``s. These classes take MLX's arguments and defaults and are those transformations
# (``opt.init(params)``, ``opt.update(grads, state, params)``, then ``apply_updates``): the port keeps the
# constructor line and replaces ``optimizer.update(model, grads)`` by two lines (docs/from_mlx.md).


class SGD(GradientTransformation):
    """``mlx.optimizers.SGD(learning_rate, momentum=0.0, weight_decay=0.0, dampening=0.0, nesterov=False)``.

    ``v = momentum * v + (1 - dampening) * (g + weight_decay * p)``; the step is ``v`` (or
    ``g + weight_decay * p + momentum * v`` with ``nesterov``); without momentum, the gradient itself.

    Returns (constructing): a ``GradientTransformation``.
    Raises: ``ValueError`` for ``nesterov`` with ``dampening`` or without momentum (as MLX and PyTorch).
    """

    __slots__ = ()

    def __new__(cls, learning_rate, momentum: float = 0.0, weight_decay: float = 0.0, dampening: float = 0.0,
                nesterov: bool = False):
        _check_rate(learning_rate, "learning_rate")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening == 0 (MLX's rule)")
        parts = [add_decayed_weights(weight_decay)] if weight_decay else []
        if momentum:
            if dampening:
                parts.append(scale(1.0 - dampening))
            parts.append(trace(momentum, nesterov))
        t = chain(*parts, scale_by_learning_rate(learning_rate))
        return super().__new__(cls, t.init, t.update)


class Adam(GradientTransformation):
    """``mlx.optimizers.Adam(learning_rate, betas=(0.9, 0.999), eps=1e-8, bias_correction=False)``
    (Kingma & Ba, 2015; MLX's default leaves the moments without bias correction).

    Returns (constructing): a ``GradientTransformation`` (``adam(learning_rate, *betas, eps,
    bias_correction=bias_correction)``).
    """

    __slots__ = ()

    def __new__(cls, learning_rate, betas=(0.9, 0.999), eps: float = 1e-8, bias_correction: bool = False):
        b1, b2 = betas
        t = adam(learning_rate, b1, b2, eps, bias_correction=bias_correction)
        return super().__new__(cls, t.init, t.update)


class AdamW(GradientTransformation):
    """``mlx.optimizers.AdamW(learning_rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
    bias_correction=False)`` (Loshchilov & Hutter, 2019): ``p * (1 - lr * weight_decay)`` then Adam's step.

    Returns (constructing): a ``GradientTransformation`` (``adamw`` with these arguments).
    """

    __slots__ = ()

    def __new__(cls, learning_rate, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01,
                bias_correction: bool = False):
        b1, b2 = betas
        t = adamw(learning_rate, b1, b2, eps, weight_decay=weight_decay, bias_correction=bias_correction)
        return super().__new__(cls, t.init, t.update)


__all__ += ["SGD", "Adam", "AdamW"]
