"""An ``aiohttp`` application served on a loopback port from a thread, for tests that put stub
replicas, a stub router and the ``--dp-size`` gateway in one process."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web


def free_port() -> int:
    """A loopback TCP port nothing listens on (at the time of the call)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_aiohttp(app: web.Application, **options: Any) -> tuple[str, Callable[[], None]]:
    """``app`` served on a loopback port by its own event loop in a daemon thread (``options``:
    the ``web.AppRunner``'s). Returns ``(url, stop)``; ``stop()`` closes it within 10 s."""
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, **options)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def stop() -> None:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    return f"http://127.0.0.1:{port}", stop
