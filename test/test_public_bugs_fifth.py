"""A fifth set of public bug reports of SGLang and vLLM servers, replayed on the session's
servers: the embedded DeepSeek-V4 model's ``more_bugs_server`` (tool calls cut by ``max_tokens``,
continuous usage stats, grammars) and the model-free ``plain_fake_server`` (request fields, stop
strings, the Responses API). Each test names its report.

Reports that showed a fault here: a tool call cut by ``max_tokens`` while the model wrote the
``｜`` of a DSML tag (three bytes, often three tokens) ended its ``arguments`` (or, before the call,
its ``content``) with the start of that tag and a U+FFFD, the detokenizer's text for the incomplete
character: ``{"city": "Tokyo</\\ufffd``, streamed and not (vllm-project/vllm#47903). The
reader now treats a U+FFFD ending the output as the first bytes of the tag's ``｜``.

Reports replayed that showed no fault here (the tests keep them so): a streamed call cut by
``max_tokens`` ends with ``"length"`` (vllm-project/vllm#53269); continuous usage with a long
prompt (vllm-project/vllm#9028) and with the prefix cache's ``cached_tokens``
(sgl-project/sglang#20203); a regex over CJK characters (sgl-project/sglang#234); a schema with
``$defs`` / ``$ref`` (vllm-project/vllm#10935) and bounded integers (vllm-project/vllm#12028);
``max_tokens: 0`` in chat (sgl-project/sglang#12589) and with ``echo`` in completions
(vllm-project/vllm#39556); a system message after the first user turn
(vllm-project/vllm#41114); an unknown model name is a 404 (sgl-project/sglang#7035,
sgl-project/sglang#9294); a stop string across token boundaries (vllm-project/vllm#3572) and
stops that spare the reasoning (vllm-project/vllm#14399); ``max_output_tokens`` in the Responses
API (sgl-project/sglang#10014).

Oracles: the served model's tokenizer (ids, decoded text, counts), DeepSeek's DSML format (a
string parameter's value is written raw between its tags), ``jsonschema``, Python's ``re``, the
``openai`` client's parsers, the fake model's fixed text, the reports' stated expectations.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, USER, post, sse
from server_fixture import FAKE_ANSWER, FAKE_REASONING, FAKE_SCRIPT_TAG, FAKE_TEXT, ServerHandle

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
DSML = "｜DSML｜"
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                },
                "required": ["city", "days"],
            },
        },
    }
]
FORCED_CALL = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": WEATHER,
    "tool_choice": "required",
    "temperature": 0,
}


def _fold(chunks: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]], list[str]]:
    """A streamed chat answer folded as a client does: ``(content, calls, finish_reasons)``."""
    content, calls, reasons = "", [], []
    for c in chunks:
        for ch in c["choices"]:
            delta = ch["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                while len(calls) <= tc["index"]:
                    calls.append({"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                calls[tc["index"]]["name"] += fn.get("name") or ""
                calls[tc["index"]]["arguments"] += fn.get("arguments") or ""
            if ch.get("finish_reason"):
                reasons.append(ch["finish_reason"])
    return content, calls, reasons


@pytest.fixture(scope="module")
def forced_call_ids(more_bugs_server: ServerHandle) -> list[int]:
    """The output ids of :data:`FORCED_CALL` (greedy, 80 tokens): a DSML block the grammar forces."""
    r = post(more_bugs_server, CHAT, {**FORCED_CALL, "max_tokens": 80, "return_token_ids": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["response_token_ids"]


def _cuts_in_a_tag_char(ids: list[int], mtok: Any) -> list[tuple[int, str]]:
    """``(k, text)`` for every cut ``k`` whose decoded output ``text`` ends with an incomplete
    character right after ``"<"`` / ``"</"`` / ``"<｜DSML"`` (the ``｜`` of a tag being written)."""
    out = []
    for k in range(1, len(ids) + 1):
        text = mtok.decode(ids[:k])
        if text.endswith("\ufffd") and re.search(rf"</?(?:{DSML[:-1]})?\ufffd$", text):
            out.append((k, text))
    return out


# --------------------------------------------------------------------------- tool calls cut short


def test_vllm_47903_call_cut_inside_a_tag_character_leaks_no_markup(
    more_bugs_server: ServerHandle, forced_call_ids: list[int], mtok: Any
) -> None:
    """vllm-project/vllm#47903: a tool call truncated by ``max_tokens`` leaked raw tool-call
    markup into the answer. Here a cut while the model writes the ``｜`` of a DSML tag (three
    bytes) ended the output with ``"</"`` + U+FFFD (the incomplete character), which went into
    ``arguments`` (``{"city": "Tokyo</\\ufffd``) or, before the call, into ``content``
    (``"\\n\\n<\\ufffd"``). Expected, streamed and not alike: the arguments are the JSON text of
    the value written so far (the DSML value is raw text between its tags, so the oracle is the
    decoded output up to the tag's ``"<"``), the content holds nothing of the block."""
    cuts = _cuts_in_a_tag_char(forced_call_ids, mtok)
    in_value = [(k, t) for k, t in cuts if 'string="true">' in t]
    before = [(k, t) for k, t in cuts if "invoke name=" not in t]
    assert in_value and before, [t for _, t in cuts]  # the greedy output has both kinds of cut
    for k, text in (in_value[0], before[0]):
        body = {**FORCED_CALL, "max_tokens": k}
        msg = post(more_bugs_server, CHAT, body).json()["choices"][0]["message"]
        content, calls, _ = _fold(sse(more_bugs_server, CHAT, body))
        if (k, text) == in_value[0]:
            value = text.rsplit('string="true">', 1)[1]
            value = value[: value.rindex("<")]
            key = re.findall(r'parameter name="(\w+)"', text)[-1]
            want = "{" + json.dumps(key) + ": " + json.dumps(value, ensure_ascii=False)[:-1]
            assert [c["function"]["arguments"] for c in msg["tool_calls"]] == [want], (k, text)
            assert [c["arguments"] for c in calls] == [want]
        else:
            assert not msg["tool_calls"] and not calls, (k, text)
        for got in (msg["content"] or "", content):
            assert "<" not in got and "\ufffd" not in got and not got.strip(), (k, text, got)


def test_vllm_53269_streamed_cut_call_finishes_with_length(
    more_bugs_server: ServerHandle, forced_call_ids: list[int], mtok: Any
) -> None:
    """vllm-project/vllm#53269: a streamed tool call cut by ``max_tokens`` ended with
    ``finish_reason: "tool_calls"``, hiding the truncation the non-streamed answer reported as
    ``"length"`` (OpenAI's answer). Cut inside the call's arguments, both say ``"length"`` and
    carry the same call (name and argument prefix)."""
    k = next(
        i for i in range(1, len(forced_call_ids)) if 'string="true">T' in mtok.decode(forced_call_ids[:i])
    )
    body = {**FORCED_CALL, "max_tokens": k + 1}
    choice = post(more_bugs_server, CHAT, body).json()["choices"][0]
    content, calls, reasons = _fold(sse(more_bugs_server, CHAT, body))
    assert choice["finish_reason"] == "length" and reasons == ["length"]
    fn = choice["message"]["tool_calls"][0]["function"]
    assert calls == [{"name": "get_weather", "arguments": fn["arguments"]}] and fn["name"] == "get_weather"
    assert fn["arguments"].startswith('{"city": "T') and not content


# --------------------------------------------------------------------------- streamed usage


LONG_PROMPT = "DeepSeek-V4 keeps compressed KV entries in a paged pool. " * 50


def test_vllm_9028_continuous_usage_with_a_long_prompt(more_bugs_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#9028: with chunked prefill, continuous usage stats of a long prompt were
    wrong in the first chunks. Every chunk carries the whole prompt's count (the tokenizer's),
    a cumulative completion count that never goes back, and the final usage chunk agrees."""
    n_prompt = len(mtok.encode(LONG_PROMPT, add_special_tokens=False))
    assert n_prompt > 256
    body = {
        "model": MODEL,
        "prompt": LONG_PROMPT,
        "max_tokens": 2,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    chunks = sse(more_bugs_server, COMPLETIONS, body)
    usages = [c["usage"] for c in chunks]
    assert all(u["prompt_tokens"] == n_prompt for u in usages), usages
    done = [u["completion_tokens"] for u in usages]
    assert done == sorted(done) and done[-1] == 2 and chunks[-1]["choices"] == []
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages)


def test_sglang_20203_continuous_usage_carries_cached_tokens(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#20203: with ``--enable-cache-report`` the continuous usage of every
    streamed chunk dropped ``prompt_tokens_details.cached_tokens``, which only the final usage
    chunk had. After the same long prompt once, every chunk of the second run carries the
    prefix-cache hit, the same as its final usage (whole 256-token blocks, at least one)."""
    prompt = "Continuous usage and the radix cache: " + LONG_PROMPT
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 2}
    assert post(more_bugs_server, CHAT, body).status_code == 200
    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = sse(more_bugs_server, CHAT, {**body, "stream_options": opts})
    cached = [c["usage"]["prompt_tokens_details"]["cached_tokens"] for c in chunks]
    assert len(set(cached)) == 1 and cached[-1] >= 256 and cached[-1] % 256 == 0, cached


# --------------------------------------------------------------------------- grammars


def test_sglang_234_regex_over_cjk_characters(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#234: a regex matching Chinese characters could not be used. A class
    over the CJK range and an alternation of Chinese words constrain chat and ``/generate``; the
    answers match the pattern whole (Python's ``re``)."""
    body = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 8,
        "temperature": 0,
        "regex": "[\u4e00-\u9fa5]{2,4}",
    }
    r = post(more_bugs_server, CHAT, body).json()
    assert re.fullmatch("[\u4e00-\u9fa5]{2,4}", r["choices"][0]["message"]["content"]), r
    sp = {"max_new_tokens": 8, "temperature": 0, "regex": "(是|否|不知道)"}
    g = post(more_bugs_server, "/generate", {"text": "Hi", "sampling_params": sp}).json()
    assert g["text"] in {"是", "否", "不知道"} and g["meta_info"]["finish_reason"]["type"] == "stop", g


def test_vllm_10935_schema_with_defs_and_refs(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#10935: OpenAI's structured-output example (a pydantic model whose list
    items are another model: ``$defs`` and ``$ref``) came back empty with xgrammar. The answer
    is JSON that validates against the schema (``jsonschema``)."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = {
        "$defs": {
            "Step": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            }
        },
        "type": "object",
        "properties": {
            "steps": {"type": "array", "items": {"$ref": "#/$defs/Step"}, "minItems": 1, "maxItems": 2},
            "final": {"$ref": "#/$defs/Step"},
        },
        "required": ["steps", "final"],
        "additionalProperties": False,
    }
    rf = {"type": "json_schema", "json_schema": {"name": "reasoning", "schema": schema, "strict": True}}
    body = {"model": MODEL, "messages": USER, "max_tokens": 300, "temperature": 0, "response_format": rf}
    choice = post(more_bugs_server, CHAT, body).json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["message"]["content"]), schema)


