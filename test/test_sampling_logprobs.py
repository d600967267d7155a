"""Prompt logprobs with ``logprob_start_len`` on a radix-cache hit.

Found by hand: a 600-token prompt with ``logprob_start_len=512`` after its first 512 tokens were
cached returned 87 input logprobs instead of 88, shifted by one position (max error 3.1 nats).
As SGLang, the entry of token ``s`` is ``None`` (its logits at ``s - 1`` are not computed), so a
cache hit may cover ``s`` tokens; tokens after ``s`` need the logits from position ``s``. Oracle:
the same request on a cold cache (exact match), and the count ``len(prompt) - logprob_start_len``
(SGLang's convention).
"""

from __future__ import annotations

import pytest
import torch
from dsv4_testutil import random_ids
from scheduler_testutil import drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir, max_total_tokens=16 * 256)


def _run(s: Scheduler, rid: str, ids: list[int], start: int = -1) -> list[float | None]:
    submit(s, rid, ids, 1, ignore_eos=False, return_logprob=start >= 0, logprob_start_len=start)
    return drain(s, max_steps=1000)[rid]["in_lp"]


@pytest.mark.parametrize("start", [512, 300, 256, 257])
def test_input_logprobs_on_cache_hit_equal_cold(sched: Scheduler, start: int) -> None:
    ids = random_ids(600, 11)
    sched.flush_cache()
    cold = _run(sched, "cold", ids, start)
    assert len(cold) == len(ids) - start and cold[0] is None
    sched.flush_cache()
    _run(sched, "warm-up", ids[:590])  # caches the first two 256-token blocks
    warm = _run(sched, "warm", ids, start)
    assert len(warm) == len(cold)
    assert warm == pytest.approx(cold, abs=1e-4)


def _token_ids_run(s: Scheduler) -> dict[str, tuple[list, list, list]]:
    """Step until idle; per rid ``(output ids, input token-ids logprobs, output token-ids logprobs)``."""
    res: dict[str, tuple[list, list, list]] = {}
    for _ in range(2000):
        if not s.has_work():
            return res
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            ids, inp, outp = res.setdefault(rid, ([], [], []))
            ids += out.output_ids[i]
            inp += out.input_token_ids_logprobs_val[i]
            outp += out.output_token_ids_logprobs_val[i]
    raise AssertionError("scheduler did not finish")


@pytest.mark.parametrize(
    ("overlap", "device"),
    [
        (True, "cpu"),
        (False, "cpu"),
        pytest.param(
            True,
            "cuda",
            marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")],
        ),
    ],
)
def test_token_ids_logprob_equal_cold_target_logprobs(
    sched_model_dir: str, overlap: bool, device: str
) -> None:
    """SGLang's ``token_ids_logprob``: every returned prompt / output position reports the logprobs
    of the asked ids, in their order (``None`` for the first prompt token). It was refused with a
    400. Oracle: for each position and id, a cold request whose prompt is the context followed by
    that id returns it as its only prompt logprob (the target-gather path, not this feature's)."""
    s = make_scheduler(
        sched_model_dir, max_total_tokens=16 * 256, disable_overlap_schedule=not overlap, device=device
    )
    prompt = random_ids(20, 5)
    tids = [5, 100, prompt[7]]
    lp = dict(return_logprob=True, logprob_start_len=0)
    submit(s, "ids", prompt, 4, token_ids_logprob=tids, **lp)
    submit(s, "plain-lp", prompt[:9], 4, **lp)  # same batches, no token_ids_logprob
    submit(s, "no-lp", prompt[:11], 4)
    got = _token_ids_run(s)
    out_ids, inp, outp = got["ids"]
    assert len(out_ids) == 4 and len(inp) == len(prompt) and len(outp) == 4
    assert inp[0] is None and all(len(v) == len(tids) for v in inp[1:] + outp)
    assert got["plain-lp"][1:] == ([], []) and got["no-lp"][1:] == ([], [])

    def cold(context: list[int], t: int) -> float:
        s.flush_cache()
        submit(s, "cold", context + [t], 1, return_logprob=True, logprob_start_len=len(context) - 1)
        none, val = drain(s, max_steps=1000)["cold"]["in_lp"]
        assert none is None
        return val

    seq = prompt + out_ids
    for pos in (1, 7, 8, 19):
        assert inp[pos] == pytest.approx([cold(prompt[:pos], t) for t in tids], abs=1e-4), pos
    for j in range(4):
        ctx = seq[: len(prompt) + j]
        assert outp[j] == pytest.approx([cold(ctx, t) for t in tids], abs=1e-4), j
