"""A twenty-fifth set of public reports on the DeepSeek-V4 model and its KV on the CPU path:
uneven and mixed-offset batched prefills, chunks straddling HCA (128) boundaries, decode appending
HCA entries, multi-token extends over different prefixes, indexer top-k larger than the entries
and its causality, prefix-cache hits that must reproduce the cold run (growing hits, the first
suffix entries after a hit, a hit beside another running request), request slots reused at an
odd compressor phase, the router's tie rule, and rotary tables at long positions of a bf16 model
(each test names its report).

Oracles: HF transformers' ``DeepseekV4ForCausalLM`` on the same weights (one no-cache forward per
sequence, fp32 on the CPU, within 1e-3 as test_model_parity); the cold run of the same request on
an empty radix cache; float64 references of the indexer scores and rotary angles; the reports'
stated rules (every visible entry when ``k`` exceeds them, lower expert id on a tie).
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import pytest
import torch
from dsv4_testutil import BASE, CONFIGS, CSA, HCA, SL, Driver, Twin, hf_logprobs_memo, make_twin, random_ids
from kernels_indexer_testutil import candidates, check_selection, paged_case
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit
from sgl_kernel_v4 import ops
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.rotary_embedding import RotaryTables

pytestmark = pytest.mark.timeout(300)

TOL = 1e-3
#: hit-vs-cold logprob gap allowed (fp32 GEMMs of different batch shapes)
HIT_TOL = 1e-4

#: window 8, CSA ratio 4, HCA ratio 8, top-k 4: short prompts reach every compressor phase
SMALL_RATES_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[CSA, HCA, SL, CSA],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    sliding_window=8,
    compress_rates={CSA: 4, HCA: 8},
    index_topk=4,
)


@functools.cache
def _twin(name: str) -> Twin:
    cfg = {"small_rates": SMALL_RATES_CFG, "sliding_first": CONFIGS["sliding_first"]}[name]
    return make_twin(name, seed=25, cfg=copy.deepcopy(cfg))


def _max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape, (out.shape, ref.shape)
    return (out - ref).abs().max().item()


# ---------------------------------------------------------------------------------------------
# Batched prefill shapes (vllm-project/vllm-ascend#9496, hw-native-sys/pypto-lib#583)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_9496_uneven_batched_prefill_equals_the_request_alone() -> None:
    """vllm-project/vllm-ascend#9496 (the DeepSeek-V4 compressor kept a tile size meant for equal
    lengths when a batched prefill's rows were uneven -- ``cu_seqlens = [0, 12, 23]`` -- so the same
    request's compressed KV differed alone and in the batch): a 12-token and an 11-token prompt
    (neither a multiple of the CSA ratio 4 or the HCA ratio 8) prefilled in ONE batch give the
    log-probabilities of each prefilled alone (within 1e-5), and transformers'."""
    twin = _twin("small_rates")
    seqs = [random_ids(12, seed=9496), random_ids(11, seed=9497)]
    drv = Driver(twin, page_size=64)
    alone = [drv.run_chunked(ids, 1000) for ids in seqs]
    slots = [drv.new_req() for _ in seqs]
    outs = drv.step([(s, ids) for s, ids in zip(slots, seqs)])
    for s in slots:
        drv.release(s)
    for ids, a, o in zip(seqs, alone, outs):
        assert _max_err(o, a) <= 1e-5, len(ids)
        assert _max_err(a, hf_logprobs_memo(twin, ids)) <= TOL, len(ids)


def test_pypto_583_requests_at_different_chunk_offsets_keep_their_own_positions() -> None:
    """hw-native-sys/pypto-lib#583 (a DeepSeek-V4 prefill flattened two requests into one
    continuous token stream; each request's chunk must use its own ``start_pos + chunk_start``):
    request A's second and third chunks (from 37 and 90) share batches with request B's first and
    second chunks (from 0 and 29), so every batch mixes rows at different offsets and compressor
    phases; all positions of both match transformers' on each whole sequence."""
    twin = _twin("small_rates")
    a, b = random_ids(131, seed=583), random_ids(77, seed=584)
    drv = Driver(twin, page_size=64)
    sa, sb = drv.new_req(), drv.new_req()
    got_a = [drv.step([(sa, a[:37])])[0]]
    o = drv.step([(sb, b[:29]), (sa, a[37:90])])
    got_b, got_a = [o[0]], got_a + [o[1]]
    o = drv.step([(sa, a[90:]), (sb, b[29:])])
    got_a.append(o[0])
    got_b.append(o[1])
    drv.release(sa)
    drv.release(sb)
    assert _max_err(torch.cat(got_a), hf_logprobs_memo(twin, a)) <= TOL
    assert _max_err(torch.cat(got_b), hf_logprobs_memo(twin, b)) <= TOL


