"""A twentieth set of public bug reports, replayed against the server's launch arguments and the
model-directory files they read: ``--context-length`` against the model's own length (and a
``max_position_embeddings`` given by ``--json-model-override-args``), several
``--served-model-name`` names, ``--api-key`` on SageMaker's ``/invocations`` and on every method
of ``/v1/models``, ``generation_config.json`` sampling defaults (applied where the file sets them,
never synthesized where it does not, always below the request's own values), a ``--chat-template``
Jinja file, and SGLang's context-overflow sentence. Each test names its report. All passed as-is
and are kept as regression tests.

Everything runs in-process: ``ServerArgs``, the launcher's context-length check,
``ModelConfig``, the OpenAI router over the fake tokenizer manager of ``openai_fake_tm``, and
``create_app``'s middleware under FastAPI's ``TestClient``. Oracles: transformers' ``AutoConfig``
and ``GenerationConfig`` reading the same files, the ``openai`` client's own parser, the files'
own text, and SGLang's published message and environment-variable names.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai_fake_tm import FakeTM, app_client, oai_client
from server_fixture import make_fake_model_dir
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.chat_template import resolve_chat_template
from sglang_v4.entrypoints.launcher import check_context_length
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.managers.control_struct import context_length_message
from sglang_v4.server_args import ServerArgs
from transformers import AutoConfig, GenerationConfig

pytestmark = pytest.mark.timeout(120)

CONFIG = Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json"
MSGS = [{"role": "user", "content": "hi"}]
#: SGLang's environment variable that lets ``--context-length`` exceed the model's
#: (``sglang/srt/configs/model_config.py``).
ALLOW_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def _model_dir(tmp_path: Path, name: str = "model", **edits: Any) -> Path:
    """A model directory with the tiny published config (``edits`` applied to it)."""
    d = tmp_path / name
    d.mkdir()
    cfg = json.loads(CONFIG.read_text())
    cfg.update(edits)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# --------------------------------------------------------------------------- context length


def test_context_length_above_the_models_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#1778 (a ``--context-length`` above the length the model config derives
    gave NaNs while decoding; SGLang now refuses it unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN``
    is set). Oracle: transformers' ``AutoConfig`` reads the model's length from the same file."""
    d = _model_dir(tmp_path)
    model_len = AutoConfig.from_pretrained(d).max_position_embeddings
    mc = ModelConfig.from_pretrained(str(d))
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    check_context_length(model_len, mc)  # the model's own length and below need nothing
    check_context_length(model_len // 2, mc)
    with pytest.raises(ValueError, match=r"^context_length") as e:
        check_context_length(model_len + 1, mc)
    assert str(model_len) in str(e.value) and ALLOW_ENV in str(e.value)
    monkeypatch.setenv(ALLOW_ENV, "1")
    check_context_length(model_len + 1, mc)  # allowed (and logged) with SGLang's variable


def test_overridden_max_position_embeddings_is_the_context_length(tmp_path: Path) -> None:
    """QwenLM/Qwen3#1321 (the config's length was raised for a longer context, yet requests were
    still refused at the old length): the length the server checks against is the config's
    ``max_position_embeddings`` after ``--json-model-override-args``. Oracle: ``AutoConfig`` on a
    copy of the file edited by hand."""
    d = _model_dir(tmp_path)
    base = AutoConfig.from_pretrained(d).max_position_embeddings
    longer = base * 2
    edited = _model_dir(tmp_path, "edited", max_position_embeddings=longer)
    want = AutoConfig.from_pretrained(edited).max_position_embeddings
    mc = ModelConfig.from_pretrained(str(d), {"max_position_embeddings": longer})
    assert mc.context_length == want == longer
    check_context_length(longer, mc)  # no longer refused
    sa = ServerArgs(
        model_path=str(d),
        device="cpu",
        json_model_override_args=json.dumps({"max_position_embeddings": longer}),
    )
    assert ModelConfig.from_pretrained(str(d), sa.model_override_args()).context_length == want


def test_context_overflow_message_keeps_sglangs_sentences() -> None:
    """NVIDIA-NeMo/Switchyard#426 (clients classify SGLang's context overflows by its sentences:
    ``The input (N tokens) is longer than the model's context length (M tokens).`` and
    ``Requested token count exceeds the model's maximum context length of M tokens``). Oracle: the
    sentences as the report quotes them from SGLang's ``tokenizer_manager.py``."""
    msg = context_length_message(8192, 12345, None)
    assert msg.startswith("The input (12345 tokens) is longer than the model's context length (8192 tokens).")
    msg = context_length_message(8192, 8000, 500)
    assert msg.startswith("Requested token count exceeds the model's maximum context length of 8192 tokens")


# --------------------------------------------------------------------------- served model names


def test_several_served_model_names_are_all_listed_and_accepted(tok: Any) -> None:
    """vllm-project/vllm#2894 and vllm-project/vllm#1988 (``--served-model-name long-name default``
    serves the model under each name; ``/v1/models`` lists them all). Oracle: the ``openai``
    client's own parser of ``/v1/models`` and of the error of an unknown name."""
    sa = ServerArgs(device="cpu", served_model_name=["dsv4-long-name", "dsv4-short"])
    app = FastAPI()
    tm = FakeTM(tok)
    app.include_router(create_openai_router(tm, sa))
    client = oai_client(TestClient(app))
    assert [m.id for m in client.models.list()] == ["dsv4-long-name", "dsv4-short"]
    for name in ("dsv4-long-name", "dsv4-short"):
        r = client.chat.completions.create(model=name, messages=MSGS, max_tokens=2)  # type: ignore[arg-type]
        assert r.choices[0].message.content
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="dsv4-other", messages=MSGS, max_tokens=2)  # type: ignore[arg-type]
    assert "dsv4-long-name" in str(e.value)


