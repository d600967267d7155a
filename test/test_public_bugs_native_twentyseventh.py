"""The twenty-seventh set of public bug reports on SGLang's native ``/generate`` API: batches of
pre-tokenized prompts (``input_ids`` as a list of lists, per-prompt ``sampling_params``), logprob
texts of a prompt that came as ids, prompt logprobs over the whole prompt (non-streamed and
streamed), and a prefill-only request (``max_new_tokens: 0``) that asks for logprobs, replayed
against sglang-v4. Each test names its report.

Fixture: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over). Oracles: the DeepSeek-V4 tokenizer through
``transformers`` (conftest's ``tok``: the prompt ids sent and each id's text), single requests
of the same prompt (cold runs) for each entry of a batch, the counts each request asked for, and
SGLang's documented ``/generate`` contract (``logprob_start_len`` 0: every prompt position,
the first without a logprob; ``finish_reason``
``{"type": "length", "length": N}``). Every report here passed as it was and is kept as a
regression test.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, fake_output_ids, sse_events

pytestmark = pytest.mark.timeout(240)
PROMPTS = ["The capital of France is", "Hello", "def fib(n):\n    return"]


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server."""
    return held_fake_server


def _gen(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def _ids(tok: Any, text: str) -> list[int]:
    """``text``'s token ids without special tokens (``transformers``)."""
    return list(tok.encode(text, add_special_tokens=False))


def test_amd_shark_1730_batch_input_ids_answer_like_single_requests(server: ServerHandle, tok: Any) -> None:
    """nod-ai/amd-shark-ai#1730: a batch of pre-tokenized prompts (``input_ids`` as a list of id
    lists) crashed, the server reading the absent text of a prompt that came as ids. Expected: a
    list of one answer per prompt, in order, each equal to the same prompt sent alone (output ids,
    text, ``prompt_tokens``); with ``return_text_in_logprobs`` each prompt logprob entry carries
    that id's text as the tokenizer decodes it, though no prompt text was sent."""
    batch = [_ids(tok, p) for p in PROMPTS]
    common = {
        "sampling_params": {"max_new_tokens": 4},
        "return_logprob": True,
        "logprob_start_len": 0,
        "return_text_in_logprobs": True,
    }
    outs = _gen(server, {"input_ids": batch, **common})
    assert isinstance(outs, list) and len(outs) == len(batch)
    for ids, out in zip(batch, outs, strict=True):
        cold = _gen(server, {"input_ids": ids, **common})
        assert out["output_ids"] == cold["output_ids"] == fake_output_ids(tok, 4)
        assert out["text"] == cold["text"]
        assert out["meta_info"]["prompt_tokens"] == len(ids)
        entries = out["meta_info"]["input_token_logprobs"]
        assert [e[1] for e in entries] == ids
        assert [e[2] for e in entries] == [tok.decode([t]) for t in ids]


def test_transformers_3037_two_id_lists_are_a_batch_not_a_pair(server: ServerHandle, tok: Any) -> None:
    """huggingface/transformers#3037: a batch of exactly two pre-tokenized sequences was taken for
    one (text, text-pair) input and failed. Expected: ``input_ids`` of two id lists, with a list
    of two ``sampling_params``, is a batch of two requests, each with its own prompt length
    (``prompt_tokens``), its own ``max_new_tokens`` (``completion_tokens`` 2 and 5) and its own
    request id."""
    batch = [_ids(tok, PROMPTS[0]), _ids(tok, PROMPTS[2])]
    assert len(batch[0]) != len(batch[1])
    sps = [{"max_new_tokens": 2}, {"max_new_tokens": 5}]
    outs = _gen(server, {"input_ids": batch, "sampling_params": sps})
    assert isinstance(outs, list) and len(outs) == 2
    for ids, sp, out in zip(batch, sps, outs, strict=True):
        meta = out["meta_info"]
        assert meta["prompt_tokens"] == len(ids)
        assert meta["completion_tokens"] == sp["max_new_tokens"]
        assert out["output_ids"] == fake_output_ids(tok, sp["max_new_tokens"])
        assert meta["finish_reason"] == {"type": "length", "length": sp["max_new_tokens"]}
    assert outs[0]["meta_info"]["id"] != outs[1]["meta_info"]["id"]


@pytest.mark.parametrize("stream", [False, True])
def test_tgi_3070_prompt_logprobs_cover_every_prompt_token(
    server: ServerHandle, tok: Any, stream: bool
) -> None:
    """huggingface/text-generation-inference#3070 and #2973: asking for the prompt's logprobs
    returned only the new token's (the prefill details were empty). Expected, per SGLang's
    ``logprob_start_len: 0``: ``input_token_logprobs`` holds one entry per prompt token, in order,
    its ids the ids sent (``transformers``' encoding), the first without a logprob (``None``) and
    every other a finite number; streamed, the last chunk holds the same entries, not repeated."""
    ids = _ids(tok, PROMPTS[0])
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 3},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    if stream:
        r = requests.post(server.url + "/generate", json={**body, "stream": True}, timeout=60, stream=True)
        assert r.status_code == 200
        events = sse_events(r)
        assert events[-1] == "[DONE]"
        meta = events[-2]["meta_info"]
    else:
        meta = _gen(server, body)["meta_info"]
    entries = meta["input_token_logprobs"]
    assert len(entries) == len(ids) == meta["prompt_tokens"]
    assert [e[1] for e in entries] == ids
    assert entries[0][0] is None
    assert all(isinstance(e[0], float) for e in entries[1:])
    assert len(meta["output_token_logprobs"]) == 3


