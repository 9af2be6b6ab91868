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

Settings pass through `--model-loader-extra-config '{"qload": {"io_engine": "pread"}}'`
(`load_mode` is `auto` unless given: mapped when the page cache holds the files, read
otherwise); `{"qload_regions": false}` reads whole tensors on every rank.
"""
from __future__ import annotations

import copy
import os

from . import _vllm_regions as _regions
from . import inspect
from . import stream as _stream

LOAD_FORMAT = "qload"


def _loader_class():
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    class QloadModelLoader(DefaultModelLoader):
        """vLLM's default loader, its weights read by qload."""

        def _local_folder(self, model_config) -> str:
            path = model_config.model
            if os.path.isdir(path) or path.endswith(".safetensors"):
                return path
            from huggingface_hub import snapshot_download

            return snapshot_download(path, revision=getattr(model_config, "revision", None),
                                     allow_patterns=["*.safetensors", "*.json"])

        def download_model(self, model_config) -> None:
            self._local_folder(model_config)

        qload_report = None  # the last load's report (read_bytes, seconds, ...)
        # the last load's {name: (dim, begin, end)} read in part (None: a tensor not read at all)
        qload_regions = None

        def __init__(self, load_config):
            # qload's keys are taken out: vLLM's default loader refuses keys it does not know.
            extra = dict(load_config.model_loader_extra_config or {})
            # load_mode auto: the files mapped when the page cache holds them (vLLM copies each
            # part once, as from its own loader's mappings), read with io_uring when it does not.
            self.qload_settings = {"load_mode": "auto", **extra.pop("qload", {})}
            self.qload_read_regions = extra.pop("qload_regions", True)
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

        _planned = None  # (folder, stored tensors, regions) for the load under way

        def _plan(self, model, model_config) -> tuple:
            folder = self._local_folder(model_config)
            regions, stored = {}, {}
            if self.qload_read_regions:
                stored = _regions.stored_tensors(inspect(folder)) or {}
                regions = _regions.predict(model, stored) if stored else {}
            self._planned = (folder, stored, regions)
            return self._planned

        def get_all_weights(self, model_config, model):
            folder, stored, regions = self._planned or self._plan(model, model_config)
            self.qload_regions = regions
            weights = _stream(folder, framework="pt", settings=self.qload_settings,
                              regions=_regions.qload_regions(regions))
            for name, tensor in weights:
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
