"""``fnarray.config.explain_cache_misses`` (JAX's ``jax_explain_cache_misses``): each trace or compile of a jitted
function that a cache did not serve logs one WARNING on ``fnarray.jit`` saying why (``transforms/cache_miss.py``);
nothing is logged when the setting is off, or on a hit."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import fnarray as fa
import fnarray.numpy as fnp
from fnarray.transforms import cache_miss
from helpers import run_threads


@pytest.fixture
def explained(monkeypatch, caplog):
    """The setting on for one test; returns ``take()``: the messages logged since the last ``take``."""
    monkeypatch.setattr(fa.config, "explain_cache_misses", True)
    caplog.set_level(logging.WARNING, logger="fnarray.jit")

    def take():
        out = [r.getMessage() for r in caplog.records if r.name == "fnarray.jit"]
        caplog.clear()
        return out
    return take


def test_each_kind_of_trace_miss_names_the_argument_and_what_differs(explained):
    def step(params, x, scale=1.0):
        return params["w"] * x * scale
    f = fa.jit(step, static_argnames="scale", device="numpy:0")
    w3 = {"w": fnp.ones(3)}
    calls = [  # (arguments, keyword arguments, what the one message says; None: a hit, nothing logged)
        ((w3, fnp.ones(3)), {}, "first call"),
        ((w3, fnp.ones(3)), {}, None),
        (({"w": fnp.ones(1)}, fnp.ones(3)), {}, "args[0]['w']: shape differs: before f32[3], now f32[1]"),
        ((w3, fnp.ones(3, dtype="int32")), {}, "args[1]: dtype differs: before f32[3], now i32[3]"),
        ((w3, fnp.zeros(())), {}, "args[1]: shape differs: before f32[3], now f32[]"),
        ((w3, 2.0), {}, "args[1]: weak type differs: before f32[], now f32[] (weak: a Python scalar)"),
        ((w3, fnp.ones(3)), {"scale": 2.0}, "static kwargs['scale']: before not given, now 2.0"),
        (({"w": fnp.ones(3), "b": fnp.ones(3)}, fnp.ones(3)), {},
         "args[0]: structure before PyTreeSpec({'w': *}), now PyTreeSpec({'b': *, 'w': *})"),
        ((w3, fnp.ones(3)), {}, None),
    ]
    for args, kwargs, says in calls:
        f(*args, **kwargs)
        got = explained()
        if says is None:
            assert got == []
            continue
        assert len(got) == 1 and got[0].startswith("jit cache miss: tracing "), got
        assert ".step (" in got[0] and f"for the call at {__file__}:" in got[0], got[0]
        assert got[0].endswith(says) if says == "first call" else says in got[0], got[0]


def test_nothing_logged_when_off_and_the_hooks_are_not_called(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="fnarray.jit")
    assert fa.config.explain_cache_misses is False   # off by default
    monkeypatch.setattr(cache_miss, "explain_trace", None)    # called, they would raise
    monkeypatch.setattr(cache_miss, "explain_compile", None)
    f = fa.jit(lambda x: x + 1, device="numpy:0")
    f(fnp.ones(2)), f(fnp.ones(3)), f(fnp.ones(3))
    assert not [r for r in caplog.records if r.name == "fnarray.jit"]
    # a string is refused, not read as true ("no" turned the explanations on); bools, NumPy's and 0/1 are taken
    for flag in ("explain_cache_misses", "enable_x64", "debug_nans"):
        with pytest.raises(TypeError, match=f"config.{flag} takes True or False, got 'no'"):
            fa.config.update(flag, "no")
    monkeypatch.setattr(fa.config, "explain_cache_misses", np.bool_(False))
    assert fa.config.explain_cache_misses is False


def test_evicted_signature_new_function_in_a_loop_and_a_setting_that_recompiles(explained, monkeypatch):
    monkeypatch.setattr(fa.config, "jit_cache_size", 1)
    f = fa.jit(lambda x: x * 2, device="numpy:0")
    f(fnp.ones(2)), f(fnp.ones(3)), f(fnp.ones(2))
    assert "evicted: the function's cache was full (fnarray.config.jit_cache_size = 1" in explained()[-1]
    for _ in range(2):
        fa.jit(lambda x: x - 1, device="numpy:0")(fnp.ones(2))
    got = explained()
    assert got[0].endswith("first call") and "another function defined at the same place" in got[1], got
    monkeypatch.setattr(fa.config, "fallback", "error")
    f(fnp.ones(2))   # the same trace, compiled again for a setting that changes lowering
    got = explained()
    assert len(got) == 1 and got[0].startswith("jit cache miss: compiling "), got
    assert got[0].endswith("compiled before for another setting fallback: before 'warn', now 'error'"), got


def test_shapeless_says_a_new_pattern_or_why_the_renaming_failed(explained):
    f = fa.jit(lambda x: x[1:] * 2.0, shapeless=True, device="numpy:0")
    f(fnp.ones(3)), f(fnp.ones((2, 2)))
    assert "(shapeless=True: a new pattern of sizes" in explained()[-1]
    f(fnp.ones(5))
    assert "(shapeless=True: the size 3, which the traced program also holds as a value" in explained()[-1]
    g = fa.jit(lambda x: x * 2.5, shapeless=True, device="numpy:0")
    g(fnp.ones(3)), g(fnp.ones(4))   # the second size is traced to confirm the first's program
    assert "(shapeless=True: the pattern's one trace is not renamed before a trace at other sizes" in explained()[-1]


def test_explanations_from_8_threads_one_per_trace(explained):
    f = fa.jit(lambda x: x + 1.0, device="numpy:0")
    f(fnp.ones(2))   # the first trace before the threads: a thread missing while it runs finds no trace to compare
    run_threads(lambda k: [f(fnp.ones(2 + k % 4)) for _ in range(3)], n=8)   # 4 shapes, each called 6 times
    got = explained()
    assert len(got) == 4 and sum(m.endswith("first call") for m in got) == 1, got
    assert all("shape differs: before f32[" in m for m in got if not m.endswith("first call")), got


def test_a_static_value_that_cannot_be_compared_does_not_fail_the_call(explained):
    class Odd:   # hashable, but == raises against another Odd
        def __eq__(self, other):
            raise RuntimeError("no comparing")

        def __hash__(self):
            return 0
    f = fa.jit(lambda x, o: x + 1, static_argnums=1, device="numpy:0")
    f(fnp.ones(2), 1)
    assert float(f(fnp.ones(2), Odd())[0]) == 2.0
    assert "no explanation (RuntimeError: no comparing)" in explained()[-1]
