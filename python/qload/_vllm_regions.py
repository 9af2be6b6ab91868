"""Which part of each checkpoint tensor a vLLM rank keeps, asked of the model's own code.

Under tensor parallelism vLLM's weight loaders take the whole stored tensor and narrow it to
their rank's rows or columns (vocabulary padding, kv-head replication, fused q/k/v and
gate/up, quantized packing included). Rather than restate those rules, `predict` runs the
model's own `load_weights` once on meta stand-ins that record what is done to them: a tensor
whose only operation is one `narrow` (or a plain slice) is read in part, every other tensor
whole. Views that are the whole tensor under another shape (`unsqueeze(0)`, then `unbind()`, as
vLLM's expert loader does with each expert's weight) are seen through. Nothing is written to the
model in that dry run: copies into parameters, and any other write into its memory, are skipped.

In the real load, `stand_in` hands the model a meta tensor of the stored shape holding the
region qload read; its one `narrow` returns those bytes, and any operation the dry run did not
predict raises instead of reading data that is not there.

The same dry run shows where those bytes end up (`predict_destinations`): a tensor whose part (or
whole) goes, untouched, through exactly one `copy_` into a piece of a parameter of its shape
whose rows are contiguous (the rows may be apart: a column-parallel part of a fused quantized
parameter) can be read by qload straight into that piece, the copy the weight loader then does
being of that memory onto itself. Everything else the loader does to it (a second copy,
arithmetic, a transpose, a `fill_`), a target of another layout or kind of dtype, and any other
write into the same memory (another tensor's, or the loader's own, such as zeroing a parameter
before its part is copied in) leave it to the copy the loader makes.
"""
from __future__ import annotations

import logging
from typing import Iterable, Optional

import torch

from ._load_into import row_elements

log = logging.getLogger("qload.vllm")

_WRITES = {"copy_", "__setitem__", "__set__", "set_"}


def _writes(fname: str) -> bool:
    """An in-place operation (`copy_`, `fill_`, `x[...] = y`, `p.data = y`)."""
    return fname in _WRITES or (fname.endswith("_") and not fname.endswith("__"))


def _flat(values) -> Iterable:
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _whole_view(o, source: torch.Tensor, shape) -> bool:
    """Whether `o` (a meta tensor an operation on `source` returned) is a view of the whole
    stored tensor (of `shape`) as it is, with unit dims added or dropped: the same storage, the
    same elements in the same order."""
    return (isinstance(o, torch.Tensor) and o.dtype == source.dtype and o.storage_offset() == 0
            and o.untyped_storage()._cdata == source.untyped_storage()._cdata and o.is_contiguous()
            and [d for d in o.shape if d != 1] == [d for d in shape if d != 1])


def _outputs(out) -> list:
    return [o for o in _flat([out]) if isinstance(o, torch.Tensor)]


def _region_of(func, args, kwargs, shape) -> Optional[tuple]:
    """(dim, begin, end) when `func(args)` is a narrow or a plain slice of dim 0 or 1."""
    name = getattr(func, "__name__", "")
    if name == "narrow":
        params = list(args[1:]) + [kwargs.get(k) for k in ("dim", "start", "length") if k in kwargs]
        if len(params) != 3 or not all(isinstance(p, int) and not isinstance(p, bool) for p in params):
            return None
        dim, start, length = params
        dim = dim + len(shape) if dim < 0 else dim
        if not 0 <= dim < len(shape):
            return None
        return dim, start, start + length
    if name == "__getitem__" and len(args) == 2:
        key = args[1] if isinstance(args[1], tuple) else (args[1],)
        if not 1 <= len(key) <= 2 or not all(isinstance(k, slice) for k in key):
            return None
        if len(key) == 2 and key[0] != slice(None):
            return None
        dim = len(key) - 1
        s = key[dim]
        if dim >= len(shape) or s.step not in (None, 1):
            return None
        if not all(v is None or (isinstance(v, int) and v >= 0) for v in (s.start, s.stop)):
            return None
        begin, end = s.start or 0, min(shape[dim], shape[dim] if s.stop is None else s.stop)
        return dim, begin, end
    return None


