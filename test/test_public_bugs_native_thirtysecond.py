"""The thirty-second set of public bug reports on SGLang's native API, replayed against sglang-v4:
logprob knobs sent without ``return_logprob`` (ignored, as SGLang's scheduler ignores them, even
out of range), ``logprob_start_len`` past the prompt with ``return_logprob`` (a 400 naming the
field), top-k logprobs for every sample of ``n > 1``, ``output_ids`` of a token-id prompt holding
only the generated tokens, ``no_stop_trim`` keeping the stop string but nothing after it,
per-prompt prompt logprobs in a batch (a loglikelihood client), the default prompt-logprob span
on the real scheduler, ``/model_info`` against SGLang 0.5.23's keys and the served
``config.json``, per-prompt ``null`` ``custom_logit_processor`` in a batch, streamed logprobs with
token texts and ``abort_all`` ending every running request.

Fixture: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a prompt holding ``[hold]`` runs until aborted);
conftest's ``sched_model_dir`` for a CPU ``Scheduler`` (``scheduler_testutil``).
Oracles: the DeepSeek-V4 tokenizer through ``transformers`` (conftest's ``tok``: the fake model's
output ids and texts, token texts), the model directory's ``config.json``, SGLang 0.5.23's
documented request rules and response keys, ``json.loads`` of the SSE payloads and the reports'
stated expected values, and a cold run of the same request.
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
    used_pages,
    wait_running_reqs,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server."""
    return held_fake_server


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


_LOGPROB_KEYS = ("input_token_logprobs", "output_token_logprobs", "input_top_logprobs", "output_top_logprobs")


