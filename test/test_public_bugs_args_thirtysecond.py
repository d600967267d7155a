"""A thirty-second set of public bug reports, replayed against the server's launch arguments: the
switches of a ``--config`` YAML file under every spelling and action kind (``store_true`` under
its kebab, snake and alias names, and the ``--flag / --no-flag`` pairs), a launch given nothing
but ``--config``, SGLang's boolean environment-variable spellings, a CPU launch without
``--mem-fraction-static``, and a DeepSeek deployment guide's speculative-decoding flags.

Each test names its report. The YAML switches of a ``--flag / --no-flag`` pair failed here
(``false`` / ``true`` were passed as stray words: ``unrecognized arguments: false``); they now
give the pair's own spelling. The others passed as-is and are kept as regression tests.

Everything runs in-process: the ``launch_server`` parser (``ServerArgs.add_cli_args`` plus
``--config`` expansion), ``ServerArgs.from_cli_args`` and the launcher's context-length check.
Oracles: the installed SGLang 0.5.23's own parser, config merger (``ConfigArgumentMerger``) and
environment-variable parser (``EnvBool``) on the same input.
"""

from __future__ import annotations

import argparse
import json
import logging
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from sglang_flags_testutil import _restore_root_log_handlers  # noqa: F401  (autouse fixture)
from sglang_v4.entrypoints.launcher import ALLOW_LONGER_CONTEXT_ENV, check_context_length
from sglang_v4.launch_server import expand_config_file
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import warn_ignored_sglang_args

sgl_server_args = pytest.importorskip("sglang.srt.server_args")
sgl_config_parser = pytest.importorskip("sglang.srt.utils.server_args_config_parser")
sgl_environ = pytest.importorskip("sglang.srt.environ")

pytestmark = pytest.mark.timeout(120)


def _ours() -> argparse.ArgumentParser:
    """The ``launch_server`` flags of this server (without ``--config``, expanded before parsing)."""
    p = argparse.ArgumentParser()
    ServerArgs.add_cli_args(p)
    return p


def _sglangs() -> argparse.ArgumentParser:
    """SGLang's own ``launch_server`` parser."""
    p = argparse.ArgumentParser()
    sgl_server_args.ServerArgs.add_cli_args(p)
    return p


def _parse_ours(argv: list[str]) -> argparse.Namespace:
    """``argv`` (``--config`` expanded) parsed by this server's parser."""
    p = _ours()
    return p.parse_args(expand_config_file(argv, p))


def _parse_sglang(argv: list[str]) -> argparse.Namespace:
    """``argv`` (``--config`` expanded by SGLang's merger) parsed by SGLang's parser."""
    p = _sglangs()
    return p.parse_args(sgl_config_parser.ConfigArgumentMerger(p).merge_config_with_args(argv))


# --------------------------------------------------------------------------- --config switches


def test_config_store_true_switches_under_every_spelling(tmp_path: Path) -> None:
    """sgl-project/sglang#13911 (the ``--config`` merger's ``_add_boolean_arg`` mishandled the
    boolean keys of switches in the YAML file and the launch failed; fixed by
    sgl-project/sglang#14085). Kebab and snake keys, switches on and off. Oracle: SGLang's own
    merger and parser on the kebab file."""
    kebab = (
        "model-path: /models/DeepSeek-V4-Flash\n"
        "enable-metrics: true\n"
        "trust-remote-code: true\n"
        "disable-radix-cache: false\n"  # a switch left off
        "enable-cache-report: false\n"
    )
    cfg = tmp_path / "kebab.yaml"
    cfg.write_text(kebab)
    dests = ("enable_metrics", "trust_remote_code", "disable_radix_cache", "enable_cache_report")
    theirs = _parse_sglang(["--config", str(cfg)])
    expected = {d: getattr(theirs, d) for d in dests}
    assert expected["enable_metrics"] is True and expected["disable_radix_cache"] is False
    # SGLang's merger writes a snake key back as ``--trust_remote_code``, which its parser refuses;
    # here the snake spelling is the same switch as the kebab one.
    snake = tmp_path / "snake.yaml"
    snake.write_text(
        kebab.replace("-", "_").replace("/models/DeepSeek_V4_Flash", "/models/DeepSeek-V4-Flash")
    )
    for f in (cfg, snake):
        ours = _parse_ours(["--config", str(f)])
        assert {d: getattr(ours, d) for d in dests} == expected, f.name


