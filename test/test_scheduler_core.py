"""Scheduler core behaviour in-process: retraction under KV pressure, abort, priority, limits.

The oracle for outputs is the same request run alone on a roomy pool (greedy decoding is
deterministic), which the parity tests tie to HF transformers.
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
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("sched_model")
    return write_checkpoint(
        str(d), fmt="hf", weights="fp32", seed=4, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )


def make(model_dir: str, **kw) -> Scheduler:
    args = dict(
        model_path=model_dir, device="cpu", dtype="float32", max_total_tokens=32 * 256, skip_warmup=True
    )
    args.update(kw)
    return Scheduler(ServerArgs(**args))


def submit(s: Scheduler, rid: str, ids: list[int], n: int, **kw) -> None:
    sp = SamplingParams.from_dict({"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
    sp.normalize(None)
    s.add_request(
        TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp, **kw)
    )


def drain(s: Scheduler, max_steps: int = 20_000) -> dict[str, dict]:
    res: dict[str, dict] = {}
    for _ in range(max_steps):
        if not s.has_work():
            return res
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": []})
            r["ids"] += out.output_ids[i]
            r["finish"] = out.finished_reasons[i]
    raise AssertionError("did not finish")


def idle(s: Scheduler) -> bool:
    s.flush_cache()
    p = s.pool
    return p.block_alloc.used == 0 and p.window_alloc.used == 0 and p.req_slots.available == p.req_slots.size


def test_retraction_keeps_outputs_exact(model_dir):
    prompts = [random_ids(300, seed=40 + i) for i in range(3)]
    roomy = make(model_dir)
    alone = {}
    for i, p in enumerate(prompts):
        submit(roomy, f"r{i}", p, 240)
        alone.update(drain(roomy))
    # 5 block pages for three requests that each grow to 540 tokens (3 blocks): must retract
    tight = make(model_dir, max_total_tokens=5 * 256)
    for i, p in enumerate(prompts):
        submit(tight, f"r{i}", p, 240)
    got = drain(tight)
    assert tight.num_retractions > 0
    for rid in alone:
        assert got[rid]["finish"]["type"] == "length"
        assert got[rid]["ids"] == alone[rid]["ids"], rid
    assert idle(tight)


def test_abort_running_and_queued_returns_pages(model_dir):
    s = make(model_dir, max_running_requests=1)
    submit(s, "a", random_ids(400, 1), 50)
    submit(s, "b", random_ids(400, 2), 50)
    s.step()
    s.step()
    assert [r.rid for r in s.running] == ["a"] and [r.rid for r in s.waiting] == ["b"]
    s.abort_request("a")
    s.abort_request("b")
    res = drain(s)
    assert res["a"]["finish"]["type"] == "abort" and res["b"]["finish"]["type"] == "abort"
    assert idle(s)


def test_priority_scheduling(model_dir):
    s = make(model_dir, max_running_requests=1, enable_priority_scheduling=True)
    submit(s, "low", random_ids(100, 3), 2, priority=0)
    submit(s, "high", random_ids(100, 4), 2, priority=10)
    s.step()
    assert [r.rid for r in s.running] == ["high"]
    drain(s)
    assert idle(s)


def test_invalid_requests_finish_with_400(model_dir):
    s = make(model_dir, context_length=600)
    submit(s, "long", random_ids(700, 5), 4)
    submit(s, "vocab", [1, 2, 10**6], 4)
    res = drain(s)
    for rid in ("long", "vocab"):
        assert res[rid]["finish"]["type"] == "abort"
        assert res[rid]["finish"].get("status_code") == 400
    assert idle(s)


def test_generation_stops_at_context_length(model_dir):
    s = make(model_dir, context_length=520)
    submit(s, "a", random_ids(500, 6), 100)
    res = drain(s)
    assert res["a"]["finish"]["type"] == "length"
    assert len(res["a"]["ids"]) == 20
    assert idle(s)


def test_request_larger_than_pool_fails_cleanly_and_others_proceed(model_dir):
    """A prompt that cannot fit the pool is failed with 400; a small one still completes."""
    s = make(model_dir, max_total_tokens=2 * 256, chunked_prefill_size=256)
    submit(s, "huge", random_ids(900, 8), 4)
    submit(s, "small", random_ids(100, 9), 4)
    res = drain(s)
    assert res["huge"]["finish"]["type"] == "abort" and res["huge"]["finish"].get("status_code") == 400
    assert res["small"]["finish"]["type"] == "length" and len(res["small"]["ids"]) == 4
    assert idle(s)


def test_concurrent_chunked_prefills_under_pressure_do_not_hang(model_dir):
    """Several chunked prefills that together exceed the pool: all finish, outputs exact."""
    prompts = [random_ids(600, seed=60 + i) for i in range(3)]
    roomy = make(model_dir)
    alone = {}
    for i, p in enumerate(prompts):
        submit(roomy, f"c{i}", p, 3)
        alone.update(drain(roomy))
    tight = make(model_dir, max_total_tokens=4 * 256, chunked_prefill_size=200)
    for i, p in enumerate(prompts):
        submit(tight, f"c{i}", p, 3)
    got = drain(tight)
    for rid in alone:
        assert got[rid]["ids"] == alone[rid]["ids"], rid
    assert idle(tight)


def test_stream_interval_batches_stream_chunks(model_dir):
    """``--stream-interval 4``: a streaming request's tokens go out at the 1st, 5th, 9th token and
    at the finish (SGLang's rule), with every token and logprob exactly once and in order; a
    request's own ``stream_interval`` (3) overrides the server's; non-streaming requests and
    interval 1 send every step. Tokens equal a run with interval 1."""
    ids = random_ids(40, seed=11)

    def run(interval: int, **sp_extra) -> dict[str, list]:
        s = make(model_dir, stream_interval=interval)
        for rid, stream in (("s", True), ("n", False)):
            sp = SamplingParams.from_dict(
                {"max_new_tokens": 10, "temperature": 0, "ignore_eos": True, **sp_extra}
            )
            sp.normalize(None)
            s.add_request(
                TokenizedGenerateReqInput(
                    rid=rid,
                    input_text=None,
                    input_ids=ids,
                    sampling_params=sp,
                    stream=stream,
                    return_logprob=True,
                )
            )
        chunks: dict[str, list] = {"s": [], "n": []}
        lps: dict[str, list] = {"s": [], "n": []}
        while s.has_work():
            out = s.step()
            for i, rid in enumerate(out.rids if out else []):
                if out.output_ids[i] or out.finished_reasons[i] is not None:
                    chunks[rid].append(list(out.output_ids[i]))
                lps[rid] += out.output_token_logprobs_idx[i]
        return {"chunks": chunks, "lps": lps}

    base, four, three = run(1), run(4), run(4, stream_interval=3)
    flat = [t for c in base["chunks"]["s"] for t in c]
    assert [len(c) for c in base["chunks"]["s"]] == [1] * 10
    assert [len(c) for c in four["chunks"]["s"]] == [1, 4, 4, 1]  # tokens 1 | 2-5 | 6-9 | 10
    assert [len(c) for c in three["chunks"]["s"]] == [1, 3, 3, 3]  # tokens 1 | 2-4 | 5-7 | 8-10
    for r in (four, three):
        assert [t for c in r["chunks"]["s"] for t in c] == flat
        assert r["lps"]["s"] == flat  # logprob token ids: each once, in order
        assert [len(c) for c in r["chunks"]["n"]] == [1] * 10  # non-streaming: unchanged
