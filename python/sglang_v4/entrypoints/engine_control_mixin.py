"""The ``Engine``'s runtime-control methods: SGLang's ``Engine`` methods that answer as the
server's control and info routes do (``flush_cache``, ``get_server_info``, ``get_model_info``,
``update_weights_from_disk``, ``get_weights_by_name``, ``start_profile``, ``stop_profile``), with
the same body parsers (:mod:`~sglang_v4.entrypoints.control_api`) and answer builders
(:mod:`~sglang_v4.entrypoints.server_info`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from sglang_v4.entrypoints.server_info import build_model_info, build_server_info, read_model_config
from sglang_v4.managers.control_struct import FlushCacheReqOutput
from sglang_v4.server_args import ServerArgs

__all__ = ["EngineControlMixin"]


class EngineControlMixin:
    """The control methods of :class:`~sglang_v4.entrypoints.engine.Engine` (whose attributes
    below they use)."""

    server_args: ServerArgs
    tokenizer_manager: Any
    _procs: Any
    _check_open: Callable[[], None]
    _run: Callable[[Coroutine[Any, Any, Any]], Any]

    def flush_cache(self) -> FlushCacheReqOutput:
        """Flush the radix cache, as SGLang's ``Engine.flush_cache()``: a
        :class:`~sglang_v4.managers.control_struct.FlushCacheReqOutput` with ``.success`` (False
        when requests hold KV: nothing flushed) and ``.message``; its truth value is ``.success``."""
        self._check_open()
        return self._run(self.tokenizer_manager.flush_cache())

    def get_server_info(self) -> dict[str, Any]:
        """Server args + scheduler limits + live ``Scheduler.get_server_info()`` (kv_pool, ...),
        ``startup_time`` and ``version``: the same dict as ``/get_server_info`` (:func:`build_server_info`)."""
        self._check_open()
        return self._run(
            build_server_info(self.server_args, self._procs.scheduler_info, self.tokenizer_manager)
        )

    def get_model_info(self) -> dict[str, Any]:
        """What the engine serves: the same dict as ``/get_model_info``
        (:func:`~sglang_v4.entrypoints.server_info.build_model_info`: ``model_path``,
        ``served_model_name``, ``is_generation``, ``weight_version``, ``context_length``, ...)."""
        self._check_open()
        sa = self.server_args
        hf_config = {**read_model_config(sa.model_path or ""), **sa.model_override_args()}
        tm = self.tokenizer_manager
        return build_model_info(sa, hf_config, tm.context_len, tm.vocab_size)

    def update_weights_from_disk(
        self, model_path: str, load_format: str | None = None, **kwargs: Any
    ) -> tuple[bool, str, int]:
        """Reload the weights from the checkpoint directory ``model_path`` (same architecture),
        in place, and flush the radix cache, as ``POST /update_weights_from_disk`` (SGLang's
        ``Engine.update_weights_from_disk``; its other fields, e.g. ``abort_all_requests`` and
        ``weight_version``, as keywords). Running requests finish first.

        Returns:
            ``(success, message, num_paused_requests)``: ``success`` False with the reason when the
            config or a tensor does not match the served model (the weights are unchanged).

        Raises:
            ValueError: a bad field (no directory, an unsupported ``load_format``, ...), named.
        """
        from sglang_v4.entrypoints.control_api import parse_update_weights_body

        self._check_open()
        body = parse_update_weights_body({"model_path": model_path, "load_format": load_format, **kwargs})
        out = self._run(self.tokenizer_manager.update_weights_from_disk(**body))
        return out.success, out.message, out.num_paused_requests

    def get_weights_by_name(self, name: str, truncate_size: int = 100) -> list[Any]:
        """The first ``truncate_size`` rows of parameter ``name`` (its Hugging Face checkpoint
        name) as float32 lists, as ``/get_weights_by_name``.

        Raises:
            ValueError: no such parameter (or one split over TP ranks), or a bad ``truncate_size``.
        """
        from sglang_v4.entrypoints.control_api import parse_get_weights_body

        self._check_open()
        name, truncate_size = parse_get_weights_body({"name": name, "truncate_size": truncate_size})
        return self._run(self.tokenizer_manager.get_weights_by_name(name, truncate_size))

    def start_profile(self, **kwargs: Any) -> None:
        """Start the torch profiler around scheduler steps, as ``/start_profile`` (keywords: its
        body's fields, ``output_dir``, ``num_steps``, ``activities``, ...).

        Raises:
            ValueError: a bad field, or a profile already running.
        """
        from sglang_v4.entrypoints.control_api import parse_profile_body

        self._check_open()
        req = parse_profile_body(kwargs, self.server_args.device)
        self._run(self.tokenizer_manager.start_profile(req))

    def stop_profile(self) -> None:
        """Stop the profiler and write its trace (``<output_dir>/<profile_id>-TP-0.trace.json.gz``).

        Raises:
            ValueError: no profile is running.
        """
        self._check_open()
        self._run(self.tokenizer_manager.stop_profile())
