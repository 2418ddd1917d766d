"""``fnarray.test_util.check_grads`` (against JAX's on the same functions: both pass correct derivatives,
both raise on a wrong custom rule) and ``random.key_data``/``wrap_key_data`` on batches of keys (JAX's
words)."""

from __future__ import annotations

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.test_util import check_grads

jax = pytest.importorskip("jax", reason="JAX is the oracle")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads as jax_check_grads  # noqa: E402


@pytest.mark.parametrize("order,modes", [(1, ("fwd", "rev")), (2, ("fwd", "rev")), (2, ("rev",))])
def test_check_grads_passes_where_jax_does(order, modes):
    args = (np.float32(0.3), np.linspace(0.5, 1.5, 3).astype(np.float32))
    jax_check_grads(lambda x, y: jnp.sin(x) * y ** 2, args, order=order, modes=modes)
    check_grads(lambda x, y: fnp.sin(x) * y ** 2, args, order=order, modes=modes)
    check_grads(lambda x: {"a": fnp.tanh(x) @ x, "b": fnp.exp(x)}, (np.linspace(-1, 1, 4),), order=order, modes=modes)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_check_grads_raises_on_a_wrong_rule(mode):
    f = fa.custom_jvp(lambda x: fnp.sin(x))
    f.defjvp(lambda p, t: (fnp.sin(p[0]), 2 * t[0]))
    g = jax.custom_jvp(lambda x: jnp.sin(x))
    g.defjvp(lambda p, t: (jnp.sin(p[0]), 2 * t[0]))
    with pytest.raises(AssertionError):
        jax_check_grads(g, (np.float32(1.0),), 1, modes=(mode,))
    with pytest.raises(AssertionError, match="central difference"):
        check_grads(f, (np.float32(1.0),), 1, modes=(mode,))
    with pytest.raises(ValueError, match="modes"):
        check_grads(f, (np.float32(1.0),), 1, modes=("sideways",))


def test_key_data_and_wrap_key_data_on_batches(device):
    keys = fa.random.split(fa.device_put(fa.random.key(0), device), (2, 3))
    jkeys = jax.random.split(jax.random.key(0), (2, 3))
    data = fa.random.key_data(keys)
    assert data.shape == (2, 3, 2) and data.dtype == np.uint32
    np.testing.assert_array_equal(np.asarray(data), np.asarray(jax.random.key_data(jkeys)))
    wrapped = fa.random.wrap_key_data(data)
    np.testing.assert_array_equal(np.asarray(fa.random.normal(wrapped[1, 2], (4,))),
                                  np.asarray(fa.random.normal(keys[1, 2], (4,))))
    with pytest.raises(ValueError, match="threefry2x32"):
        fa.random.wrap_key_data(data, impl="rbg")
    with pytest.raises(Exception, match=r"\(\.\.\., 2\)"):
        fa.random.key_data(fnp.zeros((3,), np.uint32))
