"""Public bug reports about servers' ``/openapi.json`` and ``/docs`` (FastAPI, vLLM, SGLang,
LiteLLM and others whose document was invalid or incomplete), replayed against this server's
document.

Fixture: ``create_app`` with the OpenAI / Anthropic routes mounted over a prompt-only tokenizer
manager (as ``test_openapi_generate.py`` builds it), once bare and once with ``--root-path
/my-model``; the document and ``/docs`` are read through a ``TestClient``.

Oracles: the OpenAPI 3.1 specification's rules (unique ``operationId``; a ``description`` on
every response; every templated path parameter declared, ``in: path``, ``required: true``; a
``$ref`` is a JSON Pointer (RFC 6901) into the document), the JSON Schema 2020-12 meta-schema
(``jsonschema``), the app's own route table, the routes' own body parsers (the functions the routes
call), the ``openai`` client's own multipart upload request, and the server's HTTP answers.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import jsonschema
import openai
import pytest
from fake_prompt_tm import PromptTM
from fastapi.testclient import TestClient
from server_fixture import hf_auto_tokenizer, make_fake_model_dir
from sglang_v4.entrypoints.control_api import (
    parse_configure_logging_body,
    parse_continue_body,
    parse_get_weights_body,
    parse_profile_body,
)
from sglang_v4.entrypoints.http_server import _mount_openai, create_app
from sglang_v4.entrypoints.openai.serving_files import parse_form_data
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.managers.tokenizer_manager import RequestError
from sglang_v4.server_args import ServerArgs

PREFIX = "/my-model"


def _app(model_dir: Path, root_path: str = "") -> Any:
    sa = ServerArgs(model_path=str(model_dir), device="cpu", root_path=root_path)
    procs = SimpleNamespace(scheduler_info=SchedulerReadyInfo(status="ready"))
    app, _ = create_app(sa, procs)  # type: ignore[arg-type]
    _mount_openai(app, PromptTM(hf_auto_tokenizer()), sa)  # type: ignore[arg-type]
    return app


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fake_model_dir(tmp_path_factory.mktemp("openapi32"))


@pytest.fixture(scope="module")
def served(model_dir: Path) -> Iterator[tuple[Any, TestClient, dict[str, Any]]]:
    """(app, client, the document as ``GET /openapi.json`` answers it)."""
    app = _app(model_dir)
    client = TestClient(app)  # no lifespan: the routes run over the mounted prompt-only manager
    r = client.get("/openapi.json")
    assert r.status_code == 200, r.text
    yield app, client, r.json()


@pytest.fixture(scope="module")
def prefixed(model_dir: Path) -> Iterator[TestClient]:
    yield TestClient(_app(model_dir, PREFIX))


def _served_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, set[str]]]:
    """(path, methods) of every route of the app that FastAPI documents, included routers too."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            ctx = getattr(route, "include_context", None)
            yield from _served_routes(inner.routes, prefix + (getattr(ctx, "prefix", "") or ""))
        elif getattr(route, "include_in_schema", False) and getattr(route, "methods", None):
            # OpenAPI path templates have no converters: ``{model:path}`` is ``{model}``
            yield re.sub(r"{(\w+):\w+}", r"{\1}", prefix + route.path), {m.lower() for m in route.methods}


def _pointer(doc: dict[str, Any], ref: str) -> Any:
    """RFC 6901: the value ``ref`` (``#/a/b``) points at in ``doc``; KeyError when none."""
    assert ref.startswith("#/"), ref
    node: Any = doc
    for token in ref[2:].split("/"):
        node = node[token.replace("~1", "/").replace("~0", "~")]
    return node


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


# ------------------------------------------------------------------ the document is a valid one


def test_fastapi_13175_multi_method_routes_get_unique_ids_and_no_warning(
    served: tuple[Any, TestClient, dict[str, Any]],
) -> None:
    """fastapi/fastapi#13175 (also fastapi/fastapi#4740): a route registered for several methods
    gave each of them the same ``operationId`` and logged ``UserWarning: Duplicate Operation ID``
    on every build of the document. Expected (OpenAPI 3.1, Operation Object: ``operationId``
    unique among all operations): a fresh build warns nothing, every id is unique, and each
    method of a multi-method route (``/ping``, ``/generate``, ``/flush_cache``) has its own."""
    app, _, _ = served
    app.openapi_schema = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doc = app.openapi()
    assert not [str(w.message) for w in caught if "Operation ID" in str(w.message)]
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    for path in ("/ping", "/generate", "/flush_cache", "/start_profile"):
        ops = doc["paths"][path]
        assert len(ops) >= 2, (path, list(ops))
        assert len({op["operationId"] for op in ops.values()}) == len(ops), path


