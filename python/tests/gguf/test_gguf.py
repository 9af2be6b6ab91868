"""GGUF files written by gguf-py (llama.cpp's own writer) read by qload: every plain tensor
type equals what gguf-py's reader returns, the metadata is shown, and qload's table of ggml
block sizes equals gguf-py's (GGML_QUANT_SIZES) for every type."""
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

import gguf
import qload

QT = gguf.GGMLQuantizationType


def write(path, tensors, alignment=None, extra=lambda w: None):
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_context_length(4096)
    w.add_float32("test.rope_scale", 0.5)
    w.add_bool("test.flag", True)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(40)])
    w.add_array("test.small", [1, 2, 3])
    extra(w)
    for name, array, kwargs in tensors:
        w.add_tensor(name, array, **kwargs)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def plain_tensors():
    rng = np.random.default_rng(5)
    bf16_bits = rng.normal(size=(4, 64)).astype(ml_dtypes.bfloat16).view(np.uint16)
    return [
        ("f32", rng.normal(size=(8, 32)).astype(np.float32), {}),
        ("f16", rng.normal(size=(3, 5, 32)).astype(np.float16), {}),
        ("f64", rng.normal(size=(7,)).astype(np.float64), {}),
        ("i8", rng.integers(-128, 127, size=(2, 16), dtype=np.int8), {}),
        ("i16", rng.integers(-30000, 30000, size=(16,), dtype=np.int16), {}),
        ("i32", rng.integers(-(2**31), 2**31 - 1, size=(4, 4), dtype=np.int32), {}),
        ("i64", rng.integers(-(2**62), 2**62, size=(3,), dtype=np.int64), {}),
        ("bf16", bf16_bits, {"raw_dtype": QT.BF16}),
    ]


def test_plain_tensors_equal_gguf_py(tmp_path):
    path = write(tmp_path / "plain.gguf", plain_tensors())
    reader = gguf.GGUFReader(str(path))
    loaded = qload.load(path, framework="np")
    assert sorted(loaded) == sorted(t.name for t in reader.tensors)
    for t in reader.tensors:
        got = loaded[t.name]
        assert got.shape == tuple(int(n) for n in reversed(t.shape)), t.name  # ggml's dims, numpy order
        assert got.tobytes() == np.asarray(t.data).tobytes(), t.name  # (gguf-py gives bf16 as bytes)
    assert loaded["bf16"].dtype == ml_dtypes.bfloat16


def test_metadata_is_shown(tmp_path):
    path = write(tmp_path / "plain.gguf", plain_tensors())
    meta = qload.inspect(path)["files"][0]["metadata"]
    assert meta["general.architecture"] == "llama"
    assert meta["llama.context_length"] == "4096"
    assert meta["test.rope_scale"] == "0.5"
    assert meta["test.flag"] == "true"
    assert meta["test.small"] == "[1, 2, 3]"
    assert meta["tokenizer.ggml.tokens"] == "[40 x string]"


def test_block_sizes_equal_gguf_py(tmp_path, qload_cli):
    # Two tensors of each block type, packed without padding (alignment 1): the second one's
    # offset is where gguf-py's block size puts it, and qload checks it against its own.
    for qtype, (block_elems, block_bytes) in gguf.GGML_QUANT_SIZES.items():
        if block_elems == 1:
            continue
        raw = np.zeros((1, 2 * block_bytes), dtype=np.uint8)  # bytes: gguf-py makes it 2 blocks' elements
        tensors = [(n, raw, {"raw_dtype": qtype}) for n in ("x", "y")]
        path = write(tmp_path / f"{qtype.name}.gguf", tensors, alignment=1)
        run = subprocess.run([qload_cli, "inspect", str(path)], capture_output=True, text=True)
        # The header parses (sizes agree); the driver then refuses block types by name, for now.
        assert run.returncode != 0, qtype.name
        assert f"ggml type {qtype.name}: GGML block-quantized tensors are not loaded yet" in run.stderr, (
            qtype.name, run.stderr)


def test_convert_to_safetensors_keeps_every_tensor(tmp_path, qload_cli):
    path = write(tmp_path / "plain.gguf", plain_tensors())
    subprocess.run([qload_cli, "convert", str(path), str(tmp_path / "out")], check=True, capture_output=True)
    converted = qload.load(tmp_path / "out", framework="np")
    for t in gguf.GGUFReader(str(path)).tensors:
        assert converted[t.name].shape == tuple(int(n) for n in reversed(t.shape)), t.name
        assert converted[t.name].tobytes() == np.asarray(t.data).tobytes(), t.name
