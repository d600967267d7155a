"""A twentieth set of public bug reports, replayed against the legacy ``POST /v1/completions``
route (and chat where the field is shared): vLLM's ``stop_reason`` on each choice (missing here:
added on both routes, streamed and not), prompt-only (``max_tokens: 0``) echo, token id 0 in a
prompt, prompt-major choice order of batched prompts with ``n``, batch choices in prompt order,
the index of every streamed batch choice, streamed echo of one prompt and of a list,
``stream_options`` with and without ``stream``, the usage chunk of a streamed batch, streamed
``return_token_ids`` with ``echo``, token-id prompts single and batched, and echo + logprobs over
characters split across tokens. The other reports passed as-is; their tests are regression guards.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the real tokenizer
manager and detokenizer: the fake model writes ``FAKE_TEXT``'s tokens, cycled; fake
logprobs ``-0.5 - 0.01 * position`` for prompt tokens, ``-0.25`` for output tokens) and
``tok`` (the DeepSeek-V4 tokenizer). Oracles: the tokenizer (ids, texts, the generated text
of N tokens), the ``openai`` client's types, the same request non-streamed or without the
field under test, and the OpenAI / vLLM references' field meanings.
"""

from __future__ import annotations

from typing import Any

import pytest
from public_bugs_testutil import post, sse
from server_fixture import FAKE_EOS, ServerHandle, fake_output_ids, fake_output_text

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402

COMPLETIONS = "/v1/completions"
MODEL = "qa-model"  # plain_fake_server's served name


