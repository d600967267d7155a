"""The Files and Batch APIs on a real server process (``launch_server`` over
``server_fixture.FakeScheduler``, with ``--api-key`` and ``--file-storage-path``), driven by the
``openai`` client: batch answers equal the same requests sent to ``/v1/chat/completions``, the
files are written under the storage path, the key is required, and a cancelled batch's running
requests are aborted with their KV pages freed (``/get_server_info``)."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
from batches_testutil import chat_line, jsonl, read_lines, wait_batch
from openai.types.chat import ChatCompletion
from server_fixture import (
    ServerHandle,
    fake_env,
    make_fake_model_dir,
    start_server,
    used_pages,
    wait_used_pages,
)

pytestmark = pytest.mark.timeout(300)

KEY = "batch-key"


@pytest.fixture(scope="module")
def storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("file_storage")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, storage: Path) -> Iterator[ServerHandle]:
    root = tmp_path_factory.mktemp("batch_server")
    args = ["--model-path", str(make_fake_model_dir(root)), "--served-model-name", "dsv4-test"]
    args += ["--file-storage-path", str(storage)]
    h = start_server(args, fake_env({"FAKE_HOLD_ON_TEXT": "[hold]"}), root / "server.log", api_key=KEY)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


def test_batch_equals_direct_requests_and_files_live_in_the_storage_path(
    client: openai.OpenAI, server: ServerHandle, storage: Path
) -> None:
    rows = [chat_line(f"r{i}", f"question {i}", max_tokens=4 + i, temperature=0) for i in range(4)]
    f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
    assert (storage / f.id).read_bytes() == jsonl(rows)
    b = wait_batch(
        client,
        client.batches.create(
            input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id,
    )
    assert b.status == "completed" and b.request_counts is not None
    assert (b.request_counts.completed, b.request_counts.failed) == (4, 0)
    out = read_lines(client, b.output_file_id)
    assert b.output_file_id is not None and os.path.exists(storage / b.output_file_id)
    for row, line in zip(rows, out, strict=True):
        got = ChatCompletion.model_validate(line["response"]["body"])
        direct = client.chat.completions.create(**row["body"])
        assert got.choices[0].message.content == direct.choices[0].message.content
        assert got.usage == direct.usage and got.choices[0].finish_reason == direct.choices[0].finish_reason
    client.files.delete(f.id)
    assert not (storage / f.id).exists()
    for path in ("/v1/files", "/v1/batches", f"/v1/batches/{b.id}"):
        assert requests.get(server.url + path, timeout=10).status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0).batches.list()


def test_cancel_frees_the_running_requests_pages(client: openai.OpenAI, server: ServerHandle) -> None:
    base = used_pages(server)
    rows = [chat_line(f"h{i}", f"[hold] {i}", max_tokens=100) for i in range(3)]
    f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.time() + 30
    while used_pages(server) <= base:  # the held requests run and hold pages
        assert time.time() < deadline
        time.sleep(0.05)
    assert client.batches.retrieve(b.id).status == "in_progress"
    assert client.batches.cancel(b.id).status == "cancelling"
    done = wait_batch(client, b.id)
    assert done.status == "cancelled" and done.output_file_id is None
    errs: list[dict[str, Any]] = read_lines(client, done.error_file_id)
    assert sorted(x["custom_id"] for x in errs) == ["h0", "h1", "h2"]
    assert all(x["error"]["code"] == "batch_cancelled" for x in errs)
    wait_used_pages(server, base)
    info = requests.get(server.url + "/get_server_info", headers=server.headers(), timeout=10).json()
    assert json.dumps(info)  # the server still answers


# ----------------------------------------------------------------------------------- real model
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_real_model_batch_equals_greedy_chat(embedded_model_server: Any) -> None:
    """The embedded random-weight model (real scheduler, CPU): a batch of greedy chat requests
    (run concurrently) answers each exactly as the same request sent alone to
    ``/v1/chat/completions`` (the cold-run oracle)."""
    client = openai.OpenAI(
        base_url=embedded_model_server.url + "/v1", api_key="x", max_retries=0, timeout=600
    )
    model = client.models.list().data[0].id
    bodies = [
        {"model": model, "messages": [{"role": "user", "content": q}], "max_tokens": 8, "temperature": 0}
        for q in ("Name a colour.", "Count to three.", "Say hi.")
    ]
    rows = [
        {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}
        for i, b in enumerate(bodies)
    ]
    f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    done = wait_batch(client, b.id, timeout_s=900)
    assert done.status == "completed" and done.request_counts is not None
    assert done.request_counts.completed == 3
    out = {
        x["custom_id"]: ChatCompletion.model_validate(x["response"]["body"])
        for x in read_lines(client, done.output_file_id)
    }
    for row in rows:
        direct = client.chat.completions.create(**row["body"])
        got = out[row["custom_id"]]
        assert got.choices[0].message.content == direct.choices[0].message.content
        assert got.usage is not None and direct.usage is not None
        assert got.usage.completion_tokens == direct.usage.completion_tokens
