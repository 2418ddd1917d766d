"""Public JAX programs of the twenty-sixth session's new-user probe, run as written under JAX and, after
``jax_port.rewrite_imports`` (an import change only), under fnarray: both must print the same numbers and words.

Sources: pages of JAX's documentation, jax-ml/jax cec06d1, their code cells in order as one script (the notebooks'
own text; a cell's last bare expression printed as the notebook shows it; plotting left out):

- ``GOTCHAS``: ``jax-ml/jax/docs/notebooks/Common_Gotchas_in_JAX.md`` ("JAX - The Sharp Bits": impure functions under
  ``jit``, iterators in ``lax.fori_loop``/``scan``/``cond``, ``.at[]`` updates, ``jit`` of methods with
  ``static_argnums`` and a registered pytree, out-of-bounds indexing and ``mode="fill"``, non-array inputs,
  boolean masks under ``jit``, a 64-bit dtype requested with 64-bit off). The page's ``make_jaxpr`` print is left
  out (each library prints its own IR).
- ``CONTROL_FLOW``: ``jax-ml/jax/docs/control-flow.md`` ("Control flow and logical operators with JIT": Python
  control flow on traced values, ``static_argnames``, ``lax.cond``/``while_loop``/``fori_loop``, ``logical_and``,
  ``grad`` through Python branches).
- ``COMPLEX``: ``jax-ml/jax/docs/complex-differentiation.md`` (``jvp``/``vjp`` of a complex function against the real
  partials, ``grad`` of a real function of a complex input, ``grad(holomorphic=True)`` of ``sin``, ``conjugate``
  and a loss through a complex Hermitian ``cholesky``).
- ``LOG_PROBS``: ``jax-ml/jax/docs/notebooks/vmapped_log_probs.md`` (Bayesian logistic regression: ``vmap`` of a
  log joint written for one example, ``jax.scipy.stats.norm.logpdf``, ADVI by ``jit(value_and_grad(argnums=(0, 1)))``);
  60 steps of the page's 1000.
- ``EXTERNAL_CALLBACKS``: ``jax-ml/jax/docs/external-callbacks.md`` (``pure_callback``, ``experimental.io_callback``
  with and without ``ordered=``, ``debug.callback`` under ``jit``/``vmap``/``scan``/``grad``; a SciPy Bessel
  function given derivatives by ``custom_jvp``). Its ``f2`` (a ``pure_callback`` whose result goes unused) prints
  under fnarray, which never drops a callback, and not under JAX, whose compiler did (``_DIFFERENCES``).
- ``STATEFUL``: ``jax-ml/jax/docs/stateful-computations.md`` (a counter under ``jit``; linear regression by 1000
  jitted SGD steps on a ``NamedTuple`` of parameters; the plot replaced by a print of the fitted parameters).
- ``PYTREES``: ``jax-ml/jax/docs/pytrees.md`` (``jax.tree.leaves``/``map``/``structure``/``transpose``, key paths,
  ``is_leaf``). A structure prints as optree's ``PyTreeSpec``; a dict whose keys do not sort is a tree here.

The cells the pages tag ``raises-exception`` run inside ``try``/``except`` of the class JAX raises there (what a
JAX user catches: ``jax.errors.TracerBoolConversionError``, ``jax.errors.NonConcreteBooleanIndexError``,
``TypeError``...), printing its name. Where the pages print a tracer (``print(x)`` inside ``jit``), its text
(``JitTracer(~int32[])``) is each library's own: compared as ``<tracer>``; ``LOG_PROBS``' caught broadcasting
message is each library's own words.

Before this session's fixes ``GOTCHAS`` and ``CONTROL_FLOW`` failed: ``jax.errors`` did not exist (fnarray raised
its ``ConcretizationError`` for every conversion; now ``bool()``, ``int()`` and ``numpy.asarray`` of a tracer and
a traced boolean mask raise JAX's subclasses of it), and ``random.uniform(..., dtype=jnp.float64)`` did not warn
with 64-bit off (JAX's "Explicitly requested dtype float64 ..."; every sampler's ``dtype=`` now goes through
``dtypes.requested``). ``COMPLEX`` and ``LOG_PROBS`` ported with their imports changed alone. Branch s26b-ports: ``EXTERNAL_CALLBACKS``
needed ``jax.experimental.io_callback`` and ``jax.ShapeDtypeStruct.like``; ``PYTREES`` and ``STATEFUL`` ported as
written (JAX's ``ValueError`` for dict keys that do not sort is not raised: ``_DIFFERENCES``). Each runs here on
numpy:0 (fnarray's programs are backend-independent IR; the kernel backends run their primitives in the parity
suite).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import warnings

import numpy as np
import pytest

from jax_port import assert_rewrite_changes_imports_only, compare_outputs, rewrite_imports

jax = pytest.importorskip("jax", reason="JAX runs the programs as written")

GOTCHAS = r'''
import numpy as np
from jax import jit
from jax import lax
from jax import random
import jax
import jax.numpy as jnp

def impure_print_side_effect(x):
  print("Executing function")  # This is a side-effect
  return x

# The side-effects appear during the first run
print ("First call: ", jit(impure_print_side_effect)(4.))

# Subsequent runs with parameters of same type and shape may not show the side-effect
# This is because JAX now invokes a cached compilation of the function
print ("Second call: ", jit(impure_print_side_effect)(5.))

# JAX re-runs the Python function when the type or shape of the argument changes
print ("Third call, different type: ", jit(impure_print_side_effect)(jnp.array([5.])))

g = 0.
def impure_uses_globals(x):
  return x + g

# JAX captures the value of the global during the first run
print ("First call: ", jit(impure_uses_globals)(4.))
g = 10.  # Update the global

# Subsequent runs may silently use the cached value of the globals
print ("Second call: ", jit(impure_uses_globals)(5.))

# JAX re-runs the Python function when the type or shape of the argument changes
# This will end up reading the latest value of the global
print ("Third call, different type: ", jit(impure_uses_globals)(jnp.array([4.])))

g = 0.
def impure_saves_global(x):
  global g
  g = x
  return x

# JAX runs once the transformed function with special Traced values for arguments
print ("First call: ", jit(impure_saves_global)(4.))
print ("Saved global: ", g)  # Saved global has an internal JAX value

def pure_uses_internal_state(x):
  state = dict(even=0, odd=0)
  for i in range(10):
    state['even' if i % 2 == 0 else 'odd'] += x
  return state['even'] + state['odd']

print(jit(pure_uses_internal_state)(5.))

import jax.numpy as jnp
from jax import make_jaxpr

# lax.fori_loop
array = jnp.arange(10)
print(lax.fori_loop(0, 10, lambda i,x: x+array[i], 0)) # expected result 45
iterator = iter(range(10))
print(lax.fori_loop(0, 10, lambda i,x: x+next(iterator), 0)) # unexpected result 0

# lax.scan
def func11(arr, extra):
    ones = jnp.ones(arr.shape)
    def body(carry, aelems):
        ae1, ae2 = aelems
        return (carry + ae1 * ae2 + extra, carry)
    return lax.scan(body, 0., (arr, ones))
make_jaxpr(func11)(jnp.arange(16), 5.)
# make_jaxpr(func11)(iter(range(16)), 5.) # throws error

# lax.cond
array_operand = jnp.array([0.])
lax.cond(True, lambda x: x+1, lambda x: x-1, array_operand)
iter_operand = iter(range(10))
# lax.cond(True, lambda x: next(x)+1, lambda x: next(x)-1, iter_operand) # throws error

numpy_array = np.zeros((3,3), dtype=np.float32)
print("original array:")
print(numpy_array)

# In place, mutating update
numpy_array[1, :] = 1.0
print("updated array:")
print(numpy_array)

try:
    
    jax_array = jnp.zeros((3,3), dtype=jnp.float32)
    
    # In place update of JAX's array will yield an error!
    jax_array[1, :] = 1.0
    
except TypeError:
    print('raised TypeError')

jax_array = jnp.array([10, 20])
jax_array_new = jax_array
jax_array_new += 10
print(jax_array_new)  # `jax_array_new` is rebound to a new value [20, 30], but...
print(jax_array)      # the original value is unmodified as [10, 20] !

numpy_array = np.array([10, 20])
numpy_array_new = numpy_array
numpy_array_new += 10
print(numpy_array_new)  # `numpy_array_new is numpy_array`, and it was updated
print(numpy_array)      # in-place, so both are [20, 30] !

jax_array = jnp.zeros((3,3), dtype=jnp.float32)
updated_array = jax_array.at[1, :].set(1.0)
print("updated array:\n", updated_array)

print("original array unchanged:\n", jax_array)

print("original array:")
jax_array = jnp.ones((5, 6))
print(jax_array)

new_jax_array = jax_array.at[::2, 3:].add(7.)
print("new array post-addition:")
print(new_jax_array)

import jax.numpy as jnp
from jax import jit

class CustomClass:
  def __init__(self, x: jnp.ndarray, mul: bool):
    self.x = x
    self.mul = mul

  @jit  # <---- How to do this correctly?
  def calc(self, y):
    if self.mul:
      return self.x * y
    return y

try:
    
    c = CustomClass(2, True)
    print(c.calc(3))
except TypeError:
    print('raised TypeError')

class CustomClass:
  def __init__(self, x: jnp.ndarray, mul: bool):
    self.x = x
    self.mul = mul

  def calc(self, y):
    return _calc(self.mul, self.x, y)

@jit(static_argnums=0)
def _calc(mul, x, y):
  if mul:
    return x * y
  return y

c = CustomClass(2, True)
print(c.calc(3))

class CustomClass:
  def __init__(self, x: jnp.ndarray, mul: bool):
    self.x = x
    self.mul = mul

  # WARNING: this example is broken, as we'll see below. Don't copy & paste!
  @jit(static_argnums=0)
  def calc(self, y):
    if self.mul:
      return self.x * y
    return y

c = CustomClass(2, True)
print(c.calc(3))

c.mul = False
print(c.calc(3))  # Should print 3

class CustomClass:
  def __init__(self, x: jnp.ndarray, mul: bool):
    self.x = x
    self.mul = mul

  @jit(static_argnums=0)
  def calc(self, y):
    if self.mul:
      return self.x * y
    return y

  def __hash__(self):
    return hash((self.x, self.mul))

  def __eq__(self, other):
    return (isinstance(other, CustomClass) and
            (self.x, self.mul) == (other.x, other.mul))

class CustomClass:
  def __init__(self, x: jnp.ndarray, mul: bool):
    self.x = x
    self.mul = mul

  @jit
  def calc(self, y):
    if self.mul:
      return self.x * y
    return y

  def _tree_flatten(self):
    children = (self.x,)  # arrays / dynamic values
    aux_data = {'mul': self.mul}  # static values
    return (children, aux_data)

  @classmethod
  def _tree_unflatten(cls, aux_data, children):
    return cls(*children, **aux_data)

from jax import tree_util
print(tree_util.register_pytree_node(CustomClass,
                               CustomClass._tree_flatten,
                               CustomClass._tree_unflatten))

c = CustomClass(2, True)
print(c.calc(3))

c.mul = False  # mutation is detected
print(c.calc(3))

c = CustomClass(jnp.array(2), True)  # non-hashable x is supported
print(c.calc(3))

try:
    
    print(np.arange(10)[11])
except IndexError:
    print('raised IndexError')

print(jnp.arange(10)[11])

print(jnp.arange(10.0).at[11].get())

print(jnp.arange(10.0).at[11].get(mode='fill', fill_value=jnp.nan))

print(np.sum([1, 2, 3]))

try:
    
    print(jnp.sum([1, 2, 3]))
except TypeError:
    print('raised TypeError')

def permissive_sum(x):
  return jnp.sum(jnp.array(x))

x = list(range(10))
print(permissive_sum(x))

print(jnp.sum(jnp.array(x)))

def nansum(x):
  mask = ~jnp.isnan(x)  # boolean mask selecting non-nan values
  x_without_nans = x[mask]
  return x_without_nans.sum()

x = jnp.array([1, 2, jnp.nan, 3, 4])
print(nansum(x))

try:
    
    print(jax.jit(nansum)(x))
except jax.errors.NonConcreteBooleanIndexError:
    print('raised jax.errors.NonConcreteBooleanIndexError')

@jax.jit
def nansum_2(x):
  mask = ~jnp.isnan(x)  # boolean mask selecting non-nan values
  return jnp.where(mask, x, 0).sum()

print(nansum_2(x))

x = random.uniform(random.key(0), (1000,), dtype=jnp.float64)
print(x.dtype)
'''

CONTROL_FLOW = r'''
import jax
from jax import grad, jit
import jax.numpy as jnp

@jit
def f(x):
  for i in range(3):
    x = 2 * x
  return x

print(f(3))

@jit
def g(x):
  y = 0.
  for i in range(x.shape[0]):
    y = y + x[i]
  return y

print(g(jnp.array([1., 2., 3.])))

try:
    
    @jit
    def f(x):
      if x < 3:
        return 3. * x ** 2
      else:
        return -4 * x
    
    # This will fail!
    print(f(2))
except jax.errors.TracerBoolConversionError:
    print('raised jax.errors.TracerBoolConversionError')

try:
    
    @jit
    def g(x):
      return (x > 0) and (x < 3)
    
    # This will fail!
    print(g(2))
except jax.errors.TracerBoolConversionError:
    print('raised jax.errors.TracerBoolConversionError')

def f(x):
  if x < 3:
    return 3. * x ** 2
  else:
    return -4 * x

f = jit(f, static_argnames='x')

print(f(2.))

def f(x, n):
  y = 0.
  for i in range(n):
    y = y + x[i]
  return y

f = jit(f, static_argnames='n')

print(f(jnp.array([2., 3., 4.]), 2))

def example_fun(length, val):
  return jnp.ones((length,)) * val
# un-jit'd works fine
print(example_fun(5, 4))

try:
    
    bad_example_jit = jit(example_fun)
    # this will fail:
    print(bad_example_jit(10, 4))
except TypeError:
    print('raised TypeError')

# static_argnames tells JAX to recompile on changes at these argument positions:
good_example_jit = jit(example_fun, static_argnames='length')
# first compile
print(good_example_jit(10, 4))
# recompiles
print(good_example_jit(5, 4))

@jit
def f(x):
  print(x)
  y = 2 * x
  print(y)
  return y
print(f(2))

from jax import lax

operand = jnp.array([0.])
lax.cond(True, lambda x: x+1, lambda x: x-1, operand)
# --> array([1.], dtype=float32)
print(lax.cond(False, lambda x: x+1, lambda x: x-1, operand))

init_val = 0
cond_fun = lambda x: x < 10
body_fun = lambda x: x+1
print(lax.while_loop(cond_fun, body_fun, init_val))

init_val = 0
start = 0
stop = 10
body_fun = lambda i,x: x+i
print(lax.fori_loop(start, stop, body_fun, init_val))

def python_check_positive_even(x):
  is_even = x % 2 == 0
  # `and` short-circults, so when `is_even` is `False`, `x > 0` is not evaluated.
  return is_even and (x > 0)

@jit
def jax_check_positive_even(x):
  is_even = x % 2 == 0
  # `logical_and` does not short circuit, so `x > 0` is always evaluated.
  return jnp.logical_and(is_even, x > 0)

print(python_check_positive_even(24))
print(jax_check_positive_even(24))

x = jnp.array([-1, 2, 5])
print(jax_check_positive_even(x))

try:
    
    print(python_check_positive_even(x))
    
except ValueError:
    print('raised ValueError')

def f(x):
  if x < 3:
    return 3. * x ** 2
  else:
    return -4 * x

print(grad(f)(2.))  # ok!
print(grad(f)(4.))  # ok!
'''

COMPLEX = r'''
import jax.numpy as jnp
from jax import random, grad, jvp

def check(seed):
  key = random.key(seed)

  # random coeffs for u and v
  key, subkey = random.split(key)
  a, b, c, d = random.uniform(subkey, (4,))

  def fun(z):
    x, y = jnp.real(z), jnp.imag(z)
    return u(x, y) + v(x, y) * 1j

  def u(x, y):
    return a * x + b * y

  def v(x, y):
    return c * x + d * y

  # primal point
  key, subkey = random.split(key)
  x, y = random.uniform(subkey, (2,))
  z = x + y * 1j

  # tangent vector
  key, subkey = random.split(key)
  c, d = random.uniform(subkey, (2,))
  z_dot = c + d * 1j

  # check jvp
  _, ans = jvp(fun, (z,), (z_dot,))
  expected = (grad(u, 0)(x, y) * c +
              grad(u, 1)(x, y) * d +
              grad(v, 0)(x, y) * c * 1j+
              grad(v, 1)(x, y) * d * 1j)
  print(jnp.allclose(ans, expected))

check(0)
check(1)
check(2)

from jax import vjp

def check(seed):
  key = random.key(seed)

  # random coeffs for u and v
  key, subkey = random.split(key)
  a, b, c, d = random.uniform(subkey, (4,))

  def fun(z):
    x, y = jnp.real(z), jnp.imag(z)
    return u(x, y) + v(x, y) * 1j

  def u(x, y):
    return a * x + b * y

  def v(x, y):
    return c * x + d * y

  # primal point
  key, subkey = random.split(key)
  x, y = random.uniform(subkey, (2,))
  z = x + y * 1j

  # cotangent vector
  key, subkey = random.split(key)
  c, d = random.uniform(subkey, (2,))
  z_bar = jnp.array(c + d * 1j)  # for dtype control

  # check vjp
  _, fun_vjp = vjp(fun, z)
  ans, = fun_vjp(z_bar)
  expected = (grad(u, 0)(x, y) * c +
              grad(v, 0)(x, y) * (-d) +
              grad(u, 1)(x, y) * c * (-1j) +
              grad(v, 1)(x, y) * (-d) * (-1j))
  assert jnp.allclose(ans, expected, atol=1e-5, rtol=1e-5)

check(0)
check(1)
check(2)

def f(z):
  x, y = jnp.real(z), jnp.imag(z)
  return x**2 + y**2

z = 3. + 4j
print(grad(f)(z))

def f(z):
  return jnp.sin(z)

z = 3. + 4j
print(grad(f, holomorphic=True)(z))

def f(z):
  return jnp.conjugate(z)

z = 3. + 4j
print(grad(f, holomorphic=True)(z))

A = jnp.array([[5.,    2.+3j,    5j],
              [2.-3j,   7.,  1.+7j],
              [-5j,  1.-7j,    12.]])

def f(X):
    L = jnp.linalg.cholesky(X)
    return jnp.sum((L - jnp.sin(L))**2)

print(grad(f, holomorphic=True)(A))
'''

LOG_PROBS = r'''
import jax

import jax.numpy as jnp
import jax.scipy as jsp
from jax import random

import numpy as np
import scipy as sp

np.random.seed(10009)

num_features = 10
num_points = 100

true_beta = np.random.randn(num_features).astype(jnp.float32)
all_x = np.random.randn(num_points, num_features).astype(jnp.float32)
y = (np.random.rand(num_points) < sp.special.expit(all_x.dot(true_beta))).astype(jnp.int32)

print(y)

def log_joint(beta):
    result = 0.
    # Note that no `axis` parameter is provided to `jnp.sum`.
    result = result + jnp.sum(jsp.stats.norm.logpdf(beta, loc=0., scale=1.))
    result = result + jnp.sum(-jnp.log(1 + jnp.exp(-(2*y-1) * jnp.dot(all_x, beta))))
    return result

print(log_joint(np.random.randn(num_features)))

# This doesn't work, because we didn't write `log_prob()` to handle batching.
try:
  batch_size = 10
  batched_test_beta = np.random.randn(batch_size, num_features)

  log_joint(np.random.randn(batch_size, num_features))
except ValueError as e:
  print("Caught expected exception " + str(e))

def batched_log_joint(beta):
    result = 0.
    # Here (and below) `sum` needs an `axis` parameter. At best, forgetting to set axis
    # or setting it incorrectly yields an error; at worst, it silently changes the
    # semantics of the model.
    result = result + jnp.sum(jsp.stats.norm.logpdf(beta, loc=0., scale=1.),
                           axis=-1)
    # Note the multiple transposes. Getting this right is not rocket science,
    # but it's also not totally mindless. (I didn't get it right on the first
    # try.)
    result = result + jnp.sum(-jnp.log(1 + jnp.exp(-(2*y-1) * jnp.dot(all_x, beta.T).T)),
                           axis=-1)
    return result

batch_size = 10
batched_test_beta = np.random.randn(batch_size, num_features)

print(batched_log_joint(batched_test_beta))

vmap_batched_log_joint = jax.vmap(log_joint)
print(vmap_batched_log_joint(batched_test_beta))

@jax.jit
def log_joint(beta):
    result = 0.
    # Note that no `axis` parameter is provided to `jnp.sum`.
    result = result + jnp.sum(jsp.stats.norm.logpdf(beta, loc=0., scale=10.))
    result = result + jnp.sum(-jnp.log(1 + jnp.exp(-(2*y-1) * jnp.dot(all_x, beta))))
    return result

batched_log_joint = jax.jit(jax.vmap(log_joint))

def elbo(beta_loc, beta_log_scale, epsilon):
    beta_sample = beta_loc + jnp.exp(beta_log_scale) * epsilon
    return jnp.mean(batched_log_joint(beta_sample), 0) + jnp.sum(beta_log_scale - 0.5 * np.log(2*np.pi))

elbo = jax.jit(elbo)
elbo_val_and_grad = jax.jit(jax.value_and_grad(elbo, argnums=(0, 1)))

def normal_sample(key, shape):
    """Convenience function for quasi-stateful RNG."""
    new_key, sub_key = random.split(key)
    return new_key, random.normal(sub_key, shape)

normal_sample = jax.jit(normal_sample, static_argnums=(1,))

key = random.key(10003)

beta_loc = jnp.zeros(num_features, jnp.float32)
beta_log_scale = jnp.zeros(num_features, jnp.float32)

step_size = 0.01
batch_size = 128
epsilon_shape = (batch_size, num_features)
for i in range(60):
    key, epsilon = normal_sample(key, epsilon_shape)
    elbo_val, (beta_loc_grad, beta_log_scale_grad) = elbo_val_and_grad(
        beta_loc, beta_log_scale, epsilon)
    beta_loc += step_size * beta_loc_grad
    beta_log_scale += step_size * beta_log_scale_grad
    if i % 10 == 0:
        print('{}\t{}'.format(i, elbo_val))
'''

EXTERNAL_CALLBACKS = r'''
import jax

@jax.jit
def f(x):
  y = x + 1
  print("intermediate value: {}".format(y))
  return y * 2

result = f(2)

@jax.jit
def f(x):
  y = x + 1
  jax.debug.print("intermediate value: {}", y)
  return y * 2

result = f(2)

import jax
import jax.numpy as jnp
import numpy as np

def f_host(x):
  # call a numpy (not jax.numpy) operation:
  return np.sin(x).astype(x.dtype)

def f(x):
  result_shape = jax.ShapeDtypeStruct.like(x)
  return jax.pure_callback(f_host, result_shape, x, vmap_method='sequential')

x = jnp.arange(5.0)
print(f(x))

print(jax.jit(f)(x))

def body_fun(_, x):
  return _, f(x)
print(jax.lax.scan(body_fun, None, jnp.arange(5.0))[1])

print(jax.vmap(f)(x))

try:
    jax.grad(f)(x)
except ValueError:
    print('raised ValueError')

def print_something():
  print('printing something')
  return np.int32(0)

@jax.jit
def f1():
  return jax.pure_callback(print_something, np.int32(0))
f1();

@jax.jit
def f2():
  jax.pure_callback(print_something, np.int32(0))
  return 1.0
f2();

from jax.experimental import io_callback
from functools import partial

global_rng = np.random.default_rng(0)

def host_side_random_like(x):
  """Generate a random array like x using the global_rng state"""
  # We have two side-effects here:
  # - printing the shape and dtype
  # - calling global_rng, thus updating its state
  print(f'generating {x.dtype}{list(x.shape)}')
  return global_rng.uniform(size=x.shape).astype(x.dtype)

@jax.jit
def numpy_random_like(x):
  return io_callback(host_side_random_like, x, x)

x = jnp.zeros(5)
print(numpy_random_like(x))

print(jax.vmap(numpy_random_like)(x))

try:
    @jax.jit
    def numpy_random_like_ordered(x):
      return io_callback(host_side_random_like, x, x, ordered=True)

    jax.vmap(numpy_random_like_ordered)(x)
except ValueError:
    print('raised ValueError')

def body_fun(_, x):
  return _, numpy_random_like_ordered(x)

print(jax.lax.scan(body_fun, None, jnp.arange(5.0))[1])

try:
    jax.grad(numpy_random_like)(x)
except ValueError:
    print('raised ValueError')

@jax.jit
def f(x):
  io_callback(lambda: print('hello'), None)
  return x

jax.grad(f)(1.0);

from jax import debug

def log_value(x):
  # This could be an actual logging call; we'll use
  # print() for demonstration
  print("log:", x)

@jax.jit
def f(x):
  debug.callback(log_value, x)
  return x

f(1.0);

x = jnp.arange(5.0)
jax.vmap(f)(x);

jax.grad(f)(1.0);

import jax
import jax.numpy as jnp
import scipy.special

def jv(v, z):
  v, z = jnp.asarray(v), jnp.asarray(z)

  # Require the order v to be integer type: this simplifies
  # the JVP rule below.
  assert jnp.issubdtype(v.dtype, jnp.integer)

  # Promote the input to inexact (float/complex).
  # Note that jnp.result_type() accounts for the enable_x64 flag.
  z = z.astype(jnp.result_type(float, z.dtype))

  # Wrap scipy function to return the expected dtype.
  _scipy_jv = lambda v, z: scipy.special.jv(v, z).astype(z.dtype)

  # Define the expected shape & dtype of output.
  result_shape_dtype = jax.ShapeDtypeStruct(
      shape=jnp.broadcast_shapes(v.shape, z.shape),
      dtype=z.dtype)

  # Use vmap_method="broadcast_all" because scipy.special.jv handles broadcasted inputs.
  return jax.pure_callback(_scipy_jv, result_shape_dtype, v, z, vmap_method="broadcast_all")

from functools import partial
j1 = partial(jv, 1)
z = jnp.arange(5.0)

print(j1(z))

print(jax.jit(j1)(z))

print(jax.vmap(j1)(z))

try:
    jax.grad(j1)(z)
except ValueError:
    print('raised ValueError')

jv = jax.custom_jvp(jv)

@jv.defjvp
def _jv_jvp(primals, tangents):
  v, z = primals
  _, z_dot = tangents  # Note: v_dot is always 0 because v is integer.
  jv_minus_1, jv_plus_1 = jv(v - 1, z), jv(v + 1, z)
  djv_dz = jnp.where(v == 0, -jv_plus_1, 0.5 * (jv_minus_1 - jv_plus_1))
  return jv(v, z), z_dot * djv_dz

j1 = partial(jv, 1)
print(jax.grad(j1)(2.0))

print(jax.hessian(j1)(2.0))
'''

STATEFUL = r'''
import jax
import jax.numpy as jnp
class Counter:
  """A simple counter."""
  def __init__(self):
    self.n = 0
  def count(self) -> int:
    """Increments the counter and returns the new value."""
    self.n += 1
    return self.n
  def reset(self):
    """Resets the counter to zero."""
    self.n = 0
counter = Counter()
for _ in range(3):
  print(counter.count())
counter.reset()
fast_count = jax.jit(counter.count)
for _ in range(3):
  print(fast_count())
CounterState = int
class CounterV2:
  def count(self, n: CounterState) -> tuple[int, CounterState]:
    # You could just return n+1, but here we separate its role as 
    # the output and as the counter state for didactic purposes.
    return n+1, n+1
  def reset(self) -> CounterState:
    return 0
counter = CounterV2()
state = counter.reset()
for _ in range(3):
  value, state = counter.count(state)
  print(value)
state = counter.reset()
fast_count = jax.jit(counter.count)
for _ in range(3):
  value, state = fast_count(state)
  print(value)
from typing import NamedTuple
class Params(NamedTuple):
  weight: jnp.ndarray
  bias: jnp.ndarray
def init(rng) -> Params:
  """Returns the initial model params."""
  weights_key, bias_key = jax.random.split(rng)
  weight = jax.random.normal(weights_key, ())
  bias = jax.random.normal(bias_key, ())
  return Params(weight, bias)
def loss(params: Params, x: jnp.ndarray, y: jnp.ndarray) -> jnp.ndarray:
  """Computes the least squares error of the model's predictions on x against y."""
  pred = params.weight * x + params.bias
  return jnp.mean((pred - y) ** 2)
