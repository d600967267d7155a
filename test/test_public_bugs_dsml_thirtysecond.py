"""Public reports on DeepSeek's DSML tool-call markup (SGLang's and vLLM's DeepSeek-V3.2 / V4
parsers, downstream ports and agent clients) replayed on sglang-v4: the DSML parser
(:class:`~sglang_v4.entrypoints.openai.tool_parser.DsmlToolParser`, ``parse_tool_calls``) and the
chat completions route over a scripted engine that writes a given reply (``CharTM`` through
``client_for`` of ``chat_tools_testutil``, the DeepSeek-V4 tokenizer fixture ``tok``), streamed one
character a chunk and folded by the ``openai`` client, and not streamed.

Oracles: DeepSeek's own response parser and prompt encoder (``deepseek-recipe``, through
``deepseek_recipe_testutil``) on the same reply or request; ``json.loads`` of the arguments
against the values written into the markup; the markup's spec (no DSML markup in ``content`` or
``arguments``; the arguments streamed before a ``max_tokens`` cut are a prefix of the whole
call's arguments).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from chat_tools_testutil import CharTM, ScriptedTM, client_for, fold_chat_stream  # noqa: E402
from deepseek_recipe_testutil import recipe_message, recipe_prompt  # noqa: E402
from dsml_testutil import DSML, dsml_block, dsml_invoke, dsml_param  # noqa: E402
from sglang_v4.entrypoints.openai.tool_parser import DsmlToolParser, parse_tool_calls  # noqa: E402


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props}
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": params}}


SEARCH = _tool(
    "search",
    {"query": {"type": "string"}, "topn": {"type": "integer"}, "source": {"type": "string"}},
)
BASH = _tool("bash", {"command": {"type": "string"}, "timeout": {"type": "number"}})
PUT = _tool(
    "put",
    {
        "obj": {"type": "object"},
        "items": {"type": "array"},
        "flag": {"type": "boolean"},
        "none": {"type": "null"},
        "ratio": {"type": "number"},
        "s": {"type": "string"},
    },
)
TOOLS = [SEARCH, BASH, PUT]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
USER = [{"role": "user", "content": "hi"}]


def _body(thinking: bool = False, **kw: Any) -> dict[str, Any]:
    return {"messages": USER, "tools": TOOLS, "chat_template_kwargs": {"thinking": thinking}, **kw}


def _ours(tok: Any, body: dict[str, Any], reply: str, stream: bool, finish: str = "stop") -> dict[str, Any]:
    """``choices[0].message`` (a dict) of the chat route for an engine writing ``reply``."""
    _, tc = client_for(CharTM(tok, reply, finish), allow_auto_truncate=False)
    r = tc.post(
        "/v1/chat/completions", json={"model": "m", **body, "max_tokens": len(reply), "stream": stream}
    )
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()["choices"][0]["message"]
    msg = fold_chat_stream(r.text).choices[0].message
    return {**msg.model_dump(), "reasoning_content": (msg.model_extra or {}).get("reasoning_content")}


def _split(m: dict[str, Any]) -> tuple[str, str, list[tuple[str, Any]]]:
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or []
    ]
    return m.get("content") or "", m.get("reasoning_content") or "", calls


def _same_as_recipe(tok: Any, body: dict[str, Any], reply: str, finish: str = "stop") -> Any:
    thinking = body["chat_template_kwargs"]["thinking"]
    want = _split(recipe_message(body, reply, thinking, finish))
    for stream in (False, True):
        assert _split(_ours(tok, body, reply, stream, finish)) == want, stream
    return want


def _stream(text: str, width: int = 1, stopped: bool = True) -> tuple[str, dict[int, str], dict[int, str]]:
    """``(content, {index: name}, {index: arguments})`` of ``text`` fed ``width`` characters at a
    time to the parser."""
    p = DsmlToolParser(SCHEMAS)
    content: list[str] = []
    deltas: list[Any] = []
    for i in range(0, len(text), width):
        c, d = p.feed(text[i : i + width])
        content.append(c)
        deltas += d
    c, d = p.finish(stopped)
    content.append(c)
    deltas += d
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    for d in deltas:
        if d.name:
            names[d.index] = d.name
        args[d.index] = args.get(d.index, "") + (d.arguments or "")
    return "".join(content), names, args


def test_minja_11_two_search_invokes_with_cjk_query_match_deepseek(tok: Any) -> None:
    """ochafik/minja#11: DeepSeek-V3.2's new DSML call format, shown with two ``search`` invokes
    in one block (one query in CJK, ``topn`` written ``string="false"``), was not detected.
    Expected: both calls, ``topn`` the integer 10, the CJK text literal, streamed and not, as
    DeepSeek's parser reads the reply."""
    reply = "Let me search." + dsml_block(
        dsml_invoke(
            "search",
            dsml_param("query", True, "search agent benchmark 2024"),
            dsml_param("topn", False, "10"),
            dsml_param("source", True, "web"),
        ),
        dsml_invoke(
            "search",
            dsml_param("query", True, "搜索智能体 基准测试"),
            dsml_param("topn", False, "10"),
            dsml_param("source", True, "web"),
        ),
    )
    content, _, calls = _same_as_recipe(tok, _body(), reply)
    assert content == "Let me search."
    assert calls == [
        ("search", {"query": "search agent benchmark 2024", "topn": 10, "source": "web"}),
        ("search", {"query": "搜索智能体 基准测试", "topn": 10, "source": "web"}),
    ]


