"""The twenty-fifth set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``) and the offline ``Engine`` API, replayed against
sglang-v4.

Fixtures: conftest's session ``secured_fake_server`` (``server_fixture.FakeScheduler`` behind
``--api-key``: the fake model writes ``FAKE_TEXT``'s tokens over and over) for the frontend, and
conftest's session ``shared_fake_engine`` (an ``Engine`` on the same fake model) for the Engine.
Oracles: ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer (``transformers``, independent of the
runtime's wrapper: ``fake_output_text``), the installed frontend's own code (its ``ChatTemplate``
for the prompt a program sends), SGLang 0.5.23's server code read for facts (the API-key
middleware's ``{"error": "Unauthorized"}`` 401 body; ``/start_profile`` and ``/stop_profile``
answering GET; each chunk of a batched stream carrying its prompt's ``index``), Python's ``re``
for which ``stop_regex`` patterns are invalid, and the same request run alone (a cold run).
Skipped without the ``sglang`` package (the frontend client; not a project dependency).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
import requests
from engine_testutil import _assert_released, engine_fixture, expected_fixture  # noqa: F401 - fixtures
from server_fixture import SECURED_API_KEY, ServerHandle, fake_output_text, hf_auto_tokenizer

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(secured_fake_server: ServerHandle) -> ServerHandle:
    """conftest's session fake-model server with ``--api-key``."""
    return secured_fake_server


@pytest.fixture(scope="module")
def backend(server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the keyed fake-model server, with the key."""
    return sgl.RuntimeEndpoint(server.url, api_key=SECURED_API_KEY)


def _gen_program(prompt: str, **gen_kwargs: Any) -> Any:
    @sgl.function
    def prog(s: Any) -> None:
        s += prompt
        s += sgl.gen("a", temperature=0, **gen_kwargs)

    return prog


# --- the frontend --------------------------------------------------------------------------------


def test_sglang_163_runtime_endpoint_with_an_auth_token(server: ServerHandle, expected: Any) -> None:
    """sgl-project/sglang#163 (``RuntimeEndpoint`` could not reach a server that requires a token;
    the fix added ``api_key``) and sgl-project/sglang#255 / #1944 (the constructor's
    ``/get_model_info`` call failed with an HTTP error). Expected: without the key, or with a
    wrong one, the constructor fails with SGLang's 401 body ``{"error": "Unauthorized"}``; with
    the key every call the frontend makes (``/get_model_info``, ``/generate`` plain and streamed,
    ``/flush_cache``, ``/server_info``) succeeds and a ``gen`` gives the fake model's text."""
    for key in (None, "not-the-key"):
        with pytest.raises(RuntimeError) as err:
            sgl.RuntimeEndpoint(server.url, api_key=key)
        assert err.value.args[0] == {"error": "Unauthorized"}

    be = sgl.RuntimeEndpoint(server.url, api_key=SECURED_API_KEY)
    info = requests.get(server.url + "/get_model_info", headers=server.headers(), timeout=30).json()
    assert be.get_model_name() == info["model_path"]
    prog = _gen_program("Q:", max_tokens=5)
    state = prog.run(backend=be)
    assert state.error() is None, state.error()
    assert state["a"] == expected(5)
    streamed = prog.run(backend=be, stream=True)
    assert "".join(streamed.text_iter("a")) == expected(5)
    be.flush_cache()
    server_info = be.get_server_info()
    assert server_info["model_path"] == info["model_path"]


