"""The twenty-fourth set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``) and the incremental detokenization behind their
``gen`` calls, replayed against sglang-v4.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a prompt holding ``FAKE_SCRIPT_TAG`` makes it write
``FAKE_SCRIPT`` then EOS, repeating EOS, with the server's own stop checker deciding the finish).
Oracles: ``FAKE_TEXT`` / ``FAKE_SCRIPT`` and their token ids through the DeepSeek-V4 tokenizer
(``transformers``, independent of the runtime's wrapper: its ``decode`` with the request's
``skip_special_tokens`` / ``spaces_between_special_tokens``), Python's ``str.find`` and ``re.search``
for where a stop string or stop regex ends the text, SGLang 0.5.23's detokenizer rule for trimming
(a matched stop string is cut off; a matched ``stop_regex`` is kept, since its pattern is looked for
literally), and the same program run unstreamed (a cold run). Skipped without the ``sglang``
package (the frontend client; not a project dependency). Every report here passed as-is and is
kept as a regression test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from server_fixture import FAKE_EOS, FAKE_SCRIPT, FAKE_SCRIPT_TAG, FAKE_TEXT, ServerHandle, fake_output_ids

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)

SCRIPT_PROMPT = f"{FAKE_SCRIPT_TAG} Q:"


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


@pytest.fixture
def special_token_flags() -> Iterator[Any]:
    """The frontend's ``global_config`` (whose ``skip_special_tokens_in_output`` and
    ``spaces_between_special_tokens_in_out`` every ``gen`` request carries), restored afterwards."""
    from sglang.lang.global_config import global_config

    saved = (global_config.skip_special_tokens_in_output, global_config.spaces_between_special_tokens_in_out)
    yield global_config
    global_config.skip_special_tokens_in_output, global_config.spaces_between_special_tokens_in_out = saved


def _script_ids(tok: Any) -> list[int]:
    """The fake model's scripted output ids (``FAKE_SCRIPT``, EOS excluded)."""
    return tok.encode(FAKE_SCRIPT, add_special_tokens=False)


def _first_regex_stop(tok: Any, ids: list[int], pattern: str) -> list[int]:
    """The shortest prefix of ``ids`` whose decoded text ``re.search`` finds ``pattern`` in (the
    token the stop checker must end on)."""
    for k in range(1, len(ids) + 1):
        if re.search(pattern, tok.decode(ids[:k])):
            return ids[:k]
    raise AssertionError(f"{pattern!r} never matches the scripted text")


def _gen_program(prompt: str, **gen_kwargs: Any) -> Any:
    @sgl.function
    def prog(s: Any) -> None:
        s += prompt
        s += sgl.gen("a", temperature=0, **gen_kwargs)

    return prog


