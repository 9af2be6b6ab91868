"""The probes (see st_probes): reading probes for any framework, writing probes for numpy and
torch. Each is probe(lib, files, tmp) -> a value, or raises."""
from __future__ import annotations

import pathlib

from st_probes import ORDER, raw_file, tensor_bytes

# every index form: ints (negative, out of range), slices (steps, bounds past the end, empty,
# backwards, negative), Ellipsis (once, twice), None, lists, floats, strings, too many indices
SLICES = {"int": 1, "neg_int": -1, "neg_int_out": -4, "int_out": 3, "rows": slice(0, 2), "cols": (slice(None), 1),
          "block": (slice(1, 3), slice(1, 4)), "step": slice(None, None, 2), "col_step": (slice(None), slice(None, None, 3)),
          "ellipsis": Ellipsis, "ellipsis_last": (Ellipsis, 0), "ellipsis_mid": (0, Ellipsis, 1), "two_ellipses": (Ellipsis, Ellipsis),
          "empty_tuple": (), "all": slice(None), "empty_range": slice(0, 0), "start_at_end": slice(3, 3), "past_end": slice(0, 10),
          "backwards": slice(2, 1), "neg_start": slice(-2, None), "neg_step": slice(None, None, -1), "zero_step": slice(0, 3, 0),
          "none": None, "list": [0, 1], "empty_list": [], "float": 1.0, "float_bound": slice(0.0, 1), "str": "a",
          "too_many": (0, 0, 0), "scalar_pair": (0, 1), "bool": True}
SCALAR_SLICES = {"ellipsis": Ellipsis, "empty_tuple": (), "all": slice(None), "int": 0, "none": None}


def _open(lib, files, role, framework, **kw):
    return lib.safe_open(files[role], framework, **kw)


def read_probes(fw: str) -> dict:
    """safe_open with framework `fw`: every method, argument, closed-file case and error."""
    p = {}
    for role in ("all", "plain", "empty_meta", "no_suffix"):
        p[f"{fw}.keys.{role}"] = lambda lib, f, t, r=role: _open(lib, f, r, fw).keys()
        p[f"{fw}.offset_keys.{role}"] = lambda lib, f, t, r=role: _open(lib, f, r, fw).offset_keys()
        p[f"{fw}.metadata.{role}"] = lambda lib, f, t, r=role: _sorted(_open(lib, f, r, fw).metadata())
    for name in ORDER:
        p[f"{fw}.get_tensor.{name}"] = lambda lib, f, t, n=name: _open(lib, f, "all", fw).get_tensor(n)
        p[f"{fw}.slice_shape.{name}"] = lambda lib, f, t, n=name: _open(lib, f, "all", fw).get_slice(n).get_shape()
        p[f"{fw}.slice_dtype.{name}"] = lambda lib, f, t, n=name: _open(lib, f, "all", fw).get_slice(n).get_dtype()
    p[f"{fw}.get_tensors"] = lambda lib, f, t: _open(lib, f, "all", fw).get_tensors()
    p[f"{fw}.get_tensors.plain"] = lambda lib, f, t: _open(lib, f, "plain", fw).get_tensors()
    for form, index in SLICES.items():
        p[f"{fw}.slice.{form}"] = lambda lib, f, t, i=index: _open(lib, f, "all", fw).get_slice("f32")[i]
        p[f"{fw}.slice_empty.{form}"] = lambda lib, f, t, i=index: _open(lib, f, "all", fw).get_slice("empty")[i]
    for form, index in SCALAR_SLICES.items():
        p[f"{fw}.slice_0d.{form}"] = lambda lib, f, t, i=index: _open(lib, f, "all", fw).get_slice("scalar")[i]
    p[f"{fw}.slice_bool"] = lambda lib, f, t: _open(lib, f, "all", fw).get_slice("flag")[1:]
    p.update(_closed_probes(fw))
    p.update(_argument_probes(fw))
    for role in ("short", "empty_file", "huge_header", "bad_json", "truncated", "trailing", "bad_dtype", "bad_meta",
                 "wrong_size", "dir"):
        p[f"{fw}.open.{role}"] = lambda lib, f, t, r=role: _open(lib, f, r, fw).keys()
    p[f"{fw}.open.nonexistent"] = lambda lib, f, t: lib.safe_open(str(t / "nope.safetensors"), fw)
    p[f"{fw}.get_tensor.missing"] = lambda lib, f, t: _open(lib, f, "plain", fw).get_tensor("nope")
    p[f"{fw}.get_slice.missing"] = lambda lib, f, t: _open(lib, f, "plain", fw).get_slice("nope")
    p[f"{fw}.get_tensor.int"] = lambda lib, f, t: _open(lib, f, "plain", fw).get_tensor(0)
    p[f"{fw}.get_slice.int"] = lambda lib, f, t: _open(lib, f, "plain", fw).get_slice(0)
    return p


