"""Manifold-constrained hyper-connections (mHC) pre/post, fused per token (Triton).

Op-table entry 7 (``sgl_kernel_v4/ops.py``); math from HF ``DeepseekV4HyperConnection.forward`` and
``DeepseekV4DecoderLayer.forward`` (``transformers/models/deepseek_v4/modeling_deepseek_v4.py``):

``hc_pre``: ``mix = rms(x.flatten()) * (x.flatten() @ fnᵀ)`` (fp32), split into pre / post / comb
logits; ``pre = sigmoid(pre*s0 + b) + eps``, ``post = 2 sigmoid(post*s1 + b)``,
``comb = softmax(comb*s2 + b, -1) + eps`` then Sinkhorn (column-normalise, then
``iters - 1`` x (row, column)); ``collapsed = sum_i pre_i x_i``.
``hc_post``: ``out[k] = post_k * block_out + sum_j comb[j, k] * residual[j]``.
``hc_pre`` optionally applies the block's RMSNorm (``input_layernorm`` / ``post_attention_layernorm``)
to the collapse in the same launch.

``hc_pre`` is two launches: a split-K skinny GEMM (``[T, n*D] x [n*D, (2+n)n]`` in fp32 plus the
sum of squares) spread over many programs, then a finish launch that reduces the partials, runs
the sigmoids / softmax / Sinkhorn on the ``n x n`` matrix in registers and collapses the streams.
Two finish paths:

- ``"decode"`` (``T <= DECODE_MAX_T``, latency-bound): the GEMM runs one ``BLOCK_K`` slice per
  program (as many programs as slices); the finish runs two programs per token, side by side:
  one reduces the ``pre`` partials with a block-wide ``[splits, n]`` tile and collapses (and
  normalises) the token's ``[n, D]`` streams from one tile read once; the other reduces the
  ``post`` / ``comb`` partials and runs the Sinkhorn (tiny ``n x n`` tensors whose reductions stay
  inside a warp).
- ``"legacy"`` (longer batches): a few K slices per program and one single-warp program per token
  doing both (the sum of the split partials in a loop; the fused norm reads the streams twice).
  From ``PREFILL_MIX_MIN_T`` tokens the projection multiplies the bf16 streams as stored by the
  fp32 weights split once into three bf16 terms (``PREFILL_MIX_PREC = "bf16x3"``: three bf16
  tensor-core products, fp32-accurate) instead of converting the streams to fp32 for tf32x3.

``hc_post`` is one elementwise launch (smaller ``D`` tiles at decode sizes, for more programs),
in ``mhc_post.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2, num_sms
from sgl_kernel_v4.triton.mhc_post import _PATHS, DECODE_MAX_T, hc_post

__all__ = ["hc_pre", "hc_post", "DECODE_MAX_T", "PREFILL_MIX_TILE"]

# DECODE_MAX_T: largest token count that takes the ``"decode"`` path of :func:`hc_pre` /
# :func:`hc_post` by default (one bound for both halves, defined with ``hc_post``).
_DECODE_FINISH_WARPS = 8
_DECODE_MAX_BLOCK_D = 4096  # [n, D] streams up to this width: one register tile per token
#: ``(tokens per program, warps)`` of the projection ``_hc_mix_kernel`` for batches of at least
#: :data:`PREFILL_MIX_MIN_T` tokens (prefill chunks; ``hc_pre(mix_tile=...)`` overrides it per call).
#: H200 (``benchmark/mhc_mix_sweep.py --variants``, n 4, D 4,096, bf16): with the bf16x3 product
#: and two K slices per program, ``(64, 4)`` made the whole ``hc_pre`` 2.46x / 2.89x faster than
#: the previous default (``(128, 8)``, tf32x3) at 2,048 / 8,192 tokens (660 -> 269 us,
#: 2,349 -> 814 us, one run; benchmark/RESULTS.md).
PREFILL_MIX_TILE = (64, 4)
#: Fewest tokens that take :data:`PREFILL_MIX_TILE`; smaller batches off the decode path keep
#: ``(16, 4)`` (a 128-token tile would leave most SMs idle there; not measured between 33 and 1,023).
PREFILL_MIX_MIN_T = 1024
#: Product of the projection off the decode path: ``"tf32x3"`` (fp32 streams and weights, three
#: tf32 tensor-core products per tile) or ``"bf16x3"`` (bf16 streams only: the fp32 weights split
#: once into three bf16 terms ``hi + mid + lo`` that carry all 24 significand bits, each product of
#: a bf16 stream value and a term exact in fp32; three bf16 products per tile, the streams read as
#: stored). Both are fp32-accurate up to the order of the sums. Used from :data:`PREFILL_MIX_MIN_T`
#: tokens off the decode path (where it was measured); shorter batches keep tf32x3.
PREFILL_MIX_PREC = "bf16x3"
_MIX_PRECS = ("tf32x3", "bf16x3")
#: (data pointer, version, shape) -> (the source tensor, kept alive so that its address is not
#: reused while cached, and its split)
_SPLIT_CACHE: dict[tuple[int, int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}


def split_bf16x3(fn: torch.Tensor) -> torch.Tensor:
    """``fn`` (fp32, any shape) as three bf16 terms ``[3, *fn.shape]`` with ``hi + mid + lo == fn``
    to fp32 rounding (each term rounds the remainder of the previous ones: 8 + 8 + 8 significand
    bits). Cached per tensor (data pointer, version), so a weight is split once.

    Raises:
        ValueError: ``fn`` not floating point.
    """
    if not fn.is_floating_point():
        raise ValueError(f"fn: expected a floating tensor, got {fn.dtype}")
    key = (fn.data_ptr(), fn._version, tuple(fn.shape))
    got = _SPLIT_CACHE.get(key)
    if got is not None and got[0] is fn:
        return got[1]
    f = fn.float()
    hi = f.to(torch.bfloat16)
    r = f - hi.float()
    mid = r.to(torch.bfloat16)
    lo = (r - mid.float()).to(torch.bfloat16)
    out = torch.stack([hi, mid, lo]).contiguous()
    if len(_SPLIT_CACHE) > 256:
        _SPLIT_CACHE.clear()
    _SPLIT_CACHE[key] = (fn, out)
    return out


# the token count and slice length are runtime values (batch-dependent), so the projection compiles
# one variant per tile, not per multiple-of-16 class of the batch
@triton.jit(do_not_specialize=["T", "chunk"])
def _hc_mix_kernel(
    x_ptr,
    stride_xt,
    fn_ptr,
    part_ptr,
    sq_ptr,
    T,
    K,
    NM,
    chunk,
    BLOCK_T: tl.constexpr,
    BLOCK_K: tl.constexpr,
    NM_PAD: tl.constexpr,
    BF16X3: tl.constexpr = False,
):
    tb = tl.program_id(0)
    s = tl.program_id(1)
    offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    tm = offs_t < T
    offs_m = tl.arange(0, NM_PAD)
    mm = offs_m < NM
    acc = tl.zeros([BLOCK_T, NM_PAD], tl.float32)
    sq = tl.zeros([BLOCK_T], tl.float32)
    k_start = s * chunk
    k_end = tl.minimum(k_start + chunk, K)
    if BF16X3:
        # block pointers (no per-element pointer / mask tensors: those held most of the
        # registers); fn_ptr: [3, NM, K] bf16 terms (split_bf16x3), rows past NM read as zeros.
        # Slices are multiples of BLOCK_K, so only K bounds a tile.
        xb = tl.make_block_ptr(
            x_ptr, (T, K), (stride_xt, 1), (tb * BLOCK_T, k_start), (BLOCK_T, BLOCK_K), (1, 0)
        )
        fb0 = tl.make_block_ptr(fn_ptr + 2 * NM * K, (NM, K), (K, 1), (0, k_start), (NM_PAD, BLOCK_K), (1, 0))
        fb1 = tl.make_block_ptr(fn_ptr + NM * K, (NM, K), (K, 1), (0, k_start), (NM_PAD, BLOCK_K), (1, 0))
        fb2 = tl.make_block_ptr(fn_ptr, (NM, K), (K, 1), (0, k_start), (NM_PAD, BLOCK_K), (1, 0))
        for _ in range(k_start, k_end, BLOCK_K):
            xs = tl.load(xb, boundary_check=(0, 1), padding_option="zero")
            x = xs.to(tl.float32)
            sq += tl.sum(x * x, 1)
            # smallest term first
            acc = tl.dot(xs, tl.trans(tl.load(fb0, boundary_check=(0, 1), padding_option="zero")), acc)
            acc = tl.dot(xs, tl.trans(tl.load(fb1, boundary_check=(0, 1), padding_option="zero")), acc)
            acc = tl.dot(xs, tl.trans(tl.load(fb2, boundary_check=(0, 1), padding_option="zero")), acc)
            xb = tl.advance(xb, (0, BLOCK_K))
            fb0 = tl.advance(fb0, (0, BLOCK_K))
            fb1 = tl.advance(fb1, (0, BLOCK_K))
            fb2 = tl.advance(fb2, (0, BLOCK_K))
    else:
        for k0 in range(k_start, k_end, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            km = offs_k < k_end
            xs = tl.load(
                x_ptr + offs_t[:, None].to(tl.int64) * stride_xt + offs_k[None, :],
                mask=tm[:, None] & km[None, :],
                other=0.0,
            )
            x = xs.to(tl.float32)
            sq += tl.sum(x * x, 1)
            f_off = offs_m[None, :] * K + offs_k[:, None]
            f_m = mm[None, :] & km[:, None]
            f = tl.load(fn_ptr + f_off, mask=f_m, other=0.0)
            acc = tl.dot(x, f, acc, input_precision="tf32x3")  # ~fp32 accuracy on tensor cores
    tl.store(
        part_ptr + (s * T + offs_t[:, None]) * NM_PAD + offs_m[None, :],
        acc,
        mask=tm[:, None],
    )
    tl.store(sq_ptr + s * T + offs_t, sq, mask=tm)


@triton.jit
def _sinkhorn(comb_w, base_ptr, s2, eps, iters, N: tl.constexpr):
    """``[N, N]`` comb logits (rstd applied) -> ``softmax(comb_w * s2 + b, -1) + eps``, column
    normalised, then ``iters - 1`` x (row, column) normalisations (HF ``hc_split_sinkhorn``)."""
    offs_n = tl.arange(0, N)
    logits = comb_w * s2 + tl.load(base_ptr + 2 * N + offs_n[:, None] * N + offs_n[None, :])
    logits = logits - tl.max(logits, 1)[:, None]
    e = tl.exp(logits)
    comb = e / tl.sum(e, 1)[:, None] + eps
    comb = comb / (tl.sum(comb, 0)[None, :] + eps)
    for _ in range(iters - 1):
        comb = comb / (tl.sum(comb, 1)[:, None] + eps)
        comb = comb / (tl.sum(comb, 0)[None, :] + eps)
    return comb


@triton.jit
def _collapse_loop(
    x_row,
    stride_xn,
    out_row,
    nw_ptr,
    pre,
    D,
    nw_eps,
    N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_NORM: tl.constexpr,
):
    """``out_row[:D] = sum_i pre_i x_row[i, :D]`` in ``BLOCK_D`` slices; with ``HAS_NORM`` the
    RMSNorm (``nw_ptr``, ``nw_eps``) of the out-dtype-rounded collapse: a first pass for its sum of
    squares, then the collapse is recomputed (bit-identical) and scaled (no round trip to memory)."""
    offs_n = tl.arange(0, N)
    if HAS_NORM:
        ssq = tl.zeros([BLOCK_D], tl.float32)
        for d0 in range(0, D, BLOCK_D):
            offs_d = d0 + tl.arange(0, BLOCK_D)
            dm = offs_d < D
            xs = tl.load(x_row + offs_n[:, None] * stride_xn + offs_d[None, :], mask=dm[None, :], other=0.0)
            col = tl.sum(pre[:, None] * xs.to(tl.float32), 0).to(out_row.dtype.element_ty).to(tl.float32)
            ssq += col * col
        rstd = tl.rsqrt(tl.sum(ssq, 0) / D + nw_eps)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        dm = offs_d < D
        xs = tl.load(x_row + offs_n[:, None] * stride_xn + offs_d[None, :], mask=dm[None, :], other=0.0)
        col = tl.sum(pre[:, None] * xs.to(tl.float32), 0)
        if HAS_NORM:
            col = col.to(out_row.dtype.element_ty).to(tl.float32) * rstd
            col = col * tl.load(nw_ptr + offs_d, mask=dm, other=0.0)
        tl.store(out_row + offs_d, col.to(out_row.dtype.element_ty), mask=dm)


@triton.jit(do_not_specialize=["S"])  # the split count follows the batch size
def _hc_finish_kernel(
    x_ptr,
    stride_xt,
    stride_xn,
    part_ptr,
    sq_ptr,
    base_ptr,
    scale_ptr,
    collapsed_ptr,
    stride_ct,
    post_ptr,
    comb_ptr,
    nw_ptr,
    T,
    S,
    K,
    D,
    iters,
    eps,
    norm_eps,
    nw_eps,
    N: tl.constexpr,
    NM_PAD: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_NORM: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    offs_n = tl.arange(0, N)
    cidx = 2 * N + offs_n[:, None] * N + offs_n[None, :]  # [N, N]
    # the S split partials summed in a loop (a runtime count: one compiled kernel for every batch)
    sq = tl.load(sq_ptr + t)
    prow = part_ptr + t * NM_PAD
    pre_w = tl.load(prow + offs_n)
    post_w = tl.load(prow + N + offs_n)
    comb_w = tl.load(prow + cidx)
    for i in range(1, S):
        sq += tl.load(sq_ptr + i * T + t)
        prow = part_ptr + (i * T + t) * NM_PAD
        pre_w += tl.load(prow + offs_n)
        post_w += tl.load(prow + N + offs_n)
        comb_w += tl.load(prow + cidx)
    rstd = tl.rsqrt(sq / K + norm_eps)
    pre_w = pre_w * rstd
    post_w = post_w * rstd
    comb_w = comb_w * rstd
    s0 = tl.load(scale_ptr)
    s1 = tl.load(scale_ptr + 1)
    s2 = tl.load(scale_ptr + 2)
    pre = tl.sigmoid(pre_w * s0 + tl.load(base_ptr + offs_n)) + eps
    post = 2.0 * tl.sigmoid(post_w * s1 + tl.load(base_ptr + N + offs_n))
    comb = _sinkhorn(comb_w, base_ptr, s2, eps, iters, N)
    tl.store(post_ptr + t * N + offs_n, post)
    tl.store(comb_ptr + t * N * N + offs_n[:, None] * N + offs_n[None, :], comb)
    _collapse_loop(
        x_ptr + t * stride_xt,
        stride_xn,
        collapsed_ptr + t * stride_ct,
        nw_ptr,
        pre,
        D,
        nw_eps,
        N,
        BLOCK_D,
        HAS_NORM,
    )


@triton.jit(do_not_specialize=["T", "S"])  # T and the split count follow the batch size
def _hc_finish_decode_kernel(
    x_ptr,
    stride_xt,
    stride_xn,
    part_ptr,
    sq_ptr,
    base_ptr,
    scale_ptr,
    collapsed_ptr,
    stride_ct,
    post_ptr,
    comb_ptr,
    nw_ptr,
    T,
    S,
    K,
    D,
    iters,
    eps,
    norm_eps,
    nw_eps,
    N: tl.constexpr,
    NM_PAD: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    ONE_TILE: tl.constexpr,
    HAS_NORM: tl.constexpr,
):
    # grid (T, 2): program (t, 0) collapses token t, program (t, 1) computes its post / comb
    t = tl.program_id(0).to(tl.int64)
    offs_n = tl.arange(0, N)
    sqa = tl.zeros([BLOCK_S], tl.float32)
    if tl.program_id(1) == 0:
        out_row = collapsed_ptr + t * stride_ct
        offs_d = tl.arange(0, BLOCK_D)
        dm = offs_d < D
        if ONE_TILE:  # the whole [N, D] streams in one tile, read once, issued before the partials
            xs = tl.load(
                x_ptr + t * stride_xt + offs_n[:, None] * stride_xn + offs_d[None, :],
                mask=dm[None, :],
                other=0.0,
            )
        acc = tl.zeros([BLOCK_S, N], tl.float32)
        for s0 in range(0, S, BLOCK_S):
            offs_s = s0 + tl.arange(0, BLOCK_S)
            sm = offs_s < S
            row = (offs_s * T + t) * NM_PAD
            acc += tl.load(part_ptr + row[:, None] + offs_n[None, :], mask=sm[:, None], other=0.0)
            sqa += tl.load(sq_ptr + offs_s * T + t, mask=sm, other=0.0)
        rstd = tl.rsqrt(tl.sum(sqa, 0) / K + norm_eps)
        pre = tl.sigmoid(tl.sum(acc, 0) * rstd * tl.load(scale_ptr) + tl.load(base_ptr + offs_n)) + eps
        if ONE_TILE:
            col = tl.sum(pre[:, None] * xs.to(tl.float32), 0)
            if HAS_NORM:
                col = col.to(out_row.dtype.element_ty).to(tl.float32)
                col = col * tl.rsqrt(tl.sum(col * col, 0) / D + nw_eps)
                col = col * tl.load(nw_ptr + offs_d, mask=dm, other=0.0)
            tl.store(out_row + offs_d, col.to(out_row.dtype.element_ty), mask=dm)
        else:
            _collapse_loop(
                x_ptr + t * stride_xt, stride_xn, out_row, nw_ptr, pre, D, nw_eps, N, BLOCK_D, HAS_NORM
            )
    else:
        acc_p = tl.zeros([BLOCK_S, N], tl.float32)
        acc_c = tl.zeros([BLOCK_S, N, N], tl.float32)
        cidx = 2 * N + offs_n[:, None] * N + offs_n[None, :]  # [N, N]
        for s0 in range(0, S, BLOCK_S):
            offs_s = s0 + tl.arange(0, BLOCK_S)
            sm = offs_s < S
            row = (offs_s * T + t) * NM_PAD
            acc_p += tl.load(part_ptr + row[:, None] + N + offs_n[None, :], mask=sm[:, None], other=0.0)
            acc_c += tl.load(
                part_ptr + row[:, None, None] + cidx[None, :, :], mask=sm[:, None, None], other=0.0
            )
            sqa += tl.load(sq_ptr + offs_s * T + t, mask=sm, other=0.0)
        rstd = tl.rsqrt(tl.sum(sqa, 0) / K + norm_eps)
        post = 2.0 * tl.sigmoid(
            tl.sum(acc_p, 0) * rstd * tl.load(scale_ptr + 1) + tl.load(base_ptr + N + offs_n)
        )
        comb = _sinkhorn(tl.sum(acc_c, 0) * rstd, base_ptr, tl.load(scale_ptr + 2), eps, iters, N)
        tl.store(post_ptr + t * N + offs_n, post)
        tl.store(comb_ptr + t * N * N + offs_n[:, None] * N + offs_n[None, :], comb)


def hc_pre(
    x: torch.Tensor,
    fn: torch.Tensor,
    base: torch.Tensor,
    scale: torch.Tensor,
    sinkhorn_iters: int,
    eps: float,
    norm_eps: float,
    *,
    splits: int | None = None,
    norm_weight: torch.Tensor | None = None,
    norm_weight_eps: float = 0.0,
    path: str = "auto",
    mix_tile: tuple[int, int] | None = None,
    mix_prec: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mHC pre: collapse ``n`` residual streams and compute the post / comb weights (op table entry 7).

    Args:
        x: ``[T, n, D]`` streams (contiguous per token; n a power of 2, V4: 4).
        fn: ``[(2+n)*n, n*D]`` fp32 projection; base: ``[(2+n)*n]`` fp32; scale: ``[3]`` fp32.
        sinkhorn_iters: Sinkhorn iterations (V4: 20; >= 1).
        eps: ``hc_eps`` (added to pre / comb and the Sinkhorn denominators).
        norm_eps: RMSNorm epsilon of the flattened streams (``rms_norm_eps``).
        splits: K splits of the projection (None: one 128-wide slice per program on the decode
            path, else enough to fill the GPU).
        norm_weight: optional ``[D]`` fp32 weight of the block's RMSNorm, fused into the collapse
            (``collapsed`` then equals ``rms_norm(collapse, norm_weight, norm_weight_eps)`` of the
            reference, up to the order of its sum of squares); norm_weight_eps: its epsilon.
        path: ``"auto"`` (``"decode"`` for ``T <= DECODE_MAX_T``, else ``"legacy"``), ``"decode"``
            or ``"legacy"`` (see the module docstring; the results agree to fp32 rounding: only
            the order of the split sums differs).
        mix_tile: ``(tokens per program, warps)`` of the projection kernel ``_hc_mix_kernel``
            (tokens a power of two >= 16); ``None``: :data:`PREFILL_MIX_TILE` off the decode path
            from :data:`PREFILL_MIX_MIN_T` tokens, else ``(16, 4)``.
        mix_prec: the projection's product off the decode path, ``"tf32x3"`` or ``"bf16x3"``
            (:data:`PREFILL_MIX_PREC`; ``None``: that default). ``"bf16x3"`` needs bf16 streams
            and falls back to ``"tf32x3"`` for others; the decode path always uses ``"tf32x3"``.

    Returns:
        ``(collapsed [T, D] x.dtype, post [T, n] fp32, comb [T, n, n] fp32)``.

    Raises:
        ValueError: shapes out of range, ``sinkhorn_iters < 1``, an unknown ``path`` or a
            ``mix_tile`` out of range, an unknown ``mix_prec``.
    """
    if x.dim() != 3:
        raise ValueError(f"x: expected [T, n, D], got {tuple(x.shape)}")
    T, n, D = x.shape
    if n & (n - 1):
        raise ValueError(f"x: n (hc_mult) must be a power of 2, got {n}")
    NM, K = (2 + n) * n, n * D
    if fn.shape != (NM, K):
        raise ValueError(f"fn: expected [{NM}, {K}], got {tuple(fn.shape)}")
    if base.shape != (NM,) or scale.shape != (3,):
        raise ValueError(f"base/scale: expected [{NM}] / [3], got {tuple(base.shape)} / {tuple(scale.shape)}")
    if sinkhorn_iters < 1:
        raise ValueError(f"sinkhorn_iters: must be >= 1, got {sinkhorn_iters}")
    if norm_weight is not None and norm_weight.shape != (D,):
        raise ValueError(f"norm_weight: expected [{D}], got {tuple(norm_weight.shape)}")
    if path not in _PATHS:
        raise ValueError(f"path: expected one of {_PATHS}, got {path!r}")
    if mix_prec is not None and mix_prec not in _MIX_PRECS:
        raise ValueError(f"mix_prec: expected one of {_MIX_PRECS}, got {mix_prec!r}")
    decode = path == "decode" or (path == "auto" and T <= DECODE_MAX_T)
    if not (x.stride(2) == 1 and x.stride(1) == D):
        x = x.contiguous()
    fn = fn.float().contiguous()
    base = base.float().contiguous()
    scale = scale.float().contiguous()
    dev = x.device
    collapsed = torch.empty((T, D), dtype=x.dtype, device=dev)
    post = torch.empty((T, n), dtype=torch.float32, device=dev)
    comb = torch.empty((T, n, n), dtype=torch.float32, device=dev)
    if T == 0:
        return collapsed, post, comb
    if mix_tile is None:
        mix_tile = PREFILL_MIX_TILE if (not decode and T >= PREFILL_MIX_MIN_T) else (16, 4)
    block_t, mix_warps = mix_tile
    if block_t < 16 or block_t & (block_t - 1) or mix_warps < 1 or mix_warps & (mix_warps - 1):
        raise ValueError(f"mix_tile: expected (a power of two >= 16, a power of two), got {mix_tile}")
    block_k = 128
    nm_pad = max(16, next_power_of_2(NM))
    n_tb = cdiv(T, block_t)
    prefill = not decode and T >= PREFILL_MIX_MIN_T
    prec = mix_prec or (PREFILL_MIX_PREC if prefill else "tf32x3")
    bf16x3 = not decode and x.dtype == torch.bfloat16 and prec == "bf16x3"
    if splits is None:
        # decode: one K slice per program (a single load round; the finish reduces the partials
        # with a block-wide tile); the bf16x3 product: two slices per program (PREFILL_MIX_PREC);
        # other longer batches: <= 4 slices per program
        if decode:
            splits = cdiv(K, block_k)
        elif bf16x3:
            splits = max(1, K // (2 * block_k))
        else:
            splits = max(1, min(cdiv(2 * num_sms(dev), n_tb), K // (4 * block_k)))
    splits = max(1, min(int(splits), cdiv(K, block_k)))
    chunk = cdiv(cdiv(K, splits), block_k) * block_k
    splits = cdiv(K, chunk)
    part = torch.empty((splits, T, nm_pad), dtype=torch.float32, device=dev)
    sq = torch.empty((splits, T), dtype=torch.float32, device=dev)
    _hc_mix_kernel[(n_tb, splits)](
        x,
        x.stride(0),
        split_bf16x3(fn) if bf16x3 else fn,
        part,
        sq,
        T,
        K,
        NM,
        chunk,
        BLOCK_T=block_t,
        BLOCK_K=block_k,
        NM_PAD=nm_pad,
        BF16X3=bf16x3,
        num_warps=mix_warps,
    )
    nw = norm_weight.float().contiguous() if norm_weight is not None else base
    head = (x, x.stride(0), x.stride(1), part, sq, base, scale, collapsed, collapsed.stride(0), post, comb, nw,
            T, splits, K, D, int(sinkhorn_iters), float(eps), float(norm_eps), float(norm_weight_eps))  # fmt: skip
    if decode:
        block_d = min(_DECODE_MAX_BLOCK_D, next_power_of_2(D))
        _hc_finish_decode_kernel[(T, 2)](
            *head, N=n, NM_PAD=nm_pad, BLOCK_S=min(128, next_power_of_2(splits)), BLOCK_D=block_d,
            ONE_TILE=block_d >= D, HAS_NORM=norm_weight is not None, num_warps=_DECODE_FINISH_WARPS,
        )  # fmt: skip
    else:
        _hc_finish_kernel[(T,)](
            *head, N=n, NM_PAD=nm_pad, BLOCK_D=min(512, next_power_of_2(D)), HAS_NORM=norm_weight is not None,
            num_warps=1,  # the n x n Sinkhorn reductions stay inside one warp (no barriers)
        )  # fmt: skip
    return collapsed, post, comb
