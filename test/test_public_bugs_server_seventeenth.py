"""A seventeenth set of public bug reports, replayed against launching and operating the server:
the ``--host`` / ``--port`` / ``--dist-init-addr`` addresses (IPv6 literals in URLs, a bracketed
``--host``, the port-in-use message), ``--chunked-prefill-size -1`` (alone and with
``--disable-radix-cache``), the Prometheus ``model_name`` label, and ``/health_generate`` (a
timed-out probe, a crashed scheduler). Each test names its
report. Faults found here and fixed: an IPv6 ``--host`` gave an unusable URL (``http://::1:30000``,
in the start-up log line and the data-parallel replica URLs), ``--host [::1]`` could not be
listened on, an unbracketed IPv6 ``--dist-init-addr`` was accepted (``tcp://::1:5000`` cannot be
parsed), and the port-in-use message ran an IPv6 address into its port. The other reports passed
as-is and are kept as regression tests.

Everything runs in-process: ``ServerArgs``, the launcher's bind check, the data-parallel replica
URL, ``TokenizerMetrics``, a ``TokenizerManager`` whose scheduler socket is read by the test, and
a CPU ``Scheduler`` on the ``sched_model_dir`` checkpoint. Oracles: RFC 3986 as the standard
library's ``urllib.parse`` and ``ipaddress`` read it, the kernel's own ``bind``,
``prometheus_client``'s text parser, the messages the scheduler socket receives, and a cold run on
a differently configured scheduler.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import zmq
from server_fixture import make_fake_model_dir
from sglang_v4.entrypoints.data_parallel import replica_url
from sglang_v4.entrypoints.metrics import TokenizerMetrics
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.managers.io_struct import AbortReq
from sglang_v4.server_args import PortArgs, ServerArgs
from sglang_v4.utils import bind_error

pytestmark = pytest.mark.timeout(120)


def _args(**kw: object) -> ServerArgs:
    return ServerArgs(model_path="unused", device="cpu", **kw)  # type: ignore[arg-type]


def _ipv6_loopback() -> bool:
    """Whether this machine can listen on ``::1``."""
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("host", "want_host"),
    [
        ("::1", "::1"),
        ("::", "::1"),  # a wildcard bind is reached at the loopback (SGLang's ServerArgs.url)
        ("2001:db8::1", "2001:db8::1"),
        ("[::1]", "::1"),
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "127.0.0.1"),
        ("localhost", "localhost"),
    ],
)
def test_server_url_brackets_an_ipv6_host(host: str, want_host: str) -> None:
    """PrefectHQ/fastmcp#4372 (the start-up log printed ``http://::1:8000``) and
    vllm-project/vllm#28679 (``--host ::`` built ``http://:::8000``, which no client parses):
    an IPv6 literal goes in brackets inside a URL (RFC 3986 section 3.2.2). Expected: the
    server's URL (the ``Serving on`` line) parses back, by the standard library, to the host and
    port it listens on (the loopback for a wildcard bind), for IPv6, IPv4 and names alike."""
    sa = _args(host=host, port=30123)
    parts = urlsplit(sa.url())
    assert parts.scheme == "http"
    assert parts.hostname == want_host
    assert parts.port == 30123  # raised ValueError on the unbracketed IPv6 URL
    if ":" in want_host:
        assert ipaddress.ip_address(parts.hostname) == ipaddress.ip_address(want_host)


@needs_ipv6
def test_bracketed_ipv6_host_is_listened_on() -> None:
    """sgl-project/sglang#20657 (SGLang's network addresses drop the ``[ ]`` of an IPv6 host, so
    ``[::1]`` and ``::1`` are one address): ``--host [::1]`` (the spelling a URL uses) was kept as
    is and the start-up check answered ``host: cannot resolve '[::1]'``. Expected: the server
    listens on ``::1`` -- the host the kernel binds is ``::1`` and the launcher's bind check
    passes -- while an unknown host is still refused naming ``host``."""
    sa = _args(host="[::1]")
    assert ipaddress.ip_address(sa.host) == ipaddress.ip_address("::1")
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
        probe.bind((sa.host, 0))  # the kernel takes the host as given to uvicorn
        free = probe.getsockname()[1]
    assert bind_error(sa.host, free) is None
    assert (bind_error("no-such-host.invalid", free) or "").startswith("host:")


@needs_ipv6
def test_port_in_use_on_an_ipv6_host() -> None:
    """NVIDIA/TensorRT-LLM#10877 (the port check used an IPv4 socket, so an IPv6 ``--host`` was
    refused with ``Address family for hostname not supported``): the start-up bind check follows
    the host's address family. Expected: a free port on ``::1`` passes; a port another server
    listens on is refused with the ``port:`` message, whose address parses back (the IPv6 host in
    brackets, not ``::1:PORT``)."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        msg = bind_error("::1", port)
        assert msg is not None and msg.startswith("port: ") and "already in use" in msg
        where = msg.split()[1]
        parts = urlsplit(f"//{where}")
        assert parts.hostname == "::1" and parts.port == port
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
        probe.bind(("::1", 0))
        free = probe.getsockname()[1]
    assert bind_error("::1", free) is None


