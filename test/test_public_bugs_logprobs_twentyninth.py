"""A twenty-ninth set of public reports on logprobs: the chat ``logprobs`` entry shape (an empty
``top_logprobs`` list when no alternatives are asked for, streamed and not, and the per-entry
keys and UTF-8 ``bytes`` with ``top_logprobs: 2``); a sampled token's logprob read from the
full normalised distribution (not a constant 0); no logprob past the stop token; echoed prompt
logprobs of a ``max_tokens: 0`` completion (the loglikelihood call of evaluation harnesses);
and SGLang's ``token_ids_logprob`` at every prompt position. Each test names its report. All
passed as-is and are kept as regression tests.

Fixtures: the OpenAI routes over the fake tokenizer manager (``openai_fake_tm``) and the
in-process ``Scheduler`` on the random test checkpoint (``sched_model_dir``, vocabulary 1000,
EOS id 1). Oracles: the ``openai`` SDK's own response types, the OpenAI reference's entry keys,
Python's UTF-8 encoder, the float64 full-vocabulary rows of the same request
(``top_logprobs_num`` = vocabulary) and their ``logsumexp``, hand-derived token positions (a
``+100`` bias forces a token), and string concatenation of the echoed tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from dsv4_testutil import random_ids
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai_fake_tm import FakeTM, app_client, oai_client, sse_data_events
from scheduler_testutil import make_scheduler, submit
from sglang_v4.managers.scheduler import Scheduler

VOCAB = 1000  # the scheduler test model's vocabulary
FORCED = 123  # a non-EOS token forced with a +100 bias
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Scheduler:
    return make_scheduler(sched_model_dir)


def _chat(**kw: Any) -> dict[str, Any]:
    return {"model": "dsv4-test", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, **kw}


_FIELDS = {
    "ids": "output_ids",
    "lp": "output_token_logprobs_val",
    "tv": "output_top_logprobs_val",
    "ti": "output_top_logprobs_idx",
    "in_tv": "input_top_logprobs_val",
    "in_ti": "input_top_logprobs_idx",
    "in_tid": "input_token_ids_logprobs_val",
}


def _run(s: Scheduler, rid: str, ids: list[int], n: int, **kw: Any) -> dict[str, Any]:
    """Submit one request and step until idle; its logprob fields concatenated, and its finish."""
    submit(s, rid, ids, n, return_logprob=True, **kw)
    r: dict[str, Any] = {k: [] for k in _FIELDS}
    while s.has_work():
        out = s.step()
        for i, got in enumerate(out.rids if out else []):
            if got != rid:
                continue
            for k, field in _FIELDS.items():
                vals = getattr(out, field)
                if vals:
                    r[k] += vals[i]
            r["finish"] = out.finished_reasons[i]
    return r


def _row(vals: list[float], idx: list[int]) -> torch.Tensor:
    row = torch.full((VOCAB,), float("nan"), dtype=torch.float64)
    row[torch.tensor(idx)] = torch.tensor(vals, dtype=torch.float64)
    assert not torch.isnan(row).any(), "the top list does not cover the vocabulary"
    return row


# --------------------------------------------------------------------------- chat entry shape


@pytest.mark.parametrize("extra", [{}, {"top_logprobs": 0}])
def test_sillytavern_4680_entries_keep_an_empty_top_logprobs_list(tok: Any, extra: dict[str, Any]) -> None:
    """SillyTavern/SillyTavern#4680 and togethercomputer/openapi#245: a server left
    ``top_logprobs`` out of the ``logprobs.content`` entries when no alternatives were asked for,
    and a client that reads the list crashed (the OpenAI schema requires it). Expected, for
    ``logprobs: true`` with ``top_logprobs`` absent or 0, ``n: 2``, streamed and not: every entry
    carries ``token``, ``logprob``, ``bytes`` and ``top_logprobs == []``, one entry per
    completion token, parsed by the ``openai`` SDK's ``ChatCompletion`` / ``ChatCompletionChunk``."""
    tc = app_client(FakeTM(tok))
    r = tc.post(CHAT, json=_chat(logprobs=True, n=2, **extra))
    assert r.status_code == 200, r.text
    parsed = ChatCompletion.model_validate(r.json())
    assert len(parsed.choices) == 2
    for raw, choice in zip(r.json()["choices"], parsed.choices):
        assert choice.logprobs is not None and choice.logprobs.content
        assert len(choice.logprobs.content) == 3  # max_tokens cuts the fixed reply
        for entry in raw["logprobs"]["content"]:
            assert {"token", "logprob", "bytes", "top_logprobs"} <= set(entry)
            assert entry["top_logprobs"] == []
    s = tc.post(CHAT, json=_chat(logprobs=True, stream=True, **extra))
    entries = []
    for ev in sse_data_events(s):
        if ev == "[DONE]":
            continue
        chunk = ChatCompletionChunk.model_validate(ev)
        for ch in ev.get("choices", []):
            if ch.get("logprobs"):
                entries += ch["logprobs"]["content"]
        assert chunk.object == "chat.completion.chunk"
    assert len(entries) == 3 and all(e["top_logprobs"] == [] for e in entries)


