"""A thirteenth set of public reports, model and KV side: DeepSeek-V4 sparse attention (lightning
indexer over the CSA compressed entries), the compressor state, the sliding window and the prefix
cache, replayed against this runtime (each test names its report).

Oracles: HF transformers' ``DeepseekV4ForCausalLM`` (fp32, tiny random weights, one cache-free
forward over the whole sequence, see ``dsv4_testutil``), each request run alone and cold runs of
the same requests. The runtime side is :class:`dsv4_testutil.Driver` (the runtime model over the
paged KV pool, in chosen chunks and batches) and the in-process scheduler of ``scheduler_testutil``.

Covered: suffix prefills (``start_pos > 0``) that must score every earlier compressed entry; a
resumed prefill against a cold one at every split point; decode past ``index_topk`` compressed
entries; compressor state that follows the request, not its batch row; a request in the last
request slot; concurrent prefix hits that must not share compressor state; partial blocks never
shared across requests; retraction beside a shared prefix; a long paged prefill; the 8-token
overlap window of the C4 compressor across odd chunk splits; seeded sampling of identical
requests; prefill-recomputed log-probabilities against the decode's; half-shared prompts hitting
the block floor of their common prefix; a window narrower than the C4 overlap; a request aborted
in chunked prefill and sent again.
"""

from __future__ import annotations

import functools

import pytest
import torch
from dsv4_testutil import Driver, Twin, hf_greedy, hf_logprobs, hf_logprobs_memo, make_twin, random_ids

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides
SELF_TOL = 1e-4  # max |dlogprob| between two runtime runs of the same tokens (fp32)


@functools.cache
def _twin(name: str) -> Twin:
    return make_twin(name, seed=13)


def _max_err(ours: torch.Tensor, want: torch.Tensor) -> float:
    return (ours - want).abs().max().item()


def _run_pieces(drv: Driver, ids: list[int], pieces: list[int]) -> torch.Tensor:
    """``[L, V]`` log-probabilities of ``ids`` prefilled in consecutive pieces of the given sizes."""
    assert sum(pieces) == len(ids)
    slot, outs, s = drv.new_req(), [], 0
    for n in pieces:
        outs.append(drv.step([(slot, ids[s : s + n])])[0])
        s += n
    drv.release(slot)
    return torch.cat(outs)


# ---------------------------------------------------------------------------------------------
# suffix prefill must score every earlier compressed entry (hw-native-sys/pypto-lib#592)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sliding_first", "hca_first_yarn"])
@pytest.mark.parametrize("pieces", [[256, 44], [100, 100, 100], [1, 299], [297, 3]])
def test_pypto_592_suffix_prefill_scores_every_earlier_compressed_entry(name: str, pieces: list[int]) -> None:
    """hw-native-sys/pypto-lib#592 (DeepSeek-V4 prefill indexer: a prefill step with
    ``start_pos > 0``, from chunked prefill or a prefix-cache hit, scored only the compressed entries
    of its own chunk and mis-selected the sparse top-k): a 300-token prompt (75 CSA entries, far
    above ``index_topk`` = 8) prefilled in pieces that start past 0 gives HF's log-probabilities at
    every position, the later pieces' queries seeing every entry made by the earlier ones."""
    twin = _twin(name)
    ids = random_ids(300, seed=592)
    got = _run_pieces(Driver(twin), ids, pieces)
    assert _max_err(got, hf_logprobs_memo(twin, ids)) <= TOL  # one HF forward for the four splits


# ---------------------------------------------------------------------------------------------
# a resumed prefill equals a cold one at every split point (JustVugg/colibri#1554)
# ---------------------------------------------------------------------------------------------


