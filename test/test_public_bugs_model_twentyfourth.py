"""A twenty-fourth set of public reports on the DeepSeek-V4 model forward: the ``sqrtsoftplus``
router at logits where a float32 ``log(1 + exp(x))`` underflows or overflows and a hash layer whose
selected scores all underflow, YaRN's ``mscale`` kept out of the compressed layers' rotary tables,
compressed entries rotated at their source positions, the final hyper-head collapse, the shared
expert's SwiGLU clamp, the attention sink, the indexer's per-head ReLU, indexer keys over many
small pages, one prompt prefilled alone or beside others, a batch of one-token extends over long
compressed histories, decode and verify-shaped (2-3 token) batches whose rows sit at different
compressor phases (each test names its report).

Oracles: float64 references written here from DeepSeek's reference ``inference/model.py``
(``Gate.forward``: ``sqrt(softplus(logits))``, selected scores renormalised and scaled;
``Expert.forward``: gate clamped from above, up on both sides; ``hc_head``; the sink-only softmax
denominator; the indexer's ``sum_h w_h relu(q_h . k)``), and HF transformers'
``DeepseekV4ForCausalLM`` on the same weights (teacher-forced log-probabilities of one no-cache
forward per sequence, fp32 on the CPU, within 1e-3 as test_model_parity).
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from dsv4_testutil import BASE, CSA, HCA, SL, Driver, Twin, hf_logprobs, make_twin, random_ids
from kernel_testutil import DEVICE
from sgl_kernel_v4 import ops
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.mhc import HyperHead
from sglang_v4.layers.moe import SharedMLP, effective_swiglu_limit
from sglang_v4.layers.rotary_embedding import RotaryTables

TOL = 1e-3
FLASH = Path(__file__).parent / "fixtures" / "configs" / "DeepSeek-V4-Flash.config.json"

#: window 8, CSA ratio 4, HCA ratio 8 (transformers' mask-layout config): short prompts reach every
#: compressor phase and fill both pools.
SMALL_RATES_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[CSA, HCA, SL, CSA],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    sliding_window=8,
    compress_rates={CSA: 4, HCA: 8},
    index_topk=4,
)
#: the compress rope at a small base (every compressed position a large rotation) with YaRN at the
#: published factor 16, so a wrong rotation position or a YaRN ``mscale`` shows in the logits.
YARN16_CFG: dict[str, Any] = dict(
    SMALL_RATES_CFG,
    layer_types=[HCA, CSA, HCA, SL],
    compress_rope_theta=50.0,
    rope_parameters={
        "rope_type": "yarn",
        "factor": 16.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32,
        "beta_slow": 1,
    },
)


@functools.cache
def _twin(name: str) -> Twin:
    cfg = {"small_rates": SMALL_RATES_CFG, "yarn16": YARN16_CFG}[name]
    return make_twin(name, seed=24, cfg=copy.deepcopy(cfg))


def _max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape
    return (out - ref).abs().max().item()


# ---------------------------------------------------------------------------------------------
# sqrtsoftplus router numerics (sgl-project/sglang#34459)
# ---------------------------------------------------------------------------------------------


def _softplus64(x: float) -> float:
    """``log(1 + exp(x))`` in float64 without under- or overflow."""
    return x + math.log1p(math.exp(-x)) if x > 0 else math.log1p(math.exp(x))


def _route64(logits: torch.Tensor, ids: torch.Tensor, scaling: float) -> torch.Tensor:
    """float64 DeepSeek ``Gate.forward`` weights of the selected experts ``ids [T, k]``:
    ``s = sqrt(softplus(logit))``, ``s / sum(s) * scaling``."""
    out = torch.empty(ids.shape, dtype=torch.float64)
    for t in range(ids.shape[0]):
        s = [math.sqrt(_softplus64(float(logits[t, int(e)]))) for e in ids[t]]
        total = sum(s)
        out[t] = torch.tensor([v / total * scaling for v in s], dtype=torch.float64)
    return out


def test_sglang_34459_topk_router_weights_survive_logits_below_float32_softplus_underflow() -> None:
    """sgl-project/sglang#34459 (DeepSeek-V4's Triton router computed ``log(1.0 + exp(x))`` in
    fp32, which is 0 for ``x <= -16.64``; when every selected expert was below that the row
    renormalised to all-zero weights and the token lost its routed experts): top-k routing of
    fp32 logits in ``[-90, -17]`` selects the largest ``sqrt(softplus)`` scores and its weights
    are the float64 reference's (sum ``routed_scaling_factor``, none zero)."""
    g = torch.Generator().manual_seed(34459)
    T, E, k, scaling = 6, 16, 4, 1.5
    logits = -17.0 - 73.0 * torch.rand(T, E, generator=g)
    ids, w = ops.moe_route(logits, torch.zeros(E), None, None, k, scaling)
    want_ids = torch.topk(logits.double(), k, dim=-1).indices  # softplus is monotonic
    assert torch.equal(ids.sort(dim=-1).values, want_ids.sort(dim=-1).values)
    want = _route64(logits, ids, scaling)
    assert torch.isfinite(w).all() and (w > 0).all(), w
    torch.testing.assert_close(w.double(), want, rtol=1e-5, atol=0.0)
    torch.testing.assert_close(w.double().sum(-1), torch.full((T,), scaling, dtype=torch.float64))


