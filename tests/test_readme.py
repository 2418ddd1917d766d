"""The README stays true: its tour runs and prints the IR it shows; CI runs its test command."""

import contextlib
import io
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_setup_commands_come_first_and_ci_runs_the_test_command():
    text = _readme()
    cmds = re.findall(r"^    \$ (.*)$", text, re.M)
    assert len(cmds) >= 2
    assert "examples/digits_mlp.py" in cmds[0] and "pip install" in cmds[0]
    assert "pytest" in cmds[1] and "pip install" in cmds[1]
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    # .ci/run executes the README's second command (it extracts it rather than copying it).
    assert "README.md" in ci and "sed -n 2p" in ci


def test_tour_runs_and_prints_the_ir_shown():
    text = _readme()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    shown_ir = re.search(r"```\n(\{ lambda.*?\})\n```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README tour", "exec"), {})
    assert shown_ir in out.getvalue()
    assert out.getvalue().strip().endswith("jax:0")
