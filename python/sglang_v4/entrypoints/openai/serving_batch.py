"""The ``/v1/batches`` routes (OpenAI's Batch API, as SGLang serves it): create, retrieve, cancel
and list batches of ``/v1/chat/completions``, ``/v1/completions`` or ``/v1/responses`` requests.

A batch runs in the server process: its input file (:mod:`.file_store`) is validated
(:mod:`.batch_input`; a bad line fails the batch with ``errors.data``), then each request goes
through the same handler as the HTTP route (:meth:`~.serving_base.OpenAIServingBase._answer` on a
request built from the line's body), at most :data:`DEFAULT_BATCH_CONCURRENCY` at a time over the
whole server. Each answer becomes one output line ``{"id", "custom_id", "response": {"status_code",
"request_id", "body"}, "error"}``: 2xx answers go to the output file, the others (a 400 from the
route, ``stream: true`` or a response's ``background: true``, which a batch cannot return) to
the error file and count as ``failed``. Lines are written in input order. The batch's ``usage``
sums the token counts of the 2xx answers (:class:`~.protocol_batch.BatchUsage`). Statuses:
``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed``, or ``failed``
(validation), or ``cancelling`` -> ``cancelled``.

Cancelling aborts the running requests (their generation is closed, so the tokenizer manager
aborts them and the scheduler frees their KV pages) and skips the queued ones; the answers that
were complete are kept in the output file, and every request that did not finish is listed in the
error file with ``error: {"code": "batch_cancelled"}``. Batches are kept in memory (lost when the
server stops); a stopping server cancels the running ones at the start of its drain
(:meth:`BatchMixin.cancel_all_batches`: their files written the same way) and closes the file store
(:meth:`BatchMixin.close_batches`). The API key is checked on every route, as on the other ``/v1``
routes.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import Request as StarletteRequest

from sglang_v4.entrypoints.openai.batch_input import BatchLine, parse_batch_input
from sglang_v4.entrypoints.openai.protocol import error_body
from sglang_v4.entrypoints.openai.protocol_batch import (
    BATCH_COMPLETION_WINDOWS,
    BATCH_ENDPOINTS,
    TERMINAL_BATCH_STATUSES,
    BatchCreateRequest,
    BatchError,
    BatchErrors,
    BatchList,
    BatchObject,
    BatchOutputLine,
    BatchOutputResponse,
    new_object_id,
    now_s,
)
from sglang_v4.entrypoints.openai.request_errors import RequestError, read_json_object, validate_request
from sglang_v4.entrypoints.openai.serving_files import FilesMixin, _query_int
from sglang_v4.utils import run_blocking

logger = logging.getLogger(__name__)

__all__ = [
    "BatchMixin",
    "DEFAULT_BATCH_CONCURRENCY",
    "MAX_BATCH_LIST_LIMIT",
    "SHUTDOWN_LINE_MSG",
    "STREAM_IN_BATCH_MSG",
]

#: Requests of all batches that run at once (the rest wait their turn).
DEFAULT_BATCH_CONCURRENCY = 64
#: OpenAI's bound on ``limit`` of ``GET /v1/batches``.
MAX_BATCH_LIST_LIMIT = 100
#: The answer to a batch line with ``stream: true``.
STREAM_IN_BATCH_MSG = "`stream: true` is not supported in a batch: its answer is one line of the output file."
#: OpenAI's bounds on ``metadata``: pairs, key length, value length.
_METADATA_BOUNDS = (16, 64, 512)
#: The error of a request a cancel left unfinished (``code`` ``batch_cancelled``).
CANCELLED_LINE_MSG = "The batch was cancelled before this request finished."
#: The same when the server stopped (its batches are cancelled at the start of the drain).
SHUTDOWN_LINE_MSG = "The server shut down before this request finished; the batch was cancelled."
#: Seconds :meth:`BatchMixin.cancel_all_batches` waits for a batch to write its files before
#: stopping its task (a large input file may still be in validation, in a worker thread).
BATCH_STOP_WAIT_S = 5.0
_BATCH_WINDOW_S = 24 * 3600
#: The answer to a ``/v1/responses`` batch line with ``background: true``.
BACKGROUND_IN_BATCH_MSG = (
    "`background: true` is not supported in a batch: its answer is one line of the output file."
)
#: The route handler that answers each batch endpoint's lines.
_BATCH_HANDLERS = {
    "/v1/chat/completions": "_chat",
    "/v1/completions": "_completions",
    "/v1/responses": "_responses",
}


@dataclass
class _BatchRun:
    """A batch and the tasks that run it."""

    batch: BatchObject
    task: asyncio.Task[None] | None = None
    line_tasks: list[asyncio.Task[tuple[BatchOutputLine, bool]]] = field(default_factory=list)
    cancelled: bool = False
    #: The error message of the requests a cancel left unfinished.
    cancel_message: str = CANCELLED_LINE_MSG
    #: The lifetime (seconds) of the output and error files (``output_expires_after``); None: kept.
    output_expires_s: int | None = None


def _internal_request(path: str, body: bytes) -> StarletteRequest:
    """A POST request to ``path`` carrying ``body`` (JSON) for the route handlers. After the body
    its receive channel waits forever, so the handlers' disconnect polls see a client that stays."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}

    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "server": ("batch", 0),
        "client": None,
    }
    return StarletteRequest(scope, receive)