def _sorted(metadata):
    """Metadata as sorted pairs: safetensors' dict comes in its hash map's order, which varies."""
    return metadata if metadata is None else sorted(metadata.items())


def _closed(lib, files, fw, call):
    with lib.safe_open(files["plain"], fw) as f:
        pass
    return call(f)


def _closed_probes(fw: str) -> dict:
    p = {}
    for method in ("keys", "offset_keys", "metadata", "get_tensors"):
        p[f"{fw}.closed.{method}"] = lambda lib, f, t, m=method: _closed(lib, f, fw, lambda o: getattr(o, m)())
    p[f"{fw}.closed.get_tensor"] = lambda lib, f, t: _closed(lib, f, fw, lambda o: o.get_tensor("w"))
    p[f"{fw}.closed.get_slice"] = lambda lib, f, t: _closed(lib, f, fw, lambda o: o.get_slice("w"))
    p[f"{fw}.closed.exit_twice"] = lambda lib, f, t: _closed(lib, f, fw, lambda o: o.__exit__(None, None, None))
    p[f"{fw}.closed.enter_again"] = lambda lib, f, t: _closed(lib, f, fw, lambda o: o.__enter__() is o)

    def slice_after(lib, files, tmp):
        with lib.safe_open(files["plain"], fw) as f:
            s = f.get_slice("w")
        return [s[0:2], s.get_shape(), s.get_dtype(), s[...]]

    p[f"{fw}.closed.slice_taken_inside"] = slice_after
    p[f"{fw}.enter_returns_self"] = lambda lib, f, t: (lambda o: o.__enter__() is o)(_open(lib, f, "plain", fw))
    p[f"{fw}.public_names"] = lambda lib, f, t: sorted(n for n in dir(_open(lib, f, "plain", fw)) if not n.startswith("_"))
    p[f"{fw}.slice_public_names"] = lambda lib, f, t: sorted(
        n for n in dir(_open(lib, f, "plain", fw).get_slice("w")) if not n.startswith("_"))
    p[f"{fw}.slice_len"] = lambda lib, f, t: len(_open(lib, f, "plain", fw).get_slice("w"))
    return p


def _argument_probes(fw: str) -> dict:
    p = {}
    for framework in ("pt", "torch", "np", "numpy", "tf", "tensorflow", "flax", "jax", "mlx", "PT", "foo", None, 1):
        p[f"{fw}.framework.{framework}"] = lambda lib, f, t, x=framework: lib.safe_open(f["plain"], x).keys()
    for framework in ("tf", "flax", "mlx"):
        p[f"{fw}.framework_tensor.{framework}"] = lambda lib, f, t, x=framework: lib.safe_open(f["plain"], x).get_tensor("w")
    for backend in ("mmap", "pread", "foo", None, 1):
        p[f"{fw}.backend.{backend}"] = lambda lib, f, t, b=backend: _open(lib, f, "plain", fw, backend=b).get_tensor("w")
    for device in ("cpu", None, 0, 1, "cuda", "cuda:0", "cuda:1", "mps", "xpu:0", "meta", "foo", -1, "cpu:0", "gpu"):
        p[f"{fw}.device.{device}"] = lambda lib, f, t, d=device: _open(lib, f, "plain", fw, device=d).keys()
    p[f"{fw}.filename.int"] = lambda lib, f, t: lib.safe_open(3, fw)
    p[f"{fw}.filename.bytes"] = lambda lib, f, t: lib.safe_open(f["plain"].encode(), fw)
    p[f"{fw}.filename.path"] = lambda lib, f, t: lib.safe_open(pathlib.Path(f["plain"]), fw).get_tensor("w")
    p[f"{fw}.keywords"] = lambda lib, f, t: lib.safe_open(filename=f["plain"], framework=fw, device="cpu").keys()
    p[f"{fw}.no_framework"] = lambda lib, f, t: lib.safe_open(f["plain"])
    return p


