"""Public reports of non-ASCII and unusual text breaking a server (round 32): lone UTF-16
surrogate escapes in a JSON body, surrogate-pair escapes, CJK / emoji tool and parameter names
(parsed calls and the constrained-decoding grammar), NUL characters and NFD text in prompts, RTL
text and combining marks in replies, non-ASCII ``X-Request-Id`` headers and a served model name
outside ASCII. Each scenario runs on an in-process app over ``fake_prompt_tm.PromptTM`` (a fake
tokenizer manager recording the prompt ids it is given, with DeepSeek-V4's real tokenizer), or
on the grammar backend over that tokenizer.

Oracles: RFC 8259 and Python's ``json`` decoder (what a ``\\u`` escape spells); DeepSeek's own
request converter and V4 encoder (``deepseek-recipe``) for the prompt ids a request must render;
the ``openai`` client's own parser and stream accumulator for what a turn returns; xgrammar's own
matcher for what a grammar takes; RFC 9110 (a header value is visible ASCII) for request ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest

pytest.importorskip("deepseek_recipe")

from chat_tools_testutil import fold_chat_stream  # noqa: E402
from deepseek_recipe_testutil import recipe_prompt, recipe_prompt_ids  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from grammar_backend_testutil import accepts, ds_grammar_backend, grammar_for, tokenizer_json_path  # noqa: E402
from responses_testutil import make_client  # noqa: E402
from sglang_v4.entrypoints.openai.api import create_openai_router  # noqa: E402
from sglang_v4.entrypoints.request_id import RequestIdMiddleware  # noqa: E402
from sglang_v4.utils import find_printable_text  # noqa: E402

pytestmark = pytest.mark.timeout(120)

D = "｜DSML｜"
JSON_HEADERS = {"content-type": "application/json"}


def _call(name: str, params: list[tuple[str, str, bool]]) -> str:
    """The DSML text of one call of ``name`` (what the model writes): ``(param, value, is_string)``."""
    body = "".join(
        f'<{D}parameter name="{p}" string="{"true" if s else "false"}">{v}</{D}parameter>\n'
        for p, v, s in params
    )
    return f'\n\n<{D}tool_calls>\n<{D}invoke name="{name}">\n{body}</{D}invoke>\n</{D}tool_calls>'


class HeldTM(PromptTM):
    """:class:`PromptTM` whose streamed cumulative text holds back a trailing U+FFFD (an
    incomplete UTF-8 sequence) until the finish, as the detokenizer does
    (``sglang_v4.utils.find_printable_text``)."""

    async def generate_request(self, obj: Any, request: Any = None) -> AsyncIterator[Any]:
        async for out in super().generate_request(obj, request):
            if out["meta_info"]["finish_reason"] is None:
                out = {**out, "text": find_printable_text(out["text"])}
            yield out


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return {
        "type": "function",
        "function": {"name": name, "description": "天气 / الطقس", "parameters": schema},
    }


#: (raw body, route, the field the lone surrogate sits in)
LONE = [
    (
        b'{"model":"dsv4-test","messages":[{"role":"user","content":"a\\ud800b"}]}',
        "chat",
        "messages.0.content",
    ),
    (
        b'{"model":"dsv4-test","messages":[{"role":"user","content":"hi"}],"stop":["\\udc00"]}',
        "chat",
        "stop.0",
    ),
    (
        b'{"model":"dsv4-test","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function",'
        b'"function":{"name":"f\\ud83d","parameters":{"type":"object"}}}]}',
        "chat",
        "tools.0.function.name",
    ),
    (b'{"model":"dsv4-test","prompt":["ok","a\\udfffb"]}', "completions", "prompt.1"),
    (b'{"model":"dsv4-test","prompt":"x","logit_bias":{"\\ud800":1}}', "completions", "logit_bias.\\ud800"),
]


@pytest.mark.parametrize("raw,route,field", LONE, ids=["content", "stop", "tool-name", "prompt-list", "key"])
def test_router_maestro_37_lone_surrogate_is_a_400_naming_the_field(
    tok: Any, raw: bytes, route: str, field: str
) -> None:
    """MadSkittles/Router-Maestro#37: JavaScript clients sent lone UTF-16 surrogates (``\\udc8d``)
    in message content and the server answered 500 (``UnicodeEncodeError`` deep in its stack).
    RFC 8259 section 8.2: such an escape spells no Unicode character. Expected: a 400 in the
    OpenAI error shape whose ``param`` is the field holding the escape (the path Python's ``json``
    decoder, which keeps the surrogate, finds it at), the ``openai`` client raising
    ``BadRequestError``, nothing queued, and a valid request on the same app still answered."""
    assert json.loads(raw) is not None  # the standard library reads the escape; only its text is bad
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    r = tc.post(
        f"/v1/{'chat/completions' if route == 'chat' else 'completions'}", content=raw, headers=JSON_HEADERS
    )
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == field and "surrogate" in err["message"], err
    assert not tm.received
    ok = tc.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "ok"


def test_swi_prolog_http_159_surrogate_pair_escape_is_one_code_point(tok: Any) -> None:
    """SWI-Prolog/packages-http#159: a JSON string ``"\\ud83d\\udc95"`` was read as two code
    points instead of one emoji. RFC 8259 section 7: a surrogate pair escape is one character.
    Expected: 200 and prompt ids equal to DeepSeek's encoder's ids of the same request sent with
    the literal emoji (no U+FFFD, no split pair)."""
    text = "I \U0001f495 \u4f60\u597d \U0001f600!"
    escaped = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}]}, ensure_ascii=True)
    assert "\\ud83d\\udc95" in escaped
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", content=escaped.encode(), headers=JSON_HEADERS)
    assert r.status_code == 200, r.text
    body = {"messages": [{"role": "user", "content": text}]}
    assert list(tm.received[0].input_ids) == recipe_prompt_ids(body, False, tokenizer_json_path())


@pytest.mark.parametrize(
    "name,params",
    [("查询天气", [("城市", "北京", True), ("天数", "3", False)]), ("get_🌤", [("🏙", "القاهرة", True)])],
    ids=["cjk", "emoji"],
)
@pytest.mark.parametrize("stream", [False, True])
def test_llama_index_15956_cjk_tool_name_call_is_parsed(
    tok: Any, name: str, params: list[tuple[str, str, bool]], stream: bool
) -> None:
    """run-llama/llama_index#15956: a tool named in Chinese (``厨房电器推荐``) was never parsed
    from the model's output (the parser's name pattern was ``[a-zA-Z0-9_]``), so the agent failed
    with "Failed to parse output". Expected: the DSML call the model writes for a CJK / emoji tool
    with CJK / emoji / RTL parameter names comes back as one call of that name, its arguments the
    JSON the values spell, through the ``openai`` client's parser (non-streamed) and its stream
    accumulator (streamed); the request's prompt is DeepSeek's encoder's for the same tools
    (served as SGLang serves names beyond OpenAI's pattern)."""
    props = {p: {"type": "string" if s else "integer"} for p, _, s in params}
    tool = _tool(name, props, [p for p, _, _ in params])
    body = {"messages": [{"role": "user", "content": "天气?"}], "tools": [tool], "stream": stream}
    tm = HeldTM(tok, reply=_call(name, params))
    _, tc = make_client(tm)
    r = tc.post("/v1/chat/completions", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    if stream:
        msg = fold_chat_stream(r.text).choices[0].message
    else:
        msg = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0].message
    expected = {p: (v if s else json.loads(v)) for p, v, s in params}
    assert [c.function.name for c in msg.tool_calls] == [name]
    assert json.loads(msg.tool_calls[0].function.arguments) == expected
    # DeepSeek's converter takes OpenAI's name pattern only (ASCII): it renders the request with
    # ASCII stand-ins, spelled back after; the rendering does not depend on the names' characters
    names = [name] + [p for p, _, _ in params]
    plain = json.dumps({"messages": body["messages"], "tools": [tool]}, ensure_ascii=False)
    for k, n in enumerate(names):
        plain = plain.replace(f'"{n}"', f'"nm{k}x"')
    want = recipe_prompt(json.loads(plain), False)
    for k, n in enumerate(names):
        want = want.replace(f"nm{k}x", n)
    assert tok.decode(tm.received[0].input_ids) == want


def test_llama_cpp_28429_cjk_parameter_names_keep_distinct_grammar_rules(tok: Any) -> None:
    """ggml-org/llama.cpp#28429: grammar rule names built from Chinese parameter names collided
    after sanitization, so one parameter was dropped and constrained sampling forced the wrong
    name. Expected: under ``tool_choice: required`` the grammar the server builds for a tool with
    two CJK parameters sharing a first character takes the call naming both (xgrammar's own
    matcher) and refuses a call that swaps one for a name outside the schema."""
    props = {"城市": {"type": "string"}, "城镇": {"type": "integer"}}
    tool = _tool("查询", props, ["城市", "城镇"])
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [tool],
        "tool_choice": "required",
    }
    assert tc.post("/v1/chat/completions", json=body).status_code == 200
    tag = tm.received[0].sampling_params["structural_tag"]
    g = grammar_for(ds_grammar_backend(), structural_tag=tag)
    good = _call("查询", [("城市", "北京", True), ("城镇", "7", False)])
    assert accepts(g, good)
    assert not accepts(g, _call("查询", [("城市", "北京", True), ("城乡", "7", False)]))
    assert not accepts(g, _call("查询", [("城市", "北京", True)]))


