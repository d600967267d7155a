"""A tenth set of public bug reports of SGLang and vLLM servers, replayed here: the Anthropic
Messages API (more than four ``stop_sequences``, a ``tool_result`` holding a ``tool_reference``,
an assistant turn of ``tool_use`` blocks only) on the in-process routes over
:class:`~fake_prompt_tm.PromptTM`; the OpenAI surface on the model-free ``plain_fake_server``
(``continuous_usage_stats``, ``echo`` with ``logprobs``, the chat ``logprobs`` schema, sampling
values out of range, a stop string's held-back prefix right before ``</think>``); the native
``/generate`` parser on the ``held_fake_server`` (null and missing sampling parameters, a
fractional ``top_k``); the embedded DeepSeek-V4 model's ``more_bugs_server`` (prompt logprobs on a
prefix-cache hit, greedy ``top_logprobs`` per position, seeded ``n > 1`` samples); and the
in-process scheduler (priority preemption of ``n > 1`` siblings, one request outgrowing the KV
pool, ``--max-running-requests`` checked and honoured). Each test names its report.

One report showed a fault here: a ``tool_result`` whose content held a ``tool_reference`` item
(vllm-project/vllm#52489) was refused with a 400 ("takes text blocks only"), which breaks an
agent's client-side tool search; such items are now accepted and add no text (every tool of
``tools`` is in the prompt already). The other reports are kept as regression tests.

Oracles: the ``anthropic`` and ``openai`` clients' own types, the chat route run on the same fake
(a Messages conversation must render the chat prompt of the same conversation), the non-streamed
answer's usage, a cold run after ``/flush_cache`` (the same prompt's logprobs without a cache
hit), the definition of greedy decoding (the chosen token is the top-1 alternative), each
request's cold greedy run alone, and the reports' stated expectations.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from anthropic_testutil import WEATHER
from anthropic_testutil import make_clients as make_messages_clients
from anthropic_testutil import post as post_messages
from dsv4_testutil import random_ids
from fake_prompt_tm import MODEL, PromptTM
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from public_bugs_testutil import post, sse
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, run_one, submit
from server_fixture import FAKE_ANSWER, FAKE_REASONING, FAKE_SCRIPT_TAG, ServerHandle
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_check import check_server_args
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
USER = {"role": "user", "content": "Weather in Paris?"}


# --------------------------------------------------------------------------- Messages API


def test_vllm_51997_five_stop_sequences_are_no_server_error(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#51997: ``/v1/messages`` with five ``stop_sequences`` passed the
    Messages validation, then failed converting to a chat request (at most 4 ``stop``) with a
    500. Expected: never a 500 -- the Messages API sets no such bound, so the request runs with
    all five as stop strings (the engine receives them), streamed or not."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, _, tc = make_messages_clients(tm)
    stops = ["s1", "s2", "s3", "s4", "s5"]
    body, _ = post_messages(tc, {"messages": [USER], "stop_sequences": stops})
    assert body["stop_reason"] == "end_turn"
    for obj in tm.received:
        assert list(obj.sampling_params["stop"]) == stops


def test_vllm_52489_tool_result_with_a_tool_reference_item(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#52489: a ``tool_result`` whose content list holds a ``tool_reference``
    item (what Anthropic's tool search returns) crashed ``/v1/messages`` with "Unexpected item
    type in content". Expected: no crash; the item names a tool, not text for the model, so the
    prompt is the one of the same result without it (the result's text parts kept); a
    ``tool_reference`` without ``tool_name`` is a 400 naming it."""
    tm = PromptTM(tok, reply="Done.")
    _, _, tc = make_messages_clients(tm)
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}

    def convo(content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "tools": [WEATHER],
            "messages": [
                USER,
                {"role": "assistant", "content": [use]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}],
                },
            ],
        }

    text = {"type": "text", "text": "18 degrees and sunny"}
    post_messages(tc, convo([{"type": "tool_reference", "tool_name": "get_weather"}, text]))
    with_ref = list(tm.received[0].input_ids)
    post_messages(tc, convo([text]))
    assert with_ref == list(tm.received[-1].input_ids)
    assert "18 degrees and sunny" in tok.decode(with_ref)
    bad = tc.post(
        "/v1/messages",
        json={"model": MODEL, "max_tokens": 10, **convo([{"type": "tool_reference"}, text])},
    )
    assert bad.status_code == 400 and "tool_name" in bad.json()["error"]["message"], bad.text


