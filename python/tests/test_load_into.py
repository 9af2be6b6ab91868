"""qload.load_into with numpy destinations: the checkpoint's bytes land in arrays the caller
allocated (every dtype safetensors.numpy writes, bf16 and fp8 through ml_dtypes), converted
where the destination's float dtype differs, rows or columns of a region, the rest skipped or
handed back; destinations qload cannot fill are refused before anything is written; a load that
fails part way says which destinations it completed."""
import subprocess

import ml_dtypes
import numpy as np
import pytest

import qload


def empty_like(tensors, **overrides):
    """Destinations of each tensor's dtype and shape, filled with a marker byte."""
    out = {}
    for name, value in tensors.items():
        dest = np.empty(value.shape, dtype=overrides.get(name, value.dtype))
        dest.reshape(-1).view(np.uint8).fill(0xAB)
        out[name] = dest
    return out


def test_every_tensor_lands_in_the_callers_arrays(checkpoint):
    path, tensors = checkpoint
    dests = empty_like(tensors)
    report = qload.load_into(path, dests)
    for name, want in tensors.items():
        assert dests[name].dtype == want.dtype and dests[name].shape == want.shape, name
        assert dests[name].tobytes() == want.tobytes(), name
    assert report["tensors"] == len(tensors)
    assert report["missing"] == []


def test_float_destinations_convert_on_load_and_regions_keep_their_rows_or_columns(checkpoint):
    path, tensors = checkpoint
    f16_as_f32 = np.empty((4, 4), np.float32)
    bf16_as_f32 = np.empty((7, 3), np.float32)
    rows = np.empty((2, 5), np.float32)        # rows 1..3 of f32 [3, 5]
    cols = np.empty((2, 3, 2), np.float64)     # dim 1 of a 3-D tensor is not a region: refused below
    i32_cols = np.empty((2, 1), np.int32)      # column 1 of i32 [2, 2]
    qload.load_into(path, {"f16": f16_as_f32, "bf16": bf16_as_f32, "f32": (rows, (0, 1, 3)),
                           "i32": (i32_cols, (1, 1, 2))})
    assert np.array_equal(f16_as_f32, tensors["f16"].astype(np.float32))
    assert np.array_equal(bf16_as_f32, tensors["bf16"].astype(np.float32))
    assert np.array_equal(rows, tensors["f32"][1:3])
    assert np.array_equal(i32_cols, tensors["i32"][:, 1:2])
    with pytest.raises(qload.InvalidArgumentError) as e:
        qload.load_into(path, {"f64": (cols, (1, 0, 3))})
    assert e.value.tensor == "f64"


def test_views_of_some_columns_take_each_row_and_leave_the_columns_around_them(checkpoint):
    """A destination whose rows are further apart than their length (a column slice of a wider
    array, as a projection's part of a fused parameter): each row lands in its columns, the
    columns around it keep the caller's values, conversions included; two such parts side by
    side in one array do not overlap, while parts sharing a column do and are refused."""
    path, tensors = checkpoint
    fused = np.full((3, 14), 7, np.float32)         # f32 [3, 5] at columns 1..6, i32's column 1 nowhere
    f16_rows = np.full((4, 9), 7, np.float32)       # f16 [4, 4] converted at columns 3..7
    qload.load_into(path, {"f32": fused[:, 1:6], "bf16": (fused[:, 8:11], (0, 0, 3)), "f16": f16_rows[:, 3:7]})
    want = np.full((3, 14), 7, np.float32)
    want[:, 1:6] = tensors["f32"]
    want[:, 8:11] = tensors["bf16"][:3].astype(np.float32)
    assert np.array_equal(fused, want)
    want = np.full((4, 9), 7, np.float32)
    want[:, 3:7] = tensors["f16"].astype(np.float32)
    assert np.array_equal(f16_rows, want)
    with pytest.raises(qload.InvalidArgumentError, match="overlaps"):
        qload.load_into(path, {"f32": fused[:, 1:6], "bf16": (fused[:, 5:8], (0, 0, 3))})
    assert np.array_equal(fused[:, 1:6], tensors["f32"])
    with pytest.raises(ValueError, match="reverse order"):
        qload.load_into(path, {"f32": fused[::-1, 1:6]})


def test_rest_true_hands_back_the_tensors_without_a_destination(checkpoint):
    path, tensors = checkpoint
    f32 = np.empty((3, 5), np.float32)
    model = qload.load_into(path, {"f32": f32}, rest=True, framework="np")
    assert np.array_equal(f32, tensors["f32"])
    assert "f32" not in model and set(model) == set(tensors) - {"f32"}
    assert model.report["tensors"] == len(tensors)
    assert model["i64"].tobytes() == tensors["i64"].tobytes()


