"""``DSV4KVPool`` storage formats: bytes vs the planner, page geometry, ``pool.rows`` views.

Oracles: the planner's byte arithmetic (``kv_planner.plan_kv_pools``, itself checked against the
published V4 / V3.2 figures in ``test_memory_kv_planner.py``) against the bytes the pool's torch
tensors really hold; the peers' fp8 page sizes (37,440 / 8,640 / 1,728 B; fp4 indexer 4,608 B)
against the tensors' page strides; the reference dequantizers of
``sgl_kernel_v4.ref.kv_quant`` (tested against float64 in ``test_memory_kv_quant.py``) for what a
read through the pool returns.
"""

from __future__ import annotations

import pytest
import torch
from sgl_kernel_v4.ref import kv_quant as kq
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.mem_cache.kv_format import KVRowsView
from sglang_v4.mem_cache.kv_planner import KVPlan, plan_kv_pools
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool

FORMATS = [("fp32", False), ("bf16", False), ("fp8_e4m3", False), ("fp8_e4m3", True), ("bf16", True)]


@pytest.fixture(scope="module")
def tiny() -> ModelConfig:
    return ModelConfig.from_dict(get_preset("tiny"))


def _pool(mc: ModelConfig, plan: KVPlan, kv: str, fp4: bool) -> DSV4KVPool:
    return DSV4KVPool(
        mc,
        plan.page_size,
        plan.num_block_pages,
        plan.num_window_pages,
        plan.num_request_slots,
        torch.float32,
        "cpu",
        kv_cache_dtype=kv,
        fp4_indexer=fp4,
    )


