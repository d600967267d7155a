"""A twenty-sixth set of public bug reports, replayed against ``POST /v1/chat/completions`` and
``POST /v1/messages``: the request's ``thinking`` object (``enabled`` / ``disabled`` /
``adaptive``, an unknown type), ``reasoning_effort`` values, empty content-part arrays, the
reasoning tokens of the usage and chat logprobs over every generated token.

Fixed here: the chat ``thinking`` object read only ``{"type": "enabled"}`` as on, so
``{"type": "adaptive"}`` (which DeepSeek's own converter reads as thinking on) and any misspelt
type were served silently with thinking off; ``adaptive`` is on and an unknown type is a 400
naming ``thinking.type`` (kekzl/imp#1560). ``"content": []`` on a system, developer, user or tool
message rendered an empty turn; it is a 400 naming ``messages[i].content``, as OpenAI's schema
(``minItems: 1``) and API have it (openai/openai-python#1812). On the Messages route a user (or
non-final assistant) message of ``"content": []`` was served as an empty turn; it is a 400 with
Anthropic's wording (invergent-ai/surogate#132). ``reasoning_effort: ""`` was read as "not
set" and served; it is a 400 like any other unknown effort (BerriAI/litellm#27050). The other
reports passed as-is; their tests are regression guards.

The routes run in process over the fake tokenizer managers of ``openai_fake_tm`` and
``fake_prompt_tm`` (fast tier); the prompt a request renders is read back from the engine request
the fake receives. Oracles: DeepSeek's own request converters and V4 encoder
(``deepseek-recipe``), the ``openai`` / ``anthropic`` clients (their parameter types, errors and
response types), the DeepSeek-V4 tokenizer's ids, and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest
from openai_fake_tm import FakeTM, sse_data_events
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
recipe = pytest.importorskip("deepseek_recipe")

from anthropic_testutil import make_clients  # noqa: E402
from deepseek_recipe_testutil import recipe_message, recipe_messages_prompt, recipe_prompt  # noqa: E402
from fake_prompt_tm import PromptTM  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402
from openai.types.shared import ReasoningEffort  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "dsv4-test"
HI = [{"role": "user", "content": "Hi"}]
THINK_END = "</think>"


def _served(tok: PreTrainedTokenizerFast, body: dict[str, Any], reply: str = "Hello.") -> tuple[str, Any]:
    """The prompt text the chat ``body`` renders and its answer (HTTP 200, the ``openai`` client's
    ``ChatCompletion``), on a fresh fake writing ``reply``."""
    tm = FakeTM(tok, reply=reply)
    r = _client(tm).post(CHAT, json={"model": MODEL, "messages": HI, "max_tokens": 64, **body})
    assert r.status_code == 200, r.text
    (req,) = tm.received
    return tok.decode(req.input_ids) if req.text is None else req.text, ChatCompletion.model_validate(
        r.json()
    )


def _refused(tok: PreTrainedTokenizerFast, body: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI error object of ``body`` (asserted: HTTP 400, no engine request made)."""
    tm = FakeTM(tok)
    r = _client(tm).post(CHAT, json={"model": MODEL, "messages": HI, **body})
    assert r.status_code == 400, r.text
    assert tm.received == []
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    return err


def _recipe_refuses(body: dict[str, Any]) -> bool:
    """Whether DeepSeek's own chat converter refuses the OpenAI chat ``body``."""
    try:
        recipe.ChatCompletionRequest({"model": "DeepSeek-V4-Pro", **body}).convert(recipe.ConversionOptions())
    except Exception:  # noqa: BLE001 - the converter's own error type is native
        return True
    return False


# --------------------------------------------------------------------------- thinking object


def test_imp_1560_thinking_type_adaptive_turns_thinking_on(tok: PreTrainedTokenizerFast) -> None:
    """kekzl/imp#1560: a ``thinking: {"type": "adaptive"}`` fell through every branch and was
    silently ignored (served without thinking). DeepSeek's own converter reads ``adaptive`` as
    thinking on: the prompt is the thinking prompt and the reply before ``</think>`` comes back as
    ``reasoning_content``. Oracle: ``deepseek-recipe``'s converter and V4 encoder (thinking on,
    and the ``adaptive`` body rendered by the converter itself)."""
    thought, answer = "The user greets me.", "Hello!"
    prompt, done = _served(tok, {"thinking": {"type": "adaptive"}}, reply=thought + THINK_END + answer)
    assert prompt == recipe_prompt({"messages": HI}, thinking=True)
    own = recipe.ChatCompletionRequest(
        {
            "model": "DeepSeek-V4-Pro",
            "messages": HI,
            "thinking": {"type": "adaptive"},
            "reasoning_effort": "low",
        }
    ).convert(recipe.ConversionOptions(default_thinking_mode=False))
    assert prompt == recipe.DeepseekV4Encoding().render_conversation(own.conversation).prompt
    msg = done.choices[0].message
    assert msg.content == answer
    assert (msg.model_extra or {}).get("reasoning_content") == thought


