"""Lightning-indexer scoring for one token per program (decode) (Triton).

Step 1 of :mod:`sgl_kernel_v4.triton.indexer` when each scoring program serves one token (batches of
at most 256 tokens): the same keys, the same output (one order-preserving int32 key per visible entry,
``INT_MIN`` for an invalid one; the short-row validity keys; the histogram and counters of the long
rows zeroed), computed by a kernel shaped for the long rows of decode:

* the dot is ``k_tile @ q^T`` (``[BLOCK_C, di] x [di, heads]``): entries on the MMA's M side, the
  heads on its N side, so the weighted head sum is a reduction along each accumulator row;
* one loop over the program's share of the entries, outside any token loop, so the software
  pipeline (``num_stages``) keeps the next tiles' page-table and key loads in flight while a tile
  is scored: a share of ~1,000 entries is 16 dependent load / dot rounds otherwise.

Keys are read by :func:`~sgl_kernel_v4.triton.kv_codec.load_key`, as in the general kernel, except
fp4 keys of 32-128 values (``FP4_BLOCKS``): those are decoded one 32-value scale block at a time by
:func:`~sgl_kernel_v4.triton.kv_codec.load_fp4_key_block` (each byte loaded once, the bf16 built
from the e2m1 code and the ue8m0 byte by integer ops) and scored by one K = 32 dot per block
accumulating into the same fp32 tile: on the H200 the fp4 scoring of 262,144 keys went from 73.6 to
45.0 us (``benchmark/indexer_fp4_variants.py`` compares five decodes in isolation).
Measured on the H200 (``benchmark/indexer_topk_profile.py``, 262,144 bf16 keys, bs 1): 35 us
against the general kernel's 57 us (the key-read floor is 16 us). A first version read fp4 keys as
32-bit words and decoded the nibbles from a ``[N, 16, 8]`` tile: 1,014 us (against 133 us), so it
was dropped. :data:`sgl_kernel_v4.triton.indexer.DECODE_SCORE_CODECS` says which key formats
take this kernel; the general kernel stays the one for extends of more than 256 tokens (several
tokens per program).
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_kernel_v4.triton._dot import dot, dot_acc
from sgl_kernel_v4.triton.indexer_select import CNT, HIST_W, INT_MIN, _float_to_key
from sgl_kernel_v4.triton.kv_codec import aligned, load_fp4_key_block, load_key, row_offsets

#: Launch parameters of the decode scoring kernel (warps, pipeline stages); the entries per tile are
#: ``indexer_topk``'s ``block_c``.
DECODE_SCORE_CONFIG = {"num_warps": 4, "num_stages": 3}


@triton.jit(
    do_not_specialize=["t_base", "nsc", "vis_ptr", "r2p_ptr", "stride_r2p", "req_rows_ptr", "token_req_ptr", "E",
                       "hist_ptr", "cnt_ptr", "K"]
)  # fmt: skip
def _score_decode_kernel(
    q_ptr,
    stride_qt,
    stride_qh,
    w_ptr,
    stride_wt,
    kv_ptr,
    kv_rpp,
    kv_ps,
    kv_rs,
    vis_ptr,
    r2p_ptr,
    stride_r2p,
    req_rows_ptr,
    token_req_ptr,
    E,
    keys_ptr,
    stride_k,
    scores_ptr,
    hist_ptr,
    cnt_ptr,
    K,
    t_base,
    HI,
    scale,
    nsc,
    DI: tl.constexpr,
    CODEC: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr,
    WRITE_SCORES: tl.constexpr,
    SHORT: tl.constexpr,
    HB: tl.constexpr,
    FP4_BLOCKS: tl.constexpr = False,
    IEEE: tl.constexpr = False,
):
    # program (g, s): token t_base + g of the block, the s-th share of its visible entries (shares
    # are multiples of BLOCK_C, as the general kernel's). SHORT: a token seeing at most K entries
    # writes validity keys only; the programs of a longer token zero its histogram (1/nsc of the
    # bins each) and counters, which the histogram pass adds to.
    g = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    t = t_base + g
    n = tl.load(vis_ptr + t).to(tl.int32)
    row = tl.load(req_rows_ptr + tl.load(token_req_ptr + t)).to(tl.int64)
    chunk = tl.cdiv(tl.cdiv(n, nsc), BLOCK_C) * BLOCK_C
    c_lo = s * chunk
    c_end = tl.minimum(c_lo + chunk, n)
    offs_c = tl.arange(0, BLOCK_C)
    krow = keys_ptr + g * stride_k
    prow = r2p_ptr + row * stride_r2p
    short = False
    if SHORT:
        short = n <= K
        if not short:
            nb = tl.cdiv(HIST_W, nsc)
            offs_z = tl.arange(0, 256)
            for b0 in range(s * nb, s * nb + nb, 256):
                b = b0 + offs_z
                tl.store(hist_ptr + g * HIST_W + b, tl.zeros([256], tl.int32),
                         mask=(b < s * nb + nb) & (b < HIST_W))  # fmt: skip
            if s == 0:  # above the threshold bin, in it, filter programs done
                tl.store(
                    cnt_ptr + CNT * g + tl.arange(0, 4), tl.zeros([4], tl.int32), mask=tl.arange(0, 4) < 3
                )
    if short:
        for c0 in range(c_lo, c_end, BLOCK_C):
            c = c0 + offs_c
            cm = c < c_end
            page = tl.load(prow + c // E, mask=cm, other=-1)
            tl.store(krow + c, tl.where(page >= 0, 0, INT_MIN), mask=cm)
    else:
        offs_h = tl.arange(0, BLOCK_H)
        offs_d = tl.arange(0, DI)
        hm = offs_h < HI
        q = tl.load(q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + offs_d[None, :], mask=hm[:, None],
                    other=0.0)  # fmt: skip
        w = tl.load(w_ptr + t * stride_wt + offs_h, mask=hm, other=0.0).to(tl.float32)
        if FP4_BLOCKS:  # fp4 keys (DI of 32, 64 or 128): one dot of K = 32 per scale block
            q_cols = q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + tl.arange(0, 32)[None, :]
            q0 = tl.load(q_cols, mask=hm[:, None], other=0.0)
            if DI >= 64:
                q1 = tl.load(q_cols + 32, mask=hm[:, None], other=0.0)
            if DI >= 128:
                q2 = tl.load(q_cols + 64, mask=hm[:, None], other=0.0)
                q3 = tl.load(q_cols + 96, mask=hm[:, None], other=0.0)
        for c0 in range(c_lo, c_end, BLOCK_C):
            c = c0 + offs_c
            cm = c < c_end
            page = tl.load(prow + c // E, mask=cm, other=-1).to(tl.int64)
            valid = cm & (page >= 0)
            off = row_offsets(page * E + c % E, kv_rpp, kv_ps, kv_rs)
            if FP4_BLOCKS:
                base = aligned(kv_ptr, off, CODEC, DI, DI)
                sd = dot(load_fp4_key_block(base, 0, valid, DI).to(q.dtype), tl.trans(q0), IEEE)
                if DI >= 64:
                    sd = dot_acc(load_fp4_key_block(base, 1, valid, DI).to(q.dtype), tl.trans(q1), sd, IEEE)
                if DI >= 128:
                    sd = dot_acc(load_fp4_key_block(base, 2, valid, DI).to(q.dtype), tl.trans(q2), sd, IEEE)
                    sd = dot_acc(load_fp4_key_block(base, 3, valid, DI).to(q.dtype), tl.trans(q3), sd, IEEE)
                ks = scale
            else:
                k, kscale = load_key(kv_ptr, off, valid, offs_d, CODEC, DI)
                ks = kscale[:, None] * scale
                sd = dot(k.to(q.dtype), tl.trans(q), IEEE)  # [BLOCK_C, BLOCK_H] fp32
            score = tl.sum(tl.maximum(sd * ks, 0.0) * w[None, :], 1)
            tl.store(krow + c, tl.where(valid, _float_to_key(score), INT_MIN), mask=cm)
            if WRITE_SCORES:
                tl.store(scores_ptr + g * stride_k + c, tl.where(valid, score, float("-inf")), mask=cm)
