"""Bad input: errors name the file, tensor and offset; failing loads leave nothing behind."""
import gc
import json
import os
import struct
import tracemalloc

import numpy as np
import pytest

import qload


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_missing_file_is_not_found_and_a_file_not_found_error(tmp_path):
    with pytest.raises(qload.NotFoundError) as raised:
        qload.load(tmp_path / "nothing.safetensors", framework="np")
    e = raised.value
    assert isinstance(e, FileNotFoundError) and isinstance(e, qload.Error)
    assert e.code == "not found"
    assert e.file.endswith("nothing.safetensors")


def test_corrupt_header_names_the_file(tmp_path):
    bad = tmp_path / "bad.safetensors"
    header = b'{"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 99]}}'
    bad.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    with pytest.raises(qload.Error) as raised:
        qload.load(bad, framework="np")
    assert raised.value.file.endswith("bad.safetensors")
    assert raised.value.code in ("corrupt", "truncated")


def test_a_lock_mismatch_names_the_tensor(tmp_path, checkpoint, qload_cli):
    import subprocess

    path, _ = checkpoint
    lock = tmp_path / "model.lock"
    subprocess.run([qload_cli, "lock", str(path), "-o", str(lock)], check=True, stdout=subprocess.DEVNULL)
    qload.load(path, lock=lock, framework="np")  # matches
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last tensor's last byte
    path.write_bytes(bytes(data))
    with pytest.raises(qload.ChecksumMismatchError) as raised:
        qload.load(path, lock=lock, framework="np")
    assert raised.value.tensor is not None


def test_a_hundred_failing_loads_leave_no_memory_behind(tmp_path, checkpoint):
    path, _ = checkpoint
    data = path.read_bytes()
    bad = tmp_path / "truncated.safetensors"
    bad.write_bytes(data[: len(data) - 7])
    for _ in range(5):  # warm up: first-use allocations (imports, thread pools) are not leaks
        with pytest.raises(qload.Error):
            qload.load(bad, framework="np")
    gc.collect()
    tracemalloc.start()
    before_py = tracemalloc.get_traced_memory()[0]
    before_rss = rss_bytes()
    for _ in range(100):
        with pytest.raises(qload.Error):
            qload.load(bad, framework="np")
    gc.collect()
    grew_py = tracemalloc.get_traced_memory()[0] - before_py
    tracemalloc.stop()
    grew_rss = rss_bytes() - before_rss
    assert grew_py < 64 * 1024, f"Python memory grew by {grew_py} bytes over 100 failing loads"
    assert grew_rss < 8 << 20, f"RSS grew by {grew_rss} bytes over 100 failing loads"
