"""Public bug reports of SGLang's native API, offline ``Engine`` and frontend language, replayed
against sglang-v4.

The engine and the server run the real processes with the model-free FakeScheduler
(``server_fixture``): the expected texts come from ``transformers.AutoTokenizer`` on the same
tokenizer files, the expected shapes from SGLang's answers (its ``FINISH_ABORT.to_json()``, its
``get_model_info`` fields). The scheduler-level case runs the real scheduler in process on a small
random checkpoint, its oracle a cold run of the same prompt.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import (
    fake_output_text,
    hf_auto_tokenizer,
)

pytestmark = pytest.mark.timeout(240)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted


@pytest.fixture(scope="module")
def model(shared_fake_model_dir: Path) -> Path:
    """The model directory of conftest's ``held_fake_server`` and ``shared_fake_engine``."""
    return shared_fake_model_dir


@pytest.fixture(scope="module")
def engine(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on :func:`model` (``[hold]`` prompts held)."""
    return shared_fake_engine


@pytest.fixture(scope="module")
def server(held_fake_server: Any) -> Any:
    """conftest's session fake-model server on :func:`model` (``[hold]`` prompts held)."""
    return held_fake_server


def _wait_running(server: Any, n: int = 1) -> None:
    deadline = time.time() + 30
    while requests.get(server.url + "/server_info", timeout=10).json()["num_running_reqs"] < n:
        assert time.time() < deadline
        time.sleep(0.05)


@pytest.fixture(scope="module")
def expected() -> Any:
    tok = hf_auto_tokenizer()
    return lambda n: fake_output_text(tok, n)


def _foreign_tasks(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Have ``loop`` record each task created on it that does not run a coroutine (an async
    generator's ``aclose()`` scheduled by its finalizer runs an ``async_generator_athrow``);
    returns the list the names are appended to."""
    foreign: list[str] = []

    def factory(lp: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        if not inspect.iscoroutine(coro):
            foreign.append(type(coro).__name__)
        return asyncio.Task(coro, loop=lp, **kw)

    loop.set_task_factory(factory)
    return foreign


def test_engine_requests_leave_nothing_on_the_callers_event_loop(engine, expected) -> None:
    """sgl-project/sglang#5162 and #1606 (``Engine.generate``, then
    ``get_event_loop().run_until_complete(engine.async_generate(...))``, then
    ``asyncio.run(engine.async_generate(...))`` in one script): every call answers, and nothing of
    the engine's request streams is left on the caller's loop. Before, a non-streaming request's
    stream was first stepped on the caller's thread, so Python bound it to the caller's loop: once
    garbage-collected, its ``aclose()`` became a task of that loop, reported as "Task was destroyed
    but it is pending!" when the loop went away without running it."""
    sp = {"max_new_tokens": 3}
    assert engine.generate("1+1=", sp)["text"] == expected(3)
    loop = asyncio.new_event_loop()
    foreign = _foreign_tasks(loop)
    try:
        out = loop.run_until_complete(engine.async_generate("1+1=", sp))
        assert out["text"] == expected(3)
        batch = loop.run_until_complete(engine.async_generate(["a", "b"], sp))
        assert [o["text"] for o in batch] == [expected(3)] * 2

        async def notebook_cell() -> str:  # the blocking call from inside a running loop (Jupyter)
            return engine.generate("1+1=", sp)["text"]

        assert loop.run_until_complete(notebook_cell()) == expected(3)
        gc.collect()
        loop.run_until_complete(asyncio.sleep(0.05))  # runs what a finalizer scheduled on the loop
        assert foreign == []
        assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
    finally:
        loop.close()
    assert asyncio.run(engine.async_generate("1+1=", sp))["text"] == expected(3)
    assert engine.tokenizer_manager.rid_to_state == {}


def test_engine_get_model_info_is_the_routes_answer(engine, model: Path, plain_fake_server) -> None:
    """SGLang's ``Engine.get_model_info()`` (RL frameworks read the served model and weight version
    from it; before, ``AttributeError``): the same fields as ``/get_model_info``, describing the
    model directory the engine was started on (its ``config.json`` read here)."""
    info = engine.get_model_info()
    config = json.loads((model / "config.json").read_text())
    assert info["model_path"] == str(model)
    assert info["is_generation"] is True
    assert info["weight_version"] == "default"
    assert info["model_type"] == config["model_type"]
    assert info["architectures"] == config["architectures"]
    assert info["vocab_size"] == config["vocab_size"]
    route = requests.get(plain_fake_server.url + "/get_model_info", timeout=10).json()
    assert set(info) == set(route)


@pytest.mark.parametrize("stream", [False, True])
def test_abort_finish_reason_has_sglangs_keys(server, stream: bool) -> None:
    """sgl-project/sglang#5963 / #6184 (RL rollouts abort over-sampled requests by rid and read
    the abort back from ``meta_info.finish_reason``): the answer of a request aborted through
    ``/abort_request`` is SGLang's ``FINISH_ABORT.to_json()``, every key present:
    ``{"type": "abort", "message", "status_code": None, "err_type": None}`` (no HTTP status: the
    abort was asked for). Before, ``status_code`` and ``err_type`` were missing (``KeyError`` in a
    client reading them)."""
    rid = f"abort-keys-{stream}"
    got: dict[str, Any] = {}

    def run() -> None:
        body = {"text": f"{HOLD} abort me", "rid": rid, "sampling_params": {"max_new_tokens": 400}}
        r = requests.post(server.url + "/generate", json={**body, "stream": stream}, timeout=60)
        if stream:
            events = [ln[len("data: ") :] for ln in r.text.splitlines() if ln.startswith("data: ")]
            assert events[-1] == "[DONE]"
            got["out"] = json.loads(events[-2])
        else:
            got["out"] = r.json()

    t = threading.Thread(target=run)
    t.start()
    _wait_running(server)
    assert requests.post(server.url + "/abort_request", json={"rid": rid}, timeout=10).status_code == 200
    t.join(30)
    reason = got["out"]["meta_info"]["finish_reason"]
    assert set(reason) == {"type", "message", "status_code", "err_type"}, reason
    assert reason["type"] == "abort" and isinstance(reason["message"], str)
    assert reason["status_code"] is None and reason["err_type"] is None


def test_client_rid_with_the_health_probe_prefix_is_an_ordinary_request(sched_model_dir: str) -> None:
    """A client's ``rid`` that starts with ``HEALTH_CHECK`` (the prefix of ``/health_generate``'s
    probe rids, SGLang's) reaching a busy scheduler: before, the scheduler took it for the probe
    and answered it at once with no token (``{"type": "length", "length": 0}``, empty text), a
    silent wrong answer. The probe is now told by a flag only the tokenizer manager sets; the
    client's request is queued and gets its tokens, the same as its cold run (the oracle)."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import drain, make_scheduler, run_one, submit

    ids = random_ids(12, 3)
    cold = run_one(make_scheduler(sched_model_dir), "cold", ids, 4)["ids"]
    s = make_scheduler(sched_model_dir, max_running_requests=1)
    submit(s, "long", random_ids(40, 7), 12)
    s.step()
    submit(s, "HEALTH_CHECK_my_request", ids, 4)
    got = drain(s)["HEALTH_CHECK_my_request"]
    assert got["ids"] == cold
    assert got["finish"] == {"type": "length", "length": 4}


def _num_running(server: Any) -> int:
    return int(requests.get(server.url + "/server_info", timeout=10).json()["num_running_reqs"])


def test_empty_rid_means_no_rid(server, expected) -> None:
    """A client that always sends ``"rid": ""`` (a typed client's empty default): before,
    concurrent requests refused each other (400 ``Duplicate request id ''``) and such a request
    could not be aborted (an empty rid aborts nothing), so one whose client went away ran on.
    As SGLang reads an empty ``extra_key`` / ``cache_salt``, an empty rid now means none: every
    request gets its own id, answers, and is aborted when its stream is closed."""
    body = {"text": "a", "rid": "", "sampling_params": {"max_new_tokens": 6}}
    outs: list[requests.Response] = []
    threads = [
        threading.Thread(
            target=lambda: outs.append(requests.post(server.url + "/generate", json=body, timeout=60))
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.status_code for r in outs] == [200] * 3, [r.text for r in outs]
    assert [r.json()["text"] for r in outs] == [expected(6)] * 3
    ids = [r.json()["meta_info"]["id"] for r in outs]
    batch = requests.post(
        server.url + "/generate", json={**body, "text": ["a", "b"], "rid": ["", "mine"]}, timeout=60
    ).json()
    ids += [o["meta_info"]["id"] for o in batch]
    assert batch[1]["meta_info"]["id"] == "mine"
    assert all(ids) and len(set(ids)) == len(ids), ids

    held = {
        "text": f"{HOLD} empty rid",
        "rid": "",
        "sampling_params": {"max_new_tokens": 400},
        "stream": True,
    }
    with requests.post(server.url + "/generate", json=held, stream=True, timeout=60) as r:
        lines = r.iter_lines()  # kept referenced: a dropped generator closes the connection
        assert next(line for line in lines if line).startswith(b"data: ")
        _wait_running(server)
    deadline = time.time() + 20  # the closed stream aborts the held request
    while _num_running(server) > 0:
        assert time.time() < deadline, "the request of the closed stream is still running"
        time.sleep(0.05)


def test_prompt_logprobs_first_entry_is_none_for_every_start(sched_model_dir: str) -> None:
    """SGLang's prompt-logprob shape (``[None] + input_token_logprobs[:-1]``): from
    ``logprob_start_len = s`` one entry per prompt token ``s .. L - 1``, token ``s``'s value (and
    its top / token-id logprobs) ``None`` for every ``s``, not only ``s == 0``. Before, ``s > 0``
    gave token ``s`` its value. Oracle: the cold run of the same prompt from position 0; checked on a
    cold cache, a cached prefix (the hit may now cover ``s`` tokens) and chunked prefill."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import make_scheduler, submit

    ids = random_ids(300, seed=5)
    kw = dict(return_logprob=True, top_logprobs_num=2, token_ids_logprob=[3, 7])
    s = make_scheduler(sched_model_dir, max_total_tokens=8 * 256, chunked_prefill_size=64)

    def run(rid: str, start: int) -> tuple[list, list, list]:
        res: dict[str, list] = {"v": [], "i": [], "t": [], "x": []}
        submit(s, rid, ids, 1, logprob_start_len=start, **kw)
        while s.has_work():
            out = s.step()
            for k, r in enumerate(out.rids if out else []):
                if r == rid:
                    res["v"] += out.input_token_logprobs_val[k]
                    res["i"] += out.input_token_logprobs_idx[k]
                    res["t"] += out.input_top_logprobs_val[k]
                    res["x"] += out.input_token_ids_logprobs_val[k]
        return res["v"], res["i"], list(zip(res["t"], res["x"]))

    assert s.flush_cache()
    cold, cold_ids, _ = run("cold", 0)
    assert cold_ids == ids and cold[0] is None and None not in cold[1:]
    for start in (1, 5, 256, 257, 299):
        for warm in (False, True):  # warm: the first 256-token block is cached
            if not warm:
                assert s.flush_cache()
            vals, got_ids, extra = run(f"s{start}{warm}", start)
            assert got_ids == ids[start:], start
            assert vals[0] is None and extra[0] == (None, None), (start, warm)
            assert vals[1:] == pytest.approx(cold[start + 1 :], abs=1e-4), (start, warm)
            assert all(t is not None and x is not None for t, x in extra[1:]), (start, warm)


def test_engine_flush_cache_returns_sglangs_object(engine) -> None:
    """SGLang's ``Engine.flush_cache()`` returns ``FlushCacheReqOutput`` (``.success``,
    ``.message``); ours returned a bool. Truthiness stays ``success``."""
    ret = engine.flush_cache()
    assert (ret.success, ret.message) == (True, "") and bool(ret) is True


def test_flush_cache_refused_answers_as_sglang(server) -> None:
    """While a request holds KV SGLang answers ``/flush_cache`` 400 with body
    ``"Flush cache failed.\\n"`` (no message from the scheduler), and after ``?timeout=T``
    ``"Timed out waiting for idle state."``; ours sent its own sentence."""
    box: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: box.update(
            r=requests.post(
                server.url + "/generate",
                json={"text": HOLD + " flush", "sampling_params": {"max_new_tokens": 4}},
                timeout=60,
            )
        )
    )
    t.start()
    try:
        _wait_running(server)
        r = requests.post(server.url + "/flush_cache", timeout=10)
        assert (r.status_code, r.text) == (400, "Flush cache failed.\n")
        r = requests.post(server.url + "/flush_cache?timeout=0.2", timeout=10)
        assert (r.status_code, r.text) == (400, "Timed out waiting for idle state.")
    finally:
        requests.post(server.url + "/abort_request", json={"abort_all": True}, timeout=10)
        t.join(60)
    r = requests.post(server.url + "/flush_cache", timeout=10)
    assert r.status_code == 200 and r.text.startswith("Cache flushed.")


def _think_end_count(ids: list[int], end: list[int]) -> int:
    """SGLang's rule, written out: tokens up to and including the first ``end`` run, else all."""
    for i in range(len(ids) - len(end) + 1):
        if ids[i : i + len(end)] == end:
            return i + len(end)
    return len(ids)


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_tokens_in_meta_info(server, stream: bool) -> None:
    """SGLang reports ``meta_info.reasoning_tokens`` in every ``/generate`` answer: with
    ``require_reasoning`` (and a reasoning parser, on by default) the output tokens up to and
    including ``</think>``, else 0. Ours had no such key and refused ``require_reasoning``.
    Oracle: the scripted output's ids from ``transformers`` and ``</think>``'s ids."""
    from server_fixture import FAKE_EOS, FAKE_SCRIPT, FAKE_SCRIPT_TAG

    tok = hf_auto_tokenizer()
    script = tok.encode(FAKE_SCRIPT) + [FAKE_EOS]
    end = tok.encode("</think>", add_special_tokens=False)
    url = server.url + "/generate"
    for require, n, want in ((True, 200, _think_end_count(script, end)), (True, 3, 3), (False, 200, 0)):
        body = {
            "text": FAKE_SCRIPT_TAG + " think",
            "sampling_params": {"max_new_tokens": n},
            "require_reasoning": require,
            "stream": stream,
        }
        r = requests.post(url, json=body, timeout=60, stream=stream)
        assert r.status_code == 200, r.text
        if stream:
            chunks = [
                json.loads(x[5:]) for x in r.iter_lines(decode_unicode=True) if x and x != "data: [DONE]"
            ]
            counts = [c["meta_info"]["reasoning_tokens"] for c in chunks]
            assert counts == sorted(counts), counts
            for c in chunks:  # each chunk: the count over the outputs so far
                ids = c["output_ids"]
                assert c["meta_info"]["reasoning_tokens"] == (_think_end_count(ids, end) if require else 0)
            out = chunks[-1]
        else:
            out = r.json()
        assert out["meta_info"]["reasoning_tokens"] == want, (require, n)
    r = requests.post(url, json={"text": "x", "require_reasoning": "yes"}, timeout=10)
    assert r.status_code == 400 and "require_reasoning" in r.text


def test_engine_generate_takes_require_reasoning(engine) -> None:
    """SGLang's ``Engine.generate(require_reasoning=True)`` counts ``meta_info.reasoning_tokens``;
    ours refused the keyword when true. The fake model never emits ``</think>`` unscripted, so
    every output token is a reasoning token."""
    out = engine.generate(prompt="hi", sampling_params={"max_new_tokens": 4}, require_reasoning=True)
    assert out["meta_info"]["reasoning_tokens"] == out["meta_info"]["completion_tokens"] == 4
    out = engine.generate(prompt="hi", sampling_params={"max_new_tokens": 4})
    assert out["meta_info"]["reasoning_tokens"] == 0


def test_v1_loads_has_sglangs_shape(server) -> None:
    """SGLang 0.5.23's ``GET /v1/loads`` (``v1_loads.py`` / ``LoadSnapshot.to_dict``) was a 404 here.
    Oracle: SGLang's key lists, and ``/server_info``'s counts of the same idle server."""
    core = {
        "timestamp", "dp_rank", "num_running_reqs", "num_waiting_reqs", "num_waiting_uncached_tokens",
        "num_used_tokens", "num_total_tokens", "num_active_tokens", "num_prealloc_ready_tokens",
        "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput",
        "cache_hit_rate", "utilization", "total_prefill_uncached_tokens", "total_prefill_busy_us",
        "decode_moments",
    }  # fmt: skip
    r = requests.get(server.url + "/v1/loads", timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    assert body["num_accelerators"] == 1 and len(body["loads"]) == 1
    load = body["loads"][0]
    assert set(load) == core | {"disaggregation", "queues"}
    assert load["dp_rank"] == 0 and load["num_running_reqs"] == 0 and load["disaggregation"]["mode"] == "null"
    info = requests.get(server.url + "/server_info", timeout=10).json()
    assert load["max_total_num_tokens"] == info["max_total_num_tokens"]
    only_core = requests.get(server.url + "/v1/loads?include=core", timeout=10).json()["loads"][0]
    assert set(only_core) == core
    assert requests.get(server.url + "/v1/loads?dp_rank=3", timeout=10).json()["loads"] == []
    bad = requests.get(server.url + "/v1/loads?include=nope", timeout=10)
    assert bad.status_code == 400 and "Invalid include sections" in bad.json()["detail"]
    prom = requests.get(server.url + "/v1/loads?format=prometheus", timeout=10)
    assert "# TYPE sglang_num_running_reqs gauge" in prom.text
    assert 'sglang_disagg_kv_transfer_latency_ms{dp_rank="0"} 0.0' in prom.text


def test_sglang_generate_fields_are_known(server) -> None:
    """Fields of SGLang 0.5.23's ``GenerateReqInput`` that a client may send with their defaults
    (``routed_experts_start_len: 0``, ``return_prompt_token_ids: false``) or as metadata
    (``routing_key``, ``custom_labels``) were a 400 "Unknown field"; they are accepted, and a
    feature this runtime lacks, set, is a 400 naming it."""
    url = server.url + "/generate"
    base = {"text": "hi", "sampling_params": {"max_new_tokens": 2}}
    extra = {
        "routing_key": "user-7",
        "custom_labels": {"team": "a"},
        "routed_experts_start_len": 0,
        "return_prompt_token_ids": False,
        "max_thinking_tokens": None,
        "return_flat_raw_top_logprobs": False,
    }
    r = requests.post(url, json={**base, **extra}, timeout=30)
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 2, r.text
    for name, value in (("max_thinking_tokens", 5), ("return_prompt_token_ids", True)):
        r = requests.post(url, json={**base, name: value}, timeout=30)
        assert r.status_code == 400 and name in r.json()["error"]["message"], r.text
