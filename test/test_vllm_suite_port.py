"""vLLM's OpenAI-server tests (``tests/entrypoints/openai/`` of vllm-project/vllm), their
model-independent assertions replayed on the embedded DeepSeek-V4 model's ``more_bugs_server``.

Each test names the vLLM test it comes from. Faults they showed here:

* ``truncation_side`` (``"right"`` keeps the first ``truncate_prompt_tokens`` tokens) was ignored:
  the last ones were always kept.
* ``stream_options.continuous_usage_stats`` without ``include_usage`` sent usage on every chunk;
  vLLM sends usage only when ``include_usage`` asks for it.
* A ``seed`` below ``-2**63`` with 19 digits was decoded by orjson as a float, rounded into range
  and accepted; range errors of ``seed`` now name the bound crossed as pydantic's error type.
* A ``logit_bias`` / ``stop_token_ids`` id past the vocabulary was refused without naming the
  vocabulary size, and only the first of several non-integer ``logit_bias`` keys was named; an
  out-of-vocabulary prompt id was not called "out of vocabulary".
* ``POST /invocations`` and ``/ping`` (SageMaker's routes, which vLLM and SGLang serve) were 404s.
* With ``return_token_ids`` a chat answer had the ids only under SGLang's names (per choice), not
  in vLLM's places (``prompt_token_ids`` at the top, ``token_ids`` per choice).

Not matched on purpose: vLLM's ``test_chat.py::test_chat_streaming`` wants the last token's text in
the chunk with the finish reason; here (as in SGLang and OpenAI) that chunk has an empty delta
(vllm-project/vllm#35705, kept by ``test_public_bugs_more``).

Oracles: list slicing of the ids sent, the model's ``config.json`` (vocabulary size), the signed
64-bit range, the same request on ``/v1/chat/completions`` / ``/v1/completions`` (greedy), and the
vLLM tests' stated expectations.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, post, sse
from server_fixture import ServerHandle

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> ServerHandle:
    """The session's embedded-model server (conftest ``more_bugs_server``)."""
    return more_bugs_server


@pytest.fixture(scope="module")
def vocab_size(default_model_dir: str) -> int:
    """The model's vocabulary size, from its ``config.json``."""
    with open(os.path.join(default_model_dir, "config.json")) as f:
        return int(json.load(f)["vocab_size"])


def _error(r: requests.Response) -> str:
    assert r.status_code == 400, r.text
    return r.json()["error"]["message"]


