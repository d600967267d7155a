"""Prefill (extend) indexer top-k: the keys-major scoring settings against the general kernel.

For one prefill chunk of ``--tokens`` tokens of one request (64 heads x 128, top-512, keys in
64-entry pages; token ``t`` sees ``C - (T - 1 - t) // 4`` entries, as a chunk at the end of a
context compressed 4:1), with ``C`` in ``--contexts`` candidates and keys ``bf16`` or the runtime's
``fp4`` indexer pool (``--keys``), times ``sgl_kernel_v4.triton.indexer.indexer_topk`` per call
(CUDA events around each call, the median of ``--calls`` calls after one warm-up call that also
compiles) for

* ``general``: the general scoring kernel (``ExtendScore(form="general")``, the baseline, same run);
* each ``ExtendScore`` setting of ``indexer_score_extend.SWEEP_SETTINGS`` (``--grid full``: every
  ``keys`` / ``keys_split`` x block_t x block_c 64/128 x warps 4/8 x stages 2/3; ``--grid none``: no
  setting), the opt-in forms of ``indexer_score_fold`` (``keys_wdot``, ``keys_wdot16``,
  ``keys_wdot_pairs``, ``keys_fold``) among them;
* ``--settings form/block_t/block_c/warps/stages[/waves],..``: further settings named on the
  command line;
* ``--waves W,..``: the module default (``indexer.EXTEND_SCORE``) with its ``waves`` field set to
  ``W`` (the scoring split into enough shares per token block for at least ``W`` programs per SM:
  ``indexer_score_extend.extend_splits``); ``W = 0``: ``waves=None``, the decode rule
  (``indexer_select.splits``, at most two waves);
* ``--fp4-ab`` (fp4 keys): the module default with the keys decoded by ``load_key`` (a byte and a
  scale byte per value; ``indexer.EXTEND_FP4_ROWS = False``) and whole keys a byte at a time
  (``load_fp4_key_row``; ``True``), same run;
* ``--decoded`` (fp4 keys): the module default over the pool and over a copy of the request's keys
  decoded once per call (``indexer_decoded.indexer_topk_decoded``, the chunk as one segment, the
  copy's decode included in the time), same run; ``same`` must be true (the same bits).

Reports the time per call, the speed-up over ``general``, the scoring rate ``2 T C heads di /
time`` in TFLOP/s (the whole call's time: a lower bound on the scoring kernel's), and whether
the setting's top-k equals the baseline's on that input (``same``; ``shared``: the fraction of
selected entries in common: two kernels may round a score differently in the last bit and swap
near-ties at the boundary). A setting that fails (compile or launch) is reported, not fatal.

Usage:
    GPU:  ``python benchmark/indexer_extend_sweep.py --out DIR`` (about two minutes on an H200)
    CPU:  ``python benchmark/indexer_extend_sweep.py --dry --out DIR`` (tiny shapes under
          ``TRITON_INTERPRET=1``, fp32, eager wall-clock timing: checks the plumbing only)

Writes ``DIR/indexer_extend_sweep.md`` and ``DIR/indexer_extend_sweep.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from timing import median_ms  # noqa: E402

GPU_SHAPES = dict(heads=64, di=128, topk=512, e=64, tokens=2048, contexts="32768,262144")
DRY_SHAPES = dict(heads=4, di=128, topk=16, e=8, tokens=8, contexts="40")


def _keys(n_rows: int, di: int, fmt: str, dev: str, gen: torch.Generator) -> Any:
    """``n_rows`` indexer keys: a bf16 (fp32 on the CPU) tensor, or the runtime's fp4 pool view."""
    if fmt != "fp4":
        dtype = torch.float32 if dev == "cpu" else torch.bfloat16
        return torch.randn(n_rows, di, device=dev, generator=gen).to(dtype)
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    spec = build_kv_layout(ModelConfig.from_dict(get_preset("tiny")), "fp8_e4m3", True, 256)
    spec = spec.kinds[KVKind.CSA_INDEXER]
    pool = KVRowsView(spec.allocate(-(-n_rows // 64) + 1, dev)[0], spec.entry, out_dtype=torch.float32)
    if len(pool) < n_rows or spec.entry.dim != di:
        raise ValueError(f"--keys fp4: a pool of {len(pool)} keys of {spec.entry.dim}, need {n_rows} of {di}")
    pool[torch.arange(len(pool), device=dev)] = torch.randn(len(pool), di, device=dev, generator=gen)
    return pool


def problem(C: int, fmt: str, sh: dict, dev: str) -> dict:
    """Inputs of one chunk (module docstring) over ``C`` candidates."""
    gen = torch.Generator(device=dev).manual_seed(C)
    T, H, di, e = sh["tokens"], sh["heads"], sh["di"], sh["e"]
    n_pages = -(-C // e) + 1
    qdt = torch.float32 if dev == "cpu" else torch.bfloat16
    vis = (C - (T - 1 - torch.arange(T, device=dev)) // 4).clamp(min=0)
    return dict(
        q=torch.randn(T, H, di, device=dev, generator=gen).to(qdt),
        w=torch.randn(T, H, device=dev, generator=gen) * H**-0.5,
        kv=_keys(n_pages * e, di, fmt, dev, gen),
        visible=vis,
        req_to_page=torch.randperm(n_pages, device=dev, generator=gen)[None, :].int(),
        req_rows=torch.zeros(1, dtype=torch.int64, device=dev),
        token_req=torch.zeros(T, dtype=torch.int64, device=dev),
        C=C,
    )


def time_setting(p: dict, es: Any, sh: dict, calls: int, dev: str) -> tuple[float, torch.Tensor]:
    """Median milliseconds per ``indexer_topk`` call with setting ``es``, and its output (a chunk of
    at most 256 tokens, the dry run's, is forced onto the extend path: ``block_t=2``). ``es ==
    "decoded"``: the module default through ``indexer_topk_decoded``, the chunk as one segment."""
    from sgl_kernel_v4.dense_prefix import PrefixSegment
    from sgl_kernel_v4.triton.indexer import indexer_topk
    from sgl_kernel_v4.triton.indexer_decoded import indexer_topk_decoded

    T = p["q"].shape[0]
    out = torch.empty(T, sh["topk"], dtype=torch.int64, device=dev)
    args = (p["q"], p["w"], p["kv"], p["visible"], p["req_to_page"], p["req_rows"], p["token_req"], sh["e"],
            sh["topk"], sh["di"] ** -0.5)  # fmt: skip
    seg = PrefixSegment(0, T, 0, p["C"])

    def call() -> None:
        if es == "decoded":
            out.copy_(indexer_topk_decoded(*args, [seg], max_visible=p["C"]))
        else:
            indexer_topk(*args, max_visible=p["C"], out=out, extend_score=es, block_t=2 if T <= 256 else None)

    return median_ms(call, calls, dev), out.cpu()


def sweep(a: argparse.Namespace) -> list[dict]:
    from sgl_kernel_v4.triton import indexer
    from sgl_kernel_v4.triton.indexer_score_extend import SWEEP_SETTINGS, ExtendScore, full_grid

    dev = "cpu" if a.dry else "cuda"
    sh = DRY_SHAPES if a.dry else GPU_SHAPES
    settings = list(full_grid() if a.grid == "full" else SWEEP_SETTINGS if a.grid == "default" else ())
    if a.dry and settings:  # the plumbing: one setting of each form
        forms = ("keys", "keys_split", "keys_wdot", "keys_wdot16", "keys_wdot_pairs", "keys_fold")
        settings = [
            next(s for s in settings if s.form == f) for f in forms if any(s.form == f for s in settings)
        ]
    for spec in filter(None, a.settings.split(",")):  # form/block_t/block_c/warps/stages[/waves]
        f, *nums = spec.split("/")
        t, c, w, st, *wv = (int(x) for x in nums)
        settings.append(ExtendScore(form=f, block_t=t, block_c=c, num_warps=w, num_stages=st,
                                    waves=wv[0] if wv else None))  # fmt: skip
    rows = []
    for C in (int(c) for c in (a.contexts or sh["contexts"]).split(",")):
        for fmt in a.keys.split(","):
            p = problem(C, fmt, sh, dev)
            T = p["q"].shape[0]
            flop = 2.0 * T * C * sh["heads"] * sh["di"]
            calls = a.calls or (1 if a.dry else 5 if C > 65536 else 10)
            base_ms, base = time_setting(p, ExtendScore(form="general"), sh, calls, dev)
            waves = [int(w) for w in a.waves.split(",")] if a.waves else []
            served = indexer.EXTEND_SCORE
            by_waves = [dataclasses.replace(served, waves=w or None) for w in waves]
            ab = [(served, False), (served, True)] if a.fp4_ab and fmt == "fp4" else []
            decoded = [served, "decoded"] if a.decoded and fmt == "fp4" else []
            for es in [None, *settings, *by_waves, *ab, *decoded]:
                if es == "decoded":
                    label = served.label() + " decoded once"
                elif isinstance(es, tuple):
                    label = es[0].label() + (" fp4 rows" if es[1] else " fp4 load_key")
                else:
                    label = "general" if es is None else es.label()
                if isinstance(es, ExtendScore) and es.form == served.form and es.waves is None and by_waves:
                    label += " waves None"
                row = {"C": C, "keys": fmt, "tokens": T, "setting": label}
                rows_flag = indexer.EXTEND_FP4_ROWS
                if isinstance(es, tuple):  # (setting, EXTEND_FP4_ROWS) of --fp4-ab
                    es, indexer.EXTEND_FP4_ROWS = es
                try:
                    ms, sel = (base_ms, base) if es is None else time_setting(p, es, sh, calls, dev)
                except Exception as exc:  # a setting the compiler or the device refuses
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    rows.append(row)
                    print(row, flush=True)
                    continue
                finally:
                    indexer.EXTEND_FP4_ROWS = rows_flag
                shared = sum(len(set(x.tolist()) & set(y.tolist())) for x, y in zip(sel, base))
                row.update(ms=ms, speedup=base_ms / ms, tflops=flop / ms / 1e9, same=bool(torch.equal(sel, base)),
                           shared=shared / max(1, int((base >= 0).sum())))  # fmt: skip
                rows.append(row)
                print(
                    f"C {C} {fmt} {row['setting']}: {ms:.3f} ms ({row['speedup']:.2f}x, {row['tflops']:.1f} "
                    f"TFLOP/s) same {row['same']}",
                    flush=True,
                )
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| C | keys | setting | ms per call | vs general | TFLOP/s | same top-k | shared |",
        "|---:|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['C']} | {r['keys']} | {r['setting']} | error: {r['error'][:80]} | | | | |")
        else:
            lines.append(
                f"| {r['C']} | {r['keys']} | {r['setting']} | {r['ms']:.3f} | {r['speedup']:.2f}x | "
                f"{r['tflops']:.1f} | {r['same']} | {r['shared']:.4f} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="tiny shapes under TRITON_INTERPRET=1 on the CPU")
    ap.add_argument("--contexts", default="", help="comma list of candidate counts (default 32768,262144)")
    ap.add_argument("--keys", default="bf16,fp4", help="comma list of key formats: bf16, fp4")
    ap.add_argument("--calls", type=int, default=0, help="timed calls per setting (default 5 / 10)")
    ap.add_argument("--grid", choices=("default", "full", "none"), default="default")
    ap.add_argument(
        "--settings",
        default="",
        help="comma list of extra settings form/block_t/block_c/warps/stages[/waves], e.g. keys_split/8/64/8/3/4",
    )
    ap.add_argument(
        "--waves",
        default="",
        help="comma list: the default setting at W programs per SM (0: the decode rule)",
    )
    ap.add_argument(
        "--fp4-ab", action="store_true", help="fp4 keys: the default with load_key vs whole-key decode"
    )
    ap.add_argument(
        "--decoded", action="store_true", help="fp4 keys: the default over the pool vs a copy decoded once"
    )
    a = ap.parse_args()
    if a.dry and os.environ.get("TRITON_INTERPRET") != "1":  # set before triton is imported
        os.environ["TRITON_INTERPRET"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    os.makedirs(a.out, exist_ok=True)
    rows = sweep(a)
    md = markdown(rows)
    with open(os.path.join(a.out, "indexer_extend_sweep.md"), "w") as f:
        f.write(md)
    with open(os.path.join(a.out, "indexer_extend_sweep.json"), "w") as f:
        json.dump({"rows": rows}, f, indent=1)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
