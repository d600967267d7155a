"""A fourth set of DeepSeek-V4 public reports, model and serving side, replayed against this runtime
(each test names its report).

Oracles: HF transformers' ``DeepseekV4ForCausalLM`` (fp32, tiny random weights, one cache-free
forward over the whole sequence), float64 transcriptions of the formulas the reports quote, and
cold runs of the same requests. The runtime side is :class:`dsv4_testutil.Driver` (the runtime
model over the paged KV pool, in chosen chunks) and the in-process scheduler of
``scheduler_testutil``.

Covered: prompts shorter than the CSA compress rate and than ``index_topk``; decode from a one-token
prompt (no compressed entry yet); the mHC residual mix's orientation; a conversation extended turn
by turn on one request; hash-routed tokens of several requests in one forward; a one-chunk prefill
long enough for both compressors; a decode that must not collapse to one token; the sliding window
of every layer; compressor state across odd chunk sizes; prefix hits followed by tails around the
window; a long multi-turn session beside short requests; greedy output under concurrency; a turn
ended by a stop token reused by the next; the router's weights against float64.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch
from dsv4_testutil import (
    BASE,
    SL,
    Driver,
    Twin,
    hf_greedy,
    hf_logprobs,
    make_twin,
    random_ids,
)

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides


@functools.cache
def _twin(name: str) -> Twin:
    return make_twin(name, seed=4)


#: sliding-window-only models (no compressor, no indexer): four layers and one
SLIDING: dict[str, dict[str, Any]] = {
    "sliding_only_4": dict(BASE, layer_types=[SL] * 4, mlp_layer_types=["hash_moe"] + ["moe"] * 3),
    "sliding_only_1": dict(BASE, num_hidden_layers=1, layer_types=[SL], mlp_layer_types=["moe"]),
}


@functools.cache
def _custom_twin(label: str) -> Twin:
    return make_twin(label, seed=7, cfg=copy.deepcopy(SLIDING[label]))


def _max_err(ours: torch.Tensor, want: torch.Tensor) -> float:
    return (ours - want).abs().max().item()


# ---------------------------------------------------------------------------------------------
# prompts shorter than the compress rate / than index_topk (GDzhu01/vllm-ascend-deepseekv4#76)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sliding_first", "topk_large"])
def test_vllm_ascend_dsv4_76_prompts_around_the_c4_boundary_match_hf(name: str) -> None:
    """GDzhu01/vllm-ascend-deepseekv4#76 (DeepSeek-V4-Pro answered ``"a b c"`` right and emitted
    BOS for every prompt of 4 tokens or more: the first CSA compressed entry, made at the C4
    boundary, was garbage): every prompt length 1 to 10 (0, 1 and 2 compressed CSA entries, all
    fewer than ``index_topk``) gives HF's log-probabilities at every position and HF's greedy
    continuation of 3 tokens (prefill then decode steps)."""
    twin = _twin(name)
    full = random_ids(10, seed=76)
    drv = Driver(twin)
    for n in range(1, 11):
        ids = full[:n]
        assert _max_err(drv.run_chunked(ids, n), hf_logprobs(twin, ids)) <= TOL, (name, n)
        assert drv.greedy(ids, 3) == hf_greedy(twin, ids, 3), (name, n)


# ---------------------------------------------------------------------------------------------
# decoding with no compressed entry yet (AI-Hypercomputer/maxtext#4337)
# ---------------------------------------------------------------------------------------------


def test_maxtext_4337_decode_from_a_one_token_prompt_matches_hf() -> None:
    """AI-Hypercomputer/maxtext#4337 (DeepSeek-V4 compressed attention returned no mask when
    decoding one token or with zero compressed entries, breaking the decode step): a one-token
    prompt decoded one token at a time through the first CSA entries (positions 3, 7, 11 close a
    C4 group) gives HF's log-probabilities at every decode step (teacher-forced with HF's greedy
    tokens) and HF's greedy tokens."""
    twin = _twin("sliding_first")
    prompt = random_ids(1, seed=4337)
    want_tokens = hf_greedy(twin, prompt, 13)
    seq = prompt + want_tokens
    drv = Driver(twin)
    slot = drv.new_req()
    rows = [drv.step([(slot, [t])])[0] for t in seq]
    drv.release(slot)
    assert _max_err(torch.cat(rows), hf_logprobs(twin, seq)) <= TOL
    assert drv.greedy(prompt, 13) == want_tokens


