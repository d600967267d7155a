"""Public bug reports on serving reliability: request timeouts in the queue and while running,
requests never aborted by the server itself when no limit is set, a full queue, aborts by
``rid`` in either queue and of every request, a grammar the server cannot honour, a prompt longer
than the pool, requests whose fields have the wrong JSON type, malformed bodies, a burst of aborts
and refusals, a stream its client closed early, and a backend that died with requests in flight.

In-process only: schedulers on the ``sched_model_dir`` checkpoint (CPU, fp32, 256-token pages)
and ``http_server.create_app`` over a tokenizer manager whose scheduler never answers
(``admin_app_testutil``). Oracles: SGLang 0.5.23's timeout / queue-full messages and their 503
status (its ``Scheduler._poll_timeout_aborts`` and ``_abort_on_queued_limit``, read from the
installed package), the page and slot counts back to idle (``assert_idle``, the cache manager's
``check_integrity``), the cold run of every request that was not aborted, and the ``openai``
client's own error parser for the error shape, and the messages the tokenizer manager sends to
the scheduler (an ``AbortReq`` per aborted request, none for a finished one).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from detokenizer_testutil import batch_str_out
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.request_timeouts import (
    RUNNING_TIMEOUT_ENV,
    WAITING_TIMEOUT_ENV,
    abort_timed_out,
    timeout_seconds,
)
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(300)

PROMPTS = {"a": random_ids(40, 251), "b": random_ids(60, 252), "c": random_ids(30, 253)}
N_NEW = 8


def _sglang_scheduler_source() -> str:
    """The text of SGLang 0.5.23's ``srt/managers/scheduler.py`` (read, not imported)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "sglang is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    return (root / "srt" / "managers" / "scheduler.py").read_text()


@pytest.fixture(scope="module")
def cold(sched_model_dir: str) -> dict[str, list[int]]:
    """Each prompt's greedy output run alone on a fresh scheduler (the cold-run oracle)."""
    out = {}
    for rid, ids in PROMPTS.items():
        s = make_scheduler(sched_model_dir)
        submit(s, rid, ids, N_NEW)
        out[rid] = drain(s)[rid]["ids"]
    return out


@pytest.fixture
def one_slot(sched_model_dir: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scheduler]:
    """A scheduler running one request at a time (others wait in its queue), no timeout set."""
    monkeypatch.delenv(WAITING_TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(RUNNING_TIMEOUT_ENV, raising=False)
    yield make_scheduler(sched_model_dir, max_running_requests=1)


def _integrity(s: Scheduler) -> None:
    """The cache manager's ownership invariant over every queued and running request."""
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))


def _steps(s: Scheduler, n: int, res: dict[str, dict]) -> dict[str, dict]:
    """Run ``n`` scheduler steps, adding their output ids and finish reasons to ``res`` (the
    ``drain`` result shape: pass ``res`` on to ``drain`` to collect the rest)."""
    for _ in range(n):
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": [], "chunks": []})
            r["ids"] += out.output_ids[i]
            r["finish"] = out.finished_reasons[i]
    return res


def _abort(res: dict[str, Any], rid: str) -> dict[str, Any]:
    """The abort finish reason of ``rid`` in a ``drain`` result."""
    fin = res[rid]["finish"]
    assert fin is not None and fin["type"] == "abort", fin
    return fin


