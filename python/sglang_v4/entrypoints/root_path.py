"""The route a request names once the server's path prefix (``--root-path``) is taken off.

Behind a reverse proxy that serves the API under a prefix (``https://host/my-model/v1/models``)
the server runs with ``--root-path /my-model`` (vLLM's flag; SGLang's ``--fastapi-root-path``),
which FastAPI puts in each request's ASGI scope as ``root_path``. The routes then answer both the
prefixed path (a proxy that forwards it as is) and the bare one (a proxy that strips it), as
Starlette's router matches them. What decides by the route -- the API-key and admin-key checks,
the routes left open, the error shape of a route family, the per-route headers -- reads
:func:`route_path`, never the raw ``path``, so a prefix changes none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["route_path"]


def route_path(scope: Mapping[str, Any]) -> str:
    """The path of the ASGI ``scope`` without its ``root_path`` prefix (``/v1/models`` for
    ``/my-model/v1/models`` under ``root_path="/my-model"``; the root itself is ``/``).

    A path that does not start with the prefix on a segment boundary (``/my-modelx``, or a bare
    ``/v1/models``) is returned unchanged, as the router matches it.
    """
    path: str = scope.get("path", "")
    root = scope.get("root_path", "") or ""
    if not root or not path.startswith(root):
        return path
    rest = path[len(root) :]
    if not rest:
        return "/"
    return rest if rest.startswith("/") else path