def test_sglang_239_program_uses_the_endpoints_chat_template(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#239 (``sgl.function`` role calls did not use the chat template the user
    asked for; the answer: set it on the endpoint). Expected: with the frontend's ``chatml``
    template on the endpoint, the prompt the server tokenizes is exactly the template's rendering
    of the system and user turns plus the assistant prefix (the frontend's own
    ``ChatTemplate.get_prompt``; ``prompt_tokens`` equals its ``transformers`` token count), and
    the state's text is that prompt, the fake model's answer and the assistant suffix."""
    from sglang.lang.chat_template import get_chat_template

    template = get_chat_template("chatml")
    saved = backend.chat_template
    backend.chat_template = template
    try:

        @sgl.function
        def chat(s: Any) -> None:
            s += sgl.system("Be brief.")
            s += sgl.user("Is 1+1 = 2?")
            s += sgl.assistant(sgl.gen("answer", max_tokens=4, temperature=0))

        state = chat.run(backend=backend)
    finally:
        backend.chat_template = saved
    assert state.error() is None, state.error()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 1+1 = 2?"}]
    prefix, suffix = template.role_prefix_and_suffix["assistant"]
    prompt = template.get_prompt(messages) + prefix
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    assert state.get_meta_info("answer")["prompt_tokens"] == len(tok.encode(prompt))
    answer = fake_output_text(tok, 4)
    assert state["answer"] == answer
    assert state.text() == prompt + answer + suffix


def test_sglang_361_refused_request_in_run_batch_ends_only_its_program(
    backend: Any, server: ServerHandle, expected: Any
) -> None:
    """sgl-project/sglang#361 (a constrained ``gen`` in a ``run_batch`` crashed the backend and every
    program failed). Expected: a ``run_batch`` whose middle program sends a pattern Python's
    ``re`` rejects (an unbalanced ``(`` as ``stop_regex``) ends that program alone with the
    server's 400 naming ``stop_regex``; the programs before and after it give the fake model's
    text, and the server serves the next request."""
    with pytest.raises(re.error):
        re.compile("(")

    @sgl.function
    def prog(s: Any, q: str, bad: bool) -> None:
        s += q
        s += sgl.gen("a", max_tokens=4, temperature=0, stop_regex="(" if bad else None)

    args = [{"q": "One:", "bad": False}, {"q": "Two:", "bad": True}, {"q": "Three:", "bad": False}]
    for threads in (1, "auto"):
        states = prog.run_batch(args, backend=backend, num_threads=threads)
        assert states[0].error() is None and states[2].error() is None
        assert [states[0]["a"], states[2]["a"]] == [expected(4)] * 2
        err = states[1].error()
        assert isinstance(err, RuntimeError), err
        body = err.args[0]
        assert body["error"]["code"] == 400 and "stop_regex" in body["error"]["message"], body
    r = requests.post(
        server.url + "/generate",
        json={"text": "Four:", "sampling_params": {"max_new_tokens": 3}},
        headers=server.headers(),
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["text"] == expected(3)


def test_sglang_22982_profile_routes_the_frontend_calls(
    backend: Any, server: ServerHandle, expected: Any
) -> None:
    """sgl-project/sglang#22982 (the docs named ``/end_profile`` while the server exposes
    ``/start_profile`` and ``/stop_profile``). Expected: the frontend's ``start_profile`` and
    ``stop_profile`` (GET requests without a body, SGLang's server answers both methods) succeed
    with a program run between them, and that program's text is the fake model's."""
    backend.start_profile()
    try:
        state = _gen_program("Profiled:", max_tokens=3).run(backend=backend)
    finally:
        backend.stop_profile()
    assert state.error() is None, state.error()
    assert state["a"] == expected(3)


# --- the offline Engine --------------------------------------------------------------------------


def test_sglang_29256_batch_member_finishing_first_is_still_returned(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#29256 / sgl-project/sglang#29529 (in a batch, a request that finished
    before its waiter ran had left the request table, and the lookup raised ``KeyError``) and
    sgl-project/sglang#6757 (``KeyError`` from ``async_generate`` on a batch). Expected: a batch
    whose members need 0, 1 and 12 tokens, through ``generate`` and ``async_generate`` and with
    ``n = 2``, returns every output in prompt order, each the fake model's text of its own length
    (cold runs: each prompt alone), and the engine is left idle."""
    prompts = ["zero", "one", "twelve"]
    params = [{"max_new_tokens": n} for n in (0, 1, 12)]
    cold = [engine.generate(prompt=p, sampling_params=sp)["text"] for p, sp in zip(prompts, params)]
    assert cold == [expected(0), expected(1), expected(12)]
    assert [o["text"] for o in engine.generate(prompt=prompts, sampling_params=params)] == cold

    async def both() -> tuple[list[dict], list[dict]]:
        one = await engine.async_generate(prompt=prompts, sampling_params=params)
        two = await engine.async_generate(
            prompt=prompts[1:],
            sampling_params=[{"max_new_tokens": 1, "n": 2}, {"max_new_tokens": 12, "n": 2}],
        )
        return one, two

    one, two = asyncio.run(both())
    assert [o["text"] for o in one] == cold
    assert [o["text"] for o in two] == [cold[1], cold[1], cold[2], cold[2]]
    _assert_released(engine, expected)


def test_sglang_6757_concurrent_batched_async_generates(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#6757 (several batched ``async_generate`` calls awaited together raised
    ``KeyError`` in the batch handler). Expected: four batched calls run at once through
    ``asyncio.gather``, each of three prompts with its own length, all return their outputs in
    their own prompt order with the fake model's text of each length."""
    lengths = [[1 + i, 5 + i, 9 + i] for i in range(4)]

    async def run_all() -> list[list[dict]]:
        calls = [
            engine.async_generate(
                prompt=[f"call {i} prompt {j}" for j in range(3)],
                sampling_params=[{"max_new_tokens": n} for n in ns],
            )
            for i, ns in enumerate(lengths)
        ]
        return await asyncio.gather(*calls)

    results = asyncio.run(run_all())
    for ns, outs in zip(lengths, results):
        assert [o["text"] for o in outs] == [expected(n) for n in ns]
        assert [o["meta_info"]["completion_tokens"] for o in outs] == ns
    _assert_released(engine, expected)


def test_gemma_406_streaming_a_batch_of_prompts(engine: Any, expected: Any) -> None:
    """google-deepmind/gemma#406 (streaming was refused for batched prompts). Expected, SGLang's
    shape: ``stream=True`` over a batch yields each prompt's chunks tagged with its ``index``;
    per index the chunks are cumulative, the last one holds the fake model's text of that prompt's
    length with a ``length`` finish, through ``generate`` and ``async_generate``."""
    lengths = [2, 7, 4]
    prompts = [f"stream {i}" for i in range(3)]
    params = [{"max_new_tokens": n} for n in lengths]

    def check(chunks: list[dict]) -> None:
        by_index: dict[int, list[str]] = {}
        for c in chunks:
            by_index.setdefault(c["index"], []).append(c["text"])
        assert sorted(by_index) == [0, 1, 2]
        for i, texts in by_index.items():
            assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), texts
            assert texts[-1] == expected(lengths[i])
        last = {c["index"]: c for c in chunks}
        assert [last[i]["meta_info"]["finish_reason"] for i in range(3)] == [
            {"type": "length", "length": n} for n in lengths
        ]

    check(list(engine.generate(prompt=prompts, sampling_params=params, stream=True)))

    async def collect() -> list[dict]:
        agen = await engine.async_generate(prompt=prompts, sampling_params=params, stream=True)
        return [c async for c in agen]

    check(asyncio.run(collect()))
    _assert_released(engine, expected)