def test_sglang_34459_hash_router_weights_finite_at_underflowed_and_overflowing_logits() -> None:
    """sgl-project/sglang#34459 (``hash_topk`` divided the selected scores by their sum with no
    floor, so a hash layer whose table-selected experts all underflowed gave ``0 / 0 = NaN``;
    the CUDA gate's ``log1pf(expf(x))`` overflowed above 88.7): hash routing of logits from -60
    to -100 gives the float64 reference's weights (summing to ``routed_scaling_factor`` also
    where the selected scores sum to ~1e-21: DeepSeek's ``Gate.forward`` divides by the sum
    itself, no ``+ 1e-20``), logits far enough below that every score is 0 in fp32 give finite
    weights (no NaN), and logits of 100..300 give the reference's ``sqrt(x)`` weights."""
    E, k, scaling, vocab = 8, 3, 2.5, 5
    tid2eid = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 0], [1, 3, 5], [2, 4, 6]])
    input_ids = torch.tensor([0, 1, 2, 3, 4])
    cases = {
        "small": torch.linspace(-60.0, -100.0, vocab * E).view(vocab, E),
        "overflow": torch.linspace(100.0, 300.0, vocab * E).view(vocab, E),
    }
    for name, logits in cases.items():
        ids, w = ops.moe_route(logits, None, tid2eid, input_ids, k, scaling)
        assert torch.equal(ids, tid2eid[input_ids]), name
        torch.testing.assert_close(w.double(), _route64(logits, ids, scaling), rtol=1e-5, atol=0.0)
        torch.testing.assert_close(w.double().sum(-1), torch.full((vocab,), scaling, dtype=torch.float64))
    gone = torch.full((vocab, E), -400.0)  # sqrt(softplus(-400)) = exp(-200): 0 in fp32
    _, w = ops.moe_route(gone, None, tid2eid, input_ids, k, scaling)
    assert torch.isfinite(w).all(), w
    assert ((w >= 0) & (w <= scaling)).all(), w


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE is None, reason="needs CUDA, or TRITON_INTERPRET=1, and triton")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sglang_34459_triton_router_equals_the_reference_at_tiny_and_zero_sums(dtype: torch.dtype) -> None:
    """sgl-project/sglang#34459 (the Triton router and the hash kernel each missed a different
    piece of the reference gate's numerics): the Triton ``moe_route`` gives the torch reference's
    ids and weights bit for bit on rows whose selected scores sum to ~1e-21 or underflow to 0, in
    top-k and hash layers, and the tiny-sum rows' weights sum to ``routed_scaling_factor``."""
    from sgl_kernel_v4.ref.moe_router import moe_route as ref_route
    from sgl_kernel_v4.triton.moe_router import moe_route as triton_route

    E, k, scaling = 16, 4, 2.5
    logits = torch.stack(
        [torch.linspace(-95.0, -100.0, E), torch.full((E,), -400.0), torch.linspace(-1.0, 2.0, E)]
    )
    logits = logits.to(dtype)
    tid2eid = torch.stack(
        [torch.randperm(E, generator=torch.Generator().manual_seed(i))[:k] for i in range(3)]
    )
    tok = torch.tensor([0, 1, 2])
    bias = torch.zeros(E)
    for args in ((bias, None, None), (None, tid2eid, tok)):
        want_ids, want_w = ref_route(logits, *args, k, scaling)
        dev = [None if a is None else a.to(DEVICE) for a in args]
        ids, w = triton_route(logits.to(DEVICE), *dev, k, scaling)
        assert torch.equal(ids.cpu(), want_ids) and torch.equal(w.cpu(), want_w)
        assert torch.isfinite(want_w).all()
        assert abs(want_w[0].double().sum().item() - scaling) < 0.05  # bf16: 4 roundings of ~0.6


