"""qload: a fast loader for deep-learning checkpoints, quantized or not.

    import qload
    weights = qload.load("model/")                           # dict[str, torch.Tensor]
    weights = qload.load("Qwen/Qwen2-0.5B")                  # from the Hugging Face cache
    weights = qload.load("model/", framework="np")           # dict[str, numpy.ndarray]
    for name, tensor in qload.stream("model/"): ...          # completion order
    with qload.safe_open("model.safetensors", framework="np") as f:   # like safetensors'
        x = f.get_tensor("lm_head.weight")

Wherever a source is taken, a Hugging Face model id ("org/name" or "org/name@revision") that
is not a path is read from its snapshot in the local Hugging Face cache, offline, as
huggingface_hub finds it (`qload.resolve` says where).

Tensors from `load` point into qload's memory (no copy); that memory lives until the last of
them is gone. Errors are `qload.Error` subclasses carrying `file`, `tensor` and `offset`.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Callable, Iterator, Mapping, Optional, Union

from . import _qload
from ._dtypes import convert as _convert
from ._qload import (  # noqa: F401  (re-exported)
    CancelledError,
    ChecksumMismatchError,
    CorruptError,
    DeviceError,
    Error,
    FileChangedError,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    OutOfMemoryError,
    OverflowError,
    PermissionDeniedError,
    TruncatedError,
    UnsupportedError,
)
from ._safe_open import safe_open  # noqa: F401

__all__ = ["load", "load_into", "stream", "safe_open", "Model", "Stream", "inspect", "resolve",
           "check_settings", "Error"]
__version__ = "0.1.0"

PathLike = Union[str, "os.PathLike[str]"]
Progress = Union[None, bool, Callable[[int, int], None]]


def _text(value, name: str, allowed: Optional[set] = None) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if allowed is not None and value not in allowed:
        raise ValueError(f"{name} must be one of {sorted(allowed)}, not {value!r}")
    return value


def _count(value, name: str) -> int:
    if value is None:
        return 0
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= 65536:
        raise ValueError(f"{name} = {value}: expected 1 to 65536")
    return value


def _setting_pairs(settings) -> list:
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a mapping of setting names to values, not {type(settings).__name__}")
    pairs = []
    for key, value in settings.items():
        if not isinstance(key, str):
            raise TypeError(f"settings keys must be str, not {type(key).__name__}")
        if isinstance(value, bool):
            value = "on" if value else "off"
        pairs.append((key, str(value)))
    return pairs


def check_settings(settings: Mapping[str, object]) -> None:
    """Checks `settings` as a load would (names, types, bounds; docs/settings.md) without loading:
    qload.InvalidArgumentError (with a did-you-mean for a misspelt name) or qload.OverflowError for a bad one.
    For a client that takes settings long before it loads (the vLLM plugin checks its own when
    vLLM constructs the loader)."""
    _qload.check_settings(_setting_pairs(settings))


def _args(source, recipe, device, dtype, dequantize, quantize, lock, settings, world=None,
          parallel=(None, None, None, False), regions=None, placement=None, repack=False) -> "_qload.LoadArgs":
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a path (str or os.PathLike), not {type(source).__name__}")
    if recipe is not None and not isinstance(recipe, (str, os.PathLike)):
        raise TypeError(f"recipe must be a path to a .lua recipe, not {type(recipe).__name__}")
    args = _qload.LoadArgs()
    args.source = os.fspath(source)
    args.recipe = os.fspath(recipe) if recipe is not None else ""
    args.device = _text(device, "device")
    args.placement = _text(placement, "placement", {"round-robin", "by-layer"})
    if not isinstance(repack, bool):
        raise TypeError(f"repack must be a bool, not {type(repack).__name__}")
    args.repack = repack
    args.dtype = _text(dtype, "dtype", {"bf16", "f16", "f32"})
    args.dequantize = _text(dequantize, "dequantize", {"bf16", "f16", "f32"})
    args.quantize = _text(quantize, "quantize")
    args.lock = os.fspath(lock) if lock is not None else ""
    args.settings = _setting_pairs(settings)
    args.world = _world(world)
    tp, pp, dp, share_reads = parallel
    args.tensor_parallel = _count(tp, "tensor_parallel")
    args.pipeline_parallel = _count(pp, "pipeline_parallel")
    args.data_parallel = _count(dp, "data_parallel")
    if not isinstance(share_reads, bool):
        raise TypeError(f"share_reads must be a bool, not {type(share_reads).__name__}")
    args.share_reads = share_reads
    args.regions = _regions(regions)
    return args


def _regions(regions) -> list:
    """regions= as (name, dim, begin, end) tuples."""
    if regions is None:
        return []
    if not isinstance(regions, Mapping):
        raise TypeError(f"regions must map tensor names to (dim, begin, end), not {type(regions).__name__}")
    out = []
    for name, region in regions.items():
        if not isinstance(name, str):
            raise TypeError(f"regions keys must be tensor names (str), not {type(name).__name__}")
        if (not isinstance(region, (tuple, list)) or len(region) != 3
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in region)):
            raise TypeError(f"regions[{name!r}] must be (dim, begin, end) ints, not {region!r}")
        dim, begin, end = region
        if dim < 0 or begin < 0 or end < begin:
            raise ValueError(f"regions[{name!r}] = {tuple(region)}: expected dim >= 0 and 0 <= begin <= end")
        out.append((name, dim, begin, end))
    return out


_WORLD_KEYS = ("rank", "world_size", "local_rank", "local_world_size", "master_addr", "master_port", "token")


def _world(world) -> "Optional[_qload.World]":
    """world= as the native World: torchrun's names in lower case; None for one process."""
    if world is None:
        return None
    if not isinstance(world, Mapping):
        raise TypeError(f"world must be a mapping ({', '.join(_WORLD_KEYS)}), not {type(world).__name__}")
    unknown = sorted(str(key) for key in world if key not in _WORLD_KEYS)
    if unknown:
        raise ValueError(f"world: unknown key(s) {', '.join(unknown)}; known: {', '.join(_WORLD_KEYS)}")
    for key in ("rank", "world_size"):
        if key not in world:
            raise ValueError(f"world needs {key!r}")
    for key in ("rank", "world_size", "local_rank", "local_world_size", "master_port"):
        if key in world:
            value = world[key]
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"world[{key!r}] must be an int, not {type(value).__name__}")
            if value < 0 or value > 2**31:
                raise ValueError(f"world[{key!r}] = {value} is out of range")
    for key in ("master_addr", "token"):
        if key in world and not isinstance(world[key], str):
            raise TypeError(f"world[{key!r}] must be a str, not {type(world[key]).__name__}")
    if not 1 <= world.get("master_port", 29500) <= 65535:
        raise ValueError(f"world['master_port'] = {world['master_port']} is not a TCP port")
    if world["world_size"] == 1 and world["rank"] == 0:
        return None
    w = _qload.World()
    w.rank = world["rank"]
    w.size = world["world_size"]
    w.local_size = world.get("local_world_size", world["world_size"])
    w.local_rank = world.get("local_rank", world["rank"] % max(w.local_size, 1))
    w.master_addr = world.get("master_addr", "")  # unset: as every client's world (complete_world)
    w.master_port = world.get("master_port", 29500)
    w.token = world.get("token", "")
    w.runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    return w  # the native side checks the rest (rank < world_size, a token across nodes, ...)


