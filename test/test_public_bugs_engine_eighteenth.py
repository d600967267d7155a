"""Public bug reports (round eighteen) of the scheduler, the paged radix prefix cache and the
offline Engine API, replayed against sglang-v4.

The scheduler / cache tests drive in-process schedulers on the ``sched_model_dir`` checkpoint
(``scheduler_testutil``). Oracles: the cold run of the same request (radix cache flushed before
and after) for output tokens; the prompt length for ``cached_tokens`` (whole 256-token blocks
short of the last prompt token) and for page counts; the allocators' counts after a flush
(``assert_idle``) for leaks. The Engine tests run the real processes on the model-free
``FakeScheduler`` (``shared_fake_engine``): expected texts come from ``transformers.AutoTokenizer``
on the same tokenizer files (``fake_output_text``) and prompt token counts from that tokenizer.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit, write_sched_model
from server_fixture import fake_output_text, hf_auto_tokenizer

pytestmark = pytest.mark.timeout(300)


def _cold(s: Any, rid: str, ids: list[int], n: int, **kw: Any) -> dict:
    """``ids`` run on an empty radix cache (the oracle), the cache flushed again after."""
    assert s.flush_cache()
    res = run_one(s, rid, ids, n, **kw)
    assert res["cached"] == 0
    assert s.flush_cache()
    return res


def _whole_blocks_before_last(n_tokens: int) -> int:
    """Tokens of the longest hit a prompt of ``n_tokens`` can get: whole 256-token blocks short of
    its last token (that one is always computed: its logits sample the first output)."""
    return (n_tokens - 1) // PAGE * PAGE


@pytest.fixture(scope="module")
def chunked(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 16-block pool, prefill chunked at 256 tokens."""
    return make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=PAGE)


# --- chunked prefill and the prefix cache --------------------------------------------------------


def test_chunked_prefill_counts_no_hit_cold_and_reuses_every_chunk_warm(chunked: Any) -> None:
    """sgl-project/sglang#2555 (the chunks a chunked prefill had put into the radix cache counted
    as cache hits of that same request) and ai-dynamo/dynamo#13188 (a prompt longer than the chunk
    reused at most one chunk of a cached prefix): a 700-token prompt prefilled in 256-token chunks
    reports 0 cached tokens cold (and the cache statistics count no hit), and sent again hits
    every whole block short of its last token (512), past the first chunk, with the cold tokens."""
    ids = random_ids(700, seed=1800)
    assert chunked.flush_cache()
    before = chunked.tree_cache.stats()["hit_tokens"]
    first = run_one(chunked, "first", ids, 4)
    assert first["cached"] == 0
    assert chunked.tree_cache.stats()["hit_tokens"] == before
    again = run_one(chunked, "again", ids, 4)
    assert again["cached"] == _whole_blocks_before_last(len(ids)) == 2 * PAGE
    assert chunked.tree_cache.stats()["hit_tokens"] == before + 2 * PAGE
    assert again["ids"] == first["ids"]
    assert_idle(chunked)


@pytest.mark.parametrize("length", [2 * PAGE, 2 * PAGE + 1])
def test_fully_cached_block_aligned_prompt_hits_the_same_every_time(chunked: Any, length: int) -> None:
    """vllm-project/vllm#11186 (a prompt hit in full recomputed only its last token, so its last
    block was cached the wrong way and later hits shrank): a prompt of exactly two blocks (and one
    of two blocks and a token) sent three times hits 256 (resp. 512) tokens the second and third
    time alike, with the cold tokens each time."""
    ids = random_ids(length, seed=1810 + length)
    cold = _cold(chunked, "cold", ids, 3)
    runs = [run_one(chunked, f"r{i}", ids, 3) for i in range(3)]
    hit = _whole_blocks_before_last(length)
    assert [r["cached"] for r in runs] == [0, hit, hit]
    assert all(r["ids"] == cold["ids"] for r in runs)
    assert_idle(chunked)


# --- aborts and the prefix cache -----------------------------------------------------------------