def test_vllm_ascend_dsv4_83_hidden_size_off_the_block_grid_compresses_every_column() -> None:
    """GDzhu01/vllm-ascend-deepseekv4#83 (the DeepSeek-V4 compressor split the hidden axis with a
    stride of ``hidden_size / blocks``; for a hidden size off the copy-block grid -- Pro's 7168 --
    the last element written into each token's KV / score state was corrupted): a model with
    ``hidden_size = 96`` (not a multiple of 64) prefilled whole and in chunks of 5 gives
    transformers' log-probabilities at every position of a 45-token prompt."""
    cfg = dict(SMALL_RATES_CFG, hidden_size=96)
    twin = make_twin("hidden96", seed=83, cfg=copy.deepcopy(cfg))
    ids = random_ids(45, seed=83)
    ref = hf_logprobs_memo(twin, ids)
    for chunk in (1000, 5):
        assert _max_err(Driver(twin, page_size=64).run_chunked(ids, chunk), ref) <= TOL, chunk


# ---------------------------------------------------------------------------------------------
# HCA (ratio 128) state across chunks and decode (vllm-project/vllm-ascend#15204,
# Avarok-Cybersecurity/atlas#275)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_15204_chunks_straddling_hca_boundaries_carry_the_partial_state() -> None:
    """vllm-project/vllm-ascend#15204 (DeepSeek-V4's compressor partial state is kept per raw
    token position between prefill chunks; chunk edges that do not fall on the ratio must carry
    the unfinished group): with the published ratios (CSA 4, HCA 128, window 128), a 400-token
    prompt prefilled in chunks of 127, 2, 128, 1 and 142 tokens (edges at 127, 129, 257, 258: one
    short of, just past and one past HCA boundaries) gives transformers' log-probabilities at
    every position."""
    twin = _twin("sliding_first")
    ids = random_ids(400, seed=15204)
    drv = Driver(twin)
    slot = drv.new_req()
    outs, s = [], 0
    for n in (127, 2, 128, 1, 142):
        outs.append(drv.step([(slot, ids[s : s + n])])[0])
        s += n
    drv.release(slot)
    assert s == len(ids)
    assert _max_err(torch.cat(outs), hf_logprobs_memo(twin, ids)) <= TOL


def test_atlas_275_decode_appends_an_hca_entry_every_128_steps() -> None:
    """Avarok-Cybersecurity/atlas#275 (DeepSeek-V4 decode must append a new compressed entry every
    ``ratio`` steps, rotated at its own position, or generated context past the 128-token window
    is lost): a 120-token prompt decoded one token at a time (teacher-forced) to 270 tokens, past
    the HCA boundaries at 128 and 256 and two window wraps, gives transformers'
    log-probabilities at every decoded position."""
    twin = _twin("sliding_first")
    ids = random_ids(270, seed=275)
    drv = Driver(twin)
    slot = drv.new_req()
    rows = [drv.step([(slot, ids[:120])])[0][-1:]]
    for t in range(120, len(ids) - 1):
        rows.append(drv.step([(slot, [ids[t]])])[0])
    drv.release(slot)
    ref = hf_logprobs_memo(twin, ids)[119:-1]
    assert _max_err(torch.cat(rows), ref) <= TOL


# ---------------------------------------------------------------------------------------------
# Multi-token extends over different prefixes (sgl-project/sglang#12583)
# ---------------------------------------------------------------------------------------------


