"""Shared pieces of the SGLang-flag compatibility tests: the launch-flag parser and the fixture that restores the root logger's handlers."""

from __future__ import annotations

import argparse
import shlex

import pytest
from sglang_v4.server_args import ServerArgs


@pytest.fixture(autouse=True)
def _restore_root_log_handlers():  # type: ignore[no-untyped-def]
    """``main`` installs a handler on the test's captured stdout; later tests must not log to it."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def parse(cmd: str) -> ServerArgs:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args([*shlex.split(cmd), "--device", "cpu"]))
