"""Request errors and request validation of the OpenAI-compatible routes: :class:`RequestError`
(an error that becomes an HTTP response), the error response, strict JSON body decoding and
pydantic validation, the OpenAI-only field checks and the field name of an error's ``param``.

Errors use SGLang's body ``{"object": "error", "message", "type", "param", "code"}`` plus OpenAI's
nested ``error`` (:func:`~.protocol.error_body`); a 400 names the offending field in ``param``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from sglang_v4.entrypoints.openai.protocol import (
    UNSUPPORTED_OPENAI_FIELDS,
    auth_challenge_headers,
    error_body,
    error_type_for_status,
)

__all__ = [
    "GRAMMAR_FIELDS",
    "LoneSurrogateError",
    "OPENAI_MAX_TEMPERATURE",
    "RequestError",
    "check_token_ids_in_vocab",
    "check_user_message_contents",
    "error_response",
    "grammar_error_for",
    "name_grammar_tool",
    "read_json_object",
    "validate_request",
]


class RequestError(Exception):
    """An error that becomes an HTTP error response (status, error type, param); the type
    defaults to the status's (:func:`~.protocol.error_type_for_status`).

    ``batch_index``: where the tokenizer manager refused one prompt, its index in the request's
    prompts (:class:`sglang_v4.managers.tokenization.RequestError`), else None.
    """

    batch_index: int | None = None

    def __init__(
        self, message: str, status: int = 400, err_type: str | None = None, param: str | None = None
    ):
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type or error_type_for_status(status)
        self.param = param


def error_response(
    message: str, status: int = 400, err_type: str | None = None, param: str | None = None
) -> JSONResponse:
    """The error body (:func:`~.protocol.error_body`: SGLang's flat shape plus OpenAI's nested
    ``error``) with HTTP ``status``; a 401 carries ``WWW-Authenticate``
    (:func:`~.protocol.auth_challenge_headers`)."""
    return JSONResponse(
        error_body(message, status, err_type, param),
        status_code=status,
        headers=auth_challenge_headers(status),
    )


#: A JSON integer literal of 19+ digits: orjson decodes exactly only the signed and unsigned 64-bit
#: ranges, and a 19-digit negative one can lie below -2**63.
_LONG_INT = re.compile(rb"\d{19,}")


def loads_json_body(raw: bytes) -> Any:
    """``raw`` decoded as JSON (orjson), with integers past the 64-bit range kept exact.

    orjson decodes such an integer as a float (``99999999999999999999999`` -> ``1e+23``,
    ``-9223372036854775809`` -> ``-2**63``), and a range error then quoted the rounded value or, where
    the rounded value is in range, none was raised; a body holding 19+ consecutive digits is decoded
    again by the standard library, whose integers are exact (RFC 8259 leaves the range to the
    parser). Raises ``orjson.JSONDecodeError`` (a ``ValueError``) for text that is not JSON, and
    for bytes that are not UTF-8 (RFC 8259 section 8.1) one whose message says so and gives the
    first bad byte's offset (:func:`_not_utf8_error`; orjson's own message spoke of
    "surrogates not allowed", a detail of Python's codec). A ``\\uXXXX`` escape of a lone UTF-16
    surrogate (RFC 8259 section 8.2: not a Unicode character) raises :class:`LoneSurrogateError`,
    naming the field that holds it (:func:`_lone_surrogate_error`).
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise _not_utf8_error(raw) or _lone_surrogate_error(raw, e) or e from None
    if _LONG_INT.search(raw):
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            pass  # orjson's reading stands
    return data


def _not_utf8_error(raw: bytes | bytearray | memoryview) -> orjson.JSONDecodeError | None:
    """The decode error of a body that is not valid UTF-8, or None when it is valid UTF-8.

    Its message names the first byte that breaks the encoding, by value and 0-based byte offset;
    ``doc`` / ``pos`` are the body with each bad sequence read as U+FFFD and the character index
    of that byte, so the line and column the error adds point at it.
    """
    data = bytes(raw)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        head = data[: e.start].decode("utf-8")
        message = (
            f"the request body is not valid UTF-8 (byte 0x{data[e.start]:02x} at byte offset "
            f"{e.start}); JSON text must be encoded as UTF-8"
        )
        return orjson.JSONDecodeError(message, data.decode("utf-8", "replace"), len(head))
    return None


