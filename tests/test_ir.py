"""The IR: printer, literals vs captured constants, the verifier and constant folding."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.core import lax
from fnarray.core import primitives as P
from fnarray.core.builder import trace_to_program
from fnarray.core.ir import Eqn, IRError, Literal, Params, Program, Var, check_program
from fnarray.core.shaped import ShapedArray
from helpers import assert_close, check_traced

F32, F64, I32, BOOL = np.dtype("float32"), np.dtype("float64"), np.dtype("int32"), np.dtype("bool")


def _eqns(prog):
    return [e.primitive.name for e in prog.eqns]


def _literals(prog):
    return [a for e in prog.eqns for a in e.inputs if isinstance(a, Literal)] + \
        [a for a in prog.outvars if isinstance(a, Literal)]


# ----------------------------------------------------------------------------- printer


def test_printer_matches_the_design_document():
    def f(a, b):
        c = lax.broadcast_in_dim(b, (3, 4), (1,))
        return lax.reduce_sum(lax.mul(a, c), (0, 1))

    prog = check_traced(f, fnp.ones((3, 4)), fnp.ones(4))
    assert str(prog) == (
        "{ lambda ; a:f32[3,4] b:f32[4]. let\n"
        "    c:f32[3,4] = broadcast_in_dim[shape=(3, 4) broadcast_dimensions=(1,)] b\n"
        "    d:f32[3,4] = mul a c\n"
        "    e:f32[] = reduce_sum[axes=(0, 1)] d\n"
        "  in (e,) }")


def test_printer_constvars_literals_and_several_outputs():
    c = fnp.asarray(np.arange(3, dtype=np.int32))
    prog = check_traced(lambda x, y: (x * 2.5, lax.add(y, c), True, 7), fnp.ones(2), fnp.arange(3))
    text = str(prog)
    first, *_, last = text.splitlines()
    assert first == "{ lambda a:i32[3] ; b:f32[2] c:i32[3]. let"
    assert "mul b 2.5:f32[]" in text
    assert "add c a" in text
    assert last == "  in (d, e, True:bool[], 7:i32[]) }"
    # Without inputs and outputs of note.
    assert str(check_traced(lambda: lax.iota(np.int32, 2))) == (
        "{ lambda ; . let\n    a:i32[2] = iota[dtype=int32 shape=(2,) dimension=0] \n  in (a,) }".replace(" \n", "\n"))


def test_printer_indents_sub_programs():
    prog = check_traced(_while_program_fn(), fnp.ones(3))
    lines = str(prog).splitlines()
    assert lines[1].lstrip().startswith("i:i32[] j:f32[3] = while[cond_program=")
    assert "        { lambda ; b:i32[] c:f32[3]. let" in lines
    assert "            d:bool[] = lt b 3:i32[]" in lines
    assert "          in (d,) } body_program=" in lines


def test_shaped_array_and_params():
    a = ShapedArray((3, 4), F32, True)
    assert a.str_short() == "f32[3,4]" and a.ndim == 2 and a.size == 12
    assert repr(a) == "ShapedArray(f32[3,4], weak_type=True)"
    assert a.strip_weak() == ShapedArray((3, 4), F32)
    p = Params(shape=(3,), dtype=F32)
    assert hash(p) == hash(Params(dtype=F32, shape=(3,))) and p == Params(dtype=F32, shape=(3,))
    assert p.replace(shape=(4,))["shape"] == (4,) and p["shape"] == (3,)
    with pytest.raises(TypeError):
        p["shape"] = (5,)
    # Equations (and so programs' parts) can be cache keys.
    v, w = Var(ShapedArray((), F32)), Var(ShapedArray((), F32))
    e = Eqn(P.sin, (v,), Params(), (w,))
    assert {e: 1}[Eqn(P.sin, (v,), Params(), (w,))] == 1


# ----------------------------------------------------------------------------- literals and constants


def test_captured_zero_d_array_is_a_constvar_not_a_literal():
    c0 = fnp.asarray(np.float32(2.0))
    c1 = fnp.asarray(3.0)           # weak, 0-d
    n0 = np.array(4.0, np.float32)  # a 0-d NumPy array is an array too
    prog = check_traced(lambda x: x * c0 + c1 - n0, fnp.ones(3))
    assert len(prog.constvars) == 3
    assert _literals(prog) == []
    out = fa.jit(lambda x: x * c0 + c1 - n0)(fnp.ones(3))
    assert_close(out, np.full(3, 1.0, np.float32))


def test_equal_small_host_constants_are_one_constvar():
    """Captured host arrays of equal values, dtype, weak type and device are one constant variable (the builder's
    ``_value_key``; ``fa.nn.RoPE`` makes its frequencies anew each call): CSE then merges the work on them. Other
    values, dtypes or weak types stay apart, and the result is NumPy's."""
    def f(x):
        a = fnp.asarray(np.arange(4, dtype=np.float32))
        b = fnp.asarray(np.arange(4, dtype=np.float32))     # equal to a: the same variable
        c = fnp.asarray(np.arange(4, dtype=np.int32))       # another dtype
        d = fnp.asarray(np.arange(1, 5, dtype=np.float32))  # other values
        return fnp.sin(x * a) + fnp.sin(x * b) + c + d
    prog = check_traced(f, fnp.ones(4))
    assert len(prog.constvars) == 3, prog
    assert fa.core.passes.cse(prog).eqns.__len__() == len(prog.eqns) - 2   # the second mul and sin
    x = np.linspace(0, 1, 4, dtype=np.float32)
    want = 2 * np.sin(x * np.arange(4.0)) + np.arange(4.0) + np.arange(1.0, 5.0)
    assert_close(fa.jit(f)(x), want.astype(np.float32), rtol=1e-6)


