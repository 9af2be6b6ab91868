"""qload.load_into: a checkpoint read straight into tensors the caller already owns.

Each destination is described to the native module by its address, size, dtype, shape and
device; the tensors themselves stay referenced here until the load returns, so their memory
cannot go away under it. Nothing is copied through qload's own buffers: host destinations get
the file's bytes read into them, GPU destinations get host-to-device copies from the pinned
staging pool straight into them.
"""
from __future__ import annotations

from typing import Callable, Mapping, Optional

# torch dtype name (str(torch.dtype) without "torch.") / numpy dtype name -> qload's spelling
_TORCH_DTYPES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "int32": "I32",
    "uint32": "U32", "int64": "I64", "uint64": "U64", "float16": "F16", "bfloat16": "BF16", "float32": "F32",
    "float64": "F64", "complex64": "C64", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "float8_e8m0fnu": "F8_E8M0", "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
}
_NUMPY_DTYPES = dict(_TORCH_DTYPES)  # numpy's names agree (ml_dtypes gives bfloat16 and the fp8 family)


def row_elements(shape, strides) -> Optional[int]:
    """Elements of one dim-0 row when each row is contiguous and row-major (dimension 0's stride
    may be anything: rows further apart than their length, a view of some columns of a larger
    tensor), None for any other layout. `strides` in elements."""
    compact = 1
    for size, stride in zip(reversed(shape[1:]), reversed(strides[1:])):
        if size != 1 and stride != compact:
            return None
        compact *= size
    return compact


def _row_pitch(name, shape, strides, itemsize) -> int:
    """Bytes from one row of dim 0 to the next when each row is contiguous and row-major but the
    rows are further apart (a view of some columns of a larger tensor: a projection's part of a
    fused parameter), 0 when the whole is contiguous; ValueError for any other layout. `strides`
    in elements."""
    compact = row_elements(shape, strides)
    if compact is None:
        raise ValueError(f"destination {name!r} is not contiguous within its rows: qload writes row-major "
                         "rows (only dimension 0 may be strided)")
    if not shape or shape[0] <= 1 or strides[0] == compact:
        return 0
    if strides[0] < 0:
        raise ValueError(f"destination {name!r} has its rows in reverse order (a negative stride): give a "
                         "row-major view")
    if strides[0] < compact:
        raise ValueError(f"destination {name!r} has rows {strides[0]} elements apart but {compact} long: "
                         "they overlap")
    return strides[0] * itemsize


def _describe_torch(name, t, region, rows):
    if t.device.type == "meta":
        raise ValueError(f"destination {name!r} is a meta tensor (no memory): allocate it first "
                         "(module.to_empty(device=...))")
    pitch = 0 if t.is_contiguous() else _row_pitch(name, list(t.shape), list(t.stride()), t.element_size())
    dtype = _TORCH_DTYPES.get(str(t.dtype).removeprefix("torch."))
    if dtype is None:
        raise TypeError(f"destination {name!r} has dtype {t.dtype}, which qload does not load into")
    device = "cpu" if t.device.type == "cpu" else f"{t.device.type}:{t.device.index or 0}"
    nbytes = t.numel() * t.element_size()
    return (name, t.data_ptr(), nbytes, dtype, list(t.shape), device, region, rows, pitch)


