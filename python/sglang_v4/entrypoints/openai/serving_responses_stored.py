"""The stored-response routes of OpenAI's Responses API: ``GET`` / ``DELETE /v1/responses/{id}``,
``GET /v1/responses/{id}/input_items`` and ``POST /v1/responses/{id}/cancel``, over the server's
in-memory store of responses (:mod:`.responses_store`, filled by ``POST /v1/responses``:
:mod:`.serving_responses`). The conversation a request continues (``previous_response_id``) and the
input items stored with its response are read here too. An unknown id is a 404 in OpenAI's error
shape (``param: "response_id"``); an ``include`` query value (``include`` / ``include[]``, the
openai client's spelling) that is not one of OpenAI's ``ResponseIncludable`` is a 400 naming
``include``, as ``POST /v1/responses`` answers it; cancelling a stored response, or streaming it (``GET ...?stream=true``, OpenAI's
resumable stream of a background response), is a 400, since no response runs in the background.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from sglang_v4.entrypoints.openai.protocol_responses import ResponseIncludable, ResponsesRequest
from sglang_v4.entrypoints.openai.responses_input_items import (
    check_duplicate_items,
    input_items_of,
    input_items_page,
)
from sglang_v4.entrypoints.openai.responses_store import ResponseStore
from sglang_v4.entrypoints.openai.serving_base import RequestError, error_response

__all__ = ["StoredResponsesMixin", "bad_include_query"]

_INCLUDABLE = frozenset(get_args(ResponseIncludable))


def bad_include_query(request: Request) -> Response | None:
    """The 400 (``param="include"``) for an ``include`` query value of a stored-response ``GET``
    that is not one of OpenAI's ``ResponseIncludable`` values (read under ``include`` and
    ``include[]``, the openai client's bracket spelling), else ``None``."""
    q = request.query_params
    for value in (*q.getlist("include"), *q.getlist("include[]")):
        if value not in _INCLUDABLE:
            allowed = ", ".join(sorted(_INCLUDABLE))
            return error_response(
                f"Invalid value for 'include': '{value}'. Supported values are: {allowed}.",
                400,
                param="include",
            )
    return None


class StoredResponsesMixin:
    """The stored-response routes (mixed into :class:`~.serving_responses.ResponsesMixin`); the
    store itself (:attr:`responses_store`) is shared with ``POST /v1/responses``."""

    check_auth: Callable[[Request], Response | None]

    _responses_store: ResponseStore | None = None

    @property
    def responses_store(self) -> ResponseStore:
        """The server's store of responses (created on first use)."""
        if self._responses_store is None:
            self._responses_store = ResponseStore()
        return self._responses_store

    def _history(self, req: ResponsesRequest) -> list[dict[str, Any]]:
        """The stored chat messages ``req`` continues (:meth:`_previous_messages`), after checking
        that its ``input`` repeats no item of that chain nor of itself
        (:func:`~.responses_input_items.check_duplicate_items`: a 400 naming ``input``)."""
        messages = self._previous_messages(req.previous_response_id)
        prev = self.responses_store.get(req.previous_response_id) if req.previous_response_id else None
        if prev is None:
            check_duplicate_items(req.input)
        else:
            check_duplicate_items(req.input, prev.input_items, prev.response.get("output") or [])
        return messages

    def _previous_messages(self, previous_response_id: str | None) -> list[dict[str, Any]]:
        """The stored chat messages of ``previous_response_id`` (``[]`` for None).

        Raises:
            RequestError: 400 (``param="previous_response_id"``) when it is not a response id at
                all (no ``resp_`` prefix: OpenAI's and SGLang's answer to a malformed id), 404 when
                it is one but no stored response has it.
        """
        if previous_response_id is None:
            return []
        if not previous_response_id.startswith("resp_"):
            raise RequestError(
                f"Invalid 'previous_response_id': '{previous_response_id}'. "
                "Expected an ID that begins with 'resp_'.",
                400,
                param="previous_response_id",
            )
        prev = self.responses_store.get(previous_response_id)
        if prev is None:
            raise RequestError(
                f"Previous response with id '{previous_response_id}' not found.",
                404,
                param="previous_response_id",
            )
        return prev.messages

    def _input_items(self, req: ResponsesRequest) -> list[dict[str, Any]]:
        """The input items stored with the response of ``req`` (its whole context: those of the
        previous response, that response's output, then ``req.input``)."""
        prev = self.responses_store.get(req.previous_response_id) if req.previous_response_id else None
        if prev is None:
            return input_items_of(req.input)
        return input_items_of(req.input, prev.input_items, prev.response.get("output") or [])

    def _stored(self, request: Request, response_id: str) -> Any:
        """The stored entry of ``response_id``, or the ``Response`` to answer instead: the auth
        check's refusal, else a 404 naming ``response_id`` when nothing is stored under it."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        entry = self.responses_store.get(response_id)
        if entry is None:
            return error_response(f"Response with id '{response_id}' not found.", 404, param="response_id")
        return entry

    async def retrieve_response(self, request: Request, response_id: str) -> Response:
        """``GET /v1/responses/{response_id}``: a stored response, else 404. ``stream=true`` (with
        ``starting_after``: OpenAI's resumption of a ``background`` response's event stream) is a
        400 naming ``stream``: this server runs no background response, so there is no stream
        to rejoin, and a JSON body would leave a client that reads events with none. An unknown
        ``include`` value is a 400 naming ``include`` (:func:`bad_include_query`)."""
        entry = self._stored(request, response_id)
        if isinstance(entry, Response):
            return entry
        bad = bad_include_query(request)
        if bad is not None:
            return bad
        if request.query_params.get("stream", "").lower() in ("true", "1"):
            return error_response(
                "Cannot stream a synchronous response: only responses created with background=true "
                "can be streamed by GET, and this server runs none; GET it without stream (it is "
                "finished), or set stream on its POST.",
                400,
                param="stream",
            )
        return JSONResponse(entry.response)

    async def list_input_items(self, request: Request, response_id: str) -> Response:
        """``GET /v1/responses/{response_id}/input_items``: a page of the stored response's input
        items (:func:`~.responses_input_items.input_items_page`), else 404; a bad ``order`` /
        ``limit`` / ``after`` / ``include`` (:func:`bad_include_query`) is a 400 naming it."""
        entry = self._stored(request, response_id)
        if isinstance(entry, Response):
            return entry
        bad = bad_include_query(request)
        if bad is not None:
            return bad
        q = request.query_params
        try:
            page = input_items_page(entry.input_items, q.get("order"), q.get("limit"), q.get("after"))
        except RequestError as e:
            return error_response(e.message, e.status, e.err_type, e.param)
        return JSONResponse(page)

    async def delete_response(self, request: Request, response_id: str) -> Response:
        """``DELETE /v1/responses/{response_id}``: drop a stored response, else 404."""
        denied = self.check_auth(request)
        if denied is not None:
            return denied
        if not self.responses_store.delete(response_id):
            return error_response(f"Response with id '{response_id}' not found.", 404, param="response_id")
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})

    async def cancel_response(self, request: Request, response_id: str) -> Response:
        """``POST /v1/responses/{response_id}/cancel``: OpenAI cancels only responses created with
        ``background: true``, which this server does not run (every response is finished when its
        ``POST`` returns), so a stored response is a 400 that says so and leaves it unchanged; an
        unknown id is a 404, as on ``GET``."""
        entry = self._stored(request, response_id)
        if isinstance(entry, Response):
            return entry
        return error_response(
            "Cannot cancel a synchronous response: only responses created with background=true "
            "can be cancelled, and this server runs none.",
            400,
            param="response_id",
        )
