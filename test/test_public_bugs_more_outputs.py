"""More public bug reports of SGLang and vLLM servers on outputs (stop reasons, decoding, grammars,
structured outputs, tool calls), replayed on a real CPU server (embedded model, the session's
``more_bugs_server``, shared with :mod:`test_public_bugs_more`); each test names its report.

Faults found here, fixed:

* ``matched_stop`` named a stop string when EOS ended the generation (sgl-project/sglang#1684 added
  ``matched_stop`` so that a client can tell the two apart): stop strings were checked before
  stop tokens, on a text that holds the EOS token's own text (``<｜end▁of▁sentence｜>``), so a
  stop string such as ``"e"`` or ``"sentence"`` "matched" the EOS. Stop tokens (EOS,
  ``stop_token_ids``) are now checked first, as SGLang's ``Req.check_finished`` and vLLM do.
* ``parallel_tool_calls: false`` still gave every call the model wrote (sgl-project/sglang#9696)
  where no tool grammar bounded the decoding (next to the request's own grammar, or without a
  grammar backend); the answer's reader now keeps the first call, on chat, Responses and
  Anthropic Messages (``disable_parallel_tool_use``), streamed or not.
* ``stop_regex`` was searched in the last 64 tokens only: a match spanning more was never seen
  (sgl-project/sglang#30932 sizes SGLang's tail from the pattern); the window is now the
  pattern's longest match (``re``'s parser), the whole output for an unbounded one.
* A ``stop_regex`` that backtracks catastrophically on the output hung the scheduler loop, and
  every request in it (sgl-project/sglang#28203); its search is now time-bounded (the ``regex``
  engine's ``timeout``) and such a request ends with a 400 naming the pattern.

Reports replayed that showed no fault here (the tests keep them so): a ``stop_token_ids`` token
is not in the text unless ``include_stop_str_in_output`` (vllm-project/vllm#2538); no spaces
around added tokens such as ``</think>`` (vllm-project/vllm#33457); an empty regex is a 400, not a
hang (sgl-project/sglang#276); a regex of Chinese characters (sgl-project/sglang#377);
``json_schema`` with thinking on and ``include_reasoning: false`` (vllm-project/vllm#48863), with
thinking off (sgl-project/sglang#14821) and on the Responses API (vllm-project/vllm#44012): the
answer is schema-valid JSON in ``content``; malformed grammars (a Lark grammar, an EBNF without
``root``) are a 400 naming the field, not an engine error (vllm-project/vllm#16911); a grammar
request whose biased token is a special one stays within the grammar (sgl-project/sglang#3108);
``min_new_tokens`` holds EOS, ``stop_token_ids`` and ``stop`` strings (sgl-project/sglang#6266,
sgl-project/sglang#26185).

Oracles: the served model's tokenizer (ids, decode), ``re.fullmatch``, ``jsonschema``, the
``openai`` / ``anthropic`` clients' parsers, the model output written by hand (the fake engine of
:mod:`test_chat_tool_stream_agreement`), the reports' stated expectations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, THINK_END, USER, generate, post, sse, think_end_id
from server_fixture import ServerHandle

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> Iterator[ServerHandle]:
    yield more_bugs_server


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


# --------------------------------------------------------------------------- stop tokens, decoding


def test_vllm_2538_stop_token_ids_text_left_out(server: ServerHandle, client: Any, mtok: Any) -> None:
    """vllm-project/vllm#2538: the token of ``stop_token_ids`` that ended the generation came back
    in the text. It is left out (the finish is ``stop``, ``matched_stop`` its id) unless
    ``include_stop_str_in_output``; the count still includes it."""
    (hello,) = mtok.encode("hello", add_special_tokens=False)
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=5, temperature=0, logit_bias={str(hello): 100})
    plain = client.completions.create(prompt="Hi", **kw, extra_body={"stop_token_ids": [hello]})
    choice = plain.choices[0]
    assert (choice.text, choice.finish_reason, choice.model_extra["matched_stop"]) == ("", "stop", hello)
    assert plain.usage.completion_tokens == 1
    kept = client.completions.create(
        prompt="Hi", **kw, extra_body={"stop_token_ids": [hello], "include_stop_str_in_output": True}
    )
    assert kept.choices[0].text == mtok.decode([hello])
    chat = client.chat.completions.create(messages=USER, **kw, extra_body={"stop_token_ids": [hello]})
    assert chat.choices[0].message.content == "" and chat.choices[0].finish_reason == "stop"
    native = generate(
        server,
        {
            "text": "Hi",
            "sampling_params": {
                "max_new_tokens": 5,
                "temperature": 0,
                "logit_bias": {str(hello): 100},
                "stop_token_ids": [hello],
            },
        },
    )
    assert native["text"] == "" and native["output_ids"] == [hello]


def test_vllm_33457_no_spaces_around_added_tokens(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#33457 (vllm-project/vllm#1347): ``spaces_between_special_tokens`` put
    spaces around added tokens (``</think>1`` came back as ``</think> 1``). The text is the
    tokenizer's own decode of the ids, with and without ``skip_special_tokens``."""
    end = think_end_id(mtok)
    for skip in (True, False):
        sp = {
            "max_new_tokens": 4,
            "temperature": 0,
            "logit_bias": {str(end): 100},
            "regex": "</think>1",
            "skip_special_tokens": skip,
            "spaces_between_special_tokens": True,
        }
        out = generate(server, {"text": "Hi", "sampling_params": sp})
        ids = out["output_ids"]
        assert ids[0] == end, out
        if out["meta_info"]["finish_reason"].get("matched") == ids[-1]:
            ids = ids[:-1]  # the matched stop token (EOS) is trimmed from the text
        assert out["text"] == mtok.decode(ids, skip_special_tokens=skip) == "</think>1"


