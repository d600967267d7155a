"""Start-up warm-up of the long-prefill attention paths, without long-context forwards.

Long prefill runs take three paths whose kernels the dummy forwards of
:func:`~sglang_v4.model_executor.warmup.warmup_kernels` (contexts up to
:data:`~sglang_v4.model_executor.warmup.WARMUP_MAX_CONTEXT`) do not all reach:

* HCA layers: the dense shared-prefix attention (:mod:`sgl_kernel_v4.triton.attention_prefix`)
  from 32K contexts. Its tiles follow the segment's entry count ``NK`` (a 1M context has 8,192
  entries): the Triton logits and a rescale pass whose ``BLOCK_T`` is ``next_pow2(NK / 64)`` below
  2,048 entries (``GEMM_LOGITS_MIN_ENTRIES``), then cuBLAS logits and a softmax pass whose
  ``BLOCK_N`` is ``next_pow2(NK)`` (one pass) or 512 (two passes, beyond 8,192 keys). A warm-up to
  1M-token contexts by forwards took more than 212 s on an H200; here each of those classes runs
  once, directly, on synthetic queries over the real pool (every page of the synthetic page table
  missing, so nothing is read from the pool and nothing written to it).
* CSA layers over fp8 main entries: the selected entries read from a bf16 copy decoded once per
  call (``sparse_attention_decoded_csa``).
* The CSA indexer over fp4 keys: the keys scored on a copy decoded once per call
  (:mod:`sgl_kernel_v4.triton.indexer_decoded`), here at the server's largest candidate count.

The last two do not depend on the context (entry counts, page counts and index-table slices are
runtime arguments of their kernels) and the grid's prefill points reach them; they run once each
here too, over the real pools' formats and at the longest context, at the cost of one call. The
classes are picked by the wrapper's own tile functions
(:mod:`sgl_kernel_v4.triton.attention_prefix_tiles`), so a change of its thresholds changes the
warm-up with it. ``test/test_warmup_long_context.py`` records the kernel variants these paths
launch at 131,072 .. 1,048,576-token contexts on both KV formats and checks that this warm-up with
the dummy grid launches every one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool

__all__ = ["LongContextPlan", "long_context_plan", "model_heads", "warmup_long_context"]


@dataclass(frozen=True)
class LongContextPlan:
    """The long-prefill calls one server can make (what :func:`warmup_long_context` runs).

    Attributes:
        tokens: query tokens per warm-up call (``PREFIX_MIN_TOKENS + 1``: a prefill run, not a
            decode-sized batch, for every wrapper).
        hca_entry_counts: one HCA entry count per tile class of the dense path (empty: no HCA
            layer, or contexts too short for it).
        csa_decoded: whether CSA attention reads decoded copies (fp8 main entries).
        indexer_decoded: whether the indexer scores decoded copies (fp4 keys).
        max_csa_entries: the most CSA entries one request can have (``context // csa_ratio``).
    """

    tokens: int
    hca_entry_counts: tuple[int, ...]
    csa_decoded: bool
    indexer_decoded: bool
    max_csa_entries: int


def long_context_plan(pool: DSV4KVPool, heads: int, max_context: int) -> LongContextPlan:
    """The calls of :func:`warmup_long_context` for a server whose requests reach ``max_context``
    tokens (its context length, capped by what the pool holds).

    Args:
        pool: the server's KV pool (its formats decide which decoded paths exist).
        heads: attention heads per rank (the dense path's query rows per token).
        max_context: the longest request in tokens.

    Raises:
        ValueError: ``heads`` or ``max_context`` below 1.
    """
    from sgl_kernel_v4.dense_prefix import PREFIX_MIN_ENTRIES, PREFIX_MIN_TOKENS
    from sgl_kernel_v4.paged import as_paged
    from sgl_kernel_v4.triton import attention_prefix as ap
    from sgl_kernel_v4.triton.attention_prefix_tiles import prefix_warmup_entry_counts
    from sgl_kernel_v4.triton.indexer_decoded import DECODED_CODECS

    if heads < 1 or max_context < 1:
        raise ValueError(f"heads / max_context: expected >= 1, got {heads} / {max_context}")
    mc = pool.model_config
    hca: tuple[int, ...] = ()
    r = mc.hca_ratio
    # a segment's first token sits at PREFIX_MIN_ENTRIES * r - 1 or later, and it has
    # PREFIX_MIN_TOKENS tokens: its entries run from lo up to context // r
    if mc.hca_layers and max_context >= PREFIX_MIN_ENTRIES * r - 1 + PREFIX_MIN_TOKENS:
        swa = pool.rows(KVKind.SWA, mc.hca_layers[0])
        dtype = ap.prefix_compute_dtype(pool.compute_dtype, swa)
        lo = (PREFIX_MIN_ENTRIES * r - 1 + PREFIX_MIN_TOKENS) // r
        fp32 = ap.fp32_logits_available(dtype, pool.device)
        hca = tuple(prefix_warmup_entry_counts(max_context // r, fp32, min_entries=lo))
    csa = indexer = False
    if mc.csa_layers:
        layer = mc.csa_layers[0]
        csa = as_paged(pool.rows(KVKind.CSA_MAIN, layer)).codec == "fp8_main"
        indexer = as_paged(pool.rows(KVKind.CSA_INDEXER, layer)).codec in DECODED_CODECS
        indexer = indexer and max_context // mc.csa_ratio > mc.hf.index_topk  # shorter runs: never scored
    return LongContextPlan(PREFIX_MIN_TOKENS + 1, hca, csa, indexer, max_context // mc.csa_ratio)


def _query_inputs(T: int, n: int, ratio: int, dev: torch.device) -> dict[str, torch.Tensor]:
    # T tokens of one request at the end of a context whose tokens see n entries; no window page
    i64 = dict(dtype=torch.int64, device=dev)
    return dict(
        swa_pages=torch.full((T, 2), -1, **i64),
        positions=torch.full((T,), n * ratio, **i64),
        req_rows=torch.zeros((1,), **i64),
        token_req=torch.zeros((T,), **i64),
    )


def warmup_long_context(pool: DSV4KVPool, heads: int, max_context: int) -> dict[str, int]:
    """Run the long-prefill wrappers once per tile class (module docstring) on synthetic queries.

    Every page of the synthetic page table is missing, so the calls read no pool page and write
    none: nothing any request owns is touched. Call it before the server is ready, on the device
    of ``pool`` (CUDA; under ``TRITON_INTERPRET=1`` the launches can be recorded on the CPU).

    Args:
        pool / heads / max_context: as :func:`long_context_plan`.

    Returns:
        ``{"hca": calls of the dense HCA path, "csa": decoded CSA calls, "indexer": decoded indexer
        calls}``.
    """
    from sgl_kernel_v4.dense_prefix import PrefixSegment, dense_prefix_enabled
    from sgl_kernel_v4.triton import attention_prefix as ap
    from sgl_kernel_v4.triton.indexer_decoded import indexer_topk_decoded

    stats = {"hca": 0, "csa": 0, "indexer": 0}
    if not dense_prefix_enabled():
        return stats
    plan = long_context_plan(pool, heads, max_context)
    mc, dev, T = pool.model_config, pool.device, plan.tokens
    D, W, ps = mc.head_dim, mc.sliding_window, pool.page_size
    q = torch.zeros((T, heads, D), dtype=pool.compute_dtype, device=dev)
    sinks = torch.zeros((heads,), dtype=torch.float32, device=dev)
    # a page-table row as wide as the server's, every page missing
    width = pool.req_to_page.table.shape[1]
    r2p = torch.full((1, width), -1, dtype=pool.req_to_page.table.dtype, device=dev)
    for n in plan.hca_entry_counts:
        layer, r = mc.hca_layers[0], mc.hca_ratio
        e = ps // r
        if -(-n // e) > width:
            r2p = torch.full((1, -(-n // e)), -1, dtype=r2p.dtype, device=dev)
        x = _query_inputs(T, n, r, dev)
        vis = torch.full((T,), n, dtype=torch.int64, device=dev)
        ap.sparse_attention_dense_prefix(
            q, pool.rows(KVKind.SWA, layer), x["swa_pages"], x["positions"], W, sinks, D**-0.5,
            pool.rows(KVKind.HCA, layer), vis, r2p, x["req_rows"], x["token_req"], e, [PrefixSegment(0, T, 0, n)],
        )  # fmt: skip
        stats["hca"] += 1
    if plan.csa_decoded or plan.indexer_decoded:
        layer, r = mc.csa_layers[0], mc.csa_ratio
        e, topk = ps // r, int(mc.hf.index_topk)
        n = plan.max_csa_entries
        if -(-n // e) > r2p.shape[1]:
            r2p = torch.full((1, -(-n // e)), -1, dtype=r2p.dtype, device=dev)
        x = _query_inputs(T, n, r, dev)
        seg = [PrefixSegment(0, T, 0, n)]
        if plan.csa_decoded:
            ent = torch.full((T, topk), -1, dtype=torch.int64, device=dev)
            ap.sparse_attention_decoded_csa(
                q, pool.rows(KVKind.SWA, layer), x["swa_pages"], x["positions"], W, sinks, D**-0.5,
                pool.rows(KVKind.CSA_MAIN, layer), ent, r2p, x["req_rows"], x["token_req"], e, seg,
            )  # fmt: skip
            stats["csa"] += 1
        if plan.indexer_decoded:
            hi, di = int(mc.hf.index_n_heads), int(mc.hf.index_head_dim)
            iq = torch.zeros((T, hi, di), dtype=pool.compute_dtype, device=dev)
            w = torch.zeros((T, hi), dtype=torch.float32, device=dev)
            vis = torch.full((T,), n, dtype=torch.int64, device=dev)
            indexer_topk_decoded(
                iq, w, pool.rows(KVKind.CSA_INDEXER, layer), vis, r2p, x["req_rows"], x["token_req"], e, topk,
                di**-0.5, seg, max_visible=n,
            )  # fmt: skip
            stats["indexer"] += 1
    return stats


def model_heads(model: Any) -> int | None:
    """Attention heads per rank of ``model`` (its first attention layer's ``n_heads``), or None."""
    from sglang_v4.layers.attention import DSV4Attention

    for mod in model.modules():
        if isinstance(mod, DSV4Attention):
            return int(mod.n_heads)
    return None
