"""qload.vllm: `--load-format qload` for vLLM.

Installed with the package as a vLLM general plugin (entry point `vllm.general_plugins`), so
`vllm serve MODEL --load-format qload` reads the checkpoint through qload. The loader is vLLM's
own default loader with one change: the (name, tensor) pairs that the model's `load_weights`
consumes come from `qload.stream`. vLLM's weight loaders, tensor-parallel slicing, quantization
handling and weight tracking are left as they are.

Under tensor parallelism each rank reads only the rows or columns it keeps: a dry run of the
model's own `load_weights` on meta tensors shows which part of each tensor its weight loaders
narrow to (_vllm_regions.py), qload reads those regions alone, and each reaches the weight
loader as a stand-in of the stored shape whose one narrow returns the region.

The same dry run shows where each part goes. Where a weight loader only narrows and copies (the
column-, row-, QKV- and merged-column-parallel linears, vocabulary embeddings, vLLM's default
weight loader, the experts' loaders), `qload.load_into` reads the part straight into the piece
of the parameter it would be copied to, before the rest is streamed: no second copy of the
model in memory, nothing copied twice. The weight loader still gets each of those tensors (its
stand-in's narrow returns that piece of the parameter, or the piece itself for a whole tensor),
so vLLM's loading and weight tracking run as they are, its copy being of that memory onto
itself, which torch skips. Everything else (a loader that transposes, concatenates, fills or
scales, a target that is not contiguous or another tensor's too, quantized parts loaded in
other ways) is streamed as before. `qload_into` on the loader lists what was read into
parameters, `qload_into_report` is that load's report, `qload_report` the stream's.

Settings pass through `--model-loader-extra-config '{"qload": {"io_engine": "pread"}}'`
(`load_mode` is `auto` unless given: mapped when the page cache holds the files, read
otherwise; what goes straight into parameters is always read); they are checked when vLLM
constructs the loader, before it builds the model. `{"qload_regions": false}` reads whole
tensors on every rank and streams them all (no dry run); `{"qload_into": false}` streams every
tensor, read in part as above. `{"qload_weights": "auto"}` (the default) reads the files vLLM's
default loader reads: in a folder with `consolidated*.safetensors` (mistralai's repositories)
those, as vLLM's `auto` then loads the `mistral` format, else the Hugging Face shards;
`"hf"` or `"mistral"` chooses one. The reports count the bytes each rank touched in every
mode: `tensor_bytes`, read or, when mapped, handed out as views of its parts.

vLLM finds the loader through the package's entry point, installed with it or written beside
the built package (`build/python`, for PYTHONPATH use). A copy of the package found neither way
calls `qload.vllm.register()` before vLLM constructs its loader (in-process `vllm.LLM`).
"""
from __future__ import annotations

import copy
import glob
import logging
import os

from . import _vllm_regions as _regions
from . import check_settings, inspect
from . import load_into as _load_into
from . import stream as _stream
from ._qload import InvalidArgumentError, NotFoundError, UnsupportedError

LOAD_FORMAT = "qload"

_log = logging.getLogger("qload.vllm")
# load_into's errors for destinations it refuses, raised before anything is read
_REFUSED = (InvalidArgumentError, NotFoundError, UnsupportedError, TypeError, ValueError)
_REFUSALS = 8  # destinations refused one by one before all are streamed
_WEIGHTS = ("auto", "hf", "mistral")  # {"qload_weights": ...}


def _extra_config(extra: dict) -> tuple:
    """qload's keys taken out of vLLM's `model_loader_extra_config` and checked, so that a bad
    one fails when the loader is constructed, not minutes later when weights stream:
    (settings, read regions, read into parameters, weights, vLLM's keys)."""
    extra = dict(extra or {})
    settings = extra.pop("qload", {})
    if not isinstance(settings, dict):
        raise ValueError(f"qload: 'qload' in the extra config must be a dict of settings, not {settings!r}")
    settings = {"load_mode": "auto", **settings}
    check_settings(settings)
    flags = []
    for key in ("qload_regions", "qload_into"):
        value = extra.pop(key, True)
        if not isinstance(value, bool):
            raise ValueError(f"qload: {key} must be true or false, not {value!r}")
        flags.append(value)
    weights = extra.pop("qload_weights", "auto")
    if weights not in _WEIGHTS:
        raise ValueError(f"qload: qload_weights must be one of {', '.join(_WEIGHTS)}, not {weights!r}")
    return settings, flags[0], flags[1], weights, extra