# ---------------------------------------------------------------------------------------------
# the mHC residual mix is comb transposed (NVIDIA/Megatron-LM#4957)
# ---------------------------------------------------------------------------------------------


def test_megatron_4957_hc_post_mixes_the_residual_with_comb_transposed() -> None:
    """NVIDIA/Megatron-LM#4957 (DeepSeek-V4 ``hyper_connection`` mixed the residual streams with
    ``h_res`` where the reference model mixes them with its transpose; the same question was put to
    HF transformers): the expansion is the reference's
    ``post[j] * out + sum_i comb[i, j] * residual[i]``, written here as an explicit float64 double
    loop, for a ``comb`` far from symmetric (the two orientations then differ by O(1))."""
    from sgl_kernel_v4 import ops

    g = torch.Generator().manual_seed(4957)
    T, n, D = 5, 4, 16
    out = torch.randn(T, D, generator=g)
    res = torch.randn(T, n, D, generator=g)
    post = torch.rand(T, n, generator=g) * 2
    comb = torch.zeros(T, n, n)
    comb[:, 0, 1:] = 1.0  # stream 0 feeds every other stream, nothing feeds stream 0
    comb += torch.rand(T, n, n, generator=g) * 0.1
    want = torch.zeros(T, n, D, dtype=torch.float64)
    for t in range(T):
        for j in range(n):
            want[t, j] = post[t, j].double() * out[t].double()
            for i in range(n):
                want[t, j] += comb[t, i, j].double() * res[t, i].double()
    got = ops.hc_post(out, res, post, comb).double()
    assert (got - want).abs().max().item() < 1e-5
    wrong = ops.hc_post(out, res, post, comb.transpose(-1, -2).contiguous()).double()
    assert (wrong - want).abs().max().item() > 0.1  # the orientation is observable here


# ---------------------------------------------------------------------------------------------
# a conversation extended turn by turn on one request (ml-explore/mlx-lm#1192)
# ---------------------------------------------------------------------------------------------


def test_mlx_lm_1192_multi_turn_extension_of_the_cache_matches_hf() -> None:
    """ml-explore/mlx-lm#1192 (DeepSeek-V4 multi-turn chats decohered after some turns, never on the
    first turn or on a prefill from scratch: extending the cache introduced errors): one request
    runs turn 1 (a 137-token prefill), 5 decode steps, turn 2 (61 tokens), 3 decode steps and turn
    3 (up to 330 tokens: past the 128-token window, the HCA rate and the 256-token page) and every
    log-probability is HF's over the whole conversation at once."""
    twin = _twin("hca_first_yarn")
    ids = random_ids(330, seed=1192)
    pieces = [137, 1, 1, 1, 1, 1, 61, 1, 1, 1]
    pieces.append(len(ids) - sum(pieces))
    drv = Driver(twin)
    slot = drv.new_req()
    rows, pos = [], 0
    for k in pieces:
        rows.append(drv.step([(slot, ids[pos : pos + k])])[0])
        pos += k
    drv.release(slot)
    assert _max_err(torch.cat(rows), hf_logprobs(twin, ids)) <= TOL


# ---------------------------------------------------------------------------------------------
# hash-routed tokens of several requests in one forward (ml-explore/mlx-lm#1189)
# ---------------------------------------------------------------------------------------------


def test_mlx_lm_1189_hash_routing_of_a_batch_is_each_requests_own() -> None:
    """ml-explore/mlx-lm#1189 (DeepSeek-V4 port: a hash-routing reshape fix was needed for batches
    of more than one sequence): three requests of different lengths prefilled in one forward, then
    decoded together in one forward, give each request's HF log-probabilities (hash layers route
    every token by its own id)."""
    twin = _twin("hca_first_yarn")  # layers 0 and 1 are hash-routed
    seqs = [random_ids(n, seed=1189 + n) for n in (9, 40, 133)]
    drv = Driver(twin)
    slots = [drv.new_req() for _ in seqs]
    first = drv.step([(s, q[:-1]) for s, q in zip(slots, seqs)])
    last = drv.step([(s, q[-1:]) for s, q in zip(slots, seqs)])
    for s in slots:
        drv.release(s)
    for q, a, b in zip(seqs, first, last):
        assert _max_err(torch.cat([a, b]), hf_logprobs(twin, q)) <= TOL, len(q)


