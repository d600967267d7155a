"""SGLang's runtime-control routes (what RL frameworks and operators call on a running server),
their request bodies and their answers.

* ``POST /update_weights_from_disk`` ``{"model_path", "load_format"?, "abort_all_requests"?,
  "weight_version"?}``: reload the weights from a checkpoint of the same architecture, flush the
  radix cache; ``{"success", "message", "num_paused_requests"}`` (200, or 400 with
  ``success: false``; a failure also carries the native ``error`` object).
* ``GET|POST /get_weights_by_name`` ``{"name", "truncate_size": 100}``: the parameter's first rows.
* ``POST /pause_generation`` ``{"mode": "abort" | "retract" | "in_place"}`` and
  ``POST /continue_generation``.
* ``GET|POST /start_profile`` ``{"output_dir"?, "num_steps"?, "activities"?, ...}`` and
  ``GET|POST /stop_profile``: the torch profiler around scheduler steps.
* ``GET|POST /configure_logging`` ``{"log_requests"?, "log_requests_level"?,
  "log_requests_format"?, "log_level"?}``.
* ``GET /get_weight_version``.

Field names, defaults and success answers are SGLang's (``srt/managers/io_struct.py``,
``srt/entrypoints/http_server.py``). SGLang fields of features this runtime lacks are accepted
only unset (a 400 naming the field otherwise); wrong types and bad values are a 400 naming the
field, in the native error shape, and change nothing. Unknown fields are ignored on the HTTP
routes, with one warning naming them, as SGLang's request structs ignore undeclared keys
(:func:`~sglang_v4.entrypoints.native_api.drop_unknown_fields`); the offline ``Engine``, whose
keywords are a Python call, refuses them (``ignore_unknown=False``). Every route but ``/get_weight_version`` is
an admin route (``--admin-api-key``; :data:`~sglang_v4.entrypoints.admission.ADMIN_ROUTES`), as
SGLang marks them. The ``parse_*`` functions are shared with the
offline ``Engine`` (where they raise the same :class:`RequestError`, a ``ValueError``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response

from sglang_v4.entrypoints.native_api import drop_unknown_fields, error_body, error_response, json_response
from sglang_v4.entrypoints.openai.request_errors import loads_json_body
from sglang_v4.managers.control_struct import ProfileReq
from sglang_v4.managers.request_log import LOG_REQUESTS_FORMATS, LOG_REQUESTS_LEVELS
from sglang_v4.managers.tokenizer_control_mixin import PAUSE_MODES
from sglang_v4.managers.tokenizer_manager import RequestError, TokenizerManager

#: ``load_format`` values of a weight update (the safetensors loader of start-up).
UPDATE_LOAD_FORMATS = (None, "auto", "safetensors")
#: ``log_level`` values of ``/configure_logging`` (any case).
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: Where traces go without ``output_dir`` (SGLang's default).
PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _fields(body: Any, known: set[str], ignore_unknown: bool, route: str) -> dict[str, Any]:
    """``body`` as a dict (``None``: empty) with only ``known`` fields; with ``ignore_unknown``
    (the HTTP routes) the others are dropped with a warning naming them and ``route``.

    Raises:
        RequestError: not an object, or an unknown field (named) without ``ignore_unknown``."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    if ignore_unknown:
        return drop_unknown_fields(body, known, route)
    unknown = sorted(set(body) - known)
    if unknown:
        raise RequestError(f"Unknown field(s) in the request: {', '.join(unknown)}.")
    return body


def _typed(
    body: dict[str, Any], name: str, ok: Callable[[Any], bool], expected: str, default: Any = None
) -> Any:
    v = body.get(name)
    if v is None:
        return default
    if not ok(v):
        raise RequestError(f"{name} must be {expected} (got {type(v).__name__}: {str(v)[:80]!r}).")
    return v


