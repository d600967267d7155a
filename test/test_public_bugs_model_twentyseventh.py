"""A twenty-seventh set of public reports on the DeepSeek-V4 model math on the CPU path: the
``sqrtsoftplus`` top-k router (selection by ``score + bias``, weights from the unbiased scores),
hash routing by ``tid2eid[input_ids]``, the clamped SwiGLU of the experts, the legacy
``compress_ratios`` / ``num_hash_layers`` / ``compress_rope_theta`` config fields, malformed ratio
schedules, decode steps whose compressor phase follows the runtime position, FP4 expert decoding
with the clamp on every expert path, and sink attention for one query vs many (each test names its
report).

Oracles: float64 references written here from DeepSeek's published ``Gate.forward`` /
``Expert.forward`` formulas and the OCP E2M1 / E8M0 bit layouts; transformers' ``DeepseekV4ForCausalLM`` on the same weights (one
no-cache forward per sequence, fp32 on the CPU, within 1e-3 as test_model_parity); the reports'
stated rules (which ratios mean which layer type, a malformed schedule refused).
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from dsv4_testutil import BASE, CSA, HCA, SL, Driver, Twin, hf_logprobs_memo, make_twin, random_ids
from sgl_kernel_v4 import ops
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.moe import Experts, Router, effective_swiglu_limit

pytestmark = pytest.mark.timeout(120)

TOL = 1e-3

#: window 8, CSA ratio 4, HCA ratio 8: short prompts reach every compressor phase
SMALL_RATES_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[HCA, CSA, SL, HCA],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    sliding_window=8,
    compress_rates={CSA: 4, HCA: 8},
    index_topk=4,
)

#: the layout written the way DeepSeek's released config.json spells it: per-layer
#: ``compress_ratios`` (one trailing MTP entry), ``num_hash_layers`` and a separate
#: ``compress_rope_theta`` for the compressed layers
LEGACY_FIELDS_CFG: dict[str, Any] = dict(
    BASE,
    compress_ratios=[0, 4, 128, 4, 0],
    num_hash_layers=2,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
)


@functools.cache
def _twin(name: str) -> Twin:
    cfg = {"small_rates": SMALL_RATES_CFG, "legacy": LEGACY_FIELDS_CFG}[name]
    return make_twin(name, seed=27, cfg=copy.deepcopy(cfg))


def _ref_route(
    logits: torch.Tensor, bias: torch.Tensor | None, hash_ids: torch.Tensor | None, k: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek's ``Gate.forward`` in float64: ``s = sqrt(softplus(logits))``; top-k of ``s + bias``
    (or the hash ids); weights ``s[ids] / sum(s[ids]) * scale``."""
    s = torch.sqrt(F.softplus(logits.double()))
    if hash_ids is None:
        ids = torch.topk(s + bias.double(), k, dim=-1).indices
    else:
        ids = hash_ids
    w = s.gather(1, ids)
    return ids, w / w.sum(-1, keepdim=True) * scale


# ---------------------------------------------------------------------------------------------
# Routing (NVIDIA/TensorRT-LLM#15019, NVIDIA/TensorRT-LLM#13443, AI-Hypercomputer/maxtext#3871)
# ---------------------------------------------------------------------------------------------


def test_trtllm_15019_topk_router_selects_by_biased_scores_and_weights_by_unbiased() -> None:
    """NVIDIA/TensorRT-LLM#15019 (DeepSeek-V4's routing: ``scores = sqrt(softplus(logits))``,
    experts chosen by ``(scores + bias).topk``, the selected *unbiased* scores gathered,
    normalised and multiplied by ``routed_scaling_factor``): with a correction bias large enough to
    change the selection, the runtime router picks the same experts and gives the same weights as a
    float64 reference (1e-6); the bias never enters the weights."""
    torch.manual_seed(15019)
    n_exp, k, scale, d = 8, 3, 2.5, 16
    r = Router(d, n_exp, k, False, 100, scale, torch.float32, "cpu")
    r.weight.copy_(torch.randn(n_exp, d) * 0.5)
    bias = torch.zeros(n_exp)
    bias[[1, 6]] = 3.0  # two experts forced into every token's top-k
    r.e_score_correction_bias.copy_(bias)
    x = torch.randn(10, d)
    ids, w = r(x, torch.zeros(10, dtype=torch.long))
    ref_ids, ref_w = _ref_route(F.linear(x, r.weight), bias, None, k, scale)
    assert torch.equal(ids.sort(-1).values, ref_ids.sort(-1).values)
    order_got, order_ref = ids.argsort(-1), ref_ids.argsort(-1)
    assert torch.allclose(w.gather(1, order_got).double(), ref_w.gather(1, order_ref), atol=1e-6)
    assert all({1, 6} <= set(row) for row in ids.tolist())
    assert torch.allclose(w.sum(-1).double(), torch.full((10,), scale, dtype=torch.float64), atol=1e-5)


