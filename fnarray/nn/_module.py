"""``Module``: a neural-network layer as an immutable dataclass that is a pytree (in the style of Equinox).

A subclass declares its fields as class annotations; it becomes a dataclass whose instances
cannot be changed after ``__init__``. Each instance is a pytree registered in fnarray's optree
namespace, so ``grad``, ``jit``, ``vmap``, ``fa.optim`` and ``fa.save`` take a model as it is:

* a field holding an array, a ``Module``, or a list/tuple/dict containing arrays is a *child*
  (its arrays are leaves: differentiated, traced, updated);
* every other field (ints, floats, strings, dtypes, activation functions, shapes) is *static*:
  part of the tree's structure, so it is hashed into ``jit``'s cache key and never traced;
* ``field(static=True)`` forces a field static, ``field(static=False)`` forces it a child
  (a float hyperparameter you want to differentiate).

Which fields are children is decided once per instance, after ``__init__``, and kept by every
tree operation, so ``tree_map(lambda x: None, model)`` or ``partition`` keeps the structure.
There is no global state: parameters live in the module object, randomness comes from
explicit keys, and mutable statistics (``BatchNorm``'s) are passed in and returned.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import threading

import numpy as np
import optree

from fnarray import tree_util

__all__ = ["Module", "field", "static_field"]

_INIT = threading.local()   # ids of the objects whose __init__ is running, per thread


def field(*, static: bool | None = None, **kwargs):
    """A dataclass field of a ``Module`` (``dataclasses.field`` plus ``static``).

    Args:
      static: ``True`` keeps the value in the tree structure (never a leaf); ``False`` makes it a
        child even if it is a Python number; ``None`` (the default) decides by the value: arrays,
        Modules and containers of arrays are children, everything else is static.
      kwargs: passed to ``dataclasses.field`` (``default``, ``default_factory``, ``repr``...).
    Returns:
      a ``dataclasses.Field`` carrying ``metadata["static"]``.
    Raises:
      TypeError: an argument ``dataclasses.field`` does not take.
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    if static is not None:
        metadata["static"] = bool(static)
    return dataclasses.field(metadata=metadata, **kwargs)


def static_field(**kwargs):
    """``field(static=True, ...)`` (Equinox's spelling).

    Args:
      kwargs: passed to ``dataclasses.field``.
    Returns:
      a ``dataclasses.Field`` that is always static (part of the tree structure, never a leaf).
    Raises:
      TypeError: an argument ``dataclasses.field`` does not take.
    """
    return field(static=True, **kwargs)


def _in_init(obj) -> bool:
    return id(obj) in getattr(_INIT, "ids", ())


def _holds_arrays(value) -> bool:
    from fnarray.core.array import Array
    if isinstance(value, (Array, np.ndarray, Module)):
        return True
    if isinstance(value, (list, tuple, dict)):
        return any(isinstance(x, (Array, np.ndarray)) for x in tree_util.tree_leaves(value))
    return False


def _wrap_init(init):
    def __init__(self, *args, **kwargs):
        ids = getattr(_INIT, "ids", None)
        if ids is None:
            ids = _INIT.ids = set()
        outer = id(self) in ids
        ids.add(id(self))
        try:
            init(self, *args, **kwargs)
        finally:
            if not outer:
                ids.discard(id(self))
        if not outer:
            self._fa_finish()
    __init__.__wrapped__ = init
    __init__.__qualname__ = getattr(init, "__qualname__", "__init__")
    __init__.__doc__ = getattr(init, "__doc__", None)
    return __init__


@functools.lru_cache(maxsize=None)   # one per distinct field tuple
def _children_getter(dyn):
    """A function ``module -> tuple of the fields named dyn`` (``operator.attrgetter``: one C call)."""
    if len(dyn) > 1:
        return operator.attrgetter(*dyn)
    if dyn:
        one = operator.attrgetter(dyn[0])
        return lambda m: (one(m),)
    return lambda m: ()


