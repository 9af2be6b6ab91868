"""Hugging Face model ids ("org/name", "org/name@revision") read from the local Hugging Face cache.

The cache is written by huggingface_hub's own snapshot_download, from a fake Hub served on
127.0.0.1 (fake_hub.py; no network), in a subprocess so that its HF_ENDPOINT and HF_HUB_CACHE
are read as huggingface_hub reads them, at import. qload must then find what huggingface_hub
finds offline (snapshot_download(local_files_only=True), try_to_load_from_cache), through
every client: qload.load/stream/load_into/inspect (safe_open takes a file, as safetensors'
does), the CLI, and the transformers and FMS integrations; and say clearly what is missing
when the cache lacks it.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest
import safetensors.torch
import torch

import qload
from fake_hub import FakeHub
from tiny_models import save_tiny

MAIN, V1 = "a1" * 20, "b2" * 20  # the fake Hub's commits of main and of the tag v1
REPO = "org/tiny-llama"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """{"cache", "main", "v1": snapshot folders huggingface_hub made, "main_dir", "v1_dir": the models}."""
    root = tmp_path_factory.mktemp("hub")
    main_dir = save_tiny("llama", False, root / "main", vocab_size=320, hidden_size=64)
    v1_dir = save_tiny("llama", True, root / "v1", vocab_size=320, hidden_size=32)
    cache = str(root / "cache")
    with FakeHub({REPO: {"main": (MAIN, main_dir), "v1": (V1, v1_dir)}}) as fake:
        env = dict(os.environ, HF_ENDPOINT=fake.url, HF_HUB_CACHE=cache, HF_HUB_OFFLINE="0",
                   HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
        code = ("import json, sys, huggingface_hub as h; "
                f"print(json.dumps([h.snapshot_download({REPO!r}), h.snapshot_download({REPO!r}, revision='v1')]))")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert any(path.endswith("/resolve/" + MAIN + "/model.safetensors") for _, path in fake.requests)
    main, v1 = json.loads(done.stdout.strip().splitlines()[-1])
    assert os.path.islink(os.path.join(main, "model.safetensors")), "huggingface_hub links snapshots to blobs"
    return {"cache": cache, "main": main, "v1": v1, "main_dir": main_dir, "v1_dir": v1_dir}


@pytest.fixture
def in_cache(hub, monkeypatch):
    """The process's cache is the fake Hub's (qload reads the environment at each call)."""
    monkeypatch.setenv("HF_HUB_CACHE", hub["cache"])
    return hub


def stored(folder) -> dict:
    return safetensors.torch.load_file(os.path.join(folder, "model.safetensors"))


def assert_same(ours, theirs: dict) -> None:
    assert set(ours) == set(theirs)
    for name, want in theirs.items():
        assert ours[name].dtype == want.dtype and torch.equal(ours[name], want), name


def test_huggingface_hub_and_qload_find_the_same_snapshot(in_cache):
    """refs/main, a tag's ref and a commit named directly resolve where huggingface_hub's offline
    lookups do; a path, or what is not an id, is left as it is."""
    from huggingface_hub import snapshot_download, try_to_load_from_cache

    cache = in_cache["cache"]
    for source, revision in ((REPO, None), (f"{REPO}@main", "main"), (f"{REPO}@v1", "v1"), (f"{REPO}@{V1}", V1)):
        theirs = snapshot_download(REPO, revision=revision, cache_dir=cache, local_files_only=True)
        assert qload.resolve(source) == theirs, source
        assert qload.resolve(source, cache_dir=cache) == theirs
        config = try_to_load_from_cache(REPO, "config.json", cache_dir=cache, revision=revision)
        assert os.path.dirname(config) == theirs
    assert qload.resolve(REPO) == in_cache["main"] and qload.resolve(f"{REPO}@v1") == in_cache["v1"]
    assert qload.resolve(in_cache["main_dir"]) == in_cache["main_dir"]
    assert qload.resolve("no-such-file.safetensors") == "no-such-file.safetensors"


def test_load_stream_inspect_and_load_into_take_an_id(in_cache):
    main = stored(in_cache["main_dir"])
    assert_same(qload.load(REPO), main)
    assert_same(qload.load(f"{REPO}@v1"), stored(in_cache["v1_dir"]))
    assert_same(qload.load(f"{REPO}@{MAIN}"), main)
    assert_same(dict(qload.stream(REPO)), main)
    inspected = qload.inspect(REPO)
    assert {t["name"] for t in inspected["tensors"]} == set(main)
    assert inspected["files"][0]["path"].startswith(in_cache["main"])
    # safe_open opens one file, as safetensors' does: the id's snapshot names the folder.
    with qload.safe_open(os.path.join(qload.resolve(REPO), "model.safetensors"), framework="pt") as f:
        assert f.keys() == sorted(main)
        assert torch.equal(f.get_tensor("lm_head.weight"), main["lm_head.weight"])
    out = torch.empty_like(main["model.norm.weight"])
    qload.load_into(REPO, {"model.norm.weight": out})
    assert torch.equal(out, main["model.norm.weight"])


def test_a_path_of_the_same_name_wins(in_cache, tmp_path, monkeypatch):
    local = tmp_path / "org" / "tiny-llama"
    shutil.copytree(in_cache["v1_dir"], local)
    monkeypatch.chdir(tmp_path)
    assert qload.resolve(REPO) == REPO
    assert_same(qload.load(REPO), stored(in_cache["v1_dir"]))


def test_the_cli_loads_and_inspects_an_id(in_cache, qload_cli):
    env = dict(os.environ, HF_HUB_CACHE=in_cache["cache"])
    done = subprocess.run([qload_cli, "load", REPO, "--json"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tensors"] == len(stored(in_cache["main_dir"]))
    done = subprocess.run([qload_cli, "inspect", f"{REPO}@v1", "--json"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["source"] == in_cache["v1"]
    # Not in the cache: exit 66 (no input), naming the cache searched.
    done = subprocess.run([qload_cli, "load", "org/absent"], env=env, capture_output=True, text=True)
    assert done.returncode == 66
    assert in_cache["cache"] in done.stderr and "models--org--absent" in done.stderr


def broken_cache(hub, tmp_path) -> str:
    """A copy of the cache (links kept as links) to break."""
    cache = str(tmp_path / "cache")
    shutil.copytree(hub["cache"], cache, symlinks=True)
    return cache


def test_what_the_cache_lacks_is_named(hub, tmp_path, monkeypatch):
    """A missing model, revision, snapshot or blob: a NotFoundError naming the path looked for,
    where huggingface_hub's offline lookup fails too."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = broken_cache(hub, tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    repo = os.path.join(cache, "models--org--tiny-llama")

    def both_refuse(source, revision, repo_id=REPO):
        with pytest.raises(LocalEntryNotFoundError):  # IncompleteSnapshotError is one too
            snapshot_download(repo_id, revision=revision, cache_dir=cache, local_files_only=True)
        with pytest.raises(qload.NotFoundError) as refused:
            qload.load(source)
        with pytest.raises(FileNotFoundError):  # the builtin it also is
            qload.resolve(source)
        return refused.value

    e = both_refuse("org/absent", None, "org/absent")
    assert e.file == os.path.join(cache, "models--org--absent") and cache in str(e)
    e = both_refuse(f"{REPO}@v2", "v2")
    assert e.file == os.path.join(repo, "refs", "v2")
    # A ref to a commit whose snapshot is gone.
    shutil.rmtree(os.path.join(repo, "snapshots", V1))
    e = both_refuse(f"{REPO}@v1", "v1")
    assert e.file == os.path.join(repo, "snapshots", V1) and V1 in str(e)
    # A file whose blob was deleted (a pruned cache).
    link = os.path.join(repo, "snapshots", MAIN, "model.safetensors")
    blob = os.path.normpath(os.path.join(os.path.dirname(link), os.readlink(link)))
    os.remove(blob)
    e = both_refuse(REPO, None)
    assert e.file == link and blob in str(e)


