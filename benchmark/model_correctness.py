"""End-to-end GPU correctness check of ``bench_model.py`` (its phase 1, run in a subprocess with
``bench_model.py --correctness-only``): the ``tiny`` preset through ``Scheduler`` in-process on the
GPU in bf16 against the CPU fp32 path, teacher-forced (:func:`correctness_main`). Writes
``correctness.json`` into the output folder.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

T0 = time.time()


def correctness_main(out: str, device: str = "cuda", dtype: str = "bfloat16") -> None:
    """tiny preset: the runtime on ``device``/``dtype`` (CUDA bf16 with Triton kernels, CUDA graphs
    and the indexer stream) against the CPU fp32 path, through the ``Scheduler`` in-process.

    The GPU run is greedy with chunked prefill (chunk 256), a prefix-cache hit (p2 shares 600
    tokens with p1 -> 512 cached) and batched decode. Its token sequences (prompt + generated) are
    then re-scored on the CPU by teacher forcing (one prefill, input logprobs) twice: in fp32 (the
    reference) and in bf16 (the calibration: how far bf16 rounding alone moves a logprob on this
    model). Pass when, for every generated token, |GPU logprob - fp32 logprob| and the token's gap
    to the fp32 argmax are within ``2 x (max CPU-bf16 error) + 0.02``, the mean error is within
    ``2 x (mean CPU-bf16 error) + 0.01``, the cached token counts
    agree and graphs replayed. A plain greedy CPU fp32 run is reported for reference (this random
    tiny model has near-uniform next-token distributions, top-1/top-2 gaps ~0.005, so bf16 greedy
    paths part early; that is why the check is teacher-forced). ``device``/``dtype`` are
    parameters only for the CPU smoke test."""
    import random

    from sglang_v4.configs.presets import get_preset
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.managers.scheduler import Scheduler
    from sglang_v4.sampling.sampling_params import SamplingParams
    from sglang_v4.server_args import ServerArgs
    from sglang_v4.tools.make_checkpoint import write_checkpoint

    res: dict[str, Any] = {"t_start": time.time() - T0}
    d = write_checkpoint(tempfile.mkdtemp(), fmt="hf", weights="fp32", seed=0, config_dict=get_preset("tiny"))
    rng = random.Random(0)
    prompts = {"p1": [rng.randrange(2, 120000) for _ in range(700)]}
    prompts["p2"] = prompts["p1"][:600] + [rng.randrange(2, 120000) for _ in range(150)]
    prompts["p3"] = [rng.randrange(2, 120000) for _ in range(40)]
    n_new = 24

    def scheduler(device: str, dtype: str) -> Scheduler:
        return Scheduler(
            ServerArgs(
                model_path=d,
                device=device,
                dtype=dtype,
                max_total_tokens=64 * 256,
                chunked_prefill_size=256,
                skip_warmup=True,
            )
        )

    def submit(s: Scheduler, rid: str, ids: list[int], max_new: int, start: int = -1) -> None:
        sp = SamplingParams.from_dict({"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True})
        sp.normalize(None)
        s.add_request(
            TokenizedGenerateReqInput(
                rid=rid,
                input_text=None,
                input_ids=ids,
                sampling_params=sp,
                return_logprob=True,
                logprob_start_len=start,
                top_logprobs_num=2,
            )
        )

    def drain(s: Scheduler, got: dict[str, dict]) -> None:
        for _ in range(100000):
            if not s.has_work():
                return
            o = s.step()
            if o is None:
                continue
            for i, rid in enumerate(o.rids):
                r = got.setdefault(rid, {"ids": [], "lp": [], "top": [], "in_lp": [], "in_top": []})
                r["ids"] += o.output_ids[i]
                r["lp"] += o.output_token_logprobs_val[i]
                r["top"] += o.output_top_logprobs_val[i]
                r["in_lp"] += o.input_token_logprobs_val[i]
                r["in_top"] += o.input_top_logprobs_val[i]
                r["cached"] = o.cached_tokens[i]
        raise RuntimeError("scheduler did not finish")

    def generate(device: str, dtype: str) -> tuple[dict, Scheduler]:
        s, got = scheduler(device, dtype), {}
        submit(s, "p1", prompts["p1"], n_new)
        drain(s, got)
        submit(s, "p2", prompts["p2"], n_new)  # prefix-cache hit (600 shared tokens -> 512 cached)
        submit(s, "p3", prompts["p3"], n_new)
        drain(s, got)
        return got, s

    def score(dtype: str, seqs: dict[str, list[int]]) -> dict[str, dict]:
        """Teacher-forced CPU logprobs of each generated token (input logprobs of prompt + output)."""
        s, got = scheduler("cpu", dtype), {}
        for rid, out_ids in seqs.items():
            submit(s, rid, prompts[rid] + out_ids, 1, start=len(prompts[rid]))
        drain(s, got)
        return got

    t = time.time()
    gpu, sg = generate(device, dtype)
    res["gpu_s"] = round(time.time() - t, 1)
    gr = sg.runner.cuda_graph_runner
    res["graphs"] = {
        "enabled": gr is not None,
        "failed": bool(gr.failed) if gr else None,
        "replays": gr.num_replays if gr else 0,
        "captured": [list(k) for k in gr.graphs] if gr else [],
        "indexer_stream": sg.runner.indexer_streams.stream is not None,
    }
    del sg
    t = time.time()
    cpu, _ = generate("cpu", "float32")
    seqs = {rid: gpu[rid]["ids"] for rid in prompts}
    ref = score("float32", seqs)
    cal = score("bfloat16", seqs)
    res["cpu_s"] = round(time.time() - t, 1)

    cal_max = max(abs(x - y) for rid in prompts for x, y in zip(cal[rid]["in_lp"], ref[rid]["in_lp"]))
    tol = 2 * cal_max + 0.02
    n_all = sum(len(ref[rid]["in_lp"]) for rid in prompts)
    cal_mean = (
        sum(abs(x - y) for rid in prompts for x, y in zip(cal[rid]["in_lp"], ref[rid]["in_lp"])) / n_all
    )
    gpu_mean = sum(abs(x - y) for rid in prompts for x, y in zip(gpu[rid]["lp"], ref[rid]["in_lp"])) / n_all
    tol_mean = 2 * cal_mean + 0.01
    per, ok = {}, True
    for rid in prompts:
        g, r, c = gpu[rid], ref[rid], cal[rid]
        assert len(r["in_lp"]) == len(g["ids"]) == n_new, (rid, len(r["in_lp"]), len(g["ids"]))
        d_gpu = [abs(x - y) for x, y in zip(g["lp"], r["in_lp"])]
        d_cal = [abs(x - y) for x, y in zip(c["in_lp"], r["in_lp"])]
        gaps = [top[0] - lp for top, lp in zip(r["in_top"], r["in_lp"])]
        n_match = 0
        for x, y in zip(cpu[rid]["ids"], g["ids"]):
            if x != y:
                break
            n_match += 1
        rid_ok = max(d_gpu) <= tol and max(gaps) <= tol and g.get("cached") == cpu[rid].get("cached")
        ok &= rid_ok
        per[rid] = {
            "tokens": len(g["ids"]),
            "gpu_vs_fp32_max_abs_dlogprob": round(max(d_gpu), 4),
            "gpu_vs_fp32_mean_abs_dlogprob": round(sum(d_gpu) / len(d_gpu), 4),
            "cpu_bf16_vs_fp32_max_abs_dlogprob": round(max(d_cal), 4),
            "cpu_bf16_vs_fp32_mean_abs_dlogprob": round(sum(d_cal) / len(d_cal), 4),
            "max_fp32_gap_of_gpu_token_to_argmax": round(max(gaps), 4),
            "gpu_tokens_that_are_fp32_argmax": sum(gp <= 0 for gp in gaps),
            "greedy_prefix_equal_to_cpu_fp32_run": n_match,
            "cached_tokens_cpu": cpu[rid].get("cached"),
            "cached_tokens_gpu": g.get("cached"),
            "ok": rid_ok,
        }
    ok &= gpu_mean <= tol_mean
    res.update(
        requests=per,
        tolerance_dlogprob=round(tol, 4),
        mean_abs_dlogprob={
            "gpu_vs_fp32": round(gpu_mean, 4),
            "cpu_bf16_vs_fp32": round(cal_mean, 4),
            "tolerance": round(tol_mean, 4),
        },
        ok=bool(ok and (device == "cpu" or (res["graphs"]["replays"] > 0 and not res["graphs"]["failed"]))),
        tolerance=f"teacher-forced: per generated token |GPU logprob - CPU fp32 logprob| and the token's fp32 gap "
        f"to the fp32 argmax <= 2 x max|CPU bf16 - CPU fp32| + 0.02 = {tol:.4f}; mean |GPU - fp32| over all tokens <= 2 x "
        f"mean|CPU bf16 - fp32| + 0.01 = {tol_mean:.4f}; cached tokens equal; graphs replayed",
        config="tiny preset, fp32 checkpoint seed 0; GPU run bf16 (Triton, CUDA graphs, indexer stream), "
        "chunked_prefill_size 256; p1 700 tok, then p2 (600 shared with p1) + p3 40 tok together; 24 greedy "
        "tokens each; CPU re-scores prompt + GPU tokens in fp32 and in bf16",
    )
    res["t_end"] = time.time() - T0
    with open(os.path.join(out, "correctness.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