def _flatten(m):
    # The aux data and the children's getter are built once per instance (modules are immutable): a jitted call
    # flattens its model on every call, and ``dataclasses.fields`` with a hash check per static field cost ~4 us a
    # module (60 modules of examples/llm.py's model: 0.25 ms a decode step).
    try:
        aux, get = object.__getattribute__(m, "_fa_flat")
    except AttributeError:
        aux = (type(m), m._fa_dynamic, m._fa_static_items())
        get = _children_getter(aux[1])
        object.__setattr__(m, "_fa_flat", (aux, get))
    return get(m), aux, aux[1]


def _unflatten(aux, children):
    # ``_fa_from_fields`` written into the instance's dictionary at once (fields are plain instance attributes):
    # a jitted training step unflattens its returned model on every call (~30 modules in examples/llm.py's
    # model: 69 -> 25 us).
    cls, dyn, static = aux
    if len(children) != len(dyn):
        raise ValueError(f"{cls.__name__} has {len(dyn)} array fields ({', '.join(dyn)}), got {len(children)} "
                         "children to unflatten")
    obj = object.__new__(cls)
    d = obj.__dict__
    d.update(zip(dyn, children))
    d.update(static)
    d["_fa_dynamic"] = dyn
    d["_fa_flat"] = (aux, _children_getter(dyn))   # the same fields: reused by its flatten
    return obj


def _refuse_unannotated(module):
    """An ``__init__`` that set ``self.layers = [...]`` without a class annotation (MLX's style) made an attribute
    the pytree never sees: ``grad``, ``jit``, ``fa.nn.quantize`` and ``fa.save`` would silently skip its arrays."""
    names = {f.name for f in dataclasses.fields(module)}
    stray = [n for n, v in vars(module).items() if n not in names and not n.startswith("_") and _holds_arrays(v)]
    if stray:
        cls = type(module).__name__
        raise TypeError(f"{cls}.__init__ set {', '.join('self.' + n for n in stray)}, holding arrays or modules, "
                        f"without a class annotation; fnarray modules are dataclasses and only annotated fields "
                        f"are part of the model (grad, jit, fa.nn.quantize and fa.save would skip it): declare "
                        f"it in the class body, e.g. `{stray[0]}: list` (docs/from_mlx.md)")


