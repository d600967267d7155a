"""``python -m sglang_v4.launch_server [flags]``: start the HTTP server (SGLang's CLI shape).

Flags are those of :class:`sglang_v4.server_args.ServerArgs` (``--model-path``, ``--port``,
``--page-size``, ...). Without ``--model-path`` the embedded default model is served. Exits
non-zero when the backend fails to start or crashes, 0 when stopped by SIGTERM / SIGINT at any
point, start-up included (:mod:`sglang_v4.entrypoints.lifecycle`).

Parallelism (docs/PARALLELISM.md): ``--tp-size N [--ep-size M]`` starts N ranks;
``--nnodes K --node-rank k --dist-init-addr HOST:PORT`` spreads them over K nodes (a node
``k > 0`` runs only its ranks, no HTTP); ``--dp-size D`` starts D servers on ports
``--port + 1 .. --port + D`` behind ``sglang-router``, reached through the gateway on ``--port``
(:mod:`sglang_v4.entrypoints.dp_gateway`).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from typing import TYPE_CHECKING, NoReturn

from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import (
    apply_legacy_sglang_env,
    warn_ignored_sglang_args,
    warn_unread_sglang_env,
)
from sglang_v4.server_args_vllm_hints import vllm_flag_hints
from sglang_v4.utils import configure_logging

if TYPE_CHECKING:
    from sglang_v4.entrypoints.lifecycle import StopSignal


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


def swallowed_model_path(model_path: str | None, served_model_name: list[str] | None) -> str | None:
    """The model directory that ``--served-model-name`` took as a name, or ``None``.

    ``--served-model-name`` takes one or more names (vLLM's form), so ``--served-model-name ASR
    /models/My-Model`` without ``--model-path`` makes ``/models/My-Model`` a second name and
    would serve the embedded default model under both names. A later name that is an existing
    directory, with no ``--model-path`` given, is that mistake: returned so the caller refuses the
    command line. A first name, or any name with ``--model-path`` set, is taken as a name.
    """
    if model_path is not None or not served_model_name:
        return None
    for name in served_model_name[1:]:
        if os.path.isdir(name):
            return name
    return None


class OneLineErrorParser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line (``prog: error: message``, exit code 2).

    The usage line argparse prints before an error lists every flag (a few hundred, SGLang's
    included), which buries the one line that says what is wrong; ``--help`` still prints it.
    """

    def error(self, message: str) -> NoReturn:
        """Exit with code 2 and the one-line message ``prog: error: message (see --help)``; a vLLM
        flag among unrecognized arguments gets what to use here
        (:func:`~sglang_v4.server_args_vllm_hints.vllm_flag_hints`)."""
        self.exit(2, f"{self.prog}: error: {vllm_flag_hints(message)} (see --help)\n")


def expand_config_file(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """SGLang's ``--config FILE.yaml``: the file's flags in front of the other command-line flags, so
    a flag given on the command line wins over the file (argparse keeps the last value).

    The file is a YAML mapping of flag names (``tp-size`` or ``tp_size``, any long spelling of a
    flag) to values: ``true`` sets a switch (``false`` leaves it off, or gives the ``--no-`` spelling
    of a ``--flag / --no-flag`` pair, whose ``no-flag: true`` is the same; another flag gets
    ``true`` / ``false`` as its text), a list gives a flag its
    values (``cuda-graph-bs: [1, 2, 4]``), a mapping is passed as JSON (``json-model-override-args``),
    anything else as its text. A single value is passed as ``--flag=value``, so one starting with
    ``-`` (an API key, ``-1``) is that flag's value, never read as another flag.

    Raises:
        ValueError: naming ``--config``: given twice or without a file, not a ``.yaml`` / ``.yml``
            file, unreadable, not a mapping, a switch given something other than true / false, or a
            list item starting with ``-`` that is no number (argparse would read it as a flag).
    """
    at = [i for i, a in enumerate(argv) if a == "--config" or a.startswith("--config=")]
    if not at:
        return argv
    if len(at) > 1:
        raise ValueError("--config: given more than once (one config file only)")
    i = at[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise ValueError("--config: expected a YAML file after it")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
    else:
        path, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1 :]
    if not path.lower().endswith((".yaml", ".yml")):
        raise ValueError(f"--config: {path!r} is not a YAML file (.yaml / .yml)")
    import json

    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"--config: cannot read {path!r}: {e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"--config: {path!r} must hold a mapping of flag names to values")
    switches: dict[str, tuple[str, str | None]] = {}  # option -> (its true spelling, its false one)
    for action in parser._actions:  # argparse keeps no public list of its actions
        if isinstance(action, argparse._StoreTrueAction):
            switches.update({opt: (opt, None) for opt in action.option_strings})
        elif isinstance(action, argparse.BooleanOptionalAction):
            on = [o for o in action.option_strings if not o.startswith("--no-")]
            off = [o for o in action.option_strings if o.startswith("--no-")]
            switches.update({opt: (opt, off[0] if off else None) for opt in on})
            switches.update({opt: (opt, on[0] if on else None) for opt in off})
    out: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if flag in switches:
            if value not in (True, False, None):
                raise ValueError(f"--config: {key}: a switch takes true or false (got {value!r})")
            spelling = switches[flag][0 if value else 1] if value is not None else None
            if spelling is not None:
                out.append(spelling)
        elif isinstance(value, bool):  # a flag that takes a value: its text, as SGLang passes it
            out.append(f"{flag}={str(value).lower()}")
        elif isinstance(value, list):
            items = [json.dumps(v) if isinstance(v, dict) else str(v) for v in value]
            for item in items:
                if item.startswith("-") and not _NEGATIVE_NUMBER.match(item):
                    raise ValueError(
                        f"--config: {key}: list item {item!r} starts with '-' and would be read as a flag"
                    )
            if items:
                out += [flag, *items]
        elif value is not None:
            # ``--flag=value``: a value starting with '-' (an API key, ``-1``) stays this flag's value
            out.append(f"{flag}={json.dumps(value) if isinstance(value, dict) else value}")
    return out + rest


#: what argparse reads as a negative number rather than a flag (its own pattern), for list items
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, run the server, return the process exit code."""
    from sglang_v4.entrypoints.lifecycle import StopSignal

    stop = StopSignal().install()  # a signal from here on stops the start-up cleanly
    try:
        return _main(argv, stop)
    finally:
        # A caller in the same process (a test, a script calling main) gets its own SIGINT /
        # SIGTERM handlers back, also when a bad flag ends main with SystemExit.
        stop.uninstall()


def _main(argv: list[str] | None, stop: StopSignal) -> int:
    """:func:`main` with the start-up stop handler ``stop`` installed."""
    from sglang_v4.entrypoints.lifecycle import StopRequested

    parser = OneLineErrorParser(
        prog="python -m sglang_v4.launch_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ServerArgs.add_cli_args(parser)
    parser.add_argument(
        "--config",
        type=str,
        default=None,
        help="A YAML file of flags (flag name: value); flags on the command line win over it.",
    )
    try:
        argv = expand_config_file(list(sys.argv[1:] if argv is None else argv), parser)
    except ValueError as e:
        parser.exit(2, f"{parser.prog}: error: argument {e}\n")
    args = parser.parse_args(argv)
    swallowed = swallowed_model_path(args.model_path, args.served_model_name)
    if swallowed is not None:
        parser.exit(
            2,
            f"{parser.prog}: error: argument --served-model-name: {swallowed!r} is a directory, taken "
            f"as a served name, and --model-path is not set; to serve it pass --model-path {swallowed}\n",
        )
    configure_logging(args.log_level)
    log = logging.getLogger("sglang_v4.launch_server")
    try:
        server_args = ServerArgs.from_cli_args(args)
    except ValueError as e:
        # One line naming the flag (argparse's error format and exit code 2, without the long usage).
        parser.exit(2, f"{parser.prog}: error: {flag_error_message(parser, str(e))}\n")
    warn_ignored_sglang_args(server_args, log)
    apply_legacy_sglang_env(log=log)
    warn_unread_sglang_env(log=log)
    single = server_args.node_rank == 0 and server_args.dp_size == 1
    tokenizer = None  # the one the checks load, handed to the tokenizer manager
    if single:
        # The port and model-directory checks before the HTTP stack's imports (torch, FastAPI):
        # a taken port or a bad --model-path is one line within a fraction of a second.
        from sglang_v4.entrypoints import launcher

        try:
            tokenizer = launcher.preflight_server(server_args)
        except (RuntimeError, ValueError) as e:
            log.error("%s", e)
            return 1
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
        return launch_server(server_args, stop, checked=single, tokenizer=tokenizer)
    except StopRequested as e:
        log.info("%s", e)
        return 0
    except (RuntimeError, ValueError) as e:
        log.error("%s", e)
        return 1


if __name__ == "__main__":
    # Everything is stopped once main returns: skip the interpreter's module teardown (most of an
    # idle server's stop time with torch and transformers loaded) and the joins of worker threads
    # still busy for requests the drain failed (a long prompt being tokenized).
    from sglang_v4.utils import exit_without_teardown

    exit_without_teardown(main())
