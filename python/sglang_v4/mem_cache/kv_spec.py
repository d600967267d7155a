"""The KV kinds of DeepSeek-V4 as spec objects, their page-size classes, and the layout.

DeepSeek-V4's cache is tri-structured (CSA compressed + HCA compressed + a raw sliding window),
and the CSA compressor and lightning indexer carry state between forwards. Each kind is one
:class:`KVKind` and is described by exactly one spec object built by :func:`build_kv_layout`:

===========  ==========================  =============  ===================  ===========
kind         entries                     page-id space  page holds           class (fp8)
===========  ==========================  =============  ===================  ===========
csa_main     one 512-d per 4 tokens      block pages    256/4 = 64 entries   37,440
csa_indexer  one 128-d key per 4 tokens  block pages    64 entries           8,640
hca          one 512-d per 128 tokens    block pages    256/128 = 2 entries  1,728
swa          raw 512-d per token         window pages   64 raw positions     37,440
===========  ==========================  =============  ===================  ===========

plus a :class:`CompressorStateSpec` for each compressor (CSA main, CSA indexer, HCA; fp32, in
request slots, and for the CSA overlap also a snapshot per window page).

Page-id spaces (``allocator.PageAllocator`` per space; page 0 of each is a reserved dummy page):

* :attr:`PageSpace.BLOCK` -- one id per 256-token logical block (``page_size``), indexing the
  block kinds of every layer at once: a request's full compressed history, shared by the radix
  cache.
* :attr:`PageSpace.WINDOW` -- one id per ``sliding_window`` (128) raw positions of every layer,
  plus the CSA compressors' overlap snapshot: the window page that ends on a block boundary is
  that block end's *resume state*.
* :attr:`PageSpace.REQUEST` -- one slot per running request: the live compressor state.

Size classes (fp8, V4 shapes)
-----------------------------
Every page is rounded up to the allocation unit: in fp8 the 576-byte data row of a main entry
(FlashMLA reads pages with a TMA row stride of 576 B, so the peers pad every page to a multiple of
it: SGLang ``ceil_div(page_size * 584, 576) * 576``, vLLM ``alignment=576``): 64 x 584 = 37,376
-> 65 x 576 = 37,440; 64 x 132 = 8,448 -> 15 x 576 = 8,640; 2 x 584 = 1,168 -> 3 x 576 = 1,728.
(bf16 / fp32 use a 512-byte unit, FlashInfer's; their pages are already multiples of it.) The SWA
page holds as many positions as a CSA main page has entries (``page_size / csa_ratio`` = 64), so
it shares the CSA main class, and a 128-position window is 2 such pages per layer. The distinct
aligned sizes are then partitioned into at most three classes (contiguous in sorted order; a
class's page size is its largest member) minimising the padding of one request at the model's
full context. For V4 the four kinds have three distinct sizes, so the classes are exactly 37,440 /
8,640 / 1,728 (fp8), 65,536 / 16,384 / 2,048 (bf16), 37,440 / 4,608 / 1,728 (fp8 + fp4 indexer:
64 x 68 = 4,352 -> 8 x 576). One page allocator per class can serve every kind in it.

The peers also page the fp32 compressor states through these classes; here they are side
tensors sized exactly (:class:`CompressorStateSpec`). Fragmentation is the padding: class size
minus raw page bytes, summed over allocated pages (``KVPlan.fragmentation_bytes``,
``DSV4KVPool.fragmentation_bytes``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache.kv_format import EntryFormat, EntryFormats, entry_formats

__all__ = [
    "KVKind",
    "PageSpace",
    "KVCacheSpec",
    "CompressorStateSpec",
    "SizeClass",
    "KVLayout",
    "build_kv_layout",
    "STATE_ELEM_BYTES",
]

STATE_ELEM_BYTES = 4  # compressor state is fp32 in every KV format


class KVKind(enum.StrEnum):
    """The KV kinds of a DeepSeek-V4 model (the one spelling used by the planner, the pool, the
    compressors and attention)."""

    CSA_MAIN = "csa_main"  # compressed 512-d entries of CSA layers (1 per csa_ratio tokens)
    CSA_INDEXER = "csa_indexer"  # lightning-indexer keys of CSA layers (1 per csa_ratio tokens)
    HCA = "hca"  # compressed 512-d entries of HCA layers (1 per hca_ratio tokens)
    SWA = "swa"  # raw 512-d sliding-window entries of every layer


class PageSpace(enum.StrEnum):
    """Id space a spec's storage is indexed by (module docstring)."""

    BLOCK = "block"  # block pages: one per page_size-token logical block
    WINDOW = "window"  # window pages: one per sliding_window raw positions
    REQUEST = "request"  # request slots: one per running request (req_pool_idx)