# --------------------------------------------------------------------------- --api-key


def _secured_app(tmp_path: Path) -> TestClient:
    """``create_app`` with ``--api-key secret`` under ``TestClient`` (no lifespan: the middleware
    answers before any route is reached)."""
    from sglang_v4.entrypoints.http_server import create_app
    from sglang_v4.managers.control_struct import SchedulerReadyInfo

    sa = ServerArgs(model_path=str(make_fake_model_dir(tmp_path)), device="cpu", api_key="secret")
    app, _ = create_app(sa, SimpleNamespace(scheduler_info=SchedulerReadyInfo(status="ready")))  # type: ignore[arg-type]
    return TestClient(app)


def test_invocations_needs_the_api_key(tmp_path: Path) -> None:
    """vllm-project/vllm#58144 (``--api-key`` was bypassed by ``POST /invocations``, SageMaker's
    inference route: unauthenticated generation on a server that requires a key). Expected: 401
    without the key and with a wrong one, as on ``/v1/chat/completions``."""
    client = _secured_app(tmp_path)
    body = {"messages": MSGS, "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "secret"}):
        for path in ("/invocations", "/v1/chat/completions"):
            assert client.post(path, json=body, headers=headers).status_code == 401, (path, headers)


def test_every_method_of_v1_models_needs_the_api_key(tmp_path: Path) -> None:
    """ggml-org/llama.cpp#27027 (the API-key check let POST and DELETE on ``/models`` through
    without a key, because it exempted the path whatever the method). Expected: SGLang exempts only
    ``/health*`` and ``/metrics``; every method on ``/v1/models`` is a 401 without the key."""
    client = _secured_app(tmp_path)
    for method in ("GET", "POST", "DELETE", "PUT"):
        assert client.request(method, "/v1/models").status_code == 401, method
        assert client.request(method, "/v1/models/default").status_code == 401, method


# --------------------------------------------------------------------------- generation_config.json


def _sent(tok: Any, d: Path, body: dict[str, Any]) -> dict[str, Any]:
    """The sampling params the chat route hands the tokenizer manager for ``body``."""
    tm = FakeTM(tok)
    r = app_client(tm, model_path=str(d), sampling_defaults="model").post(
        "/v1/chat/completions", json={"model": "dsv4-test", "messages": MSGS, **body}
    )
    assert r.status_code == 200, r.text
    return dict(tm.received[-1].sampling_params or {})


def test_generation_config_sampling_values_are_chat_defaults(tok: Any, tmp_path: Path) -> None:
    """Blaizzy/mlx-vlm#1331 (``temperature`` / ``top_p`` / ``top_k`` of ``generation_config.json``
    were silently ignored: every request without them decoded with the server's own defaults).
    Oracle: transformers' ``GenerationConfig`` reading the same file."""
    d = _model_dir(tmp_path)
    (d / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "temperature": 1.0, "top_k": 64, "top_p": 0.95})
    )
    gc = GenerationConfig.from_pretrained(d)
    sp = _sent(tok, d, {})
    assert (sp["temperature"], sp["top_p"], sp["top_k"]) == (gc.temperature, gc.top_p, gc.top_k)


