"""Checkpoints: ``fa.save(path, tree)`` and ``fa.load(path, like=None, device=None)`` in the safetensors format.

A checkpoint is one safetensors file (https://github.com/huggingface/safetensors): every
array leaf of the pytree is a tensor named by its dotted path (``layers.0.weight``,
``opt_state.0.mu.w1``), and the file's text metadata holds

* ``fnarray.tree``: the structure as JSON (dicts with their key order and key types, lists,
  tuples, namedtuples, ``None``, ``fnarray.nn.Module`` classes with their static fields, and
  registered custom nodes without aux data such as ``fnarray.random.key`` arrays), enough to rebuild
  the tree without ``like=``;
* ``fnarray.leaves``: per tensor its fnarray dtype, weak type and CRC-32, so a flipped bit in the
  data is caught at load, and dtypes safetensors lacks (complex, float8) are stored as a view;
* ``fnarray.shardings``: per committed array where it was (``{"device": "jax:0"}``) or how it was split
  (``{"mesh": {"axis_names", "shape", "devices"}, "spec"}`` for a ``NamedSharding``): ``saved_shardings``
  reads it back and ``load(..., shardings="saved")`` restores onto it;
* ``fnarray.format``: the version of this layout.

Other programs read the tensors with any safetensors reader. Saving writes a temporary file
in the target's folder and renames it over the target (``os.replace``) after an ``fsync``, so
a crash mid-write leaves the previous file whole (at worst a stray ``.<name>.*.tmp`` file).

Loading without ``like`` imports the Python modules that define the tree's classes (namedtuples,
``Module`` subclasses and static callables such as an activation): load such files only from
sources you trust, or pass ``like=``, which takes the structure from your own tree instead.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import tempfile
import zlib

import numpy as np

from fnarray import tree_util
from fnarray.core import dtypes
from fnarray.core.errors import FnArrayError

__all__ = ["CheckpointError", "save", "load", "saved_shardings"]

FORMAT = "1"

# dtypes stored as themselves; the rest are stored as a view (complex as pairs of reals, others as bytes).
_NATIVE = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "float16": "F16",
    "bfloat16": "BF16", "uint32": "U32", "int32": "I32", "float32": "F32", "float64": "F64", "uint64": "U64",
    "int64": "I64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}
_FROM_CODE = {code: name for name, code in _NATIVE.items()} | {"C64": "complex64"}
_REAL_OF = {"complex64": "float32", "complex128": "float64"}


class CheckpointError(FnArrayError, ValueError):
    """A checkpoint file that cannot be read (truncated, corrupted, not safetensors) or does not fit ``like``."""


def _contiguous(a) -> np.ndarray:
    """``a`` as a C-contiguous ndarray of its own shape (``np.ascontiguousarray`` makes 0-d arrays 1-d)."""
    a = np.asarray(a)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _safetensors():
    try:
        import safetensors
    except ImportError:
        raise ImportError("fa.save and fa.load need the safetensors package: pip install safetensors "
                          "(or pip install 'fnarray[io]')") from None
    return safetensors


# ----------------------------------------------------------------------------- names and structure


def _name_part(node_kind, entry, node=None):
    if node_kind == "namedtuple":
        return type(node)._fields[entry]
    return str(entry)


def _qualname(obj) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def _resolve(ref: str):
    mod, _, qual = ref.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


def _encode_static(v):
    """A static (non-array) field value as JSON, or ``{"opaque": repr}`` when it cannot be rebuilt."""
    if v is None or isinstance(v, (bool, str)):
        return {"v": v}
    if isinstance(v, int):
        return {"int": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, complex):
        return {"complex": [repr(v.real), repr(v.imag)]}
    if isinstance(v, (tuple, list)):
        return {"tuple" if isinstance(v, tuple) else "list": [_encode_static(x) for x in v]}
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return {"dtype": np.dtype(v).name}
    if callable(v) and hasattr(v, "__qualname__") and "<" not in v.__qualname__:
        try:
            if _resolve(_qualname(v)) is v:
                return {"ref": _qualname(v)}
        except (ImportError, AttributeError):
            pass
    return {"opaque": repr(v)}


def _decode_static(e, where):
    if "v" in e:
        return e["v"]
    if "int" in e:
        return int(e["int"])
    if "float" in e:
        return float(e["float"])
    if "complex" in e:
        return complex(float(e["complex"][0]), float(e["complex"][1]))
    if "tuple" in e:
        return tuple(_decode_static(x, where) for x in e["tuple"])
    if "list" in e:
        return [_decode_static(x, where) for x in e["list"]]
    if "dtype" in e:
        return dtypes.as_dtype(e["dtype"])
    if "ref" in e:
        return _resolve(e["ref"])
    raise CheckpointError(f"the static field {where} holds {e.get('opaque')}, which a checkpoint cannot rebuild "
                          "(a lambda or a local object); pass like= (a tree of the same structure) to fa.load")


def _is_module(node) -> bool:
    return getattr(type(node), "_fa_is_module", False)


def _is_namedtuple(node) -> bool:
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _walk(node, prefix, leaves):
    """The JSON structure of ``node``; appends ``(name, leaf)`` for every array leaf to ``leaves``."""
    def child(part):
        return f"{prefix}.{part}" if prefix else str(part)

    if node is None:
        return None
    if _is_module(node):
        dyn, static = node._fa_fields()
        return {"module": _qualname(type(node)),
                "fields": [[k, _walk(v, child(k), leaves)] for k, v in dyn],
                "static": [[k, _encode_static(v)] for k, v in static]}
    if _is_namedtuple(node):
        return {"namedtuple": _qualname(type(node)),
                "children": [_walk(v, child(f), leaves) for f, v in zip(type(node)._fields, node, strict=True)]}
    if type(node) in (tuple, list):
        return {type(node).__name__: [_walk(v, child(i), leaves) for i, v in enumerate(node)]}
    if type(node) is dict:
        items = []
        for k, v in node.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise TypeError(f"fa.save: dict keys must be str or int to name tensors, got {k!r} at "
                                f"{prefix or 'the root'}")
            items.append([k, _walk(v, child(k), leaves)])
        return {"dict": items}
    one = _one_level(node)
    if one is not None:
        entry = {"custom": _qualname(type(node)),
                 "children": [_walk(v, child(e), leaves) for v, e in zip(one.children, one.entries, strict=True)]}
        if one.metadata is None:  # no aux data: load can rebuild it through the class's registered unflatten
            entry["aux"] = None
        return entry
    name = prefix or "_root"
    leaves.append((name, node))
    return {"leaf": name}


def _one_level(node):
    """optree's one-level flattening of a registered custom node, ``None`` for a leaf."""
    import optree
    if tree_util.treedef_is_leaf(tree_util.tree_structure(node)):
        return None
    return optree.tree_flatten_one_level(node, none_is_leaf=False, namespace=tree_util.NAMESPACE)


