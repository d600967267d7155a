"""The thirtieth set of public bug reports on SGLang's frontend language (``sgl.function``
programs through ``sglang.RuntimeEndpoint``): the ``/get_model_info`` answer the endpoint reads
when it is built, and constrained ``gen`` arguments (a Chinese ``regex``, ``json_schema``,
``dtype=int``) on a server without a grammar backend.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; the server is launched with ``--served-model-name
qa-model``; it builds no grammar backend, so a request with a grammar is refused as on a
server without xgrammar). Oracles: the fixture's own flags and model directory contents (``config.json`` read
with ``json.loads``), SGLang's documented ``/get_model_info`` keys, OpenAI's error shape
(``{"error": {"message", "type", "code"}}``) for a refused request, and ``FAKE_TEXT`` through the
DeepSeek-V4 tokenizer (``transformers``) for the program run after a refusal. Skipped without the
``sglang`` package (the frontend client; not a project dependency). Every report here passed
as-is and is kept as a regression test.
"""

from __future__ import annotations

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


def _gen_after_refusal(backend: Any, tok: Any) -> None:
    """A plain ``gen`` on the same endpoint answers the fake model's text (nothing was left
    behind by a refused request)."""

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
    body = err if isinstance(err, dict) else json.loads(str(err).replace("'", '"'))
    assert body["error"]["code"] == 400 and body["error"]["type"] == "BadRequestError", body
    assert f"({field})" in body["error"]["message"], body
    _gen_after_refusal(backend, tok)
