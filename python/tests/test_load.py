"""qload.load and qload.numpy.load_file against the bytes safetensors wrote and read."""
import gc
import glob
import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

import qload
import qload.numpy
from conftest import SAFETENSORS_NUMPY_READS, random_tensors, same_bytes, synth


def test_every_dtype_equals_what_was_written(checkpoint):
    path, written = checkpoint
    model = qload.load(path, framework="np")
    assert set(model) == set(written)
    for name, want in written.items():
        assert same_bytes(model[name], want), name
    assert model["bf16"].dtype == ml_dtypes.bfloat16
    assert model["e4m3"].dtype == ml_dtypes.float8_e4m3fn
    assert model.report["tensors"] == len(written)


def test_numpy_load_file_matches_safetensors(tmp_path):
    # Only the dtypes safetensors.numpy can read back itself (it has no bf16 or fp8 types).
    written = {k: v for k, v in random_tensors(1).items() if k in SAFETENSORS_NUMPY_READS}
    path = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file(written, str(path))
    ours = qload.numpy.load_file(path)
    theirs = safetensors.numpy.load_file(str(path))
    assert set(ours) == set(theirs) == set(written)
    for name in theirs:
        assert same_bytes(ours[name], theirs[name]), name


def test_sharded_directory_matches_safetensors(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    ours = qload.load(tmp_path / "m", framework="np")
    theirs = {}
    for f in glob.glob(str(tmp_path / "m" / "*.safetensors")):
        with safetensors.safe_open(f, framework="np") as sf:
            for k in sf.keys():
                # safetensors.numpy has no bf16 type: compare the raw bytes
                theirs[k] = sf.get_slice(k)
    assert set(ours) == set(theirs)
    for name, sl in theirs.items():
        assert list(ours[name].shape) == sl.get_shape()
        assert sl.get_dtype() == "BF16" and ours[name].dtype == ml_dtypes.bfloat16


def test_tensors_are_zero_copy_and_outlive_the_model(checkpoint):
    path, written = checkpoint
    model = qload.load(path, framework="np")
    kept = model["f32"]
    kept_bf16 = model["bf16"]
    del model
    gc.collect()
    assert same_bytes(kept, written["f32"])
    assert same_bytes(kept_bf16, written["bf16"])
    kept[0, 0] = 42.0  # writable: the load's own memory, not the file's
    assert kept[0, 0] == 42.0


def test_dtype_conversion_on_load(checkpoint):
    path, written = checkpoint
    model = qload.load(path, dtype="f32", framework="np")
    assert model["bf16"].dtype == np.float32
    np.testing.assert_array_equal(model["bf16"], written["bf16"].astype(np.float32))
    assert model["i32"].dtype == np.int32  # integers are not floating tensors: kept


def test_settings_by_name(checkpoint):
    path, written = checkpoint
    model = qload.load(path, settings={"io_engine": "pread", "digests": False, "slot_bytes": "64KiB"}, framework="np")
    assert model.report["engine"] == "pread"
    assert same_bytes(model["f64"], written["f64"])


def test_digests_setting_takes_auto_and_every_boolean_spelling(checkpoint):
    path, written = checkpoint
    for value in ("auto", "on", "off", True, False, "yes", 0):
        qload.check_settings({"digests": value})
    with pytest.raises(qload.InvalidArgumentError, match="not auto, on or off"):
        qload.check_settings({"digests": "maybe"})
    model = qload.load(path, settings={"digests": "on"}, framework="np")  # hashed, with no lock to check
    assert same_bytes(model["f64"], written["f64"])


def test_progress_callback_sees_every_byte(checkpoint):
    path, _ = checkpoint
    calls = []
    qload.load(path, progress=lambda done, total: calls.append((done, total)), framework="np")
    assert calls, "no progress reported"
    assert calls[-1][0] == calls[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


def test_quantized_weights_kept_packed_are_described(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "q", "--quant", "gptq4")
    model = qload.load(tmp_path / "q", framework="np")
    assert model.quantized, "no quantized weights listed"
    q = model.quantized[0]
    assert q["scheme"].startswith("gptq") and q["bits"] == 4 and q["group_size"] == 128
    assert {"qweight", "scales"} <= set(q["parts"])
    for part in q["parts"].values():
        assert part in model
    deq = qload.load(tmp_path / "q", dequantize="bf16", framework="np")
    assert deq.quantized == []
    assert deq[q["name"]].dtype == ml_dtypes.bfloat16
    assert deq[q["name"]].shape == (q["rows"], q["cols"])


def test_wrong_argument_types_and_values_name_the_argument(checkpoint):
    path, _ = checkpoint
    with pytest.raises(TypeError, match="source"):
        qload.load(42, framework="np")
    with pytest.raises(ValueError, match="framework"):
        qload.load(path, framework="jax")
    with pytest.raises(ValueError, match="dtype"):
        qload.load(path, dtype="f8", framework="np")
    with pytest.raises(TypeError, match="settings"):
        qload.load(path, settings=["io_engine=pread"], framework="np")
    with pytest.raises(ValueError, match="nope"):
        qload.load(path, settings={"nope": 1}, framework="np")
    with pytest.raises(ValueError, match="io_engine"):
        qload.load(path, settings={"io_engine": "carrier-pigeon"}, framework="np")


def test_a_recipe_as_source(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    recipe = tmp_path / "load.lua"
    recipe.write_text('return qload.recipe { source = "m", devices = "cpu", dtype = "f32" }\n')
    model = qload.load(recipe, framework="np")
    plain = qload.load(tmp_path / "m", dtype="f32", framework="np")
    assert set(model) == set(plain)
    for name in plain:
        assert same_bytes(model[name], plain[name]), name
    assert all(t.dtype == np.float32 for t in model.values())
    with pytest.raises(ValueError, match="dtype"):  # a recipe's choices are not contradicted
        qload.load(recipe, dtype="bf16", framework="np")


def test_a_recipe_applied_to_a_checkpoint(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "a")
    synth(qload_cli, tmp_path / "b", "--seed", "9")
    # A recipe without a source of its own, used as a template for any checkpoint.
    recipe = tmp_path / "f32.lua"
    recipe.write_text('return qload.recipe { devices = "cpu", dtype = "f32" }\n')
    for name in ("a", "b"):
        model = qload.load(tmp_path / name, recipe=recipe, framework="np")
        plain = qload.load(tmp_path / name, dtype="f32", framework="np")
        assert set(model) == set(plain)
        assert all(same_bytes(model[k], plain[k]) for k in plain)
    streamed = dict(qload.stream(tmp_path / "b", recipe=recipe, framework="np"))
    assert all(t.dtype == np.float32 for t in streamed.values())
    # A recipe with a source of its own: the checkpoint given wins.
    pinned = tmp_path / "pinned.lua"
    pinned.write_text('return qload.recipe { source = "a", dtype = "f32" }\n')
    b = qload.load(tmp_path / "b", recipe=pinned, framework="np")
    assert all(same_bytes(b[k], plain[k]) for k in plain)
    with pytest.raises(ValueError, match="dtype"):  # and its choices are not contradicted
        qload.load(tmp_path / "b", recipe=recipe, dtype="bf16", framework="np")
    with pytest.raises(ValueError, match="recipe"):  # a recipe is applied to a checkpoint, not to a recipe
        qload.load(pinned, recipe=recipe, framework="np")
    with pytest.raises(TypeError, match="recipe"):
        qload.load(tmp_path / "b", recipe=3, framework="np")
    with pytest.raises(qload.NotFoundError, match="nope.lua"):
        qload.load(tmp_path / "b", recipe=tmp_path / "nope.lua", framework="np")


def test_torch_is_the_default_framework_and_its_absence_is_said_before_loading(checkpoint, monkeypatch):
    path, _ = checkpoint
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(ImportError, match="framework='np'"):
        qload.load(path)
    with pytest.raises(ImportError, match="framework='np'"):
        next(qload.stream(path))


def test_numpy_cannot_hold_gpu_memory_and_says_so_before_loading(checkpoint):
    path, _ = checkpoint
    with pytest.raises(ValueError, match="framework='pt'"):
        qload.load(path, device="cuda:0", framework="np")
    with pytest.raises(ValueError, match="framework='pt'"):
        next(qload.stream(path, device="cpu,cuda:0", framework="np"))


def test_regions_load_only_the_rows_or_columns_asked_for(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    whole = qload.load(tmp_path / "m", framework="np")
    regions = {"model.embed_tokens.weight": (0, 100, 300),            # rows, uneven (vocab padding)
               "model.layers.0.self_attn.o_proj.weight": (1, 128, 256),  # columns
               "model.layers.1.mlp.down_proj.weight": (1, 0, 1),
               "model.layers.1.mlp.up_proj.weight": (0, 7, 7)}               # none of it: empty
    part = qload.load(tmp_path / "m", framework="np", regions=regions)
    assert set(part) == set(whole)
    for name, t in part.items():
        if name not in regions:
            assert same_bytes(t, whole[name]), name
            continue
        dim, begin, end = regions[name]
        want = whole[name][begin:end] if dim == 0 else whole[name][:, begin:end]
        assert same_bytes(t, np.ascontiguousarray(want)), name
    assert part.report["read_bytes"] < whole.report["read_bytes"]
    streamed = dict(qload.stream(tmp_path / "m", framework="np", regions=regions))
    assert all(same_bytes(streamed[name], part[name]) for name in part)


def test_bad_regions_name_the_tensor_or_the_argument(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    with pytest.raises(qload.Error, match="model.norm.weight"):
        qload.load(tmp_path / "m", framework="np", regions={"model.norm.weight": (1, 0, 1)})
    with pytest.raises(qload.Error, match="out of bounds"):
        qload.load(tmp_path / "m", framework="np", regions={"model.norm.weight": (0, 0, 100000)})
    with pytest.raises(qload.Error, match="does not have") as raised:  # a typo is not a no-op
        qload.load(tmp_path / "m", framework="np", regions={"model.norm.wieght": (0, 0, 1)})
    assert raised.value.tensor == "model.norm.wieght"
    with pytest.raises(TypeError, match="regions"):
        qload.load(tmp_path / "m", framework="np", regions={"model.norm.weight": (0, 1)})
    with pytest.raises(ValueError, match="regions"):
        qload.load(tmp_path / "m", framework="np", regions={"model.norm.weight": (0, 5, 4)})


def test_regions_under_a_lock_read_whole_tensors_and_check_them(tmp_path, qload_cli):
    import subprocess

    synth(qload_cli, tmp_path / "m")
    lock = tmp_path / "m.lock"
    subprocess.run([qload_cli, "lock", str(tmp_path / "m"), "-o", str(lock)], check=True, capture_output=True)
    regions = {"model.embed_tokens.weight": (0, 10, 20)}
    whole = qload.load(tmp_path / "m", framework="np")["model.embed_tokens.weight"]
    part = qload.load(tmp_path / "m", framework="np", lock=lock, regions=regions)["model.embed_tokens.weight"]
    assert same_bytes(part, np.ascontiguousarray(whole[10:20]))
    # A byte changed outside the region is still found: the tensor was read whole and hashed.
    entry = next(t for t in qload.inspect(tmp_path / "m")["tensors"] if t["name"] == "model.embed_tokens.weight")
    with open(entry["file"], "r+b") as f:
        f.seek(entry["offset"] + entry["nbytes"] - 1)
        byte = f.read(1)
        f.seek(entry["offset"] + entry["nbytes"] - 1)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(qload.Error, match="embed_tokens"):
        qload.load(tmp_path / "m", framework="np", lock=lock, regions=regions)


def test_regions_mapped_are_views_of_the_files(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    regions = {"model.embed_tokens.weight": (0, 100, 300), "model.layers.0.self_attn.o_proj.weight": (1, 128, 256),
               "model.layers.1.mlp.up_proj.weight": (0, 7, 7)}
    read = qload.load(tmp_path / "m", framework="np", regions=regions)
    mapped = qload.load(tmp_path / "m", framework="np", regions=regions, settings={"load_mode": "mmap"})
    assert set(mapped) == set(read)
    for name, t in mapped.items():
        assert t.dtype == read[name].dtype and t.shape == read[name].shape, name
        assert t.tobytes() == read[name].tobytes(), name
        assert not t.flags.writeable
    o_proj = mapped["model.layers.0.self_attn.o_proj.weight"]
    assert o_proj.strides == (256 * 2, 2) and not o_proj.flags.c_contiguous  # a view: the stored rows
    assert mapped.report["engine"] == "mmap"


def test_the_report_is_the_clis_document_key_for_key(checkpoint, qload_cli):
    """One report (session/report.hpp): Python's Model.report and Stream.report have exactly the
    keys and meanings of `qload load --json`, less the two only the CLI knows (the devices it was
    given, the process's peak RSS); the same load gives the same counts."""
    path, tensors = checkpoint
    cli = json.loads(subprocess.run([qload_cli, "load", path, "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    model = qload.load(path, framework="np", progress=False)
    stream = qload.stream(path, framework="np")
    for _ in stream:
        pass
    assert cli["schema"] == model.report["schema"] == stream.report["schema"] == "qload.load/2"
    assert set(cli) - {"device", "peak_rss_bytes"} == set(model.report) == set(stream.report)
    for key in ("tensors", "tensor_bytes", "placed_bytes", "converted_tensors", "decoded_tensors", "mode", "engine"):
        assert cli[key] == model.report[key], key
    assert model.report["tensors"] == len(tensors)
    assert model.report["gb_per_s"] > 0 and isinstance(model.report["stages"], list)


def test_inspect_is_the_clis_document(tmp_path, qload_cli):
    """One inspection (session/inspect.hpp, schema qload.inspect/2): qload.inspect returns
    exactly what `qload inspect --json` prints, quantization included; each tensor names its
    file and the bytes there are its own."""
    synth(qload_cli, tmp_path / "q", "--quant", "gptq4")
    cli = json.loads(subprocess.run([qload_cli, "inspect", "--json", str(tmp_path / "q")], check=True,
                                    capture_output=True, text=True).stdout)
    inspected = qload.inspect(tmp_path / "q")
    assert inspected == cli
    assert inspected["schema"] == "qload.inspect/2" and inspected["tensor_count"] == len(inspected["tensors"])
    assert inspected["tensor_bytes"] == sum(t["nbytes"] for t in inspected["tensors"])
    weights = inspected["quantization"]["logical_tensors"]
    assert weights and all(w["scheme"].startswith("gptq") and w["bits"] == 4 for w in weights)
    assert {w["parts"]["qweight"] for w in weights} <= {t["name"] for t in inspected["tensors"]}
    model = qload.load(tmp_path / "q", framework="np")
    for t in inspected["tensors"][:5]:
        with open(t["file"], "rb") as f:
            f.seek(t["offset"])
            assert f.read(t["nbytes"]) == model[t["name"]].tobytes(), t["name"]


def test_every_spec_field_is_a_keyword_under_the_tables_name():
    """The one spec table (session/spec_fields.hpp, `qload config --spec-fields`): each field it
    gives a Python name is a keyword of qload.load and qload.stream (or the function it names),
    and placement and repack reach the load."""
    import inspect as pyinspect

    from qload import _qload

    fields = _qload.spec_fields()
    assert len(fields) >= 20
    for field, _, _, python in fields:
        if not python or python == "source":
            continue
        if python == "load_into":
            assert callable(qload.load_into), field
            continue
        for function in (qload.load, qload.stream):
            assert python in pyinspect.signature(function).parameters, (field, python, function.__name__)


def test_placement_and_repack_reach_the_load(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "q", "--quant", "gptq4")
    def layer_devices(placement):
        model = qload.load(tmp_path / "q", framework="np", device="cpu:0,cpu:1", placement=placement)
        return {q["device"] for q in model.quantized if ".layers.0." in q["name"]}

    assert len(layer_devices("by-layer")) == 1  # a whole layer on one device
    assert len(layer_devices("round-robin")) == 2  # its weights spread over both
    repacked = qload.load(tmp_path / "q", framework="np", repack=True)
    assert repacked.quantized and all(q["scheme"] == "gptq" for q in repacked.quantized)
    with pytest.raises(ValueError, match="placement"):
        qload.load(tmp_path / "q", framework="np", placement="diagonal")
    with pytest.raises(TypeError, match="repack"):
        qload.load(tmp_path / "q", framework="np", repack="yes")
