"""The twentieth set of public bug reports of SGLang's native ``/generate`` API, its
``--incremental-streaming-output`` mode and the frontend language
(``sgl.function`` through ``sglang.RuntimeEndpoint``), replayed against sglang-v4.

Fixtures: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake
model writes ``FAKE_TEXT``'s tokens over and over, a ``stop_token_ids`` request gets its smallest
stop id as its fourth token) and conftest's session ``incremental_fake_server`` on the same fake
model with ``--incremental-streaming-output``. Oracles: ``FAKE_TEXT`` through the DeepSeek-V4
tokenizer (``transformers``, independent of the runtime's tokenizer wrapper), the same request sent
alone or unstreamed (a cold run), Python's ``str.find`` for stop-string trimming, and the
``sglang`` frontend's own chat templates and parser. The frontend tests skip without the
``sglang`` package (a client, not a project dependency). Every report here passed as-is and is
kept as a regression test.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from server_fixture import (
    FAKE_TEXT,
    fake_output_ids,
    fake_output_text,
    in_background,
    sse_events,
    wait_running_reqs,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def server(held_fake_server: Any) -> Any:
    """conftest's session fake-model server."""
    return held_fake_server


@pytest.fixture(scope="module")
def inc_server(incremental_fake_server: Any) -> Any:
    """conftest's session fake-model server with ``--incremental-streaming-output`` (each streamed
    ``/generate`` chunk carries only what is new), on the same model and served name."""
    return incremental_fake_server