def _unsupported(body: dict[str, Any], names: tuple[str, ...], why: str) -> None:
    for name in names:
        v = body.get(name)
        if v is not None and v is not False:
            raise RequestError(f"{name} is not supported by sglang-v4 ({why}).")


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def parse_update_weights_body(body: Any, ignore_unknown: bool = False) -> dict[str, Any]:
    """``/update_weights_from_disk``'s body -> the keywords of
    ``TokenizerManager.update_weights_from_disk``.

    ``torch_empty_cache``, ``keep_pause``, ``recapture_cuda_graph`` (parameters keep their
    storage, so captured graphs stay valid), ``token_step`` and ``rid`` are accepted and change
    nothing; ``is_async``, ``manifest`` and ``flush_cache: false`` are refused.

    Raises:
        RequestError: a missing or empty ``model_path``, a path that is no directory, a
            ``load_format`` other than safetensors', a field of the wrong type.
    """
    known = {
        "model_path", "load_format", "abort_all_requests", "weight_version", "is_async",
        "torch_empty_cache", "keep_pause", "recapture_cuda_graph", "token_step", "flush_cache",
        "manifest", "rid",
    }  # fmt: skip
    b = _fields(body, known, ignore_unknown, "/update_weights_from_disk")
    path = _typed(b, "model_path", _is_str, "a string")
    if not path:
        raise RequestError("model_path is required: the checkpoint directory to load the weights from.")
    if not os.path.isdir(path):
        raise RequestError(f"model_path: {path!r} is not a directory.")
    fmt = _typed(b, "load_format", _is_str, "a string")
    if fmt not in UPDATE_LOAD_FORMATS:
        raise RequestError(f"load_format: {fmt!r} is not supported; use 'auto' (safetensors).")
    for name in ("abort_all_requests", "torch_empty_cache", "keep_pause", "recapture_cuda_graph"):
        _typed(b, name, _is_bool, "a boolean")
    _typed(b, "token_step", _is_int, "an integer")
    _typed(b, "rid", _is_str, "a string")
    if _typed(b, "flush_cache", _is_bool, "a boolean", True) is False:
        raise RequestError(
            "flush_cache: false is not supported: the cached KV was computed with the old weights."
        )
    _unsupported(b, ("is_async", "manifest"), "weights are loaded synchronously from safetensors")
    return {
        "model_path": path,
        "load_format": fmt,
        "abort_all_requests": bool(b.get("abort_all_requests") or False),
        "weight_version": _typed(b, "weight_version", _is_str, "a string"),
    }


def parse_get_weights_body(body: Any, ignore_unknown: bool = False) -> tuple[str, int]:
    """``/get_weights_by_name``'s body -> ``(name, truncate_size)`` (SGLang's default 100).

    Raises:
        RequestError: no ``name``, or ``truncate_size`` not an integer >= 0."""
    b = _fields(body, {"name", "truncate_size", "rid"}, ignore_unknown, "/get_weights_by_name")
    name = _typed(b, "name", _is_str, "a string")
    if not name:
        raise RequestError(
            "name is required: the parameter's checkpoint name, e.g. 'model.embed_tokens.weight'."
        )
    size = _typed(b, "truncate_size", _is_int, "an integer", 100)
    if size < 0:
        raise RequestError(f"truncate_size must be >= 0, got {size}.")
    return name, size


def parse_pause_body(body: Any, ignore_unknown: bool = False) -> str:
    """``/pause_generation``'s body -> ``mode`` (SGLang's default ``"abort"``).

    Raises:
        RequestError: a mode other than abort / retract / in_place."""
    b = _fields(body, {"mode", "rid"}, ignore_unknown, "/pause_generation")
    mode = _typed(b, "mode", _is_str, "a string", "abort")
    if mode not in PAUSE_MODES:
        raise RequestError(f"mode must be one of {', '.join(PAUSE_MODES)}, got {mode!r}.")
    return mode


def parse_continue_body(body: Any, ignore_unknown: bool = False) -> None:
    """``/continue_generation``'s body (``torch_empty_cache`` accepted; nothing to free here).
    ``ignore_unknown`` (every ``parse_*`` here): drop unknown fields with a warning (the HTTP
    routes) rather than refuse them (the ``Engine``).

    Raises:
        RequestError: a wrong type, or an unknown field without ``ignore_unknown``."""
    b = _fields(body, {"torch_empty_cache", "rid"}, ignore_unknown, "/continue_generation")
    _typed(b, "torch_empty_cache", _is_bool, "a boolean")


