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
    with pytest.raises(ValueError, match="framework"):
        qload.safe_open(path, framework="tf")
    with pytest.raises(ValueError, match="device"):
        qload.safe_open(path, framework="np", device="cuda:0")
