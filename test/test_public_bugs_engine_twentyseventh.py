"""The twenty-seventh set of public bug reports on the offline ``Engine`` API (``generate`` /
``async_generate`` with token-id prompts, batches, ``n > 1``, ``max_new_tokens=0`` and
out-of-vocabulary ids), replayed against sglang-v4.

Fixture: conftest's session ``shared_fake_engine`` (an ``Engine`` on the model-free
``server_fixture.FakeScheduler``: the fake model writes ``FAKE_TEXT``'s tokens over and over).
Oracles: ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer (``transformers``, independent of the
runtime's wrapper: ``fake_output_text``), the model directory's own ``config.json``
``vocab_size`` (the valid ids are ``[0, vocab_size)``), the reports' stated behaviour (an empty
answer for ``max_new_tokens=0``; a ``ValueError`` naming the field for an id outside the
vocabulary, the engine serving on), SGLang 0.5.23's ``TokenizerManager`` read for facts (a batch
with ``n`` samples answers prompt-major: every sample of prompt 0, then of prompt 1), and the
request table and KV pool of the engine after each request (empty: nothing leaked).
Every report here passed as-is and is kept as a regression test.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from engine_testutil import _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures
from server_fixture import fake_output_text

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def vocab_size(engine: Any) -> int:
    """``vocab_size`` of the served model's ``config.json``, read straight from the file."""
    with open(os.path.join(engine.server_args.model_path, "config.json"), encoding="utf-8") as f:
        return int(json.load(f)["vocab_size"])


def _idle(engine: Any) -> None:
    """The engine's request table is empty and its KV pool holds no page."""
    assert not engine.tokenizer_manager.rid_to_state
    assert engine.get_server_info()["kv_pool"]["used_pages"] == 0


# --- max_new_tokens=0 ----------------------------------------------------------------------------


def test_sglang_4892_max_new_tokens_zero_gives_an_empty_answer(engine: Any, hf: Any) -> None:
    """sgl-project/sglang#4892 and sgl-project/sglang#4998 (``max_new_tokens=0`` still sampled
    and returned one token after the prefill). Expected: the answer of ``max_new_tokens=0`` is
    empty (``text == ""``, no ``output_ids``, ``completion_tokens == 0``) with finish reason
    ``length``; in a batch next to a 3-token request the other member still gets its 3 tokens;
    streamed, every chunk is empty; and nothing stays allocated."""
    out = engine.generate(prompt="Hello there", sampling_params={"max_new_tokens": 0})
    assert out["text"] == "" and out["output_ids"] == []
    assert out["meta_info"]["completion_tokens"] == 0
    assert out["meta_info"]["finish_reason"]["type"] == "length"
    assert out["meta_info"]["prompt_tokens"] == len(hf.encode("Hello there"))

    batch = engine.generate(
        input_ids=[[5, 6, 7], [8, 9]], sampling_params=[{"max_new_tokens": 0}, {"max_new_tokens": 3}]
    )
    assert [o["text"] for o in batch] == ["", fake_output_text(hf, 3)]
    assert [o["meta_info"]["completion_tokens"] for o in batch] == [0, 3]

    chunks = list(engine.generate(prompt="Hello", sampling_params={"max_new_tokens": 0}, stream=True))
    assert chunks and all(c["text"] == "" for c in chunks)
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    _idle(engine)


# --- token ids outside the vocabulary ------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, "vocab", 5279552648203111001, 2**70])
def test_sglang_8383_out_of_vocabulary_prompt_id_is_a_value_error(
    engine: Any, expected: Any, vocab_size: int, bad: Any
) -> None:
    """sgl-project/sglang#8383 and sgl-project/sglang#27482 (a prompt ``input_ids`` entry that is
    negative or ``>= vocab_size`` reached the embedding gather and took the whole engine down),
    vllm-project/vllm#26797 (``Token id 5279552648203111001 is out of vocabulary``). Expected: the
    request is refused with a ``ValueError`` naming ``input_ids`` and the bad id, in a single
    prompt and as one member of a batch (the batch sends nothing), and the engine serves the next
    request (the fake model's text) with nothing leaked."""
    bad_id = vocab_size if bad == "vocab" else bad
    with pytest.raises(ValueError, match="input_ids") as err:
        engine.generate(input_ids=[1, bad_id], sampling_params={"max_new_tokens": 2})
    assert str(bad_id) in str(err.value)
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(input_ids=[[1, 2], [bad_id]], sampling_params={"max_new_tokens": 2})
    _assert_released(engine, expected)


