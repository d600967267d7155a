"""A request's KV state is exact wherever it is rebuilt or resumed, in every KV format.

DeepSeek-V4's per-layer state (compressed entries per 4 / 128 tokens, indexer keys, the 128-token
window, compressor state for the partial group) is resumed at prefix-cache hits (whole 256-token
blocks), chunked-prefill boundaries of any size, re-admission after a retraction, and carries
across decode steps; these tests cross each of those boundaries in fp32 KV, fp8 KV, and fp8 KV
with fp4 indexer keys, on the ``sliding_first`` test model (one HCA layer, a hash-routed MoE
layer, ``index_topk`` 8, far below the compressed entries of these prompts, so the indexer
selects). Oracle: the cold, unchunked, uncached run of the same prompt in the same format
(``resume_testutil.ColdOracle``; the model-parity tests tie the runtime to HF transformers): equal
greedy tokens and logprobs within the format's stated tolerance (``resume_testutil`` docstring).
Prompt lengths sit on every kind of edge: ``k*4 - 1 / k*4 / k*4 + 1``, ``k*128 +- 1``,
``k*256 +- 1``; chunk sizes 1, 3, 4, 5, 127, 128, 129, 255, 257.

Fast tier (``-m "not slow"``): one cell for each of chunked prefill (fp8 + fp4), hits with a short
or no extend (fp8), a hit on decode-completed blocks (fp32), retraction (fp32), ``n > 1`` (fp32)
and divergence inside a compression group (fp8); with ``test_resume_exactness_configs.py``'s
fast cells about 25 s on 2 CPU cores. Every other cell, and every cell of the hit on a running
request's decode block, aborts, resume intervals and logprob starts, is slow (the whole grid of
both modules, ``-m slow``: about 11 minutes).
"""

from __future__ import annotations

import pytest
from dsv4_testutil import random_ids
from resume_testutil import (
    assert_matches,
    batch_invariant_gemms,
    cells,
    cold_oracle,
    expected_hit,
    make_sched,
    run_req,
    step_collect,
    submit_lp,
)
from scheduler_testutil import assert_idle, drain, submit

FMTS = ["fp32", "fp8", "fp8_fp4"]
LENGTHS = [251, 252, 253, 255, 257, 383, 385, 511, 513]
CHUNKS = [1, 3, 4, 5, 127, 128, 129, 255, 257]


@pytest.fixture(scope="module")
def model_dir(resume_model_dir: str) -> str:
    return resume_model_dir


def _chunk_cases() -> list:
    fast = {("fp8_fp4", 5, 257)}
    cases = []
    for fmt in FMTS:
        for chunk in CHUNKS:
            for n in LENGTHS + ([129] if chunk == 1 else []):
                marks = () if (fmt, chunk, n) in fast else (pytest.mark.slow,)
                cases.append(pytest.param(fmt, chunk, n, marks=marks, id=f"{fmt}-chunk{chunk}-len{n}"))
    return cases


@pytest.mark.parametrize("fmt,chunk,length", _chunk_cases())
def test_chunked_prefill_equals_unchunked(model_dir: str, fmt: str, chunk: int, length: int) -> None:
    """Every prompt logprob and the greedy continuation of a prompt prefilled in ``chunk``-token
    chunks equal the unchunked run's."""
    ids = random_ids(length, seed=length)
    s = make_sched(model_dir, fmt, chunked_prefill_size=chunk, disable_radix_cache=True)
    got = run_req(s, "x", ids, 6, prompt_logprobs=True)
    cold = cold_oracle(model_dir, fmt)(ids, 6, prompt_logprobs=True)
    assert len(got["in_lp"]) == length
    assert_matches(got, cold, fmt, f"chunk {chunk}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "fmt,chunk,length", [("fp8", 4, 257), ("fp8", 5, 257), ("fp8_fp4", 1, 253), ("fp8_fp4", 3, 253)]
)
def test_quantized_gap_is_gemm_rounding(model_dir: str, fmt: str, chunk: int, length: int) -> None:
    """The chunked-prefill cells with the largest quantized-KV gaps (0.062-0.074 on a prompt
    logprob) match their cold run within the fp32 tolerance once the CPU forward is batch-invariant
    (every fp32 GEMM in float64, ``resume_testutil.batch_invariant_gemms``): those gaps are fp32
    GEMM rounding that the codecs amplify, not KV or compressor state."""
    ids = random_ids(length, seed=length)
    with batch_invariant_gemms():
        s = make_sched(model_dir, fmt, chunked_prefill_size=chunk, disable_radix_cache=True)
        got = run_req(s, "x", ids, 6, prompt_logprobs=True)
        cold = run_req(
            make_sched(model_dir, fmt, disable_radix_cache=True), "cold", ids, 6, prompt_logprobs=True
        )
    assert cold["cached"] == 0 and len(got["in_lp"]) == length
    assert_matches(got, cold, "fp32", f"{fmt}, chunk {chunk}, float64 GEMMs")


