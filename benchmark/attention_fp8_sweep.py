"""Sparse attention over fp8 (584-byte) main-KV entries: tile / alignment sweep against bf16 pools.

For each query-token count ``T`` (decode batch sizes and a prefill chunk) the kernel
(``sgl_kernel_v4.triton.attention.sparse_attention``, CSA shape: 128-key window + 512 selected
compressed entries, 64 heads x 512) runs over

* bf16 pools (the baseline, default tiles), and
* the same entries encoded as fp8 main entries (``mem_cache.kv_format``), for every
  ``(block_n, num_warps, num_stages, fp8_align)`` of the sweep,

each replayed from a CUDA graph (``triton.testing.do_bench_cudagraph``, median). Reported: µs per
call, the bytes the keys occupy (``T x 640 x entry bytes``) per µs as a fraction of the copy
bandwidth measured in the same run, and the relative error of each fp8 output against the bf16
kernel on the dequantized entries (so only the tiling changes, not the values).

Usage (GPU): ``python benchmark/attention_fp8_sweep.py [--out FILE.md] [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

import torch

H, D, WINDOW, TOPK = 64, 512, 128, 512


def _copy_gbps() -> float:
    import triton.testing as tt

    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = tt.do_bench(lambda: y.copy_(x), rep=50, return_mode="median")
    return 2 * x.numel() / ms / 1e6


def _pools(n_rows: int) -> tuple[Any, Any, int]:
    """``(fp8 KVRowsView, bf16 pool of the same decoded values, entry bytes)`` of ``n_rows`` entries."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    mc = ModelConfig.from_dict(get_preset("flash-8l-32e"))
    spec = build_kv_layout(mc, "fp8_e4m3", False, 256).kinds[KVKind.CSA_MAIN]
    units = -(-n_rows // spec.rows_per_unit)
    st = spec.allocate(units * spec.pages_per_unit, "cuda")[0]
    view = KVRowsView(st, spec.entry, out_dtype=torch.bfloat16)
    n = min(n_rows, len(view))
    src = torch.randn(n, D, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    idx = torch.arange(n, device="cuda")
    view[idx] = src
    dense = view[idx].to(torch.bfloat16).contiguous()  # the decoded values, as a bf16 pool
    return view, dense, spec.entry.entry_bytes


def sweep_tokens(T: int, fp8: Any, dense: torch.Tensor, ebytes: int, bw: float, quick: bool) -> list[str]:
    """Table rows of one query-token count ``T``: bf16 default tiles, fp8 default, fp8 sweep."""
    import triton.testing as tt
    from sgl_kernel_v4.triton.attention import sparse_attention

    n = dense.shape[0]
    g = torch.Generator("cuda").manual_seed(T)
    sinks = torch.randn(H, device="cuda", generator=g)
    q = torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    pos = torch.randint(WINDOW, n // 4, (T,), device="cuda", generator=g)
    pages = torch.randint(1, n // WINDOW, (T, 2), device="cuda", generator=g)
    e = 64
    r2p = torch.stack([torch.randperm(n // e, device="cuda", generator=g)[: 4 * TOPK // e] for _ in range(T)])
    ent = torch.randint(0, 4 * TOPK, (T, TOPK), device="cuda", generator=g)
    rows = torch.arange(T, device="cuda")
    pg = dict(req_to_page=r2p.int(), req_rows=rows, token_req=rows, entries_per_page=e)
    out = torch.empty_like(q)
    lines: list[str] = []

    def call(pool: Any, **kw: Any) -> torch.Tensor:
        return sparse_attention(
            q, pool, pages, pos, WINDOW, sinks, D**-0.5, pool, ent, None, **pg, out=out, **kw
        )

    ref = call(dense).clone()

    def row(pool_name: str, fn: Any, cfg: tuple, err: float, eb: int) -> None:
        bn, nw, ns, al = cfg
        try:
            ms = tt.do_bench_cudagraph(fn, rep=50, return_mode="median")
        except Exception as ex:  # noqa: BLE001 - record and go on
            lines.append(
                f"| {T} | {pool_name} | {bn} | {nw} | {ns} | {al} | failed: {type(ex).__name__} ||||"
            )
            torch.cuda.synchronize()
            return
        gbps = T * (WINDOW + TOPK) * eb / ms / 1e6
        lines.append(
            f"| {T} | {pool_name} | {bn} | {nw} | {ns} | {al} | {ms * 1e3:.1f} | {gbps:.0f} | "
            f"{100 * gbps / bw:.1f} | {err:.1e} |"
        )
        print(lines[-1], flush=True)

    row("bf16 (default)", lambda: call(dense), ("dflt", "dflt", 2, "-"), 0.0, D * 2)
    row("fp8 (default)", lambda: call(fp8), ("dflt", "dflt", 2, 2), float("nan"), ebytes)
    grid = itertools.product((16, 32) if quick else (16, 32, 64), (4, 8), (1, 2), (2, 8))
    for bn, nw, ns, al in grid:
        kw = dict(block_n=bn, num_warps=nw, num_stages=ns, fp8_align=al)
        try:
            o = call(fp8, **kw)
            torch.cuda.synchronize()
        except Exception as ex:  # noqa: BLE001
            lines.append(
                f"| {T} | fp8 | {bn} | {nw} | {ns} | {al} | failed: {type(ex).__name__}: {str(ex)[:60]} ||||"
            )
            print(lines[-1], flush=True)
            continue
        err = float((o.float() - ref.float()).norm() / ref.float().norm().clamp(min=1e-30))
        row("fp8", lambda kw=kw: call(fp8, **kw), (bn, nw, ns, al), err, ebytes)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    bw = _copy_gbps()
    fp8, dense, ebytes = _pools(1 << 18)
    lines = [
        "# fp8 main-KV sparse attention sweep (`benchmark/attention_fp8_sweep.py`)",
        "",
        f"Copy bandwidth (same run): {bw:.0f} GB/s. CSA shape: window {WINDOW} + top-{TOPK}, H={H}, D={D}.",
        "",
        "| T | pool | block_n | warps | stages | align | µs (graph) | key GB/s | % copy | rel err vs bf16 |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for T in (1, 16, 2048) if a.quick else (1, 8, 16, 64, 2048):
        lines += sweep_tokens(T, fp8, dense, ebytes, bw, a.quick)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
