"""The reasoning controls of a chat request read into the thinking switch and the effort.

A chat request turns DeepSeek-V4's thinking mode on or off with a switch of its own
(``chat_template_kwargs`` ``thinking`` / ``enable_thinking``, or DeepSeek's ``thinking`` field).
Where it sets none, its other reasoning controls decide, under the request's own keys and over
``--default-chat-template-kwargs`` (they are the request's word, the defaults the server's):

* ``reasoning_effort`` (top level, or in ``chat_template_kwargs``): ``"none"`` turns thinking
  off, any other effort turns it on (SGLang's ``normalize_reasoning_inputs``, sgl-project/sglang#28860,
  a port of vllm-project/vllm#43401: an effort asks for reasoning; DeepSeek's own API and its
  request converter, ``deepseek-recipe``, render an effort in thinking mode too).
* the ``reasoning`` object (OpenRouter's shape, which SGLang reads, sgl-project/sglang#9715 and
  sgl-project/sglang#23951): ``enabled`` (or ``enable``) is the switch, read as
  :func:`~.thinking_switch.thinking_switch_value` reads one; ``effort`` (or
  ``reasoning_effort``) is ``reasoning_effort``; ``exclude: true`` leaves the reasoning out of
  the answer (vLLM's ``include_reasoning: false``); ``max_tokens`` bounds the reasoning
  (vLLM's ``thinking_token_budget``). ``reasoning: true`` / ``false`` is the switch alone
  (llama.cpp's spelling). An effort overrides ``enabled`` (SGLang's order), so
  ``{"enabled": true, "effort": "none"}`` is off.

A field given twice with different values (``reasoning.effort`` and ``reasoning_effort``,
``reasoning.max_tokens`` and ``thinking_token_budget``), or a ``reasoning`` of another shape, is
refused (400 naming it) rather than one of them being dropped.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError
from sglang_v4.entrypoints.openai.thinking_switch import SWITCH_KEYS, thinking_switch_value

__all__ = ["REASONING_OBJECT_KEYS", "apply_reasoning_controls"]

#: The keys of the ``reasoning`` object read on the chat route (others are refused).
REASONING_OBJECT_KEYS = ("enabled", "enable", "effort", "reasoning_effort", "exclude", "max_tokens")


def _read_reasoning_object(req: Any) -> bool | None:
    """Fold ``req.reasoning`` into ``req.reasoning_effort`` / ``include_reasoning`` /
    ``thinking_token_budget`` and return its switch (``None``: not set).

    Raises:
        RequestError: 400 naming ``reasoning`` or the key at fault.
    """
    r = req.reasoning
    if r is None:
        return None
    if isinstance(r, bool):
        return r
    if not isinstance(r, dict):
        raise RequestError(
            f"reasoning must be an object (enabled, effort, exclude, max_tokens) or a boolean, got {r!r}.",
            param="reasoning",
        )
    unknown = sorted(set(r) - set(REASONING_OBJECT_KEYS))
    if unknown:
        raise RequestError(
            f"reasoning has unknown keys {unknown}; it takes {list(REASONING_OBJECT_KEYS)}.",
            param="reasoning",
        )
    effort = r.get("effort", r.get("reasoning_effort"))
    if effort is not None:
        if req.reasoning_effort is not None and req.reasoning_effort != effort:
            raise RequestError(
                f"reasoning.effort ({effort!r}) and reasoning_effort ({req.reasoning_effort!r}) differ; "
                "give one of them.",
                param="reasoning.effort",
            )
        req.reasoning_effort = effort
    exclude = r.get("exclude")
    if exclude is not None:
        if not isinstance(exclude, bool):
            raise RequestError(
                f"reasoning.exclude must be a boolean, got {exclude!r}.", param="reasoning.exclude"
            )
        if exclude:
            req.include_reasoning = False
    budget = r.get("max_tokens")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise RequestError(
                f"reasoning.max_tokens must be an integer >= 0, got {budget!r}.", param="reasoning.max_tokens"
            )
        if req.thinking_token_budget is not None and req.thinking_token_budget != budget:
            raise RequestError(
                f"reasoning.max_tokens ({budget}) and thinking_token_budget ({req.thinking_token_budget}) "
                "differ; give one of them.",
                param="reasoning.max_tokens",
            )
        req.thinking_token_budget = budget
    key = "enabled" if r.get("enabled") is not None else "enable"
    try:
        return thinking_switch_value(r.get(key), f"reasoning.{key}")
    except ValueError as e:
        raise RequestError(str(e), param=f"reasoning.{key}") from None


def apply_reasoning_controls(req: Any) -> bool:
    """Read ``req``'s reasoning controls (module docstring) in place: the ``reasoning`` object
    folded into the request's fields, and, where the request sets no thinking switch of its own,
    ``chat_template_kwargs`` given the switch the effort or ``reasoning.enabled`` asks for.

    Args:
        req: a :class:`~.protocol_chat.ChatCompletionRequest` whose ``chat_template_kwargs``
            switches are already booleans (:func:`~.thinking_switch.normalize_thinking_switches`).

    Returns:
        Whether the switch was set here (it then wins over ``--default-chat-template-kwargs``).

    Raises:
        RequestError: 400 for a ``reasoning`` that cannot be read (names the field).
    """
    enabled = _read_reasoning_object(req)
    own = req.chat_template_kwargs or {}
    if req.thinking is not None or any(own.get(k) is not None for k in SWITCH_KEYS):
        return False
    effort = req.reasoning_effort if req.reasoning_effort is not None else own.get("reasoning_effort")
    switch = (effort != "none") if effort is not None else enabled
    if switch is None:
        return False
    req.chat_template_kwargs = {**own, "thinking": switch, "enable_thinking": switch}
    return True
