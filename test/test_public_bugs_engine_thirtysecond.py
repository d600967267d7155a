"""The thirty-second set of public bug reports on the offline ``Engine`` API: token ids and numbers
handed over in numpy / torch (``input_ids``, ``stop_token_ids``, ``token_ids_logprob``,
``sampling_params`` values, ``score``'s ids), ``generate`` without ``sampling_params`` (SGLang's
default length), the cumulative chunks of a synchronous stream, and keywords ``generate`` does not
know, replayed against sglang-v4.

Fixture: conftest's session ``shared_fake_engine`` (an ``Engine`` on the model-free
``server_fixture.FakeScheduler``: the fake model writes ``FAKE_TEXT``'s tokens over and over).
Oracles: ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer (``transformers``, independent of the
runtime's wrapper: ``fake_output_ids`` / ``fake_output_text``), SGLang's documented sampling
defaults (``max_new_tokens`` 128), numpy's and torch's own ``tolist()`` of the arrays given (the
Python request those values stand for), SGLang's ``Engine.generate`` signature (an unknown keyword
is a ``TypeError``), and the request table and KV pool of the engine after each request (empty).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch
from engine_testutil import _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures
from server_fixture import fake_output_ids, fake_output_text

pytestmark = pytest.mark.timeout(240)

#: SGLang's documented default of ``sampling_params.max_new_tokens`` (docs: sampling params).
SGLANG_DEFAULT_MAX_NEW_TOKENS = 128


def _idle(engine: Any) -> None:
    """The engine's request table is empty and its KV pool holds no page."""
    assert not engine.tokenizer_manager.rid_to_state
    assert engine.get_server_info()["kv_pool"]["used_pages"] == 0


# --- numpy / torch values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ids",
    [
        np.array([5, 6, 7]),
        np.array([5, 6, 7], dtype=np.int32),
        [np.int64(5), np.int64(6), np.int64(7)],
        np.array([[5, 6, 7], [8, 9]], dtype=object),
        np.array([[5, 6, 7], [8, 9, 10]]),
    ],
    ids=["int64-array", "int32-array", "list-of-np-int64", "ragged-object-array", "2d-array"],
)
def test_fastdeploy_3944_numpy_prompt_token_ids_are_the_prompt_they_hold(
    engine: Any, hf: Any, ids: Any
) -> None:
    """PaddlePaddle/FastDeploy#3944 (prompt token ids given as a numpy array were refused by a check
    written for Python lists; the fix takes the array's values). Expected: ``input_ids`` as a numpy
    array (int64, int32, 2-D for a batch, a ragged object array) or a list of ``np.int64`` is the
    prompt ``ids.tolist()``: the same ``prompt_tokens`` per prompt and the fake model's first
    three tokens, with ``generate`` and ``async_generate``; nothing leaks."""
    want_ids = ids.tolist() if isinstance(ids, np.ndarray) else [int(i) for i in ids]
    batch = isinstance(want_ids[0], list)
    sp = {"max_new_tokens": 3}
    want_text = fake_output_text(hf, 3)
    out = engine.generate(input_ids=ids, sampling_params=sp)

    async def _async() -> Any:
        return await engine.async_generate(input_ids=ids, sampling_params=sp)

    for res in (out, asyncio.run(_async())):
        outs = res if batch else [res]
        prompts = want_ids if batch else [want_ids]
        assert [o["meta_info"]["prompt_tokens"] for o in outs] == [len(p) for p in prompts]
        assert [o["text"] for o in outs] == [want_text] * len(prompts)
        assert [o["output_ids"] for o in outs] == [fake_output_ids(hf, 3)] * len(prompts)
    _idle(engine)


def test_comfyui_3684_torch_long_tensor_token_ids_are_the_prompt_they_hold(engine: Any, hf: Any) -> None:
    """Comfy-Org/ComfyUI#3684 (a token instance check accepted only Python ints, so ids from a
    long tensor or a numpy array were refused; the fix widened it to those integers). Expected: a
    1-D ``torch.long`` tensor, a 2-D one (a batch) and a list of 0-d tensors are the prompts of
    their ``tolist()``; a float tensor stands for no token ids and stays a ``ValueError`` naming
    ``input_ids``; nothing leaks."""
    sp = {"max_new_tokens": 2}
    want = fake_output_text(hf, 2)
    one = engine.generate(input_ids=torch.tensor([11, 12, 13, 14]), sampling_params=sp)
    assert (one["meta_info"]["prompt_tokens"], one["text"]) == (4, want)
    two = engine.generate(input_ids=torch.tensor([[11, 12], [13, 14]], dtype=torch.long), sampling_params=sp)
    assert [(o["meta_info"]["prompt_tokens"], o["text"]) for o in two] == [(2, want), (2, want)]
    scalars = engine.generate(input_ids=[torch.tensor(11), torch.tensor(12)], sampling_params=sp)
    assert (scalars["meta_info"]["prompt_tokens"], scalars["text"]) == (2, want)
    with pytest.raises(ValueError, match="input_ids"):
        engine.generate(input_ids=torch.tensor([1.5, 2.0]), sampling_params=sp)
    _idle(engine)


