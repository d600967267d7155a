"""A twenty-seventh set of public bug reports, replayed against the thinking side of
``POST /v1/chat/completions`` and ``POST /v1/messages``: a reasoning cut by the token limit in the
middle of a thought (never served again as the answer), DeepSeek's reasoning-effort tiers on the
official profile, ``thinking`` disabled beside an effort, ``reasoning_effort: "none"`` beside a
thinking default, the reasoning of earlier assistant turns (``reasoning_content`` /
``reasoning``) in the prompt of a tool-call conversation, and ``n`` choices each with its own
reasoning split.

Every report passed as-is; the tests are regression guards.

The routes run in process over the fake tokenizer managers of ``openai_fake_tm`` and
``fake_prompt_tm`` (fast tier); the prompt a request renders is read back from the engine request
the fake receives. Oracles: DeepSeek's own request converters, V4 encoder and response parser
(``deepseek-recipe``), the ``openai`` / ``anthropic`` clients' types, and the reports' stated
expected values.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from transformers import PreTrainedTokenizerFast

recipe = pytest.importorskip("deepseek_recipe")
openai = pytest.importorskip("openai")

from anthropic_testutil import make_clients  # noqa: E402
from deepseek_recipe_testutil import recipe_message, recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import MODEL as MESSAGES_MODEL  # noqa: E402
from fake_prompt_tm import PromptTM  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from thinking_chat_testutil import CALL, HI, THINK_END, TOOLS, prompt_of, reasoning_of  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
THOUGHT = "Let me weigh both options carefully before answering"


def _post(tm: FakeTM, body: dict[str, Any], **args: Any) -> Any:
    """POST the chat ``body`` (``messages`` ``HI`` unless it sets them) on ``tm``; HTTP 200 asserted."""
    r = _client(tm, **args).post(CHAT, json={"model": MODEL, "messages": HI, "max_tokens": 64, **body})
    assert r.status_code == 200, r.text
    return r


def _recipe_chat_prompt(body: dict[str, Any], default_thinking: bool = False) -> str:
    """DeepSeek's own prompt for the OpenAI chat ``body`` as it stands (its converter with the
    given thinking default, then its V4 encoder)."""
    req = recipe.ChatCompletionRequest({"model": "DeepSeek-V4-Pro", **body}).convert(
        recipe.ConversionOptions(default_thinking_mode=default_thinking)
    )
    return recipe.DeepseekV4Encoding().render_conversation(req.conversation).prompt


# --------------------------------------------------------------------------- cut mid-thought


def test_omlx_2606_thought_cut_by_max_tokens_stays_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """jundot/omlx#2606 (DeepSeek-V4-Flash: a generation cut by ``max_tokens`` inside the thinking
    block came back with the whole chain of thought as ``content``, non-streamed with an empty
    ``reasoning_content``, streamed as a repeat of the reasoning deltas; also jundot/omlx#82 for
    the non-streamed path): the cut thought is ``reasoning_content``, ``content`` holds no answer,
    ``finish_reason`` is ``length``, and the streamed deltas carry no content at all. Oracle:
    DeepSeek's own response parser on the same cut text (``recipe_message``, finish ``length``)."""
    reply = THOUGHT + THINK_END + "Option A."
    cap = 5
    cut = tok.decode(tok.encode(reply, add_special_tokens=False)[:cap])
    assert THINK_END not in cut
    body = {"thinking": {"type": "enabled"}, "max_tokens": cap}
    expected = recipe_message({"messages": HI}, cut, thinking=True, finish="length")
    assert expected["reasoning_content"] == cut and not expected.get("content")

    done = ChatCompletion.model_validate(_post(FakeTM(tok, reply=reply), body).json())
    choice = done.choices[0]
    assert choice.finish_reason == "length"
    assert reasoning_of(choice.message) == expected["reasoning_content"]
    assert not choice.message.content

    events = sse_data_events(_post(FakeTM(tok, reply=reply), {**body, "stream": True}))
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert "".join(reasoning_of(d.delta) or "" for d in deltas) == expected["reasoning_content"]
    assert "".join(d.delta.content or "" for d in deltas) == ""
    assert [d.finish_reason for d in deltas if d.finish_reason] == ["length"]


# --------------------------------------------------------------------------- effort tiers