def test_vllm_38785_assistant_turn_of_tool_use_blocks_only(tok: PreTrainedTokenizerFast) -> None:
    """vllm-project/vllm#38785: an assistant turn made of ``tool_use`` blocks only (no text)
    became a chat message without ``content``, and rendering it failed (``KeyError:
    'content'``). Expected: 200, and the prompt is the chat prompt of the same conversation
    (assistant ``content: null`` with the call in ``tool_calls``, then the ``tool`` message)."""
    tm = PromptTM(tok, reply="It is sunny.")
    _, oa, tc = make_messages_clients(tm)
    use = {"type": "tool_use", "id": "toolu_7", "name": "get_weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_7", "content": "18 degrees"}
    body, _ = post_messages(
        tc,
        {
            "tools": [WEATHER],
            "messages": [
                USER,
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ],
        },
    )
    assert body["content"][0]["text"] == "It is sunny."
    got = list(tm.received[0].input_ids)
    call = {
        "id": "toolu_7",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    oa.chat.completions.create(
        model=MODEL,
        messages=[  # type: ignore[list-item]
            USER,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "toolu_7", "content": "18 degrees"},
        ],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": WEATHER["description"],
                    "parameters": WEATHER["input_schema"],
                },
            }
        ],  # type: ignore[list-item]
    )
    assert got == list(tm.received[-1].input_ids)