def _framework(framework: str) -> str:
    if framework not in ("np", "numpy", "pt", "torch"):
        raise ValueError(f"framework must be 'np' or 'pt', not {framework!r}")
    if framework in ("np", "numpy"):
        return "np"
    try:  # before anything is read, not after
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError("framework='pt' (the default) returns torch tensors and torch is not installed: "
                          "pip install torch, or pass framework='np' for numpy arrays") from e
    return "pt"


def _check_host_framework(framework: str, device: str) -> None:
    """numpy holds host memory only: say so before loading, not after."""
    if framework == "np" and "cuda" in device:
        raise ValueError(f"framework='np' holds host memory only; device {device!r} needs framework='pt'")


class _Bar:
    """A one-line progress bar on a terminal; nothing elsewhere."""

    def __init__(self, source: str):
        self.source = os.path.basename(os.path.normpath(source))
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if total <= 0:
            return
        width = 30
        filled = width * done // total
        sys.stderr.write(f"\rqload {self.source} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done / 1e9:.2f}/{total / 1e9:.2f} GB")
        self.shown = True
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _progress_callback(progress: Progress, source: str):
    if progress is False:
        return None
    if progress is None or progress is True:
        return _Bar(source) if (progress is True or sys.stderr.isatty()) else None
    if not callable(progress):
        raise TypeError("progress must be None, a bool or a callable(done_bytes, total_bytes)")
    return progress


class Model(dict):
    """The loaded tensors by name (a dict), plus `report` and `quantized`.

    `quantized` lists the weights kept packed (scheme, bits, group size, rows, cols and the
    names of their parts), for servers that run their own kernels on them.
    """

    report: dict
    quantized: list


