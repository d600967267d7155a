"""Public reports on the OpenAI Files and Batch APIs (``/v1/files``, ``/v1/batches``), ported to
this server (round 26): list cursors that outlive the file they name, non-UTF-8 batch uploads,
non-ASCII input and output, cancel retries and the counts of a cancelled batch, answers matched
to their ``custom_id`` when requests finish out of order, and the two kinds of failed line.
Each test names its report; the oracle is the ``openai`` client's own types and paginator,
OpenAI's answers quoted in the reports, OpenAI's documented batch semantics, or a direct (cold)
request to the same route.

All run in process over the fake tokenizer manager of ``openai_fake_tm`` (no server start-up).
"""

from __future__ import annotations

import io
import json
import time
from typing import Any

import openai
import pytest
from batches_testutil import HoldingTM, chat_line, jsonl, read_lines, wait_batch
from fastapi.testclient import TestClient
from openai.types import Batch, FileObject
from openai.types.chat import ChatCompletion
from openai_fake_tm import FakeTM, app_client, oai_client


def _upload(client: openai.OpenAI, content: bytes, name: str = "in.jsonl") -> FileObject:
    return client.files.create(file=(name, io.BytesIO(content)), purpose="batch")


def _start(client: openai.OpenAI, rows: list[dict[str, Any]]) -> Batch:
    f = _upload(client, jsonl(rows))
    return client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")


def _wait_until(cond: Any, timeout_s: float = 20.0) -> None:
    deadline = time.time() + timeout_s
    while not cond():
        assert time.time() < deadline
        time.sleep(0.01)


# --------------------------------------------------------------------------- files: list cursor
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_files_paginator_survives_deleting_the_cursor_file(batches_client: openai.OpenAI, order: str) -> None:
    """BerriAI/litellm#36324: ``GET /v1/files?after=<last_id>`` answered the same files again, so
    the SDK's auto-pagination (``for f in client.files.list()``) yielded duplicates. Here the
    cursor of each page is deleted before the next page is asked for (a clean-up loop keeping
    some files): ``after`` then named a file no longer stored and the listing restarted at the
    first page. Oracle: the ``openai`` client's own cursor paginator must yield each file exactly
    once, in the creation order asked for."""
    made = [_upload(batches_client, jsonl([chat_line(f"c{i}", "x")]), f"f{i}.jsonl").id for i in range(7)]
    want = made if order == "asc" else made[::-1]
    seen: list[str] = []
    deleted: list[str] = []
    for page in batches_client.files.list(limit=2, order=order).iter_pages():  # type: ignore[arg-type]
        ids = [f.id for f in page.data]
        seen += ids
        batches_client.files.delete(ids[-1])  # the next page's `after` is now a deleted file
        deleted.append(ids[-1])
    assert seen == want
    assert sorted(f.id for f in batches_client.files.list()) == sorted(set(made) - set(deleted))


