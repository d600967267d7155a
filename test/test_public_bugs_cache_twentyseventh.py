"""The twenty-seventh set of public bug reports on the radix prefix cache and the scheduler
around it: LRU order of eviction after a hit, prefix-hit accounting across prefill chunks,
prompts of three and more chunks, a chunked request's slot kept while others come and go,
recompute preemption (outputs, penalties and pages), and the page books under a full pool with
chunked prefill.

Two levels:

* :class:`~sglang_v4.mem_cache.radix_cache.RadixCache` alone on small blocks (``page_size`` 4)
  with real page allocators. Oracle: the blocks each sequence owns, counted by hand.
* The in-process scheduler on conftest's ``sched_model_dir`` checkpoint (CPU, float32, 256-token
  pages, greedy). Oracles: a cold run of the same request alone on a flushed cache (and, for
  chunking, the same prompt prefilled in one piece by a scheduler without chunking), the prompt
  lengths and hits derived by hand, and the allocators' own counts for pages.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    collect_outputs,
    drain,
    insert_finished,
    make_scheduler,
    radix_tree,
    run_one,
    submit,
)
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache

pytestmark = pytest.mark.timeout(300)

P = 4  # block size of the tree-level tests


# --- tree level ----------------------------------------------------------------------------------


def _insert(c: RadixCache, ba: PageAllocator, wa: PageAllocator, key: list[int]) -> None:
    """``scheduler_testutil.insert_finished`` on this file's block size."""
    insert_finished(c, ba, wa, key, P)


def test_scalellm_89_a_prefix_hit_again_outlives_colder_newer_ones() -> None:
    """vectorch-ai/ScaleLLM#89 (the prefix cache evicts the least recently *accessed* entries
    first, not the oldest inserted). Three one-block sequences ``a``, ``b``, ``c`` are cached in
    that order; ``a`` is then hit again. Evicting one block takes ``b`` (now the least recently
    used), a second takes ``c``, and ``a`` still hits its block."""
    c, ba, wa = radix_tree(P)
    a, b, d = ([k] * P for k in (11, 22, 33))
    for seq in (a, b, d):
        _insert(c, ba, wa, seq)
    assert c.match_prefix(a + [0]).num_tokens == P  # a use: stamps a as most recent
    assert c.evict(num_block_pages=1)[0] == 1
    assert [c.match_prefix_len(s + [0]) for s in (a, b, d)] == [P, 0, P]
    assert c.evict(num_block_pages=1)[0] == 1
    assert [c.match_prefix_len(s + [0]) for s in (a, b, d)] == [P, 0, 0]
    assert ba.used == 1 and wa.used == 1


def test_lucebox_452_eviction_takes_branch_leaves_before_their_shared_root() -> None:
    """Luce-Org/lucebox#452 (eviction should drop branch-specific leaves before the short
    ancestor every branch shares, so later branches keep hitting it). A shared 1-block root and
    two 2-block branches under it (5 blocks); the root was inserted first and is the oldest
    entry. Evicting 4 blocks leaves exactly the root, which every branch and a new one still
    hit; evicting more then takes it."""
    c, ba, wa = radix_tree(P)
    root = [7] * P
    _insert(c, ba, wa, root)
    branches = [root + list(range(100 * i, 100 * i + 2 * P)) for i in (1, 2)]
    for br in branches:
        _insert(c, ba, wa, br)
    assert ba.used == 5
    assert c.evict(num_block_pages=4)[0] == 4
    assert ba.used == 1
    for br in branches + [root + [999] * P]:
        assert c.match_prefix_len(br + [0]) == P
    assert c.evict(num_block_pages=1)[0] == 1 and ba.used == 0 and wa.used == 0


# --- scheduler level -----------------------------------------------------------------------------


def _run(s: Any, res: dict[str, dict], max_steps: int = 2000) -> None:
    for _ in range(max_steps):
        if not s.has_work():
            return
        collect_outputs(s.step(), res)
    raise AssertionError("scheduler did not finish")


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Eight block pages (2048 tokens), 256-token prefill chunks, no overlap."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=8 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


