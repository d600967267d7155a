"""A twentieth set of public bug reports, replayed against the server's non-generation routes:
``/v1/models`` (SGLang's ``parent``, vLLM's ``permission`` and ``max_model_len``, several served
names), ``HEAD`` on every ``GET`` route, vLLM's ``/version``, ``/tokenize`` / ``/detokenize``
(vLLM's shapes, chat prompts with tools counted as the chat route counts them, client errors as
4xx), CORS preflights under ``--api-key``, the health probes while the server starts, and the
Prometheus names, types and buckets of ``/metrics``. Each test names its report.

Faults found here and fixed: the ``/v1/models`` cards had no ``parent`` (SGLang's, ``null`` for a
base model) and no ``permission`` list (vLLM's); ``HEAD`` on a ``GET`` route other than the health
probes (``/v1/models``, ``/get_model_info``, ``/metrics``...) answered 405; ``GET /version``
(vLLM's) answered 404. The other reports passed as-is and are kept as regression tests.

Fixtures: the app of ``http_server.create_app`` in-process (no lifespan) over a
``TokenizerManager`` whose scheduler socket is read and never answered (``--api-key``,
``--enable-metrics``, two served names), and the OpenAI router over ``openai_fake_tm.FakeTM``.
Oracles: the ``openai`` client's types, ``prometheus_client``'s text parser, the DeepSeek-V4
tokenizer (``tokenizer.json`` as a ``transformers`` fast tokenizer), SGLang's documented default
buckets, RFC 9110 (HEAD) and the Fetch standard (CORS preflight).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_app_testutil import ADMIN_CONTEXT, ADMIN_KEY, ADMIN_NAMES, admin_app_client
from openai_fake_tm import FakeTM, app_client

openai = pytest.importorskip("openai")

from openai.types import Model  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KEY = ADMIN_KEY
NAMES = ADMIN_NAMES
AUTH = {"Authorization": f"Bearer {KEY}"}
CONTEXT = ADMIN_CONTEXT


@pytest.fixture(scope="module")
def admin_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``admin_app_testutil.admin_app_client``: ``(client, tokenizer_manager)``."""
    with admin_app_client(Path(tmp_path_factory.mktemp("admin"))) as pair:
        yield pair


# --------------------------------------------------------------------------- /v1/models


def test_sglang_12221_model_cards_carry_parent_null_for_the_base_model(admin_app: Any) -> None:
    """sgl-project/sglang#12221 (fixed by sgl-project/sglang#12229; vllm-project/vllm#6274 asked
    the same of vLLM): ``/v1/models`` gave no ``parent``, so a router could not tell a base model
    from a LoRA adapter. Expected (SGLang's ``ModelCard``): every card -- one per served name,
    listed or retrieved -- has ``parent: null`` (no adapters are served) and ``root`` the served
    model; the ``openai`` client parses each card with the served name as its ``id``."""
    client, _ = admin_app
    r = client.get("/v1/models", headers=AUTH)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [Model.model_validate(c).id for c in data] == NAMES
    for card in data:
        assert "parent" in card and card["parent"] is None, card
        assert card["root"] == NAMES[0], card
    for name in NAMES:
        one = client.get(f"/v1/models/{name}", headers=AUTH).json()
        assert (one["id"], one["parent"]) == (name, None)


