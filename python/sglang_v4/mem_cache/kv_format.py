"""Entry formats of DeepSeek-V4's KV caches and their codecs (quantize on write, dequantize on read).

An *entry* is one row of a cache: one compressed CSA / HCA vector, one raw sliding-window vector
or one indexer key. Three KV kinds (CSA main, HCA, sliding window; see
:mod:`sglang_v4.mem_cache.kv_spec`) store the *main* entry format, the CSA indexer stores the
*indexer* entry format. Byte layouts of the quantized formats are defined by the reference codecs
in ``sgl_kernel_v4/ref/kv_quant.py``:

===================  ==============  ==============  ==================================
entry format         bf16            fp8_e4m3        bytes (V4 shapes)
===================  ==============  ==============  ==================================
main (512-d)         512 x 2 = 1024  584             448 e4m3 nope + 64 bf16 rope +
                                                     7 ue8m0 scales (one per 64) + 1 pad
indexer key (128-d)  128 x 2 = 256   132 (fp4: 68)   128 e4m3 + fp32 scale /
                                                     64 B e2m1 + 4 ue8m0 (one per 32)
===================  ==============  ==============  ==================================

``fp32`` doubles the bf16 sizes (the CPU reference dtype). The fp4 indexer
(``--enable-fp4-indexer``) applies with any main dtype. Compressor state is always fp32 and has no
entry format (:mod:`sglang_v4.mem_cache.compressor_state`).

Quantized entries live in ``uint8`` page storage; :class:`KVRowsView` gives such storage the
``[N, dim]`` float-tensor interface the torch reference ops index (``flat[slots] = x``,
``flat[idx]``), so the model runs unchanged on fp8 / fp4 caches.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch
from sgl_kernel_v4.paged import PagedRows
from sgl_kernel_v4.ref import kv_quant

from sglang_v4.configs.model_config import ModelConfig

__all__ = [
    "KV_CACHE_DTYPES",
    "FP8_QUANT_BLOCK",
    "FP4_BLOCK",
    "EntryCodec",
    "EntryFormat",
    "EntryFormats",
    "normalize_kv_cache_dtype",
    "float_bytes",
    "entry_formats",
    "encode_entries",
    "decode_entries",
    "KVRowsView",
]

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
FP8_QUANT_BLOCK = 64  # values per ue8m0 scale of an fp8 main entry
FP4_BLOCK = 32  # values per ue8m0 scale of an fp4 indexer key
# allocation unit of float pages (bytes): FlashInfer's page alignment
_FLOAT_PAGE_ALIGN = 512


class EntryCodec(enum.StrEnum):
    """How an entry's values become storage bytes (``sgl_kernel_v4.ref.kv_quant``)."""

    FLOAT = "float"  # plain fp32 / bf16 values
    FP8_MAIN = "fp8_main"  # quantize_kv_fp8: e4m3 nope + bf16 rope + ue8m0 scales
    FP8_INDEXER = "fp8_indexer"  # quantize_indexer_fp8: e4m3 + one fp32 scale
    FP4_INDEXER = "fp4_indexer"  # quantize_indexer_fp4: e2m1 + ue8m0 scale per 32


@dataclass(frozen=True)
class EntryFormat:
    """One entry format: the values it holds and the bytes it takes.

    Attributes:
        codec: how values are encoded.
        dim: values per entry (``head_dim`` for main entries, ``index_head_dim`` for indexer keys).
        rope_dim: trailing rope values of a main entry (kept bf16 by the fp8 codec; 0 for keys).
        entry_bytes: bytes of one entry (584 for an fp8 V4 main entry).
        data_bytes: its value bytes without scales (576 fp8 main, ``dim`` fp8 key, ``dim / 2`` fp4
            key; the whole entry for float formats).
        storage_dtype: element dtype of the storage tensor (``torch.uint8`` when quantized).
        row_elems: last dim of the storage tensor (bytes for uint8 storage, values otherwise).
    """

    codec: EntryCodec
    dim: int
    rope_dim: int
    entry_bytes: int
    data_bytes: int
    storage_dtype: torch.dtype
    row_elems: int

    @property
    def quantized(self) -> bool:
        """Whether the storage holds encoded bytes (reads dequantize through :class:`KVRowsView`)."""
        return self.codec is not EntryCodec.FLOAT

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return {
            "codec": self.codec.value,
            "dim": self.dim,
            "entry_bytes": self.entry_bytes,
            "data_bytes": self.data_bytes,
            "storage_dtype": str(self.storage_dtype).replace("torch.", ""),
            "row_elems": self.row_elems,
        }