@pytest.mark.parametrize(
    "thinking, param",
    [
        ({"type": "bogus"}, "thinking.type"),
        ({"type": "ENABLED"}, "thinking.type"),
        ({"budget_tokens": 1024}, "thinking.type"),
        ("enabled", "thinking"),
    ],
    ids=["unknown", "capitals", "no-type", "string"],
)
def test_imp_1560_unknown_thinking_type_is_400(
    tok: PreTrainedTokenizerFast, thinking: Any, param: str
) -> None:
    """kekzl/imp#1560: a ``thinking`` type the server did not know was silently ignored, so the
    request ran in a mode it did not ask for. DeepSeek's converter refuses such a ``thinking``
    (``unknown variant``); here it is a 400 in OpenAI's shape naming the field, no engine request
    made. Oracle: ``deepseek-recipe``'s converter refuses the same body; the ``openai`` client
    raises ``BadRequestError``."""
    assert _recipe_refuses({"messages": HI, "thinking": thinking})
    err = _refused(tok, {"thinking": thinking})
    assert err["param"] == param
    with pytest.raises(openai.BadRequestError):
        _oai(_client(FakeTM(tok))).chat.completions.create(
            model=MODEL, messages=HI, extra_body={"thinking": thinking}
        )


@pytest.mark.parametrize("thinking", [{"type": "disabled"}, False], ids=["disabled", "false"])
def test_openclaw_74418_thinking_disabled_or_false_is_off(
    tok: PreTrainedTokenizerFast, thinking: Any
) -> None:
    """openclaw/openclaw#74418: ``thinking: false`` / ``"disabled"`` were not read as off and fell
    through to a thinking default. Both turn thinking off here: the non-thinking prompt, and the
    whole reply (``</think>`` included as text would be wrong) is ``content`` with no reasoning.
    Oracle: ``deepseek-recipe``'s converter and V4 encoder with ``{"type": "disabled"}``."""
    prompt, done = _served(tok, {"thinking": thinking, "reasoning_effort": None}, reply="Hello!")
    assert prompt == recipe_prompt({"messages": HI}, thinking=False)
    msg = done.choices[0].message
    assert msg.content == "Hello!"
    assert not (msg.model_extra or {}).get("reasoning_content")


# --------------------------------------------------------------------------- reasoning_effort


def test_cliproxyapi_1307_every_openai_reasoning_effort_is_served(tok: PreTrainedTokenizerFast) -> None:
    """router-for-me/CLIProxyAPI#1307: a server whose ``reasoning_effort`` allowed only
    ``low | medium | high`` answered 400 to ``"xhigh"``, a value OpenAI's API takes. Every value
    of the ``openai`` client's ``ReasoningEffort`` type is served (200); ``"none"`` is thinking
    off, every other value thinking on (DeepSeek-V4's thinking prompt, the reply after ``</think>``
    the answer). Oracle: the ``openai`` client's ``ReasoningEffort`` literal; ``deepseek-recipe``'s
    non-thinking prompt and response parser."""
    efforts = list(get_args(get_args(ReasoningEffort)[0]))
    assert {"low", "high", "xhigh", "none"} <= set(efforts)
    off = recipe_prompt({"messages": HI}, thinking=False)
    for effort in efforts:
        thinking = effort != "none"
        reply = "Hm." + THINK_END + "Hi!" if thinking else "Hi!"
        prompt, done = _served(tok, {"reasoning_effort": effort}, reply=reply)
        expected = recipe_message({"messages": HI}, reply, thinking=thinking)
        msg = done.choices[0].message
        assert (prompt == off) is not thinking, effort
        if thinking:
            assert prompt.endswith("<｜Assistant｜><think>"), effort
        assert msg.content == expected["content"] == "Hi!", effort
        assert ((msg.model_extra or {}).get("reasoning_content") or None) == (
            expected.get("reasoning_content") or None
        ), effort


