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
    return os.environ["QLOAD_CLI"]
