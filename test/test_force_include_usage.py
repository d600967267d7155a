"""vLLM's ``--enable-force-include-usage``: every streamed chat / completions response ends with
the ``usage`` chunk (no choices) and every chunk carries the usage so far, whatever
``stream_options`` says (vLLM's ``should_include_usage`` returns ``(True, True)`` under the flag).

Oracles: the tokenizer's own counts of the prompt and of the fake reply's tokens streamed so far,
and the same requests without the flag (no usage unless asked for, OpenAI's documented default).
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from openai_fake_tm import FakeTM, app_client, sse_data_events
from sglang_v4.server_args import ServerArgs

MSGS = [{"role": "user", "content": "2+2?"}]


def test_cli_flag() -> None:
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    sa = ServerArgs.from_cli_args(parser.parse_args(["--enable-force-include-usage", "--device", "cpu"]))
    assert sa.enable_force_include_usage is True
    assert ServerArgs(device="cpu").enable_force_include_usage is False


@pytest.mark.parametrize(
    ("path", "extra"),
    [("/v1/chat/completions", {"messages": MSGS}), ("/v1/completions", {"prompt": "2+2?"})],
)
@pytest.mark.parametrize(
    "stream_options",
    [None, {"include_usage": False}, {"include_usage": False, "continuous_usage_stats": False}],
)
def test_usage_in_every_stream(tok: Any, path: str, extra: dict[str, Any], stream_options: Any) -> None:
    body: dict[str, Any] = {"model": "dsv4-test", "stream": True, **extra}
    if stream_options is not None:
        body["stream_options"] = stream_options
    reply_ids = tok.encode(FakeTM(tok).reply, add_special_tokens=False)

    tm = FakeTM(tok)
    events = sse_data_events(app_client(tm, enable_force_include_usage=True).post(path, json=body))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    n_prompt = len(tm.received[-1].input_ids or tok.encode(tm.received[-1].text))
    last = chunks[-1]
    u = last["usage"]
    assert last["choices"] == [] and (u["prompt_tokens"], u["completion_tokens"], u["total_tokens"]) == (
        n_prompt,
        len(reply_ids),
        n_prompt + len(reply_ids),
    )
    # continuous usage: every chunk with choices carries the usage so far
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1] if c.get("usage")]
    assert len(counts) == len(chunks) - 1, chunks
    assert counts == sorted(counts) and counts[-1] == len(reply_ids)
    assert all(c["usage"]["prompt_tokens"] == n_prompt for c in chunks)

    # without the flag the same request streams no usage
    plain = sse_data_events(app_client(FakeTM(tok)).post(path, json=body))[:-1]
    assert all(not c.get("usage") for c in plain) and plain[-1]["choices"], plain[-1]
