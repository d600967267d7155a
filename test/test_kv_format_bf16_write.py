"""A bf16 KV write into bf16 storage (``encode_entries``) is the identity, as ``Tensor.to`` of a
tensor already of the target dtype is: no float32 copy and cast back per layer and step."""

from __future__ import annotations

import torch
from sglang_v4.mem_cache.kv_format import EntryCodec, EntryFormat, encode_entries


def _bf16_format(dim: int) -> EntryFormat:
    return EntryFormat(EntryCodec.FLOAT, dim, 0, 2 * dim, 2 * dim, torch.bfloat16, dim)


def test_bf16_values_into_bf16_storage_are_not_copied() -> None:
    x = torch.randn(3, 5, 64).to(torch.bfloat16)
    out = encode_entries(x, _bf16_format(64))
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert out.data_ptr() == x.data_ptr()  # x.to(torch.bfloat16) is x itself


def test_float64_values_still_round_once_to_bf16() -> None:
    # 1 + 2**-8 + 2**-40 is just above the bf16 midpoint 1 + 2**-8: the nearest bf16 is 1 + 2**-7
    # (a float32 rounding first would land exactly on the midpoint, and ties-to-even gives 1).
    x = torch.full((1, 64), 1.0 + 2.0**-8 + 2.0**-40, dtype=torch.float64)
    out = encode_entries(x, _bf16_format(64))
    assert out.double()[0, 0].item() == 1.0 + 2.0**-7
