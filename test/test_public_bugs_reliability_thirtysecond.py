"""Public bug reports on serving reliability (round 32): one request with sampling params the
model cannot serve (a ``logit_bias`` key or a stop id past the vocabulary, a NaN temperature, a
seed past the int64 range) reaching the scheduler beside good ones, and the liveness and
readiness probes answered while requests are in flight and the backend is busy.

In-process only: schedulers on the shared ``sched_model_dir`` checkpoint (CPU, fp32, 256-token
pages) driven step by step, and ``http_server.create_app`` over a tokenizer manager whose
scheduler reads and never answers (``admin_app_testutil``), driven as a raw ASGI app by clients
that stay connected, so a request can stay in flight while the probes are asked. Oracles: each good
request's cold run alone, the pool and slot counts back to idle (``assert_idle``), the documented
ranges of the sampling params (OpenAI's ``logit_bias`` ids of the vocabulary, int64 seeds,
finite temperatures) and the probes' documented answer (200 while the server serves).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_KEY, admin_app_client
from asgi_testutil import json_post_scope
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, cold_output_ids, collect_outputs, drain, make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

pytestmark = pytest.mark.timeout(120)

GOOD = random_ids(40, 3201)
N_NEW = 5

#: sampling params outside the model's documented ranges, and the field each error must name
BAD_PARAMS = {
    "logit_bias_past_vocab": ({"logit_bias": {"999999": 5.0}}, "logit_bias"),
    "stop_id_past_vocab": ({"stop_token_ids": [2**40]}, "stop_token_ids"),
    "nan_temperature": ({"temperature": float("nan")}, "temperature"),
    "seed_past_int64": ({"sampling_seed": 2**70}, "sampling_seed"),
}


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    """One scheduler for the module (each test leaves it idle and flushed)."""
    return make_scheduler(sched_model_dir)


@pytest.fixture(scope="module")
def cold(sched: Scheduler) -> list[int]:
    """The good prompt's greedy output run alone on a flushed cache (the cold-run oracle)."""
    return cold_output_ids(sched, "cold", GOOD, N_NEW)


@pytest.mark.parametrize("case", list(BAD_PARAMS))
def test_antgroup_sglang_31_one_bad_request_is_refused_alone_and_the_batch_goes_on(
    sched: Scheduler, cold: list[int], case: str
) -> None:
    """antgroup/sglang#31: an unexpected error while admitting or running one request (a
    malformed payload) took the whole scheduler down, failing every request in flight; expected:
    only that request ends with an error, the server goes on. Here a request whose sampling
    params the tokenizer manager would have refused reaches the scheduler while a good one is
    mid-decode (before the fix a ``logit_bias`` key past the vocabulary raised ``IndexError`` in
    the batch's sampling step, ending both). Expected: the bad one finishes with a 400 abort
    naming the field and no token, the good one's tokens equal its cold run, and nothing is left
    in use."""
    s = sched
    submit(s, "good", GOOD, N_NEW)
    res: dict[str, dict] = {}
    for _ in range(50):  # until the good request is decoding
        collect_outputs(s.step(), res)
        if res.get("good", {}).get("ids"):
            break
    assert res["good"]["finish"] is None and res["good"]["ids"], res
    params, field = BAD_PARAMS[case]
    submit(s, "bad", random_ids(30, 3202), N_NEW, sampling=params)
    for _ in range(200):
        if not s.has_work():
            break
        collect_outputs(s.step(), res)
    assert res["good"]["ids"] == cold
    assert res["good"]["finish"]["type"] == "length"
    bad = res["bad"]
    assert bad["ids"] == []
    assert bad["finish"]["type"] == "abort" and bad["finish"]["status_code"] == 400, bad["finish"]
    assert field in bad["finish"]["message"], bad["finish"]
    assert_idle(s)
    # the scheduler still serves: the same good prompt again gives the cold run
    submit(s, "again", GOOD, N_NEW)
    assert drain(s)["again"]["ids"] == cold
    assert_idle(s)


async def _asgi(app: Any, method: str, path: str, body: bytes = b"") -> int:
    """Play one HTTP request against the ASGI ``app`` as a client that stays connected
    (``receive`` gives ``body`` once, then waits forever); the response's status code."""
    scope = json_post_scope(path)
    scope["method"] = method
    scope["headers"] = [*scope["headers"], (b"authorization", f"Bearer {ADMIN_KEY}".encode())]
    sent = False
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never goes away
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


def test_lightllm_1432_llamacpp_9056_probes_answer_200_while_requests_are_in_flight(tmp_path: Path) -> None:
    """ModelTC/LightLLM#1432: ``/health`` answered 503 for the whole of a long prefill that came
    after an idle spell, so load balancers took a serving instance out. ggml-org/llama.cpp#9056:
    ``/health`` timed out while the server was busy with a long task and the container was
    restarted. Expected (SGLang's and vLLM's probe contract): the liveness and readiness probes
    answer 200 at once while the server serves, however long its in-flight requests take. Here
    three ``/generate`` requests stay in flight (the scheduler never answers); ``/health``,
    ``/ready`` and ``/ping``, GET and HEAD, each answer 200 within a second, and the in-flight requests are still waiting after."""
    with admin_app_client(tmp_path, openai_routes=False) as (client, tm):
        app = client.app

        async def main() -> None:
            rids = [f"busy-{i}" for i in range(3)]
            tasks = [
                asyncio.create_task(
                    _asgi(
                        app,
                        "POST",
                        "/generate",
                        json.dumps(
                            {"text": "a long prompt", "sampling_params": {"max_new_tokens": 64}, "rid": r}
                        ).encode(),
                    )
                )
                for r in rids
            ]
            while not all(r in tm.rid_to_state for r in rids):
                assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
                await asyncio.sleep(0.005)
            for probe in ("/health", "/ready", "/ping"):
                for method in ("GET", "HEAD"):
                    code = await asyncio.wait_for(_asgi(app, method, probe), 1.0)
                    assert code == 200, (method, probe, code)
            assert not any(t.done() for t in tasks)
            assert all(r in tm.rid_to_state for r in rids)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(asyncio.wait_for(main(), 20))