# ---------------------------------------------------------------------------------------------
# the compressed branch during a one-chunk prefill (ml-explore/mlx-lm#1189)
# ---------------------------------------------------------------------------------------------


def test_mlx_lm_1189_compressed_entries_count_in_a_one_chunk_prefill() -> None:
    """ml-explore/mlx-lm#1189 (review: the compressed/global branch was masked off during every
    prefill, so long prompts degraded while decode was right): a 300-token prompt prefilled in one
    chunk gives HF's log-probabilities at every position, and HF's answer there depends on the
    compressed entries (HF without them differs by more than 100x the tolerance), so a prefill
    that ignored them would fail."""
    twin = _twin("sliding_first")
    ids = random_ids(300, seed=11890)
    want = hf_logprobs(twin, ids)
    assert _max_err(Driver(twin).run_chunked(ids, len(ids)), want) <= TOL
    sliding_only = make_twin("sliding_only", seed=4, cfg=dict(twin.cfg, layer_types=[SL] * 4))
    # the same weights where they exist; sliding-only layers have no compressor / indexer
    sliding_only.hf.load_state_dict(twin.hf.state_dict(), strict=False)
    assert _max_err(hf_logprobs(sliding_only, ids)[200:], want[200:]) > 100 * TOL


# ---------------------------------------------------------------------------------------------
# decode must not collapse to one token (vllm-project/vllm#52938)
# ---------------------------------------------------------------------------------------------


def test_vllm_52938_decode_steps_follow_hf_not_one_repeated_token() -> None:
    """vllm-project/vllm#52938 (DeepSeek-V4-Flash emitted the same argmax token with the same
    log-probability at every decode position): after a 140-token prompt, 16 decode steps (through
    CSA boundaries at 144, 148, 152) give HF's log-probabilities at every step (teacher-forced with
    HF's greedy tokens) and HF's greedy tokens; those are not one repeated token."""
    twin = _twin("sliding_first")
    prompt = random_ids(140, seed=52938)
    want_tokens = hf_greedy(twin, prompt, 16)
    assert len(set(want_tokens)) > 1  # the oracle itself does not repeat one token
    seq = prompt + want_tokens
    drv = Driver(twin)
    slot = drv.new_req()
    rows = [drv.step([(slot, prompt)])[0]]
    rows += [drv.step([(slot, [t])])[0] for t in want_tokens[:-1]]
    drv.release(slot)
    got = torch.cat(rows)
    assert _max_err(got, hf_logprobs(twin, seq)[:-1]) <= TOL
    assert [int(r.argmax()) for r in got[len(prompt) - 1 :]] == want_tokens


# ---------------------------------------------------------------------------------------------
# every layer sees only the 128-token window of raw keys (onnxruntime/mobius#596)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [127, 128, 129, 200])
def test_mobius_596_every_layer_is_limited_to_the_sliding_window(chunk: int) -> None:
    """onnxruntime/mobius#596 (DeepSeek-V4 attention ran unbounded causal attention instead of the
    mandatory 128-token window on every layer): a sliding-only model (no compressed entries) over
    200 tokens, prefilled in chunks ending around the window edge, gives HF's log-probabilities at
    every position; and a token 129 positions back cannot change the answer, while one 127 back
    does (float64-free: the window bound itself)."""
    twin = _custom_twin("sliding_only_4")
    ids = random_ids(200, seed=596)
    got = Driver(twin).run_chunked(ids, chunk)
    assert _max_err(got, hf_logprobs(twin, ids)) <= TOL
    if chunk == 200:
        # the last position (199) attends positions 72..199 in every layer; the 4-layer stack
        # reaches back 4 * 127 positions at most through the residual stream, so compare one
        # layer's reach instead: a one-layer sliding model
        one = _custom_twin("sliding_only_1")
        base = Driver(one).run_chunked(ids, 200)[-1]
        far, near = list(ids), list(ids)
        far[199 - 128] = (far[199 - 128] + 1) % 1000  # just outside the window
        near[199 - 127] = (near[199 - 127] + 1) % 1000  # the window's oldest position
        assert _max_err(Driver(one).run_chunked(far, 200)[-1], base) == 0.0
        assert _max_err(Driver(one).run_chunked(near, 200)[-1], base) > 0.0


