"""The ``/v1/files`` routes (OpenAI's Files API, as SGLang serves it for batches): upload
(``multipart/form-data`` with ``file`` and ``purpose``), list, retrieve, download, delete, over
the :class:`~.file_store.FileStore` (``--file-storage-path``).

The upload is parsed with the standard library's MIME parser (``email``, RFC 7578 form data is a
MIME multipart body); a body over the store's file bound is refused with a 413 naming the limit
before it is parsed. An unknown (or expired) file id is a 404 in OpenAI's error shape; bad list
parameters a 400 naming the parameter. Files expire as OpenAI's do (``expires_after``; a
``purpose=batch`` upload after 30 days by default).
"""

from __future__ import annotations

import email
import email.policy
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from sglang_v4.entrypoints.openai.file_store import FileStore, FileTooLargeError, max_file_bytes_from_env
from sglang_v4.entrypoints.openai.protocol_batch import (
    DEFAULT_BATCH_FILE_EXPIRY_S,
    FILE_EXPIRY_MAX_S,
    FILE_EXPIRY_MIN_S,
    FILE_PURPOSES,
    FileDeleted,
    FileList,
)
from sglang_v4.entrypoints.openai.request_errors import RequestError, error_response
from sglang_v4.entrypoints.openai.serving_base import OpenAIServingBase
from sglang_v4.utils import run_blocking

__all__ = ["FilesMixin", "parse_form_data", "upload_expiry_s", "MAX_FILES_LIST_LIMIT"]

#: OpenAI's bound on ``limit`` of ``GET /v1/files``.
MAX_FILES_LIST_LIMIT = 10000
#: Bytes a multipart body may hold beyond the file itself (boundaries, part headers, ``purpose``).
_FORM_OVERHEAD_BYTES = 64 * 1024


