"""A twenty-seventh set of public bug reports on chat templates: messages handed to a
``--chat-template`` Jinja template (tool-call arguments sent as JSON strings, content given as a
list of parts to a template that prints ``message.content``, a plain string given to a template that
loops over the parts), OpenAI's ``developer`` role on the DeepSeek-V4 encoding, and
``continue_final_message`` (a final message that repeats an earlier one, leading whitespace, thinking
mode).

Faults found here, all in the ``--chat-template`` path (fixed in
``sglang_v4.entrypoints.chat_template_messages``): (1) an assistant message's
``tool_calls[i].function.arguments`` reached the template as the JSON string OpenAI sends, so a
template that rebuilds the call from its parameters (``arguments | items``, Qwen3-Coder's and
Qwen3.8's) failed with a 400 (QwenLM/Qwen3-Coder#444, QwenLM/Qwen3#1894); (2) message content was
handed over in whatever form the client sent: a list of parts printed as its Python ``repr`` by a
template that writes ``{{ message.content }}`` (axolotl-ai-cloud/axolotl#3595), and a plain string
looped over character by character by a template that iterates the parts (vllm-project/vllm#9358),
an assistant's ``refusal`` part dropped (CommandCodeAI/command-code#820, whose DeepSeek-V4
encoding counterpart passed), and a tool-call turn's ``null`` or absent content left undefined, so
a template concatenating it failed (huggingface/speech-to-speech#414). SGLang and vLLM prepare the messages for the template in these
respects; so does the server now.
The DeepSeek-V4 encoding tests passed as they were and are kept as regression tests.

Fixtures: the OpenAI routes in process over ``openai_fake_tm.FakeTM`` (the engine request it
receives is kept), with ``--chat-template`` on a model directory of the small byte-level test
tokenizer (``tokenizer_testutil``). Oracles: ``transformers``' own ``apply_chat_template`` on the
same directory fed the messages as the reports' fixes state them (arguments ``json.loads``-ed, the
maintainers' stated workaround; content in the template's format), DeepSeek's V4 prompt format
(the module docstring of ``chat_encoding``: system text first, ``<｜User｜>`` turns, an assistant
turn closed by EOS), the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``hf``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import A, B, E, FakeTM, U, app_client
from server_fixture import tokenizer_source_dir
from tokenizer_testutil import tiny_tokenizer_json

pytestmark = pytest.mark.timeout(120)

MODEL = "dsv4-test"
FIXTURES = Path(__file__).parent / "fixtures"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    }
]
#: a template that rebuilds each call from its parameters, as Qwen3-Coder's and Qwen3.8's do
ITEMS_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for tc in m.tool_calls or [] %}<call {{ tc.function.name }}>"
    "{% for k, v in tc.function.arguments | items %}<p {{ k }}>{{ v }}</p>{% endfor %}</call>{% endfor %}"
    "</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
#: a template that prints the content as a string (the *string* content format)
STRING_TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
#: a template that loops over the content parts (the *openai* content format, Llama 4's shape)
PARTS_TEMPLATE = (
    "{% for message in messages %}<{{ message.role }}>"
    "{% for part in message['content'] %}{% if part.type == 'text' %}[{{ part.text }}]{% endif %}{% endfor %}"
    "</{{ message.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config-only model directory with the small byte-level test tokenizer and the V4
    ``tokenizer_config.json`` (BOS / EOS of V4)."""
    root = tmp_path_factory.mktemp("tpl27")
    shutil.copy(FIXTURES / "configs" / "tiny-DeepseekV4ForCausalLM.config.json", root / "config.json")
    tiny_tokenizer_json(root / "tokenizer.json")
    shutil.copy(Path(tokenizer_source_dir()) / "tokenizer_config.json", root / "tokenizer_config.json")
    return root


def _jinja_chat(d: Path, template: str, body: dict[str, Any]) -> tuple[int, str, list[int] | None]:
    """POST ``body`` to ``/v1/chat/completions`` of a router started with ``--chat-template``
    ``template`` on directory ``d``; returns the status, the body text and the prompt ids the
    engine was sent (``None`` when none was)."""
    from sglang_v4.hf_transformers_utils import get_tokenizer

    tm = FakeTM(get_tokenizer(str(d)))
    c = app_client(tm, chat_template=template, tokenizer_path=str(d), model_path=str(d))
    r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, **body})
    return r.status_code, r.text, (list(tm.received[-1].input_ids) if tm.received else None)


def _hf_ids(d: Path, template: str, messages: list[dict[str, Any]], **kw: Any) -> list[int]:
    """``transformers``' own rendering of ``messages`` with ``template`` on directory ``d``,
    tokenized as a whole (as the server tokenizes a Jinja-rendered prompt)."""
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(str(d))
    text = ref.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)
    return ref.encode(text, add_special_tokens=False)


