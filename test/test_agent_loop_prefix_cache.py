"""Agent loops keep their prefix: each turn's prompt extends the last, and the prefix cache shows it.

An agent (OpenAI Chat Completions with tools, Anthropic Messages as Claude-Code-style clients
send it, the Responses API with ``previous_response_id`` or the whole history echoed) sends turn
N+1 as turn N's conversation + what the server answered + the tool results. Turn N+1's prompt then
starts with turn N's prompt and, wherever DeepSeek-V4's encoding allows it, with the tokens the
model generated in turn N, which the radix cache holds.

* The generated turn, echoed as the server returned it, is rendered back as the model wrote it
  (scripted replies through the chat route). The newlines in front of a DSML block and right after
  ``</think>`` are the format's separators and are trimmed; any other whitespace there (a space,
  a tab) is the answer's text: trimmed, it is missing from the next prompt, which then diverges
  from the generated tokens there and the cache loses the rest of the turn. Oracles: DeepSeek's response parser and V4 encoder (the
  ``deepseek-recipe`` package): it parses each reply as the route does, and its prompt of the
  echoed conversation starts with its prompt of turn N followed by the reply and EOS.
* Loops of several turns per API on a real CPU server (embedded random model, 128-token pages,
  tool calls forced with ``tool_choice``, parallel calls, streamed and not, thinking on and off):
  turn N+1's prompt starts with turn N's whole prompt and with the text the client was given (the
  reasoning in thinking mode, the content otherwise); the cache hit covers every whole page of the
  common prefix of turn N+1's prompt and turn N's prompt + output ids (the KV of the last output
  token is never computed). Oracle: the prompt and output token ids of the server's request log.
  Thinking mode without tools drops the reasoning of turns before the last user message
  (DeepSeek's encoding): the divergence is exactly turn N's last prompt token, ``<think>`` there
  and ``</think>`` in turn N+1.

The random model's own tokens diverge earlier than a trained model's would: it writes text in
tokens the tokenizer would not choose (DSML tags spelled byte by byte, ``"\\n" + "\\n"`` for
``"\\n\\n"``), bytes that are no UTF-8, placeholder special tokens that the text skips, and
whitespace the tool-call grammar allows between DSML tags that DeepSeek's format renders as one
newline. Re-rendering the echoed text cannot give those tokens back without keeping them on the
server, and a prompt holding them would not be the one DeepSeek's encoder gives for the messages;
the checks above hold whatever the model wrote. A call cut by ``max_tokens`` comes back with
arguments that are no JSON object; the chat route accepts them in an echoed message and renders
them as DeepSeek's encoder does (one ``arguments`` string parameter), but an agent cannot run such a
call, so the chat loop leaves it out.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chat_tools_testutil import WEATHER, CharTM, client_for
from responses_testutil import final_response
from server_fixture import ServerHandle, real_env, start_server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
recipe = pytest.importorskip("deepseek_recipe")
from deepseek_recipe_testutil import ids_in_written_order  # noqa: E402

pytestmark = pytest.mark.timeout(600)

D = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"
THINK_START_ID, THINK_END_ID = 128821, 128822
PAGE = 128
#: Turns of each tool loop: the fourth follows a turn whose tool choice was "auto" (every third).
N_TURNS = 4
RECIPE_MODEL = "DeepSeek-V4-Pro"  # the recipe's V4 model name (its V4 encoding)


# --------------------------------------------------------------------------- scripted replies

BLOCK = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="get_weather">\n'
    f'<{D}parameter name="city" string="true">Paris</{D}parameter>\n'
    f'<{D}parameter name="days" string="false">3</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)

#: (thinking, the model's reply up to its EOS): whitespace next to the separators.
REPLIES = [
    (False, "Checking both. " + BLOCK),  # a space before the block's "\n\n"
    (False, "Checking\t" + BLOCK),
    (False, "Sure." + BLOCK),
    (False, BLOCK),
    (True, "Need the weather.</think> Let me check." + BLOCK),  # a space after </think>
    (True, "Need the weather.</think>\tChecking.\n " + BLOCK),  # a newline inside the content
    (True, "Plan.</think>" + BLOCK),
    (True, "Easy.</think> It is 42."),
]


def _recipe_body(body: dict[str, Any], thinking: bool) -> dict[str, Any]:
    b = ids_in_written_order(body)
    b.pop("max_tokens", None)
    b.pop("chat_template_kwargs", None)
    return {**b, "model": RECIPE_MODEL, "thinking": {"type": "enabled" if thinking else "disabled"}}


def recipe_prompt(body: dict[str, Any], thinking: bool) -> str:
    """DeepSeek's prompt text of a Chat Completions body."""
    req = recipe.ChatCompletionRequest(_recipe_body(body, thinking)).convert(recipe.ConversionOptions())
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


