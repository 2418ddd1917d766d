"""Optimizers as ``(init_fun, update_fun, get_params)`` triples (mirrors ``jax.example_libraries.optimizers``).

Each constructor returns an ``Optimizer`` named tuple of three functions over pytrees of arrays:

- ``init_fun(params)`` -> ``OptimizerState``: the parameters and the optimizer's per-leaf statistics;
- ``update_fun(step, grads, opt_state)`` -> ``OptimizerState``: one step with the gradients ``grads``
  (a pytree of the parameters' structure) at the integer step index ``step``;
- ``get_params(opt_state)`` -> the parameters' pytree.

``OptimizerState`` holds the flattened per-leaf states, the parameters' tree definition and each leaf
state's tree definition, as JAX's, so states are pytrees that pass through ``jit`` and ``scan``, and
``unpack_optimizer_state``/``pack_optimizer_state`` convert them to and from a plain nested pytree (for
checkpoints). The update formulas and their order of operations are JAX's, so a training loop prints the
same numbers. ``step_size`` is a number or a schedule (a function of the step index); the schedules of
this module build the usual ones.
"""

from __future__ import annotations

import functools
import warnings
from collections import namedtuple
from typing import Any, Callable, NamedTuple

import fnarray.numpy as fnp
from fnarray import tree_util

__all__ = ["JoinPoint", "Optimizer", "OptimizerState", "adagrad", "adam", "adamax", "clip_grads", "constant",
           "exponential_decay", "inverse_time_decay", "l2_norm", "make_schedule", "momentum", "nesterov",
           "optimizer", "pack_optimizer_state", "piecewise_constant", "polynomial_decay", "rmsprop",
           "rmsprop_momentum", "sgd", "sm3", "unpack_optimizer_state"]

OptimizerState = namedtuple("OptimizerState", ["packed_state", "tree_def", "subtree_defs"])
OptimizerState.__doc__ = """An optimizer's state: ``packed_state`` (one flat list of arrays per parameter leaf),
``tree_def`` (the parameters' tree) and ``subtree_defs`` (each leaf state's tree). A pytree whose
children are the packed states and whose auxiliary data are the two tree definitions."""

with warnings.catch_warnings():
    # optree warns that namedtuples are nodes already; this registration (JAX's) replaces that one
    warnings.simplefilter("ignore", UserWarning)
    tree_util.register_pytree_node(
        OptimizerState,
        lambda s: ((s.packed_state,), (s.tree_def, s.subtree_defs)),
        lambda aux, children: OptimizerState(children[0], aux[0], aux[1]))

Schedule = Callable[[Any], Any]


class Optimizer(NamedTuple):
    """The triple an optimizer constructor returns (unpacks as ``init, update, get_params``)."""
    init_fn: Callable
    update_fn: Callable
    params_fn: Callable


def _flatten_states(states):
    pairs = [tree_util.tree_flatten(s) for s in states]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def optimizer(opt_maker):
    """Lift an optimizer written for one array to pytrees of arrays (mirrors JAX's ``optimizer`` decorator).

    Args:
      opt_maker: a function returning ``(init, update, get_params)`` that work on a single array:
        ``init(x0) -> state`` (any pytree), ``update(i, g, state) -> state`` of the same structure,
        ``get_params(state) -> x``.
    Returns:
      a function of the same arguments returning an ``Optimizer`` whose functions take pytrees of
      parameters and an ``OptimizerState``.
    Raises (from the returned functions):
      TypeError: ``update_fun`` given gradients whose tree differs from the parameters', or a per-leaf
        ``update`` that changes its state's structure.
    """
    @functools.wraps(opt_maker)
    def tree_opt_maker(*args, **kwargs):
        init, update, get_params = opt_maker(*args, **kwargs)

        @functools.wraps(init)
        def tree_init(x0_tree):
            leaves, treedef = tree_util.tree_flatten(x0_tree)
            flat, subtrees = _flatten_states([init(x0) for x0 in leaves])
            return OptimizerState(flat, treedef, subtrees)

        @functools.wraps(update)
        def tree_update(i, grad_tree, opt_state):
            flat, treedef, subtrees = opt_state
            grads, grad_def = tree_util.tree_flatten(grad_tree)
            if grad_def != treedef:
                raise TypeError(f"optimizer update function was passed a gradient tree {grad_def} that does not "
                                f"match the parameter tree {treedef} it was initialized with; pass gradients "
                                "of the parameters returned by get_params")
            states = [tree_util.tree_unflatten(d, s) for d, s in zip(subtrees, flat)]
            new_flat, new_subtrees = _flatten_states([update(i, g, s) for g, s in zip(grads, states)])
            for before, after in zip(subtrees, new_subtrees):
                if before != after:
                    raise TypeError(f"optimizer update function changed a leaf state's structure from {before} "
                                    f"to {after}; update must return a state of its input's structure")
            return OptimizerState(new_flat, treedef, subtrees)

        @functools.wraps(get_params)
        def tree_get_params(opt_state):
            flat, treedef, subtrees = opt_state
            params = [get_params(tree_util.tree_unflatten(d, s)) for d, s in zip(subtrees, flat)]
            return tree_util.tree_unflatten(treedef, params)

        return Optimizer(tree_init, tree_update, tree_get_params)

    return tree_opt_maker