class LoneSurrogateError(orjson.JSONDecodeError):
    """A JSON body whose ``\\uXXXX`` escapes spell a lone UTF-16 surrogate (U+D800 to U+DFFF
    without its pair); ``param`` is the dotted path of the string or key holding it
    (``messages.0.content``; a key with a surrogate is spelled with its ``\\uXXXX`` escape), ``""``
    for a top-level string."""

    param: str = ""


def _surrogate_path(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The path of the first string or object key in ``value`` holding a surrogate code point."""
    if isinstance(value, str):
        return path if any("\ud800" <= c <= "\udfff" for c in value) else None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _surrogate_path(k, (*path, k)) or _surrogate_path(v, (*path, str(k)))
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = _surrogate_path(v, (*path, str(i)))
            if found is not None:
                return found
    return None


def _lone_surrogate_error(
    raw: bytes | bytearray | memoryview, e: orjson.JSONDecodeError
) -> LoneSurrogateError | None:
    """The error of a UTF-8 body that is JSON but for a lone-surrogate escape, else None.

    The standard library decodes such an escape to the surrogate itself; the error names the
    field it sits in and keeps orjson's position (the escape) for its line and column.
    """
    try:
        path = _surrogate_path(json.loads(bytes(raw)))
    except (ValueError, RecursionError):
        return None
    if path is None:
        return None
    # a key holding the surrogate is named by its escape (the error body must be UTF-8 itself)
    param = ".".join(k.encode("utf-8", "backslashreplace").decode("utf-8") for k in path)
    err = LoneSurrogateError(
        f"{param or 'the body'}: a \\u escape spells a lone UTF-16 surrogate, which is not a Unicode "
        "character (RFC 8259 section 8.2); escape characters above U+FFFF as a surrogate pair",
        e.doc,
        e.pos,
    )
    err.param = param
    return err


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body decoded as strict JSON (orjson) that must be an object.

    Raises:
        RequestError: the body is not valid JSON, or is empty or not a JSON object (a 400).
    """
    body = await request.body()
    try:
        data = loads_json_body(body) if body else None
    except orjson.JSONDecodeError as e:
        raise RequestError(f"Invalid JSON body: {e}", param=getattr(e, "param", None) or None) from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object.")
    return data


def _set_at(data: Any, loc: tuple[Any, ...], value: Any) -> bool:
    """Set ``data[loc[0]][loc[1]]...`` to ``value`` in place; False where ``loc`` is not a path
    of plain keys and indexes in ``data`` (pydantic adds union-branch names to some paths)."""
    for i, key in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(data, dict) and isinstance(key, str) and key in data:
            if last:
                data[key] = value
                return True
            data = data[key]
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            if last:
                data[key] = value
                return True
            data = data[key]
        else:
            return False
    return False


def _lax_numbers(data: dict[str, Any], err: ValidationError) -> dict[str, Any] | None:
    """``data`` with the numbers that SGLang's and vLLM's (lax) validation read unambiguously
    put in the field's type: an integer 0 / 1 for a boolean (``"logprobs": 1``) and an integral
    float for an integer (``"max_tokens": 256.0``); None when no error is of those kinds. Strings
    and booleans are never turned into numbers (``"0.5"``, ``true`` for a temperature stay a 400)."""
    fixed: dict[str, Any] | None = None
    for e in err.errors():
        x, kind = e.get("input"), e.get("type")
        if kind == "bool_type" and type(x) is int and x in (0, 1):
            value: Any = bool(x)
        elif kind == "int_type" and type(x) is float and x.is_integer():
            value = int(x)
        else:
            continue
        fixed = fixed if fixed is not None else orjson.loads(orjson.dumps(data))
        if not _set_at(fixed, tuple(e.get("loc", ())), value):
            return None
    return fixed


def validate_request(cls: type[BaseModel], data: dict[str, Any]) -> Any:
    """``data`` validated as ``cls`` in pydantic's strict mode, except that an integer 0 / 1 is
    read as a boolean and an integral float as an integer, as SGLang and vLLM read them
    (:func:`_lax_numbers`).

    Raises:
        RequestError: 400 ``"Invalid request: <field>: <why>"`` (up to five fields), ``param`` the
            first failing field, dotted (``messages.0.role``).
    """
    try:
        try:
            return cls.model_validate(data, strict=True)
        except ValidationError as e:
            fixed = _lax_numbers(data, e)
            if fixed is None:
                raise
            return cls.model_validate(fixed, strict=True)
    except ValidationError as e:
        errs = e.errors()
        first = errs[0] if errs else {}
        loc = _field_path(first.get("loc", ()))
        msg = "; ".join(f"{_field_path(er.get('loc', ()))}: {er.get('msg')}" for er in errs[:5])
        raise RequestError(f"Invalid request: {msg}", param=loc or None) from None


#: OpenAI's documented bounds that are tighter than SGLang's native ones (the rest -- top_p in (0, 1],
#: penalties in [-2, 2], n >= 1, max_tokens >= 0, logit_bias in [-100, 100] and valid token ids --
#: are checked by ``SamplingParams.verify`` for both APIs).
OPENAI_MAX_TEMPERATURE = 2.0

#: SGLang sampling-parameter names whose OpenAI request field is named differently.
_OPENAI_NAME = {
    "min_new_tokens": "min_tokens",
    "max_new_tokens": "max_tokens",
    "sampling_seed": "seed",
    "bad_words_ids": "bad_words",
}


def _check_openai_ranges(req: Any) -> None:
    """OpenAI-only ranges: ``temperature`` in [0, 2]. ``stop`` takes up to
    :data:`~sglang_v4.sampling.sampling_params.MAX_STOP_COUNT` strings on both APIs: OpenAI documents
    at most 4, but SGLang and vLLM accept longer lists and their clients send them.

    Raises:
        RequestError: 400 naming the field (``param``).
    """
    t = req.temperature
    if t is not None and not 0.0 <= t <= OPENAI_MAX_TEMPERATURE:
        raise RequestError(
            f"temperature must be in [0, {OPENAI_MAX_TEMPERATURE:g}], got {t}.", param="temperature"
        )


def _check_unsupported(req: Any, dp_rank_from_header: bool = False) -> None:
    """SGLang request fields of features sglang-v4 lacks (LoRA, hidden states, disaggregation...,
    :data:`~.protocol.UNSUPPORTED_OPENAI_FIELDS`) are a 400 naming the field when set, as
    ``/generate`` answers them: served without them, the output would silently differ from what
    was asked. ``null`` / ``false`` (clients that send every field) pass. A data-parallel rank pin
    is checked as ``/generate`` checks it (rank 0 or a 400), unless the request's
    ``X-Data-Parallel-Rank`` header pinned it (``dp_rank_from_header``: the header overrides the
    body, as in SGLang).

    Raises:
        RequestError: 400, param the first such field.
    """
    for name in UNSUPPORTED_OPENAI_FIELDS:
        value = getattr(req, name, None)
        if value is not None and value is not False and value != [] and value != {}:
            raise RequestError(f"{name} is not supported by sglang-v4.", param=name)
    from sglang_v4.entrypoints.native_api import check_dp_rank  # native_api imports this package

    for name in () if dp_rank_from_header else ("data_parallel_rank", "routed_dp_rank"):
        try:
            check_dp_rank(name, getattr(req, name, None))
        except ValueError as e:
            raise RequestError(str(e), param=name) from None


def _check_stream_options(req: Any) -> None:
    """``stream_options`` is only valid on a streamed request, as in the OpenAI API (and vLLM):
    sent (not ``null``) with ``stream`` false or absent it is a 400 naming ``stream_options``,
    not silently ignored.

    Raises:
        RequestError: 400, param ``stream_options``.
    """
    if getattr(req, "stream_options", None) is not None and not getattr(req, "stream", False):
        raise RequestError("stream_options is only allowed when stream is true.", param="stream_options")


#: The chat roles whose ``content`` array OpenAI's schema requires to hold at least one part.
_MIN_ONE_PART_ROLES = ("system", "developer", "user", "tool", "latest_reminder")


def check_user_message_contents(messages: list[Any]) -> None:
    """Refuse a chat ``user`` message whose ``content`` is ``null`` or absent (400); it used to
    render as an empty user turn and generate from it.

    ``messages``: the request's parsed messages (``role``, ``content``; pydantic models, so an
    absent key is told from ``null`` by ``model_fields_set``). OpenAI's API reference requires a
    user message's ``content`` (a string or an array of content parts) and its API answers 400
    ``invalid_request_error``; SGLang's protocol (``ChatCompletionMessageUserParam``) refuses it
    too. Other roles are left alone: SGLang takes ``null`` on system / developer / tool messages
    and renders it as empty text on its DeepSeek-V4 path, and an assistant message may leave it
    out (OpenAI: required unless ``tool_calls`` is given).

    An empty array of content parts (``"content": []``) on a ``system``, ``developer``, ``user``,
    ``tool`` or ``latest_reminder`` message is refused too: OpenAI's API schema gives each of those arrays
    ``minItems: 1`` (openai/openai-python#1812) and its API answers 400 ``empty_array``; served,
    the message rendered as an empty turn. An assistant message may still send ``[]`` next to its
    ``tool_calls`` or reasoning (clients replay such turns).

    Raises:
        RequestError: 400, ``param`` ``messages[i].content`` of the first such message, with
            OpenAI's wording ("Invalid value for ... got null." / "Missing required parameter" /
            "empty array").
    """
    for i, m in enumerate(messages):
        role, content = getattr(m, "role", None), getattr(m, "content", None)
        field = f"messages[{i}].content"
        if isinstance(content, list) and not content and role in _MIN_ONE_PART_ROLES:
            raise RequestError(
                f"Invalid '{field}': empty array. Expected an array with minimum length 1, "
                "but got an empty array instead.",
                param=field,
            )
        if role != "user" or content is not None:
            continue
        if "content" in m.model_fields_set:
            message = (
                f"Invalid value for '{field}': expected a string or an array of content parts, got null."
            )
        else:
            message = f"Missing required parameter: '{field}'."
        raise RequestError(message, param=field)


#: ``SamplingParams`` grammar fields; an error about one is ``"<field>: invalid grammar: ..."``.
GRAMMAR_FIELDS = ("json_schema", "regex", "ebnf", "structural_tag")


#: Sampling fields a generation's 400 abort may start with (``"<field>: ..."``): the vocabulary
#: constraints that, with the request's grammar, left no token to generate.
_ABORT_FIELDS = ("allowed_token_ids", "bad_words_ids")


def check_token_ids_in_vocab(seqs: list[list[int]], batched: bool, vocab: int | None, field: str) -> None:
    """Refuse token ids a request sent outside the model's vocabulary, naming the request field.

    ``seqs``: the token-id lists of field ``field`` (``prompt``, ``input_ids``, ``tokens``), one per
    prompt; ``batched``: whether the client sent a list of lists (the message then gives both
    indices, ``prompt[1][0]``). Ids must lie in ``[0, vocab)`` (only ``>= 0`` when ``vocab`` is
    None). The engine would refuse them too, but its message speaks of ``input_ids`` and carries no
    ``param``; this check names what the client sent.

    Raises:
        RequestError: 400 ``"{field}[i][j] = ID is out of vocabulary (outside the vocabulary [0, V))."``
            (vLLM's words first; for a negative id also pydantic's ``"greater than or equal to
            0"``, which vLLM's schema answers), ``param=field``.
    """
    for i, seq in enumerate(seqs):
        if not seq or (min(seq) >= 0 and (vocab is None or max(seq) < vocab)):
            continue  # the common case in C-speed builtins; the loop below only names the bad id
        for j, tid in enumerate(seq):
            if tid < 0 or (vocab is not None and tid >= vocab):
                where = f"{field}[{i}][{j}]" if batched else f"{field}[{j}]"
                sign = "; token ids must be greater than or equal to 0" if tid < 0 else ""
                raise RequestError(
                    f"{where} = {tid} is out of vocabulary (outside the vocabulary [0, {vocab})){sign}.",
                    param=field,
                )


def grammar_error_for(e: RequestError, field: str | None) -> RequestError:
    """``e`` renamed to the request field its grammar was made from (``tools``, ``response_format``).

    A chat request's tool-call grammar is a ``structural_tag`` and a ``response_format`` becomes a
    ``json_schema``; the client sent neither name, so their errors name ``field`` instead (message
    prefix and ``param``). A 400 that starts with a vocabulary constraint (``allowed_token_ids``,
    ``bad_words_ids``: it and the grammar left nothing to generate) names the field as the client
    sent it (``bad_words``), with its ``param``. ``e`` is returned unchanged when ``field`` is None
    or it is not a grammar error.
    """
    kind, sep, rest = e.message.partition(": ")
    if e.status == 400 and sep and kind in _ABORT_FIELDS and e.param in (None, kind):
        name = _OPENAI_NAME.get(kind, kind)
        return RequestError(f"{name}: {rest}", e.status, e.err_type, name)
    if field is None or e.status != 400 or not sep or kind not in GRAMMAR_FIELDS:
        return e
    return RequestError(f"{field}: {rest}", e.status, e.err_type, field)


def name_grammar_tool(
    e: RequestError, grammar_tools: Sequence[tuple[int, str, Any]], where: str
) -> RequestError:
    """``e`` (a ``"tools: invalid grammar: ..."`` error, :func:`grammar_error_for`) with the tool
    whose ``parameters`` schema broke the tool-call grammar named after the prefix.

    The tool-call grammar holds every constrained tool's schema, and xgrammar's error about it
    (``Unsupported type "nope"``) does not say which tool it came from; each schema of
    ``grammar_tools`` is compiled alone to find it
    (:func:`~sglang_v4.sampling.structural_tag.first_unusable_tool_parameters`).

    Args:
        e: the request's error, returned unchanged unless it is a 400 grammar error of ``tools``.
        grammar_tools: ``(index in the request's tools, name, parameters)`` of the constrained tools
            (:attr:`~.chat_prepare.ChatPlan.grammar_tools`).
        where: the schema's field in the route's request shape, with ``{i}`` for the tool's index
            (``"tools[{i}].function.parameters"`` for chat).

    Returns:
        ``"tools: invalid grammar: tools[0].function.parameters (function `f`): ..."`` (the rest
        of ``e``'s message kept), same status and ``param``; ``e`` when no schema fails alone.
    """
    prefix = "tools: invalid grammar: "
    if e.status != 400 or not e.message.startswith(prefix) or not grammar_tools:
        return e
    from sglang_v4.sampling.structural_tag import first_unusable_tool_parameters

    found = first_unusable_tool_parameters([params for _, _, params in grammar_tools])
    if found is None:
        return e
    index, name = grammar_tools[found[0]][:2]
    site = f"{where.format(i=index)} (function `{name}`)"
    return RequestError(f"{prefix}{site}: {e.message[len(prefix) :]}", e.status, e.err_type, e.param)


#: Names pydantic puts in an error's ``loc`` for the member of a union that failed.
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "tuple", "literal"})


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """The request field of a validation error's ``loc``, dotted (``messages.0.content``).

    Pydantic adds the failing union member to ``loc`` (``content.str``,
    ``content.list[dict[str,any]]``, ``prompt.list[int]``); those are types, not fields the client
    sent, so they are left out of ``param`` and the message.
    """
    parts = [
        str(x) for x in loc if isinstance(x, int) or (str(x).isidentifier() and str(x) not in _UNION_TAGS)
    ]
    return ".".join(parts)


