"""A thirty-second set of public reports on scoring, replayed on ``Engine.score``: the label
logprobs of the next token after ``query + item`` (text and token ids, ``item_first``), items of
different lengths (an empty one too) scored in one batch without seeing each other, one label list
per item of different lengths, ``apply_softmax`` with a temperature while the reported logprobs stay
the raw ones, the ``prompt_tokens`` usage, an item past the context refused (not cut), and prompt
scoring with ``max_new_tokens`` 0 (prompt logprobs and their top lists, on ``generate`` and on
``POST /v1/completions`` with ``echo`` and ``max_tokens`` 0). Each test names its report.

Fixture: one offline ``Engine`` (CPU, float32, real scheduler, a 1024-token context with
``allow_auto_truncate``) on the embedded default model for the module; the completions test
serves the OpenAI router (``TestClient``) over that engine's tokenizer manager. Oracles: HF
transformers' ``DeepseekV4ForCausalLM`` on the same checkpoint (conftest's
``hf_default_model``), a cold forward of each prompt alone whose float32 logits are
turned into a float64 ``log_softmax`` (the label logprobs, ``exp`` of them, or their softmax after
dividing the label logits by the temperature); prompts built by the HF tokenizer (``mtok``) from the
texts joined as SGLang joins them; SGLang's documented score and logprob semantics (an empty item
scores the query alone, the first prompt token has no logprob); the engine's request table and KV
pool after each call (empty).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.timeout(300)

QUERY = "Is the following city the capital of France? City:"
#: A few label ids of the 129280-token vocabulary (the model has random weights: any ids do).
LABELS = [3, 450, 12000, 129279]
#: The engine's context length (``--allow-auto-truncate`` is on: a score prompt is still not cut).
CONTEXT = 1024
#: Logprobs of the engine (float32 on CPU) against HF's float32 logits in float64.
ABS = 2e-3


@pytest.fixture(scope="module")
def engine(default_model_dir: str) -> Iterator[Any]:
    """An offline ``Engine`` on the embedded default model (CPU, real scheduler, no warmup) with a
    context of ``CONTEXT`` tokens and ``allow_auto_truncate``."""
    from sglang_v4 import Engine

    old = os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    try:
        eng = Engine(
            model_path=default_model_dir,
            device="cpu",
            context_length=CONTEXT,
            allow_auto_truncate=True,
            skip_warmup=True,
        )
    finally:
        if old is not None:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old
    with eng:
        yield eng


def _idle(engine: Any) -> None:
    """The engine's request table is empty and its KV pool holds no page or request slot."""
    assert not engine.tokenizer_manager.rid_to_state
    kv = engine.get_server_info()["kv_pool"]
    assert kv["req_slots"]["used"] == kv["block_pages"]["used"] == kv["window_pages"]["used"] == 0, kv


@torch.no_grad()
def _rows(model: Any, ids: list[int]) -> torch.Tensor:
    """``[len(ids), vocab]`` float64 ``log_softmax`` of a cold HF forward of ``ids`` alone."""
    return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)


def _last(model: Any, ids: list[int]) -> torch.Tensor:
    """The float64 next-token ``log_softmax`` after the prompt ``ids``."""
    return _rows(model, ids)[-1]


# --------------------------------------------------------------------------- label logprobs


@pytest.mark.parametrize("item_first", [False, True])
def test_vllm_2613_label_logprobs_are_the_cold_next_token_log_softmax(
    engine: Any, hf_default_model: Any, mtok: Any, item_first: bool
) -> None:
    """vllm-project/vllm#2613 (users wanted the logits of a few label tokens at the first generated
    position, as ``model(ids).logits[:, -1]`` gives them in HF). Expected: for text items of
    different lengths, including an empty one (its prompt is the query alone), the returned
    ``token_logprobs`` are the float64 ``log_softmax`` of a cold forward at the prompt's last
    position, read at the labels, and the scores are their ``exp``; ``item_first`` joins
    ``item + query``."""
    items = [" Paris", "", " Lyon is a large city in the south"]
    res = engine.score(
        query=QUERY, items=items, label_token_ids=LABELS, item_first=item_first, return_token_logprobs=True
    )
    assert len(res.scores) == len(res.token_logprobs) == len(items)
    for item, scores, lps in zip(items, res.scores, res.token_logprobs):
        ids = mtok.encode(item + QUERY if item_first else QUERY + item)
        want = _last(hf_default_model, ids)[LABELS]
        assert lps == pytest.approx(want.tolist(), abs=ABS)
        assert scores == pytest.approx(torch.tensor(lps, dtype=torch.float64).exp().tolist(), rel=1e-9)
        assert all(s <= 1.0 for s in scores)
    _idle(engine)