def test_sglang_17395_prefill_only_request_with_logprobs(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#17395: a prefill-only request (``max_new_tokens: 0``) asking for
    logprobs without ``logprob_start_len`` had no defined answer (the fix answers it rather than
    failing). Expected: HTTP 200, no output token (``output_ids`` and ``text`` empty,
    ``completion_tokens`` 0, ``finish_reason`` ``length`` 0, no output logprob), and whatever
    prompt logprob entries come are the prompt's own tail, in order (each id the id sent at that
    position), none of them past the prompt."""
    ids = _ids(tok, PROMPTS[0])
    out = _gen(server, {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True})
    meta = out["meta_info"]
    assert out["output_ids"] == [] and out["text"] == ""
    assert meta["completion_tokens"] == 0 and meta["prompt_tokens"] == len(ids)
    assert meta["finish_reason"] == {"type": "length", "length": 0}
    assert meta["output_token_logprobs"] == []
    entries = meta["input_token_logprobs"]
    assert 0 < len(entries) <= len(ids)
    assert [e[1] for e in entries] == ids[len(ids) - len(entries) :]


def test_sglang_10640_n_above_one_on_one_prompt_is_a_list_of_n(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#10640 (the frontend broke on ``n > 1``: ``/generate`` answers one prompt
    with ``n`` samples as a list, which a caller reading one object mishandled). Expected, per
    SGLang's contract: one prompt with ``sampling_params.n: 3`` is a list of three complete
    answers (``text``, ``output_ids``, ``meta_info`` with the asked length and its own id); streamed,
    every chunk names its sample by ``index`` 0..2 and each sample's last text is the text of
    the unstreamed answer."""
    body = {"text": PROMPTS[1], "sampling_params": {"n": 3, "max_new_tokens": 4}}
    outs = _gen(server, body)
    assert isinstance(outs, list) and len(outs) == 3
    for out in outs:
        assert out["output_ids"] == fake_output_ids(tok, 4)
        assert out["meta_info"]["completion_tokens"] == 4
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 4}
    assert len({o["meta_info"]["id"] for o in outs}) == 3
    r = requests.post(server.url + "/generate", json={**body, "stream": True}, timeout=60, stream=True)
    assert r.status_code == 200
    events = sse_events(r)
    assert events[-1] == "[DONE]"
    last: dict[int, str] = {}
    for e in events[:-1]:
        last[e["index"]] = e["text"]
    assert last == {i: outs[i]["text"] for i in range(3)}


@pytest.mark.parametrize(
    "text",
    [123, [["a", "b"]], {"prompt": "hi"}, [1.5], True],
    ids=["int", "nested", "dict", "floats", "bool"],
)
def test_fastchat_2555_a_text_of_the_wrong_type_is_a_400_naming_text(
    server: ServerHandle, tok: Any, text: Any
) -> None:
    """lm-sys/FastChat#2555 (a prompt of the wrong type reached the tokenizer, whose "text input
    must be of type str ..." failed the request deep inside the worker). Expected: ``/generate``
    with a ``text`` that is neither a string nor a list of strings is refused up front with HTTP
    400 whose message names ``text``, and the server still answers a plain request exactly."""
    r = requests.post(server.url + "/generate", json={"text": text}, timeout=60)
    assert r.status_code == 400, r.text
    assert re.search(r"\btext\b", json.dumps(r.json())), r.text
    out = _gen(server, {"text": "ok", "sampling_params": {"max_new_tokens": 2}})
    assert out["output_ids"] == fake_output_ids(tok, 2)
