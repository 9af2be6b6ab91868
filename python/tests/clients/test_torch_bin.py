"""PyTorch `.bin` / `.pt` files written by torch.save, read by qload without running pickle:
every tensor equals what `torch.load(weights_only=True)` returns (dtype, shape, bytes), for
every dtype, shared storages and views (non-contiguous ones too), empty and 0-d tensors, a sharded checkpoint written by
transformers (`pytorch_model-*.bin` + index); and pickles that do anything but rebuild tensors
are refused, as are broken archives."""
import io
import json
import os
import pickle
import subprocess
import zipfile

import pytest
import torch

import qload

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.uint16, torch.uint32,
          torch.uint64]


def as_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def assert_same(ours: dict, theirs: dict):
    assert sorted(ours) == sorted(theirs)
    for name, want in theirs.items():
        got = ours[name]
        assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), name
        assert as_bytes(got) == as_bytes(want), name


def random_tensor(dtype, shape, gen):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -1000), min(info.max, 1000)
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).to(dtype)


def test_every_dtype_equals_torch_load(tmp_path):
    gen = torch.Generator().manual_seed(1)
    state = {f"t.{str(d).removeprefix('torch.')}": random_tensor(d, (3, 5), gen) for d in DTYPES}
    torch.save(state, tmp_path / "model.pt")
    theirs = torch.load(tmp_path / "model.pt", weights_only=True)
    assert_same(qload.load(tmp_path / "model.pt"), theirs)


def test_shared_storages_views_empty_and_scalars(tmp_path):
    gen = torch.Generator().manual_seed(2)
    base = torch.randn(8, 6, generator=gen)
    flat = torch.arange(20, dtype=torch.int32)
    state = {
        "embed.weight": base,
        "lm_head.weight": base,          # tied: the same tensor twice
        "rows": base[2:5],               # a contiguous view at an offset into the same storage
        "flat_middle": flat[7:13],       # a 1-D slice
        "column_of_one": base[:, 0:1].reshape(8, 1).contiguous(),
        "unit_dims": flat[4:10].view(1, 6, 1),
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "bias": torch.randn(6, generator=gen).to(torch.bfloat16),
    }
    torch.save(state, tmp_path / "pytorch_model.bin")
    theirs = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    ours = qload.load(tmp_path / "pytorch_model.bin")
    assert_same(ours, theirs)
    # The same through the directory (pytorch_model.bin) and the numpy framework.
    as_numpy = qload.load(tmp_path, framework="np")
    for name, want in theirs.items():
        if want.dtype == torch.bfloat16:
            continue  # numpy has no bf16 without ml_dtypes
        assert as_numpy[name].shape == tuple(want.shape) and as_numpy[name].tobytes() == as_bytes(want), name


def test_non_contiguous_views_equal_torch_load(tmp_path):
    """Views torch.save stores as storage + strides (transposed, stepped, expanded, permuted,
    column slices) arrive row-major with torch.load's values; mmap mode, which cannot gather,
    refuses them by name."""
    gen = torch.Generator().manual_seed(6)
    base = torch.randn(12, 10, generator=gen).to(torch.bfloat16)
    cube = torch.arange(4 * 3 * 5, dtype=torch.int32).reshape(4, 3, 5)
    state = {
        "q_proj.weight": base.t(),                                  # strides (1, 10)
        "stepped": base[1::3, ::2],                                 # strides (30, 2) from element 10
        "columns": base[:, 3:7],                                    # rows of a wider tensor
        "expanded": torch.randn(6, generator=gen).expand(4, 6),     # stride 0
        "permuted": cube.permute(2, 0, 1),
        "f64_t": torch.randn(3, 7, generator=gen, dtype=torch.float64).t(),
        "plain": base,
    }
    assert not any(state[n].is_contiguous() for n in ("q_proj.weight", "stepped", "columns", "expanded", "permuted"))
    torch.save(state, tmp_path / "views.pt")
    theirs = torch.load(tmp_path / "views.pt", weights_only=True)
    assert not theirs["q_proj.weight"].is_contiguous()  # torch.load hands back the views themselves
    assert_same(qload.load(tmp_path / "views.pt"), theirs)
    described = {t["name"]: t for t in qload.inspect(str(tmp_path / "views.pt"))["tensors"]}
    assert described["q_proj.weight"]["strides"] == [1, 10] and "strides" not in described["plain"]
    # Converted by a dtype policy after the gather.
    as_f32 = qload.load(tmp_path / "views.pt", dtype="f32")
    for name in ("q_proj.weight", "stepped", "columns"):
        assert torch.equal(as_f32[name], theirs[name].float()), name
    with pytest.raises(qload.Error) as e:
        qload.load(tmp_path / "views.pt", settings={"load_mode": "mmap"})
    assert e.value.tensor in state and "non-contiguous" in str(e.value)


