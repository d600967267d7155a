"""Seeded random chat requests of the less common message shapes, served in process by
``POST /v1/chat/completions``, must give the prompt token ids (and text) that DeepSeek's own
converter and V4 encoder (``deepseek-recipe``, the renderer SGLang serves DeepSeek-V4 with) give
for the same body.

The shapes the conversations of ``test_chat_encoding_recipe_parity.py`` leave out: content as
arrays of one to three text parts on every role (user, system, developer, assistant, tool),
empty strings and empty parts, several system / developer messages anywhere (after the first
user turn too), ``name`` fields, parallel tool calls whose assistant message has ``content``
``null`` (or ``""`` or text) and results with array content, DeepSeek's ``latest_reminder``
role, and text that spells special tokens or markup (``<｜User｜>``, ``</think>``,
``<｜end▁of▁sentence｜>``, ``<｜DSML｜tool_calls>``, ``<tool_result>``, grounding markup such as
``<｜ref｜>``), unicode and control characters, in content, reasoning, tool-call arguments and
tool results. Token ids are compared, not only text: a special-token spelling the client typed
must be plain text (several tokens) wherever the converter makes it text, and the one token where
the converter replays it (grounding markup in an assistant turn).

Differences left out of the set, each on purpose:

* ``developer`` messages go to the converter as ``system`` ones (its Chat Completions API has no
  developer role; this route hands one over as a system message, as SGLang does:
  ``chat_prepare.developer_messages_as_system``);
* no empty content arrays on system, developer, user, tool or reminder messages: OpenAI's schema
  gives them ``minItems: 1`` and this route answers 400 (the converter renders an empty turn);
* ``latest_reminder`` content is a string: the converter refuses an array of parts, this route
  reads its text parts as it does on every role.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_prompt, recipe_prompt_ids  # noqa: E402
from openai_fake_tm import FakeTM  # noqa: E402
from openai_fake_tm import app_client as _client  # noqa: E402
from server_fixture import tokenizer_source_dir  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

CHAT = "/v1/chat/completions"
TOKENIZER_JSON = os.path.join(tokenizer_source_dir(), "tokenizer.json")
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f0",
            "description": "Tool 0.",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
        },
    }
]
#: texts a client may type: special-token and markup spellings, unicode, whitespace, empty
TEXTS = [
    "hi",
    "x y",
    "<｜User｜>",
    "<｜Assistant｜>",
    "</think>",
    "<think>",
    "<｜end▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜>",
    "<｜latest_reminder｜>",
    "<｜DSML｜tool_calls>",
    "｜DSML｜",
    "<tool_result>",
    "</tool_result>",
    "<｜ref｜>x<｜/ref｜>",
    "<｜box｜>",
    "<|im_start|>",
    "héllo 你好 🙂",
    "a\n\nb",
    "\r\n",
    "\t",
    "\u200b",
    "\u2028",
    "\x00",
    " ",
    "",
]


def _text(rng: random.Random) -> str:
    t = rng.choice(TEXTS)
    return t if rng.random() < 0.6 else f"t{t}u"


def _content(rng: random.Random) -> str | list[dict[str, str]]:
    if rng.random() < 0.5:
        return _text(rng)
    return [{"type": "text", "text": _text(rng)} for _ in range(rng.randint(1, 3))]


def _request(rng: random.Random) -> tuple[dict[str, Any], bool]:
    """``(body, thinking)``: a chat body of the shapes in the module docstring, every tool call
    answered by its result right after it."""
    tools = rng.random() < 0.35
    msgs: list[dict[str, Any]] = []
    n_calls = 0
    kinds = ["system", "developer", "user", "user", "assistant", "latest_reminder"] + (
        ["call"] if tools else []
    )
    for _ in range(rng.randint(1, 6)):
        kind = rng.choice(kinds)
        if kind == "call":
            calls = []
            for _ in range(rng.randint(1, 2)):
                n_calls += 1
                args = json.dumps({"x": _text(rng)}, ensure_ascii=False)
                calls.append(
                    {
                        "id": f"call_{n_calls}",
                        "type": "function",
                        "function": {"name": "f0", "arguments": args},
                    }
                )
            m: dict[str, Any] = {
                "role": "assistant",
                "content": rng.choice([None, "", _text(rng)]),
                "tool_calls": calls,
            }
            if rng.random() < 0.5:
                m["reasoning_content"] = _text(rng)
            msgs.append(m)
            msgs += [{"role": "tool", "tool_call_id": c["id"], "content": _content(rng)} for c in calls]
            continue
        m = {"role": kind, "content": _text(rng) if kind == "latest_reminder" else _content(rng)}
        if kind == "assistant" and rng.random() < 0.5:
            m["reasoning_content"] = _text(rng)
        if rng.random() < 0.2:
            m["name"] = "bob"
        msgs.append(m)
    body: dict[str, Any] = {"messages": msgs, **({"tools": TOOLS} if tools else {})}
    return body, rng.random() < 0.5


def _recipe_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as DeepSeek's converter takes it: developer messages as system ones."""
    msgs = [dict(m, role="system") if m["role"] == "developer" else m for m in body["messages"]]
    return {**body, "messages": msgs}