def check_profile_output_dir(path: str) -> None:
    """Refuse a ``/start_profile`` ``output_dir`` the trace could not be written to, before the
    profiler starts (SGLang makes the directory when the profile starts and writes the trace when
    it stops: an unusable one then failed only at ``/stop_profile``, or in the scheduler).

    Accepted: an existing writable directory, or a path whose nearest existing ancestor is a
    writable directory (the missing levels are made when the profile starts).

    Raises:
        RequestError: (400) naming ``output_dir``: a NUL byte in it, an existing path that is not
            a directory or not writable, or an ancestor that is a file or not writable.
    """
    if "\x00" in path:
        raise RequestError("output_dir: must not contain a NUL byte.")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise RequestError(f"output_dir: {path!r} exists and is not a directory.")
        if not os.access(path, os.W_OK | os.X_OK):
            raise RequestError(f"output_dir: {path!r} is not writable.")
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise RequestError(f"output_dir: {path!r} cannot be created: {parent!r} is not a directory.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RequestError(f"output_dir: {path!r} cannot be created: {parent!r} is not writable.")


def parse_profile_body(body: Any, device: str, ignore_unknown: bool = False) -> ProfileReq:
    """``/start_profile``'s body -> a :class:`ProfileReq` with SGLang's defaults: ``output_dir``
    from ``$SGLANG_TORCH_PROFILER_DIR`` or ``/tmp``, ``activities`` CPU (and GPU on a CUDA
    server), ``with_stack`` / ``record_shapes`` on unless false.

    Raises:
        RequestError: ``num_steps`` < 1, an activity other than CPU / GPU (GPU on a server
            without CUDA), an ``output_dir`` the trace cannot be written to
            (:func:`check_profile_output_dir`), or an SGLang option this profiler lacks (``start_step``,
            ``profile_by_stage``, ``merge_profiles``, ...)."""
    known = {
        "output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack",
        "record_shapes", "profile_id", "merge_profiles", "profile_prefix", "profile_stages",
        "detailed_annotations", "rid",
    }  # fmt: skip
    b = _fields(body, known, ignore_unknown, "/start_profile")
    _unsupported(
        b,
        (
            "start_step",
            "profile_by_stage",
            "merge_profiles",
            "profile_prefix",
            "profile_stages",
            "detailed_annotations",
        ),
        "the profile starts at once and covers every step until stopped",
    )
    out_dir = _typed(b, "output_dir", _is_str, "a string") or os.environ.get(PROFILER_DIR_ENV) or "/tmp"
    steps = _typed(b, "num_steps", _is_int, "an integer")
    if steps is not None and steps < 1:
        raise RequestError(f"num_steps must be >= 1, got {steps}.")
    acts = _typed(
        b, "activities", lambda v: isinstance(v, list) and all(_is_str(a) for a in v), "a list of strings"
    )
    if acts is None:
        acts = ["CPU", "GPU"] if device == "cuda" else ["CPU"]
    bad = [a for a in acts if a not in ("CPU", "GPU")]
    if bad or not acts:
        raise RequestError(f"activities: {bad or acts} not supported; use 'CPU' and / or 'GPU'.")
    if "GPU" in acts and device != "cuda":
        raise RequestError(f"activities: 'GPU' needs a CUDA device; this server runs on {device}.")
    profile_id = _typed(b, "profile_id", _is_str, "a string") or ""
    if "/" in profile_id or os.sep in profile_id or profile_id in (".", ".."):  # a file name part
        raise RequestError(
            f"profile_id: {profile_id[:80]!r} must be usable in a file name (no path separator)."
        )
    out_dir = os.path.expanduser(out_dir)
    check_profile_output_dir(out_dir)
    return ProfileReq(
        output_dir=out_dir,
        num_steps=steps,
        activities=list(dict.fromkeys(acts)),
        with_stack=_typed(b, "with_stack", _is_bool, "a boolean") is not False,
        record_shapes=_typed(b, "record_shapes", _is_bool, "a boolean") is not False,
        profile_id=profile_id,
    )


def parse_configure_logging_body(body: Any, ignore_unknown: bool = False) -> dict[str, Any]:
    """``/configure_logging``'s body -> the keywords of ``TokenizerManager.configure_logging``.

    Raises:
        RequestError: a wrong type, a level or format out of range, or a request-dump option
            (``dump_requests_folder``, ``dump_requests_threshold``, ``crash_dump_folder``,
            ``dump_requests_exclude_meta_keys``: not implemented)."""
    known = {
        "log_requests", "log_requests_level", "log_requests_format", "log_level",
        "dump_requests_folder", "dump_requests_threshold", "crash_dump_folder",
        "dump_requests_exclude_meta_keys", "rid",
    }  # fmt: skip
    b = _fields(body, known, ignore_unknown, "/configure_logging")
    _unsupported(
        b,
        (
            "dump_requests_folder",
            "dump_requests_threshold",
            "crash_dump_folder",
            "dump_requests_exclude_meta_keys",
        ),
        "requests are not dumped to files",
    )
    level = _typed(b, "log_requests_level", _is_int, "an integer")
    if level is not None and level not in LOG_REQUESTS_LEVELS:
        raise RequestError(f"log_requests_level must be one of {list(LOG_REQUESTS_LEVELS)}, got {level}.")
    fmt = _typed(b, "log_requests_format", _is_str, "a string")
    if fmt is not None and fmt not in LOG_REQUESTS_FORMATS:
        raise RequestError(f"log_requests_format must be one of {list(LOG_REQUESTS_FORMATS)}, got {fmt!r}.")
    log_level = _typed(b, "log_level", _is_str, "a string")
    if log_level is not None and log_level.lower() not in LOG_LEVELS:
        raise RequestError(f"log_level must be one of {list(LOG_LEVELS)}, got {log_level!r}.")
    return {
        "log_requests": _typed(b, "log_requests", _is_bool, "a boolean"),
        "log_requests_level": level,
        "log_requests_format": fmt,
        "log_level": log_level,
    }


def update_weights_answer(success: bool, message: str, num_paused_requests: int = 0) -> Response:
    """SGLang's ``/update_weights_from_disk`` answer: 200, or 400 with ``success: false`` (plus
    the native ``error`` object, so clients of either shape read the reason)."""
    content: dict[str, Any] = {
        "success": success,
        "message": message,
        "num_paused_requests": num_paused_requests,
    }
    if success:
        return json_response(content)
    return json_response({**content, **error_body(message, 400)}, status_code=400)


async def _body(request: Request) -> Any:
    """The decoded JSON body, ``None`` when empty.

    Raises:
        RequestError: malformed JSON."""
    raw = await request.body()
    if not raw.strip():
        return None
    try:
        return loads_json_body(raw)
    except orjson.JSONDecodeError as e:
        raise RequestError(f"Malformed JSON body: {e}") from None


def create_control_router(get_tm: Callable[[], TokenizerManager], device: str) -> APIRouter:
    """The routes of the module docstring over the tokenizer manager ``get_tm()`` (raises
    :class:`RequestError` 503 while the server starts); ``device`` is the server's (``cpu`` /
    ``cuda``), for the profiler's activities."""
    router = APIRouter()

    @router.post("/update_weights_from_disk")
    async def update_weights_from_disk(request: Request) -> Response:
        try:
            kwargs = parse_update_weights_body(await _body(request), ignore_unknown=True)
            out = await get_tm().update_weights_from_disk(**kwargs)
        except RequestError as e:
            if e.status_code != 400:
                return error_response(str(e), e.status_code)
            return update_weights_answer(False, str(e))
        return update_weights_answer(out.success, out.message, out.num_paused_requests)

    @router.api_route("/get_weights_by_name", methods=["GET", "POST"])
    async def get_weights_by_name(request: Request) -> Response:
        try:
            body = await _body(request)
            if body is None and request.query_params:
                q = dict(request.query_params)
                if "truncate_size" in q:
                    try:
                        q["truncate_size"] = int(q["truncate_size"])  # type: ignore[assignment]
                    except ValueError:
                        raise RequestError("truncate_size must be an integer.") from None
                body = q
            name, size = parse_get_weights_body(body, ignore_unknown=True)
            return json_response(await get_tm().get_weights_by_name(name, size))
        except RequestError as e:
            return error_response(str(e), e.status_code)

    @router.post("/pause_generation")
    async def pause_generation(request: Request) -> Response:
        try:
            await get_tm().pause_generation(parse_pause_body(await _body(request), ignore_unknown=True))
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return json_response({"message": "Generation paused successfully.", "status": "ok"})

    @router.post("/continue_generation")
    async def continue_generation(request: Request) -> Response:
        try:
            parse_continue_body(await _body(request), ignore_unknown=True)
            await get_tm().continue_generation()
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return json_response({"message": "Generation continued successfully.", "status": "ok"})

    @router.api_route("/start_profile", methods=["GET", "POST"])
    async def start_profile(request: Request) -> Response:
        try:
            await get_tm().start_profile(
                parse_profile_body(await _body(request), device, ignore_unknown=True)
            )
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return Response(content="Start profiling.\n", status_code=200)

    @router.api_route("/stop_profile", methods=["GET", "POST"])
    async def stop_profile() -> Response:
        try:
            await get_tm().stop_profile()
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return Response(content="Stop profiling. This will take some time.\n", status_code=200)

    @router.api_route("/configure_logging", methods=["GET", "POST"])
    async def configure_logging(request: Request) -> Response:
        try:
            kwargs = parse_configure_logging_body(await _body(request), ignore_unknown=True)
            await get_tm().configure_logging(**kwargs)
        except RequestError as e:
            return error_response(str(e), e.status_code)
        return Response(status_code=200)

    @router.get("/get_weight_version")
    async def get_weight_version() -> Response:
        try:
            return json_response({"weight_version": get_tm().server_args.weight_version})
        except RequestError as e:
            return error_response(str(e), e.status_code)

    return router
