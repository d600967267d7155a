"""A twenty-fourth set of public bug reports, replayed against the legacy ``POST /v1/completions``
route: batches of text and of token-id prompts, per-choice ``text_offset`` of a batch, vLLM's token
fields on a token-id prompt with ``logprobs: true``, echo of a prompt that starts with a special
token, lm-eval's ``max_tokens: 0`` scoring request, stop strings (whole sequences only, spanning
tokens, streamed, kept by ``include_stop_str_in_output``), a stream's closing chunk when its last
text is empty, ``best_of``, ``suffix`` (fill in the middle) and prompts too long for the context
with echo and logprobs.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the real tokenizer
manager and detokenizer, context 512 tokens: the fake model writes ``FAKE_TEXT``'s tokens, cycled;
fake logprobs ``-0.5 - 0.01 * position`` for prompt tokens, ``-0.25`` for output tokens) and
``tok`` (the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own). Oracles: the tokenizer
(ids, per-token texts, decoded texts), Python's ``str`` operations on ``FAKE_TEXT``, the ``openai``
client's types, the OpenAI API reference and vLLM's documented field meanings.
"""

from __future__ import annotations

from typing import Any

import pytest
from public_bugs_testutil import post, sse
from server_fixture import FAKE_CONTEXT_LEN, ServerHandle, fake_output_ids, fake_output_text

openai = pytest.importorskip("openai")

COMPLETIONS = "/v1/completions"
MODEL = "qa-model"  # plain_fake_server's served name
BOS = "<｜begin▁of▁sentence｜>"
FIM_BEGIN, FIM_HOLE, FIM_END = "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"