def _real(t) -> bool:
    """A tensor with memory: the model's, not a probe's."""
    return isinstance(t, torch.Tensor) and not isinstance(t, _Probe) and t.device.type != "meta"


class _Record(dict):
    """What the dry run saw: name -> the operations on that stored tensor itself (predict's
    answer), plus what became of the parts of it that were cut (`uses`) and every write into the
    model (`writes`), which tell where its bytes can be read to."""

    def __init__(self):
        super().__init__()
        self.uses: dict = {}  # name -> [(target, region or None: the whole) of a plain copy, or None]
        self.writes: list = []  # (name, or None for a write of no checkpoint tensor, real tensor written)

    def wrote(self, probe: "_Probe", fname: str, args, kwargs, target: torch.Tensor, probes: list) -> None:
        """`probe` went into `target` (a real tensor): through a plain `copy_` of the whole
        stored tensor or of its one cut, or some other way."""
        self.writes.append((probe._qload_name, target))
        src = args[1] if len(args) > 1 else kwargs.get("src")
        plain = fname == "copy_" and src is probe and len(probes) == 1
        if plain and probe._qload_root and probe._qload_shape == probe._qload_stored:
            use = (target, None)
        elif plain and probe._qload_cut is not None:
            use = (target, probe._qload_cut)
        else:
            use = None
        self.uses.setdefault(probe._qload_name, []).append(use)


class _Probe(torch.Tensor):
    """A checkpoint tensor in the dry run: meta, of its stored shape and dtype."""

    @staticmethod
    def make(name: str, shape, dtype: torch.dtype, record: dict, root: bool = True) -> "_Probe":
        t = torch.empty(shape, dtype=dtype, device="meta").as_subclass(_Probe)
        t._qload_name, t._qload_record, t._qload_root, t._qload_cut = name, record, root, None
        t._qload_shape = t._qload_stored = tuple(shape)
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        probes = list({id(a): a for a in _flat(list(args) + list(kwargs.values())) if isinstance(a, _Probe)}.values())
        target = args[0] if args else None
        fname = getattr(func, "__name__", "")
        roots = [p for p in probes if p._qload_root]
        if _writes(fname) and isinstance(target, torch.Tensor) and not isinstance(target, _Probe):
            for p in roots:  # copied as it is: used whole
                p._qload_record.setdefault(p._qload_name, []).append(None)
            if target.device.type != "meta":
                for p in probes:
                    p._qload_record.wrote(p, fname, args, kwargs, target, probes)
            return None if fname in ("__setitem__", "__set__") else target  # a parameter: left as it is
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
            tensors = _outputs(out)
            if not tensors:
                return out  # shape, dtype, dim(), ...: what the real load will see too
            # The whole stored tensor under another shape: the same tensor, nothing recorded.
            whole = isinstance(target, _Probe) and target._qload_root and \
                all(_whole_view(o, target, target._qload_stored) for o in tensors)
        first, cut = (target if whole else probes[0]), None
        if not whole:
            for p in roots:
                ops = p._qload_record.setdefault(p._qload_name, [])
                as_stored = target is p and p._qload_shape == p._qload_stored
                ops.append(_region_of(func, args, kwargs, p._qload_shape) if as_stored else None)
                cut = ops[-1] if as_stored and len(tensors) == 1 else cut
            for p in probes:  # a cut (or a transform) used for anything but a copy: not a plain copy
                if not p._qload_root:
                    p._qload_record.uses.setdefault(p._qload_name, []).append(None)

        def wrap(o):
            if isinstance(o, torch.Tensor) and not isinstance(o, _Probe) and o.device.type == "meta":
                w = o.as_subclass(_Probe)
                w._qload_name, w._qload_record, w._qload_root = first._qload_name, first._qload_record, whole
                w._qload_shape, w._qload_stored, w._qload_cut = tuple(o.shape), first._qload_stored, cut
                return w
            return o

        return tuple(wrap(o) for o in out) if isinstance(out, tuple) else wrap(out)


