"""Loss functions (``fnarray.nn.losses``): cross-entropy, MSE, L1, binary cross-entropy, KL divergence.

Each takes predictions and targets and a ``reduction``: ``"mean"`` (the default, over every
per-example loss), ``"sum"``, or ``"none"`` (the per-example losses). They are composites of
fnarray primitives, so they work eagerly and under ``jit``/``grad``/``vmap`` on every backend.
Names follow MLX's ``mlx.nn.losses`` (whose default reduction is ``"none"``; here it is ``"mean"``,
as PyTorch's).
"""

from __future__ import annotations

from fnarray.core import dtypes, lax
from fnarray.core.errors import ShapeError

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "kl_div_loss", "l1_loss",
           "mse_loss"]

_REDUCTIONS = ("mean", "sum", "none")


def _np():
    from fnarray import numpy as fnp
    return fnp


def _reduce(loss, reduction, name):
    fnp = _np()
    if reduction == "mean":
        return fnp.mean(loss)
    if reduction == "sum":
        return fnp.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{name}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _float(x, name):
    fnp = _np()
    x = fnp.asarray(x)
    if not dtypes.is_float(x.dtype):
        x = x.astype(dtypes.float32)
    return x


def _same_shape(a, b, name):
    if tuple(a.shape) != tuple(b.shape):
        raise ShapeError(f"{name}: predictions {tuple(a.shape)} and targets {tuple(b.shape)} must have one shape")


_LABEL_MODES = ("nan", "clip")


def _checked_labels(labels, c, mode):
    """Integer ``labels`` and where they are valid: concrete labels outside ``[0, c)`` raise (unless
    ``mode="clip"``); traced ones are clipped, and ``mode="nan"`` marks them for a NaN loss."""
    from fnarray.core.tracing import Tracer
    fnp = _np()
    if mode not in _LABEL_MODES:
        raise ValueError(f"cross_entropy: mode must be one of {_LABEL_MODES}, got {mode!r}")
    if mode == "nan" and not isinstance(labels, Tracer) and labels.size:
        import numpy as np
        host = np.asarray(labels)
        bad = (host < 0) | (host >= c)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"cross_entropy: labels must be class indices in [0, {c}) for {c} classes; got "
                             f"{host[where]} at index {where} ({int(bad.sum())} out of range). Fix the labels, or "
                             "pass mode='clip' to clamp them into range")
    valid = (labels >= 0) & (labels < c)
    return fnp.clip(labels, 0, c - 1), valid


def _label_loss(logits, labels, ax):
    """``-log_softmax(logits)`` at each of ``labels`` (in range) along axis ``ax``, as optax's
    ``softmax_cross_entropy_with_integer_labels``: ``log(sum(exp(shifted)))`` minus the label's ``shifted``, where
    ``shifted = logits - max`` (the maximum a constant of the gradient). The label's value is the sum over the axis
    of ``shifted`` where the class equals the label, not an index read: both terms are row reductions and the
    gradient, ``softmax - (class == label)``, is a select (no scatter, no stored ``log_softmax``), so on a device
    the forward and the backward are a row kernel each (docs/performance.md, branch s14-wgpuxent)."""
    fnp = _np()
    shifted = logits - lax.stop_gradient(fnp.max(logits, axis=ax, keepdims=True))
    classes = lax.iota(labels.dtype, logits.shape, ax)
    picked = fnp.sum(fnp.where(fnp.expand_dims(labels, ax) == classes, shifted, 0), axis=ax)
    return lax.log(fnp.sum(lax.exp(shifted), axis=ax)) - picked


def cross_entropy(logits, labels, *, axis: int = -1, label_smoothing: float = 0.0, reduction: str = "mean",
                  mode: str = "nan"):
    """Softmax cross-entropy ``-sum(p * log_softmax(logits))`` over ``axis``.

    Args:
      logits: floating ``(..., C, ...)``, unnormalised class scores along ``axis``.
      labels: integer class indices of ``logits``'s shape without ``axis`` (e.g. ``int32[n]`` for
        ``logits: (n, C)``), or target probabilities of ``logits``'s shape (one-hot or soft).
        Integer labels outside ``[0, C)`` raise ``ValueError`` when they are concrete (eager); under ``jit`` or
        ``vmap`` they follow ``mode``.
      axis: the class axis.
      label_smoothing: ``s`` in ``[0, 1)``: the targets become ``(1 - s) * p + s / C``.
      reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per example: ``labels``' batch shape).
      mode: integer labels outside ``[0, C)``: ``"nan"`` (default) raises for concrete labels and gives a NaN
        loss for traced ones (so ``debug_nans`` finds them); ``"clip"`` clamps them into range (the class
        ``0`` or ``C - 1``), in eager mode too.
    Returns: a float scalar, or the per-example losses.
    Raises: ShapeError for labels of another shape; ValueError for a bad ``reduction``, smoothing or ``mode``,
      or concrete integer labels outside ``[0, C)`` (with ``mode="nan"``).
    """
    from fnarray.nn._functions import log_softmax, one_hot
    fnp = _np()
    logits = _float(logits, "cross_entropy")
    labels = fnp.asarray(labels)
    ax = axis % logits.ndim if logits.ndim else 0
    c = logits.shape[ax]
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must lie in [0, 1), got {label_smoothing}")
    if dtypes.is_int(labels.dtype):
        batch = tuple(logits.shape[:ax] + logits.shape[ax + 1:])
        if tuple(labels.shape) != batch:
            raise ShapeError(f"cross_entropy: integer labels must have the logits' shape without the class axis, "
                             f"{batch}; got {tuple(labels.shape)}")
        labels, valid = _checked_labels(labels, c, mode)
        if label_smoothing == 0.0:
            loss = _label_loss(logits, labels, ax)
        else:
            logp = log_softmax(logits, axis=ax)
            targets = one_hot(labels, c, dtype=logp.dtype, axis=ax)
            targets = targets * (1.0 - label_smoothing) + label_smoothing / c
            loss = -fnp.sum(targets * logp, axis=ax)
        if mode == "nan":
            loss = fnp.where(valid, loss, fnp.nan)
        return _reduce(loss, reduction, "cross_entropy")
    logp = log_softmax(logits, axis=ax)
    targets = labels.astype(logp.dtype)
    _same_shape(logits, targets, "cross_entropy (probability labels)")
    if label_smoothing:
        targets = targets * (1.0 - label_smoothing) + label_smoothing / c
    return _reduce(-fnp.sum(targets * logp, axis=ax), reduction, "cross_entropy")