# --------------------------------------------------------------------------- batching


def test_sglang_10979_items_in_one_batch_do_not_see_each_other(engine: Any, hf_default_model: Any) -> None:
    """sgl-project/sglang#10979 (multi-item scoring: items scored together must not attend to each
    other) and huggingface/transformers#26869 (the same input gave other logits inside a padded
    batch). Expected: token-id items of lengths 1, 9 and 3 plus an empty item and a repeat of the
    first, scored in one call, each equal a cold forward of ``query + item`` alone (float64
    ``log_softmax``) and the same item scored alone; the repeated item's values are the first's."""
    query = [0, 1000, 2000, 3000, 4000]
    items = [[77], [5, 6, 7, 8, 9, 10, 11, 12, 13], [500, 600, 700], [], [77]]
    res = engine.score(query=query, items=items, label_token_ids=LABELS, return_token_logprobs=True)
    for item, lps in zip(items, res.token_logprobs):
        want = _last(hf_default_model, query + item)[LABELS]
        assert lps == pytest.approx(want.tolist(), abs=ABS)
        alone = engine.score(query=query, items=[item], label_token_ids=LABELS, return_token_logprobs=True)
        assert lps == pytest.approx(alone.token_logprobs[0], abs=1e-4)
    assert res.token_logprobs[4] == pytest.approx(res.token_logprobs[0], abs=1e-5)
    assert res.prompt_tokens == sum(len(query) + len(it) for it in items)
    _idle(engine)


def test_vllm_34539_per_item_label_lists_of_different_lengths(engine: Any, hf_default_model: Any) -> None:
    """vllm-project/vllm#34539 (generative scoring batches requests whose label token ids differ
    in number by padding them). Expected: one label list per item, of 1, 3 and 2 ids, gives each
    item the softmax over its own labels' cold logits (no padded entry, nothing from another
    item's list); a single label softmaxes to 1.0; the raw logprobs are each item's own."""
    query = [0, 321, 654]
    items = [[10], [20, 21], [30, 31, 32]]
    labels = [[129279], [3, 450, 12000], [7, 8]]
    res = engine.score(
        query=query, items=items, label_token_ids=labels, apply_softmax=True, return_token_logprobs=True
    )
    for item, want_ids, scores, lps in zip(items, labels, res.scores, res.token_logprobs):
        row = _last(hf_default_model, query + item)
        assert len(scores) == len(lps) == len(want_ids)
        assert scores == pytest.approx(torch.softmax(row[want_ids], dim=-1).tolist(), abs=1e-3)
        assert sum(scores) == pytest.approx(1.0, abs=1e-9)
        assert lps == pytest.approx(row[want_ids].tolist(), abs=ABS)
    assert res.scores[0] == [1.0]
    _idle(engine)


# --------------------------------------------------------------------------- temperature


def test_vllm_43125_scores_read_the_raw_logprobs_not_processed_ones(
    engine: Any, hf_default_model: Any
) -> None:
    """vllm-project/vllm#43125 (the logprobs of ``logprob_token_ids``, used by generative scoring,
    were not the raw ones under a processed logprobs mode). Expected: with ``apply_softmax`` and
    ``temperature`` 0.5 the scores are ``softmax(logits[labels] / 0.5)`` of a cold forward, while
    the returned ``token_logprobs`` stay the raw ``log_softmax`` (temperature 1); a temperature
    without ``apply_softmax`` is a ``ValueError`` naming ``temperature``; nothing leaks."""
    query, item = [0, 11, 22, 33], [44, 55]
    res = engine.score(
        query=query,
        items=[item],
        label_token_ids=LABELS,
        apply_softmax=True,
        temperature=0.5,
        return_token_logprobs=True,
    )
    row = _last(hf_default_model, query + item)
    assert res.scores[0] == pytest.approx(torch.softmax(row[LABELS] / 0.5, dim=-1).tolist(), abs=1e-3)
    assert res.token_logprobs[0] == pytest.approx(row[LABELS].tolist(), abs=ABS)
    with pytest.raises(ValueError, match="temperature"):
        engine.score(query=query, items=[item], label_token_ids=LABELS, temperature=0.5)
    _idle(engine)


