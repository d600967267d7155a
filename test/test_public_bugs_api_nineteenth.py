"""A nineteenth set of public bug reports of OpenAI-compatible servers, replayed against the
OpenAI-compatible routes: request validation (``logit_bias`` keys and values, a server that must
outlive invalid requests, ``repetition_penalty`` 0, the [-2, 2] range of the OpenAI penalties,
``best_of`` against ``n``, ``min_p`` streamed, empty ``stop`` strings, non-finite numbers,
out-of-range prompt token ids, extra fields on messages), the ``seed`` on its way to the sampler
and the choice order of batched prompts. Every report passed here as-is; the tests are kept as
regression guards.

Fixtures: in-process, the OpenAI router over ``openai_fake_tm.FakeTM`` (a fixed reply generated
token by token, ``cached_tokens = 3`` on every output, fake log-probabilities ``-0.5 * (i + 1)``;
``received`` records what reached the scheduler). Oracles: the DeepSeek-V4 tokenizer
(``tokenizer.json`` as a ``transformers`` fast tokenizer), the ``openai`` client's types, the
same request without the field under test, and the OpenAI reference's field meanings.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client, sse_data_events

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MODEL = "dsv4-test"  # app_client's served name
HI = [{"role": "user", "content": "Hi"}]
REPLY = "Hello there, general Kenobi."  # FakeTM's default reply


def _error(r: Any, param: str) -> dict[str, Any]:
    """The OpenAI-shaped error of a 400 answer ``r``; asserts its status, JSON type and ``param``."""
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers
    err = r.json()["error"]
    assert err["param"] == param and err["type"] == "BadRequestError", err
    return err


# --------------------------------------------------------------------------- logit_bias


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_vllm_46612_non_integer_logit_bias_key_is_a_400_naming_logit_bias(tok: Any, path: str) -> None:
    """vllm-project/vllm#46612: a ``logit_bias`` key that is not a token id (``"not_a_token_id"``,
    or Swagger UI's placeholder ``"additionalProp1"``) escaped as a bare ``int()`` error with
    ``param: null``. Expected (OpenAI: "Invalid key in 'logit_bias' ... non-negative integers"):
    a 400 with ``param: "logit_bias"`` whose message names the bad key; nothing reaches the
    scheduler; string keys that are ids (the JSON form of every key) are served."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    body = {"model": MODEL, **({"messages": HI} if path == CHAT else {"prompt": "Hi"})}
    for key in ("not_a_token_id", "additionalProp1", "1.5", ""):
        err = _error(tc.post(path, json={**body, "logit_bias": {key: 5}}), "logit_bias")
        assert repr(key) in err["message"] or key in err["message"], err
    assert tm.received == []
    r = tc.post(path, json={**body, "logit_bias": {"100": 5, "7": -100}})
    assert r.status_code == 200, r.text
    assert tm.received[-1].sampling_params["logit_bias"] == {"100": 5.0, "7": -100.0}


