"""What the parallel CLI tests share: reading safetensors files, and putting a device's shard
of a tensor back where `qload plan --json` says it came from."""
import json
import os
import struct

ELEMENT_BYTES = {"BF16": 2, "F16": 2, "F32": 4}


def read_safetensors(path):
    """name -> (dtype, shape, bytes) of every tensor in the file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"], data[t["data_offsets"][0]:t["data_offsets"][1]])
            for name, t in header.items()}


def assert_whole_copy(dump_path, source, label):
    """The dump at `dump_path` holds every tensor of `source` (read_checkpoint), byte for byte."""
    dumped = read_safetensors(dump_path)
    assert sorted(dumped) == sorted(source), label
    for name, (_, _, full) in source.items():
        assert dumped[name][2] == full, f"{label}: {name} differs"


def read_checkpoint(directory):
    """Every tensor of every .safetensors file in `directory`."""
    tensors = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(directory, name)))
    return tensors


class Rebuilt:
    """The tensor `full` (dtype, shape, bytes) rebuilt from shards, counting how often each
    element is covered."""

    def __init__(self, dtype, shape, full):
        self.e = ELEMENT_BYTES[dtype]
        self.rest = 1
        for x in shape[1:]:
            self.rest *= x
        self.bytes = bytearray(len(full))
        self.covered = [0] * (len(full) // self.e)

    def place(self, shard, shard_bytes):
        """Puts `shard_bytes` where the plan's shard entry (rows, cols) says; returns whether
        they were exactly the shard's size."""
        e, rest = self.e, self.rest
        c0, c1 = shard["cols"]
        width = c1 - c0
        srow = 0
        for r0, r1 in shard["rows"]:
            for r in range(r0, r1):
                self.bytes[(r * rest + c0) * e:(r * rest + c1) * e] = shard_bytes[srow * width * e:(srow + 1) * width * e]
                for k in range(r * rest + c0, r * rest + c1):
                    self.covered[k] += 1
                srow += 1
        return srow * width * e == len(shard_bytes)


def rebuild_from_ranks(checkpoint, plans, dump_dir):
    """Puts every shard of the per-rank dumps in `dump_dir` (rank<R>.<device>.safetensors)
    back where rank R's `qload plan --json` (`plans[R]`) says, and checks that they rebuild
    every tensor of `checkpoint`, each element covered. Returns, per rank, its devices and the
    number of copies it held."""
    source = read_checkpoint(checkpoint)
    rebuilt = {name: Rebuilt(dtype, shape, full) for name, (dtype, shape, full) in source.items()}
    ranks = []
    for r, plan in enumerate(plans):
        prefix = f"rank{r}."
        dumps = {name[len(prefix):-len(".safetensors")]: read_safetensors(os.path.join(dump_dir, name))
                 for name in os.listdir(dump_dir) if name.startswith(prefix)}
        held = 0
        for t in plan["tensors"]:
            for sh in t.get("shards", []):
                held += 1
                assert rebuilt[t["name"]].place(sh, dumps[sh["device"]][t["name"]][2]), (t["name"], r)
        ranks.append((sorted(dumps), held))
    for name, (_, _, full) in source.items():
        assert bytes(rebuilt[name].bytes) == full, f"{name}: the ranks' shards do not rebuild it"
        assert min(rebuilt[name].covered) >= 1, f"{name}: an element is on no rank"
    return ranks
