"""The thirty-second set of public bug reports on the server's lifecycle: the start-up port check
(a port already in use, ``--host ""`` / ``::`` / ``0.0.0.0`` / ``localhost``), a model directory
whose ``config.json`` is empty, not UTF-8, not a JSON object or absent, and children that die
(the scheduler aborted, the detokenizer or a tensor-parallel rank killed) or ignore the stop.

No server is launched: the launcher's functions are called in process (``bind_error``, the check
``preflight_server`` runs before the HTTP stack, :func:`check_model_dir`, and
:class:`Subprocesses`) over sockets held by the test and over small forked stand-in children.
No fixture of ``conftest.py`` is needed (each model directory is a ``tmp_path`` that fails before
any weight is read).

Oracles: the bind uvicorn itself does at start-up (``loop.create_server(host=..., port=...)``, run
cold on the same address: the check must refuse exactly when that bind fails), the JSON spec
(``json.loads`` of the file's text), the exit code the operating system reports for a child that
a signal killed (``-signum``, POSIX), and ``os.kill(pid, 0)`` for a process still there.
"""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import json
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sglang_v4.entrypoints.launcher import Subprocesses, check_model_dir
from sglang_v4.entrypoints.tp_launch import TPWorkerProc
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.server_args import PortArgs
from sglang_v4.utils import bind_error

pytestmark = pytest.mark.timeout(60)

_FORK = multiprocessing.get_context("fork")


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


HAS_IPV6 = _has_ipv6()


def _uvicorn_bind_fails(host: str, port: int) -> bool:
    """The oracle: whether the bind uvicorn's ``Server.startup`` does (``create_server`` with
    ``host`` / ``port``) fails with ``EADDRINUSE`` on this machine now."""

    async def bind() -> bool:
        try:
            server = await asyncio.get_running_loop().create_server(asyncio.Protocol, host=host, port=port)
        except OSError as e:
            assert e.errno == errno.EADDRINUSE, e
            return True
        server.close()
        await server.wait_closed()
        return False

    return asyncio.run(bind())


def _listen(family: socket.AddressFamily, host: str, v6only: bool | None = None) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, int(v6only))
    s.bind((host, 0))
    s.listen()
    return s


# --------------------------------------------------------------------------- the port check