def recipe_message(body: dict[str, Any], thinking: bool, reply: str) -> dict[str, Any]:
    """DeepSeek's response parser's message for the generated ``reply`` (stopped by EOS)."""
    req = recipe.ChatCompletionRequest(_recipe_body(body, thinking)).convert(recipe.ConversionOptions())
    gen = recipe.ChatCompletionRequest.chunk_generator(req, "id", "m")
    proc = recipe.StreamProcessor(gen, req.parsing_options)
    chunks = proc.push(recipe.InferenceChunk.ready(prompt_usage=recipe.PromptUsage(prompt_tokens=1)))
    chunks += proc.push(recipe.InferenceChunk.text(reply, 1))
    chunks += proc.push(recipe.InferenceChunk.finish(recipe.InferenceFinishReason.Stop))
    chunks += proc.finish()
    resp = recipe.ChatCompletionResponse("id", "m", 0, 1, 0)
    for c in chunks:
        resp.accumulate(c)
    return json.loads(resp.to_json())["choices"][0]["message"]


def _fields(m: dict[str, Any]) -> tuple[str, str, list[tuple[str, Any]]]:
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []
    ]
    return m.get("reasoning_content") or "", m.get("content") or "", calls


def _streamed_message(tc: Any, body: dict[str, Any]) -> dict[str, Any]:
    r = tc.post("/v1/chat/completions", json={**body, "stream": True})
    assert r.status_code == 200, r.text
    msg: dict[str, Any] = {"role": "assistant", "content": "", "reasoning_content": ""}
    calls: dict[int, dict[str, Any]] = {}
    for line in r.text.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for c in json.loads(line[6:])["choices"]:
            d = c["delta"]
            msg["content"] += d.get("content") or ""
            msg["reasoning_content"] += d.get("reasoning_content") or ""
            for t in d.get("tool_calls") or []:
                call = calls.setdefault(t["index"], {"id": t.get("id"), "type": "function"})
                fn = call.setdefault("function", {"name": "", "arguments": ""})
                fn["name"] += t["function"].get("name") or ""
                fn["arguments"] += t["function"].get("arguments") or ""
    if calls:
        msg["tool_calls"] = [calls[k] for k in sorted(calls)]
    return msg


@pytest.mark.parametrize("thinking,reply", REPLIES, ids=[str(i) for i in range(len(REPLIES))])
def test_echoed_reply_renders_back_as_generated(tok: Any, thinking: bool, reply: str) -> None:
    """The route reads the reply as DeepSeek's parser does, streamed and not, and the next turn's
    prompt (DeepSeek's encoder, on the message echoed as returned) repeats the reply and its EOS
    after turn N's prompt."""
    _, tc = client_for(CharTM(tok, reply, "stop"))
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Weather?"},
        ],
        "tools": [WEATHER],
        "chat_template_kwargs": {"thinking": thinking},
        "max_tokens": len(reply),
    }
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    msg = {k: v for k, v in r.json()["choices"][0]["message"].items() if v is not None}
    assert _fields(_streamed_message(tc, body)) == _fields(msg)
    assert _fields(msg) == _fields(recipe_message(body, thinking, reply))
    echoed = [msg] + [
        {"role": "tool", "tool_call_id": c["id"], "content": "18C"} for c in msg.get("tool_calls") or []
    ]
    if not msg.get("tool_calls"):
        echoed.append({"role": "user", "content": "Thanks."})
    nxt = {**body, "messages": body["messages"] + echoed}
    before, after = recipe_prompt(body, thinking), recipe_prompt(nxt, thinking)
    assert before.endswith("<think>" if thinking else "</think>")
    assert after.startswith(before + reply + EOS), (before + reply + EOS)[len(before) - 20 :]


