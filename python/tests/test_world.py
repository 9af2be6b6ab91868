"""world=: a load by several processes whose places the caller gives, not torchrun's environment."""
import hashlib
import json
import os
import socket
import subprocess
import sys

import pytest

import qload
from conftest import synth

# One rank: loads with world= and prints a digest of every tensor's name and bytes.
RANK = r"""
import hashlib, json, sys
import qload
path, rank, size, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
recipe = len(sys.argv) > 5
extra = {} if recipe else {"data_parallel": size, "share_reads": True}
model = qload.load(path, framework="np", world={"rank": rank, "world_size": size, "master_port": port}, **extra)
h = hashlib.sha256()
for name in sorted(model):
    h.update(name.encode()); h.update(model[name].tobytes())
print(json.dumps({"digest": h.hexdigest(), "tensors": len(model)}))
"""


def digest(model) -> str:
    h = hashlib.sha256()
    for name in sorted(model):
        h.update(name.encode())
        h.update(model[name].tobytes())
    return h.hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("layout", ["arguments", "recipe"])
def test_two_data_parallel_processes_given_their_places_each_load_the_whole_model(tmp_path, qload_cli, layout):
    synth(qload_cli, tmp_path / "m")
    alone = qload.load(tmp_path / "m", framework="np")
    source = tmp_path / "m"  # data_parallel=2, share_reads=True
    if layout == "recipe":
        source = tmp_path / "dp.lua"
        source.write_text('return qload.recipe { source = "m", devices = "cpu", parallel = { data = 2 } }\n')
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    args = [str(source), "2", str(port)] + (["recipe"] if layout == "recipe" else [])
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, args[0], str(r), *args[1:]], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    results = []
    for r, p in enumerate(ranks):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"rank {r}: {err}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r in results:
        assert r["tensors"] == len(alone) and r["digest"] == digest(alone)


def test_world_arguments_are_checked_before_loading(checkpoint):
    path, _ = checkpoint
    with pytest.raises(TypeError, match="world must be a mapping"):
        qload.load(path, framework="np", world=[0, 2])
    with pytest.raises(ValueError, match="unknown key.*size"):
        qload.load(path, framework="np", world={"rank": 0, "size": 2})
    with pytest.raises(ValueError, match="world needs 'world_size'"):
        qload.load(path, framework="np", world={"rank": 0})
    with pytest.raises(TypeError, match=r"world\['rank'\] must be an int"):
        qload.load(path, framework="np", world={"rank": True, "world_size": 2})
    with pytest.raises(ValueError, match="out of range"):
        qload.load(path, framework="np", world={"rank": -1, "world_size": 2})
    with pytest.raises(ValueError, match="not a TCP port"):
        qload.load(path, framework="np", world={"rank": 0, "world_size": 2, "master_port": 70000})
    with pytest.raises(qload.Error, match="rank 2 of 2"):  # the native check names both
        qload.load(path, framework="np", world={"rank": 2, "world_size": 2}, data_parallel=2)
    with pytest.raises(TypeError, match="data_parallel must be an int"):
        qload.load(path, framework="np", data_parallel="2")
    with pytest.raises(ValueError, match="tensor_parallel = 0"):
        qload.load(path, framework="np", tensor_parallel=0)


def test_a_world_of_one_is_a_plain_load(checkpoint):
    path, written = checkpoint
    model = qload.load(path, framework="np", world={"rank": 0, "world_size": 1})
    assert set(model) == set(written)
