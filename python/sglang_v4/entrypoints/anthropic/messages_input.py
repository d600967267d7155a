"""A Messages API request in chat-completions terms (``POST /v1/messages`` runs on the chat path,
:mod:`.serving_messages`).

* ``system`` (a string, or ``text`` blocks joined by a blank line) becomes a first ``system``
  message; a ``system`` message inside ``messages`` stays at its place in the conversation
  (:mod:`.messages_content`).
* ``messages`` (:func:`~.messages_content.messages_to_chat`): content blocks -> chat messages
  (``tool_result`` -> ``tool`` messages, ``thinking`` -> ``reasoning_content``, ``tool_use`` ->
  ``tool_calls``; a final assistant message a prefill), :mod:`.messages_content`.
* ``tools`` (:func:`tools_to_chat`: custom tools ``{"name", "description", "input_schema",
  "strict"}``) become chat function tools; server tools (``web_search_...``, ``bash_...``) are a
  400. ``tool_choice`` (:func:`tool_choice_to_chat`): ``auto`` / ``any`` (chat's ``"required"``)
  / ``tool`` with ``name`` (chat's named function) / ``none``; ``disable_parallel_tool_use: true``
  is chat's ``parallel_tool_calls: false``.
* ``thinking`` (:func:`thinking_switch`): ``enabled`` (with ``budget_tokens``) and ``adaptive``
  switch the chat template's thinking mode on, ``disabled`` off; without it
  ``output_config.effort`` decides as the chat route's ``reasoning_effort`` does (``"none"`` off,
  any other on, :mod:`~sglang_v4.entrypoints.openai.reasoning_request`), else the server's
  default applies. ``budget_tokens`` must be a positive integer; it does not bound the reasoning (the
  model has no reasoning budget; ``max_tokens`` bounds reasoning and answer together).
  ``display`` (:func:`thinking_omitted`): ``summarized`` (the default) returns the reasoning,
  ``omitted`` returns the thinking block with empty ``thinking`` and its ``signature`` only.
* ``output_config.effort`` is the chat route's ``reasoning_effort``; ``output_config.format``
  (``{"type": "json_schema", "schema": ...}``) its ``response_format`` (a grammar on the answer).
* ``temperature`` must be in [0, 1] and ``top_k`` at least 0 (Anthropic's ranges; a 400).
* ``service_tier`` must be one of ``auto`` / ``standard_only`` (another value is a 400).
* ``stop_sequences`` are ``stop``, ``metadata.user_id`` is ``user``; ``max_tokens`` is the chat
  route's (``0``, Anthropic's cache pre-warm call, prefills the prompt and generates nothing).
* ``cache_salt`` / ``extra_key`` are the chat route's: the prefix-cache namespace.

Every error is a :class:`~sglang_v4.entrypoints.openai.request_errors.RequestError` (400) whose
message starts with the field as the client sent it, dotted as Anthropic's API writes it
(``messages.2.content.0.tool_use_id``); errors of the chat path are renamed the same way
(:func:`anthropic_field_error`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.anthropic.messages_content import (
    blocks_text,
    field_error,
    messages_to_chat,
)
from sglang_v4.entrypoints.anthropic.protocol import (
    MESSAGES_SERVICE_TIERS,
    CountTokensRequest,
    MessagesRequest,
)
from sglang_v4.entrypoints.openai.request_sampling import sent_nulls
from sglang_v4.entrypoints.openai.serving_base import RequestError

__all__ = [
    "anthropic_field_error",
    "chat_request_data",
    "thinking_omitted",
    "thinking_switch",
    "tool_choice_to_chat",
    "tools_to_chat",
]

#: Chat request fields whose errors name the Messages field the client sent instead.
CHAT_FIELD_NAMES = {
    "stop": "stop_sequences",
    "reasoning_effort": "output_config.effort",
    "response_format": "output_config.format",
    "user": "metadata.user_id",
    "max_completion_tokens": "max_tokens",
}

#: A chat tool's field (``tools[1].function.parameters``, ``tools[1].function.name``, ``tools[1]``).
_CHAT_TOOL_FIELD = re.compile(r"tools\[(\d+)\](\.function(\.parameters)?)?")
#: A message that names its field only in a closing parenthesis (``... (tools.1.input_schema).``).
_TRAILING_FIELD = re.compile(r"(?P<body>.+) \((?P<field>tools\.\d+(?:\.[\w.]+)?)\)\.", re.DOTALL)


def _messages_tool_field(m: re.Match[str]) -> str:
    """The Messages field of a chat tool field match: ``tools.N.input_schema`` for the function's
    ``parameters``, ``tools.N`` for the tool or its ``function`` (``.name`` etc. follow as sent)."""
    return f"tools.{m.group(1)}" + (".input_schema" if m.group(3) else "")


def anthropic_field_error(e: RequestError) -> RequestError:
    """``e`` (raised on the chat path) naming the Messages field (:data:`CHAT_FIELD_NAMES`): its
    ``param`` and the field at the start of its message. A chat tool field anywhere in the message
    (``tools[1].function.parameters``) is the client's tool field (``tools.1.input_schema``, the
    index into the request's ``tools`` as sent, dotted as Anthropic's API writes it); a message
    that named it only at its end (OpenAI's "Invalid schema for function" text) starts with it."""
    msg = _CHAT_TOOL_FIELD.sub(_messages_tool_field, e.message)
    param = None if e.param is None else _CHAT_TOOL_FIELD.sub(_messages_tool_field, e.param)
    trailing = _TRAILING_FIELD.fullmatch(msg)
    if trailing is not None and not msg.startswith("tools"):
        msg = f"{trailing['field']}: {trailing['body']}."
    if param is not None and param.startswith("messages["):  # the converted chat message's path
        param = "messages"
    for chat_name, name in CHAT_FIELD_NAMES.items():
        if param == chat_name:
            param = name
        if msg.startswith(chat_name) and not msg[len(chat_name) : len(chat_name) + 1].isidentifier():
            msg = name + msg[len(chat_name) :]
    return RequestError(msg, e.status, e.err_type, param)


def _system_text(system: str | Sequence[Any] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system
    return blocks_text(system, "system", "system")


def tools_to_chat(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """Custom tools as chat function tools (``input_schema`` -> ``parameters``).

    Raises:
        RequestError: 400 naming the tool field: a server tool (a ``type`` other than
            ``custom``), a missing or duplicate name, a missing or non-object ``input_schema``,
            a non-string ``description``, a non-boolean ``strict``.
    """
    out, seen = [], set()
    for i, tool in enumerate(tools):
        field = f"tools.{i}"
        if not isinstance(tool, Mapping):
            raise field_error(field, "must be a tool object.")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise field_error(
                f"{field}.type", f"server tools are not supported (custom tools only); got {kind!r}."
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name or any(c in name for c in '"<>\n'):
            raise field_error(f"{field}.name", "must be a non-empty string without quotes or angle brackets.")
        if name in seen:
            raise field_error(f"{field}.name", f"{name!r} is defined twice.")
        seen.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, Mapping):
            raise field_error(f"{field}.input_schema", "is required: a JSON schema object.")
        fn: dict[str, Any] = {"name": name}  # OpenAI's key order: the rendered tool lines follow it
        if tool.get("description") is not None:
            if not isinstance(tool["description"], str):
                raise field_error(f"{field}.description", "must be a string.")
            fn["description"] = tool["description"]
        fn["parameters"] = dict(schema)
        if tool.get("strict") is not None:
            if not isinstance(tool["strict"], bool):
                raise field_error(f"{field}.strict", f"must be a boolean; got {tool['strict']!r}.")
            fn["strict"] = tool["strict"]
        out.append({"type": "function", "function": fn})
    return out


def tool_choice_to_chat(choice: Mapping[str, Any] | None) -> tuple[Any, bool | None]:
    """``(tool_choice, parallel_tool_calls)`` in chat terms of a Messages ``tool_choice``
    (``None``: the defaults, ``"auto"`` with tools).

    Raises:
        RequestError: 400 naming ``tool_choice.type`` / ``.name`` / ``.disable_parallel_tool_use``.
    """
    if choice is None:
        return None, None
    kind = choice.get("type")
    mapped: Any
    if kind == "auto":
        mapped = "auto"
    elif kind == "any":
        mapped = "required"
    elif kind == "none":
        mapped = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise field_error("tool_choice.name", "must be a non-empty string (the tool to call).")
        mapped = {"type": "function", "function": {"name": name}}
    else:
        raise field_error("tool_choice.type", f"must be one of auto, any, tool, none; got {kind!r}.")
    no_parallel = choice.get("disable_parallel_tool_use")
    if no_parallel is not None and not isinstance(no_parallel, bool):
        raise field_error("tool_choice.disable_parallel_tool_use", "must be a boolean.")
    return mapped, (None if no_parallel is None else not no_parallel)


def thinking_switch(thinking: Mapping[str, Any] | None) -> bool | None:
    """The thinking mode of a Messages ``thinking`` field: ``True`` (``enabled``, ``adaptive``),
    ``False`` (``disabled``) or ``None`` (not given: the server's default).

    Raises:
        RequestError: 400 naming ``thinking.type`` or ``thinking.budget_tokens`` (``enabled``
            needs a positive integer).
    """
    if thinking is None:
        return None
    kind = thinking.get("type")
    if kind == "disabled":
        return False
    thinking_omitted(thinking)  # a bad ``display`` is refused before anything runs
    if kind == "adaptive":
        return True
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            raise field_error("thinking.budget_tokens", f"must be a positive integer; got {budget!r}.")
        return True
    raise field_error("thinking.type", f"must be one of enabled, adaptive, disabled; got {kind!r}.")


THINKING_DISPLAYS = ("summarized", "omitted")


def thinking_omitted(thinking: Mapping[str, Any] | None) -> bool:
    """Whether a Messages ``thinking`` field (``enabled`` / ``adaptive``) asks for its reasoning
    left out of the response: ``display: "omitted"``. Anthropic's reference: the thinking block
    then comes back with an empty ``thinking`` and its ``signature`` (streamed: no
    ``thinking_delta``, the ``signature_delta`` only); ``"summarized"`` or no ``display`` returns
    the reasoning.

    Raises:
        RequestError: 400 naming ``thinking.display`` (not one of :data:`THINKING_DISPLAYS`).
    """
    if thinking is None or thinking.get("type") == "disabled":
        return False
    display = thinking.get("display")
    if display is not None and display not in THINKING_DISPLAYS:
        raise field_error("thinking.display", f"must be one of summarized, omitted; got {display!r}.")
    return display == "omitted"


def _output_config(cfg: Mapping[str, Any] | None) -> tuple[Any, dict[str, Any] | None]:
    """``(reasoning_effort, response_format)`` of ``output_config``."""
    if cfg is None:
        return None, None
    fmt = cfg.get("format")
    rf = None
    if fmt is not None:
        if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
            raise field_error("output_config.format.type", "must be 'json_schema'.")
        schema = fmt.get("schema")
        if not isinstance(schema, Mapping):
            raise field_error("output_config.format.schema", "must be a JSON schema object.")
        rf = {"type": "json_schema", "json_schema": {"name": "output", "schema": dict(schema)}}
    return cfg.get("effort"), rf


def chat_request_data(req: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    """The ``/v1/chat/completions`` request body of a Messages (or count-tokens) request (module
    docstring); ``None`` values left out (the chat defaults apply), except a ``temperature`` /
    ``top_p`` / ``top_k`` the client sent as ``null`` (kept, so that it wins over
    ``--preferred-sampling-params``).

    Raises:
        RequestError: 400 naming the Messages field.
    """
    messages, prefill = messages_to_chat(req.messages)
    system = _system_text(req.system)
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    tool_choice, parallel = tool_choice_to_chat(req.tool_choice)
    thinking = thinking_switch(req.thinking)
    effort, response_format = _output_config(req.output_config)
    data: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "tools": tools_to_chat(req.tools) if req.tools else None,
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
        "thinking": None if thinking is None else {"type": "enabled" if thinking else "disabled"},
        "reasoning_effort": effort,
        "response_format": response_format,
        "continue_final_message": prefill or None,
    }
    if isinstance(req, MessagesRequest):
        user = (req.metadata or {}).get("user_id")
        if user is not None and not isinstance(user, str):
            raise field_error("metadata.user_id", "must be a string.")
        # Anthropic's lower bound is 0: a request that only prefills (a cache pre-warm)
        if isinstance(req.max_tokens, int) and req.max_tokens < 0:
            raise field_error("max_tokens", f"must be greater than or equal to 0; got {req.max_tokens}.")
        # Anthropic's API refuses a stop sequence of whitespace only (in its own words); an empty
        # one is refused by the chat path's stop check, renamed to this field
        if any(isinstance(s, str) and s and not s.strip() for s in req.stop_sequences or ()):
            raise field_error("stop_sequences", "each stop sequence must contain non-whitespace")
        # Anthropic's documented ranges, narrower than the chat route's: temperature 0..1, top_k >= 0
        if req.temperature is not None and not 0.0 <= req.temperature <= 1.0:
            raise field_error("temperature", f"must be in [0, 1]; got {req.temperature}.")
        if req.top_k is not None and req.top_k < 0:
            raise field_error("top_k", f"must be greater than or equal to 0; got {req.top_k}.")
        if req.service_tier is not None and req.service_tier not in MESSAGES_SERVICE_TIERS:
            raise field_error(
                "service_tier",
                f"must be one of {', '.join(MESSAGES_SERVICE_TIERS)}; got {req.service_tier!r}.",
            )
        if req.cache_salt == "":  # vLLM's rule for the field, as on the chat route
            raise field_error("cache_salt", "must be a non-empty string if provided.")
        data.update(
            max_tokens=req.max_tokens,
            stop=req.stop_sequences,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stream=req.stream,
            user=user,
            cache_salt=req.cache_salt,  # the chat route checks it and joins the namespace
            extra_key=req.extra_key,
        )
    body = {k: v for k, v in data.items() if v is not None}
    if isinstance(req, MessagesRequest):  # a sampling field sent as null keeps it (not the preferred value)
        body.update(sent_nulls(req, {k: k for k in ("temperature", "top_p", "top_k")}))
    return body
