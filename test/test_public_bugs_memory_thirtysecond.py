"""Public bug reports on host-side memory a long-running server keeps after requests end: per-request
state left in the tokenizer manager's table when handing a request to the scheduler fails, a
completed batch keeping every answer of its requests in memory, the detokenizer's state of a
finished request read by a later request reusing its ``rid``, and a stream reader that falls
behind making the server hold a copy of the output per step.

Fixtures: conftest's ``shared_fake_engine`` (an ``Engine`` on the model-free ``FakeScheduler``)
and ``batches_client`` (the in-process OpenAI app on ``openai_fake_tm.FakeTM``). Oracles: the
fake model's known text decoded by ``transformers`` (``engine_testutil.expected``), the OpenAI
``openai`` client's own parsing of the Batch API, Python's garbage collector (which objects of a
finished batch are still alive) and the documented request table (empty when no request runs).
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pytest
from batches_testutil import chat_line, read_lines, run_batch
from engine_testutil import engine_fixture, expected_fixture  # noqa: F401 - pytest fixtures

pytestmark = pytest.mark.timeout(120)


def _wait_idle(engine: Any) -> None:
    """Within 10 s: no request in the manager's table nor awaiting its final output, no page used."""
    tm = engine.tokenizer_manager
    deadline = time.time() + 10
    while time.time() < deadline:
        if (
            not tm.rid_to_state
            and not len(tm.abandoned)
            and engine.get_server_info()["kv_pool"]["used_pages"] == 0
        ):
            return
        time.sleep(0.02)
    raise AssertionError((dict(tm.rid_to_state), len(tm.abandoned), engine.get_server_info()["kv_pool"]))


class _FailingSend:
    """Stands in for the tokenizer manager's socket to the scheduler: the ``fail_at``-th send
    (0-based) raises ``OSError`` (a socket closed or full); the others go through."""

    def __init__(self, sock: Any, fail_at: int) -> None:
        self.sock, self.fail_at, self.sent = sock, fail_at, 0

    def send_pyobj(self, obj: Any, *args: Any, **kw: Any) -> Any:
        k, self.sent = self.sent, self.sent + 1
        if k == self.fail_at:
            raise OSError("send failed")
        return self.sock.send_pyobj(obj, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@pytest.mark.parametrize("fail_at", [0, 1])
def test_dispatch_failure_leaves_no_request_state_and_the_rid_is_reusable(
    engine: Any, expected: Any, fail_at: int
) -> None:
    """sgl-project/sglang#28380 / sgl-project/sglang#28694 (a request whose handling failed after
    its ``rid_to_state`` entry was made, e.g. while being handed to the scheduler, left the entry
    for the life of the process: memory grew and the same ``rid`` was refused as a duplicate): the
    hand-over of a two-prompt batch fails at its first (``fail_at`` 0) or second prompt (the first
    already sent). The call fails; afterwards no request is in the manager's table or awaits its
    output, no page is used, and the same two ``rid``s then run and give the fake model's text."""
    tm = engine.tokenizer_manager
    _wait_idle(engine)
    rids = [f"disp{fail_at}a", f"disp{fail_at}b"]
    body = {"prompt": ["one", "two"], "rid": rids, "sampling_params": {"max_new_tokens": 3}}
    sock = tm._send
    tm._send = _FailingSend(sock, fail_at)
    try:
        with pytest.raises(Exception, match="send failed"):
            engine.generate(**body)
    finally:
        tm._send = sock
    _wait_idle(engine)
    outs = engine.generate(**body)
    assert [o["text"] for o in outs] == [expected(3)] * 2
    single = engine.generate(prompt="x", rid=rids[0], sampling_params={"max_new_tokens": 2})
    assert single["text"] == expected(2)
    _wait_idle(engine)


def test_completed_batch_keeps_no_answer_in_memory(batches_client: Any) -> None:
    """risingwavelabs/risingwave#7735 (the per-task state of a finished batch task was never freed,
    so memory grew with every batch run) and clokep/celery-batches#98 (a batch runner kept the
    request objects of every processed batch: memory grew until restart): after a batch of 40
    chat requests completes, its answers are in its output file (read back by the ``openai``
    client: 40 lines, every one a 200), and once that file is deleted no output line of the batch
    is alive in the process any more (Python's garbage collector is the oracle); the batch object
    itself stays listable."""
    from sglang_v4.entrypoints.openai.protocol_batch import BatchOutputLine

    def alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is BatchOutputLine)

    before = alive()
    rows = [chat_line(f"c{i}", f"question {i}") for i in range(40)]
    b = run_batch(batches_client, rows)
    assert b.status == "completed" and b.request_counts is not None
    assert b.request_counts.completed == 40 and b.request_counts.failed == 0
    lines = read_lines(batches_client, b.output_file_id)
    assert sorted(x["custom_id"] for x in lines) == sorted(r["custom_id"] for r in rows)
    assert all(x["response"]["status_code"] == 200 for x in lines)
    assert batches_client.files.delete(b.output_file_id).deleted
    assert alive() == before, "the finished batch still holds its output lines"
    assert batches_client.batches.retrieve(b.id).status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_reused_rid_after_finish_starts_from_a_clean_detokenizer(
    engine: Any, expected: Any, stream: bool
) -> None:
    """sgl-project/sglang#12205 (the detokenizer kept a finished request's state under its
    ``rid``, so the same ``rid`` sent again got a few stale tokens of the earlier run at the start
    of its text): one ``rid`` run three times in a row with different lengths gives, each time,
    exactly the fake model's text of that length (``transformers`` decoding), streamed or not, and
    nothing is left in the request table."""
    for n in (5, 2, 7):
        if stream:
            chunks = list(
                engine.generate(
                    prompt="same", rid="reuse12205", stream=True, sampling_params={"max_new_tokens": n}
                )
            )
            text = chunks[-1]["text"]
        else:
            text = engine.generate(prompt="same", rid="reuse12205", sampling_params={"max_new_tokens": n})[
                "text"
            ]
        assert text == expected(n), n
    _wait_idle(engine)