# --------------------------------------------------------------------------- grammars


def test_sglang_276_empty_regex_is_a_400(server: ServerHandle) -> None:
    """sgl-project/sglang#276: an empty regex hung the server. It is a 400 naming ``regex``, on
    ``/generate`` and the OpenAI route, and the server answers the next request."""
    r = post(server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "regex": ""}})
    assert r.status_code == 400 and "regex" in r.json()["error"]["message"], r.text
    r = post(server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4, "regex": ""})
    assert r.status_code == 400 and "regex" in r.text, r.text
    assert (
        generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


def test_sglang_377_regex_with_chinese_characters(server: ServerHandle, client: Any) -> None:
    """sgl-project/sglang#377: a regex holding Chinese characters raised a KeyError. The output
    matches it (``re.fullmatch``), sampled or greedy, natively and on chat."""
    pattern = "(是|否|可能是)，因为[一二三]"
    for temperature in (0.0, 1.0):
        out = generate(
            server,
            {
                "text": "Hi",
                "sampling_params": {"max_new_tokens": 16, "regex": pattern, "temperature": temperature},
            },
        )
        assert re.fullmatch(pattern, out["text"]), out["text"]
    r = client.chat.completions.create(
        model=MODEL, messages=USER, max_tokens=16, extra_body={"regex": pattern}
    )
    assert re.fullmatch(pattern, r.choices[0].message.content), r.choices[0].message.content


# --------------------------------------------------------------------------- stop reasons


def test_sglang_1684_eos_is_not_reported_as_a_stop_string(
    server: ServerHandle, client: Any, mtok: Any
) -> None:
    """sgl-project/sglang#1684 (``matched_stop`` tells an EOS finish from a stop string): the
    EOS token's text ``<｜end▁of▁sentence｜>`` holds ``e`` and ``sentence``; a generation ended by
    EOS reported such a stop string as matched. EOS (forced by ``logit_bias``) is reported as
    itself on every route, with and without a grammar, and so is a ``stop_token_ids`` entry;
    a stop string the text does hold is still reported as itself."""
    eos = mtok.eos_token_id
    assert "sentence" in mtok.decode([eos]) and "e" in mtok.decode([eos])
    force_eos = {str(eos): 100}
    for stop in (["sentence"], ["e"]):
        out = generate(
            server,
            {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "logit_bias": force_eos, "stop": stop}},
        )
        assert (out["text"], out["meta_info"]["finish_reason"]) == ("", {"type": "stop", "matched": eos})
        out = generate(
            server,
            {"text": "Hi", "sampling_params": {"max_new_tokens": 8, "regex": "(yes|no)", "stop": stop}},
        )
        # the grammar ends with EOS after "yes" / "no"; "e" in "yes" is a true match of its own
        want = {"yes": eos, "no": eos} if stop == ["sentence"] else {"y": "e", "no": eos}
        assert out["text"] in want and out["meta_info"]["finish_reason"]["matched"] == want[out["text"]], out
        kw: dict[str, Any] = dict(model=MODEL, max_tokens=4, logit_bias=force_eos, stop=stop)
        c = client.completions.create(prompt="Hi", **kw).choices[0]
        assert (c.text, c.finish_reason, c.model_extra["matched_stop"]) == ("", "stop", eos)
        m = client.chat.completions.create(messages=USER, **kw).choices[0]
        assert (m.message.content, m.model_extra["matched_stop"]) == ("", eos)
    regex = generate(
        server,
        {
            "text": "Hi",
            "sampling_params": {"max_new_tokens": 4, "logit_bias": force_eos, "stop_regex": ["sent"]},
        },
    )
    assert regex["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    (hello,) = mtok.encode("hello", add_special_tokens=False)
    sp = {"max_new_tokens": 4, "logit_bias": {str(hello): 100}, "stop_token_ids": [hello], "stop": ["hel"]}
    assert (
        generate(server, {"text": "Hi", "sampling_params": sp})["meta_info"]["finish_reason"]["matched"]
        == hello
    )
    sp = {"max_new_tokens": 4, "temperature": 0, "logit_bias": {str(hello): 100}, "stop": ["llo"]}
    out = generate(server, {"text": "Hi", "sampling_params": sp})
    assert (out["text"], out["meta_info"]["finish_reason"]["matched"]) == ("he", "llo")


# --------------------------------------------------------------------------- structured outputs

SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string", "maxLength": 6}},
    "required": ["x"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}


def _valid(text: str | None) -> Any:
    import jsonschema

    value = json.loads(text or "")
    jsonschema.validate(value, SCHEMA)
    return value


def test_vllm_48863_sglang_14821_json_schema_answer_in_content(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#48863 (thinking on, ``include_reasoning: false`` and a ``json_schema``:
    ``content`` came back null) and sgl-project/sglang#14821 (thinking off: the grammar's JSON
    landed in ``reasoning_content``): the answer is schema-valid JSON in ``content``, streamed or
    not, and no reasoning is returned. The reasoning is ended at once (``</think>`` forced) so the
    answer's grammar is reached."""
    end = {str(think_end_id(mtok)): 100}
    cases = [
        {"chat_template_kwargs": {"thinking": True}, "include_reasoning": False, "logit_bias": end},
        {"chat_template_kwargs": {"thinking": False}},
    ]
    for k, extra in enumerate(cases):
        body = {
            "model": MODEL,
            "messages": USER,
            "max_tokens": 80,
            "temperature": 0,
            "response_format": RESPONSE_FORMAT,
            **extra,
        }
        r = post(server, "/v1/chat/completions", body).json()
        msg = r["choices"][0]["message"]
        _valid(msg["content"])
        assert not msg.get("reasoning_content") and r["choices"][0]["finish_reason"] == "stop", (extra, r)
        if k:
            continue  # streamed: the thinking case
        content = "".join(
            (c["choices"][0]["delta"].get("content") or "")
            for c in sse(server, "/v1/chat/completions", body)
            if c["choices"]
        )
        assert content == msg["content"]


