"""OpenAI routes through FastAPI's TestClient with a fake tokenizer manager (``openai_fake_tm``),
checked with raw JSON and with the real ``openai`` client package (its own response parsers).
Error answers are in ``test_openai_api_errors.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai_fake_tm import A, B, E, FakeTM, U
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from openai_fake_tm import sse_data_events as _sse_events
from sglang_v4.managers.io_struct import GenerateReqInput
from transformers import PreTrainedTokenizerFast


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
    assert len(lp.top_logprobs) == 4 and lp.top_logprobs[0][tok.decode([5])] == -9.0
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


def test_continuous_usage_stats(tok: PreTrainedTokenizerFast) -> None:
    """Running usage on every chunk needs ``include_usage`` too (vLLM's rule,
    vllm-project/vllm:tests/entrypoints/openai/completion/test_completion.py::test_completion_stream_options):
    ``continuous_usage_stats`` alone sends no usage at all."""
    c = _client(FakeTM(tok))
    for path, body in [
        ("/v1/completions", {"prompt": "x"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
    ]:
        opts = {"include_usage": True, "continuous_usage_stats": True}
        body |= {"stream": True, "max_tokens": 4, "stream_options": opts}
        ev = [e for e in _sse_events(c.post(path, json=body)) if e != "[DONE]"]
        counts = [e["usage"]["completion_tokens"] for e in ev if e["choices"] and e["usage"]]
        assert counts and counts == sorted(counts) and counts[-1] == 4
        body["stream_options"] = {"continuous_usage_stats": True}
        ev = [e for e in _sse_events(c.post(path, json=body)) if e != "[DONE]"]
        assert ev and all(e.get("usage") is None for e in ev), ev


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
    assert None not in [v for d in tops for v in d.values()]
    # the output positions (the fake engine gives no top logprobs for the prompt's)
    out_tops = tops[-len(tok.encode("Hello there, general Kenobi.", add_special_tokens=False)) :]
    assert out_tops and all(d[tok.decode([7])] == -9999.0 for d in out_tops)


def test_chat_sampling_defaults_from_generation_config(tok: PreTrainedTokenizerFast, tmp_path: Any) -> None:
    """SGLang's ``--sampling-defaults model`` (its default): a chat request's unset temperature /
    top_p / top_k / min_p / repetition_penalty come from the model's generation_config.json; the
    request's own values win; ``openai`` and ``/v1/completions`` keep SGLang's defaults."""
    gen = {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": None}
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    msgs = [{"role": "user", "content": "hi"}]

    def sent(mode: str | None, path: str, body: dict[str, Any]) -> dict[str, Any]:
        tm = FakeTM(tok)
        extra = {} if mode is None else {"sampling_defaults": mode}
        r = _client(tm, model_path=str(tmp_path), **extra).post(path, json={"model": "dsv4-test", **body})
        assert r.status_code == 200, r.text
        return tm.received[-1].sampling_params

    sp = sent(None, "/v1/chat/completions", {"messages": msgs})
    assert (sp["temperature"], sp["top_p"], sp["top_k"]) == (0.6, 0.95, 20) and "min_p" not in sp
    sp = sent("model", "/v1/chat/completions", {"messages": msgs, "temperature": 0.2, "top_k": 5})
    assert (sp["temperature"], sp["top_p"], sp["top_k"]) == (0.2, 0.95, 5)
    sp = sent("openai", "/v1/chat/completions", {"messages": msgs})
    assert not {"temperature", "top_p", "top_k"} & set(sp)
    sp = sent("model", "/v1/completions", {"prompt": "hi"})
    assert sp.get("top_k") is None and sp["temperature"] == 1.0


def test_chat_sampling_defaults_logged_once_at_start_up(
    tok: PreTrainedTokenizerFast, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's OpenAI, score and Anthropic routes are mounted (``_mount_openai``, as at
    start-up): the "Chat sampling defaults" line is logged once (it was logged twice: the
    ``/v1/score`` handler read the model's defaults again), and chat requests still get them."""
    import logging

    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang_v4.entrypoints.http_server import _mount_openai
    from sglang_v4.server_args import ServerArgs

    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_k": 20}))
    tm = FakeTM(tok)
    app = FastAPI()
    with caplog.at_level(logging.INFO):
        serving = _mount_openai(app, tm, ServerArgs(model_path=str(tmp_path), device="cpu"))
    lines = [r.getMessage() for r in caplog.records if "Chat sampling defaults" in r.getMessage()]
    assert len(lines) == 1, lines
    assert serving.chat_sampling_defaults == {"temperature": 0.6, "top_k": 20}
    body = {"model": serving.model_name, "messages": [{"role": "user", "content": "hi"}]}
    r = TestClient(app).post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    sp = tm.received[-1].sampling_params
    assert (sp["temperature"], sp["top_k"]) == (0.6, 20)


