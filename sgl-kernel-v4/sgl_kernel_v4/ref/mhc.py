"""Manifold-constrained hyper-connection (mHC) references (paper §2.2; HF ``DeepseekV4HyperConnection``)."""

from __future__ import annotations

import torch

from .norm import rms_norm


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    """fp32 sigmoid evaluated in float64, so that a row's result does not depend on the batch.

    torch's CPU kernels evaluate the last ``numel % (2 * vector width)`` elements of a tensor with
    scalar code whose ``exp`` differs from the vectorised one by an ulp; on these ``[T, n]`` tensors
    (``n = 4``) which rows fall in that tail depends on ``T``. The float64 results of the two paths
    round to the same fp32 value (except about once in 10^8).
    """
    return torch.sigmoid(x.double()).to(x.dtype)


def hc_pre(
    x: torch.Tensor,
    fn: torch.Tensor,
    base: torch.Tensor,
    scale: torch.Tensor,
    sinkhorn_iters: int,
    eps: float,
    norm_eps: float,
    *,
    norm_weight: torch.Tensor | None = None,
    norm_weight_eps: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compute the mHC mixing weights and collapse the ``n`` residual streams.

    Args:
        x: ``[T, n, D]`` residual streams.
        fn: ``[(2+n)*n, n*D]`` fp32 projection; base: ``[(2+n)*n]``; scale: ``[3]`` (pre, post, comb).
        sinkhorn_iters: Sinkhorn-Knopp iterations projecting ``comb`` to a doubly-stochastic matrix.
        eps: ``hc_eps`` (added to ``pre``/``comb`` and to the Sinkhorn denominators).
        norm_eps: RMSNorm epsilon of the unweighted input norm.
        norm_weight: optional ``[D]`` fp32 weight of the RMSNorm that follows in the block (HF
            ``input_layernorm`` / ``post_attention_layernorm``): then ``collapsed`` is returned
            normalised, ``rms_norm(collapsed, norm_weight, norm_weight_eps)`` (:func:`.norm.rms_norm`
            of the x.dtype-rounded collapse).
        norm_weight_eps: that norm's epsilon.

    Returns:
        ``(collapsed [T, D] in x.dtype, post [T, n] fp32, comb [T, n, n] fp32)`` where
        ``pre = sigmoid(.) + eps``, ``post = 2 sigmoid(.)``, ``comb = sinkhorn(softmax(.) + eps)``
        and ``collapsed = sum_i pre_i x_i`` (normalised when ``norm_weight`` is given).
    """
    T, n, D = x.shape
    flat = rms_norm(x.reshape(T, n * D).float(), None, norm_eps)
    # the [T, n*D] x [n*D, (2+n)n] projection in float64, rounded once: the CPU GEMM picks its
    # blocking by T, and in float32 that made a row's mix depend on the batch it is computed in
    mix = (flat.double() @ fn.double().t()).float()
    pre_w, post_w, comb_w = mix.split([n, n, n * n], dim=-1)
    pre_b, post_b, comb_b = base.float().split([n, n, n * n])
    s = scale.float()
    pre = _sigmoid(pre_w * s[0] + pre_b) + eps
    post = 2 * _sigmoid(post_w * s[1] + post_b)
    comb = torch.softmax(comb_w.view(T, n, n) * s[2] + comb_b.view(n, n), dim=-1) + eps
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)
    collapsed = (pre.unsqueeze(-1) * x).sum(dim=1).to(x.dtype)
    if norm_weight is not None:
        collapsed = rms_norm(collapsed, norm_weight, norm_weight_eps)
    return collapsed, post, comb


def hc_post(
    block_out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor
) -> torch.Tensor:
    """Expand a block output back to ``n`` streams and mix in the residual: ``post ⊗ out + combᵀ · residual``.

    Args:
        block_out: ``[T, D]``; residual: ``[T, n, D]``; post: ``[T, n]``; comb: ``[T, n, n]``.

    Returns:
        ``[T, n, D]`` in ``residual.dtype`` (HF ``DeepseekV4DecoderLayer.forward``).
    """
    dt = residual.dtype
    return post.to(dt).unsqueeze(-1) * block_out.unsqueeze(-2) + torch.matmul(
        comb.to(dt).transpose(-1, -2), residual
    )


def hc_head(
    x: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, eps: float, norm_eps: float
) -> torch.Tensor:
    """Final hyper-head collapse of the streams (HF ``DeepseekV4HyperHead``).

    Args:
        x: ``[T, n, D]``; fn: ``[n, n*D]``; base: ``[n]``; scale: ``[1]``.

    Returns:
        ``[T, D]`` in ``x.dtype``: ``sum_i (sigmoid(mix_i * scale + base_i) + eps) x_i``.
    """
    T, n, D = x.shape
    flat = rms_norm(x.reshape(T, n * D).float(), None, norm_eps)
    # the [T, n*D] x [n*D, (2+n)n] projection in float64, rounded once: the CPU GEMM picks its
    # blocking by T, and in float32 that made a row's mix depend on the batch it is computed in
    mix = (flat.double() @ fn.double().t()).float()
    pre = _sigmoid(mix * scale.float() + base.float()) + eps
    return (pre.unsqueeze(-1) * x).sum(dim=1).to(x.dtype)
