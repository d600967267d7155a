"""Public bug reports on the prefix cache and the scheduler, replayed here.

In-process scheduler (the ``sched_model_dir`` checkpoint), the oracle a cold run (after
``flush_cache``) of the same request:

* A radix-cache hit changed greedy outputs (sgl-project/sglang#34683, sgl-project/sglang#4175);
  prompt logprobs with a cached prefix crashed or were wrong (vllm-project/vllm#3251,
  vllm-project/vllm#8268) or depended on the order overlapping prompts came in
  (vllm-project/vllm#42019).
* The second turn of a conversation hit only the first turn's prompt, not its generated tokens
  (sgl-project/sglang#16521).

One real server on the embedded model (``--context-length 1024``, ``--enable-cache-report``):

* ``/flush_cache`` right after a request finished answered 400 until retried
  (sgl-project/sglang#21359).
* ``usage.prompt_tokens_details.cached_tokens`` counted the shared prompt ``n`` times with
  ``n > 1`` (sgl-project/sglang#12814, sgl-project/sglang#5525).
* A request whose prompt plus ``max_new_tokens`` is exactly the context length got fewer tokens
  than asked (sgl-project/sglang#33814); one token more is a 400 whose message gives the counts
  (vllm-project/vllm#36197).
* DeepSeek-V4 emitting ``<｜begin▁of▁sentence｜>`` mid-output leaked it into the text with the
  default ``skip_special_tokens`` (ai-dynamo/dynamo#8780).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, make_scheduler, run_one
from server_fixture import ServerHandle, sse_events

pytestmark = pytest.mark.timeout(300)

TOL = 1e-4
CONTEXT = 1024


def _max_diff(a: list[float | None], b: list[float | None]) -> float:
    assert len(a) == len(b)
    assert [x is None for x in a] == [x is None for x in b]
    return max((abs(x - y) for x, y in zip(a, b) if x is not None and y is not None), default=0.0)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str):  # noqa: ANN201 - a Scheduler
    return make_scheduler(sched_model_dir, max_total_tokens=32 * PAGE, chunked_prefill_size=2048)


@pytest.mark.parametrize(
    "sampling", [None, {"temperature": 0.8, "top_p": 0.9, "sampling_seed": 7}], ids=["greedy", "seeded"]
)
def test_warm_hit_equals_cold_with_prompt_logprobs(sched: Any, sampling: dict[str, Any] | None) -> None:
    """sgl-project/sglang#34683 / #4175 (a cache hit flipped greedy tokens) and
    vllm-project/vllm#3251 / #8268 (prompt logprobs with a cached prefix): the same request twice,
    the second one a radix hit (prompt logprobs from position 400 let 256 tokens match), gives the
    cold run's tokens, output logprobs and prompt logprobs; the prompt logprobs also equal those
    of a cold run from position 0 at the same positions (SGLang's ``None`` first entry aside)."""
    prompt = random_ids(600, 31)
    kw: dict[str, Any] = dict(
        return_logprob=True, logprob_start_len=400, top_logprobs_num=2, sampling=sampling
    )
    assert sched.flush_cache()
    cold = run_one(sched, "cold", prompt, 6, **kw)
    warm = run_one(sched, "warm", prompt, 6, **kw)
    assert (cold["cached"], warm["cached"]) == (0, 256)
    assert warm["ids"] == cold["ids"]
    assert _max_diff(warm["lp"], cold["lp"]) <= TOL
    assert len(warm["in_lp"]) == 600 - 400 and warm["in_lp"][0] is None
    assert _max_diff(warm["in_lp"], cold["in_lp"]) <= TOL
    assert sched.flush_cache()
    full = run_one(sched, "full", prompt, 1, return_logprob=True, logprob_start_len=0)
    assert _max_diff(warm["in_lp"][1:], full["in_lp"][401:]) <= TOL


def test_prompt_logprobs_do_not_depend_on_request_order(sched: Any) -> None:
    """vllm-project/vllm#42019: overlapping prompts sent in different orders got different prompt
    logprobs for the same tokens. Two prompts sharing 520 tokens, each with prompt logprobs from
    position 300 (inside the shared, cacheable part): either order gives each prompt its cold
    values."""
    shared = random_ids(520, 41)
    a, b = shared + random_ids(30, 42), shared + random_ids(45, 43)
    kw: dict[str, Any] = dict(return_logprob=True, logprob_start_len=300)
    cold = {}
    for name, ids in (("a", a), ("b", b)):
        assert sched.flush_cache()
        cold[name] = run_one(sched, name, ids, 3, **kw)
    for order in (("a", "b"), ("b", "a")):
        assert sched.flush_cache()
        got = {name: run_one(sched, name, {"a": a, "b": b}[name], 3, **kw) for name in order}
        assert got[order[1]]["cached"] == 256  # the second one is a hit (up to the logprob start)
        for name in order:
            assert got[name]["ids"] == cold[name]["ids"]
            assert _max_diff(got[name]["in_lp"], cold[name]["in_lp"]) <= TOL
    assert_idle(sched)


def test_next_turn_hits_the_previous_turns_generated_tokens(sched: Any) -> None:
    """sgl-project/sglang#16521: turn 2 = turn 1's prompt + its output + new text hit only the
    prompt. The KV of prompt + output (all but the last sampled token, whose KV is never
    computed) is cached, so the hit is that length rounded down to whole 256-token blocks; the
    output equals turn 2 run cold."""
    prompt = random_ids(600, 51)
    assert sched.flush_cache()
    turn1 = run_one(sched, "t1", prompt, 300)
    turn2 = prompt + turn1["ids"] + random_ids(20, 52)
    warm = run_one(sched, "t2", turn2, 5)
    assert warm["cached"] == (len(prompt) + len(turn1["ids"]) - 1) // PAGE * PAGE == 768
    assert sched.flush_cache()
    assert run_one(sched, "t2-cold", turn2, 5)["ids"] == warm["ids"]


# --- one real server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> ServerHandle:
    """The session's embedded-model server (conftest ``more_bugs_server``: ``--context-length
    1024 --enable-cache-report``); the tests that count cached tokens flush the cache first."""
    return more_bugs_server


def _post(server: ServerHandle, path: str, body: dict[str, Any]) -> Any:
    r = requests.post(server.url + path, json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_flush_cache_right_after_a_finished_request(server: ServerHandle) -> None:
    """sgl-project/sglang#21359: ``/flush_cache`` sent as soon as a ``/generate`` returned answered
    400 (the scheduler not idle yet) and succeeded only on retry. Each flush right after a
    non-streamed, a streamed and an OpenAI request succeeds, and the next identical request is
    cold again (``cached_tokens`` 0) with the same greedy output."""
    sp = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
    ids = random_ids(400, 61)
    first = None
    assert requests.post(server.url + "/flush_cache", timeout=30).status_code == 200  # a shared server
    for i in range(3):
        out = _post(server, "/generate", {"input_ids": ids, "sampling_params": sp})
        assert out["meta_info"]["cached_tokens"] == 0, i  # the flush before emptied the cache
        first = first or out["output_ids"]
        assert out["output_ids"] == first
        r = requests.post(server.url + "/flush_cache", timeout=30)
        assert r.status_code == 200, r.text
    with requests.post(
        server.url + "/generate", json={"input_ids": ids, "sampling_params": sp, "stream": True}, stream=True
    ) as r:
        assert sse_events(r)[-1] == "[DONE]"
    assert requests.post(server.url + "/flush_cache", timeout=30).status_code == 200
    body = {"model": "default", "prompt": ids, "max_tokens": 6, "temperature": 0, "stream": True}
    with requests.post(server.url + "/v1/completions", json=body, stream=True) as r:
        assert sse_events(r)[-1] == "[DONE]"
    assert requests.post(server.url + "/flush_cache", timeout=30).status_code == 200
    assert (
        _post(server, "/generate", {"input_ids": ids, "sampling_params": sp})["meta_info"]["cached_tokens"]
        == 0
    )


def test_cached_tokens_with_n_samples_count_the_prompt_once(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#12814: with ``n > 1`` the usage's ``cached_tokens`` was ``n`` times that
    of ``n = 1``, though the ``n`` samples share one prompt (``prompt_tokens`` counts it once).
    Oracle: a warm ``n = 1`` request of the same prompt (its usage), and the prompt's length from
    the tokenizer. sgl-project/sglang#5525 (``n = 4`` with ``max_new_tokens: 0`` on the native
    route): every sample reports the prompt's length and a hit no longer than it."""
    system = "You are a helpful assistant who answers in one short sentence. " * 30
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Say hi"}]
    assert requests.post(server.url + "/flush_cache", timeout=30).status_code == 200
    body = {"model": "default", "messages": msgs, "max_tokens": 3, "temperature": 0.7}
    _post(server, "/v1/chat/completions", body)  # warm the cache
    one = _post(server, "/v1/chat/completions", body)["usage"]
    assert 0 < one["prompt_tokens_details"]["cached_tokens"] < one["prompt_tokens"]
    for n in (2, 3):
        usage = _post(server, "/v1/chat/completions", {**body, "n": n})["usage"]
        assert usage["prompt_tokens"] == one["prompt_tokens"]
        assert usage["prompt_tokens_details"] == one["prompt_tokens_details"]
        assert usage["completion_tokens"] == 3 * n
        body_s = {**body, "n": n, "stream": True, "stream_options": {"include_usage": True}}
        with requests.post(server.url + "/v1/chat/completions", json=body_s, stream=True, timeout=120) as r:
            events = sse_events(r)
        assert events[-2]["usage"]["prompt_tokens_details"] == one["prompt_tokens_details"]

    text = system + "Say hi"
    length = len(tok.encode(text, add_special_tokens=False))
    native = _post(server, "/generate", {"text": text, "sampling_params": {"max_new_tokens": 0, "n": 4}})
    assert len(native) == 4
    for out in native:
        meta = out["meta_info"]
        assert meta["prompt_tokens"] in (length, length + 1)  # + BOS when the tokenizer adds it
        assert 0 <= meta["cached_tokens"] < meta["prompt_tokens"] and meta["cached_tokens"] % 256 == 0
        assert out["output_ids"] == [] and out["text"] == ""


def test_prompt_plus_max_new_tokens_at_the_context_length(server: ServerHandle) -> None:
    """sgl-project/sglang#33814: a prompt of ``context - 16`` tokens with ``max_new_tokens: 16``
    (exactly the context length) got 14 or 15 tokens. Here it gets 16 (``ignore_eos``); one
    prompt token more is a 400 in OpenAI's shape whose message gives the context length and the
    prompt / completion counts (vllm-project/vllm#36197: misleading context-length messages)."""
    sp = {"max_new_tokens": 16, "temperature": 0, "ignore_eos": True}
    for n in (CONTEXT - 17, CONTEXT - 16):
        out = _post(server, "/generate", {"input_ids": random_ids(n, 71), "sampling_params": sp})
        assert len(out["output_ids"]) == 16 and out["meta_info"]["finish_reason"]["type"] == "length"
    n = CONTEXT - 15
    r = requests.post(server.url + "/generate", json={"input_ids": random_ids(n, 71), "sampling_params": sp})
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert str(CONTEXT) in msg and f"{n} in the messages" in msg and "16 in the completion" in msg
    body = {"model": "default", "prompt": random_ids(n, 71), "max_tokens": 16}
    r = requests.post(server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == 400
    assert f"{n + 16} tokens" in r.json()["message"]
    # an unset max_tokens fills the room left, not the default
    out = _post(
        server,
        "/generate",
        {"input_ids": random_ids(CONTEXT - 5, 72), "sampling_params": {"ignore_eos": True}},
    )
    assert len(out["output_ids"]) == 5


@pytest.mark.parametrize("stream", [False, True])
def test_begin_of_sentence_emitted_mid_output(server: ServerHandle, tok: Any, stream: bool) -> None:
    """ai-dynamo/dynamo#8780: DeepSeek-V4 sometimes samples token 0 (``<｜begin▁of▁sentence｜>``)
    inside an answer; with the default ``skip_special_tokens`` (true, as in SGLang and vLLM) it
    must not reach the text. Forced with ``logit_bias``; oracle: the tokenizer's own decode of
    the returned ids, with and without skipping special tokens."""
    for skip in (None, True, False):
        sp: dict[str, Any] = {"max_new_tokens": 3, "temperature": 0, "logit_bias": {"0": 100}}
        if skip is not None:
            sp["skip_special_tokens"] = skip
        body: dict[str, Any] = {"text": "Hello", "sampling_params": sp, "stream": stream}
        if stream:
            with requests.post(server.url + "/generate", json=body, stream=True, timeout=120) as r:
                out = sse_events(r)[-2]
        else:
            out = _post(server, "/generate", body)
        assert out["output_ids"] == [0, 0, 0]
        want = tok.decode(out["output_ids"], skip_special_tokens=skip is not False)
        assert out["text"] == want and ("begin" in want) == (skip is False)

        chat = {"model": "default", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3}
        chat.update(temperature=0, logit_bias={"0": 100}, stream=stream)
        if skip is not None:
            chat["skip_special_tokens"] = skip
        if stream:
            with requests.post(server.url + "/v1/chat/completions", json=chat, stream=True, timeout=120) as r:
                events = sse_events(r)
            content = "".join(
                e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"]
            )
        else:
            content = _post(server, "/v1/chat/completions", chat)["choices"][0]["message"]["content"]
        assert content == want, json.dumps(chat)
