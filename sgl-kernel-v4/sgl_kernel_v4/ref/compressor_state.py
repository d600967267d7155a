"""Compressor windows and state advance on the per-request state (torch reference; CPU path and
test oracle of :mod:`sgl_kernel_v4.triton.compressor_state`).

A compressor (paper §2.3.1 CSA, §2.3.2 HCA; HF ``DeepseekV4CSACompressor`` /
``DeepseekV4HCACompressor``) of ratio ``m`` projects every token to ``kv`` and a gate score
(``X`` channels: ``2d`` with the CSA overlap, else ``d``), pools each completed window of ``m``
positions into one compressed entry and carries the partial window (and, CSA, the last window's
"Ca" half) per request between forwards. The rows a forward reads are addressed through two
virtual tables (``CompressPlan`` in ``sglang_v4/model_executor/forward_batch.py``):

* ``Tab [B*m + T, X]``: row ``r < B*m`` is the buffered row ``buf[slots[r // m], r % m]``, row
  ``B*m + t`` the new token ``t`` (``kv_new[t]``; score ``gate[t] + position_bias[positions[t] % m]``
  in fp32);
* ``CaTab [B*m + B*m + T, d]`` (CSA): row ``r < B*m`` is the overlap state
  ``ovl[slots[r // m], r % m]``, row ``B*m + r'`` the first ``d`` columns of ``Tab[r']``.

``-1`` rows read as a fill value. This module builds those tables with ``torch.cat`` (what
``Compressor.run`` did before the fused kernels); the Triton kernels read the rows in place.
"""

from __future__ import annotations

import torch

from .compressor import compress_and_insert

__all__ = ["compress_windows_and_insert", "advance_compressor_state", "gather_windows", "row_tables"]


def _gather(tab: torch.Tensor, idx: torch.Tensor, fill: float) -> torch.Tensor:
    """``tab[idx]`` with ``idx == -1`` rows set to ``fill``. tab ``[N, X]``, idx ``[...]`` -> ``[..., X]``."""
    out = tab[idx.clamp(min=0)]
    return out.masked_fill((idx < 0).unsqueeze(-1), fill)


