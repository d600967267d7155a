"""Pydantic models of OpenAI's Files and Batch APIs (``/v1/files``, ``/v1/batches``): the file
object, the batch object, their lists, the batch-creation body and one line of a batch's output.

Field names and shapes follow the OpenAI API reference (the ``openai`` client's ``types.FileObject``,
``types.Batch``, ``types.FileDeleted`` parse them; the tests validate every body against those
types). Times are Unix seconds (``int``), sizes bytes.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

__all__ = [
    "BATCH_ENDPOINTS",
    "BATCH_COMPLETION_WINDOWS",
    "FILE_PURPOSES",
    "BatchStatus",
    "TERMINAL_BATCH_STATUSES",
    "FileObject",
    "FileDeleted",
    "FileList",
    "BatchRequestCounts",
    "BatchUsage",
    "BatchError",
    "BatchErrors",
    "BatchObject",
    "BatchList",
    "BatchCreateRequest",
    "FILE_EXPIRY_MIN_S",
    "FILE_EXPIRY_MAX_S",
    "DEFAULT_BATCH_FILE_EXPIRY_S",
    "ExpiresAfter",
    "BatchOutputResponse",
    "BatchOutputLine",
    "new_object_id",
    "now_s",
]

#: The endpoints a batch may target (OpenAI also has embeddings / responses; this server does not
#: serve them in a batch).
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
#: OpenAI accepts only ``24h``.
BATCH_COMPLETION_WINDOWS = ("24h",)
#: The purposes a client may upload a file for (OpenAI's upload purposes); ``batch_output`` is
#: written by the server only.
FILE_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")

#: OpenAI's bounds on ``expires_after.seconds`` / ``output_expires_after.seconds``: 1 hour to 30 days.
FILE_EXPIRY_MIN_S = 3600
FILE_EXPIRY_MAX_S = 30 * 24 * 3600
#: OpenAI's default lifetime of a file uploaded with ``purpose=batch`` (seconds); files of the
#: other purposes, and a batch's output / error files, are kept until deleted unless given one.
DEFAULT_BATCH_FILE_EXPIRY_S = FILE_EXPIRY_MAX_S

BatchStatus = Literal[
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"
]
#: Statuses after which a batch changes no more.
TERMINAL_BATCH_STATUSES = frozenset({"failed", "completed", "expired", "cancelled"})


def new_object_id(prefix: str) -> str:
    """A fresh id in OpenAI's style: ``prefix`` (``file``, ``batch``, ``batch_req``) + ``-`` + 24
    hex digits (OpenAI's ids are ``file-...``, ``batch_...``; both separators are accepted by its
    client, which treats ids as opaque)."""
    sep = "-" if prefix == "file" else "_"
    return f"{prefix}{sep}{uuid.uuid4().hex[:24]}"


def now_s() -> int:
    """The current Unix time in whole seconds."""
    return int(time.time())


class FileObject(BaseModel):
    """A stored file (OpenAI's ``file`` object). ``bytes``: its size; ``status`` ``processed``
    once stored (the upload is written before the object is returned)."""

    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    status_details: str | None = None
    expires_at: int | None = None


class FileDeleted(BaseModel):
    """The answer of ``DELETE /v1/files/{id}``."""

    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class FileList(BaseModel):
    """``GET /v1/files``: a cursor page (``after`` = the last id of the previous page)."""

    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class BatchRequestCounts(BaseModel):
    """Requests of a batch: in the input (``total``), answered 2xx (``completed``), not (``failed``)."""

    total: int = 0
    completed: int = 0
    failed: int = 0


class BatchError(BaseModel):
    """One validation error of a batch's input: ``line`` is 1-based (OpenAI's convention), ``param``
    the field of the line at fault."""

    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchInputTokensDetails(BaseModel):
    """``usage.input_tokens_details`` of a batch: prompt tokens served from the prefix cache."""

    cached_tokens: int = 0


class BatchOutputTokensDetails(BaseModel):
    """``usage.output_tokens_details`` of a batch: generated tokens spent on reasoning."""

    reasoning_tokens: int = 0


class BatchUsage(BaseModel):
    """OpenAI's batch ``usage``: the token counts (tokens) summed over the batch's answered (2xx)
    requests, from each answer's own ``usage``: ``input_tokens`` = its ``prompt_tokens``,
    ``output_tokens`` = its ``completion_tokens``, ``cached_tokens`` from
    ``prompt_tokens_details``, ``reasoning_tokens`` from ``completion_tokens_details`` (or SGLang's
    top-level ``reasoning_tokens``); a ``/v1/responses`` answer's usage already has the batch's
    names. ``total_tokens`` = input + output."""

    input_tokens: int = 0
    input_tokens_details: BatchInputTokensDetails = Field(default_factory=BatchInputTokensDetails)
    output_tokens: int = 0
    output_tokens_details: BatchOutputTokensDetails = Field(default_factory=BatchOutputTokensDetails)
    total_tokens: int = 0

    def add(self, usage: Any) -> None:
        """Add one answer's ``usage`` object (a chat / completions ``usage`` dict with
        ``prompt_tokens``..., or a ``/v1/responses`` one with ``input_tokens``...; anything else,
        or missing counts, adds nothing)."""
        if not isinstance(usage, dict):
            return

        def count(obj: Any, key: str) -> int:
            v = obj.get(key) if isinstance(obj, dict) else None
            return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

        if "input_tokens" in usage:  # a /v1/responses answer names the counts as the batch does
            prompt, completion = count(usage, "input_tokens"), count(usage, "output_tokens")
            cached = count(usage.get("input_tokens_details"), "cached_tokens")
            reasoning = count(usage.get("output_tokens_details"), "reasoning_tokens")
        else:
            prompt, completion = count(usage, "prompt_tokens"), count(usage, "completion_tokens")
            cached = count(usage.get("prompt_tokens_details"), "cached_tokens")
            reasoning = count(usage.get("completion_tokens_details"), "reasoning_tokens")
            reasoning = reasoning or count(usage, "reasoning_tokens")
        self.input_tokens += prompt
        self.output_tokens += completion
        self.total_tokens += prompt + completion
        self.input_tokens_details.cached_tokens += cached
        self.output_tokens_details.reasoning_tokens += reasoning


class BatchErrors(BaseModel):
    """The ``errors`` of a batch that failed validation."""

    object: Literal["list"] = "list"
    data: list[BatchError] = Field(default_factory=list)


class BatchObject(BaseModel):
    """A batch (OpenAI's ``batch`` object); the ``*_at`` times are set as the status passes them."""

    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus = "validating"
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: BatchRequestCounts = Field(default_factory=BatchRequestCounts)
    #: the model that answered (the ``model`` of the first 2xx answer; null before one)
    model: str | None = None
    #: token counts of the answered requests so far (:class:`BatchUsage`)
    usage: BatchUsage = Field(default_factory=BatchUsage)
    metadata: dict[str, str] | None = None


class BatchList(BaseModel):
    """``GET /v1/batches``: a cursor page, newest first."""

    object: Literal["list"] = "list"
    data: list[BatchObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class ExpiresAfter(BaseModel):
    """OpenAI's file expiration policy (``expires_after`` of ``POST /v1/files``,
    ``output_expires_after`` of ``POST /v1/batches``): the file expires ``seconds`` after its own
    ``created_at`` (the only anchor), ``seconds`` in [:data:`FILE_EXPIRY_MIN_S`,
    :data:`FILE_EXPIRY_MAX_S`]."""

    anchor: Literal["created_at"]
    seconds: int = Field(ge=FILE_EXPIRY_MIN_S, le=FILE_EXPIRY_MAX_S)


class BatchCreateRequest(BaseModel):
    """The body of ``POST /v1/batches`` (checked further by the route: the endpoint, the window,
    the file). ``metadata``: at most 16 string pairs (keys up to 64 characters, values up to 512).
    ``output_expires_after``: the lifetime of the output and error files the batch writes (from
    each file's own creation; without it they are kept until deleted)."""

    input_file_id: str
    #: the schema lists the route's choices (:data:`BATCH_ENDPOINTS`); validation takes any string
    #: and the route answers another with a 400 naming the field
    endpoint: str = Field(json_schema_extra={"enum": list(BATCH_ENDPOINTS)})
    completion_window: str = Field(json_schema_extra={"enum": list(BATCH_COMPLETION_WINDOWS)})
    metadata: dict[str, str] | None = None
    output_expires_after: ExpiresAfter | None = None


class BatchOutputResponse(BaseModel):
    """The route's answer to one batch request: HTTP status, the request id and the JSON body
    (the completion, or the route's error body)."""

    status_code: int
    request_id: str
    body: dict[str, Any] | None = None


class BatchOutputLine(BaseModel):
    """One line of a batch's output or error file. ``response`` is null and ``error``
    ``{"code", "message"}`` when the request never reached the route (the batch was cancelled first)."""

    id: str
    custom_id: str
    response: BatchOutputResponse | None = None
    error: dict[str, Any] | None = None
