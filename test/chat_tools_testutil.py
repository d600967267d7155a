"""Shared pieces of the chat-completions tool-calling tests: the weather tool (also in the Responses API's flat shape), scripted and chunking fake tokenizer managers, an in-process OpenAI client over them, a stream accumulator, and readers of a server-sent-event body (its JSON chunks, and the ``openai`` client's fold of them)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.openai import create_openai_router
from sglang_v4.managers.io_struct import GenerateReqInput

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
#: ``WEATHER`` in the Responses API's flat function-tool shape (no ``function`` wrapper).
WEATHER_FLAT = {
    "type": "function",
    "name": "get_weather",
    "description": WEATHER["function"]["description"],
    "parameters": WEATHER["function"]["parameters"],
}


class ScriptedTM:
    """Generates the token ids of ``reply`` (finish ``stop``; ``length`` when max_new_tokens cuts
    it), with cumulative text per token when streaming, like the real tokenizer manager."""

    def __init__(self, tokenizer: Any, reply: str, grammar_enabled: bool = False) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.reply = reply
        self.grammar_enabled = grammar_enabled
        self.received: list[GenerateReqInput] = []

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        ids = self.tokenizer.encode(self.reply, add_special_tokens=False)
        limit = (obj.sampling_params or {}).get("max_new_tokens")
        finish: dict[str, Any] = {"type": "stop", "matched": 1}
        if limit is not None and limit < len(ids):
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        outs = []
        for j in range(1, len(ids) + 1):
            meta = {
                "id": "r",
                "finish_reason": finish if j == len(ids) else None,
                "prompt_tokens": len(obj.input_ids),
                "completion_tokens": j,
            }
            outs.append({"text": self.tokenizer.decode(ids[:j]), "output_ids": ids[:j], "meta_info": meta})
        if obj.stream:
            for o in outs:
                yield o
        else:
            yield outs[-1]


def client_for(tm: Any, **args: Any) -> tuple[openai.OpenAI, TestClient]:
    sa = SimpleNamespace(served_model_name="m", model_path=None, api_key=None, enable_cache_report=False)
    for k, v in args.items():
        setattr(sa, k, v)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    tc = TestClient(app)
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0), tc


def routes_client(tm: Any, **args: Any) -> TestClient:
    """A ``TestClient`` over an app serving the OpenAI and Anthropic routers on the fake engine
    ``tm`` (the Anthropic routes share the OpenAI router's serving state); ``args`` override the
    server arguments (served name ``m``, no API key, no cache report, no auto truncation)."""
    sa = SimpleNamespace(
        served_model_name="m",
        model_path=None,
        api_key=None,
        enable_cache_report=False,
        allow_auto_truncate=False,
    )
    for k, v in args.items():
        setattr(sa, k, v)
    app = FastAPI()
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return TestClient(app)


def accumulate(stream: Any) -> dict[str, Any]:
    """Fold streamed chunks the way OpenAI's client-side accumulators do."""
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}, "finish": None, "n_arg_deltas": 0}
    for ch in stream:
        for c in ch.choices:
            d = c.delta
            out["content"] += d.content or ""
            out["reasoning"] += (d.model_extra or {}).get("reasoning_content") or ""
            for tc in d.tool_calls or []:
                if tc.index not in out["calls"]:
                    assert tc.id and tc.type == "function" and tc.function.name, tc  # first delta
                    out["calls"][tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                else:
                    assert tc.id is None and tc.function.name is None, tc
                out["calls"][tc.index]["arguments"] += tc.function.arguments or ""
                out["n_arg_deltas"] += bool(tc.function.arguments)
            if c.finish_reason:
                out["finish"] = c.finish_reason
    return out


def _grammar_of(sp: dict[str, Any]) -> Any:
    """The xgrammar grammar of the one grammar field in ``sp`` (sampling parameters as sent)."""
    xgr = pytest.importorskip("xgrammar")
    if sp.get("structural_tag") is not None:
        return xgr.Grammar.from_structural_tag(sp["structural_tag"])
    if sp.get("json_schema") is not None:
        return xgr.Grammar.from_json_schema(sp["json_schema"])
    if sp.get("regex") is not None:
        return xgr.Grammar.from_regex(sp["regex"])
    return xgr.Grammar.from_ebnf(sp["ebnf"])


EOS_ID = 1


class ChunkTM:
    """Generates ``reply`` token by token, ``per_chunk`` tokens per streamed chunk, with the
    engine's stop-string, ``max_new_tokens`` and EOS behaviour (module docstring). With
    ``eos_chunk`` the finish comes in a chunk of its own that adds no text (the EOS token)."""

    def __init__(self, tokenizer: Any, reply: str, per_chunk: int = 1, eos_chunk: bool = False) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.reply = reply
        self.per_chunk = per_chunk
        self.eos_chunk = eos_chunk
        self.received: list[Any] = []

    @staticmethod
    def _holdback(text: str, stops: list[str]) -> str:
        keep = 0
        for s in stops:
            for n in range(min(len(s) - 1, len(text)), 0, -1):
                if s.startswith(text[-n:]):
                    keep = max(keep, n)
                    break
        return text[: len(text) - keep]

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[dict[str, Any]]:
        self.received.append(obj)
        sp = obj.sampling_params or {}
        stop = sp.get("stop")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        ids = self.tokenizer.encode(self.reply, add_special_tokens=False)
        limit = sp.get("max_new_tokens")
        finish: dict[str, Any] = {"type": "stop", "matched": EOS_ID}
        if limit is not None and limit < len(ids):
            ids, finish = ids[:limit], {"type": "length", "length": limit}
        texts: list[str] = []
        for j in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:j])
            hits = [(text.find(s), s) for s in stops if s in text]
            if hits:
                at, s = min(hits)
                texts.append(text[:at])
                ids, finish = ids[:j], {"type": "stop", "matched": s}
                break
            # the detokenizer holds back an incomplete UTF-8 character (U+FFFD so far)
            texts.append(text if j == len(ids) else self._holdback(text.rstrip("\ufffd"), stops))
        steps = list(range(self.per_chunk - 1, len(texts), self.per_chunk))
        if not steps or steps[-1] != len(texts) - 1:
            steps.append(len(texts) - 1)
        outs = []
        for n, j in enumerate(steps):
            last = n == len(steps) - 1
            meta = {
                "id": "r",
                "finish_reason": finish if last and not self.eos_chunk else None,
                "prompt_tokens": 3,
                "completion_tokens": j + 1,
            }
            outs.append({"text": texts[j], "output_ids": ids[: j + 1], "meta_info": meta})
        if self.eos_chunk:
            meta = dict(outs[-1]["meta_info"], finish_reason=finish)
            outs.append({"text": texts[-1], "output_ids": ids, "meta_info": meta})
        if obj.stream:
            for o in outs:
                yield o
        else:
            yield outs[-1]


