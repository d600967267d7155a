"""Public reports of prefix-cache misses in agent loops, replayed against DeepSeek-V4's encoding.

An agent (Chat Completions with tools, Claude-Code-style Messages, Codex-style Responses with
``previous_response_id`` or ``store: false``) sends turn N+1 as turn N's history + the reply it was
given + tool results. The radix cache holds turn N's prompt + the generated ids, so turn N+1's
prompt ids must start with exactly those ids (and the EOS that ended the turn) for the cache to
cover the earlier turns. The reports name the ways this breaks: tool-call arguments re-serialised
in another key order, reasoning dropped or an empty think block added, a different render of the
tool-use turn, volatile text in the system prompt, a change of reasoning level, and servers that
cache only the prompt (not the output) or answer a warm turn differently from a cold one.

Oracles: the DeepSeek tokenizer's ids of turn N's prompt and of the reply the fake model wrote
(computed here, independently of the routes) against turn N+1's prompt ids; DeepSeek's own V4
encoder (``deepseek-recipe``) for a whole conversation's prompt; a cold run on a fresh scheduler
for the outputs of a warm turn.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import pytest
from anthropic_testutil import make_clients
from deepseek_recipe_testutil import recipe_prompt
from dsv4_testutil import random_ids
from fake_prompt_tm import MODEL, PromptTM, prompt_reply
from responses_testutil import make_client
from scheduler_testutil import PAGE, drain, make_scheduler, submit

pytestmark = pytest.mark.timeout(300)

D = "｜DSML｜"
EOS = "<｜end▁of▁sentence｜>"

#: a tool whose arguments the model writes in a key order that is not alphabetical
EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {"type": "object"},
        "dry_run": {"type": "boolean"},
    },
    "required": ["path", "edits"],
}
CHAT_EDIT = {
    "type": "function",
    "function": {"name": "edit_file", "description": "Edit a file", "parameters": EDIT_SCHEMA},
}
#: the model's ``edit_file`` call: ``path`` before ``edits``, ``new_string`` before ``old_string``
EDIT_ARGS = OrderedDict(
    [
        ("path", "calc.py"),
        ("edits", {"new_string": "def sub(a, b)", "old_string": "def add(a, b)"}),
        ("dry_run", False),
    ]
)
EDIT_CALL = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="edit_file">\n'
    f'<{D}parameter name="path" string="true">calc.py</{D}parameter>\n'
    f'<{D}parameter name="edits" string="false">{json.dumps(EDIT_ARGS["edits"])}</{D}parameter>\n'
    f'<{D}parameter name="dry_run" string="false">false</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)
SYSTEM = {"role": "system", "content": "You are a coding agent."}
USER = {"role": "user", "content": "Add a subtract function to calc.py."}


def gen_ids(tok: Any, reply: str) -> list[int]:
    """The ids the fake model generated for ``reply`` (the tokenizer's own encoding) and the EOS
    that ended the turn (a stop on EOS: the KV of every one of them is in the cache)."""
    return tok.encode(reply, add_special_tokens=False) + [tok.convert_tokens_to_ids(EOS)]


def assert_extends(tok: Any, prev: list[int], reply: str, nxt: list[int]) -> None:
    """Turn N+1's prompt ids start with turn N's prompt ids + the generated ids + EOS."""
    want = list(prev) + gen_ids(tok, reply)
    n = 0
    while n < min(len(want), len(nxt)) and want[n] == nxt[n]:
        n += 1
    assert n == len(want), (
        f"diverges at {n} of {len(want)}: want {tok.decode(want[n : n + 8])!r}, "
        f"got {tok.decode(nxt[n : n + 8])!r}"
    )


def ids(tm: PromptTM, k: int = -1) -> list[int]:
    return list(tm.received[k].input_ids)


def edit_body(thinking: bool) -> dict[str, Any]:
    """A fresh first-turn chat body: the system and user messages, the edit tool, ``thinking``."""
    return {"messages": [SYSTEM, USER], "tools": [CHAT_EDIT], "chat_template_kwargs": {"thinking": thinking}}


def chat(tc: Any, body: dict[str, Any]) -> dict[str, Any]:
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


# --------------------------------------------------------------------------- tool-call arguments


@pytest.mark.parametrize("echo", ["verbatim", "compact", "indented"])
def test_replayed_tool_call_keeps_the_models_key_order(tok: Any, echo: str) -> None:
    """unslothai/unsloth#10791: a replayed tool call whose argument keys were sorted is not the text
    the model generated, so the next step re-processed every multi-parameter call. The route must
    return the arguments in the order the model wrote them (``path`` before ``edits``,
    ``new_string`` before ``old_string``), and the echoed call, however its JSON is spaced, must
    render back to exactly the generated ids."""
    tm = PromptTM(tok, reply=EDIT_CALL)
    _, tc = make_client(tm)
    body = edit_body(thinking=False)
    msg = chat(tc, body)
    (call,) = msg["tool_calls"]
    args = json.loads(call["function"]["arguments"], object_pairs_hook=OrderedDict)
    assert list(args) == list(EDIT_ARGS) and list(args["edits"]) == list(EDIT_ARGS["edits"])
    assert args == EDIT_ARGS
    text = call["function"]["arguments"]
    if echo == "compact":
        text = json.dumps(args, separators=(",", ":"))
    elif echo == "indented":
        text = json.dumps(args, indent=2)
    echoed = {
        "role": "assistant",
        "content": msg["content"],
        "tool_calls": [{**call, "function": {**call["function"], "arguments": text}}],
    }
    nxt = {
        **body,
        "messages": body["messages"]
        + [echoed, {"role": "tool", "tool_call_id": call["id"], "content": "ok"}],
    }
    chat(tc, nxt)
    assert_extends(tok, ids(tm, 0), EDIT_CALL, ids(tm, 1))


def test_anthropic_tool_use_input_key_order_round_trips(tok: Any) -> None:
    """stanfordnlp/dspy#10216: tool-call arguments re-serialised in another key order break the
    prompt cache (Anthropic's caching guide: keep ``tool_use`` keys in a stable order). The
    Messages route's ``tool_use.input`` keeps the model's key order, and that block echoed back
    (as Claude Code does, with its ``tool_result``) renders to the generated ids."""
    tm = PromptTM(tok, reply=EDIT_CALL)
    client, _, _ = make_clients(tm)
    tool = {"name": "edit_file", "description": "Edit a file", "input_schema": EDIT_SCHEMA}
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=200, system="You are a coding agent.", tools=[tool])
    msgs: list[dict[str, Any]] = [{"role": "user", "content": USER["content"]}]
    m = client.messages.create(messages=msgs, **kw)
    (use,) = [b for b in m.content if b.type == "tool_use"]
    assert list(use.input) == list(EDIT_ARGS) and list(use.input["edits"]) == list(EDIT_ARGS["edits"])
    blocks = [b.model_dump(exclude_none=True) for b in m.content]
    msgs += [
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}]},
    ]
    client.messages.create(messages=msgs, **kw)
    assert_extends(tok, ids(tm, 0), EDIT_CALL, ids(tm, 1))


def test_responses_function_call_chained_and_echoed_render_alike(tok: Any) -> None:
    """openai/codex#4047 (Codex replays the whole history with ``store: false`` rather than chaining
    ``previous_response_id``) and ai-dynamo/dynamo#10637 (an echoed ``arguments`` string must
    match what the model emitted): both ways of sending turn 2 give the same prompt, and it
    starts with turn 1's prompt + the generated call + EOS."""
    tm = PromptTM(tok, reply=EDIT_CALL)
    client, _ = make_client(tm)
    tool = {"type": "function", "name": "edit_file", "description": "Edit a file", "parameters": EDIT_SCHEMA}
    kw: dict[str, Any] = dict(
        model=MODEL, instructions="You are a coding agent.", tools=[tool], reasoning={"effort": "none"}
    )
    first = client.responses.create(input=[USER], **kw)
    (fc,) = [i for i in first.output if i.type == "function_call"]
    assert list(json.loads(fc.arguments, object_pairs_hook=OrderedDict)) == list(EDIT_ARGS)
    out = [{"type": "function_call_output", "call_id": fc.call_id, "output": "ok"}]
    client.responses.create(input=out, previous_response_id=first.id, **kw)
    history = [USER] + [i.model_dump(exclude_none=True) for i in first.output] + out
    client.responses.create(input=history, store=False, **kw)
    assert ids(tm, 1) == ids(tm, 2)
    assert_extends(tok, ids(tm, 0), EDIT_CALL, ids(tm, 1))