@pytest.fixture
def served(tok: PreTrainedTokenizerFast) -> Any:
    """``served(body, thinking)``: the prompt token ids the chat route hands the engine for
    ``body`` (HTTP 200 asserted)."""
    tm = FakeTM(tok, reply="ok")
    client = _client(tm)

    def run(body: dict[str, Any], thinking: bool) -> list[int]:
        tm.received.clear()
        r = client.post(
            CHAT,
            json={
                "model": "dsv4-test",
                "max_tokens": 2,
                **body,
                "chat_template_kwargs": {"thinking": thinking},
            },
        )
        assert r.status_code == 200, r.text
        (req,) = tm.received
        return list(req.input_ids)

    return run


@pytest.mark.parametrize("seed", range(4))
def test_random_message_shapes_render_as_deepseek_recipe(
    served: Any, tok: PreTrainedTokenizerFast, seed: int
) -> None:
    """40 requests per seed: the served prompt's token ids equal DeepSeek's converter's for the
    same body, and so does its text."""
    rng = random.Random(seed)
    for _ in range(40):
        body, thinking = _request(rng)
        want = recipe_prompt_ids(_recipe_body(body), thinking, TOKENIZER_JSON)
        got = served(body, thinking)
        assert tok.decode(got) == recipe_prompt(_recipe_body(body), thinking), (body, thinking)
        assert got == want, (body, thinking)


def test_grounding_markup_in_replayed_reasoning_is_special_tokens(
    served: Any, tok: PreTrainedTokenizerFast
) -> None:
    """The case the random set found: grounding markup (``<｜ref｜>``, ``<｜box｜>``, ...) in an
    assistant turn's ``reasoning_content``. DeepSeek's encoder replays it as the special tokens
    the model wrote, as it does in the turn's content; the route tokenized it as plain text, so
    the model read other tokens than it had generated."""
    ground = "<｜ref｜>cat<｜/ref｜><｜box｜>1,2<｜/box｜>"
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": ground},
        {"role": "user", "content": "p"},
    ]
    body = {"messages": msgs, "tools": TOOLS}  # with tools the earlier turn keeps its reasoning
    want = recipe_prompt_ids(body, True, TOKENIZER_JSON)
    ref_id = tok.convert_tokens_to_ids("<｜ref｜>")
    assert want.count(ref_id) == 1
    assert served(body, True) == want


@pytest.mark.parametrize(
    "msgs",
    [
        [{"role": "user", "content": "q"}, {"role": "latest_reminder", "content": "r"}],
        [
            {"role": "latest_reminder", "content": "r"},
            {"role": "latest_reminder", "content": ""},
            {"role": "user", "content": "q"},
        ],
        [
            {"role": "user", "content": "q"},
            {"role": "latest_reminder", "content": "r"},
            {"role": "user", "content": "p"},
        ],
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a", "reasoning_content": "ra"},
            {"role": "latest_reminder", "content": "<｜User｜>r", "name": "n"},
            {"role": "system", "content": "s"},
        ],
        [
            {"role": "user", "content": "q"},
            {"role": "latest_reminder", "content": "r"},
            {"role": "assistant", "content": "a", "reasoning_content": "ra"},
            {"role": "user", "content": "p"},
        ],
    ],
)
@pytest.mark.parametrize("thinking", [False, True])
def test_latest_reminder_role_renders_as_deepseek_recipe(
    served: Any, tok: PreTrainedTokenizerFast, msgs: list[dict[str, Any]], thinking: bool
) -> None:
    """DeepSeek's ``latest_reminder`` role (its converter takes it on the Chat Completions API,
    and SGLang's protocol passes it through to it) is ``<｜latest_reminder｜>`` + text where it
    stands, never merged into the user turns around it; the route refused it (400 naming
    ``messages.N.role``). Oracle: the converter's token ids for the same body."""
    want = recipe_prompt_ids({"messages": msgs}, thinking, TOKENIZER_JSON)
    assert tok.convert_tokens_to_ids("<｜latest_reminder｜>") in want
    assert served({"messages": msgs}, thinking) == want