@pytest.mark.parametrize(("kv", "fp4"), FORMATS)
def test_pool_bytes_equal_plan(tiny: ModelConfig, kv: str, fp4: bool) -> None:
    """Allocated bytes = planned pages + the dummy block / window page and padding slot;
    allocated padding = planned padding + the dummy pages' padding."""
    plan = plan_kv_pools(
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
    extra = lay.block_page_bytes + lay.window_page_bytes + lay.request_state_bytes
    assert pool.memory_bytes() == plan.total_bytes + extra
    assert pool.fragmentation_bytes() == (
        plan.fragmentation_bytes + lay.block_padding_bytes + lay.window_padding_bytes
    )
    quant = kv == "fp8_e4m3"
    # tiny fp8 pages are not multiples of the 192-B row; 64 fp4 keys (4,352 B) not of 512 B
    assert (pool.fragmentation_bytes() > 0) == (quant or fp4)
    fmt = lay.formats
    assert pool.storage(KVKind.CSA_MAIN).dtype == (torch.uint8 if quant else fmt.main.storage_dtype)
    assert pool.storage(KVKind.CSA_INDEXER).dtype == (
        torch.uint8 if (quant or fp4) else fmt.indexer.storage_dtype
    )
    assert set(pool.quantized_kinds) == (set(KVKind) if quant else ({KVKind.CSA_INDEXER} if fp4 else set()))


@pytest.mark.parametrize(("preset", "fp4"), [("flash", False), ("pro", False), ("pro", True)])
def test_v4_fp8_page_strides_are_the_peers(preset: str, fp4: bool) -> None:
    mc = ModelConfig.from_dict(get_preset(preset))
    pool = DSV4KVPool(mc, 256, 1, 1, 1, torch.bfloat16, "cpu", kv_cache_dtype="fp8", fp4_indexer=fp4)
    assert pool.kv_cache_dtype == "fp8_e4m3" and pool.layout.formats.main.entry_bytes == 584
    # [layers, pages, rows, row bytes]; page stride in bytes = the size class
    csa, swa, hca, idx = (
        pool.storage(k) for k in (KVKind.CSA_MAIN, KVKind.SWA, KVKind.HCA, KVKind.CSA_INDEXER)
    )
    assert csa.shape[2:] == (64, 584) and csa.stride(1) == 37_440
    assert swa.shape[1:] == (4, 64, 584) and swa.stride(1) == 37_440
    assert hca.shape[2:] == (2, 584) and hca.stride(1) == 1_728
    idx_row = 68 if fp4 else 132
    assert idx.shape[2:] == (64, idx_row) and idx.stride(1) == (4_608 if fp4 else 8_640)
    assert pool.rows(KVKind.SWA, 0).shape == (2 * 128, 512)
    assert pool.rows(KVKind.CSA_INDEXER, mc.csa_layers[0]).shape == (2 * 64, 128)


def test_float_accessors_are_plain_views(tiny: ModelConfig) -> None:
    pool = DSV4KVPool(tiny, 256, 2, 2, 1, torch.float32, "cpu")
    assert pool.kv_cache_dtype == "fp32" and pool.fragmentation_bytes() == 0
    for flat, t in (
        (pool.rows(KVKind.SWA, 1), pool.storage(KVKind.SWA)),
        (pool.rows(KVKind.CSA_MAIN, tiny.csa_layers[0]), pool.storage(KVKind.CSA_MAIN)),
        (pool.rows(KVKind.HCA, tiny.hca_layers[0]), pool.storage(KVKind.HCA)),
    ):
        assert (
            type(flat) is torch.Tensor and flat.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        )
    bf = DSV4KVPool(tiny, 256, 2, 2, 1, torch.float32, "cpu", kv_cache_dtype="bf16")
    assert bf.storage(KVKind.SWA).dtype == torch.bfloat16 == bf.storage_dtype(KVKind.SWA)
    assert type(bf.rows(KVKind.CSA_INDEXER, tiny.csa_layers[0])) is torch.Tensor
    assert bf.compute_dtype == torch.float32 and not bf.quantized_kinds
    auto_bf = DSV4KVPool(tiny, 256, 2, 2, 1, torch.bfloat16, "cpu")
    assert auto_bf.kv_cache_dtype == "bf16" and auto_bf.storage(KVKind.SWA).dtype == torch.bfloat16


def test_bad_arguments(tiny: ModelConfig) -> None:
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        DSV4KVPool(tiny, 256, 2, 2, 1, torch.float32, "cpu", kv_cache_dtype="int4")
    with pytest.raises(ValueError, match="compute_dtype"):
        DSV4KVPool(tiny, 256, 2, 2, 1, torch.uint8, "cpu")
    with pytest.raises(ValueError, match="num_block_pages"):
        DSV4KVPool(tiny, 256, -1, 2, 1, torch.float32, "cpu")


def test_fp8_window_slots_map_to_physical_pages(tiny: ModelConfig) -> None:
    """Window page ``w``, position ``j`` (flat slot ``128 w + j``) is physical page ``2 w + j // 64``,
    row ``j % 64``; writes are ``quantize_kv_fp8`` bytes and reads its dequantization."""
    pool = DSV4KVPool(tiny, 256, 2, 3, 1, torch.float32, "cpu", kv_cache_dtype="fp8_e4m3")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 128, generator=g) * 3
    w, js = 2, torch.tensor([0, 63, 64, 127])
    view = pool.rows(KVKind.SWA, 3)
    view[128 * w + js] = x
    enc = kq.quantize_kv_fp8(x, rope_dim=tiny.rope_dim)
    swa = pool.storage(KVKind.SWA)
    assert torch.equal(swa[3, 2 * w + js // 64, js % 64], enc)
    assert swa[:3].count_nonzero() == 0 and swa[3, : 2 * w].count_nonzero() == 0
    assert torch.equal(view[128 * w + js], kq.dequantize_kv_fp8(enc, rope_dim=tiny.rope_dim))


@pytest.mark.parametrize("kind", [KVKind.CSA_MAIN, KVKind.CSA_INDEXER])
@pytest.mark.parametrize("big_pool", [False, True])
def test_large_gather_equals_rowwise_decode(tiny: ModelConfig, kind: KVKind, big_pool: bool) -> None:
    """Gathers above ``KVRowsView._DEDUP_MIN`` indices decode each distinct row once (lookup
    table, or ``torch.unique`` when the pool is much larger than the gather): same values as
    decoding row by row."""
    pool = DSV4KVPool(
        tiny,
        256,
        40 if big_pool else 2,
        2,
        1,
        torch.float32,
        "cpu",
        kv_cache_dtype="fp8_e4m3",
        fp4_indexer=True,
    )
    view = pool.rows(kind, tiny.csa_layers[1])
    n, d = view.shape
    g = torch.Generator().manual_seed(1)
    view[torch.arange(n)] = torch.randn(n, d, generator=g)
    idx = torch.randint(0, 100, (70, 80), generator=g)  # 5,600 indices over 100 distinct rows
    assert idx.numel() > KVRowsView._DEDUP_MIN
    got = view[idx]
    store = pool.storage(kind)[1]
    rows = store.reshape(-1, store.shape[-1])[idx.reshape(-1)]
    if kind is KVKind.CSA_MAIN:
        ref = kq.dequantize_kv_fp8(rows, rope_dim=tiny.rope_dim)
    else:
        ref = kq.dequantize_indexer_fp4(rows)
    assert got.shape == (70, 80, d) and torch.equal(got, ref.reshape(70, 80, d))