@pytest.fixture(scope="module")
def whole(sched_model_dir: str) -> Any:
    """The same pool with prompts prefilled in one piece (the unchunked oracle)."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=8 * PAGE,
        chunked_prefill_size=8 * PAGE,
        disable_overlap_schedule=True,
    )


def _cold(s: Any, rid: str, ids: list[int], n: int, sampling: dict | None = None) -> list[int]:
    """``ids`` run alone on a flushed cache (``n`` new tokens, greedy, extra ``sampling``)."""
    assert s.flush_cache()
    submit(s, rid, ids, n, sampling=sampling)
    out = drain(s)[rid]["ids"]
    assert s.flush_cache()
    return out


def test_llmservingsim_49_prefix_hits_of_a_chunked_prompt_are_counted_once(sched: Any) -> None:
    """casys-kaist/LLMServingSim#49 (with chunked prefill the cache was updated once per chunk
    and each chunk added the request's whole prompt and hit to the prefix-cache statistics
    again). A 600-token prompt in 256-token chunks (three chunks): cold, the counters grow by 600
    prompt tokens and 0 hit tokens, and the request reports 0 cached; warm, by 600 and 512
    (``floor(599 / 256) * 256``), and the request reports 512 cached."""
    prompt = random_ids(600, seed=49)
    assert sched.flush_cache()
    st0 = sched.tree_cache.stats()
    cold = run_one(sched, "cold", prompt, 2)
    st1 = sched.tree_cache.stats()
    assert cold["cached"] == 0
    assert (st1["prompt_tokens"] - st0["prompt_tokens"], st1["hit_tokens"] - st0["hit_tokens"]) == (600, 0)
    warm = run_one(sched, "warm", prompt, 2)
    st2 = sched.tree_cache.stats()
    assert warm["cached"] == 2 * PAGE
    assert (st2["prompt_tokens"] - st1["prompt_tokens"], st2["hit_tokens"] - st1["hit_tokens"]) == (
        600,
        2 * PAGE,
    )
    assert warm["ids"] == cold["ids"]
    assert_idle(sched)


def test_sglang_jax_971_a_prompt_of_four_chunks_samples_once_after_its_last(sched: Any, whole: Any) -> None:
    """sgl-project/sglang-jax#971 (for a prompt of three or more chunks the in-progress counter
    ran out early, so a middle chunk's result went through the sample-and-finish path and
    corrupted the pools). An 800-token prompt in 256-token chunks (four chunks) emits no token
    until its last chunk, then exactly its 4 tokens, equal to the same prompt prefilled in one
    piece; its prompt is prefilled exactly once (800 tokens) and nothing leaks."""
    prompt = random_ids(800, seed=971)
    oracle = _cold(whole, "w", prompt, 4)
    assert sched.flush_cache()
    done = sched.prefill_tokens_done
    submit(sched, "r", prompt, 4)
    res: dict[str, dict] = {}
    for _ in range(3):  # the three chunks before the last: no output token yet
        collect_outputs(sched.step(), res)
        assert res.get("r", {}).get("ids", []) == []
    _run(sched, res)
    assert res["r"]["ids"] == oracle and res["r"]["finish"]["type"] == "length"
    assert sched.prefill_tokens_done - done == len(prompt)
    assert_idle(sched)


def test_sglang_jax_1008_a_chunked_request_keeps_its_slot_while_others_come_and_go(
    sched: Any, whole: Any
) -> None:
    """sgl-project/sglang-jax#1008 (between chunks the scheduler freed a chunked request's
    request slot and relied on getting it back; meanwhile the slot went to another request,
    whose prefix indices overwrote the row still in use). ``long`` (800 tokens, four chunks)
    prefills while short requests arrive and finish between its chunks: ``long`` keeps one
    request slot from its first chunk to its end, no other request is ever given that slot
    meanwhile, and every output equals its cold run."""
    long = random_ids(800, seed=1008)
    shorts = {f"s{i}": random_ids(40 + 10 * i, seed=10080 + i) for i in range(2)}
    cold = {k: _cold(whole, k, v, 2) for k, v in shorts.items()}
    cold["long"] = _cold(whole, "long", long, 3)
    assert sched.flush_cache()
    submit(sched, "long", long, 3)
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    slot = next(r for r in sched.running if r.rid == "long").req_pool_idx
    assert slot is not None
    pending = list(shorts.items())
    for _ in range(200):
        if not sched.has_work() and not pending:
            break
        if pending:
            submit(sched, pending[0][0], pending[0][1], 2)
            pending.pop(0)
        collect_outputs(sched.step(), res)
        live = {r.rid: r.req_pool_idx for r in list(sched.running) + list(sched.waiting)}
        if "long" in live:
            assert live["long"] == slot
        assert [k for k, v in live.items() if v == slot and k != "long"] == []
    for k, want in cold.items():
        assert res[k]["ids"] == want, k
    assert_idle(sched)


@pytest.fixture(scope="module")
def tight(sched_model_dir: str) -> Any:
    """Four block pages (1024 tokens), 256-token chunks, no overlap: three 250-token requests of
    8 new tokens each need 6 pages at their end, so some are retracted and recomputed."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=4 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