def test_colibri_1554_resumed_prefill_equals_cold_at_every_split() -> None:
    """JustVugg/colibri#1554 (a DeepSeek-V4.1 engine: the indexer's top-k depended on whether a
    position was prefilled in one go or resumed from a cached prefix; the fix: a resumed prefill
    reproduces a cold one at every split point): a 150-token prompt resumed at 19 split points
    (every C4 group phase, around the 128-token window, one token from either end) gives the cold
    one-chunk run's log-probabilities at every position and its greedy continuation."""
    twin = _twin("sliding_first")
    ids = random_ids(150, seed=1554)
    drv = Driver(twin)
    cold = drv.run_chunked(ids, len(ids))
    assert _max_err(cold, hf_logprobs(twin, ids)) <= TOL
    cold_next = drv.greedy(ids, 4)
    for split in (1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 64, 100, 127, 128, 129, 130, 147, 149):
        got = _run_pieces(drv, ids, [split, len(ids) - split])
        assert _max_err(got, cold) <= SELF_TOL, split
    for split in (4, 129):
        slot = drv.new_req()
        drv.step([(slot, ids[:split])])
        out = [int(drv.step([(slot, ids[split:])])[0][-1].argmax())]
        while len(out) < 4:
            out.append(int(drv.step([(slot, [out[-1]])])[0][-1].argmax()))
        drv.release(slot)
        assert out == cold_next, split


# ---------------------------------------------------------------------------------------------
# decode past index_topk compressed entries (ml-explore/mlx-lm#1443)
# ---------------------------------------------------------------------------------------------


def test_mlx_lm_1443_decode_across_index_topk_entries_matches_hf() -> None:
    """ml-explore/mlx-lm#1443 (DeepSeek-V3.2 sparse attention: generation collapsed exactly when
    the number of indexed keys crossed ``index_topk``, the sparse path dropping what the reference
    keeps): a 24-token prompt (6 CSA entries, below ``index_topk`` = 8) decoded greedily for 40
    tokens (16 entries, twice ``index_topk``) follows HF's greedy tokens, and HF's log-probabilities
    at every decode step (teacher-forced with those tokens)."""
    twin = _twin("sliding_first")
    prompt = random_ids(24, seed=1443)
    want = hf_greedy(twin, prompt, 40)
    drv = Driver(twin)
    # one greedy run keeping every step's rows: where its tokens equal HF's, its rows are the
    # teacher-forced ones
    slot = drv.new_req()
    rows = [drv.step([(slot, prompt)])[0]]
    got = [int(rows[-1][-1].argmax())]
    while len(got) < 40:
        rows.append(drv.step([(slot, [got[-1]])])[0])
        got.append(int(rows[-1][-1].argmax()))
    drv.release(slot)
    assert got == want
    assert _max_err(torch.cat(rows), hf_logprobs(twin, prompt + want[:-1])) <= TOL


# ---------------------------------------------------------------------------------------------
# compressor state follows the request, not its batch row (hw-native-sys/pypto-lib#1260)
# ---------------------------------------------------------------------------------------------


def test_pypto_1260_compressor_state_follows_the_request_not_its_batch_row() -> None:
    """hw-native-sys/pypto-lib#1260 (DeepSeek-V4.1: compressor state rows were derived from the
    batch-local request order, so reordering a packed batch or admitting / removing a request
    handed one request another's running compress window): three requests fed in odd chunks
    across steps whose batch order changes every step, with one admitted mid-way and one finished
    early, each give the log-probabilities of their run alone."""
    twin = _twin("hca_first_yarn")
    seqs = {"a": random_ids(70, seed=12601), "b": random_ids(90, seed=12602), "c": random_ids(45, seed=12603)}
    drv = Driver(twin)
    alone = {k: drv.run_chunked(v, len(v)) for k, v in seqs.items()}
    # (request, tokens this step) per step; order inside each step is the batch order
    plan = [
        [("a", 13), ("b", 7)],
        [("b", 30), ("a", 5)],
        [("c", 9), ("a", 22), ("b", 1)],
        [("a", 30), ("c", 3), ("b", 20)],  # a is complete after this step and leaves
        [("b", 32), ("c", 33)],
    ]
    slots = {k: drv.new_req() for k in ("a", "b")}
    done = {k: 0 for k in seqs}
    got: dict[str, list[torch.Tensor]] = {k: [] for k in seqs}
    for step in plan:
        for k, _ in step:
            if k not in slots:
                slots[k] = drv.new_req()
        work = [(slots[k], seqs[k][done[k] : done[k] + n]) for k, n in step]
        for (k, n), out in zip(step, drv.step(work)):
            got[k].append(out)
            done[k] += n
            if done[k] == len(seqs[k]):
                drv.release(slots.pop(k))
    assert done == {k: len(v) for k, v in seqs.items()}
    for k in seqs:
        assert _max_err(torch.cat(got[k]), alone[k]) <= SELF_TOL, k