def _ok(server: ServerHandle, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer of ``POST /v1/completions`` with ``body`` (model added); asserts 200."""
    r = post(server, COMPLETIONS, {"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _err(server: ServerHandle, body: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI-shaped error of ``POST /v1/completions`` with ``body``; asserts a 400."""
    r = post(server, COMPLETIONS, {"model": MODEL, **body})
    assert r.status_code == 400, (r.status_code, r.text)
    return r.json()["error"]


def _client(server: ServerHandle) -> Any:
    """An ``openai.OpenAI`` client of ``server`` (no retries)."""
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _pieces(tok: Any, ids: list[int]) -> list[str]:
    """Each id's own text as the tokenizer decodes it alone (special tokens kept)."""
    return [tok.decode([i]) for i in ids]


def _starts(tokens: list[str], first: int = 0) -> list[int]:
    """Each token's start in the text the tokens join to (the legacy ``text_offset``)."""
    return [first + sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


def _streamed(chunks: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per choice index: the joined ``text`` and the finish reasons of every chunk, in order."""
    out: dict[int, dict[str, Any]] = {}
    for c in chunks:
        for ch in c["choices"]:
            st = out.setdefault(ch["index"], {"text": "", "finish": []})
            st["text"] += ch["text"]
            st["finish"].append(ch.get("finish_reason"))
    return out


def _joined_logprobs(chunks: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The legacy ``logprobs`` lists of a one-choice stream joined over its chunks (how a stream
    is cut into chunks depends on timing; what it carries in all does not)."""
    out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
    for c in chunks:
        for ch in c["choices"]:
            for k in out:
                out[k] += (ch.get("logprobs") or {}).get(k) or []
    return out


# --------------------------------------------------------------------------- prompt shapes


def test_vllm_5568_batched_text_and_batched_token_ids_answer_alike(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#5568 (batched text *and* batched token ids on the completions API) and
    abetlen/llama-cpp-python#726 (a list of prompts through the ``openai`` client answered as one
    prompt): OpenAI's ``prompt`` is a string, a list of strings, a list of ids or a list of id
    lists. Expected (oracle: the tokenizer and the ``openai`` client's types): three text prompts
    answer three choices, indexed 0..2, each the fake model's text; the same prompts as token-id
    lists answer the same choices; ``usage.prompt_tokens`` is the sum of the prompts' counts."""
    prompts = ["The quick brown fox jumps", "Jack and Jill went up the hill", "Tell me a story."]
    ids = [tok.encode(p, add_special_tokens=False) for p in prompts]
    want = fake_output_text(tok, 4)
    got = _client(plain_fake_server).completions.create(model=MODEL, prompt=prompts, max_tokens=4)
    assert [c.index for c in got.choices] == [0, 1, 2]
    assert [c.text for c in got.choices] == [want] * 3
    assert got.usage is not None and got.usage.prompt_tokens == sum(len(x) for x in ids)
    assert got.usage.completion_tokens == 12
    by_ids = _ok(plain_fake_server, {"prompt": ids, "max_tokens": 4})
    assert [c["text"] for c in by_ids["choices"]] == [want] * 3
    assert by_ids["usage"] == got.usage.model_dump()


def test_vllm_16494_batch_with_logprobs_offsets_each_choice_from_zero(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#16494: a batch of two prompts with ``logprobs: 3`` and no echo; the
    answer shown in the report has ``text_offset`` starting at 0 for the first generated token
    and advancing by each token's length. Expected, per choice (oracle: the tokenizer, vLLM's
    answer shape): ``tokens`` are the generated ids' own texts and join to ``text``,
    ``text_offset`` starts at 0 and advances by each token's length, every ``top_logprobs`` entry
    has at most ``logprobs + 1`` keys with the sampled token's logprob under its own text."""
    got = _ok(
        plain_fake_server,
        {"prompt": ["A robot may not injure a human being", "My name is"], "max_tokens": 6, "logprobs": 3},
    )
    assert len(got["choices"]) == 2
    for ch in got["choices"]:
        lp = ch["logprobs"]
        assert lp["tokens"] == _pieces(tok, fake_output_ids(tok, 6))
        assert "".join(lp["tokens"]) == ch["text"] == fake_output_text(tok, 6)
        assert lp["text_offset"] == _starts(lp["tokens"])
        for token, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            assert isinstance(value, float) and value <= 0
            assert 1 <= len(top) <= 4 and top[token] == value


def test_litellm_17118_token_id_prompt_with_vllm_token_fields(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """BerriAI/litellm#17118: a token-id ``prompt`` sent with ``logprobs``,
    ``return_tokens_as_token_ids`` and ``return_token_ids`` works on vLLM (the report's gateway
    failed on it). The report's ``"logprobs": true`` is sent as the integer 1 of OpenAI's legacy
    reference (the route validates strictly). Expected (oracle: vLLM's documented fields, the
    tokenizer): a 200 whose choice echoes the prompt ids in ``prompt_token_ids``, lists the
    generated ids in ``token_ids`` and writes each logprob token as ``token_id:<id>`` of those
    same ids, each ``top_logprobs`` entry keyed the same way."""
    ids = tok.encode("<｜User｜>hello<｜Assistant｜>", add_special_tokens=False)
    got = _ok(
        plain_fake_server,
        {
            "prompt": ids,
            "temperature": 0.6,
            "max_tokens": 5,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
        },
    )
    ch = got["choices"][0]
    assert ch["prompt_token_ids"] == ids
    assert ch["token_ids"] == fake_output_ids(tok, 5)
    assert ch["logprobs"]["tokens"] == [f"token_id:{i}" for i in ch["token_ids"]]
    for token, top in zip(ch["logprobs"]["tokens"], ch["logprobs"]["top_logprobs"]):
        assert 1 <= len(top) <= 2 and token in top and all(k.startswith("token_id:") for k in top)
    assert got["usage"]["prompt_tokens"] == len(ids)


def test_litellm_17118_boolean_logprobs_read_as_sglang_reads_it(plain_fake_server: ServerHandle) -> None:
    """BerriAI/litellm#17118 sent chat's boolean ``"logprobs": true`` to ``/v1/completions``
    (proxies and clients do); SGLang and vLLM read it through their lax integer validation.
    Expected (oracle: SGLang 0.5.23's own ``CompletionRequest`` gives the integer each boolean
    is read as; a cold run of the same request with that integer): ``true`` / ``false`` answer
    exactly as that integer does, streamed and not, instead of a 400."""
    sglang_protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    base = {"prompt": "Hi", "temperature": 0, "max_tokens": 3}
    for flag in (True, False):
        as_int = sglang_protocol.CompletionRequest(model=MODEL, prompt="Hi", logprobs=flag).logprobs
        assert type(as_int) is int
        got, cold = (
            _ok(plain_fake_server, {**base, "logprobs": flag}),
            _ok(plain_fake_server, {**base, "logprobs": as_int}),
        )
        assert got["choices"][0]["logprobs"] == cold["choices"][0]["logprobs"] is not None
        assert got["choices"][0]["text"] == cold["choices"][0]["text"]
        streamed = sse(
            plain_fake_server, COMPLETIONS, {"model": MODEL, **base, "logprobs": flag, "stream": True}
        )
        cold_streamed = sse(
            plain_fake_server, COMPLETIONS, {"model": MODEL, **base, "logprobs": as_int, "stream": True}
        )
        assert _joined_logprobs(streamed) == _joined_logprobs(cold_streamed)
    # a boolean for another integer field stays a 400 naming it (the route validates strictly)
    assert _err(plain_fake_server, {**base, "max_tokens": True})["param"] == "max_tokens"


def test_vllm_27477_echo_keeps_the_prompts_first_special_token(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#27477: with ``echo`` the prompt's first token (a special token,
    ``<|start|>`` there) came back as ``None`` instead of its id/text. Here the prompt is token ids
    starting with BOS. Expected (oracle: the tokenizer): ``text`` starts with the decoded prompt,
    BOS included; ``tokens[0]`` is BOS's text with a null logprob and null ``top_logprobs`` (it has
    no context), and the prompt's tokens are the ids' own texts in order."""
    ids = [
        tok.convert_tokens_to_ids(BOS),
        *tok.encode("Continue: The quick brown fox", add_special_tokens=False),
    ]
    got = _ok(plain_fake_server, {"prompt": ids, "echo": True, "logprobs": 1, "max_tokens": 2})
    ch = got["choices"][0]
    prompt_text = tok.decode(ids)
    assert prompt_text.startswith(BOS)
    assert ch["text"] == prompt_text + fake_output_text(tok, 2)
    lp = ch["logprobs"]
    assert lp["tokens"][: len(ids)] == _pieces(tok, ids) and lp["tokens"][0] == BOS
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) for v in lp["token_logprobs"][1:])
    assert lp["text_offset"] == _starts(lp["tokens"])


def test_lm_eval_1411_echo_max_tokens_zero_scores_the_prompt_only(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """EleutherAI/lm-evaluation-harness#1411: lm-eval's loglikelihood request -- ``echo: true,
    max_tokens: 0, temperature: 0, logprobs: 10`` over a batch of prompts -- answered a 500.
    Expected (oracle: the tokenizer, the ``openai`` client's types): one choice per prompt whose
    ``text`` is the prompt, whose ``tokens`` are exactly the prompt's tokens (first logprob null),
    ``finish_reason`` ``length`` and no completion tokens in ``usage``."""
    prompts = ["Question: 2 + 2 =\nAnswer: 4", "The sky is blue"]
    got = _client(plain_fake_server).completions.create(
        model=MODEL, prompt=prompts, echo=True, max_tokens=0, temperature=0, logprobs=10
    )
    assert [c.index for c in got.choices] == [0, 1]
    for prompt, ch in zip(prompts, got.choices):
        ids = tok.encode(prompt, add_special_tokens=False)
        assert ch.text == prompt and ch.finish_reason == "length"
        assert ch.logprobs is not None and ch.logprobs.tokens == _pieces(tok, ids)
        assert ch.logprobs.token_logprobs[0] is None
        assert all(isinstance(v, float) and v <= 0 for v in ch.logprobs.token_logprobs[1:])
        assert all(1 <= len(t) <= 11 for t in ch.logprobs.top_logprobs[1:])
    n_prompt = sum(len(tok.encode(p, add_special_tokens=False)) for p in prompts)
    assert got.usage is not None and (got.usage.prompt_tokens, got.usage.completion_tokens) == (n_prompt, 0)


# --------------------------------------------------------------------------- stop strings


def test_omlx_2386_a_stop_sequence_fires_only_when_whole(plain_fake_server: ServerHandle, tok: Any) -> None:
    """jundot/omlx#2386: with the stop list ``[">>>>>>> UPDATED", ">>>>>>> UPDATED\\n"]`` the
    completion was cut at ``">>>>>>> UPD"`` -- a partial match ended generation. Here: a stop list
    of a sequence and its longer variant, and a sequence only whose prefix the output holds.
    Expected (oracle: ``str.find`` on the fake model's text): the text ends right before the first
    whole occurrence (``finish_reason`` ``stop``, vLLM's ``stop_reason`` the matched string); the
    never-completed sequence does not stop anything (``length``, the full text), streamed too."""
    full = fake_output_text(tok, 12)
    cut = _ok(
        plain_fake_server, {"prompt": "x", "max_tokens": 12, "stop": [" over the lazy", " over the lazy dog"]}
    )
    ch = cut["choices"][0]
    assert ch["text"] == full[: full.find(" over the lazy")]
    assert ch["finish_reason"] == "stop" and ch["stop_reason"] == " over the lazy"
    never = {"prompt": "x", "max_tokens": 12, "stop": [" over the lazy cat"]}
    ch = _ok(plain_fake_server, never)["choices"][0]
    assert (ch["text"], ch["finish_reason"]) == (full, "length")
    streamed = _streamed(sse(plain_fake_server, COMPLETIONS, {"model": MODEL, **never}))[0]
    assert streamed["text"] == full and streamed["finish"][-1] == "length"


def test_pocketllm_245_stop_string_spanning_two_tokens_streamed_and_not(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """lvyufeng/PocketLLM#245: a stop sequence that begins inside one token and ends inside the
    next must be matched on the decoded text, and a stream must hold back the text that may still
    turn out to start it. Here the stop ``"ick bro"`` spans `` quick`` and `` brown``. Expected
    (oracle: ``str.find`` on the fake text; the tokenizer shows the spanning): the text is everything
    before the match, ``finish_reason`` ``stop``; the stream's chunks join to the same text, never
    carry any part of the stop string, and only the last chunk has a finish reason; with
    ``logprobs`` the tokens, streamed or not, join to that text and ``text_offset`` is each
    token's start in it."""
    stop = "ick bro"
    assert all(stop not in p for p in _pieces(tok, fake_output_ids(tok, 12)))  # it spans tokens
    full = fake_output_text(tok, 12)
    want = full[: full.find(stop)]
    body = {"prompt": "x", "max_tokens": 12, "stop": stop, "logprobs": 1}
    ch = _ok(plain_fake_server, body)["choices"][0]
    assert (ch["text"], ch["finish_reason"]) == (want, "stop")
    assert "".join(ch["logprobs"]["tokens"]) == want
    assert ch["logprobs"]["text_offset"] == _starts(ch["logprobs"]["tokens"])
    chunks = sse(plain_fake_server, COMPLETIONS, {"model": MODEL, **body})
    st = _streamed(chunks)[0]
    assert st["text"] == want
    assert st["finish"][-1] == "stop" and all(f is None for f in st["finish"][:-1])
    tokens = [t for c in chunks for ch in c["choices"] for t in ch["logprobs"]["tokens"]]
    offsets = [o for c in chunks for ch in c["choices"] for o in ch["logprobs"]["text_offset"]]
    assert "".join(tokens) == want and offsets == _starts(tokens)


def test_scaleapi_llm_engine_435_include_stop_str_in_output(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """scaleapi/llm-engine#435 (vLLM's ``include_stop_str_in_output``, vllm-project/vllm#1976's
    flag brought to another server): with the flag the stop string stays at the end of the text.
    Expected (oracle: ``str.find`` on the fake text): without the flag the text ends before
    ``" fox"``, with it the text ends with ``" fox"``; both finish ``stop``; the stream's text
    equals the non-streamed one."""
    full = fake_output_text(tok, 12)
    end = full.find(" fox")
    body = {"prompt": "x", "max_tokens": 12, "stop": [" fox"]}
    plain = _ok(plain_fake_server, body)["choices"][0]
    kept = _ok(plain_fake_server, {**body, "include_stop_str_in_output": True})["choices"][0]
    assert (plain["text"], plain["finish_reason"]) == (full[:end], "stop")
    assert (kept["text"], kept["finish_reason"]) == (full[: end + len(" fox")], "stop")
    st = _streamed(
        sse(plain_fake_server, COMPLETIONS, {"model": MODEL, **body, "include_stop_str_in_output": True})
    )
    assert st[0]["text"] == kept["text"] and st[0]["finish"][-1] == "stop"


def test_fms_guardrails_515_stream_sends_the_finish_chunk_when_its_text_is_empty(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """foundation-model-stack/fms-guardrails-orchestrator#515: the last completion chunk, the one
    with ``finish_reason``, was dropped when its ``text`` was empty (a stop string swallowed the
    final token), with ``stream_options`` asking for continuous usage. Expected (oracle: the
    ``openai`` client's stream types): each of ``n: 2`` choices gets exactly one chunk with a
    finish reason (``stop``), the last of its chunks; the joined text equals the non-streamed one;
    the closing usage chunk has no choices and counts both choices' tokens."""
    full = fake_output_text(tok, 12)
    stop = " brown"  # one whole output token: the chunk that meets it has no text to send
    assert stop in _pieces(tok, fake_output_ids(tok, 12))
    body = {"prompt": "x", "max_tokens": 12, "stop": [stop], "n": 2, "temperature": 0}
    want = _ok(plain_fake_server, body)
    stream = _client(plain_fake_server).completions.create(
        model=MODEL,
        prompt="x",
        max_tokens=12,
        stop=[stop],
        n=2,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
    )
    chunks = list(stream)
    texts: dict[int, str] = {0: "", 1: ""}
    finishes: dict[int, list[Any]] = {0: [], 1: []}
    for c in chunks[:-1]:
        for ch in c.choices:
            texts[ch.index] += ch.text
            finishes[ch.index].append(ch.finish_reason)
    for i in (0, 1):
        assert texts[i] == want["choices"][i]["text"] == full[: full.find(stop)]
        assert finishes[i][-1] == "stop" and finishes[i].count("stop") == 1
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.model_dump() == want["usage"]


def test_tgi_2336_openai_client_stream_ends_with_finish_reason_and_usage(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """huggingface/text-generation-inference#2336: a streamed completion read with the ``openai``
    client showed ``finish_reason: ''`` on every chunk and no usage. Expected (oracle: the
    ``openai`` client's ``Completion`` type and OpenAI's documented stream): every chunk parses as
    a ``text_completion``; the choice's chunks carry ``finish_reason`` None until the last, which
    carries ``length``; with ``include_usage`` a last chunk with no choices carries the counts of
    the non-streamed answer."""
    kw = {
        "model": MODEL,
        "prompt": "What are three words that describe Python?",
        "max_tokens": 7,
        "seed": 1337,
    }
    want = _client(plain_fake_server).completions.create(**kw)
    chunks = list(
        _client(plain_fake_server).completions.create(
            **kw, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(c.object == "text_completion" for c in chunks)
    body = [ch for c in chunks[:-1] for ch in c.choices]
    assert "".join(ch.text for ch in body) == want.choices[0].text == fake_output_text(tok, 7)
    assert [ch.finish_reason for ch in body][-1] == "length"
    assert all(ch.finish_reason is None for ch in body[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage == want.usage


# --------------------------------------------------------------------------- best_of, suffix, limits


def test_kekzl_imp_1598_best_of_is_honoured_not_ignored(plain_fake_server: ServerHandle, tok: Any) -> None:
    """kekzl/imp#1598: ``best_of`` was accepted and silently ignored on ``/v1/completions``.
    OpenAI documents it as generating ``best_of`` candidates server-side and returning the best
    ``n``; it must be at least ``n``, cannot be streamed, and every candidate's tokens are billed.
    Expected: ``best_of: 3, n: 1`` answers one choice and ``completion_tokens`` of all three
    candidates; ``best_of < n`` and a streamed ``best_of > n`` are 400s naming ``best_of``."""
    got = _ok(plain_fake_server, {"prompt": "Hello", "max_tokens": 4, "best_of": 3, "n": 1})
    assert len(got["choices"]) == 1 and got["choices"][0]["text"] == fake_output_text(tok, 4)
    assert got["usage"]["completion_tokens"] == 3 * 4
    assert got["choices"][0]["logprobs"] is None  # not asked for: ranking needs none shown
    assert (
        _err(plain_fake_server, {"prompt": "Hello", "max_tokens": 4, "best_of": 1, "n": 2})["param"]
        == "best_of"
    )
    bad = {"prompt": "Hello", "max_tokens": 4, "best_of": 2, "stream": True}
    assert _err(plain_fake_server, bad)["param"] == "best_of"


def test_arbs_io_53_suffix_is_a_fill_in_the_middle_prompt_not_a_400(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """arbs-io/github-copilot-llm-gateway#53: editors send ``suffix`` for inline completion and a
    server answered ``400 suffix is not currently supported`` on every keystroke. DeepSeek's
    completions API takes ``prompt`` + ``suffix`` (fill in the middle). Expected (oracle: the
    tokenizer's FIM control tokens, DeepSeek's documented FIM format): a 200 whose
    ``prompt_tokens`` is the count of ``<｜fim▁begin｜>prompt<｜fim▁hole｜>suffix<｜fim▁end｜>``
    with each marker one token, and whose ``text`` is the middle only (no prompt, no suffix)."""
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
    for marker in (FIM_BEGIN, FIM_HOLE, FIM_END):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1
    rendered = f"{FIM_BEGIN}{prefix}{FIM_HOLE}{suffix}{FIM_END}"
    got = _ok(plain_fake_server, {"prompt": prefix, "suffix": suffix, "max_tokens": 3})
    assert got["usage"]["prompt_tokens"] == len(tok.encode(rendered, add_special_tokens=False))
    assert got["choices"][0]["text"] == fake_output_text(tok, 3)


def test_marin_5331_echo_logprobs_request_past_the_context_is_a_400(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """marin-community/marin#5331: an ``echo`` + ``logprobs`` request whose prompt plus
    ``max_tokens`` exceeds the model's sequence length must be refused, not scored past the
    context. Expected (oracle: the tokenizer's count against the 512-token context): a prompt of
    ``512 - 4`` tokens with ``max_tokens: 8`` is a 400 in OpenAI's error shape naming the limit;
    the same prompt with ``max_tokens: 2`` answers every prompt token's entry plus two; the
    server serves on."""
    unit = " fox"
    k = len(tok.encode(unit, add_special_tokens=False))
    prompt = unit * ((FAKE_CONTEXT_LEN - 4) // k)
    n_prompt = len(tok.encode(prompt, add_special_tokens=False))
    assert FAKE_CONTEXT_LEN - 8 < n_prompt <= FAKE_CONTEXT_LEN - 4
    err = _err(plain_fake_server, {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 8})
    assert err["type"] and str(FAKE_CONTEXT_LEN) in err["message"]
    got = _ok(plain_fake_server, {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 2})
    assert len(got["choices"][0]["logprobs"]["tokens"]) == n_prompt + 2
    assert got["choices"][0]["text"] == prompt + fake_output_text(tok, 2)