def test_codex_reasoning_replayed_by_encrypted_content_stays_cached(tok: Any) -> None:
    """BerriAI/litellm#39339: a reasoning model's prompt cache never carried forward when the
    earlier turn's reasoning item came back without its ``encrypted_content``. Codex sends
    ``store: false`` with ``include: ["reasoning.encrypted_content"]`` and replays each reasoning
    item by that blob alone (no ``content``): turn N+1 then starts with turn N's prompt + the
    generated reasoning, call and EOS, for two tool rounds."""
    reply = "Need to edit calc.py.</think>" + EDIT_CALL
    tm = PromptTM(tok, reply=reply)
    client, _ = make_client(tm)
    tool = {"type": "function", "name": "edit_file", "description": "Edit a file", "parameters": EDIT_SCHEMA}
    kw: dict[str, Any] = dict(
        model=MODEL,
        instructions="You are a coding agent.",
        tools=[tool],
        reasoning={"effort": "high"},
        store=False,
        include=["reasoning.encrypted_content"],
    )
    history: list[dict[str, Any]] = [USER]
    for _ in range(2):
        r = client.responses.create(input=history, **kw)
        items = [i.model_dump(exclude_none=True) for i in r.output]
        assert [i["type"] for i in items] == ["reasoning", "function_call"]
        items[0] = {
            k: items[0][k] for k in ("type", "id", "summary", "encrypted_content")
        }  # as Codex replays it
        out = {"type": "function_call_output", "call_id": items[1]["call_id"], "output": "ok"}
        history = history + items + [out]
    client.responses.create(input=history, **kw)
    for k in range(2):
        assert_extends(tok, ids(tm, k), reply, ids(tm, k + 1))


