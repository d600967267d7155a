"""A twentieth set of public bug reports, second pass over ``POST /v1/chat/completions``: streams
that end abnormally (an engine abort, an exception of the generation after the first chunk,
outputs that stop before a choice finished) must reach the client as errors, never as a finished
answer; the per-choice finish of ``n > 1`` streams; ``max_completion_tokens`` over ``max_tokens``.

Fixed here: an exception other than a request error after the first chunk cut the response off
mid-body (now an in-band 500 error event, on the completions, Responses and Messages streams
too); engine outputs that ended before every choice had a finish reason ended like a completed
stream (now a 500 error event); a bare ``"abort"`` finish reason went out as the choice's
``finish_reason`` (now the abort's error event).

The route runs in process over the fake tokenizer manager of ``openai_fake_tm`` (fast tier).
Oracles: the ``openai`` client's own stream parser and types (what it raises, what its
``ChatCompletionStreamState`` folds the chunks into) and a cold non-streamed run of the same
request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client, oai_client
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")

from openai.lib.streaming.chat import ChatCompletionStreamState  # noqa: E402
from openai.types.chat import ChatCompletion  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
#: OpenAI's chat finish reasons (``openai.types.chat.chat_completion.Choice.finish_reason``)
OPENAI_FINISH = {"stop", "length", "tool_calls", "content_filter", "function_call"}


class _BrokenTM(FakeTM):
    """A fake tokenizer manager whose stream goes wrong at its ``at``-th output: ``abort`` (an
    engine abort in SGLang's dict shape), ``abort_str`` (the bare string form), ``cut`` (the
    outputs just end, no finish reason), or an exception raised (``raise``)."""

    def __init__(self, tok: Any, mode: str, at: int = 3, exc: Exception | None = None) -> None:
        super().__init__(tok)
        self.mode, self.at, self.exc = mode, at, exc

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        i = 0
        async for out in super().generate_request(obj, request):
            i += 1
            if i == self.at:
                if self.mode == "raise":
                    assert self.exc is not None
                    raise self.exc
                if self.mode == "cut":
                    return
                if self.mode.startswith("abort"):
                    reason: Any = "abort"
                    if self.mode == "abort":
                        reason = {
                            "type": "abort",
                            "message": "Aborted",
                            "status_code": None,
                            "err_type": None,
                        }
                    yield dict(out, meta_info=dict(out["meta_info"], finish_reason=reason))
                    return
            yield out


def _stream_chunks(tm: FakeTM, **body: Any) -> list[Any]:
    """The chunks the ``openai`` client reads from a streamed chat request on ``tm`` (whatever
    it raises propagates)."""
    client = oai_client(app_client(tm))
    return list(client.chat.completions.create(model=MODEL, messages=HI, stream=True, **body))


# --------------------------------------------------------------------------- abnormal ends


@pytest.mark.parametrize("mode", ["abort", "abort_str"])
def test_vllm_57082_engine_abort_mid_stream_is_an_error_not_a_finish(
    tok: PreTrainedTokenizerFast, mode: str
) -> None:
    """vllm-project/vllm#57082: a request the engine aborted mid-stream (pause, shutdown,
    ``/abort_request``) ended with a chunk whose ``finish_reason`` was ``"abort"`` (no OpenAI
    value) and then ``data: [DONE]``, so the client took the cut-off text for the whole answer.
    Expected: the ``openai`` client's stream raises ``APIError``, and no chunk it read carries a
    finish reason outside OpenAI's enum (the bare ``"abort"`` string form went out as one)."""
    seen: list[Any] = []
    with pytest.raises(openai.APIError) as ei:
        client = oai_client(app_client(_BrokenTM(tok, mode)))
        for ch in client.chat.completions.create(model=MODEL, messages=HI, stream=True):
            seen.append(ch)
    assert "Aborted" in ei.value.message
    assert seen, "the chunks before the abort were streamed"
    assert all(c.finish_reason in OPENAI_FINISH | {None} for ch in seen for c in ch.choices)


@pytest.mark.parametrize(
    "exc", [RuntimeError("detokenizer state lost"), asyncio.TimeoutError()], ids=["runtime", "timeout"]
)
@pytest.mark.parametrize("route", ["chat", "completions"])
def test_open_webui_29697_exception_mid_stream_is_an_in_band_error(
    tok: PreTrainedTokenizerFast, exc: Exception, route: str
) -> None:
    """open-webui/open-webui#29697 (the same in BerriAI/litellm#39748): a streamed completion
    whose generation raised after the 200 headers were sent was cut off mid-body, which a
    client reads as a transport error, or past a proxy as a complete but short answer.
    Expected: the failure is sent in band, an error event then ``[DONE]``; the ``openai``
    client raises ``APIError`` with a 5xx ``code`` in the error body, and the type of the
    exception in its message."""
    client = oai_client(app_client(_BrokenTM(tok, "raise", exc=exc)))
    with pytest.raises(openai.APIError) as ei:
        if route == "chat":
            list(client.chat.completions.create(model=MODEL, messages=HI, stream=True))
        else:
            list(client.completions.create(model=MODEL, prompt="Hi", stream=True))
    body = ei.value.body
    assert isinstance(body, dict) and body["code"] >= 500, body
    assert type(exc).__name__ in ei.value.message


