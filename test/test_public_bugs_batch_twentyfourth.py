"""Public reports on the OpenAI Files and Batch APIs (``/v1/files``, ``/v1/batches``), ported to
this server: file expiry (``expires_after``, ``output_expires_after``), request counts, list
pagination, repeated cancels and the JSONL line rules. Each test names its report; the oracle is
the ``openai`` client's own types and paginator, OpenAI's documented semantics (quoted in the
docstrings), the routes' direct answers, or Python's own line splitting.

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
from sglang_v4.entrypoints.openai import file_store
from sglang_v4.entrypoints.openai.serving_batch import BatchMixin

#: OpenAI's documented bounds on ``expires_after.seconds``: "between 3600 (1 hour) and 2592000 (30 days)"
ONE_HOUR_S, THIRTY_DAYS_S = 3600, 2_592_000


def _upload(client: openai.OpenAI, rows: list[dict[str, Any]], **kw: Any) -> FileObject:
    return client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch", **kw)


def _clock(monkeypatch: pytest.MonkeyPatch, start: int) -> list[int]:
    """A settable clock (Unix seconds) for the file store; ``clock[0] = t`` moves it."""
    clock = [start]
    monkeypatch.setattr(file_store, "now_s", lambda: clock[0])
    return clock


def test_upload_expires_after_sets_expires_at(batches_client: openai.OpenAI) -> None:
    """Azure/azure-sdk-for-js#36931, 64bit/async-openai#444, BerriAI/litellm#17860: a file
    uploaded with ``expires_after={"anchor": "created_at", "seconds": N}`` came back with a blank
    ``expires_at``. Oracle: OpenAI's files reference -- the file expires N seconds after its
    ``created_at``; the upload, retrieve and list answers (parsed by the client's ``FileObject``)
    all carry it."""
    seconds = 7 * 24 * 3600
    f = _upload(
        batches_client, [chat_line("a", "x")], expires_after={"anchor": "created_at", "seconds": seconds}
    )
    assert f.expires_at == f.created_at + seconds
    assert batches_client.files.retrieve(f.id).expires_at == f.created_at + seconds
    (listed,) = [x for x in batches_client.files.list() if x.id == f.id]
    assert listed.expires_at == f.created_at + seconds


def test_batch_upload_expires_after_thirty_days_by_default(batches_client: openai.OpenAI) -> None:
    """doublewordai/control-layer#131 (#117): files without an explicit expiry never expired.
    Oracle: OpenAI's files reference -- "By default, files with purpose=batch expire after 30 days
    and all other files are persisted until they are manually deleted"."""
    f = _upload(batches_client, [chat_line("a", "x")])
    assert f.expires_at == f.created_at + THIRTY_DAYS_S
    other = batches_client.files.create(file=("notes.jsonl", io.BytesIO(b"{}\n")), purpose="user_data")
    assert other.expires_at is None


@pytest.mark.parametrize(
    ("expires_after", "param"),
    [
        ({"anchor": "created_at", "seconds": ONE_HOUR_S - 1}, "expires_after.seconds"),
        ({"anchor": "created_at", "seconds": THIRTY_DAYS_S + 1}, "expires_after.seconds"),
        ({"anchor": "last_active_at", "seconds": ONE_HOUR_S}, "expires_after.anchor"),
    ],
)
def test_upload_expires_after_out_of_bounds_is_400(
    batches_client: openai.OpenAI, expires_after: dict[str, Any], param: str
) -> None:
    """Azure/azure-sdk-for-js#37063: the accepted range of ``expires_after.seconds`` was unclear
    and values outside it were taken. Oracle: OpenAI's files reference -- ``seconds`` "Must be
    between 3600 (1 hour) and 2592000 (30 days)", the only anchor ``created_at``; the client's
    ``BadRequestError`` names the field and nothing is stored. Both bounds themselves are kept."""
    before = [x.id for x in batches_client.files.list()]
    with pytest.raises(openai.BadRequestError) as e:
        _upload(batches_client, [chat_line("a", "x")], expires_after=expires_after)
    assert e.value.status_code == 400
    assert isinstance(e.value.body, dict) and e.value.body.get("param") == param
    assert [x.id for x in batches_client.files.list()] == before
    for seconds in (ONE_HOUR_S, THIRTY_DAYS_S):
        f = _upload(
            batches_client, [chat_line("a", "x")], expires_after={"anchor": "created_at", "seconds": seconds}
        )
        assert f.expires_at == f.created_at + seconds


def test_expired_file_is_gone_and_cannot_feed_a_batch(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """stdapi-ai/stdapi.ai#215: an expired Files API object still fed inference. Oracle: OpenAI's
    semantics of ``expires_at`` (the file is deleted when it expires): once the time has passed,
    retrieve / content / delete are the client's ``NotFoundError``, the file is not listed, and a
    batch on it is refused with 404 (nothing runs); an unexpired file is untouched."""
    clock = _clock(monkeypatch, 1_800_000_000)
    tm = FakeTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        short = _upload(
            client, [chat_line("a", "x")], expires_after={"anchor": "created_at", "seconds": ONE_HOUR_S}
        )
        keep = _upload(client, [chat_line("b", "y")])  # 30 days
        assert short.created_at == 1_800_000_000
        clock[0] = short.created_at + ONE_HOUR_S - 1
        assert client.files.retrieve(short.id).id == short.id
        clock[0] = short.created_at + ONE_HOUR_S
        for call in (client.files.retrieve, client.files.content, client.files.delete):
            with pytest.raises(openai.NotFoundError):
                call(short.id)
        assert [x.id for x in client.files.list()] == [keep.id]
        with pytest.raises(openai.NotFoundError):
            client.batches.create(
                input_file_id=short.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
        assert client.batches.list().data == [] and tm.received == []
        assert client.files.content(keep.id).content == jsonl([chat_line("b", "y")])


def test_output_expires_after_applies_to_output_and_error_files(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """tryAGI/OpenAI#210: "Set per-upload expiration for batch output and error files"
    (``output_expires_after`` of ``POST /v1/batches``) was dropped here: both files kept
    ``expires_at`` null. Oracle: OpenAI's batch reference -- the anchor "is the file creation
    time, not the time the batch is created"; an out-of-range value is a 400 naming the field
    and creates no batch."""
    f = _upload(batches_client, [chat_line("ok", "x"), chat_line("bad", "x", max_tokens=-1)])
    seconds = 2 * 24 * 3600
    b = batches_client.batches.create(
        input_file_id=f.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        output_expires_after={"anchor": "created_at", "seconds": seconds},
    )
    done = wait_batch(batches_client, b.id)
    assert done.output_file_id is not None and done.error_file_id is not None
    for file_id in (done.output_file_id, done.error_file_id):
        out = batches_client.files.retrieve(file_id)
        assert out.purpose == "batch_output" and out.expires_at == out.created_at + seconds
    r = batches_web.post(
        "/v1/batches",
        json={
            "input_file_id": f.id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "output_expires_after": {"anchor": "created_at", "seconds": 60},
        },
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "output_expires_after.seconds"
    assert [x.id for x in batches_client.batches.list()] == [b.id]
    plain = run_batch(batches_client, [chat_line("a", "x")])  # without it: kept until deleted
    assert plain.output_file_id is not None
    assert batches_client.files.retrieve(plain.output_file_id).expires_at is None


def test_failed_requests_are_counted_as_failed(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """vllm-project/aibrix#2253: a request that failed was counted as ``completed`` and
    ``request_counts.failed`` stayed 0. Oracle: the route's own status code for each body (2xx
    is completed, the rest failed) and OpenAI's ``BatchRequestCounts`` semantics; the files hold
    exactly the counted lines."""
    rows = [
        chat_line("ok-1", "x"),
        chat_line("bad-temp", "x", temperature=-1),
        chat_line("ok-2", "y"),
        chat_line("bad-model", "x", model="no-such-model"),
        chat_line("bad-n", "x", n=0),
    ]
    direct = {
        r["custom_id"]: batches_web.post("/v1/chat/completions", json=r["body"]).status_code for r in rows
    }
    ok = {k for k, v in direct.items() if 200 <= v < 300}
    assert ok == {"ok-1", "ok-2"}
    b = run_batch(batches_client, rows)
    assert b.request_counts is not None
    assert (b.request_counts.total, b.request_counts.completed, b.request_counts.failed) == (5, 2, 3)
    out = read_lines(batches_client, b.output_file_id)
    err = read_lines(batches_client, b.error_file_id)
    assert {x["custom_id"] for x in out} == ok
    assert {x["custom_id"]: x["response"]["status_code"] for x in err} == {
        k: v for k, v in direct.items() if k not in ok
    }


def test_batch_list_pages_through_every_batch_once(batches_client: openai.OpenAI) -> None:
    """alexrudall/ruby-openai#490 (``after`` / ``limit`` of ``GET /v1/batches``) and
    BerriAI/litellm#38738 (a page that the SDK's paginator cannot continue from): the
    ``openai`` client's own cursor paginator, at ``limit=2``, must reach every batch exactly
    once, newest first; each page's ``first_id`` / ``last_id`` name its ends, ``has_more`` is
    false only on the last page, and no page is empty while ``has_more`` is true. OpenAI's
    documented ``limit`` range is 1..100."""
    f = _upload(batches_client, [chat_line("a", "x")])
    made = [
        batches_client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        for _ in range(5)
    ]
    seen = [b.id for b in batches_client.batches.list(limit=2)]  # auto-pagination over `after`
    assert seen == made[::-1]
    page = batches_client.batches.list(limit=2)
    pages = [page]
    while page.has_next_page():
        page = page.get_next_page()
        pages.append(page)
    assert [len(p.data) for p in pages] == [2, 2, 1]
    for p in pages:
        assert p.data and p.first_id == p.data[0].id and p.last_id == p.data[-1].id  # type: ignore[attr-defined]
    assert [p.has_more for p in pages] == [True, True, False]
    for bad in (0, 101):
        with pytest.raises(openai.BadRequestError):
            batches_client.batches.list(limit=bad)
    for b in made:
        wait_batch(batches_client, b)


def test_cancelling_a_cancelled_batch_is_idempotent_and_keeps_partial_output(
    tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """BerriAI/litellm#36034 (a second cancel of a cancelled batch answers 200 with the batch
    and its file ids) and llm-d/llm-d-batch-gateway#121 (a cancel keeps the answers that were
    finished in the output file). Oracle: OpenAI's batch semantics, the client's ``Batch`` and
    ``ChatCompletion`` types, and the chat route's own answer to the same body."""
    monkeypatch.setattr(BatchMixin, "batch_concurrency", 2)
    tm = HoldingTM(tok)
    with app_client(tm) as web:
        client = oai_client(web)
        rows = [chat_line("fast", "quick"), chat_line("slow-1", "[hold] a"), chat_line("slow-2", "[hold] b")]
        b = client.batches.create(
            input_file_id=_upload(client, rows).id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.time() + 20
        while client.batches.retrieve(b.id).request_counts.completed < 1:  # type: ignore[union-attr]
            assert time.time() < deadline
            time.sleep(0.01)
        first = client.batches.cancel(b.id)
        assert first.status == "cancelling" and first.cancelling_at is not None
        done: Batch = wait_batch(client, b.id)
        assert done.status == "cancelled"
        again = client.batches.cancel(b.id)
        assert again.status == "cancelled"
        assert (again.output_file_id, again.error_file_id) == (done.output_file_id, done.error_file_id)
        assert again.request_counts == done.request_counts
        (out,) = read_lines(client, done.output_file_id)
        assert out["custom_id"] == "fast"
        direct = ChatCompletion.model_validate(web.post("/v1/chat/completions", json=rows[0]["body"]).json())
        answer = ChatCompletion.model_validate(out["response"]["body"])
        assert answer.choices[0].message.content == direct.choices[0].message.content
        err = read_lines(client, done.error_file_id)
        assert sorted(x["custom_id"] for x in err) == ["slow-1", "slow-2"]
        assert all(x["error"]["code"] == "batch_cancelled" for x in err)


def test_trailing_and_blank_lines_are_not_requests(batches_client: openai.OpenAI) -> None:
    """llm-d/llm-d-batch-gateway#574: an input file ending in one or two newlines (or with a
    blank line, or Windows CRLF line ends) must give the right request count, not a parse error
    or an extra empty request. Oracle: Python's ``str.splitlines`` -- the requests are the
    non-blank lines, in order, and a bad line is reported at its 1-based physical line number."""
    a, b2, c = (json.dumps(chat_line(k, "x")) for k in ("a", "b", "c"))
    for text in (
        f"{a}\n{b2}\n{c}\n",
        f"{a}\n{b2}\n{c}\n\n",
        f"{a}\n\n{b2}\n  \n{c}",
        f"{a}\r\n{b2}\r\n{c}\r\n",
    ):
        f = batches_client.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch")
        done = wait_batch(
            batches_client,
            batches_client.batches.create(
                input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id,
        )
        expected = [json.loads(x)["custom_id"] for x in text.splitlines() if x.strip()]
        assert done.status == "completed", (text, done.errors)
        assert done.request_counts is not None and done.request_counts.total == len(expected) == 3
        assert [x["custom_id"] for x in read_lines(batches_client, done.output_file_id)] == expected
    text = f"{a}\n\n{b2}\r\n\r\n{{oops\n{c}\n"
    bad_line = next(i for i, x in enumerate(text.splitlines(), start=1) if x.startswith("{oops"))
    f = batches_client.files.create(file=("in.jsonl", io.BytesIO(text.encode())), purpose="batch")
    done = wait_batch(
        batches_client,
        batches_client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    assert done.status == "failed" and done.errors is not None and done.errors.data is not None
    assert [(e.code, e.line) for e in done.errors.data] == [("invalid_json_line", bad_line)]