def test_responses_chained_thinking_turns_keep_reasoning_text_and_calls(tok: Any) -> None:
    """vllm-project/vllm#43247: the context stored for ``previous_response_id`` dropped the
    function calls (and joined a message's text parts differently), so the chained prompt was
    not the one the model had extended. Thinking on, each turn writes reasoning, a sentence and
    a call; chained for three turns, each prompt starts with the previous prompt + the generated
    reasoning, text, call and EOS."""
    reply = "Need the file.</think>Editing calc.py now." + EDIT_CALL
    tm = PromptTM(tok, reply=reply)
    client, _ = make_client(tm)
    tool = {"type": "function", "name": "edit_file", "description": "Edit a file", "parameters": EDIT_SCHEMA}
    kw: dict[str, Any] = dict(
        model=MODEL, instructions="You are a coding agent.", tools=[tool], reasoning={"effort": "high"}
    )
    new: list[dict[str, Any]] = [USER]
    prev = None
    for _ in range(3):
        r = client.responses.create(input=new, previous_response_id=prev, **kw)
        assert [i.type for i in r.output] == ["reasoning", "message", "function_call"]
        (fc,) = [i for i in r.output if i.type == "function_call"]
        new, prev = [{"type": "function_call_output", "call_id": fc.call_id, "output": "ok"}], r.id
    for k in range(2):
        assert_extends(tok, ids(tm, k), reply, ids(tm, k + 1))


def test_anthropic_tool_use_turn_with_thinking_round_trips(tok: Any) -> None:
    """mdegans/drama_llama#85: assistant ``tool_use`` turns did not round-trip byte-exact, the
    match stopping a few tokens short at the end of the earlier prompt. With thinking on, the
    ``thinking`` + ``tool_use`` blocks echoed as returned render to the generated ids, turn after
    turn (three tool rounds)."""
    reply = "Need to edit the file.</think>" + EDIT_CALL
    tm = PromptTM(tok, reply=reply)
    client, _, _ = make_clients(tm)
    tool = {"name": "edit_file", "description": "Edit a file", "input_schema": EDIT_SCHEMA}
    kw: dict[str, Any] = dict(
        model=MODEL,
        max_tokens=300,
        system="You are a coding agent.",
        tools=[tool],
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    msgs: list[dict[str, Any]] = [{"role": "user", "content": USER["content"]}]
    for _ in range(3):
        m = client.messages.create(messages=msgs, **kw)
        blocks = [b.model_dump(exclude_none=True) for b in m.content]
        assert [b["type"] for b in blocks] == ["thinking", "tool_use"]
        msgs += [
            {"role": "assistant", "content": blocks},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": blocks[1]["id"], "content": "ok"}],
            },
        ]
    client.messages.create(messages=msgs, **kw)
    for k in range(3):
        assert_extends(tok, ids(tm, k), reply, ids(tm, k + 1))