def _retraction_run(s: Any, prompts: dict[str, list[int]], sampling: dict | None) -> dict[str, dict]:
    """Submit every prompt (8 new tokens, extra ``sampling``) at once and run to idle; asserts at
    least one retraction happened. Per rid: ``ids``, ``chunks``, ``completion``, ``finish``."""
    assert s.flush_cache()
    before = s.num_retractions
    for k, p in prompts.items():
        submit(s, k, p, 8, sampling=sampling)
    res = drain(s)
    assert s.num_retractions > before
    return res


def test_vllm_oxide_40_and_vllm_5349_a_recomputed_request_resumes_to_its_cold_output(tight: Any) -> None:
    """RedHeartSecretMan/vllm-oxide#40 (recompute preemption must keep the prompt-plus-completion
    history, so a preempted request converges on the same deterministic output as one never
    preempted, with no token duplicated and no block leaked) and vllm-project/vllm#5349 (after
    recompute preemption the generated tokens were treated as prompt tokens; frequency and
    repetition penalties tell input from output tokens, so they must stay apart). Three requests
    that cannot all finish in four pages force retractions, with a frequency and a repetition
    penalty on (they change the greedy output here: checked against an unpenalized cold run).
    Each request's tokens equal its cold run alone with the same penalties, arrive in messages
    that add up to exactly 8 tokens (none sent twice), and nothing is left allocated."""
    sampling = {"frequency_penalty": 1.5, "repetition_penalty": 1.3}
    prompts = {f"r{i}": random_ids(250, seed=400 + i) for i in range(3)}
    cold = {k: _cold(tight, k, p, 8, sampling) for k, p in prompts.items()}
    assert _cold(tight, "plain", prompts["r0"], 8) != cold["r0"]  # the penalties matter
    res = _retraction_run(tight, prompts, sampling)
    for k in prompts:
        assert res[k]["ids"] == cold[k], k
        assert sum(len(c) for c in res[k]["chunks"]) == 8 == res[k]["completion"], k
        assert res[k]["finish"]["type"] == "length", k
    assert_idle(tight)


def _private_pages(reqs: list[Any]) -> tuple[int, int]:
    """Block and window pages the requests hold themselves (not the tree's)."""
    blocks = sum(len(r.block_pages) - r.num_tree_blocks for r in reqs)
    windows = sum(len(set(r.window_pages) - set(r.tree_window_spans)) for r in reqs)
    return blocks, windows