def post(server: Any, path: str, body: dict[str, Any]) -> Any:
    """The JSON answer of ``POST path``; asserts HTTP 200."""
    r = requests.post(server.url + path, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server: Any, path: str, body: dict[str, Any]) -> list[Any]:
    """The JSON chunks of ``body`` streamed on ``path``; asserts the stream ends with ``[DONE]``."""
    with requests.post(server.url + path, json={**body, "stream": True}, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        events = sse_events(r)
    assert events[-1] == "[DONE]", events[-3:]
    return events[:-1]


def stopped_text(tok: Any, stop: str) -> str:
    """The text the fake model answers with stop string ``stop``: its output decoded token by
    token until the text holds ``stop``, cut where ``stop`` starts (SGLang trims the stop string)."""
    ids = tok.encode(FAKE_TEXT)
    for n in range(1, len(ids) + 1):
        text = tok.decode(ids[:n])
        if stop in text:
            return text[: text.find(stop)]
    raise AssertionError(f"{stop!r} is not in the fake model's text")


# ----------------------------------------------------------------------------- incremental streams
def test_sglang_22510_incremental_output_leaves_the_openai_streams_whole(inc_server: Any, tok: Any) -> None:
    """sgl-project/sglang#22510 (fixed by #22549: with ``--incremental-streaming-output`` the
    chat route sliced the already incremental text again, and its stream came out as garbage
    like ``['Hello', 'e', 'age', 's', 'g']``). On such a server the chat and completions streams'
    deltas join to their unstreamed answers and to the fake model's text, a stop string that
    spans two tokens included; ``/generate``'s deltas join to its unstreamed text as well."""
    from fake_prompt_tm import MODEL

    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hello, who are you?"}], "max_tokens": 7}
    deltas = [
        c["choices"][0]["delta"].get("content") for c in stream(inc_server, "/v1/chat/completions", chat)
    ]
    whole = post(inc_server, "/v1/chat/completions", chat)["choices"][0]["message"]["content"]
    assert whole == fake_output_text(tok, 7)
    assert "".join(d for d in deltas if d) == whole
    assert sum(1 for d in deltas if d) >= 2  # streamed in pieces, not one chunk at the end

    stop = "brown fox"  # " brown" is sent only once " fox" shows it is not the stop string
    cmpl = {"model": MODEL, "prompt": "hi", "max_tokens": 12, "stop": [stop]}
    texts = [c["choices"][0]["text"] for c in stream(inc_server, "/v1/completions", cmpl) if c["choices"]]
    assert "".join(texts) == post(inc_server, "/v1/completions", cmpl)["choices"][0]["text"]
    assert "".join(texts) == stopped_text(tok, stop)

    body = {"text": "hi", "sampling_params": {"max_new_tokens": 12, "stop": [stop]}}
    chunks = stream(inc_server, "/generate", body)
    assert "".join(c["text"] for c in chunks) == post(inc_server, "/generate", body)["text"]
    assert "".join(c["text"] for c in chunks) == stopped_text(tok, stop)


def test_sglang_7594_incremental_generate_chunks_per_parallel_sample(inc_server: Any, tok: Any) -> None:
    """sgl-project/sglang#7594 (a streamed ``/generate`` should carry each step's new tokens
    only, "1, / 2, / 3," rather than "1, / 1, 2, / 1, 2, 3,"; SGLang's
    ``--incremental-streaming-output``), with ``n`` parallel samples of one prompt: per ``index``
    the chunks' texts and ``output_ids`` join to that sample's whole output, no chunk repeats an
    earlier token, and the last chunk counts all tokens."""
    n, k = 2, 5
    chunks = stream(
        inc_server, "/generate", {"text": "count", "sampling_params": {"max_new_tokens": k, "n": n}}
    )
    assert {c["index"] for c in chunks} == set(range(n))
    for i in range(n):
        mine = [c for c in chunks if c["index"] == i]
        assert all(c["output_ids"] for c in mine)  # each chunk brings something new
        assert [t for c in mine for t in c["output_ids"]] == fake_output_ids(tok, k)
        assert "".join(c["text"] for c in mine) == fake_output_text(tok, k)
        assert mine[-1]["meta_info"]["completion_tokens"] == k
        assert [c["meta_info"]["finish_reason"] for c in mine[:-1]] == [None] * (len(mine) - 1)


# ----------------------------------------------------------------------------- cumulative streams
@pytest.mark.parametrize("stop", ["fox", "brown fox", "quick brown fox jumps"])
def test_llamacpp_10914_streamed_stop_string_text_is_never_taken_back(
    server: Any, tok: Any, stop: str
) -> None:
    """ggml-org/llama.cpp#10914 (a stream with stop strings repeated text the client had already
    been sent). On the cumulative ``/generate`` stream each chunk's text extends the one before
    (nothing repeated, nothing taken back once a partial stop string is seen to be one) and the
    last equals the unstreamed answer, the text before the stop string, also when the stop
    string spans several tokens."""
    body = {"text": "go", "sampling_params": {"max_new_tokens": 16, "stop": [stop]}}
    texts = [c["text"] for c in stream(server, "/generate", body)]
    for before, after in zip(texts, texts[1:]):
        assert after.startswith(before), texts
    whole = post(server, "/generate", body)
    assert texts[-1] == whole["text"] == stopped_text(tok, stop)
    assert whole["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}


def test_sglang_215_stream_chunks_of_one_request_share_its_id(server: Any, tok: Any) -> None:
    """sgl-project/sglang#215 (with ``--stream-interval 1`` a ``/generate`` stream repeated its
    first chunk, each with a different ``meta_info.id``, instead of continuing): with the
    per-request ``stream_interval`` of 1, every chunk of one request carries its ``rid``, counts
    more tokens than the one before, and extends its text and ``output_ids``; the last is the
    whole answer."""
    k = 6
    body = {
        "text": "hi",
        "rid": "native20-215",
        "sampling_params": {"max_new_tokens": k, "stream_interval": 1},
    }
    chunks = stream(server, "/generate", body)
    assert {c["meta_info"]["id"] for c in chunks} == {"native20-215"}
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(set(counts)) and counts[-1] == k
    for before, after in zip(chunks, chunks[1:]):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
    assert chunks[-1]["output_ids"] == fake_output_ids(tok, k)
    assert chunks[-1]["text"] == fake_output_text(tok, k)


@pytest.mark.parametrize(
    "params",
    [
        {"max_new_tokens": 3},
        {"max_new_tokens": 12, "stop": ["fox"]},
        {"max_new_tokens": 12, "stop_token_ids": [9]},
    ],
    ids=["length", "stop_str", "stop_token"],
)
def test_sglang_415_finish_reason_only_on_the_last_streamed_chunk(
    server: Any, params: dict[str, Any]
) -> None:
    """sgl-project/sglang#415 (put the finish reason in ``meta_info``, for clients that loop
    generation until it stopped for a reason other than length): streamed, every chunk but the
    last has ``finish_reason`` ``None`` and the last has the unstreamed answer's reason, SGLang's
    dict; in a streamed batch this holds per ``index``."""
    body = {"text": "go", "sampling_params": params}
    want = post(server, "/generate", body)["meta_info"]["finish_reason"]
    assert want is not None and want["type"] == ("length" if "stop" not in str(params) else "stop")
    reasons = [c["meta_info"]["finish_reason"] for c in stream(server, "/generate", body)]
    assert reasons[:-1] == [None] * (len(reasons) - 1) and reasons[-1] == want
    batch = stream(server, "/generate", {"text": ["go", "went"], "sampling_params": params})
    for i in (0, 1):
        mine = [c["meta_info"]["finish_reason"] for c in batch if c["index"] == i]
        assert mine[:-1] == [None] * (len(mine) - 1) and mine[-1] == want


USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens")


def test_dynamo_11062_every_streamed_chunk_carries_the_usage_counts(server: Any, tok: Any) -> None:
    """ai-dynamo/dynamo#11062 (a client of SGLang's token stream raised ``KeyError:
    'prompt_tokens'`` on a final chunk without the usage counts in ``meta_info``): every chunk of
    a streamed ``/generate`` carries ``prompt_tokens``, ``completion_tokens`` and
    ``cached_tokens`` as integers -- the last one of a finished request, each index of a streamed
    batch, and the last one of a request aborted through ``/abort_request`` while it ran.
    Oracles: the tokenizer's count of the prompt, the count of tokens the chunk's ``output_ids``
    hold."""
    prompt = "count my tokens"
    n_prompt = len(tok.encode(prompt))
    body = {"text": [prompt, prompt + " too"], "sampling_params": {"max_new_tokens": 4}}
    for c in stream(server, "/generate", body):
        meta = c["meta_info"]
        assert all(isinstance(meta.get(k), int) for k in USAGE_KEYS), meta
        assert meta["prompt_tokens"] == (n_prompt if c["index"] == 0 else len(tok.encode(prompt + " too")))
        assert meta["completion_tokens"] == len(c["output_ids"])

    rid = "native20-usage-abort"
    held = {"text": f"[hold] {prompt}", "rid": rid, "sampling_params": {"max_new_tokens": 400}}
    thread, box = in_background(stream, server, "/generate", held)
    wait_running_reqs(server, 1)
    r = requests.post(server.url + "/abort_request", json={"rid": rid}, timeout=30)
    assert r.status_code == 200, r.text
    thread.join(60)
    chunks = box["out"]
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    for c in chunks:
        meta = c["meta_info"]
        assert all(isinstance(meta.get(k), int) for k in USAGE_KEYS), meta
        assert meta["prompt_tokens"] == len(tok.encode(held["text"]))
        assert meta["completion_tokens"] == len(c["output_ids"])
    wait_running_reqs(server, 0)


# ----------------------------------------------------------------------------- batches
def test_lmms_eval_1325_each_batch_item_keeps_its_own_sampling_params(server: Any, tok: Any) -> None:
    """EvolvingLMMs-Lab/lmms-eval#1325 (a batch ran every prompt with the last request's sampling
    parameters): a ``/generate`` batch with one ``sampling_params`` per prompt answers each
    prompt as the same request sent alone does, in either order of the batch."""
    items = [
        ("first", {"max_new_tokens": 2}),
        ("second", {"max_new_tokens": 12, "stop": ["fox"]}),
        ("third", {"max_new_tokens": 7, "stop_token_ids": [9]}),
        ("fourth", {"max_new_tokens": 5}),
    ]
    alone = [post(server, "/generate", {"text": t, "sampling_params": sp}) for t, sp in items]
    assert [a["text"] for a in alone] == [
        fake_output_text(tok, 2),
        stopped_text(tok, "fox"),
        fake_output_text(tok, 3),  # the stop token (4th) is trimmed from the text
        fake_output_text(tok, 5),
    ]
    for order in (items, items[::-1]):
        outs = post(
            server, "/generate", {"text": [t for t, _ in order], "sampling_params": [sp for _, sp in order]}
        )
        want = alone if order is items else alone[::-1]
        got = [(o["text"], o["output_ids"], o["meta_info"]["finish_reason"]) for o in outs]
        assert got == [(a["text"], a["output_ids"], a["meta_info"]["finish_reason"]) for a in want]


# ----------------------------------------------------------------------------- frontend language
def test_sglang_239_frontend_program_uses_the_endpoints_chat_template(server: Any, tok: Any) -> None:
    """sgl-project/sglang#239 (``sgl.function`` roles rendered with the default ``USER:`` /
    ``ASSISTANT:`` template rather than the one asked for; the endpoint's ``chat_template`` is the
    way to pick it). With ``RuntimeEndpoint(url, chat_template_name="chatml")`` a multi-turn
    program renders every turn with chatml (the frontend's own template, read from ``sglang``),
    each answer joins the state, and each generation's ``prompt_tokens`` counts the whole
    conversation so far (tokenizer count of the rendered text): the server sees every turn."""
    sgl = pytest.importorskip("sglang")
    from sglang.lang.chat_template import get_chat_template

    roles = get_chat_template("chatml").role_prefix_and_suffix
    backend = sgl.RuntimeEndpoint(server.url, chat_template_name="chatml")

    @sgl.function
    def chat(s: Any) -> None:
        s += sgl.system("Be brief.")
        s += sgl.user("Hi")
        s += sgl.assistant(sgl.gen("a1", max_tokens=3))
        s += sgl.user("Again")
        s += sgl.assistant(sgl.gen("a2", max_tokens=4))

    state = chat.run(backend=backend)
    assert state.error() is None, state.error()

    def turn(role: str, content: str) -> str:
        return roles[role][0] + content + roles[role][1]

    head1 = turn("system", "Be brief.") + turn("user", "Hi") + roles["assistant"][0]
    head2 = (
        head1
        + fake_output_text(tok, 3)
        + roles["assistant"][1]
        + turn("user", "Again")
        + roles["assistant"][0]
    )
    assert state["a1"] == fake_output_text(tok, 3) and state["a2"] == fake_output_text(tok, 4)
    assert state.text() == head2 + fake_output_text(tok, 4) + roles["assistant"][1]
    assert state.get_meta_info("a1")["prompt_tokens"] == len(tok.encode(head1))
    assert state.get_meta_info("a2")["prompt_tokens"] == len(tok.encode(head2))
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant", "user", "assistant"]


def test_sglang_25421_fork_branches_each_extend_the_shared_prefix(server: Any, tok: Any) -> None:
    """sgl-project/sglang#25421 (``fork(N)`` over a shared prefix, each branch generating on its
    own, then a step after ``join``): each branch's generation is prompted with the prefix plus
    that branch's own text only (``prompt_tokens`` by the tokenizer), answers with its own length,
    and the state after ``join`` goes on from the prefix, the branches' texts not in it."""
    sgl = pytest.importorskip("sglang")
    backend = sgl.RuntimeEndpoint(server.url)
    prefix = "Shared context. "
    branches: list[Any] = []  # the fork states, kept for reading after the run

    @sgl.function
    def sweep(s: Any) -> None:
        s += prefix
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += f"Branch {i}:" + sgl.gen("g", max_tokens=2 + i)
        forks.join()
        branches.extend(forks)
        s += "Summary:" + sgl.gen("sum", max_tokens=2)

    state = sweep.run(backend=backend)
    assert state.error() is None, state.error()
    assert len(branches) == 3
    for i, f in enumerate(branches):
        head = f"{prefix}Branch {i}:"
        assert f["g"] == fake_output_text(tok, 2 + i)
        assert f.get_meta_info("g")["prompt_tokens"] == len(tok.encode(head))
        assert f.text() == head + fake_output_text(tok, 2 + i)
    assert state.text() == prefix + "Summary:" + fake_output_text(tok, 2)
    assert state.get_meta_info("sum")["prompt_tokens"] == len(tok.encode(prefix + "Summary:"))
