"""Run one scheduler scenario on N tensor-parallel ranks (gloo, CPU), one process per rank.

Rank 0 builds the real :class:`~sglang_v4.managers.scheduler.Scheduler` (its model runner joins the
TP group as rank 0 and broadcasts every forward); ranks ``1 .. N-1`` run the TP worker loop
(``model_executor/tp_worker_process.py:serve_tp_steps``). When the scenario is drained, rank 0 sends
``Shutdown`` and every rank reports a digest of its KV pool, so a test can check that the
replicated pools are identical. ``tp_size=1`` runs the same scenario in a single process (the
oracle).
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import socket
import traceback
from typing import Any

import torch
from dsv4_testutil import BASE, CSA, HCA, SL, random_ids
from scheduler_testutil import drain, submit

#: A config that splits over 2 and 4 ranks: 4 heads in 4 output groups, 4 experts, intermediate 64
#: (FP4-sliceable in 2), vocabulary 1000; every layer kind and a hash-routed MoE layer.
TP_CONFIG: dict[str, Any] = dict(
    BASE,
    num_attention_heads=4,
    o_groups=4,
    o_lora_rank=16,
    n_routed_experts=4,
    moe_intermediate_size=64,
    layer_types=[SL, CSA, HCA, CSA],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
)

PAGE = 128


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_kwargs(model_dir: str, **kw: Any) -> dict[str, Any]:
    """``ServerArgs`` fields of the scenario: CPU fp32, 128-token pages, a 5-page pool (forces
    retraction), chunked prefill of 64 tokens."""
    args: dict[str, Any] = dict(
        model_path=model_dir,
        device="cpu",
        dtype="float32",
        page_size=PAGE,
        max_total_tokens=5 * PAGE,
        chunked_prefill_size=64,
        skip_warmup=True,
        log_level="warning",
    )
    args.update(kw)
    return args


def scenario(s: Any) -> dict[str, Any]:
    """A request seeds the radix cache with a 150-token prefix (one 128-token block); then three
    requests that grow to three blocks each (220-230 prompt tokens + 40 new ones) run at once on a
    5-page pool (two of them hit the cached block): chunked prefill (64-token chunks), prefix hits
    and retraction in one run. Greedy, with logprobs."""
    prefix = random_ids(150, seed=11, vocab=1000)
    submit(s, "seed", prefix + random_ids(20, seed=12, vocab=1000), 8, return_logprob=True)
    out = drain(s)
    submit(s, "hit1", prefix + random_ids(70, seed=13, vocab=1000), 40, return_logprob=True)
    submit(s, "cold", random_ids(230, seed=14, vocab=1000), 40, return_logprob=True)
    submit(s, "hit2", prefix + random_ids(75, seed=15, vocab=1000), 40, return_logprob=True)
    out.update(drain(s))
    res = {rid: {k: r[k] for k in ("ids", "lp", "cached", "finish")} for rid, r in out.items()}
    assert s.flush_cache()
    return {"reqs": res, "num_retractions": s.num_retractions, "overlap": s.enable_overlap}


def _pool_digest(pool: Any) -> str:
    h = hashlib.sha256()
    for t in pool.tensors():
        h.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _rank_main(rank: int, kw: dict[str, Any], q: Any) -> None:
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
            result = scenario(s)
            runner = s.runner
            runner.tp.broadcast_object(Shutdown())
        else:
            runner = ModelRunner(ModelConfig.from_pretrained(sa.model_path), sa, tp_rank=rank)
            serve_tp_steps(runner)
        digests: list[Any] = [None] * sa.tp_size
        dist.all_gather_object(digests, _pool_digest(runner.pool), group=runner.tp.cpu_group)
        if rank == 0:
            q.put(("ok", result, digests))
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - reported to the test
        q.put(("error", f"rank {rank}:\n{traceback.format_exc()}", None))
        os._exit(1)


def run_scenario(model_dir: str, tp_size: int, timeout_s: float = 900.0, **kw: Any) -> dict[str, Any]:
    """The scenario's results on ``tp_size`` ranks (``kw``: further ``ServerArgs`` fields, e.g.
    ``ep_size``, ``quantization``). For ``tp_size > 1`` also ``pool_digests`` (one per rank).

    Raises:
        AssertionError: a rank failed (its traceback is in the message) or timed out.
    """
    args = server_kwargs(model_dir, **kw)
    if tp_size == 1:
        from sglang_v4.managers.scheduler import Scheduler
        from sglang_v4.server_args import ServerArgs

        return scenario(Scheduler(ServerArgs(**args)))
    args.update(tp_size=tp_size, dist_init_addr=f"127.0.0.1:{free_port()}")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, args, q), daemon=True) for r in range(tp_size)]
    for p in procs:
        p.start()
    try:
        status, payload, digests = q.get(timeout=timeout_s)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert status == "ok", payload
    return {**payload, "pool_digests": digests}
