"""Seeded random chat requests, served in process by ``POST /v1/chat/completions`` (the prompt read
back from the engine request), must render the prompt DeepSeek's own converter and V4 encoder
(``deepseek-recipe``, the renderer SGLang serves DeepSeek-V4 with) give for the same body,
character for character, over the request options the random conversations of
``test_chat_encoding_recipe_parity.py`` leave out: ``response_format`` (``json_object`` /
``json_schema``: the "## Response Format" section; ``text``), ``tool_choice`` ``none`` / ``auto``,
a continued final assistant turn (DeepSeek's ``prefix`` message and ``continue_final_message``),
system and developer messages anywhere, multi-part content (user, system, assistant and tool
messages) and every ``reasoning_effort`` value.

The server runs the ``official`` reasoning-effort profile (a checkpoint whose ``config.json`` names
it, as DeepSeek-V4-Flash-0731's encoder file makes it): DeepSeek's converter maps an effort to its
tiers the same way (``low`` / ``high`` / ``max``); the first checkpoints' ``preview`` profile
(only ``max`` instructs) is not the converter's and is outside this set. Differences left out of
the set, each on purpose:

* ``developer`` messages go to the converter as ``system`` ones: its Chat Completions API has no
  developer role (it refuses the body), and this route hands an OpenAI developer message over as
  a system one, as SGLang does (``chat_prepare.developer_messages_as_system``);
* ``continue_final_message`` goes to the converter as ``prefix: true`` on the final message: the
  converter does not read the field (it renders the turn finished and opens a new one) and
  ``prefix`` is its way to continue a turn;
* no ``prefix`` / ``continue_final_message`` beside tools or tool calls, nor beside a
  ``json_object`` format: the converter refuses those ("Function call should not be used with
  prefix"), this route continues the turn;
* a ``json_object`` format always has the word "json" in a message: the converter refuses one
  without it (OpenAI's rule), this route serves it;
* tool definitions in the converter's key order (sgl-project/sglang#33568: this server renders a
  definition as sent).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("deepseek_recipe")

from deepseek_recipe_testutil import recipe_prompt  # noqa: E402
from openai_fake_tm import FakeTM  # noqa: E402
from openai_fake_tm import app_client as _client  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

CHAT = "/v1/chat/completions"
EFFORTS = [None, "none", "minimal", "low", "medium", "high", "xhigh", "max"]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
FORMATS = [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}},
    {"type": "text"},
]
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


def _parts(*texts: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": t} for t in texts]


def _request(rng: random.Random) -> tuple[dict[str, Any], bool, str | None]:
    """``(body, thinking, reasoning_effort)``: a chat body (messages and options) in OpenAI's
    terms, every tool call answered by its result before the next turn."""
    tools = rng.random() < 0.4
    fmt = rng.choice([None, *FORMATS])
    cont = (
        None if tools or fmt == FORMATS[0] else rng.choice([None, None, "prefix", "continue_final_message"])
    )
    msgs: list[dict[str, Any]] = []
    n_calls = 0
    kinds = ["system", "developer", "user", "parts", "assistant"] + (["call"] if tools else [])
    for _ in range(rng.randint(1, 5)):
        kind = rng.choice(kinds)
        if kind in ("system", "developer"):
            msgs.append({"role": kind, "content": rng.choice(["Be brief.", _parts("S", "T")])})
        elif kind in ("user", "parts"):
            msgs.append({"role": "user", "content": "hi" if kind == "user" else _parts("p1", "p2")})
        elif kind == "assistant":
            m: dict[str, Any] = {"role": "assistant", "content": rng.choice(["a", _parts("a1", "a2")])}
            if rng.random() < 0.5:
                m["reasoning_content"] = "r"
            msgs.append(m)
        else:
            n_calls += 1
            cid = f"call_{n_calls}"
            call = {"id": cid, "type": "function", "function": {"name": "f0", "arguments": '{"x": "v"}'}}
            res = rng.choice(["res", _parts("r1", "r2")])
            msgs += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": cid, "content": res},
            ]
    if fmt == FORMATS[0]:
        msgs.append({"role": "user", "content": "Answer in JSON."})
    body: dict[str, Any] = {"messages": msgs}
    if tools:
        body["tools"] = TOOLS
        if (choice := rng.choice([None, "none", "auto"])) is not None:
            body["tool_choice"] = choice
    if fmt is not None:
        body["response_format"] = fmt
    if cont is not None:
        last: dict[str, Any] = {"role": "assistant", "content": rng.choice(["par", ""])}
        if rng.random() < 0.5:
            last["reasoning_content"] = "rr"
        if cont == "prefix":
            last["prefix"] = True
        else:
            body.update(continue_final_message=True, add_generation_prompt=False)
        msgs.append(last)
    return body, rng.random() < 0.6, rng.choice(EFFORTS)


def _recipe_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as DeepSeek's converter takes it (module docstring): developer messages as system
    ones, ``continue_final_message`` as ``prefix`` on the final message."""
    msgs = [dict(m, role="system") if m["role"] == "developer" else m for m in body["messages"]]
    out = {k: v for k, v in body.items() if k not in ("continue_final_message", "add_generation_prompt")}
    if body.get("continue_final_message"):
        msgs[-1] = dict(msgs[-1], prefix=True)
    return {**out, "messages": msgs}