def test_sglang_jax_1400_a_full_pool_with_chunked_prefill_keeps_every_page_accounted(tight: Any) -> None:
    """sgl-project/sglang-jax#1400 (under a full pool and concurrency, a chunked-prefill request
    was dropped from the batch without its request slot being freed: the slot leaked and the
    request silently vanished). Four pages, a 600-token chunked prompt and two 250-token
    requests, 8 new tokens each: after every step the allocators' used counts equal the tree's
    pages plus the live requests' own, every waiting request holds no slot, the slots in use
    equal the live requests holding one; every request finishes with its 8 tokens and nothing is
    left in use."""
    prompts = {
        "chunked": random_ids(600, seed=1400),
        "a": random_ids(250, seed=1401),
        "b": random_ids(250, seed=1402),
    }
    s = tight
    assert s.flush_cache()
    for k, p in prompts.items():
        submit(s, k, p, 8)
    ba, wa, slots = s.pool.block_alloc, s.pool.window_alloc, s.pool.req_slots
    res: dict[str, dict] = {}
    for _ in range(2000):
        if not s.has_work():
            break
        collect_outputs(s.step(), res)
        for q in s.waiting:
            assert q.req_pool_idx is None and q.block_pages == [], q.rid
        live = [r for r in list(s.running) + list(s.waiting) if r.req_pool_idx is not None]
        assert slots.size - slots.available == len(live)
        tb, tw = s.tree_cache.total_pages()
        pb, pw = _private_pages(live)
        assert (ba.used, wa.used) == (tb + pb, tw + pw)
    for k in prompts:
        assert len(res[k]["ids"]) == 8 and res[k]["finish"]["type"] == "length", k
    assert_idle(s)


def test_vllm_53347_a_salt_isolates_its_prefix_and_the_same_salt_reuses_it(sched: Any) -> None:
    """vllm-project/vllm#53347 (verifying ``cache_salt`` isolation takes a paired assertion: a
    different salt gets no reuse *and* the same salt does reuse, else a test also passes with
    the cache off or a salt that reaches nothing) and LMCache/LMCache#4825 (a salt dropped on
    the way to the cache keys let another tenant hit the first one's prefix). One 300-token
    prompt: under salt ``A`` cold (0 cached), under salt ``B`` 0 cached, with no salt 0 cached,
    under ``A`` again 256 cached (``floor(299 / 256) * 256``); every run's tokens are the same."""
    prompt = random_ids(300, seed=53347)
    assert sched.flush_cache()
    got = {}
    for rid, salt in (("a1", "A"), ("b", "B"), ("none", None), ("a2", "A")):
        submit(sched, rid, prompt, 2, extra_key=salt)
        got[rid] = drain(sched)[rid]
    assert [got[k]["cached"] for k in ("a1", "b", "none", "a2")] == [0, 0, 0, PAGE]
    assert got["a1"]["ids"] == got["b"]["ids"] == got["none"]["ids"] == got["a2"]["ids"]
    assert_idle(sched)


def test_vllm_42245_prompt_logprobs_with_a_prefix_hit_equal_the_cold_run(sched: Any) -> None:
    """vllm-project/vllm#42245 (prompt logprobs with prefix caching returned stale values for
    cached positions, so results depended on which requests ran before). A 400-token prompt
    asks for its prompt logprobs from position 300 (SGLang's ``logprob_start_len``): run cold
    on a flushed cache, then after an overlapping prompt and its own first run left blocks in
    the tree (the warm run hits 256 tokens, the whole blocks before position 300), its prompt
    logprobs, output tokens and output logprobs equal the cold run's exactly."""
    prompt = random_ids(400, seed=42245)
    other = prompt[:300] + random_ids(100, seed=42019)

    def run(rid: str) -> dict:
        submit(sched, rid, prompt, 2, return_logprob=True, logprob_start_len=300)
        return drain(sched)[rid]

    assert sched.flush_cache()
    cold = run("cold")
    assert cold["cached"] == 0 and len(cold["in_lp"]) == 100
    submit(sched, "other", other, 1)
    drain(sched)
    run("first")
    warm = run("warm")
    assert warm["cached"] == PAGE
    assert (warm["in_lp"], warm["ids"], warm["lp"]) == (cold["in_lp"], cold["ids"], cold["lp"])
    assert_idle(sched)
