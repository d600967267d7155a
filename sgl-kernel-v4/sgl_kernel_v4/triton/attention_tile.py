"""One key tile of the sparse attention (:mod:`sgl_kernel_v4.triton.attention`): logits, online
softmax update and the value product, in several operand orientations (``KEYS_ON_M``).

Per tile of ``BLOCK_N`` keys ``k [BLOCK_N, D]`` (K = V, dequantized by ``kv_codec.load_main``),
for ``BLOCK_H`` heads of one token: ``s = scale' q·kᵀ`` (base 2), ``m' = max(m, max_j s)``,
``l' = l 2^(m - m') + sum_j 2^(s - m')``, ``acc' = acc 2^(m - m') + 2^(s - m')·v`` (flash-attention's
online softmax; the sink enters the kernel as the initial ``(m, l)``).

* ``KEYS_ON_M = 0`` (the default): heads on the tensor-core instruction's M: ``s [BLOCK_H,
  BLOCK_N] = q·kᵀ``, ``acc [BLOCK_H, D] += p·v``.
* ``KEYS_ON_M = 1``: key rows on M: ``sᵀ [BLOCK_N, BLOCK_H] = k·qᵀ`` (softmax over axis 0),
  ``accᵀ [D, BLOCK_H] += vᵀ·pᵀ`` (``pᵀ`` goes through shared memory as the B operand).
* ``KEYS_ON_M = 2`` or ``4``: as 1, the entry rows read as that many chunks of ``D`` (``s =
  sum_c k_c·q_cᵀ``, one accumulator ``[D / KEYS_ON_M, BLOCK_H]`` per chunk), each loaded right
  before its logits product, so an unpipelined tile (one stage) holds one chunk in registers at a
  time.

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
| ``KEYS_ON_M`` 4, 64 x 128, 1 | 255 | 240 | 208.0 | 32 + 32 m64n64k16 | 14.3 | 4.0 KiB | 1.0x |
| ``KEYS_ON_M`` 1, 32 x 128, 1 | 255 | 152 | 168.0 | 32 + 32 m64n32k16 | 35.1 | 6.0 KiB | 1.0x |
| ``KEYS_ON_M`` 2, 32 x 128, 1 | 255 | 96 | 168.0 | 32 + 32 m64n32k16 | 26.8 | 6.0 KiB | 1.0x |
| ``KEYS_ON_M`` 4, 32 x 128, 1 | 255 | 8 | 168.0 | 32 + 32 m64n32k16 | 21.7 | 6.0 KiB | 1.0x |

In the default tile both warpgroups compute the whole ``[64, 32]`` logit tile: Triton lays a dot
whose result feeds another dot (flash attention's chain) with every warp along M (TTGIR
``#mma`` ``warpsPerCTA = [8, 1]``, ``instrShape [16, 16, 16]``), and M is 64 heads, one
warpgroup's height, so the second warpgroup repeats the first one's ``q·kᵀ`` (and its softmax);
``p·v`` (``warpsPerCTA = [4, 2]``, ``instrShape [16, 256, 16]``) splits the 512 value columns
between the warpgroups without repetition, ``p`` a register operand (8 ``F2FP`` per tile, no
shared-memory trip). Each of the logits' 64 HGMMAs (2 blocks of 16 keys x 32 k-steps) re-reads
a 2 KiB slice of ``q`` from shared memory for an N = 16 product: 8 of the 11 KiB per key (the
keys 2 KiB, ``p·v``'s B operand 1 KiB). The row softmax costs 8 ``SHFL`` per tile, the
accumulator's rescale 128 ``FMUL`` per thread every 32 keys (every 128 keys below). The ``[64,
512]`` fp32 accumulator takes 128 of the 255 registers. (A 2-token, 128-row program would give each warpgroup a token's rows, but its
``[128, 512]`` accumulator is the whole register file, and CSA tokens select different keys, so
the two tokens' logits are not one product.) With the keys on M and 128-key tiles each
warpgroup owns 64 keys' logits and half of the value rows, in 64-row blocks (``warpsPerCTA =
[8, 1]`` over 128 key rows and over 512 value rows): no repetition, N = 64 products, at the cost
of softmax reductions across warps (108 ``SHFL`` and shared memory behind barriers: 9-12 ``BAR``
per tile), ``pᵀ`` staged through shared memory (``STSM``) as the value product's B operand, and
one pipeline stage (two 128-key tiles, 256 KiB, exceed the 227 KiB a block may use), whose tile
passes through registers: the spills (the default tile spills 704 B at one stage too).
Loading the tile in chunks of ``D`` shrinks that (800 B, 464 B, 240 B for 1, 2, 4 chunks at 64
heads; 8 B at 32 heads, where a token's two head blocks gather its keys twice).
"""

from __future__ import annotations

import triton
import triton.language as tl

from sgl_kernel_v4.triton._dot import dot, dot_acc
from sgl_kernel_v4.triton.kv_codec import load_main

