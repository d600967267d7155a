"""A twenty-seventh set of public bug reports, replayed against ``POST /v1/chat/completions``: the
OpenAI fields a server must honour rather than accept and ignore (``n``, ``logprobs`` /
``top_logprobs``, ``stop``, ``max_completion_tokens`` and its precedence over the deprecated
``max_tokens``), the usage-only chunk that ``stream_options.include_usage`` adds at the end of a
stream (``n`` choices too), the output hints ``prediction`` / ``verbosity`` that a server
without them accepts and ignores, the ``developer`` role, and the UTF-8 ``bytes`` of chat
logprobs.

Every report passed as-is; the tests are regression guards.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier; its
choice ``k`` > 0 writes ``" #k"`` after the reply); stop strings run through the scheduler's real
finish check and the detokenizer (``stop_strings_testutil``). Oracles: the ``openai`` client's
types and its own stream reader, the DeepSeek-V4 tokenizer's ids and counts, DeepSeek's own
converter and V4 encoder (``deepseek-recipe``) for the prompt, plain string operations for the
text a stop string leaves, and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")
pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from sglang_v4.sampling.sampling_params import SamplingParams  # noqa: E402
from stop_strings_testutil import generate_with_stops  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
REPLY = "Hello there, how are you today?"


def _ids(tok: PreTrainedTokenizerFast, text: str) -> list[int]:
    """The DeepSeek tokenizer's ids of ``text`` (no special tokens added)."""
    return tok.encode(text, add_special_tokens=False)


def _answer(tm: FakeTM, body: dict[str, Any]) -> ChatCompletion:
    """The non-streamed answer to ``body`` (``messages`` ``HI`` unless set) as the client types
    it; HTTP 200 asserted."""
    r = _client(tm).post(CHAT, json={"model": MODEL, "messages": HI, **body})
    assert r.status_code == 200, r.text
    return ChatCompletion.model_validate(r.json())


# --------------------------------------------------------------------------- honoured fields


def test_ocp_470_n_logprobs_and_max_completion_tokens_are_honoured(tok: PreTrainedTokenizerFast) -> None:
    """dtzp555-max/ocp#470 (``n: 3`` answered one choice, ``logprobs: true`` + ``top_logprobs``
    answered none, ``max_completion_tokens`` capped nothing, all with HTTP 200): ``n: 3`` is three
    choices indexed 0..2; each carries ``logprobs.content`` of its own tokens (their texts join to
    its content, ``top_logprobs`` entries as asked); ``max_completion_tokens: 4`` cuts each at 4
    tokens with ``finish_reason: "length"``, and the usage counts 3 x 4 completion tokens on the
    prompt's tokens. Oracle: the DeepSeek tokenizer's ids of the reply and of DeepSeek's own
    prompt (``deepseek-recipe``)."""
    cap = 4
    done = _answer(
        FakeTM(tok, reply=REPLY),
        {"n": 3, "logprobs": True, "top_logprobs": 2, "max_completion_tokens": cap},
    )
    assert [c.index for c in done.choices] == [0, 1, 2]
    want = tok.decode(_ids(tok, REPLY)[:cap])
    for c in done.choices:
        assert c.message.content == want
        assert c.finish_reason == "length"
        assert c.logprobs is not None and c.logprobs.content is not None
        entries = c.logprobs.content
        assert len(entries) == cap
        assert "".join(e.token for e in entries) == want
        assert all(len(e.top_logprobs) == 2 for e in entries)
    assert done.usage is not None
    assert done.usage.completion_tokens == 3 * cap
    assert done.usage.prompt_tokens == len(_ids(tok, recipe_prompt({"messages": HI}, thinking=False)))
    assert done.usage.total_tokens == done.usage.prompt_tokens + 3 * cap


