"""A sixth set of public bug reports of SGLang and vLLM servers, replayed on the session's
servers: thinking mode and the reasoning split (``include_reasoning``, streamed reasoning deltas,
thinking off, reasoning tokens in usage, DeepSeek-V4 tool-loop prompts), the Responses API
(reasoning items, ``function_call_output``, disconnects) and aborts, on the model-free
``plain_fake_server`` / ``held_fake_server``; ``thinking_token_budget`` with tools and over
several turns, the prefix cache (cold and warm runs) and ``truncate_prompt_tokens``, on the
embedded DeepSeek-V4 model's ``more_bugs_server``. Each test names its report.

Reports that showed a fault here: ``include_reasoning: false`` was ignored by ``/v1/responses``,
whose output still held the ``reasoning`` item and whose stream still sent the
``reasoning_text`` events (vllm-project/vllm#56428, the Responses half of
sgl-project/sglang#39103). The Responses request now reads vLLM's field: no reasoning item, no
reasoning events; the reasoning still counts in ``reasoning_tokens`` and stays in the stored
conversation for ``previous_response_id``.

Reports replayed that showed no fault here (the tests keep them so): ``include_reasoning: false``
on chat completions (sgl-project/sglang#39103); reasoning in streamed deltas
(vllm-project/vllm#36632); thinking off streams content, not reasoning
(vllm-project/vllm#40466, vllm-project/vllm#40816); the Responses reasoning item and its token
count (vllm-project/vllm#43395); continuous usage counting reasoning tokens
(sgl-project/sglang#17156); an array ``function_call_output`` (sgl-project/sglang#33867); a
disconnected Responses stream is aborted (sgl-project/sglang#36333, sgl-project/sglang#37833);
``/abort_request`` stops the request (sgl-project/sglang#34113); DeepSeek-V4 tool-loop prompts
keep the loop's reasoning under either field name (vllm-project/vllm#51651,
vllm-project/vllm#33616); reasoning kept beside a forced tool call (vllm-project/vllm#20663); a
thinking budget never lands inside a call's arguments (vllm-project/vllm#44676); a budget over
several turns with ``ignore_eos`` (vllm-project/vllm#43708, vllm-project/vllm#39697); cold and
warm prefix-cache runs agree (vllm-project/vllm#40896); ``truncate_prompt_tokens`` in chat
(vllm-project/vllm#27642) and its ``-1`` (vllm-project/vllm#22635).

Oracles: the fake model's fixed script (its reasoning and answer), the tokenizer (ids, counts,
the ``</think>`` id), DeepSeek's reference encoder (``fixtures/dsv4_chat_encoding.json``), the
``openai`` client's parsers, the same request cold or untruncated, the reports' stated
expectations.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, post, sse, think_end_id
from server_fixture import (
    FAKE_ANSWER,
    FAKE_REASONING,
    FAKE_SCRIPT_TAG,
    FAKE_TEXT,
    ServerHandle,
    hf_auto_tokenizer,
)

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
HELD_MODEL = "dsv4-test"  # held_fake_server's --served-model-name (fake_prompt_tm.MODEL)
HOLD = "[hold]"  # held_fake_server's FAKE_HOLD_ON_TEXT: such a request runs until aborted
SCRIPTED = [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}]
THINKING = {"chat_template_kwargs": {"thinking": True}}
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def _client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=120)


def _fold(chunks: list[dict[str, Any]]) -> tuple[str, str, int, int]:
    """A streamed chat answer as a client joins it: ``(content, reasoning, index of the first
    content chunk, index of the first reasoning chunk)`` (-1 when none)."""
    content, reasoning, first_c, first_r = "", "", -1, -1
    for i, c in enumerate(chunks):
        for ch in c["choices"]:
            d = ch["delta"]
            if d.get("content"):
                content += d["content"]
                first_c = i if first_c < 0 else first_c
            if d.get("reasoning_content"):
                reasoning += d["reasoning_content"]
                first_r = i if first_r < 0 else first_r
    return content, reasoning, first_c, first_r


def _events(server: ServerHandle, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of a streamed ``/v1/responses`` request."""
    r = requests.post(server.url + RESPONSES, json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: ")]


def _n_tokens(text: str) -> int:
    return len(hf_auto_tokenizer().encode(text, add_special_tokens=False))


def _running(server: ServerHandle) -> int:
    return int(requests.get(server.url + "/server_info", timeout=10).json()["num_running_reqs"])


def _wait_idle(server: ServerHandle, timeout_s: float = 15.0) -> None:
    deadline = time.time() + timeout_s
    while _running(server) > 0:
        assert time.time() < deadline, "the request is still running"
        time.sleep(0.05)


# --------------------------------------------------------------------------- include_reasoning


def test_vllm_56428_responses_include_reasoning_false(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#56428 (and the Responses half of sgl-project/sglang#39103):
    ``include_reasoning: false`` stripped the reasoning on chat completions but not on
    ``/v1/responses``. The output is the answer's message alone, streamed and not: no
    ``reasoning`` item and no ``reasoning_text`` event; the ``openai`` client parses the text; the
    reasoning is still generated (its tokens counted as with the field true) and a stored
    response still continues."""
    body = {"model": FAKE_MODEL, "input": SCRIPTED[0]["content"], "reasoning": {"effort": "high"}}
    full = post(plain_fake_server, RESPONSES, body).json()
    assert [o["type"] for o in full["output"]] == ["reasoning", "message"]  # the field's default
    r = _client(plain_fake_server).responses.create(**body, extra_body={"include_reasoning": False})
    assert [o.type for o in r.output] == ["message"] and r.output_text == FAKE_ANSWER
    rt = full["usage"]["output_tokens_details"]["reasoning_tokens"]
    assert r.usage.output_tokens_details.reasoning_tokens == rt > 0
    events = _events(plain_fake_server, {**body, "include_reasoning": False})
    kinds = [e["type"] for e in events]
    assert not [k for k in kinds if "reasoning" in k], kinds
    assert "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta") == FAKE_ANSWER
    final = events[-1]["response"]
    assert kinds[-1] == "response.completed" and [o["type"] for o in final["output"]] == ["message"]
    nxt = post(
        plain_fake_server, RESPONSES, {"model": FAKE_MODEL, "input": "Thanks", "previous_response_id": r.id}
    )
    assert nxt.status_code == 200, nxt.text


def test_sglang_39103_chat_include_reasoning_false(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#39103: ``include_reasoning: false`` (vLLM's field) still returned the
    reasoning. In thinking mode the chat answer has no reasoning under either name, streamed or
    not, and its content is the whole answer (the fake model's script after ``</think>``)."""
    body = {
        "model": FAKE_MODEL,
        "messages": SCRIPTED,
        "max_tokens": 100,
        **THINKING,
        "include_reasoning": False,
    }
    msg = post(plain_fake_server, CHAT, body).json()["choices"][0]["message"]
    assert (
        msg["content"] == FAKE_ANSWER
        and msg.get("reasoning_content") is None
        and msg.get("reasoning") is None
    )
    content, reasoning, _, _ = _fold(sse(plain_fake_server, CHAT, body))
    assert (content, reasoning) == (FAKE_ANSWER, "")


# --------------------------------------------------------------------------- streamed reasoning


def test_vllm_36632_reasoning_in_streamed_deltas(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#36632: the reasoning was missing from a streamed chat answer (present
    without streaming). The ``openai`` client's streamed deltas carry ``reasoning_content``
    before any content; joined they are the non-streamed answer's reasoning, the script's."""
    body = {"model": FAKE_MODEL, "messages": SCRIPTED, "max_tokens": 100, **THINKING}
    msg = post(plain_fake_server, CHAT, body).json()["choices"][0]["message"]
    assert (msg["reasoning_content"], msg["content"]) == (FAKE_REASONING, FAKE_ANSWER)
    stream = _client(plain_fake_server).chat.completions.create(
        model=FAKE_MODEL, messages=SCRIPTED, max_tokens=100, stream=True, extra_body=THINKING
    )
    reasoning, content, order = "", "", []
    for chunk in stream:
        for ch in chunk.choices:
            r = (ch.delta.model_extra or {}).get("reasoning_content")
            if r:
                reasoning += r
                order.append("r")
            if ch.delta.content:
                content += ch.delta.content
                order.append("c")
    assert (reasoning, content) == (FAKE_REASONING, FAKE_ANSWER)
    assert order == sorted(order, reverse=True)  # every reasoning delta before the first content


@pytest.mark.parametrize("switch", [{"thinking": False}, {"enable_thinking": False}])
def test_vllm_40466_40816_thinking_off_streams_content(plain_fake_server: ServerHandle, switch: dict) -> None:
    """vllm-project/vllm#40466, vllm-project/vllm#40816: with thinking turned off
    (``chat_template_kwargs``), the streamed answer went out as ``reasoning`` and left
    ``content`` empty. Off, the fake model's text is all content, streamed and not, and no
    delta carries reasoning."""
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 6,
        "chat_template_kwargs": switch,
    }
    want = hf_auto_tokenizer().decode(hf_auto_tokenizer().encode(FAKE_TEXT, add_special_tokens=False)[:6])
    msg = post(plain_fake_server, CHAT, body).json()["choices"][0]["message"]
    assert msg["content"] == want and msg["reasoning_content"] is None
    content, reasoning, _, first_r = _fold(sse(plain_fake_server, CHAT, body))
    assert (content, reasoning, first_r) == (want, "", -1)


# --------------------------------------------------------------------------- reasoning tokens


def test_vllm_43395_responses_reasoning_item_and_token_count(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#43395: the Responses API gave no reasoning item and
    ``reasoning_tokens: 0`` where chat completions had the reasoning. With ``reasoning.effort``
    the first output item is the reasoning (the script's text) and ``reasoning_tokens`` is its
    token count (the tokenizer's; at most one more for the closing ``</think>``, SGLang's count),
    the same as chat's ``completion_tokens_details``, streamed (the ``openai`` client's final
    response) and not."""
    n = _n_tokens(FAKE_REASONING)
    client = _client(plain_fake_server)
    body = {"model": FAKE_MODEL, "input": SCRIPTED[0]["content"], "reasoning": {"effort": "high"}}
    r = client.responses.create(**body)
    assert r.output[0].type == "reasoning" and r.output[0].content[0].text == FAKE_REASONING
    rt = r.usage.output_tokens_details.reasoning_tokens
    assert n <= rt <= n + 1 and r.output_text == FAKE_ANSWER
    with client.responses.stream(**body) as s:
        final = s.get_final_response()
    assert final.usage.output_tokens_details.reasoning_tokens == rt
    chat = post(plain_fake_server, CHAT, {"model": FAKE_MODEL, "messages": SCRIPTED, **THINKING}).json()
    assert chat["usage"]["completion_tokens_details"]["reasoning_tokens"] == rt


def test_sglang_17156_continuous_usage_counts_reasoning_tokens(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#17156: the streamed usage said ``reasoning_tokens: 0`` while the model
    was reasoning. With continuous usage every chunk's count is within the chunk's completion
    tokens and never goes back; it grows while reasoning and ends at the non-streamed count."""
    body = {"model": FAKE_MODEL, "messages": SCRIPTED, "max_tokens": 100, **THINKING}
    final = post(plain_fake_server, CHAT, body).json()["usage"]["completion_tokens_details"][
        "reasoning_tokens"
    ]
    opts = {"include_usage": True, "continuous_usage_stats": True}
    usages = [c["usage"] for c in sse(plain_fake_server, CHAT, {**body, "stream_options": opts})]
    counts = [(u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0) for u in usages]
    assert counts == sorted(counts) and counts[-1] == final >= _n_tokens(FAKE_REASONING), counts
    assert all(c <= u["completion_tokens"] for c, u in zip(counts, usages, strict=True))
    assert len(set(counts)) > 2  # counted as the reasoning streams, not once at the end


# --------------------------------------------------------------------------- Responses input


def test_sglang_33867_function_call_output_as_an_array(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#33867: a ``function_call_output`` whose ``output`` is an array of
    content parts (OpenAI's other form) was a 400. It is answered, and its parts reach the
    prompt: one part counts as the same text given as a string, a second part adds at least its
    own tokens."""
    call = {"type": "function_call", "call_id": "call_123", "name": "lookup", "arguments": "{}"}
    tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
    first, second = "First result", "Second result, with more words"

    def body(output: Any) -> dict[str, Any]:
        item = {"type": "function_call_output", "call_id": "call_123", "output": output}
        return {
            "model": FAKE_MODEL,
            "input": [{"role": "user", "content": "Run it"}, call, item],
            "tools": tools,
        }

    def parts(*texts: str) -> list[dict[str, str]]:
        return [{"type": "input_text", "text": t} for t in texts]

    r = post(plain_fake_server, RESPONSES, {**body(parts(first, second)), "max_output_tokens": 2})
    assert r.status_code == 200, r.text

    def count(output: Any) -> int:
        got = post(plain_fake_server, RESPONSES + "/input_tokens", body(output))
        assert got.status_code == 200, got.text
        return got.json()["input_tokens"]

    one = count(first)
    assert count(parts(first)) == one
    assert count(parts(first, second)) >= one + _n_tokens(second)


# --------------------------------------------------------------------------- aborts


def test_sglang_36333_37833_disconnected_responses_stream_is_aborted(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#36333, sgl-project/sglang#37833: a streaming client that went away
    left its request decoding to ``max_tokens`` ("ghost" requests). A streamed ``/v1/responses``
    request (held running by the fake model) whose client closes after the first text delta is
    aborted: the server runs no request soon after."""
    _wait_idle(held_fake_server)
    body = {"model": HELD_MODEL, "input": f"{HOLD} write forever", "stream": True}
    r = requests.post(held_fake_server.url + RESPONSES, json=body, stream=True, timeout=60)
    assert r.status_code == 200, r.text
    lines = r.iter_lines()  # kept: dropping the generator closes the connection
    seen = [next(lines)]
    while not (seen[-1].startswith(b"data: ") and b'"response.output_text.delta"' in seen[-1]):
        seen.append(next(lines))
    time.sleep(0.2)
    assert _running(held_fake_server) == 1  # held while the client reads
    r.close()
    _wait_idle(held_fake_server, 30.0)
    del lines


def test_sglang_34113_abort_request_stops_the_request(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#34113: ``POST /abort_request`` answered 200 while the request went on
    running. The held ``/generate`` request it names ends with SGLang's abort finish reason and
    the server runs nothing after it."""
    _wait_idle(held_fake_server)
    rid, out = "sixth-abort-34113", {}

    def run() -> None:
        body = {"text": f"{HOLD} go on", "rid": rid, "sampling_params": {"max_new_tokens": 200}}
        out["r"] = requests.post(held_fake_server.url + "/generate", json=body, timeout=60)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 15
    while _running(held_fake_server) == 0:
        assert time.time() < deadline
        time.sleep(0.05)
    assert (
        requests.post(held_fake_server.url + "/abort_request", json={"rid": rid}, timeout=10).status_code
        == 200
    )
    t.join(30)
    assert out["r"].status_code == 200, out["r"].text
    meta = out["r"].json()["meta_info"]
    assert meta["id"] == rid and meta["finish_reason"]["type"] == "abort", meta
    _wait_idle(held_fake_server)


# --------------------------------------------------------------------------- DeepSeek-V4 prompts

_CASES = json.loads((Path(__file__).parent / "fixtures" / "dsv4_chat_encoding.json").read_text())["cases"]
#: thinking-mode tool loops that end with a generation prompt (a user or tool turn last)
_THINKING_PROMPTS = [
    c
    for c in _CASES
    if c["thinking"]
    and c["messages"][-1]["role"] in ("user", "tool")
    and any(m["role"] == "tool" for m in c["messages"])
]


def _renamed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with vLLM's ``reasoning`` field for ``reasoning_content``."""
    out = []
    for m in messages:
        m = dict(m)
        if "reasoning_content" in m:
            m["reasoning"] = m.pop("reasoning_content")
        out.append(m)
    return out


@pytest.mark.parametrize("case", _THINKING_PROMPTS, ids=[c["name"] for c in _THINKING_PROMPTS])
def test_vllm_51651_33616_thinking_tool_loop_prompts(plain_fake_server: ServerHandle, case: dict) -> None:
    """vllm-project/vllm#51651: in a DeepSeek-V4 tool loop some turns got no reasoning; and
    vllm-project/vllm#33616: renaming ``reasoning_content`` to ``reasoning`` lost the history's
    reasoning in templates reading the old name. In thinking mode the served prompt of each
    turn (``return_prompt_token_ids``) is DeepSeek's reference encoder's, byte for byte: it opens
    ``<think>`` and keeps the tool loop's reasoning, with either field name on the history."""
    want = hf_auto_tokenizer().encode(case["expected"], add_special_tokens=False)
    assert case["expected"].endswith("<｜Assistant｜><think>")
    for messages in (case["messages"], _renamed(case["messages"])):
        body = {
            "model": FAKE_MODEL,
            "messages": messages,
            "max_tokens": 1,
            "return_prompt_token_ids": True,
            **THINKING,
        }
        if case["tools"]:
            body["tools"] = case["tools"]
        if case["reasoning_effort"]:
            body["reasoning_effort"] = case["reasoning_effort"]
        r = post(plain_fake_server, CHAT, body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["prompt_token_ids"] == want


# --------------------------------------------------------------------------- thinking budget (model)

BUDGET = 4
FORCED_CALL = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": WEATHER,
    "tool_choice": "required",
    "temperature": 0,
    "max_tokens": 60,
    "thinking_token_budget": BUDGET,
    "return_token_ids": True,
    **THINKING,
}


@pytest.fixture(scope="module")
def budget_call(more_bugs_server: ServerHandle) -> dict[str, Any]:
    """The greedy answer of :data:`FORCED_CALL`: thinking mode, a forced call, a 4-token budget,
    cut by ``max_tokens`` inside the call's string value."""
    r = post(more_bugs_server, CHAT, FORCED_CALL)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_vllm_20663_reasoning_kept_with_tool_choice_required(budget_call: dict, mtok: Any) -> None:
    """vllm-project/vllm#20663: with thinking on and ``tool_choice: "required"`` the answer's
    ``reasoning_content`` was ``None`` beside the call. It is the reasoning the model wrote:
    the decoded ids before ``</think>`` (the budget's 4 tokens), and the forced call follows."""
    ids, msg = budget_call["response_token_ids"], budget_call["message"]
    assert ids[BUDGET] == think_end_id(mtok)
    assert msg["reasoning_content"] == mtok.decode(ids[:BUDGET]) and msg["reasoning_content"]
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather"]


def test_vllm_44676_budget_never_lands_inside_arguments(budget_call: dict, mtok: Any) -> None:
    """vllm-project/vllm#44676: the thinking budget forced the reasoning end string into the
    middle of a tool call's arguments. The one forced ``</think>`` ends the reasoning before the
    call; no reasoning marker appears after it, the arguments are the schema's JSON object being
    written (``{"city": "...``) and the content holds no markup."""
    ids, msg = budget_call["response_token_ids"], budget_call["message"]
    assert ids.count(think_end_id(mtok)) == 1
    args = msg["tool_calls"][0]["function"]["arguments"]
    assert args.startswith('{"city": "') and "think>" not in args, args
    assert "think>" not in mtok.decode(ids[BUDGET + 1 :])
    assert not (msg["content"] or "").strip()


def test_vllm_43708_39697_budget_over_turns_with_ignore_eos(
    more_bugs_server: ServerHandle, mtok: Any
) -> None:
    """vllm-project/vllm#43708: on a later turn with ``max_completion_tokens`` far above the
    thinking budget and ``ignore_eos``, the budget was not enforced and ``content`` came back
    null; vllm-project/vllm#39697: the forced end string leaked into ``content``. On a third turn
    the reasoning is the budget's tokens, ``</think>`` follows, the rest is content without any
    reasoning marker, streamed and not."""
    budget = 5
    body = {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?", "reasoning_content": "Greet."},
            {"role": "user", "content": "Why is the sky blue?"},
        ],
        "max_completion_tokens": 30,
        "thinking_token_budget": budget,
        "ignore_eos": True,
        "temperature": 0,
        "return_token_ids": True,
        **THINKING,
    }
    choice = post(more_bugs_server, CHAT, body).json()["choices"][0]
    ids, msg = choice["response_token_ids"], choice["message"]
    assert len(ids) == 30 and ids[budget] == think_end_id(mtok)
    pytest.importorskip("deepseek_recipe")
    from deepseek_recipe_testutil import recipe_message

    # DeepSeek's response parser reads the reasoning of the same output (it drops the newlines
    # next to the think tags): the budget's tokens, then the forced ``</think>``
    want = recipe_message({"messages": body["messages"]}, mtok.decode(ids), True, "length")
    assert msg["reasoning_content"] == want["reasoning_content"]
    assert want["reasoning_content"] in mtok.decode(ids[:budget])
    assert msg["content"] and "think>" not in msg["content"]
    content, reasoning, _, _ = _fold(sse(more_bugs_server, CHAT, body))
    assert (content, reasoning) == (msg["content"], msg["reasoning_content"])


# --------------------------------------------------------------------------- prefix cache (model)


def test_vllm_40896_cold_and_warm_prefix_cache_runs_agree(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#40896: with prefix caching the first (cold) greedy run of a prompt
    differed from the later (warm) ones. A fresh prompt's second run hits the cache (whole
    256-token pages) and generates the same ids as its cold run, on ``/v1/completions`` and on
    chat."""
    prompt = "Cold or warm, greedy is greedy (sixth). " + "Pages of the radix tree are shared. " * 40
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": True}
    cold, warm = (post(more_bugs_server, COMPLETIONS, body).json() for _ in range(2))
    assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = warm["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 256 and cached % 256 == 0
    assert warm["choices"][0]["token_ids"] == cold["choices"][0]["token_ids"]
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "chat " + prompt}], "max_tokens": 8}
    chat.update(temperature=0, return_token_ids=True)
    c1, c2 = (post(more_bugs_server, CHAT, chat).json() for _ in range(2))
    assert c2["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256
    assert c2["choices"][0]["response_token_ids"] == c1["choices"][0]["response_token_ids"]


# --------------------------------------------------------------------------- truncate_prompt_tokens


def _prompt_ids(server: ServerHandle, body: dict[str, Any]) -> list[int]:
    r = post(server, CHAT, {**body, "max_tokens": 1, "return_prompt_token_ids": True})
    assert r.status_code == 200, r.text
    ids = r.json()["choices"][0]["prompt_token_ids"]
    assert len(ids) == r.json()["usage"]["prompt_tokens"]
    return ids


def test_vllm_27642_truncate_prompt_tokens_in_chat(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#27642: ``truncate_prompt_tokens`` had no effect on chat, so a
    conversation longer than the context was refused even with a small truncation. The prompt
    kept is the last N tokens of the whole rendered conversation; one longer than the context
    (1024) is answered with an N-token prompt (without the field: a 400)."""
    words = " ".join(f"w{i}" for i in range(150))
    body = {"model": MODEL, "messages": [{"role": "user", "content": words}]}
    whole = _prompt_ids(more_bugs_server, body)
    assert len(whole) > 100
    assert _prompt_ids(more_bugs_server, {**body, "truncate_prompt_tokens": 100}) == whole[-100:]
    long = {"model": MODEL, "messages": [{"role": "user", "content": "word " * 1500}], "max_tokens": 2}
    assert post(more_bugs_server, CHAT, long).status_code == 400
    r = post(more_bugs_server, CHAT, {**long, "truncate_prompt_tokens": 100})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 100, r.text


def test_vllm_22635_truncate_prompt_tokens_minus_one(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#22635: ``truncate_prompt_tokens: -1`` (documented: keep up to the
    model's length) was refused by the validation. It is accepted on chat and completions and,
    for a prompt within the context, keeps the prompt whole."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hello there"}]}
    assert _prompt_ids(more_bugs_server, {**body, "truncate_prompt_tokens": -1}) == _prompt_ids(
        more_bugs_server, body
    )
    comp = {"model": MODEL, "prompt": "Hello there", "max_tokens": 1}
    plain, minus_one = (
        post(more_bugs_server, COMPLETIONS, comp),
        post(more_bugs_server, COMPLETIONS, {**comp, "truncate_prompt_tokens": -1}),
    )
    assert minus_one.status_code == 200, minus_one.text
    assert minus_one.json()["usage"]["prompt_tokens"] == plain.json()["usage"]["prompt_tokens"]
