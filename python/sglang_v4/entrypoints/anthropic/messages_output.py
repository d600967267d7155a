"""The chat path's output in Messages API terms: content blocks, ``stop_reason``, ``usage`` (a
whole message) and the server-sent events of a streamed one.

A finished choice (:class:`~sglang_v4.entrypoints.openai.serving_chat.ChoiceOutput`) becomes, in
this order, a ``thinking`` block (the reasoning, with an opaque ``signature``), a ``text`` block
(the answer, when there is one) and one ``tool_use`` block per call (``input`` the arguments as a
JSON object; a call cut by ``max_tokens`` has the arguments that parse so far, as the
``anthropic`` client's stream accumulator reads a cut ``input_json_delta`` stream: an unfinished
string is left out); answer text written after the calls is a ``text`` block after them, where
the stream sends it, without the whitespace that separated it from the calls (the block
boundary separates it); a generation stopped inside a call (EOS, a stop sequence) made no call: its
text is the ``text`` block, as on chat completions (streamed, the ``tool_use`` block of the
call's first deltas went out already and is followed by that text; its ``input_json_delta``
fragments stop before one that would make its arguments no JSON, :meth:`MessageEvents.call`). ``stop_reason``:
``tool_use`` after whole calls, ``max_tokens`` when the token limit (or the context) ended the
generation, ``stop_sequence`` (and ``stop_sequence`` set) when one of the request's
``stop_sequences`` did, else ``end_turn``.

A stream (:class:`MessageEvents`) is Anthropic's event sequence, each event as ``event: NAME`` and
``data: JSON`` lines: ``message_start`` (the message with empty ``content``, ``usage`` with the
prompt's tokens), ``ping``, then per block ``content_block_start``, its deltas
(``thinking_delta``, ``text_delta``, ``input_json_delta``; a thinking block ends with a
``signature_delta``) and ``content_block_stop``; at the end ``message_delta`` (``stop_reason``,
``stop_sequence``, ``usage``) and ``message_stop``. Blocks come in the order the model writes
them. An engine error mid-stream is an ``error`` event (Anthropic's error body), after which the
stream ends. With the SSE keep-alive on (``--sse-keep-alive-interval``) a silent stream sends
``ping`` events (:data:`PING_EVENT`), the liveness signal Anthropic's clients count (they skip SSE
comments); when the interval passes before the first output, ``message_start`` (its ``usage``
from the prompt's token count, :func:`prompt_usage`) and its ``ping`` go out first, so no event
precedes ``message_start``. A thinking-mode reply that ends without ever closing its reasoning
is a ``thinking`` block only, streamed or not (as on chat completions); in thinking mode a reply
that reasoned nothing (``</think>`` first) still opens with a ``thinking`` block, an empty one, as
DeepSeek's own Messages response generator (``deepseek-recipe``) writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from sglang_v4.entrypoints.anthropic.protocol import (
    AnthropicMessage,
    ContentBlock,
    MessagesUsage,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    anthropic_error_body,
    thinking_signature,
)
from sglang_v4.entrypoints.chat_encoding import EOS
from sglang_v4.entrypoints.openai.serving_chat import ChoiceOutput
from sglang_v4.entrypoints.openai.tool_calls import partial_json_object
from sglang_v4.entrypoints.openai.tool_parser import ParsedToolCall, ToolCallDelta
from sglang_v4.entrypoints.strict_json import JsonObjectPrefixReader

__all__ = [
    "PING_EVENT",
    "MessageEvents",
    "message_content",
    "message_usage",
    "output_pieces",
    "prompt_usage",
    "stop_reason",
    "tool_input",
    "tool_use_id",
]


def tool_use_id(call_id: str) -> str:
    """A ``tool_use`` block id in Anthropic's style (``toolu_`` + the chat call id's digits)."""
    return "toolu_" + call_id.removeprefix("call_")


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments (a JSON object text, or a prefix of one when the call was cut) as the
    ``input`` object: what parses, an unfinished trailing string left out (the ``anthropic``
    client's partial reading of ``input_json_delta`` fragments,
    :func:`~sglang_v4.entrypoints.openai.tool_calls.partial_json_object`); ``{}`` when nothing
    does."""
    value = partial_json_object(arguments)
    return {} if value is None else value


