"""Public reports on the OpenAI Files and Batch APIs (``/v1/files``, ``/v1/batches``), ported to
this server (round 27): the error a duplicated ``custom_id`` gives, how a request the route
refuses is written to the error file, ``expires_at`` with and without an expiry policy, JSONL
input with Windows line endings or a final newline, the batch list's cursors and order, and a
batch in which no request succeeds. Each test names its report; the oracle is the
``openai`` client's own types, OpenAI's documented batch and file semantics (the output line's
``response.status_code`` / ``error`` split, ``expires_after`` / ``output_expires_after`` anchored
at the file's ``created_at``), the JSON Lines rules, or the report's stated behaviour.

No fault was found by these reports; the tests guard the behaviour they ask for. All run in
process over the fake tokenizer manager of ``openai_fake_tm`` (no server start-up).
"""

from __future__ import annotations

import io
import json
from typing import Any

import openai
import pytest
from batches_testutil import chat_line, jsonl, read_lines, run_batch, wait_batch
from fastapi.testclient import TestClient
from openai.types import Batch, FileObject
from openai.types.chat import ChatCompletion


def _upload(
    client: openai.OpenAI, content: bytes, name: str = "in.jsonl", purpose: str = "batch"
) -> FileObject:
    return client.files.create(file=(name, io.BytesIO(content)), purpose=purpose)  # type: ignore[arg-type]


def _run_raw(client: openai.OpenAI, content: bytes) -> Batch:
    f = _upload(client, content)
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    return wait_batch(client, b.id)


# --------------------------------------------------------------------------- validation
def test_llm_d_147_duplicate_custom_id_names_its_line_and_value(batches_client: openai.OpenAI) -> None:
    """llm-d/llm-d-batch-gateway#147: duplicated ``custom_id`` values were accepted and both answers
    written, so the output could not be matched to the input. Expected (the report, as OpenAI
    does): the batch fails at validation with an error naming the line of the second use and the
    duplicated value, and no request is run (no output file, zero counts)."""
    rows = [
        chat_line("req-1", "a"),
        chat_line("dup-7", "b"),
        chat_line("req-3", "c"),
        chat_line("dup-7", "d"),
    ]
    b = run_batch(batches_client, rows)
    assert b.status == "failed" and b.errors is not None
    [err] = b.errors.data
    assert (err.code, err.line, err.param) == ("duplicate_custom_id", 4, "custom_id")
    assert err.message is not None and "dup-7" in err.message
    assert b.output_file_id is None and b.error_file_id is None
    rc = b.request_counts
    assert rc is not None and (rc.completed, rc.failed) == (0, 0)


# --------------------------------------------------------------------------- output lines
@pytest.mark.parametrize(
    ("bad_body", "param"),
    [({"stream": True}, "stream"), ({"temperature": 9}, "temperature"), ({"n": 0}, "n")],
)
def test_artefactual_332_a_refused_request_is_a_4xx_line_with_error_null(
    batches_client: openai.OpenAI, bad_body: dict[str, Any], param: str
) -> None:
    """artefactory/artefactual#332: a reader checked only the top-level ``error`` and took a
    refused request for an answer, because the Batch API writes a request the route refuses as
    ``response.status_code`` 4xx with an error object where the completion would be, and keeps
    top-level ``error`` for failures that are not HTTP answers. Expected: the refused line is in
    the error file with ``error`` null, ``response.status_code`` 400 and ``response.body.error``
    an OpenAI error object naming the field; the good line is in the output file with
    ``status_code`` 200, ``error`` null and a body the ``openai`` client parses as a
    ``ChatCompletion``; the counts say one each."""
    b = run_batch(batches_client, [chat_line("good", "hello"), chat_line("bad", "hello", **bad_body)])
    assert b.status == "completed"
    rc = b.request_counts
    assert rc is not None and (rc.total, rc.completed, rc.failed) == (2, 1, 1)
    [ok] = read_lines(batches_client, b.output_file_id)
    [refused] = read_lines(batches_client, b.error_file_id)
    assert ok["custom_id"] == "good" and ok["error"] is None and ok["response"]["status_code"] == 200
    assert ChatCompletion.model_validate(ok["response"]["body"]).choices[0].message.role == "assistant"
    assert refused["custom_id"] == "bad" and refused["error"] is None
    assert refused["response"]["status_code"] == 400
    err = refused["response"]["body"]["error"]
    assert isinstance(err["message"], str) and err["message"] and err["param"] == param
    assert json.loads(json.dumps(refused))["response"]["body"]["error"]["code"] == 400


