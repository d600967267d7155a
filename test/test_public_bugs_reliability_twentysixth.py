"""Public bug reports on serving reliability (round 26): the running-request cap, an abort in a
request's last step, an abort repeated, a request reaching the end of the KV pool, ``n > 1``
requests aborted by their parent id or refused in part, a request id reused after its first
request was given up, a non-streaming caller that went away, token ids outside the vocabulary, an
over-long prompt's error text, and request bodies near and over the size limit.

In-process only: schedulers on the shared ``sched_model_dir`` checkpoint (CPU, fp32, 256-token
pages) and ``http_server.create_app`` over a tokenizer manager whose scheduler never answers
(``admin_app_testutil``; the tests play the scheduler's answers). Oracles: each request's cold
run alone, the pool and slot counts back to idle (``assert_idle``, the cache manager's
``check_integrity``), the limits themselves (``max_running_requests``, the pool size), the
messages the tokenizer manager sends to the scheduler (``AbortReq`` per request), and the numbers
the reports say an error must state.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from detokenizer_testutil import batch_str_out
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.io_struct import AbortReq, BatchStrOut, GenerateReqInput
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(300)

PROMPTS = {"a": random_ids(40, 261), "b": random_ids(60, 262), "c": random_ids(30, 263)}
N_NEW = 6


@pytest.fixture(scope="module")
def cold(sched_model_dir: str) -> dict[str, list[int]]:
    """Each prompt's greedy output run alone on a flushed scheduler (the cold-run oracle)."""
    s = make_scheduler(sched_model_dir)
    out = {}
    for rid, ids in PROMPTS.items():
        assert s.flush_cache()
        submit(s, rid, ids, N_NEW)
        out[rid] = drain(s)[rid]["ids"]
    return out


def _record(s: Scheduler, res: dict[str, dict], finals: list[str]) -> Any:
    """One scheduler step: its output ids and finish reasons added to ``res`` (``drain``'s shape)
    and the rid of every message that carries a finish reason appended to ``finals``."""
    out = s.step()
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": [], "finish": None})
        r["ids"] += out.output_ids[i]
        if out.finished_reasons[i] is not None:
            r["finish"] = out.finished_reasons[i]
            finals.append(rid)
    return out


def _run(s: Scheduler, res: dict[str, dict], finals: list[str], max_steps: int = 500) -> None:
    """Step until idle, recording as :func:`_record`."""
    for _ in range(max_steps):
        if not s.has_work():
            return
        _record(s, res, finals)
    raise AssertionError("the scheduler did not go idle")


def test_running_requests_never_exceed_max_running_requests(
    sched_model_dir: str, cold: dict[str, list[int]]
) -> None:
    # vllm-project/vllm#56758: the admission loop must stop once the running set reaches its cap
    # (the PR's rule: no admission while len(running) >= the cap); an extra request admitted past
    # it starves. With --max-running-requests 2 and three requests, at most two run at any step,
    # the third waits in the queue and then runs, and every output equals its cold run.
    s = make_scheduler(sched_model_dir, max_running_requests=2)
    for rid, ids in PROMPTS.items():
        submit(s, rid, ids, N_NEW)
    res: dict[str, dict] = {}
    finals: list[str] = []
    peak = 0
    waited = False
    for _ in range(200):
        if not s.has_work():
            break
        _record(s, res, finals)
        peak = max(peak, len(s.running))
        waited = waited or (len(s.running) == 2 and len(s.waiting) == 1)
        s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
    assert peak == 2 and waited
    assert sorted(finals) == sorted(PROMPTS)
    for rid in PROMPTS:
        assert res[rid]["ids"] == cold[rid], rid
        assert res[rid]["finish"]["type"] == "length", rid
    assert_idle(s)


def test_abort_in_the_last_step_finishes_as_abort(sched_model_dir: str, cold: dict[str, list[int]]) -> None:
    # vllm-project/vllm#29987: a request cancelled while its final step ran was completed by the
    # normal stop check (finish "length"), so the abort had no effect and its KV stayed pinned.
    # Aborted with one token left, the request ends with SGLang's running abort ("Aborted"),
    # its output a prefix of its cold run one token short, once, and its pages are freed.
    s = make_scheduler(sched_model_dir)
    submit(s, "a", PROMPTS["a"], N_NEW, stream=True)  # streamed: each step's token is seen
    submit(s, "c", PROMPTS["c"], N_NEW)
    res: dict[str, dict] = {}
    finals: list[str] = []
    while len(res.get("a", {}).get("ids", [])) < N_NEW - 1:
        _record(s, res, finals)
    assert res["a"]["finish"] is None
    s.abort_request("a")
    _run(s, res, finals)
    fin = res["a"]["finish"]
    assert fin["type"] == "abort" and fin["message"] == "Aborted", fin
    assert res["a"]["ids"] == cold["a"][: N_NEW - 1]
    assert finals.count("a") == 1
    assert res["c"]["ids"] == cold["c"] and res["c"]["finish"]["type"] == "length"
    assert_idle(s)


