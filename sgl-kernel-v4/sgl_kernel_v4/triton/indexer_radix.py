"""Exact selection inside the threshold bin of the indexer top-k (Triton): radix digits.

Step 3 of :mod:`sgl_kernel_v4.triton.indexer` (its docstring gives the pipeline and the tie rule).
The filter pass leaves, per token row, ``n_sure`` entries above the threshold bin (all selected)
and a list of ``M`` candidates of the threshold bin (keys and positions), of which the ``need =
topk - n_sure`` best by the composite key ``(key, -position)`` are selected. Every candidate
shares the top ``HB = 12`` key bits (the bin), so the ``need``-th largest key ``thr`` is found by
radix selection over the 20 bits below them, 10 bits at a time (digits ``[10, 20)``, ``[0, 10)``):
per digit, a 1,024-bin histogram of the candidates that match the bits fixed so far, and the
largest digit whose suffix count still reaches the number of keys wanted. Two histogram passes
instead of the 31 count passes of a bit-by-bit search.

The last digit's bin gives ``eq``, the number of candidates whose key equals ``thr``, and ``rem``,
how many of them are wanted. When ``rem == eq`` (no tie across the boundary, the usual case) every
such key is selected and the position search is skipped (decided on the device). Else the
``rem``-th smallest position among them is found the same way (digits ``[30, 31)``, ``[20, 30)``,
``[10, 20)``, ``[0, 10)``; a digit above the row's position bound is known to be 0 and skipped:
two passes up to 2^20 entries).
Positions are distinct, so exactly ``need`` candidates satisfy ``key > thr or (key == thr and
position <= pthr)``.

A list of at most ``RADIX_CAP`` candidates is loaded once into registers and every pass is a
register histogram; a longer one (many keys sharing the top 12 bits, e.g. many equal scores) is
re-read from memory in blocks of ``BLOCK`` per pass: the same passes, correct for any ``M``.
"""

from __future__ import annotations

import triton
import triton.language as tl

INT_MIN = tl.constexpr(-(2**31))
INT_MAX = tl.constexpr(2**31 - 1)
TOP_MASK = tl.constexpr(-(1 << 20))  # the top 12 key bits (the histogram bin's), as int32
DIGIT_MASK = tl.constexpr(1023)  # radix digits of 10 bits
BINS = tl.constexpr(1024)
#: candidates held in registers by the final pass (more: re-read per pass)
RADIX_CAP = 4096


@triton.jit
def _pick_high(h, rem):
    # the largest digit d with count(digit >= d) >= rem; the counts above d and at d
    d_ = tl.arange(0, BINS)
    suf = tl.cumsum(h, 0, reverse=True)
    d = tl.sum((suf >= rem).to(tl.int32), 0) - 1
    above = tl.sum(tl.where(d_ > d, h, 0), 0)
    eq = tl.sum(tl.where(d_ == d, h, 0), 0)
    return d, above, eq


@triton.jit
def _pick_low(h, rem):
    # the smallest digit d with count(digit <= d) >= rem; the count below d
    d_ = tl.arange(0, BINS)
    pre = tl.cumsum(h, 0)
    d = tl.sum((pre < rem).to(tl.int32), 0)
    below = tl.sum(tl.where(d_ < d, h, 0), 0)
    return d, below


@triton.jit
def _digit_hist(key, pos, m, kpref, ppref, HI: tl.constexpr, SHIFT: tl.constexpr, ON_POS: tl.constexpr):
    # histogram of the 10-bit digit at SHIFT of the candidates matching the prefix (bits >= HI):
    # of the key, or (ON_POS) of the position among the keys equal to kpref
    if ON_POS:
        sel = m & (key == kpref) & ((pos >> HI) == (ppref >> HI))
        x = pos
    else:
        sel = m & ((key >> HI) == (kpref >> HI))
        x = key
    return tl.histogram((x >> SHIFT) & DIGIT_MASK, BINS, mask=sel)


