"""Public bug reports of SGLang's offline ``Engine``, replayed against ``sglang_v4.Engine`` on the
embedded model (real scheduler, CPU, ``context_length=1024``, ``allow_auto_truncate=True``).

* ``allow_auto_truncate=True`` still raised "The input (N tokens) is longer than the model's
  context length" (sgl-project/sglang#8096). Oracle: the same request on the prompt's first
  ``context_length - 1`` tokens.
* Calling the synchronous ``generate`` and ``async_generate`` in the same ``async`` function
  failed with an event-loop error (sgl-project/sglang#6605). Oracle: the same calls outside any
  event loop.
* Streamed output logprobs of concurrent long decodes were re-sent or misaligned
  (sgl-project/sglang#17005). Oracle: the non-streamed run of each prompt.
* ``SGLANG_HEALTH_CHECK_TIMEOUT`` (SGLang's ``/health_generate`` wait, raised by operators whose
  long prefills outlast 20 s, sgl-project/sglang#22511) was not read; checked on a FakeScheduler
  server whose step hangs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dsv4_testutil import random_ids

pytestmark = pytest.mark.timeout(300)

CONTEXT = 1024
GREEDY = {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(default_model_dir: str) -> Iterator[Any]:
    from sglang_v4 import Engine

    with Engine(
        model_path=default_model_dir,
        device="cpu",
        context_length=CONTEXT,
        allow_auto_truncate=True,
        skip_warmup=True,
    ) as eng:
        yield eng


def test_auto_truncate_cuts_a_long_prompt_instead_of_raising(engine: Any, tok: Any) -> None:
    """sgl-project/sglang#8096: a prompt twice the context length with ``allow_auto_truncate``
    keeps its first ``context_length - 1`` tokens (the longest prompt that leaves room for one
    new token); ``max_new_tokens`` is cut to the room left. Token ids and text alike."""
    ids = random_ids(2 * CONTEXT, 81)
    out = engine.generate(input_ids=ids, sampling_params=GREEDY)
    ref = engine.generate(input_ids=ids[: CONTEXT - 1], sampling_params=GREEDY)
    assert out["meta_info"]["prompt_tokens"] == CONTEXT - 1
    assert out["output_ids"] == ref["output_ids"] and len(out["output_ids"]) == 1
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 1}

    text = "hello world " * CONTEXT
    assert len(tok.encode(text, add_special_tokens=False)) > CONTEXT
    out = engine.generate(prompt=text, sampling_params=GREEDY)
    assert out["meta_info"]["prompt_tokens"] == CONTEXT - 1
    # a prompt that fits keeps its own budget
    short = engine.generate(input_ids=ids[:100], sampling_params=GREEDY)
    assert short["meta_info"]["prompt_tokens"] == 100 and len(short["output_ids"]) == 4


def test_generate_and_async_generate_in_one_async_function(engine: Any) -> None:
    """sgl-project/sglang#6605: ``engine.generate(...)`` then ``await engine.async_generate(...)``
    inside one coroutine run by ``asyncio.run`` (as in a notebook or an async server) gave an
    event-loop error; both return the outputs they return outside any loop, also for a batch."""
    prompts = ["The capital of France is", "One, two, three,"]
    want = engine.generate(prompt=prompts, sampling_params=GREEDY)

    async def main() -> tuple[Any, Any, Any]:
        sync = engine.generate(prompt=prompts, sampling_params=GREEDY)
        one = await engine.async_generate(prompt=prompts[0], sampling_params=GREEDY)
        batch = await engine.async_generate(prompt=prompts, sampling_params=GREEDY)
        return sync, one, batch

    sync, one, batch = asyncio.run(main())
    assert [o["output_ids"] for o in sync] == [o["output_ids"] for o in want]
    assert one["output_ids"] == want[0]["output_ids"]
    assert [o["output_ids"] for o in batch] == [o["output_ids"] for o in want]


def test_concurrent_streams_carry_each_logprob_once(engine: Any) -> None:
    """sgl-project/sglang#17005: logprobs of concurrent streamed decodes were re-sent or out of
    step with the tokens. Four concurrent ``async_generate(stream=True, return_logprob=True)``
    of 24 tokens: each chunk's cumulative ``output_token_logprobs`` extends the previous one by
    exactly its new tokens, their ids are the ``output_ids``, and the last chunk equals the
    non-streamed run (tokens and logprobs)."""
    prompts = [f"Story {i}: once upon a time" for i in range(4)]
    sp = {"max_new_tokens": 24, "temperature": 0, "ignore_eos": True}
    want = engine.generate(prompt=prompts, sampling_params=sp, return_logprob=True, top_logprobs_num=2)

    async def one(p: str) -> list[dict[str, Any]]:
        agen = await engine.async_generate(
            prompt=p, sampling_params=sp, stream=True, return_logprob=True, top_logprobs_num=2
        )
        return [chunk async for chunk in agen]

    async def main() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(one(p) for p in prompts))

    for chunks, ref in zip(asyncio.run(main()), want):
        prev: list[Any] = []
        for c in chunks:
            lps = c["meta_info"]["output_token_logprobs"]
            assert lps[: len(prev)] == prev
            assert [e[1] for e in lps] == c["output_ids"]
            assert len(c["meta_info"]["output_top_logprobs"]) == len(lps)
            prev = lps
        last = chunks[-1]
        assert last["output_ids"] == ref["output_ids"]
        got = [e[0] for e in last["meta_info"]["output_token_logprobs"]]
        exp = [e[0] for e in ref["meta_info"]["output_token_logprobs"]]
        assert got == pytest.approx(exp, abs=1e-4)


def test_health_check_timeout_is_read_from_sglang_env() -> None:
    """sgl-project/sglang#22511: operators whose long prefills outlast the 20 s ``/health_generate``
    probe raise SGLang's ``SGLANG_HEALTH_CHECK_TIMEOUT``; it was not read here (and reported as an
    unread SGLang variable). A positive finite number is the probe's wait in seconds; anything
    else keeps SGLang's default of 20 s."""
    from sglang_v4.managers.tokenizer_control_mixin import health_check_timeout_s
    from sglang_v4.server_args_compat import unread_sglang_env

    assert health_check_timeout_s({}) == 20.0
    assert health_check_timeout_s({"SGLANG_HEALTH_CHECK_TIMEOUT": "2.5"}) == 2.5
    for bad in ("0", "-3", "soon", "inf", "nan"):
        assert health_check_timeout_s({"SGLANG_HEALTH_CHECK_TIMEOUT": bad}) == 20.0
    assert unread_sglang_env({"SGLANG_HEALTH_CHECK_TIMEOUT": "60"}) == []


