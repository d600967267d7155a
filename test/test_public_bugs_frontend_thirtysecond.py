"""The thirty-second set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``): forking inside a role block and with one branch,
forks inside ``run_batch`` programs, ``text_iter`` and ``set_var`` on an unstreamed state, the
meta info of a ``gen``, the penalty / sampling arguments a ``gen`` sends, and a stop string
that begins with a line break under a streamed ``text_async_iter``. Every report passed as-is
and is kept as a regression test.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over, whatever the sampling parameters; a prompt holding
``FAKE_SCRIPT_TAG`` makes it write ``FAKE_SCRIPT`` then EOS). Oracles:
``FAKE_TEXT`` and the prompts through the DeepSeek-V4 tokenizer (``transformers``, independent of
the runtime's wrapper) for texts and ``prompt_tokens``; the chatml template of the frontend for a
role block's rendering; SGLang 0.5.23's own ``SamplingParams.verify`` (installed in the venv) for
which sampling parameters are valid. Skipped without the ``sglang`` package (the frontend client;
not a project dependency).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from server_fixture import ServerHandle, fake_output_text

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


# --- fork ----------------------------------------------------------------------------------------


def test_sglang_684_fork_inside_a_role_block(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#684 (``fork()`` inside an open role lost the role's start, so a
    branch's ``messages()`` gave the parent's text inside the branch's assistant turn). Expected:
    with the chatml template, a branch forked after ``assistant_begin()`` that adds text and a
    ``gen`` then ``assistant_end()`` lists the user turn and an assistant turn holding only its own
    text; the ``gen``'s prompt is the chatml rendering up to the branch's text (its
    ``prompt_tokens`` is that text's token count); the answer is the fake model's text."""
    from sglang.lang.chat_template import get_chat_template

    template = get_chat_template("chatml")
    got: list[Any] = []

    @sgl.function
    def prog(s: Any) -> None:
        s += sgl.user("Parent ")
        s += sgl.assistant_begin()
        child = s.fork(2)[1]
        child += "Child " + sgl.gen("g", max_tokens=4, temperature=0)
        child += sgl.assistant_end()
        got.append((child.messages(), child.get_meta_info("g"), child["g"]))

    saved = backend.chat_template
    backend.chat_template = template
    try:
        state = prog.run(backend=backend)
    finally:
        backend.chat_template = saved
    assert state.error() is None, state.error()
    ((messages, meta, answer),) = got
    assert answer == fake_output_text(tok, 4)
    assert messages == [
        {"role": "user", "content": "Parent "},
        {"role": "assistant", "content": "Child " + answer},
    ]
    user_pre, user_post = template.role_prefix_and_suffix["user"]
    asst_pre = template.role_prefix_and_suffix["assistant"][0]
    prompt = user_pre + "Parent " + user_post + asst_pre + "Child "
    assert meta["prompt_tokens"] == len(tok.encode(prompt))