def mse_loss(predictions, targets, *, reduction: str = "mean"):
    """Squared error ``(predictions - targets) ** 2``, elementwise, then reduced.

    Args: ``predictions`` and ``targets`` of one shape (targets cast to predictions' float dtype);
      ``reduction``.
    Returns: a scalar, or the elementwise losses for ``"none"``.
    """
    fnp = _np()
    p = _float(predictions, "mse_loss")
    t = fnp.asarray(targets).astype(p.dtype)
    _same_shape(p, t, "mse_loss")
    return _reduce(fnp.square(p - t), reduction, "mse_loss")


def l1_loss(predictions, targets, *, reduction: str = "mean"):
    """Absolute error ``|predictions - targets|``, elementwise, then reduced (see ``mse_loss``)."""
    fnp = _np()
    p = _float(predictions, "l1_loss")
    t = fnp.asarray(targets).astype(p.dtype)
    _same_shape(p, t, "l1_loss")
    return _reduce(fnp.abs(p - t), reduction, "l1_loss")


def binary_cross_entropy(probs, targets, *, eps: float | None = None, reduction: str = "mean"):
    """``-(t log p + (1 - t) log(1 - p))`` elementwise, for probabilities ``p`` in ``[0, 1]``.

    Args:
      probs: predicted probabilities (e.g. after ``sigmoid``); targets: of the same shape, in ``[0, 1]``.
      eps: probabilities are clipped to ``[eps, 1 - eps]`` (default: the dtype's ``finfo.eps``), so a
        confident wrong prediction gives a large finite loss, not ``inf``.
      reduction: ``"mean"``, ``"sum"`` or ``"none"``.
    Prefer ``binary_cross_entropy_with_logits`` on logits: it is exact where ``p`` rounds to 0 or 1.
    """
    fnp = _np()
    p = _float(probs, "binary_cross_entropy")
    t = fnp.asarray(targets).astype(p.dtype)
    _same_shape(p, t, "binary_cross_entropy")
    e = float(dtypes.finfo(p.dtype).eps) if eps is None else float(eps)
    p = fnp.clip(p, e, 1.0 - e)
    return _reduce(-(t * fnp.log(p) + (1.0 - t) * fnp.log1p(-p)), reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(logits, targets, *, reduction: str = "mean"):
    """Binary cross-entropy of ``sigmoid(logits)``, computed stably as ``max(z, 0) - z t + log1p(exp(-|z|))``.

    Args: ``logits`` (floating) and ``targets`` in ``[0, 1]`` of the same shape; ``reduction``.
    Returns: a scalar, or the elementwise losses.
    Source: the softplus identity ``log(1 + e^z) = max(z, 0) + log1p(e^-|z|)``.
    """
    fnp = _np()
    z = _float(logits, "binary_cross_entropy_with_logits")
    t = fnp.asarray(targets).astype(z.dtype)
    _same_shape(z, t, "binary_cross_entropy_with_logits")
    loss = fnp.maximum(z, 0.0) - z * t + fnp.log1p(fnp.exp(-fnp.abs(z)))
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def kl_div_loss(log_predictions, targets, *, axis: int = -1, log_targets: bool = False, reduction: str = "mean"):
    """Kullback-Leibler divergence ``KL(targets || predictions) = sum t (log t - log p)`` over ``axis``.

    Args:
      log_predictions: log-probabilities ``log p`` (e.g. ``log_softmax`` output).
      targets: probabilities ``t`` of the same shape, or log-probabilities with ``log_targets=True``
        (MLX's ``kl_div_loss`` takes both as logs: pass ``log_targets=True``). Terms with ``t == 0``
        contribute 0.
      axis: the distribution axis, summed over.
      reduction: over the remaining (per-distribution) axes.
    Returns: a scalar, or the per-distribution divergences for ``"none"``.
    """
    fnp = _np()
    lp = _float(log_predictions, "kl_div_loss")
    t = fnp.asarray(targets).astype(lp.dtype)
    _same_shape(lp, t, "kl_div_loss")
    if log_targets:
        terms = fnp.exp(t) * (t - lp)
    else:
        safe = fnp.where(t > 0, t, fnp.ones((), dtype=t.dtype))
        terms = fnp.where(t > 0, t * (fnp.log(safe) - lp), fnp.zeros((), dtype=t.dtype))
    return _reduce(fnp.sum(terms, axis=axis), reduction, "kl_div_loss")