def row_tables(
    kv_new: torch.Tensor,
    gate: torch.Tensor,
    position_bias: torch.Tensor,
    positions: torch.Tensor,
    req_pool_indices: torch.Tensor,
    buf_kv: torch.Tensor,
    buf_score: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``Tab`` row tables (module docstring) of kv and score, fp32 ``[B*m + T, X]`` each.

    Args: as :func:`compress_windows_and_insert`.
    """
    m = position_bias.shape[0]
    B = req_pool_indices.shape[0]
    X = kv_new.shape[-1]
    score_new = gate.float() + position_bias[positions % m]
    tab_kv = torch.cat([buf_kv[req_pool_indices].view(B * m, X), kv_new.float()], dim=0)
    tab_sc = torch.cat([buf_score[req_pool_indices].view(B * m, X), score_new], dim=0)
    return tab_kv, tab_sc


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
    pool_flat: object,
    win_out: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """Assemble the windows completed by a forward from the state and the new rows, pool them
    (:func:`~sgl_kernel_v4.ref.compressor.compress_and_insert`) and write the entries.

    Window ``j``: CSA (``ovl_kv`` given) ``L = 2m`` slots, ``CaTab[win_prev[j]]`` (kv fill 0, score
    fill ``-inf``: the empty overlap of window 0) then columns ``d:`` of ``Tab[win_rows[j]]``;
    HCA ``L = m`` slots ``Tab[win_rows[j]]``. The window kv is rounded to ``kv_new.dtype`` before
    pooling (it holds values of that dtype: the state keeps them in fp32).

    Args:
        kv_new: ``[T, X]`` projected kv of the new tokens (model dtype).
        gate: ``[T, X]`` gate projection of the new tokens (model dtype; the score is
            ``gate.float() + position_bias[positions % m]``).
        position_bias: ``[m, X]`` fp32 learned position bias (``ape``).
        positions: ``[T]`` int64 absolute positions of the new tokens.
        req_pool_indices: ``[B]`` int64 request slots (rows of the state tensors).
        buf_kv, buf_score: ``[R, m, X]`` fp32 partial-window state (read only here).
        ovl_kv, ovl_score: ``[R, m, d]`` fp32 overlap state (CSA), or ``None`` (HCA).
        win_rows: ``[J, m]`` int64 ``Tab`` rows of each window (``-1``: padded window).
        win_prev: ``[J, m]`` int64 ``CaTab`` rows of the previous window's Ca half (CSA; ``-1``:
            none); ignored without overlap.
        norm_weight: ``[d]`` fp32 RMSNorm weight; cos, sin: ``[J, r/2]`` rope at each window.
        pool_flat: the compressed pool layer (float ``[N, d]`` view or quantized row view).
        win_out: ``[J]`` int64 flat pool slot of each entry (``-1``: not written).
        eps: RMSNorm epsilon.

    Returns:
        ``[J, d]`` compressed entries in ``kv_new.dtype``.
    """
    kv_w, sc_w = gather_windows(
        kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score, ovl_kv, ovl_score,
        win_rows, win_prev,
    )  # fmt: skip
    return compress_and_insert(kv_w, sc_w, norm_weight, cos, sin, pool_flat, win_out, eps)


def gather_windows(
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows of :func:`compress_windows_and_insert` as ``compress_and_insert`` takes them:
    ``(kv_w [J, L, d]`` in ``kv_new.dtype``, ``sc_w [J, L, d]`` fp32), ``L = 2m`` (CSA) or ``m``.
    Padded windows (``win_rows`` ``-1``) hold arbitrary rows (their entries are not written)."""
    tab_kv, tab_sc = row_tables(kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score)
    if ovl_kv is not None:
        assert ovl_score is not None
        m, d = ovl_kv.shape[1], ovl_kv.shape[2]
        B = req_pool_indices.shape[0]
        ca_kv = torch.cat([ovl_kv[req_pool_indices].view(B * m, d), tab_kv[:, :d]], dim=0)
        ca_sc = torch.cat([ovl_score[req_pool_indices].view(B * m, d), tab_sc[:, :d]], dim=0)
        kv_w = torch.cat([_gather(ca_kv, win_prev, 0.0), tab_kv[win_rows][..., d:]], dim=1)
        sc_w = torch.cat([_gather(ca_sc, win_prev, float("-inf")), tab_sc[win_rows][..., d:]], dim=1)
    else:
        kv_w = tab_kv[win_rows]
        sc_w = tab_sc[win_rows]
    return kv_w.to(kv_new.dtype), sc_w


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
    """Advance the per-request compressor state past a forward's tokens (in place).

    Every source row is read from the state as it was before the call (``Tab`` is built first):
    ``buf[slots[b]] = Tab[buf_rows[b]]`` (``-1`` rows: 0); CSA (``ovl_kv`` given):
    ``ovl[slots[b]] = Tab[ovl_rows[b], :d]`` where ``ovl_rows[b, 0] >= 0`` (else kept) and the
    resume snapshots ``snap[snap_pages[s]] = Tab[snap_rows[s], :d]`` (``-1`` rows: 0; padded
    snapshots go to the dummy window page 0). Snapshots naming the same page (the window ring
    reuses a page within a long chunk) take the last one's rows, as in sequential order; picking
    them makes the only host synchronisation (a boolean mask).

    Args:
        kv_new, gate, position_bias, positions, req_pool_indices: as
            :func:`compress_windows_and_insert`.
        buf_kv, buf_score: ``[R, m, X]`` fp32 partial-window state (written).
        ovl_kv, ovl_score: ``[R, m, d]`` fp32 overlap state (written; CSA), or ``None``.
        snap_kv, snap_score: ``[Wp, m, d]`` fp32 snapshots per window page (written), or ``None``.
        buf_rows: ``[B, m]`` int64 ``Tab`` rows of each request's new partial window.
        ovl_rows: ``[B, m]`` int64 ``Tab`` rows of each request's last completed window.
        snap_rows: ``[S, m]`` int64 ``Tab`` rows of the windows ending a block; snap_pages ``[S]``.
    """
    tab_kv, tab_sc = row_tables(kv_new, gate, position_bias, positions, req_pool_indices, buf_kv, buf_score)
    slots = req_pool_indices
    buf_kv[slots] = _gather(tab_kv, buf_rows, 0.0)
    buf_score[slots] = _gather(tab_sc, buf_rows, 0.0)
    if ovl_kv is None:
        return
    assert ovl_score is not None
    d = ovl_kv.shape[-1]
    has = (ovl_rows[:, 0] >= 0)[:, None, None]
    rows = ovl_rows.clamp(min=0)
    ovl_kv[slots] = torch.where(has, tab_kv[rows][..., :d], ovl_kv[slots])
    ovl_score[slots] = torch.where(has, tab_sc[rows][..., :d], ovl_score[slots])
    if snap_rows.shape[0] > 0 and snap_kv is not None and snap_score is not None:
        # the last snapshot of each page (an index_put with repeated indices leaves the winner
        # unspecified)
        last = ~(snap_pages[:, None] == snap_pages[None, :]).triu(1).any(1)
        pages, rows = snap_pages[last], snap_rows[last]
        snap_kv[pages] = _gather(tab_kv, rows, 0.0)[..., :d]
        snap_score[pages] = _gather(tab_sc, rows, 0.0)[..., :d]
