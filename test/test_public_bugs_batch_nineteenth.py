"""Public reports on the secondary OpenAI routes (``/v1/files``, ``/v1/batches``, ``/tokenize``),
ported to this server: each test names its report and checks the answer against the ``openai``
client's own types, the route's direct answer, or the tokenizer itself.

All run in process over the fake tokenizer manager of ``openai_fake_tm`` (no server start-up).
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest
from batches_testutil import MODEL, HoldingTM, chat_line, jsonl, read_lines, run_batch, wait_batch
from fastapi.testclient import TestClient
from openai.types import Batch
from openai.types.chat import ChatCompletion
from openai.types.completion import Completion
from openai_fake_tm import FakeTM, app_client, oai_client
from sglang_v4.entrypoints.openai.serving_batch import BatchMixin


def completion_line(cid: str, prompt: str, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": cid,
        "method": "POST",
        "url": "/v1/completions",
        "body": {"model": MODEL, "prompt": prompt, **body},
    }


def _usage_sums(answers: list[Any]) -> tuple[int, int, int]:
    """(input, output, total) tokens summed over answers parsed by the client's own types."""
    ins = sum(a.usage.prompt_tokens for a in answers)
    outs = sum(a.usage.completion_tokens for a in answers)
    return ins, outs, ins + outs


# stdapi-ai/stdapi.ai#146: a batch reports its token usage (OpenAI's ``Batch.usage``) summed
# over the answered requests; it was missing here (``usage`` null on every batch).
def test_chat_batch_usage_is_the_sum_of_its_answers_usage(batches_client: openai.OpenAI) -> None:
    rows = [
        chat_line("a", "hello"),
        chat_line("b", "a longer prompt than the first"),
        chat_line("c", "x", max_tokens=2),
    ]
    b = run_batch(batches_client, rows)
    assert b.status == "completed"
    answers = [
        ChatCompletion.model_validate(x["response"]["body"])
        for x in read_lines(batches_client, b.output_file_id)
    ]
    assert len(answers) == 3
    assert b.usage is not None  # parsed by the client's BatchUsage
    ins, outs, total = _usage_sums(answers)
    assert (b.usage.input_tokens, b.usage.output_tokens, b.usage.total_tokens) == (ins, outs, total)
    assert b.usage.input_tokens_details.cached_tokens == 0  # no cache report on this server
    assert b.usage.output_tokens_details.reasoning_tokens == sum(
        (a.usage.completion_tokens_details.reasoning_tokens if a.usage.completion_tokens_details else 0)
        for a in answers
    )
    assert b.model == MODEL  # the model that answered, as the answers name it


# stdapi-ai/stdapi.ai#146 (second half): a batch passes ``finalizing`` on its way to ``completed``,
# so ``finalizing_at`` is set and lies between ``in_progress_at`` and ``completed_at``.
def test_completed_batch_passed_finalizing(batches_client: openai.OpenAI) -> None:
    b = run_batch(batches_client, [chat_line("a", "hi")])
    assert b.status == "completed"
    assert b.in_progress_at is not None and b.finalizing_at is not None and b.completed_at is not None
    assert b.created_at <= b.in_progress_at <= b.finalizing_at <= b.completed_at


# stdapi-ai/stdapi.ai#146: the usage of a ``/v1/completions`` batch, and failed lines add nothing.
def test_completions_batch_usage_counts_only_answered_requests(batches_client: openai.OpenAI) -> None:
    rows = [completion_line("ok", "one two three"), completion_line("bad", "x", temperature=-1)]
    b = run_batch(batches_client, rows, endpoint="/v1/completions")
    assert b.request_counts is not None and (b.request_counts.completed, b.request_counts.failed) == (1, 1)
    answers = [
        Completion.model_validate(x["response"]["body"]) for x in read_lines(batches_client, b.output_file_id)
    ]
    assert b.usage is not None
    ins, outs, total = _usage_sums(answers)
    assert (b.usage.input_tokens, b.usage.output_tokens, b.usage.total_tokens) == (ins, outs, total)