def test_empty_host_is_every_address_not_an_unresolvable_name() -> None:
    """vllm-project/vllm#22816: ``--host ""`` means every address of the machine (IPv4 and IPv6),
    as asyncio's ``create_server`` binds it. The start-up check called ``getaddrinfo("")``, which
    does not resolve, and refused the empty host that uvicorn would have served on; it must pass
    on a free port and name the port when an IPv4 or an IPv6 server holds it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert not _uvicorn_bind_fails("", free)
    assert bind_error("", free) is None  # was "host: cannot resolve ''"
    holders = [_listen(socket.AF_INET, "0.0.0.0")]
    if HAS_IPV6:
        holders.append(_listen(socket.AF_INET6, "::", v6only=True))
    try:
        for h in holders:
            port = h.getsockname()[1]
            assert _uvicorn_bind_fails("", port)
            msg = bind_error("", port)
            assert msg is not None and msg.startswith("port: ") and "already in use" in msg, msg
    finally:
        for h in holders:
            h.close()


def _not_ours(addr: str) -> bool:
    """True when binding ``addr`` fails with ``EADDRNOTAVAIL`` (no address of this machine)."""
    with socket.socket() as s:
        try:
            s.bind((addr, 0))
        except OSError as e:
            return e.errno == errno.EADDRNOTAVAIL
    return False


def test_an_address_of_a_family_not_enabled_is_skipped_as_asyncio_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """python/cpython bpo-30945 (asyncio's ``create_server`` on a host whose name also resolves to
    an address this machine cannot bind, e.g. ``::1`` with IPv6 off): the server skips an address
    whose bind gives ``EADDRNOTAVAIL`` and listens on the others, so the start-up check must not
    refuse the host for it; a host none of whose addresses binds is still refused, naming it.
    The unbindable addresses are documentation addresses (RFC 5737) this machine does not hold."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    real = socket.getaddrinfo
    v4 = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
    foreign = [a for a in ("192.0.2.201", "198.51.100.201", "203.0.113.201") if _not_ours(a)][:2]
    if len(foreign) < 2:
        pytest.skip("this machine holds the documentation addresses the test binds")

    def two_addresses(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host == "both.test":
            return [(*v4, ("127.0.0.1", port)), (*v4, (foreign[0], port))]
        if host == "none.test":
            return [(*v4, (a, port)) for a in foreign]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    assert bind_error("both.test", free) is None
    msg = bind_error("none.test", free)
    assert msg is not None and msg.startswith(f"host: cannot listen on {foreign[1]}:"), msg
    with socket.socket() as holder:  # a taken port is still named, whatever else is skipped
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        msg = bind_error("both.test", taken)
        assert msg is not None and msg.startswith("port: ") and "already in use" in msg, msg


@pytest.fixture
def held() -> Iterator[list[socket.socket]]:
    """Listening sockets the test opens (closed after it)."""
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


@pytest.mark.skipif(not HAS_IPV6, reason="needs an IPv6 loopback")
@pytest.mark.parametrize(
    ("holder", "hosts"),
    [
        ((socket.AF_INET, "0.0.0.0", None), ("::", "::1", "0.0.0.0", "127.0.0.1", "localhost")),
        ((socket.AF_INET, "127.0.0.1", None), ("::", "0.0.0.0", "127.0.0.1", "localhost")),
        ((socket.AF_INET6, "::", True), ("::", "::1", "0.0.0.0", "localhost")),
        ((socket.AF_INET6, "::", False), ("::", "0.0.0.0", "127.0.0.1", "localhost")),
        ((socket.AF_INET6, "::1", None), ("::", "::1", "127.0.0.1", "localhost")),
    ],
    ids=["v4-any", "v4-loopback", "v6-any-v6only", "v6-any-dual", "v6-loopback"],
)
def test_port_check_agrees_with_the_bind_uvicorn_does(
    held: list[socket.socket], holder: tuple[Any, str, bool | None], hosts: tuple[str, ...]
) -> None:
    """dphnAI/sonar#621 (uvicorn's ``[Errno 98] error while attempting to bind on address ('::',
    ...)`` after the launcher's own check passed) and vllm-project/vllm#7514 (``address already in
    use`` on ``0.0.0.0:8000``): the pre-launch check must refuse exactly when uvicorn's bind of the
    same ``--host`` / ``--port`` fails, with one ``port:`` line. uvicorn binds every address a name
    resolves to, IPv6 sockets IPv6-only: the check bound only the first address and a dual-stack
    IPv6 socket, so ``--host ::`` was refused while only an IPv4 server held the port, and a
    ``localhost`` whose IPv6 address was taken passed."""
    family, addr, v6only = holder
    sock = _listen(family, addr, v6only)
    held.append(sock)
    port = sock.getsockname()[1]
    refused = []
    for host in hosts:
        fails = _uvicorn_bind_fails(host, port)
        msg = bind_error(host, port)
        assert (msg is not None) == fails, (host, msg)
        if fails:
            refused.append(host)
            assert msg is not None and msg.startswith("port: ") and f":{port} is already in use" in msg
    assert addr in refused, refused  # the held address itself is taken: the check is not vacuous


# --------------------------------------------------------------------------- config.json


def _model_dir(tmp_path: Any, config: bytes | None, extra: dict[str, bytes] | None = None) -> str:
    d = tmp_path / "model"
    d.mkdir()
    if config is not None:
        (d / "config.json").write_bytes(config)
    for name, data in (extra or {}).items():
        (d / name).write_bytes(data)
    return str(d)


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00" * 16, b"GGUF\x03\x00\x00\x00\xe3\x81", b'{"model_type": "deepseek_v4",'],
    ids=["empty", "zeros", "binary", "truncated"],
)
def test_unreadable_config_json_is_one_line_naming_the_file(tmp_path: Any, raw: bytes) -> None:
    """microsoft/OmniParser#130 (a 0-byte ``config.json``: ``is not a valid JSON file``) and
    instructlab/instructlab#1571 (a GGUF checkpoint's bytes read as the config:
    ``UnicodeDecodeError`` deep in transformers): a ``config.json`` that is not JSON text (the
    JSON spec: ``json.loads`` refuses it) is a ``ValueError`` naming ``model_path`` and the
    file, before any process starts, not a traceback from a child."""
    with pytest.raises(ValueError):
        json.loads(raw.decode("utf-8-sig", errors="strict"))
    path = _model_dir(tmp_path, raw)
    with pytest.raises(ValueError, match=r"^model_path: .*config\.json is not a readable JSON object"):
        check_model_dir(path, skip_tokenizer_init=True)


