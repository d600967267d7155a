"""``--preferred-sampling-params`` on every route that builds sampling parameters besides the
chat and completions routes (covered in ``test_public_bugs_config_thirtysecond``): ``/v1/responses``,
``/v1/messages`` (Anthropic), ``/generate`` (SGLang's native body, as the ``Engine`` parses it
too) and the Batch API's lines.

Fixture: the OpenAI and Anthropic routers in process over a tokenizer manager that validates each
request with the real ``TokenizationMixin._tokenize_one`` (where the preferred parameters are
merged) and yields a fixed reply cut at the merged ``max_new_tokens``
(``preferred_sampling_testutil``).

Oracles: the flag's documented order (README: the request's own values, an explicit ``null``
included, then the model's ``generation_config.json`` on chat, then the server's preferred values,
then the protocol's defaults; SGLang's tokenizer manager merges ``{**preferred, **request}``), and
the ``openai`` / ``anthropic`` clients' parse of the answers (token counts of the reply, the
Responses object's echo of the values sampled with).
"""

from __future__ import annotations

from typing import Any

import pytest
from batches_testutil import chat_line, read_lines, run_batch
from preferred_sampling_testutil import MODEL, anthropic_of, openai_of, preferred_app
from sglang_v4.entrypoints.native_api import parse_generate_body

#: the server-wide defaults of the tests (SGLang's example flag value, plus a temperature)
PREFERRED: dict[str, Any] = {"max_new_tokens": 3, "presence_penalty": 0.5, "temperature": 0.3}
USER = [{"role": "user", "content": "Hi"}]


def _triple(sp: Any) -> tuple[Any, Any, Any]:
    return sp.max_new_tokens, sp.presence_penalty, sp.temperature


def test_responses_take_preferred_values_and_echo_them(tok: Any) -> None:
    """``/v1/responses`` without sampling fields samples with the preferred values, and the
    Response object echoes the values it sampled with (OpenAI's ``temperature`` /
    ``presence_penalty`` fields, read by the ``openai`` client), not the protocol's 1.0 / 0.0;
    the reply is cut at the preferred 3 tokens (``usage.output_tokens``). A field the request
    sends wins, and so does an explicit ``null`` (no limit; OpenAI's default temperature 1)."""
    tm, tc = preferred_app(tok, PREFERRED)
    client = openai_of(tc)
    r = client.responses.create(model=MODEL, input="Hi")
    assert _triple(tm.merged[-1]) == (3, 0.5, 0.3)
    assert (r.temperature, r.presence_penalty) == (0.3, 0.5)
    assert r.usage is not None and r.usage.output_tokens == 3 and r.status == "incomplete"
    r = client.responses.create(model=MODEL, input="Hi", temperature=0.9, max_output_tokens=5)
    assert _triple(tm.merged[-1]) == (5, 0.5, 0.9)
    assert r.temperature == 0.9
    client.responses.create(model=MODEL, input="Hi", max_output_tokens=None, temperature=None)
    assert _triple(tm.merged[-1]) == (None, 0.5, 1.0)  # OpenAI: temperature "Defaults to 1"


def test_responses_stream_takes_preferred_values(tok: Any) -> None:
    """The streamed ``/v1/responses`` answer: the same preferred values, echoed in the
    ``response.completed`` / ``response.incomplete`` event's response."""
    tm, tc = preferred_app(tok, PREFERRED)
    events = list(openai_of(tc).responses.create(model=MODEL, input="Hi", stream=True))
    assert _triple(tm.merged[-1]) == (3, 0.5, 0.3)
    last = events[-1].response  # type: ignore[union-attr]
    assert (last.temperature, last.presence_penalty) == (0.3, 0.5)


