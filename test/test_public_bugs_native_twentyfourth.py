"""The twenty-fourth set of public bug reports on SGLang's native HTTP API (``/generate``'s
``finish_reason`` shapes, request ids of batches, streamed batch indices, text in logprobs,
over-long prompts, ``/tokenize`` and ``/detokenize``, ``/flush_cache``, ``/encode``,
``/get_model_info`` and ``/v1/models``), replayed against sglang-v4.

Fixture: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a ``[hold]`` prompt runs until it is aborted).
Oracles: SGLang 0.5.23's own code from the venv (its ``FINISH_*`` classes, ``SchedulerFlushWrapper``,
``GenerateReqInput._normalize_rid``, the ``model_info`` route's keys, its ``TokenizeResponse`` and
``DetokenizeResponse`` models and its embedding-route message, compiled from source by
``sglang_source_testutil`` where the module itself cannot be imported here), the DeepSeek-V4
tokenizer through ``transformers`` (conftest's ``tok``), the ``openai`` client's ``Model`` type,
and single non-streamed requests (cold runs) for the entries of a streamed batch. Every report
here passed as-is and is kept as a regression test.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import logging
import os
import time
import typing
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from server_fixture import (
    FAKE_CONTEXT_LEN,
    FAKE_TEXT,
    FAKE_VOCAB,
    ServerHandle,
    fake_output_ids,
    in_background,
    wait_running_reqs,
)
from sglang_source_testutil import sglang_classes, sglang_function

pytestmark = pytest.mark.timeout(240)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted
MODEL = "dsv4-test"  # held_fake_server's --served-model-name


@pytest.fixture(scope="module")
def server(held_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server (``[hold]`` prompts held until aborted)."""
    return held_fake_server


def _post(server: ServerHandle, path: str, body: Any) -> requests.Response:
    """POST ``body`` as JSON to ``path``."""
    return requests.post(server.url + path, json=body, timeout=60)


