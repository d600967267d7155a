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

Storage dtypes: fp32 or bf16 for the KV entries (``kv_dtype``); fp8 formats are a separate storage
seam (``kv_cache_dtype="fp8_e4m3"``, issue 3).
"""

from __future__ import annotations

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.allocator import PageAllocator


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
        kv_dtype: storage dtype of KV entries (``torch.float32`` or ``torch.bfloat16``).
        device: where the tensors live.

    Raises:
        ValueError: if ``page_size`` is not a multiple of the compression ratios and the window.
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
        self.device = torch.device(device)
        self.kv_dtype = kv_dtype
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

        def z(*shape: int, dtype: torch.dtype = kv_dtype) -> torch.Tensor:
            return torch.zeros(*shape, dtype=dtype, device=dev)

        # compressed history (block pages)
        self.csa_kv = z(n_csa, P, self.csa_per_page, d)
        self.csa_idx = z(n_csa, P, self.csa_per_page, di)
        self.hca_kv = z(n_hca, P, self.hca_per_page, d)
        # raw sliding-window KV (window pages)
        self.swa_kv = z(n_layers, W, self.window, d)
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
    def csa_kv_flat(self, i: int) -> torch.Tensor:
        """``[num_pages+1 * page_size/4, head_dim]`` view of CSA layer slot ``i``'s main pool."""
        return self.csa_kv[i].view(-1, self.csa_kv.shape[-1])

    def csa_idx_flat(self, i: int) -> torch.Tensor:
        return self.csa_idx[i].view(-1, self.csa_idx.shape[-1])

    def hca_kv_flat(self, i: int) -> torch.Tensor:
        return self.hca_kv[i].view(-1, self.hca_kv.shape[-1])

    def swa_flat(self, layer: int) -> torch.Tensor:
        return self.swa_kv[layer].view(-1, self.swa_kv.shape[-1])

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
        """Bytes held by all KV / state tensors."""
        total = 0
        for v in vars(self).values():
            if isinstance(v, torch.Tensor):
                total += v.numel() * v.element_size()
        return total
