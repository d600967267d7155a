"""SGLang's native ``/generate`` request body and the native API's JSON responses.

``parse_generate_body`` type-checks a decoded ``/generate`` body (SGLang 0.5.x field names) and
builds a :class:`~sglang_v4.managers.io_struct.GenerateReqInput`; SGLang fields this runtime does
not implement are accepted only when null/false (a 400 naming the field otherwise), a few
routing-only fields are ignored, and a data-parallel rank pin is accepted for rank 0, the one
rank a server is. Unknown top-level fields are ignored with one warning naming them
(:func:`drop_unknown_fields`), as SGLang's handler does: it parses the body into its
``GenerateReqInput`` dataclass, which drops keys it does not declare, so a client that sends a
field of a later SGLang version still gets its answer. An unknown key inside ``sampling_params`` is
refused as SGLang 0.5.23 refuses it (its JSON contract gate, ``srt/entrypoints/api_contract.py``):
400 ``{"error": "unknown field `KEY`, expected one of ..."}`` (:class:`ContractError`,
:func:`request_error_response`). ``json_response`` / ``error_response`` write SGLang's response
and error shapes.
A batch (lists of ``text`` / ``input_ids``) whose one entry is bad gets a 400 naming the entry
(``text[2]``; :func:`name_batch_entry` for what the tokenizer manager refuses).
``flush_cache_within`` is ``/flush_cache?timeout=T`` (SGLang's deferred flush).
The routes themselves are in :mod:`sglang_v4.entrypoints.http_server`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Collection
from typing import Any

import orjson
from fastapi.responses import Response

from sglang_v4.entrypoints.openai.protocol import auth_challenge_headers, error_type_for_status
from sglang_v4.managers.control_struct import FlushCacheReqOutput
from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.prefix_sharing import join_cache_namespace
from sglang_v4.managers.tokenizer_manager import RequestError
from sglang_v4.sampling.sampling_params import SamplingParams

logger = logging.getLogger(__name__)

# Top-level /generate fields: supported ones, and SGLang fields accepted only when null/false.
_GENERATE_FIELDS = {
    "text",
    "input_ids",
    "sampling_params",
    "rid",
    "return_logprob",
    "logprob_start_len",
    "top_logprobs_num",
    "token_ids_logprob",
    "return_text_in_logprobs",
    "stream",
    "log_metrics",
    "priority",
    "require_reasoning",
    "extra_key",
    "cache_salt",
}
_UNSUPPORTED_IF_SET = {
    "input_embeds",
    "image_data",
    "video_data",
    "audio_data",
    "modalities",
    "lora_path",
    "lora_id",
    "session_params",
    "custom_logit_processor",
    "return_hidden_states",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "return_routed_experts",
    "return_bytes",
    "return_entropy",
    # further SGLang 0.5.23 GenerateReqInput fields (multimodal, disaggregation, scoring, ...)
    "mm_hashes",
    "mm_content_hashes",
    "use_audio_in_video",
    "video_config",
    "watermark",
    "return_sampling_mask",
    "sampling_logprobs_mode",
    "return_flat_raw_top_logprobs",
    "return_flat_raw_output_top_logprobs",
    "return_flat_raw_top_logprobs_b64",
    "return_indexer_topk",
    "positional_embed_overrides",
    "bootstrap_pair_key",
    "decode_tp_size",
    "disagg_prefill_dp_rank",
    "max_thinking_tokens",
    "return_prompt_token_ids",
    "encoder_urls",
    "max_dynamic_patch",
    "min_dynamic_patch",
    "image_max_dynamic_patch",
    "video_max_dynamic_patch",
    "images_config",
    "mm_processor_kwargs",
    "multi_item_delimiter_indices",
    "token_indices_to_pool",
    "kv_hints",
}
# "model" and "no_logs": sglang-router forwards every /generate body with these SGLang fields set
_IGNORED_FIELDS = {
    "session_id",
    "conversation_id",
    "background",
    "model",
    "no_logs",
    # request metadata for routing, metrics labels and tracing: nothing to do here
    "routing_key",
    "custom_labels",
    "external_trace_header",
    "routed_experts_start_len",  # read only with return_routed_experts, which is refused
}
#: SGLang's data-parallel rank pins (``routed_dp_rank`` is the later name): this server is one rank
#: (rank 0) of its own, so ``0`` is the pin it already honours and is accepted; any other value is
#: refused as SGLang refuses a rank outside ``[0, dp_size)`` (:func:`check_dp_rank`).
_DP_RANK_FIELDS = ("data_parallel_rank", "routed_dp_rank")
#: SGLang ``/generate`` / ``Engine.generate`` fields that are not implemented or are ignored here.
SGLANG_ONLY_FIELDS = frozenset(_UNSUPPORTED_IF_SET | _IGNORED_FIELDS | set(_DP_RANK_FIELDS))
_KNOWN_GENERATE_FIELDS = frozenset(_GENERATE_FIELDS) | SGLANG_ONLY_FIELDS
#: The top-level ``/generate`` fields this runtime serves, and SGLang's data-parallel rank pins
#: (read by the ``/openapi.json`` body schema, :mod:`sglang_v4.entrypoints.openapi_docs`).
GENERATE_FIELDS: frozenset[str] = frozenset(_GENERATE_FIELDS)
DP_RANK_FIELDS: tuple[str, ...] = _DP_RANK_FIELDS

#: ``sampling_params`` keys of SGLang 0.5.23's contract for features this runtime lacks: accepted
#: unset (null, false, ``[]``), a 400 naming the key otherwise.
_SAMPLING_UNSUPPORTED_IF_SET = ("watermark", "choice")
#: Every ``sampling_params`` key ``/generate`` accepts, in declaration order (the error lists them).
SAMPLING_PARAMS_KEYS: tuple[str, ...] = (
    tuple(f.name for f in dataclasses.fields(SamplingParams) if f.repr) + _SAMPLING_UNSUPPORTED_IF_SET
)
#: At most this many ignored field names are logged per request, each cut to this many characters.
_MAX_LOGGED_FIELDS, _MAX_LOGGED_NAME_CHARS = 16, 64


class ContractError(RequestError):
    """A ``/generate`` body that SGLang 0.5.23 refuses at its JSON contract gate (an unknown
    ``sampling_params`` key): answered 400 with SGLang's body ``{"error": message}``, the message
    in the contract's words (serde's ``unknown field `KEY`, expected one of `A`, `B`, ...``)."""


def drop_unknown_fields(body: dict[str, Any], known: Collection[str], route: str) -> dict[str, Any]:
    """``body`` without the keys not in ``known``; when there are any, one warning names them
    (at most :data:`_MAX_LOGGED_FIELDS`, each cut to :data:`_MAX_LOGGED_NAME_CHARS` characters).

    SGLang's routes parse their bodies into dataclasses / msgspec structs that ignore undeclared
    keys (FastAPI's dataclass model, ``extra_behavior="ignore"``); vLLM ignores them too and logs
    which ones it ignored. ``route`` names the route in the warning."""
    unknown = [k for k in body if k not in known]
    if not unknown:
        return body
    names = ", ".join(repr(str(k)[:_MAX_LOGGED_NAME_CHARS]) for k in unknown[:_MAX_LOGGED_FIELDS])
    more = f" (+{len(unknown) - _MAX_LOGGED_FIELDS} more)" if len(unknown) > _MAX_LOGGED_FIELDS else ""
    logger.warning("%s: ignored unknown field(s) in the request: %s%s", route, names, more)
    return {k: v for k, v in body.items() if k in known}


def check_sampling_keys(sp: dict[str, Any]) -> dict[str, Any]:
    """One ``sampling_params`` object of ``/generate``, its keys checked as SGLang 0.5.23 checks
    them; returns it without the unset :data:`_SAMPLING_UNSUPPORTED_IF_SET` keys.

    Raises:
        ContractError: a key not in :data:`SAMPLING_PARAMS_KEYS` (the first one, in body order).
        RequestError: ``watermark`` or ``choice`` set (not supported), named.
    """
    for k in sp:
        if k not in SAMPLING_PARAMS_KEYS:
            listed = ", ".join(f"`{f}`" for f in SAMPLING_PARAMS_KEYS)
            raise ContractError(f"unknown field `{k}`, expected one of {listed}")
    for k in _SAMPLING_UNSUPPORTED_IF_SET:
        if not is_unset(sp.get(k)):
            raise RequestError(f"sampling_params.{k} is not supported by sglang-v4.")
    return {k: v for k, v in sp.items() if k not in _SAMPLING_UNSUPPORTED_IF_SET}


#: SGLang's text for an embedding request to a generation model (its ``TokenizerManager``):
#: SGLang serves embeddings only for a model launched with ``--is-embedding``, and every model
#: sglang-v4 serves is a generation model. ``Engine.encode`` / ``rerank`` and ``/v1/rerank``
#: answer it unchanged.
NOT_AN_EMBEDDING_MODEL_MSG = (
    "This model does not appear to be an embedding model by default. "
    "Please add `--is-embedding` when launching the server or try another model."
)

#: The 400 message of the embedding and classification routes (``/v1/embeddings``,
#: ``/v1/classify``, ``/encode``, ``/classify``): SGLang's text first, unchanged (clients match
#: it), then a sentence saying that its advice does not apply here (sglang-v4 refuses
#: ``--is-embedding`` at start-up).
NOT_AN_EMBEDDING_MODEL_ROUTE_MSG = (
    NOT_AN_EMBEDDING_MODEL_MSG
    + " sglang-v4 serves generation models only and does not support `--is-embedding`."
)

#: orjson options of every JSON body: numpy scalars/arrays and non-str keys allowed.
ORJSON_OPTS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def json_response(content: Any, status_code: int = 200) -> Response:
    """A JSON response serialized with orjson (numpy scalars/arrays and int keys allowed)."""
    return Response(
        content=orjson.dumps(content, option=ORJSON_OPTS),
        status_code=status_code,
        media_type="application/json",
    )


def error_body(message: str, status_code: int = 400) -> dict[str, Any]:
    """SGLang's native error shape ``{"error": {"message": ...}}``, with the status's ``type``
    (:func:`~sglang_v4.entrypoints.openai.protocol.error_type_for_status`) and ``code`` added."""
    return {"error": {"message": message, "type": error_type_for_status(status_code), "code": status_code}}


def error_response(message: str, status_code: int = 400) -> Response:
    """:func:`error_body` with HTTP ``status_code``; a 401 carries ``WWW-Authenticate``
    (:func:`~sglang_v4.entrypoints.openai.protocol.auth_challenge_headers`)."""
    response = json_response(error_body(message, status_code), status_code=status_code)
    response.headers.update(auth_challenge_headers(status_code) or {})
    return response


def request_error_response(e: RequestError) -> Response:
    """The answer to a refused ``/generate``: SGLang's contract body ``{"error": message}`` for a
    :class:`ContractError`, else :func:`error_response` (``{"error": {"message", "type",
    "code"}}``), with the error's status."""
    if isinstance(e, ContractError):
        return json_response({"error": str(e)}, status_code=e.status_code)
    return error_response(str(e), e.status_code)


#: Seconds between two flush attempts of ``/flush_cache?timeout=T`` while the server is busy.
FLUSH_RETRY_INTERVAL_S = 0.05


def parse_flush_timeout(raw: str | None) -> float:
    """``/flush_cache``'s ``timeout`` query parameter: seconds, a finite number >= 0 (absent: 0;
    present but empty, ``?timeout=``, is no number, refused as SGLang's ``Query(float)`` does).

    Raises:
        RequestError: (400) not such a number; the message names ``timeout``.
    """
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise RequestError(f"timeout must be a finite number of seconds >= 0, got {raw!r}.")
    return value


async def flush_cache_within(tm: Any, timeout_s: float) -> FlushCacheReqOutput:
    """Flush the radix cache as soon as the scheduler is idle, waiting at most ``timeout_s``
    seconds (SGLang's ``/flush_cache?timeout=T``: its scheduler defers the flush until idle;
    here the refused flush is retried every :data:`FLUSH_RETRY_INTERVAL_S`). ``timeout_s == 0``
    is one attempt. ``tm`` is the ``TokenizerManager``; its ``RequestError`` (dead backend, 503)
    propagates. Returns the last answer, with SGLang's message after a timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        ret = await tm.flush_cache()
        if ret.success or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(FLUSH_RETRY_INTERVAL_S, max(deadline - time.monotonic(), 0.0)))
    if not ret.success and timeout_s > 0:
        return dataclasses.replace(ret, message="Timed out waiting for idle state.")
    return ret


#: ``/abort_request`` body fields: the two read here, and SGLang's ``AbortReq`` fields a client has
#: no use for here (set by SGLang's own components; ignored without a warning).
_ABORT_FIELDS = frozenset(
    {"rid", "abort_all", "prefix", "finished_reason", "abort_message", "weight_versions"}
)


def parse_abort_body(body: Any) -> tuple[str, bool, bool]:
    """``/abort_request``'s decoded body -> ``(rid, abort_all, prefix)`` (SGLang's defaults
    ``""``, ``False`` and ``False``, also for ``null``); ``prefix``: ``rid`` is a prefix of the
    request ids to abort (SGLang's flag). Unknown fields are ignored (:func:`drop_unknown_fields`).

    Raises:
        RequestError: not an object, ``rid`` not a string, ``abort_all`` or ``prefix`` not a
            boolean (named).
    """
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    body = drop_unknown_fields(body, _ABORT_FIELDS, "/abort_request")
    rid = "" if body.get("rid") is None else body["rid"]  # null: the default, as SGLang's Optional
    abort_all = False if body.get("abort_all") is None else body["abort_all"]
    prefix = False if body.get("prefix") is None else body["prefix"]
    _check_type("rid", rid, isinstance(rid, str), "a string")
    _check_type("abort_all", abort_all, isinstance(abort_all, bool), "a boolean")
    _check_type("prefix", prefix, isinstance(prefix, bool), "a boolean")
    return rid, abort_all, prefix


def is_unset(value: Any) -> bool:
    """True for a field left unset: None, False, or a list / dict of such values (a batch's
    per-prompt ``image_data: [None, None]``)."""
    if isinstance(value, list):
        return all(is_unset(v) for v in value)
    if isinstance(value, dict):
        return all(is_unset(v) for v in value.values())
    return value is None or value is False


def _check_type(name: str, value: Any, ok: bool, expected: str, entry: str | None = None) -> None:
    """Raise a 400 naming ``name`` unless ``ok``; ``entry`` (``"text[2] is int: 5"``) names the
    first bad entry of a list, appended to the message."""
    if not ok:
        where = f"; {entry}" if entry else ""
        raise RequestError(
            f"{name} must be {expected} (got {type(value).__name__}: {str(value)[:80]!r}){where}."
        )


def _describe(value: Any) -> str:
    return f"{type(value).__name__}: {str(value)[:40]!r}"


def _bad_entry(name: str, value: Any, ok: Any) -> str | None:
    """``"name[i] is <type>: <value>"`` for the first entry of list ``value`` that ``ok`` refuses
    (None when ``value`` is not a list or every entry passes)."""
    if not isinstance(value, list):
        return None
    i = next((i for i, v in enumerate(value) if not ok(v)), None)
    return None if i is None else f"{name}[{i}] is {_describe(value[i])}"


def _bad_id_entry(ids: Any) -> str | None:
    """The first bad entry of an ``input_ids`` list, named as sent: ``input_ids[i]`` in a flat
    list (one prompt), ``input_ids[i]`` / ``input_ids[i][j]`` in a batch (its first entry a list)."""
    if not isinstance(ids, list) or not ids:
        return None
    if not isinstance(ids[0], list):
        return _bad_entry("input_ids", ids, _is_int)
    for i, row in enumerate(ids):
        if not isinstance(row, list):
            return f"input_ids[{i}] is {_describe(row)}, not a list of integers"
        bad = _bad_entry(f"input_ids[{i}]", row, _is_int)
        if bad is not None:
            return bad
    return None


def name_batch_entry(e: RequestError, body: Any) -> RequestError:
    """``e`` with the batch entry it is about appended to its message (``"... (batch entry
    text[2])"``), where the tokenizer manager refused one prompt of a batch (``e.batch_index``)
    and ``body`` (the decoded ``/generate`` body) sent a list of ``text`` or of ``input_ids``
    lists; else ``e`` unchanged. The message's own text is kept as it was (tests and clients
    match SGLang's wording), the status too."""
    i = getattr(e, "batch_index", None)
    if i is None or isinstance(e, ContractError) or not isinstance(body, dict):
        return e
    ids = body.get("input_ids")
    if isinstance(body.get("text"), list):
        field = "text"
    elif isinstance(ids, list) and ids and isinstance(ids[0], list):
        field = "input_ids"
    else:
        return e
    named = RequestError(f"{e} (batch entry {field}[{i}])", e.status_code)
    named.batch_index = i
    return named


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_dp_rank(name: str, value: Any) -> None:
    """A ``data_parallel_rank`` / ``routed_dp_rank`` pin: ``None`` or ``0`` (this server's one rank).

    SGLang dispatches a pinned request to rank ``value`` of its ``dp_size`` ranks and refuses a
    rank outside ``[0, dp_size)`` with the messages used here. Each sglang-v4 server (each
    ``--dp-size`` replica too, behind the router that picks it) is one rank, so ``dp_size`` is 1.

    Raises:
        RequestError: not an integer, negative, or ``>= 1``; names the field.
    """
    if value is None:
        return
    _check_type(name, value, _is_int(value), "an integer")
    if value < 0:
        raise RequestError(f"{name} must be non-negative")
    if value >= 1:
        raise RequestError(f"{name} must be less than dp_size: 1")


def parse_generate_body(body: Any) -> GenerateReqInput:
    """Type-check a decoded ``/generate`` JSON body and build a :class:`GenerateReqInput`.

    Unknown top-level fields are ignored (:func:`drop_unknown_fields` logs them).

    Raises:
        RequestError: the body is not an object, a supported field of the wrong type, or an
            unsupported SGLang field set to a non-null value.
        ContractError: an unknown ``sampling_params`` key (:func:`check_sampling_keys`).
    """
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.")
    body = drop_unknown_fields(body, _KNOWN_GENERATE_FIELDS, "/generate")
    for k in _UNSUPPORTED_IF_SET:
        if not is_unset(body.get(k)):
            raise RequestError(f"{k} is not supported by sglang-v4.")
    for k in _DP_RANK_FIELDS:
        check_dp_rank(k, body.get(k))
    text, ids = body.get("text"), body.get("input_ids")
    if text is not None:
        _check_type(
            "text",
            text,
            isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text)),
            "a string or a list of strings",
            _bad_entry("text", text, lambda t: isinstance(t, str)),
        )
    if ids is not None:
        flat = isinstance(ids, list) and all(_is_int(t) for t in ids)
        nested = isinstance(ids, list) and all(
            isinstance(r, list) and all(_is_int(t) for t in r) for r in ids
        )
        _check_type(
            "input_ids",
            ids,
            flat or nested,
            "a list of integers or a list of lists of integers",
            _bad_id_entry(ids),
        )
        if nested and ids and any(len(r) == 0 for r in ids):
            empty = next(i for i, r in enumerate(ids) if len(r) == 0)
            raise RequestError(
                f"input_ids: every prompt must contain at least one token (input_ids[{empty}] is empty)."
            )
    sp = body.get("sampling_params")
    if sp is not None:
        _check_type(
            "sampling_params",
            sp,
            isinstance(sp, dict) or (isinstance(sp, list) and all(isinstance(p, dict) for p in sp)),
            "an object or a list of objects",
        )
        sp = check_sampling_keys(sp) if isinstance(sp, dict) else [check_sampling_keys(p) for p in sp]
    rid = body.get("rid")
    if rid is not None:
        _check_type(
            "rid",
            rid,
            isinstance(rid, str) or (isinstance(rid, list) and all(isinstance(r, str) for r in rid)),
            "a string or a list of strings",
        )

    def scalar_or_list(name: str, pred: Any, expected: str) -> Any:
        v = body.get(name)
        if v is None:
            return None
        _check_type(name, v, pred(v) or (isinstance(v, list) and all(pred(x) for x in v)), expected)
        return v

    return_logprob = scalar_or_list("return_logprob", lambda v: isinstance(v, bool), "a boolean")
    lsl = scalar_or_list("logprob_start_len", _is_int, "an integer")
    tln = scalar_or_list("top_logprobs_num", _is_int, "an integer")
    prio = scalar_or_list("priority", _is_int, "an integer")
    extra_key = scalar_or_list("extra_key", lambda v: isinstance(v, str), "a string")
    salt = body.get("cache_salt")
    if salt is not None:
        _check_type("cache_salt", salt, isinstance(salt, str), "a string")
    if salt or extra_key:  # the namespace of cache_salt and extra_key (a tagged pair when both)
        extra_key = (
            [join_cache_namespace(salt, k) or "" for k in extra_key]
            if isinstance(extra_key, list)
            else join_cache_namespace(salt, extra_key)
        )
    tids = body.get("token_ids_logprob")
    if tids is not None:

        def int_list(v: Any) -> bool:
            return isinstance(v, list) and all(_is_int(x) for x in v)

        _check_type(
            "token_ids_logprob",
            tids,
            int_list(tids) or (isinstance(tids, list) and all(x is None or int_list(x) for x in tids)),
            "a list of token ids (one list, or null for none, per prompt in a batch)",
        )
    for name in ("return_text_in_logprobs", "stream", "log_metrics", "require_reasoning"):
        v = body.get(name)
        if v is not None:
            _check_type(name, v, isinstance(v, bool), "a boolean")
    return GenerateReqInput(
        text=text,
        input_ids=ids,
        sampling_params=sp,
        rid=rid,
        return_logprob=return_logprob,
        logprob_start_len=lsl,
        top_logprobs_num=tln,
        token_ids_logprob=tids,
        return_text_in_logprobs=bool(body.get("return_text_in_logprobs") or False),
        stream=bool(body.get("stream") or False),
        log_metrics=body.get("log_metrics") is not False,
        priority=prio,
        extra_key=extra_key,
        require_reasoning=bool(body.get("require_reasoning") or False),
    )
