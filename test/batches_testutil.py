"""Shared helpers of the in-process OpenAI Files / Batch API tests (``test_openai_batches``,
``test_public_bugs_batch_nineteenth``): batch input lines, running a batch to its end through the
``openai`` client and reading its output file, and a fake tokenizer manager that holds ``[hold]``
prompts. Their ``batches_web`` / ``batches_client`` fixtures are in ``conftest.py``."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import openai
from openai.types import Batch
from openai_fake_tm import FakeTM

MODEL = "dsv4-test"


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def chat_line(cid: str, content: str, **body: Any) -> dict[str, Any]:
    return {
        "custom_id": cid,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": MODEL, "messages": [{"role": "user", "content": content}], **body},
    }


def wait_batch(client: openai.OpenAI, batch_id: str, timeout_s: float = 30.0) -> Batch:
    deadline = time.time() + timeout_s
    while True:
        b = client.batches.retrieve(batch_id)
        if b.status in ("completed", "failed", "cancelled", "expired"):
            return b
        assert time.time() < deadline, b
        time.sleep(0.02)


def run_batch(
    client: openai.OpenAI, rows: list[dict[str, Any]], endpoint: str = "/v1/chat/completions"
) -> Batch:
    f = client.files.create(file=("in.jsonl", io.BytesIO(jsonl(rows))), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
    assert b.status == "validating" and b.input_file_id == f.id
    return wait_batch(client, b.id)


def read_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


class HoldingTM(FakeTM):
    """Answers ``[hold]`` prompts only after ``release`` is set; records closed (aborted) requests."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.started = 0
        self.closed = 0
        self.release: asyncio.Event | None = None

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        text = obj.text if isinstance(obj.text, str) else self.tokenizer.decode(obj.input_ids or [])
        if "[hold]" in text:
            self.started += 1
            self.release = self.release or asyncio.Event()
            try:
                await self.release.wait()
            finally:
                self.closed += 1
        async for out in super().generate_request(obj, request):
            yield out
