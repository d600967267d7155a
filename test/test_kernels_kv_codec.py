"""The Triton KV codec helpers (``sgl_kernel_v4.triton.kv_codec``) on fp8 / fp4 indexer-key rows
against the torch reference codec (``sglang_v4.mem_cache.kv_format``): bytes written by
``store_entry`` equal the reference encoding, and ``load_key`` decodes reference-encoded rows
exactly, at every row of a page (an fp8 indexer row is 132 bytes, so most rows and their fp32
scales are only 4-byte aligned: a scale read through a cast fp32 pointer faulted on the H200 with
a misaligned address).

Marked ``gpu``; on the CPU they run under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS

triton = pytest.importorskip("triton")  # the kernels below are defined at import
import triton.language as tl  # noqa: E402
from sgl_kernel_v4.triton.kv_codec import (  # noqa: E402
    aligned,
    load_fp4_key_block,
    load_fp4_key_row,
    load_key,
    row_offsets,
    store_entry,
)

pytestmark = KERNEL_MARKS


@triton.jit
def _write_rows_kernel(x_ptr, pool_ptr, rpp, ps, rs, CODEC: tl.constexpr, D: tl.constexpr):
    i = tl.program_id(0)
    y = tl.load(x_ptr + i * D + tl.arange(0, D))
    off = row_offsets(i + tl.zeros([1], tl.int32), rpp, ps, rs)
    store_entry(pool_ptr, tl.sum(off, 0), y, CODEC, D, D)


@triton.jit
def _read_rows_kernel(pool_ptr, out_ptr, N, rpp, ps, rs, CODEC: tl.constexpr, D: tl.constexpr,
                      BLOCK: tl.constexpr):  # fmt: skip
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < N
    offs_d = tl.arange(0, D)
    x, s = load_key(pool_ptr, row_offsets(r, rpp, ps, rs), valid, offs_d, CODEC, D)
    tl.store(out_ptr + r[:, None] * D + offs_d[None, :], x * s[:, None], mask=valid[:, None])


@triton.jit
def _read_fp4_blocks_kernel(pool_ptr, out_ptr, N, rpp, ps, rs, D: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < N
    base = aligned(pool_ptr, row_offsets(r, rpp, ps, rs), 3, D, D)
    offs = tl.arange(0, 32)
    for j in tl.static_range(D // 32):
        x = load_fp4_key_block(base, j, valid, D).to(tl.float32)
        tl.store(out_ptr + r[:, None] * D + j * 32 + offs[None, :], x, mask=valid[:, None])


@triton.jit
def _read_fp4_rows_kernel(pool_ptr, out_ptr, N, rpp, ps, rs, D: tl.constexpr, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = r < N
    base = aligned(pool_ptr, row_offsets(r, rpp, ps, rs), 3, D, D)
    x = load_fp4_key_row(base, valid, D).to(tl.float32)
    tl.store(out_ptr + r[:, None] * D + tl.arange(0, D)[None, :], x, mask=valid[:, None])


@pytest.mark.parametrize("fp4", [False, True])
def test_indexer_rows_write_and_read_like_the_reference(fp4: bool) -> None:
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import decode_entries, encode_entries
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    spec = build_kv_layout(ModelConfig.from_dict(get_preset("tiny")), "fp8_e4m3", fp4, 256).kinds[
        KVKind.CSA_INDEXER
    ]
    fmt = spec.entry
    D = fmt.dim
    st = spec.allocate(2, DEVICE)[0]  # [pages, rows_per_page, row bytes]
    P, R, B = st.shape
    N = P * R
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(N, D, generator=gen) * torch.logspace(-3, 2, N)[:, None]).float()
    # exact ties: every multiple of 1/8 in [-6, 6] (the e2m1 midpoints and many e4m3 ones) beside
    # an amax of 6, at scales 2**k, and a row below the 1e-4 amax floor
    ties = torch.tensor([i / 8 for i in range(-48, 49)] + [6.0] * (-97 % D), dtype=torch.float32)
    ties = ties.reshape(-1, D)
    for i, k in enumerate((-20, -3, 0, 4)):
        x[i * ties.shape[0] : (i + 1) * ties.shape[0]] = ties * 2.0**k
    x[-1] = 2.0**-30
    # write: the kernel's bytes are the reference encoding
    _write_rows_kernel[(N,)](x.to(DEVICE), st, R, st.stride(0), st.stride(1), CODEC=3 if fp4 else 2, D=D)
    want = encode_entries(x, fmt).reshape(P, R, B)
    assert torch.equal(st.cpu(), want)
    # read: reference-encoded rows decode exactly as the reference decodes them
    src = spec.allocate(2, DEVICE)[0]  # the pool's (padded) page stride
    src.copy_(want.to(DEVICE))
    out = torch.empty(N, D, device=DEVICE)
    _read_rows_kernel[(triton.cdiv(N, 64),)](
        src, out, N, R, src.stride(0), src.stride(1), CODEC=3 if fp4 else 2, D=D, BLOCK=64
    )
    assert torch.equal(out.cpu(), decode_entries(want.reshape(N, B), fmt))


@pytest.mark.parametrize("reader", ["blocks", "rows"])
def test_fp4_key_blocks_decode_like_the_reference(reader: str) -> None:
    """``load_fp4_key_block`` (one 32-value block per call) and ``load_fp4_key_row`` (the whole
    key, both nibbles of each byte joined), bf16 built from the e2m1 code and the ue8m0 byte by
    integer ops, decode reference-encoded fp4 rows exactly as the reference codec does: every e2m1
    code (the subnormal 0.5 and the zeros included), both signs and scales over five decades, at
    every row of two pages (68-byte rows: 4-byte aligned)."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import decode_entries, encode_entries
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    spec = build_kv_layout(ModelConfig.from_dict(get_preset("tiny")), "fp8_e4m3", True, 256).kinds[
        KVKind.CSA_INDEXER
    ]
    fmt = spec.entry
    D = fmt.dim
    src = spec.allocate(2, DEVICE)[0]
    P, R, B = src.shape
    N = P * R
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(N, D, generator=gen) * torch.logspace(-3, 2, N)[:, None]).float()
    x[0, :16] = torch.tensor([0.0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    enc = encode_entries(x, fmt)
    codes = torch.cat([enc[:, : D // 2] & 15, enc[:, : D // 2] >> 4]).unique()
    assert set(range(16)) - {8} <= set(codes.tolist())  # every e2m1 code occurs (the encoder writes -0 as 0)
    src.copy_(enc.reshape(P, R, B).to(DEVICE))
    out = torch.empty(N, D, device=DEVICE)
    kernel = _read_fp4_blocks_kernel if reader == "blocks" else _read_fp4_rows_kernel
    kernel[(triton.cdiv(N, 64),)](src, out, N, R, src.stride(0), src.stride(1), D=D, BLOCK=64)
    want = decode_entries(enc, fmt)
    assert torch.equal(out.cpu(), want)
