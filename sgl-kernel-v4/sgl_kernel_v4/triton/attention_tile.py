"""One key tile of the sparse attention (:mod:`sgl_kernel_v4.triton.attention`): logits, online
softmax update and the value product, in three operand orientations (``KEYS_ON_M``).

Per tile of ``BLOCK_N`` keys ``k [BLOCK_N, D]`` (K = V, dequantized by ``kv_codec.load_main``),
for ``BLOCK_H`` heads of one token: ``s = scale' q·kᵀ`` (base 2), ``m' = max(m, max_j s)``,
``l' = l 2^(m - m') + sum_j 2^(s - m')``, ``acc' = acc 2^(m - m') + 2^(s - m')·v`` (flash-attention's
online softmax; the sink enters the kernel as the initial ``(m, l)``).

* ``KEYS_ON_M = 0`` (the default): heads on the tensor-core instruction's M: ``s [BLOCK_H,
  BLOCK_N] = q·kᵀ``, ``acc [BLOCK_H, D] += p·v``.
* ``KEYS_ON_M = 1``: key rows on M: ``sᵀ [BLOCK_N, BLOCK_H] = k·qᵀ`` (softmax over axis 0),
  ``accᵀ [D, BLOCK_H] += vᵀ·pᵀ`` (``pᵀ`` goes through shared memory as the B operand).
* ``KEYS_ON_M = 2``: as 1, the entry rows read as two halves of ``D`` (``s = k_lo·q_loᵀ +
  k_hi·q_hiᵀ``, two accumulators ``[D / 2, BLOCK_H]``), so an unpipelined tile (one stage) holds
  half of it in registers at a time.

Compile statistics (Triton 3.6, sm_90, 8 warps; the CSA launch of
``benchmark/attention_extend_sweep.py`` as Triton specialises it: bf16 pool of 512-d rows, one
split; ``test_kernels_compile.py::test_attention_keys_on_m_compiles_for_sm90`` prints them).
Registers and stack (spilled) bytes from ``cuobjdump -res-usage``; HGMMA per key tile and
warpgroup, and SASS instructions of the entry loop per key (per 64 heads: twice a 32-head
program's), from ``cuobjdump -sass``; "operand reads": shared-memory bytes the HGMMAs read per
key (64 heads, both dots); "tensor work": executed over useful products. Not timings:
``attention_extend_sweep.py --qk-once`` times these settings against the default.

| setting (heads x keys, stages) | regs | stack B | smem KiB | HGMMA per tile and warpgroup | SASS / key | operand reads / key | tensor work |
|---|---:|---:|---:|---|---:|---:|---:|
| default 64 x 32, 2 | 255 | 120 | 128.4 | 64 m64n16k16 + 2 m64n256k16 | 40.7 | 11.0 KiB | 1.5x |
| default 64 x 32, 1 (control) | 255 | 704 | 96.0 | same | 46.6 | 11.0 KiB | 1.5x |
| ``KEYS_ON_M`` 1, 64 x 128, 1 | 255 | 800 | 208.0 | 32 + 32 m64n64k16 | 22.2 | 4.0 KiB | 1.0x |
| ``KEYS_ON_M`` 2, 64 x 128, 1 | 255 | 464 | 208.0 | 32 + 32 m64n64k16 | 17.4 | 4.0 KiB | 1.0x |
| ``KEYS_ON_M`` 1, 32 x 128, 1 | 255 | 152 | 168.0 | 32 + 32 m64n32k16 | 35.1 | 6.0 KiB | 1.0x |
| ``KEYS_ON_M`` 2, 32 x 128, 1 | 255 | 96 | 168.0 | 32 + 32 m64n32k16 | 26.8 | 6.0 KiB | 1.0x |

In the default tile both warpgroups compute the whole ``[64, 32]`` logit tile: Triton lays a dot
whose result feeds another dot (flash attention's chain) with every warp along M (TTGIR
``#mma`` ``warpsPerCTA = [8, 1]``, ``instrShape [16, 16, 16]``), and M is 64 heads, one
warpgroup's height, so the second warpgroup repeats the first one's ``q·kᵀ`` (and its softmax);
``p·v`` (``warpsPerCTA = [4, 2]``, ``instrShape [16, 256, 16]``) splits the 512 value columns
between the warpgroups without repetition, ``p`` a register operand (8 ``F2FP`` per tile, no
shared-memory trip). Each of the logits' 64 HGMMAs (2 x 16 keys x 32 k-steps) re-reads a 2 KiB
slice of ``q`` from shared memory for an N = 16 product: 10 of the 11 KiB per key. The row
softmax costs 8 ``SHFL`` per tile. The ``[64, 512]`` fp32 accumulator takes 128 of the 255
registers. (A 2-token, 128-row program would give each warpgroup a token's rows, but its
``[128, 512]`` accumulator is the whole register file, and CSA tokens select different keys, so
the two tokens' logits are not one product.) With the keys on M and 128-key tiles each
warpgroup owns 64 keys' logits and a quarter-interleaved half of the value rows (``warpsPerCTA =
[8, 1]`` over 128 key rows and over 512 value rows): no repetition, N = 64 products, at the cost
of softmax reductions across warps (108 ``SHFL`` and shared memory behind barriers: 9-10 ``BAR``
per tile), ``pᵀ`` staged through shared memory (``STSM``) as the value product's B operand, and
one pipeline stage (two 128-key tiles, 256 KiB, exceed the 227 KiB a block may use), whose tile
passes through registers: the spills (the default tile spills 704 B at one stage too).
``KEYS_ON_M = 2`` holds half the tile at a time (464 B instead of 800 B). The 32-head forms spill
least, but a token's two head blocks gather its keys twice.
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_kernel_v4.triton._dot import dot, dot_acc
from sgl_kernel_v4.triton.kv_codec import load_main

__all__ = ["attend_tile"]


@triton.jit
def _heads_on_m(q, m, l_sum, acc, kv_ptr, off, valid, offs_d, offs_dv, scale_log2, CODEC, D, NOPE, ALIGN,
                DV_SPLIT: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    k = load_main(kv_ptr, off, valid, offs_d, CODEC, D, NOPE, ALIGN).to(q.dtype)
    qk = dot(q, tl.trans(k), IEEE)
    qk = tl.where(valid[None, :], qk * scale_log2, float("-inf"))
    m_new = tl.maximum(m, tl.max(qk, 1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(qk - m_new[:, None])
    l_sum = l_sum * alpha + tl.sum(p, 1)
    if DV_SPLIT == 1:
        v = k
    else:  # this program's share of the value columns (K = V), re-read from L1 / L2
        v = load_main(kv_ptr, off, valid, offs_dv, CODEC, D, NOPE, ALIGN).to(q.dtype)
    acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, IEEE)
    return m_new, l_sum, acc


@triton.jit
def _keys_on_m(q_t, m, l_sum, acc_t, kv_ptr, off, valid, offs_d, offs_dv, scale_log2, CODEC, D, NOPE, ALIGN,
               DV_SPLIT: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    k = load_main(kv_ptr, off, valid, offs_d, CODEC, D, NOPE, ALIGN).to(q_t.dtype)
    s_t = dot(k, q_t, IEEE)
    s_t = tl.where(valid[:, None], s_t * scale_log2, float("-inf"))
    m_new = tl.maximum(m, tl.max(s_t, 0))
    alpha = tl.exp2(m - m_new)
    p_t = tl.exp2(s_t - m_new[None, :])
    l_sum = l_sum * alpha + tl.sum(p_t, 0)
    if DV_SPLIT == 1:
        v = k
    else:
        v = load_main(kv_ptr, off, valid, offs_dv, CODEC, D, NOPE, ALIGN).to(q_t.dtype)
    acc_t = acc_t * alpha[None, :] + dot(tl.trans(v), p_t.to(v.dtype), IEEE)
    return m_new, l_sum, acc_t


@triton.jit
def _keys_on_m_halves(q_lo, q_hi, m, l_sum, acc_lo, acc_hi, kv_ptr, off, valid, offs_dh, scale_log2, CODEC, D,
                      NOPE, ALIGN, BLOCK_DH: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    k_lo = load_main(kv_ptr, off, valid, offs_dh, CODEC, D, NOPE, ALIGN).to(q_lo.dtype)
    s_t = dot(k_lo, q_lo, IEEE)
    k_hi = load_main(kv_ptr, off, valid, offs_dh + BLOCK_DH, CODEC, D, NOPE, ALIGN).to(q_lo.dtype)
    s_t = dot_acc(k_hi, q_hi, s_t, IEEE)
    s_t = tl.where(valid[:, None], s_t * scale_log2, float("-inf"))
    m_new = tl.maximum(m, tl.max(s_t, 0))
    alpha = tl.exp2(m - m_new)
    p_t = tl.exp2(s_t - m_new[None, :])
    l_sum = l_sum * alpha + tl.sum(p_t, 0)
    p_t = p_t.to(k_lo.dtype)
    acc_lo = acc_lo * alpha[None, :] + dot(tl.trans(k_lo), p_t, IEEE)
    acc_hi = acc_hi * alpha[None, :] + dot(tl.trans(k_hi), p_t, IEEE)
    return m_new, l_sum, acc_lo, acc_hi


@triton.jit
def attend_tile(q, q2, m, l_sum, acc, acc2, kv_ptr, off, valid, offs_d, offs_dv, offs_dh, scale_log2, CODEC, D,
                NOPE, ALIGN, DV_SPLIT: tl.constexpr, IEEE: tl.constexpr, KEYS_ON_M: tl.constexpr,
                BLOCK_DH: tl.constexpr):  # fmt: skip
    """One key tile's update of ``(m, l_sum, acc, acc2)`` (module docstring).

    Args (per ``KEYS_ON_M``): ``q`` bf16/fp32 ``[BLOCK_H, BLOCK_D]`` (0), ``qᵀ [BLOCK_D,
    BLOCK_H]`` (1) or its first half of rows ``[BLOCK_D / 2, BLOCK_H]`` (2, ``q2`` the second;
    unused otherwise); ``m`` / ``l_sum`` fp32 ``[BLOCK_H]``, base-2 running max and denominator;
    ``acc`` fp32 ``[BLOCK_H, BLOCK_DV]`` (0), ``[BLOCK_DV, BLOCK_H]`` (1) or ``[BLOCK_D / 2,
    BLOCK_H]`` (2, ``acc2`` the second half; passed through otherwise); ``off [BLOCK_N]`` element
    offsets of the key rows in ``kv_ptr``, ``valid [BLOCK_N]`` their mask; ``offs_d`` the key
    columns, ``offs_dv`` this program's value columns (``DV_SPLIT``), ``offs_dh`` ``arange(BLOCK_DH)``
    (``BLOCK_DH = BLOCK_D / 2``); ``scale_log2`` the softmax scale times ``log2(e)``. ``KEYS_ON_M = 2`` needs
    ``DV_SPLIT = 1``. Returns ``(m, l_sum, acc, acc2)``."""
    if KEYS_ON_M == 2:
        m, l_sum, acc, acc2 = _keys_on_m_halves(q, q2, m, l_sum, acc, acc2, kv_ptr, off, valid, offs_dh,
                                                scale_log2, CODEC, D, NOPE, ALIGN, BLOCK_DH, IEEE)  # fmt: skip
    elif KEYS_ON_M == 1:
        m, l_sum, acc = _keys_on_m(q, m, l_sum, acc, kv_ptr, off, valid, offs_d, offs_dv, scale_log2, CODEC, D,
                                   NOPE, ALIGN, DV_SPLIT, IEEE)  # fmt: skip
    else:
        m, l_sum, acc = _heads_on_m(q, m, l_sum, acc, kv_ptr, off, valid, offs_d, offs_dv, scale_log2, CODEC, D,
                                    NOPE, ALIGN, DV_SPLIT, IEEE)  # fmt: skip
    return m, l_sum, acc, acc2