def test_mistralrs_2347_last_id_of_the_vocabulary_is_accepted(engine: Any, hf: Any, vocab_size: int) -> None:
    """EricLBuehler/mistral.rs#2347 (raw token ids are range-checked against the vocabulary: the
    largest valid id ``vocab_size - 1`` is accepted, ``vocab_size`` itself is refused). Expected:
    a prompt ending in ``vocab_size - 1`` runs (its ``prompt_tokens`` is its length, the answer the
    fake model's text), ``stop_token_ids=[vocab_size - 1]`` is accepted, and ``vocab_size`` in
    either place is a ``ValueError``."""
    out = engine.generate(input_ids=[5, vocab_size - 1], sampling_params={"max_new_tokens": 3})
    assert out["meta_info"]["prompt_tokens"] == 2
    assert out["text"] == fake_output_text(hf, 3)
    out = engine.generate(
        prompt="a", sampling_params={"max_new_tokens": 3, "stop_token_ids": [vocab_size - 1]}
    )
    assert out["text"] == fake_output_text(hf, 3)
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(input_ids=[5, vocab_size], sampling_params={"max_new_tokens": 3})
    with pytest.raises(ValueError, match="stop_token_ids"):
        engine.generate(prompt="a", sampling_params={"max_new_tokens": 3, "stop_token_ids": [vocab_size]})
    _idle(engine)


@pytest.mark.parametrize("extra", [{}, {"min_new_tokens": 1}])
def test_vllm_42614_out_of_vocabulary_stop_token_id_is_a_value_error(
    engine: Any, expected: Any, vocab_size: int, extra: dict[str, int]
) -> None:
    """vllm-project/vllm#42614 and vllm-project/vllm#44968 (an out-of-range ``stop_token_ids``
    entry, used as a logits index when ``min_tokens > 0``, crashed the engine for everyone).
    Expected: ``stop_token_ids`` holding an id outside ``[0, vocab_size)`` (``151645``, an id of
    another tokenizer; ``-5``) is a ``ValueError`` naming ``stop_token_ids``, with or without
    ``min_new_tokens``, and the engine serves on."""
    for bad in (151645 if vocab_size <= 151645 else vocab_size, -5):
        params = {"max_new_tokens": 3, "stop_token_ids": [bad], **extra}
        with pytest.raises(ValueError, match="stop_token_ids"):
            engine.generate(prompt="a", sampling_params=params)
    _assert_released(engine, expected)


# --- batches, n and the request table ------------------------------------------------------------


def test_sglang_7807_token_id_batch_with_n_samples_is_prompt_major(engine: Any, hf: Any) -> None:
    """sgl-project/sglang#7807 (a single non-text prompt with ``n > 1`` was not expanded to its
    samples when the request was turned into a batch: that input kind was skipped). Expected: one
    token-id prompt with ``n=2`` answers two samples; token-id prompts of 3 and 2 ids with ``n=2``
    answer four, prompt-major as SGLang orders them (prompt 0's two samples, then prompt 1's),
    each carrying its prompt's ``prompt_tokens`` and the fake model's text; the same from
    ``async_generate``."""
    params = {"max_new_tokens": 3, "n": 2}
    outs = engine.generate(input_ids=[5, 6, 7], sampling_params=params)
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [3, 3]
    assert [o["text"] for o in outs] == [fake_output_text(hf, 3)] * 2
    outs = engine.generate(input_ids=[[5, 6, 7], [8, 9]], sampling_params=params)
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [3, 3, 2, 2]
    assert [o["text"] for o in outs] == [fake_output_text(hf, 3)] * 4
    outs = asyncio.run(engine.async_generate(input_ids=[[5, 6, 7], [8, 9]], sampling_params=params))
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [3, 3, 2, 2]
    _idle(engine)


def test_sglang_504_request_state_is_dropped_after_every_kind_of_call(engine: Any, hf: Any) -> None:
    """sgl-project/sglang#504 (for a non-streamed request the code after the generator's
    ``yield`` never ran, so the request's bookkeeping was left behind). Expected: after a plain
    ``generate``, a batch, a fully read stream, an ``async_generate`` and an async stream, the
    engine's request table is empty and no KV page is in use."""
    engine.generate(prompt="a", sampling_params={"max_new_tokens": 2})
    _idle(engine)
    engine.generate(prompt=["a", "b"], sampling_params={"max_new_tokens": 2})
    _idle(engine)
    chunks = list(engine.generate(prompt="a", sampling_params={"max_new_tokens": 2}, stream=True))
    assert chunks[-1]["text"] == fake_output_text(hf, 2)
    _idle(engine)

    async def both() -> list[str]:
        one = await engine.async_generate(prompt="a", sampling_params={"max_new_tokens": 2})
        last = None
        async for c in await engine.async_generate(
            prompt="a", sampling_params={"max_new_tokens": 2}, stream=True
        ):
            last = c
        return [one["text"], last["text"]]

    assert asyncio.run(both()) == [fake_output_text(hf, 2)] * 2
    _idle(engine)