def grammar_chunk_tm(tokenizer: Any, reply: str, per_chunk: int = 1) -> ChunkTM:
    """A :class:`ChunkTM` writing ``reply`` (``per_chunk`` tokens per streamed chunk) that reports a
    grammar backend (``grammar_enabled``), so ``tool_choice`` forcing and ``strict`` tools are
    served rather than refused."""
    tm = ChunkTM(tokenizer, reply, per_chunk=per_chunk)
    tm.grammar_enabled = True  # type: ignore[attr-defined]
    return tm


def sse_chunks(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a server-sent-event body ``text``, in order: every ``data: {...}`` line
    parsed with ``json.loads``; ``data: [DONE]`` and ``event:`` lines are left out."""
    return [json.loads(x[6:]) for x in text.split("\n") if x.startswith("data: {")]


def stream_chunks(tc: TestClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The raw chunks (``[DONE]`` left out) of ``body`` streamed on ``/v1/chat/completions``
    through ``tc`` (``model`` ``"m"`` and ``stream: true`` added); asserts HTTP 200, and validates
    each chunk against the ``openai`` client's ``ChatCompletionChunk`` (pydantic's
    ``ValidationError`` on a mismatch)."""
    r = tc.post("/v1/chat/completions", json={"model": "m", **body, "stream": True})
    assert r.status_code == 200, r.text
    chunks = sse_chunks(r.text)
    for c in chunks:
        ChatCompletionChunk.model_validate(c)
    return chunks


def fold_chat_stream(text: str) -> Any:
    """A streamed chat answer (the SSE body ``text``) as the ``openai`` client folds it: its
    ``ChatCompletionStreamState`` fed every chunk, and that state's completion snapshot after the
    last one (the client's ``get_final_completion`` would refuse a ``length`` finish)."""
    state = ChatCompletionStreamState()
    for c in sse_chunks(text):
        state.handle_chunk(ChatCompletionChunk.model_validate(c))
    return state.current_completion_snapshot


def _message(client: Any, **kw: Any) -> tuple[str, list[tuple[str, str]], str]:
    """(content, [(name, arguments)], finish_reason) of the non-streamed response."""
    ch = client.chat.completions.create(**kw).choices[0]
    calls = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
    return ch.message.content or "", calls, ch.finish_reason


def _folded(client: Any, **kw: Any) -> tuple[str, list[tuple[str, str]], str]:
    """The same, folded from the stream by the ``openai`` client's own accumulator."""
    with client.chat.completions.stream(**kw) as stream:
        ch = stream.get_final_completion().choices[0]
    calls = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
    return ch.message.content or "", calls, ch.finish_reason


def _both(client: Any, **kw: Any) -> tuple[str, list[tuple[str, str]], str]:
    """The non-streamed message, checked equal to the folded stream (well-formed calls)."""
    ns, s = _message(client, **kw), _folded(client, **kw)
    assert ns == s, (ns, s)
    return ns


def _both_but_the_sent_call(
    client: Any, **kw: Any
) -> tuple[tuple[str, list[tuple[str, str]], str], tuple[str, str] | None]:
    """The non-streamed message and the call the stream sent before its invoke failed (None when
    its invoke tag was never complete), checked against the documented difference: the folded
    content is the non-streamed one, the folded calls the non-streamed calls and at most that one
    more, last; the folded finish reason is the non-streamed one, but ``"stop"`` when that call
    went out (a stream's ``"tool_calls"`` vouches for every call it sent)."""
    ns, s = _message(client, **kw), _folded(client, **kw)
    assert s[1][: len(ns[1])] == ns[1] and len(s[1]) <= len(ns[1]) + 1, (ns, s)
    sent = s[1][-1] if len(s[1]) > len(ns[1]) else None
    assert (s[0], s[2]) == (ns[0], ns[2] if sent is None else "stop"), (ns, s)
    return ns, sent


class CharTM:
    """Generates ``reply[:max_tokens]`` one character per step (cumulative text when streaming);
    the last step finishes with ``finish`` (``"length"`` or ``"stop"`` by EOS)."""

    def __init__(self, tokenizer: Any, reply: str, finish: str) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.reply = reply
        self.finish = finish

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[dict[str, Any]]:
        k = obj.sampling_params["max_new_tokens"]
        text = self.reply[:k]
        fin = {"type": "length", "length": k} if self.finish == "length" else {"type": "stop", "matched": 1}
        outs = [
            {
                "text": text[:j],
                "output_ids": list(range(j)),
                "meta_info": {
                    "id": "r",
                    "finish_reason": fin if j == len(text) else None,
                    "prompt_tokens": 3,
                    "completion_tokens": j,
                },
            }
            for j in range(1, len(text) + 1)
        ]
        if obj.stream:
            for o in outs:
                yield o
        else:
            yield outs[-1]


class _ByteFragmentTM:
    """A tokenizer manager whose model writes ``reply`` token by token, as the engine streams it:
    cumulative text in which an unfinished UTF-8 character is held back (the detokenizer shows
    no U+FFFD), one ``output_token_logprobs`` entry per token (``-0.1 * position``) and, when
    asked, top candidates: the sampled token, then ``cand_ids`` at -5, -6, ... . ``fail_after``:
    raise a ``ValueError`` (a scheduler-side error) after that many streamed outputs."""

    def __init__(
        self, tokenizer: Any, reply: str, cand_ids: list[int], fail_after: int | None = None
    ) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer)
        self.context_len = 4096
        self.reply = reply
        self.cand_ids = cand_ids
        self.fail_after = fail_after

    def _outputs(self, obj: Any) -> list[dict[str, Any]]:
        ids = self.tokenizer.encode(self.reply, add_special_tokens=False)
        outs = []
        for j in range(1, len(ids) + 1):
            text = self.tokenizer.decode(ids[:j])
            if j < len(ids):
                text = text.rstrip("\ufffd")
            meta: dict[str, Any] = {
                "id": "r",
                "finish_reason": {"type": "stop", "matched": 1} if j == len(ids) else None,
                "prompt_tokens": 3,
                "completion_tokens": j,
            }
            if obj.return_logprob:
                meta["output_token_logprobs"] = [[-0.1 * (i + 1), t, None] for i, t in enumerate(ids[:j])]
                if obj.top_logprobs_num:
                    cands = [[-5.0 - k, c, None] for k, c in enumerate(self.cand_ids)]
                    meta["output_top_logprobs"] = [
                        ([[-0.1 * (i + 1), t, None], *cands])[: obj.top_logprobs_num]
                        for i, t in enumerate(ids[:j])
                    ]
            outs.append({"text": text, "output_ids": ids[:j], "meta_info": meta})
        return outs

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[dict[str, Any]]:
        outs = self._outputs(obj)
        if not obj.stream:
            yield outs[-1]
            return
        for n, o in enumerate(outs):
            if self.fail_after is not None and n == self.fail_after:
                raise ValueError("the scheduler failed while decoding (injected)")
            yield o


#: The conversation of :func:`post_chat_reply`.
DO_IT_MESSAGES = [{"role": "user", "content": "Do it."}]


def post_chat_reply(tok: Any, reply: str, body: dict[str, Any], stream: bool, per_chunk: int = 1) -> Any:
    """The raw ``POST /v1/chat/completions`` answer to ``body`` (with :data:`DO_IT_MESSAGES`) from a
    fake engine writing ``reply`` ``per_chunk`` tokens a chunk (:func:`grammar_chunk_tm`);
    HTTP 200 asserted."""
    _, tc = client_for(grammar_chunk_tm(tok, reply, per_chunk), allow_auto_truncate=False)
    r = tc.post(
        "/v1/chat/completions", json={"model": "m", "messages": DO_IT_MESSAGES, **body, "stream": stream}
    )
    assert r.status_code == 200, r.text
    return r


def first_choice(r: Any, stream: bool) -> Any:
    """``choices[0]`` of a chat answer ``r`` as the ``openai`` client reads it (a stream folded by
    its accumulator, :func:`fold_chat_stream`)."""
    from openai.types.chat import ChatCompletion

    return (fold_chat_stream(r.text) if stream else ChatCompletion.model_validate(r.json())).choices[0]
