"""``--sampling-defaults``: where ``/v1/chat/completions`` takes the sampling parameters a request
leaves unset (SGLang's flag and default).

* ``model`` (the default, as in SGLang): the model directory's ``generation_config.json`` -- its
  ``temperature``, ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` where it sets them
  (the values the model's authors recommend); the others keep SGLang's defaults. ``do_sample`` is
  not read, as neither SGLang nor vLLM reads it: ``"do_sample": false`` with ``temperature`` 0.6
  samples at 0.6 (transformers' ``generate`` would decode greedily); the start-up log says so.
  ``max_new_tokens`` / ``max_length`` are not defaults (SGLang reads neither; vLLM's
  ``--generation-config`` makes ``max_new_tokens`` a server-wide cap on every request's output
  instead): a request's length is its own ``max_tokens``, else the room the context leaves. They
  are logged at start-up as not applied, like any value that cannot be a default.
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
#: ``generation_config.json`` length keys that are not defaults (module docstring).
GENERATION_CONFIG_LENGTH_KEYS = ("max_new_tokens", "max_length")


def model_sampling_defaults(model_path: str | None, mode: str) -> dict[str, Any]:
    """The chat sampling defaults of ``--sampling-defaults mode`` for the model at ``model_path``.

    Args:
        model_path: the model directory (``None``: no directory, no defaults).
        mode: ``model`` or ``openai`` (module docstring).

    Returns:
        ``{key: value}`` of the :data:`GENERATION_CONFIG_SAMPLING_KEYS` that
        ``generation_config.json`` sets to a non-null value SGLang's sampling parameters accept
        (:func:`valid_sampling_default`; another value is logged and left out, so that it does not
        turn every chat request that leaves the field unset into a 400 about a field the client never
        sent). Empty for ``openai``, without the file, or when it does not parse as a JSON object
        (logged: an empty or truncated file, a stray list, is never a start-up failure).

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
        with open(path, encoding="utf-8-sig") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        logger.warning("Ignoring %s (%s): chat requests use SGLang's sampling defaults", path, e)
        return {}
    if not isinstance(cfg, dict):
        logger.warning("Ignoring %s (not a JSON object): chat requests use SGLang's sampling defaults", path)
        return {}
    out: dict[str, Any] = {}
    for k in GENERATION_CONFIG_SAMPLING_KEYS:
        if cfg.get(k) is None:
            continue
        why = valid_sampling_default(k, cfg[k])
        if why is None:
            out[k] = cfg[k]
        else:
            logger.warning("Ignoring %s of %s: %s", k, path, why)
    if cfg.get("do_sample") is False:
        logger.info(
            "%s sets do_sample false, which is not read (SGLang's and vLLM's rule): chat requests that "
            "leave temperature unset sample at its temperature; send temperature 0 for greedy decoding",
            path,
        )
    unread = [k for k in GENERATION_CONFIG_LENGTH_KEYS if cfg.get(k) is not None]
    if unread:
        logger.info(
            "Not applied from %s: %s (SGLang's rule: a request's length is its own max_tokens, else "
            "what the context leaves; use --preferred-sampling-params '{\"max_new_tokens\": N}' for a default)",
            path,
            ", ".join(f"{k}={cfg[k]!r}" for k in unread),
        )
    if out:
        logger.info("Chat sampling defaults from %s: %s", path, out)
    return out


def valid_sampling_default(key: str, value: Any) -> str | None:
    """Why ``value`` of ``generation_config.json``'s ``key`` cannot be a chat sampling default, or
    ``None`` when it can: SGLang's own range check of that one parameter
    (:meth:`~sglang_v4.sampling.sampling_params.SamplingParams.verify`), after reading ``top_k``
    0 as transformers' "no top-k" (the chat route sends -1 for it)."""
    from sglang_v4.sampling.sampling_params import TOP_K_ALL, SamplingParams

    if key == "top_k" and value == 0 and not isinstance(value, bool):
        value = TOP_K_ALL
    try:
        sp = SamplingParams.from_dict({key: value})
        sp.normalize(None)
        sp.verify()
    except (TypeError, ValueError) as e:
        return str(e)
    return None


def json_object_flag(name: str, value: Any) -> dict[str, Any] | None:
    """A server flag that holds a JSON object: ``value`` as the command line gives it (JSON text)
    or as ``Engine`` keywords do (a dict); ``None`` stays ``None``.

    Raises:
        ValueError: naming ``name``: text that is not JSON, or JSON that is not an object.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{name} must be a JSON object (got {value!r}: {e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object (got {value!r})")
    return value


def parse_preferred_sampling_params(value: Any, skip_tokenizer_init: bool = False) -> dict[str, Any] | None:
    """SGLang's ``--preferred-sampling-params``, parsed and checked once at start-up.

    The server-wide defaults every generate request merges under its own ``sampling_params``
    (``{**preferred, **request}``: a key the request sends wins; SGLang's tokenizer manager merges
    the same way). On ``/v1/chat/completions`` the request's ``sampling_params`` already carry the
    model's ``generation_config.json`` values (``--sampling-defaults model``), so those win over
    these; on every route these win over SGLang's built-in defaults.

    Args:
        value: ``None``, a JSON object text (the command line) or a dict (``Engine`` keyword).
        skip_tokenizer_init: the server loads no tokenizer (then parameters that need one, such
            as stop strings or grammars, are refused, as SGLang refuses them).

    Returns:
        The parameters as a dict (``None`` for ``None`` or an empty object).

    Raises:
        ValueError: naming ``preferred_sampling_params``: not a JSON object, an unknown sampling
            parameter, a value of the wrong type or out of range, ``n`` (a per-request fan-out),
            or a parameter that needs the tokenizer with ``skip_tokenizer_init``.
    """
    from sglang_v4.managers.tokenization import check_tokenizer_free
    from sglang_v4.sampling.sampling_params import SamplingParams

    value = json_object_flag("preferred_sampling_params", value)
    if value is None:
        return None
    if "n" in value:
        raise ValueError(
            "preferred_sampling_params: n is not a default sampling parameter (it is how many "
            "completions one request asks for); send it with each request"
        )
    allowed = SamplingParams.field_names() - {"n"}
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:  # before SamplingParams' own check, whose list of allowed names includes n
        raise ValueError(
            f"preferred_sampling_params: unknown sampling parameter(s): {', '.join(unknown)}. "
            f"Allowed: {', '.join(sorted(allowed))}."
        )
    try:
        sp = SamplingParams.from_dict(dict(value))
        sp.normalize(None)
        if skip_tokenizer_init:
            check_tokenizer_free(sp)
        sp.verify()
    except (TypeError, ValueError) as e:
        raise ValueError(f"preferred_sampling_params: {e}") from None
    return dict(value) or None
