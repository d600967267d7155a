"""The OpenAI Files and Batch APIs (``/v1/files``, ``/v1/batches``) in process, over the fake
tokenizer manager, driven by the ``openai`` client: each batch answer is parsed with the client's
own types and compared with the same request sent to the route directly; validation failures,
cancel (running requests are closed: the tokenizer manager aborts them), delete, list, auth and
the size bound."""

from __future__ import annotations

import io
import json
import os
import time
from typing import Any

import openai
import pytest
from batches_testutil import MODEL, HoldingTM, chat_line, jsonl, read_lines, run_batch, wait_batch
from fastapi.testclient import TestClient
from openai.types import FileObject
from openai.types.chat import ChatCompletion
from openai.types.completion import Completion
from openai_fake_tm import FakeTM, app_client, oai_client
from sglang_v4.entrypoints.openai.file_store import FileStore, FileTooLargeError, max_file_bytes_from_env
from sglang_v4.entrypoints.openai.serving_batch import BatchMixin


def test_chat_batch_matches_direct_requests(batches_client: openai.OpenAI) -> None:
    rows = [
        chat_line("a", "hello", max_tokens=3, temperature=0),
        chat_line("b", "again", temperature=0),
        chat_line("c", "logprobs", max_tokens=2, logprobs=True, top_logprobs=1),
    ]
    b = run_batch(batches_client, rows)
    assert b.status == "completed", b
    assert b.request_counts is not None
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (3, 3, 0)
    assert b.error_file_id is None and b.completed_at is not None and b.in_progress_at is not None
    out = read_lines(batches_client, b.output_file_id)
    assert [x["custom_id"] for x in out] == ["a", "b", "c"]
    for row, line in zip(rows, out, strict=True):
        assert line["error"] is None and line["response"]["status_code"] == 200
        got = ChatCompletion.model_validate(line["response"]["body"])
        direct = batches_client.chat.completions.create(**row["body"])
        assert got.model_dump(exclude={"id", "created"}) == direct.model_dump(exclude={"id", "created"})
    meta = batches_client.files.retrieve(b.output_file_id)  # type: ignore[arg-type]
    assert isinstance(meta, FileObject) and meta.purpose == "batch_output"
    assert meta.bytes == len(batches_client.files.content(b.output_file_id).content)  # type: ignore[arg-type]


def test_completions_batch_matches_direct_requests(batches_client: openai.OpenAI) -> None:
    rows = [
        {
            "custom_id": f"c{i}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"model": MODEL, "prompt": p},
        }
        for i, p in enumerate(["one", "two words"])
    ]
    b = run_batch(batches_client, rows, endpoint="/v1/completions")
    assert b.status == "completed"
    for row, line in zip(rows, read_lines(batches_client, b.output_file_id), strict=True):
        got = Completion.model_validate(line["response"]["body"])
        direct = batches_client.completions.create(**row["body"])
        assert got.model_dump(exclude={"id", "created"}) == direct.model_dump(exclude={"id", "created"})


def test_failed_requests_go_to_the_error_file(batches_client: openai.OpenAI, batches_web: TestClient) -> None:
    bad = chat_line("bad", "x", temperature=-1)
    rows = [chat_line("ok", "fine"), bad, chat_line("stream", "x", stream=True)]
    b = run_batch(batches_client, rows)
    assert b.status == "completed"
    assert b.request_counts is not None
    assert (b.request_counts.completed, b.request_counts.failed) == (1, 2)
    errs = {x["custom_id"]: x for x in read_lines(batches_client, b.error_file_id)}
    assert set(errs) == {"bad", "stream"}
    direct = batches_web.post("/v1/chat/completions", json=bad["body"])  # the route's own answer
    assert errs["bad"]["response"]["status_code"] == direct.status_code == 400
    assert errs["bad"]["response"]["body"]["param"] == direct.json()["param"] == "temperature"
    assert errs["stream"]["response"]["status_code"] == 400
    assert errs["stream"]["response"]["body"]["param"] == "stream"
    assert [x["custom_id"] for x in read_lines(batches_client, b.output_file_id)] == ["ok"]