def test_modal_843_model_cards_have_vllm_max_model_len_and_permission(admin_app: Any) -> None:
    """modal-labs/modal-examples#843: a vLLM ``/v1/models`` card (``max_model_len`` 8096 where the
    model was thought to take 128K: the server's configured context, not the model's) -- the shape
    vLLM clients read: ``max_model_len`` and a ``permission`` list of one ``model_permission``.
    Expected: ``max_model_len`` is the context length the scheduler serves (4096 here, not the
    config's), and ``permission`` holds one object with vLLM's fields (sampling, log-probabilities
    and viewing allowed; engines, search indices and fine-tuning not; organization ``*``), the
    same in every listing."""
    client, _ = admin_app
    first = client.get("/v1/models", headers=AUTH).json()["data"]
    second = client.get("/v1/models", headers=AUTH).json()["data"]
    assert first == second
    for card in first:
        assert card["max_model_len"] == CONTEXT
        (perm,) = card["permission"]
        assert perm["object"] == "model_permission" and perm["id"].startswith("modelperm-")
        assert isinstance(perm["created"], int)
        flags = {k: perm[k] for k in perm if k.startswith("allow_") or k == "is_blocking"}
        assert flags == {
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "is_blocking": False,
        }
        assert (perm["organization"], perm["group"]) == ("*", None)


# --------------------------------------------------------------------------- HEAD, /version


@pytest.mark.parametrize(
    "path", ["/v1/models", "/v1/models/fake-v4", "/get_model_info", "/model_info", "/metrics", "/version"]
)
def test_gentics_mesh_902_head_answers_as_get_on_every_get_route(admin_app: Any, path: str) -> None:
    """gentics/mesh#902 (``HEAD`` was not supported: "Respond with same status code as for a GET
    request"): ``HEAD /v1/models``, ``/get_model_info``, ``/metrics``... answered 405 (FastAPI
    routes match only their declared methods), so monitors probing with ``HEAD`` saw the server
    as down. Expected (RFC 9110 section 9.3.2): ``HEAD`` answers ``GET``'s status and
    ``Content-Type`` with no body; without the API key, where ``GET`` needs one, both answer 401;
    a ``POST``-only route still answers 405 to ``HEAD``."""
    client, _ = admin_app
    got = client.get(path, headers=AUTH)
    head = client.head(path, headers=AUTH)
    assert (head.status_code, got.status_code) == (200, 200), (path, head.status_code)
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    if path != "/metrics":  # /metrics is open, as SGLang's key check
        assert (client.head(path).status_code, client.get(path).status_code) == (401, 401)
    assert client.head("/generate", headers=AUTH).status_code == 405


def test_vllm_3161_version_route_answers_the_server_version(admin_app: Any) -> None:
    """vllm-project/vllm#3161 (``GET /version`` added so operators can check that several server
    instances run one version): the route answered 404 here. Expected: ``GET /version`` answers
    ``{"version": V}`` with ``V`` the installed package's version (``importlib.metadata``), under
    the API key like every route but the health probes and ``/metrics``."""
    from importlib.metadata import version

    client, _ = admin_app
    assert client.get("/version").status_code == 401
    r = client.get("/version", headers=AUTH)
    assert r.status_code == 200
    assert r.json() == {"version": version("sglang-v4")}


# --------------------------------------------------------------------------- /tokenize, /detokenize


