"""A twenty-sixth set of public bug reports, replayed against the legacy ``POST /v1/completions``
route and its neighbours (``/v1/models``, ``/v1/embeddings``): the integer ``logprobs`` field
(``-1``, counts above OpenAI's 5, the bound's error), echo of text and token-id prompts with and
without logprobs, stop lists (more than four, empty), the default ``max_tokens``, streamed choice
indexes, out-of-vocabulary prompt ids, model lookup, chat-style tokenize and embeddings on a
generation model.

Fixed here: ``logprobs: -1`` ("every token", which vLLM accepts on this field as on chat's
``top_logprobs``, vllm-project/vllm#46175) was a 400 "must be a positive value"; it now stands for
the vocabulary size, checked against ``--max-logprobs`` like every other count. The other reports
passed as-is; their tests are regression guards.

The route runs in process over ``openai_fake_tm.FakeTM`` (a fixed reply, fake logprobs
``-0.5 * (i + 1)`` for output token ``i``; the engine request it receives is kept). Oracles: the
DeepSeek-V4 tokenizer (``tok``: ids, per-token texts, decoded texts, vocabulary size), the
``openai`` client's types and errors, the OpenAI API reference (legacy completions), vLLM's
documented ``--max-logprobs`` rule and messages, and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _app
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402

COMPLETIONS = "/v1/completions"
MODEL = "dsv4-test"  # app_client's served name
REPLY = "Hello there, general Kenobi."  # FakeTM's default reply


def _reply(tok: PreTrainedTokenizerFast, k: int | None = None, reply: str = REPLY) -> str:
    """The fake's text after ``k`` tokens (all when ``None``), decoded by the tokenizer itself."""
    ids = tok.encode(reply, add_special_tokens=False)
    return tok.decode(ids if k is None else ids[:k])


def _post(tm: FakeTM, body: dict[str, Any], **args: Any) -> Any:
    """``POST /v1/completions`` with ``body`` (model added) on ``tm``; ``args`` override the server
    arguments."""
    return _app(tm, **args).post(COMPLETIONS, json={"model": MODEL, **body})


def _ok(tm: FakeTM, body: dict[str, Any], **args: Any) -> Completion:
    """The answer of ``body`` as the ``openai`` client's ``Completion``; asserts HTTP 200."""
    r = _post(tm, body, **args)
    assert r.status_code == 200, r.text
    return Completion.model_validate(r.json())


def _refused(call: Any, param: str) -> str:
    """The message of the ``openai.BadRequestError`` that ``call()`` raises; asserts its ``param``."""
    with pytest.raises(openai.BadRequestError) as ei:
        call()
    assert ei.value.status_code == 400
    assert ei.value.body["param"] == param, ei.value.body
    return ei.value.message


# --------------------------------------------------------------------------- integer logprobs


