"""The twenty-first set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``), replayed against sglang-v4.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a prompt's logprob entries are ``None`` for the first
scored position and ``-0.5 - 0.01 * position`` after it). Oracles: ``FAKE_TEXT`` and the prompts
through the DeepSeek-V4 tokenizer (``transformers``, independent of the runtime's wrapper), the
fake model's logprob formula recomputed here in float64, and the same program run unstreamed (a
cold run). Skipped without the ``sglang`` package (the frontend client; not a project
dependency). Every report here passed as-is and is kept as a regression test.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from server_fixture import ServerHandle, fake_output_text

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)

PROMPT = "Is the sky blue? Answer:"
CHOICES = [" YES", " NO", " Maybe not"]


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


def _fake_prompt_logprob(position: int) -> float:
    """The fake model's logprob of the prompt token at ``position`` (``server_fixture``)."""
    return -0.5 - 0.01 * position


def _select_oracle(tok: Any, prompt: str, choices: list[str]) -> tuple[int, list[list[int]], list[float]]:
    """``(start, ids per choice, normalized logprob per choice)`` as ``RuntimeEndpoint.select``
    must see them: scoring starts two tokens before the prompt's end (its token healing), the
    first scored entry has no value and the rest are averaged."""
    start = max(len(tok.encode(prompt)) - 2, 0)
    ids = [tok.encode(prompt + c)[start:] for c in choices]
    norms = []
    for c_ids in ids:
        vals = [_fake_prompt_logprob(start + j) for j in range(1, len(c_ids))]
        norms.append(sum(vals) / len(vals))
    return start, ids, norms


def test_sglang_2873_choice_logprobs_are_the_tokens_of_each_choice(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#2873 (``gen(choices=[" YES", " NO"], return_logprob=True)``: some
    choices' ``input_token_logprobs`` held other tokens than the choice's). Expected: for every
    choice the entries are the tokens of prompt + choice from the scoring start on (tokenizer
    ids), their text ends with the choice, and the first entry is the token-healing one with no
    value."""

    @sgl.function
    def score(s: Any) -> None:
        s += PROMPT
        s += sgl.gen("answer", choices=CHOICES, choices_method=sgl.token_length_normalized)

    state = score.run(backend=backend)
    assert state.error() is None, state.error()
    _, want_ids, _ = _select_oracle(tok, PROMPT, CHOICES)
    meta = state.get_meta_info("answer")
    assert len(meta["input_token_logprobs"]) == len(CHOICES)
    for c, entries, ids in zip(CHOICES, meta["input_token_logprobs"], want_ids, strict=True):
        assert [e[1] for e in entries] == ids, c
        assert tok.decode([e[1] for e in entries]).endswith(c), c
        assert entries[0][0] is None and all(isinstance(e[0], float) for e in entries[1:]), c


def test_sglang_1257_select_normalizes_over_the_choice_tokens_only(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#1257 (``RuntimeEndpoint.select`` sliced ``input_token_logprobs`` wrongly,
    so the preceding prompt token entered the normalized score). Expected: each choice's
    ``normalized_prompt_logprobs`` is the float64 mean of the fake model's logprobs of the scored
    tokens after the healing one, and the decision is the choice with the highest mean."""

    @sgl.function
    def pick(s: Any) -> None:
        s += PROMPT
        s += sgl.select("x", choices=CHOICES)

    state = pick.run(backend=backend)
    assert state.error() is None, state.error()
    _, _, want = _select_oracle(tok, PROMPT, CHOICES)
    meta = state.get_meta_info("x")
    assert meta["normalized_prompt_logprobs"] == pytest.approx(want, abs=1e-6)
    assert state["x"] == CHOICES[want.index(max(want))]


def test_sglang_18_async_stream_yields_text_with_its_meta_info(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#18 (``text_async_iter(var_name, return_meta_data=True)``: an async
    stream of a variable with each piece's metadata). Expected: the pieces join into the
    unstreamed run's variable (the fake model's text by the tokenizer), every piece comes with a
    ``meta_info`` dict, and the last one counts the prompt (tokenizer) and the completion."""

    @sgl.function
    def prog(s: Any) -> None:
        s += "Tell me:" + sgl.gen("a", max_tokens=6)

    whole = prog.run(backend=backend)
    assert whole["a"] == fake_output_text(tok, 6)

    async def collect() -> list[tuple[str, dict[str, Any]]]:
        state = prog.run(backend=backend, stream=True)
        return [p async for p in state.text_async_iter("a", return_meta_data=True)]

    pieces = asyncio.run(collect())
    assert pieces and "".join(t for t, _ in pieces) == whole["a"]
    assert all(isinstance(m, dict) for _, m in pieces)
    last = pieces[-1][1]
    assert last["prompt_tokens"] == len(tok.encode("Tell me:")) and last["completion_tokens"] == 6


@pytest.mark.filterwarnings("ignore:Error in stream_executor")
def test_sglang_1564_gen_min_tokens_reaches_the_server(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#1564 (``sgl.gen`` had no ``min_tokens``; #1573 sends it as
    ``min_new_tokens``). Expected: ``min_tokens`` within ``max_tokens`` generates as asked (the
    fake model's text), and one above ``max_tokens`` is the server's 400 naming
    ``min_new_tokens``, which reaches the program state as its error, nothing generated."""

    @sgl.function
    def prog(s: Any, lo: int) -> None:
        s += "Go:" + sgl.gen("a", min_tokens=lo, max_tokens=4)

    ok = prog.run(lo=2, backend=backend)
    assert ok.error() is None and ok["a"] == fake_output_text(tok, 4)
    bad = prog.run(lo=5, backend=backend)
    assert isinstance(bad.error(), RuntimeError) and "min_new_tokens" in str(bad.error())
    assert bad.text() == "Go:"


def test_sglang_106_cache_prefix_and_a_batch_over_the_cached_prefix(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#106 (``cache_prefix`` of the backend was a stub; ``RuntimeEndpoint``
    sends the prefix as a ``max_new_tokens=0`` ``/generate``, and ``run_batch`` calls it for a
    program whose constant prefix, found by tracing, is longer than 64 characters). Expected:
    ``cache_prefix`` succeeds, and a ``run_batch`` over such a program answers every item as a
    single run does (the fake model's text by the tokenizer; ``prompt_tokens`` is the tokenizer's
    count of prefix + question)."""
    prefix = "You are a careful assistant. Read the question, then answer briefly. " * 2
    assert len(prefix) > 64
    assert backend.cache_prefix(prefix) is None

    @sgl.function
    def qa(s: Any, q: str) -> None:
        s += prefix
        s += "Q: " + q + "\nA:" + sgl.gen("a", max_tokens=3)

    questions = ["one?", "two?", "three?"]
    states = qa.run_batch([{"q": q} for q in questions], backend=backend, num_threads=2)
    for q, st in zip(questions, states, strict=True):
        assert st.error() is None, st.error()
        assert st["a"] == fake_output_text(tok, 3)
        assert st.get_meta_info("a")["prompt_tokens"] == len(tok.encode(prefix + "Q: " + q + "\nA:"))
        assert st.text() == qa.run(q=q, backend=backend).text()
