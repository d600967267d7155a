"""The packed-register (SIMD within a 32-bit register) decodes of the FP8 / FP4 Triton kernels,
replayed on the CPU from the same constants the PTX is generated from, on every input byte.

The PTX runs only on the GPU (``test_kernels_fp8_gemm.py`` / ``test_kernels_moe_fp4.py`` check the
compiled decode there); this replays its integer steps here (``prmt``, shifts, masks, then the exact
bf16 multiply), so a wrong shift or mask in a plan fails on any machine. Oracles: the e4m3 and
e2m1 values from their bit fields (``quant_testutil``).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from quant_testutil import e4m3_grid64, fp4_weight64

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

M32 = 0xFFFFFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    """PTX ``prmt.b32`` (default mode): result byte i = byte ``sel`` nibble i of ``{b, a}``."""
    src = (b << 32) | a
    out = 0
    for i in range(4):
        n = (sel >> (4 * i)) & 0xF
        byte = (src >> (8 * (n & 7))) & 0xFF
        if n & 8:  # sign replication
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _shift(v: int, n: int) -> int:
    return ((v << n) if n >= 0 else (v >> -n)) & M32


def _bf16(bits16: int) -> float:
    """bf16 bits -> float (exact, subnormals included)."""
    sign = -1.0 if bits16 & 0x8000 else 1.0
    e, m = (bits16 >> 7) & 0xFF, bits16 & 0x7F
    return sign * (m / 128 * 2.0**-126 if e == 0 else (1 + m / 128) * 2.0 ** (e - 127))


def _halves(v: int) -> tuple[int, int]:
    return v & 0xFFFF, v >> 16


def test_fp4_packed_decode_plan_every_byte_pair() -> None:
    """``fp4_tile``'s PTX plan: the lo / hi bf16x2 registers of a byte pair, times the scale
    register ``2**(b-1)``, equal the e2m1 values times ``2**(b-127)`` for every byte pair and the
    extreme supported scales."""
    from sgl_kernel_v4.triton import fp4_tile as ft

    rows = torch.arange(256, dtype=torch.uint8)[:, None].repeat(1, 16)  # row v: 16 bytes of value v
    for b in (1, 100, 119, 127, 128):
        want = fp4_weight64(rows, torch.full((256, 1), b, dtype=torch.uint8))[:, :2]  # byte v -> (lo, hi)
        scale = 2.0 ** (b - 1)  # the scale register's bf16 value (exponent field b - 1)
        for b0 in range(256):
            b1 = (b0 * 7 + 3) % 256  # every byte in both positions
            w = _prmt(b0 | (b1 << 8), 0, ft.BYTE_PERM)
            for nib, mag, sign in ft.SWAR_PLAN:
                reg = (_shift(w, mag) & ft.MAG_MASK) | (_shift(w, sign) & ft.SIGN_MASK)
                h0, h1 = _halves(reg)
                col = 0 if nib == "lo" else 1
                assert _bf16(h0) * scale == want[b0, col].item(), (b, b0, nib)
                assert _bf16(h1) * scale == want[b1, col].item(), (b, b1, nib)


def test_e4m3_packed_decode_plan_every_code() -> None:
    """``fp8_gemm``'s PTX plan: each bf16x2 register of a byte pair times ``2**120`` equals the two
    e4m3 values, for every finite code in both positions."""
    from sgl_kernel_v4.triton import fp8_gemm as fg

    grid = e4m3_grid64()

    def value(c: int) -> float:
        return (-1.0 if c & 0x80 else 1.0) * grid[c & 0x7F].item()

    finite = [c for c in range(256) if c & 0x7F != 0x7F]
    for b0 in finite:
        b1 = finite[(finite.index(b0) * 11 + 5) % len(finite)]
        w = _prmt(b0 | (b1 << 8), 0, fg.E4M3_PERM)
        reg = (_shift(w, fg.E4M3_MAG_SHIFT) & fg.E4M3_MAG_MASK) | (
            _shift(w, fg.E4M3_SIGN_SHIFT) & fg.E4M3_SIGN_MASK
        )
        h0, h1 = _halves(reg)
        assert _bf16(h0) * 2.0**120 == value(b0), b0
        assert _bf16(h1) * 2.0**120 == value(b1), b1
    assert (
        _halves(fg.BF16X2_2P120)[0] == _halves(fg.BF16X2_2P120)[1]
        and _bf16(fg.BF16X2_2P120 & 0xFFFF) == 2.0**120
    )
