"""The thirty-first set of public bug reports on the radix prefix cache: requests aborted in the
middle of a chunked prefill (the blocks they left in the tree and the locks they held), the
flush that must give back every page, blocks of tokens still being decoded, chunked-prefill
progress (each prompt token computed once), and ``cached_tokens`` as a part of the prompt (read
from the cache, never written to it, never the whole prompt).

All on the in-process scheduler over conftest's ``sched_model_dir`` checkpoint (CPU, float32,
256-token pages, greedy), eight block pages, 256-token prefill chunks, no overlap.

Oracles: a cold run of the same prompt alone on a flushed cache (every run's tokens equal it),
hits derived by hand (``floor((len - 1) / 256) * 256`` over the blocks really computed), page
counts derived by hand (``ceil(tokens / 256)``), and the allocators' own counts.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    cold_output_ids,
    collect_outputs,
    drain,
    make_scheduler,
    run_one,
    submit,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Eight block pages (2048 tokens), 256-token prefill chunks, no overlap."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=8 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )


def _hit(n: int) -> int:
    """The hit of an ``n``-token prompt whose blocks are all cached: whole blocks, at least one
    token computed."""
    return (n - 1) // PAGE * PAGE


def _tree_books_balance(sched: Any) -> None:
    """The tree's own block books: every cached block is either evictable or locked (none
    counted twice), and the free pages plus the evictable ones never exceed the pool."""
    st = sched.tree_cache.stats()
    assert st["evictable_blocks"] + st["locked_blocks"] == st["cached_blocks"], st
    ba = sched.pool.block_alloc
    assert ba.available + st["cached_blocks"] <= ba.available + ba.used, (st, ba.used)


def test_sglang_38355_abort_mid_chunked_prefill_leaves_a_cache_later_requests_can_trust(sched: Any) -> None:
    """sgl-project/sglang#38355 (blocks of a chunked prompt go into the tree mid-prefill; a
    request aborted before its prefill ends must not leave blocks holding KV it never computed,
    nor free pages the tree still points at; a later request with the same prefix must read
    correct KV). A 552-token prompt (three chunks) is aborted after its first chunk: no lock is
    left, the same prompt then hits at most the 256 tokens the first chunk computed and returns
    the cold run's tokens, and every page comes back."""
    prompt = random_ids(2 * PAGE + 40, seed=38355)
    cold = cold_output_ids(sched, "cold", prompt, 4)
    submit(sched, "a", prompt, 4)
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    assert sched.running or sched.waiting  # still prefilling
    sched.abort_request("a")
    drain(sched, res)
    assert res["a"]["finish"]["type"] == "abort"
    st = sched.tree_cache.stats()
    assert st["locked_blocks"] == 0 and st["locked_nodes"] == 0
    _tree_books_balance(sched)
    again = run_one(sched, "b", prompt, 4)
    assert again["cached"] <= PAGE
    assert again["ids"] == cold
    assert_idle(sched)


def test_sglang_40334_abort_after_a_prefix_hit_releases_the_lock_it_took(sched: Any) -> None:
    """sgl-project/sglang#40334 (a request aborted between its prefix match and the end of its
    prefill never reached ``cache_finished_req``, so the lock its match took was never released
    and the entries could not be evicted). A 286-token prompt is cached (1 block); a 600-token
    prompt sharing it hits that block and is aborted after its first chunk: afterwards no block
    is locked, every cached block is evictable, and a flush empties the pool."""
    shared = random_ids(PAGE + 30, seed=40334)
    run_one(sched, "seed", shared, 1)
    long = shared + random_ids(600 - len(shared), seed=40335)
    submit(sched, "a", long, 4)
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    assert sched.tree_cache.stats()["locked_blocks"] >= 1  # the hit is held while it prefills
    sched.abort_request("a")
    drain(sched, res)
    st = sched.tree_cache.stats()
    assert (st["locked_blocks"], st["locked_nodes"]) == (0, 0)
    assert st["evictable_blocks"] == st["cached_blocks"] >= 1
    assert sched.pool.block_alloc.used == st["cached_blocks"]  # nothing owned outside the tree
    assert_idle(sched)