def _ok(server: ServerHandle, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer of ``POST /v1/completions`` with ``body`` (model added); asserts 200."""
    r = post(server, COMPLETIONS, {"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _stream(server: ServerHandle, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON chunks of the streamed ``body`` (model added), ``[DONE]`` left out."""
    return sse(server, COMPLETIONS, {"model": MODEL, **body})


def _by_index(chunks: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The streamed choices of ``chunks`` grouped by ``index``, in arrival order."""
    out: dict[int, list[dict[str, Any]]] = {}
    for c in chunks:
        for ch in c["choices"]:
            out.setdefault(ch["index"], []).append(ch)
    return out


# --------------------------------------------------------------------------- stop_reason


def test_vllm_2976_stop_reason_names_the_stop_string_or_requested_token(
    plain_fake_server: ServerHandle,
) -> None:
    """vllm-project/vllm#2976: ``finish_reason: "stop"`` alone cannot tell a stop string, a
    requested stop token and EOS apart, so vLLM added ``stop_reason`` to every completions
    choice: the matched stop string, the matched ``stop_token_ids`` id, null for EOS and for a
    length finish. Expected, streamed and not: ``stop_reason`` is ``" brown"`` for that stop
    string, the requested id for a stop token, null for a length finish; the key is present on
    every choice (null by default, as vLLM sends it); the text is the same either way; SGLang's
    ``matched_stop`` keeps naming the EOS id."""
    eos_prompt = "[script] Hi"  # FakeScheduler writes FAKE_SCRIPT, then EOS
    cases = [
        ({"prompt": "Hi", "max_tokens": 8, "stop": [" brown"]}, "stop", " brown"),
        ({"prompt": "Hi", "max_tokens": 8, "stop_token_ids": [5]}, "stop", 5),
        ({"prompt": "Hi", "max_tokens": 2}, "length", None),
        ({"prompt": eos_prompt, "max_tokens": 200}, "stop", None),
    ]
    for body, reason, want in cases:
        whole = _ok(plain_fake_server, body)["choices"][0]
        assert (whole["finish_reason"], whole["stop_reason"]) == (reason, want), (body, whole)
        chunks = _by_index(_stream(plain_fake_server, body))[0]
        assert all("stop_reason" in ch for ch in chunks), chunks
        assert (chunks[-1]["finish_reason"], chunks[-1]["stop_reason"]) == (reason, want), (body, chunks[-1])
        assert all(ch["stop_reason"] is None for ch in chunks[:-1]), chunks
        assert "".join(ch["text"] for ch in chunks) == whole["text"]
    # the EOS finish: SGLang's matched_stop names the EOS id, vLLM's stop_reason stays null
    eos = _ok(plain_fake_server, {"prompt": eos_prompt, "max_tokens": 200})["choices"][0]
    assert eos["matched_stop"] == FAKE_EOS and eos["stop_reason"] is None, eos
    # a requested stop token that is also the EOS id is named: the client asked for it
    asked = _ok(plain_fake_server, {"prompt": "Hi", "max_tokens": 8, "stop_token_ids": [FAKE_EOS]})
    assert asked["choices"][0]["stop_reason"] == FAKE_EOS, asked
    got = Completion.model_validate(_ok(plain_fake_server, cases[0][0]))
    assert got.choices[0].model_extra["stop_reason"] == " brown"
    # the chat route's choices carry it too (vLLM's ChatCompletionResponseChoice has the field)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    for extra, want in (
        ({"stop": [" brown"]}, " brown"),
        ({"stop_token_ids": [5]}, 5),
        ({"max_tokens": 2}, None),
    ):
        r = post(plain_fake_server, "/v1/chat/completions", {**chat, **extra})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["stop_reason"] == want, (extra, r.json())
        last = [
            c for x in sse(plain_fake_server, "/v1/chat/completions", {**chat, **extra}) for c in x["choices"]
        ]
        assert last[-1]["stop_reason"] == want and last[-1]["finish_reason"] is not None, (extra, last[-1])


# --------------------------------------------------------------------------- echo / prompts


def test_vllm_44938_prompt_only_echo_with_max_tokens_zero(plain_fake_server: ServerHandle, tok: Any) -> None:
    """vllm-project/vllm#44938: ``echo: true`` with ``max_tokens: 0`` is the prompt-only
    completion (the scoring idiom of lm-eval's loglikelihood); a frontend refused it, another
    hid nothing of an internal extra token. Expected: the choice's text is the prompt exactly
    (a token-id prompt: its decoded text), ``completion_tokens`` 0 and ``prompt_tokens`` the
    prompt's token count, finish ``length``; with ``logprobs`` one entry per prompt token (the
    first null) and no generated one; streamed: the prompt in one chunk that carries the finish,
    then a usage chunk with the same counts."""
    text = "The quick brown fox"
    ids = tok.encode(text, add_special_tokens=False)
    for prompt, want in ((text, text), (ids, tok.decode(ids))):
        got = _ok(plain_fake_server, {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 1})
        ch, usage = got["choices"][0], got["usage"]
        assert (ch["text"], ch["finish_reason"]) == (want, "length"), ch
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (len(ids), 0), usage
        lp = ch["logprobs"]
        assert len(lp["tokens"]) == len(ids) and "".join(lp["tokens"]) == want, lp
        assert lp["token_logprobs"][0] is None and None not in lp["token_logprobs"][1:], lp
        chunks = _stream(
            plain_fake_server,
            {"prompt": prompt, "max_tokens": 0, "echo": True, "stream_options": {"include_usage": True}},
        )
        texts = [(c["text"], c["finish_reason"]) for x in chunks for c in x["choices"]]
        assert texts == [(want, "length")], chunks
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 0, chunks[-1]
        assert chunks[-1]["usage"]["prompt_tokens"] == len(ids)


def test_sglang_40287_token_id_zero_is_a_prompt_not_an_empty_one(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#40287: a flat token-id prompt ``[0]`` or ``[0, 0]`` was refused as
    "Prompt cannot be empty" (a truthiness check over the ids), while ``[[0]]`` passed. Token id
    0 is a vocabulary entry. Expected: ``[0]``, ``[0, 0]`` and ``[[0], [0, 0]]`` are served, their
    ``prompt_tokens`` the ids' count (1, 2 and 3); ``[]`` and ``[[]]`` stay 400s naming
    ``prompt``."""
    for prompt, n_prompt, n_choices in (([0], 1, 1), ([0, 0], 2, 1), ([[0], [0, 0]], 3, 2)):
        got = _ok(plain_fake_server, {"prompt": prompt, "max_tokens": 1})
        assert got["usage"]["prompt_tokens"] == n_prompt, (prompt, got)
        assert [c["index"] for c in got["choices"]] == list(range(n_choices)), got
    for empty in ([], [[]]):
        r = post(plain_fake_server, COMPLETIONS, {"model": MODEL, "prompt": empty, "max_tokens": 1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text


def test_smg_1957_batched_prompts_with_n_are_prompt_major(plain_fake_server: ServerHandle, tok: Any) -> None:
    """smg-project/smg#1957 (review): sorting the indices of a batched completion with ``n`` hides
    a reversed or interleaved order. Expected (OpenAI's batch order, vLLM's and SGLang's):
    choices come in index order 0..len(prompts)*n-1, choice ``i`` belongs to prompt ``i // n``
    (its echoed text starts with that prompt), non-streamed and streamed alike."""
    prompts, n = ["Alpha one", "Beta two three"], 2
    body = {"prompt": prompts, "n": n, "max_tokens": 2, "echo": True}
    got = _ok(plain_fake_server, body)["choices"]
    assert [c["index"] for c in got] == [0, 1, 2, 3], got
    gen = fake_output_text(tok, 2)
    assert [c["text"] for c in got] == [prompts[i // n] + gen for i in range(4)], got
    streamed = _by_index(_stream(plain_fake_server, body))
    assert sorted(streamed) == [0, 1, 2, 3]
    for i, chs in streamed.items():
        assert chs[0]["text"].startswith(prompts[i // n]), (i, chs)
        assert "".join(c["text"] for c in chs) == got[i]["text"]


def test_lmdeploy_2395_batch_choices_follow_the_prompt_order(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """InternLM/lmdeploy#2395: the choices of a batched ``/v1/completions`` came back in
    completion order, not prompt order. Expected: prompts of different lengths (so their
    requests are not interchangeable) answer choice ``i`` for prompt ``i`` -- its echo is that
    prompt, its index ``i`` -- and ``prompt_tokens`` is the sum of the prompts' token counts."""
    prompts = ["A much longer first prompt of many words here", "Short", "Middle sized prompt"]
    got = _ok(plain_fake_server, {"prompt": prompts, "max_tokens": 3, "echo": True})
    gen = fake_output_text(tok, 3)
    assert [(c["index"], c["text"]) for c in got["choices"]] == [(i, p + gen) for i, p in enumerate(prompts)]
    want_prompt = sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
    assert got["usage"]["prompt_tokens"] == want_prompt, got["usage"]


def test_ik_llama_1303_streamed_batch_choices_carry_their_own_index(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """ikawrakow/ik_llama.cpp#1303: every choice of a batched ``/v1/completions`` reported
    ``index: 0``, streamed and not, so a client could not tell whose text a chunk was. Expected:
    three prompts stream choices with indices exactly {0, 1, 2}, each index's chunks fold to the
    generated text and the same choice non-streamed, each ends with one finish reason; with
    ``logprobs`` each index's ``text_offset`` restarts at 0 (a choice's own text)."""
    prompts = ["Hello world", "Goodbye world", "Test prompt"]
    body = {"prompt": prompts, "max_tokens": 3, "logprobs": 1}
    whole = _ok(plain_fake_server, body)["choices"]
    streamed = _by_index(_stream(plain_fake_server, body))
    assert sorted(streamed) == [0, 1, 2], streamed
    for i, chs in streamed.items():
        assert "".join(c["text"] for c in chs) == whole[i]["text"] == fake_output_text(tok, 3)
        assert [c["finish_reason"] for c in chs][-1] == "length"
        assert all(c["finish_reason"] is None for c in chs[:-1]), chs
        offsets = [o for c in chs for o in c["logprobs"]["text_offset"]]
        assert offsets == whole[i]["logprobs"]["text_offset"] and offsets[0] == 0, (i, offsets)


def test_fastdeploy_3477_streamed_echo_prefixes_each_choice_once(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """PaddlePaddle/FastDeploy#3477: ``echo`` on ``/v1/completions`` worked for one prompt only
    and not at all streamed. Expected (OpenAI: "Echo back the prompt in addition to the
    completion"): for one prompt and for a list of prompts, streamed, each choice's first chunk
    starts with its own prompt and no later chunk repeats it; the folded text equals the
    non-streamed choice's."""
    for prompt in ("以下是你的自我介绍：", ["First prompt", "第二个"]):
        body = {"prompt": prompt, "max_tokens": 4, "echo": True}
        whole = _ok(plain_fake_server, body)["choices"]
        prompts = [prompt] if isinstance(prompt, str) else prompt
        streamed = _by_index(_stream(plain_fake_server, body))
        gen = fake_output_text(tok, 4)
        for i, p in enumerate(prompts):
            chs = streamed[i]
            assert chs[0]["text"].startswith(p) and all(not c["text"].startswith(p) for c in chs[1:]), chs
            assert "".join(c["text"] for c in chs) == whole[i]["text"] == p + gen


# --------------------------------------------------------------------------- streaming usage / ids


def test_vllm_5135_stream_options_on_completions(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#5135 (``stream_options`` on ``CompletionRequest``, with the tests asked
    for in #5135's review): ``stream: true`` without ``stream_options`` or with
    ``include_usage: false`` sends no usage; ``include_usage: true`` ends with one chunk of
    ``choices: []`` and the usage, every other chunk ``usage: null``; ``stream_options`` on a
    request that does not stream is a 400 naming ``stream_options``. The usage equals the
    non-streamed answer's."""
    body = {"prompt": "Hi", "max_tokens": 3}
    for opts in (None, {"include_usage": False}):
        chunks = _stream(plain_fake_server, {**body, **({"stream_options": opts} if opts else {})})
        assert all(c.get("usage") is None for c in chunks), chunks
    chunks = _stream(plain_fake_server, {**body, "stream_options": {"include_usage": True}})
    assert chunks[-1]["choices"] == [] and all(c["usage"] is None for c in chunks[:-1]), chunks
    whole = _ok(plain_fake_server, body)["usage"]
    assert {k: chunks[-1]["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        k: whole[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    }
    r = post(
        plain_fake_server, COMPLETIONS, {"model": MODEL, **body, "stream_options": {"include_usage": True}}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream_options", r.text


def test_fastdeploy_3247_streamed_usage_has_total_tokens_for_a_batch(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """PaddlePaddle/FastDeploy#3247: the usage of a streamed completion's last chunk lacked
    ``total_tokens``. Expected for a batch of two prompts with ``n: 2``: the usage chunk has
    ``prompt_tokens`` (each prompt counted once, as non-streamed), ``completion_tokens`` (every
    choice's tokens: 4 choices x 3) and ``total_tokens`` their sum, as the ``openai`` client's
    ``CompletionUsage`` parses it."""
    from openai.types import CompletionUsage

    prompts = ["Hi there", "Bye now friend"]
    body = {"prompt": prompts, "n": 2, "max_tokens": 3, "stream_options": {"include_usage": True}}
    usage = CompletionUsage.model_validate(_stream(plain_fake_server, body)[-1]["usage"])
    n_prompt = sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
    assert (usage.prompt_tokens, usage.completion_tokens) == (n_prompt, 4 * 3), usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_sglang_30917_streamed_return_token_ids_with_echo(plain_fake_server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#30917 (``return_token_ids`` on ``/v1/completions``, used streamed for
    code completion): the ids must match the text the client sees. Expected, with ``echo``:
    ``prompt_token_ids`` on the first chunk only, equal to the prompt's ids; the chunks'
    ``token_ids`` concatenate to the non-streamed ``token_ids``, the fake model's first 4 ids;
    the text is the prompt plus those ids' text, streamed and not."""
    body = {"prompt": "Hi there", "max_tokens": 4, "return_token_ids": True, "echo": True}
    whole = _ok(plain_fake_server, body)["choices"][0]
    chunks = _by_index(_stream(plain_fake_server, body))[0]
    prompt_ids = tok.encode("Hi there", add_special_tokens=False)
    assert whole["prompt_token_ids"] == chunks[0]["prompt_token_ids"] == prompt_ids
    assert all("prompt_token_ids" not in c for c in chunks[1:]), chunks
    assert [t for c in chunks for t in c["token_ids"]] == whole["token_ids"] == fake_output_ids(tok, 4)
    assert "".join(c["text"] for c in chunks) == whole["text"] == "Hi there" + fake_output_text(tok, 4)


def test_fastdeploy_3311_token_id_prompts_single_and_batched(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """PaddlePaddle/FastDeploy#3311: ``/v1/completions`` must take token ids in ``prompt`` as
    vLLM does -- one list of ids, or a list of such lists (one choice each). Expected: the
    single list gives one choice, the batch one choice per list in order; each echo is the
    tokenizer's decoding of its ids; ``prompt_tokens`` is the number of ids sent."""
    lists = [tok.encode(t, add_special_tokens=False) for t in ("Hello there", "你好，世界", "x")]
    one = _ok(plain_fake_server, {"prompt": lists[0], "max_tokens": 2, "echo": True})
    gen = fake_output_text(tok, 2)
    assert [c["text"] for c in one["choices"]] == [tok.decode(lists[0]) + gen]
    assert one["usage"]["prompt_tokens"] == len(lists[0])
    many = _ok(plain_fake_server, {"prompt": lists, "max_tokens": 2, "echo": True})
    assert [(c["index"], c["text"]) for c in many["choices"]] == [
        (i, tok.decode(ids) + gen) for i, ids in enumerate(lists)
    ]
    assert many["usage"]["prompt_tokens"] == sum(map(len, lists))


def test_vllm_28874_echo_logprob_tokens_of_split_characters(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#28874 (``logprobs: 0``): tokens that carry part of a multi-byte
    character came back as U+FFFD. Expected for an echoed prompt of emoji the tokenizer splits
    into byte tokens: one ``tokens`` entry per prompt token, none holding U+FFFD, joined they are
    the prompt's text; the ``top_logprobs`` keys (the sampled token only) are those same texts;
    streamed the same."""
    prompt = "🤖🦙 ok"
    ids = tok.encode(prompt, add_special_tokens=False)
    assert any("\ufffd" in tok.decode([t]) for t in ids)  # the prompt does split characters
    body = {"prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": 0}
    lp = _ok(plain_fake_server, body)["choices"][0]["logprobs"]
    echoed = lp["tokens"][: len(ids)]
    assert "".join(echoed) == prompt and not any("\ufffd" in t for t in lp["tokens"]), lp
    assert [list(d) for d in lp["top_logprobs"][1:]] == [[t] for t in lp["tokens"][1:]], lp
    streamed = [
        t for c in _stream(plain_fake_server, body) for ch in c["choices"] for t in ch["logprobs"]["tokens"]
    ]
    assert streamed == lp["tokens"]