class _LayerSlots:
    """The layer -> storage-slot map of a frozen spec dataclass with a ``layers`` tuple, a ``kind``
    and an ``init=False`` ``_slots`` field: layer ``layers[i]`` is slot ``i``."""

    layers: tuple[int, ...]
    kind: KVKind
    _slots: dict[int, int]
    _slot_owner: str = "KV"  # what a layer without a slot lacks, for the error message

    def __post_init__(self) -> None:
        object.__setattr__(self, "_slots", {layer: i for i, layer in enumerate(self.layers)})

    @property
    def num_layers(self) -> int:
        """Layers that hold this spec's storage."""
        return len(self.layers)

    def layer_slot(self, layer: int) -> int:
        """Slot of model layer ``layer`` in this spec's storage.

        Raises:
            ValueError: if the layer has none (``"layer 3 has no hca KV"``).
        """
        try:
            return self._slots[layer]
        except KeyError:
            raise ValueError(f"layer {layer} has no {self.kind.value} {self._slot_owner}") from None


@dataclass(frozen=True)
class KVCacheSpec(_LayerSlots):
    """Page geometry of one KV kind (vLLM calls this a ``KVCacheSpec``; SGLang's
    ``DeepSeekV4TokenToKVPool`` has the same four pools).

    Attributes:
        kind: the :class:`KVKind`.
        space: the page-id space its pages are indexed by (block or window pages).
        layers: model layer indices that have this kind; layer ``layers[i]`` is slot ``i`` of the
            kind's storage (:meth:`layer_slot`).
        entry: the entry format (bytes, storage dtype, codec).
        tokens_per_entry: token positions one entry covers (the compression ratio; 1 for SWA).
        rows_per_unit: entries per layer in one unit of ``space`` (``page_size / ratio`` per block
            page, ``sliding_window`` per window page).
        rows_per_page: entries in one physical page.
        pages_per_unit: physical pages per layer per unit (2 for V4's SWA: 128 positions / 64).
        aligned_page_bytes: raw page bytes rounded up to the allocation unit.
        page_bytes: the size class the kind is served from (>= ``aligned_page_bytes``).
    """

    kind: KVKind
    space: PageSpace
    layers: tuple[int, ...]
    entry: EntryFormat
    tokens_per_entry: int
    rows_per_unit: int
    rows_per_page: int
    pages_per_unit: int
    aligned_page_bytes: int
    page_bytes: int
    _slots: dict[int, int] = field(init=False, repr=False, compare=False)

    @property
    def row_bytes(self) -> int:
        """Bytes of one entry."""
        return self.entry.entry_bytes

    @property
    def raw_page_bytes(self) -> int:
        """``rows_per_page * row_bytes``: the bytes of a page that hold entries."""
        return self.rows_per_page * self.entry.entry_bytes

    @property
    def padding_per_page(self) -> int:
        """Unusable bytes in one page (class size minus content)."""
        return self.page_bytes - self.raw_page_bytes

    @property
    def bytes_per_unit(self) -> int:
        """Allocated bytes of this kind per block / window page, all its layers."""
        return self.num_layers * self.pages_per_unit * self.page_bytes

    @property
    def padding_per_unit(self) -> int:
        """Padding bytes of this kind per block / window page, all its layers."""
        return self.num_layers * self.pages_per_unit * self.padding_per_page

    def allocate(
        self, num_pages: int, device: torch.device | str = "cpu", padded: bool = True
    ) -> torch.Tensor:
        """Zeroed storage for ``num_pages`` physical pages of every layer of this kind.

        Returns:
            ``[num_layers, num_pages, rows_per_page, entry.row_elems]`` of ``entry.storage_dtype``.
            With ``padded`` the page stride is the size class (``page_bytes``: 37,440 B for an fp8
            CSA main page): a strided view into a ``[num_layers, num_pages, page_bytes]`` byte
            buffer, so the padding the plan reports as fragmentation is really allocated and the
            page layout is the peers'. Without ``padded`` it is contiguous. A window page of
            ``swa`` is ``pages_per_unit`` (2) consecutive physical pages.

        Raises:
            ValueError: for ``num_pages < 1``.
        """
        if num_pages < 1:
            raise ValueError(f"num_pages: must be >= 1, got {num_pages}")
        dtype, elems = self.entry.storage_dtype, self.entry.row_elems
        shape = (self.num_layers, num_pages, self.rows_per_page, elems)
        if not padded:
            return torch.zeros(shape, dtype=dtype, device=device)
        buf = torch.zeros(self.num_layers, num_pages, self.page_bytes, dtype=torch.uint8, device=device)
        data = buf[..., : self.raw_page_bytes].view(dtype)
        return data.unflatten(-1, (self.rows_per_page, elems))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (layers as a count)."""
        return {
            "kind": self.kind.value,
            "space": self.space.value,
            "num_layers": self.num_layers,
            "entry": self.entry.to_dict(),
            "tokens_per_entry": self.tokens_per_entry,
            "rows_per_unit": self.rows_per_unit,
            "rows_per_page": self.rows_per_page,
            "pages_per_unit": self.pages_per_unit,
            "row_bytes": self.row_bytes,
            "raw_page_bytes": self.raw_page_bytes,
            "aligned_page_bytes": self.aligned_page_bytes,
            "page_bytes": self.page_bytes,
            "padding_per_page": self.padding_per_page,
        }


@dataclass(frozen=True)
class CompressorStateSpec(_LayerSlots):
    """fp32 state of one compressor (paper §2.3; the compressor writes the entries of ``kind``).

    Per request slot and layer: the partial window (``ratio`` rows of projected kv and gate score,
    ``buffer_width`` wide) and, for the overlapped CSA compressors, the previous window's "Ca" half
    (``ratio`` rows of ``dim`` kv and score). Per window page and layer (overlap only): a snapshot
    of that Ca half at the block end the window page ends on (part of the resume state; partial
    windows are empty at a block boundary).

    Attributes:
        kind: the KV kind the compressor produces (``csa_main``, ``csa_indexer`` or ``hca``).
        layers: model layer indices with this compressor (slot ``i`` = ``layers[i]``).
        ratio: tokens per compressed entry (``m = 4`` CSA, ``m' = 128`` HCA).
        dim: entry width (``head_dim`` or ``index_head_dim``).
        overlap: overlapped windows (CSA: ``buffer_width = 2 * dim``, Ca | Cb halves).
    """

    kind: KVKind
    layers: tuple[int, ...]
    ratio: int
    dim: int
    overlap: bool
    _slots: dict[int, int] = field(init=False, repr=False, compare=False)
    _slot_owner = "compressor"

    @property
    def space(self) -> PageSpace:
        """Live state is indexed by request slot."""
        return PageSpace.REQUEST

    @property
    def buffer_width(self) -> int:
        """Width of a partial-window row: ``2 * dim`` with overlap, else ``dim``."""
        return 2 * self.dim if self.overlap else self.dim

    @property
    def request_bytes(self) -> int:
        """fp32 bytes of one request slot, all layers: kv + score partial windows (and overlap)."""
        per_layer = 2 * self.ratio * self.buffer_width + (2 * self.ratio * self.dim if self.overlap else 0)
        return self.num_layers * per_layer * STATE_ELEM_BYTES

    @property
    def snapshot_bytes(self) -> int:
        """fp32 bytes of the overlap snapshot stored per window page, all layers (0 without overlap)."""
        return self.num_layers * 2 * self.ratio * self.dim * STATE_ELEM_BYTES if self.overlap else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields (layers as a count)."""
        return {
            "kind": self.kind.value,
            "num_layers": self.num_layers,
            "ratio": self.ratio,
            "dim": self.dim,
            "overlap": self.overlap,
            "request_bytes": self.request_bytes,
            "snapshot_bytes": self.snapshot_bytes,
        }


@dataclass(frozen=True)
class SizeClass:
    """A page size served by one allocator, and the kinds it serves."""

    page_bytes: int
    kinds: tuple[KVKind, ...]


@dataclass(frozen=True)
class KVLayout:
    """The specs of every KV kind of one model / dtype / page size, and their size classes.

    Attributes:
        formats: the entry formats.
        page_size: tokens per logical block (256).
        sliding_window: raw positions per window page (128).
        csa_ratio / hca_ratio: compression ratios (4 / 128).
        kinds: :class:`KVKind` -> :class:`KVCacheSpec` (kinds with no layers are omitted).
        states: :class:`KVKind` -> :class:`CompressorStateSpec` of the compressor producing it.
        classes: at most ``max_classes`` :class:`SizeClass`, largest first.

    Derived: ``block_page_bytes`` (one block page, all layers, class-padded),
    ``window_page_bytes`` (one window page: class-padded SWA pages + the overlap snapshots),
    ``request_state_bytes`` (one request slot), and the ``*_padding_bytes``.
    """

    formats: EntryFormats
    page_size: int
    sliding_window: int
    csa_ratio: int
    hca_ratio: int
    kinds: dict[KVKind, KVCacheSpec]
    states: dict[KVKind, CompressorStateSpec]
    classes: tuple[SizeClass, ...]

    def _sum(self, space: PageSpace, attr: str) -> int:
        return sum(getattr(s, attr) for s in self.kinds.values() if s.space is space)

    @property
    def window_snapshot_bytes(self) -> int:
        """fp32 overlap snapshots stored with each window page (all CSA layers, main + indexer)."""
        return sum(s.snapshot_bytes for s in self.states.values())

    @property
    def request_state_bytes(self) -> int:
        """fp32 live compressor state of one request slot (all compressors, all layers)."""
        return sum(s.request_bytes for s in self.states.values())

    @property
    def block_page_bytes(self) -> int:
        """Bytes of one block page over every kind stored per block page, all layers."""
        return self._sum(PageSpace.BLOCK, "bytes_per_unit")

    @property
    def window_page_bytes(self) -> int:
        """Bytes of one window page over every kind stored per window page, all layers, plus the
        CSA overlap snapshots kept with it."""
        return self._sum(PageSpace.WINDOW, "bytes_per_unit") + self.window_snapshot_bytes

    @property
    def block_padding_bytes(self) -> int:
        """Bytes of one block page lost to size-class padding, all layers."""
        return self._sum(PageSpace.BLOCK, "padding_per_unit")

    @property
    def window_padding_bytes(self) -> int:
        """Bytes of one window page lost to size-class padding, all layers."""
        return self._sum(PageSpace.WINDOW, "padding_per_unit")

    def page_bytes(self, kind: KVKind) -> int:
        """Size-class bytes of one page of ``kind`` (per layer)."""
        return self.kinds[kind].page_bytes

    def block_bytes_per_layer(self, kind: KVKind) -> int:
        """Allocated bytes of ``kind`` per 256-token block and layer (block kinds).

        Raises:
            ValueError: if ``kind`` is not indexed by block pages.
        """
        k = self.kinds[kind]
        if k.space is not PageSpace.BLOCK:
            raise ValueError(f"kind: {k.kind.value!r} is not per block (space {k.space.value!r})")
        return k.pages_per_unit * k.page_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary."""
        return {
            "formats": self.formats.to_dict(),
            "page_size": self.page_size,
            "kinds": {k.value: s.to_dict() for k, s in self.kinds.items()},
            "states": {k.value: s.to_dict() for k, s in self.states.items()},
            "classes": [
                {"page_bytes": c.page_bytes, "kinds": [k.value for k in c.kinds]} for c in self.classes
            ],
            "block_page_bytes": self.block_page_bytes,
            "window_page_bytes": self.window_page_bytes,
            "window_snapshot_bytes": self.window_snapshot_bytes,
            "request_state_bytes": self.request_state_bytes,
        }


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _bucket(sizes: dict[KVKind, int], weights: dict[KVKind, int], max_classes: int) -> dict[KVKind, int]:
    """Assign each kind a class size: partition the distinct sizes (sorted) into at most
    ``max_classes`` contiguous groups minimising ``sum(weight * (class - size))``; exact DP."""
    distinct = sorted(set(sizes.values()), reverse=True)
    w_of = {s: sum(weights[k] for k in sizes if sizes[k] == s) for s in distinct}
    n = len(distinct)
    g = min(max_classes, n)

    def cost(i: int, j: int) -> int:  # group distinct[i..j] served by distinct[i]
        return sum(w_of[distinct[t]] * (distinct[i] - distinct[t]) for t in range(i, j + 1))

    inf = float("inf")
    # best[c][j]: min cost covering distinct[0..j-1] with c groups; arg for reconstruction
    best = [[inf] * (n + 1) for _ in range(g + 1)]
    arg = [[-1] * (n + 1) for _ in range(g + 1)]
    best[0][0] = 0
    for c in range(1, g + 1):
        for j in range(1, n + 1):
            for i in range(c - 1, j):
                v = best[c - 1][i] + cost(i, j - 1)
                if v < best[c][j]:
                    best[c][j], arg[c][j] = v, i
    c = min(range(1, g + 1), key=lambda cc: (best[cc][n], cc))
    class_of: dict[int, int] = {}
    j = n
    while c > 0:
        i = arg[c][j]
        for t in range(i, j):
            class_of[distinct[t]] = distinct[i]
        j, c = i, c - 1
    return {k: class_of[s] for k, s in sizes.items()}


#: tokens per SWA page row group when the model has no CSA layers and its (unused) CSA rate does
#: not divide ``page_size``: the DeepSeek-V4 CSA rate, which every valid ``page_size`` (a multiple
#: of 128) is a multiple of.
SWA_ROWS_RATE_WITHOUT_CSA = 4


def check_page_size_fits(page_size: int, window: int, csa_ratio: int | None, hca_ratio: int | None) -> None:
    """A block page must hold whole window pages and whole compressed entries of the layer kinds
    the model has (``None``: no layer of that kind; its configured rate is then never used).

    Raises:
        ValueError: naming ``page_size`` when it is not positive or not a multiple of ``window``
            or of a present kind's rate.
    """
    need = [("sliding window", window), ("CSA ratio", csa_ratio), ("HCA ratio", hca_ratio)]
    for name, r in need:
        if r is not None and (page_size <= 0 or page_size % r != 0):
            raise ValueError(f"page_size: must be a positive multiple of the {name} ({r}), got {page_size}")


def build_kv_layout(
    model_config: ModelConfig,
    kv_cache_dtype: str | None = "bf16",
    fp4_indexer: bool = False,
    page_size: int = 256,
    max_classes: int = 3,
) -> KVLayout:
    """The spec of every KV kind and compressor state, and the size classes (module docstring).

    Args:
        model_config: the model.
        kv_cache_dtype: ``bf16`` / ``fp32`` / ``fp8_e4m3`` (or ``auto`` = bf16).
        fp4_indexer: fp4 indexer keys.
        page_size: tokens per logical block; a positive multiple of the compression ratio of each
            compressed layer kind the model has and of the sliding window.
        max_classes: at most this many page-size classes (3).

    Raises:
        ValueError: bad ``page_size`` / ``max_classes`` / dtype.
    """
    fmt = entry_formats(model_config, kv_cache_dtype, fp4_indexer)
    m, mp = model_config.csa_ratio, model_config.hca_ratio
    window = model_config.sliding_window
    csa = tuple(model_config.csa_layers)
    hca = tuple(model_config.hca_layers)
    check_page_size_fits(page_size, window, m if csa else None, mp if hca else None)
    if max_classes < 1:
        raise ValueError(f"max_classes: must be >= 1, got {max_classes}")
    every = tuple(range(model_config.num_layers))
    # the SWA page's rows: a CSA main page's entries; without CSA layers the CSA rate is unused
    # and need not divide the page, so the V4 rate (4) sets the SWA page when it does not
    csa_rows = page_size // (m if page_size % m == 0 else SWA_ROWS_RATE_WITHOUT_CSA)

    # the kinds: (kind, space, layers, entry format, tokens per entry, rows per unit, rows per page)
    # (a SWA page holds as many raw positions as a CSA main page has entries: one size class)
    table = [
        (KVKind.CSA_MAIN, PageSpace.BLOCK, csa, fmt.main, m, csa_rows, csa_rows),
        (KVKind.CSA_INDEXER, PageSpace.BLOCK, csa, fmt.indexer, m, csa_rows, csa_rows),
        (KVKind.HCA, PageSpace.BLOCK, hca, fmt.main, mp, page_size // mp, page_size // mp),
        (KVKind.SWA, PageSpace.WINDOW, every, fmt.main, 1, window, csa_rows),
    ]
    table = [row for row in table if row[2]]
    aligned = {k: _round_up(rows * e.entry_bytes, fmt.page_align) for k, _, _, e, _, _, rows in table}
    per_unit = {k: -(-unit // rows) for k, _, _, _, _, unit, rows in table}
    # bucketing weights: pages of each kind for one request at the model's full context
    blocks_ref = max(1, -(-model_config.context_length // page_size))
    weights = {
        k: len(layers) * per_unit[k] * (blocks_ref if space is PageSpace.BLOCK else 1)
        for k, space, layers, *_ in table
    }
    cls = _bucket(aligned, weights, max_classes)
    kinds = {
        k: KVCacheSpec(
            kind=k,
            space=space,
            layers=layers,
            entry=entry,
            tokens_per_entry=tpe,
            rows_per_unit=unit,
            rows_per_page=rows,
            pages_per_unit=per_unit[k],
            aligned_page_bytes=aligned[k],
            page_bytes=cls[k],
        )
        for k, space, layers, entry, tpe, unit, rows in table
    }
    # the compressor states: (kind produced, layers, ratio, dim, overlap)
    state_table = [
        (KVKind.CSA_MAIN, csa, m, fmt.main.dim, True),
        (KVKind.CSA_INDEXER, csa, m, fmt.indexer.dim, True),
        (KVKind.HCA, hca, mp, fmt.main.dim, False),
    ]
    states = {k: CompressorStateSpec(k, layers, r, d, ov) for k, layers, r, d, ov in state_table if layers}
    classes = tuple(
        SizeClass(page_bytes=s, kinds=tuple(k for k in kinds if kinds[k].page_bytes == s))
        for s in sorted(set(cls.values()), reverse=True)
    )
    return KVLayout(
        formats=fmt,
        page_size=page_size,
        sliding_window=window,
        csa_ratio=m,
        hca_ratio=mp,
        kinds=kinds,
        states=states,
        classes=classes,
    )
