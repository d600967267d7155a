"""A thirty-second set of public bug reports, replayed against the legacy ``POST /v1/completions``
route: ``suffix`` (DeepSeek's fill-in-the-middle prompt) on a batch of prompts, ``echo`` (the
prompt once per choice, at its start; streamed and unstreamed alike; with ``logprobs``; of
token-id prompts), a stop string that is the very first output token while logprobs are asked
for, several stop strings (the earliest in the text wins, not the first listed), vLLM's
``include_stop_str_in_output``, and the ``user`` field.

Every report passed as it was; the tests are regression guards.

Fixtures: the route in process over ``openai_fake_tm.FakeTM`` (a fixed reply, one token per
streamed output; the engine requests it receives are kept), and conftest's shared
``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the real tokenizer manager,
detokenizer and stop checker, writing ``FAKE_TEXT``'s tokens) for the stop strings.
Oracles: the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``tok``: the reply's
text, the FIM markers' ids), DeepSeek's documented FIM prompt format
(``<｜fim▁begin｜>{prefix}<｜fim▁hole｜>{suffix}<｜fim▁end｜>``), plain ``str.find`` on the
unstopped output text, the ``openai`` client's types (``Completion``) and errors, and the OpenAI
API reference for the legacy completions (``echo``: "Echo back the prompt in addition to the
completion"; ``stop``: the returned text will not contain the stop sequence; ``user``: a string).
"""

from __future__ import annotations

from typing import Any

import openai
from openai.types import Completion
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from public_bugs_testutil import post, sse
from server_fixture import FAKE_TEXT, ServerHandle, fake_output_text

MODEL = "dsv4-test"
COMPLETIONS = "/v1/completions"
REPLY = "Hello there, general Kenobi."


def _reply_text(tok: Any, k: int, n_tokens: int) -> str:
    """The fake's reply for sample ``k`` cut to ``n_tokens`` tokens, decoded by ``transformers``."""
    ids = tok.encode(REPLY + (f" #{k}" if k else ""), add_special_tokens=False)
    return tok.decode(ids[:n_tokens])


def _streamed_texts(events: list[Any]) -> dict[int, list[str]]:
    """The ``text`` of every chunk of each choice index, in order (``[DONE]`` left out)."""
    out: dict[int, list[str]] = {}
    for e in events:
        if e == "[DONE]":
            continue
        for c in e["choices"]:
            out.setdefault(c["index"], []).append(c["text"])
    return out


# --------------------------------------------------------------------------- suffix (FIM)


def test_together_python_109_suffix_renders_fim_for_every_prompt(tok: Any) -> None:
    """togethercomputer/together-python#109 (``suffix``, OpenAI's fill-in-the-middle field, was
    refused by the client: "unexpected keyword argument 'suffix'"; the report quotes DeepSeek's
    FIM format). Expected: the ``openai`` client's ``suffix`` with a batch of two prompts reaches
    the engine as one FIM prompt per prompt, ``<｜fim▁begin｜>{prompt}<｜fim▁hole｜>{suffix}
    <｜fim▁end｜>``, whose three markers ``transformers`` encodes as single control tokens (the
    model reads them as FIM, not as text); the answer has one choice per prompt, the middle only
    (no prompt, no suffix)."""
    tm = FakeTM(tok)
    suffix = "):\n    print('hi', name)"
    out = oai_client(app_client(tm)).completions.create(
        model=MODEL, prompt=["def say_hello(", "def greet("], suffix=suffix, max_tokens=2
    )
    markers = ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")
    expected = [f"{markers[0]}{p}{markers[1]}{suffix}{markers[2]}" for p in ("def say_hello(", "def greet(")]
    assert len(tm.received) == 1 and tm.received[0].text == expected
    marker_ids = [tok.encode(m, add_special_tokens=False) for m in markers]
    # DeepSeek-V4's FIM control tokens: begin 128801, hole 128800, end 128802
    assert marker_ids == [[128801], [128800], [128802]]
    ids = tok.encode(expected[0], add_special_tokens=False)
    assert ids[0] == marker_ids[0][0] and ids[-1] == marker_ids[2][0] and marker_ids[1][0] in ids
    assert [c.text for c in out.choices] == [_reply_text(tok, 0, 2)] * 2