# ---------------------------------------------------------------------------------------------
# YaRN mscale kept out of compressed layers; compressed KV rotated at source positions
# (AMD-AGI/Primus#928)
# ---------------------------------------------------------------------------------------------


def test_primus_928_yarn_mscale_not_applied_to_the_compress_rope() -> None:
    """AMD-AGI/Primus#928 item 1 (the V4 port folded YaRN's ``mscale`` (``0.1 ln 16 + 1 ~
    1.277`` at the published factor 16) into the compressed layers' attention; DeepSeek's
    reference multiplies neither the softmax scale nor cos/sin by it): the official
    DeepSeek-V4-Flash config (factor 16) gives both rotary tables a magnitude of exactly 1
    (``cos^2 + sin^2 = 1`` at every position), also when the ``rope_scaling`` carries
    DeepSeek-V3's ``mscale`` / ``mscale_all_dim`` fields."""
    raw = json.loads(FLASH.read_text())
    assert raw["rope_scaling"]["factor"] == 16
    v3_fields = copy.deepcopy(raw)
    v3_fields["rope_scaling"].update(mscale=1.0, mscale_all_dim=0.0)
    pos = torch.tensor([0, 1, 4095, 65535, 65536, 300000, 1048575])
    for cfg in (raw, v3_fields):
        rope = RotaryTables(ModelConfig.from_dict(copy.deepcopy(cfg)), "cpu")
        for kind in ("main", "compress"):
            cos, sin = rope.cos_sin(kind, pos)
            mag = (cos.double() ** 2 + sin.double() ** 2).sqrt()
            torch.testing.assert_close(mag, torch.ones_like(mag), rtol=0, atol=1e-6)


@pytest.mark.parametrize("chunk", [1000, 5])
def test_primus_928_compressed_entries_rotated_at_source_positions_under_yarn_16(chunk: int) -> None:
    """AMD-AGI/Primus#928 items 1-3 (compressed KV rotated at pool indices instead of the
    original sequence positions, YaRN ``mscale`` in the softmax scale, the attention output not
    de-rotated before the O projection): with a compress rope of base 50 (large rotations per
    position) at YaRN factor 16, HCA / CSA layers first, every position's log-probabilities of a
    67-token prompt, prefilled whole and in chunks of 5, match transformers'."""
    twin = _twin("yarn16")
    ids = random_ids(67, seed=928)
    ref = hf_logprobs(twin, ids)
    got = Driver(twin, page_size=64).run_chunked(ids, chunk)
    assert _max_err(got, ref) <= TOL


# ---------------------------------------------------------------------------------------------
# The final hyper-head collapse (tenstorrent/tt-metal#44074)
# ---------------------------------------------------------------------------------------------


