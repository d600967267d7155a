"""Weight updates and parameter reads of the scheduler (SGLang's ``SchedulerUpdateWeightsMixin``):
what ``/update_weights_from_disk``, ``/get_weights_by_name`` and ``/pause_generation``'s
``retract`` mode do inside :class:`~sglang_v4.managers.scheduler.Scheduler`, through the control
messages of :mod:`sglang_v4.managers.control_struct` (the ZMQ loop calls these between steps).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_v4.managers.io_struct import BatchTokenIDOut
    from sglang_v4.managers.scheduler import Scheduler

logger = logging.getLogger(__name__)

#: SGLang's answer of a successful ``update_weights_from_disk``.
UPDATE_WEIGHTS_OK_MESSAGE = "Succeeded to update model weights."


class SchedulerUpdateWeightsMixin:
    """Weight updates of :class:`~sglang_v4.managers.scheduler.Scheduler` (module docstring)."""

    def update_weights_from_disk(self: Scheduler, model_path: str) -> tuple[bool, str]:
        """Reload the weights from the checkpoint directory ``model_path`` (same architecture), in
        place on every TP rank, then flush the radix cache (its KV was computed with the old
        weights). Returns ``(success, message)``.

        Refused (nothing changes) while a request holds KV pages or a batch is in flight: the
        tokenizer manager lets running requests finish first (or aborts them), and a pause in
        ``retract`` mode leaves only queued requests without pages, which recompute under the new
        weights. A config or checkpoint that does not match the served model is refused before a
        weight is written (:mod:`sglang_v4.model_loader.weight_update`); a reload that fails half-way
        reloads the previous checkpoint.
        """
        n = self.kv_holders()
        if n != 0:
            n = max(n, len(self.running))
            return False, (
                f"Weights not updated: {n} request(s) hold KV computed with the current weights "
                "(paused in place?). Call /continue_generation and let them finish, or pause with "
                "mode 'abort' or 'retract', then update."
            )
        try:
            self.runner.update_weights_from_disk(model_path)
        except ValueError as e:
            logger.error("update_weights_from_disk(%s) refused: %s", model_path, e)
            return False, str(e)
        self.model_path = model_path
        if not self.cache_manager.flush():  # a lock on the tree: not expected with no request running
            return False, (
                "Weights were updated, but the cache was not flushed because requests still hold "
                "it. Let them finish, then call /flush_cache."
            )
        logger.info("Weights updated from %s; radix cache flushed.", model_path)
        return True, UPDATE_WEIGHTS_OK_MESSAGE

    def get_weights_by_name(self: Scheduler, name: str, truncate_size: int) -> tuple[list[Any] | None, str]:
        """``(values, "")`` of parameter ``name``'s first ``truncate_size`` rows (float lists), or
        ``(None, why)`` (unknown name, a parameter split over TP ranks)."""
        try:
            return self.runner.get_weights_by_name(name, truncate_size), ""
        except (KeyError, ValueError) as e:
            return None, str(e.args[0]) if e.args else str(e)

    def settle_in_flight(self: Scheduler) -> BatchTokenIDOut | None:
        """Wait for the batch in flight (overlap scheduling) and process its result, so no batch
        is pending while generation is paused (``/pause_generation`` mode ``in_place``): aborts
        sent while paused then free every page, and ``/update_weights_from_disk`` or
        ``/flush_cache`` see only the requests that really hold KV. Returns the outputs that batch
        produced (``None`` if none)."""
        self._resolve_last_batch()
        return self.stream_output()

    def _resolve_last_batch(self: Scheduler) -> None:
        last, self.last_batch = self.last_batch, None
        if last is not None:
            self._resolve(last)

    def retract_all(self: Scheduler) -> BatchTokenIDOut:
        """``/pause_generation`` mode ``retract``: finish the batch in flight, then send every
        running request back to the queue with its outputs kept and its KV pages released (they
        recompute it after ``/continue_generation``). Returns the outputs that batch produced."""
        self._resolve_last_batch()
        for req in sorted(self.running, key=lambda r: r.arrival, reverse=True):
            self._retract(req, "(generation paused, mode retract)")
        return self.stream_output()
