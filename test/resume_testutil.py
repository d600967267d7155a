"""Shared helpers for the resume-exactness tests: the KV formats, their stated tolerances, the cold
oracle (a cold, unchunked, uncached run of the same prompt in the same KV format) and the
comparison of a run against it.

Tolerances (greedy token ids must be equal in every format). Measured maxima are over the whole
grid of ``test_resume_exactness.py`` and ``test_resume_exactness_configs.py`` (every cell, slow
ones included, on a 2-core x86 CPU):

* ``fp32`` KV: every logprob within ``1e-4``. The CPU forward is not batch-invariant: torch's fp32
  GEMM takes another kernel below 4 rows (a 1-3-token chunk, a decode step, an MoE expert given
  1-3 of a batch's tokens), so row results differ in the last bits with the batch's shape.
  Measured: at most ``3.8e-6`` (prompt logprobs, 1- and 3-token chunks), ``1.9e-6`` on output
  logprobs, mean ``5.6e-7``.
* ``fp8`` KV and ``fp8`` + fp4 indexer keys: prompt logprobs within ``0.1`` (``5e-3`` on
  average), output logprobs within ``0.05``. The codecs are deterministic and position-independent
  (an entry's bytes depend on its values only), but rounding to e4m3 / e2m1 amplifies those
  last-bit differences: a value within a few ulps of a rounding boundary lands on the neighbouring
  code (one e4m3 step is 1/16 to 1/8 of the value), every later position that reads the entry sees
  it, and a flipped indexer key can swap one of the ``index_topk`` entries a token attends.
  Measured: prompt logprobs at most ``0.074`` (``sliding_first``, fp8, 257 tokens in 4- or
  5-token chunks), ``0.062`` (fp8 + fp4, 253 tokens in 1- or 3-token chunks), ``0.055`` / ``0.049``
  (the tiny preset, fp8 / fp8 + fp4, 385 tokens in 3-token chunks), every other cell ``<= 0.021``;
  mean at most ``1.3e-3``; output logprobs at most ``0.0083``. Every cell other than chunked
  prefill (hits, retraction, ``n > 1``, divergence, aborts) stays ``<= 8.3e-4``. Proof that these
  gaps are rounding and not state: in the ``sliding_first`` cells above 0.045 the earliest flipped
  codes (sliding-window, CSA and indexer entries of layers 0-1) come from pre-quantization
  differences of ``5e-7`` to ``1.4e-6``, and with every fp32 GEMM done in float64
  (:func:`batch_invariant_gemms`) all six cells above 0.045 match the cold run within ``5e-6``
  (``test_quantized_gap_is_gemm_rounding`` in both modules). A cache
  read through a wrong slot or page moves logprobs by ~0.1 on average and by far more at single
  positions (``test_memory_fp8_model.py``), so these bounds still tell a plumbing fault from
  rounding.

The bounds leave room over the measured maxima (fp32 ~25x, quantized output / mean ~2-6x) because
the last-bit noise, and the codes it flips, come from the CPU's GEMM kernels: another x86 ISA
(AVX2 vs AVX-512) rounds differently.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from scheduler_testutil import PAGE, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

#: Weights seed of the ``sliding_first`` checkpoint both resume modules run on (``resume_model_dir``
#: in ``conftest.py``).
RESUME_MODEL_SEED = 3

#: ``ServerArgs`` fields of each KV format under test.
FORMATS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "fp8": {"kv_cache_dtype": "fp8_e4m3"},
    "fp8_fp4": {"kv_cache_dtype": "fp8_e4m3", "enable_fp4_indexer": True},
}

#: Largest allowed |prompt logprob - cold prompt logprob| per format (module docstring).
TOL: dict[str, float] = {"fp32": 1e-4, "fp8": 0.1, "fp8_fp4": 0.1}
#: Largest allowed |output logprob - cold output logprob| per format.
OUT_TOL: dict[str, float] = {"fp32": 1e-4, "fp8": 0.05, "fp8_fp4": 0.05}
#: Largest allowed mean |prompt logprob - cold prompt logprob| per format.
MEAN_TOL: dict[str, float] = {"fp32": 1e-4, "fp8": 5e-3, "fp8_fp4": 5e-3}


def cells(grid: list[tuple], fast: set[tuple]) -> list:
    """``grid``'s parameter tuples as ``pytest.param``s, the ones not in ``fast`` marked slow."""
    return [pytest.param(*c, marks=() if c in fast else (pytest.mark.slow,)) for c in grid]


def make_sched(model_dir: str, fmt: str, **kw: Any) -> Scheduler:
    """A CPU scheduler in KV format ``fmt`` with a roomy pool, unchunked unless ``kw`` says."""
    args: dict[str, Any] = dict(max_total_tokens=64 * PAGE, chunked_prefill_size=-1)
    args.update(FORMATS[fmt])
    args.update(kw)
    return make_scheduler(model_dir, **args)


def run_req(
    s: Scheduler, rid: str, ids: list[int], n: int = 6, prompt_logprobs: bool = False, **kw: Any
) -> dict:
    """Submit one greedy request with output logprobs (and prompt logprobs from position 0 when
    ``prompt_logprobs``: then no prefix hit is possible) and drain; its result."""
    submit(s, rid, ids, n, return_logprob=True, logprob_start_len=0 if prompt_logprobs else -1, **kw)
    return drain(s)[rid]


