"""Helpers for the tests that drive an ASGI app directly (no HTTP client), with their own
``receive`` / ``send`` callables to play a client that goes away mid-response."""

from __future__ import annotations

from typing import Any


def json_post_scope(path: str, spec_version: str = "2.4") -> dict[str, Any]:
    """The ASGI HTTP connection scope of a JSON ``POST path`` (HTTP/1.1, host ``testserver``, no
    query string, client ``127.0.0.1:50000``) under ASGI spec ``spec_version``. With ``"2.4"`` a
    gone client shows as a ``send`` that raises ``OSError``; below it (``"2.3"``) Starlette's
    streaming response also listens for ``http.disconnect``."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": spec_version},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"testserver")],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