def test_vllm_44012_responses_text_format_is_constrained(server: ServerHandle) -> None:
    """vllm-project/vllm#44012: the Responses API's ``text.format`` ``json_schema`` was not
    applied. The output text is schema-valid JSON."""
    body = {
        "model": MODEL,
        "input": "Hi",
        "max_output_tokens": 80,
        "temperature": 0,
        "text": {"format": {"type": "json_schema", "name": "t", "schema": SCHEMA}},
    }
    r = post(server, "/v1/responses", body).json()
    texts = [c["text"] for item in r["output"] if item["type"] == "message" for c in item["content"]]
    assert len(texts) == 1 and r["status"] == "completed", r
    _valid(texts[0])


def test_vllm_16911_malformed_grammars_are_a_400(server: ServerHandle) -> None:
    """vllm-project/vllm#16911: a ``guided_grammar`` in Lark's syntax (the docs' example) raised
    inside the engine. Malformed grammars of every kind are a 400 naming the field, and the
    server keeps serving."""
    lark = '?start: select\n?select: "SELECT " column\n?column: "a" | "b"'
    r = post(
        server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4, "guided_grammar": lark}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_grammar", r.text
    for field, value in (
        ("ebnf", 'start ::= "a"'),
        ("ebnf", "root ::= ("),
        ("regex", "(a"),
        ("json_schema", "{not json"),
    ):
        r = post(server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4, field: value}})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(field), r.text
    assert (
        generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


def test_sglang_3108_grammar_with_a_biased_special_token(server: ServerHandle, mtok: Any) -> None:
    """sgl-project/sglang#3108: an EBNF request whose model emitted a reserved special token
    crashed the scheduler. With such tokens pushed to the top (``logit_bias`` +100: BOS, the
    ``<｜User｜>`` marker, ``</think>``), the output is still one of the grammar's strings."""
    grammar = 'root ::= "yes" | "no"'
    for token in ("<｜begin▁of▁sentence｜>", "<｜User｜>", THINK_END):
        tid = mtok.convert_tokens_to_ids(token)
        assert isinstance(tid, int) and tid != mtok.unk_token_id
        sp = {"max_new_tokens": 8, "ebnf": grammar, "logit_bias": {str(tid): 100}}
        out = generate(server, {"text": "Hi", "sampling_params": sp})
        assert out["text"] in ("yes", "no") and tid not in out["output_ids"], out


# --------------------------------------------------------------------------- parallel_tool_calls

D = "｜DSML｜"
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}]