def test_ocp_470_stop_reaches_the_engine_and_cuts_the_text(tok: PreTrainedTokenizerFast) -> None:
    """dtzp555-max/ocp#470 (``stop`` was accepted and had no effect): the request's ``stop``
    strings reach the engine request's sampling parameters, and those parameters, run through the
    scheduler's finish check and the detokenizer on the reply's tokens, end the text just before
    the first stop string (the stop string itself not returned, as OpenAI's ``stop`` reads).
    Oracle: ``str.split`` on the reply."""
    tm = FakeTM(tok, reply=REPLY)
    _answer(tm, {"stop": ["how", "never"], "max_tokens": 64})
    sp = tm.received[-1].sampling_params or {}
    assert sp.get("stop") == ["how", "never"]
    _, text = generate_with_stops(tok, SamplingParams(stop=sp["stop"]), _ids(tok, REPLY))
    assert text == REPLY.split("how")[0]


def test_vllm_metal_56_max_completion_tokens_wins_over_max_tokens(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm-metal#56 (``max_completion_tokens`` was not read, only the deprecated
    ``max_tokens``; the fix takes ``max_completion_tokens`` first and falls back to
    ``max_tokens``, as vLLM does): with both set, the engine's token limit is
    ``max_completion_tokens`` whichever is larger; with only ``max_tokens`` it is that. Oracle:
    the fix's stated precedence and OpenAI's reference (``max_tokens`` deprecated in favour of
    ``max_completion_tokens``)."""
    for body, limit in (
        ({"max_tokens": 2, "max_completion_tokens": 6}, 6),
        ({"max_tokens": 6, "max_completion_tokens": 2}, 2),
        ({"max_tokens": 3}, 3),
    ):
        tm = FakeTM(tok, reply=REPLY)
        done = _answer(tm, body)
        assert (tm.received[-1].sampling_params or {}).get("max_new_tokens") == limit, body
        assert done.usage is not None and done.usage.completion_tokens == limit, body
        assert done.choices[0].message.content == tok.decode(_ids(tok, REPLY)[:limit]), body


# --------------------------------------------------------------------------- usage chunk


@pytest.mark.parametrize("n", [1, 2])
def test_meilisearch_6477_usage_chunk_has_empty_choices_and_the_counts(
    tok: PreTrainedTokenizerFast, n: int
) -> None:
    """meilisearch/meilisearch#6477 (a client treated a chunk with an empty ``choices`` list as
    the end of the stream; OpenAI's streaming reference: with ``stream_options.include_usage`` an
    extra chunk before ``data: [DONE]`` carries ``usage`` and an empty ``choices`` list, and every
    other chunk has ``usage: null``): the last chunk has ``choices == []`` and the usage, no other
    chunk has usage, every content chunk has a choice, and the counts are the prompt's tokens and
    the tokens of all ``n`` replies. The ``openai`` client's stream reader yields the same usage.
    Oracle: OpenAI's reference; the DeepSeek tokenizer's counts."""
    body = {"n": n, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 64}
    r = _client(FakeTM(tok, reply=REPLY)).post(CHAT, json={"model": MODEL, "messages": HI, **body})
    assert r.status_code == 200, r.text
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None and c.choices for c in chunks[:-1])
    replies = [REPLY + (f" #{k}" if k else "") for k in range(n)]
    assert last.usage.completion_tokens == sum(len(_ids(tok, t)) for t in replies)
    assert last.usage.prompt_tokens == len(_ids(tok, recipe_prompt({"messages": HI}, thinking=False)))

    stream = _oai(_client(FakeTM(tok, reply=REPLY))).chat.completions.create(
        model=MODEL, messages=HI, n=n, stream=True, stream_options={"include_usage": True}, max_tokens=64
    )
    got = list(stream)
    assert got[-1].choices == [] and got[-1].usage == last.usage


# --------------------------------------------------------------------------- output hints


def test_stdapi_124_prediction_and_verbosity_are_accepted_and_ignored(tok: PreTrainedTokenizerFast) -> None:
    """stdapi-ai/stdapi.ai#124 (``prediction`` and ``verbosity`` answered 400 on a server that
    cannot honour them; OpenAI's behaviour, and the fix, accepts and drops such output hints):
    both, sent through the ``openai`` client's own parameters, are served with HTTP 200; the
    engine receives the same prompt and the answer is the same as without them. Oracle: the
    ``openai`` client's parameter types (``prediction``, ``verbosity``) and a request without the
    hints."""
    answers, prompts = [], []
    for extra in ({}, {"prediction": {"type": "content", "content": "Hello"}, "verbosity": "low"}):
        tm = FakeTM(tok, reply=REPLY)
        done = _oai(_client(tm)).chat.completions.create(model=MODEL, messages=HI, max_tokens=64, **extra)
        answers.append(done.choices[0].message.content)
        prompts.append(tm.received[-1].input_ids)
    assert answers[0] == answers[1] == REPLY
    assert prompts[0] == prompts[1]


# --------------------------------------------------------------------------- roles


def test_halogen_server_3_developer_role_is_a_system_instruction(tok: PreTrainedTokenizerFast) -> None:
    """peonist-ai/halogen-server#3 (also peonist-ai/halogen-flash-server#32 and ogx-ai/ogx#6069:
    ``role: "developer"``, the current OpenAI name for application instructions that clients such
    as Codex send to reasoning models, fell into the "Unexpected message role" branch and was a
    400, while an invented role got the same answer): a ``developer`` message, sent through the
    ``openai`` client's own ``developer`` message type, is served as the system instruction: the
    prompt is the one DeepSeek's own converter renders for the same text as ``system``; an invented
    role stays a 400 naming ``messages.0.role``, no engine request made. Oracle: ``deepseek-recipe``
    on the ``system`` body; the ``openai`` client's message types."""
    tm = FakeTM(tok, reply="Hi.")
    _oai(_client(tm)).chat.completions.create(
        model=MODEL,
        messages=[{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        max_tokens=16,
    )
    as_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert tok.decode(tm.received[-1].input_ids) == recipe_prompt({"messages": as_system}, thinking=False)

    tm = FakeTM(tok)
    r = _client(tm).post(
        CHAT, json={"model": MODEL, "messages": [{"role": "banana", "content": "x"}, *HI], "max_tokens": 4}
    )
    assert r.status_code == 400, r.text
    assert "messages.0.role" in r.json()["message"]
    assert tm.received == []


# --------------------------------------------------------------------------- logprob bytes


def test_dynamo_6953_logprob_bytes_rebuild_the_text(tok: PreTrainedTokenizerFast) -> None:
    """ai-dynamo/dynamo#6953 and ollama/ollama#13068 (``bytes`` of chat logprobs was ``null`` or
    missing; OpenAI gives each token's UTF-8 bytes so that characters split across tokens can be
    put back together, standardcompletions/rfcs#2): on a reply whose emoji is split over two
    tokens, every ``logprobs.content`` entry and every ``top_logprobs`` entry has ``bytes``; an
    entry whose token is whole UTF-8 has exactly that token's bytes, and the entries' bytes joined
    are the UTF-8 of the content, streamed and not. Oracle: Python's UTF-8 encoding of the reply
    and the DeepSeek tokenizer's split of it."""
    reply = "Sure 😊 “quoted” 日本語 done"
    pieces = [tok.decode([i]) for i in _ids(tok, reply)]
    assert any("\ufffd" in p for p in pieces)  # the emoji is split: a token alone is not UTF-8
    done = _answer(FakeTM(tok, reply=reply), {"logprobs": True, "top_logprobs": 2, "max_tokens": 64})
    entries = done.choices[0].logprobs.content  # type: ignore[union-attr]
    assert entries is not None
    assert b"".join(bytes(e.bytes or []) for e in entries) == reply.encode("utf-8")
    for e in entries:
        assert e.bytes is not None and all(t.bytes is not None for t in e.top_logprobs)
        if "\ufffd" not in e.token:
            assert bytes(e.bytes) == e.token.encode("utf-8")

    r = _client(FakeTM(tok, reply=reply)).post(
        CHAT, json={"model": MODEL, "messages": HI, "logprobs": True, "stream": True, "max_tokens": 64}
    )
    chunks = [ChatCompletionChunk.model_validate(e) for e in sse_data_events(r)[:-1]]
    streamed = [e for c in chunks for ch in c.choices if ch.logprobs for e in ch.logprobs.content or []]
    assert b"".join(bytes(e.bytes or []) for e in streamed) == reply.encode("utf-8")
