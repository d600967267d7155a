"""The Triton kernels of the paged sparse attention with a per-head sink: the attention
kernel (one program per (token, head block, split)) and the merge of the splits' partial results.

The launcher, its argument checks, tile defaults and split count are
:func:`sgl_kernel_v4.triton.attention.sparse_attention` (the math and the page-table walk: that
module's docstring); the argument layout of both kernels is what it passes.

Kernel layout: one program per (token, block of heads, split). All heads of a token share the keys
(one KV head), so a program loads a ``[BLOCK_N, D]`` key tile once (dequantizing fp8 entries in
registers) and uses it for ``BLOCK_H`` heads with two tensor-core dots (``q·kᵀ`` and ``p·k``),
flash-attention style online softmax in base 2. The sink enters as the initial running max /
denominator (``m = sink``, ``l = 1``), so a query with no valid key returns exactly 0. The grid is
fixed by the batch shape and the layer's key capacity alone (never the actual context): split
``s`` of ``num_splits`` covers the ``s``-th share of the window and of the token's compressed
entries, whose count is read on the device (flash-decoding), so one CUDA graph per batch size
serves every context length. The split count fills the SMs at small batches but is bounded by
the layer's most keys per token (window + top-k in CSA layers, window + the page table's entry
capacity in HCA layers), so each split has work worth its partial result
(:func:`~sgl_kernel_v4.triton.attention.default_num_splits`); a second kernel merges the partial (max, sum, acc), several splits
per step, and adds the sink. The split count is a runtime argument (only "one split or several"
is compiled in), so batches of any size reuse the same compiled kernels instead of compiling one
per split count while serving.

One key tile's arithmetic lives in :mod:`sgl_kernel_v4.triton.attention_tile`, with its compile
statistics for sm_90: in the 64-head prefill tile both warpgroups compute the whole ``q·kᵀ``
(1.5x the useful tensor work, 255 registers, 120 spilled bytes, N = 16 products re-reading ``q``
from shared memory); the ``keys_on_m`` forms put the key rows on the MMA's M so each warpgroup
computes its own keys' logits once, and the 4-chunk form is the bf16 extend default
(:data:`~sgl_kernel_v4.triton.attention.EXTEND_TILE`, 1.45x - 1.85x the heads-on-M tile on the H100).
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_kernel_v4.triton.attention_tile import attend_tile, load_q_rows
from sgl_kernel_v4.triton.kv_codec import row_offsets


# The index tables (window pages, positions, entry lists, visible counts, page table, request rows)
# and their strides / counts are not specialised: they are slices whose alignment and values of 1
# follow the batch (a server compiled 15 variants after its warm-up from these alone); the data
# pointers and row strides keep their specialisation (vector loads).
@triton.jit(
    do_not_specialize=["swa_pages_ptr", "pos_ptr", "ent_ptr", "stride_et", "K_ENT", "vis_ptr", "r2p_ptr",
                       "stride_r2p", "req_rows_ptr", "token_req_ptr", "E", "num_splits"]
)  # fmt: skip
def _paged_attn_kernel(
    q_ptr,
    stride_qt,
    stride_qh,
    swa_ptr,
    swa_rpp,
    swa_ps,
    swa_rs,
    swa_pages_ptr,
    pos_ptr,
    W,
    comp_ptr,
    c_rpp,
    c_ps,
    c_rs,
    ent_ptr,
    stride_et,
    K_ENT,
    vis_ptr,
    r2p_ptr,
    stride_r2p,
    req_rows_ptr,
    token_req_ptr,
    E,
    sink_ptr,
    out_ptr,
    stride_ot,
    stride_oh,
    part_acc_ptr,
    part_ml_ptr,
    lse_ptr,
    H,
    scale_log2,
    num_splits,
    D: tl.constexpr,
    NOPE: tl.constexpr,
    CODEC: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    COMP_MODE: tl.constexpr,
    ALIGN: tl.constexpr,
    DV_SPLIT: tl.constexpr = 1,
    IEEE: tl.constexpr = False,
    STORE_LSE: tl.constexpr = False,
    COMP_CODEC: tl.constexpr = -1,
    KEYS_ON_M: tl.constexpr = 0,
):
    """One (token ``t``, head block, split ``s``) program of the paged sparse attention.

    Grid ``(T, ceil(H / BLOCK_H) * DV_SPLIT, num_splits)``, launched only by
    :func:`sgl_kernel_v4.triton.attention.sparse_attention`, which checks every argument. Math:
    HF's ``eager_attention_forward`` with ``s_aux`` (that module's docstring), computed in base 2
    with an online softmax (FlashAttention, Dao et al. 2022; the split merge as flash-decoding).

    Args (pointers to device tensors; strides in elements):
        q_ptr: ``[T, H, D]`` queries (bf16 / fp16 / fp32, last dim contiguous).
        swa_ptr, swa_rpp, swa_ps, swa_rs: the window pool's storage, rows per page, page and row
            strides (float rows, or fp8 main-entry rows decoded in registers per ``CODEC``).
        swa_pages_ptr: ``[T, 2]`` int64 window pages of each token's previous and own span.
        pos_ptr: ``[T]`` int64 positions; ``W`` the window length (keys ``pos - W + 1 .. pos``).
        comp_ptr, c_rpp, c_ps, c_rs: the compressed pool (same layout fields as the window's).
        ent_ptr, stride_et, K_ENT: ``[T, K_ENT]`` int64 selected entry indices (``COMP_MODE`` 1,
            ``-1`` = none).
        vis_ptr: ``[T]`` int64 visible entries per token (``COMP_MODE`` 2: all of them).
        r2p_ptr, stride_r2p, req_rows_ptr, token_req_ptr, E: the page table ``[R, P]``, each
            request row's slot, each token's request row, entries per block page
            (:mod:`sgl_kernel_v4.paged`).
        sink_ptr: ``[H]`` fp32 sink logits (natural-log units; scaled by ``log2(e)`` here): the
            initial running max of a single split; with several, :func:`_combine_kernel` adds it.
        out_ptr, stride_ot, stride_oh: ``[T, H, D]`` output in q's dtype (one split).
        part_acc_ptr, part_ml_ptr: ``[T, H, num_splits, BLOCK_D]`` / ``[.., 2]`` fp32 partial
            accumulator and (max, sum) in base 2 (several splits).
        lse_ptr: ``[T, H]`` fp32 base-2 log-sum-exp, sink included (``STORE_LSE``).
        H: query heads. ``scale_log2``: softmax scale times ``log2(e)``.
        num_splits: splits per (token, head block); runtime, not specialised.
        constexprs: ``D`` head dim, ``NOPE`` its non-RoPE part, ``CODEC`` / ``COMP_CODEC`` the
            pools' entry formats, tiles ``BLOCK_D`` / ``BLOCK_H`` / ``BLOCK_N``, ``SPLIT``,
            ``COMP_MODE`` (0 window only, 1 selected entries, 2 all visible entries), ``ALIGN``
            (fp8 row alignment in bytes), ``DV_SPLIT``, ``IEEE`` (fp32 products without TF32),
            ``KEYS_ON_M`` (operand orientation, :mod:`sgl_kernel_v4.triton.attention_tile`).

    Writes ``out`` (or the partials) and ``lse``; raises nothing (bounds are the launcher's).
    """
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1) // DV_SPLIT
    dv = tl.program_id(1) % DV_SPLIT
    s = tl.program_id(2)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = offs_h < H
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    BLOCK_DV: tl.constexpr = BLOCK_D // DV_SPLIT
    offs_dv = dv * BLOCK_DV + tl.arange(0, BLOCK_DV)
    dvmask = offs_dv < D
    # the tile's operand orientation (attention_tile): q / acc [BLOCK_H, D] with the heads on the
    # MMA's M (0), qᵀ / accᵀ with the keys on M (1), or those in 2 or 4 chunks of D (q2.., acc2..)
    BLOCK_DC: tl.constexpr = BLOCK_D // (KEYS_ON_M if KEYS_ON_M > 1 else 1)
    offs_dc = tl.arange(0, BLOCK_DC)
    q_row = q_ptr + t * stride_qt + offs_h * stride_qh
    if KEYS_ON_M >= 2:
        q = load_q_rows(q_row, hmask, offs_dc, D)
        q2 = load_q_rows(q_row, hmask, offs_dc + BLOCK_DC, D)
        if KEYS_ON_M == 4:
            q3 = load_q_rows(q_row, hmask, offs_dc + 2 * BLOCK_DC, D)
            q4 = load_q_rows(q_row, hmask, offs_dc + 3 * BLOCK_DC, D)
        else:
            q3 = q
            q4 = q
    elif KEYS_ON_M == 1:
        q = load_q_rows(q_row, hmask, offs_d, D)
        q2 = q
        q3 = q
        q4 = q
    else:
        q = tl.load(
            q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + offs_d[None, :],
            mask=hmask[:, None] & dmask[None, :],
            other=0.0,
        )
        q2 = q
        q3 = q
        q4 = q
    if not SPLIT:
        m = tl.load(sink_ptr + offs_h, mask=hmask, other=0.0).to(tl.float32) * 1.4426950408889634
        l_sum = tl.full([BLOCK_H], 1.0, tl.float32)
    else:
        m = tl.full([BLOCK_H], -1.0e30, tl.float32)
        l_sum = tl.zeros([BLOCK_H], tl.float32)
    acc2 = tl.zeros([1], tl.float32)  # the chunks beyond the count: passed through
    acc3 = acc2
    acc4 = acc2
    if KEYS_ON_M >= 2:
        acc = tl.zeros([BLOCK_DC, BLOCK_H], tl.float32)
        acc2 = tl.zeros([BLOCK_DC, BLOCK_H], tl.float32)
        if KEYS_ON_M == 4:
            acc3 = tl.zeros([BLOCK_DC, BLOCK_H], tl.float32)
            acc4 = tl.zeros([BLOCK_DC, BLOCK_H], tl.float32)
    elif KEYS_ON_M == 1:
        acc = tl.zeros([BLOCK_DV, BLOCK_H], tl.float32)
    else:
        acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    offs_n = tl.arange(0, BLOCK_N)

    # sliding window: keys j of positions p - W + 1 + j, this split's share of 0..W-1
    p = tl.load(pos_ptr + t)
    p32 = p.to(tl.int32)  # positions stay below 2^31
    pg_prev = tl.load(swa_pages_ptr + 2 * t)
    pg_cur = tl.load(swa_pages_ptr + 2 * t + 1)
    chunk_w = tl.cdiv(tl.cdiv(W, num_splits), BLOCK_N) * BLOCK_N
    j_end = tl.minimum(s * chunk_w + chunk_w, W)
    for j0 in range(s * chunk_w, j_end, BLOCK_N):
        kp = (j0 + offs_n).to(tl.int32) + (p32 - W + 1)  # int32 index arithmetic (row_offsets)
        kpc = tl.maximum(kp, 0)
        pw = kpc // W
        page = tl.where(pw == p32 // W, pg_cur, pg_prev)
        valid = (j0 + offs_n < j_end) & (kp >= 0) & (page >= 0)
        off = row_offsets(page * W + (kpc - pw * W), swa_rpp, swa_ps, swa_rs)
        m, l_sum, acc, acc2, acc3, acc4 = attend_tile(
            q, q2, q3, q4, m, l_sum, acc, acc2, acc3, acc4, swa_ptr, off, valid, offs_d, offs_dv, offs_dc, scale_log2,
            CODEC, D, NOPE, ALIGN, DV_SPLIT, IEEE, KEYS_ON_M, BLOCK_DC,
        )  # fmt: skip

    # compressed entries of the token's request: selected (CSA) or every visible one (HCA)
    if COMP_MODE != 0:
        ccodec: tl.constexpr = CODEC if COMP_CODEC < 0 else COMP_CODEC
        row = tl.load(req_rows_ptr + tl.load(token_req_ptr + t)).to(tl.int64)
        if COMP_MODE == 1:
            n = K_ENT
        else:
            n = tl.load(vis_ptr + t).to(tl.int32)
        chunk = tl.cdiv(tl.cdiv(n, num_splits), BLOCK_N) * BLOCK_N
        i_end = tl.minimum(s * chunk + chunk, n)
        for i0 in range(s * chunk, i_end, BLOCK_N):
            im = i0 + offs_n < i_end
            if COMP_MODE == 1:
                w = tl.load(ent_ptr + t * stride_et + i0 + offs_n, mask=im, other=-1).to(tl.int32)
            else:
                w = tl.where(im, i0 + offs_n, -1).to(tl.int32)
            wc = tl.maximum(w, 0)  # int32 index arithmetic (row_offsets)
            wp = wc // E
            page = tl.load(r2p_ptr + row * stride_r2p + wp, mask=w >= 0, other=-1)
            valid = (w >= 0) & (page >= 0)
            off = row_offsets(page * E + (wc - wp * E), c_rpp, c_ps, c_rs)
            m, l_sum, acc, acc2, acc3, acc4 = attend_tile(
                q, q2, q3, q4, m, l_sum, acc, acc2, acc3, acc4, comp_ptr, off, valid, offs_d, offs_dv, offs_dc, scale_log2,
                ccodec, D, NOPE, ALIGN, DV_SPLIT, IEEE, KEYS_ON_M, BLOCK_DC,
            )  # fmt: skip

    if KEYS_ON_M == 2:  # [BLOCK_D, BLOCK_H]: the chunks' rows one after the other
        acc = tl.reshape(tl.permute(tl.join(acc, acc2), (2, 0, 1)), (BLOCK_D, BLOCK_H))
    elif KEYS_ON_M == 4:  # [..., i, j] = chunk 2 j + i
        acc = tl.join(tl.join(acc, acc2), tl.join(acc3, acc4))
        acc = tl.reshape(tl.permute(acc, (3, 2, 0, 1)), (BLOCK_D, BLOCK_H))
    if KEYS_ON_M != 0:
        acc = tl.trans(acc)
    if not SPLIT:
        out = acc / l_sum[:, None]
        tl.store(
            out_ptr + t * stride_ot + offs_h[:, None] * stride_oh + offs_dv[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=hmask[:, None] & dvmask[None, :],
        )
        if STORE_LSE:  # base-2 log-sum-exp of the scaled logits, the sink included
            tl.store(lse_ptr + t * H + offs_h, m + tl.log2(l_sum), mask=hmask)
    else:
        # partials laid out [T, H, num_splits, BLOCK_D] and [T, H, num_splits, 2] (with DV_SPLIT,
        # each program writes its columns; (m, l) are the same in every one of them)
        prow = (t * H + offs_h) * num_splits + s
        tl.store(part_acc_ptr + prow[:, None] * BLOCK_D + offs_dv[None, :], acc, mask=hmask[:, None])
        tl.store(part_ml_ptr + prow * 2, m, mask=hmask)
        tl.store(part_ml_ptr + prow * 2 + 1, l_sum, mask=hmask)


@triton.jit(do_not_specialize=["num_splits"])
def _combine_kernel(
    part_acc_ptr,
    part_ml_ptr,
    sink_ptr,
    out_ptr,
    stride_ot,
    stride_oh,
    H,
    num_splits,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Merge the ``num_splits`` partial results of one (token ``t``, head ``h``) with the sink.

    Grid ``(T, H)``. Reads ``part_ml [T, H, num_splits, 2]`` (base-2 max, sum) and ``part_acc
    [T, H, num_splits, BLOCK_D]`` fp32 as :func:`_paged_attn_kernel` wrote them and ``sink_ptr``
    ``[H]`` fp32 (natural-log units); writes ``out[t, h, :D]`` in out's dtype:
    ``sum_s 2**(m_s - M) acc_s / (2**(sink' - M) + sum_s 2**(m_s - M) l_s)`` with ``M`` the
    running max and ``sink' = sink * log2(e)`` (the log-sum-exp merge of flash-decoding).
    """
    # the splits' partial (max, sum, acc) merged with the sink in one pass, BLOCK_S splits per
    # step (one [BLOCK_S, BLOCK_D] load, online rescaling): the split count is a runtime argument,
    # so one compiled kernel serves every split count, and BLOCK_S splits cost one step, not
    # BLOCK_S dependent loads
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_d = tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, BLOCK_S)
    row0 = (t * H + h) * num_splits
    m = tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634  # the sink: weight exp2(0) = 1
    denom = tl.full([1], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for s0 in range(0, num_splits, BLOCK_S):
        smask = s0 + offs_s < num_splits
        rows = row0 + s0 + offs_s
        mi = tl.load(part_ml_ptr + rows * 2, mask=smask, other=-1.0e30)
        li = tl.load(part_ml_ptr + rows * 2 + 1, mask=smask, other=0.0)
        a = tl.load(part_acc_ptr + rows[:, None] * BLOCK_D + offs_d[None, :], mask=smask[:, None], other=0.0)
        m_new = tl.maximum(m, tl.max(mi, 0))
        alpha = tl.exp2(m - m_new)
        w = tl.exp2(mi - m_new)
        denom = denom * alpha + tl.sum(li * w, 0)
        acc = acc * alpha + tl.sum(a * w[:, None], 0)
        m = m_new
    out = acc / denom
    tl.store(
        out_ptr + t * stride_ot + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=offs_d < D
    )