def test_opencrabs_419_shell_redirection_and_angle_brackets_stay_in_the_value(tok: Any) -> None:
    """adolfousier/opencrabs#419: a ``bash`` command holding ``2>/dev/null`` and other ``>`` /
    ``<`` text was cut at the first closer-looking text, the tool dispatched with empty
    arguments. Expected: the whole command as written (``json.loads``), as DeepSeek reads it."""
    command = 'opencrabs --version 2>/dev/null || echo "<none>" > out.txt; cat a</b>c <<EOF'
    reply = dsml_block(
        dsml_invoke("bash", dsml_param("command", True, command), dsml_param("timeout", False, "2.5"))
    )
    _, _, calls = _same_as_recipe(tok, _body(), reply)
    assert calls == [("bash", {"command": command, "timeout": 2.5})]


def test_vllm_53417_partial_parameter_closer_never_leaks_into_arguments() -> None:
    """vllm-project/vllm#53417: streamed, a ``</｜DSML｜parameter`` not yet complete was taken
    into the value (``{"location": "Paris</｜DSML｜parameter"}``). Expected, at every chunk width
    and at every ``max_tokens`` cut: no DSML markup in the arguments, the arguments of a cut a
    prefix of the whole call's, and the whole stream's arguments ``json.loads`` to the values."""
    text = dsml_block(
        dsml_invoke("search", dsml_param("query", True, "Paris"), dsml_param("topn", False, "3"))
    )
    whole = {"query": "Paris", "topn": 3}
    full_args = None
    for width in range(1, 12):
        content, names, args = _stream(text, width)
        assert (content, names) == ("", {0: "search"}), width
        assert json.loads(args[0]) == whole, width
        full_args = args[0]
    assert full_args is not None
    for cut in range(len(text)):
        content, _, args = _stream(text[:cut], 1, stopped=False)
        assert DSML not in content and "｜" not in "".join(args.values()), cut
        assert full_args.startswith(args.get(0, "")), (cut, args)


@pytest.mark.parametrize("where", ["reasoning", "answer"])
def test_sglang_9446_call_written_in_thinking_mode_matches_deepseek(tok: Any, where: str) -> None:
    """sgl-project/sglang#9446: with thinking on, DeepSeek-V3.1's tool call came out inside
    ``reasoning_content`` instead of ``tool_calls``. Replayed with DSML: a block right after the
    reasoning (``</think>`` then the block) and a block written before ``</think>``; expected:
    content, reasoning and calls as DeepSeek's own parser splits the same reply."""
    block = dsml_block(dsml_invoke("search", dsml_param("query", True, "weather Shanghai")))
    if where == "answer":
        reply = "The user wants the weather.</think>" + block
    else:
        reply = "The user wants the weather." + block + "</think>"
    _, reasoning, calls = _same_as_recipe(tok, _body(thinking=True), reply)
    assert reasoning == "The user wants the weather."
    assert calls == [("search", {"query": "weather Shanghai"})]


