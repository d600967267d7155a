"""Public bug reports on serving reliability (round 27): a completion length the context can never
hold, a streaming client gone before its first byte, a graceful drain that must keep streaming to
the requests in flight while refusing new ones, aborts racing an overlapped chunked prefill, an
abort of a decoding request next to others, and a burst over the queue limit.

In-process only: schedulers on the shared ``sched_model_dir`` checkpoint (CPU, fp32, 256-token
pages) and the tokenizer manager of ``admin_app_testutil`` (context 4096 tokens) whose scheduler
never answers (the tests play the scheduler's answers). Oracles: each request's cold run alone,
the pool and slot counts back to idle (``assert_idle``), the messages the tokenizer manager sends
to the scheduler (``AbortReq`` per request, nothing for a refused one), the limits themselves
(the context length, ``--max-queued-requests``), and the status codes and numbers the reports
say an answer must carry.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from detokenizer_testutil import batch_str_out
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, collect_outputs, drain, make_scheduler, submit
from sglang_v4.managers.io_struct import AbortReq, GenerateReqInput, TokenizedGenerateReqInput

pytestmark = pytest.mark.timeout(300)


# --- the tokenizer manager (the scheduler never answers) -----------------------------------------


@pytest.fixture
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` over ``create_app`` (native routes only), fresh for each
    test (a drain leaves its tokenizer manager refusing requests); the scheduler never answers."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("reliability27_app"), openai_routes=False) as pair:
        yield pair


@pytest.fixture
def sent(app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every message the tokenizer manager sends to the scheduler during the test."""
    _, tm = app
    out: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (out.append(o), send(o, *a, **k))[1])
    return out


def _aborts(sent: list[Any]) -> list[str]:
    return [o.rid for o in sent if isinstance(o, AbortReq)]


def _generates(sent: list[Any]) -> list[str]:
    return [o.rid for o in sent if isinstance(o, TokenizedGenerateReqInput)]


async def _registered(tm: Any, rid: str) -> None:
    """Wait until ``rid`` is in the tokenizer manager's in-flight table."""
    while rid not in tm.rid_to_state:
        await asyncio.sleep(0.005)


def test_aprender_665_max_tokens_beyond_the_context_is_a_400_not_a_hang(
    app: tuple[Any, Any], sent: list[Any]
) -> None:
    """paiml/aprender#665: a completions request with max_tokens 10000 on a 2048-token model hung
    with no answer; the report asks for the length to be capped or refused with a 400 that
    explains the limit. Context 4096 here: ``max_new_tokens`` 10000 is refused at once with a
    400 whose message states the context length (4096) and the 10000 requested, nothing is
    sent to the scheduler and nothing is left in flight; over HTTP ``/generate`` answers 400
    too. A length that fits (the prompt plus 100) is sent."""
    from admin_app_testutil import ADMIN_CONTEXT, ADMIN_KEY
    from sglang_v4.managers.tokenization import RequestError

    client, tm = app

    async def refused() -> RequestError:
        obj = GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 10000}, rid="too-long")
        try:
            async for _ in tm.generate_request(obj):
                pass
        except RequestError as e:
            return e
        raise AssertionError("max_new_tokens beyond the context was accepted")

    err = asyncio.run(asyncio.wait_for(refused(), 10))
    assert getattr(err, "status_code", 400) == 400
    assert str(ADMIN_CONTEXT) in str(err) and "10000" in str(err)
    assert _generates(sent) == [] and not tm.rid_to_state
    r = client.post(
        "/generate",
        json={"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 10000}},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert r.status_code == 400 and str(ADMIN_CONTEXT) in r.text
    assert _generates(sent) == [] and not tm.rid_to_state

    async def accepted() -> None:
        obj = GenerateReqInput(input_ids=[5, 6, 7], sampling_params={"max_new_tokens": 100}, rid="fits")
        gen = tm.generate_request(obj)
        first = asyncio.ensure_future(gen.__anext__())
        await _registered(tm, "fits")
        tm._handle_batch_output(batch_str_out("fits", True))
        await first
        await gen.aclose()

    asyncio.run(asyncio.wait_for(accepted(), 10))
    assert _generates(sent) == ["fits"]


def test_lemonade_3133_a_stream_closed_before_its_first_byte_is_aborted(
    app: tuple[Any, Any], sent: list[Any]
) -> None:
    """lemonade-sdk/lemonade#3133: a streaming client that stopped while the server was still
    waiting for the first output (a long prefill) was only noticed when the backend produced a
    chunk, so the request kept the hardware busy. A stream whose reader goes away before any
    output arrived sends exactly one abort for its rid at once and leaves nothing in flight."""
    _, tm = app

    async def main() -> None:
        obj = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 50}, stream=True, rid="early")
        gen = tm.generate_request(obj)
        waiting = asyncio.ensure_future(gen.__anext__())
        await _registered(tm, "early")
        await asyncio.sleep(0.02)
        assert not waiting.done()  # still waiting for its first output
        waiting.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await gen.aclose()

    asyncio.run(asyncio.wait_for(main(), 10))
    assert _generates(sent) == ["early"]
    assert _aborts(sent) == ["early"]
    assert not tm.rid_to_state