def test_codesearch_240_nul_character_in_prompt(tok: Any) -> None:
    """aelve/codesearch#240: a NUL byte in a query brought the server down. JSON allows
    ``\\u0000`` in a string (RFC 8259 section 7). Expected: 200, the prompt ids DeepSeek's encoder
    renders for the same text (the NUL kept, nothing truncated after it)."""
    text = "before\x00after \x00\x00 end"
    body = {"messages": [{"role": "user", "content": text}]}
    tm = PromptTM(tok, reply="ok")
    _, tc = make_client(tm)
    raw = json.dumps({"model": MODEL, **body}).encode()
    assert b"\\u0000" in raw
    r = tc.post("/v1/chat/completions", content=raw, headers=JSON_HEADERS)
    assert r.status_code == 200, r.text
    assert list(tm.received[0].input_ids) == recipe_prompt_ids(body, False, tokenizer_json_path())
    assert "after \x00\x00 end" in tok.decode(tm.received[0].input_ids)


def test_tokenizers_2116_nfd_prompt_is_not_renormalized(tok: Any) -> None:
    """huggingface/tokenizers#2116: a fast tokenizer's normalizer rewrote NFD input differently
    from the reference, so prompt tokens differed by input form; vshulcz/deja-vu#1098: NFC and
    NFD spellings of one word never matched. DeepSeek-V4's ``tokenizer.json`` has no normalizer,
    (an empty sequence), so the server must not normalize either. Expected: the NFD and NFC prompts each get exactly
    DeepSeek's encoder's ids for their own text, the two differ, and the decoded NFD prompt
    holds the combining marks unchanged."""
    with open(tokenizer_json_path(), encoding="utf-8") as f:
        normalizer = json.load(f)["normalizer"]
    assert normalizer is None or normalizer == {"type": "Sequence", "normalizers": []}, normalizer
    nfd, nfc = "Cafe\u0301 cre\u0300me Zu\u0308rich \u1100\u1161\u11a8", "Café crème Zürich 각"
    got = {}
    for text in (nfd, nfc):
        body = {"messages": [{"role": "user", "content": text}]}
        tm = PromptTM(tok, reply="ok")
        _, tc = make_client(tm)
        assert tc.post("/v1/chat/completions", json={"model": MODEL, **body}).status_code == 200
        got[text] = list(tm.received[0].input_ids)
        assert got[text] == recipe_prompt_ids(body, False, tokenizer_json_path())
    assert got[nfd] != got[nfc]
    assert nfd in tok.decode(got[nfd])