@pytest.mark.parametrize("raw", [b"[]", b'"deepseek_v4"', b"null", b"42"], ids=["list", "str", "null", "int"])
def test_config_json_not_an_object_is_a_value_error(tmp_path: Any, raw: bytes) -> None:
    """vllm-project/vllm#17132: a config file that parsed but was not a JSON object ended in a bare
    ``assert isinstance(config_dict, dict)``. Valid JSON that is not an object (``json.loads`` gives
    a list, a string, ``None``, a number) is a ``ValueError`` naming ``model_path``."""
    assert not isinstance(json.loads(raw), dict)
    path = _model_dir(tmp_path, raw)
    with pytest.raises(ValueError, match=r"^model_path: .*config\.json"):
        check_model_dir(path, skip_tokenizer_init=True)


def test_adapter_only_directory_names_the_missing_config(tmp_path: Any) -> None:
    """vllm-project/vllm#4416: a fine-tune's output directory holding only a LoRA adapter
    (``adapter_config.json``, ``adapter_model.safetensors``) failed with ``does not appear to have
    a file named config.json`` from the loader. The start-up check names ``model_path`` and the
    missing ``config.json`` (the Hugging Face layout's required file)."""
    path = _model_dir(tmp_path, None, {"adapter_config.json": b"{}", "adapter_model.safetensors": b""})
    with pytest.raises(ValueError, match=r"^model_path: .* has no config\.json"):
        check_model_dir(path, skip_tokenizer_init=True)


# --------------------------------------------------------------------------- children that die


def _sleep_forever(installed: Any, ignore_term: bool = False) -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a fork inherits Python's KeyboardInterrupt handler
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    installed.set()
    while True:
        time.sleep(0.05)


def _abort(installed: Any) -> None:
    faulthandler.disable()  # pytest's dump of the fork's stack would read as a crash of the run
    os.abort()


def _start(target: Any, *args: Any) -> Any:
    """A forked child running ``target(installed, *args)``; for ``_sleep_forever`` this returns
    only once the child's signal dispositions are installed (no race with the signals sent)."""
    installed = _FORK.Event()
    p = _FORK.Process(target=target, args=(installed, *args), daemon=True)
    p.start()
    if target is _sleep_forever:
        assert installed.wait(30), "the child did not install its signal handlers"
    return p


