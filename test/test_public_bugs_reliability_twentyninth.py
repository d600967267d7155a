"""Public bug reports on bad request bodies (round 29): a body nested deeper than the JSON reader
recurses (in a known field or an unknown one), and an integer past the signed 64-bit range in a
field the answer echoes back (``max_tool_calls`` / ``max_output_tokens`` of ``/v1/responses``),
which a JSON writer such as orjson cannot write.

In-process only: the OpenAI and Anthropic routers over the fake tokenizer manager of
``fake_prompt_tm`` (it records every request it is given). Oracles: the reports' stated
expectation (a 400 in the route family's error shape, never a 500), the ``openai`` client's own
error type, nothing sent to the engine for a refused body, and the next well-formed request
answered as before.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from anthropic_testutil import make_clients
from fake_prompt_tm import MODEL, PromptTM
from fastapi.testclient import TestClient

pytestmark = pytest.mark.timeout(120)

DEPTH = 20000
BIG = 2**70  # past both the signed and the unsigned 64-bit ranges


def _clients(tok: Any) -> tuple[openai.OpenAI, TestClient, PromptTM]:
    tm = PromptTM(tok, reply="ok")
    _, oa, tc = make_clients(tm)
    return oa, TestClient(tc.app, raise_server_exceptions=False), tm


_BODIES = {
    "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": MODEL, "prompt": [5, 6, 7]},
    "/v1/responses": {"model": MODEL, "input": "hi"},
    "/v1/messages": {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.mark.parametrize("path", list(_BODIES))
@pytest.mark.parametrize("field", ["x_unknown", "metadata"])
def test_technocore_130_ds4_43_deeply_nested_body_is_a_400(tok: Any, path: str, field: str) -> None:
    """flop-labs/technocore-chat#130: a POST body of ~20000 nested arrays (40 KB, under any size
    cap) answered 500 because the JSON reader's recursion error escaped; expected: the ordinary
    malformed-body 400. antirez/ds4#43: the same nesting inside an unknown top-level field
    crashed the server process. Expected here on every route: a 400 in the route family's error
    shape (``error.type`` of OpenAI's or Anthropic's form), nothing sent to the engine, and the
    same route then serves a well-formed body (200)."""
    _, tc, tm = _clients(tok)
    head = json.dumps(_BODIES[path])[:-1]
    raw = f'{head}, "{field}": ' + "[" * DEPTH + "]" * DEPTH + "}"
    r = tc.post(path, content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] in ("BadRequestError", "invalid_request_error"), err
    assert tm.received == []
    ok = tc.post(path, json=_BODIES[path])
    assert ok.status_code == 200, ok.text
    assert len(tm.received) == 1


@pytest.mark.parametrize("field", ["max_tool_calls", "max_output_tokens"])
@pytest.mark.parametrize("stream", [False, True])
def test_pyaleph_476_orjson_301_echoed_bigint_is_a_400_not_a_500(tok: Any, field: str, stream: bool) -> None:
    """aleph-im/pyaleph#476: a POST holding an integer past 2**64 was accepted and the answer
    that wrote it back failed (``int too big to convert``, a 500); the report asks for such an
    integer to be refused when it comes in. ijl/orjson#301: orjson cannot write an integer past
    the 64-bit range (``Integer exceeds 64-bit range``). ``/v1/responses`` echoes
    ``max_tool_calls`` and ``max_output_tokens`` in its response object: 2**70 in either is a
    400 naming the field (the ``openai`` client raises ``BadRequestError`` with that ``param``),
    streamed or not, nothing reaches the engine, and ``2**63 - 1`` (the int64 edge, which
    ``json.dumps`` and orjson both write) is still taken for ``max_tool_calls``."""
    oa, tc, tm = _clients(tok)
    with pytest.raises(openai.BadRequestError) as e:
        oa.responses.create(model=MODEL, input="hi", stream=stream, **{field: BIG})
    assert e.value.status_code == 400
    assert e.value.body["param"] == field and str(BIG) in e.value.body["message"]
    assert tm.received == []
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_tool_calls": 2**63 - 1})
    assert r.status_code == 200, r.text
    assert r.json()["max_tool_calls"] == 2**63 - 1
