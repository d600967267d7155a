"""SGLang's scoring API: ``POST /v1/score`` and ``Engine.score`` / ``async_score`` on the embedded
default model (CPU, real scheduler), against HF transformers' ``DeepseekV4ForCausalLM`` on the same
checkpoint: the next-token distribution at the prompt's last position, read for the label ids
(``exp`` of the log-softmax, or the softmax of the label logits divided by the temperature).
Prompts are built by the HF tokenizer from the request's texts (``query + item`` joined as text,
``item + query`` with ``item_first``) or from the ids. Also: the response shape and usage, bad
input answered with a 400 naming the field while the server keeps serving, and (with a stub
tokenizer manager) that the items go to the scheduler as one batch and bad input sends nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
import requests
import torch
from sglang_v4.managers.tokenizer_manager_score_mixin import ScoreRequestError, TokenizerManagerScoreMixin

pytestmark = pytest.mark.timeout(600)

QUERY = "Question: which city is the capital of France? Candidate:"
ITEMS = [" Paris", " London is the capital", " Berlin"]
#: A few label token ids (any ids of the vocabulary: the model has random weights).
LABELS = [3, 450, 12000, 129279]


@pytest.fixture(scope="module")
def hf(hf_default_model: Any, mtok: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)``: HF transformers on the embedded model, float32, eval mode."""
    return hf_default_model, mtok


@pytest.fixture(scope="module")
def server(embedded_model_server: Any) -> Any:
    """conftest's session ``launch_server --device cpu`` on the embedded default model (the
    checkpoint of :func:`hf`). Its other users' prompts share no 256-token block with these, so
    every score here is a cold prefill, and the page checks compare counts before and after."""
    return embedded_model_server


@torch.no_grad()
def hf_scores(
    hf: tuple[Any, Any], ids: list[int], labels: list[int], apply_softmax: bool, temperature: float = 1.0
) -> tuple[list[float], list[float]]:
    """``(scores, label logprobs)`` of the oracle for the prompt ``ids`` (float64 from HF's float32
    logits at the last position)."""
    logits = hf[0](torch.tensor([ids])).logits[0, -1].double()
    lps = torch.log_softmax(logits, dim=-1)[labels]
    scores = torch.softmax(logits[labels] / temperature, dim=-1) if apply_softmax else lps.exp()
    return scores.tolist(), lps.tolist()


def assert_scores(got: list[float], want: list[float], apply_softmax: bool) -> None:
    """Softmax scores to 1e-3; probabilities (tiny on a random model) through their logs, 2e-3."""
    if apply_softmax:
        assert got == pytest.approx(want, abs=1e-3)
        assert sum(got) == pytest.approx(1.0, abs=1e-9)
    else:
        assert [float(torch.tensor(g).log()) for g in got] == pytest.approx(
            [float(torch.tensor(w).log()) for w in want], abs=2e-3
        )


def kv_pool(server: Any) -> dict[str, Any]:
    """The scheduler's page counts (``/get_server_info``'s ``kv_pool``)."""
    return requests.get(server.url + "/get_server_info", timeout=60).json()["kv_pool"]


def post_score(server: Any, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url + "/v1/score", json=body, timeout=300)


@pytest.mark.parametrize("item_first", [False, True])
@pytest.mark.parametrize("apply_softmax", [False, True])
def test_text_scores_equal_hf(
    server: Any, hf: tuple[Any, Any], item_first: bool, apply_softmax: bool
) -> None:
    body = {
        "query": QUERY,
        "items": ITEMS,
        "label_token_ids": LABELS,
        "apply_softmax": apply_softmax,
        "item_first": item_first,
    }
    r = post_score(server, body)
    assert r.status_code == 200, r.text
    got = r.json()
    tok = hf[1]
    prompts = [tok.encode(it + QUERY if item_first else QUERY + it) for it in ITEMS]
    assert len(got["scores"]) == len(ITEMS)
    for scores, ids in zip(got["scores"], prompts):
        assert_scores(scores, hf_scores(hf, ids, LABELS, apply_softmax)[0], apply_softmax)
    assert got["usage"]["prompt_tokens"] == sum(len(p) for p in prompts)