def test_litellm_17375_every_ref_resolves_in_the_document(
    served: tuple[Any, TestClient, dict[str, Any]],
) -> None:
    """BerriAI/litellm#17375: ``$ref`` s pointed at ``#/$defs/...`` while the definitions lived
    under ``components.schemas``, so ``swagger-cli validate`` failed with ``Token "$defs" does
    not exist``. Expected: every ``$ref`` of the served document is a JSON Pointer (RFC 6901)
    that resolves inside it, to a schema object."""
    _, _, doc = served
    refs = set(_refs(doc))
    assert refs, "the document has no $ref at all"
    unresolved = []
    for ref in sorted(refs):
        try:
            target = _pointer(doc, ref)
        except (KeyError, TypeError):
            unresolved.append(ref)
            continue
        assert isinstance(target, dict), ref
    assert not unresolved, unresolved
    assert "$defs" not in doc


#: The Operation / Response / Parameter rules of OpenAPI 3.1 this document must keep (written from
#: the specification's fixed fields; no OpenAPI meta-schema ships offline).
_OPENAPI_31_SUBSET: dict[str, Any] = {
    "type": "object",
    "required": ["openapi", "info", "paths"],
    "properties": {
        "openapi": {"type": "string", "pattern": r"^3\.1\.\d+$"},
        "info": {"type": "object", "required": ["title", "version"]},
        "servers": {"type": "array", "items": {"type": "object", "required": ["url"]}},
        "paths": {
            "type": "object",
            "propertyNames": {"pattern": "^/"},
            "additionalProperties": {
                "type": "object",
                "propertyNames": {
                    "enum": ["get", "put", "post", "delete", "options", "head", "patch", "trace"]
                },
                "additionalProperties": {
                    "type": "object",
                    "required": ["responses"],
                    "properties": {
                        "operationId": {"type": "string"},
                        "parameters": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name", "in"],
                                "properties": {"in": {"enum": ["query", "header", "path", "cookie"]}},
                                "if": {"properties": {"in": {"const": "path"}}},
                                "then": {
                                    "required": ["required"],
                                    "properties": {"required": {"const": True}},
                                },
                            },
                        },
                        "requestBody": {"type": "object", "required": ["content"]},
                        "responses": {
                            "type": "object",
                            "minProperties": 1,
                            "propertyNames": {"pattern": "^(default|[1-5](XX|\\d\\d))$"},
                            "additionalProperties": {"type": "object", "required": ["description"]},
                        },
                    },
                },
            },
        },
    },
}


def test_dstack_2329_document_validates_as_openapi_31(served: tuple[Any, TestClient, dict[str, Any]]) -> None:
    """dstackai/dstack#2329 (also Mintplex-Labs/anything-llm#1988): the served ``openapi.json``
    (3.1.0) failed an OpenAPI validator, so no SDK could be generated from it. Expected: the
    document keeps OpenAPI 3.1's rules (:data:`_OPENAPI_31_SUBSET`), every templated path
    parameter is declared for each operation of its path, and every component schema is a valid
    JSON Schema 2020-12 (the dialect OpenAPI 3.1 uses)."""
    _, _, doc = served
    jsonschema.Draft202012Validator(_OPENAPI_31_SUBSET).validate(doc)
    for path, ops in doc["paths"].items():
        wanted = set(re.findall(r"{([^}]+)}", path))
        for method, op in ops.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == wanted, (method, path, declared)
    for name, schema in doc["components"]["schemas"].items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as e:  # pragma: no cover - the failure message
            pytest.fail(f"components.schemas.{name}: {e.message}")


def test_vllm_8212_every_served_route_is_documented_once_with_its_methods(
    served: tuple[Any, TestClient, dict[str, Any]],
) -> None:
    """vllm-project/vllm#8212: a FastAPI upgrade broke vLLM's document (its routes' models were no
    longer read). Expected: ``GET /openapi.json`` answers, and its ``paths`` are exactly the
    app's documented routes (included routers too), each once with exactly the methods it
    serves; each documented operation answers something other than 404 / 405 (it exists)."""
    app, client, doc = served
    table: dict[str, set[str]] = {}
    for path, methods in _served_routes(app.router.routes):
        assert not (table.get(path, set()) & methods), f"{path} served twice for {methods}"
        table.setdefault(path, set()).update(methods)
    assert set(doc["paths"]) == set(table), set(doc["paths"]) ^ set(table)
    for path, methods in table.items():
        assert set(doc["paths"][path]) == methods, (path, set(doc["paths"][path]), methods)
    for path in ("/v1/files/{file_id}", "/v1/responses/{response_id}", "/v1/batches/{batch_id}"):
        for method in doc["paths"][path]:
            r = client.request(method.upper(), path.replace("{", "x").replace("}", ""))
            assert r.status_code not in (405,), (method, path, r.status_code)
            if r.status_code == 404:  # an unknown id is the route's 404, in the error body
                assert "error" in r.json(), (method, path, r.text)