@pytest.mark.parametrize(
    "fmt,chunk",
    cells([(f, c) for f in FMTS for c in (-1, 3, 129)], {("fp8", 129)}),
)
def test_hits_then_short_or_no_extend(model_dir: str, fmt: str, chunk: int) -> None:
    """After a 552-token prompt is cached: a hit at 256 / 512 followed by a 1-token extend, a
    prompt equal to the cached 512-token prefix (its last token is still computed: 256 cached),
    one equal to the first 257 tokens (256 cached, 1 computed), the same prompt again."""
    s = make_sched(model_dir, fmt, chunked_prefill_size=chunk)
    oracle = cold_oracle(model_dir, fmt)
    base = random_ids(552, seed=1512)
    run_req(s, "a", base, 3)
    assert base[256] != 7 and base[512] != 7
    # (name, prompt, tokens shared with the cached sequence)
    cases = [
        ("hit256+1", base[:256] + [7], 256),
        ("hit512+1", base[:512] + [7], 512),
        ("equal512", base[:512], 512),
        ("equal257", base[:257], 257),
        ("resend", base, 552),
    ]
    for name, ids, shared in cases:
        got = run_req(s, name, ids)
        assert got["cached"] == expected_hit(shared, len(ids)), name
        assert_matches(got, oracle(ids), fmt, name)
    assert_idle(s)


@pytest.mark.parametrize(
    "fmt,prompt_len,n",
    cells(
        [(f, *c) for f in FMTS for c in ((250, 20), (509, 10), (380, 140))],
        {("fp32", 250, 20)},
    ),
)
def test_hit_on_blocks_completed_by_decode(model_dir: str, fmt: str, prompt_len: int, n: int) -> None:
    """Decode steps cross 4-, 128- and 256-token boundaries; the blocks they complete are cached
    at the end, and a prompt continuing the finished sequence hits them (plus a 1- or 3-token
    extend) as exactly as a cold prefill of the whole prompt."""
    s = make_sched(model_dir, fmt)
    oracle = cold_oracle(model_dir, fmt)
    a = random_ids(prompt_len, seed=2000 + prompt_len)
    first = run_req(s, "a", a, n)
    assert first["ids"] == oracle(a, n)["ids"]
    seq = a + first["ids"]
    for tail in ([3], [5, 6, 7]):
        ids = seq[:-1] + tail
        got = run_req(s, f"b{len(tail)}", ids)
        assert got["cached"] == expected_hit(len(seq) - 1, len(ids))
        assert_matches(got, oracle(ids), fmt, f"tail {tail}")


@pytest.mark.parametrize("fmt,chunk", cells([(f, c) for f in ("fp32", "fp8") for c in (-1, 5)], set()))
def test_hit_on_decode_block_of_running_request(model_dir: str, fmt: str, chunk: int) -> None:
    """A request still decoding puts the block its decode steps completed into the cache; a new
    prompt continuing it hits that block while the first request runs on, and both are exact."""
    s = make_sched(model_dir, fmt, chunked_prefill_size=chunk)
    oracle = cold_oracle(model_dir, fmt)
    a = random_ids(250, seed=60)
    res: dict[str, dict] = {}
    submit_lp(s, "a", a, 40)
    while len(res.get("a", {}).get("ids", [])) < 20:
        step_collect(s, res, 1)
    b = (a + res["a"]["ids"])[:262] + [1, 2]
    submit_lp(s, "b", b, 6)
    drain(s, res)
    assert res["b"]["cached"] == 256
    assert_matches(res["b"], oracle(b), fmt, "b")
    assert_matches(res["a"], oracle(a, 40), fmt, "a")
    assert_idle(s)


