"""Lightning-indexer scoring over fp4 keys at decode, one row, in isolation: how to decode e2m1.

An fp4 indexer key is 68 bytes: 64 bytes of e2m1 pairs (dim ``2j`` in the low nibble of byte ``j``)
and one ue8m0 scale byte per 32 dims (``sgl_kernel_v4.triton.kv_codec``). The fused decode scoring
kernel spends 17x the keys' read time decoding them (``benchmark/indexer_topk_profile.py``). This
script times minimal scoring kernels (``[BLOCK_C, 128] x [128, 64 heads]``, the same grid of 256
programs as ``indexer_score_variants.py``) over ``C`` contiguous fp4 keys, each decoding differently:

* ``codec``: ``kv_codec.load_key`` as the runtime uses it (one byte load and one scale-byte load
  per dim, fp32 arithmetic for the value and the scale);
* ``bits``: the same per-dim loads, the bf16 bit pattern built with integer ops (the scale's
  exponent added to the value's exponent field, no multiply);
* ``pairs``: each byte loaded once (``[BLOCK_C, 64]``), both nibbles decoded to bf16 bits, joined
  to ``[BLOCK_C, 128]``; the scale byte gathered per byte;
* ``blocks``: four dots of K = 32, one per scale block: 16 bytes and one scale byte per key and
  block, the scale added to the exponent as a per-row integer;
* ``evenodd``: eight dots of K = 16: the low and the high nibbles as two tiles, each against the
  matching (strided) columns of ``q``, so no join.

Each against the read floor of the 68-byte keys at the measured copy bandwidth, and the bf16 keys'
minimal kernel. The bf16 bit construction assumes an unscaled exponent field that stays normal
(ue8m0 bytes of stored keys are in [111, 130]: ``store_entry`` floors amax at 1e-4).
Usage: ``python3 benchmark/indexer_fp4_variants.py [--c 262144]``.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl
from sgl_kernel_v4.triton.kv_codec import load_key

EB = 68  # bytes per fp4 key of 128 dims


@triton.jit
def _nib(code, eadd):
    """bf16 of e2m1 codes ``code`` (int32, [0, 15]) times ``2 ** (eadd >> 7)``: integer ops only.
    Magnitudes 0.5 .. 6 are bf16 ``0x3F00 + (mag << 6)`` (less 64 for 0.5, the one subnormal)."""
    mag = code & 7
    bits = (mag << 6) + 0x3F00 - ((mag == 1).to(tl.int32) << 6) + eadd
    bits = tl.where(mag == 0, 0, bits) | ((code & 8) << 12)
    return bits.to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _block(base, j: tl.constexpr, cm):
    offs = tl.arange(0, 16)
    b = tl.load(base[:, None] + j * 16 + offs[None, :], mask=cm[:, None], other=0).to(tl.int32)
    sb = tl.load(base + 64 + j, mask=cm, other=127).to(tl.int32)
    eadd = ((sb - 127) << 7)[:, None]
    return _nib(b & 15, eadd), _nib(b >> 4, eadd)


@triton.jit
def _qcols(q_ptr, offs_h, start: tl.constexpr, step: tl.constexpr, n: tl.constexpr, D: tl.constexpr):
    return tl.load(q_ptr + offs_h[:, None] * D + start + step * tl.arange(0, n)[None, :])


@triton.jit
def _score_fp4(q_ptr, w_ptr, k_ptr, out_ptr, C, chunk, FORM: tl.constexpr, H: tl.constexpr, D: tl.constexpr,
               BLOCK_C: tl.constexpr):  # fmt: skip
    s = tl.program_id(0)
    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    w = tl.load(w_ptr + offs_h)
    c_end = tl.minimum(s * chunk + chunk, C)
    if FORM <= 2:
        q = tl.load(q_ptr + offs_h[:, None] * D + offs_d[None, :])
    elif FORM == 3:
        q0 = _qcols(q_ptr, offs_h, 0, 1, 32, D)
        q1 = _qcols(q_ptr, offs_h, 32, 1, 32, D)
        q2 = _qcols(q_ptr, offs_h, 64, 1, 32, D)
        q3 = _qcols(q_ptr, offs_h, 96, 1, 32, D)
    else:
        e0 = _qcols(q_ptr, offs_h, 0, 2, 16, D)
        o0 = _qcols(q_ptr, offs_h, 1, 2, 16, D)
        e1 = _qcols(q_ptr, offs_h, 32, 2, 16, D)
        o1 = _qcols(q_ptr, offs_h, 33, 2, 16, D)
        e2 = _qcols(q_ptr, offs_h, 64, 2, 16, D)
        o2 = _qcols(q_ptr, offs_h, 65, 2, 16, D)
        e3 = _qcols(q_ptr, offs_h, 96, 2, 16, D)
        o3 = _qcols(q_ptr, offs_h, 97, 2, 16, D)
    for c0 in range(s * chunk, c_end, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        cm = c < c_end
        base = tl.multiple_of(k_ptr + c.to(tl.int64) * 68, 4)
        if FORM == 0:
            k, ks = load_key(k_ptr, c.to(tl.int64) * 68, cm, offs_d, 3, D)
            sd = tl.dot(k.to(tl.bfloat16), tl.trans(q)) * ks[:, None]
        elif FORM == 1:
            m = cm[:, None]
            b = tl.load(base[:, None] + offs_d[None, :] // 2, mask=m, other=0).to(tl.int32)
            sb = tl.load(base[:, None] + 64 + offs_d[None, :] // 32, mask=m, other=127).to(tl.int32)
            k = _nib((b >> ((offs_d[None, :] % 2) * 4)) & 15, (sb - 127) << 7)
            sd = tl.dot(k, tl.trans(q))
        elif FORM == 2:
            offs_j = tl.arange(0, 64)
            m = cm[:, None]
            b = tl.load(base[:, None] + offs_j[None, :], mask=m, other=0).to(tl.int32)
            sb = tl.load(base[:, None] + 64 + offs_j[None, :] // 16, mask=m, other=127).to(tl.int32)
            eadd = (sb - 127) << 7
            k = tl.reshape(tl.join(_nib(b & 15, eadd), _nib(b >> 4, eadd)), [BLOCK_C, D])
            sd = tl.dot(k, tl.trans(q))
        elif FORM == 3:
            lo, hi = _block(base, 0, cm)
            sd = tl.dot(tl.reshape(tl.join(lo, hi), [BLOCK_C, 32]), tl.trans(q0))
            lo, hi = _block(base, 1, cm)
            sd = tl.dot(tl.reshape(tl.join(lo, hi), [BLOCK_C, 32]), tl.trans(q1), sd)
            lo, hi = _block(base, 2, cm)
            sd = tl.dot(tl.reshape(tl.join(lo, hi), [BLOCK_C, 32]), tl.trans(q2), sd)
            lo, hi = _block(base, 3, cm)
            sd = tl.dot(tl.reshape(tl.join(lo, hi), [BLOCK_C, 32]), tl.trans(q3), sd)
        else:
            lo, hi = _block(base, 0, cm)
            sd = tl.dot(lo, tl.trans(e0))
            sd = tl.dot(hi, tl.trans(o0), sd)
            lo, hi = _block(base, 1, cm)
            sd = tl.dot(lo, tl.trans(e1), sd)
            sd = tl.dot(hi, tl.trans(o1), sd)
            lo, hi = _block(base, 2, cm)
            sd = tl.dot(lo, tl.trans(e2), sd)
            sd = tl.dot(hi, tl.trans(o2), sd)
            lo, hi = _block(base, 3, cm)
            sd = tl.dot(lo, tl.trans(e3), sd)
            sd = tl.dot(hi, tl.trans(o3), sd)
        score = tl.sum(tl.maximum(sd, 0.0) * w[None, :], 1)
        tl.store(out_ptr + c, score, mask=cm)


#: (BLOCK_C, warps, stages) timed per form; the runtime's decode kernel uses (64, 4, 3)
CONFIGS = ((64, 4, 3), (128, 4, 3), (128, 8, 3), (64, 4, 1))
FORMS = {"codec": 0, "bits": 1, "pairs": 2, "blocks": 3, "evenodd": 4}
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def make_keys(c: int, d: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``(packed [c * 68] uint8, dequantized [c, d] float64)``: random e2m1 codes and ue8m0 scale
    bytes in [115, 130] (the range ``store_entry`` writes for unit-scale keys)."""
    codes = torch.randint(0, 16, (c, d), generator=g, device="cuda")
    sb = torch.randint(115, 131, (c, d // 32), generator=g, device="cuda")
    packed = torch.empty(c, EB, dtype=torch.uint8, device="cuda")
    packed[:, : d // 2] = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    packed[:, d // 2 :] = sb.to(torch.uint8)
    mag = torch.tensor(E2M1, dtype=torch.float64, device="cuda")[codes & 7]
    val = torch.where(codes >= 8, -mag, mag) * torch.pow(2.0, (sb - 127).double()).repeat_interleave(32, 1)
    return packed.reshape(-1), val


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--c", type=int, default=262144)
    a = ap.parse_args()
    import triton.testing as tt

    C, H, D = a.c, 64, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    k, kref = make_keys(C, D, g)
    q = torch.randn(H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(H, device="cuda", generator=g)
    out = torch.empty(C, device="cuda")
    ref = (torch.relu(kref @ q.double().T) * w.double()).sum(1)
    scale_ref = ref.abs().max().item()
    big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy_s = tt.do_bench(lambda: big.clone(), rep=50, return_mode="median") * 1e-3
    bw = 2 * big.numel() / copy_s
    floor_us = k.numel() / bw * 1e6
    print(
        f"C = {C}: fp4 keys {k.numel() / 1e6:.1f} MB, copy {bw / 1e12:.2f} TB/s, read floor {floor_us:.1f} us"
    )
    print(
        "| form | BLOCK_C | warps | stages | us | x floor | max rel err |\n|---|---:|---:|---:|---:|---:|---:|"
    )
    progs = 256
    chunk = triton.cdiv(triton.cdiv(C, progs), 64) * 64
    for form, fid in FORMS.items():
        for bc, nw, ns in CONFIGS:

            def run(fid: int = fid, bc: int = bc, nw: int = nw, ns: int = ns) -> None:
                _score_fp4[(progs,)](q, w, k, out, C, chunk, FORM=fid, H=H, D=D, BLOCK_C=bc, num_warps=nw,
                                     num_stages=ns)  # fmt: skip

            try:
                out.zero_()
                run()
                err = (out.double() - ref).abs().max().item() / scale_ref
                us = tt.do_bench_cudagraph(run, rep=30, return_mode="median") * 1e3
            except Exception as e:  # noqa: BLE001 - a config the compiler refuses is reported, not fatal
                print(f"| {form} | {bc} | {nw} | {ns} | failed: {type(e).__name__}: {str(e)[:80]} |")
                continue
            print(f"| {form} | {bc} | {nw} | {ns} | {us:.1f} | {us / floor_us:.2f} | {err:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