def test_xllm_768_every_json_kind_of_a_string_false_value_at_every_split() -> None:
    """xLLM-AI/xllm#768 (a DeepSeek-V3.2 detector): ``string="false"`` values are JSON of every
    kind: an object with nested arrays, an array, ``true``, ``null``, a number with an exponent;
    a ``string="true"`` value with escaped quotes, a backslash, a tab and an emoji. Expected, the
    text fed in chunks of every width from 1 to 9: one call whose arguments ``json.loads`` to
    the written values."""
    obj = {"a": [1, {"b": None, "c": 'x"y'}], "d": {"e": []}, "f": -0.5}
    items = [1, "二", [True, None]]
    s = 'say "hi" \\ back\tslash 😀 é'
    text = "Text before." + dsml_block(
        dsml_invoke(
            "put",
            dsml_param("obj", False, json.dumps(obj, ensure_ascii=False)),
            dsml_param("items", False, json.dumps(items, ensure_ascii=False)),
            dsml_param("flag", False, "true"),
            dsml_param("none", False, "null"),
            dsml_param("ratio", False, "1.5e-3"),
            dsml_param("s", True, s),
        )
    )
    want = {"obj": obj, "items": items, "flag": True, "none": None, "ratio": 1.5e-3, "s": s}
    content, calls, complete = parse_tool_calls(text, SCHEMAS, stopped=True)
    assert (content, complete) == ("Text before.", True)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("put", want)]
    for width in range(1, 10):
        content, names, args = _stream(text, width)
        assert (content, names) == ("Text before.", {0: "put"}), width
        assert json.loads(args[0]) == want, width


def test_langchain_32222_unicode_escaped_history_arguments_render_as_deepseek(tok: Any) -> None:
    """langchain-ai/langchain#32222: tool-call arguments sent back as ``\\uXXXX`` escapes
    (``{"customer_name": "\\u4f60\\u597d..."}``) taught the model to write escapes. Expected: the
    history call renders in DSML as DeepSeek's own encoder renders the same request (the decoded
    CJK text, not the escapes), with nested JSON, a number, a boolean and null beside it."""
    args = '{"query": "\\u4f60\\u597d\\u554a\\u96c6\\u56e2", "topn": 3, "source": "a \\"q\\" <b>"}'
    args2 = json.dumps({"obj": {"k": [1, None]}, "flag": False, "none": None, "s": "x"})
    calls = [
        {"id": "call_00", "type": "function", "function": {"name": "search", "arguments": args}},
        {"id": "call_01", "type": "function", "function": {"name": "put", "arguments": args2}},
    ]
    messages = [
        *USER,
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_00", "content": "r0"},
        {"role": "tool", "tool_call_id": "call_01", "content": "r1"},
    ]
    body = {"messages": messages, "tools": TOOLS, "chat_template_kwargs": {"thinking": False}}
    tm = ScriptedTM(tok, "ok")
    _, tc = client_for(tm, allow_auto_truncate=False)
    r = tc.post("/v1/chat/completions", json={"model": "m", **body, "max_tokens": 4})
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt == recipe_prompt(body, False)
    assert "你好啊集团" in prompt and "\\u4f60" not in prompt


def test_vllm_55743_large_integers_keep_every_digit(tok: Any) -> None:
    """vllm-project/vllm#55743 (and NousResearch/hermes-agent#40763): tool arguments went
    through ``float``, so ``9223372036854775807`` came back as ``...808`` and ``2**53 + 1`` as
    ``2**53``. Expected: every digit kept, written ``string="false"`` (as DeepSeek's parser reads
    it) and written ``string="true"`` for integer / number parameters (read as the number it
    spells); the client's ``json.loads`` gives the exact Python ints."""
    big, odd = 9223372036854775807, 2**53 + 1
    typed = [_tool("f", {"n": {"type": "integer"}, "x": {"type": "number"}})]
    body = {"messages": USER, "tools": typed, "chat_template_kwargs": {"thinking": False}}
    for is_string in (False, True):
        reply = dsml_block(
            dsml_invoke("f", dsml_param("n", is_string, str(big)), dsml_param("x", is_string, str(odd)))
        )
        if not is_string:
            _same_as_recipe(tok, body, reply)
        for stream in (False, True):
            _, _, calls = _split(_ours(tok, body, reply, stream))
            assert calls == [("f", {"n": big, "x": odd})], (is_string, stream)
            assert type(calls[0][1]["x"]) is int


