"""``POST /v1/messages`` (Anthropic's Messages API) through the real server processes: on
``server_fixture.FakeScheduler`` (the API key through the admission middleware, stop sequences
through the real stop checker, client disconnects abort the request) and, in the slow tier, on the
embedded tiny model (greedy text equal to chat completions', ``count_tokens`` equal to the chat
prompt's tokens). The in-process route tests are in ``test_anthropic_messages.py``.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
import requests
from fake_prompt_tm import blocks
from server_fixture import SECURED_API_KEY, used_pages, wait_used_pages

pytestmark = pytest.mark.timeout(300)

KEY = SECURED_API_KEY
#: the served model name of the session's ``secured_fake_server`` (conftest.py)
MODEL = "fake-v4"


@pytest.fixture(scope="module")
def fake_server(secured_fake_server: Any) -> Any:
    """The session's ``secured_fake_server`` (conftest.py): API key :data:`KEY`, ``[hold]``
    prompts held until aborted."""
    return secured_fake_server


# ----------------------------------------------------------------------------------- real processes
def test_real_server_keys_stops_and_disconnects(fake_server: Any) -> None:
    """Through the real processes (admission middleware included): ``x-api-key`` passes it and a
    missing key is a 401 in Anthropic's shape; ``stop_sequences`` end the text where the chat
    route's ``stop`` does, with ``stop_reason`` ``stop_sequence``; a client that goes away
    mid-stream, or before a non-streamed message is done, aborts its (held, never-ending)
    request, whose KV pages come back."""
    url = fake_server.url
    body = {"model": MODEL, "max_tokens": 40, "messages": [{"role": "user", "content": "Hi"}]}
    r = requests.post(url + "/v1/messages", json=body, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert (
        requests.post(url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=30).status_code
        == 200
    )
    client = anthropic.Anthropic(
        base_url=url, api_key=None, default_headers={"x-api-key": KEY}, max_retries=0, timeout=60
    )
    oa = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    want = oa.chat.completions.create(model=MODEL, messages=body["messages"], max_tokens=40, stop=["fox"])
    assert want.choices[0].finish_reason == "stop"
    m = client.messages.create(**body, stop_sequences=["fox"])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == "fox"
    assert m.content[0].text == want.choices[0].message.content and "fox" not in m.content[0].text
    with client.messages.stream(**body, stop_sequences=["fox"]) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.content[0].text == m.content[0].text
    idle = used_pages(fake_server)
    hold = {"model": MODEL, "max_tokens": 400, "messages": [{"role": "user", "content": "[hold] go"}]}
    with requests.post(
        url + "/v1/messages",
        json={**hold, "stream": True},
        headers={"x-api-key": KEY},
        stream=True,
        timeout=30,
    ) as r:
        lines = r.iter_lines()
        assert any(b"text_delta" in line for _, line in zip(range(30), lines) if line)
        assert used_pages(fake_server) > idle
    wait_used_pages(fake_server, idle)
    with pytest.raises(anthropic.APITimeoutError):
        client.with_options(timeout=2).messages.create(**hold)
    wait_used_pages(fake_server, idle)


# ----------------------------------------------------------------------------------- real model
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_real_model_greedy_text_equals_chat(embedded_model_server: Any) -> None:
    """The embedded random-weight model: greedy ``/v1/messages`` text (streamed and not) equals
    greedy ``/v1/chat/completions`` text for the same conversation (a cold run of the other
    route), also in thinking mode; ``count_tokens`` equals chat's prompt tokens."""
    oa = openai.OpenAI(base_url=embedded_model_server.url + "/v1", api_key="x", max_retries=0, timeout=600)
    client = anthropic.Anthropic(base_url=embedded_model_server.url, api_key="x", max_retries=0, timeout=600)
    model = oa.models.list().data[0].id
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
    kw: dict[str, Any] = dict(
        model=model, max_tokens=12, system="Be brief.", messages=msgs[1:], extra_body={"temperature": 0}
    )
    want = oa.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    m = client.messages.create(**kw)
    text = "".join(b.text for b in m.content if b.type == "text")
    assert text == want.choices[0].message.content
    assert m.usage.input_tokens == want.usage.prompt_tokens
    assert m.usage.output_tokens == want.usage.completion_tokens
    assert client.messages.count_tokens(model=model, system="Be brief.", messages=msgs[1:]).input_tokens == (
        want.usage.prompt_tokens
    )
    with client.messages.stream(**kw) as s:
        assert blocks(s.get_final_message()) == blocks(m)
    think = oa.chat.completions.create(
        model=model, messages=msgs, max_tokens=12, temperature=0, extra_body={"thinking": {"type": "enabled"}}
    )
    mt = client.messages.create(**kw, thinking={"type": "enabled", "budget_tokens": 1024})
    reasoning = [b.thinking for b in mt.content if b.type == "thinking"]
    assert (reasoning[0] if reasoning else None) == think.choices[0].message.model_extra.get(
        "reasoning_content"
    )
    assert "".join(b.text for b in mt.content if b.type == "text") == (think.choices[0].message.content or "")
