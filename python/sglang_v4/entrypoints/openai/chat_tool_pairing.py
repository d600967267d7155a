"""Tool-call pairing of a ``/v1/chat/completions`` conversation: every call an assistant message
makes is answered by a ``tool`` message right after it, once, and every ``tool`` message answers a
call (:func:`check_tool_call_pairing`).

OpenAI's Chat Completions API refuses a conversation that breaks either rule with a 400:
``An assistant message with 'tool_calls' must be followed by tool messages responding to each
'tool_call_id'. The following tool_call_ids did not have response messages: <ids>`` (``param``
``messages.[i].role``), and ``Invalid parameter: messages with role 'tool' must be a response to a
preceding message with 'tool_calls'.``. DeepSeek's own request converter (the ``deepseek-recipe``
package), which SGLang's DeepSeek-V4 chat path renders through, refuses both too. Served, an
unanswered call renders as a finished turn whose result the model never reads, and a stray
result answers nothing.

Two more shapes are OpenAI's 400s (DeepSeek's converter refuses each of them too):

* a second ``tool`` message answering a call already answered: ``Invalid parameter: Duplicate
  value for 'tool_call_id' of '<id>', in messages[j] and messages[i].`` (``param``
  ``messages[i].tool_call_id``);
* any other message (``system`` and ``developer`` included) between an assistant message's
  ``tool_calls`` and the last of their answers: the calls not answered yet are unanswered, the
  400 naming that message (an injected system message there is refused by OpenAI alike,
  as public reports show: bug-ops/zeph#3235, pydantic/pydantic-ai#4907).

The *answer window* of an assistant message with ``tool_calls`` is the run of ``tool`` messages
right after it; once every call is answered, ``system`` / ``developer`` messages may follow the
window before the next turn, and a ``tool`` message after them answers nothing. Left as they were:

* a final assistant message with ``tool_calls`` (nothing follows it): SGLang's DeepSeek-V4 path
  takes it (its calls dropped: the message continued with ``continue_final_message``, else
  re-sent as a user turn), as SGLang's own pairing check leaves the last assistant message out;
* ``tool_calls: []`` on an assistant message: no calls. OpenAI and DeepSeek's converter refuse it
  (``Invalid 'messages[i].tool_calls': empty array``), but vLLM and SGLang serve it and agents
  echo the ``[]`` such servers return (vllm-project/vllm#12937, microsoft/autogen#3120);
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
    """Check that every tool call of ``messages`` is answered right after it, once, and every tool
    message answers one (module docstring).

    Args:
        messages: the chat request's ``messages`` as dicts (``role``; assistant ``tool_calls``
            entries with ``id``; tool ``tool_call_id``).

    Raises:
        RequestError: 400 naming the message: an assistant message's calls left without a
            ``tool`` message before the next non-``tool`` message (``param`` ``messages[i]``,
            ``i`` that next message, or the assistant message when the list ends first; OpenAI
            writes ``messages.[i].role``); a ``tool`` message outside every answer window or
            naming none of its calls (``messages[i]``, ``i`` the tool message); one without a
            ``tool_call_id`` where the calls have ids, or a second ``tool`` message for one call
            (``messages[i].tool_call_id``).
    """
    window: int | None = None  # index of the assistant message whose calls are being answered
    ids: list[str] = []  # that message's call ids
    pending: dict[str, None] = {}  # its calls not answered yet, in call order
    answered: dict[str, int] = {}  # its calls answered so far -> the index of the answer
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
            if isinstance(call_id, str) and call_id in answered:
                raise RequestError(
                    f"Invalid parameter: Duplicate value for 'tool_call_id' of '{call_id}', in "
                    f"messages[{answered[call_id]}] and messages[{i}].",
                    param=f"messages[{i}].tool_call_id",
                )
            if isinstance(call_id, str):
                answered[call_id] = i
            pending.pop(call_id, None)
            continue
        # any other message ends the answer window: its calls must all be answered by now
        if pending:
            raise _unanswered_error(i, list(pending))
        window, ids, pending, answered = None, [], {}, {}
        if role == "assistant" and m.get("tool_calls"):
            window, ids = i, _call_ids(m)
            pending = dict.fromkeys(ids)
    if pending and window is not None and window != len(messages) - 1:
        raise _unanswered_error(window, list(pending))