def test_stream_reader_that_falls_behind_buffers_one_output_not_every_one(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#22567 (every streamed output of the tokenizer manager copied the whole
    output so far, and its reader kept only the last of those it found waiting: the copies of a
    long output cost O(n^2)): a stream whose reader stops after its first chunk while its request
    runs to its end (40 tokens) leaves the server holding that request's latest output only (the
    outputs are cumulative, so at most 40 output ids, not the 1 + 2 + ... of every copy); the
    reader's next chunk is then the final one, the fake model's whole text (``transformers``
    decoding), and the request leaves the table."""
    tm, n = engine.tokenizer_manager, 40
    it = engine.generate(prompt="lag", rid="lag22567", stream=True, sampling_params={"max_new_tokens": n})
    first = next(it)
    assert first["meta_info"]["finish_reason"] is None
    deadline = time.time() + 10
    while True:
        state = tm.rid_to_state.get("lag22567")
        if state is not None and state.finished:
            break
        assert time.time() < deadline, "the request did not finish"
        time.sleep(0.02)
    held = sum(len(o["output_ids"]) for o in list(state.out_list))
    assert held <= n, f"{len(state.out_list)} buffered outputs hold {held} output ids"
    rest = list(it)
    assert rest[-1]["text"] == expected(n) and rest[-1]["meta_info"]["finish_reason"] is not None
    _wait_idle(engine)


def test_batch_with_an_over_long_prompt_is_refused_and_leaves_no_state(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#28380 in its reported form (a batch whose one prompt was over the context
    length raised while being tokenized, after request states were made for all its prompts, and
    every one of them leaked): a two-prompt batch whose second prompt (token ids) is one past the
    longest prompt the server takes is refused with ``ValueError`` naming that length; no request
    is left in the table and the same ``rid``s then run and give the fake model's text."""
    tm = engine.tokenizer_manager
    limit = int(tm.max_req_input_len)
    rids = ["long28380a", "long28380b"]
    with pytest.raises(ValueError, match=str(limit)):
        engine.generate(
            input_ids=[[5, 6], [7] * (limit + 1)], rid=rids, sampling_params={"max_new_tokens": 2}
        )
    _wait_idle(engine)
    outs = engine.generate(input_ids=[[5, 6], [7, 8]], rid=rids, sampling_params={"max_new_tokens": 2})
    assert [o["text"] for o in outs] == [expected(2)] * 2
    _wait_idle(engine)
