"""Public reports on batched inputs, replayed against sglang-v4 (round 32): ``/generate`` with
``n > 1`` and with a list of prompts (per-prompt ``sampling_params``) whose requests finish out of
order, a batch with one over-long prompt, ``/v1/completions`` over a list of prompts (text or
token ids) with ``n > 1`` -- one choice per prompt and sample, and one ``finish_reason`` per
streamed choice --, Batch API lines with ``n > 1`` / ``response_format`` / ``stream: true``, and a
batch asked for an endpoint this server does not serve. Each test names its report.

Fixtures: the in-process app of ``admin_app_testutil`` (a real ``TokenizerManager`` whose
scheduler never answers: the test reads the requests sent to the scheduler socket and answers
them itself, in the order it chooses), and the in-process OpenAI app over ``openai_fake_tm``'s
fake tokenizer manager (``batches_web`` / ``batches_client``). Oracles: the rids and texts the
test itself fed back per request, the request bodies, the prompt lengths and decodings of the
independent ``tok`` tokenizer, the ``openai`` client's own types and error classes, a direct
(cold) request of the same body, and OpenAI's documented ``choices[].index`` rule
(prompt-major: ``prompt_index * n + sample``).

No fault was found by these reports; the tests guard the behaviour they ask for.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from batches_testutil import chat_line, read_lines, run_batch
from fastapi.testclient import TestClient
from openai.types import Completion
from openai.types.chat import ChatCompletion
from openai_fake_tm import sse_data_events


# --------------------------------------------------------------------------- real tokenizer manager
@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    """``(TestClient, TokenizerManager)`` of ``admin_app_testutil``, native routes only (the
    scheduler never answers)."""
    from admin_app_testutil import admin_app_client

    with admin_app_client(tmp_path_factory.mktemp("batch32"), openai_routes=False) as pair:
        yield pair


def _headers() -> dict[str, str]:
    from admin_app_testutil import ADMIN_KEY

    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def _answer(rid: str, text: str) -> Any:
    """A finished detokenizer message for ``rid`` whose whole output is ``text`` (one token)."""
    from sglang_v4.managers.io_struct import BatchStrOut

    return BatchStrOut(
        rids=[rid],
        finished_reasons=[{"type": "length", "length": 1}],
        output_strs=[text],
        final_strs=[text],
        output_ids=[[1]],
        prompt_tokens=[3],
        completion_tokens=[1],
        cached_tokens=[0],
        time_stats=[None],
        detokenizer_ts=0.0,
    )


def _run_answering(
    tm: Any, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any], want: int
) -> tuple[Any, list[Any]]:
    """Run ``/generate`` ``body`` on ``tm``; once ``want`` requests reached the scheduler, answer
    them in reverse order of arrival, each with the text ``"<rid>|<prompt text>"``. Returns the
    non-streamed output and the requests sent."""
    from sglang_v4.entrypoints.native_api import parse_generate_body
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput

    sent: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (sent.append(o), send(o, *a, **k))[1])

    async def main() -> Any:
        gen = tm.generate_request(parse_generate_body(body))
        task = asyncio.ensure_future(gen.__anext__())
        while sum(isinstance(o, TokenizedGenerateReqInput) for o in sent) < want:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # nothing more comes
        reqs = [o for o in sent if isinstance(o, TokenizedGenerateReqInput)]
        assert len(reqs) == want
        for r in reversed(reqs):  # out of order: the last one sent finishes first
            tm._handle_batch_output(_answer(r.rid, f"{r.rid}|{r.input_text}"))
        out = await task
        await gen.aclose()
        return out

    out = asyncio.run(asyncio.wait_for(main(), 30))
    assert not tm.rid_to_state
    return out, [o for o in sent if isinstance(o, TokenizedGenerateReqInput)]


@pytest.mark.parametrize("n", [2, 3, 5])
def test_vllm_52398_generate_with_n_returns_every_sample(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """vllm-project/vllm#52398: a non-streamed ``/generate`` with ``sampling_params.n > 1``
    returned fewer than ``n`` samples, non-deterministically, with no error. Expected: exactly
    ``n`` outputs, one per sample sent to the scheduler (each its own rid), even when the samples
    finish in reverse order. Oracle: the rids and texts the test answered each request with."""
    _, tm = app
    out, reqs = _run_answering(tm, monkeypatch, {"text": "hello", "sampling_params": {"n": n}}, n)
    assert isinstance(out, list) and len(out) == n
    assert len({r.rid for r in reqs}) == n
    assert [o["text"] for o in out] == [f"{r.rid}|hello" for r in reqs]
    assert [o["meta_info"]["id"] for o in out] == [r.rid for r in reqs]


def test_vllm_52398_batch_with_n_is_prompt_major_and_complete(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-project/vllm#52398, on a list of prompts with per-prompt ``sampling_params``:
    ``text: [a, b, c]`` with ``n = 2`` must give all six samples, grouped by prompt (SGLang's
    order: the samples of prompt 0, then of prompt 1, ...), each the answer to its own prompt
    although the requests finish in reverse order, and each sample is sent with its own prompt's
    ``max_new_tokens`` / ``top_p``. Oracle: the prompt text the test echoed into each answer, and
    the request body itself."""
    _, tm = app
    prompts = ["alpha", "beta", "gamma"]
    params = [{"n": 2, "max_new_tokens": 3 + i, "top_p": 0.5 + 0.1 * i} for i in range(3)]
    out, reqs = _run_answering(tm, monkeypatch, {"text": prompts, "sampling_params": params}, 6)
    assert len(out) == 6
    got = [o["text"].split("|", 1)[1] for o in out]
    assert got == [p for p in prompts for _ in range(2)]
    assert len({o["meta_info"]["id"] for o in out}) == 6
    for r in reqs:
        want = params[prompts.index(r.input_text)]
        assert r.sampling_params.max_new_tokens == want["max_new_tokens"]
        assert r.sampling_params.top_p == pytest.approx(want["top_p"])