def test_sglang_23216_flush_reclaims_every_page_and_caching_resumes(sched: Any) -> None:
    """sgl-project/sglang#23216 (after one ``flush_cache`` the pool slots held by the destroyed
    nodes were never reclaimed, so caching stayed off until a restart). Two prompts fill three
    blocks; the flush frees every block and resume-state page; the same prompt is then cold
    (0 cached), and a repeat hits its whole block again (``floor(299 / 256) * 256 = 256``)
    with the cold run's tokens."""
    a, b = random_ids(PAGE + 43, seed=23216), random_ids(2 * PAGE + 5, seed=23217)
    ra = run_one(sched, "a", a, 3)
    run_one(sched, "b", b, 3)
    assert sched.tree_cache.stats()["cached_blocks"] == 3
    assert sched.flush_cache() is True
    p = sched.pool
    assert (p.block_alloc.used, p.window_alloc.used) == (0, 0)
    assert sched.tree_cache.stats()["cached_blocks"] == 0
    first = run_one(sched, "a2", a, 3)
    second = run_one(sched, "a3", a, 3)
    assert _hit(len(a)) == PAGE
    assert (first["cached"], second["cached"]) == (0, PAGE)
    assert first["ids"] == second["ids"] == ra["ids"]
    assert_idle(sched)


def test_sglang_35470_tokens_still_decoding_are_not_double_counted(sched: Any) -> None:
    """sgl-project/sglang#35470 (a page whose tokens were not final was put into the tree while
    the request still owned it, so the same pages were counted under two owners and free plus
    evictable exceeded the pool). A 251-token prompt decodes 20 tokens across its first block
    boundary; after every step each cached block is either evictable or locked (not both) and
    free plus evictable pages stay within the pool; once finished, a continuation of prompt
    and output hits the whole first block with its cold run's tokens."""
    prompt = random_ids(PAGE - 5, seed=35470)
    submit(sched, "a", prompt, 20)
    res: dict[str, dict] = {}
    while sched.has_work():
        collect_outputs(sched.step(), res)
        _tree_books_balance(sched)
    follow = prompt + res["a"]["ids"] + random_ids(12, seed=35471)
    cold = cold_output_ids(sched, "cf", follow, 3)
    assert sched.flush_cache()
    run_one(sched, "a2", prompt, 20)
    got = run_one(sched, "f", follow, 3)
    assert got["cached"] == PAGE and got["ids"] == cold
    assert_idle(sched)


