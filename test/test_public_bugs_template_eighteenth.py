"""An eighteenth set of public bug reports, on chat templates and the text around them: the
thinking switch of ``chat_template_kwargs``, ``continue_final_message`` in thinking mode, the
reasoning split, stop strings across token boundaries (several completed by one token), stop token
ids, and incremental detokenization.

Faults found here: (1) when one new token completed several stop strings, the scheduler's stop
check took the first one *listed* rather than the one that ends first in the text, so an earlier
stop string stayed in the answer (ai-dynamo/dynamo#14848, vllm-project/vllm#49391); (2) a thinking
switch sent as a string (``{"thinking": "false"}``) was read by its truthiness and turned thinking
*on* (liquidos-ai/AutoAgents#284), and one sent as ``null`` hid the other name's value. The
other tests passed as-is and are kept as regression tests.

Fixtures: conftest's ``shared_fake_engine`` (the real tokenizer manager and detokenizer processes
over ``server_fixture.FakeScheduler``, which writes ``FAKE_TEXT`` with the real stop checker); the
OpenAI router in-process over ``openai_fake_tm.FakeTM`` (a fixed reply, token by token). Oracles:
``transformers.AutoTokenizer`` on the same tokenizer files, the fake model's text scanned
character by character, DeepSeek's V4 prompt format (module docstring of ``chat_encoding``), the OpenAI client's
own parser.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_fake_tm import A, FakeTM, U, app_client, oai_client, sse_data_events
from server_fixture import FAKE_SCRIPT, FAKE_SCRIPT_TAG, FAKE_TEXT, tokenizer_source_dir
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop
from sglang_v4.utils import FastTokenizer

pytestmark = pytest.mark.timeout(240)

USER = [{"role": "user", "content": "What is 6*7?"}]


def _chat(fast: FastTokenizer, reply: str, body: dict[str, Any]) -> tuple[FakeTM, Any]:
    """POST ``body`` to ``/v1/chat/completions`` on the in-process router over a ``FakeTM`` that
    answers ``reply``; returns the fake (its ``received`` requests) and the response."""
    tm = FakeTM(fast, reply)
    r = app_client(tm).post("/v1/chat/completions", json={"model": "dsv4-test", "max_tokens": 64, **body})
    return tm, r


def _char_by_char_stop(text: str, stops: list[str]) -> tuple[str, str]:
    """The oracle of a stop-string cut: ``text`` written one character at a time stops at the
    first character after which some stop string occurs (of those completed then, the first
    listed); returns the text before that stop string and the stop string."""
    for end in range(1, len(text) + 1):
        for s in stops:
            if text[:end].endswith(s):
                return text[: end - len(s)], s
    raise AssertionError("no stop string occurs")


# --------------------------------------------------------------------------- stop strings


def test_dynamo_14848_one_token_completing_two_stop_strings_stops_at_the_earlier(fast, hf) -> None:
    """ai-dynamo/dynamo#14848: when one decoded token completed several stop strings, the stop
    list's first entry was chosen instead of the earliest match in the text: ``" there"`` (one
    token) with ``stop: ["re", "he"]`` answered ``" the"``, leaving the earlier ``"he"`` in the
    text, while the reversed list answered ``" t"``. A fault here too (the scheduler's
    ``check_stop``). Expected, in either list order: the stop check on the ids of ``" there is"``
    reports ``"he"`` at the token ``" there"``, as the text written character by character would
    have stopped."""
    ids = hf.encode(" there is", add_special_tokens=False)
    assert hf.decode(ids[:1]) == " there"  # one token completes both stop strings
    for stops in (["re", "he"], ["he", "re"]):
        sp = SamplingParams(stop=stops, max_new_tokens=8)
        sp.normalize(fast)
        want = _char_by_char_stop(" there is", stops)[1]
        assert want == "he"
        assert check_stop(ids[:1], sp, {1}, fast, False) == {"type": "stop", "matched": want}, stops


@pytest.mark.parametrize("stream", [False, True])
def test_vllm_49391_answer_cut_at_the_stop_string_that_completes_first(
    shared_fake_engine: Any, stream: bool
) -> None:
    """vllm-project/vllm#49391: with several stop strings in one step's new text, the first one
    *listed* was taken, so a non-streamed answer ran past an earlier stop string (``stop: ["a",
    "is", ","]`` on ``" The user is a"`` kept ``"is"``). Here one token (``" user"`` of the fake
    model's scripted output ``FAKE_SCRIPT``, stopped by the scheduler's real stop check) completes
    both ``"er"`` and ``"se"``. Expected, streamed or not, for either list order: the text ends
    right before ``"se"`` and ``matched`` names it -- the cut of ``FAKE_SCRIPT`` written character
    by character."""
    for stops in (["er", "se"], ["se", "er"]):
        want, matched = _char_by_char_stop(FAKE_SCRIPT, stops)
        assert (want, matched) == ("Hmm. The u", "se")
        sp = {"max_new_tokens": 16, "stop": stops, "temperature": 0}
        prompt = f"{FAKE_SCRIPT_TAG} Tell me"
        if stream:
            outs = list(shared_fake_engine.generate(prompt, sp, stream=True))
            assert all(want.startswith(o["text"]) for o in outs), [o["text"] for o in outs]
            out = outs[-1]
        else:
            out = shared_fake_engine.generate(prompt, sp)
        assert out["text"] == want, (stops, out["text"])
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": matched}


# --------------------------------------------------------------------------- thinking switch


def _prompt_text(hf: Any, tm: FakeTM) -> str:
    """The text of the prompt ids the chat route sent last (special tokens kept)."""
    return hf.decode(tm.received[-1].input_ids, skip_special_tokens=False)


@pytest.mark.parametrize(
    ("kwargs", "thinking"),
    [
        ({"thinking": "false"}, False),
        ({"enable_thinking": "False"}, False),
        ({"thinking": " off "}, False),
        ({"thinking": 0}, False),
        ({"thinking": "true"}, True),
        ({"enable_thinking": 1}, True),
        ({"thinking": None, "enable_thinking": "true"}, True),
    ],
)
def test_autoagents_284_thinking_switch_spelled_as_string_is_read_as_boolean(
    fast, hf, kwargs: dict[str, Any], thinking: bool
) -> None:
    """liquidos-ai/AutoAgents#284: ``chat_template_kwargs`` ``{"enable_thinking": "false"}`` was
    passed on as the string, which is truthy, so the template rendered thinking mode while the
    client had turned it off (SGLang reads a string ``reasoning.enabled`` as its boolean spelling,
    sgl-project/sglang#9715). A fault here: ``"false"`` turned thinking on. Expected: a switch
    spelled ``"false"`` / ``"off"`` / ``0`` renders the chat-mode prompt (DeepSeek-V4's format:
    ``<｜Assistant｜></think>``) and the whole reply is ``content``; ``"true"`` / ``1`` render
    ``<｜Assistant｜><think>`` and split the reply at ``</think>``; a switch sent as ``null`` is
    not set, so the other name decides."""
    tm, r = _chat(fast, "Let me see.</think>42", {"messages": USER, "chat_template_kwargs": kwargs})
    assert r.status_code == 200, r.text
    head = "<｜begin▁of▁sentence｜>" + U + "What is 6*7?" + A
    assert _prompt_text(hf, tm) == head + ("<think>" if thinking else "</think>")
    msg = r.json()["choices"][0]["message"]
    if thinking:
        assert (msg["reasoning_content"], msg["content"]) == ("Let me see.", "42")
    else:
        assert (msg["reasoning_content"], msg["content"]) == (None, "Let me see.</think>42")


@pytest.mark.parametrize("value", ["maybe", 2, [True], {"type": "enabled"}])
def test_autoagents_284_thinking_switch_of_no_boolean_spelling_is_a_400(fast, value: Any) -> None:
    """liquidos-ai/AutoAgents#284 (the other half): a thinking switch that is no boolean spelling
    cannot be guessed either way. Expected: HTTP 400 in OpenAI's error shape (the ``openai``
    client raises ``BadRequestError``) naming ``chat_template_kwargs`` and the key, and nothing is
    generated."""
    import openai

    tm = FakeTM(fast, "x")
    client = oai_client(app_client(tm))
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="dsv4-test",
            messages=USER,
            max_tokens=4,
            extra_body={"chat_template_kwargs": {"thinking": value}},
        )
    assert "chat_template_kwargs.thinking" in str(e.value)
    assert e.value.body["param"] == "chat_template_kwargs"
    assert tm.received == []


def test_autoagents_284_string_switch_reaches_a_jinja_template_as_boolean(fast, tmp_path: Path) -> None:
    """liquidos-ai/AutoAgents#284, the report's own path: a ``--chat-template`` that tests
    ``{% if enable_thinking %}`` saw the string ``"false"`` and opened the thinking block.
    Expected: the prompt is transformers' ``apply_chat_template`` of the same template with
    ``enable_thinking=False`` (and with ``True`` for ``"true"``)."""
    from transformers import AutoTokenizer

    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(
        Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json",
        d / "config.json",
    )
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tokenizer_source_dir()) / name, d / name)
    body = (
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<A>{% if enable_thinking %}<think>{% endif %}{% endif %}"
    )
    ref = AutoTokenizer.from_pretrained(str(d))
    for sent, flag in (("false", False), ("true", True)):
        tm = FakeTM(fast, "x")
        c = app_client(tm, chat_template=body, tokenizer_path=str(d), model_path=str(d))
        r = c.post(
            "/v1/chat/completions",
            json={"messages": USER, "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": sent}},
        )
        assert r.status_code == 200, r.text
        want = ref.apply_chat_template(
            USER, chat_template=body, tokenize=False, add_generation_prompt=True, enable_thinking=flag
        )
        assert want.endswith("<A><think>" if flag else "<A>")
        assert list(tm.received[-1].input_ids) == ref.encode(want, add_special_tokens=False), sent


def test_autoagents_284_default_thinking_switch_is_checked_at_start_up() -> None:
    """liquidos-ai/AutoAgents#284, server side: ``--default-chat-template-kwargs`` with a string
    switch would turn thinking on for every request (``"off"`` is truthy), and one of no boolean
    spelling would fail every request. Expected: ``ServerArgs`` reads ``"off"`` as ``false`` and
    refuses ``"maybe"`` at start-up with a ``ValueError`` naming the flag and the key."""
    from sglang_v4.server_args import ServerArgs

    sa = ServerArgs(model_path="x", device="cpu", default_chat_template_kwargs='{"thinking": "off"}')
    assert sa.default_chat_template_kwargs == {"thinking": False}
    with pytest.raises(ValueError, match=r"default_chat_template_kwargs\.enable_thinking"):
        ServerArgs(model_path="x", device="cpu", default_chat_template_kwargs={"enable_thinking": "maybe"})


def test_prime_rl_2050_tokenize_renders_with_the_default_template_kwargs(fast, hf) -> None:
    """PrimeIntellect-ai/prime-rl#2050: ``/tokenize`` ignored the server's default
    ``chat_template_kwargs`` (thinking mode), so its ids differed from the prompt the chat route
    ran. Expected, with ``--default-chat-template-kwargs {"thinking": true}``: ``/tokenize`` of
    the messages gives exactly the chat route's prompt ids, the thinking-mode prompt of
    DeepSeek-V4's format (ending ``<｜Assistant｜><think>``, the oracle's encoding of that text)."""
    tm = FakeTM(fast, "x")
    c = app_client(tm, default_chat_template_kwargs={"thinking": True})
    ids = c.post("/tokenize", json={"messages": USER}).json()["tokens"]
    r = c.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert ids == list(tm.received[-1].input_ids)
    text = "<｜begin▁of▁sentence｜>" + U + "What is 6*7?" + A + "<think>"
    assert ids == hf.encode(text, add_special_tokens=False)


# --------------------------------------------------------------------------- reasoning stream


def test_sglang_18335_first_stream_chunk_carries_the_assistant_role_before_reasoning(fast) -> None:
    """sgl-project/sglang#18335: while the model reasoned, a stream sent chunks with ``role`` and
    ``content`` null and no opening chunk, which OpenAI-compatible clients could not read.
    Expected (OpenAI's stream shape): the first chunk's delta is ``role: "assistant"`` with
    ``content: ""``, sent before any reasoning; every chunk parses as the ``openai`` client's
    ``ChatCompletionChunk``; the reasoning deltas add up to the reasoning and the content deltas
    to the answer."""
    from openai.types.chat import ChatCompletionChunk

    body = {"messages": USER, "stream": True, "chat_template_kwargs": {"thinking": True}}
    _, r = _chat(fast, "Six times seven.</think>42", body)
    events = sse_data_events(r)
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    first = chunks[0].choices[0].delta
    assert (first.role, first.content) == ("assistant", "")
    assert getattr(first, "reasoning_content", None) in (None, "")
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == "Six times seven."
    assert "".join(d.get("content") or "" for d in deltas) == "42"


# --------------------------------------------------------------------------- continue_final_message


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_17065_continued_answer_in_thinking_mode_is_content(fast, hf, stream: bool) -> None:
    """sgl-project/sglang#17065: with ``continue_final_message`` and thinking on, the reasoning
    parser took the continuation for reasoning and ``reasoning_content`` held the continued
    message. Expected (DeepSeek-V4's format: the continued turn's reasoning is closed before its
    content, so the continuation is answer text): the prompt ends with the assistant turn's
    ``<think>`` + reasoning + ``</think>`` + content and no EOS, and the whole reply is
    ``content``, streamed or not, with no ``reasoning_content``."""
    msgs = [*USER, {"role": "assistant", "reasoning_content": "6*7 is 42.", "content": "The answer is"}]
    body = {
        "messages": msgs,
        "continue_final_message": True,
        "add_generation_prompt": False,
        "chat_template_kwargs": {"thinking": True},
        "stream": stream,
    }
    tm, r = _chat(fast, " 42.", body)
    assert r.status_code == 200, r.text
    prompt = _prompt_text(hf, tm)
    assert prompt.endswith(A + "<think>6*7 is 42.</think>The answer is"), prompt
    if stream:
        deltas = [e["choices"][0]["delta"] for e in sse_data_events(r)[:-1] if e["choices"]]
        assert "".join(d.get("content") or "" for d in deltas) == " 42."
        assert not any(d.get("reasoning_content") for d in deltas)
    else:
        msg = r.json()["choices"][0]["message"]
        assert (msg["content"], msg["reasoning_content"]) == (" 42.", None)


@pytest.mark.parametrize("content", ["OK!\n", "OK! ", "OK!\t", "Liste :\n\n- "])
def test_vllm_9547_continued_message_ending_in_whitespace_is_continued_verbatim(
    fast, hf, content: str
) -> None:
    """vllm-project/vllm#9547: ``continue_final_message`` with a final assistant message ending in
    ``"\n"``, ``" "`` or ``"\t"`` failed with a 400 "substring not found" (the template stripped
    the message, then the server looked for it unstripped). Expected: 200, and the prompt ends
    with the message exactly as sent -- DeepSeek-V4's format renders assistant content verbatim,
    the final turn without its EOS -- tokenized as the oracle tokenizes that text."""
    msgs = [*USER, {"role": "assistant", "content": content}]
    tm, r = _chat(
        fast, "x", {"messages": msgs, "continue_final_message": True, "add_generation_prompt": False}
    )
    assert r.status_code == 200, r.text
    want = "<｜begin▁of▁sentence｜>" + U + "What is 6*7?" + A + "</think>" + content
    assert list(tm.received[-1].input_ids) == hf.encode(want, add_special_tokens=False)


@pytest.mark.parametrize("thinking", [True, False])
def test_vllm_28089_thinking_switch_still_renders_the_continued_turn(fast, hf, thinking: bool) -> None:
    """vllm-project/vllm#28089: with ``continue_final_message`` the thinking switch of
    ``chat_template_kwargs`` no longer reached the continued assistant turn (its thinking-mode
    markup was lost). Expected, per DeepSeek-V4's format: thinking on renders the continued turn
    as ``<｜Assistant｜><think>`` + its reasoning + ``</think>`` + content, thinking off as
    ``<｜Assistant｜></think>`` + content (the reasoning left out), each without EOS."""
    msgs = [*USER, {"role": "assistant", "reasoning_content": "Easy.", "content": "It is"}]
    body = {"messages": msgs, "continue_final_message": True, "chat_template_kwargs": {"thinking": thinking}}
    tm, r = _chat(fast, " 42", body)
    assert r.status_code == 200, r.text
    turn = A + ("<think>Easy.</think>" if thinking else "</think>") + "It is"
    assert _prompt_text(hf, tm) == "<｜begin▁of▁sentence｜>" + U + "What is 6*7?" + turn
    assert r.json()["choices"][0]["message"]["content"] == " 42"


def test_ollama_17187_thinking_only_prefill_continues_as_content(fast, hf) -> None:
    """ollama/ollama#17187: a trailing assistant prefill holding only thinking (no content) was
    not taken as a prefill. Expected: it is continued -- DeepSeek's prefix completion leaves its
    reasoning open (``<think>`` + reasoning, no ``</think>``, no EOS), so the continuation's text up
    to ``</think>`` is reasoning and the rest ``content`` -- the OpenAI client's parsed message has
    them there."""
    msgs = [*USER, {"role": "assistant", "reasoning_content": "Six sevens.", "content": ""}]
    tm = FakeTM(fast, " So 42.</think>It is 42.")
    out = oai_client(app_client(tm)).chat.completions.create(
        model="dsv4-test",
        messages=msgs,
        max_tokens=16,
        extra_body={"continue_final_message": True, "chat_template_kwargs": {"thinking": True}},
    )
    assert _prompt_text(hf, tm).endswith(A + "<think>Six sevens.")
    assert out.choices[0].message.content == "It is 42."
    assert getattr(out.choices[0].message, "reasoning_content", None) == " So 42."


# --------------------------------------------------------------------------- stop token ids


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_vllm_55483_stop_token_id_text_never_reaches_the_output(
    shared_fake_engine: Any, hf: Any, no_stop_trim: bool
) -> None:
    """vllm-project/vllm#55483: a ``stop_token_ids`` token that is an ordinary (not special)
    token was detokenized into the text and the streamed deltas although the stop string was to be
    left out. Here the fake model writes the stop token (``" cat"``) as its fourth token. Expected,
    streamed and not: the text is the oracle's decode of the three tokens before it, no streamed
    chunk holds ``" cat"``, and ``matched`` is the id; with ``no_stop_trim`` the token's text is
    kept at the end."""
    cat = hf.encode(" cat", add_special_tokens=False)
    assert len(cat) == 1 and cat[0] not in hf.all_special_ids
    sp = {"max_new_tokens": 8, "stop_token_ids": cat, "no_stop_trim": no_stop_trim}
    first = hf.encode(FAKE_TEXT, add_special_tokens=False)[:3]
    want = hf.decode(first + (cat if no_stop_trim else []))
    outs = list(shared_fake_engine.generate("Tell me", sp, stream=True))
    if not no_stop_trim:
        assert not any(" cat" in o["text"] for o in outs), [o["text"] for o in outs]
    assert outs[-1]["text"] == want
    out = shared_fake_engine.generate("Tell me", sp)
    assert out["text"] == want
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": cat[0]}


# --------------------------------------------------------------------------- detokenization


def _detok_stream(dm: Any, ids: list[int], reason: Any, skip: bool = True) -> tuple[list[str], str | None]:
    """Feed ``ids`` to the detokenizer one token per scheduler message (the last one finishing
    with ``reason``); returns the text chunks sent and the final text."""
    from sglang_v4.managers.io_struct import BatchTokenIDOut

    chunks, final = [], None
    for k in range(1, len(ids) + 1):
        m = BatchTokenIDOut.empty()
        m.append(
            rid="r",
            finished_reason=reason if k == len(ids) else None,
            output_ids=ids[k - 1 : k],
            prompt_tokens=1,
            completion_tokens=k,
            skip_special_tokens=skip,
        )
        out = dm.handle_batch_token_id_out(m)
        chunks.append(out.output_strs[0])
        final = out.final_strs[0] if k == len(ids) else None
    return chunks, final


def test_vllm_46224_special_tokens_written_mid_answer_never_reach_the_text(fast, hf) -> None:
    """vllm-project/vllm#46224: special tokens the model wrote inside its answer (BOS, EOS) were
    left in the text of non-streamed responses although ``skip_special_tokens`` was on (a
    DeepSeek-V4 output holding ``<｜begin▁of▁sentence｜>`` mid-text, ai-dynamo/dynamo#8780's
    sample). Expected, with ``skip_special_tokens`` on: the streamed chunks and the final text
    are ``transformers``' decode of the same ids with special tokens skipped, and neither holds a
    special token's text; with it off, the final text keeps them, as that decode does."""
    from sglang_v4.managers.detokenizer_manager import DetokenizerManager
    from sglang_v4.managers.io_struct import finish_length

    bos, eos = hf.bos_token_id, hf.eos_token_id
    ids = [bos, *hf.encode("Bonjour 🌍", add_special_tokens=False), bos, eos]
    ids += hf.encode(" fin", add_special_tokens=False)
    reason = finish_length(len(ids))
    chunks, final = _detok_stream(DetokenizerManager(fast), ids, reason)
    want = hf.decode(ids, skip_special_tokens=True)
    assert want == "Bonjour 🌍 fin"
    assert "".join(chunks) == final == want
    _, kept = _detok_stream(DetokenizerManager(fast), ids, reason, skip=False)
    assert kept == hf.decode(ids, skip_special_tokens=False)
    assert hf.bos_token in kept and hf.eos_token in kept


def test_aprender_2019_streamed_emoji_whole_and_answer_cut_at_the_stop(fast, hf) -> None:
    """paiml/aprender#2019: a chat stream decoded each token alone, so an emoji spread over
    byte-level tokens reached the client as U+FFFD, and the stream ignored ``stop`` (it kept the
    stop string). Expected, feeding the detokenizer one token per message up to the token that
    completes the stop string ``"STOP"`` (the scheduler's stop): no chunk holds U+FFFD, the
    chunks add up to the final text, and that text is ``transformers``' decode of the ids cut
    right before ``"STOP"``."""
    from sglang_v4.managers.detokenizer_manager import DetokenizerManager
    from sglang_v4.managers.io_struct import finish_stop

    text = "Rain 🌧️ then sun ☀️, STOP here"
    ids = hf.encode(text, add_special_tokens=False)
    end = next(k for k in range(1, len(ids) + 1) if "STOP" in hf.decode(ids[:k]))
    ids = ids[:end]
    assert any("\ufffd" in hf.decode([t]) for t in ids)  # the emoji are split across tokens
    chunks, final = _detok_stream(DetokenizerManager(fast), ids, finish_stop("STOP"))
    full = hf.decode(ids)
    assert final == full[: full.index("STOP")] == "Rain 🌧️ then sun ☀️, "
    assert "".join(chunks) == final
    assert not any("\ufffd" in c for c in chunks), chunks