# ----------------------------------------------------------------------------- logprob knobs
def test_sglang_16240_logprob_knobs_without_return_logprob_are_ignored(
    server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#16240 (the scheduler sets ``logprob_start_len`` to -1 when
    ``return_logprob`` is false: the knob is ignored). Expected: ``logprob_start_len`` (in range,
    or past the prompt's end) and ``top_logprobs_num`` (even above the vocabulary) sent without
    ``return_logprob`` answer 200 with the plain text and no logprob keys in ``meta_info``, as
    SGLang 0.5.23 answers."""
    prompt = tok.encode("Hello there", add_special_tokens=False)
    for extra in (
        {"logprob_start_len": 0, "top_logprobs_num": 3},
        {"logprob_start_len": len(prompt) + 50},
        {"return_logprob": False, "logprob_start_len": 10_000, "top_logprobs_num": 10**9},
    ):
        out = _gen(server, {"input_ids": prompt, "sampling_params": {"max_new_tokens": 3}, **extra})
        assert out["output_ids"] == fake_output_ids(tok, 3), extra
        assert out["text"] == fake_output_text(tok, 3), extra
        assert not any(k in out["meta_info"] for k in _LOGPROB_KEYS), (extra, out["meta_info"])


def test_sglang_16240_logprob_start_len_past_the_prompt_with_return_logprob_is_a_400(
    server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#16240 (the same scheduler code refuses a ``logprob_start_len`` higher
    than the prompt when logprobs are asked for). Expected: with ``return_logprob`` true, a start
    one past the prompt is a 400 naming ``logprob_start_len``; a start equal to the prompt length
    is accepted; nothing leaks."""
    prompt = tok.encode("Hello there", add_special_tokens=False)
    body = {"input_ids": prompt, "return_logprob": True, "sampling_params": {"max_new_tokens": 2}}
    _assert_400_naming(
        _post(server, "/generate", {**body, "logprob_start_len": len(prompt) + 1}), "logprob_start_len"
    )
    out = _gen(server, {**body, "logprob_start_len": len(prompt)})
    assert [e[1] for e in out["meta_info"]["output_token_logprobs"]] == fake_output_ids(tok, 2)
    assert used_pages(server) == 0
    _alive(server, tok)


def test_sglang_11106_default_logprob_start_len_gives_output_logprobs_only(sched_model_dir: str) -> None:
    """sgl-project/sglang#11106 (a router port of ``/generate`` mixed up ``logprob_start_len``'s
    meaning: SGLang's default -1 returns output logprobs only, ``0`` starts at the first prompt
    token). Expected, on the real scheduler: ``return_logprob`` with ``logprob_start_len: -1``
    gives no prompt logprobs and one per output token; ``0`` gives one prompt entry per token, the
    first ``None``; the output ids match the same request's cold run; no page leaks."""
    ids = list(range(5, 17))
    s = make_scheduler(sched_model_dir)
    cold = cold_output_ids(s, "cold32", ids, 3)
    out = run_one(s, "lsl-default", ids, 3, return_logprob=True, logprob_start_len=-1)
    assert out["in_lp"] == [] and len(out["lp"]) == 3 and out["ids"] == cold
    out = run_one(s, "lsl-zero", ids, 3, return_logprob=True, logprob_start_len=0)
    assert len(out["in_lp"]) == len(ids) and out["in_lp"][0] is None
    assert all(isinstance(v, float) and v <= 0.0 for v in out["in_lp"][1:])
    assert out["ids"] == cold
    assert_idle(s)


def test_lm_eval_2997_loglikelihood_batch_gets_each_prompts_own_logprobs(
    server: ServerHandle, tok: Any
) -> None:
    """EleutherAI/lm-evaluation-harness#2997 (its ``sglang-generate`` model scores loglikelihood
    through ``/generate``: a batch of token-id prompts with ``return_logprob`` and
    ``logprob_start_len: 0``, reading ``meta_info.input_token_logprobs``). Expected: each item of a
    batch of two prompts of different lengths carries exactly its own prompt's ids, one entry per
    token, the first logprob ``None``."""
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("Yes.", "Is deep learning awesome? No.")]
    assert len(prompts[0]) != len(prompts[1])
    out = _gen(
        server,
        {
            "input_ids": prompts,
            "return_logprob": True,
            "logprob_start_len": 0,
            "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        },
    )
    assert isinstance(out, list) and len(out) == 2
    for item, ids in zip(out, prompts):
        lp = item["meta_info"]["input_token_logprobs"]
        assert [e[1] for e in lp] == ids
        assert lp[0][0] is None
        assert item["meta_info"]["prompt_tokens"] == len(ids)


def test_sglang_1176_every_sample_of_n_gets_its_top_logprobs(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#1176 (with ``n = 4`` some choices came back with empty
    ``top_logprobs``). Expected: ``n = 3`` with ``top_logprobs_num: 2`` answers three items, each
    with one top-logprob list of exactly two ``(logprob, token_id, text)`` entries per output
    token and output logprob ids equal to its output ids."""
    out = _gen(
        server,
        {
            "text": "Hi",
            "return_logprob": True,
            "top_logprobs_num": 2,
            "sampling_params": {"max_new_tokens": 3, "n": 3},
        },
    )
    assert isinstance(out, list) and len(out) == 3
    for item in out:
        meta = item["meta_info"]
        assert [e[1] for e in meta["output_token_logprobs"]] == item["output_ids"] == fake_output_ids(tok, 3)
        tops = meta["output_top_logprobs"]
        assert len(tops) == 3 and all(len(t) == 2 for t in tops), tops
        assert all(isinstance(e[0], float) and isinstance(e[1], int) for t in tops for e in t)


def test_xinference_3553_streamed_logprobs_with_token_texts(server: ServerHandle, tok: Any) -> None:
    """xorbitsai/inference#3553 (a client passing logprobs to SGLang's ``/generate`` broke its
    stream). Expected: a streamed request with ``return_logprob``, ``top_logprobs_num`` and
    ``return_text_in_logprobs`` sends JSON payloads then ``[DONE]``; the last payload's
    ``output_token_logprobs`` has one ``(logprob, id, text)`` per token, the ids the fake model's,
    each text the tokenizer's decoding of its id, as many as ``completion_tokens``."""
    events = _stream(
        server,
        {
            "text": "Hi",
            "return_logprob": True,
            "top_logprobs_num": 2,
            "return_text_in_logprobs": True,
            "sampling_params": {"max_new_tokens": 4},
        },
    )
    assert events[-1] == "[DONE]"
    meta = events[-2]["meta_info"]
    lp = meta["output_token_logprobs"]
    assert [e[1] for e in lp] == fake_output_ids(tok, 4)
    assert [e[2] for e in lp] == [tok.decode([i]) for i in fake_output_ids(tok, 4)]
    assert len(lp) == meta["completion_tokens"] == 4
    assert all(len(t) == 2 and all(isinstance(e[2], str) for e in t) for t in meta["output_top_logprobs"])


