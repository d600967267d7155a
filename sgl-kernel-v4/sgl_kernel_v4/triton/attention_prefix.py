"""Dense shared-prefix attention for long HCA prefill chunks (Triton + one cuBLAS product).

In an HCA layer (compress ratio ``m = 128``) the token at position ``p`` attends to its request's
compressed entries ``w < (p + 1) // m`` plus its sliding window, with a per-head sink (the math
of :mod:`sgl_kernel_v4.triton.attention`). Over a prefill chunk of ``n`` tokens at context ``c``
the tokens' visible sets differ only in their last ``n / m`` entries: almost all of the ``c / m``
entries are shared by every token of the chunk. The paged kernel attends per token (one program
gathers the keys for one token's heads and multiplies at M = 64 rows), so it re-reads the shared
keys for every token; at a 1M context its HCA layers dominate a prefill chunk. Here the request's
compressed entries are attended as dense products over the chunk's ``tokens x heads`` rows:

1. :func:`gather_entries`: the request's first ``V`` entries (``V`` = the chunk's largest visible
   count) into one contiguous ``[V, D]`` tile in the compute dtype (fp8 entries decoded by the
   reference codec), with a per-entry validity byte (a missing page).
2. ``_prefix_probs_kernel``, one program per (block of rows, group of keys): ``S = scale' Q Kᵀ``
   (``scale' = scale * log2 e``, base 2 as the paged kernel), masked per row by the token's
   visible count; writes ``P = 2**(S - m_g)`` in the compute dtype and the group's ``(m_g, l_g)``.
   Splitting the keys into groups gives the GPU enough programs at any chunk size.
3. ``_prefix_rescale_kernel``: each row's max over the groups ``m``, ``P *= 2**(m_g - m)``,
   ``l = sum_g l_g 2**(m_g - m)``.
   With ``logits="gemm"`` steps 2-3 are instead ``S = Q Kᵀ`` as one cuBLAS GEMM with an fp32
   result and ``_prefix_softmax_kernel``: per row the max ``m`` and sum ``l`` of the valid
   ``2**(scale' S)`` (online, one pass over ``S``), then ``P = 2**(scale' S - m)`` (a second).
4. ``acc = P @ K`` (one GEMM; K = V in DeepSeek-V4's shared-KV attention).
5. ``_merge_kernel``: the paged kernel has attended the window (its compressed entries turned off
   for these tokens) with the sink and returned its output ``o1`` and base-2 log-sum-exp
   ``lse1``; the two key sets merge as disjoint softmax partitions:
   ``out = (o1 2**lse1 + acc 2**m) / (2**lse1 + l 2**m)``.

The rows are processed in blocks of tokens so that ``P`` stays within :data:`PREFIX_P_BYTES`. The
tiles of steps 2-3 follow the entry count (:mod:`sgl_kernel_v4.triton.attention_prefix_tiles`).
The path is chosen on the host from the batch's lengths (never inside a CUDA graph: it sizes its
work from the context) by :func:`dense_prefix_segments`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.dense_prefix import (
    PREFIX_MIN_ENTRIES,
    PREFIX_MIN_TOKENS,
    PREFIX_P_BYTES,
    PrefixSegment,
    dense_prefix_segments,
)
from sgl_kernel_v4.paged import as_paged, entry_align
from sgl_kernel_v4.triton import attention_prefix_tiles as _tiles
from sgl_kernel_v4.triton._dot import dot
from sgl_kernel_v4.triton._utils import cdiv, ieee_f32_dots, next_power_of_2, num_sms
from sgl_kernel_v4.triton.attention_prefix_tiles import (
    GEMM_LOGITS_MIN_ENTRIES,
    PREFIX_LOGITS,
    gemm_logits,
    padded_entries,
    prefix_tile_class,
    prefix_warmup_entry_counts,
    rescale_tile,
    softmax_tile,
)
from sgl_kernel_v4.triton.kv_codec import load_main, row_offsets

__all__ = [
    "GEMM_LOGITS_MIN_ENTRIES",
    "PREFIX_LOGITS",
    "PREFIX_MIN_ENTRIES",
    "PREFIX_MIN_TOKENS",
    "PREFIX_P_BYTES",
    "PrefixSegment",
    "dense_prefix_segments",
    "fp32_logits_available",
    "gather_entries",
    "padded_entries",
    "prefix_compute_dtype",
    "prefix_tile_class",
    "prefix_warmup_entry_counts",
    "rescale_tile",
    "softmax_tile",
    "prefix_attention",
    "sparse_attention_dense_prefix",
    "sparse_attention_decoded_csa",
]

_LOG2E = 1.4426950408889634


def fp32_logits_available(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``Q Kᵀ`` of ``dtype`` queries on ``device`` can give fp32 logits, so the cuBLAS logits
    of ``logits="gemm"`` / ``"auto"`` can run: fp32 queries, or 16-bit ones on CUDA where
    ``torch.mm(..., out_dtype=torch.float32)`` works (tried once on a 1 x 1 product, remembered)."""
    if dtype == torch.float32:
        return True
    if device.type != "cuda" or not _MM_OUT_DTYPE[0]:
        return False
    if not _MM_OUT_CHECKED[0]:
        one = torch.ones((1, 1), dtype=dtype, device=device)
        _MM_OUT_CHECKED[0] = True
        if _mm_f32(one, one).dtype != torch.float32:
            _MM_OUT_DTYPE[0] = False
    return _MM_OUT_DTYPE[0]