# ---------------------------------------------------------------------------------------------
# the last request slot (sgl-project/sglang#25289)
# ---------------------------------------------------------------------------------------------


def test_sglang_25289_every_request_slot_including_the_last_is_usable() -> None:
    """sgl-project/sglang#25289 (DeepSeek-V4 CPU path: the compressor state had one row fewer than
    the request slots it is addressed by, so a request in the last valid slot failed with an
    IndexError): with four request slots all taken by concurrent requests of different lengths,
    each (the last slot's included) gives HF's log-probabilities, and so does a fifth request
    placed in the slot the first one freed."""
    twin = _twin("sliding_first")
    drv = Driver(twin, max_reqs=4)
    seqs = [random_ids(n, seed=25289 + n) for n in (9, 33, 60, 130)]
    slots = [drv.new_req() for _ in seqs]
    assert drv.pool.req_slots.available == 0
    outs = drv.step(list(zip(slots, seqs)))
    for i, (ids, out) in enumerate(zip(seqs, outs)):
        assert _max_err(out, hf_logprobs(twin, ids)) <= TOL, i
    drv.release(slots[0])
    extra = random_ids(41, seed=25290)
    slot = drv.new_req()
    assert _max_err(drv.step([(slot, extra)])[0], hf_logprobs(twin, extra)) <= TOL
    for s in [slot] + slots[1:]:
        drv.release(s)


