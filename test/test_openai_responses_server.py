"""``POST /v1/responses`` through the real server processes: on ``server_fixture.FakeScheduler``
(the client's stream helper, client disconnects abort the request, a grammar on a grammar-less
server) and, in the slow tier, on the embedded tiny model (greedy text equal to chat completions',
``json_schema`` output validated with ``jsonschema``). The in-process route tests are in
``test_openai_responses.py``.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
import requests
from fake_prompt_tm import MODEL
from responses_testutil import final_response
from server_fixture import used_pages, wait_used_pages

pytestmark = pytest.mark.timeout(300)


# ----------------------------------------------------------------------------------- real processes
@pytest.fixture(scope="module")
def fake_server(held_fake_server: Any) -> Any:
    """conftest's session fake-model server, served as ``MODEL``, ``[hold]`` prompts held until
    aborted (every wait here is on a condition, none on the fake model's step time)."""
    return held_fake_server


def test_real_server_stream_and_disconnects_abort(fake_server: Any) -> None:
    """Through the real processes: a streamed response parses with the client's stream helper;
    a client that goes away mid-stream, or before a non-streamed response is done, aborts its
    (held, never-ending) request, whose KV pages come back; a grammar on this grammar-less server
    is a 400 naming ``text.format``."""
    client = openai.OpenAI(base_url=fake_server.url + "/v1", api_key="x", max_retries=0, timeout=60)
    idle = used_pages(fake_server)
    with client.responses.stream(model=MODEL, input="Hello", max_output_tokens=6) as s:
        final = final_response(s)  # a cut stream ends with response.incomplete, as OpenAI's
    assert final.status == "incomplete" and final.usage.output_tokens == 6 and final.output_text
    assert client.responses.retrieve(final.id).output_text == final.output_text
    body = {"model": MODEL, "input": "[hold] go", "max_output_tokens": 400, "stream": True}
    with requests.post(fake_server.url + "/v1/responses", json=body, stream=True, timeout=30) as r:
        lines = r.iter_lines()
        assert any(b"output_text.delta" in line for _, line in zip(range(30), lines) if line)
        assert used_pages(fake_server) > idle
    wait_used_pages(fake_server, idle)
    # the fake scheduler has no grammar backend: a json_schema format is a 400 naming text.format
    fmt = {"type": "json_schema", "name": "s", "schema": {"type": "object"}}
    with pytest.raises(openai.BadRequestError) as ei:
        client.responses.create(model=MODEL, input="x", text={"format": fmt}, stream=True)
    assert ei.value.body["param"] == "text.format" and "xgrammar" in ei.value.message
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=2).responses.create(model=MODEL, input="[hold] go", max_output_tokens=400)
    wait_used_pages(fake_server, idle)


# ----------------------------------------------------------------------------------- real model
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_real_model_greedy_text_and_json_schema(embedded_model_server: Any) -> None:
    """The embedded random-weight model: greedy ``/v1/responses`` text (streamed and not) equals
    greedy ``/v1/chat/completions`` text for the same conversation (a cold run of the other
    route), also in thinking mode; a ``json_schema`` answer parses and validates with
    ``jsonschema``."""
    jsonschema = pytest.importorskip("jsonschema")
    client = openai.OpenAI(
        base_url=embedded_model_server.url + "/v1", api_key="x", max_retries=0, timeout=600
    )
    model = client.models.list().data[0].id
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    want = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    r = client.responses.create(
        model=model, instructions="Be brief.", input="Name a colour.", max_output_tokens=12, temperature=0
    )
    assert r.output_text == want.choices[0].message.content
    assert r.usage.input_tokens == want.usage.prompt_tokens
    with client.responses.stream(
        model=model, instructions="Be brief.", input="Name a colour.", max_output_tokens=12, temperature=0
    ) as s:
        assert final_response(s).output_text == r.output_text  # cut or not
    think = client.chat.completions.create(
        model=model, messages=msgs, max_tokens=12, temperature=0, reasoning_effort="high",
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )  # fmt: skip
    rt = client.responses.create(
        model=model, instructions="Be brief.", input="Name a colour.", max_output_tokens=12, temperature=0,
        reasoning={"effort": "high"},
    )  # fmt: skip
    reasoning = [o.content[0].text for o in rt.output if o.type == "reasoning"]
    assert (reasoning[0] if reasoning else None) == think.choices[0].message.model_extra.get(
        "reasoning_content"
    )
    assert rt.output_text == (think.choices[0].message.content or "")
    schema = {
        "type": "object",
        "properties": {
            "colour": {"type": "string", "enum": ["red", "blue"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
        },
        "required": ["colour", "n"],
        "additionalProperties": False,
    }
    rj = client.responses.create(
        model=model, input="Colour as JSON.", temperature=0, max_output_tokens=200,
        text={"format": {"type": "json_schema", "name": "c", "schema": schema, "strict": True}},
    )  # fmt: skip
    assert rj.status == "completed"
    jsonschema.validate(json.loads(rj.output_text), schema)
