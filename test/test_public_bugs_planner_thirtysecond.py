"""Public bug reports on the KV memory planner: the bytes of a block page, a window page and a
request slot of each KV kind (compressed CSA / HCA main KV, bf16 / fp8 / fp4 indexer keys, the
sliding window, the compressor state), a byte budget that must cover what the pools really
allocate (their reserved page 0 included), the capacity recomputed after a budget clamp, request
slots of a paged pool, window pages per request rather than per chunk, the start-up error of a
budget too small and the log lines naming the capacity, and a prefill chunk that does not grow with
the pool.

Fixtures: the ``flash`` / ``pro`` presets of ``tools.kv_planner`` (no weights), a small
``DSV4KVPool`` on CPU, and two in-process CPU schedulers on ``sched_model_dir``
(``scheduler_testutil.make_scheduler``). Oracles: byte counts worked out here by hand from the
DeepSeek-V4 KV layout of ``docs/KV_CACHE.md`` (entry formats, rows per page, the 576 / 512-byte
page alignment, the fp32 compressor state's shapes) and the model config's dimensions, the page
arithmetic documented by ``plan_kv_pools``, and the pool's own tensor bytes.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from scheduler_testutil import PAGE, make_scheduler
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache import kv_planner as kp
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.tools.kv_planner import load_preset_config

FP32 = 4
DTYPES = [("fp8_e4m3", False), ("fp8_e4m3", True), ("bf16", False)]


@pytest.fixture(scope="module")
def flash() -> ModelConfig:
    """DeepSeek-V4-Flash shapes (21 CSA + 20 HCA + 2 sliding layers)."""
    return load_preset_config("flash")


@pytest.fixture(scope="module")
def pro() -> ModelConfig:
    """DeepSeek-V4-Pro shapes (30 CSA + 31 HCA layers)."""
    return load_preset_config("pro")


def _entry_bytes(mc: ModelConfig, dtype: str, fp4: bool) -> tuple[int, int]:
    """Main and indexer entry bytes from the formats' definitions (docs/KV_CACHE.md)."""
    d, rope, di = mc.head_dim, mc.rope_dim, mc.index_head_dim
    if dtype == "fp8_e4m3":
        main = (d - rope) + 2 * rope + (d - rope) // 64 + 1  # e4m3 nope, bf16 rope, ue8m0 / 64, pad
        index = di + 4  # e4m3 + one fp32 scale
    else:
        main, index = 2 * d, 2 * di
    if fp4:
        index = di // 2 + di // 32  # e2m1 nibbles + one ue8m0 scale per 32
    return main, index


