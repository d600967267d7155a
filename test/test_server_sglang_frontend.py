"""SGLang frontend-language programs against our server through ``sglang.RuntimeEndpoint``.

The real client (the ``sglang`` package's ``RuntimeEndpoint``) talks to the native API:
``/get_model_info``, ``/generate`` (streaming, batches, ``max_new_tokens=0`` prefix caching,
input logprobs for ``select``), ``/flush_cache``. The server runs the model-free FakeScheduler, so
the expected texts are known. Skipped when ``sglang`` is not importable (it is not a project
dependency: its full install pulls a GPU stack; ``pip download --no-deps sglang`` + unzip +
``PYTHONPATH`` with ``psutil pybase64 IPython`` installed is enough for the frontend).
"""

from __future__ import annotations

from typing import Any

import pytest
from server_fixture import FAKE_TEXT, hf_auto_tokenizer

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(plain_fake_server):  # noqa: ANN201 - sglang's RuntimeEndpoint
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server (conftest
    ``plain_fake_server``)."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


def test_gen_select_fork_stream_batch(backend):
    tok = hf_auto_tokenizer()
    ids = tok.encode(FAKE_TEXT)

    def fake(n: int) -> str:
        return tok.decode(ids[:n], skip_special_tokens=True)

    @sgl.function
    def prog(s, q):
        s += "Q: " + q + "\nA:" + sgl.gen("ans", max_tokens=12, stop=".")
        s += " Pick: " + sgl.select("c", choices=["red", "blue", "green"])
        forks = s.fork(2)
        for f in forks:
            f += sgl.gen("x", max_tokens=4)
        s += forks[0]["x"] + "|" + forks[1]["x"]

    state = prog.run(q="what?", backend=backend)
    full = fake(12)
    assert state["ans"] == full[: full.index(".")]
    assert state["c"] in ("red", "blue", "green")
    assert state.text().endswith(fake(4) + "|" + fake(4))

    streamed = prog.run(q="stream", stream=True, backend=backend)
    pieces = list(streamed.text_iter())
    assert "".join(pieces) == streamed.text()
    assert streamed["ans"] == state["ans"]

    states = prog.run_batch([{"q": "a"}, {"q": "b"}], backend=backend)
    assert [st["ans"] for st in states] == [state["ans"]] * 2
    backend.flush_cache()


def test_logprob_start_len_edges_and_unconditional_select(backend):
    """SGLang's ``logprob_start_len`` rules on ``/generate``: ``== prompt length`` is accepted and
    returns no prompt logprobs, larger is a 400; a ``max_new_tokens=0`` request with logprobs and no
    ``logprob_start_len`` gets the prompt's logprobs from position 0. The first entry from any
    ``logprob_start_len`` is ``None`` (SGLang's shape), which ``token_length_normalized`` skips and
    ``unconditional_likelihood_normalized`` cannot average: that method fails inside the frontend
    with a ``TypeError``, as it does against SGLang 0.5.23."""
    import requests

    tok = hf_auto_tokenizer()
    text = "The answer is yes"
    ids = tok.encode(text, add_special_tokens=False)
    url = backend.base_url + "/generate"
    base = {"text": text, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True}
    r = requests.post(url, json={**base, "logprob_start_len": len(ids)}, timeout=60)
    assert r.status_code == 200, r.text  # (the values: test_server_sglang_frontend_real.py)
    r = requests.post(url, json={**base, "logprob_start_len": len(ids) + 1}, timeout=60)
    assert r.status_code == 400 and "logprob_start_len" in r.text
    r = requests.post(url, json={**base, "input_ids": ids, "text": None}, timeout=60)
    got = r.json()["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in got] == ids and got[0][0] is None

    r = requests.post(url, json={**base, "input_ids": ids, "text": None, "logprob_start_len": 2}, timeout=60)
    got = r.json()["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in got] == ids[2:] and got[0][0] is None and None not in [e[0] for e in got[1:]]

    def pick_with(method: Any) -> Any:
        @sgl.function
        def pick(s):
            s += "The answer is"
            s += sgl.select("x", choices=["yes", "no", " yes sir"], choices_method=method)

        return pick.run(backend=backend)

    state = pick_with(sgl.token_length_normalized)
    assert state["x"] in ("yes", "no", " yes sir"), state.text()
    assert all(i[0][0] is None for i in state.get_meta_info("x")["input_token_logprobs"])
    assert isinstance(pick_with(sgl.unconditional_likelihood_normalized).error(), TypeError)