def _rebuild(s, tensors, where="the root"):
    if s is None:
        return None
    if "leaf" in s:
        return tensors[s["leaf"]]
    if "list" in s:
        return [_rebuild(c, tensors, f"{where}[{i}]") for i, c in enumerate(s["list"])]
    if "tuple" in s:
        return tuple(_rebuild(c, tensors, f"{where}[{i}]") for i, c in enumerate(s["tuple"]))
    if "dict" in s:
        return {k: _rebuild(c, tensors, f"{where}[{k!r}]") for k, c in s["dict"]}
    if "namedtuple" in s:
        cls = _load_class(s["namedtuple"], where)
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise CheckpointError(f"{s['namedtuple']} at {where} is not a namedtuple class")
        return cls(*(_rebuild(c, tensors, f"{where}.{f}") for f, c in zip(cls._fields, s["children"], strict=True)))
    if "module" in s:
        cls = _load_class(s["module"], where)
        if not _is_module_class(cls):
            raise CheckpointError(f"{s['module']} at {where} is not an fnarray.nn.Module class")
        dyn = [(k, _rebuild(c, tensors, f"{where}.{k}")) for k, c in s["fields"]]
        static = [(k, _decode_static(e, f"{where}.{k}")) for k, e in s["static"]]
        return cls._fa_from_fields(dyn, static)
    if "custom" in s and "aux" in s:
        cls = _load_class(s["custom"], where)
        children = [_rebuild(c, tensors, f"{where}[{i}]") for i, c in enumerate(s["children"])]
        return _unflatten_custom(cls, children, s["custom"], where)
    if "custom" in s:
        raise CheckpointError(f"the checkpoint holds a custom pytree node {s['custom']} at {where}, which it "
                              "cannot rebuild by itself; pass like= (a tree of the same structure) to fa.load")
    raise CheckpointError(f"unknown structure entry {sorted(s)} at {where}: not an fnarray checkpoint of format "
                          f"{FORMAT}")