@pytest.mark.parametrize("effort", ["maximum", "", "HIGHEST"])
def test_litellm_27050_invalid_reasoning_effort_is_400_naming_the_values(
    tok: PreTrainedTokenizerFast, effort: str
) -> None:
    """BerriAI/litellm#27050: an invalid ``reasoning_effort`` (``"invalid"``, ``""``) surfaced as a
    500 connection error; the fix answers 400 listing the valid values. Here: 400 in OpenAI's
    shape, ``param`` ``reasoning_effort``, the message naming every value of the ``openai``
    client's ``ReasoningEffort`` type, no engine request made. Oracle: the ``openai`` client's
    literal and its ``BadRequestError``."""
    err = _refused(tok, {"reasoning_effort": effort})
    assert err["param"] == "reasoning_effort"
    for value in get_args(get_args(ReasoningEffort)[0]):
        assert value in err["message"], value
    with pytest.raises(openai.BadRequestError):
        _oai(_client(FakeTM(tok))).chat.completions.create(
            model=MODEL,
            messages=HI,
            reasoning_effort=effort,  # type: ignore[arg-type]
        )


# --------------------------------------------------------------------------- empty content arrays


@pytest.mark.parametrize("role", ["system", "developer", "user"])
def test_openai_python_1812_empty_content_array_is_400(tok: PreTrainedTokenizerFast, role: str) -> None:
    """openai/openai-python#1812: ``"content": []`` on a system message was answered 200 although
    OpenAI's published schema gives every content-part array ``minItems: 1`` (the report: "other
    ArrayOfContent have this issue too"); OpenAI's API answers 400 ``empty_array``. Here it is a
    400 naming ``messages[0].content``, no engine request made, for the system, developer and user
    roles. Oracle: the report's schema rule and OpenAI's error wording ("empty array")."""
    messages = [{"role": role, "content": []}, *([] if role == "user" else HI)]
    err = _refused(tok, {"messages": messages})
    assert err["param"] == "messages[0].content"
    assert "empty array" in err["message"]


