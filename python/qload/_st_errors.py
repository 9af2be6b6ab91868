"""Errors of the safetensors-compatible API (safe_open, qload.torch, qload.numpy).

Code written for safetensors catches `safetensors.SafetensorError`; qload's errors keep their own
classes (qload.CorruptError, ...) and, when safetensors is importable, are also instances of
SafetensorError: each qload class gets a subclass deriving from both, made the first time it is
raised. Without safetensors installed nobody can be catching its class, so the qload class
itself is raised.
"""
from __future__ import annotations

import contextlib
import functools

from . import _qload


@functools.lru_cache(maxsize=None)
def _safetensor_error():
    try:
        from safetensors import SafetensorError
    except ImportError:
        return None
    return SafetensorError


@functools.lru_cache(maxsize=None)
def compatible(cls: type) -> type:
    """`cls` (a qload.Error subclass, or a builtin) also deriving from SafetensorError."""
    base = _safetensor_error()
    if base is None or issubclass(cls, base):
        return cls
    return type(cls.__name__, (cls, base), {"__module__": "qload", "__doc__": cls.__doc__})


def error(cls: type, message: str, **attributes) -> BaseException:
    """A new `compatible(cls)` exception carrying qload's attributes (code, file, tensor, offset)."""
    e = compatible(cls)(message)
    for key in ("code", "file", "tensor", "offset"):
        setattr(e, key, attributes.get(key))
    return e


def rewrap(e: BaseException) -> BaseException:
    """The same error as an instance of its compatible class (attributes and cause kept)."""
    cls = compatible(type(e))
    if cls is type(e):
        return e
    out = cls(*e.args)
    out.__dict__.update(getattr(e, "__dict__", {}))
    out.__cause__, out.__traceback__ = e.__cause__, e.__traceback__
    return out


@contextlib.contextmanager
def as_safetensors_errors():
    """Re-raises qload errors inside the block as SafetensorError-compatible ones."""
    try:
        yield
    except _qload.Error as e:
        raise rewrap(e) from None


def missing_tensor(name: str) -> BaseException:
    """What safetensors raises for a name the file lacks (SafetensorError, not KeyError)."""
    return error(_qload.NotFoundError, f"File does not contain tensor {name}", code="not_found", tensor=name)


def closed() -> BaseException:
    return error(_qload.InvalidArgumentError, "File is closed", code="invalid_argument")
