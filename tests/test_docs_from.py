"""The code blocks of docs/from_jax.md and docs/from_mlx.md run, in order, and say what the pages claim."""

from __future__ import annotations

import pathlib
import re
import textwrap

import numpy as np
import pytest

# Both pages save a checkpoint (fa.save): without safetensors they skip, naming it, as the README promises.
pytest.importorskip("safetensors", reason="the pages' checkpoint blocks call fa.save: pip install -e '.[io]'")

DOCS = pathlib.Path(__file__).parent.parent / "docs"


def _run(name):
    text = (DOCS / name).read_text()
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, re.S)]
    ns = {}
    for block in blocks:
        exec(compile(block, f"docs/{name}", "exec"), ns)  # noqa: S102 (our own documentation)
    return blocks, ns


def test_from_jax_page_runs():
    blocks, ns = _run("from_jax.md")
    assert len(blocks) >= 5
    np.testing.assert_allclose(np.asarray(ns["cums"]), np.cumsum(np.arange(5.0)))
    np.testing.assert_allclose(np.asarray(ns["prefix"]), np.cumsum(np.arange(1.0, 6.0)))
    assert float(ns["odd"]) == 10.0 and int(ns["n"]) == 128
    np.testing.assert_allclose(np.asarray(ns["squares"]), np.arange(4.0) ** 2)
    assert ns["names"] == ["['layers'][0]", "['w']"]
    assert isinstance(ns["host"]["g"], np.ndarray) and int(ns["clamped"][0]) == 2
    assert np.asarray(ns["J"]).shape == (3, 3)
    leaves = ns["fa"].tree.leaves
    for a, b in zip(leaves(ns["restored"]["model"]), leaves(ns["model"]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_from_mlx_page_runs():
    blocks, ns = _run("from_mlx.md")
    assert len(blocks) >= 5
    assert not np.array_equal(np.asarray(ns["a"]), np.asarray(ns["c"]))
    assert ns["losses"][-1] < ns["losses"][0]
    g = ns["grads"]
    assert g.layers[0].weight is not None and g.layers[2].weight is None   # only the first Linear trains