@pytest.mark.parametrize("steps", [1, 3])
def test_prompt_aborted_mid_chunked_prefill_then_resent_equals_cold(chunked: Any, steps: int) -> None:
    """sgl-project/sglang#28374 (the KV of an aborted request was inserted into the prefix cache
    and later requests reused it, possibly incomplete): a 700-token prompt aborted after 1 or 3
    scheduler steps of its 256-token-chunk prefill (overlap scheduling: a chunk may still be in
    flight), then sent again: the resent request's tokens equal the cold run's, it hits at most
    the whole blocks the aborted one had completed, and no page is left in use."""
    ids = random_ids(700, seed=1820)
    cold = _cold(chunked, "cold", ids, 4)
    submit(chunked, "aborted", ids, 4)
    res: dict[str, dict] = {}
    for _ in range(steps):
        out = chunked.step()
        for rid in out.rids if out else []:
            res.setdefault(rid, {})
    chunked.abort_request("aborted")
    drain(chunked, res)
    again = run_one(chunked, "again", ids, 4)
    assert again["ids"] == cold["ids"]
    assert again["cached"] in (0, PAGE, 2 * PAGE)
    assert_idle(chunked)


def test_request_aborted_mid_decode_then_resent_equals_cold(chunked: Any) -> None:
    """sgl-project/sglang#28374, mid-decode: a 300-token prompt aborted after a few decode steps;
    the prompt sent again (and one extending it by its first output tokens) gives the cold
    tokens, and after a flush every page is free."""
    ids = random_ids(300, seed=1830)
    cold = _cold(chunked, "cold", ids, 8)
    submit(chunked, "aborted", ids, 40)
    for _ in range(6):
        chunked.step()
    chunked.abort_request("aborted")
    drain(chunked)
    again = run_one(chunked, "again", ids, 8)
    assert again["ids"] == cold["ids"]
    assert again["cached"] == PAGE
    longer = ids + cold["ids"][:4]
    assert run_one(chunked, "longer", longer, 4)["ids"] == _cold(chunked, "cold-longer", longer, 4)["ids"]
    assert_idle(chunked)


# --- retraction ----------------------------------------------------------------------------------


def _retracting_round(sched_model_dir: str, stream: bool) -> tuple[Any, dict[str, dict], list[list[int]]]:
    """Three distinct 490-token prompts decoding 30 tokens each on a 5-block pool: each needs a
    third block at token 512, so the pool runs out and requests are retracted and resumed."""
    s = make_scheduler(sched_model_dir, max_total_tokens=5 * PAGE, chunked_prefill_size=-1)
    prompts = [random_ids(490, seed=1840 + i) for i in range(3)]
    for i, p in enumerate(prompts):
        submit(s, f"r{i}", p, 30, stream=stream)
    got = drain(s)
    assert s.num_retractions > 0
    return s, got, prompts


@pytest.mark.slow
def test_stream_of_a_retracted_request_is_its_cold_output_once(sched_model_dir: str) -> None:
    """sgl-project/sglang#39645 (a retracted request's stream restarted its generation but kept
    its stream offset: the client got the first generation's head spliced onto the second's tail)
    and vllm-project/vllm#25780 (tokens recomputed after a preemption counted as prefix-cache
    hits): under KV pressure the streamed chunks of each retracted request, concatenated, are its
    final output and its cold output, each token once; the cache statistics count no hit."""
    s, got, prompts = _retracting_round(sched_model_dir, stream=True)
    assert s.tree_cache.stats()["hit_tokens"] == 0
    for i, p in enumerate(prompts):
        r = got[f"r{i}"]
        streamed = [t for c in r["chunks"] for t in c]
        assert streamed == r["ids"], i
        assert r["ids"] == _cold(s, f"cold{i}", p, 30)["ids"], i
    assert_idle(s)


# --- Engine API ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_tok() -> Any:
    """``AutoTokenizer`` on the test tokenizer files (``server_fixture.hf_auto_tokenizer``)."""
    return hf_auto_tokenizer()


