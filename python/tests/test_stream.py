"""qload.stream: every tensor once, in completion order, and the load's error at the end."""
import gc

import numpy as np
import pytest

import qload
from conftest import same_bytes, synth


def test_every_tensor_arrives_once_with_its_bytes(checkpoint):
    path, written = checkpoint
    seen = {}
    for name, tensor in qload.stream(path, framework="np"):
        assert name not in seen
        seen[name] = tensor
    assert set(seen) == set(written)
    for name, want in written.items():
        assert same_bytes(seen[name], want), name


def test_stream_equals_load_on_a_sharded_checkpoint(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    loaded = qload.load(tmp_path / "m", framework="np")
    streamed = dict(qload.stream(tmp_path / "m", settings={"slot_bytes": "64KiB"}, framework="np"))
    assert set(streamed) == set(loaded)
    for name, t in streamed.items():
        assert same_bytes(t, loaded[name]), name


def test_a_stream_abandoned_halfway_ends_the_load(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    it = qload.stream(tmp_path / "m", settings={"slot_bytes": "64KiB"}, framework="np")
    name, first = next(it)
    assert first.size > 0
    del it  # closes the generator: the native stream cancels and joins its load thread
    again = dict(qload.stream(tmp_path / "m", framework="np"))
    assert name in again


def test_a_corrupt_file_raises_from_the_iterator(tmp_path, checkpoint):
    path, _ = checkpoint
    data = bytearray(path.read_bytes())
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(bytes(data[: len(data) - 10]))
    with pytest.raises(qload.Error) as raised:
        for _ in qload.stream(bad, framework="np"):
            pass
    assert raised.value.file is not None and raised.value.file.endswith("truncated.safetensors")


def test_streamed_tensors_point_into_the_loads_memory_and_outlive_the_stream(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    loaded = qload.load(tmp_path / "m", framework="np")
    # The aligned host layout, so that where a tensor lies tells whether it was copied.
    it = qload.stream(tmp_path / "m", settings={"slot_bytes": "64KiB", "host_layout": "aligned"}, framework="np")
    got = [next(it) for _ in range(3)]
    del it  # cancels the load: the arena stays only for the tensors already handed out
    for name, t in got:
        assert same_bytes(t, loaded[name]), name
        # Not a copy: placed in the load's arena at its tensor alignment (256 bytes), which a
        # separately allocated copy would hit one time in 16.
        assert t.__array_interface__["data"][0] % 256 == 0, name


def test_the_exhausted_stream_reports_time_to_first_tensor_and_to_each_tenth(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    it = qload.stream(tmp_path / "m", settings={"slot_bytes": "64KiB"}, framework="np")
    assert it.report is None  # nothing until the load is over and every tensor taken
    names = [name for name, _ in it]
    report = it.report
    assert report is not None and report["tensors"] == len(names)
    assert 0 < report["first_tensor_seconds"] <= report["seconds"]
    tenths = report["tenths_seconds"]
    assert len(tenths) == 10 and tenths == sorted(tenths)
    assert report["first_tensor_seconds"] <= tenths[0] and tenths[-1] <= report["seconds"]


def test_a_failed_stream_has_no_report(tmp_path, checkpoint):
    path, _ = checkpoint
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(path.read_bytes()[:-10])
    it = qload.stream(bad, framework="np")
    with pytest.raises(qload.Error):
        for _ in it:
            pass
    assert it.report is None


def test_mapped_streams_hand_out_views_of_the_files_that_outlive_the_stream(tmp_path, qload_cli):
    synth(qload_cli, tmp_path / "m")
    loaded = qload.load(tmp_path / "m", framework="np")
    streamed = dict(qload.stream(tmp_path / "m", framework="np", settings={"load_mode": "mmap"}))
    gc.collect()  # the stream is gone; its tensors hold the mappings
    assert set(streamed) == set(loaded)
    for name, t in streamed.items():
        assert same_bytes(t, loaded[name]), name
        assert not t.flags.writeable  # the file's pages, not a copy