@pytest.mark.parametrize("fmt,chunk", cells([(f, c) for f in FMTS for c in (-1, 129)], {("fp32", -1)}))
def test_retracted_requests_equal_cold(model_dir: str, fmt: str, chunk: int) -> None:
    """Three requests that outgrow a 5-block pool: retracted ones recompute their prompt and
    outputs after re-admission (through their own cached blocks when a block is complete) and
    give the cold run's tokens, output logprobs and prompt logprobs (prompt logprobs not yet sent
    when a request is retracted are recomputed)."""
    s = make_sched(model_dir, fmt, max_total_tokens=5 * 256, chunked_prefill_size=chunk)
    oracle = cold_oracle(model_dir, fmt)
    prompts = [random_ids(490, seed=40 + i) for i in range(3)]
    for i, p in enumerate(prompts):
        submit(s, f"r{i}", p, 40, return_logprob=True, logprob_start_len=0)
    got = drain(s)
    assert s.num_retractions > 0
    for i, p in enumerate(prompts):
        assert len(got[f"r{i}"]["in_lp"]) == len(p)
        assert_matches(got[f"r{i}"], oracle(p, 40, prompt_logprobs=True), fmt, f"r{i}")
    assert_idle(s)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["fp32", "fp8_fp4"])
@pytest.mark.parametrize("chunk", [100, 257])
def test_retraction_with_a_shared_prefix_in_chunked_prefill(model_dir: str, fmt: str, chunk: int) -> None:
    """Three prompts sharing 700 tokens on a 6-block pool with chunked prefill: requests are
    retracted while others lock the shared blocks; everything ends exact and nothing leaks."""
    s = make_sched(model_dir, fmt, max_total_tokens=6 * 256, chunked_prefill_size=chunk)
    oracle = cold_oracle(model_dir, fmt)
    base = random_ids(700, seed=80)
    prompts = [base + random_ids(20, seed=81 + i) for i in range(3)]
    for i, p in enumerate(prompts):
        submit_lp(s, f"r{i}", p, 60)
    got = drain(s)
    assert s.num_retractions > 0
    for i, p in enumerate(prompts):
        assert_matches(got[f"r{i}"], oracle(p, 60), fmt, f"r{i}")
    assert_idle(s)


@pytest.mark.parametrize(
    "fmt,length,chunk",
    cells([(f, *c) for f in FMTS for c in ((300, -1), (512, 100))], {("fp32", 300, -1)}),
)
def test_parallel_samples_share_the_parent_prefix(model_dir: str, fmt: str, length: int, chunk: int) -> None:
    """``n = 4`` (four copies of one prompt queued together, as the tokenizer manager sends them):
    the first computes the prompt, the others wait for its blocks and hit them; all four equal
    the cold run."""
    s = make_sched(model_dir, fmt, chunked_prefill_size=chunk)
    ids = random_ids(length, seed=3000 + length)
    for k in range(4):
        submit_lp(s, f"n{k}", ids, 8)
    got = drain(s)
    cold = cold_oracle(model_dir, fmt)(ids, 8)
    assert [got[f"n{k}"]["cached"] for k in range(4)] == [0] + [expected_hit(length, length)] * 3
    for k in range(4):
        assert_matches(got[f"n{k}"], cold, fmt, f"child {k}")
    assert_idle(s)


def _divergence_cases() -> list:
    fast = {("fp8", 299, 64)}
    return [
        pytest.param(fmt, d, c, marks=() if (fmt, d, c) in fast else (pytest.mark.slow,))
        for fmt in FMTS
        for d in [255, 256, 257, 297, 298, 299, 300, 511, 513]
        for c in [-1, 64]
    ]