def parse_form_data(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The parts of a ``multipart/form-data`` body: field name -> ``(filename or None, bytes)``.

    Raises:
        RequestError: the content type is not ``multipart/form-data`` or the body is not a valid
            multipart body (400).
    """
    if not content_type.lower().startswith("multipart/form-data"):
        raise RequestError(
            f"POST /v1/files takes a multipart/form-data body (fields `file` and `purpose`); got "
            f"content type {content_type or 'none'!r}."
        )
    msg = email.message_from_bytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body, policy=email.policy.HTTP
    )
    if not msg.is_multipart() or msg.defects:
        raise RequestError("The multipart/form-data body is malformed.")
    parts: dict[str, tuple[str | None, bytes]] = {}
    for part in msg.iter_parts():  # type: ignore[attr-defined]
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or name in parts:
            continue
        payload = part.get_payload(decode=True)
        parts[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
    return parts


def upload_expiry_s(parts: dict[str, tuple[str | None, bytes]], purpose: str) -> int | None:
    """The lifetime (seconds) of an uploaded file from the form's ``expires_after[anchor]`` and
    ``expires_after[seconds]`` fields (how the ``openai`` client sends OpenAI's ``expires_after``);
    without them OpenAI's default: :data:`DEFAULT_BATCH_FILE_EXPIRY_S` for ``purpose=batch``, None
    (kept until deleted) for the other purposes.

    Raises:
        RequestError: 400 naming ``expires_after.anchor`` (missing or not ``created_at``) or
            ``expires_after.seconds`` (missing, not an integer, or outside [3600, 2592000]).
    """

    def field(name: str) -> str | None:
        part = parts.get(f"expires_after[{name}]")
        return None if part is None else part[1].decode("utf-8", "replace").strip()

    anchor, seconds = field("anchor"), field("seconds")
    if anchor is None and seconds is None:
        return DEFAULT_BATCH_FILE_EXPIRY_S if purpose == "batch" else None
    if anchor != "created_at":
        raise RequestError(
            f"`expires_after.anchor` must be 'created_at'; got {anchor!r}.", param="expires_after.anchor"
        )
    bounds = f"an integer number of seconds between {FILE_EXPIRY_MIN_S} and {FILE_EXPIRY_MAX_S}"
    if seconds is None or not seconds.isascii() or not seconds.isdigit():
        raise RequestError(
            f"`expires_after.seconds` must be {bounds}; got {seconds!r}.", param="expires_after.seconds"
        )
    value = int(seconds)
    if not FILE_EXPIRY_MIN_S <= value <= FILE_EXPIRY_MAX_S:
        raise RequestError(
            f"`expires_after.seconds` must be {bounds}; got {value}.", param="expires_after.seconds"
        )
    return value


def _utf8_fault(content: bytes) -> str | None:
    """Where ``content`` stops being UTF-8 (RFC 3629), in words: its first bad byte and that
    byte's offset; None when it is all UTF-8 (a leading byte-order mark is valid UTF-8)."""
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"byte 0x{content[e.start]:02x} at offset {e.start} is not UTF-8"
    return None


def _query_int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise RequestError(f"`{name}` must be an integer; got {raw!r}.", param=name) from None
    if not lo <= value <= hi:
        raise RequestError(f"`{name}` must be between {lo} and {hi}; got {value}.", param=name)
    return value


class FilesMixin(OpenAIServingBase):
    """The ``/v1/files`` routes (mixed into :class:`~.serving.OpenAIServing`)."""

    _file_store: FileStore | None = None

    @property
    def file_store(self) -> FileStore:
        """The server's file store (made on first use: ``--file-storage-path`` or a temporary
        directory; the bound from ``SGLANG_V4_MAX_FILE_BYTES``)."""
        if self._file_store is None:
            directory = getattr(self.args, "file_storage_path", None)
            self._file_store = FileStore(directory, max_file_bytes_from_env())
        return self._file_store

    async def _files_route(self, request: Request, handler: Any) -> Response:
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        try:
            return await handler()
        except RequestError as e:
            return error_response(e.message, e.status, e.err_type, e.param)

    @staticmethod
    def _no_file(file_id: str) -> RequestError:
        return RequestError(f"No such File object: {file_id}", 404, param="file_id")

    async def create_file(self, request: Request) -> Response:
        """``POST /v1/files``: store the form's ``file`` for ``purpose`` (with ``expires_after``,
        :func:`upload_expiry_s`); the new file object. 400 for a missing field, an unknown purpose,
        a bad ``expires_after`` or a ``purpose=batch`` file whose name does not end in ``.jsonl``
        or whose bytes are not UTF-8 (as OpenAI answers both), 413 for a file over the size bound."""

        async def handle() -> Response:
            store = self.file_store
            limit = store.max_file_bytes + _FORM_OVERHEAD_BYTES
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise RequestError(
                        f"The upload is larger than the file size limit of {store.max_file_bytes} bytes.", 413
                    )
                chunks.append(chunk)
            # the MIME parser takes seconds on a large body: in a worker thread, off the event loop
            parts = await run_blocking(
                parse_form_data, request.headers.get("content-type", ""), b"".join(chunks)
            )
            purpose = parts.get("purpose", (None, b""))[1].decode("utf-8", "replace").strip()
            if not purpose:
                raise RequestError("`purpose` is required.", param="purpose")
            if purpose not in FILE_PURPOSES:
                raise RequestError(
                    f"`purpose` must be one of {', '.join(FILE_PURPOSES)}; got {purpose!r}.", param="purpose"
                )
            if "file" not in parts:
                raise RequestError("`file` is required (a file part of the form).", param="file")
            expires_after_s = upload_expiry_s(parts, purpose)
            filename, content = parts["file"]
            if purpose == "batch" and filename and not filename.lower().endswith(".jsonl"):
                # OpenAI refuses a batch input file by its name before reading it
                raise RequestError(
                    f"Invalid file format for Batch API. Must be .jsonl; got the file name {filename!r}.",
                    param="file",
                )
            fault = _utf8_fault(content) if purpose == "batch" else None
            if fault is not None:
                # OpenAI refuses a batch input file that is not UTF-8 at upload, before any batch
                raise RequestError(
                    f"Invalid file for Batch API. Must be utf-8 encoded; {fault}.", param="file"
                )
            try:
                obj = store.create(content, filename or "upload", purpose, expires_after_s=expires_after_s)
            except FileTooLargeError as e:
                raise RequestError(str(e), 413, param="file") from None
            return JSONResponse(obj.model_dump())

        return await self._files_route(request, handle)

    async def list_files(self, request: Request) -> Response:
        """``GET /v1/files``: a page of files (``purpose``, ``limit`` 1..10000, ``after``, ``order``)."""

        async def handle() -> Response:
            limit = _query_int(request, "limit", MAX_FILES_LIST_LIMIT, 1, MAX_FILES_LIST_LIMIT)
            order = request.query_params.get("order", "desc")
            if order not in ("asc", "desc"):
                raise RequestError(f"`order` must be 'asc' or 'desc'; got {order!r}.", param="order")
            files, more = self.file_store.list(
                request.query_params.get("purpose"), limit, request.query_params.get("after"), order
            )
            page = FileList(
                data=files,
                first_id=files[0].id if files else None,
                last_id=files[-1].id if files else None,
                has_more=more,
            )
            return JSONResponse(page.model_dump())

        return await self._files_route(request, handle)

    async def retrieve_file(self, request: Request, file_id: str) -> Response:
        """``GET /v1/files/{file_id}``: the file object, 404 for an unknown id."""

        async def handle() -> Response:
            obj = self.file_store.get(file_id)
            if obj is None:
                raise self._no_file(file_id)
            return JSONResponse(obj.model_dump())

        return await self._files_route(request, handle)

    async def file_content(self, request: Request, file_id: str) -> Response:
        """``GET /v1/files/{file_id}/content``: the file's bytes, 404 for an unknown id."""

        async def handle() -> Response:
            content = self.file_store.read(file_id)
            if content is None:
                raise self._no_file(file_id)
            return Response(content, media_type="application/octet-stream")

        return await self._files_route(request, handle)

    async def delete_file(self, request: Request, file_id: str) -> Response:
        """``DELETE /v1/files/{file_id}``: remove the file, 404 for an unknown id."""

        async def handle() -> Response:
            if not self.file_store.delete(file_id):
                raise self._no_file(file_id)
            return JSONResponse(FileDeleted(id=file_id).model_dump())

        return await self._files_route(request, handle)
