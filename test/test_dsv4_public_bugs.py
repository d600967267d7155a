"""DeepSeek-V4 bug reports of peer servers (vLLM's "DSv4" label, SGLang's DeepSeek-V4 issues),
replayed against the OpenAI, Responses and Anthropic routes (each test names its report).

The model's text is written by hand and generated token by token by the fake engine
(:class:`~test_chat_tool_stream_agreement.ChunkTM`); oracles: the hand-written text, the
``openai`` client's parser and stream accumulator, ``json.loads``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anthropic
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sglang_v4.entrypoints.anthropic import create_anthropic_router
from sglang_v4.entrypoints.openai import create_openai_router
from test_chat_tool_stream_agreement import ChunkTM, _block, _folded, _invoke, _message, _param
from test_openai_tools import WEATHER, accumulate, client_for
from transformers import PreTrainedTokenizerFast

D = "｜DSML｜"
MSGS = [{"role": "user", "content": "Weather in Oslo?"}]
#: A conversation that already holds a call and its result: the model has seen DSML written.
HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "4C, rain"},
    {"role": "user", "content": "And in Bergen?"},
]
CALL = _block(_invoke("get_weather", _param("city", True, "Bergen")))


def _anthropic_client(tm: Any) -> anthropic.Anthropic:
    """The ``anthropic`` client over an app serving the OpenAI and Anthropic routes on ``tm``."""
    sa = SimpleNamespace(served_model_name="m", model_path=None, api_key=None, enable_cache_report=False)
    app = FastAPI()
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return anthropic.Anthropic(
        base_url="http://testserver", api_key="x", http_client=TestClient(app), max_retries=0
    )


def _no_markup(*texts: str | None) -> None:
    for t in texts:
        assert not t or ("DSML" not in t and "｜" not in t), t


# sgl-project/sglang#35736: with tools and ``tool_choice: "none"`` the model still wrote a DSML
# block (7/7, streamed and not, with and without reasoning_effort) and it came back raw in
# ``content`` with finish reason "stop". The official API returns neither markup nor a call.
# Every shape of such output: a block after text, a block alone, a bare invoke, a closing tag
# alone, a malformed block, text after the block, and the block cut by max_tokens.
NONE_REPLIES = {
    "after_text": ("Let me look that up." + CALL, "Let me look that up."),
    "alone": (CALL, ""),
    "bare_invoke": ("Checking.\n\n" + _invoke("get_weather", _param("city", True, "Bergen")), "Checking."),
    "orphan_close": (f"Done.\n</{D}tool_calls>", "Done."),
    "malformed": (f'Sure.\n\n<{D}tool_calls>\n<{D}invoke name="nope">\n<{D}parameter oops', "Sure."),
    "text_after": ("Hmm." + CALL + "\n\nIt is 5C.", "Hmm."),
    "partial_marker_is_text": ("a < b and x<y", "a < b and x<y"),
}


@pytest.mark.parametrize("case", sorted(NONE_REPLIES))
@pytest.mark.parametrize("per_chunk", [1, 3])
def test_sglang_35736_tool_choice_none_never_returns_dsml(
    tok: PreTrainedTokenizerFast, case: str, per_chunk: int
) -> None:
    reply, content = NONE_REPLIES[case]
    client, _ = client_for(ChunkTM(tok, reply, per_chunk=per_chunk))
    kw: dict[str, Any] = dict(model="m", messages=HISTORY, tools=[WEATHER], tool_choice="none")
    for got in (_message(client, **kw), _folded(client, **kw)):
        assert got == (content, [], "stop")
    # cut by the token limit inside the block: the text before it, finish reason "length"
    if CALL in reply:
        limit = len(tok.encode(reply[: reply.index(CALL) + len(CALL) // 2], add_special_tokens=False))
        assert _message(client, **kw, max_tokens=limit) == (content, [], "length")
        s = accumulate(client.chat.completions.create(**kw, max_tokens=limit, stream=True))
        assert (s["content"], s["calls"], s["finish"]) == (content, {}, "length")


def test_sglang_35736_tool_choice_none_in_thinking_mode(tok: PreTrainedTokenizerFast) -> None:
    """A block that ends the reasoning (no ``</think>`` first) with the tools withheld: the reasoning
    is the text before it, nothing of the block in either field."""
    client, _ = client_for(ChunkTM(tok, "I should call the tool." + CALL))
    kw: dict[str, Any] = dict(
        model="m",
        messages=HISTORY,
        tools=[WEATHER],
        tool_choice="none",
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    msg = client.chat.completions.create(**kw).choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    assert (reasoning, msg.content or "", msg.tool_calls) == ("I should call the tool.", "", None)
    with client.chat.completions.stream(**kw) as stream:
        folded = stream.get_final_completion().choices[0]
    assert (folded.message.content or "", folded.message.tool_calls, folded.finish_reason) == (
        "",
        None,
        "stop",
    )
    _no_markup(folded.message.content)


def test_sglang_35736_tool_choice_none_on_responses_and_messages(tok: PreTrainedTokenizerFast) -> None:
    """The Responses (``tool_choice: "none"``) and Anthropic Messages (``{"type": "none"}``) routes
    read the answer the same way: the text before the block, no call, no markup."""
    _, tc = client_for(ChunkTM(tok, "Let me look that up." + CALL))
    fn = WEATHER["function"]
    body = {
        "model": "m",
        "input": "Weather in Oslo?",
        "tools": [{"type": "function", "name": fn["name"], "parameters": fn["parameters"]}],
        "tool_choice": "none",
    }
    for stream in (False, True):
        r = tc.post("/v1/responses", json={**body, "stream": stream})
        assert r.status_code == 200, r.text
        _no_markup(r.text)
        assert "function_call" not in r.text and "Let me look that up." in r.text
    client = _anthropic_client(ChunkTM(tok, "Let me look that up." + CALL))
    mkw: dict[str, Any] = dict(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[{"name": fn["name"], "input_schema": fn["parameters"]}],
        tool_choice={"type": "none"},
    )
    msg = client.messages.create(**mkw)
    with client.messages.stream(**mkw) as stream:
        folded = stream.get_final_message()
    for m in (msg, folded):
        assert [(b.type, getattr(b, "text", None)) for b in m.content] == [("text", "Let me look that up.")]
        assert m.stop_reason == "end_turn"


def test_sglang_35736_auto_still_parses_the_same_reply(tok: PreTrainedTokenizerFast) -> None:
    """The control: the same reply under ``tool_choice: "auto"`` is a call."""
    client, _ = client_for(ChunkTM(tok, "Let me look that up." + CALL))
    kw: dict[str, Any] = dict(model="m", messages=HISTORY, tools=[WEATHER])
    assert _message(client, **kw) == (
        "Let me look that up.",
        [("get_weather", '{"city": "Bergen"}')],
        "tool_calls",
    )