def _roundtrip(lib, tmp, tensors, metadata=None):
    """save, save_file (the file's bytes), load of the bytes and load_file of the file."""
    data = lib.io.save(tensors, metadata=metadata)
    lib.io.save_file(tensors, str(tmp / "out.safetensors"), metadata=metadata)
    on_disk = (tmp / "out.safetensors").read_bytes()
    # safetensors' load(bytes) returns its hash map's order (it varies): compared sorted
    return [data, on_disk, sorted(lib.io.load(data).items()), lib.io.load_file(str(tmp / "out.safetensors"))]


def _saved(lib, tmp, tensors):
    lib.io.save_file(tensors, str(tmp / "out.safetensors"))
    return [lib.io.save(tensors), (tmp / "out.safetensors").read_bytes()]


def write_probes(fw: str, make: dict, save_only: dict, extra_errors: dict) -> dict:
    """save / save_file / load / load_file: exact bytes for `make` (name -> tensors dict builder)
    and for `save_only` (tensors the framework's safetensors load cannot make), metadata forms,
    and errors."""
    p = {}
    for label, build in make.items():
        p[f"{fw}.roundtrip.{label}"] = lambda lib, f, t, b=build: _roundtrip(lib, t, b())
    for label, build in save_only.items():
        p[f"{fw}.saved.{label}"] = lambda lib, f, t, b=build: _saved(lib, t, b())
    first = next(iter(make.values()))
    for label, metadata in {"none": None, "empty": {}, "one": {"format": "pt"}, "escapes": {"k": "a\"b\\\n\u00e9\x01"}}.items():
        p[f"{fw}.metadata.{label}"] = lambda lib, f, t, m=metadata: _roundtrip(lib, t, first(), dict(m) if m else m)
    p[f"{fw}.metadata.int_value"] = lambda lib, f, t: lib.io.save(first(), metadata={"k": 1})
    p[f"{fw}.metadata.int_key"] = lambda lib, f, t: lib.io.save(first(), metadata={1: "v"})
    p[f"{fw}.metadata.list"] = lambda lib, f, t: lib.io.save(first(), metadata=[("a", "b")])
    p[f"{fw}.save.name_int"] = lambda lib, f, t: lib.io.save({1: next(iter(first().values()))})
    p[f"{fw}.save.nonexistent_dir"] = lambda lib, f, t: lib.io.save_file(first(), str(t / "no" / "x.safetensors"))
    p[f"{fw}.save.empty_dict"] = lambda lib, f, t: _roundtrip(lib, t, {})
    p[f"{fw}.load.garbage"] = lambda lib, f, t: lib.io.load(b"abc")
    p[f"{fw}.load.str"] = lambda lib, f, t: lib.io.load("abc")
    p[f"{fw}.load.bytearray"] = lambda lib, f, t: lib.io.load(bytearray(lib.io.save(first())))
    p[f"{fw}.load.memoryview"] = lambda lib, f, t: lib.io.load(memoryview(lib.io.save(first())))
    p[f"{fw}.load.writable"] = lambda lib, f, t: sorted(_written_into(lib.io.load(lib.io.save(first()))).items())
    p[f"{fw}.load_file.writable"] = lambda lib, f, t: _written_into(lib.io.load_file(f["plain"]))
    p[f"{fw}.load_file.missing"] = lambda lib, f, t: lib.io.load_file(str(t / "nope.safetensors"))
    p[f"{fw}.load_file.corrupt"] = lambda lib, f, t: lib.io.load_file(f["bad_json"])
    p[f"{fw}.load_file.backend_pread"] = lambda lib, f, t: lib.io.load_file(f["plain"], backend="pread")
    p[f"{fw}.load_file.backend_bad"] = lambda lib, f, t: lib.io.load_file(f["plain"], backend="foo")
    p[f"{fw}.load.bool_bytes"] = lambda lib, f, t: lib.io.load(pathlib.Path(raw_file(
        t / "b.safetensors", {"b": ("BOOL", [3], tensor_bytes("flag"))})).read_bytes())
    p.update({f"{fw}.save_error.{k}": v for k, v in extra_errors.items()})
    return p


def _written_into(tensors: dict):
    """Writes into each tensor (they must be writable) and returns them."""
    for value in tensors.values():
        if value.ndim and value.shape[0]:
            value[0] = value[0] + 1
    return tensors