def _refused(client: Any, body: dict[str, Any]) -> Any:
    """``POST /generate`` of ``body``, expected to be answered before the scheduler (which never
    answers here): a request that was accepted fails the test after 10 s instead of hanging."""
    got: list[Any] = []
    t = threading.Thread(
        target=lambda: got.append(client.post("/generate", json=body, headers=_headers())), daemon=True
    )
    t.start()
    t.join(10)
    assert got, f"accepted (sent to the scheduler) instead of refused: {body}"
    return got[0]


@pytest.mark.parametrize("field", ["text", "input_ids"])
def test_instructlab_sdg_276_over_long_item_names_its_prompt(
    app: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, tok: Any, field: str
) -> None:
    """instructlab/sdg#276: a batch failed with "maximum context length is 4096 tokens" and no
    pointer to which input was too long ("it's hard to tell because the error message doesn't
    give me any pointers"). Expected: a batch whose second prompt exceeds the context is a 400
    whose message names that prompt's index and its token count, and nothing of the batch reaches
    the scheduler (SGLang refuses a whole batch on one bad item). Oracles: the independent ``tok``
    tokenizer's count of the long prompt, and the messages sent to the scheduler socket."""
    from admin_app_testutil import ADMIN_CONTEXT

    client, tm = app
    sent: list[Any] = []
    send = tm._send.send_pyobj
    monkeypatch.setattr(tm._send, "send_pyobj", lambda o, *a, **k: (sent.append(o), send(o, *a, **k))[1])
    long_text = "word " * (ADMIN_CONTEXT + 50)
    if field == "text":
        prompts: Any = ["short one", long_text, "short two"]
        n_long = len(tok.encode(long_text, add_special_tokens=True))
    else:
        prompts = [[5, 6, 7], list(range(10, 10 + ADMIN_CONTEXT + 50)), [8, 9]]
        n_long = ADMIN_CONTEXT + 50
    r = _refused(client, {field: prompts, "sampling_params": {"max_new_tokens": 4}})
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert f"{field}[1]" in msg and f"{field}[0]" not in msg and f"{field}[2]" not in msg, msg
    assert str(n_long) in msg, (n_long, msg)
    assert sent == [] and not tm.rid_to_state