# ---------------------------------------------------------------------------------------------
# concurrent prefix hits do not share compressor state (sgl-project/sglang#35494)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kv,chunk",
    [("auto", -1), pytest.param("fp8_e4m3", 100, marks=pytest.mark.slow, id="fp8_e4m3-100")],
)
def test_sglang_35494_concurrent_hits_on_one_prefix_keep_their_own_compress_state(
    sched_model_dir: str, kv: str, chunk: int
) -> None:
    """sgl-project/sglang#35494 (DeepSeek-V4 unified KV: the C4 compress state was addressed
    through the shared prefix's slots, so two requests sharing a radix prefix aliased one running
    compress window, and a recycled request slot inherited its previous occupant's rows): three
    requests sharing 512 cached tokens, with tails of 3, 61 and 130 tokens (different C4 phases),
    run together on hits and give the tokens and log-probabilities of their cold runs (fp32 KV
    unchunked; fp8 KV with the FP4 indexer in chunks of 100, where a hit's tail spans chunks)."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

    fmt = {} if kv == "auto" else {"kv_cache_dtype": kv, "enable_fp4_indexer": True}
    s = make_scheduler(sched_model_dir, max_total_tokens=16 * PAGE, chunked_prefill_size=chunk, **fmt)
    shared = random_ids(2 * PAGE, seed=35494)
    prompts = {f"t{n}": shared + random_ids(n, seed=35495 + n) for n in (3, 61, 130)}
    cold = {}
    for rid, ids in prompts.items():
        assert s.flush_cache()
        cold[rid] = run_one(s, rid, ids, 8, return_logprob=True)
        assert cold[rid]["cached"] == 0
    run_one(s, "warm-up", shared + [1], 1)  # leaves the two shared blocks in the cache
    for rid, ids in prompts.items():
        submit(s, f"{rid}.hit", ids, 8, return_logprob=True)
    got = drain(s)
    for rid in prompts:
        hit = got[f"{rid}.hit"]
        assert hit["cached"] == 2 * PAGE, rid
        assert hit["ids"] == cold[rid]["ids"], rid
        assert max(abs(a - b) for a, b in zip(hit["lp"], cold[rid]["lp"])) <= SELF_TOL, rid
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# a partial block is never shared across requests (vllm-project/vllm-ascend#10296)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_10296_partial_blocks_are_not_reused_across_requests(sched_model_dir: str) -> None:
    """vllm-project/vllm-ascend#10296 (DeepSeek-V4 compressed prefix cache: lookups hashed at a
    granularity other than the writes, so a partial private block was reused across requests and
    one session's response carried another's ``session_id``): after a 300-token request, a request
    sharing its first 290 tokens hits only the one whole 256-token block, one sharing 200 tokens
    hits nothing, and both generate the tokens of their cold runs."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    first = random_ids(300, seed=10296)
    others = {
        290: first[:290] + random_ids(10, seed=10297),
        200: first[:200] + random_ids(100, seed=10298),
    }
    cold = {}
    for k, ids in others.items():
        assert s.flush_cache()
        cold[k] = run_one(s, f"cold{k}", ids, 6)["ids"]
    for k, ids in others.items():
        assert s.flush_cache()
        run_one(s, f"first{k}", first, 6)
        warm = run_one(s, f"warm{k}", ids, 6)
        assert warm["cached"] == (k // PAGE) * PAGE, k
        assert warm["ids"] == cold[k], k
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# retraction beside a shared prefix (sgl-project/sglang#36185)
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sglang_36185_retracted_requests_match_their_non_retracted_runs(sched_model_dir: str) -> None:
    """sgl-project/sglang#36185 (DeepSeek-V4 retraction: requests retracted under KV pressure
    must finish with token ids identical to a non-retracted control; the sliding-window and
    compressor state travel with them or are rebuilt): three ~490-token requests sharing a
    260-token prefix (one whole block) outgrow a 5-block pool during decode; at least one is
    retracted, each finishes with the tokens of its run alone on an empty pool, and nothing leaks."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

    shared = random_ids(260, seed=36185)
    prompts = {f"r{i}": shared + random_ids(230 - i, seed=36186 + i) for i in range(3)}
    s = make_scheduler(sched_model_dir, max_total_tokens=5 * PAGE)
    alone = {}
    for rid, ids in prompts.items():
        assert s.flush_cache()
        alone[rid] = run_one(s, rid, ids, 40)["ids"]
    assert s.flush_cache()
    for rid, ids in prompts.items():
        submit(s, f"{rid}.busy", ids, 40)
    got = drain(s)
    assert s.num_retractions > 0
    for rid in prompts:
        assert got[f"{rid}.busy"]["ids"] == alone[rid], rid
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# a long paged prefill through the indexer (sgl-project/sglang#37892)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [512, 1100])
def test_sglang_37892_long_paged_prefill_through_the_indexer_matches_hf(chunk: int) -> None:
    """sgl-project/sglang#37892 (DeepSeek-V4 long-context prefill: the DSA indexer's top-k kernel
    faulted on the paged prefill path, which could never reach the kernel meant for long rows): an
    1,100-token prompt over five 256-token pages (275 CSA entries, 8 HCA entries), prefilled in
    one chunk or in chunks of 512, gives HF's log-probabilities at every position."""
    twin = _twin("hca_first_yarn")
    ids = random_ids(1100, seed=37892)
    got = Driver(twin).run_chunked(ids, chunk)
    assert _max_err(got, hf_logprobs_memo(twin, ids)) <= TOL  # one HF forward for both chunkings


# ---------------------------------------------------------------------------------------------
# the C4 overlap window across odd splits (lightseekorg/tokenspeed#1612)
# ---------------------------------------------------------------------------------------------


