"""The ``openai`` client against the real server (``python -m sglang_v4.launch_server``, embedded
default model, CPU) in a subprocess. Oracles: greedy determinism, streaming == non-streaming,
top-1 logprob == sampled-token logprob under greedy, usage == an independent token count of the
DeepSeek-V4 chat format, stop strings cut the greedy text exactly where they first occur."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from server_fixture import start_server

openai = pytest.importorskip("openai")
requests = pytest.importorskip("requests")

pytestmark = pytest.mark.slow

B, U, A = "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
STARTUP_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    args = [
        "--host",
        "127.0.0.1",
        "--device",
        "cpu",
        "--served-model-name",
        "dsv4-tiny",
        "--enable-cache-report",
    ]
    log = tmp_path_factory.mktemp("openai_server") / "server.log"
    h = start_server(args, dict(os.environ), log, timeout_s=STARTUP_TIMEOUT_S)
    try:
        yield h.url
    finally:
        h.stop()


@pytest.fixture(scope="module")
def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0, timeout=120)


def test_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == ["dsv4-tiny"]


def test_completion_greedy_stream_matches(client: openai.OpenAI) -> None:
    kw = dict(model="dsv4-tiny", prompt="The capital of France is", max_tokens=6, temperature=0)
    a = client.completions.create(**kw)
    assert (
        a.usage.completion_tokens <= 6
        and a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens
    )
    if a.choices[0].finish_reason == "length":
        assert a.usage.completion_tokens == 6
    chunks = list(client.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == a.choices[0].text
    assert chunks[-1].usage.completion_tokens == a.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens >= 0


def test_completion_logprobs_greedy(client: openai.OpenAI) -> None:
    out = client.completions.create(
        model="dsv4-tiny", prompt="1, 2, 3,", max_tokens=4, temperature=0, logprobs=3
    )
    lp = out.choices[0].logprobs
    assert len(lp.token_logprobs) == out.usage.completion_tokens == len(lp.tokens)
    for val, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert val <= 0.0
        assert 1 <= len(top) <= 3
        assert max(top.values()) == pytest.approx(val, abs=1e-4)  # greedy: the sampled token is the top-1


def test_completion_n_and_seed(client: openai.OpenAI) -> None:
    out = client.completions.create(
        model="dsv4-tiny", prompt="Once upon a time", max_tokens=4, n=3, temperature=0
    )
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert len({c.text for c in out.choices}) == 1  # greedy samples agree
    kw = dict(model="dsv4-tiny", prompt="Once upon a time", max_tokens=4, temperature=1.0, seed=1234)
    assert client.completions.create(**kw).choices[0].text == client.completions.create(**kw).choices[0].text


def test_stop_string_cuts_greedy_text(client: openai.OpenAI) -> None:
    kw = dict(
        model="dsv4-tiny",
        prompt="Count: one two three",
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    full = client.completions.create(**kw).choices[0].text
    if len(full) < 8:
        pytest.skip(f"greedy text too short to pick a stop string from: {full!r}")
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    out = client.completions.create(**kw, stop=[stop])
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].text == full[: full.index(stop)]
    kw["extra_body"] = {"ignore_eos": True, "no_stop_trim": True}
    kept = client.completions.create(**kw, stop=[stop])
    assert kept.choices[0].text == full[: full.index(stop) + len(stop)]


def test_chat_usage_counts_v4_format(client: openai.OpenAI, tok) -> None:  # noqa: ANN001
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]
    out = client.chat.completions.create(
        model="dsv4-tiny", messages=msgs, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
    )
    expected = B + "Be brief." + U + "Hello!" + A + "</think>"
    assert out.usage.prompt_tokens == len(tok.encode(expected, add_special_tokens=False))
    assert out.choices[0].message.role == "assistant"
    assert len(out.choices[0].logprobs.content) == out.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(
            model="dsv4-tiny", messages=msgs, max_tokens=4, temperature=0, stream=True
        )
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == out.choices[0].message.content
    )
    think = client.chat.completions.create(
        model="dsv4-tiny",
        messages=msgs,
        max_tokens=4,
        temperature=0,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert think.usage.prompt_tokens == len(
        tok.encode(B + "Be brief." + U + "Hello!" + A + "<think>", add_special_tokens=False)
    )
    # the same greedy generation through /v1/completions on the rendered prompt's token ids gives the raw
    # text; the chat response must be that text split at the first "</think>"
    ids = tok.encode(B + "Be brief." + U + "Hello!" + A + "<think>", add_special_tokens=False)
    raw = (
        client.completions.create(model="dsv4-tiny", prompt=ids, max_tokens=4, temperature=0).choices[0].text
    )
    msg = think.choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content") or ""
    if "</think>" in raw:
        head, tail = raw.split("</think>", 1)
        assert (reasoning, msg.content) == (head, tail.lstrip("\n"))  # newlines after </think> dropped
    else:
        assert (reasoning, msg.content or "") == (raw, "")


def test_regex_constrained_completion(client: openai.OpenAI) -> None:
    """Constrained decoding end to end (xgrammar mask in the scheduler): the random tiny model can
    only say what the regex allows, then must stop."""
    import re

    pattern = "(yes|no|maybe)"
    out = client.completions.create(
        model="dsv4-tiny",
        prompt="Answer:",
        max_tokens=8,
        temperature=1.0,
        seed=7,
        extra_body={"regex": pattern},
    )
    assert re.fullmatch(pattern, out.choices[0].text), out.choices[0].text
    assert out.choices[0].finish_reason == "stop"


def test_errors_keep_serving(client: openai.OpenAI, server: str) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="dsv4-tiny", prompt="x", max_tokens=2, temperature=-1)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="dsv4-tiny", messages=[], max_tokens=2)
    r = requests.post(server + "/v1/completions", data=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["object"] == "error"
    assert (
        client.completions.create(
            model="dsv4-tiny", prompt="still alive?", max_tokens=2
        ).usage.completion_tokens
        >= 1
    )
