"""Where long-context time goes: per-kernel CUDA time of the indexer and of a chunked prefill.

Phases:

1. ``indexer``: :func:`sgl_kernel_v4.triton.indexer.indexer_topk` under ``torch.profiler`` in two
   shapes: decode (1 token over 262,144 candidates: a 1M-token context's CSA entries) and a
   prefill chunk (2,048 tokens over ~32,768 candidates, each token seeing its causal share: the
   last chunk of a 131k prompt). Per kernel: calls and mean microseconds.
2. ``prefill``: an in-process ``Scheduler`` (``flash-8l-32e``, dummy bf16 weights, overlap off)
   prefills one ``--prefill-len`` prompt after an untimed warm-up; the top kernels by total CUDA
   time over the whole prefill, with their share.

Usage: ``python benchmark/profile_longctx.py --out DIR [--dry]`` writes ``DIR/profile.md``.
``--dry``: CPU, tiny shapes, the Triton kernels under the interpreter (it sets ``TRITON_INTERPRET=1``
itself); it checks the script, its timings mean nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LINES: list[str] = []


def table(prof: Any, title: str, top: int, per_call: bool) -> None:
    """Append the ``top`` kernels of ``prof`` by total device time (CPU time on the CPU)."""
    dev_attr = "device_time_total" if torch.cuda.is_available() else "cpu_time_total"
    rows = [e for e in prof.key_averages() if getattr(e, dev_attr, 0) > 0]
    if torch.cuda.is_available():  # kernels only (no CPU-side op rows, whose device time double counts)
        rows = [e for e in rows if e.device_type == torch.autograd.DeviceType.CUDA]
    rows.sort(key=lambda e: -getattr(e, dev_attr))
    total = sum(getattr(e, dev_attr) for e in rows) or 1.0
    LINES.append(f"### {title}\n\nTotal {total / 1e3:.2f} ms.\n")
    LINES.append("| kernel | calls | total ms | mean us | share |")
    LINES.append("|---|---:|---:|---:|---:|")
    for e in rows[:top]:
        t = getattr(e, dev_attr)
        LINES.append(
            f"| `{e.key[:70]}` | {e.count} | {t / 1e3:.3f} | {t / max(1, e.count):.1f} | {t / total:.1%} |"
        )
    LINES.append("")


def save(out: str) -> None:
    with open(os.path.join(out, "profile.md"), "w") as f:
        f.write("\n".join(LINES) + "\n")


def phase_indexer(dev: str, out: str, dry: bool, chunk_cands: tuple[int, ...] = (32768,)) -> None:
    from sgl_kernel_v4.triton.indexer import indexer_topk

    Hi, di, e = (64, 128, 64) if not dry else (4, 32, 64)
    dt = torch.bfloat16 if not dry else torch.float32
    cases = [("decode", 1, 262144)] + [("prefill chunk", 2048, c) for c in chunk_cands]
    if dry:
        cases = [("decode", 1, 1024), ("prefill chunk", 8, 512)]
    for name, T, C in cases:
        g = torch.Generator(device=dev).manual_seed(1)
        n_pages = C // e + 1
        kv = torch.randn(n_pages * e, di, device=dev, dtype=dt, generator=g)
        r2p = torch.randperm(n_pages, device=dev, generator=g)[None, : C // e].int()
        rows = torch.zeros(1, dtype=torch.int64, device=dev)
        treq = torch.zeros(T, dtype=torch.int64, device=dev)
        vis = (
            torch.arange(C - T + 1, C + 1, device=dev, dtype=torch.int64)
            if T > 1
            else torch.full((1,), C, device=dev)
        )
        q = torch.randn(T, Hi, di, device=dev, dtype=dt, generator=g)
        w = torch.randn(T, Hi, device=dev, generator=g) * Hi**-0.5
        o = torch.empty(T, 512, dtype=torch.int64, device=dev)

        args = (q, w, kv, vis, r2p, rows, treq, e, 512, di**-0.5)

        def run(args: tuple = args, C: int = C, o: torch.Tensor = o) -> None:
            indexer_topk(*args, max_visible=C, out=o)

        run()
        if dev == "cuda":
            torch.cuda.synchronize()
        reps = 20 if not dry else 1
        with torch.profiler.profile() as prof:
            for _ in range(reps):
                run()
            if dev == "cuda":
                torch.cuda.synchronize()
        table(prof, f"indexer_topk, {name}: {T} tokens x {C} candidates ({reps} calls)", 8, True)
        save(out)


def phase_prefill(dev: str, out: str, n: int, dry: bool) -> None:
    from longctx import make_model_dir, run_reqs, warm_up
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.server_args import ServerArgs

    sa = ServerArgs(
        model_path=make_model_dir("tiny" if dry else "flash-8l-32e"),
        load_format="dummy",
        device=dev,
        dtype="float32" if dry else "bfloat16",
        context_length=4096 if dry else 1 << 20,
        max_running_requests=8,
        cuda_graph_max_bs=8,
        skip_warmup=True,
        disable_overlap_schedule=True,
        **({"max_total_tokens": 40000} if dry else {}),
    )
    s = Scheduler(sa)
    vocab = s.runner.mc.hf.vocab_size
    warm_up(s, vocab, 2048 if not dry else 256, 2)
    ids = torch.randint(10, vocab - 1, (n,), generator=torch.Generator().manual_seed(3)).tolist()
    t = time.time()
    with torch.profiler.profile() as prof:
        r = run_reqs(s, {"p": ids}, 1)
    LINES.append(
        f"Prefill of {n} tokens (chunk {s.chunked_prefill_size}): TTFT {r['ttft_s']:.2f} s under the "
        f"profiler ({time.time() - t:.1f} s with its overhead).\n"
    )
    table(prof, f"prefill of {n} tokens, top kernels", 25, False)
    save(out)


def main(argv: list[str] | None = None) -> int:
    """Run the ``--phases`` and write ``--out``/profile.md (module docstring); returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true")
    ap.add_argument("--prefill-len", type=int, default=32768)
    ap.add_argument(
        "--chunk-cands", default="32768", help="candidates of the 2,048-token prefill chunks (comma list)"
    )
    ap.add_argument("--phases", default="indexer,prefill")
    a = ap.parse_args(argv)
    if a.dry:
        os.environ["TRITON_INTERPRET"] = "1"  # before the first triton import: no GPU driver on the CPU
    os.makedirs(a.out, exist_ok=True)
    dev = "cpu" if a.dry else "cuda"
    LINES.append(
        f"# Long-context profile ({torch.cuda.get_device_name() if dev == 'cuda' else 'cpu dry run'})\n"
    )
    phases = a.phases.split(",")
    if "indexer" in phases:
        phase_indexer(dev, a.out, a.dry, tuple(int(c) for c in a.chunk_cands.split(",")))
    if "prefill" in phases:
        phase_prefill(dev, a.out, a.prefill_len if not a.dry else 600, a.dry)
    save(a.out)
    print("\n".join(LINES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