@dataclass(frozen=True)
class EntryFormats:
    """The two entry formats of one model in one ``kv_cache_dtype``.

    Attributes:
        kv_cache_dtype: canonical dtype name (``fp32`` / ``bf16`` / ``fp8_e4m3``).
        fp4_indexer: whether indexer keys are fp4 (e2m1).
        main: format of CSA main, HCA and sliding-window entries.
        indexer: format of CSA indexer keys.
        page_align: allocation unit pages are padded to, bytes (576 in fp8: the data row of a main
            entry, FlashMLA's page row stride; 512 otherwise).
    """

    kv_cache_dtype: str
    fp4_indexer: bool
    main: EntryFormat
    indexer: EntryFormat
    page_align: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return {
            "kv_cache_dtype": self.kv_cache_dtype,
            "fp4_indexer": self.fp4_indexer,
            "main": self.main.to_dict(),
            "indexer": self.indexer.to_dict(),
            "page_align": self.page_align,
        }


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


def float_bytes(kv_cache_dtype: str) -> int:
    """Bytes per value of a float ``kv_cache_dtype`` (4 for ``fp32``, 2 otherwise)."""
    return 4 if kv_cache_dtype == "fp32" else 2


def entry_formats(
    model_config: ModelConfig, kv_cache_dtype: str | None = "bf16", fp4_indexer: bool = False
) -> EntryFormats:
    """Entry formats of ``model_config`` in ``kv_cache_dtype``.

    Sizes follow ``sgl_kernel_v4.ref.kv_quant`` (``kv_fp8_entry_bytes`` etc.): fp8 main entries
    are ``nope + 2 * rope + nope / 64 + 1`` bytes, fp8 indexer keys ``d + 4``, fp4 indexer keys
    ``d / 2 + d / 32``.

    Raises:
        ValueError: for an unknown dtype, or dims the quantized formats cannot hold (``head_dim -
            rope_dim`` not a multiple of 64 in fp8, ``index_head_dim`` not a multiple of 32 for fp4).
    """
    dt = normalize_kv_cache_dtype(kv_cache_dtype)
    hd, rd, idx = model_config.head_dim, model_config.rope_dim, model_config.index_head_dim
    fb = float_bytes(dt)
    float_storage = torch.float32 if dt == "fp32" else torch.bfloat16
    if dt == "fp8_e4m3":
        nope = hd - rd
        if nope <= 0 or nope % FP8_QUANT_BLOCK != 0:
            raise ValueError(
                f"kv_cache_dtype: fp8_e4m3 needs head_dim - qk_rope_head_dim ({hd} - {rd}) to be a "
                f"positive multiple of {FP8_QUANT_BLOCK}"
            )
        data = nope + 2 * rd
        entry = data + nope // FP8_QUANT_BLOCK + 1
        main = EntryFormat(EntryCodec.FP8_MAIN, hd, rd, entry, data, torch.uint8, entry)
        indexer = EntryFormat(EntryCodec.FP8_INDEXER, idx, 0, idx + 4, idx, torch.uint8, idx + 4)
        align = data
    else:
        main = EntryFormat(EntryCodec.FLOAT, hd, rd, hd * fb, hd * fb, float_storage, hd)
        indexer = EntryFormat(EntryCodec.FLOAT, idx, 0, idx * fb, idx * fb, float_storage, idx)
        align = _FLOAT_PAGE_ALIGN
    if fp4_indexer:
        if idx % FP4_BLOCK != 0:
            raise ValueError(f"enable_fp4_indexer: index_head_dim {idx} must be a multiple of {FP4_BLOCK}")
        data = idx // 2
        entry = data + idx // FP4_BLOCK
        indexer = EntryFormat(EntryCodec.FP4_INDEXER, idx, 0, entry, data, torch.uint8, entry)
    return EntryFormats(
        kv_cache_dtype=dt, fp4_indexer=bool(fp4_indexer), main=main, indexer=indexer, page_align=align
    )


