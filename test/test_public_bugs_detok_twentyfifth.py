"""A twenty-fifth set of public bug reports, on tokenization and detokenization: a stop string
inside a longer token (seen, and the text before it in that token kept), the pieces of a
multi-token stop string not stopping on their own, a special token's text as a stop string, text
around added tokens and ``spaces_between_special_tokens``, ``skip_special_tokens`` per request in
one batch, text never held back behind complete characters, no clean-up of spaces in a stream, an
emoji split over several tokens after a space, one BOS in agent (tool-calling) chat prompts and in
token-id prompts. Each test names its report.

Fixtures: the detokenizer (``DetokenizerManager`` on the runtime's ``FastTokenizer``) fed
scheduler messages by hand; the scheduler's ``check_stop``; the OpenAI router in-process over
``openai_fake_tm.FakeTM``. Oracles: ``transformers``' decode and encode of the whole id sequence on
the same tokenizer files, and Python's ``str.find``.
"""

from __future__ import annotations

from typing import Any

import pytest
from detokenizer_testutil import encode_plain, feed_each_token, stream_detok
from openai_fake_tm import B, FakeTM, app_client, oai_client
from sglang_v4.managers.detokenizer_manager import DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop

pytestmark = pytest.mark.timeout(240)

FFFD = "\ufffd"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"


def _params(stop: list[str], hf: Any) -> SamplingParams:
    sp = SamplingParams(stop=stop)
    sp.normalize(hf)
    return sp


# --------------------------------------------------------------------------- stop strings


def test_tgi_10_stop_string_inside_a_longer_token_is_seen(hf: Any) -> None:
    """huggingface/text-generation-inference#10: stop sequences compared as token ids missed ";"
    when the model wrote the token "j;" (another id than ";"). Expected: the stop string is
    matched in the decoded text, so the first token whose text holds it ends the request (the
    token ``");\\n"`` here), and no earlier one does (``str.find`` on ``transformers``' decode of
    each prefix is the oracle)."""
    text = "x = foo(j);\nbar"
    ids = encode_plain(hf, text)
    sp = _params([";"], hf)
    first = next(k for k in range(1, len(ids) + 1) if ";" in hf.decode(ids[:k]))
    assert hf.decode(ids[first - 1 : first]) != ";"  # the stop string is part of a longer token
    for k in range(1, first):
        assert check_stop(ids[:k], sp, set(), hf, False) is None
    assert check_stop(ids[:first], sp, set(), hf, False) == {"type": "stop", "matched": ";"}


@pytest.mark.parametrize("no_stop_trim", [False, True])
@pytest.mark.parametrize("per_message", [1, 2, 100])
def test_ollama_7158_text_before_the_stop_in_the_same_token_is_kept(
    fast: Any, hf: Any, per_message: int, no_stop_trim: bool
) -> None:
    """ollama/ollama#7158: when one token held both text to return and the stop sequence, the
    runner assumed cutting the stop consumed whole tokens (and crashed). Expected: the final
    text ends right before the stop string, keeping the part of the last token before it (")"
    of ``");\\n"``) and dropping the part after it (with ``no_stop_trim``: right after the stop
    string, the "\\n" of that token still dropped); the streamed chunks add up to it."""
    text = "x = foo(j);\nbar"
    ids = encode_plain(hf, text)
    first = next(k for k in range(1, len(ids) + 1) if ";" in hf.decode(ids[:k]))
    whole = hf.decode(ids[:first])
    end = whole.find(";") + (1 if no_stop_trim else 0)
    chunks, final = stream_detok(
        fast, ids[:first], {"type": "stop", "matched": ";"}, per_message, no_stop_trim=no_stop_trim
    )
    assert final == whole[:end] == ("x = foo(j);" if no_stop_trim else "x = foo(j)")
    assert "".join(chunks) == final


def test_cactus_199_pieces_of_a_multi_token_stop_string_do_not_stop(hf: Any) -> None:
    """cactus-compute/cactus#199: a stop sequence such as ``<|im_end|>`` was tokenized and each of
    its tokens added to a stop set, so generation halted at the first "<" or "|" anywhere.
    Expected: only the whole stop string ends the request; every shorter prefix of the output
    (oracle: ``str.find`` on ``transformers``' decode) goes on, and ``check_stop`` reports the
    string, not a token id."""
    stop = "<|im_end|>"
    text = "a < b | c, im_end, <|im_end|> tail"
    ids = encode_plain(hf, text)
    assert len(encode_plain(hf, stop)) > 1
    sp = _params([stop], hf)
    hits = [k for k in range(1, len(ids) + 1) if stop in hf.decode(ids[:k])]
    for k in range(1, hits[0]):
        assert check_stop(ids[:k], sp, set(), hf, False) is None, hf.decode(ids[:k])
    assert check_stop(ids[: hits[0]], sp, set(), hf, False) == {"type": "stop", "matched": stop}


