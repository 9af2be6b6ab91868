"""qload.safe_open (framework "pt") and qload.torch against safetensors 0.8, probe by probe
(../st_probes.py): reading, writing byte for byte, save_model / load_model, a model saved by
transformers. Zero differences but the documented ones."""
import pathlib
import sys

import safetensors
import safetensors.torch
import torch

import qload
import qload.torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from st_probe_list import read_probes, write_probes  # noqa: E402
from st_probes import Lib, differences, make_files, normalize, run  # noqa: E402
from tiny_models import save_tiny  # noqa: E402


def _torch_tensors():
    dtypes = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint64, torch.int32,
              torch.uint32, torch.int16, torch.uint16, torch.int8, torch.uint8, torch.bool, torch.complex64,
              torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
    out = {f"t_{str(d).split('.')[-1]}": (torch.arange(6) % 3).to(d).reshape(2, 3) for d in dtypes}
    out.update(zero_d=torch.tensor(2.5), empty=torch.zeros(0, 4), b=torch.ones(3, dtype=torch.int8))
    return out


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.b.weight = self.a.weight  # tied: one storage, two names


def _model_probes():
    def save_model(lib, f, t):
        torch.manual_seed(0)
        lib.io.save_model(_Tied(), str(t / "m.safetensors"))
        return (t / "m.safetensors").read_bytes()

    def load_model(lib, f, t, strict=True, model=_Tied):
        torch.manual_seed(0)
        safetensors.torch.save_model(_Tied(), str(t / "m.safetensors"))
        torch.manual_seed(1)
        target = model()
        result = lib.io.load_model(target, str(t / "m.safetensors"), strict=strict)
        return [sorted(result[0]), sorted(result[1]), target.state_dict()]

    x = torch.zeros(4)
    return {"pt.save_model.tied": save_model, "pt.load_model.tied": load_model,
            "pt.load_model.strict_mismatch": lambda lib, f, t: load_model(lib, f, t, model=lambda: torch.nn.Linear(4, 4)),
            "pt.load_model.lenient": lambda lib, f, t: load_model(lib, f, t, False, lambda: torch.nn.Linear(4, 4)),
            "pt.save_error.shared": lambda lib, f, t: lib.io.save({"a": x, "b": x}),
            "pt.save_error.shared_view": lambda lib, f, t: lib.io.save({"a": x, "b": x[:2]}),
            "pt.save_error.non_contiguous": lambda lib, f, t: lib.io.save({"a": torch.zeros(3, 3).t()}),
            "pt.save_error.sparse": lambda lib, f, t: lib.io.save({"a": torch.zeros(3, 3).to_sparse()}),
            "pt.save_error.complex128": lambda lib, f, t: lib.io.save({"a": torch.zeros(3, dtype=torch.complex128)}),
            "pt.save_error.not_a_dict": lambda lib, f, t: lib.io.save([1]),
            "pt.save_error.not_a_tensor": lambda lib, f, t: lib.io.save({"a": 1})}


def _torch_probes():
    probes = read_probes("pt")
    probes.update(write_probes("pt", {"every_dtype": _torch_tensors, "one": lambda: {"x": torch.ones(3)},
                                      "name_order": lambda: {n: torch.zeros(1) for n in ("b", "a", "B", "_")}},
                               {}, {}))
    probes.update(_model_probes())
    return probes


def _libs():
    return (Lib(safetensors.safe_open, safetensors.torch, safetensors.SafetensorError),
            Lib(qload.safe_open, qload.torch, safetensors.SafetensorError))


def test_every_torch_probe_matches_safetensors(tmp_path):
    files = make_files(tmp_path)
    probes = _torch_probes()
    theirs, ours = _libs()
    (tmp_path / "theirs").mkdir(), (tmp_path / "ours").mkdir()
    results = run(probes, theirs, files, tmp_path / "theirs"), run(probes, ours, files, tmp_path / "ours")
    assert len(probes) > 150
    assert differences(*results) == []


def test_a_transformers_checkpoint_reads_and_writes_the_same(tmp_path):
    path = pathlib.Path(save_tiny("llama", True, tmp_path / "llama")) / "model.safetensors"
    with safetensors.safe_open(str(path), "pt") as theirs, qload.safe_open(path, "pt") as ours:
        assert ours.keys() == theirs.keys() and ours.offset_keys() == theirs.offset_keys()
        assert ours.metadata() == theirs.metadata()
        assert normalize(ours.get_tensors()) == normalize(theirs.get_tensors())
        tensors = theirs.get_tensors()
    assert qload.torch.save(tensors, theirs_metadata := {"format": "pt"}) == safetensors.torch.save(tensors, theirs_metadata)
    assert normalize(qload.torch.load_file(path)) == normalize(safetensors.torch.load_file(path))


def test_load_file_tensors_are_writable_and_the_file_stays(tmp_path):
    """load_mode auto may map the file (a private copy-on-write mapping): writes stay in memory."""
    path = tmp_path / "w.safetensors"
    safetensors.torch.save_file({"w": torch.arange(4.0)}, str(path))
    before = path.read_bytes()
    for backend in (None, "mmap", "pread"):
        tensors = qload.torch.load_file(path, backend=backend)
        tensors["w"].add_(1)
        assert tensors["w"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert path.read_bytes() == before


def test_the_coming_from_safetensors_recipe_runs(tmp_path, monkeypatch):
    """docs/python.md's recipe, extracted and run as written."""
    doc = (pathlib.Path(__file__).resolve().parents[3] / "docs" / "python.md").read_text()
    section = doc[doc.index("### Coming from safetensors"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n\nWhat is the same")]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/python.md", "exec"), {})
    assert safetensors.safe_open("model.safetensors", "pt").metadata() == {"format": "pt"}