def test_sglang_375_fork_of_one_branch(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#375 (``fork(1)`` got a fast path that skips copying the state; a race
    when copying ``ProgramState`` had been fixed just before). Expected: ``s.fork(1)`` gives one branch; its ``gen`` answers the fake model's text over the shared
    prefix plus its own text (``prompt_tokens`` = that prompt's token count), and the parent's
    text is left as it was before the fork."""
    prefix = "Shared prefix for one branch."
    got: list[Any] = []

    @sgl.function
    def prog(s: Any) -> None:
        s += prefix
        (branch,) = s.fork(1)
        branch += " Branch:" + sgl.gen("b", max_tokens=5, temperature=0)
        got.append((branch["b"], branch.get_meta_info("b"), branch.text()))

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state.text() == prefix
    ((answer, meta, text),) = got
    assert answer == fake_output_text(tok, 5)
    assert text == prefix + " Branch:" + answer
    assert meta["prompt_tokens"] == len(tok.encode(prefix + " Branch:"))


def test_sglang_295_run_batch_programs_that_fork(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#295 (``run_batch`` and ``fork`` mixed: root tasks run on ``num_threads``
    interpreter threads, each fork on its own threads; is it safe?). Expected: three programs of
    different prompt lengths, run as a batch on two threads, each fork two branches; every
    branch answers the fake model's text, and each branch's ``prompt_tokens`` is the token count
    of its own program's prompt plus its own suffix (no branch got another program's prefix)."""

    @sgl.function
    def prog(s: Any, question: str) -> None:
        s += question
        forks = s.fork(2)
        for i, f in enumerate(forks):
            f += f" Way {i}:" + sgl.gen("w", max_tokens=3 + i, temperature=0)
        forks.join()
        s.set_var("metas", [f.get_meta_info("w") for f in forks])
        s.set_var("texts", [f.text() for f in forks])

    questions = ["Why?", "Why is the sky blue today?", "Why is the sea salty and the sky blue at noon?"]
    states = prog.run_batch([{"question": q} for q in questions], num_threads=2, backend=backend)
    for q, st in zip(questions, states, strict=True):
        assert st.error() is None, st.error()
        metas, texts = st["metas"], st["texts"]
        for i in range(2):
            want = fake_output_text(tok, 3 + i)
            assert texts[i] == q + f" Way {i}:" + want
            assert metas[i]["prompt_tokens"] == len(tok.encode(q + f" Way {i}:"))
            assert metas[i]["completion_tokens"] == 3 + i


# --- unstreamed state helpers --------------------------------------------------------------------


def test_sglang_198_text_iter_of_a_variable_without_stream(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#198 (``text_iter(var_name)`` on a state run without ``stream=True``
    looked up the wrong name). Expected: on an unstreamed state ``text_iter("a")`` and
    ``text_async_iter("a")`` each yield the ``gen``'s whole value once (the fake model's text),
    and ``text_iter()`` yields the whole program text once."""

    @sgl.function
    def prog(s: Any) -> None:
        s += "Tell me:" + sgl.gen("a", max_tokens=6, temperature=0)

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    want = fake_output_text(tok, 6)
    assert list(state.text_iter("a")) == [want]
    assert list(state.text_iter()) == ["Tell me:" + want]

    async def collect() -> list[str]:
        return [chunk async for chunk in state.text_async_iter("a")]

    assert asyncio.run(collect()) == [want]


def test_sglang_263_set_var_is_kept_and_never_sent(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#263 (``set_var`` added so a program can return extra values). Expected:
    a value set from a ``gen``'s result is read back from the state; it adds nothing to the
    program's text, so the next ``gen``'s prompt is exactly the text so far (``prompt_tokens`` =
    its token count)."""

    @sgl.function
    def prog(s: Any) -> None:
        s += "First:" + sgl.gen("a", max_tokens=3, temperature=0)
        s.set_var("n_chars", len(s["a"]))
        s += " Second:" + sgl.gen("b", max_tokens=2, temperature=0)

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    a, b = fake_output_text(tok, 3), fake_output_text(tok, 2)
    assert state["n_chars"] == len(a)
    assert state.text() == "First:" + a + " Second:" + b
    assert state.get_meta_info("b")["prompt_tokens"] == len(tok.encode("First:" + a + " Second:"))