def load(source: PathLike, *, device: str = "cpu", framework: str = "pt", recipe: Optional[PathLike] = None,
         dtype: Optional[str] = None, dequantize: Optional[str] = None, quantize: Optional[str] = None,
         lock: Optional[PathLike] = None, settings: Optional[Mapping[str, object]] = None,
         progress: Progress = None, tensor_parallel: Optional[int] = None, pipeline_parallel: Optional[int] = None,
         data_parallel: Optional[int] = None, share_reads: bool = False,
         world: Optional[Mapping[str, object]] = None,
         regions: Optional[Mapping[str, tuple]] = None, placement: Optional[str] = None,
         repack: bool = False) -> Model:
    """Loads a checkpoint (a .safetensors file, a directory, an index json, a Hugging Face model id
    in the local cache, or a .lua recipe).

    device: "cpu", "cuda:N" or a comma-separated list; framework: "pt" (torch) or "np" (numpy);
    recipe: a .lua recipe applied to the checkpoint `source` (devices, dtype, quant rules,
    layout, settings; the recipe's own `source`, if any, is not used);
    dtype / dequantize: "bf16", "f16" or "f32"; quantize: "fp8[:per-tensor|per-channel|block]"
    or "int8"; lock: a lockfile the load must match; settings: qload's settings by name
    (`qload config` lists them); progress: None (a bar on a terminal), False, True, or a
    callable(done_bytes, total_bytes); tensor_parallel / pipeline_parallel / data_parallel: a
    parallel layout over `device`'s devices, or over the processes of a world (docs/parallel.md),
    with share_reads: each tensor read by one of the processes holding it; world: this
    process's place in a load by several processes, for a server that knows it without torchrun's environment: {"rank",
    "world_size"} and optionally "local_rank", "local_world_size", "master_addr" (unset:
    127.0.0.1 for a world on one node, required over several), "master_port" (29500), "token" (needed across nodes); unset: the environment's
    RANK, WORLD_SIZE, ... if any; regions: {name: (dim, begin, end)}, load only rows (dim 0) or
    columns (dim 1 of a 2-D tensor) [begin, end) of those tensors, reading only their bytes
    (for a server that cuts each tensor itself; one device, nothing decoded or quantized); an
    empty range gives an empty tensor and reads nothing; placement: "round-robin" (default) or
    "by-layer" over several devices; repack: GPTQ v1 / AWQ / act-order weights to GPTQ v2 with
    contiguous groups. Each keyword is a field of qload's one spec table (`qload config
    --spec-fields`, docs/cli.md), as `qload load` and C's qload_options spell it too.
    """
    fw = _framework(framework)
    args = _args(source, recipe, device, dtype, dequantize, quantize, lock, settings, world,
                 (tensor_parallel, pipeline_parallel, data_parallel, share_reads), regions, placement, repack)
    _check_host_framework(fw, args.device)
    native = _qload.load(args, _progress_callback(progress, args.source))
    model = Model()
    for name, carrier, dt in native.arrays():
        model[name] = _convert(carrier, dt, fw)
    model.report = native.report()
    model.quantized = native.quantized()
    return model


class Stream:
    """The iterator `stream` returns: (name, tensor) pairs in completion order.

    `report` is None until the last tensor has been taken from a load that succeeded; then it
    is the load's report, as `Model.report` (`first_tensor_seconds`: when the first tensor was
    handed over; `tenths_seconds`: when each tenth of the bytes had been).
    """

    def __init__(self, native, fw):
        self._native = native
        self._fw = fw
        self.report: Optional[dict] = None

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> tuple:
        try:
            name, carrier, dt = self._native.next()
        except StopIteration:
            self.report = self._native.report()
            raise
        return name, _convert(carrier, dt, self._fw)


def stream(source: PathLike, *, device: str = "cpu", framework: str = "pt", recipe: Optional[PathLike] = None,
           dtype: Optional[str] = None, dequantize: Optional[str] = None, quantize: Optional[str] = None,
           lock: Optional[PathLike] = None, settings: Optional[Mapping[str, object]] = None,
           tensor_parallel: Optional[int] = None, pipeline_parallel: Optional[int] = None,
           data_parallel: Optional[int] = None, share_reads: bool = False,
           world: Optional[Mapping[str, object]] = None,
           regions: Optional[Mapping[str, tuple]] = None, placement: Optional[str] = None,
           repack: bool = False) -> Stream:
    """Yields (name, tensor) as each tensor's bytes are read and verified, while the rest load.

    The iterable vLLM's and SGLang's `load_weights` take. Each tensor points into the load's
    memory (no copy) and keeps it alive, also if the load later fails. If the load fails, the
    iterator raises the error after the tensors that completed; once it is exhausted, its
    `report` holds the load's report (time to the first tensor and to each tenth of the bytes).
    Arguments are checked, and the load starts, when it is called; the parallel layout,
    world=, regions=, placement= and repack= as for load().
    """
    fw = _framework(framework)
    args = _args(source, recipe, device, dtype, dequantize, quantize, lock, settings, world,
                 (tensor_parallel, pipeline_parallel, data_parallel, share_reads), regions, placement, repack)
    _check_host_framework(fw, args.device)
    return Stream(_qload.stream(args), fw)


