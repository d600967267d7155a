"""Legacy ``/v1/completions`` ``logprobs``: the token strings, ``text_offset`` and ``top_logprobs``.

Reports replayed: the token strings did not add up to the text and ``text_offset`` drifted once a
token held part of a multi-byte character (each such token decoded alone to U+FFFD, the fault
exo-explore/exo#1691 reports for per-token decoding; vllm-project/vllm#47815 and
theroyallab/tabbyAPI#141 report ``text_offset`` / ``tokens`` that do not match the text), and a
trimmed stop string's tokens still counted; ``top_logprobs`` lacked the sampled token when it was
not among the ``logprobs`` most likely ones (OpenAI documents up to ``logprobs + 1`` entries; vLLM
returns them so).

Oracles: the tokenizer's own decode of the output ids (the text), the ids a scripted engine
sampled, and the field rules OpenAI documents: ``"".join(tokens)`` is the choice's text,
``text_offset[i]`` is the length of the tokens before ``i``, ``text[text_offset[i]:]`` starts
with the token's own decode wherever that is whole characters, and ``top_logprobs[i]`` holds the
sampled token's text with its ``token_logprobs[i]``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from openai_fake_tm import FakeTM
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from openai_fake_tm import sse_data_events as _sse_events
from sglang_v4.managers.io_struct import GenerateReqInput
from transformers import PreTrainedTokenizerFast

EOS_ID = 1  # <｜end▁of▁sentence｜> of the V4 tokenizer


def _byte_ids(tok: PreTrainedTokenizerFast) -> dict[int, int]:
    """byte value -> id of the byte-level token of that one byte."""
    from sglang_v4.utils import byte_level_token_bytes

    out: dict[int, int] = {}
    for tid in range(len(tok)):
        b = byte_level_token_bytes(tok, tid)
        if b is not None and len(b) == 1:
            out.setdefault(b[0], tid)
    return out


def _output_ids(tok: PreTrainedTokenizerFast, case: str) -> list[int]:
    """Output ids of a case: text in ordinary tokens, or a multi-byte run spelled byte by byte."""
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    if case == "plain":
        return enc("Hello world, general Kenobi.")
    if case == "cjk_emoji":
        return enc("你好，世界 😀🎉 ok")
    if case in ("emoji_bytes", "cjk_bytes"):
        byte_ids = _byte_ids(tok)
        spelled = "😀" if case == "emoji_bytes" else "鼎"
        return (
            enc("A ")
            + [byte_ids[b] for b in spelled.encode()]
            + enc(" B")
            + [byte_ids[b] for b in "€".encode()]
        )
    if case == "stray_bytes":  # continuation bytes that never form a character, then text
        byte_ids = _byte_ids(tok)
        return enc("x") + [byte_ids[0x9F], byte_ids[0x98]] + enc(" y") + [byte_ids[0xE4]]
    if case == "eos":  # a special token that the text skips
        return [*enc("Done."), EOS_ID]
    raise AssertionError(case)


CASES = ["plain", "cjk_emoji", "emoji_bytes", "cjk_bytes", "stray_bytes", "eos"]


class _ScriptedTM(FakeTM):
    """Samples the given ``ids`` (every choice), with the engine's text (the tokenizer's decode,
    special tokens skipped; cut before ``stop`` when it occurs: a matched stop string; before the
    finish without a trailing incomplete character) and, per
    position, ``top_logprobs_num`` candidates that never include the sampled id (as when a sampled
    token is not among the most likely ones)."""

    def __init__(self, tokenizer: Any, ids: list[int], stop: str | None = None) -> None:
        super().__init__(tokenizer)
        self.ids = ids
        self.stop = stop

    def _output(self, sub: GenerateReqInput, k: int) -> list[dict[str, Any]]:
        tok = self.tokenizer
        prompt_ids = list(sub.input_ids) if sub.input_ids is not None else tok.encode(sub.text)
        outs = []
        for j in range(1, len(self.ids) + 1):
            ids = self.ids[:j]
            text = tok.decode(ids, skip_special_tokens=True)
            done = j == len(self.ids)
            finish: dict[str, Any] | None = {"type": "length", "length": j} if done else None
            if self.stop is not None and self.stop in text:
                text, finish, done = (
                    text[: text.index(self.stop)],
                    {"type": "stop", "matched": self.stop},
                    True,
                )
            if not done:  # a stream holds an incomplete character back, as the detokenizer does
                text = text.rstrip("\ufffd")
            meta: dict[str, Any] = {
                "id": sub.rid,
                "finish_reason": finish,
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": j,
            }
            if sub.return_logprob:
                meta["output_token_logprobs"] = [[-1.0 - i, t, tok.decode([t])] for i, t in enumerate(ids)]
                meta["input_token_logprobs"] = [
                    [None if i == 0 else -2.0, t, tok.decode([t])] for i, t in enumerate(prompt_ids)
                ]
                cands = [c for c in (11, 12, 13, 14, 15) if c not in ids][: sub.top_logprobs_num]
                meta["output_top_logprobs"] = [
                    [[-0.1 * (r + 1), c, tok.decode([c])] for r, c in enumerate(cands)] for _ in ids
                ]
            outs.append({"text": text, "output_ids": ids, "meta_info": meta})
            if done:
                break
        return outs


def _check_choice(tok: PreTrainedTokenizerFast, text: str, lp: dict[str, Any], ids: list[int]) -> None:
    """The field rules of the module docstring, for one choice whose token ids are ``ids``."""
    tokens, offsets = lp["tokens"], lp["text_offset"]
    assert "".join(tokens) == text
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    assert len(tokens) == len(ids)
    for i, tid in enumerate(ids):
        alone = tok.decode([tid], skip_special_tokens=True)
        if alone and "\ufffd" not in alone and offsets[i] + len(alone) <= len(text):
            assert text[offsets[i] :].startswith(alone), (i, tid, alone)
            assert tokens[i] == alone
        top = lp["top_logprobs"][i]
        if lp["token_logprobs"][i] is None:
            assert top is None
            continue
        assert top[tokens[i]] == lp["token_logprobs"][i]


def _stream_logprobs(events: list[Any], n: int) -> dict[int, dict[str, Any]]:
    """Per choice index: its streamed text and its logprobs' lists, concatenated over chunks."""
    out = {
        i: {"text": "", "tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        for i in range(n)
    }
    for ev in events[:-1]:
        for ch in ev["choices"]:
            o = out[ch["index"]]
            o["text"] += ch["text"]
            for key in ("tokens", "text_offset", "token_logprobs", "top_logprobs"):
                o[key] += (ch["logprobs"] or {}).get(key) or []
    return out


@pytest.mark.parametrize("echo", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_tokens_join_to_text_and_offsets_are_true(
    tok: PreTrainedTokenizerFast, case: str, echo: bool
) -> None:
    ids = _output_ids(tok, case)
    c = _client(_ScriptedTM(tok, ids))
    prompt = "Q: 你好 😀?"
    body = {"model": "dsv4-test", "prompt": prompt, "max_tokens": 50, "logprobs": 2, "echo": echo, "n": 2}
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    want_text = tok.decode(ids, skip_special_tokens=True)  # the oracle: the tokenizer's decode
    prompt_ids = tok.encode(prompt)
    stream = _stream_logprobs(_sse_events(c.post("/v1/completions", json={**body, "stream": True})), 2)
    for choice in r.json()["choices"]:
        lp = choice["logprobs"]
        assert choice["text"] == (prompt if echo else "") + want_text
        _check_choice(tok, choice["text"], lp, (prompt_ids if echo else []) + ids)
        # streamed: the same tokens, offsets and text, chunk by chunk
        s = stream[choice["index"]]
        assert s["text"] == choice["text"]
        assert {k: s[k] for k in lp} == lp


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("stop", ["你", "orld", ","])
def test_trimmed_stop_string_cuts_the_token_strings(
    tok: PreTrainedTokenizerFast, stop: str, stream: bool
) -> None:
    """A stop string trimmed from the text is not in the token strings either (a token that holds
    text before the stop keeps that part)."""
    ids = tok.encode("Hello world, 你好 again", add_special_tokens=False)
    c = _client(_ScriptedTM(tok, ids, stop=stop))
    body = {"model": "dsv4-test", "prompt": "Q", "max_tokens": 50, "logprobs": 1, "stream": stream}
    full = tok.decode(ids)
    want_text = full[: full.index(stop)]
    r = c.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    if stream:
        lp = _stream_logprobs(_sse_events(r), 1)[0]
        text = lp.pop("text")
    else:
        choice = r.json()["choices"][0]
        text, lp = choice["text"], choice["logprobs"]
    assert text == want_text
    assert "".join(lp["tokens"]) == want_text
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    assert all(o <= len(want_text) for o in lp["text_offset"])


@pytest.mark.parametrize("logprobs", [0, 1, 3])
@pytest.mark.parametrize("stream", [False, True])
def test_top_logprobs_hold_the_sampled_token(
    tok: PreTrainedTokenizerFast, logprobs: int, stream: bool
) -> None:
    """The ``logprobs`` most likely tokens and the sampled one when it is not among them: up to
    ``logprobs + 1`` entries (OpenAI's legacy format as vLLM / SGLang return it)."""
    ids = tok.encode("Hello world", add_special_tokens=False)
    c = _client(_ScriptedTM(tok, ids))
    client = _oai(c)
    kw: dict[str, Any] = {"model": "dsv4-test", "prompt": "Q", "max_tokens": 10, "logprobs": logprobs}
    if stream:
        chunks = [ch for ch in client.completions.create(stream=True, **kw) if ch.choices]
        tokens = [t for ch in chunks for t in ch.choices[0].logprobs.tokens]
        token_lps = [v for ch in chunks for v in ch.choices[0].logprobs.token_logprobs]
        tops = [d for ch in chunks for d in ch.choices[0].logprobs.top_logprobs]
    else:
        lp = client.completions.create(**kw).choices[0].logprobs
        tokens, token_lps, tops = lp.tokens, lp.token_logprobs, lp.top_logprobs
    assert len(tops) == len(ids)
    for i, (t, v, d) in enumerate(zip(tokens, token_lps, tops)):
        cands = [c for c in (11, 12, 13, 14, 15) if c not in ids][:logprobs]
        want = {tok.decode([c]): -0.1 * (r + 1) for r, c in enumerate(cands)}
        want[tok.decode([ids[i]])] = -1.0 - i
        assert t == tok.decode([ids[i]]) and v == -1.0 - i
        assert d == pytest.approx(want)
        assert len(d) == logprobs + 1


def test_sampled_token_among_the_top_is_not_added_twice(tok: PreTrainedTokenizerFast) -> None:
    """When the sampled token is one of the candidates the dict has ``logprobs`` entries."""
    c = _client(FakeTM(tok))  # its candidates: the sampled token first, then id 5
    body = {"model": "dsv4-test", "prompt": "Q", "max_tokens": 4, "logprobs": 2}
    lp = c.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
    assert [len(d) for d in lp["top_logprobs"]] == [2, 2, 2, 2]
    for t, v, d in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert d[t] == v


# ---------------------------------------------------------------------------------------------
# The real server on the embedded tiny model (random weights: its sampled tokens are seldom the
# most likely ones, and it writes CJK and partial characters often).


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = requests.post(url + "/v1/completions", json={"model": "default", **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.slow
@pytest.mark.parametrize("echo", [False, True])
def test_real_server_logprob_tokens(embedded_model_server, tok: PreTrainedTokenizerFast, echo: bool) -> None:
    url = embedded_model_server.url
    prompt = "你好 😀 Hello"
    body = {
        "prompt": prompt,
        "max_tokens": 24,
        "logprobs": 1,
        "echo": echo,
        "n": 2,
        "temperature": 1.0,
        "seed": 7,
        "return_token_ids": True,
    }
    r = _post(url, body)
    sampled_outside_top = 0
    for choice in r["choices"]:
        ids = (choice["prompt_token_ids"] if echo else []) + choice["token_ids"]
        assert choice["text"] == (prompt if echo else "") + tok.decode(
            choice["token_ids"], skip_special_tokens=True
        )
        lp = choice["logprobs"]
        _check_choice(tok, choice["text"], lp, ids)
        assert all(d is None or len(d) <= 2 for d in lp["top_logprobs"])
        sampled_outside_top += sum(1 for d in lp["top_logprobs"] if d is not None and len(d) == 2)
    assert sampled_outside_top > 0  # the case of the fix was exercised
    with requests.post(
        url + "/v1/completions", json={"model": "default", **body, "stream": True}, stream=True, timeout=300
    ) as s:
        events = [
            json.loads(line[6:]) for line in s.iter_lines(decode_unicode=True) if line.startswith("data: {")
        ]
    streamed = _stream_logprobs([*events, "[DONE]"], 2)
    for choice in r["choices"]:
        got = streamed[choice["index"]]
        assert got["text"] == choice["text"]  # the seed makes the stream the same samples
        assert got["tokens"] == choice["logprobs"]["tokens"]
        assert got["text_offset"] == choice["logprobs"]["text_offset"]


@pytest.mark.slow
def test_real_server_stop_string_trim(embedded_model_server, tok: PreTrainedTokenizerFast) -> None:
    """A stop string taken from the middle of a cold greedy run's text: the trimmed text's tokens."""
    url = embedded_model_server.url
    body = {"prompt": "Hello 你好", "max_tokens": 20, "temperature": 0, "logprobs": 0}
    cold = _post(url, body)["choices"][0]["text"]
    mid = len(cold) // 2
    stop = cold[mid : mid + 2]
    want = cold[: cold.index(stop)]
    for stream in (False, True):
        if stream:
            with requests.post(
                url + "/v1/completions",
                json={"model": "default", **body, "stop": [stop], "stream": True},
                stream=True,
                timeout=300,
            ) as s:
                events = [
                    json.loads(line[6:])
                    for line in s.iter_lines(decode_unicode=True)
                    if line.startswith("data: {")
                ]
            lp = _stream_logprobs([*events, "[DONE]"], 1)[0]
            text = lp["text"]
        else:
            choice = _post(url, {**body, "stop": [stop]})["choices"][0]
            text, lp = choice["text"], choice["logprobs"]
        assert text == want
        assert "".join(lp["tokens"]) == want