def test_tt_metal_44074_hc_head_matches_the_reference_formula_in_float64() -> None:
    """tenstorrent/tt-metal#44074 (spells out DeepSeek-V4's ``hc_head``: flatten the ``n``
    streams, ``rsqrt(mean(y^2) + norm_eps)``, ``mixes = (y @ hc_fn^T) * rsqrt``,
    ``pre = sigmoid(mixes * hc_scale + hc_base) + hc_eps``, ``sum_i pre_i * y_i``): the
    runtime's ``HyperHead`` on streams of very different magnitudes equals that formula in
    float64."""
    g = torch.Generator().manual_seed(44074)
    n, D, T, eps, norm_eps = 4, 64, 5, 1e-6, 1e-6
    head = HyperHead(n, D, eps, norm_eps, "cpu")
    with torch.no_grad():
        head.hc_fn.copy_(torch.randn(n, n * D, generator=g) * 0.1)
        head.hc_base.copy_(torch.randn(n, generator=g))
        head.hc_scale.copy_(torch.tensor([0.7]))
    x = torch.randn(T, n, D, generator=g) * torch.tensor([1.0, 30.0, 0.01, 5.0]).view(1, n, 1)
    y = x.double().reshape(T, n * D)
    rs = torch.rsqrt(y.square().mean(-1, keepdim=True) + norm_eps)
    mixes = (y @ head.hc_fn.double().t()) * rs
    pre = torch.sigmoid(mixes * head.hc_scale.double() + head.hc_base.double()) + eps
    want = (pre.unsqueeze(-1) * x.double()).sum(dim=1)
    got = head(x)
    assert got.dtype == torch.float32 and got.shape == (T, D)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The shared expert clamps as the routed ones do (lablup/mlxcel#550)
# ---------------------------------------------------------------------------------------------


def test_mlxcel_550_shared_expert_clamps_gate_from_above_and_up_on_both_sides() -> None:
    """lablup/mlxcel#550 (the shared expert must clamp its SwiGLU pre-activations exactly as the
    routed experts do: ``gate`` from above at ``swiglu_limit``, ``up`` to ``[-limit, limit]``):
    with weights that push gate and up far past +-10 in both directions, the shared expert
    equals DeepSeek's ``Expert.forward`` in float64, and differs from the unclamped SwiGLU."""
    g = torch.Generator().manual_seed(550)
    D, inter, limit = 32, 16, 10.0
    mlp = SharedMLP(D, inter, effective_swiglu_limit(limit), torch.float32, "cpu")
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(torch.randn(inter, D, generator=g) * 4)
        mlp.up_proj.weight.copy_(torch.randn(inter, D, generator=g) * 4)
        mlp.down_proj.weight.copy_(torch.randn(D, inter, generator=g) * 0.1)
    x = torch.randn(7, D, generator=g)
    gate = x.double() @ mlp.gate_proj.weight.double().t()
    up = x.double() @ mlp.up_proj.weight.double().t()
    assert (gate > limit).any() and (gate < -limit).any() and (up > limit).any() and (up < -limit).any()
    h = F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)
    want = h @ mlp.down_proj.weight.double().t()
    got = mlp(x)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    unclamped = (F.silu(gate) * up) @ mlp.down_proj.weight.double().t()
    assert (got.double() - unclamped).abs().max() > 1.0


# ---------------------------------------------------------------------------------------------
# A prompt prefilled alone or beside others (sgl-project/sglang#37292)
# ---------------------------------------------------------------------------------------------


def test_sglang_37292_prompt_prefilled_alone_or_beside_two_others_gives_the_same_logprobs() -> None:
    """sgl-project/sglang#37292 (DeepSeek-V4 picked split-K counts and tiles from the batch's token
    count, so a prompt prefilled alongside two others differed from the same prompt prefilled
    alone in every token's logprob by ~1e-2): one 45-token prompt prefilled alone and in one
    extend batch beside a 30- and a 61-token prompt gives the same log-probabilities (within
    1e-5), and both match transformers'."""
    twin = _twin("small_rates")
    ids = random_ids(45, seed=37292)
    others = [random_ids(30, seed=1), random_ids(61, seed=2)]
    drv = Driver(twin, page_size=64)
    alone = drv.run_chunked(ids, 1000)
    slots = [drv.new_req() for _ in range(3)]
    outs = drv.step([(slots[0], others[0]), (slots[1], ids), (slots[2], others[1])])
    for s in slots:
        drv.release(s)
    assert _max_err(outs[1], alone) <= 1e-5
    assert _max_err(alone, hf_logprobs(twin, ids)) <= TOL