def test_default_chat_template_kwargs_and_default_include_usage(tok: PreTrainedTokenizerFast) -> None:
    """SGLang's ``--default-chat-template-kwargs '{"thinking": true}'`` renders every chat prompt in
    thinking mode unless the request says otherwise (DeepSeek-V4's encoding: ``<think>`` after the
    Assistant tag, ``</think>`` without thinking); ``--stream-response-default-include-usage`` ends
    every stream with a usage chunk. Oracle: the tokenizer on the hand-written prompts."""
    from sglang_v4.server_args import ServerArgs

    sa = ServerArgs(device="cpu", default_chat_template_kwargs='{"thinking": true}')
    assert sa.default_chat_template_kwargs == {"thinking": True}
    with pytest.raises(ValueError, match="default_chat_template_kwargs"):
        ServerArgs(device="cpu", default_chat_template_kwargs="[1]")
    tm = FakeTM(tok)
    c = _client(
        tm, default_chat_template_kwargs={"thinking": True}, stream_response_default_include_usage=True
    )
    msgs = [{"role": "user", "content": "2+2?"}]
    thinking = tok.encode(B + U + "2+2?" + A + "<think>", add_special_tokens=False)
    plain = tok.encode(B + U + "2+2?" + A + "</think>", add_special_tokens=False)
    for extra, want in (
        ({}, thinking),
        ({"chat_template_kwargs": {"thinking": False}}, plain),
        ({"thinking": {"type": "disabled"}}, plain),
    ):
        r = c.post("/v1/chat/completions", json={"model": "dsv4-test", "messages": msgs, **extra})
        assert r.status_code == 200, r.text
        assert tm.received[-1].input_ids == want, extra
    chunks = list(_oai(c).chat.completions.create(model="dsv4-test", messages=msgs, stream=True))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    chunks = list(_oai(c).completions.create(model="dsv4-test", prompt="x", stream=True))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_top_k_zero_is_the_whole_vocabulary_as_vllm(tok: PreTrainedTokenizerFast, tmp_path: Any) -> None:
    """vLLM's ``SamplingParams.top_k``: "Set to 0 (or -1) to consider all tokens" (a 400 before,
    SGLang's ``/generate`` rule; vllm-project/vllm#17553: a ``generation_config.json`` with
    ``top_k: 0``, HF's "off", made every chat request a 400). On the OpenAI routes 0 now sends
    what -1 sends; below -1 is still a 400 naming ``top_k``."""
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ("/v1/completions", {"prompt": "hi", "max_tokens": 2}),
        ("/v1/chat/completions", {"messages": msgs, "max_tokens": 2}),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 2}),
    ]
    for path, body in cases:
        sent = []
        for top_k in (0, -1):
            tm = FakeTM(tok)
            r = _client(tm).post(path, json={"model": "dsv4-test", **body, "top_k": top_k})
            assert r.status_code == 200, (path, r.text)
            sent.append(tm.received[-1].sampling_params)
        assert sent[0] == sent[1] and sent[0].get("top_k", -1) == -1, path
        r = _client(FakeTM(tok)).post(path, json={"model": "dsv4-test", **body, "top_k": -2})
        assert r.status_code == 400 and r.json()["error"]["param"] == "top_k", (path, r.text)
    (tmp_path / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "top_k": 0}))
    tm = FakeTM(tok)
    r = _client(tm, model_path=str(tmp_path)).post(
        "/v1/chat/completions", json={"model": "dsv4-test", "messages": msgs, "max_tokens": 2}
    )
    assert r.status_code == 200, r.text
    assert tm.received[-1].sampling_params.get("top_k", -1) == -1


def test_invalid_generation_config_sampling_values_are_left_out(
    tok: PreTrainedTokenizerFast, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``generation_config.json`` value SGLang's sampling parameters refuse (``top_p`` 0,
    ``repetition_penalty`` 0, a string ``min_p``, ``temperature`` -1) is logged and left out of the
    chat defaults: every chat request that left the field unset was a 400 naming a field the client
    never sent. The valid values (and ``top_k`` 0, transformers' "off") still apply. Oracle: a chat
    request sending the same value itself is the 400 SGLang gives."""
    import logging

    from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults

    gen = {"temperature": 0.6, "top_p": 0.0, "top_k": 0, "repetition_penalty": 0, "min_p": "0.1"}
    (tmp_path / "generation_config.json").write_text(json.dumps(gen))
    with caplog.at_level(logging.WARNING):
        assert model_sampling_defaults(str(tmp_path), "model") == {"temperature": 0.6, "top_k": 0}
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert all(f"Ignoring {k} of" in warned for k in ("top_p", "repetition_penalty", "min_p")), warned
    msgs = [{"role": "user", "content": "hi"}]
    body = {"model": "dsv4-test", "messages": msgs, "max_tokens": 2}
    tm = FakeTM(tok)
    r = _client(tm, model_path=str(tmp_path)).post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    sp = tm.received[-1].sampling_params
    assert sp["temperature"] == 0.6 and sp.get("top_k", -1) == -1
    assert sp.get("top_p", 1.0) == 1.0 and sp.get("repetition_penalty", 1.0) == 1.0 and not sp.get("min_p")
    for key in ("top_p", "repetition_penalty"):
        r = _client(FakeTM(tok)).post("/v1/chat/completions", json={**body, key: gen[key]})
        assert r.status_code == 400 and r.json()["error"]["param"] == key, r.text
