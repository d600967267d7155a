"""An eighth set of public bug reports of SGLang and vLLM servers, replayed here: the Anthropic
Messages API (a streamed ``thinking`` block's signature, ``message_start`` usage, a null
``stop_sequence``) and the Responses API (array input, reasoning input items, streamed function
calls, ``output_index``, usage) on the in-process routes over :class:`~fake_prompt_tm.PromptTM`;
``/v1/completions`` ``echo`` corners, streamed ``n > 1`` choices and stop strings met in both the
reasoning and the answer on the model-free ``plain_fake_server``; prefix-cache accounting
(``cached_tokens`` cold and warm) on the embedded DeepSeek-V4 model's ``more_bugs_server``; aborts
and ``rid`` handling of ``/generate`` on the ``held_fake_server``. Each test names its report.

None of these reports showed a fault here (the tests keep them so): a streamed thinking block
closed by a ``signature_delta`` (sgl-project/sglang#39752); ``input_tokens`` in
``message_start`` (sgl-project/sglang#20678); ``stop_sequence: null`` present
(vllm-project/vllm#56371); ``input`` as an array of messages (sgl-project/sglang#17853); a
``reasoning`` input item as the assistant's reasoning (vllm-project/vllm#28248); a streamed
function call's ``output_item.done`` and its item in ``response.completed``
(sgl-project/sglang#12653); zero-based ``output_index`` (sgl-project/sglang#12644); Responses
usage counting the input (sgl-project/sglang#10012); ``echo`` with ``return_token_ids``
(vllm-project/vllm#57996) and with token-id prompts (vllm-project/vllm#46219); no
``cached_tokens`` for a cold prompt (vllm-project/vllm#43370) and some for a repeated one
(vllm-project/vllm#16162); streamed ``n > 1`` choices kept apart (sgl-project/sglang#2912); a stop
string in the reasoning and the answer (sgl-project/sglang#33151); an aborted stream ending with
an abort (sgl-project/sglang#19357); ``rid`` lists and a batch's single ``rid``
(sgl-project/sglang#36189); a duplicate running ``rid`` refused (sgl-project/sglang#19035,
sgl-project/sglang#8089).

Oracles: the ``anthropic`` and ``openai`` clients' own types and stream accumulators, the chat
route run on the same fake (the Responses API's prompt must be the chat prompt of the same
conversation), the served model's tokenizer, the same request sent as text or unstreamed, the
fake model's fixed text and script, the reports' stated expectations.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
import requests
from anthropic_testutil import make_clients as make_messages_clients
from anthropic_testutil import post as post_messages
from fake_prompt_tm import ARGS, CALL, MODEL, PromptTM
from openai.types.responses import ResponseFunctionToolCall
from public_bugs_testutil import post, sse
from responses_testutil import WEATHER, streamed_items
from responses_testutil import make_client as make_responses_client
from responses_testutil import post as post_responses
from server_fixture import FAKE_ANSWER, FAKE_REASONING, FAKE_SCRIPT_TAG, ServerHandle
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
USER = {"role": "user", "content": "Weather in Paris?"}


# --------------------------------------------------------------------------- Messages API


def test_sglang_39752_streamed_thinking_block_ends_with_a_signature(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#39752: for a backend without Anthropic's cryptographic signatures, the
    streamed ``thinking`` block started without a ``signature`` and closed without a
    ``signature_delta``; the Anthropic SDK's accumulator then failed on it. Expected: the block
    starts with a ``signature`` field, a ``signature_delta`` closes it, and the client's
    accumulated ``ThinkingBlock`` carries the non-streamed reply's signature."""
    tm = PromptTM(tok, reply="Let me think it over.</think>It is sunny.")
    client, _, tc = make_messages_clients(tm)
    kw: dict[str, Any] = {"messages": [USER], "thinking": {"type": "enabled", "budget_tokens": 1024}}
    body, events = post_messages(tc, kw)
    starts = [e for e in events if e["type"] == "content_block_start"]
    assert starts[0]["content_block"]["type"] == "thinking" and "signature" in starts[0]["content_block"]
    idx = starts[0]["index"]
    mine = [
        e
        for e in events
        if e.get("index") == idx and e["type"] in ("content_block_delta", "content_block_stop")
    ]
    assert mine[-1]["type"] == "content_block_stop"
    assert mine[-2]["type"] == "content_block_delta" and mine[-2]["delta"]["type"] == "signature_delta"
    assert isinstance(mine[-2]["delta"]["signature"], str) and mine[-2]["delta"]["signature"]
    assert body["content"][0]["type"] == "thinking" and body["content"][0]["signature"]
    with client.messages.stream(model=MODEL, max_tokens=100, **kw) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Let me think it over."
    assert final.content[0].signature == body["content"][0]["signature"]
    assert final.content[1].text == "It is sunny."