# sgl-project/sglang#1415: a batch whose lines reuse a custom_id hung; it must fail validation,
# naming the line and the field, and run nothing.
def test_duplicate_custom_id_fails_validation_and_runs_nothing(tok: Any) -> None:
    tm = FakeTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [chat_line("same", "a"), chat_line("other", "b"), chat_line("same", "c")]
        b = run_batch(client, rows)
        assert b.status == "failed"
        assert b.errors is not None and b.errors.data is not None
        assert [(e.code, e.line, e.param) for e in b.errors.data] == [("duplicate_custom_id", 3, "custom_id")]
        assert tm.received == []  # nothing reached the engine
        assert b.output_file_id is None and b.error_file_id is None


# openai/openai-openapi#302: a request the route rejects is written with ``error: null`` and the
# route's error object in ``response.body``, with its real status code.
def test_rejected_request_line_carries_the_route_error_in_the_body(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    bad = chat_line("bad", "x", max_tokens=-5)
    b = run_batch(batches_client, [bad])
    (line,) = read_lines(batches_client, b.error_file_id)
    direct = batches_web.post("/v1/chat/completions", json=bad["body"])
    assert direct.status_code == 400
    assert line["error"] is None
    assert line["custom_id"] == "bad"
    assert line["response"]["status_code"] == direct.status_code
    assert line["response"]["body"]["error"]["message"] == direct.json()["error"]["message"]


# ProjectTech4DevAI/kaapi-backend#723: when every request fails the batch is ``completed`` with no
# output file, an error file holding every request, and the counts saying so.
def test_batch_where_every_request_fails(batches_client: openai.OpenAI) -> None:
    rows = [chat_line(f"r{i}", "x", temperature=5) for i in range(3)]
    b = run_batch(batches_client, rows)
    assert b.status == "completed"
    assert b.output_file_id is None and b.error_file_id is not None
    assert b.request_counts is not None
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (3, 0, 3)
    errs = read_lines(batches_client, b.error_file_id)
    assert [x["custom_id"] for x in errs] == ["r0", "r1", "r2"]
    assert all(x["response"]["body"]["error"]["param"] == "temperature" for x in errs)
    assert b.usage is not None and b.usage.total_tokens == 0


# tidyverse/ellmer#830: error-file lines came back with ``status_code: 0`` and an empty body; every
# line here carries the HTTP status its route answered and a non-empty request id.
def test_error_lines_have_real_status_codes(batches_client: openai.OpenAI, batches_web: TestClient) -> None:
    bodies = {
        "bad-temp": chat_line("bad-temp", "x", temperature=-1),
        "bad-model": {
            **chat_line("bad-model", "x"),
            "body": {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        },
        "empty-messages": {**chat_line("empty-messages", "x"), "body": {"model": MODEL, "messages": []}},
    }
    b = run_batch(batches_client, list(bodies.values()))
    errs = {x["custom_id"]: x for x in read_lines(batches_client, b.error_file_id)}
    assert set(errs) == set(bodies)
    for cid, row in bodies.items():
        direct = batches_web.post("/v1/chat/completions", json=row["body"])
        assert errs[cid]["response"]["status_code"] == direct.status_code >= 400
        assert errs[cid]["response"]["request_id"]
        assert errs[cid]["response"]["body"]["error"]["message"] == direct.json()["error"]["message"]


# TU-Wien-dataLAB/aqueduct#118: a line naming an unknown model made batch creation a 500; here the
# batch is created, and that line alone fails with the route's 404 naming ``model``.
def test_unknown_model_fails_its_line_not_the_batch(batches_client: openai.OpenAI) -> None:
    rows = [
        chat_line("good", "hi"),
        {**chat_line("m", "x"), "body": {"model": "no-such", "messages": [{"role": "user", "content": "x"}]}},
    ]
    b = run_batch(batches_client, rows)
    assert b.status == "completed"
    (err,) = read_lines(batches_client, b.error_file_id)
    assert err["custom_id"] == "m" and err["response"]["status_code"] == 404
    assert err["response"]["body"]["error"]["param"] == "model"
    assert [x["custom_id"] for x in read_lines(batches_client, b.output_file_id)] == ["good"]


# TU-Wien-dataLAB/aqueduct#55: responses were dropped from the output/error files; every input
# custom_id appears exactly once across the two files, in input order within each.
def test_every_request_is_written_exactly_once(batches_client: openai.OpenAI) -> None:
    rows = []
    for i in range(12):
        rows.append(chat_line(f"id-{i}", f"q{i}", **({"temperature": -1} if i % 4 == 0 else {})))
    b = run_batch(batches_client, rows)
    out = [x["custom_id"] for x in read_lines(batches_client, b.output_file_id)]
    err = [x["custom_id"] for x in read_lines(batches_client, b.error_file_id)]
    assert sorted(out + err) == sorted(r["custom_id"] for r in rows)
    assert len(out + err) == len(set(out + err)) == 12
    order = [r["custom_id"] for r in rows]
    assert out == [c for c in order if c in out] and err == [c for c in order if c in err]
    assert b.request_counts is not None
    assert (b.request_counts.completed, b.request_counts.failed) == (len(out), len(err))


# llm-d/llm-d-batch-gateway#221 and #504: after a cancel, output lines + error lines must equal
# the total, each custom_id once, the counts must match the files, and the usage counts only the
# requests that were answered.
def test_cancelled_batch_files_match_counts_and_usage(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BatchMixin, "batch_concurrency", 3)
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [chat_line(f"fast-{i}", "x") for i in range(2)] + [
            chat_line(f"slow-{i}", "[hold] x") for i in range(4)
        ]
        f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
        b = client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.time() + 20
        while tm.started < 1:
            assert time.time() < deadline
            time.sleep(0.01)
        client.batches.cancel(b.id)
        done: Batch = wait_batch(client, b.id)
        assert done.status == "cancelled"
        out = read_lines(client, done.output_file_id)
        err = read_lines(client, done.error_file_id)
        ids = [x["custom_id"] for x in out + err]
        assert sorted(ids) == sorted(r["custom_id"] for r in rows) and len(set(ids)) == 6
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
            6,
            len(out),
            len(err),
        )
        assert all(x["response"]["status_code"] == 200 for x in out)
        assert all(x["error"]["code"] == "batch_cancelled" for x in err if x["response"] is None)
        answers = [ChatCompletion.model_validate(x["response"]["body"]) for x in out]
        assert done.usage is not None
        assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.total_tokens) == _usage_sums(
            answers
        )


