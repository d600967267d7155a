"""The thirty-first set of public bug reports on SGLang's native API, replayed against sglang-v4:
``stop_token_ids`` holding JSON ``null`` (dropped, as SGLang's fix does) or an id outside the
vocabulary (HTTP 400 naming the field, on ``/generate`` and the OpenAI completion route alike),
empty prompts (an empty ``input_ids`` list, alone or inside a batch, answered 400 without harming
the server), a stop string inside a stream (the cumulative stream text ends as the unstreamed
answer, with the stop string trimmed), a ``rid`` reused after its request finished, the answer
shape of ``n > 1``, per-prompt ``return_logprob`` lists in a batch, ``/pause_generation`` with
nothing running and ``/abort_request`` of a running request.

Fixture: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a prompt holding ``[hold]`` runs until aborted).
Oracles: the DeepSeek-V4 tokenizer through ``transformers`` (conftest's ``tok``: the fake model's
output ids and texts), the model directory's ``config.json`` (``vocab_size``), ``json.loads`` of
the SSE payloads and the reports' stated expected values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from scheduler_testutil import assert_idle, cold_output_ids, make_scheduler, run_one
from server_fixture import (
    ServerHandle,
    fake_output_ids,
    fake_output_text,
    in_background,
    sse_events,
    wait_running_reqs,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server."""
    return held_fake_server


@pytest.fixture(scope="module")
def vocab_size(shared_fake_model_dir: Path) -> int:
    """``vocab_size`` of the served model's ``config.json`` (read with ``json.loads``)."""
    return int(json.loads((Path(shared_fake_model_dir) / "config.json").read_text())["vocab_size"])


def _post(server: ServerHandle, path: str, body: dict[str, Any]) -> requests.Response:
    """``POST path`` with ``body`` as JSON."""
    return requests.post(server.url + path, json=body, timeout=60)


def _gen(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = _post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def _stream(server: ServerHandle, body: dict[str, Any]) -> list[Any]:
    """The SSE payloads of a streamed ``/generate`` (``"[DONE]"`` last); asserts HTTP 200."""
    with requests.post(server.url + "/generate", json={**body, "stream": True}, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        return sse_events(r)


def _assert_400_naming(r: requests.Response, field: str) -> None:
    """``r`` is HTTP 400 whose error message (SGLang's or OpenAI's shape) names ``field``."""
    assert r.status_code == 400, r.text
    body = r.json()
    err = body["error"] if isinstance(body.get("error"), dict) else body
    assert field in str(err.get("message", body)), body


def _alive(server: ServerHandle, tok: Any) -> None:
    """The server still answers a plain request with the fake model's first token."""
    out = _gen(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 1}})
    assert out["output_ids"] == fake_output_ids(tok, 1)


# ----------------------------------------------------------------------------- stop_token_ids
@pytest.mark.parametrize("stream", [False, True])
def test_sglang_22144_null_stop_token_id_is_dropped_not_a_crash(
    server: ServerHandle, tok: Any, stream: bool
) -> None:
    """sgl-project/sglang#22144 (``"stop_token_ids": [null]`` reached ``torch.tensor`` in the
    ``min_new_tokens`` penalizer and killed the scheduler) and its fix sgl-project/sglang#22175
    (``None`` entries are filtered out). Expected: HTTP 200, the request generates as one without
    stop ids (all ``max_new_tokens`` tokens, ``finish_reason`` ``length``), the server lives on."""
    sp = {"max_new_tokens": 4, "min_new_tokens": 2, "stop_token_ids": [None]}
    if stream:
        events = _stream(server, {"text": "Hi", "sampling_params": sp})
        assert events[-1] == "[DONE]"
        last = events[-2]
    else:
        last = _gen(server, {"text": "Hi", "sampling_params": sp})
    assert last["output_ids"] == fake_output_ids(tok, 4)
    assert last["meta_info"]["finish_reason"]["type"] == "length"
    _alive(server, tok)


@pytest.mark.parametrize("offset", [0, 1, 9_999_999])
def test_sglang_27398_out_of_vocab_stop_token_id_is_a_400(
    server: ServerHandle, tok: Any, vocab_size: int, offset: int
) -> None:
    """sgl-project/sglang#27398 and sgl-project/sglang#31561 (an out-of-vocabulary
    ``stop_token_ids`` entry with ``min_new_tokens > 0`` indexed the logits out of bounds and
    crashed the scheduler; ``vocab_size`` itself was silently dropped). Expected: every id
    ``>= vocab_size`` (``config.json``) is refused with HTTP 400 naming ``stop_token_ids``, the
    last valid id ``vocab_size - 1`` is accepted, and the server lives on."""
    bad = {"max_new_tokens": 3, "min_new_tokens": 2, "stop_token_ids": [vocab_size + offset]}
    _assert_400_naming(_post(server, "/generate", {"text": "Hi", "sampling_params": bad}), "stop_token_ids")
    ok = {"max_new_tokens": 3, "min_new_tokens": 2, "stop_token_ids": [vocab_size - 1]}
    assert _gen(server, {"text": "Hi", "sampling_params": ok})["output_ids"] == fake_output_ids(tok, 3)


