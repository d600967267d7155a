"""Round-trip tests of the fp8 / fp4 KV-cache encoders against an independent float64 reference.

The reference here rounds to the *enumerated* grid of representable values (e4m3fn: all 127 finite
non-negative codes; e2m1: 0, 0.5, ..., 6) with ties to the even code, computes the power-of-two
scales with ``math.frexp`` in float64, and decodes the bytes itself (its own e4m3 / e2m1 / bf16
bit decoding, its own reading of the byte layout), so neither side shares code with
``sgl_kernel_v4.ref.kv_quant``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sgl_kernel_v4.ref import kv_quant as kq

# ---------------------------------------------------------------------------------------------
# independent reference
# ---------------------------------------------------------------------------------------------


def _e4m3_grid() -> np.ndarray:
    """Non-negative finite e4m3fn values indexed by their 7-bit code (0..126; 127 is NaN)."""
    vals = []
    for code in range(127):
        e, m = code >> 3, code & 7
        vals.append((m / 8) * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3 = _e4m3_grid()
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def _round_to_grid(v: np.ndarray, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest grid value (ties to the even code); returns (signed values, codes)."""
    a = np.abs(v)
    assert (a <= grid[-1]).all()
    hi = np.clip(np.searchsorted(grid, a, side="left"), 1, len(grid) - 1)
    lo = hi - 1
    dlo, dhi = a - grid[lo], grid[hi] - a
    idx = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return np.sign(v) * grid[idx], idx


def _ceil_log2(r: float) -> int:
    m, e = math.frexp(r)
    return e - 1 if m == 0.5 else e


def _pow2_scale_exp(amax: float, qmax: float) -> int:
    return _ceil_log2(max(amax, 1e-4) / qmax)


def _bf16_round(x32: np.ndarray) -> np.ndarray:
    """float32 -> bf16 (round to nearest even) -> float64, by bit manipulation."""
    bits = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def _decode_e4m3_bytes(b: np.ndarray) -> np.ndarray:
    mag = E4M3[b & 0x7F]
    return np.where(b & 0x80, -mag, mag)


