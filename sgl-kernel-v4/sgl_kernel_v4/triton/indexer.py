"""Lightning-indexer scoring + top-k over the paged indexer keys (Triton).

Op-table entry 6 (``sgl_kernel_v4/ops.py``); scoring formula from HF ``DeepseekV4IndexerScorer``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``; paper §2.3.1, eqs. 13-17):
``score[t, w] = sum_h weights[t, h] * relu(scale * q[t, h] · k[w])`` over every entry ``w <
visible[t]`` of the token's request, the keys found through ``req_to_page``
(:mod:`sgl_kernel_v4.paged`) and read in their pool format (bf16/fp32, fp8 with one scale per
key, fp4 with one ue8m0 scale per 32 values).

Pipeline (three or four launches per block of up to ``G`` tokens; the grid depends on the batch
shape and the context bound only, so one CUDA graph per batch size serves every context):

1. ``_score_kernel`` (grid ``ceil(G / BLOCK_T) x nsc``): program ``(p, s)`` scores the ``s``-th
   share of the visible entries of ``BLOCK_T`` consecutive tokens (1 at decode; more in an extend,
   whose tokens read the same request's keys, so each key tile is loaded once for all of them and
   scored by one tensor-core dot of ``[BLOCK_T x heads, di] x [di, BLOCK_C]``), and writes an
   order-preserving int32 key per entry (fp32 bits mapped so that signed int32 order is float
   order, ``-0.0`` mapped to ``+0.0``) into a ``[G, C]`` scratch row. Tiles start at multiples of
   ``BLOCK_C`` and every tile is computed alike whatever the split, batch or chunk, so a token's
   scores do not depend on them. Programs of several tokens may instead take the keys-major
   kernel of :mod:`sgl_kernel_v4.triton.indexer_score_extend` (:data:`EXTEND_SCORE`: heads on the
   MMA's N side, so the head sum stays along accumulator rows).
1b. ``_hist_kernel`` (two launches, grid ``G x nss``): the histogram of the keys' top ``HB`` bits
   per token, in two levels of 64 bins (a ``tl.histogram`` call costs about its bin count: one
   4,096-bin level took 31 us at 262,144 keys on the H200): the coarse level counts the bins' top
   6 bits, the fine level the low 6 bits of the keys inside the coarse bin that holds the
   ``topk``-th largest key, which is all the next pass needs. Blocks of 1,024 keys per histogram
   call, a share's last keys 256 at a time, added to the token's with atomics on the non-empty
   bins.
2. ``_filter_kernel`` (grid ``G x nss``): from the histogram, the bin ``b*`` holding the
   ``topk``-th largest key; every program scans its share of the keys and appends the entries of
   bins above ``b*`` (all selected, fewer than ``topk``) and of bin ``b*`` (the candidates) to the
   token's two lists (positions reserved with an atomic counter).
3. the final selection: the ``need = topk - |above|`` best candidates by the tie rule (radix
   selection over the key bits below the bin's, 8 bits per pass, then, only when keys equal to
   the threshold lie on both sides of the boundary, over the positions:
   :mod:`sgl_kernel_v4.triton.indexer_radix`), merged with the entries above and sorted: the
   output row. ``select_impl="fused"`` runs it in the filter launch (``_filter_final_kernel``):
   each program counts itself done on an atomic counter of its row and the row's last one
   selects. ``"radix"`` runs it as its own launch (``_final_kernel``, grid ``G``);
   ``"bitsearch"`` (the default, ``DEFAULT_SELECT_IMPL``: the fastest measured on the H200,
   36 us against the fused launch's 57 us at 262,144 candidates, whose 1,024-bin radix histograms
   cost more than the bit search's register counts) is the final with two 31-step bit searches
   over the candidate list.

Short rows (:mod:`sgl_kernel_v4.triton.indexer_select`): a token that sees at most ``topk``
entries selects all its valid ones, whatever the scores. Each pass reads ``visible`` on the device
(no host synchronisation; one batch mixes both kinds): the scoring pass writes validity keys only
for such a request run (no dot), the histogram and filter programs return at once, and the final
pass (in the fused launch: the row's first program) writes the valid positions in order, ``-1``
after them. The scoring pass also zeroes the
histogram and counters of the other rows (no memset launches), and the final pass writes every
place of the output (no fill). When the host bound ``max_visible`` is at most ``topk`` the
histogram and filter are not launched at all.

Tie rule (the same as the torch reference ``sgl_kernel_v4.ref.attention.indexer_topk``): the
selection is the ``topk`` largest composite keys ``(score, -position)``: a higher score wins, equal
scores go to the lower entry index (validity as the reference: an entry below ``visible[t]``
whose page is mapped; a short row takes every such entry, also one whose score is a NaN with all
bits set, whose key would equal the invalid key). The output holds the selected entry indices in ascending order,
``-1`` after them where a token sees fewer than ``topk`` entries. The atomics only change the order
in which candidates are listed, never the selected set, and the output is sorted: deterministic.

Workspace: per block of ``G`` tokens, ``3 x G x C`` int32 (keys, candidate keys, candidate
positions) plus ``G x (128 + topk + 4)``; ``G = max(1, SCRATCH_ELEMS // (3 C))``, so a forward
of any length uses a bounded workspace (no ``[tokens, candidates]`` structure beyond ``G`` rows).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.paged import as_paged
from sgl_kernel_v4.ref.attention import select_topk
from sgl_kernel_v4.triton._dot import dot
from sgl_kernel_v4.triton._utils import cdiv, ieee_f32_dots, next_power_of_2, num_sms
from sgl_kernel_v4.triton.indexer_score import DECODE_SCORE_CONFIG, _score_decode_kernel
from sgl_kernel_v4.triton.indexer_score_extend import (
    ExtendScore,
    _score_extend_kernel,
    extend_splits,
    short_run_keys,
    zero_long_rows,
)
from sgl_kernel_v4.triton.indexer_score_fold import FOLD_FORMS, _score_fold_kernel, relu_asm_ok
from sgl_kernel_v4.triton.indexer_select import (
    CNT,
    DEFAULT_SELECT_IMPL,
    HB,
    HIST_W_VALUE,
    INT_MIN,
    INT_MIN_VALUE,
    SELECT_IMPLS,
    _float_to_key,
    _keys_from_scores_kernel,
    histogram,
    select,
    splits,
)
from sgl_kernel_v4.triton.kv_codec import load_key, row_offsets

__all__ = [
    "indexer_topk",
    "indexer_scores",
    "topk_from_scores",
    "SCRATCH_ELEMS",
    "EXTEND_SCORE",
    "ExtendScore",
]

#: int32 elements of the per-block scratch (keys + candidate lists): 3 x G x C <= this.
SCRATCH_ELEMS = 1 << 26
_MAX_TOPK = 4096  # register budget of the final merge (one sorted block of topk)
#: One token per scoring program (batches of at most 256 tokens) takes the decode scoring kernel of
#: :mod:`sgl_kernel_v4.triton.indexer_score` for the key formats (``PagedRows.codec_id``) listed in
#: :data:`DECODE_SCORE_CODECS`; ``False`` keeps the general kernel (benchmark baseline).
DECODE_SCORE_KERNEL = True
DECODE_SCORE_CODECS = frozenset({0, 2, 3})
#: fp4 keys of 32, 64 or 128 values in the decode scoring kernel are decoded one 32-value scale block
#: at a time (:func:`~sgl_kernel_v4.triton.kv_codec.load_fp4_key_block`, one dot of K = 32 each);
#: ``False`` decodes them with ``load_key`` (the benchmark baseline).
DECODE_FP4_BLOCKS = True
#: ``True``: fp4 keys (32 to 128 values) in the extend scoring kernel (keys-major forms) are decoded a
#: whole key at a time, each byte once (:func:`~sgl_kernel_v4.triton.kv_codec.load_fp4_key_row`).
#: ``False`` (the default): ``load_key``, a byte and a scale byte per value. On the H200 the whole-key
#: decode made a 2,048-token chunk's call 1.19x slower at 32,768 and 1.20x slower at 262,144
#: candidates (``indexer_extend_sweep.py --fp4-ab``, benchmark/RESULTS.md 2026-12-03, third session):
#: the interleave of the two nibble tiles costs more than the repeated byte loads it saves.
EXTEND_FP4_ROWS = False
#: Scoring of programs of several tokens (an extend; :mod:`sgl_kernel_v4.triton.indexer_score_extend`):
#: ``form="general"`` is :func:`_score_kernel` (tokens-major), ``"keys"`` / ``"keys_split"`` the
#: keys-major kernel with the setting's tile (``"keys_fold"``, ``"keys_wdot"``, ...: the opt-in forms of
#: :mod:`sgl_kernel_v4.triton.indexer_score_fold`, ``scale >= 0``); ``indexer_topk(extend_score=...)``
#: overrides it per call.
#: The default is the fastest setting of the H200 sweep (``benchmark/indexer_extend_sweep.py``; a
#: 2,048-token chunk, 64 heads x 128, top-512): 3.1-3.5x the general kernel's call at 32,768 and
#: 262,144 candidates, bf16 and fp4 keys (benchmark/RESULTS.md, 2026-12-03); its split aims at 4
#: waves of programs (``waves=4``: 1.33x / 1.43x faster again at 262,144 candidates, bf16 / fp4).
EXTEND_SCORE = ExtendScore(form="keys_split", block_t=8, block_c=128, num_warps=8, num_stages=2, waves=4)


# no recompile per block / batch size, nor per alignment of the index tables (slices of the batch)
@triton.jit(
    do_not_specialize=[
        "t_base",
        "G",
        "nsc",
        "vis_ptr",
        "r2p_ptr",
        "stride_r2p",
        "req_rows_ptr",
        "token_req_ptr",
        "E",
        "hist_ptr",
        "cnt_ptr",
        "K",
    ]
)
def _score_kernel(
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
    IEEE: tl.constexpr = False,
):
    # program (p, s): the token rows g0 .. g0 + BLOCK_T - 1 of the block, the s-th share of their
    # visible entries; one key tile is loaded once for all of them (they read the same request's
    # keys) and scored by one dot of [BLOCK_T * BLOCK_H, DI] x [DI, BLOCK_C].
    # SHORT: a run whose tokens all see at most K entries (every valid one is selected, whatever
    # its score) writes validity keys only (0 valid, INT_MIN not), no q load nor dot; the programs
    # zero the histogram (their 1/nsc of the bins) and counters of the rows of more than K entries
    g0 = tl.program_id(0) * BLOCK_T
    s = tl.program_id(1)
    offs_t = tl.arange(0, BLOCK_T)
    gl = (g0 + offs_t).to(tl.int64)
    t_ok = gl < G
    n = tl.load(vis_ptr + t_base + gl, mask=t_ok, other=0).to(tl.int32)
    treq = tl.load(token_req_ptr + t_base + gl, mask=t_ok, other=-1)
    offs_d = tl.arange(0, DI)
    offs_m = tl.arange(0, BLOCK_T * BLOCK_H)
    mt = (g0 + offs_m // BLOCK_H).to(tl.int64)
    mh = offs_m % BLOCK_H
    m_ok = (mt < G) & (mh < HI)
    if not SHORT:
        q = tl.load(
            q_ptr + (t_base + mt)[:, None] * stride_qt + mh[:, None] * stride_qh + offs_d[None, :],
            mask=m_ok[:, None],
            other=0.0,
        )
        w = tl.load(w_ptr + (t_base + mt) * stride_wt + mh, mask=m_ok, other=0.0).to(tl.float32)
    else:
        zero_long_rows(hist_ptr, cnt_ptr, gl, t_ok, n, K, s, nsc)
    offs_c = tl.arange(0, BLOCK_C)
    # the block's tokens come in runs of one request (a batch lists each request's tokens
    # together): one pass per run, over the pages of that request
    for i in range(0, BLOCK_T):
        gi = g0 + i
        ri = tl.load(token_req_ptr + t_base + gi, mask=gi < G, other=-1)
        rp = tl.load(token_req_ptr + t_base + gi - 1, mask=(i > 0) & (gi < G), other=-2)
        if (gi < G) & (ri != rp):
            act = t_ok & (treq == ri)
            n_run = tl.max(tl.where(act, n, 0), 0)
            row = tl.load(req_rows_ptr + ri).to(tl.int64)
            chunk = tl.cdiv(tl.cdiv(n_run, nsc), BLOCK_C) * BLOCK_C
            c_end = tl.minimum(s * chunk + chunk, n_run)
            short = False
            if SHORT:
                short = n_run <= K
            if short:
                short_run_keys(keys_ptr, stride_k, r2p_ptr + row * stride_r2p, E, gl, n, act, s * chunk, c_end,
                               BLOCK_C)  # fmt: skip
            elif s * chunk < c_end:
                if SHORT:
                    q = tl.load(
                        q_ptr
                        + (t_base + mt)[:, None] * stride_qt
                        + mh[:, None] * stride_qh
                        + offs_d[None, :],
                        mask=m_ok[:, None],
                        other=0.0,
                    )
                    w = tl.load(w_ptr + (t_base + mt) * stride_wt + mh, mask=m_ok, other=0.0).to(tl.float32)
                for c0 in range(s * chunk, c_end, BLOCK_C):
                    c = c0 + offs_c
                    cm = c < c_end
                    page = tl.load(r2p_ptr + row * stride_r2p + c // E, mask=cm, other=-1).to(tl.int64)
                    valid = cm & (page >= 0)
                    off = row_offsets(page * E + c % E, kv_rpp, kv_ps, kv_rs)
                    k, ks = load_key(kv_ptr, off, valid, offs_d, CODEC, DI)
                    sd = dot(q, tl.trans(k.to(q.dtype)), IEEE)  # [BLOCK_T * BLOCK_H, BLOCK_C] fp32
                    sd = tl.maximum(sd * ks[None, :] * scale, 0.0) * w[:, None]
                    score = tl.sum(tl.reshape(sd, [BLOCK_T, BLOCK_H, BLOCK_C]), 1)  # [BLOCK_T, BLOCK_C]
                    seen = c[None, :] < n[:, None]
                    key = tl.where(valid[None, :] & seen, _float_to_key(score), INT_MIN)
                    st = act[:, None] & seen & cm[None, :]
                    kp = gl[:, None] * stride_k + c[None, :]
                    tl.store(keys_ptr + kp, key, mask=st)
                    if WRITE_SCORES:
                        tl.store(
                            scores_ptr + kp, tl.where(valid[None, :] & seen, score, float("-inf")), mask=st
                        )


def _check(q: torch.Tensor, weights: torch.Tensor, topk: int) -> None:
    if q.dim() != 3:
        raise ValueError(f"q: expected [T, Hi, di], got {tuple(q.shape)}")
    T, HI, DI = q.shape
    if DI & (DI - 1) or DI < 16:
        raise ValueError(f"q: head dim must be a power of 2 >= 16, got {DI}")
    if weights.shape != (T, HI):
        raise ValueError(f"weights: expected [{T}, {HI}], got {tuple(weights.shape)}")
    if topk < 1:
        raise ValueError(f"topk: must be >= 1, got {topk}")


class _Workspace:
    """Scratch of one block of ``G`` token rows over ``C`` candidates (module docstring)."""

    def __init__(self, G: int, C: int, topk: int, device: torch.device, scores: bool = False) -> None:
        i32 = dict(dtype=torch.int32, device=device)
        # rows padded to a multiple of 64 entries: the row stride is always a multiple of 16, so
        # it specialises alike for every candidate count (no compile per context while serving)
        width = -(-max(C, 1) // 64) * 64
        self.keys = torch.empty((G, width), **i32)
        self.tie_key = torch.empty((G, width), **i32)
        self.tie_pos = torch.empty((G, width), **i32)
        self.hist = torch.empty((G, HIST_W_VALUE), **i32)
        self.cnt = torch.empty((G, CNT.value), **i32)  # above, in the threshold bin, programs done
        self.sure = torch.empty((G, topk), **i32)
        self.scores = torch.empty((G, width), dtype=torch.float32, device=device) if scores else self.keys


def _block_rows(T: int, C: int, block_t: int = 1) -> int:
    """Token rows per block: as many as ``SCRATCH_ELEMS`` holds at ``C`` candidates (at least one),
    rounded down to a multiple of ``block_t`` (at least ``block_t``) unless the block holds all
    ``T`` rows, so no scoring program straddles two blocks."""
    g = max(1, SCRATCH_ELEMS // max(1, 3 * C))
    if g < T and block_t > 1:
        g = max(block_t, g // block_t * block_t)
    return max(1, min(T, g))


def _paged_args(idx_kv: Any, DI: int, req_to_page: torch.Tensor, req_rows: torch.Tensor, token_req: torch.Tensor,
                visible: torch.Tensor, T: int) -> Any:  # fmt: skip
    kv = as_paged(idx_kv)
    if kv.dim != DI or kv.codec not in ("float", "fp8_indexer", "fp4_indexer"):
        raise ValueError(f"idx_kv: expected indexer keys of {DI} values, got {kv.codec} entries of {kv.dim}")
    for name, x, nd in (
        ("req_to_page", req_to_page, 2),
        ("req_rows", req_rows, 1),
        ("token_req", token_req, 1),
    ):
        if x.dim() != nd or x.dtype not in (torch.int32, torch.int64) or x.stride(-1) != 1:
            raise ValueError(
                f"{name}: expected a contiguous {nd}-D int tensor, got {x.dtype} {tuple(x.shape)}"
            )
    if visible.shape != (T,) or token_req.shape != (T,):
        raise ValueError(
            f"visible / token_req: expected [{T}], got {tuple(visible.shape)} / {tuple(token_req.shape)}"
        )
    return kv


def indexer_topk(
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
    *,
    max_visible: int | None = None,
    out: torch.Tensor | None = None,
    block_c: int = 64,
    block_t: int | None = None,
    short_rows: bool = True,
    select_impl: str = DEFAULT_SELECT_IMPL,
    extend_score: ExtendScore | None = None,
) -> torch.Tensor:
    """Lightning-indexer top-k over the paged keys (op table entry 6; arguments and result as
    :func:`sgl_kernel_v4.ref.attention.indexer_topk`).

    Args (beyond the reference's):
        max_visible: a bound on ``visible`` (host int): the scratch width. ``None`` reads
            ``visible.max()`` (a host synchronisation); a CUDA graph passes its context bound.
        out: optional ``[T, topk]`` int64 output buffer.
        block_c: entries per scoring tile (64 = one CSA block page of 256-token pages).
        block_t: tokens per scoring program (a power of two; ``None``: 1 for at most 256 tokens,
            else ``128 // heads`` up to 4, see :func:`_tokens_per_program`).
        short_rows: the short-row path (module docstring): a token seeing at most ``topk``
            entries is answered without scores nor histogram (decided per row on the device).
            ``False`` runs the histogram path for every row (the same result; a benchmark
            baseline).
        select_impl: the selection passes (the same result), one of ``SELECT_IMPLS`` of
            :mod:`sgl_kernel_v4.triton.indexer_select`: ``"fused"`` (filter and final in one
            launch, radix selection), ``"radix"`` (two launches), ``"bitsearch"`` (the bit-by-bit
            final; ``DEFAULT_SELECT_IMPL``).
        extend_score: the scoring of programs of several tokens (``block_t > 1``): form and tile
            (:class:`~sgl_kernel_v4.triton.indexer_score_extend.ExtendScore`; its ``block_t`` /
            ``block_c``, where set, replace the arguments'); ``None``: :data:`EXTEND_SCORE`.

    Returns:
        ``[T, topk]`` int64 entry indices, ascending, ``-1`` padded.

    Raises:
        ValueError: a shape is inconsistent, ``topk`` out of range, keys of another size, or an
            unknown ``select_impl``.
    """
    _check(q, weights, topk)
    if select_impl not in SELECT_IMPLS:
        raise ValueError(f"select_impl: expected one of {SELECT_IMPLS}, got {select_impl!r}")
    T, HI, DI = q.shape
    kv = _paged_args(idx_kv, DI, req_to_page, req_rows, token_req, visible, T)
    if out is None:
        out = torch.empty((T, topk), dtype=torch.int64, device=q.device)
    if T == 0:
        return out
    C = int(visible.max()) if max_visible is None else int(max_visible)
    if topk > _MAX_TOPK:  # beyond the register budget of the final merge: the reference (syncs)
        from sgl_kernel_v4.ref.attention import indexer_topk as ref_topk

        out.copy_(ref_topk(q, weights, idx_kv, visible, req_to_page, req_rows, token_req, entries_per_page,
                           topk, scale))  # fmt: skip
        return out
    if C <= 0 or not short_rows:  # (the short-row path's final pass writes every place of out)
        out.fill_(-1)
    if C <= 0:
        return out
    _run_blocks(q, weights, kv, visible, req_to_page, req_rows, token_req, entries_per_page, scale, C, topk,
                out, block_c, None, block_t, short_rows, select_impl, extend_score)  # fmt: skip
    return out


def _tokens_per_program(T: int, heads: int) -> int:
    """Tokens per scoring program: 1 for a decode-sized batch (at most 256 tokens: one per request,
    the most parallel grid), else enough tokens for a 128-row dot (``128 // heads``, 1 to 4)."""
    return 1 if T <= 256 else max(1, min(4, 128 // heads))


def _run_blocks(q, weights, kv, visible, req_to_page, req_rows, token_req, e, scale, C, topk, out, block_c,
                scores_out, block_t=None, short=False, impl=DEFAULT_SELECT_IMPL, extend=None) -> None:  # fmt: skip
    T, HI, DI = q.shape
    if q.stride(2) != 1:
        q = q.contiguous()
    cdt = torch.float32 if q.dtype == torch.float32 else torch.bfloat16
    if kv.codec == "float" and kv.storage.dtype in (torch.bfloat16, torch.float16, torch.float32):
        cdt = kv.storage.dtype
    q = q.to(cdt)
    ieee = ieee_f32_dots(cdt)
    block_h = max(16, next_power_of_2(HI))
    # tokens per scoring program: one at decode (one token per request), more in an extend (its
    # tokens share their request's keys), so a key tile is read once per BLOCK_T tokens
    if block_t is None:
        block_t = _tokens_per_program(T, block_h)
    elif block_t < 1 or block_t & (block_t - 1):
        raise ValueError(f"block_t: must be a power of two >= 1, got {block_t}")
    es = EXTEND_SCORE if extend is None else extend
    if block_t > 1:  # an extend: the setting's tile where it names one
        block_t, block_c = es.block_t or block_t, es.block_c or block_c
        if es.form in ("keys_split", *FOLD_FORMS) and block_t > 8:
            raise ValueError(f"block_t: at most 8 for the {es.form!r} extend scoring, got {block_t}")
        if es.form in FOLD_FORMS and not scale >= 0:  # relu(s x) w = relu(x) (s w) needs it
            raise ValueError(f"scale: the {es.form!r} extend scoring needs scale >= 0, got {scale}")
        if ieee:  # IEEE fp32 products keep every token's [BLOCK_H, DI] query tile in shared memory:
            block_t = min(block_t, 4)  # 8 tokens of 64 x 128 fp32 need ~320 KB on sm_90 (> 227 KB)
    G = _block_rows(T, C, block_t)
    ws = _Workspace(G, C, topk, q.device, scores=scores_out is not None)
    ext_opts = {"num_warps": es.num_warps or (8 if block_t * block_h >= 64 else 4)}
    if es.num_stages is not None:
        ext_opts["num_stages"] = es.num_stages
    short = short and scores_out is None
    for t0 in range(0, T, G):
        g = min(G, T - t0)
        if not short:  # (the short-row path zeroes them in the scoring pass, long rows only)
            ws.hist[:g].zero_()
            ws.cnt[:g].zero_()
        if scores_out is not None:  # entries past a token's visible count: invalid
            ws.keys[:g].fill_(INT_MIN_VALUE)
            ws.scores[:g].fill_(float("-inf"))
        n_tb = cdiv(g, block_t)
        if block_t > 1 and es.waves is not None:
            nsc = extend_splits(n_tb, num_sms(q.device), es.waves)
        else:
            nsc = splits(n_tb, q.device)
        if block_t == 1 and DECODE_SCORE_KERNEL and kv.codec_id in DECODE_SCORE_CODECS:
            _score_decode_kernel[(g, nsc)](
                q, q.stride(0), q.stride(1), weights, weights.stride(0),
                kv.storage, kv.rows_per_page, kv.page_stride, kv.row_stride,
                visible, req_to_page, req_to_page.stride(0), req_rows, token_req, int(e),
                ws.keys, ws.keys.stride(0), ws.scores, ws.hist, ws.cnt, topk, t0, HI, float(scale), nsc,
                DI=DI, CODEC=kv.codec_id, BLOCK_H=block_h, WRITE_SCORES=scores_out is not None, SHORT=short,
                HB=HB, BLOCK_C=block_c, FP4_BLOCKS=DECODE_FP4_BLOCKS and kv.codec_id == 3 and DI in (32, 64, 128),
                IEEE=ieee, **DECODE_SCORE_CONFIG,
            )  # fmt: skip
        else:
            kernel, form = _score_kernel, {}
            if block_t > 1 and es.form != "general":
                fp4_rows = EXTEND_FP4_ROWS and kv.codec_id == 3 and DI in (32, 64, 128)
                kernel, form = _score_extend_kernel, {"FORM": es.form_code, "FP4_ROWS": fp4_rows}
                if es.form in FOLD_FORMS:  # the opt-in forms of indexer_score_fold
                    kernel, form["RELU_ASM"] = _score_fold_kernel, relu_asm_ok(q)
            kernel[(n_tb, nsc)](
                q, q.stride(0), q.stride(1), weights, weights.stride(0),
                kv.storage, kv.rows_per_page, kv.page_stride, kv.row_stride,
                visible, req_to_page, req_to_page.stride(0), req_rows, token_req, int(e),
                ws.keys, ws.keys.stride(0), ws.scores, ws.hist, ws.cnt, topk, t0, g, HI, float(scale), nsc,
                DI=DI, CODEC=kv.codec_id, BLOCK_T=block_t, BLOCK_H=block_h, BLOCK_C=block_c,
                WRITE_SCORES=scores_out is not None, SHORT=short, HB=HB, IEEE=ieee, **form, **ext_opts,
            )  # fmt: skip
        if scores_out is not None:
            keys_out, sc_out = scores_out
            keys_out[t0 : t0 + g] = ws.keys[:g, : keys_out.shape[1]]
            sc_out[t0 : t0 + g] = ws.scores[:g, : sc_out.shape[1]]
        else:
            # every row short (a host bound, no synchronisation): no histogram nor filter launch
            long_rows = not short or C > topk
            if long_rows:
                histogram(ws, g, visible, t0, topk, short)
            select(ws, g, visible, t0, topk, out, short, filter_pass=long_rows, impl=impl)


def indexer_scores(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv: Any,
    visible: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    token_req: torch.Tensor,
    entries_per_page: int,
    scale: float,
    *,
    max_visible: int | None = None,
    block_c: int = 64,
    block_t: int | None = None,
    extend_score: ExtendScore | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The scores :func:`indexer_topk` ranks, materialised (tests and benchmarks only):
    ``(keys [T, C] int32 order-preserving, INT_MIN = invalid; scores [T, C] fp32, -inf =
    invalid)`` with ``C = max_visible`` (default ``visible.max()``); column ``w`` is entry ``w``.
    ``block_c``, ``block_t``, ``extend_score`` as :func:`indexer_topk`'s."""
    _check(q, weights, 1)
    T, HI, DI = q.shape
    kv = _paged_args(idx_kv, DI, req_to_page, req_rows, token_req, visible, T)
    C = int(visible.max()) if (max_visible is None and T) else int(max_visible or 0)
    keys = torch.full((T, C), INT_MIN_VALUE, dtype=torch.int32, device=q.device)
    scores = torch.full((T, C), float("-inf"), dtype=torch.float32, device=q.device)
    if T and C:
        _run_blocks(q, weights, kv, visible, req_to_page, req_rows, token_req, entries_per_page, scale, C, 1,
                    None, block_c, (keys, scores), block_t, extend=extend_score)  # fmt: skip
    return keys, scores


def topk_from_scores(
    scores: torch.Tensor,
    topk: int,
    *,
    out: torch.Tensor | None = None,
    select_impl: str = DEFAULT_SELECT_IMPL,
) -> torch.Tensor:
    """Positions of the ``topk`` largest entries of each row of ``scores [T, C]`` (fp32/bf16), by
    the select steps of :func:`indexer_topk` (exact; the module's tie rule).

    ``-inf`` entries count as invalid; rows with fewer than ``topk`` valid entries are padded with
    ``-1``. Positions are int64, in ascending order; equal scores go to the lower position
    (``-0.0`` equals ``+0.0``). ``select_impl`` as :func:`indexer_topk`'s.

    Raises:
        ValueError: ``scores`` is not 2-D, ``topk < 1`` or an unknown ``select_impl``.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores: expected [T, C], got {tuple(scores.shape)}")
    if topk < 1:
        raise ValueError(f"topk: must be >= 1, got {topk}")
    if select_impl not in SELECT_IMPLS:
        raise ValueError(f"select_impl: expected one of {SELECT_IMPLS}, got {select_impl!r}")
    T, C = scores.shape
    if out is None:
        out = torch.empty((T, topk), dtype=torch.int64, device=scores.device)
    if topk > _MAX_TOPK:
        out.copy_(select_topk(scores, scores != float("-inf"), topk))
        return out
    out.fill_(-1)
    if T == 0 or C == 0:
        return out
    vis = torch.full((T,), C, dtype=torch.int32, device=scores.device)
    G = _block_rows(T, C)
    ws = _Workspace(G, C, topk, scores.device)
    for t0 in range(0, T, G):
        g = min(G, T - t0)
        ws.hist[:g].zero_()
        ws.cnt[:g].zero_()
        _keys_from_scores_kernel[(g, cdiv(C, 1024))](
            scores[t0:], scores.stride(0), ws.keys, ws.keys.stride(0), C, BLOCK=1024, num_warps=4
        )  # fmt: skip
        histogram(ws, g, vis, t0, topk, True)
        select(ws, g, vis, t0, topk, out, True, impl=select_impl)
    return out