LEARNING_RATE = 0.005
@jax.jit
def update(params: Params, x: jnp.ndarray, y: jnp.ndarray) -> Params:
  """Performs one SGD update step on params using the given data."""
  grad = jax.grad(loss)(params, x, y)
  # If we were using Adam or another stateful optimizer,
  # we would also do something like
  #
  #   updates, new_optimizer_state = optimizer(grad, optimizer_state)
  # 
  # and then use `updates` instead of `grad` to actually update the params.
  # (And we'd include `new_optimizer_state` in the output, naturally.)
  new_params = jax.tree.map(
      lambda param, g: param - g * LEARNING_RATE, params, grad)
  return new_params
rng = jax.random.key(42)
# Generate true data from y = w*x + b + noise
true_w, true_b = 2, -1
x_rng, noise_rng = jax.random.split(rng)
xs = jax.random.normal(x_rng, (128, 1))
noise = jax.random.normal(noise_rng, (128, 1)) * 0.5
ys = xs * true_w + true_b + noise
# Fit regression
params = init(rng)
for _ in range(1000):
  params = update(params, xs, ys)
print(params.weight, params.bias)
'''

PYTREES = r'''
import jax
import jax.numpy as jnp

example_trees = [
    [1, 'a', object()],
    (1, (2, 3), ()),
    [1, {'k1': 2, 'k2': (3, 4)}, 5],
    {'a': 2, 'b': (2, 3)},
    jnp.array([1, 2, 3]),
]

