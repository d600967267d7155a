"""Public bug reports on KV-cache memory planning and accounting, replayed on the CPU path: the
memory flags (``--chunked-prefill-size``, ``--kv-cache-dtype``, ``--max-total-tokens``,
``--max-running-requests``, ``--context-length``), the limits ``get_server_info`` reports, the
refusal of requests the pool cannot hold, and page accounting after aborts, early finishes and
refusals.

In-process schedulers on the ``sched_model_dir`` checkpoint (fp32, 256-token pages). Oracles:
SGLang 0.5.23's own code installed in the venv (its argparse choices, its scheduler's reading of
``--chunked-prefill-size``), arithmetic on the page size (SGLang rounds its token budget down to
whole pages), the cold run of the same request, and the allocators' counts with
``CacheManager.check_integrity`` (nothing leaked).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, step_outputs, submit
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_cli import add_server_cli_args

pytestmark = pytest.mark.timeout(300)


def _cli(*argv: str) -> ServerArgs:
    """``launch_server``'s reading of ``argv`` (after ``--model-path``)."""
    parser = argparse.ArgumentParser()
    add_server_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(["--model-path", "m", *argv]))


def _sglang_source(module: str) -> str:
    """The text of an SGLang 0.5.23 module, read without importing it (its imports need
    packages this venv does not have)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    return Path(spec.origin).read_text()


def _integrity(s: Any) -> None:
    """The cache manager's ownership invariant over every queued and running request."""
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 12-block pool (a budget that is not a whole number of pages), prefill in 300-token chunks."""
    return make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE + 100, chunked_prefill_size=300)


# --- --chunked-prefill-size ---------------------------------------------------------------------


def test_sglang_scheduler_reads_every_nonpositive_chunk_as_disabled() -> None:
    """sgl-project/sglang#8973 (``--chunked-prefill-size -1``, the documented way to disable
    chunking, crashed a page-size check): the oracle is SGLang 0.5.23's scheduler, which turns
    every value ``<= 0`` into "no chunking"; here ``0``, ``-1`` and ``-7`` all read as ``-1``
    (from the command line and as ``ServerArgs`` keywords) instead of ``0`` being refused."""
    src = _sglang_source("sglang.srt.managers.scheduler")
    assert "self.chunked_prefill_size <= 0:" in src and "self.chunked_prefill_size = None" in src
    for v in ("0", "-1", "-7"):
        assert _cli("--chunked-prefill-size", v).chunked_prefill_size == -1, v
        assert ServerArgs(model_path="m", chunked_prefill_size=int(v)).chunked_prefill_size == -1, v
    assert _cli("--chunked-prefill-size", "512").chunked_prefill_size == 512
    for bad in (1.5, "256", True):
        with pytest.raises(ValueError, match="chunked_prefill_size"):
            ServerArgs(model_path="m", chunked_prefill_size=bad)


def test_chunked_prefill_size_zero_prefills_a_long_prompt_in_one_step(sched_model_dir: str) -> None:
    """sgl-project/sglang#8973 with ``--disable-radix-cache`` (sgl-project/sglang#1594 crashed on
    that pair): with ``chunked_prefill_size=0`` the step budget is the unchunked one, a 700-token
    prompt is prefilled in one forward (its first token comes out as soon as with ``-1``, the
    oracle: SGLang's documented spelling) and its tokens equal those of the ``-1`` run."""
    prompt = random_ids(700, seed=2301)
    outs, first_at, budget = {}, {}, {}
    for cps in (0, -1):
        s = make_scheduler(
            sched_model_dir, max_total_tokens=8 * PAGE, chunked_prefill_size=cps, disable_radix_cache=True
        )
        budget[cps] = s.get_server_info()["chunked_prefill_size"]
        submit(s, "a", prompt, 4)
        steps, got = 0, {}
        while "a" not in got:
            got = step_outputs(s, 1)
            steps += 1
        first_at[cps] = steps
        outs[cps] = got["a"]["ids"] + drain(s)["a"]["ids"]
        assert_idle(s)
    assert budget[0] == budget[-1] > 700
    assert first_at[0] == first_at[-1] <= 2  # one forward, plus the overlap schedule's one-step lag
    assert outs[0] == outs[-1]


# --- --kv-cache-dtype ---------------------------------------------------------------------------


def test_kv_cache_dtype_choices_follow_sglang_argparse_and_float16_is_refused() -> None:
    """vllm-project/vllm#54338 (``--kv-cache-dtype float16`` on a bfloat16 model silently stored
    the model's bits and read them back as another dtype): the oracle is SGLang 0.5.23's
    ``kv_cache_dtype`` argparse choices. A spelling outside them (``float16``, ``fp16``) is
    argparse's ``invalid choice`` (exit 2); SGLang's ``bfloat16`` alias reads as ``bf16``; every
    other SGLang choice is either served or refused naming the field, never accepted unchanged
    into an unknown storage format."""
    src = _sglang_source("sglang.srt.arg_groups.fields.model")
    sglang_choices = [
        c
        for c in ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
        if f'"{c}"' in src
    ]
    assert len(sglang_choices) == 8
    for bad in ("float16", "fp16"):
        with pytest.raises(SystemExit) as e:
            _cli("--kv-cache-dtype", bad)
        assert e.value.code == 2
    assert _cli("--kv-cache-dtype", "bfloat16").kv_cache_dtype == "bf16"
    for c in sglang_choices:
        try:
            got = _cli("--kv-cache-dtype", c).kv_cache_dtype
        except ValueError as err:
            assert "kv_cache_dtype" in str(err) and c in str(err), (c, err)
            continue
        assert got in ("auto", "bf16", "fp8_e4m3"), (c, got)


def test_kv_cache_dtype_bf16_override_stores_bf16_and_matches_its_alias(sched_model_dir: str) -> None:
    """sgl-project/sglang#11749 (no server argument could force a bf16 KV cache): with an fp32
    model, ``kv_cache_dtype="bf16"`` and SGLang's ``"bfloat16"`` both store every float KV kind
    in ``torch.bfloat16`` (the oracle: the requested dtype) and give the same tokens; ``auto``
    keeps the model's fp32."""
    prompt = random_ids(300, seed=2302)
    toks = {}
    for spelling in ("bf16", "bfloat16", "auto"):
        s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, kv_cache_dtype=spelling)
        want = torch.float32 if spelling == "auto" else torch.bfloat16
        kinds = list(s.pool.layout.kinds)
        assert kinds
        dtypes = {s.pool.storage(k).dtype for k in kinds}
        assert dtypes == {want}, (spelling, dtypes)
        toks[spelling] = run_one(s, "a", prompt, 4)["ids"]
        assert_idle(s)
    assert toks["bf16"] == toks["bfloat16"]