@pytest.mark.parametrize("skip", [True, False])
def test_koboldcpp_812_special_token_text_as_a_stop_string(fast: Any, hf: Any, skip: bool) -> None:
    """LostRuins/koboldcpp#812: special tokens given as stop sequences (``<|im_end|>``) were not
    recognised when the model generated them as single special tokens. Expected: a stop string
    that is the text of a DeepSeek-V4 special token (``<｜User｜>``) ends the request when that
    token is generated, and the final text holds nothing of it, whether special tokens are
    skipped or not (oracle: ``transformers``' decode of the ids before it)."""
    user = hf.convert_tokens_to_ids(USER)
    ids = [*encode_plain(hf, "Sure, done."), user, *encode_plain(hf, "next")]
    sp = _params([USER], hf)
    at = ids.index(user) + 1
    assert check_stop(ids[: at - 1], sp, set(), fast, False) is None
    reason = check_stop(ids[:at], sp, set(), fast, False)
    assert reason == {"type": "stop", "matched": USER}
    chunks, final = stream_detok(fast, ids[:at], reason, skip=skip)
    assert final == "".join(chunks) == hf.decode(ids[: at - 1]) == "Sure, done."


# --------------------------------------------------------------------------- special tokens


@pytest.mark.parametrize("spaces", [True, False])
@pytest.mark.parametrize("per_message", [1, 3])
def test_tokenizers_826_added_tokens_keep_the_text_around_them(
    fast: Any, hf: Any, spaces: bool, per_message: int
) -> None:
    """huggingface/tokenizers#826 (also huggingface/transformers#2096): decoded text lost or gained
    whitespace around added tokens ("[ENT]with", "new_token_1new_token_2"). Expected: with
    ``skip_special_tokens`` false the streamed text and the final text are ``transformers``'
    decode of the whole id list, spaces exactly where the words have them, whatever
    ``spaces_between_special_tokens`` says (a ``tokenizers`` decoder places no space around added
    tokens)."""
    user, asst = hf.convert_tokens_to_ids(USER), hf.convert_tokens_to_ids(ASSISTANT)
    ids = [
        *encode_plain(hf, "you are the"),
        user,
        *encode_plain(hf, " with"),
        asst,
        asst,
        *encode_plain(hf, "and 世界"),
        user,
    ]
    chunks, final = stream_detok(
        fast, ids, per_message=per_message, skip=False, spaces_between_special_tokens=spaces
    )
    want = hf.decode(ids, skip_special_tokens=False)
    assert final == "".join(chunks) == want
    assert want == f"you are the{USER} with{ASSISTANT}{ASSISTANT}and 世界{USER}"


def test_transformers_js_1139_skip_special_tokens_is_each_requests_own(fast: Any, hf: Any) -> None:
    """huggingface/transformers.js#1139 (also kserve/kserve#4490, ``<|im_end|>`` in streamed
    output): whether special tokens are skipped is a per-call option of the streamer. Expected:
    two requests decoded in the same scheduler messages, one skipping special tokens and one
    keeping them, each get ``transformers``' decode with their own setting, streamed and final."""
    pad = hf.convert_tokens_to_ids("<｜▁pad▁｜>")
    eos = hf.convert_tokens_to_ids(hf.eos_token)
    ids = [*encode_plain(hf, "Hi 😊"), pad, *encode_plain(hf, " there"), eos]
    dm = DetokenizerManager(fast)
    sent = {"skip": "", "keep": ""}
    final: dict[str, str | None] = {}
    for k in range(1, len(ids) + 1):
        m = BatchTokenIDOut.empty()
        for rid, skip in (("skip", True), ("keep", False)):
            m.append(
                rid=rid,
                finished_reason=finish_length(k) if k == len(ids) else None,
                output_ids=ids[k - 1 : k],
                prompt_tokens=1,
                completion_tokens=k,
                skip_special_tokens=skip,
            )
        out = dm.handle_batch_token_id_out(m)
        for i, rid in enumerate(out.rids):
            sent[rid] += out.output_strs[i]
            final[rid] = out.final_strs[i]
    assert final["skip"] == sent["skip"] == hf.decode(ids, skip_special_tokens=True) == "Hi 😊 there"
    assert final["keep"] == sent["keep"] == hf.decode(ids, skip_special_tokens=False)
    assert sent["keep"] == "Hi 😊<｜▁pad▁｜> there" + hf.eos_token


# --------------------------------------------------------------------------- incremental text


