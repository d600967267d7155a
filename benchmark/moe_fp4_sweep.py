"""FP4 routed-expert MoE at decode (T = 1..16): the named pair-mode configurations of
``sgl_kernel_v4.triton.moe_fp4.DECODE_VARIANTS`` timed side by side with the current default; and
(T = 1..64) the fp8 product (``FP8_MMA``: weights decoded to e4m3, activations quantized in the
kernel) next to today's bf16 product, in the layout the wrapper picks and in the other one.

V4-Flash expert shapes (E = 160, k = 6, D = 4096, I = 2048), bf16 activations, random packed
e2m1 weights with ue8m0 scales. For each token count T and each variant (``default``: what
``fused_moe_fp4`` picks with no config, i.e. pair mode up to ``max(k, E / 4)`` pairs and expert mode
above; every named variant is forced into pair mode):

1. the variant's output on one batch is compared with the default's (max abs difference; the
   variants differ only in fp32 summation order, so the difference is a few bf16 ulps);
2. ``--calls`` calls, each with its own routing (so consecutive calls touch different experts and
   the 50 MB L2 does not serve one call's weights to the next), are captured in one CUDA graph;
   the graph is replayed ``--replays`` times (>= 20) between CUDA events; us per call = the median
   replay / ``--calls``.

The product rows (``--set mma``, part of the default ``all``), per T: ``default`` (the wrapper with
no config: bf16), ``fp8`` (the same layout, ``shift`` decode, bit-level activation rounding),
``fp8_table`` (``table`` decode), ``fp8_fold`` (``fold`` decode: one dot per 128 inputs; exact on
these experts' uniform scales), ``fp8_cvt`` / ``fp8_fold_cvt`` (the GPU's e4m3 conversion; not in ``--dry``), then the other layout
forced for both products: ``bf16_pair`` / ``fp8_pair`` / ``fp8_fold_pair`` (the pair-mode default
``DECODE_DEFAULT``) where the wrapper picks expert mode, else ``bf16_expert`` / ``fp8_expert`` /
``fp8_fold_expert``.
An fp8 row's max abs difference from ``default`` is the activation quantization's effect, not
summation order.

Roofline: the bytes the calls must read (packed weights + scale bytes of each call's distinct
experts, x read and y written in bf16) / the device-to-device copy bandwidth measured at the start
of the same run (1 GiB bf16 ``copy_``, read + write bytes, median of 10). Output: a markdown table
(variant, T, us, x roofline, speed-up vs default, max abs diff) on stdout and ``--out DIR``
(``moe_fp4_sweep.md`` / ``.json``).

GPU (about two minutes on an H200, compiles included; ``--set variants`` or ``--set mma`` for one
part)::

    python benchmark/moe_fp4_sweep.py --out /tmp/sweep [--quick] [--set all|variants|mma]

CPU check of the script (tiny shapes under ``TRITON_INTERPRET=1``, wall-clock times that mean
nothing)::

    python benchmark/moe_fp4_sweep.py --dry --out /tmp/sweep
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

if "--dry" in sys.argv:  # before triton is imported: the interpreter runs the kernels on the CPU
    os.environ["TRITON_INTERPRET"] = "1"

import torch

FLASH = {"E": 160, "k": 6, "D": 4096, "I": 2048}
DRY = {"E": 8, "k": 2, "D": 128, "I": 64}
TOKENS = (1, 2, 4, 8, 16)
MMA_TOKENS = (1, 2, 4, 8, 16, 32, 64)
#: The expert-mode tile the wrapper picks at up to 16 pairs per expert (``moe_fp4._config``).
BF16 = {"FP8_MMA": 0}  # the wrapper's layout and tiles with today's bf16 product
EXPERT = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "DOWN_STAGES": 4, "PAIR": 0,
          "GU_FUSED": 0, "DOWN_SPLIT": 0, "FP8_MMA": 0}  # fmt: skip
QUICK_TOKENS = (1, 4, 16)
QUICK_VARIANTS = ("baseline", "dsplit1", "fused_dsplit1", "fused_dsplit2", "fused_k128")


def copy_bandwidth(device: str) -> float:
    """Device-to-device copy rate in bytes/s (read + write of 1 GiB of bf16, median of 10)."""
    if device != "cuda":
        return 1e10  # placeholder for the CPU check
    x = torch.empty(1 << 29, dtype=torch.bfloat16, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    ts = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    del x, y
    torch.cuda.empty_cache()
    return 2 * (1 << 29) * 2 / statistics.median(ts)


def make_experts(shape: dict, device: str) -> tuple[torch.Tensor, ...]:
    """Random packed e2m1 bytes and scale bytes 119 (``2**-8``) for ``shape``'s experts."""
    E, D, I = shape["E"], shape["D"], shape["I"]  # noqa: E741
    g = torch.Generator(device=device).manual_seed(0)
    w13 = torch.randint(0, 256, (E, 2 * I, D // 2), dtype=torch.uint8, device=device, generator=g)
    w2 = torch.randint(0, 256, (E, D, I // 2), dtype=torch.uint8, device=device, generator=g)
    s13 = torch.full((E, 2 * I, D // 32), 119, dtype=torch.uint8, device=device)
    s2 = torch.full((E, D, I // 32), 119, dtype=torch.uint8, device=device)
    return w13, s13, w2, s2


def make_batches(
    shape: dict, T: int, n: int, device: str, dtype: torch.dtype
) -> list[tuple[torch.Tensor, ...]]:
    """``n`` decode batches of ``T`` tokens: (x, top-k ids without repeats per token, weights)."""
    g = torch.Generator().manual_seed(1000 + T)
    E, k, D = shape["E"], shape["k"], shape["D"]
    out = []
    for _ in range(n):
        ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
        x = torch.randn(T, D, generator=g).to(dtype)
        wts = torch.rand(T, k, generator=g) / k
        out.append((x.to(device), ids.to(device), wts.to(device)))
    return out


def bytes_read(shape: dict, batches: list[tuple[torch.Tensor, ...]], elem: int) -> float:
    """Mean bytes one call must move: its distinct experts' packed weights and scales, x and y."""
    E, D, I = shape["E"], shape["D"], shape["I"]  # noqa: E741
    per_expert = 3 * I * D // 2 + 3 * I * D // 32
    tot = 0
    for x, ids, _ in batches:
        distinct = len({int(e) for e in ids.flatten().tolist() if 0 <= int(e) < E})
        tot += distinct * per_expert + 2 * x.numel() * elem
    return tot / len(batches)


def variant_configs(names: list[str], dry: bool) -> dict[str, dict | None]:
    """``default`` (None: the wrapper's choice) then the named variants in pair mode, bf16 product; the dry run
    cuts K steps to 64 (tiny shapes, the interpreter)."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS

    out: dict[str, dict | None] = {"default": None}
    for name in names:
        if name not in DECODE_VARIANTS:
            raise ValueError(f"--variants: unknown {name!r} (known: {sorted(DECODE_VARIANTS)})")
        cfg = dict(DECODE_VARIANTS[name], PAIR=1, FP8_MMA=0)  # bf16 whatever the environment says
        if dry:
            cfg.update(BLOCK_K=64, num_stages=2, DOWN_STAGES=2)
            cfg.update({"DOWN_BLOCK_K": 64} if "DOWN_BLOCK_K" in cfg else {})
        out[name] = cfg
    return out


def mma_configs(shape: dict, T: int, dry: bool) -> dict[str, dict | None]:
    """The product rows for ``T`` tokens (module docstring): the wrapper's layout with the bf16 and
    fp8 products, then the other layout forced for both."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_DEFAULT, _use_pair_mode

    fp8 = {"FP8_MMA": 1}
    out: dict[str, dict | None] = {
        "default": BF16,
        "fp8": fp8,
        "fp8_table": dict(fp8, FP8_DECODE=1),
        "fp8_fold": dict(fp8, FP8_DECODE=2),
    }
    if not dry:
        out["fp8_cvt"] = dict(fp8, FP8_CVT=1)
        out["fp8_fold_cvt"] = dict(fp8, FP8_DECODE=2, FP8_CVT=1)
    if _use_pair_mode(T * shape["k"], shape["k"], shape["E"]):
        other, cfg = "expert", dict(EXPERT)
    else:
        other, cfg = "pair", variant_configs([DECODE_DEFAULT], dry)[DECODE_DEFAULT]
    out[f"bf16_{other}"] = cfg
    fp8_cfg = dict({key: v for key, v in cfg.items() if key != "FP4_WORDS"}, **fp8)  # words: bf16 only
    if dry or fp8_cfg["BLOCK_K"] % 128:
        fp8_cfg.update(BLOCK_K=128, DOWN_BLOCK_K=128)
    out[f"fp8_{other}"] = fp8_cfg
    out[f"fp8_fold_{other}"] = dict(fp8_cfg, FP8_DECODE=2)
    return out


def time_graph(fns: list, device: str, replays: int) -> float:
    """Median us per call of ``fns`` (called back to back) over ``replays`` CUDA-graph replays
    (CPU: wall time of eager calls)."""
    for f in fns:
        f()
    if device != "cuda":
        ts = []
        for _ in range(max(2, replays // 10)):
            t = time.perf_counter()
            for f in fns:
                f()
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) / len(fns) * 1e6
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fns:
            f()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    del g
    return statistics.median(ts) / len(fns)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_DEFAULT, DECODE_VARIANTS, fused_moe_fp4

    t_start = time.perf_counter()
    device = "cpu" if args.dry else "cuda"
    dtype = torch.float32 if args.dry else torch.bfloat16
    shape = DRY if args.dry else FLASH
    tokens = (1, 2) if args.dry else (QUICK_TOKENS if args.quick else TOKENS)
    mma_tokens = (1, 2) if args.dry else (QUICK_TOKENS if args.quick else MMA_TOKENS)
    if args.tokens:
        tokens = mma_tokens = tuple(int(t) for t in args.tokens.split(","))
    tokens = tokens if args.set in ("all", "variants") else ()
    mma_tokens = mma_tokens if args.set in ("all", "mma") else ()
    names = (
        args.variants.split(",") if args.variants else list(QUICK_VARIANTS if args.quick else DECODE_VARIANTS)
    )
    if args.dry:
        names = names[:4]
    var_configs = variant_configs(names, args.dry)
    var_configs["default"] = BF16  # the wrapper's choice, bf16 whatever the environment says
    all_configs: dict[str, dict | None] = {}
    calls = 2 if args.dry else args.calls
    bw = copy_bandwidth(device)
    w13, s13, w2, s2 = make_experts(shape, device)
    elem = torch.empty((), dtype=dtype).element_size()
    rows: list[dict[str, Any]] = []
    for T in sorted(set(tokens) | set(mma_tokens)):
        configs = dict(var_configs) if T in tokens else {}
        if T in mma_tokens:
            configs.update({n: c for n, c in mma_configs(shape, T, args.dry).items() if n not in configs})
        all_configs.update(configs)
        batches = make_batches(shape, T, calls, device, dtype)
        roof_us = bytes_read(shape, batches, elem) / bw * 1e6
        x0, ids0, wts0 = batches[0]
        ref = fused_moe_fp4(x0, w13, s13, w2, s2, ids0, wts0, 10.0, config=BF16)
        ref_max = ref.float().abs().max().item()
        default_us = None
        for name, cfg in configs.items():
            row: dict[str, Any] = {"variant": name, "T": T, "fp8": bool(cfg and cfg.get("FP8_MMA"))}
            try:
                out = fused_moe_fp4(x0, w13, s13, w2, s2, ids0, wts0, 10.0, config=cfg)
                row["max_abs_diff"] = (out.float() - ref.float()).abs().max().item()
                row["ref_max_abs"] = ref_max
                fns = [
                    (lambda b=b, c=cfg: fused_moe_fp4(b[0], w13, s13, w2, s2, b[1], b[2], 10.0, config=c))
                    for b in batches
                ]
                us = time_graph(fns, device, args.replays)
                row["us"] = round(us, 2)
                row["x_roofline"] = round(us / roof_us, 2)
                if name == "default":
                    default_us = us
                if default_us:
                    row["speedup_vs_default"] = round(default_us / us, 3)
            except Exception as e:  # noqa: BLE001 - a variant the device refuses: report it, go on
                row["error"] = repr(e)[:300]
            rows.append(row)
            print(json.dumps(row), flush=True)
        if device == "cuda":
            torch.cuda.empty_cache()
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter, dry)",
        "shape": shape,
        "copy_bytes_per_s": bw,
        "calls_per_graph": calls,
        "replays": args.replays,
        "decode_default": DECODE_DEFAULT,
        "variants": all_configs,
        "rows": rows,
        "wall_s": round(time.perf_counter() - t_start, 1),
    }


def markdown(res: dict[str, Any]) -> str:
    """The report's markdown table (one row per variant and T)."""
    s = res["shape"]
    lines = [
        f"# FP4 MoE decode sweep ({res['device']})",
        "",
        f"E={s['E']}, k={s['k']}, D={s['D']}, I={s['I']}; copy bandwidth {res['copy_bytes_per_s'] / 1e12:.3f} TB/s; "
        f"{res['calls_per_graph']} calls per graph (distinct routings), median of {res['replays']} replays; "
        f"pair-mode default: `{res['decode_default']}`; wall {res['wall_s']} s.",
        "",
        "| variant | T | us | x roofline | speed-up vs default | max abs diff (of max abs) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        if "error" in r:
            lines.append(f"| {r['variant']} | {r['T']} | error: {r['error'][:80]} | | | |")
            continue
        lines.append(
            f"| {r['variant']} | {r['T']} | {r['us']:.1f} | {r['x_roofline']:.2f} | "
            f"{r.get('speedup_vs_default', float('nan')):.2f}x | {r['max_abs_diff']:.3g} ({r['ref_max_abs']:.3g}) |"
        )
    lines += ["", "Configurations:", ""]
    lines += [f"- `{n}`: {c if c is not None else 'wrapper default'}" for n, c in res["variants"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for moe_fp4_sweep.md / .json")
    p.add_argument("--quick", action="store_true", help=f"T in {QUICK_TOKENS}, variants {QUICK_VARIANTS}")
    p.add_argument("--dry", action="store_true", help="CPU check: tiny shapes under TRITON_INTERPRET=1")
    p.add_argument("--variants", default="", help="comma-separated DECODE_VARIANTS names (default: all)")
    p.add_argument("--tokens", default="", help="comma-separated token counts (default 1..16, mma 1..64)")
    p.add_argument(
        "--set",
        default="all",
        choices=("all", "variants", "mma"),
        help="variants: the pair-mode DECODE_VARIANTS (T <= 16); mma: bf16 vs fp8 products (T <= 64)",
    )
    p.add_argument("--replays", type=int, default=30, help="graph replays per timing (>= 20)")
    p.add_argument("--calls", type=int, default=8, help="calls (distinct routings) per graph")
    args = p.parse_args(argv)
    if args.replays < 20 and not args.dry:
        raise ValueError(f"--replays: at least 20, got {args.replays}")
    if args.calls < 1:
        raise ValueError(f"--calls: at least 1, got {args.calls}")
    if not args.dry and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --dry for the CPU check")
    res = run(args)
    md = markdown(res)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "moe_fp4_sweep.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, "moe_fp4_sweep.md"), "w") as f:
        f.write(md)
    print(md)
    errors = [r for r in res["rows"] if "error" in r]
    return 1 if args.dry and errors else 0


if __name__ == "__main__":
    sys.exit(main())
