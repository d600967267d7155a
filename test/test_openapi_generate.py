"""``/openapi.json`` documents ``POST /generate``'s request body and those of the other native
body-taking routes (``/separate_reasoning``, ``/parse_function_call``, ``/abort_request``,
``/update_weights_from_disk``, ``/pause_generation``, ``POST /v1/batches``), and a client
validating a body with it (``jsonschema``, an independent JSON Schema validator) agrees with the
route.

Found by trying the server as a new user: every OpenAI route's body was documented, but SGLang's
native ``/generate`` (parsed into a dataclass, so FastAPI saw no body) had none, so a body could not
be validated against the document. Oracle: the route's own reading of a body
(``parse_generate_body``, then ``SamplingParams.from_dict`` of each ``sampling_params`` object, the
checks that answer a 400), per body, against the document's verdict; for the other routes their
own body parsers (the functions the routes call, each raising on a body the route refuses).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from fake_prompt_tm import PromptTM
from server_fixture import hf_auto_tokenizer, make_fake_model_dir
from sglang_v4.entrypoints.control_api import parse_pause_body, parse_update_weights_body
from sglang_v4.entrypoints.http_server import _mount_openai, create_app
from sglang_v4.entrypoints.native_api import parse_abort_body, parse_generate_body
from sglang_v4.entrypoints.openai.protocol_batch import (
    BATCH_COMPLETION_WINDOWS,
    BATCH_ENDPOINTS,
    BatchCreateRequest,
)
from sglang_v4.entrypoints.openai.request_errors import RequestError as OpenAIRequestError
from sglang_v4.entrypoints.openai.request_errors import validate_request
from sglang_v4.entrypoints.openai.serving_parsers import parse_function_call_body, separate_reasoning_body
from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.managers.tokenizer_manager import RequestError
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs

ACCEPTED: list[dict[str, Any]] = [
    {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
    {"text": ["a", "b"], "sampling_params": [{"max_new_tokens": 1}, {"top_k": 5}], "rid": ["r1", "r2"]},
    {"input_ids": [[1, 2], [3]], "sampling_params": {"stop_token_ids": [5, 5], "max_new_tokens": 2.0}},
    {"text": "a", "sampling_params": {"temperature": None, "ignore_eos": None, "watermark": None}},
    {"text": "a", "stream": True, "return_logprob": True, "top_logprobs_num": 2, "data_parallel_rank": 0},
    {"text": "a", "cache_salt": "s", "image_data": None, "model": "default", "a_later_sglang_field": 1},
]
REFUSED: list[dict[str, Any]] = [
    {"text": "a", "sampling_params": {"unknown_param": 3}},
    {"text": "a", "sampling_params": [{"max_new_tokens": 1, "foo": 1}]},
    {"text": 5},
    {"text": "a", "sampling_params": "x"},
    {"text": "a", "stream": "yes"},
    {"input_ids": ["a"]},
    {"text": "a", "data_parallel_rank": "a"},
    {"text": "a", "sampling_params": {"max_new_tokens": "ten"}},
]


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model_dir: Path = make_fake_model_dir(tmp_path_factory.mktemp("openapi"))
    sa = ServerArgs(model_path=str(model_dir), device="cpu")
    procs = SimpleNamespace(scheduler_info=SchedulerReadyInfo(status="ready"))
    app, _ = create_app(sa, procs)  # type: ignore[arg-type]
    # the OpenAI / Anthropic routes are mounted at start-up, over the tokenizer manager
    _mount_openai(app, PromptTM(hf_auto_tokenizer()), sa)  # type: ignore[arg-type]
    return app.openapi()


def _route_accepts(body: dict[str, Any]) -> bool:
    try:
        obj = parse_generate_body(body)
        sps = obj.sampling_params or {}
        for sp in sps if isinstance(sps, list) else [sps]:
            SamplingParams.from_dict(dict(sp))
    except (RequestError, TypeError, ValueError):
        return False
    return True


def _schema_accepts(spec: dict[str, Any], body: dict[str, Any]) -> bool:
    schema = spec["paths"]["/generate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    try:
        jsonschema.validate(body, {**schema, "components": spec["components"]})
    except jsonschema.ValidationError:
        return False
    return True


@pytest.mark.parametrize("body", ACCEPTED + REFUSED)
def test_generate_body_schema_agrees_with_route(spec: dict[str, Any], body: dict[str, Any]) -> None:
    expected = body in ACCEPTED
    assert _route_accepts(body) is expected, "the oracle's reading of the body changed"
    assert _schema_accepts(spec, body) is expected, body


def test_generate_schema_is_valid_json_schema_and_on_put_too(spec: dict[str, Any]) -> None:
    schema = spec["components"]["schemas"]["GenerateReqInput"]
    jsonschema.Draft202012Validator.check_schema(schema)
    for method in ("post", "put"):
        body = spec["paths"]["/generate"][method]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {"$ref": "#/components/schemas/GenerateReqInput"}
    sampling = schema["properties"]["sampling_params"]["anyOf"][0]
    assert {"max_new_tokens", "temperature", "thinking_token_budget"} <= set(sampling["properties"])


def test_operation_ids_are_unique(spec: dict[str, Any]) -> None:
    """OpenAPI 3.1 (Operation Object): ``operationId`` "MUST be unique among all operations
    described in the API"; FastAPI repeated one for each route serving GET and POST."""
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values() if "operationId" in op]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