def _first(state):
    return state[0]


@optimizer
def sgd(step_size):
    """Stochastic gradient descent: ``x - step_size(i) * g``. The state of a leaf is the leaf itself.

    Args:
      step_size: a positive number or a schedule ``i -> number``.
    Returns:
      an ``Optimizer`` (``init_fun, update_fun, get_params``).
    """
    step_size = make_schedule(step_size)
    return Optimizer(lambda x0: x0, lambda i, g, x: x - step_size(i) * g, lambda x: x)


def _heavy_ball(step_size, mass, lookahead):
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0)

    def update(i, g, state):
        x, velocity = state
        velocity = mass * velocity + g
        direction = mass * velocity + g if lookahead else velocity
        return x - step_size(i) * direction, velocity

    return init, update, _first


@optimizer
def momentum(step_size, mass: float):
    """Gradient descent with momentum (Polyak's heavy ball): ``v = mass * v + g``, ``x -= step_size(i) * v``.

    Args:
      step_size: a positive number or a schedule.
      mass: the momentum coefficient.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, velocity)``.
    """
    return _heavy_ball(step_size, mass, lookahead=False)


@optimizer
def nesterov(step_size, mass: float):
    """Nesterov's accelerated gradient: ``v = mass * v + g``, ``x -= step_size(i) * (mass * v + g)``.

    Args:
      step_size: a positive number or a schedule.
      mass: the momentum coefficient.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, velocity)``.
    """
    return _heavy_ball(step_size, mass, lookahead=True)


@optimizer
def adagrad(step_size, momentum=0.9):
    """Adagrad with momentum (Duchi, Hazan and Singer 2011, "Adaptive subgradient methods").

    Args:
      step_size: a positive number or a schedule.
      momentum: the momentum applied to the normalised gradient.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, sum of squared gradients, momentum)``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, g_sq, m = state
        g_sq = g_sq + fnp.square(g)
        inv_root = fnp.where(g_sq > 0, 1. / fnp.sqrt(g_sq), 0.0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        return x - step_size(i) * m, g_sq, m

    return init, update, _first


@optimizer
def rmsprop(step_size, gamma=0.9, eps=1e-8):
    """RMSProp (Tieleman and Hinton 2012): ``x -= step_size(i) * g / sqrt(avg(g**2) + eps)``.

    Args:
      step_size: a positive number or a schedule.
      gamma: the decay of the running average of squared gradients.
      eps: added under the square root.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, average squared gradient)``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq = state
        avg_sq = avg_sq * gamma + fnp.square(g) * (1. - gamma)
        return x - step_size(i) * g / fnp.sqrt(avg_sq + eps), avg_sq

    return init, update, _first