def test_sharded_checkpoint_with_index(tmp_path):
    """A transformers model's state dict sharded as transformers 4 wrote `.bin` checkpoints:
    `pytorch_model-0000i-of-0000n.bin` files and `pytorch_model.bin.index.json`."""
    import transformers

    torch.manual_seed(3)
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=300)
    state = transformers.LlamaForCausalLM(config).to(torch.bfloat16).state_dict()
    names = list(state)
    shards = [names[i::3] for i in range(3)]
    weight_map = {}
    for i, shard in enumerate(shards):
        file = f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin"
        torch.save({n: state[n] for n in shard}, tmp_path / file)
        weight_map.update({n: file for n in shard})
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config.save_pretrained(str(tmp_path))
    theirs = {}
    for file in sorted(set(weight_map.values())):
        theirs.update(torch.load(tmp_path / file, weights_only=True))
    assert_same(qload.load(tmp_path), theirs)
    assert qload.inspect(str(tmp_path))["format"] == "pytorch"
    # The index must say where each tensor is.
    weight_map[names[0]] = "pytorch_model-00002-of-00003.bin" if weight_map[names[0]].startswith(
        "pytorch_model-00001") else "pytorch_model-00001-of-00003.bin"
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(qload.Error) as e:
        qload.load(tmp_path)
    assert e.value.tensor == names[0]


def test_convert_writes_the_same_tensors_as_safetensors(tmp_path):
    import safetensors.torch

    gen = torch.Generator().manual_seed(4)
    state = {"a.weight": torch.randn(16, 8, generator=gen).to(torch.bfloat16), "a.bias": torch.randn(16, generator=gen)}
    torch.save(state, tmp_path / "model.pt")
    subprocess.run([os.environ["QLOAD_TEST_CLI"], "convert", str(tmp_path / "model.pt"), str(tmp_path / "out")], check=True,
                   capture_output=True)
    assert_same(safetensors.torch.load_file(str(tmp_path / "out" / "model.safetensors")), state)


class System:
    def __reduce__(self):
        return (os.system, ("echo qload-ran-pickle > /dev/null",))


def archive_with(tmp_path, pickled: bytes, name="evil.pt") -> str:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickled)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/data/0", b"\0" * 16)
    return str(path)


@pytest.mark.parametrize("case", ["os.system", "eval", "memo", "truncated-pickle", "nested", "not-a-dict"])
def test_malicious_and_broken_pickles_are_refused(tmp_path, case):
    pickled = {
        "os.system": pickle.dumps({"w": System()}, protocol=2),
        "eval": b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1\x85R.",
        "memo": b"\x80\x02j\xff\xff\xff\x7f.",                   # LONG_BINGET of an entry never stored
        "truncated-pickle": pickle.dumps({"a": 1}, protocol=2)[:-3],
        "nested": b"\x80\x02" + b"]" * 100 + b"a" * 99 + b".",    # 100 lists, each in the next
        "not-a-dict": pickle.dumps([1, 2, 3], protocol=2),
    }[case]
    with pytest.raises(qload.Error) as e:
        qload.load(archive_with(tmp_path, pickled))
    message = str(e.value)
    if case == "os.system":
        assert "system" in message and "refuses global" in message, message
    if case == "eval":
        assert "builtins.eval" in message, message


def test_broken_archives_are_refused(tmp_path):
    gen = torch.Generator().manual_seed(5)
    torch.save({"w": torch.randn(64, 64, generator=gen)}, tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])   # no central directory
    with pytest.raises(qload.Error):
        qload.load(tmp_path / "cut.pt")
    # A compressed data.pkl (torch never writes one) is refused, not inflated.
    with zipfile.ZipFile(tmp_path / "good.pt") as src, zipfile.ZipFile(tmp_path / "deflated.pt", "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    with pytest.raises(qload.Error) as e:
        qload.load(tmp_path / "deflated.pt")
    assert "compressed" in str(e.value)
    # A storage shorter than the tensor that views it.
    with zipfile.ZipFile(tmp_path / "good.pt") as src, zipfile.ZipFile(tmp_path / "short.pt", "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            dst.writestr(info.filename, body[:100] if info.filename.endswith("/data/0") else body)
    with pytest.raises(qload.Error) as e:
        qload.load(tmp_path / "short.pt")
    assert e.value.tensor == "w"
