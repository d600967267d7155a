"""Tile choices of the dense shared-prefix attention (:mod:`sgl_kernel_v4.triton.attention_prefix`),
host side.

The wrapper picks its steps 2-3 and their tiles from a segment's key count ``NK`` (its entries
rounded up to 128): the Triton logits and a rescale pass over ``next_pow2(NK / 64)`` key tiles, or
cuBLAS logits and a softmax pass over ``next_pow2(NK)`` keys (one pass) or 512-key tiles (two).
Each distinct choice is a compiled kernel variant, so the start-up warm-up
(``sglang_v4.model_executor.warmup_long_context``) asks these same functions which entry counts
reach every variant up to the server's context. No Triton import.
"""

from __future__ import annotations

from sgl_kernel_v4.dense_prefix import PREFIX_MIN_ENTRIES
from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

__all__ = [
    "GEMM_LOGITS_MIN_ENTRIES",
    "PREFIX_LOGITS",
    "SOFTMAX_ROW",
    "gemm_logits",
    "padded_entries",
    "prefix_tile_class",
    "prefix_warmup_entry_counts",
    "rescale_tile",
    "softmax_tile",
]

#: Steps 2-3 of :func:`~sgl_kernel_v4.triton.attention_prefix.prefix_attention` (its ``logits`` argument): ``"triton"`` (the logits
#: kernel over key groups, then the rescale pass), ``"gemm"`` (cuBLAS ``Q Kᵀ`` into fp32, then
#: one softmax pass) or ``"auto"``: ``"gemm"`` for segments of at least :data:`GEMM_LOGITS_MIN_ENTRIES`
#: entries. On the H200, one 2,048-token HCA chunk: ``"gemm"`` 1.28x (bf16 entries) / 1.26x (fp8)
#: faster than ``"triton"`` at 1M context (8,192 entries), 0.95x / 1.08x at 131,072 (1,024 entries)
#: (benchmark/RESULTS.md, 2026-12-04 fourth session).
PREFIX_LOGITS = "auto"
#: ``logits="auto"`` takes the cuBLAS logits from this many entries (a 262,144-token context).
GEMM_LOGITS_MIN_ENTRIES = 2048
#: The softmax pass of ``logits="gemm"`` holds a row of up to this many keys in registers (one read
#: of ``S``; 8,192 = a 1M context's HCA entries), longer rows take two passes over tiles.
SOFTMAX_ROW = 8192


def padded_entries(n: int) -> int:
    """Rows of the gathered key tile for ``n`` entries (``attention_prefix.gather_entries``): ``n`` rounded up
    to a multiple of 128, at least 128. The key count ``NK`` every later step of a segment sees."""
    return cdiv(max(int(n), 1), 128) * 128


def softmax_tile(NK: int) -> tuple[int, int, bool, int]:
    """``(BLOCK_M, BLOCK_N, ONE_PASS, num_warps)`` of ``_prefix_softmax_kernel`` over rows of
    ``NK`` keys: one pass with the whole row in registers (``BLOCK_N = next_pow2(NK)``, one row per
    program) up to :data:`SOFTMAX_ROW` keys, else two passes over 512-key tiles, 4 rows per program."""
    one = NK <= SOFTMAX_ROW
    return (1, next_power_of_2(NK), True, 8) if one else (4, 512, False, 4)


def rescale_tile(NT: int) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_T)`` of ``_prefix_rescale_kernel`` over ``NT`` key tiles per row: every
    tile's ``(m, l)`` in one ``[BLOCK_M, BLOCK_T]`` load (``BLOCK_T = next_pow2(NT)``), at most
    4,096 values per program."""
    bt = next_power_of_2(NT)
    return max(1, min(32, 4096 // bt)), bt


def gemm_logits(NK: int, logits: str, fp32_logits: bool) -> bool:
    """Whether a segment of ``NK`` keys takes steps 2-3 as cuBLAS logits + the softmax pass (else
    the Triton logits + the rescale pass): ``logits="gemm"``, or ``"auto"`` from
    :data:`GEMM_LOGITS_MIN_ENTRIES` keys, and only with ``fp32_logits`` (fp32 ``Q Kᵀ`` available)."""
    return fp32_logits and (logits == "gemm" or (logits == "auto" and NK >= GEMM_LOGITS_MIN_ENTRIES))


def prefix_tile_class(
    n_entries: int, fp32_logits: bool, logits: str | None = None, block_n: int = 64
) -> tuple:
    """What :func:`prefix_attention` compiles for a segment of ``n_entries`` entries beyond the
    shape-independent kernels (gather, merge, the Triton logits kernel): ``("gemm", softmax_tile)``
    or ``("triton", rescale_tile)``, from the same functions the wrapper calls. Two entry counts
    with equal classes launch the same kernel variants (counts, rows and slices are runtime
    arguments). ``fp32_logits``: :func:`~sgl_kernel_v4.triton.attention_prefix.fp32_logits_available`; ``logits`` / ``block_n``: as
    ``prefix_attention``."""
    logits = PREFIX_LOGITS if logits is None else logits
    NK = padded_entries(n_entries)
    if gemm_logits(NK, logits, fp32_logits):
        return ("gemm", softmax_tile(NK))
    return ("triton", rescale_tile(NK // block_n))


def prefix_warmup_entry_counts(
    max_entries: int,
    fp32_logits: bool,
    logits: str | None = None,
    block_n: int = 64,
    min_entries: int = PREFIX_MIN_ENTRIES,
) -> list[int]:
    """One entry count per :func:`prefix_tile_class` that segments of ``min_entries`` ..
    ``max_entries`` entries reach (the smallest count of each class, ascending): a start-up warm-up
    that runs :func:`prefix_attention` once per count compiles every variant of the dense path up
    to that context (``max_entries = context_len // ratio``) without a long-context forward.
    Empty when ``max_entries < min_entries``."""
    seen: dict[tuple, int] = {}
    lo = max(1, int(min_entries))
    for nk in range(padded_entries(lo), padded_entries(max_entries) + 1, 128):
        n = max(lo, nk - 127)  # the smallest count padded to nk
        if n <= max_entries:
            seen.setdefault(prefix_tile_class(n, fp32_logits, logits, block_n), n)
    return sorted(seen.values())