@pytest.mark.slow
def test_health_check_timeout_bounds_the_probe_of_a_hung_server(tmp_path: Path) -> None:
    """With ``SGLANG_HEALTH_CHECK_TIMEOUT=1``, a scheduler stuck in a step (FakeScheduler's
    ``FAKE_HANG_ON_TEXT``) turns ``/health_generate`` to 503 after about 1 s, not 20 s (a server
    started and stopped: ~12 s, so the slow tier)."""
    import threading
    import time

    import requests
    from server_fixture import fake_env, make_fake_model_dir, start_server

    env = fake_env({"FAKE_HANG_ON_TEXT": "HANG-NOW", "SGLANG_HEALTH_CHECK_TIMEOUT": "1"})
    args = ["--model-path", str(make_fake_model_dir(tmp_path)), "--graceful-shutdown-timeout", "0"]
    h = start_server(args, env, tmp_path / "server.log")
    try:
        assert requests.get(h.url + "/health_generate", timeout=30).status_code == 200

        def hang() -> None:
            try:
                requests.post(h.url + "/generate", json={"text": "HANG-NOW"}, timeout=30)
            except requests.RequestException:
                pass

        threading.Thread(target=hang, daemon=True).start()
        time.sleep(1.0)
        t0 = time.monotonic()
        r = requests.get(h.url + "/health_generate", timeout=30)
        assert r.status_code == 503, r.text
        assert time.monotonic() - t0 < 8
    finally:
        h.stop()
