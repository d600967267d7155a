"""A fourteenth set of public reports, model semantics: reports against HF transformers'
DeepSeek-V4, DeepSeek's reference ``inference/model.py`` and other DeepSeek-V4 ports that changed
or clarified what the model computes, replayed against this runtime (each test names its report).

Oracles: HF transformers' ``DeepseekV4ForCausalLM`` (fp32, tiny random weights, one cache-free
forward over the whole sequence, see ``dsv4_testutil``) and float64 references written here from
the published formulas. The runtime side is the model run through :class:`dsv4_testutil.Driver`
and its layers (``layers/mhc.py``, ``layers/moe.py``, ``layers/rotary_embedding.py``) called
directly.

Covered: the mHC residual mix consumed as ``combᵀ · residual`` (sum over the first stream axis)
with a non-symmetric Sinkhorn output; the SwiGLU limit on the shared expert as well as the routed
ones, with the asymmetric clamp (gate bounded above only, up on both sides); the correction bias
steering top-k selection only, weights from the unbiased scores; hash-routed layers weighting the
``tid2eid`` experts by their own sqrt-softplus scores; the CSA indexer never selecting a compressed
entry past the query (prefix logits independent of the suffix); YaRN applied to the compress rope
only, pure sliding layers keeping the plain main rope, with no YaRN mscale; decode before any
compressed entry exists; attention sinks kept fp32 and large enough to dominate the softmax; the
grouped output projection with more groups than heads.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from dsv4_testutil import CONFIGS, HCA, SL, Driver, Twin, hf_greedy, hf_logprobs, make_twin, random_ids
from sgl_kernel_v4 import ops
from sglang_v4.layers.mhc import HyperConnection
from sglang_v4.layers.moe import Experts, Router, SharedMLP

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides
SELF_TOL = 1e-5  # max |dlogprob| between two runtime runs of the same prefix (fp32)


@functools.cache
def _twin(name: str) -> Twin:
    return make_twin(name, seed=14)


def _max_err(ours: torch.Tensor, want: torch.Tensor) -> float:
    return (ours - want).abs().max().item()


def _sqrtsoftplus64(logits: torch.Tensor) -> torch.Tensor:
    return F.softplus(logits.double()).sqrt()


# ---------------------------------------------------------------------------------------------
# mHC: the residual mix is comb^T . residual (NVIDIA/Megatron-LM#4957)
# ---------------------------------------------------------------------------------------------


def test_megatron_4957_mhc_residual_mix_sums_over_the_first_comb_axis() -> None:
    """NVIDIA/Megatron-LM#4957 (also huggingface/transformers#46172: DeepSeek-V4 hyper-connection
    mixed the residual streams with ``comb · residual`` where the reference ``model.py`` uses
    ``combᵀ · residual``; Sinkhorn output is doubly stochastic but not symmetric, so the direction
    changes the model): the runtime's ``HyperConnection.pre`` + ``hc_post`` on 4 streams, with a
    strongly non-symmetric ``comb``, equal a float64 reference written from the formula
    ``out[k] = post[k] * block_out + sum_j comb[j, k] * residual[j]``, and not its transpose."""
    g = torch.Generator().manual_seed(4957)
    T, n, D = 5, 4, 32
    hc = HyperConnection(n, D, iters=20, eps=1e-6, norm_eps=1e-6, device="cpu")
    with torch.no_grad():
        hc.fn.copy_(torch.randn(hc.fn.shape, generator=g) / math.sqrt(n * D))
        base = torch.randn(hc.base.shape, generator=g) * 0.3
        base[2 * n :] = torch.randn(n * n, generator=g) * 3.0  # sharp, asymmetric comb logits
        hc.base.copy_(base)
        hc.scale.copy_(torch.tensor([1.0, 1.0, 1.0]))
    x = torch.randn(T, n, D, generator=g)
    block_out = torch.randn(T, D, generator=g)
    _, post, comb = hc.pre(x)
    # doubly stochastic, and far from symmetric: the test distinguishes the two directions
    assert torch.allclose(comb.sum(-1), torch.ones(T, n), atol=1e-4)
    assert torch.allclose(comb.sum(-2), torch.ones(T, n), atol=1e-4)
    assert (comb - comb.transpose(-1, -2)).abs().max().item() > 0.1
    got = ops.hc_post(block_out, x, post, comb)
    want = post.double().unsqueeze(-1) * block_out.double().unsqueeze(1) + torch.einsum(
        "tjk,tjd->tkd", comb.double(), x.double()
    )
    wrong = post.double().unsqueeze(-1) * block_out.double().unsqueeze(1) + torch.einsum(
        "tkj,tjd->tkd", comb.double(), x.double()
    )
    assert (got.double() - want).abs().max().item() <= 1e-5
    assert (got.double() - wrong).abs().max().item() > 1e-2


# ---------------------------------------------------------------------------------------------
# SwiGLU limit: shared expert too, gate clamped above only (Blaizzy/mlx-vlm#1469,
# hw-native-sys/pypto-lib#470, anthony-chaudhary/fak#4837)
# ---------------------------------------------------------------------------------------------


def _swiglu64(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    """``silu(min(gate, limit)) * clamp(up, -limit, limit)`` in float64 (reference ``Expert.forward``)."""
    gate, up = gate.double().clamp(max=limit), up.double().clamp(-limit, limit)
    return F.silu(gate) * up


def test_mlx_vlm_1469_pypto_470_shared_expert_applies_swiglu_limit() -> None:
    """Blaizzy/mlx-vlm#1469 and hw-native-sys/pypto-lib#470 (DeepSeek-V4 built the shared expert
    without ``swiglu_limit``, so only the routed experts clamped; the reference ``MoE`` gives the
    shared expert the same limit): the runtime's shared expert, with pre-activations far outside
    ``±limit``, equals the float64 clamped SwiGLU and differs from the unclamped one."""
    g = torch.Generator().manual_seed(1469)
    D, inter, limit = 32, 16, 0.5
    mlp = SharedMLP(D, inter, limit, torch.float32, "cpu")
    with torch.no_grad():
        for lin in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=g))
    x = torch.randn(6, D, generator=g)
    gate, up = x.double() @ mlp.gate_proj.weight.double().t(), x.double() @ mlp.up_proj.weight.double().t()
    assert gate.max() > 4 * limit and up.abs().max() > 4 * limit  # the clamp is exercised
    want = _swiglu64(gate, up, limit) @ mlp.down_proj.weight.double().t()
    unclamped = (F.silu(gate) * up) @ mlp.down_proj.weight.double().t()
    got = mlp(x).double()
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
    assert (got - unclamped).abs().max().item() > 1.0


def test_fak_4837_swiglu_limit_is_asymmetric_gate_upper_only() -> None:
    """anthony-chaudhary/fak#4837 (the official ``Expert.forward`` clamps ``up`` to
    ``[-limit, limit]`` but ``gate`` only from above; a symmetric gate clamp differs wherever a
    gate pre-activation is below ``-limit``): routed experts and the shared expert, fed gate
    pre-activations well below ``-limit`` and above ``+limit``, equal the float64 asymmetric clamp
    and not the symmetric one."""
    g = torch.Generator().manual_seed(4837)
    E, D, inter, limit = 3, 32, 16, 0.25
    experts = Experts(E, D, inter, limit, torch.float32, "cpu")
    with torch.no_grad():
        experts.gate_up_proj.copy_(torch.randn(experts.gate_up_proj.shape, generator=g))
        experts.down_proj.copy_(torch.randn(experts.down_proj.shape, generator=g) * 0.2)
    T = 8
    x = torch.randn(T, D, generator=g)
    ids = torch.stack([torch.randperm(E, generator=g)[:2] for _ in range(T)])
    w = torch.rand(T, 2, generator=g)
    want = torch.zeros(T, D, dtype=torch.float64)
    sym = torch.zeros(T, D, dtype=torch.float64)
    low = False
    for t in range(T):
        for j in range(2):
            e = int(ids[t, j])
            gu = experts.gate_up_proj[e].double() @ x[t].double()
            gate, up = gu[:inter], gu[inter:]
            low |= bool((gate < -2 * limit).any())
            h = _swiglu64(gate, up, limit)
            hs = F.silu(gate.clamp(-limit, limit)) * up.clamp(-limit, limit)
            want[t] += w[t, j].double() * (experts.down_proj[e].double() @ h)
            sym[t] += w[t, j].double() * (experts.down_proj[e].double() @ hs)
    assert low  # gate values below -limit exist, where the two clamps differ
    got = experts(x, ids, w).double()
    assert (got - want).abs().max().item() <= 1e-5
    assert (got - sym).abs().max().item() > 1e-3
    # the shared expert: the same asymmetric rule
    gu = torch.randn(T, 2 * inter, generator=g) * 3
    got_s = ops.swiglu_clamped(gu, limit).double()
    assert (got_s - _swiglu64(gu[:, :inter], gu[:, inter:], limit)).abs().max().item() <= 1e-6


@pytest.fixture(scope="module")
def tight_limit_twin() -> Twin:
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), swiglu_limit=0.05)
    return make_twin("tight_swiglu_limit", seed=1469, cfg=cfg)


def test_mlx_vlm_1469_tight_swiglu_limit_matches_hf_end_to_end(tight_limit_twin: Twin) -> None:
    """Blaizzy/mlx-vlm#1469 end to end: with ``swiglu_limit = 0.05`` (every expert, routed and
    shared, clamps most of its pre-activations) the runtime gives HF's log-probabilities on a
    96-token prompt."""
    ids = random_ids(96, seed=1469)
    got = Driver(tight_limit_twin).run_chunked(ids, 96)
    assert _max_err(got, hf_logprobs(tight_limit_twin, ids)) <= TOL


# ---------------------------------------------------------------------------------------------
# routing: bias steers selection only (flashinfer-ai/flashinfer#5211); hash layers weight the
# table's experts by their own scores (anthony-chaudhary/fak#4850)
# ---------------------------------------------------------------------------------------------


def test_flashinfer_5211_correction_bias_selects_but_weights_are_unbiased() -> None:
    """flashinfer-ai/flashinfer#5211 (DeepSeek-V4 ``sqrtsoftplus`` routing: the correction bias
    steers the top-k selection only; the weights are the un-biased scores of the chosen experts,
    renormalised and scaled by ``routed_scaling_factor``): a bias that forces a low-scoring expert
    into every token's top-2 gives the float64 reference ids and weights; biased weights differ."""
    g = torch.Generator().manual_seed(5211)
    T, D, E, k, scaling = 7, 16, 6, 2, 1.5
    r = Router(D, E, k, False, 100, scaling, torch.float32, "cpu")
    with torch.no_grad():
        r.weight.copy_(torch.randn(E, D, generator=g))
        bias = torch.zeros(E)
        bias[3] = 50.0  # always selected, whatever its score
        r.e_score_correction_bias.copy_(bias)
    x = torch.randn(T, D, generator=g)
    scores = _sqrtsoftplus64(x.double() @ r.weight.double().t())
    sel = torch.topk(scores + bias.double(), k, dim=-1).indices
    assert (sel == 3).any(-1).all()
    assert (scores.argmax(-1) != 3).any()  # the bias changed some token's selection
    want_w = scores.gather(1, sel)
    want_w = want_w / want_w.sum(-1, keepdim=True) * scaling
    ids, w = r(x, torch.zeros(T, dtype=torch.long))
    order = ids.argsort(-1)
    got_ids, got_w = ids.gather(1, order), w.gather(1, order).double()
    want_order = sel.argsort(-1)
    assert torch.equal(got_ids, sel.gather(1, want_order))
    assert (got_w - want_w.gather(1, want_order)).abs().max().item() <= 1e-6
    biased = (scores + bias.double()).gather(1, sel)
    biased = biased / biased.sum(-1, keepdim=True) * scaling
    assert (got_w - biased.gather(1, want_order)).abs().max().item() > 0.1