# --------------------------------------------------------------------------- OpenAI surface


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_sglang_12241_continuous_usage_stats(plain_fake_server: ServerHandle, path: str) -> None:
    """sgl-project/sglang#12241 (vllm-project/vllm#5708): ``stream_options.continuous_usage_stats``
    was ignored -- usage came only in the final chunk. Expected (vLLM's field): with
    ``include_usage`` too, every chunk carries the running usage (the prompt's count, the tokens
    so far, their sum; never decreasing), and the final usage chunk is the non-streamed
    answer's; without ``continuous_usage_stats`` only that final chunk has usage."""
    base: dict[str, Any] = {"model": FAKE_MODEL, "max_tokens": 6}
    base |= {"messages": [USER]} if path == CHAT else {"prompt": "The weather in Paris is"}
    whole = post(plain_fake_server, path, base).json()["usage"]
    chunks = sse(
        plain_fake_server,
        path,
        {**base, "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    )
    assert (
        chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == whole["completion_tokens"]
    )
    assert chunks[-1]["usage"]["prompt_tokens"] == whole["prompt_tokens"]
    seen = -1
    for k in chunks[:-1]:
        u = k.get("usage")
        assert u is not None, k
        assert u["prompt_tokens"] == whole["prompt_tokens"]
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        assert seen <= u["completion_tokens"] <= whole["completion_tokens"]
        seen = u["completion_tokens"]
    assert seen == whole["completion_tokens"]
    plain = sse(plain_fake_server, path, {**base, "stream_options": {"include_usage": True}})
    assert [k.get("usage") is not None for k in plain] == [False] * (len(plain) - 1) + [True]


def test_sglang_29001_echo_with_logprobs_scores_the_prompt(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#29001: ``/v1/completions`` with ``echo`` and ``logprobs`` warned that
    the two were incompatible (use ``/generate``). Expected (OpenAI's legacy completions):
    ``logprobs`` covers the prompt then the completion -- one entry per token, the first
    ``null`` (nothing precedes it; OpenAI's own answers have it, though the ``openai`` client's
    strict type would refuse it, so the raw JSON is checked), the tokens' texts joined are the
    echoed ``text``, the prompt's tokens the prompt."""
    prompt = "The capital of France is"
    r = post(
        plain_fake_server,
        COMPLETIONS,
        {"model": FAKE_MODEL, "prompt": prompt, "max_tokens": 3, "echo": True, "logprobs": 1},
    )
    assert r.status_code == 200, r.text
    choice, usage = r.json()["choices"][0], r.json()["usage"]
    lp = choice["logprobs"]
    n = usage["prompt_tokens"] + usage["completion_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n
    assert lp["token_logprobs"][0] is None and all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert "".join(lp["tokens"]) == choice["text"] and choice["text"].startswith(prompt)
    assert "".join(lp["tokens"][: usage["prompt_tokens"]]) == prompt


def test_vllm_3179_chat_logprobs_use_the_chat_schema(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#3179: chat completions returned ``logprobs`` in the legacy completions
    shape (``tokens``, ``token_logprobs``, ``text_offset``) with ``content: null``. Expected
    (OpenAI's chat ``ChoiceLogprobs``): ``content`` is a list of one entry per completion token
    with ``token``, ``logprob``, ``bytes`` (the token's UTF-8) and ``top_logprobs`` of the asked
    size; none of the legacy keys; streamed, the entries fold to the same list."""
    body = {"model": FAKE_MODEL, "messages": [USER], "max_tokens": 5, "logprobs": True, "top_logprobs": 2}
    raw = post(plain_fake_server, CHAT, body).json()
    for key in ("tokens", "token_logprobs", "text_offset", "top_logprobs"):
        assert key not in raw["choices"][0]["logprobs"], raw["choices"][0]["logprobs"]
    c = ChatCompletion.model_validate(raw)
    content = c.choices[0].logprobs.content if c.choices[0].logprobs else None
    assert content is not None and c.usage is not None and len(content) == c.usage.completion_tokens
    for e in content:
        assert e.bytes == list(e.token.encode()) and len(e.top_logprobs) == 2
    assert "".join(e.token for e in content) == c.choices[0].message.content
    streamed = [
        e
        for k in sse(plain_fake_server, CHAT, body)
        for ch in ChatCompletionChunk.model_validate(k).choices
        for e in ((ch.logprobs.content or []) if ch.logprobs else [])
    ]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]


@pytest.mark.parametrize(
    ("field", "value"),
    [("top_p", 0.0), ("min_p", 2.0), ("frequency_penalty", 100.0), ("presence_penalty", -3.0)],
)
def test_vllm_47494_out_of_range_sampling_is_a_400(
    plain_fake_server: ServerHandle, field: str, value: float
) -> None:
    """vllm-project/vllm#47494: ``/v1/completions`` forwarded sampling values out of range
    (``top_p=0``, ``min_p=2``, ``frequency_penalty=100``) to the engine, which failed on them.
    Expected (the OpenAI reference's ranges: ``top_p`` in (0, 1], penalties in [-2, 2]; vLLM's
    ``min_p`` in [0, 1]): a 400 naming the field, on both routes, and the server serves the
    next request."""
    for path, extra in ((COMPLETIONS, {"prompt": "Hi"}), (CHAT, {"messages": [USER]})):
        r = post(plain_fake_server, path, {"model": FAKE_MODEL, "max_tokens": 2, field: value, **extra})
        assert r.status_code == 400 and field in r.json()["error"]["message"], (path, r.text)
    ok = post(plain_fake_server, COMPLETIONS, {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 2})
    assert ok.status_code == 200, ok.text


def test_vllm_51641_stop_prefix_before_the_think_end_keeps_the_reasoning(
    plain_fake_server: ServerHandle,
) -> None:
    """vllm-project/vllm#51641: streamed with a ``stop`` list, text held back because it could
    begin a stop string (``42.`` of ``"42. x"``) right before ``</think>`` desynchronized the
    text from the token ids, so the reasoning's tail and ``</think>`` leaked into ``content``.
    Expected: a stop string that never matches changes nothing -- the streamed reasoning and
    answer are the script's, as without ``stop``, and as the non-streamed reply."""
    stop = "42. x"
    assert FAKE_REASONING.endswith("42.") and stop not in FAKE_REASONING + FAKE_ANSWER
    body = {
        "model": FAKE_MODEL,
        "messages": [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}],
        "max_tokens": 100,
        "stop": [stop],
        "chat_template_kwargs": {"thinking": True},
    }
    msg = post(plain_fake_server, CHAT, body).json()["choices"][0]["message"]
    assert (msg["reasoning_content"], msg["content"]) == (FAKE_REASONING, FAKE_ANSWER)
    deltas = [c["delta"] for k in sse(plain_fake_server, CHAT, body) for c in k["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == FAKE_REASONING
    assert "".join(d.get("content") or "" for d in deltas) == FAKE_ANSWER


# --------------------------------------------------------------------------- native /generate


def test_sglang_23401_null_sampling_params_take_their_defaults(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#23401: ``/generate`` with a sampling parameter set to ``null``
    (``{"top_p": null}``) crashed in the parameters' check (``'<' not supported between float and
    NoneType``). Expected: a null value is the parameter's default -- the answer is the one of
    the same request without those keys."""
    base = {"text": "Hello there", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    want = post(held_fake_server, "/generate", base)
    assert want.status_code == 200, want.text
    nulls = {"top_p": None, "top_k": None, "min_p": None, "frequency_penalty": None, "stop": None}
    r = post(held_fake_server, "/generate", {**base, "sampling_params": {**base["sampling_params"], **nulls}})
    assert r.status_code == 200, r.text
    assert r.json()["output_ids"] == want.json()["output_ids"]


def test_sglang_734_generate_without_sampling_params(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#734: ``/generate`` with no ``sampling_params`` key (or ``null``)
    failed with ``'NoneType' object has no attribute 'get'``. Expected: the same as
    ``"sampling_params": {}`` (SGLang's defaults)."""
    want = post(held_fake_server, "/generate", {"text": "hello,", "sampling_params": {}})
    assert want.status_code == 200, want.text
    for body in ({"text": "hello,"}, {"text": "hello,", "sampling_params": None}):
        r = post(held_fake_server, "/generate", body)
        assert r.status_code == 200, r.text
        assert r.json()["output_ids"] == want.json()["output_ids"]


@pytest.mark.parametrize("value", [0.5, "5", True])
def test_vllm_7203_non_integer_top_k_is_refused(held_fake_server: ServerHandle, value: Any) -> None:
    """vllm-project/vllm#7203: ``top_k=0.5`` (meant as ``top_p``) reached the sampler and failed
    there with an index-out-of-bounds assertion. Expected: the parameters' check refuses a
    ``top_k`` that is not an integer with a 400 naming ``top_k``; the server serves the next
    request."""
    r = post(
        held_fake_server,
        "/generate",
        {"text": "Hi", "sampling_params": {"max_new_tokens": 2, "top_k": value}},
    )
    assert r.status_code == 400 and "top_k" in r.text, r.text
    ok = post(
        held_fake_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 2, "top_k": 5}}
    )
    assert ok.status_code == 200, ok.text


# --------------------------------------------------------------------------- real model: logprobs


def test_vllm_5890_echo_logprobs_on_a_prefix_cache_hit(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#5890: ``echo`` with ``logprobs`` crashed the server once the prompt's
    prefix was cached (the cached tokens had no logits). Expected: the repeat of a prompt longer
    than one KV page answers like the cold request -- a logprob for every prompt token but the
    first, the same values (within float tolerance) and tokens."""
    prompt = f"Echo {uuid.uuid4().hex}: " + "the river runs to the sea and back again, " * 45
    body = {
        "model": "default",
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "echo": True,
        "logprobs": 1,
    }
    assert post(more_bugs_server, "/flush_cache", {}).status_code == 200
    cold = post(more_bugs_server, COMPLETIONS, body)
    warm = post(more_bugs_server, COMPLETIONS, body)
    assert cold.status_code == warm.status_code == 200, (cold.text, warm.text)
    a, b = cold.json()["choices"][0]["logprobs"], warm.json()["choices"][0]["logprobs"]
    n = cold.json()["usage"]["prompt_tokens"]
    assert n > 256 and len(a["token_logprobs"]) == len(b["token_logprobs"]) == n + 1
    assert a["tokens"] == b["tokens"]
    assert a["token_logprobs"][0] is None and b["token_logprobs"][0] is None
    for x, y in zip(a["token_logprobs"][1:], b["token_logprobs"][1:], strict=True):
        assert math.isclose(x, y, abs_tol=2e-2), (x, y)


def test_sglang_2088_top_logprobs_belong_to_their_own_position(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#2088: every entry of a chat answer's ``logprobs.content`` carried the
    first position's ``top_logprobs``. Expected: each position's alternatives are its own step's
    -- under greedy decoding the chosen token is that step's top-1 alternative with the same
    logprob, the alternatives sorted best first."""
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Name three rivers."}],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 3,
        "ignore_eos": True,
    }
    c = ChatCompletion.model_validate(post(more_bugs_server, CHAT, body).json())
    content = c.choices[0].logprobs.content if c.choices[0].logprobs else None
    assert content is not None and len(content) == 8
    for e in content:
        assert len(e.top_logprobs) == 3
        assert e.top_logprobs[0].token == e.token and math.isclose(
            e.top_logprobs[0].logprob, e.logprob, abs_tol=1e-4
        )
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True)
    assert len({tuple(t.token for t in e.top_logprobs) for e in content}) > 1


# --------------------------------------------------------------------------- scheduler: priority


def test_vllm_29747_priority_scheduling_with_n_siblings(sched_model_dir: str) -> None:
    """vllm-project/vllm#29747: with priority scheduling, a request with ``n > 1`` (siblings
    sharing one prompt) crashed the engine when a preemption touched them. Expected: three
    siblings of one prompt at priority 0 on a server of one running slot, then a request of
    priority 20 that preempts the running sibling -- no error, every request ends with its cold
    greedy run's tokens, the high-priority one first, and nothing leaks."""
    roomy = make_scheduler(sched_model_dir, max_total_tokens=32 * PAGE)
    shared, high = random_ids(300, 61), random_ids(90, 62)
    want = {"shared": run_one(roomy, "c0", shared, 12)["ids"]}
    roomy.flush_cache()
    want["high"] = run_one(roomy, "c1", high, 4)["ids"]
    s = make_scheduler(
        sched_model_dir, max_running_requests=1, enable_priority_scheduling=True, chunked_prefill_size=PAGE
    )
    for i in range(3):
        submit(s, f"sib_{i}", shared, 12, priority=0)
    got: dict[str, list[int]] = {}
    order: list[str] = []

    def step() -> None:
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            got.setdefault(rid, []).extend(out.output_ids[i])
            if out.finished_reasons[i] is not None:
                order.append(rid)

    for _ in range(5):
        step()
    assert len(s.running) == 1 and s.running[0].rid.startswith("sib_")
    submit(s, "high", high, 4, priority=20)
    for _ in range(5000):
        if not s.has_work():
            break
        step()
    assert not s.has_work()
    assert sorted(order) == ["high", "sib_0", "sib_1", "sib_2"] and order[0] == "high", order
    assert got["high"] == want["high"]
    for i in range(3):
        assert got[f"sib_{i}"] == want["shared"], i
    s.flush_cache()
    assert_idle(s)


def test_sglang_19881_one_request_outgrowing_the_kv_pool(sched_model_dir: str) -> None:
    """sgl-project/sglang#19881: a single decoding request that outgrew the KV pool, with no
    other request to retract, raised out of the scheduler (the server died). Expected: the
    request ends with a finish reason (its tokens so far are the cold run's), the scheduler
    keeps serving, and every page comes back."""
    prompt, n = random_ids(2 * PAGE - 40, 5), 100  # 40 tokens of room left in a 2-page pool
    roomy = make_scheduler(sched_model_dir, max_total_tokens=32 * PAGE)
    want = run_one(roomy, "cold", prompt, 48)["ids"]
    roomy.flush_cache()
    want_next = run_one(roomy, "cold2", random_ids(40, 6), 4)["ids"]
    s = make_scheduler(sched_model_dir, max_total_tokens=2 * PAGE)
    got = run_one(s, "big", prompt, n)
    assert got["finish"] is not None and got["finish"]["type"] in ("length", "abort"), got["finish"]
    assert 0 < len(got["ids"]) <= 40 and got["ids"] == want[: len(got["ids"])]
    assert run_one(s, "next", random_ids(40, 6), 4)["ids"] == want_next
    s.flush_cache()
    assert_idle(s)


def test_sglang_5016_zero_max_running_requests_is_refused(sched_model_dir: str) -> None:
    """sgl-project/sglang#5016: ``--max-running-requests`` that came out as 0 (a value divided
    over more ranks) let the server start and then hang, admitting nothing. Expected: the
    flags' check refuses it with a ``ValueError`` naming ``max_running_requests``."""
    for bad in (0, -4):
        with pytest.raises(ValueError, match="max_running_requests"):
            check_server_args(ServerArgs(model_path=sched_model_dir, max_running_requests=bad))


def test_sglang_27399_explicit_max_running_requests_is_respected(sched_model_dir: str) -> None:
    """sgl-project/sglang#27399: an explicit ``--max-running-requests`` above the server's own
    estimate was silently clamped to it. Expected: the explicit value (here 72, above the CPU
    default of 64) is the slot count, and 70 short requests that the KV pool holds all run in one
    batch."""
    s = make_scheduler(sched_model_dir, max_total_tokens=80 * PAGE, max_running_requests=72)
    assert s.max_running_requests == 72
    for i in range(70):
        submit(s, f"r{i}", random_ids(4, 100 + i), 2)
    s.step()
    assert len(s.running) == 70
    assert len(drain(s)) == 70
    s.flush_cache()
    assert_idle(s)


def test_sglang_28805_seeded_parallel_samples_differ(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#28805: with a ``seed`` and ``n > 1`` every parallel sample drew from the
    same seeded generator, so the ``n`` choices were token-identical. Expected: each sample gets
    its own stream (the choices are not all the same), and the request as a whole is
    reproducible (the same seed gives the same list of choices), on both OpenAI routes and on
    ``/generate`` (``n`` and ``sampling_seed`` in ``sampling_params``)."""
    for path, extra in (
        (COMPLETIONS, {"prompt": "Once upon a time"}),
        (CHAT, {"messages": [{"role": "user", "content": "Tell me a story."}]}),
    ):
        body = {
            "model": "default",
            "n": 3,
            "seed": 1234,
            "temperature": 1.0,
            "max_tokens": 8,
            "ignore_eos": True,
            **extra,
        }

        def texts(b: dict[str, Any] = body, path: str = path) -> list[str]:
            r = post(more_bugs_server, path, b)
            assert r.status_code == 200, r.text
            chs = sorted(r.json()["choices"], key=lambda c: c["index"])
            return [c["text"] if path == COMPLETIONS else c["message"]["content"] for c in chs]

        first = texts()
        assert len(first) == 3 and len(set(first)) > 1, (path, first)
        assert texts() == first, path
    native = {
        "text": "Once upon a time",
        "sampling_params": {
            "n": 3,
            "sampling_seed": 1234,
            "temperature": 1.0,
            "max_new_tokens": 8,
            "ignore_eos": True,
        },
    }
    outs = [[o["output_ids"] for o in post(more_bugs_server, "/generate", native).json()] for _ in range(2)]
    assert len(outs[0]) == 3 and len({tuple(ids) for ids in outs[0]}) > 1 and outs[1] == outs[0], outs
