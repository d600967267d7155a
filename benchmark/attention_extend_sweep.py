"""Sparse attention over one long prefill chunk: the kernel's tile settings at long context.

At long context the prefill's largest kernel is the paged attention (a 262,144-token prefill on
the H200: 32% of its device time, ``profile_longctx.py``), and its HCA layers grow with the
context: every token attends to all ``position / 128`` compressed entries. This sweep times
``sgl_kernel_v4.triton.attention.sparse_attention`` over one chunk of ``--tokens`` tokens of one
request that ends at ``C`` tokens of context (``--contexts``), DeepSeek-V4 shapes (64 heads x 512,
window 128, 256-token pages):

* ``HCA``: every compressed entry below the token's visible count ``(position + 1) // 128``;
* ``CSA``: 512 entries per token drawn from its visible ``(position + 1) // 4``;

for the wrapper's default tiles (the baseline, same run) and each ``(block_h, block_n, num_warps,
num_stages)`` of the sweep, bf16 pools (``--fp8``: the 584-byte fp8 main entries too). Timing:
CUDA events around each call, median of ``--calls`` calls after one warm-up call (which
compiles). ``TFLOP/s``: ``4 x heads x 512 x keys`` summed over the chunk's tokens (two dots per
key) over the time. ``max err``: the largest absolute difference from the default tiles' output
relative to its largest value (tiles change only the summation order). A setting that fails to
compile or launch is reported, not fatal.

Usage: ``python benchmark/attention_extend_sweep.py --out DIR [--dry] [--spill-free | --qk-once]`` writes
``DIR/attention_extend_sweep.md`` and ``.json``. ``--dry``: CPU, ``TRITON_INTERPRET=1``, tiny
shapes (16 heads x 64, fp32), checks the plumbing only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

if "--dry" in sys.argv:  # before triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import median_ms  # noqa: E402

GPU = dict(H=64, D=512, window=128, page=256, topk=512, tokens=2048, contexts="131072,524288")
DRY = dict(H=16, D=64, window=16, page=256, topk=16, tokens=8, contexts="1024")
#: (block_h, block_n, num_warps, num_stages); the wrapper's prefill default is (64, 32, 8, 2)
SETTINGS: tuple[tuple[int, ...], ...] = (
    (64, 16, 8, 2),
    (64, 32, 8, 1),
    (64, 32, 8, 3),
    (64, 64, 8, 2),
    (64, 64, 8, 1),
    (64, 32, 4, 2),
    (32, 32, 4, 2),
    (32, 64, 4, 2),
    (32, 64, 8, 2),
    (32, 32, 8, 3),
    (16, 64, 4, 2),
)
#: ``--spill-free``: settings whose sm_90 compile spills no registers (``test_kernels_compile.py``:
#: the default spills ~1.4 KB), with the value-column split (``dv_split``, 5th field) or without:
#: (block_h, block_n, num_warps, num_stages, dv_split)
SPILL_FREE = (
    (32, 32, 8, 2, 1),
    (32, 32, 8, 2, 2),
    (64, 32, 8, 2, 2),
    (64, 64, 8, 2, 2),
    (64, 16, 8, 2, 2),
)
#: ``--qk-once``: the key rows on the MMA's M (``keys_on_m``, 6th field; ``attention_tile``'s
#: "compile statistics"): each warpgroup computes only its own 64 keys' logits, where the default
#: tile has both warpgroups compute all of them; 128-key tiles read in 1, 2 or 4 chunks of ``D``,
#: one stage (two do not fit shared memory), and the default tile at one stage as the control:
#: (block_h, block_n, num_warps, num_stages, dv_split, keys_on_m)
QK_ONCE = (
    (64, 32, 8, 1, 1, 0),
    (64, 128, 8, 1, 1, 1),
    (64, 128, 8, 1, 1, 2),
    (64, 128, 8, 1, 1, 4),
    (32, 128, 8, 1, 1, 2),
    (32, 128, 8, 1, 1, 4),
)
_KEYS = ("block_h", "block_n", "num_warps", "num_stages", "dv_split", "keys_on_m")


def chunk_inputs(kind: str, C: int, sh: dict, n_rows: int, dev: str) -> dict[str, Any]:
    """One request's chunk of ``tokens`` query tokens at positions ``C - tokens .. C - 1``."""
    g = torch.Generator().manual_seed(C)
    T, W, page = sh["tokens"], sh["window"], sh["page"]
    ratio = 128 if kind == "HCA" else 4
    e = page // ratio
    pos = torch.arange(C - T, C)
    n_pages = -(-C // page)
    if n_pages * e > n_rows:
        raise ValueError(f"n_rows: {n_rows} entries too few for {kind} at {C}")
    n_win = max(2, n_rows // W)
    d: dict[str, Any] = dict(
        q=torch.randn(T, sh["H"], sh["D"], generator=g),
        sinks=torch.randn(sh["H"], generator=g),
        pos=pos,
        swa_pages=torch.randint(0, n_win, (T, 2), generator=g),
        req_to_page=torch.randperm(n_rows // e, generator=g)[:n_pages][None, :].int(),
        req_rows=torch.zeros(1, dtype=torch.int64),
        token_req=torch.zeros(T, dtype=torch.int64),
        comp_entries=None,
        comp_visible=None,
    )
    vis = (pos + 1) // ratio
    if kind == "HCA":
        d["comp_visible"] = vis
        keys = vis.clamp(max=n_pages * e) + W
    else:
        k = sh["topk"]
        d["comp_entries"] = (torch.rand(T, k, generator=g) * vis[:, None]).long()
        keys = torch.full((T,), k + W)
    d = {n: (v.to(dev) if isinstance(v, torch.Tensor) else v) for n, v in d.items()}
    d["e"], d["keys"] = e, int(keys.sum())
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--contexts", default="")
    ap.add_argument("--kinds", default="HCA,CSA")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--fp8", action="store_true", help="also the fp8 main-entry pools")
    ap.add_argument(
        "--spill-free", action="store_true", help="time SPILL_FREE (with dv_split) instead of SETTINGS"
    )
    ap.add_argument("--qk-once", action="store_true", help="time QK_ONCE (keys_on_m) instead of SETTINGS")
    a = ap.parse_args()
    from sgl_kernel_v4.triton.attention import sparse_attention

    dev = "cpu" if a.dry else "cuda"
    sh = DRY if a.dry else GPU
    settings = QK_ONCE if a.qk_once else SPILL_FREE if a.spill_free else SETTINGS
    if a.dry:
        settings = tuple((min(st[0], 16), min(st[1], 16), *st[2:]) for st in settings[:2])
    contexts = [int(c) for c in (a.contexts or sh["contexts"]).split(",")]
    n_rows = max(max(contexts) // 4 + 1024, 4096)
    if a.dry:
        pools = {"fp32": torch.randn(n_rows, sh["D"], generator=torch.Generator().manual_seed(0))}
    else:
        from attention_fp8_sweep import _pools

        fp8, dense, _ = _pools(n_rows)
        pools = {"bf16": dense, **({"fp8": fp8} if a.fp8 else {})}
    rows: list[dict] = []
    for kind in a.kinds.split(","):
        for C in contexts:
            d = chunk_inputs(kind, C, sh, n_rows, dev)
            q = d["q"].to(torch.float32 if a.dry else torch.bfloat16)
            flop = 4.0 * sh["H"] * sh["D"] * d["keys"]
            for pname, pool in pools.items():
                out = torch.empty_like(q)

                def call(
                    kw: dict, pool: Any = pool, out: torch.Tensor = out, q: torch.Tensor = q, d: dict = d
                ) -> torch.Tensor:
                    return sparse_attention(
                        q, pool, d["swa_pages"], d["pos"], sh["window"], d["sinks"], sh["D"] ** -0.5, pool,
                        d["comp_entries"], d["comp_visible"], d["req_to_page"], d["req_rows"], d["token_req"],
                        d["e"], out=out, **kw,
                    )  # fmt: skip

                base_ms = median_ms(lambda: call({}), a.calls, dev)
                base = out.float().clone()
                scale = float(base.abs().max()) or 1.0
                for st in [None, *settings]:
                    kw = {} if st is None else dict(zip(_KEYS, st))
                    label = "default" if st is None else "h{} n{} w{} s{}".format(*st[:4])
                    label += f" dv{st[4]}" if st is not None and len(st) > 4 else ""
                    label += f" km{st[5]}" if st is not None and len(st) > 5 else ""
                    row = {"kind": kind, "C": C, "pool": pname, "setting": label}
                    try:
                        ms = base_ms if st is None else median_ms(lambda kw=kw: call(kw), a.calls, dev)
                        err = float((out.float() - base).abs().max()) / scale
                    except Exception as exc:  # a tile the compiler or the device refuses
                        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                        rows.append(row)
                        print(row, flush=True)
                        continue
                    row.update(ms=ms, speedup=base_ms / ms, tflops=flop / ms / 1e9, max_err=err)
                    rows.append(row)
                    print(f"{kind} C {C} {pname} {label}: {ms:.3f} ms ({base_ms / ms:.2f}x, "
                          f"{row['tflops']:.1f} TFLOP/s) err {err:.1e}", flush=True)  # fmt: skip
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "attention_extend_sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = [
        f"# Sparse attention over one prefill chunk ({sh['tokens']} tokens, {sh['H']} heads x {sh['D']})\n",
        "| kind | C | pool | setting | ms | vs default | TFLOP/s | max err |",
        "|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['C']} | {r['pool']} | {r['setting']} | {r['error']} | | | |")
        else:
            lines.append(f"| {r['kind']} | {r['C']} | {r['pool']} | {r['setting']} | {r['ms']:.3f} | "
                         f"{r['speedup']:.2f}x | {r['tflops']:.1f} | {r['max_err']:.1e} |")  # fmt: skip
    with open(os.path.join(a.out, "attention_extend_sweep.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
