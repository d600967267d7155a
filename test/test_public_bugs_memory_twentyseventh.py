"""Public bug reports on KV capacity: requests whose prompt and completion reach the KV pool when the
pool is smaller than the context (``--max-total-tokens`` below ``--context-length``), a
``min_new_tokens`` the pool cannot hold, a prompt that nearly fills the pool, and a prompt that can
never fit arriving while others decode.

In-process schedulers on the ``sched_model_dir`` checkpoint (fp32, 256-token pages) with a 4-page
pool. Oracles: the page arithmetic (``max_total_num_tokens`` = pages x page size), the
allocators' counts, the finish reasons SGLang / vLLM document (``length`` at the cap, a 400 for a
prompt that can never fit) and the cold run of the same request alone.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, cold_output_ids, drain, make_scheduler, submit

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 4-page pool of 256-token pages (1024 tokens), below the model's context length."""
    s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE + 100)
    assert s.max_total_num_tokens == 4 * PAGE < s.context_len  # rounded down to whole pages
    return s


def _integrity(s: Any) -> None:
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


def test_min_new_tokens_past_the_pool_still_stops_at_the_cap(sched: Any) -> None:
    """vllm-project/vllm#51299 (``check_stop`` returned early while ``num_output_tokens <
    min_tokens``, skipping the length caps: a request reaching ``max_model_len`` before
    ``min_tokens`` was never stopped and held its KV blocks forever): with ``max_new_tokens``
    omitted and a ``min_new_tokens`` larger than the room the prompt leaves in the pool, the
    request ends with ``length`` once prompt + completion reach ``max_total_num_tokens`` (the cap
    applies whatever ``min_new_tokens`` says); every page and slot comes back."""
    pool = sched.max_total_num_tokens
    prompt = random_ids(pool - 6, seed=2701)
    submit(sched, "min", prompt, 1, sampling={"max_new_tokens": None, "min_new_tokens": pool})
    res = drain(sched, max_steps=400)["min"]
    assert res["finish"]["type"] == "length", res["finish"]
    assert len(prompt) + len(res["ids"]) == pool
    assert sched.num_retractions == 0
    assert_idle(sched)


def test_min_equal_to_max_new_tokens_past_the_pool_ends_with_length(sched: Any) -> None:
    """vllm-project/vllm#51299 again, its first form (``max_tokens == min_tokens`` larger than the
    remaining context, ``ignore_eos``): a request queued straight to the scheduler with both at
    twice the pool, its prompt leaving 8 tokens of room, never runs past the pool and never
    hangs: it ends with ``length`` at ``max_total_num_tokens`` tokens held, leaving nothing
    allocated."""
    pool = sched.max_total_num_tokens
    prompt = random_ids(pool - 8, seed=2702)
    submit(sched, "both", prompt, 2 * pool, sampling={"min_new_tokens": 2 * pool})
    res = drain(sched, max_steps=400)["both"]
    assert res["finish"]["type"] == "length", res["finish"]
    assert len(prompt) + len(res["ids"]) == pool
    assert sched.num_retractions == 0
    assert_idle(sched)


@pytest.mark.parametrize("room", [1, 4])
def test_prompt_just_under_the_pool_is_scheduled_not_queued_forever(sched: Any, room: int) -> None:
    """sgl-project/sglang#28530 and ai-dynamo/dynamo#9230 (a request admitted by the input-length
    check but never satisfying the prefill budget ``extend_input_len + max_new_tokens + page_size
    < rem_total_tokens`` sat in the waiting queue forever: no error, no batch): a prompt that
    leaves ``room`` tokens of the pool, with ``max_new_tokens = room``, is prefilled and decoded
    to exactly ``max_total_num_tokens`` tokens (the last sampled token needs no KV slot, so one
    token of room is enough), within a bounded number of steps; its output is the cold run's."""
    pool = sched.max_total_num_tokens
    prompt = random_ids(pool - room, seed=2703 + room)
    want = cold_output_ids(sched, "cold", prompt, room)
    submit(sched, "edge", prompt, room)
    res = drain(sched, max_steps=50 + 2 * room)["edge"]
    assert res["finish"]["type"] == "length", res["finish"]
    assert res["ids"] == want
    assert_idle(sched)


