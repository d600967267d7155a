"""Top-k selection passes of the lightning indexer (Triton): histogram, filter, final merge.

Steps 1b-3 of :mod:`sgl_kernel_v4.triton.indexer` (its docstring describes the pipeline, the
tie rule and the workspace). Each pass reads the per-token keys that the scoring pass wrote into
the workspace: order-preserving int32 keys, ``INT_MIN`` for an invalid entry. The final selection
(:mod:`sgl_kernel_v4.triton.indexer_radix`) runs in the filter launch by default
(``_filter_final_kernel``: the row's last filter program, found with an acq_rel arrival counter,
selects), or as its own launch (``_final_kernel``); :func:`select` picks.

**Short rows.** A token that sees at most ``topk`` entries selects every valid one of them, so its
result does not depend on the scores: with ``short=True`` the histogram and filter programs of such
a row return at once, and the final pass writes the valid positions ``< visible[t]`` in ascending
order, ``-1`` after them (the selection :func:`sgl_kernel_v4.ref.attention.select_topk` gives when
the valid count is at most ``topk``). The test is made per row on the device from ``visible``: no
host synchronisation, and one batch may mix short and long rows. ``short=False`` runs every row
through the histogram path (the pipeline before the short-row path; benchmarks' baseline).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2, num_sms
from sgl_kernel_v4.triton.indexer_radix import RADIX_CAP, finish_row

INT_MIN_VALUE = -(2**31)  # key of an invalid candidate (below every float's key), for host code
INT_MIN = tl.constexpr(
    INT_MIN_VALUE
)  # the same inside the kernels (a jit function reads constexpr globals only)
#: int32 counters per token row: entries above the threshold bin, candidates in it, programs done
CNT = tl.constexpr(4)
#: the selection implementations of :func:`select`
SELECT_IMPLS = ("fused", "radix", "bitsearch")
#: the default: the fastest measured on the H200 at 262,144 candidates, bs 1 (``RESULTS.md``,
#: "indexer top-k"): filter 5.6 us + bit-search final 31 us, against 57 us for the fused launch
DEFAULT_SELECT_IMPL = "bitsearch"
HB = 12  # histogram bits: bins of the keys' top 12 bits (sign, 8 exponent bits, 3 mantissa bits)
#: The 2^12-bin histogram is built in two levels of 64 bins (a ``tl.histogram`` call costs about
#: its bin count: 33 us per 262,144 keys at 4,096 bins on the H200, 4 us at 256): the coarse
#: histogram of the bins' top 6 bits, then the fine histogram of the low 6 bits over the keys of
#: the coarse bin that holds the top-k-th key. Together they give exactly the 12-bit threshold bin
#: and the count above it. A row of the workspace holds the coarse bins then the fine ones.
HB1_VALUE = HB // 2  # bits of each level (the fine level has the rest: HB - HB1 = HB1)
NB1 = tl.constexpr(1 << HB1_VALUE)  # bins per level
SH1 = tl.constexpr(HB - HB1_VALUE)  # a 12-bit bin's coarse bin: bin >> SH1; its fine bin: bin & (NB1 - 1)
HIST_W_VALUE = 2 << HB1_VALUE
HIST_W = tl.constexpr(HIST_W_VALUE)
#: keys per histogram call while a program has that many left (its last ones go ``HIST_STEP`` at a
#: time); a call costs about the same whatever its mask, so a short share pays for its size only
HIST_BLOCK = 1024
HIST_STEP = 256


@triton.jit
def _float_to_key(x):
    # signed-order key: flip the 31 low bits of negative floats, so int32 order == float order;
    # -0.0 becomes +0.0 first (they compare equal, so they must tie)
    x = tl.where(x == 0.0, 0.0, x)
    i = x.to(tl.int32, bitcast=True)
    return i ^ ((i >> 31) & 0x7FFFFFFF)


@triton.jit
def _bin_of(key, HB: tl.constexpr):
    # top HB bits of the key in unsigned order: 0 .. 2^HB - 1
    return (key >> (32 - HB)) + (1 << (HB - 1))


@triton.jit
def _hist_call(key, c1, FINE: tl.constexpr, HB: tl.constexpr):
    # one histogram call over a tile of keys: coarse (the 12-bit bins' top HB1 bits of the valid
    # keys) or fine (the low bits, of the keys whose coarse bin is c1)
    b = _bin_of(key, HB)
    valid = key != INT_MIN
    if FINE:
        h = tl.histogram(b & (NB1 - 1), NB1, mask=valid & ((b >> SH1) == c1))
    else:
        h = tl.histogram(b >> SH1, NB1, mask=valid)
    return h


@triton.jit(do_not_specialize=["t_base", "nss", "vis_ptr", "K"])  # no recompile per block / batch size
def _hist_kernel(
    keys_ptr,
    stride_k,
    vis_ptr,
    t_base,
    hist_ptr,
    nss,
    K,
    BLOCK: tl.constexpr,
    STEP: tl.constexpr,
    HB: tl.constexpr,
    SHORT: tl.constexpr,
    FINE: tl.constexpr,
):
    # program (g, s): one level of the histogram of the s-th share of token g's valid keys (shares
    # are multiples of STEP keys), added to the token's (atomics on the non-empty bins); BLOCK keys
    # per histogram call while that many remain, then STEP. FINE: the second level (the coarse
    # histogram is complete). SHORT: a row of at most K entries (selected whole by the final pass)
    # and a program with an empty share return at once
    g = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    n = tl.load(vis_ptr + t_base + g).to(tl.int32)
    chunk = tl.cdiv(tl.cdiv(n, nss), STEP) * STEP
    c_start = s * chunk
    c_end = tl.minimum(c_start + chunk, n)
    run = True
    if SHORT:
        run = (n > K) & (c_start < c_end)
    c1 = -1
    if FINE:
        c1, _ = _coarse_bin(hist_ptr, g, K)
        run = run & (c1 >= 0)
    if run:
        offs = tl.arange(0, BLOCK)
        hist = tl.zeros([NB1], tl.int32)
        c_big = c_end
        if STEP < BLOCK:
            c_big = c_start + tl.maximum(c_end - c_start, 0) // BLOCK * BLOCK
        for c0 in range(c_start, c_big, BLOCK):
            c = c0 + offs
            key = tl.load(keys_ptr + g * stride_k + c, mask=c < c_end, other=INT_MIN)
            hist += _hist_call(key, c1, FINE, HB)
        if STEP < BLOCK:
            offs_s = tl.arange(0, STEP)
            for c0 in range(c_big, c_end, STEP):
                c = c0 + offs_s
                key = tl.load(keys_ptr + g * stride_k + c, mask=c < c_end, other=INT_MIN)
                hist += _hist_call(key, c1, FINE, HB)
        offs_b = tl.arange(0, NB1)
        level = hist_ptr + g * HIST_W
        if FINE:
            level += NB1
        tl.atomic_add(level + offs_b, hist, mask=hist > 0)


@triton.jit
def _keys_from_scores_kernel(scores_ptr, stride_st, keys_ptr, stride_k, C, BLOCK: tl.constexpr):
    g = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < C
    x = tl.load(scores_ptr + g * stride_st + offs, mask=m, other=float("-inf")).to(tl.float32)
    valid = m & (x != float("-inf"))
    tl.store(keys_ptr + g * stride_k + offs, tl.where(valid, _float_to_key(x), INT_MIN), mask=m)


@triton.jit
def _coarse_bin(hist_ptr, g, K):
    """``(c1, above1)`` from the coarse histogram: the coarse bin holding the K-th largest key (-1
    when at most K keys are valid) and the number of keys in higher coarse bins."""
    offs = tl.arange(0, NB1)
    h = tl.load(hist_ptr + g * HIST_W + offs)
    suf = tl.cumsum(h, 0, reverse=True)  # keys in coarse bins >= c
    c1 = tl.sum((suf >= K).to(tl.int32), 0) - 1  # suf is non-increasing in c
    c1 = tl.where(tl.sum(h, 0) <= K, -1, c1)
    above1 = tl.sum(tl.where(offs > c1, h, 0), 0)
    return c1, above1


@triton.jit
def _threshold_bin(hist_ptr, g, K, HB: tl.constexpr):
    """``(b*, above)``: the 12-bit bin of the K-th largest key (-1 when at most K keys are valid:
    all are selected) and the number of keys in higher bins, from the two histogram levels."""
    c1, above1 = _coarse_bin(hist_ptr, g, K)
    offs = tl.arange(0, NB1)
    h = tl.load(hist_ptr + g * HIST_W + (NB1) + offs)  # the fine bins of coarse bin c1
    suf = tl.cumsum(h, 0, reverse=True)
    b2 = tl.sum((suf >= K - above1).to(tl.int32), 0) - 1
    bstar = tl.where(c1 < 0, -1, c1 * NB1 + b2)
    above = tl.where(c1 < 0, above1, above1 + tl.sum(tl.where(offs > b2, h, 0), 0))
    return bstar, above


@triton.jit
def _list_share(keys_ptr, stride_k, hist_ptr, cnt_ptr, sure_ptr, tie_key_ptr, tie_pos_ptr, g, K, c_start, c_end,
                BLOCK_F: tl.constexpr, HB: tl.constexpr):  # fmt: skip
    # token g's keys c_start .. c_end - 1: those of bins above b* to the sure list, those of b* to
    # the candidate lists (places reserved with the row's counters)
    bstar, above = _threshold_bin(hist_ptr, g, K, HB)
    offs = tl.arange(0, BLOCK_F)
    for c0 in range(c_start, c_end, BLOCK_F):
        c = c0 + offs
        key = tl.load(keys_ptr + g * stride_k + c, mask=c < c_end, other=INT_MIN)
        valid = key != INT_MIN
        b = _bin_of(key, HB)
        sure = valid & (b > bstar)
        tie = valid & (b == bstar)
        n_sure = tl.sum(sure.to(tl.int32), 0)
        n_tie = tl.sum(tie.to(tl.int32), 0)
        if n_sure > 0:
            base = tl.atomic_add(cnt_ptr + CNT * g, n_sure)
            dst = base + tl.cumsum(sure.to(tl.int32), 0) - 1
            tl.store(sure_ptr + g * K + dst, c, mask=sure)
        if n_tie > 0:
            base = tl.atomic_add(cnt_ptr + CNT * g + 1, n_tie)
            dst = base + tl.cumsum(tie.to(tl.int32), 0) - 1
            tl.store(tie_key_ptr + g * stride_k + dst, key, mask=tie)
            tl.store(tie_pos_ptr + g * stride_k + dst, c, mask=tie)


@triton.jit(do_not_specialize=["t_base", "nss", "vis_ptr"])  # no recompile per block / batch size
def _filter_kernel(
    keys_ptr,
    stride_k,
    vis_ptr,
    t_base,
    hist_ptr,
    cnt_ptr,
    sure_ptr,
    tie_key_ptr,
    tie_pos_ptr,
    K,
    nss,
    BLOCK_F: tl.constexpr,
    HB: tl.constexpr,
    SHORT: tl.constexpr,
):
    g = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    n = tl.load(vis_ptr + t_base + g).to(tl.int32)
    chunk = tl.cdiv(tl.cdiv(n, nss), BLOCK_F) * BLOCK_F
    c_end = tl.minimum(s * chunk + chunk, n)
    run = True
    if SHORT:  # a short row, or an empty share: nothing to list (nor the threshold to find)
        run = (n > K) & (s * chunk < c_end)
    if run:
        _list_share(keys_ptr, stride_k, hist_ptr, cnt_ptr, sure_ptr, tie_key_ptr, tie_pos_ptr, g, K, s * chunk,
                    c_end, BLOCK_F, HB)  # fmt: skip


@triton.jit
def _write_short_row(krow, orow, n, K, BLOCK_K2: tl.constexpr):
    # every valid entry below n (n <= K <= BLOCK_K2), ascending, then -1 up to K
    offs_k = tl.arange(0, BLOCK_K2)
    key = tl.load(krow + offs_k, mask=offs_k < n, other=INT_MIN)
    sel = key != INT_MIN
    dst = tl.cumsum(sel.to(tl.int32), 0) - 1
    tl.store(orow + dst, offs_k.to(tl.int64), mask=sel)
    n_sel = tl.sum(sel.to(tl.int32), 0)
    tl.store(orow + offs_k, tl.full([BLOCK_K2], -1, tl.int64), mask=(offs_k >= n_sel) & (offs_k < K))


@triton.jit
def _count_sel(key_ptr, pos_ptr, M, thr, p, BLOCK_T: tl.constexpr):
    """Items ``i < M`` of a (key, position) list with ``key > thr`` or ``key == thr and pos <= p``."""
    cnt = 0
    offs = tl.arange(0, BLOCK_T)
    for i0 in range(0, M, BLOCK_T):
        m = i0 + offs < M
        key = tl.load(key_ptr + i0 + offs, mask=m, other=INT_MIN)
        pos = tl.load(pos_ptr + i0 + offs, mask=m, other=0)
        cnt += tl.sum((m & ((key > thr) | ((key == thr) & (pos <= p)))).to(tl.int32), 0)
    return cnt


@triton.jit(do_not_specialize=["t_base", "vis_ptr"])  # block offsets: no recompile per block
def _final_kernel(
    cnt_ptr,
    sure_ptr,
    keys_ptr,
    tie_key_ptr,
    tie_pos_ptr,
    stride_k,
    vis_ptr,
    out_ptr,
    stride_o,
    t_base,
    K,
    BLOCK_K2: tl.constexpr,
    BLOCK_T: tl.constexpr,
    SHORT: tl.constexpr,
    RADIX: tl.constexpr,
    CAP: tl.constexpr,
):
    # one program per token row. RADIX: the radix selection of indexer_radix; else the bit-by-bit
    # search (two 31-step searches, each step a pass over the candidate list; a benchmark baseline)
    g = tl.program_id(0).to(tl.int64)
    t = t_base + g
    offs_k = tl.arange(0, BLOCK_K2)
    orow = out_ptr + t * stride_o
    short = False  # (a constant i1 when not SHORT: the branch below folds away)
    n = tl.load(vis_ptr + t).to(tl.int32)
    if SHORT:
        short = n <= K
    if short:
        _write_short_row(keys_ptr + g * stride_k, orow, n, K, BLOCK_K2)
    elif RADIX:
        n_sure = tl.load(cnt_ptr + CNT * g)
        M = tl.load(cnt_ptr + CNT * g + 1)
        finish_row(n_sure, M, sure_ptr + g * K, tie_key_ptr + g * stride_k, tie_pos_ptr + g * stride_k, orow, K, n,
                   BLOCK_K2, CAP, BLOCK_T)  # fmt: skip
    else:
        n_sure = tl.load(cnt_ptr + CNT * g)
        M = tl.load(cnt_ptr + CNT * g + 1)
        # the entries above the threshold bin go first (listed in any order), staged in the output row
        sure = tl.load(sure_ptr + g * K + offs_k, mask=offs_k < n_sure, other=0)
        tl.store(orow + offs_k, sure.to(tl.int64), mask=offs_k < n_sure)
        if M > 0:
            need = K - n_sure
            kb = tie_key_ptr + g * stride_k
            pb = tie_pos_ptr + g * stride_k
            # the need-th largest key: the largest thr with count(key >= thr) >= need, bit by bit
            big = 2147483647
            thr = tl.where(_count_sel(kb, pb, M, 0, big, BLOCK_T) >= need, 0, INT_MIN)
            for bit in tl.static_range(30, -1, -1):
                t2 = thr | (1 << bit)
                thr = tl.where(_count_sel(kb, pb, M, t2, big, BLOCK_T) >= need, t2, thr)
            n_gt = _count_sel(kb, pb, M, thr, -1, BLOCK_T)
            r = need - n_gt  # keys equal to thr still to take: the lowest positions
            # the smallest p with count(key == thr and pos <= p) >= r, bit by bit
            pthr = 0
            for bit in tl.static_range(30, -1, -1):
                p2 = pthr | ((1 << bit) - 1)
                pthr = tl.where(_count_sel(kb, pb, M, thr, p2, BLOCK_T) - n_gt >= r, pthr, pthr | (1 << bit))
            # append the selected candidates after the sure ones
            offs = tl.arange(0, BLOCK_T)
            written = n_sure
            for i0 in range(0, M, BLOCK_T):
                m = i0 + offs < M
                key = tl.load(kb + i0 + offs, mask=m, other=INT_MIN)
                pos = tl.load(pb + i0 + offs, mask=m, other=0)
                sel = m & ((key > thr) | ((key == thr) & (pos <= pthr)))
                dst = written + tl.cumsum(sel.to(tl.int32), 0) - 1
                tl.store(orow + dst, pos.to(tl.int64), mask=sel)
                written += tl.sum(sel.to(tl.int32), 0)
        tl.debug_barrier()
        # sort the row ascending; the places past the selection become -1
        n_sel = tl.where(M > 0, K, n_sure)
        big64 = 2147483647
        row = tl.load(orow + offs_k, mask=offs_k < n_sel, other=big64)
        row = tl.sort(row)
        tl.store(orow + offs_k, tl.where(row == big64, -1, row), mask=offs_k < K)


@triton.jit(do_not_specialize=["t_base", "nss", "vis_ptr"])  # no recompile per block / batch size
def _filter_final_kernel(
    keys_ptr,
    stride_k,
    vis_ptr,
    t_base,
    hist_ptr,
    cnt_ptr,
    sure_ptr,
    tie_key_ptr,
    tie_pos_ptr,
    out_ptr,
    stride_o,
    K,
    nss,
    BLOCK_F: tl.constexpr,
    HB: tl.constexpr,
    SHORT: tl.constexpr,
    BLOCK_K2: tl.constexpr,
    CAP: tl.constexpr,
):
    # the filter and final passes in one launch (grid G x nss): program (g, s) lists its share of
    # row g's keys, then counts itself done on the row's third counter; the row's last program
    # (every share listed: the counter's acq_rel atomic orders the other programs' list writes
    # before it) selects and writes the output row. A short row: program (g, 0) writes it.
    g = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    n = tl.load(vis_ptr + t_base + g).to(tl.int32)
    orow = out_ptr + (t_base + g) * stride_o
    short = False
    if SHORT:
        short = n <= K
    if short:
        if s == 0:
            _write_short_row(keys_ptr + g * stride_k, orow, n, K, BLOCK_K2)
    else:
        chunk = tl.cdiv(tl.cdiv(n, nss), BLOCK_F) * BLOCK_F
        c_end = tl.minimum(s * chunk + chunk, n)
        if s * chunk < c_end:
            _list_share(keys_ptr, stride_k, hist_ptr, cnt_ptr, sure_ptr, tie_key_ptr, tie_pos_ptr, g, K, s * chunk,
                        c_end, BLOCK_F, HB)  # fmt: skip
        tl.debug_barrier()  # every thread's list writes are issued before the arrival
        done = tl.atomic_add(cnt_ptr + CNT * g + 2, 1, sem="acq_rel", scope="gpu")
        if done == nss - 1:
            n_sure = tl.atomic_add(cnt_ptr + CNT * g, 0, sem="acquire", scope="gpu")
            M = tl.atomic_add(cnt_ptr + CNT * g + 1, 0, sem="acquire", scope="gpu")
            finish_row(n_sure, M, sure_ptr + g * K, tie_key_ptr + g * stride_k, tie_pos_ptr + g * stride_k, orow, K,
                       n, BLOCK_K2, CAP, 1024)  # fmt: skip


def splits(rows: int, device: torch.device) -> int:
    """Programs per token row: two waves of the SMs over the block, a power of two in [1, 256]."""
    want = cdiv(2 * num_sms(device), max(1, rows))
    n = 1
    while n * 2 <= min(want, 256):
        n *= 2
    return n


def histogram(ws: Any, G: int, vis: torch.Tensor, t_base: int, topk: int, short: bool) -> None:
    """Step 1b for rows ``t_base .. t_base + G - 1`` of ``vis`` (``[T]`` int visible counts): adds
    each row's key histogram into ``ws.hist`` (zeroed by the caller for the rows it fills), in two
    launches: the coarse level, then the fine level inside the coarse threshold bin.
    ``short``: rows of at most ``topk`` entries are skipped and the shares are multiples of
    ``HIST_STEP`` keys (else of ``HIST_BLOCK``, the pipeline before the short-row path)."""
    nss = splits(G, vis.device)
    for fine in (False, True):
        _hist_kernel[(G, nss)](
            ws.keys, ws.keys.stride(0), vis, t_base, ws.hist, nss, topk, BLOCK=HIST_BLOCK,
            STEP=HIST_STEP if short else HIST_BLOCK, HB=HB, SHORT=short, FINE=fine, num_warps=4,
        )  # fmt: skip


def select(ws: Any, G: int, vis: torch.Tensor, t_base: int, topk: int, out: torch.Tensor, short: bool,
           filter_pass: bool = True, impl: str = DEFAULT_SELECT_IMPL) -> None:  # fmt: skip
    """Steps 2 and 3 for rows ``t_base .. t_base + G - 1``: writes ``out[t_base + g]`` (``[T, topk]``
    int64, every column). ``short``: rows of at most ``topk`` entries take the short-row path (module
    docstring); ``filter_pass=False`` skips the filter launch (only valid when every row is short).

    ``impl`` (the same result): ``"fused"`` one launch of filter + final (the row's last filter
    program selects, radix digits, :mod:`sgl_kernel_v4.triton.indexer_radix`); ``"radix"`` the
    filter launch, then a final launch with the radix selection; ``"bitsearch"`` the filter launch,
    then the bit-by-bit final (the default, :data:`DEFAULT_SELECT_IMPL`). The fused launch needs
    the rows' third counter zeroed with the other two.

    Raises:
        ValueError: ``impl`` is not one of :data:`SELECT_IMPLS`.
    """
    if impl not in SELECT_IMPLS:
        raise ValueError(f"select_impl: expected one of {SELECT_IMPLS}, got {impl!r}")
    block_k2 = next_power_of_2(topk)
    if filter_pass:
        nss = splits(G, out.device)
        if impl == "fused":
            _filter_final_kernel[(G, nss)](
                ws.keys, ws.keys.stride(0), vis, t_base, ws.hist, ws.cnt, ws.sure, ws.tie_key, ws.tie_pos, out,
                out.stride(0), topk, nss, BLOCK_F=1024, HB=HB, SHORT=short, BLOCK_K2=block_k2, CAP=RADIX_CAP,
                num_warps=8,
            )  # fmt: skip
            return
        _filter_kernel[(G, nss)](
            ws.keys, ws.keys.stride(0), vis, t_base, ws.hist, ws.cnt, ws.sure, ws.tie_key, ws.tie_pos, topk,
            nss, BLOCK_F=1024, HB=HB, SHORT=short, num_warps=4,
        )  # fmt: skip
    _final_kernel[(G,)](
        ws.cnt, ws.sure, ws.keys, ws.tie_key, ws.tie_pos, ws.keys.stride(0), vis, out, out.stride(0), t_base,
        topk, BLOCK_K2=block_k2, BLOCK_T=1024, SHORT=short, RADIX=impl != "bitsearch", CAP=RADIX_CAP,
        num_warps=8,
    )  # fmt: skip
