"""Public bug reports on reading sharded safetensors checkpoints: the ``__metadata__`` of a shard's
header (empty, absent, without ``"format": "pt"``), stray ``*.safetensors`` files beside an
indexed checkpoint, and index entries that no shard holds.

Tiny random checkpoints (HF names in bf16, DeepSeek's official names in fp8) written in ~1 MiB
shards with their ``model.safetensors.index.json``, each fault made by rewriting a copy. Oracles:
safetensors' own reader (``safe_open``: the stored tensors and their values), the header bytes as
the safetensors format defines them (8-byte little-endian length, JSON, data), the index file, and
the load of the untouched checkpoint (a cold run of the same weights).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.model_loader.loader import load_state_dict
from sglang_v4.tools.make_checkpoint import write_checkpoint

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny random checkpoint in DeepSeek's official names and fp8 weights with their block
    scales, in ~1 MiB shards with an index."""
    root = tmp_path_factory.mktemp("base27")
    return {
        "official": Path(write_checkpoint(str(root / "off"), "tiny", "official", "fp8", 0, shard_size_mb=1))
    }


@pytest.fixture(scope="module")
def pristine(base: dict[str, Path]) -> dict[str, dict[str, torch.Tensor]]:
    """The state dict of each untouched checkpoint (the cold-run oracle)."""
    return {k: load_state_dict(str(d), progress=False) for k, d in base.items()}


def _copy(base: dict[str, Path], which: str, tmp_path: Path) -> Path:
    d = tmp_path / which
    shutil.copytree(base[which], d)
    return d


def _shards(d: Path) -> list[Path]:
    return sorted(d.glob("*.safetensors"))


def _header(path: Path) -> tuple[dict[str, Any], bytes]:
    """A safetensors file's JSON header and its data section, read by the format's definition."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def _rewrite_header(path: Path, edit: Any) -> dict[str, Any]:
    """Rewrite ``path`` with ``edit(header)`` as its header (data offsets are relative to the data
    section, so the data is kept byte for byte); the header is space-padded to 8 bytes, as
    safetensors writes it. Returns the new header."""
    header, data = _header(path)
    edit(header)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return header


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


def test_shard_header_metadata_empty_absent_or_without_format_loads(base, pristine, tmp_path) -> None:
    """foundation-model-stack/fastsafetensors#89 (a shard whose header holds ``"__metadata__": {}``
    failed with ``KeyError: 'data_offsets'``), huggingface/accelerate#1151 and
    huggingface/diffusers#2445 (shards saved without ``metadata["format"] = "pt"`` were refused):
    the ``__metadata__`` entry is optional and free-form in the safetensors format, so shards
    rewritten with it empty, absent or without ``format`` (each shard one of the three) pass the
    start-up check and load the same tensors (fp8 weights dequantized with their scales) as the
    untouched checkpoint. Oracle: ``safe_open`` reads each rewritten shard (its keys unchanged,
    no ``format``) and the untouched checkpoint's load."""
    d = _copy(base, "official", tmp_path)
    shards = _shards(d)
    assert len(shards) >= 3
    for i, shard in enumerate(shards):
        metadata = ("empty", "absent", "no_format")[i % 3]
        before = _header(shard)[0].keys() - {"__metadata__"}

        def edit(h: dict[str, Any], metadata: str = metadata) -> None:
            if metadata == "empty":
                h["__metadata__"] = {}
            elif metadata == "absent":
                h.pop("__metadata__", None)
            else:
                h["__metadata__"] = {"producer": "a converter"}

        _rewrite_header(shard, edit)
        with safe_open(str(shard), framework="pt") as f:
            assert set(f.keys()) == before
            assert (f.metadata() or {}).get("format") is None
    check_model_dir(str(d), device="cpu")
    _assert_same(load_state_dict(str(d), progress=False), pristine["official"])


def test_stray_safetensors_beside_an_index_is_not_read(base, pristine, tmp_path) -> None:
    """Blaizzy/mlx-vlm#1329 (a stray ``model.safetensors`` shipped beside the indexed bf16 shards
    was merged into the load and mismatched against the model): with
    ``model.safetensors.index.json`` present, only the shards it names are read. Stray files with
    clashing tensor names (a 4-bit leftover, a ``consolidated.safetensors``) neither fail the
    check nor change a weight. Oracle: the untouched checkpoint's load."""
    from safetensors.torch import save_file

    d = _copy(base, "official", tmp_path)
    weight_map = json.loads((d / INDEX).read_text())["weight_map"]
    clash = "embed.weight"
    assert clash in weight_map
    shape = pristine["official"]["model.embed_tokens.weight"].shape
    save_file({clash: torch.full(tuple(shape), 7.0, dtype=torch.bfloat16)}, str(d / "model.safetensors"))
    save_file({"junk.weight": torch.zeros(3, 3)}, str(d / "consolidated.safetensors"))
    assert "model.safetensors" not in set(weight_map.values())
    check_model_dir(str(d), device="cpu")
    _assert_same(load_state_dict(str(d), progress=False), pristine["official"])


def test_index_entry_no_shard_holds(base, pristine, tmp_path) -> None:
    """huggingface/huggingface_hub#4725 (an index's ``weight_map`` listed ``mtp.fc.weight`` in a
    shard whose header had no such tensor: 1,199 index entries, 1,198 stored tensors): the shard
    headers are what is loaded. An index entry for a tensor the model never reads (the MTP head)
    that no shard holds is harmless: the check passes and the load equals the untouched one. An
    index entry for a tensor the model needs, removed from its shard, is refused by the start-up
    check with one line naming the tensor and the shard the index names. Oracle: the index file
    and ``safe_open`` of the edited shard."""
    from safetensors.torch import load_file, save_file

    d = _copy(base, "official", tmp_path)
    index = json.loads((d / INDEX).read_text())
    last = sorted(set(index["weight_map"].values()))[-1]
    index["weight_map"]["mtp.fc.weight"] = last
    (d / INDEX).write_text(json.dumps(index))
    with safe_open(str(d / last), framework="pt") as f:
        assert "mtp.fc.weight" not in set(f.keys())
    check_model_dir(str(d), device="cpu")
    _assert_same(load_state_dict(str(d), progress=False), pristine["official"])

    # a tensor the model reads, still listed by the index, gone from its shard
    key = "norm.weight"  # the final norm
    assert key in index["weight_map"]
    shard = d / index["weight_map"][key]
    tensors = load_file(str(shard))
    del tensors[key]
    save_file(tensors, str(shard), metadata={"format": "pt"})
    with pytest.raises(ValueError) as e:
        check_model_dir(str(d), device="cpu")
    msg = str(e.value)
    assert "\n" not in msg.strip(), msg
    assert shard.name in msg, msg