# --------------------------------------------------------------------------- OpenAI routes (fake TM)
def test_fms_guardrails_482_streamed_list_prompts_one_finish_reason_per_choice(
    batches_web: TestClient,
) -> None:
    """foundation-model-stack/fms-guardrails-orchestrator#482: a streamed completion set
    ``finish_reason`` on the last two messages of a choice instead of the last one only. With a
    list of two prompts and ``n = 2`` each of the four choices (``index = prompt * n + sample``)
    must carry ``finish_reason`` exactly once, in its last chunk, and its text must be the
    concatenation of its own chunks. Oracles: OpenAI's streaming rule (one ``finish_reason`` per
    choice) and a non-streamed request of the same body."""
    body = {"model": "dsv4-test", "prompt": ["first", "second"], "n": 2, "max_tokens": 8}
    cold = Completion.model_validate(batches_web.post("/v1/completions", json=body).json())
    want = {c.index: (c.text, c.finish_reason) for c in cold.choices}
    assert sorted(want) == [0, 1, 2, 3]
    r = batches_web.post("/v1/completions", json={**body, "stream": True})
    events = [e for e in sse_data_events(r) if e != "[DONE]"]
    texts: dict[int, str] = {}
    finishes: dict[int, list[tuple[int, str]]] = {}
    last_chunk: dict[int, int] = {}
    for pos, e in enumerate(events):
        for c in e["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
            last_chunk[c["index"]] = pos
            if c.get("finish_reason") is not None:
                finishes.setdefault(c["index"], []).append((pos, c["finish_reason"]))
    assert sorted(texts) == [0, 1, 2, 3]
    for i, (text, reason) in want.items():
        assert texts[i] == text
        assert len(finishes.get(i, [])) == 1, (i, finishes.get(i))
        pos, got = finishes[i][0]
        assert got == reason and pos == last_chunk[i]


def test_sgl_project_github_io_2_batch_lines_with_n_answer_every_choice(
    batches_client: openai.OpenAI, batches_web: TestClient
) -> None:
    """sgl-project/sgl-project.github.io#2: a Batch API input whose lines asked for ``n: 3``
    (with a ``response_format``) failed every line (``completed=0, failed=770``) and the client
    then read ``response.body.choices`` of ``None``. Expected: lines with ``n: 3`` complete, each
    output line a 200 whose body parses as a ``ChatCompletion`` with three choices indexed 0, 1,
    2, matched to its ``custom_id``; a line that adds ``response_format`` gets exactly what the
    direct route answers for that body (three choices, or -- where no grammar backend is
    installed -- the route's own 400 naming ``response_format`` as a failed line, never a batch
    of ``None`` bodies). Oracles: the ``openai`` client's ``ChatCompletion`` type and a direct
    request of each body."""
    rows = [
        chat_line(f"s-{i}", f"question {i}", n=3, temperature=1.0, max_completion_tokens=16) for i in range(3)
    ]
    fmt_row = chat_line(
        "fmt", "question f", n=3, max_completion_tokens=16, response_format={"type": "json_object"}
    )
    b = run_batch(batches_client, [*rows, fmt_row])
    direct = batches_web.post("/v1/chat/completions", json=rows[0]["body"]).json()
    direct_fmt = batches_web.post("/v1/chat/completions", json=fmt_row["body"])
    fmt_ok = direct_fmt.status_code == 200
    assert b.status == "completed" and b.request_counts is not None, b
    assert (b.request_counts.completed, b.request_counts.failed) == (3 + fmt_ok, 1 - fmt_ok)
    lines = read_lines(batches_client, b.output_file_id)
    if b.error_file_id:
        lines += read_lines(batches_client, b.error_file_id)
    by_id = {x["custom_id"]: x for x in lines}
    assert sorted(by_id) == ["fmt", "s-0", "s-1", "s-2"]
    for cid in ("s-0", "s-1", "s-2") + (("fmt",) if fmt_ok else ()):
        x = by_id[cid]
        assert x["error"] is None and x["response"]["status_code"] == 200
        cc = ChatCompletion.model_validate(x["response"]["body"])
        assert [c.index for c in cc.choices] == [0, 1, 2]
        if cid != "fmt":
            assert [c.message.content for c in cc.choices] == [
                c["message"]["content"] for c in direct["choices"]
            ]
    if not fmt_ok:
        x = by_id["fmt"]
        assert x["response"]["status_code"] == direct_fmt.status_code == 400
        assert x["response"]["body"]["param"] == direct_fmt.json()["param"] == "response_format"


@pytest.mark.parametrize("endpoint", ["/v1/embeddings", "/v1/moderations"])
def test_stdapi_143_unserved_batch_endpoint_is_refused_at_create(
    batches_client: openai.OpenAI, endpoint: str
) -> None:
    """stdapi-ai/stdapi.ai#143 (and ogx-ai/ogx#3145): ``/v1/batches`` served only some of
    OpenAI's batch endpoints; the maintainers' rule for the rest was to keep "rejecting ... with
    the existing clean error rather than accepting and failing later". This server runs no
    embeddings model, so a batch for ``/v1/embeddings`` must be a 400 at ``batches.create`` naming
    the ``endpoint`` field, and no batch is created. Oracles: the ``openai`` client's error class
    and the batch list before and after."""
    line = {
        "custom_id": "e1",
        "method": "POST",
        "url": endpoint,
        "body": {"model": "dsv4-test", "input": "hi"},
    }
    f = batches_client.files.create(
        file=("in.jsonl", io.BytesIO(json.dumps(line).encode() + b"\n")), purpose="batch"
    )
    before = [x.id for x in batches_client.batches.list()]
    with pytest.raises(openai.BadRequestError) as ei:
        batches_client.batches.create(input_file_id=f.id, endpoint=endpoint, completion_window="24h")  # type: ignore[arg-type]
    err = ei.value.body
    assert isinstance(err, dict)
    assert err.get("param") == "endpoint" or "endpoint" in str(err.get("message")), err
    assert [x.id for x in batches_client.batches.list()] == before


def test_ai00_169_list_prompts_are_answered_each_not_joined(batches_web: TestClient, tok: Any) -> None:
    """Ai00-X/ai00_server#169 (also instructlab/sdg#31, where only the first prompt of a batch was
    used): ``/v1/completions`` with a list of prompts joined them into one string and answered a
    single choice. Expected (OpenAI's completions reference: one choice per prompt, ``n`` each,
    ``index = prompt * n + sample``): with ``echo`` every choice starts with its own prompt (text,
    or the independent tokenizer's decoding of its token ids) and no choice holds the other
    prompt. Oracles: the prompts themselves and ``tok.decode``."""
    texts = ["one two", "three four five"]
    r = batches_web.post(
        "/v1/completions", json={"model": "dsv4-test", "prompt": texts, "echo": True, "max_tokens": 3, "n": 2}
    )
    cc = Completion.model_validate(r.json())
    assert [c.index for c in cc.choices] == [0, 1, 2, 3]
    for c in cc.choices:
        own, other = texts[c.index // 2], texts[1 - c.index // 2]
        assert c.text.startswith(own) and other not in c.text, c.text
    ids = [
        tok.encode("hello world", add_special_tokens=False),
        tok.encode("good night", add_special_tokens=False),
    ]
    r = batches_web.post(
        "/v1/completions", json={"model": "dsv4-test", "prompt": ids, "echo": True, "max_tokens": 3}
    )
    cc = Completion.model_validate(r.json())
    assert [c.index for c in cc.choices] == [0, 1]
    for c, p in zip(cc.choices, ids):
        assert c.text.startswith(tok.decode(p)), (c.text, tok.decode(p))


def test_llm_d_156_stream_true_line_fails_alone_naming_stream(batches_client: openai.OpenAI) -> None:
    """llm-d/llm-d-batch-gateway#156 (its issue #153): a batch line with ``"stream": true`` was
    passed on and reached a processor that cannot answer a stream. Expected (OpenAI's batch
    rules: a batch answer is one output line, never a stream): that line fails on its own as a
    400 whose error names ``stream``, written to the error file, while the other lines of the
    batch run and are counted completed. Oracles: the ``openai`` client's types and the batch's
    own counts against the lines the test wrote."""
    rows = [chat_line("ok-1", "a"), chat_line("streamy", "b", stream=True), chat_line("ok-2", "c")]
    b = run_batch(batches_client, rows)
    assert b.status == "completed" and b.request_counts is not None, b
    assert (b.request_counts.completed, b.request_counts.failed, b.request_counts.total) == (2, 1, 3)
    done = read_lines(batches_client, b.output_file_id)
    assert sorted(x["custom_id"] for x in done) == ["ok-1", "ok-2"]
    for x in done:
        ChatCompletion.model_validate(x["response"]["body"])
    [bad] = read_lines(batches_client, b.error_file_id)
    assert bad["custom_id"] == "streamy" and bad["response"]["status_code"] == 400
    assert bad["response"]["body"]["param"] == "stream"
