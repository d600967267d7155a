"""A thirty-second set of public reports on the DeepSeek-V4 model forward on the CPU path: the CSA
indexer and the HCA compressor at chunk and ratio boundaries (a query never sees the compressed
group it sits inside; HCA prompt lengths 127 / 128 / 129), a decode step alone vs batched with
prefill mates, the biased top-k router when every biased score is negative, the inverse RoPE on the
attention output, the block-diagonal grouped output projection, and the mHC pre / post / head
formulas against transformers' modules (each test names its report).

Fixtures: twins from ``dsv4_testutil`` (transformers' ``DeepseekV4ForCausalLM`` and the runtime
model on the same random weights, the runtime driven through its paged KV pool by ``Driver``).

Oracles: transformers' ``DeepseekV4ForCausalLM`` (one no-cache forward over the whole sequence, fp32
on the CPU, within 1e-3 as test_model_parity) and its ``DeepseekV4HyperConnection`` /
``DeepseekV4HyperHead`` modules; float64 formulas written here from DeepSeek's published
``Gate.forward`` and the rotation / grouped-projection definitions; a cold single-request run.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from dsv4_testutil import BASE, CSA, HCA, SL, Driver, Twin, hf_logprobs_memo, make_twin, random_ids
from sgl_kernel_v4 import ops
from sglang_v4.layers.linear import GroupedLinear
from sglang_v4.layers.mhc import HyperConnection, HyperHead
from sglang_v4.layers.moe import Router

pytestmark = pytest.mark.timeout(120)

TOL = 1e-3

#: window 8, CSA ratio 4 with top-4 of the entries, HCA ratio 8: short prompts cross every boundary
SMALL_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[CSA, HCA, SL, CSA],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    sliding_window=8,
    compress_rates={CSA: 4, HCA: 8},
    index_topk=4,
)

#: HCA at its published ratio (128) next to a 128-token window: 127 / 128 / 129 straddle both
HCA128_CFG: dict[str, Any] = dict(
    BASE,
    num_hidden_layers=2,
    layer_types=[HCA, SL],
    mlp_layer_types=["hash_moe", "moe"],
    compress_rates={CSA: 4, HCA: 128},
)


@functools.cache
def _twin(name: str) -> Twin:
    cfg = {"small": SMALL_CFG, "hca128": HCA128_CFG}[name]
    return make_twin(name, seed=32, cfg=copy.deepcopy(cfg))


# ---------------------------------------------------------------------------------------------
# Compressed-entry visibility (vllm-project/tpu-inference#3536, AI-Hypercomputer/maxtext#3866)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [5, 6, 7, 1000])
def test_tpu_inference_3536_indexer_never_sees_the_querys_own_group_whatever_the_chunk_end(
    chunk: int,
) -> None:
    """vllm-project/tpu-inference#3536 (the CSA indexer's causal bound admitted entry
    ``q_pos // ratio`` -- the group the query sits inside, built from tokens after it -- so inside a
    prefill chunk the same query selected a different set depending on where the chunk ended):
    a 27-token prompt run in chunks of 5, 6, 7 (boundaries mid-group) and whole gives
    transformers' log-probabilities at every position (1e-3), more entries than ``index_topk``."""
    twin = _twin("small")
    ids = random_ids(27, seed=3536)
    ref = hf_logprobs_memo(twin, ids)
    got = Driver(twin, page_size=128).run_chunked(ids, chunk)
    assert (got - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("length", [127, 128, 129])
def test_maxtext_3866_hca_entry_visible_only_once_its_last_token_is_reached(length: int) -> None:
    """AI-Hypercomputer/maxtext#3866 (DeepSeek-V4 compressed attention: HCA entry ``j`` is visible
    to the query at position ``p`` only when ``(j + 1) * ratio <= p + 1``; a wrong threshold lets a
    query read a block from its own future or drops a finished one): with ratio 128 and a
    128-token window, prompts of 127, 128 and 129 tokens -- no entry, the first entry finished by
    the last token, one entry plus a token past the window -- give transformers' log-probabilities
    at every position (1e-3), whole and in chunks of 64."""
    twin = _twin("hca128")
    ids = random_ids(length, seed=3866 + length)
    ref = hf_logprobs_memo(twin, ids)
    for chunk in (1000, 64):
        got = Driver(twin, page_size=128).run_chunked(ids, chunk)
        assert (got - ref).abs().max().item() <= TOL, chunk


def test_maxtext_3866_hca_decode_across_the_first_block_matches_transformers() -> None:
    """AI-Hypercomputer/maxtext#3866 (decode with ``seq_len == 1`` over a compressed block that
    completes during decode): a 125-token prefill then five one-token decode steps (positions
    125..129, the 128-token HCA block finishing at 127) give transformers' log-probabilities of the
    whole 130-token sequence at each decoded position (1e-3)."""
    twin = _twin("hca128")
    ids = random_ids(130, seed=38661)
    ref = hf_logprobs_memo(twin, ids)
    drv = Driver(twin, page_size=128)
    slot = drv.new_req()
    drv.step([(slot, ids[:125])])
    for p in range(125, 130):
        out = drv.step([(slot, [ids[p]])])[0]
        assert (out[0] - ref[p]).abs().max().item() <= TOL, p
    drv.release(slot)


# ---------------------------------------------------------------------------------------------
# Batch invariance (pegainfer-project/pegainfer#414)
# ---------------------------------------------------------------------------------------------


def test_pegainfer_414_decode_step_does_not_depend_on_its_batch_mates() -> None:
    """pegainfer-project/pegainfer#414 (batched decode was not batch-invariant: a request's tokens
    depended on its batch-mates): one request's decode steps run alone and run in the same
    forward as two other requests (a 19-token prefill and a decode at another length) give the
    same log-probabilities (1e-5, fp32 CPU), and both match transformers' (1e-3)."""
    twin = _twin("small")
    ids = random_ids(21, seed=414)
    ref = hf_logprobs_memo(twin, ids)
    alone = Driver(twin, page_size=128)
    a = alone.new_req()
    alone.step([(a, ids[:17])])
    solo = [alone.step([(a, [t])])[0] for t in ids[17:]]

    mixed = Driver(twin, page_size=128)
    m = mixed.new_req()
    other = mixed.new_req()
    mixed.step([(m, ids[:17]), (other, random_ids(11, seed=4141))])
    for i, t in enumerate(ids[17:]):
        mate = mixed.new_req()
        outs = mixed.step([(other, [7 + i]), (m, [t]), (mate, random_ids(19, seed=4142 + i))])
        mixed.release(mate)
        assert (outs[1] - solo[i]).abs().max().item() <= 1e-5, i
        assert (outs[1][0] - ref[17 + i]).abs().max().item() <= TOL, i


# ---------------------------------------------------------------------------------------------
# Biased top-k routing with negative keys (vllm-project/vllm#13474)
# ---------------------------------------------------------------------------------------------


def test_vllm_13474_topk_router_ranks_negative_biased_scores_without_a_zero_fill() -> None:
    """vllm-project/vllm#13474 (grouped top-k filled masked scores with 0, so when the kept scores
    were negative a masked expert won the top-k; the reference fills with ``-inf``): with a
    correction bias that makes every ``score + bias`` negative, the runtime router picks the
    top-k of ``score + bias`` as a float64 DeepSeek ``Gate.forward`` does, and weights them by
    the unbiased ``sqrt(softplus)`` scores renormalised and scaled (1e-6)."""
    torch.manual_seed(13474)
    n_exp, k, scale, d = 8, 3, 1.5, 16
    r = Router(d, n_exp, k, False, 100, scale, torch.float32, "cpu")
    r.weight.copy_(torch.randn(n_exp, d) * 0.3)
    bias = -10.0 - torch.arange(n_exp, dtype=torch.float32) * 0.5
    bias[5] = -9.0  # least negative: in every token's top-k unless its score is far lower
    r.e_score_correction_bias.copy_(bias)
    x = torch.randn(12, d)
    ids, w = r(x, torch.zeros(12, dtype=torch.long))
    s = torch.sqrt(F.softplus(F.linear(x, r.weight).double()))
    keys = s + bias.double()
    assert bool((keys < 0).all())
    ref_ids = torch.topk(keys, k, dim=-1).indices
    assert torch.equal(ids.sort(-1).values, ref_ids.sort(-1).values)
    ref_w = s.gather(1, ids) / s.gather(1, ids).sum(-1, keepdim=True) * scale
    assert torch.allclose(w.double(), ref_w, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Inverse RoPE on the attention output (ggml-org/llama.cpp#24162)
# ---------------------------------------------------------------------------------------------


def _rotate64(x: torch.Tensor, ang: torch.Tensor) -> torch.Tensor:
    """float64 rotation of the trailing ``2 * ang.shape[-1]`` channels by interleaved pairs."""
    x = x.double().clone()
    r = 2 * ang.shape[-1]
    pairs = x[..., -r:].unflatten(-1, (-1, 2))
    c, s = ang.cos().unsqueeze(1), ang.sin().unsqueeze(1)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    x[..., -r:] = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2)
    return x


def test_llama_cpp_24162_output_rope_is_undone_by_rotating_back_by_the_position() -> None:
    """ggml-org/llama.cpp#24162 (DeepSeek-V4's attention output carries the keys' rotation, since
    K = V; it is undone by rotating the rope slice by ``-position``, the backward of RoPE): the
    runtime's inverse rotation equals a float64 rotation by ``-angle`` of the trailing rope
    channels, leaves the no-rope channels untouched, and inverts the forward rotation (1e-5) at
    positions up to 70000 (past a 65536 context)."""
    torch.manual_seed(24162)
    T, H, D, r = 6, 3, 128, 64
    pos = torch.tensor([0, 1, 127, 128, 4097, 70000], dtype=torch.float64)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, r, 2, dtype=torch.float64) / r))
    ang = pos[:, None] * inv_freq[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()
    o = torch.randn(T, H, D)
    got = ops.inv_rope_quant(o.clone(), cos, sin, False)
    assert torch.allclose(got.double(), _rotate64(o, -ang), atol=1e-5)
    assert torch.equal(got[..., : D - r], o[..., : D - r])
    back = ops.inv_rope_quant(ops.apply_rope(o.clone(), cos, sin), cos, sin, False)
    assert torch.allclose(back, o, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Grouped output projection (radixark/miles#2771)
# ---------------------------------------------------------------------------------------------


def test_miles_2771_grouped_o_projection_is_block_diagonal() -> None:
    """radixark/miles#2771 (DeepSeek-V4's ``wo_a`` stores ``G`` independent group weights in one
    flattened matrix and each input group must use only its own output group; a dense treatment
    adds cross-group terms): the runtime ``GroupedLinear`` equals a float64 per-group product
    (1e-5), and changing group 1's input changes only group 1's outputs."""
    torch.manual_seed(2771)
    G, in_g, out_g, T = 4, 24, 8, 5
    lin = GroupedLinear(in_g, G * out_g, G, torch.float32, "cpu")
    with torch.no_grad():
        lin.weight.copy_(torch.randn(G * out_g, in_g))
    x = torch.randn(T, G, in_g)
    got = lin(x)
    w = lin.weight.double().view(G, out_g, in_g)
    ref = torch.einsum("tgi,goi->tgo", x.double(), w).reshape(T, G * out_g)
    assert torch.allclose(got.double(), ref, atol=1e-5)
    x2 = x.clone()
    x2[:, 1] += 5.0
    delta = (lin(x2) - got).view(T, G, out_g).abs().amax(dim=(0, 2))
    assert delta[1] > 1e-2 and bool((delta[[0, 2, 3]] == 0).all())


# ---------------------------------------------------------------------------------------------
# mHC (youssofal/MTPLX#216, sgl-project/sglang-jax#1547)
# ---------------------------------------------------------------------------------------------


def _hf_config(hc_mult: int = 4, hidden: int = 64) -> Any:
    from transformers import DeepseekV4Config

    cfg = {k: v for k, v in copy.deepcopy(BASE).items() if k != "model_type"}
    cfg.update(hidden_size=hidden, hc_mult=hc_mult)
    return DeepseekV4Config(**cfg)


def test_mtplx_216_sinkhorn_comb_pre_post_match_transformers_hyper_connection() -> None:
    """youssofal/MTPLX#216 (the mHC gate on DeepSeek-V4's shape -- ``hc=4``, a ``[4, 4]`` fp32
    ``comb``, the configured Sinkhorn iterations and ``eps`` -- must keep the reference's operation
    order): on streams of very different magnitudes the runtime ``HyperConnection.pre`` gives
    transformers' ``DeepseekV4HyperConnection`` ``post``, ``comb`` and collapsed input (1e-5
    relative), and ``comb``'s columns sum to 1."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperConnection

    hf_cfg = _hf_config()
    torch.manual_seed(216)
    hf = DeepseekV4HyperConnection(hf_cfg).eval()
    with torch.no_grad():
        hf.fn.copy_(torch.randn_like(hf.fn) * 0.05)
        hf.base.copy_(torch.randn_like(hf.base))
        hf.scale.copy_(torch.tensor([0.7, 1.3, 2.0]))
    ours = HyperConnection(4, 64, hf_cfg.hc_sinkhorn_iters, hf_cfg.hc_eps, hf_cfg.rms_norm_eps, "cpu")
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(9, 4, 64) * torch.tensor([1e-3, 1.0, 30.0, 1e3]).view(1, 4, 1)
    with torch.no_grad():
        post_ref, comb_ref, coll_ref = hf(x.unsqueeze(0))
    coll, post, comb = ours.pre(x)
    assert torch.allclose(post, post_ref[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(comb, comb_ref[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(coll, coll_ref[0], rtol=1e-5, atol=1e-3)
    assert torch.allclose(comb.sum(-2), torch.ones(9, 4), atol=1e-4)


def test_sglang_jax_1547_hc_post_and_head_match_transformers_formulas() -> None:
    """sgl-project/sglang-jax#1547 (mHC post: ``X_{l+1}[j] = post[j] * y + sum_i comb[i, j] *
    X_l[i]`` -- comb applied transposed, it is not symmetric -- and the head collapse before the
    final norm): the runtime ``hc_post`` equals transformers' decoder-layer expression in float64
    for a non-symmetric ``comb`` (1e-5), and ``HyperHead`` equals ``DeepseekV4HyperHead``
    (1e-5 relative)."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4HyperHead

    torch.manual_seed(1547)
    T, n, D = 7, 4, 64
    y, res = torch.randn(T, D), torch.randn(T, n, D)
    post = torch.rand(T, n) * 2
    comb = torch.softmax(torch.randn(T, n, n) * 3, dim=-1)
    assert not torch.allclose(comb, comb.transpose(-1, -2))
    got = ops.hc_post(y, res, post, comb)
    ref = post.double().unsqueeze(-1) * y.double().unsqueeze(-2) + torch.matmul(
        comb.double().transpose(-1, -2), res.double()
    )
    assert torch.allclose(got.double(), ref, atol=1e-5)

    hf_cfg = _hf_config()
    hf = DeepseekV4HyperHead(hf_cfg).eval()
    with torch.no_grad():
        hf.hc_fn.copy_(torch.randn_like(hf.hc_fn) * 0.05)
        hf.hc_base.copy_(torch.randn_like(hf.hc_base))
        hf.hc_scale.copy_(torch.tensor([1.7]))
    head = HyperHead(n, D, hf_cfg.hc_eps, hf_cfg.rms_norm_eps, "cpu")
    head.load_state_dict(hf.state_dict())
    x = torch.randn(T, n, D) * torch.tensor([0.01, 1.0, 10.0, 100.0]).view(1, n, 1)
    with torch.no_grad():
        ref_head = hf(x.unsqueeze(0))[0]
    assert torch.allclose(head(x), ref_head, rtol=1e-5, atol=1e-4)
