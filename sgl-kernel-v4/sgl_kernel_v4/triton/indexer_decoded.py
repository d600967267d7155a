"""Indexer top-k of long prefill runs over fp4 keys decoded once per call (Triton).

The extend scoring kernel (:mod:`sgl_kernel_v4.triton.indexer_score_extend`) decodes every fp4
key (e2m1 values, a ue8m0 scale per 32) in registers each time a program reads its tile: a
2,048-token chunk with 8 tokens per program reads each of the request's keys 256 times, so
at 262,144 candidates the fp4 call took 53.5 ms against 39.5 ms over bf16 keys on the H200
(benchmark/RESULTS.md, 2026-12-03). Here a run of a request's prefill tokens
(:class:`~sgl_kernel_v4.dense_prefix.PrefixSegment`) first decodes that request's keys once, with
the kernel's own decode (:func:`~sgl_kernel_v4.triton.kv_codec.load_key`, then the same cast to the
compute dtype), into a contiguous float copy paged like the pool: page ``p`` of the copy holds the
request's page ``p``, and a page missing from the request's row is missing from the copy's too.
The run's tokens are then scored over the copy with the same kernel, tile and tokens per program
as over the pool, so every score, hence every selected entry, is the same bits as before
(``test/test_kernels_indexer_decoded.py``). Other tokens of the forward run over the pool.

Only fp4 keys take this path: fp8 keys keep their per-entry scale apart (applied after the dot),
which a float copy would have to carry beside it; float pools need no decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.dense_prefix import PrefixSegment
from sgl_kernel_v4.paged import as_paged
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2
from sgl_kernel_v4.triton.kv_codec import load_key, row_offsets

__all__ = ["DECODED_CODECS", "gather_index_keys", "indexer_topk_decoded"]

#: Indexer pool codecs whose long prefill runs read a decoded copy (module docstring).
DECODED_CODECS = frozenset({"fp4_indexer"})


# the row offset, entries per page and the page count follow the request: runtime values, no variant
# per request or context
@triton.jit(do_not_specialize=["row_ptr", "E", "n_pages"])
def _gather_keys_kernel(
    kv_ptr, kv_rpp, kv_ps, kv_rs, r2p_ptr, row_ptr, E, n_pages, out_ptr,
    CODEC: tl.constexpr, DI: tl.constexpr, BLOCK_W: tl.constexpr,
):  # fmt: skip
    # entries w (BLOCK_W per program) of the request's pages 0 .. n_pages - 1: decoded as the
    # scoring kernel decodes them (load_key, cast to out's dtype); zeros on a missing page
    w = tl.program_id(0) * BLOCK_W + tl.arange(0, BLOCK_W)
    in_n = w < n_pages * E
    row = tl.load(row_ptr).to(tl.int64)
    page = tl.load(r2p_ptr + row + w // E, mask=in_n, other=-1).to(tl.int64)
    ok = in_n & (page >= 0)
    off = row_offsets(page * E + w % E, kv_rpp, kv_ps, kv_rs)
    offs_d = tl.arange(0, DI)
    x, _ = load_key(kv_ptr, off, ok, offs_d, CODEC, DI)
    dst = out_ptr + w.to(tl.int64)[:, None] * DI + offs_d[None, :]
    tl.store(dst, x.to(out_ptr.dtype.element_ty), mask=in_n[:, None])


def gather_index_keys(
    idx_kv: Any,
    req_to_page: torch.Tensor,
    req_row: torch.Tensor,
    n_entries: int,
    entries_per_page: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One request's indexer keys ``0 .. n_entries - 1``, decoded to ``dtype``, paged like the pool.

    Args:
        idx_kv: the indexer-key pool layer (an ``fp4_indexer`` :class:`~sgl_kernel_v4.paged.PagedRows`
            or an object :func:`~sgl_kernel_v4.paged.as_paged` takes).
        req_to_page: ``[R, P]`` int page table of the pool.
        req_row: ``[1]`` int device tensor, the request's row (read on the device: no sync).
        n_entries: entries to cover (the run's largest visible count); entries_per_page: ``E``.
        dtype: the scoring's compute dtype (bf16, or fp32 for fp32 queries).

    Returns:
        ``(keys [n_pages * E, DI] dtype, table [1, n_pages] int32)`` with ``n_pages =
        ceil(n_entries / E)``: page ``p`` of ``keys`` holds the request's page ``p`` decoded
        (zeros where the request has no page), and ``table[0, p]`` is ``p`` or ``-1`` for a
        missing page, so the scoring kernel treats the copy's entries as it treats the pool's.

    Raises:
        ValueError: the pool is not fp4 indexer keys, or ``entries_per_page`` < 1.
    """
    kv = as_paged(idx_kv)
    if kv.codec not in DECODED_CODECS:
        raise ValueError(f"idx_kv: codec {kv.codec!r} is not one of {sorted(DECODED_CODECS)}")
    E = int(entries_per_page)
    if E < 1:
        raise ValueError(f"entries_per_page: expected >= 1, got {entries_per_page}")
    n_pages = max(1, min(cdiv(max(int(n_entries), 1), E), req_to_page.shape[1]))
    dev = req_to_page.device
    keys = torch.empty((n_pages * E, kv.dim), dtype=dtype, device=dev)
    block_w = 32
    r2p = req_to_page if req_to_page.is_contiguous() else req_to_page.contiguous()
    row_off = req_row.to(torch.int64) * r2p.stride(0)
    _gather_keys_kernel[(cdiv(n_pages * E, block_w),)](
        kv.storage, kv.rows_per_page, kv.page_stride, kv.row_stride, r2p, row_off, E, n_pages, keys,
        CODEC=kv.codec_id, DI=next_power_of_2(kv.dim), BLOCK_W=block_w, num_warps=4,
    )  # fmt: skip
    pages = r2p.index_select(0, req_row.to(torch.int64))[:, :n_pages]
    ids = torch.arange(n_pages, dtype=torch.int32, device=dev)[None, :]
    table = torch.where(pages >= 0, ids, torch.full_like(ids, -1))
    return keys, table