def load_into(source: PathLike, destinations, *, device: str = "cpu", recipe: Optional[PathLike] = None,
              dequantize: Optional[str] = None, lock: Optional[PathLike] = None,
              settings: Optional[Mapping[str, object]] = None, progress: Progress = None,
              name_map: Optional[Callable[[str], Optional[str]]] = None, strict: bool = True,
              rest: bool = False, framework: str = "pt"):
    """Loads a checkpoint straight into tensors you already own; returns the load report.

    destinations: {name: tensor} (a torch tensor, a numpy array, or anything with __dlpack__;
    `(tensor, (dim, begin, end))` for rows or columns [begin, end) of the stored tensor;
    `(tensor, [(begin, end), ...])` for those ranges of its rows one after another, in that
    order: a row permutation), or a
    torch.nn.Module, whose parameters and persistent buffers are filled by name (`name_map`
    turns a module name into the checkpoint's, None to leave it alone; tied tensors are filled
    once). Each tensor's bytes are read into the destination (converted to its dtype when that
    is F16 / BF16 / F32 and the stored one is too; with dequantize=, quantized weights decoded
    into it): no copy through qload's memory. Everything is checked before the first byte is
    read (the name, dtype, shape, a read-only or non-contiguous or overlapping destination),
    and an error names the tensor. With strict (a module only), a module tensor the checkpoint
    lacks is NotFoundError; the report's "missing" lists them either way.

    Tensors without a destination are not read, unless rest=True: then they load as load()
    would, and a Model of them (in `framework`) is returned instead (its `report` is the load's). The
    destinations are kept alive until this returns. A failed load's exception has `written`:
    the destinations that were completely written before it failed.
    """
    from . import _load_into

    fw = _framework(framework) if rest else framework  # torch is needed only for the rest's tensors
    args = _args(source, recipe, device, None, dequantize, None, lock, settings)
    if not isinstance(rest, bool):
        raise TypeError(f"rest must be a bool, not {type(rest).__name__}")
    missing: list = []
    if isinstance(destinations, Mapping):
        if name_map is not None:
            raise TypeError("name_map applies to a torch.nn.Module's names; a mapping already names checkpoint tensors")
        mapping = destinations
    elif callable(getattr(destinations, "state_dict", None)):
        if recipe is not None:
            raise ValueError("a module is matched against the checkpoint's names: give the checkpoint as source")
        seen = inspect(source)
        names = {t["name"] for t in seen["tensors"]}
        if dequantize is not None:
            names |= {w["name"] for w in (seen["quantization"] or {}).get("logical_tensors", [])}
        mapping, missing = _load_into.module_destinations(destinations, names, name_map)
        if strict and missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            raise NotFoundError(f"the checkpoint has no tensor for {len(missing)} of the module's: {shown} "
                                "(strict=False loads the rest)")
    else:
        raise TypeError(f"destinations must be a mapping of names to tensors or a torch.nn.Module, "
                        f"not {type(destinations).__name__}")
    described = _load_into.describe(mapping)
    report, native = _qload.load_into(args, described, rest, _progress_callback(progress, args.source))
    report["missing"] = missing
    if not rest:
        return report
    model = Model()
    for name, carrier, dt in native.arrays():
        model[name] = _convert(carrier, dt, fw)
    model.report = report
    model.quantized = native.quantized()
    return model


def inspect(source: PathLike) -> dict:
    """What a checkpoint holds, from its headers alone: tensors, files (with metadata), config and
    the quantization detected; the document `qload inspect --json` prints (schema qload.inspect/2,
    docs/cli.md)."""
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a path, not {type(source).__name__}")
    return json.loads(_qload.inspect(os.fspath(source)))


def resolve(source: PathLike, *, cache_dir: Optional[PathLike] = None) -> str:
    """Where `source`'s files are: `source` itself when it exists as a path or is not a Hugging
    Face model id; otherwise the snapshot folder of the id ("org/name" or "org/name@revision",
    a branch, tag or commit) in the local Hugging Face cache, as huggingface_hub's
    snapshot_download(..., local_files_only=True) finds it. The cache is `cache_dir` when given,
    else huggingface_hub's (HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE, HF_HOME/hub,
    XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub). Nothing is downloaded.

    Raises NotFoundError naming the path looked for when the model, the revision's ref, the
    commit's snapshot or a file's blob is missing; CorruptError for a ref file that does not
    hold a commit hash. load, stream, load_into, inspect and safe_open resolve their source
    this way themselves; this is for reading a model's other files (config.json, tokenizer).
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"source must be a path or a model id, not {type(source).__name__}")
    return _qload.resolve(os.fspath(source), os.fspath(cache_dir) if cache_dir is not None else "")