def test_engine_batch_outputs_follow_input_order_when_they_finish_out_of_order(
    shared_fake_engine: Any, hf_tok: Any
) -> None:
    """vllm-project/vllm#394 (``LLM.generate`` on a list returned the outputs in completion
    order, not input order): a batch whose first prompt asks the most tokens (it finishes last)
    answers, item by item, its own prompt's token count and its own output length."""
    prompts = ["a", "one two three", "the quick brown fox jumps over", "x y"]
    lens = [9, 1, 5, 3]
    outs = shared_fake_engine.generate(prompt=prompts, sampling_params=[{"max_new_tokens": n} for n in lens])
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [
        len(hf_tok(p, add_special_tokens=True)["input_ids"]) for p in prompts
    ]
    assert [o["text"] for o in outs] == [fake_output_text(hf_tok, n) for n in lens]
    assert [o["meta_info"]["completion_tokens"] for o in outs] == lens


def test_engine_async_batch_with_n_samples_returns_every_sample(shared_fake_engine: Any, hf_tok: Any) -> None:
    """vllm-project/vllm#24029 (with ``n > 1`` the async engine's outputs missed responses): an
    ``async_generate`` batch of 3 prompts with ``n = 3`` answers 9 outputs, the 3 samples of each
    prompt together in prompt order (SGLang's layout), each complete, with distinct ids."""
    prompts = ["hello", "hello there my friend", "a b c d e f g h"]

    async def run() -> Any:
        return await shared_fake_engine.async_generate(
            prompt=prompts, sampling_params={"max_new_tokens": 4, "n": 3}
        )

    outs = asyncio.run(run())
    assert len(outs) == 9
    counts = [len(hf_tok(p, add_special_tokens=True)["input_ids"]) for p in prompts]
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [c for c in counts for _ in range(3)]
    assert all(o["text"] == fake_output_text(hf_tok, 4) for o in outs)
    assert len({o["meta_info"]["id"] for o in outs}) == 9


# --- priority scheduling -------------------------------------------------------------------------


def _finish_order(s: Any, results: dict[str, dict], steps: int | None = None) -> list[str]:
    """Step ``s`` until idle (or ``steps`` times), collecting outputs into ``results``; the rids
    that finished, in finishing order."""
    order: list[str] = []
    for k in range(20_000):
        if not s.has_work() or k == steps:
            return order
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = results.setdefault(rid, {"ids": []})
            r["ids"] += out.output_ids[i]
            r["cached"] = out.cached_tokens[i]
            if out.finished_reasons[i] is not None:
                r["finish"] = out.finished_reasons[i]
                order.append(rid)
    raise AssertionError("scheduler did not finish")


def test_priority_preemption_at_the_running_cap_and_readmission_before_newer_equals(
    sched_model_dir: str,
) -> None:
    """vllm-project/vllm#54530 (with the running queue full, a waiting request of higher
    priority never displaced a running one of lower priority) and vllm-project/vllm#41951 (a
    preempted request lost its place: newer requests of its priority were admitted first and it
    recomputed later): with ``--enable-priority-scheduling``, ``--max-running-requests 1``, a
    running request A (priority 0), a newer B (priority 0) queued, then C (priority 20, past the
    default preemption threshold of 10): C preempts A at the cap, then A resumes before B. Finishing order C, A, B, every output its
    cold output, no page left in use."""
    s = make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        max_running_requests=1,
        enable_priority_scheduling=True,
    )
    prompts = {rid: random_ids(40, seed=1850 + i) for i, rid in enumerate("ABC")}
    cold = {rid: _cold(s, f"cold-{rid}", p, 12)["ids"] for rid, p in prompts.items()}
    res: dict[str, dict] = {}
    submit(s, "A", prompts["A"], 12, priority=0)
    order = _finish_order(s, res, steps=3)
    submit(s, "B", prompts["B"], 12, priority=0)
    submit(s, "C", prompts["C"], 12, priority=20)
    order += _finish_order(s, res)
    assert s.num_retractions == 1
    assert order == ["C", "A", "B"]
    assert {rid: r["ids"] for rid, r in res.items()} == cold
    assert_idle(s)


# --- weight updates and the prefix cache ---------------------------------------------------------


