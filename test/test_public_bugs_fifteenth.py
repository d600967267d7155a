"""A fifteenth set of public bug reports of OpenAI-compatible and SGLang-native servers, replayed
here: a list of prompts with ``n`` (choice indices, prompt-major), ``top_logprobs: 0`` on the
chat route, SGLang's ``no_stop_trim``, one ``sampling_params`` per prompt of a ``/generate``
batch, streamed completion log-probabilities chunk by chunk, a streamed natural stop,
``ignore_eos`` (chat and ``/generate``), one BOS in chat prompts (also when the final assistant
message is continued), a special token as a stop token id, stop strings and
stop token ids together, ``max_tokens: 1``,
the penalties' range, and, on the embedded DeepSeek-V4 model, prompt log-probabilities with a
warm prefix cache, a per-request seed under concurrency and streamed chat top log-probabilities.
Each test names its report; every report passed as-is and is kept as a regression test.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model writes
``FAKE_TEXT`` over and over, fake log-probabilities; a ``[script]`` prompt makes it write
``FAKE_SCRIPT`` then EOS through the real stop checker) and ``more_bugs_server`` (the embedded
model, random weights, greedy unless told). Oracles: ``FAKE_TEXT`` / ``FAKE_SCRIPT`` (what the
fake model writes), the DeepSeek-V4 tokenizer as ``transformers`` loads it, the ``openai``
client's types, the same request unstreamed, alone or cold, and the OpenAI / SGLang references'
field meanings.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from public_bugs_testutil import post, sse
from server_fixture import FAKE_EOS, FAKE_REASONING, FAKE_SCRIPT, FAKE_TEXT, ServerHandle, hf_auto_tokenizer

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402
from openai.types.chat import ChatCompletion, ChatCompletionChunk  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
HI = [{"role": "user", "content": "Hi"}]
SCRIPT = [{"role": "user", "content": "[script] What is 6*7?"}]


def _ok(server: ServerHandle, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer of ``POST path``; asserts HTTP 200."""
    r = post(server, path, body)
    assert r.status_code == 200, r.text
    return r.json()


