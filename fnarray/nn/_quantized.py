"""``quantize(model)``, as ``mlx.nn.quantize``: a copy of a model with its linear layers and embeddings replaced
by ``QuantizedLinear``/``QuantizedEmbedding`` (``_quantized_layers.py``, re-exported here), in MLX's formats:
affine, mxfp4, mxfp8 and nvfp4 (``fnarray.core.quantized``). fnarray's modules are immutable: ``quantize(model)``
returns a new model. A module is quantized by its ``to_quantized(group_size, bits, mode)`` method (``Linear``'s
and ``Embedding``'s, as MLX's, or a user module's), so mlx-lm's ``hasattr(m, "to_quantized")`` predicates work.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fnarray.core.quantized import check_format
from fnarray.nn._layers import Lambda
from fnarray.nn._module import Module
from fnarray.nn._quantized_layers import QuantizedEmbedding, QuantizedLinear

__all__ = ["QuantizedLinear", "QuantizedEmbedding", "quantize"]


def _has_quantized_form(module) -> bool:
    return callable(getattr(module, "to_quantized", None))


def _quantizable(module, group_size) -> bool:
    """MLX's default predicate: a module with ``to_quantized`` (``Linear``, ``Embedding``...) whose weight's rows
    split into whole groups."""
    weight = getattr(module, "weight", None)
    return _has_quantized_form(module) and (weight is None or weight.shape[-1] % group_size == 0)


def _has_module_children(node) -> bool:
    """Whether a module holds another module in a field (directly or in a list, tuple or dict)."""
    def holds(value):
        if isinstance(value, Module):
            return True
        if isinstance(value, (list, tuple)):
            return any(holds(v) for v in value)
        return isinstance(value, dict) and any(holds(v) for v in value.values())
    return any(holds(getattr(node, f.name)) for f in dataclasses.fields(node))


def _to_quantized(module, group_size, bits, mode):
    to_quantized = getattr(module, "to_quantized", None)
    if to_quantized is None:
        raise TypeError(f"class_predicate selected {type(module).__name__}, which has no quantized form (fnarray "
                        f"quantizes Linear and Embedding, and modules with a to_quantized(group_size, bits, mode) "
                        f"method)")
    return to_quantized(group_size=group_size, bits=bits, mode=mode)


_CHOICE_KEYS = ("group_size", "bits", "mode")


def _checked_choice(choice, path, module):
    """A ``class_predicate``'s answer, checked as MLX does: a bool or a dict of ``group_size``/``bits``/``mode``
    (a string was taken as ``True``, a dict's misspelt key ignored)."""
    if isinstance(choice, (bool, np.bool_)) or not choice:   # MLX skips a module for any false answer
        return bool(choice)
    if not isinstance(choice, dict):
        raise ValueError(f"[quantize] class_predicate must return a bool or a dict of {', '.join(_CHOICE_KEYS)}; "
                         f"it returned {choice!r} ({type(choice).__name__}) for {type(module).__name__} at "
                         f"{path!r}")
    unknown = sorted(str(k) for k in choice if k not in _CHOICE_KEYS)
    if unknown:
        raise ValueError(f"[quantize] class_predicate returned {choice!r} for {type(module).__name__} at {path!r}; "
                         f"the dict's keys are {', '.join(_CHOICE_KEYS)}, not {', '.join(unknown)}")
    return choice


def quantize(model, group_size: int | None = None, bits: int | None = None, *, mode: str = "affine",
             class_predicate=None):
    """A copy of ``model`` with its linear layers and embeddings quantized (``mlx.nn.quantize``).

    Args:
      model: a ``Module`` (or a list, tuple or dict of them), walked through every field.
      group_size, bits, mode: the format (``fa.quantize``; ``None``: the mode's defaults).
      class_predicate: ``(path, module) -> bool | dict``, asked of every module (``path`` dotted, as
        ``"layers.0.attention.q_proj"``; ``""`` for the root): ``True`` quantizes it with the arguments above, a
        dict quantizes it with those entries (``group_size``, ``bits``, ``mode``) replaced. A selected module
        that holds other modules and has no quantized form (no ``to_quantized``) is walked into instead, and a
        ``Lambda`` (a function ``Sequential`` wrapped) is left alone, so a predicate that accepts everything
        quantizes the layers, as MLX's (which asks leaf modules only). Default: every module with
        ``to_quantized`` (``Linear``, ``Embedding``) whose weight's last axis divides into groups of ``group_size``.

    Returns:
      the new model; ``model`` itself is unchanged (modules are immutable).

    Raises:
      ValueError: an unsupported format or predicate answer. TypeError: a selected leaf with no quantized form.
    """
    group_size, bits = check_format(group_size, bits, mode, "quantize")

    def pick(path, module):
        if class_predicate is None:
            return _quantizable(module, group_size)
        return _checked_choice(class_predicate(path, module), path, module)

    def walk(node, path):
        if isinstance(node, Module):
            choice = pick(path, node)
            if choice and not _has_quantized_form(node) and (_has_module_children(node) or isinstance(node, Lambda)):
                # MLX asks leaf modules only: walk into a container the predicate accepts, and skip a function
                # that Sequential wrapped (in MLX a plain function, not a module)
                choice = False
            if choice:
                opts = {"group_size": group_size, "bits": bits, "mode": mode}
                if isinstance(choice, dict):
                    opts.update(choice)
                    if "mode" in choice and "group_size" not in choice:   # the new mode's defaults
                        opts["group_size"], opts["bits"] = check_format(None, choice.get("bits"), choice["mode"])
                return _to_quantized(node, opts["group_size"], opts["bits"], opts["mode"])
            changes = {}
            for f in dataclasses.fields(node):
                value = getattr(node, f.name)
                new = walk(value, f"{path}.{f.name}" if path else f.name)
                if new is not value:
                    changes[f.name] = new
            return node.replace(**changes) if changes else node
        if isinstance(node, (list, tuple)):
            items = [walk(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(node)]
            if all(a is b for a, b in zip(items, node, strict=True)):
                return node
            return type(node)(items) if not hasattr(node, "_fields") else type(node)(*items)
        if isinstance(node, dict):
            items = {k: walk(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
            return node if all(items[k] is node[k] for k in node) else type(node)(items)
        return node

    return walk(model, "")
