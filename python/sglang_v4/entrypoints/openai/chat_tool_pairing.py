"""Tool-call pairing of a ``/v1/chat/completions`` conversation: every call an assistant message
makes is answered by a ``tool`` message before the conversation goes on, and every ``tool``
message answers a call (:func:`check_tool_call_pairing`).

OpenAI's Chat Completions API refuses a conversation that breaks either rule with a 400:
``An assistant message with 'tool_calls' must be followed by tool messages responding to each
'tool_call_id'. The following tool_call_ids did not have response messages: <ids>`` (``param``
``messages.[i].role``), and ``Invalid parameter: messages with role 'tool' must be a response to a
preceding message with 'tool_calls'.``. DeepSeek's own request converter (the ``deepseek-recipe``
package), which SGLang's DeepSeek-V4 chat path renders through, refuses both too. Served, an
unanswered call renders as a finished turn whose result the model never reads, and a stray
result answers nothing.

The *answer window* of an assistant message with ``tool_calls`` is the messages after it up to the
next ``user`` or ``assistant`` message (or the end of the list); ``system`` / ``developer``
messages inside it are passed over. The other cases:

* a final assistant message with ``tool_calls`` (nothing follows it): SGLang's DeepSeek-V4 path
  takes it (its calls dropped: the message continued with ``continue_final_message``, else
  re-sent as a user turn), as SGLang's own pairing check leaves the last assistant message out;
* calls without an ``id``, which no ``tool_call_id`` can name (SGLang's pairing check leaves them
  unchecked);
* a ``tool`` message without a ``tool_call_id`` (or an empty one) answering calls that have ids:
  OpenAI's ``Missing parameter 'tool_call_id'`` 400 (``param`` ``messages[i].tool_call_id``), not
  the unanswered-call error its calls would otherwise give;
* a ``tool_call_id`` that names none of the window's calls: the prompt encoder's 400
  (OpenAI's ``'tool_call_id' of ... not found in 'tool_calls' of previous message``), worded the
  same here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = ["check_tool_call_pairing"]

#: The roles that end an assistant message's answer window.
_TURN_ROLES = ("user", "assistant")


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids of an assistant message's ``tool_calls``, in order (calls without one left out)."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        return []
    return [c["id"] for c in calls if isinstance(c, Mapping) and isinstance(c.get("id"), str) and c["id"]]


def _unanswered_error(index: int, ids: Sequence[str]) -> RequestError:
    return RequestError(
        f"messages[{index}]: An assistant message with 'tool_calls' must be followed by tool "
        "messages responding to each 'tool_call_id'. The following tool_call_ids did not have "
        f"response messages: {', '.join(ids)}",
        param=f"messages[{index}]",
    )


def check_tool_call_pairing(messages: Sequence[Mapping[str, Any]]) -> None:
    """Check that every tool call of ``messages`` is answered and every tool message answers one
    (module docstring).

    Args:
        messages: the chat request's ``messages`` as dicts (``role``; assistant ``tool_calls``
            entries with ``id``; tool ``tool_call_id``).

    Raises:
        RequestError: 400 naming the message: an assistant message's calls left without a
            ``tool`` message before the next user / assistant message (``param``
            ``messages[i]``, ``i`` that next message, or the assistant message when the list
            ends first; OpenAI writes ``messages.[i].role``), a ``tool`` message outside every
            answer window or naming none of its calls (``messages[i]``, ``i`` the tool message),
            or one without a ``tool_call_id`` where the calls have ids
            (``messages[i].tool_call_id``).
    """
    window: int | None = None  # index of the assistant message whose calls are being answered
    ids: list[str] = []  # that message's call ids
    pending: dict[str, None] = {}  # its calls not answered yet, in call order
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            if window is None:
                raise RequestError(
                    f"messages[{i}]: Invalid parameter: messages with role 'tool' must be a response "
                    "to a preceding message with 'tool_calls'.",
                    param=f"messages[{i}]",
                )
            call_id = m.get("tool_call_id")
            if ids and (not isinstance(call_id, str) or not call_id):
                raise RequestError(
                    f"messages[{i}]: Missing parameter 'tool_call_id': messages with role 'tool' must "
                    "have a 'tool_call_id'.",
                    param=f"messages[{i}].tool_call_id",
                )
            if isinstance(call_id, str) and ids and call_id not in ids:
                raise RequestError(
                    f"messages[{i}]: Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message.",
                    param=f"messages[{i}]",
                )
            pending.pop(call_id, None)
            continue
        if role not in _TURN_ROLES:
            continue  # system / developer messages inside a window
        if pending:
            raise _unanswered_error(i, list(pending))
        window, ids, pending = None, [], {}
        if role == "assistant" and m.get("tool_calls"):
            window, ids = i, _call_ids(m)
            pending = dict.fromkeys(ids)
    if pending and window is not None and window != len(messages) - 1:
        raise _unanswered_error(window, list(pending))