def test_generation_config_fields_it_lacks_are_not_synthesized(tok: Any, tmp_path: Path) -> None:
    """NVIDIA/TensorRT-LLM#17213 (review: the defaults transformers synthesizes for fields absent
    from ``generation_config.json`` -- ``top_k`` 50, ``top_p`` 1.0 -- must not become sampling
    defaults; only the values the file spells do) and ollama/ollama#17679 (a server-wide
    ``repeat_penalty`` reached every model whose parameters leave it unset; SGLang and vLLM apply
    none). Oracle: the file's own keys (transformers
    releases differ in what they fill in: ``top_k`` 50 in older ones, ``None`` now)."""
    d = _model_dir(tmp_path)
    (d / "generation_config.json").write_text(json.dumps({"temperature": 0.6}))
    assert GenerationConfig.from_pretrained(d).top_k in (None, 50)  # not the file's: never sent
    sp = _sent(tok, d, {})
    assert sp["temperature"] == 0.6
    assert sp.get("top_k", -1) == -1 and sp.get("top_p", 1.0) == 1.0
    assert "min_p" not in sp or sp["min_p"] == 0.0
    assert "repetition_penalty" not in sp or sp["repetition_penalty"] == 1.0


def test_generation_config_repetition_penalty_is_a_chat_default(tok: Any, tmp_path: Path) -> None:
    """EleutherAI/lm-evaluation-harness#3154 (Qwen2.5-Coder's ``generation_config.json`` sets
    ``repetition_penalty`` 1.1, yet requests that left it unset ran with no penalty). Oracle:
    transformers' ``GenerationConfig`` reading the same file."""
    d = _model_dir(tmp_path)
    (d / "generation_config.json").write_text(
        json.dumps({"repetition_penalty": 1.1, "temperature": 0.7, "top_p": 0.8, "top_k": 20})
    )
    gc = GenerationConfig.from_pretrained(d)
    sp = _sent(tok, d, {})
    assert sp["repetition_penalty"] == gc.repetition_penalty == 1.1
    assert _sent(tok, d, {"repetition_penalty": 1.0})["repetition_penalty"] == 1.0  # the request's wins