def _unflatten_custom(cls, children, ref, where):
    """A custom pytree node of class ``cls`` without aux data, rebuilt through its registered unflatten."""
    import optree
    entry = optree.register_pytree_node.get(cls, namespace=tree_util.NAMESPACE) if isinstance(cls, type) else None
    if entry is None:
        raise CheckpointError(f"{ref} at {where} is not a registered pytree node class (register it with "
                              "fnarray.tree_util.register_pytree_node before loading, or pass like= to fa.load)")
    return entry.unflatten_func(None, children)


def _is_module_class(cls) -> bool:
    return isinstance(cls, type) and getattr(cls, "_fa_is_module", False)


def _load_class(ref, where):
    try:
        return _resolve(ref)
    except (ImportError, AttributeError) as e:
        raise CheckpointError(f"the class {ref} of the checkpoint's node at {where} cannot be imported ({e}); "
                              "import the module that defines it, or pass like= to fa.load") from None


# ----------------------------------------------------------------------------- save


def _host(leaf, name):
    """``(ndarray, fnarray dtype name, weak)`` of one leaf."""
    from fnarray.core import tracing
    from fnarray.core.array import Array
    if isinstance(leaf, tracing.Tracer):
        raise TypeError(f"fa.save: the leaf {name} is a traced value; save outside jit/grad/vmap")
    if isinstance(leaf, Array):
        return _contiguous(np.asarray(leaf)), leaf.dtype.name, bool(leaf.weak_type)
    if isinstance(leaf, (bool, int, float, complex)) and not isinstance(leaf, np.generic):
        d, w = dtypes.dtype_of_scalar(leaf)
        return np.asarray(leaf, d), d.name, w
    if isinstance(leaf, (np.ndarray, np.generic)):
        a = _contiguous(leaf)
        return a, a.dtype.name, False
    raise TypeError(f"fa.save: the leaf {name} is a {type(leaf).__name__}; checkpoints hold arrays and scalars "
                    "(keep other values out of the tree, or make them static fields of a Module)")


def _stored(a: np.ndarray, name: str):
    """``(safetensors dtype string, stored ndarray, view kind)`` of ``a``."""
    dn = a.dtype.name
    if dn in _NATIVE:
        return dn, a, None
    if dn in _REAL_OF:
        r = a.reshape(-1).view(_REAL_OF[dn]).reshape(a.shape + (2,))
        return _REAL_OF[dn], r, "complex"
    if a.dtype.kind in "biufcV" or a.dtype.name.startswith("float8"):
        return "uint8", a.reshape(-1).view(np.uint8).reshape(a.shape + (a.dtype.itemsize,)), "bytes"
    raise TypeError(f"fa.save: the leaf {name} has dtype {dn}, which a checkpoint cannot store")


def _check_extension(path):
    ext = os.path.splitext(os.path.basename(path))[1]
    if ext and ext.lower() != ".safetensors":
        stem = os.path.splitext(path)[0]
        raise ValueError(f"fa.save writes the safetensors format, but {path!r} names a {ext} file, which other "
                         f"tools would misread; save to {stem + '.safetensors'!r} (for NumPy's .npz, "
                         "numpy.savez of the leaves as NumPy arrays)")


