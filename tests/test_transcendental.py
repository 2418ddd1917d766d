"""The kernel-IR math bodies (``fnarray/lowering/kernels/transcendental.py``), printed by both renderers.

WGSL prints every body (``tests/test_webgpu_backend.py`` runs them on webgpu:0 against float64 references and on
every special value); here the OpenCL renderer prints the same bodies (``OpenCLRenderer(expand=...)``) and PoCL
runs them against NumPy/``math`` in float64: a body is right on an IEEE target before any driver quirk, and both
renderers print the IR it writes. The expansion itself: locals for the operands, nothing left for a renderer
without the op, float16 through float32.
"""

from __future__ import annotations


import numpy as np
import pytest

from fnarray.lowering.kernels.builder import KernelBuilder
from fnarray.lowering.kernels.ir import BufferParam, Op, Special, walk_exprs
from fnarray.lowering.kernels.opencl_c import OpenCLRenderer
from fnarray.lowering.kernels.rules import op
from fnarray.lowering.kernels.schedule import BufSpec
from fnarray.lowering.kernels.transcendental import BODIES, expand
from fnarray.lowering.kernels.wgsl import EXPANDED, render_wgsl
from helpers import require_backend
from math_cases import (BINARY_SPECIAL, HELPER_CASES, LIN, SPECIAL, UNARY_SPECIAL, Y, check_binary_special,
                        check_unary_special)


def _kernel(name, dtypes, out_dtype):
    """``out[i] = name(in0[i], ...)`` in the kernel IR."""
    b = KernelBuilder(f"k_{name}")
    dtypes, out_dtype = [np.dtype(d) for d in dtypes], np.dtype(out_dtype)
    names = [b.buffer(BufSpec((1,), d, f"i{k}"), d, False, "in") for k, d in enumerate(dtypes)]
    out = b.buffer(BufSpec((1,), out_dtype, "o"), out_dtype, True, "out")
    n = b.scalar("n")
    gid = Special("global_id", 0)
    with b.when(op("lt", gid, n)):
        xs = [b.load(nm, gid, d) for nm, d in zip(names, dtypes, strict=True)]
        b.store(out, gid, b.let(Op(name, tuple(xs), np.dtype(out_dtype))))
    return b.build()


def _run_opencl(name, arrays, out_dtype=np.float32):
    """The kernel of ``name`` printed from its body by the OpenCL renderer and run on opencl:0."""
    cl = pytest.importorskip("pyopencl")
    dev = require_backend("opencl")[0]
    state = dev.impl.state(dev)
    kernel = _kernel(name, [a.dtype for a in arrays], out_dtype)
    src = OpenCLRenderer(expand={name}).render(kernel)
    prog = cl.Program(state.context, src).build()
    mf = cl.mem_flags
    n = arrays[0].size
    bufs = [cl.Buffer(state.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=a) for a in arrays]
    out = np.empty(n, out_dtype)
    obuf = cl.Buffer(state.context, mf.WRITE_ONLY, out.nbytes)
    args = []
    for p in kernel.params:
        args.append(obuf if isinstance(p, BufferParam) and p.writes else
                    bufs.pop(0) if isinstance(p, BufferParam) else np.int32(n))
    getattr(prog, kernel.name)(state.queue, (n,), None, *args)
    cl.enqueue_copy(state.queue, out, obuf)
    state.queue.finish()
    return out


# The webgpu helper cases, here on opencl:0, and the IEEE division.
CASES = HELPER_CASES + [("div", [LIN, Y], np.divide, 1e-6)]


@pytest.mark.parametrize("name,inputs,reference,tol", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bodies_printed_as_opencl_match_float64(name, inputs, reference, tol):
    got = _run_opencl(name, inputs)
    with np.errstate(all="ignore"):
        want = reference(*[x.astype(np.float64) for x in inputs])
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,reference", BINARY_SPECIAL + [("div", np.divide)])
def test_binary_bodies_on_special_values(name, reference):
    check_binary_special(_run_opencl, name, reference)


@pytest.mark.parametrize("name,reference", UNARY_SPECIAL)
def test_unary_bodies_on_special_values(name, reference):
    check_unary_special(_run_opencl, name, reference)


@pytest.mark.parametrize("name,reference", [("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)])
def test_class_bodies_are_bit_tests(name, reference):
    np.testing.assert_array_equal(_run_opencl(name, [SPECIAL], np.bool_), reference(SPECIAL))


def test_nextafter_body_is_bit_exact():
    np.testing.assert_array_equal(_run_opencl("nextafter", [LIN, Y]), np.nextafter(LIN, Y))


def test_expansion_leaves_no_expanded_op_and_widens_float16():
    # Every body leaves only ops the target has: after expand, no op of the expanded set is applied to an
    # operand the kernel wrote (the ops left are the bodies' own builtin calls: log in log, max in max...).
    for name in sorted(BODIES):
        arity = 2 if name in ("div", "pow", "fmod", "nextafter", "hypot", "atan2", "copysign", "min", "max") else 1
        out = np.bool_ if name in ("isnan", "isinf", "isfinite") else np.float16
        k = expand(_kernel(name, [np.float16] * arity, out), {name})
        loads = {e for e in walk_exprs(k.body) if type(e).__name__ == "Load"}
        left = [e for e in walk_exprs(k.body) if isinstance(e, Op) and e.op == name and set(e.args) & loads]
        assert not left, name
        assert any(type(e).__name__ == "Cast" and e.dtype == np.float32 for e in walk_exprs(k.body)), name
    # The WGSL renderer expands every body and prints the result.
    assert EXPANDED == frozenset(BODIES)
    src = render_wgsl(_kernel("lgamma", [np.float32], np.float32))
    assert "lgamma" not in src.split("fn k_lgamma")[1] and "fn fa_" not in src.replace("fn fa_f32_bits", "")


def test_unknown_body_is_a_key_error():
    with pytest.raises(KeyError, match="no kernel-IR body"):
        expand(_kernel("sin", [np.float32], np.float32), {"sin"})