def test_vllm_54196_out_of_vocab_stop_token_id_on_completions_is_a_400(
    server: ServerHandle, tok: Any, vocab_size: int
) -> None:
    """vllm-project/vllm#54196 (``stop_token_ids`` was the one client token-id field not checked
    against the vocabulary; DeepSeek-V4's is 129280 and an older DeepSeek id 151645 crashed the
    engine). Expected: ``/v1/completions`` with ``stop_token_ids: [vocab_size]`` is an HTTP 400
    in OpenAI's error shape naming the field; the server lives on."""
    body = {"model": "dsv4-test", "prompt": "Hi", "max_tokens": 2, "stop_token_ids": [vocab_size]}
    r = _post(server, "/v1/completions", body)
    _assert_400_naming(r, "stop_token_ids")
    assert r.json()["error"]["code"] == 400
    _alive(server, tok)


# ----------------------------------------------------------------------------- empty prompts
def test_meds_eic_ar_176_empty_input_ids_is_a_400(server: ServerHandle, tok: Any) -> None:
    """mmcdermott/MEDS_EIC_AR#176 (an empty prompt inside a batch sent SGLang a zero-token
    extend batch and the scheduler died). Expected: ``input_ids: []`` alone, and a batch holding
    one empty row, are HTTP 400 naming the input; nothing runs and the server lives on."""
    sp = {"max_new_tokens": 2}
    r = _post(server, "/generate", {"input_ids": [], "sampling_params": sp})
    assert r.status_code == 400, r.text
    r = _post(server, "/generate", {"input_ids": [tok.encode("Hi"), []], "sampling_params": sp})
    assert r.status_code == 400, r.text
    assert "error" in r.json()
    wait_running_reqs(server, 0)
    _alive(server, tok)


def test_vllm_7746_empty_string_prompt_in_a_list_does_not_kill_the_server(
    server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#7746 (``/v1/completions`` with ``"prompt": [""]`` answered ``Internal
    Server Error`` and left the engine dead). Expected: no 5xx -- a 200 whose choice is the model's
    output for the BOS-only prompt, or a 400 in OpenAI's error shape -- and the next request is
    answered."""
    r = _post(server, "/v1/completions", {"model": "dsv4-test", "prompt": [""], "max_tokens": 2})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 200:
        assert r.json()["choices"][0]["text"] == fake_output_text(tok, 2)
    else:
        assert r.json()["error"]["code"] == 400
    _alive(server, tok)


# ----------------------------------------------------------------------------- streams
def test_dynamo_14317_streamed_text_with_a_stop_string_ends_as_the_unstreamed_answer(
    server: ServerHandle, tok: Any
) -> None:
    """ai-dynamo/dynamo#14317 (a client of SGLang's stream mishandled stop strings: SGLang trims a
    requested stop string in both streamed and unstreamed answers). Expected: with
    ``stop: ["Stop"]``, the unstreamed text is the fake model's text up to (not including) the
    first ``Stop``; the last streamed chunk's cumulative text equals it, every chunk's text
    extends the one before, and no chunk shows the stop string."""
    full = fake_output_text(tok, 40)
    want = full[: full.index("Stop")]
    body = {"text": "Hi", "sampling_params": {"max_new_tokens": 40, "stop": ["Stop"]}}
    out = _gen(server, body)
    assert out["text"] == want
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "Stop"}
    events = _stream(server, body)
    assert events[-1] == "[DONE]"
    texts = [e["text"] for e in events[:-1]]
    assert texts[-1] == want
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert not any("Stop" in t for t in texts)


# ----------------------------------------------------------------------------- rid, n, batches
def test_sglang_32121_rid_reused_after_its_request_finished_runs_again(
    server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#32121 (a finished request's stale cleanup could abort a new request
    reusing its rid). Expected: a ``rid`` whose request has finished can be sent again, streamed
    and unstreamed, and each answer is whole (``finish_reason`` ``length``, all tokens) with
    ``meta_info.id`` equal to the rid."""
    rid = "native31-reused-rid"
    body = {"text": "Hi", "rid": rid, "sampling_params": {"max_new_tokens": 3}}
    for _ in range(2):
        out = _gen(server, body)
        assert out["meta_info"]["id"] == rid
        assert out["output_ids"] == fake_output_ids(tok, 3)
        events = _stream(server, body)
        assert events[-2]["meta_info"]["id"] == rid
        assert events[-2]["meta_info"]["finish_reason"]["type"] == "length"
        assert events[-2]["output_ids"] == fake_output_ids(tok, 3)