def test_transformers_945_numpy_ids_in_stop_token_ids_and_token_ids_logprob(engine: Any, hf: Any) -> None:
    """huggingface/transformers#945 (ids held as ``numpy.int64`` were refused by the id-to-token
    conversion while the same Python ints worked). Expected: ``stop_token_ids`` as a numpy array
    stops at the fake model's second token (``finish_reason`` ``matched`` that id, 2 tokens), and
    ``token_ids_logprob`` as a numpy array gives one entry per asked id, in its order, at each
    output position, as Python ints do; nothing leaks."""
    ids = fake_output_ids(hf, 3)
    out = engine.generate(
        "stop early", sampling_params={"max_new_tokens": 8, "stop_token_ids": np.array([ids[1]])}
    )
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[1]}
    assert out["meta_info"]["completion_tokens"] == 2
    asked = np.array([ids[0], 17, 3], dtype=np.int64)
    res = engine.generate(
        "ask ids", sampling_params={"max_new_tokens": 2}, return_logprob=True, token_ids_logprob=asked
    )
    per_pos = res["meta_info"]["output_token_ids_logprobs"]
    assert len(per_pos) == 2
    for entries in per_pos:
        assert [e[1] for e in entries] == asked.tolist()
        assert all(type(e[1]) is int and isinstance(e[0], float) and e[0] <= 0.0 for e in entries)
    _idle(engine)


def test_comfyui_3684_numpy_numbers_in_sampling_params(engine: Any, hf: Any) -> None:
    """Comfy-Org/ComfyUI#3684, the same kind for numbers (a value computed with numpy failed a check
    for Python ints while SGLang's ``SamplingParams`` takes it). Expected: ``max_new_tokens`` as
    ``np.int64(4)`` gives four tokens and ``temperature`` ``np.float32(0.0)`` is greedy, per prompt
    of a ``sampling_params`` list too; ``np.bool_(True)`` is still no ``max_new_tokens`` (a
    ``ValueError`` naming it), as Python's ``True`` is not."""
    out = engine.generate(
        "np", sampling_params={"max_new_tokens": np.int64(4), "temperature": np.float32(0.0)}
    )
    assert (out["meta_info"]["completion_tokens"], out["text"]) == (4, fake_output_text(hf, 4))
    outs = engine.generate(
        ["a", "b"], sampling_params=[{"max_new_tokens": np.int32(1)}, {"max_new_tokens": np.uint8(3)}]
    )
    assert [o["text"] for o in outs] == [fake_output_text(hf, 1), fake_output_text(hf, 3)]
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate("np", sampling_params={"max_new_tokens": np.bool_(True)})
    _idle(engine)


# --- generate without sampling_params --------------------------------------------------------------


def test_sglang_27062_max_new_tokens_unset_is_sglangs_default_128(engine: Any, hf: Any) -> None:
    """sgl-project/sglang#27062 (``engine.generate`` / ``async_generate(stream=True)`` without
    ``max_new_tokens`` stops at SGLang's default of 128 tokens, ``finish_reason`` ``length``; the
    report asks whether that default fits). Expected, as SGLang documents it: without
    ``max_new_tokens`` the fake model's first 128 tokens come back, ``finish_reason`` ``length``
    128, synchronously and as the last chunk of an async stream."""
    out = engine.generate("no limit given", sampling_params={"temperature": 0.0})
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": SGLANG_DEFAULT_MAX_NEW_TOKENS}
    assert out["text"] == fake_output_text(hf, SGLANG_DEFAULT_MAX_NEW_TOKENS)

    async def _stream() -> list[Any]:
        gen = await engine.async_generate("no limit given", stream=True)
        return [c async for c in gen]

    chunks = asyncio.run(_stream())
    assert chunks[-1]["meta_info"]["completion_tokens"] == SGLANG_DEFAULT_MAX_NEW_TOKENS
    assert chunks[-1]["text"] == out["text"]
    _idle(engine)


