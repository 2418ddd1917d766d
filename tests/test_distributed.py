"""Multi-process runs on 127.0.0.1 through ``python -m fnarray.distributed.launch`` (jax over gloo, mlx over
its ring), and the bounded failures: an unreachable coordinator, a process that fails. Every run has a hard
timeout, so a broken transport fails the test instead of hanging CI."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SCRIPT = os.path.join(_ROOT, "tests", "two_processes.py")
_MLX_SCRIPT = os.path.join(_ROOT, "tests", "mlx_two_processes.py")  # a mesh over the processes, on mx.distributed


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    return env


def _launch(*args, timeout=150):
    return subprocess.run([sys.executable, "-m", "fnarray.distributed.launch", *args], env=_env(), cwd=_ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_two_processes(backend):
    pytest.importorskip("jax" if backend == "jax" else "mlx.core")
    r = _launch("-n", "2", "--backend", backend, "--timeout", "120", _SCRIPT if backend == "jax" else _MLX_SCRIPT)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    for rank in (0, 1):
        assert f"[{rank}] done {rank}" in out, out[-4000:]
    assert out.count("ok ") >= (4 if backend == "jax" else 12), out


def _run_code(code, timeout=60):
    t = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], env=_env(), cwd=_ROOT, capture_output=True, text=True,
                       timeout=timeout)
    return r, time.monotonic() - t


def test_unreachable_coordinator_times_out(tmp_path):
    """Process 1 against a port where nothing listens: the documented ``TimeoutError`` after ``timeout`` s, and
    the process goes on and exits 0 (JAX's client used to abort it afterwards: exit 134)."""
    pytest.importorskip("jax")
    from fnarray.distributed.launch import free_ports
    (port,) = free_ports(1)
    code = ("import fnarray as fa\n"
            "try:\n"
            f"    fa.distributed.initialize('127.0.0.1:{port}', num_processes=2, process_id=1, timeout=3)\n"
            "except TimeoutError as e:\n"
            "    print('TIMEOUT', e)\n"
            "import time; time.sleep(4)\n"   # past JAX's own deadline: the process must still be alive
            "print('ALIVE', fa.numpy.ones(3).sum())\n")
    r, took = _run_code(code)
    out = r.stdout + r.stderr[-2000:]
    assert r.returncode == 0, out
    assert "TIMEOUT" in r.stdout and "could not reach the coordinator" in r.stdout and "within 3 s" in r.stdout, out
    assert "ALIVE 3.0" in r.stdout, out
    assert took < 45, took


def test_coordinator_alone_times_out():
    """Process 0 of 2 whose peer never comes: ``TimeoutError`` naming the missing process, exit code 0."""
    pytest.importorskip("jax")
    from fnarray.distributed.launch import free_ports
    (port,) = free_ports(1)
    code = ("import fnarray as fa, time\n"
            "try:\n"
            f"    fa.distributed.initialize('127.0.0.1:{port}', num_processes=2, process_id=0, timeout=2)\n"
            "except TimeoutError as e:\n"
            "    print('TIMEOUT', e)\n"
            "time.sleep(4)\n"
            "print('ALIVE')\n")
    r, took = _run_code(code)
    out = r.stdout + r.stderr[-2000:]
    assert r.returncode == 0, out
    assert "TIMEOUT" in r.stdout and "process(es) [1] of 2 never connected" in r.stdout and "ALIVE" in r.stdout, out
    assert took < 45, took


def test_outside_a_launcher_is_a_value_error_that_says_what_is_missing():
    """``initialize()`` with nothing to go on: a ``ValueError`` at once naming the missing arguments and the
    launcher, not a timeout it never waited for."""
    pytest.importorskip("jax")
    code = ("import fnarray as fa\n"
            "try:\n"
            "    fa.distributed.initialize()\n"
            "except ValueError as e:\n"
            "    print('VALUE', e)\n")
    env_keys = ("FNARRAY_COORDINATOR", "FNARRAY_NUM_PROCESSES", "FNARRAY_PROCESS_ID", "SLURM_JOB_ID",
                "OMPI_MCA_orte_hnp_uri", "JAX_COORDINATOR_ADDRESS")
    assert not any(k in os.environ for k in env_keys), "run outside any launcher"
    r, took = _run_code(code)
    out = r.stdout + r.stderr[-2000:]
    assert r.returncode == 0, out
    assert "VALUE" in r.stdout and "coordinator_address=None" in r.stdout and "fnarray.distributed.launch" in r.stdout
    assert "60 s" not in r.stdout, out
    assert took < 45, took


def test_a_failing_process_stops_the_run(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['FNARRAY_PROCESS_ID'] == '1':\n"
                      "    sys.exit(3)\n"
                      "time.sleep(60)\n")
    r = _launch("-n", "2", "--timeout", "50", str(script), timeout=40)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "process 1 exited with status 3" in r.stderr



def test_mismatched_device_counts_are_an_error():
    pytest.importorskip("jax")
    from fnarray.distributed.launch import free_ports
    (port,) = free_ports(1)
    code = ("import fnarray as fa\n"
            "try:\n"
            "    fa.distributed.initialize(timeout=60)\n"
            "except ValueError as e:\n"
            "    print('MISMATCH', e)\n")
    procs = []
    for i in range(2):
        env = _env()
        env.update(XLA_FLAGS=f"--xla_force_host_platform_device_count={i + 1}", FNARRAY_COORDINATOR=f"127.0.0.1:{port}",
                   FNARRAY_NUM_PROCESSES="2", FNARRAY_PROCESS_ID=str(i))
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, cwd=_ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        finally:
            p.kill()
    for out in outs:
        assert "MISMATCH" in out and "same number of devices" in out, out[-2000:]
