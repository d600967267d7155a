"""SSE keep-alive comments on silent streams (vLLM's ``--sse-keep-alive-interval``).

A streamed response can send nothing for a long time: while its request is queued or its prompt
is prefilled, or while the model writes output the route withholds (a tool call's markup). A
proxy with an idle read timeout (NGINX ``proxy_read_timeout``, a load balancer's idle timeout, a
tunnel) then closes the connection. With an interval ``> 0`` seconds (the server's
``sse_keep_alive_interval``, on the app as ``state.sse_keep_alive_interval``; 0, the default,
turns this off as in vLLM), every streaming route sends the SSE comment frame ``: keep-alive``
whenever its body has sent nothing for that long (Anthropic's ``/v1/messages`` sends its own
``ping`` event instead: :mod:`~sglang_v4.entrypoints.anthropic.serving_messages`). A line that
starts with ``:`` is a comment in the SSE format (WHATWG HTML, "Server-sent events"): the
``openai`` and ``anthropic`` clients' decoders and browsers' ``EventSource`` skip it.

The routes read a request's first output before they answer, so that an input error is a plain
HTTP error rather than a broken stream. With the keep-alive on they wait for it at most one
interval (:func:`first_output_within`): past that the response starts (status 200) and the first
output is awaited inside the stream (:func:`resolve_first`), where an error becomes the route's
error event, as vLLM's streams report a failure after their start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio

logger = logging.getLogger(__name__)

#: the SSE comment frame sent on a silent stream (vLLM's text)
SSE_KEEP_ALIVE_COMMENT = b": keep-alive\n\n"


def app_keep_alive_interval(app: Any) -> float:
    """The keep-alive interval in seconds of an ASGI ``app`` (its ``state.sse_keep_alive_interval``;
    0 when unset or ``app`` is ``None``)."""
    return float(getattr(getattr(app, "state", None), "sse_keep_alive_interval", 0) or 0)


def request_keep_alive_interval(request: Any) -> float:
    """:func:`app_keep_alive_interval` of the app serving ``request`` (a Starlette ``Request``;
    0 for ``None``, e.g. a batch job's request)."""
    scope = getattr(request, "scope", None)
    return app_keep_alive_interval(scope.get("app") if isinstance(scope, dict) else None)


class PendingFirst:
    """A request's first output that did not come within the keep-alive interval: ``task`` reads
    it (``gen.__anext__()``); :func:`resolve_first` awaits it inside the stream."""

    def __init__(self, task: asyncio.Future[Any]) -> None:
        self.task = task


async def first_output_within(gen: AsyncIterator[Any], wait_s: float) -> Any:
    """The first output of ``gen`` if it comes within ``wait_s`` seconds (``<= 0``: however long it
    takes), else a :class:`PendingFirst` that still reads it.

    Raises:
        What ``gen.__anext__()`` raises within that time (``StopAsyncIteration``, the tokenizer
        manager's ``ValueError``), unchanged.
    """
    if wait_s <= 0:
        return await gen.__anext__()
    task = asyncio.ensure_future(gen.__anext__())
    try:
        done, _ = await asyncio.wait({task}, timeout=wait_s)
    except BaseException:  # cancelled while waiting: the read must not outlive the request
        task.cancel()
        raise
    if done:
        return task.result()
    return PendingFirst(task)


async def resolve_first(first: Any) -> Any:
    """``first`` itself, or the output a :class:`PendingFirst` reads. Cancelled while it waits (the
    client gone), the read is cancelled and awaited first, so the generator it advances is idle
    when the route closes it.

    Raises:
        RuntimeError: the generation ended without any output.
        What the tokenizer manager raises for the request (``ValueError``), unchanged.
    """
    if not isinstance(first, PendingFirst):
        return first
    try:
        return await asyncio.shield(first.task)
    except StopAsyncIteration:
        raise RuntimeError("The request produced no output.") from None
    except asyncio.CancelledError:
        first.task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({first.task})
        raise


async def cancel_first(first: Any) -> None:
    """Cancel and await the read of a :class:`PendingFirst` that is still waiting (a stream that
    sent events before its first output and closes before it came), so the generator it advances
    is idle when the route closes it; anything else (an output already read) is left alone."""
    if not isinstance(first, PendingFirst):
        return
    task = first.task
    if not task.done():
        task.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait({task})
    if not task.cancelled():
        task.exception()  # read, so a failure no one awaited is not logged as never retrieved


async def close_generation(gen: AsyncIterator[Any], first: Any) -> None:
    """End a streamed request's generation: :func:`cancel_first` on ``first``, then close ``gen``
    (the tokenizer manager's generator, whose ``finally`` aborts an unfinished request, so it
    gives back its slot and KV pages at once). Idempotent: the stream's ``finally`` and the
    response's close (:class:`~sglang_v4.entrypoints.sse_response.ClosingStreamingResponse`'s
    ``on_close``, for a body that never started or was closed before its ``try``) may both call it.
    """
    await cancel_first(first)
    close: Any = getattr(gen, "aclose", None)
    if close is not None:
        await close()


async def with_keep_alive(
    body: AsyncIterator[Any], interval: float, frame: bytes = SSE_KEEP_ALIVE_COMMENT
) -> AsyncIterator[Any]:
    """The chunks of ``body``, with ``frame`` (:data:`SSE_KEEP_ALIVE_COMMENT` unless the route has
    its own, e.g. Anthropic's ``ping`` event) sent whenever no chunk came for ``interval`` seconds
    (> 0). One task advances ``body`` at a time and a keep-alive does not cancel it; closing this generator (client gone, response cancelled) cancels the pending step
    and closes ``body``, so its ``finally`` blocks (the request's abort) run at once."""
    it = body.__aiter__()
    pending: asyncio.Future[Any] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield frame
                continue
            step, pending = pending, None
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        with anyio.CancelScope(shield=True):
            if pending is not None:
                pending.cancel()
                await asyncio.wait({pending})
                if not pending.cancelled() and pending.exception() is not None:
                    logger.debug("Stream body failed while closing.", exc_info=pending.exception())
            close: Any = getattr(body, "aclose", None)
            if close is not None:
                await close()