@optimizer
def rmsprop_momentum(step_size, gamma=0.9, eps=1e-8, momentum=0.9):
    """RMSProp with momentum on the scaled step.

    Args:
      step_size: a positive number or a schedule.
      gamma: the decay of the running average of squared gradients.
      eps: added under the square root.
      momentum: the momentum of the step.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, average squared gradient, momentum)``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, avg_sq, mom = state
        avg_sq = avg_sq * gamma + fnp.square(g) * (1. - gamma)
        mom = momentum * mom + step_size(i) * g / fnp.sqrt(avg_sq + eps)
        return x - mom, avg_sq, mom

    return init, update, _first


def _bias_correction(b, dtype, i):
    return 1 - fnp.asarray(b, dtype) ** (i + 1)


@optimizer
def adam(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """Adam (Kingma and Ba 2015, "Adam: a method for stochastic optimization") with bias correction.

    Args:
      step_size: a positive number or a schedule.
      b1, b2: the decay rates of the first and second moment estimates.
      eps: added to the root of the second moment.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, m, v)``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        m = (1 - b1) * g + b1 * m
        v = (1 - b2) * fnp.square(g) + b2 * v
        m_hat = m / _bias_correction(b1, m.dtype, i)
        v_hat = v / _bias_correction(b2, m.dtype, i)
        return x - step_size(i) * m_hat / (fnp.sqrt(v_hat) + eps), m, v

    return init, update, _first