def _official_dir(tmp_path: Path) -> str:
    """A model directory whose ``config.json`` names the official reasoning-effort profile
    (DeepSeek-V4-Flash-0731's tiers, the ones DeepSeek's converter renders)."""
    d = tmp_path / "official"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"dsv4_reasoning_effort_profile": "official"}))
    return str(d)


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"])
def test_litellm_38736_effort_tiers_follow_deepseeks_mapping(
    tok: PreTrainedTokenizerFast, tmp_path: Path, effort: str
) -> None:
    """BerriAI/litellm#38736 (a gateway collapsed every ``reasoning_effort`` to a thinking switch
    and dropped the value; the fix passes it on with DeepSeek's mapping: only ``low`` lowers the
    effort, ``xhigh`` is ``high``, ``max`` is ``max``; BerriAI/litellm#27829 mapped ``xhigh`` to
    ``max`` instead): DeepSeek's thinking-mode guide maps ``minimal`` / ``low`` to ``low``,
    ``medium`` / ``high`` / ``xhigh`` to ``high`` and ``max`` / ``ultra`` to ``max``. On a
    checkpoint of the official profile each value renders the thinking prompt DeepSeek's own
    converter and V4 encoder render for the same value, the same as its tier's. Served before,
    ``xhigh`` rendered the ``max`` instruction and ``ultra`` was a 400. Oracle:
    ``deepseek-recipe``'s converter and encoder; the guide's mapping table."""
    tm = FakeTM(tok)
    _post(tm, {"reasoning_effort": effort}, model_path=_official_dir(tmp_path))
    prompt = prompt_of(tok, tm)
    assert prompt == recipe_prompt({"messages": HI}, thinking=True, effort=effort)
    tier = {"minimal": "low", "medium": "high", "xhigh": "high", "ultra": "max"}.get(effort, effort)
    assert prompt == recipe_prompt({"messages": HI}, thinking=True, effort=tier)
    assert prompt.endswith("<｜Assistant｜><think>")


# --------------------------------------------------------------------------- thinking off beside an effort


def test_cc_switch_4239_thinking_disabled_beside_an_effort_is_chat_mode(tok: PreTrainedTokenizerFast) -> None:
    """farion1231/cc-switch#4239 (with deepseek-ai/DeepSeek-V3#1397: a sub-agent sends
    ``thinking: {"type": "disabled"}`` together with an effort, and DeepSeek's hosted endpoint
    answered 400 "cannot be disabled when reasoning_effort is set"; the proxy had to strip the
    effort): here the pair is served, and the explicit ``disabled`` wins over the effort, as
    DeepSeek's own converter reads the same body: the non-thinking prompt, the whole reply
    ``content`` with no ``reasoning_content``. On the Messages route ``output_config.effort``
    beside ``thinking: disabled`` is served the same way. Oracle: ``deepseek-recipe``'s chat and
    Messages converters and V4 encoder on the same bodies."""
    body = {"messages": HI, "thinking": {"type": "disabled"}, "reasoning_effort": "high"}
    tm = FakeTM(tok, reply="Hello!")
    done = ChatCompletion.model_validate(_post(tm, body).json())
    assert prompt_of(tok, tm) == _recipe_chat_prompt(body, default_thinking=True)
    assert prompt_of(tok, tm) == recipe_prompt({"messages": HI}, thinking=False)
    assert done.choices[0].message.content == "Hello!"
    assert not reasoning_of(done.choices[0].message)

    ptm = PromptTM(tok, reply="Hello!")
    client, _, _ = make_clients(ptm)
    msg = client.messages.create(
        model=MESSAGES_MODEL,
        max_tokens=50,
        messages=HI,
        thinking={"type": "disabled"},
        extra_body={"output_config": {"effort": "high"}},
    )
    assert tok.decode(ptm.received[-1].input_ids) == recipe_messages_prompt({"messages": HI}, thinking=False)
    assert [b.type for b in msg.content] == ["text"]


def test_litellm_27453_effort_none_turns_a_thinking_default_off(tok: PreTrainedTokenizerFast) -> None:
    """BerriAI/litellm#27453 (DeepSeek-V4 thinks by default, and ``reasoning_effort: "none"`` did
    not turn that off; the caller had to add ``thinking: disabled`` by hand): on a server whose
    default is thinking on (``--default-chat-template-kwargs '{"thinking": true}'``, DeepSeek's
    API default), a request's ``"none"`` is thinking off: the non-thinking prompt, the reply all
    ``content``; with no effort the default still thinks. On the Messages route ``output_config``
    ``effort: "none"`` with no ``thinking`` field is off too. Oracle: DeepSeek's own converter
    with thinking on by default reads ``"none"`` as off, and its encoder's prompts."""
    off = recipe_prompt({"messages": HI}, thinking=False)
    assert _recipe_chat_prompt({"messages": HI, "reasoning_effort": "none"}, default_thinking=True) == off
    default_on = {"default_chat_template_kwargs": {"thinking": True}}
    tm = FakeTM(tok, reply="Hi!")
    done = ChatCompletion.model_validate(_post(tm, {"reasoning_effort": "none"}, **default_on).json())
    assert prompt_of(tok, tm) == off
    assert done.choices[0].message.content == "Hi!"
    assert not reasoning_of(done.choices[0].message)
    tm = FakeTM(tok, reply="Hm." + THINK_END + "Hi!")
    done = ChatCompletion.model_validate(_post(tm, {}, **default_on).json())
    assert prompt_of(tok, tm) == recipe_prompt({"messages": HI}, thinking=True)
    assert (reasoning_of(done.choices[0].message), done.choices[0].message.content) == ("Hm.", "Hi!")

    ptm = PromptTM(tok, reply="Hi!")
    _, _, tc = make_clients(ptm)
    r = tc.post(
        "/v1/messages",
        json={"model": MESSAGES_MODEL, "max_tokens": 50, "messages": HI, "output_config": {"effort": "none"}},
    )
    assert r.status_code == 200, r.text
    assert tok.decode(ptm.received[-1].input_ids) == recipe_messages_prompt({"messages": HI}, thinking=False)
    assert [b["type"] for b in r.json()["content"]] == ["text"]


