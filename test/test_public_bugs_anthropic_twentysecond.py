"""Public reports on the token usage of Anthropic Messages streams (``/v1/messages``), replayed
through the in-process routes over a fake tokenizer manager (each test names its report).

Oracles: the ``anthropic`` client's own types and its stream accumulator
(``client.messages.stream``), the Messages streaming reference (``message_start`` carries the
input-side usage, ``message_delta.usage`` is cumulative), the ``transformers`` tokenizer's counts
of the prompt the route rendered and of the reply, and the non-streamed message of the same request.
"""

from __future__ import annotations

from typing import Any

from anthropic_testutil import make_clients, post
from fake_prompt_tm import MODEL, PromptTM
from transformers import PreTrainedTokenizerFast

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
REPLY = "It is sunny in Paris today."
#: the prompt tokens the fake tokenizer manager reports as read from the prefix cache
CACHED = 2
USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _usage(u: Any) -> dict[str, Any]:
    d = u if isinstance(u, dict) else u.model_dump()
    return {k: d.get(k) for k in USAGE_KEYS}


def test_sglang_29703_streamed_message_start_carries_the_cache_read_tokens(
    tok: PreTrainedTokenizerFast,
) -> None:
    """sgl-project/sglang#29703: the Anthropic route's streamed ``message_start`` never carried
    ``cache_read_input_tokens`` (the per-chunk usage it was built from lacked the cached count),
    while the non-streamed message did. With ``--enable-cache-report``: the stream's
    ``message_start`` usage splits the prompt as the non-streamed message does
    (``cache_read_input_tokens`` the cached tokens, ``input_tokens`` the rest, together the prompt's
    token count), and the SDK's accumulated message has the non-streamed usage."""
    tm = PromptTM(tok, reply=REPLY)
    client, _, tc = make_clients(tm, cache_report=True)
    body, events = post(tc, {"messages": USER})
    n_prompt = len(tm.received[-1].input_ids)
    want = {
        "input_tokens": n_prompt - CACHED,
        "output_tokens": len(tok.encode(REPLY, add_special_tokens=False)),
        "cache_read_input_tokens": CACHED,
        "cache_creation_input_tokens": 0,
    }
    assert _usage(body["usage"]) == want
    start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
    assert _usage(start) == {**want, "output_tokens": 0}
    with client.messages.stream(model=MODEL, max_tokens=100, messages=USER) as s:
        final = s.get_final_message()
    assert _usage(final.usage) == want


def test_envoy_ai_gateway_2290_message_delta_usage_is_cumulative(tok: PreTrainedTokenizerFast) -> None:
    """envoyproxy/ai-gateway#2290 (and langchain-ai/langchainjs#11195): consumers that read the
    input-side counts from the final ``message_delta`` recorded 0 input tokens, because the
    server put only ``output_tokens`` there. The Messages streaming reference defines that usage
    as cumulative: the ``message_delta`` carries the input and cache counts of ``message_start``
    and the whole reply's ``output_tokens``, with and without the cache report."""
    for cache_report in (False, True):
        tm = PromptTM(tok, reply=REPLY)
        _, _, tc = make_clients(tm, cache_report=cache_report)
        body, events = post(tc, {"messages": USER})
        start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
        delta = next(e for e in events if e["type"] == "message_delta")["usage"]
        n_out = len(tok.encode(REPLY, add_special_tokens=False))
        assert delta["output_tokens"] == n_out == body["usage"]["output_tokens"]
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            assert delta.get(k) == start.get(k) == body["usage"].get(k), (cache_report, k)
        cached = CACHED if cache_report else 0
        assert delta["input_tokens"] + (delta.get("cache_read_input_tokens") or 0) == len(
            tm.received[-1].input_ids
        )
        assert (delta.get("cache_read_input_tokens") or 0) == cached
