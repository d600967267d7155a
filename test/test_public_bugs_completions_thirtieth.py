"""A thirtieth set of public bug reports, replayed against the legacy ``POST /v1/completions``
route: ``n`` honoured (whole and streamed, each choice finishing on its own), ``echo`` with a
batch and ``n`` (each choice echoes its own prompt), the usage block (present, summed, counting
the completion's tokens), ``stream_options.include_usage`` (the usage chunk before ``[DONE]``,
none when false, a 400 without ``stream``), batched ``cached_tokens``, ``logprobs: 0``, ``stop``
given as one string rather than a list, and a ``max_tokens`` that is negative or not an integer.

Every report passed as it was; the tests are regression guards.

Fixtures: the route in process over ``openai_fake_tm.FakeTM`` (a fixed reply, one token per
streamed output; the engine requests it receives are kept, so a refusal is seen to reach no
engine), and conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the
real tokenizer manager, detokenizer and stop checker, writing ``FAKE_TEXT``'s tokens) for the
stop string.
Oracles: the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``tok``: the reply's
token count and text), the fake engine's fixed per-prompt ``cached_tokens`` (3), the ``openai``
client's types (``Completion``) and errors, and the OpenAI
API reference for the legacy completions (``n`` completions per prompt; ``echo`` returns the
prompt in addition to the completion; ``stop`` is a string or an array of up to four strings;
``stream_options`` is only set with ``stream: true``, and with ``include_usage`` an extra chunk
before ``data: [DONE]`` carries the usage and an empty ``choices``; ``max_tokens`` an integer).
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types import Completion
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from public_bugs_testutil import post, sse
from server_fixture import FAKE_TEXT, ServerHandle, fake_output_text

MODEL = "dsv4-test"
COMPLETIONS = "/v1/completions"
REPLY = "Hello there, general Kenobi."


def _refused(tm: FakeTM, body: dict[str, Any], param: str) -> str:
    """The message of the HTTP 400 that ``body`` gets on ``tm``; asserts its ``param`` and that
    no engine request was made."""
    r = app_client(tm).post(COMPLETIONS, json={"model": MODEL, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert tm.received == []
    return err["message"]


def _reply_text(tok: Any, k: int, n_tokens: int) -> str:
    """The fake's reply for sample ``k`` cut to ``n_tokens`` tokens, decoded by ``transformers``."""
    ids = tok.encode(REPLY + (f" #{k}" if k else ""), add_special_tokens=False)
    return tok.decode(ids[:n_tokens])


# --------------------------------------------------------------------------- n


def test_lmdeploy_4976_n_above_one_answers_n_choices(tok: Any) -> None:
    """InternLM/lmdeploy#4976 (``/v1/completions`` with ``n: 3`` answered HTTP 200 with one choice:
    ``n`` was silently forced back to 1). Expected (OpenAI's reference: "How many completions to
    generate for each prompt"): three choices, indexes ``0, 1, 2``, each ``length`` after two
    tokens; ``usage.completion_tokens`` counts all six tokens and ``prompt_tokens`` the prompt
    once (``usage.total_tokens`` their sum)."""
    tm = FakeTM(tok)
    out = oai_client(app_client(tm)).completions.create(model=MODEL, prompt="Hi", max_tokens=2, n=3)
    assert [c.index for c in out.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in out.choices)
    assert [c.text for c in out.choices] == [_reply_text(tok, 0, 2)] * 3
    u = out.usage
    assert u is not None and u.completion_tokens == 3 * 2
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    single = oai_client(app_client(FakeTM(tok))).completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    assert single.usage is not None and u.prompt_tokens == single.usage.prompt_tokens


def test_openai_streams_8_streamed_n_finishes_every_choice(tok: Any) -> None:
    """EvolvingPrograms/openai-streams#8 (a stream with ``n: 5`` and a low ``max_tokens`` closed
    when the first choice reached its limit, so the other choices never finished). Expected:
    with ``n: 3`` each index ``0 .. 2`` gets exactly one chunk whose ``finish_reason`` is
    ``length``, no chunk of an index after its finish, each index's texts join to the unstreamed
    choice's text, and the stream ends with ``[DONE]``."""
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "n": 3}
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json={**body, "stream": True}))
    assert events[-1] == "[DONE]"
    texts: dict[int, str] = {}
    finished: dict[int, int] = {}
    for e in events[:-1]:
        for c in e["choices"]:
            i = c["index"]
            assert i not in finished, f"chunk of choice {i} after its finish"
            texts[i] = texts.get(i, "") + c["text"]
            if c["finish_reason"] is not None:
                assert c["finish_reason"] == "length"
                finished[i] = 1
    assert sorted(finished) == [0, 1, 2]
    whole = Completion.model_validate(app_client(FakeTM(tok)).post(COMPLETIONS, json=body).json())
    assert texts == {c.index: c.text for c in whole.choices}


