"""A KV pool that stores, in fp32, what the quantized KV formats store: every write is rounded
through the fp8 / fp4 codecs' torch reference (``sgl_kernel_v4.ref.kv_quant``), so a run over it is
the oracle of a run over the quantized pool (same roundings, no packed bytes)."""

from __future__ import annotations

from typing import Any

import torch
from sgl_kernel_v4.ref import kv_quant as kq
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool

__all__ = ["RoundTripPool", "round_trip_pool"]


class RoundTripRows:
    """fp32 rows that store ``dequantize(quantize(x))`` of what is written (the reference)."""

    def __init__(self, flat: torch.Tensor, codec: str, rope_dim: int) -> None:
        self.flat, self.codec, self.rope_dim = flat, codec, rope_dim
        self.shape, self.dtype, self.device = flat.shape, flat.dtype, flat.device

    def __len__(self) -> int:
        return self.flat.shape[0]

    def __getitem__(self, idx: Any) -> torch.Tensor:
        return self.flat[idx]

    def __setitem__(self, idx: Any, x: torch.Tensor) -> None:
        if self.codec == "fp8_main":
            y = kq.dequantize_kv_fp8(kq.quantize_kv_fp8(x, rope_dim=self.rope_dim), rope_dim=self.rope_dim)
        elif self.codec == "fp4_indexer":
            y = kq.dequantize_indexer_fp4(kq.quantize_indexer_fp4(x))
        else:
            y = kq.dequantize_indexer_fp8(kq.quantize_indexer_fp8(x))
        self.flat[idx] = y


class RoundTripPool(DSV4KVPool):
    """The fp32 pool with KV writes rounded through the codecs of a quantized format: fp8 main
    entries when ``fp8``; indexer keys through fp4 when ``fp4``, else fp8 when ``fp8``."""

    fp8 = False
    fp4 = False

    def rows(self, kind: KVKind, layer: int) -> Any:
        flat = super().rows(kind, layer)
        if kind is KVKind.CSA_INDEXER:
            codec = "fp4_indexer" if self.fp4 else "fp8_indexer" if self.fp8 else None
        else:
            codec = "fp8_main" if self.fp8 else None
        return flat if codec is None else RoundTripRows(flat, codec, self.model_config.rope_dim)


def round_trip_pool(fp8: bool, fp4: bool) -> type[RoundTripPool]:
    """A :class:`RoundTripPool` subclass with the given formats (fp8 main entries / indexer keys
    when ``fp8``; indexer keys through fp4 when ``fp4``)."""
    return type("RoundTripPool", (RoundTripPool,), {"fp8": fp8, "fp4": fp4})
