"""Every FP4 (e2m1 + ue8m0) encoder and decoder of the project against one float64 reference.

The encoders: the weight quantizer (``model_loader.quant.quantize_fp4``, also what
``tools/make_checkpoint`` and the loader's quantize-on-load use) and the indexer-key codec
(``sgl_kernel_v4.ref.kv_quant.quantize_indexer_fp4``; the Triton ``store_entry`` is checked
byte-for-byte against it in ``test_kernels_kv_codec``). The decoders: ``dequantize_fp4``, the MoE
reference's ``dequant_fp4`` and ``dequantize_indexer_fp4``.

The reference is written here from the format alone (docs/QUANTIZATION.md; OCP MX v1.0): e2m1
magnitude of code ``(e, m)`` is ``m / 2`` for ``e == 0`` else ``2 ** (e - 1) * (1 + m / 2)``;
rounding is to the nearest magnitude, a tie to the one whose 3-bit code is even; scales are powers
of two found with ``math.frexp`` on float64. Each encoder's documented scale rule is restated:
weights ``max(pow2ceil(amax / 6), 2 ** -127)`` (1 for an all-zero group), indexer keys
``2 ** clamp(ceil(log2(max(amax / 6, 1e-4))), -126, 127)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from sgl_kernel_v4.ref import kv_quant as kq
from sgl_kernel_v4.ref.moe_fp4 import dequant_fp4
from sglang_v4.model_loader.quant import dequantize_fp4, quantize_fp4


def _e2m1_magnitude(code: int) -> float:
    e, m = (code >> 1) & 3, code & 1
    return m / 2 if e == 0 else 2.0 ** (e - 1) * (1 + m / 2)


MAGS = [_e2m1_magnitude(c) for c in range(8)]  # 0, .5, 1, 1.5, 2, 3, 4, 6


def _rne_code(v: float) -> int:
    """3-bit magnitude code of ``|v|`` (``|v| <= 6``) rounded to nearest, ties to the even code."""
    d = [abs(abs(v) - m) for m in MAGS]
    best = min(d)
    near = [c for c in range(8) if d[c] == best]
    return near[0] if len(near) == 1 else next(c for c in near if c % 2 == 0)


def _ceil_log2(r: float) -> int:
    m, e = math.frexp(r)  # r = m * 2**e, m in [0.5, 1)
    return e - 1 if m == 0.5 else e


def _weight_scale(group: list[float]) -> float:
    amax = max(abs(x) for x in group)
    return 1.0 if amax == 0 else max(2.0 ** _ceil_log2(amax / 6), 2.0**-127)


def _indexer_scale(group: list[float]) -> float:
    amax6 = max(abs(x) for x in group) / 6  # float64 here; the encoders divide in float32
    return 2.0 ** min(max(_ceil_log2(max(amax6, 1e-4)), -126), 127)


def _reference(
    rows: torch.Tensor, scale_rule: Callable[[list[float]], float], zero_sign: bool
) -> tuple[list[list[int]], list[list[float]]]:
    """Per row: the 4-bit codes and their float64 values; ``zero_sign`` keeps the sign bit of a
    negative value that rounds to zero."""
    codes, vals = [], []
    for row in rows.double().tolist():
        rc, rv = [], []
        for g0 in range(0, len(row), 32):
            group = row[g0 : g0 + 32]
            s = scale_rule(group)
            for x in group:
                c = _rne_code(x / s)
                neg = x < 0 and (zero_sign or c != 0)
                rc.append(c | (8 if neg else 0))
                rv.append((-1.0 if neg else 1.0) * MAGS[c] * s)
        codes.append(rc)
        vals.append(rv)
    return codes, vals


def _cases() -> torch.Tensor:
    """``[N, 128]`` float32 rows: every multiple of 1/8 in [-6, 6] (the seven midpoints among
    them), values 2**-20 off each midpoint, at scales 2**k from subnormal to large; random rows."""
    eighths = [i / 8 for i in range(-48, 49)]
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    near = [m + d for m in mids for d in (2.0**-20, -(2.0**-20))]
    base = eighths + near + [-m for m in near]
    base += [6.0] * (-len(base) % 32)
    groups = [base[i : i + 31] + [6.0] for i in range(0, len(base), 31)]  # amax 6 in each group
    flat = [x for g in groups for x in g]
    flat += [0.0] * (-len(flat) % 128)
    unit = torch.tensor(flat, dtype=torch.float64).reshape(-1, 128)
    rows = [unit * 2.0**k for k in (-149, -140, -130, -128, -127, -126, -125, -100, -16, -3, 0, 5, 40)]
    rows.append(torch.full((1, 128), 2.0**-149, dtype=torch.float64))  # amax / 6 underflows in float32
    g = torch.Generator().manual_seed(7)
    rnd = (
        torch.randn(16, 128, generator=g, dtype=torch.float64)
        * torch.logspace(-42, 3, 16, dtype=torch.float64)[:, None]
    )
    rows.append(rnd)
    return torch.cat(rows).to(torch.float32)  # the references read these float32 values


def test_weight_quantizer_matches_the_float64_reference() -> None:
    x = _cases()
    packed, scale = quantize_fp4(x)
    want_codes, want_vals = _reference(x, _weight_scale, zero_sign=True)
    u = packed.view(torch.uint8).to(torch.int64)
    codes = torch.stack([u & 15, u >> 4], dim=-1).reshape(x.shape)
    assert codes.tolist() == want_codes
    got = dequantize_fp4(packed, scale).double()
    assert torch.equal(got, torch.tensor(want_vals, dtype=torch.float64))
    assert torch.equal(dequant_fp4(packed, scale.view(torch.uint8)).double(), got)  # the MoE reference
    # make_checkpoint stores the e8m0 scale; its byte is the reference's exponent + 127 (0 = 2**-127)
    want_b = [
        [_ceil_log2(_weight_scale(r[i : i + 32])) + 127 for i in range(0, 128, 32)]
        for r in x.double().tolist()
    ]
    assert scale.view(torch.uint8).tolist() == want_b


def test_indexer_key_codec_matches_the_float64_reference() -> None:
    x = _cases()
    b = kq.quantize_indexer_fp4(x)
    want_codes, want_vals = _reference(x, _indexer_scale, zero_sign=False)
    u = b[:, :64].to(torch.int64)
    assert torch.stack([u & 15, u >> 4], dim=-1).reshape(x.shape).tolist() == want_codes
    assert torch.equal(kq.dequantize_indexer_fp4(b).double(), torch.tensor(want_vals, dtype=torch.float64))


def test_both_encoders_round_a_shared_group_alike() -> None:
    """At a scale both rules give (amax 6, scale 1) the two encoders' magnitude codes are equal, and
    differ only in the sign bit of a negative value that rounds to zero (weights keep -0)."""
    x = _cases()[:2]
    u = quantize_fp4(x)[0].view(torch.uint8).to(torch.int64)
    w_codes = torch.stack([u & 15, u >> 4], dim=-1).reshape(x.shape)
    v = kq.quantize_indexer_fp4(x)[:, :64].to(torch.int64)
    k_codes = torch.stack([v & 15, v >> 4], dim=-1).reshape(x.shape)
    assert torch.equal(w_codes & 7, k_codes & 7)
    assert torch.equal(w_codes != k_codes, (w_codes == 8) & (x < 0))


def test_every_byte_decodes_to_the_format_table() -> None:
    """All 256 bytes at ue8m0 bytes 0 (2**-127), 1, 120, 127 and 130, through the three decoders."""
    u = torch.arange(256, dtype=torch.uint8).repeat(1, 8)  # 2048 bytes, 4096 values
    packed = u.reshape(4, 512)
    sb = torch.tensor([0, 1, 120, 127, 130], dtype=torch.uint8)
    sbytes = sb.repeat(7)[:32].reshape(1, 32).repeat(4, 1)  # [4, 1024 / 32]
    want = []
    for r in range(4):
        row = []
        for j, byte in enumerate(packed[r].tolist()):
            s = 2.0 ** (int(sbytes[r, (2 * j) // 32]) - 127)
            for code in (byte & 15, byte >> 4):
                row.append((-1.0 if code & 8 else 1.0) * MAGS[code & 7] * s)
        want.append(row)
    want_t = torch.tensor(want, dtype=torch.float64)
    assert torch.equal(
        dequantize_fp4(packed.view(torch.int8), sbytes.view(torch.float8_e8m0fnu)).double(), want_t
    )
    assert torch.equal(dequant_fp4(packed, sbytes).double(), want_t)
    # the indexer row: 64 packed bytes then 4 exponent bytes per 128 values
    rows = torch.cat([packed.reshape(-1, 64), sbytes.reshape(-1, 4)], dim=1)
    assert torch.equal(kq.dequantize_indexer_fp4(rows).double(), want_t.reshape(-1, 128))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_weight_quantizer_refuses_nan_and_infinity(bad: float) -> None:
    """e2m1 has no NaN or infinity: a weight holding one is a ValueError naming it (before, a NaN
    was encoded as 0 beside a scale of 1 and an infinity gave the NaN scale byte 255)."""
    w = torch.zeros(2, 64)
    w[1, 40] = bad
    with pytest.raises(ValueError, match=r"layers\.0\.ffn\.experts\.0\.w1\.weight.*NaN or infinity"):
        quantize_fp4(w, name="layers.0.ffn.experts.0.w1.weight")
