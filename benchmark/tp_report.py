"""Rows for RESULTS.md from a tensor-parallel device run (``benchmark/device/tp2.sh``).

Reads the run directory: ``bench.jsonl`` (``bench_serving`` lines, one per concurrency, tagged
``c<N>`` / ``gsp-on`` / ``gsp-off``), ``tp_check.json`` / ``tp_check_fp8kv.json`` (``tp_check.py``),
``server.log`` (the
scheduler's per-step decode times and the ranks' memory lines) and prints Markdown: the serving
cells next to SGLang's published V4-Flash H200 figures (FP8, TP 4; total tokens/s per GPU), the
decode ms/step at batch 1 and its roofline, the correctness cross-check, the per-GPU memory.

Roofline of a decode step at batch 1, per GPU: the bytes its kernels must read, i.e. its shard of
every weight except the routed experts, plus the experts a token activates on it (``top_k / ep``
per layer on average: 3 of 6 at EP 2), divided by ``--hbm-tbs`` (H200 copy bandwidth measured
4.1-4.25 TB/s); the KV read at 8k context is < 1% and not counted.

    python benchmark/tp_report.py RUN_DIR --gpus 2 --preset flash --tp-size 2 --ep-size 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from typing import Any

#: SGLang's published V4-Flash figures on H200 (FP8, TP 4), 8192 in / 1024 out: concurrency ->
#: (TTFT ms, TPOT ms, total tok/s per GPU).
SGLANG_H200 = {1: (178.0, 3.28, 631.0), 16: (263.0, 8.99, 3302.0), 64: (897.0, 41.27, 3098.0)}


def read_jsonl(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def decode_ms(log_text: str, reqs: int = 1) -> float | None:
    """Median of the scheduler's ``Decode batch: #reqs <reqs> ... X ms`` lines (ms: the worker's
    host time for the step, ``GenerationBatchResult.forward_time``; not the GPU's step time when
    launches are asynchronous)."""
    pat = re.compile(r"Decode batch: #reqs " + str(reqs) + r" .*?, ([0-9.]+) ms")
    vals = [float(m.group(1)) for m in pat.finditer(log_text)]
    return statistics.median(vals) if vals else None


def active_bytes_per_gpu(preset: str, tp: int, ep: int) -> int:
    """Bytes a batch-1 decode step reads on one GPU (module docstring)."""
    import torch
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
    from sglang_v4.layers.quantization import QuantConfig
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    mc = ModelConfig.from_dict(get_preset(preset))
    with torch.device("meta"):
        m = DeepseekV4ForCausalLM(
            mc, torch.bfloat16, "meta", QuantConfig(), TPGroup(ParallelConfig(tp, 0, ep))
        )
    total = experts = 0
    for k, t in m.state_dict().items():
        b = t.numel() * t.element_size()
        total += b
        if ".mlp.experts." in k:
            experts += b
    c = mc.hf
    local = c.n_routed_experts // ep
    per_expert = experts / (local * c.num_hidden_layers)
    return int(total - experts + c.num_experts_per_tok / ep * per_expert * c.num_hidden_layers)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--preset", default="flash")
    ap.add_argument("--tp-size", type=int, default=2)
    ap.add_argument("--ep-size", type=int, default=2)
    ap.add_argument("--hbm-tbs", type=float, default=4.2, help="copy bandwidth, TB/s")
    ap.add_argument("--title", default="")
    a = ap.parse_args(argv)
    d = a.run_dir
    rows = read_jsonl(os.path.join(d, "bench.jsonl"))
    log = (
        open(os.path.join(d, "server.log"), errors="replace").read()
        if os.path.exists(os.path.join(d, "server.log"))
        else ""
    )
    p = print
    p(f"### {a.title or f'{a.preset} TP {a.tp_size} / EP {a.ep_size} on {a.gpus} GPUs'}")
    p("")
    p(
        "| cell | conc | TTFT mean / median ms | TPOT mean ms | total tok/s per GPU | SGLang H200 TP4 FP8 (TTFT / TPOT / tok/s/GPU) | tok/s/GPU ratio |"
    )
    p("|---|---|---|---|---|---|---|")
    for r in rows:
        c = r.get("max_concurrency") or 0
        ref = SGLANG_H200.get(c) if str(r.get("tag", "")).startswith("c") else None
        per_gpu = r["total_throughput"] / a.gpus
        ref_s = f"{ref[0]:.0f} / {ref[1]:.2f} / {ref[2]:,.0f}" if ref else "-"
        ratio = f"{per_gpu / ref[2]:.2f}x" if ref else "-"
        done = max(1, r["completed"])
        shape = f"{r['total_input_tokens'] / done:.0f} in / {r['total_output_tokens'] / done:.0f} out"
        p(
            f"| {r.get('tag')} ({r.get('dataset_name', '')}, {shape}, {r['completed']} done, {r.get('failed', 0)} failed, "
            f"hit {r.get('cache_hit_rate', 0):.2f}) | {c} | {r.get('mean_ttft_ms', 0):.0f} / {r.get('median_ttft_ms', 0):.0f} "
            f"| {r.get('mean_tpot_ms', 0):.2f} | {per_gpu:,.0f} | {ref_s} | {ratio} |"
        )
    p("")
    ms = decode_ms(log)
    try:
        act = active_bytes_per_gpu(a.preset, a.tp_size, a.ep_size)
        roof = act / (a.hbm_tbs * 1e12) * 1e3
        p(
            f"Roofline at batch 1: {act / 1e9:.2f} GB read per GPU per step -> {roof:.2f} ms at {a.hbm_tbs} TB/s."
        )
    except Exception as e:  # noqa: BLE001 - a report line, not a failure
        roof = None
        p(f"Roofline: not computed ({e}).")
    if ms is not None:
        # The log's ms is the worker's host time for the step (launch, sampling, copies issued):
        # with overlap scheduling (the default) or CUDA graphs it is not the GPU's step time, so
        # it is not set against the roofline; TPOT below is.
        p(
            f"Host time per decode step at batch 1 (scheduler log, median): {ms:.2f} ms (not the GPU step time)"
        )
    c1 = next((r for r in rows if r.get("tag") == "c1"), None)
    if c1 is not None and roof:
        p(
            f"TPOT at concurrency 1: {c1['mean_tpot_ms']:.2f} ms = {c1['mean_tpot_ms'] / roof:.2f}x the roofline (target <= 1.3x)"
        )
    for name in ("tp_check.json", "tp_check_fp8kv.json"):
        chk = os.path.join(d, name)
        if not os.path.exists(chk):
            continue
        c = json.load(open(chk))
        p("")
        p(
            f"Cross-check vs one GPU ({c['preset']}, {c['layers'] or 'all'} layers, dummy weights, KV "
            f"{c['kv_cache_dtype']}{' + fp4 indexer' if c['fp4_indexer'] else ''}, {c['prompts']} x "
            f"{c['prompt_len']} tokens + {c['new_tokens']}): max |logprob diff| {c['max_abs_lp_diff']:.4g}, mean "
            f"{c['mean_abs_lp_diff']:.3g} over {c['scored_positions']} positions; greedy token agreement "
            f"{c['greedy_token_agreement']:.3f} ({c['greedy_equal_prompts']}/{c['prompts']} prompts identical)"
        )
    # one line per rank (the log holds every server started, e.g. radix cache on and off)
    mem = sorted({ln.split("] ", 1)[-1] for ln in log.splitlines() if "weights" in ln and "KV pools" in ln})
    if mem:
        p("")
        p("Per-GPU memory (server log):")
        for ln in mem:
            p(f"- {ln}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