def save(path, tree) -> None:
    """Write the pytree ``tree`` to ``path`` as a safetensors file, atomically.

    Args:
      path: the file to write (``str`` or ``os.PathLike``); its folder must exist. An existing
        file is replaced only once the new one is complete.
      tree: a pytree (dicts with ``str``/``int`` keys, lists, tuples, namedtuples, ``None``,
        ``fnarray.nn.Module`` objects, ``fa.optim`` states) whose leaves are fnarray arrays,
        NumPy arrays or Python scalars, of any dtype (bool, int8..uint64, float16, bfloat16,
        float32/64, complex64/128; complex and other dtypes safetensors lacks are stored as a
        view and restored at load).
    Returns:
      ``None``; the file at ``path`` holds the tree.
    Raises:
      ValueError: ``path`` has an extension other than ``.safetensors`` (``x.npz``, ``x.pt``: the file would be
        safetensors under another format's name, which NumPy or torch could not read); a path without an
        extension is written as safetensors.
      TypeError: a leaf that is not an array (or a traced one); a dict key that is not str/int.
      ValueError: two leaves whose dotted names collide (``{"a.b": x}`` beside ``{"a": {"b": y}}``).
      ImportError: safetensors is not installed.
      OSError: the folder is missing or not writable (the previous file is kept).
    Source: the safetensors format (header JSON + raw little-endian data), written with
    ``safetensors.serialize_file``; atomic replacement as in POSIX ``rename(2)``.
    """
    path = os.fspath(path)
    _check_extension(path)
    st = _safetensors()
    named = []
    structure = _walk(tree, "", named)
    specs, keep, info = {}, [], {}
    for name, leaf in named:
        if name in specs:
            raise ValueError(f"fa.save: two leaves are both named {name!r} (a dotted path and a key with a dot "
                             "collide, or an int key and the same number as a str key); rename a key")
        a, dname, weak = _host(leaf, name)
        if sys.byteorder == "big" and a.dtype.byteorder != "|":
            a = a.byteswap().view(a.dtype.newbyteorder("<"))
        sdt, stored, view = _stored(a, name)
        stored = _contiguous(stored)
        keep.append(stored)
        specs[name] = st.TensorSpec(dtype=sdt, shape=list(stored.shape), data_ptr=stored.ctypes.data,
                                    data_len=stored.nbytes)
        info[name] = {"dtype": dname, "weak": weak, "crc32": _crc(stored),
                      **({"view": view} if view else {})}
    metadata = {"fnarray.format": FORMAT, "fnarray.tree": json.dumps(structure),
                "fnarray.leaves": json.dumps(info)}
    placements = {name: p for name, p in ((name, _placement_record(leaf)) for name, leaf in named) if p}
    if placements:
        metadata["fnarray.shardings"] = json.dumps(placements)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"fa.save: the folder {folder!r} of {path!r} does not exist; create it first "
                                "(os.makedirs(folder, exist_ok=True))")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    os.close(fd)
    try:
        st.serialize_file(specs, tmp, metadata=metadata)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    del keep
    try:  # make the rename itself durable
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# ----------------------------------------------------------------------------- load


def _read(path):
    st = _safetensors()
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = st.deserialize(data)
    except Exception as e:  # SafetensorError and the binding's own errors
        raise CheckpointError(f"{path} is not a readable safetensors file ({len(data)} bytes): {e}. The file is "
                              "truncated or corrupted, or was not written by a safetensors writer") from None
    header_len = int.from_bytes(data[:8], "little")
    try:
        meta = json.loads(data[8:8 + header_len]).get("__metadata__") or {}
    except ValueError as e:
        raise CheckpointError(f"{path}: the safetensors header is not valid JSON ({e})") from None
    return dict(entries), meta


def _decode(path, name, entry, info):
    code = entry["dtype"]
    if code not in _FROM_CODE:
        raise CheckpointError(f"{path}: tensor {name!r} has the safetensors dtype {code}, which fnarray does not read")
    stored = np.frombuffer(entry["data"], dtype=dtypes.as_dtype(_FROM_CODE[code])).reshape(entry["shape"])
    if info is None:
        return stored, False
    if "crc32" in info and _crc(stored) != info["crc32"]:
        raise CheckpointError(f"{path}: the data of tensor {name!r} do not match its checksum: the file is "
                              "corrupted; restore it from a copy")
    dt = dtypes.as_dtype(info["dtype"])
    view = info.get("view")
    if view == "complex":
        out = _contiguous(stored).reshape(-1).view(dt).reshape(stored.shape[:-1])
    elif view == "bytes":
        out = _contiguous(stored).reshape(-1).view(dt).reshape(stored.shape[:-1])
    else:
        out = stored
    if out.dtype != dt:
        raise CheckpointError(f"{path}: tensor {name!r} is stored as {out.dtype.name} but its metadata says "
                              f"{dt.name}: the file is corrupted")
    return out, bool(info.get("weak", False))