def _procs(sched: Any, detok: Any, workers: list[Any] | None = None) -> Subprocesses:
    tp = [TPWorkerProc(rank=i + 1, process=w, ready=None, is_ready=True) for i, w in enumerate(workers or [])]  # type: ignore[arg-type]
    return Subprocesses(
        PortArgs("", "", "", ipc_dir=""), SchedulerReadyInfo(status="ready"), sched, detok, tp_workers=tp
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_scheduler_aborted_is_a_crash_not_a_stop() -> None:
    """sgl-project/sglang#21486: NCCL's watchdog calls ``std::abort()`` in the scheduler, no Python
    handler runs, and the parent kept answering health checks. A scheduler killed by ``SIGABRT``
    (exit code ``-6``, POSIX) is reported dead by name and is not a stop asked for (the server then
    turns ``/health`` to 503 and exits 1 instead of 0)."""
    sched, detok = _start(_abort), _start(_sleep_forever)
    procs = _procs(sched, detok)
    try:
        sched.join(10)
        assert sched.exitcode == -signal.SIGABRT
        dead = procs.dead_process()
        assert dead is not None and dead.startswith(f"scheduler process (pid {sched.pid})"), dead
        assert f"code {-signal.SIGABRT}" in dead
        assert not procs.dead_were_stopped()
    finally:
        procs.shutdown()


def test_detokenizer_or_rank_killed_is_seen_while_rank_zero_lives() -> None:
    """sgl-project/sglang#18579 (a dead detokenizer left a zombie service that took requests) and
    sgl-project/sglang#20287 (the OOM killer took a TP rank other than 0 and the launcher waited on
    rank 0 for ever): with the scheduler alive, a ``SIGKILL`` ed detokenizer and then a ``SIGKILL`` ed
    rank 1 are each named by the liveness check, as crashes."""
    sched, detok, rank1 = _start(_sleep_forever), _start(_sleep_forever), _start(_sleep_forever)
    procs = _procs(sched, detok, [rank1])
    try:
        assert procs.dead_process() is None
        os.kill(rank1.pid, signal.SIGKILL)
        rank1.join(10)
        assert rank1.exitcode == -signal.SIGKILL
        dead = procs.dead_process()
        assert dead is not None and dead.startswith(f"TP rank 1 process (pid {rank1.pid})"), dead
        assert not procs.dead_were_stopped()
        os.kill(detok.pid, signal.SIGKILL)
        detok.join(10)
        dead = procs.dead_process()
        assert dead is not None and dead.startswith(f"detokenizer process (pid {detok.pid})"), dead
        assert not procs.dead_were_stopped()
    finally:
        procs.shutdown()


def test_children_stopped_by_the_process_group_signal_are_a_stop() -> None:
    """ai-dynamo/dynamo#1889: a Ctrl-C reaches every process of the group; children that exit on
    ``SIGINT`` / ``SIGTERM`` (``-2`` / ``-15``) are a stop asked for, so the server exits 0 with the
    shutdown error instead of reporting a backend crash."""
    sched, detok = _start(_sleep_forever), _start(_sleep_forever)
    procs = _procs(sched, detok)
    try:
        os.kill(sched.pid, signal.SIGTERM)
        os.kill(detok.pid, signal.SIGINT)
        sched.join(10)
        detok.join(10)
        assert (sched.exitcode, detok.exitcode) == (-signal.SIGTERM, -signal.SIGINT)
        assert procs.dead_process() is not None and procs.dead_were_stopped()
    finally:
        procs.shutdown()


def test_shutdown_leaves_no_orphan_even_when_a_child_ignores_sigterm(monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl-project/sglang#23627 and ai-dynamo/dynamo#1889: scheduler processes outlived the server
    (reparented to PID 1, holding the GPU). After ``Subprocesses.shutdown`` no child is left, even
    one that ignores ``SIGTERM`` (it gets ``SIGKILL`` at the stop deadline); a second shutdown is a
    no-op."""
    monkeypatch.setattr("sglang_v4.entrypoints.launcher.CHILD_STOP_TIMEOUT_S", 0.5)
    sched, detok, rank1 = _start(_sleep_forever, True), _start(_sleep_forever), _start(_sleep_forever, True)
    procs = _procs(sched, detok, [rank1])
    t0 = time.monotonic()
    procs.shutdown()
    assert time.monotonic() - t0 < 3.0
    for p in (sched, detok, rank1):
        p.join(2)
        assert _gone(p.pid), p.pid
    assert sched.exitcode == -signal.SIGKILL and rank1.exitcode == -signal.SIGKILL
    assert detok.exitcode == -signal.SIGTERM
    procs.shutdown()
