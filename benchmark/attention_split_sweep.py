"""Sparse attention split count: the batch-shape rule vs the rule bounded by the layer's key count.

``sgl_kernel_v4.triton.attention.sparse_attention`` splits each (token, head block)'s keys over
``num_splits`` programs and merges their partial results in a second kernel. The old rule chose
the count from the batch shape only (two waves of the SMs: 64 splits at bs 1 with 64 heads); the
new one also bounds it by the most keys a token of the layer attends to (``max_key_count``:
window + top-k in CSA layers, window + the page table's entry capacity in HCA layers), so a CSA
layer at bs 1 (640 keys) takes 8 splits of 80 keys, not 64 of 10.

For each layer shape (DeepSeek-V4, 64 heads x 512: CSA window 128 + top-512 of an 8k context;
HCA window 128 + every entry of an 8k and a 128k context, ratio 128, 256-token pages), decode
batch ``T`` in 1, 8, 16, 64 (one token per request, each at the full context) and pool format
(bf16; fp8 584-byte main entries, as ``benchmark/attention_fp8_sweep.py``), every split count
1..64 is timed, the old and the new rule's counts marked. Timing: one CUDA graph of 10 calls,
replayed 30 times, median per call (the keys stay in L2 across replays; the comparison between
split counts is what matters). ``combine µs``: the merge kernel alone on that many partials
(same graph timing). ``rel err``: against the torch reference op (``sgl_kernel_v4.ref``).

Usage: ``python benchmark/attention_split_sweep.py --out DIR [--dry]``: writes
``DIR/attention_split_sweep.md`` and ``.json``. GPU mode needs CUDA (~40-60 s on an H200).
``--dry``: CPU, Triton interpreter, tiny shapes (16 heads x 64, window 32, T 1 and 2, fp32, a few
split counts, wall-clock timings that mean nothing): checks the driver end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

if "--dry" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402


@dataclass(frozen=True)
class Layer:
    """One layer shape: ``topk`` entries (CSA) or every entry of the context (HCA, ``topk=None``)."""

    name: str
    window: int
    ctx: int
    ratio: int
    page: int
    topk: int | None


MIN_KEYS = (16, 32, 64, 128, 256)  # candidate keys-per-split bounds of the rule

GPU_LAYERS = (
    Layer("CSA 128+512 (8k ctx)", 128, 8192, 4, 256, 512),
    Layer("HCA 8k ctx (128+64)", 128, 8192, 128, 256, None),
    Layer("HCA 128k ctx (128+1024)", 128, 131072, 128, 256, None),
)
DRY_LAYERS = (
    Layer("CSA 32+64", 32, 1024, 4, 64, 64),
    Layer("HCA 1k ctx (32+64)", 32, 1024, 16, 64, None),
)


def make_inputs(layer: Layer, T: int, H: int, D: int, n_rows: int, dev: str, seed: int) -> dict[str, Any]:
    """Decode inputs of ``T`` one-token requests at position ``ctx - 1``: distinct random window
    pages and block pages per request in a pool of ``n_rows`` entries, CSA entries drawn without
    repeats from the visible ones, HCA visible count ``ctx // ratio``."""
    g = torch.Generator().manual_seed(seed)
    W, e = layer.window, layer.page // layer.ratio
    P = layer.ctx // layer.page
    if 2 * T * W > n_rows or T * P * e > n_rows:
        raise ValueError(f"n_rows: {n_rows} entries too few for {layer.name} at T={T}")
    swa_pages = torch.randperm(n_rows // W, generator=g)[: 2 * T].view(T, 2)
    r2p = torch.randperm(n_rows // e, generator=g)[: T * P].view(T, P).int()
    visible = layer.ctx // layer.ratio
    d: dict[str, Any] = dict(
        q=torch.randn(T, H, D, generator=g),
        sinks=torch.randn(H, generator=g),
        pos=torch.full((T,), layer.ctx - 1, dtype=torch.int64),
        swa_pages=swa_pages,
        comp_entries=None,
        comp_visible=None,
        req_to_page=r2p,
        req_rows=torch.arange(T),
        token_req=torch.arange(T),
    )
    if layer.topk is not None:
        d["comp_entries"] = torch.stack(
            [torch.randperm(visible, generator=g)[: layer.topk] for _ in range(T)]
        )
    else:
        d["comp_visible"] = torch.full((T,), visible, dtype=torch.int64)
    d = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}
    d["e"] = e
    return d


def pools(n_rows: int, D: int, dev: str, dry: bool) -> dict[str, Any]:
    """``{"bf16": [N, D] tensor, "fp8": KVRowsView}`` holding the same values (GPU), or
    ``{"fp32": tensor}`` (dry)."""
    if dry:
        return {"fp32": torch.randn(n_rows, D, generator=torch.Generator().manual_seed(0))}
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from attention_fp8_sweep import _pools

    fp8, dense, _ = _pools(n_rows)
    return {"bf16": dense, "fp8": fp8}


def graph_time_us(fn: Any, dev: str, inner: int = 10, reps: int = 30) -> float:
    """Median µs per call of ``fn`` replayed from a CUDA graph of ``inner`` calls (``reps``
    replays); on the CPU the wall clock of one call."""
    if dev != "cuda":
        ts = []
        for _ in range(1):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e6
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (compiles, allocator)
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    for _ in range(3):
        g.replay()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in ev:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev) * 1e3 / inner


