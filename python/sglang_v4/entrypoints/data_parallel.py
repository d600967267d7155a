"""Data parallelism: ``--dp-size D`` replicas of the server behind ``sglang-router``.

``python -m sglang_v4.launch_server --dp-size D [--tp-size N] --port P`` starts D complete servers
(each with its own scheduler, radix cache and N TP ranks; replica ``i`` on port ``P + 1 + i`` and
GPUs ``base_gpu_id + i N .. base_gpu_id + (i + 1) N - 1``), waits until each answers ``/health``,
then runs SGLang's router (the ``sglang-router`` package, ``python -m sglang_router.launch_router
--worker-urls ... --policy cache_aware``) on a loopback port and, on port ``P``, the gateway of
:mod:`.dp_gateway`: it answers ``/v1/models`` and ``/v1/models/{id}`` from a replica (the router's
own list has neither the served name nor Anthropic's shape) and forwards everything else to the
router. The cache-aware policy keeps an
approximate radix tree of the text each replica has served and sends a request to the replica
with the longest match (above its threshold; otherwise the least loaded), so a repeated shared
prefix lands where its KV already is. The same recipe by hand, as SGLang documents it::

    python -m sglang_v4.launch_server --port 30001 &
    python -m sglang_v4.launch_server --port 30002 --base-gpu-id 1 &
    python -m sglang_router.launch_router --worker-urls http://127.0.0.1:30001 \\
        http://127.0.0.1:30002 --policy cache_aware --port 30000

What the router calls on a replica: ``/health`` (registration, health checks), ``/server_info``
and ``/model_info`` (registration), ``/get_model_info``, ``/get_server_info``, ``/get_load``
(load reports), ``/flush_cache``, and the generation routes, whose
bodies it re-serialises with SGLang's default fields (``model``, ``no_logs``, ...), which the
replicas accept.

A replica, the router or the gateway that exits takes the whole group down (exit code 1, naming
it); SIGTERM / SIGINT stop the gateway and the router, then drain the replicas (each its own
graceful shutdown), exit code 0. Sent to the whole process group (a terminal's Ctrl+C), the
signal also reaches the gateway and the replicas, which stop on their own; the router runs in its
own session, out of the group's reach (:func:`start_router`), and is stopped by the launcher.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import multiprocessing as mp
import signal
import subprocess
import sys
import time
from typing import Any

import requests

from sglang_v4.server_args import ServerArgs, join_host_port

logger = logging.getLogger(__name__)

#: Seconds a replica or the router may take to answer ``/health`` after start.
READY_TIMEOUT_S = 900.0


def replica_args(server_args: ServerArgs, index: int) -> ServerArgs:
    """The server args of replica ``index``: one replica (``dp_size=1``) on port
    ``port + 1 + index``, its GPUs after the previous replicas', its own TP rendezvous."""
    sa = server_args
    return dataclasses.replace(
        sa,
        dp_size=1,
        port=sa.port + 1 + index,
        base_gpu_id=sa.base_gpu_id + index * sa.tp_size,
        dist_init_addr=None,
    )


def replica_url(sa: ServerArgs) -> str:
    """The URL the router uses for a replica (loopback when it listens on every address)."""
    host = "127.0.0.1" if sa.host in ("0.0.0.0", "::", "") else sa.host
    return f"http://{join_host_port(host, sa.port)}"  # an IPv6 host in brackets