def test_sglang_1582_batch_generate_without_sampling_params(engine: Any, hf: Any) -> None:
    """sgl-project/sglang#1582 (``generate(prompt)`` with no ``sampling_params`` failed while
    normalising the request: ``None`` fell into the per-prompt-list branch). Expected: a batch of
    prompts with ``sampling_params`` left out (``None``) or ``{}`` answers every prompt with the
    default (the fake model's first 128 tokens), in order, with their own ``prompt_tokens``."""
    want = fake_output_text(hf, SGLANG_DEFAULT_MAX_NEW_TOKENS)
    prompts = ["one", "two words"]
    for kwargs in ({}, {"sampling_params": {}}):
        outs = engine.generate(prompts, **kwargs)
        assert [o["text"] for o in outs] == [want, want]
        assert [o["meta_info"]["prompt_tokens"] for o in outs] == [len(hf.encode(p)) for p in prompts]
    _idle(engine)


# --- synchronous stream ----------------------------------------------------------------------------


def test_sglang_3164_sync_stream_chunks_are_cumulative(engine: Any, hf: Any) -> None:
    """sgl-project/sglang#3164 (the docs' synchronous streaming example printed far too much: each
    chunk's ``text`` is the whole text so far, so printing every chunk repeats it; the fix prints
    only the new part). Expected: every chunk's ``text`` / ``output_ids`` extend the previous
    chunk's, the new parts joined are the text once, and the last chunk equals the non-streamed
    answer (the fake model's first 6 tokens)."""
    sp = {"max_new_tokens": 6}
    chunks = list(engine.generate("stream me", sampling_params=sp, stream=True))
    assert len(chunks) >= 2
    printed, prev_text, prev_ids = "", "", []
    for c in chunks:
        assert c["text"].startswith(prev_text) and c["output_ids"][: len(prev_ids)] == prev_ids
        printed += c["text"][len(prev_text) :]
        prev_text, prev_ids = c["text"], c["output_ids"]
    assert printed == prev_text == fake_output_text(hf, 6)
    assert prev_ids == fake_output_ids(hf, 6)
    assert engine.generate("stream me", sampling_params=sp)["text"] == printed
    _idle(engine)


# --- keywords generate does not know ---------------------------------------------------------------


def test_petals_315_unknown_generate_keyword_or_sampling_field_is_refused(engine: Any, expected: Any) -> None:
    """bigscience-workshop/petals#315 (``generate()`` ignored keywords it did not know, so a user's
    ``repetition_penalty`` had no effect and nothing said so). Expected: a sampling option given
    as a ``generate`` keyword (``repetition_penalty=``, ``max_new_tokens=``) is a ``TypeError``
    naming it, as Python's own call of SGLang's signature is; a misspelled ``sampling_params`` key
    is a ``ValueError`` naming it; nothing is sent and the engine serves on."""
    for kwargs in ({"repetition_penalty": 1.3}, {"max_new_tokens": 2}):
        (name,) = kwargs
        with pytest.raises(TypeError, match=name):
            engine.generate("kw", **kwargs)
    with pytest.raises(ValueError, match="max_new_token"):
        engine.generate("kw", sampling_params={"max_new_token": 2})
    with pytest.raises(ValueError, match="repetiton_penalty"):
        engine.generate(["a", "b"], sampling_params=[{}, {"repetiton_penalty": 1.1}])
    assert not engine.tokenizer_manager.rid_to_state
    _assert_released(engine, expected)


def test_fastdeploy_3944_numpy_token_ids_in_score(engine: Any) -> None:
    """PaddlePaddle/FastDeploy#3944, the same kind on ``Engine.score`` (its ``query``, ``items``
    and ``label_token_ids`` are token ids too). Expected: numpy / torch ids give the scores and
    ``prompt_tokens`` of the Python lists they hold (``tolist()``), with ``score`` and
    ``async_score``; nothing leaks."""
    query, items, labels = [21, 22, 23], [[31], [32, 33]], [41, 42]
    want = engine.score(query=query, items=items, label_token_ids=labels)
    got = engine.score(
        query=np.array(query),
        items=np.array([[31], [32, 33]], dtype=object),
        label_token_ids=torch.tensor(labels),
    )
    assert (got.scores, got.prompt_tokens) == (want.scores, want.prompt_tokens)
    assert got.prompt_tokens == 2 * len(query) + 3

    async def _async() -> Any:
        return await engine.async_score(
            query=torch.tensor(query), items=[np.array(i) for i in items], label_token_ids=np.array(labels)
        )

    got = asyncio.run(_async())
    assert (got.scores, got.prompt_tokens) == (want.scores, want.prompt_tokens)
    _idle(engine)