def test_vllm_5054_tokenize_and_detokenize_shapes(tok: Any) -> None:
    """vllm-project/vllm#5054 (``/tokenize`` and ``/detokenize`` added): ``{"prompt"}`` answers
    ``{"tokens", "count", "max_model_len"}``, ``add_special_tokens: false`` leaves the
    tokenizer's specials out, and ``/detokenize`` of the ids gives the text back. Expected: the
    ids are the tokenizer's own encoding (with and without specials), ``count`` is their number,
    ``max_model_len`` the served context; ``/detokenize`` of them is the tokenizer's decoding."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    text = "The capital of France is Paris."
    for add in (True, False):
        r = tc.post("/tokenize", json={"prompt": text, "add_special_tokens": add})
        assert r.status_code == 200, r.text
        body = r.json()
        want = tok(text, add_special_tokens=add).input_ids
        assert body["tokens"] == want and body["count"] == len(want)
        assert body["max_model_len"] == tm.context_len
    ids = tok(text, add_special_tokens=False).input_ids
    r = tc.post("/detokenize", json={"tokens": ids})
    assert r.status_code == 200 and r.json()["text"] == tok.decode(ids) == text


def test_cliproxyapi_679_tokenize_counts_system_prompt_and_tools_as_chat_does(tok: Any) -> None:
    """router-for-me/CLIProxyAPI#679: the token-counting route counted the message contents only
    (48 tokens where the request took 728), leaving out the system prompt, the tool definitions
    and the chat formatting. Expected: ``/tokenize`` with ``messages`` (+ ``tools``) gives the
    ids of the prompt the chat route builds for the same messages and tools -- its ``count``
    equals that request's ``usage.prompt_tokens`` -- and a tool definition makes the count
    larger; both are more than the message contents' own tokens."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    messages = [
        {"role": "system", "content": "You are a careful assistant who answers in one line."},
        {"role": "user", "content": "What is the weather in Paris?"},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The current weather of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    contents = sum(len(tok(m["content"], add_special_tokens=False).input_ids) for m in messages)
    counts = {}
    for label, extra in (("plain", {}), ("tools", {"tools": tools})):
        t = tc.post("/tokenize", json={"model": "dsv4-test", "messages": messages, **extra})
        assert t.status_code == 200, t.text
        chat = tc.post("/v1/chat/completions", json={"model": "dsv4-test", "messages": messages, **extra})
        assert chat.status_code == 200, chat.text
        sent = tm.received[-1]
        assert t.json()["tokens"] == list(sent.input_ids)
        assert t.json()["count"] == chat.json()["usage"]["prompt_tokens"]
        counts[label] = t.json()["count"]
    assert counts["tools"] > counts["plain"] > contents


def test_vllm_52622_detokenize_client_errors_are_4xx(tok: Any) -> None:
    """vllm-project/vllm#52622: ``/detokenize`` wrapped every failure as HTTP 500, so a client's
    bad input read as a server fault. Expected: a negative id, an id past the vocabulary (the
    tokenizer's ``len``), a non-integer, a string for the list and a missing ``tokens`` each get
    a 400 in the OpenAI error shape naming ``tokens``; an unknown ``model`` a 404; nothing reaches
    the scheduler; a valid call still decodes afterwards."""
    tm = FakeTM(tok)
    tc = app_client(tm)
    for body in ({"tokens": [-1]}, {"tokens": [len(tok)]}, {"tokens": [1.5]}, {"tokens": "12"}, {}):
        r = tc.post("/detokenize", json=body)
        assert r.status_code == 400, (body, r.status_code, r.text)
        err = r.json()["error"]
        assert err["type"] == "BadRequestError" and str(err["param"]).startswith("tokens"), err
    r = tc.post("/detokenize", json={"model": "no-such-model", "tokens": [1]})
    assert r.status_code == 404, r.text
    assert tm.received == []
    ids = tok("ok", add_special_tokens=False).input_ids
    assert tc.post("/detokenize", json={"tokens": ids}).json()["text"] == "ok"


# --------------------------------------------------------------------------- CORS, probes


