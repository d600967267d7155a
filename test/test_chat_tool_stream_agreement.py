"""Tool calls through ``/v1/chat/completions``: what a client folds from the stream is the
non-streamed message, under stop strings, malformed invokes and any chunking; public bug reports
of peer servers' DeepSeek tool-call and reasoning parsing, replayed.

The model's text is written by hand and generated token by token by a scripted tokenizer manager
(:class:`ChunkTM`) that behaves as the engine does at its interface: ``stop`` strings end the
generation at their first occurrence and are trimmed from the text, a streamed text never shows
the first characters of a stop string that may still complete (the tokenizer manager holds them
back, as it holds back an incomplete UTF-8 character), ``max_new_tokens`` cuts with ``"length"``, EOS ends with ``"stop"``, and several tokens may
arrive in one chunk (``--stream-interval``, speculative decoding). Oracles: the positions of the
markers in the hand-written text, ``json.loads``, and the ``openai`` client's own parsers and
stream accumulator (``client.chat.completions.stream``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_openai_tools import WEATHER, client_for
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
EOS_ID = 1


def _param(key: str, is_string: bool, value: str) -> str:
    return f'<{D}parameter name="{key}" string="{"true" if is_string else "false"}">{value}</{D}parameter>'


def _invoke(name: str, *params: str) -> str:
    return f'<{D}invoke name="{name}">\n' + "\n".join(params) + f"\n</{D}invoke>"


def _block(*invokes: str) -> str:
    return f"\n\n<{D}tool_calls>\n" + "\n".join(invokes) + f"\n</{D}tool_calls>"


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
    ns, s = _message(client, **kw), _folded(client, **kw)
    assert ns == s, (ns, s)
    return ns


MSGS = [{"role": "user", "content": "Weather in Paris?"}]
CITY = 'Paris "rive gauche"'
CALL = _block(_invoke("get_weather", _param("city", True, CITY), _param("days", False, "3")))
FULL = {"city": CITY, "days": 3}


# ---------------------------------------------------------------------- stop strings in a call
@pytest.mark.parametrize("per_chunk", [1, 3])
@pytest.mark.parametrize(
    "stop",
    ["gauche", '"', "rive", "</", "invoke", "string=", "3<", f"</{D}invoke>", f"</{D}tool_calls>", "\n</"],
)
def test_stop_string_inside_a_call(tok: PreTrainedTokenizerFast, stop: str, per_chunk: int) -> None:
    """vllm-project/vllm#42210: a ``stop`` string that matches inside a tool-call block cut the
    call; vLLM streamed nothing for it, and the parsers here answered the cut call in
    ``tool_calls`` with half-written arguments (not JSON) and ``finish_reason`` ``"stop"``. A
    stop inside the invoke makes no call: the text up to the stop is the content (the block's
    markup included, as for any malformed block), ``finish_reason`` ``"stop"``; a stop after the
    invoke closed leaves the call made (``"tool_calls"``). Streamed and not agree."""
    reply = "Let me look." + CALL
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    at = reply.index(stop)
    closed = reply.index(f"</{D}invoke>") + len(f"</{D}invoke>")
    content, calls, finish = _both(client, model="m", messages=MSGS, tools=[WEATHER], stop=[stop])
    if at < closed:
        assert (content, calls, finish) == (reply[:at], [], "stop")
    else:
        assert (content, finish) == ("Let me look.", "tool_calls")
        assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", FULL)]


def test_stop_inside_the_second_call_keeps_the_first(tok: PreTrainedTokenizerFast) -> None:
    """A stop string inside the second invoke of a block: the first call stays a call, the text
    from the end of its invoke is the content (no call of the second), streamed and not."""
    first = _invoke("get_weather", _param("city", True, "Oslo"))
    second = _invoke("get_weather", _param("city", True, "Rome"), _param("days", False, "2"))
    reply = "Two." + _block(first, second)
    client, _ = client_for(ChunkTM(tok, reply))
    content, calls, finish = _both(client, model="m", messages=MSGS, tools=[WEATHER], stop=["Rome"])
    end_first = reply.index(first) + len(first)
    assert (content, finish) == ("Two." + reply[end_first : reply.index("Rome")], "stop")
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "Oslo"})]


# ---------------------------------------------------------------------- malformed arguments
@pytest.mark.parametrize("per_chunk", [1, 2, 7])
def test_invalid_json_value_is_never_streamed_as_a_call(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """A call whose ``string="false"`` value turns out not to be JSON (the model wrote
    ``three``): its id, name and argument fragments used to be streamed before the value ended,
    so the client's accumulator held a call the non-streamed message has not, with arguments
    ``{"city": "Paris", "days": three`` (not JSON). The stream holds a call until its invoke
    closed well-formed: folded, it is the non-streamed message, whose content is the block text
    from the end of the last good invoke."""
    good = _invoke("get_weather", _param("city", True, "Oslo"))
    bad = _invoke("get_weather", _param("city", True, "Paris"), _param("days", False, "three"))
    reply = "Checking." + _block(good, bad)
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    content, calls, finish = _both(client, model="m", messages=MSGS, tools=[WEATHER])
    assert content == "Checking." + reply[reply.index(good) + len(good) :]
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "Oslo"})]
    assert finish == "stop"
    # a block of the bad invoke alone: no call at all, its text is the content
    reply = "Checking." + _block(bad)
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    assert _both(client, model="m", messages=MSGS, tools=[WEATHER]) == (reply, [], "stop")


@pytest.mark.parametrize(
    "body",
    [
        '{"city": "Paris", "days": }',  # a JSON body that is not JSON
        _param("city", True, "a") + "\n" + _param("city", True, "b"),  # a duplicate parameter
        _param("city", True, "a") + "\nstray text\n",  # text between tags
    ],
)
def test_every_late_failure_of_an_invoke_agrees(tok: PreTrainedTokenizerFast, body: str) -> None:
    """The whole kind: any failure found after the invoke tag (a bad JSON body, a duplicate
    parameter, text between tags) gives the same folded stream as the non-streamed message:
    the block's text as content, no call."""
    reply = "Hm." + _block(f'<{D}invoke name="get_weather">\n{body}\n</{D}invoke>')
    client, _ = client_for(ChunkTM(tok, reply))
    assert _both(client, model="m", messages=MSGS, tools=[WEATHER]) == (reply, [], "stop")