@pytest.fixture
def served(tok: PreTrainedTokenizerFast, tmp_path: Path) -> Any:
    """``served(body, thinking, effort)``: the prompt text the chat route renders for ``body`` on
    a checkpoint of the ``official`` effort profile (HTTP 200 asserted)."""
    (tmp_path / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    tm = FakeTM(tok, reply="ok")
    tm.grammar_enabled = True
    client = _client(tm, model_path=str(tmp_path))

    def run(body: dict[str, Any], thinking: bool, effort: str | None) -> str:
        tm.received.clear()
        extra = {"reasoning_effort": effort} if effort is not None else {}
        r = client.post(
            CHAT,
            json={
                "model": "dsv4-test",
                "max_tokens": 4,
                **body,
                **extra,
                "chat_template_kwargs": {"thinking": thinking},
            },
        )
        assert r.status_code == 200, r.text
        (req,) = tm.received
        return tok.decode(req.input_ids) if req.text is None else req.text

    return run


def _recipe_effort(effort: str | None) -> str:
    """The converter's ``reasoning_effort`` for the request's: unset and ``"none"`` are the
    official profile's default tier ``low`` (the thinking switch is sent explicitly)."""
    return "low" if effort in (None, "none") else effort


@pytest.mark.parametrize("seed", range(4))
def test_random_chat_options_render_as_deepseek_recipe(served: Any, seed: int) -> None:
    """30 requests per seed: the served prompt equals DeepSeek's converter's for the same body."""
    rng = random.Random(seed)
    for _ in range(30):
        body, thinking, effort = _request(rng)
        want = recipe_prompt(_recipe_body(body), thinking, _recipe_effort(effort))
        assert served(body, thinking, effort) == want, (body, thinking, effort)


@pytest.mark.parametrize("how", ["prefix", "continue_final_message"])
def test_continued_turn_alone_keeps_its_reasoning(served: Any, how: str) -> None:
    """The case the random set found: thinking mode without tools, an assistant turn with
    reasoning between the last user turn and the continued final one. DeepSeek's converter renders
    it as a finished earlier turn (``<｜Assistant｜></think>a``) and only the continued turn keeps
    its reasoning block; the route kept the earlier turn's reasoning too."""
    last: dict[str, Any] = {"role": "assistant", "content": "par", "reasoning_content": "rr"}
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]
    body: dict[str, Any] = {"messages": [*msgs, last]}
    if how == "prefix":
        last["prefix"] = True
    else:
        body.update(continue_final_message=True, add_generation_prompt=False)
    want = recipe_prompt(_recipe_body(body), True)
    assert want.endswith(
        "<｜User｜>q<｜Assistant｜></think>a<｜end▁of▁sentence｜><｜Assistant｜><think>rr</think>par"
    )
    assert served(body, True, None) == want
