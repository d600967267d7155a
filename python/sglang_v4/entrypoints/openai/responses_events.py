"""The server-sent events of a streamed ``/v1/responses`` reply (``stream: true``): OpenAI's event
sequence, each event an ``event:`` and a ``data:`` line (no ``[DONE]``) with a
``sequence_number`` from 0.

Per output item: ``response.output_item.added``; for a message ``response.content_part.added``,
``response.output_text.delta``..., ``response.output_text.done``, ``response.content_part.done``;
for reasoning the same with ``reasoning_text`` parts and ``response.reasoning_text.delta`` /
``.done``; for a call ``response.function_call_arguments.delta``... and ``.done`` (with the arguments and
the function's ``name``; a call of a
custom tool: a ``custom_tool_call`` item, ``response.custom_tool_call_input.delta``... and
``.done`` with its free-form input); then ``response.output_item.done``. The route (:mod:`.serving_responses`) sends the events around
them (``response.created``, ``response.in_progress``, the terminal ``response.completed`` /
``response.incomplete`` / ``error`` + ``response.failed``) through :meth:`ResponsesEventWriter.event`.
"""

from __future__ import annotations

from typing import Any

import orjson

from sglang_v4.entrypoints.openai.protocol_responses import OutputText, ReasoningText, new_item_id
from sglang_v4.entrypoints.openai.responses_custom_tools import CustomInputStream
from sglang_v4.entrypoints.openai.responses_reasoning_state import encode_reasoning
from sglang_v4.entrypoints.openai.tool_parser import ToolCallDelta

__all__ = ["ResponsesEventWriter"]