# Print how many leaves the pytrees have.
for pytree in example_trees:
  # This `jax.tree.leaves()` method extracts the flattened leaves from the pytrees.
  leaves = jax.tree.leaves(pytree)
  print(f"{repr(pytree):<45} has {len(leaves)} leaves: {leaves}")

list_of_lists = [
    [1, 2, 3],
    [1, 2],
    [1, 2, 3, 4]
]

print(jax.tree.map(lambda x: x*2, list_of_lists))

another_list_of_lists = list_of_lists
print(jax.tree.map(lambda x, y: x+y, list_of_lists, another_list_of_lists))

import numpy as np

def init_mlp_params(layer_widths):
  params = []
  for n_in, n_out in zip(layer_widths[:-1], layer_widths[1:]):
    params.append(
        dict(weights=np.random.normal(size=(n_in, n_out)) * np.sqrt(2/n_in),
             biases=np.ones(shape=(n_out,))
            )
    )
  return params

params = init_mlp_params([1, 128, 128, 1])

print(jax.tree.map(lambda x: x.shape, params))

# Define the forward pass.
def forward(params, x):
  *hidden, last = params
  for layer in hidden:
    x = jax.nn.relu(x @ layer['weights'] + layer['biases'])
  return x @ last['weights'] + last['biases']

