"""The files of a safetensors checkpoint: a single ``.safetensors`` file, ``model.safetensors``,
or the shards ``model.safetensors.index.json`` lists (its ``weight_map``: tensor name -> shard
file name, relative to the index's directory; the Hugging Face sharded-checkpoint format).
"""

from __future__ import annotations

import json
import os

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def checkpoint_files(model_path: str) -> list[str]:
    """The safetensors files of a checkpoint, in index order, each once however the index spells
    its name (``./a.safetensors`` and ``a.safetensors`` are one file).

    Without an index, the regular files named ``*.safetensors`` (a directory of that name is not
    one: GeeeekExplorer/nano-vllm#272).

    Raises:
        FileNotFoundError: if there is no safetensors file, or the index names a missing shard
            or one that is not a regular file.
        ValueError: the index maps a tensor to a file that is not ``.safetensors``, or to one
            outside ``model_path`` (an absolute path, or a name whose ``..`` leaves the directory;
            the name is checked, not where it resolves: a Hugging Face cache snapshot's shards are
            links into ``../../blobs``).
    """
    if os.path.isfile(model_path):
        if not model_path.endswith(".safetensors"):
            raise FileNotFoundError(f"{model_path}: not a .safetensors file")
        return [model_path]
    index = os.path.join(model_path, INDEX_FILE)
    if os.path.exists(index):
        weight_map = index_weight_map(model_path)
        # one file, however the index spells it (``./a.safetensors`` and ``a.safetensors``): opened
        # twice, every tensor of it would read as stored twice
        by_path: dict[str, str] = {}
        for v in weight_map.values():
            by_path.setdefault(_shard_path(model_path, v), v)
        files, paths = list(by_path.values()), list(by_path)
        for name, p in zip(files, paths):
            if os.path.isabs(name) or os.path.normpath(name).split(os.sep)[0] == os.pardir:
                k = next(k for k, v in weight_map.items() if v == name)
                raise ValueError(
                    f"{index}: weight_map sends {k} to {name!r}, which is outside the model "
                    "directory (shard names are relative to the directory of the index)"
                )
            if not name.endswith(".safetensors"):
                k = next(k for k, v in weight_map.items() if v == name)
                raise ValueError(
                    f"{index}: weight_map sends {k} to {name!r}, which is not a .safetensors file "
                    "(sglang-v4 reads safetensors checkpoints only; convert .bin / .pt weights with "
                    "safetensors.torch.save_file)"
                )
            if not os.path.exists(p):
                raise FileNotFoundError(f"{p}: shard listed in {INDEX_FILE} does not exist")
            if not os.path.isfile(p):
                raise FileNotFoundError(f"{p}: shard listed in {INDEX_FILE} is not a file (a directory?)")
        return paths
    single = os.path.join(model_path, SINGLE_FILE)
    if os.path.isfile(single):
        return [single]
    if os.path.isdir(model_path):
        # regular files only: a directory named ``*.safetensors`` (a backup, an unpacked archive)
        # is no shard, and opening it would fail far from the cause
        found = sorted(
            os.path.join(model_path, p)
            for p in os.listdir(model_path)
            if p.endswith(".safetensors") and os.path.isfile(os.path.join(model_path, p))
        )
        if found:
            return found
    raise FileNotFoundError(
        f"{model_path}: no safetensors checkpoint ({INDEX_FILE}, {SINGLE_FILE} or *.safetensors)"
    )


def _shard_path(model_path: str, name: str) -> str:
    """The path of shard ``name`` (as ``model.safetensors.index.json`` spells it) in
    ``model_path``, normalized so that two spellings of one file give one path."""
    return os.path.join(model_path, os.path.normpath(name))


def index_weight_map(model_path: str) -> dict[str, str]:
    """``weight_map`` (tensor name -> shard file name) of ``model_path``'s
    ``model.safetensors.index.json``; ``{}`` when there is no index.

    Raises:
        ValueError: the index is not JSON, or has no ``weight_map`` object of file names (names
            the index file).
    """
    index = os.path.join(model_path, INDEX_FILE) if os.path.isdir(model_path) else None
    if index is None or not os.path.exists(index):
        return {}
    try:
        with open(index, encoding="utf-8-sig") as f:
            weight_map = json.load(f)["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{index}: not a safetensors index with a weight_map object ({e!r})") from None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index}: weight_map must map tensor names to shard file names")
    return weight_map
