"""``DSV4KVPool`` storage formats: bytes vs the planner, page geometry, flat accessors.

Oracles: the planner's byte arithmetic (``kv_layout.plan_kv_pools``, itself checked against the
published V4 / V3.2 figures in ``test_memory_kv_planner.py``) against the bytes the pool's torch
tensors really hold; the peers' fp8 page sizes (37,440 / 8,640 / 1,728 B; fp4 indexer 4,608 B,
issue 3) against the tensors' page strides; the reference dequantizers of
``sgl_kernel_v4.ref.kv_quant`` (tested against float64 in ``test_memory_kv_quant.py``) for what a
read through the pool returns.
"""

from __future__ import annotations

import pytest
import torch
from sgl_kernel_v4.ref import kv_quant as kq
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.mem_cache import kv_layout as kl
from sglang_v4.mem_cache.memory_pool import DSV4KVPool

FORMATS = [("fp32", False), ("bf16", False), ("fp8_e4m3", False), ("fp8_e4m3", True), ("bf16", True)]


@pytest.fixture(scope="module")
def tiny() -> ModelConfig:
    return ModelConfig.from_dict(get_preset("tiny"))


def _pool(mc: ModelConfig, plan: kl.KVPlan, kv: str, fp4: bool, ctx: int = 4096) -> DSV4KVPool:
    return DSV4KVPool(
        mc,
        plan.page_size,
        plan.num_block_pages,
        plan.num_window_pages,
        plan.num_request_slots,
        ctx,
        torch.float32,
        "cpu",
        kv_cache_dtype=kv,
        fp4_indexer=fp4,
    )


@pytest.mark.parametrize(("kv", "fp4"), FORMATS)
def test_pool_bytes_equal_plan(tiny: ModelConfig, kv: str, fp4: bool) -> None:
    """Allocated bytes = planned pages + the dummy block / window page and padding slot + page
    maps; allocated padding = planned padding + the dummy pages' padding."""
    plan = kl.plan_kv_pools(
        tiny,
        kv,
        fp4,
        max_total_tokens=5 * 256,
        max_running_requests=3,
        window_pages_per_request=4,
        window_pages_per_block=0.5,
        extra_window_pages=7,
    )
    assert plan.num_window_pages == 4 * 3 + 2 + 7
    pool = _pool(tiny, plan, kv, fp4)
    lay = plan.layout
    maps = pool.req_to_block.numel() * 8 + pool.req_to_window.numel() * 8
    extra = lay.block_page_bytes + lay.window_page_bytes + lay.request_state_bytes
    assert pool.memory_bytes() == plan.total_bytes + extra + maps
    assert pool.fragmentation_bytes() == (
        plan.fragmentation_bytes + lay.block_padding_bytes + lay.window_padding_bytes
    )
    quant = kv == "fp8_e4m3"
    # tiny fp8 pages are not multiples of the 192-B row; 64 fp4 keys (4,352 B) not of 512 B
    assert (pool.fragmentation_bytes() > 0) == (quant or fp4)
    assert pool.csa_kv.dtype == (torch.uint8 if quant else pool.fmt.main_storage_dtype)
    assert pool.csa_idx.dtype == (torch.uint8 if (quant or fp4) else pool.fmt.indexer_storage_dtype)


@pytest.mark.parametrize(("preset", "fp4"), [("flash", False), ("pro", False), ("pro", True)])
def test_v4_fp8_page_strides_are_the_peers(preset: str, fp4: bool) -> None:
    mc = ModelConfig.from_dict(get_preset(preset))
    pool = DSV4KVPool(mc, 256, 1, 1, 1, 1024, torch.bfloat16, "cpu", kv_cache_dtype="fp8", fp4_indexer=fp4)
    assert pool.kv_cache_dtype == "fp8_e4m3" and pool.fmt.main_entry_bytes == 584
    # [layers, pages, rows, row bytes]; page stride in bytes = the size class
    assert pool.csa_kv.shape[2:] == (64, 584) and pool.csa_kv.stride(1) == 37_440
    assert pool.swa_kv.shape[1:] == (4, 64, 584) and pool.swa_kv.stride(1) == 37_440
    assert pool.hca_kv.shape[2:] == (2, 584) and pool.hca_kv.stride(1) == 1_728
    idx_row = 68 if fp4 else 132
    assert pool.csa_idx.shape[2:] == (64, idx_row) and pool.csa_idx.stride(1) == (4_608 if fp4 else 8_640)
    assert pool.swa_flat(0).shape == (2 * 128, 512) and pool.csa_idx_flat(0).shape == (2 * 64, 128)