def test_vllm_46175_logprobs_minus_one_asks_for_the_whole_vocabulary(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#46175: the Completion API turned ``logprobs: -1`` away ("must be a positive
    value") while ``-1`` meant "all logprobs" everywhere else (chat ``top_logprobs``,
    ``prompt_logprobs``). Expected (vLLM's rule: ``-1`` is the vocabulary size, bounded by
    ``--max-logprobs``, default 20): under the default bound a 400 naming ``logprobs`` whose count is
    the tokenizer's vocabulary; with ``--max-logprobs -1`` an answer whose engine request asks for
    ``len(tok)`` top tokens; ``-2`` still a 400. Refused requests never reach the engine."""
    vocab = len(tok)
    tm = FakeTM(tok)
    comp = _oai(_app(tm)).completions.create
    msg = _refused(lambda: comp(model=MODEL, prompt="Hi", max_tokens=2, logprobs=-1), "logprobs")
    assert f"Requested sample logprobs of {vocab}, which is greater than max allowed: 20" in msg
    assert "positive value or -1" in _refused(
        lambda: comp(model=MODEL, prompt="Hi", max_tokens=2, logprobs=-2), "logprobs"
    )
    assert tm.received == []
    out = _ok(tm, {"prompt": "Hi", "max_tokens": 3, "logprobs": -1}, max_logprobs=-1)
    (req,) = tm.received
    assert req.return_logprob and req.top_logprobs_num == vocab
    lp = out.choices[0].logprobs
    assert lp is not None and "".join(lp.tokens or []) == out.choices[0].text == _reply(tok, 3)
    # streamed too: the count is resolved before the stream starts
    r = _post(FakeTM(tok), {"prompt": "Hi", "max_tokens": 3, "logprobs": -1, "stream": True}, max_logprobs=-1)
    assert r.status_code == 200, r.text
    chunks = [e for e in sse_data_events(r) if e != "[DONE]"]
    toks = [
        t for c in chunks for ch in c["choices"] for t in ((ch.get("logprobs") or {}).get("tokens") or [])
    ]
    assert "".join(toks) == _reply(tok, 3)


def test_vllm_5299_more_than_five_logprobs_are_served_up_to_the_bound(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#5299 ("Cannot request more than 5 logprobs"): OpenAI's legacy cap of 5 is
    not a server's; vLLM's bound is ``--max-logprobs`` (20 by default). Expected: ``logprobs: 10``
    answers with the engine asked for 10 top tokens and every ``top_logprobs`` entry holding at
    most ``10 + 1`` keys (OpenAI: the most likely tokens and the sampled one); 20 passes; 21 is a
    400 naming ``logprobs``."""
    tm = FakeTM(tok)
    out = _ok(tm, {"prompt": "Hi", "max_tokens": 4, "logprobs": 10})
    assert tm.received[-1].top_logprobs_num == 10
    lp = out.choices[0].logprobs
    assert lp is not None and lp.top_logprobs is not None and len(lp.top_logprobs) == 4
    assert all(d is not None and 1 <= len(d) <= 11 for d in lp.top_logprobs)
    assert lp.tokens is not None and all(
        d[t] == v for d, t, v in zip(lp.top_logprobs, lp.tokens, lp.token_logprobs or [])
    )
    _ok(tm, {"prompt": "Hi", "max_tokens": 1, "logprobs": 20})
    assert tm.received[-1].top_logprobs_num == 20
    r = _post(tm, {"prompt": "Hi", "max_tokens": 1, "logprobs": 21})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    assert len(tm.received) == 2


def test_helm_2325_logprobs_above_the_maximum_is_an_openai_shaped_400(tok: PreTrainedTokenizerFast) -> None:
    """stanford-crfm/helm#2325: a provider's refusal of too many ``logprobs`` came as
    ``{"error": {"message": "5 is greater than the maximum of 1 - 'logprobs'", "type":
    "invalid_request_error", "param": "logprobs", "code": null}}``, which clients read field by
    field. Expected (the report's shape, the ``openai`` client's ``BadRequestError``): HTTP 400
    whose ``error`` object has a string ``message`` naming the bound, a string ``type``,
    ``param: "logprobs"`` and a ``code``; the ``openai`` client raises ``BadRequestError``."""
    tm = FakeTM(tok, reply="x")
    r = _post(tm, {"prompt": "Hi", "logprobs": 50}, max_logprobs=5)
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and "50" in err["message"] and "5" in err["message"]
    assert isinstance(err["type"], str) and err["param"] == "logprobs"
    c = _oai(_app(tm, max_logprobs=5))
    _refused(lambda: c.completions.create(model=MODEL, prompt="Hi", logprobs=50), "logprobs")
    assert tm.received == []


# --------------------------------------------------------------------------- echo


