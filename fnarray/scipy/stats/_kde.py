"""``gaussian_kde``: kernel density estimation with Gaussian kernels (mirrors ``jax.scipy.stats.gaussian_kde``;
``scipy.stats.gaussian_kde``), re-exported by ``fnarray.scipy.stats``.

A pytree (its arrays are the leaves), so it passes through ``jit``, ``grad`` and ``vmap``. The kernels are
evaluated in the coordinates that the Cholesky factor of the inverse covariance whitens, all pairs of points and
data at once (an ``(m, n)`` matrix of squared distances: memory ``m * n``, as JAX's ``vmap``).
"""

from __future__ import annotations

import math

import numpy as np

from fnarray.core import dtypes
from fnarray.tree_util import register_pytree_node_class

__all__ = ["gaussian_kde"]


def _fnp():
    import fnarray.numpy as fnp
    return fnp


def _bandwidth_factor(kde, bw_method, d):
    fnp = _fnp()
    if bw_method is None or (isinstance(bw_method, str) and bw_method == "scott"):
        return fnp.power(kde.neff, -1.0 / (d + 4))
    if isinstance(bw_method, str) and bw_method == "silverman":
        return fnp.power(kde.neff * (d + 2) / 4.0, -1.0 / (d + 4))
    if callable(bw_method):
        return bw_method(kde)
    if np.ndim(bw_method) == 0 and not isinstance(bw_method, str):
        return bw_method
    raise ValueError(f"gaussian_kde: bw_method should be 'scott', 'silverman', a scalar or a callable, got "
                     f"{bw_method!r}")


