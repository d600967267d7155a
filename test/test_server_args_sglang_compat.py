"""The flags of SGLang's DeepSeek (V3 / V3.1 / V3.2 / V4) launch commands, as users copy them.

Each flag is accepted with SGLang's meaning, accepted as a logged no-op (a backend sglang-v4 does
not have), or refused with one line naming it and what to use instead; never a traceback. The
oracle for flag names, aliases and parsed values is SGLang's own argparse (``sglang`` installed);
the behaviour of ``--preferred-sampling-params``, ``--allow-auto-truncate`` and
``--served-model-name`` is shown on a server running the model-free ``FakeScheduler`` (context
length :data:`FAKE_CONTEXT_LEN`), with expected token counts worked out by hand from it.
"""

from __future__ import annotations

import argparse
import json
import shlex

import pytest
import requests
from server_fixture import FAKE_CONTEXT_LEN, fake_env, make_fake_model_dir, start_server
from sglang_flags_testutil import parse
from sglang_v4.launch_server import main
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import (
    SGLANG_FLAG_BY_DEST,
    ignored_sglang_args,
    unread_sglang_env,
    warn_unread_sglang_env,
)
from sglang_v4.server_args_compat_flag import IGNORED as KIND_IGNORED
from sglang_v4.server_args_compat_flag import UNSUPPORTED as KIND_UNSUPPORTED

sglang_server_args = pytest.importorskip("sglang.srt.server_args")