def message_content(
    out: ChoiceOutput, omit_thinking: bool = False, thinking_mode: bool = False
) -> list[ContentBlock]:
    """The content blocks of a finished choice: thinking, text, tool uses (module docstring);
    ``omit_thinking`` (``thinking.display: "omitted"``): the thinking block's text left empty,
    its ``signature`` kept; ``thinking_mode`` (the reasoning read apart): a thinking block even
    when the model reasoned nothing (an empty one)."""
    blocks: list[ContentBlock] = []
    if out.reasoning or thinking_mode:
        reasoning = out.reasoning or ""
        shown = "" if omit_thinking else reasoning
        blocks.append(ThinkingBlock(thinking=shown, signature=thinking_signature(reasoning)))
    content, after = out.content or "", out.content_after_calls
    before = content[: len(content) - len(after)] if after and content.endswith(after) else content
    if before:
        blocks.append(TextBlock(text=before))
    blocks += [_tool_use(c) for c in out.tool_calls]
    # text written after the calls stays after them, in a block of its own: the block boundary
    # is its separator from the text before the calls, so its leading whitespace is left out
    after = after.lstrip() if before is not content else ""
    if after:
        blocks.append(TextBlock(text=after))
    return blocks


def _tool_use(c: ParsedToolCall) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id(c.id), name=c.name, input=tool_input(c.arguments))


def stop_reason(
    finish: str | None, matched: Any, stop_sequences: Sequence[str] | None
) -> tuple[StopReason, str | None]:
    """``(stop_reason, stop_sequence)`` of the chat finish reason and matched stop (as the client
    gave it: :meth:`~sglang_v4.entrypoints.openai.chat_prepare.ChatPlan.matched_stop`)."""
    if finish == "tool_calls":
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if finish == "stop" and isinstance(matched, str) and matched in (stop_sequences or ()):
        return "stop_sequence", matched
    return "end_turn", None


def message_usage(
    meta: dict[str, Any], cache_report: bool, output_tokens: int | None = None
) -> MessagesUsage:
    """``usage`` of an engine output's ``meta_info`` (:class:`~.protocol.MessagesUsage`: with
    ``cache_report`` the cached prompt tokens are ``cache_read_input_tokens``, not
    ``input_tokens``)."""
    prompt = int(meta.get("prompt_tokens", 0))
    out = int(meta.get("completion_tokens", 0)) if output_tokens is None else output_tokens
    if not cache_report:
        return MessagesUsage(input_tokens=prompt, output_tokens=out)
    cached = min(int(meta.get("cached_tokens", 0) or 0), prompt)
    return MessagesUsage(
        input_tokens=prompt - cached,
        output_tokens=out,
        cache_creation_input_tokens=0,
        cache_read_input_tokens=cached,
    )


def output_pieces(ret: dict[str, Any], sent: int) -> list[dict[str, Any]]:
    """One engine output (``ret``: cumulative ``text``, ``meta_info``) as the outputs to read in
    turn, ``sent`` characters of its text read already: one ending after each ``>`` of the new
    text (a tag's end: ``</think>``, a DSML tag; unfinished, ``finish_reason`` ``None``), then
    ``ret`` itself.

    Read whole, an output that holds the end of a call and the text after it (a reply written in
    one scheduler step, speculative decoding, ``--stream-interval``) gives its text and its call
    deltas apart, and the order between them is lost: the text written after the calls would be
    sent as a block before them (and a later argument fragment of an open call dropped). Cut at
    tag ends, no piece holds text after a call's delta, so each piece's text goes before its
    deltas, as the model wrote them. The EOS marker is dropped first, as the reader drops it.
    """
    text = str(ret.get("text", "")).replace(EOS, "")
    cuts = [i + 1 for i in range(sent, len(text) - 1) if text[i] == ">"]
    if not cuts:
        return [ret]
    meta = {**ret.get("meta_info", {}), "finish_reason": None}
    return [{"text": text[:c], "meta_info": meta} for c in cuts] + [ret]


