"""Process and logging helpers shared by the runtime processes (the tokenizer helpers live in
:mod:`sglang_v4.hf_transformers_utils`; their names are re-exported here)."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import concurrent.futures
import ctypes
import errno
import functools
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, NoReturn, TypeVar

from sglang_v4.hf_transformers_utils import (  # noqa: F401 - re-exported
    FastTokenizer,
    byte_level_token_bytes,
    get_tokenizer,
)

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Linux ``prctl`` option numbers of ``PR_SET_PDEATHSIG`` and ``PR_SET_NAME`` (``<linux/prctl.h>``).
_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def human_readable_int(text: str) -> int:
    """A token count as SGLang's ``--context-length`` / ``--max-total-tokens`` /
    ``--max-prefill-tokens`` take it: a plain integer, or a number with an SI suffix (``k``,
    ``M``, ``G``, ``T``: powers of 1000; decimals allowed, ``25.6k`` = 25600) or an IEC suffix
    (``Ki``, ``Mi``, ``Gi``, ``Ti``: powers of 1024; integers only, ``128Ki`` = 131072); a
    fraction of a token is truncated.
    Suffixes are case-sensitive, as in SGLang.

    Raises:
        argparse.ArgumentTypeError: anything else (argparse reports it naming the flag).
    """
    value = str(text).strip()
    m = _HUMAN_INT.fullmatch(value)
    if m is None:
        try:
            return int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"invalid integer {text!r}: use a plain integer or a suffix k / M / G / T (x1000) or "
                "Ki / Mi / Gi / Ti (x1024), e.g. 128k or 128Ki"
            ) from None
    number, suffix = m.groups()
    if suffix in _IEC:
        if "." in number:
            raise argparse.ArgumentTypeError(f"invalid integer {text!r}: no decimals with {suffix}")
        return int(number) * _IEC[suffix]
    return int(Fraction(number) * _SI[suffix])  # a fraction of a token is dropped, as in SGLang


class _CurrentStdoutHandler(logging.StreamHandler):
    """A stream handler that writes to whatever ``sys.stdout`` is when a record is emitted, not the
    stream of the moment it was configured: a stdout replaced and closed since (an embedding
    application's redirect, a test harness's capture) must not turn later log lines into
    "--- Logging error ---" tracebacks on stderr."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ assigns it; always sys.stdout
        pass