# ---------------------------------------------------------------------------------------------
# the first CSA / HCA entries made during decode, chunk boundaries at every offset (ROCm/ATOM#664)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [3, 5, 7])
def test_atom_664_compressor_state_across_odd_chunks_matches_hf(chunk: int) -> None:
    """ROCm/ATOM#664 (the DeepSeek-V4 attention walk-through: the C4 compressor keeps a state of
    the last group's first halves and compresses when ``(pos + 1) % 4 == 0``, at any step size): a
    150-token sequence run in chunks of 3, 5 or 7 tokens (groups closed mid-chunk, at a chunk's end
    and across two chunks; the HCA group of 128 closed inside one) gives HF's log-probabilities."""
    twin = _twin("hca_first_yarn")
    ids = random_ids(150, seed=664)
    assert _max_err(Driver(twin).run_chunked(ids, chunk), hf_logprobs(twin, ids)) <= TOL


# ---------------------------------------------------------------------------------------------
# a prefix hit followed by a tail shorter than the window (sgl-project/sglang#30339)
# ---------------------------------------------------------------------------------------------


def test_sglang_30339_hit_with_a_tail_around_the_window_gives_the_cold_tokens(sched_model_dir: str) -> None:
    """sgl-project/sglang#30339 (DeepSeek-V4 on a radix prefix hit read a stale sliding-window ring
    when the uncached tail was shorter than the 128-token window; the fix re-prefills it): after a
    request left two whole blocks (512 tokens) in the cache, requests that share them and add 1
    token or exactly the window's 128 tokens hit the 512 tokens and generate the tokens of their
    cold runs (a tail of 79 tokens is ``test_vllm_54490_*``'s)."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    shared = random_ids(2 * PAGE, seed=30339)
    for tail in (1, 128):
        ids = shared + random_ids(tail, seed=30340 + tail)
        assert s.flush_cache()
        cold = run_one(s, f"cold{tail}", ids, 4)  # leaves its two whole blocks in the cache
        warm = run_one(s, f"warm{tail}", ids, 4)
        assert (cold["cached"], warm["cached"]) == (0, 2 * PAGE), tail
        assert warm["ids"] == cold["ids"], tail
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# a long session keeps hitting beside short requests (sgl-project/sglang#35129)
# ---------------------------------------------------------------------------------------------


def test_sglang_35129_long_session_hits_every_turn_beside_short_requests(sched_model_dir: str) -> None:
    """sgl-project/sglang#35129 (DeepSeek-V4: long multi-turn agent sessions got 0 cached tokens on
    every turn while short requests in the same window hit): a session grown over four turns to
    about 2,000 tokens, with short unrelated requests between its turns and room for all of them in
    the pool, hits on every turn the whole blocks of the previous turn's prompt and output (all but
    the last sampled token, whose KV is never computed), and its last turn's tokens are the cold
    run's."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=24 * PAGE)
    prompt, prev_len = random_ids(600, seed=35129), 0
    for turn in range(3):
        out = run_one(s, f"turn{turn}", prompt, 8)
        if turn:
            assert out["cached"] == prev_len // PAGE * PAGE, turn
        run_one(s, f"short{turn}", random_ids(300, seed=351290 + turn), 2)
        prev_len = len(prompt) + len(out["ids"]) - 1
        last_prompt, last_ids = prompt, out["ids"]
        prompt = prompt + out["ids"] + random_ids(350, seed=35130 + turn)
    assert s.flush_cache()
    assert run_one(s, "cold", last_prompt, 8)["ids"] == last_ids
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# greedy output does not depend on the concurrent requests (vllm-project/vllm#53257)
# ---------------------------------------------------------------------------------------------