def _two_calls(cities: tuple[str, ...] = ("Paris", "Oslo")) -> str:
    invokes = [
        f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">{c}</{D}parameter>\n</{D}invoke>'
        for c in cities
    ]
    return f"\n\n<{D}tool_calls>\n" + "\n".join(invokes) + f"\n</{D}tool_calls>"


@pytest.mark.slow  # ~150 generated tokens on the CPU; the fast tier has the route test below
def test_sglang_9696_parallel_tool_calls_false_is_one_call(server: ServerHandle) -> None:
    """sgl-project/sglang#9696: with ``parallel_tool_calls: false`` the answer still held several
    calls. The tool grammar bounds the decoding where it applies, but not next to the request's
    own grammar (here a ``regex`` that spells out a block of two calls): the answer keeps the
    first call and its finish is ``tool_calls``. (Streamed, and on the other routes:
    :func:`test_sglang_9696_one_call_on_every_route`.)"""
    body = {
        "model": MODEL,
        "messages": USER,
        "tools": CHAT_TOOLS,
        "parallel_tool_calls": False,
        "max_tokens": 200,
        "temperature": 0,
        "regex": re.escape(_two_calls()),
    }
    r = post(server, "/v1/chat/completions", body).json()
    ch = r["choices"][0]
    assert [c["function"]["arguments"] for c in ch["message"]["tool_calls"]] == ['{"city": "Paris"}'], r
    assert ch["finish_reason"] == "tool_calls" and not ch["message"]["content"]


