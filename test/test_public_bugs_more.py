"""More public bug reports of SGLang and vLLM servers on the API surface (output limits, usage,
logprobs, batches, stream framing, the tokenizer route, Responses), replayed on a real CPU server
(embedded model, ``--context-length 1024 --enable-cache-report``: the session's
``more_bugs_server``, shared with :mod:`test_public_bugs_more_outputs`); each test names its
report.

Faults found here, fixed:

* ``max_completion_tokens`` on ``/v1/completions`` was silently ignored (the request ran with the
  default 16 tokens; vllm-project/vllm-ascend#15931). It is chat's name of the same limit, which
  guides and clients send to the completions route too; it is now honoured there as on chat (it
  wins over ``max_tokens`` when both are set, a negative one is a 400 naming it).
* Streamed chat with ``stream_options.continuous_usage_stats`` reported ``reasoning_tokens: 0`` on
  every running usage chunk of a thinking request (vllm-project/vllm-ascend#10777 reports the
  same zero on the final usage); only the usage chunk after the finish counted them. Each
  running usage now counts the reasoning tokens generated so far, as the final one does.
* ``/tokenize`` ignored vLLM's ``return_token_strs`` (vllm-project/vllm#18928): it now answers
  ``token_strs``, the tokenizer's token strings of the ids, as vLLM does.

Reports replayed that showed no fault here (the tests keep them so): ``max_completion_tokens``
counts the reasoning tokens (vllm-project/vllm#28266, vllm-project/vllm#19861);
``top_logprobs_num`` on ``/generate`` (sgl-project/sglang#12418); streamed top logprobs per token,
one token or several per chunk (sgl-project/sglang#5761, sgl-project/sglang#39260); legacy
completions ``logprobs: 0`` (xorbitsai/inference#5270) and ``echo`` with ``logprobs``, streamed or
not (ggml-org/llama.cpp#27174, vllm-project/vllm#15119); a batch of ``input_ids`` lists
(sgl-project/sglang#19435); no usage for ``stream_options: {}`` (vllm-project/vllm#36379);
cumulative per-choice continuous usage and the final usage over all choices
(vllm-project/vllm#9357); Anthropic ``cache_read_input_tokens`` apart from ``input_tokens``
(sgl-project/sglang#25876); ``/v1/embeddings`` on a generation model is a 400 and the server keeps
serving (sgl-project/sglang#8256); the finish chunk's shape (vllm-project/vllm#19650,
vllm-project/vllm#35705); a Responses turn on ``previous_response_id`` does not inherit the
earlier ``instructions`` (vllm-project/vllm#37697).

Oracles: the served model's tokenizer (ids, token strings, counts), the non-streamed answer of
the same greedy request, single requests for a batch, the chat route's counts for the Anthropic
and Responses routes, the ``openai`` / ``anthropic`` clients' parsers, the reports' stated
expectations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from public_bugs_testutil import MODEL, USER, generate, post, sse, think_end_id
from server_fixture import ServerHandle

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> Iterator[ServerHandle]:
    yield more_bugs_server


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


# --------------------------------------------------------------------------- output limits


def test_vllm_ascend_15931_max_completion_tokens_on_completions(server: ServerHandle, client: Any) -> None:
    """vllm-project/vllm-ascend#15931: ``max_completion_tokens`` sent to ``/v1/completions`` was
    ignored (16 tokens whatever its value). It limits the output there as on chat, and wins over
    ``max_tokens``; a negative one is a 400 naming it."""
    for limit in (3, 20):
        r = client.completions.create(
            model=MODEL,
            prompt="Hi",
            temperature=0,
            extra_body={"max_completion_tokens": limit, "ignore_eos": True},
        )
        assert r.usage.completion_tokens == limit and r.choices[0].finish_reason == "length"
    r = client.completions.create(
        model=MODEL, prompt="Hi", max_tokens=9, extra_body={"max_completion_tokens": 4, "ignore_eos": True}
    )
    assert r.usage.completion_tokens == 4
    bad = post(server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_completion_tokens": -1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_completion_tokens", bad.text


def test_vllm_28266_max_completion_tokens_counts_the_reasoning(client: Any, mtok: Any) -> None:
    """vllm-project/vllm#28266 / vllm-project/vllm#19861: OpenAI's ``max_completion_tokens`` bounds
    reasoning and answer together. A thinking request whose reasoning never ends (``</think>``
    banned) stops at the limit with every token counted as reasoning."""
    ban = {str(think_end_id(mtok)): -100}
    r = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        max_completion_tokens=5,
        temperature=0,
        logit_bias=ban,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    assert r.usage.completion_tokens_details.reasoning_tokens == 5
    assert len(mtok.encode(r.choices[0].message.reasoning_content, add_special_tokens=False)) <= 5 + 1


def test_vllm_ascend_10777_reasoning_tokens_in_every_usage(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm-ascend#10777 (``reasoning_tokens`` 0 for thinking requests): the final
    usage counts them, streamed or not, and so does every running usage chunk of
    ``continuous_usage_stats`` (they said 0 until the finish). Reasoning never ends here
    (``</think>`` banned), so every generated token so far is a reasoning token."""
    body = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 6,
        "temperature": 0,
        "logit_bias": {str(think_end_id(mtok)): -100},
        "chat_template_kwargs": {"thinking": True},
    }
    usage = post(server, "/v1/chat/completions", body).json()["usage"]
    assert usage["completion_tokens"] == 6 and usage["completion_tokens_details"]["reasoning_tokens"] == 6
    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = sse(server, "/v1/chat/completions", {**body, "stream_options": opts})
    running = [c["usage"] for c in chunks]
    assert running[-1]["completion_tokens_details"]["reasoning_tokens"] == 6
    assert max(u["completion_tokens"] for u in running) == 6
    for u in running:
        assert u["reasoning_tokens"] == u["completion_tokens"], running


