"""Public bug reports on the KV cache formats and pool sizing: the fp8 indexer cache's paged
layout (values first, then scales), per-layer indexer scales aliasing one another, fp8 KV entries
far beyond e4m3's range or near float32's limit, zero and tiny entries whose scale must stay
finite, the fp4 indexer keys' e2m1 grid and ue8m0 block scales, float64 entries rounded once
(not twice through float32), and ``--max-total-tokens`` honoured by the compressed-attention pools
without a cap from the sliding-window pool.

No server or scheduler: the codecs of ``sgl_kernel_v4.ref.kv_quant`` / ``mem_cache.kv_format``,
a small ``DSV4KVPool`` of the ``flash`` preset on CPU and the planner. Oracles: float64 arithmetic
(values, scales and roundings worked out by hand from the formats' definitions), the byte offsets
stated by the reports and the formats' documents (``struct`` reads of the raw bytes), and the page
arithmetic of SGLang's ``--max-total-tokens`` rounding.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
import torch
from sgl_kernel_v4.ref import kv_quant as kq
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache import kv_planner
from sglang_v4.mem_cache.kv_format import encode_entries
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.tools.kv_planner import load_preset_config

E4M3_REL = 2.0**-4  # half an ulp of a 3-bit mantissa, relative to the value (normal range)


@pytest.fixture(scope="module")
def flash() -> ModelConfig:
    """The DeepSeek-V4-Flash shapes (512-d main entries, 64-d rope, 128-d indexer keys)."""
    return load_preset_config("flash")


def _grid_round(v: np.ndarray, mant_bits: int, min_exp: int) -> np.ndarray:
    """Float64 round-to-nearest-even onto a binary float grid of ``mant_bits`` stored mantissa
    bits and minimum normal exponent ``min_exp`` (subnormal step ``2**(min_exp - mant_bits)``),
    from the formats' definitions; no overflow handling (callers stay in range)."""
    out = np.zeros_like(v)
    a = np.abs(v)
    nz = a > 0
    e = np.floor(np.log2(a[nz]))
    step = 2.0 ** (np.maximum(e, float(min_exp)) - mant_bits)
    out[nz] = np.round(a[nz] / step) * step  # numpy rounds half to even
    return np.sign(v) * out


def _e4m3_round(v: np.ndarray) -> np.ndarray:
    """e4m3fn (|v| <= 448): 3 mantissa bits, minimum normal exponent -6."""
    return _grid_round(v, 3, -6)


def _bf16_round(v: np.ndarray) -> np.ndarray:
    """bfloat16: 7 mantissa bits, minimum normal exponent -126."""
    return _grid_round(v, 7, -126)


