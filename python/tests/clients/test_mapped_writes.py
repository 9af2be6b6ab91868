"""Tensors of a mapped load (load_mode mmap) are the file's pages, copy-on-write: torch knows no
read-only tensors, so an in-place op on one must change a private copy, never the file, and
never fault (it did: SIGSEGV, when the mappings were read-only)."""
import hashlib

import torch

import qload
from tiny_models import save_tiny


def test_in_place_ops_on_mapped_tensors_change_neither_the_file_nor_other_loads(tmp_path):
    path = save_tiny("llama", False, tmp_path / "m")
    file = f"{path}/model.safetensors"
    digest = hashlib.sha256(open(file, "rb").read()).hexdigest()
    mapped = qload.load(path, settings={"load_mode": "mmap"})
    name = "model.norm.weight"
    before = mapped[name].clone()
    mapped[name].mul_(2)
    assert torch.equal(mapped[name], before * 2)
    for _, t in qload.stream(path, settings={"load_mode": "mmap"}):
        t.add_(1)
    assert hashlib.sha256(open(file, "rb").read()).hexdigest() == digest
    assert torch.equal(qload.load(path, settings={"load_mode": "mmap"})[name], before)