# --------------------------------------------------------------------------- reasoning in history


def _tool_history(field: str) -> list[dict[str, Any]]:
    """A weather tool call whose assistant turn carries its reasoning in ``field``, the tool's
    result, the answer with its own reasoning, and a new user turn."""
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", field: "I should call the weather tool.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
        {"role": "assistant", "content": "It is sunny.", field: "The tool said sunny."},
        {"role": "user", "content": "And tomorrow?"},
    ]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_command_code_754_reasoning_of_tool_call_turns_reaches_the_prompt(
    tok: PreTrainedTokenizerFast, field: str
) -> None:
    """CommandCodeAI/command-code#754 and open-webui/open-webui#23175 (the reasoning a client
    echoes back on assistant tool-call turns was accepted and silently dropped, so the model lost
    its own earlier thoughts mid tool loop): the echoed reasoning, as ``reasoning_content`` or as
    the ``reasoning`` alias, renders the prompt DeepSeek's own converter and V4 encoder render for
    the ``reasoning_content`` body, so the tool-call turn's reasoning is in the prompt inside
    ``<think>`` ... ``</think>``. Oracle: ``deepseek-recipe``."""
    body = {"messages": _tool_history(field), "tools": TOOLS, "thinking": {"type": "enabled"}}
    tm = FakeTM(tok)
    _post(tm, body)
    prompt = prompt_of(tok, tm)
    assert prompt == recipe_prompt(
        {"messages": _tool_history("reasoning_content"), "tools": TOOLS}, thinking=True
    )
    assert "<think>I should call the weather tool." + THINK_END in prompt


# --------------------------------------------------------------------------- n choices


def test_n_choices_each_split_their_own_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#38526 and ENTERPILOT/GoModel#1041 (with ``n`` >= 2 every choice shared one
    stateful reasoning parser, so one choice's ``</think>`` or open ``<think>`` relabelled the
    interleaved deltas of another): with ``n: 2`` and thinking on, each choice's stream is split
    by its own reasoning parser: choice 0 and choice 1 each carry the thought as
    ``reasoning_content`` and their own answers as ``content``, streamed and not, and the usage's
    ``reasoning_tokens`` counts both thoughts. Oracle: DeepSeek's own response parser on each
    choice's text (the fake engine writes ``" #1"`` after the second choice's reply) and the
    tokenizer's count of the thought plus ``</think>``."""
    reply = "Think a bit." + THINK_END + "Hello there"
    body = {"n": 2, "thinking": {"type": "enabled"}}
    want = [recipe_message({"messages": HI}, reply + tail, thinking=True) for tail in ("", " #1")]
    done = ChatCompletion.model_validate(_post(FakeTM(tok, reply=reply), body).json())
    for i, choice in enumerate(done.choices):
        assert choice.index == i
        assert choice.message.content == want[i]["content"]
        assert reasoning_of(choice.message) == want[i]["reasoning_content"]
    per_thought = len(tok.encode("Think a bit." + THINK_END, add_special_tokens=False))
    extra = done.usage.model_extra or {}
    details = done.usage.completion_tokens_details
    assert (details.reasoning_tokens if details else extra.get("reasoning_tokens")) == 2 * per_thought

    events = sse_data_events(_post(FakeTM(tok, reply=reply), {**body, "stream": True}))
    acc: dict[int, dict[str, str]] = {}
    for e in events[:-1]:
        for c in ChatCompletionChunk.model_validate(e).choices:
            a = acc.setdefault(c.index, {"reasoning": "", "content": ""})
            a["reasoning"] += reasoning_of(c.delta) or ""
            a["content"] += c.delta.content or ""
    assert sorted(acc) == [0, 1]
    for i in (0, 1):
        assert acc[i] == {"reasoning": want[i]["reasoning_content"], "content": want[i]["content"]}
