"""The thirtieth set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``): the ``/get_model_info`` answer the endpoint reads
when it is built, and constrained ``gen`` arguments (a Chinese ``regex``, ``json_schema``,
``dtype=int``) on a server without a grammar backend; and the finish reasons a ``gen``'s meta info
and the streamed ``/generate`` route report; the frontend's ``flush_cache``; ``run_batch`` defaults against a ``gen``'s own
arguments.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; the server is launched with ``--served-model-name
qa-model``; it builds no grammar backend, so a request with a grammar is refused as on a server
without xgrammar). Oracles: the fixture's own flags and model directory contents
(``config.json`` read with ``json.loads``), SGLang's documented ``/get_model_info`` keys, OpenAI's
error shape (``{"error": {"message", "type", "code"}}``) for a refused request, SGLang's
finish-reason objects (``{"type": "length", "length": n}``, ``{"type": "stop", "matched": s}``)
with Python's ``str.find`` for which stop string ends the text, ``json.loads`` on each streamed
event, and ``FAKE_TEXT`` through the DeepSeek-V4 tokenizer (``transformers``) for the texts.
Skipped without the
``sglang`` package (the frontend client; not a project dependency). Every report here passed
as-is and is kept as a regression test.
"""

from __future__ import annotations

import ast
import json
import os
from typing import Any

import pytest
from server_fixture import ServerHandle, fake_output_text

sgl = pytest.importorskip("sglang")

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def backend(plain_fake_server: ServerHandle) -> Any:
    """SGLang's ``RuntimeEndpoint`` on the session's fake-model server."""
    return sgl.RuntimeEndpoint(plain_fake_server.url)


def test_sglang_12751_get_model_info_serves_what_the_endpoint_reads(backend: Any) -> None:
    """sgl-project/sglang#12751 (``bench_sglang`` and ``RuntimeEndpoint`` failed because
    ``GET /get_model_info`` answered a plain-text "not yet implemented" instead of JSON).
    Expected: building the endpoint succeeds; its ``model_info`` is a JSON object with SGLang's
    keys ``model_path``, ``tokenizer_path`` and ``is_generation`` (true for a generation model);
    ``get_model_name()`` is that ``model_path``, a directory whose ``config.json`` names the
    DeepSeek-V4 ``model_type``; ``served_model_name`` is the fixture's ``qa-model`` flag."""
    info = backend.model_info
    assert isinstance(info, dict), info
    assert {"model_path", "tokenizer_path", "is_generation"} <= set(info), info
    assert info["is_generation"] is True
    assert backend.get_model_name() == info["model_path"]
    with open(os.path.join(info["model_path"], "config.json"), encoding="utf-8") as f:
        assert json.loads(f.read())["model_type"] == "deepseek_v4"
    assert os.path.isfile(os.path.join(info["tokenizer_path"], "tokenizer.json"))
    assert info["served_model_name"] == "qa-model"


def _gen_answers_the_fake_text(backend: Any, tok: Any) -> None:
    """A plain ``gen`` on the same endpoint answers the fake model's text (nothing was left
    behind by an earlier refused request or cache flush)."""

    @sgl.function
    def plain(s: Any) -> None:
        s += "Say something:"
        s += sgl.gen("a", max_tokens=6, temperature=0)

    st = plain.run(backend=backend)
    assert st.error() is None, st.error()
    assert st["a"] == fake_output_text(tok, 6)


_SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"regex": r'\["(娃娃领|高领|海军领)"\]'}, "regex"),
        ({"json_schema": _SCHEMA}, "json_schema"),
        ({"dtype": int}, "regex"),
    ],
    ids=["chinese_regex", "json_schema", "dtype_int"],
)
def test_sglang_549_1254_constrained_gen_without_grammar_is_a_clear_400(
    backend: Any, tok: Any, kwargs: dict[str, Any], field: str
) -> None:
    """sgl-project/sglang#549 (a ``gen`` with a regex of Chinese alternatives crashed the
    scheduler) and sgl-project/sglang#1254 (``gen(json_schema=...)`` must be sent on to the
    server; ``dtype=int`` is sent as a regex). Expected on a server without a grammar backend:
    the program ends with the server's 400 in OpenAI's error shape whose message names the
    constraint field the frontend sent; the server stays up, and the next program on the same
    endpoint answers the fake model's text."""

    @sgl.function
    def constrained(s: Any) -> None:
        s += "用JSON数组列出一种衣服领形:"
        s += sgl.gen("out", max_tokens=16, temperature=0, **kwargs)

    st = constrained.run(backend=backend)
    err = st.error()
    assert err is not None
    # the frontend keeps the server's JSON body as the raised error's argument (a dict repr)
    body = err if isinstance(err, dict) else ast.literal_eval(str(err))
    assert body["error"]["code"] == 400 and body["error"]["type"] == "BadRequestError", body
    assert f"({field})" in body["error"]["message"], body
    _gen_answers_the_fake_text(backend, tok)