def sse_event(name: str, data: dict[str, Any]) -> bytes:
    """One server-sent event: ``event: NAME`` and ``data: JSON`` (``data`` with ``type`` NAME)."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **data}) + b"\n\n"


#: Anthropic's keep-alive event (``event: ping``, ``data: {"type": "ping"}``): one follows
#: ``message_start``, as in Anthropic's documented streams, and one fills each silent keep-alive
#: interval on ``/v1/messages``
PING_EVENT = sse_event("ping", {})


def prompt_usage(prompt_tokens: int, cache_report: bool) -> MessagesUsage:
    """``usage`` of a ``message_start`` sent before the request's first output: the whole prompt
    (``prompt_tokens`` tokens) as ``input_tokens``, ``output_tokens`` 0 and, with
    ``cache_report``, both cache counts 0, since the prefix-cache hit is known only from the first
    output. Their sum is the prompt's length, as in every later ``usage``; the closing
    ``message_delta`` carries every count (:func:`message_usage`), and a client's accumulated
    message takes them from it."""
    return message_usage({"prompt_tokens": prompt_tokens}, cache_report, output_tokens=0)


def error_event(message: str, status: int) -> bytes:
    """The ``error`` event of a stream (Anthropic's error body)."""
    body = anthropic_error_body(message, status)
    return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"


class MessageEvents:
    """The events of one streamed message: the content blocks opened and closed as the
    reasoning, text and call deltas arrive (one open block at a time; module docstring).

    Args:
        start: the ``message`` of ``message_start`` (empty content, the prompt's usage).
        omit_thinking: ``thinking.display: "omitted"``: a thinking block sends no
            ``thinking_delta``, only its ``signature_delta``.
        thinking_mode: the reasoning is read apart (thinking on): the message opens with a
            thinking block, an empty one when the model reasoned nothing (as
            :func:`message_content`, and DeepSeek's own Messages event generator).
    """

    def __init__(
        self, start: AnthropicMessage, omit_thinking: bool = False, thinking_mode: bool = False
    ) -> None:
        self.message = start
        self.omit_thinking = omit_thinking
        self.thinking_mode = thinking_mode
        self.n_blocks = 0
        self.open: Any = None  # "thinking", "text" or ("tool_use", call index)
        self.thinking = ""
        self.after_call = False  # a tool_use block was opened: a text block next starts stripped
        self.arguments = JsonObjectPrefixReader()  # the open tool_use block's arguments so far

    def start(self) -> list[bytes]:
        """``message_start`` and a ``ping``."""
        return [sse_event("message_start", {"message": self.message.model_dump(mode="json")}), PING_EVENT]

    def _open(self, key: Any, block: dict[str, Any]) -> list[bytes]:
        out = self.close()
        self.open = key
        self.n_blocks += 1
        return out + [sse_event("content_block_start", {"index": self.n_blocks - 1, "content_block": block})]

    def _first_thinking(self) -> list[bytes]:
        """The opening of an empty thinking block, in thinking mode before any other block."""
        if not self.thinking_mode or self.n_blocks:
            return []
        return self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse_event("content_block_delta", {"index": self.n_blocks - 1, "delta": delta})

    def reasoning(self, text: str) -> list[bytes]:
        """The events of a reasoning delta (opens a ``thinking`` block when another is open)."""
        if not text:
            return []
        out = (
            []
            if self.open == "thinking"
            else self._open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
        )
        self.thinking += text
        if self.omit_thinking:
            return out
        return out + [self._delta({"type": "thinking_delta", "thinking": text})]

    def text(self, text: str) -> list[bytes]:
        """The events of an answer text delta (opens a ``text`` block when another is open)."""
        if self.open != "text" and self.after_call:
            text = text.lstrip()  # as message_content: the block boundary separates the texts
        if not text:
            return []
        out = self._first_thinking()
        out += [] if self.open == "text" else self._open("text", {"type": "text", "text": ""})
        return out + [self._delta({"type": "text_delta", "text": text})]

    def call(self, d: ToolCallDelta) -> list[bytes]:
        """The events of a tool-call delta: its first one (``name`` set) opens a ``tool_use``
        block (``input`` ``{}``), argument fragments are ``input_json_delta`` events.

        A fragment after which the block's arguments can no longer begin a JSON object (a
        ``string="false"`` value the model spelled as no JSON, ``{"days": three``: a malformed
        call, dropped from the whole message, whose first deltas went out already) is not sent,
        nor is anything after it: Anthropic clients parse the accumulated ``partial_json`` after
        every delta (the ``anthropic`` client raises on text no continuation makes JSON), so the
        block ends with the arguments that parsed (:class:`~..strict_json.JsonObjectPrefixReader`).
        """
        key = ("tool_use", d.index)
        out: list[bytes] = []
        if self.open != key:
            if d.name is None or d.id is None:  # a fragment of a call already closed: none is sent
                return out
            block = {"type": "tool_use", "id": tool_use_id(d.id), "name": d.name, "input": {}}
            out += self._first_thinking() + self._open(key, block)
            self.after_call = True
            self.arguments = JsonObjectPrefixReader()
        if d.arguments and self.arguments.feed(d.arguments):
            out.append(self._delta({"type": "input_json_delta", "partial_json": d.arguments}))
        return out

    def close(self) -> list[bytes]:
        """The closing events of the open block (a thinking block's ``signature_delta`` first)."""
        key, self.open = self.open, None
        if key is None:
            return []
        out = []
        if key == "thinking":
            out.append(
                self._delta({"type": "signature_delta", "signature": thinking_signature(self.thinking)})
            )
            self.thinking = ""
        out.append(sse_event("content_block_stop", {"index": self.n_blocks - 1}))
        return out

    def finish(self, reason: StopReason, sequence: str | None, usage: MessagesUsage) -> list[bytes]:
        """The open block closed, ``message_delta`` (stop reason, usage) and ``message_stop``."""
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        return (
            self._first_thinking()
            + self.close()
            + [
                sse_event(
                    "message_delta",
                    {"delta": delta, "usage": usage.model_dump(mode="json", exclude_none=True)},
                ),
                sse_event("message_stop", {}),
            ]
        )