def test_vllm_12028_bounded_integer_schema(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#12028: xgrammar did not support pydantic's ``conint(ge=1, le=5)``
    (``minimum`` / ``maximum``). The constrained value is an integer within the bounds."""
    schema = {
        "type": "object",
        "properties": {"animals_seen": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["animals_seen"],
        "additionalProperties": False,
    }
    rf = {"type": "json_schema", "json_schema": {"name": "animals", "schema": schema}}
    for temperature in (0, 1):
        body = {"model": MODEL, "messages": USER, "max_tokens": 120, "temperature": temperature, "seed": 3}
        choice = post(more_bugs_server, CHAT, {**body, "response_format": rf}).json()["choices"][0]
        value = json.loads(choice["message"]["content"])["animals_seen"]
        assert type(value) is int and 1 <= value <= 5, choice


# --------------------------------------------------------------------------- request fields


def test_sglang_12589_chat_max_tokens_zero(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#12589: ``max_tokens: 0`` in a chat request was taken for "unset" and
    replaced by a large default. It generates nothing: empty content, no completion tokens."""
    body = {"model": FAKE_MODEL, "messages": USER, "max_tokens": 0}
    r = post(plain_fake_server, CHAT, body).json()
    assert r["choices"][0]["message"]["content"] == "" and r["usage"]["completion_tokens"] == 0, r
    assert r["choices"][0]["finish_reason"] == "length"


def test_vllm_39556_echo_with_max_tokens_zero(plain_fake_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#39556: ``echo`` with ``max_tokens: 0`` let one generated token leak into
    the text, ``token_ids`` and ``completion_tokens``. The text is the prompt alone, no token
    generated, streamed or not, for each prompt of a batch."""
    prompts = ["Hello world", "Bye"]
    body = {"model": FAKE_MODEL, "prompt": prompts, "max_tokens": 0, "echo": True, "return_token_ids": True}
    r = post(plain_fake_server, COMPLETIONS, body).json()
    assert [c["text"] for c in r["choices"]] == prompts and [c["token_ids"] for c in r["choices"]] == [[], []]
    assert r["usage"]["completion_tokens"] == 0
    assert r["usage"]["prompt_tokens"] == sum(len(mtok.encode(p, add_special_tokens=False)) for p in prompts)
    opts = {"stream_options": {"include_usage": True}}
    chunks = sse(plain_fake_server, COMPLETIONS, {**body, "prompt": prompts[0], **opts})
    assert "".join(c["text"] for k in chunks for c in k["choices"]) == prompts[0]
    assert chunks[-1]["usage"]["completion_tokens"] == 0


def test_vllm_41114_system_message_after_a_user_turn(plain_fake_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#41114: a system message that is not the first message ("System message
    must be at the beginning.") was refused. DeepSeek-V4's encoding renders a system turn
    anywhere; the request is answered and its prompt holds the later system text (its tokens
    counted on top of the conversation without it)."""
    late = "Answer in one short sentence please."
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    base = {"model": FAKE_MODEL, "max_tokens": 1}
    without = post(plain_fake_server, CHAT, {**base, "messages": [*msgs, *USER]})
    with_late = post(
        plain_fake_server, CHAT, {**base, "messages": [*msgs, {"role": "system", "content": late}, *USER]}
    )
    assert without.status_code == with_late.status_code == 200, with_late.text
    grown = with_late.json()["usage"]["prompt_tokens"] - without.json()["usage"]["prompt_tokens"]
    assert grown >= len(mtok.encode(late, add_special_tokens=False))


def test_sglang_7035_9294_unknown_model_name_is_a_404(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#7035, sgl-project/sglang#9294: any ``model`` was answered, a name the
    server does not serve (``DeepSeek-XXX``, ``Qwen/Qwen3-8B`` next to a served
    ``--served-model-name``) included. It is a 404 the ``openai`` client raises as
    ``NotFoundError``; the served name is answered."""
    client = openai.OpenAI(base_url=plain_fake_server.url + "/v1", api_key="x", max_retries=0, timeout=60)
    for name in ("DeepSeek-XXX", "Qwen/Qwen3-8B", f"{FAKE_MODEL}/extra"):
        with pytest.raises(openai.NotFoundError) as chat_err:
            client.chat.completions.create(model=name, messages=USER, max_tokens=1)
        with pytest.raises(openai.NotFoundError) as completion_err:
            client.completions.create(model=name, prompt="Hi", max_tokens=1)
        # vLLM's sentence, then what to send instead (SGLang's strict-validation message adds the
        # served name; a request copied from a recipe names the hub id)
        for err in (chat_err.value, completion_err.value):
            assert f"The model `{name}` does not exist." in str(err)
            assert f"The served model name is `{FAKE_MODEL}`" in str(err)
    r = client.chat.completions.create(model=FAKE_MODEL, messages=USER, max_tokens=1)
    assert r.model == FAKE_MODEL and r.choices[0].finish_reason == "length"


# --------------------------------------------------------------------------- stop strings


def test_vllm_3572_stop_string_across_tokens(plain_fake_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#3572: a stop sequence was only checked with ``endswith``, so one whose
    last characters fall inside a token (``"DE"`` in ``"DEF"``) never stopped the output. The
    fake model writes :data:`FAKE_TEXT`; ``"ick b"`` spans ``" quick"`` and ``" brown"``: the
    text ends right before it."""
    stop = "ick b"
    r = post(
        plain_fake_server,
        COMPLETIONS,
        {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 10, "stop": [stop]},
    )
    choice = r.json()["choices"][0]
    assert choice["text"] == FAKE_TEXT[: FAKE_TEXT.index(stop)] and choice["finish_reason"] == "stop"
    assert choice["matched_stop"] == stop


def test_vllm_14399_stop_strings_spare_the_reasoning(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#14399: stop sequences were applied to ``reasoning_content`` too, so a
    stop string met while thinking left no answer. The fake model's scripted thinking-mode
    output has ``"42"`` in its reasoning and its answer: the reasoning is whole, the answer ends
    before its ``"42"``."""
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}],
        "max_tokens": 100,
        "stop": ["42"],
        "chat_template_kwargs": {"thinking": True},
    }
    choice = post(plain_fake_server, CHAT, body).json()["choices"][0]
    assert choice["message"]["reasoning_content"] == FAKE_REASONING
    assert choice["message"]["content"] == FAKE_ANSWER[: FAKE_ANSWER.index("42")]
    assert choice["finish_reason"] == "stop"


# --------------------------------------------------------------------------- Responses API


def test_sglang_10014_responses_max_output_tokens(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#10014: ``/v1/responses`` with ``max_output_tokens`` shorter than the
    answer failed validating its own output. The response is ``incomplete`` for
    ``max_output_tokens`` and the ``openai`` client parses its text: the fake model's first
    tokens, one output item."""
    client = openai.OpenAI(base_url=plain_fake_server.url + "/v1", api_key="x", max_retries=0, timeout=60)
    r = client.responses.create(model=FAKE_MODEL, input="tell me about the world", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output_text and FAKE_TEXT.startswith(r.output_text)
    requests.get(plain_fake_server.url + "/health", timeout=10).raise_for_status()
