"""The sampler's Triton kernel (``sgl_kernel_v4.triton.sampling``: NaN / ``+inf`` limit and
temperature scaling in two launches) against the torch path of ``sglang_v4.sampling.logprobs``
(bit for bit) and a float64 reference.

The kernel tests are marked ``gpu`` and run on CUDA or under ``TRITON_INTERPRET=1`` (element-wise
and a reduction only); the torch path they compare with runs on the CPU. The last test needs CUDA:
the sampler itself on a CUDA device takes the kernel.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, KERNEL_MARKS
from sampling_testutil import close_to_ref, nonfinite_rows, ref_scaled
from sglang_v4.sampling import logprobs as torch_path

pytestmark = KERNEL_MARKS


def _kernels():  # noqa: ANN202 - imports triton
    from sgl_kernel_v4.triton import sampling

    return sampling


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same values, same signs of zero, same places of NaN."""
    a, b = a.cpu(), b.cpu()
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("v", [40, 5000])  # one block; two blocks per sweep (BLOCK 4096)
@pytest.mark.parametrize("t", [1e-6, 1.0, 2.0])
def test_scale_by_temperature_kernel_bit_equal_and_float64(v: int, t: float) -> None:
    """Rows with NaN, +inf, -inf, nothing finite, huge values and -0.0 at temperatures 1e-6 / 1 /
    2: the kernel's result is the torch path's bit for bit and the float64 reference's to float32
    rounding; in place (``out=z``) and on a strided row view the same."""
    rows = nonfinite_rows(v)
    z = torch.tensor(rows, dtype=torch.float32)
    temps = torch.full((len(rows), 1), t, dtype=torch.float32)
    want = torch_path.scale_by_temperature(z, temps)
    k = _kernels()
    zd, td = z.to(DEVICE), temps.to(DEVICE)
    got = k.scale_by_temperature(zd, td)
    assert _bits_equal(got, want)
    for i, row in enumerate(z.tolist()):
        for j, (g, w) in enumerate(zip(got[i].tolist(), ref_scaled(row, t))):
            close_to_ref(g, w, f"row {i} col {j}")
    wide = torch.full((len(rows), v + 24), 5.0, device=DEVICE)
    wide[:, 8 : 8 + v] = zd
    view = wide[:, 8 : 8 + v]
    assert _bits_equal(k.scale_by_temperature(view, td.view(-1)), want)
    assert _bits_equal(k.scale_by_temperature(view, td, out=view), want)
    assert (wide[:, :8] == 5.0).all() and (wide[:, 8 + v :] == 5.0).all()


def test_finite_limit_kernel_bit_equal() -> None:
    """The bare limit (no shift of finite rows, no division): every other entry unchanged,
    ``-0.0`` included; in place the same."""
    z = torch.tensor(nonfinite_rows(), dtype=torch.float32)
    want = torch_path.finite_limit(z)
    k = _kernels()
    zd = z.to(DEVICE)
    assert _bits_equal(k.finite_limit(zd), want)
    assert _bits_equal(k.finite_limit(zd, out=zd), want)


def test_kernel_rejects_bad_arguments_naming_them() -> None:
    k = _kernels()
    z = torch.zeros(3, 8, device=DEVICE)
    with pytest.raises(ValueError, match="z:"):
        k.finite_limit(z.to(torch.float64))
    with pytest.raises(ValueError, match="z:"):
        k.finite_limit(z.t())
    with pytest.raises(ValueError, match="temps:"):
        k.scale_by_temperature(z, torch.ones(2, device=DEVICE))
    with pytest.raises(ValueError, match="out:"):
        k.finite_limit(z, out=torch.zeros(3, 9, device=DEVICE))


@pytest.mark.skipif(DEVICE != "cuda", reason="needs CUDA: the sampler takes the kernel on CUDA tensors")
def test_sampler_on_cuda_takes_the_kernel_with_the_torch_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA the sampling module's functions run the kernels (one call of the launcher each: counted by
    wrapping it) and give the CPU torch path's values bit for bit; a sampled batch with NaN / +inf
    rows at V = 129280 picks only tokens of positive probability, and its logprobs are the CPU
    ones (to the rounding of ``log_softmax``'s sum)."""
    from sglang_v4.sampling.sampler import sample
    from sglang_v4.sampling.sampling_params import SamplingParams

    k = _kernels()
    calls: list[str] = []
    real = k._launch
    monkeypatch.setattr(k, "_launch", lambda *a, **kw: calls.append("launch") or real(*a, **kw))
    rows = nonfinite_rows(129280)
    z = torch.tensor(rows, dtype=torch.float32)
    temps = torch.tensor([[1e-6], [1.0], [2.0]] * 3, dtype=torch.float32)[: len(rows)]
    zc, tc = z.cuda(), temps.cuda()
    assert _bits_equal(torch_path.scale_by_temperature(zc, tc), torch_path.scale_by_temperature(z, temps))
    assert _bits_equal(torch_path.finite_limit(zc), torch_path.finite_limit(z))
    assert len(calls) == 2
    params = [SamplingParams(temperature=float(t)) for t in temps.flatten().tolist()]
    out, lp = sample(zc, params, [[]] * len(rows), return_logprobs=True)
    assert len(calls) == 3  # the in-place scaling of the sampler's copy
    _, lp_cpu = sample(z, params, [[]] * len(rows), return_logprobs=True)
    # rows with a distribution (the rows of nothing but -inf / NaN have none: their log_softmax is
    # NaN on both devices); log_softmax rounds differently on the GPU: values to rounding, and a
    # value near -3.4e38 (the row of huge logits) may be -inf on one device and finite on the other
    live = torch.where(z.isnan(), -float("inf"), z).amax(dim=-1) > -float("inf")
    assert live.sum() == len(rows) - 2
    lp, lp_cpu = lp.cpu()[live], lp_cpu[live]
    assert not lp.isnan().any() and not lp_cpu.isnan().any()
    fin = lp_cpu.isfinite() & lp.isfinite()
    assert torch.allclose(lp[fin], lp_cpu[fin], rtol=1e-5, atol=1e-4)
    assert ((lp_cpu[~fin] < -1e38) & (lp[~fin] < -1e38)).all()
    for row, tok in zip(lp_cpu, out[live.cuda()].tolist()):
        assert row[tok].isfinite(), tok