def _aligned(n: int, dtype: str) -> int:
    """A page rounded up to the allocation unit: 576 B (fp8, FlashMLA's row) or 512 B."""
    unit = 576 if dtype == "fp8_e4m3" else 512
    return -(-n // unit) * unit


def _hand_units(mc: ModelConfig, dtype: str, fp4: bool, page: int = 256) -> tuple[int, int, int]:
    """(block page, window page, request slot) bytes over all layers, by hand."""
    main, index = _entry_bytes(mc, dtype, fp4)
    m, mp, w = mc.csa_ratio, mc.hca_ratio, mc.sliding_window
    n_csa, n_hca, n_all = len(mc.csa_layers), len(mc.hca_layers), mc.num_layers
    d, di = mc.head_dim, mc.index_head_dim
    block = n_csa * (_aligned(page // m * main, dtype) + _aligned(page // m * index, dtype))
    block += n_hca * _aligned(page // mp * main, dtype)
    # a window page: `w` raw positions in pages of page // m = 64 rows, plus the CSA overlap
    # snapshot (the previous window's Ca half: m rows of d kv + m rows of d score, main + indexer)
    swa_pages = w // (page // m)
    snapshot = n_csa * (m * d * 2 + m * di * 2) * FP32
    window = n_all * swa_pages * _aligned(page // m * main, dtype) + snapshot
    # a request slot: the partial window (ratio rows of kv + score, 2d wide with CSA's overlap)
    # and, for CSA, the Ca half; HCA's window is mp rows of d kv + score
    csa_state = (m * 2 * d * 2 + m * d * 2) + (m * 2 * di * 2 + m * di * 2)
    state = (n_csa * csa_state + n_hca * mp * d * 2) * FP32
    return block, window, state


@pytest.mark.parametrize("preset", ["flash", "pro"])
@pytest.mark.parametrize(("dtype", "fp4"), DTYPES)
def test_page_unit_bytes_are_the_v4_layout_by_hand(preset: str, dtype: str, fp4: bool, request: Any) -> None:
    """NVIDIA/TensorRT-LLM#11907 (the per-token KV estimate was not accurate for a model with
    sliding-window layers, so the token capacity it printed misled) and vllm-project/vllm#51041
    (DeepSeek-V4-Flash's KV pool held 8x fewer tokens than the same layout should): the planner's
    block page, window page and request slot bytes, and a 1M-token sequence's entry bytes, equal
    the ones computed here from the config's dimensions and the entry formats."""
    mc = request.getfixturevalue(preset)
    plan = kp.plan_kv_pools(mc, dtype, fp4, max_total_tokens=4 * 256, context_length=1024)
    block, window, state = _hand_units(mc, dtype, fp4)
    assert (plan.block_page_bytes, plan.window_page_bytes, plan.request_state_bytes) == (block, window, state)
    main, index = _entry_bytes(mc, dtype, fp4)
    assert plan.entry_bytes == {"main": main, "indexer": index}
    assert plan.bytes_per_token_per_layer["csa"] == (main + index) / 4
    assert plan.bytes_per_token_per_layer["hca"] == main / 128
    ctx = 1 << 20
    want = len(mc.csa_layers) * (ctx // 4) * (main + index) + len(mc.hca_layers) * (ctx // 128) * main
    want += mc.num_layers * 128 * main
    assert kp.kv_bytes_for_context(mc, dtype, fp4, ctx)["total_kv_bytes"] == want


def _budget_pages(budget: int, n: int, units: tuple[int, int, int], w: int, r: float, e: int) -> int:
    """``plan_kv_pools``'s documented budget arithmetic, with the reserved page 0 of each space."""
    block, window, state = units
    dummy = block + window + state
    return int((budget - dummy - e * window - n * (w * window + state)) // (block + r * window))


@pytest.mark.parametrize(("dtype", "fp4"), DTYPES)
def test_budget_covers_the_pools_reserved_page_zero(flash: ModelConfig, dtype: str, fp4: bool) -> None:
    """FlashML-org/FreeToken#340 (the budget split priced the KV pool in usable pages while the
    pool allocates one more, its reserved dummy page 0, so the pool overran the memory the plan
    said it fits in): planned from a byte budget, the ``DSV4KVPool`` built from the plan holds at
    most the budget, the plan's ``allocated_bytes`` is exactly the pool's bytes, and the block
    pages follow the hand arithmetic that reserves page 0 of each space."""
    budget = 120 * 2**20
    kw = dict(context_length=4096, max_running_requests=2, window_pages_per_request=4)
    plan = kp.plan_kv_pools(
        flash, dtype, fp4, budget_bytes=budget, window_pages_per_block=1.0, extra_window_pages=2, **kw
    )
    units = _hand_units(flash, dtype, fp4)
    assert plan.num_block_pages == _budget_pages(budget, 2, units, 4, 1.0, 2)
    assert plan.num_window_pages == 4 * 2 + plan.num_block_pages + 2
    pool = DSV4KVPool(
        flash,
        256,
        plan.num_block_pages,
        plan.num_window_pages,
        plan.num_request_slots,
        torch.bfloat16,
        "cpu",
        kv_cache_dtype=dtype,
        fp4_indexer=fp4,
    )
    assert pool.memory_bytes() == plan.allocated_bytes == plan.total_bytes + sum(units)
    assert pool.memory_bytes() <= budget
    assert plan.to_dict()["allocated_bytes"] == plan.allocated_bytes


def test_capacity_is_recomputed_after_the_budget_clamp(flash: ModelConfig) -> None:
    """NVIDIA/TensorRT-LLM#5933 (``max_tokens`` was derived before the memory clamp, so after the
    clamp it claimed more tokens than the memory held): with both a budget and
    ``max_total_tokens``, the capacity is the smaller of the two by hand, ``kv_capacity_tokens``
    is always whole block pages of it, and the pools stay within the budget."""
    units = _hand_units(flash, "fp8_e4m3", False)
    budget = 200 * 2**20
    by_budget = _budget_pages(budget, 1, units, 3, 0.0, 0)
    for mtt in (by_budget * 256 // 2 + 100, by_budget * 256 * 4 + 100):
        plan = kp.plan_kv_pools(
            flash,
            "fp8_e4m3",
            budget_bytes=budget,
            max_total_tokens=mtt,
            context_length=1 << 20,
            max_running_requests=1,
        )
        pages = min(by_budget, mtt // 256)
        assert plan.num_block_pages == pages and plan.kv_capacity_tokens == pages * 256
        assert plan.max_context == pages * 256 and plan.allocated_bytes <= budget


def test_request_slots_of_a_paged_pool_share_its_capacity(flash: ModelConfig) -> None:
    """tenstorrent/tt-metal#50257 (a ``max_batch_size * max_seq_len`` occupancy check refused
    valid paged-KV configs) and sgl-project/sglang#29575 (what the logged ``max_total_num_tokens``
    means): 64 request slots over a pool of 8 pages with a 32K context are planned (requests share
    the pages), the capacity is 8 x 256 tokens, no full-context request fits (concurrency 0), and
    the start-up line names those counts, each worked out by hand."""
    plan = kp.plan_kv_pools(
        flash, "fp8_e4m3", max_total_tokens=8 * 256 + 17, context_length=32768, max_running_requests=64
    )
    assert (plan.num_block_pages, plan.num_request_slots, plan.kv_capacity_tokens) == (8, 64, 2048)
    assert plan.max_concurrency == 0 and plan.max_context == 2048
    line = plan.summary()
    assert "8 block pages" in line and "KV capacity 2048 tokens" in line and "64 request slots" in line
    assert "max concurrency 0 at 32768 tokens" in line and "up to 2048 tokens each" in line
    # without a slot count the slots follow the pool: floor(pages / ceil(context / page)), at least 1
    for ctx, want in ((512, 4), (1000, 2), (32768, 1)):
        p = kp.plan_kv_pools(flash, "fp8_e4m3", max_total_tokens=8 * 256, context_length=ctx)
        assert p.num_request_slots == want and p.max_concurrency == min(want, 8 // -(-ctx // 256))


def test_window_pages_are_planned_per_request_not_per_chunk_or_context(flash: ModelConfig) -> None:
    """xLLM-AI/xllm#1515 (DeepSeek-V4's sliding-window cache was sized per sequence from the
    window plus the batched tokens plus a spare block, wasting memory on every sequence):
    window pages are ``w * slots + floor(r * block pages) + extra`` whatever the context length,
    and each covers ``sliding_window`` positions of every layer."""
    for ctx in (256, 4096, 1 << 20):
        plan = kp.plan_kv_pools(
            flash,
            "bf16",
            max_total_tokens=40 * 256,
            context_length=ctx,
            max_running_requests=5,
            window_pages_per_request=4,
            window_pages_per_block=0.5,
            extra_window_pages=64,
        )
        assert plan.num_window_pages == 4 * 5 + 20 + 64, ctx


def test_compressor_state_is_per_slot_and_not_per_token(flash: ModelConfig) -> None:
    """vllm-project/vllm#54703 (DeepSeek-V4's compressor state, exposed as tiny-block
    sliding-window caches, was reserved per in-flight token and dominated a small pool): the
    fp32 compressor state costs one fixed request slot (by hand: 11,776,000 B for V4-Flash) and
    one overlap snapshot per window page, whatever the context and pool size."""
    _, window, state = _hand_units(flash, "fp8_e4m3", False)
    assert state == 11_776_000
    snapshot = len(flash.csa_layers) * (4 * 512 * 2 + 4 * 128 * 2) * FP32
    for ctx, pages in ((1024, 4), (1 << 20, 4096)):
        plan = kp.plan_kv_pools(
            flash, "fp8_e4m3", max_total_tokens=pages * 256, context_length=ctx, max_running_requests=3
        )
        assert plan.request_state_bytes == state
        assert plan.state_bytes == plan.num_window_pages * snapshot + 3 * state
        assert plan.total_bytes == pages * plan.block_page_bytes + plan.num_window_pages * window + 3 * state


def test_budget_sizing_uses_the_compressed_layout_not_a_dense_per_token_cost(pro: ModelConfig) -> None:
    """lightseekorg/tokenspeed#173 (DeepSeek-V4's capacity was profiled with the legacy per-token
    full-cache cost, so the page budget was far too small): a budget of 20 GiB for one 1M-token
    fp8 request holds the block pages the hand arithmetic gives, several times the tokens a dense
    V3.2-style per-token cost would allow."""
    budget = 20 * 2**30
    plan = kp.plan_kv_pools(
        pro, "fp8_e4m3", budget_bytes=budget, context_length=1 << 20, max_running_requests=1
    )
    pages = _budget_pages(budget, 1, _hand_units(pro, "fp8_e4m3", False), 3, 0.0, 0)
    assert plan.num_block_pages == pages and plan.kv_capacity_tokens == pages * 256
    dense = budget // kp.v32_kv_bytes_per_token("fp8_e4m3")
    assert plan.kv_capacity_tokens > 5 * dense and plan.max_concurrency >= 1


def test_too_small_budget_names_the_flags_in_the_direction_that_helps(flash: ModelConfig) -> None:
    """sgl-project/sglang#322 (the start-up "not enough memory" error said to increase
    ``--mem-fraction-static`` while the docs said to decrease it): a budget that cannot hold the
    request slots is a ValueError naming the field and the flags that fix it, each in the
    direction that gives the pools room (raise the fraction, lower the running requests)."""
    block, window, state = _hand_units(flash, "fp8_e4m3", False)
    budget = 8 * (3 * window + state)  # room for 8 slots, not 64 plus a page
    with pytest.raises(ValueError, match="budget_bytes") as exc:
        kp.plan_kv_pools(flash, "fp8_e4m3", budget_bytes=budget, context_length=4096, max_running_requests=64)
    msg = str(exc.value)
    assert "raise --mem-fraction-static" in msg and "lower --max-running-requests" in msg
    assert str(3 * window + state) in msg and str(block + window + state) in msg


def test_prefill_chunk_does_not_grow_with_the_pool(
    sched_model_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    """FlashML-org/FreeToken#171 (DeepSeek-V4's chunked-prefill budget was derived from the pool
    size, so a larger ``--num-tokens`` made larger chunks and OOM'd the prefill): with chunking
    disabled on a small and an 8x larger pool the runner's chunk is the same
    ``min(context, 64 window pages x sliding_window)``, and each start-up log line names its pool's
    capacity (``max_total_tokens`` whole pages)."""
    chunks = []
    for pages in (4, 32):
        with caplog.at_level(logging.INFO, logger="sglang_v4"):
            s = make_scheduler(sched_model_dir, max_total_tokens=pages * PAGE + 5, chunked_prefill_size=-1)
        assert s.max_total_num_tokens == pages * PAGE
        assert s.runner.plan.num_block_pages == pages
        chunks.append(s.runner.chunked_prefill_size)
        assert chunks[-1] == min(s.runner.context_len, 64 * s.runner.mc.sliding_window)
        assert any(f"KV capacity {pages * PAGE} tokens" in r.getMessage() for r in caplog.records)
        caplog.clear()
    assert chunks[0] == chunks[1]