@pytest.mark.parametrize("item_first", [False, True])
def test_token_id_scores_equal_hf(server: Any, hf: tuple[Any, Any], item_first: bool) -> None:
    """Token-id inputs with one label list per item, with and without the softmax, and with a
    softmax temperature; ``return_token_logprobs`` gives HF's log-probabilities of the labels."""
    query = [0, 1000, 2000, 3000, 4000]
    items = [[5000, 6000], [7000], [8000, 9000, 10000]]
    labels = [[3, 4], [5, 6, 7], [129279, 100]]
    for apply_softmax, temperature in ((False, 1.0), (True, 1.0), (True, 0.5)):
        body = {
            "query": query,
            "items": items,
            "label_token_ids": labels,
            "apply_softmax": apply_softmax,
            "item_first": item_first,
            "temperature": temperature,
            "return_token_logprobs": True,
        }
        r = post_score(server, body)
        assert r.status_code == 200, r.text
        got = r.json()
        for i, item in enumerate(items):
            ids = item + query if item_first else query + item
            want, want_lps = hf_scores(hf, ids, labels[i], apply_softmax, temperature)
            assert_scores(got["scores"][i], want, apply_softmax)
            assert got["token_logprobs"][i] == pytest.approx(want_lps, abs=2e-3)
        assert got["usage"]["prompt_tokens"] == sum(len(query) + len(it) for it in items)


def test_response_shape_and_single_text_item(server: Any, hf: tuple[Any, Any]) -> None:
    """SGLang's response fields; ``items`` as one string; no ``query`` (the item alone);
    ``model`` echoed; usage of a scoring request has no completion."""
    r = post_score(server, {"items": " Paris", "label_token_ids": LABELS, "model": "my-model"})
    assert r.status_code == 200, r.text
    got = r.json()
    assert set(got) == {"scores", "pooled_hidden_states", "token_logprobs", "model", "usage", "object"}
    assert got["object"] == "scoring" and got["model"] == "my-model"
    assert got["pooled_hidden_states"] is None and got["token_logprobs"] is None
    ids = hf[1].encode(" Paris")
    assert_scores(got["scores"][0], hf_scores(hf, ids, LABELS, False)[0], False)
    usage = got["usage"]
    assert usage["prompt_tokens"] == usage["total_tokens"] == len(ids)
    assert usage["completion_tokens"] == 0


def test_empty_items_give_no_scores_as_sglang(server: Any) -> None:
    """SGLang 0.5.23 answers an empty ``items`` list with empty ``scores`` (not an error)."""
    r = post_score(server, {"query": "q", "items": [], "label_token_ids": [5], "return_token_logprobs": True})
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["scores"] == [] and got["token_logprobs"] == []
    assert got["usage"]["prompt_tokens"] == 0


