"""Attention over one long prefill chunk: the paged kernel against the gathered-entry paths.

One request's chunk of 2,048 tokens ending at context ``C`` (``--contexts``), DeepSeek-V4 shapes
(64 heads x 512, window 128, 256-token pages; the inputs of ``attention_extend_sweep.py``), HCA:
every token attends to its ``(position + 1) // 128`` compressed entries, its window and the sink.

* ``paged``: ``sgl_kernel_v4.triton.attention.sparse_attention`` (the baseline, same run);
* ``dense ...``: ``sgl_kernel_v4.triton.attention_prefix.sparse_attention_dense_prefix`` with the
  whole chunk as one segment, for each tile setting of :data:`SETTINGS`;
* ``window only``: the paged kernel with the entries switched off (the dense path's first step);
* ``--gemm``: ``dense gemm logits``, the dense path with ``logits="gemm"`` (cuBLAS ``Q Kᵀ`` into
  fp32, one softmax pass) instead of the Triton logits kernel and rescale pass.

Timing: CUDA events, median of ``--calls`` calls after a warm-up call. ``TFLOP/s``: ``4 x heads x
512 x keys`` over the chunk's tokens (the paged kernel's products) over the time. ``rel err``:
``|dense - paged| / |paged|`` (L2), the two paths' summation orders differ. bf16 pools, and
``--fp8`` the 584-byte fp8 entries too.

``--kinds CSA`` (or ``HCA,CSA``): the CSA layers' chunk (window + 512 selected entries per token):
the paged kernel over each pool, and over an fp8 pool the decoded path
(``sparse_attention_decoded_csa``: the request's entries decoded to bf16 once per call) for each
tile option of :data:`CSA_SETTINGS`, against the paged kernel over the fp8 pool.

Usage: ``python benchmark/attention_prefix_bench.py --out DIR [--dry]`` writes
``DIR/attention_prefix_bench.md`` / ``.json``. ``--dry``: CPU, ``TRITON_INTERPRET=1``, tiny shapes.
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

from attention_extend_sweep import DRY, GPU, chunk_inputs  # noqa: E402
from timing import median_ms  # noqa: E402

#: (block_m, block_n, block_k, num_warps, num_stages) of the dense logits kernel; the first is the
#: default; ``block_k`` 0: the queries resident (one dot of K = D per key tile; the three below fit
#: sm_90's shared memory without spills, compiled on the CPU)
SETTINGS: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 64, 64, 8, 3),
    (128, 32, 0, 8, 2),
    (64, 64, 0, 8, 2),
    (64, 32, 0, 4, 3),
    (64, 64, 64, 4, 2),
    (128, 64, 64, 8, 2),
    (64, 128, 64, 4, 2),
    (128, 128, 64, 8, 2),
    (64, 64, 128, 4, 2),
)
_KEYS = ("block_m", "block_n", "block_k", "num_warps", "num_stages")


def profile_table(fn: Any, dev: str) -> str:
    """The device-time table (``torch.profiler``, by kernel) of three calls of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(3):
            fn()
        if dev == "cuda":
            torch.cuda.synchronize()
    key = "cuda_time_total" if dev == "cuda" else "cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=12)


#: tile options of the CSA decoded path's kernel calls; ``{}`` is the wrapper's default (fp8 rules)
CSA_SETTINGS: tuple[dict, ...] = ({}, {"num_stages": 1}, {"block_n": 64}, {"block_n": 16})