def test_shared_constants_keep_their_arrays_alive():
    """A captured array whose values equal an earlier one's maps to that one's variable, and is kept alive for the
    trace: a later array made at its address (Python reuses ids) is not taken for it. The result is a Python
    loop's."""
    def f(x):
        out = x
        for i in range(60):   # each array is garbage after its use; every third one repeats an earlier value
            a = fnp.asarray(np.full(2, i % 3, np.float32))
            out = out + a
            del a
            b = fnp.asarray(np.full(2, i, np.float32))
            out = out + b
            del b
        return out
    want = 1.0 + sum(i % 3 + i for i in range(60))
    assert_close(fa.jit(f)(np.ones(2, np.float32)), np.full(2, want, np.float32))


def test_python_and_numpy_scalars_are_literals():
    prog = check_traced(lambda x: x * 2.0 + np.float32(1.5), fnp.ones(3))
    assert prog.constvars == ()
    lits = _literals(prog)
    assert [(lit.val.item(), lit.aval.dtype) for lit in lits] == [(2.0, F32), (1.5, F32)]


def test_literal_identity_is_dtype_weak_type_and_bits():
    f32 = ShapedArray((), F32)
    f32w = ShapedArray((), F32, True)
    assert Literal(0.0, f32) != Literal(-0.0, f32)
    assert Literal(1, ShapedArray((), I32, True)) != Literal(True, ShapedArray((), BOOL))
    assert Literal(1.0, f32) != Literal(1.0, f32w)
    assert Literal(np.nan, f32) == Literal(np.nan, f32) and hash(Literal(np.nan, f32)) == hash(Literal(np.nan, f32))
    other_nan = np.array(0x7FC00001, np.uint32).view(np.float32)
    assert Literal(other_nan, f32) != Literal(np.nan, f32)
    assert Literal(2.0, f32) == Literal(np.float32(2.0), f32)
    keys = {Literal(v, f32) for v in (0.0, -0.0, np.nan, 1.0)} | {Literal(1, ShapedArray((), I32, True)),
                                                                 Literal(True, ShapedArray((), BOOL))}
    assert len(keys) == 6


def test_signed_zero_literals_are_not_confused():
    x = fnp.asarray(np.array([-0.0, 1.0], np.float32))
    plus = [fa.jit(lambda v: v + 0.0)(x), x + 0.0]
    minus = [fa.jit(lambda v: v + -0.0)(x), x + -0.0]
    for out in plus:
        assert not np.signbit(np.asarray(out)[0])
    for out in minus:
        assert np.signbit(np.asarray(out)[0])
    # Folded constants keep their sign too.
    prog = check_traced(lambda v: lax.add(v, lax.mul(-1.0, 0.0)), x)
    (lit,) = _literals(prog)
    assert np.signbit(lit.val)


def test_bool_and_int_literals_are_not_confused():
    x = fnp.asarray([2, 3])
    b = check_traced(lambda v: (v + 1, v | True), fnp.asarray([True, False]))
    assert [(lit.aval.dtype, lit.aval.weak_type) for lit in _literals(b)] == [(I32, True), (BOOL, False)]
    assert [(o.aval.dtype, o.aval.weak_type) for o in b.outvars] == [(I32, True), (BOOL, False)]
    assert_close(x + 1, np.array([3, 4], np.int32))
    assert_close(fnp.asarray([True, False]) + 1, np.array([2, 1], np.int32))
    assert_close(fnp.asarray([True, False]) | True, np.array([True, True]))


# ----------------------------------------------------------------------------- constant folding


def test_literal_only_subexpressions_are_folded():
    prog = check_traced(lambda x: lax.add(x, lax.mul(lax.add(1.0, 2.0), lax.sin(np.float32(0.5)))), fnp.ones(3))
    assert _eqns(prog) == ["add"]
    (lit,) = _literals(prog)
    assert lit.aval == ShapedArray((), F32, False)
    np.testing.assert_allclose(lit.val, 3.0 * math.sin(0.5), rtol=1e-6)
    # Weak stays weak, dtypes follow the primitive.
    prog = check_traced(lambda x: lax.add(x, lax.add(1, 2)), fnp.arange(2))
    (lit,) = _literals(prog)
    assert (lit.val.item(), lit.aval.dtype, lit.aval.weak_type) == (3, I32, True)
    prog = check_traced(lambda x: lax.mul(x, lax.select(True, np.float64(2.0), np.float64(5.0))),
                        fnp.ones(2, dtype=F64))
    assert _eqns(prog) == ["mul"] and _literals(prog)[0].val.item() == 2.0  # select(True, on_true, ...)