class _Writes(torch.overrides.TorchFunctionMode):
    """Sees the dry run's writes that take no checkpoint tensor (a parameter zeroed, or its
    padding filled): memory that is written to is no place to read a tensor straight into.
    Those into the model's own memory (`storages`) are skipped, as the probes' copies are; those
    the probes take part in, `_Probe` records."""

    def __init__(self, record: _Record, storages: set):
        super().__init__()
        self.record, self.storages = record, storages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not any(isinstance(v, _Probe) for v in _flat(list(args) + list(kwargs.values()))):
            for out in _flat([kwargs.get("out")]):
                if _real(out):
                    self.record.writes.append((None, out))
            fname = getattr(func, "__name__", "")
            if _writes(fname) and args and _real(args[0]):
                self.record.writes.append((None, args[0]))
                if args[0].untyped_storage().data_ptr() in self.storages:
                    return None if fname in ("__setitem__", "__set__") else args[0]
        return func(*args, **kwargs)


def _model_state(model: torch.nn.Module) -> dict:
    return {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}


def _restore(model: torch.nn.Module, before: dict) -> bool:
    """Puts back any parameter or buffer the dry run replaced; True when there was one."""
    after = _model_state(model)
    changed = [name for name, value in before.items() if after.get(name) is not value]
    for name in changed:
        owner, _, leaf = name.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        if isinstance(before[name], torch.nn.Parameter):
            module._parameters[leaf] = before[name]
        else:
            module._buffers[leaf] = before[name]
    return bool(changed)


def _dry_run(model: torch.nn.Module, tensors: dict) -> Optional[_Record]:
    """`model.load_weights` on probes of `tensors`; None when it fails or replaces parameters."""
    record = _Record()
    before = _model_state(model)
    storages = {t.untyped_storage().data_ptr() for t in before.values() if _real(t) and t.numel() > 0}
    try:
        with torch.no_grad(), _Writes(record, storages):
            model.load_weights((name, _Probe.make(name, shape, dtype, record))
                               for name, (shape, dtype) in tensors.items())
    except Exception as e:  # the model did something meta tensors cannot do: read everything
        log.info("qload: reading whole tensors: could not tell which part of each this rank keeps (%s: %s)",
                 type(e).__name__, e)
        return None
    finally:
        replaced = _restore(model, before)
    if replaced:
        log.info("qload: reading whole tensors: the model's load_weights replaces parameters")
        return None
    return record


def predict(model: torch.nn.Module, tensors: dict) -> dict:
    """What `model.load_weights` uses of each stored tensor (`tensors`: name -> (shape, torch
    dtype)): {name: (dim, begin, end)} for a tensor it only narrows to a part (begin == end:
    none of it), {name: None} for one it never touches (another pipeline stage's, another
    rank's experts), nothing for one it uses whole; {} when the dry run fails."""
    record = _dry_run(model, tensors)
    return _regions(record, tensors) if record is not None else {}


def predict_destinations(model: torch.nn.Module, tensors: dict, convert: bool = True) -> tuple:
    """(regions, destinations) from one dry run: `predict`'s regions, and {name: (target,
    region or None for the whole)} for each tensor (or region) whose only use is one plain copy
    into `target`, a view of a parameter that qload can read it straight into; ({}, {}) when the
    dry run fails. `convert`: whether a float tensor may go into a parameter of another float
    dtype (qload converts among F16, BF16 and F32 as it reads, quantized weights' scales too)."""
    record = _dry_run(model, tensors)
    if record is None:
        return {}, {}
    regions = _regions(record, tensors)
    try:
        return regions, _destinations(record, tensors, regions, convert)
    except Exception as e:  # a target whose memory cannot be told (not a plain tensor): stream all
        log.info("qload: streaming every tensor: could not tell where they go (%s: %s)", type(e).__name__, e)
        return regions, {}