@pytest.mark.parametrize(
    ("lines", "line_no", "code", "param"),
    [
        ([json.dumps(chat_line("a", "x")), "{not json"], 2, "invalid_json_line", None),
        (
            [json.dumps(chat_line("a", "x")), json.dumps(chat_line("a", "y"))],
            2,
            "duplicate_custom_id",
            "custom_id",
        ),
        ([json.dumps({**chat_line("a", "x"), "url": "/v1/completions"})], 1, "mismatched_endpoint", "url"),
        ([json.dumps({**chat_line("a", "x"), "method": "GET"})], 1, "invalid_value", "method"),
        (
            [json.dumps({k: v for k, v in chat_line("a", "x").items() if k != "custom_id"})],
            1,
            None,
            "custom_id",
        ),
        (["", json.dumps({**chat_line("a", "x"), "body": "hi"})], 2, None, "body"),
    ],
)
def test_bad_input_fails_validation_naming_the_line(
    batches_client: openai.OpenAI, lines: list[str], line_no: int, code: str | None, param: str | None
) -> None:
    f = batches_client.files.create(file=("in.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
    b = wait_batch(
        batches_client,
        batches_client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    assert b.status == "failed" and b.failed_at is not None
    assert b.errors is not None and b.errors.data
    err = b.errors.data[0]
    assert err.line == line_no and err.param == param
    if code is not None:
        assert err.code == code
    assert b.output_file_id is None and b.error_file_id is None


def test_create_refusals_name_the_field(batches_client: openai.OpenAI, batches_web: TestClient) -> None:
    f = batches_client.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([chat_line("a", "x")]))), purpose="batch"
    )
    for body, param in [
        ({"input_file_id": f.id, "endpoint": "/v1/embeddings", "completion_window": "24h"}, "endpoint"),
        (
            {"input_file_id": f.id, "endpoint": "/v1/chat/completions", "completion_window": "1h"},
            "completion_window",
        ),
        (
            {
                "input_file_id": f.id,
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
                "metadata": {str(i): "v" for i in range(17)},
            },
            "metadata",
        ),
    ]:
        r = batches_web.post("/v1/batches", json=body)
        assert r.status_code == 400 and r.json()["param"] == param, r.json()
    with pytest.raises(openai.NotFoundError):
        batches_client.batches.create(
            input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h"
        )
    other = batches_client.files.create(file=("x.jsonl", io.BytesIO(b"{}")), purpose="user_data")
    with pytest.raises(openai.BadRequestError):
        batches_client.batches.create(
            input_file_id=other.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert batches_client.batches.list().data == []  # nothing was created


def test_files_list_retrieve_delete(batches_client: openai.OpenAI, batches_web: TestClient) -> None:
    content = "é\n".encode() * 3
    f = batches_client.files.create(file=("mine.jsonl", io.BytesIO(content)), purpose="batch")
    assert (f.filename, f.bytes, f.purpose, f.object) == ("mine.jsonl", len(content), "batch", "file")
    g = batches_client.files.create(file=("other.txt", io.BytesIO(b"x")), purpose="user_data")
    assert [x.id for x in batches_client.files.list()] == [g.id, f.id]  # newest first
    assert [x.id for x in batches_client.files.list(purpose="batch")] == [f.id]
    assert [x.id for x in batches_client.files.list(order="asc", limit=1)] == [f.id, g.id]  # paged by `after`
    assert batches_client.files.retrieve(f.id) == f
    assert batches_client.files.content(f.id).content == content
    d = batches_client.files.delete(f.id)
    assert d.deleted and d.id == f.id
    with pytest.raises(openai.NotFoundError):
        batches_client.files.retrieve(f.id)
    with pytest.raises(openai.NotFoundError):
        batches_client.files.content(f.id)
    with pytest.raises(openai.NotFoundError):
        batches_client.files.delete(f.id)
    assert [x.id for x in batches_client.files.list()] == [g.id]
    r = batches_web.post("/v1/files", files={"file": ("a.jsonl", b"{}")}, data={"purpose": "nonsense"})
    assert r.status_code == 400 and r.json()["param"] == "purpose"
    r = batches_web.post("/v1/files", data={"purpose": "batch"}, files={"other": ("a", b"x")})
    assert r.status_code == 400 and r.json()["param"] == "file"
    r = batches_web.post("/v1/files", json={"purpose": "batch"})
    assert r.status_code == 400 and "multipart/form-data" in r.json()["message"]
    assert batches_web.get("/v1/files", params={"limit": 0}).json()["param"] == "limit"


def test_upload_over_the_size_bound_is_413(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_V4_MAX_FILE_BYTES", "100")
    with app_client(FakeTM(tok)) as web:
        c = oai_client(web)
        ok = c.files.create(file=("a.jsonl", io.BytesIO(b"x" * 100)), purpose="batch")
        with pytest.raises(openai.APIStatusError) as e:
            c.files.create(file=("a.jsonl", io.BytesIO(b"x" * 101)), purpose="batch")
        assert e.value.status_code == 413 and "100 bytes" in e.value.message
        assert [x.id for x in c.files.list()] == [ok.id]


def test_batch_output_larger_than_the_upload_bound_is_kept(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The upload bound is for uploads: a batch whose answers outgrow it completes with every answer
    (it used to fail with ``server_error`` after all requests ran, the answers discarded)."""
    monkeypatch.setenv("SGLANG_V4_MAX_FILE_BYTES", "3000")
    rows = [chat_line(f"r{i}", f"question {i}", max_tokens=3, temperature=0) for i in range(8)]
    assert len(jsonl(rows)) < 3000
    with app_client(FakeTM(tok)) as web:
        c = oai_client(web)
        b = run_batch(c, rows)
        assert b.status == "completed" and b.errors is None, b
        assert b.request_counts is not None and (b.request_counts.completed, b.request_counts.failed) == (
            8,
            0,
        )
        assert c.files.retrieve(b.output_file_id).bytes > 3000  # type: ignore[arg-type]
        out = read_lines(c, b.output_file_id)
        assert [x["custom_id"] for x in out] == [r["custom_id"] for r in rows]
        for row, line in zip(rows, out, strict=True):
            got = ChatCompletion.model_validate(line["response"]["body"])
            direct = c.chat.completions.create(**row["body"])
            assert got.model_dump(exclude={"id", "created"}) == direct.model_dump(exclude={"id", "created"})


def test_batch_list_pages_newest_first(batches_client: openai.OpenAI) -> None:
    f = batches_client.files.create(
        file=("in.jsonl", io.BytesIO(jsonl([chat_line("a", "x")]))), purpose="batch"
    )
    ids = [
        batches_client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        for _ in range(3)
    ]
    page = batches_client.batches.list(limit=2)
    assert [b.id for b in page.data] == ids[::-1][:2] and page.has_more
    assert [b.id for b in batches_client.batches.list(limit=2)] == ids[::-1]  # auto-paged by `after`
    for i in ids:
        wait_batch(batches_client, i)
    with pytest.raises(openai.NotFoundError):
        batches_client.batches.retrieve("batch_nope")


def test_auth_follows_api_key(tok: Any) -> None:
    with app_client(FakeTM(tok), api_key="k3y") as web:
        for method, path in [
            ("GET", "/v1/files"),
            ("POST", "/v1/files"),
            ("GET", "/v1/files/file-x"),
            ("GET", "/v1/files/file-x/content"),
            ("DELETE", "/v1/files/file-x"),
            ("GET", "/v1/batches"),
            ("POST", "/v1/batches"),
            ("GET", "/v1/batches/batch_x"),
            ("POST", "/v1/batches/batch_x/cancel"),
        ]:
            assert web.request(method, path).status_code == 401, path
        with pytest.raises(openai.AuthenticationError):
            oai_client(web, "wrong").files.list()
        b = run_batch(oai_client(web, "k3y"), [chat_line("a", "hi")])
        assert b.status == "completed"  # the lines run under the key checked at creation


def test_cancel_aborts_running_requests(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BatchMixin, "batch_concurrency", 2)  # two run, the last one waits
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [chat_line("quick", "x")] + [chat_line(f"h{i}", "[hold] x") for i in range(3)]
        f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
        b = client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.time() + 20
        while tm.started < 2:  # the held requests run (the rest wait for a slot)
            assert time.time() < deadline
            time.sleep(0.01)
        c = client.batches.cancel(b.id)
        assert c.status in ("cancelling", "cancelled") and c.cancelling_at is not None
        done = wait_batch(client, b.id)
        assert done.status == "cancelled" and done.cancelled_at is not None
        assert tm.closed == tm.started  # every started request was closed (aborted), none released
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
            4,
            1,
            3,
        )
        assert [x["custom_id"] for x in read_lines(client, done.output_file_id)] == ["quick"]
        errs = read_lines(client, done.error_file_id)
        assert [x["custom_id"] for x in errs] == ["h0", "h1", "h2"]
        assert all(x["response"] is None and x["error"]["code"] == "batch_cancelled" for x in errs)
        assert client.batches.cancel(b.id).status == "cancelled"  # idempotent
        finished = run_batch(client, [chat_line("z", "x")])
        with pytest.raises(openai.ConflictError):
            client.batches.cancel(finished.id)


def test_file_store_directory_lifetime(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    own = FileStore(max_file_bytes=10)
    f = own.create(b"abc", "a.txt", "batch")
    assert open(os.path.join(own.directory, f.id), "rb").read() == b"abc"
    own.close()
    assert not os.path.exists(own.directory)  # a temporary directory goes with the store
    given = FileStore(str(tmp_path / "files"), max_file_bytes=10)
    g = given.create(b"xyz", "b.txt", "batch")
    with pytest.raises(FileTooLargeError):
        given.create(b"x" * 11, "c.txt", "batch")
    assert sorted(os.listdir(given.directory)) == [g.id]  # the refused file left nothing
    given.close()
    assert os.listdir(tmp_path / "files") == [g.id]  # a given directory is kept
    monkeypatch.setenv("SGLANG_V4_MAX_FILE_BYTES", "-3")
    with pytest.raises(ValueError, match="SGLANG_V4_MAX_FILE_BYTES"):
        max_file_bytes_from_env()


def test_file_storage_path_that_is_a_file_is_refused_at_start(tmp_path: Any) -> None:
    from sglang_v4.server_args import ServerArgs

    taken = tmp_path / "taken"
    taken.write_bytes(b"not a directory")
    with pytest.raises(ValueError, match="^file_storage_path"):
        ServerArgs(device="cpu", file_storage_path=str(taken))
    with pytest.raises(ValueError, match="^file_storage_path"):
        ServerArgs(device="cpu", file_storage_path="")
    assert taken.read_bytes() == b"not a directory"  # nothing changed
    ok = ServerArgs(device="cpu", file_storage_path=str(tmp_path / "new"))
    FileStore(ok.file_storage_path).close()  # a directory that does not exist yet is made on use


@pytest.mark.parametrize("store", ["temporary", "storage_path"])
def test_close_batches_cancels_running_ones(
    tok: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, store: str
) -> None:
    """What a stopping server runs (``close_batches``, also at the start of its drain): a running
    batch is cancelled, its running requests closed (aborted), its files written with the shutdown
    message; the temporary store is removed, a ``--file-storage-path`` keeps them."""
    from types import SimpleNamespace

    from fastapi import FastAPI
    from sglang_v4.entrypoints.openai import create_openai_router
    from sglang_v4.entrypoints.openai.serving_batch import SHUTDOWN_LINE_MSG

    monkeypatch.setattr(BatchMixin, "batch_concurrency", 2)  # two run, the last one waits
    tm = HoldingTM(tok)
    path = str(tmp_path / "files") if store == "storage_path" else None
    sa = SimpleNamespace(
        served_model_name=MODEL, model_path=None, api_key=None, enable_cache_report=False,
        context_length=None, file_storage_path=path,
    )  # fmt: skip
    router = create_openai_router(tm, sa)
    app = FastAPI()
    app.include_router(router)
    serving = router.serving  # type: ignore[attr-defined]
    with TestClient(app) as web:
        client = oai_client(web)
        rows = [chat_line("quick", "x")] + [chat_line(f"h{i}", "[hold] x") for i in range(3)]
        f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
        b = client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.time() + 20
        while tm.started < 2:  # the held requests run (the rest wait for a slot)
            assert time.time() < deadline
            time.sleep(0.01)
        directory = serving.file_store.directory
        web.portal.call(serving.close_batches)
        batch = serving.batches[b.id].batch
        assert batch.status == "cancelled" and batch.cancelled_at is not None
        assert tm.closed == tm.started  # every started request was closed (aborted), none released
        counts = batch.request_counts
        assert (counts.total, counts.completed, counts.failed) == (4, 1, 3)
        if store == "temporary":
            assert not os.path.exists(directory)
            return
        with open(os.path.join(directory, batch.error_file_id), encoding="utf-8") as fh:
            errs = [json.loads(x) for x in fh.read().splitlines()]
        assert [x["custom_id"] for x in errs] == ["h0", "h1", "h2"]
        assert all(x["error"] == {"code": "batch_cancelled", "message": SHUTDOWN_LINE_MSG} for x in errs)
        with open(os.path.join(directory, batch.output_file_id), encoding="utf-8") as fh:
            assert [json.loads(x)["custom_id"] for x in fh.read().splitlines()] == ["quick"]