PARALLEL = (
    f'\n\n<{D}tool_calls>\n<{D}invoke name="edit_file">\n'
    f'<{D}parameter name="path" string="true">a.py</{D}parameter>\n'
    f'<{D}parameter name="edits" string="false">{{}}</{D}parameter>\n</{D}invoke>\n'
    f'<{D}invoke name="edit_file">\n'
    f'<{D}parameter name="path" string="true">b.py</{D}parameter>\n'
    f'<{D}parameter name="edits" string="false">{{}}</{D}parameter>\n</{D}invoke>\n</{D}tool_calls>'
)


def test_parallel_tool_results_in_completion_order_render_in_call_order(tok: Any) -> None:
    """AAswordman/Operit#1159 and langchain-ai/open-swe#2198: results of a parallel batch stored in
    completion order were sent back in another order than in the tool loop, and the strict prefix
    cache missed from that batch on. A batch's results render in the calls' order, and the calls
    in the order the model wrote them: results sent in either order (chat ``tool`` messages,
    Messages ``tool_result`` blocks) give the same prompt, which starts with turn 1's prompt + the
    generated calls + EOS. (DeepSeek's reference converter orders a batch by call id instead,
    which would not repeat the generated ids, so it is no oracle here.)"""
    tm = PromptTM(tok, reply=PARALLEL)
    _, tc = make_client(tm)
    body = edit_body(thinking=False)
    m = chat(tc, body)
    calls = m["tool_calls"]
    assert [json.loads(c["function"]["arguments"])["path"] for c in calls] == ["a.py", "b.py"]
    results = [
        {"role": "tool", "tool_call_id": c["id"], "content": f"edited {i}"} for i, c in enumerate(calls)
    ]
    echoed = {"role": "assistant", "content": m["content"], "tool_calls": calls}
    in_order = {**body, "messages": body["messages"] + [echoed] + results}
    chat(tc, in_order)
    chat(tc, {**body, "messages": body["messages"] + [echoed] + results[::-1]})
    assert ids(tm, 1) == ids(tm, 2)
    assert_extends(tok, ids(tm, 0), PARALLEL, ids(tm, 1))

    client, _, _ = make_clients(tm)
    tool = {"name": "edit_file", "description": "Edit a file", "input_schema": EDIT_SCHEMA}
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=300, system="You are a coding agent.", tools=[tool])
    msgs: list[dict[str, Any]] = [{"role": "user", "content": USER["content"]}]
    a = client.messages.create(messages=msgs, **kw)
    blocks = [b.model_dump(exclude_none=True) for b in a.content]
    uses = [b for b in blocks if b["type"] == "tool_use"]
    assert [u["input"]["path"] for u in uses] == ["a.py", "b.py"]
    res = [
        {"type": "tool_result", "tool_use_id": u["id"], "content": f"edited {i}"} for i, u in enumerate(uses)
    ]
    for order in (res, res[::-1]):
        client.messages.create(
            messages=msgs + [{"role": "assistant", "content": blocks}, {"role": "user", "content": order}],
            **kw,
        )
    assert ids(tm, 4) == ids(tm, 5)
    assert_extends(tok, ids(tm, 3), PARALLEL, ids(tm, 4))


# --------------------------------------------------------------------------- reasoning in history


def test_plain_multi_turn_chat_extends_each_turn(tok: Any) -> None:
    """raullenchai/Rapid-MLX#214: the check ``turn_2_tokens[:len(turn_1_tokens)] == turn_1_tokens``
    on a growing multi-turn chat (every turn missed the cache); QwenLM/Qwen3#1901: the generation
    prompt's empty think block was not rendered once the turn moved into history. Thinking off, no
    tools: each turn's prompt (ending ``</think>``) starts with the previous prompt + the reply +
    EOS, for four turns."""
    tm = PromptTM(tok)  # the reply is a function of the prompt: each turn answers differently
    _, tc = make_client(tm)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant."}]
    replies = []
    for t in range(4):
        msgs.append({"role": "user", "content": f"Turn {t}. Reply briefly."})
        m = chat(tc, {"messages": msgs, "chat_template_kwargs": {"thinking": False}})
        replies.append(m["content"])
        msgs.append({"role": "assistant", "content": m["content"]})
    for k in range(3):
        assert_extends(tok, ids(tm, k), replies[k], ids(tm, k + 1))


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_echoed_in_a_thinking_tool_loop_is_cached(tok: Any, field: str) -> None:
    """nibor1896/Crow#60 and Hmbown/Codewhale#1297: dropping ``reasoning_content`` from the
    history breaks the prompt cache every turn (DeepSeek-V4's cache matches on the bytes of the
    earlier messages); BerriAI/litellm#41380: replayed reasoning removed on the way to a vLLM
    server (which names the field ``reasoning``) deleted 43% of the prompt. A client that echoes
    the reasoning with its tool calls, under either name, gets turn N+1's prompt starting with
    turn N's prompt + the generated reasoning, call and EOS."""
    reply = "I will edit calc.py.</think>" + EDIT_CALL
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    body = edit_body(thinking=True)
    for _ in range(3):
        m = chat(tc, body)
        assert m["reasoning_content"] == "I will edit calc.py."
        (call,) = m["tool_calls"]
        echoed = {
            "role": "assistant",
            "content": m["content"],
            field: m[field],
            "tool_calls": m["tool_calls"],
        }
        body = {
            **body,
            "messages": body["messages"]
            + [echoed, {"role": "tool", "tool_call_id": call["id"], "content": "ok"}],
        }
    chat(tc, body)
    for k in range(3):
        assert_extends(tok, ids(tm, k), reply, ids(tm, k + 1))


