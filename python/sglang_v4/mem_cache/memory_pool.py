"""Paged, tri-structured KV storage for DeepSeek-V4: one tensor per KV kind, plus compressor state.

The pool stores, for each :class:`~sglang_v4.mem_cache.kv_spec.KVKind` of the model, one tensor
``[layers of that kind, pages, rows, row_elems]`` sized by the kind's
:class:`~sglang_v4.mem_cache.kv_spec.KVCacheSpec`, and for each compressor (CSA main, CSA indexer,
HCA) its fp32 state (:class:`~sglang_v4.mem_cache.compressor_state.CompressorStateStorage`).
Callers never name tensors: :meth:`DSV4KVPool.rows` gives the flat ``[N, d]`` entries of a kind for
a model layer, :meth:`DSV4KVPool.compressor_state` a compressor's state for a model layer; the pool
maps the model layer to the kind's layer slot.

Page-id spaces (one :class:`~sglang_v4.mem_cache.allocator.PageAllocator` each; page 0 is a
reserved dummy page):

* **block pages** (``block_alloc``) -- one per 256-token logical block. One id indexes the CSA main,
  CSA indexer and HCA pages of every layer: a request's full compressed history, shared by the
  radix cache.
* **window pages** (``window_alloc``) -- one per ``sliding_window`` (128) raw positions of every
  layer. A request keeps only the pages that cover its last 128 positions (older ones are freed as
  it grows). The window page covering the last 128 positions of a block also carries, under the
  same id, the CSA compressors' overlap snapshot at that block end: together they are the block
  end's *resume state*, which the radix cache keeps per cached block.
* **request slots** (``req_slots``, SGLang's ``req_pool_idx``) -- the live compressor state of a
  running request.

The page table of a request (its block pages and window pages) is held by the scheduler and passed
to each forward (``ReqForwardInput``); the block pages are mirrored on the device in
:attr:`DSV4KVPool.req_to_page` (one row per request slot, updated with the pages that changed),
which the attention and indexer kernels read.

Storage formats (``kv_cache_dtype``; byte layouts in :mod:`~sglang_v4.mem_cache.kv_format`):

* ``"auto"`` / ``"fp32"`` / ``"bf16"``: entry tensors are plain float tensors and :meth:`rows`
  returns plain ``.view(-1, d)`` views, which the Triton kernels and the torch reference ops index
  directly.
* ``"fp8_e4m3"``: CSA main, HCA and sliding-window entries are 8-bit rows (584 B for V4's 512-d
  entries, 194 B for the tiny preset), CSA indexer keys fp8 (``d + 4`` B) or, with
  ``fp4_indexer``, fp4 e2m1 (``d / 2 + d / 32`` B). They live in uint8 page storage whose page
  stride is the kind's size class (37,440 / 8,640 / 1,728 B for V4 in fp8), and :meth:`rows`
  returns :class:`~sglang_v4.mem_cache.kv_format.KVRowsView` objects that quantize on write and
  dequantize (to the compute dtype) on read, so the reference ops run on them unchanged.

Compressor state is fp32 in every format.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.compressor_state import CompressorState, CompressorStateStorage
from sglang_v4.mem_cache.kv_format import KVRowsView, normalize_kv_cache_dtype
from sglang_v4.mem_cache.kv_spec import (
    KVCacheSpec,
    KVKind,
    KVLayout,
    PageSpace,
    build_kv_layout,
    check_page_size_fits,
)
from sglang_v4.mem_cache.req_to_page import ReqToPageTable


class ReqSlotAllocator:
    """Free list of request slots ``1 .. max_num_reqs`` (slot 0 is the padding slot)."""

    def __init__(self, max_num_reqs: int) -> None:
        self.size = max_num_reqs
        self._free = list(range(max_num_reqs, 0, -1))

    def alloc(self) -> int | None:
        """Take a free slot, or ``None`` if all are in use."""
        return self._free.pop() if self._free else None

    def free(self, slot: int) -> None:
        """Return ``slot``.

        Raises:
            ValueError: if it is not allocated (double free or out of range).
        """
        if slot in self._free or not (1 <= slot <= self.size):
            raise ValueError(f"request slot {slot} freed but not allocated")
        self._free.append(slot)

    @property
    def available(self) -> int:
        """Free request slots."""
        return len(self._free)


class DSV4KVPool:
    """All KV tensors of a DeepSeek-V4 model, stored by kind, and the page / slot allocators.

    Args:
        model_config: the model's :class:`ModelConfig`.
        page_size: tokens per logical block (256; a multiple of both compression ratios).
        num_block_pages: usable block pages.
        num_window_pages: usable window pages.
        max_num_reqs: request slots.
        compute_dtype: the model's dtype (``torch.float32`` or ``torch.bfloat16``): the storage
            dtype of the entries when ``kv_cache_dtype`` is ``"auto"``, and the dtype reads of
            quantized entries return.
        device: where the tensors live.
        kv_cache_dtype: ``"auto"`` (= ``compute_dtype``), ``"fp32"``, ``"bf16"`` or ``"fp8_e4m3"``
            (aliases of :func:`~sglang_v4.mem_cache.kv_format.normalize_kv_cache_dtype` accepted).
        fp4_indexer: store CSA indexer keys as fp4 e2m1 (``--enable-fp4-indexer``).
        padded: give every quantized page its size-class stride (the peers' page geometry; the
            padding is what :meth:`fragmentation_bytes` counts). ``False`` packs rows
            contiguously. Float storage is always unpadded (its V4 pages are already multiples of
            the 512-byte unit).
        max_pages_per_req: columns of the device page table :attr:`req_to_page` (block pages one
            request can hold: ``ceil(context / page_size)``); default ``num_block_pages``.

    Attributes: ``layout`` (:class:`~sglang_v4.mem_cache.kv_spec.KVLayout`: the spec of each kind),
    ``kv_cache_dtype`` (canonical name), ``fp4_indexer``, ``compute_dtype``, ``window``
    (``sliding_window``), ``block_alloc`` / ``window_alloc`` (:class:`PageAllocator`),
    ``req_slots`` (:class:`ReqSlotAllocator`), ``req_to_page``
    (:class:`~sglang_v4.mem_cache.req_to_page.ReqToPageTable`: the running requests' block pages on
    the device, which the kernels read). Per kind: :meth:`storage_dtype`, :meth:`storage`,
    :meth:`rows`; :attr:`quantized_kinds`.

    Raises:
        ValueError: if ``page_size`` is not a multiple of the window and of the compression ratio
            of each compressed layer kind the model has, a
            count is negative, ``compute_dtype`` is not fp32 / bf16, or ``kv_cache_dtype`` is
            unknown or cannot hold the model's dims.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        page_size: int,
        num_block_pages: int,
        num_window_pages: int,
        max_num_reqs: int,
        compute_dtype: torch.dtype,
        device: torch.device | str,
        kv_cache_dtype: str = "auto",
        fp4_indexer: bool = False,
        padded: bool = True,
        max_pages_per_req: int | None = None,
    ) -> None:
        mc = model_config
        self.model_config = mc
        self._state_op_log: list[tuple[str, tuple[int, ...]]] | None = None
        self.page_size = page_size
        self.window = mc.sliding_window
        check_page_size_fits(
            page_size,
            self.window,
            mc.csa_ratio if mc.csa_layers else None,
            mc.hca_ratio if mc.hca_layers else None,
        )
        for name, v in (
            ("num_block_pages", num_block_pages),
            ("num_window_pages", num_window_pages),
            ("max_num_reqs", max_num_reqs),
        ):
            if v < 0:
                raise ValueError(f"{name}: must be >= 0, got {v}")
        if compute_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"compute_dtype: expected torch.float32 or torch.bfloat16, got {compute_dtype}")
        self.device = torch.device(device)
        self.compute_dtype = compute_dtype
        self.kv_cache_dtype = normalize_kv_cache_dtype(kv_cache_dtype, compute_dtype)
        self.fp4_indexer = bool(fp4_indexer)
        self.padded = bool(padded)
        self.layout: KVLayout = build_kv_layout(mc, self.kv_cache_dtype, self.fp4_indexer, page_size)
        self.num_block_pages = num_block_pages
        self.num_window_pages = num_window_pages
        self.max_num_reqs = max_num_reqs
        # units of each page-id space, the reserved page / slot 0 included
        units = {PageSpace.BLOCK: num_block_pages + 1, PageSpace.WINDOW: num_window_pages + 1}
        self._padding: dict[KVKind, int] = {}
        self._kv: dict[KVKind, torch.Tensor] = {
            kind: self._allocate(spec, units[spec.space]) for kind, spec in self.layout.kinds.items()
        }
        self._states: dict[KVKind, CompressorStateStorage] = {
            kind: CompressorStateStorage(spec, max_num_reqs + 1, num_window_pages + 1, self.device)
            for kind, spec in self.layout.states.items()
        }
        self.block_alloc = PageAllocator(num_block_pages, "block_pages")
        self.window_alloc = PageAllocator(num_window_pages, "window_pages")
        self.req_slots = ReqSlotAllocator(max_num_reqs)
        self.req_to_page = ReqToPageTable(
            max_num_reqs + 1, max(1, int(max_pages_per_req or num_block_pages)), self.device
        )

    def _allocate(self, spec: KVCacheSpec, units: int) -> torch.Tensor:
        """Storage of ``spec``'s kind for ``units`` block / window pages.

        Float storage: ``[layers, units, rows_per_unit, d]``, contiguous. Quantized storage:
        ``[layers, units * pages_per_unit, rows_per_page, row_bytes]`` physical pages (class-strided
        when ``padded``); a window page ``w`` is physical pages ``w*u .. w*u+u-1`` (``u = 2`` for
        V4), so flat slot ``w * window + j`` is the same slot number in both.
        """
        entry = spec.entry
        if not entry.quantized or spec.rows_per_page * spec.pages_per_unit != spec.rows_per_unit:
            # float, or a physical page larger than a window page (page_size > 4 * window): one
            # unpadded row block per unit, so flat slots stay ``unit * rows_per_unit + j``
            shape = (spec.num_layers, units, spec.rows_per_unit, entry.row_elems)
            return torch.zeros(shape, dtype=entry.storage_dtype, device=self.device)
        phys = units * spec.pages_per_unit
        if self.padded:
            self._padding[spec.kind] = spec.num_layers * phys * spec.padding_per_page
        return spec.allocate(phys, self.device, padded=self.padded)

    # ---- per-kind access -------------------------------------------------------------------
    def spec(self, kind: KVKind) -> KVCacheSpec:
        """The spec of ``kind``.

        Raises:
            ValueError: if the model has no layer with this kind.
        """
        spec = self.layout.kinds.get(kind)
        if spec is None:
            raise ValueError(f"kind: the model has no {KVKind(kind).value} KV")
        return spec

    @property
    def quantized_kinds(self) -> tuple[KVKind, ...]:
        """Kinds stored quantized (uint8 pages read through ``KVRowsView``)."""
        return tuple(k for k, s in self.layout.kinds.items() if s.entry.quantized)

    def storage_dtype(self, kind: KVKind) -> torch.dtype:
        """Element dtype of ``kind``'s storage (``torch.uint8`` when quantized)."""
        return self.spec(kind).entry.storage_dtype

    def storage(self, kind: KVKind) -> torch.Tensor:
        """The whole storage of ``kind``: ``[layers of the kind, pages, rows, row_elems]`` (see
        :meth:`_allocate` for the page axis of quantized window storage)."""
        self.spec(kind)
        return self._kv[kind]

    def rows(self, kind: KVKind, layer: int) -> torch.Tensor | KVRowsView:
        """Flat ``[N, d]`` entries of ``kind`` for model layer ``layer``.

        ``N`` is ``(pages + 1) * rows_per_unit``: ``(num_block_pages + 1) * page_size / ratio`` for
        the block kinds, ``(num_window_pages + 1) * sliding_window`` for ``swa``; flat slot ``s``
        is unit ``s // rows_per_unit``, row ``s % rows_per_unit``. ``d`` is ``head_dim`` (or
        ``index_head_dim`` for ``csa_indexer``). Float storage gives a plain tensor view (Triton
        kernels need real tensors); quantized storage a ``KVRowsView`` of the same shape that
        quantizes on ``view[slots] = x`` and dequantizes to ``compute_dtype`` on ``view[idx]``.

        Raises:
            ValueError: if the model has no ``kind`` or layer ``layer`` does not have it.
        """
        spec = self.spec(kind)
        t = self._kv[kind][spec.layer_slot(layer)]
        if spec.entry.quantized:
            return KVRowsView(t, spec.entry, out_dtype=self.compute_dtype)
        return t.view(-1, t.shape[-1])

    def compressor_state(self, kind: KVKind, layer: int) -> CompressorState:
        """The state of the compressor producing ``kind`` (``csa_main``, ``csa_indexer`` or
        ``hca``) in model layer ``layer``, with :meth:`rows` of that kind as its output.

        Raises:
            ValueError: if there is no such compressor in that layer.
        """
        st = self._states.get(kind)
        if st is None:
            raise ValueError(f"kind: the model has no {KVKind(kind).value} compressor")
        return st.layer(st.spec.layer_slot(layer), self.rows(kind, layer))

    def state_storage(self, kind: KVKind) -> CompressorStateStorage:
        """All layers' state of the compressor producing ``kind`` (KeyError if none)."""
        return self._states[kind]

    # ---- request state -------------------------------------------------------------------
    #: The request-state operations a tensor-parallel rank 0 records and replays on the other
    #: ranks (``record_state_ops``); every rank keeps the same replicated state.
    STATE_OPS = ("reset_req_state", "copy_req_state", "load_resume_state")

    def record_state_ops(self) -> None:
        """From now on, log every request-state operation (:data:`STATE_OPS`) besides applying it,
        for :meth:`take_state_ops` (tensor-parallel rank 0: the other ranks replay the log before
        the next forward)."""
        self._state_op_log = []

    def take_state_ops(self) -> list[tuple[str, tuple[int, ...]]]:
        """The operations logged since the last call, in order (``[]`` when not recording)."""
        log = self._state_op_log
        if not log:
            return []
        self._state_op_log = []
        return log

    def apply_state_op(self, name: str, args: tuple[int, ...]) -> None:
        """Replay one logged operation.

        Raises:
            ValueError: ``name`` is not one of :data:`STATE_OPS`.
        """
        if name not in self.STATE_OPS:
            raise ValueError(f"state op: expected one of {self.STATE_OPS}, got {name!r}")
        getattr(self, name)(*args)

    def _log_state_op(self, name: str, *args: int) -> None:
        log = self._state_op_log
        if log is not None:
            log.append((name, tuple(int(a) for a in args)))

    def reset_req_state(self, slot: int) -> None:
        """Zero a request slot's compressor state (a fresh request at position 0) and mark its
        page-table row stale (a new request's pages)."""
        self._log_state_op("reset_req_state", slot)
        for st in self._states.values():
            st.reset(slot)
        self.req_to_page.invalidate(slot)

    def block_pages_changed(self, slot: int, first_block: int) -> None:
        """The request in ``slot`` now has other block pages from logical block ``first_block`` on
        (the radix cache swapped a duplicate for its own page): the next forward re-writes them
        into :attr:`req_to_page`."""
        self.req_to_page.invalidate(slot, first_block)

    def copy_req_state(self, dst_slot: int, src_slot: int) -> None:
        """Copy request slot ``src_slot``'s compressor state into ``dst_slot``."""
        self._log_state_op("copy_req_state", dst_slot, src_slot)
        for st in self._states.values():
            st.copy(dst_slot, src_slot)

    def load_resume_state(self, slot: int, window_page: int) -> None:
        """Initialise a request's compressor state from the resume snapshot under ``window_page``.

        At a block boundary every partial window is empty, so only the CSA overlap halves are
        restored; the raw window itself is read in place from ``window_page``. The slot's
        page-table row is marked stale (a new request's pages).
        """
        self._log_state_op("load_resume_state", slot, window_page)
        for st in self._states.values():
            st.load_snapshot(slot, window_page)
        self.req_to_page.invalidate(slot)

    # ---- accounting ------------------------------------------------------------------------
    def stats(self) -> dict[str, dict[str, int]]:
        """Per pool: total, free and used pages (``get_server_info()["kv_pool"]``)."""
        return {
            "block_pages": self.block_alloc.stats(),
            "window_pages": self.window_alloc.stats(),
            "req_slots": {
                "total": self.req_slots.size,
                "free": self.req_slots.available,
                "used": self.req_slots.size - self.req_slots.available,
            },
        }

    def tensors(self) -> Iterator[torch.Tensor]:
        """Every tensor the pool holds: entry storage of each kind, then compressor state."""
        yield from self._kv.values()
        for st in self._states.values():
            yield from st.request_tensors()
            yield from st.snapshot_tensors()

    def memory_bytes(self) -> int:
        """Bytes held by all KV and state tensors (the whole underlying buffers, so the page
        padding of class-strided quantized storage is counted)."""
        seen: dict[int, int] = {}
        for t in self.tensors():
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def fragmentation_bytes(self) -> int:
        """Bytes allocated inside pages that hold no entry: the size-class padding of every
        quantized page (the dummy page 0 included), 0 for unpadded / float storage. The planner's
        ``KVPlan.fragmentation_bytes`` counts the same padding over the usable pages only."""
        return sum(self._padding.values())
