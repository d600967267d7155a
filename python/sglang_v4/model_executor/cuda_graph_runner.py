"""CUDA-graph decode for the DeepSeek-V4 model runner (SGLang's ``CudaGraphRunner`` shape).

A decode step (every request adds one token) is replayed from a CUDA graph captured per key
``(bs, two_stream)``:

* ``bs``: a batch-size bucket (``1, 2, 4, 8, 12, 16, 24, 32, 48, ...`` up to ``max_bs``); the rows
  past the real batch are padding that uses the reserved request slot 0 (``ReqSlotAllocator``
  hands out ``1..N``) and the reserved window page 0 (``PageAllocator`` reserves id 0) for its
  scratch state, writes no KV (``swa_write = win_out = -1``) and attends to nothing
  (``swa_pages = -1``, ``visible = 0``);
* ``two_stream``: whether the CSA indexer runs on the second stream (the indexer-stream policy
  for ``bs`` tokens).

One graph serves every context up to ``max_ctx`` (the model's context length): the metadata has
no context-sized field, the page table is the pool's persistent device table
(``DSV4KVPool.req_to_page``, synced with each step's new pages before the replay), and the
attention and indexer kernels read each token's visible-entry count on the device with a grid
fixed by the batch shape (their workspace sized for ``max_ctx``). A step's host work is O(bs).

The metadata is written by the model's :class:`~sglang_v4.model_executor.forward_batch.ForwardBatchBuilder`
(the same definitions as an eager forward) into one pinned host buffer in the key's padded
:class:`~sglang_v4.model_executor.metadata_layout.MetadataLayout`, and copied by a single copy per
step into one static int64 device buffer shared by all keys; the model reads it through a
:class:`ForwardBatch` of views with ``graph_safe=True``. The layers never synchronise with the host
on CUDA (``Compressor.run`` merges with ``torch.where``), so the whole forward is captured,
including the indexer's second stream (``fb.indexer_stream``, forked and joined with
``wait_stream`` inside the graph).

Graphs are captured lazily on a key's first use (two warm-up forwards + one capture, on all-padding
inputs that only touch slot 0 / page 0), or at start-up (:meth:`CudaGraphRunner.capture_all`). A
failed capture logs a warning and disables graphs (eager fallback). Logits are copied inside the
graph into a runner-owned ``[max_bs, vocab]`` buffer, so the graphs' memory pool (shared by all
keys) keeps no per-graph outputs.

Tensor parallel: the forward's NCCL collectives are captured with it. Every rank captures the same
keys in the same order (rank 0 announces :meth:`CudaGraphRunner.capture_all` through
``before_capture_all``; lazy captures follow the replayed batches, which every rank receives), and
``eager_fallback=False``: a failed capture raises instead of leaving one rank eager while the others
replay (their collectives would no longer pair up).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import (
    ForwardBatch,
    ForwardBatchBuilder,
    MetadataLayout,
    ReqForwardInput,
)

if TYPE_CHECKING:
    from sglang_v4.model_executor.model_runner import IndexerStreamPolicy

logger = logging.getLogger(__name__)

DEFAULT_BS_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512)


def bs_buckets(max_bs: int) -> list[int]:
    """Batch-size buckets ``<= max_bs`` (``max_bs`` itself always included)."""
    if max_bs < 1:
        raise ValueError(f"cuda_graph_max_bs: must be >= 1, got {max_bs}")
    out = [b for b in DEFAULT_BS_BUCKETS if b < max_bs]
    return out + [max_bs]


def explicit_bs_buckets(sizes: list[int]) -> list[int]:
    """An explicit bucket list (SGLang's ``--cuda-graph-bs``): sorted, duplicates dropped.

    Raises:
        ValueError: ``cuda_graph_bs`` empty or holding a value < 1.
    """
    if not sizes or min(sizes) < 1:
        raise ValueError(f"cuda_graph_bs: must be a non-empty list of sizes >= 1, got {sizes}")
    return sorted(set(int(b) for b in sizes))


def pick_bucket(n: int, buckets: list[int]) -> int | None:
    """Smallest bucket ``>= n`` or ``None``."""
    for b in buckets:
        if b >= n:
            return b
    return None


class CudaGraphRunner:
    """Replays captured decode graphs (see module docstring).

    Args:
        model: the forward, ``model(fb, pool) -> [K, vocab]`` fp32 logits.
        pool: the KV pool the forward reads and writes.
        builder: the metadata builder of the model (its page size, window, ratios and device).
        indexer_streams: which forwards run the CSA indexer on the second stream.
        vocab_size: logits width.
        max_bs: largest batch replayed from a graph (``--cuda-graph-max-bs``).
        max_ctx: largest context a graph serves (the model's context length; longer decodes run
            eagerly).
        use_graphs: ``False`` replays the static (padded) batch eagerly instead of capturing; the
            CPU tests use it to check the padding, and it is the behaviour after a failed capture.

    Raises:
        ValueError: ``max_bs < 1``.
    """

    def __init__(
        self,
        model: Callable[[ForwardBatch, DSV4KVPool], torch.Tensor],
        pool: DSV4KVPool,
        builder: ForwardBatchBuilder,
        indexer_streams: IndexerStreamPolicy,
        vocab_size: int,
        max_bs: int,
        max_ctx: int,
        use_graphs: bool = True,
        bs_list: list[int] | None = None,
    ) -> None:
        self.model, self.pool, self.builder = model, pool, builder
        self.indexer_streams = indexer_streams
        self.bs_list = explicit_bs_buckets(bs_list) if bs_list else bs_buckets(max_bs)
        self.max_bs = self.bs_list[-1]
        self.max_ctx = int(max_ctx)
        self.use_graphs = use_graphs
        self.device = builder.device
        largest = builder.static_layout(self.max_bs, self.max_ctx).size
        self.dev_buf = torch.zeros(largest, dtype=torch.int64, device=self.device)
        self.host_buf = torch.zeros(largest, dtype=torch.int64, pin_memory=self.device.type == "cuda")
        self.host_np = self.host_buf.numpy()
        self.copy_done: torch.cuda.Event | None = None
        self.out_logits = torch.zeros(self.max_bs, vocab_size, dtype=torch.float32, device=self.device)
        self.graphs: dict[tuple[int, bool], torch.cuda.CUDAGraph] = {}
        self.static_fb: dict[tuple[int, bool], ForwardBatch] = {}
        self.layouts: dict[int, MetadataLayout] = {}
        self.mempool = torch.cuda.graph_pool_handle() if (use_graphs and self.device.type == "cuda") else None
        self.failed = False
        self.num_replays = 0
        #: Called with ``max_ctx`` before :meth:`capture_all` captures (tensor-parallel rank 0
        #: tells the other ranks to capture too).
        self.before_capture_all: Callable[[], None] | None = None
        #: ``False``: a failed capture raises (tensor parallel) instead of disabling graphs.
        self.eager_fallback = True

    # ---- selection ------------------------------------------------------------------------
    def key_for(self, reqs: list[ReqForwardInput]) -> tuple[int, bool] | None:
        """The graph key ``(bs, two_stream)`` of a decode batch, or ``None`` if it cannot be
        replayed (not all requests add exactly one token, batch above ``max_bs``, a context above
        ``max_ctx``). The one place a graph key is chosen."""
        if not reqs or any(len(r.input_ids) != 1 for r in reqs):
            return None
        bs = pick_bucket(len(reqs), self.bs_list)
        if bs is None or max(r.prefix_len + 1 for r in reqs) > self.max_ctx:
            return None
        return bs, self.indexer_streams.for_tokens(bs) is not None

    def can_run(self, reqs: list[ReqForwardInput]) -> bool:
        return not self.failed and self.key_for(reqs) is not None

    def _layout(self, bs: int) -> MetadataLayout:
        if bs not in self.layouts:
            self.layouts[bs] = self.builder.static_layout(bs, self.max_ctx)
        return self.layouts[bs]

    def _upload(self, lay: MetadataLayout, reqs: list[ReqForwardInput]) -> None:
        """Write the padded metadata of the decode batch ``reqs`` (``[]``: all padding) into the
        pinned host buffer and copy it up; sync the page table with the batch's new pages."""
        meta = self.builder.metadata(reqs, num_req_rows=lay.num_req_rows) if reqs else None
        if self.copy_done is not None:
            self.copy_done.synchronize()  # the pinned buffer is free again
        lay.write(self.host_np, meta)
        if meta is not None:
            self.builder.sync_pages(reqs, meta)
        self.dev_buf[: lay.size].copy_(self.host_buf[: lay.size], non_blocking=True)
        if self.device.type == "cuda":
            self.copy_done = torch.cuda.Event()
            self.copy_done.record()

    def _static(self, bs: int, two_stream: bool) -> ForwardBatch:
        key = (bs, two_stream)
        fb = self.static_fb.get(key)
        if fb is None:
            fb = self._layout(bs).views(self.dev_buf, [1] * bs, [0] * bs, [1] * bs)
            fb.graph_safe = True
            fb.indexer_stream = self.indexer_streams.stream if two_stream else None
            fb.req_to_page = self.pool.req_to_page.table
            self.static_fb[key] = fb
        return fb

    # ---- capture / replay -----------------------------------------------------------------
    def _run_static(self, fb: ForwardBatch, bs: int) -> None:
        logits = self.model(fb, self.pool)
        self.out_logits[:bs].copy_(logits)

    def dummy_inputs(self, bs: int, two_stream: bool) -> ForwardBatch:
        """Load an all-padding batch (slot 0, no KV writes) into the static buffer and return the
        key's static batch; a forward on it (graph warm-up and capture) changes no real request's
        state."""
        self._upload(self._layout(bs), [])
        return self._static(bs, two_stream)

    def capture(self, bs: int, two_stream: bool) -> None:
        """Capture the graph of key ``(bs, two_stream)`` on dummy inputs.

        Raises:
            RuntimeError: capture failed (the caller falls back to eager).
        """
        fb = self.dummy_inputs(bs, two_stream)
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            for _ in range(2):  # warm-up: Triton JIT, cuBLAS workspaces
                self._run_static(fb, bs)
        torch.cuda.current_stream(self.device).wait_stream(s)
        torch.cuda.synchronize(self.device)
        g = torch.cuda.CUDAGraph()
        # thread-local: a lazy capture runs in the model worker's thread while the scheduler's
        # thread may wait on an event of the previous batch (overlap scheduling), and NCCL's
        # watchdog thread queries events during a tensor-parallel capture
        with torch.cuda.graph(g, pool=self.mempool, capture_error_mode="thread_local"):
            self._run_static(fb, bs)
        torch.cuda.synchronize(self.device)
        self.graphs[(bs, two_stream)] = g

    def capture_all(self) -> int:
        """Capture every batch-size bucket now (server start-up, as SGLang captures its decode
        graphs), so the first requests do not stall on a capture; each graph serves every context.
        The stream mode of each key follows the indexer-stream policy. A failed capture logs a
        warning and disables graphs (eager fallback), as in :meth:`replay`.

        Returns:
            the number of graphs captured by this call.
        """
        if not self.use_graphs or self.failed or self.device.type != "cuda":
            return 0
        if self.before_capture_all is not None:
            self.before_capture_all()
        n = 0
        for bs in self.bs_list:
            two = self.indexer_streams.for_tokens(bs) is not None
            if (bs, two) in self.graphs:
                continue
            if not self._capture_or_disable(bs, two):
                return n
            n += 1
        return n

    def _capture_or_disable(self, bs: int, two_stream: bool) -> bool:
        """:meth:`capture`; on failure log a warning, disable graphs (eager fallback) and return False."""
        try:
            self.capture(bs, two_stream)
        except Exception as e:  # noqa: BLE001 - any capture failure means eager fallback
            if not self.eager_fallback:
                raise RuntimeError(f"CUDA graph capture failed for bs={bs}: {e}") from e
            logger.warning("CUDA graph capture failed for bs=%d (%s); running eagerly", bs, e)
            self.failed = True
            return False
        return True

    def replay(
        self,
        reqs: list[ReqForwardInput],
        before_replay: Callable[[ForwardBatch], None] | None = None,
    ) -> tuple[ForwardBatch, torch.Tensor]:
        """Run a decode batch through its graph (capturing it first if needed). ``before_replay``
        is called on the key's static batch once its metadata is uploaded (the model runner
        resolves future token ids there, on the device).

        Returns:
            ``(fb, logits)``: ``fb`` has the real requests' host lists (``extend_lens``,
            ``prefix_lens``, ``logits_counts``) and, as tensors, the key's static padded views
            (overwritten by the next step); ``logits`` ``[K, vocab]`` fp32 (a copy) of the rows
            the requests asked for.

        Raises:
            ValueError: the batch has no graph key (check :meth:`can_run` first), or a missing
                block / window page.
        """
        gkey = self.key_for(reqs)
        if gkey is None:
            raise ValueError("replay: not a graph-replayable decode batch")
        bs, two = gkey
        use_graph = self.use_graphs and not self.failed and self.device.type == "cuda"
        if use_graph and gkey not in self.graphs:
            use_graph = self._capture_or_disable(bs, two)
        n = len(reqs)
        self._upload(self._layout(bs), reqs)
        static = self._static(bs, two)
        if before_replay is not None:
            before_replay(static)
        if use_graph:
            self.graphs[gkey].replay()
        else:
            self._run_static(static, bs)
        self.num_replays += 1
        rows = [b for b, r in enumerate(reqs) if r.logits_start <= 0]
        if len(rows) == n:
            logits = self.out_logits[:n].clone()
        else:
            logits = self.out_logits[torch.tensor(rows, dtype=torch.long, device=self.device)]
        out_fb = dataclasses.replace(
            static,
            extend_lens=[1] * n,
            prefix_lens=[r.prefix_len for r in reqs],
            logits_counts=[1 if r.logits_start <= 0 else 0 for r in reqs],
        )
        return out_fb, logits
