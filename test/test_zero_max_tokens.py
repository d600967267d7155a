"""A request of no output token on every route: ``max_new_tokens`` 0 (``/generate``,
``Engine.generate``), ``max_tokens`` 0 (``/v1/completions``, ``/v1/chat/completions``,
``/v1/messages``), ``max_completion_tokens`` 0, ``max_output_tokens`` 0 (``/v1/responses``).

Oracles:

* SGLang's documented behaviour: ``max_new_tokens`` 0 prefills the prompt and ends at once, empty
  text, ``finish_reason`` ``{"type": "length", "length": 0}``; with ``return_logprob`` and
  ``logprob_start_len`` 0 the answer carries the prompt's logprobs (its prompt-scoring idiom).
* vLLM's prompt-logprob idiom on ``/v1/completions``: ``echo`` + ``logprobs`` + ``max_tokens`` 0 gives
  the prompt's text and its tokens' logprobs, the first one ``null``.
* OpenAI's API: ``finish_reason`` ``length`` and ``usage.completion_tokens`` 0 for a completion cut at
  its limit; the Responses route refuses ``max_output_tokens`` below its floor (400 naming
  the field).
* Anthropic's API (the ``anthropic`` client's ``MessageCreateParams.max_tokens`` docs): ``0``
  populates the prompt cache without generating: no content, ``stop_reason`` ``max_tokens``.
* The model's tokenizer (``transformers.AutoTokenizer``) for prompt ids and usage counts, and
  HF transformers' forward pass on the same checkpoint (float32) for the prompt logprobs' values.
* Nothing leaks: after the requests and a cache flush the server holds no page and no request slot.

Fixtures: ``embedded_model_server`` (a CPU ``launch_server`` on the embedded default model, real
scheduler), a module-scoped in-process ``Engine`` on the same model, and the fake tokenizer manager
of the OpenAI route tests for the routes' own handling of an output of no token.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
import requests

pytest.importorskip("sglang_v4.managers.scheduler")

pytestmark = pytest.mark.timeout(600)

PROMPT = "The capital of France is"
MSGS = [{"role": "user", "content": "Say hi"}]
LENGTH0 = {"type": "length", "length": 0}


def _post(url: str, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(url + path, json=body, timeout=120)


def _sse(resp: requests.Response) -> list[Any]:
    """The ``data:`` payloads of an SSE body: JSON objects, then the string ``"[DONE]"``."""
    out: list[Any] = []
    for line in resp.text.split("\n"):
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def _assert_server_idle(url: str) -> None:
    """Within 30 s of a cache flush: no used KV page of any pool and no request slot held."""
    deadline = time.time() + 30
    while True:
        flushed = requests.post(url + "/flush_cache", timeout=30).status_code == 200
        pool = requests.get(url + "/get_server_info", timeout=30).json()["kv_pool"]
        used = {k: v["used"] for k, v in pool.items() if isinstance(v, dict) and "used" in v}
        if flushed and not any(used.values()):
            return
        assert time.time() < deadline, pool
        time.sleep(0.2)


@pytest.fixture(scope="module")
def url(embedded_model_server) -> str:  # noqa: ANN001 - a server_fixture.ServerHandle
    return embedded_model_server.url


@pytest.fixture(scope="module")
def model_name(url: str) -> str:
    return requests.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def hf_prompt_logprobs(hf_default_model, mtok) -> list[float]:  # noqa: ANN001
    """log p(prompt[i] | prompt[:i]) for i >= 1 of ``PROMPT`` (float32 forward of the checkpoint,
    the session's ``hf_default_model``)."""
    import torch

    ids = mtok.encode(PROMPT, add_special_tokens=False)
    model = hf_default_model
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    return [lp[i - 1, ids[i]].item() for i in range(1, len(ids))]


# ----------------------------------------------------------------------------- native /generate


def test_generate_zero_tokens_plain_and_n(url: str, mtok) -> None:  # noqa: ANN001
    ids = mtok.encode(PROMPT, add_special_tokens=False)
    r = _post(url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 0}})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["text"] == "" and out["output_ids"] == []
    meta = out["meta_info"]
    assert meta["finish_reason"] == LENGTH0
    assert meta["completion_tokens"] == 0 and meta["prompt_tokens"] == len(ids)

    r = _post(url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": 0, "n": 3}})
    assert r.status_code == 200, r.text
    outs = r.json()
    assert len(outs) == 3
    for o in outs:
        assert o["text"] == "" and o["output_ids"] == []
        assert o["meta_info"]["finish_reason"] == LENGTH0 and o["meta_info"]["completion_tokens"] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_generate_zero_tokens_prompt_logprobs(
    url: str,
    mtok,  # noqa: ANN001
    hf_prompt_logprobs: list[float],
    stream: bool,
) -> None:
    ids = mtok.encode(PROMPT, add_special_tokens=False)
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "stream": stream,
    }
    r = _post(url, "/generate", body)
    assert r.status_code == 200, r.text
    if stream:
        events = _sse(r)
        assert events[-1] == "[DONE]" and len(events) >= 2
        out = events[-2]
    else:
        out = r.json()
    assert out["text"] == "" and out["output_ids"] == []
    meta = out["meta_info"]
    assert meta["finish_reason"] == LENGTH0 and meta["completion_tokens"] == 0
    assert meta["output_token_logprobs"] == []
    got = meta["input_token_logprobs"]
    assert [e[1] for e in got] == ids
    assert got[0][0] is None
    assert [e[0] for e in got[1:]] == pytest.approx(hf_prompt_logprobs, abs=2e-3)


