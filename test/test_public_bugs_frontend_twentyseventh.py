"""The twenty-seventh set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``: ``select``, stop strings after Chinese text,
multi-turn role helpers and streamed multi-byte ``gen`` text), replayed against sglang-v4.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over, and scores a prompt's token at ``position`` with
``-0.5 - 0.01 * position``, the first scored entry ``None``). Oracles: ``FAKE_TEXT`` and the
prompts through the DeepSeek-V4 tokenizer (``transformers``, independent of the runtime's
wrapper), Python's ``str.find`` for where a stop string cuts the text, the frontend's own code
(its ``ChatTemplate`` for the prompt a program sends, ``compute_normalized_prompt_logprobs`` for
a choice's score, its rule of keeping a turn's text left-stripped), and the same program run
unstreamed (a cold run). Skipped without the ``sglang``
package (the frontend client; not a project dependency).
Every report here passed as-is and is kept as a regression test.
"""

from __future__ import annotations

from typing import Any

import pytest
from server_fixture import ServerHandle, fake_output_text

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


def _choice_scores(tok: Any, prompt: str, choices: list[str]) -> list[float]:
    """Each choice's score as ``RuntimeEndpoint.select`` must compute it on the fake model: scoring
    starts two tokens before the prompt's end, the first entry (no value) is skipped, and the fake
    model's logprobs of the rest are averaged by the frontend's own helper."""
    from sglang.lang.backend.runtime_endpoint import compute_normalized_prompt_logprobs

    start = max(len(tok.encode(prompt)) - 2, 0)
    scores = []
    for c in choices:
        n = len(tok.encode(prompt + c)) - start
        entries = [None] + [-0.5 - 0.01 * (start + j) for j in range(1, n)]
        scores.append(compute_normalized_prompt_logprobs([(v, 0, None) for v in entries]))
    return scores


# --- select --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_857_select_with_and_without_stream(backend: Any, tok: Any, stream: bool) -> None:
    """sgl-project/sglang#857 (``select`` failed when the program was not run with
    ``stream=True``: the interpreter touched the stream event of a non-streamed run). Expected,
    run plainly and streamed: no error; the variable is the choice with the highest
    token-normalized score (the fake model's logprobs over each choice's tokens, the frontend's
    own averaging); the meta info carries those scores; the text is the prompt plus the choice."""
    choices = ["red", "green apple", "blue"]
    prompt = "Pick a colour: "

    @sgl.function
    def pick(s: Any) -> None:
        s += prompt
        s += sgl.select("colour", choices=choices)

    want = _choice_scores(tok, prompt, choices)
    state = pick.run(backend=backend, stream=stream)
    if stream:
        assert "".join(state.text_iter()) == state.text()
    assert state.error() is None, state.error()
    assert state.get_meta_info("colour")["normalized_prompt_logprobs"] == pytest.approx(want, abs=1e-6)
    assert state["colour"] == choices[want.index(max(want))]
    assert state.text() == prompt + state["colour"]


# --- stop strings after Chinese text and multi-turn role helpers --------------------------------


@pytest.mark.parametrize("stop", ["Stop", "世界", "！ St"])
@pytest.mark.parametrize("stream", [False, True])
def test_sglang_36698_stop_string_after_chinese_text(backend: Any, tok: Any, stop: str, stream: bool) -> None:
    """sgl-project/sglang#36698 (on DeepSeek-V4 a stop sequence preceded by Chinese text was not
    detected and generation went on past it, while the same stop after English text worked).
    Expected, on the fake model's ``... 你好，世界！ Stop here.``: a ``gen`` with ``stop`` set to
    ``"Stop"`` (after the Chinese text), ``"世界"`` (a Chinese stop string whose bytes span
    tokens) or ``"！ St"`` (straddling the Chinese and the English) ends at the stop string's
    first occurrence in the decoded text with the stop string cut off (Python's ``str.find`` on
    the ``transformers`` decode), streamed and not; the finish reason is ``stop`` with the
    matched string."""
    full = fake_output_text(tok, 40)
    cut = full.find(stop)
    assert 0 < cut < len(full)

    @sgl.function
    def talk(s: Any) -> None:
        s += "Say something:"
        s += sgl.gen("a", max_tokens=40, temperature=0, stop=stop)

    state = talk.run(backend=backend, stream=stream)
    if stream:
        assert "".join(state.text_iter("a")) == full[:cut]
    assert state.error() is None, state.error()
    assert state["a"] == full[:cut]
    finish = state.get_meta_info("a")["finish_reason"]
    assert finish == {"type": "stop", "matched": stop}, finish