def test_sonar_434_cors_preflight_needs_no_api_key(admin_app: Any) -> None:
    """dphnAI/sonar#434: with an API key set, a browser's ``OPTIONS`` preflight (which carries no
    ``Authorization``, by the Fetch standard) got 401, so no browser client could call the API.
    Expected: the preflight of ``POST /v1/chat/completions`` answers 200 with the CORS headers
    allowing the origin, ``POST`` and the ``authorization`` header; the request itself without
    the key is a 401 that still carries ``Access-Control-Allow-Origin`` (so the page can read
    the error), and with the key ``GET /v1/models`` is served."""
    client, _ = admin_app
    origin = "http://localhost:5173"
    pre = client.options(
        "/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert pre.status_code == 200, pre.text
    assert pre.headers["access-control-allow-origin"] in (origin, "*")
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert "authorization" in pre.headers["access-control-allow-headers"].lower()
    denied = client.post("/v1/chat/completions", json={}, headers={"Origin": origin})
    assert denied.status_code == 401
    assert denied.headers["access-control-allow-origin"] in (origin, "*")
    assert client.get("/v1/models", headers={"Origin": origin, **AUTH}).status_code == 200


def test_gpustack_6203_health_is_503_until_warmup_while_models_lists(admin_app: Any) -> None:
    """gpustack/gpustack#6203: SGLang's HTTP server listens (and ``/v1/models`` answers 200)
    before the warm-up has finished, so readiness must be read from ``/health``, which answers
    503 while the server is ``Starting`` and 200 only once it serves. Expected: while starting,
    ``/health``, ``/health_generate``, ``/ready`` and ``/ping`` answer 503 (``HEAD`` too) and
    ``/v1/models`` 200; once ``Up``, ``/health``, ``/ready`` and ``/ping`` answer 200."""
    client, tm = admin_app
    probes = ("/health", "/health_generate", "/ready", "/ping")
    tm.server_status = "Starting"
    try:
        for path in probes:
            assert client.get(path, headers=AUTH).status_code == 503, path
            assert client.head(path, headers=AUTH).status_code == 503, path
        assert client.get("/v1/models", headers=AUTH).status_code == 200
    finally:
        tm.server_status = "Up"
    for path in ("/health", "/ready", "/ping"):
        assert client.get(path, headers=AUTH).status_code == 200, path


# --------------------------------------------------------------------------- /metrics

#: SGLang's default buckets (its production-metrics documentation / tokenizer collector).
SGLANG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_E2E = [
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1,
    2,
    4,
    6,
    8,
    10,
    20,
    40,
    60,
    80,
    100,
    200,
    400,
    600,
    1200,
    1800,
    2400,
]
SGLANG_ITL = [
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0,
]  # fmt: skip


def test_sglang_1853_metrics_names_types_labels_and_buckets(admin_app: Any) -> None:
    """sgl-project/sglang#1853 (SGLang's Prometheus metrics, the names its Grafana dashboard
    reads): a scrape, as ``prometheus_client``'s parser reads it, has the counters
    ``sglang:prompt_tokens`` / ``generation_tokens`` / ``num_requests`` (samples ``*_total``),
    the gauges ``num_running_reqs`` / ``num_queue_reqs`` / ``token_usage`` / ``cache_hit_rate``
    and the histograms ``time_to_first_token_seconds``, ``inter_token_latency_seconds`` and
    ``e2e_request_latency_seconds`` with SGLang's default buckets (+Inf last), every sample
    labelled ``model_name`` = the first served name."""
    from prometheus_client.parser import text_string_to_metric_families

    client, _ = admin_app
    r = client.get("/metrics")
    assert r.status_code == 200
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name in ("prompt_tokens", "generation_tokens", "num_requests"):
        fam = fams[f"sglang:{name}"]
        assert fam.type == "counter"
        assert {s.name for s in fam.samples} >= {f"sglang:{name}_total"}
    for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate"):
        assert fams[f"sglang:{name}"].type == "gauge", name
    for name, buckets in (
        ("time_to_first_token_seconds", SGLANG_TTFT),
        ("inter_token_latency_seconds", SGLANG_ITL),
        ("e2e_request_latency_seconds", SGLANG_E2E),
    ):
        fam = fams[f"sglang:{name}"]
        assert fam.type == "histogram"
        first = next(
            iter({tuple(sorted(s.labels.items())) for s in fam.samples if s.name.endswith("_count")})
        )
        les = [
            s.labels["le"]
            for s in fam.samples
            if s.name.endswith("_bucket")
            and tuple(sorted((k, v) for k, v in s.labels.items() if k != "le")) == first
        ]
        assert les == [*(repr(float(b)) for b in buckets), "+Inf"], name
    for fam in fams.values():
        for s in fam.samples:
            assert s.labels.get("model_name") == NAMES[0], s
