"""Sparse shared-KV (MQA) attention with a per-head sink over the paged pools (Triton).

Op-table entry 5 (``sgl_kernel_v4/ops.py``); math from HF ``eager_attention_forward`` with ``s_aux``
(``transformers/models/deepseek_v4/modeling_deepseek_v4.py``): per query token ``t`` and head
``h``, ``logits_j = scale * q[t, h] · k_j`` over the token's keys, softmax over ``[logits...,
sinks[h]]`` in fp32, the sink column dropped, ``out = sum_j p_j k_j`` (K = V).

Keys are found through page tables (:mod:`sgl_kernel_v4.paged`), computed in the kernel: the
sliding window from the token's position and its two window pages, the compressed entries from
its request's row of ``req_to_page`` (CSA: the entry indices the indexer selected; HCA: every
entry below the token's visible count, read on the device). No per-token key list exists.

The kernels, their layout (one program per (token, head block, split), flash-decoding over a
grid fixed by the batch shape and the layer's key capacity) and their tile's compile statistics are
in :mod:`sgl_kernel_v4.triton.attention_kernels`; this module is the launcher: argument checks, tile
defaults (:data:`EXTEND_TILE`) and the split count (:func:`default_num_splits`, bounded by
:func:`max_key_count`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch

from sgl_kernel_v4.paged import as_paged, entry_align
from sgl_kernel_v4.triton._utils import cdiv, ieee_f32_dots, next_power_of_2, num_sms
from sgl_kernel_v4.triton.attention_kernels import _combine_kernel, _paged_attn_kernel

__all__ = ["default_num_splits", "max_key_count", "sparse_attention"]

_LOG2E = 1.4426950408889634


def _check_int(name: str, x: torch.Tensor | None, shape: tuple[int, ...]) -> None:
    if x is None:
        raise ValueError(f"{name}: required")
    if x.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{name}: expected int32/int64, got {x.dtype}")
    if len(shape) != x.dim() or any(s >= 0 and s != d for s, d in zip(shape, x.shape)):
        raise ValueError(f"{name}: expected shape {shape} (-1 = any), got {tuple(x.shape)}")
    if x.dim() and x.stride(-1) != 1:
        raise ValueError(f"{name}: last dim must be contiguous")


#: Fewest keys one split should cover (see :func:`default_num_splits`). 16 from the H200 sweep
#: (``benchmark/attention_split_sweep.py``, RESULTS.md): with fp8 pools the dequantization wants
#: many programs, and larger bounds (64: 1.05x, 256: 1.34x the total) lost to it.
MIN_KEYS_PER_SPLIT = 16
#: Splits the combine kernel merges per step (one ``[COMBINE_SPLITS, BLOCK_D]`` load).
COMBINE_SPLITS = 8
#: Default of ``sparse_attention(dv_split=...)``: value-column programs per (token, head block).
DV_SPLIT = 1
#: Default of ``sparse_attention(keys_on_m=...)``: the tile's operand orientation
#: (:mod:`sgl_kernel_v4.triton.attention_tile`; 0: heads on the MMA's M) outside the extend tile.
KEYS_ON_M = 0
#: The extend tile (``T >= 128`` tokens, ``>= 64`` heads, bf16 / fp16 pools, every tile argument
#: left ``None``): (block_h, block_n, num_warps, num_stages, keys_on_m). From the H100 run of
#: ``attention_extend_sweep.py --qk-once`` (benchmark/RESULTS.md): 64 heads x 128 keys with the
#: key rows on the MMA's M, the entry rows read in 4 chunks, took 0.90 / 1.00 ms (CSA, 12k / 128k
#: contexts) and 0.51 / 1.61 ms (HCA) per 2048-token chunk against 1.61 / 1.64 and 0.74 / 2.98 ms
#: for the 64 x 32 heads-on-M tile (1.45x - 1.85x).
EXTEND_TILE = (64, 128, 8, 1, 4)
#: Names the extend tile's ``keys_on_m`` (0, 1, 2 or 4; 0: the 64 x 32 heads-on-M tile of before),
#: read once per process; unset or empty: ``EXTEND_TILE``'s.
EXTEND_KEYS_ON_M_ENV = "SGLANG_V4_ATTN_EXTEND_KEYS_ON_M"


@functools.cache
def extend_keys_on_m() -> int:
    """The extend tile's ``keys_on_m``: :data:`EXTEND_KEYS_ON_M_ENV` when set, else
    :data:`EXTEND_TILE`'s (4).

    Raises:
        ValueError: the variable is not one of 0, 1, 2, 4."""
    v = os.environ.get(EXTEND_KEYS_ON_M_ENV, "").strip()
    if not v:
        return EXTEND_TILE[4]
    if v not in ("0", "1", "2", "4"):
        raise ValueError(f"{EXTEND_KEYS_ON_M_ENV}: expected 0, 1, 2 or 4, got {v!r}")
    return int(v)


def default_num_splits(
    T: int,
    H: int,
    block_h: int,
    device: torch.device,
    max_keys: int | None = None,
    min_keys_per_split: int = MIN_KEYS_PER_SPLIT,
) -> int:
    """Splits per (token, head block) of :func:`sparse_attention`.

    Enough programs for two waves of the SMs (``ceil(2 * SMs / (T * ceil(H / block_h)))``), at
    most ``max_keys // min_keys_per_split`` (so each split covers ``>= min_keys_per_split`` of the
    layer's keys when the context is full, and the combine reads few partials), at most 64; the
    largest power of two not above these bounds, and at least 1.

    ``max_keys`` is the most keys a token of the layer can attend to, a constant per layer and
    server (:func:`max_key_count`: window + top-k for CSA, window + the page table's entry capacity
    for HCA, window for sliding-only layers), never the batch's actual context: the result, and
    so a captured CUDA graph's grid, depends on the batch shape and the layer only, and serves
    every context length. ``None``: no key bound (the rule before key counts were known).

    Raises:
        ValueError: ``T``, ``H``, ``block_h`` or ``min_keys_per_split`` below 1, or ``max_keys``
            negative.
    """
    for name, v in (("T", T), ("H", H), ("block_h", block_h), ("min_keys_per_split", min_keys_per_split)):
        if v < 1:
            raise ValueError(f"{name}: expected >= 1, got {v}")
    n_hb = cdiv(H, block_h)
    bound = min(cdiv(2 * num_sms(device), T * n_hb), 64)
    if max_keys is not None:
        if max_keys < 0:
            raise ValueError(f"max_keys: expected >= 0, got {max_keys}")
        bound = min(bound, max_keys // min_keys_per_split)
    ns = 1
    while ns * 2 <= bound:
        ns *= 2
    return ns


def max_key_count(
    window: int,
    comp_entries: torch.Tensor | None = None,
    comp_visible: torch.Tensor | None = None,
    req_to_page: torch.Tensor | None = None,
    entries_per_page: int = 1,
) -> int:
    """The most keys one token can attend to in a :func:`sparse_attention` call, from the shapes
    of its arguments only (no device read): ``window`` raw keys, plus ``comp_entries.shape[1]``
    (CSA: the indexer's top-k) or, with ``comp_visible`` (HCA), every entry the page table can
    address, ``req_to_page.shape[1] * entries_per_page`` (a server's table has
    ``ceil(context_len / page_size)`` columns, so this is ``context_len / compress_ratio``
    rounded up to a page). Constant per layer and server.

    Raises:
        ValueError: ``comp_visible`` without ``req_to_page``, or a negative ``window``.
    """
    if window < 0:
        raise ValueError(f"window: expected >= 0, got {window}")
    if comp_entries is not None:
        return int(window) + int(comp_entries.shape[1])
    if comp_visible is not None:
        if req_to_page is None:
            raise ValueError("req_to_page: required with comp_visible")
        return int(window) + int(req_to_page.shape[1]) * int(entries_per_page)
    return int(window)


def sparse_attention(
    q: torch.Tensor,
    swa_kv: Any,
    swa_pages: torch.Tensor,
    positions: torch.Tensor,
    window: int,
    sinks: torch.Tensor,
    scale: float,
    comp_kv: Any = None,
    comp_entries: torch.Tensor | None = None,
    comp_visible: torch.Tensor | None = None,
    req_to_page: torch.Tensor | None = None,
    req_rows: torch.Tensor | None = None,
    token_req: torch.Tensor | None = None,
    entries_per_page: int = 1,
    *,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
    max_keys: int | None = None,
    block_h: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    fp8_align: int | None = None,
    dv_split: int | None = None,
    keys_on_m: int | None = None,
    lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """Paged sparse MQA attention with a per-head sink (op table entry 5; arguments and result as
    :func:`sgl_kernel_v4.ref.attention.sparse_attention`).

    ``swa_kv`` / ``comp_kv``: float ``[N, D]`` pool views or quantized row views (fp8 main entries,
    read and dequantized in the kernel; both must have the same format). Never synchronises with
    the host, so it can be captured in a CUDA graph.

    Keyword args:
        out: optional ``[T, H, D]`` output buffer (q's dtype).
        num_splits: splits per (token, head block), rounded up to a power of two in [1, 64];
            ``None``: :func:`default_num_splits` of the batch shape and ``max_keys``.
        max_keys: the most keys a token of this layer attends to, for the default split count
            (``None``: :func:`max_key_count` of the arguments' shapes: window + top-k (CSA),
            window + the page table's entry capacity (HCA), window). Ignored with ``num_splits``.
        block_h / block_n: tile sizes (heads per program, keys per iteration).
        num_warps / num_stages: launch options (``None``: the tuned defaults below).
        fp8_align: byte alignment of fp8 entry rows stated to the compiler, 2 or 8 (``None``: 8
            when unpipelined and the rows are 8-byte aligned (``entry_align``), else 2; see
            ``load_main``). A value above the rows' alignment raises ValueError (it would fault).
        dv_split: 1 or 2 programs per (token, head block, split), each accumulating its share of
            the ``D`` value columns (``[BLOCK_H, D / 2]`` fp32 instead of ``[BLOCK_H, D]``: half
            the accumulator registers) and recomputing the ``q·kᵀ`` logits (1.5x the products).
            ``None``: :data:`DV_SPLIT` (1: not measured faster yet; ``attention_extend_sweep.py``).
        keys_on_m: the tile's operand orientation (:mod:`sgl_kernel_v4.triton.attention_tile`,
            its "compile statistics"): 0 heads on the tensor-core instruction's M; 1 the key rows
            on M (``[block_n, block_h]`` logits ``k · qᵀ``, accumulator ``[D / dv_split,
            block_h]``: with ``block_n = 128`` and 8 warps each warpgroup computes its own keys'
            logits, where the 64-head default has both warpgroups compute all of them); 2 or 4 as
            1 with the entry rows read as that many chunks of ``D`` (needs ``dv_split = 1``).
            ``None``: 4 with the extend tile (:data:`EXTEND_TILE`: ``T >= 128``, ``H >= 64``,
            bf16 / fp16 pools, no tile argument given; :data:`EXTEND_KEYS_ON_M_ENV` overrides it),
            else :data:`KEYS_ON_M` (0).
        lse: optional ``[T, H]`` fp32 buffer receiving each row's base-2 log-sum-exp of the
            scaled logits, the sink included (``log2(2**sink' + sum_j 2**(scale' q.k_j))`` with
            ``x' = x * log2(e)``), so a caller can merge another key set's partial result
            (:mod:`sgl_kernel_v4.triton.attention_prefix`); forces one split.

    Tile defaults (H200 sweeps in benchmark/RESULTS.md, ``benchmark/attention_fp8_sweep.py``): bf16
    pools: 64 heads x 32 keys from 128 tokens (prefill), else 16 heads x 64 keys (16 at <= 4
    tokens), two pipeline stages. fp8 pools: 16 keys per tile below 128 tokens (32 above), one
    stage, 8-byte aligned loads: the dequantized tile lives in registers, and longer tiles or a
    second stage spill (at 16 tokens 5.6x slower than these defaults, at 2048 tokens 3x).

    Raises:
        ValueError: a shape, dtype or layout is out of range, or the two pools differ in format.
    """
    if q.dim() != 3:
        raise ValueError(f"q: expected [T, H, D], got shape {tuple(q.shape)}")
    T, H, D = q.shape
    swa = as_paged(swa_kv)
    if swa.dim != D:
        raise ValueError(f"swa_kv: entries of {swa.dim} values, q has head dim {D}")
    if swa.codec not in ("float", "fp8_main"):
        raise ValueError(f"swa_kv: codec {swa.codec!r} is not a main-entry format")
    _check_int("swa_pages", swa_pages, (T, 2))
    _check_int("positions", positions, (T,))
    if sinks.shape != (H,):
        raise ValueError(f"sinks: expected [{H}], got {tuple(sinks.shape)}")
    mode = 0
    comp = swa
    if comp_kv is not None:
        comp = as_paged(comp_kv)
        same = (comp.codec, comp.dim, comp.rope_dim, comp.storage.dtype) == (
            swa.codec,
            swa.dim,
            swa.rope_dim,
            swa.storage.dtype,
        )
        # fp8 window + bf16 entries: a long prefill run's entries decoded once (attention_prefix)
        decoded = swa.codec == "fp8_main" and comp.codec == "float" and comp.storage.dtype == torch.bfloat16
        if not (same or (decoded and comp.dim == swa.dim)):
            raise ValueError(f"comp_kv: format {comp.codec}/{comp.storage.dtype} differs from swa_kv's")
        _check_int("req_to_page", req_to_page, (-1, -1))
        _check_int("req_rows", req_rows, (-1,))
        _check_int("token_req", token_req, (T,))
        if comp_entries is not None:
            _check_int("comp_entries", comp_entries, (T, -1))
            mode = 1
        elif comp_visible is not None:
            _check_int("comp_visible", comp_visible, (T,))
            mode = 2
        else:
            raise ValueError("comp_kv: needs comp_entries or comp_visible")
    if q.stride(2) != 1:
        q = q.contiguous()
    if out is None:
        out = torch.empty_like(q)
    if T == 0:
        return out
    cdt = torch.float32 if q.dtype == torch.float32 else torch.bfloat16
    if swa.codec == "float" and swa.storage.dtype in (torch.bfloat16, torch.float16, torch.float32):
        cdt = swa.storage.dtype
    if q.dtype != cdt:
        q = q.to(cdt)
    block_d = next_power_of_2(D)
    fp8 = swa.codec == "fp8_main"
    tile_args = (block_h, block_n, num_warps, num_stages, dv_split, keys_on_m)
    if (
        all(a is None for a in tile_args)
        and T >= 128
        and H >= 64
        and not fp8
        and q.element_size() == 2
        and block_d // 4 >= 16
        and extend_keys_on_m() != 0
    ):
        # the extend tile (EXTEND_TILE): key rows on the MMA's M, one stage
        block_h, block_n, num_warps, num_stages, _ = EXTEND_TILE
        keys_on_m, dv_split = extend_keys_on_m(), 1
    # tiles from the H200 sweep (benchmark/RESULTS.md): prefill wants all 64 heads per program
    # (one gather of the keys per token), decode small head blocks and long key tiles
    if block_h is None:
        block_h = 64 if (T >= 128 and H >= 64) else 16
    if block_n is None:
        block_n = 32 if T >= 128 else (16 if T <= 4 or fp8 else 64)
    if q.element_size() > 2:  # fp32 tiles: halve to fit shared memory
        block_h, block_n = min(block_h, 32), min(block_n, 16)
    block_h = max(16, min(block_h, next_power_of_2(H)))
    n_hb = cdiv(H, block_h)
    if lse is not None:
        if lse.shape != (T, H) or lse.dtype != torch.float32 or not lse.is_contiguous():
            raise ValueError(
                f"lse: expected a contiguous float32 [{T}, {H}] tensor, got {lse.dtype} {tuple(lse.shape)}"
            )
        num_splits = 1
    if num_splits is None:
        if max_keys is None:
            max_keys = max_key_count(
                window,
                comp_entries if mode == 1 else None,
                comp_visible if mode == 2 else None,
                req_to_page,
                entries_per_page,
            )
        num_splits = default_num_splits(T, H, block_h, q.device, max_keys)
    num_splits = max(1, min(int(num_splits), 64))
    if num_splits > 1:
        num_splits = next_power_of_2(num_splits)
        part_acc = torch.empty((T, H, num_splits, block_d), dtype=torch.float32, device=q.device)
        part_ml = torch.empty((T, H, num_splits, 2), dtype=torch.float32, device=q.device)
    else:
        part_acc = part_ml = out  # unused
    sinks = sinks if sinks.dtype == torch.float32 else sinks.float()
    ent = comp_entries if mode == 1 else positions
    vis = comp_visible if mode == 2 else positions
    r2p = req_to_page if mode else swa_pages
    rrows = req_rows if mode else positions
    treq = token_req if mode else positions
    assert ent is not None and vis is not None and r2p is not None and rrows is not None and treq is not None
    if num_warps is None:
        num_warps = (8 if T >= 128 else 4) if fp8 else (8 if block_h * block_d >= 16 * 512 else 4)
    if num_stages is None:
        num_stages = 1 if fp8 else 2
    # 8-byte loads only where every entry row is 8-byte aligned (584-byte entries of the served
    # models; the small test shapes have 194-byte rows) and nothing is pipelined through shared memory
    row_align = entry_align(swa.codec, D, swa.rope_dim) if fp8 else 16
    if fp8_align is None:
        fp8_align = 8 if (num_stages == 1 and row_align >= 8) else 2
    if fp8_align not in (2, 8):
        raise ValueError(f"fp8_align: expected 2 or 8, got {fp8_align}")
    if fp8_align > row_align:
        raise ValueError(f"fp8_align: {fp8_align} exceeds the {row_align}-byte alignment of the entry rows")
    dv_split = DV_SPLIT if dv_split is None else int(dv_split)
    if dv_split not in (1, 2) or block_d // dv_split < 16:
        raise ValueError(f"dv_split: expected 1 or 2 (with D / dv_split >= 16), got {dv_split}")
    keys_on_m = KEYS_ON_M if keys_on_m is None else int(keys_on_m)
    if (
        keys_on_m not in (0, 1, 2, 4)
        or (keys_on_m > 1 and dv_split != 1)
        or block_d // max(keys_on_m, 1) < 16
    ):
        raise ValueError(
            f"keys_on_m: expected 0, 1, 2 or 4 (2 and 4 with dv_split 1, D / keys_on_m >= 16), got {keys_on_m} "
            f"(dv_split {dv_split}, D {D})"
        )
    _paged_attn_kernel[(T, n_hb * dv_split, num_splits)](
        q, q.stride(0), q.stride(1),
        swa.storage, swa.rows_per_page, swa.page_stride, swa.row_stride, swa_pages, positions, int(window),
        comp.storage, comp.rows_per_page, comp.page_stride, comp.row_stride,
        ent, ent.stride(0), ent.shape[1] if mode == 1 else 0, vis,
        r2p, r2p.stride(0), rrows, treq, int(entries_per_page),
        sinks, out, out.stride(0), out.stride(1), part_acc, part_ml, lse if lse is not None else part_ml,
        H, float(scale) * _LOG2E, num_splits,
        D=D, NOPE=D - swa.rope_dim, CODEC=swa.codec_id, BLOCK_D=block_d, BLOCK_H=block_h, BLOCK_N=block_n,
        SPLIT=num_splits > 1, COMP_MODE=mode, ALIGN=fp8_align, DV_SPLIT=dv_split, IEEE=ieee_f32_dots(q.dtype),
        STORE_LSE=lse is not None, COMP_CODEC=comp.codec_id, KEYS_ON_M=keys_on_m, num_warps=num_warps,
        num_stages=num_stages,
    )  # fmt: skip
    if num_splits > 1:
        _combine_kernel[(T, H)](
            part_acc, part_ml, sinks, out, out.stride(0), out.stride(1), H, num_splits,
            D=D, BLOCK_D=block_d, BLOCK_S=COMBINE_SPLITS, num_warps=4,
        )  # fmt: skip
    return out