# ---------------------------------------------------------- bodies the routes read themselves

#: route -> (bodies the route takes, bodies it refuses) for the runtime-control routes that read
#: their JSON body by hand (FastAPI saw no body); ``OUT`` stands for a writable directory.
CONTROL: dict[str, tuple[list[Any], list[Any]]] = {
    "/get_weights_by_name": (
        [{"name": "model.embed_tokens.weight"}, {"name": "lm_head.weight", "truncate_size": 0, "other": 1}],
        [
            {},
            {"name": ""},
            {"name": 3},
            {"name": "w", "truncate_size": -1},
            {"name": "w", "truncate_size": "5"},
        ],
    ),
    "/continue_generation": (
        [None, {}, {"torch_empty_cache": True}, {"torch_empty_cache": None, "x": 1}],
        [{"torch_empty_cache": "yes"}, [1]],
    ),
    "/start_profile": (
        [
            None,
            {"output_dir": "OUT", "num_steps": 2, "activities": ["CPU"]},
            {"with_stack": False, "profile_id": "a"},
        ],
        [
            {"num_steps": 0},
            {"activities": []},
            {"activities": ["TPU"]},
            {"profile_id": "a/b"},
            {"profile_id": ".."},
            {"start_step": 3},
            {"merge_profiles": True},
            {"record_shapes": 1},
        ],
    ),
    "/configure_logging": (
        [
            None,
            {"log_requests": True, "log_requests_level": 2, "log_requests_format": "json"},
            {"log_level": "WaRnInG"},
        ],
        [
            {"log_requests_level": 7},
            {"log_requests_format": "xml"},
            {"log_level": "verbose"},
            {"log_requests": "on"},
            {"dump_requests_folder": "/tmp/d"},
        ],
    ),
}


def _control_accepts(route: str, body: Any) -> bool:
    """The route's own parser (as the route calls it: unknown fields dropped) on ``body``."""
    parse = {
        "/get_weights_by_name": parse_get_weights_body,
        "/continue_generation": parse_continue_body,
        "/start_profile": lambda b, ignore_unknown: parse_profile_body(
            b, "cpu", ignore_unknown=ignore_unknown
        ),
        "/configure_logging": parse_configure_logging_body,
    }[route]
    try:
        parse(body, ignore_unknown=True)
    except RequestError:
        return False
    return True


def _body_schema(doc: dict[str, Any], route: str, media: str = "application/json") -> dict[str, Any]:
    op = doc["paths"][route]["post"]
    assert "requestBody" in op, f"POST {route} documents no request body"
    schema = op["requestBody"]["content"][media]["schema"]
    return {**schema, "components": doc["components"]}


@pytest.mark.parametrize("route", sorted(CONTROL))
def test_litellm_32192_raw_body_control_routes_document_their_body(
    served: tuple[Any, TestClient, dict[str, Any]], route: str, tmp_path: Path
) -> None:
    """BerriAI/litellm#32192: a route reading its body with ``request.json()`` showed no body in
    the document (FastAPI infers bodies from typed parameters), so clients built from it sent
    empty bodies. Expected: each runtime-control route that reads a JSON body documents one, and
    the document's verdict on a body is the route's own parser's (accepted / refused), for bodies
    of both kinds; a body the route takes optional is not ``required``."""
    _, _, doc = served
    schema = _body_schema(doc, route)
    assert doc["paths"][route]["post"]["requestBody"]["required"] is False
    validator = jsonschema.Draft202012Validator(schema)
    accepted, refused = CONTROL[route]
    for expected, bodies in ((True, accepted), (False, refused)):
        for body in bodies:
            if isinstance(body, dict) and body.get("output_dir") == "OUT":
                body = {**body, "output_dir": str(tmp_path)}
            assert _control_accepts(route, body) is expected, ("the oracle changed", route, body)
            assert validator.is_valid(body) is expected, (route, body)


