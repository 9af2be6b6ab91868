"""GGUF files written by gguf-py (llama.cpp's own writer) read by qload: every plain tensor
type equals what gguf-py's reader returns, the metadata is shown, qload's table of ggml block
sizes equals gguf-py's (GGML_QUANT_SIZES) for every type, block-quantized tensors load as
gguf-py's reader gives their bytes, and qload's dequantization equals gguf-py's bit for bit
for every block type gguf-py decodes (quantized by gguf-py where it can quantize)."""
import json
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
        run = subprocess.run([qload_cli, "inspect", "--json", str(path)], capture_output=True, text=True)
        if qtype == QT.Q8_1:
            # gguf-py still sizes Q8_1 blocks as two f32 and 32 int8 (40 bytes); ggml's have
            # been two f16 (36) since 2023, and qload follows ggml: the second tensor is not
            # where qload's size puts it.
            assert block_bytes == 40
            assert run.returncode != 0 and "'y'" in run.stderr, run.stderr
            continue
        assert run.returncode == 0, (qtype.name, run.stderr)
        tensors = {t["name"]: t for t in json.loads(run.stdout)["tensors"]}
        assert tensors["y"]["offset"] - tensors["x"]["offset"] == 2 * block_bytes, qtype.name
        assert tensors["x"]["shape"] == [1, 2 * block_bytes] and tensors["x"]["dtype"] == "U8", qtype.name


# gguf-py can quantize these: random weights quantized by it, dequantized by it and by qload.
QUANTIZED_BY_GGUF_PY = [QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.TQ1_0, QT.TQ2_0, QT.MXFP4]
# gguf-py only dequantizes these: random blocks, with the f16 scales at these byte offsets of
# a block made finite (random bits would give NaN and Inf scales, whose payloads differ).
DECODED_BY_GGUF_PY = {QT.Q2_K: (80, 82), QT.Q3_K: (108,), QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,),
                      QT.IQ4_NL: (0,), QT.IQ4_XS: (0,), QT.NVFP4: ()}


