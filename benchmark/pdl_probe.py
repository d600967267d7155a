"""Programmatic dependent launch (PDL) on a chain of dependent small kernels, in a CUDA graph.

Each kernel of the chain reads the previous kernel's output, so without PDL every kernel waits for
the whole previous grid to finish and be flushed before its own launch begins; with PDL
(``launch_pdl=True`` plus ``griddepcontrol.wait`` at the top of the kernel) the next grid is
launched while the previous one runs and waits on the device. Two sizes: a bs-1 RMS-norm-like
row pass (4,096 elements, one program) and a GEMV (``[1, K] x [K, N]`` bf16, 64 programs).
Reports µs per kernel (CUDA-graph replay of ``--chain`` kernels, median of ``--reps``) for:
``off`` (plain launches), ``wait`` (PDL, wait first), ``wait+trigger`` (PDL, wait first, then
``griddepcontrol.launch_dependents`` so the following grid may start its launch at once).

Usage (GPU, sm_90+): ``python benchmark/pdl_probe.py --out $OUT/pdl.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import graph_us  # noqa: E402


@triton.jit
def _row_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, PDL: tl.constexpr, TRIGGER: tl.constexpr):
    if PDL:
        gdc_wait()
        if TRIGGER:
            gdc_launch_dependents()
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x) / n + 1e-6)
    tl.store(y_ptr + offs, (x * r).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, y_ptr, K, N, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PDL: tl.constexpr, TRIGGER: tl.constexpr):  # fmt: skip
    if PDL:
        gdc_wait()
        if TRIGGER:
            gdc_launch_dependents()
    pid = tl.program_id(0)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rk).to(tl.float32)
        w = tl.load(w_ptr + rn[:, None] * K + rk[None, :]).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(y_ptr + rn, (acc * 1e-3).to(y_ptr.dtype.element_ty))


def chain(kind: str, mode: str, n_chain: int, reps: int) -> float:
    """µs per kernel of a CUDA-graph replay of ``n_chain`` dependent launches."""
    pdl, trig = mode != "off", mode == "wait+trigger"
    dev = torch.device("cuda")
    if kind == "row":
        n = 4096
        bufs = [torch.randn(n, device=dev, dtype=torch.bfloat16) for _ in range(2)]

        def launch(i: int) -> None:
            _row_kernel[(1,)](bufs[i % 2], bufs[(i + 1) % 2], n, BLOCK=4096, PDL=pdl, TRIGGER=trig,
                              launch_pdl=pdl, num_warps=4)  # fmt: skip
    else:
        K = N = 4096
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
        bufs = [torch.randn(K, device=dev, dtype=torch.bfloat16) for _ in range(2)]

        def launch(i: int) -> None:
            _gemv_kernel[(N // 64,)](bufs[i % 2], w, bufs[(i + 1) % 2], K, N, BLOCK_N=64, BLOCK_K=128, PDL=pdl,
                                     TRIGGER=trig, launch_pdl=pdl, num_warps=4)  # fmt: skip

    return graph_us([lambda i=i: launch(i) for i in range(n_chain)], reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chain", type=int, default=400)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    res: dict[str, dict[str, list[float]]] = {}
    for kind in ("row", "gemv"):
        res[kind] = {}
        for _ in range(3):  # alternate the modes: three medians each
            for mode in ("off", "wait", "wait+trigger"):
                res[kind].setdefault(mode, []).append(chain(kind, mode, a.chain, a.reps))
    for kind, modes in res.items():
        for mode, v in modes.items():
            print(
                f"{kind:5s} {mode:13s} us/kernel {statistics.median(v):7.3f}  runs {[round(x, 3) for x in v]}"
            )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