def test_dockhand_1421_file_upload_documents_its_multipart_body(
    served: tuple[Any, TestClient, dict[str, Any]],
) -> None:
    """Finsys/dockhand#1421: an upload route whose body is not JSON (``multipart/form-data``)
    had no ``requestBody`` in the document, so a client built from it sent none. Expected:
    ``POST /v1/files`` documents a ``multipart/form-data`` body; the form the ``openai`` client
    itself sends for ``files.create(..., expires_after=...)`` (captured, parsed by its parts)
    validates against it and the route accepts that very request (200), while a purpose the
    route refuses (400) is outside the document's enum."""
    _, client, doc = served
    schema = _body_schema(doc, "/v1/files", "multipart/form-data")
    assert doc["paths"]["/v1/files"]["post"]["requestBody"]["required"] is True
    sent: list[httpx2.Request] = []

    def capture(request: httpx2.Request) -> httpx2.Response:
        sent.append(request)
        return httpx2.Response(500, json={"error": {"message": "captured"}})

    oai = openai.OpenAI(
        base_url="http://test/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(capture)),
    )
    with pytest.raises(openai.APIStatusError):
        oai.files.create(
            file=("in.jsonl", b'{"custom_id": "a"}\n'),
            purpose="batch",
            expires_after={"anchor": "created_at", "seconds": 7200},
        )
    req = sent[0]
    req.read()
    parts = parse_form_data(req.headers["content-type"], req.content)
    form: dict[str, Any] = {}
    for name, (_filename, data) in parts.items():
        text = data.decode()
        form[name] = int(text) if text.isdigit() else text
    assert set(form) == {"file", "purpose", "expires_after[anchor]", "expires_after[seconds]"}, set(form)
    jsonschema.Draft202012Validator(schema).validate(form)
    r = client.post("/v1/files", content=req.content, headers={"content-type": req.headers["content-type"]})
    assert r.status_code == 200, r.text
    bad = client.post("/v1/files", files={"file": ("a.jsonl", b"{}\n")}, data={"purpose": "training"})
    assert bad.status_code == 400, bad.text
    assert not jsonschema.Draft202012Validator(schema).is_valid({**form, "purpose": "training"})


# ------------------------------------------------------------------------ behind a path prefix


def test_fastapi_11622_docs_behind_root_path_load_their_document(prefixed: TestClient) -> None:
    """fastapi/fastapi#11622 (also vllm-project/vllm#2341): with ``root_path`` set the Swagger
    page at ``/docs`` and ``/proxy/docs`` asked for an ``openapi.json`` that answered 404.
    Expected: ``/docs`` and ``/my-model/docs`` both answer, the document URL each names answers
    200 with an OpenAPI document, whether the proxy forwards the prefix or strips it."""
    for page in ("/docs", PREFIX + "/docs"):
        r = prefixed.get(page)
        assert r.status_code == 200, (page, r.status_code)
        urls = re.findall(r"url: '([^']+)'", r.text)
        assert urls, r.text[:300]
        for url in urls:
            doc = prefixed.get(url)
            assert doc.status_code == 200, (page, url)
            assert doc.json()["openapi"].startswith("3.1")
            stripped = prefixed.get(url.removeprefix(PREFIX))  # a proxy that strips the prefix
            assert stripped.status_code == 200, (page, url)


def test_fastapi_5660_servers_entry_stays_once_and_joins_to_live_urls(prefixed: TestClient) -> None:
    """fastapi/fastapi#5660 (and fastapi/fastapi#3946): behind a proxy with ``root_path`` the
    ``servers`` entry went missing from ``openapi.json`` (after a worker restart), so "Try it out"
    called the host without the prefix. Expected: whichever path is asked first, bare or
    prefixed, and however often, ``servers`` is ``[{"url": "/my-model"}]`` (once); paths are not
    prefixed a second time, and a client joining the server URL and a documented path reaches
    the route (``GET /my-model/v1/models`` answers 200)."""
    docs = [prefixed.get(p).json() for p in ("/openapi.json", PREFIX + "/openapi.json", "/openapi.json")]
    for doc in docs:
        assert doc["servers"] == [{"url": PREFIX}], doc["servers"]
        assert not [p for p in doc["paths"] if p.startswith(PREFIX)]
    url = docs[0]["servers"][0]["url"] + "/v1/models"
    assert "/v1/models" in docs[0]["paths"]
    r = prefixed.get(url)
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "list"
