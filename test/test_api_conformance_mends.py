"""Small conformance faults of the OpenAI-compatible API, each decided against an independent
reference.

* ``/v1/chat/completions``: a second ``tool`` message for one call, and a ``system`` /
  ``developer`` message between an assistant message's ``tool_calls`` and their answers were
  served. Oracles: DeepSeek's own request converter (the ``deepseek-recipe`` package, which SGLang
  0.5.23's DeepSeek-V4 chat path renders through) refuses each; OpenAI's 400s as public reports
  quote them (``Invalid parameter: Duplicate value for 'tool_call_id' of ..., in
  messages[7] and messages[8].``: agno-agi/agno#5116, anomalyco/opencode#1211; a system message
  between the calls and their results refused as unanswered: bug-ops/zeph#3235,
  pydantic/pydantic-ai#4907); the ``openai`` client's ``BadRequestError``. An assistant message's
  ``tool_calls: []`` stays served as no calls, as vLLM and SGLang serve it (OpenAI's 400 for it,
  quoted in openai/openai-node#1341, is not followed: agents echo servers' ``[]``).
* ``/v1/messages``: two ``tool_result`` blocks for one ``tool_use`` were served. Oracle:
  DeepSeek's Messages converter's 400 (Anthropic's words: ``each tool_use must have a single
  result``).
* ``/v1/responses`` with ``max_output_tokens: 0`` answered an ``incomplete`` response. Oracles:
  OpenAI's 400 ``Invalid 'max_output_tokens': integer below minimum value`` (vectorize-io/hindsight#58
  quotes it, floor 16) and SGLang 0.5.23's own code (read from its installed source:
  ``ResponsesRequest.to_sampling_params`` takes 2 off the bound, and ``SamplingParams.verify``
  refuses a negative ``max_new_tokens``), which refuse 0 alike.
* ``/get_model_info`` through the ``--dp-size`` gateway came from one replica (the router's
  pick). Oracle: SGLang 0.5.23's ``model_info`` route reads its one tokenizer manager (read from
  its installed source), the info of every data-parallel rank; here replicas that disagree have
  no such info, so the gateway asks each one (each replica's own answer is the oracle).
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest
import requests
from aiohttp import web
from aiohttp_serve_testutil import free_port, serve_aiohttp
from chat_tool_pairing_testutil import OPENAI_UNANSWERED, TOOLS, U, make_route_client
from chat_tool_pairing_testutil import post_chat as _chat
from chat_tool_pairing_testutil import recipe_chat_error as _recipe_chat_error
from chat_tool_pairing_testutil import recipe_messages_error as _recipe_messages_error
from chat_tool_pairing_testutil import tool_calls_message as _calls
from chat_tool_pairing_testutil import tool_result_block as _tool_result
from chat_tool_pairing_testutil import tool_result_message as _result
from chat_tool_pairing_testutil import tool_use_block as _tool_use
from fake_prompt_tm import MODEL, PromptTM
from fastapi.testclient import TestClient
from sglang_v4.entrypoints.dp_gateway import GATEWAY_SERVER_OPTIONS, create_gateway_app
from transformers import PreTrainedTokenizerFast

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def client(tok: PreTrainedTokenizerFast) -> tuple[TestClient, PromptTM]:
    return make_route_client(tok)


# ---------------------------------------------------------------------------- chat messages
EMPTY_CALLS = {
    "then_user": [U, {"role": "assistant", "content": "hi", "tool_calls": []}, U],
    "final": [U, {"role": "assistant", "content": "hi", "tool_calls": []}],
}


@pytest.mark.parametrize("case", list(EMPTY_CALLS))
def test_empty_tool_calls_is_no_calls(client: tuple[TestClient, PromptTM], case: str) -> None:
    """``tool_calls: []`` on an assistant message (last or not) is served as no calls: agents echo
    the ``tool_calls: []`` that OpenAI-compatible servers return (vllm-project/vllm#12937,
    microsoft/autogen#3120, vllm-project/vllm#13978 ask for it to be served; vLLM and SGLang serve
    it). OpenAI and DeepSeek's converter refuse it (openai/openai-node#1341 quotes the 400); this
    route follows the servers its users come from. Oracle: the prompt is the one of the same
    history without the key."""
    tc, tm = client
    messages = EMPTY_CALLS[case]
    without = [{k: v for k, v in m.items() if k != "tool_calls"} for m in messages]
    for msgs in (messages, without):
        r = _chat(tc, msgs)
        assert r.status_code == 200, r.text
    assert len(tm.received) == 2
    assert tm.received[0].input_ids == tm.received[1].input_ids and tm.received[0].input_ids


DUPLICATES = {
    "back_to_back": ([U, _calls("a"), _result("a"), _result("a")], 2, 3),
    "then_user": ([U, _calls("a", "b"), _result("a"), _result("b"), _result("a"), U], 2, 4),
}


@pytest.mark.parametrize("case", list(DUPLICATES))
def test_second_answer_to_one_call_is_openais_400(client: tuple[TestClient, PromptTM], case: str) -> None:
    """Two ``tool`` messages answering one call: DeepSeek's converter refuses it; the route
    answers OpenAI's duplicate-value 400 naming both messages, ``param`` the second one's
    ``tool_call_id``."""
    tc, tm = client
    messages, first, second = DUPLICATES[case]
    assert _recipe_chat_error(messages) is not None
    r = _chat(tc, messages)
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["message"] == (
        f"Invalid parameter: Duplicate value for 'tool_call_id' of 'a', in messages[{first}] and "
        f"messages[{second}]."
    )
    assert j["param"] == f"messages[{second}].tool_call_id"
    assert not tm.received


INTERRUPTED = {
    # case: (messages, index named, unanswered ids)
    "system_before_answer": ([U, _calls("a"), {"role": "system", "content": "s"}, _result("a")], 2, "a"),
    "developer_before_answer": (
        [U, _calls("a"), {"role": "developer", "content": "s"}, _result("a")],
        2,
        "a",
    ),
    "system_mid_answers": (
        [U, _calls("a", "b"), _result("a"), {"role": "system", "content": "s"}, _result("b")],
        3,
        "b",
    ),
}


@pytest.mark.parametrize("case", list(INTERRUPTED))
def test_message_between_calls_and_answers_is_openais_400(
    client: tuple[TestClient, PromptTM], case: str
) -> None:
    """A system / developer message between an assistant message's calls and their answers:
    DeepSeek's converter refuses it, and so does OpenAI (public reports in the module docstring);
    the route answers OpenAI's unanswered-calls 400 naming the interrupting message."""
    tc, tm = client
    messages, index, ids = INTERRUPTED[case]
    body = _recipe_chat_error(messages)
    assert body is not None and "must be followed by tool messages" in body
    r = _chat(tc, messages)
    assert r.status_code == 400, r.text
    j = r.json()
    assert j["param"] == f"messages[{index}]"
    assert j["message"] == f"messages[{index}]: {OPENAI_UNANSWERED}{ids}"
    assert not tm.received


