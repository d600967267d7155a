"""mHC pre over prefill chunks: the projection kernel's tile (``hc_pre(mix_tile=...)``).

Off the decode path, ``sgl_kernel_v4.triton.mhc.hc_pre`` projects each token's flattened streams
``[n * D]`` onto ``(2 + n) * n`` mixing logits with ``_hc_mix_kernel`` (tf32x3 tensor-core dots,
programs of ``BLOCK_T`` tokens x one K slice), then finishes per token. In a 262,144-token
prefill on the H200 the projection took 7% of the device time (261 us per 2,048-token call,
``profile_longctx.py``), several times its read floor. This times ``hc_pre`` (``path="legacy"``,
the block's RMSNorm fused, as the model calls it; n = 4, D = 4,096, bf16 streams) at ``--tokens``
for the default tile (:data:`~sgl_kernel_v4.triton.mhc.PREFILL_MIX_TILE`, the baseline, same run)
and each ``(tokens per program, warps)`` of the sweep: CUDA events around each call, the median
of ``--calls`` calls after a warm-up call (which compiles). ``floor us``: the streams' bytes at
the copy bandwidth measured in the same run. ``max diff``: the largest absolute difference of
``collapsed`` / ``post`` / ``comb`` from the default tile's (only the order of the K sums
differs).

Usage: ``python benchmark/mhc_mix_sweep.py --out DIR [--dry]`` writes ``DIR/mhc_mix_sweep.md``.
``--dry``: CPU, ``TRITON_INTERPRET=1``, tiny shapes (checks the plumbing only).
"""

from __future__ import annotations

import argparse
import os
import sys

if "--dry" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import median_ms  # noqa: E402

TILES = ((16, 4), (32, 4), (64, 4), (64, 8), (128, 8), (32, 8))
#: ``--variants`` rows: ``(mix tile, K splits or None for the wrapper's rule, product)``
VARIANTS = (
    ((128, 8), 32, "tf32x3"),
    ((128, 8), 64, "tf32x3"),
    ((64, 4), 64, "tf32x3"),
    ((128, 8), None, "bf16x3"),
    ((128, 8), 32, "bf16x3"),
    ((128, 8), 64, "bf16x3"),
    ((128, 4), 32, "bf16x3"),
    ((64, 4), None, "bf16x3"),
    ((64, 4), 64, "bf16x3"),
    ((64, 4), 128, "bf16x3"),
    ((32, 4), 128, "bf16x3"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--tokens", default="")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument(
        "--variants",
        action="store_true",
        help="sweep VARIANTS (tile, K splits, tf32x3 / bf16x3 product) instead of the tiles",
    )
    a = ap.parse_args()
    from sgl_kernel_v4.triton.mhc import PREFILL_MIX_MIN_T, PREFILL_MIX_TILE, hc_pre

    dev, dt = ("cpu", torch.float32) if a.dry else ("cuda", torch.bfloat16)
    n, D = (4, 64) if a.dry else (4, 4096)
    tokens = [int(t) for t in (a.tokens or ("40" if a.dry else "2048,8192")).split(",")]
    if a.variants:
        tiles = [v for v in VARIANTS if not a.dry or v[2] == "tf32x3"][: 2 if a.dry else None]
    else:
        tiles = [(t, None, None) for t in (TILES[:2] if a.dry else TILES)]
    bw = None
    if dev == "cuda":
        x = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
        y = torch.empty_like(x)
        bw = 2 * x.numel() / (median_ms(lambda: y.copy_(x), 10, dev) * 1e-3) / 1e12  # TB/s
        del x, y
    lines = [
        f"# mHC pre, prefill path: projection tile sweep (n {n}, D {D}, {dt})\n",
        f"Copy bandwidth of the run: {bw:.2f} TB/s.\n" if bw else "",
        "| tokens | mix tile (tokens, warps), K splits, product | us | vs default | floor us | max diff |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    g = torch.Generator().manual_seed(0)
    nm = (2 + n) * n
    for T in tokens:
        x = torch.randn(T, n, D, generator=g).to(dt).to(dev)
        fn = (torch.randn(nm, n * D, generator=g) * (n * D) ** -0.5).to(dev)
        base = (torch.randn(nm, generator=g) * 0.5).to(dev)
        scale = (torch.rand(3, generator=g) + 0.5).to(dev)
        w = (torch.rand(D, generator=g) + 0.5).to(dev)
        floor = x.numel() * x.element_size() / (bw * 1e6) if bw else float("nan")

        def call(v, x=x, fn=fn, base=base, scale=scale, w=w):
            tile, splits, prec = v if v is not None else (None, None, None)
            return hc_pre(x, fn, base, scale, 20, 1e-6, 1e-6, norm_weight=w, norm_weight_eps=1e-6,
                          path="legacy", mix_tile=tile, splits=splits, mix_prec=prec)  # fmt: skip

        ref = [t.float() for t in call(None)]
        base_us = median_ms(lambda: call(None), a.calls, dev) * 1e3
        for tile in [None, *tiles]:
            try:
                us = base_us if tile is None else median_ms(lambda tile=tile: call(tile), a.calls, dev) * 1e3
                got = call(tile)
                diff = max(float((g_.float() - r).abs().max()) for g_, r in zip(got, ref))
            except Exception as exc:  # a tile the compiler refuses
                lines.append(f"| {T} | {tile} | {type(exc).__name__}: {str(exc)[:120]} | | | |")
                continue
            label = (
                f"default {PREFILL_MIX_TILE if T >= PREFILL_MIX_MIN_T else (16, 4)}"
                if tile is None
                else (
                    str(tile[0])
                    if tile[1] is None and tile[2] is None
                    else f"{tile[0]}, {tile[1]}, {tile[2]}"
                )
            )
            lines.append(f"| {T} | {label} | {us:.1f} | {base_us / us:.2f}x | {floor:.1f} | {diff:.1e} |")
            print(lines[-1], flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "mhc_mix_sweep.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
