"""Tensors that share memory, for qload.torch's save / save_model / load_model.

safetensors refuses to save two names over one storage (the file would hold the bytes twice
and loading would untie them); save_model keeps one name per shared group and load_model maps
the others back. The same rules as safetensors.torch 0.8, so the same names are kept.
"""
from __future__ import annotations

from collections import defaultdict


def _storage(tensor):
    """(device, storage pointer, storage bytes), or None for meta or empty storage."""
    import torch

    if tensor.device == torch.device("meta"):
        return None
    storage = tensor.untyped_storage()
    if storage.data_ptr() == 0 or storage.nbytes() == 0:
        return None
    return (tensor.device, storage.data_ptr(), storage.nbytes())


def _end(tensor) -> int:
    if tensor.nelement() == 0:
        return tensor.data_ptr()
    return tensor.view(-1)[-1].data_ptr() + tensor.element_size()


def _split_disjoint(group: set, state_dict: dict) -> list:
    """A storage's names split where their byte ranges do not overlap (two halves of one
    buffer are not shared)."""
    areas = sorted((state_dict[n].data_ptr(), _end(state_dict[n]), n) for n in group)
    groups = [{areas[0][2]}]
    last_stop = areas[0][1]
    for start, stop, name in areas[1:]:
        if start >= last_stop:
            groups.append({name})
        else:
            groups[-1].add(name)
        last_stop = stop
    return groups


def shared_groups(state_dict: dict) -> list:
    """Sets of names whose tensors overlap in memory (single names included)."""
    by_storage = defaultdict(set)
    for name, tensor in state_dict.items():
        key = _storage(tensor)
        if key is not None:
            by_storage[key].add(name)
    groups = []
    for group in sorted(by_storage.values()):
        groups.extend([group] if len(group) < 2 else _split_disjoint(group, state_dict))
    return groups


def _complete(tensor) -> bool:
    storage = tensor.untyped_storage()
    return tensor.data_ptr() == storage.data_ptr() and tensor.nelement() * tensor.element_size() == storage.nbytes()


def duplicates(state_dict: dict, preferred=()) -> dict:
    """{kept name: [names dropped for it]}: per shared group, the first name (sorted) among those
    covering the whole storage, preferring `preferred` ones (the names a file holds)."""
    preferred = set(preferred)
    dropped = defaultdict(list)
    for group in shared_groups(state_dict):
        complete = {name for name in group if _complete(state_dict[name])}
        if not complete:
            raise RuntimeError(f"Error while trying to find names to remove to save state dict, but found no suitable "
                               f"name to keep for saving amongst: {group}. None is covering the entire storage. "
                               "Refusing to save/load the model since you could be storing much more memory than "
                               "needed (https://huggingface.co/docs/safetensors/torch_shared_tensors).")
        keep = sorted(preferred & complete or complete)[0]
        dropped[keep].extend(name for name in sorted(group) if name != keep)
    return dropped
