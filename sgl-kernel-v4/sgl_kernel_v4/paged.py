"""Paged KV addressing shared by the torch references and the Triton kernels.

The attention and indexer ops read the KV pools through page tables, never through per-token
candidate lists (SGLang's ``req_to_token`` idea at page granularity):

* **compressed entries** (CSA main, CSA indexer keys, HCA): entry ``w`` of the request in row
  ``r`` of the page table ``req_to_page [R, P]`` lives at flat slot
  ``req_to_page[r, w // e] * e + w % e`` (``e`` = entries per block page: ``page_size / ratio``,
  64 for CSA and 2 for HCA with 256-token pages); the token at position ``p`` sees the entries
  ``w < (p + 1) // ratio`` (``visible[t]``).
* **sliding window**: key ``j`` of the token at position ``p`` is position ``k = p - W + 1 + j``
  (``W`` = window), at slot ``page * W + k % W`` with ``page = swa_pages[t, 1]`` (the window page
  of the token's own span) when ``k // W == p // W``, else ``swa_pages[t, 0]`` (the span before);
  no key where ``k < 0`` or the page is ``-1``.

A pool layer is addressed through :class:`PagedRows`: flat slot ``s`` is row ``s % rows_per_page``
of page ``s // rows_per_page``, at element offset ``(s // rows_per_page) * page_stride +
(s % rows_per_page) * row_stride`` of ``storage``. Float pools hold plain values; quantized pools
hold the byte formats of :mod:`sgl_kernel_v4.ref.kv_quant` (codecs ``fp8_main``, ``fp8_indexer``,
``fp4_indexer``) in ``uint8`` storage whose page stride may exceed its rows (size-class padding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CODECS", "PagedRows", "as_paged", "entry_slots", "window_slots"]

#: Codec name -> the integer the Triton kernels take as a constexpr.
CODECS = {"float": 0, "fp8_main": 1, "fp8_indexer": 2, "fp4_indexer": 3}


@dataclass(frozen=True)
class PagedRows:
    """How a kernel addresses the entries of one pool layer.

    Attributes:
        storage: the tensor whose first element is slot 0 (a float tensor for ``codec="float"``,
            else ``uint8``); only its data pointer and dtype are read by the kernels.
        codec: ``"float"``, ``"fp8_main"``, ``"fp8_indexer"`` or ``"fp4_indexer"``.
        dim: values per entry (``head_dim`` or ``index_head_dim``).
        rope_dim: trailing rope values kept bf16 by ``fp8_main`` (0 otherwise).
        rows_per_page / page_stride / row_stride: slot ``s`` starts at element
            ``(s // rows_per_page) * page_stride + (s % rows_per_page) * row_stride``.
        num_slots: slots addressable (for bounds in tests and error messages).
    """

    storage: torch.Tensor
    codec: str
    dim: int
    rope_dim: int
    rows_per_page: int
    page_stride: int
    row_stride: int
    num_slots: int

    @property
    def codec_id(self) -> int:
        return CODECS[self.codec]

    @property
    def device(self) -> torch.device:
        return self.storage.device


def as_paged(rows: Any) -> PagedRows:
    """The :class:`PagedRows` of a pool layer.

    Args:
        rows: a float ``[N, d]`` tensor with a contiguous last dim (a float pool's flat view), a
            :class:`PagedRows`, or an object with a ``paged()`` method returning one (the quantized
            row view of the runtime's pool).

    Raises:
        ValueError: for anything else.
    """
    if isinstance(rows, PagedRows):
        return rows
    if isinstance(rows, torch.Tensor):
        if rows.dim() != 2 or not rows.is_floating_point() or (rows.shape[0] and rows.stride(1) != 1):
            raise ValueError(
                f"rows: expected a float [N, d] tensor with a contiguous last dim, got "
                f"{rows.dtype} {tuple(rows.shape)}"
            )
        return PagedRows(rows, "float", rows.shape[1], 0, 1, rows.stride(0), 0, rows.shape[0])
    paged = getattr(rows, "paged", None)
    if paged is None:
        raise ValueError(f"rows: expected a float tensor or a paged row view, got {type(rows).__name__}")
    return paged()


def entry_slots(
    req_to_page: torch.Tensor, rows: torch.Tensor, entries: torch.Tensor, entries_per_page: int
) -> torch.Tensor:
    """Flat slots of compressed entries through the page table (module docstring).

    Args:
        req_to_page: ``[R, P]`` int page table (``-1`` = no page).
        rows: ``[...]`` int64 page-table row of each entry's request (broadcast with ``entries``).
        entries: ``[...]`` int64 entry indices, ``-1`` = none.
        entries_per_page: ``e``.

    Returns:
        ``[...]`` int64 slots, ``-1`` where ``entries`` is ``-1`` or the page is missing.
    """
    e = int(entries_per_page)
    col = (entries.clamp(min=0) // e).clamp(max=req_to_page.shape[1] - 1)
    page = req_to_page[torch.broadcast_to(rows, entries.shape), col].long()
    ok = (entries >= 0) & (page >= 0)
    return torch.where(ok, page * e + entries.clamp(min=0) % e, -1)


def window_slots(positions: torch.Tensor, swa_pages: torch.Tensor, window: int) -> torch.Tensor:
    """``[T, window]`` flat window-pool slots of each token's sliding keys (module docstring),
    ``-1`` where there is none. ``positions [T]`` int64, ``swa_pages [T, 2]`` int64."""
    W = int(window)
    ar = torch.arange(W, dtype=torch.int64, device=positions.device)
    kp = positions[:, None] - (W - 1) + ar[None, :]
    page = torch.where(kp // W == (positions // W)[:, None], swa_pages[:, 1:2], swa_pages[:, 0:1])
    return torch.where((kp >= 0) & (page >= 0), page * W + kp % W, -1)
