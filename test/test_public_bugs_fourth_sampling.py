"""Public reports of request fields that reshape the prompt or the vocabulary, replayed on a real
CPU server (embedded DeepSeek-V4 model, the session's ``more_bugs_server``): DeepSeek-V4's
fill-in-the-middle ``suffix`` on ``/v1/completions`` and vLLM's ``bad_words`` /
``allowed_token_ids``. Each test names its report. (The companion module is
:mod:`test_public_bugs_fourth`.)

Faults found here, fixed:

* ``suffix`` was refused ("suffix is not supported"; vllm-project/vllm#44228,
  sgl-project/sglang#3429), although DeepSeek's completions API serves fill-in-the-middle with it
  and the V4 tokenizer has the FIM tokens. The prompt is now rendered
  ``<｜fim▁begin｜>{prompt}<｜fim▁hole｜>{suffix}<｜fim▁end｜>`` and tokenized as any text prompt;
  the answer is the middle (``entrypoints/fim_prompt.py``). With ``echo`` or a token-id prompt it
  is a 400 naming ``suffix``.
* ``bad_words`` and ``allowed_token_ids`` were refused with a 400 (vllm-project/vllm#19564 asked
  that the server honour them). They are now applied by the sampler with vLLM's meaning
  (``sampling/token_masks.py``): each bad word banned as its token sequences (with and without a
  leading space), for every sample of ``n > 1`` (vllm-project/vllm#17975), and the allowlist as
  the hard constraint: one-token bad words covering it are a 400, and a step where the bans would
  leave no allowed token keeps the allowlist (vllm-project/vllm#57986 emitted token 0, outside it).

Oracles: the served model's tokenizer (the FIM prompt's ids; each bad word's token sequences,
encoded here independently of the server's rule), ``/generate`` on the oracle's ids, the greedy
answer without the constraint, the reports' stated expectations.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from chat_tools_testutil import sse_chunks
from public_bugs_testutil import MODEL, USER, generate, post, sse
from server_fixture import ServerHandle

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(300)

COMPLETIONS = "/v1/completions"
CHAT = "/v1/chat/completions"
FIM_BEGIN, FIM_HOLE, FIM_END = "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"
PREFIX = "def fib(n):\n    if n < 2:\n        return n\n    return "
SUFFIX = "\n\nprint(fib(10))"


@pytest.fixture(scope="module")
def server(more_bugs_server: ServerHandle) -> Iterator[ServerHandle]:
    yield more_bugs_server


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


# --------------------------------------------------------------------------- fill-in-the-middle


def test_vllm_44228_deepseek_v4_fim_suffix(server: ServerHandle, client: Any, mtok: Any) -> None:
    """vllm-project/vllm#44228 (also vllm-project/vllm#9976): ``suffix`` on ``/v1/completions``
    was refused, though DeepSeek's API answers fill-in-the-middle requests with it and the V4
    tokenizer carries the FIM tokens (128800-128802). The prompt the model reads is
    ``<｜fim▁begin｜>{prompt}<｜fim▁hole｜>{suffix}<｜fim▁end｜>`` tokenized as a text prompt (the
    tokenizer's own ids here), and the answer is the middle: the greedy continuation of exactly
    those ids (``/generate`` on them)."""
    rendered = FIM_BEGIN + PREFIX + FIM_HOLE + SUFFIX + FIM_END
    want = mtok(rendered)["input_ids"]
    markers = mtok.convert_tokens_to_ids([FIM_BEGIN, FIM_HOLE, FIM_END])
    assert markers == [128801, 128800, 128802] and all(want.count(m) == 1 for m in markers)
    body = {"model": MODEL, "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 6, "temperature": 0}
    r = post(server, COMPLETIONS, {**body, "return_token_ids": True})
    assert r.status_code == 200, r.text
    choice, usage = r.json()["choices"][0], r.json()["usage"]
    assert choice["prompt_token_ids"] == want and usage["prompt_tokens"] == len(want)
    oracle = generate(server, {"input_ids": want, "sampling_params": {"max_new_tokens": 6, "temperature": 0}})
    assert choice["token_ids"] == oracle["output_ids"] and choice["text"] == oracle["text"]
    got = client.completions.create(model=MODEL, prompt=PREFIX, suffix=SUFFIX, max_tokens=6, temperature=0)
    assert got.choices[0].text == oracle["text"]
    plain = post(server, COMPLETIONS, {**body, "suffix": None, "return_token_ids": True}).json()
    assert plain["choices"][0]["prompt_token_ids"] == mtok(PREFIX)["input_ids"]  # no suffix, no FIM


def test_sglang_3429_suffix_streamed_batched_and_refused_combinations(server: ServerHandle) -> None:
    """sgl-project/sglang#3429: ``suffix`` on ``/v1/completions`` for code completion. Streamed,
    the middle equals the non-streamed one; a batch of prompts gives each prompt's own middle;
    ``echo`` (the FIM prompt is not a prefix of the answer) and token-id prompts (the text around
    the gap must be text) are a 400 naming ``suffix``, and the server keeps serving."""
    body = {"model": MODEL, "prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 5, "temperature": 0}
    whole = post(server, COMPLETIONS, body).json()["choices"][0]["text"]
    streamed = "".join(c["choices"][0]["text"] for c in sse(server, COMPLETIONS, body) if c["choices"])
    assert streamed == whole
    other = "class Stack:\n    def push(self, x):\n        "
    batch = post(server, COMPLETIONS, {**body, "prompt": [PREFIX, other]}).json()["choices"]
    single = post(server, COMPLETIONS, {**body, "prompt": other}).json()["choices"][0]["text"]
    assert [c["text"] for c in sorted(batch, key=lambda c: c["index"])] == [whole, single]
    for bad in ({"echo": True}, {"prompt": [1, 2, 3]}, {"prompt": [[1, 2], [3]]}):
        r = post(server, COMPLETIONS, {**body, **bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "suffix", (bad, r.text)
    assert post(server, COMPLETIONS, {**body, "suffix": ""}).status_code == 200  # "" is no suffix


# --------------------------------------------------------------------------- bad words


def _variants(mtok: Any, word: str) -> list[list[int]]:
    """The token sequences of ``word`` a bad-word ban covers (vLLM's ``SamplingParams`` rule: the
    word without its leading whitespace, and after one space only when that form has as many
    tokens and a different first token), encoded here."""
    w = word.lstrip()
    plain = mtok.encode(w, add_special_tokens=False)
    spaced = mtok.encode(" " + w, add_special_tokens=False)
    return [plain, spaced] if len(spaced) == len(plain) and spaced[0] != plain[0] else [plain]


def _contains(ids: list[int], seq: list[int]) -> bool:
    return any(ids[i : i + len(seq)] == seq for i in range(len(ids) - len(seq) + 1))


def _ids(server: ServerHandle, path: str, body: dict[str, Any]) -> list[list[int]]:
    """Each choice's generated ids (``return_token_ids``), in choice order."""
    r = post(server, path, {**body, "return_token_ids": True})
    assert r.status_code == 200, r.text
    key = "token_ids" if path == COMPLETIONS else "response_token_ids"
    return [c[key] for c in sorted(r.json()["choices"], key=lambda c: c["index"])]


def _word_at(mtok: Any, ids: list[int], length: int) -> tuple[int, str]:
    """A position ``k >= 1`` of ``ids`` whose ``length`` tokens decode to a word that is one of
    those exact sequences (first or middle of a text), and are not earlier in ``ids``."""
    for k in range(1, len(ids) - length + 1):
        seq = ids[k : k + length]
        word = mtok.decode(seq)
        if word.strip() and seq in _variants(mtok, word) and not _contains(ids[: k + length - 1], seq):
            return k, word
    pytest.fail(f"no {length}-token word in the greedy output {ids}")


@pytest.mark.parametrize("path", [COMPLETIONS, CHAT])
def test_vllm_19564_bad_words_are_honoured(server: ServerHandle, mtok: Any, path: str) -> None:
    """vllm-project/vllm#19564: ``bad_words`` sent to the server were ignored (then refused
    here). A word the greedy answer writes in one token, and one it writes in two, are banned:
    the answer is the same up to the word, then writes none of the word's token sequences
    (with or without a leading space), and a two-token word leaves its first token free."""
    base = {"model": MODEL, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    base |= {"prompt": "Once upon a time"} if path == COMPLETIONS else {"messages": USER}
    greedy = _ids(server, path, base)[0]
    for length in (1, 2):
        k, word = _word_at(mtok, greedy, length)
        out = _ids(server, path, {**base, "bad_words": [word]})[0]
        assert out[: k + length - 1] == greedy[: k + length - 1], (word, greedy, out)
        assert out[k + length - 1] != greedy[k + length - 1]
        assert not any(_contains(out, v) for v in _variants(mtok, word) if v), (word, out)


def test_vllm_17975_bad_words_with_n_samples(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#17975: with ``n > 1`` the ``bad_words`` had no effect. A token that
    ``logit_bias`` makes every sample write (+100) is never written by any of three sampled
    choices once its word is a bad word (a ban is ``-inf``; no bias brings it back)."""
    tid = mtok.encode(" cat", add_special_tokens=False)
    assert len(tid) == 1
    body = {
        "model": MODEL,
        "prompt": "Hi",
        "max_tokens": 4,
        "n": 3,
        "seed": 5,
        "temperature": 1.0,
        "ignore_eos": True,
        "logit_bias": {str(tid[0]): 100},
    }
    assert all(ids == tid * 4 for ids in _ids(server, COMPLETIONS, body))  # the bias alone
    for ids in _ids(server, COMPLETIONS, {**body, "bad_words": ["cat"]}):
        assert tid[0] not in ids and not any(_contains(ids, v) for v in _variants(mtok, "cat")), ids
    for ids in _ids(server, CHAT, {**body, "messages": USER, "prompt": None, "bad_words": ["cat"]}):
        assert tid[0] not in ids, ids


def test_vllm_57986_allowed_token_ids_is_the_hard_constraint(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#57986: ``allowed_token_ids`` with ``bad_words`` that banned every
    allowed id emitted token 0 (outside the allowlist) with a 200. Here every generated token is
    in the allowlist (sampled, ``n = 2``); one-token bad words covering the allowlist are a 400
    naming ``bad_words``; a two-token bad word that would empty a step (``[a, a]`` with the
    allowlist ``[a]``) leaves the allowlist in force; ids outside the vocabulary are a 400 naming
    ``allowed_token_ids``."""
    allowed = [mtok.encode(w, add_special_tokens=False)[0] for w in (" red", " green", " blue")]
    body = {"model": MODEL, "prompt": "Colours:", "max_tokens": 6, "n": 2, "seed": 1, "temperature": 1.0}
    for path, extra in ((COMPLETIONS, {}), (CHAT, {"messages": USER, "prompt": None})):
        for ids in _ids(server, path, {**body, **extra, "allowed_token_ids": allowed}):
            assert len(ids) == 6 and set(ids) <= set(allowed), ids
    words = [mtok.decode([t]) for t in allowed]
    r = post(server, COMPLETIONS, {**body, "allowed_token_ids": allowed, "bad_words": words})
    assert r.status_code == 400 and r.json()["error"]["param"] == "bad_words", r.text
    a = allowed[0]
    doubled = mtok.decode([a, a])
    assert [a, a] in _variants(mtok, doubled)
    for ids in _ids(server, COMPLETIONS, {**body, "allowed_token_ids": [a], "bad_words": [doubled]}):
        assert ids == [a] * 6, ids
    for bad in ([129280], [-1], [1, 10**6]):
        r = post(server, COMPLETIONS, {**body, "allowed_token_ids": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "allowed_token_ids", r.text
    r = post(server, COMPLETIONS, {**body, "bad_words": [""]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "bad_words", r.text
    assert post(server, COMPLETIONS, {**body, "bad_words": []}).status_code == 200
    # an empty allowlist would allow nothing: vLLM's 400 ("allowed_token_ids is not None and
    # empty!"), here naming the field too (it was read as unset and generated freely)
    for path, extra in ((COMPLETIONS, {}), (CHAT, {"messages": USER, "prompt": None})):
        r = post(server, path, {**body, **extra, "allowed_token_ids": []})
        assert r.status_code == 400 and r.json()["error"]["param"] == "allowed_token_ids", r.text


def test_allowed_token_ids_with_a_grammar(server: ServerHandle, mtok: Any) -> None:
    """``allowed_token_ids`` with structured outputs (vLLM serves both together). The client's
    own tokenizer gives the ids. An allowlist that shares no token with the grammar (letters for a
    three-digit regex) left every logit masked and the request failed with a 500 "Grammar
    accept_token failed" (streamed too): it is a 400 naming ``allowed_token_ids`` (bad words that
    ban the grammar's only token: a 400 naming ``bad_words``, as the client sent it). A ``choice``
    with the allowlist of its answers' tokens (no EOS among them) answers one of the choices and
    ends with ``stop``: the grammar's end passes the allowlist (it was the same 500 after the
    answer, the grammar then allowing only EOS)."""
    letters = mtok.encode(" hello world", add_special_tokens=False)
    body = {"model": MODEL, "prompt": "Number:", "max_tokens": 6, "temperature": 0}
    bad = {**body, "structured_outputs": {"regex": "[0-9]{3}"}, "allowed_token_ids": letters}
    r = post(server, COMPLETIONS, bad)
    assert r.status_code == 400 and r.json()["error"]["param"] == "allowed_token_ids", r.text
    r = post(server, CHAT, {**bad, "messages": USER, "prompt": None})
    assert r.status_code == 400 and r.json()["error"]["param"] == "allowed_token_ids", r.text
    # streamed, the error comes before any chunk: the same 400 (an error event if it came later)
    r = post(server, COMPLETIONS, {**bad, "stream": True})
    if r.status_code == 200:
        events = sse_chunks(r.text)
        err = next(e["error"] for e in events if "error" in e)
    else:
        assert r.status_code == 400, r.text
        err = r.json()["error"]
    assert err["param"] == "allowed_token_ids", r.text
    # bad words that ban the grammar's only token (the regex "a": the one token "a"), named as sent
    assert len(mtok.encode("a", add_special_tokens=False)) == 1
    r = post(server, COMPLETIONS, {**body, "structured_outputs": {"regex": "a"}, "bad_words": ["a"]})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "bad_words" and err["message"].startswith("bad_words: "), err
    choices = ["yes", "no"]
    ids = sorted({mtok.encode(c, add_special_tokens=False)[0] for c in choices})
    assert all(len(mtok.encode(c, add_special_tokens=False)) == 1 for c in choices)
    r = post(
        server, COMPLETIONS, {**body, "structured_outputs": {"choice": choices}, "allowed_token_ids": ids}
    )
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] in choices and choice["finish_reason"] == "stop", choice