# Define the loss function.
def loss_fn(params, x, y):
  return jnp.mean((forward(params, x) - y) ** 2)

# Set the learning rate.
LEARNING_RATE = 0.0001

# Using the stochastic gradient descent, define the parameter update function.
# Apply `@jax.jit` for JIT compilation (speed).
@jax.jit
def update(params, x, y):
  # Calculate the gradients with `jax.grad`.
  grads = jax.grad(loss_fn)(params, x, y)
  # Note that `grads` is a pytree with the same structure as `params`.
  # `jax.grad` is one of many JAX functions that has
  # built-in support for pytrees.
  # This is useful - you can apply the SGD update using JAX pytree utilities.
  return jax.tree.map(
      lambda p, g: p - LEARNING_RATE * g, params, grads
  )

from jax.tree_util import tree_structure
print(tree_structure(object))

import collections

ATuple = collections.namedtuple("ATuple", ('name'))

tree = [1, {'k1': 2, 'k2': (3, 4)}, ATuple('foo')]
flattened, _ = jax.tree_util.tree_flatten_with_path(tree)

for key_path, value in flattened:
  print(f'Value of tree{jax.tree_util.keystr(key_path)}: {value}')

for key_path, _ in flattened:
  print(f'Key path of tree{jax.tree_util.keystr(key_path)}: {repr(key_path)}')