def test_sglang_36855_each_prompt_token_is_prefilled_once_and_pages_stay_bounded(sched: Any) -> None:
    """sgl-project/sglang#36855 and its fix sgl-project/sglang#37024 (chunked prefill did not
    record its progress, so each step prefetched the same chunk again and allocated the whole
    sequence anew until the pool ran out). A 700-token prompt (three chunks) with 4 new tokens
    computes exactly 700 prompt tokens, never holds more than ``ceil(704 / 256) = 3`` block
    pages, and returns its tokens in one piece after the last chunk."""
    prompt = random_ids(700, seed=36855)
    assert sched.flush_cache()
    done = sched.prefill_tokens_done
    submit(sched, "a", prompt, 4)
    res: dict[str, dict] = {}
    peak = 0
    while sched.has_work():
        collect_outputs(sched.step(), res)
        peak = max(peak, sched.pool.block_alloc.used)
    assert sched.prefill_tokens_done - done == len(prompt)
    assert peak <= -(-(len(prompt) + 4) // PAGE) == 3
    assert len(res["a"]["ids"]) == 4 and res["a"]["cached"] == 0
    assert_idle(sched)


def test_sglang_20476_two_chunked_requests_on_one_cached_prefix_release_every_lock(sched: Any) -> None:
    """sgl-project/sglang#20476 (a chunked request re-admitted for a later chunk matched the tree
    again and took locks that were never released). A 300-token prefix is cached; two 400-token
    prompts sharing it are submitted together and prefill in 256-token chunks: each hits 256
    tokens, each returns its cold run's tokens, and afterwards no block or node is locked."""
    shared = random_ids(PAGE + 44, seed=20476)
    pa = shared + random_ids(400 - len(shared), seed=20477)
    pb = shared + random_ids(400 - len(shared), seed=20478)
    cold_a, cold_b = cold_output_ids(sched, "ca", pa, 3), cold_output_ids(sched, "cb", pb, 3)
    run_one(sched, "seed", shared, 1)
    submit(sched, "a", pa, 3)
    submit(sched, "b", pb, 3)
    res = drain(sched)
    assert (res["a"]["cached"], res["b"]["cached"]) == (PAGE, PAGE)
    assert res["a"]["ids"] == cold_a and res["b"]["ids"] == cold_b
    st = sched.tree_cache.stats()
    assert (st["locked_blocks"], st["locked_nodes"], st["locked_resume_states"]) == (0, 0, 0)
    _tree_books_balance(sched)
    assert_idle(sched)


def _prompt_usage(sched: Any, rid: str, ids: list[int], n: int) -> tuple[int, int, int]:
    """Run ``rid`` to its end; ``(prompt_tokens, cached_tokens, completion_tokens)`` of its last
    output message."""
    submit(sched, rid, ids, n)
    last: tuple[int, int, int] = (-1, -1, -1)
    while sched.has_work():
        out = sched.step()
        for i, r in enumerate(out.rids if out else []):
            if r == rid:
                last = (out.prompt_tokens[i], out.cached_tokens[i], out.completion_tokens[i])
    return last


def test_vllm_mlx_773_an_exact_repeat_reports_the_full_prompt_and_a_part_of_it_cached(sched: Any) -> None:
    """waybarrios/vllm-mlx#773 (an exact repeat of a prompt is reported with the full
    ``prompt_tokens`` and ``cached_tokens`` below it, since the last prompt token is computed
    again), Headmaster218/MoE4All#7 and sashiko-dev/sashiko#442 (``prompt_tokens`` is the whole
    prompt; ``cached_tokens`` is the reused part of it, not an addend). A 512-token prompt:
    cold ``(512, 0, 3)``, repeated ``(512, 256, 3)`` (``floor(511 / 256) * 256``)."""
    prompt = random_ids(2 * PAGE, seed=773)
    assert sched.flush_cache()
    assert _prompt_usage(sched, "a", prompt, 3) == (2 * PAGE, 0, 3)
    assert _prompt_usage(sched, "b", prompt, 3) == (2 * PAGE, _hit(2 * PAGE), 3) == (512, 256, 3)
    assert_idle(sched)


def test_antirez_ds4_29_cached_tokens_count_reads_not_writes(sched: Any) -> None:
    """antirez/ds4#29 (``cached_tokens`` must be the tokens read from the cache, not also the
    ones written to it, as OpenAI documents the field). A cold 600-token prompt writes two
    blocks into the tree but reports 0 cached and adds 0 to the hit counter; a second prompt
    sharing its first 300 tokens reads one block: 256 cached, and the hit counter grows by 256."""
    a = random_ids(600, seed=29)
    b = a[:300] + random_ids(50, seed=290)
    assert sched.flush_cache()
    h0 = sched.tree_cache.stats()["hit_tokens"]
    assert _prompt_usage(sched, "a", a, 2)[1] == 0
    st = sched.tree_cache.stats()
    assert st["cached_blocks"] == 2 and st["hit_tokens"] == h0
    assert _prompt_usage(sched, "b", b, 2)[1] == PAGE
    assert sched.tree_cache.stats()["hit_tokens"] - h0 == PAGE
    assert_idle(sched)