# ----------------------------------------------------------------------------- output ids, stops
def test_sglang_17240_output_ids_of_a_token_id_prompt_hold_only_new_tokens(
    server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#17240 (``generate(input_ids=...)`` returned ``output_ids`` holding tokens
    of the prompt's tail, out of step with ``text``). Expected: for a token-id prompt, unstreamed
    and streamed, ``output_ids`` are exactly the generated ids, their count is
    ``completion_tokens``, and their decoding is ``text``."""
    prompt = tok.encode("A longer prompt whose tail could leak into the output", add_special_tokens=False)
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 5}}
    out = _gen(server, body)
    assert out["output_ids"] == fake_output_ids(tok, 5)
    assert out["meta_info"]["completion_tokens"] == 5
    assert out["meta_info"]["prompt_tokens"] == len(prompt)
    assert tok.decode(out["output_ids"]) == out["text"]
    last = _stream(server, body)[-2]
    assert last["output_ids"] == fake_output_ids(tok, 5)
    assert last["text"] == out["text"]


def test_sglang_25980_no_stop_trim_keeps_the_stop_string_and_nothing_after(
    server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#25980 (after a stop string matched, text past it was still emitted; with
    ``no_stop_trim`` the matched stop string is kept but the text after it is cut). Expected: with
    ``stop: ["Sto"]`` (ending inside a token), the text is the fake model's text through the first
    ``Sto`` with ``no_stop_trim``, and up to it without; ``finish_reason`` names the match;
    streamed text ends the same."""
    full = fake_output_text(tok, 40)
    cut = full.index("Sto")
    base = {"text": "Hi", "sampling_params": {"max_new_tokens": 40, "stop": ["Sto"]}}
    kept = {**base, "sampling_params": {**base["sampling_params"], "no_stop_trim": True}}
    out = _gen(server, kept)
    assert out["text"] == full[: cut + 3]
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "Sto"}
    assert _gen(server, base)["text"] == full[:cut]
    events = _stream(server, kept)
    assert events[-2]["text"] == full[: cut + 3]


# ----------------------------------------------------------------------------- batch fields
def test_sglang_2396_null_custom_logit_processor_per_prompt_in_a_batch(
    server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#2396 (``custom_logit_processor`` became a per-request ``/generate`` field,
    a list with one entry per prompt in a batch). Expected: a batch whose every entry is ``null``
    answers as without the field; one non-null entry is a 400 naming ``custom_logit_processor``
    (this server runs no custom processors); the server serves on."""
    body = {"text": ["Hi", "Hello"], "sampling_params": {"max_new_tokens": 2}}
    out = _gen(server, {**body, "custom_logit_processor": [None, None]})
    assert [o["text"] for o in out] == [fake_output_text(tok, 2)] * 2
    r = _post(server, "/generate", {**body, "custom_logit_processor": [None, '{"callable": "x"}']})
    _assert_400_naming(r, "custom_logit_processor")
    _alive(server, tok)


# ----------------------------------------------------------------------------- routes
def test_aisimulate_89_model_info_has_sglang_keys_and_the_config_values(
    server: ServerHandle, shared_fake_model_dir: Path
) -> None:
    """ai-dynamo/aisimulate#89 (a client read ``/model_info``, SGLang's current name of the
    deprecated ``/get_model_info``, for ``model_path``, ``is_generation`` and the model's
    ``model_type`` / ``architectures``). Expected: both routes answer the same body; it holds SGLang
    0.5.23's keys; ``is_generation`` is true; ``model_type`` and ``architectures`` are the served
    ``config.json``'s."""
    a = requests.get(server.url + "/model_info", timeout=30)
    b = requests.get(server.url + "/get_model_info", timeout=30)
    assert a.status_code == b.status_code == 200
    info = a.json()
    assert info == b.json()
    for key in (
        "model_path",
        "tokenizer_path",
        "is_generation",
        "preferred_sampling_params",
        "weight_version",
        "has_image_understanding",
        "has_audio_understanding",
        "model_type",
        "architectures",
    ):
        assert key in info, (key, info)
    cfg = json.loads((Path(shared_fake_model_dir) / "config.json").read_text())
    assert info["is_generation"] is True
    assert info["model_type"] == cfg["model_type"]
    assert info["architectures"] == cfg["architectures"]


def test_sglang_omni_1206_abort_all_ends_every_running_request(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang-omni#1206 (an SGLang-compatible ``/abort_request`` with ``abort_all``
    must end every request, not stop at the first). Expected: two running streamed requests both
    end with ``finish_reason`` ``abort`` and ``[DONE]`` after one ``abort_all`` call; nothing is
    left running and the server serves on."""
    held = [
        {"text": f"[hold] {i}", "rid": f"native32-abort-all-{i}", "sampling_params": {"max_new_tokens": 400}}
        for i in range(2)
    ]
    jobs = [in_background(_stream, server, body) for body in held]
    wait_running_reqs(server, 2)
    assert _post(server, "/abort_request", {"abort_all": True}).status_code == 200
    for (thread, box), body in zip(jobs, held):
        thread.join(60)
        events = box["out"]
        assert events[-1] == "[DONE]"
        assert events[-2]["meta_info"]["finish_reason"]["type"] == "abort"
        assert events[-2]["meta_info"]["id"] == body["rid"]
    wait_running_reqs(server, 0)
    _alive(server, tok)
