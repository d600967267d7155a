"""Thinking mode with tools, the output cut at every character: where the text of a partial
``</think>`` or of a partial DSML block start lands, streamed and not.

The model's text is written by hand (a scripted tokenizer manager that generates it one character
at a time, ``max_tokens`` counting characters), so the expected split is read off the positions
of the markers in that text: the oracle never runs the parsers under test. Both responses go
through the OpenAI route (FastAPI's TestClient), the streamed one folded delta by delta.

Decision checked here (see :mod:`sglang_v4.entrypoints.openai.reasoning_parser`): DeepSeek-V4's
format has no tool-call block inside the reasoning (the reasoning ends with ``</think>`` before
any call), so the reasoning ends only at a *complete* ``</think>`` or, the tolerated deviation, a
*complete* block start. Text that ends the output while still reasoning -- the first characters
of either marker included -- is reasoning, whether the generation was cut by ``max_tokens`` or
stopped.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, CharTM, client_for
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
START = f"<{D}tool_calls>"
REASONING = "Need weather: 3 < 4, call it."  # a literal "<": a partial "</think>" and block start
ANSWER = "\n\nChecking."
BLOCK = (
    f'\n\n{START}\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)
FULL_ARGS = json.dumps({"city": "Paris"})
#: The reasoning closed by ``</think>``, an answer, then a call (the format's order).
CLOSED = REASONING + "</think>" + ANSWER + BLOCK
#: The call starts inside the reasoning (no ``</think>``): the model's deviation the parser tolerates.
INSIDE = REASONING + BLOCK


def _body(k: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER],
        "chat_template_kwargs": {"thinking": True},
        "max_tokens": k,
        **extra,
    }


class InProcessClient:
    """POSTs JSON to an ASGI app on one event loop of the calling thread and returns the status
    and the whole body text. Unlike ``TestClient``, which hands every chunk of a streamed body
    from its portal thread, a streamed response of ``k`` chunks costs no thread switches: the
    cuts below send about 40 000 chunks."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, str]:
        return self.loop.run_until_complete(self._post(path, json.dumps(body).encode()))

    async def _post(self, path: str, payload: bytes) -> tuple[int, str]:
        headers = [(b"host", b"testserver"), (b"content-type", b"application/json")]
        headers.append((b"content-length", str(len(payload)).encode()))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("testclient", 50000),
            "server": ("testserver", 80),
        }
        pending = [{"type": "http.request", "body": payload, "more_body": False}]
        done = asyncio.Event()
        status, parts = 0, []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop()
            await done.wait()  # the client stays connected until the response is complete
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        await self.app(scope, receive, send)
        return status, b"".join(parts).decode()


def _app_client(tm: Any) -> InProcessClient:
    """The OpenAI routes of ``test_openai_tools.client_for`` over ``tm``, called in process."""
    _, tc = client_for(tm)
    return InProcessClient(tc.app)


