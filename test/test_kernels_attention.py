"""GPU tests: Triton sparse shared-KV attention vs a float64 reference (op table entry 5).

Marked ``gpu``; skipped without CUDA + Triton. (For kernel development on a CPU box they also run
under ``TRITON_INTERPRET=1``.)
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS

pytestmark = KERNEL_MARKS


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a64, b64 = a.double(), b.double()
    return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item()


def ref_sparse_attention(
    q: torch.Tensor, sources: list[tuple[torch.Tensor, torch.Tensor]], sinks: torch.Tensor, scale: float
) -> torch.Tensor:
    """Independent float64 oracle of HF eager attention with sinks over gathered keys."""
    T, H, D = q.shape
    keys, masks = [], []
    for kv, idx in sources:
        keys.append(kv.double()[idx.clamp(min=0)])  # [T, K, D]
        masks.append(idx >= 0)
    k = torch.cat(keys, 1)
    m = torch.cat(masks, 1)
    logits = torch.einsum("thd,tkd->thk", q.double(), k) * scale
    logits = logits.masked_fill(~m[:, None, :], float("-inf"))
    logits = torch.cat([logits, sinks.double()[None, :, None].expand(T, H, 1)], -1)
    p = torch.softmax(logits, -1)[..., :-1]
    return torch.einsum("thk,tkd->thd", p, k)


def make_case(
    T: int, H: int, D: int, K0: int, K1: int, dtype: torch.dtype, gen: torch.Generator, dead_rows: int = 0
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    dev = DEVICE
    n0 = max(4 * K0, 64)
    n1 = max(4 * K1, 64)
    q = torch.randn(T, H, D, generator=gen).to(dtype)
    kv0 = torch.randn(n0, D, generator=gen).to(dtype)
    kv1 = torch.randn(n1, D, generator=gen).to(dtype)
    idx0 = torch.randint(0, n0, (T, K0), generator=gen)
    idx1 = torch.randint(0, n1, (T, K1), generator=gen)
    # random holes, plus -1 tails (e.g. short windows) and fully-dead rows
    idx0[torch.rand(T, K0, generator=gen) < 0.2] = -1
    idx1[torch.rand(T, K1, generator=gen) < 0.3] = -1
    if K0 > 4:
        idx0[0, K0 // 2 :] = -1
    if dead_rows:
        idx0[-dead_rows:] = -1
        idx1[-dead_rows:] = -1
    sinks = torch.randn(H, generator=gen) * 2
    sources = [(kv0.to(dev), idx0.to(dev))]
    if K1 >= 0:
        sources.append((kv1.to(dev), idx1.to(dev)))
    return q.to(dev), sources, sinks.to(dev)


CASES = [
    # T, H, D, K0, K1
    (1, 64, 512, 128, 512),  # decode bs1, CSA: window + top-k
    (8, 64, 512, 128, 512),
    (33, 16, 512, 128, 0),  # sliding-only (empty source 1)
    (256, 8, 512, 128, 96),  # decode bs 256, HCA-like
    (300, 64, 512, 128, 512),  # prefill-ish
    (5, 12, 128, 7, 45),  # odd sizes, H not a power of 2
]


@pytest.mark.parametrize("T,H,D,K0,K1", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_sparse_attention_matches_fp64(T: int, H: int, D: int, K0: int, K1: int, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.attention import sparse_attention

    if DEVICE == "cpu" and (T * H * D > 40 * 64 * 512 or dtype != torch.float32):
        pytest.skip("interpreter: too slow / no bf16 dot")
    gen = torch.Generator().manual_seed(T * 1000 + H + K1)
    q, sources, sinks = make_case(T, H, D, K0, K1, dtype, gen, dead_rows=1 if T > 1 else 0)
    scale = D**-0.5
    ref = ref_sparse_attention(q, sources, sinks, scale)
    for splits in (None, 1, 4):
        out = torch.full_like(q, float("nan"))
        res = sparse_attention(q, sources, sinks, scale, out=out, num_splits=splits)
        assert res.data_ptr() == out.data_ptr()
        assert not torch.isnan(out).any(), f"unwritten output (splits={splits})"
        tol = 1.5e-2 if dtype == torch.bfloat16 else 3e-3
        err = rel_err(out, ref)
        assert err < tol, f"rel err {err} (splits={splits})"
        if T > 1:  # the dead row attends to nothing: exactly zero
            assert torch.all(out[-1] == 0)


def test_sparse_attention_single_source_and_empty_batch() -> None:
    from sgl_kernel_v4.triton.attention import sparse_attention

    gen = torch.Generator().manual_seed(7)
    dt = torch.float32 if DEVICE == "cpu" else torch.bfloat16
    q, sources, sinks = make_case(4, 16, 256, 40, 0, dt, gen)
    out = sparse_attention(q, sources[:1], sinks, 0.0625)
    ref = ref_sparse_attention(q, sources[:1], sinks, 0.0625)
    assert rel_err(out, ref) < 1.5e-2
    empty = sparse_attention(q[:0], [(sources[0][0], sources[0][1][:0])], sinks, 0.0625)
    assert empty.shape == (0, 16, 256)


def test_sparse_attention_bad_input() -> None:
    from sgl_kernel_v4.triton.attention import sparse_attention

    gen = torch.Generator().manual_seed(1)
    q, sources, sinks = make_case(2, 16, 128, 8, 8, torch.bfloat16, gen)
    with pytest.raises(ValueError, match="sinks"):
        sparse_attention(q, sources, sinks[:3], 1.0)
    with pytest.raises(ValueError, match="sources"):
        sparse_attention(q, [], sinks, 1.0)
    with pytest.raises(ValueError, match="kv_flat"):
        sparse_attention(q, [(sources[0][0][:, :64], sources[0][1])], sinks, 1.0)
