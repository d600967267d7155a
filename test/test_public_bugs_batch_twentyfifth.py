"""Public reports on the OpenAI Files and Batch APIs (``/v1/files``, ``/v1/batches``), ported to
this server (round 25): per-field faults of an input line, the ``.jsonl`` rule of batch uploads,
missing create fields, the full ``Batch`` / ``FileObject`` shapes, re-running a batch with the same
``custom_id`` values, live request counts and the answers written to the output file. Each test
names its report; the oracle is the ``openai`` client's own types and error classes, OpenAI's
answers quoted in the reports, or a direct (cold) request to the same route.

All run in process over the fake tokenizer manager of ``openai_fake_tm`` (no server start-up).
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest
from batches_testutil import HoldingTM, chat_line, jsonl, read_lines, run_batch, wait_batch
from fastapi.testclient import TestClient
from openai.types import Batch, FileObject
from openai.types.chat import ChatCompletion
from openai_fake_tm import FakeTM, app_client, oai_client


def _fail_with(client: openai.OpenAI, rows: list[Any]) -> list[tuple[str | None, int | None, str | None]]:
    """Run ``rows`` (dicts or raw lines) as a chat batch that must fail validation; its
    ``errors.data`` as ``(code, line, param)``."""
    content = b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in rows)
    f = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    b = wait_batch(
        client,
        client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    assert b.status == "failed" and b.failed_at is not None, b
    assert b.errors is not None and b.errors.data is not None
    assert all(e.message for e in b.errors.data)
    assert b.output_file_id is None and b.error_file_id is None
    return [(e.code, e.line, e.param) for e in b.errors.data]


def test_line_missing_method_url_and_body_lists_each_field(batches_client: openai.OpenAI) -> None:
    """567-labs/instructor#1120: a line ``{"custom_id", "params"}`` failed at OpenAI, whose
    message listed "the method, url, and body" as missing -- each field at fault, not only the
    first. Oracle: that report (and instructor#1119's "missing required 'method'")."""
    line = {"custom_id": "q1", "params": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    got = _fail_with(batches_client, [line, chat_line("q2", "fine")])
    assert got == [
        ("missing_required_parameter", 1, "method"),
        ("missing_required_parameter", 1, "url"),
        ("missing_required_parameter", 1, "body"),
    ]


def test_line_with_several_faults_reports_every_one(batches_client: openai.OpenAI) -> None:
    """567-labs/instructor#1119: OpenAI reports a bad line per field ("missing required
    'method'" among others), so a line that reuses a ``custom_id``, says ``GET`` and names
    another ``url`` is three faults of that line, in field order. A ``custom_id`` stays taken
    even when its own line is faulty (OpenAI: "Must be unique for each request in a batch")."""
    rows = [
        chat_line("a", "x"),
        {**chat_line("a", "y"), "method": "GET", "url": "/v1/completions"},
        {**chat_line("b", "z"), "method": "GET"},
        chat_line("b", "w"),
    ]
    assert _fail_with(batches_client, rows) == [
        ("duplicate_custom_id", 2, "custom_id"),
        ("invalid_value", 2, "method"),
        ("mismatched_endpoint", 2, "url"),
        ("invalid_value", 3, "method"),
        ("duplicate_custom_id", 4, "custom_id"),
    ]


def test_batch_upload_must_be_a_jsonl_file(batches_client: openai.OpenAI, batches_web: TestClient) -> None:
    """BerriAI/litellm#37527: OpenAI answers a ``purpose=batch`` upload of ``notes.txt`` with a
    400 "Invalid file format for Batch API. Must be .jsonl" (quoted from OpenAI in the report);
    here it was stored. The same name is fine for another purpose, and nothing is stored."""
    r = batches_web.post("/v1/files", files={"file": ("notes.txt", b"hello")}, data={"purpose": "batch"})
    assert r.status_code == 400, r.json()
    assert r.json()["error"]["param"] == "file" and "Must be .jsonl" in r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        batches_client.files.create(
            file=("in.json", io.BytesIO(jsonl([chat_line("a", "x")]))), purpose="batch"
        )
    assert batches_client.files.list().data == []
    ok = batches_client.files.create(
        file=("IN.JSONL", io.BytesIO(jsonl([chat_line("a", "x")]))), purpose="batch"
    )
    other = batches_client.files.create(file=("notes.txt", io.BytesIO(b"hello")), purpose="user_data")
    assert (ok.purpose, other.purpose) == ("batch", "user_data")


@pytest.mark.parametrize("missing", ["input_file_id", "endpoint", "completion_window"])
def test_create_batch_without_a_required_field_is_a_400_naming_it(
    batches_client: openai.OpenAI, batches_web: TestClient, missing: str
) -> None:
    """BerriAI/litellm#37146: ``POST /v1/batches`` without ``input_file_id``, ``endpoint`` or
    ``completion_window`` was a 500 (which SDKs retry); OpenAI answers 400 with ``param`` naming
    the field. Oracle: the report's quoted OpenAI answer and the client's status-to-error map."""
    f = batches_client.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([chat_line("a", "x")]))), purpose="batch"
    )
    body = {"input_file_id": f.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    del body[missing]
    r = batches_web.post("/v1/batches", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == missing, r.json()
    assert missing in r.json()["error"]["message"]
    no_retry = batches_client.with_options(max_retries=0)
    with pytest.raises(openai.BadRequestError):
        no_retry.post("/batches", body=body, cast_to=Batch)
    assert batches_client.batches.list().data == []


def test_batch_object_carries_every_field_of_the_openai_type(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """dongri/openai-api-rs#171: a batch object lacked fields of OpenAI's documented Batch object.
    Oracle: ``openai.types.Batch``'s own field list -- every one is in the raw JSON (null where
    unset), for a completed and for a failed batch, and the client's model reads them back."""
    done = run_batch(batches_client, [chat_line("a", "x", max_tokens=3)])
    bad = run_batch(batches_client, [{"custom_id": "a"}])
    for b in (done, bad):
        raw = batches_web.get(f"/v1/batches/{b.id}").json()
        assert set(Batch.model_fields) <= set(raw), set(Batch.model_fields) - set(raw)
        assert Batch.model_validate(raw) == b
    assert done.status == "completed" and done.completed_at is not None and done.failed_at is None
    assert done.request_counts is not None and done.request_counts.total == 1
    assert bad.status == "failed" and bad.failed_at is not None and bad.completed_at is None
    assert bad.in_progress_at is None  # validation failed: it never ran


def test_file_object_carries_every_field_of_the_openai_type(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """llm-edge/hal-9100#70 (``files.create`` answered nulls for ``id``, ``bytes``, ``filename``,
    ``purpose``), TheoKanning/openai-java#355 (the file object lacked ``status`` and
    ``status_details``) and BerriAI/litellm#6582 (``purpose=batch`` refused as an invalid
    purpose). Oracle: ``openai.types.FileObject``'s field list and the uploaded bytes."""
    content = jsonl([chat_line("a", "x"), chat_line("b", "y")])
    r = batches_web.post("/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
    assert r.status_code == 200, r.json()
    raw = r.json()
    assert set(FileObject.model_fields) <= set(raw), set(FileObject.model_fields) - set(raw)
    f = FileObject.model_validate(raw)
    assert (f.object, f.bytes, f.filename, f.purpose, f.status) == (
        "file",
        len(content),
        "in.jsonl",
        "batch",
        "processed",
    )
    assert f.id.startswith("file-") and f.created_at > 0
    assert batches_client.files.retrieve(f.id) == f
    out = run_batch(batches_client, [chat_line("a", "x", max_tokens=2)])
    assert out.output_file_id is not None
    produced = batches_web.get(f"/v1/files/{out.output_file_id}").json()
    assert set(FileObject.model_fields) <= set(produced)
    assert produced["purpose"] == "batch_output" and produced["status"] == "processed"
    assert produced["bytes"] == len(batches_client.files.content(out.output_file_id).content)


def test_small_json_upload_round_trips(batches_client: openai.OpenAI) -> None:
    """openai/openai-python#727: a small valid JSON file (1025 bytes or less) was refused with
    "invalid file format". Oracle: the uploaded bytes -- stored and read back unchanged."""
    for data in (b'{"a": 1}', json.dumps({"k": "v" * 1000}).encode()):
        f = batches_client.files.create(file=("data.json", io.BytesIO(data)), purpose="user_data")
        assert f.bytes == len(data)
        assert batches_client.files.content(f.id).content == data


def test_second_batch_with_the_same_custom_ids_answers_as_a_cold_run(tok: Any) -> None:
    """sgl-project/sglang#2762: running the same batch file a second time (the same
    ``custom_id`` values) crashed the server. Each batch must complete, and its answers equal
    those of a cold run: the same file in a freshly started server."""
    rows = [chat_line("q0", "Name a colour.", max_tokens=5), chat_line("q1", "Count to three.", max_tokens=5)]

    def contents(client: openai.OpenAI) -> list[tuple[str, str | None]]:
        b = run_batch(client, rows)
        assert b.status == "completed" and b.request_counts is not None
        assert (b.request_counts.completed, b.request_counts.failed) == (2, 0)
        lines = read_lines(client, b.output_file_id)
        return [
            (x["custom_id"], ChatCompletion.model_validate(x["response"]["body"]).choices[0].message.content)
            for x in lines
        ]

    with app_client(FakeTM(tok)) as web:
        client = oai_client(web)
        first, second = contents(client), contents(client)
    with app_client(FakeTM(tok)) as cold_web:
        cold = contents(oai_client(cold_web))
    assert first == second == cold
    assert [cid for cid, _ in cold] == ["q0", "q1"]


def test_output_body_is_the_models_answer_not_the_input(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """vllm-project/aibrix#1802: a batch completed but its output held only the input messages,
    no model answer. Oracle: the chat route's own answer to the same body (a cold request)."""
    row = chat_line("r", "Tell me a fact about the number 1.", max_tokens=6)
    b = run_batch(batches_client, [row])
    (line,) = read_lines(batches_client, b.output_file_id)
    got = ChatCompletion.model_validate(line["response"]["body"])
    direct = ChatCompletion.model_validate(batches_web.post("/v1/chat/completions", json=row["body"]).json())
    assert got.object == "chat.completion" and got.choices[0].message.role == "assistant"
    assert got.choices[0].message.content == direct.choices[0].message.content
    assert got.usage is not None and direct.usage is not None
    assert got.usage.completion_tokens == direct.usage.completion_tokens > 0
    assert "messages" not in line["response"]["body"]


def test_request_counts_update_while_the_batch_runs(tok: Any) -> None:
    """llm-d/llm-d-batch-gateway#155: ``request_counts`` of an in-progress batch stayed zero until
    it finished. Polled while one request is still held, the batch is ``in_progress`` with
    ``total`` = the input's requests and the finished ones counted (one answered, one refused
    by the route). Oracle: the input file's line count and OpenAI's ``request_counts`` meaning."""
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [
            chat_line("ok", "quick"),
            chat_line("bad", "x", max_tokens=-1),
            chat_line("held", "[hold] slow"),
        ]
        f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
        b = client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.time() + 20
        while True:
            now = client.batches.retrieve(b.id)
            rc = now.request_counts
            if tm.started == 1 and rc is not None and rc.completed + rc.failed == 2:
                break
            assert time.time() < deadline, now
            time.sleep(0.01)
        assert now.status == "in_progress" and now.in_progress_at is not None
        assert (rc.total, rc.completed, rc.failed) == (len(rows), 1, 1)
        client.batches.cancel(b.id)
        done = wait_batch(client, b.id)
        assert done.status == "cancelled" and done.request_counts is not None
        assert done.request_counts.total == len(rows)