def _non_streamed(tc: InProcessClient, body: dict[str, Any]) -> dict[str, Any]:
    status, text = tc.post("/v1/chat/completions", body)
    assert status == 200, text
    ch = json.loads(text)["choices"][0]
    m = ch["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
    return {
        "reasoning": m.get("reasoning_content") or "",
        "content": m.get("content") or "",
        "calls": calls,
        "finish": ch["finish_reason"],
    }


def _streamed(tc: InProcessClient, body: dict[str, Any]) -> dict[str, Any]:
    status, text = tc.post("/v1/chat/completions", {**body, "stream": True})
    assert status == 200, text
    out: dict[str, Any] = {"reasoning": "", "content": "", "calls": {}, "finish": None}
    for line in text.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for c in json.loads(line[6:])["choices"]:
            d = c["delta"]
            out["reasoning"] += d.get("reasoning_content") or ""
            out["content"] += d.get("content") or ""
            for t in d.get("tool_calls") or []:
                call = out["calls"].setdefault(t["index"], [t["function"].get("name"), ""])
                call[1] += t["function"].get("arguments") or ""
            out["finish"] = c.get("finish_reason") or out["finish"]
    out["calls"] = [tuple(c) for c in out["calls"].values()]
    return out


def _check_calls(calls: list[tuple[str, str]], text: str, k: int) -> None:
    """The call appears once its invoke tag is complete, with a prefix of its arguments (all of
    them once the invoke closed)."""
    named_at = text.index('name="get_weather">') + len('name="get_weather">')
    closed_at = text.index(f"</{D}invoke>") + len(f"</{D}invoke>")
    assert len(calls) == (k >= named_at), (k, calls)
    for name, args in calls:
        assert name == "get_weather" and FULL_ARGS.startswith(args), (k, args)
        assert (args == FULL_ARGS) == (k >= closed_at), (k, args)


def _without_dsml_tail(text: str) -> str:
    """``text`` without an unfinished DSML tag that ends it (from the ``｜DSML｜`` token on, with
    its ``"<"`` and the whitespace before): what the scrub of the reasoning leaves."""
    return text if D not in text else text[: text.index("<" + D)].rstrip()


def test_cut_by_max_tokens_at_every_character(tok: PreTrainedTokenizerFast) -> None:
    """Cut by ``max_tokens``: the partial marker stays in ``reasoning_content`` (it is reasoning
    text until the marker is complete), the same streamed and not, for both texts."""
    for text in (CLOSED, INSIDE):
        tc = _app_client(CharTM(tok, text, "length"))
        if text is CLOSED:
            end = len(REASONING) + len("</think>")  # the reasoning ends when </think> is complete
            reasoning_end, content_from = len(REASONING), end
        else:
            end = len(REASONING) + 2 + len(START)  # ... when the block start is complete
            # the block's "\n\n" separator goes with the block (to the tool parser, which drops it)
            reasoning_end, content_from = len(REASONING), end
        ws_at = text.index("\n\n" + START)
        for k in range(1, len(text) + 1):
            ns, s = _non_streamed(tc, _body(k)), _streamed(tc, _body(k))
            assert ns == s, (k, ns, s)
            assert ns["finish"] == "length", k
            if k < end:  # an unfinished DSML tag (the token written) is not reasoning text
                assert (ns["reasoning"], ns["content"]) == (_without_dsml_tail(text[:k]), ""), k
            else:
                answer = text[content_from : min(k, ws_at + 2)].lstrip("\n")
                if k > ws_at + 2:  # a block start was begun: it and the newlines before are dropped
                    answer = answer.rstrip("\n")
                assert (ns["reasoning"], ns["content"]) == (text[:reasoning_end], answer), k
            _check_calls(ns["calls"], text, k)


@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_stopped_while_reasoning_at_every_character(
    tok: PreTrainedTokenizerFast, stream_reasoning: bool
) -> None:
    """Stopped (EOS) before the reasoning ended: the text stays reasoning, as when cut by
    ``max_tokens`` (a partial marker is reasoning text; an unfinished DSML tag is not), the same
    streamed -- with or without ``stream_reasoning`` -- and not, as DeepSeek's response parser
    (``deepseek-recipe``) reads it; nothing is in ``content``, so no text is sent twice. Stopped
    inside the block before its invoke closed, the call was not made: the block is dropped, never
    a call with half-written arguments (vllm-project/vllm#42210), streamed and not; streamed, the
    call's id, name and argument fragments went out once its invoke tag was complete, and stay in
    what the client folds (the one documented difference)."""
    text = INSIDE
    tc = _app_client(CharTM(tok, text, "stop"))
    ws_at, start_at = len(REASONING), len(REASONING) + 2
    end = start_at + len(START)
    for k in range(1, len(text) + 1):
        body = _body(k, stream_reasoning=stream_reasoning)
        ns, s = _non_streamed(tc, body), _streamed(tc, body)
        assert ns["content"] == s["content"], (k, ns, s)
        _check_calls(s["calls"], text, k)  # streamed: the call from its complete invoke tag on
        # stopped after the invoke closed (the block's closing tag may still be missing): a call
        closed_at = text.index(f"</{D}invoke>") + len(f"</{D}invoke>")
        assert ns["finish"] == s["finish"] == ("tool_calls" if k >= closed_at else "stop"), k
        if k < end:  # still reasoning: an unfinished DSML tag (the token written) is not its text
            assert (ns["reasoning"], ns["content"]) == (_without_dsml_tail(text[:k]), ""), k
            assert s["reasoning"] == ns["reasoning"], k
        else:  # stopped inside the block before its invoke closed: the block is dropped
            assert ns["reasoning"] == s["reasoning"] == text[:ws_at], k
            assert ns["content"] == "", k
        assert ns["calls"] == ([("get_weather", FULL_ARGS)] if k >= closed_at else []), k
        if ns["calls"]:
            assert json.loads(ns["calls"][0][1]) == {"city": "Paris"}
