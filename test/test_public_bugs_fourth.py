"""A fourth set of public bug reports of SGLang and vLLM servers, replayed on a real CPU server
(embedded DeepSeek-V4 model, the session's ``more_bugs_server``): vocabulary-bounded request
fields, logprobs with the reasoning parser, the DeepSeek-V4 chat rendering flags, streamed
``n`` / ``best_of`` and usage, client disconnects, the idle KV pool, the native routes' input
checks. Each test names its report. The FIM ``suffix`` and vLLM's ``bad_words`` /
``allowed_token_ids`` reports are in :mod:`test_public_bugs_fourth_sampling`.

Reports replayed that showed no fault here (the tests keep them so): out-of-vocabulary
``stop_token_ids`` (vllm-project/vllm#54195) and ``logit_bias`` keys (sgl-project/sglang#7670)
are a 400 naming the field and the server keeps serving; ``logprobs: true`` without
``top_logprobs`` (vllm-project/vllm#4795); one logprob entry per generated token with the
reasoning parser on, streamed or not (sgl-project/sglang#28456); echoed prompt tokens each with
its own text (vllm-project/vllm#5334), ``echo`` of a token-id prompt (vllm-project/vllm#2703),
batch-invariant prompt logprobs (vllm-project/vllm#11778); ``ignore_eos`` against the
generation config's EOS ids (vllm-project/vllm#4589); ``add_generation_prompt`` and
``continue_final_message`` shape the DeepSeek-V4 prompt (vllm-project/vllm#46256) and ``echo:
false`` leaves the continued message out (vllm-project/vllm#10111); a streamed ``n = best_of``
(vllm-project/vllm#10743) and the streamed usage of ``n > 1`` (vllm-project/vllm#8625); a client
that goes away, streaming or not, frees its request (vllm-project/vllm#10806,
vllm-project/vllm#9428); ``/get_server_info`` carries the version (sgl-project/sglang#2205);
``input_embeds`` (empty, or with a session) is a 400 (sgl-project/sglang#37081,
sgl-project/sglang#40728); the idle pool's pages are the radix cache's, all evictable, and a
flush returns them (sgl-project/sglang#35270, sgl-project/sglang#6778).

Oracles: the served model's tokenizer (ids, counts), the non-streamed answer of the same greedy
request, the model's vocabulary size from ``config.json``, the installed package's metadata,
the ``openai`` client's parser, the reports' stated expectations.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, USER, generate, post, sse, think_end_id
from server_fixture import ServerHandle

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> Iterator[ServerHandle]:
    yield more_bugs_server


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def vocab_size(default_model_dir: str) -> int:
    """The model's vocabulary size, read from its ``config.json`` (DeepSeek-V4: 129280)."""
    with open(f"{default_model_dir}/config.json") as f:
        return int(json.load(f)["vocab_size"])


def _still_serving(server: ServerHandle) -> None:
    r = post(server, COMPLETIONS, {"model": MODEL, "prompt": "Hi", "max_tokens": 1})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length", r.text


# --------------------------------------------------------------------------- vocabulary bounds