def test_sglang_20678_message_start_reports_the_input_tokens(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#20678: streamed, ``message_start`` said ``input_tokens: 0`` (the count
    came only in ``message_delta``), which broke Claude Code's context tracking. Expected (the
    Messages streaming reference): ``message_start``'s usage has the prompt's token count, the
    one the non-streamed message and the final ``message_delta`` report."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, _, tc = make_messages_clients(tm)
    body, events = post_messages(tc, {"messages": [USER]})
    n = len(tm.received[0].input_ids)
    start = next(e for e in events if e["type"] == "message_start")
    final = next(e for e in events if e["type"] == "message_delta")
    assert n > 0 and start["message"]["usage"]["input_tokens"] == n == body["usage"]["input_tokens"]
    assert final["usage"].get("input_tokens", n) == n
    assert (
        final["usage"]["output_tokens"]
        == body["usage"]["output_tokens"]
        == len(tok.encode("It is sunny.", add_special_tokens=False))
    )


def test_vllm_56371_stop_sequence_is_null_not_missing(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#56371: the non-streamed ``/v1/messages`` reply left ``stop_sequence``
    out when it was null (serialized with ``exclude_none``). Expected (the Messages API's
    ``Message`` object): ``stop_sequence`` is always present, ``null`` for an ``end_turn``, in
    the reply and in the streamed ``message_delta``."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, _, tc = make_messages_clients(tm)
    body, events = post_messages(tc, {"messages": [USER]})
    assert body["stop_reason"] == "end_turn"
    assert "stop_sequence" in body and body["stop_sequence"] is None
    delta = next(e for e in events if e["type"] == "message_delta")["delta"]
    assert delta["stop_reason"] == "end_turn"
    assert "stop_sequence" in delta and delta["stop_sequence"] is None


# --------------------------------------------------------------------------- Responses API


def test_sglang_17853_responses_input_as_an_array_of_messages(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#17853: ``/v1/responses`` with ``input`` as an array of message objects
    (content a list of ``input_text`` parts, or a plain string without ``type``) failed
    validation, or the model never received the text. Expected: 200, and the prompt the model
    gets is the chat prompt of the same conversation (the chat route on the same fake)."""
    tm = PromptTM(tok)
    client, tc = make_responses_client(tm)
    items = [
        {"role": "system", "content": "Answer briefly."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Weather in"},
                {"type": "input_text", "text": " Paris?"},
            ],
        },
    ]
    body, _ = post_responses(tc, {"input": items, "max_output_tokens": 40})
    got_ids = list(tm.received[0].input_ids)
    assert body["status"] == "completed"
    msgs = [
        {"role": "system", "content": "Answer briefly."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Weather in"}, {"type": "text", "text": " Paris?"}],
        },
    ]
    want = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=40)  # type: ignore[arg-type]
    assert got_ids == list(tm.received[-1].input_ids)
    text = tok.decode(got_ids)
    assert 0 <= text.index("Weather in") < text.index(" Paris?")
    assert body["output"][-1]["content"][0]["text"] == want.choices[0].message.content


def test_vllm_28248_reasoning_input_item_is_the_assistant_reasoning(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#28248: a ``reasoning`` item in ``input`` (the previous turn's output
    sent back) was not parsed. Expected: 200, and the prompt is the chat prompt of the same
    history with the item's ``reasoning_text`` as the assistant turn's ``reasoning_content``."""
    tm = PromptTM(tok)
    client, tc = make_responses_client(tm)
    items = [
        {"role": "user", "content": "What is 6*7?"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "Six sevens are 42."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "42.", "annotations": []}],
        },
        {"role": "user", "content": "And 6*8?"},
    ]
    body, _ = post_responses(tc, {"input": items, "reasoning": {"effort": "high"}})
    assert body["status"] == "completed"
    got_ids = list(tm.received[0].input_ids)
    hist = [
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": "42.", "reasoning_content": "Six sevens are 42."},
        {"role": "user", "content": "And 6*8?"},
    ]
    client.chat.completions.create(
        model=MODEL,
        messages=hist,  # type: ignore[arg-type]
        reasoning_effort="high",
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert got_ids == list(tm.received[-1].input_ids)


def test_sglang_12653_streamed_function_call_item_is_done_and_in_the_completed_output(
    tok: PreTrainedTokenizerFast,
) -> None:
    """sgl-project/sglang#12653: streamed, a function call's ``response.function_call_arguments
    .done`` went straight to ``response.completed`` (no ``response.output_item.done``), and the
    completed response's ``output`` held an empty message instead of the ``function_call`` item.
    Expected (OpenAI's event order): arguments done, then that item's ``output_item.done``,
    before ``response.completed``, whose ``output`` has the ``function_call`` with its
    ``call_id``, name and arguments, as the non-streamed response."""
    tm = PromptTM(tok, reply="Checking." + CALL)
    _, tc = make_responses_client(tm)
    body, events = post_responses(tc, {"input": "Weather in Paris?", "tools": [WEATHER]})
    kinds = [e["type"] for e in events]
    args_done = kinds.index("response.function_call_arguments.done")
    out_idx = events[args_done]["output_index"]
    item_done = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.done" and e["output_index"] == out_idx
    )
    assert args_done < item_done < kinds.index("response.completed")
    done_item = ResponseFunctionToolCall.model_validate(events[item_done]["item"])
    assert done_item.name == "get_weather" and done_item.call_id and done_item.status == "completed"
    completed = events[kinds.index("response.completed")]["response"]
    calls = [o for o in completed["output"] if o["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["call_id"] == done_item.call_id
    assert json.loads(calls[0]["arguments"]) == ARGS
    want = [o for o in body["output"] if o["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in want] == [("get_weather", ARGS)]
    assert [o["type"] for o in completed["output"]] == [o["type"] for o in body["output"]]


def test_sglang_12644_streamed_output_index_counts_from_zero(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#12644: the streamed ``response.output_item.added`` events numbered
    the output items from 1. Expected (the Responses API reference): ``output_index`` is the
    item's zero-based position in ``output``: 0, 1, ... in order, each item's events carrying
    its own index, and the items as rebuilt from the stream are the non-streamed ``output``."""
    tm = PromptTM(tok, reply="Weighing it.</think>Checking." + CALL)
    _, tc = make_responses_client(tm)
    body, events = post_responses(
        tc, {"input": "Weather in Paris?", "tools": [WEATHER], "reasoning": {"effort": "high"}}
    )
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == list(range(len(body["output"]))) and added[0] == 0
    items = streamed_items(events)
    assert (
        [i["type"] for i in items]
        == [o["type"] for o in body["output"]]
        == ["reasoning", "message", "function_call"]
    )


def test_sglang_10012_responses_usage_counts_the_input(tok: PreTrainedTokenizerFast) -> None:
    """sgl-project/sglang#10012: ``/v1/responses`` returned no ``input_tokens`` (so
    ``total_tokens`` equalled the output count), streamed or not. Expected (OpenAI's
    ``ResponseUsage``): ``input_tokens`` the prompt's token count, ``output_tokens`` the reply's,
    ``total_tokens`` their sum, the same in ``response.completed``."""
    tm = PromptTM(tok, reply="It is sunny in Paris.")
    _, tc = make_responses_client(tm)
    body, events = post_responses(tc, {"input": "Weather in Paris?"})
    n_in = len(tm.received[0].input_ids)
    n_out = len(tok.encode("It is sunny in Paris.", add_special_tokens=False))
    for usage in (
        body["usage"],
        next(e for e in events if e["type"] == "response.completed")["response"]["usage"],
    ):
        assert (usage["input_tokens"], usage["output_tokens"]) == (n_in, n_out), usage
        assert usage["total_tokens"] == n_in + n_out


# --------------------------------------------------------------------------- completions: echo


def test_vllm_57996_echo_survives_return_token_ids(plain_fake_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#57996: ``echo: true`` with ``return_token_ids: true`` silently dropped
    the prompt from ``text``. Expected (OpenAI's ``echo``): the text is the prompt then the
    completion, whatever ``return_token_ids`` says, streamed or not; the returned completion
    ids decode to the completion."""
    prompt = "The capital of France is"
    base = {"model": FAKE_MODEL, "prompt": prompt, "max_tokens": 6, "echo": True}
    plain = post(plain_fake_server, COMPLETIONS, base).json()["choices"][0]
    withids = post(plain_fake_server, COMPLETIONS, {**base, "return_token_ids": True}).json()["choices"][0]
    assert plain["text"].startswith(prompt) and withids["text"] == plain["text"]
    assert mtok.decode(withids["token_ids"]) == plain["text"][len(prompt) :]
    chunks = sse(plain_fake_server, COMPLETIONS, {**base, "return_token_ids": True})
    assert "".join(c["text"] for k in chunks for c in k["choices"]) == plain["text"]


def test_vllm_46219_echo_of_token_id_prompts(plain_fake_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#46219: ``echo`` with a prompt given as token ids (one list, or a list
    of lists) was refused. Expected: accepted, the model gets those ids, and each choice's text
    is the decoded prompt then its completion, as for the same prompt sent as text."""
    texts = ["hello world", "Bye now"]
    ids = [mtok.encode(t, add_special_tokens=False) for t in texts]
    base = {"model": FAKE_MODEL, "max_tokens": 4, "echo": True}
    by_text = post(plain_fake_server, COMPLETIONS, {**base, "prompt": texts}).json()
    r = post(plain_fake_server, COMPLETIONS, {**base, "prompt": ids})
    assert r.status_code == 200, r.text
    got = sorted(r.json()["choices"], key=lambda c: c["index"])
    want = sorted(by_text["choices"], key=lambda c: c["index"])
    assert [c["text"] for c in got] == [c["text"] for c in want]
    assert all(c["text"].startswith(mtok.decode(i)) for c, i in zip(got, ids, strict=True))
    assert r.json()["usage"]["prompt_tokens"] == sum(len(i) for i in ids)
    one = post(plain_fake_server, COMPLETIONS, {**base, "prompt": ids[0]}).json()["choices"][0]
    assert one["text"] == want[0]["text"]


# --------------------------------------------------------------------------- usage: prefix cache


def _completion_usage(server: ServerHandle, prompt: str) -> dict[str, Any]:
    r = post(server, COMPLETIONS, {"model": "default", "prompt": prompt, "max_tokens": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def test_vllm_43370_cold_prompt_reports_no_cached_tokens(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#43370: ``prompt_tokens_details.cached_tokens`` said ``prompt_tokens -
    1`` even for a cold request whose prompt no earlier request shared. Expected (OpenAI's
    meaning of the field): 0 for a prompt that meets an empty prefix cache."""
    assert post(more_bugs_server, "/flush_cache", {}).status_code == 200
    usage = _completion_usage(more_bugs_server, f"Cold prompt {uuid.uuid4().hex} about rivers.")
    assert usage["prompt_tokens"] > 1
    assert (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0) == 0, usage


def test_vllm_16162_repeated_prompt_reports_cached_tokens(more_bugs_server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#16162: with prefix caching and token details on, the second of two
    identical requests still had no ``prompt_tokens_details`` (V0 said ``cached_tokens: 16``).
    Expected: the repeat of a prompt longer than one KV page (256 tokens) reports
    ``0 < cached_tokens < prompt_tokens`` (the last prompt token is always computed, for the
    first output's logits)."""
    prompt = f"Warm prompt {uuid.uuid4().hex}: " + "the river runs to the sea and back again, " * 45
    first = _completion_usage(more_bugs_server, prompt)
    second = _completion_usage(more_bugs_server, prompt)
    n = len(mtok.encode(prompt))
    assert first["prompt_tokens"] == second["prompt_tokens"] == n and n > 256
    cached = (second.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    assert 0 < cached < n, second


# --------------------------------------------------------------------------- streamed choices, stops


def test_sglang_2912_streamed_n_choices_each_keep_their_index(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#2912: a streamed chat request with ``n > 1`` put every choice's
    tokens into ``choices[0]``, the streams mixed. Expected: chunks carry indices ``0 .. n-1``,
    each index folds to its own choice's text (the non-streamed reply's choice of that index;
    the fake model writes the same text for each) and ends with one ``finish_reason``."""
    body = {"model": FAKE_MODEL, "messages": [USER], "max_tokens": 8, "n": 3}
    whole = post(plain_fake_server, CHAT, body).json()["choices"]
    chunks = sse(plain_fake_server, CHAT, body)
    texts: dict[int, str] = {}
    finishes: dict[int, list[str]] = {}
    for k in chunks:
        for c in k["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + (c["delta"].get("content") or "")
            if c.get("finish_reason"):
                finishes.setdefault(c["index"], []).append(c["finish_reason"])
    assert sorted(texts) == [0, 1, 2]
    assert [texts[i] for i in range(3)] == [
        c["message"]["content"] for c in sorted(whole, key=lambda c: c["index"])
    ]
    assert finishes == {i: ["length"] for i in range(3)}


def test_sglang_33151_stop_string_in_reasoning_and_answer(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#33151: with thinking on, a stop string that also appears in the
    reasoning was trimmed at its first occurrence (inside the reasoning), so the answer was
    lost. Expected: the stop ends the answer at its occurrence in the answer, the reasoning
    whole; streamed as unstreamed."""
    stop = "Stop"
    assert stop in FAKE_REASONING and stop in FAKE_ANSWER
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}],
        "max_tokens": 100,
        "stop": [stop],
        "chat_template_kwargs": {"thinking": True},
    }
    choice = post(plain_fake_server, CHAT, body).json()["choices"][0]
    assert choice["message"]["reasoning_content"] == FAKE_REASONING
    assert choice["message"]["content"] == FAKE_ANSWER[: FAKE_ANSWER.index(stop)]
    assert choice["finish_reason"] == "stop"
    chunks = sse(plain_fake_server, CHAT, body)
    deltas = [c["delta"] for k in chunks for c in k["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == FAKE_REASONING
    assert "".join(d.get("content") or "" for d in deltas) == FAKE_ANSWER[: FAKE_ANSWER.index(stop)]


# --------------------------------------------------------------------------- abort


def _start_held_stream(server: ServerHandle, rid: str, text: str) -> tuple[threading.Thread, list[str]]:
    """Stream ``/generate`` of a held (never-ending until aborted) request ``rid`` in a thread;
    returns the thread and the list its ``data:`` lines go into, once the first one arrived."""
    body = {"text": text, "rid": rid, "stream": True, "sampling_params": {"max_new_tokens": 50}}
    chunks: list[str] = []

    def read() -> None:
        with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
            chunks.extend(line.decode() for line in r.iter_lines() if line.startswith(b"data: {"))

    t = threading.Thread(target=read)
    t.start()
    deadline = time.time() + 30
    while not chunks and time.time() < deadline:
        time.sleep(0.05)
    assert chunks, "the held request never streamed its first token"
    return t, chunks


def test_sglang_19357_aborted_stream_ends_with_an_abort(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#19357: a streamed request aborted on the server's side ended without
    telling the client (no abort in its last chunk, or the stream hung). Expected: after
    ``/abort_request`` with its ``rid`` (an abort the client did not cause by disconnecting) the
    stream ends promptly, its last chunk's ``finish_reason`` an ``abort``, and ``/generate``
    serves a new request normally."""
    rid = f"held-{uuid.uuid4().hex}"
    t, chunks = _start_held_stream(held_fake_server, rid, "[hold] Tell me a story")
    assert post(held_fake_server, "/abort_request", {"rid": rid}).status_code == 200
    t.join(timeout=30)
    assert not t.is_alive(), "the aborted stream did not end"
    last = json.loads(chunks[-1][6:])
    assert last["meta_info"]["finish_reason"]["type"] == "abort", last
    r = post(held_fake_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 3}})
    assert r.status_code == 200 and r.json()["meta_info"]["finish_reason"]["type"] == "length"


def test_sglang_36189_rid_shapes_of_single_and_batch_requests(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#36189: ``/generate`` of one prompt with a list of ``rid`` reached the
    request table as an unhashable key (a 500), and a batch with one string ``rid`` was refused.
    Expected: the first is a 400 naming ``rid``; the second runs, each prompt under
    ``<rid>_<i>`` (SGLang's expansion of a single rid over a batch)."""
    r = post(
        held_fake_server,
        "/generate",
        {"text": "Hi", "rid": ["a", "b"], "sampling_params": {"max_new_tokens": 2}},
    )
    assert r.status_code == 400 and "rid" in r.text, r.text
    base = uuid.uuid4().hex
    r = post(
        held_fake_server,
        "/generate",
        {"text": ["Hi", "Bye"], "rid": base, "sampling_params": {"max_new_tokens": 2}},
    )
    assert r.status_code == 200, r.text
    assert [o["meta_info"]["id"] for o in r.json()] == [f"{base}_0", f"{base}_1"]


def test_sglang_19035_duplicate_running_rid_is_refused(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#19035 (sgl-project/sglang#8089): a request reusing the ``rid`` of one
    still running hung, or crashed the detokenizer. Expected: the duplicate is refused with a
    400 naming the rid, the running request is unaffected (it still streams and ends when
    aborted), and the rid is free again once it has finished."""
    rid = f"dup-{uuid.uuid4().hex}"
    t, chunks = _start_held_stream(held_fake_server, rid, "[hold] A long tale")
    dup = post(
        held_fake_server, "/generate", {"text": "Hi", "rid": rid, "sampling_params": {"max_new_tokens": 2}}
    )
    assert dup.status_code == 400 and rid in dup.text, dup.text
    assert t.is_alive()
    assert post(held_fake_server, "/abort_request", {"rid": rid}).status_code == 200
    t.join(timeout=30)
    assert not t.is_alive() and json.loads(chunks[-1][6:])["meta_info"]["finish_reason"]["type"] == "abort"
    again = post(
        held_fake_server, "/generate", {"text": "Hi", "rid": rid, "sampling_params": {"max_new_tokens": 2}}
    )
    assert again.status_code == 200, again.text
