"""A twenty-first set of public bug reports, on streaming: log-probability records of a stream
whose engine output carries no logprob fields (an abort or finish chunk), a stream whose
generation produced no output, a client that hangs up in the middle of a chat or completions
stream, and multi-byte characters split across tokens of a legacy completions stream with
``logprobs``. Each test names its report. One was a fault here (sgl-project/sglang#33042): the
chat and Responses streams counted the records sent from the last output's logprob list, so an
output without one reset the count and the next output sent every record again; the other
reports passed as-is and are kept as regression tests of behaviour a client relies on.

Fixtures: in process, the OpenAI router over ``openai_fake_tm.FakeTM`` (cumulative outputs of a
fixed reply, fake log-probabilities) or a tokenizer manager written here; ``held_fake_server``
(``server_fixture.FakeScheduler``: a prompt holding ``[hold]`` runs until it is aborted).
Oracles: the reply through the DeepSeek-V4 tokenizer (``tokenizer.json`` as a ``transformers``
fast tokenizer), UTF-8, the same request not streamed, and the ``openai`` client's own stream
reader and error types.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import requests
from chat_tools_testutil import _ByteFragmentTM
from control_testutil import HOLD
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from server_fixture import ServerHandle

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
MODEL = "dsv4-test"  # app_client's and held_fake_server's served model name
HI = [{"role": "user", "content": "Hi"}]


class _LogprobGapTM(FakeTM):
    """``FakeTM`` whose streamed output number ``gap`` (0-based) carries no logprob fields in its
    ``meta_info``, as an engine output whose logprob accounting never started does."""

    def __init__(self, tokenizer: Any, gap: int = 2) -> None:
        super().__init__(tokenizer)
        self.gap = gap

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        k = 0
        async for out in super().generate_request(obj, request):
            if obj.stream and k == self.gap:
                meta = {key: v for key, v in out["meta_info"].items() if "logprob" not in key}
                out = dict(out, meta_info=meta)
            k += 1
            yield out


class _SilentTM(FakeTM):
    """``FakeTM`` whose generation ends without a single output."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        self.received.append(obj)
        return
        yield  # an async generator that yields nothing


def _reply_tokens(tok: Any, reply: str) -> list[str]:
    """The reply's tokens, each as the text it decodes to (the tokenizer oracle)."""
    return [tok.decode([t]) for t in tok.encode(reply, add_special_tokens=False)]


