"""Lightning-indexer scoring + radix top-k select (Triton).

Op-table entry 6 (``/work/notes/ops.md``); scoring formula from HF ``DeepseekV4IndexerScorer``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``; paper §2.3.1, eqs. 13-17):
``score[t, c] = sum_h weights[t, h] * relu(scale * q[t, h] · k[cand[t, c]])``.

Pipeline:
1. ``_score_kernel`` (grid T x C/BLOCK_C): gathers the candidate keys, one tensor-core dot for all
   indexer heads, ReLU, head-weighted sum; writes an order-preserving 32-bit key per candidate
   (float bits mapped so that unsigned order == float order; 0 = invalid candidate).
2. Exact top-k by radix select on those keys (three digit levels of 12/12/8 bits, histograms via
   ``tl.histogram``), finding the k-th largest key ``thr`` and writing every candidate with
   ``key > thr`` plus as many ``key == thr`` ties as needed:
   - many rows (prefill): ``_refine_kernel`` in row mode, one program per row, 4 passes over it;
   - few rows with many candidates (decode at 256K): ``_hist_kernel`` + ``_select_kernel`` spread
     each row over P programs (level-1 histogram via atomics; the top bins are written out, the
     boundary bin is collected into a candidate list), then ``_refine_kernel`` in list mode
     finishes the boundary bin in one program per row.
The output holds positions into ``candidates`` in no particular order; ``-1`` pads rows with fewer
than ``topk`` valid candidates.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import num_sms

__all__ = ["indexer_topk", "indexer_scores", "topk_from_scores"]

NB1 = 4096  # level-1 digit: key bits 31..20
NB2 = 4096  # level-2 digit: key bits 19..8
NB3 = 256  # level-3 digit: key bits 7..0


@triton.jit
def _float_to_key(x):
    # i < 0 (negative float): flip all bits; else set the sign bit -> unsigned order == float order
    i = x.to(tl.int32, bitcast=True)
    mask = (i >> 31) | -2147483648
    return (i ^ mask).to(tl.uint32, bitcast=True)


@triton.jit
def _score_kernel(
    q_ptr,
    stride_qt,
    stride_qh,
    w_ptr,
    stride_wt,
    kv_ptr,
    stride_kv,
    cand_ptr,
    stride_ct,
    keys_ptr,
    scores_ptr,
    C,
    HI,
    scale,
    DI: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr,
    WRITE_SCORES: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    cb = tl.program_id(1)
    offs_c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = offs_c < C
    offs_d = tl.arange(0, DI)
    offs_h = tl.arange(0, BLOCK_H)
    hmask = offs_h < HI
    slot = tl.load(cand_ptr + t * stride_ct + offs_c, mask=cmask, other=-1)
    valid = slot >= 0
    k = tl.load(
        kv_ptr + slot[:, None].to(tl.int64) * stride_kv + offs_d[None, :], mask=valid[:, None], other=0.0
    )
    q = tl.load(
        q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + offs_d[None, :], mask=hmask[:, None], other=0.0
    )
    w = tl.load(w_ptr + t * stride_wt + offs_h, mask=hmask, other=0.0).to(tl.float32)
    s = tl.dot(q.to(k.dtype), tl.trans(k))  # [BLOCK_H, BLOCK_C] fp32
    s = tl.maximum(s * scale, 0.0) * w[:, None]
    score = tl.sum(s, 0)
    key = tl.where(valid, _float_to_key(score), 0)
    tl.store(keys_ptr + t * C + offs_c, key.to(tl.int32, bitcast=True), mask=cmask)
    if WRITE_SCORES:
        tl.store(scores_ptr + t * C + offs_c, tl.where(valid, score, float("-inf")), mask=cmask)


@triton.jit
def _keys_from_scores_kernel(scores_ptr, stride_st, keys_ptr, C, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < C
    x = tl.load(scores_ptr + t * stride_st + offs, mask=m, other=float("-inf")).to(tl.float32)
    key = tl.where(x == float("-inf"), 0, _float_to_key(x))
    tl.store(keys_ptr + t * C + offs, key.to(tl.int32, bitcast=True), mask=m)


@triton.jit
def _threshold(h, need, NB: tl.constexpr):
    """Largest bin b with count(bins >= b) >= need (-1 if none) and count(bins > b)."""
    bins = tl.arange(0, NB)
    ge = tl.cumsum(h, 0, reverse=True)
    b = tl.max(tl.where(ge >= need, bins, -1), 0)
    above = tl.sum(tl.where(bins > b, h, 0), 0)
    return b, above


@triton.jit
def _load_items(keys_row, cand_row, i0, n, BLOCK: tl.constexpr, USE_CAND: tl.constexpr):
    offs = i0 + tl.arange(0, BLOCK)
    m = offs < n
    if USE_CAND:
        pos = tl.load(cand_row + offs, mask=m, other=0)
    else:
        pos = offs
    key = tl.load(keys_row + pos, mask=m, other=0).to(tl.uint32, bitcast=True)
    return pos, key, m & (key != 0)


@triton.jit
def _hist_kernel(keys_ptr, hist_ptr, C, chunk, NB: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1)
    start = p * chunk
    end = tl.minimum(start + chunk, C)
    h = tl.zeros([NB], tl.int32)
    for i0 in range(start, end, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        m = offs < end
        key = tl.load(keys_ptr + t * C + offs, mask=m, other=0).to(tl.uint32, bitcast=True)
        b = (key >> 20).to(tl.int32)
        h += tl.histogram(b, NB, mask=m & (key != 0))
    tl.atomic_add(hist_ptr + t * NB + tl.arange(0, NB), h, mask=h > 0)


@triton.jit
def _select_kernel(
    keys_ptr, hist_ptr, cnt_ptr, out_ptr, cand_ptr, C, K, chunk, NB: tl.constexpr, BLOCK: tl.constexpr
):
    t = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1)
    h = tl.load(hist_ptr + t * NB + tl.arange(0, NB))
    b1, a1 = _threshold(h, K, NB)
    start = p * chunk
    end = tl.minimum(start + chunk, C)
    for i0 in range(start, end, BLOCK):
        offs = i0 + tl.arange(0, BLOCK)
        m = offs < end
        key = tl.load(keys_ptr + t * C + offs, mask=m, other=0).to(tl.uint32, bitcast=True)
        valid = m & (key != 0)
        b = (key >> 20).to(tl.int32)
        hi = valid & (b > b1)
        eq = valid & (b == b1)
        n_hi = tl.sum(hi.to(tl.int32), 0)
        if n_hi > 0:
            base = tl.atomic_add(cnt_ptr + t * 2, n_hi)
            pos = base + tl.cumsum(hi.to(tl.int32), 0) - 1
            tl.store(out_ptr + t * K + pos, offs.to(tl.int64), mask=hi)
        n_eq = tl.sum(eq.to(tl.int32), 0)
        if n_eq > 0:
            base2 = tl.atomic_add(cnt_ptr + t * 2 + 1, n_eq)
            pos2 = base2 + tl.cumsum(eq.to(tl.int32), 0) - 1
            tl.store(cand_ptr + t * C + pos2, offs, mask=eq)


@triton.jit
def _refine_kernel(
    keys_ptr,
    cand_ptr,
    cnt_ptr,
    out_ptr,
    C,
    K,
    NB1: tl.constexpr,
    NB2: tl.constexpr,
    NB3: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_CAND: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    keys_row = keys_ptr + t * C
    cand_row = cand_ptr + t * C
    if USE_CAND:
        base = tl.load(cnt_ptr + t * 2)
        n = tl.load(cnt_ptr + t * 2 + 1)
    else:
        base = 0
        n = C
    need = K - base
    # level 1: bits 31..20
    h1 = tl.zeros([NB1], tl.int32)
    for i0 in range(0, n, BLOCK):
        pos, key, valid = _load_items(keys_row, cand_row, i0, n, BLOCK, USE_CAND)
        h1 += tl.histogram((key >> 20).to(tl.int32), NB1, mask=valid)
    b1, a1 = _threshold(h1, need, NB1)
    # level 2: bits 19..8 within bin b1
    h2 = tl.zeros([NB2], tl.int32)
    for i0 in range(0, n, BLOCK):
        pos, key, valid = _load_items(keys_row, cand_row, i0, n, BLOCK, USE_CAND)
        sel = valid & ((key >> 20).to(tl.int32) == b1)
        h2 += tl.histogram(((key >> 8) & 0xFFF).to(tl.int32), NB2, mask=sel)
    b2, a2 = _threshold(h2, need - a1, NB2)
    # level 3: bits 7..0 within (b1, b2)
    h3 = tl.zeros([NB3], tl.int32)
    pre = b1 * NB2 + b2
    for i0 in range(0, n, BLOCK):
        pos, key, valid = _load_items(keys_row, cand_row, i0, n, BLOCK, USE_CAND)
        sel = valid & ((key >> 8).to(tl.int32) == pre)
        h3 += tl.histogram((key & 0xFF).to(tl.int32), NB3, mask=sel)
    b3, a3 = _threshold(h3, need - a1 - a2, NB3)
    ok = b1 >= 0  # else: fewer valid items than needed, take them all (thr = 0 = invalid key)
    thr = tl.where(ok, (b1 << 20) | (b2 << 8) | b3, 0).to(tl.uint32)
    n_sure = tl.where(ok, a1 + a2 + a3, a1)
    n_tie = tl.where(ok, need - n_sure, 0)
    off_s = 0
    off_t = 0
    for i0 in range(0, n, BLOCK):
        pos, key, valid = _load_items(keys_row, cand_row, i0, n, BLOCK, USE_CAND)
        sure = valid & (key > thr)
        tie = valid & (key == thr)
        ps = off_s + tl.cumsum(sure.to(tl.int32), 0) - 1
        tl.store(out_ptr + t * K + base + ps, pos.to(tl.int64), mask=sure)
        pt = off_t + tl.cumsum(tie.to(tl.int32), 0) - 1
        tl.store(out_ptr + t * K + base + n_sure + pt, pos.to(tl.int64), mask=tie & (pt < n_tie))
        off_s += tl.sum(sure.to(tl.int32), 0)
        off_t += tl.sum(tie.to(tl.int32), 0)


def _select_from_keys(keys: torch.Tensor, topk: int, out: torch.Tensor, programs_per_row: int | None) -> None:
    T, C = keys.shape
    dev = keys.device
    if programs_per_row is None:
        programs_per_row = max(1, min(triton.cdiv(2 * num_sms(dev), T), triton.cdiv(C, 4096)))
    P = int(programs_per_row)
    block = 1024
    if P <= 1:
        _refine_kernel[(T,)](
            keys,
            keys,
            keys,
            out,
            C,
            topk,
            NB1=NB1,
            NB2=NB2,
            NB3=NB3,
            BLOCK=block,
            USE_CAND=False,
            num_warps=8,
        )
        return
    work = torch.zeros(T * (NB1 + 2), dtype=torch.int32, device=dev)  # one memset for both
    hist_buf = work[: T * NB1].view(T, NB1)
    cnt_buf = work[T * NB1 :].view(T, 2)
    cand = torch.empty((T, C), dtype=torch.int32, device=dev)
    chunk = triton.cdiv(triton.cdiv(C, P), block) * block
    _hist_kernel[(T, P)](keys, hist_buf, C, chunk, NB=NB1, BLOCK=block, num_warps=8)
    _select_kernel[(T, P)](
        keys, hist_buf, cnt_buf, out, cand, C, topk, chunk, NB=NB1, BLOCK=block, num_warps=8
    )
    _refine_kernel[(T,)](
        keys, cand, cnt_buf, out, C, topk, NB1=NB1, NB2=NB2, NB3=NB3, BLOCK=block, USE_CAND=True, num_warps=8
    )


def _check(
    q: torch.Tensor, weights: torch.Tensor, idx_kv_flat: torch.Tensor, candidates: torch.Tensor, topk: int
) -> None:
    if q.dim() != 3:
        raise ValueError(f"q: expected [T, Hi, di], got {tuple(q.shape)}")
    T, HI, DI = q.shape
    if DI & (DI - 1) or DI < 16:
        raise ValueError(f"q: head dim must be a power of 2 >= 16, got {DI}")
    if weights.shape != (T, HI):
        raise ValueError(f"weights: expected [{T}, {HI}], got {tuple(weights.shape)}")
    if idx_kv_flat.dim() != 2 or idx_kv_flat.shape[1] != DI or idx_kv_flat.stride(1) != 1:
        raise ValueError(
            f"idx_kv_flat: expected contiguous-last-dim [N, {DI}], got {tuple(idx_kv_flat.shape)}"
        )
    if candidates.dim() != 2 or candidates.shape[0] != T:
        raise ValueError(f"candidates: expected [{T}, C], got {tuple(candidates.shape)}")
    if topk < 1:
        raise ValueError(f"topk: must be >= 1, got {topk}")


def indexer_scores(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: torch.Tensor,
    candidates: torch.Tensor,
    scale: float,
    *,
    block_c: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Indexer scores. Returns ``(keys [T, C] int32 order-preserving, scores [T, C] fp32, -inf = invalid)``."""
    _check(q, weights, idx_kv_flat, candidates, 1)
    return _scores(q, weights, idx_kv_flat, candidates, scale, block_c, write_scores=True)


