"""SGLang launch commands parse here unchanged (sglang_v4.server_args_compat): accepted flags,
the start-up warning for ignored ones, clear errors for unsupported ones, typos still rejected,
and Engine-keyword parity (ServerArgs only: no server or engine is started)."""

from __future__ import annotations

import argparse
import ast
import shlex
import signal

import pytest
from sglang_flags_testutil import (
    _restore_root_log_handlers,  # noqa: F401 - fixtures
    parse,
)
from sglang_v4.launch_server import main
from sglang_v4.model_executor.cuda_graph_runner import explicit_bs_buckets
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import (
    SGLANG_FLAGS,
    UNSUPPORTED,
    ignored_sglang_args,
    warn_ignored_sglang_args,
)

#: Launch commands in the shape of SGLang's DeepSeek-V4 / V3.2 recipes (flags after ``launch_server``).
SGLANG_COMMANDS = [
    "--model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --attention-backend fa3 --moe-runner-backend "
    "flashinfer_mxfp4 --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --grammar-backend xgrammar --enable-torch-compile --cuda-graph-bs 1 2 4 8 "
    "--mem-fraction-static 0.8 --kv-cache-dtype fp8_e4m3 --tool-call-parser deepseekv4 --reasoning-parser "
    "deepseek-v4 --trust-remote-code",
    "--model deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention --moe-a2a-backend deepep "
    "--deepep-mode auto --cuda-graph-max-bs 64 --max-running-requests 256 --chunked-prefill-size 8192",
    "--model deepseek-ai/DeepSeek-V4-Flash --tp 8 --ep 8 --disable-radix-cache --max-prefill-tokens 16384 "
    "--revision main --download-dir /data --tokenizer-mode auto --enable-two-batch-overlap --page-size 256",
]


@pytest.mark.parametrize("cmd", SGLANG_COMMANDS)
def test_sglang_launch_commands_parse(cmd: str) -> None:
    sa = parse(cmd)
    assert sa.model_path is not None and sa.model_path.startswith("deepseek-ai/")
    assert ignored_sglang_args(sa)


def test_mapped_and_ignored_values() -> None:
    sa = parse(SGLANG_COMMANDS[0])
    assert (sa.tp_size, sa.cuda_graph_bs, sa.grammar_backend, sa.kv_cache_dtype) == (
        4,
        [1, 2, 4, 8],
        "xgrammar",
        "fp8_e4m3",
    )
    flags = [flag for flag, _, _ in ignored_sglang_args(sa)]
    assert set(flags) >= {
        "--attention-backend",
        "--moe-runner-backend",
        "--enable-torch-compile",
        "--speculative-algorithm",
    }
    text = warn_ignored_sglang_args(sa)
    assert text is not None and "--attention-backend fa3: sglang-v4 has one attention implementation" in text
    assert "one token per step" in text
    # DP attention: SGLang's --dp is an attention split of the same --tp GPUs, not 8 replicas.
    sa = parse(SGLANG_COMMANDS[1])
    assert (sa.tp_size, sa.dp_size, sa.cuda_graph_max_bs) == (8, 1, 64)
    assert "dp-size 8 -> 1" in (warn_ignored_sglang_args(sa) or "")
    sa = parse(SGLANG_COMMANDS[2])
    assert (sa.ep_size, sa.disable_radix_cache, sa.max_prefill_tokens) == (8, True, 16384)
    assert parse("--kv-cache-dtype bfloat16").kv_cache_dtype == "bf16"
    assert warn_ignored_sglang_args(parse("--grammar-backend none")) is None