def test_openai_python_1812_empty_tool_result_array_is_400_assistant_array_served(
    tok: PreTrainedTokenizerFast,
) -> None:
    """openai/openai-python#1812 (the tool message's content array has the same ``minItems: 1``):
    a tool result of ``"content": []`` is a 400 naming ``messages[2].content``, while an assistant
    turn's ``[]`` next to its ``tool_calls`` (replayed by clients; OpenAI's content is optional
    there) is still served, the same prompt as ``content: null``. Oracle: the schema rule; the cold
    run of the assistant turn with ``content: null``."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]

    def history(assistant_content: Any, tool_content: Any) -> list[dict[str, Any]]:
        return [
            *HI,
            {"role": "assistant", "content": assistant_content, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": tool_content},
        ]

    err = _refused(tok, {"messages": history(None, []), "tools": tools})
    assert err["param"] == "messages[2].content"
    cold, _ = _served(tok, {"messages": history(None, "18C"), "tools": tools})
    served, _ = _served(tok, {"messages": history([], "18C"), "tools": tools})
    assert served == cold


@pytest.mark.parametrize(
    "messages, index",
    [
        ([{"role": "user", "content": []}], 0),
        (
            [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": []},
                {"role": "user", "content": "?"},
            ],
            1,
        ),
    ],
    ids=["user", "assistant-mid"],
)
def test_surogate_132_messages_empty_content_array_is_400(
    tok: PreTrainedTokenizerFast, messages: list[dict[str, Any]], index: int
) -> None:
    """invergent-ai/surogate#132: an Anthropic user message with an empty content array was
    silently dropped instead of refused. Anthropic's API refuses it ("all messages must have
    non-empty content except for the optional final assistant message", as
    anthropics/claude-code#6774 quotes it), and so does DeepSeek's own Messages converter: a 400
    ``invalid_request_error`` naming ``messages.<i>``, no engine request made, ``count_tokens``
    alike. Oracle: ``deepseek-recipe``'s Messages converter refuses the same body; the
    ``anthropic`` client raises ``BadRequestError``."""
    with pytest.raises(Exception, match=f"messages.{index}: all messages must have non-empty content"):
        recipe_messages_prompt({"messages": messages})
    tm = PromptTM(tok, reply="Sunny.")
    client, _, tc = make_clients(tm)
    with pytest.raises(anthropic.BadRequestError) as exc:
        client.messages.create(model=MODEL, max_tokens=20, messages=messages)  # type: ignore[arg-type]
    body = exc.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(f"messages.{index}: all messages must have non-empty content")
    r = tc.post("/v1/messages/count_tokens", json={"model": MODEL, "messages": messages})
    assert r.status_code == 400, r.text
    assert tm.received == []


def test_surogate_132_empty_string_and_final_prefill_still_served(tok: PreTrainedTokenizerFast) -> None:
    """invergent-ai/surogate#132 (the other side of the rule): an empty *string* user message is
    served, the prompt DeepSeek's own Messages converter renders for it, and so is an empty final
    assistant message (Anthropic's "optional final assistant message"). Oracle: ``deepseek-recipe``'s
    Messages converter and V4 encoder."""
    tm = PromptTM(tok, reply="Sunny.")
    client, _, _ = make_clients(tm)
    msgs = [{"role": "user", "content": ""}]
    client.messages.create(model=MODEL, max_tokens=20, messages=msgs, thinking={"type": "disabled"})  # type: ignore[arg-type]
    assert tok.decode(tm.received[-1].input_ids) == recipe_messages_prompt({"messages": msgs})
    final = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": []}]
    m = client.messages.create(model=MODEL, max_tokens=20, messages=final, thinking={"type": "disabled"})  # type: ignore[arg-type]
    assert m.stop_reason in ("end_turn", "max_tokens")


# --------------------------------------------------------------------------- usage


def test_hermes_agent_57340_reasoning_tokens_in_completion_tokens_details(
    tok: PreTrainedTokenizerFast,
) -> None:
    """NousResearch/hermes-agent#57340 (chat-completions providers report the reasoning count
    under ``usage.completion_tokens_details.reasoning_tokens``, DeepSeek-V4 included; the
    reasoning is part of the completion, not counted apart). With thinking on, the non-streamed usage and the streamed usage chunk both
    carry ``reasoning_tokens``: at least the tokens of the reasoning text, at most those plus the
    ``</think>`` that ends it, and ``completion_tokens`` is every generated token. Oracle: the
    DeepSeek-V4 tokenizer's ids of the reply; the ``openai`` client's usage types."""
    thought, answer = "Let me think about it.", "Hi there!"
    reply = thought + THINK_END + answer
    n_all = len(tok.encode(reply, add_special_tokens=False))
    n_thought = len(tok.encode(thought, add_special_tokens=False))
    body = {"reasoning_effort": "high"}
    _, done = _served(tok, body, reply=reply)
    tm = FakeTM(tok, reply=reply)
    r = _client(tm).post(
        CHAT,
        json={
            "model": MODEL,
            "messages": HI,
            **body,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    chunks = [ChatCompletionChunk.model_validate(e) for e in sse_data_events(r) if e != "[DONE]"]
    streamed = chunks[-1].usage
    for usage in (done.usage, streamed):
        assert usage is not None and usage.completion_tokens_details is not None
        assert usage.completion_tokens == n_all
        assert n_thought <= usage.completion_tokens_details.reasoning_tokens <= n_thought + 1
    assert done.usage == streamed


def test_hermes_agent_57340_no_reasoning_tokens_without_thinking(tok: PreTrainedTokenizerFast) -> None:
    """NousResearch/hermes-agent#57340, thinking off: nothing is reasoning, so
    ``reasoning_tokens`` is absent or 0 and never counts answer tokens; ``completion_tokens`` is
    the reply's token count. Oracle: the DeepSeek-V4 tokenizer's ids of the reply."""
    _, done = _served(tok, {"reasoning_effort": "none"}, reply="Hello there.")
    usage = done.usage
    assert usage is not None
    assert usage.completion_tokens == len(tok.encode("Hello there.", add_special_tokens=False))
    details = usage.completion_tokens_details
    assert details is None or not details.reasoning_tokens


# --------------------------------------------------------------------------- logprobs


@pytest.mark.parametrize("effort", ["none", "high"], ids=["thinking-off", "thinking-on"])
def test_tabbyapi_430_chat_logprobs_cover_every_generated_token(
    tok: PreTrainedTokenizerFast, effort: str
) -> None:
    """theroyallab/tabbyAPI#430: the chat route collected logprobs only inside the answer span, so a
    model whose output had no reasoning / tool-call markup got ``logprobs: null`` with a 200. Here
    ``logprobs.content`` has one entry per generated token, in order, thinking off or on (the
    reasoning's tokens and ``</think>`` included, as the route documents), each entry's ``token``
    the token's text and ``bytes`` its UTF-8 bytes. Oracle: the DeepSeek-V4 tokenizer's ids of the
    reply and its decoding of each id; the ``openai`` client's ``ChatCompletion``."""
    reply = "Hm." + THINK_END + "Hi!" if effort == "high" else "Hi there!"
    ids = tok.encode(reply, add_special_tokens=False)
    _, done = _served(tok, {"reasoning_effort": effort, "logprobs": True, "top_logprobs": 1}, reply=reply)
    lp = done.choices[0].logprobs
    assert lp is not None and lp.content is not None
    assert [e.token for e in lp.content] == [tok.decode([t]) for t in ids]
    assert all(e.bytes == list(e.token.encode()) for e in lp.content)
    assert all(len(e.top_logprobs) == 1 for e in lp.content)