# --------------------------------------------------------------------------- --chat-template


def test_qwen3_coder_444_string_tool_arguments_reach_the_template_as_a_mapping(tiny_dir: Path) -> None:
    """QwenLM/Qwen3-Coder#444 and QwenLM/Qwen3#1894: a template that iterates a call's
    ``arguments | items`` fails ("Can only get item pairs from a mapping") on OpenAI's JSON-string
    ``function.arguments``; the maintainers' answer is to ``json.loads`` them before rendering, which
    SGLang and vLLM do on their Jinja path. Expected: the chat request carrying such a call in its
    history is answered (200) and its prompt is ``transformers``' rendering of the same history
    with the arguments decoded."""
    args = {"city": "Paris", "days": 3}
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps(args)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
    ]
    status, text, ids = _jinja_chat(tiny_dir, ITEMS_TEMPLATE, {"messages": history, "tools": TOOLS})
    assert status == 200, text
    decoded = json.loads(json.dumps(history))
    decoded[1]["tool_calls"][0]["function"]["arguments"] = args
    want = _hf_ids(tiny_dir, ITEMS_TEMPLATE, decoded, tools=TOOLS, add_generation_prompt=True)
    assert ids == want


def test_qwen3_1894_arguments_that_are_no_json_object_are_left_as_sent(tiny_dir: Path) -> None:
    """QwenLM/Qwen3#1894 (its caveat): only arguments that decode to a JSON object are a mapping;
    a template printing the arguments (``{{ tc.function.arguments }}``) must still get the exact
    string for anything else. Expected: ``"[1, 2]"`` reaches the template unchanged (the prompt is
    ``transformers``' rendering of the history as sent)."""
    tpl = (
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% for tc in m.tool_calls or [] %}({{ tc.function.arguments }}){% endfor %}{% endfor %}"
    )
    history = [
        {"role": "user", "content": "Go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "[1, 2]"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    status, text, ids = _jinja_chat(tiny_dir, tpl, {"messages": history, "tools": TOOLS})
    assert status == 200, text
    assert ids == _hf_ids(tiny_dir, tpl, history, tools=TOOLS, add_generation_prompt=True)


@pytest.mark.parametrize("role", ["system", "user"])
def test_axolotl_3595_list_content_on_a_string_template_is_its_text(tiny_dir: Path, role: str) -> None:
    """axolotl-ai-cloud/axolotl#3595 (#3590) and epam/ai-dial-sdk#163: a system (or user) message
    whose content is OpenAI's list of text parts, rendered by a template that concatenates
    ``message.content`` as a string, came out as the list's Python ``repr``. SGLang flattens such
    content to its text parts joined by a space before a string-format template renders it.
    Expected: the prompt is ``transformers``' rendering of the same messages with content
    ``"Be brief. Be kind."``, and holds no ``'type'`` key text."""
    parts = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]
    msgs = [{"role": role, "content": parts}] + (
        [{"role": "user", "content": "Hi"}] if role == "system" else []
    )
    status, text, ids = _jinja_chat(tiny_dir, STRING_TEMPLATE, {"messages": msgs})
    assert status == 200, text
    flat = [dict(m, content="Be brief. Be kind.") if m["role"] == role else m for m in msgs]
    assert ids == _hf_ids(tiny_dir, STRING_TEMPLATE, flat, add_generation_prompt=True)
    from transformers import AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(str(tiny_dir)).decode(ids)
    assert "'type'" not in prompt and "Be brief. Be kind." in prompt


def test_vllm_9358_string_content_on_a_parts_template_is_one_text_part(tiny_dir: Path) -> None:
    """vllm-project/vllm#9358: a template written for OpenAI's content parts
    (``{% for part in message['content'] %}``) got plain string content and looped over its
    characters, dropping the text; vLLM hands such a template ``[{"type": "text", "text": ...}]``.
    Expected: a plain-string message and a list-of-parts message both render as ``transformers``
    renders them given the parts, the string's text kept whole."""
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]},
    ]
    status, text, ids = _jinja_chat(tiny_dir, PARTS_TEMPLATE, {"messages": msgs})
    assert status == 200, text
    as_parts = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, msgs[1]]
    assert ids == _hf_ids(tiny_dir, PARTS_TEMPLATE, as_parts, add_generation_prompt=True)
    from transformers import AutoTokenizer

    assert "[Be brief.]" in AutoTokenizer.from_pretrained(str(tiny_dir)).decode(ids)