# --- capacity: --max-total-tokens, --context-length, --max-running-requests ---------------------


def test_server_info_reports_the_effective_pool_and_request_limits(sched: Any) -> None:
    """sgl-project/sglang#38846 (``/get_server_info`` kept the command line's
    ``max_running_requests`` while the runtime used another): the answer gives the limits the
    scheduler applies. Oracles: SGLang's rounding of its token budget down to whole pages
    (``12 * 256 + 100`` -> ``3072``), the block allocator's page count, its request slots and
    ``max_req_input_len = min(context_len, max_total_num_tokens) - 1``."""
    info = sched.get_server_info()
    assert info["max_total_num_tokens"] == (12 * PAGE + 100) // PAGE * PAGE == 12 * PAGE
    assert info["max_total_num_tokens"] == sched.pool.block_alloc.num_pages * PAGE
    assert info["max_running_requests"] == sched.pool.req_slots.size == sched.max_running_requests
    assert info["chunked_prefill_size"] == 300
    assert sched.max_req_input_len == min(info["context_length"], info["max_total_num_tokens"]) - 1
    assert info["kv_pool"]["block_pages"]["total"] == 12
    assert info["kv_pool"]["req_slots"]["total"] == info["max_running_requests"]


def test_prompt_longer_than_the_pool_is_a_400_naming_the_counts_and_holds_nothing(sched: Any) -> None:
    """vllm-project/vllm#10517 (how the context length relates to the KV capacity) and
    vllm-project/vllm#27073 (after a few over-long requests the KV usage stayed near 100% for
    hours): with a context longer than the pool, a prompt of ``max_total_num_tokens`` tokens is
    finished with a 400 whose message names its length, the pool and the longest prompt; three of
    them leave no page, slot or usage behind, and a request that fits still runs."""
    pool = sched.max_total_num_tokens
    assert sched.context_len > pool
    for i in range(3):
        submit(sched, f"long{i}", random_ids(pool, seed=2310 + i), 4)
    got = drain(sched)
    for i in range(3):
        fin = got[f"long{i}"]["finish"]
        assert fin["type"] == "abort" and fin.get("status_code") == 400, fin
        msg = fin["message"]
        assert str(pool) in msg and str(pool - 1) in msg and "KV cache pool" in msg, msg
        assert got[f"long{i}"]["ids"] == []
    assert sched.get_metrics()["token_usage"] == 0
    _integrity(sched)
    assert len(run_one(sched, "fits", random_ids(pool - 10, seed=2313), 4)["ids"]) == 4
    assert_idle(sched)


