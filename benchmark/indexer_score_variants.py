"""Lightning-indexer scoring at decode, one row, in isolation: which formulation reaches HBM speed.

The indexer's score of entry ``w`` is ``sum_h weights[h] * relu(scale * q[h] . k[w])`` (64 heads x
128 dims). The fused kernel in ``sgl_kernel_v4.triton.indexer`` computes ``q @ k^T`` (heads on the
MMA's M side) and sums the heads across the accumulator's rows. This script times minimal scoring
kernels over ``C`` contiguous bf16 keys (no page table) with the same grid (256 programs):

* ``heads_m``: ``[64 heads, 128] x [128, BLOCK_C]``, then a sum over the rows (today's form);
* ``keys_m``: ``[BLOCK_C, 128] x [128, 64 heads]``, then a sum over the columns;

each at several ``BLOCK_C`` / warp counts, against the time to read the keys once at the measured
copy bandwidth. Usage: ``python3 benchmark/indexer_score_variants.py [--c 262144]``.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl


@triton.jit
def _score(q_ptr, w_ptr, k_ptr, out_ptr, C, chunk, KEYS_M: tl.constexpr, H: tl.constexpr, D: tl.constexpr,
           BLOCK_C: tl.constexpr):  # fmt: skip
    s = tl.program_id(0)
    offs_h = tl.arange(0, H)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_h[:, None] * D + offs_d[None, :])
    w = tl.load(w_ptr + offs_h)
    c_end = tl.minimum(s * chunk + chunk, C)
    for c0 in range(s * chunk, c_end, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        cm = c < c_end
        k = tl.load(k_ptr + c.to(tl.int64)[:, None] * D + offs_d[None, :], mask=cm[:, None], other=0.0)
        if KEYS_M:
            sd = tl.dot(k, tl.trans(q))  # [BLOCK_C, H]
            score = tl.sum(tl.maximum(sd, 0.0) * w[None, :], 1)
        else:
            sd = tl.dot(q, tl.trans(k))  # [H, BLOCK_C]
            score = tl.sum(tl.maximum(sd, 0.0) * w[:, None], 0)
        tl.store(out_ptr + c, score, mask=cm)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--c", type=int, default=262144)
    a = ap.parse_args()
    import triton.testing as tt

    C, H, D = a.c, 64, 128
    g = torch.Generator(device="cuda").manual_seed(0)
    k = torch.randn(C, D, device="cuda", dtype=torch.bfloat16, generator=g)
    q = torch.randn(H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(H, device="cuda", generator=g)
    out = torch.empty(C, device="cuda")
    ref = (torch.relu(k.float() @ q.float().T) * w).sum(1)
    big = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy_s = tt.do_bench(lambda: big.clone(), rep=50, return_mode="median") * 1e-3
    bw = 2 * big.numel() / copy_s
    floor_us = k.numel() * 2 / bw * 1e6
    print(
        f"C = {C}: keys {k.numel() * 2 / 1e6:.1f} MB, copy {bw / 1e12:.2f} TB/s, read floor {floor_us:.1f} us"
    )
    print("| form | BLOCK_C | warps | stages | us | x floor | max err |\n|---|---:|---:|---:|---:|---:|---:|")
    progs = 256
    chunk = triton.cdiv(triton.cdiv(C, progs), 64) * 64
    for keys_m in (False, True):
        for bc in (64, 128, 256):
            for nw in (4, 8):
                for ns in (1, 3):

                    def run(keys_m: bool = keys_m, bc: int = bc, nw: int = nw, ns: int = ns) -> None:
                        _score[(progs,)](q, w, k, out, C, chunk, KEYS_M=keys_m, H=H, D=D, BLOCK_C=bc, num_warps=nw,
                                         num_stages=ns)  # fmt: skip

                    try:
                        us = tt.do_bench_cudagraph(run, rep=30, return_mode="median") * 1e3
                    except Exception as e:  # noqa: BLE001 - a config the compiler refuses is reported, not fatal
                        print(
                            f"| {'keys_m' if keys_m else 'heads_m'} | {bc} | {nw} | {ns} | failed: {type(e).__name__} |"
                        )
                        continue
                    err = (out - ref).abs().max().item()
                    form = "keys_m" if keys_m else "heads_m"
                    print(f"| {form} | {bc} | {nw} | {ns} | {us:.1f} | {us / floor_us:.2f} | {err:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
