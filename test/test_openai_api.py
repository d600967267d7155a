"""OpenAI routes through FastAPI's TestClient with a fake tokenizer manager, checked with raw JSON
and with the real ``openai`` client package (its own response parsers)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.managers.io_struct import GenerateReqInput
from transformers import PreTrainedTokenizerFast

B, E, U, A = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"


class FakeTM:
    """Yields SGLang-shaped outputs like the real TokenizerManager (cumulative text when streaming,
    a list for non-streamed batches, ``index`` on streamed batch items, prompt-major n order)."""

    def __init__(self, tokenizer: Any, reply: str = "Hello there, general Kenobi.") -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.reply = reply
        self.received: list[GenerateReqInput] = []

    def _output(self, sub: GenerateReqInput, k: int) -> list[dict[str, Any]]:
        sp = sub.sampling_params or {}
        ids = self.tokenizer.encode(self.reply + (f" #{k}" if k else ""), add_special_tokens=False)
        limit = sp.get("max_new_tokens")
        finish = {"type": "stop", "matched": 1}
        if limit is not None and limit < len(ids):
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        n_prompt = len(sub.input_ids) if sub.input_ids is not None else len(self.tokenizer.encode(sub.text))
        outs = []
        for j in range(1, len(ids) + 1):
            meta: dict[str, Any] = {
                "id": sub.rid,
                "finish_reason": finish if j == len(ids) else None,
                "prompt_tokens": n_prompt,
                "completion_tokens": j,
                "cached_tokens": 3,
            }
            if sub.return_logprob:
                meta["output_token_logprobs"] = [
                    [-0.5 * (i + 1), t, self.tokenizer.decode([t])] for i, t in enumerate(ids[:j])
                ]
                meta["input_token_logprobs"] = [[None, 0, B]] + [[-1.0, 5, "x"]] * (n_prompt - 1)
                if sub.top_logprobs_num:
                    meta["output_top_logprobs"] = [
                        [[-0.5 * (i + 1), t, self.tokenizer.decode([t])], [-9.0, 5, "&"]][
                            : sub.top_logprobs_num
                        ]
                        for i, t in enumerate(ids[:j])
                    ]
            outs.append({"text": self.tokenizer.decode(ids[:j]), "output_ids": ids[:j], "meta_info": meta})
        return outs

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        obj.normalize_batch_and_arguments()
        if obj.is_single:
            outs = self._output(obj, 0)
            if obj.stream:
                for o in outs:
                    yield o
            else:
                yield outs[-1]
            return
        bs, n = obj.batch_size, obj.parallel_sample_num
        order = [k * bs + i for i in range(bs) for k in range(n)]
        per = [self._output(obj[j], pos % n) for pos, j in enumerate(order)]
        if not obj.stream:
            yield [p[-1] for p in per]
            return
        for step in range(max(len(p) for p in per)):
            for idx, p in enumerate(per):
                if step < len(p):
                    yield dict(p[step], index=idx)


def _client(tm: FakeTM, **args: Any) -> TestClient:
    sa = SimpleNamespace(
        served_model_name="dsv4-test",
        model_path=None,
        api_key=None,
        enable_cache_report=False,
        context_length=None,
    )
    for k, v in args.items():
        setattr(sa, k, v)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    return TestClient(app)


def _oai(client: TestClient, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=client, max_retries=0)


def _sse_events(resp: Any) -> list[Any]:
    events = []
    for line in resp.text.split("\n"):
        if line.startswith("data: "):
            payload = line[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_models(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    r = c.get("/v1/models")
    assert r.status_code == 200
    assert [m.id for m in _oai(c).models.list().data] == ["dsv4-test"]


def test_completion_non_stream_with_openai_client(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok)
    c = _client(tm)
    out = _oai(c).completions.create(
        model="dsv4-test",
        prompt="Say hi",
        max_tokens=4,
        temperature=0,
        logprobs=2,
        extra_body={
            "top_k": 5,
            "min_p": 0.1,
            "repetition_penalty": 1.1,
            "min_tokens": 1,
            "stop_token_ids": [7],
        },
    )
    ids = tok.encode("Hello there, general Kenobi.", add_special_tokens=False)[:4]
    assert out.choices[0].text == tok.decode(ids)
    assert out.choices[0].finish_reason == "length"
    assert out.usage.completion_tokens == 4 and out.usage.prompt_tokens == len(tok.encode("Say hi"))
    assert out.usage.total_tokens == out.usage.prompt_tokens + 4
    lp = out.choices[0].logprobs
    assert lp.token_logprobs == [-0.5, -1.0, -1.5, -2.0]
    assert lp.tokens == [tok.decode([t]) for t in ids]
    assert len(lp.top_logprobs) == 4 and lp.top_logprobs[0]["&"] == -9.0
    sp = tm.received[0].sampling_params
    assert sp["max_new_tokens"] == 4 and sp["top_k"] == 5 and sp["min_p"] == 0.1 and sp["min_new_tokens"] == 1
    assert sp["stop_token_ids"] == [7] and sp["repetition_penalty"] == 1.1 and sp["temperature"] == 0
    assert tm.received[0].return_logprob and tm.received[0].top_logprobs_num == 2


def test_completion_n_and_batch(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    out = _oai(c).completions.create(model="dsv4-test", prompt=["a", "b c"], n=2, max_tokens=64)
    assert [ch.index for ch in out.choices] == [0, 1, 2, 3]
    texts = [ch.text for ch in out.choices]
    assert (
        texts[0] == texts[2] == "Hello there, general Kenobi."
        and texts[1] == texts[3] == "Hello there, general Kenobi. #1"
    )
    assert all(ch.finish_reason == "stop" for ch in out.choices)
    n_reply = len(tok.encode("Hello there, general Kenobi.", add_special_tokens=False))
    assert out.usage.prompt_tokens == len(tok.encode("a")) + len(tok.encode("b c"))
    assert out.usage.completion_tokens == 2 * n_reply + 2 * len(
        tok.encode("Hello there, general Kenobi. #1", add_special_tokens=False)
    )


def test_completion_echo(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    r = c.post("/v1/completions", json={"prompt": "Q:", "max_tokens": 2, "echo": True})
    assert r.status_code == 200 and r.json()["choices"][0]["text"].startswith("Q:Hello")


def test_completion_stream_include_usage(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok), enable_cache_report=True)
    stream = _oai(c).completions.create(
        model="dsv4-test", prompt="x", max_tokens=50, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == "Hello there, general Kenobi."
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(
        tok.encode(text, add_special_tokens=False)
    )
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 3


def test_chat_non_stream_prompt_rendering(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok)
    c = _client(tm)
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Name?"},
    ]
    out = _oai(c).chat.completions.create(
        model="dsv4-test", messages=msgs, logprobs=True, top_logprobs=1, n=2
    )
    expected_prompt = B + "Be brief." + U + "Hi" + A + "</think>Hello." + E + U + "Name?" + A + "</think>"
    ids = tm.received[0].input_ids
    ids = ids[0] if isinstance(ids[0], list) else ids  # n=2 normalizes into a batch of one prompt
    assert ids == tok.encode(expected_prompt, add_special_tokens=False)
    assert ids[0] == 0 and tok.convert_ids_to_tokens(ids[-2:]) == [A, "</think>"]  # real special tokens
    assert [ch.message.content for ch in out.choices] == [
        "Hello there, general Kenobi.",
        "Hello there, general Kenobi. #1",
    ]
    assert out.choices[0].message.role == "assistant" and out.choices[0].finish_reason == "stop"
    lp = out.choices[0].logprobs.content
    assert lp[0].logprob == -0.5 and lp[0].token == tok.decode(
        [tok.encode("Hello", add_special_tokens=False)[0]]
    )
    assert lp[0].bytes == list(lp[0].token.encode()) and len(lp[0].top_logprobs) == 1


def test_chat_thinking_separates_reasoning(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok, reply="Two plus two.</think>\n\nIt is 4.")
    c = _client(tm)
    out = _oai(c).chat.completions.create(
        model="dsv4-test",
        messages=[{"role": "user", "content": "2+2?"}],
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert tm.received[0].input_ids == tok.encode(B + U + "2+2?" + A + "<think>", add_special_tokens=False)
    msg = out.choices[0].message
    assert msg.content == "It is 4." and msg.model_extra["reasoning_content"] == "Two plus two."
    # streaming: reasoning deltas then content deltas
    stream = _oai(c).chat.completions.create(
        model="dsv4-test",
        messages=[{"role": "user", "content": "2+2?"}],
        stream=True,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    reasoning = "".join(
        (ch.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for ch in chunks
    )
    content = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert reasoning == "Two plus two." and content == "It is 4."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_stream_n2_usage(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    r = c.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "x"}],
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 3,
        },
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    ev = _sse_events(r)
    assert ev[-1] == "[DONE]"
    by_idx: dict[int, str] = {0: "", 1: ""}
    for e in ev[:-2]:
        for ch in e["choices"]:
            by_idx[ch["index"]] += ch["delta"].get("content") or ""
    ids = tok.encode("Hello there, general Kenobi.", add_special_tokens=False)[:3]
    assert by_idx[0] == by_idx[1] == tok.decode(ids)
    assert ev[-2]["choices"] == [] and ev[-2]["usage"]["completion_tokens"] == 6
    assert "prompt_tokens_details" not in ev[-2]["usage"] or ev[-2]["usage"]["prompt_tokens_details"] is None


@pytest.mark.parametrize(
    "path,body,status,param",
    [
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "model"),
        (
            "/v1/chat/completions",
            {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
            404,
            "model",
        ),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -5}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
        ("/v1/completions", {"prompt": ""}, 400, "prompt"),
        ("/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ("/v1/completions", {"prompt": "x", "n": 100000}, 400, "n"),
        ("/v1/completions", {"prompt": "x", "stop_token_ids": [10**9]}, 400, "stop_token_ids"),
        ("/v1/completions", {"prompt": "x", "regex": "a+"}, 400, None),
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, None),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
            400,
            "top_logprobs",
        ),
        ("/v1/chat/completions", {"messages": "hello"}, 400, "messages"),
    ],
)
def test_errors(tok: PreTrainedTokenizerFast, path: str, body: dict, status: int, param: str | None) -> None:
    c = _client(FakeTM(tok))
    r = c.post(path, json=body)
    assert r.status_code == status, r.text
    j = r.json()
    assert j["object"] == "error" and j["code"] == status and isinstance(j["message"], str) and j["message"]
    assert j["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    if param is not None:
        assert j["param"] == param or param in j["message"]


def test_malformed_json_and_openai_client_error(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    r = c.post("/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["object"] == "error"
    with pytest.raises(openai.NotFoundError):
        _oai(c).completions.create(model="other", prompt="x")
    with pytest.raises(openai.BadRequestError):
        _oai(c).chat.completions.create(
            model="dsv4-test", messages=[{"role": "user", "content": "x"}], temperature=-2
        )


def test_api_key(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok), api_key="sekret")
    assert c.get("/v1/models").status_code == 401
    r = c.post("/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["code"] == 401
    with pytest.raises(openai.AuthenticationError):
        _oai(c, "bad").models.list()
    assert _oai(c, "sekret").completions.create(model="dsv4-test", prompt="x", max_tokens=2).choices[0].text


def test_continuous_usage_stats(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    for path, body in [
        ("/v1/completions", {"prompt": "x"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
    ]:
        body |= {"stream": True, "max_tokens": 4, "stream_options": {"continuous_usage_stats": True}}
        ev = [e for e in _sse_events(c.post(path, json=body)) if e != "[DONE]"]
        counts = [e["usage"]["completion_tokens"] for e in ev if e["choices"] and e["usage"]]
        assert counts and counts == sorted(counts) and counts[-1] == 4


class _FailingTM(FakeTM):
    """Fails every request with ``ValueError`` carrying ``status_code`` (as the real tokenizer
    manager's ``RequestError`` / ``BackendDiedError``)."""

    def __init__(self, tokenizer: Any, status: int) -> None:
        super().__init__(tokenizer)
        self.status = status

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        err = ValueError(f"The request failed ({self.status}).")
        err.status_code = self.status  # type: ignore[attr-defined]
        raise err
        yield {}  # an async generator


@pytest.mark.parametrize(
    "status,exc,err_type",
    [
        (400, openai.BadRequestError, "BadRequestError"),
        (503, openai.InternalServerError, "service_unavailable"),
    ],
)
def test_error_bodies_carry_openai_nested_error_with_the_status_type(
    tok: PreTrainedTokenizerFast, status: int, exc: type, err_type: str
) -> None:
    # The openai client reads the nested "error" object (OpenAI's shape); SGLang clients the flat
    # fields. Both must agree, and the type must follow the status: a 503 is not a bad request.
    c = _client(_FailingTM(tok, status))
    for path, body in (
        ("/v1/completions", {"prompt": "x", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
    ):
        r = c.post(path, json=body)
        assert r.status_code == status, r.text
        j = r.json()
        assert j["object"] == "error" and j["type"] == err_type and j["code"] == status
        assert j["error"] == {"message": j["message"], "type": err_type, "param": None, "code": status}
    with pytest.raises(exc) as e:
        _oai(c).chat.completions.create(model="dsv4-test", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == status
    assert e.value.type == err_type and e.value.message.endswith(f"The request failed ({status}).")


def test_error_nested_shape_on_404_and_validation(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    with pytest.raises(openai.NotFoundError) as e:
        _oai(c).completions.create(model="other", prompt="x")
    assert e.value.type == "NotFoundError" and e.value.param == "model"
    with pytest.raises(openai.BadRequestError) as e2:
        _oai(c).completions.create(model="dsv4-test", prompt="x", temperature=5)
    assert e2.value.type == "BadRequestError" and e2.value.param == "temperature"


@pytest.mark.parametrize("echo", [False, True])
def test_completion_stream_text_offset_is_absolute(tok: PreTrainedTokenizerFast, echo: bool) -> None:
    """``logprobs.text_offset`` positions a token in the choice's whole text (echoed prompt
    included), also across the chunks of a stream (vllm-project/vllm#47815): streamed offsets
    continue each other and equal the non-streamed ones."""
    c = _client(FakeTM(tok))
    body = {"prompt": "Q: hi", "max_tokens": 6, "logprobs": 1, "echo": echo}
    lp = c.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
    want = [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]  # oracle
    assert lp["text_offset"] == want and len(want) == 6 + (len(tok.encode("Q: hi")) if echo else 0)
    events = _sse_events(c.post("/v1/completions", json={**body, "stream": True}))
    got_tokens, got_offsets = [], []
    for ev in events[:-1]:
        if ev["choices"] and ev["choices"][0]["logprobs"]:
            got_tokens += ev["choices"][0]["logprobs"]["tokens"]
            got_offsets += ev["choices"][0]["logprobs"]["text_offset"]
    assert got_tokens == lp["tokens"] and got_offsets == want


class _RankedTM(FakeTM):
    """Sample ``k`` of a prompt gets the constant output logprob ``SCORES[k]``."""

    SCORES = (-3.0, -1.0, -2.0, -4.0)

    def _output(self, sub: GenerateReqInput, k: int) -> list[dict[str, Any]]:
        outs = super()._output(sub, k)
        for o in outs:
            lps = o["meta_info"].get("output_token_logprobs") or []
            o["meta_info"]["output_token_logprobs"] = [[self.SCORES[k], t, s] for _, t, s in lps]
        return outs


def test_completion_best_of(tok: PreTrainedTokenizerFast) -> None:
    """``best_of`` generates that many candidates per prompt and returns the best ``n`` by mean
    token logprob, best first (OpenAI's documented behaviour); usage counts every candidate; no
    logprobs unless asked for; ``best_of < n`` and a streamed ``best_of > n`` are 400s naming it."""
    tm = _RankedTM(tok)
    c = _client(tm)
    out = _oai(c).completions.create(
        model="dsv4-test", prompt=["a", "b"], n=2, best_of=4, max_tokens=64, temperature=1
    )
    reply = "Hello there, general Kenobi."
    assert [ch.index for ch in out.choices] == [0, 1, 2, 3]
    assert [ch.text for ch in out.choices] == [reply + " #1", reply + " #2"] * 2  # scores -1, -2
    assert all(ch.logprobs is None for ch in out.choices)
    assert tm.received[-1].return_logprob and tm.received[-1].parallel_sample_num == 4
    lens = [len(tok.encode(reply + (f" #{k}" if k else ""), add_special_tokens=False)) for k in range(4)]
    assert out.usage.completion_tokens == 2 * sum(lens)
    assert out.usage.prompt_tokens == len(tok.encode("a")) + len(tok.encode("b"))

    lp = c.post("/v1/completions", json={"prompt": "a", "best_of": 3, "logprobs": 0, "max_tokens": 64})
    choice = lp.json()["choices"]
    assert len(choice) == 1 and choice[0]["text"] == reply + " #1"
    assert set(choice[0]["logprobs"]["token_logprobs"]) == {-1.0}

    ok = c.post("/v1/completions", json={"prompt": "a", "best_of": 2, "n": 2, "stream": True})
    assert ok.status_code == 200 and _sse_events(ok)[-1] == "[DONE]"
    for bad in ({"best_of": 1, "n": 2}, {"best_of": 3, "stream": True}, {"best_of": 10**4}):
        r = c.post("/v1/completions", json={"prompt": "a", **bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "best_of", (bad, r.text)


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ("/v1/completions", {"prompt": 5}, "prompt"),
        ("/v1/completions", {"prompt": "x", "stop": 5}, "stop"),
    ],
)
def test_validation_error_param_names_the_field(
    tok: PreTrainedTokenizerFast, path: str, body: dict, param: str
) -> None:
    """A wrongly typed union field's ``param`` (and message) names the request field, not
    pydantic's union member (``messages.0.content.str``)."""
    r = _client(FakeTM(tok)).post(path, json=body)
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] == param, r.text
    assert f"{param}." not in err["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, None, "absent"])
def test_stream_options_without_stream_is_a_400(
    tok: PreTrainedTokenizerFast, path: str, stream: bool | None | str
) -> None:
    """``stream_options`` on a request that is not streamed is rejected (OpenAI API and vLLM
    answer 400 with ``param: "stream_options"``); ``stream_options: null`` is not given at all."""
    c = _client(FakeTM(tok))
    body: dict[str, Any] = {"max_tokens": 4}
    body |= {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    if stream != "absent":
        body["stream"] = stream
    r = c.post(path, json=body | {"stream_options": {"include_usage": True}})
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["type"] == "BadRequestError" and j["code"] == 400 and j["param"] == "stream_options"
    assert j["error"]["param"] == "stream_options" and "stream_options" in j["error"]["message"]
    # unchanged: a null stream_options, and stream_options with stream true
    assert c.post(path, json=body | {"stream_options": None}).status_code == 200
    streamed = c.post(path, json=body | {"stream": True, "stream_options": {"include_usage": True}})
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")


class _MaskedTopTM(FakeTM):
    """Top-logprob lists whose last entry is ``-inf``: what the runtime reports for a token a
    grammar (or ``logit_bias`` / ``min_tokens``) forbids, when fewer tokens than asked for are
    allowed at a step."""

    def _output(self, sub: GenerateReqInput, k: int) -> list[dict[str, Any]]:
        outs = super()._output(sub, k)
        for o in outs:
            for top in o["meta_info"].get("output_top_logprobs") or []:
                top.append([float("-inf"), 7, "&&"])
        return outs


@pytest.mark.parametrize("stream", [False, True])
def test_forbidden_top_logprobs_are_openai_floor_not_null(tok: PreTrainedTokenizerFast, stream: bool) -> None:
    """A top-logprob entry with no probability (``-inf``: a token the grammar forbids) is written as
    -9999.0, the value OpenAI's chat reference documents for very unlikely tokens, not as JSON
    ``null`` in a number field (the openai client's ``TopLogprob.logprob`` is a float). Finite
    values are unchanged; the echoed prompt's first token keeps its ``null``."""
    c = _client(_MaskedTopTM(tok))
    client = _oai(c)
    msgs = [{"role": "user", "content": "hi"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="dsv4-test", messages=msgs, logprobs=True, top_logprobs=3, stream=True
            )
        )
        content = [
            t for ch in chunks for choice in ch.choices if choice.logprobs for t in choice.logprobs.content
        ]
    else:
        r = client.chat.completions.create(model="dsv4-test", messages=msgs, logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
    assert content
    for i, t in enumerate(content):
        assert [x.logprob for x in t.top_logprobs] == [-0.5 * (i + 1), -9.0, -9999.0]
        assert t.logprob == -0.5 * (i + 1)
    body = {"model": "dsv4-test", "prompt": "a b", "logprobs": 3, "echo": True, "stream": stream}
    resp = c.post("/v1/completions", json=body)
    assert resp.status_code == 200
    if stream:
        lps = [ev["choices"][0]["logprobs"] for ev in _sse_events(resp)[:-1] if ev["choices"]]
    else:
        lps = [resp.json()["choices"][0]["logprobs"]]
    token_lps = [v for lp in lps for v in lp["token_logprobs"]]
    tops = [d for lp in lps for d in lp["top_logprobs"] if d is not None]
    assert token_lps[0] is None and all(isinstance(v, float) for v in token_lps[1:])
    assert tops and all(d["&&"] == -9999.0 and None not in d.values() for d in tops)