def test_omitted_max_new_tokens_stops_at_the_pool_not_the_context(sched: Any) -> None:
    """vllm-project/vllm#10517 again, on the decode side: a request without ``max_new_tokens``
    whose prompt nearly fills the pool stops with ``length`` once prompt + completion reach
    ``max_total_num_tokens`` (SGLang's cap is ``min(context_len, pool)``), rather than being
    retracted or failing mid-generation; its pages all come back."""
    pool = sched.max_total_num_tokens
    prompt = random_ids(pool - 5, seed=2314)
    submit(sched, "cap", prompt, pool, ignore_eos=True)
    res = drain(sched)["cap"]
    assert res["finish"]["type"] == "length", res["finish"]
    assert len(prompt) + len(res["ids"]) == pool
    assert sched.num_retractions == 0
    assert_idle(sched)


# --- accounting: aborts, early finishes, requests that wait for pages --------------------------


def _assert_no_locks(s: Any) -> None:
    """Idle: every page the radix cache holds is evictable (no lock left by a finished request)."""
    tree_b, tree_w = s.tree_cache.total_pages()
    assert s.tree_cache.evictable_sizes() == (tree_b, tree_w)
    assert s.pool.block_alloc.used == tree_b and s.pool.window_alloc.used == tree_w
    assert s.get_metrics()["token_usage"] == 0


def test_abort_mid_decode_and_in_queue_returns_every_page(sched: Any) -> None:
    """sgl-project/sglang#1674 (aborting requests leaked their KV): three 700-token requests on a
    12-page pool beside a 400-token one, aborted while running (decoding or mid-prefill), and a
    fourth aborted while still queued, all finish ``abort`` and
    return their pages and slots (the allocators' counts and ``check_integrity``); the request
    run to the end gives the tokens of its cold run."""
    assert sched.flush_cache()
    cold = run_one(sched, "cold", random_ids(400, seed=2320), 6)["ids"]
    assert sched.flush_cache()
    submit(sched, "keep", random_ids(400, seed=2320), 6)
    for i in range(3):
        submit(sched, f"a{i}", random_ids(700, seed=2321 + i), 40)
    early = step_outputs(sched, 6)
    submit(sched, "a3", random_ids(700, seed=2324), 40)
    _integrity(sched)
    states = {r.rid: "running" for r in sched.running} | {r.rid: "waiting" for r in sched.waiting}
    assert {states[f"a{i}"] for i in range(4)} == {"running", "waiting"}, states
    for i in range(4):
        sched.abort_request(f"a{i}")
    _integrity(sched)
    got = drain(sched, early)
    for i in range(4):
        assert got[f"a{i}"]["finish"]["type"] == "abort", got[f"a{i}"]["finish"]
    assert got["keep"]["ids"] == cold
    _assert_no_locks(sched)
    assert_idle(sched)


