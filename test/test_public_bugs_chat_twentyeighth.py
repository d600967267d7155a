"""A twenty-eighth set of public bug reports, replayed against ``POST /v1/chat/completions``: the
``system_fingerprint`` key that strict client decoders require on the response and on every
stream chunk (absent before: fixed, the key is now always present as ``null``), the ``seed``
request whose answer a client inspects for that key, ``store`` / ``metadata`` (a LiteLLM-style
``metadata`` with a list of tags included) accepted without changing the answer, and the choice
``index`` that keeps an ``n > 1`` stream's interleaved chunks apart.

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (its choice
``k`` > 0 writes ``" #k"`` after the reply). Oracles: the ``openai`` client's types and its own
stream reader, ``json.loads`` of the raw body for key presence, the non-streamed answer of the
same request for the stream's reassembled text, and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")

from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]


def _post(tm: FakeTM, body: dict[str, Any]) -> Any:
    """The raw ``/v1/chat/completions`` response to ``body`` (``model`` and ``messages`` ``HI``
    unless set)."""
    return _client(tm).post(CHAT, json={"model": MODEL, "messages": HI, **body})


def _chunks(tm: FakeTM, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The decoded ``data:`` events of a streamed answer to ``body`` (``[DONE]`` dropped)."""
    r = _post(tm, {**body, "stream": True})
    assert r.status_code == 200, r.text
    return [e for e in sse_data_events(r) if e != "[DONE]"]


def test_mercury_openai_50_response_carries_system_fingerprint_key(tok: PreTrainedTokenizerFast) -> None:
    """MercuryTechnologies/openai#50: a decoder failed with 'key "system_fingerprint" not found'
    against an OpenAI-compatible server that left the key out. Expected (OpenAI's chat completion
    object): the key is present, a string or ``null``, and the client's type reads it."""
    r = _post(FakeTM(tok), {})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "system_fingerprint" in body
    assert body["system_fingerprint"] is None or isinstance(body["system_fingerprint"], str)
    typed = ChatCompletion.model_validate(body)
    assert typed.system_fingerprint == body["system_fingerprint"]


def test_openai_kotlin_299_every_stream_chunk_carries_system_fingerprint(
    tok: PreTrainedTokenizerFast,
) -> None:
    """aallam/openai-kotlin#299 and MacPaw/OpenAI#332: ``system_fingerprint`` belongs to the
    chunk object too (OpenAI's streaming reference), and a strict stream decoder needs the key on
    every chunk, the usage chunk included. Expected: each chunk has the key (string or ``null``)
    and parses as the client's ``ChatCompletionChunk``."""
    events = _chunks(FakeTM(tok), {"stream_options": {"include_usage": True}})
    assert events and events[-1]["choices"] == [] and events[-1]["usage"] is not None
    for e in events:
        assert "system_fingerprint" in e, e
        assert e["system_fingerprint"] is None or isinstance(e["system_fingerprint"], str)
        ChatCompletionChunk.model_validate(e)


