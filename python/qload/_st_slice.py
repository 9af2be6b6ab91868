"""The index rules of safetensors' get_slice for the numpy framework (and every framework but
torch, which indexes a torch view and so raises torch's own errors, as safetensors does).

safetensors 0.8 slices non-torch tensors itself: ints, slices with a positive step and one
Ellipsis; no None, no lists, no negative slice bounds, and a slice bound past the end is an
error rather than clamped. The same rules here, with the same exception types.
"""
from __future__ import annotations

import operator

from . import _qload
from ._st_errors import error


def _fail(message: str) -> BaseException:
    return error(_qload.InvalidArgumentError, message, code="invalid_argument")


def _items(index) -> tuple:
    if isinstance(index, list):
        raise _fail("Non empty lists are not implemented")
    items = index if isinstance(index, tuple) else (index,)
    for position, item in enumerate(items):
        if not (item is Ellipsis or isinstance(item, slice) or hasattr(item, "__index__")):
            raise _fail(f"Unsupported slice index at position {position}: expected slice, int, or ellipsis")
    if sum(item is Ellipsis for item in items) > 1:
        raise _fail("Only one ellipsis (...) is allowed in slice index")
    return items


def _bound(value, default: int) -> int:
    if value is None:
        return default
    value = operator.index(value)  # a float is a TypeError, as in safetensors
    if value < 0:
        raise OverflowError("can't convert negative int to unsigned")
    return value


def _one(item, size: int, dim: int, shape: list):
    """The index for one dimension, checked as safetensors checks it."""
    if isinstance(item, slice):
        step = 1 if item.step is None else operator.index(item.step)
        if step <= 0:
            raise _fail(f"Slice step must be a positive integer, got {step}")
        start, stop = _bound(item.start, 0), _bound(item.stop, size)
        if start >= size or stop > size:
            bad = start if start >= size else stop - 1
            raise _fail(f"index {bad} out of bounds for tensor dimension #{dim} of size {size} (shape {shape})")
        if stop < start:
            raise _fail(f"slice {start}:{stop} of dimension #{dim} runs backwards")
        return slice(start, stop, step)
    value = operator.index(item)
    if value < -size:
        raise _fail(f"Invalid index {value} for dimension {dim} of size {size}")
    if value < 0:
        value += size
    if value >= size:
        raise _fail(f"index {value} out of bounds for tensor dimension #{dim} of size {size} (shape {shape})")
    return value


def checked_index(index, shape: list) -> tuple:
    """`index` as a tuple numpy applies with the same result as safetensors' slicing."""
    if isinstance(index, list) and not index:
        index = slice(0, 0)  # safetensors reads `[]` as an empty range of the first dimension
    items = _items(index)
    given = [item for item in items if item is not Ellipsis]
    if len(given) > len(shape):
        raise _fail(f"more slicing indexes than dimensions in tensor (shape {shape})")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = (slice(None),) * (len(shape) - len(given))
        items = items[:at] + fill + items[at + 1:]
    return tuple(_one(item, shape[dim], dim, shape) for dim, item in enumerate(items))
