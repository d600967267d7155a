"""Paged, tri-structured KV storage for DeepSeek-V4 (RUNTIME.md "KV memory").

Two page-id spaces, each with its own :class:`PageAllocator` (page 0 is a reserved dummy page):

* **block pages** — one per 256-token logical block (``page_size``). One id indexes, for every layer
  of its kind, the CSA main pool (``page_size / 4`` entries of ``head_dim``), the CSA indexer pool
  (``page_size / 4`` entries of ``index_head_dim``) and the HCA pool (``page_size / 128`` entries of
  ``head_dim``). This is a request's full compressed history; the radix cache shares these pages.
* **window pages** — one per ``sliding_window`` (128) positions of raw KV, for all layers. A request
  keeps only the pages that cover its last 128 positions (older ones are freed as it grows). The
  window page covering the last 128 positions of a block also carries, under the same id, the CSA
  compressor overlap halves ("Ca", kv and gate score, main and indexer) at that block end: together
  they are the block end's *resume state* (DSV4_MODEL.md "State that decoding carries"), which the
  radix cache keeps per cached block.

Per running request (indexed by ``req_pool_idx``) the pool also holds the live compressor state in
fp32: the partial window (< ratio tokens of projected kv and gate score) for the CSA main, CSA
indexer and HCA compressors, and the CSA overlap halves of the last complete window.
``req_to_block`` / ``req_to_window`` map a request slot to its pages (SGLang's ``req_to_token``).

Storage formats (``kv_cache_dtype``; byte layouts in ``mem_cache/kv_layout.py`` and
``sgl_kernel_v4/ref/kv_quant.py``):

* ``"auto"`` / ``"fp32"`` / ``"bf16"``: the KV entry tensors are plain float tensors and the flat
  accessors (:meth:`DSV4KVPool.csa_kv_flat` etc.) return plain ``.view(-1, d)`` views, which the
  Triton kernels and the torch reference ops index directly.
* ``"fp8_e4m3"``: CSA main, HCA and sliding-window entries are 8-bit rows (e4m3 nope values, bf16
  rope values, ue8m0 power-of-two scale per 64 values; 584 B for V4's 512-d entries, 194 B for the
  tiny preset), CSA indexer keys fp8 (``d + 4`` B) or, with ``fp4_indexer``, fp4 e2m1 (``d / 2 +
  d / 32`` B). They live in uint8 page storage whose page stride is the size class of
  :func:`~sglang_v4.mem_cache.kv_layout.build_kv_layout` (37,440 / 8,640 / 1,728 B for V4 in fp8),
  and the flat accessors return :class:`~sglang_v4.mem_cache.kv_layout.KVRowsView` objects that
  quantize on write and dequantize (to the compute dtype) on read, so the reference ops run on
  them unchanged.

Compressor state (``snap_*``, ``st_*``) is fp32 in every format (issue 3: "compressor state stays
fp32").
"""

from __future__ import annotations

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.kv_layout import (
    KVLayout,
    KVRowsView,
    alloc_kind_storage,
    build_kv_layout,
    normalize_kv_cache_dtype,
)

_FLOAT_STORAGE = {"fp32": torch.float32, "bf16": torch.bfloat16}


class ReqSlotAllocator:
    """Free list of request slots ``1 .. max_num_reqs`` (slot 0 is the padding slot)."""

    def __init__(self, max_num_reqs: int) -> None:
        self.size = max_num_reqs
        self._free = list(range(max_num_reqs, 0, -1))

    def alloc(self) -> int | None:
        return self._free.pop() if self._free else None

    def free(self, slot: int) -> None:
        if slot in self._free or not (1 <= slot <= self.size):
            raise ValueError(f"request slot {slot} freed but not allocated")
        self._free.append(slot)

    @property
    def available(self) -> int:
        return len(self._free)


