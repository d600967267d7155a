"""Public bug reports on checkpoint loading: an overlay shard that supersedes tensors a base shard
still stores (the index decides which copy is read), empty (zero-element) tensors stored in a
shard, and FP8 block-scaled weights whose dimensions are not multiples of the 128x128 block
(DeepSeek's ``kv_a_proj_with_mqa`` is ``[576, 7168]``), plain and stacked over experts.

Fixture: a tiny random checkpoint in DeepSeek's official names with fp8 weights and their ue8m0
block scales, written in ~1 MiB shards with ``model.safetensors.index.json``; each fault is made
on a copy. Oracles: the load of the untouched checkpoint or of one holding the intended tensors
in place (a cold run of the same weights), ``model.safetensors.index.json``, safetensors' own
reader, and a float64 dequantization written here from the format's definition (DeepSeek-V3
``README_WEIGHTS.md``: one scale per 128x128 block, edge blocks partial, ``w = q * scale``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.model_loader.loader import load_state_dict
from sglang_v4.model_loader.quant import E8M0_DTYPE, dequantize_fp8_block, quantize_fp8_block
from sglang_v4.tools.make_checkpoint import write_checkpoint

INDEX = "model.safetensors.index.json"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random fp8 checkpoint in DeepSeek's official names, ~1 MiB shards with an index."""
    root = tmp_path_factory.mktemp("base32")
    return Path(write_checkpoint(str(root / "off"), "tiny", "official", "fp8", 0, shard_size_mb=1))


@pytest.fixture(scope="module")
def pristine(base: Path) -> dict[str, torch.Tensor]:
    """The state dict of the untouched checkpoint (the cold-run oracle)."""
    return load_state_dict(str(base), progress=False)


