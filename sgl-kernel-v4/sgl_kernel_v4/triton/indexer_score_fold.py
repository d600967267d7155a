"""Lightning-indexer extend scoring, keys-major, with the head sum taken off the accumulator (Triton).

The opt-in forms ``"keys_fold"``, ``"keys_wdot"``, ``"keys_wdot16"`` and ``"keys_wdot_pairs"`` of
:class:`~sgl_kernel_v4.triton.indexer_score_extend.ExtendScore` (``FORM`` 2 to 5 of
:func:`_score_fold_kernel`). Same inputs, outputs and arguments as
``indexer_score_extend._score_extend_kernel`` (one order-preserving int32 key per visible entry,
``INT_MIN`` for an invalid one, fp32 scores when ``WRITE_SCORES``, the short-row path), plus
``RELU_ASM``; the same formula, HF ``DeepseekV4IndexerScorer``'s (paper §2.3.1, eqs. 13-17),
``score[t, w] = sum_h weights[t, h] * relu(scale * q[t, h] . k[w])``, rewritten with ``scale >= 0``
(the wrapper refuses a negative one) as ``sum_h relu(q[t, h] . k[w]) * (scale * weights[t, h])``.
Like ``"keys_split"``: one dot ``[BLOCK_C, DI] x [DI, BLOCK_H]`` per token of the program (keys on
the MMA's M side, heads on N) against its query tile, staged once in shared memory. Unlike it:

* every token's queries and weights are loaded once per program, before the loop over the
  program's request runs (not once per run), so their addresses are not held across that loop;
* ``scale`` is folded into the weights (no multiply per product); fp8 keys' per-key scale
  (``> 0``) multiplies the head sum, one value per entry;
* the program's token scores of a key tile are gathered into one ``[BLOCK_C, TP]`` tile, stored
  with one layout conversion per tile (``"keys_split"`` converts and stores each token's
  ``[BLOCK_C]`` row apart: a shared-memory round trip and two CTA barriers per token per tile);
* ``"keys_fold"`` (``TP = BLOCK_T``): each token's head sum runs in fp32 on the accumulator
  (``relu``, a multiply-add by the weight, the sum along the row: in-thread adds and two
  shuffles), placed in column ``t`` of the tile; the weights stay in registers (16 per token per
  thread), so it spills beyond 2-4 tokens;
* ``"keys_wdot"`` (``TP = max(16, BLOCK_T)``, a dot's N being at least 16): the head sum is a
  second tensor-core dot, ``relu(k q_t^T)`` rounded to the queries' dtype (the A operand stays in
  registers; ``RELU_ASM``: ReLU and rounding in one ``cvt.rn.relu`` per pair) times a
  ``[BLOCK_H, TP]`` matrix holding ``scale x weights[t]`` in column ``t`` and zeros elsewhere
  (same dtype, a loop-invariant operand in shared memory), accumulated over the tokens into the
  tile. No weight registers and no shuffles, for a dot of ``BLOCK_C x BLOCK_H x TP`` per token
  (1/8 of the scoring dot's work at 64 heads and ``TP = 16``) and the rounding of the post-ReLU
  products and the weights: bf16 inputs give scores within ~2.4e-3 (relative L2) of float64
  where the fp32 epilogue is within fp32 error, and 99.76% of a top-512 selection in common with
  the exact one (a torch emulation on Gaussian data; the sweep's ``shared`` column measures it on
  the GPU). fp32 inputs: TF32 on the GPU unless IEEE, exact in the interpreter;
* ``"keys_wdot16"``: ``"keys_wdot"`` with the second dot in fp16 whatever the input dtype (10
  mantissa bits to bf16's 7: ~3.0e-4 relative L2, 99.95% of the top-512 in common in the same
  emulation); the post-ReLU products saturate at 65,504 (an inf would turn the other tokens'
  zero columns into NaN), weights below fp16's normal range lose precision;
* ``"keys_wdot_pairs"``: ``"keys_wdot"`` over two tokens per dot (``BLOCK_T`` even): their query
  tiles stacked ``[2 BLOCK_H, DI]`` (one m64n128 product chain per warpgroup instead of two
  m64n64 ones, each waited for), and the second dot's operand ``[2 BLOCK_H, TP]`` block-diagonal
  (each token's weights in its own column): the same roundings as ``"keys_wdot"``, half the
  products to wait for.

Compile statistics (sm_90, Triton 3.6, 64 heads x 128, bf16 queries, the top-k launch: ``SHORT``,
no scores, ``RELU_ASM``; the launch's integer specialisation: bf16 keys as a ``[N, 128]`` tensor have
``rows_per_page = 1``, a constant; fp4: the pool, decoded by ``load_key``). The inner key loop's SASS
per warp and key tile; "/score": warp instructions per (entry, token) score,
``instrs x warps / (BLOCK_C x BLOCK_T)``. Counts, not times: no speed is claimed here
(``benchmark/indexer_extend_sweep.py`` times the settings).

==========================  =====  ====  =====  ======  ======  ======  =====  ===  ====  ===  ======
setting                     keys   regs  stack  shared  instrs  /score  HGMMA  BAR  SHFL  LDL  FP ops
==========================  =====  ====  =====  ======  ======  ======  =====  ===  ====  ===  ======
keys_split t8 c128 w8 s2    bf16   255   376    197120  1793    14.0    64     16   32    9    768
keys_wdot t8 c128 w8 s2     bf16   255   8      221184  1080    8.4     96     2    0     0    128
keys_wdot_pairs t8 ... s2   bf16   255   32     221184  961     7.5     64     2    0     0    128
keys_wdot_pairs t8 ... s1   bf16   255   0      180224  946     7.4     64     4    0     0    128
keys_wdot_pairs t4 ... s2   bf16   214   0      147456  739     11.5    32     2    0     0    64
keys_wdot16 t8 c128 w8 s2   bf16   255   8      221184  1080    8.4     96     2    0     0    128
keys_wdot t4 c128 w8 s2     bf16   210   0      147456  819     12.8    48     2    0     0    64
keys_wdot t2 c256 w8 s2     bf16   220   0      184320  857     13.4    48     8    0     0    64
keys_fold t4 c128 w8 s2     bf16   255   40     133120  926     14.5    32     2    16    0    256
keys_fold t2 c256 w8 s2     bf16   228   0      165888  995     15.5    32     8    16    0    256
keys_fold t8 c128 w8 s2     bf16   255   304    200704  1446    11.3    64     2    32    50   512
keys_split t8 c128 w8 s2    fp4    255   592    163840  3108    24.3    64     18   32    63   1056
keys_wdot t8 c128 w8 s2     fp4    255   8      180224  2249    17.6    96     4    0     0    416
keys_wdot_pairs t8 ... s2   fp4    255   0      180224  2113    16.5    64     4    0     0    416
==========================  =====  ====  =====  ======  ======  ======  =====  ===  ====  ===  ======

"FP ops": FMUL + FFMA + FMNMX + F2FP of the loop; "t8 ... s2": ``c128 w8``. ``keys_split t8 c128 w8 s2`` is the default
(``indexer.EXTEND_SCORE``); ``keys_fold t8`` is not in the sweep (it spills inside the loop).
``keys_wdot t8``'s 8 bytes of stack are two predicate words saved at the kernel's start and read
once before the key loop (``keys_wdot_pairs t8 s2``'s 32 likewise outside it); their loops have no
local-memory access (the settings that compile without
any spill: ``test_kernels_compile.py::test_extend_fold_forms_compile_without_spills``).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._dot import dot, dot_acc
from sgl_kernel_v4.triton.indexer_score_extend import _key_tile, _token_q, short_run_keys, zero_long_rows
from sgl_kernel_v4.triton.indexer_select import INT_MIN, _float_to_key

__all__ = ["FOLD_FORMS", "relu_asm_ok", "_score_fold_kernel"]

#: ``ExtendScore.form`` values this module's kernel runs, with their ``FORM`` constexpr.
FOLD_FORMS = {"keys_fold": 2, "keys_wdot": 3, "keys_wdot16": 4, "keys_wdot_pairs": 5}


def relu_asm_ok(q: torch.Tensor) -> bool:
    """``RELU_ASM`` of a launch on ``q``'s device: inline PTX runs (a CUDA tensor, not Triton's
    interpreter)."""
    return q.is_cuda and os.environ.get("TRITON_INTERPRET") != "1"


@triton.jit
def _head_operand(wi, w_all, scale, i: tl.constexpr, offs_p, dtype: tl.constexpr, FORM: tl.constexpr):
    # token i's head-sum operand: "keys_fold" scale * w[i] [BLOCK_H] fp32 (wi); "keys_wdot" the
    # [BLOCK_H, TP] matrix with scale * w[i] in column i (of w_all, every token's weights by
    # column), zeros elsewhere, in the queries' dtype
    if FORM == 2:
        return wi * scale
    else:
        return tl.where(offs_p[None, :] == i, w_all * scale, 0.0).to(dtype)


#: ReLU and round to nearest of two fp32 values into a bf16 / fp16 pair (fp16 saturating at the
#: largest finite value), one PTX conversion (sm_80+; ``$1`` goes to the low half)
_RELU_BF16_ASM = tl.constexpr("cvt.rn.relu.bf16x2.f32 $0, $2, $1;")
_RELU_F16_ASM = tl.constexpr("cvt.rn.relu.satfinite.f16x2.f32 $0, $2, $1;")


@triton.jit
def _relu_to(x, dtype: tl.constexpr, RELU_ASM: tl.constexpr):
    # relu(x) rounded to dtype (fp16: at most 65,504, so an overflow is no inf, whose product with
    # the zeros of the other tokens' columns would be NaN); RELU_ASM: the packed PTX conversion,
    # else its Triton twin (the interpreter's)
    if RELU_ASM and dtype == tl.bfloat16:
        y = tl.inline_asm_elementwise(_RELU_BF16_ASM, "=r,r,r", [x], dtype=tl.bfloat16, is_pure=True, pack=2)
    elif RELU_ASM and dtype == tl.float16:
        y = tl.inline_asm_elementwise(_RELU_F16_ASM, "=r,r,r", [x], dtype=tl.float16, is_pure=True, pack=2)
    elif dtype == tl.float16:
        y = tl.minimum(tl.maximum(x, 0.0), 65504.0).to(dtype)
    else:
        y = tl.maximum(x, 0.0).to(dtype)
    return y


@triton.jit
def _token_scores(k, qi, bi, i: tl.constexpr, offs_p, sc, FORM: tl.constexpr, IEEE: tl.constexpr,
                  RELU_ASM: tl.constexpr):  # fmt: skip
    # token i's [BLOCK_C] head sums of the key tile k, added to column i of sc [BLOCK_C, TP]
    sd = dot(k, tl.trans(qi), IEEE)  # [BLOCK_C, BLOCK_H] fp32
    if FORM == 2:
        score = tl.sum(tl.maximum(sd, 0.0) * bi[None, :], 1)
        return tl.where(offs_p[None, :] == i, score[:, None], sc)
    else:
        if bi.dtype == tl.float32:
            out = dot_acc(_relu_to(sd, bi.dtype, RELU_ASM), bi, sc, IEEE)
        else:  # (the precision flag acts on fp32 operands only)
            out = dot_acc(_relu_to(sd, bi.dtype, RELU_ASM), bi, sc, False)
        return out


@triton.jit
def _pair_operands(q_ptr, stride_qt, stride_qh, w_ptr, stride_wt, t_base, g0, vis_ptr, G, HI, scale, offs_p,
                   j: tl.constexpr, BLOCK_H: tl.constexpr, DI: tl.constexpr, WD: tl.constexpr):  # fmt: skip
    # "keys_wdot_pairs": tokens 2j and 2j + 1 of the program as one dot: their queries stacked
    # [2 BLOCK_H, DI] (row m: token 2j + m // BLOCK_H, head m % BLOCK_H; zeros past HI, past G or
    # for a token that sees nothing) and the second dot's operand [2 BLOCK_H, TP] (row m: scale x
    # the token's weight of head m % BLOCK_H in the token's column, zeros elsewhere)
    offs_m = tl.arange(0, 2 * BLOCK_H)
    tok = 2 * j + offs_m // BLOCK_H
    head = offs_m % BLOCK_H
    t = (g0 + tok).to(tl.int64)
    nv = tl.load(vis_ptr + t_base + t, mask=t < G, other=0)
    ok = (t < G) & (nv > 0) & (head < HI)
    t = t_base + t
    q = tl.load(q_ptr + t[:, None] * stride_qt + head[:, None] * stride_qh + tl.arange(0, DI)[None, :],
                mask=ok[:, None], other=0.0)  # fmt: skip
    wm = ok[:, None] & (offs_p[None, :] == tok[:, None])
    w = tl.load(w_ptr + t[:, None] * stride_wt + head[:, None] + 0 * offs_p[None, :], mask=wm, other=0.0)
    return q, (w.to(tl.float32) * scale).to(WD)


@triton.jit
def _store_tile(rows, srows, n, act, sc, c, valid, cm, WRITE_SCORES: tl.constexpr):
    # the tile's scores sc [BLOCK_C, TP] of the program's tokens (row starts rows / srows [TP],
    # visible counts n, act: in the current run): keys (INT_MIN where invalid) where each sees them
    seen = c[:, None] < n[None, :]
    ok = valid[:, None] & seen
    st = act[None, :] & seen & cm[:, None]
    tl.store(rows[None, :] + c[:, None], tl.where(ok, _float_to_key(sc), INT_MIN), mask=st)
    if WRITE_SCORES:
        tl.store(srows[None, :] + c[:, None], tl.where(ok, sc, float("-inf")), mask=st)


# _score_extend_kernel's argument list; no recompile per block / batch size
@triton.jit(
    do_not_specialize=["t_base", "G", "nsc", "vis_ptr", "r2p_ptr", "stride_r2p", "req_rows_ptr", "token_req_ptr",
                       "E", "hist_ptr", "cnt_ptr", "K"]
)  # fmt: skip
def _score_fold_kernel(
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
    G,
    HI,
    scale,
    nsc,
    DI: tl.constexpr,
    CODEC: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_C: tl.constexpr,
    WRITE_SCORES: tl.constexpr,
    SHORT: tl.constexpr,
    HB: tl.constexpr,
    FORM: tl.constexpr = 3,
    FP4_ROWS: tl.constexpr = False,
    IEEE: tl.constexpr = False,
    RELU_ASM: tl.constexpr = False,
):
    # program (p, s): block rows g0 .. g0 + BLOCK_T - 1 (BLOCK_T <= 8), the s-th share of their
    # visible entries (multiples of BLOCK_C, as _score_extend_kernel's); one pass per request run
    g0 = tl.program_id(0) * BLOCK_T
    s = tl.program_id(1)
    # the program's tokens as the score tile's columns, padded to TP = 16 for "keys_wdot" (a dot's
    # N); the padding columns act as tokens past G (no queries, nothing stored)
    TP: tl.constexpr = 16 if (FORM >= 3 and BLOCK_T < 16) else BLOCK_T
    offs_p = tl.arange(0, TP)
    glp = (g0 + offs_p).to(tl.int64)
    p_ok = (offs_p < BLOCK_T) & (glp < G)
    n_p = tl.load(vis_ptr + t_base + glp, mask=p_ok, other=0).to(tl.int32)
    treq_p = tl.load(token_req_ptr + t_base + glp, mask=p_ok, other=-1)
    offs_d = tl.arange(0, DI)
    offs_c = tl.arange(0, BLOCK_C)
    kv = (kv_ptr, kv_rpp, kv_ps, kv_rs)
    if SHORT:  # over the BLOCK_T tokens (not the TP columns: half the work of a padded tile)
        gl = (g0 + tl.arange(0, BLOCK_T)).to(tl.int64)
        n = tl.load(vis_ptr + t_base + gl, mask=gl < G, other=0).to(tl.int32)
        zero_long_rows(hist_ptr, cnt_ptr, gl, gl < G, n, K, s, nsc)
    rows = keys_ptr + glp * stride_k  # [TP] row starts
    srows = scores_ptr + glp * stride_k
    # every token's [BLOCK_H, DI] queries (zeros past HI, past G or for a token that sees nothing)
    # and head-sum operand, once per program (tokens 0..7 named, the unused ones compiled out)
    qa = (q_ptr, stride_qt, stride_qh, w_ptr, stride_wt, t_base, g0)
    w_all = tl.zeros([BLOCK_H, TP], tl.float32)
    # the second dot's operand dtype: the queries' ("keys_wdot"), fp16 ("keys_wdot16")
    WD: tl.constexpr = tl.float16 if FORM == 4 else q_ptr.dtype.element_ty
    if (
        FORM == 3 or FORM == 4
    ):  # [BLOCK_H, TP]: token p's weights in column p (a few registers, not BLOCK_H per token)
        offs_h = tl.arange(0, BLOCK_H)
        wm = (offs_h < HI)[:, None] & p_ok[None, :]
        w_all = tl.load(w_ptr + (t_base + glp)[None, :] * stride_wt + offs_h[:, None], mask=wm, other=0.0)
        w_all = w_all.to(tl.float32)
    # operands per dot: a token's (NQ = BLOCK_T), or a pair's ("keys_wdot_pairs", NQ = BLOCK_T / 2)
    NQ: tl.constexpr = BLOCK_T // 2 if FORM == 5 else BLOCK_T
    if FORM == 5:
        pa = (q_ptr, stride_qt, stride_qh, w_ptr, stride_wt, t_base, g0, vis_ptr, G, HI, scale, offs_p)
        q0, b0 = _pair_operands(*pa, 0, BLOCK_H, DI, WD)
        if NQ >= 2:
            q1, b1 = _pair_operands(*pa, 1, BLOCK_H, DI, WD)
        if NQ >= 4:
            q2, b2 = _pair_operands(*pa, 2, BLOCK_H, DI, WD)
            q3, b3 = _pair_operands(*pa, 3, BLOCK_H, DI, WD)
    else:
        q0, w0, _n0, _a0 = _token_q(*qa, 0, p_ok, n_p, HI, BLOCK_H, DI)
        q1, w1, _n1, _a1 = _token_q(*qa, 1, p_ok, n_p, HI, BLOCK_H, DI)
        b0 = _head_operand(w0, w_all, scale, 0, offs_p, WD, FORM)
        b1 = _head_operand(w1, w_all, scale, 1, offs_p, WD, FORM)
        if BLOCK_T >= 4:
            q2, w2, _n2, _a2 = _token_q(*qa, 2, p_ok, n_p, HI, BLOCK_H, DI)
            q3, w3, _n3, _a3 = _token_q(*qa, 3, p_ok, n_p, HI, BLOCK_H, DI)
            b2 = _head_operand(w2, w_all, scale, 2, offs_p, WD, FORM)
            b3 = _head_operand(w3, w_all, scale, 3, offs_p, WD, FORM)
        if BLOCK_T >= 8:
            q4, w4, _n4, _a4 = _token_q(*qa, 4, p_ok, n_p, HI, BLOCK_H, DI)
            q5, w5, _n5, _a5 = _token_q(*qa, 5, p_ok, n_p, HI, BLOCK_H, DI)
            q6, w6, _n6, _a6 = _token_q(*qa, 6, p_ok, n_p, HI, BLOCK_H, DI)
            q7, w7, _n7, _a7 = _token_q(*qa, 7, p_ok, n_p, HI, BLOCK_H, DI)
            b4 = _head_operand(w4, w_all, scale, 4, offs_p, WD, FORM)
            b5 = _head_operand(w5, w_all, scale, 5, offs_p, WD, FORM)
            b6 = _head_operand(w6, w_all, scale, 6, offs_p, WD, FORM)
            b7 = _head_operand(w7, w_all, scale, 7, offs_p, WD, FORM)
    for i in range(0, BLOCK_T):
        gi = g0 + i
        ri = tl.load(token_req_ptr + t_base + gi, mask=gi < G, other=-1)
        rp = tl.load(token_req_ptr + t_base + gi - 1, mask=(i > 0) & (gi < G), other=-2)
        if (gi < G) & (ri != rp):
            act_p = p_ok & (treq_p == ri)
            n_run = tl.max(tl.where(act_p, n_p, 0), 0)
            row = tl.load(req_rows_ptr + ri).to(tl.int64)
            prow = r2p_ptr + row * stride_r2p
            chunk = tl.cdiv(tl.cdiv(n_run, nsc), BLOCK_C) * BLOCK_C
            c_lo = s * chunk
            c_end = tl.minimum(c_lo + chunk, n_run)
            short = False
            if SHORT:
                short = n_run <= K
            if short:
                short_run_keys(keys_ptr, stride_k, prow, E, glp, n_p, act_p, c_lo, c_end, BLOCK_C)
            elif c_lo < c_end:
                for c0 in range(c_lo, c_end, BLOCK_C):
                    c, cm, valid, k, kscale = _key_tile(
                        kv, prow, E, c0, c_end, offs_c, offs_d, CODEC, DI, FP4_ROWS
                    )
                    k = k.to(q0.dtype)
                    sc = tl.zeros([BLOCK_C, TP], tl.float32)
                    sc = _token_scores(k, q0, b0, 0, offs_p, sc, FORM, IEEE, RELU_ASM)
                    if NQ >= 2:
                        sc = _token_scores(k, q1, b1, 1, offs_p, sc, FORM, IEEE, RELU_ASM)
                    if NQ >= 4:
                        sc = _token_scores(k, q2, b2, 2, offs_p, sc, FORM, IEEE, RELU_ASM)
                        sc = _token_scores(k, q3, b3, 3, offs_p, sc, FORM, IEEE, RELU_ASM)
                    if NQ >= 8:
                        sc = _token_scores(k, q4, b4, 4, offs_p, sc, FORM, IEEE, RELU_ASM)
                        sc = _token_scores(k, q5, b5, 5, offs_p, sc, FORM, IEEE, RELU_ASM)
                        sc = _token_scores(k, q6, b6, 6, offs_p, sc, FORM, IEEE, RELU_ASM)
                        sc = _token_scores(k, q7, b7, 7, offs_p, sc, FORM, IEEE, RELU_ASM)
                    if CODEC == 2:  # fp8 keys: the per-key scale (> 0) after the head sum
                        sc = sc * kscale[:, None]
                    _store_tile(rows, srows, n_p, act_p, sc, c, valid, cm, WRITE_SCORES)
