"""Shared helpers for the resume-exactness tests: the KV formats, their stated tolerances, the cold
oracle (a cold, unchunked, uncached run of the same prompt in the same KV format) and the
comparison of a run against it.

Tolerances (greedy token ids must be equal in every format):

* ``fp32`` KV: logprobs within ``1e-4``. The CPU forward is not batch-invariant: torch's fp32 GEMM
  takes another kernel below 4 rows (a 1-3-token chunk, a decode step, an MoE expert given 1-3 of
  a batch's tokens), so row results differ in the last bits with the batch's shape. Measured over
  every case of these tests (three configs): at most ``4e-6``.
* ``fp8`` KV and ``fp8`` + fp4 indexer keys: logprobs within ``0.1``, and prompt logprobs within
  ``5e-3`` on average. The codecs are
  deterministic and position-independent (an entry's bytes depend on its values only), but
  rounding to e4m3 / e2m1 amplifies those last-bit differences: a value within a few ulps of a
  rounding boundary lands on the neighbouring code (one e4m3 step is 1/16 to 1/8 of the value),
  and every later position that reads the entry sees it. Measured: the first flipped code at a
  pre-quantization difference of 1.2e-6 (layer 3, position 13, prefill in 3-token chunks); the
  largest gaps 0.055 on prompt logprobs (the tiny preset, 385 tokens in 3-token chunks: two
  positions above 0.015, mean 1.0e-3) and 0.006 on output logprobs; where both runs have no GEMM under 4 rows (hits prefilled whole or in
  129-token chunks) the gaps stay ``<= 2e-6``. A cache read through a wrong slot or page moves
  logprobs by ~0.1 on average and by far more at single positions (``test_memory_fp8_model.py``),
  so these bounds still tell a plumbing fault from rounding.
"""

from __future__ import annotations

from typing import Any

from scheduler_testutil import PAGE, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

#: ``ServerArgs`` fields of each KV format under test.
FORMATS: dict[str, dict[str, Any]] = {
    "fp32": {},
    "fp8": {"kv_cache_dtype": "fp8_e4m3"},
    "fp8_fp4": {"kv_cache_dtype": "fp8_e4m3", "enable_fp4_indexer": True},
}

#: Largest allowed |logprob - cold logprob| per format (module docstring).
TOL: dict[str, float] = {"fp32": 1e-4, "fp8": 0.1, "fp8_fp4": 0.1}
#: Largest allowed mean |prompt logprob - cold prompt logprob| per format.
MEAN_TOL: dict[str, float] = {"fp32": 1e-4, "fp8": 5e-3, "fp8_fp4": 5e-3}


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


def max_gap(a: list[float | None], b: list[float | None]) -> float:
    """Largest |a[i] - b[i]| over positions where both are set (lists of equal length)."""
    assert len(a) == len(b), (len(a), len(b))
    return max([abs(x - y) for x, y in zip(a, b) if x is not None and y is not None] + [0.0])


def assert_matches(got: dict, cold: dict, fmt: str, what: str = "") -> None:
    """``got`` has the cold run's greedy tokens, and its output (and prompt, when both have them)
    logprobs are within ``TOL[fmt]`` of the cold run's (prompt logprobs within ``MEAN_TOL[fmt]``
    on average)."""
    tol = TOL[fmt]
    assert got["ids"] == cold["ids"], f"{what}: tokens differ from the cold run"
    gap = max_gap(got["lp"], cold["lp"])
    assert gap <= tol, f"{what}: output logprob gap {gap:.3g} > {tol}"
    if got.get("in_lp") and cold.get("in_lp"):
        gap = max_gap(got["in_lp"], cold["in_lp"])
        assert gap <= tol, f"{what}: prompt logprob gap {gap:.3g} > {tol}"
        gaps = [abs(x - y) for x, y in zip(got["in_lp"], cold["in_lp"]) if x is not None and y is not None]
        mean = sum(gaps) / max(1, len(gaps))
        assert mean <= MEAN_TOL[fmt], f"{what}: mean prompt logprob gap {mean:.3g} > {MEAN_TOL[fmt]}"


def expected_hit(shared: int, prompt_len: int, resume_interval: int = 1) -> int:
    """Tokens a prompt of ``prompt_len`` sharing its first ``shared`` tokens with a cached
    sequence gets from the cache: whole 256-token blocks, never the prompt's last token (its
    logits sample the first output), rounded down to a kept resume state."""
    unit = PAGE * resume_interval
    return (min(shared, prompt_len - 1) // unit) * unit
