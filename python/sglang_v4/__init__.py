"""sglang-v4: a serving runtime for DeepSeek-V4-architecture models in SGLang's shape.

``from sglang_v4 import Engine`` gives the offline engine (imported lazily, so importing the
package stays cheap); ``python -m sglang_v4.launch_server`` starts the HTTP server.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.version import __version__

__all__ = ["Engine", "ServerArgs", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from sglang_v4.entrypoints.engine import Engine

        return Engine
    if name == "ServerArgs":
        from sglang_v4.server_args import ServerArgs

        return ServerArgs
    raise AttributeError(f"module 'sglang_v4' has no attribute {name!r}")
