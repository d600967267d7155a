"""The twenty-third set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``) and the native requests it sends, replayed against
sglang-v4.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over, emits the smallest of a request's ``stop_token_ids``
as its fourth token, and scores a prompt's token at ``position`` with ``-0.5 - 0.01 * position``,
the first scored entry ``None``). Oracles: ``FAKE_TEXT`` and the prompts through the DeepSeek-V4
tokenizer (``transformers``, independent of the runtime's wrapper), Python's ``str`` operations
for where a stop string cuts the text, the frontend's own code (its ``ChatTemplate``, its
``SglFunction.run`` defaults and ``compute_normalized_prompt_logprobs``), SGLang 0.5.23's
``/model_info`` keys, and the same program run unstreamed (a cold run). Skipped without the
``sglang`` package (the frontend client; not a project dependency). One ``slow`` test runs forked
branches on a real CPU server (default flags, the embedded random model): its oracles are the
model tokenizer's ids of the branch prompts with ``/get_server_info``'s ``page_size`` (whole pages
of the shared prefix) and the same prompts run cold after ``/flush_cache``. Every report here
passed as-is and is kept as a regression test.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest
import requests
from server_fixture import FAKE_TEXT, ServerHandle, fake_output_text

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


def _normalized_choice_logprobs(tok: Any, prompt: str, choices: list[str]) -> list[float]:
    """What ``RuntimeEndpoint.select`` must compute per choice on the fake model: scoring starts
    two tokens before the prompt's end; the first entry (no value) is skipped and the fake
    model's logprobs of the rest are averaged (float64)."""
    from sglang.lang.backend.runtime_endpoint import compute_normalized_prompt_logprobs

    start = max(len(tok.encode(prompt)) - 2, 0)
    out = []
    for c in choices:
        n = len(tok.encode(prompt + c)) - start
        entries = [None] + [-0.5 - 0.01 * (start + j) for j in range(1, n)]
        out.append(compute_normalized_prompt_logprobs([(v, 0, None) for v in entries]))
    return out


def _one_id(tok: Any, text: str) -> int:
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_sglang_1092_gen_stop_token_ids_end_the_gen(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#1092 (``stop_token_ids`` in the SGLang API and ``sgl.gen``). Expected:
    the fake model emits the asked stop id as its fourth token, so the ``gen`` ends there with
    ``finish_reason {"type": "stop", "matched": id}``, its text is the first three fake tokens
    (the stop token trimmed, as SGLang's detokenizer does; tokenizer oracle), and the streamed
    program yields the same text (a cold run)."""
    stop_id = _one_id(tok, " jumps")

    @sgl.function
    def prog(s: Any) -> None:
        s += "Q:"
        s += sgl.gen("a", max_tokens=10, temperature=0, stop_token_ids=[stop_id])

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    meta = state.get_meta_info("a")
    assert meta["finish_reason"] == {"type": "stop", "matched": stop_id}
    assert meta["completion_tokens"] == 4
    assert state["a"] == fake_output_text(tok, 3)
    streamed = prog.run(backend=backend, stream=True)
    assert "".join(streamed.text_iter("a")) == state["a"]


@pytest.mark.parametrize("stop", ["brown fox", "ps ov", ["zzz", "lazy d"], "你好"])
def test_sglang_190_stop_string_or_list_cuts_where_python_finds_it(backend: Any, stop: Any) -> None:
    """sgl-project/sglang#190 (a single ``stop`` string was not turned into a list, which broke
    ``sgl.gen(stop=...)``). Expected: with a stop string spanning tokens, a list of them, or a
    multi-byte one, the ``gen``'s text is the fake text up to the first match (Python's
    ``str.find``), ``finish_reason.matched`` names the string, and the streamed program yields
    exactly that text (nothing past the cut leaks into the stream; a cold run)."""
    stops = [stop] if isinstance(stop, str) else stop
    cuts = {s: FAKE_TEXT.find(s) for s in stops if FAKE_TEXT.find(s) >= 0}
    first = min(cuts, key=lambda s: cuts[s])

    @sgl.function
    def prog(s: Any) -> None:
        s += "Q:"
        s += sgl.gen("a", max_tokens=40, temperature=0, stop=stop)

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state["a"] == FAKE_TEXT[: cuts[first]]
    assert state.get_meta_info("a")["finish_reason"] == {"type": "stop", "matched": first}
    streamed = prog.run(backend=backend, stream=True)
    assert "".join(streamed.text_iter("a")) == state["a"]


def test_sglang_590_971_gen_without_max_tokens_uses_the_run_default(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#590, changed by sgl-project/sglang#971 (``sgl.gen()`` without
    ``max_tokens`` was cut at ``run``'s default of 16). Expected: the ``gen`` takes
    ``SglFunction.run``'s own default ``max_new_tokens`` (read from the installed frontend's
    signature, 128 in 0.5.23) and the server generates exactly that many tokens of the fake text
    (tokenizer oracle); a ``run(max_new_tokens=5)`` gives five."""
    from sglang.lang.ir import SglFunction

    default = inspect.signature(SglFunction.run).parameters["max_new_tokens"].default

    @sgl.function
    def prog(s: Any) -> None:
        s += "Q:"
        s += sgl.gen("a", temperature=0)

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state.get_meta_info("a")["completion_tokens"] == default
    assert state.get_meta_info("a")["finish_reason"]["type"] == "length"
    assert state["a"] == fake_output_text(tok, default)
    short = prog.run(backend=backend, max_new_tokens=5)
    assert short["a"] == fake_output_text(tok, 5)