def _decode_bf16_bytes(b: np.ndarray) -> np.ndarray:
    """[N, 2k] little-endian bytes -> [N, k] float64."""
    lo, hi = b[:, 0::2].astype(np.uint32), b[:, 1::2].astype(np.uint32)
    return (((hi << 8) | lo) << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def _half_ulp_e4m3(v: np.ndarray) -> np.ndarray:
    """Half an e4m3 ulp at magnitude |v| (subnormal spacing 2^-9 below 2^-6)."""
    a = np.abs(v)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return 0.5 * 2.0 ** (np.maximum(e, -6) - 3)


def _half_ulp_e2m1(v: np.ndarray) -> np.ndarray:
    a = np.abs(v)
    return np.where(a < 2, 0.25, np.where(a < 4, 0.5, 1.0))


def _test_inputs(n_rows: int, dim: int, seed: int) -> torch.Tensor:
    """Rows mixing magnitudes 1e-8 .. 1e6 per 32-column chunk, zeros, negatives, outliers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, dim, generator=g, dtype=torch.float64)
    mags = 10.0 ** torch.randint(-8, 7, (n_rows, dim // 32), generator=g).double()
    x = x * mags.repeat_interleave(32, dim=1)
    x[0] = 0.0  # all-zero row
    if n_rows > 2:
        x[1, : dim // 2] = 0.0  # zero blocks inside a non-zero row
        x[2] = -x[2].abs()  # all negative
    if n_rows > 3:
        x[3] = torch.randn(dim, generator=g, dtype=torch.float64) * 1e-3
        x[3, 5] = 3e3  # outlier: the rest of its block lands in e4m3 subnormals
    return x.float()


# ---------------------------------------------------------------------------------------------
# attention KV entries (fp8_ds_mla V4 layout)
# ---------------------------------------------------------------------------------------------


def _check_kv_fp8(x: torch.Tensor, rope_dim: int, quant_block: int = 64) -> None:
    n, head_dim = x.shape
    nope = head_dim - rope_dim
    nb = nope // quant_block
    b = kq.quantize_kv_fp8(x, rope_dim=rope_dim, quant_block=quant_block)
    entry = nope + 2 * rope_dim + nb + 1
    assert b.dtype == torch.uint8 and tuple(b.shape) == (n, entry)
    assert entry == kq.kv_fp8_entry_bytes(head_dim, rope_dim, quant_block)
    bn = b.numpy()
    x64 = x.double().numpy()
    # layout: [nope e4m3 | rope bf16 | nb ue8m0 | 1 zero pad]
    assert (bn[:, -1] == 0).all()
    exps = bn[:, nope + 2 * rope_dim : nope + 2 * rope_dim + nb].astype(np.int64) - 127
    vals = _decode_e4m3_bytes(bn[:, :nope])
    rope = _decode_bf16_bytes(bn[:, nope : nope + 2 * rope_dim])
    for r in range(n):
        for blk in range(nb):
            xs = x64[r, blk * quant_block : (blk + 1) * quant_block]
            k = _pow2_scale_exp(float(np.abs(xs).max()), 448.0)
            assert exps[r, blk] == k, (r, blk)
            s = 2.0**k
            ref, _ = _round_to_grid(xs / s, E4M3)
            got = vals[r, blk * quant_block : (blk + 1) * quant_block] * s
            np.testing.assert_array_equal(got, ref * s)
            assert (np.abs(got - xs) <= _half_ulp_e4m3(xs / s) * s).all()
    # rope slice: bf16 round-to-nearest-even of the input, error <= half a bf16 ulp
    xr = x64[:, nope:]
    np.testing.assert_array_equal(rope, _bf16_round(x[:, nope:].numpy()))
    a = np.abs(xr)
    half_ulp = 0.5 * 2.0 ** (np.floor(np.log2(np.where(a > 0, a, 1.0))) - 7)
    assert (np.abs(rope - xr) <= half_ulp).all()
    # the module's decoder agrees with ours
    deq = kq.dequantize_kv_fp8(b, rope_dim=rope_dim, quant_block=quant_block).double().numpy()
    ours = np.concatenate([vals * np.repeat(2.0**exps, quant_block, axis=1), rope], axis=1)
    np.testing.assert_array_equal(deq, ours)


def test_kv_fp8_v4_shape_584_bytes() -> None:
    x = _test_inputs(24, 512, seed=0)
    assert kq.kv_fp8_entry_bytes(512, 64) == 448 + 128 + 7 + 1 == 584
    assert kq.kv_fp8_data_bytes(512, 64) == 576
    _check_kv_fp8(x, rope_dim=64)


def test_kv_fp8_ties_round_to_even() -> None:
    # block amax 448 -> scale 1; 1.0625 is halfway between 1.0 (even) and 1.125 (odd)
    x = torch.zeros(1, 512)
    x[0, 0] = 448.0
    x[0, 1:5] = torch.tensor([1.0625, 1.1875, -1.0625, 0.5 * 2.0**-9])
    b = kq.quantize_kv_fp8(x)
    deq = kq.dequantize_kv_fp8(b)
    assert deq[0, 1:5].tolist() == [1.0, 1.25, -1.0, 0.0]
    _check_kv_fp8(x, rope_dim=64)


def test_kv_fp8_generic_dims_and_bf16_input() -> None:
    # tiny model: head_dim 128, rope 64 -> nope 64, one scale: 64 + 128 + 1 + 1 = 194 bytes
    assert kq.kv_fp8_entry_bytes(128, 64) == 194
    _check_kv_fp8(_test_inputs(8, 128, seed=1), rope_dim=64)
    _check_kv_fp8(_test_inputs(8, 256, seed=2), rope_dim=64)  # 3 scales
    xb = _test_inputs(8, 512, seed=3).to(torch.bfloat16)
    _check_kv_fp8(xb.float(), rope_dim=64)
    assert torch.equal(kq.quantize_kv_fp8(xb), kq.quantize_kv_fp8(xb.float()))


def test_kv_fp8_roundtrip_error_is_small_for_typical_keys() -> None:
    # post-RMSNorm keys are O(1): relative error of e4m3 with per-64 pow2 scales < 2^-4
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(4))
    y = kq.dequantize_kv_fp8(kq.quantize_kv_fp8(x))
    blk = x[:, :448].reshape(64, 7, 64).abs().amax(-1, keepdim=True)
    err = (y[:, :448] - x[:, :448]).reshape(64, 7, 64).abs()
    assert (err <= blk * 2.0**-4).all()
    assert torch.isfinite(y).all()


def test_kv_fp8_bad_input() -> None:
    with pytest.raises(ValueError, match="quant_block"):
        kq.quantize_kv_fp8(torch.zeros(2, 100), rope_dim=64)
    with pytest.raises(ValueError, match="x"):
        kq.quantize_kv_fp8(torch.zeros(2, 4, 512))
    with pytest.raises(ValueError, match="floating"):
        kq.quantize_kv_fp8(torch.zeros(2, 512, dtype=torch.int32))
    with pytest.raises(ValueError, match="b"):
        kq.dequantize_kv_fp8(torch.zeros(2, 583, dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------
# indexer keys
# ---------------------------------------------------------------------------------------------


def test_indexer_fp8_132_bytes() -> None:
    x = _test_inputs(24, 128, seed=5)
    b = kq.quantize_indexer_fp8(x)
    assert tuple(b.shape) == (24, 132) == (24, kq.indexer_fp8_entry_bytes(128))
    bn = b.numpy()
    x64 = x.double().numpy()
    scale = bn[:, 128:].copy().view(np.float32)[:, 0].astype(np.float64)  # little-endian fp32
    vals = _decode_e4m3_bytes(bn[:, :128])
    for r in range(24):
        k = _pow2_scale_exp(float(np.abs(x64[r]).max()), 448.0)
        assert scale[r] == 2.0**k
        ref, _ = _round_to_grid(x64[r] / scale[r], E4M3)
        np.testing.assert_array_equal(vals[r] * scale[r], ref * scale[r])
        assert (np.abs(vals[r] * scale[r] - x64[r]) <= _half_ulp_e4m3(x64[r] / scale[r]) * scale[r]).all()
    np.testing.assert_array_equal(kq.dequantize_indexer_fp8(b).double().numpy(), vals * scale[:, None])


def test_indexer_fp4_68_bytes() -> None:
    x = _test_inputs(24, 128, seed=6)
    b = kq.quantize_indexer_fp4(x)
    assert tuple(b.shape) == (24, 68) == (24, kq.indexer_fp4_entry_bytes(128))
    bn = b.numpy()
    x64 = x.double().numpy()
    # our own decode: byte j = element 2j (low nibble) | element 2j+1 (high nibble); bit 3 sign
    codes = np.stack([bn[:, :64] & 0x0F, bn[:, :64] >> 4], axis=-1).reshape(24, 128)
    vals = np.where(codes & 8, -1.0, 1.0) * E2M1[codes & 7]
    exps = bn[:, 64:].astype(np.int64) - 127
    for r in range(24):
        for blk in range(4):
            xs = x64[r, 32 * blk : 32 * blk + 32]
            k = _ceil_log2(max(float(np.abs(xs).max()) / 6.0, 1e-4))
            k = min(max(k, -126), 127)
            assert exps[r, blk] == k, (r, blk)
            s = 2.0**k
            ref, _ = _round_to_grid(xs / s, E2M1)
            got = vals[r, 32 * blk : 32 * blk + 32] * s
            np.testing.assert_array_equal(got, ref * s)
            assert (np.abs(got - xs) <= _half_ulp_e2m1(xs / s) * s).all()
    deq = kq.dequantize_indexer_fp4(b).double().numpy()
    np.testing.assert_array_equal(deq, vals * np.repeat(2.0**exps, 32, axis=1))


def test_indexer_fp4_ties_and_signs() -> None:
    # amax 6 -> scale 1; midpoints 0.25 .. 5.0 go to the even code
    x = torch.zeros(1, 128)
    x[0, 0] = 6.0
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    x[0, 1:8] = torch.tensor(mids)
    x[0, 8:15] = -torch.tensor(mids)
    x[0, 15] = -0.1  # rounds to zero: no negative-zero code
    y = kq.dequantize_indexer_fp4(kq.quantize_indexer_fp4(x))[0]
    expect = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert y[1:8].tolist() == expect
    assert y[8:15].tolist() == [-v if v else 0.0 for v in expect]
    b = kq.quantize_indexer_fp4(x)
    assert int(b[0, 7] >> 4) == 0  # element 15 -> code 0, not 8


def test_indexer_bad_input() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        kq.quantize_indexer_fp4(torch.zeros(2, 48))
    with pytest.raises(ValueError):
        kq.dequantize_indexer_fp4(torch.zeros(2, 67, dtype=torch.uint8))
    with pytest.raises(ValueError):
        kq.dequantize_indexer_fp8(torch.zeros(2, 4, dtype=torch.uint8))


# ---------------------------------------------------------------------------------------------
# page form
# ---------------------------------------------------------------------------------------------


def test_paged_form_matches_peer_offsets() -> None:
    """A 64-entry V4 page: data rows at i * 576, scale rows at 64 * 576 + i * 8, padded to 37,440."""
    x = _test_inputs(128, 512, seed=7)
    entries = kq.quantize_kv_fp8(x).reshape(2, 64, 584)
    pages = kq.entries_to_paged(entries, data_bytes=576, page_bytes=37440)
    assert tuple(pages.shape) == (2, 37440)
    for p in range(2):
        for i in (0, 1, 37, 63):
            assert torch.equal(pages[p, i * 576 : (i + 1) * 576], entries[p, i, :576])
            off = 64 * 576 + i * 8
            assert torch.equal(pages[p, off : off + 8], entries[p, i, 576:])
    assert (pages[:, 64 * 584 :] == 0).all()
    assert torch.equal(kq.paged_to_entries(pages, 64, 584, 576), entries)
    with pytest.raises(ValueError, match="page_bytes"):
        kq.entries_to_paged(entries, 576, page_bytes=100)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_bytes() -> None:
    x = _test_inputs(64, 512, seed=8)
    xi = _test_inputs(64, 128, seed=9)
    for fn, inp in (
        (kq.quantize_kv_fp8, x),
        (kq.quantize_indexer_fp8, xi),
        (kq.quantize_indexer_fp4, xi),
    ):
        assert torch.equal(fn(inp.cuda()).cpu(), fn(inp))
    b = kq.quantize_kv_fp8(x)
    assert torch.equal(kq.dequantize_kv_fp8(b.cuda()).cpu(), kq.dequantize_kv_fp8(b))