def encode_entries(x: torch.Tensor, fmt: EntryFormat) -> torch.Tensor:
    """Convert KV vectors to storage rows (quantize on write).

    Args:
        x: ``[..., fmt.dim]`` values, any float dtype (main entries with the rope slice already
            rotated).
        fmt: the entry format of the cache written.

    Returns:
        ``[..., fmt.row_elems]`` of ``fmt.storage_dtype``: uint8 bytes of
        :func:`~sgl_kernel_v4.ref.kv_quant.quantize_kv_fp8` / ``quantize_indexer_fp8`` /
        ``quantize_indexer_fp4`` for the quantized codecs, a cast otherwise; every codec rounds a
        float64 input once, to the nearest value of the stored format
        (:func:`~sgl_kernel_v4.ref.kv_quant.to_float32_round_odd`).

    Raises:
        ValueError: if the last dimension of ``x`` is not ``fmt.dim``.
    """
    if x.shape[-1] != fmt.dim:
        raise ValueError(f"x: expected last dim {fmt.dim} for {fmt.codec.value} entries, got {x.shape[-1]}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, fmt.dim)
    if fmt.codec is EntryCodec.FP8_MAIN:
        out = kv_quant.quantize_kv_fp8(x2, rope_dim=fmt.rope_dim)
    elif fmt.codec is EntryCodec.FP8_INDEXER:
        out = kv_quant.quantize_indexer_fp8(x2)
    elif fmt.codec is EntryCodec.FP4_INDEXER:
        out = kv_quant.quantize_indexer_fp4(x2)
    elif fmt.storage_dtype == torch.bfloat16 and x2.dtype == torch.float64:  # rounded once, not twice
        out = kv_quant.to_float32_round_odd(x2).to(torch.bfloat16)
    else:
        out = x2.to(fmt.storage_dtype)
    return out.reshape(*lead, out.shape[-1])


def decode_entries(
    rows: torch.Tensor, fmt: EntryFormat, out_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Inverse of :func:`encode_entries` (dequantize on read): ``[..., fmt.row_elems]`` storage rows
    to ``[..., fmt.dim]`` values of ``out_dtype``.

    Raises:
        ValueError: if the last dimension of ``rows`` is not ``fmt.row_elems``.
    """
    if rows.shape[-1] != fmt.row_elems:
        raise ValueError(
            f"rows: expected last dim {fmt.row_elems} for {fmt.codec.value} storage, got {rows.shape[-1]}"
        )
    lead = rows.shape[:-1]
    r2 = rows.reshape(-1, fmt.row_elems)
    if fmt.codec is EntryCodec.FP8_MAIN:
        out = kv_quant.dequantize_kv_fp8(r2, rope_dim=fmt.rope_dim, out_dtype=out_dtype)
    elif fmt.codec is EntryCodec.FP8_INDEXER:
        out = kv_quant.dequantize_indexer_fp8(r2, out_dtype=out_dtype)
    elif fmt.codec is EntryCodec.FP4_INDEXER:
        out = kv_quant.dequantize_indexer_fp4(r2, out_dtype=out_dtype)
    else:
        out = r2.to(out_dtype)
    return out.reshape(*lead, out.shape[-1])


class KVRowsView:
    """Flat ``[N, dim]`` float view of quantized storage rows: quantizes on write, dequantizes on
    read.

    It duck-types the flat pool tensors the torch reference ops index (``flat[slots] = x`` in
    ``ref/rope.qnorm_rope_kv_insert`` and ``ref/compressor``; ``flat[idx]`` in
    ``ref/attention.gather_rows``), so those ops run unchanged on fp8 / fp4 storage. Indices are
    ints, integer tensors (any shape), boolean masks over the ``N`` slots, or slices.

    Args:
        storage: ``[N, row_elems]`` (flat) or ``[num_pages, rows_per_page, row_elems]`` (paged, e.g.
            one layer of :meth:`~sglang_v4.mem_cache.kv_spec.KVCacheSpec.allocate`; flat slot ``s``
            is page ``s // rows_per_page``, row ``s % rows_per_page``) of ``fmt.storage_dtype``.
        fmt: the entry format.
        out_dtype: dtype reads return (and :attr:`dtype` reports, so ``x.to(view.dtype)`` before a
            write keeps full precision until :func:`encode_entries`).

    Raises:
        ValueError: if ``storage`` has the wrong rank or row size.
    """

    def __init__(
        self, storage: torch.Tensor, fmt: EntryFormat, out_dtype: torch.dtype = torch.float32
    ) -> None:
        elems = fmt.row_elems
        if storage.dim() not in (2, 3) or storage.shape[-1] != elems:
            raise ValueError(f"storage: expected [N, {elems}] or [P, R, {elems}], got {tuple(storage.shape)}")
        self.storage = storage
        self.fmt = fmt
        self.dtype = out_dtype
        self.rows_per_page = storage.shape[1] if storage.dim() == 3 else 0
        n = storage.shape[0] * storage.shape[1] if storage.dim() == 3 else storage.shape[0]
        self.shape = torch.Size((n, fmt.dim))

    @property
    def device(self) -> torch.device:
        """The storage's device."""
        return self.storage.device

    @property
    def ndim(self) -> int:
        """2: the view is ``[N, dim]`` like a tensor of entries."""
        return 2

    def dim(self) -> int:
        """2 (``Tensor.dim()``'s answer for the ``[N, dim]`` view)."""
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
            rows = decode_entries(self.storage[self._loc(uniq)], self.fmt, self.dtype)
            return rows[inv]
        return decode_entries(self.storage[self._loc(idx)], self.fmt, self.dtype)

    def __setitem__(self, idx: Any, value: torch.Tensor) -> None:
        self.storage[self._loc(idx)] = encode_entries(value, self.fmt)

    def paged(self) -> PagedRows:
        """How a kernel addresses these rows (:class:`sgl_kernel_v4.paged.PagedRows`): flat slot
        ``s`` at byte ``(s // rows_per_page) * page_stride + (s % rows_per_page) * row_stride`` of
        the storage, the page stride being the size class of padded storage."""
        st = self.storage
        if st.dim() == 3:
            rpp, ps, rs = st.shape[1], st.stride(0), st.stride(1)
        else:
            rpp, ps, rs = 1, st.stride(0), 0
        return PagedRows(st, self.fmt.codec.value, self.fmt.dim, self.fmt.rope_dim, rpp, ps, rs, len(self))