def _gen(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = _post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def _native_error(r: requests.Response, status: int) -> str:
    """Asserts SGLang's native error shape ``{"error": {"message", "type", "code"}}`` with
    ``status``; returns the message."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == status and isinstance(err["type"], str), err
    return str(err["message"])


def _still_serves(server: ServerHandle, tok: Any) -> None:
    """The server still answers a plain request exactly (``FAKE_TEXT``'s first tokens) and holds
    no running request."""
    out = _gen(server, {"text": "ok", "sampling_params": {"max_new_tokens": 2}})
    assert out["output_ids"] == fake_output_ids(tok, 2)
    wait_running_reqs(server, 0)


def _sglang_src(module_path: str) -> str:
    """The source text of one file of the installed SGLang."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin is not None
    with open(os.path.join(os.path.dirname(spec.origin), *module_path.split("/")), encoding="utf-8") as f:
        return f.read()


def _finish_classes() -> dict[str, type]:
    """SGLang 0.5.23's finish reasons (``srt/managers/schedule_batch.py``), compiled from source."""
    names = [
        "BaseFinishReason",
        "FINISH_MATCHED_TOKEN",
        "FINISH_MATCHED_STR",
        "FINISH_LENGTH",
        "FINISH_ABORT",
    ]
    scope = {"Union": typing.Union, "List": list, "Optional": typing.Optional}
    return sglang_classes("srt/managers/schedule_batch.py", names, scope)


def _hold(server: ServerHandle, rid: str, stream: bool = False) -> tuple[Any, dict[str, Any]]:
    """Start a ``[hold]`` request with id ``rid`` in the background; returns once it runs."""
    body = {"text": f"{HOLD} x", "rid": rid, "sampling_params": {"max_new_tokens": 100}, "stream": stream}
    t, box = in_background(lambda: _post(server, "/generate", body))
    wait_running_reqs(server, 1)
    return t, box


# --------------------------------------------------------------------------- finish_reason shapes
def test_sglang_1407_finish_reason_dicts_match_sglang(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#1407 (``meta_info.finish_reason`` is a dict, not a string: ``type`` plus
    the matched stop string or token id, or the length; PR #1684's ``matched``). Oracle: SGLang
    0.5.23's ``FINISH_MATCHED_STR``, ``FINISH_MATCHED_TOKEN``, ``FINISH_LENGTH`` and ``FINISH_ABORT``
    ``to_json()`` on the same values, and the ``FAKE_TEXT`` tokens through the HF tokenizer.
    Expected: each finish reason, non-streamed and on the last streamed chunk, equals SGLang's."""
    fin = _finish_classes()
    ids = tok.encode(FAKE_TEXT)
    cases = [
        ({"max_new_tokens": 3}, fin["FINISH_LENGTH"](length=3).to_json()),
        ({"max_new_tokens": 30, "stop": ["fox"]}, fin["FINISH_MATCHED_STR"](matched="fox").to_json()),
        (
            {"max_new_tokens": 30, "stop_token_ids": [ids[2]]},
            fin["FINISH_MATCHED_TOKEN"](matched=ids[2]).to_json(),
        ),
    ]
    for sp, want in cases:
        out = _gen(server, {"text": "a", "sampling_params": sp})
        assert out["meta_info"]["finish_reason"] == want, (sp, out["meta_info"])
        r = requests.post(
            server.url + "/generate", json={"text": "a", "sampling_params": sp, "stream": True}, timeout=60
        )
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        assert [c["meta_info"]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
        assert chunks[-1]["meta_info"]["finish_reason"] == want
    # a stop token id ends the text before it; the token itself is in output_ids (SGLang's shape)
    out = _gen(server, {"text": "a", "sampling_params": {"max_new_tokens": 30, "stop_token_ids": [ids[2]]}})
    assert out["output_ids"] == ids[:3] and out["text"] == tok.decode(ids[:2])
    t, box = _hold(server, "r24-abort-shape")
    assert _post(server, "/abort_request", {"rid": "r24-abort-shape"}).status_code == 200
    t.join(30)
    assert box["out"].status_code == 200, box["out"].text
    assert box["out"].json()["meta_info"]["finish_reason"] == fin["FINISH_ABORT"]().to_json()
    _still_serves(server, tok)


# --------------------------------------------------------------------------- over-long prompts
@pytest.mark.parametrize("field", ["text", "input_ids"])
def test_sglang_2956_overlong_prompt_is_400_not_a_one_token_200(
    server: ServerHandle, tok: Any, field: str
) -> None:
    """sgl-project/sglang#2956 (a request too long for the model came back as a 200 with one
    completion token instead of a 400: the scheduler's abort carried no status code). Oracle: the
    fake model's context length (``FAKE_CONTEXT_LEN``, the server's config) and the HF tokenizer's
    count of the prompt. Expected: a prompt longer than the context is a 400 in SGLang's native
    error shape whose message gives the context length; nothing stays running."""
    n = FAKE_CONTEXT_LEN + 40
    body: dict[str, Any] = {"sampling_params": {"max_new_tokens": 3}}
    if field == "text":
        body["text"] = " x" * n
        assert len(tok.encode(body["text"])) > FAKE_CONTEXT_LEN
    else:
        body["input_ids"] = fake_output_ids(tok, n)
    msg = _native_error(_post(server, "/generate", body), 400)
    assert str(FAKE_CONTEXT_LEN) in msg and "context length" in msg
    # batched: the whole batch is refused, naming the entry
    batch = {
        "input_ids": [fake_output_ids(tok, 4), fake_output_ids(tok, n)],
        "sampling_params": {"max_new_tokens": 1},
    }
    assert str(FAKE_CONTEXT_LEN) in _native_error(_post(server, "/generate", batch), 400)
    _still_serves(server, tok)


def _sglang_admits(n_input: int, max_new_tokens: int) -> bool:
    """SGLang 0.5.23's ``TokenizerManager._validate_one_request`` length rule (without
    ``--allow-auto-truncate``): the input must be shorter than the context length, and input plus
    ``max_new_tokens`` must not exceed it."""
    return n_input < FAKE_CONTEXT_LEN and n_input + max_new_tokens <= FAKE_CONTEXT_LEN


@pytest.mark.parametrize(
    ("n_input", "max_new_tokens"),
    [
        (FAKE_CONTEXT_LEN - 10, 30),
        (FAKE_CONTEXT_LEN - 10, 10),
        (FAKE_CONTEXT_LEN - 10, 11),
        (FAKE_CONTEXT_LEN - 1, 1),
    ],
)
def test_sglang_4048_prompt_plus_completion_over_context_is_400(
    server: ServerHandle, tok: Any, n_input: int, max_new_tokens: int
) -> None:
    """sgl-project/sglang#4048 (a prompt beyond the allowed length crashed the scheduler with a
    ``TypeError`` on ``max_new_tokens`` instead of answering an error). Oracle: SGLang 0.5.23's
    tokenizer-manager rule (:func:`_sglang_admits`, its source checked for the message) with the
    server's context length ``FAKE_CONTEXT_LEN``. Expected: a request SGLang refuses is a 400
    naming the context length; one it admits answers exactly ``max_new_tokens`` tokens."""
    assert "Requested token count exceeds the model's maximum context length" in _sglang_src(
        "srt/managers/tokenizer_manager.py"
    )
    prompt = fake_output_ids(tok, n_input)
    r = _post(
        server, "/generate", {"input_ids": prompt, "sampling_params": {"max_new_tokens": max_new_tokens}}
    )
    if not _sglang_admits(n_input, max_new_tokens):
        assert str(FAKE_CONTEXT_LEN) in _native_error(r, 400)
    else:
        assert r.status_code == 200, r.text
        meta = r.json()["meta_info"]
        assert (meta["prompt_tokens"], meta["completion_tokens"]) == (n_input, max_new_tokens)
        assert meta["finish_reason"] == {"type": "length", "length": max_new_tokens}
    _still_serves(server, tok)


# --------------------------------------------------------------------------- request ids, indices
def test_sglang_7508_batch_with_one_rid_gets_indexed_ids(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#7508 (a batch given one string ``rid`` was refused; it now expands to
    ``rid_0 .. rid_{N-1}``). Oracle: SGLang 0.5.23's ``GenerateReqInput._normalize_rid`` (from
    source) on the same body. Expected: ``meta_info.id`` of each entry is SGLang's id, in order;
    a list of ids is kept as given; a list whose length is not the batch's is a 400."""
    normalize = sglang_function(
        "srt/managers/io_struct.py", "_normalize_rid", {"uuid": uuid}, "GenerateReqInput"
    )
    for rid in ("r24-batch", ["r24-b0", "r24-b1", "r24-b2"]):
        oracle = SimpleNamespace(rid=rid, batch_size=3)
        normalize(oracle, 3)
        out = _gen(server, {"text": ["a", "b", "c"], "rid": rid, "sampling_params": {"max_new_tokens": 1}})
        assert [o["meta_info"]["id"] for o in out] == oracle.rid
    short = SimpleNamespace(rid=["only-one"], batch_size=3)
    with pytest.raises(ValueError):
        normalize(short, 3)
    r = _post(
        server,
        "/generate",
        {"text": ["a", "b", "c"], "rid": ["only-one"], "sampling_params": {"max_new_tokens": 1}},
    )
    _native_error(r, 400)
    _still_serves(server, tok)


def test_sglang_11311_streamed_batch_and_n_chunks_carry_their_index(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#11311 and ai-dynamo/dynamo#8745 (with ``n > 1`` or a batch, streamed
    chunks must keep their ``index`` so a client can keep the choices apart; a wrong rid-to-index
    map lost index 1). Oracle: SGLang 0.5.23's streamed batch sets ``index`` from its rid-to-index
    map (checked in its source) and cold non-streamed runs of the same requests. Expected: every
    chunk has an ``index`` in range, each index keeps one ``meta_info.id``, its chunks grow, and
    its last chunk equals the non-streamed entry of the same position."""
    assert 'result["index"] = rid_to_index[' in _sglang_src("srt/managers/tokenizer_manager.py")
    cases = [
        {"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 2}, {"max_new_tokens": 5}]},
        {"text": "a", "sampling_params": {"max_new_tokens": 3, "n": 2}},
    ]
    for body in cases:
        cold = _gen(server, body)
        r = requests.post(server.url + "/generate", json={**body, "stream": True}, timeout=60)
        assert r.status_code == 200, r.text
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        by_index: dict[int, list[Any]] = {}
        for c in chunks:
            by_index.setdefault(c["index"], []).append(c)
        assert sorted(by_index) == list(range(len(cold)))
        for i, cs in by_index.items():
            assert len({c["meta_info"]["id"] for c in cs}) == 1
            lens = [len(c["output_ids"]) for c in cs]
            assert lens == sorted(lens)
            last = cs[-1]
            assert (last["text"], last["output_ids"]) == (cold[i]["text"], cold[i]["output_ids"])
            assert last["meta_info"]["finish_reason"] == cold[i]["meta_info"]["finish_reason"]
    assert [len(o["output_ids"]) for o in _gen(server, cases[0])] == [2, 5]


# --------------------------------------------------------------------------- logprob texts
def test_vllm_48567_logprob_texts_are_the_decoded_ids(server: ServerHandle, tok: Any) -> None:
    """vllm-project/vllm#48567 (turning logprob token ids into text crashed, or gave the wrong text,
    on ids the tokenizer could not convert). Oracle: the HF tokenizer's ``decode([id])`` of each
    id, and SGLang's ``[logprob, id, text]`` triple with ``None`` as the text unless
    ``return_text_in_logprobs``. Expected: every input, output and top-logprob entry carries the
    decoding of its own id (or ``None``), with the requested number of top entries."""
    prompt = fake_output_ids(tok, 6)
    base = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": 4},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 2,
    }
    for with_text in (True, False):
        meta = _gen(server, {**base, "return_text_in_logprobs": with_text})["meta_info"]
        assert [e[1] for e in meta["input_token_logprobs"]] == prompt
        assert [e[1] for e in meta["output_token_logprobs"]] == fake_output_ids(tok, 4)
        entries = meta["input_token_logprobs"] + meta["output_token_logprobs"]
        for tops in meta["output_top_logprobs"]:
            assert len(tops) == 2
            entries += tops
        for lp, tid, text in entries:
            assert lp is None or isinstance(lp, float)
            assert text == (tok.decode([tid]) if with_text else None), (tid, text)


# --------------------------------------------------------------------------- tokenize, detokenize
def test_sglang_4281_tokenize_route_tokens_and_count(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#4281 (a ``/tokenize`` route returning the tokens and their count).
    Oracle: the HF tokenizer's ``encode`` and ``decode(skip_special_tokens=True)``, SGLang 0.5.23's
    ``TokenizeResponse`` and ``DetokenizeResponse`` models, and ``FAKE_CONTEXT_LEN``. Expected: a
    string prompt answers its ids and count, a list of prompts one list and one count per prompt,
    ``max_model_len`` is the served context length (vLLM's meaning of the field, which sglang-v4
    follows; SGLang 0.5.23 reports the tokenizer's ``model_max_length`` there instead);
    ``/detokenize`` of the ids (one list or several) gives the HF text back."""
    from sglang.srt.entrypoints.openai.protocol import DetokenizeResponse, TokenizeResponse

    prompts = ["hello world", FAKE_TEXT, "你好"]
    for path in ("/tokenize", "/v1/tokenize"):
        body = _post(server, path, {"model": MODEL, "prompt": prompts[1]}).json()
        TokenizeResponse.model_validate(body)
        assert body["tokens"] == tok.encode(prompts[1]) and body["count"] == len(body["tokens"])
        assert body["max_model_len"] == FAKE_CONTEXT_LEN
        batch = _post(server, path, {"prompt": prompts}).json()
        TokenizeResponse.model_validate(batch)
        assert batch["tokens"] == [tok.encode(p) for p in prompts]
        assert batch["count"] == [len(tok.encode(p)) for p in prompts]
    ids = [tok.encode(p) for p in prompts]
    for path in ("/detokenize", "/v1/detokenize"):
        one = _post(server, path, {"tokens": ids[1]}).json()
        DetokenizeResponse.model_validate(one)
        assert one["text"] == tok.decode(ids[1], skip_special_tokens=True)
        many = _post(server, path, {"tokens": ids}).json()
        DetokenizeResponse.model_validate(many)
        assert many["text"] == [tok.decode(i, skip_special_tokens=True) for i in ids]


@pytest.mark.parametrize("bad", [2**63, 2**64, -1, FAKE_VOCAB, 10**12])
def test_vllm_34468_detokenize_huge_ids_are_400_not_500(server: ServerHandle, tok: Any, bad: int) -> None:
    """vllm-project/vllm#34468 (``/detokenize`` with the id ``2**63`` overflowed int64 in the
    tokenizer: a 500 instead of a validation error). Oracle: the model's vocabulary size
    (``FAKE_VOCAB``, its config.json) bounds the valid ids. Expected: an id outside
    ``[0, vocab)``, alone or inside a batch, is a 4xx naming ``tokens`` (OpenAI's error shape);
    ``/generate`` refuses it in ``input_ids`` the same way; the server keeps serving."""
    for tokens in ([bad], [[5, 6], [5, bad]]):
        r = _post(server, "/detokenize", {"tokens": tokens})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "tokens" or "tokens" in r.json()["message"]
    _native_error(
        _post(server, "/generate", {"input_ids": [5, bad], "sampling_params": {"max_new_tokens": 1}}), 400
    )
    good = tok.encode(FAKE_TEXT)
    assert _post(server, "/detokenize", {"tokens": good}).json()["text"] == tok.decode(good)
    _still_serves(server, tok)


# --------------------------------------------------------------------------- flush_cache
def _flush_oracle(timeout_s: float) -> str:
    """The body SGLang 0.5.23's ``/flush_cache?timeout=T`` answers while requests run: its own
    ``SchedulerFlushWrapper`` (from source) on a scheduler that is never idle (so its flush is
    refused), then the route's ``message or "Flush cache failed.\\n"``."""

    @dataclasses.dataclass
    class Out:  # the fields of SGLang's FlushCacheReqOutput
        success: bool
        message: str = ""

    scope: dict[str, Any] = {"FlushCacheReqOutput": Out, "FlushCacheReqInput": object, "time": time}
    scope.update(logging=logging, Callable=typing.Callable, Optional=typing.Optional, Tuple=tuple)
    wrapper_cls = sglang_classes(
        "srt/managers/scheduler_components/flush_wrapper.py", ["SchedulerFlushWrapper"], scope
    )
    sent: list[Any] = []
    w = wrapper_cls["SchedulerFlushWrapper"](
        flush_cache=lambda: False, is_fully_idle=lambda: False, send_output=lambda out, req: sent.append(out)
    )
    out = w.handle(SimpleNamespace(timeout_s=timeout_s))
    if out is None:  # deferred: answered once the deadline passes
        time.sleep(timeout_s)
        w.check_pending()
        out = sent[0]
    assert not out.success
    return out.message or "Flush cache failed.\n"


def test_sglang_21490_flush_cache_while_busy_answers_sglang_messages(server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#21490 (``/flush_cache`` while requests run: refused with an explicit
    message; with ``?timeout=T`` it waits for idle and says it timed out). Oracle: SGLang 0.5.23's
    ``SchedulerFlushWrapper`` (from source) and its route's success text (from its source).
    Expected: with a request held, a plain flush and a timed flush are 400 with SGLang's bodies and
    the held request is untouched; once it is aborted the flush is a 200 with SGLang's text."""
    t, box = _hold(server, "r24-flush")
    try:
        r = requests.post(server.url + "/flush_cache", timeout=30)
        assert (r.status_code, r.text) == (400, _flush_oracle(0.0))
        r = requests.post(server.url + "/flush_cache?timeout=0.3", timeout=30)
        assert (r.status_code, r.text) == (400, _flush_oracle(0.3))
        wait_running_reqs(server, 1)
    finally:
        _post(server, "/abort_request", {"rid": "r24-flush"})
        t.join(30)
    assert box["out"].json()["meta_info"]["finish_reason"]["type"] == "abort"
    wait_running_reqs(server, 0)
    fn = next(
        n
        for n in ast.walk(ast.parse(_sglang_src("srt/entrypoints/http_server.py")))
        if isinstance(n, ast.AsyncFunctionDef) and n.name == "flush_cache"
    )
    texts = [n.value for n in ast.walk(fn) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    flushed = next(s for s in texts if s.startswith("Cache flushed."))
    for method in ("POST", "GET"):
        r = requests.request(method, server.url + "/flush_cache", timeout=30)
        assert (r.status_code, r.text) == (200, flushed)
    _still_serves(server, tok)


# --------------------------------------------------------------------------- /encode
@pytest.mark.parametrize(
    "body",
    [
        {"text": "one"},
        {"text": ["one"]},
        {"text": ["one", "two"]},
        {"input_ids": [5, 6]},
        {"input_ids": [[5, 6]]},
    ],
)
def test_sglang_6427_encode_single_element_list_is_a_4xx_like_a_string(
    server: ServerHandle, tok: Any, body: dict[str, Any]
) -> None:
    """sgl-project/sglang#6427 and sgl-project/sglang#6568 (``/encode`` with a list of one text
    crashed in the tokenizer, a 500, where the same text alone worked). Oracle: SGLang 0.5.23's
    tokenizer manager refuses embedding requests on a generation model with its message (read from
    its source). Expected: on this generation model every shape of ``/encode`` and ``/classify``
    input is the same 400 in SGLang's native error shape carrying SGLang's message; no 500."""
    src = _sglang_src("srt/managers/tokenizer_manager.py")
    for path in ("/encode", "/classify"):
        msg = _native_error(_post(server, path, body), 400)
        first = msg.split(". ")[0] + "."
        assert first == "This model does not appear to be an embedding model by default."
        assert f'"{first} "' in src
    _still_serves(server, tok)


# --------------------------------------------------------------------------- model info, models
def test_sglang_11303_get_model_info_has_sglang_fields(server: ServerHandle) -> None:
    """sgl-project/sglang#11303 (the model-info answer, with ``model_path``, ``tokenizer_path``,
    ``is_generation``, ``weight_version``, ``served_model_name`` ...). Oracle: the keys of SGLang
    0.5.23's ``model_info`` route (its source, via ``ast``), the fake model's ``config.json``
    (``model_type``, ``architectures``) and the launch flags. Expected: ``/get_model_info`` and
    ``/model_info`` carry every SGLang key with these values and agree with each other."""
    fn = next(
        n
        for n in ast.walk(ast.parse(_sglang_src("srt/entrypoints/http_server.py")))
        if isinstance(n, ast.AsyncFunctionDef) and n.name == "model_info"
    )
    keys = {
        k.value
        for d in ast.walk(fn)
        if isinstance(d, ast.Dict)
        for k in d.keys
        if isinstance(k, ast.Constant)
    }
    assert {"model_path", "tokenizer_path", "is_generation", "weight_version"} <= keys
    a = requests.get(server.url + "/get_model_info", timeout=30).json()
    b = requests.get(server.url + "/model_info", timeout=30).json()
    assert a == b and keys <= set(a), keys - set(a)
    cfg = json.loads(open(os.path.join(a["model_path"], "config.json"), encoding="utf-8").read())
    assert (a["model_type"], a["architectures"]) == (cfg["model_type"], cfg["architectures"])
    assert a["is_generation"] is True and a["served_model_name"] == MODEL
    assert a["tokenizer_path"] == a["model_path"]  # no --tokenizer-path: SGLang's default
    assert a["weight_version"] == "default"  # SGLang's --weight-version default
    assert a["has_image_understanding"] is False and a["has_audio_understanding"] is False


def test_sglang_4809_v1_models_has_max_model_len(server: ServerHandle) -> None:
    """sgl-project/sglang#4809 (``/v1/models`` includes ``max_model_len``, vLLM's name for the
    context length, so routers such as OpenRouter need not be told it). Oracle: the ``openai``
    client's ``Model`` type and the server's context length (``FAKE_CONTEXT_LEN``). Expected: the
    list parses as OpenAI models, its one entry is the served name with ``max_model_len`` equal to
    the context length, and ``/v1/models/{id}`` answers the same entry."""
    from openai.types import Model

    listing = requests.get(server.url + "/v1/models", timeout=30).json()
    assert listing["object"] == "list" and len(listing["data"]) == 1
    entry = listing["data"][0]
    m = Model.model_validate(entry)
    assert (m.id, m.object) == (MODEL, "model")
    assert entry["max_model_len"] == FAKE_CONTEXT_LEN
    assert requests.get(server.url + f"/v1/models/{MODEL}", timeout=30).json() == entry
    r = requests.get(server.url + "/v1/models/not-served", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == 404


# --------------------------------------------------------------------------- last streamed chunk
@pytest.mark.parametrize("max_new_tokens", [1, 2, 6])
def test_dynamo_3531_finish_reason_rides_on_the_last_tokens(
    server: ServerHandle, tok: Any, max_new_tokens: int
) -> None:
    """ai-dynamo/dynamo#3531 and llm-d/llm-d-inference-sim#545 (when a streamed chunk carries the
    finish reason it was sent with no tokens, so the last token(s) were lost; the finish reason
    belongs on the chunk with the last tokens, not on a separate empty one). Oracle: a cold
    non-streamed run of the same request and ``FAKE_TEXT``'s tokens through the HF tokenizer.
    Expected: exactly one chunk has a ``finish_reason``, it is the last ``data`` chunk before
    ``[DONE]``, and it carries every output token and the whole text of the cold run."""
    body = {"text": "a", "sampling_params": {"max_new_tokens": max_new_tokens}}
    cold = _gen(server, body)
    assert cold["output_ids"] == fake_output_ids(tok, max_new_tokens)
    r = requests.post(server.url + "/generate", json={**body, "stream": True}, timeout=60)
    assert r.status_code == 200, r.text
    lines = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    finished = [i for i, c in enumerate(chunks) if c["meta_info"]["finish_reason"] is not None]
    assert finished == [len(chunks) - 1]
    last = chunks[-1]
    assert (last["text"], last["output_ids"]) == (cold["text"], cold["output_ids"])
    assert last["meta_info"]["completion_tokens"] == max_new_tokens
    assert last["meta_info"]["finish_reason"] == cold["meta_info"]["finish_reason"]
