"""The Responses API's request fields in chat-completions terms (``POST /v1/responses`` runs on the
chat path, :mod:`.serving_responses`).

* ``input`` (a string, or a list of items) becomes chat messages (:func:`input_to_messages`):
  message items (roles ``user`` / ``system`` / ``developer`` / ``assistant``; ``content`` a string
  or ``input_text`` / ``output_text`` / ``refusal`` parts) keep their role, but for ``developer``,
  which is ``system``: OpenAI's developer instructions, read as a system message as the chat route
  reads a developer message (:func:`~.chat_prepare.developer_messages_as_system`) and as SGLang's
  Responses route hands it to the chat template (the V4 encoder's own developer turn is another
  thing: a user-tier turn, which thinking mode leaves out before the last user turn); ``reasoning``,
  assistant ``message`` and ``function_call`` items that follow one another form one assistant
  turn (``reasoning_content``, ``content``, ``tool_calls`` with the item's ``call_id`` as the call
  id; the texts of consecutive assistant messages joined by a blank line, empty ones skipped),
  as one response's output is one turn, and so do a ``reasoning`` item and the turn's
  first assistant ``message`` that come after its calls and before their outputs (clients replay
  a response's text after its calls; OpenAI pairs a call with its output by ``call_id``, not by
  adjacency), the turn rendered in the model's own order: reasoning, text, calls; a
  ``function_call_output`` item is a ``tool`` message
  answering the call of that ``call_id``, which must be one of the calls of the latest assistant
  turn and answered once (two calls of one turn under one ``call_id``, or a second output of a
  call, is a 400: which call an output answers would be a guess; an id a later turn reuses is
  that turn's), and every call must be answered (OpenAI's ``No tool output found for function call``
  400: :func:`check_calls_answered`). A reasoning item's text is its ``reasoning_text`` content;
  its ``summary`` is checked and not replayed (a summary is a digest of reasoning the other
  server kept, not the model's own text). Its ``encrypted_content`` gives the text when the
  item has no ``reasoning_text`` and the blob is one this server wrote
  (:mod:`.responses_reasoning_state`). One with no text (summary only, empty, or another
  server's ``encrypted_content`` only, as Codex replays them)
  is a no-op, and reasoning items that follow one another are one turn's reasoning (their
  texts joined by a newline): DeepSeek's Responses converter reads them so. A reasoning-only turn
  (text, then a user message) stays an empty assistant turn, as that converter renders it. A
  ``function_call``'s ``arguments`` is a JSON object text, or the beginning of one (a call cut by
  ``max_output_tokens``, replayed with the members that parse); any other text is replayed as
  DeepSeek's converter replays it, one ``arguments`` string parameter. ``content`` / ``output`` may not
  be ``null``. ``custom_tool_call`` / ``custom_tool_call_output`` items (a custom tool's call,
  its free-form ``input`` the one string parameter of :mod:`.responses_custom_tools`, and its
  result) are read as ``function_call`` / ``function_call_output`` items are.
* ``tools`` and ``tool_choice``: :mod:`.responses_tools`.
* ``text.format`` (``text`` / ``json_object`` / ``json_schema`` with ``name`` and ``schema`` at its
  top level) becomes ``response_format`` (:func:`responses_text_format`); a chat-shaped
  ``response_format`` sent to this route instead is read as that ``text.format``
  (:func:`text_with_response_format`), never dropped.
* ``reasoning.effort`` switches thinking mode (:func:`reasoning_switch`).

Every error is a :class:`~.request_errors.RequestError` (400) whose message and ``param`` name the
field as the client sent it, OpenAI's way (``input[2].call_id``, ``tools[0].name``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.chat_encoding import message_text, normalize_reasoning_effort
from sglang_v4.entrypoints.openai.responses_custom_tools import custom_call_arguments
from sglang_v4.entrypoints.openai.responses_reasoning_state import decode_reasoning
from sglang_v4.entrypoints.openai.serving_base import RequestError
from sglang_v4.entrypoints.openai.tool_calls import partial_json_object
from sglang_v4.entrypoints.strict_json import loads_strict

__all__ = [
    "check_calls_answered",
    "input_to_messages",
    "reasoning_switch",
    "responses_text_format",
    "text_with_response_format",
]

#: Roles of Responses message items, compared case-sensitively (:func:`_role_error` says why).
MESSAGE_ROLES = ("user", "system", "developer", "assistant")
#: Input item types of a tool call, and of its result, by the tool's type.
CALL_ITEMS = {"function_call": "function", "custom_tool_call": "custom"}
OUTPUT_ITEMS = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}
#: Values of ``reasoning.summary`` (OpenAI's; accepted, none changes the output).
REASONING_SUMMARIES = (None, "auto", "concise", "detailed")


def _error(message: str, param: str) -> RequestError:
    return RequestError(message, 400, param=param)


def _role_error(role: Any, field: str) -> RequestError:
    """The 400 of a message item whose ``role`` is none of :data:`MESSAGE_ROLES`, naming
    ``input[i].role``.

    Roles are read case-sensitively here, unlike on ``/v1/chat/completions``
    (:class:`~.protocol_chat.ChatMessageParam` lowercases them, as SGLang's chat route does since
    sgl-project/sglang#7499, for clients that send chat roles as enum names). In OpenAI's
    Responses API ``role`` is a lowercase enum (``EasyInputMessageParam``: ``user``,
    ``assistant``, ``system``, ``developer``) and OpenAI answers any other spelling with a 400
    naming ``input[i].role``; the ``openai`` client only sends those values, vLLM validates
    ``input`` against the client's own item types (so ``"Assistant"`` fails there too), and
    DeepSeek's own Responses converter (``deepseek-recipe``) refuses it as an unknown variant.
    So a role in another case is a 400 whose message names the lowercase spelling to send.
    """
    msg = f"{field}.role must be one of {', '.join(MESSAGE_ROLES)}; got {role!r}."
    if isinstance(role, str) and role.lower() in MESSAGE_ROLES:
        msg += f" Roles are lowercase on this route, as in OpenAI's Responses API: send {role.lower()!r}."
    return _error(msg, f"{field}.role")


def _text(content: Any, field: str) -> str:
    """``content`` (a string or text parts, joined by a blank line: :func:`message_text`) as text;
    a non-text part is a 400 naming it."""
    try:
        return message_text(content, field)
    except ValueError as e:
        param = str(e).split(":", 1)[0].split(" ", 1)[0]
        raise _error(str(e), param) from None


def _reasoning_text(item: Mapping[str, Any], field: str) -> str:
    """The text of a ``reasoning`` item: its ``reasoning_text`` parts (joined as they are), else
    the text of an ``encrypted_content`` this server wrote (:mod:`.responses_reasoning_state`;
    another server's is opaque: no text); the ``summary`` parts are checked and not read (module
    docstring)."""
    parts = item.get("content") or []
    summary = item.get("summary") or []
    for name, value, kind in (("content", parts, "reasoning_text"), ("summary", summary, "summary_text")):
        if not isinstance(value, list):
            raise _error(f"{field}.{name} must be a list.", f"{field}.{name}")
        for j, p in enumerate(value):
            if (
                not isinstance(p, Mapping)
                or p.get("type", kind) != kind
                or not isinstance(p.get("text"), str)
            ):
                raise _error(
                    f"{field}.{name}[{j}] must be a {kind!r} part with a string `text`.",
                    f"{field}.{name}[{j}]",
                )
    text = "".join(p["text"] for p in parts)
    blob = item.get("encrypted_content")
    if not text and isinstance(blob, str):  # this server's blob gives the text back; another's: none
        text = decode_reasoning(blob, f"{field}.encrypted_content") or ""
    return text


def _call_arguments(args: str) -> str:
    """A ``function_call`` item's ``arguments`` as the text the prompt renders.

    A whole object text is kept as it is. The beginning of one is what a call cut by
    ``max_output_tokens`` holds (such an item, ``status: "incomplete"``, is this server's own
    output, replayed with ``store: false`` or continued by ``previous_response_id``): it is
    replayed with the members that parse (:func:`~.tool_calls.partial_json_object`), as the
    Messages API's ``tool_use`` of a cut call holds them, so that the conversation can go on.
    Any other text (another JSON value such as ``[]`` or ``null``, text that is no JSON nor the
    beginning of any JSON object such as ``{"a": "x" "b"``, Python's lenient readings such as
    ``{"a": NaN}`` or a lone ``\\ud800`` escape (:mod:`~sglang_v4.entrypoints.strict_json`), or JSON nested deeper than
    Python decodes) is kept as sent: the chat encoder renders it as one
    ``arguments`` string parameter, as DeepSeek's own Responses converter (``deepseek-recipe``)
    and this server's chat route render it, so that a malformed call in a replayed history does
    not make every later request of the conversation a 400.
    """
    value = partial_json_object(args)
    if value is None:
        return args
    try:
        loads_strict(args)
    except (ValueError, RecursionError):
        return json.dumps(value, ensure_ascii=False)
    return args


def input_to_messages(
    items: str | Sequence[Any],
    history: Sequence[Mapping[str, Any]] = (),
    *,
    answered: bool = True,
    unfinished: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The chat messages of a Responses ``input`` (module docstring).

    Args:
        items: the ``input`` field: a string (one user message) or a list of items.
        history: the chat messages that come before (a previous response's conversation), read
            for the calls a ``function_call_output`` may answer.
        answered: check that every call is answered (:func:`check_calls_answered`); false for a
            response's own output, whose calls the next request answers.
        unfinished: the ids of ``history``'s calls cut by ``max_output_tokens`` (no output due).

    Returns:
        Chat messages (``role``, ``content`` as text; assistant ``reasoning_content`` /
        ``tool_calls``; tool ``tool_call_id``).

    Raises:
        RequestError: 400 naming the item field (``input[i].role`` ...); a call left without its
            output is OpenAI's 400 ``No tool output found for function call <call_id>.``
    """
    out = _input_messages(items, history)
    if answered:
        check_calls_answered(list(history) + out, items, unfinished)
    return out


def check_calls_answered(
    conversation: Sequence[Mapping[str, Any]],
    items: str | Sequence[Any] = (),
    unfinished: Collection[str] = (),
) -> None:
    """Every tool call of ``conversation`` (chat messages: a previous response's conversation,
    then the request's ``input``) is answered by a later ``tool`` message.

    OpenAI's Responses API refuses a ``function_call`` (or ``custom_tool_call``) item, sent in
    ``input`` or left by the ``previous_response_id`` response, whose ``call_id`` no
    ``function_call_output`` answers: ``400 No tool output found for function call <call_id>.``
    (``param: "input"``). The model cannot go on from a call whose result it never reads, and the
    encoder would render an unanswered call as a finished turn. A call cut by ``max_output_tokens``
    (``status: "incomplete"`` in ``items``, or its id in ``unfinished``) needs no output: it was
    never a call the client could run, and the conversation goes on past it. ``items`` (the
    ``input`` field) also tells custom tool calls apart for the message.

    Raises:
        RequestError: 400 naming ``input``, the first unanswered call's id in the message.
    """
    calls = [
        item
        for item in ([] if isinstance(items, str) else items)
        if isinstance(item, Mapping) and item.get("type") in CALL_ITEMS
    ]
    custom = {c.get("call_id") for c in calls if c["type"] == "custom_tool_call"}
    cut = {c.get("call_id") for c in calls if c.get("status") == "incomplete"} | set(unfinished)
    pending: list[str] = []
    for m in conversation:
        if m.get("role") == "tool":
            if m.get("tool_call_id") in pending:
                pending.remove(m["tool_call_id"])
        elif m.get("role") == "assistant":
            pending += [c.get("id") for c in m.get("tool_calls") or [] if isinstance(c, Mapping)]
    pending = [c for c in pending if c not in cut]
    if pending:
        what = "custom tool call" if pending[0] in custom else "function call"
        raise _error(f"No tool output found for {what} {pending[0]}.", "input")


def _calling_turn(turn: dict[str, Any] | None) -> dict[str, Any] | None:
    """``turn`` (the assistant turn being built; ``None`` once an output or a non-assistant
    message closed it) when it has made calls whose outputs have not come yet, else ``None``."""
    return turn if turn is not None and turn.get("tool_calls") else None


def _input_messages(items: str | Sequence[Any], history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of ``input`` (:func:`input_to_messages` less the answered check)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant turn being built from consecutive items
    last_calls: set[str] = set()
    answered: set[str] = set()  # the calls of the latest turn that have their output already
    for m in reversed(history):
        if m.get("role") == "assistant":
            last_calls = {c.get("id") for c in m.get("tool_calls") or [] if isinstance(c, Mapping)}
            break

    def assistant_turn(new_when: tuple[str, ...]) -> dict[str, Any]:
        """The open assistant turn, or a new one when it has any of ``new_when`` already."""
        nonlocal turn
        if turn is None or any(turn.get(k) for k in new_when):
            turn = {"role": "assistant", "content": ""}
            out.append(turn)
        return turn

    for i, item in enumerate(items):
        field = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise _error(f"{field} must be an object.", field)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in MESSAGE_ROLES:
                raise _role_error(role, field)
            if item.get("content") is None:
                raise _error(
                    f"{field}.content is required: a string or a list of content parts.", f"{field}.content"
                )
            text = _text(item["content"], f"{field}.content")
            if role == "assistant":
                calling = _calling_turn(turn)
                if calling is not None and not calling.get("content"):
                    # text after the open turn's calls, before any of their outputs: that turn's
                    # text (calls and outputs pair by call_id, not by adjacency; module docstring)
                    calling["content"] = text
                else:
                    # consecutive assistant messages are one turn's text, the non-empty ones
                    # joined by a blank line (DeepSeek's Responses converter)
                    t = assistant_turn(("tool_calls",))
                    had = t.get("content")
                    t["content"] = f"{had}\n\n{text}" if had and text else had or text
                    last_calls, answered = set(), set()
            else:
                turn = None
                # a developer item is an instruction: a system message, as on the chat route
                out.append({"role": "system" if role == "developer" else role, "content": text})
        elif kind == "reasoning":
            text = _reasoning_text(item, field)
            if not text:  # no text to replay (empty, or encrypted content only): a no-op
                continue
            calling = _calling_turn(turn)
            if calling is not None:  # reasoning between the turn's calls and their outputs
                t = calling
            else:
                t = assistant_turn(("content", "tool_calls"))
                last_calls, answered = set(), set()
            had = t.get("reasoning_content")
            t["reasoning_content"] = f"{had}\n{text}" if had else text
        elif kind in CALL_ITEMS:
            body = "arguments" if kind == "function_call" else "input"
            call_id, name, args = item.get("call_id"), item.get("name"), item.get(body)
            for key, value in (("call_id", call_id), ("name", name), (body, args)):
                if not isinstance(value, str) or (key != body and not value):
                    what = "a string" if key == body else "a non-empty string"
                    raise _error(f"{field}.{key} must be {what}.", f"{field}.{key}")
            if kind == "function_call":
                args = _call_arguments(args)
            else:  # a custom tool's free-form input: its one string parameter
                args = custom_call_arguments(args)
            t = assistant_turn(())
            if not t.get("tool_calls"):
                last_calls, answered = set(), set()
            elif call_id in last_calls:  # two calls of one turn under one id: whose is an output?
                raise _error(
                    f"Duplicate 'call_id': {call_id}. {field}.call_id repeats a call of the same "
                    "assistant turn.",
                    f"{field}.call_id",
                )
            t.setdefault("tool_calls", []).append(
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            )
            last_calls.add(call_id)
        elif kind == "additional_tools":  # tools, not a turn: read by request_tools
            continue
        elif kind in OUTPUT_ITEMS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise _error(f"{field}.call_id must be a non-empty string.", f"{field}.call_id")
            if call_id not in last_calls:
                raise _error(
                    f"No tool call found for {kind.removesuffix('_output').replace('_', ' ')} output "
                    f"with call_id {call_id}. {field}.call_id {call_id!r} answers no "
                    f"{OUTPUT_ITEMS[kind]} of the latest assistant turn.",
                    f"{field}.call_id",
                )
            if call_id in answered:
                raise _error(
                    f"Duplicate {kind} for call_id '{call_id}'. Each {OUTPUT_ITEMS[kind]} must have "
                    f"exactly one matching {kind}.",
                    f"{field}.call_id",
                )
            answered.add(call_id)
            if item.get("output") is None:
                raise _error(
                    f"{field}.output is required: a string or a list of content parts.", f"{field}.output"
                )
            turn = None
            text = _text(item["output"], f"{field}.output")
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            raise _error(
                f"{field}.type {kind!r} is not supported (message, reasoning, function_call, "
                "function_call_output, custom_tool_call, custom_tool_call_output, additional_tools).",
                f"{field}.type",
            )
    return out


def responses_text_format(text: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The chat ``response_format`` of a Responses ``text`` field (its ``format``): ``None`` for
    plain text, ``{"type": "json_object"}``, or ``{"type": "json_schema", "json_schema": {"name",
    "schema", "strict"}}`` (the grammar path of chat completions).

    Raises:
        RequestError: 400 naming ``text.format...`` for an unknown type, a missing ``name``, a
            non-object ``schema`` or a non-boolean ``strict``.
    """
    if text is None:
        return None
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping):
        raise _error("text.format must be an object.", "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        name, schema = fmt.get("name"), fmt.get("schema")
        if not isinstance(name, str) or not name:
            raise _error("text.format.name must be a non-empty string.", "text.format.name")
        if not isinstance(schema, (Mapping, bool)):
            raise _error("text.format.schema must be a JSON schema object.", "text.format.schema")
        if fmt.get("strict") is not None and not isinstance(fmt["strict"], bool):
            raise _error("text.format.strict must be a boolean.", "text.format.strict")
        js = {"name": name, "schema": schema}
        if fmt.get("strict") is not None:
            js["strict"] = fmt["strict"]
        return {"type": "json_schema", "json_schema": js}
    raise _error(
        f"text.format.type must be one of text, json_object, json_schema; got {kind!r}.", "text.format.type"
    )


def text_with_response_format(text: Mapping[str, Any] | None, response_format: Any) -> dict[str, Any] | None:
    """The Responses ``text`` field with a chat-shaped ``response_format`` read into its ``format``.

    Clients written for ``/v1/chat/completions`` send ``response_format`` (``{"type": "text"}``,
    ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema": {"name", "schema",
    "strict"}}``) to ``/v1/responses`` too, where OpenAI's field is ``text.format`` (``name`` and
    ``schema`` at its top level). Ignoring it would return free text where JSON was asked for, so
    it is read as the same ``text.format``. ``text`` is returned unchanged when
    ``response_format`` is ``None``.

    Raises:
        RequestError: 400 naming ``response_format...`` for a shape that is none of those, or
            ``response_format`` when ``text.format`` is set to another format too.
    """
    if response_format is None:
        return dict(text) if text is not None else None
    if not isinstance(response_format, Mapping):
        raise _error("response_format must be an object.", "response_format")
    kind = response_format.get("type")
    fmt: dict[str, Any]
    if kind in ("text", "json_object"):
        fmt = {"type": kind}
    elif kind == "json_schema":
        js = response_format.get("json_schema")
        if not isinstance(js, Mapping):
            raise _error(
                "response_format.json_schema must be an object with `name` and `schema`.",
                "response_format.json_schema",
            )
        fmt = {"type": "json_schema", **{k: v for k, v in js.items() if v is not None}}
    else:
        raise _error(
            f"response_format.type must be one of text, json_object, json_schema; got {kind!r}.",
            "response_format.type",
        )
    given = (text or {}).get("format")
    if given is not None and given != fmt:
        raise _error(
            "response_format and text.format ask for different formats; send text.format only "
            "(the Responses API's field).",
            "response_format",
        )
    return {**(text or {}), "format": fmt}


def reasoning_switch(reasoning: Mapping[str, Any] | None, profile: str) -> tuple[bool | None, str | None]:
    """``(thinking, reasoning_effort)`` of a Responses ``reasoning`` field.

    ``reasoning.effort`` ``"none"`` turns thinking mode off; any other effort turns it on and is
    the chat ``reasoning_effort`` (rendered by the checkpoint's effort ``profile``, as chat
    completions do); no effort leaves the switch to ``chat_template_kwargs`` and the server's
    defaults (``thinking`` ``None``). ``summary`` is accepted and changes nothing: the reasoning
    comes back whole, as ``reasoning_text`` content.

    Raises:
        RequestError: 400 naming ``reasoning.effort`` for a value the profile does not know, or
            ``reasoning.summary`` for a value not in :data:`REASONING_SUMMARIES`.
    """
    if reasoning is None:
        return None, None
    summary = reasoning.get("summary")
    if summary not in REASONING_SUMMARIES:
        raise _error(
            f"reasoning.summary must be one of {', '.join(map(str, REASONING_SUMMARIES))}; got {summary!r}.",
            "reasoning.summary",
        )
    effort = reasoning.get("effort")
    if effort is None:
        return None, None
    try:
        normalize_reasoning_effort(effort, profile)
    except ValueError as e:
        raise _error(str(e).replace("reasoning_effort", "reasoning.effort"), "reasoning.effort") from None
    if effort == "none":
        return False, None
    return True, effort
