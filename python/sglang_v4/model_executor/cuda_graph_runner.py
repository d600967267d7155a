"""CUDA graphs for the DeepSeek-V4 model runner (SGLang's ``CudaGraphRunner`` shape): decode
steps and short extend / mixed steps.

**Decode keys** ``(bs, two_stream)``: a decode step (every request adds one token) is replayed from
the graph of

* ``bs``: a batch-size bucket (``1, 2, 4, 8, 12, 16, 24, 32, 48, ...`` up to ``max_bs``); the rows
  past the real batch are padding that uses the reserved request slot 0 (``ReqSlotAllocator``
  hands out ``1..N``) and the reserved window page 0 (``PageAllocator`` reserves id 0) for its
  scratch state, writes no KV (``swa_write = win_out = -1``) and attends to nothing
  (``swa_pages = -1``, ``visible = 0``);
* ``two_stream``: whether the CSA indexer runs on the second stream (the indexer-stream policy
  for ``bs`` tokens).

**Extend keys** ``(T, B, two_stream)``: any other batch of at most ``max_extend_tokens`` new
tokens (``--cuda-graph-max-extend-tokens``, default 1024; 0 = none) is replayed from the graph of

* ``T``: a token bucket (powers of two ``16 .. 2048``, capped at ``max_extend_tokens``, which is
  always a bucket): a prompt's short tail, a prefix-cache hit's few new tokens, or decode tokens
  mixed with an extend chunk. Below 16 tokens a step costs its kernel launches and weight reads,
  not its tokens (the GEMMs are weight-bound), so smaller buckets would only add graphs; powers of
  two pad at most 2x the tokens. An eager step of up to ~1,024 tokens is bound by host work (about
  25-35 ms of launches and Python on the H200 whatever its size), so the default 1024 covers
  prefix-hit and chunk tails, several prefix hits batched together and arriving prompts mixed with
  decodes; the graphs' memory pool holds one 1,024-token forward (0.40 GiB on ``flash-8l-32e``).
  Longer extends run eagerly (their kernels dominate) unless the flag is raised;
* ``B``: a request bucket (``4, 16, 64``, then ``min(T, max_bs)``): padded requests cost per layer
  a gather of their compressor state rows (``B * m`` rows, ``m = 128`` for HCA), so a prefix hit
  of one request does not pay for 128 padded ones;
* ``two_stream``: the indexer-stream policy for ``T`` tokens.

The layout (:meth:`ForwardBatchBuilder.static_extend_layout`) bounds the completed windows ``J``
and block-end snapshots ``S`` by ``T`` and ``B``, and has ``K = B`` logits rows (each request's
last token at most: a batch whose request asks for more rows, such as prompt logprobs, runs
eagerly). Padded tokens belong to request row 0 but read nothing (``swa_pages = -1``,
``visible = 0``) and write nothing (``swa_write = -1``, no window row references them); padded
request rows use slot 0 and window page 0 as at decode.

**Context bound.** One graph of either kind serves every context up to ``max_ctx`` (the model's
context length): the metadata has no context-sized field, the page table is the pool's persistent
device table (``DSV4KVPool.req_to_page``, synced with each step's new pages before the replay),
and the attention kernels' grid is fixed by the batch shape and the layer (their splits read each
token's visible-entry count on the device). The CSA indexer's grid and workspace depend on the
host bound ``C = max_ctx // 4`` only through its row blocks: ``G = 2^26 // (3 C)`` token rows per
block of scratch (``3 G C`` int32, at most 256 MiB, reused by every block), so a ``T``-token graph
runs ``ceil(T / G)`` blocks of up to 5 launches (scoring, two histogram levels, filter, final;
at 1M context ``G = 85``: 4 blocks at ``T = 256``, 1 below ``T = 86``), and with ``C > topk`` the
histogram and filter launches always run. Every program of those launches reads its token's
visible count on the device and covers its share of the visible entries only, returning at once
on an empty share, so a short context under a 1M bound pays at most about twenty near-empty
launches per CSA layer (an eager short-context step runs 2: scoring and final), a few
microseconds each inside a graph, not 1M-context work; keying graphs by context as well would
multiply the captures to save that. Contexts past ``max_ctx`` run eagerly.

A step's host work is O(T). The metadata is written by the model's
:class:`~sglang_v4.model_executor.forward_batch.ForwardBatchBuilder` (the same definitions as an
eager forward) into one pinned host buffer in the key's padded
:class:`~sglang_v4.model_executor.metadata_layout.MetadataLayout`, and copied by a single copy per
step into one static int64 device buffer shared by all keys; the model reads it through a
:class:`ForwardBatch` of views with ``graph_safe=True``. The layers never synchronise with the host
on CUDA (``Compressor.run`` merges with ``torch.where``), so the whole forward is captured,
including the indexer's second stream (``fb.indexer_stream``, forked and joined with
``wait_stream`` inside the graph).

Graphs are captured at start-up (:meth:`CudaGraphRunner.capture_all`, the warm-up: decode keys,
then extend keys), or lazily on a key's first use when start-up capture is off (two warm-up
forwards + one capture, on all-padding inputs that only touch slot 0 / page 0). A failed capture
logs a warning and disables graphs (eager fallback). Logits are copied inside the graph into a
runner-owned ``[max_bs, vocab]`` buffer, so the graphs' memory pool (shared by all keys) keeps no
per-graph outputs.

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
#: Token buckets of the extend keys (module docstring), capped at ``max_extend_tokens``.
DEFAULT_EXTEND_TOKEN_BUCKETS = (16, 32, 64, 128, 256, 512, 1024, 2048)
#: Request buckets of an extend key below its cap ``min(T, max_bs)``.
DEFAULT_EXTEND_REQ_BUCKETS = (4, 16, 64)
#: Key of a decode graph ``(bs, two_stream)`` or of an extend graph ``(T, B, two_stream)``.
GraphKey = tuple[int, bool] | tuple[int, int, bool]


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


def extend_token_buckets(max_tokens: int) -> list[int]:
    """Token buckets of the extend keys ``<= max_tokens`` (``max_tokens`` itself always included;
    ``[]`` for 0: no extend graphs).

    Raises:
        ValueError: ``max_tokens < 0``.
    """
    if max_tokens < 0:
        raise ValueError(f"cuda_graph_max_extend_tokens: must be >= 0, got {max_tokens}")
    if max_tokens == 0:
        return []
    return [t for t in DEFAULT_EXTEND_TOKEN_BUCKETS if t < max_tokens] + [max_tokens]


def extend_req_buckets(num_tokens: int, max_bs: int) -> list[int]:
    """Request buckets of the extend keys of ``num_tokens`` tokens: those of
    :data:`DEFAULT_EXTEND_REQ_BUCKETS` below the cap ``min(num_tokens, max_bs)``, then the cap."""
    cap = max(1, min(num_tokens, max_bs))
    return [b for b in DEFAULT_EXTEND_REQ_BUCKETS if b < cap] + [cap]


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
        max_ctx: largest context a graph serves (the model's context length; longer batches run
            eagerly).
        use_graphs: ``False`` replays the static (padded) batch eagerly instead of capturing; the
            CPU tests use it to check the padding, and it is the behaviour after a failed capture.
        bs_list: explicit decode batch sizes (``--cuda-graph-bs``) instead of the buckets.
        max_extend_tokens: largest extend / mixed step replayed from a graph
            (``--cuda-graph-max-extend-tokens``; 0: decode graphs only).

    Raises:
        ValueError: ``max_bs < 1``, ``max_extend_tokens < 0``.
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
        max_extend_tokens: int = 0,
    ) -> None:
        self.model, self.pool, self.builder = model, pool, builder
        self.indexer_streams = indexer_streams
        self.bs_list = explicit_bs_buckets(bs_list) if bs_list else bs_buckets(max_bs)
        self.max_bs = self.bs_list[-1]
        self.max_ctx = int(max_ctx)
        self.use_graphs = use_graphs
        self.layouts: dict[tuple[int, int | None], MetadataLayout] = {}
        self.device = builder.device
        self.extend_tokens = extend_token_buckets(int(max_extend_tokens))
        #: extend keys' ``(T, B)`` shapes, in capture order
        self.extend_shapes = [(t, b) for t in self.extend_tokens for b in extend_req_buckets(t, self.max_bs)]
        largest = builder.static_layout(self.max_bs, self.max_ctx).size
        for t, b in self.extend_shapes:
            largest = max(largest, self._layout(t, b).size)
        self.dev_buf = torch.zeros(largest, dtype=torch.int64, device=self.device)
        self.host_buf = torch.zeros(largest, dtype=torch.int64, pin_memory=self.device.type == "cuda")
        self.host_np = self.host_buf.numpy()
        self.copy_done: torch.cuda.Event | None = None
        self.out_logits = torch.zeros(self.max_bs, vocab_size, dtype=torch.float32, device=self.device)
        self.graphs: dict[GraphKey, torch.cuda.CUDAGraph] = {}
        self.static_fb: dict[GraphKey, ForwardBatch] = {}
        self.mempool = torch.cuda.graph_pool_handle() if (use_graphs and self.device.type == "cuda") else None
        self.failed = False
        self.num_replays = 0
        #: Called with ``max_ctx`` before :meth:`capture_all` captures (tensor-parallel rank 0
        #: tells the other ranks to capture too).
        self.before_capture_all: Callable[[], None] | None = None
        #: ``False``: a failed capture raises (tensor parallel) instead of disabling graphs.
        self.eager_fallback = True

    # ---- selection ------------------------------------------------------------------------
    def key_for(self, reqs: list[ReqForwardInput]) -> GraphKey | None:
        """The graph key of a batch, or ``None`` if it cannot be replayed. The one place a graph
        key is chosen.

        A decode batch (every request adds one token) gets ``(bs, two_stream)``, or ``None``
        above ``max_bs``. Any other batch gets an extend key ``(T, B, two_stream)`` when its
        tokens fit a token bucket, its requests the request buckets of that ``T``, and each
        request asks for at most one logits row (else ``None``: prompt logprobs run eagerly).
        ``None`` too for a context above ``max_ctx``."""
        if not reqs:
            return None
        lens = [len(r.input_ids) for r in reqs]
        if max(r.prefix_len + n for r, n in zip(reqs, lens)) > self.max_ctx:
            return None
        if lens.count(1) == len(lens):
            bs = pick_bucket(len(reqs), self.bs_list)
            if bs is None:
                return None
            return bs, self.indexer_streams.for_tokens(bs) is not None
        if any(n - max(0, r.logits_start) > 1 for r, n in zip(reqs, lens)):
            return None
        t = pick_bucket(sum(lens), self.extend_tokens)
        if t is None:
            return None
        b = pick_bucket(len(reqs), extend_req_buckets(t, self.max_bs))
        if b is None:
            return None
        return t, b, self.indexer_streams.for_tokens(t) is not None

    def can_run(self, reqs: list[ReqForwardInput]) -> bool:
        """A captured graph key serves ``reqs`` (and capturing has not failed)."""
        return not self.failed and self.key_for(reqs) is not None

    def all_keys(self) -> list[GraphKey]:
        """Every key :meth:`capture_all` captures, in capture order (decode, then extend); the
        stream mode of each follows the indexer-stream policy."""
        keys: list[GraphKey] = [(bs, self.indexer_streams.for_tokens(bs) is not None) for bs in self.bs_list]
        for t, b in self.extend_shapes:
            keys.append((t, b, self.indexer_streams.for_tokens(t) is not None))
        return keys

    @staticmethod
    def _shape(key: GraphKey) -> tuple[int, int | None]:
        """``(T, B)`` of an extend key, ``(bs, None)`` of a decode key: the layout's key."""
        return (key[0], key[1]) if len(key) == 3 else (key[0], None)  # type: ignore[return-value]

    def _layout(self, t: int, b: int | None = None) -> MetadataLayout:
        """The static layout of decode batch size ``t`` (``b=None``) or of extend shape ``(t, b)``."""
        lay = self.layouts.get((t, b))
        if lay is None:
            if b is None:
                lay = self.builder.static_layout(t, self.max_ctx)
            else:
                lay = self.builder.static_extend_layout(t, b, self.max_ctx)
            self.layouts[(t, b)] = lay
        return lay

    def _upload(self, lay: MetadataLayout, reqs: list[ReqForwardInput]) -> None:
        """Write the padded metadata of the batch ``reqs`` (``[]``: all padding) into the pinned
        host buffer and copy it up; sync the page table with the batch's new pages."""
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

    def _static(self, key: GraphKey) -> ForwardBatch:
        fb = self.static_fb.get(key)
        if fb is None:
            t, b = self._shape(key)
            rows = t if b is None else b
            fb = self._layout(t, b).views(self.dev_buf, [1] * rows, [0] * rows, [1] * rows)
            fb.graph_safe = True
            fb.indexer_stream = self.indexer_streams.stream if key[-1] else None
            fb.req_to_page = self.pool.req_to_page.table
            self.static_fb[key] = fb
        return fb

    # ---- capture / replay -----------------------------------------------------------------
    def _run_static(self, fb: ForwardBatch) -> None:
        logits = self.model(fb, self.pool)
        self.out_logits[: logits.shape[0]].copy_(logits)

    def dummy_inputs(self, key: GraphKey) -> ForwardBatch:
        """Load an all-padding batch (slot 0, no KV writes) into the static buffer and return the
        key's static batch; a forward on it (graph warm-up and capture) changes no real request's
        state."""
        self._upload(self._layout(*self._shape(key)), [])
        return self._static(key)

    def capture(self, key: GraphKey) -> None:
        """Capture the graph of ``key`` on dummy inputs.

        Raises:
            RuntimeError: capture failed (the caller falls back to eager).
        """
        fb = self.dummy_inputs(key)
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            for _ in range(2):  # warm-up: Triton JIT, cuBLAS workspaces
                self._run_static(fb)
        torch.cuda.current_stream(self.device).wait_stream(s)
        torch.cuda.synchronize(self.device)
        g = torch.cuda.CUDAGraph()
        # thread-local: a lazy capture runs in the model worker's thread while the scheduler's
        # thread may wait on an event of the previous batch (overlap scheduling), and NCCL's
        # watchdog thread queries events during a tensor-parallel capture
        with torch.cuda.graph(g, pool=self.mempool, capture_error_mode="thread_local"):
            self._run_static(fb)
        torch.cuda.synchronize(self.device)
        self.graphs[key] = g

    def capture_all(self) -> int:
        """Capture every key now (:meth:`all_keys`: server start-up, as SGLang captures its decode
        graphs), so the first requests do not stall on a capture and nothing is captured after
        ready; each graph serves every context. A failed capture logs a warning and disables
        graphs (eager fallback), as in :meth:`replay`.

        Returns:
            the number of graphs captured by this call.
        """
        if not self.use_graphs or self.failed or self.device.type != "cuda":
            return 0
        if self.before_capture_all is not None:
            self.before_capture_all()
        n = 0
        for key in self.all_keys():
            if key in self.graphs:
                continue
            if not self._capture_or_disable(key):
                return n
            n += 1
        return n

    def _capture_or_disable(self, key: GraphKey) -> bool:
        """:meth:`capture`; on failure log a warning, disable graphs (eager fallback) and return False."""
        try:
            self.capture(key)
        except Exception as e:  # noqa: BLE001 - any capture failure means eager fallback
            if not self.eager_fallback:
                raise RuntimeError(f"CUDA graph capture failed for key {key}: {e}") from e
            logger.warning("CUDA graph capture failed for key %s (%s); running eagerly", key, e)
            self.failed = True
            return False
        return True

    def replay(
        self,
        reqs: list[ReqForwardInput],
        before_replay: Callable[[ForwardBatch], None] | None = None,
    ) -> tuple[ForwardBatch, torch.Tensor]:
        """Run a batch through its graph (capturing it first if needed). ``before_replay`` is
        called on the key's static batch once its metadata is uploaded (the model runner resolves
        future token ids there, on the device).

        Returns:
            ``(fb, logits)``: ``fb`` has the real requests' host lists (``extend_lens``,
            ``prefix_lens``, ``logits_counts``) and, as tensors, the key's static padded views
            (overwritten by the next step); ``logits`` ``[K, vocab]`` fp32 (a copy) of the rows
            the requests asked for, in request order.

        Raises:
            ValueError: the batch has no graph key (check :meth:`can_run` first), or a missing
                block / window page.
        """
        gkey = self.key_for(reqs)
        if gkey is None:
            raise ValueError("replay: not a graph-replayable batch")
        use_graph = self.use_graphs and not self.failed and self.device.type == "cuda"
        if use_graph and gkey not in self.graphs:
            use_graph = self._capture_or_disable(gkey)
        n = len(reqs)
        t, b = self._shape(gkey)
        self._upload(self._layout(t, b), reqs)
        static = self._static(gkey)
        if before_replay is not None:
            before_replay(static)
        if use_graph:
            self.graphs[gkey].replay()
        else:
            self._run_static(static)
        self.num_replays += 1
        lens = [len(r.input_ids) for r in reqs]
        counts = [ln - min(ln, max(0, r.logits_start)) for r, ln in zip(reqs, lens)]
        if b is not None:  # extend: the K real rows lead the logits rows
            logits = self.out_logits[: sum(counts)].clone()
        else:  # decode: every row's logits were computed
            rows = [i for i, c in enumerate(counts) if c]
            if len(rows) == n:
                logits = self.out_logits[:n].clone()
            else:
                logits = self.out_logits[torch.tensor(rows, dtype=torch.long, device=self.device)]
        out_fb = dataclasses.replace(
            static,
            extend_lens=lens,
            prefix_lens=[r.prefix_len for r in reqs],
            logits_counts=counts,
        )
        return out_fb, logits