@pytest.mark.parametrize(
    "text", [" Hello world, this is a test.", "def f(x):\n    return x * 2\n", "一二三 四五"]
)
def test_candle_3782_no_text_is_held_back_behind_complete_characters(fast: Any, hf: Any, text: str) -> None:
    """huggingface/candle#3782: an incremental decoder either re-decoded everything or, with an
    alphanumeric heuristic, held text back indefinitely; decoding a sub-sequence can also gain or
    lose a leading space. Expected: after each token the text sent so far is exactly
    ``transformers``' decode of the ids so far (every complete character goes out at once,
    the first token's leading space included)."""
    ids = encode_plain(hf, text)
    for k, sent, _ in feed_each_token(DetokenizerManager(fast), ids):
        want = hf.decode(ids[:k])
        if FFFD not in want:
            assert sent == want, k
    assert sent == text


@pytest.mark.parametrize("per_message", [1, 2, 5])
def test_tokenizers_1666_stream_is_the_whole_decode_without_clean_up(
    fast: Any, hf: Any, per_message: int
) -> None:
    """huggingface/tokenizers#1666: incremental detokenization has to defeat the decode's clean-up
    rules, where whether a space is written depends on the ids around it (" ," -> ","). Expected:
    the streamed chunks add up to ``transformers``' decode of the whole id list, spaces before
    punctuation and apostrophes kept as the tokenizer (no clean-up) writes them."""
    text = "I said: \"hi\". Don't , ok ? It 's fine ."
    ids = encode_plain(hf, text)
    chunks, final = stream_detok(fast, ids, per_message=per_message)
    assert "".join(chunks) == final == hf.decode(ids) == text


def test_tt_inference_server_2586_emoji_after_a_space_streams_without_replacement_characters(
    fast: Any, hf: Any
) -> None:
    """tenstorrent/tt-inference-server#2586 (fixed by its #2594): an emoji whose bytes span
    several tokens, the first of which also holds a space, was streamed as " \\ufffd", "\\ufffd".
    Expected: no chunk holds U+FFFD, and the chunks add up to ``transformers``' decode of the
    whole id list (a skin-toned waving hand: two characters over four tokens)."""
    text = " 👋🏽 hi ☕"
    ids = encode_plain(hf, text)
    assert FFFD in hf.decode(ids[:1])
    chunks, final = stream_detok(fast, ids)
    assert not any(FFFD in c for c in chunks)
    assert "".join(chunks) == final == hf.decode(ids) == text


# --------------------------------------------------------------------------- BOS


def test_drama_llama_93_agent_chat_prompt_with_tool_turns_holds_one_bos(tok: Any, hf: Any) -> None:
    """mdegans/drama_llama#93 (also evalplus/evalplus#207): agents making tool calls got prompts
    starting with two BOS tokens, the template's and the tokenizer's. Expected: the ids the chat
    route sends for a multi-turn conversation with tools, an assistant tool call and its result
    start with the DeepSeek-V4 BOS and hold no other (oracle: ``transformers``' id of BOS and its
    decode of the ids, which holds the BOS text once); ``usage.prompt_tokens`` is their count."""
    tm = FakeTM(tok)
    c = app_client(tm)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": "And Rome?"},
    ]
    out = oai_client(c).chat.completions.create(model="dsv4-test", messages=msgs, tools=tools, max_tokens=1)
    sent = tm.received[-1]
    ids = list(sent.input_ids) if sent.input_ids is not None else encode_plain(hf, sent.text)
    bos = hf.convert_tokens_to_ids(hf.bos_token)
    assert ids[0] == bos and ids.count(bos) == 1
    assert hf.decode(ids).count(B) == 1 and hf.decode(ids).startswith(B)
    assert out.usage is not None and out.usage.prompt_tokens == len(ids)


def test_unsloth_10312_token_id_prompt_keeps_its_bos_and_gets_no_second(tok: Any, hf: Any) -> None:
    """unslothai/unsloth#10312: adding BOS was decided for all prompts at once, so some got two and
    others none; the decision belongs to each prompt. Expected: a ``/v1/completions`` prompt given
    as token ids reaches the engine unchanged -- one that starts with BOS gets no second, one
    without gets none added -- and ``usage.prompt_tokens`` counts exactly those ids."""
    tm = FakeTM(tok)
    c = oai_client(app_client(tm))
    bos = hf.convert_tokens_to_ids(hf.bos_token)
    body = encode_plain(hf, "Once upon a time")
    for prompt in ([bos, *body], body):
        out = c.completions.create(model="dsv4-test", prompt=prompt, max_tokens=1)
        assert list(tm.received[-1].input_ids) == prompt
        assert out.usage is not None and out.usage.prompt_tokens == len(prompt)


# --------------------------------------------------------------------------- engine: stop and context