@pytest.mark.parametrize("reasoning", ["empty", "null", "absent"])
def test_empty_reasoning_on_a_tool_call_turn_renders_as_generated(tok: Any, reasoning: str) -> None:
    """charmbracelet/fantasy#330: an empty ``reasoning_content`` on tool-call messages rendered an
    empty thought marker whose position shifted, re-branching the prefix cache every turn. When
    the model thought nothing (``</think>`` at once), the echoed turn renders to the generated
    ids whether the client sends ``""``, ``null`` or no ``reasoning_content`` at all."""
    reply = "</think>" + EDIT_CALL
    tm = PromptTM(tok, reply=reply)
    _, tc = make_client(tm)
    body = edit_body(thinking=True)
    m = chat(tc, body)
    assert not m.get("reasoning_content")
    (call,) = m["tool_calls"]
    echoed: dict[str, Any] = {"role": "assistant", "content": m["content"], "tool_calls": [call]}
    if reasoning != "absent":
        echoed["reasoning_content"] = "" if reasoning == "empty" else None
    chat(
        tc,
        {
            **body,
            "messages": body["messages"]
            + [echoed, {"role": "tool", "tool_call_id": call["id"], "content": "ok"}],
        },
    )
    assert_extends(tok, ids(tm, 0), reply, ids(tm, 1))


def test_follow_up_after_a_tool_chain_keeps_the_chain_cached(tok: Any) -> None:
    """QwenLM/Qwen3.8#131: after a tool-calling chain, an unrelated follow-up user message made the
    template drop the chain's reasoning, so the cache fell back to the chain's first assistant
    message. DeepSeek-V4 keeps the reasoning of every turn when tools are declared: the follow-up
    prompt starts with the last prompt + its reply, and is DeepSeek's own encoding of the
    conversation."""
    call_reply = "Editing.</think>" + EDIT_CALL
    final = "Done editing.</think>Added sub()."
    tm = PromptTM(tok, reply=lambda p: final if len(tm.received) == 2 else call_reply)
    _, tc = make_client(tm)
    body = edit_body(thinking=True)
    m = chat(tc, body)
    (call,) = m["tool_calls"]
    body["messages"] = body["messages"] + [
        {k: m[k] for k in ("role", "content", "reasoning_content", "tool_calls")},
        {"role": "tool", "tool_call_id": call["id"], "content": "ok"},
    ]
    m2 = chat(tc, body)
    assert (m2["reasoning_content"], m2["content"]) == ("Done editing.", "Added sub().")
    body["messages"] = body["messages"] + [
        {"role": "assistant", "content": m2["content"], "reasoning_content": m2["reasoning_content"]},
        {"role": "user", "content": "Now tell me a joke."},
    ]
    chat(tc, body)
    assert_extends(tok, ids(tm, 0), call_reply, ids(tm, 1))
    assert_extends(tok, ids(tm, 1), final, ids(tm, 2))
    assert tok.decode(ids(tm, 2)) == recipe_prompt(body, thinking=True)


# --------------------------------------------------------------------------- what the server adds


