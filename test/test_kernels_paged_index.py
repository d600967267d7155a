"""Slot addressing of the paged pools in the kernels: the page / row split runs in int32.

``kv_codec.row_offsets`` splits a flat slot into its page and row in int32 (a 64-bit division is a
subroutine call per key row on the GPU) and forms the element offset in int64. These tests run it
under the Triton interpreter at the edge of that range and compare with Python's integers; the
pools refuse layouts with more slots than int32 holds (``paged.MAX_SLOTS``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


_PROBE = """
import json, sys
import torch
import triton
import triton.language as tl
from sgl_kernel_v4.triton.kv_codec import row_offsets


@triton.jit
def _probe(slot_ptr, out_ptr, rpp, ps, rs, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, row_offsets(tl.load(slot_ptr + offs), rpp, ps, rs))


slots, rpp, ps, rs = json.loads(sys.argv[1])
n = 1 << (len(slots) - 1).bit_length()
src = torch.tensor(slots + [0] * (n - len(slots)), dtype=torch.int32)
out = torch.zeros(n, dtype=torch.int64)
_probe[(1,)](src, out, rpp, ps, rs, N=n)
print(json.dumps(out[: len(slots)].tolist()))
"""


def _offsets(slots: list[int], rpp: int, ps: int, rs: int) -> list[int]:
    """``row_offsets`` of ``slots`` (int32) through a one-program kernel under the interpreter (a
    subprocess: ``TRITON_INTERPRET`` is read when Triton is imported)."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps([slots, rpp, ps, rs])],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "rpp,ps,rs",
    [
        (64, 64 * 512 + 256, 512),
        (2, 2 * 1168 + 64, 584),
        (128, 128 * 640, 640),
        (1, 4096, 0),
        (3, 3 * 68, 68),
    ],
)
def test_row_offsets_match_integer_arithmetic_up_to_the_int32_limit(rpp: int, ps: int, rs: int) -> None:
    """Slots from 0 to ``2**31 - 1`` (the last pages of the largest pool the kernels address)
    give ``(s // rpp) * ps + (s % rpp) * rs`` exactly, offsets far beyond int32 included."""
    top = 2**31 - 1
    slots = [0, 1, rpp - 1, rpp, 12345, 2**24 + 7, 2**30, top - rpp, top - 1, top]
    want = [(s // rpp) * ps + (s % rpp) * rs for s in slots]
    assert _offsets(slots, rpp, ps, rs) == want


def test_pool_layout_beyond_int32_slots_is_refused_by_name() -> None:
    """A layer with more slots than int32 holds is a ValueError naming ``num_slots``; the
    largest allowed is accepted."""
    from sgl_kernel_v4.paged import MAX_SLOTS, PagedRows

    storage = torch.zeros(4, 8)
    PagedRows(storage, "float", 8, 0, 1, 8, 0, MAX_SLOTS)
    with pytest.raises(ValueError, match="num_slots"):
        PagedRows(storage, "float", 8, 0, 1, 8, 0, MAX_SLOTS + 1)