def test_an_abort_repeated_ends_the_request_once(sched_model_dir: str, cold: dict[str, list[int]]) -> None:
    # jundot/omlx#2512: the same request was aborted again on every poll, so its client got one
    # error frame per repeat and the abort count grew. Aborting a running and a queued request
    # three times each gives exactly one final message per request (no second free of their
    # pages: the ownership invariant holds and the pool ends idle), and the third request is cold.
    s = make_scheduler(sched_model_dir, max_running_requests=1)
    for rid, ids in PROMPTS.items():
        submit(s, rid, ids, N_NEW)
    res: dict[str, dict] = {}
    finals: list[str] = []
    _record(s, res, finals)  # "a" runs; "b" and "c" wait
    for _ in range(3):
        s.abort_request("a")
        s.abort_request("b")
        s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
        _record(s, res, finals)
    _run(s, res, finals)
    assert finals.count("a") == 1 and finals.count("b") == 1
    assert res["a"]["finish"]["message"] == "Aborted"
    assert res["b"]["finish"]["message"] == "Abort in waiting queue" and res["b"]["ids"] == []
    assert res["c"]["ids"] == cold["c"]
    assert_idle(s)


def test_request_reaching_the_end_of_the_pool_finishes_by_length(sched_model_dir: str) -> None:
    # vllm-project/vllm#50342: a request that reached the sequence limit mid-step got a negative
    # token count and crashed the scheduler; it should end cleanly with finish "length". On a
    # one-page pool (256 tokens) a 250-token prompt asking for 50 tokens stops when prompt plus
    # output fill the pool (6 tokens: the pool size is the oracle), its tokens are the cold run's
    # of the same prompt asking for exactly those 6, and every page comes back.
    pool = PAGE
    prompt = random_ids(250, 264)
    s = make_scheduler(sched_model_dir, max_total_tokens=pool)
    assert s.max_total_num_tokens == pool
    submit(s, "edge", prompt, 50)
    res = drain(s)
    assert res["edge"]["finish"]["type"] == "length"
    assert len(prompt) + len(res["edge"]["ids"]) == pool
    assert_idle(s)
    submit(s, "cold", prompt, pool - len(prompt))
    assert res["edge"]["ids"] == drain(s)["cold"]["ids"]
    assert_idle(s)