def _regions(record: _Record, tensors: dict) -> dict:
    regions = {}
    for name, (shape, _) in tensors.items():
        ops = record.get(name)
        if ops is None:
            if len(shape) >= 1:
                regions[name] = None
            continue
        if len(ops) != 1 or ops[0] is None:
            continue  # used whole, in several parts, or transformed before being cut
        dim, begin, end = ops[0]
        if begin <= end <= shape[dim] and end - begin < shape[dim] and (dim == 0 or len(shape) == 2):
            regions[name] = (dim, begin, end)
    return regions


_FLOATS = (torch.float16, torch.bfloat16, torch.float32)  # qload converts among these as it reads


def _destinations(record: _Record, tensors: dict, regions: dict, convert: bool) -> dict:
    """The tensors whose bytes can be read straight into the one target their copy went to."""
    candidates = {}
    for name, (shape, dtype) in tensors.items():
        uses = record.uses.get(name, [])
        if len(shape) == 0 or len(uses) != 1 or uses[0] is None:
            continue  # a scalar (no region leaves it out of the stream), or not one plain copy
        # The whole tensor (a cut of all of it, at tensor parallel size 1, is seen as the whole)
        # and nothing else done to it, or its one cut: the region predict reads.
        target, region = uses[0]
        ok = record.get(name) == [region] and \
            (name not in regions if region is None else regions.get(name) == region)
        part = list(shape)
        if region is not None:
            part[region[0]] = region[2] - region[1]
        if ok and _fits(target, part, dtype, convert):
            candidates[name] = (target, region)
    overlapping = _overlapping(record.writes)
    return {name: d for name, d in candidates.items() if name not in overlapping}


def _fits(target: torch.Tensor, shape: list, dtype: torch.dtype, convert: bool) -> bool:
    """Whether qload can read a part of `shape` and stored `dtype` into `target` as it is: its
    rows contiguous (the rows themselves may be apart, as a part's columns of a fused parameter)."""
    same_kind = target.dtype == dtype or (convert and target.dtype in _FLOATS and dtype in _FLOATS)
    return (same_kind and _rows(target) is not None and list(target.shape) == shape and target.numel() > 0
            and target.device.type in ("cpu", "cuda"))


def _rows(t: torch.Tensor) -> Optional[tuple]:
    """(first byte, bytes of a row, bytes from row to row, rows) of a tensor whose dim-0 rows are
    each contiguous and row-major, the whole tensor one row when it is contiguous; None for any
    other layout (a transpose, a negative stride)."""
    if t.is_contiguous() or t.dim() == 0:
        nbytes = t.numel() * t.element_size()
        return t.data_ptr(), nbytes, max(nbytes, 1), 1
    compact = row_elements(list(t.shape), list(t.stride()))
    if compact is None or t.stride(0) < compact:
        return None
    return t.data_ptr(), compact * t.element_size(), t.stride(0) * t.element_size(), t.shape[0]


def _span(t: torch.Tensor) -> tuple:
    """(device, first byte, end) of the memory `t` covers."""
    low = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s < 0)
    high = sum((n - 1) * s for n, s in zip(t.shape, t.stride()) if s > 0)
    start = t.data_ptr() + low * t.element_size()
    return str(t.device), start, start + (high - low + 1) * t.element_size()