def test_requests_finishing_at_their_first_token_return_their_slots(sched: Any) -> None:
    """sgl-project/sglang#10871 (a request finished by its first prefill, in a batch mixed with
    decoding requests, kept its request slot until the leak check killed the engine): eight
    ``max_new_tokens=1`` requests arriving while two others decode each give one token (the
    token of its cold run) and every request slot comes back."""
    assert sched.flush_cache()
    prompts = [random_ids(90 + 7 * i, seed=2330 + i) for i in range(8)]
    cold = [run_one(sched, f"cold{i}", p, 1)["ids"] for i, p in enumerate(prompts)]
    assert sched.flush_cache()
    submit(sched, "d0", random_ids(200, seed=2340), 30)
    submit(sched, "d1", random_ids(210, seed=2341), 30)
    got = step_outputs(sched, 3)
    for i, p in enumerate(prompts):
        submit(sched, f"one{i}", p, 1)
    got = drain(sched, got)
    for i in range(8):
        assert got[f"one{i}"]["ids"] == cold[i], i
        assert got[f"one{i}"]["finish"]["type"] == "length"
    assert sched.pool.req_slots.available == sched.pool.req_slots.size
    _assert_no_locks(sched)
    assert_idle(sched)


def test_queued_prefix_hit_aborted_or_refused_releases_its_locks(sched_model_dir: str) -> None:
    """sgl-project/sglang#20182 (a request aborted while waiting, or refused by a full queue,
    after its prefix match had reserved state, leaked it) and sgl-project/sglang#16067 (the same
    when scheduling failed for lack of memory): on a 6-page pool with ``max_queued_requests=2``,
    requests sharing a cached 512-token prefix wait behind a long one; one is aborted in the
    queue, one is refused with the 503 of a full queue, the last waits for pages and then runs.
    Afterwards no radix lock, page or slot is left (the allocators' counts) and the survivor
    gives the tokens of its cold run."""
    s = make_scheduler(
        sched_model_dir, max_total_tokens=6 * PAGE, chunked_prefill_size=-1, max_queued_requests=2
    )
    prefix = random_ids(2 * PAGE, seed=2350)
    tail = prefix + random_ids(40, seed=2351)
    cold = run_one(s, "cold", tail, 5)["ids"]
    assert s.flush_cache()
    run_one(s, "seed", prefix + random_ids(10, seed=2352), 1)  # caches the 2-block prefix
    submit(s, "big", random_ids(3 * PAGE + 100, seed=2353), 30)
    early = step_outputs(s, 2)
    submit(s, "q-abort", prefix + random_ids(30, seed=2354), 5)
    submit(s, "q-run", tail, 5)
    submit(s, "q-full", prefix + random_ids(20, seed=2355), 5)
    _integrity(s)
    s.abort_request("q-abort")
    _integrity(s)
    got = drain(s, early)
    assert got["q-full"]["finish"]["type"] == "abort" and got["q-full"]["finish"].get("status_code") == 503
    assert got["q-abort"]["finish"]["type"] == "abort"
    assert got["q-run"]["ids"] == cold
    _assert_no_locks(s)
    assert_idle(s)


# --- the planner's start-up messages -------------------------------------------------------------