def test_request_values_beat_generation_config(tok: Any, tmp_path: Path) -> None:
    """cubist38/mlx-openai-server#288 (the precedence is the request's value, then the model's
    ``generation_config.json``, then the built-in default; a request value equal to the built-in
    default must still win). Oracle: the request body and the file."""
    d = _model_dir(tmp_path)
    (d / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_p": 0.95, "top_k": 20}))
    sp = _sent(tok, d, {"temperature": 1.0, "top_p": 1.0})  # OpenAI's defaults, sent explicitly
    assert (sp["temperature"], sp["top_p"], sp["top_k"]) == (1.0, 1.0, 20)
    sp = _sent(tok, d, {"temperature": 0})
    assert (sp["temperature"], sp["top_p"]) == (0, 0.95)


# --------------------------------------------------------------------------- --chat-template


def test_chat_template_jinja_file_is_read_whole(tmp_path: Path) -> None:
    """sgl-project/sglang#1104 (``--chat-template`` takes a Jinja file path). Expected: the file's
    text is the template, unchanged (newlines and backslashes kept, not decoded as an inline
    template's escapes are). Oracle: the file's own bytes."""
    text = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\\n\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    path = tmp_path / "tmpl.jinja"
    path.write_text(text, encoding="utf-8")
    assert resolve_chat_template(str(path), None) == path.read_text(encoding="utf-8") == text
    with pytest.raises(ValueError, match=r"^chat_template"):
        resolve_chat_template(str(tmp_path / "missing.jinja"), None)
    shutil.rmtree(tmp_path, ignore_errors=True)


# --------------------------------------------------------------------------- tokenizer path


def test_standalone_tokenizer_path_serves_a_model_dir_without_one(tmp_path: Path) -> None:
    """sgl-project/sglang#25565 (``--tokenizer-path`` naming a separate folder that holds the
    tokenizer files failed, though the model folder has none). Expected: the start-up check loads
    the tokenizer from ``--tokenizer-path``; without it, the model folder's missing tokenizer is
    refused naming ``tokenizer_path``. Oracle: transformers' ``AutoTokenizer`` on that folder."""
    from server_fixture import tokenizer_source_dir
    from sglang_v4.entrypoints.launcher import check_model_dir
    from transformers import AutoTokenizer

    model = make_fake_model_dir(tmp_path / "weights", with_tokenizer=False)
    tok_dir = tmp_path / "tokenizer"
    tok_dir.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tokenizer_source_dir()) / f, tok_dir / f)
    got = check_model_dir(str(model), str(tok_dir), load_format="dummy", device="cpu")
    want = AutoTokenizer.from_pretrained(tok_dir)
    text = "DeepSeek-V4 caches compressed KV."
    assert got.encode(text, add_special_tokens=False) == want.encode(text, add_special_tokens=False)
    with pytest.raises(ValueError, match=r"^tokenizer_path"):
        check_model_dir(str(model), None, load_format="dummy", device="cpu")


# --------------------------------------------------------------------------- vLLM flags and names


