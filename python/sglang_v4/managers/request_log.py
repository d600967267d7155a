"""Request log lines of ``--log-requests`` (SGLang's ``--log-requests-level`` / ``--log-requests-format``).

One line when a request is received and one when it finishes, through the
``sglang_v4.managers.tokenizer_manager`` logger (the server's log). What a line holds depends on
the level, with SGLang's meanings (its ``--help``):

* ``0``: metadata only: ``rid``, prompt / completion / cached token counts, the finish reason and
  the latency; no sampling parameters, no text or token ids;
* ``1``: level 0 and the request's ``sampling_params``;
* ``2`` (SGLang's default): level 1 and the input and output, text and token ids, each cut to its
  first :data:`PARTIAL_LIMIT` characters / ids (a ``"...(N more)"`` note says how many were cut);
  the sampling parameters are cut the same way at any depth (a long ``json_schema``, each string
  of a long ``stop`` list), so no line outgrows the bound (SGLang's level-2 ``max_length``);
* ``3``: level 1 and the whole input and output.

``text`` format: ``Receive: rid=... key=value ...`` / ``Finish: rid=... ...`` (values as
``repr``); ``json`` format: one JSON object per line, ``{"event": "request.received" |
"request.finished", "rid": ..., ...}``, so a log shipper can parse it.

``SGLANG_LOG_REQUEST_EXCEEDED_MS`` (SGLang's variable, milliseconds, integer; default ``-1``):
when above 0, the finish line of a request whose end-to-end latency is under that many
milliseconds is not logged (the received line still is), so only slow requests leave a finish
line; unset, ``<= 0`` or not an integer (a warning, once): every finish line is logged.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)

LOG_REQUESTS_LEVELS = (0, 1, 2, 3)
LOG_REQUESTS_FORMATS = ("text", "json")
#: Characters of a text / ids of a list kept at level 2 (SGLang's partial length).
PARTIAL_LIMIT = 2048
#: SGLang's variable: log only the finish lines of requests at least this slow (milliseconds)
LOG_EXCEEDED_MS_ENV = "SGLANG_LOG_REQUEST_EXCEEDED_MS"
_warned: set[str] = set()


def log_exceeded_ms(environ: Mapping[str, str] | None = None) -> int:
    """``SGLANG_LOG_REQUEST_EXCEEDED_MS`` read from ``environ`` (default ``os.environ``): the
    latency threshold in milliseconds of the finish lines (module docstring); ``-1`` when unset
    or not an integer (logged once per value)."""
    raw = (os.environ if environ is None else environ).get(LOG_EXCEEDED_MS_ENV)
    if raw is None or not raw.strip():
        return -1
    try:
        return int(raw)
    except ValueError:
        if raw not in _warned:
            _warned.add(raw)
            logger.warning("%s=%r is not an integer; every finish line is logged", LOG_EXCEEDED_MS_ENV, raw)
        return -1


def finish_line_due(meta: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> bool:
    """Whether a request whose response ``meta_info`` is ``meta`` gets a finish line: always,
    unless ``SGLANG_LOG_REQUEST_EXCEEDED_MS`` is above 0 and ``meta["e2e_latency"]`` (seconds)
    is under it (SGLang's check: ``e2e_latency * 1000 < threshold`` skips the line)."""
    threshold = log_exceeded_ms(environ)
    latency = meta.get("e2e_latency")
    if threshold <= 0 or not isinstance(latency, (int, float)):
        return True
    return latency * 1000.0 >= threshold


def _cut(value: Any, level: int) -> Any:
    """``value`` as level ``level`` logs it: below 3, every string longer than
    :data:`PARTIAL_LIMIT` characters and every list, tuple or dict longer than
    :data:`PARTIAL_LIMIT` items is cut to that many, with a ``"...(N more)"`` note, at any depth
    (a long list's kept items, a dict's values: the bound holds for nested payloads too, such as a
    ``json_schema`` or a ``stop`` list in the sampling parameters)."""
    if level >= 3 or value is None:
        return value
    if isinstance(value, str):
        if len(value) > PARTIAL_LIMIT:
            return value[:PARTIAL_LIMIT] + f"...({len(value) - PARTIAL_LIMIT} more)"
        return value
    if isinstance(value, (list, tuple)):
        kept = [_cut(v, level) for v in value[:PARTIAL_LIMIT]]
        if len(value) > PARTIAL_LIMIT:
            kept.append(f"...({len(value) - PARTIAL_LIMIT} more)")
        return kept
    if isinstance(value, dict):
        items = list(value.items())
        out = {k: _cut(v, level) for k, v in items[:PARTIAL_LIMIT]}
        if len(items) > PARTIAL_LIMIT:
            out["..."] = f"({len(items) - PARTIAL_LIMIT} more)"
        return out
    return value


def _add_detail(
    fields: dict[str, Any],
    level: int,
    sampling_params: dict[str, Any] | None,
    text_key: str,
    text: str | None,
    ids_key: str,
    ids: list[int],
) -> None:
    """Add what level ``level`` logs beyond the metadata (module docstring): from 1 the sampling
    parameters (cut at level 2), from 2 ``text`` (if any) and ``ids`` (cut at level 2,
    :func:`_cut`)."""
    if level >= 1:
        # level 1 logs them whole (SGLang's level 1 does not truncate); level 2 cuts them too
        fields["sampling_params"] = _cut(sampling_params or {}, level if level >= 2 else 3)
    if level >= 2:
        if text is not None:
            fields[text_key] = _cut(text, level)
        fields[ids_key] = _cut(list(ids), level)


def _render(event: str, fields: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"event": f"request.{event}", **fields}, ensure_ascii=False, default=str)
    head = "Receive" if event == "received" else "Finish"
    return f"{head}: " + " ".join(f"{k}={v!r}" if k != "rid" else f"rid={v}" for k, v in fields.items())


def received_line(
    rid: str,
    input_ids: list[int],
    text: str | None,
    sampling_params: dict[str, Any] | None,
    level: int,
    fmt: str,
) -> str:
    """The line logged when request ``rid`` is received (module docstring).

    Args:
        rid: the request id.
        input_ids: the prompt's token ids (their count is logged at every level).
        text: the prompt text (``None`` for an ``input_ids`` request).
        sampling_params: the request's sampling parameters as sent.
        level: ``--log-requests-level`` (0..3).
        fmt: ``--log-requests-format`` (``text`` / ``json``).
    """
    fields: dict[str, Any] = {"rid": rid, "prompt_tokens": len(input_ids)}
    _add_detail(fields, level, sampling_params, "text", text, "input_ids", input_ids)
    return _render("received", fields, fmt)


def finished_line(
    rid: str,
    meta: dict[str, Any],
    output_text: str | None,
    output_ids: list[int],
    sampling_params: dict[str, Any] | None,
    level: int,
    fmt: str,
) -> str:
    """The line logged when request ``rid`` finishes (module docstring).

    Args:
        rid: the request id.
        meta: the response's ``meta_info`` (token counts, ``finish_reason``, ``e2e_latency``;
            logprob lists are left out).
        output_text: the generated text (``None`` with ``--skip-tokenizer-init``).
        output_ids: the generated token ids.
        sampling_params: the request's sampling parameters as sent.
        level: ``--log-requests-level`` (0..3).
        fmt: ``--log-requests-format`` (``text`` / ``json``).
    """
    fields: dict[str, Any] = {"rid": rid}
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason", "e2e_latency"):
        if key in meta:
            fields[key] = meta[key]
    _add_detail(fields, level, sampling_params, "output_text", output_text, "output_ids", output_ids)
    return _render("finished", fields, fmt)
