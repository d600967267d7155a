"""Forward workspace planning: measure the largest forward's memory before sizing the KV pools.

As vLLM's and SGLang's profile runs do, the model runner runs a *maximal dummy forward* on the
device before it allocates the KV pools, measures its peak memory above the weights
(``torch.cuda.max_memory_allocated``), and reserves that much, so no batch the scheduler can form
runs out of memory inside a forward (activations, MoE buffers, the attention / indexer workspace,
logits).

The maximal forward is a mixed batch at the model's full context: one prefill chunk of
``chunked_prefill_size`` tokens ending at position ``context_len - 1`` plus ``max_decode_bs``
one-token requests at that position (what a step of chunked prefill with the decode batch
riding along can be), in the chosen weight format and KV format. Context matters: the
compressed entries a token attends to and scores grow with its position, and with them some
kernels' workspace (the indexer's, bounded by ``SCRATCH_ELEMS``). The dummy forward runs on a
scratch pool of one page per page space whose page tables point every block at the reserved page
0, so it reads and writes nothing a request will own, and the real pools do not exist yet. With
CUDA graphs, the graphs' private memory pool (shared by every key) holds another copy of the
largest captured forward's activations: the largest decode batch alone and, with extend graphs,
the largest extend key's forward (``--cuda-graph-max-extend-tokens`` tokens of at most that many
requests) are measured, and the larger is reserved too.

If the chunk's workspace takes more than half of the memory left after the weights (or the dummy
forward runs out of memory), the chunk size is halved until it fits, and the plan records it (the
scheduler then prefills in smaller chunks); if even a ``page_size`` chunk does not fit, start-up
fails with a message naming the bytes. On the CPU nothing is measured (the existing planner
sizes the pools from ``--max-total-tokens`` or the context).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import ForwardBatch, ForwardBatchBuilder, ReqForwardInput

logger = logging.getLogger(__name__)

__all__ = ["WorkspacePlan", "dummy_requests", "plan_workspace", "WORKSPACE_MARGIN"]

#: Reserved = measured peak x (1 + margin): allocator rounding and fragmentation of the caching
#: allocator between forwards of different shapes.
WORKSPACE_MARGIN = 0.1


@dataclass
class WorkspacePlan:
    """What :func:`plan_workspace` measured and decided.

    Attributes:
        chunked_prefill_size: the prefill chunk the forward's workspace was measured for (the
            requested one, or lower if that did not fit).
        requested_chunk: the chunk size asked for.
        prefill_bytes: peak bytes above the resident state of the maximal mixed forward.
        decode_bytes: peak bytes of the largest forward a CUDA graph captures (the largest decode
            batch, or the largest extend key's forward if larger), reserved again for the graphs'
            memory pool when graphs are on; 0 otherwise.
        reserved_bytes: what the KV pools must leave free: ``(prefill + decode) * (1 + margin)``.
    """

    chunked_prefill_size: int
    requested_chunk: int
    prefill_bytes: int
    decode_bytes: int
    reserved_bytes: int

    @property
    def lowered(self) -> bool:
        """The chunk was lowered below the one asked for so that the workspace fits the device."""
        return self.chunked_prefill_size < self.requested_chunk

    def summary(self) -> str:
        """One log line."""
        s = (
            f"forward workspace: {self.prefill_bytes / 2**30:.2f} GiB (chunk {self.chunked_prefill_size} "
            f"tokens + decode batch at full context), {self.decode_bytes / 2**30:.2f} GiB (CUDA graphs); "
            f"reserved {self.reserved_bytes / 2**30:.2f} GiB"
        )
        if self.lowered:
            s += (
                f"; chunked prefill lowered from {self.requested_chunk} to {self.chunked_prefill_size} tokens"
            )
        return s


def dummy_requests(
    model_config: ModelConfig, page_size: int, context_len: int, chunk: int, num_decode: int
) -> list[ReqForwardInput]:
    """The maximal mixed batch: a ``chunk``-token extend ending at position ``context_len - 1``
    and ``num_decode`` one-token decodes at that position, all in the reserved request slot 0
    with every block and window page the reserved page 0."""
    W = model_config.sliding_window
    end = int(context_len)
    nblocks = -(-end // page_size)
    out = []
    for n in ([chunk] if chunk > 0 else []) + [1] * num_decode:
        p = end - n
        wins = {k: 0 for k in range(max(0, (p - W + 1) // W), (end - 1) // W + 1)}
        out.append(ReqForwardInput(0, [1] * n, p, [0] * nblocks, wins, n - 1))
    return out


def _cuda_peak(device: torch.device) -> Callable[[Callable[[], None]], int]:
    def measure(run: Callable[[], None]) -> int:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        run()
        torch.cuda.synchronize(device)
        return int(torch.cuda.max_memory_allocated(device) - base)

    return measure


def plan_workspace(
    model: Callable[[ForwardBatch, DSV4KVPool], torch.Tensor],
    model_config: ModelConfig,
    builder_args: dict,
    pool_args: dict,
    context_len: int,
    chunk: int,
    max_decode_bs: int,
    budget_bytes: int,
    with_graphs: bool,
    measure: Callable[[Callable[[], None]], int] | None = None,
    graph_extend_tokens: int = 0,
) -> WorkspacePlan:
    """Measure the maximal forward (module docstring) and choose the prefill chunk.

    Args:
        model: the forward ``model(fb, pool) -> logits``.
        model_config: the model.
        builder_args: ``ForwardBatchBuilder`` arguments (``page_size``, ``window``, ``csa_ratio``,
            ``hca_ratio``, ``device``).
        pool_args: ``DSV4KVPool`` keyword arguments for the format (``compute_dtype``,
            ``kv_cache_dtype``, ``fp4_indexer``, ``device``).
        context_len: the longest request.
        chunk: the requested prefill chunk (tokens).
        max_decode_bs: the largest decode batch.
        budget_bytes: memory left for the pools and the workspace (after the weights).
        with_graphs: reserve the decode batch's activations again for the CUDA graphs' pool.
        measure: ``measure(run) -> peak bytes`` of calling ``run``; default the CUDA allocator's
            peak statistics (tests pass their own).
        graph_extend_tokens: the largest extend CUDA-graph key's tokens (0: none); its forward
            (that many tokens of ``min(tokens, max_decode_bs)`` requests) is measured too.

    Returns:
        the :class:`WorkspacePlan`.

    Raises:
        ValueError: even a ``page_size``-token chunk does not leave half of ``budget_bytes``.
    """
    page_size = int(builder_args["page_size"])
    device = torch.device(builder_args["device"])
    measure = measure or _cuda_peak(device)
    nblocks = -(-int(context_len) // page_size)
    # the scratch pool (and the builder holding its page table) live in a dict so that both can be
    # dropped before the real pools are sized
    pool = DSV4KVPool(model_config, page_size, 1, 1, 1, padded=True, max_pages_per_req=nblocks, **pool_args)
    scratch = {"pool": pool, "builder": ForwardBatchBuilder(req_to_page=pool.req_to_page, **builder_args)}
    del pool

    def forward(reqs: list[ReqForwardInput]) -> Callable[[], None]:
        def run() -> None:
            pool = scratch["pool"]
            pool.req_to_page.invalidate(0)
            fb = scratch["builder"].build(reqs)
            model(fb, pool)
            del fb

        return run

    requested = c = max(1, min(int(chunk), int(context_len)))
    decode = measure(forward(dummy_requests(model_config, page_size, context_len, 0, max_decode_bs)))
    ext = int(graph_extend_tokens)
    if with_graphs and ext > 1:
        nreq = max(1, min(ext, int(max_decode_bs)))
        reqs = dummy_requests(model_config, page_size, context_len, ext - (nreq - 1), nreq - 1)
        decode = max(decode, measure(forward(reqs)))
    decode = decode if with_graphs else 0
    while True:
        try:
            prefill = measure(forward(dummy_requests(model_config, page_size, context_len, c, max_decode_bs)))
        except torch.OutOfMemoryError:
            prefill = None
            torch.cuda.empty_cache()
        reserved = int(((prefill or 0) + decode) * (1 + WORKSPACE_MARGIN))
        if prefill is not None and reserved <= budget_bytes // 2:
            break
        if c <= page_size:
            need = "more than the device has" if prefill is None else f"{reserved} B"
            raise ValueError(
                f"forward workspace: a {c}-token prefill chunk at context {context_len} needs {need} "
                f"of the {budget_bytes} B left after the weights (at most half may go to the workspace); "
                "lower --context-length or --max-running-requests, or use --tp-size"
            )
        c = max(page_size, c // 2)
    scratch.clear()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    plan = WorkspacePlan(c, requested, int(prefill), int(decode), reserved)
    (logger.warning if plan.lowered else logger.info)(plan.summary())
    return plan