def _cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``launch_server`` exits with (code 2) for ``argv``."""
    from sglang_v4.launch_server import main

    with pytest.raises(SystemExit) as e:
        main([*argv, "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def _root_log_handlers():  # noqa: ANN202 - main() configures the root logger; give it back
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("_root_log_handlers")
def test_vllm_reasoning_switch_says_what_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    """sgl-project/sglang#4116 (``launch_server.py: error: unrecognized arguments:
    --enable-reasoning``; the answer: that is vLLM's switch, set ``--reasoning-parser`` instead)
    and vllm-project/vllm#41834 (vLLM's ``--reasoning-config`` JSON in DeepSeek-V4 commands).
    Expected: still refused (not SGLang flags), with the flag to use here on the same line."""
    err = _cli_error(["--enable-reasoning"], capsys)
    assert "unrecognized arguments: --enable-reasoning" in err
    assert "vLLM's --enable-reasoning:" in err and "--reasoning-parser" in err
    err = _cli_error(["--reasoning-config", '{"reasoning_parser": "deepseek_v4"}'], capsys)
    assert "vLLM's --reasoning-config: use --reasoning-parser" in err


@pytest.mark.usefixtures("_root_log_handlers")
def test_vllm_ascend_deepseek_v4_command_flags_say_what_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    """vllm-project/vllm-ascend#8878 (the DeepSeek-V4 tutorial's ``vllm serve`` command carries
    ``--async-scheduling``, ``--safetensors-load-strategy prefetch``, ``--enable-chunked-prefill``
    and a ``--seed``): each is refused on one line that says, per flag, what does the same here."""
    argv = [
        "--async-scheduling", "--safetensors-load-strategy", "prefetch", "--enable-chunked-prefill",
        "--seed", "7", "--uvicorn-log-level", "warning",
    ]  # fmt: skip
    err = _cli_error(argv, capsys)
    assert err.count("vLLM's --") == 5, err
    assert "vLLM's --async-scheduling: not needed" in err and "--disable-overlap-schedule" in err
    assert "vLLM's --enable-chunked-prefill: not needed" in err and "--chunked-prefill-size" in err
    assert "vLLM's --seed: use --random-seed" in err
    assert "vLLM's --uvicorn-log-level: use --log-level" in err
    assert "vLLM's --safetensors-load-strategy: no counterpart" in err


@pytest.mark.usefixtures("_root_log_handlers")
@pytest.mark.parametrize("argv", [["--tokenizer", "/models/tok"], ["--tokenizer=/models/tok"]])
def test_vllm_tokenizer_flag_points_to_tokenizer_path(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """vLLM's ``--tokenizer DIR`` (the tokenizer apart from the model, as in
    sgl-project/sglang#25565's setup) is the start of several of this launcher's flags, so argparse
    calls it ambiguous and lists six ``--tokenizer-*`` flags; the line now also says which one
    vLLM's flag means. Oracle: argparse's own "ambiguous option" wording, and the flag parses."""
    err = _cli_error(argv, capsys)
    assert "ambiguous option: --tokenizer" in err
    assert "vLLM's --tokenizer: use --tokenizer-path" in err
    assert (
        ServerArgs.from_cli_args(
            _parser().parse_args(["--tokenizer-path", "/models/tok", "--device", "cpu"])
        ).tokenizer_path
        == "/models/tok"
    )


def _parser():  # noqa: ANN202 - argparse.ArgumentParser
    from sglang_v4.launch_server import OneLineErrorParser

    p = OneLineErrorParser(prog="launch_server")
    ServerArgs.add_cli_args(p)
    return p


@pytest.mark.parametrize(
    ("flag", "value", "field", "want"),
    [
        ("--tool-call-parser", "deepseek_v4", "tool_call_parser", "deepseekv4"),
        ("--tool-call-parser", "deepseekv4", "tool_call_parser", "deepseekv4"),
        ("--reasoning-parser", "deepseek_v4", "reasoning_parser", "deepseek-v4"),
        ("--reasoning-parser", "deepseek-v4", "reasoning_parser", "deepseek-v4"),
    ],
)
def test_vllm_spellings_of_the_deepseek_v4_parsers_are_taken(
    flag: str, value: str, field: str, want: str
) -> None:
    """vllm-project/vllm-ascend#8997 and vllm-project/vllm-ascend#8875 (``--tool-call-parser
    deepseek_v4`` / ``--reasoning-parser deepseek_v4`` from the DeepSeek-V4 recipes failed at start-up
    with "invalid tool call parser"). Expected: vLLM's and SGLang's spellings both select the
    DeepSeek-V4 parsers."""
    sa = ServerArgs.from_cli_args(_parser().parse_args([flag, value, "--device", "cpu"]))
    assert getattr(sa, field) == want


# --------------------------------------------------------------------------- config.json fields


def _hf_runs(cfg: dict[str, Any]) -> bool:
    """Whether transformers' ``DeepseekV4ForCausalLM`` built from ``cfg`` (random weights; cut to
    one sliding-window layer and a 256-token vocabulary to keep it quick) runs a forward over a
    few tokens."""
    import torch
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    keys = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "dtype", "torch_dtype")}
    keys.update(vocab_size=256, num_hidden_layers=1, compress_ratios=[0], num_hash_layers=1)
    torch.manual_seed(0)
    model = DeepseekV4ForCausalLM(DeepseekV4Config(**keys)).eval()
    try:
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3, 4]]))
    except RuntimeError:
        return False
    return True


def test_o_groups_that_do_not_split_the_attention_output_are_refused(tmp_path: Path) -> None:
    """sgl-project/sglang#31801 (DeepSeek-V4's attention output projection must split into whole
    ``o_groups``; a layout that does not failed deep in the model instead of at start-up, and the
    fix validates it up front with a message naming ``o_groups``). Here for the config itself: an
    ``o_groups`` that does not divide ``num_attention_heads x head_dim`` was accepted and failed on
    the first forward. Oracle: transformers' ``DeepseekV4ForCausalLM`` runs the published tiny
    config (8 groups over 4 heads of 512) and fails on the same config with 3 groups."""
    from sglang_v4.entrypoints.launcher import check_model_dir

    base = json.loads(CONFIG.read_text())
    bad = {**base, "o_groups": 3}
    assert _hf_runs(base) and not _hf_runs(bad)
    ModelConfig.from_dict(dict(base))
    with pytest.raises(ValueError, match=r"^o_groups: 3 does not divide"):
        ModelConfig.from_dict(dict(bad))
    d = _model_dir(tmp_path, o_groups=3)
    (d / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(ValueError, match=r"^model_path: .*o_groups: 3"):
        check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True, device="cpu")
