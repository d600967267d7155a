"""Lightning-indexer scoring of several tokens per program (extend / prefill) (Triton).

Step 1 of :mod:`sgl_kernel_v4.triton.indexer` for programs of ``BLOCK_T > 1`` tokens: the same
inputs and output as the general ``_score_kernel`` (one order-preserving int32 key per visible
entry of each token, ``INT_MIN`` for an invalid or unseen one, fp32 scores when ``WRITE_SCORES``;
with ``SHORT`` a request run whose tokens all see at most ``K`` entries writes validity keys only,
and the programs zero the histogram and counters of the longer rows), computed keys-major:

* the general kernel's dot is ``[BLOCK_T * BLOCK_H, DI] x [DI, BLOCK_C]``: the heads sit on the
  MMA's M side, so the weighted head sum of every tile is a reduction across warps (a round trip
  through shared memory), and ``BLOCK_C`` (the N side) is 64;
* here the dot is ``k_tile @ q^T`` (``[BLOCK_C, DI] x [DI, BLOCK_T * BLOCK_H]``): entries on M,
  the heads of the program's tokens on N, so the head sum runs along accumulator rows (mostly
  inside a thread in the MMA layout). ``FORM``:

  - ``"keys"``: one dot over every token's heads, the ``[BLOCK_C, BLOCK_T * BLOCK_H]`` tile
    reshaped to ``[BLOCK_C, BLOCK_T, BLOCK_H]`` and summed over the heads;
  - ``"keys_split"``: one dot of ``[BLOCK_C, DI] x [DI, BLOCK_H]`` per token (its queries loaded
    before the key loop, ``BLOCK_T <= 8``), each summed along its rows (a smaller accumulator).

The scoring formula is HF ``DeepseekV4IndexerScorer``'s (paper §2.3.1, eqs. 13-17):
``score[t, w] = sum_h weights[t, h] * relu(scale * q[t, h] . k[w])``, accumulated in fp32.
:class:`ExtendScore` names a tile setting (``form="general"`` keeps the general kernel), so
``benchmark/indexer_extend_sweep.py`` can time the settings and the general kernel in one process.

Compile statistics of the default ``keys_split t8 c128 w8 s2`` (sm_90, Triton 3.6, 64 heads x 128,
bf16 queries and keys, the launch's specialisation; counts, not times): 255 registers, 376 bytes
of stack, 197,120 bytes of shared memory: each token's ``[64, 128]`` query tile is loaded once per
request run and copied to shared memory before the key loop (a loop-invariant ``local_alloc``,
8 x 16 KB, read by the tensor cores as the B operand in every tile, not copied again), plus a
two-stage ring of ``[128, 128]`` key tiles filled by ``cp.async`` (2 x 32 KB). One key tile costs
each warp 1,793 SASS instructions: 64 ``HGMMA`` (per token and warpgroup, eight m64n64k16
steps), each token's product waited for before its epilogue, which takes per thread 32 FMUL
(``scale``), 32 FMNMX (ReLU), 30 FFMA + 2 FMUL (weights, in-thread sum of the row's 16 heads),
4 SHFL + 4 FADD (the quad's sum) and the key map; then the token's ``[128]`` row is moved from the
accumulator's row layout to the store's through shared memory, 1 STS + 1 LDS + 2 CTA-wide
``BAR.SYNC`` per token (16 barriers per tile, which also hold the two warpgroups together). The
loop-invariant registers are dominated by the eight tokens' weights (16 fp32 per token per
thread, 128 in all), the source of the spill (9 LDL per tile in the loop). The opt-in forms of
:mod:`sgl_kernel_v4.triton.indexer_score_fold` remove the per-token conversions and the weight
registers (its docstring has their statistics).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from sgl_kernel_v4.triton._dot import dot
from sgl_kernel_v4.triton.indexer_select import CNT, HIST_W, INT_MIN, _float_to_key
from sgl_kernel_v4.triton.kv_codec import aligned, load_fp4_key_row, load_key, row_offsets

__all__ = [
    "ExtendScore",
    "EXTEND_FORMS",
    "extend_splits",
    "SWEEP_SETTINGS",
    "full_grid",
    "_score_extend_kernel",
]

#: ``ExtendScore.form`` values: the general kernel (tokens-major), the two keys-major forms of
#: :func:`_score_extend_kernel` and the two opt-in ones of :mod:`sgl_kernel_v4.triton.indexer_score_fold`.
EXTEND_FORMS = ("general", "keys", "keys_split", "keys_fold", "keys_wdot", "keys_wdot16", "keys_wdot_pairs")
_FORM_CODE = {
    "keys": 0,
    "keys_split": 1,
    "keys_fold": 2,
    "keys_wdot": 3,
    "keys_wdot16": 4,
    "keys_wdot_pairs": 5,
}
_MAX_SPLIT_TOKENS = 8
#: the forms of one dot per token (queries loaded before the key loop, at most 8 tokens)
_SPLIT_FORMS = ("keys_split", "keys_fold", "keys_wdot", "keys_wdot16", "keys_wdot_pairs")
_MAX_KEYS_TOKENS = 4


@dataclass(frozen=True)
class ExtendScore:
    """A tile setting of the extend scoring pass (programs of more than one token).

    Attributes:
        form: one of :data:`EXTEND_FORMS`: ``"general"`` (``indexer._score_kernel``, heads on the
            MMA's M side), ``"keys"`` or ``"keys_split"`` (:func:`_score_extend_kernel`), the opt-in
            ``"keys_fold"``, ``"keys_wdot"``, ``"keys_wdot16"``, ``"keys_wdot_pairs"``
            (``indexer_score_fold._score_fold_kernel``; ``scale >= 0``).
        block_t: tokens per program (a power of two >= 2; ``"keys"``: at most 4, the other keys-major
            forms: at most 8); ``None``:
            the caller's (``indexer_topk``'s ``block_t``, else ``128 // heads`` up to 4).
        block_c: entries per key tile (a power of two >= 16); ``None``: the caller's ``block_c``.
        num_warps: warps per program (a power of two); ``None``: 8 when ``block_t x heads`` is at
            least 64, else 4 (the general kernel's rule).
        num_stages: software-pipeline stages of the key loop (>= 1); ``None``: Triton's default.
        waves: programs per SM the split of the candidates aims at (>= 1): the launch takes the
            smallest power-of-two number of shares per token block, at most 256, whose programs
            fill ``waves`` x the SM count (:func:`extend_splits`); ``None``: the decode rule
            (``indexer_select.splits``: at most two waves, often fewer).

    Raises:
        ValueError: a field out of range, naming it.
    """

    form: str = "general"
    block_t: int | None = None
    block_c: int | None = None
    num_warps: int | None = None
    num_stages: int | None = None
    waves: int | None = None

    def __post_init__(self) -> None:
        if self.form not in EXTEND_FORMS:
            raise ValueError(f"form: expected one of {EXTEND_FORMS}, got {self.form!r}")
        for name, lo in (("block_t", 2), ("block_c", 16), ("num_warps", 1)):
            v = getattr(self, name)
            if v is not None and (v < lo or v & (v - 1)):
                raise ValueError(f"{name}: expected a power of two >= {lo} or None, got {v}")
        if self.form in _SPLIT_FORMS and self.block_t is not None and self.block_t > _MAX_SPLIT_TOKENS:
            raise ValueError(
                f"block_t: at most {_MAX_SPLIT_TOKENS} for form {self.form!r}, got {self.block_t}"
            )
        if self.form == "keys" and self.block_t is not None and self.block_t > _MAX_KEYS_TOKENS:
            # measured on the H200: 8 tokens x 64 heads (a [BLOCK_C, 512] accumulator reshaped for
            # the head sum) selected wrong entries (5-13% shared with the general kernel's top-k)
            raise ValueError(f"block_t: at most {_MAX_KEYS_TOKENS} for form 'keys', got {self.block_t}")
        if self.num_stages is not None and self.num_stages < 1:
            raise ValueError(f"num_stages: expected >= 1 or None, got {self.num_stages}")
        if self.waves is not None and self.waves < 1:
            raise ValueError(f"waves: expected >= 1 or None, got {self.waves}")

    @property
    def form_code(self) -> int:
        """``FORM`` constexpr of the keys-major kernels (0 keys, 1 keys_split: :func:`_score_extend_kernel`;
        2 keys_fold, 3 keys_wdot: ``indexer_score_fold._score_fold_kernel``; -1 general)."""
        return _FORM_CODE.get(self.form, -1)

    def label(self) -> str:
        """Short name for reports, e.g. ``keys t4 c128 w8 s3``."""
        if self.form == "general":
            return "general" + (f" waves {self.waves}" if self.waves else "")
        tail = f" waves {self.waves}" if self.waves else ""
        return f"{self.form} t{self.block_t} c{self.block_c} w{self.num_warps} s{self.num_stages}{tail}"


def extend_splits(blocks: int, sms: int, waves: int) -> int:
    """Shares of the candidates per token block for an extend scoring launch of ``blocks`` token
    blocks on ``sms`` SMs: the smallest power of two ``n`` (at most 256) with ``n x blocks >= waves x
    sms``. On the H200 (132 SMs) a 2,048-token chunk's launch of 10 eight-token blocks took 16
    shares at the decode rule (160 programs: 1.2 waves, the second 21% full); 4 waves (64 shares,
    640 programs) made the chunk's indexer call 1.33x (bf16 keys) and 1.43x (fp4) faster at 262,144
    candidates (benchmark/RESULTS.md, 2026-12-03 second session).

    Raises:
        ValueError: ``blocks``, ``sms`` or ``waves`` below 1.
    """
    for name, v in (("blocks", blocks), ("sms", sms), ("waves", waves)):
        if v < 1:
            raise ValueError(f"{name}: expected >= 1, got {v}")
    n = 1
    while n * blocks < waves * sms and n < 256:
        n *= 2
    return n


#: The settings ``benchmark/indexer_extend_sweep.py`` times by default (and the sm_90 compile test
#: builds), 64 heads: (form, block_t, block_c, num_warps, num_stages), pruned from forms x
#: block_t 2/4/8 x block_c 64/128 x warps 4/8 x stages 2/3 to accumulators of at most 64 K fp32
#: values per program (``block_c x block_t x 64`` for ``keys``, ``block_c x 64`` per token for
#: ``keys_split``), and nine settings of the opt-in forms of ``indexer_score_fold``.
SWEEP_SETTINGS = tuple(
    ExtendScore(form=f, block_t=t, block_c=c, num_warps=w, num_stages=st)
    for f, t, c, w, st in (
        ("keys", 2, 64, 4, 3),
        ("keys", 2, 128, 4, 3),
        ("keys", 2, 128, 8, 3),
        ("keys", 4, 64, 8, 2),
        ("keys", 4, 64, 8, 3),
        ("keys", 4, 128, 8, 2),
        ("keys_split", 2, 128, 4, 3),
        ("keys_split", 4, 64, 4, 3),
        ("keys_split", 4, 128, 8, 3),
        ("keys_split", 8, 64, 8, 2),
        ("keys_split", 8, 128, 8, 2),
        # opt-in forms of indexer_score_fold (compile statistics in its docstring)
        ("keys_wdot", 8, 128, 8, 2),
        ("keys_wdot16", 8, 128, 8, 2),
        ("keys_wdot_pairs", 8, 128, 8, 2),
        ("keys_wdot_pairs", 8, 128, 8, 1),
        ("keys_wdot_pairs", 4, 128, 8, 2),
        ("keys_wdot", 4, 128, 8, 2),
        ("keys_wdot", 2, 256, 8, 2),
        ("keys_fold", 4, 128, 8, 2),
        ("keys_fold", 2, 256, 8, 2),
    )
)


def full_grid() -> tuple[ExtendScore, ...]:
    """Every setting of forms x block_t (2/4 for ``keys``, 2/4/8 for ``keys_split``) x block_c 64/128 x
    warps 4/8 x stages 2/3 (32 + 48 settings)."""
    return tuple(
        ExtendScore(form=f, block_t=t, block_c=c, num_warps=w, num_stages=st)
        for f in ("keys", "keys_split")
        for t in ((2, 4) if f == "keys" else (2, 4, 8))
        for c in (64, 128)
        for w in (4, 8)
        for st in (2, 3)
    )


@triton.jit
def zero_long_rows(hist_ptr, cnt_ptr, gl, t_ok, n, K, s, nsc):
    """The short-row path's zeroing, by program ``s`` of ``nsc`` per token row: the rows ``gl``
    (``[BLOCK_T]`` int64 block rows; ``t_ok`` in the block; ``n`` visible counts) that see more
    than ``K`` entries get their ``1 / nsc`` share of the ``HIST_W`` histogram bins zeroed, and
    program 0 zeroes their three counters (the histogram and filter passes add to them)."""
    long_row = t_ok & (n > K)
    nb = tl.cdiv(HIST_W, nsc)
    offs_z = tl.arange(0, 256)
    for b0 in range(s * nb, s * nb + nb, 256):
        b = b0 + offs_z
        zm = long_row[:, None] & ((b < s * nb + nb) & (b < HIST_W))[None, :]
        tl.store(
            hist_ptr + gl[:, None] * HIST_W + b[None, :], tl.zeros([gl.shape[0], 256], tl.int32), mask=zm
        )
    if s == 0:
        zc = tl.zeros(gl.shape, tl.int32)
        tl.store(cnt_ptr + CNT * gl, zc, mask=long_row)
        tl.store(cnt_ptr + CNT * gl + 1, zc, mask=long_row)
        tl.store(cnt_ptr + CNT * gl + 2, zc, mask=long_row)


@triton.jit
def short_run_keys(keys_ptr, stride_k, prow, E, gl, n, act, c_lo, c_end, BLOCK_C: tl.constexpr):
    """Validity keys of a short request run: entries ``c_lo .. c_end - 1`` of the request's page
    row ``prow``, for the run's tokens ``act`` (rows ``gl``, visible counts ``n``): 0 where the
    entry's page is mapped and the token sees it, ``INT_MIN`` where it is not mapped."""
    offs_c = tl.arange(0, BLOCK_C)
    for c0 in range(c_lo, c_end, BLOCK_C):
        c = c0 + offs_c
        cm = c < c_end
        page = tl.load(prow + c // E, mask=cm, other=-1)
        seen = c[None, :] < n[:, None]
        key = tl.where((page >= 0)[None, :] & seen, 0, INT_MIN)
        tl.store(keys_ptr + gl[:, None] * stride_k + c[None, :], key, mask=act[:, None] & seen & cm[None, :])


@triton.jit
def _key_tile(kv, prow, E, c0, c_end, offs_c, offs_d, CODEC: tl.constexpr, DI: tl.constexpr,
              FP4_ROWS: tl.constexpr):  # fmt: skip
    # the key tile of entries c0 + offs_c (below c_end) of a request's page row prow: entry indices,
    # in-range mask, valid mask (in range, page mapped), keys [BLOCK_C, DI] and their fp32 scales
    # (FP4_ROWS: fp4 keys decoded a byte at a time by load_fp4_key_row, bf16, scales applied)
    kv_ptr, kv_rpp, kv_ps, kv_rs = kv
    c = c0 + offs_c
    cm = c < c_end
    page = tl.load(prow + c // E, mask=cm, other=-1).to(tl.int64)
    valid = cm & (page >= 0)
    off = row_offsets(page * E + c % E, kv_rpp, kv_ps, kv_rs)
    if FP4_ROWS:
        k = load_fp4_key_row(aligned(kv_ptr, off, CODEC, DI, DI), valid, DI)
        ks = tl.full(off.shape, 1.0, tl.float32)
    else:
        k, ks = load_key(kv_ptr, off, valid, offs_d, CODEC, DI)
    return c, cm, valid, k, ks


@triton.jit
def _store_token(keys_ptr, scores_ptr, stride_k, gi, ni, ne, score, c, valid, cm, WRITE_SCORES: tl.constexpr):
    # one token's [BLOCK_C] scores of the tile: keys (INT_MIN where invalid) where it sees them
    ok = valid & (c < ni)
    st = cm & (c < ne)
    kp = gi * stride_k + c
    tl.store(keys_ptr + kp, tl.where(ok, _float_to_key(score), INT_MIN), mask=st)
    if WRITE_SCORES:
        tl.store(scores_ptr + kp, tl.where(ok, score, float("-inf")), mask=st)


@triton.jit
def _split_token(k, qi, wi, ks, keys_ptr, scores_ptr, stride_k, gi, ni, ne, c, valid, cm,
                 WRITE_SCORES: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    # "keys_split": token i's dot [BLOCK_C, DI] x [DI, BLOCK_H], weighted ReLU, sum over heads
    sd = tl.dot(k, tl.trans(qi), input_precision="ieee" if IEEE else "tf32")
    score = tl.sum(tl.maximum(sd * ks, 0.0) * wi[None, :], 1)
    _store_token(keys_ptr, scores_ptr, stride_k, gi, ni, ne, score, c, valid, cm, WRITE_SCORES)


@triton.jit
def _token_q(q_ptr, stride_qt, stride_qh, w_ptr, stride_wt, t_base, g0, i: tl.constexpr, act, n, HI,
             BLOCK_H: tl.constexpr, DI: tl.constexpr):  # fmt: skip
    # token i of the program: its queries [BLOCK_H, DI], fp32 weights [BLOCK_H] (zeros past HI or
    # off the run), visible count, and the entries to write: the visible count in the current
    # run, 0 off it
    sel = tl.arange(0, act.shape[0]) == i
    ni = tl.sum(tl.where(sel, n, 0), 0)
    ne = tl.sum(tl.where(sel & act, n, 0), 0)  # entries to write: 0 off the run
    offs_h = tl.arange(0, BLOCK_H)
    hm = offs_h < tl.where(ne > 0, HI, 0)
    t = (t_base + g0 + i).to(tl.int64)
    qi = tl.load(q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + tl.arange(0, DI)[None, :], mask=hm[:, None],
                 other=0.0)  # fmt: skip
    wi = tl.load(w_ptr + t * stride_wt + offs_h, mask=hm, other=0.0).to(tl.float32)
    return qi, wi, ni, ne


# the general kernel's argument list, plus FORM; no recompile per block / batch size
@triton.jit(
    do_not_specialize=["t_base", "G", "nsc", "vis_ptr", "r2p_ptr", "stride_r2p", "req_rows_ptr", "token_req_ptr",
                       "E", "hist_ptr", "cnt_ptr", "K"]
)  # fmt: skip
def _score_extend_kernel(
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
    FORM: tl.constexpr = 0,
    FP4_ROWS: tl.constexpr = False,
    IEEE: tl.constexpr = False,
):
    # program (p, s): block rows g0 .. g0 + BLOCK_T - 1, the s-th share of their visible entries
    # (shares are multiples of BLOCK_C, as in the general kernel, so a token's scores do not
    # depend on the split); one pass per run of one request's tokens inside the program.
    g0 = tl.program_id(0) * BLOCK_T
    s = tl.program_id(1)
    offs_t = tl.arange(0, BLOCK_T)
    gl = (g0 + offs_t).to(tl.int64)
    t_ok = gl < G
    n = tl.load(vis_ptr + t_base + gl, mask=t_ok, other=0).to(tl.int32)
    treq = tl.load(token_req_ptr + t_base + gl, mask=t_ok, other=-1)
    offs_d = tl.arange(0, DI)
    offs_c = tl.arange(0, BLOCK_C)
    kv = (kv_ptr, kv_rpp, kv_ps, kv_rs)
    if SHORT:
        zero_long_rows(hist_ptr, cnt_ptr, gl, t_ok, n, K, s, nsc)
    for i in range(0, BLOCK_T):
        gi = g0 + i
        ri = tl.load(token_req_ptr + t_base + gi, mask=gi < G, other=-1)
        rp = tl.load(token_req_ptr + t_base + gi - 1, mask=(i > 0) & (gi < G), other=-2)
        if (gi < G) & (ri != rp):
            act = t_ok & (treq == ri)
            n_run = tl.max(tl.where(act, n, 0), 0)
            row = tl.load(req_rows_ptr + ri).to(tl.int64)
            prow = r2p_ptr + row * stride_r2p
            chunk = tl.cdiv(tl.cdiv(n_run, nsc), BLOCK_C) * BLOCK_C
            c_lo = s * chunk
            c_end = tl.minimum(c_lo + chunk, n_run)
            short = False
            if SHORT:
                short = n_run <= K
            if short:
                short_run_keys(keys_ptr, stride_k, prow, E, gl, n, act, c_lo, c_end, BLOCK_C)
            elif c_lo < c_end:
                if FORM == 0:
                    # qT [DI, BLOCK_T * BLOCK_H] (as q [M, DI]); token-major columns m = t * BLOCK_H + h
                    offs_m = tl.arange(0, BLOCK_T * BLOCK_H)
                    mt = (g0 + offs_m // BLOCK_H).to(tl.int64)
                    mh = offs_m % BLOCK_H
                    m_ok = (mt < G) & (mh < HI)
                    q = tl.load(q_ptr + (t_base + mt)[:, None] * stride_qt + mh[:, None] * stride_qh
                                + offs_d[None, :], mask=m_ok[:, None], other=0.0)  # fmt: skip
                    w = tl.load(w_ptr + (t_base + mt) * stride_wt + mh, mask=m_ok, other=0.0).to(tl.float32)
                    for c0 in range(c_lo, c_end, BLOCK_C):
                        c, cm, valid, k, ks = _key_tile(
                            kv, prow, E, c0, c_end, offs_c, offs_d, CODEC, DI, FP4_ROWS
                        )
                        sd = dot(k.to(q.dtype), tl.trans(q), IEEE)  # [BLOCK_C, BLOCK_T * BLOCK_H] fp32
                        sd = tl.maximum(sd * ks[:, None] * scale, 0.0) * w[None, :]
                        score = tl.trans(tl.sum(tl.reshape(sd, [BLOCK_C, BLOCK_T, BLOCK_H]), 2))
                        seen = c[None, :] < n[:, None]  # score: [BLOCK_T, BLOCK_C]
                        ok = valid[None, :] & seen
                        st = act[:, None] & seen & cm[None, :]
                        kp = gl[:, None] * stride_k + c[None, :]
                        tl.store(keys_ptr + kp, tl.where(ok, _float_to_key(score), INT_MIN), mask=st)
                        if WRITE_SCORES:
                            tl.store(scores_ptr + kp, tl.where(ok, score, float("-inf")), mask=st)
                else:
                    # one [BLOCK_H, DI] query tile per token, loaded before the key loop (Triton
                    # holds no list of tiles: tokens 0..7 are named, the unused ones compiled out)
                    qa = (q_ptr, stride_qt, stride_qh, w_ptr, stride_wt, t_base, g0)
                    q0, w0, n0, a0 = _token_q(*qa, 0, act, n, HI, BLOCK_H, DI)
                    q1, w1, n1, a1 = _token_q(*qa, 1, act, n, HI, BLOCK_H, DI)
                    if BLOCK_T >= 4:
                        q2, w2, n2, a2 = _token_q(*qa, 2, act, n, HI, BLOCK_H, DI)
                        q3, w3, n3, a3 = _token_q(*qa, 3, act, n, HI, BLOCK_H, DI)
                    if BLOCK_T >= 8:
                        q4, w4, n4, a4 = _token_q(*qa, 4, act, n, HI, BLOCK_H, DI)
                        q5, w5, n5, a5 = _token_q(*qa, 5, act, n, HI, BLOCK_H, DI)
                        q6, w6, n6, a6 = _token_q(*qa, 6, act, n, HI, BLOCK_H, DI)
                        q7, w7, n7, a7 = _token_q(*qa, 7, act, n, HI, BLOCK_H, DI)
                    for c0 in range(c_lo, c_end, BLOCK_C):
                        c, cm, valid, k, kscale = _key_tile(
                            kv, prow, E, c0, c_end, offs_c, offs_d, CODEC, DI, FP4_ROWS
                        )
                        k = k.to(q0.dtype)
                        ks = kscale[:, None] * scale
                        out = (keys_ptr, scores_ptr, stride_k)
                        tile = (c, valid, cm, WRITE_SCORES)
                        _split_token(k, q0, w0, ks, *out, g0 + 0, n0, a0, *tile, IEEE)
                        _split_token(k, q1, w1, ks, *out, g0 + 1, n1, a1, *tile, IEEE)
                        if BLOCK_T >= 4:
                            _split_token(k, q2, w2, ks, *out, g0 + 2, n2, a2, *tile, IEEE)
                            _split_token(k, q3, w3, ks, *out, g0 + 3, n3, a3, *tile, IEEE)
                        if BLOCK_T >= 8:
                            _split_token(k, q4, w4, ks, *out, g0 + 4, n4, a4, *tile, IEEE)
                            _split_token(k, q5, w5, ks, *out, g0 + 5, n5, a5, *tile, IEEE)
                            _split_token(k, q6, w6, ks, *out, g0 + 6, n6, a6, *tile, IEEE)
                            _split_token(k, q7, w7, ks, *out, g0 + 7, n7, a7, *tile, IEEE)
