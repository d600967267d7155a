"""The twenty-third set of public bug reports on the radix prefix cache, the page accounting and
the scheduler around them, replayed against sglang-v4's in-process scheduler on conftest's
``sched_model_dir`` checkpoint (CPU, float32, 256-token pages, greedy).

Oracles: a cold run of the same request (after ``flush_cache``) for outputs; the token counts of
the conversation (whole blocks before the first token that differs, never the last token) for
``cached_tokens``; ``CacheManager.check_integrity`` and the allocators' own free counts
(``assert_idle``) for pages; the radix tree's lock counters for balanced locks.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """An in-process ``Scheduler`` on the real tiny model (32 pages of 256 tokens)."""
    return make_scheduler(sched_model_dir)


@pytest.fixture(scope="module")
def small(sched_model_dir: str) -> Any:
    """A scheduler with five block pages, 256-token prefill chunks, one queued request at most
    (``--max-queued-requests 1``) and no overlap (each step's result is processed in that step)."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=5 * PAGE,
        chunked_prefill_size=PAGE,
        max_queued_requests=1,
        disable_overlap_schedule=True,
    )


def _whole_blocks(n: int) -> int:
    """Tokens of the whole blocks among the first ``n`` tokens."""
    return n // PAGE * PAGE


def _step_collect(s: Any, got: dict[str, dict]) -> None:
    """One scheduler step; its messages appended to ``got`` (per rid: ``ids``, ``finish``)."""
    out = s.step()
    for i, rid in enumerate(out.rids if out else []):
        r = got.setdefault(rid, {"ids": [], "finish": None, "cached": 0})
        r["ids"] += out.output_ids[i]
        r["finish"] = out.finished_reasons[i]
        r["cached"] = out.cached_tokens[i]


# --- multi-turn reuse ------------------------------------------------------------------------------


def test_omlx_2876_blocks_completed_while_decoding_serve_the_next_turn(sched: Any) -> None:
    """jundot/omlx#2876 (the cache served only the previous turn's *prompt* blocks: a block that
    a turn's reply completed was prefilled again by the next turn). Turn 1's prompt has no whole
    block; its 120-token reply crosses the first block end. Turn 2 (turn 1 + reply + new text)
    reports ``cached_tokens`` of one whole block (oracle: the conversation's token counts), and
    its tokens equal its cold run."""
    assert sched.flush_cache()
    prompt = random_ids(PAGE - 40, seed=2876)
    first = run_one(sched, "t1", prompt, 120)
    assert first["cached"] == 0
    turn2 = prompt + first["ids"] + random_ids(30, seed=2877)
    warm = run_one(sched, "t2", turn2, 4)
    # the reply's last token has no KV (it was sampled, never fed): it is not cached
    assert warm["cached"] == _whole_blocks(len(prompt) + len(first["ids"]) - 1) == PAGE
    assert sched.flush_cache()
    assert run_one(sched, "t2-cold", turn2, 4)["ids"] == warm["ids"]
    assert_idle(sched)


def test_rapid_mlx_1611_a_turn_that_drops_the_stored_tail_still_hits(sched: Any) -> None:
    """raullenchai/Rapid-MLX#1611 (the stored entry of turn 1 ran a few tokens past what turn 2
    repeats, its end-of-turn markers, and the whole match was discarded). Turn 1 (a prompt and a
    58-token reply) ends one token into its third block, so three blocks are stored; turn 2 keeps
    turn 1's sequence except the reply's last 3 tokens, which fall inside that third block, then
    goes on with other tokens. It hits the two whole blocks before the first differing token
    (oracle: the shared length), not nothing, and its tokens equal its cold run."""
    assert sched.flush_cache()
    prompt = random_ids(2 * PAGE + 200, seed=1611)
    first = run_one(sched, "t1", prompt, 58)
    entry = prompt + first["ids"]
    assert sched.cache_manager.prefix_match_len(entry) == 3 * PAGE  # the stored entry
    shared = entry[:-3]
    turn2 = shared + [7, 8, 9, 10]
    warm = run_one(sched, "t2", turn2, 4)
    assert warm["cached"] == _whole_blocks(len(shared)) == 2 * PAGE
    assert sched.flush_cache()
    assert run_one(sched, "t2-cold", turn2, 4)["ids"] == warm["ids"]
    assert_idle(sched)


