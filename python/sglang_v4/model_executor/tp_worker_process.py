"""The process of a non-zero tensor-parallel rank: a model runner that only runs forwards.

Rank 0 (the scheduler process) decides every step; this process joins the TP group, loads its shard
of the weights and its replica of the KV pool (:class:`~sglang_v4.model_executor.model_runner.ModelRunner`
with ``tp_rank > 0``), then loops: receive the next message from rank 0 over the TP group's CPU
group (:meth:`~sglang_v4.distributed.parallel_state.TPGroup.broadcast_object`) and act on it:

* :class:`~sglang_v4.model_executor.tp_messages.ForwardStep`: replay the request-state operations,
  run the same forward (its collectives pair with rank 0's; the logits are dropped);
* :class:`~sglang_v4.model_executor.tp_messages.CaptureGraphs`: capture the decode CUDA graphs;
* :class:`~sglang_v4.model_executor.tp_messages.UpdateWeights`: reload its shard of the weights
  from another checkpoint (``/update_weights_from_disk``), agreeing with the other ranks;
* :class:`~sglang_v4.model_executor.tp_messages.Shutdown`: exit 0.

It holds no radix cache, no tokenizer and no sampler, and talks to no other process of the server.
Any error (rank 0 gone: the broadcast fails at once; a collective timing out) logs the traceback and
exits with code 1, which the launcher's watchdog turns into a server exit with a clear message.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from multiprocessing.connection import Connection

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.model_executor.tp_messages import CaptureGraphs, ForwardStep, Shutdown, UpdateWeights
from sglang_v4.server_args import ServerArgs
from sglang_v4.utils import (
    configure_logging,
    exit_on_sigterm,
    exit_without_teardown,
    set_parent_death_signal,
    start_parent_watchdog,
)

logger = logging.getLogger(__name__)


def serve_tp_steps(runner: ModelRunner) -> int:
    """Run rank 0's messages until :class:`Shutdown`; the number of forwards run.

    Raises:
        RuntimeError: from ``torch.distributed`` (rank 0 gone, a timeout) or the forward.
        TypeError: an unknown message.
    """
    n = 0
    while True:
        msg = runner.tp.broadcast_object(None)
        if isinstance(msg, ForwardStep):
            runner.run_broadcast_step(msg)
            n += 1
        elif isinstance(msg, CaptureGraphs):
            g = runner.cuda_graph_runner
            if g is not None:
                g.capture_all()
        elif isinstance(msg, UpdateWeights):
            runner.run_weight_update(msg)
        elif isinstance(msg, Shutdown):
            return n
        else:
            raise TypeError(f"TP rank {runner.parallel.tp_rank}: unknown message {type(msg).__name__}")


def run_tp_worker_process(
    server_args: ServerArgs,
    tp_rank: int,
    ready_pipe: Connection | None = None,
    parent_pid: int | None = None,
) -> None:
    """Entry point of TP rank ``tp_rank`` (``> 0``): build the runner, report ``"ready"`` (or
    ``"error: <traceback>"``) through ``ready_pipe``, then :func:`serve_tp_steps`. Exits 0 after
    :class:`Shutdown`, 1 on any error.

    ``server_args.model_path`` must be resolved (the launcher does it).
    """
    configure_logging(server_args.log_level, prefix=f" TP{tp_rank}")
    set_parent_death_signal()
    exit_on_sigterm()
    if parent_pid is not None:
        start_parent_watchdog(parent_pid)
    try:
        t0 = time.perf_counter()
        assert server_args.model_path is not None, "model_path must be resolved before starting ranks"
        mc = ModelConfig.from_pretrained(server_args.model_path, server_args.model_override_args())
        runner = ModelRunner(mc, server_args, tp_rank=tp_rank)
        logger.info("TP rank %d (pid %d) ready in %.1f s", tp_rank, os.getpid(), time.perf_counter() - t0)
    except Exception:
        tb = traceback.format_exc()
        logger.error("TP rank %d failed to start:\n%s", tp_rank, tb)
        if ready_pipe is not None:
            ready_pipe.send(f"error: {tb}")
        os._exit(1)
    if ready_pipe is not None:
        ready_pipe.send("ready")
    try:
        n = serve_tp_steps(runner)
    except Exception:
        logger.error(
            "TP rank %d stopped: lost rank 0 or a collective failed (the server goes down):\n%s",
            tp_rank,
            traceback.format_exc(),
        )
        os._exit(1)
    logger.info("TP rank %d: shutdown after %d forwards", tp_rank, n)
    exit_without_teardown(0)  # atexit finalizers run: no multiprocessing semaphore left behind