class DSV4KVPool:
    """All KV tensors of a DeepSeek-V4 model plus the request-to-page maps.

    Args:
        model_config: the model's :class:`ModelConfig`.
        page_size: tokens per logical block (256; a multiple of both compression ratios).
        num_block_pages: usable block pages.
        num_window_pages: usable window pages.
        max_num_reqs: request slots.
        max_context_len: longest sequence a request may reach (sizes the page maps).
        kv_dtype: the compute dtype (``torch.float32`` or ``torch.bfloat16``): the storage dtype of
            the KV entries when ``kv_cache_dtype`` is ``"auto"``, and the dtype reads of quantized
            entries return.
        device: where the tensors live.
        kv_cache_dtype: ``"auto"`` (= ``kv_dtype``), ``"fp32"``, ``"bf16"`` or ``"fp8_e4m3"``
            (aliases of :func:`~sglang_v4.mem_cache.kv_layout.normalize_kv_cache_dtype` accepted).
        fp4_indexer: store CSA indexer keys as fp4 e2m1 (``--enable-fp4-indexer``).
        padded: give every quantized page its size-class stride (the peers' page geometry; the
            padding is what :meth:`fragmentation_bytes` counts). ``False`` packs rows
            contiguously. Float storage is always unpadded (its V4 pages are already multiples of
            the 512-byte unit).

    Attributes (besides the tensors): ``kv_cache_dtype`` (canonical name), ``fp4_indexer``,
    ``compute_dtype``, ``kv_dtype`` (storage dtype of main entries: float or ``torch.uint8``),
    ``layout`` (:class:`~sglang_v4.mem_cache.kv_layout.KVLayout`), ``fmt`` (its entry formats),
    ``quantized_main`` / ``quantized_indexer`` (whether the flat accessors return ``KVRowsView``).

    Raises:
        ValueError: if ``page_size`` is not a multiple of the compression ratios and the window, a
            count is negative, ``kv_dtype`` is not fp32 / bf16, or ``kv_cache_dtype`` is unknown
            or cannot hold the model's dims.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        page_size: int,
        num_block_pages: int,
        num_window_pages: int,
        max_num_reqs: int,
        max_context_len: int,
        kv_dtype: torch.dtype,
        device: torch.device | str,
        kv_cache_dtype: str = "auto",
        fp4_indexer: bool = False,
        padded: bool = True,
    ) -> None:
        mc = model_config
        self.model_config = mc
        self.page_size = page_size
        self.window = mc.sliding_window
        for name, r in (
            ("CSA ratio", mc.csa_ratio),
            ("HCA ratio", mc.hca_ratio),
            ("sliding_window", self.window),
        ):
            if page_size % r != 0:
                raise ValueError(f"page_size ({page_size}) must be a multiple of the {name} ({r})")
        for name, v in (
            ("num_block_pages", num_block_pages),
            ("num_window_pages", num_window_pages),
            ("max_num_reqs", max_num_reqs),
        ):
            if v < 0:
                raise ValueError(f"{name}: must be >= 0, got {v}")
        if kv_dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"kv_dtype: expected torch.float32 or torch.bfloat16, got {kv_dtype}")
        self.device = torch.device(device)
        self.compute_dtype = kv_dtype
        self.kv_cache_dtype = normalize_kv_cache_dtype(kv_cache_dtype, kv_dtype)
        self.fp4_indexer = bool(fp4_indexer)
        self.padded = bool(padded)
        self.layout: KVLayout = build_kv_layout(mc, self.kv_cache_dtype, self.fp4_indexer, page_size)
        self.fmt = self.layout.formats
        self.quantized_main = self.fmt.main_storage_dtype == torch.uint8
        self.quantized_indexer = self.fmt.indexer_storage_dtype == torch.uint8
        self.kv_dtype = self.fmt.main_storage_dtype
        self.num_block_pages = num_block_pages
        self.num_window_pages = num_window_pages
        self.max_num_reqs = max_num_reqs
        self.max_context_len = max_context_len
        d, di = mc.head_dim, mc.index_head_dim
        n_csa, n_hca, n_layers = len(mc.csa_layers), len(mc.hca_layers), mc.num_layers
        self.csa_ratio, self.hca_ratio = mc.csa_ratio, mc.hca_ratio
        self.csa_per_page = page_size // mc.csa_ratio
        self.hca_per_page = page_size // mc.hca_ratio
        P, W, R = num_block_pages + 1, num_window_pages + 1, max_num_reqs + 1
        f32 = torch.float32
        dev = self.device
        self._padding: dict[str, int] = {}

        def z(*shape: int, dtype: torch.dtype = f32) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=dev)

        def entries(kind: str, n_kind_layers: int, pages: int, rows: int, quantized: bool) -> torch.Tensor:
            """``[layers, pages, rows, row_elems]`` storage of ``kind`` (float or uint8 pages)."""
            fmt = self.fmt
            which_idx = kind == "csa_indexer"
            dtype = fmt.indexer_storage_dtype if which_idx else fmt.main_storage_dtype
            elems = fmt.indexer_row_elems if which_idx else fmt.main_row_elems
            if not quantized or n_kind_layers == 0:
                return z(n_kind_layers, pages, rows, elems, dtype=dtype)
            spec = self.layout.kinds[kind]
            if kind == "swa" and spec.rows_per_page * spec.pages_per_unit != rows:
                # a physical swa page larger than the window (page_size > 4 * window): keep one
                # window page per row block, unpadded, so flat slots stay ``w * window + j``
                return z(n_kind_layers, pages, rows, elems, dtype=dtype)
            phys = pages * (spec.pages_per_unit if kind == "swa" else 1)
            if self.padded:
                self._padding[kind] = spec.num_layers * phys * spec.padding_per_page
            return alloc_kind_storage(self.layout, kind, phys, dev, padded=self.padded)

        qm, qi = self.quantized_main, self.quantized_indexer
        # compressed history (block pages)
        self.csa_kv = entries("csa_main", n_csa, P, self.csa_per_page, qm)
        self.csa_idx = entries("csa_indexer", n_csa, P, self.csa_per_page, qi)
        self.hca_kv = entries("hca", n_hca, P, self.hca_per_page, qm)
        # raw sliding-window KV (window pages); quantized: window page w = physical pages
        # w*u .. w*u+u-1 (u = 2 for V4), so flat slot w*window + j is the same slot number
        self.swa_kv = entries("swa", n_layers, W, self.window, qm)
        # resume snapshots: CSA overlap halves at a block end (window pages), fp32
        m = mc.csa_ratio
        self.snap_csa_kv = z(n_csa, W, m, d, dtype=f32)
        self.snap_csa_score = z(n_csa, W, m, d, dtype=f32)
        self.snap_idx_kv = z(n_csa, W, m, di, dtype=f32)
        self.snap_idx_score = z(n_csa, W, m, di, dtype=f32)
        # live compressor state per request slot, fp32
        self.st_csa_buf_kv = z(n_csa, R, m, 2 * d, dtype=f32)
        self.st_csa_buf_score = z(n_csa, R, m, 2 * d, dtype=f32)
        self.st_csa_ovl_kv = z(n_csa, R, m, d, dtype=f32)
        self.st_csa_ovl_score = z(n_csa, R, m, d, dtype=f32)
        self.st_idx_buf_kv = z(n_csa, R, m, 2 * di, dtype=f32)
        self.st_idx_buf_score = z(n_csa, R, m, 2 * di, dtype=f32)
        self.st_idx_ovl_kv = z(n_csa, R, m, di, dtype=f32)
        self.st_idx_ovl_score = z(n_csa, R, m, di, dtype=f32)
        mh = mc.hca_ratio
        self.st_hca_buf_kv = z(n_hca, R, mh, d, dtype=f32)
        self.st_hca_buf_score = z(n_hca, R, mh, d, dtype=f32)
        # request -> pages
        self.max_blocks = -(-max_context_len // page_size)
        self.max_window_pages = -(-max_context_len // self.window)
        self.req_to_block = torch.zeros(R, self.max_blocks, dtype=torch.long, device=dev)
        self.req_to_window = torch.zeros(R, self.max_window_pages, dtype=torch.long, device=dev)
        # allocators
        self.block_alloc = PageAllocator(num_block_pages, "block_pages")
        self.window_alloc = PageAllocator(num_window_pages, "window_pages")
        self.req_slots = ReqSlotAllocator(max_num_reqs)

    # ---- flat views ------------------------------------------------------------------------
    # Float storage: plain ``[N, d]`` views (Triton kernels need real tensors). Quantized storage:
    # ``KVRowsView`` objects of the same ``[N, d]`` shape that quantize on ``view[slots] = x`` and
    # dequantize to ``compute_dtype`` on ``view[idx]``; flat slot ``s`` is page ``s // rows``, row
    # ``s % rows`` of the paged storage, i.e. the same slot numbers as the float layout.
    def _flat(self, t: torch.Tensor, which: str, quantized: bool) -> torch.Tensor | KVRowsView:
        if quantized:
            return KVRowsView(t, self.fmt, which, out_dtype=self.compute_dtype)
        return t.view(-1, t.shape[-1])

    def csa_kv_flat(self, i: int) -> torch.Tensor | KVRowsView:
        """``[(num_block_pages + 1) * page_size / 4, head_dim]`` view of CSA layer slot ``i``'s
        main pool (a ``KVRowsView`` in fp8)."""
        return self._flat(self.csa_kv[i], "main", self.quantized_main)

    def csa_idx_flat(self, i: int) -> torch.Tensor | KVRowsView:
        """``[(num_block_pages + 1) * page_size / 4, index_head_dim]`` view of CSA layer slot
        ``i``'s indexer-key pool (a ``KVRowsView`` in fp8 / fp4)."""
        return self._flat(self.csa_idx[i], "indexer", self.quantized_indexer)

    def hca_kv_flat(self, i: int) -> torch.Tensor | KVRowsView:
        """``[(num_block_pages + 1) * page_size / 128, head_dim]`` view of HCA layer slot ``i``."""
        return self._flat(self.hca_kv[i], "main", self.quantized_main)

    def swa_flat(self, layer: int) -> torch.Tensor | KVRowsView:
        """``[(num_window_pages + 1) * sliding_window, head_dim]`` raw-KV view of ``layer``."""
        return self._flat(self.swa_kv[layer], "main", self.quantized_main)

    # ---- request state -------------------------------------------------------------------
    def reset_req_state(self, slot: int) -> None:
        """Zero a request slot's page maps and compressor state (a fresh request at position 0)."""
        self.req_to_block[slot].zero_()
        self.req_to_window[slot].zero_()
        for t in (
            self.st_csa_buf_kv,
            self.st_csa_buf_score,
            self.st_csa_ovl_kv,
            self.st_csa_ovl_score,
            self.st_idx_buf_kv,
            self.st_idx_buf_score,
            self.st_idx_ovl_kv,
            self.st_idx_ovl_score,
            self.st_hca_buf_kv,
            self.st_hca_buf_score,
        ):
            t[:, slot].zero_()

    def load_resume_state(self, slot: int, window_page: int) -> None:
        """Initialise a request's compressor state from the resume snapshot under ``window_page``.

        At a block boundary every partial window is empty, so only the CSA overlap halves are
        restored; the raw window itself is read in place from ``window_page``.
        """
        self.st_csa_ovl_kv[:, slot] = self.snap_csa_kv[:, window_page]
        self.st_csa_ovl_score[:, slot] = self.snap_csa_score[:, window_page]
        self.st_idx_ovl_kv[:, slot] = self.snap_idx_kv[:, window_page]
        self.st_idx_ovl_score[:, slot] = self.snap_idx_score[:, window_page]

    def set_req_pages(self, slot: int, block_pages: list[int], window_pages: dict[int, int]) -> None:
        """Write a request's page maps (``block_pages[b]`` for block ``b``; ``window_pages[k]`` for
        window span ``k``; spans not listed map to the dummy page 0)."""
        row = self.req_to_block[slot]
        row.zero_()
        if block_pages:
            row[: len(block_pages)] = torch.tensor(block_pages, dtype=torch.long)
        wrow = self.req_to_window[slot]
        wrow.zero_()
        if window_pages:
            ks = torch.tensor(list(window_pages.keys()), dtype=torch.long)
            vs = torch.tensor(list(window_pages.values()), dtype=torch.long)
            wrow[ks.to(wrow.device)] = vs.to(wrow.device)

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

    def memory_bytes(self) -> int:
        """Bytes held by all KV / state / page-map tensors (the whole underlying buffers, so the
        page padding of class-strided quantized storage is counted)."""
        seen: dict[int, int] = {}
        for v in vars(self).values():
            if isinstance(v, torch.Tensor):
                st = v.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def fragmentation_bytes(self) -> int:
        """Bytes allocated inside pages that hold no entry: the size-class padding of every
        quantized page (the dummy page 0 included), 0 for unpadded / float storage. The planner's
        ``KVPlan.fragmentation_bytes`` counts the same padding over the usable pages only."""
        return sum(self._padding.values())