def test_prompt_that_can_never_fit_is_refused_while_others_decode(sched: Any) -> None:
    """FlashML-org/FreeToken#111 (a request whose prompt needs more KV pages than the pool has was
    never scheduled and never rejected, the client waiting for its own timeout): arriving while
    two requests decode, a prompt of ``max_total_num_tokens + 1`` tokens is finished promptly
    with a 400 naming its length and the pool, holds no page, and the decoding requests produce
    exactly their cold-run outputs."""
    pool = sched.max_total_num_tokens
    a, b = random_ids(300, seed=2711), random_ids(520, seed=2712)
    want_a = cold_output_ids(sched, "ca", a, 8)
    want_b = cold_output_ids(sched, "cb", b, 8)
    submit(sched, "a", a, 8)
    submit(sched, "b", b, 8)
    got: dict[str, dict] = {}
    for _ in range(3):  # both prefilled and decoding
        out = sched.step()
        for i, rid in enumerate(out.rids if out else []):
            got.setdefault(rid, {"ids": []})["ids"] += out.output_ids[i]
    submit(sched, "huge", random_ids(pool + 1, seed=2713), 4)
    steps = 0
    while "huge" not in got or got["huge"].get("finish") is None:
        out = sched.step()
        steps += 1
        for i, rid in enumerate(out.rids if out else []):
            r = got.setdefault(rid, {"ids": []})
            r["ids"] += out.output_ids[i]
            r["finish"] = out.finished_reasons[i]
        assert steps <= 3, "the over-long prompt was not refused promptly"
    fin = got["huge"]["finish"]
    assert fin["type"] == "abort" and fin.get("status_code") == 400, fin
    assert str(pool + 1) in fin["message"] and str(pool) in fin["message"], fin["message"]
    assert got["huge"]["ids"] == []
    _integrity(sched)
    rest = drain(sched)
    for rid, want in (("a", want_a), ("b", want_b)):
        assert got.get(rid, {"ids": []})["ids"] + rest.get(rid, {"ids": []})["ids"] == want, rid
    assert_idle(sched)


def test_fp8_kv_pool_raises_the_longest_request_the_same_budget_holds() -> None:
    """vllm-project/vllm#25350 (with ``--kv-cache-dtype fp8`` the pool held twice the tokens, yet
    the check of the longest servable request still sized it as bf16 and refused a
    ``max_model_len`` the fp8 pool could hold): for one byte budget that holds exactly one
    1M-token request in fp8 entries, the fp8 plan serves the full context (no start-up warning)
    while the bf16 plan of the same bytes holds fewer tokens and says so. Oracles: DeepSeek-V4's
    published entry sizes (bf16 main entry 512 x 2 B = 1024 B; fp8 ``448 e4m3 + 64 bf16 + 7
    ue8m0 + 1 pad`` = 584 B) and the planner's documented arithmetic ``num_block_pages =
    (budget - dummy - n * (w * window + state)) // block_page_bytes`` (``dummy``: the reserved
    page 0 of each page space, ``block + window + state``), ``max_context = min(context,
    capacity)``."""
    from sglang_v4.mem_cache import kv_planner as kp
    from sglang_v4.tools import kv_planner

    flash = kv_planner.load_preset_config("flash")
    length = 1 << 20
    fp8_layout = kp.plan_kv_pools(flash, "fp8_e4m3", max_total_tokens=PAGE, context_length=length).layout
    bf16_layout = kp.plan_kv_pools(flash, "bf16", max_total_tokens=PAGE, context_length=length).layout
    main_bf16, main_fp8 = 512 * 2, 448 + 64 * 2 + 448 // 64 + 1
    assert (main_bf16, main_fp8) == (1024, 584)
    assert fp8_layout.block_page_bytes < bf16_layout.block_page_bytes
    # one 1M-token request in fp8: its block pages, 3 window pages and its request state, plus
    # the pools' reserved page 0 of each space
    dummy_fp8 = fp8_layout.block_page_bytes + fp8_layout.window_page_bytes + fp8_layout.request_state_bytes
    budget = (
        length // PAGE * fp8_layout.block_page_bytes
        + 3 * fp8_layout.window_page_bytes
        + fp8_layout.request_state_bytes
        + dummy_fp8
    )
    fp8 = kp.plan_kv_pools(
        flash, "fp8_e4m3", budget_bytes=budget, context_length=length, max_running_requests=1
    )
    bf16 = kp.plan_kv_pools(flash, "bf16", budget_bytes=budget, context_length=length, max_running_requests=1)
    assert fp8.kv_capacity_tokens == length and fp8.max_context == length
    assert fp8.max_concurrency == 1 and fp8.capacity_warning() is None
    dummy_bf16 = (
        bf16_layout.block_page_bytes + bf16_layout.window_page_bytes + bf16_layout.request_state_bytes
    )
    want_bf16 = (
        (budget - dummy_bf16 - (3 * bf16_layout.window_page_bytes + bf16_layout.request_state_bytes))
        // bf16_layout.block_page_bytes
        * PAGE
    )
    assert bf16.kv_capacity_tokens == want_bf16 < length
    assert bf16.max_context == want_bf16 and bf16.max_concurrency == 0
    warning = bf16.capacity_warning()
    assert warning is not None and str(want_bf16) in warning and str(length) in warning