a_tree = [jnp.zeros((2, 3)), jnp.zeros((3, 4))]

# Try to make another pytree with ones instead of zeros.
shapes = jax.tree.map(lambda x: x.shape, a_tree)
print(jax.tree.map(jnp.ones, shapes))

print(jax.tree.leaves([None, None, None]))

print(jax.tree.leaves([None, None, None], is_leaf=lambda x: x is None))

try:
    jax.tree.map(lambda x: x + 1, {1: 7, "y": 42})
except ValueError:
    print('raised ValueError')

def tree_transpose(list_of_trees):
  """
  Converts a list of trees of identical structure into a single tree of lists.
  """
  return jax.tree.map(lambda *xs: list(xs), *list_of_trees)

# Convert a dataset from row-major to column-major.
episode_steps = [dict(t=1, obs=3), dict(t=2, obs=4)]
print(tree_transpose(episode_steps))

print(jax.tree.transpose(
  outer_treedef = jax.tree.structure([0 for e in episode_steps]),
  inner_treedef = jax.tree.structure(episode_steps[0]),
  pytree_to_transpose = episode_steps
))
'''

PROGRAMS = {"gotchas": GOTCHAS, "control_flow": CONTROL_FLOW, "complex_differentiation": COMPLEX,
            "log_probs": LOG_PROBS, "external_callbacks": EXTERNAL_CALLBACKS, "stateful": STATEFUL,
            "pytrees": PYTREES}   # (not "complex": conftest reads a parameter that names a dtype as one)

_TRACER = re.compile(r"JitTracer\([^)]*\)|Traced<[^>]*>with<\w+>")
_PADDING = re.compile(r"\s+\]")   # NumPy pads the last element of an array to its column
_CAUGHT = re.compile(r"Caught expected exception .*")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+>")   # (an object's repr)

#: What fnarray prints otherwise, by design (docs/from_jax.md), as (fnarray's text, JAX's) pairs: a
#: ``pure_callback`` whose results go unused is called (JAX's compiler may drop it: its ``f2``), a tree structure
#: prints as optree's ``PyTreeSpec``, and a dict whose keys do not sort (``{1: 7, "y": 42}``) is a tree in insertion
#: order (JAX raises ``ValueError``; MLX's trees and ``fnarray.save``'s checkpoints hold such dicts).
_DIFFERENCES = {"external_callbacks": [("printing something\nprinting something\n", "printing something\n")],
                "pytrees": [("PyTreeSpec(*)", "PyTreeDef(*)"),
                            ("[None, None, None]\n{", "[None, None, None]\nraised ValueError\n{")]}


def _run(source: str) -> tuple[str, list]:
    """Execute ``source`` as ``__main__`` in this process: its standard output (tracers' text and NumPy's padding
    normalised) and the 64-bit dtype warnings it gave (their first words)."""
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        exec(compile(source, "<program>", "exec"), {"__name__": "__main__"})  # noqa: S102 (test programs)
    text = _TRACER.sub("<tracer>", _ADDRESS.sub(" at 0x>", out.getvalue()))
    text = _CAUGHT.sub("Caught expected exception", _PADDING.sub("]", text))
    dtype_warnings = [" ".join(str(w.message).split()[:4]) for w in caught
                      if str(w.message).startswith("Explicitly requested dtype")]
    return text, dtype_warnings


#: JAX's outputs (printed text, dtype warnings) as JAX made them: running JAX's pages costs 1.5-4.4 s of CPU each
#: (its eager operations compile one by one), fnarray's ports 0.02-0.2 s. Kept for the JAX version that made them;
#: under another version, or with ``FNARRAY_REGEN_GOLDEN=1`` (which rewrites the file), JAX runs them anew.
_GOLDEN = pathlib.Path(__file__).parent / "golden" / "ports_s26_jax.json"
_JAX_OUTPUTS: dict[str, tuple] = {}


def _jax_output(name: str) -> tuple[str, list]:
    if name not in _JAX_OUTPUTS:
        stored = json.loads(_GOLDEN.read_text()) if _GOLDEN.exists() else {}
        regen = bool(os.environ.get("FNARRAY_REGEN_GOLDEN"))
        if not regen and stored.get("jax") == jax.__version__ and name in stored:
            _JAX_OUTPUTS[name] = (stored[name]["printed"], stored[name]["warnings"])
        else:
            printed, warned = _JAX_OUTPUTS[name] = _run(PROGRAMS[name])
            if regen:
                stored = stored if stored.get("jax") == jax.__version__ else {"jax": jax.__version__}
                stored[name] = {"printed": printed, "warnings": warned}
                _GOLDEN.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    return _JAX_OUTPUTS[name]


def test_rewrite_changes_imports_only():
    assert_rewrite_changes_imports_only(PROGRAMS.values())


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_ports_with_imports_only(name):
    """The page's program prints JAX's numbers (float rounding apart), words and caught error classes, and gives
    JAX's dtype warnings."""
    import fnarray as fa
    want, want_warnings = _jax_output(name)
    with fa.default_device("numpy:0"):
        got, got_warnings = _run(rewrite_imports(PROGRAMS[name]))
    for ours, theirs in _DIFFERENCES.get(name, ()):
        assert ours in got
        got = got.replace(ours, theirs, 1)
    compare_outputs(want, got, rtol=2e-4, atol=2e-5)
    assert got_warnings == want_warnings
    if name == "gotchas":
        assert want_warnings == ["Explicitly requested dtype float64"]
        assert "raised jax.errors.NonConcreteBooleanIndexError" in got


def test_dict_key_order_as_jax():
    """JAX flattens dicts by sorted keys and rebuilds them sorted: ``tree_unflatten``, ``tree_map`` and the dicts
    ``jit``, ``grad``, ``vmap``, ``jvp``, ``vjp``, ``eval_shape``, ``scan`` and ``cond`` return (optree rebuilt a
    dict in its insertion order); an ``OrderedDict`` keeps its order in both."""
    import collections

    import fnarray as fa

    def orders(jx, jnp):
        d = {"b": jnp.ones(2), "a": jnp.zeros(2), "c": {"z": jnp.ones(1), "y": 2.0}}
        leaves, treedef = jx.tree_util.tree_flatten(d)
        f = lambda t: jnp.sum(t["b"]) + jnp.sum(t["a"]) + t["c"]["y"]
        od = collections.OrderedDict([("b", 1.0), ("a", 2.0)])
        dd = collections.defaultdict(list, {"b": 1.0, "a": 2.0})
        outs = [jx.tree_util.tree_unflatten(treedef, leaves), jx.tree_util.tree_map(lambda x: x, d),
                jx.jit(lambda t: t)(d), jx.jit(lambda x: {"q": x, "p": x, "r": x})(1.0), jx.grad(f)(d),
                jx.vmap(lambda t: t, in_axes=({"b": 0, "a": 0, "c": None},))(d),
                jx.vmap(lambda x: {"q": x, "p": x})(jnp.ones(3)),
                jx.jvp(lambda t: {"z": t["b"], "a": t["a"]}, (d,), (d,))[1], jx.eval_shape(lambda t: t, d),
                jx.vjp(lambda t: t, d)[1](d)[0], jx.lax.scan(lambda c, x: (c, {"q": x, "p": x}), 0.0, jnp.ones(2))[1],
                jx.lax.cond(True, lambda t: t, lambda t: t, {"b": 1.0, "a": 2.0}), jx.tree_util.tree_map(float, od),
                jx.tree_util.tree_map(float, dd)]
        shapes = [getattr(x, "shape", x) for x in leaves]
        paths = [jx.tree_util.keystr(p) for p, _ in jx.tree_util.tree_leaves_with_path(d)]
        return shapes, paths, [(list(o), list(o["c"]) if "c" in o else None) for o in outs]

    import fnarray.numpy as fnp
    got = orders(fa, fnp)
    # JAX 0.10.2's (its transforms cost ~1.5 s here; tree_util's own order is checked against JAX live below)
    sorted_abc = (["a", "b", "c"], ["y", "z"])
    assert got == ([(2,), (2,), 2.0, (1,)], ["['a']", "['b']", "['c']['y']", "['c']['z']"],
                   [sorted_abc, sorted_abc, sorted_abc, (["p", "q", "r"], None), sorted_abc, sorted_abc,
                    (["p", "q"], None), (["a", "z"], None), sorted_abc, sorted_abc, (["p", "q"], None),
                    (["a", "b"], None), (["b", "a"], None), (["a", "b"], None)])
    d = {"b": 1.0, "a": {"z": 2.0, "y": 3.0}}
    for tree in (d, collections.OrderedDict([("b", 1.0), ("a", 2.0)]), collections.defaultdict(int, d)):
        for jx in (fa, jax):
            leaves, treedef = jx.tree_util.tree_flatten(tree)
            rebuilt = jx.tree_util.tree_unflatten(treedef, leaves)
            assert (leaves, repr(rebuilt)) == (jax.tree_util.tree_leaves(tree),
                                               repr(jax.tree_util.tree_map(lambda x: x, tree)))


def test_io_callback_as_jax():
    """``fa.experimental.io_callback`` on jax:0 (the page ran on numpy:0) is JAX's ``io_callback``: called though
    its result goes unused (XLA keeps it), once per example under ``vmap``, refused there when ``ordered``;
    ``ShapeDtypeStruct.like`` as JAX's."""
    import fnarray as fa
    from fnarray.experimental import io_callback
    calls = []

    def host(x):
        calls.append(x.shape)
        return (x + 1).astype(x.dtype)

    def f(x, ordered=False):
        io_callback(host, fa.ShapeDtypeStruct.like(x), x, ordered=ordered)
        return x * 2
    x = np.arange(3, dtype=np.float32)
    with fa.default_device("jax:0"):
        np.testing.assert_array_equal(fa.jit(f)(x), 2 * x)
        fa.jit(fa.vmap(f))(x)
        with pytest.raises(ValueError, match="ordered"):
            fa.vmap(lambda v: f(v, ordered=True))(x)
    assert calls == [(3,), (), (), ()]
    for v in (1.0, x, np.int8(3)):
        got, want = fa.ShapeDtypeStruct.like(v), jax.ShapeDtypeStruct.like(v)
        assert (got.shape, got.dtype, got.weak_type) == (want.shape, want.dtype, want.weak_type)


def test_jax_errors_as_jax():
    """``jax.errors``' classes: each conversion of a traced value raises the class JAX raises, caught by JAX's
    ``except`` clauses (and by ``TypeError``/``IndexError``); their base classes: tests/test_compat_s26.py."""
    import fnarray as fa
    import fnarray.numpy as fnp
    cases = {"TracerBoolConversionError": lambda jx, xp: jx.jit(lambda x: 1 if x > 0 else 2)(1.0),
             "TracerIntegerConversionError": lambda jx, xp: jx.jit(lambda x: list(range(x)))(3),
             "TracerArrayConversionError": lambda jx, xp: jx.jit(lambda x: np.sin(np.asarray(x)))(1.0),
             "NonConcreteBooleanIndexError": lambda jx, xp: jx.jit(lambda x: x[x > 0])(xp.ones(3)),
             "ConcretizationTypeError": lambda jx, xp: jx.jit(lambda x: float(x))(1.0)}
    for name, call in cases.items():
        for jx, xp in ((jax, jax.numpy), (fa, fnp)):
            with pytest.raises(getattr(jx.errors, name)) as info:
                call(jx, xp)
            assert isinstance(info.value, (TypeError, IndexError))
        # (fnarray's are also its ConcretizationError, which code written for fnarray catches)
        assert issubclass(getattr(fa.errors, name), fa.ConcretizationError)


# ---------------------------------------------------------------------------------------------- mlx-examples' mnist

#: ml-explore/mlx-examples ``mnist/main.py`` (7ddca42: an MLP of ``nn.Linear`` in a list, ``nn.losses.cross_entropy``,
#: ``optim.SGD``, ``mx.compile(inputs=model.state, outputs=model.state)`` of the step and ``inputs=model.state`` of
#: the evaluation, batches by ``mx.array(np.random.permutation(n))`` and ``X[ids]``); ``mnist.mnist()`` is a
#: synthetic stand-in (``MNIST_DATA``: 1,024 + 256 points in 64 dimensions around 10 centres), 3 epochs, argument
#: parsing left out. One line added for both libraries: MLX saves its initial weights (``WEIGHTS``), the port
#: loads them.
MNIST_MLX = r'''
import argparse
import time
from functools import partial

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

