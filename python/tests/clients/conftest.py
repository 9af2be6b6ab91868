"""Fixtures: tiny models saved by transformers, and the qload CLI."""
import os
import subprocess

import pytest

from tiny_models import MODEL_IDS, MODELS, save_tiny


@pytest.fixture(params=MODELS, ids=MODEL_IDS)
def tiny_model(request, tmp_path):
    kind, tied = request.param
    return save_tiny(kind, tied, tmp_path / f"{kind}-{'tied' if tied else 'untied'}")


@pytest.fixture
def qload_cli():
    return os.environ["QLOAD_TEST_CLI"]


def convert(cli: str, source: str, out, quantize: str) -> str:
    subprocess.run([cli, "convert", source, str(out), "--quantize", quantize], check=True, stdout=subprocess.DEVNULL)
    return str(out)
