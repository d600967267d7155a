"""The sampler's non-finite-logit path (``sampling/logprobs.py``: ``finite_limit``,
``scale_by_temperature``): its values against a float64 reference and against a row-by-row float32
formulation (the results must not change when the path gets cheaper), and its cost: how many
element-wise passes it makes over ``[B, V]`` and that it never synchronises with the host.

Oracles: a float64 reference written here with Python floats (NaN has probability 0, ``+inf``
entries share all of it, otherwise ``(x - max) / T``); a per-row float32 formulation with Python
branches; the aten ops counted by a ``TorchDispatchMode``.
"""

from __future__ import annotations

import math

import pytest
import torch
from sampling_testutil import INF, NAN, V, close_to_ref, nonfinite_rows, ref_scaled
from sglang_v4.sampling.logprobs import compute_logprobs, finite_limit, scale_by_temperature
from sglang_v4.sampling.sampler import sample
from sglang_v4.sampling.sampling_params import SamplingParams
from torch.utils._python_dispatch import TorchDispatchMode


def _ref_logprobs(row: list[float], t: float) -> list[float] | None:
    """Float64 ``log_softmax`` of :func:`ref_scaled` (``None`` for a row with no distribution)."""
    s = ref_scaled(row, t)
    if max(s) == -INF:
        return None
    lse = math.log(sum(math.exp(x) for x in s))
    return [x - lse for x in s]


def row_by_row(z: torch.Tensor, temps: list[float]) -> torch.Tensor:
    """``scale_by_temperature`` as separate float32 steps per row with Python branches."""
    out = []
    for row, t in zip(z, temps):
        row = torch.where(torch.isnan(row), torch.tensor(-INF), row)
        if bool(torch.isposinf(row).any()):
            out.append(torch.where(torch.isposinf(row), torch.tensor(0.0), torch.tensor(-INF)))
            continue
        m = row.max()
        out.append(row if m == -INF else (row - m) / torch.tensor(t, dtype=torch.float32))
    return torch.stack(out)


@pytest.mark.parametrize("t", [1e-6, 1.0, 2.0])
def test_scale_by_temperature_matches_float64_reference(t: float) -> None:
    """Every row kind at temperatures 1e-6 / 1 / 2: the scaled logits agree with the float64
    reference (to float32 rounding), bit for bit with the row-by-row float32 steps, and their
    ``log_softmax`` with the float64 log-probabilities (no NaN anywhere)."""
    rows = nonfinite_rows()
    z = torch.tensor(rows, dtype=torch.float32)
    before = z.clone()
    temps = torch.full((len(rows), 1), t, dtype=torch.float32)
    got = scale_by_temperature(z, temps)
    assert torch.equal(z.isnan(), before.isnan()) and torch.equal(z.nan_to_num(), before.nan_to_num())
    assert got.dtype == torch.float32 and not got.isnan().any() and not got.isposinf().any()
    zf = torch.tensor(rows, dtype=torch.float32).tolist()  # the float32 inputs, as float64 values
    for i, row in enumerate(zf):
        for j, (g, w) in enumerate(zip(got[i].tolist(), ref_scaled(row, t))):
            close_to_ref(g, w, f"row {i} col {j}")
    same = row_by_row(z, [t] * len(rows))
    assert torch.equal(got, same) and torch.equal(got.signbit(), same.signbit())
    lp = torch.log_softmax(got, dim=-1)
    for i, row in enumerate(zf):
        want = _ref_logprobs(row, t)
        if want is None:
            continue
        for j, (g, w) in enumerate(zip(lp[i].tolist(), want)):
            close_to_ref(g, w, f"logprob row {i} col {j}")


def test_mixed_temperatures_in_one_batch() -> None:
    """Each row is divided by its own temperature (``[B, 1]``)."""
    rows = nonfinite_rows()
    ts = [(1e-6, 1.0, 2.0)[i % 3] for i in range(len(rows))]
    z = torch.tensor(rows, dtype=torch.float32)
    got = scale_by_temperature(z, torch.tensor(ts, dtype=torch.float32).unsqueeze(1))
    assert torch.equal(got, row_by_row(z, ts))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_finite_limit_matches_reference(dtype: torch.dtype) -> None:
    """``finite_limit`` keeps every other entry bit for bit (``-0.0`` included) and gives the
    softmax limit on ``+inf`` rows; ``compute_logprobs`` agrees with float64."""
    rows = nonfinite_rows()
    x = torch.tensor(rows, dtype=torch.float32).to(dtype)
    got = finite_limit(x)
    assert got.dtype == dtype
    for i, row in enumerate(x.float().tolist()):
        if any(v == INF for v in row):
            want = [0.0 if v == INF else -INF for v in row]
        else:
            want = [-INF if math.isnan(v) else v for v in row]
        g = got[i].float()
        assert torch.equal(g, torch.tensor(want)) and torch.equal(g.signbit(), torch.tensor(want).signbit())
    lp = compute_logprobs(x)
    for i, row in enumerate(x.float().tolist()):
        want = _ref_logprobs(row, 1.0)
        if want is not None:
            for j, (g, w) in enumerate(zip(lp[i].tolist(), want)):
                close_to_ref(g, w, f"row {i} col {j}")


class _CountBV(TorchDispatchMode):
    """Counts the aten ops (views excepted) that read or write a tensor of ``numel`` elements, and every host
    synchronisation (``aten._local_scalar_dense``: ``.item()``, ``bool(tensor)``, ``.tolist()``)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel = numel
        self.ops: list[str] = []
        self.syncs: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket.__name__)
        if name == "_local_scalar_dense":
            self.syncs.append(name)
        big = [a for a in (*args, *(kwargs or {}).values(), out) if isinstance(a, torch.Tensor)]
        if not func.is_view and any(a.numel() == self.numel for a in big):
            self.ops.append(name)
        return out


def test_passes_over_bv_and_no_host_sync() -> None:
    """The documented costs: ``scale_by_temperature`` makes five element-wise passes over
    ``[B, V]`` (it made eleven), ``finite_limit`` four (it made eight), and neither synchronises
    with the host. ``sample`` of an all-sampled batch without penalties (the decode hot path): the
    float32 copy without NaN, the argmax, the four passes of the in-place scaling, then the
    softmax and what follows it (top-k/top-p filtering off: the noise and the race)."""
    z = torch.randn(4, V)
    z[1, 3] = NAN
    z[2, 5] = INF
    temps = torch.full((4, 1), 0.7)
    with _CountBV(z.numel()) as c:
        scale_by_temperature(z, temps)
    assert len(c.ops) == 5 and not c.syncs, c.ops
    with _CountBV(z.numel()) as c:
        finite_limit(z)
    assert len(c.ops) == 4 and not c.syncs, c.ops
    with _CountBV(z.numel()) as c:
        sample(z, [SamplingParams(temperature=0.7)] * 4, [[]] * 4)
    before_softmax = c.ops[: c.ops.index("_softmax")]
    assert len(before_softmax) == 6, c.ops  # nan_to_num, argmax, amax, sub, div, nan_to_num
