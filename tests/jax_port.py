"""Run a JAX program as written and again after a mechanical import rewrite to fnarray, and compare
what the two print.

The rewrite touches import statements only (``import jax``, ``import jax.numpy as jnp``,
``from jax import ...``, ``from jax.scipy... import``, ``jax.example_libraries``, ``jax.test_util``,
``jax.ad_checkpoint``, ``jax.sharding``, ``jax.experimental.shard_map``): the rest of the program keeps
the name ``jax`` and its attributes, so the port is exactly the change docs/from_jax.md promises. A
program is a string of Python source; it runs in a fresh interpreter (so ``XLA_FLAGS`` such as 8 forced
host devices and ``jax_enable_x64`` stay its own), and its standard output is compared number by number.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

__all__ = ["rewrite_imports", "assert_rewrite_changes_imports_only", "run_program", "jax_output", "numbers",
           "compare_outputs", "assert_port_matches", "PORT_DEVICES", "assert_port_matches_on"]

# module prefixes rewritten, longest first: jax.X -> fnarray.X
_MODULES = ("jax.experimental.shard_map", "jax.experimental.ode", "jax.example_libraries", "jax.test_util", "jax.ad_checkpoint",
            "jax.sharding", "jax.scipy", "jax.numpy", "jax.random", "jax.lax", "jax.nn", "jax.tree_util",
            "jax.tree", "jax.debug", "jax")

_IMPORT = re.compile(r"^(?P<indent>[ \t]*)(?P<kw>import|from)[ \t]+(?P<rest>.*)$")


def _rename(module: str) -> str:
    for prefix in _MODULES:
        if module == prefix or module.startswith(prefix + "."):
            return "fnarray" + module[len("jax"):]
    return module


def _rewrite_import_names(rest: str) -> str:
    """``import jax.numpy as jnp, jax`` -> ``import fnarray.numpy as jnp, fnarray as jax``: a bare
    ``import jax`` keeps the name ``jax`` bound (to fnarray), so ``jax.grad`` reads as before."""
    out = []
    for part in rest.split(","):
        name, _, alias = part.strip().partition(" as ")
        name, alias = name.strip(), alias.strip()
        new = _rename(name)
        if new == name:
            out.append(part.strip())
        elif alias:
            out.append(f"{new} as {alias}")
        elif "." in name:
            # `import jax.numpy` binds `jax`; bind it to fnarray and import the submodule too
            out.append(f"{new}, fnarray as jax")
        else:
            out.append(f"{new} as {name}")
    return ", ".join(out)


def rewrite_imports(source: str) -> str:
    """Rewrite the import statements of ``source`` from JAX to fnarray, and nothing else.

    Args:
      source: Python source of a program written for JAX.
    Returns:
      the same source with ``jax`` modules replaced by their ``fnarray`` counterparts in ``import`` and
      ``from ... import`` lines (a bare ``import jax`` becomes ``import fnarray as jax``).
    """
    lines = []
    for line in source.splitlines():
        m = _IMPORT.match(line)
        if m is None:
            lines.append(line)
            continue
        indent, kw, rest = m["indent"], m["kw"], m["rest"]
        if kw == "from":
            module, sep, names = rest.partition(" import ")
            if sep:
                lines.append(f"{indent}from {_rename(module.strip())} import {names}")
            else:
                lines.append(line)
        else:
            lines.append(f"{indent}import {_rewrite_import_names(rest)}")
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def assert_rewrite_changes_imports_only(sources) -> None:
    """Assert that ``rewrite_imports`` changes some line of each source, and only import lines."""
    for source in sources:
        rewritten = rewrite_imports(source)
        changed = [(a, b) for a, b in zip(source.splitlines(), rewritten.splitlines()) if a != b]
        assert changed and all(a.lstrip().startswith(("import ", "from ")) for a, _ in changed)


def run_program(source: str, *, env: dict | None = None, timeout: float = 600.0) -> str:
    """Run ``source`` in a fresh interpreter (this one's executable and ``sys.path``) and return its
    standard output; raise ``AssertionError`` with its standard error if it fails."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    full_env.setdefault("OPENBLAS_NUM_THREADS", "1")
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=full_env,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"program exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc.stdout


_JAX_OUTPUTS: dict[str, str] = {}


def jax_output(source: str, *, timeout: float = 600.0) -> str:
    """``run_program(source)`` (a program as written, under JAX: the reference output), run once per test run.

    Kept in this process, and shared between pytest-xdist's workers (``PYTEST_XDIST_TESTRUNUID``, one per run)
    through a file per program in the temporary folder: the first worker to ask runs it under a lock, a worker
    asking meanwhile waits on the lock, then reads the file. Several tests compare ports on every backend with
    the same JAX output; JAX's run of the research programs alone costs ~45 s of CPU."""
    jax_env = sorted((k, v) for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_")))
    key = hashlib.sha256(repr((source, jax_env)).encode()).hexdigest()[:24]
    if key not in _JAX_OUTPUTS:
        run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        _JAX_OUTPUTS[key] = _shared_output(run, key, source, timeout) if run else run_program(source, timeout=timeout)
    return _JAX_OUTPUTS[key]


def _shared_output(run: str, key: str, source: str, timeout: float) -> str:
    folder = os.path.join(tempfile.gettempdir(), f"fnarray-tests-{os.getuid()}-{run}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, f"jax-{key}.out")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # released when the file closes
        if not os.path.exists(path):              # a program that fails writes nothing: the next asker reruns it
            out = run_program(source, timeout=timeout)
            with open(path + ".part", "w") as f:
                f.write(out)
            os.replace(path + ".part", path)
        with open(path) as f:
            return f.read()


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?inf|nan")


def numbers(text: str) -> np.ndarray:
    """Every number printed in ``text``, in order, as float64 (``nan``/``inf`` included)."""
    return np.array([float(t) for t in _NUMBER.findall(text)], dtype=np.float64)


def compare_outputs(expected: str, got: str, *, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Assert that two programs' outputs print the same numbers (within tolerance) in the same order,
    and the same words around them."""
    words_e, words_g = _NUMBER.sub("#", expected).split(), _NUMBER.sub("#", got).split()
    if words_e != words_g:
        raise AssertionError(f"the outputs differ in text:\n--- jax\n{expected}\n--- fnarray\n{got}")
    np.testing.assert_allclose(numbers(got), numbers(expected), rtol=rtol, atol=atol,
                               err_msg=f"\n--- jax\n{expected}\n--- fnarray\n{got}")


def assert_port_matches(source: str, *, env: dict | None = None, rtol: float = 1e-5, atol: float = 1e-6,
                        timeout: float = 600.0) -> tuple[str, str]:
    """Run the JAX program ``source`` under JAX and, after ``rewrite_imports``, under fnarray; assert they
    print the same numbers. Returns both outputs (JAX's first)."""
    expected = jax_output(source, timeout=timeout) if env is None else run_program(source, env=env, timeout=timeout)
    got = run_program(rewrite_imports(source), env=env, timeout=timeout)
    compare_outputs(expected, got, rtol=rtol, atol=atol)
    return expected, got


# whole programs run on the reference and one kernel backend; the others run their primitives in the parity
# suite (running every program on them cost CI minutes: docs/design.md's test tiers)
PORT_DEVICES = ("numpy:0", "opencl:0")


def assert_port_matches_on(source: str, device) -> None:
    """Run the JAX program ``source`` under JAX and, after ``rewrite_imports``, under fnarray with its default
    device set to ``device`` (``FNARRAY_DEVICE``); assert they print the same numbers: float rounding on
    numpy:0 (rtol 2e-4), what training and long loops amplify elsewhere (2e-3). Skips a device outside
    ``PORT_DEVICES``."""
    import pytest
    if str(device) not in PORT_DEVICES:
        pytest.skip(f"the whole program runs on {', '.join(PORT_DEVICES)}; {device}'s primitives: the parity suite")
    want = jax_output(source)
    got = run_program(rewrite_imports(source), env={"FNARRAY_DEVICE": str(device)}, timeout=600)
    tight = str(device) == "numpy:0"
    compare_outputs(want, got, rtol=2e-4 if tight else 2e-3, atol=2e-5 if tight else 2e-4)