import mnist


class MLP(nn.Module):
    """A simple MLP."""

    def __init__(
        self, num_layers: int, input_dim: int, hidden_dim: int, output_dim: int
    ):
        super().__init__()
        layer_sizes = [input_dim] + [hidden_dim] * num_layers + [output_dim]
        self.layers = [
            nn.Linear(idim, odim)
            for idim, odim in zip(layer_sizes[:-1], layer_sizes[1:])
        ]

    def __call__(self, x):
        for l in self.layers[:-1]:
            x = nn.relu(l(x))
        return self.layers[-1](x)


def loss_fn(model, X, y):
    return nn.losses.cross_entropy(model(X), y, reduction="mean")


def batch_iterate(batch_size, X, y):
    perm = mx.array(np.random.permutation(y.size))
    for s in range(0, y.size, batch_size):
        ids = perm[s : s + batch_size]
        yield X[ids], y[ids]


def main(args):
    seed = 0
    num_layers = 2
    hidden_dim = 32
    num_classes = 10
    batch_size = 256
    num_epochs = 3
    learning_rate = 1e-1

    np.random.seed(seed)

    # Load the data
    train_images, train_labels, test_images, test_labels = map(
        mx.array, getattr(mnist, args.dataset)()
    )

    # Load the model
    model = MLP(num_layers, train_images.shape[-1], hidden_dim, num_classes)
    mx.eval(model.parameters())
    model.save_weights(WEIGHTS)

    optimizer = optim.SGD(learning_rate=learning_rate)
    loss_and_grad_fn = nn.value_and_grad(model, loss_fn)

    @partial(mx.compile, inputs=model.state, outputs=model.state)
    def step(X, y):
        loss, grads = loss_and_grad_fn(model, X, y)
        optimizer.update(model, grads)
        return loss

    @partial(mx.compile, inputs=model.state)
    def eval_fn(X, y):
        return mx.mean(mx.argmax(model(X), axis=1) == y)

    for e in range(num_epochs):
        tic = time.perf_counter()
        for X, y in batch_iterate(batch_size, train_images, train_labels):
            step(X, y)
            mx.eval(model.state)
        accuracy = eval_fn(test_images, test_labels)
        toc = time.perf_counter()
        print(
            f"Epoch {e}: Test accuracy {accuracy.item():.3f},"
            f" Time {toc - tic:.3f} (s)"
        )