def test_sglang_3754_reused_request_id_decodes_from_scratch(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#3754 (a request id reused after its first request had finished found the
    detokenizer's old decode state, so the second output was cut or the detokenizer asserted).
    Expected: the same ``rid`` used three times in turn (lengths 6, 3, then 9, the last streamed)
    gives each time the fake model's text of that length, as a cold run with a fresh id does."""
    for n in (6, 3):
        out = engine.generate(prompt="again", sampling_params={"max_new_tokens": n}, rid="reused-rid")
        assert out["text"] == expected(n)
        assert out["meta_info"]["id"] == "reused-rid"
    chunks = list(
        engine.generate(prompt="again", sampling_params={"max_new_tokens": 9}, rid="reused-rid", stream=True)
    )
    assert chunks[-1]["text"] == expected(9)
    assert engine.generate(prompt="again", sampling_params={"max_new_tokens": 9})["text"] == expected(9)
    _assert_released(engine, expected)


def test_sglang_2812_many_requests_at_once_each_decode_their_own_text(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#2812 (with many requests in flight the detokenizer lost a request's
    decode state and crashed with ``KeyError``). Expected: a batch of 96 prompts, lengths cycling
    1..8, returns 96 outputs, each the fake model's text of its own length."""
    lengths = [1 + i % 8 for i in range(96)]
    outs = engine.generate(
        prompt=[f"p{i}" for i in range(96)], sampling_params=[{"max_new_tokens": n} for n in lengths]
    )
    assert [o["text"] for o in outs] == [expected(n) for n in lengths]
    _assert_released(engine, expected)


def test_sglang_8440_7374_caller_rids_with_a_batch_and_parallel_samples(engine: Any, expected: Any) -> None:
    """sgl-project/sglang#8440 (a caller's ``rid`` list whose length differs from the batch size
    must be refused: SGLang's check added for it) and sgl-project/sglang#7374 (a caller's ``rid``
    made ``n > 1`` requests fail). Expected: a ``rid`` list one short of the batch is a
    ``ValueError`` naming ``rid`` and nothing runs; a ``rid`` list of the batch's length with
    ``n = 2`` and a single prompt's string ``rid`` with ``n = 2`` give every sample the fake model's
    text (grouped by prompt, SGLang's order), each under a distinct id."""
    with pytest.raises(ValueError, match="rid"):
        engine.generate(prompt=["a", "b", "c"], sampling_params={"max_new_tokens": 2}, rid=["id1", "id2"])
    outs = engine.generate(
        prompt=["a", "b c"], sampling_params={"max_new_tokens": 3, "n": 2}, rid=["id1", "id2"]
    )
    assert [o["text"] for o in outs] == [expected(3)] * 4
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [1, 1, 2, 2]
    assert len({o["meta_info"]["id"] for o in outs}) == 4
    single = engine.generate(prompt="a", sampling_params={"max_new_tokens": 4, "n": 2}, rid="mine")
    assert [o["text"] for o in single] == [expected(4)] * 2
    assert len({o["meta_info"]["id"] for o in single}) == 2
    _assert_released(engine, expected)


def test_soup_995_prompt_text_with_its_bos_is_not_given_a_second(engine: Any, expected: Any) -> None:
    """MakazhanAlpamys/Soup#995 (a rendered prompt already carrying BOS, sent as ``text``, reached
    the engine as ``[BOS, BOS, ...]``; the ids route gave the single BOS the template meant).
    Expected: ``prompt`` text starting with the DeepSeek BOS runs on exactly the ids
    ``transformers`` encodes (one BOS), the same ids sent as ``input_ids`` give the same prompt
    ids and text, and the text without the BOS has one token less."""
    tok = hf_auto_tokenizer()  # the model directory's tokenizer files (they name the BOS token)
    text = tok.bos_token + "Hi there"
    ids = tok.encode(text)
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id
    kw = {"sampling_params": {"max_new_tokens": 3}, "return_logprob": True, "logprob_start_len": 0}
    by_text = engine.generate(prompt=text, **kw)
    by_ids = engine.generate(input_ids=ids, **kw)
    for out in (by_text, by_ids):
        assert [e[1] for e in out["meta_info"]["input_token_logprobs"]] == ids
        assert out["meta_info"]["prompt_tokens"] == len(ids)
        assert out["text"] == expected(3)
    plain = engine.generate(prompt="Hi there", sampling_params={"max_new_tokens": 1})
    assert plain["meta_info"]["prompt_tokens"] == len(ids) - 1


@pytest.mark.parametrize("stream", [False, True])
def test_qvac_2627_batch_with_one_bad_member_sends_none_of_it(
    engine: Any, expected: Any, stream: bool
) -> None:
    """tetherto/qvac#2627 (review: a batch with one context-overflowing prompt failed as a whole,
    and what its other prompts had done was left unclear). Expected, SGLang's Engine: a batch
    whose second member is empty, longer than the 512-token context, asks for more tokens than
    the context leaves, or has a bad sampling parameter is a ``ValueError`` saying which, raised
    before any member is scheduled: the first member (a ``[hold]`` prompt, which would hold its
    pages until aborted) never runs, so no page stays used and the request table is empty."""
    long_prompt = "word " * 600
    cases = [
        (["[hold] first", "", "third"], {"max_new_tokens": 5}, "empty"),
        (["[hold] first", long_prompt, "third"], {"max_new_tokens": 5}, "context length"),
        (["[hold] first", "x"], [{"max_new_tokens": 5}, {"max_new_tokens": 600}], "context length"),
        (
            ["[hold] first", "x"],
            [{"max_new_tokens": 5}, {"max_new_tokens": 5, "temperature": -1}],
            "temperature",
        ),
    ]
    for prompts, params, says in cases:
        with pytest.raises(ValueError, match=says):
            out = engine.generate(prompt=prompts, sampling_params=params, stream=stream)
            if stream:
                list(out)
        info = engine.get_server_info()
        assert info["kv_pool"]["used_pages"] == 0 and not engine.tokenizer_manager.rid_to_state

    async def one() -> None:
        await engine.async_generate(
            prompt=["[hold] first", long_prompt], sampling_params={"max_new_tokens": 5}
        )

    with pytest.raises(ValueError, match="context length"):
        asyncio.run(one())
    _assert_released(engine, expected)