def test_sglang_9696_one_call_on_every_route(tok: Any) -> None:
    """sgl-project/sglang#9696 on every route, streamed or not (model output written by hand, no
    grammar backend): chat and Responses ``parallel_tool_calls: false`` and Anthropic
    ``disable_parallel_tool_use`` give the first call only; ``true`` (the default) keeps both."""
    from anthropic_testutil import _anthropic_client
    from chat_tools_testutil import ChunkTM, _folded, _message, client_for

    reply = "Checking." + _two_calls()
    client, _ = client_for(ChunkTM(tok, reply))
    first, both = ("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')
    for parallel, want in ((False, [first]), (True, [first, both])):
        kw: dict[str, Any] = dict(model="m", messages=USER, tools=CHAT_TOOLS, parallel_tool_calls=parallel)
        assert _message(client, **kw) == _folded(client, **kw) == ("Checking.", want, "tool_calls")
    rkw: dict[str, Any] = dict(
        model="m",
        input="Weather?",
        tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS}],
        parallel_tool_calls=False,
    )
    done = client.responses.create(**rkw)
    with client.responses.stream(**rkw) as stream:
        folded = stream.get_final_response()
    for r in (done, folded):
        assert [o.arguments for o in r.output if o.type == "function_call"] == ['{"city": "Paris"}']
        assert r.output_text == "Checking."
    aclient = _anthropic_client(ChunkTM(tok, reply))
    mkw: dict[str, Any] = dict(
        model="m",
        max_tokens=200,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[{"name": "get_weather", "input_schema": WEATHER_PARAMS}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    msg = aclient.messages.create(**mkw)
    with aclient.messages.stream(**mkw) as mstream:
        mfolded = mstream.get_final_message()
    for m in (msg, mfolded):
        assert [b.input for b in m.content if b.type == "tool_use"] == [{"city": "Paris"}]
        assert m.stop_reason == "tool_use"


# --------------------------------------------------------------------------- stop_regex


def test_sglang_30932_stop_regex_longer_than_the_old_window(server: ServerHandle) -> None:
    """sgl-project/sglang#30932 (the stop-regex tail is sized from the pattern's longest match):
    the tail searched was a fixed 64 tokens, so ``X[^Z]*Z`` over a longer span was never
    matched. The output is forced (``regex``) to ``X``, 60 `` y`` (more than 66 tokens), `` Z``
    and more; the stop
    regex ends it at the token that completes the match (as SGLang, a matched regex stays in the
    text), before the rest."""
    sp = {"max_new_tokens": 200, "temperature": 0, "regex": "X( y){60} Z( w){10}", "stop_regex": r"X[^Z]*Z"}
    out = generate(server, {"text": "Hi", "sampling_params": sp})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": r"X[^Z]*Z"}, out["meta_info"]
    assert out["text"] == "X" + " y" * 60 + " Z" and len(out["output_ids"]) > 66, out["output_ids"]


def test_sglang_28203_catastrophic_stop_regex_is_a_400(server: ServerHandle) -> None:
    """sgl-project/sglang#28203: a ``stop_regex`` that backtracks catastrophically on the output
    (``(a|aa)+c`` on a run of ``a``) held the scheduler loop, and every other request, for good.
    The search is time-bounded: that request ends with a 400 naming the pattern, and the server
    serves the next request."""
    sp = {"max_new_tokens": 80, "temperature": 0, "regex": "a{60}b", "stop_regex": "(a|aa)+c"}
    r = requests.post(server.url + "/generate", json={"text": "Hi", "sampling_params": sp}, timeout=60)
    assert r.status_code == 400 and "stop_regex '(a|aa)+c'" in r.json()["error"]["message"], r.text
    assert (
        generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


def test_sglang_6266_min_new_tokens_holds_every_stop(server: ServerHandle, mtok: Any) -> None:
    """sgl-project/sglang#6266 (``min_new_tokens`` did not work next to a ``stop``) and
    sgl-project/sglang#26185 (it must hold token, EOS and string stops alike): with the stop
    forced from the first token (``logit_bias``), the request still generates ``min_new_tokens``
    tokens and stops on the next one."""
    (hello,) = mtok.encode("hello", add_special_tokens=False)
    base = {"max_new_tokens": 10, "min_new_tokens": 5}
    cases = [
        ({"logit_bias": {str(mtok.eos_token_id): 100}}, mtok.eos_token_id),
        ({"logit_bias": {str(hello): 100}, "stop_token_ids": [hello]}, hello),
        ({"logit_bias": {str(hello): 100}, "stop": ["hello"]}, "hello"),
    ]
    for extra, matched in cases:
        out = generate(server, {"text": "Hi", "sampling_params": {**base, **extra}})
        assert len(out["output_ids"]) == 6 and out["meta_info"]["finish_reason"] == {
            "type": "stop",
            "matched": matched,
        }
        assert matched not in out["output_ids"][:5]
    assert out["text"] == "hello" * 5  # the sixth, matched one is cut off the text