def test_fak_4850_hash_layer_weights_are_the_table_experts_own_scores() -> None:
    """anthony-chaudhary/fak#4850 (DeepSeek-V4 hash-routed layers: experts come from
    ``tid2eid[token]``; their weights are the learned gate's sqrt-softplus scores gathered at those
    ids, renormalised and scaled; no score top-k replaces the table): a table that picks each
    token's lowest-scoring experts gives exactly those ids, in the table's order, with the float64
    reference weights."""
    g = torch.Generator().manual_seed(4850)
    T, D, E, k, vocab, scaling = 6, 16, 8, 3, 50, 2.5
    r = Router(D, E, k, True, vocab, scaling, torch.float32, "cpu")
    with torch.no_grad():
        r.weight.copy_(torch.randn(E, D, generator=g))
    x = torch.randn(T, D, generator=g)
    input_ids = torch.arange(T) * 7 + 1
    scores = _sqrtsoftplus64(x.double() @ r.weight.double().t())
    table = torch.zeros(vocab, k, dtype=torch.long)
    for t in range(T):
        table[input_ids[t]] = scores[t].argsort()[:k].flip(0)  # lowest scores, in a chosen order
    with torch.no_grad():
        r.tid2eid.copy_(table)
    ids, w = r(x, input_ids)
    assert torch.equal(ids, table[input_ids])
    want = scores.gather(1, table[input_ids])
    want = want / want.sum(-1, keepdim=True) * scaling
    assert (w.double() - want).abs().max().item() <= 1e-6


