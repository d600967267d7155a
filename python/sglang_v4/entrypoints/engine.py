"""Offline ``Engine``: SGLang's ``Engine`` API without HTTP.

``Engine`` starts the same processes as the server (:func:`~sglang_v4.entrypoints.launcher.
launch_subprocesses`), runs the ``TokenizerManager`` on a private event loop in a background
thread and exposes SGLang's ``Engine`` API (``generate``, ``async_generate``, ``score`` and
``async_score`` (:mod:`~sglang_v4.entrypoints.engine_score_mixin`), ``flush_cache``,
``get_server_info``, ``get_model_info``, ``update_weights_from_disk``, ``get_weights_by_name``, ``start_profile``,
``stop_profile`` (:mod:`~sglang_v4.entrypoints.engine_control_mixin`), ``shutdown``, context
manager; SGLang's other methods as :mod:`~sglang_v4.entrypoints.engine_sglang_methods` answers
them). The launcher's names are re-exported here.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import dataclasses
import functools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

from sglang_v4.entrypoints.engine_control_mixin import EngineControlMixin
from sglang_v4.entrypoints.engine_loop import (
    END_OF_STREAM,
    StreamSteps,
    close_streams_and_tm,
    only_output,
    rest_of_stream,
    run_loop_then_close,
)
from sglang_v4.entrypoints.engine_python_values import plain_python_values
from sglang_v4.entrypoints.engine_score_mixin import EngineScoreMixin
from sglang_v4.entrypoints.engine_sglang_methods import EngineSGLangMethodsMixin
from sglang_v4.entrypoints.incremental_stream import IncrementalStreamSlicer
from sglang_v4.entrypoints.launcher import (
    CHILD_CHECK_INTERVAL_S,
    MAKE_CHECKPOINT_HINT,
    SCHEDULER_READY_TIMEOUT_S,
    Subprocesses,
    check_model_dir,
    check_page_size,
    launch_subprocesses,
    resolve_model_path,
)
from sglang_v4.entrypoints.server_info import build_server_info
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import (
    apply_legacy_sglang_env,
    warn_ignored_sglang_args,
    warn_unread_sglang_env,
)

__all__ = [
    "MAKE_CHECKPOINT_HINT",
    "SCHEDULER_READY_TIMEOUT_S",
    "SHUT_DOWN_MESSAGE",
    "Engine",
    "Subprocesses",
    "build_server_info",
    "check_model_dir",
    "check_page_size",
    "launch_subprocesses",
    "resolve_model_path",
]

logger = logging.getLogger(__name__)


#: What a call on an Engine after its ``shutdown()`` raises (a ``RuntimeError``).
SHUT_DOWN_MESSAGE = "Engine is shut down; create a new Engine to generate."

#: SGLang ``ServerArgs`` field names that sglang-v4 spells differently (its ``launch_server``
#: accepts both flags): SGLang name -> :class:`ServerArgs` field.
_SERVER_ARG_ALIASES = {"skip_server_warmup": "skip_warmup"}

#: SGLang ``Engine.generate`` keywords with no ``/generate`` counterpart here: accepted when unset
#: (None / False / 0, or lists of those), a ``ValueError`` otherwise; ``external_trace_header`` is ignored.
_ENGINE_ONLY_UNSET = frozenset(
    {
        "mm_hashes",
        "mm_content_hashes",
        "routed_experts_start_len",
        "disagg_prefill_dp_rank",
        "kv_hints",
    }
)

#: SGLang ``Engine.generate`` keywords passed to ``/generate``'s field of the same name.
_ENGINE_KEYWORD_FIELDS = frozenset({"require_reasoning", "extra_key", "cache_salt"})

#: Seconds a stream closed early waits for its request's abort to be sent.
_ACLOSE_TIMEOUT_S = 5.0

#: Seconds ``shutdown()`` waits for the open streams to be read to their ends (see
#: :meth:`StreamSteps.drain`); a stream still running then fails with the shut-down error.
_DRAIN_TIMEOUT_S = 3.0

#: Seconds a stream refused by a ``shutdown()`` under way (another thread's) waits for it to
#: finish reading the open streams before it hands out what its own stream had left.
_STOPPED_WAIT_S = 30.0


async def _settled(coro: Any) -> tuple[bool, Any]:
    """``(True, result)`` or ``(False, exception)`` of ``coro``: the task running it ends without an
    exception (cancellation still propagates), so nothing is left for asyncio to report.

    :meth:`Engine.shutdown` fails the callers' futures at once; a call still running then ends on
    the stopping loop after its future is done. Had its task ended in an exception, asyncio would
    log "Task exception was never retrieved" when the task is garbage-collected, formatting a
    traceback inside the collector, which can run in the middle of another parse of Python
    source (CPython 3.11 before 3.11.8 then fails every later ``ast.parse`` of the process with
    "AST constructor recursion depth mismatch")."""
    try:
        return True, await coro
    except Exception as e:  # noqa: BLE001 - handed to the caller's future
        return False, e


def _shutdown_at_exit(ref: weakref.ReferenceType[Engine]) -> None:
    engine = ref()
    if engine is not None:
        engine.shutdown()


class Engine(EngineControlMixin, EngineScoreMixin, EngineSGLangMethodsMixin):
    """SGLang-style offline engine: the same processes as the server, without HTTP.

    ``Engine(model_path=None, **kwargs)``: ``kwargs`` are :class:`ServerArgs` fields
    (``page_size=256``, ``max_total_tokens=...``, ``disable_radix_cache=True``, ...);
    ``model_path=None`` uses the embedded default model. SGLang's ``skip_server_warmup`` is
    accepted for ``skip_warmup``; SGLang's other server keywords (``attention_backend="fa3"``,
    ``enable_lora=True``, ...) behave as their CLI flags (:mod:`sglang_v4.server_args_compat`:
    ignored with a start-up warning, or refused). ``skip_tokenizer_init=True`` (SGLang's) loads no tokenizer:
    prompts must be ``input_ids`` and outputs have no ``"text"`` (see :meth:`generate`).

    Raises:
        ValueError: an unknown keyword or a bad value (the message names the field).
        RuntimeError: the scheduler failed to start.
    """

    def __init__(self, model_path: str | None = None, **kwargs: Any) -> None:
        for sglang_name, name in _SERVER_ARG_ALIASES.items():
            if sglang_name in kwargs:
                value = kwargs.pop(sglang_name)
                if name in kwargs and kwargs[name] != value:
                    raise ValueError(f"{sglang_name} and {name} are the same option; give one of them")
                kwargs[name] = value
        fields = {f.name for f in dataclasses.fields(ServerArgs)}
        unknown = sorted(set(kwargs) - fields)
        if unknown:
            raise ValueError(f"Unknown Engine argument(s): {', '.join(unknown)}")
        self.server_args = ServerArgs(model_path=model_path, **kwargs)
        warn_ignored_sglang_args(self.server_args, logger)
        apply_legacy_sglang_env(log=logger)
        warn_unread_sglang_env(log=logger)
        if self.server_args.dp_size > 1 or self.server_args.node_rank > 0:
            raise ValueError(
                "dp_size / node_rank: an Engine is one server on node 0 (run --dp-size replicas and "
                "worker nodes with python -m sglang_v4.launch_server)"
            )
        from sglang_v4.entrypoints import prewarm

        # the backend processes import while the model directory is checked (prewarm.py); the
        # tokenizer the directory check loaded goes to the tokenizer manager (loaded once)
        prewarm.start_server_children()
        try:
            tokenizer = resolve_model_path(self.server_args)
        except BaseException:
            prewarm.discard_all()
            raise
        self._procs = launch_subprocesses(self.server_args)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=run_loop_then_close, args=(self._loop,), name="sglang_v4-engine-loop", daemon=True
        )
        self._thread.start()
        # _submit() checks _closed and records its call's future in _inflight under this lock,
        # and shutdown() sets _closed under it: a call either is refused or is among the calls
        # shutdown() fails (see _submit)
        self._lock = threading.Lock()
        self._closed = False
        # futures of calls running on the loop; shutdown() fails those still pending
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        # the open streams, read to their ends by shutdown() (see StreamSteps.drain)
        self._streams: weakref.WeakSet[StreamSteps] = weakref.WeakSet()
        # done when shutdown() has drained the streams and stopped the loop (see _after_shutdown)
        self._stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stop_watch = threading.Event()
        # A script that ends without shutdown(): close the engine at exit, before the child
        # processes are killed (atexit runs handlers last-in first-out) and before open streams
        # are finalised (their cleanup would wait on the loop thread, frozen at finalisation).
        self._atexit = functools.partial(_shutdown_at_exit, weakref.ref(self))
        atexit.register(self._atexit)
        try:
            self.tokenizer_manager = self._run(self._create_tokenizer_manager(tokenizer))
        except Exception:
            self.shutdown()
            raise
        self._watchdog = threading.Thread(
            target=self._watch_children, name="sglang_v4-engine-watchdog", daemon=True
        )
        self._watchdog.start()

    async def _create_tokenizer_manager(self, tokenizer: Any = None) -> Any:
        from sglang_v4.managers.tokenizer_manager import TokenizerManager

        tm = TokenizerManager(self.server_args, self._procs.port_args, self._procs.scheduler_info, tokenizer)
        tm.start()
        tm.server_status = "Up"
        return tm

    def _watch_children(self) -> None:
        while not self._stop_watch.wait(CHILD_CHECK_INTERVAL_S):
            dead = self._procs.dead_process()
            if dead is not None and not self._closed:
                logger.error("Engine backend died: %s", dead)
                self._loop.call_soon_threadsafe(self.tokenizer_manager.on_crash, dead)
                return

    def _check_open(self) -> None:
        """Raises RuntimeError (:data:`SHUT_DOWN_MESSAGE`) after :meth:`shutdown`."""
        if self._closed:
            raise RuntimeError(SHUT_DOWN_MESSAGE)

    def _submit(self, coro: Any) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on the engine loop; the future fails with RuntimeError at shutdown.

        The "shut down?" check, the future's entry in the calls :meth:`shutdown` fails and the
        scheduling on the loop happen under one lock that :meth:`shutdown` takes to mark the engine
        closed: a call that passed the check before shutdown() began is failed by it, even when its
        coroutine was queued on the loop too late to run (a stopped loop runs nothing). Checked
        without the lock, a call that passed the check just before shutdown() and recorded its
        future just after shutdown() had failed the others waited forever.

        Raises:
            RuntimeError: (:data:`SHUT_DOWN_MESSAGE`) the engine is shut down (``coro`` is closed).
        """
        settled = _settled(coro)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                settled.close()
                coro.close()
                raise RuntimeError(SHUT_DOWN_MESSAGE)
            self._inflight.add(fut)
            inner = asyncio.run_coroutine_threadsafe(settled, self._loop)

        def settle(done: concurrent.futures.Future[tuple[bool, Any]]) -> None:
            if fut.done():  # failed by shutdown() or cancelled by the caller
                return
            if done.cancelled():
                if self._closed:  # cancelled by the loop's clean-up at shutdown
                    with contextlib.suppress(concurrent.futures.InvalidStateError):
                        fut.set_exception(RuntimeError(SHUT_DOWN_MESSAGE))
                else:
                    fut.cancel()
                return
            try:
                ok, value = done.result()
            except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt / SystemExit on the loop
                ok, value = False, e
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # shutdown() got there first
                fut.set_result(value) if ok else fut.set_exception(value)

        inner.add_done_callback(settle)
        fut.add_done_callback(lambda f: inner.cancel() if f.cancelled() else None)
        fut.add_done_callback(self._inflight.discard)
        return fut

    def _run(self, coro: Any) -> Any:
        """Run ``coro`` on the engine loop and wait for its result. A wait interrupted by an
        exception of the caller's own (Ctrl-C's ``KeyboardInterrupt`` from a signal handler)
        cancels ``coro`` too, so a request it ran is aborted, then re-raises that exception."""
        fut = self._submit(coro)
        try:
            return fut.result()
        except BaseException:
            fut.cancel()  # no effect once the call has ended
            raise

    @staticmethod
    def _make_obj(args: dict[str, Any], sglang_kwargs: dict[str, Any]) -> GenerateReqInput:
        """Build the request from ``generate``'s arguments through the HTTP server's checks.

        ``args`` maps this method's parameters (``prompt`` is ``/generate``'s ``text``) and
        ``sglang_kwargs`` SGLang's other ``Engine.generate`` keywords; both go through
        :func:`~sglang_v4.entrypoints.native_api.parse_generate_body`, so a wrong type or an
        unsupported feature (``image_data``, ``lora_path``, ...) is the same ``ValueError`` that
        ``/generate`` answers with a 400.
        """
        from sglang_v4.entrypoints.native_api import SGLANG_ONLY_FIELDS, is_unset, parse_generate_body

        unexpected = sorted(
            set(sglang_kwargs)
            - SGLANG_ONLY_FIELDS
            - _ENGINE_ONLY_UNSET
            - _ENGINE_KEYWORD_FIELDS
            - {"external_trace_header"}
        )
        if unexpected:
            raise TypeError(f"Engine.generate() got unexpected keyword argument(s): {', '.join(unexpected)}")
        for name in sorted(_ENGINE_ONLY_UNSET & set(sglang_kwargs)):
            value = sglang_kwargs.pop(name)
            if not (is_unset(value) or value == 0):
                raise ValueError(f"{name} is not supported by sglang-v4.")
        sglang_kwargs.pop("external_trace_header", None)
        body = {("text" if k == "prompt" else k): v for k, v in args.items()}
        # numpy / torch token ids and numbers stand for Python ones (engine_python_values.py)
        return parse_generate_body(plain_python_values({**sglang_kwargs, **body}))

    def generate(
        self,
        prompt: str | list[str] | None = None,
        sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
        input_ids: list[int] | list[list[int]] | None = None,
        image_data: Any = None,
        *,
        return_logprob: bool | list[bool] = False,
        logprob_start_len: int | list[int] | None = -1,
        top_logprobs_num: int | list[int] | None = 0,
        token_ids_logprob: list[int] | list[list[int] | None] | None = None,
        lora_path: Any = None,
        custom_logit_processor: Any = None,
        return_hidden_states: bool = False,
        return_text_in_logprobs: bool = False,
        stream: bool = False,
        rid: str | list[str] | None = None,
        priority: int | list[int] | None = None,
        **sglang_kwargs: Any,
    ) -> dict[str, Any] | list[dict[str, Any]] | Iterator[dict[str, Any]]:
        """Generate for one prompt (a dict) or a batch / ``n > 1`` (a list of dicts).

        The parameters are SGLang's ``Engine.generate`` keywords (the first four also by
        position, in SGLang's order). ``sampling_params`` is one dict for every prompt or one per
        prompt. SGLang features this runtime does not implement (``image_data``, ``audio_data``,
        ``video_data``, ``lora_path``, ``custom_logit_processor``, ``return_hidden_states``,
        ``bootstrap_*``, ``session_params``, ...)
        are accepted when left unset and raise ``ValueError`` naming the field otherwise;
        ``data_parallel_rank`` / ``routed_dp_rank`` may be ``0`` (the Engine is one rank) and raise
        ``ValueError`` for any other rank, as SGLang's does for a rank outside ``[0, dp_size)``;
        ``extra_key`` / ``cache_salt`` (SGLang's and vLLM's) set the request's prefix-cache
        namespace; ``session_id`` and the other fields ``/generate`` ignores are ignored.

        Each dict: ``{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
        "completion_tokens", "cached_tokens", "e2e_latency", "input_token_logprobs",
        "output_token_logprobs", ...}}``; logprob entries are ``[logprob, token_id, text|None]``.
        ``token_ids_logprob`` (with ``return_logprob``; one list, or ``None``, per prompt in a batch) adds
        ``input_token_ids_logprobs`` / ``output_token_ids_logprobs``: per position such an entry
        per asked id, in its order (``None`` for the first prompt position).
        ``input_ids`` and numbers may be numpy / torch arrays, tensors or scalars (their Python
        values are used). ``stream=True`` returns an iterator of cumulative chunks. With ``skip_tokenizer_init=True``
        the dicts are ``{"output_ids", "meta_info"}`` (no ``"text"``; logprob texts ``None``), and
        a ``prompt``, stop strings (``stop`` / ``stop_regex``) or a grammar raise ``ValueError``.

        Raises:
            ValueError: bad input (same checks and messages as HTTP 400), naming the field.
            TypeError: a keyword that is not one of SGLang's ``Engine.generate`` parameters.
            BackendDiedError: (a ``RuntimeError``) the scheduler or detokenizer process died, before
                or while this request ran (the message names the process and its exit code); also
                raised by a stream's iterator, and by every later call.
        """
        self._check_open()
        args = dict(locals())
        del args["self"], args["sglang_kwargs"]
        obj = self._make_obj(args, sglang_kwargs)
        agen = self.tokenizer_manager.generate_request(obj)
        if stream:
            return self._sync_iter(agen)
        return self._run(only_output(agen))

    def _slicer(self) -> IncrementalStreamSlicer | None:
        """``--incremental-streaming-output``: a slicer for one stream's chunks, else ``None``."""
        return IncrementalStreamSlicer() if self.server_args.incremental_streaming_output else None

    def _open_stream(self, agen: Any) -> StreamSteps:
        """A :class:`StreamSteps` for ``agen``, among the streams :meth:`shutdown` drains."""
        steps = StreamSteps(agen, SHUT_DOWN_MESSAGE)
        self._streams.add(steps)
        return steps

    def _sync_iter(self, agen: Any) -> Iterator[dict[str, Any]]:
        slicer = self._slicer()
        steps = self._open_stream(agen)
        try:
            while True:
                refused = False
                try:
                    out = self._run(steps.next())
                except StopAsyncIteration:
                    return
                except RuntimeError:
                    if not self._closed:
                        raise
                    refused = True
                if refused:  # outside the except block: no misleading exception context
                    with contextlib.suppress(
                        concurrent.futures.TimeoutError, concurrent.futures.CancelledError
                    ):
                        self._stopped.result(timeout=_STOPPED_WAIT_S)
                    out = rest_of_stream(steps)
                    if out is END_OF_STREAM:
                        return
                yield slicer.slice(out) if slicer is not None else out
        finally:
            if not self._closed:
                try:
                    self._submit(steps.close()).result(timeout=_ACLOSE_TIMEOUT_S)
                except (RuntimeError, concurrent.futures.TimeoutError):
                    pass  # shut down meanwhile, or the loop no longer runs: nothing to free

    async def async_generate(
        self,
        prompt: str | list[str] | None = None,
        sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
        input_ids: list[int] | list[list[int]] | None = None,
        image_data: Any = None,
        *,
        return_logprob: bool | list[bool] = False,
        logprob_start_len: int | list[int] | None = -1,
        top_logprobs_num: int | list[int] | None = 0,
        token_ids_logprob: list[int] | list[list[int] | None] | None = None,
        lora_path: Any = None,
        custom_logit_processor: Any = None,
        return_hidden_states: bool = False,
        return_text_in_logprobs: bool = False,
        stream: bool = False,
        rid: str | list[str] | None = None,
        priority: int | list[int] | None = None,
        **sglang_kwargs: Any,
    ) -> Any:
        """``generate`` for asyncio callers (any event loop), same parameters and errors. With
        ``stream=True`` returns an async iterator of chunks; otherwise the result of
        :meth:`generate`."""
        self._check_open()
        args = dict(locals())
        del args["self"], args["sglang_kwargs"]
        obj = self._make_obj(args, sglang_kwargs)
        agen = self.tokenizer_manager.generate_request(obj)
        if stream:
            return self._async_iter(agen)
        return await asyncio.wrap_future(self._submit(only_output(agen)))

    async def _async_iter(self, agen: Any) -> AsyncIterator[dict[str, Any]]:
        slicer = self._slicer()
        steps = self._open_stream(agen)
        try:
            while True:
                refused = False
                try:
                    out = await asyncio.wrap_future(self._submit(steps.next()))
                except StopAsyncIteration:
                    return
                except RuntimeError:
                    if not self._closed:
                        raise
                    refused = True
                if refused:  # outside the except block: no misleading exception context
                    # shielded: a wait cut short must not cancel the future every caller shares
                    stopped = asyncio.shield(asyncio.wrap_future(self._stopped))
                    with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                        await asyncio.wait_for(stopped, _STOPPED_WAIT_S)
                    out = rest_of_stream(steps)
                    if out is END_OF_STREAM:
                        return
                yield slicer.slice(out) if slicer is not None else out
        finally:
            if not self._closed:
                with contextlib.suppress(RuntimeError):  # shut down meanwhile: nothing to free
                    await asyncio.wrap_future(self._submit(steps.close()))

    def shutdown(self) -> None:
        """Stop and close the background loop (its thread ends), stop the watchdog thread and
        kill the child processes (idempotent).

        Requests still running (from other threads or event loops) fail with RuntimeError
        (:data:`SHUT_DOWN_MESSAGE`), as does every later call (``generate``,
        ``async_generate``, ``flush_cache``, ``get_server_info``). A stream whose request had
        finished before the shutdown is not failed: it hands out the chunks its caller had not
        read yet, then ends normally.
        """
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the loop started: nothing to stop
            return
        with lock:  # no call passes _submit's check from now on (see _submit)
            if self._closed:
                return
            self._closed = True
        try:
            self._stop()
        finally:
            stopped = getattr(self, "_stopped", None)
            if stopped is not None:
                with contextlib.suppress(concurrent.futures.InvalidStateError):
                    stopped.set_result(None)

    def _stop(self) -> None:
        """:meth:`shutdown` once the engine is marked closed: read the open streams to their
        ends and close the tokenizer manager (on the loop), stop and close the loop (its thread
        ends), fail the calls still pending, stop the watchdog and kill the child processes."""
        atexit.unregister(getattr(self, "_atexit", None))
        stop_watch = getattr(self, "_stop_watch", None)
        if stop_watch is not None:
            stop_watch.set()
        tm = getattr(self, "tokenizer_manager", None)
        if tm is not None:
            streams = list(getattr(self, "_streams", ()))
            try:
                asyncio.run_coroutine_threadsafe(
                    close_streams_and_tm(tm, streams, SHUT_DOWN_MESSAGE, _DRAIN_TIMEOUT_S), self._loop
                ).result(timeout=_DRAIN_TIMEOUT_S + 5)
            except Exception:  # noqa: BLE001 - best effort
                pass
            del streams
        with contextlib.suppress(RuntimeError):  # the loop thread ended (and closed it) already
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        for fut in list(getattr(self, "_inflight", ())):
            if not fut.done():
                try:
                    fut.set_exception(RuntimeError(SHUT_DOWN_MESSAGE))
                except concurrent.futures.InvalidStateError:
                    pass
        self._procs.shutdown()
        watchdog = getattr(self, "_watchdog", None)
        if watchdog is not None and watchdog is not threading.current_thread():
            watchdog.join(timeout=5)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.shutdown()
        except Exception:  # noqa: BLE001
            pass