def combine_time_us(T: int, H: int, D: int, ns: int, dev: str) -> float | None:
    """The merge kernel alone over ``ns`` random partials per (token, head) (``None`` for 1)."""
    import sgl_kernel_v4.triton.attention as attn
    from sgl_kernel_v4.triton._utils import next_power_of_2

    if ns <= 1:
        return None
    bd = next_power_of_2(D)
    acc = torch.randn(T, H, ns, bd, device=dev)
    ml = torch.rand(T, H, ns, 2, device=dev)
    sinks = torch.zeros(H, device=dev)
    out = torch.empty(T, H, D, device=dev, dtype=torch.bfloat16 if dev == "cuda" else torch.float32)
    extra = {"BLOCK_S": attn.COMBINE_SPLITS} if hasattr(attn, "COMBINE_SPLITS") else {}

    def fn() -> None:
        attn._combine_kernel[(T, H)](
            acc, ml, sinks, out, out.stride(0), out.stride(1), H, ns, D=D, BLOCK_D=bd, num_warps=4, **extra
        )

    return graph_time_us(fn, dev)


def measure_case(
    layer: Layer,
    pname: str,
    pool: Any,
    T: int,
    H: int,
    D: int,
    n_rows: int,
    counts: tuple[int, ...],
    dry: bool,
) -> list[dict[str, Any]]:
    """Rows of one (layer, pool, T): every split count of ``counts`` plus the old and new rules'."""
    import sgl_kernel_v4.triton.attention as attn
    from sgl_kernel_v4.ref.attention import sparse_attention as ref_attention

    dev = "cpu" if dry else "cuda"
    d = make_inputs(layer, T, H, D, n_rows, dev, seed=T)
    q = d["q"].to(torch.float32 if dry else torch.bfloat16)
    out = torch.empty_like(q)
    args = (q, pool, d["swa_pages"], d["pos"], layer.window, d["sinks"], D**-0.5, pool, d["comp_entries"],
            d["comp_visible"], d["req_to_page"], d["req_rows"], d["token_req"], d["e"])  # fmt: skip
    ref = ref_attention(*args).float()
    block_h = 64 if (T >= 128 and H >= 64) else 16  # the wrapper's default
    old = attn.default_num_splits(T, H, block_h, q.device)
    new, max_keys, cands = None, None, {}
    if hasattr(attn, "max_key_count"):  # absent before the key-bounded rule
        max_keys = attn.max_key_count(
            layer.window, d["comp_entries"], d["comp_visible"], d["req_to_page"], d["e"]
        )
        new = attn.default_num_splits(T, H, block_h, q.device, max_keys)
        cands = {mk: attn.default_num_splits(T, H, block_h, q.device, max_keys, mk) for mk in MIN_KEYS}
    rows = []
    for ns in sorted({*counts, old, *([new] if new else [])}):

        def call(ns: int = ns) -> torch.Tensor:
            return attn.sparse_attention(*args, out=out, num_splits=ns)

        o = call()
        err = float((o.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        us = graph_time_us(call, dev)
        rec = dict(layer=layer.name, pool=pname, T=T, num_splits=ns, us=us,
                   combine_us=combine_time_us(T, H, D, ns, dev), rel_err=err, max_keys=max_keys,
                   old=ns == old, new=ns == new,
                   rules=[mk for mk, c in cands.items() if c == ns])  # fmt: skip
        rows.append(rec)
        tag = ("old " if rec["old"] else "") + ("new" if rec["new"] else "")
        print(
            f"{layer.name:26s} {pname:5s} T={T:3d} ns={ns:3d} {us:9.1f} us  err {err:.1e} {tag}", flush=True
        )
    return rows


def sweep(dry: bool) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every (layer, pool, T, split count) measurement, and the run's settings."""
    import sgl_kernel_v4.triton.attention as attn

    dev = "cpu" if dry else "cuda"
    H, D = (16, 64) if dry else (64, 512)
    Ts = (1, 2) if dry else (1, 8, 16, 64)
    counts = (1, 8) if dry else (1, 2, 4, 8, 16, 32, 64)
    n_rows = 1 << (14 if dry else 17)
    pool_map = pools(n_rows, D, dev, dry)
    rows: list[dict[str, Any]] = []
    for layer in DRY_LAYERS if dry else GPU_LAYERS:
        for pname, pool in pool_map.items():
            for T in Ts:
                rows += measure_case(layer, pname, pool, T, H, D, n_rows, counts, dry)
    info = dict(dry=dry, device=torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)",
                H=H, D=D, min_keys_per_split=getattr(attn, "MIN_KEYS_PER_SPLIT", None),
                combine_splits=getattr(attn, "COMBINE_SPLITS", None))  # fmt: skip
    return rows, info


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def report(rows: list[dict[str, Any]], info: dict[str, Any], secs: float) -> str:
    """Markdown: old vs new rule per (layer, pool, T), then every split count."""
    lines = [
        "# Sparse attention split count (`benchmark/attention_split_sweep.py`)",
        "",
        f"Device: {info['device']}; H={info['H']}, D={info['D']}; min keys per split "
        f"{info['min_keys_per_split']}, combine step {info['combine_splits']} splits; {secs:.0f} s. "
        "µs per call: CUDA-graph replay median (10 calls per graph, 30 replays)"
        + (" (dry: CPU interpreter wall clock, meaningless)" if info["dry"] else "")
        + ".",
        "",
        "## Old rule (batch shape) vs new rule (bounded by the layer's key count)",
        "",
        "| layer | pool | T | max keys | old splits | old µs | new splits | new µs | speed-up "
        "| best splits | best µs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["layer"], r["pool"], r["T"]), []).append(r)
    for (layer, pool, T), rs in groups.items():
        old = next(r for r in rs if r["old"])
        new = next((r for r in rs if r["new"]), None)
        best = min(rs, key=lambda r: r["us"])
        sp = f"{old['us'] / new['us']:.2f}x" if new else "-"
        lines.append(
            f"| {layer} | {pool} | {T} | {old['max_keys'] or '-'} | {old['num_splits']} | {old['us']:.1f} | "
            f"{new['num_splits'] if new else '-'} | {_fmt(new['us'] if new else None)} | {sp} | "
            f"{best['num_splits']} | {best['us']:.1f} |"
        )
    lines += [
        "",
        "## Candidate bounds: total µs over the cases above with `min_keys_per_split` = X",
        "",
        "| pool | old rule | " + " | ".join(f"X={mk}" for mk in MIN_KEYS) + " |",
        "|---|---:|" + "---:|" * len(MIN_KEYS),
    ]
    for pool in dict.fromkeys(r["pool"] for r in rows):
        tot_old = sum(r["us"] for r in rows if r["pool"] == pool and r["old"])
        cells = []
        for mk in MIN_KEYS:
            picked = [r for r in rows if r["pool"] == pool and mk in r.get("rules", [])]
            n_cases = len({(r["layer"], r["T"]) for r in rows if r["pool"] == pool})
            cells.append(f"{sum(r['us'] for r in picked):.1f}" if len(picked) == n_cases else "-")
        lines.append(f"| {pool} | {tot_old:.1f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Every split count",
        "",
        "| layer | pool | T | splits | rule | µs | combine µs | rel err vs ref |",
        "|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        tag = "/".join(x for x in ("old" if r["old"] else "", "new" if r["new"] else "") if x)
        lines.append(
            f"| {r['layer']} | {r['pool']} | {r['T']} | {r['num_splits']} | {tag} | {r['us']:.1f} | "
            f"{_fmt(r['combine_us'])} | {r['rel_err']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for attention_split_sweep.md / .json")
    ap.add_argument("--dry", action="store_true", help="CPU, Triton interpreter, tiny shapes")
    a = ap.parse_args()
    if not a.dry and not torch.cuda.is_available():
        ap.error("needs CUDA (or --dry)")
    t0 = time.perf_counter()
    rows, info = sweep(a.dry)
    secs = time.perf_counter() - t0
    os.makedirs(a.out, exist_ok=True)
    text = report(rows, info, secs)
    with open(os.path.join(a.out, "attention_split_sweep.md"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(a.out, "attention_split_sweep.json"), "w", encoding="utf-8") as f:
        json.dump(dict(info=info, seconds=secs, rows=rows), f, indent=1)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
