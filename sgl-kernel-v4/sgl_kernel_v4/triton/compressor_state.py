"""Compressor windows read in place from the per-request state, and the state advance (Triton).

Op-table entry 2 (``compress_windows_and_insert``, ``advance_compressor_state``; torch reference
and the row-table definitions: :mod:`sgl_kernel_v4.ref.compressor_state`). ``Compressor.run`` used
to build the row tables ``Tab = cat(buf[slots], new rows)`` / ``CaTab = cat(ovl[slots], Tab[:, :d])``
and gather windows and state rows from them with ~30 torch ops per call; here each kernel resolves
a table row ``r`` itself:

* ``Tab`` row ``r < B*m``: ``buf[slots[r // m], r % m]`` (fp32 state); ``r >= B*m``: new token
  ``t = r - B*m``, kv ``kv_new[t]`` and score ``gate[t] + position_bias[positions[t] % m]`` (the
  bias add folded in, fp32 as ``gate.float() + bias``); ``-1``: a fill value;
* ``CaTab`` row ``r < B*m``: ``ovl[slots[r // m], r % m]``; else the first ``d`` columns of
  ``Tab[r - B*m]``.

Kernels (at most three launches per compressor call, besides the two projections):

* ``_compress_tab_kernel`` (windows of ``L <= 16`` slots: CSA, ``L = 2m = 8``): one program per
  window, the online softmax pooling / RMSNorm / RoPE / pool write of
  :mod:`sgl_kernel_v4.triton.compressor` on rows read straight from the state and the new rows;
  ``_pool_tab_chunk_kernel`` (HCA, ``L = m = 128``): one program per (window, 64 channels), then
  the shared norm + rope + write kernel. The pooling code is shared with ``compress_and_insert``,
  so the entries are bit-equal to the unfused path (same tiles, same arithmetic).
* ``_snapshot_kernel`` (CSA resume snapshots, one program per snapshot and column block) and then
  ``_advance_kernel`` (one program per request and column block): the state update is in place
  and its sources are the OLD buffer rows, so the snapshots are copied in an earlier launch, and
  the advance kernel loads every row it needs (new buffer rows and the overlap rows, which may
  come from its own slot's buffer at other row positions) before a barrier and its stores. Each
  request owns its slot's rows (padded requests share slot 0 and write only zeros to it), so
  programs never read what another program writes.

Every index table (plan rows, slots, positions) and the batch-dependent ``B*m`` are exempt from
specialisation (no recompile per batch size or metadata-buffer offset); nothing synchronises with
the host, so the calls are CUDA-graph capturable.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2
from sgl_kernel_v4.triton.compressor import (
    _norm_rope_store,
    _pool_tile,
    _softmax_step,
    check_entry_args,
    default_block_l,
    norm_rope_write,
    uses_channel_split,
)

__all__ = ["compress_windows_and_insert", "advance_compressor_state"]

_TILE = 4096  # elements per (rows x columns) state tile of the snapshot / advance kernels


@triton.jit
def _tab_tile(
    r, col, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
    kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
):  # fmt: skip
    """``Tab`` rows ``r [R]`` (int64, ``-1`` = none) at columns ``col`` (``[R, C]`` or ``[1, C]``):
    ``(kv, score, valid)``, ``[R, C]`` fp32 each (0 for invalid rows) and ``valid [R]``."""
    in_buf = (r >= 0) & (r < Bm)
    in_new = r >= Bm
    rb = tl.where(in_buf, r, 0)
    slot = tl.load(slots_ptr + rb // M, mask=in_buf, other=0)
    boff = slot * s_slot + (rb % M) * s_row
    t = tl.where(in_new, r - Bm, 0)
    mb = in_buf[:, None]
    mn = in_new[:, None]
    kv = tl.load(buf_kv_ptr + boff[:, None] + col, mask=mb, other=0.0)
    sc = tl.load(buf_sc_ptr + boff[:, None] + col, mask=mb, other=0.0)
    kv_n = tl.load(kv_ptr + t[:, None] * s_kv + col, mask=mn, other=0.0).to(tl.float32)
    g = tl.load(gate_ptr + t[:, None] * s_gate + col, mask=mn, other=0.0).to(tl.float32)
    pm = tl.load(pos_ptr + t, mask=in_new, other=0) % M
    bias = tl.load(bias_ptr + pm[:, None] * s_bias + col, mask=mn, other=0.0)
    return tl.where(mn, kv_n, kv), tl.where(mn, g + bias, sc), in_buf | in_new


@triton.jit
def _window_rows(rows_ptr, prev_ptr, w, offs_l, Bm, M, slots_ptr, so_slot, so_row, D, OVERLAP: tl.constexpr):
    """Sources of slots ``offs_l`` of window ``w``: ``(Tab row or -1, column base, in_ovl, ovl
    element offset)``. CSA: slots ``< M`` are ``CaTab[win_prev[w]]`` (overlap state or the first
    ``d`` columns of a ``Tab`` row), slots ``M .. 2M-1`` columns ``D ..`` of ``Tab[win_rows[w]]``."""
    if OVERLAP:
        is_ca = offs_l < M
        # one gather from either table (two masked loads merged by a select broke Triton 3.6's
        # layout pass for 32-slot windows: CSA at compress ratio 16)
        src = tl.where(is_ca, prev_ptr + w * M + offs_l, rows_ptr + w * M + (offs_l - M))
        ca = tl.load(src, mask=offs_l < 2 * M, other=-1)
        in_ovl = is_ca & (ca >= 0) & (ca < Bm)
        r = tl.where(is_ca, tl.where(ca >= Bm, ca - Bm, -1), ca)
        c0 = tl.where(is_ca, 0, D)
        ro = tl.where(in_ovl, ca, 0)
        slot = tl.load(slots_ptr + ro // M, mask=in_ovl, other=0)
        ooff = slot * so_slot + (ro % M) * so_row
    else:
        r = tl.load(rows_ptr + w * M + offs_l, mask=offs_l < M, other=-1)
        c0 = offs_l * 0
        in_ovl = offs_l < 0
        ooff = r * 0
    return r, c0, in_ovl, ooff


@triton.jit
def _window_tile(
    r, c0, in_ovl, ooff, cols, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
    ovl_kv_ptr, ovl_sc_ptr, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    OVERLAP: tl.constexpr,
):  # fmt: skip
    """Window tile ``(kv, score)`` ``[BLOCK_L, C]`` fp32 at window columns ``cols [C]`` (kv 0 and
    score ``-inf`` where a slot has no row: the empty overlap of window 0, padding); kv rounded
    to ``kv_new``'s dtype."""
    kv, sc, ok = _tab_tile(
        r, c0[:, None] + cols[None, :], Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
        kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    )  # fmt: skip
    if OVERLAP:
        mo = in_ovl[:, None]
        kv = tl.where(mo, tl.load(ovl_kv_ptr + ooff[:, None] + cols[None, :], mask=mo, other=0.0), kv)
        sc = tl.where(mo, tl.load(ovl_sc_ptr + ooff[:, None] + cols[None, :], mask=mo, other=0.0), sc)
        ok = ok | in_ovl
    # the window kv in the model dtype, as the unfused path passes it (state rows hold such values)
    kv = kv.to(kv_ptr.dtype.element_ty).to(tl.float32)
    return kv, tl.where(ok[:, None], sc, float("-inf"))