def _crc(a: np.ndarray) -> int:
    return zlib.crc32(_contiguous(a).reshape(-1).view(np.uint8))


def _fmt(shape, dtype):
    return f"{np.dtype(dtype).name}{list(shape)}"


def load(path, like=None, device=None, strict=True, shardings=None):
    """Read a checkpoint written by ``fa.save``.

    Args:
      path: the safetensors file.
      like: optional pytree of the expected structure, whose leaves have ``.shape`` and
        ``.dtype`` (arrays, ``fa.ShapedArray``, ``jax.ShapeDtypeStruct``-like objects): the result
        takes its structure (so Modules with lambdas, custom nodes with aux data and files from other
        safetensors writers load too), and every leaf's shape and dtype must match. Each array
        is restored with its ``like`` leaf's placement, as Orbax restores into the target's
        shardings: a global array's ``NamedSharding``, a committed array's device (a leaf with
        a ``.sharding`` attribute, such as ``jax.ShapeDtypeStruct``, gives that sharding).
        Without ``like`` the structure stored in the file is rebuilt.
      device: where the arrays go: a ``Device`` or a name (committed there; it takes precedence
        over ``like``'s placements, not over ``shardings``); ``None`` puts the arrays that
        ``shardings`` and ``like`` do not place on the default device uncommitted, as arrays made
        without a device.
      shardings: where each array goes, over ``device`` and ``like``: one ``Sharding``
        (``fnarray.sharding.NamedSharding``, ``SingleDeviceSharding``), ``Device`` or device name for
        every leaf; a pytree of them with the structure of ``like`` (or of the saved tree), whose
        ``None`` leaves keep the default; or ``"saved"``: where each array was when it was saved
        (``saved_shardings``; the same devices must exist in this process).
      strict: with ``like``, ``False`` ignores the file's tensors that ``like`` has no leaf for and
        keeps ``like``'s own array for a leaf the file lacks (MLX's ``load_weights(strict=False)``:
        an MLX checkpoint holds frozen arrays, such as masks, that a port keeps as static fields).
    Returns:
      the pytree, with fnarray ``Array`` leaves bit-identical to what was saved (weak types kept).
    Raises:
      CheckpointError (a ``ValueError``): the file is truncated, corrupted (bad header, a checksum
        that does not match) or not a safetensors file; with ``like``, the first leaf (in
        ``like``'s order) whose name is missing from the file or whose shape or dtype differs, or
        a tensor of the file that ``like`` has no leaf for; without ``like``, a file with no
        fnarray structure or with a node it cannot rebuild (it says to pass ``like``); with
        ``shardings="saved"``, a saved device this process lacks.
      ValueError: a sharding that does not fit its array (a dimension its mesh axes do not divide).
      FileNotFoundError: no such file. ImportError: safetensors is not installed.
    Source: ``orbax.checkpoint``'s restore into a target's shardings (``restore_args``/``like``
    shardings); MLX's ``load_weights(strict=)``.
    """
    from fnarray.devices.placement import device_put
    path = os.fspath(path)
    entries, meta = _read(path)
    info = {}
    if "fnarray.leaves" in meta:
        try:
            info = json.loads(meta["fnarray.leaves"])
        except ValueError as e:
            raise CheckpointError(f"{path}: the fnarray metadata is not valid JSON ({e}): the file is corrupted") \
                from None
    host = {name: _decode(path, name, e, info.get(name)) for name, e in entries.items()}

    where = _placements(path, meta, shardings, like, device)

    def put(name):
        value, weak = host[name]
        arr = device_put(np.array(value), where.get(name, device))
        if weak:
            from fnarray.core import lax
            arr = lax.convert_element_type(arr, arr.dtype, weak_type=True)
        return arr

    if like is not None:
        from fnarray.core.array import Array
        named = []
        treedef = _walk_like(like, "", named)
        seen = set()
        kept = {}
        for name, leaf in named:
            if name not in host and not strict and isinstance(leaf, Array):
                kept[name] = leaf
                continue
            if name not in host:
                raise CheckpointError(f"{path}: like= has a leaf {name} ({_fmt(leaf.shape, leaf.dtype)}) that the "
                                      f"checkpoint lacks; the checkpoint has {sorted(host)[:8]}"
                                      f"{' ...' if len(host) > 8 else ''}")
            got = host[name][0]
            want_dtype = dtypes.canonicalize(leaf.dtype)
            if tuple(got.shape) != tuple(leaf.shape) or dtypes.canonicalize(got.dtype) != want_dtype:
                raise CheckpointError(f"{path}: leaf {name} is {_fmt(got.shape, got.dtype)} in the checkpoint but "
                                      f"{_fmt(leaf.shape, want_dtype)} in like=")
            seen.add(name)
        extra = [n for n in host if n not in seen]
        if extra and strict:
            raise CheckpointError(f"{path}: the checkpoint has tensor {extra[0]!r} "
                                  f"({_fmt(host[extra[0]][0].shape, host[extra[0]][0].dtype)}) that like= has no "
                                  f"leaf for ({len(extra)} such tensors)")
        return tree_util.tree_unflatten(treedef, [kept[name] if name in kept else put(name) for name, _ in named])
    if "fnarray.tree" not in meta:
        raise CheckpointError(f"{path} has no fnarray structure in its metadata (written by another safetensors "
                              f"writer?); pass like= to fa.load, or read its {len(host)} tensors with the "
                              "safetensors package")
    try:
        structure = json.loads(meta["fnarray.tree"])
    except ValueError as e:
        raise CheckpointError(f"{path}: the stored structure is not valid JSON ({e}): the file is corrupted") \
            from None
    missing = []
    _collect_names(structure, missing)
    absent = [n for n in missing if n not in host]
    if absent:
        raise CheckpointError(f"{path}: the structure names tensor {absent[0]!r}, which the file lacks: the file "
                              "is corrupted")
    return _rebuild(structure, {n: put(n) for n in missing})


