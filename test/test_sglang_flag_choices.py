"""Flags with a list of values: a value SGLang's argparse refuses is refused here the same way
(exit code 2, ``argument --flag: invalid choice``, the choices listed), and every value it accepts
still parses here.

Oracle: the installed SGLang's own parser (``ServerArgs.add_cli_args``), walked action by action,
with the choices its registries hold once imported. The few values taken here beyond SGLang's
(:data:`EXTRAS`) are listed by hand, each with where it comes from.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex

import pytest
from sglang_flags_testutil import _restore_root_log_handlers  # noqa: F401 - autouse fixture
from sglang_v4.launch_server import OneLineErrorParser, flag_error_message, main
from sglang_v4.server_args import ServerArgs

sglang_server_args = pytest.importorskip("sglang.srt.server_args")

#: Values taken here that SGLang 0.5.23's parser refuses: vLLM's spellings from vLLM's DeepSeek-V4
#: recipe (test_published_recipes, test_public_bugs_args_twentieth), ``--quantization none``
#: (dequantize to --dtype; test_config_published_variants) and the older SGLang names of the CP
#: strategies that SGLang's DeepSeek cookbook passes to ``--nsa-prefill-cp-mode`` (test_published_recipes).
EXTRAS: dict[str, set[str]] = {
    "--tokenizer-mode": {"deepseek_v4"},
    "--reasoning-parser": {"deepseek_v4", "deepseekv4", "deepseek_r1"},
    "--tool-call-parser": {"deepseek_v4", "deepseek-v4"},
    "--quantization": {"none"},
    "--cp-strategy": {"in-seq-split", "round-robin-split"},
}


def _sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    sglang_server_args.ServerArgs.add_cli_args(parser)
    return parser


def _our_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="launch_server")
    ServerArgs.add_cli_args(parser)
    return parser


SGLANG = _sglang_parser()
OURS = _our_parser()
_OUR_ACTIONS = {name: a for a in OURS._actions for name in a.option_strings}
#: SGLang's actions with choices that this launcher accepts (by SGLang's first spelling).
CHOICE_ACTIONS = {
    a.option_strings[0]: a
    for a in SGLANG._actions
    if a.choices is not None and a.option_strings and a.option_strings[0] in _OUR_ACTIONS
}


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, int, str]:
    """``(namespace, 0, "")`` or ``(None, exit code, stderr)``."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return parser.parse_args(argv), 0, ""
        except SystemExit as e:
            return None, int(e.code or 0), err.getvalue()


def _bogus(action: argparse.Action) -> str:
    """A value that is none of ``action``'s choices, in the type the flag takes."""
    if all(isinstance(c, int) for c in action.choices):
        return str(max(action.choices) + 1000)
    return "no-such-choice"


def test_sglang_choice_flags_found() -> None:
    # Every flag SGLang limits to a list of values is one this launcher accepts.
    all_choice_flags = {
        a.option_strings[0] for a in SGLANG._actions if a.choices is not None and a.option_strings
    }
    assert all_choice_flags == set(CHOICE_ACTIONS)
    assert {"--dtype", "--kv-cache-dtype", "--attention-backend", "--reasoning-parser"} <= set(CHOICE_ACTIONS)


@pytest.mark.parametrize("flag", sorted(CHOICE_ACTIONS))
def test_value_outside_sglangs_choices_is_refused_as_there(flag: str) -> None:
    theirs = CHOICE_ACTIONS[flag]
    value = _bogus(theirs)
    _, code, _ = _parse(SGLANG, ["--model-path", "m", flag, value])
    assert code == 2, (flag, value)
    _, code, err = _parse(OURS, [flag, value, "--device", "cpu"])
    assert code == 2, (flag, value)
    assert (
        err.count("\n") == 1
        and f"argument {'/'.join(_OUR_ACTIONS[flag].option_strings)}: invalid choice" in err
    )
    listed = err.split("(choose from ", 1)[1]
    for choice in theirs.choices:
        assert repr(choice) in listed, (flag, choice, err)


@pytest.mark.parametrize("flag", sorted(CHOICE_ACTIONS))
def test_every_sglang_choice_parses_here(flag: str) -> None:
    """Each of SGLang's values parses to SGLang's value, then is served, ignored, or refused by the
    value check with one line naming the flag (as before the choices were added)."""
    theirs = CHOICE_ACTIONS[flag]
    ours = _OUR_ACTIONS[flag]
    extras = set(map(str, ours.choices)) - set(map(str, theirs.choices))
    assert extras == EXTRAS.get(flag, set()), flag
    for choice in [*theirs.choices, *sorted(extras)]:
        ns, code, err = _parse(OURS, [flag, str(choice), "--device", "cpu"])
        assert code == 0, (flag, choice, err)
        if choice in theirs.choices and type(theirs) is argparse._StoreAction:  # it stores the value
            their_ns, _, _ = _parse(SGLANG, ["--model-path", "m", flag, str(choice)])
            assert getattr(ns, ours.dest) == getattr(their_ns, theirs.dest), (flag, choice)
        try:
            ServerArgs.from_cli_args(ns)
        except ValueError as e:
            message = flag_error_message(OURS, str(e))
            assert message.startswith(f"argument {ours.option_strings[0]}: ") and "\n" not in message, message


@pytest.mark.parametrize(
    "cmd",
    [
        "--dtype bfloat6",
        "--kv-cache-dtype fp8e4m3",
        "--schedule-policy fifo",
        "--grammar-backend xgramar",
        "--sampling-defaults vllm",
        "--log-requests-level 4",
        "--attention-backend flashmla_sparse",
        "--cuda-graph-backend-decode tc_piecewise",
        "--tokenizer-mode fast",
        "--load-format safetensor",
    ],
)
def test_launcher_refuses_a_typo_in_one_line(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang's parser refuses each of these too (the oracle), before anything starts.
    _, code, _ = _parse(SGLANG, ["--model-path", "m", *shlex.split(cmd)])
    assert code == 2
    # The parser refuses it first (else main would go on to start a server).
    assert _parse(OURS, [*shlex.split(cmd), "--device", "cpu"])[1] == 2
    with pytest.raises(SystemExit) as e:
        main([*shlex.split(cmd), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0, err
    assert f"argument {cmd.split()[0]}" in err and "invalid choice" in err, err