@pytest.fixture(autouse=True)
def _restore_root_log_handlers():  # type: ignore[no-untyped-def]
    """``main`` installs a handler on the test's captured stdout; later tests must not log to it."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def sglang_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    sglang_server_args.ServerArgs.add_cli_args(parser)
    return parser


def with_model(cmd: str) -> str:
    """``cmd`` with a ``--model-path`` (SGLang's parser requires one)."""
    return cmd if "--model" in cmd else f"--model-path /models/DeepSeek-V4-Flash {cmd}"


#: Flags of SGLang's DeepSeek deployment docs and cookbook commands that sglang-v4 honours: the
#: value SGLang's argparse stores under each ``dest`` must be the value of our field of that name.
HONOURED = [
    "--tp 8",
    "--tp-size 4",
    "--tensor-parallel-size 2",
    "--ep 8 --tp 8",
    "--model /models/DeepSeek-V4-Flash",
    "--model-path /models/DeepSeek-V4-Flash",
    "--host 0.0.0.0 --port 30000",
    "--mem-fraction-static 0.85",
    "--chunked-prefill-size 8192",
    "--max-running-requests 64",
    "--context-length 163840",
    "--served-model-name deepseek-v4 --api-key sk-123",
    "--enable-metrics --log-requests --log-requests-level 2",
    "--cuda-graph-max-bs-decode 128",
    "--disable-radix-cache",
    "--watchdog-timeout 600 --random-seed 42 --stream-interval 4",
    "--enable-cache-report --decode-log-interval 40",
    "--schedule-policy lpm",
    "--schedule-policy fcfs",
    "--max-prefill-tokens 16384 --max-total-tokens 100000",
    "--allow-auto-truncate",
    "--sampling-defaults openai",
    "--skip-tokenizer-init",
    "--dtype bfloat16",
    "--quantization fp8",
    "--load-format auto",
    "--nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000 --tp 16",
    "--kv-cache-dtype fp8_e4m3",
    "--reasoning-parser deepseek-r1",
    "--reasoning-parser deepseek-v3",
    "--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4",
    "--trust-remote-code --disable-overlap-schedule --disable-cuda-graph",
    """--json-model-override-args '{"num_hidden_layers":2}'""",
]


#: SGLang ``dest`` -> our field, where the names differ (SGLang 0.5.2x split the decode / prefill
#: CUDA-graph flags; the older ``--cuda-graph-max-bs`` spelling is accepted here too).
OUR_FIELD = {"cuda_graph_max_bs_decode": "cuda_graph_max_bs"}


@pytest.mark.parametrize("cmd", HONOURED)
def test_honoured_flags_take_sglangs_value(cmd: str) -> None:
    cmd = with_model(cmd)
    theirs = sglang_parser().parse_args(shlex.split(cmd))
    defaults = sglang_parser().parse_args(shlex.split(with_model("")))
    ours = parse(cmd)
    changed = [d for d, v in vars(theirs).items() if v != getattr(defaults, d)]
    assert changed or "--model" in cmd, cmd
    for dest in changed:
        field = OUR_FIELD.get(dest, dest)
        assert getattr(ours, field) == getattr(theirs, dest), (cmd, dest)
    assert not ignored_sglang_args(ours)


def test_dp_attention_and_model_aliases_as_sglang() -> None:
    # SGLang's --dp with --enable-dp-attention splits attention over the same --tp GPUs: one server.
    sa = parse("--tp 8 --dp 8 --enable-dp-attention")
    assert (sa.tp_size, sa.dp_size) == (8, 1)
    assert (
        sglang_parser().parse_args(shlex.split(with_model("--dp 8"))).dp_size == parse("--dp 8").dp_size == 8
    )


#: Backend selections with no counterpart here: accepted, listed in the start-up warning.
IGNORED = [
    "--attention-backend fa3",
    "--attention-backend flashinfer",
    "--enable-torch-compile --torch-compile-max-bs 8",
    "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4",
    "--speculative-algorithm NEXTN --speculative-draft-model-revision main",
    "--tokenizer-mode slow",
    "--revision main --download-dir /data/hf",
    "--moe-runner-backend deep_gemm --enable-nccl-nvls",
    "--enable-hicache --hicache-ratio 2",
]


@pytest.mark.parametrize("cmd", IGNORED)
def test_backend_flags_are_logged_noops(cmd: str) -> None:
    sglang_parser().parse_args(shlex.split(with_model(cmd)))  # SGLang's own flags
    sa = parse(cmd)
    given = {a for a in shlex.split(cmd) if a.startswith("--")}
    logged = {flag for flag, _, _ in ignored_sglang_args(sa)}
    aliases = {"--enable-hicache": "--enable-hierarchical-cache"}
    assert {aliases.get(f, f) for f in given} == logged


def test_every_sglang_speculative_flag_is_accepted() -> None:
    """Speculative decoding is lossless in SGLang; every one of its knobs starts here (ignored)."""
    ours = argparse.ArgumentParser()
    ServerArgs.add_cli_args(ours)
    spec = {
        opt
        for action in sglang_parser()._actions  # argparse keeps no public list of its actions
        for opt in action.option_strings
        if opt.startswith(("--speculative-", "--no-speculative-"))
    }
    assert len(spec) > 20
    assert spec <= set(ours._option_string_actions), sorted(spec - set(ours._option_string_actions))


@pytest.mark.parametrize(
    ("cmd", "flag", "says"),
    [
        ("--tool-call-parser deepseekv31", "--tool-call-parser", "deepseekv4"),
        ("--tool-call-parser deepseekv32", "--tool-call-parser", "deepseekv4"),
        ("--tool-call-parser deepseekv3", "--tool-call-parser", "deepseekv4"),
        ("--page-size 64", "--page-size", "256"),
        ("--kv-cache-dtype fp8_e5m2", "--kv-cache-dtype", "fp8_e4m3"),
        ("--dtype half", "--dtype", "bfloat16"),
        ("--load-format pt", "--load-format", "safetensors"),
        ("--enable-custom-logit-processor", "--enable-custom-logit-processor", "not supported"),
        ("--enable-return-routed-experts", "--enable-return-routed-experts", "not supported"),
        ("""--preferred-sampling-params '{"temprature":0.6}'""", "--preferred-sampling-params", "temprature"),
        ("--preferred-sampling-params [0.6]", "--preferred-sampling-params", "JSON object"),
        ("""--preferred-sampling-params '{"top_p":2}'""", "--preferred-sampling-params", "top_p"),
    ],
)
def test_refusals_name_the_flag_and_the_way_out(
    cmd: str, flag: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sglang_parser().parse_args(shlex.split(with_model(cmd)))  # SGLang's parser takes it
    with pytest.raises(SystemExit) as e:
        main([*shlex.split(cmd), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and "usage:" not in err, err
    assert f"argument {flag}:" in err and says in err, err


def test_preferred_sampling_params_parse() -> None:
    assert parse("").preferred_sampling_params is None
    text = '{"temperature": 0.6, "top_p": 0.95, "stop": ["</s>"]}'
    assert parse(f"--preferred-sampling-params '{text}'").preferred_sampling_params == json.loads(text)
    # Engine keyword: a dict is taken as is
    sa = ServerArgs(device="cpu", preferred_sampling_params={"top_k": 20})
    assert sa.preferred_sampling_params == {"top_k": 20}
    with pytest.raises(ValueError, match=r"^preferred_sampling_params: stop needs the tokenizer"):
        ServerArgs(device="cpu", skip_tokenizer_init=True, preferred_sampling_params={"stop": ["x"]})
    with pytest.raises(ValueError, match=r"^preferred_sampling_params: n is not"):
        ServerArgs(device="cpu", preferred_sampling_params={"n": 2})
    # an unknown name: the message offers the names the flag takes, which do not include n
    with pytest.raises(ValueError, match=r"^preferred_sampling_params: unknown .*: temprature\.") as e:
        ServerArgs(device="cpu", preferred_sampling_params={"temprature": 0.6})
    offered = str(e.value).split("Allowed: ", 1)[1].rstrip(".").split(", ")
    assert "temperature" in offered and "top_p" in offered and "n" not in offered


def test_sglang_environment_variables_not_read_are_named() -> None:
    env = {
        "SGL_ENABLE_JIT_DEEPGEMM": "1",
        "SGLANG_ENABLE_SPEC_V2": "1",
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",  # read (--context-length)
        "SGLANG_V4_CPU_THREADS": "2",  # sglang-v4's own
        "PATH": "/usr/bin",
    }
    assert unread_sglang_env(env) == ["SGLANG_ENABLE_SPEC_V2", "SGL_ENABLE_JIT_DEEPGEMM"]
    text = warn_unread_sglang_env(env)
    assert text is not None and "SGL_ENABLE_JIT_DEEPGEMM" in text and "V4_CPU" not in text
    assert warn_unread_sglang_env({"SGLANG_V4_CACHE": "/x", "HOME": "/root"}) is None


# --------------------------------------------------------------------------- one server
PREFERRED = {"max_new_tokens": 5, "stop": ["fox"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("sglang_compat")
    args = [
        "--model-path", str(make_fake_model_dir(root)), "--served-model-name", "dsv4-prod",
        "--preferred-sampling-params", json.dumps(PREFERRED), "--allow-auto-truncate",
        "--attention-backend", "fa3", "--speculative-algorithm", "EAGLE", "--trust-remote-code",
        "--tp", "1", "--tool-call-parser", "auto", "--reasoning-parser", "deepseek-v41",
    ]  # fmt: skip
    h = start_server(args, fake_env({"SGL_ENABLE_JIT_DEEPGEMM": "1"}), root / "server.log")
    yield h
    assert h.stop() == 0


def generate(server, input_ids: list[int], sampling_params: dict) -> requests.Response:  # type: ignore[no-untyped-def]
    return requests.post(
        server.url + "/generate",
        json={"input_ids": input_ids, "sampling_params": sampling_params},
        timeout=60,
    )


def test_served_model_name_and_model_info(server) -> None:  # type: ignore[no-untyped-def]
    models = requests.get(server.url + "/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["dsv4-prod"]
    info = requests.get(server.url + "/get_model_info", timeout=10).json()
    assert info["preferred_sampling_params"] == PREFERRED
    log = server.log()
    assert "--attention-backend fa3: sglang-v4 has one attention implementation" in log
    assert "--speculative-algorithm EAGLE" in log and "Traceback" not in log
    assert "not read by sglang-v4 (behaviour unchanged): SGL_ENABLE_JIT_DEEPGEMM" in log


def test_preferred_sampling_params_fill_what_the_request_leaves_out(server) -> None:  # type: ignore[no-untyped-def]
    ids = [100, 200, 300]
    r = generate(server, ids, {"stop": []})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 5  # the preferred max_new_tokens
    r = generate(server, ids, {"max_new_tokens": 3, "stop": []})
    assert r.json()["meta_info"]["completion_tokens"] == 3  # the request's own value wins
    # the preferred stop string: the fake model writes " The quick brown fox ..." (server_fixture)
    r = generate(server, ids, {"max_new_tokens": 40})
    out = r.json()
    assert out["meta_info"]["finish_reason"]["type"] == "stop", out
    assert out["text"] == " The quick brown "
    # chat requests take them too (stop is not set by the request nor by generation_config.json)
    chat = requests.post(
        server.url + "/v1/chat/completions",
        json={"model": "dsv4-prod", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40},
        timeout=60,
    ).json()
    assert chat["choices"][0]["finish_reason"] == "stop", chat
    assert "fox" not in (chat["choices"][0]["message"]["content"] or "")


def test_allow_auto_truncate_keeps_the_first_tokens(server) -> None:  # type: ignore[no-untyped-def]
    # A prompt of 600 tokens on a 512-token context: SGLang keeps the first context - 1 tokens.
    r = generate(server, list(range(1000, 1600)), {"max_new_tokens": 50, "stop": []})
    assert r.status_code == 200, r.text
    meta = r.json()["meta_info"]
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (FAKE_CONTEXT_LEN - 1, 1)
    # A fitting prompt whose max_new_tokens does not: cut to what the context leaves (512 - 300).
    r = generate(server, list(range(1000, 1300)), {"max_new_tokens": 400, "stop": []})
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == FAKE_CONTEXT_LEN - 300
    # Bad input is still refused (truncation does not hide it)
    r = generate(server, [], {"max_new_tokens": 5})
    assert r.status_code == 400


# --------------------------------------------------------------------------- every SGLang flag
#: Handled by ``launch_server`` before the parser (``test_sglang_flags.test_config_yaml_file``).
_NOT_A_SERVER_ARG = {"--help", "-h", "--config"}

#: A value SGLang's parser takes, by the ``__name__`` of the flag's argparse ``type``, for flags with
#: neither a default nor choices.
_SAMPLE_BY_TYPE = {
    "int": "1",
    "float": "0.5",
    "human_readable_int": "1k",
    "loads": "{}",
    "json_list_type": "[]",
    "parse_cuda_graph_config_arg": "{}",
}


#: SGLang flags without a default or choices whose help names the values they take.
_SAMPLE_BY_OPTION = {"--device": "cuda"}


def _sample_argvs(action: argparse.Action, option: str) -> list[list[str]]:
    """Command lines giving ``option`` as SGLang's parser takes it: alone for a switch (or for
    ``nargs`` ``?`` / ``*``), else with its default, its first choice or a value of its type."""
    if action.nargs == 0:
        return [[option]]
    if option in _SAMPLE_BY_OPTION:
        sample = [_SAMPLE_BY_OPTION[option]]
    elif action.default not in (None, "", []) and not isinstance(action.default, bool):
        values = action.default if isinstance(action.default, list) else [action.default]
        sample = [v if isinstance(v, str) else json.dumps(v) for v in values]
    elif action.choices:
        sample = [str(sorted(action.choices, key=str)[0])]
    else:
        sample = [_SAMPLE_BY_TYPE.get(getattr(action.type, "__name__", ""), "x")]
    argvs = [[option, *sample]]
    if action.nargs in ("?", "*"):
        argvs.append([option])
    return argvs


def test_every_sglang_flag_parses_as_in_sglang(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each option of SGLang 0.5.23's own parser (aliases and ``--no-`` forms included), given a
    value SGLang's parser takes, is accepted by ours; building ``ServerArgs`` then succeeds, or fails
    with a ``ValueError`` naming the flag (refused flags, or values our fields refuse), never for an
    ignored one. SGLang-only flags store what SGLang's parser stores."""
    monkeypatch.chdir(tmp_path)  # path-valued samples ("x") must not touch the checkout
    theirs = sglang_parser()
    ours = argparse.ArgumentParser()
    ServerArgs.add_cli_args(ours)
    ours.exit_on_error = False
    options = [
        (action, opt)
        for action in theirs._actions  # argparse keeps no public list of its actions
        for opt in action.option_strings
        if opt not in _NOT_A_SERVER_ARG
    ]
    assert len(options) > 550
    unknown = sorted(opt for _, opt in options if opt not in ours._option_string_actions)
    assert not unknown, f"{len(unknown)} SGLang flags unknown here: {unknown}"
    problems = []
    for action, opt in options:
        mine = ours._option_string_actions[opt]
        entry = SGLANG_FLAG_BY_DEST.get(mine.dest)
        for argv in _sample_argvs(action, opt):
            their_value = getattr(theirs.parse_args([*argv, "--model-path", "m"]), action.dest)
            try:
                ns = ours.parse_args([*argv, "--device", "cpu"])
            except (argparse.ArgumentError, SystemExit) as e:
                problems.append(f"{argv}: our parser refuses it ({e})")
                continue
            if entry is not None and action.dest == mine.dest and getattr(ns, mine.dest) != their_value:
                problems.append(f"{argv}: stored {getattr(ns, mine.dest)!r}, SGLang {their_value!r}")
            try:
                sa = ServerArgs.from_cli_args(ns)
            except ValueError as e:
                if entry is not None and entry.kind == KIND_IGNORED:
                    problems.append(f"{argv}: ignored flag refused ({e})")
                elif mine.dest not in str(e) and opt not in str(e):
                    problems.append(f"{argv}: error does not name the flag ({e})")
                continue
            if (
                entry is not None
                and entry.kind == KIND_UNSUPPORTED
                and their_value not in (None, False, [], entry.default)
            ):
                problems.append(f"{argv}: unsupported flag accepted")
            if entry is not None and entry.kind != KIND_IGNORED:
                assert opt not in {flag for flag, _, _ in ignored_sglang_args(sa)}
    assert not problems, "\n".join(problems)