# --------------------------------------------------------------------------- echo


def test_stdapi_259_echo_with_a_batch_and_n_echoes_each_choices_own_prompt(tok: Any) -> None:
    """stdapi-ai/stdapi.ai#259 (``echo`` accepted and dropped; the report restates OpenAI's
    contract: the prompt is prepended to ``choices[].text``, and for a batch prompt or ``n > 1``
    each choice echoes the prompt it was generated from). Expected: prompts ``["Hi", "Bye"]`` with
    ``n: 2`` answer four choices, prompt-major, whose texts are each prompt followed by the
    reply's first token (``transformers``' decode)."""
    out = oai_client(app_client(FakeTM(tok))).completions.create(
        model=MODEL, prompt=["Hi", "Bye"], n=2, max_tokens=1, echo=True
    )
    first = _reply_text(tok, 0, 1)
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    assert [c.text for c in out.choices] == ["Hi" + first] * 2 + ["Bye" + first] * 2


# --------------------------------------------------------------------------- usage


def test_cliproxyapi_1618_unstreamed_usage_is_present_and_summed(tok: Any) -> None:
    """router-for-me/CLIProxyAPI#1618 and raullenchai/Rapid-MLX#52 (the ``usage`` of
    ``/v1/completions`` was missing, or its counts not the real ones). Expected: a ``usage`` the
    ``openai`` client parses, ``completion_tokens`` the reply's ``transformers`` token count (the
    reply ends by itself, ``stop``), ``prompt_tokens`` at least one, ``total_tokens`` the sum."""
    n_reply = len(tok.encode(REPLY, add_special_tokens=False))
    out = oai_client(app_client(FakeTM(tok))).completions.create(
        model=MODEL, prompt="Say hello", max_tokens=n_reply + 5
    )
    assert out.choices[0].finish_reason == "stop" and out.choices[0].text == REPLY
    u = out.usage
    assert u is not None and u.completion_tokens == n_reply
    assert u.prompt_tokens >= 1 and u.total_tokens == u.prompt_tokens + u.completion_tokens


def test_gateway_api_ie_1357_usage_chunk_comes_before_done(tok: Any) -> None:
    """kubernetes-sigs/gateway-api-inference-extension#1357 (a proxy looked for the usage in the
    ``data: [DONE]`` line, which carries none; the usage is the chunk before it). Expected, with
    ``stream_options.include_usage``: the last event is ``[DONE]``, the one before it has
    ``choices == []`` and a usage whose counts equal the unstreamed answer's, and no earlier
    chunk carries a usage."""
    body = {"model": MODEL, "prompt": "whats your fav movie?", "max_tokens": 3}
    events = sse_data_events(
        app_client(FakeTM(tok)).post(
            COMPLETIONS, json={**body, "stream": True, "stream_options": {"include_usage": True}}
        )
    )
    assert events[-1] == "[DONE]"
    last = events[-2]
    assert last["choices"] == [] and last["usage"] is not None
    assert all(e.get("usage") is None for e in events[:-2])
    whole = Completion.model_validate(app_client(FakeTM(tok)).post(COMPLETIONS, json=body).json())
    assert whole.usage is not None
    assert last["usage"]["prompt_tokens"] == whole.usage.prompt_tokens
    assert last["usage"]["completion_tokens"] == whole.usage.completion_tokens == 3
    assert last["usage"]["total_tokens"] == whole.usage.total_tokens


def test_llamafile_713_include_usage_false_sends_no_usage_and_needs_stream(tok: Any) -> None:
    """mozilla-ai/llamafile#713 (``stream_options`` added to ``/v1/completions`` as OpenAI
    documents it: "only applicable when ``stream: true``", ``include_usage`` default ``false``).
    Expected: streamed with ``include_usage: false`` no chunk carries a usage and none has empty
    ``choices``; ``stream_options`` on an unstreamed request is an HTTP 400 whose ``param`` is
    ``stream_options``, before any engine request, raised by the ``openai`` client as
    ``BadRequestError``."""
    events = sse_data_events(
        app_client(FakeTM(tok)).post(
            COMPLETIONS,
            json={
                "model": MODEL,
                "prompt": "Hi",
                "max_tokens": 2,
                "stream": True,
                "stream_options": {"include_usage": False},
            },
        )
    )
    assert events[-1] == "[DONE]"
    assert all(e.get("usage") is None and e["choices"] for e in events[:-1])
    _refused(FakeTM(tok), {"prompt": "Hi", "stream_options": {"include_usage": True}}, "stream_options")
    tm = FakeTM(tok)
    with pytest.raises(openai.BadRequestError):
        oai_client(app_client(tm)).completions.create(
            model=MODEL, prompt="Hi", stream_options={"include_usage": True}
        )
    assert tm.received == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_vllm_58116_batched_cached_tokens_sum_over_the_prompts(tok: Any, stream: bool) -> None:
    """vllm-project/vllm#58116 (a batched completion reported ``cached_tokens`` of one prompt only:
    the first streamed or the last unstreamed). Expected, with the cache report on
    (``--enable-cache-report``): prompts ``["Hi", "Bye there"]`` with ``n: 2`` report
    ``prompt_tokens_details.cached_tokens`` 6, the fake engine's 3 cached tokens for each of the
    two prompts counted once per prompt as ``prompt_tokens`` is, streamed (in the usage chunk) and
    not alike."""
    body: dict[str, Any] = {"model": MODEL, "prompt": ["Hi", "Bye there"], "max_tokens": 2, "n": 2}
    client = app_client(FakeTM(tok), enable_cache_report=True)
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        usage = sse_data_events(client.post(COMPLETIONS, json=body))[-2]["usage"]
    else:
        usage = client.post(COMPLETIONS, json=body).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 2 * 3
    assert usage["completion_tokens"] == 2 * 2 * 2