def test_smg_1172_a_drain_keeps_streaming_to_requests_in_flight_and_refuses_new_ones(
    app: tuple[Any, Any], sent: list[Any]
) -> None:
    """smg-project/smg#1172: on SIGTERM the requests in flight were failed at once ("Server
    shutting down") and the output loop stopped feeding the streams still running; the drain
    should only stop new requests and let those in flight finish. While draining, a stream in
    flight keeps receiving its outputs and finishes normally (finish reason ``length``, no
    error, no abort), a new request is refused with 503 without reaching the scheduler, and the
    drain returns once the stream has finished, well before its timeout."""
    from sglang_v4.entrypoints.admission import drain_in_flight
    from sglang_v4.managers.tokenization import RequestError

    _, tm = app
    flags: list[bool] = []

    async def main() -> tuple[list[dict], Exception]:
        obj = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 5}, stream=True, rid="inflight")
        got: list[dict] = []

        async def consume() -> None:
            async for out in tm.generate_request(obj):
                got.append(out)

        reader = asyncio.create_task(consume())
        await _registered(tm, "inflight")
        drainer = asyncio.create_task(
            drain_in_flight(lambda: tm, lambda: flags.append(True), signal.SIGTERM, 30.0)
        )
        await asyncio.sleep(0.05)
        assert flags == [True] and not drainer.done()
        tm._handle_batch_output(batch_str_out("inflight", False))
        while not got:
            await asyncio.sleep(0.005)
        new = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 5}, rid="late")
        try:
            async for _ in tm.generate_request(new):
                pass
            refusal: Exception = AssertionError("a new request was admitted while draining")
        except RequestError as e:
            refusal = e
        tm._handle_batch_output(batch_str_out("inflight", True))
        await asyncio.wait_for(reader, 5)
        await asyncio.wait_for(drainer, 5)
        return got, refusal

    got, refusal = asyncio.run(asyncio.wait_for(main(), 20))
    assert len(got) == 2
    assert got[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert getattr(refusal, "status_code", None) == 503
    assert _generates(sent) == ["inflight"] and _aborts(sent) == []
    assert not tm.rid_to_state


# --- the scheduler -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def overlap(sched_model_dir: str) -> Any:
    """Eight block pages, 256-token chunks, the overlap schedule on (a step launches its batch
    and processes the previous step's result)."""
    return make_scheduler(
        sched_model_dir, max_total_tokens=8 * PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=False
    )


def _take(out: Any, ids: list[int], finals: list[dict]) -> None:
    """Add one step's output message for the single request ``r``: its token ids to ``ids``, its
    finish reason (if any) to ``finals``."""
    for i, rid in enumerate(out.rids if out else []):
        assert rid == "r"
        ids += out.output_ids[i]
        if out.finished_reasons[i] is not None:
            finals.append(out.finished_reasons[i])


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_sglang_37295_an_abort_racing_an_overlapped_chunked_prefill_shows_no_token(
    overlap: Any, steps: int
) -> None:
    """sgl-project/sglang#37295 and sgl-project/sglang#36926: with the overlap schedule an abort
    arriving while a chunk of a chunked prefill (a middle one, or the final one whose result
    holds the first sampled token) is still in flight exposed that token, streamed the
    terminal abort twice or left the request's pages allocated. A 600-token prompt (three
    256-token chunks) is aborted after 1, 2 or 3 steps (the third launches the final chunk),
    before any token of it was sent: it gets exactly one final message, an abort with no token,
    nothing stays allocated, and a request run next equals its cold run."""
    prompt, after = random_ids(600, seed=37295), random_ids(60, seed=36926)
    assert overlap.flush_cache()
    submit(overlap, "cold", after, 3)
    cold = drain(overlap)["cold"]["ids"]
    assert overlap.flush_cache()
    submit(overlap, "r", prompt, 6)
    finals: list[dict] = []
    ids: list[int] = []
    for _ in range(steps):
        _take(overlap.step(), ids, finals)
    assert ids == [] and finals == []
    overlap.abort_request("r")
    for _ in range(100):
        if not overlap.has_work():
            break
        _take(overlap.step(), ids, finals)
    assert [f["type"] for f in finals] == ["abort"]
    assert ids == []
    assert_idle(overlap)
    submit(overlap, "after", after, 3)
    assert drain(overlap)["after"]["ids"] == cold
    assert_idle(overlap)


def test_lmdeploy_2512_an_aborted_stream_stops_generating_and_others_go_on(sched_model_dir: str) -> None:
    """InternLM/lmdeploy#2512: when a streaming client closes its request the server stops
    generating for it (the maintainers' answer). Two requests decode together; ``a`` is aborted
    after 3 tokens: the next step ends it with an abort and it never gets another token, its
    pages and slot are free at once (one request's worth left in use), and ``b`` gets exactly
    its cold run's tokens."""
    s = make_scheduler(sched_model_dir, disable_overlap_schedule=True)
    pa, pb = random_ids(80, seed=2512), random_ids(90, seed=25120)
    submit(s, "cb", pb, 12)
    cold_b = drain(s)["cb"]["ids"]
    assert s.flush_cache()
    submit(s, "a", pa, 12, stream=True)
    submit(s, "b", pb, 12, stream=True)
    res: dict[str, dict] = {}
    while len(res.get("a", {}).get("ids", [])) < 3:
        collect_outputs(s.step(), res)
    n_a = len(res["a"]["ids"])
    s.abort_request("a")
    collect_outputs(s.step(), res)
    assert res["a"]["finish"]["type"] == "abort"
    assert [r.rid for r in s.running] == ["b"]
    assert s.pool.req_slots.size - s.pool.req_slots.available == 1
    while s.has_work():
        collect_outputs(s.step(), res)
    assert len(res["a"]["ids"]) == n_a
    assert res["b"]["ids"] == cold_b
    assert_idle(s)


def test_knative_602_a_burst_over_the_queue_limit_is_refused_at_once_and_the_rest_served(
    sched_model_dir: str,
) -> None:
    """knative/serving#602 and nod-ai/amd-shark-ai#1275: an overloaded server should refuse what
    its queue cannot hold at once with a 503 instead of letting latency blow up. With
    ``--max-queued-requests 2``, of five requests sent together the three the queue cannot hold
    are reported refused (503 abort, no token) in the very first step's output, and the two
    queued ones each get their cold run's tokens."""
    s = make_scheduler(sched_model_dir, max_queued_requests=2, disable_overlap_schedule=True)
    prompts = {f"q{i}": random_ids(30 + 5 * i, seed=602 + i) for i in range(5)}
    cold = {}
    for k in ("q0", "q1"):
        submit(s, k, prompts[k], 3)
        cold[k] = drain(s)[k]["ids"]
        assert s.flush_cache()
    for k, p in prompts.items():
        submit(s, k, p, 3)
    first: dict[str, dict] = {}
    collect_outputs(s.step(), first)
    refused = sorted(k for k, r in first.items() if r["finish"] is not None)
    assert refused == ["q2", "q3", "q4"]
    for k in refused:
        fin = first[k]["finish"]
        assert fin["type"] == "abort" and fin["status_code"] == 503 and first[k]["ids"] == []
    res = drain(s)
    for k in ("q0", "q1"):
        assert first.get(k, {}).get("ids", []) + res[k]["ids"] == cold[k], k
    assert not set(res) & set(refused)
    assert_idle(s)
