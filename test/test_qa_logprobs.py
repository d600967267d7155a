"""QA: prompt logprobs with ``logprob_start_len`` on a radix-cache hit.

Found by hand: a 600-token prompt with ``logprob_start_len=512`` after its first 512 tokens were
cached returned 87 input logprobs instead of 88, shifted by one position (max error 3.1 nats).
The logprob of token ``s`` needs the logits at position ``s - 1``, so a cache hit may cover at most
``s - 1`` tokens. Oracle: the same request on a cold cache (exact match), and the count
``len(prompt) - logprob_start_len`` (SGLang's convention).
"""

from __future__ import annotations

import copy

import pytest
from dsv4_testutil import CONFIGS, random_ids
from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs
from sglang_v4.tools.make_checkpoint import write_checkpoint


@pytest.fixture(scope="module")
def sched(tmp_path_factory: pytest.TempPathFactory) -> Scheduler:
    d = tmp_path_factory.mktemp("qa_lp_model")
    model_dir = write_checkpoint(
        str(d), fmt="hf", weights="fp32", seed=4, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )
    return Scheduler(
        ServerArgs(
            model_path=model_dir, device="cpu", dtype="float32", max_total_tokens=16 * 256, skip_warmup=True
        )
    )


def _run(s: Scheduler, rid: str, ids: list[int], start: int = -1) -> list[float | None]:
    sp = SamplingParams.from_dict({"max_new_tokens": 1, "temperature": 0})
    sp.normalize(None)
    s.add_request(
        TokenizedGenerateReqInput(
            rid=rid,
            input_text=None,
            input_ids=ids,
            sampling_params=sp,
            return_logprob=start >= 0,
            logprob_start_len=start,
            top_logprobs_num=0,
        )
    )
    vals: list[float | None] = []
    for _ in range(1000):
        if not s.has_work():
            return vals
        out = s.step()
        for i, r in enumerate(out.rids if out else []):
            if r == rid:
                vals += out.input_token_logprobs_val[i]
    raise AssertionError("did not finish")


@pytest.mark.parametrize("start", [512, 300, 256, 257])
def test_input_logprobs_on_cache_hit_equal_cold(sched: Scheduler, start: int) -> None:
    ids = random_ids(600, 11)
    sched.flush_cache()
    cold = _run(sched, "cold", ids, start)
    assert len(cold) == len(ids) - start
    sched.flush_cache()
    _run(sched, "warm-up", ids[:590])  # caches the first two 256-token blocks
    warm = _run(sched, "warm", ids, start)
    assert len(warm) == len(cold)
    assert warm == pytest.approx(cold, abs=1e-4)
