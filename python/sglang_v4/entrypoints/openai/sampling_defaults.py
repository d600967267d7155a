"""``--sampling-defaults``: where ``/v1/chat/completions`` takes the sampling parameters a request
leaves unset (SGLang's flag and default).

* ``model`` (the default, as in SGLang): the model directory's ``generation_config.json`` -- its
  ``temperature``, ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` where it sets them
  (the values the model's authors recommend); the others keep SGLang's defaults.
* ``openai``: SGLang's / OpenAI's defaults (``temperature`` 1, ``top_p`` 1, no ``top_k`` /
  ``min_p``, no repetition penalty) whatever the model directory says.

A value the request sets always wins. As in SGLang, only chat requests read the model's defaults
(``/v1/completions`` and ``/generate`` keep SGLang's defaults).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

SAMPLING_DEFAULTS_CHOICES = ("model", "openai")
#: ``generation_config.json`` keys that become chat sampling defaults.
GENERATION_CONFIG_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def model_sampling_defaults(model_path: str | None, mode: str) -> dict[str, Any]:
    """The chat sampling defaults of ``--sampling-defaults mode`` for the model at ``model_path``.

    Args:
        model_path: the model directory (``None``: no directory, no defaults).
        mode: ``model`` or ``openai`` (module docstring).

    Returns:
        ``{key: value}`` of the :data:`GENERATION_CONFIG_SAMPLING_KEYS` that
        ``generation_config.json`` sets to a non-null value (empty for ``openai``, without the
        file, or when it does not parse as a JSON object: logged).

    Raises:
        ValueError: naming ``sampling_defaults`` for another ``mode``.
    """
    if mode not in SAMPLING_DEFAULTS_CHOICES:
        raise ValueError(f"sampling_defaults must be one of {list(SAMPLING_DEFAULTS_CHOICES)} (got {mode!r})")
    if mode == "openai" or not model_path:
        return {}
    path = os.path.join(model_path, "generation_config.json")
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        logger.warning("Ignoring %s (%s): chat requests use SGLang's sampling defaults", path, e)
        return {}
    if not isinstance(cfg, dict):
        return {}
    out = {k: cfg[k] for k in GENERATION_CONFIG_SAMPLING_KEYS if cfg.get(k) is not None}
    if out:
        logger.info("Chat sampling defaults from %s: %s", path, out)
    return out