# ------------------------------------------------------------------------ the other native bodies
_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
#: route -> (bodies the route accepts, bodies it refuses); ``MODEL_DIR`` stands for an existing
#: directory (``/update_weights_from_disk`` checks that ``model_path`` is one)
NATIVE: dict[str, tuple[list[Any], list[Any]]] = {
    "/separate_reasoning": (
        [
            {"text": "a</think>b", "reasoning_parser": "deepseek-v4"},
            {"text": "x", "reasoning_parser": "deepseek_r1", "return_blocks": True, "extra": 1},
        ],
        [
            {"text": "x"},
            {"text": 5, "reasoning_parser": "deepseek-v4"},
            {"text": "x", "reasoning_parser": "qwen3"},
            {"text": "x", "reasoning_parser": "deepseek-v4", "return_blocks": None},
            {"text": "x", "reasoning_parser": "deepseek-v4", "return_blocks": "yes"},
        ],
    ),
    "/parse_function_call": (
        [
            {"text": "hi", "tools": [_TOOL]},
            {"text": "hi", "tools": None, "tool_call_parser": "auto"},
            {"text": "hi", "tools": [{"function": {"name": "f", "description": None, "strict": True}}]},
            {"text": "hi", "tool_call_parser": None},
        ],
        [
            {"tools": [_TOOL]},
            {"text": "hi", "tools": [{"type": "retrieval", "function": {"name": "f"}}]},
            {"text": "hi", "tools": [{"type": None, "function": {"name": "f"}}]},
            {"text": "hi", "tools": [{"function": {"name": 'bad"name'}}]},
            {"text": "hi", "tools": [{"function": {"name": "f\n"}}]},
            {"text": "hi", "tools": [{"function": {"name": "f", "parameters": []}}]},
            {"text": "hi", "tools": [{"function": {"name": "f", "strict": "false"}}]},
            {"text": "hi", "tools": "x"},
            {"text": "hi", "tool_call_parser": "deepseekv3"},
        ],
    ),
    "/abort_request": (
        [{}, {"rid": "r1", "prefix": True}, {"abort_all": True, "rid": None, "other": 1}],
        [None, [], {"rid": 5}, {"abort_all": "yes"}, {"prefix": 1}],
    ),
    "/update_weights_from_disk": (
        [
            {"model_path": "MODEL_DIR"},
            {"model_path": "MODEL_DIR", "load_format": "auto", "flush_cache": True, "is_async": False},
            {"model_path": "MODEL_DIR", "token_step": 3, "abort_all_requests": True, "unknown": 1},
        ],
        [
            {},
            None,
            {"model_path": ""},
            {"model_path": 5},
            {"model_path": "MODEL_DIR", "load_format": "pt"},
            {"model_path": "MODEL_DIR", "flush_cache": False},
            {"model_path": "MODEL_DIR", "is_async": True},
            {"model_path": "MODEL_DIR", "token_step": "3"},
            {"model_path": "MODEL_DIR", "keep_pause": 1},
        ],
    ),
    "/pause_generation": (
        [None, {}, {"mode": "retract"}, {"mode": None, "rid": "r"}, {"other": 1}],
        [{"mode": "stop"}, {"mode": 1}, []],
    ),
    "/v1/batches": (
        [{"input_file_id": "file-1", "endpoint": e, "completion_window": "24h"} for e in BATCH_ENDPOINTS],
        [
            {"input_file_id": "file-1", "endpoint": "/v1/embeddings", "completion_window": "24h"},
            {"input_file_id": "file-1", "endpoint": "/v1/completions", "completion_window": "1h"},
            {"endpoint": "/v1/completions", "completion_window": "24h"},
            {"input_file_id": 1, "endpoint": "/v1/completions", "completion_window": "24h"},
        ],
    ),
}


