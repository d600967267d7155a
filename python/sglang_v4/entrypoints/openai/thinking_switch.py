"""The thinking switch of ``chat_template_kwargs`` (``thinking`` / ``enable_thinking``) read as a
boolean, for a request and for ``--default-chat-template-kwargs``.

JSON ``true`` / ``false`` are the switch; ``0`` / ``1`` and the strings of :data:`SWITCH_STRINGS`
(case and surrounding spaces aside) are read as their boolean, as SGLang reads a string
``reasoning.enabled`` (sgl-project/sglang#9715). Left as sent, a string is truthy to the code that
tests the switch (and to a Jinja template's ``{% if thinking %}``), so ``"false"`` turned thinking
*on* (liquidos-ai/AutoAgents#284). Any other value is refused: it cannot be read either way.

The chat request's own ``thinking`` field (DeepSeek's ``{"type": "enabled" | "disabled"}``, the
Messages API's ``"adaptive"``, or a JSON boolean) is read by :func:`thinking_field_value`; a type
it does not know is refused rather than read as off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "SWITCH_KEYS",
    "SWITCH_STRINGS",
    "THINKING_TYPES",
    "normalize_thinking_switches",
    "thinking_field_value",
    "thinking_switch_value",
]

#: The ``chat_template_kwargs`` keys of the thinking switch (SGLang's DeepSeek name first).
SWITCH_KEYS = ("thinking", "enable_thinking")
#: The string spellings of a switch read as booleans (lower case, stripped).
SWITCH_STRINGS = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


#: The ``type`` values of a ``thinking`` object and the switch each asks for: DeepSeek's API
#: documents ``enabled`` / ``disabled``; the Messages API adds ``adaptive`` (the model decides how
#: much to think: thinking on, as the Messages route reads it).
THINKING_TYPES = {"enabled": True, "adaptive": True, "disabled": False}


def thinking_field_value(value: Any, field: str = "thinking") -> bool | None:
    """The switch a chat request's ``thinking`` field asks for: a JSON boolean as sent, an object
    by its ``type`` (:data:`THINKING_TYPES`); ``None`` stays ``None`` (not set).

    Raises:
        ValueError: an object whose ``type`` is missing or unknown (the message starts with
            ``field.type``), or a value of another kind (starts with ``field``). Read as off, a
            misspelt or newer type silently served a request without the thinking it asked for.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Mapping):
        kind = value.get("type")
        if isinstance(kind, str) and kind in THINKING_TYPES:
            return THINKING_TYPES[kind]
        allowed = ", ".join(THINKING_TYPES)
        raise ValueError(f"{field}.type must be one of {allowed}; got {kind!r}.")
    raise ValueError(f'{field} must be an object ({{"type": "enabled"}}) or a boolean, got {value!r}.')


def thinking_switch_value(value: Any, field: str) -> bool | None:
    """``value`` of a thinking switch as a boolean (module docstring); ``None`` stays ``None``
    (not set).

    Raises:
        ValueError: any other value; the message names ``field``.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in SWITCH_STRINGS:
        return SWITCH_STRINGS[value.strip().lower()]
    raise ValueError(f"{field} must be a boolean (true or false), got {value!r}.")


def normalize_thinking_switches(kwargs: Mapping[str, Any] | None, field: str) -> dict[str, Any] | None:
    """``kwargs`` (a ``chat_template_kwargs`` object named ``field``) with its thinking switches
    (:data:`SWITCH_KEYS`) replaced by their boolean values, so that the prompt encoder, the
    reasoning parser and a ``--chat-template`` all read the same switch; a switch sent as
    ``null`` is left out (not set: the other name, the server's default or the request's
    ``thinking`` field decides, where ``{"thinking": null, "enable_thinking": true}`` used to
    read as off). ``None`` stays ``None``.

    Raises:
        ValueError: a switch of no boolean spelling (names ``field.KEY``).
    """
    if kwargs is None:
        return None
    out = {k: v for k, v in kwargs.items() if not (k in SWITCH_KEYS and v is None)}
    for k in SWITCH_KEYS:
        if k in out:
            out[k] = thinking_switch_value(out[k], f"{field}.{k}")
    return out