def test_sglang_12583_extends_over_different_prefixes_score_their_own_entries() -> None:
    """sgl-project/sglang#12583 (the DeepSeek-V3.2 indexer built a batched extend's per-token key
    ranges ``ks`` / ``ke`` from one offset where the start and end need two: rows of a request with
    a cached prefix scored another request's keys): five requests with prefixes of 9, 22, 40, 57
    and 64 tokens (2..16 CSA entries, top-k 4) extend by 5, 3, 7, 1 and 6 tokens in ONE batch;
    every new position matches transformers'."""
    twin = _twin("small_rates")
    prefix = [9, 22, 40, 57, 64]
    width = [5, 3, 7, 1, 6]
    seqs = [random_ids(p + w, seed=12583 + p) for p, w in zip(prefix, width)]
    drv = Driver(twin, page_size=64)
    slots = [drv.new_req() for _ in seqs]
    for s, ids, p in zip(slots, seqs, prefix):
        drv.step([(s, ids[:p])])
    outs = drv.step([(s, ids[p:]) for s, ids, p in zip(slots, seqs, prefix)])
    for s in slots:
        drv.release(s)
    for ids, p, o in zip(seqs, prefix, outs):
        assert _max_err(o, hf_logprobs_memo(twin, ids)[p:]) <= TOL, p


# ---------------------------------------------------------------------------------------------
# Indexer top-k: k above the visible entries, causality (lucidrains/native-sparse-attention-
# pytorch#18, XunhaoLai/native-sparse-attention-triton#25)
# ---------------------------------------------------------------------------------------------


