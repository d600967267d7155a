"""The eighteenth set of public bug reports on streaming (see ``test_public_bugs_stream_eighteenth``),
part two: SGLang frontend-language programs (``sgl.function`` through ``sglang.RuntimeEndpoint``)
against the server -- on a server with ``--api-key``, and a streamed program whose variables come
from a choice and from a generation cut by a stop string. Both reports passed as-is and are kept
as regression tests.

Fixture: ``secured_fake_server`` (``server_fixture.FakeScheduler`` with ``--api-key``: the fake
model writes ``FAKE_TEXT`` over and over). Oracles:
``FAKE_TEXT`` through the DeepSeek-V4 tokenizer and the same program run unstreamed. Skipped
without the ``sglang`` package (the frontend client; not a project dependency).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from server_fixture import SECURED_API_KEY, ServerHandle, fake_output_text

pytestmark = pytest.mark.timeout(300)


def test_sglang_230_frontend_program_on_a_server_with_an_api_key(
    secured_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#230 (``--api-key``: the server answers 401 without the key; the
    frontend's ``RuntimeEndpoint(url, api_key=...)`` sends it as ``Authorization: Bearer``).
    Expected: ``RuntimeEndpoint`` without the key fails at once (its ``/get_model_info`` is a
    401, ``/health`` stays open); with the key a program of ``gen``, ``select`` and ``fork`` runs
    (the texts are the fake model's, by the tokenizer), streamed too, and ``flush_cache``
    succeeds."""
    sgl = pytest.importorskip("sglang")
    url = secured_fake_server.url
    assert requests.get(url + "/health", timeout=30).status_code == 200
    assert requests.get(url + "/get_model_info", timeout=30).status_code == 401
    with pytest.raises(RuntimeError, match="Unauthorized"):
        sgl.RuntimeEndpoint(url)
    backend = sgl.RuntimeEndpoint(url, api_key=SECURED_API_KEY)

    @sgl.function
    def prog(s):
        s += "Q: hi\nA:" + sgl.gen("a", max_tokens=3)
        s += " Pick:" + sgl.select("c", choices=["x", "y"])
        forks = s.fork(2)
        for f in forks:
            f += sgl.gen("b", max_tokens=2)
        s += "|" + forks[0]["b"] + "|" + forks[1]["b"]

    state = prog.run(backend=backend)
    assert state.error() is None, state.error()
    assert state["a"] == fake_output_text(tok, 3)
    assert state["c"] in ("x", "y")
    two = fake_output_text(tok, 2)
    assert state.text() == f"Q: hi\nA:{state['a']} Pick:{state['c']}|{two}|{two}"
    streamed = prog.run(backend=backend, stream=True)
    assert "".join(streamed.text_iter()) == streamed.text() == state.text()
    assert backend.flush_cache() is None


def test_sglang_820_streamed_program_yields_the_chosen_and_the_generated_variable(
    secured_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#820 (a streamed program with ``sgl.gen(choices=...)`` then a
    ``gen(stop=".")`` chosen by it: ``text_iter(var_name=...)`` hung on the choice and raised on
    the generated variable). Expected against this server: ``text_iter("type")`` yields the
    chosen option and ``text_iter("value")`` the text up to the stop (the fake model's text by the
    tokenizer), both equal to the unstreamed run's variables."""
    sgl = pytest.importorskip("sglang")
    backend = sgl.RuntimeEndpoint(secured_fake_server.url, api_key=SECURED_API_KEY)

    @sgl.function
    def prog(s):
        s += "Choose a fruit: apple, orange. Let's choose " + sgl.gen("type", choices=["apple", "orange"])
        if s["type"] == "apple":
            s += " The colour of apple is" + sgl.gen("value", max_tokens=20, stop=".")
        else:
            s += " The shape of orange is" + sgl.gen("value", max_tokens=20, stop=".")

    whole = prog.run(backend=backend)
    assert whole.error() is None, whole.error()
    text = fake_output_text(tok, 20)
    assert whole["type"] in ("apple", "orange") and whole["value"] == text[: text.index(".")]
    for var in ("type", "value"):
        streamed = prog.run(backend=backend, stream=True)
        assert "".join(streamed.text_iter(var_name=var)) == whole[var], var