def test_pool_below_the_context_is_a_startup_warning_naming_the_counts(
    sched_model_dir: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kekzl/imp#1286 (a pool smaller than one ``max_seq_len`` sequence loaded without a word,
    then refused long requests) and kekzl/imp#1542 (the advertised context exceeded what the
    pool served): the oracle is SGLang 0.5.23's worker, which warns at start-up exactly when the
    KV capacity is below the context length (not an error). A 4-page pool under the model's
    65,536-token context logs one WARNING naming 1024 and 65536 and the flags that change it; a
    ``--context-length 1024`` server on the same pool logs none."""
    src = _sglang_source("sglang.srt.managers.tp_worker")
    assert "if kv_capacity < self.model_config.context_len:" in src and "logger.warning(" in src
    for ctx, expect in ((None, True), (4 * PAGE, False)):
        caplog.clear()
        with caplog.at_level("WARNING", logger="sglang_v4"):
            s = make_scheduler(sched_model_dir, max_total_tokens=4 * PAGE, context_length=ctx)
        pool, context = s.max_total_num_tokens, s.context_len
        assert pool == 4 * PAGE
        recs = [r for r in caplog.records if "fewer than the context length" in r.getMessage()]
        hits = [r.getMessage() for r in recs]
        assert (pool < context) is expect
        if expect:
            assert len(hits) == 1 and recs[0].levelname == "WARNING", hits
            assert f"holds {pool} tokens" in hits[0] and str(context) in hits[0]
            assert "--max-total-tokens" in hits[0] and "--context-length" in hits[0]
        else:
            assert hits == []


def test_planner_capacity_and_concurrency_follow_the_page_arithmetic(sched_model_dir: str) -> None:
    """vllm-project/vllm#10517 (users could not tell how the KV cache relates to the maximum
    sequence length: "Maximum concurrency for 20000 tokens per request: 1.56x"): the plan's
    numbers are the page arithmetic, computed here independently: capacity =
    ``floor(max_total_tokens / page_size) * page_size``, longest request =
    ``min(context, capacity)``, requests of the full context that fit at once =
    ``floor(pages / ceil(context / page_size))``, for budgets on both sides of one context."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.mem_cache.kv_planner import plan_kv_pools

    mc = ModelConfig.from_pretrained(sched_model_dir)
    for tokens, ctx in ((5000, 1000), (5000, 4096), (1000, 4096), (20 * PAGE, 20 * PAGE)):
        plan = plan_kv_pools(mc, "auto", max_total_tokens=tokens, context_length=ctx, max_running_requests=8)
        pages = tokens // PAGE
        assert plan.kv_capacity_tokens == pages * PAGE, (tokens, ctx)
        assert plan.max_context == min(ctx, pages * PAGE)
        assert plan.max_concurrency == min(8, pages // -(-ctx // PAGE))
        assert (plan.capacity_warning() is None) == (pages * PAGE >= ctx)


# --- requests at the limits of the budgets -------------------------------------------------------


def test_prompt_over_max_prefill_tokens_with_chunking_off_still_runs(sched_model_dir: str) -> None:
    """vllm-project/vllm-metal#200 and vllm-project/vllm#55130 (with chunked prefill off, a
    prompt longer than the step's token budget stayed in the waiting queue forever): with
    ``--chunked-prefill-size -1`` and ``--max-prefill-tokens 100`` a 700-token prompt is
    prefilled (in one step, as nothing else runs) and gives the tokens of its cold run on a
    default budget; a short request queued behind it finishes too."""
    prompt = random_ids(700, seed=2360)
    cold_s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    cold = run_one(cold_s, "cold", prompt, 4)["ids"]
    short_cold = run_one(cold_s, "cold-short", random_ids(50, seed=2361), 4)["ids"]
    s = make_scheduler(
        sched_model_dir, max_total_tokens=8 * PAGE, chunked_prefill_size=-1, max_prefill_tokens=100
    )
    submit(s, "long", prompt, 4)
    submit(s, "short", random_ids(50, seed=2361), 4)
    got = drain(s, max_steps=50)
    assert got["long"]["ids"] == cold
    assert got["short"]["ids"] == short_cold
    assert_idle(s)


@pytest.mark.parametrize("page_size", [256, 512])
def test_request_filling_the_whole_pool_runs_without_starving_the_queue(
    sched_model_dir: str, page_size: int
) -> None:
    """vllm-project/vllm#47272 (the pool's reserved null block was counted as capacity, so a
    request of the advertised length could never be served) and sgl-project/sglang#31205 (on
    DeepSeek-V4's hybrid pool, a prompt whose sliding-window budget exceeded the window pool was
    never admitted and starved everything queued behind it): on a 4-page pool (``1300`` tokens
    with 512-token pages rounds down to ``1024``) a prompt of ``max_total_num_tokens - 1`` tokens
    plus one new token (the whole pool: the oracle is the rounding arithmetic) runs with chunking
    off, a prompt one token longer is the pool's 400, and a short request queued behind both
    finishes; every page comes back."""
    budget = 4 * PAGE if page_size == 256 else 1300
    s = make_scheduler(sched_model_dir, max_total_tokens=budget, page_size=page_size, chunked_prefill_size=-1)
    pool = s.max_total_num_tokens
    assert pool == budget // page_size * page_size == s.pool.block_alloc.num_pages * page_size
    submit(s, "full", random_ids(pool - 1, seed=2370), 1)
    submit(s, "over", random_ids(pool, seed=2370), 1)
    submit(s, "after", random_ids(60, seed=2371), 3)
    got = drain(s, max_steps=100)
    assert len(got["full"]["ids"]) == 1 and got["full"]["finish"]["type"] == "length", got["full"]["finish"]
    assert got["over"]["finish"]["type"] == "abort" and got["over"]["finish"]["status_code"] == 400
    assert len(got["after"]["ids"]) == 3
    assert_idle(s)


# --- retraction ----------------------------------------------------------------------------------


def test_retraction_with_overlap_and_an_unaligned_shared_prefix_leaks_nothing(sched_model_dir: str) -> None:
    """sgl-project/sglang#11976 (retraction under the overlap schedule leaked KV) and
    sgl-project/sglang#4977 (retraction with ``page_size > 1`` leaked the page of a prefix that
    did not end on a page boundary): fp8 KV, overlap on, a 6-page pool and three 500-token
    prompts sharing a cached 260-token prefix (one shared page), each decoding into its third
    page (3 x 2 own pages + 1 shared do not fit in 6): retractions happen, each request gives the tokens of its cold run,
    and the allocators and ``check_integrity`` balance throughout and at the end."""
    s = make_scheduler(
        sched_model_dir, max_total_tokens=6 * PAGE, kv_cache_dtype="fp8_e4m3", chunked_prefill_size=-1
    )
    assert s.enable_overlap
    prefix = random_ids(260, seed=2380)
    prompts = [prefix + random_ids(240, seed=2381 + i) for i in range(3)]
    cold = []
    for i, p in enumerate(prompts):
        assert s.flush_cache()
        cold.append(run_one(s, f"cold{i}", p, 30)["ids"])
    assert s.flush_cache()
    run_one(s, "seed", prefix, 1)
    for i, p in enumerate(prompts):
        submit(s, f"r{i}", p, 30)
    got: dict[str, dict] = {}
    while s.has_work():
        for rid, r in step_outputs(s, 1).items():
            g = got.setdefault(rid, {"ids": []})
            g["ids"] += r["ids"]
            g["finish"] = r.get("finish")
        _integrity(s)
    assert s.num_retractions > 0
    for i in range(3):
        assert got[f"r{i}"]["ids"] == cold[i], i
    _assert_no_locks(s)
    assert_idle(s)


def test_prefill_only_request_warms_the_whole_prompt_across_chunks(sched: Any) -> None:
    """vllm-project/vllm#41327 (a ``max_tokens=0`` fast path finished a prefill-only request
    after its first chunk, so KV-cache warming stopped part-way) and sgl-project/sglang#10871's
    slot accounting: a ``max_new_tokens=0`` request over a 700-token prompt in 300-token chunks
    (one aborted in its first chunk beside it) finishes ``length`` with no token after its last
    chunk; the same prompt then hits ``floor(700 / 256) * 256 = 512`` cached tokens and gives the
    tokens of its cold run; no slot or lock is left."""
    prompt = random_ids(700, seed=2390)
    assert sched.flush_cache()
    cold = run_one(sched, "cold", prompt, 4)["ids"]
    assert sched.flush_cache()
    submit(sched, "warm", prompt, 0)
    submit(sched, "gone", random_ids(650, seed=2391), 0)
    early = step_outputs(sched, 1)
    sched.abort_request("gone")
    got = drain(sched, early)
    assert got["warm"]["ids"] == [] and got["warm"]["finish"]["type"] == "length", got["warm"]
    assert got["gone"]["finish"]["type"] == "abort"
    _assert_no_locks(sched)
    hit = run_one(sched, "hit", prompt, 4)
    assert hit["cached"] == 700 // PAGE * PAGE
    assert hit["ids"] == cold
    assert sched.pool.req_slots.available == sched.pool.req_slots.size
    assert_idle(sched)