def test_vllm_5903_server_keeps_serving_after_an_invalid_request(tok: Any) -> None:
    """vllm-project/vllm#5903: one request with an invalid ``logit_bias`` left the engine dead
    (``AsyncEngineDeadError`` on every later request). Expected: each invalid request -- a key
    that is no token id, a value that is no number or lies outside OpenAI's [-100, 100], an id
    past the vocabulary (the tokenizer's ``len``) -- gets its 400 naming ``logit_bias`` without
    reaching the scheduler, and the next valid requests, streamed and not, are answered in full
    as on a fresh server; the bounds +-100 themselves are served."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    bad = [{"abc": 1}, {"1": "x"}, {"100": 100.5}, {"100": -101}, {str(len(tok)): 1}]
    for bias in bad:
        _error(tc.post(CHAT, json={"model": MODEL, "messages": HI, "logit_bias": bias}), "logit_bias")
    assert tm.received == []
    got = ChatCompletion.model_validate(tc.post(CHAT, json={"model": MODEL, "messages": HI}).json())
    assert got.choices[0].message.content == REPLY
    chunks = [
        ChatCompletionChunk.model_validate(e)
        for e in sse_data_events(tc.post(CHAT, json={"model": MODEL, "messages": HI, "stream": True}))
        if e != "[DONE]"
    ]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    r = tc.post(CHAT, json={"model": MODEL, "messages": HI, "logit_bias": {"100": 100, "7": -100}})
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- penalties


@pytest.mark.parametrize("value", [0, 0.0, -1, -0.5])
def test_sglang_24874_non_positive_repetition_penalty_is_a_400(tok: Any, value: float) -> None:
    """sgl-project/sglang#24874: ``repetition_penalty: 0`` passed validation (range ``[0, 2]``)
    and the penalty kernel divided the logits by it, turning them into inf/NaN and crashing every
    rank. Expected: a 400 naming ``repetition_penalty`` for 0 and negative values, before the
    scheduler; 1.0 (no penalty) and a positive value are served."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    for path, body in ((CHAT, {"messages": HI}), (COMPLETIONS, {"prompt": "Hi"})):
        r = tc.post(path, json={"model": MODEL, **body, "repetition_penalty": value})
        _error(r, "repetition_penalty")
    assert tm.received == []
    for good in (1.0, 1.3):
        r = tc.post(CHAT, json={"model": MODEL, "messages": HI, "repetition_penalty": good})
        assert r.status_code == 200, r.text
        assert tm.received[-1].sampling_params.get("repetition_penalty", 1.0) == good


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_openai_python_287_penalties_outside_minus_two_to_two_are_a_400(tok: Any, path: str) -> None:
    """openai/openai-python#287: ``frequency_penalty: 2.3`` (or -1000) was accepted although the
    reference documents "Number between -2.0 and 2.0" (``presence_penalty`` past 2 was refused).
    Expected (the documented range, both fields alike): a 400 naming the field for values past
    either end, before the scheduler; the ends -2 and 2 and a negative value inside are served
    and reach the sampler as sent."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    base = {"model": MODEL, **({"messages": HI} if path == CHAT else {"prompt": "Hi"})}
    for field in ("frequency_penalty", "presence_penalty"):
        for bad in (2.3, -2.01, 10000, -1000):
            _error(tc.post(path, json={**base, field: bad}), field)
    assert tm.received == []
    for field in ("frequency_penalty", "presence_penalty"):
        for good in (-2, -1.0, 2):
            r = tc.post(path, json={**base, field: good})
            assert r.status_code == 200, r.text
            assert tm.received[-1].sampling_params[field] == good


def test_vllm_9167_best_of_and_n_errors_name_best_of(tok: Any) -> None:
    """vllm-project/vllm#9167: ``best_of`` / ``n`` mismatches failed with errors that did not say
    which field was wrong. Expected (OpenAI: ``best_of`` "must be greater than n", and "results
    cannot be streamed"): a 400 with ``param: "best_of"`` for ``best_of < n``, for ``best_of`` past
    the server's limit and for ``best_of > n`` streamed; nothing reaches the scheduler;
    ``best_of == n`` streams and ``best_of > n`` unstreamed returns ``n`` choices."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    base = {"model": MODEL, "prompt": "Hi", "max_tokens": 2}
    for bad in ({"best_of": 1, "n": 2}, {"best_of": 0}, {"best_of": 100000}, {"best_of": 3, "stream": True}):
        err = _error(tc.post(COMPLETIONS, json={**base, **bad}), "best_of")
        assert "best_of" in err["message"], err
    assert tm.received == []
    got = Completion.model_validate(tc.post(COMPLETIONS, json={**base, "best_of": 3, "n": 2}).json())
    assert [c.index for c in got.choices] == [0, 1]
    r = tc.post(COMPLETIONS, json={**base, "best_of": 2, "n": 2, "stream": True})
    assert r.status_code == 200 and sse_data_events(r)[-1] == "[DONE]", r.text


# --------------------------------------------------------------------------- extra request fields


def test_vllm_12864_extra_fields_on_messages_are_accepted(tok: Any) -> None:
    """vllm-project/vllm#12864 (after #10463): a user turn with OpenAI's ``name`` field, and
    clients' own bookkeeping keys on messages (``id``, ``opts``), were refused with
    ``extra_forbidden`` 400s that OpenAI does not give. Expected: served, the same reply as
    without the extra keys; ``user``, ``metadata`` and ``service_tier`` at the top level are
    accepted too."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    msgs = [
        {"role": "system", "content": "Be brief.", "id": 1947269257, "opts": {"visible": False}},
        {"role": "user", "content": "Hi", "name": "bob", "id": 2},
    ]
    top = {"user": "u-1", "metadata": {"team": "qa"}, "service_tier": "auto", "store": False}
    for body in ({"messages": msgs}, {"messages": HI, **top}):
        r = tc.post(CHAT, json={"model": MODEL, **body})
        assert r.status_code == 200, (body, r.text)
        assert ChatCompletion.model_validate(r.json()).choices[0].message.content == REPLY


@pytest.mark.parametrize("prompt", [[-1], [[-1]], [[5, 6], [7, -3]], [1, 2**31]])
def test_vllm_35231_out_of_range_prompt_token_ids_are_a_400(tok: Any, prompt: list[Any]) -> None:
    """vllm-project/vllm#35231: a completions ``prompt`` of token ids with a negative id
    (``[[-1]]``, found by schema fuzzing) was an HTTP 500. Expected: a 400 naming ``prompt`` for
    negative ids and ids past the vocabulary, flat or nested, before the scheduler; in-vocabulary
    ids (the last id is ``len(tokenizer) - 1``) are served."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    err = _error(tc.post(COMPLETIONS, json={"model": MODEL, "prompt": prompt, "max_tokens": 2}), "prompt")
    assert "prompt" in err["message"], err
    assert tm.received == []
    for ok in ([0, len(tok) - 1], [[5, 6], [7, 8]]):
        r = tc.post(COMPLETIONS, json={"model": MODEL, "prompt": ok, "max_tokens": 2})
        assert r.status_code == 200, r.text


# --------------------------------------------------------------------------- batches and seeds


def test_lmdeploy_2395_batched_prompts_keep_prompt_major_choice_order(tok: Any) -> None:
    """InternLM/lmdeploy#2395: ``/v1/completions`` with a list of prompts answered the choices in
    the wrong order. Expected (OpenAI: choice ``index`` is prompt-major, ``n`` per prompt): with
    two prompts and ``n=2`` the four choices come as indices 0..3 in order, 0-1 for the first
    prompt and 2-3 for the second (``echo`` shows which), the same for token-id prompts and,
    streamed, each chunk's text stays with its index."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    prompts = ["example one", "example two"]
    gen = tok.decode(tok.encode(REPLY, add_special_tokens=False)[:2])
    for prompt, texts in (
        (prompts, prompts),
        ([tok.encode(p, add_special_tokens=False) for p in prompts], prompts),
    ):
        body = {"model": MODEL, "prompt": prompt, "n": 2, "echo": True, "max_tokens": 2}
        got = Completion.model_validate(tc.post(COMPLETIONS, json=body).json())
        assert [c.index for c in got.choices] == [0, 1, 2, 3]
        assert [c.text for c in got.choices] == [texts[i // 2] + gen for i in range(4)]
        streamed: dict[int, str] = {}
        for e in sse_data_events(tc.post(COMPLETIONS, json={**body, "stream": True})):
            if e != "[DONE]":
                for c in e["choices"]:
                    streamed[c["index"]] = streamed.get(c["index"], "") + c["text"]
        assert streamed == {i: texts[i // 2] + gen for i in range(4)}


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_sglang_15746_openai_seed_reaches_the_sampler(tok: Any, path: str) -> None:
    """sgl-project/sglang#15746 (and #5377): requests through the OpenAI client with different
    ``seed`` values gave the same answer -- the seed did not reach the sampler, only
    ``/generate``'s ``sampling_seed`` did. Expected: ``seed`` is forwarded as the sampler's
    ``sampling_seed`` (different seeds differ, a repeat sends the same); with ``n > 1`` each
    sample of a prompt gets its own seed and sample 0 keeps the request's (so ``n=1`` and the
    first of ``n`` are the same draw); no ``seed`` sends none."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    base = {"model": MODEL, **({"messages": HI} if path == CHAT else {"prompt": "Hi"}), "temperature": 0.8}

    def seeds(extra: dict[str, Any]) -> list[Any]:
        r = tc.post(path, json={**base, **extra})
        assert r.status_code == 200, r.text
        sp = tm.received[-1].sampling_params
        return [p.get("sampling_seed") for p in sp] if isinstance(sp, list) else [sp.get("sampling_seed")]

    assert seeds({"seed": 1}) == seeds({"seed": 1}) == [1]
    assert seeds({"seed": 2}) == [2]
    assert seeds({}) == [None]
    per_sample = seeds({"seed": 1, "n": 3})
    assert per_sample[0] == 1 and len(set(per_sample)) == 3, per_sample