@pytest.mark.parametrize(
    ("addr", "host", "port"),
    [
        ("[::1]:29500", "::1", 29500),
        ("[2001:db8::7]:5000", "2001:db8::7", 5000),
        ("10.0.0.2:5000", "10.0.0.2", 5000),
    ],
)
def test_dist_init_addr_accepts_bracketed_ipv6(addr: str, host: str, port: int) -> None:
    """sgl-project/sglang#3949 (closes #2892: multi-node start-up hung on an IPv6
    ``--dist-init-addr``; SGLang's form is ``[addr]:port``). Expected: the bracketed form is
    accepted and, as ``torch.distributed`` reads it (``tcp://{addr}``), parses back to the host
    and port."""
    sa = _args(dist_init_addr=addr)
    parts = urlsplit(f"tcp://{sa.dist_init_addr}")
    assert parts.hostname == host and parts.port == port


@pytest.mark.parametrize("addr", ["::1:29500", "2001:db8::7:5000", "[::1:5000", "[::1]"])
def test_dist_init_addr_bare_ipv6_is_refused(addr: str) -> None:
    """sgl-project/sglang#3949: a bare IPv6 ``--dist-init-addr`` (``::1:29500``) was accepted,
    then ``torch.distributed`` could not read ``tcp://::1:29500`` (its port cannot be told from the
    address). Expected: refused at start-up, a ``ValueError`` naming ``dist_init_addr``."""
    with pytest.raises(ValueError, match="dist_init_addr"):
        _args(dist_init_addr=addr)


@pytest.mark.parametrize(("host", "want"), [("::1", "::1"), ("::", "127.0.0.1"), ("10.1.2.3", "10.1.2.3")])
def test_dp_replica_url_of_an_ipv6_host(host: str, want: str) -> None:
    """vllm-project/vllm#18986 (fixed by #18991: data parallelism built an unbracketed IPv6 URL
    and its ranks could not connect): the URL the ``--dp-size`` router uses for a replica was
    ``http://::1:30001``. Expected: it parses back to the replica's host (loopback when it listens
    on every address) and port."""
    sa = _args(host=host, port=30001)
    parts = urlsplit(replica_url(sa))
    assert parts.hostname == want and parts.port == 30001


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize("page_size", [256, 512, 1024])
def test_chunked_prefill_size_minus_one_with_any_page_size(page_size: int) -> None:
    """sgl-project/sglang#8935 (fixed by #8973: ``--chunked-prefill-size -1``, the documented way
    to turn chunking off, failed start-up with ``chunked_prefill_size must be divisible by
    page_size``). Expected: ``-1`` is accepted with any valid ``--page-size`` from the command
    line and kept as ``-1``; ``0`` and other negatives read as ``-1`` too (SGLang's validation
    checks only positive values and its scheduler reads every value ``<= 0`` as disabled)."""
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(
        [
            "--model-path",
            "unused",
            "--device",
            "cpu",
            "--chunked-prefill-size",
            "-1",
            "--page-size",
            str(page_size),
        ]
    )
    sa = ServerArgs.from_cli_args(ns)
    assert sa.chunked_prefill_size == -1 and sa.page_size == page_size
    for off in (0, -2):
        assert _args(chunked_prefill_size=off, page_size=page_size).chunked_prefill_size == -1


def test_metrics_model_name_label_is_the_first_served_name(tmp_path: Path) -> None:
    """vllm-project/vllm#3937 and vllm-project/vllm#2987 (the ``model_name`` label of every
    Prometheus series was the model's path, not the ``--served-model-name``, so dashboards keyed on
    the API's name found nothing): Expected: with ``--served-model-name a b`` every series the
    server exposes carries ``model_name="a"`` (the first name, the one ``/v1/models`` lists first),
    as ``prometheus_client``'s own parser reads the scrape; without the flag, the model's directory
    name (the API's model id here), not its path with ``/`` in it (vllm-project/vllm#2987)."""
    from prometheus_client.parser import text_string_to_metric_families

    d = make_fake_model_dir(tmp_path)
    for names, want in ((["served-a", "served-b"], "served-a"), (None, d.name)):
        sa = ServerArgs(model_path=str(d), device="cpu", served_model_name=names, enable_metrics=True)
        tm = _manager(sa)
        try:
            name = tm.served_model_name
        finally:
            tm.close()
        m = TokenizerMetrics(name)
        m.observe_ttft(0.05, is_streaming=True)
        m.update_gauges({"num_running_reqs": 1, "max_total_num_tokens": 4096})
        samples = [s for fam in text_string_to_metric_families(m.render().decode()) for s in fam.samples]
        assert samples and {s.labels.get("model_name") for s in samples} == {want}
        assert any(s.name == "sglang:num_running_reqs" and s.value == 1 for s in samples)


# --------------------------------------------------------------------------- /health_generate

