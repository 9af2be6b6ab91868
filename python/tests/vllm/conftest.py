"""Fixtures for the vLLM suite: the same tiny transformers models as the clients suite."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients"))
from tiny_models import MODEL_IDS, MODELS, save_tiny  # noqa: E402


@pytest.fixture(params=MODELS, ids=MODEL_IDS)
def tiny_model(request, tmp_path):
    kind, tied = request.param
    return save_tiny(kind, tied, tmp_path / f"{kind}-{'tied' if tied else 'untied'}")