# ---------------------------------------------------------------------------------------------
# One-token extends over long compressed histories, many requests (vllm-project/vllm#51252)
# ---------------------------------------------------------------------------------------------


def test_vllm_51252_batch_of_one_token_extends_over_compressed_histories_matches_hf() -> None:
    """vllm-project/vllm#51252 (the sparse-indexer prefill chunker budgeted compressed lengths
    against a buffer ``compress_ratio`` times smaller, so in the chunked-prefill / prefix-hit shape
    -- many requests with ``query_len = 1`` over long compressed histories -- tail rows of the
    gathered indexer keys were left uninitialised and the top-k read garbage): six requests whose
    histories (41..121 tokens) hold 10..30 CSA entries (top-k 4) each take one more token in ONE
    batch; every request's last-position log-probabilities match transformers' on its whole
    sequence."""
    twin = _twin("small_rates")
    drv = Driver(twin, page_size=64)
    seqs = [random_ids(n, seed=n) for n in (41, 58, 77, 90, 103, 121)]
    slots = [drv.new_req() for _ in seqs]
    drv.step([(s, ids[:-1]) for s, ids in zip(slots, seqs)])
    outs = drv.step([(s, ids[-1:]) for s, ids in zip(slots, seqs)])
    for s in slots:
        drv.release(s)
    for ids, out in zip(seqs, outs):
        assert out.shape[0] == 1
        assert _max_err(out[0], hf_logprobs(twin, ids)[-1]) <= TOL, len(ids)


# ---------------------------------------------------------------------------------------------
# A decode batch whose rows sit at different compressor phases (lvyufeng/PocketLLM#239)
# ---------------------------------------------------------------------------------------------


def test_pocketllm_239_decode_rows_at_different_compressor_phases_use_their_own_positions() -> None:
    """lvyufeng/PocketLLM#239 (a batched DeepSeek-V4 decode must read every scalar from the row's
    own position: rope, the compressor's ``position % ratio`` phase, the sliding-window ring slot;
    a shared start position corrupts all but one row): eight requests at lengths covering every
    phase of the CSA (4) and HCA (8) compressors and the window (8) decode six tokens together
    (teacher-forced); each step's log-probabilities of each row match transformers'."""
    twin = _twin("small_rates")
    drv = Driver(twin, page_size=64)
    lens = [16, 17, 18, 19, 20, 21, 22, 23]
    steps = 6
    seqs = [random_ids(n + steps, seed=239 + n) for n in lens]
    slots = [drv.new_req() for _ in seqs]
    drv.step([(s, ids[:n]) for s, ids, n in zip(slots, seqs, lens)])
    got: list[list[torch.Tensor]] = [[] for _ in seqs]
    for j in range(steps):
        outs = drv.step([(s, [ids[n + j]]) for s, ids, n in zip(slots, seqs, lens)])
        for i, o in enumerate(outs):
            got[i].append(o[0])
    for s in slots:
        drv.release(s)
    for ids, n, rows in zip(seqs, lens, got):
        ref = hf_logprobs(twin, ids)[n:]
        assert _max_err(torch.stack(rows), ref) <= TOL, n


# ---------------------------------------------------------------------------------------------
# The attention sink only enlarges the softmax denominator (anthony-chaudhary/fak#12636)
# ---------------------------------------------------------------------------------------------


