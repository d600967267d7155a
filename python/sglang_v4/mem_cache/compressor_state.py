"""fp32 compressor state of the CSA main, CSA indexer and HCA compressors, held by the KV pool.

A compressor pools each completed window of ``ratio`` tokens into one entry (paper §2.3). Between
forwards it carries, per request and layer, the partial window (< ratio tokens of projected kv and
gate score) and, for the overlapped CSA compressors, the previous window's "Ca" half. At a
multiple of ``page_size`` (256 = 64 x 4 = 2 x 128) every partial window is empty, so what a request
needs to resume at a block end is the compressed entries, the raw window and the Ca halves: the
latter are snapshotted per window page (the resume state the radix cache keeps).

:class:`CompressorStateStorage` holds one compressor's tensors for all its layers (sized by its
:class:`~sglang_v4.mem_cache.kv_spec.CompressorStateSpec`); :class:`CompressorState` is the view of
one layer that :meth:`DSV4KVPool.compressor_state` hands to the compressor.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from sglang_v4.mem_cache.kv_format import KVRowsView
from sglang_v4.mem_cache.kv_spec import CompressorStateSpec

__all__ = ["CompressorState", "CompressorStateStorage"]


@dataclass
class CompressorState:
    """One layer's compressor state (fp32 views into the pool) and the rows it writes.

    Attributes:
        buf_kv / buf_score: ``[R, m, X]`` partial-window rows per request slot (``X = 2d`` with
            overlap, else ``d``).
        ovl_kv / ovl_score: ``[R, m, d]`` the last completed window's Ca half (overlap only, else
            ``None``).
        snap_kv / snap_score: ``[Wp, m, d]`` resume snapshots of the Ca half per window page
            (overlap only, else ``None``).
        rows: ``[N, d]`` flat entries of the kind this compressor produces (a plain tensor for
            float storage, a :class:`~sglang_v4.mem_cache.kv_format.KVRowsView` when quantized).
    """

    buf_kv: torch.Tensor
    buf_score: torch.Tensor
    ovl_kv: torch.Tensor | None
    ovl_score: torch.Tensor | None
    snap_kv: torch.Tensor | None
    snap_score: torch.Tensor | None
    rows: torch.Tensor | KVRowsView


class CompressorStateStorage:
    """The state tensors of one compressor, all its layers.

    Args:
        spec: the compressor's state spec.
        num_req_slots: request slots including the padding slot 0.
        num_window_pages: window pages including the dummy page 0 (snapshots; overlap only).
        device: where the tensors live.

    Attributes:
        buf_kv / buf_score: ``[layers, R, m, X]`` fp32; ovl_kv / ovl_score: ``[layers, R, m, d]``;
        snap_kv / snap_score: ``[layers, Wp, m, d]`` (``None`` without overlap).
    """

    def __init__(
        self, spec: CompressorStateSpec, num_req_slots: int, num_window_pages: int, device: torch.device | str
    ) -> None:
        self.spec = spec
        n, m, d, x = spec.num_layers, spec.ratio, spec.dim, spec.buffer_width

        def z(*shape: int) -> torch.Tensor:
            return torch.zeros(*shape, dtype=torch.float32, device=device)

        self.buf_kv = z(n, num_req_slots, m, x)
        self.buf_score = z(n, num_req_slots, m, x)
        self.ovl_kv = z(n, num_req_slots, m, d) if spec.overlap else None
        self.ovl_score = z(n, num_req_slots, m, d) if spec.overlap else None
        self.snap_kv = z(n, num_window_pages, m, d) if spec.overlap else None
        self.snap_score = z(n, num_window_pages, m, d) if spec.overlap else None

    def request_tensors(self) -> Iterator[torch.Tensor]:
        """The tensors indexed by request slot (dim 1)."""
        for t in (self.buf_kv, self.buf_score, self.ovl_kv, self.ovl_score):
            if t is not None:
                yield t

    def snapshot_tensors(self) -> Iterator[torch.Tensor]:
        """The tensors indexed by window page (dim 1); none without overlap."""
        for t in (self.snap_kv, self.snap_score):
            if t is not None:
                yield t

    def layer(self, slot: int, rows: torch.Tensor | KVRowsView) -> CompressorState:
        """Views of layer slot ``slot`` (``spec.layer_slot(model_layer)``) writing into ``rows``."""

        def at(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[slot]

        return CompressorState(
            self.buf_kv[slot],
            self.buf_score[slot],
            at(self.ovl_kv),
            at(self.ovl_score),
            at(self.snap_kv),
            at(self.snap_score),
            rows,
        )

    def reset(self, req_slot: int) -> None:
        """Zero a request slot's state (a fresh request at position 0)."""
        for t in self.request_tensors():
            t[:, req_slot].zero_()

    def copy(self, dst_slot: int, src_slot: int) -> None:
        """Copy request slot ``src_slot``'s state into ``dst_slot`` (a fork at the same position)."""
        for t in self.request_tensors():
            t[:, dst_slot] = t[:, src_slot]

    def load_snapshot(self, req_slot: int, window_page: int) -> None:
        """Set a request slot's Ca halves from the snapshot under ``window_page`` (no-op without
        overlap). At a block boundary the partial windows are empty, so nothing else is loaded."""
        if self.ovl_kv is None or self.ovl_score is None or self.snap_kv is None or self.snap_score is None:
            return
        self.ovl_kv[:, req_slot] = self.snap_kv[:, window_page]
        self.ovl_score[:, req_slot] = self.snap_score[:, window_page]