@pytest.mark.parametrize("stop", ["own fox", "你好，世"])
def test_camelid_731_straddling_stop_never_resends_or_leaks_text(shared_fake_engine: Any, stop: str) -> None:
    """timtoole02/Camelid#731 (also SharpAI/SwiftLM#126, fixed by its #132): a stop string that
    straddles a token boundary was found only after its first part had been streamed, so the
    truncated answer was shorter than what the client held and the whole reply was sent again
    (or the part leaked). Expected: every streamed text is a prefix of the final one, which is
    the fake model's text cut right before the stop string (``str.find`` oracle), equal to the
    unstreamed answer; the finish names the stop string."""
    from server_fixture import FAKE_TEXT, hf_auto_tokenizer

    hf = hf_auto_tokenizer()
    ids = encode_plain(hf, FAKE_TEXT)
    at = next(k for k in range(1, len(ids) + 1) if stop in hf.decode(ids[:k]))
    assert stop not in hf.decode(ids[at - 1 : at])  # it straddles tokens
    sp = {"max_new_tokens": len(ids), "stop": [stop], "temperature": 0}
    outs = list(shared_fake_engine.generate("Tell me", sp, stream=True))
    want = FAKE_TEXT[: FAKE_TEXT.find(stop)]
    final = outs[-1]["text"]
    assert final == want
    for o in outs:
        assert want.startswith(o["text"]), o["text"]
    assert outs[-1]["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert shared_fake_engine.generate("Tell me", sp)["text"] == want


def test_opencowork_82_prompt_plus_max_tokens_equal_to_the_context_fits(shared_fake_engine: Any) -> None:
    """AIDotNet/OpenCowork#82 (also vllm-project/vllm#33418, a misleading message): requests were
    refused one token over the limit, with a message whose counts did not add up. Expected: a
    text prompt of n tokens (``transformers``' count) with ``max_new_tokens = context - n`` is
    served to the full length; one more is refused with a message naming the context length and
    the counts ``n`` and ``context - n + 1`` (vLLM's / OpenAI's wording), and the engine serves
    the next request."""
    from server_fixture import FAKE_CONTEXT_LEN, hf_auto_tokenizer

    hf = hf_auto_tokenizer()
    prompt = "Count the words: " + "apple banana cherry " * 30
    n = len(hf.encode(prompt))
    room = FAKE_CONTEXT_LEN - n
    assert 0 < room < FAKE_CONTEXT_LEN
    out = shared_fake_engine.generate(prompt, {"max_new_tokens": room, "ignore_eos": True})
    assert out["meta_info"]["prompt_tokens"] == n
    with pytest.raises(ValueError) as ei:
        shared_fake_engine.generate(prompt, {"max_new_tokens": room + 1})
    msg = str(ei.value)
    assert f"maximum context length is {FAKE_CONTEXT_LEN} tokens" in msg, msg
    assert f"{FAKE_CONTEXT_LEN + 1} tokens ({n} in the messages, {room + 1} in the completion)" in msg, msg
    assert shared_fake_engine.generate("hi", {"max_new_tokens": 2})["meta_info"]["completion_tokens"] == 2


# --------------------------------------------------------------------------- DeepSeek-V4 encoder


def test_vllm_ascend_dsv4_72_effort_high_renders_as_none_and_modes_pick_the_think_token() -> None:
    """GDzhu01/vllm-ascend-deepseekv4#72: a DeepSeek-V4 chat template did not follow the
    reference encoder: ``reasoning_effort`` "high" and none must render alike (only "max" adds
    its instruction), chat mode ends the generation prompt with ``<｜Assistant｜></think>`` and
    thinking mode with ``<｜Assistant｜><think>``, and ``add_generation_prompt`` false appends no
    assistant turn. Oracle: the reference encoder's outputs in ``fixtures/dsv4_chat_encoding.json``
    and the report's stated strings."""
    import json
    from pathlib import Path

    from sglang_v4.entrypoints.chat_encoding import encode_messages

    cases = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text("utf-8"))
    case = {c["name"]: c for c in cases["cases"]}["thinking_high_effort_no_prefix"]
    msgs = case["messages"]
    for effort in ("high", None):
        assert encode_messages(msgs, thinking=True, reasoning_effort=effort) == case["expected"]
    assert encode_messages(msgs, thinking=True).endswith(f"{USER}q{ASSISTANT}<think>")
    assert encode_messages(msgs, thinking=False).endswith(f"{USER}q{ASSISTANT}</think>")
    maxed = encode_messages(msgs, thinking=True, reasoning_effort="max")
    assert maxed != case["expected"] and maxed.endswith(case["expected"][len(B) :])
    assert encode_messages(msgs, thinking=False, add_generation_prompt=False) == f"{B}{USER}q"
