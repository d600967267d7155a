"""SGLang frontend-language programs against our server through ``sglang.RuntimeEndpoint``.

The real client (the ``sglang`` package's ``RuntimeEndpoint``) talks to the native API:
``/get_model_info``, ``/generate`` (streaming, batches, ``max_new_tokens=0`` prefix caching,
input logprobs for ``select``), ``/flush_cache``. The server runs the model-free FakeScheduler, so
the expected texts are known. Skipped when ``sglang`` is not importable (it is not a project
dependency: its full install pulls a GPU stack; ``pip download --no-deps sglang`` + unzip +
``PYTHONPATH`` with ``psutil pybase64 IPython`` installed is enough for the frontend).
"""

from __future__ import annotations

import pytest
from server_fixture import FAKE_TEXT, fake_env, make_fake_model_dir, start_server, tokenizer_source_dir

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("frontend")
    h = start_server(["--model-path", str(make_fake_model_dir(root))], fake_env(), root / "server.log")
    yield sgl.RuntimeEndpoint(h.url)
    assert h.stop() == 0


def test_gen_select_fork_stream_batch(backend):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_source_dir())
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
