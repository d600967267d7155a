"""Byte layout of DeepSeek-V4's tri-structured KV cache, page-size buckets, and the KV pool planner.

The sizing (:func:`entry_formats`, :func:`build_kv_layout`, :func:`plan_kv_pools`,
:func:`kv_bytes_for_context`) is arithmetic on a :class:`~sglang_v4.configs.model_config.ModelConfig`.
The runtime calls :func:`plan_kv_pools` at start-up to size its pools; the memory planner CLI
(``python -m sglang_v4.tools.kv_planner``) prints the same numbers. The storage helpers
(:func:`alloc_kind_storage`, :func:`encode_entries` / :func:`decode_entries`, :class:`KVRowsView`)
let the pools hold fp8 / fp4 entries (``/work/notes/fp8_integration.md``).

Entries (one row of a cache; byte formats in ``sgl_kernel_v4/ref/kv_quant.py``)
-------------------------------------------------------------------------------
========================  ==============  ================  ===========================
kind                      bf16            fp8_e4m3          notes
========================  ==============  ================  ===========================
main (CSA, HCA, sliding)  512 x 2 = 1024  584               448 e4m3 + 64 bf16 rope +
                                                            7 ue8m0 scales + 1 pad
CSA indexer key           128 x 2 = 256   132 (fp4: 68)     128 e4m3 + fp32 scale /
                                                            64 B e2m1 + 4 ue8m0
compressor state row      fp32 always     fp32 always       kv + score, ``coff * d`` each
========================  ==============  ================  ===========================

``fp32`` doubles the bf16 sizes (the CPU reference dtype).

KV bytes per token (DSV4_MODEL.md, "KV bytes per token"): a CSA layer stores one main entry and
one indexer entry per ``m = 4`` tokens, an HCA layer one main entry per ``m' = 128`` tokens, and
every layer keeps the last ``sliding_window = 128`` raw main entries of a request. For V4-Pro
(30 CSA + 31 HCA layers) in bf16 at 1,048,576 tokens::

    CSA   30 x 2^18 x (1024 + 256)  = 10,066,329,600 B
    HCA   31 x 2^13 x 1024          =    260,046,848 B
    SWA   61 x 128 x 1024           =      7,995,392 B
    total                           = 10,334,371,840 B = 9.62 GiB

DeepSeek-V3.2 (MLA, 61 layers) stores per token and layer the 576-d latent (kv_lora_rank 512 +
rope 64) and the 128-d lightning-indexer key; with both counted at bf16 (the same dtype as the
V4 figure): ``61 x (576 + 128) x 2 = 85,888 B/token``, i.e. 83.875 GiB at 2^20 tokens — the
published "83.9 GiB", 8.7x V4-Pro's 9.62 GiB. (Counting V3.2's indexer keys in their fp8 cache
format, 132 B, instead gives 76.5 GiB; :func:`v32_kv_bytes_per_token` does either.)

Pages and size classes
----------------------
The cache is paged per 256-token logical block (``page_size``; a multiple of the HCA ratio, 128,
of the CSA ratio and of the sliding window). Each kind of entry has its own page geometry,
following the peers (vLLM's DeepSeek-V4 ``MLAAttentionSpec`` / ``SlidingWindowMLASpec``, SGLang's
``DeepSeekV4TokenToKVPool``):

===========  ===================  ============================  ==============
kind         page holds           raw bytes (fp8, V4 shapes)    class (fp8)
===========  ===================  ============================  ==============
csa_main     256/4 = 64 entries   64 x 584 = 37,376             37,440
swa          64 raw positions     64 x 584 = 37,376             37,440
csa_indexer  64 entries           64 x 132 = 8,448              8,640
hca          256/128 = 2 entries  2 x 584 = 1,168               1,728
===========  ===================  ============================  ==============

Derivation of the three fp8 classes 37,440 / 8,640 / 1,728:

1. every page is rounded up to the allocation unit. In fp8 the unit is the 576-byte data row of
   an entry: FlashMLA reads pages with a TMA row stride of 576 B, so the peers pad every page to a
   multiple of it (SGLang: ``ceil_div(page_size * 584, 576) * 576``; vLLM: ``alignment=576``):
   37,376 -> 65 x 576 = 37,440; 8,448 -> 15 x 576 = 8,640; 1,168 -> 3 x 576 = 1,728. (bf16 / fp32
   use a 512-byte unit, FlashInfer's; their pages are already multiples of it.)
2. the SWA page holds ``page_size / csa_ratio`` = 64 positions, so it has the CSA main page's size
   and shares its class; a 128-position window is 2 such pages per layer.
3. the distinct aligned sizes are partitioned into at most three classes (contiguous in sorted
   order; a class's page size is its largest member), minimising the padding bytes of one
   request at the model's full context. For V4 the four kinds have three distinct sizes, so the
   classes are exactly 37,440 / 8,640 / 1,728 (fp8), 65,536 / 16,384 / 2,048 (bf16),
   37,440 / 4,608 / 1,728 (fp8 + fp4 indexer: 64 x 68 = 4,352 -> 8 x 576). One page allocator
   per class can serve every kind in it.

The peers also page the fp32 compressor states through these classes (vLLM picks 4-row CSA and
8-row HCA state pages, 32,768 B, so they pad into 37,440, and 4-row indexer-state pages of 8,192
B that pad into 8,640). Our pool (``memory_pool.DSV4KVPool``) keeps them as fp32 side tensors
instead, sized exactly: per window page the CSA overlap snapshot (``m`` rows of kv and score, main
and indexer), per running request the live compressor buffers (CSA: ``m`` rows of ``2 * d`` kv
and score plus the ``m``-row overlap halves, main and indexer; HCA: ``m'`` rows of kv and score).

Fragmentation is the padding: bytes inside allocated pages that hold no entry (class size minus
raw page bytes, summed over all planned pages), reported by :class:`KVPlan` as
``fragmentation_bytes``. It is real only if the pools give each page its class size as stride
(``/work/notes/fp8_integration.md``); with unpadded per-kind tensors it is what padding would cost.

Units the planner counts (``allocator.py``'s two id spaces plus request slots): a *block page* is
one 256-token block of every layer's compressed pools (CSA main + CSA indexer per CSA layer, HCA
per HCA layer); a *window page* is ``sliding_window`` raw positions of every layer plus the CSA
overlap snapshot (a request holds up to 2 while decoding, a cached resume point 1); a *request
slot* is one running request's live fp32 compressor state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from sgl_kernel_v4.ref import kv_quant

from sglang_v4.configs.model_config import ModelConfig

__all__ = [
    "KV_CACHE_DTYPES",
    "BLOCK_KINDS",
    "WINDOW_KINDS",
    "EntryFormats",
    "KindSpec",
    "SizeClass",
    "KVLayout",
    "KVPlan",
    "normalize_kv_cache_dtype",
    "entry_formats",
    "build_kv_layout",
    "encode_entries",
    "decode_entries",
    "alloc_kind_storage",
    "KVRowsView",
    "plan_kv_pools",
    "kv_bytes_for_context",
    "v32_kv_bytes_per_token",
    "V32_NUM_LAYERS",
    "GiB",
]

GiB = 1 << 30
KV_CACHE_DTYPES = ("fp32", "bf16", "fp8_e4m3")
_DTYPE_ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
}
_FP8_QUANT_BLOCK = 64
_FP4_BLOCK = 32
_STATE_ELEM_BYTES = 4  # compressor state is fp32

BLOCK_KINDS = ("csa_main", "csa_indexer", "hca")
WINDOW_KINDS = ("swa",)

# DeepSeek-V3.2 (MLA + lightning indexer): 61 layers, kv_lora_rank 512 + rope 64, indexer 128-d.
V32_NUM_LAYERS = 61
V32_KV_LORA_RANK = 512
V32_ROPE_DIM = 64
V32_INDEX_HEAD_DIM = 128


# ---------------------------------------------------------------------------------------------
# entry formats
# ---------------------------------------------------------------------------------------------
def normalize_kv_cache_dtype(value: str | None, model_dtype: str | torch.dtype | None = None) -> str:
    """Canonical KV dtype name: ``"fp32"``, ``"bf16"`` or ``"fp8_e4m3"``.

    ``None`` / ``"auto"`` map to the model dtype (``float32`` -> ``fp32``, anything else -> ``bf16``).

    Raises:
        ValueError: for an unknown name (``kv_cache_dtype``).
    """
    if value is None or str(value).lower() == "auto":
        if model_dtype in (torch.float32, "float32", "fp32", "float"):
            return "fp32"
        return "bf16"
    key = str(value).lower()
    if key not in _DTYPE_ALIASES:
        raise ValueError(f"kv_cache_dtype: expected one of auto, {', '.join(KV_CACHE_DTYPES)}; got {value!r}")
    return _DTYPE_ALIASES[key]


@dataclass(frozen=True)
class EntryFormats:
    """Byte sizes of one entry of each cache, and the storage tensor dtype the pools should use.

    Attributes:
        kv_cache_dtype: canonical dtype name.
        fp4_indexer: whether indexer keys are fp4 (e2m1) instead of the dtype's default.
        head_dim / rope_dim / index_head_dim: the model's dims.
        main_entry_bytes: one CSA-main / HCA / sliding-window entry (584 in fp8 for V4).
        main_data_bytes: the data row of a main entry (576 in fp8; the whole entry otherwise).
        indexer_entry_bytes: one indexer key (132 fp8, 68 fp4, 2*d bf16).
        indexer_data_bytes: its value bytes (d fp8, d/2 fp4, the whole entry otherwise).
        main_storage_dtype / indexer_storage_dtype: element dtype of the pool tensors
            (``torch.uint8`` for the quantized formats, ``bfloat16`` / ``float32`` otherwise).
        main_row_elems / indexer_row_elems: last dim of those tensors (bytes for uint8 storage,
            elements otherwise): a main pool is ``[pages, entries_per_page, main_row_elems]``.
        page_align: allocation unit pages are padded to (576 in fp8: FlashMLA's row stride; 512
            otherwise).
    """

    kv_cache_dtype: str
    fp4_indexer: bool
    head_dim: int
    rope_dim: int
    index_head_dim: int
    main_entry_bytes: int
    main_data_bytes: int
    indexer_entry_bytes: int
    indexer_data_bytes: int
    main_storage_dtype: torch.dtype
    indexer_storage_dtype: torch.dtype
    main_row_elems: int
    indexer_row_elems: int
    page_align: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["main_storage_dtype"] = str(self.main_storage_dtype).replace("torch.", "")
        d["indexer_storage_dtype"] = str(self.indexer_storage_dtype).replace("torch.", "")
        return d


def _float_bytes(dtype: str) -> int:
    return 4 if dtype == "fp32" else 2


def entry_formats(
    model_config: ModelConfig, kv_cache_dtype: str | None = "bf16", fp4_indexer: bool = False
) -> EntryFormats:
    """Entry byte sizes and storage dtypes for ``model_config`` in ``kv_cache_dtype``.

    Sizes follow ``sgl_kernel_v4.ref.kv_quant`` (``kv_fp8_entry_bytes`` etc.): fp8 main entries
    are ``nope + 2 * rope + nope / 64 + 1`` bytes, fp8 indexer keys ``d + 4``, fp4 indexer keys
    ``d / 2 + d / 32``. ``fp4_indexer`` applies with any main dtype.

    Raises:
        ValueError: for an unknown dtype, or dims the quantized formats cannot hold (``head_dim -
            rope_dim`` not a multiple of 64 in fp8, ``index_head_dim`` not a multiple of 32 for fp4).
    """
    dt = normalize_kv_cache_dtype(kv_cache_dtype)
    hd, rd, idx = model_config.head_dim, model_config.rope_dim, model_config.index_head_dim
    fb = _float_bytes(dt)
    float_storage = torch.float32 if dt == "fp32" else torch.bfloat16
    if dt == "fp8_e4m3":
        nope = hd - rd
        if nope <= 0 or nope % _FP8_QUANT_BLOCK != 0:
            raise ValueError(
                f"kv_cache_dtype: fp8_e4m3 needs head_dim - qk_rope_head_dim ({hd} - {rd}) to be a "
                f"positive multiple of {_FP8_QUANT_BLOCK}"
            )
        main_data = nope + 2 * rd
        main_entry = main_data + nope // _FP8_QUANT_BLOCK + 1
        main_storage, main_elems, align = torch.uint8, main_entry, main_data
        idx_entry, idx_data = idx + 4, idx
        idx_storage, idx_elems = torch.uint8, idx + 4
    else:
        main_entry = main_data = hd * fb
        main_storage, main_elems, align = float_storage, hd, 512
        idx_entry = idx_data = idx * fb
        idx_storage, idx_elems = float_storage, idx
    if fp4_indexer:
        if idx % _FP4_BLOCK != 0:
            raise ValueError(f"enable_fp4_indexer: index_head_dim {idx} must be a multiple of {_FP4_BLOCK}")
        idx_data = idx // 2
        idx_entry = idx_data + idx // _FP4_BLOCK
        idx_storage, idx_elems = torch.uint8, idx_entry
    return EntryFormats(
        kv_cache_dtype=dt,
        fp4_indexer=bool(fp4_indexer),
        head_dim=hd,
        rope_dim=rd,
        index_head_dim=idx,
        main_entry_bytes=main_entry,
        main_data_bytes=main_data,
        indexer_entry_bytes=idx_entry,
        indexer_data_bytes=idx_data,
        main_storage_dtype=main_storage,
        indexer_storage_dtype=idx_storage,
        main_row_elems=main_elems,
        indexer_row_elems=idx_elems,
        page_align=align,
    )


# ---------------------------------------------------------------------------------------------
# page kinds and size classes
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KindSpec:
    """One kind of page.

    Attributes:
        kind: one of :data:`BLOCK_KINDS`, :data:`WINDOW_KINDS`.
        scope: ``"block"`` (pages per layer per 256-token block) or ``"window"`` (pages per layer
            per window page).
        num_layers: layers that have this kind.
        rows_per_page: entries in one page.
        row_bytes: bytes of one entry.
        raw_page_bytes: ``rows_per_page * row_bytes``.
        aligned_page_bytes: rounded up to the allocation unit.
        page_bytes: the size class the kind is served from (>= aligned).
        pages_per_unit: pages per layer per block / window page.
    """

    kind: str
    scope: str
    num_layers: int
    rows_per_page: int
    row_bytes: int
    raw_page_bytes: int
    aligned_page_bytes: int
    page_bytes: int
    pages_per_unit: int

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
        return self.num_layers * self.pages_per_unit * self.padding_per_page


@dataclass(frozen=True)
class SizeClass:
    """A page size served by one allocator, and the kinds it serves."""

    page_bytes: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class KVLayout:
    """Per-kind page geometry and size classes of one model / dtype / page size.

    Attributes:
        formats: entry byte sizes.
        page_size: tokens per logical block (256).
        kinds: kind name -> :class:`KindSpec` (kinds with no layers are omitted).
        classes: at most ``max_classes`` :class:`SizeClass`, largest first.
        window_snapshot_bytes: fp32 CSA overlap snapshot stored with each window page (all CSA
            layers: ``m`` rows of kv and score, main ``d`` and indexer ``d_I`` wide).
        request_state_bytes: fp32 live compressor state of one request slot (per CSA layer:
            partial buffer ``m x 2d`` kv + score and overlap ``m x d`` kv + score, main and
            indexer; per HCA layer: ``m' x d`` kv + score).

    Derived: ``block_page_bytes`` (one block page, all layers, class-padded), ``window_page_bytes``
    (one window page: class-padded SWA pages + snapshot), their ``*_padding_bytes``.
    """

    formats: EntryFormats
    page_size: int
    sliding_window: int
    num_layers: int
    num_csa_layers: int
    num_hca_layers: int
    csa_ratio: int
    hca_ratio: int
    kinds: dict[str, KindSpec]
    classes: tuple[SizeClass, ...]
    window_snapshot_bytes: int
    request_state_bytes: int

    def _sum(self, scope: str, attr: str) -> int:
        return sum(getattr(k, attr) for k in self.kinds.values() if k.scope == scope)

    @property
    def block_page_bytes(self) -> int:
        return self._sum("block", "bytes_per_unit")

    @property
    def window_page_bytes(self) -> int:
        return self._sum("window", "bytes_per_unit") + self.window_snapshot_bytes

    @property
    def block_padding_bytes(self) -> int:
        return self._sum("block", "padding_per_unit")

    @property
    def window_padding_bytes(self) -> int:
        return self._sum("window", "padding_per_unit")

    def page_bytes(self, kind: str) -> int:
        """Size-class bytes of one page of ``kind`` (per layer)."""
        return self.kinds[kind].page_bytes

    def block_bytes_per_layer(self, kind: str) -> int:
        """Allocated bytes of ``kind`` per 256-token block and layer (block kinds)."""
        k = self.kinds[kind]
        if k.scope != "block":
            raise ValueError(f"kind: {kind!r} is not per block (scope {k.scope!r})")
        return k.pages_per_unit * k.page_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "formats": self.formats.to_dict(),
            "page_size": self.page_size,
            "kinds": {
                n: {**asdict(k), "padding_per_page": k.padding_per_page} for n, k in self.kinds.items()
            },
            "classes": [{"page_bytes": c.page_bytes, "kinds": list(c.kinds)} for c in self.classes],
            "block_page_bytes": self.block_page_bytes,
            "window_page_bytes": self.window_page_bytes,
            "window_snapshot_bytes": self.window_snapshot_bytes,
            "request_state_bytes": self.request_state_bytes,
        }


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _bucket(sizes: dict[str, int], weights: dict[str, int], max_classes: int) -> dict[str, int]:
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


def build_kv_layout(
    model_config: ModelConfig,
    kv_cache_dtype: str | None = "bf16",
    fp4_indexer: bool = False,
    page_size: int = 256,
    max_classes: int = 3,
) -> KVLayout:
    """Page geometry, size classes and per-block / per-window bytes (derivation in the module doc).

    Args:
        model_config: the model.
        kv_cache_dtype: ``bf16`` / ``fp32`` / ``fp8_e4m3`` (or ``auto`` = bf16).
        fp4_indexer: fp4 indexer keys.
        page_size: tokens per logical block; a positive multiple of both compression ratios.
        max_classes: at most this many page-size classes (3).

    Raises:
        ValueError: bad ``page_size`` / ``max_classes`` / dtype.
    """
    fmt = entry_formats(model_config, kv_cache_dtype, fp4_indexer)
    m, mp = model_config.csa_ratio, model_config.hca_ratio
    window = model_config.sliding_window
    if page_size <= 0 or page_size % m != 0 or page_size % mp != 0 or page_size % window != 0:
        raise ValueError(
            f"page_size: must be a positive multiple of {m}, {mp} and the sliding window {window}, "
            f"got {page_size}"
        )
    if max_classes < 1:
        raise ValueError(f"max_classes: must be >= 1, got {max_classes}")
    n_layers = model_config.num_layers
    n_csa, n_hca = len(model_config.csa_layers), len(model_config.hca_layers)
    hd, idx = fmt.head_dim, fmt.index_head_dim
    align = fmt.page_align

    # (scope, layers, rows per page, row bytes, rows per unit)
    main_rows = page_size // m
    geo: dict[str, tuple[str, int, int, int, int]] = {
        "csa_main": ("block", n_csa, main_rows, fmt.main_entry_bytes, main_rows),
        "csa_indexer": ("block", n_csa, main_rows, fmt.indexer_entry_bytes, main_rows),
        "hca": ("block", n_hca, page_size // mp, fmt.main_entry_bytes, page_size // mp),
        # SWA page = as many raw positions as a CSA main page has entries (shared page size)
        "swa": ("window", n_layers, main_rows, fmt.main_entry_bytes, window),
    }
    geo = {k: v for k, v in geo.items() if v[1] > 0}
    aligned = {k: _round_up(v[2] * v[3], align) for k, v in geo.items()}
    pages_per_unit = {k: -(-v[4] // v[2]) for k, v in geo.items()}
    # bucketing weights: pages of each kind for one request at the model's full context
    blocks_ref = max(1, -(-model_config.context_length // page_size))
    weights = {k: v[1] * pages_per_unit[k] * (blocks_ref if v[0] == "block" else 1) for k, v in geo.items()}
    cls = _bucket(aligned, weights, max_classes)
    kinds = {
        k: KindSpec(
            kind=k,
            scope=v[0],
            num_layers=v[1],
            rows_per_page=v[2],
            row_bytes=v[3],
            raw_page_bytes=v[2] * v[3],
            aligned_page_bytes=aligned[k],
            page_bytes=cls[k],
            pages_per_unit=pages_per_unit[k],
        )
        for k, v in geo.items()
    }
    classes = tuple(
        SizeClass(page_bytes=s, kinds=tuple(k for k in kinds if kinds[k].page_bytes == s))
        for s in sorted(set(cls.values()), reverse=True)
    )
    return KVLayout(
        formats=fmt,
        page_size=page_size,
        sliding_window=window,
        num_layers=n_layers,
        num_csa_layers=n_csa,
        num_hca_layers=n_hca,
        csa_ratio=m,
        hca_ratio=mp,
        kinds=kinds,
        classes=classes,
        window_snapshot_bytes=n_csa * m * 2 * (hd + idx) * _STATE_ELEM_BYTES,
        request_state_bytes=(n_csa * m * (2 * 2 * (hd + idx) + 2 * (hd + idx)) + n_hca * mp * 2 * hd)
        * _STATE_ELEM_BYTES,
    )


# ---------------------------------------------------------------------------------------------
# storage helpers for the pools
# ---------------------------------------------------------------------------------------------
def _check_which(which: str) -> None:
    if which not in ("main", "indexer"):
        raise ValueError(f"which: expected 'main' or 'indexer', got {which!r}")


def encode_entries(x: torch.Tensor, fmt: EntryFormats, which: str) -> torch.Tensor:
    """Convert KV vectors to pool storage rows (quantize on write).

    Args:
        x: ``[..., head_dim]`` (``which="main"``: CSA main / HCA / sliding-window entries, rope slice
            already rotated) or ``[..., index_head_dim]`` (``which="indexer"``), any float dtype.
        fmt: from :func:`entry_formats`.
        which: ``"main"`` or ``"indexer"``.

    Returns:
        ``[..., fmt.main_row_elems]`` of ``fmt.main_storage_dtype`` (resp. indexer): uint8 bytes of
        :func:`~sgl_kernel_v4.ref.kv_quant.quantize_kv_fp8` / ``quantize_indexer_fp8`` /
        ``quantize_indexer_fp4`` for the quantized formats, a plain cast otherwise.

    Raises:
        ValueError: on a wrong ``which`` or last dimension.
    """
    _check_which(which)
    dim = fmt.head_dim if which == "main" else fmt.index_head_dim
    if x.shape[-1] != dim:
        raise ValueError(f"x: expected last dim {dim} for {which} entries, got {x.shape[-1]}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, dim)
    if which == "main":
        if fmt.kv_cache_dtype == "fp8_e4m3":
            out = kv_quant.quantize_kv_fp8(x2, rope_dim=fmt.rope_dim)
        else:
            out = x2.to(fmt.main_storage_dtype)
    elif fmt.fp4_indexer:
        out = kv_quant.quantize_indexer_fp4(x2)
    elif fmt.kv_cache_dtype == "fp8_e4m3":
        out = kv_quant.quantize_indexer_fp8(x2)
    else:
        out = x2.to(fmt.indexer_storage_dtype)
    return out.reshape(*lead, out.shape[-1])


def decode_entries(
    rows: torch.Tensor, fmt: EntryFormats, which: str, out_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Inverse of :func:`encode_entries` (dequantize on read): ``[..., row_elems]`` storage rows
    to ``[..., head_dim]`` (or ``index_head_dim``) ``out_dtype`` values.

    Raises:
        ValueError: on a wrong ``which`` or row size.
    """
    _check_which(which)
    elems = fmt.main_row_elems if which == "main" else fmt.indexer_row_elems
    if rows.shape[-1] != elems:
        raise ValueError(f"rows: expected last dim {elems} for {which} storage, got {rows.shape[-1]}")
    lead = rows.shape[:-1]
    r2 = rows.reshape(-1, elems)
    if which == "main":
        if fmt.kv_cache_dtype == "fp8_e4m3":
            out = kv_quant.dequantize_kv_fp8(r2, rope_dim=fmt.rope_dim, out_dtype=out_dtype)
        else:
            out = r2.to(out_dtype)
    elif fmt.fp4_indexer:
        out = kv_quant.dequantize_indexer_fp4(r2, out_dtype=out_dtype)
    elif fmt.kv_cache_dtype == "fp8_e4m3":
        out = kv_quant.dequantize_indexer_fp8(r2, out_dtype=out_dtype)
    else:
        out = r2.to(out_dtype)
    return out.reshape(*lead, out.shape[-1])


def alloc_kind_storage(
    layout: KVLayout,
    kind: str,
    num_pages: int,
    device: torch.device | str = "cpu",
    padded: bool = True,
) -> torch.Tensor:
    """Zeroed storage for ``num_pages`` physical pages of ``kind`` for every layer of that kind.

    Returns:
        ``[num_layers, num_pages, rows_per_page, row_elems]`` of the kind's storage dtype. With
        ``padded`` the page stride is the size class (``spec.page_bytes``: 37,440 B for an fp8 CSA
        main page), i.e. the tensor is a strided view into a ``[num_layers, num_pages,
        page_bytes]`` byte buffer, so the padding the plan reports as fragmentation is really
        allocated and the page layout is the peers'. Without ``padded`` it is contiguous (no
        padding; ``.view(num_layers, -1, row_elems)`` then gives flat slot addressing). A window
        page of ``swa`` is ``spec.pages_per_unit`` (2) consecutive physical pages.

    Raises:
        KeyError: for a kind the layout does not have; ValueError: for ``num_pages < 1``.
    """
    spec = layout.kinds[kind]
    if num_pages < 1:
        raise ValueError(f"num_pages: must be >= 1, got {num_pages}")
    fmt = layout.formats
    dtype = fmt.indexer_storage_dtype if kind == "csa_indexer" else fmt.main_storage_dtype
    elems = fmt.indexer_row_elems if kind == "csa_indexer" else fmt.main_row_elems
    shape = (spec.num_layers, num_pages, spec.rows_per_page, elems)
    if not padded:
        return torch.zeros(shape, dtype=dtype, device=device)
    buf = torch.zeros(spec.num_layers, num_pages, spec.page_bytes, dtype=torch.uint8, device=device)
    data = buf[..., : spec.raw_page_bytes].view(dtype)
    return data.unflatten(-1, (spec.rows_per_page, elems))


class KVRowsView:
    """Flat ``[N, dim]`` float view of a pool's storage rows, quantizing on write and
    dequantizing on read.

    It duck-types the flat pool tensors the torch reference ops index (``flat[slots] = x`` in
    ``ref/rope.qnorm_rope_kv_insert`` and ``ref/compressor``; ``flat[idx]`` in
    ``ref/attention.gather_rows``), so those ops run unchanged on fp8 / fp4 storage. Indices are
    ints, integer tensors (any shape), boolean masks over the ``N`` slots, or slices.

    Args:
        storage: ``[N, row_elems]`` (flat) or ``[num_pages, rows_per_page, row_elems]`` (paged,
            e.g. one layer of :func:`alloc_kind_storage`; flat slot ``s`` is page ``s //
            rows_per_page``, row ``s % rows_per_page``) in the format's storage dtype.
        fmt: the entry formats.
        which: ``"main"`` or ``"indexer"``.
        out_dtype: dtype reads return (and :attr:`dtype` reports, so ``x.to(view.dtype)`` before
            a write keeps full precision until :func:`encode_entries`).

    Raises:
        ValueError: if ``storage`` has the wrong rank or row size.
    """

    def __init__(
        self, storage: torch.Tensor, fmt: EntryFormats, which: str, out_dtype: torch.dtype = torch.float32
    ) -> None:
        _check_which(which)
        elems = fmt.main_row_elems if which == "main" else fmt.indexer_row_elems
        if storage.dim() not in (2, 3) or storage.shape[-1] != elems:
            raise ValueError(f"storage: expected [N, {elems}] or [P, R, {elems}], got {tuple(storage.shape)}")
        self.storage = storage
        self.fmt = fmt
        self.which = which
        self.dtype = out_dtype
        self.rows_per_page = storage.shape[1] if storage.dim() == 3 else 0
        n = storage.shape[0] * storage.shape[1] if storage.dim() == 3 else storage.shape[0]
        self.shape = torch.Size((n, fmt.head_dim if which == "main" else fmt.index_head_dim))

    @property
    def device(self) -> torch.device:
        return self.storage.device

    @property
    def ndim(self) -> int:
        return 2

    def dim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def _loc(self, idx: Any) -> Any:
        if not self.rows_per_page:
            return idx
        if isinstance(idx, slice):
            idx = torch.arange(len(self), device=self.storage.device)[idx]
        elif not isinstance(idx, torch.Tensor):
            idx = torch.as_tensor(idx, dtype=torch.long, device=self.storage.device)
        elif idx.dtype == torch.bool:
            idx = idx.nonzero().squeeze(-1)
        return (idx // self.rows_per_page, idx % self.rows_per_page)

    # gathers with more indices than this dequantize each distinct row once, then expand
    _DEDUP_MIN = 4096

    def __getitem__(self, idx: Any) -> torch.Tensor:
        if isinstance(idx, torch.Tensor) and idx.dtype != torch.bool and idx.numel() > self._DEDUP_MIN:
            # attention gathers repeat rows (every query of a prefill reads the same window /
            # top-k entries): decode the distinct rows once, then index the decoded float rows.
            # Distinct rows via a mark / lookup table over the N slots (no sort) when N is small.
            n = len(self)
            if n <= 8 * idx.numel():
                mark = torch.zeros(n, dtype=torch.bool, device=idx.device)
                mark[idx] = True
                uniq = mark.nonzero().squeeze(-1)
                lut = torch.empty(n, dtype=torch.long, device=idx.device)
                lut[uniq] = torch.arange(uniq.numel(), device=idx.device)
                inv = lut[idx]
            else:
                uniq, inv = torch.unique(idx, return_inverse=True)
            rows = decode_entries(self.storage[self._loc(uniq)], self.fmt, self.which, self.dtype)
            return rows[inv]
        return decode_entries(self.storage[self._loc(idx)], self.fmt, self.which, self.dtype)

    def __setitem__(self, idx: Any, value: torch.Tensor) -> None:
        self.storage[self._loc(idx)] = encode_entries(value, self.fmt, self.which)


# ---------------------------------------------------------------------------------------------
# KV bytes for one sequence (the published figures)
# ---------------------------------------------------------------------------------------------
def kv_bytes_for_context(
    model_config: ModelConfig, kv_cache_dtype: str | None, fp4_indexer: bool, context_length: int
) -> dict[str, Any]:
    """Exact KV bytes (entries only, no page padding, no compressor state) of one sequence.

    ``floor(L / 4)`` CSA main + indexer entries per CSA layer, ``floor(L / 128)`` HCA entries per
    HCA layer, ``min(L, sliding_window)`` raw entries per layer.

    Returns:
        dict with ``total_kv_bytes`` and ``per_layer_type`` ({"csa", "hca", "sliding"} ->
        layers, entry bytes, bytes per token per layer (amortised), bytes for this context).

    Raises:
        ValueError: if ``context_length`` is negative.
    """
    if context_length < 0:
        raise ValueError(f"context_length: must be >= 0, got {context_length}")
    fmt = entry_formats(model_config, kv_cache_dtype, fp4_indexer)
    m, mp, window = model_config.csa_ratio, model_config.hca_ratio, model_config.sliding_window
    n_csa, n_hca = len(model_config.csa_layers), len(model_config.hca_layers)
    n_layers = model_config.num_layers
    win = min(context_length, window)
    swa_per_layer = win * fmt.main_entry_bytes
    csa = n_csa * (context_length // m) * (fmt.main_entry_bytes + fmt.indexer_entry_bytes)
    hca = n_hca * (context_length // mp) * fmt.main_entry_bytes
    swa = n_layers * swa_per_layer
    per = {
        "csa": {
            "layers": n_csa,
            "compress_ratio": m,
            "main_entry_bytes": fmt.main_entry_bytes,
            "indexer_entry_bytes": fmt.indexer_entry_bytes,
            "bytes_per_token_per_layer": (fmt.main_entry_bytes + fmt.indexer_entry_bytes) / m,
            "window_bytes_per_layer": swa_per_layer,
            "compressed_bytes": csa,
            "total_bytes": csa + n_csa * swa_per_layer,
        },
        "hca": {
            "layers": n_hca,
            "compress_ratio": mp,
            "main_entry_bytes": fmt.main_entry_bytes,
            "bytes_per_token_per_layer": fmt.main_entry_bytes / mp,
            "window_bytes_per_layer": swa_per_layer,
            "compressed_bytes": hca,
            "total_bytes": hca + n_hca * swa_per_layer,
        },
        "sliding": {
            "layers": len(model_config.sliding_layers),
            "main_entry_bytes": fmt.main_entry_bytes,
            "bytes_per_token_per_layer": 0.0,
            "window_bytes_per_layer": swa_per_layer,
            "compressed_bytes": 0,
            "total_bytes": len(model_config.sliding_layers) * swa_per_layer,
        },
    }
    return {
        "context_length": context_length,
        "total_kv_bytes": csa + hca + swa,
        "compressed_bytes": csa + hca,
        "window_bytes": swa,
        "per_layer_type": per,
    }


def v32_kv_bytes_per_token(kv_cache_dtype: str | None = "bf16", fp4_indexer: bool = False) -> int:
    """DeepSeek-V3.2 KV bytes per token (all 61 layers): MLA latent + lightning-indexer key.

    bf16 / fp32: ``(576 + 128) * 2`` (or ``* 4``) per layer. fp8: the V3.2 ``fp8_ds_mla`` entry
    (512 e4m3 + 4 fp32 scales + 64 bf16 rope = 656 B) plus the fp8 indexer key (132 B) or, with
    ``fp4_indexer``, the fp4 key (68 B).
    """
    dt = normalize_kv_cache_dtype(kv_cache_dtype)
    if dt == "fp8_e4m3":
        latent = V32_KV_LORA_RANK + 4 * (V32_KV_LORA_RANK // 128) + 2 * V32_ROPE_DIM
        index = V32_INDEX_HEAD_DIM + 4
    else:
        fb = _float_bytes(dt)
        latent = (V32_KV_LORA_RANK + V32_ROPE_DIM) * fb
        index = V32_INDEX_HEAD_DIM * fb
    if fp4_indexer:
        index = V32_INDEX_HEAD_DIM // 2 + V32_INDEX_HEAD_DIM // _FP4_BLOCK
    return V32_NUM_LAYERS * (latent + index)


# ---------------------------------------------------------------------------------------------
# the planner
# ---------------------------------------------------------------------------------------------
@dataclass
class KVPlan:
    """Result of :func:`plan_kv_pools`: what to allocate and what it buys.

    Attributes:
        kv_cache_dtype / fp4_indexer / page_size: inputs.
        entry_bytes: main / indexer entry bytes.
        bytes_per_token_per_layer: amortised compressed bytes per token per layer type
            (``csa``: (main + indexer) / 4, ``hca``: main / 128, ``sliding``: 0) plus
            ``window_bytes_per_layer`` (sliding window of one request, every layer).
        classes: the page-size classes (bytes, kinds, number of pages to allocate).
        block_page_bytes / window_page_bytes / request_state_bytes: unit sizes (all layers; a
            window page includes its fp32 overlap snapshot, a request slot is fp32 state only).
        num_block_pages / num_window_pages / num_request_slots: how many to allocate (usable;
            the pools add the reserved dummy page 0 themselves).
        kv_capacity_tokens: ``num_block_pages * page_size``.
        context_length: the context concurrency was planned for.
        max_context: longest single request the pools can hold (capped by the model's context).
        max_concurrency: requests of ``context_length`` tokens that fit at once.
        total_bytes: bytes of all planned pages and slots; budget_bytes: the budget (or None).
        state_bytes: fp32 compressor state planned (window snapshots + request slots).
        fragmentation_bytes: padding inside the planned pages (allocated but unusable);
            fragmentation_ratio: ``fragmentation_bytes / total_bytes``.
        window_pages_per_request / window_pages_per_block / extra_window_pages: the window-page
            policy the plan was made with (see :func:`plan_kv_pools`).
    """

    kv_cache_dtype: str
    fp4_indexer: bool
    page_size: int
    entry_bytes: dict[str, int]
    bytes_per_token_per_layer: dict[str, float]
    classes: list[dict[str, Any]]
    block_page_bytes: int
    window_page_bytes: int
    request_state_bytes: int
    num_block_pages: int
    num_window_pages: int
    num_request_slots: int
    kv_capacity_tokens: int
    context_length: int
    max_context: int
    max_concurrency: int
    total_bytes: int
    budget_bytes: int | None
    state_bytes: int
    fragmentation_bytes: int
    fragmentation_ratio: float
    layout: KVLayout = field(repr=False)
    window_pages_per_request: int = 3
    window_pages_per_block: float = 0.0
    extra_window_pages: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (the layout included as ``layout``)."""
        d = {k: v for k, v in asdict(self).items() if k != "layout"}
        d["layout"] = self.layout.to_dict()
        return d

    def summary(self) -> str:
        """One log line: capacity, max context, concurrency, fragmentation."""
        return (
            f"KV pools ({self.kv_cache_dtype}{', fp4 indexer' if self.fp4_indexer else ''}): "
            f"{self.num_block_pages} block pages x {self.block_page_bytes} B, "
            f"{self.num_window_pages} window pages x {self.window_page_bytes} B, "
            f"{self.num_request_slots} request slots; KV capacity {self.kv_capacity_tokens} tokens, "
            f"max context {self.max_context}, max concurrency {self.max_concurrency} at "
            f"{self.context_length} tokens, {self.total_bytes / GiB:.3f} GiB, "
            f"fragmentation {self.fragmentation_bytes} B ({100 * self.fragmentation_ratio:.2f}%)"
        )


def plan_kv_pools(
    model_config: ModelConfig,
    kv_cache_dtype: str | None,
    fp4_indexer: bool = False,
    page_size: int = 256,
    budget_bytes: int | None = None,
    max_total_tokens: int | None = None,
    context_length: int | None = None,
    max_running_requests: int | None = None,
    window_pages_per_request: int = 3,
    window_pages_per_block: float = 0.0,
    extra_window_pages: int = 0,
) -> KVPlan:
    """Size the KV pools (called by the runtime at start-up and by the planner CLI).

    Every running request holds ``ceil(L / page_size)`` block pages, one request slot and
    ``window_pages_per_request`` window pages (default 3: the two that cover its last 128
    positions while decoding, plus one for a cached resume point of the radix cache). With ``n``
    request slots and ``w = window_pages_per_request``::

        n = max_running_requests or max(1, budget // (blocks(L) * block + w * window + state))
        num_block_pages = (budget - n * (w * window + state)) // block_page_bytes

    or, with ``max_total_tokens`` instead of a budget, ``num_block_pages = ceil(max_total_tokens /
    page_size)`` and ``n = max(1, num_block_pages // blocks(L))``. ``max_total_tokens`` also caps
    the pages a budget allows. ``max_concurrency = min(n, num_block_pages // blocks(L))``.

    The runtime also keeps resume states of cached blocks (a window page per
    ``resume_interval`` cached blocks, radix cache) and the transient window pages of a prefill
    chunk: ``window_pages_per_block = r`` adds ``floor(r * num_block_pages)`` window pages (and,
    under a budget, makes a block page cost ``block + r * window``), ``extra_window_pages = e``
    adds ``e`` (taken from the budget first)::

        num_window_pages = w * n + floor(r * num_block_pages) + e

    Args:
        model_config: the model.
        kv_cache_dtype: ``bf16`` / ``fp32`` / ``fp8_e4m3`` / ``auto``.
        fp4_indexer: fp4 indexer keys.
        page_size: tokens per block page (256).
        budget_bytes: bytes available for KV (after weights and activations).
        max_total_tokens: token capacity to allocate (``--max-total-tokens``).
        context_length: request length concurrency is planned for (default: the model's
            ``max_position_embeddings``).
        max_running_requests: fixes the number of request slots instead of deriving it.
        window_pages_per_request: window pages planned per request slot.
        window_pages_per_block: window pages planned per block page (resume states; >= 0).
        extra_window_pages: window pages planned on top (>= 0).

    Raises:
        ValueError: if neither ``budget_bytes`` nor ``max_total_tokens`` is given, a value is
            out of range, or the budget cannot hold one request slot plus one block page.
    """
    if budget_bytes is None and max_total_tokens is None:
        raise ValueError("plan_kv_pools: give budget_bytes or max_total_tokens")
    if budget_bytes is not None and budget_bytes <= 0:
        raise ValueError(f"budget_bytes: must be positive, got {budget_bytes}")
    if max_total_tokens is not None and max_total_tokens <= 0:
        raise ValueError(f"max_total_tokens: must be positive, got {max_total_tokens}")
    if window_pages_per_request < 1:
        raise ValueError(f"window_pages_per_request: must be >= 1, got {window_pages_per_request}")
    if window_pages_per_block < 0:
        raise ValueError(f"window_pages_per_block: must be >= 0, got {window_pages_per_block}")
    if extra_window_pages < 0:
        raise ValueError(f"extra_window_pages: must be >= 0, got {extra_window_pages}")
    if max_running_requests is not None and max_running_requests <= 0:
        raise ValueError(f"max_running_requests: must be positive, got {max_running_requests}")
    model_ctx = model_config.context_length
    ctx = model_ctx if context_length is None else int(context_length)
    if ctx <= 0:
        raise ValueError(f"context_length: must be positive, got {ctx}")
    lay = build_kv_layout(model_config, kv_cache_dtype, fp4_indexer, page_size)
    blk, win, st = lay.block_page_bytes, lay.window_page_bytes, lay.request_state_bytes
    per_req_fixed = window_pages_per_request * win + st
    blocks_per_req = -(-ctx // page_size)
    wpb = float(window_pages_per_block)
    blk_cost = blk + wpb * win  # a block page plus its share of resume-state window pages
    fixed = extra_window_pages * win

    if budget_bytes is not None:
        if max_running_requests is not None:
            n = max_running_requests
        else:
            n = max(1, int((budget_bytes - fixed) // (blocks_per_req * blk_cost + per_req_fixed)))
        num_blocks = int((budget_bytes - fixed - n * per_req_fixed) // blk_cost) if blk_cost else 0
        if max_total_tokens is not None:
            num_blocks = min(num_blocks, -(-max_total_tokens // page_size))
        if num_blocks < 1:
            raise ValueError(
                f"budget_bytes: {budget_bytes} B cannot hold {n} request slot(s) "
                f"({per_req_fixed} B each), {extra_window_pages} extra window page(s) "
                f"({win} B each) plus one block page ({int(blk_cost)} B with its resume state)"
            )
    else:
        assert max_total_tokens is not None
        num_blocks = -(-max_total_tokens // page_size)
        n = max_running_requests or max(1, num_blocks // blocks_per_req)

    max_concurrency = min(n, num_blocks // blocks_per_req)
    max_context = min(model_ctx, num_blocks * page_size)
    num_windows = window_pages_per_request * n + int(wpb * num_blocks + 1e-9) + extra_window_pages
    total = num_blocks * blk + num_windows * win + n * st
    frag = num_blocks * lay.block_padding_bytes + num_windows * lay.window_padding_bytes

    fmt = lay.formats
    classes = []
    for c in lay.classes:
        pages = 0
        for k in c.kinds:
            spec = lay.kinds[k]
            units = num_blocks if spec.scope == "block" else num_windows
            pages += units * spec.num_layers * spec.pages_per_unit
        classes.append({"page_bytes": c.page_bytes, "kinds": list(c.kinds), "num_pages": pages})
    m, mp = lay.csa_ratio, lay.hca_ratio
    return KVPlan(
        kv_cache_dtype=fmt.kv_cache_dtype,
        fp4_indexer=fmt.fp4_indexer,
        page_size=page_size,
        entry_bytes={"main": fmt.main_entry_bytes, "indexer": fmt.indexer_entry_bytes},
        bytes_per_token_per_layer={
            "csa": (fmt.main_entry_bytes + fmt.indexer_entry_bytes) / m,
            "hca": fmt.main_entry_bytes / mp,
            "sliding": 0.0,
            "window_bytes_per_layer": float(lay.sliding_window * fmt.main_entry_bytes),
        },
        classes=classes,
        block_page_bytes=blk,
        window_page_bytes=win,
        request_state_bytes=st,
        num_block_pages=int(num_blocks),
        num_window_pages=int(num_windows),
        num_request_slots=int(n),
        kv_capacity_tokens=int(num_blocks * page_size),
        context_length=ctx,
        max_context=int(max_context),
        max_concurrency=int(max_concurrency),
        total_bytes=int(total),
        budget_bytes=budget_bytes,
        state_bytes=int(num_windows * lay.window_snapshot_bytes + n * st),
        fragmentation_bytes=int(frag),
        fragmentation_ratio=frag / total if total else 0.0,
        layout=lay,
        window_pages_per_request=window_pages_per_request,
        window_pages_per_block=wpb,
        extra_window_pages=extra_window_pages,
    )
