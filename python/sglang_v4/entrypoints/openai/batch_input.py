"""Validation of a batch's input file (OpenAI's Batch API JSONL format).

Each non-blank line is one request ``{"custom_id": str, "method": "POST", "url": <the batch's
endpoint>, "body": {...}}``. A file with any bad line fails the whole batch before anything runs,
as OpenAI does: the batch's ``errors.data`` lists each fault with its 1-based ``line`` and the
field (``param``) at fault. What the ``body`` holds is checked by the route when the line runs (a
bad body fails that request alone, in the batch's error file).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

import orjson

from sglang_v4.entrypoints.openai.protocol_batch import BatchError
from sglang_v4.entrypoints.openai.request_errors import loads_json_body

__all__ = ["BatchLine", "MAX_BATCH_REQUESTS", "MAX_REPORTED_ERRORS", "parse_batch_input"]

#: OpenAI's bound on the requests of one batch.
MAX_BATCH_REQUESTS = 50_000
#: At most this many line errors are listed in a failed batch's ``errors.data``.
MAX_REPORTED_ERRORS = 1000


@dataclass
class BatchLine:
    """One valid request of a batch: its ``custom_id``, 1-based line number and JSON ``body``."""

    custom_id: str
    line: int
    body: dict[str, Any]


def _fault(line: int, field: str, code: str, message: str) -> BatchError:
    """The error of field ``field`` on 1-based line ``line``: OpenAI's ``code`` and ``message``."""
    return BatchError(code=code, message=message, param=field, line=line)


def _missing(field: str, line: int) -> BatchError:
    return _fault(line, field, "missing_required_parameter", f"Missing required parameter: '{field}'.")


def _line_errors(line: int, obj: Any, endpoint: str, seen: set[str]) -> list[BatchError]:
    """Every fault of one parsed line, one entry per field at fault (``custom_id``, ``method``,
    ``url``, ``body``, in that order), as OpenAI lists a line that lacks several fields once per
    field. A string ``custom_id`` is recorded in ``seen`` even when the line has other faults, so
    a later line reusing it is a duplicate."""
    if not isinstance(obj, dict):
        return [BatchError(code="invalid_request", message="The line must be a JSON object.", line=line)]
    errors: list[BatchError] = []
    custom_id = obj.get("custom_id")
    if custom_id is None:
        errors.append(_missing("custom_id", line))
    elif not isinstance(custom_id, str) or not custom_id:
        errors.append(
            _fault(
                line,
                "custom_id",
                "invalid_value",
                f"`custom_id` must be a non-empty string; got {custom_id!r}.",
            )
        )
    elif custom_id in seen:
        errors.append(
            _fault(
                line,
                "custom_id",
                "duplicate_custom_id",
                f"The custom_id {custom_id!r} is used by an earlier line; each must be unique.",
            )
        )
    else:
        seen.add(custom_id)
    method = obj.get("method")
    if method is None:
        errors.append(_missing("method", line))
    elif method != "POST":
        errors.append(_fault(line, "method", "invalid_value", f"`method` must be 'POST'; got {method!r}."))
    url = obj.get("url")
    if url is None:
        errors.append(_missing("url", line))
    elif url != endpoint:
        errors.append(
            _fault(
                line,
                "url",
                "mismatched_endpoint",
                f"`url` {url!r} does not match the batch's endpoint {endpoint!r}.",
            )
        )
    body = obj.get("body")
    if body is None:
        errors.append(_missing("body", line))
    elif not isinstance(body, dict):
        errors.append(
            _fault(
                line, "body", "invalid_value", "`body` must be a JSON object (the request to the endpoint)."
            )
        )
    return errors


def parse_batch_input(content: bytes, endpoint: str) -> tuple[list[BatchLine], list[BatchError]]:
    """The requests of a batch input file, or the reasons it is invalid.

    Args:
        content: the file's bytes (UTF-8 JSON Lines; blank lines are skipped; a leading UTF-8
            byte-order mark, as editors on Windows write, is dropped as Python's ``json.loads``
            drops it from bytes).
        endpoint: the batch's endpoint, which every line's ``url`` must equal.

    Returns:
        ``(lines, errors)``: when ``errors`` is non-empty (at most :data:`MAX_REPORTED_ERRORS`) the
        batch fails validation and ``lines`` is to be ignored.
    """
    lines: list[BatchLine] = []
    errors: list[BatchError] = []
    seen: set[str] = set()
    content = content.removeprefix(codecs.BOM_UTF8)
    for number, raw in enumerate(content.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = loads_json_body(raw)
        except orjson.JSONDecodeError:
            line_errors = [
                BatchError(
                    code="invalid_json_line", message="This line is not parseable as valid JSON.", line=number
                )
            ]
        else:
            line_errors = _line_errors(number, obj, endpoint, seen)
        if line_errors:
            errors.extend(line_errors[: MAX_REPORTED_ERRORS - len(errors)])
            continue
        lines.append(BatchLine(obj["custom_id"], number, obj["body"]))
    if not lines and not errors:
        errors.append(BatchError(code="empty_file", message="The input file holds no requests."))
    elif len(lines) > MAX_BATCH_REQUESTS:
        errors.append(
            BatchError(
                code="too_many_requests",
                message=f"The input file holds {len(lines)} requests; a batch takes at most {MAX_BATCH_REQUESTS}.",
            )
        )
    return lines, errors