@functools.cache
def _single_word_fields() -> frozenset[str]:
    """The request fields whose names are one plain word (``model``, ``stop``, ``n``...): those of
    the OpenAI-compatible request models, of ``/generate`` (``GenerateReqInput``) and of its
    ``sampling_params``."""
    import dataclasses

    from sglang_v4.entrypoints.openai.protocol import (
        ChatCompletionRequest,
        CompletionRequest,
        DetokenizeRequest,
        TokenizeRequest,
    )
    from sglang_v4.entrypoints.openai.protocol_responses import ResponsesRequest
    from sglang_v4.entrypoints.openai.protocol_score import ScoringRequest
    from sglang_v4.managers.io_struct import GenerateReqInput
    from sglang_v4.sampling.sampling_params import SamplingParams

    names: set[str] = set()
    for model in (
        ChatCompletionRequest,
        CompletionRequest,
        ResponsesRequest,
        ScoringRequest,
        TokenizeRequest,
        DetokenizeRequest,
    ):
        names.update(model.model_fields)
    for dc in (GenerateReqInput, SamplingParams):
        names.update(f.name for f in dataclasses.fields(dc))
    return frozenset(n for n in names if n.isalpha())


def _param_of(message: str) -> str | None:
    """Best-effort field name at the start of a ValueError message (``"top_p must be ..."`` ->
    ``top_p``), for OpenAI's ``param`` ("the parameter related to the error", else ``null``). A
    head word that names no request field -- ``"the ..."``, ``"batch ..."``, ``"constrained
    decoding ..."`` -- is no parameter: ``None``."""
    head = message.split(" ", 1)[0].rstrip(":,.")
    if not (head and head.replace("_", "").replace(".", "").isalnum() and head[0].islower()):
        return None
    if "_" in head or "." in head or head in _single_word_fields():
        return head
    return None