@optimizer
def adamax(step_size, b1=0.9, b2=0.999, eps=1e-8):
    """AdaMax, Adam's infinity-norm variant (Kingma and Ba 2015, section 7).

    Args:
      step_size: a positive number or a schedule.
      b1: the decay rate of the first moment; b2: of the infinity norm.
      eps: added to the norm.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x, m, u)``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        return x0, fnp.zeros_like(x0), fnp.zeros_like(x0)

    def update(i, g, state):
        x, m, u = state
        m = (1 - b1) * g + b1 * m
        u = fnp.maximum(b2 * u, fnp.abs(g))
        x = x - (step_size(i) / _bias_correction(b1, m.dtype, i)) * m / (u + eps)
        return x, m, u

    return init, update, _first


def _expand_along(ndim, v, axis):
    index = [None] * ndim
    index[axis:axis + 1] = [slice(None)]   # a 0-d gradient of a leaf kept 1-d still indexes v whole
    return v[tuple(index)]


@optimizer
def sm3(step_size, momentum=0.9):
    """SM3 (Anil, Gupta, Koren and Singer 2019, "Memory-efficient adaptive optimization"): one accumulator
    per axis of each leaf instead of one per element.

    Args:
      step_size: a positive number or a schedule.
      momentum: the momentum of the normalised gradient.
    Returns:
      an ``Optimizer``; a leaf's state is ``(x as at least 1-d, m, [one accumulator per axis], x's shape)``.
    """
    step_size = make_schedule(step_size)

    def init(x0):
        shape = x0.shape
        x0 = fnp.atleast_1d(x0)
        return x0, fnp.zeros_like(x0), [fnp.zeros(n, dtype=x0.dtype) for n in x0.shape], shape

    def update(i, g, state):
        x, m, vs, shape = state
        expanded = [_expand_along(g.ndim, v, axis) for axis, v in enumerate(vs)]
        accum = functools.reduce(fnp.minimum, expanded) + fnp.square(g)
        inv_root = fnp.where(accum > 0, 1. / fnp.sqrt(accum), 0)
        m = (1. - momentum) * (g * inv_root) + momentum * m
        x = x - step_size(i) * m
        vs = [accum.max(tuple(a for a in range(x.ndim) if a != axis)) for axis in range(x.ndim)]
        return x, m, vs, shape

    def get_params(state):
        return state[0].reshape(state[3])

    return init, update, get_params


# ----------------------------------------------------------------------------- schedules


def constant(step_size) -> Schedule:
    """The schedule ``i -> step_size``."""
    return lambda i: step_size


def exponential_decay(step_size, decay_steps, decay_rate) -> Schedule:
    """The schedule ``i -> step_size * decay_rate ** (i / decay_steps)``."""
    return lambda i: step_size * decay_rate ** (i / decay_steps)


def inverse_time_decay(step_size, decay_steps, decay_rate, staircase=False) -> Schedule:
    """The schedule ``i -> step_size / (1 + decay_rate * i / decay_steps)``; with ``staircase``, the ratio
    ``i / decay_steps`` is floored."""
    if staircase:
        return lambda i: step_size / (1 + decay_rate * fnp.floor(i / decay_steps))
    return lambda i: step_size / (1 + decay_rate * i / decay_steps)


def polynomial_decay(step_size, decay_steps, final_step_size, power=1.0) -> Schedule:
    """From ``step_size`` to ``final_step_size`` over ``decay_steps`` steps along ``(1 - t) ** power``, then
    constant."""
    def schedule(i):
        i = fnp.minimum(i, decay_steps)
        return (1 - i / decay_steps) ** power * (step_size - final_step_size) + final_step_size
    return schedule


def piecewise_constant(boundaries, values) -> Schedule:
    """``values[k]`` for steps ``i`` with exactly ``k`` boundaries below ``i``.

    Args:
      boundaries: a sequence of ``n`` step indices (increasing).
      values: a sequence of ``n + 1`` values.
    Raises:
      ValueError: the two are not sequences, or ``len(values) != len(boundaries) + 1``.
    """
    boundaries, values = fnp.array(boundaries), fnp.array(values)
    if not boundaries.ndim == values.ndim == 1:
        raise ValueError(f"piecewise_constant needs two sequences, got boundaries of shape {boundaries.shape} "
                         f"and values of shape {values.shape}")
    if boundaries.shape[0] != values.shape[0] - 1:
        raise ValueError(f"piecewise_constant needs one value more than boundaries, got {boundaries.shape[0]} "
                         f"boundaries and {values.shape[0]} values")
    return lambda i: values[fnp.sum(i > boundaries)]


def make_schedule(scalar_or_schedule) -> Schedule:
    """A schedule from a number (``constant``) or a schedule (returned as is).

    Raises:
      TypeError: neither a callable nor a scalar.
    """
    if callable(scalar_or_schedule):
        return scalar_or_schedule
    if fnp.ndim(scalar_or_schedule) == 0:
        return constant(scalar_or_schedule)
    raise TypeError(f"a step size must be a scalar or a schedule (a function of the step), got "
                    f"{type(scalar_or_schedule).__name__}")


# ----------------------------------------------------------------------------- utilities


def l2_norm(tree):
    """The Euclidean norm of all the leaves of ``tree`` together: ``sqrt(sum(vdot(x, x)))``."""
    return fnp.sqrt(sum(fnp.vdot(x, x) for x in tree_util.tree_leaves(tree)))


def clip_grads(grad_tree, max_norm):
    """Scale the gradients so that their joint ``l2_norm`` is at most ``max_norm`` (unchanged if below)."""
    norm = l2_norm(grad_tree)
    return tree_util.tree_map(lambda g: fnp.where(norm < max_norm, g, g * (max_norm / norm)), grad_tree)


class JoinPoint:
    """A leaf of ``unpack_optimizer_state``'s result: holds one parameter's state pytree."""

    def __init__(self, subtree):
        self.subtree = subtree

    def __iter__(self):
        yield self.subtree

    def __repr__(self):
        return f"JoinPoint({self.subtree!r})"


def unpack_optimizer_state(opt_state):
    """An ``OptimizerState`` as the parameters' pytree with a ``JoinPoint`` (holding that leaf's state) at
    each leaf, for serialization. ``pack_optimizer_state`` inverts it."""
    flat, treedef, subtrees = opt_state
    return tree_util.tree_unflatten(treedef, [JoinPoint(tree_util.tree_unflatten(d, s))
                                              for d, s in zip(subtrees, flat)])


def pack_optimizer_state(marked_pytree):
    """The ``OptimizerState`` of a pytree made by ``unpack_optimizer_state``.

    Raises:
      TypeError: a leaf of ``marked_pytree`` is not a ``JoinPoint``.
    """
    points, treedef = tree_util.tree_flatten(marked_pytree)
    bad = [type(p).__name__ for p in points if not isinstance(p, JoinPoint)]
    if bad:
        raise TypeError(f"pack_optimizer_state needs a pytree whose leaves are JoinPoints (as "
                        f"unpack_optimizer_state makes), got leaves of type {sorted(set(bad))}")
    flat, subtrees = _flatten_states([p.subtree for p in points])
    return OptimizerState(flat, treedef, subtrees)
