"""ModelRunner: owns the model weights and the KV pool, runs one forward per scheduler step.

Weights come from a checkpoint directory (``load_format="auto"``, official or HF names; FP8/FP4
kept quantized on CUDA, dequantized on CPU unless ``--quantization`` says otherwise) or are
initialised randomly on the device (``load_format="dummy"``, as SGLang and vLLM call it, for
benchmarks); ``sglang_v4.model_loader.builder.get_model``. The KV pool is sized by the
memory planner (``mem_cache/kv_planner.py:plan_kv_pools``) from ``--max-total-tokens`` or, on CUDA,
from ``--mem-fraction-static`` of the free memory after the weights are loaded less the forward's
workspace, measured by a maximal dummy forward first (``workspace.py``), in the chosen KV format
(fp32/bf16, or fp8 entries with an fp8/fp4 indexer). On CUDA, decode batches and short extend /
mixed batches replay CUDA graphs (``cuda_graph_runner.py``) and CSA layers run the indexer on a
second stream.

Tensor parallel (``--tp-size N``, docs/PARALLELISM.md): every rank has a ``ModelRunner`` over its
shard of the weights and a full replica of the KV pool. Rank 0's runner is the scheduler's:
:meth:`ModelRunner.forward` first broadcasts the step (:class:`ForwardStep`, ``tp_messages.py``: the
requests' forward inputs and the pool's request-state operations since the last step) over the TP
group's CPU group, then runs it; the other ranks (``tp_worker_process.py``) receive each step and
run the same forward, so their pools stay identical and the collectives inside the forward pair
up. Only rank 0's logits are used.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import torch
from sgl_kernel_v4 import ops

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup, init_tp_group
from sglang_v4.mem_cache.kv_format import normalize_kv_cache_dtype
from sglang_v4.mem_cache.kv_planner import KVPlan, plan_kv_pools
from sglang_v4.mem_cache.kv_spec import build_kv_layout
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang_v4.model_executor.forward_batch import ForwardBatch, ForwardBatchBuilder, ReqForwardInput
from sglang_v4.model_executor.tp_messages import (  # re-exported: the TP ranks' loop and tests import them here
    CaptureGraphs,
    ForwardStep,
    Shutdown,
    UpdateWeights,
)
from sglang_v4.model_executor.workspace import WorkspacePlan, plan_workspace
from sglang_v4.model_loader.builder import get_model
from sglang_v4.server_args import ServerArgs

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

#: Test hook (fault injection): a comma-separated list of forward numbers (1-based, counted per
#: runner) that raise ``torch.OutOfMemoryError`` instead of running, e.g. ``"3"`` or ``"3,7"``.
INJECT_OOM_ENV = "SGLANG_V4_TEST_OOM_FORWARDS"


def resolve_future_token_ids(input_ids: torch.Tensor, future_token_ids: torch.Tensor) -> None:
    """Replace, in place and on the device, each negative id ``-(s + 1)`` of ``input_ids`` by
    ``future_token_ids[s]``: the token that an earlier batch sampled into future slot ``s`` (overlap
    scheduling builds a batch before the host knows the previous batch's tokens).

    Args:
        input_ids: ``[T]`` int64 token ids of a forward, future placeholders negative.
        future_token_ids: ``[N]`` int64, the future map the sampler writes.
    """
    slot = (-input_ids - 1).clamp_(min=0)
    input_ids.copy_(torch.where(input_ids < 0, future_token_ids[slot], input_ids))


def rank_device(server_args: ServerArgs, tp_rank: int) -> torch.device:
    """The device of TP rank ``tp_rank``: the CPU, or GPU ``base_gpu_id + local rank`` where the
    local rank counts the ranks of this node (``tp_size / nnodes`` per node)."""
    if server_args.device != "cuda":
        return torch.device("cpu")
    per_node = server_args.tp_size // server_args.nnodes
    return torch.device("cuda", server_args.base_gpu_id + tp_rank % per_node)


class IndexerStreamPolicy:
    """Which forwards run the CSA indexer branch on a second CUDA stream (``fb.indexer_stream``).

    On H200 the overlap gains ~7% at bs 1-4 and loses 12-20% at bs 8-32 (benchmark/RESULTS.md),
    where the kernels already fill the GPU, hence the bound on the tokens of a forward.

    Args:
        device: the runner's device (no stream on CPU).
        max_tokens: use the stream only for forwards of at most this many tokens
            (``--indexer-stream-max-bs``; 0 = never).

    Attributes:
        stream: the second stream, or ``None`` (off, or not CUDA).
    """

    def __init__(self, device: torch.device, max_tokens: int) -> None:
        self.device = device
        self.max_tokens = int(max_tokens)
        self.stream: torch.cuda.Stream | None = None
        self.set_enabled(self.max_tokens > 0)

    def set_enabled(self, enabled: bool) -> None:
        """Create the stream (``True``, CUDA only; an existing one is kept) or drop it (``False``).
        Graphs are keyed by the stream mode, so switching keeps both sets."""
        if self.device.type != "cuda" or not enabled:
            self.stream = None
        elif self.stream is None:
            self.stream = torch.cuda.Stream(self.device)

    def for_tokens(self, num_tokens: int) -> torch.cuda.Stream | None:
        """The stream for a forward of ``num_tokens`` tokens, or ``None`` (run inline): on when the
        stream exists and ``num_tokens <= max_tokens``."""
        s = self.stream
        return s if s is not None and num_tokens <= self.max_tokens else None


class ModelRunner:
    """Model + KV pool + the forward's metadata builder (SGLang's ``ModelRunner``).

    Args:
        model_config: the parsed config.
        server_args: the runtime options it reads: ``model_path`` (checkpoint directory; ``None``
            is the embedded default model; not read with ``load_format="dummy"``), ``device``,
            ``dtype``, ``page_size``, ``max_total_tokens`` (KV capacity in tokens; ``None`` = from
            memory), ``max_running_requests`` (request slots; ``None`` = 256 on CUDA, 64 on CPU),
            ``context_length`` (``None`` = the model's), ``load_format``, ``mem_fraction_static``
            (share of free device memory for the KV pool when ``max_total_tokens`` is not given,
            CUDA), ``random_seed`` (of dummy weights), ``kv_cache_dtype`` (storage format of the KV
            entries, ``DSV4KVPool``), ``enable_fp4_indexer``, ``resume_interval`` (the radix cache
            keeps a resume state every that many cached blocks; the pools plan window pages for
            it), ``cuda_graph_max_bs`` (``None`` = ``min(128, max_running_requests)``),
            ``disable_cuda_graph`` and ``indexer_stream_max_bs`` (:class:`IndexerStreamPolicy`).
            Tests and benchmarks build one with e.g. ``ServerArgs(device="cpu",
            load_format="dummy", page_size=128, max_total_tokens=4096)``; ``quantization``
            (``--quantization``: ``None`` = the checkpoint's ``quantization_config`` on CUDA;
            ``"fp8"``: FP8 linears + FP4 experts; ``"none"``: dequantize at load); ``tp_size``,
            ``ep_size``, ``dist_init_addr``, ``dist_timeout``, ``nnodes``, ``base_gpu_id``
            (tensor / expert parallel, module docstring).
        tp_rank: this process's tensor-parallel rank (0: the scheduler's runner, which broadcasts
            every forward; others: ``tp_worker_process.py``). It joins the TP group here.

    Raises:
        ValueError: bad ``kv_cache_dtype``, ``model_path`` unusable, or a KV budget too small for
            one block page and the request slots (from the planner).
    """

    def __init__(self, model_config: ModelConfig, server_args: ServerArgs, tp_rank: int = 0) -> None:
        sa = server_args
        self.mc = model_config
        self.server_args = sa
        # rank 0 holds it over a step's collectives (broadcast + forward), so a stop can tell the
        # other ranks apart from the middle of a step (:meth:`shutdown_tp_ranks`)
        self._step_lock = threading.Lock()
        self._mid_step = False
        placed = sa.tp_size > 1 or sa.base_gpu_id > 0  # else the current device, as before
        self.device = rank_device(sa, tp_rank) if placed else torch.device(sa.device)
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)
        self.parallel = ParallelConfig(sa.tp_size, tp_rank, sa.ep_size)
        self.tp: TPGroup = init_tp_group(self.parallel, self.device, sa.dist_init_addr, sa.dist_timeout)
        if self.device.type == "cpu":
            # One intra-op thread by default: the server's processes and the clients share a few
            # cores, and oversubscribed OpenMP pools make small ops 1000x slower (measured:
            # index_add_ on [1, 128] takes 85 ms with 2 threads on a loaded 2-core box, 6 us with 1).
            torch.set_num_threads(int(os.environ.get("SGLANG_V4_CPU_THREADS", "1")))
        self.dtype = _DTYPES[sa.dtype]
        self.forward_ct = 0
        self.inject_oom_forwards = {
            int(x) for x in os.environ.get(INJECT_OOM_ENV, "").split(",") if x.strip()
        }
        self.page_size = int(sa.page_size)
        self.max_running_requests = int(
            sa.max_running_requests or (256 if self.device.type == "cuda" else 64)
        )
        self.context_len = int(sa.context_length or model_config.context_length)
        t0 = time.perf_counter()
        model_path = sa.model_path
        if model_path is None and sa.load_format != "dummy":
            from sglang_v4.tools.default_model import ensure_default_model

            model_path = ensure_default_model()
        #: the checkpoint the weights come from (``None``: dummy weights); a weight update changes it
        self.weights_path: str | None = model_path if sa.load_format != "dummy" else None
        self.model = get_model(
            model_config,
            model_path,
            self.device,
            self.dtype,
            sa.load_format,
            sa.quantization,
            int(sa.random_seed or 0),
            tp=self.tp,
        )
        logger.info(
            "Model loaded in %.1f s (%s, %s, load_format=%s%s)",
            time.perf_counter() - t0,
            self.device,
            sa.dtype,
            sa.load_format,
            f", {self.parallel.describe()}" if self.tp.size > 1 else "",
        )
        self.kv_cache_dtype = normalize_kv_cache_dtype(sa.kv_cache_dtype, self.dtype)
        self.fp4_indexer = bool(sa.enable_fp4_indexer)
        self.resume_interval = int(sa.resume_interval)
        cps = int(sa.chunked_prefill_size or 0)
        self.chunked_prefill_size = self.context_len if cps <= 0 else min(cps, self.context_len)
        # A prefill chunk holds a window page per ``sliding_window`` positions it computes until
        # its forward ends (the spans behind its last window are freed afterwards). The reserve
        # for those transient pages is ``_EXTRA_WINDOW_PAGES`` (+ the request's own), so the chunk
        # is capped to ``_EXTRA_WINDOW_PAGES * sliding_window`` tokens, even with chunking
        # disabled (-1): a chunk of ``e * W`` tokens touches at most ``e + 2`` spans. Capping the
        # chunk rather than sizing the reserve for the largest chunk keeps the reserve's memory
        # bounded (a window page's resume snapshot does not shrink with the window, so a reserve
        # for an unchunked prompt at ``sliding_window`` 1 would cost a snapshot per token), and
        # chunk boundaries do not change the outputs. With ``sliding_window`` 128 the cap is
        # 8192 tokens.
        window_cap = self._EXTRA_WINDOW_PAGES * int(model_config.sliding_window)
        if self.chunked_prefill_size > window_cap:
            logger.info(
                "prefill chunk lowered from %d to %d tokens (%d window pages x sliding_window %d)",
                self.chunked_prefill_size,
                window_cap,
                self._EXTRA_WINDOW_PAGES,
                int(model_config.sliding_window),
            )
            self.chunked_prefill_size = window_cap
        self.workspace: WorkspacePlan | None = None
        self.plan = self._size_pool(sa.max_total_tokens, sa.mem_fraction_static)
        self.max_total_tokens = self.plan.kv_capacity_tokens
        logger.info(self.plan.summary())
        short = self.plan.capacity_warning()
        if short is not None and self.tp.rank == 0:
            logger.warning(short)
        self.pool = DSV4KVPool(
            model_config,
            self.page_size,
            self.plan.num_block_pages,
            self.plan.num_window_pages,
            self.max_running_requests,
            self.dtype,
            self.device,
            kv_cache_dtype=self.kv_cache_dtype,
            fp4_indexer=self.fp4_indexer,
            max_pages_per_req=-(-self.context_len // self.page_size),
        )
        if self.tp.size > 1:
            from sglang_v4.model_loader.weight_loader import weight_nbytes

            logger.info(
                "TP rank %d on %s: weights %.2f GiB (its shard) + KV pools %.2f GiB (replicated)",
                self.parallel.tp_rank,
                self.device,
                weight_nbytes(self.model) / 2**30,
                self.pool.memory_bytes() / 2**30,
            )
            if self.tp.is_first_rank:
                self.pool.record_state_ops()  # replayed on the other ranks with each forward
        logger.info(
            "KV pool (%s%s): %d block pages (%d tokens), %d window pages of %d positions, "
            "%d request slots, %.1f MiB allocated, %d B page padding",
            self.kv_cache_dtype,
            " + fp4 indexer" if self.fp4_indexer else "",
            self.plan.num_block_pages,
            self.max_total_tokens,
            self.plan.num_window_pages,
            model_config.sliding_window,
            self.max_running_requests,
            self.pool.memory_bytes() / 2**20,
            self.pool.fragmentation_bytes(),
        )
        self.builder = ForwardBatchBuilder(**self._builder_args(), req_to_page=self.pool.req_to_page)
        # ---- CUDA execution: indexer stream + decode / extend CUDA graphs (cuda_graph_runner.py) ----
        self.indexer_streams = IndexerStreamPolicy(self.device, sa.indexer_stream_max_bs)
        self.cuda_graph_runner: CudaGraphRunner | None = None
        if self.device.type == "cuda":
            if sa.disable_cuda_graph:
                logger.info("CUDA graphs disabled (--disable-cuda-graph)")
            elif not ops.triton_enabled():
                logger.warning("CUDA graphs disabled: the Triton kernels are off (the torch reference syncs)")
            else:
                max_bs = int(sa.cuda_graph_max_bs or min(128, self.max_running_requests))
                bs_list = None
                if sa.cuda_graph_bs:  # SGLang's --cuda-graph-bs: exactly these sizes (clamped to the cap)
                    cap = int(sa.cuda_graph_max_bs or self.max_running_requests)
                    bs_list = sorted({min(int(b), cap) for b in sa.cuda_graph_bs})
                    max_bs = bs_list[-1]
                self.cuda_graph_runner = self.create_cuda_graph_runner(
                    max_bs,
                    max_ctx=self.context_len,
                    bs_list=bs_list,
                    max_extend_tokens=int(sa.cuda_graph_max_extend_tokens),
                )
                logger.info(
                    "CUDA graphs on: decode bs buckets %s, extend (T, B) shapes %s, every context up to %d",
                    self.cuda_graph_runner.bs_list,
                    self.cuda_graph_runner.extend_shapes,
                    self.context_len,
                )

    def create_cuda_graph_runner(
        self,
        max_bs: int,
        max_ctx: int,
        use_graphs: bool = True,
        bs_list: list[int] | None = None,
        max_extend_tokens: int = 0,
    ) -> CudaGraphRunner:
        """A :class:`CudaGraphRunner` over this runner's model, pool, metadata builder and
        indexer-stream policy (arguments as there)."""
        g = CudaGraphRunner(
            self.model,
            self.pool,
            self.builder,
            self.indexer_streams,
            self.mc.vocab_size,
            max_bs=max_bs,
            max_ctx=max_ctx,
            use_graphs=use_graphs,
            bs_list=bs_list,
            max_extend_tokens=max_extend_tokens,
        )
        if self.tp.size > 1:
            g.eager_fallback = False
            if self.tp.is_first_rank:
                g.before_capture_all = lambda: self.tp.broadcast_object(CaptureGraphs())
        return g

    # window pages beyond the per-request ones: a prefill chunk's transient spans (64 x 128
    # positions covers an 8192-token chunk; the chunk is capped to 64 x sliding_window tokens)
    _EXTRA_WINDOW_PAGES = 64
    # window pages per running request: 2 live spans while decoding + slack for a chunk boundary
    _WINDOW_PAGES_PER_REQUEST = 4
    # CPU default capacity cap (tokens) when neither --max-total-tokens nor a device budget applies
    _CPU_DEFAULT_MAX_TOKENS = 131072

    def _plan_kwargs(self) -> dict:
        return dict(
            page_size=self.page_size,
            context_length=self.context_len,
            max_running_requests=self.max_running_requests,
            window_pages_per_request=self._WINDOW_PAGES_PER_REQUEST,
            window_pages_per_block=1.0 / self.resume_interval,
            extra_window_pages=self._EXTRA_WINDOW_PAGES,
        )

    def _bytes_per_block_page(self) -> int:
        """Bytes one block page costs with its share of resume-state window pages (all layers,
        class-padded, in this runner's KV format; ``kv_spec.build_kv_layout``)."""
        lay = build_kv_layout(self.mc, self.kv_cache_dtype, self.fp4_indexer, self.page_size)
        return lay.block_page_bytes + lay.window_page_bytes // self.resume_interval

    def _builder_args(self) -> dict:
        """``ForwardBatchBuilder`` arguments of this model (page size, window, ratios, device)."""
        mc = self.mc
        return dict(
            page_size=self.page_size,
            window=mc.sliding_window,
            csa_ratio=mc.csa_ratio if mc.csa_layers else None,
            hca_ratio=mc.hca_ratio if mc.hca_layers else None,
            device=self.device,
        )

    def _size_pool(self, max_total_tokens: int | None, mem_fraction: float | None) -> KVPlan:
        """Plan the pools with :func:`~sglang_v4.mem_cache.kv_planner.plan_kv_pools`.

        On CUDA the forward's workspace is measured first (:mod:`.workspace`: a maximal dummy
        forward at full context, the prefill chunk lowered if it does not fit) and reserved out of
        ``mem_fraction_static`` (default 0.85) of the free device memory after the weights; the
        pools get the rest, or ``max_total_tokens`` when given (a warning if that leaves less
        than the workspace). On CPU nothing is measured: the capacity is ``max_total_tokens`` or
        ``max(context_len, 4 pages)`` rounded up to whole pages and capped at 131,072 tokens (the
        tiny default model: ~0.2 GiB of fp32 KV); ``mem_fraction_static`` is not used there (a
        warning says so). ``max_total_tokens`` is rounded down to whole pages, as SGLang rounds
        its token budget (:func:`~sglang_v4.mem_cache.kv_planner.plan_kv_pools`).
        """
        budget = None
        tokens = max_total_tokens
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            avail = int(free * (mem_fraction if mem_fraction is not None else 0.85))
            # every rank holds the same (replicated) pools and runs the same workspace probe (its
            # collectives must pair up): plan for the tightest GPU
            avail = self.tp.min_int(avail)
            sa = self.server_args
            self.workspace = plan_workspace(
                self.model,
                self.mc,
                self._builder_args(),
                dict(
                    compute_dtype=self.dtype,
                    device=self.device,
                    kv_cache_dtype=self.kv_cache_dtype,
                    fp4_indexer=self.fp4_indexer,
                ),
                self.context_len,
                self.chunked_prefill_size,
                self.max_running_requests,
                avail,
                with_graphs=not sa.disable_cuda_graph and ops.triton_enabled(),
                graph_extend_tokens=int(sa.cuda_graph_max_extend_tokens),
            )
            self.chunked_prefill_size = self.workspace.chunked_prefill_size
            if tokens is None:
                budget = avail - self.workspace.reserved_bytes
        elif tokens is None:  # whole pages: the context (at least 4 pages), capped
            ps = self.page_size
            pages = min(-(-max(self.context_len, 4 * ps) // ps), self._CPU_DEFAULT_MAX_TOKENS // ps)
            tokens = pages * ps
        if self.device.type != "cuda" and mem_fraction is not None and self.tp.rank == 0:
            logger.warning(
                "--mem-fraction-static %s is not used on %s: it sizes the KV pool from free GPU memory; "
                "the pool holds %d tokens (set it with --max-total-tokens)",
                mem_fraction,
                self.device.type,
                tokens,
            )
        plan = plan_kv_pools(
            self.mc,
            self.kv_cache_dtype,
            self.fp4_indexer,
            budget_bytes=budget,
            max_total_tokens=tokens,
            **self._plan_kwargs(),
        )
        if budget is None and self.workspace is not None:
            free, _ = torch.cuda.mem_get_info(self.device)
            if plan.allocated_bytes + self.workspace.reserved_bytes > free:
                logger.warning(
                    "--max-total-tokens: the pools (%d B) and the forward workspace (%d B) exceed the "
                    "free device memory (%d B); a large batch may run out of memory",
                    plan.allocated_bytes,
                    self.workspace.reserved_bytes,
                    free,
                )
        return plan

    def kv_plan_info(self) -> dict:
        """KV sizing facts for ``get_server_info()["kv_plan"]``: ``KVPlan.to_dict()`` (capacity,
        max context, max concurrency, size classes, ...) with ``fragmentation_bytes`` set to the
        page padding the pool really allocated (``DSV4KVPool.fragmentation_bytes``; 0 for float
        storage) and ``pool_bytes`` (``DSV4KVPool.memory_bytes``)."""
        d = self.plan.to_dict()
        d["planned_fragmentation_bytes"] = d["fragmentation_bytes"]
        d["fragmentation_bytes"] = self.pool.fragmentation_bytes()
        d["pool_bytes"] = self.pool.memory_bytes()
        d["fragmentation_ratio"] = d["fragmentation_bytes"] / max(1, d["pool_bytes"])
        return d

    def build_batch(self, reqs: list[ReqForwardInput]) -> ForwardBatch:
        """Eager :class:`ForwardBatch` of ``reqs`` on the runner's device, with the indexer stream
        the policy gives a forward of that many tokens.

        Raises:
            ValueError: an empty batch or request, a missing block / window page.
        """
        num_tokens = sum(len(r.input_ids) for r in reqs)
        return self.builder.build(reqs, indexer_stream=self.indexer_streams.for_tokens(num_tokens))

    def forward(
        self, reqs: list[ReqForwardInput], future_token_ids: torch.Tensor | None = None
    ) -> tuple[ForwardBatch, torch.Tensor]:
        """Build the batch and run the model. Returns the batch and ``[K, vocab]`` fp32 logits.

        Batches that fit a CUDA-graph key replay a captured graph
        (:class:`~sglang_v4.model_executor.cuda_graph_runner.CudaGraphRunner`: decode batches up
        to ``--cuda-graph-max-bs`` requests; extend, prefix-hit and mixed batches up to
        ``--cuda-graph-max-extend-tokens`` tokens with at most one logits row per request);
        everything else (and everything on CPU) runs eagerly. Negative input ids are future placeholders,
        resolved on the device from ``future_token_ids`` (:func:`resolve_future_token_ids`) before
        the model reads them. With tensor parallelism (on rank 0) the step is first broadcast to
        the other ranks (:class:`ForwardStep`), which run it too; rank 0 then broadcasts the
        resolved input ids over the device group (only rank 0 holds the future map).

        Raises:
            torch.OutOfMemoryError: the device ran out of memory (or the fault-injection hook
                :data:`INJECT_OOM_ENV` fired); the caller recovers.
            ValueError: as :meth:`build_batch`.
        """
        self.forward_ct += 1
        if self.forward_ct in self.inject_oom_forwards:
            raise torch.OutOfMemoryError(
                f"out of memory injected in forward {self.forward_ct} ({INJECT_OOM_ENV})"
            )
        has_future = future_token_ids is not None and any(r.input_ids[-1] < 0 for r in reqs)
        g = self.cuda_graph_runner
        use_graph = g is not None and g.can_run(reqs)
        resolve = None
        if has_future:
            fmap = future_token_ids
            tp = self.tp

            def resolve(fb: ForwardBatch) -> None:
                resolve_future_token_ids(fb.input_ids, fmap)
                tp.broadcast_tensor(fb.input_ids)

        if self.tp.size == 1:
            return self._forward(reqs, use_graph, resolve)
        with self._step_lock:
            self._mid_step = True  # stays set if an exception (a stop signal) leaves the step
            self.tp.broadcast_object(ForwardStep(reqs, self.pool.take_state_ops(), use_graph, has_future))
            out = self._forward(reqs, use_graph, resolve)
            self._mid_step = False
        return out

    def shutdown_tp_ranks(self, timeout_s: float = 2.0) -> bool:
        """Rank 0 stopping: tell the other TP ranks to exit (:class:`Shutdown`), so they leave
        their wait for the next step and exit 0 with their finalizers run, instead of being
        killed inside a collective. Only between steps: if a step is still running after
        ``timeout_s``, or an exception (the stop signal) left one unfinished, nothing is sent and
        the ranks are left to the launcher's SIGTERM / SIGKILL. Further forwards block afterwards.

        Returns:
            whether :class:`Shutdown` was sent (False on one rank, or on a rank other than 0).
        """
        if self.tp.size == 1 or self.parallel.tp_rank != 0:
            return False
        if not self._step_lock.acquire(timeout=timeout_s) or self._mid_step:
            logger.warning("TP shutdown: stopped inside a step; the other ranks are stopped by signal")
            return False
        self.tp.broadcast_object(Shutdown())
        return True

    def update_weights_from_disk(self, model_path: str) -> None:
        """Replace the weights, in place, by those of the checkpoint at ``model_path`` (the same
        architecture), on every TP rank (:class:`UpdateWeights`). Call between steps.

        Raises:
            ValueError: the config or a tensor does not match (checked before anything is
                written: nothing changed), or the reload failed (the previous weights are back);
                :mod:`sglang_v4.model_loader.weight_update`.
        """
        from sglang_v4.model_loader.weight_update import check_update, swap_weights

        check_update(self.mc, model_path, self.server_args.model_override_args())
        previous = self.weights_path
        with self._step_lock:
            if self.tp.size > 1:
                self.tp.broadcast_object(UpdateWeights(model_path, previous))
            swap_weights(self.model, self.tp, model_path, previous)
        self.weights_path = model_path

    def run_weight_update(self, msg: UpdateWeights) -> None:
        """A non-zero TP rank's share of :meth:`update_weights_from_disk` (rank 0 reports errors)."""
        from sglang_v4.model_loader.weight_update import swap_weights

        try:
            swap_weights(self.model, self.tp, msg.model_path, msg.previous_path)
            self.weights_path = msg.model_path
        except ValueError as e:
            logger.error("TP rank %d: %s", self.parallel.tp_rank, e)

    def get_weights_by_name(self, name: str, truncate_size: int = 100) -> list:
        """Parameter ``name``'s first rows (:func:`~sglang_v4.model_loader.weight_update.weights_by_name`)."""
        from sglang_v4.model_loader.weight_update import weights_by_name

        return weights_by_name(self.model, name, truncate_size, self.tp.size)

    def run_broadcast_step(self, step: ForwardStep) -> None:
        """A non-zero TP rank's share of rank 0's :meth:`forward`: replay the request-state
        operations, then run the same forward, on the same path (graph replay or eager), taking
        the resolved future token ids from rank 0; its logits are not used.

        Raises:
            RuntimeError: rank 0 replays a CUDA graph but this rank has no graph runner.
        """
        for name, args in step.state_ops:
            self.pool.apply_state_op(name, args)
        if step.use_graph and self.cuda_graph_runner is None:
            raise RuntimeError(
                f"TP rank {self.parallel.tp_rank}: rank 0 replays a CUDA graph, this rank has none"
            )
        tp = self.tp

        def receive(fb: ForwardBatch) -> None:
            tp.broadcast_tensor(fb.input_ids)

        self._forward(step.reqs, step.use_graph, receive if step.future_ids else None)

    def _forward(
        self,
        reqs: list[ReqForwardInput],
        use_graph: bool,
        resolve: Callable[[ForwardBatch], None] | None,
    ) -> tuple[ForwardBatch, torch.Tensor]:
        if use_graph:
            assert self.cuda_graph_runner is not None
            return self.cuda_graph_runner.replay(reqs, before_replay=resolve)
        fb = self.build_batch(reqs)
        if resolve is not None:
            resolve(fb)
        logits = self.model(fb, self.pool)
        return fb, logits