def _topk_case(seed: int, T: int, n_max: int) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor, float]:
    g = torch.Generator().manual_seed(seed)
    case = paged_case(T, n_max, 256, g, e=16)
    rtp = case["req_to_page"]
    for r in range(rtp.shape[0]):  # map the page the helper leaves out: every entry is real
        free = [p for p in range(256 // 16) if p not in rtp[r].tolist()]
        rtp[r][rtp[r] < 0] = free[0]
    Hi, di = 16, 32
    q = torch.randn(T, Hi, di, generator=g)
    w = torch.randn(T, Hi, generator=g)
    pool = torch.randn(256, di, generator=g)
    return case, q, w, pool, di**-0.5


def _run_topk(
    case: dict, q: torch.Tensor, w: torch.Tensor, pool: torch.Tensor, k: int, scale: float
) -> torch.Tensor:
    return ops.indexer_topk(
        q,
        w,
        pool,
        case["visible"],
        case["req_to_page"],
        case["req_rows"],
        case["token_req"],
        case["e"],
        k,
        scale,
    )


def test_nsa_pytorch_18_topk_larger_than_the_visible_entries_selects_all_of_them() -> None:
    """lucidrains/native-sparse-attention-pytorch#18 (top-k selection with fewer blocks available
    than ``k`` raised "selected index k out of range"): with ``k = 16`` and tokens seeing 0..12
    compressed entries, every token's selection is all its visible entries ``0 .. v-1`` in order,
    then ``-1`` padding (no error, no invented entry)."""
    case, q, w, pool, scale = _topk_case(18, T=10, n_max=12)
    out = _run_topk(case, q, w, pool, 16, scale)
    assert out.shape == (10, 16) and out.dtype == torch.int64
    for t, v in enumerate(case["visible"].tolist()):
        want = list(range(v)) + [-1] * (16 - v)
        assert out[t].tolist() == want, (t, v)


def test_nsa_triton_25_selection_is_causal_and_at_most_k() -> None:
    """XunhaoLai/native-sparse-attention-triton#25 (a top-k taken over all keys and only then
    masked to ``-1`` for future ones left rows with future indices or the wrong count): with
    ``k = 8`` and tokens seeing 0..40 entries, every row selects ``min(k, visible)`` distinct
    entries, all below its visible count, and they are the best ``k`` of the visible ones under
    the float64 indexer scores (``sum_h w_h relu(scale q_h . k)``)."""
    case, q, w, pool, scale = _topk_case(25, T=12, n_max=40)
    k = 8
    out = _run_topk(case, q, w, pool, k, scale)
    for t, v in enumerate(case["visible"].tolist()):
        sel = out[t][out[t] >= 0]
        assert sel.numel() == min(k, v) and (sel < v).all(), (t, v, out[t].tolist())
    cand = candidates(case)
    dots = torch.einsum("thd,tcd->thc", q.double(), pool.double()[cand.clamp(min=0)]) * scale
    ref = torch.einsum("thc,th->tc", dots.relu(), w.double()).masked_fill(cand < 0, -torch.inf)
    check_selection(out, ref, k, tol=1e-5)


# ---------------------------------------------------------------------------------------------
# Prefix-cache hits reproduce the cold run (sgl-project/sglang#34562, ROCm/ATOM#1769,
# ggml-org/llama.cpp#26790)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    """A 24-block pool, prefill unchunked."""
    return make_scheduler(sched_model_dir, max_total_tokens=24 * PAGE, chunked_prefill_size=-1)


def _cold(s: Any, rid: str, ids: list[int], n: int, **kw: Any) -> dict:
    """``ids`` on an empty radix cache (the oracle), the cache flushed again after."""
    assert s.flush_cache()
    res = run_one(s, rid, ids, n, **kw)
    assert res["cached"] == 0
    assert s.flush_cache()
    return res


def _gap(a: list[float | None], b: list[float | None]) -> float:
    assert len(a) == len(b), (len(a), len(b))
    return max([abs(x - y) for x, y in zip(a, b) if x is not None and y is not None] + [0.0])


def test_sglang_34562_one_prompt_with_growing_cached_prefixes_gives_the_cold_logprobs(sched: Any) -> None:
    """sgl-project/sglang#34562 (on DeepSeek-V4 a prefix hit did not reproduce the cold run: the
    same prompt gave a different continuation depending on how much of it was cached): one
    800-token prompt run with 256, 512 and 768 of its tokens cached (earlier runs of its first 300,
    600 and 799 tokens) reports those hits and gives the cold run's tokens and output
    log-probabilities (within 1e-4) each time."""
    ids = random_ids(800, seed=34562)
    cold = _cold(sched, "cold", ids, 6, return_logprob=True)
    for i, seed_len in enumerate((300, 600, 799)):
        assert sched.flush_cache()
        run_one(sched, f"seed{i}", ids[:seed_len], 1)
        warm = run_one(sched, f"warm{i}", ids, 6, return_logprob=True)
        assert warm["cached"] == seed_len // PAGE * PAGE
        assert warm["ids"] == cold["ids"], seed_len
        assert _gap(warm["lp"], cold["lp"]) <= HIT_TOL, seed_len
    assert_idle(sched)


def test_atom_1769_suffix_prompt_logprobs_after_a_hit_equal_the_cold_run(sched: Any) -> None:
    """ROCm/ATOM#1769 (on a DeepSeek-V4 prefix hit the first suffix CSA entry pools the last rows
    before the hit boundary, which a fresh compressor state cannot reproduce: the boundary state
    must be restored, not zeroed): a 530-token prompt whose first 512 tokens are cached reports a
    512-token hit, and the prompt log-probabilities of its 18 suffix positions (the first CSA
    entries after the boundary and the window rebuilt there) equal the cold run's (within 1e-4)."""
    ids = random_ids(530, seed=1769)
    kw = dict(return_logprob=True, logprob_start_len=512)
    cold = _cold(sched, "cold", ids, 2, **kw)
    run_one(sched, "seed", ids[:520], 1)
    warm = run_one(sched, "warm", ids, 2, **kw)
    assert warm["cached"] == 2 * PAGE
    assert len(warm["in_lp"]) == len(cold["in_lp"]) == len(ids) - 512
    assert sum(x is not None for x in warm["in_lp"]) >= 17
    assert _gap(warm["in_lp"], cold["in_lp"]) <= HIT_TOL
    assert warm["ids"] == cold["ids"]
    assert_idle(sched)


def test_llama_cpp_26790_a_hit_by_one_request_leaves_a_running_request_intact(sched: Any) -> None:
    """ggml-org/llama.cpp#26790 (restoring one DeepSeek-V4 sequence's cached prompt cleared the
    compressed KV of every sequence, so other running requests decoded against zeroed compressed
    context without any error): request A (600 tokens, 40 new) is decoding when request B arrives
    and hits a 512-token cached prefix of its own; both give their cold runs' tokens and output
    log-probabilities (within 1e-4)."""
    a = random_ids(600, seed=26790)
    b = random_ids(560, seed=26791)
    cold_a = _cold(sched, "cold-a", a, 40, return_logprob=True)
    cold_b = _cold(sched, "cold-b", b, 8, return_logprob=True)
    run_one(sched, "seed", b[:530], 1)
    submit(sched, "a", a, 40, return_logprob=True)
    res: dict[str, dict] = {}
    for _ in range(50):  # A's prefill and a few decode steps, outputs kept
        if len(res.get("a", {}).get("ids", [])) >= 3:
            break
        out = sched.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": [], "chunks": []})
            r["ids"] += out.output_ids[i]
            r["lp"] += out.output_token_logprobs_val[i]
    assert len(res["a"]["ids"]) >= 3  # A is decoding when B arrives
    submit(sched, "b", b, 8, return_logprob=True)
    drain(sched, res)
    assert res["b"]["cached"] == 2 * PAGE
    for name, cold in (("a", cold_a), ("b", cold_b)):
        assert res[name]["ids"] == cold["ids"], name
        assert _gap(res[name]["lp"], cold["lp"]) <= HIT_TOL, name
    assert_idle(sched)


# ---------------------------------------------------------------------------------------------
# Request slots reused at an odd compressor phase (hw-native-sys/pypto-lib#993)
# ---------------------------------------------------------------------------------------------


def test_pypto_993_reused_request_slots_start_with_a_clean_compressor_state() -> None:
    """hw-native-sys/pypto-lib#993 (DeepSeek-V4 compressor state blocks must be placed so no two
    active rows share a slot, falling back when the block table aliases them): six requests
    released mid-group (lengths 13..27, none a multiple of 4 or 8) leave their slots to six new
    ones, which prefill in chunks of 3 beside two still-running requests and decode two tokens
    together; every new position of the new requests and of the running ones matches
    transformers'."""
    twin = _twin("small_rates")
    drv = Driver(twin, page_size=64, max_reqs=8)
    olds = [drv.new_req() for _ in range(6)]
    drv.step([(s, random_ids(13 + 3 * i, seed=993 + i)) for i, s in enumerate(olds)])
    keep = [random_ids(30, seed=900 + i) for i in range(2)]
    ks = [drv.new_req() for _ in keep]
    drv.step([(s, ids[:20]) for s, ids in zip(ks, keep)])
    for s in olds:
        drv.release(s)
    news = [random_ids(11 + i, seed=9930 + i) for i in range(6)]
    ns = [drv.new_req() for _ in news]
    assert set(ns) == set(olds)  # the freed slots are reused
    got: dict[int, list[torch.Tensor]] = {s: [] for s in ns + ks}
    done = dict.fromkeys(ns, 0)
    kdone = dict.fromkeys(ks, 20)
    while any(done[s] < len(ids) for s, ids in zip(ns, news)) or any(
        kdone[s] < len(ids) for s, ids in zip(ks, keep)
    ):
        work = []
        for s, ids in zip(ns, news):
            if done[s] < len(ids):
                work.append((s, ids[done[s] : done[s] + 3]))
                done[s] += len(work[-1][1])
        for s, ids in zip(ks, keep):
            if kdone[s] < len(ids):
                work.append((s, ids[kdone[s] : kdone[s] + 1]))
                kdone[s] += 1
        for (s, _), o in zip(work, drv.step(work)):
            got[s].append(o)
    for s, ids in list(zip(ns, news)) + list(zip(ks, keep)):
        start = 0 if s in done else 20
        assert _max_err(torch.cat(got[s]), hf_logprobs_memo(twin, ids)[start:]) <= TOL, s
        drv.release(s)


# ---------------------------------------------------------------------------------------------
# Router tie rule (vllm-project/vllm#54403, vllm-project/vllm-omni#7175)
# ---------------------------------------------------------------------------------------------


def test_vllm_54403_exact_tie_at_the_topk_boundary_goes_to_the_lower_expert_id() -> None:
    """vllm-project/vllm#54403 (the sqrt-softplus top-k oracle and kernel disagreed at an exact tie
    on the top-k boundary: ``torch.topk`` leaves the winner unspecified, the fused kernel takes
    the lower expert id): logits where experts 3, 5 and 6 tie for the last two of ``k = 3`` places
    select the best expert and experts 3 and 5, and the weights are the float64
    ``sqrt(softplus)`` scores renormalised and scaled."""
    E, k, scaling = 8, 3, 2.5
    logits = torch.tensor([[-1.0, 0.5, 2.0, 1.0, -3.0, 1.0, 1.0, 0.0]] * 4)
    bias = torch.zeros(E)
    ids, w = ops.moe_route(logits, bias, None, None, k, scaling)
    assert [sorted(r) for r in ids.tolist()] == [[2, 3, 5]] * 4
    s = [math.sqrt(math.log1p(math.exp(float(logits[0, e])))) for e in (2, 3, 5)]
    want = {e: v / sum(s) * scaling for e, v in zip((2, 3, 5), s)}
    for row_ids, row_w in zip(ids.tolist(), w.tolist()):
        for e, x in zip(row_ids, row_w):
            assert math.isclose(x, want[e], rel_tol=1e-5), (e, x, want[e])


def test_vllm_omni_7175_bias_masking_all_but_one_expert_still_picks_k_distinct_experts() -> None:
    """vllm-project/vllm-omni#7175 (a fused router excluded chosen experts by setting their score
    to ``-inf``, so once the remaining maximum was ``-inf`` too it picked the same expert again:
    zero logits, ``k = 3`` and a bias of ``-inf`` on every expert but 2 gave ``[2, 0, 0]``): the
    same case selects three distinct experts -- 2, then the lower ids 0 and 1 -- with finite
    weights from the unbiased scores (equal thirds of ``routed_scaling_factor``)."""
    E, k, scaling = 6, 3, 1.5
    logits = torch.zeros(3, E)
    bias = torch.full((E,), -torch.inf)
    bias[2] = 0.0
    ids, w = ops.moe_route(logits, bias, None, None, k, scaling)
    for row in ids.tolist():
        assert len(set(row)) == k and sorted(row) == [0, 1, 2], row
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w, torch.full((3, k), scaling / k), rtol=1e-6, atol=0.0)


# ---------------------------------------------------------------------------------------------
# Rotary tables of a bf16 model at long positions (huggingface/candle#3520)
# ---------------------------------------------------------------------------------------------


def test_candle_3520_rotary_tables_are_fp32_exact_at_long_positions() -> None:
    """huggingface/candle#3520 (RoPE tables built after casting positions and ``inv_freq`` to bf16:
    above 256 bf16 skips integers -- position 15962 became 15936 or 15968 -- and the long-context
    cos/sin turned to noise): with the published Flash rope settings (YaRN on the compressed
    layers), the main and compress tables that every model dtype shares are fp32 at positions
    255..1048575 and equal the float64 ``cos / sin(p * inv_freq) * mscale`` within the fp32
    rounding of the angle, and the tables of 15962 and 15968 differ."""
    cfg = dict(
        BASE,
        layer_types=[SL, CSA, HCA, CSA],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        max_position_embeddings=1048576,
        compress_rope_theta=160000.0,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 16.0,
            "original_max_position_embeddings": 65536,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    )
    mc = ModelConfig.from_dict(cfg)
    rt = RotaryTables(mc, "cpu")
    pos = torch.tensor([255, 257, 15962, 15968, 65535, 65537, 524289, 1048575])
    for kind in ("main", "compress"):
        cos, sin = rt.cos_sin(kind, pos)
        assert cos.dtype == sin.dtype == torch.float32
        inv = rt.inv_freq[kind].double()
        ang = pos.double()[:, None] * inv[None, :]
        s = rt.scaling[kind]
        bound = ang.abs() * 2.0**-23 + 1e-6  # the fp32 angle's rounding (HF computes it in fp32 too)
        assert ((cos.double() - ang.cos() * s).abs() <= bound * abs(s) + 1e-6).all(), kind
        assert ((sin.double() - ang.sin() * s).abs() <= bound * abs(s) + 1e-6).all(), kind
        assert (cos[2] - cos[3]).abs().max() > 0.1, kind
