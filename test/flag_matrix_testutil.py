"""The workload and the comparison of the launch-flag matrix (``test_flag_matrix*.py``).

One workload, run against a server configuration through the in-process ``Engine`` or a
``launch_server`` subprocess, gives one :class:`Outcome` per request; the oracle is the same
workload on a cold ``Engine`` with default flags. Flags that only change scheduling or memory
must give the oracle's outputs: the same greedy token ids, the same top-logprob ids, and
logprobs within :data:`LOGPROB_TOL` (batch shapes change the order of float sums).

The workload: three waves of concurrent greedy requests (``ignore_eos``) of prompt lengths on both
sides of the 128-token sliding window and the 256-token cache block, the second and third waves
sharing prefixes with the first (radix-cache hits), the third asking for prompt logprobs and top
logprobs.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests

#: Tokens generated per request.
MAX_NEW_TOKENS = 8
#: Largest |logprob difference| (nats) of the same token between two runs of one model whose
#: batches differ (float32 sums in another order); observed differences are below 1e-5.
LOGPROB_TOL = 1e-4
#: Top logprobs asked for in the third wave.
TOP_LOGPROBS = 2


@dataclass
class Outcome:
    """What one request returned: ``output_ids`` and their logprobs, the prompt logprobs (first
    entry None; only in the third wave), the top-logprob ids per output position, and the
    ``cached_tokens`` / ``num_retractions`` meta_info counters."""

    output_ids: list[int]
    output_logprobs: list[float]
    input_logprobs: list[float | None]
    top_ids: list[list[int]]
    cached_tokens: int
    num_retractions: int


def waves(small: bool = False) -> list[list[list[int]]]:
    """Prompt token ids, per wave (deterministic). ``small``: fewer and shorter prompts (the fast
    tier), still crossing the 128-token window and one 256-token block."""
    rng = random.Random(7)
    base = [rng.randrange(1000, 100000) for _ in range(600)]
    if small:
        first = [base[:n] for n in (5, 127, 129, 250, 252, 300)]
        second = [base[:260] + [rng.randrange(1000, 100000) for _ in range(k)] for k in (3, 40)]
        third = [base[:257] + [9] * 6]
        return [first, second, third]
    first = [base[:n] for n in (5, 100, 127, 128, 129, 255, 256, 257, 300, 513)]
    second = [base[:260] + [rng.randrange(1000, 100000) for _ in range(k)] for k in (3, 40, 200)]
    second += [base[:512] + [11, 12, 13], base[:129]]
    third = [base[:300] + [5, 6], base[:257] + [9] * 30]
    return [first, second, third]


def _wave_kwargs(wave_index: int) -> dict[str, Any]:
    kw: dict[str, Any] = {"return_logprob": True}
    if wave_index == 2:
        kw.update(logprob_start_len=0, top_logprobs_num=TOP_LOGPROBS)
    return kw


SAMPLING = {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True}


def outcome(out: dict[str, Any]) -> Outcome:
    """An :class:`Outcome` from a ``/generate`` / ``Engine.generate`` result dict."""
    m = out["meta_info"]
    return Outcome(
        output_ids=list(out["output_ids"]),
        output_logprobs=[e[0] for e in m["output_token_logprobs"]],
        input_logprobs=[e[0] for e in m.get("input_token_logprobs") or []],
        top_ids=[[t[1] for t in pos] for pos in m.get("output_top_logprobs") or []],
        cached_tokens=int(m.get("cached_tokens") or 0),
        num_retractions=int(m.get("num_retractions") or 0),
    )


@contextmanager
def real_scheduler() -> Iterator[None]:
    """The real scheduler while an ``Engine`` starts (a fake one may be set for other tests)."""
    old = os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    try:
        yield
    finally:
        if old is not None:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old


def run_engine(small: bool = False, **server_kwargs: Any) -> tuple[list[Outcome], dict[str, Any]]:
    """The workload on a cold ``Engine(**server_kwargs)`` on the embedded default model; returns
    the outcomes (wave by wave, request by request) and ``get_server_info()``."""
    from sglang_v4 import Engine

    with real_scheduler():
        engine = Engine(**server_kwargs)
    outs: list[Outcome] = []
    with engine:
        for i, wave in enumerate(waves(small)):
            res = engine.generate(input_ids=wave, sampling_params=SAMPLING, **_wave_kwargs(i))
            outs += [outcome(r) for r in res]
        info = engine.get_server_info()
    return outs, info


def _post(url: str, body: dict[str, Any], headers: dict[str, str], stream: bool) -> dict[str, Any]:
    if not stream:
        r = requests.post(url, json=body, headers=headers, timeout=300)
        assert r.status_code == 200, r.text
        return r.json()
    r = requests.post(url, json={**body, "stream": True}, headers=headers, stream=True, timeout=300)
    assert r.status_code == 200, r.text
    last: dict[str, Any] | None = None
    for line in r.iter_lines():
        if line and line != b"data: [DONE]":
            assert line.startswith(b"data: "), line
            last = json.loads(line[len(b"data: ") :])
    assert last is not None
    return last


def run_server(url: str, headers: dict[str, str], small: bool = False) -> list[Outcome]:
    """The workload against a running server's ``/generate``: each wave's requests at once, every
    third one streamed (its last chunk is compared)."""
    outs: list[Outcome] = []
    for i, wave in enumerate(waves(small)):
        bodies = [{"input_ids": ids, "sampling_params": SAMPLING, **_wave_kwargs(i)} for ids in wave]
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as ex:
            futs = [ex.submit(_post, url + "/generate", b, headers, j % 3 == 1) for j, b in enumerate(bodies)]
            outs += [outcome(f.result()) for f in futs]
    return outs


def assert_same_outputs(got: list[Outcome], want: list[Outcome], tol: float = LOGPROB_TOL) -> None:
    """``got`` gives the oracle's greedy outputs: the same token ids and top-logprob ids, the
    same prompt-logprob positions, every logprob within ``tol`` nats."""
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.output_ids == w.output_ids, f"request {i}: output ids differ"
        assert g.top_ids == w.top_ids, f"request {i}: top-logprob ids differ"
        assert len(g.output_logprobs) == len(w.output_logprobs)
        worst = max((abs(a - b) for a, b in zip(g.output_logprobs, w.output_logprobs)), default=0.0)
        assert worst <= tol, f"request {i}: output logprobs differ by {worst}"
        assert [x is None for x in g.input_logprobs] == [x is None for x in w.input_logprobs], i
        pairs = [
            (a, b) for a, b in zip(g.input_logprobs, w.input_logprobs) if a is not None and b is not None
        ]
        worst = max((abs(a - b) for a, b in pairs), default=0.0)
        assert worst <= tol, f"request {i}: prompt logprobs differ by {worst}"
