"""The twenty-second set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``) and the native ``/generate`` requests it sends,
replayed against sglang-v4.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over). Oracles: ``FAKE_TEXT`` through the DeepSeek-V4
tokenizer (``transformers``, independent of the runtime's wrapper), SGLang 0.5.23's own
``SamplingParams.verify`` (installed in the venv) for which parameters are valid, and the same
program run without the fork (a cold run). Skipped without the ``sglang`` package (the frontend
client; not a project dependency).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, fake_output_text

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


def test_sglang_2755_fork_before_any_text_runs_every_branch(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#2755 (forking a program state before any text was added sent an empty
    commit to the server, which crashed its scheduler; fixed on the client by sgl-project/sglang#2835).
    Expected: each branch of ``s.fork(3)`` on an empty state, then given a prompt, generates the
    fake model's text (oracle: ``FAKE_TEXT`` through the tokenizer), and the server still
    answers afterwards."""

    @sgl.function
    def forked(s: Any) -> None:
        forks = s.fork(3)
        for i, f in enumerate(forks):
            f += f"Branch {i}:"
            f += sgl.gen("out", max_tokens=4, temperature=0)
        s["outs"] = [f["out"] for f in forks]

    want = fake_output_text(tok, 4)
    state = forked.run(backend=backend)
    assert state["outs"] == [want] * 3
    again = forked.run(backend=backend)
    assert again["outs"] == [want] * 3


def test_sglang_2755_empty_text_then_fork(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#2755, the other failing shape: ``s += ""`` before ``s.fork(2)``.
    Expected: as the unforked program (a cold run of the same prompt and ``gen``)."""

    @sgl.function
    def forked(s: Any) -> None:
        s += ""
        forks = s.fork(2)
        for f in forks:
            f += "Q:"
            f += sgl.gen("out", max_tokens=3, temperature=0)
        s["outs"] = [f["out"] for f in forks]

    @sgl.function
    def plain(s: Any) -> None:
        s += "Q:"
        s += sgl.gen("out", max_tokens=3, temperature=0)

    cold = plain.run(backend=backend)["out"]
    assert cold == fake_output_text(tok, 3)
    assert forked.run(backend=backend)["outs"] == [cold, cold]


def test_sglang_2755_empty_commit_request_is_answered(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#2755, the request itself: the frontend's commit of an empty state is
    ``/generate`` with ``text: ""`` and ``max_new_tokens: 0``. SGLang 0.5.23's
    ``SamplingParams.verify`` accepts ``max_new_tokens == 0`` (the oracle, checked here), so the
    server must answer it: HTTP 200 with no generated text, or a 4xx in SGLang's error shape,
    never a 5xx or a dropped connection; and it keeps serving."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    SamplingParams(max_new_tokens=0).verify(vocab_size=1000)  # the oracle: a valid request
    r = requests.post(
        plain_fake_server.url + "/generate",
        json={"text": "", "sampling_params": {"max_new_tokens": 0}},
        timeout=60,
    )
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        assert r.json()["text"] == ""
        assert r.json()["meta_info"]["completion_tokens"] == 0
    else:
        assert "message" in r.json().get("error", r.json()), r.text
    ok = requests.post(
        plain_fake_server.url + "/generate",
        json={"text": "Hi", "sampling_params": {"max_new_tokens": 1}},
        timeout=60,
    )
    assert ok.status_code == 200, ok.text


def test_sglang_503_gen_logprob_options_reach_the_server(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#503 (``sgl.gen`` exposed ``return_logprob``, ``top_logprobs_num`` and
    ``return_text_in_logprobs``; they must travel as top-level ``/generate`` fields, not inside
    ``sampling_params``). Expected: the ``gen``'s meta info holds one output entry per generated
    token, each ``(logprob, id, text)`` with the fake model's ids (tokenizer oracle) and the text of
    that id alone, and ``top_logprobs_num`` entries per position, the best first."""
    from server_fixture import fake_output_ids

    @sgl.function
    def prog(s: Any) -> None:
        s += "Hello there."
        s += sgl.gen(
            "out",
            max_tokens=4,
            temperature=0,
            return_logprob=True,
            top_logprobs_num=2,
            return_text_in_logprobs=True,
        )

    state = prog.run(backend=backend)
    meta = state.get_meta_info("out")
    ids = fake_output_ids(tok, 4)
    entries = meta["output_token_logprobs"]
    assert [e[1] for e in entries] == ids
    assert [e[2] for e in entries] == [tok.decode([i]) for i in ids]
    assert all(isinstance(e[0], float) and e[0] <= 0.0 for e in entries)
    tops = meta["output_top_logprobs"]
    assert len(tops) == 4
    for pos in tops:
        assert len(pos) == 2
        assert pos[0][0] >= pos[1][0]
        assert [t[2] for t in pos] == [tok.decode([t[1]]) for t in pos]


def test_sglang_303_2513_generator_style_run_batch_yields_every_state(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#303, fixed by sgl-project/sglang#2513 (``run_batch`` gave control back only
    at the end; ``generator_style=True`` yields each state as it finishes). Expected: one state per
    argument set, in order, each with the fake model's text for its own ``max_tokens`` (oracle:
    ``FAKE_TEXT`` through the tokenizer) and the same as the list-style batch (a cold run)."""

    @sgl.function
    def prog(s: Any, q: str, n: int) -> None:
        s += q
        s += sgl.gen("a", max_tokens=n, temperature=0)

    args = [{"q": f"Q{i}:", "n": n} for i, n in enumerate([2, 5, 3, 1])]
    listed = [st["a"] for st in prog.run_batch(args, backend=backend, num_threads=2)]
    yielded = [st["a"] for st in prog.run_batch(args, backend=backend, num_threads=2, generator_style=True)]
    want = [fake_output_text(tok, a["n"]) for a in args]
    assert listed == want
    assert yielded == want