def _fp8_main_oracle(x: np.ndarray, nope: int, block: int = 64) -> np.ndarray:
    """Float64 decode of what the fp8 main entry must hold: per 64-block a power-of-two scale
    ``2**ceil(log2(max(amax, 1e-4) / 448))``, e4m3 of ``x / s`` times ``s``; rope slice bf16."""
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        for b in range(nope // block):
            blk = x[r, b * block : (b + 1) * block]
            s = 2.0 ** math.ceil(math.log2(max(float(np.abs(blk).max()), 1e-4) / 448.0))
            out[r, b * block : (b + 1) * block] = _e4m3_round(blk / s) * s
        out[r, nope:] = _bf16_round(x[r, nope:])
    return out


def test_fp8_indexer_page_stores_every_value_row_then_every_scale(flash: ModelConfig) -> None:
    """vllm-project/vllm#50576 (the fp8 indexer cache is written block-planar, all values then all
    scales, but was read token-interleaved, so each key drifted 4 bytes per token and its "scale"
    was value bytes of a neighbour): in the paged form of our fp8 indexer keys, key ``pos`` of a
    ``B``-entry page has its ``d`` e4m3 bytes at ``pos * d`` and its float32 scale at ``B * d + pos
    * 4`` (read here with ``struct``); the scale is the entry's power of two and the values times
    it give back the key within e4m3's rounding."""
    d, bsz = flash.index_head_dim, 64
    g = torch.Generator().manual_seed(50576)
    keys = (
        torch.randn(bsz, d, generator=g, dtype=torch.float64)
        * torch.logspace(-2, 2, bsz).unsqueeze(1).double()
    )
    entries = kq.quantize_indexer_fp8(keys.float()).reshape(1, bsz, d + 4)
    page = kq.entries_to_paged(entries, data_bytes=d)[0].numpy().tobytes()
    assert len(page) == bsz * (d + 4)
    for pos in (0, 1, 17, bsz - 1):
        (scale,) = struct.unpack_from("<f", page, bsz * d + pos * 4)
        amax = float(keys[pos].float().abs().max())
        assert scale == 2.0 ** math.ceil(math.log2(amax / 448.0)), pos
        vals = np.frombuffer(page[pos * d : (pos + 1) * d], dtype=np.uint8).copy()
        got = torch.from_numpy(vals).view(torch.float8_e4m3fn).double().numpy() * scale
        want = keys[pos].float().double().numpy()
        np.testing.assert_allclose(got, want, rtol=E4M3_REL, atol=scale * 2.0**-9)
    back = kq.paged_to_entries(
        torch.frombuffer(bytearray(page), dtype=torch.uint8).reshape(1, -1), bsz, d + 4, d
    )
    assert torch.equal(back, entries)


@pytest.mark.parametrize("fp4", [False, True])
def test_each_csa_layer_reads_back_its_own_indexer_keys_and_scales(flash: ModelConfig, fp4: bool) -> None:
    """ROCm/ATOM#1466 (every CSA layer's fp8 indexer scale view aliased layer 0's scale region:
    only the first layer read valid scales, the others zeros): in an fp8 pool (fp8 and fp4
    indexer keys), one slot of every CSA layer is written with keys of a different magnitude per
    layer; each layer then reads back its own keys (float64 relative error within the format's
    rounding), not another layer's or zeros."""
    pool = DSV4KVPool(flash, 256, 2, 2, 1, torch.float32, "cpu", kv_cache_dtype="fp8_e4m3", fp4_indexer=fp4)
    d = flash.index_head_dim
    g = torch.Generator().manual_seed(1466)
    written = {}
    slots = torch.tensor([70, 71])
    for k, layer in enumerate(flash.csa_layers):
        x = torch.randn(2, d, generator=g) * 4.0 ** (k - 3)
        pool.rows(KVKind.CSA_INDEXER, layer)[slots] = x
        written[layer] = x.double()
    tol = 0.25 if fp4 else E4M3_REL  # e2m1 step near the top of a block is 2 of 6 -> <= 1/4 of amax
    for layer, x in written.items():
        got = pool.rows(KVKind.CSA_INDEXER, layer)[slots].double()
        err = (got - x).abs().max() / x.abs().max()
        assert err <= tol, (layer, float(err))


@pytest.mark.parametrize("magnitude", [1e3, 3e5, 1e37])
def test_fp8_kv_entries_beyond_e4m3_range_decode_finite_and_close(magnitude: float) -> None:
    """vllm-project/vllm#4381 (what becomes of a value beyond fp8's range when the KV cache is
    quantized: inf or NaN?) and pytorch/FBGEMM#4237 (an fp8 KV scale overflowed for large
    values): fp8 main entries whose nope values reach ``magnitude`` (far above 448, up to near
    float32's limit) decode finite and equal to the float64 decode of the format (per-64 power-of-
    two scale, e4m3 round-to-nearest-even), and their scale bytes are the exponent ``+ 127``."""
    g = torch.Generator().manual_seed(4381)
    x = torch.randn(3, 512, generator=g, dtype=torch.float64)
    x[:, :448] *= magnitude / x[:, :448].abs().amax()
    x[:, 448:] = x[:, 448:].clamp(-8, 8)
    xf = x.float()
    enc = kq.quantize_kv_fp8(xf, rope_dim=64)
    dec = kq.dequantize_kv_fp8(enc, rope_dim=64, out_dtype=torch.float64)
    assert torch.isfinite(dec).all()
    want = _fp8_main_oracle(xf.double().numpy(), 448)
    np.testing.assert_array_equal(dec.numpy(), want)
    for r in range(3):
        for b in range(7):
            amax = float(xf[r, 64 * b : 64 * b + 64].abs().max())
            assert int(enc[r, 576 + b]) == math.ceil(math.log2(amax / 448.0)) + 127


def test_zero_and_tiny_fp8_entries_keep_a_finite_scale_and_decode_exactly(flash: ModelConfig) -> None:
    """onnxruntime/mobius#447 (a zero / non-finite fp8 KV scale reached the cache unchecked,
    risking corrupted results): an all-zero main entry, an all-zero indexer key and entries far
    below the 1e-4 amax floor are stored with finite non-zero scales and decode to exactly the
    float64 decode of the format (zeros stay zeros), through the pool's fp8 views of the CSA, HCA
    and sliding-window kinds."""
    pool = DSV4KVPool(flash, 256, 2, 2, 1, torch.float32, "cpu", kv_cache_dtype="fp8_e4m3")
    x = torch.zeros(3, 512)
    x[1, :448] = 3e-7
    x[2, :448] = torch.linspace(-1e-5, 1e-5, 448)
    want = _fp8_main_oracle(x.double().numpy(), 448)
    slots = torch.tensor([1, 2, 3])
    for kind, layer in (
        (KVKind.CSA_MAIN, flash.csa_layers[0]),
        (KVKind.HCA, flash.hca_layers[0]),
        (KVKind.SWA, 0),
    ):
        rows = pool.rows(kind, layer)
        rows[slots] = x
        got = rows[slots].double().numpy()
        np.testing.assert_array_equal(got, want, err_msg=str(kind))
        assert not got[0].any()
    enc = kq.quantize_kv_fp8(x, rope_dim=64)
    assert (enc[:, 576:583].int() == math.ceil(math.log2(1e-4 / 448.0)) + 127).all()
    idx = torch.zeros(1, flash.index_head_dim)
    ienc = kq.quantize_indexer_fp8(idx)
    (scale,) = struct.unpack("<f", ienc[0, -4:].numpy().tobytes())
    assert math.isfinite(scale) and scale > 0
    assert not kq.dequantize_indexer_fp8(ienc).any()


def test_fp4_indexer_keys_are_e2m1_nearest_even_with_ue8m0_block_scales() -> None:
    """ROCm/ATOM#1709 (the DeepSeek-V4 fp4 indexer cache: e2m1 data with one e8m0 scale per 32
    values, even index in the low nibble): each 32-block's scale byte is ``ceil(log2(amax / 6)) +
    127``, each value decodes to the float64 nearest point of the e2m1 grid (ties to the even code)
    times that scale, and element ``2i`` sits in the low nibble of byte ``i``."""
    grid = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    g = torch.Generator().manual_seed(1709)
    x = (torch.randn(4, 128, generator=g) * torch.tensor([0.01, 1.0, 30.0, 1e4]).unsqueeze(1)).float()
    x[0, :4] = torch.tensor([0.25, 0.75, -1.25, 5.0]) * 2.0**-7  # exact e2m1 ties
    x[0, 4] = 6.0 * 2.0**-7  # block 0's amax: scale 2**-7
    x[0, 5:32] = x[0, 5:32].clamp(-0.04, 0.04)
    enc = kq.quantize_indexer_fp4(x)
    assert enc.shape == (4, 68)
    dec = kq.dequantize_indexer_fp4(enc, out_dtype=torch.float64).numpy()
    xd = x.double().numpy()
    for r in range(4):
        for b in range(4):
            blk = xd[r, 32 * b : 32 * b + 32]
            e = math.ceil(math.log2(max(np.abs(blk).max() / 6.0, 1e-4)))
            assert int(enc[r, 64 + b]) == e + 127, (r, b)
            s = 2.0**e
            a = np.abs(blk) / s
            want = np.empty(32)
            for i, v in enumerate(a):
                dist = np.abs(grid - v)
                near = np.flatnonzero(dist == dist.min())
                want[i] = grid[near[0] if len(near) == 1 else near[near % 2 == 0][0]]
            np.testing.assert_array_equal(dec[r, 32 * b : 32 * b + 32], np.sign(blk) * want * s)
    # ties to the even code: 0.25 -> 0 (code 0), 0.75 -> 1 (code 2), -1.25 -> -1 (code 2, sign), 5 -> 4
    # (code 6); element 2i in the low nibble of byte i
    assert int(enc[0, 0]) == 0x20 and int(enc[0, 1]) == 0x6A


def test_max_total_tokens_sets_the_compressed_pools_past_the_generic_estimate(flash: ModelConfig) -> None:
    """kvcache-ai/sglang#83 (DeepSeek-V4's compressed-attention pool was clamped by a capacity
    estimate from the generic per-token KV size, so a configured 1M-token ``--max-total-tokens``
    became ~143K): planned with ``max_total_tokens = 1M + 100`` and no budget, the pools hold
    exactly ``floor((1M + 100) / 256)`` block pages (SGLang's round-down to whole pages) for every
    dtype; under a budget that fits it the same count, and under one that does not, fewer (a
    budget is never exceeded). sgl-project/sglang#26607 (DeepSeek-V4 prefill was capped by the
    sliding-window pool's size, refusing a 200K prompt): the planned pools hold a 1M-token request
    although their window pages cover far fewer tokens."""
    want_pages = (1_048_576 + 100) // 256
    for dtype, fp4 in (("bf16", False), ("fp8_e4m3", False), ("fp8_e4m3", True)):
        plan = kv_planner.plan_kv_pools(
            flash, dtype, fp4, max_total_tokens=1_048_576 + 100, context_length=1_048_576
        )
        assert plan.num_block_pages == want_pages, dtype
        assert plan.kv_capacity_tokens == want_pages * 256
        # sgl-project/sglang#26607: a long prompt is not capped by the sliding-window pool
        assert plan.num_window_pages * flash.sliding_window < 1_048_576
        assert plan.max_context == 1_048_576 and plan.max_concurrency == 1
        roomy = kv_planner.plan_kv_pools(
            flash, dtype, fp4, budget_bytes=4 * plan.total_bytes, max_total_tokens=1_048_576 + 100
        )
        assert roomy.num_block_pages == want_pages, dtype
        tight = kv_planner.plan_kv_pools(
            flash, dtype, fp4, budget_bytes=plan.total_bytes // 2, max_total_tokens=1_048_576 + 100
        )
        assert tight.num_block_pages < want_pages and tight.total_bytes <= plan.total_bytes // 2, dtype


# float64 values a hair (far below float32's resolution) past a midpoint of the narrow format, or
# just before one, or on one: past -> away from the lower neighbour; on -> the even neighbour
_E4M3_NEAR_MIDPOINTS = [
    1.0625 + 2.0**-30,  # -> 1.125 (a float32 rounding lands on the midpoint 1.0625 -> 1.0)
    1.0625 - 2.0**-30,  # -> 1.0
    1.0625,  # tie -> 1.0 (even)
    -(3.125 + 2.0**-33),  # -> -3.25
    1.5 * 2.0**-9 + 2.0**-40,  # subnormal midpoint -> 2**-8
    232.0 + 2.0**-25,  # -> 240
]


def test_float64_kv_entries_are_rounded_once_not_through_float32(flash: ModelConfig) -> None:
    """triton-lang/triton#10846 (fp32 -> fp8 through an f16 intermediate: a value slightly above
    an fp8 midpoint was rounded onto it first, and ties-to-even then chose the lower neighbour;
    the direct rounding goes up) for our codecs' float64 input: fp8 main entries (nope e4m3 and
    rope bf16), fp8 and fp4 indexer keys and the pool's bf16 storage all store the float64
    correctly rounded value (computed here on the formats' grids in float64), where float64 ->
    float32 -> narrow format rounds twice."""
    near = np.array(_E4M3_NEAR_MIDPOINTS)
    x = np.zeros((1, 512))
    x[0, 0] = 448.0  # block 0's scale is 1
    x[0, 1 : 1 + len(near)] = near
    x[0, 448:451] = [1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-8, -(3 + 2.0**-7 + 2.0**-33)]  # bf16 rope
    dec = kq.dequantize_kv_fp8(kq.quantize_kv_fp8(torch.from_numpy(x)), out_dtype=torch.float64).numpy()
    np.testing.assert_array_equal(dec, _fp8_main_oracle(x, 448))
    assert dec[0, 1] == 1.125 and dec[0, 448] == 1 + 2.0**-7

    key = np.zeros((1, flash.index_head_dim))
    key[0, 0] = 448.0
    key[0, 1 : 1 + len(near)] = near
    got = kq.dequantize_indexer_fp8(kq.quantize_indexer_fp8(torch.from_numpy(key)), out_dtype=torch.float64)
    np.testing.assert_array_equal(got.numpy(), _e4m3_round(key))

    key4 = np.zeros((1, flash.index_head_dim))
    key4[0, 0] = 6.0  # scale 1
    key4[0, 1:5] = [0.25 + 2.0**-40, 1.25 + 2.0**-40, -(2.5 + 2.0**-40), 5.0 - 2.0**-40]
    got4 = kq.dequantize_indexer_fp4(kq.quantize_indexer_fp4(torch.from_numpy(key4)), out_dtype=torch.float64)
    np.testing.assert_array_equal(got4.numpy()[0, :5], [6.0, 0.5, 1.5, -3.0, 4.0])

    pool = DSV4KVPool(flash, 256, 2, 2, 1, torch.float32, "cpu", kv_cache_dtype="bf16")
    vals = np.zeros((1, 512))
    vals[0, :3] = x[0, 448:451]
    rows = pool.rows(KVKind.SWA, 0)
    rows[torch.tensor([3])] = encode_entries(torch.from_numpy(vals), pool.spec(KVKind.SWA).entry)
    np.testing.assert_array_equal(rows[torch.tensor([3])].double().numpy(), _bf16_round(vals))