def _share_a_byte(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two writes whose spans meet touch a common byte: exact for tensors whose rows are
    each contiguous (a fused parameter's column parts interleave without sharing one), assumed
    for any other layout."""
    ra, rb = _rows(a), _rows(b)
    if ra is None or rb is None:
        return True
    few, many = (ra, rb) if ra[3] <= rb[3] else (rb, ra)
    start, width, pitch, rows = many
    for r in range(few[3]):
        begin = few[0] + r * few[2]
        end = begin + few[1]
        # the first of `many`'s rows ending after `begin`, and whether it starts before `end`
        first = 0 if begin < start + width else (begin - start - width) // pitch + 1
        if first < rows and start + first * pitch < end:
            return True
    return False


def _overlapping(writes: list) -> set:
    """Names whose written memory overlaps any other write's (by any tensor, or by none)."""
    spans = sorted((_span(t) + (name, t) for name, t in writes if t.numel() > 0), key=lambda s: s[:2])
    marked: set = set()
    active: list = []  # earlier spans on the same device reaching past the current start
    for device, start, end, name, t in spans:
        active = [s for s in active if s[0] == device and s[2] > start]
        for other in active:
            if _share_a_byte(other[4], t):
                marked.update((name, other[3]))
        active.append((device, start, end, name, t))
    return marked


def qload_regions(regions: dict) -> dict:
    """predict's answer as `qload.stream`'s regions=: an unused tensor is an empty region."""
    return {name: region if region is not None else (0, 0, 0) for name, region in regions.items()}


class _Region(torch.Tensor):
    """A stored tensor of which only `region` was read: meta, of the stored shape."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        this = args[0] if args and isinstance(args[0], _Region) else None
        if this is not None and this._qload_region is not None and this._qload_shape == this._qload_stored and \
                _region_of(func, args, kwargs, this._qload_shape) == this._qload_region:
            return this._qload_data
        fname = getattr(func, "__name__", "")
        if not _writes(fname):
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
                tensors = _outputs(out)
                whole = this is not None and bool(tensors) and \
                    all(_whole_view(o, this, this._qload_stored) for o in tensors)
            if not tensors:
                return out
            if whole:  # the same stored tensor under another shape, as the dry run saw it
                def alias(o):
                    if not isinstance(o, torch.Tensor):
                        return o
                    a = o.as_subclass(_Region)
                    a._qload_name, a._qload_data, a._qload_region = this._qload_name, this._qload_data, this._qload_region
                    a._qload_shape, a._qload_stored = tuple(o.shape), this._qload_stored
                    return a

                return tuple(alias(o) for o in out) if isinstance(out, tuple) else alias(out)
        region = next(a for a in _flat(list(args) + list(kwargs.values())) if isinstance(a, _Region))
        predicted = "did not use it" if region._qload_region is None else \
            f"cut {region._qload_region} (dim, begin, end), the only part read"
        raise RuntimeError(
            f"qload: {region._qload_name}: the model's weight loader did {fname} where a dry run of it "
            f"{predicted}. Load with --model-loader-extra-config '{{\"qload_regions\": false}}' and report this.")


def stand_in(name: str, data: Optional[torch.Tensor], shape, dtype: torch.dtype,
             region: Optional[tuple]) -> torch.Tensor:
    """`data` (the region qload read) as a tensor of the stored `shape`, for the weight loader;
    region None: a tensor the dry run did not use, of which nothing was read."""
    t = torch.empty(shape, dtype=dtype, device="meta").as_subclass(_Region)
    t._qload_name, t._qload_data, t._qload_region = name, data, region
    t._qload_shape = t._qload_stored = tuple(shape)
    return t


_TORCH_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                 "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "U16": "uint16", "U32": "uint32",
                 "U64": "uint64", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
                 "F8_E8M0": "float8_e8m0fnu"}


def stored_tensors(inspected: dict) -> Optional[dict]:
    """name -> (shape, torch dtype) from `qload.inspect`; None when a dtype has no torch type."""
    out = {}
    for t in inspected["tensors"]:
        dtype = getattr(torch, _TORCH_DTYPES.get(t["dtype"], ""), None)
        if dtype is None:
            return None
        out[t["name"]] = (tuple(t["shape"]), dtype)
    return out
