"""The server's ``/openapi.json``: FastAPI's document of the routes, completed with what the route
signatures cannot tell it.

The OpenAI-compatible routes read their JSON body themselves (so that a bad body is a 400 in
OpenAI's / SGLang's error shape, not FastAPI's 422), so FastAPI sees no request model and documents
no body. :func:`install_openapi` adds:

* each such route's ``requestBody``: the JSON Schema of the pydantic model the route validates the
  body with (pydantic's validation-mode schema, the models' shared definitions under
  ``components.schemas``), as vLLM's and SGLang's documents have them (their routes take the model
  as a parameter);
* ``/generate``'s ``requestBody`` (:func:`generate_request_schema`): SGLang's native route parses
  its body into a dataclass, not a pydantic model, so its schema is built from the fields the
  route reads (``GenerateReqInput``'s types, the ``sampling_params`` keys of ``SamplingParams``);
* the bodies of SGLang's native routes read by hand-written parsers
  (:func:`native_body_schemas`): ``/separate_reasoning``, ``/parse_function_call``,
  ``/abort_request``, ``/update_weights_from_disk``, and the optional ones of
  ``/pause_generation``, ``/continue_generation``, ``/get_weights_by_name``, ``/start_profile``,
  ``/configure_logging``; ``POST /v1/batches`` has its pydantic model (``BatchCreateRequest``);
* ``POST /v1/files``'s ``multipart/form-data`` body (:func:`upload_body_schemas`);
* unique ``operationId`` s (OpenAPI's rule; FastAPI repeats one for a route of several methods);
* no ``422`` response on an operation whose only parameters are string path parameters (FastAPI
  lists its validation error for any parameter; a string path parameter always validates, and
  the routes answer a bad id with a 404 in the error body);
* a ``default`` response on every operation: the error body (:data:`ERROR_SCHEMA`) that any route
  may answer with a 4xx / 5xx status (bad body, API key, draining, unknown id).

The document stays OpenAPI 3.1 (JSON Schema 2020-12 schemas), built once on first request.
"""

from __future__ import annotations

import warnings
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

__all__ = [
    "ERROR_SCHEMA",
    "generate_request_schema",
    "install_openapi",
    "native_body_schemas",
    "request_body_models",
    "upload_body_schemas",
]

#: The error bodies of the server: OpenAI's nested ``error`` object (with SGLang's flat keys beside
#: it on the OpenAI routes), SGLang's native ``{"error": ...}``, or FastAPI's ``detail``.
ERROR_SCHEMA: dict[str, Any] = {
    "title": "ErrorBody",
    "type": "object",
    "properties": {
        "error": {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "message": {"type": "string"},
                        "type": {"type": "string"},
                        "param": {"type": ["string", "null"]},
                        "code": {"type": ["integer", "string", "null"]},
                    },
                    "required": ["message"],
                },
                {"type": "string"},
            ]
        },
        "object": {"type": "string"},
        "message": {"type": "string"},
        "detail": {},
    },
    "anyOf": [{"required": ["error"]}, {"required": ["message"]}, {"required": ["detail"]}],
}


