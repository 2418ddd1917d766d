"""``jit``: staging, the cache key (when it retraces and when not), static and donated
arguments, pytrees, captured constants, keyword arguments and errors."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core.ir import Program
from helpers import assert_close, assert_same, check_traced

F32, F64, I32 = np.dtype("float32"), np.dtype("float64"), np.dtype("int32")


class Counter:
    """A function that counts how often it is traced (a Python side effect runs only when tracing)."""

    def __init__(self, fn):
        self.fn, self.n = fn, 0

    def __call__(self, *args, **kwargs):
        self.n += 1
        return self.fn(*args, **kwargs)


# ----------------------------------------------------------------------------- staging


def test_trace_lower_compile(device):
    x = fa.device_put(fnp.asarray(np.arange(3, dtype=np.float32)), device)
    f = Counter(lambda v: fnp.sin(v) * 2.0 + 1.0)
    j = fa.jit(f)
    traced = j.trace(x)
    assert isinstance(traced.program, Program)
    fa.check_program(traced.program)
    assert [e.primitive.name for e in traced.program.eqns] == ["sin", "mul", "add"]
    lowered = j.lower(x)
    assert lowered.program is traced.program
    text = lowered.as_text()
    assert isinstance(text, str) and text
    if device.backend == "numpy":
        assert text.startswith("def program(")
    compiled = lowered.compile()
    want = (np.sin(np.arange(3.0)) * 2 + 1).astype(np.float32)
    assert_close(compiled(x), want)
    assert_close(j(x), want)
    assert f.n == 1  # trace, lower, compile and calls share one trace
    with pytest.raises(TypeError, match="retrace"):
        compiled(fnp.ones(4))


def test_eval_shape_runs_nothing():
    f = fa.jit(lambda a, b: {"s": a + b, "t": (a * 2).astype(fnp.int32)})
    out = f.eval_shape(fnp.ones((2, 3)), fnp.ones(3))
    assert out["s"] == fa.ShapedArray((2, 3), F32) and out["t"] == fa.ShapedArray((2, 3), I32)


# ----------------------------------------------------------------------------- the cache key


def test_no_retrace_for_the_same_types():
    f = Counter(lambda v: v * 2)
    j = fa.jit(f)
    for _ in range(3):
        j(fnp.ones(3))
    j(fnp.zeros(3))
    j(fnp.asarray(np.arange(3, dtype=np.float32)))
    assert f.n == 1


@pytest.mark.enable_x64
def test_retrace_on_new_shape_dtype_and_weak_type():
    f = Counter(lambda v: v + 1)
    j = fa.jit(f)
    j(fnp.ones(3, dtype=fnp.float32))
    j(fnp.ones(4, dtype=fnp.float32))
    assert f.n == 2
    j(fnp.ones(3, dtype=fnp.float64))
    assert f.n == 3
    j(fnp.ones((3, 1)))
    assert f.n == 4
    # Weak type: a Python float and a weak 0-d array share a key; a strong float32 does not.
    j(1.0)
    j(2.5)
    j(fnp.asarray(3.0))
    assert f.n == 5
    j(np.float32(1.0))
    assert f.n == 6
    out = j(fnp.asarray(np.float32(1.0)))
    assert f.n == 6 and not out.weak_type
    j(1)  # a Python int: weak int32
    assert f.n == 7


def test_retrace_on_new_pytree_structure_only():
    f = Counter(lambda t: t["a"] + t["b"][0])
    j = fa.jit(f)
    j({"a": fnp.ones(2), "b": [fnp.ones(2)]})
    j({"a": fnp.zeros(2), "b": [fnp.ones(2) * 3]})
    assert f.n == 1
    j({"a": fnp.ones(2), "b": (fnp.ones(2),)})  # list -> tuple
    assert f.n == 2
    j({"a": fnp.ones(2), "b": [fnp.ones(2), fnp.ones(2)]})  # one more leaf
    assert f.n == 3
    j({"a": fnp.ones(2), "b": [fnp.ones(2)], "c": None})  # one more key
    assert f.n == 4


def test_results_are_right_after_retracing():
    j = fa.jit(lambda v: v * v)
    for shape in [(2,), (3,), (2,), (1, 2)]:
        x_np = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        assert_close(j(fnp.asarray(x_np)), x_np * x_np)


# ----------------------------------------------------------------------------- static and keyword args


def test_static_argnums():
    f = Counter(lambda x, n, mode: x * n if mode == "mul" else x + n)
    j = fa.jit(f, static_argnums=(1, 2))
    x = fnp.ones(3)
    assert_close(j(x, 3, "mul"), np.full(3, 3.0, np.float32))
    assert_close(j(x, 3, "add"), np.full(3, 4.0, np.float32))
    assert_close(j(x, 3, "mul"), np.full(3, 3.0, np.float32))
    assert f.n == 2
    j(x, 4, "mul")
    assert f.n == 3
    prog = fa.make_ir(lambda v, n: v * n, static_argnums=1)(x, 5)
    assert [e.primitive.name for e in prog.eqns] == ["mul"] and len(prog.invars) == 1


def test_static_argnames_and_python_control_flow():
    def f(x, *, flag, power=2):
        if flag:                 # a Python branch on a static value
            return x ** power
        return -x

    j = fa.jit(f, static_argnames=("flag", "power"))
    x = fnp.asarray([1.0, 2.0])
    assert_close(j(x, flag=True), np.array([1.0, 4.0], np.float32))
    assert_close(j(x, flag=True, power=3), np.array([1.0, 8.0], np.float32))
    assert_close(j(x, flag=False), np.array([-1.0, -2.0], np.float32))
    # A static argument given by name also works positionally, as in JAX.
    g = fa.jit(lambda x, k: x * k, static_argnames="k")
    assert_close(g(x, 3), np.array([3.0, 6.0], np.float32))


def test_negative_static_argnums():
    j = fa.jit(lambda x, k: x * k, static_argnums=-1)
    assert_close(j(fnp.ones(2), 4), np.full(2, 4.0, np.float32))


def test_unhashable_static_argument_names_it():
    j = fa.jit(lambda x, k: x, static_argnums=1)
    with pytest.raises(TypeError, match=r"static argument.*1.*list") as e:
        j(fnp.ones(2), [1, 2])
    assert "hashable" in str(e.value)
    j2 = fa.jit(lambda x, *, opts: x, static_argnames="opts")
    with pytest.raises(TypeError, match=r"static argument 'opts'.*dict"):
        j2(fnp.ones(2), opts={"a": 1})


def test_keyword_arguments_are_traced():
    f = Counter(lambda x, scale=1.0, shift=None: x * scale + (0.0 if shift is None else shift))
    j = fa.jit(f)
    x = fnp.asarray([1.0, 2.0])
    assert_close(j(x, scale=fnp.asarray(3.0)), np.array([3.0, 6.0], np.float32))
    assert_close(j(x, scale=fnp.asarray(5.0)), np.array([5.0, 10.0], np.float32))
    assert f.n == 1
    assert_close(j(x, scale=2.0, shift=fnp.ones(2)), np.array([3.0, 5.0], np.float32))
    assert f.n == 2


# ----------------------------------------------------------------------------- donation


def test_donated_arrays_raise_on_use():
    j = fa.jit(lambda a, b: a + b, donate_argnums=0)
    a, b = fnp.ones(3), fnp.ones(3)
    out = j(a, b)
    assert_close(out, np.full(3, 2.0, np.float32))
    assert a.is_deleted() and not b.is_deleted()
    with pytest.raises(RuntimeError, match="donated"):
        a + 1
    with pytest.raises(RuntimeError, match="donated"):
        np.asarray(a)
    with pytest.raises(RuntimeError, match="donated"):
        j(a, b)
    assert "deleted" in repr(a)
    assert_close(b, np.ones(3, np.float32))


def test_donating_a_pytree_deletes_its_leaves():
    j = fa.jit(lambda t: t[0] * t[1], donate_argnums=(0,))
    t = (fnp.ones(2), fnp.full(2, 3.0))
    assert_close(j(t), np.full(2, 3.0, np.float32))
    assert t[0].is_deleted() and t[1].is_deleted()


# ----------------------------------------------------------------------------- pytrees and constants


Point = collections.namedtuple("Point", "x y")


def test_pytrees_in_and_out():
    def f(p, d, items):
        return {"sum": p.x + p.y, "scaled": [d["w"] * 2, None], "n": (items[0] - items[1],)}

    p = Point(fnp.ones(2), fnp.full(2, 2.0))
    d = {"w": fnp.asarray([1.0, -1.0])}
    items = [fnp.arange(3), fnp.ones(3, dtype=fnp.int32)]
    eager = f(p, d, items)
    out = fa.jit(f)(p, d, items)
    assert set(out) == {"sum", "scaled", "n"} and out["scaled"][1] is None and isinstance(out["n"], tuple)
    assert_same(out["sum"], eager["sum"])
    assert_same(out["scaled"][0], eager["scaled"][0])
    assert_same(out["n"][0], eager["n"][0])
    check_traced(f, p, d, items)
    pt = fa.jit(lambda q: Point(q.y, q.x))(p)
    assert isinstance(pt, Point)
    assert_same(pt.x, p.y)


def test_outputs_may_be_inputs_or_python_scalars():
    x = fnp.ones(2)
    a, b, c = fa.jit(lambda v: (v, 2.5, True))(x)
    assert_same(a, x)
    assert isinstance(b, fa.Array) and b.item() == 2.5 and b.dtype == F32
    assert isinstance(c, fa.Array) and c.item() is True


@pytest.mark.enable_x64
def test_captured_arrays_become_constants():
    c = fnp.asarray(np.arange(3, dtype=np.float32))
    s = fnp.asarray(np.float64(0.5))

    def f(x):
        return x * c + s

    prog = check_traced(f, fnp.ones(3, dtype=fnp.float64))
    assert len(prog.constvars) == 2 and len(prog.invars) == 1
    assert {v.aval for v in prog.constvars} == {c.aval, s.aval}
    out = fa.jit(f)(fnp.ones(3, dtype=fnp.float64))
    assert_close(out, np.arange(3.0) + 0.5)
    traced = fa.jit(f).trace(fnp.ones(3, dtype=fnp.float64))
    assert traced.consts[0] is c or traced.consts[1] is c


def test_nested_jit_is_a_call():
    inner = fa.jit(lambda v: v * 3.0)
    outer = fa.jit(lambda v: inner(v) + 1.0)
    x = fnp.asarray([1.0, 2.0])
    assert_close(outer(x), np.array([4.0, 7.0], np.float32))
    prog = check_traced(lambda v: inner(v) + 1.0, x)
    assert [e.primitive.name for e in prog.eqns] == ["call", "add"]


def test_jit_as_a_decorator():
    @fa.jit
    def f(x):
        return x - 1

    @fa.jit(static_argnums=1)
    def g(x, n):
        return x * n

    assert_close(f(fnp.ones(2)), np.zeros(2, np.float32))
    assert_close(g(fnp.ones(2), 3), np.full(2, 3.0, np.float32))
    assert f.__name__ == "f"


def test_methods_can_be_jitted():
    class Model:
        def __init__(self, w):
            self.w = w

        @fa.jit
        def apply(self, x):
            return x * self.w

    with pytest.raises(TypeError):
        Model(fnp.ones(2)).apply(fnp.ones(2))  # self is not an array: mark it static
    m = Model(2.0)
    assert_close(fa.jit(lambda x: Model.apply.fun(m, x))(fnp.ones(2)), np.full(2, 2.0, np.float32))


# ----------------------------------------------------------------------------- errors


def test_python_control_flow_on_a_traced_value_names_the_line():
    def f(x):
        if x > 0:  # the line the error must name
            return x
        return -x

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(fa.ConcretizationError) as e:
        fa.jit(f)(fnp.asarray(1.0))
    msg = str(e.value)
    assert f"{os.path.basename(__file__)}:{line}" in msg
    assert "fnarray.numpy.where" in msg and "cond" in msg
    assert isinstance(e.value, TypeError)
    for conv in (float, int, lambda v: v.item(), lambda v: np.asarray(v)):
        with pytest.raises(fa.ConcretizationError):
            fa.jit(lambda v: conv(v))(fnp.asarray(1.0))


def test_bad_arguments():
    with pytest.raises(TypeError, match="callable"):
        fa.jit(3)
    with pytest.raises(TypeError, match="static_argnums"):
        fa.jit(lambda x, s: x)(fnp.ones(2), "mode")


def test_traced_values_do_not_leak():
    leaked = []

    def f(x):
        leaked.append(x)
        return x + 1

    fa.jit(f)(fnp.ones(2))
    with pytest.raises(fa.TracerLeakError):
        fa.jit(lambda y: y + leaked[0])(fnp.ones(2))
    with pytest.raises(fa.TracerLeakError):   # not a ConcretizationError ("while it is transformed")
        np.asarray(leaked[0])


def test_changing_pytree_structures_between_calls_retrace_correctly():
    # The call path flattens along the previous call's structure first (fast); a container where an
    # array was, other dict keys or another container type must still be seen as a new structure.
    import fnarray.numpy as fnp
    calls = []

    def f(a, b):
        calls.append(1)
        return a, b

    g = fa.jit(f)
    x, y = fnp.ones(2), fnp.zeros(1)
    cases = [
        (x, y),
        ((x, fnp.ones(3)), y),
        ({"k": x}, y),
        ({"j": x}, y),
        ([x], y),
        ((x,), y),
        (x, 3.0),
        (x, np.float32(2.0)),
        (x, y),
    ]
    for a, b in cases:
        out = g(a, b)
        want_leaves = fa.tree_util.tree_leaves((a, b))
        got_leaves = fa.tree_util.tree_leaves(out)
        assert fa.tree_util.tree_structure(out) == fa.tree_util.tree_structure((a, b))
        for w, gl in zip(want_leaves, got_leaves):
            np.testing.assert_array_equal(np.asarray(gl), np.asarray(w))
    assert len(calls) == len(cases) - 1  # the last case repeats the first: no new trace