def configure_logging(level: str = "info", prefix: str = "") -> None:
    """Configure the root logger in SGLang's format: ``[YYYY-mm-dd HH:MM:SS<prefix>] message``.

    Args:
        level: ``debug|info|warning|error|critical``.
        prefix: text inside the brackets after the time, e.g. ``" Scheduler"``.
    """
    fmt = f"[%(asctime)s{prefix}] %(message)s"
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = _CurrentStdoutHandler()
    handler.setFormatter(logging.Formatter(fmt, datefmt="%Y-%m-%d %H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    for noisy in ("uvicorn.access", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the Linux kernel to send ``sig`` to this process when its parent dies.

    Uses ``prctl(PR_SET_PDEATHSIG, sig)`` through ctypes; a no-op on other platforms. The kernel's
    "parent" is the thread that created this process: parents start their children from a thread
    that lasts as long as they do (:func:`~sglang_v4.entrypoints.lifecycle.start_ignoring_sigint`).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except OSError:  # pragma: no cover - libc always present on Linux
        logger.warning("prctl(PR_SET_PDEATHSIG) unavailable")


def set_process_name(name: str) -> None:
    """Name this process in ``ps`` / ``top`` / ``/proc/PID/comm`` (SGLang names its processes
    ``sglang::scheduler`` and so on the same way), so an operator can tell them apart.

    The whole name replaces the command line that ``ps aux`` and ``pgrep -f`` show (the
    ``setproctitle`` package, as SGLang does; skipped where it is not installed), and
    ``prctl(PR_SET_NAME)`` sets the kernel's name of the calling (main) thread, of which the kernel
    keeps the first 15 bytes (``sglang_v4::scheduler`` shows as ``sglang_v4::sche`` in ``top``,
    ``ps -e`` and ``/proc/PID/comm``). A no-op on other platforms.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a declared dependency; the kernel name still follows
        pass
    else:
        setproctitle.setproctitle(name)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except OSError:  # pragma: no cover - libc always present on Linux
        logger.warning("prctl(PR_SET_NAME) unavailable")


def exit_on_sigterm() -> None:
    """Set up a child process's signals: SIGTERM becomes ``SystemExit(0)`` so a stopped child runs
    its finalizers (e.g. unlinks the multiprocessing semaphores tqdm creates) instead of dying with
    them leaked; SIGINT is ignored, because a Ctrl+C in a terminal reaches the whole process group
    and the parent decides (the HTTP server drains in-flight requests first, then stops its
    children with SIGTERM)."""

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def exit_without_teardown(code: int) -> NoReturn:
    """End a process after a normal stop: run the ``atexit`` handlers (multiprocessing's
    finalizers, pyzmq's context cleanup...) and flush logs and stdio, then ``os._exit(code)``,
    skipping the interpreter's module teardown and its joins of non-daemon threads. Triton's
    nanobind extension reports every object still interned at teardown as "leaked" (dozens of
    lines on stderr at each server stop), and with torch and transformers loaded the teardown
    alone takes most of a second."""
    try:
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def start_parent_watchdog(parent_pid: int, interval_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that exits this process (code 1) once ``parent_pid`` is gone.

    Complements :func:`set_parent_death_signal` (which fires on the death of the parent *thread*
    and only on Linux): it polls ``os.getppid()`` every ``interval_s`` seconds.
    """

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid:
                logging.getLogger(__name__).error("Parent process %d died; exiting.", parent_pid)
                os._exit(1)

    t = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    t.start()
    return t


def find_printable_text(text: str) -> str:
    """The longest prefix of ``text`` without trailing U+FFFD (an incomplete UTF-8 sequence).

    Incremental detokenization emits only this part until the following tokens complete the
    character (same idea as SGLang's / HF TextStreamer's printable-text rule).
    """
    end = len(text)
    while end > 0 and text[end - 1] == "\ufffd":
        end -= 1
    return text[:end]


#: Allocations between young-generation garbage collections in a serving process (Python's default
#: is 700: a decode step of a few hundred requests allocates that many lists several times over).
GC_GEN0_THRESHOLD = 20000


def freeze_gc_after_startup() -> None:
    """Make the cyclic garbage collector cheap for a serving loop: collect once, move everything
    that exists after start-up (model, tokenizer, pools: long-lived) out of the collector's sight
    (``gc.freeze``), and collect the young generation less often. Without it a decode step at a
    few hundred running requests pays collector pauses that walk the whole heap (measured: 170 ms
    inside one message build)."""
    import gc

    gc.collect()
    gc.freeze()
    _, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)


def bind_error(host: str, port: int) -> str | None:
    """Why a TCP server cannot listen on ``host:port`` now; None when it can.

    The check binds what uvicorn's server binds (``loop.create_server(host=..., port=...)``,
    asyncio's and uvloop's alike): one socket for each address ``getaddrinfo(host, port,
    AI_PASSIVE)`` returns (a name such as ``localhost`` may give ``127.0.0.1`` and ``::1``; the
    empty host ``""`` every wildcard address, ``0.0.0.0`` and ``::``), with ``SO_REUSEADDR``, and an
    IPv6 socket IPv6-only (``IPV6_V6ONLY``), so ``::`` is free while only an IPv4 server holds the
    port. As asyncio's server does, an address whose family is not enabled here (the socket cannot
    be made, or a name's address gives ``EADDRNOTAVAIL``, bpo-30945) is skipped while another one
    binds. The message starts with the field at fault: ``port:`` when an address is taken (and
    says what to do: stop that process or pick another ``--port``), ``host:`` when the host does
    not resolve or is not an address of this machine. A port outside ``[1, 65535]`` (a TCP port is
    16 bits; ``getaddrinfo`` would wrap ``65536`` to ``0``, any free port) is a ``port:`` reason too.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        return f"port: {port!r} is not a TCP port (an integer in [1, 65535])"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        reason = e.strerror if isinstance(e, socket.gaierror) else str(e)
        return f"host: cannot resolve {host!r} ({reason})"
    held: list[socket.socket] = []  # all bound together, as the server's sockets are
    skipped = f"host: cannot listen on {host!r}"
    try:
        for family, kind, proto, _, addr in dict.fromkeys(infos):
            shown = addr[0] if not host or len(infos) > 1 else host
            where = f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"  # IPv6 in brackets
            try:
                s = socket.socket(family, kind, proto)
            except OSError as e:  # the family is not enabled here: the server skips it too
                skipped = f"host: cannot listen on {where} ({e.strerror or e})"
                continue
            held.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(addr)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return (
                        f"port: {where} is already in use (another server?); stop the process "
                        "listening there or pick a free port with --port"
                    )
                if e.errno == errno.EADDRNOTAVAIL and len(infos) > 1:
                    # asyncio skips an address of a family not enabled here (bpo-30945)
                    held.pop().close()
                    skipped = f"host: cannot listen on {where} ({e.strerror or e})"
                    continue
                return f"host: cannot listen on {where} ({e.strerror or e})"
        if not held:  # no address of the host could be bound: the server could not start
            return skipped
    finally:
        for s in held:
            s.close()
    return None


def is_port_available(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound by a TCP server now (see :func:`bind_error`)."""
    return bind_error(host, port) is None


_blocking_pool: concurrent.futures.ThreadPoolExecutor | None = None


async def run_blocking(fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` in a worker thread, awaited (``asyncio.to_thread`` on a pool of
    this module's own, created on first use).

    ``asyncio.run`` ends by joining its loop's default executor, so a call still running there
    (a prompt of megabytes being tokenized for a request the server's drain already failed) held
    the server's exit until it finished; this pool is not joined by the event loop, and a
    launcher that ends with :func:`exit_without_teardown` does not wait for it either.
    """
    global _blocking_pool
    if _blocking_pool is None:
        _blocking_pool = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="sglang_v4-blocking")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_blocking_pool, functools.partial(fn, *args, **kwargs))


def stop_processes(*waves: Sequence[Any], timeout_s: float = 2.0) -> None:
    """Stop ``multiprocessing.Process`` es wave by wave within ``timeout_s`` seconds in all.

    The processes of a wave get SIGTERM together (each handles it in parallel, instead of one
    after the other) once every process of the waves before it has exited; at the deadline every
    process still alive gets SIGKILL. Joins use the processes' sentinels (no polling). ``None``
    entries and processes already gone are skipped.
    """
    deadline = time.monotonic() + timeout_s
    started: list[Any] = []
    for wave in waves:
        procs = [p for p in wave if p is not None and p.is_alive()]
        for p in procs:
            p.terminate()
        started.extend(procs)
        for p in started:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            logger.warning("%s (pid %s) did not stop within %gs; killing it.", p.name, p.pid, timeout_s)
            p.kill()
            p.join(5.0)


def kill_process(proc: Any, timeout_s: float = 5.0) -> None:
    """Terminate a ``multiprocessing.Process`` (SIGTERM, then SIGKILL after ``timeout_s``)."""
    if proc is None or not proc.is_alive():
        return
    proc.terminate()
    proc.join(timeout_s)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout_s)