def test_flashinfer_5211_large_correction_bias_matches_hf_end_to_end() -> None:
    """flashinfer-ai/flashinfer#5211 end to end: with a correction bias of +/-5 on the score-routed
    layers (so the bias, not the scores, decides most selections) the runtime gives HF's
    log-probabilities on a 64-token prompt."""
    twin = _twin("sliding_first")
    state = {k: v.clone() for k, v in twin.state.items()}
    g = torch.Generator().manual_seed(52110)
    n = 0
    for key in state:
        if key.endswith("e_score_correction_bias"):
            state[key] = (torch.randint(0, 2, state[key].shape, generator=g) * 10 - 5).float()
            n += 1
    assert n > 0
    hf = copy.deepcopy(twin.hf)
    hf.load_state_dict(state)
    ours = copy.deepcopy(twin.ours)
    ours.load_state_dict(state, strict=True)
    biased = Twin(twin.name, twin.cfg, twin.mc, hf, ours, state)
    ids = random_ids(64, seed=5211)
    got = Driver(biased).run_chunked(ids, 64)
    want = hf_logprobs(biased, ids)
    assert _max_err(got, want) <= TOL
    assert _max_err(want, hf_logprobs(twin, ids)) > 1e-2  # the bias changed the model


# ---------------------------------------------------------------------------------------------
# the CSA indexer is causal (huggingface/transformers#45820)
# ---------------------------------------------------------------------------------------------