def test_fak_12636_attention_sink_only_enters_the_softmax_denominator() -> None:
    """anthony-chaudhary/fak#12636 (DeepSeek-V4's attention contract: "the attention sink
    contributes only to the softmax denominator" -- it has a logit but no value row): shared-KV
    attention over gathered keys with per-head sinks (one very negative, one dominant, one
    moderate) equals ``sum_k exp(l_k) v_k / (sum_k exp(l_k) + exp(sink_h))`` in float64, masked
    keys take no part, and a query with no valid key gets zeros."""
    from sgl_kernel_v4.ref.attention import attend_gathered

    g = torch.Generator().manual_seed(12636)
    T, H, K, D, scale = 4, 3, 6, 16, 16**-0.5
    q = torch.randn(T, H, D, generator=g) * 2
    k = torch.randn(T, K, D, generator=g)
    valid = torch.rand(T, K, generator=g) > 0.3
    valid[0] = True
    valid[3] = False
    sinks = torch.tensor([-30.0, 8.0, 0.5])
    got = attend_gathered(q, k, valid, sinks, scale)
    logits = torch.einsum("thd,tkd->thk", q.double(), k.double()) * scale
    e = torch.where(valid[:, None, :], logits.exp(), torch.zeros((), dtype=torch.float64))
    den = e.sum(-1, keepdim=True) + sinks.double().exp().view(1, H, 1)
    want = torch.einsum("thk,tkd->thd", e / den, k.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    assert torch.equal(got[3], torch.zeros(H, D))
    # the dominant sink (8.0) drains head 1: its output is far smaller than head 0's
    assert got[0, 1].norm() < 0.2 * got[0, 0].norm()


# ---------------------------------------------------------------------------------------------
# The indexer's ReLU acts per head, before the head weights (1CatAI/1Cat-vLLM#250)
# ---------------------------------------------------------------------------------------------


def test_1cat_vllm_250_indexer_relu_is_applied_per_head_before_the_weighted_sum() -> None:
    """1CatAI/1Cat-vLLM#250 (a DeepSeek-V4 indexer port lost the per-head ReLU; the official
    scoring is ``I[t, s] = sum_h w[t, h] * relu(scale * q[t, h] . k[s])``): on candidates whose
    per-head dot products have mixed signs and head weights of both signs, the indexer scores
    equal that float64 formula, differ from the ReLU-after-sum and no-ReLU variants, and padding
    candidates score ``-inf``."""
    from sgl_kernel_v4.ref.attention import indexer_scores

    g = torch.Generator().manual_seed(250)
    T, Hi, di, N, C = 3, 8, 32, 20, 7
    q = torch.randn(T, Hi, di, generator=g)
    w = torch.randn(T, Hi, generator=g)
    pool = torch.randn(N, di, generator=g)
    cand = torch.randint(0, N, (T, C), generator=g)
    cand[2, -2:] = -1
    scale = di**-0.5
    got = indexer_scores(q, w, pool, cand, scale)
    keys = pool.double()[cand.clamp(min=0)]
    dots = torch.einsum("thd,tcd->thc", q.double(), keys) * scale
    assert (dots > 0).any() and (dots < 0).any()
    want = torch.einsum("thc,th->tc", dots.relu(), w.double())
    ok = cand >= 0
    torch.testing.assert_close(got[ok].double(), want[ok], rtol=1e-6, atol=1e-6)
    assert torch.isinf(got[~ok]).all() and (got[~ok] < 0).all()
    no_relu = torch.einsum("thc,th->tc", dots, w.double())
    relu_after = no_relu.relu()
    assert (got[ok].double() - no_relu[ok]).abs().max() > 0.1
    assert (got[ok].double() - relu_after[ok]).abs().max() > 0.1


# ---------------------------------------------------------------------------------------------
# Indexer keys written and read across many small pages (vllm-project/vllm#52109)
# ---------------------------------------------------------------------------------------------


def test_vllm_52109_indexer_keys_across_many_small_pages_retrieve_as_hf() -> None:
    """vllm-project/vllm#52109 (DeepSeek-V4's compressed indexer keys were written to the paged
    cache in one layout and read back in another once a prompt spanned enough blocks, so the
    indexer ranked the wrong entries: silent retrieval corruption past a few thousand tokens):
    with pages of 16 positions (4 CSA entries each), a 260-token prompt spreads its 65 indexer
    keys over 17 pages; every position's log-probabilities, prefilled whole and in chunks of 23,
    match transformers'."""
    twin = _twin("small_rates")
    ids = random_ids(260, seed=52109)
    ref = hf_logprobs(twin, ids)
    for chunk in (1000, 23):
        got = Driver(twin, page_size=16, num_block_pages=64).run_chunked(ids, chunk)
        assert _max_err(got, ref) <= TOL, chunk


# ---------------------------------------------------------------------------------------------
# Multi-token verify-shaped extends (GDzhu01/vllm-ascend-deepseekv4#132, antirez/ds4#750)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_dsv4_132_multi_token_extends_keep_the_overlap_compressor_state() -> None:
    """GDzhu01/vllm-ascend-deepseekv4#132 (the CSA overlap compressor saved the wrong block's state
    when one batched step of several tokens per request -- the speculative verifier's shape --
    crossed a ratio-4 boundary, so the next entry pooled stale halves): eight requests at every
    CSA / HCA phase extend by 3, 2, 3, 2 ... tokens per step in ONE batch for four steps; every
    new position's log-probabilities match transformers'."""
    twin = _twin("small_rates")
    drv = Driver(twin, page_size=64)
    lens = [16, 17, 18, 19, 20, 21, 22, 23]
    widths = [3, 2, 3, 2, 3, 2, 3, 2]
    steps = 4
    seqs = [random_ids(n + w * steps, seed=132 + n) for n, w in zip(lens, widths)]
    slots = [drv.new_req() for _ in seqs]
    drv.step([(s, ids[:n]) for s, ids, n in zip(slots, seqs, lens)])
    got: list[list[torch.Tensor]] = [[] for _ in seqs]
    for j in range(steps):
        work = [(s, ids[n + j * w : n + (j + 1) * w]) for s, ids, n, w in zip(slots, seqs, lens, widths)]
        for i, o in enumerate(drv.step(work)):
            got[i].append(o)
    for s in slots:
        drv.release(s)
    for ids, n, rows in zip(seqs, lens, got):
        assert _max_err(torch.cat(rows), hf_logprobs(twin, ids)[n:]) <= TOL, n


def test_ds4_750_two_token_verify_step_equals_two_single_token_steps() -> None:
    """antirez/ds4#750 (DeepSeek-V4's batched two-token verifier differed from the exact
    one-token path, so a partially accepted draft emitted a corrupt row -- token 0, BOS): for
    requests at every CSA / HCA / window phase, the log-probabilities of one 2-token step equal
    those of the same two tokens decoded one at a time (within 1e-5), and both match
    transformers', argmax included (no row turns into a stray token such as id 0)."""
    twin = _twin("small_rates")
    lens = list(range(24, 32))
    seqs = [random_ids(n + 2, seed=750 + n) for n in lens]
    pair, single = Driver(twin, page_size=64), Driver(twin, page_size=64)
    ps = [pair.new_req() for _ in seqs]
    ss = [single.new_req() for _ in seqs]
    pair.step([(s, ids[:n]) for s, ids, n in zip(ps, seqs, lens)])
    single.step([(s, ids[:n]) for s, ids, n in zip(ss, seqs, lens)])
    two = pair.step([(s, ids[n : n + 2]) for s, ids, n in zip(ps, seqs, lens)])
    one_a = single.step([(s, ids[n : n + 1]) for s, ids, n in zip(ss, seqs, lens)])
    one_b = single.step([(s, ids[n + 1 : n + 2]) for s, ids, n in zip(ss, seqs, lens)])
    for ids, n, t, a, b in zip(seqs, lens, two, one_a, one_b):
        seq = torch.cat([a, b])
        assert _max_err(t, seq) <= 1e-5, n
        ref = hf_logprobs(twin, ids)[n:]
        assert _max_err(t, ref) <= TOL, n
        assert torch.equal(t.argmax(-1), ref.argmax(-1)), n
