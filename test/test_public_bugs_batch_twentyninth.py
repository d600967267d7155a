"""Public reports on the OpenAI Files and Batch APIs (``/v1/files``, ``/v1/batches``), ported to
this server (round 29): what deleting a batch's input or output file does to the batch and to the
other batches that share the file, and the files list's ``limit`` / ``order`` / ``after`` cursor.
Each test names its report; the oracles are the ``openai`` client's own types and its
auto-pagination, OpenAI's documented Files semantics (a deleted file answers 404, the batch
object keeps its file ids), and the ids the test itself uploaded.

No fault was found by these reports; the tests guard the behaviour they ask for. All run in
process over the fake tokenizer manager of ``openai_fake_tm`` (no server start-up).
"""

from __future__ import annotations

import io

import openai
import pytest
from batches_testutil import chat_line, jsonl, read_lines, wait_batch
from openai.types import Batch, FileObject


def _upload(client: openai.OpenAI, content: bytes, name: str = "in.jsonl") -> FileObject:
    return client.files.create(file=(name, io.BytesIO(content)), purpose="batch")


def _batch_on(client: openai.OpenAI, file_id: str) -> Batch:
    b = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    return wait_batch(client, b.id)


def test_control_layer_1741_results_survive_input_file_deletion(batches_client: openai.OpenAI) -> None:
    """doublewordai/control-layer#1741: deleting a batch's input file made its results a 500,
    while a deleted output file was still served. Expected: once the batch has run, deleting its
    input file leaves the batch and its output readable; deleting the output file makes that
    file's content a 404 (``openai.NotFoundError``) while the batch object stays retrievable with
    its ids unchanged."""
    c = batches_client
    f = _upload(c, jsonl([chat_line("a", "hi"), chat_line("b", "there")]))
    b = _batch_on(c, f.id)
    assert b.status == "completed" and b.output_file_id
    assert c.files.delete(f.id).deleted is True
    again = c.batches.retrieve(b.id)
    assert again.status == "completed" and again.input_file_id == f.id
    assert sorted(x["custom_id"] for x in read_lines(c, again.output_file_id)) == ["a", "b"]
    assert c.files.delete(b.output_file_id).deleted is True
    with pytest.raises(openai.NotFoundError):
        c.files.content(b.output_file_id)
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(b.output_file_id)
    last = c.batches.retrieve(b.id)
    assert last.status == "completed" and last.output_file_id == b.output_file_id
    with pytest.raises(openai.NotFoundError):  # a new batch on the deleted input file
        c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")


def test_omniroute_13681_one_batchs_deletions_leave_a_sharing_batch_whole(
    batches_client: openai.OpenAI,
) -> None:
    """diegosouzapw/OmniRoute#13681: removing one batch's files also removed a file that another
    batch still referenced (one input file reused across batches). Expected: two batches on one
    input file each get their own output file; deleting the first batch's output file leaves the
    second batch's output, and the shared input file, readable."""
    c = batches_client
    f = _upload(c, jsonl([chat_line("only", "hello")]))
    b1, b2 = _batch_on(c, f.id), _batch_on(c, f.id)
    assert b1.status == b2.status == "completed"
    assert b1.output_file_id and b2.output_file_id and b1.output_file_id != b2.output_file_id
    c.files.delete(b1.output_file_id)
    assert [x["custom_id"] for x in read_lines(c, b2.output_file_id)] == ["only"]
    assert c.files.retrieve(f.id).id == f.id
    assert b"hello" in c.files.content(f.id).content


def test_openapi_147_files_list_pages_with_limit_order_and_after(batches_client: openai.OpenAI) -> None:
    """openai/openai-openapi#147 (also pubnub/python#218): listing files returned every file,
    with no ``limit`` / ``order`` / ``after``. Expected (OpenAI's list-files reference): ``limit``
    caps a page, ``has_more`` says whether another follows, ``after`` continues after an id,
    ``order=asc`` is oldest first; the client's auto-pagination then yields every uploaded file
    exactly once, in upload order for ``asc``."""
    c = batches_client
    ids = [_upload(c, b"{}\n", name=f"f{i}.jsonl").id for i in range(5)]
    page = c.files.list(limit=2, order="asc")
    assert len(page.data) == 2 and page.has_more is True
    walked = [x.id for x in c.files.list(limit=2, order="asc") if x.id in ids]
    assert walked == ids
    newest = [x.id for x in c.files.list(limit=2, order="desc") if x.id in ids]
    assert newest == ids[::-1]
    tail = c.files.list(limit=10, order="asc", after=ids[2])
    assert [x.id for x in tail.data if x.id in ids] == ids[3:] and tail.has_more is False
    with pytest.raises(openai.BadRequestError):
        c.files.list(limit=0)  # type: ignore[arg-type]