def test_transformers_45820_indexer_never_selects_a_future_compressed_entry() -> None:
    """huggingface/transformers#45820 (DeepSeek-V4 CSA lightning indexer: query ``t`` could pick
    compressed entries not yet complete at ``t``; the reference ``model.py`` only scores entries
    ``< (t + 1) // ratio``): with ``index_topk`` = 8 far below the 50 CSA entries of a 200-token
    sequence, two sequences sharing a 101-token prefix get identical log-probabilities at every
    prefix position, and each gives HF's."""
    twin = _twin("sliding_first")
    prefix = random_ids(101, seed=45820)
    a, b = prefix + random_ids(99, seed=45821), prefix + random_ids(99, seed=45822)
    drv = Driver(twin)
    got_a, got_b = drv.run_chunked(a, 200), drv.run_chunked(b, 200)
    assert _max_err(got_a[:101], got_b[:101]) <= SELF_TOL
    assert _max_err(got_a[101:], got_b[101:]) > 1e-2
    assert _max_err(got_a, hf_logprobs(twin, a)) <= TOL
    assert _max_err(got_b, hf_logprobs(twin, b)) <= TOL


# ---------------------------------------------------------------------------------------------
# YaRN on the compress rope only (sgl-project/sglang#30920, NVIDIA-NeMo/Automodel#2103)
# ---------------------------------------------------------------------------------------------

_YARN = {
    "rope_type": "yarn",
    "factor": 16.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 32,
    "beta_slow": 1,
}


@pytest.fixture(scope="module")
def strong_yarn_twin() -> Twin:
    cfg = dict(
        copy.deepcopy(CONFIGS["sliding_first"]),
        layer_types=[SL, HCA, SL, HCA],
        mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        rope_parameters=dict(_YARN),
    )
    return make_twin("strong_yarn", seed=30920, cfg=cfg)


def test_sglang_30920_sliding_layers_keep_plain_rope_compress_layers_get_yarn(strong_yarn_twin: Twin) -> None:
    """sgl-project/sglang#30920 (pure sliding layers, ``compress_ratio == 0``, got the model-level
    YaRN; the reference gives them the plain ``rope_theta`` rope) and NVIDIA-NeMo/Automodel#2103
    (the compress rope, ``compress_rope_theta``, must carry YaRN): the runtime's ``main`` table is
    the float64 plain rope at ``rope_theta`` with no scaling, its ``compress`` table is not the
    plain rope at ``compress_rope_theta`` (YaRN with factor 16 and a 32-token original window
    moves its low frequencies), and the model gives HF's log-probabilities on a 200-token prompt
    with both kinds of layer."""
    from sglang_v4.layers.rotary_embedding import RotaryTables

    twin = strong_yarn_twin
    hf_cfg = twin.mc.hf
    tables = RotaryTables(twin.mc, "cpu")
    pos = torch.tensor([0, 1, 31, 32, 100, 199])
    rdim = int(hf_cfg.head_dim * hf_cfg.partial_rotary_factor)

    def plain(theta: float) -> tuple[torch.Tensor, torch.Tensor]:
        inv = 1.0 / (theta ** (torch.arange(0, rdim, 2, dtype=torch.float64) / rdim))
        f = pos.double().unsqueeze(-1) * inv
        return f.cos(), f.sin()

    cos, sin = tables.cos_sin("main", pos)
    pc, ps = plain(float(hf_cfg.rope_theta))
    assert (cos.double() - pc).abs().max().item() <= 1e-5 and (sin.double() - ps).abs().max().item() <= 1e-5
    ccos, csin = tables.cos_sin("compress", pos)
    cc, _ = plain(float(hf_cfg.compress_rope_theta))
    assert (ccos.double() - cc).abs().max().item() > 1e-2
    # AMD-AGI/Primus#930: no YaRN mscale on the compress rope (the rotation keeps unit norm)
    assert ((ccos.double() ** 2 + csin.double() ** 2) - 1).abs().max().item() <= 1e-5
    ids = random_ids(200, seed=30920)
    got = Driver(twin).run_chunked(ids, 200)
    assert _max_err(got, hf_logprobs(twin, ids)) <= TOL