def test_server_adds_no_volatile_text_to_the_prompt(tok: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """HKUDS/nanobot#226 and Mintplex-Labs/anything-llm#6398: a current date/time rendered into the
    system prompt changes the prefix every minute and busts the cache. The server renders no such
    text: the same conversation sent a day apart (the clock moved) gives the same ids, and they
    are DeepSeek's own encoding of it, which holds no date."""
    import time

    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    body = edit_body(thinking=True)
    chat(tc, body)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86_400 + 61)
    chat(tc, body)
    assert ids(tm, 0) == ids(tm, 1)
    assert tok.decode(ids(tm, 0)) == recipe_prompt(body, thinking=True)


def test_changing_low_medium_high_effort_keeps_the_prefix(tok: Any) -> None:
    """openai/codex#35416: changing the reasoning level mid-session caused a cache miss. On the first
    V4 checkpoints' encoding (``preview`` profile) low, medium and high are one tier with no effort
    instruction, so a session that cycles through them keeps extending its prefix (only ``max``
    adds an instruction after BOS)."""
    tm = PromptTM(tok, reply=lambda p: "Plan.</think>" + prompt_reply(p))
    _, tc = make_client(tm)
    msgs: list[dict[str, Any]] = [SYSTEM]
    replies = []
    for t, effort in enumerate(["low", "high", "medium"]):
        msgs.append({"role": "user", "content": f"Step {t}."})
        m = chat(tc, {"messages": msgs, "reasoning_effort": effort, "tools": [CHAT_EDIT]})
        assert m["reasoning_content"] == "Plan."
        replies.append("Plan.</think>" + m["content"])
        msgs.append(
            {"role": "assistant", "content": m["content"], "reasoning_content": m["reasoning_content"]}
        )
    for k in range(2):
        assert_extends(tok, ids(tm, k), replies[k], ids(tm, k + 1))


# --------------------------------------------------------------------------- the radix cache


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    return make_scheduler(sched_model_dir)


def _prompt(tok: Any, n: int, salt: int) -> list[int]:
    """``n`` random ids of the test model's vocabulary (seeded by ``salt``)."""
    return random_ids(n, seed=9000 + salt)


def test_repeated_identical_prompt_hits_all_but_the_last_token(sched: Any, tok: Any) -> None:
    """sgl-project/sglang#21158: the same prompt sent again reported a zero cache hit (the match is
    capped at ``input_len - 1`` and split the cached node). The second send hits every whole page
    of the first ``len - 1`` ids, and answers as the first did."""
    p = _prompt(tok, 3 * PAGE + 40, salt=1)
    submit(sched, "a", p, n=4)
    first = drain(sched)["a"]
    submit(sched, "b", p, n=4)
    second = drain(sched)["b"]
    assert first["cached"] == 0 and len(first["ids"]) == 4
    assert second["cached"] == (len(p) - 1) // PAGE * PAGE
    assert second["ids"] == first["ids"]


def test_agent_turns_hit_prompt_and_output_and_match_a_cold_run(
    sched: Any, sched_model_dir: str, tok: Any
) -> None:
    """youssofal/MTPLX#121 and waybarrios/vllm-mlx#714 (the cache stopped extending past the first
    tool-call turn, every later turn re-prefilled) and ddalcu/mlx-serve#492 (a turn served from a
    partial prefix hit answered as if to an earlier turn). Each turn's prompt is the previous
    prompt + its output + a tool result: the hit covers every whole page of the previous prompt +
    output but the last id, and the outputs equal a cold run of the same prompts on a fresh
    scheduler."""
    prompt = _prompt(tok, 2 * PAGE - 20, salt=2)  # each turn ends past a page boundary
    warm: list[list[int]] = []
    prompts = []
    for t in range(3):
        prompts.append(list(prompt))
        submit(sched, f"t{t}", prompt, n=40)
        r = drain(sched)[f"t{t}"]
        if t:
            prev = prompts[t - 1] + warm[t - 1]
            assert r["cached"] == (len(prev) - 1) // PAGE * PAGE, (t, r["cached"], len(prev))
            assert r["cached"] > len(prompts[t - 1]) // PAGE * PAGE  # the output's page is hit too
        warm.append(r["ids"])
        prompt = prompt + r["ids"] + _prompt(tok, 200, salt=10 + t)  # + a tool result
    cold = make_scheduler(sched_model_dir)
    for t, p in enumerate(prompts):
        submit(cold, f"c{t}", p, n=40)
        r = drain(cold)[f"c{t}"]
        assert r["cached"] == 0 and r["finish"]["type"] == "length"
        assert r["ids"] == warm[t], t
        cold.flush_cache()