# --- the tokenizer manager and the HTTP routes (the scheduler never answers) ---------------------


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` over ``create_app`` (native routes only); the scheduler
    never answers."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("reliability26_app"), openai_routes=False) as pair:
        yield pair


def _headers() -> dict[str, str]:
    from admin_app_testutil import ADMIN_KEY

    return {"Authorization": f"Bearer {ADMIN_KEY}"}


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


def _abort_out(rid: str, message: str, status_code: int | None) -> BatchStrOut:
    """The detokenizer's final message of ``rid`` aborted by the scheduler with no token."""
    out = batch_str_out(rid, True)
    out.finished_reasons = [{"type": "abort", "message": message, "status_code": status_code}]
    out.output_strs, out.output_ids, out.completion_tokens = [""], [[]], [0]
    return out


async def _registered(tm: Any, rids: list[str]) -> None:
    """Wait until every rid in ``rids`` is in the tokenizer manager's in-flight table."""
    while not all(r in tm.rid_to_state for r in rids):
        await asyncio.sleep(0.005)


def test_parent_abort_of_n_samples_reaches_each_and_frees_all_state(
    app: tuple[Any, Any], sent: list[Any]
) -> None:
    # vllm-project/vllm#51629: aborting an n>1 request by its own id removed the children's state
    # but left the parent entry for the life of the engine. Aborting ``par`` (n=2, streaming)
    # sends one abort for each sample (``par_0``, ``par_1``, SGLang's child ids); once the
    # scheduler answers them the stream ends and neither a child nor the parent id is left.
    _, tm = app

    async def main() -> list[Any]:
        obj = GenerateReqInput(
            text="hi", sampling_params={"max_new_tokens": 5, "n": 2}, stream=True, rid="par"
        )
        got: list[Any] = []

        async def consume() -> None:
            async for out in tm.generate_request(obj):
                got.append(out)

        task = asyncio.create_task(consume())
        await _registered(tm, ["par_0", "par_1"])
        assert tm.parent_rids.children("par") == ["par_0", "par_1"]
        tm.abort_request("par")
        for rid in ("par_0", "par_1"):
            tm._handle_batch_output(_abort_out(rid, "Aborted", None))
        await asyncio.wait_for(task, 10)
        return got

    got = asyncio.run(main())
    assert sorted(_aborts(sent)) == ["par", "par_0", "par_1"]
    assert sorted(o["index"] for o in got) == [0, 1]
    assert all(o["meta_info"]["finish_reason"]["type"] == "abort" for o in got)
    assert not tm.rid_to_state and tm.parent_rids.children("par") == []


def test_one_sample_refused_aborts_its_siblings_at_once(app: tuple[Any, Any], sent: list[Any]) -> None:
    # vllm-project/vllm#53936: admission of an n>1 request must be all-or-nothing; a request whose
    # samples were admitted in part kept the admitted ones running. When the scheduler refuses one
    # sample (503 "The request queue is full."), the request fails with 503 and the other sample
    # is aborted at once, before it produced anything; nothing stays in flight.
    from sglang_v4.managers.tokenization import RequestError

    _, tm = app

    async def main() -> Exception:
        obj = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 5, "n": 2}, rid="half")

        async def refuse() -> None:
            await _registered(tm, ["half_0", "half_1"])
            tm._handle_batch_output(_abort_out("half_1", "The request queue is full.", 503))

        task = asyncio.create_task(refuse())
        try:
            async for _ in tm.generate_request(obj):
                pass
        except RequestError as e:
            return e
        finally:
            await task
        raise AssertionError("a request with a refused sample did not fail")

    err = asyncio.run(asyncio.wait_for(main(), 10))
    assert getattr(err, "status_code", None) == 503 and "queue is full" in str(err)
    assert _aborts(sent) == ["half_0"]
    assert not tm.rid_to_state


def test_reused_rid_does_not_take_the_given_up_requests_abort(app: tuple[Any, Any], sent: list[Any]) -> None:
    # smg-project/smg#2426: a late scheduler abort for a request id could abort the new request
    # that reused the id. A stream given up (closed) under rid ``reuse`` sends its abort; a new
    # request under the same rid waits until the old request's final abort arrives, then gets
    # its own output (finish "length"), never the stale abort.
    _, tm = app

    async def main() -> list[Any]:
        first = tm.generate_request(
            GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 5}, stream=True, rid="reuse")
        )
        step = asyncio.ensure_future(first.__anext__())
        await _registered(tm, ["reuse"])
        tm._handle_batch_output(batch_str_out("reuse", False))
        await step
        await first.aclose()  # the client went away: its abort is on its way
        assert _aborts(sent) == ["reuse"] and "reuse" not in tm.rid_to_state
        second = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 1}, rid="reuse")
        got: list[Any] = []

        async def run_second() -> None:
            async for out in tm.generate_request(second):
                got.append(out)

        task = asyncio.create_task(run_second())
        await asyncio.sleep(0.05)
        assert "reuse" not in tm.rid_to_state  # held until the old request's last output
        tm._handle_batch_output(_abort_out("reuse", "Aborted", None))  # the stale abort
        await _registered(tm, ["reuse"])
        tm._handle_batch_output(batch_str_out("reuse", True))
        await asyncio.wait_for(task, 10)
        return got

    got = asyncio.run(asyncio.wait_for(main(), 40))
    assert len(got) == 1 and got[0]["meta_info"]["finish_reason"] == {"type": "length", "length": 1}
    assert got[0]["text"] == "x"
    assert not tm.rid_to_state


class _GoneClient:
    """A Starlette request stand-in whose client has disconnected."""

    async def is_disconnected(self) -> bool:
        return True


def test_non_streaming_request_of_a_gone_client_is_aborted(app: tuple[Any, Any], sent: list[Any]) -> None:
    # maiphucgiang/codebuddy2api#22 (and BerriAI/litellm#37140): a non-streaming request whose
    # client hung up kept its slot until the backend finished an answer nobody read. The
    # tokenizer manager notices the disconnect while it waits, sends one abort for the request,
    # ends it with 499 and leaves nothing in flight.
    from sglang_v4.managers.tokenization import RequestError

    _, tm = app

    async def main() -> Exception:
        obj = GenerateReqInput(text="hi", sampling_params={"max_new_tokens": 5}, rid="gone")
        try:
            async for _ in tm.generate_request(obj, _GoneClient()):
                pass
        except RequestError as e:
            return e
        raise AssertionError("the request of a gone client was not ended")

    err = asyncio.run(asyncio.wait_for(main(), 10))
    assert getattr(err, "status_code", None) == 499
    assert _aborts(sent) == ["gone"]
    assert not tm.rid_to_state


@pytest.mark.parametrize("ids,pos,tok", [([-1], 0, -1), ([5, 6, -7], 2, -7), ([2**40], 0, 2**40)])
def test_token_ids_outside_the_vocabulary_are_a_400(
    app: tuple[Any, Any], sent: list[Any], ids: list[int], pos: int, tok: int
) -> None:
    # vllm-project/vllm#51795: validation checked only the upper bound, so a negative token id
    # passed to the model as an index. A negative or huge id in ``input_ids`` is a 400 in
    # SGLang's error shape naming the id and its position; nothing reaches the scheduler.
    client, tm = app
    r = client.post(
        "/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": 2}}, headers=_headers()
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and f"Token id {tok} at position {pos}" in err["message"]
    assert sent == [] and not tm.rid_to_state


@pytest.mark.parametrize("max_new_tokens", [None, 10])
def test_over_long_prompt_error_states_input_and_context_lengths(
    app: tuple[Any, Any], sent: list[Any], max_new_tokens: int | None
) -> None:
    # vllm-project/vllm#36789: a prompt longer than the context gave a confusing
    # "max_tokens must be at least 1, got -7584" instead of naming the input and context lengths
    # (the PR's expected text: "Input length (11680) exceeds model's maximum context length
    # (4096)"). A 4100-token prompt on a 4096-token context is a 400 that states both numbers and
    # no negative token count, with or without max_new_tokens; nothing reaches the scheduler.
    from admin_app_testutil import ADMIN_CONTEXT

    client, tm = app
    n = ADMIN_CONTEXT + 4
    sp = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    r = client.post("/generate", json={"input_ids": [5] * n, "sampling_params": sp}, headers=_headers())
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert f"({n} tokens)" in msg and f"({ADMIN_CONTEXT} tokens)" in msg
    assert "-" + str(n - ADMIN_CONTEXT) not in msg and "at least 1" not in msg
    assert sent == [] and not tm.rid_to_state


def test_large_body_passes_the_size_limit_and_an_oversized_one_is_413(
    app: tuple[Any, Any], sent: list[Any]
) -> None:
    # ggml-org/llama.cpp#4500: completion requests above 8 KB were refused with 413 Payload Too
    # Large, so long contexts could not be sent. A 2 MiB body passes the size gate (it reaches
    # validation: a 400 naming its bad field), while a declared body above the limit is refused
    # with 413 (RFC 9110 15.5.14) in SGLang's error shape before it is read.
    from sglang_v4.entrypoints.admission import AdmissionLimits

    client, tm = app
    big = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": "x"}, "pad": "x" * (2 * 1024 * 1024)}
    r = client.post("/generate", json=big, headers=_headers())
    assert r.status_code == 400 and "max_new_tokens" in r.json()["error"]["message"], r.text
    limit = AdmissionLimits.from_env().max_body_bytes
    assert limit >= 2 * 1024 * 1024
    headers = {**_headers(), "Content-Type": "application/json", "Content-Length": str(limit + 1)}
    r = client.post("/generate", content=b"{}", headers=headers)
    assert r.status_code == 413, r.text
    err = r.json()["error"]
    assert err["code"] == 413 and str(limit) in err["message"]
    assert sent == [] and not tm.rid_to_state


def test_abort_mid_chunked_prefill_with_prompt_logprobs_frees_everything(
    sched_model_dir: str, cold: dict[str, list[int]]
) -> None:
    # vllm-project/vllm#14875 (review): requests aborted during a partial (chunked) prefill with
    # prompt logprobs leaked what was held for them. With 256-token chunks, a 700-token prompt
    # asking for prompt logprobs from its first token is aborted after its first chunk: it ends
    # with SGLang's running abort and no output token, every page and slot comes back, and the
    # request beside it gives its cold output.
    s = make_scheduler(sched_model_dir, chunked_prefill_size=PAGE)
    submit(s, "long", random_ids(700, 265), N_NEW, return_logprob=True, logprob_start_len=0)
    submit(s, "c", PROMPTS["c"], N_NEW)
    res: dict[str, dict] = {}
    finals: list[str] = []
    _record(s, res, finals)
    victim = next(r for r in s.running if r.rid == "long")
    assert 0 < victim.scheduled_len < 700  # in the middle of its prefill
    s.abort_request("long")
    s.cache_manager.check_integrity(list(s.running) + list(s.waiting))
    _run(s, res, finals)
    fin = res["long"]["finish"]
    assert fin["type"] == "abort" and fin["message"] == "Aborted", fin
    assert res["long"]["ids"] == [] and finals.count("long") == 1
    assert res["c"]["ids"] == cold["c"]
    assert_idle(s)