def test_astrovela_vane_673_n_samples_answer_a_list_of_dicts(server: ServerHandle, tok: Any) -> None:
    """AstroVela/vane#673 (parallel sampling turns one prompt into a batch: the unstreamed answer
    of ``n = 2`` is a list of result dicts, one per sample). Expected: a JSON list of two objects,
    each with its own ``text``, ``output_ids`` and ``meta_info`` (distinct ids); ``n = 1`` stays a
    single object."""
    out = _gen(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2, "n": 2}})
    assert isinstance(out, list) and len(out) == 2
    for item in out:
        assert item["text"] == fake_output_text(tok, 2)
        assert item["output_ids"] == fake_output_ids(tok, 2)
    assert out[0]["meta_info"]["id"] != out[1]["meta_info"]["id"]
    assert isinstance(_gen(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2, "n": 1}}), dict)


def test_sglang_8095_batch_with_a_return_logprob_list(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#8095 (``return_logprob`` for a batch of prompts failed on the engine's
    generate). Expected: a two-prompt batch with ``return_logprob: [true, false]`` answers two
    items; the first carries one ``(logprob, token_id, text)`` entry per output token with the
    output's ids, the second no output logprobs."""
    body = {
        "text": ["Hi", "Hello there"],
        "return_logprob": [True, False],
        "sampling_params": {"max_new_tokens": 3},
    }
    out = _gen(server, body)
    assert isinstance(out, list) and len(out) == 2
    lp = out[0]["meta_info"]["output_token_logprobs"]
    assert [e[1] for e in lp] == fake_output_ids(tok, 3)
    assert all(isinstance(e[0], float) and e[0] <= 0.0 for e in lp)
    assert not out[1]["meta_info"].get("output_token_logprobs")


# ----------------------------------------------------------------------------- control
@pytest.mark.parametrize("mode", ["abort", "in_place"])
def test_sglang_20272_pause_generation_with_nothing_running(
    server: ServerHandle, tok: Any, mode: str
) -> None:
    """sgl-project/sglang#20272 (``/pause_generation`` in ``in_place`` or ``retract`` mode raised
    ``AttributeError`` when no batch was running). Expected: the mode answers 200 with nothing
    running, ``/continue_generation`` answers 200, and generation works afterwards."""
    wait_running_reqs(server, 0)
    r = _post(server, "/pause_generation", {"mode": mode})
    c = _post(server, "/continue_generation", {})
    assert r.status_code == 200, r.text
    assert c.status_code == 200, c.text
    _alive(server, tok)


def test_sglang_20272_retract_and_settle_on_an_idle_scheduler(sched_model_dir: str) -> None:
    """sgl-project/sglang#20272 on the scheduler itself (the ``retract`` and ``in_place`` pause
    paths merged into a running batch that did not exist). Expected: ``retract_all`` and
    ``settle_in_flight`` on a scheduler with nothing running raise nothing and retract nothing,
    and a request afterwards gives the ids of the same request's cold run (flushed cache, before
    the pause); no page leaks."""
    ids = list(range(5, 21))
    s = make_scheduler(sched_model_dir)
    cold = cold_output_ids(s, "cold", ids, 4)
    out = s.retract_all()
    assert not getattr(out, "rids", None)
    s.settle_in_flight()
    assert run_one(s, "after-pause", ids, 4)["ids"] == cold
    assert_idle(s)


def test_sglang_32588_abort_of_a_running_request_by_rid(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#32588 (aborting a logical request by its rid must end it whatever stage
    it is in). Expected: ``/abort_request`` with a running request's rid ends its stream with
    ``finish_reason`` ``abort`` and ``[DONE]``; an abort of an unknown rid is harmless; nothing is
    left running."""
    rid = "native31-abort-running"
    held = {"text": "[hold] x", "rid": rid, "sampling_params": {"max_new_tokens": 400}}
    thread, box = in_background(_stream, server, held)
    wait_running_reqs(server, 1)
    assert _post(server, "/abort_request", {"rid": "native31-no-such-rid"}).status_code == 200
    assert _post(server, "/abort_request", {"rid": rid}).status_code == 200
    thread.join(60)
    events = box["out"]
    assert events[-1] == "[DONE]"
    assert events[-2]["meta_info"]["finish_reason"]["type"] == "abort"
    assert events[-2]["meta_info"]["id"] == rid
    wait_running_reqs(server, 0)
    _alive(server, tok)