def test_files_cursor_of_another_purpose_keeps_its_place(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """BerriAI/litellm#36326 (the fix of #36324: a listing page must lead on, never back to one
    already seen): with ``purpose=batch`` and ``after`` naming a file of another purpose, the
    listing started again from the first ``batch`` file. Oracle: creation order -- ``after`` is a
    place in that order, whatever the cursor file's purpose."""
    a = _upload(batches_client, jsonl([chat_line("a", "x")])).id
    mid = batches_client.files.create(file=("notes.txt", io.BytesIO(b"hello")), purpose="user_data").id
    b = _upload(batches_client, jsonl([chat_line("b", "x")])).id
    page = batches_web.get("/v1/files", params={"purpose": "batch", "after": mid, "order": "asc"}).json()
    assert [f["id"] for f in page["data"]] == [b] and page["has_more"] is False
    page = batches_web.get("/v1/files", params={"purpose": "batch", "after": mid, "order": "desc"}).json()
    assert [f["id"] for f in page["data"]] == [a]


def test_files_list_page_carries_first_last_and_has_more(batches_client: openai.OpenAI) -> None:
    """openai-php/client#686 / #687: the files list lacked ``first_id``, ``last_id`` and
    ``has_more`` (OpenAI's list envelope). Oracle: the ``openai`` client's ``SyncCursorPage``
    fields, checked against the page's own ``data``."""
    made = [_upload(batches_client, jsonl([chat_line(f"p{i}", "x")])).id for i in range(3)]
    page = batches_client.files.list(limit=2, order="asc")
    extra = page.model_extra or {}
    assert [f.id for f in page.data] == made[:2]
    assert page.has_more is True
    assert (extra.get("first_id"), extra.get("last_id")) == (made[0], made[1])
    last = batches_client.files.list(limit=2, order="asc", after=made[1])
    assert [f.id for f in last.data] == made[2:] and last.has_more is False


# --------------------------------------------------------------------------- files: encoding
@pytest.mark.parametrize("encoding", ["utf-16", "cp1252"], ids=["utf-16-with-bom", "windows-1252"])
def test_batch_upload_that_is_not_utf8_is_refused(
    batches_client: openai.OpenAI, batches_web: TestClient, encoding: str
) -> None:
    """mkht/PSOpenAI#19: OpenAI answers a ``purpose=batch`` upload that is not UTF-8 (a UTF-16 file
    from PowerShell) with a 400 "Invalid file for Batch API. Must be utf-8 encoded" (quoted in
    the report). It was stored, and its batch later failed line by line. Right: the upload is a
    400 naming ``file`` and nothing is stored. Oracle: that quoted answer; Python's own codec
    decides what is UTF-8."""
    content = json.dumps(chat_line("r1", "café crème"), ensure_ascii=False).encode(encoding) + b"\n"
    with pytest.raises(UnicodeDecodeError):
        content.decode("utf-8")  # the oracle: this really is not UTF-8
    before = batches_web.get("/v1/files").json()["data"]
    with pytest.raises(openai.BadRequestError) as e:
        _upload(batches_client, content)
    assert e.value.status_code == 400
    err = e.value.body
    assert isinstance(err, dict) and err["param"] == "file"
    assert "Must be utf-8 encoded" in err["message"]
    assert batches_web.get("/v1/files").json()["data"] == before


def test_non_ascii_batch_input_round_trips_and_runs(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """xing61/zzz-api#25 (a batch file of Chinese text and astral-plane letters such as 𝐜 failed
    with ``'ascii' codec can't encode``) and 567-labs/instructor#2667 (batch files must be read
    and written as UTF-8 whatever the platform's encoding). Right: the UTF-8 upload is stored
    byte for byte (a leading BOM included), its batch completes, and the output file is UTF-8
    whose answer equals a direct request with the same body. Oracle: the uploaded bytes and a
    cold request to the chat route."""
    text = "请判断以下句子 𝐜𝐡𝐢𝐜 𝐦𝐞𝐦𝐨𝐫𝐲 — café"
    row = chat_line("zh", text, max_tokens=4)
    content = b"\xef\xbb\xbf" + json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n"
    f = _upload(batches_client, content)
    assert f.bytes == len(content)
    assert batches_client.files.content(f.id).content == content
    b = wait_batch(
        batches_client,
        batches_client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    assert b.status == "completed" and b.output_file_id is not None, b
    raw = batches_client.files.content(b.output_file_id).content
    (line,) = [json.loads(x) for x in raw.decode("utf-8").splitlines()]
    got = ChatCompletion.model_validate(line["response"]["body"])
    cold = ChatCompletion.model_validate(batches_web.post("/v1/chat/completions", json=row["body"]).json())
    assert line["custom_id"] == "zh"
    assert got.choices[0].message.content == cold.choices[0].message.content
    assert got.usage is not None and cold.usage is not None
    assert got.usage.prompt_tokens == cold.usage.prompt_tokens


# --------------------------------------------------------------------------- cancel
def test_cancel_retried_while_cancelling_is_idempotent(tok: Any) -> None:
    """llm-d/llm-d-batch-gateway#300 (fixed by #330): a second ``POST /v1/batches/{id}/cancel`` on a
    batch already ``cancelling`` was refused, so a client retrying a cancel whose answer it lost
    got an error. Right: 200 with the batch as it is (still ``cancelling`` or ``cancelled``, the
    first ``cancelling_at`` kept). Oracle: the report's stated behaviour and OpenAI's
    ``cancelling`` -> ``cancelled`` transition."""
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        b = _start(client, [chat_line("h", "[hold] wait")])
        _wait_until(lambda: tm.started == 1)
        first = client.batches.cancel(b.id)
        again = client.batches.cancel(b.id)
        assert first.status == "cancelling" and first.cancelling_at is not None
        assert again.status in ("cancelling", "cancelled")
        assert again.cancelling_at == first.cancelling_at
        done = wait_batch(client, b.id)
        assert done.status == "cancelled" and done.cancelled_at is not None
        assert client.batches.cancel(b.id).status == "cancelled"  # and once it is cancelled


def test_cancelled_batch_counts_every_request_and_matches_its_files(tok: Any) -> None:
    """llm-d/llm-d-batch-gateway#125 (a batch cancelled mid-run ended ``completed`` with counts
    0/0/0) and 567-labs/instructor#2529 (``request_counts.total`` left out the cancelled
    requests). Right: status ``cancelled``; ``total`` = the input's requests = ``completed`` +
    ``failed``; ``completed`` = lines of the output file, ``failed`` = lines of the error file,
    which lists each unfinished request once with ``error.code`` ``batch_cancelled`` and
    ``response`` null (litellm#27041: a non-HTTP error has no ``response``). Oracle: the input
    file and OpenAI's documented output-line shape."""
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [chat_line("ok1", "a"), chat_line("held", "[hold] b"), chat_line("ok2", "c")]
        b = _start(client, rows)

        def two_done() -> bool:
            rc = client.batches.retrieve(b.id).request_counts
            return tm.started == 1 and rc is not None and rc.completed == 2

        _wait_until(two_done)
        client.batches.cancel(b.id)
        done = wait_batch(client, b.id)
        assert done.status == "cancelled" and done.completed_at is None
        rc = done.request_counts
        assert rc is not None
        assert (rc.total, rc.completed, rc.failed) == (3, 2, 1)
        out = read_lines(client, done.output_file_id)
        err = read_lines(client, done.error_file_id)
        assert sorted(x["custom_id"] for x in out) == ["ok1", "ok2"]
        assert [(x["custom_id"], x["response"], x["error"]["code"]) for x in err] == [
            ("held", None, "batch_cancelled")
        ]
        assert tm.closed == tm.started == 1  # the held request was aborted, not left running


# --------------------------------------------------------------------------- output lines
def test_answers_stay_with_their_custom_id_when_requests_finish_out_of_order(tok: Any) -> None:
    """googleapis/python-genai#1909: batch responses came back attached to the wrong keys ("The
    response from one key wrongly put into another key"). Here the first request finishes last;
    each output line's answer must still be the one to its own ``custom_id``'s body. Oracle: a
    direct (cold) request of each body to the chat route (the bodies differ in prompt length and
    ``max_tokens``, so each answer's text and usage tell them apart)."""
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [
            chat_line("slow", "[hold] first but slowest", max_tokens=2),
            chat_line("mid", "a somewhat longer second prompt here", max_tokens=5),
            chat_line("fast", "third", max_tokens=3),
        ]
        b = _start(client, rows)

        def others_done() -> bool:
            rc = client.batches.retrieve(b.id).request_counts
            return tm.started == 1 and rc is not None and rc.completed == 2

        _wait_until(others_done)
        assert web.portal is not None and tm.release is not None
        web.portal.call(tm.release.set)
        done = wait_batch(client, b.id)
        assert done.status == "completed" and done.error_file_id is None, done
        lines = read_lines(client, done.output_file_id)
    assert sorted(x["custom_id"] for x in lines) == ["fast", "mid", "slow"]
    with app_client(FakeTM(tok)) as cold_web:  # the same bodies, answered one by one, no hold
        for line in lines:
            (row,) = [r for r in rows if r["custom_id"] == line["custom_id"]]
            got = ChatCompletion.model_validate(line["response"]["body"])
            cold = ChatCompletion.model_validate(
                cold_web.post("/v1/chat/completions", json=row["body"]).json()
            )
            assert got.choices[0].message.content == cold.choices[0].message.content
            assert got.usage is not None and cold.usage is not None
            assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (
                cold.usage.prompt_tokens,
                cold.usage.completion_tokens,
            )


# --------------------------------------------------------------------------- metadata
@pytest.mark.parametrize(
    ("metadata", "param"),
    [
        ({"applied_policies": ["a", "b"]}, "metadata.applied_policies"),
        ({"n": 5}, "metadata.n"),
        ("cost-centre=research", "metadata"),
        ({str(i): "v" for i in range(17)}, "metadata"),
        ({"k" * 65: "v"}, "metadata"),
        ({"k": "v" * 513}, "metadata"),
    ],
    ids=["array-value", "number-value", "string", "17-pairs", "65-char-key", "513-char-value"],
)
def test_bad_batch_metadata_is_a_400_and_no_batch(
    batches_client: openai.OpenAI, batches_web: TestClient, metadata: Any, param: str
) -> None:
    """BerriAI/litellm#28425 (OpenAI answers an array value with 400 "Invalid type for
    'metadata.applied_policies': expected a string, but got an array instead"), BerriAI/litellm#37147
    (a string ``metadata`` was dropped with a 200 where OpenAI answers 400) and
    llm-d/llm-d-batch-gateway#148 (OpenAI's bounds: 16 pairs, keys up to 64 characters, values up
    to 512, were not checked). Right: a 400 naming the field at fault, and no batch is made.
    Oracle: those quoted answers and bounds."""
    f = _upload(batches_client, jsonl([chat_line("m", "x")]))
    r = batches_web.post(
        "/v1/batches",
        json={
            "input_file_id": f.id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": metadata,
        },
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert batches_client.batches.list().data == []


def test_batch_metadata_at_its_bounds_round_trips(batches_client: openai.OpenAI) -> None:
    """llm-d/llm-d-batch-gateway#148 (the other side of the bounds) and BerriAI/litellm#37203
    (the tag "is absent from the batch" on retrieve): 16 pairs with a 64-character key and a
    512-character value are accepted and come back unchanged from create, retrieve and list.
    Oracle: the sent dict."""
    metadata = {f"k{i}": f"v{i}" for i in range(15)} | {"K" * 64: "é" * 512}
    f = _upload(batches_client, jsonl([chat_line("m", "x")]))
    b = batches_client.batches.create(
        input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h", metadata=metadata
    )
    assert b.metadata == metadata
    assert batches_client.batches.retrieve(b.id).metadata == metadata
    assert [x.metadata for x in batches_client.batches.list()] == [metadata]
    assert wait_batch(batches_client, b.id).metadata == metadata


def test_removed_file_cursors_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The places of removed files that keep list cursors working (litellm#36324 above) are held
    for the latest ``GONE_CURSORS_KEPT`` removals only, so a server that deletes files for weeks
    does not grow without bound: with the bound at 2, the cursor of the newest removed file still
    continues after its place (oracle: creation order), while that of the oldest, forgotten, starts
    from the first file as an id never stored does."""
    from sglang_v4.entrypoints.openai import file_store as fs

    monkeypatch.setattr(fs, "GONE_CURSORS_KEPT", 2)
    store = fs.FileStore()
    try:
        ids = [store.create(b"{}\n", f"f{i}.jsonl", "batch").id for i in range(6)]
        for fid in ids[1:4]:  # the first file stays
            assert store.delete(fid)
        assert len(store._gone) == 2  # ids[2], ids[3]; ids[1] forgotten
        page, _ = store.list(after=ids[3], order="asc")
        assert [f.id for f in page] == ids[4:]
        page, _ = store.list(after=ids[2], order="desc")
        assert [f.id for f in page] == [ids[0]]
        page, _ = store.list(after=ids[1], order="asc")  # forgotten: from the first file
        assert [f.id for f in page] == [ids[0], *ids[4:]]
    finally:
        store.close()
