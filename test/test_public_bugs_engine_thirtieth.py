"""The thirtieth set of public bug reports on the offline ``Engine`` API: per-prompt
``sampling_params`` lists (their length and their being applied to the right prompt), a
``flush_cache`` next to a running request, and many concurrent ``async_generate`` calls, replayed
against sglang-v4.

Fixture: conftest's session ``shared_fake_engine`` (an ``Engine`` on the model-free
``server_fixture.FakeScheduler``: the fake model writes ``FAKE_TEXT``'s tokens over and over;
``[hold]`` prompts are held after their first token until aborted).
Oracles: ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer (``transformers``, independent of the
runtime's wrapper: ``fake_output_text``), the reports' stated behaviour (a ``sampling_params``
list whose length differs from the number of prompts is a ``ValueError`` naming the field, not a
silently shorter answer; ``flush_cache`` while a request holds KV answers ``success=False`` and
harms nothing; an idle engine flushes), and the request table and KV pool of the engine after
each request (empty: nothing leaked).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from engine_testutil import HELD, _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures
from server_fixture import fake_output_text

pytestmark = pytest.mark.timeout(240)


def _idle(engine: Any) -> None:
    """The engine's request table is empty and its KV pool holds no page."""
    assert not engine.tokenizer_manager.rid_to_state
    assert engine.get_server_info()["kv_pool"]["used_pages"] == 0


# --- sampling_params lists -----------------------------------------------------------------------


@pytest.mark.parametrize("field", ["prompt", "input_ids"])
@pytest.mark.parametrize("n_params", [1, 3])
def test_mlx_lm_1668_sampling_params_list_of_the_wrong_length_is_a_value_error(
    engine: Any, expected: Any, field: str, n_params: int
) -> None:
    """ml-explore/mlx-lm#1668 (a per-prompt limit list of another length than the prompt list was
    zipped with the prompts: trailing prompts were dropped or extra limits ignored, and fewer
    answers came back without an error). Expected: a batch of two prompts with a
    ``sampling_params`` list of 1 or 3 entries is refused with a ``ValueError`` naming
    ``sampling_params``, nothing is sent, and the engine serves on."""
    prompts: Any = ["Hi", "Hello"] if field == "prompt" else [[5, 6], [7, 8, 9]]
    params = [{"max_new_tokens": 2}] * n_params
    with pytest.raises(ValueError, match="sampling_params"):
        engine.generate(**{field: prompts}, sampling_params=params)

    async def _async() -> Any:
        return await engine.async_generate(**{field: prompts}, sampling_params=params)

    with pytest.raises(ValueError, match="sampling_params"):
        asyncio.run(_async())
    _assert_released(engine, expected)


def test_lmms_eval_1397_each_prompt_gets_its_own_sampling_params(engine: Any, hf: Any) -> None:
    """EvolvingLMMs-Lab/lmms-eval#1397 (a batch was generated with the first request's sampling
    params for every member: a member asking for other ``max_new_tokens`` / ``stop`` silently got
    the first one's). Expected: ``sampling_params[i]`` governs prompt ``i`` only; in a batch of
    three with ``max_new_tokens`` 1, 4 and 2 the answers are the fake model's first 1, 4 and 2
    tokens, in prompt order, for text and token-id prompts and with ``async_generate``."""
    params = [{"max_new_tokens": 1}, {"max_new_tokens": 4}, {"max_new_tokens": 2}]
    want = [fake_output_text(hf, n) for n in (1, 4, 2)]
    out = engine.generate(prompt=["a", "bb", "ccc"], sampling_params=params)
    assert [o["text"] for o in out] == want
    assert [o["meta_info"]["completion_tokens"] for o in out] == [1, 4, 2]
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [len(hf.encode(p)) for p in ("a", "bb", "ccc")]
    out = engine.generate(input_ids=[[5], [6, 7], [8, 9, 10]], sampling_params=params)
    assert [o["text"] for o in out] == want
    assert [o["meta_info"]["prompt_tokens"] for o in out] == [1, 2, 3]

    async def _async() -> Any:
        return await engine.async_generate(prompt=["a", "bb", "ccc"], sampling_params=params)

    assert [o["text"] for o in asyncio.run(_async())] == want
    _idle(engine)


# --- flush_cache ---------------------------------------------------------------------------------