def test_llama_cpp_python_1788_entry_keys_and_utf8_bytes(tok: Any) -> None:
    """abetlen/llama-cpp-python#1788 and openai/openai-openapi#144 (the
    ``ChatCompletionTokenLogprob`` schema): each ``logprobs.content`` entry is ``token``,
    ``logprob``, ``bytes`` and ``top_logprobs``; each alternative is ``token``, ``logprob`` and
    ``bytes``. Expected with ``top_logprobs: 2``: exactly those keys, two alternatives per entry
    in descending logprob order, ``bytes`` equal to the UTF-8 encoding of ``token``, and the
    entries' tokens concatenated are the message content."""
    client = oai_client(app_client(FakeTM(tok)))
    c = client.chat.completions.create(
        model="dsv4-test",
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=4,
        logprobs=True,
        top_logprobs=2,
    )
    content = c.choices[0].logprobs.content if c.choices[0].logprobs else None
    assert content and len(content) == 4
    assert "".join(e.token for e in content) == c.choices[0].message.content
    for e in content:
        assert set(e.model_dump()) == {"token", "logprob", "bytes", "top_logprobs"}
        assert e.bytes == list(e.token.encode("utf-8"))
        assert len(e.top_logprobs) == 2
        assert [t.logprob for t in e.top_logprobs] == sorted(
            (t.logprob for t in e.top_logprobs), reverse=True
        )
        for t in e.top_logprobs:
            assert set(t.model_dump()) == {"token", "logprob", "bytes"}
            assert t.bytes == list(t.token.encode("utf-8"))


# --------------------------------------------------------------------------- scheduler values


def test_meta_llama_647_sampled_token_logprob_is_its_full_row_entry(sched: Scheduler) -> None:
    """meta-llama/llama#647: completion logprobs were read before the token was sampled, so every
    one came back ``-0.0``. Expected for a sampled (temperature 1, seeded) request: each output
    token's logprob is its own entry of that step's full-vocabulary row, the row is a normalised
    distribution (float64 ``logsumexp`` 0), and the logprobs are not all 0."""
    r = _run(
        sched,
        "hot",
        random_ids(20, 61),
        8,
        sampling={"temperature": 1.0, "sampling_seed": 9},
        top_logprobs_num=VOCAB,
    )
    assert len(r["ids"]) == len(r["lp"]) == len(r["tv"]) == 8
    for tid, lp, vals, idx in zip(r["ids"], r["lp"], r["tv"], r["ti"]):
        row = _row(vals, idx)
        assert abs(torch.logsumexp(row, 0).item()) < 1e-6
        assert lp == pytest.approx(row[tid].item(), abs=1e-6)
    assert any(lp < -1e-3 for lp in r["lp"])


def test_language_planner_3_no_logprobs_past_the_stop_token(sched: Scheduler) -> None:
    """huangwl18/language-planner#3: the response's ``token_logprobs`` ran past the stop sequence,
    so a mean logprob counted tokens that are not part of the completion. Expected: with a stop
    token forced (a ``+100`` bias) once 2 tokens exist (``min_new_tokens``), the request ends on
    it with a ``stop`` finish, and the output ids, their logprobs and their top lists all have
    exactly 3 entries (none past the stop)."""
    r = _run(
        sched,
        "stop",
        random_ids(16, 67),
        10,
        ignore_eos=False,
        sampling={"stop_token_ids": [FORCED], "logit_bias": {str(FORCED): 100.0}, "min_new_tokens": 2},
        top_logprobs_num=3,
    )
    assert r["ids"][-1] == FORCED and FORCED not in r["ids"][:2]
    assert len(r["ids"]) == len(r["lp"]) == len(r["tv"]) == 3
    assert r["finish"]["type"] == "stop"


def test_verl_7727_token_ids_logprob_at_every_prompt_position(sched: Scheduler) -> None:
    """verl-project/verl#7727 (SGLang's ``token_ids_logprob`` applies one request-wide list to
    every scored prompt position): Expected with ``logprob_start_len: 0``: the first prompt
    position is ``None`` (nothing predicts it) and each later one holds the named tokens'
    logprobs in request order, equal to their entries of that position's full prompt row
    (``top_logprobs_num`` = vocabulary, same request)."""
    ids = random_ids(12, 71)
    named = [999, 3, 500, 3]
    r = _run(sched, "tid", ids, 1, top_logprobs_num=VOCAB, token_ids_logprob=named, logprob_start_len=0)
    assert len(r["in_tid"]) == len(ids) and r["in_tid"][0] is None
    rows = [(v, i) for v, i in zip(r["in_tv"], r["in_ti"]) if v is not None]
    assert len(rows) == len(ids) - 1
    for got, (vals, idx) in zip(r["in_tid"][1:], rows):
        row = _row(vals, idx)
        assert got == pytest.approx([row[t].item() for t in named], abs=1e-5)


# --------------------------------------------------------------------------- echo


def test_lm_eval_2982_echo_with_max_tokens_zero_scores_the_prompt(tok: Any) -> None:
    """EleutherAI/lm-evaluation-harness#2982 and huggingface/lighteval#1093: the loglikelihood
    call (``/v1/completions`` with ``echo: true``, ``logprobs``, ``max_tokens: 0``) needs the
    OpenAI ``choices[].logprobs`` of the prompt. Expected: a 200 whose text is the prompt, whose
    ``tokens`` concatenate to the prompt, ``token_logprobs[0]`` ``None`` (nothing predicts the
    first token) and floats after it, ``text_offset`` the running lengths of ``tokens``, and no
    completion tokens (read through the ``openai`` SDK's ``Completion``)."""
    prompt = "The quick brown fox jumps"
    client = oai_client(app_client(FakeTM(tok)))
    c = client.completions.create(model="dsv4-test", prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    ch = c.choices[0]
    assert ch.text == prompt and ch.logprobs is not None
    tokens = ch.logprobs.tokens or []
    assert "".join(tokens) == prompt and len(tokens) > 1
    lps = ch.logprobs.token_logprobs or []
    assert len(lps) == len(tokens) and lps[0] is None
    assert all(isinstance(v, float) for v in lps[1:])
    assert ch.logprobs.text_offset == [len("".join(tokens[:i])) for i in range(len(tokens))]
    assert c.usage is not None and c.usage.completion_tokens == 0