# --------------------------------------------------------------------------- usage and limits


def test_sglang_18132_score_usage_counts_every_items_prompt(engine: Any, mtok: Any) -> None:
    """sgl-project/sglang#18132 (the score API returned no token usage; the fix reports the prompt
    tokens of every ``query + item`` prompt). Expected: ``prompt_tokens`` is the sum over the items
    of the HF tokenizer's length of the joined text (``item + query`` with ``item_first``)."""
    items = [" Paris", " Berlin is not it", ""]
    for item_first in (False, True):
        res = engine.score(query=QUERY, items=items, label_token_ids=LABELS, item_first=item_first)
        texts = [it + QUERY if item_first else QUERY + it for it in items]
        assert res.prompt_tokens == sum(len(mtok.encode(t)) for t in texts)
    _idle(engine)


def test_sentence_transformers_3787_an_item_past_the_context_is_refused_not_cut(
    engine: Any, hf_default_model: Any
) -> None:
    """huggingface/sentence-transformers#3787 (a causal-LM reranker truncated a long input and so
    scored at a position that was not the prompt's end). Expected, though the engine runs with
    ``allow_auto_truncate`` (which cuts a long ``generate`` prompt): an item whose ``query + item``
    exceeds the longest input is a ``ValueError`` naming ``items`` (in either order), nothing is
    sent or held, and the same call's short items then score as a cold forward of their own."""
    limit = engine.tokenizer_manager.scheduler_info.max_req_input_len
    query = [0, 9, 8, 7]
    long_item = [5] * (limit - len(query) + 1)
    for item_first in (False, True):
        with pytest.raises(ValueError, match="items"):
            engine.score(query=query, items=[[6], long_item], label_token_ids=LABELS, item_first=item_first)
    _idle(engine)
    res = engine.score(query=query, items=[[6]], label_token_ids=LABELS, return_token_logprobs=True)
    assert res.token_logprobs[0] == pytest.approx(
        _last(hf_default_model, query + [6])[LABELS].tolist(), abs=ABS
    )


# --------------------------------------------------------------------------- prompt scoring


def _prompt_logprobs(engine: Any, ids: list[int], top: int = 0) -> dict[str, Any]:
    """``meta_info`` of a ``max_new_tokens`` 0 generate of ``ids`` with prompt logprobs from 0."""
    out = engine.generate(
        input_ids=ids,
        sampling_params={"max_new_tokens": 0, "temperature": 0.0},
        return_logprob=True,
        logprob_start_len=0,
        top_logprobs_num=top,
    )
    assert out["text"] == "" and out.get("output_ids", []) == []
    return out["meta_info"]


def test_metaseq_87_prompt_logprobs_with_zero_new_tokens(engine: Any, hf_default_model: Any) -> None:
    """facebookresearch/metaseq#87 (a first logprob came out positive, off by one, except with
    ``max_tokens=0``). Expected with ``max_new_tokens`` 0: no output token, one input logprob per
    prompt token, the first ``None`` (no context), each next one the float64 ``log_softmax`` of a
    cold forward at the previous position read at that token (all at most 0)."""
    ids = [0, 4242, 17, 9000, 31, 123, 77]
    meta = _prompt_logprobs(engine, ids)
    got = meta["input_token_logprobs"]
    assert meta["completion_tokens"] == 0 and meta["prompt_tokens"] == len(ids)
    assert [int(e[1]) for e in got] == ids
    assert got[0][0] is None
    rows = _rows(hf_default_model, ids)
    want = [float(rows[i - 1, ids[i]]) for i in range(1, len(ids))]
    assert [e[0] for e in got[1:]] == pytest.approx(want, abs=ABS)
    assert all(e[0] <= 0.0 for e in got[1:])
    _idle(engine)