class ResponsesEventWriter:
    """The SSE events of one streamed response: sequence numbers, and the output items opened and
    closed as the reasoning, text and call deltas arrive (one open item at a time).

    Attributes:
        ids: item ids by kind (``"reasoning"``, ``"message"``, ``("call", index)``), reused by the
            final response.
        custom: the names of the request's custom tools (their calls are ``custom_tool_call``
            items).
        namespaces: tool name -> the ``namespace`` its call items carry.
        encrypt_reasoning: whether a closed ``reasoning`` item carries its ``encrypted_content``
            (``include: ["reasoning.encrypted_content"]``: :mod:`.responses_reasoning_state`).
    """

    def __init__(
        self,
        custom: frozenset[str] = frozenset(),
        namespaces: dict[str, str] | None = None,
        encrypt_reasoning: bool = False,
    ) -> None:
        self.custom = custom
        self.namespaces = namespaces or {}
        self.encrypt_reasoning = encrypt_reasoning
        self.seq = 0
        self.n_items = 0
        self.open: dict[str, Any] | None = None
        self.ids: dict[Any, str] = {}

    def event(self, kind: str, **fields: Any) -> bytes:
        """One SSE event (UTF-8 ``event:`` + ``data:`` lines): ``{"type": kind, "sequence_number",
        **fields}`` as JSON, taking the next sequence number."""
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def _start(self, kind: str, key: Any, item: dict[str, Any], part: dict[str, Any] | None) -> list[bytes]:
        if kind in ("function_call", "custom_tool_call") and (self.open or {}).get("kind") == "message":
            self.open["item"]["phase"] = "commentary"  # a call follows the text
        out = self.close()
        item_id = item["id"]
        self.ids.setdefault(key, item_id)
        self.open = {"kind": kind, "key": key, "index": self.n_items, "item": item, "text": ""}
        self.n_items += 1
        out.append(self.event("response.output_item.added", output_index=self.open["index"], item=item))
        if part is not None:
            out.append(self._part_event("response.content_part.added", part))
        return out

    def _part_event(self, kind: str, part: dict[str, Any]) -> bytes:
        o = self.open or {}
        return self.event(kind, item_id=o["item"]["id"], output_index=o["index"], content_index=0, part=part)

    def reasoning(self, delta: str) -> list[bytes]:
        """The events of a reasoning-text delta: a ``reasoning`` item opened first when another
        kind is open (the open one closed); none for an empty delta."""
        if not delta:
            return []
        out: list[bytes] = []
        if self.open is None or self.open["kind"] != "reasoning":
            item = {
                "id": new_item_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            out += self._start("reasoning", "reasoning", item, {"type": "reasoning_text", "text": ""})
        return out + self._delta("response.reasoning_text.delta", delta)

    def text(self, delta: str, logprobs: list[dict[str, Any]] | None = None) -> list[bytes]:
        """The events of an answer-text delta: a ``message`` item opened first when another kind
        is open (the open one closed); none for an empty delta. ``logprobs``: those of the
        delta's tokens (OpenAI's ``Logprob`` entries; ``include:
        ["message.output_text.logprobs"]``), sent with the delta and gathered for the
        ``output_text.done`` event and the closed part."""
        if not delta:
            return []
        out: list[bytes] = []
        if self.open is None or self.open["kind"] != "message":
            out += self._open_message()
        lps = list(logprobs or [])
        (self.open or {}).setdefault("logprobs", []).extend(lps)
        return out + self._delta("response.output_text.delta", delta, logprobs=lps)

    def _open_message(self) -> list[bytes]:
        item = {
            "id": new_item_id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
            "phase": "final_answer",
        }
        return self._start("message", "message", item, OutputText(text="").model_dump(mode="json"))

    def call(self, d: ToolCallDelta) -> list[bytes]:
        """The events of a tool-call delta: a ``function_call`` item opened at a call's first
        fragment (the one that has its ``name``), then argument deltas (a custom tool's call: a
        ``custom_tool_call`` item and input deltas); a fragment of a call already closed sends
        nothing."""
        out: list[bytes] = []
        key = ("call", d.index)
        if self.open is None or self.open["key"] != key:
            if d.name is None:  # a late fragment of a call already closed: nothing to attach it to
                return out
            if d.name in self.custom:
                return self._start_custom(key, d) + self._custom_delta(d.arguments)
            item = {
                "id": new_item_id("fc"),
                "type": "function_call",
                "call_id": d.id,
                "name": d.name,
                "arguments": "",
                "status": "in_progress",
            }
            if d.name in self.namespaces:
                item["namespace"] = self.namespaces[d.name]
            out += self._start("function_call", key, item, None)
        if (self.open or {}).get("kind") == "custom_tool_call":
            return out + self._custom_delta(d.arguments)
        if d.arguments:
            o = self.open or {}
            o["text"] += d.arguments
            out.append(
                self.event(
                    "response.function_call_arguments.delta",
                    item_id=o["item"]["id"],
                    output_index=o["index"],
                    delta=d.arguments,
                )
            )
        return out

    def _start_custom(self, key: Any, d: ToolCallDelta) -> list[bytes]:
        item = {
            "id": new_item_id("ctc"),
            "type": "custom_tool_call",
            "call_id": d.id,
            "name": d.name,
            "input": "",
        }
        if d.name in self.namespaces:
            item["namespace"] = self.namespaces[d.name]
        out = self._start("custom_tool_call", key, item, None)
        (self.open or {})["input"] = CustomInputStream()
        return out

    def _custom_delta(self, fragment: str) -> list[bytes]:
        """``response.custom_tool_call_input.delta`` of the input text an argument fragment
        adds to the open custom tool call (none when it adds none)."""
        o = self.open or {}
        return self._input_delta(o, o["input"].feed(fragment))

    def _input_delta(self, o: dict[str, Any], delta: str) -> list[bytes]:
        if not delta:
            return []
        where = {"item_id": o["item"]["id"], "output_index": o["index"]}
        return [self.event("response.custom_tool_call_input.delta", **where, delta=delta)]

    def drop_call(self, dropped: set[int]) -> list[bytes]:
        """Close the open ``function_call`` item ``incomplete`` when its call is one of the
        ``dropped`` (its invoke turned out malformed or was stopped inside): its events went out
        already, the final response has no such item."""
        o = self.open
        if o is None or o["kind"] not in ("function_call", "custom_tool_call") or o["key"][1] not in dropped:
            return []
        return self.close("incomplete")

    def _delta(self, kind: str, delta: str, **extra: Any) -> list[bytes]:
        o = self.open or {}
        o["text"] += delta
        ev = self.event(
            kind, item_id=o["item"]["id"], output_index=o["index"], content_index=0, delta=delta, **extra
        )
        return [ev]

    def close(self, status: str = "completed") -> list[bytes]:
        """The closing events of the open item (none when no item is open)."""
        o, self.open = self.open, None
        if o is None:
            return []
        item, text, where = dict(o["item"], status=status), o["text"], {"item_id": o["item"]["id"]}
        where["output_index"] = o["index"]
        out = []
        if o["kind"] == "custom_tool_call":
            rest, whole = o["input"].finish()
            out += self._input_delta(o, rest)
            item = {k: v for k, v in item.items() if k != "status"}
            item["input"] = whole
            out.append(self.event("response.custom_tool_call_input.done", **where, input=whole))
        elif o["kind"] == "function_call":
            item["arguments"] = text
            # ``name`` beside the arguments: OpenAI's reference example of the event (and the
            # OpenAPI spec of 2025-26) had it, and decoders generated from that spec require it
            # (MacPaw/OpenAI#409); clients of the current spec read it off the item and ignore it
            done = {"arguments": text, "name": item.get("name", "")}
            out.append(self.event("response.function_call_arguments.done", **where, **done))
        elif o["kind"] == "reasoning":
            part = ReasoningText(text=text).model_dump(mode="json")
            item["content"] = [part]
            if self.encrypt_reasoning:
                item = dict(item, encrypted_content=encode_reasoning(text))
            out.append(self.event("response.reasoning_text.done", **where, content_index=0, text=text))
            out.append(self.event("response.content_part.done", **where, content_index=0, part=part))
        else:
            lps = o.get("logprobs") or []
            part = OutputText(text=text, logprobs=lps).model_dump(mode="json")
            item["content"] = [part]
            out.append(
                self.event("response.output_text.done", **where, content_index=0, text=text, logprobs=lps)
            )
            out.append(self.event("response.content_part.done", **where, content_index=0, part=part))
        out.append(self.event("response.output_item.done", output_index=o["index"], item=item))
        return out

    def finish(self, status: str) -> list[bytes]:
        """Close the open item (``status``); an output of nothing has no item, as the
        non-streamed response (and DeepSeek's own Responses generator)."""
        return self.close(status)