if __name__ == "__main__":
    main(ARGS)
'''

MNIST_DATA = r'''
import numpy as np
def mnist():
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(10, 64)).astype(np.float32)
    def make(n):
        y = rng.integers(0, 10, n).astype(np.uint32)
        x = (centers[y] + 1.5 * rng.normal(size=(n, 64))).astype(np.float32)
        return x, y
    a, b = make(1024); c, d = make(256)
    return a, b, c, d
'''

#: What the port changes besides the imports, (MLX's text, fnarray's): docs/from_mlx.md says why each is there
#: (explicit keys, annotated module fields, modules as values: the pure step takes and returns the model and the
#: optimizer's state, and the evaluation takes the model where ``mx.compile(inputs=model.state)`` read it).
MNIST_CHANGES = (
    ("import mlx.core as mx\nimport mlx.nn as nn\nimport mlx.optimizers as optim\n",
     "import fnarray as fa\nimport fnarray.numpy as mx\nimport fnarray.nn as nn\nimport fnarray.optim as optim\n"),
    ('    """A simple MLP."""\n', '    """A simple MLP."""\n\n    layers: list\n'),
    ("        self, num_layers: int, input_dim: int, hidden_dim: int, output_dim: int\n    ):",
     "        self, num_layers: int, input_dim: int, hidden_dim: int, output_dim: int, *, key\n    ):"),
    ("            nn.Linear(idim, odim)\n            for idim, odim in zip(layer_sizes[:-1], layer_sizes[1:])",
     "            nn.Linear(idim, odim, key=k)\n"
     "            for idim, odim, k in zip(layer_sizes[:-1], layer_sizes[1:],\n"
     "                                     fa.random.split(key, len(layer_sizes) - 1))"),
    ("    model = MLP(num_layers, train_images.shape[-1], hidden_dim, num_classes)\n    mx.eval(model.parameters())\n"
     "    model.save_weights(WEIGHTS)",
     "    model = MLP(num_layers, train_images.shape[-1], hidden_dim, num_classes, key=fa.random.key(seed))\n"
     "    model = model.load_weights(WEIGHTS)"),
    ("    loss_and_grad_fn = nn.value_and_grad(model, loss_fn)\n",
     "    loss_and_grad_fn = nn.value_and_grad(model, loss_fn)\n    state = optimizer.init(model)\n"),
    ("    @partial(mx.compile, inputs=model.state, outputs=model.state)\n    def step(X, y):\n"
     "        loss, grads = loss_and_grad_fn(model, X, y)\n        optimizer.update(model, grads)\n        return loss",
     "    @fa.jit\n    def step(model, state, X, y):\n        loss, grads = loss_and_grad_fn(model, X, y)\n"
     "        updates, state = optimizer.update(grads, state, model)\n"
     "        return optim.apply_updates(model, updates), state, loss"),
    ("    @partial(mx.compile, inputs=model.state)\n    def eval_fn(X, y):",
     "    @fa.jit\n    def eval_fn(model, X, y):"),
    ("            step(X, y)\n            mx.eval(model.state)",
     "            model, state, _ = step(model, state, X, y)"),
    ("        accuracy = eval_fn(test_images, test_labels)",
     "        accuracy = eval_fn(model, test_images, test_labels)"),
)

_TIME = re.compile(r", Time \d+\.\d+ \(s\)")


def _run_mnist(source: str, weights: str) -> str:
    """``source`` as ``__main__`` with ``mnist`` the synthetic stand-in; its output, the timings cut."""
    import sys
    import types
    stub = types.ModuleType("mnist")
    exec(MNIST_DATA, stub.__dict__)  # noqa: S102 (test data)
    saved = sys.modules.get("mnist")
    sys.modules["mnist"] = stub
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, "<program>", "exec"),  # noqa: S102 (test programs)
                 {"__name__": "__main__", "ARGS": types.SimpleNamespace(dataset="mnist"), "WEIGHTS": weights})
    finally:
        if saved is None:
            sys.modules.pop("mnist", None)
        else:
            sys.modules["mnist"] = saved
    return _TIME.sub("", out.getvalue())


def test_mlx_mnist_port_trains_as_mlx(tmp_path):
    """mlx-examples' mnist, ported with the changes of ``MNIST_CHANGES``, prints MLX's test accuracies (3 decimals)
    from MLX's initial weights and the same batches. MLX runs with ``mx.disable_compile()`` (its first compiles
    build C++ kernels: seconds on a fresh machine; the values are the same)."""
    mx = pytest.importorskip("mlx.core")
    import fnarray as fa
    port = MNIST_MLX
    for mlx_text, fnarray_text in MNIST_CHANGES:
        assert port.count(mlx_text) == 1, mlx_text
        port = port.replace(mlx_text, fnarray_text)
    weights = str(tmp_path / "mnist_init.safetensors")
    mx.random.seed(0)
    mx.disable_compile()
    try:
        want = _run_mnist(MNIST_MLX, weights)
    finally:
        mx.enable_compile()
    with fa.default_device("numpy:0"):
        got = _run_mnist(port, weights)
    compare_outputs(want, got, rtol=0, atol=1.5e-3)
    assert want.count("Test accuracy") == 3