def test_a_ref_file_that_is_not_a_commit_is_refused(hub, tmp_path, monkeypatch):
    cache = broken_cache(hub, tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", cache)
    ref = os.path.join(cache, "models--org--tiny-llama", "refs", "main")
    with open(ref, "w") as f:
        f.write("../../../../etc")
    with pytest.raises(qload.CorruptError) as refused:
        qload.load(REPO)
    assert refused.value.file == ref


def test_transformers_integration_loads_an_id(in_cache):
    """qload.transformers.from_pretrained("org/name") is transformers' own from_pretrained of the
    id (offline, from the same cache): the same weights, the same logits."""
    import transformers

    import qload.transformers

    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        REPO, cache_dir=in_cache["cache"], local_files_only=True, dtype=torch.bfloat16).eval()
    ours = qload.transformers.from_pretrained(REPO)
    assert_same(ours.state_dict(), theirs.state_dict())
    tokens = torch.tensor([[1, 5, 9, 17, 33, 65, 129, 257, 300, 2, 7, 11]])
    with torch.no_grad():
        assert torch.equal(ours(tokens).logits, theirs(tokens).logits)
    # The revision given as transformers takes it, and the cache folder.
    v1 = qload.transformers.from_pretrained(REPO, revision="v1", cache_dir=in_cache["cache"])
    assert v1.config.hidden_size == 32


def test_fms_integration_loads_an_id(in_cache, monkeypatch):
    """get_model("hf_pretrained", model_path="org/name"): FMS reads the config from the cache
    through huggingface_hub, qload reads the weights from the same snapshot."""
    pytest.importorskip("fms")
    import huggingface_hub.constants
    from fms.models import get_model

    import qload.fms

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", in_cache["cache"])  # FMS passes no cache_dir
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    def fms(path):
        return get_model("hf_pretrained", model_path=path, device_type="cpu", data_type=torch.bfloat16)

    theirs = fms(in_cache["main"])  # FMS alone, from the snapshot folder
    reports = []
    with qload.fms.loading(on_report=reports.append):
        ours = fms(REPO)
    assert len(reports) == 1 and reports[0]["report"]["tensors"] == len(stored(in_cache["main_dir"]))
    assert_same(ours.state_dict(), theirs.state_dict())