@triton.jit
def _list_hist(kb, pb, M, key, pos, m, kpref, ppref, HI: tl.constexpr, SHIFT: tl.constexpr,
               ON_POS: tl.constexpr, CACHED: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    # one digit pass over the whole list: the register copy (CACHED) or blocks re-read from memory
    if CACHED:
        h = _digit_hist(key, pos, m, kpref, ppref, HI, SHIFT, ON_POS)
    else:
        h = tl.zeros([BINS], tl.int32)
        offs = tl.arange(0, BLOCK)
        for i0 in range(0, M, BLOCK):
            mm = i0 + offs < M
            k = tl.load(kb + i0 + offs, mask=mm, other=INT_MIN, cache_modifier=".cg")
            p = tl.load(pb + i0 + offs, mask=mm, other=0, cache_modifier=".cg")
            h += _digit_hist(k, p, mm, kpref, ppref, HI, SHIFT, ON_POS)
    return h


@triton.jit
def _position_threshold(kb, pb, M, thr, rem, npos, key, pos, m, CACHED: tl.constexpr, BLOCK: tl.constexpr):
    # the rem-th smallest position among the candidates whose key is thr (positions < npos)
    pp = tl.zeros([], tl.int32)
    if npos > (1 << 30):
        h = _list_hist(kb, pb, M, key, pos, m, thr, pp, 31, 30, True, CACHED, BLOCK)
        d, below = _pick_low(h, rem)
        pp = pp | (d << 30)
        rem -= below
    if npos > (1 << 20):
        h = _list_hist(kb, pb, M, key, pos, m, thr, pp, 30, 20, True, CACHED, BLOCK)
        d, below = _pick_low(h, rem)
        pp = pp | (d << 20)
        rem -= below
    if npos > (1 << 10):
        h = _list_hist(kb, pb, M, key, pos, m, thr, pp, 20, 10, True, CACHED, BLOCK)
        d, below = _pick_low(h, rem)
        pp = pp | (d << 10)
        rem -= below
    h = _list_hist(kb, pb, M, key, pos, m, thr, pp, 10, 0, True, CACHED, BLOCK)
    d, below = _pick_low(h, rem)
    return pp | d


@triton.jit
def _threshold(kb, pb, M, need, npos, key, pos, m, CACHED: tl.constexpr, BLOCK: tl.constexpr):
    # (thr, pthr): the selected candidates are key > thr or (key == thr and pos <= pthr)
    kp = tl.load(kb) & TOP_MASK  # every candidate has these bits (the threshold bin)
    rem = need
    h = _list_hist(kb, pb, M, key, pos, m, kp, 0, 20, 10, False, CACHED, BLOCK)
    d, above, eq = _pick_high(h, rem)
    kp = kp | (d << 10)
    rem -= above
    h = _list_hist(kb, pb, M, key, pos, m, kp, 0, 10, 0, False, CACHED, BLOCK)
    d, above, eq = _pick_high(h, rem)
    kp = kp | d
    rem -= above
    pthr = tl.full([], INT_MAX, tl.int32)
    if rem < eq:  # keys equal to thr on both sides of the boundary: the lowest positions win
        pthr = _position_threshold(kb, pb, M, kp, rem, npos, key, pos, m, CACHED, BLOCK)
    return kp, pthr


@triton.jit
def _emit(kb, pb, M, thr, pthr, orow, start, key, pos, m, CACHED: tl.constexpr, BLOCK: tl.constexpr):
    # append the selected candidates' positions to the output row from place `start`
    if CACHED:
        sel = m & ((key > thr) | ((key == thr) & (pos <= pthr)))
        dst = start + tl.cumsum(sel.to(tl.int32), 0) - 1
        tl.store(orow + dst, pos.to(tl.int64), mask=sel)
    else:
        offs = tl.arange(0, BLOCK)
        written = start
        for i0 in range(0, M, BLOCK):
            mm = i0 + offs < M
            k = tl.load(kb + i0 + offs, mask=mm, other=INT_MIN, cache_modifier=".cg")
            p = tl.load(pb + i0 + offs, mask=mm, other=0, cache_modifier=".cg")
            sel = mm & ((k > thr) | ((k == thr) & (p <= pthr)))
            dst = written + tl.cumsum(sel.to(tl.int32), 0) - 1
            tl.store(orow + dst, p.to(tl.int64), mask=sel)
            written += tl.sum(sel.to(tl.int32), 0)


@triton.jit
def finish_row(n_sure, M, sure_row, kb, pb, orow, K, npos, BLOCK_K2: tl.constexpr, CAP: tl.constexpr,
               BLOCK: tl.constexpr):  # fmt: skip
    """Output row of a long token row: the ``n_sure`` entries of ``sure_row`` and the best ``K -
    n_sure`` of the ``M`` candidates ``(kb[i], pb[i])`` (positions ``< npos``), ascending; ``-1``
    after them when fewer than ``K`` are valid (``M == 0``). Lists are read through L2 (``.cg``):
    another program of the launch may have written them."""
    offs_k = tl.arange(0, BLOCK_K2)
    sure = tl.load(sure_row + offs_k, mask=offs_k < n_sure, other=0, cache_modifier=".cg")
    tl.store(orow + offs_k, sure.to(tl.int64), mask=offs_k < n_sure)
    if M > 0:
        need = K - n_sure
        if M <= CAP:
            offs = tl.arange(0, CAP)
            m = offs < M
            key = tl.load(kb + offs, mask=m, other=INT_MIN, cache_modifier=".cg")
            pos = tl.load(pb + offs, mask=m, other=0, cache_modifier=".cg")
            thr, pthr = _threshold(kb, pb, M, need, npos, key, pos, m, True, BLOCK)
            _emit(kb, pb, M, thr, pthr, orow, n_sure, key, pos, m, True, BLOCK)
        else:
            d = tl.arange(0, BLOCK)  # (no register copy: placeholders)
            thr, pthr = _threshold(kb, pb, M, need, npos, d, d, d < 0, False, BLOCK)
            _emit(kb, pb, M, thr, pthr, orow, n_sure, d, d, d < 0, False, BLOCK)
    tl.debug_barrier()
    # sort the row ascending (positions < 2^31 - 1 as int32); the places past the selection: -1
    n_sel = tl.where(M > 0, K, n_sure)
    row = tl.load(orow + offs_k, mask=offs_k < n_sel, other=INT_MAX).to(tl.int32)
    row = tl.sort(row)
    tl.store(orow + offs_k, tl.where(row == INT_MAX, -1, row).to(tl.int64), mask=offs_k < K)