def test_ms_swift_9208_whitespace_before_a_tag_end_is_read(tok: Any) -> None:
    """modelscope/ms-swift#9208: the DSML regex allowed no whitespace before the ``>`` of an
    invoke tag, so ``<｜DSML｜invoke name="f" >`` made no call. Expected: the call, as DeepSeek
    reads it; and a parameter tag written so (``string="true" >``) gives the written value."""
    reply = dsml_block(dsml_invoke("search", dsml_param("query", True, "q"), dsml_param("topn", False, "4")))
    spaced = reply.replace('<｜DSML｜invoke name="search">', '<｜DSML｜invoke name="search" >')
    _, _, calls = _same_as_recipe(tok, _body(), spaced)
    assert calls == [("search", {"query": "q", "topn": 4})]
    spaced = reply.replace('string="true">', 'string="true" >').replace(
        'string="false">', 'string="false"  >'
    )
    for stream in (False, True):
        assert _split(_ours(tok, _body(), spaced, stream)) == ("", "", calls), stream


def test_unsloth_5624_quoted_block_opener_in_a_value_is_the_values_text(tok: Any) -> None:
    """unslothai/unsloth#5624: a tool argument quoting the protocol's own marker ended the call
    early and left the rest of it in the visible text. Expected: a ``<｜DSML｜tool_calls>`` quoted
    in a ``string="true"`` value is the value's text (DeepSeek's parser reads it so), nothing of
    the call in ``content``, at every chunk width of the parser too."""
    value = "the block starts with <｜DSML｜tool_calls> then invokes"
    reply = "See." + dsml_block(dsml_invoke("bash", dsml_param("command", True, value)))
    content, _, calls = _same_as_recipe(tok, _body(), reply)
    assert (content, calls) == ("See.", [("bash", {"command": value})])
    for width in (1, 2, 5, 13):
        c, names, args = _stream(reply, width)
        assert (c, names, json.loads(args[0])) == ("See.", {0: "bash"}, {"command": value}), width


def test_opencrabs_419_corrupted_closers_leave_no_markup_in_content(tok: Any) -> None:
    """adolfousier/opencrabs#419: DeepSeek-V4-Flash wrote corrupted closers
    (``</｜｜DSML｜｜parameter>``) and the client showed the markup. Expected (the markup's spec):
    the text before the block is the whole ``content``, no DSML text in it, streamed and not."""
    reply = "Checking." + dsml_block(dsml_invoke("bash", dsml_param("command", True, "ls 2>&1"))).replace(
        f"</{DSML}parameter>", "</｜｜DSML｜｜parameter>"
    )
    for stream in (False, True):
        assert (_ours(tok, _body(), reply, stream)["content"] or "") == "Checking.", stream


def test_vllm_28804_tool_call_turns_render_back_as_deepseek_without_growing_whitespace(tok: Any) -> None:
    """vllm-project/vllm#28804: with DeepSeek-V3.1's parser, whitespace in front of the call
    piled up over a multi-turn tool conversation. Expected: two turns of call and result sent
    back render exactly as DeepSeek's encoder renders the same conversation, and each assistant
    turn renders as the text the model wrote (nothing added in front of its block)."""
    replies = [
        "Searching."
        + dsml_block(dsml_invoke("search", dsml_param("query", True, "a b"), dsml_param("topn", False, "2"))),
        dsml_block(dsml_invoke("bash", dsml_param("command", True, "echo  hi"))),
    ]
    messages: list[dict[str, Any]] = list(USER)
    for k, reply in enumerate(replies):
        tm = ScriptedTM(tok, reply)
        _, tc = client_for(tm, allow_auto_truncate=False)
        body = {"messages": messages, "tools": TOOLS, "chat_template_kwargs": {"thinking": False}}
        r = tc.post("/v1/chat/completions", json={"model": "m", **body, "max_tokens": 400})
        assert r.status_code == 200, r.text
        assert tok.decode(tm.received[-1].input_ids) == recipe_prompt(body, False), k
        msg = r.json()["choices"][0]["message"]
        msg["tool_calls"][0]["id"] = f"call_{k:02d}"
        messages = [*messages, msg, {"role": "tool", "tool_call_id": f"call_{k:02d}", "content": f"r{k}"}]
    tm = ScriptedTM(tok, "Done.")
    _, tc = client_for(tm, allow_auto_truncate=False)
    body = {"messages": messages, "tools": TOOLS, "chat_template_kwargs": {"thinking": False}}
    assert tc.post("/v1/chat/completions", json={"model": "m", **body, "max_tokens": 8}).status_code == 200
    prompt = tok.decode(tm.received[-1].input_ids)
    assert prompt == recipe_prompt(body, False)
    for reply in replies:
        assert reply in prompt
