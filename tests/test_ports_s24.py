"""Public JAX programs of the twenty-fourth session's port probe, run as written under JAX and, after
``jax_port.rewrite_imports`` (an import change only), under fnarray: both must print the same numbers.

Sources (code only, sizes shrunk; comments and prose left out):

- ``SPMD_MNIST``: jax-ml/jax ``examples/spmd_mnist_classifier_fromscratch.py`` (cec06d1, explicit sharding:
  ``jax.NamedSharding``, ``jax.device_count``, ``jax.make_mesh(axis_types=)``, ``jax.sharding.reshard``,
  ``@jax.jit(donate_argnums=0)``, ``with jax.set_mesh``); ``datasets.mnist()`` is a synthetic stand-in, the layer
  sizes, epochs, batch and step size are small. Before this session's fixes it failed at
  ``from jax import NamedSharding`` (and then at ``jax.device_count``).
- ``KERNEL_LSQ``: jax-ml/jax ``examples/kernel_lsq.py`` (the last version, c856560f0e^: nested ``vmap`` Gram
  matrix, ``optimizers.momentum``, ``lax.Precision.HIGH``, ``make_jaxpr``); ``numpy.random`` seeded by the
  harness, fewer steps. The jaxprs print fnarray's IR, not JAX's text: only the MSE is compared.
- ``CUSTOM_DERIVATIVES``: the cells of JAX's notebook "Custom derivative rules for JAX-transformable Python
  functions" (jax-ml/jax/docs/notebooks/Custom_derivative_rules_for_Python_code.md): ``custom_jvp`` with ``defjvp`` and
  ``defjvps``, ``log1pexp``, ``clip_gradient`` (``custom_vjp`` returning ``None`` cotangents), the
  ``fixed_point`` solver with ``custom_vjp(nondiff_argnums=)`` and second derivatives, a namedtuple pytree
  through ``custom_jvp`` and ``custom_vjp``. Before the fixes both namedtuple cells printed the gradient of the
  unused field as a strong float32 zero (JAX: weak).
- ``CUSTOM_PYTREES``: the cells of JAX's page "Custom pytree nodes" (jax-ml/jax/docs/custom_pytrees.md) that run
  (``register_pytree_node``, ``register_pytree_node_class``, ``register_dataclass`` with static fields, a
  namedtuple, ``jax.tree.map`` / ``jax.tree.flatten`` over them).

Each program runs in this process (JAX's run and fnarray's, standard output captured) on numpy:0; the two
training programs also on the kernel backend of ``jax_port.PORT_DEVICES``. All four passed on jax:0, mlx:0 and
webgpu:0 too when written (not run here: CI time). docs/from_jax.md lists what differs.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types

import numpy as np
import pytest

from jax_port import PORT_DEVICES, assert_rewrite_changes_imports_only, compare_outputs, rewrite_imports

pytest.importorskip("jax", reason="JAX runs the programs as written")

DATASETS = '''
import numpy as np
def mnist():
    rng = np.random.RandomState(1)
    centers = rng.randn(10, 784).astype(np.float32)
    def make(n):
        lab = rng.randint(0, 10, n)
        return (centers[lab] + rng.randn(n, 784) * 2.0).astype(np.float32), np.eye(10, dtype=np.float32)[lab]
    return (*make(200), *make(104))
'''

SPMD_MNIST = '''
import time

from jax import NamedSharding
import numpy as np
import numpy.random as npr
import jax
from jax import jit, grad
from jax.sharding import PartitionSpec as P, AxisType, reshard
from jax.scipy.special import logsumexp
import jax.numpy as jnp
import datasets


def init_random_params(scale, layer_sizes, rng=npr.RandomState(0)):
  return [
    (scale * rng.randn(m, n), scale * rng.randn(n))
    for m, n in zip(layer_sizes[:-1], layer_sizes[1:])
  ]


def predict(params, inputs):
  activations = inputs
  for w, b in params[:-1]:
    outputs = jnp.dot(activations, w) + b
    activations = jnp.tanh(outputs)

  final_w, final_b = params[-1]
  logits = jnp.dot(activations, final_w) + final_b
  return logits - logsumexp(logits, axis=1, keepdims=True)


def loss(params, batch):
  inputs, targets = batch
  preds = predict(params, inputs)
  return -jnp.mean(jnp.sum(preds * targets, axis=1))


@jax.jit(donate_argnums=0)
def train_step(params, batch):
  grads = grad(loss)(params, batch)
  return [
    (w - step_size * dw, b - step_size * db) for (w, b), (dw, db) in zip(params, grads)
  ]


@jit
def accuracy(params, batch):
  inputs, targets = batch
  target_class = jnp.argmax(targets, axis=1)
  predicted_class = jnp.argmax(predict(params, inputs), axis=1)
  return jnp.mean(predicted_class == target_class)


if __name__ == "__main__":
  layer_sizes = [784, 32, 10]
  param_scale = 0.1
  step_size = 0.05
  num_epochs = 2
  batch_size = 64

  train_images, train_labels, test_images, test_labels = datasets.mnist()
  num_train = train_images.shape[0]

  num_devices = jax.device_count()
  print(f"Using {num_devices} devices")

  if batch_size % num_devices != 0:
    batch_size = (batch_size // num_devices) * num_devices
    print(f"Adjusting batch size to {batch_size} for divisibility")

  num_complete_batches, leftover = divmod(num_train, batch_size)
  num_batches = num_complete_batches + bool(leftover)

  devices = np.array(jax.devices())
  mesh = jax.make_mesh(
    (jax.device_count(),), ("batch",), axis_types=(AxisType.Explicit,)
  )

  replicated_sharding = NamedSharding(mesh, P())
  data_sharding = NamedSharding(mesh, P("batch"))

  def data_stream():
    rng = npr.RandomState(0)
    while True:
      perm = rng.permutation(num_train)
      for i in range(num_batches):
        batch_idx = perm[i * batch_size : (i + 1) * batch_size]
        images_np, labels_np = train_images[batch_idx], train_labels[batch_idx]

        current_batch_size = images_np.shape[0]
        if current_batch_size < batch_size:
          pad_len = batch_size - current_batch_size
          images_np = np.concatenate([images_np, images_np[:pad_len]], axis=0)
          labels_np = np.concatenate([labels_np, labels_np[:pad_len]], axis=0)

        images = jax.device_put(images_np, data_sharding)
        labels = jax.device_put(labels_np, data_sharding)
        yield images, labels

  batches = data_stream()

  params = init_random_params(param_scale, layer_sizes)
  replicated_params = jax.device_put(params, replicated_sharding)

  for epoch in range(num_epochs):
    start_time = time.time()
    for i in range(num_batches - 1):
      print(f"Batch no {i+1} of {num_batches}")
      batch = next(batches)
      with jax.set_mesh(mesh):
        replicated_params = train_step(replicated_params, batch)
    epoch_time = time.time() - start_time

    sharded_train_images = reshard(train_images, data_sharding)
    sharded_train_labels = reshard(train_labels, data_sharding)
    sharded_test_images = reshard(test_images, data_sharding)
    sharded_test_labels = reshard(test_labels, data_sharding)

    train_acc = accuracy(
      replicated_params, (sharded_train_images, sharded_train_labels)
    )
    test_acc = accuracy(replicated_params, (sharded_test_images, sharded_test_labels))
    print(f"Epoch {epoch} in {epoch_time:0.2f} sec")
    print(f"Training set accuracy {train_acc}")
    print(f"Test set accuracy {test_acc}")

    if epoch < num_epochs - 1:
      batches = data_stream()
      print(f"Batch no {0} of {num_batches}")
      replicated_params = train_step(replicated_params, next(batches))
'''

KERNEL_LSQ = '''
from functools import partial

import numpy.random as npr

import jax.numpy as jnp
from jax.example_libraries import optimizers
from jax import grad, jit, make_jaxpr, vmap, lax


def gram(kernel, xs):
  return vmap(lambda x: vmap(lambda y: kernel(x, y))(xs))(xs)


def minimize(f, x, num_steps=300, step_size=0.000001, mass=0.9):
  opt_init, opt_update, get_params = optimizers.momentum(step_size, mass)

  @jit
  def update(i, opt_state):
    x = get_params(opt_state)
    return opt_update(i, grad(f)(x), opt_state)

  opt_state = opt_init(x)
  for i in range(num_steps):
    opt_state = update(i, opt_state)
  return get_params(opt_state)


def train(kernel, xs, ys, regularization=0.01):
  gram_ = jit(partial(gram, kernel))
  gram_mat = gram_(xs)
  n = xs.shape[0]

  def objective(v):
    risk = .5 * jnp.sum((jnp.dot(gram_mat, v) - ys) ** 2.0)
    reg = regularization * jnp.sum(v ** 2.0)
    return risk + reg

  v = minimize(objective, jnp.zeros(n))

  def predict(x):
    prods = vmap(lambda x_: kernel(x, x_))(xs)
    return jnp.sum(v * prods)

  return jit(vmap(predict))


if __name__ == "__main__":
  n = 30
  d = 5

  linear_kernel = lambda x, y: jnp.dot(x, y, precision=lax.Precision.HIGH)
  truth = npr.randn(d)
  xs = npr.randn(n, d)
  ys = jnp.dot(xs, truth)

  predict = train(linear_kernel, xs, ys)

  print('MSE:', jnp.sum((predict(xs) - ys) ** 2.))

  def gram_jaxpr(kernel):
    return make_jaxpr(partial(gram, kernel))(xs)

  rbf_kernel = lambda x, y: jnp.exp(-jnp.sum((x - y) ** 2))

  print()
  print('jaxpr of gram(linear_kernel):')
  print(gram_jaxpr(linear_kernel))
  print()
  print('jaxpr of gram(rbf_kernel):')
  print(gram_jaxpr(rbf_kernel))
'''

CUSTOM_DERIVATIVES = '''
import jax.numpy as jnp
from functools import partial
from collections import namedtuple
from jax import custom_jvp, custom_vjp, jvp, vjp, grad, jit, vmap
from jax.lax import while_loop

@custom_jvp
def f(x, y):
  return jnp.sin(x) * y

@f.defjvp
def f_jvp(primals, tangents):
  x, y = primals
  x_dot, y_dot = tangents
  primal_out = f(x, y)
  tangent_out = jnp.cos(x) * x_dot * y + jnp.sin(x) * y_dot
  return primal_out, tangent_out

print(f(2., 3.))
y, y_dot = jvp(f, (2., 3.), (1., 0.))
print(y)
print(y_dot)
print(grad(f)(2., 3.))

@custom_jvp
def f(x, y):
  return jnp.sin(x) * y

f.defjvps(lambda x_dot, primal_out, x, y: jnp.cos(x) * x_dot * y,
          lambda y_dot, primal_out, x, y: jnp.sin(x) * y_dot)
print(grad(f)(2., 3.))

@custom_vjp
def f(x, y):
  return jnp.sin(x) * y

def f_fwd(x, y):
  return f(x, y), (jnp.cos(x), jnp.sin(x), y)

def f_bwd(res, g):
  cos_x, sin_x, y = res
  return (cos_x * g * y, sin_x * g)

f.defvjp(f_fwd, f_bwd)
print(grad(f)(2., 3.))

def log1pexp(x):
  return jnp.log(1. + jnp.exp(x))

print(jit(log1pexp)(3.))
print(jit(grad(log1pexp))(3.))
print(vmap(jit(grad(log1pexp)))(jnp.arange(3.)))
print(grad(log1pexp)(100.))

@custom_jvp
def log1pexp(x):
  return jnp.log(1. + jnp.exp(x))

@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
  x, = primals
  x_dot, = tangents
  ans = log1pexp(x)
  ans_dot = (1 - 1/(1 + jnp.exp(x))) * x_dot
  return ans, ans_dot

print(grad(log1pexp)(100.))
print(jit(log1pexp)(3.))
print(jit(grad(log1pexp))(3.))
print(vmap(jit(grad(log1pexp)))(jnp.arange(3.)))

@custom_jvp
def f(x):
  return x / (1 + jnp.sqrt(x))

f.defjvps(lambda t, ans, x: ((jnp.sqrt(x) + 2) / (2 * (jnp.sqrt(x) + 1)**2)) * t)
print(grad(f)(0.))

@custom_vjp
def clip_gradient(lo, hi, x):
  return x

def clip_gradient_fwd(lo, hi, x):
  return x, (lo, hi)

def clip_gradient_bwd(res, g):
  lo, hi = res
  return (None, None, jnp.clip(g, lo, hi))

clip_gradient.defvjp(clip_gradient_fwd, clip_gradient_bwd)

def clip_sin(x):
  x = clip_gradient(-0.75, 0.75, x)
  return jnp.sin(x)

t = jnp.linspace(0, 10, 7)
print(vmap(grad(clip_sin))(t))

@partial(custom_vjp, nondiff_argnums=(0,))
def fixed_point(f, a, x_guess):
  def cond_fun(carry):
    x_prev, x = carry
    return jnp.abs(x_prev - x) > 1e-6

  def body_fun(carry):
    _, x = carry
    return x, f(a, x)

  _, x_star = while_loop(cond_fun, body_fun, (x_guess, f(a, x_guess)))
  return x_star

def fixed_point_fwd(f, a, x_init):
  x_star = fixed_point(f, a, x_init)
  return x_star, (a, x_star)

def fixed_point_rev(f, res, x_star_bar):
  a, x_star = res
  _, vjp_a = vjp(lambda a: f(a, x_star), a)
  a_bar, = vjp_a(fixed_point(partial(rev_iter, f),
                             (a, x_star, x_star_bar),
                             x_star_bar))
  return a_bar, jnp.zeros_like(x_star)

def rev_iter(f, packed, u):
  a, x_star, x_star_bar = packed
  _, vjp_x = vjp(lambda x: f(a, x), x_star)
  return x_star_bar + vjp_x(u)[0]

fixed_point.defvjp(fixed_point_fwd, fixed_point_rev)

def newton_sqrt(a):
  update = lambda a, x: 0.5 * (x + a / x)
  return fixed_point(update, a, a)

print(newton_sqrt(2.))
print(jit(vmap(newton_sqrt))(jnp.array([1., 2., 3., 4.])))
print(grad(newton_sqrt)(2.))
print(grad(grad(newton_sqrt))(2.))

Point = namedtuple("Point", ["x", "y"])

@custom_jvp
def f(pt):
  x, y = pt.x, pt.y
  return {'a': x ** 2,
          'b': (jnp.sin(x), jnp.cos(y))}

@f.defjvp
def f_jvp(primals, tangents):
  pt, = primals
  pt_dot, =  tangents
  ans = f(pt)
  ans_dot = {'a': 2 * pt.x * pt_dot.x,
             'b': (jnp.cos(pt.x) * pt_dot.x, -jnp.sin(pt.y) * pt_dot.y)}
  return ans, ans_dot

def fun(pt):
  dct = f(pt)
  return dct['a'] + dct['b'][0]

pt = Point(1., 2.)
print(f(pt))
print(grad(fun)(pt))

@custom_vjp
def f(pt):
  x, y = pt.x, pt.y
  return {'a': x ** 2,
          'b': (jnp.sin(x), jnp.cos(y))}

def f_fwd(pt):
  return f(pt), pt

def f_bwd(pt, g):
  a_bar, (b0_bar, b1_bar) = g['a'], g['b']
  x_bar = 2 * pt.x * a_bar + jnp.cos(pt.x) * b0_bar
  y_bar = -jnp.sin(pt.y) * b1_bar
  return (Point(x_bar, y_bar),)

f.defvjp(f_fwd, f_bwd)

print(f(pt))
print(grad(fun)(pt))
'''

CUSTOM_PYTREES = '''
import functools
from dataclasses import dataclass
from typing import NamedTuple, Any
import jax
import jax.numpy as jnp
from jax.tree_util import register_pytree_node, register_pytree_node_class, tree_flatten, tree_unflatten


class Special(object):
  def __init__(self, x, y):
    self.x = x
    self.y = y

def special_flatten(v):
  children = (v.x, v.y)
  aux_data = None
  return (children, aux_data)

def special_unflatten(aux_data, children):
  return Special(*children)

register_pytree_node(Special, special_flatten, special_unflatten)
out = jax.tree.map(lambda x: x + 1, [Special(0, 1), Special(2, 4)])
print([(s.x, s.y) for s in out])


@register_pytree_node_class
class RegisteredSpecial(Special):
  def __repr__(self):
    return "RegisteredSpecial(x={}, y={})".format(self.x, self.y)

  def tree_flatten(self):
    children = (self.x, self.y)
    aux_data = None
    return (children, aux_data)

  @classmethod
  def tree_unflatten(cls, aux_data, children):
    return cls(*children)

print(jax.tree.map(lambda x: x + 1, [RegisteredSpecial(0, 1), RegisteredSpecial(2, 4)]))


class MyOtherContainer(NamedTuple):
  name: str
  a: Any
  b: Any
  c: Any

print(jax.tree.leaves([MyOtherContainer('Alice', 1, 2, 3), MyOtherContainer('Bob', 4, 5, 6)]))


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=['a', 'b', 'c'],
                   meta_fields=['name'])
@dataclass
class MyDataclassContainer(object):
  name: str
  a: Any
  b: Any
  c: Any

print(jax.tree.leaves([MyDataclassContainer('apple', 5.3, 1.2, jnp.zeros([4])),
                       MyDataclassContainer('banana', jnp.array([3, 4]), -1., 0.)]))

@jax.jit
def f(x):
  return x.a + x.b

print(f(MyDataclassContainer('mdc', 1, 2, 3)))


class MyTree:
  def __init__(self, a):
    self.a = jnp.asarray(a)

register_pytree_node(MyTree, lambda tree: ((tree.a,), None),
    lambda _, args: MyTree(*args))

tree = MyTree(jnp.arange(5.0))
print(jax.vmap(lambda x: x)(tree).a)


def tree_unflatten_dict(aux_data, children):
  return dict(zip(aux_data, children))

value_structured = [1., (2., 3.)]
value_flat, value_tree = tree_flatten(value_structured)
print(f"{value_flat=}")
transformed_flat = list(map(lambda v: v * 2., value_flat))
print(f"{transformed_flat=}")
transformed_structured = tree_unflatten(value_tree, transformed_flat)
print(f"{transformed_structured=}")
'''

PROGRAMS = {"spmd_mnist": SPMD_MNIST, "kernel_lsq": KERNEL_LSQ, "custom_derivatives": CUSTOM_DERIVATIVES,
            "custom_pytrees": CUSTOM_PYTREES}

_TIMING = re.compile(r" in \d+\.\d+ sec")
_PADDING = re.compile(r"\s+\]")   # NumPy pads the last element of an array to its column: `0.880797 ]`
_JAX_OUTPUTS: dict[str, str] = {}


def _run_here(source: str) -> str:
    """Execute ``source`` as ``__main__`` in this process, with ``numpy.random`` seeded (``KERNEL_LSQ`` draws
    from the global generator) and ``datasets`` the synthetic stand-in; its standard output, timings and the
    padding before a closing bracket cut."""
    stub = types.ModuleType("datasets")
    exec(DATASETS, stub.__dict__)  # noqa: S102 (test data)
    saved = sys.modules.get("datasets")
    sys.modules["datasets"] = stub
    np.random.seed(0)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, "<program>", "exec"), {"__name__": "__main__"})  # noqa: S102
    finally:
        if saved is None:
            sys.modules.pop("datasets", None)
        else:
            sys.modules["datasets"] = saved
    return _PADDING.sub("]", _TIMING.sub("", out.getvalue()))


def _jax_output(name: str) -> str:
    if name not in _JAX_OUTPUTS:
        _JAX_OUTPUTS[name] = _run_here(PROGRAMS[name])
    return _JAX_OUTPUTS[name]


def _compared(name: str, text: str) -> str:
    """The part of a program's output compared: ``KERNEL_LSQ``'s MSE line (its jaxprs print each library's IR)."""
    return text.split("\n\n")[0] if name == "kernel_lsq" else text


def test_rewrite_changes_imports_only():
    assert_rewrite_changes_imports_only(PROGRAMS.values())


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_ports_with_imports_only(device, name):
    """The program prints JAX's numbers with fnarray's default device set to ``device``: float rounding on
    numpy:0 (rtol 2e-4), what training amplifies on the kernel backend (2e-3)."""
    import fnarray as fa
    if str(device) not in PORT_DEVICES:
        pytest.skip(f"the whole programs run on {', '.join(PORT_DEVICES)}; {device}'s primitives: the parity suite")
    if name.startswith("custom_") and str(device) != "numpy:0":
        pytest.skip("transform rules and pytrees act on the IR, the same for every backend: numpy:0 runs them "
                    "(on opencl:0 the derivatives notebook took 3.6 s; it passed there and on jax:0, mlx:0, webgpu:0)")
    want = _jax_output(name)
    with fa.default_device(device):
        got = _run_here(rewrite_imports(PROGRAMS[name]))
    tight = str(device) == "numpy:0"
    compare_outputs(_compared(name, want), _compared(name, got), rtol=2e-4 if tight else 2e-3,
                    atol=2e-5 if tight else 2e-4)
    if name == "kernel_lsq":
        assert got.count("{ lambda ; a:f32[30,5]. let") == 2 and " exp " in got


def test_top_level_sharding_and_device_count_names_as_jax():
    """``jax.NamedSharding``, ``jax.P``, ``jax.reshard``, ``jax.device_count`` and ``local_device_count`` under
    JAX's top-level names."""
    import jax

    import fnarray as fa
    import fnarray.numpy as fnp
    assert fa.NamedSharding is fa.sharding.NamedSharding and fa.P is fa.sharding.PartitionSpec
    assert fa.reshard(fnp.ones(2), fa.NamedSharding(fa.make_mesh((1,), ("x",)), fa.P())).shape == (2,)
    assert fa.device_count() == fa.local_device_count() == len(fa.devices())
    assert fa.device_count("numpy") == 1 and fa.device_count("jax") == jax.device_count()
    with pytest.raises(ValueError):
        fa.device_count("no-such-backend")


def test_weak_zero_gradients_and_failing_unflatten_as_jax():
    """The gradient of an unused weak (Python float) input is a weak zero, as JAX's; a registered unflatten
    function that raises surfaces its own error, not a leaf-count complaint."""
    import jax

    import fnarray as fa
    import fnarray.numpy as fnp
    from fnarray.core.errors import PyTreeError
    for lib in (jax, fa):
        g = lib.grad(lambda d: d["a"] ** 2)({"a": 1.0, "b": 2.0})
        assert g["b"].weak_type and g["a"].weak_type and float(g["b"]) == 0.0
        gx, gy = lib.grad(lambda x, y: x * 2, argnums=(0, 1))(1.0, 2.0)
        assert gy.weak_type and float(gy) == 0.0
    assert not fa.grad(lambda x, y: x * 2, argnums=(0, 1))(1.0, fnp.float32(2.0))[1].weak_type

    class Boom:
        def __init__(self, a):
            raise TypeError("Boom rejects its leaves")

    fa.tree_util.register_pytree_node(Boom, lambda b: ((1.0,), None), lambda _, c: Boom(*c))
    treedef = fa.tree_util.tree_structure(Boom.__new__(Boom))
    with pytest.raises(TypeError, match="Boom rejects"):
        fa.tree_util.tree_unflatten(treedef, [1.0])
    with pytest.raises(PyTreeError, match="takes 1 leaves, got 2"):
        fa.tree_util.tree_unflatten(treedef, [1.0, 2.0])


def test_linear_transpose_and_traced_jaxpr_as_jax():
    """``jax.linear_transpose`` (the cookbook's ``linear_transpose(f_jvp, W)``) gives JAX's cotangents for
    pytree and ``ShapeDtypeStruct`` primals, for a jitted function of scalings, ``@``, ``.T``, sums, concatenate
    and fft and for the jvp of a non-linear function, and refuses integer primals and non-linear functions:
    ``sin``, ``x * x``, ``relu`` (``max`` in its custom_jvp), ``abs``, a predicate on the input raise
    ``NotImplementedError`` naming the primitive (JAX raises for ``sin``/``max``/``abs``; the vjp at zeros gave
    ones or zeros); ``jax.jit(f).trace(x).jaxpr`` is the program ``make_jaxpr`` prints."""
    import jax
    import jax.numpy as jnp

    import fnarray as fa
    import fnarray.numpy as fnp
    w = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    f = lambda a, v: (a.sum(0) + 2 * v, 3 * a)                       # noqa: E731 (linear in both)
    g = lambda d: d["a"] * 3 + d["b"][::-1]                          # noqa: E731
    cts = (np.asarray([1.0, 2.0, 3.0], np.float32), np.ones((2, 3), np.float32))
    c, ct = np.asarray([1.0, -2.0, 0.5], np.float32), np.arange(1.0, 11.0, dtype=np.float32)
    for lib, np_ in ((jax, jnp), (fa, fnp)):
        got = lib.linear_transpose(f, w, np.ones(3, np.float32))(tuple(map(np_.asarray, cts)))
        got_g = lib.linear_transpose(g, {"a": lib.ShapeDtypeStruct((2,), np.float32),
                                         "b": np.zeros(2, np.float32)})(np_.asarray([1.0, 5.0]))
        h = lib.jit(lambda v: np_.concatenate([2 * v - v / 4, w @ v, np_.outer(c, v).T.sum(0) * c,
                                               np_.fft.fft(v).real[1:]]))
        got_h = lib.linear_transpose(h, c)(ct), lib.linear_transpose(lambda v: lib.jvp(np_.tanh, (c,), (v,))[1],
                                                                     c)(ct[:3])
        if lib is jax:
            want, want_g, want_h = got, got_g, got_h
    got_np = fa.linear_transpose(f, w, np.ones(3, np.float32))(cts)   # NumPy cotangents, as JAX takes them
    for a, b in zip(jax.tree.leaves((got, got_g, got_np)), jax.tree.leaves((want, want_g, want))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree.leaves(got_h), jax.tree.leaves(want_h), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)
    for h, prim in ((fnp.sin, "sin"), (lambda v: v * v, "mul"), (fa.nn.relu, "max"), (fnp.abs, "abs"),
                    (lambda v: fnp.where(v > 0, v, 0.0), "gt")):
        with pytest.raises(NotImplementedError, match=f"applies '{prim}'.*use fnarray.vjp"):
            fa.linear_transpose(h, c)
    with pytest.raises(TypeError, match=r"only supports \[float or complex\]"):
        fa.linear_transpose(lambda i: i * 2, 1)
    with pytest.raises(ValueError, match="reduce_axes"):
        fa.linear_transpose(f, w, w[0], reduce_axes=("batch",))
    with pytest.raises(TypeError, match="linear_transpose needs a callable"):   # (was: "'int' object is not callable")
        fa.linear_transpose(3, w)
    traced = fa.jit(lambda x: fnp.sin(x) * 2.0).trace(1.0)
    assert traced.jaxpr is traced.program and " sin " in str(traced.jaxpr)