def _ranges(T: int, segments: Sequence[PrefixSegment]) -> list[tuple[int, int, PrefixSegment | None]]:
    # [0, T) cut into the segments and the token ranges between them, in order
    out: list[tuple[int, int, PrefixSegment | None]] = []
    t = 0
    for seg in sorted(segments, key=lambda s: s.start):
        if seg.start > t:
            out.append((t, seg.start, None))
        out.append((seg.start, seg.end, seg))
        t = seg.end
    if t < T:
        out.append((t, T, None))
    return out


def indexer_topk_decoded(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv: Any,
    visible: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    token_req: torch.Tensor,
    entries_per_page: int,
    topk: int,
    scale: float,
    segments: Sequence[PrefixSegment],
    *,
    max_visible: int | None = None,
) -> torch.Tensor:
    """:func:`sgl_kernel_v4.triton.indexer.indexer_topk` (same arguments and result) whose
    ``segments`` score a decoded copy of their request's keys (module docstring); the result is
    the same bits as the pool path's.

    Args (beyond ``indexer_topk``'s):
        segments: runs of one request's tokens (rows ``[start, end)`` of ``q``; ``req``: the
            request's index in ``req_rows``; ``n_entries``: the run's largest visible count).

    Returns:
        ``[T, topk]`` int64 entry indices, ascending, ``-1`` padded.

    Raises:
        ValueError: as ``indexer_topk``; a pool codec outside :data:`DECODED_CODECS`; a segment
            outside ``[0, T)`` or overlapping another.
    """
    from sgl_kernel_v4.triton.indexer import _tokens_per_program, indexer_topk

    T, HI, _ = q.shape
    kv = as_paged(idx_kv)
    if kv.codec not in DECODED_CODECS:
        raise ValueError(f"idx_kv: codec {kv.codec!r} is not one of {sorted(DECODED_CODECS)}")
    last = 0
    for seg in sorted(segments, key=lambda s: s.start):
        if not (last <= seg.start < seg.end <= T):
            raise ValueError(f"segments: [{seg.start}, {seg.end}) is outside [0, {T}) or overlaps another")
        last = seg.end
    out = torch.empty((T, topk), dtype=torch.int64, device=q.device)
    if T == 0:
        return out
    # the whole forward's tokens per program, so each sub-call scores with the same kernel
    block_t = _tokens_per_program(T, max(16, next_power_of_2(HI)))
    mv = int(visible.max()) if max_visible is None else int(max_visible)
    if block_t == 1:  # a decode-sized forward: the decode scoring kernel, whose fp4 dots run per
        # 32-value scale block, would score a float copy in another order: the pool as before
        return indexer_topk(q, weights, kv, visible, req_to_page, req_rows, token_req, entries_per_page, topk,
                            scale, max_visible=mv, out=out)  # fmt: skip
    dtype = torch.float32 if q.dtype == torch.float32 else torch.bfloat16
    for a, b, seg in _ranges(T, segments):
        common = dict(max_visible=mv, out=out[a:b], block_t=block_t)
        if seg is None:
            indexer_topk(q[a:b], weights[a:b], kv, visible[a:b], req_to_page, req_rows, token_req[a:b],
                         entries_per_page, topk, scale, **common)  # fmt: skip
            continue
        keys, table = gather_index_keys(kv, req_to_page, req_rows[seg.req : seg.req + 1], seg.n_entries,
                                        entries_per_page, dtype)  # fmt: skip
        row0 = torch.zeros((1,), dtype=torch.int64, device=q.device)
        treq = torch.zeros((b - a,), dtype=torch.int64, device=q.device)
        indexer_topk(q[a:b], weights[a:b], keys, visible[a:b], table, row0, treq, entries_per_page, topk, scale,
                     **common)  # fmt: skip
    return out