def test_vllm_54195_out_of_vocab_stop_token_ids_are_a_400(server: ServerHandle, vocab_size: int) -> None:
    """vllm-project/vllm#54195: ``stop_token_ids: [151645]`` (an older DeepSeek tokenizer's id)
    sent to DeepSeek-V4-Flash (vocabulary 129280) was used as a logits index and killed the
    engine. Ids outside ``[0, vocab)`` are a 400 naming the field, on every route, with or
    without ``min_tokens`` (the masking that indexed with them), and the server keeps serving."""
    assert vocab_size == 129280
    for bad in ([151645], [vocab_size], [-1]):
        for path, body in (
            (CHAT, {"model": MODEL, "messages": USER, "max_tokens": 2, "min_tokens": 1}),
            (COMPLETIONS, {"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
        ):
            r = post(server, path, {**body, "stop_token_ids": bad})
            assert r.status_code == 400 and r.json()["error"]["param"] == "stop_token_ids", r.text
        r = post(server, "/generate", {"text": "Hi", "sampling_params": {"stop_token_ids": bad}})
        assert r.status_code == 400 and "stop_token_ids" in r.json()["error"]["message"], r.text
    ok = {"model": MODEL, "prompt": "Hi", "max_tokens": 2, "stop_token_ids": [vocab_size - 1]}
    assert post(server, COMPLETIONS, ok).status_code == 200
    _still_serving(server)


def test_sglang_7670_logit_bias_key_past_the_vocab_is_a_400(server: ServerHandle, vocab_size: int) -> None:
    """sgl-project/sglang#7670: ``logit_bias`` with key 129280 on DeepSeek (vocabulary 129280)
    raised ``index 129280 is out of bounds`` in the scheduler. It is a 400 naming
    ``logit_bias``; the last id of the vocabulary is accepted; the server keeps serving."""
    for path, body in (
        (CHAT, {"model": MODEL, "messages": USER, "max_tokens": 2}),
        (COMPLETIONS, {"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
    ):
        for key in (str(vocab_size), "191222", "-1"):
            r = post(server, path, {**body, "logit_bias": {key: -100}})
            assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias", r.text
        assert post(server, path, {**body, "logit_bias": {str(vocab_size - 1): 5}}).status_code == 200
    _still_serving(server)


# --------------------------------------------------------------------------- logprobs


def test_vllm_4795_logprobs_true_without_top_logprobs(client: Any) -> None:
    """vllm-project/vllm#4795: ``logprobs=True`` without ``top_logprobs`` was an error; OpenAI
    answers it with one entry per token and an empty ``top_logprobs`` list in each."""
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, temperature=0, logprobs=True)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 4
    assert all(e.top_logprobs == [] and e.logprob <= 0 for e in content)
    assert "".join(e.token for e in content) == r.choices[0].message.content


def test_sglang_28456_logprobs_per_token_with_the_reasoning_parser(server: ServerHandle, mtok: Any) -> None:
    """sgl-project/sglang#28456: with the reasoning parser on, chat ``logprobs`` disappeared (or
    came per group of tokens). In thinking mode (``</think>`` banned, so every token is
    reasoning) there is one entry per generated token, streamed or not, the same entries both
    ways, and their tokens spell the reasoning (special tokens, which the text skips, aside)."""
    body = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 6,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
        "logit_bias": {str(think_end_id(mtok)): -100},
        "chat_template_kwargs": {"thinking": True},
    }
    r = post(server, CHAT, body).json()
    entries = r["choices"][0]["logprobs"]["content"]
    assert len(entries) == r["usage"]["completion_tokens"] == 6
    special = {t.content for t in mtok.added_tokens_decoder.values() if t.special}
    spelled = "".join(e["token"] for e in entries if e["token"] not in special)
    assert spelled == r["choices"][0]["message"]["reasoning_content"]
    streamed = [
        e
        for c in sse(server, CHAT, body)
        if c["choices"] and c["choices"][0]["logprobs"]
        for e in c["choices"][0]["logprobs"]["content"]
    ]
    assert [(e["token"], e["logprob"]) for e in streamed] == [(e["token"], e["logprob"]) for e in entries]


def test_vllm_5334_echoed_prompt_tokens_are_each_tokens_text(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#5334: with ``echo`` and ``logprobs`` the prompt's ``tokens`` came out as
    running concatenations (``'\\n Carol'``, ``'\\n\\n has'``...). Each echoed token is its own
    text: the prompt's entries are the tokenizer's pieces of the prompt (as many as its ids), the
    first without a logprob, and all tokens join to the choice's text."""
    prompt = "\n1. Carol has 20"
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 3, "temperature": 0, "echo": True, "logprobs": 1}
    choice = post(server, COMPLETIONS, body).json()["choices"][0]
    lp = choice["logprobs"]
    ids = mtok(prompt)["input_ids"]
    assert lp["tokens"][: len(ids)] == [mtok.decode([t]) for t in ids]
    assert lp["token_logprobs"][0] is None and all(v <= 0 for v in lp["token_logprobs"][1:])
    assert "".join(lp["tokens"]) == choice["text"] and choice["text"].startswith(prompt)
    assert len(lp["tokens"]) == len(ids) + 3


def test_vllm_2703_echo_of_a_token_id_prompt(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#2703 (fixed by vllm-project/vllm PR #3441): ``echo`` with a prompt of
    token ids failed. The echoed text is the ids' decoded text, followed by the completion the
    same request gives without ``echo``."""
    ids = mtok("The capital of France is", add_special_tokens=False)["input_ids"]
    body = {"model": MODEL, "prompt": ids, "max_tokens": 3, "temperature": 0}
    plain = post(server, COMPLETIONS, body).json()["choices"][0]["text"]
    echoed = post(server, COMPLETIONS, {**body, "echo": True}).json()["choices"][0]["text"]
    assert echoed == mtok.decode(ids) + plain


def test_vllm_11778_prompt_logprobs_batch_invariant(server: ServerHandle) -> None:
    """vllm-project/vllm#11778: prompt logprobs of a batch of two prompts differed from those of
    each prompt alone. Scoring the prompts (``echo``, ``logprobs``, ``max_tokens: 0``) in one
    batch gives each prompt's logprobs of the single request (float32 on CPU: 1e-4)."""
    prompts = ["The quick brown fox jumps over the lazy dog.", "Hello, world! 你好"]
    body = {"model": MODEL, "max_tokens": 0, "echo": True, "logprobs": 0, "temperature": 0}
    batch = post(server, COMPLETIONS, {**body, "prompt": prompts}).json()["choices"]
    for i, p in enumerate(prompts):
        alone = post(server, COMPLETIONS, {**body, "prompt": p}).json()["choices"][0]["logprobs"]
        got = next(c for c in batch if c["index"] == i)["logprobs"]
        assert got["tokens"] == alone["tokens"] and got["token_logprobs"][0] is None
        assert got["token_logprobs"][1:] == pytest.approx(alone["token_logprobs"][1:], abs=1e-4)


def test_vllm_4589_ignore_eos_outlasts_the_generation_config_eos(
    server: ServerHandle, default_model_dir: str
) -> None:
    """vllm-project/vllm#4589: the EOS ids loaded from ``generation_config.json`` into the stop
    ids ended generation although ``ignore_eos`` was true. With every generation-config EOS id
    made near-certain (``logit_bias`` +100), ``ignore_eos`` still runs to ``max_tokens``
    (``length``); without it the answer stops at once on that EOS."""
    with open(f"{default_model_dir}/generation_config.json") as f:
        eos = json.load(f)["eos_token_id"]
    eos = eos if isinstance(eos, list) else [eos]
    body = {
        "model": MODEL,
        "prompt": "Hi",
        "max_tokens": 6,
        "temperature": 0,
        "logit_bias": {str(t): 100 for t in eos},
        "return_token_ids": True,
    }
    stopped = post(server, COMPLETIONS, body).json()["choices"][0]
    assert stopped["finish_reason"] == "stop" and len(stopped["token_ids"]) <= 1
    ran = post(server, COMPLETIONS, {**body, "ignore_eos": True}).json()["choices"][0]
    assert ran["finish_reason"] == "length" and len(ran["token_ids"]) == 6
    assert set(ran["token_ids"]) <= set(eos)


# --------------------------------------------------------------------------- chat rendering


def _prompt_ids(server: ServerHandle, **kw: Any) -> list[int]:
    body = {"model": MODEL, "max_tokens": 1, "temperature": 0, "return_prompt_token_ids": True, **kw}
    r = post(server, CHAT, body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["prompt_token_ids"]


def test_vllm_46256_generation_prompt_flags_shape_the_v4_prompt(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#46256: the deepseek_v4 tokenizer ignored ``add_generation_prompt`` and
    ``continue_final_message`` (assistant-terminated conversations got a garbled answer). Here:
    ``add_generation_prompt: false`` leaves the assistant turn's opening out (the prompt is a
    strict prefix of the default one, which adds ``<｜Assistant｜>``), and
    ``continue_final_message`` ends the prompt with the final message's own tokens, without the
    end-of-sentence token that closes a finished turn."""
    assistant, eos = mtok.convert_tokens_to_ids(["<｜Assistant｜>", "<｜end▁of▁sentence｜>"])
    with_gen = _prompt_ids(server, messages=USER)
    without = _prompt_ids(server, messages=USER, add_generation_prompt=False)
    assert len(without) < len(with_gen) and with_gen[: len(without)] == without
    assert assistant in with_gen[len(without) :] and assistant not in without
    prefill = "Hello there"
    msgs = [*USER, {"role": "assistant", "content": prefill}]
    cont = _prompt_ids(server, messages=msgs, continue_final_message=True, add_generation_prompt=False)
    tail = mtok.encode(prefill, add_special_tokens=False)
    assert cont[-len(tail) :] == tail and eos not in cont
    closed = _prompt_ids(server, messages=msgs, add_generation_prompt=False)
    assert closed == [*cont, eos]


def test_vllm_10111_continue_final_message_echo_false(server: ServerHandle) -> None:
    """vllm-project/vllm#10111: with ``continue_final_message`` the answer repeated the continued
    message although ``echo`` was false. ``echo: false`` (the default): the content is the
    continuation only; ``echo: true``: the continued message, then the same continuation;
    streamed the same."""
    prefill = "Sure, the answer"
    body = {
        "model": MODEL,
        "messages": [*USER, {"role": "assistant", "content": prefill}],
        "max_tokens": 4,
        "temperature": 0,
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    plain = post(server, CHAT, body).json()["choices"][0]["message"]["content"]
    echoed = post(server, CHAT, {**body, "echo": True}).json()["choices"][0]["message"]["content"]
    assert echoed == prefill + plain and not plain.startswith(prefill)
    for echo, want in ((False, plain), (True, prefill + plain)):
        chunks = sse(server, CHAT, {**body, "echo": echo})
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == want


# --------------------------------------------------------------------------- n, best_of, usage


def test_vllm_10743_streamed_n_equal_to_best_of(server: ServerHandle) -> None:
    """vllm-project/vllm#10743: a streamed request with ``n=2, best_of=2`` was refused ("n must
    equal best_of" although it did). It streams both choices, each ending with its own
    ``finish_reason``, on completions and chat."""
    for path, body in (
        (COMPLETIONS, {"model": MODEL, "prompt": "Hi", "max_tokens": 3, "n": 2, "best_of": 2, "seed": 7}),
        (CHAT, {"model": MODEL, "messages": USER, "max_tokens": 3, "n": 2, "best_of": 2, "seed": 7}),
    ):
        chunks = sse(server, path, body)
        finished = {
            c["choices"][0]["index"]: c["choices"][0]["finish_reason"] for c in chunks if c["choices"]
        }
        assert finished == {0: "length", 1: "length"}, chunks


def test_vllm_8625_streamed_usage_counts_each_choice_once(server: ServerHandle) -> None:
    """vllm-project/vllm#8625: the streamed ``usage.completion_tokens`` was wrong (it counted
    every chunk's cumulative output). With ``n = 2`` and ``return_token_ids``, the final usage's
    ``completion_tokens`` is the number of token ids the stream delivered, and equals the
    non-streamed answer's usage."""
    body = {
        "model": MODEL,
        "prompt": "Hi",
        "max_tokens": 5,
        "n": 2,
        "seed": 3,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    chunks = sse(server, COMPLETIONS, body)
    ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == len(ids) == 10
    whole = post(server, COMPLETIONS, {k: v for k, v in body.items() if k != "stream_options"}).json()
    assert whole["usage"]["completion_tokens"] == usage["completion_tokens"]
    assert whole["usage"]["prompt_tokens"] == usage["prompt_tokens"]


# --------------------------------------------------------------------------- disconnects


def _running(server: ServerHandle) -> int:
    info = requests.get(server.url + "/get_server_info", timeout=30).json()
    return int(info["internal_states"][0]["num_running_reqs"])


def _wait_idle(server: ServerHandle, timeout_s: float = 20.0) -> float:
    t0 = time.monotonic()
    while _running(server):
        assert time.monotonic() - t0 < timeout_s, "the request kept running after its client left"
        time.sleep(0.1)
    return time.monotonic() - t0


@pytest.mark.parametrize("stream", [True, False])
def test_vllm_10806_9428_client_disconnect_aborts(server: ServerHandle, stream: bool) -> None:
    """vllm-project/vllm#10806 / vllm-project/vllm#9428: a client that goes away (a killed
    ``curl``, a client-side timeout), streaming or not, left its request generating to
    ``max_tokens``. Here the request (900 tokens, ``ignore_eos``: about half a minute of CPU
    decoding) stops running within seconds of the connection closing."""
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 900, "ignore_eos": True, "stream": stream}
    if stream:
        with requests.post(server.url + COMPLETIONS, json=body, stream=True, timeout=60) as r:
            assert r.status_code == 200
            next(r.iter_lines())  # generation has started
    else:
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.post(server.url + COMPLETIONS, json=body, timeout=1.5)
    assert _wait_idle(server) < 15.0
    _still_serving(server)


# --------------------------------------------------------------------------- native routes


def test_sglang_2205_server_info_has_the_version(server: ServerHandle) -> None:
    """sgl-project/sglang#2205: ``get_server_info`` did not tell the backend's version. It does:
    ``version`` is the installed package's version (its metadata, read independently)."""
    from importlib.metadata import version

    info = requests.get(server.url + "/get_server_info", timeout=30).json()
    assert info["version"] == version("sglang-v4")


def test_sglang_37081_40728_input_embeds_are_a_400(server: ServerHandle) -> None:
    """sgl-project/sglang PR #37081 (an empty ``input_embeds`` answered 500 from an
    ``IndexError``) and sgl-project/sglang#40728 (``input_embeds`` sent through a session crashed
    the scheduler): a text-only DeepSeek-V4 server answers both with a 400 and keeps serving."""
    for body in (
        {"input_embeds": [], "sampling_params": {"max_new_tokens": 2}},
        {"input_embeds": [[]], "sampling_params": {"max_new_tokens": 2}},
        {"input_embeds": [[0.1, 0.2]], "sampling_params": {"max_new_tokens": 2}},
        {
            "input_embeds": [[0.1, 0.2]],
            "session_params": {"id": "s1"},
            "sampling_params": {"max_new_tokens": 2},
        },
    ):
        r = post(server, "/generate", body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        assert r.json()["error"]["code"] == 400
    assert (
        generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 1}})["meta_info"][
            "completion_tokens"
        ]
        == 1
    )


def _pool(server: ServerHandle) -> dict[str, Any]:
    return requests.get(server.url + "/get_server_info", timeout=30).json()["internal_states"][0]


def test_sglang_35270_6778_idle_pool_pages_are_the_caches(server: ServerHandle) -> None:
    """sgl-project/sglang#35270 (the radix cache's evictable count double-counted shared pages
    and the idle pool check failed) and sgl-project/sglang#6778 (KV "not released" after
    requests finish): at idle, after requests sharing a prefix, the used block pages are exactly
    the cached blocks, all evictable, free + used is the pool, and ``/flush_cache`` returns
    every page."""
    _wait_idle(server)
    assert post(server, "/flush_cache", {}).status_code == 200
    doc = "DeepSeek-V4 caches compressed KV entries. " * 70  # > 2 blocks of 256 tokens
    for q in ("Q1", "Q2", "Q3"):
        generate(server, {"text": doc + q, "sampling_params": {"max_new_tokens": 2}})
    _wait_idle(server)
    st = _pool(server)
    blocks, radix = st["kv_pool"]["block_pages"], st["radix_cache"]
    assert radix["cached_blocks"] >= 2 and radix["locked_blocks"] == 0
    assert blocks["used"] == radix["cached_blocks"] == radix["evictable_blocks"]
    assert blocks["free"] + blocks["used"] == blocks["total"]
    assert post(server, "/flush_cache", {}).status_code == 200
    st = _pool(server)
    assert st["kv_pool"]["block_pages"]["used"] == 0 and st["radix_cache"]["cached_blocks"] == 0
    assert st["kv_pool"]["window_pages"]["used"] == 0