def test_trtllm_13443_hash_router_takes_tid2eid_of_each_token_and_its_scores() -> None:
    """NVIDIA/TensorRT-LLM#13443 (DeepSeek-V4 router reference: a hash layer's experts are
    ``tid2eid[input_ids]`` -- no top-k --, its weights the sqrt-softplus scores at those experts,
    renormalised and scaled): every token routes to its own id's ``tid2eid`` row in that order,
    with the float64 reference's weights (1e-6); the same token id at two positions routes to the
    same experts."""
    torch.manual_seed(13443)
    n_exp, k, scale, d, vocab = 6, 2, 1.5, 16, 50
    r = Router(d, n_exp, k, True, vocab, scale, torch.float32, "cpu")
    r.weight.copy_(torch.randn(n_exp, d))
    table = torch.stack([torch.randperm(n_exp)[:k] for _ in range(vocab)])
    r.tid2eid.copy_(table)
    input_ids = torch.tensor([3, 17, 3, 49, 0, 17])
    x = torch.randn(len(input_ids), d)
    ids, w = r(x, input_ids)
    assert torch.equal(ids, table[input_ids])
    _, ref_w = _ref_route(F.linear(x, r.weight), None, table[input_ids], k, scale)
    assert torch.allclose(w.double(), ref_w, atol=1e-6)
    assert torch.equal(ids[0], ids[2]) and torch.equal(ids[1], ids[5])


def test_maxtext_3871_num_hash_layers_makes_the_first_layers_hash_routed() -> None:
    """AI-Hypercomputer/maxtext#3871 (DeepSeek-V4 routing per layer: ``Gate.hash = layer_id <
    n_hash_layers``): a config giving ``num_hash_layers = 2`` (no ``mlp_layer_types``) builds
    layers 0 and 1 with a ``tid2eid`` hash router and layers 2 and 3 with a biased top-k router."""
    mc = ModelConfig.from_dict(copy.deepcopy(LEGACY_FIELDS_CFG))
    assert list(mc.hf.mlp_layer_types) == ["hash_moe", "hash_moe", "moe", "moe"]
    state = _twin("legacy").state
    for i in range(4):
        hashed = f"model.layers.{i}.mlp.gate.tid2eid" in state
        biased = f"model.layers.{i}.mlp.gate.e_score_correction_bias" in state
        assert (hashed, biased) == (i < 2, i >= 2), i


# ---------------------------------------------------------------------------------------------
# Clamped SwiGLU (NVIDIA/Megatron-LM#4481)
# ---------------------------------------------------------------------------------------------


