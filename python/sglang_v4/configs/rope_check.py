"""The numeric fields of a rope's parameters, checked before any table is built from them.

transformers' rope validators (``PreTrainedConfig._validate_<type>_rope_parameters``) only log a
warning for a value outside its domain (``factor`` below 1 or not a number, a negative
``attention_factor``, ``beta_fast`` below ``beta_slow``), and nothing checks the base ``rope_theta``;
the tables built from such a config then hold ``inf`` / NaN (a base of 0, a factor of 0), scale every
rotation to nothing (an ``attention_factor`` of 0), or fail far from the cause (a string ``factor``
fails inside torch, an ``original_max_position_embeddings`` of 0 divides by zero). These checks turn
each of those into a ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from typing import Any

#: The rope types whose ``factor`` scales the frequencies (transformers requires it for each) among
#: those the runtime computes; another type is refused by name by ``check_supported``.
_FACTOR_TYPES = ("linear", "yarn", "llama3")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_rope_parameters(params: dict[str, Any], where: str, theta_field: str = "rope_theta") -> None:
    """Refuse rope parameters whose values give no usable rotary table.

    Args:
        params: one rope's parameters (a ``rope_scaling`` / ``rope_parameters`` dict, or one rope
            of a nested ``rope_parameters``): ``rope_type`` (or the older ``type``), ``rope_theta``,
            ``factor``, ``original_max_position_embeddings``, ``attention_factor``, ``beta_fast``,
            ``beta_slow``, ``mscale``, ``mscale_all_dim``; a key absent is not checked, nor a rope
            type other than ``default`` / ``linear`` / ``yarn`` / ``llama3`` (the runtime refuses
            such a type by its name).
        where: how the message names the dict (e.g. ``"rope_parameters[compress]"``).
        theta_field: the config key the message names for a bad ``rope_theta`` (a rope of
            transformers' nested parameters takes it from ``rope_theta`` / ``compress_rope_theta``).

    Raises:
        ValueError: naming the field: ``rope_theta`` not a positive finite number (the base of
            ``theta ** (-2i / d)``); for a scaled rope type, ``factor`` not a finite number >= 1
            (transformers' rule); ``original_max_position_embeddings`` present and not a positive
            integer (``null`` included);
            ``attention_factor`` not a positive finite number; ``beta_fast`` / ``beta_slow`` /
            ``mscale`` / ``mscale_all_dim`` not finite numbers, or ``beta_fast`` below ``beta_slow``
            (transformers' rule: the ramp of YaRN's correction range would run backwards); for a
            ``llama3`` rope, ``low_freq_factor`` / ``high_freq_factor`` not positive finite numbers
            or ``high_freq_factor`` not above ``low_freq_factor`` (transformers' rule; the smoothing
            divides by their difference).
    """
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default" and rope_type not in _FACTOR_TYPES:
        return  # a type the runtime does not compute: refused by its name, not by its values
    theta = params.get("rope_theta")
    if theta is not None and not (_number(theta) and theta > 0):
        raise ValueError(f"{theta_field}: the {where} base must be a positive finite number, got {theta!r}")
    if rope_type in _FACTOR_TYPES:
        factor = params.get("factor")
        if not (_number(factor) and factor >= 1):
            raise ValueError(
                f"{where}: factor of a {rope_type!r} rope must be a finite number >= 1, got {factor!r}"
            )
    omp = params.get("original_max_position_embeddings")
    if "original_max_position_embeddings" in params and (
        isinstance(omp, bool) or not isinstance(omp, int) or omp < 1
    ):
        raise ValueError(f"{where}: original_max_position_embeddings must be a positive integer, got {omp!r}")
    af = params.get("attention_factor")
    if af is not None and not (_number(af) and af > 0):
        raise ValueError(f"{where}: attention_factor must be a positive finite number, got {af!r}")
    for key in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        v = params.get(key)
        if v is not None and not _number(v):
            raise ValueError(f"{where}: {key} must be a finite number, got {v!r}")
    if rope_type == "llama3":
        low, high = params.get("low_freq_factor"), params.get("high_freq_factor")
        for key, v in (("low_freq_factor", low), ("high_freq_factor", high)):
            if not (_number(v) and v > 0):
                raise ValueError(
                    f"{where}: {key} of a 'llama3' rope must be a positive finite number, got {v!r}"
                )
        if high <= low:
            raise ValueError(
                f"{where}: high_freq_factor ({high!r}) must be greater than low_freq_factor ({low!r})"
            )
    fast, slow = params.get("beta_fast"), params.get("beta_slow")
    if rope_type == "yarn" and (32 if fast is None else fast) < (1 if slow is None else slow):
        raise ValueError(f"{where}: beta_fast ({fast!r}) must not be below beta_slow ({slow!r})")


def check_raw_rope_dicts(raw: dict[str, Any]) -> None:
    """:func:`check_rope_parameters` on every rope dict of a normalised ``config.json`` dict
    (``rope_parameters``, flat or nested ``main`` / ``compress``, and ``compress_rope_parameters``),
    before transformers' validators divide by or compare its values.

    Raises:
        ValueError: as :func:`check_rope_parameters`.
    """
    rp = raw.get("rope_parameters")
    if isinstance(rp, dict):
        nested = [k for k in ("main", "compress") if isinstance(rp.get(k), dict)]
        for k in nested:
            check_rope_parameters(rp[k], f"rope_parameters[{k}]")
        if not nested:
            check_rope_parameters(rp, "rope_parameters")
    crp = raw.get("compress_rope_parameters")
    if isinstance(crp, dict):
        check_rope_parameters(crp, "compress_rope_parameters")