def csa_rows(a: Any, sh: dict, contexts: list[int], pools: dict, n_rows: int, dev: str) -> list[dict]:
    """CSA over one chunk (window + 512 selected entries per token): the paged kernel over each pool
    and, with an fp8 pool, the decoded path per :data:`CSA_SETTINGS`. Speed-ups and errors are
    against the paged kernel over the fp8 pool (the first pool's without one)."""
    from sgl_kernel_v4.dense_prefix import PrefixSegment
    from sgl_kernel_v4.triton import attention_prefix as ap_mod
    from sgl_kernel_v4.triton.attention import sparse_attention

    rows: list[dict] = []
    for C in contexts:
        d = chunk_inputs("CSA", C, sh, n_rows, dev)
        q = d["q"].to(torch.float32 if a.dry else torch.bfloat16)
        flop = 4.0 * sh["H"] * sh["D"] * d["keys"]
        tail = (d["req_to_page"], d["req_rows"], d["token_req"], d["e"])
        seg = [PrefixSegment(0, q.shape[0], 0, C // 4)]
        here: list[tuple[dict, torch.Tensor | None]] = []
        for pname, pool in pools.items():
            args = (q, pool, d["swa_pages"], d["pos"], sh["window"], d["sinks"], sh["D"] ** -0.5, pool)
            cases: list[tuple[str, Any]] = [(f"paged {pname}", None)]
            if pname == "fp8":
                cases += [(f"decoded {st or 'default'}", st) for st in CSA_SETTINGS]
            for label, st in cases:

                def call(
                    st: Any = st, args: tuple = args, tail: tuple = tail, d: dict = d, seg: list = seg
                ) -> Any:
                    if st is None:
                        return sparse_attention(*args, d["comp_entries"], None, *tail)
                    return ap_mod.sparse_attention_decoded_csa(*args, d["comp_entries"], *tail, seg, **st)

                row: dict[str, Any] = {"kind": "CSA", "C": C, "pool": pname, "setting": label}
                try:
                    row.update(ms=median_ms(call, a.calls, dev), tflops=0.0)
                    row["tflops"] = flop / row["ms"] / 1e9
                    here.append((row, call().float()))
                except Exception as exc:  # a tile the compiler or the device refuses
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    here.append((row, None))
        ok = [(r, o) for r, o in here if o is not None]
        base_row, base = next(((r, o) for r, o in ok if r["setting"] == "paged fp8"), ok[0])
        for r, o in here:
            if o is not None:
                r.update(speedup=base_row["ms"] / r["ms"], rel_err=float((o - base).norm() / base.norm()))
            rows.append(r)
            print(r, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--contexts", default="32768,65536,131072,524288,1048576")
    ap.add_argument("--kinds", default="HCA", help="HCA (dense path) and / or CSA (fp8 entries decoded once)")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--fp8", action="store_true")
    ap.add_argument("--settings", type=int, default=len(SETTINGS), help="time the first N settings")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also a torch.profiler table of one dense call per context (default tile)",
    )
    ap.add_argument(
        "--gemm", action="store_true", help="HCA: also the dense path with cuBLAS logits + one softmax pass"
    )
    a = ap.parse_args()
    from sgl_kernel_v4.dense_prefix import PrefixSegment
    from sgl_kernel_v4.triton import attention_prefix as ap_mod
    from sgl_kernel_v4.triton.attention import sparse_attention

    dev = "cpu" if a.dry else "cuda"
    sh = DRY if a.dry else GPU
    contexts = [int(c) for c in (a.contexts if not a.dry else "1024").split(",")]
    n_rows = max(max(contexts) // 4 + 1024, 4096)
    if a.dry:
        pools = {"fp32": torch.randn(n_rows, sh["D"], generator=torch.Generator().manual_seed(0))}
        settings: tuple = ((16, 16, 16, 4, 1),)
    else:
        from attention_fp8_sweep import _pools

        fp8, dense, _ = _pools(n_rows)
        pools = {"bf16": dense, **({"fp8": fp8} if a.fp8 else {})}
        settings = SETTINGS[: a.settings]
    rows: list[dict] = []
    if "CSA" in a.kinds.split(","):
        rows += csa_rows(a, sh, contexts, pools, n_rows, dev)
    if "HCA" not in a.kinds.split(","):
        contexts = []
    for C in contexts:
        d = chunk_inputs("HCA", C, sh, n_rows, dev)
        q = d["q"].to(torch.float32 if a.dry else torch.bfloat16)
        T = q.shape[0]
        vis = d["comp_visible"]
        seg = [PrefixSegment(0, T, 0, C // 128)]
        flop = 4.0 * sh["H"] * sh["D"] * d["keys"]
        for pname, pool in pools.items():
            args = (q, pool, d["swa_pages"], d["pos"], sh["window"], d["sinks"], sh["D"] ** -0.5, pool)
            tail = (d["req_to_page"], d["req_rows"], d["token_req"], d["e"])

            def paged(vis: torch.Tensor = vis, args: tuple = args, tail: tuple = tail) -> torch.Tensor:
                return sparse_attention(*args, None, vis, *tail)

            base_ms = median_ms(paged, a.calls, dev)
            base = paged().float()
            cases: list[tuple[str, Any]] = [("paged", None), ("window only", "window")]
            cases += [("dense m{} n{} k{} w{} s{}".format(*st), st) for st in settings]
            if a.gemm:
                cases.append(("dense gemm logits", {"logits": "gemm"}))
            for label, st in cases:
                row: dict[str, Any] = {"kind": "HCA", "C": C, "pool": pname, "setting": label}
                try:
                    if st is None:
                        ms, out = base_ms, base
                    elif st == "window":
                        zero = torch.zeros_like(vis)
                        ms = median_ms(
                            lambda zero=zero, args=args, tail=tail: sparse_attention(
                                *args, None, zero, *tail
                            ),
                            a.calls,
                            dev,
                        )
                        out = None
                    else:
                        kw = dict(st) if isinstance(st, dict) else dict(zip(_KEYS, st))

                        def dense(
                            kw: dict = kw,
                            args: tuple = args,
                            tail: tuple = tail,
                            vis: torch.Tensor = vis,
                            seg: list = seg,
                        ) -> torch.Tensor:
                            return ap_mod.sparse_attention_dense_prefix(*args, vis, *tail, seg, **kw)

                        ms = median_ms(dense, a.calls, dev)
                        out = dense().float()
                except Exception as exc:  # a tile the compiler or the device refuses
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    print(row, flush=True)
                    continue
                if a.profile and (st == settings[0] or isinstance(st, dict)):
                    row["profile"] = profile_table(dense, dev)
                    print(row["profile"], flush=True)
                err = float((out - base).norm() / base.norm()) if out is not None else float("nan")
                row.update(ms=ms, speedup=base_ms / ms, tflops=flop / ms / 1e9, rel_err=err)
                rows.append(row)
                print(f"HCA C {C} {pname} {label}: {ms:.3f} ms ({base_ms / ms:.2f}x, "
                      f"{row['tflops']:.1f} TFLOP/s) rel err {err:.1e}", flush=True)  # fmt: skip
    print(f"fp32 GEMM output from bf16 operands (torch.mm out_dtype): {ap_mod._MM_OUT_DTYPE[0]}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "attention_prefix_bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    lines = [
        f"# HCA attention over one prefill chunk ({sh['tokens']} tokens, {sh['H']} heads x {sh['D']})\n",
        "| kind | C | pool | path | ms | baseline / this | TFLOP/s | rel err vs baseline |",
        "|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['C']} | {r['pool']} | {r['setting']} | {r['error']} | | | |")
        else:
            lines.append(f"| {r['kind']} | {r['C']} | {r['pool']} | {r['setting']} | {r['ms']:.3f} | {r['speedup']:.2f}x | "
                         f"{r['tflops']:.1f} | {r['rel_err']:.1e} |")  # fmt: skip
    with open(os.path.join(a.out, "attention_prefix_bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