def _describe_numpy(name, a, region, rows):
    if not a.flags.writeable:
        raise ValueError(f"destination {name!r} is a read-only array: qload writes into it")
    pitch = 0
    if not a.flags.c_contiguous:
        if any(s % a.itemsize for s in a.strides):
            raise ValueError(f"destination {name!r} has strides that are not whole elements")
        pitch = _row_pitch(name, list(a.shape), [s // a.itemsize for s in a.strides], a.itemsize)
    dtype = _NUMPY_DTYPES.get(a.dtype.name)
    if dtype is None:
        raise TypeError(f"destination {name!r} has dtype {a.dtype}, which qload does not load into")
    return (name, a.ctypes.data, a.nbytes, dtype, list(a.shape), "cpu", region, rows, pitch)


def _describe(name, target, region, rows):
    """(name, address, nbytes, dtype, shape, device, region, rows, row pitch) of one destination."""
    kind = type(target).__module__.split(".")[0]
    if kind == "torch":
        return _describe_torch(name, target.detach(), region, rows)
    if kind == "numpy":
        return _describe_numpy(name, target, region, rows)
    if hasattr(target, "__dlpack__"):  # cupy, jax...: seen through torch, which keeps the same memory
        import torch

        return _describe_torch(name, torch.from_dlpack(target), region, rows)
    raise TypeError(f"destination {name!r} is a {type(target).__name__}: give a torch tensor, a numpy array, "
                    "or anything with __dlpack__")


def _part(name, part):
    """A destination's part of the stored tensor: ((dim, begin, end), None) for a region, (None,
    [(begin, end), ...]) for rows in the caller's order."""
    if part is None:
        return None, []
    if isinstance(part, list):
        # Checked in bulk (a RoPE row permutation gives tens of thousands of ranges): each a
        # (begin, end) tuple or list of non-negative ints, bools excluded.
        bad = TypeError(f"the rows of destination {name!r} must be a list of (begin, end) ranges, not {part!r}")
        if not set(map(type, part)) <= {tuple, list} or not set(map(len, part)) <= {2}:
            raise bad
        ranges = [(begin, end) for begin, end in part]
        values = [v for r in ranges for v in r]
        if not set(map(type, values)) <= {int} or min(values, default=0) < 0:
            raise bad
        return None, ranges
    return _region(name, part), []


def _region(name, region):
    if region is None:
        return None
    if (not isinstance(region, (tuple, list)) or len(region) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in region)):
        raise TypeError(f"the region of destination {name!r} must be (dim, begin, end) ints, not {region!r}")
    dim, begin, end = region
    if dim < 0 or begin < 0 or end < begin:
        raise ValueError(f"the region of destination {name!r} is {tuple(region)}: expected dim >= 0 and "
                         "0 <= begin <= end")
    return (dim, begin, end)


def _storage_key(t):
    """Tensors with the same key share their memory (tied weights)."""
    if t.device.type == "meta" or t.numel() == 0:
        return id(t)
    return (str(t.device), t.data_ptr())


def module_destinations(module, checkpoint_names, name_map: Optional[Callable[[str], Optional[str]]] = None):
    """A torch module's parameters and persistent buffers by checkpoint name.

    Tensors sharing memory (tied embeddings) are given once, under the first name the checkpoint
    has. `name_map` turns a module name into the checkpoint's (None: that tensor is not loaded).
    Returns (destinations, missing): missing lists the module's tensors the checkpoint lacks.
    """
    entries = [(name, t, name_map(name) if name_map is not None else name)
               for name, t in module.state_dict(keep_vars=True).items()]
    destinations, loaded = {}, set()
    for _, tensor, stored in entries:
        if stored is None or stored not in checkpoint_names or _storage_key(tensor) in loaded:
            continue
        loaded.add(_storage_key(tensor))
        destinations[stored] = tensor
    missing = [name for name, tensor, stored in entries if stored is not None and _storage_key(tensor) not in loaded]
    return destinations, missing


def describe(destinations: Mapping[str, object]) -> list:
    """The native description of {name: tensor, (tensor, (dim, begin, end)) or (tensor, [(begin, end), ...])}."""
    out = []
    for name, target in destinations.items():
        if not isinstance(name, str):
            raise TypeError(f"destination names must be str, not {type(name).__name__}")
        part = None
        if isinstance(target, tuple):
            if len(target) != 2:
                raise TypeError(f"destination {name!r} must be a tensor, (tensor, (dim, begin, end)) or "
                                "(tensor, [(begin, end), ...])")
            target, part = target
        region, rows = _part(name, part)
        out.append(_describe(name, target, region, rows))
    return out