@pytest.mark.parametrize("stream", [False, True])
def test_archi_mcp_1_rtl_and_combining_reply_round_trips(tok: Any, stream: bool) -> None:
    """fanievh/archi-mcp-server#1: non-ASCII names came back as U+FFFD or mojibake from the
    server. Expected: a reply mixing Arabic, Hebrew with bidi embedding controls, NFD combining
    marks, a ZWJ emoji sequence and CJK comes back code point for code point, non-streamed (the
    ``openai`` client's parser) and streamed (its stream accumulator; no delta holds U+FFFD)."""
    reply = "مرحبا \u202bשלום\u202c e\u0301te\u0301 👩\u200d💻 中文"
    _, tc = make_client(HeldTM(tok, reply=reply))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": stream}
    r = tc.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    if stream:
        assert "\ufffd" not in r.text
        content = fold_chat_stream(r.text).choices[0].message.content
    else:
        content = openai.types.chat.ChatCompletion.model_validate(r.json()).choices[0].message.content
    assert content == reply


def _id_app(tm: PromptTM, served: str) -> TestClient:
    sa = SimpleNamespace(served_model_name=served, model_path=None, api_key=None, enable_cache_report=False)
    app = FastAPI()
    app.include_router(create_openai_router(tm, sa))
    return TestClient(RequestIdMiddleware(app))


@pytest.mark.parametrize("value", ["trace-é".encode("latin-1"), "跟踪-1".encode(), b"a\x7fb"])
def test_litellm_34633_non_ascii_request_id_header(tok: Any, value: bytes) -> None:
    """BerriAI/litellm#34633: a request whose header value held Chinese characters made the proxy
    answer 500 (``UnicodeEncodeError: 'latin-1' codec``). RFC 9110 section 5.5: a field value is
    visible ASCII; the request id is not echoed unless it is. Expected: 200 with the reply, and
    ``x-request-id`` / ``request-id`` a fresh 32-hex-digit id, not the client's bytes."""
    tm = PromptTM(tok, reply="ok")
    tc = _id_app(tm, MODEL)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    r = tc.post("/v1/chat/completions", json=body, headers={"X-Request-Id": value})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    rid = r.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid) and r.headers["request-id"] == rid


def test_claude_code_router_1674_unicode_served_model_name(tok: Any) -> None:
    """musistudio/claude-code-router#1674: a model name with CJK and full-width brackets broke
    once it passed through the server (put into a header, then mangled, then not matched).
    Expected: ``/v1/models`` lists the name exactly, a request naming it is answered 200 with
    ``model`` equal to it (non-streamed and on every streamed chunk), read by the ``openai``
    client's parsers."""
    served = "深度求索「V4」-é\u0301-🚀"
    tm = PromptTM(tok, reply="ok")
    tc = _id_app(tm, served)
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0)
    assert [m.id for m in client.models.list().data] == [served]
    assert client.models.retrieve(served).id == served
    msgs = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model=served, messages=msgs).model == served
    chunks = list(client.chat.completions.create(model=served, messages=msgs, stream=True))
    assert chunks and all(c.model == served for c in chunks)