@pytest.mark.parametrize("lead", ["", " "])
def test_sglang_608_select_on_the_first_assistant_token(backend: Any, tok: Any, lead: str) -> None:
    """sgl-project/sglang#608 (``select`` right after ``assistant_begin()`` chose a nonsensical
    choice, differently with and without a leading space). Expected: the prompt the frontend
    scores is its own chat template's rendering of the user turn plus the assistant prefix (and
    the space); the ``normalized_prompt_logprobs`` are the fake model's means over each choice's
    tokens from that prompt (tokenizer oracle, the frontend's own averaging), the decision is
    their argmax, and the finished text closes the assistant turn with the chosen value."""
    choices = ["Hello", "Goodbye", "^*B^&A"]

    @sgl.function
    def selected(s: Any) -> None:
        s += sgl.user("Hi!")
        s += sgl.assistant_begin()
        s += lead
        s += sgl.gen("var", choices=choices)
        s += sgl.assistant_end()

    template = backend.get_chat_template()
    a_prefix, a_suffix = template.role_prefix_and_suffix["assistant"]
    prompt = template.get_prompt([{"role": "user", "content": "Hi!"}]) + a_prefix + lead
    want = _normalized_choice_logprobs(tok, prompt, choices)
    state = selected.run(backend=backend)
    assert state.error() is None, state.error()
    assert state.get_meta_info("var")["normalized_prompt_logprobs"] == pytest.approx(want, abs=1e-6)
    assert state["var"] == choices[want.index(max(want))]
    assert state.text() == prompt + state["var"] + a_suffix