def test_together_python_109_suffix_with_token_ids_is_a_400_naming_suffix(tok: Any) -> None:
    """togethercomputer/together-python#109 (as above: the FIM prompt puts text between its
    markers). Expected: ``suffix`` with a prompt of token ids, which has no text to place before
    the gap, is an HTTP 400 whose ``param`` is ``suffix`` (the ``openai`` client's
    ``BadRequestError``), and no engine request is made."""
    tm = FakeTM(tok)
    r = app_client(tm).post(COMPLETIONS, json={"model": MODEL, "prompt": [9, 10, 11], "suffix": ")"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix", r.text
    try:
        oai_client(app_client(tm)).completions.create(model=MODEL, prompt=[9, 10, 11], suffix=")")
    except openai.BadRequestError as e:
        assert e.status_code == 400
    else:
        raise AssertionError("suffix with token ids was accepted")
    assert tm.received == []


# --------------------------------------------------------------------------- echo, streamed


def test_litellm_rs_776_streamed_echo_prefixes_each_choice_once(tok: Any) -> None:
    """majiayu000/litellm-rs#776 (the legacy completions route prepended the echoed prompt to
    every streamed chunk instead of the first only). Expected: prompts ``["Hi", "Bye"]``, ``n: 2``,
    ``echo`` and ``stream``: each of the four choices' first chunk starts with its own prompt, no
    later chunk of it holds the prompt, and its chunks join to the prompt followed by the reply
    (``transformers``' decode) — the prompt exactly once."""
    body = {"model": MODEL, "prompt": ["Hi", "Bye"], "n": 2, "echo": True, "max_tokens": 3, "stream": True}
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json=body))
    assert events[-1] == "[DONE]"
    texts = _streamed_texts(events)
    assert sorted(texts) == [0, 1, 2, 3]
    for i, chunks in texts.items():
        prompt = "Hi" if i < 2 else "Bye"
        assert chunks[0].startswith(prompt)
        assert all(prompt not in c for c in chunks[1:])
        assert "".join(chunks) == prompt + _reply_text(tok, 0, 3)


def test_fastdeploy_3245_streamed_echo_equals_the_unstreamed_answer(tok: Any) -> None:
    """PaddlePaddle/FastDeploy#3245 (``echo`` raised an error unstreamed and was ignored when
    streamed; the fix puts the prompt before the first streamed packet). Expected, with the
    report's Chinese prompt: the unstreamed text is the prompt followed by the reply, and the
    streamed chunks join to the same text."""
    prompt = "以下是你的自我介绍："
    body = {"model": MODEL, "prompt": prompt, "echo": True, "max_tokens": 4}
    whole = Completion.model_validate(app_client(FakeTM(tok)).post(COMPLETIONS, json=body).json())
    assert whole.choices[0].text == prompt + _reply_text(tok, 0, 4)
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json={**body, "stream": True}))
    assert "".join(_streamed_texts(events)[0]) == whole.choices[0].text


def test_vllm_15233_streamed_echo_with_logprobs_scores_the_prompt(tok: Any) -> None:
    """vllm-project/vllm#15233 (with ``echo`` the streamed answer left the prompt out of the
    text and its logprobs). Expected, ``echo`` with ``logprobs: 1``: the streamed chunks' tokens
    and ``token_logprobs`` concatenate to the unstreamed answer's, which begin with the prompt's
    tokens (``transformers``' encoding, each decoded alone) of which only the first has no
    logprob; the tokens join to the text, and every ``text_offset`` is its token's start in it."""
    prompt = "Hello world"
    body = {"model": MODEL, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 2}
    # read as JSON: the ``openai`` client builds its types without validation, and its
    # ``token_logprobs: list[float]`` would refuse the first prompt token's documented null
    whole = app_client(FakeTM(tok)).post(COMPLETIONS, json=body).json()["choices"][0]
    lp = whole["logprobs"]
    prompt_tokens = [tok.decode([t]) for t in tok.encode(prompt, add_special_tokens=False)]
    assert lp["tokens"][: len(prompt_tokens)] == prompt_tokens
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert len(lp["tokens"]) == len(prompt_tokens) + 2
    assert "".join(lp["tokens"]) == whole["text"] == prompt + _reply_text(tok, 0, 2)
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json={**body, "stream": True}))
    chunks = [c for e in events[:-1] for c in e["choices"]]
    for key in ("tokens", "token_logprobs", "text_offset", "top_logprobs"):
        assert [v for c in chunks for v in c["logprobs"][key]] == lp[key], key


def test_trtllm_2259_echo_of_token_id_prompts_is_their_decoded_text(tok: Any) -> None:
    """NVIDIA/TensorRT-LLM#2259 (with ``echo`` and a prompt of token ids the echoed prompt was not
    a string; the fix decodes the ids so ``text`` stays text, as OpenAI's endpoint answers).
    Expected: a batch of two token-id prompts with ``echo`` answers, streamed and not, each
    choice's text as ``transformers``' decode of its own ids followed by the reply."""
    ids = [tok.encode(" The capital of France is", add_special_tokens=False), tok.encode("2 + 2 =")]
    body = {"model": MODEL, "prompt": ids, "echo": True, "max_tokens": 2}
    expected = [tok.decode(x) + _reply_text(tok, 0, 2) for x in ids]
    whole = Completion.model_validate(app_client(FakeTM(tok)).post(COMPLETIONS, json=body).json())
    assert [c.text for c in whole.choices] == expected
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json={**body, "stream": True}))
    assert {i: "".join(t) for i, t in _streamed_texts(events).items()} == dict(enumerate(expected))


# --------------------------------------------------------------------------- stop