def request_body_models() -> dict[tuple[str, str], list[type[BaseModel]]]:
    """The request models of the routes that read their body themselves, keyed by (lower-case
    method, path); a route with several models takes a body matching any of them (``/tokenize``:
    a prompt or a chat conversation). Empty when the OpenAI routes are not installed."""
    try:
        from sglang_v4.entrypoints.anthropic.protocol import CountTokensRequest, MessagesRequest
        from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
        from sglang_v4.entrypoints.openai.protocol_batch import BatchCreateRequest
        from sglang_v4.entrypoints.openai.protocol_responses import (
            ResponsesInputTokensRequest,
            ResponsesRequest,
        )
        from sglang_v4.entrypoints.openai.protocol_score import ScoringRequest
        from sglang_v4.entrypoints.openai.protocol_tokenize import DetokenizeRequest, TokenizeRequest
    except ImportError:
        return {}
    tokenize: list[type[BaseModel]] = [TokenizeRequest, ChatCompletionRequest]
    return {
        ("post", "/v1/chat/completions"): [ChatCompletionRequest],
        ("post", "/v1/completions"): [CompletionRequest],
        ("post", "/invocations"): [ChatCompletionRequest, CompletionRequest],
        ("post", "/v1/responses"): [ResponsesRequest],
        ("post", "/v1/responses/input_tokens"): [ResponsesInputTokensRequest],
        ("post", "/tokenize"): tokenize,
        ("post", "/v1/tokenize"): tokenize,
        ("post", "/detokenize"): [DetokenizeRequest],
        ("post", "/v1/detokenize"): [DetokenizeRequest],
        ("post", "/v1/score"): [ScoringRequest],
        ("post", "/v1/messages"): [MessagesRequest],
        ("post", "/v1/messages/count_tokens"): [CountTokensRequest],
        ("post", "/v1/batches"): [BatchCreateRequest],
    }


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (a dataclass field's, from pydantic) as ``/generate`` reads the field: ``null``
    is the field's default, and a list is not required to hold distinct items (pydantic writes
    ``uniqueItems`` for a ``set`` field; the route takes a list with repeats)."""
    alts = schema.get("anyOf", [schema])
    alts = [{k: v for k, v in a.items() if k != "uniqueItems"} for a in alts]
    if not any(a.get("type") == "null" for a in alts):
        alts.append({"type": "null"})
    out = {k: v for k, v in schema.items() if k in ("title", "description")}
    out["anyOf"] = alts
    return out


def generate_request_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a ``POST /generate`` body as
    :func:`sglang_v4.entrypoints.native_api.parse_generate_body` reads it: the fields it serves,
    typed as ``GenerateReqInput`` declares them (``null`` meaning the default); SGLang fields it
    accepts unset or ignores, untyped; ``sampling_params`` an object (or a list of them, one per
    prompt) of the ``SamplingParams`` keys, an unknown key refused (``additionalProperties:
    false``: the route's 400); other top-level keys allowed (the route ignores them, as SGLang's
    dataclass parse does). Raises nothing."""
    from pydantic import TypeAdapter

    from sglang_v4.entrypoints import native_api
    from sglang_v4.managers.io_struct import GenerateReqInput
    from sglang_v4.sampling.sampling_params import SamplingParams

    sp_fields = TypeAdapter(SamplingParams).json_schema(mode="validation")["properties"]
    unset_only = {"description": "Accepted unset (null, false, []); a 400 naming the key otherwise."}
    sampling = {
        "type": "object",
        "properties": {
            k: _nullable(sp_fields[k]) if k in sp_fields else unset_only
            for k in native_api.SAMPLING_PARAMS_KEYS
        },
        "additionalProperties": False,
    }
    gen_fields = TypeAdapter(GenerateReqInput).json_schema(mode="validation")["properties"]
    text_or_list = {
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    }
    props: dict[str, Any] = {}
    for name in sorted(native_api.SGLANG_ONLY_FIELDS):
        props[name] = {"description": "SGLang's field: accepted unset or ignored here."}
    for name in native_api.DP_RANK_FIELDS:
        props[name] = {
            "description": "Data-parallel rank pin: 0 (this server's only rank) or null.",
            "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}],
        }
    for name in sorted(native_api.GENERATE_FIELDS):
        props[name] = _nullable(gen_fields[name]) if name in gen_fields else text_or_list
    props["sampling_params"] = {
        "anyOf": [sampling, {"type": "array", "items": sampling}, {"type": "null"}],
        "title": "Sampling Params",
    }
    return {
        "title": "GenerateReqInput",
        "description": "SGLang's native /generate body: `text` or `input_ids` (one prompt or a batch).",
        "type": "object",
        "properties": props,
        "additionalProperties": True,
    }