# --------------------------------------------------------------------------- logprobs


def test_sglang_12418_generate_top_logprobs_num(server: ServerHandle) -> None:
    """sgl-project/sglang#12418: ``/generate`` with ``top_logprobs_num`` gave no top-k lists.
    Each step has ``k`` ``(logprob, id, text)`` entries in descending order; at temperature 0 the
    chosen token is the first of them with the same logprob; texts with
    ``return_text_in_logprobs``."""
    k = 4
    body = {
        "text": "Hi",
        "sampling_params": {"max_new_tokens": 5, "temperature": 0},
        "return_logprob": True,
        "top_logprobs_num": k,
        "return_text_in_logprobs": True,
    }
    meta = generate(server, body)["meta_info"]
    chosen, tops = meta["output_token_logprobs"], meta["output_top_logprobs"]
    assert len(chosen) == len(tops) == 5
    for (lp, tid, _), top in zip(chosen, tops):
        assert len(top) == k and len({t[1] for t in top}) == k
        assert [t[0] for t in top] == sorted((t[0] for t in top), reverse=True)
        assert top[0][1] == tid and top[0][0] == pytest.approx(lp)
        assert all(isinstance(t[2], str) for t in top)


def _chat_top(choice_lp: Any) -> list[tuple[str, float, list[tuple[str, float]]]]:
    return [(t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs]) for t in choice_lp.content]


@pytest.mark.parametrize("interval", [1, 3])
def test_sglang_5761_39260_streamed_top_logprobs_per_token(client: Any, interval: int) -> None:
    """sgl-project/sglang#5761 (every streamed token carried the same top logprobs, with
    ``-3.4e38`` entries) and sgl-project/sglang#39260 (a chunk of several tokens repeated the
    first token's alternatives): streamed, one token per chunk or three (``stream_interval``),
    the per-token entries equal the non-streamed answer's, and differ from token to token."""
    kw: dict[str, Any] = dict(
        model=MODEL, messages=USER, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    want = _chat_top(client.chat.completions.create(**kw).choices[0].logprobs)
    got: list[Any] = []
    stream = client.chat.completions.create(**kw, stream=True, extra_body={"stream_interval": interval})
    for ch in stream:
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            got += _chat_top(ch.choices[0].logprobs)
    assert got == want
    assert len({tuple(t[2]) for t in got}) == len(got)
    assert all(-1e4 < lp <= 0 for t in got for _, lp in t[2])
    legacy = dict(model=MODEL, prompt="Hi", max_tokens=6, temperature=0, logprobs=3)
    lp = client.completions.create(**legacy).choices[0].logprobs
    seen: list[Any] = []
    for ch in client.completions.create(**legacy, stream=True, extra_body={"stream_interval": interval}):
        if ch.choices and ch.choices[0].logprobs:
            s = ch.choices[0].logprobs
            seen += list(zip(s.tokens, s.token_logprobs, s.top_logprobs))
    assert seen == list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))


