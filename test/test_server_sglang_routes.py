"""SGLang's routes beyond generation on the real server process: the embedding routes of a
generation model, and the parser routes ``/separate_reasoning`` and ``/parse_function_call``.

Before, each of them answered FastAPI's 404 ``{"detail": "Not Found"}``. SGLang answers an
embedding request to a generation model with a 400 whose message says to launch with
``--is-embedding`` (oracle: the ``openai`` client's own ``BadRequestError``), and serves the parser
routes over its output parsers. The texts parsed here are written out by hand with the expected
split or calls beside them (the oracle; arguments compared after ``json.loads``). The server runs
the model-free FakeScheduler (process wiring only).
"""

from __future__ import annotations

import json

import pytest
import requests

pytestmark = pytest.mark.timeout(180)

D = "｜DSML｜"
TOOLS = [
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
]


def _invoke(name: str, *params: tuple[str, str, str]) -> str:
    body = "\n".join(f'<{D}parameter name="{k}" string="{s}">{v}</{D}parameter>' for k, s, v in params)
    return f'<{D}invoke name="{name}">\n{body}\n</{D}invoke>'


def _block(*invokes: str) -> str:
    return f"\n\n<{D}tool_calls>\n" + "\n".join(invokes) + f"\n</{D}tool_calls>"


@pytest.fixture(scope="module")
def server(plain_fake_server):  # noqa: ANN201 - a server_fixture.ServerHandle
    """The session's fake-model server served as ``qa-model`` (conftest ``plain_fake_server``)."""
    return plain_fake_server


def test_embedding_routes_of_a_generation_model_answer_400(server) -> None:
    """``client.embeddings.create`` (and ``/v1/classify``, native ``/encode`` and ``/classify``) on
    a generation model: a 400 saying the model is not an embedding model (SGLang's answer), in
    the route family's error shape, never a 404 that reads as a wrong URL."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="EMPTY")
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="qa-model", input="hello")
    assert e.value.status_code == 400 and "--is-embedding" in e.value.message
    # SGLang's text first (clients match it), then why its advice does not apply here: sglang-v4
    # refuses --is-embedding at start-up
    message = e.value.body["message"]
    assert message.startswith(
        "This model does not appear to be an embedding model by default. "
        "Please add `--is-embedding` when launching the server or try another model."
    ), message
    assert message.endswith("serves generation models only and does not support `--is-embedding`."), message
    r = requests.post(server.url + "/v1/classify", json={"model": "qa-model", "input": "hi"}, timeout=30)
    assert r.status_code == 400 and r.json()["object"] == "error" and "embedding model" in r.json()["message"]
    for path in ("/encode", "/classify"):
        r = requests.post(server.url + path, json={"text": "hello"}, timeout=30)
        assert r.status_code == 400, (path, r.text)
        assert "--is-embedding" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("text", "parser", "reasoning", "content"),
    [
        ("Let me think.</think>\n\nThe answer is 4.", "deepseek-v4", "Let me think.", "The answer is 4."),
        ("<think>Hmm, 2+2.</think>Four.", "deepseek-v4", "Hmm, 2+2.", "Four."),
        ("A plain answer.", "deepseek-v4", "", "A plain answer."),
        ("Still thinking when cut", "deepseek-r1", "Still thinking when cut", ""),
        ("<think>cut before the end", "deepseek-v3", "cut before the end", ""),
        (
            f"<think>Need the weather.\n\n<{D}tool_calls>\n</{D}tool_calls>",
            "deepseek-v4",
            "Need the weather.",  # the block's "\n\n" separator goes with the block
            f"\n\n<{D}tool_calls>\n</{D}tool_calls>",
        ),
    ],
)
def test_separate_reasoning_route(server, text: str, parser: str, reasoning: str, content: str) -> None:
    """``POST /separate_reasoning`` splits a finished text as the chat route splits its output:
    the reasoning ends at the first ``</think>`` (whitespace after it dropped) or, for
    ``deepseek-v4``, at a DSML tool-call block (the block is text, for the tool parser); a text with no
    think tag is a chat-mode answer, except for ``deepseek-r1``, whose output always starts inside
    the reasoning; ``return_blocks`` lists the parts in order."""
    body = {"text": text, "reasoning_parser": parser, "return_blocks": True}
    r = requests.post(server.url + "/separate_reasoning", json=body, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert (out["reasoning_text"], out["text"]) == (reasoning, content)
    expected_blocks = ([{"type": "reasoning", "text": reasoning}] if reasoning else []) + [
        {"type": "text", "text": content}
    ]
    assert out["blocks"] == expected_blocks
    assert out["reasoning_blocks"] == ([reasoning] if reasoning else []) and out["text_blocks"] == [content]


def test_parse_function_call_route(server) -> None:
    """``POST /parse_function_call``: DSML calls come back as ``calls`` with ``tool_index`` (the
    tool's place in ``tools``), ``name`` and ``parameters`` (a JSON text the client can load); the
    text before the block is ``normal_text``. A block whose value is not valid JSON is no call and
    is dropped (no DSML markup is ever returned as text), so every returned ``parameters`` loads.
    An unfinished block gives no call."""
    url = server.url + "/parse_function_call"
    good = "Checking." + _block(
        _invoke("get_weather", ("city", "true", 'Par"is'), ("days", "false", "3")), _invoke("noop")
    )
    r = requests.post(url, json={"text": good, "tools": TOOLS, "tool_call_parser": "deepseekv4"}, timeout=30)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["normal_text"] == "Checking."
    got = [(c["tool_index"], c["name"], json.loads(c["parameters"])) for c in out["calls"]]
    assert got == [(1, "get_weather", {"city": 'Par"is', "days": 3}), (0, "noop", {})]

    bad = "Hi." + _block(_invoke("get_weather", ("days", "false", "three")))
    out = requests.post(url, json={"text": bad, "tools": TOOLS}, timeout=30).json()
    assert out["calls"] == [] and out["normal_text"] == "Hi."

    cut = "Hi." + _block(_invoke("get_weather", ("city", "true", "Paris")))[:-40]
    out = requests.post(url, json={"text": cut, "tools": TOOLS}, timeout=30).json()
    assert out["calls"] == [] and out["normal_text"] == "Hi."


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/separate_reasoning", {"text": "x", "reasoning_parser": "no-such"}, "reasoning_parser"),
        ("/separate_reasoning", {"text": 3, "reasoning_parser": "deepseek-v4"}, "text"),
        ("/separate_reasoning", {"text": "x"}, "reasoning_parser"),
        ("/parse_function_call", {"text": "x", "tool_call_parser": "no-such"}, "tool_call_parser"),
        ("/parse_function_call", {"text": "x", "tools": [{"type": "function"}]}, "tools[0].function"),
        ("/parse_function_call", {"tools": TOOLS}, "text"),
    ],
)
def test_parser_routes_bad_input_is_400_naming_the_field(server, path: str, body: dict, field: str) -> None:
    r = requests.post(server.url + path, json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert field in r.json()["error"]["message"]
    assert requests.get(server.url + "/health", timeout=30).status_code == 200