def _batch(body: Any) -> None:
    """``POST /v1/batches``'s checks before the file lookup: the model, the endpoint, the window."""
    req = validate_request(BatchCreateRequest, body)
    if req.endpoint not in BATCH_ENDPOINTS or req.completion_window not in BATCH_COMPLETION_WINDOWS:
        raise ValueError(req)


PARSERS: dict[str, Any] = {
    "/separate_reasoning": separate_reasoning_body,
    "/parse_function_call": lambda b: parse_function_call_body(b, "deepseekv4"),
    "/abort_request": parse_abort_body,
    "/update_weights_from_disk": lambda b: parse_update_weights_body(b, ignore_unknown=True),
    "/pause_generation": lambda b: parse_pause_body(b, ignore_unknown=True),
    "/v1/batches": _batch,
}


def _with_dir(body: Any, model_dir: str) -> Any:
    if isinstance(body, dict) and body.get("model_path") == "MODEL_DIR":
        return {**body, "model_path": model_dir}
    return body


@pytest.mark.parametrize("path", sorted(NATIVE))
def test_native_body_schemas_agree_with_their_parsers(
    spec: dict[str, Any], path: str, tmp_path: Path
) -> None:
    """Each documented body: ``jsonschema`` accepts what the route's parser accepts and refuses
    what it refuses (a JSON ``null`` body where the body is optional stands for no body)."""
    op = spec["paths"][path]["post"]
    body_doc = op["requestBody"]
    schema = {**body_doc["content"]["application/json"]["schema"], "components": spec["components"]}
    jsonschema.Draft202012Validator.check_schema(schema)
    accepted, refused = NATIVE[path]
    for body in accepted + refused:
        b = _with_dir(body, str(tmp_path))
        try:
            PARSERS[path](b)
            route = True
        except (RequestError, OpenAIRequestError, TypeError, ValueError):
            route = False
        assert route is (body in accepted), ("the oracle's reading of the body changed", path, body)
        if b is None and not body_doc["required"]:
            continue  # no body: nothing to validate
        try:
            jsonschema.validate(b, schema)
            doc = True
        except jsonschema.ValidationError:
            doc = False
        assert doc is route, (path, body)


def test_no_422_on_string_path_parameter_routes(spec: dict[str, Any]) -> None:
    """Routes whose only parameters are string ids in the path (``/v1/files/{file_id}``,
    ``/v1/responses/{response_id}``...) never answer FastAPI's 422 (any string validates; an
    unknown id is a 404 in the error body), so the document lists none for them; a documented
    body's routes keep their ``default`` error response."""
    seen = 0
    for path, ops in spec["paths"].items():
        for op in ops.values():
            params = op.get("parameters") or []
            if params and all(p["in"] == "path" and p["schema"].get("type") == "string" for p in params):
                seen += 1
                assert "422" not in op["responses"], path
                assert "default" in op["responses"], path
    assert seen >= 5