def test_vllm_2287_min_p_is_served_streamed_and_not(tok: Any) -> None:
    """vllm-project/vllm#2287: ``min_p`` through the OpenAI server worked unstreamed but the same
    request with ``stream: true`` failed inside the SSE response. Expected: ``min_p`` reaches the
    sampler either way and both answers carry the whole reply; outside [0, 1] it is a 400 naming
    ``min_p`` before any stream starts."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    body = {"model": MODEL, "messages": HI, "min_p": 0.05}
    got = ChatCompletion.model_validate(tc.post(CHAT, json=body).json())
    assert got.choices[0].message.content == REPLY
    assert tm.received[-1].sampling_params["min_p"] == 0.05
    events = [e for e in sse_data_events(tc.post(CHAT, json={**body, "stream": True})) if e != "[DONE]"]
    chunks = [ChatCompletionChunk.model_validate(e) for e in events]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == REPLY
    assert tm.received[-1].sampling_params["min_p"] == 0.05
    for bad in (1.5, -0.1):
        _error(tc.post(CHAT, json={**body, "min_p": bad, "stream": True}), "min_p")


# --------------------------------------------------------------------------- stop


@pytest.mark.parametrize("stop", ["", [""], ["END", ""]])
def test_sglang_38712_empty_stop_string_is_refused(tok: Any, stop: Any) -> None:
    """sgl-project/sglang#38712: an empty string in ``stop`` was never validated; ``"" in text`` is
    always true, so generation ended after one token and the detokenizer cut the output to ``""``
    (vLLM refuses it: "stop cannot contain an empty string"). Expected: a 400 naming ``stop`` on
    both routes, streamed or not, before the scheduler; :class:`SamplingParams` (``/generate``'s
    parameters) refuses it with a ValueError naming ``stop``; ``stop: []`` and ``null`` are no
    stop strings and are served with the whole reply."""
    from sglang_v4.sampling.sampling_params import SamplingParams

    tm = FakeTM(tok)
    tc = app_client(tm)
    for path, body in ((CHAT, {"messages": HI}), (COMPLETIONS, {"prompt": "Hi"})):
        for stream in (False, True):
            _error(tc.post(path, json={"model": MODEL, **body, "stop": stop, "stream": stream}), "stop")
    assert tm.received == []
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=stop).verify()
    for none in ([], None):
        r = tc.post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi", "stop": none})
        assert r.status_code == 200, r.text
        assert Completion.model_validate(r.json()).choices[0].text == REPLY


# --------------------------------------------------------------------------- non-finite numbers


def _strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON (RFC 8259): ``NaN`` / ``Infinity`` raise ValueError."""
    import json

    def refuse(token: str) -> Any:
        raise ValueError(f"non-standard JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_sglang_28153_non_finite_sampling_numbers_are_a_400(tok: Any, literal: str) -> None:
    """sgl-project/sglang#28153: ``temperature: NaN`` (a literal Python's JSON parser accepts)
    passed ``temperature < 0`` and put NaN into the probabilities, a device-side assert that took
    the whole server down; a validation error that echoed the NaN back could also fail to
    serialize (a 500). Expected: for every float sampling field and a ``logit_bias`` value, the
    bare literal (not JSON, RFC 8259) and its string form (``"NaN"``, which pydantic would read
    as a float) are each a 400 whose body is strict JSON -- the string form naming the field --
    on both routes, before the scheduler; the same values given to :class:`SamplingParams`
    raise ValueError naming the field."""
    from sglang_v4.sampling.sampling_params import SamplingParams

    tm = FakeTM(tok)
    tc = app_client(tm)
    fields = ["temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"]
    heads = ((CHAT, '"messages": [{"role": "user", "content": "Hi"}]'), (COMPLETIONS, '"prompt": "Hi"'))
    for path, head in heads:
        for field, value in [(f, literal) for f in fields] + [("logit_bias", f'{{"100": {literal}}}')]:
            for raw in (value, value.replace(literal, f'"{literal}"')):
                body = f'{{"model": "{MODEL}", {head}, "{field}": {raw}}}'
                r = tc.post(path, content=body, headers={"content-type": "application/json"})
                assert r.status_code == 400, (path, field, raw, r.text)
                err = _strict_json(r.text)["error"]
                assert raw == value or err["param"] == field, (raw, err)
    assert tm.received == []
    for field in fields:
        with pytest.raises(ValueError, match=field):
            SamplingParams(**{field: float(literal)}).verify()
