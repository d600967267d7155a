"""mHC post (Triton): expand a block's output back into the ``n`` residual streams, fused per token.

Op-table entry 7 (``sgl_kernel_v4/ops.py``), the second half of ``mhc.py``; math from HF
``DeepseekV4DecoderLayer.forward`` (``transformers/models/deepseek_v4/modeling_deepseek_v4.py``):
``out[k] = post_k * block_out + sum_j comb[j, k] * residual[j]`` in fp32, stored in the residual's
dtype. One elementwise launch over ``(tokens, D tiles)``; decode-sized batches use narrower ``D``
tiles for more programs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

__all__ = ["hc_post"]

#: Largest token count that takes the ``"decode"`` tiling by default (the same bound as ``hc_pre``).
DECODE_MAX_T = 32
_PATHS = ("auto", "decode", "legacy")


@triton.jit
def _hc_post_kernel(
    o_ptr,
    stride_ot,
    res_ptr,
    stride_rt,
    stride_rn,
    post_ptr,
    comb_ptr,
    out_ptr,
    stride_yt,
    stride_yn,
    D,
    N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    dm = offs_d < D
    offs_n = tl.arange(0, N)
    res = tl.load(
        res_ptr + t * stride_rt + offs_n[:, None] * stride_rn + offs_d[None, :], mask=dm[None, :], other=0.0
    ).to(tl.float32)
    comb = tl.load(comb_ptr + t * N * N + offs_n[:, None] * N + offs_n[None, :]).to(tl.float32)  # [j, k]
    post = tl.load(post_ptr + t * N + offs_n).to(tl.float32)
    o = tl.load(o_ptr + t * stride_ot + offs_d, mask=dm, other=0.0).to(tl.float32)
    mix = tl.sum(comb[:, :, None] * res[:, None, :], 0)  # [k, BLOCK_D]
    y = post[:, None] * o[None, :] + mix
    tl.store(
        out_ptr + t * stride_yt + offs_n[:, None] * stride_yn + offs_d[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=dm[None, :],
    )


def hc_post(
    block_out: torch.Tensor,
    residual: torch.Tensor,
    post: torch.Tensor,
    comb: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    path: str = "auto",
) -> torch.Tensor:
    """mHC post: ``out[t, k] = post[t, k] * block_out[t] + sum_j comb[t, j, k] * residual[t, j]``.

    Args:
        block_out: ``[T, D]``; residual: ``[T, n, D]`` (last dims contiguous); post: ``[T, n]``;
        comb: ``[T, n, n]`` (contiguous), all math in fp32.
        out: optional ``[T, n, D]`` output (residual's dtype; may alias ``residual``; a last dim
            with a stride other than 1 is written through a contiguous copy).
        path: ``"auto"`` (``"decode"`` for ``T <= DECODE_MAX_T``), ``"decode"`` (256-wide ``D``
            tiles: more programs for few tokens) or ``"legacy"`` (1024-wide tiles); the same
            arithmetic either way.

    Returns:
        ``[T, n, D]`` in residual's dtype.

    Raises:
        ValueError: shapes out of range, an ``out`` of another shape or dtype, or an unknown
            ``path``.
    """
    if residual.dim() != 3:
        raise ValueError(f"residual: expected [T, n, D], got {tuple(residual.shape)}")
    T, n, D = residual.shape
    if n & (n - 1):
        raise ValueError(f"residual: n must be a power of 2, got {n}")
    if block_out.shape != (T, D) or block_out.stride(1) != 1 or residual.stride(2) != 1:
        raise ValueError(
            f"block_out: expected [{T}, {D}] (last dims contiguous), got {tuple(block_out.shape)}"
        )
    if post.shape != (T, n) or comb.shape != (T, n, n):
        raise ValueError(f"post/comb: expected [{T}, {n}] / [{T}, {n}, {n}]")
    if path not in _PATHS:
        raise ValueError(f"path: expected one of {_PATHS}, got {path!r}")
    decode = path == "decode" or (path == "auto" and T <= DECODE_MAX_T)
    post = post.contiguous()
    comb = comb.contiguous()
    if out is not None:
        if out.shape != residual.shape or out.dtype != residual.dtype:
            raise ValueError(
                f"out: expected {tuple(residual.shape)} {residual.dtype}, got {tuple(out.shape)} {out.dtype}"
            )
        if out.stride(2) != 1 and T * n * D:
            # the kernel writes channels at unit stride: go through a contiguous buffer
            return out.copy_(hc_post(block_out, residual, post, comb, path=path))
    else:
        out = torch.empty_like(residual, memory_format=torch.contiguous_format)
    if T == 0:
        return out
    block_d = min(256 if decode else 1024, next_power_of_2(D))
    _hc_post_kernel[(T, cdiv(D, block_d))](
        block_out, block_out.stride(0), residual, residual.stride(0), residual.stride(1), post, comb,
        out, out.stride(0), out.stride(1), D, N=n, BLOCK_D=block_d, num_warps=4,
    )  # fmt: skip
    return out