def test_vllm_53257_greedy_output_does_not_depend_on_concurrency(sched_model_dir: str) -> None:
    """vllm-project/vllm#53257 (DeepSeek-V4-Flash at temperature 0: the same request gave different
    completions, more often under concurrency, even at 41 prompt tokens where the indexer has
    fewer candidates than ``index_topk``): a 41-token and a 300-token request, each run alone and
    then beside three concurrent requests of other lengths (admitted together, decoded in one
    batch), give the same tokens and the same log-probabilities."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, submit

    s = make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, disable_radix_cache=True)
    probes = {"p41": random_ids(41, seed=53257), "p300": random_ids(300, seed=53258)}
    alone = {}
    for rid, ids in probes.items():
        submit(s, rid, ids, 8, return_logprob=True)
        alone[rid] = drain(s)[rid]
    for rid, ids in probes.items():
        for k, n in enumerate((7, 130, 260)):
            submit(s, f"{rid}.other{k}", random_ids(n, seed=5326 + k), 8)
        submit(s, f"{rid}.busy", ids, 8, return_logprob=True)
        busy = drain(s)[f"{rid}.busy"]
        assert busy["ids"] == alone[rid]["ids"], rid
        assert max(abs(a - b) for a, b in zip(busy["lp"], alone[rid]["lp"])) <= 1e-4, rid
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# a turn that ended on a stop token is reused exactly (yanun0323/Whallm#12)
# ---------------------------------------------------------------------------------------------


def test_whallm_12_turn_ended_by_a_stop_token_is_reused_without_a_shift(sched_model_dir: str) -> None:
    """yanun0323/Whallm#12 (a DeepSeek-V4.1 runtime: the cache entry of a finished turn left out its
    final EOS, so the next turn fed the EOS again and shifted every later position by one): a turn
    that ends on a stop token id (the model's third greedy token) is followed by a turn whose
    prompt is that turn's prompt, its output (stop token included) and new text; the hit is the
    whole blocks of prompt + output but its last token, and the tokens are the cold run's."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE)
    prompt = random_ids(600, seed=12)
    probe = run_one(s, "probe", prompt, 3)["ids"]
    assert s.flush_cache()
    stop = probe[2]
    assert stop not in probe[:2]  # so the request can only stop at its third token
    turn1 = run_one(s, "t1", prompt, 50, ignore_eos=False, sampling={"stop_token_ids": [stop]})
    assert turn1["ids"] == probe  # the stop token is the last output token
    turn2 = prompt + turn1["ids"] + random_ids(40, seed=13)
    warm = run_one(s, "t2", turn2, 6)
    assert warm["cached"] == (len(prompt) + len(turn1["ids"]) - 1) // PAGE * PAGE == 512
    assert s.flush_cache()
    assert run_one(s, "t2-cold", turn2, 6)["ids"] == warm["ids"]
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# hash-routing weights from the scores in full precision (vllm-project/vllm-ascend#9831)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_9831_hash_routing_weights_are_the_renormalised_scores() -> None:
    """vllm-project/vllm-ascend#9831 (DeepSeek-V4 hash layers: the fused op's returned routing
    weights were off and were recomputed as ``sqrt(softplus(logits)).gather(ids)``, renormalised,
    times ``routed_scaling_factor``, kept in fp32): for fp32 router logits the weights of hash
    layers are that formula in float64 to fp32 rounding, and the ids are ``tid2eid[token]`` in the
    table's order; top-k layers select by ``score + bias`` but weight by the unbiased scores.
    (bf16 logits give scores rounded to bf16, as HF ``DeepseekV4HashRouter`` computes them in the
    logits' dtype: HF is the oracle there, in the model-parity tests.)"""
    from sgl_kernel_v4 import ops

    g = torch.Generator().manual_seed(9831)
    T, E, k, vocab, scale = 7, 16, 4, 50, 1.5
    logits = torch.randn(T, E, generator=g) * 3
    ids = torch.randint(0, vocab, (T,), generator=g)
    tid2eid = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(vocab)])
    s64 = torch.sqrt(torch.nn.functional.softplus(logits.double()))

    got_ids, got_w = ops.moe_route(logits, None, tid2eid, ids, k, scale)
    want_ids = tid2eid[ids]
    picked = s64.gather(1, want_ids)
    want_w = picked / picked.sum(-1, keepdim=True) * scale
    assert torch.equal(got_ids, want_ids) and got_w.dtype == torch.float32
    assert (got_w.double() - want_w).abs().max().item() <= 1e-6

    bias = torch.randn(E, generator=g)  # steers the choice only
    got_ids, got_w = ops.moe_route(logits, bias, None, None, k, scale)
    want_ids = torch.sort((s64 + bias.double()).topk(k, dim=-1).indices, dim=-1).values
    assert torch.equal(torch.sort(got_ids, dim=-1).values, want_ids)
    picked = s64.gather(1, got_ids)
    assert (got_w.double() - picked / picked.sum(-1, keepdim=True) * scale).abs().max().item() <= 1e-6