def prefix_compute_dtype(q_dtype: torch.dtype, swa_kv: object) -> torch.dtype:
    """The dtype the dense path's products run in (:func:`sparse_attention_dense_prefix`): a float
    window pool's own 16-/32-bit dtype, else fp32 for fp32 queries and bf16 otherwise."""
    swa = as_paged(swa_kv)
    if swa.codec == "float" and swa.storage.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return swa.storage.dtype
    return torch.float32 if q_dtype == torch.float32 else torch.bfloat16


# the request's row (a slice of the batch's metadata), its entry count and the page-table geometry are
# runtime values: no variant per alignment, request or count (a 1,048,575-token request compiled one
# after ready on the H200)
@triton.jit(do_not_specialize=["stride_r2p", "row_ptr", "E", "n"])
def _gather_entries_kernel(
    comp_ptr, c_rpp, c_ps, c_rs, r2p_ptr, stride_r2p, row_ptr, E, n, out_ptr, valid_ptr,
    CODEC: tl.constexpr, D: tl.constexpr, NOPE: tl.constexpr, ALIGN: tl.constexpr,
    BLOCK_W: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # entries w of one request, BLOCK_W per program: page table -> slot -> row, decoded (fp8
    # entries exactly to bf16, float pools as stored) and stored contiguous; zeros + valid 0 for
    # w >= n or a missing page
    w = tl.program_id(0) * BLOCK_W + tl.arange(0, BLOCK_W)
    row = tl.load(row_ptr).to(tl.int64)
    in_n = w < n
    page = tl.load(r2p_ptr + row * stride_r2p + w // E, mask=in_n, other=-1).to(tl.int64)
    ok = in_n & (page >= 0)
    off = row_offsets(page * E + w % E, c_rpp, c_ps, c_rs)
    offs_d = tl.arange(0, BLOCK_D)
    x = load_main(comp_ptr, off, ok, offs_d, CODEC, D, NOPE, ALIGN)
    tl.store(out_ptr + w.to(tl.int64)[:, None] * D + offs_d[None, :], x.to(out_ptr.dtype.element_ty),
             mask=offs_d[None, :] < D)  # fmt: skip
    tl.store(valid_ptr + w, ok.to(tl.uint8))


def gather_entries(
    comp_kv: object, req_to_page: torch.Tensor, req_row: torch.Tensor, n: int, entries_per_page: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Entries ``0 .. n-1`` of one request, contiguous, decoded (one Triton launch).

    Args:
        comp_kv: the compressed pool (a float ``[N, D]`` tensor or a paged row view of fp8 main
            entries, as :func:`sgl_kernel_v4.paged.as_paged` takes).
        req_to_page: ``[R, P]`` int page table; ``req_row``: ``[1]`` int device tensor, the
            request's row (read on the device: no host synchronisation).
        n: entries to gather; entries_per_page: ``page_size / ratio``.
        dtype: the result's dtype (fp8 entries decode exactly to bf16: ``load_main``).

    Returns:
        ``(keys [n_pad, D] dtype, valid [n_pad] uint8)``: ``n_pad`` = ``n`` rounded up to 128;
        rows past ``n`` or on a missing page are zeros with ``valid = 0``.

    Raises:
        ValueError: the pool is not a main-entry format.
    """
    comp = as_paged(comp_kv)
    if comp.codec not in ("float", "fp8_main"):
        raise ValueError(f"comp_kv: codec {comp.codec!r} is not a main-entry format")
    n_pad = padded_entries(n)
    D = comp.dim
    keys = torch.empty((n_pad, D), dtype=dtype, device=req_to_page.device)
    valid = torch.empty((n_pad,), dtype=torch.uint8, device=req_to_page.device)
    align = entry_align(comp.codec, D, comp.rope_dim) if comp.codec != "float" else 2
    block_w = 16
    _gather_entries_kernel[(n_pad // block_w,)](
        comp.storage, comp.rows_per_page, comp.page_stride, comp.row_stride, req_to_page, req_to_page.stride(0),
        req_row, int(entries_per_page), int(n), keys, valid,
        CODEC=comp.codec_id, D=D, NOPE=D - comp.rope_dim, ALIGN=8 if align >= 8 else 2,
        BLOCK_W=block_w, BLOCK_D=next_power_of_2(D), num_warps=4,
    )  # fmt: skip
    return keys, valid


# the visible counts (a slice at the run's first token), the row count and the key tiles per program
# follow the request; NK (a multiple of 128) keeps its divisibility: P's rows stay vector-aligned
@triton.jit(do_not_specialize=["vis_ptr", "R", "tiles_per_group"])
def _prefix_probs_kernel(
    q_ptr, stride_qt, stride_qh, k_ptr, kvalid_ptr, vis_ptr, p_ptr, tml_ptr,
    R, H, NK, tiles_per_group, scale_log2,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr, QRES: tl.constexpr = False,
):  # fmt: skip
    # QRES: the row block's queries are loaded once ([BLOCK_M, D]) and each key tile is one dot of
    # K = D, so only the keys stream from L2 (else both, in BLOCK_K slices, per key tile).
    # rows r = t * H + h of the block's tokens; P [R, NK] row-major; tml [R, NK / BLOCK_N, 2] holds
    # each (row, key tile)'s own max and sum: P of a tile is relative to its own max
    rb = tl.program_id(0)
    g = tl.program_id(1)
    NT = NK // BLOCK_N
    rows = rb * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < R
    rows64 = rows.to(tl.int64)
    t = rows64 // H
    h = rows64 % H
    vis = tl.load(vis_ptr + t, mask=rmask, other=0)
    q_off = t * stride_qt + h * stride_qh
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if QRES:
        q_all = tl.load(q_ptr + q_off[:, None] + offs_k[None, :], mask=rmask[:, None], other=0.0)
    j_hi = tl.minimum(g * tiles_per_group + tiles_per_group, NT)
    for j in range(g * tiles_per_group, j_hi):
        cols = j * BLOCK_N + offs_n
        if QRES:
            kb = tl.load(k_ptr + cols[:, None].to(tl.int64) * D + offs_k[None, :])
            s = dot(q_all, tl.trans(kb), IEEE)
        else:
            s = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            for k0 in range(0, D, BLOCK_K):
                qa = tl.load(q_ptr + q_off[:, None] + (k0 + offs_k)[None, :], mask=rmask[:, None], other=0.0)
                kb = tl.load(k_ptr + cols[:, None].to(tl.int64) * D + (k0 + offs_k)[None, :])
                s += dot(qa, tl.trans(kb), IEEE)
        kv = tl.load(kvalid_ptr + cols) != 0
        valid = (cols[None, :] < vis[:, None]) & kv[None, :]
        s = tl.where(valid, s * scale_log2, float("-inf"))
        m = tl.maximum(tl.max(s, 1), -1.0e30)
        p = tl.exp2(s - m[:, None])
        tl.store(
            p_ptr + rows64[:, None] * NK + cols[None, :], p.to(p_ptr.dtype.element_ty), mask=rmask[:, None]
        )
        tml = (rows64 * NT + j) * 2
        tl.store(tml_ptr + tml, m, mask=rmask)
        tl.store(tml_ptr + tml + 1, tl.sum(p, 1), mask=rmask)


@triton.jit(do_not_specialize=["R"])
def _prefix_rescale_kernel(
    p_ptr, tml_ptr, ml_ptr, R, NK,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr,
):  # fmt: skip
    # per block of rows: m = max over tiles, l = sum_j l_j 2**(m_j - m), then P *= 2**(m_j - m).
    # Every tile's (m_j, l_j) in one [BLOCK_M, BLOCK_T] load (BLOCK_T >= tiles): a reduction
    # carried through a loop here failed Triton 3.6's thread-locality pass on sm_90
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < R
    rows64 = rows.to(tl.int64)
    NT = NK // BLOCK_N
    offs_t = tl.arange(0, BLOCK_T)
    tmask = rmask[:, None] & (offs_t[None, :] < NT)
    tptr = tml_ptr + (rows64[:, None] * NT + offs_t[None, :]) * 2
    mj = tl.load(tptr, mask=tmask, other=-1.0e30)
    lj = tl.load(tptr + 1, mask=tmask, other=0.0)
    m = tl.max(mj, 1)
    l_sum = tl.sum(lj * tl.exp2(mj - m[:, None]), 1)
    offs_n = tl.arange(0, BLOCK_N)
    for j in range(0, NT):
        f = tl.exp2(tl.load(tml_ptr + (rows64 * NT + j) * 2, mask=rmask, other=-1.0e30) - m)
        ptrs = p_ptr + rows64[:, None] * NK + (j * BLOCK_N + offs_n)[None, :]
        p = tl.load(ptrs, mask=rmask[:, None], other=0.0).to(tl.float32)
        tl.store(ptrs, (p * f[:, None]).to(p_ptr.dtype.element_ty), mask=rmask[:, None])
    tl.store(ml_ptr + rows64 * 2, m, mask=rmask)
    tl.store(ml_ptr + rows64 * 2 + 1, l_sum, mask=rmask)


@triton.jit(do_not_specialize=["vis_ptr", "R"])
def _prefix_softmax_kernel(
    s_ptr, kvalid_ptr, vis_ptr, p_ptr, ml_ptr, R, H, NK, scale_log2,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr = False,
):  # fmt: skip
    # the "gemm" logits' step 2-3: S [R, NK] fp32 = Q Kᵀ (cuBLAS) -> per row m = max of the valid
    # scale' S, l = sum 2**(scale' S - m), P = 2**(scale' S - m) in P's dtype (0 where invalid).
    # ONE_PASS (BLOCK_N >= NK): the rows held in registers, S read once; else two passes of tiles
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < R
    rows64 = rows.to(tl.int64)
    vis = tl.load(vis_ptr + rows64 // H, mask=rmask, other=0)
    offs_n = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        kv = tl.load(kvalid_ptr + offs_n, mask=offs_n < NK, other=0) != 0
        valid = rmask[:, None] & (offs_n[None, :] < vis[:, None]) & kv[None, :]
        x = tl.load(s_ptr + rows64[:, None] * NK + offs_n[None, :], mask=valid, other=0.0)
        x = tl.where(valid, x * scale_log2, float("-inf"))
        m1 = tl.maximum(tl.max(x, 1), -1.0e30)
        p1 = tl.exp2(x - m1[:, None])
        tl.store(p_ptr + rows64[:, None] * NK + offs_n[None, :], p1.to(p_ptr.dtype.element_ty),
                 mask=rmask[:, None] & (offs_n[None, :] < NK))  # fmt: skip
        tl.store(ml_ptr + rows64 * 2, m1, mask=rmask)
        tl.store(ml_ptr + rows64 * 2 + 1, tl.sum(p1, 1), mask=rmask)
        return
    m = tl.full([BLOCK_M], -1.0e30, tl.float32)
    l_sum = tl.zeros([BLOCK_M], tl.float32)
    for j in range(0, NK, BLOCK_N):
        cols = j + offs_n
        kv = tl.load(kvalid_ptr + cols, mask=cols < NK, other=0) != 0
        valid = rmask[:, None] & (cols[None, :] < vis[:, None]) & kv[None, :]
        x = tl.load(s_ptr + rows64[:, None] * NK + cols[None, :], mask=valid, other=0.0)
        x = tl.where(valid, x * scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(x, 1))
        l_sum = l_sum * tl.exp2(m - m_new) + tl.sum(tl.exp2(x - m_new[:, None]), 1)
        m = m_new
    for j in range(0, NK, BLOCK_N):
        cols = j + offs_n
        kv = tl.load(kvalid_ptr + cols, mask=cols < NK, other=0) != 0
        valid = rmask[:, None] & (cols[None, :] < vis[:, None]) & kv[None, :]
        x = tl.load(s_ptr + rows64[:, None] * NK + cols[None, :], mask=valid, other=0.0)
        p = tl.where(valid, tl.exp2(x * scale_log2 - m[:, None]), 0.0)
        tl.store(p_ptr + rows64[:, None] * NK + cols[None, :], p.to(p_ptr.dtype.element_ty),
                 mask=rmask[:, None] & (cols[None, :] < NK))  # fmt: skip
    tl.store(ml_ptr + rows64 * 2, m, mask=rmask)
    tl.store(ml_ptr + rows64 * 2 + 1, l_sum, mask=rmask)


@triton.jit(do_not_specialize=["lse_ptr"])  # a slice at the token block's first row: any alignment
def _merge_kernel(
    out_ptr, stride_ot, stride_oh, lse_ptr, acc_ptr, ml_ptr, H,
    D: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    # row r = t * H + h of the block: out = (o1 2**lse1 + acc 2**m) / (2**lse1 + l 2**m)
    r = tl.program_id(0).to(tl.int64)
    t = r // H
    h = r % H
    offs = tl.arange(0, BLOCK_D)
    dm = offs < D
    o_ptrs = out_ptr + t * stride_ot + h * stride_oh + offs
    o1 = tl.load(o_ptrs, mask=dm, other=0.0).to(tl.float32)
    lse1 = tl.load(lse_ptr + r)
    m2 = tl.load(ml_ptr + r * 2)
    l2 = tl.load(ml_ptr + r * 2 + 1)
    acc = tl.load(acc_ptr + r * D + offs, mask=dm, other=0.0).to(tl.float32)
    mx = tl.maximum(lse1, m2)
    w1 = tl.exp2(lse1 - mx)
    w2 = tl.exp2(m2 - mx)
    out = (o1 * w1 + acc * w2) / (w1 + l2 * w2)
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=dm)


def prefix_attention(
    q: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    comp_kv: object,
    comp_visible: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    entries_per_page: int,
    scale: float,
    segments: list[PrefixSegment],
    *,
    p_bytes: int = PREFIX_P_BYTES,
    block_m: int = 128,
    block_n: int = 64,
    block_k: int = 64,
    num_warps: int = 8,
    num_stages: int = 3,
    logits: str | None = None,
) -> torch.Tensor:
    """Merge each segment's compressed-entry attention into ``out`` (module docstring, steps 1-5).

    Args:
        q: ``[T, H, D]`` queries (bf16 / fp16 / fp32; the products run in this dtype, fp32
            accumulation).
        out: ``[T, H, D]`` the paged kernel's output for the segments' tokens over their window
            and sink only (their compressed entries switched off); updated in place.
        lse: ``[T, H]`` fp32, that call's base-2 log-sum-exp (``sparse_attention(lse=...)``).
        comp_kv / req_to_page / entries_per_page: the HCA pool and its page table.
        comp_visible: ``[T]`` int, entries visible to each token (``(pos + 1) // ratio``).
        req_rows: ``[B]`` int64 page-table row of each request of the batch.
        scale: the softmax scale (``head_dim ** -0.5``).
        segments: from :func:`dense_prefix_segments`.
        p_bytes: the probability tile's budget per token block.
        block_m / block_n / block_k / num_warps / num_stages: the logits kernel's tile
            (``block_k = 0``: the row block's queries loaded once, one dot of K = D per key tile:
            measured slower on the H200, 1.92-2.10x the paged kernel at 1M against 2.81x); the
            defaults were the fastest of six at 64K-1M contexts on the H200
            (``benchmark/attention_prefix_bench.py``, benchmark/RESULTS.md).
        logits: ``"triton"`` (steps 2-3 as above), ``"gemm"``: ``S = Q Kᵀ`` by one cuBLAS
            GEMM with an fp32 result, then ``_prefix_softmax_kernel`` writes ``P`` relative to each
            row's max and ``(m, l)`` (the tile options above are then unused; 16-bit queries need
            ``torch.mm(..., out_dtype=torch.float32)``, else the Triton logits run), or
            ``"auto"`` (``"gemm"`` from :data:`GEMM_LOGITS_MIN_ENTRIES` entries); ``None``:
            :data:`PREFIX_LOGITS`.

    Returns:
        ``out``.

    Raises:
        ValueError: shapes or dtypes out of range, or an unknown ``logits``.
        RuntimeError: ``logits="gemm"`` and ``torch.mm`` gave no fp32 result for 16-bit queries.
    """
    logits = _tiles.PREFIX_LOGITS if logits is None else logits
    if logits not in ("triton", "gemm", "auto"):
        raise ValueError(f"logits: expected 'triton', 'gemm' or 'auto', got {logits!r}")
    if q.dim() != 3 or out.shape != q.shape:
        raise ValueError(
            f"q / out: expected equal [T, H, D] shapes, got {tuple(q.shape)} / {tuple(out.shape)}"
        )
    T, H, D = q.shape
    if lse.shape != (T, H) or lse.dtype != torch.float32:
        raise ValueError(f"lse: expected float32 [{T}, {H}], got {lse.dtype} {tuple(lse.shape)}")
    qres = block_k == 0  # the queries resident: one dot of K = D per key tile
    if qres:
        if D & (D - 1):
            raise ValueError(f"block_k: 0 (queries resident) needs a power-of-two head dim, got D={D}")
        block_k = D
    if D % block_k or block_n % 16 or 128 % block_n:
        raise ValueError(f"block_k / block_n: D={D} must be a multiple of block_k; block_n must divide 128")
    if q.stride(2) != 1:
        q = q.contiguous()
    cdt = q.dtype
    sm = num_sms(q.device)
    fp32_logits = fp32_logits_available(cdt, q.device)
    for seg in segments:
        keys, kvalid = gather_entries(comp_kv, req_to_page, req_rows[seg.req : seg.req + 1], seg.n_entries,
                                      entries_per_page, cdt)  # fmt: skip
        NK = keys.shape[0]
        gemm = gemm_logits(NK, logits, fp32_logits)
        NT = NK // block_n
        row_bytes = H * NK * (4 if gemm else q.element_size())  # the logits S (fp32) or P per token
        tb = max(1, min(seg.end - seg.start, p_bytes // max(1, row_bytes)))
        for t0 in range(seg.start, seg.end, tb):
            t1 = min(t0 + tb, seg.end)
            R = (t1 - t0) * H
            qb = q[t0:t1]
            p = torch.empty((R, NK), dtype=cdt, device=q.device)
            ml = torch.empty((R, 2), dtype=torch.float32, device=q.device)
            if gemm:
                sc = _mm_f32(qb.reshape(R, D), keys.t())
                if sc.dtype != torch.float32:  # no fp32 result from 16-bit operands after all
                    raise RuntimeError("logits='gemm': torch.mm gave no fp32 result")
                bm, bn, one, nw = softmax_tile(NK)  # one pass: a whole row in registers, S read once
                _prefix_softmax_kernel[(cdiv(R, bm),)](
                    sc, kvalid, comp_visible[t0:t1], p, ml, R, H, NK, float(scale) * _LOG2E,
                    BLOCK_M=bm, BLOCK_N=bn, ONE_PASS=one, num_warps=nw,
                )  # fmt: skip
                del sc
            else:
                _prefix_logits_triton(qb, keys, kvalid, comp_visible[t0:t1], p, ml, R, H, NK, NT, scale, sm,
                                      block_m, block_n, block_k, num_warps, num_stages, qres, cdt)  # fmt: skip
            acc = _mm_f32(p, keys)  # [R, D]
            ob = out[t0:t1]
            _merge_kernel[(R,)](
                ob, ob.stride(0), ob.stride(1), lse[t0:t1], acc, ml, H,
                D=D, BLOCK_D=next_power_of_2(D), num_warps=4,
            )  # fmt: skip
    return out


def _prefix_logits_triton(qb, keys, kvalid, vis, p, ml, R, H, NK, NT, scale, sm, block_m, block_n, block_k,
                          num_warps, num_stages, qres, cdt) -> None:  # fmt: skip
    # steps 2-3 by the Triton logits kernel over key groups, then the rescale pass
    D = keys.shape[1]
    tml = torch.empty((R, NT, 2), dtype=torch.float32, device=qb.device)
    n_rb = cdiv(R, block_m)
    groups = max(1, min(NT, cdiv(4 * sm, n_rb)))
    per = cdiv(NT, groups)
    groups = cdiv(NT, per)
    _prefix_probs_kernel[(n_rb, groups)](
        qb, qb.stride(0), qb.stride(1), keys, kvalid, vis, p, tml,
        R, H, NK, per, float(scale) * _LOG2E,
        D=D, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, IEEE=ieee_f32_dots(cdt), QRES=qres,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    bm, bt = rescale_tile(NT)
    _prefix_rescale_kernel[(cdiv(R, bm),)](
        p, tml, ml, R, NK, BLOCK_M=bm, BLOCK_N=block_n, BLOCK_T=bt, num_warps=4
    )  # fmt: skip


_MM_OUT_DTYPE: list[bool] = [True]
_MM_OUT_CHECKED: list[bool] = [False]


def _mm_f32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` with an fp32 result where the GEMM can give one from 16-bit operands
    (``torch.mm(..., out_dtype=torch.float32)``, CUDA), else in the operands' dtype."""
    if a.dtype in (torch.bfloat16, torch.float16) and a.is_cuda and _MM_OUT_DTYPE[0]:
        try:
            return torch.mm(a, b, out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):
            _MM_OUT_DTYPE[0] = False
    return torch.mm(a, b)


def sparse_attention_dense_prefix(
    q: torch.Tensor,
    swa_kv: object,
    swa_pages: torch.Tensor,
    positions: torch.Tensor,
    window: int,
    sinks: torch.Tensor,
    scale: float,
    comp_kv: object,
    comp_visible: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    token_req: torch.Tensor,
    entries_per_page: int,
    segments: list[PrefixSegment],
    **prefix_kw: int,
) -> torch.Tensor:
    """HCA sparse attention (arguments and result as :func:`sgl_kernel_v4.triton.attention.
    sparse_attention` with ``comp_visible``) whose ``segments`` attend their compressed entries
    through the dense path: the paged kernel runs every token with those tokens' visible counts
    set to 0 (window + sink only for them) and returns its log-sum-exp; :func:`prefix_attention`
    merges the entries in. Tokens outside the segments are untouched by the dense path.
    ``prefix_kw``: tile options of :func:`prefix_attention`.

    Raises:
        ValueError: as the two functions it calls.
    """
    from sgl_kernel_v4.triton.attention import sparse_attention

    T, H, _ = q.shape
    vis = comp_visible.clone()
    for seg in segments:
        vis[seg.start : seg.end] = 0
    lse = torch.empty((T, H), dtype=torch.float32, device=q.device)
    out = sparse_attention(
        q, swa_kv, swa_pages, positions, window, sinks, scale, comp_kv, None, vis, req_to_page, req_rows,
        token_req, entries_per_page, lse=lse,
    )  # fmt: skip
    cdt = prefix_compute_dtype(q.dtype, swa_kv)
    return prefix_attention(
        q.to(cdt), out, lse, comp_kv, comp_visible, req_to_page, req_rows, entries_per_page, scale, segments,
        **prefix_kw,
    )  # fmt: skip


#: The decoded CSA path's tile options over the paged kernel's fp8 defaults: two pipeline stages
#: (bf16 entries pipeline; the fastest of four settings on the H200, 1.48-1.63x the fp8 paged
#: kernel at 32K-1M context against 1.44-1.55x with one stage: benchmark/RESULTS.md).
DECODED_CSA_TILE: dict[str, int] = {"num_stages": 2}


def sparse_attention_decoded_csa(
    q: torch.Tensor,
    swa_kv: object,
    swa_pages: torch.Tensor,
    positions: torch.Tensor,
    window: int,
    sinks: torch.Tensor,
    scale: float,
    comp_kv: object,
    comp_entries: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    token_req: torch.Tensor,
    entries_per_page: int,
    segments: list[PrefixSegment],
    **tile_kw: int,
) -> torch.Tensor:
    """CSA sparse attention over fp8 pools (arguments and result as
    :func:`sgl_kernel_v4.triton.attention.sparse_attention` with ``comp_entries``) whose
    ``segments`` read their selected entries from a bf16 copy of the request's entries, decoded
    once per call (:func:`gather_entries`, exact) instead of per token and tile in the kernel: the
    fp8 decode of ``window + top-k`` entries for every token of a 2,048-token chunk is what made
    fp8 prefill attention ~2.2x slower than bf16 (benchmark/RESULTS.md). The window keys stay in
    the fp8 pool. Tokens outside the segments run as before, in contiguous ranges. ``tile_kw``:
    tile options of the segments' kernel calls (``block_n``, ``num_warps``, ``num_stages``; over
    :data:`DECODED_CSA_TILE`).

    Raises:
        ValueError: as :func:`sgl_kernel_v4.triton.attention.sparse_attention`.
    """
    from sgl_kernel_v4.triton.attention import sparse_attention

    T = q.shape[0]
    out = torch.empty_like(q)
    tile_kw = {**DECODED_CSA_TILE, **tile_kw}
    cuts = sorted((seg.start, seg.end, seg) for seg in segments)
    ranges: list[tuple[int, int, PrefixSegment | None]] = []
    t = 0
    for a, b, seg in cuts:
        if a > t:
            ranges.append((t, a, None))
        ranges.append((a, b, seg))
        t = b
    if t < T:
        ranges.append((t, T, None))
    for a, b, seg in ranges:
        if seg is None:
            sparse_attention(
                q[a:b], swa_kv, swa_pages[a:b], positions[a:b], window, sinks, scale, comp_kv, comp_entries[a:b],
                None, req_to_page, req_rows, token_req[a:b], entries_per_page, out=out[a:b],
            )  # fmt: skip
            continue
        keys, valid = gather_entries(comp_kv, req_to_page, req_rows[seg.req : seg.req + 1], seg.n_entries,
                                     entries_per_page, torch.bfloat16)  # fmt: skip
        n_pad = keys.shape[0]
        ent = comp_entries[a:b]
        ok = (ent >= 0) & (ent < n_pad)
        ent = torch.where(ok & (valid[ent.clamp(0, n_pad - 1)] > 0), ent, -1)  # missing pages: no key
        one_page = torch.zeros((1, 1), dtype=torch.int32, device=q.device)
        row0 = torch.zeros((1,), dtype=torch.int64, device=q.device)
        sparse_attention(
            q[a:b], swa_kv, swa_pages[a:b], positions[a:b], window, sinks, scale, keys, ent, None, one_page,
            row0, torch.zeros((b - a,), dtype=torch.int64, device=q.device), n_pad, out=out[a:b], **tile_kw,
        )  # fmt: skip
    return out
