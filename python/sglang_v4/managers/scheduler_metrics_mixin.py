"""Runtime state and metrics reports of the scheduler, and the cache flush (SGLang's
``SchedulerMetricsMixin``): what ``/get_server_info``, ``/metrics`` and ``/flush_cache`` read from
:class:`~sglang_v4.managers.scheduler.Scheduler` through the control messages of
:mod:`sglang_v4.managers.control_struct`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_v4.managers.scheduler import Scheduler


#: Seconds without a processed batch after which ``/metrics``' ``gen_throughput`` reads 0 (SGLang
#: decays the gauge so: an idle server must not keep exporting its last throughput).
GEN_THROUGHPUT_STALE_S = 30.0


class SchedulerMetricsMixin:
    """Reports of :class:`~sglang_v4.managers.scheduler.Scheduler` (module docstring)."""

    def kv_holders(self: Scheduler) -> int:
        """Requests holding KV pages or a request slot: the running ones and queued ones already
        admitted once (a chunked prefill); ``-1`` while a batch is in flight. Queued requests
        that hold nothing (new, or retracted by ``/pause_generation`` mode ``retract``) do not
        count: they match the cache when admitted."""
        if self.last_batch is not None:
            return -1
        return len(self.running) + sum(1 for r in self.waiting if r.req_pool_idx is not None)

    def flush_cache(self: Scheduler) -> bool:
        """Empty the radix cache; refused (False) while a request holds KV (:meth:`kv_holders`),
        so a server paused in ``retract`` mode can flush (sgl-project/sglang#33783)."""
        if self.kv_holders() != 0:
            return False
        return self.cache_manager.flush()

    def get_server_info(self: Scheduler) -> dict[str, Any]:
        """JSON-able runtime state: ``kv_pool`` pages per pool, ``radix_cache`` stats, limits,
        and SGLang's ``last_gen_throughput`` (tokens/s, :meth:`current_gen_throughput`) and
        ``effective_max_running_requests_per_dp``."""
        sa = self.server_args
        return {
            "model_path": self.model_path,
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "context_length": self.context_len,
            "page_size": self.page_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "max_prefill_tokens": self.max_prefill_tokens,
            "enable_overlap_schedule": self.enable_overlap,
            "device": str(self.runner.device),
            "dtype": str(self.runner.dtype).replace("torch.", ""),
            "kv_cache_dtype": sa.kv_cache_dtype,
            "disable_radix_cache": bool(sa.disable_radix_cache),
            "schedule_policy": sa.schedule_policy,
            "kv_pool": self.pool.stats(),
            "kv_pool_bytes": self.pool.memory_bytes(),
            "kv_plan": self.runner.kv_plan_info(),
            "radix_cache": self.tree_cache.stats(),
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            # SGLang's internal-state keys (bench_serving and routers read them)
            "last_gen_throughput": self.current_gen_throughput(),
            "effective_max_running_requests_per_dp": self.max_running_requests,
            "num_retractions": self.num_retractions,
            "num_oom_errors": self.num_oom_errors,
            "jit": getattr(self.runner, "jit_info", dict)(),
        }

    def current_gen_throughput(self: Scheduler) -> float:
        """``last_gen_throughput`` (tokens/s), or 0.0 once no batch was processed for
        :data:`GEN_THROUGHPUT_STALE_S` seconds (``time.monotonic``)."""
        if self._tp_at is None or time.monotonic() - self._tp_at[0] > GEN_THROUGHPUT_STALE_S:
            return 0.0
        return self.last_gen_throughput

    def get_metrics(self: Scheduler) -> dict[str, Any]:
        """Gauges for ``/metrics``: queue sizes, KV tokens held by requests (``num_used_tokens``;
        evictable radix-cache pages are not in use, as in SGLang) and in the pool, the pool split
        into available / evictable / used tokens (block pages x ``page_size``), token usage,
        the last prefill batch's cache hit rate (``recent_cache_hit_rate``), throughput
        (:meth:`current_gen_throughput`), retractions since start, ``page_size``, ``num_pages`` and
        ``context_len``; for ``/v1/loads`` the queued requests' tokens (``num_waiting_tokens``) and
        SGLang's estimate of those not cached (``num_waiting_uncached_tokens``: each queued
        request's tokens times one minus the recent cache hit rate)."""
        pages = self.cache_manager.block_alloc
        available, evictable, used = self.cache_manager.kv_block_counts()
        miss = 1.0 - float(self.recent_cache_hit_rate)
        waiting_lens = [r.seq_len for r in self.waiting]
        return {
            "num_running_reqs": len(self.running),
            "num_queue_reqs": len(self.waiting),
            "num_waiting_tokens": sum(waiting_lens),
            "num_waiting_uncached_tokens": sum(int(n * miss) for n in waiting_lens),
            "max_running_requests": self.max_running_requests,
            "num_used_tokens": used * self.page_size,
            "max_total_num_tokens": pages.num_pages * self.page_size,
            "kv_available_tokens": available * self.page_size,
            "kv_evictable_tokens": evictable * self.page_size,
            "kv_used_tokens": used * self.page_size,
            "token_usage": self.cache_manager.token_usage(),
            "cache_hit_rate": self.recent_cache_hit_rate,
            "gen_throughput": self.current_gen_throughput(),
            "num_retractions": self.num_retractions,
            "page_size": self.page_size,
            "num_pages": pages.num_pages,
            "context_len": self.context_len,
        }
