"""``client.models.retrieve(...)`` of the ``openai`` client (``GET /v1/models/{model}``).

Found by hand: the route was missing (FastAPI 404 ``{"detail": "Not Found"}``) although
``/v1/models`` lists the model; SGLang serves it (the model card, or 404 in the OpenAI error shape
for an unknown name). Oracle: the real ``openai`` client's parser and its ``NotFoundError``.
The server runs the model-free FakeScheduler (process wiring only).
"""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(plain_fake_server):  # noqa: ANN201 - a server_fixture.ServerHandle
    """The session's fake-model server served as ``qa-model`` (conftest ``plain_fake_server``)."""
    return plain_fake_server


def test_models_retrieve(server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY")
    listed = [m.id for m in client.models.list().data]
    assert listed == ["qa-model"]
    card = client.models.retrieve("qa-model")
    assert card.id == "qa-model" and card.object == "model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_reasoning_tokens_counted_in_thinking_mode(server) -> None:
    # Found by hand: with chat_template_kwargs {"thinking": true} the answer had reasoning_content
    # but usage.reasoning_tokens stayed 0. SGLang counts the generated tokens up to and including
    # the first "</think>" (all of them when there is none) and also reports them at OpenAI's
    # place, usage.completion_tokens_details.reasoning_tokens. The fake model never emits
    # "</think>", so every completion token is a reasoning token.
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY")
    msgs = [{"role": "user", "content": "Hi"}]
    think = {"chat_template_kwargs": {"thinking": True}}
    r = client.chat.completions.create(model="qa-model", messages=msgs, max_tokens=5, extra_body=think)
    assert r.choices[0].message.content == ""
    assert r.usage.completion_tokens == 5
    assert r.usage.model_extra["reasoning_tokens"] == 5
    assert r.usage.completion_tokens_details.reasoning_tokens == 5
    stream = client.chat.completions.create(
        model="qa-model",
        messages=msgs,
        max_tokens=4,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=think,
    )
    usage = [c.usage for c in stream if c.usage is not None][-1]
    assert usage.completion_tokens == 8 and usage.model_extra["reasoning_tokens"] == 8
    plain = client.chat.completions.create(model="qa-model", messages=msgs, max_tokens=3)
    assert plain.usage.model_extra["reasoning_tokens"] == 0
    assert plain.usage.completion_tokens_details is None


def test_reasoning_tokens_include_the_think_end_token(tok) -> None:  # noqa: ANN001 - lazy transformers
    """``usage.completion_tokens_details.reasoning_tokens`` counts the generated tokens up to and
    including the first ``</think>``: SGLang's rule (sgl-project/sglang ``Req.update_reasoning_tokens``
    adds ``end_pos + 1``, and its ``UsageProcessor`` reports that count as the usage's reasoning
    tokens), which this SGLang-shaped server keeps, so ``meta_info.reasoning_tokens`` and the
    OpenAI usage agree. vLLM's parsers count only the tokens between the markers (one fewer here);
    that rule is not followed. Streamed and not, and on ``/v1/responses``
    (``output_tokens_details``). Oracle: the tokenizer's own ids of the reply."""
    from fake_prompt_tm import MODEL, PromptTM
    from responses_testutil import make_client

    reply = "Let me think it over.</think>\n\nThe answer."
    ids = tok.encode(reply, add_special_tokens=False)
    want = ids.index(tok.convert_tokens_to_ids("</think>")) + 1
    assert 1 < want < len(ids)
    client, _ = make_client(PromptTM(tok, reply))
    msgs = [{"role": "user", "content": "Why?"}]
    think = {"chat_template_kwargs": {"thinking": True}}
    r = client.chat.completions.create(model=MODEL, messages=msgs, extra_body=think)
    assert r.choices[0].message.content == "The answer."
    assert r.usage.completion_tokens == len(ids)
    assert r.usage.completion_tokens_details.reasoning_tokens == want
    stream = client.chat.completions.create(
        model=MODEL, messages=msgs, stream=True, stream_options={"include_usage": True}, extra_body=think
    )
    usage = [c.usage for c in stream if c.usage is not None][-1]
    assert usage.completion_tokens_details.reasoning_tokens == want
    resp = client.responses.create(model=MODEL, input="Why?", reasoning={"effort": "high"})
    assert resp.usage.output_tokens_details.reasoning_tokens == want