# the index tables and B*m follow the batch (values, metadata-buffer offsets): not specialised
@triton.jit(do_not_specialize=["rows_ptr", "prev_ptr", "Bm", "slots_ptr", "pos_ptr", "idx_ptr"])
def _compress_tab_kernel(
    rows_ptr, prev_ptr, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
    ovl_kv_ptr, ovl_sc_ptr, so_slot, so_row, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    w_ptr, cos_ptr, stride_c, sin_ptr, stride_s, pool_ptr, pool_rpp, pool_ps, pool_rs, idx_ptr,
    out_ptr, stride_o, L, HALF_R, eps,
    HALF_D: tl.constexpr, BLOCK_L: tl.constexpr, OVERLAP: tl.constexpr, CODEC: tl.constexpr,
    NOPE: tl.constexpr,
):  # fmt: skip
    w = tl.program_id(0).to(tl.int64)
    offs_p = tl.arange(0, HALF_D)
    ma = tl.full([HALF_D], -1.0e30, tl.float32)
    da = tl.zeros([HALF_D], tl.float32)
    aa = tl.zeros([HALF_D], tl.float32)
    mb = tl.full([HALF_D], -1.0e30, tl.float32)
    db = tl.zeros([HALF_D], tl.float32)
    ab = tl.zeros([HALF_D], tl.float32)
    for l0 in range(0, L, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        r, c0, in_ovl, ooff = _window_rows(
            rows_ptr, prev_ptr, w, offs_l, Bm, M, slots_ptr, so_slot, so_row, 2 * HALF_D, OVERLAP
        )
        kv, sc = _window_tile(
            r, c0, in_ovl, ooff, 2 * offs_p, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
            ovl_kv_ptr, ovl_sc_ptr, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias, OVERLAP,
        )  # fmt: skip
        ma, da, aa = _softmax_step(ma, da, aa, sc * 1.4426950408889634, kv)
        kv, sc = _window_tile(
            r, c0, in_ovl, ooff, 2 * offs_p + 1, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
            ovl_kv_ptr, ovl_sc_ptr, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias, OVERLAP,
        )  # fmt: skip
        mb, db, ab = _softmax_step(mb, db, ab, sc * 1.4426950408889634, kv)
    _norm_rope_store(
        aa / da, ab / db, w_ptr, cos_ptr + w * stride_c, sin_ptr + w * stride_s, HALF_R, eps,
        out_ptr + w * stride_o, tl.load(idx_ptr + w), pool_ptr, pool_rpp, pool_ps, pool_rs, HALF_D, CODEC, NOPE,
    )  # fmt: skip


@triton.jit(do_not_specialize=["rows_ptr", "prev_ptr", "Bm", "slots_ptr", "pos_ptr"])
def _pool_tab_chunk_kernel(
    rows_ptr, prev_ptr, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
    ovl_kv_ptr, ovl_sc_ptr, so_slot, so_row, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    scratch_ptr, D, BLOCK_L: tl.constexpr, CH: tl.constexpr, OVERLAP: tl.constexpr,
):  # fmt: skip
    """Long windows (HCA): one program per (window, CH channels) pools all rows at once."""
    w = tl.program_id(0).to(tl.int64)
    offs_c = tl.program_id(1) * CH + tl.arange(0, CH)
    offs_l = tl.arange(0, BLOCK_L)
    r, c0, in_ovl, ooff = _window_rows(
        rows_ptr, prev_ptr, w, offs_l, Bm, M, slots_ptr, so_slot, so_row, D, OVERLAP
    )
    kv, sc = _window_tile(
        r, c0, in_ovl, ooff, offs_c, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
        ovl_kv_ptr, ovl_sc_ptr, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias, OVERLAP,
    )  # fmt: skip
    tl.store(scratch_ptr + w * D + offs_c, _pool_tile(sc, kv))


@triton.jit(do_not_specialize=["rows_ptr", "pages_ptr", "S", "Bm", "slots_ptr", "pos_ptr"])
def _snapshot_kernel(
    rows_ptr, pages_ptr, S, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
    kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias, snap_kv_ptr, snap_sc_ptr, sp_page, sp_row,
    BLOCK_M: tl.constexpr, BLOCK_X: tl.constexpr,
):  # fmt: skip
    """``snap[pages[s], i, cols] = Tab[rows[s, i], cols]`` (``-1`` rows: 0) for ``cols < d``.

    Several snapshots of one forward may name the same window page (the window ring reuses a page
    within a long chunk; padded graph rows all name page 0): the last one wins, as in sequential
    order, and the others write nothing, so the result does not depend on program scheduling."""
    s = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_X + tl.arange(0, BLOCK_X)
    offs_i = tl.arange(0, BLOCK_M)
    im = offs_i < M
    page = tl.load(pages_ptr + s)
    later = tl.zeros([BLOCK_M], tl.int32)  # per row alike: how many later snapshots name this page
    for s2 in range(s + 1, S):
        later += (tl.load(pages_ptr + s2) == page).to(tl.int32)
    r = tl.load(rows_ptr + s * M + offs_i, mask=im, other=-1)
    kv, sc, _ = _tab_tile(
        r, cols[None, :], Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
        kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    )  # fmt: skip
    dst = page * sp_page + offs_i[:, None] * sp_row + cols[None, :]
    wm = (im & (later == 0))[:, None]
    tl.store(snap_kv_ptr + dst, kv, mask=wm)
    tl.store(snap_sc_ptr + dst, sc, mask=wm)


@triton.jit(do_not_specialize=["rows_ptr", "ovl_rows_ptr", "Bm", "slots_ptr", "pos_ptr"])
def _advance_kernel(
    rows_ptr, ovl_rows_ptr, Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
    ovl_kv_ptr, ovl_sc_ptr, so_slot, so_row, kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    D, BLOCK_M: tl.constexpr, BLOCK_X: tl.constexpr, OVERLAP: tl.constexpr,
):  # fmt: skip
    """Request ``b``, columns ``cols``: ``buf[slot] = Tab[rows[b]]`` (``-1``: 0; rows already in
    place, ``rows[b, i] == b * M + i``, are skipped) and, CSA,
    ``ovl[slot, :, cols < D] = Tab[ovl_rows[b]]`` when ``ovl_rows[b, 0] >= 0``. Every load
    happens before the barrier, every store after it (the sources include this slot's old rows)."""
    b = tl.program_id(0).to(tl.int64)
    c_lo = tl.program_id(1) * BLOCK_X
    cols = c_lo + tl.arange(0, BLOCK_X)
    offs_i = tl.arange(0, BLOCK_M)
    im = offs_i < M
    slot = tl.load(slots_ptr + b)
    r = tl.load(rows_ptr + b * M + offs_i, mask=im, other=-1)
    # rows that stay where they are (the partial window's earlier tokens): neither read nor written
    keep = r == b * M + offs_i
    kv, sc, _ = _tab_tile(
        tl.where(keep, -1, r), cols[None, :], Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
        kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
    )  # fmt: skip
    if OVERLAP:
        has = (tl.load(ovl_rows_ptr + b * M) >= 0) & (c_lo < D)
        orow = tl.where(has, tl.load(ovl_rows_ptr + b * M + offs_i, mask=im, other=-1), -1)
        okv, osc, _ = _tab_tile(
            orow, cols[None, :], Bm, M, slots_ptr, buf_kv_ptr, buf_sc_ptr, s_slot, s_row,
            kv_ptr, s_kv, gate_ptr, s_gate, pos_ptr, bias_ptr, s_bias,
        )  # fmt: skip
    tl.debug_barrier()
    dst = slot * s_slot + offs_i[:, None] * s_row + cols[None, :]
    tl.store(buf_kv_ptr + dst, kv, mask=(im & ~keep)[:, None])
    tl.store(buf_sc_ptr + dst, sc, mask=(im & ~keep)[:, None])
    if OVERLAP:
        om = im[:, None] & (cols[None, :] < tl.where(has, D, 0))
        odst = slot * so_slot + offs_i[:, None] * so_row + cols[None, :]
        tl.store(ovl_kv_ptr + odst, okv, mask=om)
        tl.store(ovl_sc_ptr + odst, osc, mask=om)


def _check_rows(name: str, rows: torch.Tensor, m: int) -> torch.Tensor:
    if rows.dim() != 2 or rows.shape[1] != m or rows.dtype != torch.int64:
        raise ValueError(f"{name}: expected int64 [*, {m}], got {rows.dtype} {tuple(rows.shape)}")
    return rows.contiguous()


def _check_pair(name: str, a: torch.Tensor, b: torch.Tensor, m: int, width: int) -> None:
    if a.dim() != 3 or a.shape[1:] != (m, width) or a.shape != b.shape or a.stride() != b.stride():
        raise ValueError(
            f"{name}: expected two equally strided [*, {m}, {width}] tensors, got "
            f"{tuple(a.shape)} / {tuple(b.shape)}"
        )
    if a.dtype != torch.float32 or b.dtype != torch.float32 or a.stride(2) != 1:
        raise ValueError(f"{name}: expected fp32 with a contiguous last dim")


def _tab_args(
    kv_new: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    positions: torch.Tensor,
    req_pool_indices: torch.Tensor,
    buf_kv: torch.Tensor,
    buf_score: torch.Tensor,
) -> tuple[Any, ...]:
    """Validate the ``Tab`` sources; the kernels' ``(Bm, M, slots, buf_kv, buf_score, s_slot, s_row)``
    and ``(kv, s_kv, gate, s_gate, positions, bias, s_bias)`` argument groups."""
    m, X = position_bias.shape
    if kv_new.dim() != 2 or kv_new.shape[1] != X or gate.shape != kv_new.shape:
        raise ValueError(f"kv_new/gate: expected [T, {X}], got {tuple(kv_new.shape)} / {tuple(gate.shape)}")
    if kv_new.stride(1) != 1 or gate.stride(1) != 1 or position_bias.stride(1) != 1:
        raise ValueError("kv_new/gate/position_bias: last dim must be contiguous")
    if X & (X - 1):
        raise ValueError(f"position_bias: the width must be a power of 2, got {X}")
    if positions.shape != (kv_new.shape[0],) or positions.dtype != torch.int64:
        raise ValueError(f"positions: expected int64 [{kv_new.shape[0]}], got {tuple(positions.shape)}")
    if req_pool_indices.dim() != 1 or req_pool_indices.dtype != torch.int64:
        raise ValueError("req_pool_indices: expected int64 [B]")
    _check_pair("buf_kv/buf_score", buf_kv, buf_score, m, X)
    B = req_pool_indices.shape[0]
    state = (B * m, m, req_pool_indices.contiguous(), buf_kv, buf_score, buf_kv.stride(0), buf_kv.stride(1))
    new = (kv_new, kv_new.stride(0), gate, gate.stride(0), positions.contiguous(), position_bias,
           position_bias.stride(0))  # fmt: skip
    return state, new


def compress_windows_and_insert(
    kv_new: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    positions: torch.Tensor,
    req_pool_indices: torch.Tensor,
    buf_kv: torch.Tensor,
    buf_score: torch.Tensor,
    ovl_kv: torch.Tensor | None,
    ovl_score: torch.Tensor | None,
    win_rows: torch.Tensor,
    win_prev: torch.Tensor,
    norm_weight: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    pool_flat: Any,
    win_out: torch.Tensor,
    eps: float,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Pool the ``J`` windows a forward completes, reading their rows in place, and write the entries.

    Same arguments and result as :func:`sgl_kernel_v4.ref.compressor_state.compress_windows_and_insert`
    (``kv_new`` / ``gate`` ``[T, X]`` model dtype, ``position_bias [m, X]`` fp32, ``positions [T]``
    and ``req_pool_indices [B]`` int64, fp32 states ``buf_* [R, m, X]`` / ``ovl_* [R, m, d]`` (CSA)
    or ``None`` (HCA), ``win_rows`` / ``win_prev [J, m]`` int64, ``cos`` / ``sin [J, r/2]``,
    ``win_out [J]``); ``out``: optional ``[J, d]`` buffer of kv_new's dtype.

    Returns:
        ``[J, d]`` entries in kv_new's dtype, bit-equal to ``compress_and_insert`` on the gathered
        windows (the unfused path).

    Raises:
        ValueError: shapes / dtypes / layouts out of range (``X`` a power of 2).
    """
    tab_state, tab_new = _tab_args(
        kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score
    )
    m, X = position_bias.shape
    overlap = ovl_kv is not None
    d = X // 2 if overlap else X
    win_rows = _check_rows("win_rows", win_rows, m)
    J = win_rows.shape[0]
    if overlap:
        if ovl_score is None:
            raise ValueError("ovl_score: required with ovl_kv")
        _check_pair("ovl_kv/ovl_score", ovl_kv, ovl_score, m, d)
        win_prev = _check_rows("win_prev", win_prev, m)
        if win_prev.shape[0] != J:
            raise ValueError(f"win_prev: expected [{J}, {m}], got {tuple(win_prev.shape)}")
        ovl = (ovl_kv, ovl_score, ovl_kv.stride(0), ovl_kv.stride(1))
    else:
        win_prev = win_rows
        ovl = (buf_kv, buf_score, 0, 0)  # never read
    out, pool, win_out = check_entry_args(
        J, d, kv_new.dtype, kv_new.device, norm_weight, cos, sin, pool_flat, win_out, out
    )
    if J == 0:
        return out
    L = 2 * m if overlap else m
    args = (win_rows, win_prev, *tab_state, *ovl, *tab_new)
    if uses_channel_split(L):
        ch = 64 if d >= 64 else d
        scratch = torch.empty((J, d), dtype=torch.float32, device=kv_new.device)
        _pool_tab_chunk_kernel[(J, cdiv(d, ch))](
            *args, scratch, d, BLOCK_L=next_power_of_2(L), CH=ch, OVERLAP=overlap,
            num_warps=8 if L * ch >= 4096 else 4,
        )  # fmt: skip
        norm_rope_write(scratch, norm_weight, cos, sin, pool, win_out, out, eps)
        return out
    _compress_tab_kernel[(J,)](
        *args, norm_weight, cos, cos.stride(0), sin, sin.stride(0), pool.storage, pool.rows_per_page,
        pool.page_stride, pool.row_stride, win_out, out, out.stride(0), L, cos.shape[1], float(eps),
        HALF_D=d // 2, BLOCK_L=default_block_l(L, d), OVERLAP=overlap, CODEC=pool.codec_id,
        NOPE=d - pool.rope_dim, num_warps=4 if d >= 256 else 2,
    )  # fmt: skip
    return out


def advance_compressor_state(
    kv_new: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    positions: torch.Tensor,
    req_pool_indices: torch.Tensor,
    buf_kv: torch.Tensor,
    buf_score: torch.Tensor,
    ovl_kv: torch.Tensor | None,
    ovl_score: torch.Tensor | None,
    snap_kv: torch.Tensor | None,
    snap_score: torch.Tensor | None,
    buf_rows: torch.Tensor,
    ovl_rows: torch.Tensor,
    snap_rows: torch.Tensor,
    snap_pages: torch.Tensor,
) -> None:
    """Advance the per-request compressor state in place (one or two launches).

    Same arguments and semantics as :func:`sgl_kernel_v4.ref.compressor_state.advance_compressor_state`:
    ``buf_* [R, m, X]`` fp32 from ``Tab[buf_rows [B, m]]``; CSA (``ovl_kv`` given) ``ovl_* [R, m, d]``
    from ``Tab[ovl_rows [B, m], :d]`` where ``ovl_rows[b, 0] >= 0``, snapshots ``snap_* [Wp, m, d]``
    at ``snap_pages [S]`` from ``Tab[snap_rows [S, m], :d]``. All sources are the state before the
    call: the snapshot launch runs first, the advance kernel loads before it stores.

    Raises:
        ValueError: shapes / dtypes / layouts out of range.
    """
    tab_state, tab_new = _tab_args(
        kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score
    )
    m, X = position_bias.shape
    B = req_pool_indices.shape[0]
    overlap = ovl_kv is not None
    d = X // 2 if overlap else X
    buf_rows = _check_rows("buf_rows", buf_rows, m)
    if buf_rows.shape[0] != B:
        raise ValueError(f"buf_rows: expected [{B}, {m}], got {tuple(buf_rows.shape)}")
    if B == 0:
        return
    block_m = next_power_of_2(m)
    if overlap:
        if ovl_score is None:
            raise ValueError("ovl_score: required with ovl_kv")
        _check_pair("ovl_kv/ovl_score", ovl_kv, ovl_score, m, d)
        ovl_rows = _check_rows("ovl_rows", ovl_rows, m)
        if ovl_rows.shape[0] != B:
            raise ValueError(f"ovl_rows: expected [{B}, {m}], got {tuple(ovl_rows.shape)}")
        if snap_kv is not None and snap_rows.shape[0] > 0:
            if snap_score is None:
                raise ValueError("snap_score: required with snap_kv")
            _check_pair("snap_kv/snap_score", snap_kv, snap_score, m, d)
            snap_rows = _check_rows("snap_rows", snap_rows, m)
            S = snap_rows.shape[0]
            if snap_pages.shape != (S,) or snap_pages.dtype != torch.int64:
                raise ValueError(f"snap_pages: expected int64 [{S}], got {tuple(snap_pages.shape)}")
            bx = min(d, max(16, _TILE // block_m))
            _snapshot_kernel[(S, cdiv(d, bx))](
                snap_rows, snap_pages.contiguous(), S, *tab_state, *tab_new, snap_kv, snap_score,
                snap_kv.stride(0), snap_kv.stride(1), BLOCK_M=block_m, BLOCK_X=bx, num_warps=4,
            )  # fmt: skip
        ovl = (ovl_kv, ovl_score, ovl_kv.stride(0), ovl_kv.stride(1))
    else:
        ovl_rows = buf_rows
        ovl = (buf_kv, buf_score, 0, 0)  # never read or written
    bx = min(X, max(16, _TILE // block_m))
    _advance_kernel[(B, cdiv(X, bx))](
        buf_rows, ovl_rows, *tab_state, *ovl, *tab_new, d, BLOCK_M=block_m, BLOCK_X=bx, OVERLAP=overlap,
        num_warps=4,
    )  # fmt: skip