def test_xorbits_5270_completions_logprobs_zero(client: Any) -> None:
    """xorbitsai/inference#5270 (review): legacy completions ``logprobs: 0`` asks for the chosen
    tokens' logprobs with no alternatives; it must not read as "off"."""
    r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=3, temperature=0, logprobs=0)
    lp = r.choices[0].logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == 3
    assert all(x is not None and x <= 0 for x in lp.token_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text


def test_llama_cpp_27174_vllm_15119_echo_with_logprobs(client: Any, mtok: Any) -> None:
    """ggml-org/llama.cpp#27174 (``echo`` + ``logprobs`` gave the generated tokens' entries only:
    every loglikelihood eval scored 0) and vllm-project/vllm#15119 (``echo`` dropped when
    streamed): the prompt's tokens come first, one entry each (``null`` logprob for the first),
    then the generated ones; their texts make up the echoed text, streamed or not."""
    prompt = "The capital of France is Paris"
    n_prompt = len(mtok.encode(prompt))
    kw: dict[str, Any] = dict(model=MODEL, prompt=prompt, max_tokens=2, temperature=0, echo=True, logprobs=1)
    r = client.completions.create(**kw)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert r.usage.prompt_tokens == n_prompt and len(lp.tokens) == n_prompt + 2
    assert lp.token_logprobs[0] is None and all(x is not None for x in lp.token_logprobs[1:])
    assert text.startswith(prompt) and "".join(lp.tokens) == text
    streamed_text, streamed = "", []
    for ch in client.completions.create(**kw, stream=True):
        for c in ch.choices:
            streamed_text += c.text
            streamed += list(zip(c.logprobs.tokens, c.logprobs.token_logprobs)) if c.logprobs else []
    assert streamed_text == text and streamed == list(zip(lp.tokens, lp.token_logprobs))


# --------------------------------------------------------------------------- batches, usage


def test_sglang_19435_generate_batch_of_input_ids(server: ServerHandle) -> None:
    """sgl-project/sglang#19435 (``input_ids should be a list of lists for batch processing``): a
    batch of id lists runs as a batch, each answer the one its ids get alone (greedy)."""
    batch = [[19923, 2058, 33310], [4, 5]]
    sp = {"max_new_tokens": 4, "temperature": 0}
    outs = generate(server, {"input_ids": batch, "sampling_params": sp})
    assert isinstance(outs, list) and len(outs) == 2
    for ids, out in zip(batch, outs):
        alone = generate(server, {"input_ids": ids, "sampling_params": sp})
        assert out["output_ids"] == alone["output_ids"] and out["meta_info"]["prompt_tokens"] == len(ids)


def test_vllm_36379_empty_stream_options_sends_no_usage(server: ServerHandle) -> None:
    """vllm-project/vllm#36379: ``stream_options: {}`` sent usage chunks. Usage comes only with
    ``include_usage: true``, on either route."""
    for path, body in (
        ("/v1/chat/completions", {"messages": USER}),
        ("/v1/completions", {"prompt": "Hi"}),
    ):
        chunks = sse(server, path, {"model": MODEL, **body, "max_tokens": 3, "stream_options": {}})
        assert chunks and all(c.get("usage") is None for c in chunks), chunks


def test_vllm_9357_continuous_usage_is_cumulative_per_choice(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#9357: continuous usage stats must be cumulative, and the final usage the
    total over all choices. With ``n: 2`` each choice's running ``completion_tokens`` grows by
    the tokens it streamed, the last usage sums both choices, ``prompt_tokens`` is the prompt's."""
    prompt = "The capital of France is"
    opts = {"include_usage": True, "continuous_usage_stats": True}
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "n": 2, "temperature": 1, "ignore_eos": True}
    chunks = sse(server, "/v1/completions", {**body, "stream_options": opts})
    per_choice: dict[int, list[int]] = {}
    for c in chunks[:-1]:
        per_choice.setdefault(c["choices"][0]["index"], []).append(c["usage"]["completion_tokens"])
    assert sorted(per_choice) == [0, 1]
    for counts in per_choice.values():
        assert counts == sorted(counts) and counts[-1] == 4
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 8
    assert final["usage"]["prompt_tokens"] == len(mtok.encode(prompt))


def test_sglang_25876_anthropic_cache_read_tokens(server: ServerHandle) -> None:
    """sgl-project/sglang#25876: Anthropic usage counted cached prompt tokens twice. On a repeated
    long prompt ``cache_read_input_tokens`` is the chat route's ``cached_tokens`` and
    ``input_tokens`` the rest of its ``prompt_tokens``, streamed or not."""
    claude = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    text = "DeepSeek-V4 caches compressed KV. " * 40 + "Anthropic?"
    msgs = [{"role": "user", "content": text}]
    claude.messages.create(model=MODEL, max_tokens=2, messages=msgs)  # fills the cache
    chat = post(server, "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 2}).json()
    prompt, cached = chat["usage"]["prompt_tokens"], chat["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    m = claude.messages.create(model=MODEL, max_tokens=2, messages=msgs)
    assert (m.usage.cache_read_input_tokens, m.usage.input_tokens) == (cached, prompt - cached)
    with claude.messages.stream(model=MODEL, max_tokens=2, messages=msgs) as s:
        final = s.get_final_message()
    assert (final.usage.cache_read_input_tokens, final.usage.input_tokens) == (cached, prompt - cached)


def test_sglang_8256_embeddings_on_a_generation_model(server: ServerHandle) -> None:
    """sgl-project/sglang#8256 (an embedding request on a model that does not embed hit an
    assertion in the scheduler): ``/v1/embeddings`` on this generation model is a 4xx in OpenAI's
    error shape and the server keeps serving."""
    r = post(server, "/v1/embeddings", {"model": MODEL, "input": "Hi"})
    assert 400 <= r.status_code < 500 and r.json()["error"]["message"], r.text
    assert (
        generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


# --------------------------------------------------------------------------- stream framing


def test_vllm_19650_35705_finish_chunk_shape(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#19650 (streamed chat chunks lost their ``"finish_reason": null``) and
    vllm-project/vllm#35705 (the last content came in the chunk that carried the finish reason):
    every chunk has the ``finish_reason`` key, ``null`` until the last chunk of the choice, which
    has an empty delta; for a length cut, an EOS stop and a thinking request alike."""
    bodies = [
        {"max_tokens": 3},
        {"max_tokens": 3, "logit_bias": {str(mtok.eos_token_id): 100}},
        {"max_tokens": 3, "chat_template_kwargs": {"thinking": True}},
    ]
    for extra, want in zip(bodies, ("length", "stop", "length")):
        chunks = sse(server, "/v1/chat/completions", {"model": MODEL, "messages": USER, **extra})
        choices = [c["choices"][0] for c in chunks]
        assert all("finish_reason" in ch for ch in choices), choices
        assert [ch["finish_reason"] for ch in choices[:-1]] == [None] * (len(choices) - 1)
        last = choices[-1]
        assert last["finish_reason"] == want
        assert not any(last["delta"].get(k) for k in ("content", "reasoning_content", "tool_calls")), last


# --------------------------------------------------------------------------- tokenizer, Responses


def test_vllm_18928_tokenize_return_token_strs(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#18928 (vllm-project/vllm#18941 added it): ``/tokenize`` with
    ``return_token_strs`` also answers ``token_strs``, the tokenizer's token strings of the ids
    (``convert_ids_to_tokens``), for a text, a list of texts and messages; without the flag the
    field is left out."""
    for path in ("/tokenize", "/v1/tokenize"):
        r = post(server, path, {"prompt": "Hello world! 上海", "return_token_strs": True}).json()
        assert r["tokens"] == mtok.encode("Hello world! 上海")
        assert r["token_strs"] == mtok.convert_ids_to_tokens(r["tokens"]) and r["count"] == len(
            r["token_strs"]
        )
    r = post(server, "/tokenize", {"prompt": ["Hello world!", "Bye"], "return_token_strs": True}).json()
    assert r["token_strs"] == [mtok.convert_ids_to_tokens(ids) for ids in r["tokens"]]
    r = post(server, "/tokenize", {"messages": USER, "return_token_strs": True}).json()
    assert r["token_strs"] == mtok.convert_ids_to_tokens(r["tokens"]) and "<｜User｜>" in r["token_strs"]
    assert "token_strs" not in post(server, "/tokenize", {"prompt": "Hello"}).json()


def test_vllm_37697_instructions_do_not_carry_over(server: ServerHandle) -> None:
    """vllm-project/vllm#37697: with ``previous_response_id`` the earlier response's
    ``instructions`` were kept in the prompt (OpenAI: they are not carried over). The next turn's
    prompt counts as the chat conversation without that system message (with the new
    ``instructions`` as the system message when given)."""
    first = post(
        server,
        "/v1/responses",
        {
            "model": MODEL,
            "input": "Hi",
            "instructions": "You are a pirate who rhymes.",
            "max_output_tokens": 4,
            "temperature": 0,
        },
    ).json()
    said = first["output"][-1]["content"][0]["text"]
    convo = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "Again"},
    ]
    for instructions in (None, "Be brief."):
        body = {"model": MODEL, "input": "Again", "previous_response_id": first["id"], "max_output_tokens": 1}
        if instructions:
            body["instructions"] = instructions
        got = post(server, "/v1/responses", body).json()["usage"]["input_tokens"]
        msgs = ([{"role": "system", "content": instructions}] if instructions else []) + convo
        chat = post(
            server, "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 1}
        ).json()
        assert got == chat["usage"]["prompt_tokens"], (instructions, got, chat["usage"])
