"""``/openapi.json`` documents ``POST /generate``'s request body, and a client validating a body
with it (``jsonschema``, an independent JSON Schema validator) agrees with the route.

Found by trying the server as a new user: every OpenAI route's body was documented, but SGLang's
native ``/generate`` (parsed into a dataclass, so FastAPI saw no body) had none, so a body could not
be validated against the document. Oracle: the route's own reading of a body
(``parse_generate_body``, then ``SamplingParams.from_dict`` of each ``sampling_params`` object, the
checks that answer a 400), per body, against the document's verdict.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest
from server_fixture import make_fake_model_dir
from sglang_v4.entrypoints.http_server import create_app
from sglang_v4.entrypoints.native_api import parse_generate_body
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