def test_generate_zero_tokens_streamed_n_and_mixed_batch(url: str, mtok) -> None:  # noqa: ANN001
    body = {"text": PROMPT, "sampling_params": {"max_new_tokens": 0, "n": 2}, "stream": True}
    r = _post(url, "/generate", body)
    assert r.status_code == 200, r.text
    events = _sse(r)
    assert events[-1] == "[DONE]"
    finals = {e["index"]: e for e in events[:-1] if e["meta_info"]["finish_reason"] is not None}
    assert set(finals) == {0, 1}
    for e in finals.values():
        assert e["text"] == "" and e["meta_info"]["finish_reason"] == LENGTH0

    # a batch mixing a request of no token with a normal one: each keeps its own limit
    body = {
        "text": [PROMPT, "Hello world", PROMPT],
        "sampling_params": [
            {"max_new_tokens": 0},
            {"max_new_tokens": 3, "ignore_eos": True, "temperature": 0},
            {"max_new_tokens": 0},
        ],
    }
    r = _post(url, "/generate", body)
    assert r.status_code == 200, r.text
    a, b, c = r.json()
    for zero in (a, c):
        assert zero["output_ids"] == [] and zero["meta_info"]["finish_reason"] == LENGTH0
    assert len(b["output_ids"]) == 3 and b["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert b["meta_info"]["prompt_tokens"] == len(mtok.encode("Hello world", add_special_tokens=False))
    # the normal request gives what it gives alone (greedy)
    alone = _post(url, "/generate", {"text": "Hello world", "sampling_params": body["sampling_params"][1]})
    assert alone.json()["output_ids"] == b["output_ids"]
    _assert_server_idle(url)


def test_generate_negative_is_400(url: str) -> None:
    r = _post(url, "/generate", {"text": PROMPT, "sampling_params": {"max_new_tokens": -1}})
    assert r.status_code == 400 and "max_new_tokens" in r.text


# ----------------------------------------------------------------------------- /v1/completions


@pytest.mark.parametrize("stream", [False, True])
def test_completions_echo_logprobs_zero_tokens(
    url: str,
    model_name: str,
    mtok,  # noqa: ANN001
    hf_prompt_logprobs: list[float],
    stream: bool,
) -> None:
    """vLLM's prompt-logprob idiom: echo + logprobs + max_tokens 0."""
    ids = mtok.encode(PROMPT, add_special_tokens=False)
    body: dict[str, Any] = {
        "model": model_name,
        "prompt": PROMPT,
        "max_tokens": 0,
        "echo": True,
        "logprobs": 1,
    }
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    r = _post(url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    if stream:
        events = _sse(r)
        assert events[-1] == "[DONE]"
        chunks = [e for e in events[:-1] if e["choices"]]
        text = "".join(c["choices"][0]["text"] for c in chunks)
        lp: dict[str, list[Any]] = {"tokens": [], "token_logprobs": []}
        for c in chunks:
            part = c["choices"][0]["logprobs"] or {}
            lp["tokens"] += part.get("tokens", [])
            lp["token_logprobs"] += part.get("token_logprobs", [])
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]]
        usage = events[-2]["usage"]
    else:
        choice = r.json()["choices"][0]
        text, lp, finish, usage = (
            choice["text"],
            choice["logprobs"],
            [choice["finish_reason"]],
            r.json()["usage"],
        )
    assert text == PROMPT
    assert finish == ["length"]
    assert lp["tokens"] == [mtok.decode([t]) for t in ids]
    assert lp["token_logprobs"][0] is None
    assert lp["token_logprobs"][1:] == pytest.approx(hf_prompt_logprobs, abs=2e-3)
    assert usage["completion_tokens"] == 0 and usage["prompt_tokens"] == len(ids)
    assert usage["total_tokens"] == len(ids)