def _opt(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` or ``null`` (the parsers read ``null`` as the field's default)."""
    return {"anyOf": [schema, {"type": "null"}]}


def native_body_schemas() -> dict[tuple[str, str], tuple[dict[str, Any], bool]]:
    """JSON Schemas (2020-12) of the native routes' bodies, keyed by (lower-case method, path),
    each with whether a body is required, as their parsers read them (other keys are ignored,
    so ``additionalProperties`` is allowed):

    * ``/separate_reasoning`` (:func:`~.openai.serving_parsers.separate_reasoning_body`): ``text``
      and ``reasoning_parser`` (a known name) required, ``return_blocks`` a boolean;
    * ``/parse_function_call`` (:func:`~.openai.serving_parsers.parse_function_call_body`):
      ``text`` required, ``tools`` OpenAI function tools (a name without quotes, angle brackets
      or newlines; unique names and the nesting bound are the route's checks), ``tool_call_parser``
      a known name or ``null``;
    * ``/abort_request`` (:func:`~.native_api.parse_abort_body`): ``rid`` a string,
      ``abort_all`` / ``prefix`` booleans;
    * ``/update_weights_from_disk`` (:func:`~.control_api.parse_update_weights_body`):
      ``model_path`` a non-empty string (that it is a directory is the route's check),
      ``load_format`` ``auto`` / ``safetensors``, ``flush_cache`` only ``true``, ``is_async`` /
      ``manifest`` only unset;
    * ``/pause_generation`` (:func:`~.control_api.parse_pause_body`): optional; ``mode`` one of
      the pause modes;
    * ``/get_weights_by_name`` (:func:`~.control_api.parse_get_weights_body`): ``name`` a
      non-empty string, ``truncate_size`` an integer >= 0; optional (the query may carry them);
    * ``/continue_generation`` (:func:`~.control_api.parse_continue_body`): optional;
      ``torch_empty_cache`` a boolean;
    * ``/start_profile`` (:func:`~.control_api.parse_profile_body`): optional; ``num_steps`` >= 1,
      ``activities`` CPU / GPU (GPU on a CUDA server and a writable ``output_dir`` are the
      route's checks), ``profile_id`` a file-name part, SGLang's staged-profile options unset;
    * ``/configure_logging`` (:func:`~.control_api.parse_configure_logging_body`): optional; the
      request-log level / format of their ranges, ``log_level`` a level name in any case, the
      request-dump options unset.

    Empty when the routes' modules are not installed. Raises nothing.
    """
    try:
        from sglang_v4.entrypoints.control_api import LOG_LEVELS, UPDATE_LOAD_FORMATS
        from sglang_v4.entrypoints.openai.reasoning_parser import REASONING_PARSER_NAMES
        from sglang_v4.entrypoints.openai.tool_calls import TOOL_CALL_PARSER_NAMES
        from sglang_v4.managers.request_log import LOG_REQUESTS_FORMATS, LOG_REQUESTS_LEVELS
        from sglang_v4.managers.tokenizer_control_mixin import PAUSE_MODES
    except ImportError:
        return {}
    string, boolean = {"type": "string"}, {"type": "boolean"}
    unset = {"description": "Not supported: accepted unset (null, false) only.", "enum": [None, False]}
    function = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "not": {"pattern": '["<>\\n]'}},
            "description": _opt(string),
            "parameters": _opt({"type": "object"}),
            "strict": _opt(boolean),
        },
        "required": ["name"],
    }
    tool = {
        "type": "object",
        "properties": {"type": {"const": "function"}, "function": function},
        "required": ["function"],
    }
    separate = {
        "title": "SeparateReasoningRequest",
        "type": "object",
        "properties": {
            "text": string,
            "reasoning_parser": {"enum": list(REASONING_PARSER_NAMES)},
            "return_blocks": boolean,
        },
        "required": ["text", "reasoning_parser"],
    }
    parse_calls = {
        "title": "ParseFunctionCallRequest",
        "type": "object",
        "properties": {
            "text": string,
            "tools": _opt({"type": "array", "items": tool}),
            "tool_call_parser": _opt({"enum": list(TOOL_CALL_PARSER_NAMES)}),
        },
        "required": ["text"],
    }
    abort = {
        "title": "AbortRequest",
        "type": "object",
        "properties": {"rid": _opt(string), "abort_all": _opt(boolean), "prefix": _opt(boolean)},
    }
    weights = {
        "title": "UpdateWeightsFromDiskRequest",
        "type": "object",
        "properties": {
            "model_path": {"type": "string", "minLength": 1},
            "load_format": {"enum": list(UPDATE_LOAD_FORMATS)},
            "weight_version": _opt(string),
            "token_step": _opt({"type": "integer"}),
            "rid": _opt(string),
            "flush_cache": {"enum": [None, True]},
            **{k: _opt(boolean) for k in ("abort_all_requests", "torch_empty_cache", "keep_pause")},
            "recapture_cuda_graph": _opt(boolean),
            "is_async": unset,
            "manifest": unset,
        },
        "required": ["model_path"],
    }
    pause = {
        "title": "PauseGenerationRequest",
        "anyOf": [
            {"type": "object", "properties": {"mode": _opt({"enum": list(PAUSE_MODES)})}},
            {"type": "null"},
        ],
    }
    get_weights = {
        "title": "GetWeightsByNameRequest",
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "truncate_size": _opt({"type": "integer", "minimum": 0}),
            "rid": _opt(string),
        },
        "required": ["name"],
    }
    resume = {
        "title": "ContinueGenerationRequest",
        "anyOf": [
            {"type": "object", "properties": {"torch_empty_cache": _opt(boolean), "rid": _opt(string)}},
            {"type": "null"},
        ],
    }
    staged = ("start_step", "profile_by_stage", "merge_profiles", "profile_prefix", "profile_stages")
    profile = {
        "title": "ProfileReqInput",
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "output_dir": _opt(string),
                    "num_steps": _opt({"type": "integer", "minimum": 1}),
                    "activities": _opt({"type": "array", "items": {"enum": ["CPU", "GPU"]}, "minItems": 1}),
                    "with_stack": _opt(boolean),
                    "record_shapes": _opt(boolean),
                    "profile_id": _opt({"type": "string", "not": {"pattern": "/|^\\.{1,2}$"}}),
                    "rid": _opt(string),
                    **{k: unset for k in (*staged, "detailed_annotations")},
                },
            },
            {"type": "null"},
        ],
    }
    dumps = ("dump_requests_folder", "dump_requests_threshold", "crash_dump_folder")
    any_case = "|".join("".join(f"[{c.lower()}{c.upper()}]" for c in lvl) for lvl in LOG_LEVELS)
    log_config = {
        "title": "ConfigureLoggingReq",
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "log_requests": _opt(boolean),
                    "log_requests_level": _opt({"enum": list(LOG_REQUESTS_LEVELS)}),
                    "log_requests_format": _opt({"enum": list(LOG_REQUESTS_FORMATS)}),
                    "log_level": _opt({"type": "string", "pattern": f"^({any_case})$"}),
                    "rid": _opt(string),
                    **{k: unset for k in (*dumps, "dump_requests_exclude_meta_keys")},
                },
            },
            {"type": "null"},
        ],
    }
    return {
        ("post", "/get_weights_by_name"): (get_weights, False),
        ("post", "/continue_generation"): (resume, False),
        ("post", "/start_profile"): (profile, False),
        ("post", "/configure_logging"): (log_config, False),
        ("post", "/separate_reasoning"): (separate, True),
        ("post", "/parse_function_call"): (parse_calls, True),
        ("post", "/abort_request"): (abort, False),
        ("post", "/update_weights_from_disk"): (weights, True),
        ("post", "/pause_generation"): (pause, False),
    }


def _only_string_path_params(op: dict[str, Any]) -> bool:
    """Whether ``op``'s parameters are all string path parameters (and it has some)."""
    params = op.get("parameters") or []
    return bool(params) and all(
        p.get("in") == "path" and p.get("schema", {}).get("type") == "string" for p in params
    )


def _complete(doc: dict[str, Any], bodies: dict[tuple[str, str], list[type[BaseModel]]]) -> dict[str, Any]:
    """``doc`` (FastAPI's document) with the request bodies of ``bodies`` and of ``/generate``,
    unique operationIds and the ``default`` error response, in place; returns ``doc``."""
    models = sorted({m for ms in bodies.values() for m in ms}, key=lambda m: m.__name__)
    refs, top = models_json_schema(
        [(m, "validation") for m in models], ref_template="#/components/schemas/{model}"
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(top.get("$defs", {}))
    schemas["ErrorBody"] = ERROR_SCHEMA
    schemas["GenerateReqInput"] = generate_request_schema()
    generate = {"$ref": "#/components/schemas/GenerateReqInput"}
    natives = native_body_schemas()
    uploads = upload_body_schemas()
    # FastAPI names a route's operations after its first method, so a route serving two methods has
    # one operationId twice; OpenAPI requires them unique (client generators key their methods on
    # them): each operation of a repeated id is named after its own method instead.
    ids = [op.get("operationId") for ops in doc.get("paths", {}).values() for op in ops.values()]
    repeated = {i for i in ids if i and ids.count(i) > 1}
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            if op.get("operationId") in repeated:
                op["operationId"] = f"{op['operationId'].rsplit('_', 1)[0]}_{method}"
            ms = bodies.get((method, path))
            native = natives.get((method, path))
            if "422" in op.get("responses", {}) and "requestBody" not in op and _only_string_path_params(op):
                del op["responses"]["422"]
            if native is not None and "requestBody" not in op:
                name = native[0]["title"]
                schemas[name] = native[0]
                op["requestBody"] = {
                    "required": native[1],
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
                }
            elif (method, path) in uploads and "requestBody" not in op:
                form = uploads[(method, path)]
                schemas[form["title"]] = form
                ref = {"$ref": f"#/components/schemas/{form['title']}"}
                op["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": ref}}}
            elif path == "/generate" and "requestBody" not in op:
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": generate}}}
            elif ms and "requestBody" not in op:
                alts = [refs[(m, "validation")] for m in ms]
                schema = alts[0] if len(alts) == 1 else {"anyOf": alts}
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
            op.setdefault("responses", {}).setdefault(
                "default",
                {
                    "description": "Error",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                },
            )
    return doc


def upload_body_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """JSON Schemas (2020-12) of the ``multipart/form-data`` bodies, keyed by (lower-case method,
    path): ``POST /v1/files`` (:meth:`~.openai.serving_files.FilesMixin.create_file`) as
    the ``openai`` client sends it: a ``file`` part (its bytes), ``purpose`` one of OpenAI's upload
    purposes, and ``expires_after`` as the two fields ``expires_after[anchor]`` (``created_at``)
    and ``expires_after[seconds]`` (OpenAI's bounds). Empty when the files route is not
    installed. Raises nothing."""
    try:
        from sglang_v4.entrypoints.openai.protocol_batch import (
            FILE_EXPIRY_MAX_S,
            FILE_EXPIRY_MIN_S,
            FILE_PURPOSES,
        )
    except ImportError:
        return {}
    upload = {
        "title": "CreateFileRequest",
        "type": "object",
        "properties": {
            "file": {"type": "string", "contentMediaType": "application/octet-stream"},
            "purpose": {"enum": list(FILE_PURPOSES)},
            "expires_after[anchor]": {"const": "created_at"},
            "expires_after[seconds]": {
                "type": "integer",
                "minimum": FILE_EXPIRY_MIN_S,
                "maximum": FILE_EXPIRY_MAX_S,
            },
        },
        "required": ["file", "purpose"],
    }
    return {("post", "/v1/files"): upload}


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` (served at ``/openapi.json``) FastAPI's document completed by
    :func:`_complete` with :func:`request_body_models`; built on first call (after the routes
    mounted at start-up) and cached in ``app.openapi_schema`` as FastAPI does."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            # app.servers: FastAPI's /openapi.json route adds the --root-path prefix there first;
            # FastAPI warns of the operationIds a route of several methods repeats, which
            # _complete makes unique, so that warning would name a fault the document lacks
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Duplicate Operation ID", category=UserWarning)
                doc = get_openapi(
                    title=app.title, version=app.version, routes=app.routes, servers=app.servers or None
                )
            app.openapi_schema = _complete(doc, request_body_models())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