def test_rapid_mlx_1611_divergence_inside_an_earlier_block(sched: Any) -> None:
    """raullenchai/Rapid-MLX#1611, the edge: the first differing token lies inside the second
    block of a three-block entry. Only the first block is hit (a block is shared only whole), and
    the tokens equal the cold run."""
    assert sched.flush_cache()
    prompt = random_ids(3 * PAGE + 20, seed=1612)
    run_one(sched, "t1", prompt, 2)
    turn2 = prompt[: PAGE + 100] + random_ids(PAGE, seed=1613)
    warm = run_one(sched, "t2", turn2, 4)
    assert warm["cached"] == PAGE
    assert sched.flush_cache()
    assert run_one(sched, "t2-cold", turn2, 4)["ids"] == warm["ids"]
    assert_idle(sched)


@pytest.mark.parametrize("length", [2 * PAGE, 2 * PAGE + 1])
def test_vllm_33711_the_hit_at_the_last_block_edge(sched: Any, length: int) -> None:
    """vllm-project/vllm#33711 (sliding-window prefix caching missed a block at the edge: the
    lookup covers ``num_tokens - 1`` tokens, the last one being recomputed, and the kept blocks
    were off by one). The same prompt is sent twice, once exactly two blocks long and once one
    token longer: the second send hits ``floor((len - 1) / 256)`` whole blocks (oracle: the
    lookup length), here one block and two blocks, and its tokens equal the cold run."""
    assert sched.flush_cache()
    prompt = random_ids(length, seed=33711)
    cold = run_one(sched, "cold", prompt, 4)
    assert cold["cached"] == 0
    warm = run_one(sched, "warm", prompt, 4)
    assert warm["cached"] == _whole_blocks(length - 1)
    assert warm["ids"] == cold["ids"]
    assert_idle(sched)


def test_mlxcel_179_hit_leaving_a_short_suffix_under_chunked_prefill(small: Any) -> None:
    """lablup/mlxcel#179 (with chunked prefill, a third turn whose cache hit covered all but a
    short suffix scheduled one more, empty, chunk and crashed). Under 256-token chunks a prompt
    of three whole cached blocks plus 13 tokens is served: ``cached_tokens`` is the three blocks,
    the suffix is one chunk, and the tokens equal the cold run."""
    assert small.flush_cache()
    base = random_ids(3 * PAGE + 10, seed=179)
    turn3 = base + [5, 6, 7]
    cold = run_one(small, "cold", turn3, 4)
    assert small.flush_cache()
    run_one(small, "t2", base, 2)
    got: dict[str, dict] = {}
    submit(small, "t3", turn3, 4)
    _step_collect(small, got)  # the suffix and the first token: one step
    assert got["t3"]["cached"] == 3 * PAGE and len(got["t3"]["ids"]) == 1
    drain(small, got)
    assert got["t3"]["ids"] == cold["ids"]
    assert_idle(small)