@pytest.mark.parametrize("stream", [False, True])
def test_sglang_2013_4550_gen_meta_info_finish_reason(backend: Any, tok: Any, stream: bool) -> None:
    """sgl-project/sglang#2013 (the finish reason a request reports was wrong) and
    sgl-project/sglang#4550 (the finish reason was always null, the stop never recorded).
    Expected, run plainly and streamed: a ``gen`` that runs to ``max_tokens`` reports SGLang's
    ``{"type": "length", "length": max_tokens}`` with ``completion_tokens`` equal to
    ``max_tokens``; a ``gen`` cut by one of a list of stop strings reports ``{"type": "stop",
    "matched": <that string>}`` for the string Python's ``str.find`` finds first in the fake
    model's text."""
    full = fake_output_text(tok, 30)
    stops = ["Done", "lazy"]
    first = min((s for s in stops if s in full), key=full.find)

    @sgl.function
    def two(s: Any) -> None:
        s += "Say something:"
        s += sgl.gen("long", max_tokens=5, temperature=0)
        s += "\nAgain:"
        s += sgl.gen("cut", max_tokens=30, temperature=0, stop=stops)

    st = two.run(backend=backend, stream=stream)
    if stream:
        st.text()  # wait for the whole program
    assert st.error() is None, st.error()
    long_info = st.get_meta_info("long")
    assert long_info["finish_reason"] == {"type": "length", "length": 5}, long_info
    assert long_info["completion_tokens"] == 5
    assert st["long"] == fake_output_text(tok, 5)
    cut_info = st.get_meta_info("cut")
    assert cut_info["finish_reason"] == {"type": "stop", "matched": first}, cut_info
    assert st["cut"] == full[: full.find(first)]


def test_sglang_3391_streamed_generate_finish_reason_is_null_until_the_end(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#3391 (an unfinished streamed chunk carried ``""`` as its finish
    reason; it must be ``null`` until the request ends), on the streamed ``/generate`` route the
    frontend reads with ``stream=True``. Expected: every ``data:`` event (``json.loads``) but the
    last has ``meta_info.finish_reason`` ``None``; the last has ``{"type": "length", "length":
    6}``; the stream ends with ``data: [DONE]`` and the last event's text is the fake model's six
    tokens decoded by ``transformers``."""
    import requests

    body = {
        "text": "Say something:",
        "sampling_params": {"max_new_tokens": 6, "temperature": 0},
        "stream": True,
    }
    with requests.post(plain_fake_server.url + "/generate", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        lines = [ln.decode() for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    events = [json.loads(ln[len("data: ") :]) for ln in lines[:-1]]
    assert len(events) >= 2
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1]), events
    assert events[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 6}
    assert events[-1]["text"] == fake_output_text(tok, 6)


def test_sglang_jax_384_sglang_9020_frontend_flush_cache(
    backend: Any, plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang-jax#384 (``POST /flush_cache`` answered 500 Internal Server Error) and
    sgl-project/sglang#9020 (callers of ``/flush_cache`` need a success status they can check).
    Expected: the frontend's ``RuntimeEndpoint.flush_cache()`` (a ``POST``) raises nothing; a
    plain ``POST`` and ``GET`` of ``/flush_cache`` on the idle server answer 200; a program run
    afterwards still answers the fake model's text."""
    import requests

    backend.flush_cache()
    for method in ("POST", "GET"):
        r = requests.request(method, plain_fake_server.url + "/flush_cache", timeout=30)
        assert r.status_code == 200, (method, r.status_code, r.text)
    _gen_answers_the_fake_text(backend, tok)


def test_sglang_846_gen_arguments_override_run_batch_defaults(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#846 (sampling parameters set both on ``run_batch`` and in ``sgl.gen``:
    which one is sent?). Expected, per the maintainers' answer: ``run_batch``'s arguments are
    the defaults and a ``gen``'s own argument wins. With ``run_batch(max_new_tokens=3)``, a
    ``gen(max_tokens=5)`` writes the fake model's 5 tokens (``length`` 5) and a ``gen`` without
    ``max_tokens`` writes 3, for every program of the batch."""

    @sgl.function
    def two(s: Any, prompt: str) -> None:
        s += prompt
        s += sgl.gen("own", max_tokens=5, temperature=0)
        s += "\n"
        s += sgl.gen("default", temperature=0)

    states = two.run_batch(
        [{"prompt": "Hello:"}, {"prompt": "Hi there:"}], backend=backend, max_new_tokens=3, temperature=10
    )
    assert len(states) == 2
    for st in states:
        assert st.error() is None, st.error()
        assert st["own"] == fake_output_text(tok, 5)
        assert st.get_meta_info("own")["finish_reason"] == {"type": "length", "length": 5}
        assert st["default"] == fake_output_text(tok, 3)
        assert st.get_meta_info("default")["finish_reason"] == {"type": "length", "length": 3}
