"""Starting the tensor-parallel ranks of one server, on one node or several.

A server with ``--tp-size N`` runs N ranks. Rank 0 is the scheduler process (it joins the TP group
when it builds its model runner); ranks ``1 .. N-1`` are TP worker processes
(``model_executor/tp_worker_process.py``), one per GPU (or per CPU rank with ``--device cpu``).
With ``--nnodes K`` each node runs ``N / K`` consecutive ranks: node 0 ranks ``0 .. N/K - 1`` plus
the HTTP server, tokenizer and detokenizer; node ``k > 0`` only ranks ``k N/K .. (k+1) N/K - 1``
(:func:`serve_worker_node`: no HTTP). Every node is started with the same flags and
``--dist-init-addr`` (node 0's ``host:port`` for the ``torch.distributed`` rendezvous) plus its
``--node-rank``, as in SGLang::

    # node 0                                          # node 1
    python -m sglang_v4.launch_server --tp-size 4 \\   python -m sglang_v4.launch_server --tp-size 4 \\
        --nnodes 2 --node-rank 0 \\                       --nnodes 2 --node-rank 1 \\
        --dist-init-addr 10.0.0.1:5000                    --dist-init-addr 10.0.0.1:5000

Failure handling: the launcher of each node watches its ranks; a rank that exits takes that node's
launcher down (exit code 1, naming the rank), and the server on node 0 with it (``Subprocesses``
watchdog, ``/health`` 503 then exit). A rank blocked on a dead peer is released by the broken
connection (gloo) or the collective timeout (``--dist-timeout``, NCCL), and the scheduler's step
watchdog (``--watchdog-timeout``) bounds a hung step.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing as mp
import os
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from sglang_v4.server_args import ServerArgs

logger = logging.getLogger(__name__)


@dataclass
class TPWorkerProc:
    """One started TP worker rank: its process and the pipe it reports ``"ready"`` on."""

    rank: int
    process: Any
    ready: Connection
    is_ready: bool = False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def with_dist_init_addr(server_args: ServerArgs) -> ServerArgs:
    """``server_args`` with ``dist_init_addr`` set: as given, or ``127.0.0.1:<free port>`` for a
    one-node TP server (nothing to set for ``tp_size == 1``)."""
    if server_args.tp_size == 1 or server_args.dist_init_addr:
        return server_args
    return dataclasses.replace(server_args, dist_init_addr=f"127.0.0.1:{free_port()}")


def node_ranks(server_args: ServerArgs) -> list[int]:
    """The TP ranks this node (``node_rank``) runs as TP worker processes (rank 0 excluded: the
    scheduler process is rank 0)."""
    per_node = server_args.tp_size // server_args.nnodes
    first = server_args.node_rank * per_node
    return [r for r in range(first, first + per_node) if r != 0]


def start_tp_workers(server_args: ServerArgs, parent_pid: int | None = None) -> list[TPWorkerProc]:
    """Spawn this node's TP worker ranks (:func:`node_ranks`); they join the TP group at
    ``server_args.dist_init_addr`` (which must be set) and report ready when loaded."""
    from sglang_v4.entrypoints.lifecycle import start_ignoring_sigint
    from sglang_v4.model_executor.tp_worker_process import run_tp_worker_process

    if server_args.tp_size > 1 and not server_args.dist_init_addr:
        raise ValueError("dist_init_addr: not resolved (call with_dist_init_addr first)")
    ctx = mp.get_context("spawn")
    out = []
    for rank in node_ranks(server_args):
        reader, writer = ctx.Pipe(duplex=False)
        p = ctx.Process(
            target=run_tp_worker_process,
            args=(server_args, rank, writer, parent_pid),
            name=f"sglang_v4::tp{rank}",
            daemon=True,
        )
        start_ignoring_sigint(p)
        out.append(TPWorkerProc(rank, p, reader))
    return out


def dead_worker(workers: list[TPWorkerProc]) -> str | None:
    """A line naming a TP worker that is no longer alive, else ``None``."""
    for w in workers:
        if not w.process.is_alive():
            return f"TP rank {w.rank} process (pid {w.process.pid}) exited with code {w.process.exitcode}"
    return None


def poll_ready(workers: list[TPWorkerProc]) -> str | None:
    """Read the ready reports that arrived; an error line for a rank that failed to start, else
    ``None``."""
    for w in workers:
        while not w.is_ready and w.ready.poll(0):
            try:
                msg = w.ready.recv()
            except EOFError:
                break
            if msg == "ready":
                w.is_ready = True
            else:
                last = str(msg).strip().splitlines()[-1]
                return f"TP rank {w.rank} failed to start: {last} (its traceback is above)"
    return None


def stop_workers(workers: list[TPWorkerProc], timeout_s: float = 3.0) -> None:
    """Terminate the TP worker processes (SIGTERM, then SIGKILL)."""
    from sglang_v4.utils import kill_process

    for w in workers:
        kill_process(w.process, timeout_s=timeout_s)


def serve_worker_node(server_args: ServerArgs, ready_timeout_s: float = 900.0) -> int:
    """Run a node ``k > 0`` of a multi-node server: its TP ranks only (no HTTP), until one exits.

    Returns:
        0 when every rank exited 0 (rank 0 sent a shutdown), else 1 (a rank died or failed to
        start; the line naming it is logged).
    """
    sa = server_args
    if not sa.dist_init_addr:
        raise ValueError("dist_init_addr: required on node_rank > 0 (node 0's host:port)")
    from sglang_v4.entrypoints.launcher import resolve_model_path

    resolve_model_path(sa)
    workers = start_tp_workers(sa, os.getpid())
    logger.info(
        "Node %d/%d: TP ranks %s joining %s",
        sa.node_rank,
        sa.nnodes,
        [w.rank for w in workers],
        sa.dist_init_addr,
    )
    deadline = time.monotonic() + ready_timeout_s
    try:
        while True:
            time.sleep(0.2)
            err = poll_ready(workers) or dead_worker(workers)
            if err is not None:
                if all(w.process.exitcode == 0 for w in workers):
                    logger.info("Node %d: all TP ranks shut down", sa.node_rank)
                    return 0
                logger.error("Node %d: %s; stopping this node's ranks", sa.node_rank, err)
                return 1
            if deadline and all(w.is_ready for w in workers):
                logger.info("Node %d: TP ranks ready", sa.node_rank)
                deadline = 0.0
            if deadline and time.monotonic() > deadline:
                logger.error("Node %d: TP ranks not ready after %.0f s", sa.node_rank, ready_timeout_s)
                return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop_workers(workers)