def test_splash_16_a_waiter_on_a_cancelled_producer_falls_back_to_admission(small: Any) -> None:
    """incoai/splash#16 (requests waiting to reuse the prefix a running request is still
    prefilling must fall back to ordinary admission when that producer is cancelled, and a
    cancelled waiter must leave the producer alone). Under 256-token chunks ``A`` (three blocks
    and 10 tokens) is prefilling when ``B``, sharing its first two blocks and 5 tokens, arrives
    and waits for them. ``A`` is aborted after two chunks: ``B`` is admitted, hits the two blocks
    ``A`` completed (oracle: the chunks computed) and its tokens equal its cold run. Then the
    roles are replayed with ``B`` aborted while it waits: ``A`` finishes with its cold run's
    tokens, ``B`` ends with SGLang's queue-abort message, and no page is left in use."""
    prod = random_ids(3 * PAGE + 10, seed=16)
    waiter = prod[: 2 * PAGE + 5] + random_ids(20, seed=17)
    assert small.flush_cache()
    cold_w = run_one(small, "cold-w", waiter, 4)["ids"]
    assert small.flush_cache()
    cold_p = run_one(small, "cold-p", prod, 4)["ids"]
    assert small.flush_cache()
    got: dict[str, dict] = {}
    submit(small, "A", prod, 4)
    _step_collect(small, got)
    submit(small, "B", waiter, 4)
    _step_collect(small, got)
    assert [r.rid for r in small.waiting] == ["B"]  # waiting for A's blocks
    small.abort_request("A")
    drain(small, got)
    assert got["A"]["finish"]["type"] == "abort"
    assert got["B"]["cached"] == 2 * PAGE
    assert got["B"]["ids"] == cold_w
    assert_idle(small)
    got = {}
    submit(small, "A", prod, 4)
    _step_collect(small, got)
    submit(small, "B", waiter, 4)
    _step_collect(small, got)
    small.abort_request("B")
    drain(small, got)
    assert got["B"]["finish"]["message"] == "Abort in waiting queue" and got["B"]["ids"] == []
    assert got["A"]["ids"] == cold_p
    assert_idle(small)


# --- pressure: retraction, the queue limit, requests the pool cannot hold ----------------------------


def test_sglang_37260_a_retracted_request_is_not_refused_by_the_queue_limit(small: Any) -> None:
    """sgl-project/sglang#37260 (a request retracted for KV pages went back through the
    ``--max-queued-requests`` check and was answered 503 because other requests filled the
    queue). With one queued request allowed, ``a`` and ``b`` run, ``c`` waits, and the pool runs
    dry so ``b`` is retracted into the full queue: all three finish with their whole budget, ``a``
    and ``b`` with their cold runs' tokens (oracle); nothing is refused, nothing leaks."""
    a, b, c = (random_ids(PAGE + 230, seed=3726 + i) for i in range(3))
    assert small.flush_cache()
    cold = {}
    for rid, p in (("a", a), ("b", b)):
        cold[rid] = run_one(small, f"cold-{rid}", p, 40)["ids"]
        assert small.flush_cache()
    got: dict[str, dict] = {}
    submit(small, "a", a, 40)
    _step_collect(small, got)
    submit(small, "b", b, 40)
    _step_collect(small, got)
    submit(small, "c", c, 40)
    retracted_before, peak = small.num_retractions, 0
    while small.has_work():
        _step_collect(small, got)
        peak = max(peak, len(small.waiting))
    assert small.num_retractions > retracted_before
    assert peak == 2  # the queue limit (1) was exceeded by the retracted request
    for rid in ("a", "b", "c"):
        assert got[rid]["finish"]["type"] == "length", got[rid]["finish"]
        assert len(got[rid]["ids"]) == 40
    assert got["a"]["ids"] == cold["a"] and got["b"]["ids"] == cold["b"]
    assert_idle(small)


def test_vllm_52530_a_prompt_the_pool_can_never_hold_fails_and_others_run(small: Any) -> None:
    """vllm-project/vllm#52530 (a request the KV pool could never hold was retried forever). A
    prompt of six blocks reaches the five-block scheduler past the tokenizer's check: it ends
    with a 400 abort within a bounded number of steps, and a short request queued behind it is
    served with its cold run's tokens; no page is left in use."""
    assert small.flush_cache()
    short = random_ids(40, seed=5253)
    cold = run_one(small, "cold", short, 3)["ids"]
    assert small.flush_cache()
    submit(small, "huge", random_ids(6 * PAGE, seed=5254), 3)
    got: dict[str, dict] = {}
    for _ in range(50):
        _step_collect(small, got)
        if "huge" in got and got["huge"]["finish"] is not None:
            break
    assert got["huge"]["finish"]["type"] == "abort"
    assert got["huge"]["finish"]["status_code"] == 400
    assert got["huge"]["ids"] == []
    submit(small, "short", short, 3)
    drain(small, got, max_steps=50)
    assert got["short"]["ids"] == cold
    assert_idle(small)


