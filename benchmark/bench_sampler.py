"""Cost of the sampler's non-finite logit handling and temperature scaling per decode step.

``sampling.logprobs.scale_by_temperature`` turns ``[B, V]`` float32 logits into ``(z - max) / T``
with NaN logits at probability 0 and ``+inf`` logits sharing the mass. Three forms, same inputs,
same call:

* ``masked`` -- the first form of that rule (a NaN mask, a ``+inf`` mask and its row ``any``, a
  limit tensor, a ``where``, the row max and its fix-up, the shifted division): written out here
  as the baseline;
* ``torch`` -- the module's torch path (``nan_to_num``, ``amax``, sub, div, ``nan_to_num_``),
  with the Triton path switched off (``sgl_kernel_v4.ops.set_triton_enabled(False)``);
* ``triton`` -- ``sgl_kernel_v4.triton.sampling`` (two launches, two passes over ``[B, V]``).

The ceiling is one ``[B, V]`` float32 copy (``torch.Tensor.copy_``: one read and one write, what
the result needs at least). Before timing, the three results are checked equal (bit for bit,
NaN-free) on rows with NaN, ``+inf``, all ``-inf`` and tiny temperatures.

    python benchmark/bench_sampler.py --device cuda --batch-sizes 1 8 64 256 --reps 50
    python benchmark/bench_sampler.py --device cpu --batch-sizes 2 --vocab 4096 --reps 3  # dry run

Prints a markdown table (medians, microseconds) and writes ``--out`` (JSON) if given.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import torch


def masked_scale(z: torch.Tensor, temps: torch.Tensor) -> torch.Tensor:
    """The baseline form: ``z`` with NaN -> ``-inf``, rows holding ``+inf`` -> 0 at those entries and
    ``-inf`` elsewhere, then ``(z - m) / T`` with ``m`` the row max (0 for a row without a finite
    max). ``z``: ``[B, V]`` float32 (not modified); ``temps``: ``[B, 1]`` float32."""
    z = z.masked_fill(torch.isnan(z), float("-inf"))
    pinf = torch.isposinf(z)
    limit = torch.zeros_like(z).masked_fill_(~pinf, float("-inf"))
    z = torch.where(pinf.any(dim=-1, keepdim=True), limit, z)
    m = z.amax(dim=-1, keepdim=True)
    m = m.masked_fill(~torch.isfinite(m), 0.0)
    return (z - m) / temps


def _inputs(batch: int, vocab: int, dev: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[batch, vocab]`` float32 (N(0, 4^2)) with, when the batch allows, a NaN row entry,
    a ``+inf`` row, an all ``-inf`` row; temperatures cycling 0.7, 1.0, 1e-6, 2.0 (``[batch, 1]``)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    z = (torch.randn(batch, vocab, generator=g) * 4).to(dev)
    if batch >= 2:
        z[0, 3] = float("nan")
        z[1, 5] = float("inf")
    if batch >= 3:
        z[2] = float("-inf")
    t = [(0.7, 1.0, 1e-6, 2.0)[i % 4] for i in range(batch)]
    return z, torch.tensor(t, dtype=torch.float32, device=dev).unsqueeze(1)


def _time_us(fn: Callable[[], Any], reps: int, dev: str) -> float:
    """Median microseconds per call (``timing.median_ms``: CUDA events on ``cuda``, else the wall clock)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from timing import median_ms

    return median_ms(fn, reps, dev) * 1e3


def _row(b: int, vocab: int, reps: int, dev: str) -> dict[str, Any]:
    """Median microseconds of each form and of the copy ceiling at batch ``b``.

    Raises:
        AssertionError: when the forms disagree (then no timing is worth reporting).
    """
    from sgl_kernel_v4 import ops
    from sglang_v4.sampling import logprobs

    z, temps = _inputs(b, vocab, dev)
    base = masked_scale(z, temps)
    ops.set_triton_enabled(False)
    try:
        torch_out = logprobs.scale_by_temperature(z, temps)
        torch_us = _time_us(lambda: logprobs.scale_by_temperature(z, temps), reps, dev)
    finally:
        ops.set_triton_enabled(None)
    assert torch.equal(torch_out, base) and not torch_out.isnan().any(), f"torch path differs at B={b}"
    row: dict[str, Any] = {"batch": b, "vocab": vocab, "torch_us": torch_us}
    row["masked_us"] = _time_us(lambda: masked_scale(z, temps), reps, dev)
    if dev == "cuda" and ops.triton_enabled():
        from sgl_kernel_v4.triton import sampling

        assert torch.equal(sampling.scale_by_temperature(z, temps), base), f"Triton path differs at B={b}"
        row["triton_us"] = _time_us(lambda: sampling.scale_by_temperature(z, temps), reps, dev)
    dst = torch.empty_like(z)
    row["copy_us"] = _time_us(lambda: dst.copy_(z), reps, dev)
    return row


def run(batch_sizes: list[int], vocab: int, reps: int, dev: str) -> list[dict[str, Any]]:
    """One :func:`_row` per batch size."""
    return [_row(b, vocab, reps, dev) for b in batch_sizes]


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`run`'s rows (microseconds; ratios against ``masked``)."""
    out = [
        "| B | masked us | torch us | triton us | copy us (ceiling) | masked / torch | masked / triton | triton / copy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        tri = r.get("triton_us")
        cells = [str(r["batch"]), f"{r['masked_us']:.1f}", f"{r['torch_us']:.1f}"]
        cells.append("-" if tri is None else f"{tri:.1f}")
        cells += [f"{r['copy_us']:.1f}", f"{r['masked_us'] / r['torch_us']:.2f}x"]
        cells.append("-" if tri is None else f"{r['masked_us'] / tri:.2f}x")
        cells.append("-" if tri is None else f"{tri / r['copy_us']:.2f}x")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Command line entry (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--vocab", type=int, default=129_280, help="DeepSeek-V4's vocabulary")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None, help="JSON file for the rows")
    a = ap.parse_args(argv)
    rows = run(a.batch_sizes, a.vocab, a.reps, a.device)
    print(table(rows))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