def _weights_source(folder: str, weights: str) -> str:
    """The checkpoint in `folder` that vLLM's default loader reads (`weights` "auto"): the
    consolidated files where there are any (vLLM's `auto` then loads the `mistral` format, whose
    models rename and permute their tensors), else the Hugging Face shards; or as chosen."""
    if not os.path.isdir(folder):
        return folder
    consolidated = sorted(glob.glob(os.path.join(folder, "consolidated*.safetensors")))
    if weights == "mistral" or (weights == "auto" and consolidated):
        index = os.path.join(folder, "consolidated.safetensors.index.json")
        if os.path.isfile(index):
            return index
        if len(consolidated) == 1:
            return consolidated[0]
        raise NotFoundError(f"{folder}: qload_weights {weights}: {len(consolidated)} consolidated*.safetensors "
                            "files and no consolidated.safetensors.index.json to say which to read")
    index = os.path.join(folder, "model.safetensors.index.json")
    # Beside consolidated files, the shards are the index's (vLLM filters by it too).
    return index if consolidated and os.path.isfile(index) else folder


def _loader_class():
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    class QloadModelLoader(DefaultModelLoader):
        """vLLM's default loader, its weights read by qload."""

        def _local_folder(self, model_config) -> str:
            """The model's folder: a local path as it is; for a Hugging Face model id, its snapshot
            in the cache (vLLM's --download-dir when given, else huggingface_hub's), offline,
            when that holds the weights; else what snapshot_download fetches there, as vLLM's
            default loader does (its lock, download dir, ignore patterns and HF_HUB_OFFLINE)."""
            path = model_config.model
            if os.path.isdir(path) or path.endswith(".safetensors"):
                return path
            import json

            from . import resolve
            from ._qload import CorruptError

            revision = getattr(model_config, "revision", None)
            download_dir = self.load_config.download_dir
            try:
                folder = resolve(path if revision is None else f"{path}@{revision}", cache_dir=download_dir)
            except (NotFoundError, CorruptError):
                folder = None
            if folder is not None and os.path.isdir(folder):
                # vLLM fetches config.json into the same snapshot before loading: a snapshot
                # without the weights (or some of an index's shards) is not the model yet.
                index = os.path.join(folder, "model.safetensors.index.json")
                try:
                    with open(index) as f:
                        shards = set(json.load(f)["weight_map"].values())
                except FileNotFoundError:
                    shards = {f for f in os.listdir(folder) if f.endswith(".safetensors")} or {"model.safetensors"}
                except (OSError, ValueError, KeyError, TypeError, AttributeError):
                    return folder  # not one snapshot_download would mend: qload's load says what is wrong
                if all(os.path.isfile(os.path.join(folder, str(shard))) for shard in shards):
                    return folder
            import huggingface_hub
            from vllm.model_executor.model_loader.weight_utils import get_lock

            with get_lock(path, download_dir):  # one download per model, as vLLM's loader
                return huggingface_hub.snapshot_download(
                    path, revision=revision, cache_dir=download_dir, allow_patterns=["*.safetensors", "*.json"],
                    ignore_patterns=self.load_config.ignore_patterns,
                    local_files_only=huggingface_hub.constants.HF_HUB_OFFLINE)

        def download_model(self, model_config) -> None:
            self._local_folder(model_config)

        qload_report = None  # the last load's stream's report (read_bytes, seconds, ...)
        # the last load's {name: (dim, begin, end)} read in part (None: a tensor not read at all)
        qload_regions = None
        qload_into = None  # the names the last load read straight into parameters
        qload_into_report = None  # that load_into's report (None: nothing was)

        def __init__(self, load_config):
            # qload's keys are taken out (vLLM's default loader refuses keys it does not know)
            # and checked. load_mode auto: the files mapped when the page cache holds them (vLLM
            # copies each part once, as from its own loader's mappings), read when it does not.
            (self.qload_settings, self.qload_read_regions, self.qload_read_into, self.qload_weights,
             extra) = _extra_config(load_config.model_loader_extra_config)
            load_config = copy.copy(load_config)
            load_config.model_loader_extra_config = extra
            super().__init__(load_config)

        def load_weights(self, model, model_config) -> None:
            # The dry run goes first, before vLLM's own load_weights starts on the model.
            self._plan(model, model_config)
            try:
                super().load_weights(model, model_config)
            finally:
                self._planned = None

        _planned = None  # (folder, stored tensors, regions, destinations) for the load under way

        def _plan(self, model, model_config) -> tuple:
            folder = _weights_source(self._local_folder(model_config), self.qload_weights)
            regions, stored, destinations = {}, {}, {}
            if self.qload_read_regions:
                inspected = inspect(folder)
                stored = _regions.stored_tensors(inspected) or {}
                if stored and self.qload_read_into:
                    # qload converts float dtypes as it reads, quantized weights' kept scales
                    # included (F32 into a BF16 parameter, as the weight loader's copy would).
                    regions, destinations = _regions.predict_destinations(model, stored)
                elif stored:
                    regions = _regions.predict(model, stored)
            self._planned = (folder, stored, regions, destinations)
            return self._planned

        def _read_into(self, folder, destinations: dict) -> dict:
            """Reads the destined tensors straight into the model's parameters; returns those read.
            Destinations are checked before any byte is read: one qload refuses (a conversion it
            does not make) is streamed instead, and after a few, all of them are."""
            self.qload_into_report = None
            destinations = dict(destinations)
            # load_into reads (a mapping would be one more copy): the stream's load_mode is not its.
            settings = {k: v for k, v in self.qload_settings.items() if k != "load_mode"}
            for _ in range(_REFUSALS + 1):
                if not destinations:
                    return {}
                try:
                    self.qload_into_report = _load_into(
                        folder, {name: target if region is None else (target, region)
                                 for name, (target, region) in destinations.items()},
                        settings=settings, progress=False)
                    return destinations
                except _REFUSED as e:
                    refused, error = getattr(e, "tensor", None), e
                    if getattr(e, "written", None) or refused not in destinations:
                        break  # not one destination's: none of them
                    _log.info("qload: streaming %s rather than reading it into its parameter (%s)", refused, e)
                    del destinations[refused]
            _log.warning("qload: streaming every tensor, none read into the parameters (%s: %s)",
                         type(error).__name__, error)
            return {}

        def get_all_weights(self, model_config, model):
            folder, stored, regions, destinations = self._planned or self._plan(model, model_config)
            self.qload_regions = regions
            destinations = self._read_into(folder, destinations)
            self.qload_into = sorted(destinations)
            # The tensors already in the parameters are left out of the stream (nothing read).
            weights = _stream(folder, framework="pt", settings=self.qload_settings,
                              regions={**_regions.qload_regions(regions), **{n: (0, 0, 0) for n in destinations}})
            for name, (target, region) in destinations.items():
                # The weight loader's copy is of the parameter's memory onto itself.
                shape, dtype = stored[name]
                yield name, target if region is None else _regions.stand_in(name, target, shape, dtype, region)
            for name, tensor in weights:
                if name in destinations:
                    continue
                if name in regions:
                    shape, dtype = stored[name]
                    tensor = _regions.stand_in(name, tensor, shape, dtype, regions[name])
                yield name, tensor
            self.qload_report = weights.report
            for source in getattr(model, "secondary_weights", ()):
                yield from self._get_weights_iterator(source)

    return QloadModelLoader


def register() -> None:
    """vLLM calls this at start-up (entry point vllm.general_plugins): adds --load-format qload."""
    from vllm.model_executor.model_loader import register_model_loader

    register_model_loader(LOAD_FORMAT)(_loader_class())