def submit_lp(s: Scheduler, rid: str, ids: list[int], n: int = 6, **kw: Any) -> None:
    """Queue a greedy request with output logprobs (a prefix hit stays possible)."""
    submit(s, rid, ids, n, return_logprob=True, logprob_start_len=-1, **kw)


def step_collect(s: Scheduler, res: dict[str, dict], steps: int) -> None:
    """Run ``steps`` scheduler steps, appending each request's ids / output logprobs to ``res``."""
    for _ in range(steps):
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": []})
            r["ids"] += out.output_ids[i]
            r["lp"] += out.output_token_logprobs_val[i]
            r["in_lp"] += out.input_token_logprobs_val[i]
            r["cached"] = out.cached_tokens[i]


class ColdOracle:
    """Cold, unchunked, uncached runs of one model in one KV format, memoised per prompt.

    Args:
        model_dir: the checkpoint.
        fmt: a :data:`FORMATS` key.
    """

    def __init__(self, model_dir: str, fmt: str) -> None:
        self.fmt = fmt
        self.sched = make_sched(model_dir, fmt, disable_radix_cache=True)
        self._memo: dict[tuple[tuple[int, ...], int, bool], dict] = {}

    def __call__(self, ids: list[int], n: int = 6, prompt_logprobs: bool = False) -> dict:
        """The result of ``ids`` with ``n`` greedy tokens (see :func:`run_req`)."""
        key = (tuple(ids), n, prompt_logprobs)
        if key not in self._memo:
            res = run_req(self.sched, "cold", ids, n, prompt_logprobs)
            assert res["cached"] == 0
            self._memo[key] = res
        return self._memo[key]


@functools.cache
def cold_oracle(model_dir: str, fmt: str) -> ColdOracle:
    """The :class:`ColdOracle` of ``model_dir`` in ``fmt``, one per session (its runs memoised)."""
    return ColdOracle(model_dir, fmt)


def max_gap(a: list[float | None], b: list[float | None]) -> float:
    """Largest |a[i] - b[i]| over positions where both are set (lists of equal length)."""
    assert len(a) == len(b), (len(a), len(b))
    return max([abs(x - y) for x, y in zip(a, b) if x is not None and y is not None] + [0.0])


def assert_matches(got: dict, cold: dict, fmt: str, what: str = "") -> None:
    """``got`` has the cold run's greedy tokens, its output logprobs are within ``OUT_TOL[fmt]`` of
    the cold run's, and (when both have them) its prompt logprobs within ``TOL[fmt]`` and within
    ``MEAN_TOL[fmt]`` on average."""
    assert got["ids"] == cold["ids"], f"{what}: tokens differ from the cold run"
    gap = max_gap(got["lp"], cold["lp"])
    assert gap <= OUT_TOL[fmt], f"{what}: output logprob gap {gap:.3g} > {OUT_TOL[fmt]}"
    if got.get("in_lp") and cold.get("in_lp"):
        gap = max_gap(got["in_lp"], cold["in_lp"])
        assert gap <= TOL[fmt], f"{what}: prompt logprob gap {gap:.3g} > {TOL[fmt]}"
        gaps = [abs(x - y) for x, y in zip(got["in_lp"], cold["in_lp"]) if x is not None and y is not None]
        mean = sum(gaps) / max(1, len(gaps))
        assert mean <= MEAN_TOL[fmt], f"{what}: mean prompt logprob gap {mean:.3g} > {MEAN_TOL[fmt]}"


def expected_hit(shared: int, prompt_len: int, resume_interval: int = 1) -> int:
    """Tokens a prompt of ``prompt_len`` sharing its first ``shared`` tokens with a cached
    sequence gets from the cache: whole 256-token blocks, never the prompt's last token (its
    logits sample the first output), rounded down to a kept resume state."""
    unit = PAGE * resume_interval
    return (min(shared, prompt_len - 1) // unit) * unit


@contextlib.contextmanager
def batch_invariant_gemms() -> Iterator[None]:
    """Within the block every fp32 GEMM of the CPU forward (``F.linear``, ``torch.einsum``,
    ``torch.matmul``, ``@``) is computed in float64 and rounded once to fp32, so a row's result
    no longer depends on the batch's shape (a float64 sum of fp32 products rounds to the same fp32
    value whichever kernel or order computed it, but for ties within ~1e-16). Other dtypes pass
    through unchanged. Test-only: it patches torch's module attributes, which every GEMM of the
    runtime's CPU path goes through."""
    saved = (F.linear, torch.einsum, torch.matmul, torch.Tensor.__matmul__)
    lin, einsum, matmul, tmatmul = saved

    def is32(*ts: Any) -> bool:
        return any(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in ts)

    def up(t: Any) -> Any:
        return t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t

    def linear64(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
        return lin(up(x), up(w), up(b)).float() if is32(x) else lin(x, w, b)

    def einsum64(eq: str, *ops: Any) -> torch.Tensor:
        ts = tuple(ops[0]) if len(ops) == 1 and isinstance(ops[0], (list, tuple)) else ops
        return einsum(eq, *map(up, ts)).float() if is32(*ts) else einsum(eq, *ts)

    def matmul64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return matmul(up(a), up(b)).float() if is32(a, b) else matmul(a, b)

    def tmatmul64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return tmatmul(up(a), up(b)).float() if is32(a, b) else tmatmul(a, b)

    F.linear, torch.einsum, torch.matmul, torch.Tensor.__matmul__ = linear64, einsum64, matmul64, tmatmul64
    try:
        yield
    finally:
        F.linear, torch.einsum, torch.matmul, torch.Tensor.__matmul__ = saved