@register_pytree_node_class
class gaussian_kde:
    """A Gaussian kernel density estimate of ``dataset`` (mirrors ``jax.scipy.stats.gaussian_kde``).

    Args:
      dataset: ``(d, n)`` data points (a 1-D array is ``(1, n)``), real; integers promote to float32.
      bw_method: ``"scott"`` (default: ``neff ** (-1 / (d + 4))``), ``"silverman"``, a scalar factor, or a
        callable of the estimate returning the factor.
      weights: optional ``(n,)`` weights (normalized to sum to 1).

    Attributes:
      dataset, weights, neff (the effective number of points ``1 / sum(w**2)``), covariance (the data's weighted
      covariance times the factor squared), inv_cov, d, n.

    Raises:
      ValueError: a dataset of fewer than 2 elements, weights not ``(n,)``, an unknown ``bw_method``.
      NotImplementedError: complex data (as JAX).
    """

    def __init__(self, dataset, bw_method=None, weights=None):
        from fnarray.scipy._util import floats
        fnp = _fnp()
        data = fnp.asarray(dataset)
        if dtypes.is_complex(data.dtype):
            raise NotImplementedError("gaussian_kde does not support complex data")
        data = fnp.atleast_2d(data)
        if not data.size > 1:
            raise ValueError(f"gaussian_kde: the dataset should have several elements, got shape {data.shape}")
        d, n = data.shape
        if weights is None:
            (data,) = floats("gaussian_kde", data)
            weights = fnp.full(n, 1.0 / n, dtype=data.dtype)
        else:
            data, weights = floats("gaussian_kde", data, fnp.atleast_1d(weights), shape=False)
            if weights.shape != (n,):
                raise ValueError(f"gaussian_kde: weights should have shape ({n},), got {weights.shape}")
            weights = weights / fnp.sum(weights)
        self.dataset, self.weights = data, weights
        self.neff = 1 / fnp.sum(weights ** 2)
        factor = _bandwidth_factor(self, bw_method, d)
        # NumPy's cov with aweights (summing to 1) and ddof 1: (x - mean) w (x - mean)^T / (1 - sum(w**2))
        centered = data - fnp.sum(data * weights, axis=1, keepdims=True)
        data_cov = fnp.matmul(centered * weights, centered.T) / (1 - fnp.sum(weights ** 2))
        self.covariance = data_cov * factor ** 2
        self.inv_cov = fnp.linalg.inv(data_cov) / factor ** 2

    def tree_flatten(self):
        """``((neff, dataset, weights, covariance, inv_cov), None)``."""
        return (self.neff, self.dataset, self.weights, self.covariance, self.inv_cov), None

    @classmethod
    def tree_unflatten(cls, aux_data, children):
        """The estimate of ``tree_flatten``'s leaves."""
        kde = cls.__new__(cls)
        kde.neff, kde.dataset, kde.weights, kde.covariance, kde.inv_cov = children
        return kde

    @property
    def d(self):
        """The number of dimensions."""
        return self.dataset.shape[0]

    @property
    def n(self):
        """The number of data points."""
        return self.dataset.shape[1]

    def _points(self, points):
        fnp = _fnp()
        points = fnp.asarray(points, None if hasattr(points, "dtype") else self.dataset.dtype)
        if dtypes.is_complex(points.dtype):
            raise NotImplementedError("gaussian_kde does not support complex coordinates")
        points = fnp.atleast_2d(points)
        d, m = points.shape
        if d != self.d:
            if d == 1 and m == self.d:
                return fnp.reshape(points, (self.d, 1))
            raise ValueError(f"gaussian_kde: points have dimension {d}, the dataset has dimension {self.d}")
        return points

    def _log_kernels(self, points):
        """``(m, n)``: the log of each data point's normalized kernel at each point."""
        from fnarray.scipy.linalg import cholesky
        fnp = _fnp()
        points = self._points(points)
        dt = fnp.result_type(points, self.dataset)
        whitening = cholesky(self.inv_cov.astype(dt), lower=True)
        x = fnp.matmul(points.T.astype(dt), whitening)
        y = fnp.matmul(self.dataset.T.astype(dt), whitening)
        log_norm = fnp.sum(fnp.log(fnp.diagonal(whitening))) - 0.5 * self.d * math.log(2 * math.pi)
        sq = fnp.sum((x[:, None, :] - y[None, :, :]) ** 2, axis=-1)
        return log_norm - 0.5 * sq

    def evaluate(self, points):
        """The density at ``points`` (``(d, m)``, or ``(m,)`` for ``d = 1``, or one ``(d,)`` point): ``(m,)``."""
        fnp = _fnp()
        return fnp.sum(self.weights * fnp.exp(self._log_kernels(points)), axis=-1)

    def __call__(self, points):
        """``evaluate(points)``."""
        return self.evaluate(points)

    def pdf(self, x):
        """``evaluate(x)``."""
        return self.evaluate(x)

    def logpdf(self, x):
        """The log density at ``x``, by ``logsumexp`` over the kernels (no underflow far from the data)."""
        from fnarray.scipy.special import logsumexp
        fnp = _fnp()
        return logsumexp(fnp.log(self.weights) + self._log_kernels(x), axis=-1)

    def _convolve(self, cov, mean, data, weights):
        """``sum(w N(data; mean, covariance + cov))`` over ``data`` (``(d, n)``)."""
        from fnarray.scipy.linalg import cho_factor, cho_solve
        fnp = _fnp()
        chol = cho_factor(self.covariance + cov)
        norm = 1.0 / (math.sqrt(2 * math.pi) ** self.d * fnp.prod(fnp.diagonal(chol[0])))
        diff = data - mean[:, None]
        arg = 0.5 * fnp.sum(diff * cho_solve(chol, diff), axis=0)
        return norm * fnp.sum(fnp.exp(-arg) * weights)

    def integrate_gaussian(self, mean, cov):
        """The integral of the estimate times the normal density of ``mean`` (``(d,)``) and ``cov`` (``(d, d)``)."""
        fnp = _fnp()
        # Python numbers and lists take the data's dtype (JAX's weak types)
        weak = self.dataset.dtype
        mean = fnp.atleast_1d(fnp.squeeze(fnp.asarray(mean, None if hasattr(mean, "dtype") else weak)))
        cov = fnp.atleast_2d(fnp.asarray(cov, None if hasattr(cov, "dtype") else weak))
        if mean.shape != (self.d,) or cov.shape != (self.d, self.d):
            raise ValueError(f"gaussian_kde.integrate_gaussian: mean must be ({self.d},) and cov ({self.d}, "
                             f"{self.d}), got {mean.shape} and {cov.shape}")
        return self._convolve(cov, mean, self.dataset, self.weights)

    def integrate_kde(self, other):
        """The integral of the product of this estimate and ``other`` (of the same dimension)."""
        fnp = _fnp()
        if other.d != self.d:
            raise ValueError(f"gaussian_kde.integrate_kde: dimensions {self.d} and {other.d} differ")
        small, large = (self, other) if self.n < other.n else (other, self)
        each = [self._convolve(other.covariance, small.dataset[:, i], large.dataset, large.weights)
                for i in range(small.n)]
        return fnp.sum(fnp.stack(each) * small.weights)

    def integrate_box_1d(self, low, high):
        """The probability mass between the scalars ``low`` and ``high`` of a one-dimensional estimate."""
        from fnarray.scipy.special import ndtr
        fnp = _fnp()
        if self.d != 1:
            raise ValueError("gaussian_kde.integrate_box_1d only handles one-dimensional estimates")
        if np.ndim(low) != 0 or np.ndim(high) != 0:
            raise ValueError("gaussian_kde.integrate_box_1d: the limits must be scalars")
        sigma = fnp.squeeze(fnp.sqrt(self.covariance))
        lo, hi = fnp.squeeze((low - self.dataset) / sigma), fnp.squeeze((high - self.dataset) / sigma)
        return fnp.sum(self.weights * (ndtr(hi) - ndtr(lo)))

    def resample(self, key, shape=()):
        """``shape`` new points ``(d, *shape)``: data points drawn by weight (``random.choice`` with the first of
        ``split(key)``) plus normal noise of ``covariance`` (the second), as JAX."""
        import fnarray.random as fr
        fnp = _fnp()
        k_ind, k_eps = fr.split(key)
        ind = fr.choice(k_ind, self.n, shape=shape, p=self.weights)
        eps = fr.multivariate_normal(k_eps, fnp.zeros(self.d, self.covariance.dtype), self.covariance, shape=shape,
                                     dtype=self.dataset.dtype)
        return self.dataset[:, ind] + fnp.moveaxis(eps, -1, 0)

    def integrate_box(self, low_bounds, high_bounds, maxpts=None):
        """Not supported (as JAX): use ``integrate_box_1d``."""
        raise NotImplementedError("gaussian_kde: only one-dimensional box integrals are supported; use "
                                  "integrate_box_1d")

    def set_bandwidth(self, bw_method=None):
        """Not supported (as JAX): make a new estimate with the ``bw_method``."""
        raise NotImplementedError("gaussian_kde: changing the bandwidth is not supported; make a new estimate "
                                  "with bw_method=")