__all__ = ["attend_tile", "load_q_rows"]


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
def _keys_on_m_chunks(q1, q2, q3, q4, m, l_sum, a1, a2, a3, a4, kv_ptr, off, valid, offs_dc, scale_log2, CODEC, D,
                      NOPE, ALIGN, BLOCK_DC: tl.constexpr, NCH: tl.constexpr, IEEE: tl.constexpr):  # fmt: skip
    # each chunk of columns loaded (through registers, one stage) right before its logits product
    k1 = load_main(kv_ptr, off, valid, offs_dc, CODEC, D, NOPE, ALIGN).to(q1.dtype)
    s_t = dot(k1, q1, IEEE)
    k2 = load_main(kv_ptr, off, valid, offs_dc + BLOCK_DC, CODEC, D, NOPE, ALIGN).to(q1.dtype)
    s_t = dot_acc(k2, q2, s_t, IEEE)
    if NCH == 4:
        k3 = load_main(kv_ptr, off, valid, offs_dc + 2 * BLOCK_DC, CODEC, D, NOPE, ALIGN).to(q1.dtype)
        s_t = dot_acc(k3, q3, s_t, IEEE)
        k4 = load_main(kv_ptr, off, valid, offs_dc + 3 * BLOCK_DC, CODEC, D, NOPE, ALIGN).to(q1.dtype)
        s_t = dot_acc(k4, q4, s_t, IEEE)
    s_t = tl.where(valid[:, None], s_t * scale_log2, float("-inf"))
    m_new = tl.maximum(m, tl.max(s_t, 0))
    alpha = tl.exp2(m - m_new)
    p_t = tl.exp2(s_t - m_new[None, :])
    l_sum = l_sum * alpha + tl.sum(p_t, 0)
    p_t = p_t.to(k1.dtype)
    a1 = a1 * alpha[None, :] + dot(tl.trans(k1), p_t, IEEE)
    a2 = a2 * alpha[None, :] + dot(tl.trans(k2), p_t, IEEE)
    if NCH == 4:
        a3 = a3 * alpha[None, :] + dot(tl.trans(k3), p_t, IEEE)
        a4 = a4 * alpha[None, :] + dot(tl.trans(k4), p_t, IEEE)
    return m_new, l_sum, a1, a2, a3, a4


@triton.jit
def load_q_rows(q_row, hmask, offs, D):
    """``qᵀ`` rows ``offs`` of one token's heads: ``[len(offs), BLOCK_H]``, zeros past ``D`` or
    outside ``hmask``; ``q_row [BLOCK_H]`` the heads' row pointers."""
    return tl.load(q_row[None, :] + offs[:, None], mask=hmask[None, :] & (offs < D)[:, None], other=0.0)


@triton.jit
def attend_tile(q, q2, q3, q4, m, l_sum, acc, acc2, acc3, acc4, kv_ptr, off, valid, offs_d, offs_dv, offs_dc,
                scale_log2, CODEC, D, NOPE, ALIGN, DV_SPLIT: tl.constexpr, IEEE: tl.constexpr,
                KEYS_ON_M: tl.constexpr, BLOCK_DC: tl.constexpr):  # fmt: skip
    """One key tile's update of ``(m, l_sum, acc, acc2, acc3, acc4)`` (module docstring).

    Args (per ``KEYS_ON_M``): ``q`` bf16/fp32 ``[BLOCK_H, BLOCK_D]`` (0), ``qᵀ [BLOCK_D,
    BLOCK_H]`` (1) or its first chunk of rows ``[BLOCK_DC, BLOCK_H]`` (2, 4: ``q2`` .. the next
    ones; unused beyond the chunk count); ``m`` / ``l_sum`` fp32 ``[BLOCK_H]``, base-2 running max
    and denominator; ``acc`` fp32 ``[BLOCK_H, BLOCK_DV]`` (0), ``[BLOCK_DV, BLOCK_H]`` (1) or
    ``[BLOCK_DC, BLOCK_H]`` (2, 4: ``acc2`` .. the next chunks; passed through beyond the chunk
    count); ``off [BLOCK_N]`` element offsets of the key rows in ``kv_ptr``, ``valid [BLOCK_N]``
    their mask; ``offs_d`` the key columns, ``offs_dv`` this program's value columns
    (``DV_SPLIT``), ``offs_dc`` ``arange(BLOCK_DC)`` with ``BLOCK_DC = BLOCK_D / KEYS_ON_M`` (2,
    4); ``scale_log2`` the softmax scale times ``log2(e)``. ``KEYS_ON_M`` 2 and 4 need ``DV_SPLIT
    = 1``. Returns ``(m, l_sum, acc, acc2, acc3, acc4)``."""
    if KEYS_ON_M >= 2:
        m, l_sum, acc, acc2, acc3, acc4 = _keys_on_m_chunks(q, q2, q3, q4, m, l_sum, acc, acc2, acc3, acc4, kv_ptr,
                                                            off, valid, offs_dc, scale_log2, CODEC, D, NOPE, ALIGN,
                                                            BLOCK_DC, KEYS_ON_M, IEEE)  # fmt: skip
    elif KEYS_ON_M == 1:
        m, l_sum, acc = _keys_on_m(q, m, l_sum, acc, kv_ptr, off, valid, offs_d, offs_dv, scale_log2, CODEC, D,
                                   NOPE, ALIGN, DV_SPLIT, IEEE)  # fmt: skip
    else:
        m, l_sum, acc = _heads_on_m(q, m, l_sum, acc, kv_ptr, off, valid, offs_d, offs_dv, scale_log2, CODEC, D,
                                    NOPE, ALIGN, DV_SPLIT, IEEE)  # fmt: skip
    return m, l_sum, acc, acc2, acc3, acc4