def test_sglang_33042_an_output_without_logprob_fields_repeats_no_logprob_record(tok: Any) -> None:
    """sgl-project/sglang#33042 (a streamed chunk without logprob fields -- an abort or finish
    output whose logprob accounting never started -- broke the streaming logprob bookkeeping:
    the route read the field unguarded and answered 500). Here the chat and Responses streams
    took the records sent from the last output's list, so an output without one reset the
    count and the next output sent all records again. Expected, with the third output bare: on
    the chat, legacy completions and Responses streams every generated token's record is sent
    exactly once, in order (the tokenizer's tokens of the reply), as in the answer not
    streamed, and the streamed text is the reply."""
    tm = _LogprobGapTM(tok)
    tc = app_client(tm)
    want = _reply_tokens(tok, tm.reply)

    body = {"model": MODEL, "messages": HI, "logprobs": True}
    whole = tc.post(CHAT, json=body).json()["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in whole] == want
    events = sse_data_events(tc.post(CHAT, json={**body, "stream": True}))
    assert events[-1] == "[DONE]"
    records = [
        e
        for ev in events[:-1]
        for ch in ev["choices"]
        for e in ((ch.get("logprobs") or {}).get("content") or [])
    ]
    assert [e["token"] for e in records] == want
    assert [e["logprob"] for e in records] == [e["logprob"] for e in whole]
    assert "".join(ch["delta"].get("content") or "" for ev in events[:-1] for ch in ev["choices"]) == tm.reply

    events = sse_data_events(
        tc.post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi", "logprobs": 0, "stream": True})
    )
    tokens = [
        t for ev in events[:-1] for ch in ev["choices"] for t in (ch["logprobs"] or {}).get("tokens", [])
    ]
    assert tokens == want

    r = tc.post(
        RESPONSES,
        json={
            "model": MODEL,
            "input": "Hi",
            "stream": True,
            "include": ["message.output_text.logprobs"],
            "top_logprobs": 0,
        },
    )
    assert r.status_code == 200, r.text
    deltas = [json.loads(line[len("data: ") :]) for line in r.text.split("\n") if line.startswith("data: {")]
    deltas = [d for d in deltas if d["type"] == "response.output_text.delta"]
    assert [e["token"] for d in deltas for e in d.get("logprobs") or []] == want
    assert "".join(d["delta"] for d in deltas) == tm.reply


def test_sglang_10105_a_stream_whose_generation_gave_no_output_is_an_error(tok: Any) -> None:
    """sgl-project/sglang#10105 (a chat stream whose generator produced nothing crashed in the
    stream writer with ``UnboundLocalError``, the client left with a broken connection).
    Expected of the chat and legacy completions routes, streamed or not: an error answer in
    OpenAI's shape (status 500, ``error.message`` and ``type``), which the ``openai`` client
    raises as ``InternalServerError`` -- never a 200 stream that ends without chunks."""
    tc = app_client(_SilentTM(tok))
    client = oai_client(tc)
    for stream in (False, True):
        with pytest.raises(openai.InternalServerError) as chat_err:
            list(client.chat.completions.create(model=MODEL, messages=HI, stream=True)) if stream else (
                client.chat.completions.create(model=MODEL, messages=HI)
            )
        with pytest.raises(openai.InternalServerError) as cmpl_err:
            list(client.completions.create(model=MODEL, prompt="Hi", stream=True)) if stream else (
                client.completions.create(model=MODEL, prompt="Hi")
            )
        for err in (chat_err.value, cmpl_err.value):
            assert err.status_code == 500
            body = err.response.json()
            assert body["error"]["message"] and body["error"]["type"] == "server_error", body


def _running(server: ServerHandle) -> int:
    return int(requests.get(server.url + "/server_info", timeout=10).json()["num_running_reqs"])


def _wait_idle(server: ServerHandle, timeout_s: float = 15.0) -> None:
    deadline = time.time() + timeout_s
    while _running(server) > 0:
        assert time.time() < deadline, "the request is still running"
        time.sleep(0.05)


@pytest.mark.parametrize(
    "path,body",
    [
        (CHAT, {"messages": [{"role": "user", "content": f"{HOLD} write forever"}]}),
        (COMPLETIONS, {"prompt": f"{HOLD} write forever"}),
    ],
)
def test_vllm_32439_a_client_that_hangs_up_mid_stream_aborts_its_request(
    held_fake_server: ServerHandle, path: str, body: dict[str, Any]
) -> None:
    """vllm-project/vllm#32439 (fixes vllm-project/vllm#10087 and #23697: a chat or completions
    stream whose client disconnected was not aborted, and held its KV pages and scheduler slot
    until it reached ``max_tokens``). Expected: a streamed chat or legacy completions request
    (held running by the fake model) runs while its client reads, and after the client closes
    the connection the server runs no request soon after (the request aborted, its pages
    returned)."""
    _wait_idle(held_fake_server)
    r = requests.post(
        held_fake_server.url + path,
        json={"model": MODEL, "max_tokens": 400, "stream": True, **body},
        stream=True,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    lines = r.iter_lines()  # kept referenced: dropping the generator closes the connection
    seen = [next(lines)]
    while not seen[-1].startswith(b"data: {"):
        seen.append(next(lines))
    time.sleep(0.2)
    assert _running(held_fake_server) == 1  # held while the client reads
    r.close()
    _wait_idle(held_fake_server, 30.0)
    del lines


def test_mlc_llm_1142_completion_logprob_tokens_through_an_emoji_join_to_the_streamed_text(
    tok: Any,
) -> None:
    """mlc-ai/mlc-llm#1142 (a streamed reply cut an emoji made of several tokens in the middle
    of its UTF-8 bytes, and the client showed U+FFFD). Expected of a legacy completions stream
    with ``logprobs: 1`` whose reply has an emoji of byte-fallback tokens: no chunk's ``text``
    holds U+FFFD, the texts join to the reply, and the streamed ``tokens`` join to the same text
    (a token of an unfinished character waits for the chunk that shows it), one per generated
    token, with ``text_offset`` each token's position in the reply."""
    reply = "ok 🦙 done"
    ids = tok.encode(reply, add_special_tokens=False)
    assert any(tok.decode([i]) == "\ufffd" for i in ids), ids  # the emoji is split over tokens
    tc = app_client(_ByteFragmentTM(tok, reply, cand_ids=[]))
    events = sse_data_events(
        tc.post(COMPLETIONS, json={"model": MODEL, "prompt": "Hi", "logprobs": 1, "stream": True})
    )
    assert events[-1] == "[DONE]"
    choices = [ch for ev in events[:-1] for ch in ev["choices"]]
    assert all("\ufffd" not in ch["text"] for ch in choices), choices
    assert "".join(ch["text"] for ch in choices) == reply
    tokens = [t for ch in choices for t in (ch["logprobs"] or {}).get("tokens", [])]
    offsets = [o for ch in choices for o in (ch["logprobs"] or {}).get("text_offset", [])]
    assert "".join(tokens) == reply and len(tokens) == len(ids)
    assert offsets == [len("".join(tokens[:k])) for k in range(len(tokens))]