def _check_metadata(metadata: dict[str, str] | None) -> None:
    if metadata is None:
        return
    pairs, key_len, value_len = _METADATA_BOUNDS
    if len(metadata) > pairs:
        raise RequestError(f"`metadata` holds at most {pairs} pairs; got {len(metadata)}.", param="metadata")
    for k, v in metadata.items():
        if len(k) > key_len or len(v) > value_len:
            raise RequestError(
                f"`metadata` keys are at most {key_len} characters and values at most {value_len}; "
                f"key {k[:80]!r} is over.",
                param="metadata",
            )


class BatchMixin(FilesMixin):
    """The ``/v1/batches`` routes (mixed into :class:`~.serving.OpenAIServing`, whose ``_chat``,
    ``_completions`` and ``_responses`` handlers run the requests)."""

    _batches: dict[str, _BatchRun] | None = None
    _batch_slots: asyncio.Semaphore | None = None
    batch_concurrency: int = DEFAULT_BATCH_CONCURRENCY

    @property
    def batches(self) -> dict[str, _BatchRun]:
        """Batches by id, in creation order."""
        if self._batches is None:
            self._batches = {}
        return self._batches

    def _run_of(self, batch_id: str) -> _BatchRun:
        run = self.batches.get(batch_id)
        if run is None:
            raise RequestError(f"No such Batch object: {batch_id}", 404, param="batch_id")
        return run

    # ------------------------------------------------------------------ routes
    async def create_batch(self, request: Request) -> Response:
        """``POST /v1/batches``: check the body (400 naming ``endpoint``, ``completion_window``,
        ``metadata``, ``output_expires_after`` or ``input_file_id``; 404 for an unknown file) and
        start the batch; the batch object (status ``validating``). ``output_expires_after`` sets the
        ``expires_at`` of the output and error files (from their own creation)."""

        async def handle() -> Response:
            req: BatchCreateRequest = validate_request(BatchCreateRequest, await read_json_object(request))
            if req.endpoint not in BATCH_ENDPOINTS:
                raise RequestError(
                    f"`endpoint` must be one of {', '.join(BATCH_ENDPOINTS)}; got {req.endpoint!r}.",
                    param="endpoint",
                )
            if req.completion_window not in BATCH_COMPLETION_WINDOWS:
                raise RequestError(
                    f"`completion_window` must be '24h'; got {req.completion_window!r}.",
                    param="completion_window",
                )
            _check_metadata(req.metadata)
            file = self.file_store.get(req.input_file_id)
            if file is None:
                raise RequestError(f"No such File object: {req.input_file_id}", 404, param="input_file_id")
            if file.purpose != "batch":
                raise RequestError(
                    f"The input file's purpose must be 'batch'; {file.id} was uploaded for {file.purpose!r}.",
                    param="input_file_id",
                )
            created = now_s()
            batch = BatchObject(
                id=new_object_id("batch"),
                endpoint=req.endpoint,
                input_file_id=req.input_file_id,
                completion_window=req.completion_window,
                created_at=created,
                expires_at=created + _BATCH_WINDOW_S,
                metadata=req.metadata,
            )
            expiry = req.output_expires_after
            run = _BatchRun(batch, output_expires_s=None if expiry is None else expiry.seconds)
            self.batches[batch.id] = run
            snapshot = batch.model_dump()
            run.task = asyncio.get_running_loop().create_task(self._run_batch(run))
            return JSONResponse(snapshot)

        return await self._files_route(request, handle)

    async def retrieve_batch(self, request: Request, batch_id: str) -> Response:
        """``GET /v1/batches/{batch_id}``: the batch object, 404 for an unknown id."""

        async def handle() -> Response:
            return JSONResponse(self._run_of(batch_id).batch.model_dump())

        return await self._files_route(request, handle)

    async def cancel_batch(self, request: Request, batch_id: str) -> Response:
        """``POST /v1/batches/{batch_id}/cancel``: a batch that is validating or running becomes
        ``cancelling`` (then ``cancelled`` once its running requests are aborted and its files
        written); a cancelling or cancelled one is returned as is; a finished one is a 409."""

        async def handle() -> Response:
            run = self._run_of(batch_id)
            batch = run.batch
            if batch.status in ("validating", "in_progress"):
                self._cancel(run, CANCELLED_LINE_MSG)
            elif batch.status in TERMINAL_BATCH_STATUSES - {"cancelled"}:
                raise RequestError(f"Cannot cancel a batch with status {batch.status!r}.", 409)
            return JSONResponse(batch.model_dump())

        return await self._files_route(request, handle)

    @staticmethod
    def _cancel(run: _BatchRun, message: str) -> None:
        """Mark ``run`` cancelling and cancel its line tasks (their requests are aborted)."""
        run.cancelled, run.cancel_message = True, message
        batch = run.batch
        batch.status, batch.cancelling_at = "cancelling", now_s()
        for t in run.line_tasks:
            t.cancel()

    async def cancel_all_batches(
        self, message: str = SHUTDOWN_LINE_MSG, wait_s: float = BATCH_STOP_WAIT_S
    ) -> int:
        """Cancel every batch still validating or running, as ``POST /v1/batches/{id}/cancel``
        does, with ``message`` as the error of its unfinished requests (the server stops: a batch
        has up to 24 hours, a drain seconds, and batches are not kept across restarts). Returns
        once every cancelled batch has written its files and is ``cancelled``; a batch still
        validating (or writing) after ``wait_s`` seconds has its task stopped (``cancelled``,
        no files). Returns how many batches were cancelled."""
        runs = [r for r in self.batches.values() if r.batch.status in ("validating", "in_progress")]
        for run in runs:
            self._cancel(run, message)
        tasks = [r.task for r in self.batches.values() if r.task is not None and not r.task.done()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=wait_s)
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for run in self.batches.values():
            if run.batch.status == "cancelling":  # its task was stopped before it finished
                run.batch.status, run.batch.cancelled_at = "cancelled", now_s()
        if runs:
            logger.info("Cancelled %d running batch(es): %s", len(runs), message)
        return len(runs)

    async def close_batches(self, wait_s: float = BATCH_STOP_WAIT_S) -> None:
        """The server stops: cancel the batches still running (:meth:`cancel_all_batches`, which
        waits up to ``wait_s`` seconds for them), then close the file store (a temporary one is
        removed; ``--file-storage-path`` keeps its files)."""
        await self.cancel_all_batches(wait_s=wait_s)
        if self._file_store is not None:
            self._file_store.close()

    async def list_batches(self, request: Request) -> Response:
        """``GET /v1/batches``: a page of batches, newest first (``limit`` 1..100, default 20;
        ``after``: the last id of the previous page)."""

        async def handle() -> Response:
            limit = _query_int(request, "limit", 20, 1, MAX_BATCH_LIST_LIMIT)
            runs = list(reversed(self.batches.values()))
            after = request.query_params.get("after")
            if after is not None:
                ids = [r.batch.id for r in runs]
                if after in ids:
                    runs = runs[ids.index(after) + 1 :]
            data = [r.batch for r in runs[:limit]]
            page = BatchList(
                data=data,
                first_id=data[0].id if data else None,
                last_id=data[-1].id if data else None,
                has_more=len(runs) > limit,
            )
            return JSONResponse(page.model_dump())

        return await self._files_route(request, handle)

    # ------------------------------------------------------------------ running
    async def _run_batch(self, run: _BatchRun) -> None:
        batch = run.batch
        try:
            content = self.file_store.read(batch.input_file_id)
            if content is None:
                self._fail(batch, [BatchError(code="invalid_file", message="The input file was deleted.")])
                return
            # a 64 MiB file takes seconds to parse: in a worker thread, so other requests go on
            lines, errors = await run_blocking(parse_batch_input, content, batch.endpoint)
            if run.cancelled:  # cancelled while validating: nothing ran, whatever the file holds
                batch.status, batch.cancelled_at = "cancelled", now_s()
                return
            if errors:
                self._fail(batch, errors)
                return
            batch.status, batch.in_progress_at = "in_progress", now_s()
            batch.request_counts.total = len(lines)
            if self._batch_slots is None:
                self._batch_slots = asyncio.Semaphore(self.batch_concurrency)
            loop = asyncio.get_running_loop()
            run.line_tasks = [loop.create_task(self._run_line(batch, line)) for line in lines]
            results = await asyncio.gather(*run.line_tasks, return_exceptions=True)
            if not run.cancelled:
                batch.status, batch.finalizing_at = "finalizing", now_s()
            self._write_results(run, lines, results)
            if run.cancelled:
                batch.status, batch.cancelled_at = "cancelled", now_s()
            else:
                batch.status, batch.completed_at = "completed", now_s()
        except Exception as e:  # a fault of the server: the batch fails, the server goes on
            logger.exception("Batch %s failed", batch.id)
            self._fail(batch, [BatchError(code="server_error", message=f"The batch failed: {e}")])
        finally:
            # a finished task keeps its result (the whole answer of its request): the batch is kept
            # (listable) for as long as the server runs, its answers only in its files
            run.line_tasks = []

    @staticmethod
    def _fail(batch: BatchObject, errors: list[BatchError]) -> None:
        batch.status, batch.failed_at, batch.errors = "failed", now_s(), BatchErrors(data=errors)

    def _write_results(self, run: _BatchRun, lines: list[BatchLine], results: list[Any]) -> None:
        """The output and error files of a batch (input order); sets their ids and the counts."""
        batch = run.batch
        out, err = [], []
        for line, result in zip(lines, results, strict=True):
            if isinstance(result, tuple):
                entry, ok = result
            else:  # cancelled before or while running
                entry, ok = self._unfinished_line(line, result, run.cancel_message), False
            (out if ok else err).append(orjson.dumps(entry.model_dump(mode="json")))
        counts = batch.request_counts
        counts.completed, counts.failed = len(out), len(err)
        store = self.file_store
        written: list[str] = []
        try:  # unbounded: the answers are computed; an upload's size bound must not discard them
            for rows, kind in ((out, "output"), (err, "error")):
                if rows:
                    name = f"{batch.id}_{kind}.jsonl"
                    content = b"\n".join(rows) + b"\n"
                    obj = store.create(content, name, "batch_output", False, run.output_expires_s)
                    written.append(obj.id)
        except BaseException:  # a failed write leaves no file of this batch behind
            for file_id in written:
                store.delete(file_id)
            raise
        it = iter(written)
        batch.output_file_id = next(it) if out else None
        batch.error_file_id = next(it) if err else None

    @staticmethod
    def _unfinished_line(line: BatchLine, exc: BaseException, cancel_message: str) -> BatchOutputLine:
        if isinstance(exc, asyncio.CancelledError):
            error = {"code": "batch_cancelled", "message": cancel_message}
        else:
            error = {"code": "server_error", "message": f"The request failed: {exc}"}
        return BatchOutputLine(id=new_object_id("batch_req"), custom_id=line.custom_id, error=error)

    async def _run_line(self, batch: BatchObject, line: BatchLine) -> tuple[BatchOutputLine, bool]:
        """Run one request through its route's handler; ``(output line, answered 2xx)``."""
        assert self._batch_slots is not None
        async with self._batch_slots:
            request_id = f"req_{uuid.uuid4().hex}"
            if line.body.get("stream") is True:
                status, body = 400, error_body(STREAM_IN_BATCH_MSG, 400, param="stream")
            elif line.body.get("background") is True and batch.endpoint == "/v1/responses":
                status, body = 400, error_body(BACKGROUND_IN_BATCH_MSG, 400, param="background")
            else:
                handler = getattr(self, _BATCH_HANDLERS[batch.endpoint])
                try:
                    resp = await self._answer(
                        _internal_request(batch.endpoint, orjson.dumps(line.body)), handler
                    )
                    status, body = resp.status_code, orjson.loads(bytes(resp.body))
                except Exception as e:  # e.g. the engine died: this request fails, the batch goes on
                    logger.exception("Batch %s request %s failed", batch.id, line.custom_id)
                    status, body = 500, error_body(f"The request failed: {e}", 500)
        ok = 200 <= status < 300
        counts = batch.request_counts
        counts.completed += ok
        counts.failed += not ok
        if ok and isinstance(body, dict):
            batch.usage.add(body.get("usage"))
            if batch.model is None and isinstance(body.get("model"), str):
                batch.model = body["model"]
        response = BatchOutputResponse(status_code=status, request_id=request_id, body=body)
        return BatchOutputLine(id=new_object_id("batch_req"), custom_id=line.custom_id, response=response), ok