@pytest.mark.parametrize("fmt,diverge,chunk", _divergence_cases())
def test_concurrent_prompts_diverging_inside_a_block_or_group(
    model_dir: str, fmt: str, diverge: int, chunk: int
) -> None:
    """Two prompts queued together that share ``diverge`` tokens, so they part inside a 256-token
    block (and, for 297-299, inside a 4-token compression group): the second hits only the
    whole blocks before the divergence, both equal their cold runs."""
    s = make_sched(model_dir, fmt, chunked_prefill_size=chunk)
    oracle = cold_oracle(model_dir, fmt)
    base = random_ids(diverge, seed=4000)
    a = base + random_ids(30, seed=4100 + diverge)
    b = base + random_ids(31, seed=4200 + diverge)
    assert a[diverge] != b[diverge]
    submit_lp(s, "a", a)
    submit_lp(s, "b", b)
    got = drain(s)
    assert got["a"]["cached"] == 0
    # b waits for a's first block when they share it; a chunked a caches block by block
    assert got["b"]["cached"] in {expected_hit(diverge, len(b)), min(256, expected_hit(diverge, len(b)))}
    if chunk == -1:
        assert got["b"]["cached"] == expected_hit(diverge, len(b))
    assert_matches(got["a"], oracle(a), fmt, "a")
    assert_matches(got["b"], oracle(b), fmt, "b")
    assert_idle(s)


@pytest.mark.parametrize("fmt,steps", cells([(f, k) for f in ("fp32", "fp8") for k in (3, 6, 10)], set()))
def test_abort_of_the_request_owning_a_shared_prefix(model_dir: str, fmt: str, steps: int) -> None:
    """``a`` prefills a 900-token prompt in 128-token chunks, ``b`` shares its first 700 tokens;
    ``a`` is aborted ``steps`` steps after ``b`` arrives (before, during or after ``b``'s hit).
    ``b`` is exact, and a later prompt sharing all of ``a``'s prompt hits what ``a`` cached."""
    s = make_sched(model_dir, fmt, chunked_prefill_size=128)
    oracle = cold_oracle(model_dir, fmt)
    base = random_ids(900, seed=95)
    a, b = base + [1, 2, 3], base[:700] + [4, 5]
    res: dict[str, dict] = {}
    submit_lp(s, "a", a, 40)
    step_collect(s, res, 2)
    submit_lp(s, "b", b)
    step_collect(s, res, steps)
    s.abort_request("a")
    drain(s, res)
    assert res["a"]["finish"]["type"] == "abort"
    assert_matches(res["b"], oracle(b), fmt, "b")
    c = base + [7]
    got = run_req(s, "c", c)
    assert got["cached"] % 256 == 0 and got["cached"] >= 512
    assert_matches(got, oracle(c), fmt, "c")
    assert_idle(s)


@pytest.mark.parametrize("fmt,interval", cells([(f, k) for f in ("fp32", "fp8_fp4") for k in (2, 3)], set()))
def test_hits_with_resume_interval(model_dir: str, fmt: str, interval: int) -> None:
    """``--resume-interval k`` keeps resume states only at every k-th block end: a hit rounds down
    to ``k * 256`` tokens and is exact there."""
    s = make_sched(model_dir, fmt, resume_interval=interval)
    oracle = cold_oracle(model_dir, fmt)
    base = random_ids(1100, seed=50 + interval)
    run_req(s, "a", base, 2)
    for shared in (257, 513, 769, 1025):
        ids = base[:shared] + [9, 8]
        got = run_req(s, f"b{shared}", ids)
        assert got["cached"] == expected_hit(shared, len(ids), interval)
        assert_matches(got, oracle(ids), fmt, f"shared {shared}")
    assert_idle(s)


@pytest.mark.parametrize("fmt", cells([("fp8",), ("fp32",)], set()))
def test_prompt_logprobs_starting_inside_the_cached_prefix(model_dir: str, fmt: str) -> None:
    """``logprob_start_len = s`` bounds the hit to ``s`` tokens (SGLang's rule: token ``s``'s entry
    is ``None``, its logits at ``s - 1`` are not needed): the hit is the largest whole block not
    past ``s``, and the prompt logprobs after ``s`` equal the cold run's."""
    s = make_sched(model_dir, fmt)
    oracle = cold_oracle(model_dir, fmt)
    base = random_ids(800, seed=70)
    run_req(s, "a", base, 2)
    ids = base[:700] + [4]
    cold = oracle(ids, 4, prompt_logprobs=True)
    for start in (1, 256, 257, 513, 600):
        submit(s, f"b{start}", ids, 4, return_logprob=True, logprob_start_len=start)
        got = drain(s)[f"b{start}"]
        assert got["cached"] == (start // 256) * 256
        assert len(got["in_lp"]) == len(ids) - start and got["in_lp"][0] is None
        assert_matches(got, {**cold, "in_lp": [None] + cold["in_lp"][start + 1 :]}, fmt, f"start {start}")
    assert_idle(s)
