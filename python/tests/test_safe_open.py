"""qload.safe_open behaves like safetensors.safe_open on the same file."""
import gc

import numpy as np
import pytest
import safetensors

import qload
from conftest import SAFETENSORS_NUMPY_READS, same_bytes


def test_keys_metadata_and_tensors_match_safetensors(checkpoint):
    path, written = checkpoint
    with safetensors.safe_open(str(path), framework="np") as theirs, qload.safe_open(path, framework="np") as ours:
        assert ours.keys() == theirs.keys()
        assert ours.metadata() == theirs.metadata()
        for name in SAFETENSORS_NUMPY_READS:
            assert same_bytes(ours.get_tensor(name), theirs.get_tensor(name)), name
            assert ours.get_slice(name).get_shape() == theirs.get_slice(name).get_shape()
            assert ours.get_slice(name).get_dtype() == theirs.get_slice(name).get_dtype()
        for name in ("bf16", "e4m3"):  # safetensors.numpy has no numpy type for these
            assert same_bytes(ours.get_tensor(name), written[name])
            assert ours.get_slice(name).get_dtype() == theirs.get_slice(name).get_dtype()


@pytest.mark.parametrize("index", [
    (slice(0, 2), slice(None)),
    (slice(1, 3), slice(1, 4)),
    (1,),
    (slice(None, None, 2),),
    (Ellipsis, 0),
])
def test_get_slice_indexes_like_safetensors(checkpoint, index):
    path, _ = checkpoint
    with safetensors.safe_open(str(path), framework="np") as theirs, qload.safe_open(path, framework="np") as ours:
        want = theirs.get_slice("f32")[index]
        got = ours.get_slice("f32")[index]
        assert same_bytes(np.ascontiguousarray(got), np.ascontiguousarray(want))


def test_tensors_are_copies_that_outlive_the_file(checkpoint):
    path, written = checkpoint
    with qload.safe_open(path, framework="np") as f:
        t = f.get_tensor("f32")
        s = f.get_slice("bf16")[0:2]
    gc.collect()
    assert same_bytes(t, written["f32"])
    assert same_bytes(s, written["bf16"][0:2])
    t[0, 0] = 1.0  # writable, as safetensors' are
    with pytest.raises(ValueError, match="closed"):
        f.get_tensor("f32")


def test_missing_tensor_is_an_error_naming_it(checkpoint):
    path, _ = checkpoint
    with qload.safe_open(path, framework="np") as f:
        with pytest.raises(qload.NotFoundError, match="nope"):
            f.get_tensor("nope")
        with pytest.raises(qload.Error):
            f.get_slice("nope")


def test_a_file_without_metadata_has_none(tmp_path):
    from safetensors.numpy import save_file

    save_file({"x": np.ones(3, np.float32)}, str(tmp_path / "plain.safetensors"))
    with safetensors.safe_open(str(tmp_path / "plain.safetensors"), framework="np") as theirs:
        with qload.safe_open(tmp_path / "plain.safetensors", framework="np") as ours:
            assert ours.metadata() == theirs.metadata()


def test_framework_and_device_are_checked(checkpoint):
    path, _ = checkpoint
    with pytest.raises(safetensors.SafetensorError, match="framework"):
        qload.safe_open(path, framework="foo")
    with pytest.raises(safetensors.SafetensorError, match="[Dd]evice"):
        qload.safe_open(path, framework="np", device="cuda:0")


# --- probe by probe against safetensors (st_probes.py): zero differences but the documented ones

import pathlib  # noqa: E402

import safetensors.numpy  # noqa: E402

import qload.numpy  # noqa: E402
from st_probe_list import read_probes, write_probes  # noqa: E402
from st_probes import Lib, differences, make_files, run  # noqa: E402


def _numpy_tensors():
    out = {f"t_{np.dtype(d).name}": (np.arange(6) % 3).astype(d).reshape(2, 3)
           for d in (np.float64, np.float32, np.float16, np.int64, np.uint64, np.int32, np.uint32, np.int16, np.uint16,
                     np.int8, np.uint8, np.bool_, np.complex64)}
    out.update(zero_d=np.array(2.5, np.float32), empty=np.zeros((0, 4), np.float32), b=np.ones(3, np.int8))
    return out


def _ml_dtypes_tensors():
    import ml_dtypes

    return {f"t_{np.dtype(d).name}": (np.arange(6) % 3).astype(d).reshape(2, 3)
            for d in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
                      ml_dtypes.float8_e5m2fnuz, np.float32, np.uint8)}


_NUMPY_ERRORS = {
    "not_a_dict": lambda lib, f, t: lib.io.save([1]),
    "not_an_array": lambda lib, f, t: lib.io.save({"a": [1, 2]}),
    "complex128": lambda lib, f, t: lib.io.save({"a": np.zeros(2, np.complex128)}),
    "strings": lambda lib, f, t: lib.io.save({"a": np.array(["x"])}),
    "big_endian": lambda lib, f, t: lib.io.load(lib.io.save({"a": np.arange(3, dtype=">i4")})),
}


def _numpy_probes():
    probes = read_probes("np")
    probes.update(write_probes("np", {"every_dtype": _numpy_tensors, "one": lambda: {"x": np.ones(3, np.float32)},
                                      "unicode_names": lambda: {"é": np.ones(1, np.int8), "a b": np.zeros(2, np.uint8)},
                                      "name_order": lambda: {n: np.zeros(1, np.float32) for n in ("b", "a", "B", "_")}},
                               {"ml_dtypes": _ml_dtypes_tensors}, _NUMPY_ERRORS))
    return probes


def test_every_numpy_probe_matches_safetensors(tmp_path):
    files = make_files(tmp_path)
    probes = _numpy_probes()
    (tmp_path / "theirs").mkdir(), (tmp_path / "ours").mkdir()
    theirs = run(probes, Lib(safetensors.safe_open, safetensors.numpy, safetensors.SafetensorError), files,
                 tmp_path / "theirs")
    ours = run(probes, Lib(qload.safe_open, qload.numpy, safetensors.SafetensorError), files, tmp_path / "ours")
    assert len(probes) > 150
    assert differences(theirs, ours) == []


def test_a_strided_array_is_saved_by_value(tmp_path):
    """safetensors.numpy writes a strided array's memory as it lies (not its values); qload
    writes the values, as np.ascontiguousarray would (a documented difference)."""
    strided = np.arange(6.0)[::2]
    assert same_bytes(qload.numpy.load(qload.numpy.save({"a": strided}))["a"], np.array([0.0, 2.0, 4.0]))


def test_several_metadata_keys_are_written_sorted(tmp_path):
    """safetensors writes metadata in its hash map's order (it changes from run to run); qload
    sorts the keys, so the same input gives the same file. The parsed headers agree."""
    metadata = {"b": "1", "a": "2", "c": "3"}
    ours, theirs = (lib.save({"x": np.ones(2, np.float32)}, metadata=metadata) for lib in (qload.numpy, safetensors.numpy))
    assert len(ours) == len(theirs) and ours[-8:] == theirs[-8:]
    n = int.from_bytes(ours[:8], "little")
    assert ours[8:8 + n].startswith(b'{"__metadata__":{"a":"2","b":"1","c":"3"},')
    assert safetensors.safe_open  # the parsed headers agree:
    import json

    assert json.loads(ours[8:8 + n]) == json.loads(theirs[8:8 + n])


def test_a_file_not_named_safetensors_opens(tmp_path):
    path = pathlib.Path(make_files(tmp_path)["no_suffix"])
    with qload.safe_open(path, "np") as f:
        assert f.get_tensor("w").shape == (3, 4)