def test_transformers_36404_continue_final_message_on_a_template(tiny_dir: Path) -> None:
    """huggingface/transformers#36404 (#35433): with ``continue_final_message``, a final message
    whose text also occurs earlier in the conversation made the prompt cut at the *earlier*
    occurrence, dropping the turns after it; a template that trims the content (``| trim``)
    made it worse. Expected: the prompt is ``transformers``' (fixed) ``continue_final_message``
    rendering: the whole conversation, open at the end of the final message, no generation
    prompt after it."""
    tpl = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>{% endfor %}"
    tpl += "{% if add_generation_prompt %}<assistant>{% endif %}"
    msgs = [
        {"role": "user", "content": "Say yes"},
        {"role": "assistant", "content": "yes "},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "yes "},
    ]
    status, text, ids = _jinja_chat(tiny_dir, tpl, {"messages": msgs, "continue_final_message": True})
    assert status == 200, text
    assert ids == _hf_ids(tiny_dir, tpl, msgs, continue_final_message=True)
    from transformers import AutoTokenizer

    prompt = AutoTokenizer.from_pretrained(str(tiny_dir)).decode(ids)
    assert prompt == "<user>Say yes</s><assistant>yes</s><user>Again</s><assistant>yes"


def test_command_code_820_assistant_parts_reach_a_string_template(tiny_dir: Path) -> None:
    """CommandCodeAI/command-code#820 (DeepSeek-V4-Flash behind an OpenAI-compatible gateway) and
    openai/openai-agents-js#1522: an assistant message whose content is a list of parts
    (``text``, or ``refusal``, both legal in OpenAI's ``ChatCompletionAssistantMessageParam``) was
    silently blanked. Expected with a string-format template: the earlier answer's text and the
    refusal's text both reach the prompt -- ``transformers``' rendering of the history with those
    contents as strings."""
    msgs = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": [{"type": "text", "text": "A1"}]},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
        {"role": "user", "content": "Q3"},
    ]
    status, text, ids = _jinja_chat(tiny_dir, STRING_TEMPLATE, {"messages": msgs})
    assert status == 200, text
    flat = [
        dict(m, content="A1") if i == 1 else dict(m, content="I cannot.") if i == 3 else m
        for i, m in enumerate(msgs)
    ]
    assert ids == _hf_ids(tiny_dir, STRING_TEMPLATE, flat, add_generation_prompt=True)


@pytest.mark.parametrize("content", ["null", "absent"])
def test_speech_to_speech_414_tool_call_turn_without_content(tiny_dir: Path, content: str) -> None:
    """huggingface/speech-to-speech#414, Blaizzy/mlx-vlm#1864 (#1785) and vllm-project/vllm#54368:
    an assistant turn of tool calls only (``content: null``, or no ``content`` key) reached the
    template without a string content, and a template concatenating ``message['content']``
    failed ("'dict object' has no attribute 'content'"), so the follow-up after the tool result
    was never generated. Expected (the fixes: empty-string content): 200, and the prompt is
    ``transformers``' rendering of the history with ``content: ""`` on that turn."""
    tpl = "{% for m in messages %}<{{ m.role }}>{{ m['content'] + '|' }}{% endfor %}<assistant>"
    call = {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
    }
    if content == "null":
        call["content"] = None
    msgs = [
        {"role": "user", "content": "Weather?"},
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    ]
    status, text, ids = _jinja_chat(tiny_dir, tpl, {"messages": msgs, "tools": TOOLS})
    assert status == 200, text
    want = [
        msgs[0],
        {
            **call,
            "content": "",
            "tool_calls": [{**call["tool_calls"][0], "function": {"name": "lookup", "arguments": {}}}],
        },
        msgs[2],
    ]
    assert ids == _hf_ids(tiny_dir, tpl, want, tools=TOOLS)


# --------------------------------------------------------------------------- DeepSeek-V4 encoding


def _v4_prompt(hf: Any, body: dict[str, Any]) -> str:
    """The prompt (special tokens kept) the chat route sends for ``body`` on the V4 encoding."""
    tm = FakeTM(hf)
    r = app_client(tm).post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4, **body})
    assert r.status_code == 200, r.text
    return hf.decode(tm.received[-1].input_ids, skip_special_tokens=False)


