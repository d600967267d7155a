"""The packed PTX decodes of ``sgl_kernel_v4.triton.fp4_fp8`` (e2m1 nibbles -> e4m3 bytes, four per
32-bit register) replayed on the CPU by a small interpreter of the instructions they use, against
e2m1 values decoded here from the bit fields and torch's float8_e4m3fn: every byte value, and for
the ``fold`` decode every exponent offset per element (the packed elements need not share one).
The GPU runs the same strings (``test_kernels_moe_fp4_fp8.py`` checks them there end to end)."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

_MASK = 0xFFFFFFFF


def _run(asm: str, a2: int, a3: int) -> tuple[int, int]:
    """Execute the b32 subset (mov / and / or / shl / shr / add / sub / prmt) of ``asm``."""
    reg = {"$2": a2, "$3": a3}

    def val(x: str) -> int:
        return reg[x] if x in reg else int(x, 0)

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        args = [x.strip() for x in rest.split(",")]
        a, b = val(args[1]), (val(args[2]) if len(args) > 2 else 0)
        if op == "mov.b32":
            v = a
        elif op == "and.b32":
            v = a & b
        elif op == "or.b32":
            v = a | b
        elif op == "shl.b32":
            v = (a << b) & _MASK
        elif op == "shr.b32":
            v = a >> b
        elif op == "add.u32":
            v = (a + b) & _MASK
        elif op == "sub.u32":
            v = (a - b) & _MASK
        elif op == "prmt.b32":  # default mode: selector nibbles 0-3 pick bytes of (b:a)
            src, sel = (b << 32) | a, val(args[3])
            v = sum(((src >> (8 * ((sel >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4))
        else:
            raise AssertionError(f"unexpected instruction {op}")
        reg[args[0]] = v
    return reg["$0"], reg["$1"]


def _e2m1(nib: int) -> float:
    e, m = (nib >> 1) & 3, nib & 1
    mag = 0.5 * m if e == 0 else (1.0 + 0.5 * m) * 2.0 ** (e - 1)
    return -mag if nib & 8 else mag


def _e4m3(byte: int) -> float:
    return torch.tensor([byte], dtype=torch.uint8).view(torch.float8_e4m3fn).double().item()


@pytest.mark.parametrize("name", ["shift", "table", "fold"])
def test_ptx_decodes_replayed(name: str) -> None:
    from sgl_kernel_v4.triton import fp4_fp8

    asm = {"shift": fp4_fp8._SHIFT_ASM.value, "table": fp4_fp8._table_asm(), "fold": fp4_fp8._table_asm(True)}
    gen = random.Random(7)
    for trial in range(1024):
        bs = [(trial * 4 + i) % 256 if trial < 64 else gen.randrange(256) for i in range(4)]
        d = [gen.randrange(fp4_fp8.FOLD_MAX_SPREAD + 1) for _ in range(4)] if name == "fold" else [0] * 4
        word = sum(b << (8 * i) for i, b in enumerate(bs))
        lo, hi = _run(asm[name], word, sum((8 * x) << (8 * i) for i, x in enumerate(d)))
        for i, b in enumerate(bs):
            for out, nib in ((lo, b & 15), (hi, b >> 4)):
                code = (out >> (8 * i)) & 0xFF
                factor = {"shift": 2.0**6, "table": 1.0, "fold": 2.0 ** (5 - d[i])}[name]
                assert _e4m3(code) * factor == _e2m1(nib), (name, hex(word), i, d[i], hex(code))
                if name != "shift":
                    assert code & 0x7F == 0 or code & 0x7F >= 0x08  # no e4m3 subnormals