def block_tensors(rng):
    out = []
    for qtype in QUANTIZED_BY_GGUF_PY:
        weights = rng.normal(scale=0.02, size=(6, 512)).astype(np.float32)
        out.append((qtype.name, gguf.quants.quantize(weights, qtype), qtype))
    for qtype, scale_offsets in DECODED_BY_GGUF_PY.items():
        block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, size=(6, 512 // block_elems, block_bytes), dtype=np.uint8)
        for offset in scale_offsets:
            scales = rng.normal(scale=0.01, size=blocks.shape[:2]).astype(np.float16)
            blocks[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(*blocks.shape[:2], 2)
        out.append((qtype.name, blocks.reshape(6, -1), qtype))
    # An expert-stacked (3-D) weight: [experts, rows, cols].
    experts = rng.normal(size=(3, 4, 256)).astype(np.float32)
    out.append(("experts.Q4_0", gguf.quants.quantize(experts, QT.Q4_0), QT.Q4_0))
    return out


def test_block_types_dequantize_as_gguf_py(tmp_path):
    rng = np.random.default_rng(7)
    blocks = block_tensors(rng)
    path = write(tmp_path / "blocks.gguf", [(n, b, {"raw_dtype": t}) for n, b, t in blocks])
    got = qload.load(path, framework="np", dequantize="f32")
    for name, raw, qtype in blocks:
        want = gguf.quants.dequantize(raw, qtype)
        assert got[name].shape == want.shape, name
        assert got[name].dtype == np.float32, name
        assert np.isfinite(want).all(), name
        assert got[name].view(np.uint32).tobytes() == want.view(np.uint32).tobytes(), (
            name, np.abs(got[name] - want).max())
    # bf16: gguf-py's f32 rounded to nearest even.
    bf16 = qload.load(path, framework="np", dequantize="bf16")
    want = gguf.quants.dequantize(blocks[0][1], blocks[0][2]).astype(ml_dtypes.bfloat16)
    assert bf16[blocks[0][0]].tobytes() == want.tobytes()


def test_block_tensors_load_as_their_bytes(tmp_path):
    # Without --dequantize a block tensor is its raw blocks, as gguf-py's reader returns them.
    blocks = block_tensors(np.random.default_rng(8))
    path = write(tmp_path / "blocks.gguf", [(n, b, {"raw_dtype": t}) for n, b, t in blocks])
    loaded = qload.load(path, framework="np")
    for t in gguf.GGUFReader(str(path)).tensors:
        data = np.asarray(t.data)
        assert loaded[t.name].dtype == np.uint8 and loaded[t.name].shape == data.shape, t.name
        assert loaded[t.name].tobytes() == data.tobytes(), t.name


def test_convert_to_safetensors_keeps_every_tensor(tmp_path, qload_cli):
    path = write(tmp_path / "plain.gguf", plain_tensors())
    subprocess.run([qload_cli, "convert", str(path), str(tmp_path / "out")], check=True, capture_output=True)
    converted = qload.load(tmp_path / "out", framework="np")
    for t in gguf.GGUFReader(str(path)).tensors:
        assert converted[t.name].shape == tuple(int(n) for n in reversed(t.shape)), t.name
        assert converted[t.name].tobytes() == np.asarray(t.data).tobytes(), t.name


def test_convert_dequantizes_block_tensors(tmp_path, qload_cli):
    blocks = block_tensors(np.random.default_rng(9))
    path = write(tmp_path / "blocks.gguf", [(n, b, {"raw_dtype": t}) for n, b, t in blocks])
    # Raw blocks in a safetensors file would be a checkpoint nobody can read: refused, by name.
    run = subprocess.run([qload_cli, "convert", str(path), str(tmp_path / "raw")], capture_output=True, text=True)
    assert run.returncode != 0
    assert "blocks have no safetensors form" in run.stderr and "--dequantize" in run.stderr, run.stderr
    subprocess.run([qload_cli, "convert", str(path), str(tmp_path / "out"), "--dequantize", "bf16"], check=True,
                   capture_output=True)
    converted = qload.load(tmp_path / "out", framework="np")
    for name, raw, qtype in blocks:
        want = gguf.quants.dequantize(raw, qtype).astype(ml_dtypes.bfloat16)
        assert converted[name].shape == want.shape, name
        assert converted[name].tobytes() == want.tobytes(), name


def fp8_per_channel(x):
    """FP8 E4M3 with one f32 scale per row, as compressed-tensors defines it: scale = amax / 448,
    q = x / scale rounded to nearest even (ml_dtypes' cast)."""
    scale = (np.abs(x).max(axis=1, keepdims=True) / np.float32(448)).astype(np.float32)
    return (x / scale).astype(ml_dtypes.float8_e4m3fn), scale


def test_convert_requantizes_block_tensors(tmp_path, qload_cli):
    # --dequantize with --quantize: linear block weights decoded, then quantized as a plain
    # weight would be; the embedding and output head (excluded from quantize-on-load) decoded.
    rng = np.random.default_rng(10)
    q4k = {n: raw for n, raw, t in block_tensors(rng) if t == QT.Q4_K}["Q4_K"]
    q6k = {n: raw for n, raw, t in block_tensors(rng) if t == QT.Q6_K}["Q6_K"]
    tensors = [
        ("token_embd.weight", gguf.quants.quantize(rng.normal(size=(6, 512)).astype(np.float32), QT.Q4_0), QT.Q4_0),
        ("blk.0.attn_q.weight", gguf.quants.quantize(rng.normal(size=(8, 512)).astype(np.float32), QT.Q8_0), QT.Q8_0),
        ("blk.0.ffn_up.weight", q4k, QT.Q4_K),
        ("output.weight", q6k, QT.Q6_K),
    ]
    norm = rng.normal(size=(512,)).astype(np.float32)
    path = write(tmp_path / "model.gguf", [(n, b, {"raw_dtype": t}) for n, b, t in tensors] +
                 [("output_norm.weight", norm, {})])
    subprocess.run([qload_cli, "convert", str(path), str(tmp_path / "out"), "--dequantize", "f32", "--quantize",
                    "fp8:per-channel"], check=True, capture_output=True)
    out = qload.load(tmp_path / "out", framework="np")
    for name, raw, qtype in tensors:
        decoded = gguf.quants.dequantize(raw, qtype)
        prefix = name[:-len("weight")]
        if name.startswith("blk."):
            want, scale = fp8_per_channel(decoded)
            assert out[name].dtype == ml_dtypes.float8_e4m3fn, name
            assert out[prefix + "weight_scale"].tobytes() == scale.tobytes(), name
            assert out[name].tobytes() == want.tobytes(), name
        else:
            assert prefix + "weight_scale" not in out, name
            assert out[name].tobytes() == decoded.tobytes(), name
    assert out["output_norm.weight"].tobytes() == norm.tobytes()
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "fbgemm_fp8"  # transformers' per-channel FP8
    assert sorted(config["modules_to_not_convert"]) == ["output", "token_embd"]
    # What converting twice gives: dequantized to f32 first, then quantized.
    subprocess.run([qload_cli, "convert", str(path), str(tmp_path / "f32"), "--dequantize", "f32"], check=True,
                   capture_output=True)
    subprocess.run([qload_cli, "convert", str(tmp_path / "f32"), str(tmp_path / "twice"), "--quantize",
                    "fp8:per-channel"], check=True, capture_output=True)
    twice = qload.load(tmp_path / "twice", framework="np")
    assert sorted(twice) == sorted(out)
    for name in out:
        assert twice[name].tobytes() == out[name].tobytes(), name