def test_megatron_4481_swiglu_clamp_caps_gate_above_and_up_on_both_sides() -> None:
    """NVIDIA/Megatron-LM#4481 (DeepSeek-V4's SwiGLU clamp, as DeepSeek's ``Expert.forward``:
    ``gate.clamp(max=limit)``, ``up.clamp(-limit, limit)``, then ``silu(gate) * up``; a limit of 0
    means no clamp): values far outside +-limit give the float64 formula's result (1e-5), a very
    negative gate is NOT raised to -limit, and ``swiglu_limit = 0`` leaves every value unclamped."""
    limit = 7.0
    gate = torch.tensor([[-50.0, -8.0, -7.0, 0.5, 7.0, 8.0, 30.0, 100.0]])
    up = torch.tensor([[-100.0, -9.0, 3.0, 0.25, 6.9, 7.5, -30.0, 100.0]])
    got = ops.swiglu_clamped(torch.cat([gate, up], dim=-1), limit)
    g, u = gate.double().clamp(max=limit), up.double().clamp(-limit, limit)
    assert torch.allclose(got.double(), F.silu(g) * u, atol=1e-5)
    # silu(-50) * -7 is ~ 0, where clamping the gate from below would give silu(-7) * -7 ~ 0.0064
    assert abs(got[0, 0].item()) < 1e-12
    off = effective_swiglu_limit(0.0)
    assert math.isinf(off)
    free = ops.swiglu_clamped(torch.cat([gate, up], dim=-1), off)
    assert torch.allclose(free.double(), F.silu(gate.double()) * up.double(), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# compress_ratios schedule (GDzhu01/vllm-ascend-deepseekv4#58, anthony-chaudhary/fak#12640)
# ---------------------------------------------------------------------------------------------


def test_vllm_ascend_dsv4_58_compress_ratios_and_compress_rope_theta_match_transformers() -> None:
    """GDzhu01/vllm-ascend-deepseekv4#58 (DeepSeek-V4 ``compress_ratios`` semantics: entry ``i`` is
    layer ``i``'s ratio -- 0 no compression, 4 CSA with an indexer, 128 HCA without --, entries
    past ``num_hidden_layers`` are the MTP layers'; the compressed layers rotate with
    ``compress_rope_theta``, the others with ``rope_theta``): a config written that way maps to
    ``[sliding, CSA, HCA, CSA]`` with the MTP entry dropped, and a 40-token prompt's
    log-probabilities, whole and in chunks of 7, match transformers' on the same file."""
    mc = ModelConfig.from_dict(copy.deepcopy(LEGACY_FIELDS_CFG))
    assert list(mc.hf.layer_types) == [SL, CSA, HCA, CSA]
    assert mc.compress_ratios == [0, 4, 128, 4]
    twin = _twin("legacy")
    ids = random_ids(40, seed=58)
    ref = hf_logprobs_memo(twin, ids)
    for chunk in (1000, 7):
        got = Driver(twin, page_size=128).run_chunked(ids, chunk)
        assert (got - ref).abs().max().item() <= TOL, chunk


@pytest.mark.parametrize(
    "ratios, where",
    [
        ([0, 4, -4, 4], "compress_ratios[2]"),  # a negative ratio
        ([0, 4, 128], "compress_ratios"),  # shorter than the decoder stack
        ([0, 4, 16, 4], "compress_ratios[2]"),  # a ratio no DeepSeek-V4 layer has
    ],
)
def test_fak_12640_malformed_compress_ratio_schedule_fails_closed(ratios: list[int], where: str) -> None:
    """anthony-chaudhary/fak#12640 (a negative compression ratio or a ``compress_ratios`` schedule
    shorter than the decoder stack was silently admitted and fell through to plain attention; a
    malformed schedule must fail closed): each is refused with a ValueError naming the field."""
    with pytest.raises(ValueError) as exc:
        ModelConfig.from_dict(dict(copy.deepcopy(BASE), compress_ratios=ratios))
    assert where in str(exc.value)


# ---------------------------------------------------------------------------------------------
# Decode compressor phase from the runtime position (hw-native-sys/pypto-lib#243)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefill", [6, 7, 8])
def test_pypto_243_decode_compresses_at_the_runtime_position(prefill: int) -> None:
    """hw-native-sys/pypto-lib#243 (a DeepSeek-V4 decode compressor derived its state row, scatter
    slot and whether to emit a compressed entry from a fixed ``START_POS`` instead of the runtime
    ``start_pos``; it must emit when ``(start_pos + 1) % ratio == 0``): after prefills of 6, 7 and
    8 tokens, ten single-token decode steps (crossing CSA-4 and HCA-8 boundaries at different
    steps) give transformers' log-probabilities at every position."""
    twin = _twin("small_rates")
    ids = random_ids(prefill + 10, seed=243)
    ref = hf_logprobs_memo(twin, ids)
    drv = Driver(twin, page_size=64)
    slot = drv.new_req()
    outs = drv.step([(slot, ids[:prefill])])
    for t in ids[prefill:]:
        outs += drv.step([(slot, [t])])
    drv.release(slot)
    got = torch.cat(outs)
    assert got.shape == ref.shape
    assert (got - ref).abs().max().item() <= TOL


# ---------------------------------------------------------------------------------------------
# FP4 experts and the clamp on every expert path (AI-Hypercomputer/maxtext#3873,
# HYGON-AI/sglang-das#118)
# ---------------------------------------------------------------------------------------------


def _e2m1(code: int) -> float:
    """OCP E2M1 by its bit fields: sign (bit 3), exponent (bits 2-1, bias 1), mantissa (bit 0)."""
    sign = -1.0 if code & 8 else 1.0
    e, m = (code >> 1) & 3, code & 1
    return sign * (m * 0.5 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2))