def test_system_after_every_answer_is_served(client: tuple[TestClient, PromptTM]) -> None:
    """A system message once every call is answered is fine (DeepSeek's converter takes it);
    a ``tool`` message after it answers nothing (the converter refuses that)."""
    tc, _ = client
    ok = [U, _calls("a"), _result("a"), {"role": "system", "content": "s"}, U]
    assert _recipe_chat_error(ok) is None
    assert _chat(tc, ok).status_code == 200
    late = [U, _calls("a"), _result("a"), {"role": "system", "content": "s"}, _result("a")]
    assert _recipe_chat_error(late) is not None
    r = _chat(tc, late)
    assert r.status_code == 400 and r.json()["param"] == "messages[4]", r.text


def test_openai_client_raises_bad_request_for_a_duplicate_answer(client: tuple[TestClient, PromptTM]) -> None:
    """The ``openai`` client reads the duplicate-answer refusal as its ``BadRequestError``."""
    tc, _ = client
    oc = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        oc.chat.completions.create(
            model=MODEL, messages=[U, _calls("a"), _result("a"), _result("a"), U], tools=TOOLS
        )
    assert "Duplicate value for 'tool_call_id'" in str(info.value)


# ---------------------------------------------------------------------------- /v1/messages
def test_messages_two_results_for_one_tool_use_is_400(client: tuple[TestClient, PromptTM]) -> None:
    """Two ``tool_result`` blocks for one ``tool_use`` in a message: DeepSeek's Messages converter
    refuses it (``messages.2.content.1: each tool_use must have a single result. Found multiple
    `tool_result` blocks with id: a``); the route answers the same 400 in Anthropic's shape."""
    tc, tm = client
    messages = [
        U,
        {"role": "assistant", "content": [_tool_use("a")]},
        {"role": "user", "content": [_tool_result("a"), _tool_result("a")]},
    ]
    expected = (
        "messages.2.content.1: each tool_use must have a single result. Found multiple "
        "`tool_result` blocks with id: a"
    )
    body = _recipe_messages_error(messages)
    assert body is not None and expected in body
    r = tc.post("/v1/messages", json={"model": MODEL, "max_tokens": 50, "messages": messages})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"type": "invalid_request_error", "message": expected}
    assert not tm.received


