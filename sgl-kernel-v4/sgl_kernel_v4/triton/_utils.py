"""Small helpers shared by the Triton kernel wrappers (imports torch only)."""

from __future__ import annotations

import functools

import torch


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for host ints. The wrappers use this rather than ``triton.cdiv``: that is a
    ``ConstexprFunction`` whose host call costs a few microseconds (~300 calls per forward)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` for host ints (1 for ``n <= 1``: a block size is never 0;
    ``triton.next_power_of_2`` gives 0 or 1 for 0 depending on the interpreter; see :func:`cdiv`)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@functools.lru_cache(maxsize=8)
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Multiprocessor count of ``device`` (132 on H200); 8 for non-CUDA devices (Triton interpreter)."""
    if device.type != "cuda":
        return 8
    return _sms(device.index if device.index is not None else torch.cuda.current_device())