def test_sglang_14948_a_request_outgrowing_the_pool_is_capped_not_crashed(small: Any) -> None:
    """sgl-project/sglang#14948 (a lone long request exhausted the KV pool while decoding and
    the retraction path crashed on an assertion). A prompt 60 tokens short of five blocks asks
    for 400 tokens in a five-block pool: generation stops when the request holds the whole pool
    (finish ``length``, prompt + output == pool tokens, oracle: the pool size) instead of
    crashing, and every page is returned."""
    assert small.flush_cache()
    prompt = random_ids(5 * PAGE - 60, seed=1494)
    out = run_one(small, "long", prompt, 400)
    assert out["finish"]["type"] == "length"
    assert len(prompt) + len(out["ids"]) == small.max_total_num_tokens == 5 * PAGE
    assert_idle(small)


# --- locks under a shared-prefix workload ------------------------------------------------------------


def test_sglang_24153_locks_stay_balanced_under_shared_prefix_churn(sched_model_dir: str) -> None:
    """sgl-project/sglang#24153 (a DeepSeek-V4 long-context workload with shared prefixes
    crashed in ``dec_lock_ref`` on a node whose lock count was already 0). Fourteen requests
    share two long prefixes cut at block edges and mid-block, with 256-token chunks, a four-block
    pool (so cached blocks are evicted), overlap scheduling, ``lpm`` and aborts at random steps.
    After every step the ownership invariant holds (``check_integrity``), and at the end no lock
    is left and a flush frees every page."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=4 * PAGE,
        chunked_prefill_size=PAGE,
        schedule_policy="lpm",
        max_running_requests=4,
    )
    rng = random.Random(24153)
    bases = [random_ids(2 * PAGE + 30, seed=24153 + i) for i in range(2)]
    live: set[str] = set()
    for step in range(120):
        n = step // 4
        if step % 4 == 0 and n < 14:
            cut = rng.choice([PAGE - 5, PAGE, PAGE + 1, 2 * PAGE, 2 * PAGE + 30])
            ids = rng.choice(bases)[:cut] + random_ids(rng.randint(0, 40), seed=1000 + n)
            submit(s, f"r{n}", ids, rng.randint(1, 40))
            live.add(f"r{n}")
        if live and rng.random() < 0.08:
            s.abort_request(rng.choice(sorted(live)))
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            if out.finished_reasons[i] is not None:
                live.discard(rid)
        if s.last_batch is None:  # nothing in flight: the pages are all accounted for
            s.cache_manager.check_integrity([*s.running, *s.waiting])
    drain(s)
    s.cache_manager.check_integrity([])
    st = s.tree_cache.stats()
    assert st["evicted_blocks"] > 0  # the pool was under pressure
    assert st["locked_nodes"] == 0 and st["locked_blocks"] == 0 and st["locked_resume_states"] == 0
    assert_idle(s)


# --- LRU stamps across node splits (the tree alone, 4-token blocks) ----------------------------------


def _tree() -> tuple[Any, Any, Any]:
    from sglang_v4.mem_cache.allocator import PageAllocator
    from sglang_v4.mem_cache.radix_cache import RadixCache

    ba, wa = PageAllocator(32, "block"), PageAllocator(32, "window")
    return RadixCache(ba, wa, page_size=4), ba, wa


def _cache(tree: Any, ba: Any, wa: Any, tokens: list[int]) -> None:
    """Insert whole 4-token blocks as a finished request would: fresh pages, a resume state at
    every block end, the duplicates the tree already had freed."""
    nb = len(tokens) // 4
    blocks, wins = ba.alloc_or_raise(nb), wa.alloc_or_raise(nb)
    tb, tw = tree.insert(tokens, blocks, wins)
    ba.free([b for b, t in zip(blocks, tb) if t != b])
    wa.free([w for w, t in zip(wins, tw) if t is not None and t != w])


A, B, C, D = [1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4]


@pytest.mark.parametrize("split_by", ["match", "insert"])
def test_sglang_24892_a_split_refreshes_the_matched_part_only(split_by: str) -> None:
    """sgl-project/sglang#24892 and sgl-project/mini-sglang#124 (a partial match that split a
    node refreshed the unmatched suffix as recently used, or left the matched prefix with its old
    stamp). ``A+B`` is cached, then ``C``; then ``A`` alone is used (a match of ``A+C'`` or an
    insert of ``A+D``), which splits ``A+B``. Oracle: LRU by the order of those uses. Freeing one
    block evicts ``B`` (used before ``C``, never since); freeing one more evicts ``C``; ``A``,
    used last, stays."""
    tree, ba, wa = _tree()
    _cache(tree, ba, wa, A + B)
    _cache(tree, ba, wa, C)
    if split_by == "match":
        assert tree.match_prefix(A + [9, 9, 9, 9, 9]).num_tokens == 4
    else:
        _cache(tree, ba, wa, A + D)
    tree.evict(1, 0)
    assert tree.match_prefix_len(A + B + [0]) == 4  # B gone, A kept
    assert tree.match_prefix_len(C + [0]) == 4
    tree.evict(1, 0)
    assert tree.match_prefix_len(C + [0]) == 0
    assert tree.match_prefix_len(A + [0]) == 4
    blocks, windows = tree.total_pages()
    assert (ba.used, wa.used) == (blocks, windows)


def _window_bound_manager() -> tuple[Any, Any, Any]:
    """A ``CacheManager`` over 4-token blocks with 16 block pages and only 4 window pages (the
    window pool is the bottleneck); ``A+B`` and ``A+C`` are cached (a shared node ``A`` and two
    leaves, a resume state at every block end: 3 window pages), then the last free window page
    is taken by a running request."""
    from types import SimpleNamespace

    from sglang_v4.mem_cache.allocator import PageAllocator
    from sglang_v4.mem_cache.cache_manager import CacheManager

    ba, wa = PageAllocator(16, "block"), PageAllocator(4, "window")
    pool = SimpleNamespace(block_alloc=ba, window_alloc=wa, req_slots=PageAllocator(4, "slot"))
    cm = CacheManager(pool, page_size=4, sliding_window=4)  # type: ignore[arg-type]
    _cache(cm.tree_cache, ba, wa, A + B)
    _cache(cm.tree_cache, ba, wa, A + C)
    wa.alloc_or_raise(1)
    return cm, ba, wa


def test_sglang_29662_a_window_shortage_frees_resume_states_not_blocks() -> None:
    """sgl-project/sglang#29662 (when the sliding-window pool was the bottleneck, eviction was
    driven through the full-KV leaves: the window pages held on inner nodes were never visited,
    and leaves were dropped for what they could not give). With every window page in use, asking
    for two frees two resume states, the inner node's included, and evicts no block (oracle: the
    allocators' counts); asking for more window pages than the tree holds fails and still evicts
    no block: a cached block holds no window page once its resume state is gone."""
    cm, ba, wa = _window_bound_manager()
    assert (ba.used, wa.available) == (3, 0)
    assert cm.evict(0, 2)
    assert (ba.used, wa.available) == (3, 2)
    cm, ba, wa = _window_bound_manager()
    assert not cm.evict(0, 4)  # the tree holds 3 resume states, the request keeps its page
    assert wa.available == 3
    assert ba.used == 3  # A, B and C are still cached
    assert cm.tree_cache.total_pages() == (3, 0)