def _hand_dequant(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Low nibble first, one ``2 ** (byte - 127)`` per 32 unpacked values; float64."""
    lut = torch.tensor([_e2m1(c) for c in range(16)], dtype=torch.float64)
    u = packed.to(torch.int64)
    vals = torch.stack([lut[u & 15], lut[u >> 4]], dim=-1).flatten(-2)
    sc = torch.pow(2.0, scale.to(torch.float64) - 127).repeat_interleave(32, dim=-1)
    return vals * sc


def test_maxtext_3873_hygon_118_fp4_and_dense_experts_dequantize_and_clamp_alike() -> None:
    """AI-Hypercomputer/maxtext#3873 (DeepSeek-V4 FP4 experts: two E2M1 values per byte, LOW nibble
    first, one E8M0 scale ``2 ** (b - 127)`` per 32 values) and HYGON-AI/sglang-das#118 (the
    activation between an expert's two GEMMs was not given ``swiglu_limit``, dropping accuracy):
    FP4 experts built from random bytes, and dense fp32 experts holding the hand-decoded weights,
    both give the float64 reference ``down(silu(min(gate, L)) * clamp(up, -L, L))`` with ``L = 2``
    on inputs that push most gates and ups past the limit (relative 1e-4)."""
    torch.manual_seed(3873)
    n_exp, d, inter, limit = 2, 32, 32, 2.0
    gu_packed = torch.randint(0, 256, (n_exp, 2 * inter, d // 2), dtype=torch.uint8)
    dn_packed = torch.randint(0, 256, (n_exp, d, inter // 2), dtype=torch.uint8)
    gu_scale = torch.randint(122, 128, (n_exp, 2 * inter, d // 32), dtype=torch.uint8)
    dn_scale = torch.randint(122, 128, (n_exp, d, inter // 32), dtype=torch.uint8)
    w_gu, w_dn = _hand_dequant(gu_packed, gu_scale), _hand_dequant(dn_packed, dn_scale)

    fp4 = Experts(n_exp, d, inter, limit, torch.float32, "cpu", quant="fp4")
    fp4.gate_up_proj.copy_(gu_packed)
    fp4.down_proj.copy_(dn_packed)
    fp4.gate_up_proj_scale_inv.copy_(gu_scale)
    fp4.down_proj_scale_inv.copy_(dn_scale)
    dense = Experts(n_exp, d, inter, limit, torch.float32, "cpu")
    dense.gate_up_proj.copy_(w_gu.float())
    dense.down_proj.copy_(w_dn.float())

    x = torch.randn(6, d) * 4
    ids = torch.tensor([[0, 1], [1, 0], [0, 1], [1, 0], [0, 1], [1, 0]])
    w = torch.rand(6, 2)
    ref = torch.zeros(6, d, dtype=torch.float64)
    clamped = 0
    for t in range(6):
        for j in range(2):
            e = int(ids[t, j])
            gu = w_gu[e] @ x[t].double()
            gate, up = gu[:inter], gu[inter:]
            clamped += int((gate > limit).sum() + (up.abs() > limit).sum())
            h = F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)
            ref[t] += float(w[t, j]) * (w_dn[e] @ h)
    assert clamped > 6 * 2 * inter // 2  # the clamp decides most values
    scale = ref.abs().max().item()
    for name, experts in (("fp4", fp4), ("dense", dense)):
        got = experts(x, ids, w).double()
        assert (got - ref).abs().max().item() <= 1e-4 * scale, name


# ---------------------------------------------------------------------------------------------
# Attention sink, one query vs many (ml-explore/mlx#3452)
# ---------------------------------------------------------------------------------------------


def test_mlx_3452_sink_attention_same_for_a_single_query_and_a_batch_of_queries() -> None:
    """ml-explore/mlx#3452 (scaled-dot-product attention with per-head ``sinks`` -- a learnable
    logit in the softmax denominator only -- gave the last position a different output as the
    last row of a 34-query prefill than as a single decode query over the same keys, so cached
    decode diverged from recomputation in DeepSeek-V4): the last position's log-probabilities from
    one 34-token prefill equal (1e-5) those of a 33-token prefill plus one decode step, both within
    1e-3 of transformers'."""
    twin = _twin("small_rates")
    ids = random_ids(34, seed=3452)
    whole = Driver(twin, page_size=64).run_chunked(ids, 1000)[-1]
    drv = Driver(twin, page_size=64)
    slot = drv.new_req()
    drv.step([(slot, ids[:-1])])
    single = drv.step([(slot, ids[-1:])])[0][-1]
    drv.release(slot)
    assert (whole - single).abs().max().item() <= 1e-5
    assert (single - hf_logprobs_memo(twin, ids)[-1]).abs().max().item() <= TOL
