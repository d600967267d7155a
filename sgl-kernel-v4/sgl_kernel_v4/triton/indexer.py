"""Lightning-indexer scoring + radix top-k select (Triton).

Op-table entry 6 (``sgl_kernel_v4/ops.py``); scoring formula from HF ``DeepseekV4IndexerScorer``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``; paper §2.3.1, eqs. 13-17):
``score[t, c] = sum_h weights[t, h] * relu(scale * q[t, h] · k[cand[t, c]])``.

Pipeline:
1. ``_score_kernel`` (grid T x C/BLOCK_C): gathers the candidate keys, one tensor-core dot for all
   indexer heads, ReLU, head-weighted sum; writes an order-preserving int32 key per candidate
   (float bits mapped so that signed int32 order == float order, ``-0.0`` mapped to ``+0.0``;
   INT_MIN = invalid candidate). Every program computes one query's scores of one candidate block
   with the same tiles and reduction order whatever T and C are, so a query's scores do not
   depend on the batch or chunk it is computed in.
2. Exact top-k select on those keys, in registers: one program holds a chunk of keys and finds
   the k-th largest key ``thr`` by a 32-step bitwise search (each step one block-wide count),
   then keeps every item with ``key > thr`` plus the lowest-position ``key == thr`` items that
   fill the remaining places, and writes them in ascending position order (one cumsum). Rows
   longer than ``max_row`` (decode at 256K candidates) are first split into chunks whose local
   top-k survive (the global top-k is a subset of their union), in parallel over many programs;
   one program per row then selects from the survivors, which are still in position order.

Tie rule (the same as the torch reference ``sgl_kernel_v4.ref.attention.indexer_topk``): the
selection is the ``topk`` largest composite keys ``(score, -position)``: a higher score wins, equal
scores go to the lower position in the candidate row (the earlier compressed entry). The output
holds the selected positions in ascending order, ``-1`` after them where a row has fewer than
``topk`` valid candidates.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.ref.attention import select_topk

__all__ = ["indexer_topk", "indexer_scores", "topk_from_scores"]

INT_MIN = -(2**31)  # key of an invalid candidate (below every float's key)


@triton.jit
def _float_to_key(x):
    # signed-order key: flip the 31 low bits of negative floats, so int32 order == float order;
    # -0.0 becomes +0.0 first (they compare equal, so they must tie)
    x = tl.where(x == 0.0, 0.0, x)
    i = x.to(tl.int32, bitcast=True)
    return i ^ ((i >> 31) & 0x7FFFFFFF)


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
    key = tl.where(valid, _float_to_key(score), tl.full([BLOCK_C], -(2**31), tl.int32))
    tl.store(keys_ptr + t * C + offs_c, key, mask=cmask)
    if WRITE_SCORES:
        tl.store(scores_ptr + t * C + offs_c, tl.where(valid, score, float("-inf")), mask=cmask)


@triton.jit
def _keys_from_scores_kernel(scores_ptr, stride_st, keys_ptr, C, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < C
    x = tl.load(scores_ptr + t * stride_st + offs, mask=m, other=float("-inf")).to(tl.float32)
    key = tl.where(x == float("-inf"), tl.full([BLOCK], -(2**31), tl.int32), _float_to_key(x))
    tl.store(keys_ptr + t * C + offs, key, mask=m)


@triton.jit
def _kth_largest(key, valid, k):
    """Largest int32 ``thr`` with ``count(valid & key >= thr) >= k`` (bit-by-bit search);
    INT_MIN when fewer than ``k`` items are valid."""
    cnt0 = tl.sum((valid & (key >= 0)).to(tl.int32), 0)
    thr = tl.where(cnt0 >= k, tl.full([], 0, tl.int32), tl.full([], -(2**31), tl.int32))
    for b in tl.static_range(30, -1, -1):
        t2 = thr | (1 << b)
        cnt = tl.sum((valid & (key >= t2)).to(tl.int32), 0)
        thr = tl.where(cnt >= k, t2, thr)
    return thr


@triton.jit
def _select_kernel(
    keys_ptr,
    pos_ptr,
    n,
    stride_in,
    out_keys_ptr,
    out_pos_ptr,
    stride_out,
    k,
    BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_POS: tl.constexpr,
    FINAL: tl.constexpr,
):
    """Top-k of one BLOCK-sized chunk held in registers, under the tie rule (key desc, then
    position asc), written in the chunk's position order. Non-final: writes the chunk's top-k
    (key, pos) pairs to slots [p*k, p*k+k) (unused slots get INT_MIN keys). Final: writes the
    positions (int64) to out[t, 0:count]; the host pre-fills -1."""
    t = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1)
    offs = p * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    key = tl.load(keys_ptr + t * stride_in + offs, mask=m, other=-(2**31))
    valid = m & (key != -(2**31))
    if USE_POS:
        pos = tl.load(pos_ptr + t * stride_in + offs, mask=m, other=-1)
    else:
        pos = offs
    thr = _kth_largest(key, valid, k)
    sure = valid & (key > thr)
    tie = valid & (key == thr)
    n_sure = tl.sum(sure.to(tl.int32), 0)
    # ties at the k-th key: the lowest positions fill the k - n_sure remaining places
    sel = sure | (tie & (tl.cumsum(tie.to(tl.int32), 0) <= k - n_sure))
    dst = tl.cumsum(sel.to(tl.int32), 0) - 1  # ascending position order
    if FINAL:
        tl.store(out_pos_ptr + t * stride_out + dst, pos.to(tl.int64), mask=sel)
    else:
        base = t * stride_out + p * k
        tl.store(out_keys_ptr + base + dst, key, mask=sel)
        tl.store(out_pos_ptr + base + dst, pos, mask=sel)
        n_sel = tl.sum(sel.to(tl.int32), 0)
        offs_k = tl.arange(0, BLOCK_K)
        pad = (offs_k >= n_sel) & (offs_k < k)
        tl.store(out_keys_ptr + base + offs_k, tl.full([BLOCK_K], -(2**31), tl.int32), mask=pad)


def _warps(block: int) -> int:
    return max(4, min(16, block // 512))


def _select_from_keys(
    keys: torch.Tensor,
    topk: int,
    out: torch.Tensor,
    chunk: int | None = None,
    max_row: int | None = None,
) -> None:
    """Write the positions of each row's ``topk`` largest keys into ``out`` (pre-filled with -1),
    ties to the lower position, in ascending position order.

    Rows longer than ``max_row`` are first cut into ``chunk``-sized pieces whose local top-k
    survive (the global top-k is a subset of their union), repeatedly, then one program per row
    selects from the survivors. Every step holds its items in registers and keeps position order,
    so the lower-position tie winners of a chunk are also those of the row.
    """
    T, C = keys.shape
    if topk > 4096:  # outside the register budget of the in-register select: torch fallback
        out.copy_(select_topk(keys, keys != INT_MIN, topk))
        return
    if max_row is None:
        max_row = 16384 if T >= 64 else 8192
    max_row = max(max_row, triton.next_power_of_2(2 * topk))
    if chunk is None:
        chunk = 8192 if C > 65536 else 4096
    chunk = max(chunk, triton.next_power_of_2(2 * topk))
    block_k = triton.next_power_of_2(topk)
    cur_keys, cur_pos, n, use_pos = keys, keys, C, False
    while n > max_row:
        P = triton.cdiv(n, chunk)
        nk = torch.empty((T, P * topk), dtype=torch.int32, device=keys.device)
        npos = torch.empty((T, P * topk), dtype=torch.int32, device=keys.device)
        _select_kernel[(T, P)](
            cur_keys, cur_pos, n, cur_keys.stride(0), nk, npos, nk.stride(0), topk,
            BLOCK=chunk, BLOCK_K=block_k, USE_POS=use_pos, FINAL=False, num_warps=_warps(chunk),
        )  # fmt: skip
        cur_keys, cur_pos, n, use_pos = nk, npos, P * topk, True
    block = max(16, triton.next_power_of_2(n))
    _select_kernel[(T, 1)](
        cur_keys, cur_pos, n, cur_keys.stride(0), out, out, out.stride(0), topk,
        BLOCK=block, BLOCK_K=block_k, USE_POS=use_pos, FINAL=True, num_warps=_warps(block),
    )  # fmt: skip


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
    """Indexer scores: ``(keys [T, C] int32 order-preserving, INT_MIN = invalid; scores [T, C] fp32, -inf = invalid)``."""
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
    scores: torch.Tensor,
    topk: int,
    *,
    out: torch.Tensor | None = None,
    chunk: int | None = None,
    max_row: int | None = None,
) -> torch.Tensor:
    """Positions of the ``topk`` largest entries of each row of ``scores [T, C]`` (fp32/bf16).

    ``-inf`` entries count as invalid; rows with fewer than ``topk`` valid entries are padded with
    ``-1``. Positions are int64, in ascending order; equal scores go to the lower position (the
    module's tie rule; ``-0.0`` equals ``+0.0``). Exact (radix select on the float bits).
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
    _select_from_keys(keys, topk, out, chunk, max_row)
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
    chunk: int | None = None,
    max_row: int | None = None,
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
        chunk / max_row: select tiling (rows longer than ``max_row`` are pre-reduced in ``chunk``s).
        block_c: candidates per scoring program.

    Returns:
        ``[T, topk]`` int64 positions into ``candidates`` (0..C-1) of the top-k scores in ascending
        order, ``-1`` after them where fewer than ``topk`` candidates are valid. Ties at the k-th
        score go to the lower positions (the module's tie rule), so the selection of a query is
        the same in any batch, chunk or candidate-row length.

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
    _select_from_keys(keys, topk, out, chunk, max_row)
    return out
