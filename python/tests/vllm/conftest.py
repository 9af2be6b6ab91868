"""Fixtures for the vLLM suite: the same tiny transformers models as the clients suite, the
tensor-parallel rank vLLM's layers see, and the qload CLI."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from tiny_models import MODEL_IDS, MODELS, save_tiny  # noqa: E402


@pytest.fixture(params=MODELS, ids=MODEL_IDS)
def tiny_model(request, tmp_path):
    kind, tied = request.param
    return save_tiny(kind, tied, tmp_path / f"{kind}-{'tied' if tied else 'untied'}")


@pytest.fixture
def tp_rank(monkeypatch):
    """Sets the tensor-parallel (rank, size) vLLM's layers see (undone after the test)."""
    import vllm_llama

    return lambda rank, size: vllm_llama.set_tp_rank(rank, size, monkeypatch.setattr)


@pytest.fixture
def qload_cli():
    return os.environ["QLOAD_TEST_CLI"]


class _NoKernel:
    """Stands in for the GPU kernel vLLM would pick: built, never run."""

    def __init__(self, *args, **kwargs):
        pass


@pytest.fixture
def no_kernels(monkeypatch):
    """Answers vLLM's choice of GPU kernel for quantized layers (there is none without a GPU, and
    vLLM then refuses to build them) with one that does nothing: kernels run only in the forward
    pass and in process_weights_after_loading, after the load these tests check. The layers'
    parameters and weight loaders stay vLLM's own."""
    import importlib

    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend

    base = "vllm.model_executor.layers.quantization."
    for module, names in {
        "auto_gptq": ("verify_marlin_supported", "choose_mp_linear_kernel"),
        "compressed_tensors.schemes.compressed_tensors_wNa16": ("choose_mp_linear_kernel",),
        "compressed_tensors.schemes.compressed_tensors_w8a16_fp8": ("init_wfp8_a16_linear_kernel",),
        "fp8": ("init_fp8_linear_kernel",),
        "fbgemm_fp8": ("init_fp8_linear_kernel",),
    }.items():
        m = importlib.import_module(base + module)
        for name in names:
            stub = (lambda *a, **k: None) if name.startswith("verify") else \
                (lambda *a, **k: _NoKernel) if name.startswith("choose") else (lambda *a, **k: _NoKernel())
            monkeypatch.setattr(m, name, stub)
    # FP8 experts: the MoE backend, chosen by platform the same way.
    monkeypatch.setattr(importlib.import_module(base + "fp8"), "select_fp8_moe_backend",
                        lambda *a, **k: (Fp8MoeBackend.TRITON, None))