def _placement_record(leaf):
    """What the metadata keeps of where ``leaf`` is: ``None`` for host values and uncommitted arrays."""
    from fnarray.core.array import Array
    if not isinstance(leaf, Array):
        return None
    from fnarray.sharding import NamedSharding
    sh = leaf.sharding
    if isinstance(sh, NamedSharding):
        mesh = sh.mesh
        spec = [list(p) if isinstance(p, tuple) else p for p in sh.spec]
        return {"mesh": {"axis_names": [str(n) for n in mesh.axis_names], "shape": list(mesh.axis_sizes),
                         "devices": [str(d) for d in mesh.devices.flat]}, "spec": spec}
    return {"device": str(leaf.device)} if getattr(leaf, "committed", False) else None


def _rebuild_placement(path, name, rec):
    """The ``Device`` or ``NamedSharding`` that ``_placement_record`` described, from this process's devices."""
    from fnarray.devices.placement import parse_device
    from fnarray.sharding import Mesh, NamedSharding, PartitionSpec
    names = rec["mesh"]["devices"] if "mesh" in rec else [rec["device"]]
    devices = []
    for d in names:
        try:
            devices.append(parse_device(d))
        except Exception as e:  # noqa: BLE001 (unknown name, missing backend: one message naming the device)
            raise CheckpointError(f"{path}: tensor {name!r} was saved on {d}, which this process lacks ({e}); "
                                  "pass shardings= or device= to fa.load to place it elsewhere") from None
    if "mesh" not in rec:
        return devices[0]
    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    mesh = Mesh(grid.reshape(rec["mesh"]["shape"]), tuple(rec["mesh"]["axis_names"]))
    spec = PartitionSpec(*(tuple(p) if isinstance(p, list) else p for p in rec["spec"]))
    return NamedSharding(mesh, spec)


def _saved_records(path, meta) -> dict:
    try:
        return json.loads(meta.get("fnarray.shardings", "{}"))
    except ValueError as e:
        raise CheckpointError(f"{path}: the saved shardings are not valid JSON ({e}): the file is corrupted") \
            from None