# --------------------------------------------------------------------------- loops on a server

#: The loops' tool: enums and a bounded integer, so that the random model's calls are short.
FORECAST = {
    "type": "function",
    "function": {
        "name": "get_forecast",
        "description": "Weather forecast of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "metric": {"type": "boolean"},
            },
            "required": ["city", "days", "metric"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def server(default_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    args = ["--device", "cpu", "--context-length", "4096", "--page-size", str(PAGE), "--enable-cache-report"]
    args += ["--log-requests", "--log-requests-level", "3", "--log-requests-format", "json"]
    h = start_server(args, real_env(), tmp_path_factory.mktemp("agent_loop") / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0, h.log()[-3000:]


@dataclass
class Turn:
    """One request of a loop: its prompt and output ids (the request log), the cache hit the
    response reported, and the text the client was given (reasoning, content)."""

    prompt: list[int]
    output: list[int]
    cached: int
    reasoning: str
    content: str


def _logged(path: Path, start: int) -> tuple[list[int], list[int]]:
    """The prompt and output ids of the one request logged after byte ``start`` of the log."""
    with open(path, "rb") as f:
        f.seek(start)
        lines = f.read().decode("utf-8", "replace").splitlines()
    events = [json.loads(line[line.index('{"event"') :]) for line in lines if '{"event"' in line]
    got = [e for e in events if e["event"] == "request.received"]
    done = [e for e in events if e["event"] == "request.finished"]
    assert len(got) == len(done) == 1, events
    return got[0]["input_ids"], done[0]["output_ids"]


def _run(server: ServerHandle, send: Callable[[], tuple[int, str, str]]) -> Turn:
    start = os.path.getsize(server.log_path)
    cached, reasoning, content = send()
    prompt, output = _logged(server.log_path, start)
    return Turn(prompt, output, cached, reasoning, content)


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def check_loop(tok: Any, turns: list[Turn], keeps: str) -> None:
    """Each turn's prompt starts with the previous one's whole prompt and the text ``keeps``
    (``"reasoning"`` / ``"content"``) the client was given; the cache hit covers the whole pages of
    the common prefix with the previous prompt + output ids."""
    assert len(turns) >= 4
    assert any(getattr(t, keeps) for t in turns[:-1]), keeps  # the check below is not empty
    for n, (prev, cur) in enumerate(zip(turns, turns[1:], strict=False), start=1):
        assert cur.prompt[: len(prev.prompt)] == prev.prompt, n
        kept = prev.reasoning if keeps == "reasoning" else prev.content
        text = tok.decode(cur.prompt, skip_special_tokens=False)
        assert text.startswith(tok.decode(prev.prompt, skip_special_tokens=False) + kept), n
        common = _common(cur.prompt, prev.prompt + prev.output)
        reusable = min(common, len(prev.prompt) + len(prev.output) - 1, len(cur.prompt) - 1)
        assert cur.cached >= reusable // PAGE * PAGE, (n, cur.cached, common)


def _tool_result(name: str, i: int) -> str:
    return f"{name} #{i}: 18C, light rain"


def json_object(calls: list[dict[str, Any]] | None) -> bool:
    """Every call's ``arguments`` is a JSON object text."""
    for c in calls or []:
        try:
            if not isinstance(json.loads(c["function"]["arguments"]), dict):
                return False
        except ValueError:
            return False
    return True


def _chat_loop(server: ServerHandle, thinking: bool, stream: bool, n_turns: int) -> list[Turn]:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a weather agent."},
        {"role": "user", "content": "Weather in Paris and Lima?"},
    ]
    extra: dict[str, Any] = {"chat_template_kwargs": {"thinking": thinking}}
    if thinking:  # the random model ends its reasoning after a few tokens
        extra["logit_bias"] = {str(THINK_END_ID): 4}
    turns = []
    for t in range(n_turns):
        kw = dict(model="default-tiny-v3", messages=msgs, tools=[FORECAST], max_tokens=64, temperature=0)
        kw["tool_choice"] = "required" if t % 3 != 2 else "auto"
        msg: dict[str, Any] = {"role": "assistant", "content": "", "reasoning_content": ""}

        def send(kw: dict[str, Any] = kw, msg: dict[str, Any] = msg) -> tuple[int, str, str]:
            if stream:
                usage = None
                calls: dict[int, dict[str, Any]] = {}
                for ch in client.chat.completions.create(
                    **kw, stream=True, stream_options={"include_usage": True}, extra_body=extra
                ):
                    usage = ch.usage or usage
                    for c in ch.choices:
                        msg["content"] += c.delta.content or ""
                        msg["reasoning_content"] += (c.delta.model_extra or {}).get("reasoning_content") or ""
                        for d in c.delta.tool_calls or []:
                            fn = {"name": "", "arguments": ""}
                            e = calls.setdefault(d.index, {"id": d.id, "type": "function", "function": fn})
                            e["function"]["name"] += d.function.name or ""
                            e["function"]["arguments"] += d.function.arguments or ""
                if calls:
                    msg["tool_calls"] = [calls[k] for k in sorted(calls)]
            else:
                out = client.chat.completions.create(**kw, extra_body=extra)
                usage = out.usage
                got = out.choices[0].message.model_dump(exclude_none=True)
                msg.update({k: got[k] for k in ("content", "reasoning_content", "tool_calls") if k in got})
            assert usage is not None
            return usage.prompt_tokens_details.cached_tokens, msg["reasoning_content"], msg["content"] or ""

        turns.append(_run(server, send))
        if not json_object(msg.get("tool_calls")):
            # a call cut by max_tokens has arguments that are no JSON object: an agent cannot run
            # it, so the client leaves the calls out (the chat route would accept them and render
            # one "arguments" string parameter, as DeepSeek's encoder does)
            msg.pop("tool_calls", None)
        msgs.append(msg)  # echoed as returned
        calls = msg.get("tool_calls") or []
        for i, c in enumerate(calls):
            result = _tool_result(c["function"]["name"], i)
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": result})
        if not calls:
            msgs.append({"role": "user", "content": f"Go on ({t})."})
    return turns


@pytest.mark.parametrize(
    "thinking,stream",
    [pytest.param(False, False, marks=pytest.mark.slow), (True, True)],
    ids=["chat", "thinking-stream"],
)
def test_chat_completions_tool_loop(server: ServerHandle, tok: Any, thinking: bool, stream: bool) -> None:
    check_loop(tok, _chat_loop(server, thinking, stream, N_TURNS), "reasoning" if thinking else "content")


def test_chat_thinking_without_tools_drops_reasoning_exactly(server: ServerHandle) -> None:
    """Thinking mode without tools: turn N's reasoning is dropped once a user message follows
    (DeepSeek's encoding), so the prompts diverge at turn N's last prompt token, ``<think>``,
    which turn N+1 renders ``</think>``; the cache still covers the pages before it."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Tell me about Paris."}]
    turns: list[Turn] = []
    for t in range(3):

        def send() -> tuple[int, str, str]:
            out = client.chat.completions.create(
                model="default-tiny-v3",
                messages=msgs,
                max_tokens=48,
                temperature=0,
                extra_body={"chat_template_kwargs": {"thinking": True}},
            )
            m = out.choices[0].message
            msgs.append({"role": "assistant", "content": m.content, **(m.model_extra or {})})
            return out.usage.prompt_tokens_details.cached_tokens, "", ""

        turns.append(_run(server, send))
        msgs.append({"role": "user", "content": f"And then? ({t})"})
    for prev, cur in zip(turns, turns[1:], strict=False):
        cut = len(prev.prompt) - 1
        assert _common(cur.prompt, prev.prompt + prev.output) == cut
        assert (prev.prompt[cut], cur.prompt[cut]) == (THINK_START_ID, THINK_END_ID)
        assert cur.cached >= cut // PAGE * PAGE


def _anthropic_tools() -> list[dict[str, Any]]:
    fn = FORECAST["function"]
    return [{"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}]


@pytest.mark.parametrize(
    "thinking,stream",
    [(True, True), pytest.param(False, False, marks=pytest.mark.slow)],
    ids=["thinking-stream", "chat"],
)
def test_anthropic_messages_tool_loop(server: ServerHandle, tok: Any, thinking: bool, stream: bool) -> None:
    """Claude-Code style: the assistant content blocks (thinking, text, tool_use) echoed as
    returned, the tool results as ``tool_result`` blocks of the next user message."""
    client = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
    ]
    turns = []
    for t in range(N_TURNS):
        kw: dict[str, Any] = dict(
            model="default-tiny-v3",
            system=[{"type": "text", "text": "You are a weather agent."}],
            messages=msgs,
            tools=_anthropic_tools(),
            tool_choice={"type": "any"} if t % 3 != 2 else {"type": "auto"},
            max_tokens=64,
            thinking={"type": "enabled", "budget_tokens": 1024} if thinking else {"type": "disabled"},
            extra_body={"temperature": 0},
        )
        blocks: list[dict[str, Any]] = []

        def send(kw: dict[str, Any] = kw, blocks: list[dict[str, Any]] = blocks) -> tuple[int, str, str]:
            if stream:
                with client.messages.stream(**kw) as s:
                    m = s.get_final_message()
            else:
                m = client.messages.create(**kw)
            blocks.extend(b.model_dump(exclude_none=True) for b in m.content)
            reasoning = "\n\n".join(b["thinking"] for b in blocks if b["type"] == "thinking")
            content = "\n\n".join(b["text"] for b in blocks if b["type"] == "text")
            return m.usage.cache_read_input_tokens or 0, reasoning, content

        turns.append(_run(server, send))
        msgs.append({"role": "assistant", "content": blocks})
        results = [
            {"type": "tool_result", "tool_use_id": b["id"], "content": _tool_result(b["name"], i)}
            for i, b in enumerate(b for b in blocks if b["type"] == "tool_use")
        ]
        msgs.append({"role": "user", "content": results or [{"type": "text", "text": f"Go on ({t})."}]})
    check_loop(tok, turns, "reasoning" if thinking else "content")


@pytest.mark.parametrize(
    "thinking,stream,chained",
    [(False, True, True), pytest.param(True, False, False, marks=pytest.mark.slow)],
    ids=["previous_response_id-stream", "thinking-echoed"],
)
def test_responses_tool_loop(
    server: ServerHandle, tok: Any, thinking: bool, stream: bool, chained: bool
) -> None:
    """``previous_response_id`` (the input only the new items), or ``store: false`` with the
    whole history echoed (reasoning, message and function_call items as returned)."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    fn = FORECAST["function"]
    tools = [
        {
            "type": "function",
            "name": fn["name"],
            "description": fn["description"],
            "parameters": fn["parameters"],
        }
    ]
    history: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris?"}]
    new_items, prev_id = list(history), None
    turns = []
    for t in range(N_TURNS):
        kw: dict[str, Any] = dict(
            model="default-tiny-v3",
            instructions="You are a weather agent.",
            tools=tools,
            tool_choice="required" if t % 3 != 2 else "auto",
            max_output_tokens=64,
            temperature=0,
            reasoning={"effort": "high" if thinking else "none"},
        )
        if chained:
            kw.update(input=new_items, previous_response_id=prev_id)
        else:
            kw.update(input=history, store=False)
        items: list[dict[str, Any]] = []

        def send(kw: dict[str, Any] = kw, items: list[dict[str, Any]] = items) -> tuple[int, str, str]:
            nonlocal prev_id
            if stream:
                with client.responses.stream(**kw) as s:
                    r = final_response(s)  # response.incomplete when max_output_tokens cut it
            else:
                r = client.responses.create(**kw)
            prev_id = r.id
            items.extend(i.model_dump(exclude_none=True) for i in r.output)
            reasoning = "".join(
                p["text"] for i in items if i["type"] == "reasoning" for p in i.get("content", [])
            )
            content = "".join(p["text"] for i in items if i["type"] == "message" for p in i["content"])
            return r.usage.input_tokens_details.cached_tokens, reasoning, content

        turns.append(_run(server, send))
        new_items = [
            {"type": "function_call_output", "call_id": i["call_id"], "output": _tool_result(i["name"], k)}
            for k, i in enumerate(i for i in items if i["type"] == "function_call")
        ] or [{"role": "user", "content": f"Go on ({t})."}]
        history += items + new_items
    check_loop(tok, turns, "reasoning" if thinking else "content")