def test_sglang_5241_flush_cache_on_an_idle_engine_succeeds(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#5241 and sgl-project/sglang#6009 (``Engine.flush_cache`` as an offline
    API: a call that returns the scheduler's answer, not a coroutine never awaited). Expected: on
    an idle engine that has served requests, ``flush_cache()`` answers ``success=True`` (truthy),
    a second call does too, and the same prompt afterwards gives the same (fake model's) text."""
    before = engine.generate(prompt="flush me", sampling_params={"max_new_tokens": 3})
    res = engine.flush_cache()
    assert not asyncio.iscoroutine(res)
    assert res.success and bool(res)
    assert engine.flush_cache().success
    after = engine.generate(prompt="flush me", sampling_params={"max_new_tokens": 3})
    assert before["text"] == after["text"] == expected(3)
    _idle(engine)


def test_miles_1585_flush_cache_next_to_a_running_request_refuses_and_harms_nothing(
    engine: Any, expected: Any
) -> None:
    """radixark/miles#1585 and ray-project/ray#63769 (SGLang's scheduler only flushes with no
    queued and no running request, otherwise it answers ``success=False`` and flushes nothing;
    after the running request is aborted a flush goes through). Expected: while a held request
    runs, ``flush_cache()`` answers ``success=False`` (falsy) and the held request keeps running; once it is aborted and gone, ``flush_cache()`` succeeds and the engine serves on with
    nothing leaked."""

    async def _scenario() -> tuple[Any, Any, Any]:
        task = asyncio.ensure_future(engine.async_generate(**HELD, stream=True))
        gen = await task
        first = await gen.__anext__()
        loop = asyncio.get_running_loop()
        busy = await loop.run_in_executor(None, engine.flush_cache)
        rids = list(engine.tokenizer_manager.rid_to_state)
        for rid in rids:
            engine.tokenizer_manager.abort_request(rid)
        rest = [c async for c in gen]
        return first, busy, rest

    first, busy, rest = asyncio.run(_scenario())
    assert first["text"]
    assert busy.success is False and not busy
    assert rest and rest[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    deadline = time.time() + 30
    while engine.tokenizer_manager.rid_to_state and time.time() < deadline:
        time.sleep(0.05)
    assert engine.flush_cache().success
    _assert_released(engine, expected)


# --- concurrent async_generate -------------------------------------------------------------------


def test_verl_2785_concurrent_async_generate_calls_all_answer(engine: Any, hf: Any) -> None:
    """verl-project/verl#2785 (many ``async_generate(input_ids=...)`` calls gathered on one event
    loop: each must be its own request, answered in full). Expected: twelve concurrent calls with
    distinct token-id prompts and ``max_new_tokens`` 1..12 each answer the fake model's first
    ``k`` tokens with ``prompt_tokens`` equal to their own prompt's length, and nothing is left
    in the request table or KV pool."""

    async def _gather() -> list[Any]:
        return await asyncio.gather(
            *(
                engine.async_generate(
                    input_ids=list(range(10, 10 + k)), sampling_params={"max_new_tokens": k}
                )
                for k in range(1, 13)
            )
        )

    outs = asyncio.run(_gather())
    assert [o["text"] for o in outs] == [fake_output_text(hf, k) for k in range(1, 13)]
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == list(range(1, 13))
    assert len({o["meta_info"]["id"] for o in outs}) == 12
    _idle(engine)


# --- encode on a generation model ----------------------------------------------------------------


def test_vllm_5184_encode_on_a_generation_model_is_a_clear_value_error(engine: Any, expected: Any) -> None:
    """vllm-project/vllm#5184 and vllm-project/vllm#5181 (``encode`` called on a generation model
    failed deep inside with an unrelated error; the fix raises a clear error saying embeddings
    need an embedding model). Expected: ``encode`` and ``async_encode`` on the served DeepSeek-V4
    generation model raise a ``ValueError`` that mentions an embedding model (SGLang's own message
    names ``--is-embedding``), for a single prompt and a batch, nothing is sent to the scheduler,
    and ``generate`` serves on with nothing leaked."""
    for prompt in ("embed me", ["a", "b"]):
        with pytest.raises(ValueError, match="embedding model") as err:
            engine.encode(prompt)
        assert "--is-embedding" in str(err.value)

        async def _async(p: Any = prompt) -> Any:
            return await engine.async_encode(p)

        with pytest.raises(ValueError, match="embedding model"):
            asyncio.run(_async())
    assert not engine.tokenizer_manager.rid_to_state
    _assert_released(engine, expected)
