"""--load-format qload keeps vLLM's loader conventions: it is found however the package is,
refuses bad settings when vLLM constructs the loader (not once the model is built and weights
stream), reads the files vLLM's default loader reads, and reports the bytes each rank touched
in every load mode."""
import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest
import torch

vllm = pytest.importorskip("vllm")

import qload  # noqa: E402
import qload.vllm  # noqa: E402
from vllm_llama import assert_read_once, load, loaders, part_bytes  # noqa: E402


def test_the_plugin_is_found_on_pythonpath_without_register():
    """A fresh interpreter with the built package on PYTHONPATH (not pip-installed): vLLM's own
    plugin loading finds the entry point written beside the package."""
    code = ("from vllm.plugins import load_general_plugins\n"
            "from vllm.config.load import LoadConfig\n"
            "from vllm.model_executor.model_loader import get_model_loader\n"
            "load_general_plugins()\n"
            "print(type(get_model_loader(LoadConfig(load_format='qload'))).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "VLLM_PLUGINS": "qload"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "QloadModelLoader"


@pytest.mark.parametrize("extra, error, words", [
    ({"qload": {"io_engin": "pread"}}, qload.InvalidArgumentError, "io_engine"),  # did you mean
    ({"qload": {"staging_bytes": "lots"}}, qload.InvalidArgumentError, "staging_bytes"),
    ({"qload": ["load_mode=read"]}, ValueError, "dict of settings"),
    ({"qload_into": "no"}, ValueError, "qload_into"),
    ({"qload_weights": "consolidated"}, ValueError, "qload_weights"),
    ({"enable_weight_track": True}, ValueError, "enable_weight_track"),  # vLLM's own check
])
def test_bad_settings_fail_when_the_loader_is_constructed(extra, error, words):
    with pytest.raises(error, match=words):
        loaders(extra)


def test_good_settings_are_kept():
    ours, _ = loaders({"qload": {"io_engine": "pread", "staging_bytes": "64MiB"}, "qload_into": False,
                       "qload_weights": "hf", "enable_weights_track": True})
    assert ours.qload_settings == {"load_mode": "auto", "io_engine": "pread", "staging_bytes": "64MiB"}
    assert (ours.qload_read_into, ours.qload_weights) == (False, "hf")


def test_a_mapped_rank_reports_the_parts_it_touched(tiny_model, tp_rank):
    """load_mode mmap, everything streamed (nothing read into parameters): nothing is read by
    qload, and tensor_bytes / placed_bytes are the bytes of the views of this rank's parts."""
    stored = {t["name"]: t for t in qload.inspect(tiny_model)["tensors"]}
    whole = sum(t["nbytes"] for t in stored.values())
    for rank in range(2):
        tp_rank(rank, 2)
        ours, theirs = loaders({"qload_into": False, "qload": {"load_mode": "mmap"}})
        got, want = load(ours, tiny_model), load(theirs, tiny_model)
        for (name, p), (_, q) in zip(got.named_parameters(), want.named_parameters()):
            assert torch.equal(p, q), f"rank {rank}: {name}"
        report = ours.qload_report
        parts = sum(part_bytes(ours.qload_regions, stored, n) for n in stored)
        assert report["engine"] == "mmap" and report["read_bytes"] == 0
        assert report["tensor_bytes"] == report["placed_bytes"] == parts < whole * 0.7, (report, parts, whole)
        assert_read_once(ours, stored)


def write_mistral_layout(folder, tiny_model: str) -> None:
    """mistralai's repository layout: the Hugging Face shards with their index, and beside them
    the same weights under Mistral's own names in consolidated.safetensors."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(os.path.join(tiny_model, "model.safetensors"))
    names = sorted(tensors)
    half = len(names) // 2
    folder.mkdir()
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        shard = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(folder / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    mistral = {n.replace("model.layers.", "layers.").replace("self_attn.", "attention."): t for n, t in tensors.items()}
    save_file(mistral, str(folder / "consolidated.safetensors"), metadata={"format": "pt"})
    for extra in ("config.json",):
        (folder / extra).write_text(open(os.path.join(tiny_model, extra)).read())


@pytest.mark.parametrize("tiny_model", [("llama", False)], indirect=True, ids=["llama-untied"])
def test_the_weights_read_are_vllms_choice(tmp_path, tiny_model):
    """With consolidated*.safetensors beside the shards, vLLM's `auto` reads the consolidated
    file (its `mistral` format); qload_weights auto reads what vLLM's own _prepare_weights
    chooses, "hf" the shards, "mistral" the consolidated file."""
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    folder = tmp_path / "mistral-layout"
    write_mistral_layout(folder, tiny_model)
    for load_format, weights in (("auto", "auto"), ("hf", "hf"), ("mistral", "mistral")):
        _, files, _, _ = DefaultModelLoader(LoadConfig(load_format=load_format))._prepare_weights(
            str(folder), None, None, True, None)
        source = qload.vllm._weights_source(str(folder), weights)
        read = {os.path.basename(f["path"]) for f in qload.inspect(source)["files"]}
        assert read == {os.path.basename(f) for f in files}, (load_format, read, files)
    # The plain layout (no consolidated file) is the folder itself.
    assert qload.vllm._weights_source(tiny_model, "auto") == tiny_model


def serve_commands() -> list:
    """The `vllm serve` lines of docs/python.md's "Coming from vLLM", split as a shell would."""
    doc = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "python.md").read_text()
    section = doc[doc.index("### Coming from vLLM"):]
    start = section.index("```\n") + len("```\n")
    return [shlex.split(line) for line in section[start:section.index("```\n", start)].splitlines()
            if line.startswith("vllm serve ")]


def test_the_coming_from_vllm_recipe_loads(tmp_path, monkeypatch, tp_rank):
    """Each documented `vllm serve` line, parsed by vLLM's own serve argument parser into its
    engine arguments and load config, makes the qload loader (found as vLLM finds plugins),
    which loads the llama/ it names as vLLM's default loader does."""
    from tiny_models import save_tiny
    from vllm.config.load import LoadConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    from vllm.platforms import current_platform
    from vllm.plugins import load_general_plugins
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # vLLM's CUDA wheel finds no device here; its parser's defaults need a device type.
    monkeypatch.setattr(current_platform, "device_type", "cpu", raising=False)
    save_tiny("llama", False, tmp_path / "llama")
    monkeypatch.chdir(tmp_path)
    tp_rank(0, 1)
    commands = serve_commands()
    assert len(commands) == 2
    load_general_plugins()
    theirs = load(DefaultModelLoader(LoadConfig(load_format="safetensors")), "llama/")
    for command in commands:
        assert command[:2] == ["vllm", "serve"]
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(command[2:])
        args.model = args.model_tag
        engine = EngineArgs.from_cli_args(args)
        loader = get_model_loader(engine.create_load_config())
        assert type(loader).__name__ == "QloadModelLoader", command
        ours = load(loader, engine.model)
        for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            assert torch.equal(p, q), (command, name)
        assert loader.qload_into or loader.qload_report["tensors"] > 0