# --------------------------------------------------------------------------- logprobs


def test_vllm_3707_logprobs_zero_still_scores_the_sampled_tokens(tok: Any) -> None:
    """vllm-project/vllm#3707 (``logprobs: 0`` returned no logprobs at all, where OpenAI returns
    the sampled tokens' ``tokens``, ``token_logprobs`` and ``text_offset``, with no alternatives).
    Expected, streamed and not: ``logprobs`` present, one ``token_logprobs`` number per completion
    token (``usage.completion_tokens``), the ``tokens`` joining to the text, ``text_offset`` each
    token's start, and no ``top_logprobs`` entry holding more than the sampled token."""
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 3, "logprobs": 0}
    whole = Completion.model_validate(app_client(FakeTM(tok)).post(COMPLETIONS, json=body).json())
    lp = whole.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None
    assert whole.usage is not None and len(lp.token_logprobs) == whole.usage.completion_tokens == 3
    assert all(isinstance(v, float) for v in lp.token_logprobs)
    assert "".join(lp.tokens) == whole.choices[0].text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(len(d) <= 1 for d in lp.top_logprobs or [] if d)
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json={**body, "stream": True}))
    chunks = [e["choices"][0] for e in events[:-1] if e["choices"]]
    assert [v for c in chunks for v in c["logprobs"]["token_logprobs"]] == lp.token_logprobs
    assert [t for c in chunks for t in c["logprobs"]["tokens"]] == lp.tokens


# --------------------------------------------------------------------------- stop


def test_mlxcel_1475_a_stop_given_as_one_string_is_honoured(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """lablup/mlxcel#1475 (``stop`` accepted "as a scalar or an array" and never enforced; the fix
    excludes the match from the output, names it, and tells a stop-string finish from the length
    limit). Expected: ``"stop": "lazy dog"`` (one string, not a list) cuts ``FAKE_TEXT``'s decode
    where the string starts, ``finish_reason`` ``stop``, vLLM's ``stop_reason`` the string; the
    streamed chunks join to the same text."""
    n = len(tok.encode(FAKE_TEXT))
    full = fake_output_text(tok, n)
    at = full.find("lazy dog")
    assert at > 0
    body = {"model": "qa-model", "prompt": "Hi", "max_tokens": n, "stop": "lazy dog"}
    r = post(plain_fake_server, COMPLETIONS, body)
    assert r.status_code == 200, r.text
    whole = Completion.model_validate(r.json())
    assert whole.choices[0].text == full[:at]
    assert whole.choices[0].finish_reason == "stop"
    assert r.json()["choices"][0]["stop_reason"] == "lazy dog"
    events = sse(plain_fake_server, COMPLETIONS, {**body, "stream": True})
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == full[:at]


# --------------------------------------------------------------------------- max_tokens


@pytest.mark.parametrize("value", [-160, -1, 1.5, "5", True], ids=["-160", "-1", "float", "string", "bool"])
def test_ms_agent_497_bad_max_tokens_is_a_400_naming_max_tokens(tok: Any, value: Any) -> None:
    """modelscope/ms-agent#497, infiniflow/ragflow#10235 and llm-edge/hal-9100#86 (a client that
    subtracted the prompt length from its budget sent ``max_tokens: -160``; the servers refused it
    with a 400 naming ``max_tokens``, one with a 422 of pydantic's own shape). Expected: a negative
    ``max_tokens``, or one that is not an integer (``1.5``, the string ``"5"``, ``true``), is an
    HTTP 400 in OpenAI's error shape whose ``param`` is ``max_tokens``, before any engine request;
    a negative value's message gives the value."""
    msg = _refused(FakeTM(tok), {"prompt": "Hi", "max_tokens": value}, "max_tokens")
    if isinstance(value, int) and not isinstance(value, bool):
        assert str(value) in msg
