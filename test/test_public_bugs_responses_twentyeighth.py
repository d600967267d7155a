"""A twenty-eighth set of public reports on ``/v1/responses``, replayed on an in-process app of the
OpenAI router over a fake engine: ``truncation: "disabled"`` with an input over the context (a
400, not a 200 ``incomplete``), the ``truncation`` field accepted, echoed and checked, and
structured output asked for by ``text.format`` or by a chat-shaped ``response_format`` reaching
the engine as the same JSON-schema constraint.

No fault was found by these reports; they stand as regression guards of the behaviour each asked
for.
The model's text is written by hand (:class:`~fake_prompt_tm.PromptTM`). Oracles: the ``openai``
client's own types, errors and ``responses.parse`` (pydantic validation of the output);
``json.loads``; the values the reports and OpenAI's API reference give.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from deepseek_recipe_testutil import recipe_responses_prompt
from fake_prompt_tm import MODEL, PromptTM
from openai.types.responses import Response as OpenAIResponse
from pydantic import BaseModel
from responses_testutil import WEATHER, make_client, post, sse
from sglang_v4.managers.control_struct import context_length_message
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.tokenization import RequestError as EngineRequestError
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
CITY_JSON = '{"city": "Paris", "days": 3}'


class _City(BaseModel):
    """The pydantic model of :data:`CITY_SCHEMA` (the ``openai`` client's ``text_format``)."""

    city: str
    days: int


class _SmallContextTM(PromptTM):
    """:class:`PromptTM` with a small context that refuses a longer prompt as the tokenizer manager
    does (SGLang's context-length 400: prompt plus ``max_new_tokens``, or one token, over
    ``context_len``)."""

    async def generate_request(self, obj: GenerateReqInput, request: Any = None) -> AsyncIterator[Any]:
        n = len(obj.input_ids)
        mnt = (obj.sampling_params or {}).get("max_new_tokens")
        if n + (mnt if mnt is not None else 1) > self.context_len:
            raise EngineRequestError(
                context_length_message(self.context_len, n, mnt if n < self.context_len else None)
            )
        async for out in super().generate_request(obj, request):
            yield out


def _schema_of(obj: GenerateReqInput) -> Any:
    """The JSON schema an engine request is constrained by (``json_schema`` sampling parameter)."""
    js = (obj.sampling_params or {}).get("json_schema")
    return json.loads(js) if isinstance(js, str) else js


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize("extra", [{"truncation": "disabled"}, {}])
def test_input_over_the_context_without_truncation_is_a_400(
    tok: PreTrainedTokenizerFast, extra: dict[str, Any]
) -> None:
    """tenstorrent/tt-inference-server#3420: an input over the context with ``truncation:
    "disabled"`` answered 200 with ``status: "incomplete"``; OpenAI's reference: with
    ``disabled`` (the default) "if the input size will exceed the context window size for a
    model, the request will fail with a 400 error". Expected: a 400 naming the context length,
    streamed and not (no ``text/event-stream`` 200), the ``openai`` client's ``BadRequestError``,
    and no response stored (the listing of the next response is not polluted)."""
    tm = _SmallContextTM(tok, reply="Sure.")
    tm.context_len = 64
    client, tc = make_client(tm)
    long_input = " ".join(f"word{i}" for i in range(200))
    for stream in (False, True):
        r = tc.post("/v1/responses", json={"model": MODEL, "input": long_input, "stream": stream, **extra})
        assert r.status_code == 400, r.text
        assert "maximum context length" in r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model=MODEL, input=long_input, **extra)
    ok = client.responses.create(model=MODEL, input="Hi.", **extra)
    assert ok.status == "completed" and ok.output_text == "Sure."