class Module:
    """Base class of the layers: an immutable dataclass that is a pytree (see the module docstring).

    Subclass it with annotated fields and either let the dataclass write ``__init__`` or write
    your own, which may assign ``self.name = value`` (only inside ``__init__``)::

        class Affine(fa.nn.Module):
            weight: fa.Array
            bias: fa.Array
            def __init__(self, n, *, key):
                self.weight = fa.random.normal(key, (n, n))
                self.bias = fnp.zeros(n)
            def __call__(self, x):
                return x @ self.weight.T + self.bias

    Instances compare by identity and hash by identity, like functions; two modules with equal
    arrays are different objects. ``replace(**changes)`` returns a copy with fields changed.
    """

    _fa_is_module = True
    #: fields whose MLX name differs (``{"output_proj": "out_proj"}``): ``parameters``, ``update`` and
    #: ``load_weights`` speak MLX's names
    _MLX_NAMES: dict = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        own_init = "__init__" in cls.__dict__
        dataclasses.dataclass(init=not own_init, repr=False, eq=False)(cls)
        cls.__init__ = _wrap_init(cls.__init__)
        optree.register_pytree_node(cls, _flatten, _unflatten, path_entry_type=optree.GetAttrEntry,
                                    namespace=tree_util.NAMESPACE)

    # -- construction helpers ------------------------------------------------------------------
    def _fa_finish(self, keep=()):
        missing = [f.name for f in dataclasses.fields(self) if not hasattr(self, f.name)]
        if missing:
            raise TypeError(f"{type(self).__name__}.__init__ did not set the field(s) {', '.join(missing)}; "
                            "every annotated field needs a value")
        _refuse_unannotated(self)
        dyn = []
        for f in dataclasses.fields(self):
            static = f.metadata.get("static")
            v = object.__getattribute__(self, f.name)
            if static is False or (static is None and (f.name in keep or _holds_arrays(v))):
                dyn.append(f.name)
        object.__setattr__(self, "_fa_dynamic", tuple(dyn))
        # a module finished twice (a subclass's __init__ calling its parent's): rebuilt at the next flatten, and
        # the leaves jit's hot path keeps (``fnarray.transforms.jit.LEAVES_ATTR``) at the next read
        for kept in ("_fa_flat", "_fa_leaves"):
            try:
                object.__delattr__(self, kept)
            except AttributeError:
                pass
        check = getattr(self, "__check_init__", None)
        if check is not None:
            check()

    def _fa_static_items(self):
        dyn = self._fa_dynamic
        items = []
        for f in dataclasses.fields(self):
            if f.name not in dyn:
                v = object.__getattribute__(self, f.name)
                try:
                    hash(v)
                except TypeError:
                    raise TypeError(f"{type(self).__name__}.{f.name} is a static field (not an array) holding the "
                                    f"unhashable {type(v).__name__}; static fields are part of jit's cache key: "
                                    "use a tuple instead of a list, or field(static=False) for array data") from None
                items.append((f.name, v))
        return tuple(items)

    def _fa_fields(self):
        """``(children, static)``: lists of ``(name, value)``, children in flatten order."""
        return ([(n, object.__getattribute__(self, n)) for n in self._fa_dynamic], list(self._fa_static_items()))

    @classmethod
    def _fa_from_fields(cls, dynamic, static):
        """A new instance with these field values, without running ``__init__`` (as unflattening does)."""
        obj = object.__new__(cls)
        for name, v in list(dynamic) + list(static):
            object.__setattr__(obj, name, v)
        object.__setattr__(obj, "_fa_dynamic", tuple(n for n, _ in dynamic))
        return obj

    # -- immutability --------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if _in_init(self):
            object.__setattr__(self, name, value)
            return
        raise dataclasses.FrozenInstanceError(
            f"cannot assign {type(self).__name__}.{name}: modules are immutable; make a changed copy with "
            f"model.replace({name}=...) or fa.tree.map")

    def __delattr__(self, name):
        raise dataclasses.FrozenInstanceError(f"cannot delete {type(self).__name__}.{name}: modules are immutable")

    def replace(self, **changes):
        """A copy with the named fields replaced (``__init__`` is not run again).

        Raises: ``TypeError`` for a name that is not a field.
        """
        names = [f.name for f in dataclasses.fields(self)]
        for k in changes:
            if k not in names:
                raise TypeError(f"{type(self).__name__} has no field {k!r}; its fields are {names}")
        obj = object.__new__(type(self))
        ids = getattr(_INIT, "ids", None)
        if ids is None:
            ids = _INIT.ids = set()
        ids.add(id(obj))
        try:
            for n in names:
                object.__setattr__(obj, n, changes[n] if n in changes else object.__getattribute__(self, n))
        finally:
            ids.discard(id(obj))
        # A field that was a child stays one (so a filter spec made with replace(layers=(True, False))
        # keeps the model's structure); a changed field becomes a child if it now holds arrays.
        obj._fa_finish(keep=self._fa_dynamic)
        return obj

    # -- MLX's parameter dictionaries ----------------------------------------------------------
    def _to_mlx(self, name, value):
        """The array field ``name`` in MLX's layout (a layer whose layout differs overrides this)."""
        return value

    def _from_mlx(self, name, value):
        """An array in MLX's layout for the field ``name``, in this layer's layout (inverse of ``_to_mlx``)."""
        return value

    def parameters(self) -> dict:
        """Every array of the module as nested dicts and lists under MLX's names (``mlx.nn.Module.parameters``).

        ``fnarray.utils.tree_flatten(model.parameters())`` gives the dotted names an MLX checkpoint uses
        (``"layers.0.weight"``), arrays in MLX's layout (a convolution's weight ``(out, *kernel, in)``).
        Returns: a dict (fields without arrays, and ``None`` biases, left out).
        """
        out = {}
        for name in self._fa_dynamic:
            value = _mlx_params(self, name, object.__getattribute__(self, name))
            if value is not None:
                out[self._MLX_NAMES.get(name, name)] = value
        return out

    def trainable_parameters(self) -> dict:
        """``parameters()`` (``mlx.nn.Module.trainable_parameters``): fnarray modules freeze nothing in place
        (``fa.tree_util.partition`` splits off frozen arrays), so every array is trainable."""
        return self.parameters()

    def update(self, parameters: dict, strict: bool = True):
        """A copy with the arrays that ``parameters`` names replaced (``mlx.nn.Module.update``; MLX updates in
        place, fnarray returns the new module).

        Args:
          parameters: nested dicts/lists under MLX's names, as ``parameters()`` gives (or
            ``fnarray.utils.tree_unflatten`` of dotted names), arrays in MLX's layout (NumPy, MLX or fnarray).
          strict: refuse names the module does not have.
        Returns: the new module.
        Raises: ``ValueError`` for an unknown name (``strict``) or an array whose shape differs from the one it
          replaces.
        """
        return _update_module(self, parameters, strict, "")

    def load_weights(self, file_or_weights, strict: bool = True):
        """A copy with the weights of an MLX checkpoint (``mlx.nn.Module.load_weights``; returns the new module).

        Args:
          file_or_weights: a ``.npz`` or ``.safetensors`` path (as ``model.save_weights`` writes in MLX), or a
            list of ``(dotted_name, array)`` pairs.
          strict: every parameter of the module must be given, nothing else, each of the same shape.
        Returns: the new module.
        Raises: ``ValueError`` for missing or unexpected names (``strict``) or a shape that differs;
          ``ValueError`` for a file that is neither ``.npz`` nor ``.safetensors``.
        """
        from fnarray.utils import tree_flatten, tree_unflatten
        if isinstance(file_or_weights, (str, bytes)) or hasattr(file_or_weights, "__fspath__"):
            weights = _read_weights(str(file_or_weights))
        else:
            weights = list(file_or_weights)
        if strict:
            have = dict(tree_flatten(self.parameters()))
            given = {k for k, _ in weights}
            extra, missing = sorted(given - set(have)), sorted(set(have) - given)
            if extra:
                raise ValueError(f"load_weights: received parameters not in the model: {', '.join(extra)}")
            if missing:
                raise ValueError(f"load_weights: missing parameters: {', '.join(missing)}")
        return self.update(tree_unflatten(weights), strict=strict)

    def save_weights(self, file: str) -> None:
        """Write ``parameters()`` under their dotted names to ``file`` (``.npz`` or ``.safetensors``), as
        ``mlx.nn.Module.save_weights``: MLX's ``load_weights`` reads it.

        Raises: ``ValueError`` for another extension.
        """
        from fnarray.utils import tree_flatten
        arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in tree_flatten(self.parameters())}
        if file.endswith(".npz"):
            np.savez(file, **arrays)
        elif file.endswith(".safetensors"):
            from fnarray.serialization import _safetensors
            _safetensors()
            from safetensors.numpy import save_file
            save_file(arrays, file)
        else:
            raise ValueError(f"save_weights: {file!r} is neither .npz nor .safetensors")

    def __repr__(self):
        parts = []
        for f in dataclasses.fields(self):
            if not f.repr:
                continue
            parts.append(f"{f.name}={_short(object.__getattribute__(self, f.name))}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _short(v):
    from fnarray.core.array import Array
    if isinstance(v, Array):
        try:
            return v.aval.str_short()
        except AttributeError:
            return f"{v.dtype.name}{list(v.shape)}"
    if isinstance(v, np.ndarray):
        return f"np.{v.dtype.name}{list(v.shape)}"
    if isinstance(v, tuple) and v and isinstance(v[0], Module):
        return "(" + ", ".join(_short(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if callable(v) and hasattr(v, "__name__") and not isinstance(v, Module):
        return v.__name__
    return repr(v)


def _mlx_params(owner, name, value):
    from fnarray.core.array import Array
    if isinstance(value, Module):
        return value.parameters()
    if isinstance(value, (Array, np.ndarray)):
        return owner._to_mlx(name, value)
    if isinstance(value, (list, tuple)):
        return [_mlx_params(owner, name, v) for v in value]
    if isinstance(value, dict):
        return {k: _mlx_params(owner, name, v) for k, v in value.items()}
    return None


def _update_module(module, parameters, strict, path):
    if not isinstance(parameters, dict):
        raise ValueError(f"update: {path or 'the module'} takes a dict of parameters, got {type(parameters).__name__}")
    names = {module._MLX_NAMES.get(f.name, f.name): f.name for f in dataclasses.fields(module)}
    changes = {}
    for key, value in parameters.items():
        where = f"{path}.{key}" if path else key
        if key not in names:
            if strict:
                have = sorted(k for k, n in names.items() if n in module._fa_dynamic)
                raise ValueError(f"update: {type(module).__name__} has no parameter {where!r} (its parameters: "
                                 f"{', '.join(have)})")
            continue
        field_name = names[key]
        changes[field_name] = _updated(module, field_name, object.__getattribute__(module, field_name), value,
                                       strict, where)
    return module.replace(**changes) if changes else module


def _updated(owner, name, current, value, strict, where):
    from fnarray.core.array import Array
    if isinstance(current, Module):
        return _update_module(current, value, strict, where)
    if isinstance(current, (list, tuple)):
        items = dict(enumerate(value)) if isinstance(value, (list, tuple)) else {int(k): v for k, v in value.items()}
        out = list(current)
        for i, v in items.items():
            if not 0 <= i < len(out):
                if strict:
                    raise ValueError(f"update: {where}.{i} is past the {len(out)} entries of {where}")
                continue
            if v is not None and not (isinstance(v, dict) and not v and not isinstance(out[i], Module)):
                out[i] = _updated(owner, name, out[i], v, strict, f"{where}.{i}")
        return type(current)(out)
    if isinstance(current, dict):
        out = dict(current)
        for k, v in value.items():
            if k in out:
                out[k] = _updated(owner, name, out[k], v, strict, f"{where}.{k}")
            elif strict:
                raise ValueError(f"update: {where} has no entry {k!r}")
        return out
    new = owner._from_mlx(name, _as_array(value))
    if isinstance(current, (Array, np.ndarray)) and tuple(new.shape) != tuple(current.shape):
        raise ValueError(f"update: {where} has shape {tuple(current.shape)} here (fnarray's layout), got "
                         f"{tuple(np.shape(value))}; load weights of the same model configuration")
    if isinstance(current, Array) and getattr(current, "committed", False):
        from fnarray.devices.placement import device_put
        new = device_put(new, current.device)
    return new


def _as_array(value):
    import fnarray.numpy as fnp
    from fnarray.core.array import Array
    if isinstance(value, Array):
        return value
    return fnp.asarray(np.asarray(value))


def _read_weights(path: str) -> list:
    if path.endswith(".npz"):
        with np.load(path) as f:
            return [(k, f[k]) for k in f.files]
    if path.endswith(".safetensors"):
        from fnarray.serialization import _safetensors
        _safetensors()
        from safetensors.numpy import load_file
        return list(load_file(path).items())
    raise ValueError(f"load_weights: {path!r} is neither .npz nor .safetensors (MLX's weight files)")
