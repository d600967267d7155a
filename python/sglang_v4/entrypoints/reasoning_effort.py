"""Reasoning-effort profiles of DeepSeek-V4 checkpoints: how OpenAI's ``reasoning_effort`` maps to
the encoder's tiers, and the instruction paragraph each tier puts after BOS in thinking mode
(:mod:`sglang_v4.entrypoints.chat_encoding` renders it; its module docstring states the format).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "REASONING_EFFORT_BEYOND_MAX_PREFIX",
    "REASONING_EFFORT_MAX_PREFIX",
    "REASONING_EFFORT_PROFILES",
    "normalize_reasoning_effort",
    "reasoning_effort_prefix",
]

# Instruction the V4 encoder prepends in thinking mode with reasoning_effort="max" of the preview
# profile, "high" of the official one (format fact, wording as published by DeepSeek).
REASONING_EFFORT_MAX_PREFIX = (
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve "
    "the root cause, rigorously stress-testing your logic against all potential paths, edge cases, "
    "and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n"
)
# The official profile's "max" instruction (DeepSeek-V4-Flash-0731's encoder; format fact, wording
# as published by DeepSeek).
REASONING_EFFORT_BEYOND_MAX_PREFIX = (
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its root, and "
    "resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n"
)

#: The reasoning-effort profiles of DeepSeek-V4 checkpoints (the module docstring): the tiers of
#: each (OpenAI's ``reasoning_effort`` values -> the encoder's tier, ``None`` its default) and the
#: instruction each tier puts after BOS in thinking mode. ``preview``: the encoder knows ``"high"``
#: and ``"max"``, everything at or below "high" renders like "high" (no instruction); ``xhigh``
#: and DeepSeek's ``ultra`` are ``max``. ``official`` (DeepSeek-V4-Flash-0731's encoder, default
#: tier ``"low"``): the mapping table of DeepSeek's thinking-mode guide, which DeepSeek's own
#: request converter applies too: ``minimal`` / ``low`` are ``low``, ``medium`` / ``high`` /
#: ``xhigh`` are ``high``, ``max`` / ``ultra`` are ``max``.
_EFFORT_TIERS: dict[str, dict[str | None, str | None]] = {
    "preview": {
        None: None, "none": None, "minimal": None, "low": None, "medium": None,
        "high": "high", "xhigh": "max", "max": "max", "ultra": "max",
    },
    "official": {
        None: "low", "none": "low", "minimal": "low", "low": "low", "medium": "high",
        "high": "high", "xhigh": "high", "max": "max", "ultra": "max",
    },
}  # fmt: skip
_EFFORT_PREFIXES: dict[str, dict[str | None, str]] = {
    "preview": {"max": REASONING_EFFORT_MAX_PREFIX},
    "official": {"high": REASONING_EFFORT_MAX_PREFIX, "max": REASONING_EFFORT_BEYOND_MAX_PREFIX},
}
REASONING_EFFORT_PROFILES = tuple(_EFFORT_TIERS)


def _check_profile(profile: str) -> None:
    if profile not in _EFFORT_TIERS:
        raise ValueError(f"reasoning effort profile must be one of {list(_EFFORT_TIERS)}; got {profile!r}.")


def normalize_reasoning_effort(effort: Any, profile: str = "preview") -> str | None:
    """Map an OpenAI ``reasoning_effort`` to the tier of the V4 encoder of ``profile``
    (:data:`REASONING_EFFORT_PROFILES`): ``None`` / ``"high"`` / ``"max"`` (``preview``) or
    ``"low"`` / ``"high"`` / ``"max"`` (``official``). A tier maps to itself.

    Raises:
        ValueError: an unknown value (names ``reasoning_effort``) or profile.
    """
    _check_profile(profile)
    tiers = _EFFORT_TIERS[profile]
    if not isinstance(effort, (str, type(None))) or effort not in tiers:
        allowed = ", ".join(k for k in tiers if k is not None)
        raise ValueError(f"reasoning_effort must be one of {allowed}; got {effort!r}.")
    return tiers[effort]


def reasoning_effort_prefix(effort: Any, profile: str = "preview") -> str:
    """The instruction paragraph a thinking-mode prompt of ``profile`` puts after BOS for
    ``reasoning_effort`` ``effort`` (an OpenAI value or a tier; ``""``: none).

    Raises:
        ValueError: as :func:`normalize_reasoning_effort`.
    """
    return _EFFORT_PREFIXES[profile].get(normalize_reasoning_effort(effort, profile), "")