def router_command(urls: list[str], server_args: ServerArgs, prometheus_port: int, port: int) -> list[str]:
    """``python -m sglang_router.launch_router`` for ``urls`` on ``127.0.0.1:port`` (behind the
    gateway on the server's host and port; its Prometheus exporter on ``prometheus_port``: the
    router always starts one)."""
    sa = server_args
    cmd = [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *urls]
    cmd += ["--policy", sa.router_policy, "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port)]
    cmd += ["--log-level", "warn" if sa.log_level == "info" else sa.log_level]
    if sa.api_key:
        cmd += ["--api-key", sa.api_key]
    return cmd


def _serve_replica(server_args: ServerArgs, index: int) -> None:
    from sglang_v4.entrypoints.http_server import launch_server
    from sglang_v4.utils import configure_logging, set_parent_death_signal

    configure_logging(server_args.log_level, prefix=f" DP{index}")
    set_parent_death_signal()
    from sglang_v4.entrypoints.lifecycle import StopRequested

    try:
        code = launch_server(server_args)
    except StopRequested:
        code = 0
    except (RuntimeError, ValueError) as e:
        logging.getLogger(__name__).error("%s", e)
        code = 1
    sys.exit(code)


def _healthy(url: str) -> bool:
    try:
        return requests.get(url + "/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def launch_data_parallel(server_args: ServerArgs) -> int:
    """Run ``dp_size`` replicas behind ``sglang-router`` until stopped (module docstring).

    Returns:
        0 after SIGTERM / SIGINT, 1 when a replica or the router failed or exited.

    Raises:
        RuntimeError: ``sglang-router`` is not installed, or the port is taken.
    """
    sa = server_args
    if importlib.util.find_spec("sglang_router") is None:
        raise RuntimeError("dp_size > 1 needs the router: pip install sglang-router")
    from sglang_v4.entrypoints.launcher import resolve_model_path
    from sglang_v4.utils import bind_error

    for port in [sa.port] + [sa.port + 1 + i for i in range(sa.dp_size)]:
        reason = bind_error(sa.host, port)
        if reason is not None:
            raise RuntimeError(
                reason
                + (" (--dp-size uses --port .. --port + dp_size)" if reason.startswith("port:") else "")
            )
    resolve_model_path(sa)
    stop = {"signal": None}

    def on_signal(signum: int, frame: Any) -> None:
        stop["signal"] = signum

    def stopped_meanwhile() -> bool:
        # a child found exited: the signal that stopped the whole group may still be on its way
        time.sleep(_SIGNAL_GRACE_S)
        return stop["signal"] is not None

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    ctx = mp.get_context("spawn")
    replicas = []
    for i in range(sa.dp_size):
        ra = replica_args(sa, i)
        # not named "sglang_v4::...": that prefix marks our own children, which may not start servers
        p = ctx.Process(target=_serve_replica, args=(ra, i), name=f"sglang_v4-dp-replica-{i}", daemon=False)
        p.start()
        replicas.append((i, ra, p))
    urls = [replica_url(ra) for _, ra, _ in replicas]
    router: subprocess.Popen[bytes] | None = None
    gateway: Any = None
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        pending = set(range(sa.dp_size))
        while pending:
            if stop["signal"] is not None:
                return 0
            for i, _, p in replicas:
                if not p.is_alive():
                    if stopped_meanwhile():
                        return 0
                    logger.error(
                        "DP replica %d (pid %s) exited with code %s during start-up", i, p.pid, p.exitcode
                    )
                    return 1
            pending = {i for i in pending if not _healthy(urls[i])}
            if time.monotonic() > deadline:
                logger.error("DP replicas %s not healthy after %.0f s", sorted(pending), READY_TIMEOUT_S)
                return 1
            time.sleep(_POLL_S)
        from sglang_v4.entrypoints.dp_gateway import run_gateway
        from sglang_v4.entrypoints.tp_launch import free_port

        router_port = free_port()
        router = start_router(router_command(urls, sa, free_port(), router_port))
        router_url = f"http://127.0.0.1:{router_port}"
        while not _healthy(router_url):
            if router.poll() is not None:
                logger.error("sglang-router exited with code %s during start-up", router.returncode)
                return 1
            if stop["signal"] is not None:
                return 0
            time.sleep(_POLL_S)
        gateway = ctx.Process(
            target=run_gateway,
            args=(sa.host, sa.port, router_url, urls, sa.log_level),
            name="sglang_v4-dp-gateway",
            daemon=False,
        )
        gateway.start()
        own = replica_url(sa)  # the gateway listens on --host:--port
        while not _healthy(own):
            if stop["signal"] is not None:
                return 0
            if not gateway.is_alive():
                if stopped_meanwhile():
                    return 0
                logger.error("the DP gateway exited with code %s during start-up", gateway.exitcode)
                return 1
            time.sleep(_POLL_S)
        logger.info(
            "Serving on http://%s:%d: sglang-router (policy %s) on %s over %d replicas %s",
            sa.host,
            sa.port,
            sa.router_policy,
            router_url,
            sa.dp_size,
            urls,
        )
        while stop["signal"] is None:
            time.sleep(_POLL_S)
            # A terminal's Ctrl+C (or `kill -- -PGID`) reaches the gateway and the replicas too:
            # they exit at the same moment, which is the stop, not a failure.
            if stop["signal"] is not None:
                break
            failure = _exited_child(router, gateway, replicas)
            if failure is not None:
                if stopped_meanwhile():
                    break
                logger.error("%s; stopping the replicas", failure)
                return 1
        return 0
    finally:
        _stop_all(gateway, router, [p for _, _, p in replicas], sa.graceful_shutdown_timeout)


#: Seconds to wait, on finding a child exited, for the signal that may have stopped the group.
_SIGNAL_GRACE_S = 0.2
#: Seconds between the launcher's checks: replica, router and gateway health during start-up (a
#: refused ``/health`` costs about a millisecond), then exited children and a stop signal while
#: serving (a signal does not cut ``time.sleep`` short, so this bounds how late the stop begins).
_POLL_S = 0.1


def start_router(cmd: list[str]) -> subprocess.Popen[bytes]:
    """Start the router process (:func:`router_command`) in its own session, so a signal sent to
    the launcher's process group (a terminal's Ctrl+C, ``kill -TERM -- -PGID``) does not reach it:
    the launcher stops it after the gateway (:func:`_stop_all`), and sglang-router's Python
    wrapper, interrupted by a SIGINT, printed a ``KeyboardInterrupt`` traceback over the clean
    shutdown. It gets SIGTERM when the launcher dies (``prctl(PR_SET_PDEATHSIG)``), as the
    replicas and the gateway do.
    """
    from sglang_v4.utils import set_parent_death_signal

    return subprocess.Popen(
        cmd, start_new_session=True, preexec_fn=lambda: set_parent_death_signal(signal.SIGTERM)
    )


def _exited_child(
    router: subprocess.Popen[bytes], gateway: Any, replicas: list[tuple[int, Any, Any]]
) -> str | None:
    """What exited among the serving group's processes (a log phrase), or ``None``."""
    if router.poll() is not None:
        return f"sglang-router exited with code {router.returncode}"
    if not gateway.is_alive():
        return f"the DP gateway exited with code {gateway.exitcode}"
    for i, _, p in replicas:
        if not p.is_alive():
            return f"DP replica {i} (pid {p.pid}) exited with code {p.exitcode}"
    return None


def _stop_all(
    gateway: Any, router: subprocess.Popen[bytes] | None, replicas: list[Any], drain_s: float
) -> None:
    if gateway is not None and gateway.is_alive():
        gateway.terminate()  # aiohttp's run_app: SIGTERM ends it, open streams closed within 5 s
        gateway.join(10)
        if gateway.is_alive():
            gateway.kill()
            gateway.join(5)
    if router is not None and router.poll() is None:
        router.terminate()
        try:
            router.wait(10)
        except subprocess.TimeoutExpired:
            router.kill()
    for p in replicas:
        if p.is_alive():
            p.terminate()  # each replica drains its in-flight requests (graceful shutdown)
    for p in replicas:
        p.join(drain_s + 15)
        if p.is_alive():
            p.kill()
            p.join(5)