@pytest.mark.parametrize(("skip", "spaces"), [(True, True), (False, True), (False, False)])
def test_sglang_392_frontend_special_token_flags_reach_the_detokenizer(
    backend: Any, tok: Any, special_token_flags: Any, skip: bool, spaces: bool
) -> None:
    """sgl-project/sglang#392 (``spaces_between_special_tokens`` added to the sampling params; the
    frontend sends it and ``skip_special_tokens`` from its ``global_config`` with every ``gen``).
    Expected: with ``ignore_eos`` the fake model writes the script and then EOS tokens; the
    ``gen``'s text, streamed or not, is the tokenizer's ``decode`` of those ids with the same two
    flags (``transformers`` oracle): EOS's text is there only when special tokens are not
    skipped."""
    special_token_flags.skip_special_tokens_in_output = skip
    special_token_flags.spaces_between_special_tokens_in_out = spaces
    ids = _script_ids(tok)
    n = len(ids) + 3
    out_ids = ids + [FAKE_EOS] * 3
    want = tok.decode(out_ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
    assert (tok.decode([FAKE_EOS]) in want) is not skip

    prog = _gen_program(SCRIPT_PROMPT, max_tokens=n, ignore_eos=True)
    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state["a"] == want
    assert state.get_meta_info("a")["finish_reason"] == {"type": "length", "length": n}
    streamed = prog.run(backend=backend, stream=True)
    assert "".join(streamed.text_iter("a")) == want


@pytest.mark.parametrize("stream", [False, True])
def test_mlx_lm_1754_transformers_28776_first_chunk_keeps_its_leading_space(
    backend: Any, tok: Any, stream: bool
) -> None:
    """ml-explore/mlx-lm#1754 (a streaming detokenizer stripped the leading space of the first
    chunk when the text genuinely starts with one) and huggingface/transformers#28776 (the leading
    space of a chunk's first token was deleted, so chunks could not be rejoined). Expected: the
    fake text starts with a space (``" The"``, one byte-level token); the ``gen``'s first chunk
    starts with it, streamed or not, and the whole text equals the tokenizer's ``decode`` of the
    ids, leading space included."""
    n = 6
    want = tok.decode(fake_output_ids(tok, n))
    assert want.startswith(" ") and want == FAKE_TEXT[: len(want)]
    prog = _gen_program("Q:", max_tokens=n)
    state = prog.run(backend=backend, stream=stream)
    chunks = list(state.text_iter("a")) if stream else [state["a"]]
    assert state.error() is None, state.error()
    assert chunks and chunks[0].startswith(" ")
    assert "".join(chunks) == want


def test_sentencepiece_1043_litgpt_2326_streamed_chunks_are_prefix_decodes(backend: Any, tok: Any) -> None:
    """google/sentencepiece#1043 and Lightning-AI/litgpt#2326 (decoding each new token alone
    dropped the spaces between words: ``Dear[Name],Ihope``). Expected: every cumulative text the
    streamed ``gen`` has yielded is the tokenizer's ``decode`` of some prefix of the output ids
    (``transformers`` oracle), words keep their spaces across the chunks (the CJK run too), no
    chunk carries U+FFFD, and the joined stream equals the unstreamed text (a cold run) with all
    its spaces."""
    n = 30
    ids = fake_output_ids(tok, n)
    whole = {tok.decode(ids[:k]) for k in range(n + 1)}
    prog = _gen_program("Q:", max_tokens=n)
    streamed = prog.run(backend=backend, stream=True)
    seen = ""
    for chunk in streamed.text_iter("a"):
        assert "\ufffd" not in chunk, chunk
        seen += chunk
        assert seen in whole, seen
    cold = prog.run(backend=backend)
    assert streamed.error() is None and cold.error() is None
    assert seen == cold["a"] == tok.decode(ids)
    assert seen.count(" ") == tok.decode(ids).count(" ") > 5


@pytest.mark.parametrize(
    "stop", ["The user asks 6*7; I think 42 </ is it?", "</think>\n\nThe answer", "</b>"]
)
def test_sglang_2699_long_stop_string_spanning_many_tokens(backend: Any, tok: Any, stop: str) -> None:
    """sgl-project/sglang#2699 (review: a stop string spanning the already-decoded text and the
    tail window may be missed when the window holds only ``max stop length`` tokens). Expected, on
    the scripted fake output (the server's stop checker decides): a stop string of many tokens,
    one crossing the think tag, and a one-token one end the ``gen`` where Python's ``str.find``
    sees them; the text is cut before the string (SGLang's trim), ``finish_reason.matched`` names
    it, and the stream yields the same text."""
    cut = FAKE_SCRIPT.find(stop)
    assert cut > 0
    prog = _gen_program(SCRIPT_PROMPT, max_tokens=200, stop=stop)
    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state["a"] == FAKE_SCRIPT[:cut]
    assert state.get_meta_info("a")["finish_reason"] == {"type": "stop", "matched": stop}
    streamed = prog.run(backend=backend, stream=True)
    assert "".join(streamed.text_iter("a")) == FAKE_SCRIPT[:cut]


@pytest.mark.parametrize("pattern", [r"[^a-zA-Z .]{2}", r"[^\x00-\x7f]", r"Stop (?!and)\w+", r"4\d[^ ]"])
def test_sglang_27170_negated_and_lookahead_stop_regex_in_gen(backend: Any, tok: Any, pattern: str) -> None:
    """sgl-project/sglang#27170 (``[^a]`` in a ``stop_regex`` was sized as unbounded; the window a
    pattern is searched in must still hold every match), with the ``stop_regex`` that ``sgl.gen``
    sends. Expected, on the scripted fake output: the ``gen`` ends on
    the first token whose decoded prefix ``re.search`` matches (negated classes, a lookahead),
    ``finish_reason.matched`` is the pattern, the text is that prefix's ``decode`` (SGLang 0.5.23
    keeps a regex match: its trim looks for the pattern literally) or, for a pattern the script
    never matches, the whole script ending on EOS; streamed the same."""
    ids = _script_ids(tok)
    if re.search(pattern, FAKE_SCRIPT) is None:
        want, reason = FAKE_SCRIPT, {"type": "stop", "matched": FAKE_EOS}
    else:
        want = tok.decode(_first_regex_stop(tok, ids, pattern))
        reason = {"type": "stop", "matched": pattern}
    prog = _gen_program(SCRIPT_PROMPT, max_tokens=200, stop_regex=pattern)
    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state.get_meta_info("a")["finish_reason"] == reason
    assert state["a"] == want
    streamed = prog.run(backend=backend, stream=True)
    assert "".join(streamed.text_iter("a")) == want