@pytest.mark.parametrize(
    ("yaml_line", "cli"),
    [
        ("dllm-fdfo: false", ["--no-dllm-fdfo"]),
        ("dllm_fdfo: true", ["--dllm-fdfo"]),
        ("no-dllm-fdfo: true", ["--no-dllm-fdfo"]),
        ("no_dllm_fdfo: false", ["--dllm-fdfo"]),
        ("mm-enable-dp-encoder: true", ["--mm-enable-dp-encoder"]),
        ("enable-tf32-matmul: false", ["--no-enable-tf32-matmul"]),
    ],
)
def test_config_switch_of_a_flag_pair_is_its_own_spelling(
    tmp_path: Path, yaml_line: str, cli: list[str]
) -> None:
    """sgl-project/sglang#13911 (a boolean ``--config`` key of a flag that is no ``--flag value``
    flag broke the launch; SGLang refuses the ``--flag / --no-flag`` pairs as unsupported config
    options). Here ``true`` / ``false`` give the pair's own command-line spelling (they were
    passed as stray words: ``unrecognized arguments: false``). Oracle: SGLang's own parser on that
    spelling, which holds the same pairs."""
    cfg = tmp_path / "server.yaml"
    cfg.write_text(yaml_line + "\n")
    dest = yaml_line.split(":")[0].replace("-", "_").removeprefix("no_")
    expected = getattr(_sglangs().parse_args(["--model-path", "m", *cli]), dest)
    assert getattr(_parse_ours(["--config", str(cfg)]), dest) == expected
    # the command line still wins over the file
    if cli:
        flip = (
            ["--" + dest.replace("_", "-")]
            if cli[0].startswith("--no-")
            else ["--no-" + dest.replace("_", "-")]
        )
        assert getattr(_parse_ours(["--config", str(cfg), *flip]), dest) == (not expected)


def test_config_switch_given_a_string_is_refused_naming_the_key(tmp_path: Path) -> None:
    """sgl-project/sglang#13911 (a switch in the YAML file with a value that is no boolean: SGLang
    passes ``--dllm-fdfo yes`` on and fails with an argparse error far from the file). Refused
    here before parsing, naming ``--config`` and the key."""
    cfg = tmp_path / "server.yaml"
    for line in ("dllm-fdfo: 'yes please'", "enable-metrics: 'on'"):
        cfg.write_text(line + "\n")
        with pytest.raises(
            ValueError, match=r"^--config: " + line.split(":")[0] + ": a switch takes true or false"
        ):
            _parse_ours(["--config", str(cfg)])


def test_config_file_alone_is_a_whole_launch(tmp_path: Path) -> None:
    """sgl-project/sglang#21352 (``launch_server --config MyCustom.yaml`` with every flag in the
    file and nothing else on the command line crashed with ``IndexError`` in the config merger).
    Oracle: SGLang's own merger and parser on the same file."""
    cfg = tmp_path / "all.yml"
    cfg.write_text(
        "model-path: /models/DeepSeek-V4-Flash\n"
        "tp-size: 2\n"
        "context-length: 65536\n"
        "served-model-name: deepseek-v4\n"
        "tool-call-parser: deepseekv4\n"
        "reasoning-parser: deepseek-v4\n"
        "kv-cache-dtype: fp8_e4m3\n"
        "max-running-requests: 64\n"
        "enable-metrics: true\n"
    )
    ours, theirs = _parse_ours(["--config", str(cfg)]), _parse_sglang(["--config", str(cfg)])
    same = ("model_path", "tp_size", "context_length", "tool_call_parser", "reasoning_parser")
    same += ("kv_cache_dtype", "max_running_requests", "enable_metrics")
    assert {k: getattr(ours, k) for k in same} == {k: getattr(theirs, k) for k in same}
    assert ours.served_model_name == [theirs.served_model_name]  # several names allowed here
    ours.device = "cpu"
    sa = ServerArgs.from_cli_args(ours)
    assert (sa.tp_size, sa.context_length, sa.kv_cache_dtype) == (2, 65536, "fp8_e4m3")


# --------------------------------------------------------------------------- environment