# llm-d/llm-d-batch-gateway#152: a batch's input file must have been uploaded for ``batch``;
# any other purpose is a 400 naming ``input_file_id`` and creates nothing.
def test_input_file_purpose_must_be_batch(batches_client: openai.OpenAI, batches_web: TestClient) -> None:
    f = batches_client.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([chat_line("a", "x")]))), purpose="fine-tune"
    )
    r = batches_web.post(
        "/v1/batches",
        json={"input_file_id": f.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "input_file_id"
    with pytest.raises(openai.BadRequestError):
        batches_client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert batches_client.batches.list().data == []


# vllm-project/vllm#13951: ``/tokenize`` with ``messages`` failed; it must answer the ids of the
# prompt the chat route builds, so ``count`` equals that route's ``usage.prompt_tokens``.
def test_tokenize_messages_count_equals_chat_prompt_tokens(
    batches_client: openai.OpenAI, batches_web: TestClient, tok: Any
) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "beşi beş kuruştan beş yumurta kaç kuruş eder?"},
    ]
    r = batches_web.post("/tokenize", json={"model": MODEL, "messages": messages, "return_token_strs": True})
    assert r.status_code == 200, r.text
    body = r.json()
    chat = batches_client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    assert chat.usage is not None
    assert body["count"] == len(body["tokens"]) == chat.usage.prompt_tokens
    assert body["token_strs"] == tok.convert_ids_to_tokens(body["tokens"])
    assert "kuruş" in tok.decode(body["tokens"])


# stdapi-ai/stdapi.ai#240: input-file faults surface as a created batch that turns ``failed`` with
# ``errors.data`` entries carrying code, line and message (not as a create-time 400).
def test_bad_lines_are_reported_on_the_failed_batch(batches_client: openai.OpenAI) -> None:
    content = (
        json.dumps(chat_line("a", "x")).encode()
        + b"\nnot json\n"
        + json.dumps({**chat_line("c", "x"), "url": "/v1/embeddings"}).encode()
        + b"\n"
    )
    f = batches_client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    created = batches_client.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert created.status == "validating"
    b = wait_batch(batches_client, created.id)
    assert b.status == "failed" and b.errors is not None and b.errors.data is not None
    assert [(e.code, e.line) for e in b.errors.data] == [("invalid_json_line", 2), ("mismatched_endpoint", 3)]
    assert all(e.message for e in b.errors.data)