_INFO = SchedulerReadyInfo(
    status="ready", max_total_num_tokens=4096, max_req_input_len=4095, context_len=4096
)
_PORT_DIRS: list[str] = []


def _manager(sa: ServerArgs, port_args: PortArgs | None = None):  # noqa: ANN202 - TokenizerManager
    from sglang_v4.managers.tokenizer_manager import TokenizerManager

    pa = port_args or PortArgs.init_new()
    _PORT_DIRS.append(pa.ipc_dir)
    return TokenizerManager(sa, pa, _INFO, None)


@pytest.fixture(scope="module", autouse=True)
def _remove_ipc_dirs():  # noqa: ANN202
    yield
    for d in _PORT_DIRS:
        shutil.rmtree(d, ignore_errors=True)


def _scheduler_inbox(port_args: PortArgs) -> zmq.Socket:
    """A PULL socket standing for the scheduler: it receives what the manager sends it."""
    sock = zmq.Context.instance().socket(zmq.PULL)
    sock.bind(port_args.scheduler_input_ipc_name)
    return sock


def _drain(sock: zmq.Socket, wait_s: float = 1.0) -> list[object]:
    msgs: list[object] = []
    while sock.poll(int(wait_s * 1000)):
        msgs.append(sock.recv_pyobj())
        wait_s = 0.2
    return msgs


def test_timed_out_health_probe_is_aborted_in_the_scheduler(tmp_path: Path) -> None:
    """sgl-project/sglang#35884 (fix PR #35896): when the one-token ``/health_generate`` probe
    timed out, only the HTTP side gave up; the probe stayed queued in the scheduler, and a poller
    at the timeout interval piled probes up until batching them crashed the server. Expected: a
    probe the scheduler does not answer in time reports unhealthy and is aborted scheduler-side
    -- the scheduler socket receives the probe and then an ``AbortReq`` for the same rid -- and no
    probe stays in the manager's request table."""
    sa = ServerArgs(model_path=str(make_fake_model_dir(tmp_path)), device="cpu")
    pa = PortArgs.init_new()
    inbox = _scheduler_inbox(pa)
    tm = _manager(sa, pa)
    try:

        async def probe() -> bool:
            tm.start()
            tm.server_status = "Up"
            return await tm.health_generate(timeout_s=0.5)

        assert asyncio.run(probe()) is False
        msgs = _drain(inbox)
        sent = [m for m in msgs if not isinstance(m, AbortReq) and getattr(m, "rid", None)]
        aborts = [m for m in msgs if isinstance(m, AbortReq)]
        assert len(sent) == 1, msgs
        assert [a.rid for a in aborts] == [sent[0].rid]
        assert tm.rid_to_state == {}
    finally:
        tm.close()
        inbox.close(linger=0)


def test_health_generate_fails_at_once_after_a_scheduler_fault(tmp_path: Path) -> None:
    """sgl-project/sglang#6624 (``/health_generate`` kept answering 200 for an hour after the
    scheduler had died): Expected: once the backend is marked crashed, the probe answers
    unhealthy at once (well inside its timeout) without sending anything to the dead scheduler,
    and the server's status is no longer ``Up``."""
    sa = ServerArgs(model_path=str(make_fake_model_dir(tmp_path)), device="cpu")
    pa = PortArgs.init_new()
    inbox = _scheduler_inbox(pa)
    tm = _manager(sa, pa)
    try:

        async def probe() -> tuple[bool, float]:
            tm.start()
            tm.server_status = "Up"
            tm.on_crash("Traceback: scheduler died")
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            ok = await tm.health_generate(timeout_s=30.0)
            return ok, loop.time() - t0

        ok, took = asyncio.run(probe())
        assert ok is False and took < 5.0
        assert tm.server_status != "Up"
        assert _drain(inbox, wait_s=0.3) == []
    finally:
        tm.close()
        inbox.close(linger=0)


# --------------------------------------------------------------------------- scheduler flags


def test_unchunked_prefill_without_radix_cache_serves_a_queue(sched_model_dir: str) -> None:
    """sgl-project/sglang#1594 (``--chunked-prefill-size -1 --disable-radix-cache`` crashed the
    scheduler's admission on the first queued request: ``'<=' not supported between 'int' and
    'NoneType'``). Expected: with both flags the scheduler serves queued prompts longer than a
    page, and its greedy outputs equal a cold run of the same prompts one by one on a chunking,
    caching scheduler; nothing is left in use afterwards."""
    from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit

    prompts = {f"r{i}": [(7 * i + 3 * j) % 500 + 10 for j in range(PAGE + 40 * i + 17)] for i in range(2)}
    plain = make_scheduler(sched_model_dir, chunked_prefill_size=-1, disable_radix_cache=True)
    for rid, ids in prompts.items():
        submit(plain, rid, ids, 3)
    got = drain(plain)
    assert_idle(plain)
    cold = make_scheduler(sched_model_dir, chunked_prefill_size=128)
    for rid, ids in prompts.items():
        assert got[rid]["ids"] == run_one(cold, rid, ids, 3)["ids"], rid
        assert got[rid]["completion"] == 3
