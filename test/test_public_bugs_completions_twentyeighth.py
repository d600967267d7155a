"""A twenty-eighth set of public bug reports, replayed against the legacy ``POST /v1/completions``
route: stop strings never streamed in part (whole and streamed answers equal), prompts given as
token ids (one array, an array of arrays, with ``n``), token ids outside
the vocabulary and array members that are not integers, ``logit_bias`` keyed by words, a streamed
``echo`` with ``logprobs`` covering the prompt's tokens, and the default of an omitted
``max_tokens`` against an explicit ``null``.

Every report passed as it was; the tests are regression guards.

Fixtures: the route in process over ``openai_fake_tm.FakeTM`` (a fixed reply, one token per
streamed output; the engine requests it receives are kept, so a refusal is seen to reach no
engine and an accepted request's ids and sampling parameters can be read), and conftest's
session ``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the real tokenizer manager,
detokenizer and stop checker, writing ``FAKE_TEXT``'s tokens) for the stop strings.
Oracles: the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``tok``: ids, each id's
own text, vocabulary size), the ``openai`` client's types and errors, and the OpenAI API
reference for the legacy completions (``prompt`` as a string, strings, an array of token ids or
an array of such arrays; ``max_tokens`` defaults to 16; ``logit_bias`` maps token ids to a bias;
``echo`` returns the prompt in addition to the completion).
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
REPLY_WORDS = " ".join(f"w{i}" for i in range(30))  # a reply longer than 16 tokens


def _refused(tm: FakeTM, body: dict[str, Any], param: str) -> str:
    """The message of the HTTP 400 that ``body`` gets on ``tm``; asserts its ``param`` and that
    no engine request was made."""
    r = app_client(tm).post(COMPLETIONS, json={"model": MODEL, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param, err
    assert tm.received == []
    return err["message"]


# --------------------------------------------------------------------------- stop strings


@pytest.mark.parametrize(
    ("stop", "include"),
    [("lazy dog", False), (" jumps over", True), ("好，世", False), ("lazy cat", False)],
    ids=["two-tokens", "included", "cjk", "never-matched"],
)
def test_fastchat_3883_stream_never_sends_part_of_a_stop_string(
    plain_fake_server: ServerHandle, tok: Any, stop: str, include: bool
) -> None:
    """lm-sys/FastChat#3883, lm-sys/FastChat#1048 and lm-sys/FastChat#1392 (a stream sent a growing
    part of a stop string, ``Obs`` of ``Observation:``, before the whole string matched, so the
    streamed text held what the unstreamed answer cut). Expected (OpenAI's reference: the
    returned text does not contain the stop sequence): the text is ``FAKE_TEXT``'s decode cut
    where the stop string starts (kept with ``include_stop_str_in_output``), ``finish_reason``
    ``stop``; streamed, the chunks join to exactly that text and no chunk reaches past it; the
    usage of both counts the same completion tokens. A string that never completes (``lazy
    cat``: its first word does occur) holds nothing back for good: the whole text, ``length``."""
    n = len(tok.encode(FAKE_TEXT))
    full = fake_output_text(tok, n)
    at = full.find(stop)
    want = full if at < 0 else full[: at + (len(stop) if include else 0)]
    body = {
        "model": "qa-model",
        "prompt": "Hi",
        "max_tokens": n,
        "stop": [stop],
        "include_stop_str_in_output": include,
    }
    r = post(plain_fake_server, COMPLETIONS, body)
    assert r.status_code == 200, r.text
    whole = Completion.model_validate(r.json())
    assert whole.choices[0].text == want
    assert whole.choices[0].finish_reason == ("length" if at < 0 else "stop")
    events = sse(
        plain_fake_server, COMPLETIONS, {**body, "stream": True, "stream_options": {"include_usage": True}}
    )
    sent = ""
    for e in events[:-1]:
        sent += e["choices"][0]["text"]
        assert want.startswith(sent), (sent, want)
    assert sent == want
    assert events[-1]["choices"] == []
    assert (
        whole.usage is not None and events[-1]["usage"]["completion_tokens"] == whole.usage.completion_tokens
    )


# --------------------------------------------------------------------------- token-id prompts


def test_llm_d_sim_504_token_id_prompts_single_and_batched(tok: Any) -> None:
    """llm-d/llm-d-inference-sim#504 and BerriAI/litellm#18011 (``prompt`` given as token ids, one
    array or an array of arrays, was refused as "neither a list of strings nor a string").
    Expected (OpenAI's reference): one array is one prompt, passed to the engine as those ids,
    with ``usage.prompt_tokens`` its length; an array of two arrays with ``n: 2`` answers four
    choices, indexes ``0 .. 3`` prompt-major, and ``usage.prompt_tokens`` counts each prompt once."""
    a = tok.encode("The capital of France is", add_special_tokens=False)
    b = tok.encode("One plus one", add_special_tokens=False)
    tm = FakeTM(tok)
    comp = oai_client(app_client(tm)).completions.create
    one = comp(model=MODEL, prompt=a, max_tokens=2)
    assert len(one.choices) == 1 and list(tm.received[0].input_ids) == a
    assert one.usage is not None and one.usage.prompt_tokens == len(a)
    many = comp(model=MODEL, prompt=[a, b], max_tokens=2, n=2)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    assert many.usage is not None and many.usage.prompt_tokens == len(a) + len(b)
    assert many.usage.completion_tokens == 4 * 2
    # the engine request, once normalized, holds each prompt's ids once per sample
    got = sorted(tuple(x) for x in tm.received[1].input_ids)
    assert got == sorted([tuple(a), tuple(a), tuple(b), tuple(b)])


@pytest.mark.parametrize(
    "prompt",
    [[1, 2, 4294967295], [[1, 2], [7, 4294967295]], "vocab", [[5], ["vocab"]]],
    ids=["uint32-max", "uint32-max-in-batch", "vocab-size", "vocab-size-in-batch"],
)
def test_dynamo_12916_out_of_vocabulary_token_ids_are_a_400_naming_prompt(tok: Any, prompt: Any) -> None:
    """ai-dynamo/dynamo#12916 (an integer-array prompt holding 4294967295, a length or hash put in
    by a client by mistake, reached the engine and indexed past its embedding table). Expected: an
    HTTP 400 whose ``param`` is ``prompt`` and whose message gives the bad id, before any engine
    request; the vocabulary size itself (one past the last id) likewise; the ``openai`` client
    raises it as ``BadRequestError``."""
    vocab = len(tok)
    if prompt == "vocab":
        prompt, bad = [1, vocab], vocab
    elif prompt == [[5], ["vocab"]]:
        prompt, bad = [[5], [vocab]], vocab
    else:
        bad = 4294967295
    msg = _refused(FakeTM(tok), {"prompt": prompt, "max_tokens": 2}, "prompt")
    assert str(bad) in msg
    tm = FakeTM(tok)
    with pytest.raises(openai.BadRequestError):
        oai_client(app_client(tm)).completions.create(model=MODEL, prompt=prompt, max_tokens=2)
    assert tm.received == []


@pytest.mark.parametrize(
    "prompt",
    [[1, 2.5], [1, None], [1, True], [[1, 2], [3, "x"]], [[1, 2.0]]],
    ids=["float", "null", "bool", "string-in-id-batch", "float-in-batch"],
)
def test_amd_llama_cpp_100_non_integer_token_ids_are_a_400(tok: Any, prompt: Any) -> None:
    """AMD-Ecosystem/llama.cpp#100 (integer-array prompts must refuse members that are not token
    ids: floats, strings, ``null``, booleans). Expected: each is an HTTP 400 whose ``param`` is
    ``prompt``, and no engine request is made (a boolean is not read as the id 1, nor ``2.5`` as
    2)."""
    _refused(FakeTM(tok), {"prompt": prompt, "max_tokens": 2}, "prompt")


# --------------------------------------------------------------------------- logit_bias


def test_openai_kotlin_169_logit_bias_keyed_by_words_is_a_400(tok: Any) -> None:
    """aallam/openai-kotlin#169 (a ``logit_bias`` keyed by words, ``{"an AI language model": -100}``,
    is refused by OpenAI: "Invalid key in 'logit_bias' ... You should only be submitting
    non-negative integers"). Expected: an HTTP 400 whose ``param`` is ``logit_bias`` and whose
    message quotes the key, before any engine request; a key that is a token id (its decimal
    string, the tokenizer's id of a word) is accepted and reaches the engine with its bias."""
    msg = _refused(FakeTM(tok), {"prompt": "Hi", "logit_bias": {"an AI language model": -100}}, "logit_bias")
    assert "an AI language model" in msg
    (word_id,) = tok.encode(" model", add_special_tokens=False)
    tm = FakeTM(tok)
    out = oai_client(app_client(tm)).completions.create(
        model=MODEL, prompt="Hi", max_tokens=2, logit_bias={str(word_id): -100}
    )
    assert len(out.choices) == 1
    got = tm.received[0].sampling_params["logit_bias"]
    assert {int(k): float(v) for k, v in got.items()} == {word_id: -100.0}


# --------------------------------------------------------------------------- echo + logprobs


def test_llama_cpp_15189_streamed_echo_logprobs_cover_the_prompt(tok: Any) -> None:
    """ggml-org/llama.cpp#15189 (``/v1/completions`` with ``stream``, ``echo`` and ``logprobs``:
    the first streamed chunk's text is the prompt followed by the first completion token, its
    ``tokens`` the prompt's tokens then that token, ``token_logprobs`` starting with ``null``,
    ``top_logprobs`` starting with ``null``, ``text_offset`` each token's start). Expected: the
    same here; the prompt's tokens are the tokenizer's ids each decoded alone; over the whole
    stream the tokens join to the joined texts and the offsets run through that text."""
    prompt = "The step of boiling water is:"
    p_ids = tok.encode(prompt, add_special_tokens=False)
    body = {"model": MODEL, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 2, "stream": True}
    events = sse_data_events(app_client(FakeTM(tok)).post(COMPLETIONS, json=body))
    assert events[-1] == "[DONE]"
    choices = [e["choices"][0] for e in events[:-1] if e["choices"]]
    first = choices[0]
    assert first["text"].startswith(prompt) and first["text"] != prompt
    lp = first["logprobs"]
    n = len(p_ids)
    assert lp["tokens"][:n] == [tok.decode([i]) for i in p_ids]
    assert len(lp["tokens"]) == n + 1
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    text = "".join(c["text"] for c in choices)
    tokens = [t for c in choices for t in c["logprobs"]["tokens"]]
    offsets = [o for c in choices for o in c["logprobs"]["text_offset"]]
    assert "".join(tokens) == text
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    assert choices[-1]["finish_reason"] == "length"


# --------------------------------------------------------------------------- max_tokens


def test_openai_python_191_omitted_max_tokens_is_16_and_null_is_unbounded(tok: Any) -> None:
    """openai/openai-python#191 and ml-energy/benchmark#13 (legacy completions stop at 16 tokens
    when ``max_tokens`` is left out: "The default value of max_tokens in v1/completions is 16").
    Expected: with ``max_tokens`` omitted the engine's limit is 16 and a longer reply ends after
    16 tokens with ``finish_reason`` ``length`` (``usage.completion_tokens`` 16); with an explicit
    ``"max_tokens": null`` no such limit is set and the whole reply (its ``transformers`` token
    count) ends with ``stop``."""
    n_reply = len(tok.encode(REPLY_WORDS, add_special_tokens=False))
    assert n_reply > 16
    tm = FakeTM(tok, reply=REPLY_WORDS)
    client = app_client(tm)
    cut = Completion.model_validate(client.post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi"}).json())
    assert tm.received[0].sampling_params["max_new_tokens"] == 16
    assert cut.choices[0].finish_reason == "length"
    assert cut.usage is not None and cut.usage.completion_tokens == 16
    r = client.post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi", "max_tokens": None})
    whole = Completion.model_validate(r.json())
    assert tm.received[1].sampling_params.get("max_new_tokens") is None
    assert whole.choices[0].finish_reason == "stop"
    assert whole.choices[0].text == REPLY_WORDS
    assert whole.usage is not None and whole.usage.completion_tokens == n_reply
