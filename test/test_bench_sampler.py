"""``benchmark/bench_sampler.py`` on the CPU: the forms it times agree, and its baseline is the
softmax limit of a float64 reference (so its ratios compare equal work)."""

from __future__ import annotations

import math
import sys

import torch
from server_fixture import REPO

sys.path.insert(0, str(REPO / "benchmark"))
import bench_sampler  # noqa: E402


def test_baseline_matches_float64_limit() -> None:
    z, temps = bench_sampler._inputs(4, 257, "cpu")
    got = torch.softmax(bench_sampler.masked_scale(z, temps).double(), dim=-1)
    for i in range(4):
        row = z[i].double()
        if row.isnan().any():
            row = row.masked_fill(row.isnan(), -math.inf)
        if row.isposinf().any():  # the +inf entries share the mass
            want = row.isposinf().double() / row.isposinf().sum()
        elif row.isneginf().all():
            assert got[i].isnan().all()  # no distribution
            continue
        else:
            want = torch.softmax((row - row.max()) / float(temps[i]), dim=-1)
        assert torch.allclose(got[i], want, atol=1e-6), i


def test_dry_run_rows() -> None:
    rows = bench_sampler.main(["--device", "cpu", "--batch-sizes", "2", "3", "--vocab", "512", "--reps", "2"])
    assert [r["batch"] for r in rows] == [2, 3]
    for r in rows:
        assert r["torch_us"] > 0 and r["masked_us"] > 0 and r["copy_us"] > 0 and "triton_us" not in r
