"""Which tokens of a forward take the dense shared-prefix path of HCA attention (host side).

The kernels are :mod:`sgl_kernel_v4.triton.attention_prefix` (its docstring gives the method);
this module has no Triton import, so the model can plan on any machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "PREFIX_MIN_ENTRIES",
    "PREFIX_MIN_TOKENS",
    "PREFIX_P_BYTES",
    "PrefixSegment",
    "dense_prefix_enabled",
    "dense_prefix_segments",
]
#: A request's tokens in one forward take the dense path from this many tokens (fewer rows make
#: the dense products too small to beat the per-token kernel).
PREFIX_MIN_TOKENS = 256
#: ... and from this many compressed entries visible to its first token of the forward (a 32K
#: context; on the H200 a 2,048-token chunk there is 1.0x the paged kernel with bf16 entries and
#: 1.8x with fp8 entries, from 64K 1.5x / 2.5x and up: benchmark/RESULTS.md).
PREFIX_MIN_ENTRIES = 256
#: Bytes of the probability tile ``P`` per token block (the rows are blocked to stay below it).
PREFIX_P_BYTES = 256 << 20


@dataclass(frozen=True)
class PrefixSegment:
    """One request's run of tokens in a forward that takes the dense prefix path.

    Attributes:
        start / end: the run's token rows ``[start, end)`` in the forward.
        req: the request's index in the batch (its row of ``req_rows``).
        n_entries: the largest visible count of the run (the last token's), i.e. the entries gathered.
    """

    start: int
    end: int
    req: int
    n_entries: int


def dense_prefix_segments(
    extend_lens: list[int],
    prefix_lens: list[int],
    ratio: int,
    min_tokens: int = PREFIX_MIN_TOKENS,
    min_entries: int = PREFIX_MIN_ENTRIES,
) -> list[PrefixSegment]:
    """The requests of a forward whose HCA attention takes the dense path, from host lengths only.

    Tokens are laid out request after request (``extend_lens[b]`` tokens of request ``b`` at
    positions ``prefix_lens[b] ...``); the token at position ``p`` sees ``(p + 1) // ratio``
    entries. A request qualifies with ``>= min_tokens`` tokens whose first sees ``>= min_entries``.

    Raises:
        ValueError: the two lists differ in length, or ``ratio`` < 1.
    """
    if len(extend_lens) != len(prefix_lens):
        raise ValueError(f"extend_lens / prefix_lens: lengths {len(extend_lens)} != {len(prefix_lens)}")
    if ratio < 1:
        raise ValueError(f"ratio: expected >= 1, got {ratio}")
    if not extend_lens or max(extend_lens) < min_tokens:
        return []  # decode and short extend batches: no per-request loop (called per layer)
    segs, start = [], 0
    for b, (n, pre) in enumerate(zip(extend_lens, prefix_lens)):
        n, pre = int(n), int(pre)
        if n >= min_tokens and (pre + 1) // ratio >= min_entries:
            segs.append(PrefixSegment(start, start + n, b, (pre + n) // ratio))
        start += n
    return segs


def dense_prefix_enabled() -> bool:
    """False when the environment variable ``SGLANG_V4_HCA_DENSE_PREFIX`` is ``0``: the paged
    kernel then attends every HCA token, as before the dense path existed, and long prefill runs
    over fp8 main entries (CSA attention) or fp4 indexer keys read the pools directly instead of
    a copy decoded once per call."""
    return os.environ.get("SGLANG_V4_HCA_DENSE_PREFIX", "1") != "0"