#: Bad bodies and the field each 400 must name.
BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"query": "q", "items": [], "label_token_ids": None}, "label_token_ids"),
    ({"query": "q", "label_token_ids": [5]}, "items"),
    ({"query": "q", "items": ["a"], "label_token_ids": [129280]}, "label_token_ids"),
    ({"query": "q", "items": ["a"], "label_token_ids": [-1]}, "label_token_ids"),
    ({"query": "q", "items": ["a"]}, "label_token_ids"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5, 5]}, "label_token_ids"),
    ({"query": "q", "items": ["a"], "label_token_ids": [[5], [6]]}, "label_token_ids"),
    ({"query": "q", "items": ["a"], "label_token_ids": ["5"]}, "label_token_ids"),
    ({"query": "q", "items": ["a", [1, 2]], "label_token_ids": [5]}, "items"),
    ({"query": "q", "items": [[1, 2]], "label_token_ids": [5]}, "query"),
    ({"query": [1, 2], "items": ["a"], "label_token_ids": [5]}, "query"),
    ({"query": 5, "items": ["a"], "label_token_ids": [5]}, "query"),
    ({"query": "q", "items": 5, "label_token_ids": [5]}, "items"),
    ({"query": "q", "items": [[1, "a"]], "label_token_ids": [5]}, "items"),
    ({"query": [10**6], "items": [[1]], "label_token_ids": [5]}, "query"),
    ({"query": [1], "items": [[1], [129280]], "label_token_ids": [5]}, "items"),
    ({"query": [], "items": [[]], "label_token_ids": [5]}, "items"),
    ({"query": [1], "items": [[1] * 70000], "label_token_ids": [5]}, "items"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5], "temperature": 0}, "temperature"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5], "temperature": 2.0}, "temperature"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5], "apply_softmax": "yes"}, "apply_softmax"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5], "item_first": 2}, "item_first"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5], "score_extraction_token": "<x>"}, "score_extraction_token"),
    ({"query": "q", "items": ["a"], "label_token_ids": [5], "return_pooled_hidden_states": True}, "return_pooled_hidden_states"),
    ({"query": [1], "items": [[1]], "label_token_ids": [5], "embed_override_token_id": 7}, "embed_override_token_id"),
]  # fmt: skip


def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(server: Any, hf: tuple[Any, Any]) -> None:
    good = {"query": [0, 11, 12], "items": [[13], [14, 15]], "label_token_ids": [3, 4]}
    before = post_score(server, good)
    assert before.status_code == 200, before.text
    pages = kv_pool(server)
    for body, field in BAD_BODIES:
        r = post_score(server, body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()
        assert err["object"] == "error" and err["code"] == 400 and err["type"] == "BadRequestError"
        assert (err["param"] or "").split(".")[0] == field, (body, err)
        assert err["error"]["param"] == err["param"] and field in err["message"], (body, err)
    r = requests.post(server.url + "/v1/score", data=b"[1, 2]", timeout=60)
    assert r.status_code == 400 and "JSON object" in r.json()["message"]
    deadline = time.time() + 20
    while kv_pool(server) != pages and time.time() < deadline:
        time.sleep(0.2)
    assert kv_pool(server) == pages  # the refused requests held no page
    after = post_score(server, good)
    assert after.status_code == 200, after.text
    for i, item in enumerate(good["items"]):
        want = hf_scores(hf, good["query"] + item, good["label_token_ids"], False)[0]
        assert_scores(after.json()["scores"][i], want, False)


def test_engine_score_and_async_score_equal_hf(default_model_dir: str, hf: tuple[Any, Any]) -> None:
    """``Engine.score`` (text, ``item_first``) and ``Engine.async_score`` (token ids, per-item
    labels, softmax with a temperature) against HF; bad input is a ``ValueError`` naming the field
    and the engine keeps scoring."""
    from sglang_v4 import Engine

    old = os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    try:
        engine = Engine(model_path=default_model_dir, device="cpu", skip_warmup=True)
    finally:
        if old is not None:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old
    tok = hf[1]
    with engine:
        res = engine.score(query=QUERY, items=ITEMS, label_token_ids=LABELS, item_first=True)
        prompts = [tok.encode(it + QUERY) for it in ITEMS]
        for scores, ids in zip(res.scores, prompts):
            assert_scores(scores, hf_scores(hf, ids, LABELS, False)[0], False)
        assert res.prompt_tokens == sum(len(p) for p in prompts) and res.token_logprobs is None
        assert res.pooled_hidden_states is None

        query, items, labels = [0, 77, 88], [[99], [111, 222]], [[5, 6, 7], [8, 9]]
        res = asyncio.run(
            engine.async_score(
                query=query,
                items=items,
                label_token_ids=labels,
                apply_softmax=True,
                temperature=0.7,
                return_token_logprobs=True,
            )
        )
        for i, item in enumerate(items):
            want, want_lps = hf_scores(hf, query + item, labels[i], True, 0.7)
            assert_scores(res.scores[i], want, True)
            assert res.token_logprobs is not None
            assert res.token_logprobs[i] == pytest.approx(want_lps, abs=2e-3)

        with pytest.raises(ValueError, match="items"):
            engine.score(query="q", items=5, label_token_ids=[5])
        assert engine.score(query="q", items=[], label_token_ids=[5]).scores == []
        with pytest.raises(ValueError, match="label_token_ids"):
            engine.score(query="q", items=["a"], label_token_ids=[10**7])
        with pytest.raises(ValueError, match="query_embed_overrides"):
            engine.score(query=[1], items=[[2]], label_token_ids=[5], query_embed_overrides=[[0.0]])
        again = engine.score(query=QUERY, items=ITEMS, label_token_ids=LABELS, item_first=True)
        for scores, ids in zip(again.scores, prompts):
            assert_scores(scores, hf_scores(hf, ids, LABELS, False)[0], False)


class _StubTM(TokenizerManagerScoreMixin):
    """What ``score_request`` needs of a tokenizer manager; ``generate_request`` records the
    requests it gets and answers each item with fixed label logprobs ``-1 - id / 1000``."""

    def __init__(self, tokenizer: Any) -> None:
        from sglang_v4.managers.control_struct import SchedulerReadyInfo

        self.tokenizer = tokenizer
        self.vocab_size = 1000
        self.scheduler_info = SchedulerReadyInfo(
            status="ready", max_total_num_tokens=4096, max_req_input_len=63, context_len=64, vocab_size=1000
        )
        self.sent: list[Any] = []

    async def encode_text(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) % 1000 for c in text]

    async def generate_request(self, obj: Any, request: Any = None) -> Any:
        self.sent.append(obj)
        yield [
            {
                "meta_info": {
                    "finish_reason": {"type": "length", "length": 1},
                    "prompt_tokens": len(ids),
                    "output_token_ids_logprobs": [[[-1.0 - t / 1000, t, None] for t in labels]],
                }
            }
            for ids, labels in zip(obj.input_ids, obj.token_ids_logprob)
        ]