def test_folding_reproduces_the_pinned_edge_cases():
    prog = check_traced(lambda x: lax.add(x, lax.div(np.int32(7), np.int32(0))), fnp.arange(2))
    assert _literals(prog)[0].val.item() == 0
    prog = check_traced(lambda x: lax.add(x, lax.pow(0.0, 0.0)), fnp.ones(2))
    assert _literals(prog)[0].val.item() == 1.0


def test_what_depends_on_constants_or_inputs_is_not_folded():
    c = fnp.asarray(2.0)
    prog = check_traced(lambda x: lax.add(x, lax.mul(c, 3.0)), fnp.ones(3))
    assert _eqns(prog) == ["mul", "add"] and len(prog.constvars) == 1
    prog = check_traced(lambda x: lax.add(x, lax.broadcast_in_dim(1.0, (3,), ())), fnp.ones(3))
    assert _eqns(prog) == ["broadcast_in_dim", "add"]
    out = fa.jit(lambda x: lax.add(x, lax.mul(c, 3.0)))(fnp.ones(3))
    assert_close(out, np.full(3, 7.0, np.float32))


# ----------------------------------------------------------------------------- verifier


def _v(shape=(3,), dtype=F32):
    return Var(ShapedArray(shape, dtype))


def test_verifier_accepts_a_well_typed_program():
    a, b, c = _v(), _v(), _v()
    check_program(Program([], [a, b], [Eqn(P.add, (a, b), Params(), (c,))], [c]))


def test_verifier_rejects_use_before_definition():
    a, b, c = _v(), _v(), _v()
    prog = Program([], [a], [Eqn(P.neg, (b,), Params(), (c,)), Eqn(P.neg, (a,), Params(), (b,))], [c])
    with pytest.raises(IRError, match="used before it is defined"):
        check_program(prog)
    with pytest.raises(IRError, match="outvars"):
        check_program(Program([], [a], [], [b]))


def test_verifier_rejects_a_wrong_output_type():
    a, out = _v(), _v(dtype=F64)
    with pytest.raises(IRError, match=r"equation 0 \(sin\).*f64\[3\].*f32\[3\]"):
        check_program(Program([], [a], [Eqn(P.sin, (a,), Params(), (out,))], [out]))
    out2 = _v(shape=(4,))
    with pytest.raises(IRError, match="rule gives f32"):
        check_program(Program([], [a], [Eqn(P.sin, (a,), Params(), (out2,))], [out2]))


def test_verifier_rejects_double_definitions_bad_inputs_and_wrong_arity():
    a, b = _v(), _v()
    with pytest.raises(IRError, match="defined twice"):
        check_program(Program([], [a], [Eqn(P.neg, (a,), Params(), (a,))], [a]))
    i = _v(dtype=I32)
    with pytest.raises(IRError, match="rule failed"):
        check_program(Program([], [a, i], [Eqn(P.add, (a, i), Params(), (b,))], [b]))
    c = _v()
    with pytest.raises(IRError, match="outputs"):
        check_program(Program([], [a], [Eqn(P.neg, (a,), Params(), (b, c))], [b]))
    assert issubclass(IRError, TypeError)


def test_verifier_checks_sub_programs():
    cond, _ = trace_to_program(lambda i, x: [lax.lt(i, 3)], [ShapedArray((), I32), ShapedArray((3,), F32)])
    bi, bx, bo2 = _v((), I32), _v(), _v(dtype=F64)   # the body returns f64: wrong
    body = Program([], [bi, bx], [Eqn(P.convert_element_type, (bx,), Params(new_dtype=F64, weak_type=False),
                                      (bo2,))], [bi, bo2])
    i0, x0 = _v((), I32), _v()
    o1, o2 = _v((), I32), _v()
    prog = Program([], [i0, x0], [Eqn(P.while_p, (i0, x0), Params(cond_program=cond, body_program=body,
                                                                  cond_nconsts=0, body_nconsts=0), (o1, o2))], [o2])
    with pytest.raises(IRError, match="while"):
        check_program(prog)


def _while_program_fn():
    i32, f32 = ShapedArray((), I32), ShapedArray((3,), F32)
    cond, _ = trace_to_program(lambda i, x: [lax.lt(i, 3)], [i32, f32])
    body, _ = trace_to_program(lambda i, x: [lax.add(i, 1), lax.sin(x)], [i32, f32])

    def f(x):
        return P.while_p.bind(np.int32(0), x, cond_program=cond, body_program=body, cond_nconsts=0,
                              body_nconsts=0)[1]
    return f


def test_a_loop_program_runs():
    out = fa.jit(_while_program_fn())(fnp.ones(3))
    assert_close(out, np.full(3, np.sin(np.sin(np.sin(1.0)))).astype(np.float32))
