"""Checkpoints written by the libraries users have: safetensors.numpy.save_file (with ml_dtypes
for bf16 and fp8), and `qload synth` for quantized layouts (QLOAD_TEST_CLI, set by ctest)."""
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

# The tests' qload sees only the QLOAD_* variables the tests set themselves: the caller's own
# (an unrelated QLOAD_THREADS, a QLOAD_IO for their machine) would change what qload does or
# add warnings to what a test reads. Kept: the harness's QLOAD_TEST_* (QLOAD_TEST_CLI is ctest's
# path to the built CLI) and QLOAD_CUDASIM_*, never read as settings (tests/cli/clean_env.sh).
for _name in [n for n in os.environ if n.startswith("QLOAD_")]:
    if not _name.startswith(("QLOAD_TEST_", "QLOAD_CUDASIM_")):
        del os.environ[_name]
# The harness's host layout: python.aligned_layout runs the suite again with the layout that is
# not the default (as cli.aligned_layout.* does for the CLI's), by this variable, which qload
# never reads itself.
if os.environ.get("QLOAD_TEST_HOST_LAYOUT"):
    os.environ["QLOAD_HOST_LAYOUT"] = os.environ["QLOAD_TEST_HOST_LAYOUT"]


def random_tensors(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal((4, 4)).astype(np.float16),
        "f64": rng.standard_normal((2, 3, 2)),
        "bf16": rng.standard_normal((7, 3)).astype(ml_dtypes.bfloat16),
        "e4m3": rng.standard_normal(16).astype(ml_dtypes.float8_e4m3fn),
        "e5m2": rng.standard_normal(16).astype(ml_dtypes.float8_e5m2),
        "i8": rng.integers(-128, 127, (5,), dtype=np.int8),
        "u8": rng.integers(0, 255, (6,), dtype=np.uint8),
        "i32": rng.integers(-2**31, 2**31 - 1, (2, 2), dtype=np.int32),
        "i64": rng.integers(-2**62, 2**62, (3,), dtype=np.int64),
        "bool": rng.integers(0, 2, (9,)).astype(bool),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


# dtypes safetensors.numpy itself can read back (it has no bf16 / fp8 numpy types)
SAFETENSORS_NUMPY_READS = {"f32", "f16", "f64", "i8", "u8", "i32", "i64", "bool", "scalar", "empty"}


@pytest.fixture
def checkpoint(tmp_path):
    from safetensors.numpy import save_file

    tensors = random_tensors()
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "np", "written_by": "safetensors.numpy"})
    return path, tensors


@pytest.fixture
def qload_cli():
    cli = os.environ.get("QLOAD_TEST_CLI")
    if not cli:
        pytest.skip("QLOAD_TEST_CLI is not set (ctest sets it to the built qload)")
    return cli


def synth(cli: str, out, *extra: str) -> None:
    subprocess.run([cli, "synth", str(out), "--layers", "2", "--hidden", "256", "--intermediate", "512",
                    "--vocab", "300", "--heads", "4", "--kv-heads", "2", "--shards", "2", *extra],
                   check=True, stdout=subprocess.DEVNULL)


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