def test_items_go_as_one_batch_and_bad_input_sends_nothing() -> None:
    """One ``/generate`` batch per score call (prompts query + item, the labels per item, one
    greedy token); a bad call sends nothing; text without a tokenizer names the field."""
    import math

    tm = _StubTM(tokenizer=object())
    res = asyncio.run(tm.score_request(query="ab", items=["c", "de"], label_token_ids=[[7], [8, 9]]))
    assert len(tm.sent) == 1
    obj = tm.sent[0]
    assert obj.input_ids == [[97, 98, 99], [97, 98, 100, 101]]
    assert obj.token_ids_logprob == [[7], [8, 9]] and obj.return_logprob is True
    assert obj.sampling_params["max_new_tokens"] == 1 and obj.sampling_params["temperature"] == 0.0
    assert res.scores == [[math.exp(-1.007)], [math.exp(-1.008), math.exp(-1.009)]]
    assert res.prompt_tokens == 7
    with pytest.raises(ScoreRequestError) as e:
        asyncio.run(tm.score_request(query="ab", items=["c"], label_token_ids=[1000]))
    assert e.value.param == "label_token_ids" and len(tm.sent) == 1
    tm.tokenizer = None  # --skip-tokenizer-init: ids are scored, text is refused
    with pytest.raises(ScoreRequestError, match="skip-tokenizer-init") as e:
        asyncio.run(tm.score_request(query="ab", items=["c"], label_token_ids=[1]))
    assert e.value.param == "items" and len(tm.sent) == 1
    res = asyncio.run(tm.score_request(items=[[1, 2]], label_token_ids=[4, 5], apply_softmax=True))
    w = [math.exp(-1.004), math.exp(-1.005)]
    assert res.scores[0] == pytest.approx([x / sum(w) for x in w], rel=1e-12) and len(tm.sent) == 2
