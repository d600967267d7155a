"""The ``openai`` client against the real server processes (``launch_server``: HTTP, tokenizer
manager, ZMQ, detokenizer, this package's OpenAI router) over ``server_fixture.FakeScheduler``,
which emits the tokens of ``FAKE_TEXT`` in order. Expected texts are computed independently from
the tokenizer; the chat prompt length is checked against the documented DeepSeek-V4 format."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import requests
from server_fixture import (
    FAKE_CONTEXT_LEN,
    FAKE_SCRIPT_TAG,
    FAKE_TEXT,
    fake_env,
    fake_output_text,
    hf_auto_tokenizer,
    make_fake_model_dir,
    start_server,
)

pytestmark = pytest.mark.timeout(300)

B, E, U, A = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"
NAME = "dsv4-fake"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fake_model_dir(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    h = start_server(
        ["--model-path", str(model_dir), "--served-model-name", NAME, "--enable-cache-report"],
        fake_env({"FAKE_STEP_SLEEP": "0.002", "FAKE_HOLD_ON_TEXT": "[hold]"}),
        log,
    )
    yield h
    h.stop()


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tok():
    return hf_auto_tokenizer()


def expected(tok, n: int) -> str:
    return fake_output_text(tok, n)


def test_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [NAME]


def test_completion_text_usage_and_stream(client: openai.OpenAI, tok) -> None:
    n_total = len(tok.encode(FAKE_TEXT))
    out = client.completions.create(model=NAME, prompt="Hello", max_tokens=n_total)
    assert out.choices[0].text == expected(tok, n_total)
    assert out.choices[0].finish_reason == "length"
    assert out.usage.prompt_tokens == len(tok.encode("Hello")) and out.usage.completion_tokens == n_total
    assert out.usage.prompt_tokens_details.cached_tokens == 0
    chunks = list(
        client.completions.create(
            model=NAME,
            prompt="Hello",
            max_tokens=n_total,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    # multi-byte characters split across tokens must arrive whole, in order
    assert "".join(c.choices[0].text for c in chunks if c.choices) == out.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n_total


def test_completion_stop_n_logprobs(client: openai.OpenAI, tok) -> None:
    out = client.completions.create(model=NAME, prompt="x", max_tokens=40, stop=["lazy"], n=2)
    full = expected(tok, 40)
    assert [c.text for c in out.choices] == [full[: full.index("lazy")]] * 2
    assert all(c.finish_reason == "stop" for c in out.choices)
    assert out.choices[0].model_extra.get("matched_stop") == "lazy"
    lp = client.completions.create(model=NAME, prompt="x", max_tokens=5, logprobs=2).choices[0].logprobs
    assert lp.token_logprobs == [-0.25] * 5
    ids = tok.encode(FAKE_TEXT)[:5]
    assert lp.tokens == [tok.decode([t]) for t in ids]
    # the fake engine's two candidates (ids 0 and 1 at -0.1, never sampled here) and the sampled
    # token (OpenAI's legacy format: up to logprobs + 1 entries)
    want = [{tok.decode([0]): -0.1, tok.decode([1]): -0.1, t: -0.25} for t in lp.tokens]
    assert lp.top_logprobs == want


def test_chat_prompt_format_and_reasoning(client: openai.OpenAI, tok) -> None:
    msgs = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Hi"}]
    out = client.chat.completions.create(
        model=NAME, messages=msgs, max_tokens=6, logprobs=True, top_logprobs=1
    )
    chat_prompt = B + "Sys." + U + "Hi" + A + "</think>"
    assert out.usage.prompt_tokens == len(tok.encode(chat_prompt, add_special_tokens=False))
    assert out.choices[0].message.content == expected(tok, 6)
    assert [c.logprob for c in out.choices[0].logprobs.content] == [-0.25] * 6
    think = client.chat.completions.create(
        model=NAME, messages=msgs, max_tokens=6, extra_body={"chat_template_kwargs": {"thinking": True}}
    )
    assert think.usage.prompt_tokens == len(
        tok.encode(B + "Sys." + U + "Hi" + A + "<think>", add_special_tokens=False)
    )
    # the fake text has no "</think>": all of it is reasoning
    assert think.choices[0].message.model_extra["reasoning_content"] == expected(tok, 6)
    assert not think.choices[0].message.content
    chunks = list(
        client.chat.completions.create(
            model=NAME, messages=msgs, max_tokens=12, stream=True, n=2, stream_options={"include_usage": True}
        )
    )
    texts = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.delta.content or ""
    assert texts == {0: expected(tok, 12), 1: expected(tok, 12)}
    assert chunks[-1].usage.completion_tokens == 24


def test_errors_and_still_serving(client: openai.OpenAI, server) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt="x")
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=NAME, prompt="x", max_tokens=-1)
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=NAME, prompt="hello " * (FAKE_CONTEXT_LEN + 10), max_tokens=4)
    assert "context" in str(ei.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": "x"}], extra_body={"top_k": -2}
        )
    with pytest.raises(openai.BadRequestError, match="vocabulary"):
        client.completions.create(model=NAME, prompt=[5, 10**7], max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="n must be"):
        client.completions.create(model=NAME, prompt="x", max_tokens=2, n=10**6)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=NAME, prompt=[], max_tokens=2)
    r = requests.post(server.url + "/v1/completions", json={"prompt": "x", "max_tokens": "many"})
    assert r.status_code == 400 and r.json()["param"] == "max_tokens"
    r = requests.post(
        server.url + "/v1/chat/completions", data=b"[1, 2", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["object"] == "error"
    assert client.completions.create(model=NAME, prompt="ok", max_tokens=2).usage.completion_tokens == 2


def test_stream_disconnect_aborts_request(server) -> None:
    """Closing an OpenAI stream early aborts the request: its KV pages come back. The request is
    held (FakeScheduler: it never ends by itself), so only the abort can free them."""

    def info() -> dict:
        return requests.get(server.url + "/get_server_info", timeout=10).json()

    body = {
        "model": NAME,
        "messages": [{"role": "user", "content": "[hold] go"}],
        "max_tokens": 480,
        "stream": True,
    }
    with requests.post(server.url + "/v1/chat/completions", json=body, stream=True, timeout=30) as r:
        assert r.status_code == 200
        # keep the line iterator referenced: a dropped iter_lines() generator closes the
        # connection (urllib3), which the server takes as a disconnect and aborts the request
        lines = r.iter_lines()
        assert any(b"delta" in line for _, line in zip(range(3), lines) if line)
        assert info()["kv_pool"]["used_pages"] > 0
    deadline = time.time() + 20
    while True:
        i = info()
        if i["kv_pool"]["used_pages"] == 0:
            break
        assert time.time() < deadline, i
        time.sleep(0.05)


def test_context_length_boundary_and_message(client: openai.OpenAI, server) -> None:
    # prompt + max_tokens == context length fits (the last token needs no KV slot); one more is a
    # 400 whose message gives the context length and both numbers (vLLM's / OpenAI's wording).
    prompt = [9] * 500
    fit = FAKE_CONTEXT_LEN - len(prompt)
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=fit)
    assert out.usage.prompt_tokens == 500 and out.usage.completion_tokens == fit
    r = requests.post(
        server.url + "/generate", json={"input_ids": prompt, "sampling_params": {"max_new_tokens": fit}}
    )
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == fit, r.text
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=NAME, prompt=prompt, max_tokens=fit + 1)
    msg = ei.value.message
    assert f"maximum context length is {FAKE_CONTEXT_LEN} tokens" in msg, msg
    assert (
        f"you requested {FAKE_CONTEXT_LEN + 1} tokens (500 in the messages, {fit + 1} in the completion)"
        in msg
    )
    r = requests.post(
        server.url + "/generate", json={"input_ids": prompt, "sampling_params": {"max_new_tokens": fit + 1}}
    )
    assert r.status_code == 400 and f"{FAKE_CONTEXT_LEN + 1} tokens" in r.json()["error"]["message"], r.text
    # max_tokens omitted: the completion fills the context
    out = client.completions.create(model=NAME, prompt=prompt, max_tokens=None)
    assert out.usage.completion_tokens == fit and out.choices[0].finish_reason == "length"


@pytest.mark.parametrize("path", ["/generate", "/v1/completions", "/v1/chat/completions"])
def test_huge_prompt_is_400_and_others_are_served(server, path: str) -> None:
    # A prompt of millions of characters: a 400 naming the context length on every route; a small
    # request sent meanwhile is answered, and the server keeps serving.
    big = "hello world " * 300_000  # 3.6M characters
    body = {
        "/generate": {"text": big, "sampling_params": {"max_new_tokens": 4}},
        "/v1/completions": {"model": NAME, "prompt": big, "max_tokens": 4},
        "/v1/chat/completions": {
            "model": NAME,
            "messages": [{"role": "user", "content": big}],
            "max_tokens": 4,
        },
    }[path]
    with ThreadPoolExecutor(2) as pool:
        huge = pool.submit(requests.post, server.url + path, json=body, timeout=120)
        small = pool.submit(
            requests.post,
            server.url + "/generate",
            json={"text": "hi", "sampling_params": {"max_new_tokens": 2}},
            timeout=120,
        )
        r, s = huge.result(), small.result()
    assert s.status_code == 200 and s.json()["meta_info"]["completion_tokens"] == 2
    assert r.status_code == 400, r.text
    j = r.json()
    msg = j["error"]["message"]
    assert f"maximum context length is {FAKE_CONTEXT_LEN} tokens" in msg, msg
    assert "is longer than the model's context length" in msg, msg  # the prompt alone is too long
    if path.startswith("/v1/"):
        assert j["error"]["type"] == j["type"] == "BadRequestError" and j["code"] == 400


# ---------------------------------------------------------------- stop strings vs the reasoning parser
# vLLM #14170 (and SGLang #40529): in thinking mode a stop string that occurs in the reasoning cut it
# short, and one that is a piece of the tag ("</", "<") cut "</think>" in two, leaking "/think>" into
# the content. The fake model emits FAKE_SCRIPT (reasoning, "</think>", answer, EOS); the expected
# split is computed here from the raw text of a request without reasoning parsing: the reasoning is
# the text before the first "</think>", the answer the rest without leading whitespace, cut at the
# first occurrence of a stop string in the answer (stops apply to the answer only).
THINK = {"chat_template_kwargs": {"thinking": True}}
SCRIPT_MSGS = [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}]
THINK_END_ID = 128822  # "</think>" in the DeepSeek tokenizer (checked in raw_script)


@pytest.fixture(scope="module")
def raw_script(client: openai.OpenAI, tok) -> str:
    assert tok.convert_tokens_to_ids("</think>") == THINK_END_ID
    out = client.chat.completions.create(
        model=NAME, messages=SCRIPT_MSGS, max_tokens=200, extra_body={**THINK, "separate_reasoning": False}
    )
    assert out.choices[0].finish_reason == "stop"
    return out.choices[0].message.content


def _oracle(raw: str, stops: list[str]) -> tuple[str, str]:
    reasoning, _, answer = raw.partition("</think>")
    cut = min([answer.find(s) for s in stops if s in answer], default=len(answer))
    return reasoning, answer[:cut].lstrip("\n")  # the newlines after </think> are dropped


def _chat_both(client: openai.OpenAI, **kw) -> tuple[dict, dict]:
    """The non-streamed and the streamed answer of one request, each as
    ``{reasoning, content, finish, matched, usage}`` (the stream's deltas concatenated)."""
    kw = {"model": NAME, "messages": SCRIPT_MSGS, "max_tokens": 200, **kw}
    out = client.chat.completions.create(**kw)
    ch = out.choices[0]
    full = {
        "reasoning": ch.message.model_extra.get("reasoning_content") or "",
        "content": ch.message.content or "",
        "finish": ch.finish_reason,
        "matched": ch.model_extra.get("matched_stop"),
        "usage": (out.usage.completion_tokens, out.usage.model_extra.get("reasoning_tokens")),
    }
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = {"reasoning": "", "content": "", "finish": None, "matched": None}
    for c in chunks:
        for sc in c.choices:
            streamed["reasoning"] += (sc.delta.model_extra or {}).get("reasoning_content") or ""
            streamed["content"] += sc.delta.content or ""
            if sc.finish_reason is not None:
                streamed["finish"], streamed["matched"] = sc.finish_reason, sc.model_extra.get("matched_stop")
    u = chunks[-1].usage
    streamed["usage"] = (u.completion_tokens, u.model_extra.get("reasoning_tokens"))
    return full, streamed


def _tokens_until(tok, raw: str, stops: list[str]) -> tuple[int, int]:
    """(completion tokens, reasoning tokens) of FAKE_SCRIPT stopped at the first token whose
    answer text (after the "</think>" token) holds a stop string; EOS counts when none does."""
    ids = tok.encode(raw, add_special_tokens=False)
    k = ids.index(THINK_END_ID) + 1
    for n in range(k + 1, len(ids) + 1):
        if any(s in tok.decode(ids[k:n]) for s in stops):
            return n, k
    return len(ids) + 1, k


@pytest.mark.parametrize(
    "stops",
    [["42"], ["</"], ["<"], ["/think"], ["think>\n\nThe"], ["Hmm"], ["Stop"], ["think>", "Done"]],
    ids=["in-both", "tag-prefix", "lt", "tag-middle", "straddle", "reasoning-only", "Stop", "tag-suffix"],
)
def test_stop_strings_apply_to_the_answer_only(client: openai.OpenAI, tok, raw_script: str, stops) -> None:
    reasoning, content = _oracle(raw_script, stops)
    full, streamed = _chat_both(client, stop=stops, extra_body=THINK)
    completion, reasoning_tokens = _tokens_until(tok, raw_script, stops)
    hit = next((s for s in stops if s in raw_script.partition("</think>")[2]), None)
    expect = {
        "reasoning": reasoning,
        "content": content,
        "finish": "stop",
        "matched": hit if hit is not None else 1,  # the stop string, else EOS
        "usage": (completion, reasoning_tokens),
    }
    assert full == expect
    assert streamed == expect


def test_stop_variants_with_reasoning(client: openai.OpenAI, tok, raw_script: str) -> None:
    reasoning, _, answer = raw_script.partition("</think>")
    answer = answer.lstrip("\n")
    n_reason = tok.encode(raw_script, add_special_tokens=False).index(THINK_END_ID) + 1
    cases = [
        # keep the stop string: SGLang's and vLLM's names
        (dict(stop="42", extra_body={**THINK, "no_stop_trim": True}), reasoning, answer[: answer.index("42") + 2]),
        (dict(stop="42", extra_body={**THINK, "include_stop_str_in_output": True}), reasoning, answer[: answer.index("42") + 2]),
        (dict(stop="42", extra_body={**THINK, "skip_special_tokens": False}), reasoning, answer[: answer.index("42")]),
        # no split: the stop still applies to the answer, the raw text is kept up to it
        (dict(stop="42", extra_body={**THINK, "separate_reasoning": False}), "", raw_script[: raw_script.index("42", len(reasoning))]),
        (dict(stop="42", extra_body={**THINK, "stream_reasoning": False}), reasoning, answer[: answer.index("42")]),
    ]  # fmt: skip
    for kw, want_r, want_c in cases:
        for got in _chat_both(client, **kw):
            assert (got["reasoning"], got["content"], got["finish"], got["matched"]) == (
                want_r,
                want_c,
                "stop",
                "42",
            ), kw
    # ending at the end of the reasoning: the "</think>" token as a stop token, or as a stop string
    for kw, matched in [
        (dict(extra_body={**THINK, "stop_token_ids": [THINK_END_ID]}), THINK_END_ID),
        (dict(extra_body={**THINK, "stop_token_ids": [THINK_END_ID], "no_stop_trim": True}), THINK_END_ID),
        (dict(stop="</think>", extra_body=THINK), "</think>"),
        (dict(stop=["</think>", "42"], extra_body={**THINK, "no_stop_trim": True}), "</think>"),
    ]:
        for got in _chat_both(client, **kw):
            assert got == {
                "reasoning": reasoning,
                "content": "",
                "finish": "stop",
                "matched": matched,
                "usage": (n_reason, n_reason),
            }, kw
    # max_tokens inside the reasoning: the partial reasoning, no content, finish "length"
    ids = tok.encode(raw_script, add_special_tokens=False)
    for got in _chat_both(client, stop=["42", "</"], max_tokens=9, extra_body=THINK):
        assert got == {
            "reasoning": tok.decode(ids[:9]),
            "content": "",
            "finish": "length",
            "matched": None,
            "usage": (9, 9),
        }