@pytest.mark.parametrize("value", ["auto", "disabled"])
def test_truncation_is_accepted_and_echoed_everywhere(tok: PreTrainedTokenizerFast, value: str) -> None:
    """ogx-ai/ogx#4708: ``truncation`` (``"auto"`` | ``"disabled"``, OpenAI's request field,
    echoed on the ``Response`` object) was not served. Expected: each value is accepted and echoed
    on the response non-streamed, on the stream's ``response.created`` and ``response.completed``
    and on the stored response (``GET /v1/responses/{id}``), all read by the ``openai`` client's
    ``Response`` type."""
    tm = PromptTM(tok, reply="Sure.")
    _, tc = make_client(tm)
    body = {"model": MODEL, "input": "Hi.", "truncation": value}
    r = tc.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    stored = tc.get(f"/v1/responses/{r.json()['id']}")
    s = tc.post("/v1/responses", json={**body, "stream": True})
    assert s.status_code == 200, s.text
    events = sse(s.text)
    for got in (r.json(), stored.json(), events[0]["response"], events[-1]["response"]):
        assert OpenAIResponse.model_validate(got).truncation == value


@pytest.mark.parametrize("bad", ["middle", "", 1, True, ["auto"]])
def test_truncation_out_of_its_values_is_a_400(tok: PreTrainedTokenizerFast, bad: Any) -> None:
    """ogx-ai/ogx#4708: the field's values are ``"auto"`` and ``"disabled"`` (OpenAI's reference).
    Expected: any other value is a 400 in OpenAI's error shape naming ``truncation``, streamed or
    not, and nothing is sent to the engine."""
    tm = PromptTM(tok, reply="Sure.")
    _, tc = make_client(tm)
    for stream in (False, True):
        r = tc.post(
            "/v1/responses", json={"model": MODEL, "input": "Hi.", "truncation": bad, "stream": stream}
        )
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "truncation" and err["message"], err
    assert not tm.received


# --------------------------------------------------------------------------- structured output


def test_text_format_json_schema_constrains_and_parses(tok: PreTrainedTokenizerFast) -> None:
    """unslothai/unsloth#8846: ``/v1/responses`` accepted ``text.format`` and dropped it, so a
    ``json_schema`` request came back as free prose and the ``openai`` client's
    ``responses.parse(text_format=...)`` failed; NVIDIA-NeMo/Switchyard#377: the Responses
    format is flat (``name`` / ``schema`` / ``strict`` beside ``type``), not the chat nesting.
    Expected: the engine request is constrained by the schema given (its ``json_schema``
    sampling parameter, ``json.loads`` equal), streamed and not, and the client's
    ``responses.parse`` returns the parsed object."""
    tm = PromptTM(tok, reply=CITY_JSON)
    client, tc = make_client(tm)
    fmt = {"type": "json_schema", "name": "city", "schema": CITY_SCHEMA, "strict": True}
    for stream in (False, True):
        r = tc.post(
            "/v1/responses",
            json={"model": MODEL, "input": "Where?", "text": {"format": fmt}, "stream": stream},
        )
        assert r.status_code == 200, r.text
        assert _schema_of(tm.received[-1]) == CITY_SCHEMA
    parsed = client.responses.parse(model=MODEL, input="Where?", text_format=_City)
    sent = _schema_of(tm.received[-1])["properties"]
    assert {k: v["type"] for k, v in sent.items()} == {"city": "string", "days": "integer"}
    assert parsed.output_parsed == _City(city="Paris", days=3)


def test_chat_shaped_response_format_is_honoured_not_dropped(tok: PreTrainedTokenizerFast) -> None:
    """raullenchai/Rapid-MLX#912: clients reuse one chat ``response_format`` payload on
    ``/v1/chat/completions`` and ``/v1/responses``; the latter dropped it at parse time and
    generated unconstrained text. Expected: the same ``json_schema`` constraint reaches the
    engine as for the equivalent ``text.format`` (``json.loads`` equal to the schema sent), and
    the reply is the JSON the model wrote (``json.loads``)."""
    tm = PromptTM(tok, reply=CITY_JSON)
    _, tc = make_client(tm)
    rf = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}}
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "Where?", "response_format": rf})
    assert r.status_code == 200, r.text
    assert _schema_of(tm.received[-1]) == CITY_SCHEMA
    resp = OpenAIResponse.model_validate(r.json())
    assert json.loads(resp.output_text) == {"city": "Paris", "days": 3}
    fmt = {"type": "json_schema", "name": "city", "schema": CITY_SCHEMA, "strict": True}
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "Where?", "text": {"format": fmt}})
    assert r.status_code == 200, r.text
    assert _schema_of(tm.received[-1]) == _schema_of(tm.received[-2])


# --------------------------------------------------------------------------- input content parts