def test_weight_update_invalidates_the_prefix_cache(
    sched_model_dir: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """InternLM/lmdeploy#4917 (a hot weight update left the prefix cache in place: hits reused KV
    computed with the old weights, wrong outputs, ``cached_tokens`` still reported) and
    sgl-project/sglang#15246 (gibberish after resuming and updating the weights: the cached KV
    was not invalidated): a 300-token prompt is cached, the weights are reloaded from another
    checkpoint, and the same prompt then hits nothing and gives the tokens of a scheduler built
    cold on the new checkpoint."""
    new_dir = write_sched_model(tmp_path_factory, seed=18, name="sched_model_new")
    ids = random_ids(300, seed=1860)
    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    old = run_one(s, "old", ids, 6)
    assert run_one(s, "old-again", ids, 6)["cached"] == PAGE
    ok, message = s.update_weights_from_disk(new_dir)
    assert ok, message
    after = run_one(s, "after", ids, 6)
    fresh = run_one(make_scheduler(new_dir, max_total_tokens=8 * PAGE), "fresh", ids, 6)
    assert after["cached"] == 0
    assert after["ids"] == fresh["ids"] != old["ids"]
    assert run_one(s, "after-again", ids, 6)["ids"] == fresh["ids"]
    assert_idle(s)


# --- pages under pressure, duplicate blocks, short requests --------------------------------------


def test_two_long_chunked_prompts_on_a_pool_too_small_for_both_do_not_thrash(sched_model_dir: str) -> None:
    """vllm-project/vllm#21809 (a request whose chunked prefill was admitted against the next
    chunk only was preempted once the pool filled, readmitted the same way and preempted again, in
    a loop): two 300-token prompts asking 20 tokens need 2 blocks each (320 tokens), 4 blocks on a
    3-block pool, prefill chunked at 256: both complete with their cold tokens, with at most one
    retraction, and every page comes back."""
    s = make_scheduler(sched_model_dir, max_total_tokens=3 * PAGE, chunked_prefill_size=PAGE)
    prompts = [random_ids(300, seed=1870 + i) for i in range(2)]
    assert -(-(300 + 20) // PAGE) * 2 > 3
    cold = [_cold(s, f"cold{i}", p, 20)["ids"] for i, p in enumerate(prompts)]
    for i, p in enumerate(prompts):
        submit(s, f"r{i}", p, 20)
    got = drain(s)
    assert [got[f"r{i}"]["ids"] for i in range(2)] == cold
    assert s.num_retractions <= 1
    assert_idle(s)


def test_concurrent_identical_prompts_share_blocks_and_equal_cold(chunked: Any) -> None:
    """sgl-project/mini-sglang#142 (when an unfinished request's blocks were already in the radix
    cache, its duplicate pages were freed while its page table still pointed at them; decode read
    pages reused by others): the same 700-token prompt sent twice at once, prefill chunked at
    256: the second is held while the first prefills the blocks they share (in-batch prefix
    sharing, ``managers/prefix_sharing.py``), then hits every whole block a prompt of 700 tokens
    can hit (``(700 - 1) // 256`` blocks: 512 tokens); both give the cold tokens, and after a
    flush every page is free."""
    ids = random_ids(700, seed=1880)
    cold = _cold(chunked, "cold", ids, 10)
    submit(chunked, "A", ids, 10)
    submit(chunked, "B", ids, 10)
    got = drain(chunked)
    assert (got["A"]["cached"], got["B"]["cached"]) == (0, (len(ids) - 1) // PAGE * PAGE)
    assert got["A"]["ids"] == got["B"]["ids"] == cold["ids"]
    assert_idle(chunked)


def test_requests_shorter_than_a_block_leave_no_lock_on_the_tree(chunked: Any) -> None:
    """sgl-project/sglang#38191 (a finished request that completed no block inserted an empty key
    and pointed its last node at the root, a node it held no lock on): requests of 1, 100 and 255
    tokens (one of them twice, one cut at 0 new tokens) finish, the tree holds no block and can
    be flushed, and every page is free."""
    assert chunked.flush_cache()
    hits = chunked.tree_cache.stats()["hit_tokens"]
    for n, new in ((1, 3), (100, 3), (100, 3), (255, 0)):
        res = run_one(chunked, f"short{n}-{new}", random_ids(n, seed=1890 + n), new)
        assert res["cached"] == 0 and len(res["ids"]) == new
    assert chunked.tree_cache.stats()["hit_tokens"] == hits
    assert chunked.cache_manager.kv_block_counts()[1] == 0
    assert_idle(chunked)


def _steps(s: Any, res: dict[str, dict], k: int) -> None:
    """``k`` scheduler steps, their outputs accumulated into ``res`` as ``drain`` does."""
    for _ in range(k):
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": [], "chunks": []})
            r["ids"] += out.output_ids[i]
            r["lp"] += out.output_token_logprobs_val[i]
            r["in_lp"] += out.input_token_logprobs_val[i]
            r["chunks"].append(list(out.output_ids[i]))


def _close(a: list[Any], b: list[Any]) -> bool:
    """Two logprob lists of the same length agreeing within 1e-4 (``None`` only where the other
    is ``None``)."""
    return len(a) == len(b) and all(
        (x is None and y is None) or (x is not None and y is not None and abs(x - y) < 1e-4)
        for x, y in zip(a, b)
    )


def test_prompt_logprobs_of_a_chunked_prefill_retracted_midway_equal_cold(chunked: Any) -> None:
    """vllm-project/vllm#29071 (a request with prompt logprobs preempted during its chunked
    prefill returned wrong or missing prompt logprobs: the chunks computed before the preemption
    were dropped or counted twice) and vllm-project/vllm#16832 (the output of a request preempted
    for recompute was incomplete): a 600-token prompt with prompt logprobs from position 0,
    prefilled in 256-token chunks, is retracted after its first chunk (``/pause_generation`` mode
    ``retract``); its prompt logprobs (600 entries, the first ``None``), output tokens and output
    logprobs equal the cold run's."""
    ids = random_ids(600, seed=1895)
    kw = {"return_logprob": True, "logprob_start_len": 0}
    cold = _cold(chunked, "cold", ids, 6, **kw)
    assert len(cold["in_lp"]) == len(ids) and cold["in_lp"][0] is None
    submit(chunked, "r", ids, 6, **kw)
    res: dict[str, dict] = {}
    _steps(chunked, res, 2)
    before = chunked.num_retractions
    chunked.retract_all()
    assert chunked.num_retractions == before + 1
    got = drain(chunked, res)["r"]
    assert got["ids"] == cold["ids"]
    assert _close(got["in_lp"], cold["in_lp"])
    assert _close(got["lp"], cold["lp"])
    assert_idle(chunked)


def test_requests_deferred_for_a_shared_prefix_do_not_stall_admission_at_the_running_cap(
    sched_model_dir: str,
) -> None:
    """vllm-project/vllm#53130 (once running plus deferred ("skipped waiting") requests reached
    ``max_num_seqs`` the scheduler never admitted another request, while the KV cache was mostly
    free): with ``--max-running-requests 2``, four copies of one 300-token prompt (the later
    copies wait for its first block to be cached) queued between two distinct prompts: all six
    finish with their cold tokens, each later copy hitting the whole block (256 tokens)."""
    s = make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, max_running_requests=2)
    shared = random_ids(300, seed=1900)
    others = [random_ids(300, seed=1901 + i) for i in range(2)]
    cold_shared = _cold(s, "cold-shared", shared, 4)["ids"]
    cold_others = [_cold(s, f"cold-o{i}", p, 4)["ids"] for i, p in enumerate(others)]
    submit(s, "o0", others[0], 4)
    for i in range(4):
        submit(s, f"s{i}", shared, 4)
    submit(s, "o1", others[1], 4)
    got = drain(s)
    assert [got[f"o{i}"]["ids"] for i in range(2)] == cold_others
    assert all(got[f"s{i}"]["ids"] == cold_shared for i in range(4))
    assert sorted(got[f"s{i}"]["cached"] for i in range(4)) == [0, PAGE, PAGE, PAGE]
    assert_idle(s)