@pytest.mark.parametrize("thinking", [False, True])
def test_sglang_14307_developer_role_is_accepted_as_an_instruction(hf: Any, thinking: bool) -> None:
    """sgl-project/sglang#14307, earendil-works/pi#1048 and bramses/chatgpt-md#189: OpenAI clients
    send their instructions as a ``developer`` message, which DeepSeek's API refused ("unknown
    variant `developer`"); SGLang accepts the role and hands it to the DeepSeek encoder as a
    system message. Expected, with and without thinking: 200, and the same prompt as the
    conversation with a ``system`` message -- BOS, the instruction text, then the user turn (V4's
    format: system text first, no role token) -- also when the developer message comes first in
    thinking mode, where V4's own developer turn before the last user turn would be dropped."""
    kw = {"chat_template_kwargs": {"thinking": thinking}}
    dev = [{"role": "developer", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]
    sys_ = [dict(dev[0], role="system"), dev[1]]
    got = _v4_prompt(hf, {"messages": dev, **kw})
    assert got == _v4_prompt(hf, {"messages": sys_, **kw})
    assert got == f"{B}Answer in French.{U}Hi{A}" + ("<think>" if thinking else "</think>")


def test_hermes_studio_1926_developer_item_on_responses_is_kept(hf: Any) -> None:
    """EKKOLearnAI/hermes-studio#1926: a Responses request whose ``input`` holds a ``developer``
    message (Codex's shape) was refused by DeepSeek's endpoint. Expected: ``/v1/responses``
    answers 200 and the prompt holds the developer text as the system part, before the user turn
    (V4's format)."""
    tm = FakeTM(hf)
    r = app_client(tm).post(
        "/v1/responses",
        json={
            "model": MODEL,
            "max_output_tokens": 4,
            "input": [
                {"role": "developer", "content": "Use metric units."},
                {"role": "user", "content": "How tall is it?"},
            ],
        },
    )
    assert r.status_code == 200, r.text
    prompt = hf.decode(tm.received[-1].input_ids, skip_special_tokens=False)
    assert prompt.startswith(f"{B}Use metric units.{U}How tall is it?{A}"), prompt


def test_transformers_35433_continued_message_repeating_an_earlier_one(hf: Any) -> None:
    """huggingface/transformers#35433: ``continue_final_message`` cut the prompt at an earlier
    message whose text equals the final one. Expected on the V4 encoding: every turn kept, the
    first ``"x "`` answer closed by EOS, the final one left open (no EOS, no new assistant turn)
    -- hand-derived from V4's format."""
    msgs = [
        {"role": "user", "content": "Say x"},
        {"role": "assistant", "content": "x "},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "x "},
    ]
    got = _v4_prompt(hf, {"messages": msgs, "continue_final_message": True, "add_generation_prompt": False})
    assert got == f"{B}{U}Say x{A}</think>x {E}{U}again{A}</think>x "


def test_tabbyapi_431_continued_text_keeps_its_leading_space(hf: Any) -> None:
    """theroyallab/tabbyAPI#431: a continued reply must pass through the template as the model was
    trained on it, its spacing untouched (a reply stored as ``" The story begins"`` continued as
    ``"The story begins"`` or with a generation prompt after it reads as another turn). Expected:
    the V4 prompt ends with ``<｜Assistant｜></think>`` + the message's text verbatim, leading space
    and trailing space kept, and nothing after it."""
    content = " The story begins "
    msgs = [{"role": "user", "content": "Tell me a story."}, {"role": "assistant", "content": content}]
    got = _v4_prompt(hf, {"messages": msgs, "continue_final_message": True})
    assert got == f"{B}{U}Tell me a story.{A}</think>{content}"


def test_verifiers_179_continue_final_message_in_thinking_mode(hf: Any) -> None:
    """PrimeIntellect-ai/verifiers#179: with a DeepSeek-R1-style template that drops an assistant
    message's reasoning, ``continue_final_message`` failed ("the final message does not appear in
    the chat after applying the chat template"). Expected on the V4 encoding in thinking mode: 200,
    the final message's reasoning in its closed ``<think>`` block and its text last, open (V4:
    ``<think>`` + reasoning + ``</think>`` + content, no EOS)."""
    msgs = [
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": "Once upon", "reasoning_content": "A short one."},
    ]
    got = _v4_prompt(
        hf, {"messages": msgs, "continue_final_message": True, "chat_template_kwargs": {"thinking": True}}
    )
    assert got == f"{B}{U}Tell me a story.{A}<think>A short one.</think>Once upon"


def test_command_code_820_assistant_parts_are_kept_on_the_v4_encoding(hf: Any) -> None:
    """CommandCodeAI/command-code#820: on DeepSeek-V4-Flash an assistant message given as
    ``[{"type": "text", ...}]`` was blanked (HTTP 200, the turn's text lost), and
    openai/openai-agents-js#1522 lost a refusal-only assistant turn. Expected on the V4 encoding:
    the earlier answer's text and the refusal's text each stand in their assistant turn, closed by
    EOS (V4's format)."""
    msgs = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": [{"type": "text", "text": "A1"}]},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
        {"role": "user", "content": "Q3"},
    ]
    got = _v4_prompt(hf, {"messages": msgs})
    assert got == f"{B}{U}Q1{A}</think>A1{E}{U}Q2{A}</think>I cannot.{E}{U}Q3{A}</think>"