def test_anthropic_messages_take_preferred_values(tok: Any) -> None:
    """``/v1/messages``: ``max_tokens`` is required by Anthropic's API and wins; the fields the
    request leaves out (``temperature``, and ``presence_penalty`` that the protocol lacks) take
    the preferred values; a ``temperature`` the request sends wins, ``null`` included."""
    tm, tc = preferred_app(tok, PREFERRED)
    client = anthropic_of(tc)
    m = client.messages.create(model=MODEL, max_tokens=5, messages=USER)  # type: ignore[arg-type]
    assert _triple(tm.merged[-1]) == (5, 0.5, 0.3)
    assert m.usage.output_tokens == 5
    client.messages.create(model=MODEL, max_tokens=5, messages=USER, extra_body={"temperature": 0.7})  # type: ignore[arg-type]
    assert _triple(tm.merged[-1]) == (5, 0.5, 0.7)
    client.messages.create(model=MODEL, max_tokens=5, messages=USER, extra_body={"temperature": None})  # type: ignore[arg-type]
    assert _triple(tm.merged[-1]) == (5, 0.5, 1.0)  # Anthropic: temperature "Defaults to 1.0"


def test_chat_explicit_null_takes_protocol_default_not_preferred(tok: Any) -> None:
    """sgl-project/sglang#34224's rule ("including explicit null") for every key, not only the
    limit: a chat request that sends ``temperature`` / ``presence_penalty`` as ``null`` samples
    with OpenAI's defaults (1 and 0), not the preferred 0.3 and 0.5; the same keys left out take
    the preferred values."""
    tm, tc = preferred_app(tok, PREFERRED)
    client = openai_of(tc)
    client.chat.completions.create(model=MODEL, messages=USER, temperature=None, presence_penalty=None)  # type: ignore[arg-type]
    assert _triple(tm.merged[-1]) == (3, 0.0, 1.0)
    client.completions.create(model=MODEL, prompt="Hi", temperature=None)
    assert _triple(tm.merged[-1]) == (3, 0.5, 1.0)
    client.chat.completions.create(model=MODEL, messages=USER)  # type: ignore[arg-type]
    assert _triple(tm.merged[-1]) == (3, 0.5, 0.3)


@pytest.mark.parametrize(
    ("sampling_params", "expected"),
    [(None, (3, 0.5, 0.3)), ({}, (3, 0.5, 0.3)), ({"temperature": 0.9, "max_new_tokens": 7}, (7, 0.5, 0.9))],
)
def test_native_generate_merges_preferred_under_request(
    tok: Any, sampling_params: dict[str, Any] | None, expected: tuple[Any, ...]
) -> None:
    """``/generate`` (and ``Engine.generate``, whose keywords go through the same body parser):
    SGLang's ``{**preferred, **sampling_params}``: the request's keys win, the others take the
    preferred values, also when ``sampling_params`` is left out."""
    import asyncio

    tm, _ = preferred_app(tok, PREFERRED)
    body: dict[str, Any] = {"text": "Hello"}
    if sampling_params is not None:
        body["sampling_params"] = sampling_params
    obj = parse_generate_body(body)

    async def run() -> list[Any]:
        return [o async for o in tm.generate_request(obj)]

    outs = asyncio.run(run())
    assert _triple(tm.merged[-1]) == expected
    assert len(outs[-1]["output_ids"]) == expected[0]


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_batch_lines_take_preferred_values(tok: Any, endpoint: str) -> None:
    """A Batch API line runs as its route's request: the fields it leaves out take the preferred
    values (the line's ``usage.completion_tokens`` is the preferred 3), a field it sends wins."""
    tm, tc = preferred_app(tok, PREFERRED)
    with tc:
        client = openai_of(tc)
        rows = [chat_line("a", "Hi"), chat_line("b", "Hi", temperature=0.9)]
        if endpoint == "/v1/completions":
            for row in rows:
                row["url"] = endpoint
                row["body"] = {
                    "model": MODEL,
                    "prompt": "Hi",
                    **{k: v for k, v in row["body"].items() if k == "temperature"},
                }
        b = run_batch(client, rows, endpoint)
        assert b.status == "completed", b
        lines = {x["custom_id"]: x for x in read_lines(client, b.output_file_id)}
    assert sorted(_triple(sp) for sp in tm.merged) == [(3, 0.5, 0.3), (3, 0.5, 0.9)]
    assert all(x["response"]["body"]["usage"]["completion_tokens"] == 3 for x in lines.values())
