"""Ctrl-C during qload.load: the load is cancelled, KeyboardInterrupt is raised at once (not when
the load would have finished), and nothing it held is left behind (threads, descriptors)."""
import os
import signal
import time

import numpy as np
import pytest
import safetensors.numpy

import qload

READS = 64  # 64 tensors of 64 KiB, read in 64 KiB slots: at least 64 reads


def _checkpoint(tmp_path):
    path = tmp_path / "big.safetensors"
    weights = {f"w{i}": np.full((16, 1024), i, dtype=np.float32) for i in range(READS)}  # 64 KiB each
    safetensors.numpy.save_file(weights, str(path))
    return path


def _threads():
    return len(os.listdir("/proc/self/task"))


def _descriptors():
    return len(os.listdir("/proc/self/fd"))


SLOW_READS = {"io_engine": "pread", "load_mode": "read", "slot_bytes": "64KiB", "reads_in_flight": 1,
              "cpu_workers": 1}


def test_ctrl_c_cancels_a_load_and_frees_it(tmp_path):
    path = _checkpoint(tmp_path)
    # A whole load first, so that lazily created state (thread pools, imports) is not counted.
    complete = []
    qload.load(path, framework="np", settings=SLOW_READS, progress=lambda done, total: complete.append(done))
    assert len(complete) >= READS
    threads, descriptors = _threads(), _descriptors()

    calls = []

    def slow_progress(done, total):
        # Each read takes 20 ms more: the whole load would take over a second. The first one
        # presses Ctrl-C (SIGINT to this process, handled by the main thread that waits).
        if not calls:
            os.kill(os.getpid(), signal.SIGINT)
        calls.append(done)
        time.sleep(0.02)

    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        qload.load(path, framework="np", settings=SLOW_READS, progress=slow_progress)
    took = time.monotonic() - began
    # Cancelled: far fewer reads than the load has, and well before it would have ended.
    assert len(calls) < READS // 2, calls
    assert took < READS * 0.02 / 2, took
    # Everything released: the worker threads joined, every file closed.
    assert _threads() == threads
    assert _descriptors() == descriptors
    # And the next load is whole.
    model = qload.load(path, framework="np")
    assert np.array_equal(model["w63"], np.full((16, 1024), 63, dtype=np.float32))


def test_a_load_without_ctrl_c_is_not_disturbed(tmp_path):
    # The signal polling must not turn an ordinary long load into an error.
    path = _checkpoint(tmp_path)
    calls = []
    model = qload.load(path, framework="np", settings=SLOW_READS,
                       progress=lambda done, total: (calls.append(done), time.sleep(0.002)))
    assert len(calls) >= READS
    assert len(model) == READS