def test_sglang_6031_multi_turn_program_sends_every_earlier_turn(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#6031's multi-turn example (two user turns, each answered by an
    ``assistant(gen(...))``; the frontend's ``state.messages()`` must hold the whole
    conversation). Expected: the second ``gen``'s prompt is the chat template's
    rendering of the system turn, both user turns and the first answer, plus the assistant prefix
    (its ``prompt_tokens`` is that prompt's ``transformers`` token count); each answer is the fake
    model's text; ``state.messages()`` lists the five turns in order with their contents."""
    from sglang.lang.chat_template import get_chat_template

    template = get_chat_template("chatml")

    @sgl.function
    def chat(s: Any) -> None:
        s += sgl.system("Be brief.")
        s += sgl.user("Name a colour.")
        s += sgl.assistant(sgl.gen("first", max_tokens=4, temperature=0))
        s += sgl.user("And another?")
        s += sgl.assistant(sgl.gen("second", max_tokens=6, temperature=0))

    saved = backend.chat_template
    backend.chat_template = template
    try:
        state = chat.run(backend=backend)
    finally:
        backend.chat_template = saved
    assert state.error() is None, state.error()
    first, second = fake_output_text(tok, 4), fake_output_text(tok, 6)
    assert (state["first"], state["second"]) == (first, second)
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": first},
        {"role": "user", "content": "And another?"},
    ]
    prefix = template.role_prefix_and_suffix["assistant"][0]
    prompt = template.get_prompt(turns) + prefix
    assert state.get_meta_info("second")["prompt_tokens"] == len(tok.encode(prompt))
    # the frontend keeps each turn's text with its leading whitespace stripped (its own rule)
    got = [(m["role"], m["content"]) for m in state.messages()]
    assert got == [(t["role"], t["content"].lstrip()) for t in turns] + [("assistant", second.lstrip())]


# --- streamed multi-byte text --------------------------------------------------------------------


def test_tgi_333_streamed_chinese_text_is_never_garbled(backend: Any, tok: Any) -> None:
    """huggingface/text-generation-inference#333 and ggml-org/llama.cpp#4036 (streamed Chinese
    text arrived with missing or U+FFFD characters where a character's bytes span several
    tokens, while the unstreamed text was right) and kekzl/imp#1078 (the same for any non-ASCII
    text over SSE). Expected: a ``gen`` long enough to write ``FAKE_TEXT``'s ``你好，世界！`` twice,
    streamed through ``text_iter``, has no U+FFFD in any chunk, and the chunks join to the
    ``transformers`` decode of the fake tokens, which is also the unstreamed run's text."""
    n = 2 * len(tok.encode(" The quick brown fox jumps over the lazy dog. 你好，世界！ Stop here. Done.")) - 4

    @sgl.function
    def talk(s: Any) -> None:
        s += "Say something:"
        s += sgl.gen("a", max_tokens=n, temperature=0)

    want = fake_output_text(tok, n)
    assert want.count("你好，世界！") == 2
    streamed = talk.run(backend=backend, stream=True)
    chunks = list(streamed.text_iter("a"))
    assert streamed.error() is None, streamed.error()
    assert len(chunks) > 1 and not any("\ufffd" in c for c in chunks), chunks
    assert "".join(chunks) == want
    plain = talk.run(backend=backend)
    assert plain["a"] == want