def test_queued_request_past_the_waiting_timeout_gets_503(
    one_slot: Scheduler, cold: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # sgl-project/sglang#17143: a request left in the queue past the configured queue timeout is
    # aborted with 503 "Request waiting timeout reached." (SGLang's env SGLANG_REQ_WAITING_TIMEOUT
    # since); we had no such limit, so a queued request waited forever. The running one is untouched.
    src = _sglang_scheduler_source()
    assert "SGLANG_REQ_WAITING_TIMEOUT" in src and '"Request waiting timeout reached."' in src
    s = one_slot
    submit(s, "a", PROMPTS["a"], N_NEW)
    res = _steps(s, 1, {})  # "a" runs; "b" below waits behind it (one running slot)
    submit(s, "b", PROMPTS["b"], N_NEW)
    monkeypatch.setenv(WAITING_TIMEOUT_ENV, "30")
    s.waiting[0].arrival -= 60  # "b" has waited a minute
    _integrity(s)
    res = drain(s, res)
    fin = _abort(res, "b")
    assert (fin["message"], fin["status_code"]) == ("Request waiting timeout reached.", 503)
    assert res["b"]["ids"] == []
    assert res["a"]["ids"] == cold["a"]
    assert_idle(s)


def test_running_request_past_the_running_timeout_gets_503(
    sched_model_dir: str, cold: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # sgl-project/sglang#17831: a request in the forward batch longer than the configured forward
    # timeout is aborted with 503 before the next decode step (SGLang's SGLANG_REQ_RUNNING_TIMEOUT,
    # "Request running timeout reached."); its pages come back and the other running request's
    # output equals its cold run.
    assert '"Request running timeout reached."' in _sglang_scheduler_source()
    monkeypatch.setenv(RUNNING_TIMEOUT_ENV, "30")
    monkeypatch.delenv(WAITING_TIMEOUT_ENV, raising=False)
    s = make_scheduler(sched_model_dir)
    submit(s, "a", PROMPTS["a"], N_NEW)
    submit(s, "c", PROMPTS["c"], N_NEW)
    res = _steps(s, 2, {})  # both admitted; the next step starts their running clocks
    victim = next(r for r in s.running if r.rid == "a")
    assert victim.running_since is not None
    victim.running_since -= 60
    res = drain(s, res)
    fin = _abort(res, "a")
    assert (fin["message"], fin["status_code"]) == ("Request running timeout reached.", 503)
    assert res["a"]["ids"] == cold["a"][: len(res["a"]["ids"])] and len(res["a"]["ids"]) < N_NEW
    assert res["c"]["ids"] == cold["c"]
    assert_idle(s)


@pytest.mark.parametrize("value", [None, "-1", "0", "", "soon"])
def test_no_timeout_means_a_long_wait_is_never_aborted(
    one_slot: Scheduler, cold: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    # sgl-project/sglang#8339: requests queued behind a busy server were aborted by the server
    # itself after a fixed wait the user never asked for. Unset, SGLang's -1 default, 0, empty or a
    # malformed value is no limit: an hour-old queued request still runs to its cold output.
    if value is not None:
        monkeypatch.setenv(WAITING_TIMEOUT_ENV, value)
        monkeypatch.setenv(RUNNING_TIMEOUT_ENV, value)
    assert timeout_seconds(WAITING_TIMEOUT_ENV) is None and timeout_seconds(RUNNING_TIMEOUT_ENV) is None
    s = one_slot
    submit(s, "a", PROMPTS["a"], N_NEW)
    res = _steps(s, 1, {})
    submit(s, "b", PROMPTS["b"], N_NEW)
    s.waiting[0].arrival -= 3600
    s.running[0].arrival -= 3600
    assert abort_timed_out(s) == 0
    res = drain(s, res)
    assert res["a"]["ids"] == cold["a"] and res["b"]["ids"] == cold["b"]
    assert res["b"]["finish"]["type"] == "length"
    assert_idle(s)


def test_retracted_request_is_not_judged_by_the_waiting_timeout(
    one_slot: Scheduler, cold: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # sgl-project/sglang#17143 (its queue timeout counts time in the waiting queue before the
    # first forward): a running request retracted back to the queue to free pages has already
    # run; it resumes to its cold output instead of being aborted by the waiting limit.
    s = one_slot
    submit(s, "a", PROMPTS["a"], N_NEW)
    res = _steps(s, 2, {})
    s._retract(s.running[0])
    monkeypatch.setenv(WAITING_TIMEOUT_ENV, "30")
    s.waiting[0].arrival -= 60
    res = drain(s, res)
    assert res["a"]["ids"] == cold["a"]
    assert res["a"]["finish"]["type"] == "length"
    assert_idle(s)


def test_full_queue_refuses_with_503_not_500(sched_model_dir: str, cold: dict[str, list[int]]) -> None:
    # tenstorrent/tt-inference-server#863: a full request queue answered 500 (a server fault);
    # it is overload, answered with SGLang's 503 "The request queue is full." (its
    # _abort_on_queued_limit), and the refused request changes nothing for the others.
    assert '"The request queue is full."' in _sglang_scheduler_source()
    s = make_scheduler(sched_model_dir, max_running_requests=1, max_queued_requests=1)
    submit(s, "a", PROMPTS["a"], N_NEW)
    res = _steps(s, 1, {})
    submit(s, "b", PROMPTS["b"], N_NEW)
    submit(s, "c", PROMPTS["c"], N_NEW)  # the queue holds "b": refused
    _integrity(s)
    res = drain(s, res)
    fin = _abort(res, "c")
    assert (fin["message"], fin["status_code"]) == ("The request queue is full.", 503)
    assert res["c"]["ids"] == []
    assert res["a"]["ids"] == cold["a"] and res["b"]["ids"] == cold["b"]
    assert_idle(s)


def test_abort_by_rid_reaches_both_queues(one_slot: Scheduler, cold: dict[str, list[int]]) -> None:
    # sgl-project/sglang#11979: an abort by rid must look in the waiting queue and in the running
    # queue. One running and one queued request are aborted by rid (SGLang's "Aborted" and
    # "Abort in waiting queue", no status code); the third request's output is its cold run.
    s = one_slot
    submit(s, "a", PROMPTS["a"], N_NEW)
    res = _steps(s, 1, {})
    submit(s, "b", PROMPTS["b"], N_NEW)
    submit(s, "c", PROMPTS["c"], N_NEW)
    s.abort_request("a")  # running
    s.abort_request("b")  # queued
    res = drain(s, res)
    assert (_abort(res, "a")["message"], _abort(res, "a")["status_code"]) == ("Aborted", None)
    assert (_abort(res, "b")["message"], _abort(res, "b")["status_code"]) == ("Abort in waiting queue", None)
    assert res["b"]["ids"] == []
    assert res["c"]["ids"] == cold["c"]
    assert_idle(s)


def test_abort_all_then_new_requests_run_cold(one_slot: Scheduler, cold: dict[str, list[int]]) -> None:
    # vllm-project/vllm#47173: an abort with no request ids aborts every in-flight request, queued
    # ones removed from the waiting queue and running ones finished (SGLang: an empty rid); the
    # pool is idle after, and a request sent afterwards gets its cold output.
    s = one_slot
    for rid in ("a", "b", "c"):
        submit(s, rid, PROMPTS[rid], N_NEW)
    res = _steps(s, 1, {})
    s.abort_request("")
    res = drain(s, res)
    assert sorted(r for r in res if res[r]["finish"] and res[r]["finish"]["type"] == "abort") == [
        "a",
        "b",
        "c",
    ]
    assert_idle(s)
    submit(s, "b2", PROMPTS["b"], N_NEW)
    assert drain(s)["b2"]["ids"] == cold["b"]
    assert_idle(s)


def test_request_with_an_unusable_grammar_fails_at_once(
    one_slot: Scheduler, cold: dict[str, list[int]]
) -> None:
    # sgl-project/sglang#6803: a request whose grammar cannot be used was silently run without it
    # (or stuck in the grammar queue); it must end at once with a 400 abort and no tokens (an
    # unbalanced regex: refused by the grammar backend, or for want of one), leaving the pool idle.
    s = one_slot
    submit(s, "bad", PROMPTS["a"], N_NEW, sampling={"regex": "(unclosed"})
    submit(s, "b", PROMPTS["b"], N_NEW)
    res = drain(s)
    fin = _abort(res, "bad")
    assert fin["status_code"] == 400 and fin["message"]
    assert res["bad"]["ids"] == []
    assert res["b"]["ids"] == cold["b"]
    assert_idle(s)


# ---------------------------------------------------------------------------- HTTP bad input

BAD_BODIES = [
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": "x"}, "tools"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "x"}]},
        "messages.1.tool_calls",
    ),
    (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": 5,
            "tool_choice": {"type": "function", "function": {"name": "f"}},
        },
        "tools",
    ),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stop": 5}, "stop"),
    ("/v1/completions", {"prompt": {"a": 1}}, "prompt"),
]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` over ``create_app``; the scheduler never answers."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("reliability_app")) as pair:
        yield pair


def _headers() -> dict[str, str]:
    from admin_app_testutil import ADMIN_KEY

    return {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.mark.parametrize("path,body,param", BAD_BODIES)
def test_wrong_json_types_are_a_400_that_registers_nothing(
    app: tuple[Any, Any], path: str, body: dict[str, Any], param: str
) -> None:
    # vllm-project/vllm#54026: scalar `messages`, `tools` or `tool_calls` (also with a named
    # tool_choice) reached validators that called len()/.get() on them and answered 500. They are
    # a 400 in OpenAI's error shape naming the field, and no request is registered.
    client, tm = app
    r = client.post(path, json={"model": "fake-v4", **body}, headers=_headers())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "BadRequestError"
    assert err["param"] == param and err["message"]
    assert not tm.rid_to_state and not tm.admitting.rids()


def test_validation_error_parses_as_openai_bad_request(app: tuple[Any, Any]) -> None:
    # sgl-project/sglang#7487: a request-validation error was not in OpenAI's error format, so the
    # OpenAI client could not read it. The openai client's own parser turns ours into a
    # BadRequestError with status 400 and the failing field as ``param``.
    from admin_app_testutil import ADMIN_KEY
    from openai_fake_tm import oai_client

    client, tm = app
    oai = oai_client(client, key=ADMIN_KEY)
    with pytest.raises(openai.BadRequestError) as ei:
        oai.chat.completions.create(model="fake-v4", messages="hi")  # type: ignore[arg-type]
    assert ei.value.status_code == 400
    assert ei.value.param == "messages" and str(ei.value.code) == "400"  # the client keeps code as str
    assert ei.value.type == "BadRequestError" and "messages" in ei.value.message
    assert not tm.rid_to_state


@pytest.mark.parametrize(
    "raw",
    [b'{"model":', b"\xff\xfe{}", b'{"model": "fake-v4", "messages": []} trailing', b"NaN", b"[1, 2]"],
)
def test_malformed_json_bodies_are_a_400(app: tuple[Any, Any], raw: bytes) -> None:
    # department-of-veterans-affairs/abd-vro#779: a body that is not valid JSON (cut short, not
    # UTF-8, trailing bytes, a bare NaN, not an object) answered 500; it is a client error, 400 in
    # the OpenAI error shape, and nothing is registered.
    client, tm = app
    headers = {**_headers(), "Content-Type": "application/json"}
    r = client.post("/v1/chat/completions", content=raw, headers=headers)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["message"]
    assert not tm.rid_to_state and not tm.admitting.rids()


# ---------------------------------------------------------------------------- bursts and huge input

BURST = {f"r{k}": random_ids(20 + 7 * k, 2600 + k) for k in range(10)}


@pytest.fixture(scope="module")
def burst_cold(sched_model_dir: str) -> dict[str, list[int]]:
    """Each ``BURST`` prompt's greedy ``N_NEW`` tokens, run alone on a flushed scheduler."""
    s = make_scheduler(sched_model_dir)
    out = {}
    for rid, ids in BURST.items():
        assert s.flush_cache()
        submit(s, rid, ids, N_NEW)
        out[rid] = drain(s)[rid]["ids"]
    return out


def test_burst_with_refusals_and_aborts_leaves_the_rest_cold(
    sched_model_dir: str, burst_cold: dict[str, list[int]]
) -> None:
    # sgl-project/sglang#21173: under load an abort can name a request that already finished (or
    # that the server never had); the server must ignore it, not crash. A burst on a server with
    # two running slots and a queue of four: refusals (503 queue full), aborts of a queued and of a
    # running request, of an unknown rid and of a finished one. The ownership invariant holds at
    # every step, each request still served gives its cold output, and the pool ends idle.
    s = make_scheduler(sched_model_dir, max_running_requests=2, max_queued_requests=4)
    res: dict[str, dict] = {}

    def step(n: int) -> None:
        for _ in range(n):
            _steps(s, 1, res)
            _integrity(s)

    for rid in ("r0", "r1", "r2", "r3", "r4", "r5", "r6"):
        submit(s, rid, BURST[rid], N_NEW)  # r4, r5, r6 find the queue (r0..r3) full
    step(2)  # r0, r1 run; r2, r3 wait
    submit(s, "r7", BURST["r7"], N_NEW)
    s.abort_request("r2")  # queued
    s.abort_request("r0")  # running
    s.abort_request("never-sent")
    step(3)
    submit(s, "r8", BURST["r8"], N_NEW)
    drain(s, res)
    s.abort_request("r1")  # finished already
    submit(s, "r9", BURST["r9"], N_NEW)
    drain(s, res)
    for rid in ("r4", "r5", "r6"):
        fin = _abort(res, rid)
        assert (fin["message"], fin["status_code"]) == ("The request queue is full.", 503)
        assert res[rid]["ids"] == []
    assert _abort(res, "r2")["message"] == "Abort in waiting queue" and res["r2"]["ids"] == []
    assert _abort(res, "r0")["message"] == "Aborted"
    assert res["r0"]["ids"] == burst_cold["r0"][: len(res["r0"]["ids"])]
    for rid in ("r1", "r3", "r7", "r8", "r9"):
        assert res[rid]["ids"] == burst_cold[rid], rid
        assert res[rid]["finish"]["type"] == "length", rid
    assert "never-sent" not in res
    assert_idle(s)


def test_prompt_longer_than_the_pool_is_a_400_that_harms_no_one(
    one_slot: Scheduler, cold: dict[str, list[int]]
) -> None:
    # smg-project/smg#2380: an over-length prompt answered 500 (a server fault) instead of a 400
    # validation error. A prompt longer than the KV pool (8192 tokens here) is refused with a 400
    # abort, no tokens and no pages taken; the request queued with it gets its cold output.
    s = one_slot
    submit(s, "huge", random_ids(s.max_total_num_tokens + 100, 2700), N_NEW)
    submit(s, "b", PROMPTS["b"], N_NEW)
    _integrity(s)
    res = drain(s)
    fin = _abort(res, "huge")
    assert fin["status_code"] == 400 and fin["message"]
    assert res["huge"]["ids"] == []
    assert res["b"]["ids"] == cold["b"]
    assert_idle(s)


def test_stream_closed_early_aborts_at_once_and_a_finished_one_never(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # ROCm/ATOM#1589: streaming cleanup aborted the engine request on every normal completion (an
    # abort flood), and a client that went away mid-stream left the request running because the
    # generators had no try/finally. A stream read to its finish sends no abort; a stream closed
    # after its first chunk sends exactly one abort for its rid at once (not when the garbage
    # collector gets to the inner generator) and leaves the in-flight table at once.
    import asyncio

    from sglang_v4.managers.io_struct import AbortReq, GenerateReqInput

    _, tm = app
    sent: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (sent.append(o), send(o, *a, **k))[1])

    def aborts() -> list[str]:
        return [o.rid for o in sent if isinstance(o, AbortReq)]

    async def answer(rid: str, finished: bool) -> None:
        while rid not in tm.rid_to_state:
            await asyncio.sleep(0.005)
        tm._handle_batch_output(batch_str_out(rid, finished))

    async def main() -> None:
        obj = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 1}, stream=True, rid="rel-done")
        feeder = asyncio.create_task(answer("rel-done", True))
        chunks = [c async for c in tm.generate_request(obj)]
        await feeder
        assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
        assert aborts() == [] and not tm.rid_to_state
        obj = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 5}, stream=True, rid="rel-gone")
        feeder = asyncio.create_task(answer("rel-gone", False))
        gen = tm.generate_request(obj)
        await gen.__anext__()
        await feeder
        await gen.aclose()  # the client went away
        assert aborts() == ["rel-gone"]
        assert not tm.rid_to_state

    asyncio.run(main())


def test_dead_backend_fails_in_flight_and_turns_health_503(tmp_path: Path) -> None:
    # vllm-project/vllm#24897 (and #39863): with the engine process dead, /health still answered
    # 200 (or a generic 500) and in-flight requests hung. Once the backend is reported dead, the
    # in-flight stream ends with a 503 error at once, /health and /health_generate answer 503, and
    # a new request is refused with 503 in the OpenAI error shape; nothing stays in flight.
    import asyncio

    from admin_app_testutil import admin_app_client
    from sglang_v4.managers.io_struct import GenerateReqInput

    with admin_app_client(tmp_path) as (client, tm):
        assert client.get("/health", headers=_headers()).status_code == 200

        async def main() -> Exception:
            obj = GenerateReqInput(
                text="hi", sampling_params={"max_new_tokens": 5}, stream=True, rid="rel-dead"
            )

            async def crash() -> None:
                while "rel-dead" not in tm.rid_to_state:
                    await asyncio.sleep(0.005)
                tm.on_crash("scheduler process exited with code -9")

            task = asyncio.create_task(crash())
            try:
                async for _ in tm.generate_request(obj):
                    pass
            except Exception as e:  # noqa: BLE001 - the error is the result
                return e
            finally:
                await task
            raise AssertionError("the in-flight stream ended without an error")

        err = asyncio.run(asyncio.wait_for(main(), 30))
        assert getattr(err, "status_code", None) == 503
        assert not tm.rid_to_state
        for path in ("/health", "/health_generate"):
            assert client.get(path, headers=_headers()).status_code == 503, path
        body = {"model": "fake-v4", "messages": [{"role": "user", "content": "hi"}]}
        r = client.post("/v1/chat/completions", json=body, headers=_headers())
        assert r.status_code == 503
        assert r.json()["error"]["code"] == 503 and r.json()["error"]["message"]