def test_truncation_side(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/completion/test_completion.py::test_completion_truncation_side_controls_prompt_truncation
    -- ``truncation_side: "right"`` keeps the first N prompt ids, ``"left"`` (and unset) the last N;
    on chat too (its ``prompt_token_ids`` against the untruncated prompt's)."""
    ids = list(range(1000, 1008))
    base = {"model": MODEL, "prompt": ids, "max_tokens": 1, "temperature": 0, "return_token_ids": True}
    for side, want in (("right", ids[:4]), ("left", ids[-4:]), (None, ids[-4:])):
        body = {**base, "truncate_prompt_tokens": 4, **({"truncation_side": side} if side else {})}
        got = post(server, COMPLETIONS, body).json()["choices"][0]["prompt_token_ids"]
        assert got == want, (side, got)
    chat = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 1,
        "temperature": 0,
        "return_prompt_token_ids": True,
    }
    full = post(server, CHAT, chat).json()["choices"][0]["prompt_token_ids"]
    assert len(full) > 6
    for side, want in (("right", full[:6]), ("left", full[-6:])):
        r = post(server, CHAT, {**chat, "truncate_prompt_tokens": 6, "truncation_side": side})
        assert r.json()["choices"][0]["prompt_token_ids"] == want, side
    assert "truncation_side" in _error(post(server, COMPLETIONS, {**base, "truncation_side": "middle"}))


def test_continuous_usage_needs_include_usage(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/completion/test_completion.py::test_completion_stream_options
    -- ``{"include_usage": false, "continuous_usage_stats": true}`` streams no usage at all; with
    both true every chunk has usage (total = prompt + completion) and the last one has no choices."""
    for path, body in (
        (COMPLETIONS, {"prompt": "What is the capital of France?"}),
        (CHAT, {"messages": MESSAGES}),
    ):
        body = {"model": MODEL, "max_tokens": 5, "temperature": 0, "stream": True, **body}
        opts = {"include_usage": False, "continuous_usage_stats": True}
        chunks = sse(server, path, {**body, "stream_options": opts})
        assert chunks and all(c.get("usage") is None for c in chunks), (path, chunks)
        opts = {"include_usage": True, "continuous_usage_stats": True}
        chunks = sse(server, path, {**body, "stream_options": opts})
        for c in chunks:
            u = c["usage"]
            assert u is not None and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], c
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 5


def test_seed_outside_int64_is_a_400_naming_the_bound(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_chat.py::test_long_seed --
    a seed one past either end of the signed 64-bit range is a 400 whose message holds
    ``greater_than_equal`` / ``less_than_equal``; the ends themselves are served. The body is sent
    as raw JSON text, as a client writes it."""
    for seed, bound in ((INT64_MIN - 1, "greater_than_equal"), (INT64_MAX + 1, "less_than_equal")):
        for path, extra in (
            (CHAT, '"messages": [{"role": "system", "content": "x"}]'),
            (COMPLETIONS, '"prompt": "x"'),
        ):
            raw = f'{{{extra}, "model": "{MODEL}", "max_tokens": 1, "temperature": 0, "seed": {seed}}}'
            r = requests.post(
                server.url + path, data=raw, headers={"Content-Type": "application/json"}, timeout=60
            )
            msg = _error(r)
            assert bound in msg and str(seed) in msg and r.json()["error"]["param"] == "seed", msg
    for seed in (INT64_MIN, INT64_MAX):
        body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 1, "seed": seed}
        assert post(server, CHAT, body).status_code == 200, seed


def test_token_id_errors_name_the_vocabulary(server: ServerHandle, vocab_size: int) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_chat_logit_bias_validation.py
    (::test_chat_logit_bias_valid, ::test_chat_logit_bias_invalid,
    ::test_chat_logit_bias_multiple_non_integer_keys),
    vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_chat_stop_token_ids_validation.py
    (all three) and vllm-project/vllm:tests/entrypoints/openai/completion/test_prompt_validation.py::test_out_of_vocab_token_ids
    -- the last id is accepted; one past the vocabulary is a 400 naming the id and the vocabulary
    size; every non-integer ``logit_bias`` key is named; a prompt id past it is "out of vocabulary"."""
    msgs = [{"role": "user", "content": "Testing token ids"}]
    base = {"model": MODEL, "messages": msgs, "max_tokens": 2}
    assert post(server, CHAT, {**base, "logit_bias": {str(vocab_size - 1): 1.0}}).status_code == 200
    assert post(server, CHAT, {**base, "stop_token_ids": [vocab_size - 1]}).status_code == 200
    bad = vocab_size + 1
    for field, value in (("logit_bias", {str(bad): 1.0}), ("stop_token_ids", [bad])):
        r = post(server, CHAT, {**base, field: value})
        msg = _error(r)
        assert str(bad) in msg and str(vocab_size) in msg and r.json()["error"]["param"] == field, msg
    assert post(server, CHAT, {**base, "stop_token_ids": [-1]}).status_code == 400
    msg = _error(post(server, CHAT, {**base, "logit_bias": {"bad1": 50.0, "bad2": 20.0}}))
    assert "bad1" in msg and "bad2" in msg and "logit_bias" in msg, msg
    msg = _error(post(server, COMPLETIONS, {"model": MODEL, "prompt": [999999], "max_tokens": 2}))
    assert "out of vocabulary" in msg, msg


def test_sagemaker_invocations_and_ping(server: ServerHandle) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/chat_completion/test_chat.py::test_invocations --
    ``POST /invocations`` answers a chat body with the choices ``/v1/chat/completions`` gives it
    (greedy), a prompt body as ``/v1/completions``; a body with neither is a JSON 400. ``GET`` and
    ``POST /ping`` are 200 as ``/health`` is."""
    chat: dict[str, Any] = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_completion_tokens": 5,
        "temperature": 0,
    }
    comp: dict[str, Any] = {"model": MODEL, "prompt": "Hello, my name is", "max_tokens": 5, "temperature": 0}
    for path, body in ((CHAT, chat), (COMPLETIONS, comp)):
        want = post(server, path, body).json()
        got = post(server, "/invocations", body)
        assert got.status_code == 200, got.text
        assert got.json()["object"] == want["object"] and got.json()["choices"] == want["choices"]
    assert "messages" in _error(post(server, "/invocations", {"model": MODEL}))
    assert requests.get(server.url + "/ping", timeout=30).status_code == 200
    assert requests.post(server.url + "/ping", timeout=30).status_code == 200


def test_chat_return_token_ids_in_vllm_places(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm:tests/entrypoints/openai/basic/test_return_token_ids.py::test_chat_completion_with_emoji_and_token_ids
    -- with ``return_token_ids`` a chat answer has the prompt's ids at its top level (decoding to
    a text holding the messages) and the generated ids as the choice's ``token_ids`` (as many as
    ``completion_tokens``, SGLang's ``response_token_ids`` too); without it neither key is sent."""
    msgs = [
        {"role": "system", "content": "You like to use emojis in your responses."},
        {"role": "user", "content": "Repeat after me: I love cats 🐱"},
    ]
    body = {"model": MODEL, "messages": msgs, "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    resp = post(server, CHAT, body).json()
    prompt = mtok.decode(resp["prompt_token_ids"])
    assert "You like to use emojis in your responses." in prompt and "I love cats 🐱" in prompt, prompt
    choice = resp["choices"][0]
    assert choice["token_ids"] == choice["response_token_ids"]
    assert len(choice["token_ids"]) == resp["usage"]["completion_tokens"]
    plain = post(server, CHAT, {**body, "return_token_ids": False}).json()
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