def test_sglang_442_meta_info_of_each_gen(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#442 (the user read ``get_meta_info`` of the wrong name and saw no
    values). Expected: each ``gen``'s meta info is its own: ``prompt_tokens`` is the token count
    of the text before it, ``completion_tokens`` its ``max_tokens`` (the fake model never stops),
    the two ``id``s differ; a name that was never generated has no meta info."""

    @sgl.function
    def prog(s: Any) -> None:
        s += "One:" + sgl.gen("x", max_tokens=2, temperature=0)
        s += " Two:" + sgl.gen("y", max_tokens=7, temperature=0)

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    x = fake_output_text(tok, 2)
    mx, my = state.get_meta_info("x"), state.get_meta_info("y")
    assert (mx["prompt_tokens"], mx["completion_tokens"]) == (len(tok.encode("One:")), 2)
    assert (my["prompt_tokens"], my["completion_tokens"]) == (len(tok.encode("One:" + x + " Two:")), 7)
    assert mx["id"] != my["id"]
    assert state.get_meta_info("z") is None


# --- sampling arguments --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("frequency_penalty", 2.5),
        ("presence_penalty", -2.5),
        ("min_p", 1.5),
        ("top_k", 0),
        ("top_p", 0.0),
    ],
)
def test_sglang_973_out_of_range_sampling_argument_in_gen(
    backend: Any, tok: Any, field: str, value: float
) -> None:
    """sgl-project/sglang#973 (frequency / presence penalties and ``min_new_tokens`` implemented
    in the runtime; ``sgl.gen`` sends them in ``sampling_params``). Expected: SGLang 0.5.23's
    ``SamplingParams.verify`` (the oracle, checked here) refuses the value; the program ends with
    an error naming the field and nothing generated; the same ``gen`` with both penalties in
    range answers the fake model's text."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    with pytest.raises(ValueError):
        SamplingParams(max_new_tokens=4, **{field: value}).verify(vocab_size=1000)

    @sgl.function
    def bad(s: Any) -> None:
        s += "Go:" + sgl.gen("a", max_tokens=4, **{field: value})

    state = bad.run(backend=backend)
    assert state.error() is not None
    assert field in str(state.error()), state.error()

    @sgl.function
    def good(s: Any) -> None:
        s += "Go:" + sgl.gen("a", max_tokens=4, temperature=0, frequency_penalty=1.0, presence_penalty=-1.0)

    ok = good.run(backend=backend)
    assert ok.error() is None, ok.error()
    assert ok["a"] == fake_output_text(tok, 4)


# --- stop strings that begin with a line break ---------------------------------------------------


def test_fastchat_3467_stop_string_starting_with_a_line_break_keeps_line_breaks(
    backend: Any, tok: Any
) -> None:
    """lm-sys/FastChat#3467 (with ``stop=["\\n<|endoftext|>", ...]`` a worker streaming through
    ``text_async_iter(return_meta_data=True)`` lost every line break: each ``\\n`` was held as a
    possible stop start and never released). Expected, on the scripted fake output (which holds
    ``"\\n\\n"`` but neither stop string): streamed with meta data, the chunks join to the whole
    script with its line breaks, as does the unstreamed ``gen``; the last meta info says the
    ``gen`` ended on EOS, not on a stop string, with ``completion_tokens`` of the script plus EOS."""
    from server_fixture import FAKE_SCRIPT, FAKE_SCRIPT_TAG

    stops = ["\n<|endoftext|>", "<|im_end|>"]
    assert all(st not in FAKE_SCRIPT for st in stops) and "\n\n" in FAKE_SCRIPT

    @sgl.function
    def prog(s: Any) -> None:
        s += FAKE_SCRIPT_TAG + " Answer:" + sgl.gen("a", max_tokens=200, stop=stops, temperature=0)

    plain = prog.run(backend=backend)
    assert plain.error() is None, plain.error()
    assert plain["a"] == FAKE_SCRIPT
    streamed = prog.run(backend=backend, stream=True)

    async def collect() -> list[tuple[str, Any]]:
        return [item async for item in streamed.text_async_iter("a", return_meta_data=True)]

    items = asyncio.run(collect())
    assert "".join(chunk for chunk, _ in items) == FAKE_SCRIPT
    assert all(meta["prompt_tokens"] > 0 for _, meta in items)
    streamed.sync()
    eos = tok.convert_tokens_to_ids("<｜end▁of▁sentence｜>")
    for meta in (plain.get_meta_info("a"), streamed.get_meta_info("a")):
        finish = meta["finish_reason"]
        assert finish["type"] == "stop" and finish["matched"] == eos, finish
        assert meta["completion_tokens"] == len(tok.encode(FAKE_SCRIPT, add_special_tokens=False)) + 1
