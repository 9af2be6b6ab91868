"""`vllm serve org/name --load-format qload`: the plugin's folder for a Hugging Face model id.

The local cache first (vLLM's --download-dir as the cache), offline; a snapshot that lacks the
weights (vLLM fetches config.json into it before loading) is completed with snapshot_download as
vLLM's own loader does: into --download-dir, with vLLM's ignore patterns. The Hub is the fake one
of the clients suite (fake_hub.py) on 127.0.0.1: no network.
"""
import os
import shutil
import types

import pytest

vllm = pytest.importorskip("vllm")

import qload.vllm  # noqa: E402
from fake_hub import FakeHub  # noqa: E402  (the clients suite's, on sys.path from conftest)

COMMIT = "c3" * 20


def loader(download_dir):
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    qload.vllm.register()
    return get_model_loader(LoadConfig(load_format="qload", download_dir=download_dir))


@pytest.fixture
def repo(tiny_model, tmp_path):
    """The tiny model as the Hub serves it, with an original/ folder vLLM's ignore patterns skip."""
    served = tmp_path / "served"
    shutil.copytree(tiny_model, served)
    (served / "original").mkdir()
    (served / "original" / "consolidated.pth").write_bytes(b"not wanted")
    return str(served)


@pytest.fixture
def hub(repo, monkeypatch):
    """The fake Hub, reached by huggingface_hub (imported by vLLM already, so its constants are
    set here rather than by HF_ENDPOINT)."""
    import huggingface_hub.constants as constants

    with FakeHub({"org/tiny": {"main": (COMMIT, repo)}}) as fake:
        monkeypatch.setattr(constants, "ENDPOINT", fake.url)
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake.url + "/{repo_id}/resolve/{revision}/{filename}")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield fake


def test_an_id_is_fetched_into_the_download_dir_then_read_from_it_offline(hub, tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    download_dir = str(tmp_path / "download")
    config = types.SimpleNamespace(model="org/tiny", revision=None, quantization=None)
    ours = loader(download_dir)
    # vLLM has fetched config.json alone into the cache: not the model yet, so it is downloaded.
    import huggingface_hub

    huggingface_hub.hf_hub_download("org/tiny", "config.json", cache_dir=download_dir)
    folder = ours._local_folder(config)
    snapshot = os.path.join(download_dir, "models--org--tiny", "snapshots", COMMIT)
    assert folder == snapshot
    assert os.path.isfile(os.path.join(folder, "model.safetensors"))
    assert not os.path.exists(os.path.join(folder, "original")), "vLLM's ignore_patterns were not passed"
    # Now complete: found in the cache with no request at all, even offline.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub.requests.clear()
    assert ours._local_folder(config) == snapshot
    ours.download_model(config)
    assert hub.requests == []
    assert ours._local_folder(types.SimpleNamespace(model="org/tiny", revision=COMMIT, quantization=None)) == snapshot


def test_an_id_absent_offline_is_huggingface_hubs_error(tmp_path, monkeypatch):
    import huggingface_hub.constants as constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(LocalEntryNotFoundError):
        loader(str(tmp_path))._local_folder(types.SimpleNamespace(model="org/absent", revision=None))