def _scores(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: torch.Tensor,
    candidates: torch.Tensor,
    scale: float,
    block_c: int,
    write_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    T, HI, DI = q.shape
    C = candidates.shape[1]
    if q.stride(2) != 1:
        q = q.contiguous()
    if candidates.stride(1) != 1:
        candidates = candidates.contiguous()
    keys = torch.empty((T, C), dtype=torch.int32, device=q.device)
    scores = torch.empty((T, C), dtype=torch.float32, device=q.device) if write_scores else keys
    if T and C:
        block_h = max(16, triton.next_power_of_2(HI))
        _score_kernel[(T, triton.cdiv(C, block_c))](
            q, q.stride(0), q.stride(1), weights, weights.stride(0), idx_kv_flat, idx_kv_flat.stride(0),
            candidates, candidates.stride(0), keys, scores, C, HI, float(scale),
            DI=DI, BLOCK_H=block_h, BLOCK_C=block_c, WRITE_SCORES=write_scores, num_warps=8 if block_h >= 64 else 4,
        )  # fmt: skip
    return keys, scores


def topk_from_scores(
    scores: torch.Tensor, topk: int, *, out: torch.Tensor | None = None, programs_per_row: int | None = None
) -> torch.Tensor:
    """Positions of the ``topk`` largest entries of each row of ``scores [T, C]`` (fp32/bf16).

    ``-inf`` entries count as invalid; rows with fewer than ``topk`` valid entries are padded with
    ``-1``. Positions are int64 and unordered. Exact (radix select on the float bits).
    """
    if scores.dim() != 2:
        raise ValueError(f"scores: expected [T, C], got {tuple(scores.shape)}")
    T, C = scores.shape
    if out is None:
        out = torch.empty((T, topk), dtype=torch.int64, device=scores.device)
    out.fill_(-1)
    if T == 0 or C == 0:
        return out
    keys = torch.empty((T, C), dtype=torch.int32, device=scores.device)
    _keys_from_scores_kernel[(T, triton.cdiv(C, 1024))](
        scores, scores.stride(0), keys, C, BLOCK=1024, num_warps=4
    )
    _select_from_keys(keys, topk, out, programs_per_row)
    return out


def indexer_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: torch.Tensor,
    candidates: torch.Tensor,
    topk: int,
    scale: float,
    *,
    out: torch.Tensor | None = None,
    programs_per_row: int | None = None,
    block_c: int = 128,
) -> torch.Tensor:
    """Lightning-indexer top-k (op table entry 6).

    Args:
        q: ``[T, Hi, di]`` bf16/fp32 indexer queries (RoPE already applied), di a power of 2.
        weights: ``[T, Hi]`` fp32 per-head weights (HF: ``weights_proj(x) * Hi**-0.5``).
        idx_kv_flat: ``[N, di]`` compressed indexer keys (flat pool view).
        candidates: ``[T, C]`` int32/int64 flat slots of the visible entries, ``-1`` = padding.
        topk: number of positions to return per row.
        scale: score scale (HF: ``di ** -0.5``), applied inside the ReLU.
        out: optional ``[T, topk]`` int64 output buffer.
        programs_per_row: programs splitting each row's select (None = by batch size).
        block_c: candidates per scoring program.

    Returns:
        ``[T, topk]`` int64 positions into ``candidates`` (0..C-1) of the top-k scores, in no
        particular order, ``-1`` where fewer than ``topk`` candidates are valid. Ties at the k-th
        score are broken arbitrarily.

    Raises:
        ValueError: a shape is inconsistent or ``topk < 1``.
    """
    _check(q, weights, idx_kv_flat, candidates, topk)
    T = q.shape[0]
    if out is None:
        out = torch.empty((T, topk), dtype=torch.int64, device=q.device)
    out.fill_(-1)
    C = candidates.shape[1]
    if T == 0 or C == 0:
        return out
    keys, _ = _scores(q, weights, idx_kv_flat, candidates, scale, block_c, write_scores=False)
    _select_from_keys(keys, topk, out, programs_per_row)
    return out