# ---------------------------------------------------------------------------- /v1/responses
def _sglang_source(relpath: str, name: str, cls: str | None = None) -> str:
    """The source of the function ``name`` (a method of class ``cls`` when given) in the
    installed SGLang's ``relpath`` (read, not imported: its import pulls in torch and takes many
    seconds)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations, "SGLang 0.5.23 is installed in the venv"
    text = (Path(next(iter(spec.submodule_search_locations))) / relpath).read_text()
    tree: ast.AST = ast.parse(text)
    if cls is not None:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ast.get_source_segment(text, node) or ""
    raise AssertionError(f"{name} not found in SGLang's {relpath}")


@pytest.mark.parametrize("value", [0, -1, -100])
def test_responses_max_output_tokens_below_one_is_400(
    client: tuple[TestClient, PromptTM], value: int
) -> None:
    """``max_output_tokens`` 0 or negative: SGLang 0.5.23 takes 2 off the bound and refuses a
    negative ``max_new_tokens`` (so 0 is refused there), OpenAI refuses anything below its floor;
    the route answers OpenAI's 400 naming ``max_output_tokens`` (streamed or not), generating
    nothing, and the ``openai`` client raises ``BadRequestError``."""
    to_sp = _sglang_source("srt/entrypoints/openai/protocol.py", "to_sampling_params", "ResponsesRequest")
    assert "max_tokens -= 2" in to_sp
    verify = _sglang_source("srt/sampling/sampling_params.py", "verify", "SamplingParams")
    assert "self.max_new_tokens < 0" in verify
    tc, tm = client
    for stream in (False, True):
        r = tc.post(
            "/v1/responses",
            json={"model": MODEL, "input": "hi", "max_output_tokens": value, "stream": stream},
        )
        assert r.status_code == 400, r.text
        j = r.json()
        assert j["param"] == "max_output_tokens"
        assert j["message"] == (
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 1, but got "
            f"{value} instead."
        )
    oc = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=tc, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        oc.responses.create(model=MODEL, input="hi", max_output_tokens=value)
    assert not tm.received


@pytest.mark.parametrize("value", [1.5, "10", True, [3]])
def test_responses_max_output_tokens_not_an_integer_is_400(
    client: tuple[TestClient, PromptTM], value: Any
) -> None:
    """A ``max_output_tokens`` that is no integer (OpenAI's type is integer) is a 400 naming the
    field; nothing is generated."""
    tc, tm = client
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": value})
    assert r.status_code == 400, r.text
    assert r.json()["param"] == "max_output_tokens"
    assert not tm.received


def test_responses_small_max_output_tokens_is_served(client: tuple[TestClient, PromptTM]) -> None:
    """A small positive bound is served (SGLang serves 2..15, below OpenAI's floor of 16; see
    ``responses_request_checks.MIN_MAX_OUTPUT_TOKENS``)."""
    tc, _ = client
    r = tc.post("/v1/responses", json={"model": MODEL, "input": "hi", "max_output_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["max_output_tokens"] == 2


# ---------------------------------------------------------------------------- dp gateway
def _replica(index: int, infos: list[dict[str, Any]]) -> web.Application:
    """One replica answering ``/get_model_info`` and ``/model_info`` with ``infos[index]``."""

    async def info(request: web.Request) -> web.Response:
        return web.json_response(infos[index])

    app = web.Application()
    app.router.add_get("/get_model_info", info)
    app.router.add_get("/model_info", info)
    return app


def _router(hits: list[str]) -> web.Application:
    """A router stub that answers every route with replica 0's pick, recording the hit."""

    async def any_route(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"model_path": "router-pick"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    return app


@pytest.fixture(scope="module")
def dp() -> Iterator[SimpleNamespace]:
    info = {"model_path": "/models/dsv4", "weight_version": "default", "tool_call_parser": "deepseekv4"}
    infos = [dict(info), dict(info)]
    hits: list[str] = []
    stops, urls = [], []
    for i in range(2):
        url, stop = serve_aiohttp(_replica(i, infos))
        urls.append(url)
        stops.append(stop)
    router_url, stop = serve_aiohttp(_router(hits))
    stops.append(stop)
    gateway, stop = serve_aiohttp(create_gateway_app(router_url, urls), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    dead = urls + [f"http://127.0.0.1:{free_port()}"]  # rank 2: nothing listens
    gateway_dead, stop = serve_aiohttp(create_gateway_app(router_url, dead), **GATEWAY_SERVER_OPTIONS)
    stops.append(stop)
    yield SimpleNamespace(url=gateway, url_dead=gateway_dead, replicas=urls, infos=infos, hits=hits)
    for stop in reversed(stops):
        stop()


@pytest.mark.parametrize("path", ["/get_model_info", "/model_info"])
def test_dp_model_info_is_every_replicas_when_they_agree(dp: SimpleNamespace, path: str) -> None:
    """SGLang 0.5.23's ``model_info`` reads its one tokenizer manager (every data-parallel rank's
    info). Through the gateway: the replicas' own answer when they agree, never the router's."""
    source = _sglang_source("srt/entrypoints/http_server.py", "model_info")
    assert "_global_state.tokenizer_manager.model_path" in source
    direct = [requests.get(u + path, timeout=10).json() for u in dp.replicas]
    assert direct[0] == direct[1]
    r = requests.get(dp.url + path, timeout=10)
    assert (r.status_code, r.json()) == (200, direct[0])
    assert path not in dp.hits


def test_dp_model_info_disagreement_is_409_naming_each_rank(dp: SimpleNamespace) -> None:
    """Replicas whose info differs (a weight update that reached one of them) have no group info:
    a 409 naming the field and each rank's value, never replica 0's info; an unreachable rank is
    a 502 naming it."""
    dp.infos[1]["model_path"] = "/models/dsv4-step7"
    try:
        r = requests.get(dp.url + "/get_model_info", timeout=10)
    finally:
        dp.infos[1]["model_path"] = dp.infos[0]["model_path"]
    assert r.status_code == 409, r.text
    msg = r.json()["error"]["message"]
    assert "model_path: rank 0: '/models/dsv4', rank 1: '/models/dsv4-step7'" in msg, msg
    assert "weight_version" not in msg
    r = requests.get(dp.url_dead + "/get_model_info", timeout=10)
    assert r.status_code == 502 and "rank 2" in r.text