@pytest.mark.parametrize(
    "value", ["1", "true", "TRUE", "yes", "Y", "0", "false", "False", "no", "n", "", "on"]
)
def test_boolean_env_spellings_match_sglangs(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl-project/sglang#5348 (a boolean ``SGLANG_*`` variable with a value SGLang does not
    recognise was taken silently; SGLang now reads ``true`` / ``1`` / ``yes`` / ``y`` in any case
    as true and every other value as false). Replayed on ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN``:
    a ``--context-length`` above the model's is allowed exactly when SGLang's ``EnvBool`` reads
    the value as true. Oracle: SGLang's own ``EnvBool`` on the same value."""
    monkeypatch.setenv(ALLOW_LONGER_CONTEXT_ENV, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SGLang warns on a value it does not recognise
        sglang_allows = sgl_environ.envs.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN.get()
    mc = SimpleNamespace(context_length=4096, context_length_key="max_position_embeddings")
    if sglang_allows:
        check_context_length(8192, mc)
    else:
        with pytest.raises(ValueError, match=r"^context_length .*" + ALLOW_LONGER_CONTEXT_ENV):
            check_context_length(8192, mc)


# --------------------------------------------------------------------------- defaults


def test_cpu_launch_without_mem_fraction_static(monkeypatch: pytest.MonkeyPatch) -> None:
    """sgl-project/sglang#11103 (on a CPU device, leaving ``--mem-fraction-static`` unset crashed
    the launch: the default was computed from a GPU memory size that is ``None`` there) and
    sgl-project/sglang#29092 (the flag's default is ``None``, resolved at start-up, not a fixed
    0.9). Oracle: SGLang's parser default for the flag."""
    sgl_default = _sglangs().parse_args(["--model-path", "m"]).mem_fraction_static
    ns = _ours().parse_args(["--device", "cpu"])
    assert ns.mem_fraction_static == sgl_default is None
    sa = ServerArgs.from_cli_args(ns)
    assert sa.mem_fraction_static is None or 0 < sa.mem_fraction_static < 1


def test_speculative_draft_tokens_alone_is_accepted_and_named_in_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """gpustack/gpustack#3392 (a launcher passed ``--speculative-num-draft-tokens`` without
    ``--speculative-num-steps`` / ``--speculative-eagle-topk`` and SGLang refused the launch). The
    DeepSeek guide's speculative flags parse as SGLang parses them (speculative decoding is
    lossless; it is not implemented here) and the start-up warning names each one given, with
    its value. Oracle: SGLang's own parser on the same command line."""
    argv = ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"]
    theirs = _sglangs().parse_args(["--model-path", "m", *argv])
    ns = _ours().parse_args([*argv, "--device", "cpu"])
    assert (ns.speculative_algorithm, ns.speculative_num_draft_tokens) == (
        theirs.speculative_algorithm,
        theirs.speculative_num_draft_tokens,
    )
    assert ns.speculative_num_steps is None and ns.speculative_eagle_topk is None
    sa = ServerArgs.from_cli_args(ns)
    with caplog.at_level(logging.WARNING):
        text = warn_ignored_sglang_args(sa)
    assert text is not None
    assert "--speculative-algorithm EAGLE" in text and "--speculative-num-draft-tokens 4" in text
    assert "--speculative-num-steps" not in text and "--speculative-eagle-topk" not in text


def test_config_values_starting_with_a_dash_stay_their_flags_values(tmp_path: Path) -> None:
    """bw2/ConfigArgParse#166 (a config-file value whose first character is ``-`` was passed on
    as ``--flag -value`` and argparse read it as another flag: ``expected one argument``). Here an
    ``api-key`` such as ``-k3y`` (API keys and passwords may start with a dash),
    ``chunked-prefill-size: -1`` and a value spelled like a flag reach their own flag; a list item
    starting with ``-`` that is no number is refused naming the key. Oracle: the YAML file's own
    values as PyYAML reads them."""
    cfg = tmp_path / "server.yaml"
    cfg.write_text(
        'api-key: "-k3y-with-dashes"\n'
        'ssl-keyfile-password: "--pw"\n'
        "chunked-prefill-size: -1\n"
        "served-model-name: '-dsv4'\n"
        "json-model-override-args: {num_hidden_layers: 2}\n"
    )
    data = yaml.safe_load(cfg.read_text())
    ns = _parse_ours(["--config", str(cfg)])
    assert ns.api_key == data["api-key"] and ns.ssl_keyfile_password == data["ssl-keyfile-password"]
    assert ns.chunked_prefill_size == data["chunked-prefill-size"] == -1
    assert ns.served_model_name == [data["served-model-name"]]
    assert json.loads(ns.json_model_override_args) == data["json-model-override-args"]
    # the command line still wins, also with a dash value
    assert _parse_ours(["--config", str(cfg), "--api-key=-other"]).api_key == "-other"
    cfg.write_text("served-model-name: [dsv4, -flash]\n")
    with pytest.raises(ValueError, match=r"^--config: served-model-name: list item '-flash'"):
        _parse_ours(["--config", str(cfg)])
    cfg.write_text("cuda-graph-bs: [1, 2, 4]\n")  # numbers are no flags
    assert _parse_ours(["--config", str(cfg)]).cuda_graph_bs == [1, 2, 4]
