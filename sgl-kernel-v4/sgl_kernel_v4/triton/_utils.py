"""Small helpers shared by the Triton kernel wrappers (imports torch only)."""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=8)
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Multiprocessor count of ``device`` (132 on H200); 8 for non-CUDA devices (Triton interpreter)."""
    if device.type != "cuda":
        return 8
    return _sms(device.index if device.index is not None else torch.cuda.current_device())