def _finishes(chunks: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """``(index, finish_reason)`` of every streamed choice that carries one, in order."""
    return [
        (ch["index"], ch["finish_reason"]) for c in chunks for ch in c["choices"] if ch.get("finish_reason")
    ]


# --------------------------------------------------------------------------- completions / chat shapes


def test_openai_python_90_prompt_list_times_n_choices(plain_fake_server: ServerHandle) -> None:
    """openai/openai-python#90: ``prompt`` a list of 2 prompts with ``n: 2`` gave 2 choices, those
    of the last prompt, indexed 4 and 5. Expected (OpenAI's Completions reference: one choice per
    prompt and ``n``): 4 choices indexed 0..3, prompt-major -- with ``echo`` choices 0 and 1 start
    with the first prompt, 2 and 3 with the second; usage counts each prompt once and every
    choice's tokens."""
    prompts = ["example 1", "example two"]
    body = {"model": FAKE_MODEL, "prompt": prompts, "max_tokens": 3, "n": 2, "echo": True}
    c = Completion.model_validate(_ok(plain_fake_server, COMPLETIONS, body))
    assert [ch.index for ch in c.choices] == [0, 1, 2, 3]
    for ch in c.choices:
        prompt = prompts[ch.index // 2]
        assert (
            ch.text.startswith(prompt) and ch.text[len(prompt) :] == FAKE_TEXT[: len(ch.text) - len(prompt)]
        )
    tok = hf_auto_tokenizer()
    n_prompt = sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == (n_prompt, 12)


def test_dynamo_14510_top_logprobs_zero_gives_empty_alternatives(plain_fake_server: ServerHandle) -> None:
    """ai-dynamo/dynamo#14510: ``logprobs: true, top_logprobs: 0`` on the chat route answered
    ``logprobs.content: null``. Expected (OpenAI's reference: ``top_logprobs`` 0..20): one entry per
    generated token with the chosen token's log-probability and ``top_logprobs: []``, unstreamed and
    streamed alike; the tokens spell the content."""
    body = {"model": FAKE_MODEL, "messages": HI, "max_tokens": 4, "logprobs": True, "top_logprobs": 0}
    full = ChatCompletion.model_validate(_ok(plain_fake_server, CHAT, body))
    entries = full.choices[0].logprobs.content
    assert len(entries) == full.usage.completion_tokens == 4
    assert all(e.top_logprobs == [] and isinstance(e.logprob, float) for e in entries)
    assert "".join(e.token for e in entries) == full.choices[0].message.content
    streamed = []
    for raw in sse(plain_fake_server, CHAT, body):
        for ch in ChatCompletionChunk.model_validate(raw).choices:
            if ch.logprobs is not None and ch.logprobs.content:
                streamed.extend(ch.logprobs.content)
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in entries]


def test_fms_orchestrator_477_streamed_completion_logprobs_match_their_chunk(
    plain_fake_server: ServerHandle,
) -> None:
    """foundation-model-stack/fms-guardrails-orchestrator#477: streamed ``/v1/completions`` with
    ``logprobs`` put the first token of the next chunk into the previous chunk's log-probabilities
    (off by one). Expected: in every chunk the ``tokens`` spell exactly that chunk's ``text`` and
    each ``text_offset`` is the token's character position in the whole completion."""
    body = {"model": FAKE_MODEL, "prompt": "Hi there!", "max_tokens": 12, "logprobs": 2}
    pos, seen = 0, 0
    for raw in sse(plain_fake_server, COMPLETIONS, body):
        for ch in raw["choices"]:
            lp = ch.get("logprobs")
            if not ch["text"]:
                assert not lp or not lp["tokens"], raw
                continue
            assert "".join(lp["tokens"]) == ch["text"], raw
            offs = [pos + len("".join(lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
            assert lp["text_offset"] == offs, raw
            pos += len(ch["text"])
            seen += len(lp["tokens"])
    assert seen == 12


def test_ollama_5312_max_tokens_one_finishes_with_length(plain_fake_server: ServerHandle) -> None:
    """ollama/ollama#5312: a chat answer cut at ``max_tokens: 1`` said ``finish_reason: "stop"``.
    Expected (OpenAI's reference: ``"length"`` when the token limit was reached): one completion
    token, the fake model's first token, ``finish_reason: "length"`` unstreamed and streamed, on
    the chat and the completions routes."""
    first = hf_auto_tokenizer().decode(hf_auto_tokenizer().encode(FAKE_TEXT, add_special_tokens=False)[:1])
    for path, extra in ((CHAT, {"messages": HI}), (COMPLETIONS, {"prompt": "Hi"})):
        body = {"model": FAKE_MODEL, "max_tokens": 1, **extra}
        raw = _ok(plain_fake_server, path, body)
        ch = raw["choices"][0]
        assert (ch.get("text") or (ch.get("message") or {}).get("content")) == first, raw
        assert ch["finish_reason"] == "length" and raw["usage"]["completion_tokens"] == 1
        assert _finishes(sse(plain_fake_server, path, body)) == [(0, "length")], path


def test_dynamo_3038_penalties_outside_range_are_a_400(plain_fake_server: ServerHandle) -> None:
    """ai-dynamo/dynamo#3038 (and huggingface/text-generation-inference#1913, where a client
    refused the valid negative values): ``frequency_penalty`` / ``presence_penalty`` outside
    OpenAI's documented [-2.0, 2.0] reached the sampler. Expected: a value outside the range is
    an OpenAI-shaped 400 naming the field, on the chat and completions routes; a value inside it,
    negative or at the bound, is served."""
    for path, extra in ((CHAT, {"messages": HI}), (COMPLETIONS, {"prompt": "Hi"})):
        for field in ("frequency_penalty", "presence_penalty"):
            for bad in (2.5, -2.01):
                r = post(plain_fake_server, path, {"model": FAKE_MODEL, "max_tokens": 1, **extra, field: bad})
                assert r.status_code == 400 and r.json()["param"] == field, r.text
            for good in (-1.0, 2.0, -2.0):
                _ok(plain_fake_server, path, {"model": FAKE_MODEL, "max_tokens": 1, **extra, field: good})


def _prompt_ids(server: ServerHandle, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt ids the chat route rendered for ``messages`` (``return_prompt_token_ids``)."""
    body = {"model": FAKE_MODEL, "messages": messages, "max_tokens": 1, "return_prompt_token_ids": True}
    return _ok(server, CHAT, body)["choices"][0]["prompt_token_ids"]


def test_deepseek_r1_151_chat_prompt_has_one_bos(plain_fake_server: ServerHandle) -> None:
    """deepseek-ai/DeepSeek-R1#151: rendering the chat template as text and then tokenizing it with
    ``add_bos_token`` gave two BOS tokens at the start of the prompt. Expected (DeepSeek's
    encoding: one ``<｜begin▁of▁sentence｜>`` opens the conversation): the chat route's prompt ids
    hold the tokenizer's BOS id exactly once, at position 0, for a single user turn, a system
    prompt with several turns, and the ids ``/v1/tokenize`` reports for the same messages."""
    bos = hf_auto_tokenizer().bos_token_id
    shapes = [
        HI,
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Yo"},
            {"role": "user", "content": "Again"},
        ],
    ]
    for msgs in shapes:
        ids = _prompt_ids(plain_fake_server, msgs)
        assert ids[0] == bos and ids.count(bos) == 1, ids
        tokenized = _ok(plain_fake_server, "/v1/tokenize", {"model": FAKE_MODEL, "messages": msgs})["tokens"]
        assert tokenized == ids


def test_sglang_3728_continued_assistant_message_gets_no_second_bos(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#3728: a chat whose last message is the assistant's was rendered by
    encoding that message on its own, which put a second BOS after ``<｜Assistant｜>``
    (``...<｜Assistant｜><｜begin▁of▁sentence｜>"An apple a day``). Expected: continuing the final
    assistant message (``continue_final_message`` or DeepSeek's ``prefix: true``) gives prompt ids
    with one BOS, at position 0, ending with exactly the tokenizer's ids of the assistant text,
    and the answer continues it (no EOS after it)."""
    tok = hf_auto_tokenizer()
    text = '"An apple a day'
    want_tail = tok.encode(text, add_special_tokens=False)
    for last, extra in (
        ({"role": "assistant", "content": text, "prefix": True}, {}),
        ({"role": "assistant", "content": text}, {"continue_final_message": True}),
    ):
        body = {
            "model": FAKE_MODEL,
            "messages": [*HI, last],
            "max_tokens": 3,
            "return_prompt_token_ids": True,
        }
        ch = _ok(plain_fake_server, CHAT, {**body, **extra})["choices"][0]
        ids = ch["prompt_token_ids"]
        assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id, ids
        assert ids[-len(want_tail) :] == want_tail and tok.eos_token_id not in ids, ids
        assert (
            ch["finish_reason"] == "length"
            and ch["message"]["content"] == FAKE_TEXT[: len(ch["message"]["content"])]
        )


# --------------------------------------------------------------------------- stopping


def test_vllm_mlx_628_streamed_natural_stop_says_stop(plain_fake_server: ServerHandle) -> None:
    """waybarrios/vllm-mlx#628: a streamed chat answer that ended at EOS never carried
    ``finish_reason: "stop"`` (``length`` worked), so strict clients thought the stream cut.
    Expected: the ``[script]`` answer, which ends at the fake model's EOS, finishes exactly once
    with ``"stop"``, streamed and unstreamed, on the chat and completions routes; the streamed
    text is the script."""
    for path, extra in ((CHAT, {"messages": SCRIPT}), (COMPLETIONS, {"prompt": "[script] What is 6*7?"})):
        body = {"model": FAKE_MODEL, "max_tokens": 200, **extra}
        assert _ok(plain_fake_server, path, body)["choices"][0]["finish_reason"] == "stop"
        chunks = sse(plain_fake_server, path, body)
        assert _finishes(chunks) == [(0, "stop")], path
        if path == COMPLETIONS:
            assert "".join(ch["text"] for c in chunks for ch in c["choices"]) == FAKE_SCRIPT


def test_sglang_1642_chat_ignore_eos(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#1642: ``/v1/chat/completions`` dropped ``ignore_eos`` (benchmarks that
    need a fixed number of tokens stopped at EOS). Expected: the ``[script]`` answer stops at EOS
    with ``"stop"`` and fewer than ``max_tokens`` tokens; with ``ignore_eos: true`` it runs to
    ``max_tokens`` and says ``"length"``, streamed too."""
    body = {"model": FAKE_MODEL, "messages": SCRIPT, "max_tokens": 80}
    plain = _ok(plain_fake_server, CHAT, body)
    assert plain["choices"][0]["finish_reason"] == "stop" and plain["usage"]["completion_tokens"] < 80
    forced = _ok(plain_fake_server, CHAT, {**body, "ignore_eos": True})
    assert forced["choices"][0]["finish_reason"] == "length" and forced["usage"]["completion_tokens"] == 80
    assert _finishes(sse(plain_fake_server, CHAT, {**body, "ignore_eos": True})) == [(0, "length")]


def test_tgi_1544_generate_ignore_eos_generates_past_eos(plain_fake_server: ServerHandle) -> None:
    """huggingface/text-generation-inference#1544: ``ignore_eos_token`` on the native generate
    route was not honoured (one token, ``finish_reason: eos_token``). Expected (SGLang's sampling
    parameters: ``ignore_eos`` keeps generating after EOS): ``/generate`` with ``ignore_eos`` on a
    ``[script]`` prompt returns ``max_new_tokens`` ids that run through the script's ids and the
    EOS id, finish ``length``; without it the ids stop at the script's EOS and finish ``stop``."""
    tok = hf_auto_tokenizer()
    script_ids = tok.encode(FAKE_SCRIPT, add_special_tokens=False)
    n = len(script_ids) + 4
    body = {"text": "[script] q", "sampling_params": {"max_new_tokens": n, "temperature": 0}}
    plain = _ok(plain_fake_server, "/generate", body)
    assert plain["output_ids"] == [*script_ids, FAKE_EOS]  # SGLang's ids end with the stop token
    assert plain["meta_info"]["finish_reason"]["type"] == "stop"
    body["sampling_params"]["ignore_eos"] = True
    forced = _ok(plain_fake_server, "/generate", body)
    ids = forced["output_ids"]
    assert len(ids) == n and ids[: len(script_ids) + 1] == [*script_ids, FAKE_EOS]
    assert forced["meta_info"]["finish_reason"]["type"] == "length"


def test_sglang_85_no_stop_trim_keeps_the_stop_string(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#85: with ``stop: "."`` the returned text never holds the stop string and
    there was no way to keep it. Expected (SGLang's ``no_stop_trim`` sampling parameter): without
    it the text ends just before the first ``"."``; with ``no_stop_trim: true`` it ends with it;
    both finish ``stop`` with the matched string."""
    cut = FAKE_TEXT.index(".")
    body = {"text": "Hi", "sampling_params": {"max_new_tokens": 40, "stop": ".", "temperature": 0}}
    trimmed = _ok(plain_fake_server, "/generate", body)
    assert trimmed["text"] == FAKE_TEXT[:cut]
    body["sampling_params"]["no_stop_trim"] = True
    kept = _ok(plain_fake_server, "/generate", body)
    assert kept["text"] == FAKE_TEXT[: cut + 1]
    for out in (trimmed, kept):
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "."}


def test_vllm_3150_special_stop_token_id_does_not_truncate_text(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#3150: with a special token in ``stop_token_ids`` the output text lost as
    many characters as the special token's text has (``... or inj`` for ``... or injury.``),
    the token having been skipped in detokenization but cut off all the same. Expected: a
    ``[script]`` completion with ``stop_token_ids`` = the id of ``</think>`` (an added special
    token) is exactly the reasoning before it, ``finish_reason: "stop"`` and ``matched_stop`` that
    id, with ``skip_special_tokens`` on and off."""
    tok = hf_auto_tokenizer()
    think_end = tok.convert_tokens_to_ids("</think>")
    assert isinstance(think_end, int) and tok.decode([think_end]) == "</think>"
    for skip in (True, False):
        body = {
            "model": FAKE_MODEL,
            "prompt": "[script] q",
            "max_tokens": 100,
            "stop_token_ids": [think_end],
            "skip_special_tokens": skip,
        }
        ch = _ok(plain_fake_server, COMPLETIONS, body)["choices"][0]
        assert ch["text"] == FAKE_REASONING, (skip, ch)
        assert ch["finish_reason"] == "stop" and ch["matched_stop"] == think_end


def test_smg_1447_stop_strings_and_stop_token_ids_together(plain_fake_server: ServerHandle) -> None:
    """smg-project/smg#1447: ``stop`` strings and ``stop_token_ids`` in one request were not both
    honoured (only one kind was wired, or the pair was refused). Expected: 200, and whichever
    stop comes first in what the fake model writes ends the text -- a stop token id before a
    later stop string (text up to and without that token, ``matched_stop`` the id), a stop string
    before a later stop token (text cut before the string, ``matched_stop`` the string)."""
    tok = hf_auto_tokenizer()
    ids = tok.encode(FAKE_TEXT, add_special_tokens=False)
    quick, fox = ids[1], ids[3]
    assert tok.decode([quick]) == " quick" and tok.decode([fox]) == " fox"
    base = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": 30}
    ch = _ok(plain_fake_server, COMPLETIONS, {**base, "stop": ["fox"], "stop_token_ids": [quick]})["choices"][
        0
    ]
    assert (ch["text"], ch["finish_reason"], ch["matched_stop"]) == (tok.decode(ids[:1]), "stop", quick)
    ch = _ok(plain_fake_server, COMPLETIONS, {**base, "stop": ["quick"], "stop_token_ids": [fox]})["choices"][
        0
    ]
    want = FAKE_TEXT[: FAKE_TEXT.index("quick")]
    assert (ch["text"], ch["finish_reason"], ch["matched_stop"]) == (want, "stop", "quick")


# --------------------------------------------------------------------------- native batches


def test_vllm_10578_one_sampling_params_per_prompt(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#10578: a batch of prompts could not carry one set of sampling parameters
    per prompt through the server. Expected (SGLang's ``/generate``: ``sampling_params`` may be a
    list aligned with ``text``): each prompt of the batch follows its own parameters -- its own
    ``max_new_tokens`` and stop string -- and answers exactly what the same prompt sent alone
    answers."""
    texts = ["Hi", "Yo there", "Hello"]
    params = [
        {"max_new_tokens": 2, "temperature": 0},
        {"max_new_tokens": 5, "temperature": 0},
        {"max_new_tokens": 30, "stop": ["fox"], "temperature": 0},
    ]
    batch = _ok(plain_fake_server, "/generate", {"text": texts, "sampling_params": params})
    assert isinstance(batch, list) and len(batch) == 3
    alone = [
        _ok(plain_fake_server, "/generate", {"text": t, "sampling_params": p}) for t, p in zip(texts, params)
    ]
    assert [b["text"] for b in batch] == [a["text"] for a in alone]
    assert [b["meta_info"]["completion_tokens"] for b in batch[:2]] == [2, 5]
    assert batch[2]["text"] == FAKE_TEXT[: FAKE_TEXT.index("fox")]
    assert [b["meta_info"]["finish_reason"]["type"] for b in batch] == ["length", "length", "stop"]


# --------------------------------------------------------------------------- embedded model


def _prompt_logprobs(server: ServerHandle, prompt: str) -> tuple[list[Any], int]:
    """``/generate`` of ``prompt`` (1 greedy token) with every prompt token's log-probability:
    ``(input_token_logprobs, cached_tokens)``."""
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    m = _ok(server, "/generate", body)["meta_info"]
    return m["input_token_logprobs"], m.get("cached_tokens", 0)


def test_vllm_3914_prompt_logprobs_with_a_warm_prefix_cache(
    more_bugs_server: ServerHandle, mtok: Any
) -> None:
    """vllm-project/vllm#3914 (prefix caching with ``prompt_logprobs``: a crash, then only the
    uncached tail's log-probabilities): a prompt whose prefix sits in the radix cache must still
    get every prompt token's log-probability. Expected: after a plain request warms the cache
    with a prompt longer than one KV page, the same prompt asked with ``logprob_start_len: 0``
    returns one entry per prompt token (the first without a value), ids equal to the tokenizer's,
    values equal to those of a cold run after ``/flush_cache``."""
    prompt = f"Cache probe {uuid.uuid4().hex}: " + "the tide comes in over the sand and goes out, " * 40
    ids = mtok.encode(prompt)
    assert len(ids) > 256
    assert post(more_bugs_server, "/flush_cache", {}).status_code == 200
    cold, cold_cached = _prompt_logprobs(more_bugs_server, prompt)
    _ok(more_bugs_server, "/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 1}})
    warm, warm_cached = _prompt_logprobs(more_bugs_server, prompt)
    assert cold_cached == 0
    for got in (cold, warm):
        assert [e[1] for e in got] == ids and got[0][0] is None
        assert all(isinstance(e[0], float) and e[0] <= 0 for e in got[1:])
    diff = max(abs(a[0] - b[0]) for a, b in zip(warm[1:], cold[1:]))
    assert diff <= 1e-3, (diff, warm_cached)


def test_vllm_3333_request_seed_is_repeatable_under_concurrency(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#3333: the per-request ``seed`` is documented to give repeatable sampled
    output "even when the engine is processing other requests concurrently"; users saw it differ.
    Expected: a ``temperature: 1`` chat request with ``seed: 1234`` answers the same tokens alone
    and while unseeded sampled requests run beside it; a different seed gives a different answer
    (not a greedy one in disguise)."""
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Write a few words about the sea."}],
        "max_tokens": 12,
        "temperature": 1.0,
        "seed": 1234,
        "ignore_eos": True,
    }
    alone = _ok(more_bugs_server, CHAT, body)["choices"][0]["message"]["content"]
    others: list[Any] = []

    def noise() -> None:
        others.append(post(more_bugs_server, CHAT, {**body, "seed": None, "max_tokens": 24}).status_code)

    threads = [threading.Thread(target=noise) for _ in range(3)]
    for t in threads:
        t.start()
    busy = _ok(more_bugs_server, CHAT, body)["choices"][0]["message"]["content"]
    for t in threads:
        t.join()
    assert others == [200, 200, 200]
    assert busy == alone
    others_text = {
        _ok(more_bugs_server, CHAT, {**body, "seed": s})["choices"][0]["message"]["content"]
        for s in (1, 2, 3)
    }
    assert others_text - {alone}


def test_sglang_30188_streamed_chat_top_logprobs_belong_to_their_token(
    more_bugs_server: ServerHandle,
) -> None:
    """sgl-project/sglang#30188: in a streamed chat answer whose chunk held several tokens, every
    token got the first token's ``top_logprobs``. Expected: greedy, each streamed entry's token is
    the first of its own alternatives (with its log-probability), and the streamed entries,
    folded, are the unstreamed ones (tokens, log-probabilities within 1e-4, alternatives)."""
    body = {
        "model": "default",
        "messages": [{"role": "user", "content": "Count: one two three"}],
        "max_tokens": 16,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 3,
    }
    full = ChatCompletion.model_validate(_ok(more_bugs_server, CHAT, body)).choices[0].logprobs.content
    streamed = []
    for raw in sse(more_bugs_server, CHAT, body):
        for ch in ChatCompletionChunk.model_validate(raw).choices:
            if ch.logprobs is not None and ch.logprobs.content:
                streamed.extend(ch.logprobs.content)
    assert len(streamed) == len(full) == 16
    for e in streamed:
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token, e
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-4)
    for s, f in zip(streamed, full):
        assert s.token == f.token and s.logprob == pytest.approx(f.logprob, abs=1e-4)
        assert [t.token for t in s.top_logprobs] == [t.token for t in f.top_logprobs]
