"""``python -m sglang_v4.launch_server [flags]``: start the HTTP server (SGLang's CLI shape).

Flags are those of :class:`sglang_v4.server_args.ServerArgs` (``--model-path``, ``--port``,
``--page-size``, ...). Without ``--model-path`` the embedded default model is served. Exits
non-zero when the backend fails to start or crashes.
"""

from __future__ import annotations

import argparse
import logging
import sys

from sglang_v4.server_args import ServerArgs
from sglang_v4.utils import configure_logging


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the server, return the process exit code."""
    parser = argparse.ArgumentParser(prog="python -m sglang_v4.launch_server", description=__doc__)
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    log = logging.getLogger("sglang_v4.launch_server")
    try:
        server_args = ServerArgs.from_cli_args(args)
    except ValueError as e:
        parser.error(str(e))
    from sglang_v4.entrypoints.http_server import launch_server

    try:
        return launch_server(server_args)
    except (RuntimeError, ValueError) as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