def test_completions_zero_tokens_n_and_batch(url: str, model_name: str, mtok) -> None:  # noqa: ANN001
    prompts = [PROMPT, "Hello world"]
    body = {"model": model_name, "prompt": prompts, "max_tokens": 0, "n": 2}
    r = _post(url, "/v1/completions", body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert [c["index"] for c in out["choices"]] == [0, 1, 2, 3]
    assert all(c["text"] == "" and c["finish_reason"] == "length" for c in out["choices"])
    assert out["usage"]["completion_tokens"] == 0
    assert out["usage"]["prompt_tokens"] == sum(
        len(mtok.encode(p, add_special_tokens=False)) for p in prompts
    )
    r = _post(url, "/v1/completions", {"model": model_name, "prompt": PROMPT, "max_tokens": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    _assert_server_idle(url)


# ----------------------------------------------------------------------------- /v1/chat/completions


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_chat_zero_tokens(url: str, model_name: str, field: str) -> None:
    # the prompt's length as the route counts it for an ordinary request of one token
    one = _post(url, "/v1/chat/completions", {"model": model_name, "messages": MSGS, field: 1}).json()
    n_prompt = one["usage"]["prompt_tokens"]
    assert one["usage"]["completion_tokens"] == 1

    body = {"model": model_name, "messages": MSGS, field: 0, "logprobs": True, "top_logprobs": 2}
    r = _post(url, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    out = r.json()
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["role"] == "assistant" and not choice["message"]["content"]
    assert not choice["message"].get("tool_calls")
    assert choice["logprobs"] in (None, {"content": []}) or choice["logprobs"]["content"] == []
    assert out["usage"] == {
        **out["usage"],
        "completion_tokens": 0,
        "prompt_tokens": n_prompt,
        "total_tokens": n_prompt,
    }

    body = {"model": model_name, "messages": MSGS, field: 0, "n": 2, "stream": True}
    body["stream_options"] = {"include_usage": True}
    r = _post(url, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    events = _sse(r)
    assert events[-1] == "[DONE]"
    finish = {c["index"]: c["finish_reason"] for e in events[:-1] for c in e["choices"] if c["finish_reason"]}
    assert finish == {0: "length", 1: "length"}
    content = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in e["choices"])
    assert content == ""
    assert events[-2]["usage"]["completion_tokens"] == 0 and events[-2]["usage"]["prompt_tokens"] == n_prompt

    r = _post(url, "/v1/chat/completions", {"model": model_name, "messages": MSGS, field: -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == field


def test_chat_zero_tokens_with_tools_and_schema(url: str, model_name: str) -> None:
    """Tool parsing and a JSON schema's grammar over an empty output: no call, no crash."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    for extra in (
        {"tools": [tool], "tool_choice": "required"},
        {"tools": [tool]},
        {"response_format": schema},
    ):
        for stream in (False, True):
            body = {"model": model_name, "messages": MSGS, "max_tokens": 0, "stream": stream, **extra}
            r = _post(url, "/v1/chat/completions", body)
            assert r.status_code == 200, (extra, r.text)
            if stream:
                events = _sse(r)
                assert events[-1] == "[DONE]"
                finish = [c["finish_reason"] for e in events[:-1] for c in e["choices"] if c["finish_reason"]]
                calls = [c["delta"].get("tool_calls") for e in events[:-1] for c in e["choices"]]
                assert finish == ["length"] and not any(calls), (extra, events)
            else:
                choice = r.json()["choices"][0]
                assert choice["finish_reason"] == "length" and not choice["message"].get("tool_calls"), extra
    _assert_server_idle(url)


# ----------------------------------------------------------------------------- /v1/responses


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("value", [0, -1])
def test_responses_below_floor_is_400(url: str, model_name: str, value: int, stream: bool) -> None:
    body = {"model": model_name, "input": "Say hi", "max_output_tokens": value, "stream": stream}
    r = _post(url, "/v1/responses", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "max_output_tokens" and "max_output_tokens" in err["message"]


def test_responses_one_token_is_incomplete(url: str, model_name: str) -> None:
    r = _post(url, "/v1/responses", {"model": model_name, "input": "Say hi", "max_output_tokens": 1})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["usage"]["output_tokens"] == 1


# ----------------------------------------------------------------------------- /v1/messages


@pytest.mark.parametrize("stream", [False, True])
def test_messages_zero_tokens_prefills_only(url: str, model_name: str, stream: bool) -> None:
    """Anthropic: ``max_tokens`` 0 populates the prompt cache without generating a response."""
    one = _post(url, "/v1/messages", {"model": model_name, "messages": MSGS, "max_tokens": 1}).json()
    n_prompt = one["usage"]["input_tokens"]
    body = {"model": model_name, "messages": MSGS, "max_tokens": 0, "stream": stream}
    r = _post(url, "/v1/messages", body)
    assert r.status_code == 200, r.text
    if stream:
        events = {}
        for block in r.text.split("\n\n"):
            lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
            if "event" in lines:
                events.setdefault(lines["event"], []).append(json.loads(lines["data"]))
        assert "content_block_start" not in events and "content_block_delta" not in events
        (delta,) = events["message_delta"]
        assert delta["delta"]["stop_reason"] == "max_tokens" and delta["usage"]["output_tokens"] == 0
        assert len(events["message_stop"]) == 1
    else:
        out = r.json()
        assert out["content"] == [] and out["stop_reason"] == "max_tokens"
        assert out["usage"]["output_tokens"] == 0 and out["usage"]["input_tokens"] == n_prompt
    r = _post(url, "/v1/messages", {"model": model_name, "messages": MSGS, "max_tokens": -1})
    assert r.status_code == 400 and "max_tokens" in r.text
    _assert_server_idle(url)


# ----------------------------------------------------------------------------- Engine.generate


@pytest.fixture(scope="module")
def engine():  # noqa: ANN201 - lazy import
    from sglang_v4 import Engine

    old = os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    try:
        eng = Engine()  # the embedded default model, real scheduler
    finally:
        if old is not None:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old
    with eng:
        yield eng


def test_engine_generate_zero_tokens(engine, mtok, hf_prompt_logprobs: list[float]) -> None:  # noqa: ANN001
    ids = mtok.encode(PROMPT, add_special_tokens=False)
    out = engine.generate(
        prompt=PROMPT, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0
    )
    assert out["text"] == "" and out["output_ids"] == []
    assert out["meta_info"]["finish_reason"] == LENGTH0 and out["meta_info"]["completion_tokens"] == 0
    assert [e[1] for e in out["meta_info"]["input_token_logprobs"]] == ids
    assert [e[0] for e in out["meta_info"]["input_token_logprobs"][1:]] == pytest.approx(
        hf_prompt_logprobs, abs=2e-3
    )

    chunks = list(engine.generate(prompt=PROMPT, sampling_params={"max_new_tokens": 0}, stream=True))
    assert chunks and chunks[-1]["text"] == "" and chunks[-1]["meta_info"]["finish_reason"] == LENGTH0

    greedy = {"max_new_tokens": 2, "temperature": 0, "ignore_eos": True}
    outs = engine.generate(prompt=[PROMPT, "Hello world"], sampling_params=[{"max_new_tokens": 0}, greedy])
    assert outs[0]["output_ids"] == [] and outs[0]["meta_info"]["finish_reason"] == LENGTH0
    assert (
        outs[1]["output_ids"] == engine.generate(prompt="Hello world", sampling_params=greedy)["output_ids"]
    )
    assert len(outs[1]["output_ids"]) == 2

    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate(prompt=PROMPT, sampling_params={"max_new_tokens": -1})
    engine.flush_cache()
    pool = engine.get_server_info()["kv_pool"]
    assert not any(v["used"] for v in pool.values() if isinstance(v, dict) and "used" in v), pool
    assert not engine.tokenizer_manager.rid_to_state


# ----------------------------------------------------------------------------- routes over the fake manager


def test_fake_manager_routes_zero_tokens(mtok) -> None:  # noqa: ANN001
    """The OpenAI routes over the route tests' fake manager: an output of no token (one final
    output, empty text) is a well-formed empty answer on chat and completions, streamed or not."""
    from openai_fake_tm import FakeTM, app_client

    client = app_client(FakeTM(mtok))
    for path, body in (
        ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 0, "logprobs": True}),
        ("/v1/completions", {"prompt": PROMPT, "max_tokens": 0, "logprobs": 1}),
    ):
        r = client.post(path, json={"model": "dsv4-test", **body})
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "length"
        assert r.json()["usage"]["completion_tokens"] == 0
        r = client.post(path, json={"model": "dsv4-test", "stream": True, **body})
        assert r.status_code == 200, r.text
        finish = [c["finish_reason"] for e in _sse(r)[:-1] for c in e["choices"] if c["finish_reason"]]
        assert finish == ["length"]