@pytest.mark.parametrize("case", ["dtype", "shape", "unknown", "read-only", "overlap", "strided", "type"])
def test_destinations_qload_cannot_fill_are_refused_before_anything_is_written(checkpoint, case):
    path, tensors = checkpoint
    dests = empty_like(tensors)
    expected = qload.InvalidArgumentError
    if case == "dtype":
        dests["f32"] = np.full((3, 5), 7, np.int32)
    elif case == "shape":
        dests["f32"] = np.full((5, 3), 7, np.float32)
    elif case == "unknown":
        dests["no.such.tensor"] = np.zeros(3, np.float32)
        expected = qload.NotFoundError
    elif case == "read-only":
        dests["f32"] = np.full((3, 5), 7, np.float32)
        dests["f32"].flags.writeable = False
        expected = ValueError
    elif case == "overlap":
        both = np.full(15 + 16, 7, np.float32)
        dests["f32"] = both[:15].reshape(3, 5)
        dests["f16"] = both[14:30].view(np.uint16).view(np.float16)[:16].reshape(4, 4)
    elif case == "strided":
        dests["f32"] = np.full((5, 3), 7, np.float32).T
        expected = ValueError
    elif case == "type":
        dests["f32"] = [[0.0] * 5] * 3
        expected = TypeError
    before = {n: (d.tobytes() if hasattr(d, "tobytes") else None) for n, d in dests.items()}
    with pytest.raises(expected) as e:
        qload.load_into(path, dests)
    if isinstance(e.value, qload.Error):
        assert e.value.tensor in ("f32", "f16", "no.such.tensor"), str(e.value)
    for name, d in dests.items():
        if before[name] is not None:
            assert d.tobytes() == before[name], f"{name} was written although the load was refused"


def test_a_load_that_fails_part_way_lists_the_destinations_it_completed(tmp_path, qload_cli):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    tensors = {f"t{i}": rng.standard_normal((64, 64)).astype(np.float32) for i in range(6)}
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    lock = tmp_path / "qload.lock"
    subprocess.run([qload_cli, "lock", str(path), "-o", str(lock)], check=True, stdout=subprocess.DEVNULL)
    # t5 changes after the lock was made (same size): its digest no longer matches.
    tensors["t5"] = tensors["t5"] + 1
    save_file(tensors, str(path))
    dests = empty_like(tensors)
    with pytest.raises(qload.ChecksumMismatchError) as e:
        qload.load_into(path, dests, lock=lock)
    assert e.value.tensor == "t5"
    assert "t5" not in e.value.written
    for name in e.value.written:
        assert dests[name].tobytes() == tensors[name].tobytes(), name
    # Without the lock every destination completes.
    report = qload.load_into(path, dests)
    assert report["tensors"] == 6 and all(np.array_equal(dests[n], tensors[n]) for n in tensors)


def test_bf16_and_fp8_arrays_of_ml_dtypes_are_destinations(checkpoint):
    path, tensors = checkpoint
    bf16 = np.empty((7, 3), ml_dtypes.bfloat16)
    e4m3 = np.empty(16, ml_dtypes.float8_e4m3fn)
    qload.load_into(path, {"bf16": bf16, "e4m3": e4m3})
    assert bf16.tobytes() == tensors["bf16"].tobytes()
    assert e4m3.tobytes() == tensors["e4m3"].tobytes()


def test_rows_in_the_callers_order_make_a_permutation(checkpoint):
    path, tensors = checkpoint
    order = [(2, 3), (0, 1), (1, 2), (2, 3)]  # f32 [3, 5]: rows 2, 0, 1, 2
    dest = np.empty((4, 5), np.float32)
    qload.load_into(path, {"f32": (dest, order)})
    assert np.array_equal(dest, tensors["f32"][[2, 0, 1, 2]])
    # Each range a (begin, end) pair of non-negative ints: bools, negatives, floats, numpy
    # ints, strings and sets are refused before anything is read.
    for bad in ([(0, 1, 2)], [(0,)], [(True, 1)], [(0, -1)], [(0.0, 1)], [(np.int64(0), 1)], ["01"], [{0, 1}],
                [(0, 1), 5]):
        with pytest.raises(TypeError, match="must be a list of"):
            qload.load_into(path, {"f32": (dest, bad)})
    assert np.array_equal(dest, tensors["f32"][[2, 0, 1, 2]])