def test_llama_cpp_7038_stop_on_the_first_token_with_logprobs(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """ggml-org/llama.cpp#7038 (a server crashed when the stop word was the first token the model
    proposed and logprobs were asked for). Expected: ``stop`` set to the first output token's text
    (``transformers``' decode of ``FAKE_TEXT``'s first token) with ``logprobs: 2`` answers HTTP 200,
    ``finish_reason`` ``stop``, an empty text, and logprobs whose tokens join to that text (one
    ``token_logprobs`` entry per token); streamed, it ends the same way with an empty text."""
    first = fake_output_text(tok, 1)
    assert first.strip() and FAKE_TEXT.startswith(first)
    body = {
        "model": "qa-model",
        "prompt": "Q: hello world\nA: ",
        "max_tokens": 10,
        "stop": [first],
        "logprobs": 2,
    }
    r = post(plain_fake_server, COMPLETIONS, body)
    assert r.status_code == 200, r.text
    choice = Completion.model_validate(r.json()).choices[0]
    assert choice.text == "" and choice.finish_reason == "stop"
    lp = choice.logprobs
    assert lp is not None and lp.tokens is not None and lp.token_logprobs is not None
    assert "".join(lp.tokens) == choice.text and len(lp.token_logprobs) == len(lp.tokens)
    events = sse(plain_fake_server, COMPLETIONS, body)
    assert "".join(c["text"] for e in events for c in e["choices"]) == ""
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["stop"]


def test_aprender_2022_several_stops_cut_at_the_earliest_in_the_text(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """paiml/aprender#2022 and huggingface/text-generation-inference#1999 (a completions backend
    cut at the first *listed* stop string that matched rather than the one earliest in the text;
    another ignored ``stop`` on ``/v1/completions`` altogether). Expected: ``stop: ["lazy dog",
    "quick"]`` on ``FAKE_TEXT`` cuts where ``"quick"`` starts (``str.find`` on the unstopped
    text: earlier than ``"lazy dog"``), ``finish_reason`` ``stop``, vLLM's ``stop_reason``
    ``"quick"``; the streamed chunks join to the same text."""
    n = len(tok.encode(FAKE_TEXT))
    full = fake_output_text(tok, n)
    at = full.find("quick")
    assert 0 < at < full.find("lazy dog")
    body = {"model": "qa-model", "prompt": "Hi", "max_tokens": n, "stop": ["lazy dog", "quick"]}
    r = post(plain_fake_server, COMPLETIONS, body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == full[:at]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == "quick"
    events = sse(plain_fake_server, COMPLETIONS, body)
    assert "".join(c["text"] for e in events for c in e["choices"]) == full[:at]


def test_fastdeploy_3096_include_stop_str_in_output_on_completions(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """PaddlePaddle/FastDeploy#3096 (vLLM's ``include_stop_str_in_output`` added to the
    completions route: with it the matched stop string ends the returned text). Expected:
    ``stop: ["fox"]`` with ``include_stop_str_in_output: true`` answers ``FAKE_TEXT``'s decode up
    to and including ``"fox"`` (``str.find`` on the unstopped text), ``finish_reason`` ``stop``,
    streamed and not alike; without the flag the text ends before ``"fox"``."""
    n = len(tok.encode(FAKE_TEXT))
    full = fake_output_text(tok, n)
    at = full.find("fox")
    assert at > 0
    body = {"model": "qa-model", "prompt": "Hi", "max_tokens": n, "stop": ["fox"]}
    kept = {**body, "include_stop_str_in_output": True}
    r = post(plain_fake_server, COMPLETIONS, kept)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == full[: at + len("fox")] and choice["finish_reason"] == "stop"
    events = sse(plain_fake_server, COMPLETIONS, kept)
    assert "".join(c["text"] for e in events for c in e["choices"]) == full[: at + len("fox")]
    plain = post(plain_fake_server, COMPLETIONS, body)
    assert plain.status_code == 200 and plain.json()["choices"][0]["text"] == full[:at]


# --------------------------------------------------------------------------- user


def test_mattt_openai_3_user_field_is_accepted_and_typed(tok: Any) -> None:
    """mattt/OpenAI#3 (OpenAI's production review asked apps to pass ``user`` — a unique end-user
    id — with every completion call; the client had no such field). Expected: the ``openai``
    client's ``user="user-1234"`` is answered HTTP 200 with the same completion as without it,
    and a ``user`` that is not a string (OpenAI's reference: a string) is an HTTP 400 whose
    ``param`` is ``user``, before any engine request."""
    with_user = oai_client(app_client(FakeTM(tok))).completions.create(
        model=MODEL, prompt="Hi", max_tokens=2, user="user-1234"
    )
    assert with_user.choices[0].text == _reply_text(tok, 0, 2)
    tm = FakeTM(tok)
    r = app_client(tm).post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi", "user": 1234})
    assert r.status_code == 400 and r.json()["error"]["param"] == "user", r.text
    assert tm.received == []
