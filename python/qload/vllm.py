"""qload.vllm: `--load-format qload` for vLLM.

Installed with the package as a vLLM general plugin (entry point `vllm.general_plugins`), so
`vllm serve MODEL --load-format qload` reads the checkpoint through qload. The loader is vLLM's
own default loader with one change: the (name, tensor) pairs that the model's `load_weights`
consumes come from `qload.stream`. vLLM's weight loaders, tensor-parallel slicing, quantization
handling and weight tracking are left as they are.

Settings pass through `--model-loader-extra-config '{"qload": {"io_engine": "pread"}}'`.
"""
from __future__ import annotations

import os

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

        def get_all_weights(self, model_config, model):
            extra = (self.load_config.model_loader_extra_config or {}).get("qload", {})
            yield from _stream(self._local_folder(model_config), framework="pt", settings=extra)
            for source in getattr(model, "secondary_weights", ()):
                yield from self._get_weights_iterator(source)

    return QloadModelLoader


def register() -> None:
    """vLLM calls this at start-up (entry point vllm.general_plugins): adds --load-format qload."""
    from vllm.model_executor.model_loader import register_model_loader

    register_model_loader(LOAD_FORMAT)(_loader_class())