def saved_shardings(path) -> dict:
    """Where each array of a checkpoint was when ``fa.save`` wrote it.

    Args:
      path: a checkpoint written by ``fa.save``.
    Returns:
      ``{dotted name: NamedSharding or Device}`` for every array that was committed to a device or split
      over a mesh (arrays saved from the host or uncommitted have no entry), rebuilt from this process's
      devices: pass it back as ``fa.load(path, shardings="saved")``.
    Raises:
      CheckpointError: a saved device this process lacks (its name and how to place the array instead), or
        a corrupted file.
    Source: Orbax keeps a checkpoint's shardings beside its arrays (its ``_sharding`` metadata) for the same
    purpose.
    """
    path = os.fspath(path)
    _, meta = _read(path)
    return {name: _rebuild_placement(path, name, rec) for name, rec in _saved_records(path, meta).items()}


def _as_placement(x):
    """A ``Device``, ``NamedSharding`` or ``None`` for a ``shardings``/``like`` entry."""
    from fnarray.devices.sharding import SingleDeviceSharding
    if isinstance(x, SingleDeviceSharding):
        return next(iter(x.device_set))
    if type(x).__module__.startswith("jax"):   # a jax.sharding.Sharding (a jax.ShapeDtypeStruct's)
        from fnarray.devices.backend import get_backend
        return _as_placement(get_backend("jax").sharding_from_native(x))
    if isinstance(x, str):
        from fnarray.devices.placement import parse_device
        return parse_device(x)
    return x


def _is_placement(x) -> bool:
    from fnarray.devices.backend import Device
    from fnarray.devices.sharding import Sharding
    return x is None or isinstance(x, (Sharding, Device, str))


def _placements(path, meta, shardings, like, device) -> dict:
    """``{dotted name: Device or NamedSharding}`` for the leaves ``shardings`` or ``like`` place; others take
    ``device``."""
    out = {}
    if like is not None and device is None:
        from fnarray.core.array import Array
        named = []
        _walk_like(like, "", named)
        from fnarray.sharding import NamedSharding
        for name, leaf in named:
            if isinstance(leaf, Array):
                sh = leaf.sharding
                if isinstance(sh, NamedSharding):
                    out[name] = sh
                elif getattr(leaf, "committed", False):
                    out[name] = leaf.device
            elif getattr(leaf, "sharding", None) is not None:   # jax.ShapeDtypeStruct(..., sharding=)
                out[name] = _as_placement(leaf.sharding)
    if shardings is None:
        return out
    if isinstance(shardings, str) and shardings == "saved":
        out.update({name: _rebuild_placement(path, name, rec) for name, rec in _saved_records(path, meta).items()})
        return out
    if _is_placement(shardings):
        return _Every(_as_placement(shardings))
    pairs, _ = tree_util.tree_flatten_with_path(shardings, is_leaf=_is_placement)
    for p, sh in pairs:
        if not _is_placement(sh):
            raise TypeError(f"fa.load: shardings leaf {tree_util.keystr(p)} is a {type(sh).__name__}; expected a "
                            "Sharding, a Device, a device name or None")
        if sh is not None:
            out[_dotted(p)] = _as_placement(sh)
    return out


class _Every(dict):
    """One placement for every leaf."""

    def __init__(self, where):
        super().__init__()
        self.where = where

    def get(self, name, default=None):
        return self.where


def _collect_names(s, out):
    if isinstance(s, dict):
        if "leaf" in s:
            out.append(s["leaf"])
            return
        for k, v in s.items():
            if k in ("list", "tuple", "children"):
                for c in v:
                    _collect_names(c, out)
            elif k in ("dict", "fields"):
                for _, c in v:
                    _collect_names(c, out)


def _walk_like(like, prefix, out):
    """``(name, leaf)`` of ``like`` in its flatten order, named as ``save`` names them."""
    from fnarray.core.shaped import ShapedArray
    pairs, treedef = tree_util.tree_flatten_with_path(like, is_leaf=lambda x: isinstance(x, ShapedArray))
    for path, leaf in pairs:
        if isinstance(leaf, (bool, int, float, complex)):
            leaf = ShapedArray((), *dtypes.dtype_of_scalar(leaf))
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(f"fa.load: like= leaf {tree_util.keystr(path)} is a {type(leaf).__name__}; its leaves "
                            "must have .shape and .dtype (arrays or ShapedArray)")
        out.append((_dotted(path), leaf))
    return treedef


def _dotted(path) -> str:
    if not path:
        return "_root"
    parts = []
    for k in path:
        for attr in ("key", "idx", "name"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return ".".join(parts)

