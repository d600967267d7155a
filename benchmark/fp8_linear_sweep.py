"""FP8 linear at decode: w8a16 tile sweep, and w8a8_fused against w8a16, per V4-Flash shape.

For every FP8 linear a V4-Flash decode step runs (``flash-43l`` preset: the merged q_a + kv input
projection, q_b, the grouped o_a, o_b, the shared expert's fused gate/up and down, the CSA layers'
indexer q_b) at ``T`` in {1, 16, 64} tokens it times

* ``legacy``: the first tile rule (``fp8_gemm._w8a16_config_legacy``, what the kernel used to run),
* ``rule``: the default rule (``fp8_gemm._w8a16_config``, the streaming model of
  ``fp8_gemm_tiles.w8a16_cost``),
* up to 14 variants: 64-row tiles on 4 warps with 128- or 256-deep K steps, 32-row tiles on
  2 warps, 128-row tiles (4 warps at <= 32 tokens, else 8), each at the split-K factors (of
  1, 2, 4, 8, 16) that give between half a program and six programs per SM, and deeper pipelines,

each as the median of >= 20 CUDA-graph replays of back-to-back calls on rotating weight copies
(>= 256 MiB of distinct weights, so no call finds its weights in L2). Before timing, every
variant's output is compared with the legacy config's (max abs difference; a variant off by more
than 1% of the output's largest magnitude is reported and not ranked), and the legacy output with an
fp32 product of the dequantized weights. The roofline of a call is its weight bytes (e4m3 + fp32
scales) at the device-to-device copy rate measured in the same run (``2 x bytes / time``).

Next to the sweep, in the same run and on the same weights, ``w8a16`` (the baseline) and the other
decode variants (``--ab-variants``: ``w8a8_fused``, activations quantized per 1x128 group inside the
kernel, e4m3 x e4m3 dot; ``w8a16_f16`` / ``w8a16_f16asm``, an fp16 product; ``w8a16_words`` /
``w8a16_words_fold``, the weights read as 32-bit words and decoded by shifts and masks in a permuted
K order, ``fp8_words``) are timed with the decode rule's tiles (``fp8_gemm._w8a16_config``, the
tiles they all use when ``fp8_linear`` picks them) at ``T`` in {1, 2, 4, 8, 16, 32, 64}
(``--ab-tokens``): µs, x roofline, the speed-up, each output's relative L2 error against the fp32
product of the dequantized weights, and w8a8_fused's against its own definition (the reference
``act_quant`` then the same product).

Compilation: every distinct kernel specialisation is compiled first by ``--jobs`` worker processes
(Triton's on-disk cache then serves the timing process), so a run takes well under the 150 s
budget on an H200.

Usage::

    python benchmark/fp8_linear_sweep.py --out DIR            # GPU: DIR/fp8_linear_sweep.{md,json}
    python benchmark/fp8_linear_sweep.py --dry --out DIR      # CPU, TRITON_INTERPRET=1, tiny shapes
    python benchmark/fp8_linear_sweep.py --ab-only --out DIR  # GPU: only w8a8_fused vs w8a16
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from typing import Any

import torch

#: labels of the per-variant results
KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")
_SPLITS = (1, 2, 4, 8, 16)
_MAX_VARIANTS = 16
_CAPTURE_STREAM: torch.cuda.Stream | None = None


def flash_shapes() -> list[dict[str, Any]]:
    """The FP8 linears of one V4-Flash decode step (``flash-43l``, one GPU): name, ``(G, N, K)``
    as ``fp8_linear`` sees them (``x [T, G, K]``, weight ``[G*N, K]``) and calls per step."""
    from sglang_v4.configs.presets import CSA, get_preset

    c = get_preset("flash-43l")
    D, L = c["hidden_size"], c["num_hidden_layers"]
    heads, hd, og = c["num_attention_heads"], c["head_dim"], c["o_groups"]
    csa = sum(1 for t in c["layer_types"] if t == CSA)
    inter = c["moe_intermediate_size"] * c.get("n_shared_experts", 1)
    return [
        {"name": "q_a+kv (merged)", "G": 1, "N": c["q_lora_rank"] + hd, "K": D, "calls": L},
        {"name": "q_b", "G": 1, "N": heads * hd, "K": c["q_lora_rank"], "calls": L},
        {"name": "o_a (grouped)", "G": og, "N": c["o_lora_rank"], "K": heads * hd // og, "calls": L},
        {"name": "o_b", "G": 1, "N": D, "K": og * c["o_lora_rank"], "calls": L},
        {"name": "shared gate/up", "G": 1, "N": 2 * inter, "K": D, "calls": L},
        {"name": "shared down", "G": 1, "N": D, "K": inter, "calls": L},
        {"name": "indexer q_b", "G": 1, "N": c["index_n_heads"] * c["index_head_dim"],
         "K": c["q_lora_rank"], "calls": csa},
    ]  # fmt: skip


def dry_shapes() -> list[dict[str, Any]]:
    """Tiny shapes for the CPU proof run (one plain, one grouped with ragged N)."""
    return [
        {"name": "tiny", "G": 1, "N": 192, "K": 512, "calls": 1},
        {"name": "tiny grouped", "G": 2, "N": 96, "K": 384, "calls": 1},
    ]


def label(cfg: dict[str, int]) -> str:
    """``n64w4 k128 s2 st4``: BLOCK_N, warps, BLOCK_K, SPLIT_K, stages (BLOCK_M follows T)."""
    return f"n{cfg['BLOCK_N']}w{cfg['num_warps']} k{cfg['BLOCK_K']} s{cfg['SPLIT_K']} st{cfg['num_stages']}"


def variants(T: int, G: int, N: int, K: int, sms: int, limit: int = _MAX_VARIANTS) -> list[tuple[str, dict]]:
    """``[(name, config)]``: ``legacy``, ``rule``, then the sweep's distinct variants (see the
    module docstring), at most ``limit`` in all."""
    from sgl_kernel_v4.triton._utils import cdiv
    from sgl_kernel_v4.triton.fp8_gemm import _w8a16_config, _w8a16_config_legacy
    from sgl_kernel_v4.triton.fp8_gemm_tiles import stages_for

    out = [("legacy", _w8a16_config_legacy(T, N, G, K, sms)), ("rule", _w8a16_config(T, N, G, K, sms))]
    bm = out[0][1]["BLOCK_M"]
    fams = [(64, 4, 128, 4), (64, 4, 256, 3), (32, 2, 128, 4), (128, 4 if bm <= 32 else 8, 128, 4)]
    per_family: list[list[dict]] = []
    for bn, warps, bk, want in fams:
        tiles = cdiv(N, bn) * G * cdiv(T, bm)
        steps = cdiv(K, bk)
        stages = stages_for(bm * bk * 2 + bn * bk, want)
        fam = []
        for split in _SPLITS:
            if split <= steps and sms / 2 <= tiles * split <= 6 * sms or (split == 1 and tiles * 2 > 6 * sms):
                cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
                       "num_stages": stages}  # fmt: skip
                fam.append(cfg)
                if (bn, bk) == (64, 128):
                    fam.append(dict(cfg, num_stages=6))
        per_family.append(fam)
    # round robin over the families, so that a smaller limit still samples each of them
    extra = [c for group in itertools.zip_longest(*per_family) for c in group if c is not None]
    seen = {tuple(c[k] for k in KEYS) for _, c in out}
    for cfg in extra:
        key = tuple(cfg[k] for k in KEYS)
        if key not in seen and len(out) < limit:
            seen.add(key)
            out.append((label(cfg), cfg))
    return out


def _fp8_weight(n: int, k: int, device: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    w = (torch.randn(n, k, device=device, generator=gen) * 16).to(torch.float8_e4m3fn)
    s = torch.full((-(-n // 128), -(-k // 128)), 1.0 / (16 * k**0.5), device=device)
    return w, s


def _inputs(T: int, G: int, K: int, device: str, dtype: torch.dtype) -> torch.Tensor:
    shape = (T, G, K) if G > 1 else (T, K)
    return torch.randn(*shape, device=device, generator=torch.Generator(device).manual_seed(T)).to(dtype)


#: a compile task: ``(T, G, N, K, config, variant)``
Task = tuple[int, int, int, int, dict, str]


def _compile_worker(tasks: list[Task]) -> list[str]:
    """Run each task once (compiles into Triton's on-disk cache); errors as text."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    errs = []
    for T, G, N, K, cfg, variant in tasks:
        try:
            w = torch.empty(G * N, K, dtype=torch.float8_e4m3fn, device="cuda")
            s = torch.ones(-(-G * N // 128), -(-K // 128), device="cuda")
            fp8_linear(_inputs(T, G, K, "cuda", torch.bfloat16), w, s, variant, config=cfg)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported, the variant is then skipped
            errs.append(f"{variant} {label(cfg)} T={T} {G}x{N}x{K}: {e!r}"[:300])
    return errs


def precompile(tasks: list[Task], jobs: int) -> list[str]:
    """Compile the distinct kernel specialisations of ``tasks`` in ``jobs`` spawned processes."""
    import multiprocessing as mp

    uniq: dict[tuple, tuple] = {}
    for T, G, N, K, cfg, variant in tasks:  # what Triton specialises on: T == 1, divisibility, constexprs
        key = (T == 1, T % 16 == 0, N % 16 == 0, K % 16 == 0, G > 1, variant, tuple(cfg[k] for k in KEYS))
        uniq.setdefault(key, (T, G, N, K, cfg, variant))
    todo = list(uniq.values())
    chunks = [todo[i::jobs] for i in range(jobs) if todo[i::jobs]]
    if not chunks:
        return []
    with mp.get_context("spawn").Pool(len(chunks)) as pool:
        return [e for errs in pool.map(_compile_worker, chunks) for e in errs]


def _gpu_us(calls: list, reps: int) -> float:
    """Median µs per call of ``calls`` captured back to back in one CUDA graph, ``reps`` replays."""
    global _CAPTURE_STREAM
    if _CAPTURE_STREAM is None:  # one capture stream: one set of split-K arrival counters
        _CAPTURE_STREAM = torch.cuda.Stream()
    stream = _CAPTURE_STREAM
    for f in calls:
        f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for f in calls:
            f()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / len(calls))
    del g
    return statistics.median(ts)


def _cpu_us(calls: list, reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        calls[0]()
    return (time.perf_counter() - t) * 1e6 / reps


def copy_bps(device: str) -> float | None:
    """Device-to-device copy rate, ``2 x bytes / time`` (read + write) of a 1 GiB copy, median of 10."""
    if device != "cuda":
        return None
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ts = []
    for i in range(12):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        if i >= 2:
            ts.append(a.elapsed_time(b) * 1e-3)
    del x, y
    return 2 * (1 << 30) / statistics.median(ts)


def _operands(
    shape: dict, T: int, device: str, dry: bool
) -> tuple[int, int, list, torch.Tensor, torch.Tensor]:
    """A shape's operands: ``(weight bytes, copies, [(w, scale)] * copies, x [T, G, K],
    dequantized weights [G, K, N] fp32)``; enough rotating weight copies (>= 256 MiB) that timed
    calls read them from HBM, one on the CPU."""
    from sgl_kernel_v4.ref.fp8_gemm import dequant_fp8_block

    G, N, K = shape["G"], shape["N"], shape["K"]
    w_bytes = G * N * K + 4 * (-(-G * N // 128)) * (-(-K // 128))
    copies = 1 if dry else max(2, min(64, -(-(256 << 20) // w_bytes)))
    gen = torch.Generator(device).manual_seed(G * N + K)
    ws = [_fp8_weight(G * N, K, device, gen) for _ in range(copies)]
    x = _inputs(T, G, K, device, torch.float32 if dry else torch.bfloat16)
    w = dequant_fp8_block(*ws[0]).float().view(G, N, K).transpose(1, 2)
    return w_bytes, copies, ws, x, w


def sweep_shape(shape: dict, T: int, device: str, sms: int, bw: float | None, reps: int, dry: bool) -> dict:
    """One (shape, T): every variant's µs (or why not), the best, the roofline."""
    from sgl_kernel_v4.triton.fp8_gemm import fp8_linear

    G, N, K = shape["G"], shape["N"], shape["K"]
    w_bytes, copies, ws, x, w = _operands(shape, T, device, dry)
    ref = (x.float().reshape(T, G, 1, K) @ w).reshape(T, G * N)
    row: dict[str, Any] = {"shape": shape["name"], "G": G, "N": N, "K": K, "T": T, "calls": shape["calls"],
                           "weight_bytes": w_bytes, "variants": []}  # fmt: skip
    base = None
    for name, cfg in variants(T, G, N, K, sms, 5 if dry else _MAX_VARIANTS):
        v: dict[str, Any] = {"name": name, "config": cfg}
        try:
            out = fp8_linear(x, ws[0][0], ws[0][1], "w8a16", config=cfg).float()
            if base is None:
                base = out
                row["legacy_rel_err_vs_fp32"] = float((out - ref).norm() / ref.norm())
            v["max_abs_diff"] = float((out - base).abs().max())
            v["ok"] = v["max_abs_diff"] <= 1e-2 * float(base.abs().max())
            calls = [
                lambda i=i, c=cfg: fp8_linear(x, ws[i][0], ws[i][1], "w8a16", config=c) for i in range(copies)
            ]
            v["us"] = round((_cpu_us if dry else _gpu_us)(calls, reps), 3)
        except Exception as e:  # noqa: BLE001 - e.g. a tile the backend refuses: reported, not ranked
            v["error"] = repr(e)[:300]
        row["variants"].append(v)
    timed = {v["name"]: v for v in row["variants"] if "us" in v}
    ranked = sorted((v for v in timed.values() if v.get("ok")), key=lambda v: v["us"])
    row["legacy_us"] = timed.get("legacy", {}).get("us")
    row["rule_us"] = timed.get("rule", {}).get("us")
    row["legacy"], row["rule"] = (label(v["config"]) for v in row["variants"][:2])
    if ranked:
        row["best"], row["best_us"] = ranked[0]["name"], ranked[0]["us"]
        if ranked[0]["name"] in ("legacy", "rule"):
            row["best"] = f"{ranked[0]['name']} ({label(ranked[0]['config'])})"
    if bw:
        row["roofline_us"] = round(w_bytes / bw * 1e6, 3)
    return row


#: the decode variants timed side by side (``--ab-variants``); the first is the baseline
AB_VARIANTS = ("w8a16", "w8a8_fused", "w8a16_f16", "w8a16_f16asm", "w8a16_words", "w8a16_words_fold")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b).norm() / b.norm())


def ab_shape(
    shape: dict,
    T: int,
    device: str,
    sms: int,
    bw: float | None,
    reps: int,
    dry: bool,
    ab_variants: tuple[str, ...] = AB_VARIANTS,
) -> dict:
    """One (shape, T): the decode variants with the decode rule's tiles, µs, errors, roofline."""
    from sgl_kernel_v4.ref.fp8_gemm import act_quant, dequant_act
    from sgl_kernel_v4.triton.fp8_gemm import _w8a16_config, fp8_linear

    G, N, K = shape["G"], shape["N"], shape["K"]
    w_bytes, copies, ws, x, w = _operands(shape, T, device, dry)
    ref = (x.float().reshape(T, G, 1, K) @ w).reshape(T, G * N)
    q, sq = act_quant(x.reshape(T * G, K))
    ref_q = (dequant_act(q, sq).reshape(T, G, 1, K) @ w).reshape(T, G * N)
    cfg = _w8a16_config(T, N, G, K, sms, x.element_size())
    row: dict[str, Any] = {"shape": shape["name"], "G": G, "N": N, "K": K, "T": T, "calls": shape["calls"],
                           "weight_bytes": w_bytes, "config": label(cfg)}  # fmt: skip
    for v in ab_variants:
        try:
            out = fp8_linear(x, ws[0][0], ws[0][1], v, config=cfg)
            row[f"{v}_rel_err_vs_fp32"] = _rel(out, ref)
            if v == "w8a8_fused":
                row[f"{v}_rel_err_vs_act_quant_ref"] = _rel(out, ref_q)
            calls = [lambda i=i, v=v: fp8_linear(x, ws[i][0], ws[i][1], v, config=cfg) for i in range(copies)]
            row[f"{v}_us"] = round((_cpu_us if dry else _gpu_us)(calls, reps), 3)
        except Exception as e:  # noqa: BLE001 - reported in the table
            row[f"{v}_error"] = repr(e)[:300]
    if bw:
        row["roofline_us"] = round(w_bytes / bw * 1e6, 3)
    return row


def ab_markdown(rows: list[dict], meta: dict) -> str:
    """The decode variants' table (each against ``w8a16``, the first), per-step totals and errors."""
    vs = meta.get("ab_variants", AB_VARIANTS)
    others = vs[1:]
    lines = [
        f"### FP8 linear at decode: {', '.join(vs)} (the decode rule's tiles, same run)",
        "",
        f"{meta['device']}, {meta['sms']} SMs; copy rate {_f(meta.get('copy_tbps'))} TB/s; "
        f"CUDA-graph replay medians of {meta['reps']} replays. Roofline: weight bytes at the copy rate; "
        "errors: relative L2 against the fp32 product of the dequantized weights.",
        "",
        "| shape | G x N x K | T | tiles | roofline µs | "
        + " | ".join(f"{v} µs (x roofline)" for v in vs)
        + " | "
        + " | ".join(f"w8a16 / {v}" for v in others)
        + " | "
        + " | ".join(f"{v} err" for v in vs)
        + " |",
        "|---|---|---:|---|---:|" + "---:|" * (len(vs) * 2 + len(others)),
    ]
    for r in rows:
        rf, base = r.get("roofline_us"), r.get(f"{vs[0]}_us")
        cells = []
        for v in vs:
            u = r.get(f"{v}_us")
            cells.append(f"{_f(u)} ({_f(u / rf if u and rf else None)})")
        for v in others:
            u = r.get(f"{v}_us")
            cells.append(_f(base / u if base and u else None, "{:.2f}x"))
        cells += [_f(r.get(f"{v}_rel_err_vs_fp32"), "{:.1e}") for v in vs]
        lines.append(f"| {r['shape']} | {r['G']}x{r['N']}x{r['K']} | {r['T']} | {r['config']} | {_f(rf)} | "
                     + " | ".join(cells) + " |")  # fmt: skip
    lines += ["", "Per decode step (calls per step x µs, summed over the shapes):", ""]
    lines += ["| T | roofline µs | " + " | ".join(f"{v} µs" for v in vs) + " | "
              + " | ".join(f"w8a16 / {v}" for v in others) + " |",
              "|---:|---:|" + "---:|" * (len(vs) + len(others))]  # fmt: skip
    for T in sorted({r["T"] for r in rows}):
        rs = [r for r in rows if r["T"] == T]
        tot = {}
        for key in [f"{v}_us" for v in vs] + ["roofline_us"]:
            vals = [r.get(key) for r in rs]
            tot[key] = None if any(v is None for v in vals) else sum(v * r["calls"] for v, r in zip(vals, rs))
        base = tot[f"{vs[0]}_us"]
        ratios = [_f(base / tot[f"{v}_us"] if base and tot[f"{v}_us"] else None, "{:.2f}x") for v in others]
        lines.append(f"| {T} | {_f(tot['roofline_us'])} | " + " | ".join(_f(tot[f"{v}_us"]) for v in vs)
                     + " | " + " | ".join(ratios) + " |")  # fmt: skip
    errs = [(r, v) for r in rows for v in vs if f"{v}_error" in r]
    if errs:
        lines += ["", "Errors:", ""]
        lines += [f"- {r['shape']} T={r['T']} {v}: {r[f'{v}_error']}" for r, v in errs]
    return "\n".join(lines) + "\n"


def _f(v: Any, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def markdown(rows: list[dict], meta: dict) -> str:
    """The summary table, per-step totals and any variant that failed or disagreed."""
    lines = [
        "### FP8 weight-only linear (w8a16) at decode: tile sweep",
        "",
        f"{meta['device']}, {meta['sms']} SMs; copy rate {_f(meta.get('copy_tbps'))} TB/s; "
        f"CUDA-graph replay medians of {meta['reps']} replays; {meta['seconds']:.0f} s in all.",
        "",
        "| shape | G x N x K | T | legacy (config) µs | rule (config) µs | best variant | best µs | roofline µs "
        "| best x roofline | best vs legacy | rule vs legacy |",
        "|---|---|---:|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lg, ru, be, rf = r.get("legacy_us"), r.get("rule_us"), r.get("best_us"), r.get("roofline_us")
        lines.append(
            f"| {r['shape']} | {r['G']}x{r['N']}x{r['K']} | {r['T']} | {_f(lg)} ({r['legacy']}) | {_f(ru)} "
            f"({r['rule']}) | {r.get('best', '-')} | {_f(be)} | {_f(rf)} | "
            f"{_f(be / rf if be and rf else None)} | {_f(lg / be if lg and be else None, '{:.2f}x')} | "
            f"{_f(lg / ru if lg and ru else None, '{:.2f}x')} |"
        )
    lines += ["", "Per decode step (calls per step x µs, summed over the shapes):", ""]
    lines += ["| T | legacy µs | rule µs | best µs | roofline µs |", "|---:|---:|---:|---:|---:|"]
    for T in sorted({r["T"] for r in rows}):
        rs = [r for r in rows if r["T"] == T]

        def tot(key: str, rs: list[dict] = rs) -> float | None:
            vals = [r.get(key) for r in rs]
            return None if any(v is None for v in vals) else sum(v * r["calls"] for v, r in zip(vals, rs))

        lines.append(f"| {T} | {_f(tot('legacy_us'))} | {_f(tot('rule_us'))} | {_f(tot('best_us'))} | "
                     f"{_f(tot('roofline_us'))} |")  # fmt: skip
    bad = [(r, v) for r in rows for v in r["variants"] if "error" in v or not v.get("ok", True)]
    if bad:
        lines += ["", "Variants not ranked (error, or output off the legacy config's by > 1%):", ""]
        for r, v in bad:
            why = v.get("error") or f"max abs diff {v['max_abs_diff']:.3g}"
            lines.append(f"- {r['shape']} T={r['T']} {v['name']} ({label(v['config'])}): {why}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry", action="store_true", help="CPU proof run: TRITON_INTERPRET=1, tiny shapes")
    p.add_argument("--out", default="benchmark/results/fp8_linear_sweep", help="output directory")
    p.add_argument("--tokens", default="1,16,64", help="token counts (comma-separated, each <= 64)")
    p.add_argument("--ab-tokens", default="1,2,4,8,16,32,64", help="token counts of w8a8_fused vs w8a16")
    p.add_argument("--ab-only", action="store_true", help="skip the w8a16 tile sweep")
    p.add_argument(
        "--ab-variants", default=",".join(AB_VARIANTS), help="decode variants side by side (first: baseline)"
    )
    p.add_argument("--reps", type=int, default=25, help="timed graph replays per variant (>= 20 on the GPU)")
    p.add_argument("--jobs", type=int, default=12, help="compile worker processes (GPU)")
    a = p.parse_args(argv)
    if a.dry:
        os.environ["TRITON_INTERPRET"] = "1"
    tokens = [int(t) for t in a.tokens.split(",")]
    if any(not 1 <= t <= 64 for t in tokens):
        raise ValueError(f"--tokens: each must be in 1..64 (the weight-only kernel's range), got {tokens}")
    ab_tokens = [int(t) for t in a.ab_tokens.split(",")]
    ab_variants = tuple(v for v in a.ab_variants.split(",") if v)
    from sgl_kernel_v4.triton.fp8_gemm import DECODE_VARIANTS

    if not ab_variants or any(v not in DECODE_VARIANTS for v in ab_variants):
        raise ValueError(
            f"--ab-variants: each must be one of {', '.join(DECODE_VARIANTS)}, got {ab_variants}"
        )
    if any(not 1 <= t <= 64 for t in ab_tokens):
        raise ValueError(f"--ab-tokens: each must be in 1..64 (the decode kernels' range), got {ab_tokens}")
    if not a.dry and not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU (or --dry)")
    from sgl_kernel_v4.triton._utils import num_sms

    t0 = time.time()
    device = "cpu" if a.dry else "cuda"
    sms = num_sms(torch.device(device))
    shapes = dry_shapes() if a.dry else flash_shapes()
    tokens = [] if a.ab_only else [1, 5] if a.dry else tokens
    ab_tokens = [1, 5] if a.dry else ab_tokens
    reps = 1 if a.dry else max(20, a.reps)
    compile_errors: list[str] = []
    if not a.dry:
        from sgl_kernel_v4.triton.fp8_gemm import _w8a16_config

        tasks = [(T, s["G"], s["N"], s["K"], cfg, "w8a16") for s in shapes for T in tokens
                 for _, cfg in variants(T, s["G"], s["N"], s["K"], sms)]  # fmt: skip
        tasks += [(T, s["G"], s["N"], s["K"], _w8a16_config(T, s["N"], s["G"], s["K"], sms), v)
                  for s in shapes for T in ab_tokens for v in ab_variants]  # fmt: skip
        compile_errors = precompile(tasks, max(1, a.jobs))
        print(f"compiled in {time.time() - t0:.0f} s; {len(compile_errors)} errors", file=sys.stderr)
    bw = copy_bps(device)
    meta = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU (TRITON_INTERPRET=1, dry run)",
        "sms": sms,
        "copy_tbps": bw / 1e12 if bw else None,
        "reps": reps,
        "compile_errors": compile_errors,
        "ab_variants": ab_variants,
    }
    os.makedirs(a.out, exist_ok=True)
    rows: list[dict] = []
    ab_rows: list[dict] = []

    def write() -> str:  # after each part: a run cut short keeps what it measured
        meta["seconds"] = time.time() - t0
        md = ab_markdown(ab_rows, meta) + ("\n" + markdown(rows, meta) if rows else "")
        with open(os.path.join(a.out, "fp8_linear_sweep.md"), "w") as f:
            f.write(md)
        with open(os.path.join(a.out, "fp8_linear_sweep.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows, "ab_rows": ab_rows}, f, indent=1)
        return md

    for s in shapes:
        for T in ab_tokens:
            ab_rows.append(ab_shape(s, T, device, sms, bw, reps, a.dry, ab_variants))
            r = ab_rows[-1]
            times = " ".join(f"{v} {r.get(f'{v}_us')}" for v in ab_variants)
            print(f"{s['name']} T={T}: {times} us (roofline {r.get('roofline_us')})", file=sys.stderr)
    write()
    for s in shapes:
        for T in tokens:
            rows.append(sweep_shape(s, T, device, sms, bw, reps, a.dry))
            r = rows[-1]
            print(f"{s['name']} T={T}: legacy {r['legacy_us']} rule {r['rule_us']} best {r.get('best')} "
                  f"{r.get('best_us')} us", file=sys.stderr)  # fmt: skip
    print(write())


if __name__ == "__main__":
    main()