def test_float_accessors_are_plain_views(tiny: ModelConfig) -> None:
    pool = DSV4KVPool(tiny, 256, 2, 2, 1, 1024, torch.float32, "cpu")
    assert pool.kv_cache_dtype == "fp32" and pool.fragmentation_bytes() == 0
    for flat, t in (
        (pool.swa_flat(1), pool.swa_kv),
        (pool.csa_kv_flat(0), pool.csa_kv),
        (pool.hca_kv_flat(0), pool.hca_kv),
    ):
        assert (
            type(flat) is torch.Tensor and flat.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        )
    bf = DSV4KVPool(tiny, 256, 2, 2, 1, 1024, torch.float32, "cpu", kv_cache_dtype="bf16")
    assert bf.swa_kv.dtype == torch.bfloat16 and type(bf.csa_idx_flat(0)) is torch.Tensor
    auto_bf = DSV4KVPool(tiny, 256, 2, 2, 1, 1024, torch.bfloat16, "cpu")
    assert auto_bf.kv_cache_dtype == "bf16" and auto_bf.swa_kv.dtype == torch.bfloat16


def test_bad_arguments(tiny: ModelConfig) -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        DSV4KVPool(tiny, 256, 2, 2, 1, 1024, torch.float32, "cpu", kv_cache_dtype="int4")
    with pytest.raises(ValueError, match="kv_dtype"):
        DSV4KVPool(tiny, 256, 2, 2, 1, 1024, torch.uint8, "cpu")
    with pytest.raises(ValueError, match="num_block_pages"):
        DSV4KVPool(tiny, 256, -1, 2, 1, 1024, torch.float32, "cpu")


def test_fp8_window_slots_map_to_physical_pages(tiny: ModelConfig) -> None:
    """Window page ``w``, position ``j`` (flat slot ``128 w + j``) is physical page ``2 w + j // 64``,
    row ``j % 64``; writes are ``quantize_kv_fp8`` bytes and reads its dequantization."""
    pool = DSV4KVPool(tiny, 256, 2, 3, 1, 1024, torch.float32, "cpu", kv_cache_dtype="fp8_e4m3")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 128, generator=g) * 3
    w, js = 2, torch.tensor([0, 63, 64, 127])
    view = pool.swa_flat(3)
    view[128 * w + js] = x
    enc = kq.quantize_kv_fp8(x, rope_dim=tiny.rope_dim)
    assert torch.equal(pool.swa_kv[3, 2 * w + js // 64, js % 64], enc)
    assert pool.swa_kv[:3].count_nonzero() == 0 and pool.swa_kv[3, : 2 * w].count_nonzero() == 0
    assert torch.equal(view[128 * w + js], kq.dequantize_kv_fp8(enc, rope_dim=tiny.rope_dim))


@pytest.mark.parametrize("which", ["main", "indexer"])
@pytest.mark.parametrize("big_pool", [False, True])
def test_large_gather_equals_rowwise_decode(tiny: ModelConfig, which: str, big_pool: bool) -> None:
    """Gathers above ``KVRowsView._DEDUP_MIN`` indices decode each distinct row once (lookup
    table, or ``torch.unique`` when the pool is much larger than the gather): same values as
    decoding row by row."""
    pool = DSV4KVPool(
        tiny,
        256,
        40 if big_pool else 2,
        2,
        1,
        1024,
        torch.float32,
        "cpu",
        kv_cache_dtype="fp8_e4m3",
        fp4_indexer=True,
    )
    view = pool.csa_kv_flat(1) if which == "main" else pool.csa_idx_flat(1)
    n, d = view.shape
    g = torch.Generator().manual_seed(1)
    view[torch.arange(n)] = torch.randn(n, d, generator=g)
    idx = torch.randint(0, 100, (70, 80), generator=g)  # 5,600 indices over 100 distinct rows
    assert idx.numel() > kl.KVRowsView._DEDUP_MIN
    got = view[idx]
    store = pool.csa_kv[1] if which == "main" else pool.csa_idx[1]
    rows = store.reshape(-1, store.shape[-1])[idx.reshape(-1)]
    if which == "main":
        ref = kq.dequantize_kv_fp8(rows, rope_dim=tiny.rope_dim)
    else:
        ref = kq.dequantize_indexer_fp4(rows)
    assert got.shape == (70, 80, d) and torch.equal(got, ref.reshape(70, 80, d))
