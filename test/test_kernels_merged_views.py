"""The kernels that read a merged projection's outputs take column views of one GEMM output.

``MergedLinear`` returns ``[T, out_i]`` column slices of a ``[T, sum(out)]`` tensor (row stride
``sum(out)``, last dim contiguous). Each consumer (``rms_norm`` for ``q_a``, ``qnorm_rope_kv_insert``
for ``kv``, the compressor-state kernels for ``kv`` / ``gate``) must give the same bytes on such a
view as on a contiguous copy; a kernel that assumed a row stride of ``out_i`` would read the
neighbouring projection's columns instead.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS
from kernels_compressor_testutil import CASES, DTYPES, _batch, _clone, _compress_args, _inputs, _triton

pytestmark = KERNEL_MARKS


def _views(gen: torch.Generator, T: int, widths: list[int], dtype: torch.dtype) -> list[torch.Tensor]:
    """Column views of one random ``[T, sum(widths) + 16]`` tensor (16 trailing columns no one reads)."""
    y = (torch.randn(T, sum(widths) + 16, generator=gen) * 2).to(dtype).to(DEVICE)
    return list(torch.split(y, [*widths, 16], dim=-1))[: len(widths)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_and_kv_insert_on_column_views(dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.norm import rms_norm
    from sgl_kernel_v4.triton.rope import qnorm_rope_kv_insert

    gen = torch.Generator().manual_seed(0)
    T, H, D, R, Q = 5, 2, 128, 32, 64
    q_a, kv = _views(gen, T, [Q, D], dtype)
    assert not kv.is_contiguous() and kv.stride(0) == Q + D + 16
    w_q = (torch.rand(Q, generator=gen) + 0.5).to(DEVICE)
    assert torch.equal(rms_norm(q_a, w_q, 1e-6), rms_norm(q_a.contiguous(), w_q, 1e-6))
    q = torch.randn(T, H, D, generator=gen).to(dtype).to(DEVICE)
    w = (torch.rand(D, generator=gen) + 0.5).to(DEVICE)
    cos, sin = (torch.rand(T, R // 2, generator=gen).to(DEVICE) for _ in range(2))
    idx = torch.tensor([3, -1, 7, 0, 12], device=DEVICE)
    pools = [torch.full((16, D), float("nan"), dtype=dtype, device=DEVICE) for _ in range(2)]
    got = qnorm_rope_kv_insert(q, kv, w, cos, sin, pools[0], idx, 1e-6)
    want = qnorm_rope_kv_insert(q, kv.contiguous(), w, cos, sin, pools[1], idx, 1e-6)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(pools[0].isnan(), pools[1].isnan())
    assert torch.equal(pools[0].nan_to_num(), pools[1].nan_to_num())


@pytest.mark.parametrize("name", ["csa_extend", "hca_extend"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compressor_state_kernels_on_column_views(name: str, dtype: torch.dtype) -> None:
    case = CASES[name]
    fb = _batch(case)
    plan = fb.csa if case.overlap else fb.hca
    inp = _inputs(case, fb, seed=21, dtype=dtype)
    n = inp["new"]
    T, X = n["kv_new"].shape
    # the merged layout [q_a | kv | comp kv | comp gate]: the pair sits after 96 other columns
    merged = torch.empty(T, 96 + 2 * X + 16, dtype=dtype, device=DEVICE)
    merged[:, 96 : 96 + X] = n["kv_new"]
    merged[:, 96 + X : 96 + 2 * X] = n["gate"]
    views = {**inp, "new": dict(n, kv_new=merged[:, 96 : 96 + X], gate=merged[:, 96 + X : 96 + 2 * X])}
    assert views["new"]["kv_new"].stride(0) == merged.shape[1]

    outs, states = [], []
    for src in (views, inp):
        st = _clone(src["state"])
        pool = torch.full((int(plan.win_out.max()) + 2, case.d), float("nan"), dtype=dtype, device=DEVICE)
        args = _compress_args(case, fb, src, st, pool, torch.Generator().manual_seed(1))
        outs.append((_triton("compress_windows_and_insert")(*args), pool))
        head = (src["new"]["kv_new"], src["new"]["gate"], src["new"]["position_bias"], fb.positions,
                fb.req_pool_indices)  # fmt: skip
        tail = (plan.buf_rows, plan.ovl_rows, plan.snap_rows, plan.snap_pages)
        _triton("advance_compressor_state")(*head, *st.values(), *tail)
        states.append(st)
    assert plan.win_rows.shape[0] > 0
    assert torch.equal(outs[0][0], outs[1][0])
    assert torch.equal(outs[0][1].nan_to_num(), outs[1][1].nan_to_num())
    for k, v in states[0].items():
        if v is not None:
            assert torch.equal(v, states[1][k]), k
    assert not torch.equal(states[0]["buf_kv"], inp["state"]["buf_kv"])