def test_openai_node_617_seeded_answer_has_one_fingerprint_streamed_or_not(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-node#617 (``seed`` set: the streamed chunks had ``system_fingerprint`` and
    the assembled completion did not) and openai/openai-python#720 (``seed`` set, the field
    came back ``None``: allowed by the type). Expected: with ``seed`` the non-streamed answer and
    every chunk carry the key with one and the same value, and the text is the same both ways."""
    tm = FakeTM(tok)
    r = _post(tm, {"seed": 4242})
    assert r.status_code == 200, r.text
    whole = r.json()
    events = _chunks(tm, {"seed": 4242})
    assert {e["system_fingerprint"] for e in events} == {whole["system_fingerprint"]}
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == whole["choices"][0]["message"]["content"]


def test_litellm_23108_store_and_metadata_are_accepted_and_change_nothing(
    tok: PreTrainedTokenizerFast,
) -> None:
    """BerriAI/litellm#23108 and tmc/langchaingo#1485: ``metadata`` sent with ``store: true``
    (the pairing OpenAI requires) was refused or dropped on the way. Expected: the request is
    answered (HTTP 200) with the same choices as the plain request; a server that keeps nothing
    stores nothing, and the answer's shape is the client's ``ChatCompletion``."""
    tm = FakeTM(tok)
    plain = _post(tm, {})
    tagged = _post(tm, {"store": True, "metadata": {"project": "demo", "run": "7"}})
    assert plain.status_code == tagged.status_code == 200, tagged.text
    a, b = ChatCompletion.model_validate(plain.json()), ChatCompletion.model_validate(tagged.json())
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert a.usage is not None and b.usage is not None
    assert (a.usage.prompt_tokens, a.usage.completion_tokens) == (
        b.usage.prompt_tokens,
        b.usage.completion_tokens,
    )
    assert a.id != b.id


def test_go_openai_872_metadata_with_a_list_of_tags_is_accepted(tok: PreTrainedTokenizerFast) -> None:
    """sashabaranov/go-openai#872: ``metadata`` is an object, and LiteLLM's proxy sends
    ``{"tags": [...]}`` in it. Expected: such a request is answered (HTTP 200) like the plain one;
    it does not fail on the value's type."""
    tm = FakeTM(tok)
    r = _post(tm, {"metadata": {"tags": ["testTag", "taskName:pass0"]}})
    assert r.status_code == 200, r.text
    plain = _post(tm, {})
    assert r.json()["choices"][0]["message"] == plain.json()["choices"][0]["message"]


def test_langchain_26719_n_stream_chunks_name_their_choice(tok: PreTrainedTokenizerFast) -> None:
    """langchain-ai/langchain#26719: with ``n > 1`` and ``stream: true`` the chunks of the
    choices arrive interleaved, and only each chunk's choice ``index`` tells them apart. Expected:
    every content chunk names its choice (0 .. n-1), each choice ends with one ``finish_reason``,
    and the text gathered by index equals the non-streamed answer's choice of that index."""
    tm = FakeTM(tok)
    r = _post(tm, {"n": 3})
    assert r.status_code == 200, r.text
    want = {c["index"]: c["message"]["content"] for c in r.json()["choices"]}
    got: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for e in _chunks(tm, {"n": 3}):
        for c in e["choices"]:
            got[c["index"]] = got.get(c["index"], "") + (c["delta"].get("content") or "")
            if c["finish_reason"] is not None:
                finishes.setdefault(c["index"], []).append(c["finish_reason"])
    assert sorted(want) == [0, 1, 2]
    assert got == want
    assert {k: len(v) for k, v in finishes.items()} == {0: 1, 1: 1, 2: 1}


def test_openai_php_310_legacy_completions_carry_system_fingerprint_too(tok: PreTrainedTokenizerFast) -> None:
    """openai-php/client#310: OpenAI's completion object documents ``system_fingerprint`` as
    well, and a client's fixture/decoder expects it there. Expected (same flaw, sibling route):
    ``/v1/completions`` answers and each of its stream chunks carry the key (string or ``null``)
    and the answer and the stream's final chunk parse as the client's ``Completion`` (whose
    ``finish_reason`` type admits no ``null``, as in a middle chunk)."""
    from openai.types import Completion

    tm = FakeTM(tok)
    r = _client(tm).post("/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4})
    assert r.status_code == 200, r.text
    assert "system_fingerprint" in r.json()
    Completion.model_validate(r.json())
    s = _client(tm).post(
        "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4, "stream": True}
    )
    assert s.status_code == 200, s.text
    events = [e for e in sse_data_events(s) if e != "[DONE]"]
    assert events
    for e in events:
        assert "system_fingerprint" in e, e
    last = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"] is not None]
    assert len(last) == 1
    assert Completion.model_validate(last[0]).system_fingerprint == last[0]["system_fingerprint"]