def _dequant64(q: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """``q * scale`` in float64, each element's scale looked up by its block index (row // bm,
    col // bn), element by block, as the format defines it."""
    bm, bn = block
    r, c = q.shape[-2:]
    rows = torch.arange(r) // bm
    cols = torch.arange(c) // bn
    s = scale.to(torch.float64)[..., rows, :][..., :, cols]
    return q.to(torch.float64) * s


def _index(d: Path) -> dict:
    return json.loads((d / INDEX).read_text())


def test_overlay_shard_supersedes_the_stale_copy_the_index_does_not_name(
    base: Path, pristine: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    """JustVugg/colibri#1479 (a DeepSeek-V4-Flash checkpoint shipped as base shards plus a
    ``model-overlay-*.safetensors`` the index maps some tensors to, e.g.
    ``layers.0.attn.wo_b.scale``, while the base shards still store the stale copies: the load was
    refused as a duplicate tensor) and vllm-project/vllm#54230 (a shard reused from another
    checkpoint stores tensors the index assigns to a different shard; they were loaded over the
    right ones): a tensor stored in two shards is read from the one ``model.safetensors.index.json``
    maps it to, whichever order the shards are opened in and however the index spells the shard
    name (``./model-overlay-...``: one file). Oracle: the cold load of a checkpoint that stores the
    overlay's tensors in place of the base copies, without an overlay."""
    over = ["layers.0.attn.wo_b.weight", "layers.0.attn.wo_b.scale", "norm.weight"]
    base_map = _index(base)["weight_map"]
    stale = {k: load_file(str(base / base_map[k]))[k] for k in over}
    g = torch.Generator().manual_seed(1479)
    new_wo_b, new_scale = quantize_fp8_block(
        torch.randn(stale["layers.0.attn.wo_b.weight"].shape, generator=g) * 0.05, (128, 128)
    )
    fresh = {
        "layers.0.attn.wo_b.weight": new_wo_b,
        "layers.0.attn.wo_b.scale": new_scale,
        "norm.weight": stale["norm.weight"] + 0.5,
    }
    for k in over:
        assert fresh[k].shape == stale[k].shape and fresh[k].dtype == stale[k].dtype, k

    # the oracle: the fresh tensors written over the base copies, no overlay
    cold = tmp_path / "cold"
    shutil.copytree(base, cold)
    for shard in {base_map[k] for k in over}:
        tensors = load_file(str(cold / shard))
        tensors.update({k: v for k, v in fresh.items() if base_map[k] == shard})
        save_file(tensors, str(cold / shard), metadata={"format": "pt"})
    want = load_state_dict(str(cold), progress=False)
    before = pristine
    changed = {"model.layers.0.self_attn.o_b_proj.weight", "model.norm.weight"}
    assert changed <= want.keys()
    for k in changed:  # the edit reaches the loaded weights
        assert not torch.equal(want[k], before[k]), k

    for overlay_first in (False, True):
        d = tmp_path / f"overlay_{overlay_first}"
        shutil.copytree(base, d)
        save_file(fresh, str(d / "model-overlay-00001-of-00001.safetensors"), metadata={"format": "pt"})
        index = _index(d)
        wm = {k: v for k, v in index["weight_map"].items() if k not in over}
        moved = {k: "./model-overlay-00001-of-00001.safetensors" for k in over}
        index["weight_map"] = {**moved, **wm} if overlay_first else {**wm, **moved}
        (d / INDEX).write_text(json.dumps(index))
        for k in over:  # the stale copy is still stored in its base shard
            with safe_open(str(d / base_map[k]), framework="pt") as f:
                assert k in set(f.keys())
        if not overlay_first:
            check_model_dir(str(d), device="cpu")
        got = load_state_dict(str(d), progress=False)
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert got[k].dtype == v.dtype and torch.equal(got[k], v), (overlay_first, k)

    # the index mapping the tensors back to their base shards: the overlay copies are the stale ones
    index = _index(d)
    index["weight_map"].update({k: base_map[k] for k in over})
    # an index entry no shard holds keeps the overlay listed (harmless: huggingface_hub#4725)
    index["weight_map"]["mtp.overlay.marker"] = "model-overlay-00001-of-00001.safetensors"
    (d / INDEX).write_text(json.dumps(index))
    got = load_state_dict(str(d), progress=False)
    for k, v in before.items():
        assert torch.equal(got[k], v), k


def test_empty_tensors_in_a_shard_load(base: Path, pristine: dict[str, torch.Tensor], tmp_path: Path) -> None:
    """vllm-project/vllm#1687 (a safetensors checkpoint holding an empty tensor failed to load):
    zero-element tensors stored in a shard and listed by the index (an MTP tensor, a saved rotary
    table, both of which the model never reads) neither fail the start-up check nor change a
    weight. Oracle: ``safe_open`` shows the empty tensors stored; the untouched checkpoint's load."""
    d = tmp_path / "ck"
    shutil.copytree(base, d)
    index = json.loads((d / INDEX).read_text())
    last = sorted(set(index["weight_map"].values()))[-1]
    tensors = load_file(str(d / last))
    empties = {
        "mtp.0.emb.weight": torch.empty(0, 128, dtype=torch.bfloat16),
        "layers.0.attn.rotary_emb.inv_freq": torch.empty(0, dtype=torch.float32),
    }
    tensors.update(empties)
    save_file(tensors, str(d / last), metadata={"format": "pt"})
    for k in empties:
        index["weight_map"][k] = last
    (d / INDEX).write_text(json.dumps(index))
    with safe_open(str(d / last), framework="pt") as f:
        for k, v in empties.items():
            assert list(f.get_slice(k).get_shape()) == list(v.shape)

    check_model_dir(str(d), device="cpu")
    got = load_state_dict(str(d), progress=False)
    assert got.keys() == pristine.keys()
    for k, v in pristine.items():
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


@pytest.mark.parametrize(
    "shape",
    [(576, 7168), (4, 200, 300)],
    ids=["kv_a_proj_576x7168", "stacked_experts_4x200x300"],
)
@pytest.mark.parametrize("scale_dtype", [torch.float32, E8M0_DTYPE], ids=["f32_scale", "ue8m0_scale"])
def test_fp8_partial_edge_blocks_dequantize_like_float64(
    shape: tuple[int, ...], scale_dtype: torch.dtype
) -> None:
    """modelscope/ms-swift#6851 (dequantizing DeepSeek's FP8 weights refused ``(576, 7168)`` as
    not divisible by the 128x128 block) and PaddlePaddle/FastDeploy#3486 (block-FP8 scale shapes
    computed by floor division for weights whose dimensions are not block multiples, so the
    stored scales no longer fit): the scale of a ``[..., R, C]`` weight is ``[..., ceil(R/128),
    ceil(C/128)]`` (edge blocks partial), and dequantization applies each block's own scale to
    exactly its elements, plain and stacked over experts. Oracle: the shape rule of DeepSeek's
    weight format and a float64 per-element block lookup."""
    g = torch.Generator().manual_seed(32)
    w = torch.randn(*shape, generator=g) * torch.logspace(-3, 1, shape[-1])
    q, scale = quantize_fp8_block(w, (128, 128), scale_dtype=scale_dtype)
    r, c = shape[-2:]
    assert tuple(scale.shape) == (*shape[:-2], -(-r // 128), -(-c // 128))
    assert scale.dtype == scale_dtype
    got = dequantize_fp8_block(q, scale, (128, 128))
    assert got.dtype == torch.float32 and tuple(got.shape) == shape
    # one correctly rounded float32 product per element: the float64 product rounded once
    want = _dequant64(q, scale.to(torch.float32), (128, 128)).to(torch.float32)
    assert torch.equal(got, want)
    # the round trip keeps e4m3's precision (3 mantissa bits) within each block's range
    amax = w.abs().amax()
    assert (got - w).abs().max() <= 2.0**-3 * amax
    # a scale shaped by floor division (FastDeploy's bug) is refused, naming the weight
    floor = (*shape[:-2], r // 128, c // 128)
    with pytest.raises(ValueError, match=r"^wkv_a: FP8 block scale has shape"):
        dequantize_fp8_block(q, scale[..., : floor[-2], : floor[-1]], (128, 128), name="wkv_a")
