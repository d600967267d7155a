"""Sparse shared-KV (MQA) attention with a per-head sink, over gathered paged-pool rows (Triton).

Op-table entry 5 (``sgl_kernel_v4/ops.py``); math from HF ``eager_attention_forward`` with ``s_aux``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``): per query token ``t`` and head ``h``,
``logits_j = scale * q[t, h] · k_j`` over the gathered keys of every source, softmax over
``[logits..., sinks[h]]`` in fp32, the sink column dropped, ``out = sum_j p_j k_j`` (K = V).

Kernel layout: one program per (token, block of heads, key split). All heads of a token share the
same keys (one KV head), so a program loads a ``[BLOCK_N, D]`` key tile once and uses it for
``BLOCK_H`` heads with two tensor-core dots (``q·kᵀ`` and ``p·k``), flash-attention style online
softmax in base 2. The sink enters as the initial running max / denominator (``m = sink``,
``l = 1``), so a query with no valid key returns exactly 0. At small batch the key range is split
over several programs (flash-decoding); a second kernel merges the partial (max, sum, acc) and
adds the sink.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import num_sms

__all__ = ["sparse_attention"]

_LOG2E = 1.4426950408889634


@triton.jit
def _attend_source(
    q,
    m,
    l_sum,
    acc,
    kv_ptr,
    stride_kv,
    idx_ptr,
    start,
    end,
    scale_log2,
    offs_d,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    d_valid = offs_d < D
    for n0 in range(start, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        nmask = offs_n < end
        idx = tl.load(idx_ptr + offs_n, mask=nmask, other=-1)
        valid = idx >= 0
        k = tl.load(
            kv_ptr + idx[:, None].to(tl.int64) * stride_kv + offs_d[None, :],
            mask=valid[:, None] & d_valid[None, :],
            other=0.0,
        )
        k = k.to(q.dtype)
        qk = tl.dot(q, tl.trans(k))
        qk = tl.where(valid[None, :], qk * scale_log2, float("-inf"))
        m_new = tl.maximum(m, tl.max(qk, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(k.dtype), k)
        m = m_new
    return m, l_sum, acc


@triton.jit
def _sparse_attn_kernel(
    q_ptr,
    stride_qt,
    stride_qh,
    kv0_ptr,
    stride_kv0,
    idx0_ptr,
    stride_i0,
    K0,
    chunk0,
    kv1_ptr,
    stride_kv1,
    idx1_ptr,
    stride_i1,
    K1,
    chunk1,
    sink_ptr,
    out_ptr,
    stride_ot,
    stride_oh,
    part_acc_ptr,
    part_ml_ptr,
    H,
    scale_log2,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HAS_SRC1: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    s = tl.program_id(2)
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    hmask = offs_h < H
    offs_d = tl.arange(0, BLOCK_D)
    dmask = offs_d < D
    q = tl.load(
        q_ptr + t * stride_qt + offs_h[:, None] * stride_qh + offs_d[None, :],
        mask=hmask[:, None] & dmask[None, :],
        other=0.0,
    )
    if NUM_SPLITS == 1:
        m = tl.load(sink_ptr + offs_h, mask=hmask, other=0.0).to(tl.float32) * 1.4426950408889634
        l_sum = tl.full([BLOCK_H], 1.0, tl.float32)
    else:
        m = tl.full([BLOCK_H], -1.0e30, tl.float32)
        l_sum = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)

    start0 = s * chunk0
    end0 = tl.minimum(start0 + chunk0, K0)
    m, l_sum, acc = _attend_source(
        q, m, l_sum, acc, kv0_ptr, stride_kv0, idx0_ptr + t * stride_i0, start0, end0, scale_log2,
        offs_d, D, BLOCK_N,
    )  # fmt: skip
    if HAS_SRC1:
        start1 = s * chunk1
        end1 = tl.minimum(start1 + chunk1, K1)
        m, l_sum, acc = _attend_source(
            q, m, l_sum, acc, kv1_ptr, stride_kv1, idx1_ptr + t * stride_i1, start1, end1, scale_log2,
            offs_d, D, BLOCK_N,
        )  # fmt: skip

    if NUM_SPLITS == 1:
        out = acc / l_sum[:, None]
        tl.store(
            out_ptr + t * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :],
            out.to(out_ptr.dtype.element_ty),
            mask=hmask[:, None] & dmask[None, :],
        )
    else:
        # partials laid out [T, H, NUM_SPLITS, BLOCK_D] and [T, H, NUM_SPLITS, 2]
        row = (t * H + offs_h) * NUM_SPLITS + s
        tl.store(
            part_acc_ptr + row[:, None] * BLOCK_D + offs_d[None, :],
            acc,
            mask=hmask[:, None],
        )
        tl.store(part_ml_ptr + row * 2, m, mask=hmask)
        tl.store(part_ml_ptr + row * 2 + 1, l_sum, mask=hmask)


@triton.jit
def _combine_kernel(
    part_acc_ptr,
    part_ml_ptr,
    sink_ptr,
    out_ptr,
    stride_ot,
    stride_oh,
    H,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs_s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    row = (t * H + h) * NUM_SPLITS + offs_s
    m_s = tl.load(part_ml_ptr + row * 2)
    l_s = tl.load(part_ml_ptr + row * 2 + 1)
    sink = tl.load(sink_ptr + h).to(tl.float32) * 1.4426950408889634
    m = tl.maximum(tl.max(m_s, 0), sink)
    w = tl.exp2(m_s - m)
    denom = tl.sum(l_s * w, 0) + tl.exp2(sink - m)
    acc = tl.load(part_acc_ptr + row[:, None] * BLOCK_D + offs_d[None, :])
    out = tl.sum(acc * w[:, None], 0) / denom
    tl.store(
        out_ptr + t * stride_ot + h * stride_oh + offs_d, out.to(out_ptr.dtype.element_ty), mask=offs_d < D
    )


def _check(q: torch.Tensor, sources: list[tuple[torch.Tensor, torch.Tensor]], sinks: torch.Tensor) -> None:
    if q.dim() != 3:
        raise ValueError(f"q: expected [T, H, D], got shape {tuple(q.shape)}")
    T, H, D = q.shape
    if not 1 <= len(sources) <= 2:
        raise ValueError(f"sources: expected 1 or 2 (kv_flat, idx) pairs, got {len(sources)}")
    for i, (kv, idx) in enumerate(sources):
        if kv.dim() != 2 or kv.shape[1] != D:
            raise ValueError(f"sources[{i}].kv_flat: expected [N, {D}], got {tuple(kv.shape)}")
        if kv.stride(1) != 1:
            raise ValueError(f"sources[{i}].kv_flat: last dim must be contiguous")
        if idx.dim() != 2 or idx.shape[0] != T:
            raise ValueError(f"sources[{i}].idx: expected [{T}, K], got {tuple(idx.shape)}")
        if idx.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"sources[{i}].idx: expected int32/int64, got {idx.dtype}")
    if sinks.shape != (H,):
        raise ValueError(f"sinks: expected [{H}], got {tuple(sinks.shape)}")


def sparse_attention(
    q: torch.Tensor,
    sources: list[tuple[torch.Tensor, torch.Tensor]],
    sinks: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
    block_h: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Sparse MQA attention over gathered pool rows with a per-head sink (op table entry 5).

    Args:
        q: ``[T, H, D]`` bf16/fp16/fp32 queries (last dim contiguous).
        sources: 1 or 2 pairs ``(kv_flat [N_i, D], idx [T, K_i])``; ``kv_flat`` rows are keys and
            values (K = V), ``idx`` int32/int64 flat slot ids, ``-1`` = masked. ``K_i`` may be 0.
        sinks: ``[H]`` fp32 sink logits (not scaled).
        scale: softmax scale applied to ``q·k`` (V4: ``head_dim ** -0.5``).
        out: optional ``[T, H, D]`` output buffer (q's dtype) to write into.
        num_splits: key splits per (token, head block); ``None`` picks one from the batch size.
        block_h / block_n: tile sizes (heads per program, keys per iteration); None = by batch size.

    Returns:
        ``[T, H, D]`` in q's dtype. Rows with no valid key are 0.

    Raises:
        ValueError: a shape, dtype or source count is out of range.
    """
    _check(q, sources, sinks)
    T, H, D = q.shape
    if q.stride(2) != 1:
        q = q.contiguous()
    if out is None:
        out = torch.empty_like(q)
    if T == 0:
        return out
    kv_dtype = sources[0][0].dtype
    if q.dtype != kv_dtype:
        q = q.to(kv_dtype) if kv_dtype in (torch.bfloat16, torch.float16, torch.float32) else q
    block_d = triton.next_power_of_2(D)
    # tiles from the H200 sweep (benchmark/RESULTS.md): prefill wants all 64 heads per program
    # (one gather of the keys per token), decode small head blocks and long key tiles
    if block_h is None:
        block_h = 64 if (T >= 128 and H >= 64) else 16
    if block_n is None:
        block_n = 32 if T >= 128 else (16 if T <= 4 else 64)
    if q.element_size() > 2:  # fp32 tiles: halve to fit shared memory
        block_h, block_n = min(block_h, 32), min(block_n, 16)
    block_h = max(16, min(block_h, triton.next_power_of_2(H)))
    n_hb = triton.cdiv(H, block_h)
    kv0, idx0 = sources[0]
    has1 = len(sources) == 2
    kv1, idx1 = sources[1] if has1 else sources[0]
    idx0 = idx0 if idx0.stride(1) == 1 else idx0.contiguous()
    idx1 = idx1 if idx1.stride(1) == 1 else idx1.contiguous()
    K0 = idx0.shape[1]
    K1 = idx1.shape[1] if has1 else 0
    max_blocks = max(triton.cdiv(K0, block_n), triton.cdiv(K1, block_n), 1)
    if num_splits is None:
        sms = num_sms(q.device)
        want = triton.cdiv(2 * sms, T * n_hb)
        num_splits = 1
        while num_splits * 2 <= min(want, max(max_blocks // 2, 1), 64):
            num_splits *= 2
    num_splits = max(1, min(int(num_splits), 64))
    if num_splits > 1:
        num_splits = triton.next_power_of_2(num_splits)
    chunk0 = triton.cdiv(triton.cdiv(max(K0, 1), num_splits), block_n) * block_n
    chunk1 = triton.cdiv(triton.cdiv(max(K1, 1), num_splits), block_n) * block_n
    if num_splits > 1:
        part_acc = torch.empty((T, H, num_splits, block_d), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((T, H, num_splits, 2), dtype=torch.float32, device=q.device)
    else:
        part_acc = part_ml = out  # unused
    sinks = sinks if sinks.dtype == torch.float32 else sinks.float()
    num_warps = 8 if block_h * block_d >= 16 * 512 else 4
    _sparse_attn_kernel[(T, n_hb, num_splits)](
        q, q.stride(0), q.stride(1),
        kv0, kv0.stride(0), idx0, idx0.stride(0), K0, chunk0,
        kv1, kv1.stride(0), idx1, idx1.stride(0), K1, chunk1,
        sinks, out, out.stride(0), out.stride(1),
        part_acc, part_ml,
        H, float(scale) * _LOG2E,
        D=D, BLOCK_D=block_d, BLOCK_H=block_h, BLOCK_N=block_n, NUM_SPLITS=num_splits, HAS_SRC1=has1,
        num_warps=num_warps, num_stages=2,
    )  # fmt: skip
    if num_splits > 1:
        _combine_kernel[(T, H)](
            part_acc, part_ml, sinks, out, out.stride(0), out.stride(1), H,
            D=D, BLOCK_D=block_d, NUM_SPLITS=num_splits, num_warps=4,
        )  # fmt: skip
    return out