def responses_line(cid: str, text: str, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": cid,
        "method": "POST",
        "url": "/v1/responses",
        "body": {"model": MODEL, "input": text, **body},
    }


# openai/openai-python#2497: a batch can be created for ``/v1/responses`` (one of the Batch API's
# endpoints), and its lines with ``url: /v1/responses`` must run, not fail as a url/endpoint
# mismatch; each answer equals the route's own, parsed by the client's ``Response`` type.
def test_responses_batch_runs_and_matches_the_route(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    from openai.types.responses import Response as OAIResponse

    rows = [responses_line("r1", "hello"), responses_line("r2", "more words here", max_output_tokens=3)]
    b = run_batch(batches_client, rows, endpoint="/v1/responses")
    assert b.status == "completed", b.errors
    out = read_lines(batches_client, b.output_file_id)
    assert [x["custom_id"] for x in out] == ["r1", "r2"]
    got = [OAIResponse.model_validate(x["response"]["body"]) for x in out]
    for row, answer in zip(rows, got, strict=True):
        direct = OAIResponse.model_validate(batches_web.post("/v1/responses", json=row["body"]).json())
        assert answer.output_text == direct.output_text
        assert answer.usage is not None and direct.usage is not None
        assert (answer.usage.input_tokens, answer.usage.output_tokens) == (
            direct.usage.input_tokens,
            direct.usage.output_tokens,
        )
    # stdapi-ai/stdapi.ai#146: the batch usage is the sum of the responses' own usage
    assert b.usage is not None
    ins = sum(a.usage.input_tokens for a in got if a.usage)
    outs = sum(a.usage.output_tokens for a in got if a.usage)
    assert (b.usage.input_tokens, b.usage.output_tokens, b.usage.total_tokens) == (ins, outs, ins + outs)
    # a line whose url names another endpoint still fails validation
    bad = run_batch(
        batches_client,
        [{**responses_line("x", "hi"), "url": "/v1/chat/completions"}],
        endpoint="/v1/responses",
    )
    assert bad.status == "failed" and bad.errors is not None and bad.errors.data is not None
    assert bad.errors.data[0].param == "url"


# vllm-project/vllm#8347 (the same kind): a line a batch cannot answer as one output line --
# ``background: true`` on ``/v1/responses`` -- is an error line naming the field; the rest run.
def test_background_response_line_is_an_error_line(batches_client: openai.OpenAI) -> None:
    b = run_batch(
        batches_client,
        [responses_line("bg", "hi", background=True), responses_line("ok", "hi")],
        endpoint="/v1/responses",
    )
    assert b.status == "completed"
    (err,) = read_lines(batches_client, b.error_file_id)
    assert err["custom_id"] == "bg" and err["response"]["status_code"] == 400
    assert err["response"]["body"]["error"]["param"] == "background"
    assert [x["custom_id"] for x in read_lines(batches_client, b.output_file_id)] == ["ok"]


# stdapi-ai/stdapi.ai#146: ``usage.output_tokens_details.reasoning_tokens`` sums the answers'
# reasoning tokens, read where OpenAI puts them (``completion_tokens_details``) or, on SGLang's
# answers, from the top-level ``reasoning_tokens``; cached prompt tokens likewise.
def test_batch_usage_reads_reasoning_and_cached_tokens() -> None:
    from openai.types import CompletionUsage
    from sglang_v4.entrypoints.openai.protocol_batch import BatchUsage

    openai_shaped = CompletionUsage.model_validate(
        {
            "prompt_tokens": 11,
            "completion_tokens": 7,
            "total_tokens": 18,
            "prompt_tokens_details": {"cached_tokens": 4},
            "completion_tokens_details": {"reasoning_tokens": 5},
        }
    ).model_dump(exclude_none=True)
    sglang_shaped = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "reasoning_tokens": 1}
    usage = BatchUsage()
    for u in (openai_shaped, sglang_shaped, None, {"prompt_tokens": None}):
        usage.add(u)
    got = usage.model_dump()
    assert got["input_tokens"] == 11 + 3 and got["output_tokens"] == 7 + 2
    assert got["total_tokens"] == openai_shaped["total_tokens"] + sglang_shaped["total_tokens"]
    assert got["input_tokens_details"] == {"cached_tokens": 4}
    assert got["output_tokens_details"] == {"reasoning_tokens": 5 + 1}