def test_tokenspeed_1612_c4_overlap_window_survives_every_split_phase() -> None:
    """lightseekorg/tokenspeed#1612 (DeepSeek-V4: the ratio-4 compressor fires at a group-closing
    position ``p`` and reads the eight positions ``[p - 7, p]``; the retained state window must
    cover them whatever the step widths): a 96-token prompt fed in steps of 3, 5, 7 and 9
    tokens, and in pieces of mixed widths, (so a group closes with its overlap half in the previous step, in the step
    before that, or in the same step) gives HF's log-probabilities at every position."""
    twin = _twin("sliding_first")
    ids = random_ids(96, seed=1612)
    want = hf_logprobs(twin, ids)
    drv = Driver(twin)
    for width in (3, 5, 7, 9):
        assert _max_err(drv.run_chunked(ids, width), want) <= TOL, width
    pieces = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 3]
    assert _max_err(_run_pieces(drv, ids, pieces), want) <= TOL


# ---------------------------------------------------------------------------------------------
# identical seeded requests give identical completions (hw-native-sys/pypto-lib#1122)
# ---------------------------------------------------------------------------------------------


def test_pypto_1122_identical_seeded_requests_give_identical_completions(sched_model_dir: str) -> None:
    """hw-native-sys/pypto-lib#1122 (DeepSeek-V4 Flash: identical requests with the same prompt,
    sampling parameters and seed diverged between runs, with or without MTP): the same seeded
    request at temperature 1 sent four times in a row (cold, then on prefix hits, once beside
    an unrelated request) gives the same tokens every time; another seed gives other tokens."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

    s = make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE)
    ids = random_ids(520, seed=1122)
    sampling = {"temperature": 1.0, "top_p": 1.0, "sampling_seed": 1122}
    first = run_one(s, "run0", ids, 20, sampling=sampling)["ids"]
    for k in (1, 2):
        again = run_one(s, f"run{k}", ids, 20, sampling=sampling)
        assert again["cached"] == 512
        assert again["ids"] == first, k
    submit(s, "other", random_ids(200, seed=1123), 20, sampling=dict(sampling, sampling_seed=7))
    submit(s, "run3", ids, 20, sampling=sampling)
    assert drain(s)["run3"]["ids"] == first
    reseeded = run_one(s, "reseeded", ids, 20, sampling=dict(sampling, sampling_seed=1123))["ids"]
    assert reseeded != first
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# prefill-recomputed log-probabilities equal the decode's (radixark/miles#1788)
# ---------------------------------------------------------------------------------------------


def test_miles_1788_prefill_recompute_gives_the_decode_logprobs(sched_model_dir: str) -> None:
    """radixark/miles#1788 (DeepSeek-V4 true-on-policy: the log-probabilities SGLang's prefill
    recomputes for a rollout must equal those of the rollout's decode): a 300-token prompt decoded
    greedily for 40 tokens (closing 10 C4 groups while decoding), then prompt + output sent back
    with ``max_new_tokens=1`` and prompt log-probabilities from the prompt's last token, gives for
    each output token the log-probability the decode returned (fp32), on a cold pool and on a hit
    of its one whole block."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE)
    prompt = random_ids(300, seed=1788)
    rollout = run_one(s, "rollout", prompt, 40, return_logprob=True)
    assert len(rollout["lp"]) == 40
    full = prompt + rollout["ids"]
    for label, flush in (("cold", True), ("hit", False)):
        if flush:
            assert s.flush_cache()
        else:
            run_one(s, "fill", full, 1)
        re = run_one(s, f"re-{label}", full, 1, return_logprob=True, logprob_start_len=len(prompt) - 1)
        assert re["cached"] == (0 if flush else 256), label
        # SGLang's prompt logprobs: the entry at ``logprob_start_len`` is None, then one per token
        assert re["in_lp"][0] is None and len(re["in_lp"]) == len(rollout["ids"]) + 1, label
        diffs = [abs(a - b) for a, b in zip(re["in_lp"][1:], rollout["lp"])]
        assert max(diffs) <= SELF_TOL, label
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# half-shared prompts hit the block floor of their common prefix (vllm-project/vllm-ascend#9326)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_9326_half_shared_prompts_hit_the_floor_of_their_common_prefix(
    sched_model_dir: str,
) -> None:
    """vllm-project/vllm-ascend#9326 (DeepSeek-V4-Flash: two equally long prompts sharing half
    their tokens hit nothing, though the common prefix spans reusable blocks; the identical prompt,
    the positive control, hit): after a 700-token prompt, another of the same length sharing its
    first 300 tokens hits the 256 tokens of the whole block inside the common prefix, the
    identical prompt hits its two whole blocks (512 tokens), and both generate their cold runs'
    tokens."""
    from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one

    s = make_scheduler(sched_model_dir, max_total_tokens=12 * PAGE)
    first = random_ids(700, seed=9326)
    half = first[:300] + random_ids(400, seed=9327)
    cold = {}
    for label, ids in (("half", half), ("same", first)):
        assert s.flush_cache()
        cold[label] = run_one(s, f"cold-{label}", ids, 4)["ids"]
    for label, ids, hit in (("half", half, PAGE), ("same", first, 2 * PAGE)):
        assert s.flush_cache()
        run_one(s, f"first-{label}", first, 1)
        warm = run_one(s, f"warm-{label}", ids, 4)
        assert warm["cached"] == hit, label
        assert warm["ids"] == cold[label], label
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# a sliding window narrower than the C4 overlap (1bit-MONSTER/1bit-MONSTER#2245)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [4, 8])
def test_1bit_monster_2245_window_narrower_than_the_c4_overlap_matches_hf(window: int) -> None:
    """1bit-MONSTER/1bit-MONSTER#2245 (a DeepSeek-V4 engine checked against HF transformers on
    tiny seeded fixtures: the sliding-only fixture matched, the compressed one with a 4-token window
    over 64 and 160 tokens (16 and 40 CSA entries, and one HCA entry at 160) did not): with a
    sliding window of 4 or 8 tokens (no wider than the C4 compressor's 8-token overlap), prompts of
    64 and 160 tokens prefilled in one chunk or in 7-token chunks give HF's log-probabilities at
    every position."""
    from dsv4_testutil import BASE, CSA, HCA, SL

    cfg = dict(
        BASE,
        layer_types=[SL, CSA, HCA, CSA],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        sliding_window=window,
    )
    twin = make_twin(f"window{window}", seed=2245, cfg=cfg)
    drv = Driver(twin)
    for n in (64, 160):
        ids = random_ids(n, seed=2245 + n)
        want = hf_logprobs(twin, ids)
        for chunk in (n, 7):
            assert _max_err(drv.run_chunked(ids, chunk), want) <= TOL, (n, chunk)


