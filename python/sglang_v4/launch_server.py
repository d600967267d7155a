"""``python -m sglang_v4.launch_server [flags]``: start the HTTP server (SGLang's CLI shape).

Flags are those of :class:`sglang_v4.server_args.ServerArgs` (``--model-path``, ``--port``,
``--page-size``, ...). Without ``--model-path`` the embedded default model is served. Exits
non-zero when the backend fails to start or crashes, 0 when stopped by SIGTERM / SIGINT at any
point, start-up included (:mod:`sglang_v4.entrypoints.lifecycle`).

Parallelism (docs/PARALLELISM.md): ``--tp-size N [--ep-size M]`` starts N ranks;
``--nnodes K --node-rank k --dist-init-addr HOST:PORT`` spreads them over K nodes (a node
``k > 0`` runs only its ranks, no HTTP); ``--dp-size D`` starts D servers on ports
``--port + 1 .. --port + D`` behind ``sglang-router`` on ``--port``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import warn_ignored_sglang_args
from sglang_v4.utils import configure_logging


def flag_error_message(parser: argparse.ArgumentParser, message: str) -> str:
    """``message`` (a ``ServerArgs`` ``ValueError``, which starts with the field it is about)
    prefixed with the flag that sets that field, in argparse's ``argument --flag:`` form.

    ``"tp_size must be a positive integer (got 0)"`` becomes ``"argument --tp-size: tp_size must
    be a positive integer (got 0)"``; a message about no known field is returned as is.
    """
    field = message.split(" ", 1)[0].rstrip(":")
    for action in parser._actions:  # argparse keeps no public list of its actions
        if action.dest == field and action.option_strings:
            return f"argument {action.option_strings[0]}: {message}"
    return message


class OneLineErrorParser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line (``prog: error: message``, exit code 2).

    The usage line argparse prints before an error lists every flag (a few hundred, SGLang's
    included), which buries the one line that says what is wrong; ``--help`` still prints it.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the server, return the process exit code."""
    from sglang_v4.entrypoints.lifecycle import StopRequested, StopSignal

    stop = StopSignal().install()  # a signal from here on stops the start-up cleanly
    parser = OneLineErrorParser(
        prog="python -m sglang_v4.launch_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    log = logging.getLogger("sglang_v4.launch_server")
    try:
        server_args = ServerArgs.from_cli_args(args)
    except ValueError as e:
        # One line naming the flag (argparse's error format and exit code 2, without the long usage).
        parser.exit(2, f"{parser.prog}: error: {flag_error_message(parser, str(e))}\n")
    warn_ignored_sglang_args(server_args, log)
    from sglang_v4.entrypoints.http_server import launch_server

    if server_args.node_rank > 0 or server_args.dp_size > 1:
        stop.uninstall()  # these launchers stop on the default signal handling
        if stop.signum is not None:
            return 0
    try:
        if server_args.node_rank > 0:
            from sglang_v4.entrypoints.tp_launch import serve_worker_node

            return serve_worker_node(server_args)
        if server_args.dp_size > 1:
            from sglang_v4.entrypoints.data_parallel import launch_data_parallel

            return launch_data_parallel(server_args)
        return launch_server(server_args, stop)
    except StopRequested as e:
        log.info("%s", e)
        return 0
    except (RuntimeError, ValueError) as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
