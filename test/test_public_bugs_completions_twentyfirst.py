"""A twenty-first set of public bug reports, replayed against the legacy ``POST /v1/completions``
route and the tokenizer routes (``/tokenize``, ``/detokenize``): a one-prompt list with echo and
logprobs, lm-eval's echo + ``logprobs: 1`` scoring request and its ``tokens[ctxlen:]`` slicing,
each batch choice's own finish reason, streamed ``top_logprobs`` per token, ``truncate_prompt_tokens``
on either side, out-of-range and wrapping token ids, prompts too long for the context (streamed
too), ``/tokenize`` counts against the route's ``prompt_tokens``, batched ``/tokenize`` and
``/detokenize`` of special tokens, and vLLM's ``prompt`` field on ``/detokenize`` (missing here:
added next to SGLang's ``text``). The other reports passed as-is; their tests are regression
guards.

Fixtures: ``plain_fake_server`` (``server_fixture.FakeScheduler`` behind the real tokenizer
manager and detokenizer, context 512 tokens: the fake model writes ``FAKE_TEXT``'s tokens, cycled,
or ``FAKE_SCRIPT`` then EOS for a prompt holding ``FAKE_SCRIPT_TAG``; fake logprobs ``-0.5 - 0.01 *
position`` for prompt tokens, ``-0.25`` for output tokens) and ``tok`` (the DeepSeek-V4 tokenizer
loaded by ``transformers`` on its own). Oracles: the tokenizer (ids, per-token texts, decoded
texts), the ``openai`` client's types, the same request as a plain string or non-streamed, and
the OpenAI / vLLM references' field meanings.
"""

from __future__ import annotations

from typing import Any

import pytest
from public_bugs_testutil import post, sse
from server_fixture import FAKE_CONTEXT_LEN, FAKE_SCRIPT_TAG, ServerHandle, fake_output_ids, fake_output_text

openai = pytest.importorskip("openai")

COMPLETIONS = "/v1/completions"
MODEL = "qa-model"  # plain_fake_server's served name
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"


def _ok(server: ServerHandle, body: dict[str, Any], path: str = COMPLETIONS) -> dict[str, Any]:
    """The JSON answer of ``POST path`` with ``body`` (model added); asserts 200."""
    r = post(server, path, {"model": MODEL, **body})
    assert r.status_code == 200, r.text
    return r.json()


def _err(server: ServerHandle, body: dict[str, Any], path: str = COMPLETIONS) -> dict[str, Any]:
    """The OpenAI-shaped error of ``POST path`` with ``body`` (model added); asserts a 400."""
    r = post(server, path, {"model": MODEL, **body})
    assert r.status_code == 400, (r.status_code, r.text)
    return r.json()["error"]


def _pieces(tok: Any, ids: list[int]) -> list[str]:
    """Each id's own text as the tokenizer decodes it alone (special tokens kept)."""
    return [tok.decode([i]) for i in ids]


# --------------------------------------------------------------------------- echo + logprobs


