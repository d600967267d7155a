"""ModelRunner: owns the model weights and the KV pool, runs one forward per scheduler step.

Weights come from a checkpoint directory (``load_format="auto"``, official or HF names; FP8/FP4
kept quantized on CUDA, dequantized on CPU unless ``--quantization`` says otherwise) or are
initialised randomly on the device (``load_format="dummy"``, as SGLang and vLLM call it, for
benchmarks); ``sglang_v4.model_loader.builder.get_model``. The KV pool is sized by the
memory planner (``mem_cache/kv_layout.py:plan_kv_pools``) from ``--max-total-tokens`` or, on CUDA,
from ``--mem-fraction-static`` of the free memory after the weights are loaded, in the chosen KV
format (fp32/bf16, or fp8 entries with an fp8/fp4 indexer). On CUDA, decode batches replay CUDA
graphs (``cuda_graph_runner.py``) and CSA layers run the indexer on a second stream.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.kv_layout import KVPlan, build_kv_layout, normalize_kv_cache_dtype, plan_kv_pools
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang_v4.model_executor.forward_batch import ForwardBatch, ReqForwardInput, build_forward_batch
from sglang_v4.model_loader.builder import get_model

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelRunner:
    """Model + KV pool.

    Args:
        model_config: the parsed config.
        model_path: checkpoint directory (ignored with ``load_format="dummy"``).
        device: ``"cpu"`` or ``"cuda"``.
        dtype: ``"float32"`` or ``"bfloat16"``.
        page_size: tokens per logical block.
        max_total_tokens: KV capacity in tokens (block pages x page_size); ``None`` = from memory.
        max_running_requests: request slots.
        context_len: longest sequence.
        load_format: ``"auto"`` or ``"dummy"``.
        mem_fraction_static: fraction of free device memory for the KV pool when
            ``max_total_tokens`` is not given (CUDA).
        seed: seed of dummy weights.
        kv_cache_dtype: ``"auto"`` (= ``dtype``), ``"fp32"``, ``"bf16"`` or ``"fp8_e4m3"``
            (``--kv-cache-dtype``): storage format of the KV entries (``DSV4KVPool``).
        fp4_indexer: fp4 e2m1 CSA indexer keys (``--enable-fp4-indexer``).
        resume_interval: the radix cache keeps a resume state (one window page) every
            ``resume_interval`` cached blocks; the pools plan window pages for that.
        cuda_graph_max_bs: largest decode batch replayed from a CUDA graph
            (``--cuda-graph-max-bs``; ``None`` = ``min(128, max_running_requests)``). CUDA only.
        disable_cuda_graph: run decode eagerly (``--disable-cuda-graph``).
        enable_indexer_stream: run the CSA indexer branch on a second CUDA stream. CUDA only.
        indexer_stream_max_bs: use that stream only for forwards of at most this many tokens
            (``--indexer-stream-max-bs``; 0 = never). On H200 the overlap gains ~7% at bs 1-4 and
            loses 12-20% at bs 8-32 (benchmark/RESULTS.md), where the kernels already fill the GPU.
        quantization: ``--quantization`` (``None``: the checkpoint's ``quantization_config`` on
            CUDA; ``"fp8"``: FP8 linears + FP4 experts; ``"none"``: dequantize at load).

    Raises:
        ValueError: bad ``kv_cache_dtype`` / ``resume_interval``, or a KV budget too small for
            one block page and the request slots (from the planner).
    """

    def __init__(
        self,
        model_config: ModelConfig,
        model_path: str | None,
        device: str,
        dtype: str,
        page_size: int,
        max_total_tokens: int | None,
        max_running_requests: int,
        context_len: int,
        load_format: str = "auto",
        mem_fraction_static: float | None = None,
        seed: int = 0,
        kv_cache_dtype: str = "auto",
        fp4_indexer: bool = False,
        resume_interval: int = 1,
        cuda_graph_max_bs: int | None = None,
        disable_cuda_graph: bool = False,
        enable_indexer_stream: bool = True,
        indexer_stream_max_bs: int = 4,
        quantization: str | None = None,
    ) -> None:
        self.mc = model_config
        self.device = torch.device(device)
        if self.device.type == "cpu":
            # One intra-op thread by default: the server's processes and the clients share a few
            # cores, and oversubscribed OpenMP pools make small ops 1000x slower (measured:
            # index_add_ on [1, 128] takes 85 ms with 2 threads on a loaded 2-core box, 6 us with 1).
            torch.set_num_threads(int(os.environ.get("SGLANG_V4_CPU_THREADS", "1")))
        self.dtype = _DTYPES[dtype]
        self.page_size = page_size
        t0 = time.perf_counter()
        self.model = get_model(
            model_config, model_path, self.device, self.dtype, load_format, quantization, seed
        )
        logger.info(
            "Model loaded in %.1f s (%s, %s, load_format=%s)",
            time.perf_counter() - t0,
            device,
            dtype,
            load_format,
        )
        self.max_running_requests = max_running_requests
        self.context_len = context_len
        self.kv_cache_dtype = normalize_kv_cache_dtype(kv_cache_dtype, self.dtype)
        self.fp4_indexer = bool(fp4_indexer)
        if int(resume_interval) < 1:
            raise ValueError(f"resume_interval: must be >= 1, got {resume_interval}")
        self.resume_interval = int(resume_interval)
        self.plan = self._size_pool(max_total_tokens, mem_fraction_static)
        self.max_total_tokens = self.plan.kv_capacity_tokens
        logger.info(self.plan.summary())
        self.pool = DSV4KVPool(
            model_config,
            page_size,
            self.plan.num_block_pages,
            self.plan.num_window_pages,
            max_running_requests,
            context_len,
            self.dtype,
            self.device,
            kv_cache_dtype=self.kv_cache_dtype,
            fp4_indexer=self.fp4_indexer,
        )
        logger.info(
            "KV pool (%s%s): %d block pages (%d tokens), %d window pages of %d positions, "
            "%d request slots, %.1f MiB allocated, %d B page padding",
            self.kv_cache_dtype,
            " + fp4 indexer" if self.fp4_indexer else "",
            self.plan.num_block_pages,
            self.max_total_tokens,
            self.plan.num_window_pages,
            model_config.sliding_window,
            max_running_requests,
            self.pool.memory_bytes() / 2**20,
            self.pool.fragmentation_bytes(),
        )
        # ---- CUDA execution: indexer stream + decode CUDA graphs (cuda_graph_runner.py) ----
        # (kept as the last block of __init__; owned by the CUDA-runner work)
        self.indexer_stream: torch.cuda.Stream | None = None
        self.indexer_stream_max_bs = int(indexer_stream_max_bs)
        self.cuda_graph_runner: CudaGraphRunner | None = None
        if self.device.type == "cuda":
            self.set_indexer_stream(enable_indexer_stream and self.indexer_stream_max_bs > 0)
            if disable_cuda_graph:
                logger.info("CUDA graphs disabled (--disable-cuda-graph)")
            elif self.pool.quantized_main or self.pool.quantized_indexer:
                logger.warning(
                    "CUDA graphs disabled: quantized KV (%s%s) takes the reference path, which syncs",
                    self.kv_cache_dtype,
                    " + fp4 indexer" if self.fp4_indexer else "",
                )
            else:
                max_bs = int(cuda_graph_max_bs or min(128, max_running_requests))
                self.cuda_graph_runner = CudaGraphRunner(
                    self, max_bs=max_bs, max_ctx=min(1 << 17, max(1024, context_len))
                )
                logger.info(
                    "CUDA graphs on for decode: bs buckets %s, context buckets %s (captured lazily)",
                    self.cuda_graph_runner.bs_list,
                    self.cuda_graph_runner.ctx_list,
                )
        # ---- end of the CUDA execution block ----

    # window pages beyond the per-request ones: a prefill chunk's transient spans (64 x 128
    # positions covers an 8192-token chunk)
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
        class-padded, in this runner's KV format; ``kv_layout.build_kv_layout``)."""
        lay = build_kv_layout(self.mc, self.kv_cache_dtype, self.fp4_indexer, self.page_size)
        return lay.block_page_bytes + lay.window_page_bytes // self.resume_interval

    def _size_pool(self, max_total_tokens: int | None, mem_fraction: float | None) -> KVPlan:
        """Plan the pools with :func:`~sglang_v4.mem_cache.kv_layout.plan_kv_pools`.

        ``max_total_tokens`` given: that capacity (rounded up to whole pages). Otherwise on CUDA
        the budget is ``mem_fraction_static`` (default 0.85) of the free device memory after the
        weights are loaded; on CPU the capacity is ``max(context_len, 4 pages)`` capped at
        131,072 tokens (the tiny default model: ~0.2 GiB of fp32 KV).
        """
        budget = None
        tokens = max_total_tokens
        if tokens is None:
            if self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
                budget = int(free * (mem_fraction if mem_fraction is not None else 0.85))
            else:
                tokens = min(max(self.context_len, 4 * self.page_size), self._CPU_DEFAULT_MAX_TOKENS)
        return plan_kv_pools(
            self.mc,
            self.kv_cache_dtype,
            self.fp4_indexer,
            budget_bytes=budget,
            max_total_tokens=tokens,
            **self._plan_kwargs(),
        )

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
        """Host-built :class:`ForwardBatch` of ``reqs`` on the runner's device; on CUDA it carries
        the indexer stream in ``extras["indexer_stream"]`` when the second stream is on."""
        mc = self.mc
        fb = build_forward_batch(
            reqs,
            self.page_size,
            mc.sliding_window,
            mc.csa_ratio if mc.csa_layers else None,
            mc.hca_ratio if mc.hca_layers else None,
            self.device,
        )
        stream = self.indexer_stream_for(sum(len(r.input_ids) for r in reqs))
        if stream is not None:
            fb.extras["indexer_stream"] = stream
        return fb

    def indexer_stream_for(self, num_tokens: int) -> torch.cuda.Stream | None:
        """The indexer stream for a forward of ``num_tokens`` tokens, or ``None`` (run inline):
        on when the stream exists and ``num_tokens <= indexer_stream_max_bs``."""
        s = self.indexer_stream
        return s if s is not None and num_tokens <= self.indexer_stream_max_bs else None

    def set_indexer_stream(self, enabled: bool) -> None:
        """Run the CSA indexer branch on a second CUDA stream (``True``) or inline (``False``).
        No effect on CPU. Graphs are keyed by this setting, so switching keeps both sets."""
        if self.device.type != "cuda" or not enabled:
            self.indexer_stream = None
        elif getattr(self, "indexer_stream", None) is None:
            self.indexer_stream = torch.cuda.Stream(self.device)

    def forward(self, reqs: list[ReqForwardInput]) -> tuple[ForwardBatch, torch.Tensor]:
        """Build the batch and run the model. Returns the batch and ``[K, vocab]`` fp32 logits.

        Decode batches (one new token per request) that fit a CUDA-graph bucket replay a captured
        graph (:class:`~sglang_v4.model_executor.cuda_graph_runner.CudaGraphRunner`); everything
        else (and everything on CPU) runs eagerly.
        """
        g = getattr(self, "cuda_graph_runner", None)
        if g is not None and g.can_run(reqs):
            return g.replay(reqs)
        fb = self.build_batch(reqs)
        logits = self.model(fb, self.pool)
        return fb, logits