@pytest.mark.parametrize("n", [1, 2])
def test_cherry_studio_19793_stream_without_finish_reason_is_an_error(
    tok: PreTrainedTokenizerFast, n: int
) -> None:
    """CherryHQ/cherry-studio#19793: a chat stream ended (``[DONE]``) before its choice had a
    finish reason, so the client could not tell a cut-off answer from a finished one. Expected:
    when the engine's outputs end before every choice finished, the stream ends with an error
    event: the ``openai`` client raises ``APIError`` (5xx), never returns as if complete."""
    with pytest.raises(openai.APIError) as ei:
        _stream_chunks(_BrokenTM(tok, "cut", at=4), n=n)
    assert ei.value.body["code"] >= 500 and "finish reason" in ei.value.message


# --------------------------------------------------------------------------- n > 1 streams


def test_openai_python_434_each_choice_finishes_when_it_is_done(tok: PreTrainedTokenizerFast) -> None:
    """openai/openai-python#434: with ``n > 1`` the finish chunks of all choices came at the end of
    the stream, so a client could not tell that one choice had finished early. Expected: each
    choice gets exactly one finish chunk, sent as soon as that choice is done (here choice 0's
    reply is shorter: its finish comes before choice 1's last text), the usage chunk comes
    after every finish, and the ``openai`` client's ``ChatCompletionStreamState`` folds the
    chunks into the cold non-streamed answer of the same request."""
    tm = FakeTM(tok)
    cold = ChatCompletion.model_validate(
        app_client(FakeTM(tok)).post(CHAT, json={"model": MODEL, "messages": HI, "n": 2}).json()
    )
    chunks = _stream_chunks(tm, n=2, stream_options={"include_usage": True})
    finishes = [(k, c.index) for k, ch in enumerate(chunks) for c in ch.choices if c.finish_reason]
    assert sorted(i for _, i in finishes) == [0, 1]
    pos = dict((i, k) for k, i in finishes)
    last_text_1 = max(
        k for k, ch in enumerate(chunks) for c in ch.choices if c.index == 1 and c.delta.content
    )
    assert pos[0] < last_text_1 < pos[1]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(ch.usage is None for ch in chunks[:-1])
    state = ChatCompletionStreamState()
    for ch in chunks:
        state.handle_chunk(ch)
    got = state.get_final_completion()
    assert [(c.index, c.message.content, c.finish_reason) for c in got.choices] == [
        (c.index, c.message.content, c.finish_reason) for c in cold.choices
    ]
    assert chunks[-1].usage.completion_tokens == cold.usage.completion_tokens


# --------------------------------------------------------------------------- request fields


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        ({"max_tokens": 5, "max_completion_tokens": 2}, 2),
        ({"max_tokens": 2, "max_completion_tokens": 5}, 5),
        ({"max_tokens": 3, "max_completion_tokens": None}, 3),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_sglang_17516_max_completion_tokens_wins_over_max_tokens(
    tok: PreTrainedTokenizerFast, limits: dict[str, Any], want: int, stream: bool
) -> None:
    """sgl-project/sglang#17516: a request carrying both ``max_tokens`` and
    ``max_completion_tokens`` with different values was limited by ``max_tokens``, which
    OpenAI's reference deprecates in favour of ``max_completion_tokens``. Expected: the engine
    is asked for ``max_completion_tokens`` new tokens when it is set (``max_tokens`` when it is
    null), and the answer the ``openai`` client reads is cut at that many tokens (finish reason
    ``length``), streamed or not."""
    tm = FakeTM(tok)
    client = oai_client(app_client(tm))
    if stream:
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=HI, stream=True, stream_options={"include_usage": True}, **limits
            )
        )
        text = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
        finish = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
        usage = chunks[-1].usage
    else:
        got = client.chat.completions.create(model=MODEL, messages=HI, **limits)
        text, finish, usage = got.choices[0].message.content, [got.choices[0].finish_reason], got.usage
    assert tm.received[-1].sampling_params["max_new_tokens"] == want
    assert text == tok.decode(tok.encode(tm.reply, add_special_tokens=False)[:want])
    assert finish == ["length"] and usage is not None and usage.completion_tokens == want