def test_sglang_523_835_token_length_normalized_scores_each_choice(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#523 and sgl-project/sglang#835 (``choices`` scoring by token-length
    normalized logprobs favoured long choices; #835 made the method selectable, its example
    ``choices=["Paris", "Antidisestablishmentarianism"]`` in a user/assistant program). Expected:
    the default method and an explicit ``sgl.token_length_normalized`` give the same
    ``normalized_prompt_logprobs``, equal to the fake model's per-choice means (tokenizer oracle),
    one ``input_token_logprobs`` list per choice whose ids are the prompt + choice tokens from the
    scoring start, and the same decision."""
    choices = ["Paris", "Antidisestablishmentarianism"]

    def program(method: Any) -> Any:
        @sgl.function
        def example(s: Any) -> None:
            s += sgl.user("What is the capital of France?")
            kw = {} if method is None else {"choices_method": method}
            s += sgl.assistant(sgl.gen("answer", choices=choices, **kw))

        return example.run(backend=backend)

    template = backend.get_chat_template()
    prompt = template.get_prompt([{"role": "user", "content": "What is the capital of France?"}])
    prompt += template.role_prefix_and_suffix["assistant"][0]
    want = _normalized_choice_logprobs(tok, prompt, choices)
    start = max(len(tok.encode(prompt)) - 2, 0)
    for method in (None, sgl.token_length_normalized):
        state = program(method)
        assert state.error() is None, state.error()
        meta = state.get_meta_info("answer")
        assert meta["normalized_prompt_logprobs"] == pytest.approx(want, abs=1e-6)
        for c, entries in zip(choices, meta["input_token_logprobs"], strict=True):
            assert [e[1] for e in entries] == tok.encode(prompt + c)[start:], c
        assert state["answer"] == choices[want.index(max(want))]


def test_sglang_5721_443_image_in_a_program_on_a_text_only_model(
    backend: Any, plain_fake_server: ServerHandle, tok: Any, tmp_path: Any
) -> None:
    """sgl-project/sglang#5721 and sgl-project/sglang#443 (``sgl.image`` in a frontend program
    failed inside the server's multimodal processor instead of answering an error). Expected:
    ``/get_model_info`` says ``has_image_understanding: false`` (SGLang's ``/model_info`` key), the
    program's ``image_data`` request is a 400 in SGLang's error shape naming ``image_data``, the
    program ends with that error (``RuntimeError`` from ``RuntimeEndpoint._assert_success``), and
    the server keeps answering the same program without the image."""
    info = requests.get(plain_fake_server.url + "/get_model_info", timeout=30).json()
    assert info["has_image_understanding"] is False
    image = tmp_path / "x.png"
    image.write_bytes(b"\x89PNG\r\n\x1a\n")

    @sgl.function
    def describe(s: Any, with_image: bool) -> None:
        s += "Describe:"
        if with_image:
            s += sgl.image(str(image))
        s += sgl.gen("v", max_tokens=3, temperature=0)

    err = describe.run(backend=backend, with_image=True).error()
    assert isinstance(err, RuntimeError), err
    body = err.args[0]
    assert body["error"]["code"] == 400 and "image_data" in body["error"]["message"], body
    r = requests.post(
        plain_fake_server.url + "/generate",
        json={"text": "Describe:", "image_data": str(image), "sampling_params": {"max_new_tokens": 2}},
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestError", r.text
    ok = describe.run(backend=backend, with_image=False)
    assert ok.error() is None, ok.error()
    assert ok["v"] == fake_output_text(tok, 3)


def test_sglang_360_4511_max_tokens_past_the_context_window(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#360 and sgl-project/sglang#4511 (a frontend ``gen`` cannot know how many
    tokens are left; a ``max_tokens`` past the context window must fail clearly, not generate a
    silently cut answer). Expected, as SGLang 0.5.23's tokenizer manager: prompt + ``max_tokens``
    over ``/get_model_info``'s ``context_length`` is a 400 whose message names the context length,
    the program ends with that error, and a ``max_tokens`` that fits generates in full (tokenizer
    oracle)."""
    ctx = backend.model_info["context_length"]

    @sgl.function
    def prog(s: Any, budget: int) -> None:
        s += "Q:"
        s += sgl.gen("a", max_tokens=budget, temperature=0)

    err = prog.run(backend=backend, budget=ctx + 10).error()
    assert isinstance(err, RuntimeError), err
    msg = err.args[0]["error"]["message"]
    assert err.args[0]["error"]["code"] == 400 and f"maximum context length of {ctx} tokens" in msg, msg
    fits = ctx - len(tok.encode("Q:")) - 1
    state = prog.run(backend=backend, budget=fits)
    assert state.error() is None, state.error()
    assert state.get_meta_info("a")["completion_tokens"] == fits
    assert state["a"] == fake_output_text(tok, fits)


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_5200_prompt_longer_than_the_context_ends_the_program_with_the_400(
    backend: Any, tok: Any, stream: bool
) -> None:
    """sgl-project/sglang#5200 (a long prompt through the frontend ended in ``KeyError: 'text'``
    instead of the server's error). Expected: a prompt of more tokens than ``/get_model_info``'s
    ``context_length`` (tokenizer oracle) ends the program, streamed or not, with the 400 of
    SGLang's error shape naming the context length (``RuntimeEndpoint._assert_success``'s
    ``RuntimeError``, never a ``KeyError``), the streamed ``text_iter`` yields nothing, and the
    server then answers a prompt that fits."""
    ctx = backend.model_info["context_length"]
    long_prompt = "Q:" * ctx
    assert len(tok.encode(long_prompt)) > ctx

    @sgl.function
    def prog(s: Any, prompt: str) -> None:
        s += prompt
        s += sgl.gen("a", max_tokens=2, temperature=0)

    state = prog.run(backend=backend, prompt=long_prompt, stream=stream)
    if stream:
        assert list(state.text_iter("a")) == []
    err = state.error()
    assert isinstance(err, RuntimeError), repr(err)
    body = err.args[0]["error"]
    assert body["code"] == 400 and body["type"] == "BadRequestError", body
    assert f"context length ({ctx} tokens)" in body["message"], body
    ok = prog.run(backend=backend, prompt="Q:", stream=stream)
    if stream:
        assert "".join(ok.text_iter("a")) == fake_output_text(tok, 2)
    assert ok.error() is None and ok["a"] == fake_output_text(tok, 2)


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_40076_top_logprobs_num_past_the_vocabulary_is_a_400(
    backend: Any, plain_fake_server: ServerHandle, tok: Any, stream: bool
) -> None:
    """sgl-project/sglang#40076 (a ``top_logprobs`` larger than the vocabulary killed the
    scheduler; ``sgl.gen`` sends its ``top_logprobs_num`` as the native field). Expected: a ``gen``
    with ``top_logprobs_num`` past ``/get_model_info``'s ``vocab_size`` ends the program with a 400
    naming ``top_logprobs_num``, streamed or not, and the server keeps serving: the same ``gen``
    with ``top_logprobs_num=2`` answers the fake text with two top entries per token, the best
    first (tokenizer oracle)."""
    vocab = backend.model_info["vocab_size"]

    @sgl.function
    def prog(s: Any, k: int) -> None:
        s += "Q:"
        s += sgl.gen("a", max_tokens=3, temperature=0, return_logprob=True, top_logprobs_num=k)

    state = prog.run(backend=backend, k=vocab + 1, stream=stream)
    if stream:
        assert list(state.text_iter("a")) == []
    err = state.error()
    assert isinstance(err, RuntimeError), repr(err)
    body = err.args[0]["error"]
    assert body["code"] == 400 and "top_logprobs_num" in body["message"], body
    ok = prog.run(backend=backend, k=2)
    assert ok.error() is None, ok.error()
    assert ok["a"] == fake_output_text(tok, 3)
    tops = ok.get_meta_info("a")["output_top_logprobs"]
    assert len(tops) == 3 and all(len(p) == 2 and p[0][0] >= p[1][0] for p in tops)
    assert requests.get(plain_fake_server.url + "/health", timeout=30).status_code == 200


@pytest.fixture(scope="module")
def real_backend(default_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``RuntimeEndpoint`` on a real CPU server with default flags (the embedded random model);
    yields ``(backend, page_size)``."""
    from server_fixture import real_env, start_server

    h = start_server([], real_env(), tmp_path_factory.mktemp("front23") / "server.log", timeout_s=300)
    try:
        page = requests.get(h.url + "/get_server_info", timeout=30).json()["page_size"]
        yield sgl.RuntimeEndpoint(h.url), page
    finally:
        assert h.stop() == 0, h.log()[-3000:]


@pytest.mark.slow
def test_sglang_30755_forked_branches_hit_the_shared_prefix(real_backend: Any, mtok: Any) -> None:
    """sgl-project/sglang#30755 (is the prefix cache on by default, and where does a request show
    its hits?). Expected, default flags: each branch of ``s.fork(3)`` over a shared prefix reports
    ``cached_tokens`` as the whole pages of its common prefix with the other branches' prompts
    (the model tokenizer's ids, ``/get_server_info``'s ``page_size``): at least two of three on the
    first run (the first branch scheduled may compute the prefix itself; the frontend sends no
    commit before this fork), all three on the second; after the frontend's ``flush_cache`` the
    same prompt reports none, and every branch's greedy text equals that cold run's."""
    backend, page = real_backend
    prefix = "".join(
        f"Line {i}: the quick brown fox jumps over the lazy dog number {i}.\n" for i in range(20)
    )
    prompts = [prefix + f"Branch {i}:" for i in range(3)]
    ids = [mtok.encode(p, add_special_tokens=False) for p in prompts]
    common = len(os.path.commonprefix(ids))
    want = common // page * page
    assert want >= page  # the prefix spans at least one whole page

    @sgl.function
    def forked(s: Any) -> None:
        s += prefix
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += f"Branch {i}:"
            f += sgl.gen("o", max_tokens=4, temperature=0)
        s["cached"] = [f.get_meta_info("o")["cached_tokens"] for f in forks]
        s["outs"] = [f["o"] for f in forks]

    @sgl.function
    def cold(s: Any, i: int) -> None:
        s += prefix + f"Branch {i}:"
        s += sgl.gen("o", max_tokens=4, temperature=0)

    first = forked.run(backend=backend)
    assert first.error() is None, first.error()
    assert sorted(first["cached"]) in ([0, want, want], [want] * 3), first["cached"]
    second = forked.run(backend=backend)
    assert second["cached"] == [want] * 3
    backend.flush_cache()
    cold_outs = []
    for i in range(3):
        backend.flush_cache()
        st = cold.run(backend=backend, i=i)
        assert st.error() is None, st.error()
        assert st.get_meta_info("o")["cached_tokens"] == 0
        cold_outs.append(st["o"])
    assert first["outs"] == cold_outs and second["outs"] == cold_outs
