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

__all__ = [
    "CODECS",
    "MAX_SLOTS",
    "entry_align",
    "entry_bytes",
    "PagedRows",
    "as_paged",
    "entry_slots",
    "window_slots",
]

#: Codec name -> the integer the Triton kernels take as a constexpr.
CODECS = {"float": 0, "fp8_main": 1, "fp8_indexer": 2, "fp4_indexer": 3}


def entry_bytes(codec: str, dim: int, rope_dim: int = 0) -> int:
    """Bytes of one entry of a quantized codec (the formats of :mod:`sgl_kernel_v4.ref.kv_quant`):
    ``fp8_main`` = ``nope`` e4m3 + ``rope_dim`` bf16 + ``nope / 64`` ue8m0 scales + 1 pad byte (584 for
    448 + 64); ``fp8_indexer`` = ``dim`` e4m3 + an fp32 scale (132 for 128); ``fp4_indexer`` =
    ``dim / 2`` e2m1 pairs + ``dim / 32`` ue8m0 scales (68 for 128).

    Raises:
        ValueError: for ``codec="float"`` or an unknown codec."""
    nope = dim - rope_dim
    if codec == "fp8_main":
        return nope + 2 * rope_dim + nope // 64 + 1
    if codec == "fp8_indexer":
        return dim + 4
    if codec == "fp4_indexer":
        return dim // 2 + dim // 32
    raise ValueError(f"codec: expected a quantized codec, got {codec!r}")


def entry_align(codec: str, dim: int, rope_dim: int = 0) -> int:
    """Byte alignment the kernels state to the compiler for the entries of a quantized codec: the
    largest power of two <= 16 dividing :func:`entry_bytes` (8 for 584-byte fp8 main entries, 4 for
    the 132- and 68-byte indexer keys); see ``aligned`` in :mod:`sgl_kernel_v4.triton.kv_codec`."""
    n = entry_bytes(codec, dim, rope_dim)
    return min(16, n & -n)


#: Most slots a pool layer may have: the kernels split a slot into page and row in int32.
MAX_SLOTS = 2**31 - 1


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

    Raises:
        ValueError: for an unknown codec, more than ``2**31 - 1`` slots (the kernels split a slot
            into page and row in int32: :func:`sgl_kernel_v4.triton.kv_codec.row_offsets`), or a
            quantized layout whose storage pointer, page stride
            or row stride is not a multiple of the codec's alignment (:func:`entry_align`): the
            kernels state that alignment to the compiler, so a misaligned layout would fault.
    """

    storage: torch.Tensor
    codec: str
    dim: int
    rope_dim: int
    rows_per_page: int
    page_stride: int
    row_stride: int
    num_slots: int

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"codec: expected one of {sorted(CODECS)}, got {self.codec!r}")
        if self.num_slots > MAX_SLOTS:
            raise ValueError(
                f"num_slots: the kernels address at most {MAX_SLOTS} slots, got {self.num_slots}"
            )
        if self.codec == "float":
            return
        align = entry_align(self.codec, self.dim, self.rope_dim)
        for name, v in (("page_stride", self.page_stride), ("row_stride", self.row_stride),
                        ("storage data pointer", self.storage.data_ptr())):  # fmt: skip
            if v % align:
                raise ValueError(f"{name}: {self.codec} entries must be {align}-byte aligned, got {v}")

    @property
    def codec_id(self) -> int:
        """The integer code of :attr:`codec` the kernels take (``CODECS``)."""
        return CODECS[self.codec]

    @property
    def device(self) -> torch.device:
        """The storage's device."""
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