def test_vllm_2043_prompt_top_logprobs_are_each_positions_best(engine: Any, hf_default_model: Any) -> None:
    """vllm-project/vllm#2043 (with ``prompt_logprobs=1`` some positions had two entries, others
    one: the prompt token's own logprob and the top-1 mixed). Expected with ``max_new_tokens`` 0
    and ``top_logprobs_num`` 2: each prompt position after the first has exactly 2 top entries,
    the cold forward's two best ids and logprobs at the previous position, in order; the prompt
    token's own logprob stays in ``input_token_logprobs`` whether or not it is among them."""
    ids = [0, 55, 6000, 12, 99]
    meta = _prompt_logprobs(engine, ids, top=2)
    tops = meta["input_top_logprobs"]
    rows = _rows(hf_default_model, ids)
    assert len(tops) == len(ids) and not tops[0]
    for i in range(1, len(ids)):
        vals, idx = rows[i - 1].topk(2)
        assert [int(e[1]) for e in tops[i]] == idx.tolist()
        assert [e[0] for e in tops[i]] == pytest.approx(vals.tolist(), abs=ABS)
        assert meta["input_token_logprobs"][i][0] == pytest.approx(float(rows[i - 1, ids[i]]), abs=ABS)
    _idle(engine)


class _EngineTM:
    """The engine's tokenizer manager as the OpenAI router sees it, from the router's own event
    loop: each request runs on the engine's loop (its outputs collected, then relayed)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tm = engine.tokenizer_manager
        self.tokenizer = self.tm.tokenizer
        self.vocab_size = self.tm.vocab_size
        self.context_len = CONTEXT

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        async def collect() -> list[Any]:
            return [out async for out in self.tm.generate_request(obj, None)]

        for out in await asyncio.wrap_future(self.engine._submit(collect())):
            yield out


def test_vllm_3752_completions_echo_with_zero_max_tokens_scores_the_prompt(
    engine: Any, hf_default_model: Any, mtok: Any
) -> None:
    """vllm-project/vllm#3752 (what ``logprobs`` returns for the prompt was unclear and looked
    wrong). Expected from ``POST /v1/completions`` with token-id ``prompt``, ``echo``,
    ``max_tokens`` 0 and ``logprobs`` 2 (OpenAI's legacy completions format): the text is the
    decoded prompt and the ``tokens`` join to it, one entry per prompt token, ``token_logprobs[0]``
    and ``top_logprobs[0]`` null, each next logprob the cold forward's float64 ``log_softmax`` at
    the previous position, each top list's values those of the row's 2 best tokens plus the
    prompt token's own, and ``completion_tokens`` 0."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang_v4.entrypoints.openai.api import create_openai_router

    sa = SimpleNamespace(
        served_model_name="dsv4",
        model_path=None,
        api_key=None,
        enable_cache_report=False,
        context_length=None,
    )
    app = FastAPI()
    app.include_router(create_openai_router(_EngineTM(engine), sa))
    ids = [0, 4242, 17, 9000, 31]
    body = {"model": "dsv4", "prompt": ids, "max_tokens": 0, "logprobs": 2, "echo": True}
    with TestClient(app) as client:
        resp = client.post("/v1/completions", json=body)
    assert resp.status_code == 200, resp.text
    done = resp.json()
    choice = done["choices"][0]
    assert choice["text"] == mtok.decode(ids) and choice["finish_reason"] == "length"
    assert (done["usage"]["prompt_tokens"], done["usage"]["completion_tokens"]) == (len(ids), 0)
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(ids)
    assert "".join(lp["tokens"]) == choice["text"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    rows = _rows(hf_default_model, ids)
    for i in range(1, len(ids)):
        assert lp["token_logprobs"][i] == pytest.approx(float(rows[i - 1, ids[i]]), abs=ABS)
        best = rows[i - 1].topk(2).indices.tolist()
        want = sorted(float(rows[i - 1, t]) for t in {*best, ids[i]})
        assert sorted(lp["top_logprobs"][i].values()) == pytest.approx(want, abs=ABS)
    _idle(engine)