# ---------------------------------------------------------------------------------------------
# a request aborted in chunked prefill, sent again (LMCache/LMCache#4185)
# ---------------------------------------------------------------------------------------------


def test_lmcache_4185_request_aborted_mid_prefill_then_resent_gives_cold_tokens(
    sched_model_dir: str,
) -> None:
    """LMCache/LMCache#4185 (DeepSeek-V4-Flash: aborting a request while its KV was being
    produced left a stale completion behind and broke the engine): a 700-token request in chunks
    of 100 aborted after 3, 6 or 8 scheduler steps (before its first whole block, after one, after
    two) leaves only whole computed blocks in the cache; the same request sent again hits exactly
    those (0, 256 or 512 tokens), generates the cold run's tokens, and nothing leaks."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

    s = make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE, chunked_prefill_size=100)
    ids = random_ids(700, seed=4185)
    cold = run_one(s, "cold", ids, 6)["ids"]
    for steps, hit in ((3, 0), (6, PAGE), (8, 2 * PAGE)):
        assert s.flush_cache()
        submit(s, f"aborted{steps}", ids, 6)
        for _ in range(steps):
            s.step()
        s.abort_request(f"aborted{steps}")
        drain(s)
        again = run_one(s, f"again{steps}", ids, 6)
        assert again["cached"] == hit, steps
        assert again["ids"] == cold, steps
    assert_idle(s)