# ---------------------------------------------------------------------------------------------
# decode before any compressed entry exists (AI-Hypercomputer/maxtext#4337)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt_len", [1, 2, 3])
def test_maxtext_4337_decode_with_no_compressed_entry_yet(prompt_len: int) -> None:
    """AI-Hypercomputer/maxtext#4337 (DeepSeek-V4 compressed attention: a decode step with
    ``seq_len == 1`` or no compressed entry yet returned no mask and broke downstream; the step
    must attend to the sliding window alone): 1- to 3-token prompts on an HCA-first model decode
    greedily for 6 tokens (crossing the first C4 entry at 4 tokens) following HF's greedy tokens."""
    twin = _twin("hca_first_yarn")
    prompt = random_ids(prompt_len, seed=4337 + prompt_len)
    assert Driver(twin).greedy(prompt, 6) == hf_greedy(twin, prompt, 6)


# ---------------------------------------------------------------------------------------------
# attention sinks: fp32, able to dominate the softmax (Avarok-Cybersecurity/atlas#341)
# ---------------------------------------------------------------------------------------------


def test_atlas_341_attention_sinks_are_fp32_and_may_dominate() -> None:
    """Avarok-Cybersecurity/atlas#341 (DeepSeek-V4's ``attn_sink`` ships as fp32 ``[n_heads]``; a
    port read it as bf16 and turned some heads' sinks into large values that zeroed their output):
    a bf16 runtime model keeps every layer's ``sinks`` in fp32, and with sinks of -8 .. +8 (a +8
    sink takes nearly all of a head's softmax mass) the fp32 runtime gives HF's
    log-probabilities on a 64-token prompt, which differ from those of the zero-sink model."""
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    twin = _twin("hca_first_yarn")
    meta = DeepseekV4ForCausalLM(twin.mc, dtype=torch.bfloat16, device="meta")
    sinks = [m.sinks for m in meta.modules() if hasattr(m, "sinks")]
    assert sinks and all(t.dtype == torch.float32 for t in sinks)
    state = {k: v.clone() for k, v in twin.state.items()}
    n = 0
    for key in state:
        if key.endswith("self_attn.sinks"):
            h = state[key].numel()
            state[key] = torch.linspace(-8.0, 8.0, h) if h > 1 else torch.tensor([8.0])
            n += 1
    assert n == twin.mc.hf.num_hidden_layers
    hf = copy.deepcopy(twin.hf)
    hf.load_state_dict(state)
    ours = copy.deepcopy(twin.ours)
    ours.load_state_dict(state, strict=True)
    sunk = Twin(twin.name, twin.cfg, twin.mc, hf, ours, state)
    ids = random_ids(64, seed=341)
    want = hf_logprobs(sunk, ids)
    assert _max_err(Driver(sunk).run_chunked(ids, 64), want) <= TOL
    assert _max_err(want, hf_logprobs(twin, ids)) > 1e-2


# ---------------------------------------------------------------------------------------------
# grouped output projection with o_groups != 2 (antirez/ds4#511)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def four_group_twin() -> Twin:
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), num_attention_heads=4, o_groups=4, o_lora_rank=8)
    return make_twin("o_groups_4", seed=511, cfg=cfg)


def test_ds4_511_grouped_output_projection_follows_o_groups(four_group_twin: Twin) -> None:
    """antirez/ds4#511 (DeepSeek-V4-Pro uses 16 output groups where Flash uses 8; a port hard-coded
    8, mis-splitting ``wo_a``): with 4 heads in ``o_groups = 4`` groups (each group its own
    ``o_lora_rank = 8`` projection) the runtime gives HF's log-probabilities on a 150-token
    prompt."""
    ids = random_ids(150, seed=511)
    got = Driver(four_group_twin).run_chunked(ids, 150)
    assert _max_err(got, hf_logprobs(four_group_twin, ids)) <= TOL