def test_helm_54_echo_logprobs_first_prompt_token_is_none_the_rest_numbers(
    tok: PreTrainedTokenizerFast,
) -> None:
    """stanford-crfm/helm#54 and facebookresearch/ParlAI#4958: with ``echo`` and ``logprobs`` the
    first token's logprob and top choices are ``None`` (nothing precedes it), and clients skip only
    that one. Expected (OpenAI's legacy shape, the tokenizer's ids and per-token texts): one entry
    per prompt token then per output token; ``token_logprobs[0]`` and ``top_logprobs[0]`` are
    ``None``, every later entry a number and a dict; ``tokens`` join to ``text`` = prompt + output;
    ``text_offset`` advances by each token's length from 0."""
    prompt = "The quick brown fox"
    ids = tok.encode(prompt, add_special_tokens=False)
    r = _post(FakeTM(tok), {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 3})
    assert r.status_code == 200, r.text
    ch = r.json()["choices"][0]
    lp = ch["logprobs"]
    assert ch["text"] == prompt + _reply(tok, 3)
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(ids) + 3
    assert lp["tokens"][: len(ids)] == [tok.decode([i]) for i in ids]
    assert "".join(lp["tokens"]) == ch["text"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert all(isinstance(d, dict) and d for d in lp["top_logprobs"][1:])
    toks = lp["tokens"]
    assert lp["text_offset"] == [sum(len(t) for t in toks[:i]) for i in range(len(toks))]
    # the openai client reads it without validation (its types list floats): the values survive
    c = _oai(_app(FakeTM(tok)))
    got = c.completions.create(model=MODEL, prompt=prompt, echo=True, logprobs=1, max_tokens=3)
    assert got.choices[0].logprobs is not None and got.choices[0].logprobs.token_logprobs is not None
    assert got.choices[0].logprobs.token_logprobs[0] is None
    assert got.choices[0].logprobs.tokens == toks


def test_kserve_3738_echo_without_logprobs_answers_the_prompt_and_no_logprobs(
    tok: PreTrainedTokenizerFast,
) -> None:
    """kserve/kserve#3738: ``echo: true`` without ``logprobs`` failed (a ``None`` list met the
    prompt's logprobs). Expected (OpenAI's reference: ``echo`` echoes back the prompt in addition
    to the completion; ``logprobs`` only when asked): HTTP 200, ``text`` = prompt + output,
    ``logprobs`` null, and the engine not asked for logprobs; with ``max_tokens: 0`` the text is
    the prompt alone."""
    prompt = "Once upon a time"
    tm = FakeTM(tok)
    out = _ok(tm, {"prompt": prompt, "echo": True, "max_tokens": 4})
    assert out.choices[0].text == prompt + _reply(tok, 4)
    assert out.choices[0].logprobs is None and not tm.received[-1].return_logprob
    only = _ok(tm, {"prompt": prompt, "echo": True, "max_tokens": 0})
    assert only.choices[0].text == prompt and only.choices[0].logprobs is None
    assert only.usage is not None and only.usage.completion_tokens == 0


def test_vllm_959_echo_of_token_id_prompts_is_their_decoded_text(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#959: a request that passes only prompt token ids must still be echoed as
    text (the server decodes the ids). Expected (the tokenizer's ``decode``): a one-prompt id list
    echoes ``tok.decode(ids)`` before the output; a batch of two id lists echoes each list's own
    text in its own choice, in prompt order."""
    a = tok.encode("Hello world", add_special_tokens=False)
    b = tok.encode("Jack and Jill", add_special_tokens=False)
    one = _ok(FakeTM(tok), {"prompt": a, "echo": True, "max_tokens": 2})
    assert one.choices[0].text == tok.decode(a) + _reply(tok, 2)
    two = _ok(FakeTM(tok), {"prompt": [a, b], "echo": True, "max_tokens": 2})
    assert [c.index for c in two.choices] == [0, 1]
    assert [c.text for c in two.choices] == [tok.decode(a) + _reply(tok, 2), tok.decode(b) + _reply(tok, 2)]
    assert two.usage is not None and two.usage.prompt_tokens == len(a) + len(b)


# --------------------------------------------------------------------------- stop, max_tokens


def test_sillytavern_1844_more_than_four_stop_strings_are_not_capped(tok: PreTrainedTokenizerFast) -> None:
    """SillyTavern/SillyTavern#1844 (and continuedev/continue#2461): OpenAI's "up to 4" stop
    sequences is its own limit; a local server that refuses or drops the fifth breaks clients that
    send more. Expected: nine stop strings answer HTTP 200 and reach the engine whole, in order."""
    stops = ["\nUser:", "\nAssistant:", "###", "</s>", "<|im_end|>", "Observation:", "END", "\n\n\n", "STOP"]
    tm = FakeTM(tok)
    _ok(tm, {"prompt": "Hi", "max_tokens": 4, "stop": stops})
    assert tm.received[-1].sampling_params["stop"] == stops


def test_promptfoo_280_an_empty_stop_list_means_no_stop(tok: PreTrainedTokenizerFast) -> None:
    """promptfoo/promptfoo#280: ``stop: []`` was refused ("List should have at least 1 item after
    validation, not 0") where it used to mean "no stop sequence". Expected (the report; OpenAI's
    reference makes ``stop`` optional): HTTP 200 with the same text as a request without ``stop``,
    and no stop string reaches the engine."""
    tm = FakeTM(tok)
    with_empty = _ok(tm, {"prompt": "Hi", "max_tokens": 5, "stop": []})
    assert not tm.received[-1].sampling_params.get("stop")
    without = _ok(tm, {"prompt": "Hi", "max_tokens": 5})
    assert with_empty.choices[0].text == without.choices[0].text == _reply(tok, 5)


def test_llama_cpp_python_1056_max_tokens_defaults_to_16(tok: PreTrainedTokenizerFast) -> None:
    """abetlen/llama-cpp-python#1056: every completion ended with ``finish_reason: length`` at a
    different default than the client expected. Expected (OpenAI's API reference for legacy
    completions: ``max_tokens`` "Defaults to 16"): a request without ``max_tokens`` asks the engine
    for 16 new tokens and, on a longer reply, answers 16 completion tokens with
    ``finish_reason: length``; an explicit value wins."""
    long_reply = " ".join(["word"] * 40)
    tm = FakeTM(tok, reply=long_reply)
    out = _ok(tm, {"prompt": "Hi"})
    assert tm.received[-1].sampling_params["max_new_tokens"] == 16
    assert out.choices[0].finish_reason == "length"
    assert out.usage is not None and out.usage.completion_tokens == 16
    assert out.choices[0].text == _reply(tok, 16, long_reply)
    _ok(tm, {"prompt": "Hi", "max_tokens": 30})
    assert tm.received[-1].sampling_params["max_new_tokens"] == 30


# --------------------------------------------------------------------------- streaming


def test_tgi_1648_streamed_choice_index_is_the_choice_not_the_token(tok: PreTrainedTokenizerFast) -> None:
    """huggingface/text-generation-inference#1648: streamed chunks carried the token's position as
    the choice ``index`` (1, 2, 3...). Expected (OpenAI's reference: "The index of the choice in the
    list of choices"): a one-choice stream has index 0 on every chunk; with ``n: 2`` the indexes
    are 0 and 1 only, and each index's joined text is its own sample (the fake's second sample
    ends in `` #1``), with one ``finish_reason`` each."""
    r = _post(FakeTM(tok), {"prompt": "Hi", "max_tokens": 32, "stream": True})
    chunks = [e for e in sse_data_events(r) if e != "[DONE]"]
    assert len(chunks) > 2 and {ch["index"] for c in chunks for ch in c["choices"]} == {0}
    r = _post(FakeTM(tok), {"prompt": "Hi", "max_tokens": 32, "n": 2, "stream": True})
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for c in (e for e in sse_data_events(r) if e != "[DONE]"):
        for ch in c["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
            if ch.get("finish_reason"):
                finishes.setdefault(ch["index"], []).append(ch["finish_reason"])
    assert texts == {0: REPLY, 1: _reply(tok, None, REPLY + " #1")}
    assert finishes == {0: ["stop"], 1: ["stop"]}


# --------------------------------------------------------------------------- bad input, neighbours


def test_vllm_45441_out_of_vocabulary_prompt_id_is_a_400_before_the_engine(
    tok: PreTrainedTokenizerFast,
) -> None:
    """vllm-project/vllm#45441 (and ai-dynamo/dynamo#14475): a token-id prompt holding an id at or
    past the vocabulary reached the engine and aborted it for every user. Expected (the tokenizer's
    vocabulary size): HTTP 400 naming ``prompt`` and the offending position, for a flat and for a
    batched id list; nothing reaches the engine; the next valid request is served."""
    vocab = len(tok)
    tm = FakeTM(tok)
    for prompt, where in (([1, vocab], "prompt[1]"), ([[5, 6], [1, vocab + 7]], "prompt[1][1]")):
        r = _post(tm, {"prompt": prompt, "max_tokens": 2})
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "prompt" and where in err["message"], err
    assert tm.received == []
    ok = _ok(tm, {"prompt": [1, vocab - 1], "max_tokens": 2})
    assert ok.choices[0].text == _reply(tok, 2) and len(tm.received) == 1


def test_kekzl_imp_1599_models_retrieve_finds_the_served_model_and_404s_others(
    tok: PreTrainedTokenizerFast,
) -> None:
    """kekzl/imp#1599 (``GET /v1/models/{model}`` unregistered, so ``models.retrieve()`` 404'd) and
    epam/ai-dial-chat#7926 (an unknown model answered 200 with an empty body). Expected (OpenAI's
    models reference, the ``openai`` client's types): ``models.retrieve`` of the served name is
    that model object (``object: "model"``) and the same one ``models.list`` holds; an unknown
    name raises ``openai.NotFoundError`` (HTTP 404) with an error body."""
    c = _oai(_app(FakeTM(tok)))
    m = c.models.retrieve(MODEL)
    assert m.id == MODEL and m.object == "model"
    assert [x.id for x in c.models.list().data] == [MODEL]
    with pytest.raises(openai.NotFoundError) as ei:
        c.models.retrieve("definitely-not-a-real-model-xyz")
    assert ei.value.status_code == 404 and isinstance(ei.value.body, dict) and ei.value.body.get("message")


def test_ollama_1577_embeddings_on_a_generation_model_is_a_400_not_a_500(
    tok: PreTrainedTokenizerFast,
) -> None:
    """ollama/ollama#1577: embedding requests failed as HTTP 500 ``failed to generate embedding``,
    which clients read as a server fault and retry. Expected (HTTP semantics: the request asks for
    what this server does not serve): the ``openai`` client's ``embeddings.create`` raises
    ``BadRequestError`` (400) with an explanatory message, never ``InternalServerError``, and no
    generation request reaches the engine."""
    tm = FakeTM(tok)
    c = _oai(_app(tm))
    with pytest.raises(openai.BadRequestError) as ei:
        c.embeddings.create(model=MODEL, input="hello")
    assert ei.value.status_code == 400 and "embedding" in ei.value.message
    assert tm.received == []


def test_sonar_592_chat_style_tokenize_counts_the_rendered_chat_prompt(tok: PreTrainedTokenizerFast) -> None:
    """dphnAI/sonar#592: ``/v1/tokenize`` with chat ``messages`` answers the ids of the chat
    template's prompt with ``count`` and ``max_model_len``, and ``/v1/detokenize`` of those ids
    gives that prompt back. Expected (DeepSeek's own converter and V4 encoder, ``deepseek-recipe``,
    thinking off as the chat route's default; the tokenizer's ids): ``tokens`` decode to DeepSeek's
    prompt text, ``count == len(tokens)``, ``max_model_len`` is the served context (4096 here),
    detokenize's ``prompt`` (special tokens kept) is the same text, and the chat route renders the
    very same prompt."""
    pytest.importorskip("deepseek_recipe")
    from deepseek_recipe_testutil import recipe_prompt

    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
    want = recipe_prompt(body, thinking=False)
    tm = FakeTM(tok)
    c = _app(tm)
    r = c.post("/v1/tokenize", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    got = r.json()
    assert tok.decode(got["tokens"]) == want
    assert got["count"] == len(got["tokens"]) and got["max_model_len"] == tm.context_len
    # SGLang's detokenize skips special tokens by default; kept, the ids give the prompt back
    back = c.post(
        "/v1/detokenize", json={"model": MODEL, "tokens": got["tokens"], "skip_special_tokens": False}
    )
    assert back.status_code == 200 and back.json()["prompt"] == want
    chat = c.post("/v1/chat/completions", json={"model": MODEL, **body, "max_tokens": 2})
    assert chat.status_code == 200, chat.text
    (req,) = tm.received
    assert (req.text if req.text is not None else tok.decode(req.input_ids)) == want
    assert chat.json()["usage"]["prompt_tokens"] == got["count"]