def test_function_call_output_as_content_parts_reaches_the_prompt(tok: PreTrainedTokenizerFast) -> None:
    """BYK/loreai#1291 and sgl-project/sglang#33990: OpenAI's ``function_call_output.output`` may
    be a list of content parts (``input_text`` ...), what MCP adapters send; one server flattened
    the list to ``""`` (the tool result silently dropped), another forwarded it unconverted and
    answered 400. Expected: 200, and the prompt DeepSeek's own Responses converter and V4 encoder
    render for the same input (every part's text, in order)."""
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    parts = [{"type": "input_text", "text": "First result"}, {"type": "input_text", "text": "Second result"}]
    items = [
        {"role": "user", "content": "Weather?"},
        call,
        {"type": "function_call_output", "call_id": "c1", "output": parts},
    ]
    tm = PromptTM(tok, reply="Sunny.")
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": items, "tools": [WEATHER]})
    assert resp["status"] == "completed" and events[-1]["type"] == "response.completed"
    prompts = {tok.decode(r.input_ids) for r in tm.received}
    assert prompts == {recipe_responses_prompt({"input": items, "tools": [WEATHER]})}
    prompt = prompts.pop()
    assert prompt.index("First result") < prompt.index("Second result")


@pytest.mark.parametrize("role", ["system", "developer", "assistant"])
def test_text_parts_of_any_role_reach_the_prompt(tok: PreTrainedTokenizerFast, role: str) -> None:
    """i-am-bee/beeai-framework#1591: a Responses ``message`` whose ``content`` is an array of
    ``input_text`` (``output_text`` for the assistant) parts, valid for every role in OpenAI's
    ``EasyInputMessage``, was refused or lost for system / developer / assistant messages.
    Expected: 200 and the prompt DeepSeek's own Responses converter and V4 encoder render for
    the same parts (every part's text, in order); a developer message is read as a system one,
    as on the chat route (so its oracle is the converter on the ``system`` role)."""
    kind = "output_text" if role == "assistant" else "input_text"
    parts = [{"type": kind, "text": "Answer in French."}, {"type": kind, "text": "Be brief."}]
    tail = [{"role": "user", "content": "Hello?"}] if role != "assistant" else []
    head = [{"role": "user", "content": "Hi."}] if role == "assistant" else []
    body = {"input": [*head, {"type": "message", "role": role, "content": parts}, *tail]}
    tm = PromptTM(tok, reply="Bonjour.")
    _, tc = make_client(tm)
    r = tc.post("/v1/responses", json={"model": MODEL, **body})
    assert r.status_code == 200, r.text
    prompt = tok.decode(tm.received[-1].input_ids)
    as_system = "system" if role == "developer" else role
    want = {"input": [*head, {"type": "message", "role": as_system, "content": parts}, *tail]}
    assert prompt == recipe_responses_prompt(want)
    assert prompt.index("Answer in French.") < prompt.index("Be brief.")


# --------------------------------------------------------------------------- output parts


def test_every_output_text_part_carries_annotations(tok: PreTrainedTokenizerFast) -> None:
    """Wei-Shaw/sub2api#5140: the ``output_text`` parts in ``response.completed`` had no
    ``annotations`` field (the intermediate events had ``[]``), and a strict client (Grok CLI)
    failed at the end of the stream with "missing field `annotations`"; OpenAI's schema makes
    the field required. Expected: every ``output_text`` part in the raw JSON (non-streamed
    response, each stream event's part, item and response, the stored response and its input
    items' replay) has ``annotations`` as a list."""
    tm = PromptTM(tok, reply="Pong.")
    _, tc = make_client(tm)
    resp, events = post(tc, {"input": "Ping?"})
    stored = tc.get(f"/v1/responses/{resp['id']}").json()

    def parts(node: Any) -> list[dict[str, Any]]:
        if isinstance(node, dict):
            own = [node] if node.get("type") == "output_text" else []
            return own + [p for v in node.values() for p in parts(v)]
        if isinstance(node, list):
            return [p for v in node for p in parts(v)]
        return []

    found = parts([resp, stored, events])
    assert len(found) >= 5, found  # response, stored, part added/done, item done, completed
    assert all(isinstance(p.get("annotations"), list) for p in found), found