# --------------------------------------------------------------------------- expiry
def test_llm_d_312_expires_at_is_null_without_a_policy_and_exact_with_one(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """llm-d/llm-d-batch-gateway#312: a file with no expiration policy reported ``expires_at`` 0 --
    "expires at the epoch" -- instead of leaving it null. Expected (OpenAI's ``FileObject``:
    ``expires_at`` optional, a Unix time): a ``user_data`` upload without ``expires_after`` has
    ``expires_at`` null; an upload with ``expires_after = {anchor: created_at, seconds: S}``
    expires at ``created_at + S``; a batch created with ``output_expires_after`` gives its output
    and error files ``expires_at = created_at + S`` of each file."""
    plain = _upload(batches_client, b"notes", "notes.txt", purpose="user_data")
    assert plain.expires_at is None
    assert batches_web.get(f"/v1/files/{plain.id}").json()["expires_at"] is None

    r = batches_web.post(
        "/v1/files",
        files={"file": ("in.jsonl", jsonl([chat_line("a", "x")]))},
        data={"purpose": "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "7200"},
    )
    assert r.status_code == 200, r.text
    made = FileObject.model_validate(r.json())
    assert made.expires_at == made.created_at + 7200

    src = _upload(batches_client, jsonl([chat_line("ok", "x"), chat_line("bad", "x", temperature=9)]))
    r = batches_web.post(
        "/v1/batches",
        json={
            "input_file_id": src.id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "output_expires_after": {"anchor": "created_at", "seconds": 3 * 3600},
        },
    )
    assert r.status_code == 200, r.text
    b = wait_batch(batches_client, r.json()["id"])
    assert b.output_file_id and b.error_file_id
    for fid in (b.output_file_id, b.error_file_id):
        f = batches_client.files.retrieve(fid)
        assert f.purpose == "batch_output" and f.expires_at == f.created_at + 3 * 3600


# --------------------------------------------------------------------------- JSONL framing
def test_anthropic_sdk_1778_crlf_input_runs_and_output_lines_end_in_lf(batches_client: openai.OpenAI) -> None:
    """anthropics/anthropic-sdk-python#1778: a JSONL reader that took a lone CR for a line end
    turned the LF of a CRLF pair into an empty row and failed. Both sides here: a batch file saved
    with Windows line endings (``\\r\\n``) is read as its two requests (JSON allows the CR as
    whitespace after each object), and the output file the server writes ends every line with a
    bare LF and holds no CR at all, so such a reader splits it into exactly its lines. Oracle: the
    JSON Lines rules and ``json.loads`` of each line."""
    content = b"".join(json.dumps(chat_line(c, "hi")).encode() + b"\r\n" for c in ("w1", "w2"))
    b = _run_raw(batches_client, content)
    assert b.status == "completed", b.errors
    rc = b.request_counts
    assert rc is not None and (rc.total, rc.completed) == (2, 2)
    assert b.output_file_id is not None
    raw = batches_client.files.content(b.output_file_id).content
    assert b"\r" not in raw and raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert sorted(json.loads(x)["custom_id"] for x in lines) == ["w1", "w2"]


@pytest.mark.parametrize("tail", [b"", b"\n"])
def test_jsonlines_83_a_final_newline_is_no_extra_request(batches_client: openai.OpenAI, tail: bytes) -> None:
    """wardi/jsonlines#83: a validator refused a JSON Lines file whose last line ended in a newline,
    although the format says the last character may be a line separator, treated as if absent.
    Expected: the same two requests run whether or not the file ends with ``\\n`` -- no third,
    empty request, no ``invalid_json_line`` error."""
    content = jsonl([chat_line("n1", "a"), chat_line("n2", "b")]).rstrip(b"\n") + tail
    b = _run_raw(batches_client, content)
    assert b.status == "completed" and b.errors is None
    rc = b.request_counts
    assert rc is not None and (rc.total, rc.completed, rc.failed) == (2, 2, 0)


# --------------------------------------------------------------------------- listing and result files
def test_openapi_229_batch_list_pages_newest_first_with_cursor_ids(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """openai/openai-openapi#229 (the list-batches response must carry ``first_id`` and ``last_id``
    beside ``data`` and ``has_more``, the standard list shape) and BerriAI/litellm#4966
    (``GET /v1/batches`` answered 405 instead of the list). Expected: each page names its first
    and last batch, ``has_more`` says whether another follows, and the ``openai`` client's own
    cursor paginator walks every batch exactly once, newest first (OpenAI's listing order)."""
    made = [run_batch(batches_client, [chat_line(f"c{i}", "x")]).id for i in range(5)]
    page = batches_web.get("/v1/batches", params={"limit": 2}).json()
    assert page["object"] == "list" and page["has_more"] is True
    assert [b["id"] for b in page["data"]] == made[::-1][:2]
    assert (page["first_id"], page["last_id"]) == (made[-1], made[-2])
    walked = [b.id for b in batches_client.batches.list(limit=2)]
    assert walked == made[::-1]
    last = batches_web.get("/v1/batches", params={"limit": 2, "after": made[1]}).json()
    assert [b["id"] for b in last["data"]] == [made[0]] and last["has_more"] is False


def test_cookbook_1564_a_batch_with_no_success_has_no_output_file(batches_client: openai.OpenAI) -> None:
    """openai/openai-cookbook#1564: after a finished job ``output_file_id`` was None and the user
    found no results -- they were in ``error_file_id``, because no request succeeded. Expected
    (OpenAI's behaviour the issue describes): a batch whose every request is refused completes
    with ``output_file_id`` null (no empty output file), every request's line in the error file
    under its ``custom_id``, and ``request_counts`` saying all failed."""
    rows = [chat_line("s1", "x", stream=True), chat_line("s2", "y", temperature=9)]
    b = run_batch(batches_client, rows)
    assert b.status == "completed"
    assert b.output_file_id is None and b.error_file_id is not None
    rc = b.request_counts
    assert rc is not None and (rc.total, rc.completed, rc.failed) == (2, 0, 2)
    err = read_lines(batches_client, b.error_file_id)
    assert sorted(x["custom_id"] for x in err) == ["s1", "s2"]
    assert all(x["response"]["status_code"] == 400 for x in err)
