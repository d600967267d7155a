"""Tool calls through ``/v1/chat/completions``, streamed and not, under stop strings, malformed
invokes and any chunking.

What a client folds from the stream of a well-formed call is the non-streamed message, exactly;
the arguments arrive in several deltas as they are generated. A call whose invoke then turns out
malformed, or is stopped inside, is the one documented difference (README, tool calling): its
id, name and first argument fragments went out before the failure and cannot be taken back, so
the folded stream holds that one extra call, last, where the non-streamed message has none; the
content still agrees, and the stream's finish reason is ``"stop"`` where the non-streamed one is
``"tool_calls"`` (whole calls beside the dropped one).

The model's text is written by hand and generated token by token by a scripted tokenizer manager
(:class:`ChunkTM`) that behaves as the engine does at its interface: ``stop`` strings end the
generation at their first occurrence and are trimmed from the text, a streamed text never shows
the first characters of a stop string that may still complete (the tokenizer manager holds them
back, as it holds back an incomplete UTF-8 character), ``max_new_tokens`` cuts with ``"length"``,
EOS ends with ``"stop"``, and several tokens may arrive in one chunk (``--stream-interval``,
speculative decoding). Oracles: the positions of the markers in the hand-written text, the JSON
text of the hand-written parameters, ``json.loads``, and the ``openai`` client's own parsers and
stream accumulator (``client.chat.completions.stream``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, ChunkTM, _both, _both_but_the_sent_call, _message, client_for
from dsml_testutil import DSML
from dsml_testutil import dsml_block as _block
from dsml_testutil import dsml_invoke as _invoke
from dsml_testutil import dsml_param as _param
from transformers import PreTrainedTokenizerFast

D = DSML


def _written_args(*params: tuple[str, bool, str]) -> str:
    """The arguments text of hand-written ``(key, is_string, value)`` parameters, in writing order,
    as the reference decoder lays out a JSON object (``json.dumps`` separators); a non-string
    value as written (valid JSON or not)."""
    items = [
        json.dumps(k) + ": " + (json.dumps(v, ensure_ascii=False) if is_s else v) for k, is_s, v in params
    ]
    return "{" + ", ".join(items) + "}"


MSGS = [{"role": "user", "content": "Weather in Paris?"}]
CITY = 'Paris "rive gauche"'
CALL = _block(_invoke("get_weather", _param("city", True, CITY), _param("days", False, "3")))
FULL = {"city": CITY, "days": 3}


# ---------------------------------------------------------------------- incremental arguments
@pytest.mark.parametrize("per_chunk", [1, 4])
def test_long_string_argument_streams_in_many_deltas(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """sgl-project/sglang#19662 (DeepSeek-V3.2 tool calls did not stream their arguments) and
    vllm-project/vllm#42878 (fixed by vLLM PR #42879: DSML argument deltas streamed
    incrementally): a long string argument came in one ``arguments`` delta once its invoke had
    closed. Here the name goes out first and the arguments in many deltas as the value is
    generated, and the client's accumulation of them is the non-streamed arguments, exactly."""
    body = "Dear team,\nthe build of release 4.2 failed on three runners; " * 12
    reply = "Sending." + _block(
        _invoke("send_mail", _param("to", True, "ops@example.com"), _param("body", True, body))
    )
    mail = {
        "type": "function",
        "function": {
            "name": "send_mail",
            "parameters": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            },
        },
    }
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[mail])
    ns = _message(client, **kw)
    events = []
    with client.chat.completions.stream(**kw) as stream:
        for ev in stream:
            if ev.type == "chunk":
                events += [
                    ("name", t.function.name)
                    for t in ev.chunk.choices[0].delta.tool_calls or []
                    if t.function and t.function.name
                ]
            elif ev.type == "tool_calls.function.arguments.delta":
                events.append(("arguments", ev.arguments_delta))
        ch = stream.get_final_completion().choices[0]
    folded = (
        ch.message.content or "",
        [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []],
    )
    assert (ns[0], ns[1], ns[2]) == (folded[0], folded[1], ch.finish_reason)
    want = _written_args(("to", True, "ops@example.com"), ("body", True, body))
    assert ns == ("Sending.", [("send_mail", want)], "tool_calls")
    assert events[0] == ("name", "send_mail")  # the name first, before any argument text
    arg_deltas = [d for t, d in events if t == "arguments" and d]
    n_tokens = len(tok.encode(body, add_special_tokens=False))
    assert len(arg_deltas) > n_tokens // (2 * per_chunk), len(arg_deltas)  # as generated, not at the end
    assert "".join(arg_deltas) == want


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
    stop inside the invoke makes no call: the block is dropped (as any malformed block), the text
    before it is the content, ``finish_reason`` ``"stop"``, streamed and not;
    streamed, once the invoke tag was complete the call's name and the arguments up to the stop
    went out (the documented difference). A stop after the invoke closed leaves the call made
    (``"tool_calls"``), the same streamed and not."""
    reply = "Let me look." + CALL
    client, _ = client_for(ChunkTM(tok, reply, per_chunk))
    at = reply.index(stop)
    named = reply.index('name="get_weather">') + len('name="get_weather">')
    closed = reply.index(f"</{D}invoke>") + len(f"</{D}invoke>")
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER], stop=[stop])
    if at >= closed:
        content, calls, finish = _both(client, **kw)
        assert (content, finish) == ("Let me look.", "tool_calls")
        assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", FULL)]
        return
    (content, calls, finish), sent = _both_but_the_sent_call(client, **kw)
    assert (content, calls, finish) == ("Let me look.", [], "stop")
    if at < named:
        assert sent is None
    else:
        assert sent is not None and sent[0] == "get_weather", sent
        assert _written_args(("city", True, CITY), ("days", False, "3")).startswith(sent[1]), sent


def test_stop_inside_the_second_call_keeps_the_first(tok: PreTrainedTokenizerFast) -> None:
    """A stop string inside the second invoke of a block: the first call stays a call, the rest
    of the block is dropped, no call of the second (streamed: its name and the
    start of its arguments, sent before the stop). The non-streamed finish reason is
    ``"tool_calls"`` (a call was made, as SGLang's DeepSeek-V4 detector answers the dropped
    unclosed invoke), the stream's ``"stop"`` (it sent the dropped call's start)."""
    first = _invoke("get_weather", _param("city", True, "Oslo"))
    second = _invoke("get_weather", _param("city", True, "Rome"), _param("days", False, "2"))
    reply = "Two." + _block(first, second)
    client, _ = client_for(ChunkTM(tok, reply))
    kw: dict[str, Any] = dict(model="m", messages=MSGS, tools=[WEATHER], stop=["Rome"])
    (content, calls, finish), sent = _both_but_the_sent_call(client, **kw)
    assert (content, finish) == ("Two.", "tool_calls")
    assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", {"city": "Oslo"})]
    assert sent == ("get_weather", '{"city": "')


# ---------------------------------------------------------------------- malformed arguments
@pytest.mark.parametrize("per_chunk", [1, 2, 7])
def test_invalid_json_value_after_its_call_was_streamed(tok: PreTrainedTokenizerFast, per_chunk: int) -> None:
    """A call whose ``string="false"`` value turns out not to be JSON (the model wrote
    ``three``): non-streamed it is no call (its invoke dropped; the good invoke before it stays a
    call, finish reason ``"tool_calls"``, ``"stop"`` with no call at all). Streamed, its id, name
    and argument fragments went out as generated (as vLLM streams them since PR #42879): the
    folded stream has the content of the non-streamed message, finish reason ``"stop"``, and that
    one extra call, last, with the arguments as written up to the failing value (``json.loads``
    rejects them)."""
    good = _invoke("get_weather", _param("city", True, "Oslo"))
    bad = _invoke("get_weather", _param("city", True, "Paris"), _param("days", False, "three"))
    sent_args = _written_args(("city", True, "Paris"), ("days", False, "three"))[:-1]
    for reply, calls_want in (
        ("Checking." + _block(good, bad), [("get_weather", {"city": "Oslo"})]),
        ("Checking." + _block(bad), []),  # the bad invoke alone: no call at all
    ):
        client, _ = client_for(ChunkTM(tok, reply, per_chunk))
        (content, calls, finish), sent = _both_but_the_sent_call(
            client, model="m", messages=MSGS, tools=[WEATHER]
        )
        assert (content, finish) == ("Checking.", "tool_calls" if calls_want else "stop")
        assert [(n, json.loads(a)) for n, a in calls] == calls_want
        # the value's text goes out as generated, unless its closing tag came in the same chunk
        assert sent is not None and sent[0] == "get_weather", sent
        assert sent_args.startswith(sent[1]) and sent[1].startswith(sent_args[: -len("three")]), sent
        with pytest.raises(ValueError):
            json.loads(sent[1])


@pytest.mark.parametrize(
    ("body", "written"),
    [
        ('{"city": "Paris", "days": }', '{"city": "Paris", "days": }'),  # a JSON body that is not JSON
        # a duplicate parameter
        (_param("city", True, "a") + "\n" + _param("city", True, "b"), _written_args(("city", True, "a"))),
        # text between tags
        (_param("city", True, "a") + "\nstray text\n", _written_args(("city", True, "a"))),
    ],
)
def test_every_late_failure_of_an_invoke(tok: PreTrainedTokenizerFast, body: str, written: str) -> None:
    """The whole kind: any failure found after the invoke tag (a bad JSON body, a duplicate
    parameter, text between tags) drops the block (the text before it is the content) and makes
    no call, finish reason
    ``"stop"``, streamed and not; the stream also sent the call's name and its arguments up to
    the failure (a prefix of the text written before it), never any markup."""
    reply = "Hm." + _block(f'<{D}invoke name="get_weather">\n{body}\n</{D}invoke>')
    client, _ = client_for(ChunkTM(tok, reply))
    msg, sent = _both_but_the_sent_call(client, model="m", messages=MSGS, tools=[WEATHER])
    assert msg == ("Hm.", [], "stop")
    assert sent is not None and sent[0] == "get_weather" and written.startswith(sent[1]), sent
    assert sent[1], sent  # arguments were streamed before the failure was known