@pytest.mark.parametrize(
    ("cmd", "flag"),
    [
        ("--enable-lora --lora-paths a=/x", "--enable-lora"),
        ("--enable-multimodal", "--enable-multimodal"),
        ("--disaggregation-mode prefill", "--disaggregation-mode"),
        ("--kv-cache-dtype fp8_e5m2", "--kv-cache-dtype"),
        ("--grammar-backend outlines", "--grammar-backend"),
        ("--enable-deterministic-inference", "--enable-deterministic-inference"),
        ("--enable-http2", "--enable-http2"),
        ("--return-output-ids", "--return-output-ids"),
        ("--dllm-algorithm LowConfidence", "--dllm-algorithm"),
        ("--model-checksum", "--model-checksum"),  # nargs="?": given without a value
        ("--lora-strict-loading", "--lora-strict-loading"),
        ("--decoupled-spec-role drafter", "--decoupled-spec-role"),
    ],
)
def test_unsupported_flags_fail_naming_the_flag(
    cmd: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main([*shlex.split(cmd), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "usage:" not in err, err  # one line, no usage dump
    assert f"argument {flag}:" in err and "not supported" in err


def test_disaggregation_null_is_the_default() -> None:
    assert parse("--disaggregation-mode null").disaggregation_mode == "null"
    # SGLang's own defaults of refused flags ask for nothing: accepted
    sa = parse("--decoupled-spec-role null --lora-eviction-policy lru --pp-size 1 --fastapi-root-path ''")
    assert (sa.decoupled_spec_role, sa.pp_size) == ("null", 1)


def test_sglang_0_5_23_recipe_flags_and_negations(capsys: pytest.CaptureFixture[str]) -> None:
    """Flags of SGLang 0.5.23's DeepSeek-V4 commands: ``--no-<flag>`` negations parse as argparse's
    ``BooleanOptionalAction`` (SGLang's: the flag stores True, its negation False), values keep
    SGLang's types, and the start-up warning has one line per flag that asks for something (a
    negation or SGLang's own default asks for nothing)."""
    sa = parse(
        "--attn-dp-size 8 --enable-dsa-fused-indexer --no-enable-tp-lm-head-all-to-all --swa-prefix-tails 4 "
        "--c128-page-size 16 --dsa-paged-mqa-logits-backend deepgemm --nccl-port 5000 --no-enable-tf32-matmul "
        "--weight-loader-prefetch-checkpoints --weight-loader-prefetch-num-threads 8 --retraction-policy length"
    )
    assert (sa.enable_dsa_fused_indexer, sa.enable_tp_lm_head_all_to_all, sa.enable_tf32_matmul) == (
        True,
        False,
        False,
    )
    assert (sa.attn_dp_size, sa.swa_prefix_tails, sa.nccl_port) == (8, 4, 5000)
    text = warn_ignored_sglang_args(sa) or ""
    lines = text.splitlines()[1:]
    assert {line.split(": ", 1)[0].strip() for line in lines} == {
        "--attn-dp-size 8",
        "--nccl-port 5000",
        "--weight-loader-prefetch-checkpoints",
        "--weight-loader-prefetch-num-threads 8",
        "--swa-prefix-tails 4",
        "--dsa-paged-mqa-logits-backend deepgemm",
        "--enable-dsa-fused-indexer",
    }
    assert len(lines) == 7 and all(": " in line for line in lines), text
    for cmd, flag in (
        ("--nccl-port abc", "--nccl-port"),  # SGLang's type=int
        ("--retraction-policy newest", "--retraction-policy"),  # SGLang's choices
        ("--no-enable-dsa-fused-indexer=1", "--no-enable-dsa-fused-indexer"),  # a switch takes no value
    ):
        with pytest.raises(SystemExit) as e:
            main([*shlex.split(cmd), "--device", "cpu"])
        assert e.value.code == 2, cmd
        assert flag in capsys.readouterr().err, cmd
    sa = parse(
        """--cuda-graph-config '{"decode": {"backend": "disabled"}, "prefill": {"backend": "full"}}'"""
    )
    assert sa.disable_cuda_graph is True and warn_ignored_sglang_args(sa) is None
    assert parse("""--cuda-graph-config '{"decode": {"max_bs": 64}}'""").disable_cuda_graph is False


def test_typo_is_still_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--atention-backend", "fa3", "--device", "cpu"])
    assert e.value.code == 2
    assert "unrecognized arguments: --atention-backend" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--atention-backend", "fa3"], ["--enable-lora"], ["--page-size", "64"]])
def test_main_gives_back_the_callers_signal_handlers(argv: list[str]) -> None:
    """``main`` called in-process and ended by a bad flag restores the SIGINT / SIGTERM handlers it
    found (its start-up stop handler only records a signal: left installed, Ctrl+C and SIGTERM
    would no longer stop the calling process)."""

    def mine(signum: int, frame: object) -> None:  # pragma: no cover - never delivered
        raise AssertionError(signum)

    saved = {sig: signal.signal(sig, mine) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--device", "cpu"])
        assert exc.value.code == 2
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_engine_keywords_match_cli() -> None:
    """``Engine(**kwargs)`` builds ``ServerArgs(**kwargs)``: the SGLang keyword names are fields."""
    kw = ServerArgs(
        device="cpu", attention_backend="fa3", enable_torch_compile=True, cuda_graph_bs=[1, 2, 4, 8]
    )
    cli = parse("--attention-backend fa3 --enable-torch-compile --cuda-graph-bs 1 2 4 8")
    assert ignored_sglang_args(kw) == ignored_sglang_args(cli)
    assert kw.cuda_graph_bs == cli.cuda_graph_bs
    with pytest.raises(ValueError, match="enable_lora"):
        ServerArgs(device="cpu", enable_lora=True)
    for f in SGLANG_FLAGS:  # every table entry is a keyword too
        assert hasattr(kw, f.dest)
    assert {f.kind for f in SGLANG_FLAGS if f.dest.startswith("lora")} == {UNSUPPORTED}


def test_cuda_graph_bs_buckets() -> None:
    assert explicit_bs_buckets([8, 1, 4, 2, 4]) == [1, 2, 4, 8]
    with pytest.raises(ValueError, match="cuda_graph_bs"):
        explicit_bs_buckets([0, 2])
    with pytest.raises(ValueError, match="cuda_graph_bs"):
        ServerArgs(device="cpu", cuda_graph_bs=[])


def test_sglang_dtype_and_load_format_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's ``--dtype float`` is float32 and ``--load-format safetensors`` is what ``auto`` reads
    here; fp16 and formats the loader does not read fail with one line naming the flag."""
    assert parse("--dtype float").dtype == "float32"
    assert parse("--load-format safetensors").load_format == "auto"
    for cmd, flag in (
        ("--dtype half", "--dtype"),
        ("--dtype float16", "--dtype"),
        ("--load-format pt", "--load-format"),
    ):
        with pytest.raises(SystemExit) as e:
            main([*shlex.split(cmd), "--device", "cpu"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "usage:" not in err, err
        assert f"argument {flag}:" in err, err
        if flag == "--load-format":
            assert "safetensors" in err, err  # the accepted spellings are all listed


# Values SGLang's own parser takes for these flags. Oracles: SGLang's ``human_readable_int`` (its
# docstring's examples when sglang is not installed), Python's logging level names, SGLang's
# parser-choice lists, and the model's config.json.
_HUMAN_INTS = {"1k": 1000, "25.6k": 25600, "1M": 1_000_000, "1Ki": 1024, "128Ki": 131072, "4096": 4096}


def test_token_counts_take_sglang_suffixes(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        from sglang.srt.utils.common import human_readable_int as sglang_hri
    except ImportError:
        sglang_hri = _HUMAN_INTS.__getitem__
    for text, value in _HUMAN_INTS.items():
        assert sglang_hri(text) == value
        sa = parse(f"--context-length {text} --max-total-tokens {text} --max-prefill-tokens {text}")
        assert (sa.context_length, sa.max_total_tokens, sa.max_prefill_tokens) == (value,) * 3
    for bad in ("1.5Ki", "1K", "12x"):
        with pytest.raises(SystemExit) as e:
            main(["--context-length", bad, "--device", "cpu"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "argument --context-length:" in err, err


def test_log_level_any_case_and_logging_names() -> None:
    import logging

    for text in ("WARNING", "Warning", "warn", "DEBUG", "error", "CRITICAL", "fatal"):
        sa = parse(f"--log-level {text}")
        assert logging.getLevelName(sa.log_level.upper()) == getattr(logging, text.upper()), text
    with pytest.raises(ValueError, match="log_level"):
        ServerArgs(device="cpu", log_level="loud")


def test_auto_parsers_pick_deepseek_v4() -> None:
    """SGLang's ``auto`` picks the parsers of the model's architecture: DeepSeek-V4's here."""
    sa = parse("--reasoning-parser auto --tool-call-parser auto")
    assert (sa.reasoning_parser, sa.tool_call_parser) == ("deepseek-v4", "deepseekv4")
    try:
        import argparse as ap

        from sglang.srt.server_args import ServerArgs as SGLangServerArgs
    except ImportError:
        return
    p = ap.ArgumentParser()
    SGLangServerArgs.add_cli_args(p)
    choices = {a.dest: a.choices for a in p._actions}
    assert "auto" in choices["reasoning_parser"] and "auto" in choices["tool_call_parser"]
    assert {"deepseek-v4", "deepseek-r1", "deepseek-v3"} <= set(choices["reasoning_parser"])


def test_context_length_above_the_models_needs_sglangs_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import os

    from sglang_v4.entrypoints.engine import check_model_dir
    from sglang_v4.tools.default_model import ensure_default_model

    path = str(ensure_default_model())
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        model_len = json.load(f)["max_position_embeddings"]
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    check_model_dir(path, context_length=model_len)  # equal and smaller: fine
    check_model_dir(path, context_length=1024)
    with pytest.raises(ValueError, match="context_length .*SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"):
        check_model_dir(path, context_length=model_len + 1)
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "true")
    check_model_dir(path, context_length=model_len + 1)


_CONFIG_YAML = """\
model-path: /models/DeepSeek-V4-Flash
tp-size: 2
context-length: 32k
trust-remote-code: true
disable-radix-cache: false
enable-metrics: true
schedule-policy: lpm
cuda-graph-bs: [1, 2, 4]
json-model-override-args: {num_hidden_layers: 2}
served-model-name: from-file
"""


def _launch_args(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> ServerArgs:
    """The ServerArgs ``launch_server`` would start a server with (the launch and its port /
    model-directory checks stubbed)."""
    import sglang_v4.entrypoints.http_server as http_server
    import sglang_v4.entrypoints.launcher as launcher

    seen: list[ServerArgs] = []
    monkeypatch.setattr(launcher, "preflight_server", lambda sa: None)
    monkeypatch.setattr(
        http_server, "launch_server", lambda sa, stop, checked=False, tokenizer=None: seen.append(sa) or 0
    )
    assert main(argv) == 0
    return seen[0]


def test_config_yaml_file(tmp_path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """SGLang's ``--config FILE.yaml``: the file's flags, the command line winning over it. Oracle:
    SGLang's own config merger and parser on the same file, where sglang is installed."""
    cfg = tmp_path / "server.yaml"
    cfg.write_text(_CONFIG_YAML)
    argv = ["--config", str(cfg), "--served-model-name", "from-cli", "--device", "cpu"]
    sa = _launch_args(argv, monkeypatch)
    mine = {
        "model_path": sa.model_path,
        "tp_size": sa.tp_size,
        "context_length": sa.context_length,
        "trust_remote_code": sa.trust_remote_code,
        "disable_radix_cache": sa.disable_radix_cache,
        "enable_metrics": sa.enable_metrics,
        "schedule_policy": sa.schedule_policy,
        "served_model_name": sa.served_model_name,
    }
    assert mine == {
        "model_path": "/models/DeepSeek-V4-Flash",
        "tp_size": 2,
        "context_length": 32000,
        "trust_remote_code": True,
        "disable_radix_cache": False,
        "enable_metrics": True,
        "schedule_policy": "lpm",
        "served_model_name": "from-cli",
    }
    assert sa.cuda_graph_bs == [1, 2, 4] and sa.model_override_args() == {"num_hidden_layers": 2}
    assert _launch_args([f"--config={cfg}", "--device", "cpu"], monkeypatch).served_model_name == "from-file"
    try:
        from sglang.srt.server_args import ServerArgs as SGLangServerArgs
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        pass
    else:
        p = argparse.ArgumentParser()
        SGLangServerArgs.add_cli_args(p)
        # (SGLang 0.5.23 splits --cuda-graph-bs into -decode / -prefill: the short name is ambiguous there)
        cfg.write_text(_CONFIG_YAML.replace("cuda-graph-bs:", "cuda-graph-bs-decode:"))
        ns = p.parse_args(ConfigArgumentMerger(p).merge_config_with_args(argv[:-2]))
        assert {k: getattr(ns, k) for k in mine} == mine
    for bad, why in (
        ("server.json", "is not a YAML file"),
        ("missing.yaml", "cannot read"),
    ):
        with pytest.raises(SystemExit) as e:
            main(["--config", str(tmp_path / bad), "--device", "cpu"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "argument --config:" in err and why in err, err
    (tmp_path / "typo.yaml").write_text("atention-backend: fa3\n")
    with pytest.raises(SystemExit) as e:
        main(["--config", str(tmp_path / "typo.yaml"), "--device", "cpu"])
    assert e.value.code == 2 and "unrecognized arguments: --atention-backend" in capsys.readouterr().err


def test_sglang_0_5_2x_spellings(capsys: pytest.CaptureFixture[str]) -> None:
    """Flags of SGLang 0.5.2x's DeepSeek-V4 commands: the decode CUDA-graph switches are honoured
    (SGLang's help: ``--disable-decode-cuda-graph`` is ``--cuda-graph-backend-decode=disabled``),
    kernel selections are listed as ignored, a certificate file that does not exist is refused
    naming the flag."""
    assert parse("--disable-decode-cuda-graph").disable_cuda_graph is True
    assert parse("--log-requests --log-requests-target stdout").log_requests_target == ["stdout"]
    assert parse("--admin-api-key adm").admin_api_key == "adm"  # test_server_auth: the routes
    sa = parse(
        "--stream-response-default-include-usage --weight-version v2 --sampling-defaults openai "
        """--default-chat-template-kwargs '{"thinking": true}' --max-queued-requests 8"""
    )  # test_openai_api, test_engine_api and test_scheduler_limits: what these do
    assert (sa.stream_response_default_include_usage, sa.weight_version, sa.sampling_defaults) == (
        True,
        "v2",
        "openai",
    )
    assert (sa.default_chat_template_kwargs, sa.max_queued_requests) == ({"thinking": True}, 8)
    assert parse("--cuda-graph-backend-decode disabled").disable_cuda_graph is True
    assert parse("--cuda-graph-backend-decode full").disable_cuda_graph is False
    try:
        from sglang.srt.server_args import ServerArgs as SGLangServerArgs
    except ImportError:
        pass
    else:
        p = argparse.ArgumentParser()
        SGLangServerArgs.add_cli_args(p)
        (a,) = [a for a in p._actions if "--cuda-graph-backend-decode" in a.option_strings]
        for value in a.choices:
            parse(f"--cuda-graph-backend-decode {value}")
    sa = parse(
        "--dsv4-attn-backend flashmla --fp8-gemm-backend deep_gemm --enable-p2p-check "
        "--radix-eviction-policy lfu --cuda-graph-max-bs-prefill 8 --enable-tf32-matmul"
    )
    flags = {flag for flag, _, _ in ignored_sglang_args(sa)}
    assert {
        "--dsv4-attn-backend",
        "--fp8-gemm-backend",
        "--enable-p2p-check",
        "--radix-eviction-policy",
    } <= flags
    assert "--enable-tf32-matmul" in (warn_ignored_sglang_args(sa) or "")
    assert warn_ignored_sglang_args(parse("--disable-decode-cuda-graph")) is None  # honoured, not ignored
    for cmd, flag in (
        ("--cuda-graph-backend-decode off", "--cuda-graph-backend-decode"),
        ("--ssl-certfile c.pem --ssl-keyfile k.pem", "--ssl-certfile"),
        ("--log-requests --log-requests-target /var/log/req", "--log-requests-target"),
        (f"--ssl-keyfile {__file__}", "--ssl-certfile"),  # a key without its certificate
    ):
        with pytest.raises(SystemExit) as e:
            main([*shlex.split(cmd), "--device", "cpu"])
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"argument {flag}:" in err, err


def test_bad_dtype_offers_every_value_the_flag_takes(capsys: pytest.CaptureFixture[str]) -> None:
    """``--dtype float99`` once answered "must be one of ['float32', 'bfloat16']", leaving out
    ``auto`` (the default) and ``float``, which ``--help`` lists. The command line now refuses it as
    SGLang's argparse does (its choices, ``half`` / ``float16`` then refused by the value check);
    ``Engine(dtype=...)`` offers each value the field takes, and every value it offers is accepted."""
    with pytest.raises(SystemExit) as e:
        main(["--dtype", "float99", "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "argument --dtype: invalid choice: 'float99'" in err, err
    offered = ast.literal_eval("(" + err.split("(choose from ", 1)[1].split(")", 1)[0] + ",)")
    assert {"auto", "float32", "bfloat16", "float"} <= set(offered), err
    with pytest.raises(ValueError, match="must be one of ") as refused:
        ServerArgs(device="cpu", dtype="float99")
    offered = ast.literal_eval(str(refused.value).split("must be one of ", 1)[1].split(" (got", 1)[0])
    assert {"auto", "float32", "bfloat16", "float"} <= set(offered)
    for value in offered:
        ServerArgs(device="cpu", dtype=value)