def test_sglang_782_one_prompt_list_with_echo_and_logprobs(plain_fake_server: ServerHandle, tok: Any) -> None:
    """sgl-project/sglang#782: ``prompt: ["Please introduce yourself"]`` (a list of one text)
    with ``echo`` and ``logprobs`` failed where the plain string worked, and the string's answer
    carried ``text_offset: [-1, -1, ...]``. Expected: the list of one answers one choice equal to
    the string prompt's (text, tokens, logprobs, offsets); the tokens are the prompt's tokens then
    the generated ones, joined they are the text, and ``text_offset`` is each token's start in it
    (0 first, never negative)."""
    prompt = "Please introduce yourself"
    body = {"max_tokens": 2, "temperature": 0, "logprobs": 1, "echo": True}
    as_str = _ok(plain_fake_server, {**body, "prompt": prompt})
    as_list = _ok(plain_fake_server, {**body, "prompt": [prompt]})
    assert len(as_list["choices"]) == 1 and as_list["choices"][0]["index"] == 0
    a, b = as_str["choices"][0], as_list["choices"][0]
    assert (a["text"], a["logprobs"]) == (b["text"], b["logprobs"])
    assert as_str["usage"] == as_list["usage"]
    ids = tok.encode(prompt, add_special_tokens=False)
    lp = b["logprobs"]
    assert b["text"] == prompt + fake_output_text(tok, 2)
    assert lp["tokens"] == _pieces(tok, ids) + _pieces(tok, fake_output_ids(tok, 2))
    starts = [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    assert lp["text_offset"] == starts and starts[0] == 0


def test_sglang_1998_lm_eval_echo_logprobs_one_scores_every_prompt_token(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#1998: lm-evaluation-harness scores a continuation with ``echo: true,
    logprobs: 1, max_tokens: 1`` and read nothing back from SGLang. Expected, read through the
    ``openai`` client: one ``token_logprobs`` entry per prompt token plus the generated one, the
    first null (no context) and every other a float <= 0; each ``top_logprobs`` entry (after the
    null first) holds at most ``logprobs + 1`` keys, its own token among them with its logprob."""
    prompt = "The capital of France is Paris"
    client = openai.OpenAI(base_url=plain_fake_server.url + "/v1", api_key="none", max_retries=0)
    got = client.completions.create(
        model=MODEL, prompt=prompt, echo=True, logprobs=1, max_tokens=1, temperature=0
    )
    lp = got.choices[0].logprobs
    assert lp is not None
    n_prompt = len(tok.encode(prompt, add_special_tokens=False))
    assert got.usage is not None and got.usage.prompt_tokens == n_prompt
    assert len(lp.token_logprobs or []) == len(lp.tokens or []) == n_prompt + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(isinstance(x, float) and x <= 0 for x in lp.token_logprobs[1:])
    for token, value, top in zip(lp.tokens[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert top is not None and 1 <= len(top) <= 2, top
        assert top[token] == value, (token, top)


def test_lm_eval_2287_echo_tokens_slice_at_the_prompt_length(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """EleutherAI/lm-evaluation-harness#2287: a harness slices an echoed completion's
    ``logprobs`` at the prompt's token count -- ``tokens[ctxlen:]`` and ``token_logprobs[ctxlen:]``
    are the continuation -- so the arrays must be exactly the prompt's tokens followed by the
    generated ones. Expected (``ctxlen`` from the tokenizer): ``tokens[:ctxlen]`` are the prompt's
    tokens (each id's own text), ``tokens[ctxlen:]`` join to the generated text, and
    ``text_offset[ctxlen]`` is the prompt's length in characters; a batch of two prompts slices
    each choice at its own prompt's length."""
    prompts = ["Question: what is two plus two?\nAnswer:", "Short one"]
    got = _ok(plain_fake_server, {"prompt": prompts, "echo": True, "logprobs": 1, "max_tokens": 3})
    gen = fake_output_text(tok, 3)
    for prompt, ch in zip(prompts, got["choices"]):
        ids = tok.encode(prompt, add_special_tokens=False)
        ctxlen = len(ids)
        lp = ch["logprobs"]
        assert lp["tokens"][:ctxlen] == _pieces(tok, ids), lp["tokens"]
        assert "".join(lp["tokens"][ctxlen:]) == gen
        assert len(lp["token_logprobs"][ctxlen:]) == 3 and None not in lp["token_logprobs"][ctxlen:]
        assert lp["text_offset"][ctxlen] == len(prompt)
        assert ch["text"] == prompt + gen


def test_sglang_39261_streamed_top_logprobs_belong_to_their_own_token(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#39261 (chat; the legacy route shares the risk): when a streamed chunk
    carried several tokens, every token after the first got the first one's ``top_logprobs``.
    Expected on ``/v1/completions``: the streamed ``tokens`` / ``token_logprobs`` /
    ``top_logprobs`` concatenated over the chunks equal the non-streamed answer's, and each
    position's ``top_logprobs`` holds that position's own token with its own logprob."""
    body = {"prompt": "Hello there", "max_tokens": 12, "logprobs": 2, "temperature": 0}
    whole = _ok(plain_fake_server, body)["choices"][0]["logprobs"]
    chunks = sse(plain_fake_server, COMPLETIONS, {"model": MODEL, **body})
    streamed: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
    for c in chunks:
        for ch in c["choices"]:
            for key, vals in streamed.items():
                vals.extend((ch["logprobs"] or {}).get(key, []))
    assert streamed["tokens"] == whole["tokens"] == _pieces(tok, fake_output_ids(tok, 12))
    assert streamed["top_logprobs"] == whole["top_logprobs"]
    for token, value, top in zip(streamed["tokens"], streamed["token_logprobs"], streamed["top_logprobs"]):
        assert top[token] == value, (token, top)


# --------------------------------------------------------------------------- batches


def test_fastdeploy_3246_each_batch_choice_has_its_own_finish_reason(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """PaddlePaddle/FastDeploy#3246: ``/v1/completions`` sent no finish reason non-streamed, and
    the fix's review caught the finish decided from the tokens generated over *all* prompts of
    the batch. Expected: a batch whose first prompt ends at EOS (the fake model's script) and
    whose second runs into ``max_tokens`` answers ``stop`` then ``length``, each choice's own
    reason, non-streamed and streamed alike (one finish per streamed index, on its last chunk)."""
    prompts = [f"{FAKE_SCRIPT_TAG} go", "Plain prompt"]
    body = {"prompt": prompts, "max_tokens": 60}
    got = _ok(plain_fake_server, body)
    assert [c["finish_reason"] for c in got["choices"]] == ["stop", "length"], got["choices"]
    assert got["choices"][1]["text"] == fake_output_text(tok, 60)
    finishes: dict[int, list[Any]] = {0: [], 1: []}
    for c in sse(plain_fake_server, COMPLETIONS, {"model": MODEL, **body}):
        for ch in c["choices"]:
            finishes[ch["index"]].append(ch["finish_reason"])
    for i, want in ((0, "stop"), (1, "length")):
        assert finishes[i][-1] == want and [f for f in finishes[i] if f] == [want], finishes[i]


# --------------------------------------------------------------------------- truncation


def test_vllm_3144_truncate_prompt_tokens_keeps_the_last_n(plain_fake_server: ServerHandle, tok: Any) -> None:
    """vllm-project/vllm#3144 (``truncate_prompt_tokens`` on the completions API): the server
    keeps the prompt's last N tokens. Expected: ``usage.prompt_tokens`` is N, the returned
    ``prompt_token_ids`` are the tokenizer's ids' last N, ``echo`` shows their text; a prompt
    shorter than N is kept whole; a batch of token-id prompts cuts each; N above the context
    length is a 400 naming ``truncate_prompt_tokens``."""
    text = "one two three four five six seven"
    ids = tok.encode(text, add_special_tokens=False)
    body = {
        "prompt": text,
        "max_tokens": 1,
        "truncate_prompt_tokens": 3,
        "echo": True,
        "return_token_ids": True,
    }
    ch = _ok(plain_fake_server, body)
    assert ch["usage"]["prompt_tokens"] == 3
    assert ch["choices"][0]["prompt_token_ids"] == ids[-3:]
    assert ch["choices"][0]["text"] == tok.decode(ids[-3:]) + fake_output_text(tok, 1)
    whole = _ok(plain_fake_server, {**body, "truncate_prompt_tokens": len(ids) + 5})
    assert whole["usage"]["prompt_tokens"] == len(ids) and whole["choices"][0]["text"].startswith(text)
    batch = _ok(plain_fake_server, {**body, "prompt": [[5, 6, 7, 8, 9], [10, 11]], "echo": False})
    assert [c["prompt_token_ids"] for c in batch["choices"]] == [[7, 8, 9], [10, 11]]
    assert batch["usage"]["prompt_tokens"] == 5
    err = _err(plain_fake_server, {**body, "truncate_prompt_tokens": FAKE_CONTEXT_LEN + 1})
    assert err["param"] == "truncate_prompt_tokens", err


def test_vllm_43260_truncation_side_right_keeps_the_first_n(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#43260: ``truncation_side`` picks the end ``truncate_prompt_tokens`` cuts:
    ``"right"`` keeps the first N prompt tokens, ``"left"`` (vLLM's default) the last N. Expected:
    the returned ``prompt_token_ids`` are the tokenizer's ids' first / last N, the echo their
    text, ``prompt_tokens`` N either way; an unknown side is a 400 naming the field."""
    text = "alpha beta gamma delta epsilon zeta"
    ids = tok.encode(text, add_special_tokens=False)
    base = {
        "prompt": text,
        "max_tokens": 1,
        "truncate_prompt_tokens": 2,
        "echo": True,
        "return_token_ids": True,
    }
    for side, want in (("right", ids[:2]), ("left", ids[-2:])):
        got = _ok(plain_fake_server, {**base, "truncation_side": side})
        ch = got["choices"][0]
        assert ch["prompt_token_ids"] == want, (side, ch)
        assert ch["text"] == tok.decode(want) + fake_output_text(tok, 1)
        assert got["usage"]["prompt_tokens"] == 2
    err = _err(plain_fake_server, {**base, "truncation_side": "middle"})
    assert err["param"] == "truncation_side", err


# --------------------------------------------------------------------------- bad ids, long prompts


def test_llama_cpp_12178_negative_prompt_id_is_a_400_and_the_server_serves_on(
    plain_fake_server: ServerHandle,
) -> None:
    """ggml-org/llama.cpp#12178: ``{"prompt": [-1]}`` on ``/v1/completions`` crashed the server
    (an unchecked vocabulary lookup). Expected: a 400 naming ``prompt`` for a negative id, alone
    or inside a batch of id lists (streamed too, before any stream starts), and the server still
    answers the next request."""
    for prompt in ([-1], [[5, 6], [7, -3]]):
        for stream in (False, True):
            err = _err(plain_fake_server, {"prompt": prompt, "max_tokens": 1, "stream": stream})
            assert err["param"] == "prompt" and "-" in err["message"], err
    assert _ok(plain_fake_server, {"prompt": [5, 6], "max_tokens": 1})["usage"]["prompt_tokens"] == 2


def test_surogate_141_token_ids_past_32_bits_are_refused_not_wrapped(plain_fake_server: ServerHandle) -> None:
    """invergent-ai/surogate#141: prompt ids were narrowed to 32 bits with no range check, so
    ``2**32 + 5`` was served as token 5 -- a wrong prompt, silently. Expected: ids at or past the
    vocabulary size (``2**32 + 5``, ``2**63``, ``2**64 + 1``) are a 400 naming ``prompt`` on
    ``/v1/completions`` and naming ``tokens`` on ``/detokenize``, never an answer for another
    token."""
    for big in (2**32 + 5, 2**63, 2**64 + 1):
        err = _err(plain_fake_server, {"prompt": [big], "max_tokens": 1})
        assert err["param"] == "prompt" and str(big) in err["message"], err
        err = _err(plain_fake_server, {"prompt": [[5], [big]], "max_tokens": 1})
        assert err["param"] == "prompt", err
        err = _err(plain_fake_server, {"tokens": [big]}, "/detokenize")
        assert err["param"] == "tokens", err


def test_lmstudio_2339_streamed_prompt_past_the_context_is_an_http_400(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#2339: a prompt longer than the loaded context answered
    HTTP 200 with an empty stream, indistinguishable from a model that said nothing. Expected on
    ``/v1/completions``: a text prompt, a token-id prompt and one entry of a batch past the
    context (512 tokens) each answer HTTP 400 before any stream starts, the message naming the
    context length and the prompt's token count; streamed and not the same error."""
    long_text = "x " * 600
    n_long = len(tok.encode(long_text, add_special_tokens=False))
    assert n_long > FAKE_CONTEXT_LEN
    for prompt, n in ((long_text, n_long), ([5] * 600, 600), (["fine", long_text], n_long)):
        errs = [
            _err(plain_fake_server, {"prompt": prompt, "max_tokens": 1, "stream": stream})
            for stream in (False, True)
        ]
        assert errs[0] == errs[1], errs
        assert str(FAKE_CONTEXT_LEN) in errs[0]["message"] and str(n) in errs[0]["message"], errs[0]


# --------------------------------------------------------------------------- tokenizer routes


def test_vllm_1521_tokenize_count_is_the_completions_prompt_tokens(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#1521: clients count a prompt's tokens with the server's ``/tokenize``
    before sending it. Expected: for a text prompt (plain, multilingual, with a special token's
    text) ``/tokenize``'s ``tokens`` are the tokenizer's own ids, its ``count`` equals the same
    prompt's ``usage.prompt_tokens`` on ``/v1/completions`` with the same ``add_special_tokens``,
    and ``max_model_len`` is the served context length."""
    for text in ("How many tokens is this?", "你好，世界！ mixed text", BOS + "after a special"):
        for add in (True, False):
            tz = _ok(plain_fake_server, {"prompt": text, "add_special_tokens": add}, "/tokenize")
            assert tz["tokens"] == tok(text, add_special_tokens=add).input_ids, (text, add)
            assert tz["count"] == len(tz["tokens"]) and tz["max_model_len"] == FAKE_CONTEXT_LEN
            got = _ok(plain_fake_server, {"prompt": text, "max_tokens": 1, "add_special_tokens": add})
            assert got["usage"]["prompt_tokens"] == tz["count"], (text, add, got["usage"])


def test_llama_cpp_16458_tokenize_a_list_answers_one_id_list_per_text(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """ggml-org/llama.cpp#16458: a batch of texts sent to the tokenize route came back as one
    merged id list, so a client could not tell each text's count. Expected: ``/tokenize`` with a
    list ``prompt`` answers ``tokens`` as one id list per text (the tokenizer's own ids, in
    order, an empty text giving ``[]``) and ``count`` as the list of their lengths; with
    ``return_token_strs`` the token strings are shaped the same."""
    texts = ["some random input", "a some more", "", "你好"]
    got = _ok(
        plain_fake_server,
        {"prompt": texts, "add_special_tokens": False, "return_token_strs": True},
        "/tokenize",
    )
    want = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert got["tokens"] == want
    assert got["count"] == [len(w) for w in want]
    assert got["token_strs"] == [tok.convert_ids_to_tokens(w) for w in want]


def test_llama_cpp_python_1596_detokenize_keeps_special_tokens_on_request(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """abetlen/llama-cpp-python#1596: special tokens such as EOS could not be detokenized at all.
    Expected on ``/detokenize``: by default (SGLang's ``skip_special_tokens: true``) the special
    tokens are left out, with ``skip_special_tokens: false`` they are written out -- each answer
    the tokenizer's own ``decode`` with the same flag -- for one id list and for a batch."""
    ids = tok.encode(BOS + "Hello world" + EOS, add_special_tokens=False)
    assert ids[0] == tok.convert_tokens_to_ids(BOS) and ids[-1] == tok.convert_tokens_to_ids(EOS)
    for skip in (True, False):
        want = tok.decode(ids, skip_special_tokens=skip)
        one = _ok(plain_fake_server, {"tokens": ids, "skip_special_tokens": skip}, "/detokenize")
        assert one["text"] == want, (skip, one)
        many = _ok(plain_fake_server, {"tokens": [ids, ids[1:3]], "skip_special_tokens": skip}, "/detokenize")
        assert many["text"] == [want, tok.decode(ids[1:3], skip_special_tokens=skip)]
    assert _ok(plain_fake_server, {"tokens": ids}, "/detokenize")["text"] == "Hello world"
    assert BOS in tok.decode(ids, skip_special_tokens=False)


def test_ray_61446_detokenize_answers_vllms_prompt_field_too(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """ray-project/ray#61446 (closing ray-project/ray#61113): an engine protocol written against
    vLLM's tokenizer routes reads ``/detokenize``'s answer from vLLM's ``prompt`` field ("returns
    the decoded prompt string"); SGLang answers it as ``text``, so such a client found nothing.
    Expected: the answer carries both names with the same value -- the tokenizer's ``decode`` of
    the ids -- for one id list, and both are lists of texts for a batch of id lists."""
    ids = tok.encode("Round trip through the tokenizer", add_special_tokens=False)
    one = _ok(plain_fake_server, {"tokens": ids}, "/v1/detokenize")
    assert one["prompt"] == one["text"] == tok.decode(ids), one
    many = _ok(plain_fake_server, {"tokens": [ids, ids[:2]]}, "/detokenize")
    assert many["prompt"] == many["text"] == [tok.decode(ids), tok.decode(ids[:2])], many


def test_vllm_5923_chat_tokenize_round_trips_through_detokenize(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#5923 (chat input on ``/tokenize``): its examples tokenize ``messages``
    to the rendered chat prompt's ids -- the count the chat route bills -- and turn those ids back
    into the rendered prompt with ``/detokenize``, answered as ``{"prompt": ...}``. Expected: the
    ``messages`` count equals ``/v1/chat/completions``' ``usage.prompt_tokens`` for the same
    messages; ``/detokenize`` of the ids with ``skip_special_tokens: false`` is the tokenizer's
    own decoding (the template's special tokens written out, the user's text inside), under both
    ``prompt`` and ``text``; re-tokenizing that text as a plain prompt gives the same ids back."""
    messages = [{"role": "user", "content": "Hi there, how are you?"}]
    tz = _ok(plain_fake_server, {"messages": messages}, "/tokenize")
    chat = _ok(plain_fake_server, {"messages": messages, "max_tokens": 1}, "/v1/chat/completions")
    assert tz["count"] == len(tz["tokens"]) == chat["usage"]["prompt_tokens"]
    back = _ok(plain_fake_server, {"tokens": tz["tokens"], "skip_special_tokens": False}, "/detokenize")
    want = tok.decode(tz["tokens"], skip_special_tokens=False)
    assert back["prompt"] == back["text"] == want and want.startswith(BOS), back
    assert "Hi there, how are you?" in want
    again = _ok(plain_fake_server, {"prompt": want, "add_special_tokens": False}, "/tokenize")
    assert again["tokens"] == tz["tokens"]
