"""The SGLang sampling parameters of an OpenAI completions or chat request: the grammar fields
(OpenAI's ``response_format``, SGLang's ``json_schema`` / ``regex`` / ``ebnf``, vLLM's ``guided_*``,
the chat route's tool-call ``structural_tag``), the sampling fields under SGLang's names, the chat
defaults of ``--sampling-defaults``, and their validation by :class:`SamplingParams` with the
error naming the field the client sent.

Field mapping follows SGLang 0.5.x ``srt/entrypoints/openai/serving_{completions,chat}.py``
(read, not copied). Used by :class:`~.serving_base.OpenAIServingBase`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest, CompletionRequest
from sglang_v4.entrypoints.openai.request_errors import (
    _OPENAI_NAME,
    GRAMMAR_FIELDS,
    RequestError,
    _check_openai_ranges,
    _param_of,
)
from sglang_v4.entrypoints.openai.vllm_fields import (
    vllm_grammar,
    vllm_grammar_path,
    vocabulary_constraints,
)
from sglang_v4.sampling.sampling_params import GRAMMAR_UNAVAILABLE_MSG, TOP_K_ALL, SamplingParams

__all__ = [
    "RANDOM_SEED",
    "build_sampling_params",
    "response_format_grammar",
    "sent_nulls",
    "unset_preferred_keys",
]

#: The ``seed`` that asks for an unseeded (random) draw, as vLLM reads OpenAI's field
#: (vllm-project/vllm#4531, llama.cpp's server too): ``-1`` is sent by clients that cannot leave the
#: field out. Any other value seeds the request (SGLang's ``sampling_seed``; ``/generate`` keeps -1
#: as a seed of its own).
RANDOM_SEED = -1


def response_format_grammar(rf: dict[str, Any] | None) -> dict[str, str]:
    """The grammar field of an OpenAI ``response_format``: ``{}`` (text), ``{"json_schema": ...}``
    (``json_object``: any JSON object; ``json_schema``: its ``schema``, any JSON value without
    one), ``{"regex": ...}`` (DeepSeek's ``{"type": "regex", "regex": R}``, which its request
    converter reads as a regex constraint on the answer) or ``{"structural_tag": ...}``
    (SGLang's extension).

    Raises:
        RequestError: an unknown type, a malformed ``json_schema`` or a non-string ``regex`` (400, param
            ``response_format``).
    """
    if not rf:
        return {}
    rtype = rf.get("type")
    if rtype in (None, "text"):
        return {}
    if rtype == "json_object":
        return {"json_schema": '{"type": "object"}'}
    if rtype == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not js:
            raise RequestError(
                "response_format.json_schema must be provided, an object with a `name` and a `schema`.",
                param="response_format",
            )
        name = js.get("name")
        if not isinstance(name, str) or not name:
            raise RequestError(
                "response_format.json_schema.name must be a non-empty string.", param="response_format"
            )
        schema = js.get("schema", {})
        if not isinstance(schema, (dict, bool)):
            raise RequestError(
                "response_format.json_schema.schema must be an object.", param="response_format"
            )
        if js.get("strict") is not None and not isinstance(js["strict"], bool):
            raise RequestError(
                "response_format.json_schema.strict must be a boolean.", param="response_format"
            )
        return {"json_schema": json.dumps(schema)}
    if rtype == "regex":  # DeepSeek's format: the answer matches ``regex`` (no prompt section)
        regex = rf.get("regex")
        if not isinstance(regex, str):
            raise RequestError(
                "response_format.regex must be a string (the regular expression the answer matches).",
                param="response_format",
            )
        return {"regex": regex}
    if rtype == "structural_tag":
        return {"structural_tag": json.dumps(rf)}
    raise RequestError(f"response_format.type {rtype!r} is not supported.", param="response_format")


#: Sampling-parameter names whose request fields are spelled otherwise (each one's OpenAI /
#: vLLM fields); any other name is its own request field.
_REQUEST_FIELDS: dict[str, tuple[str, ...]] = {
    "max_new_tokens": ("max_tokens", "max_completion_tokens"),
    "min_new_tokens": ("min_tokens",),
    "no_stop_trim": ("no_stop_trim", "include_stop_str_in_output"),
    "sampling_seed": ("seed",),
}


def sent_nulls(req: BaseModel, fields: Mapping[str, str]) -> dict[str, None]:
    """The explicit ``null`` sampling fields of a request that another protocol's route (Responses,
    Anthropic Messages) converts into a chat request: ``{chat_field: None}`` for each of its
    ``fields`` (``{its field: the chat request's field}``) that the client sent as ``null``
    (pydantic's ``model_fields_set``). Kept in the chat request's body, they count as sent, so
    that, as on the chat route, the request's ``null`` wins over ``--preferred-sampling-params``
    (:func:`unset_preferred_keys`) and takes the protocol's default; a field the client left out
    stays out of the body and takes the preferred value."""
    sent = req.model_fields_set
    return {chat: None for name, chat in fields.items() if name in sent and getattr(req, name, None) is None}


def unset_preferred_keys(
    req: CompletionRequest | ChatCompletionRequest,
    preferred: dict[str, Any] | None,
    chat_defaults: dict[str, Any],
) -> list[str]:
    """The keys of ``preferred`` (``--preferred-sampling-params``) that ``req`` leaves to it: none
    of the key's request fields was sent (pydantic's ``model_fields_set``; an explicit ``null``
    counts as sent) and, on a chat request, ``chat_defaults`` does not give the key."""
    if not preferred:
        return []
    sent = req.model_fields_set
    chat = isinstance(req, ChatCompletionRequest)
    return [
        key
        for key in preferred
        if not any(f in sent for f in _REQUEST_FIELDS.get(key, (key,)))
        and not (chat and chat_defaults.get(key) is not None)
    ]


def _default_of(name: str) -> Any:
    """The default of :class:`SamplingParams` field ``name`` (SGLang's, the protocols' too)."""
    f = next(f for f in dataclasses.fields(SamplingParams) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def build_sampling_params(
    req: CompletionRequest | ChatCompletionRequest,
    max_new_tokens: int | None,
    structural_tag: str | None = None,
    *,
    tokenizer: Any,
    vocab_size: int | None,
    grammar_enabled: bool,
    chat_defaults: dict[str, Any],
    preferred: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """SGLang sampling parameters of a request, validated (400 naming the field on error).

    ``structural_tag`` is the tool-call grammar of a chat request (exclusive with the other
    grammar fields). ``top_k: 0`` means the whole vocabulary, as vLLM reads it ("Set to 0 (or
    -1) to consider all tokens"; SGLang's ``/generate`` refuses 0), also when it comes from the
    model's ``generation_config.json``.

    Args:
        req: the parsed completions or chat request.
        max_new_tokens: the output budget in tokens (``None``: what the context leaves).
        structural_tag: the chat route's tool-call grammar (JSON text), if any.
        tokenizer: the server's tokenizer (vLLM's ``bad_words`` are tokenized with it), or ``None``.
        vocab_size: the model's vocabulary size (token-id bounds), or ``None`` if unknown.
        grammar_enabled: whether the scheduler has a grammar backend (constrained decoding
            available); a grammar is refused otherwise.
        chat_defaults: the sampling defaults of a chat request (``--sampling-defaults``), applied
            to the keys the request leaves unset; ignored for a completions request.
        preferred: the server's ``--preferred-sampling-params``. A key of it that the request
            leaves unset (and, on chat, that ``chat_defaults`` does not give) is left out of the
            result, protocol default included (``presence_penalty`` 0, a completion's
            ``max_tokens`` 16...), so that the tokenizer manager's ``{**preferred, **request}``
            merge applies it: the order is request, then ``chat_defaults``, then ``preferred``,
            then the protocol's defaults. A key the request sends as ``null`` is given its
            default explicitly, so that the request's ``null`` wins over ``preferred``.

    Returns:
        ``SamplingParams.from_dict`` keyword dict (SGLang names); unset fields left out, except
        ``max_new_tokens``.

    Raises:
        RequestError: 400 naming the request's field (``response_format``, ``tool_choice``,
            ``temperature``...), for conflicting grammars or any value ``SamplingParams`` refuses.
    """
    grammar = response_format_grammar(req.response_format)
    sglang_grammar = any(getattr(req, k, None) for k in ("json_schema", "regex", "ebnf"))
    if grammar and sglang_grammar:
        raise RequestError(
            "response_format cannot be combined with json_schema / regex / ebnf.", param="response_format"
        )
    # vLLM's guided_* / structured_outputs (vllm_fields.py): one more source of the same grammars
    guided, guided_field = vllm_grammar(req)
    if guided and (grammar or sglang_grammar):
        raise RequestError(
            f"{guided_field} cannot be combined with response_format / json_schema / regex / ebnf.",
            param=guided_field,
        )
    grammar_field = "response_format" if grammar else guided_field
    grammar = grammar or guided
    json_schema = grammar.get("json_schema", req.json_schema)
    if structural_tag is not None:
        if grammar or any(getattr(req, k, None) for k in ("json_schema", "regex", "ebnf")):
            raise RequestError(
                "a constrained tool call (tool_choice 'required' / a named function / a strict tool) "
                "cannot be combined with response_format / json_schema / regex / ebnf.",
                param="tool_choice",
            )
        grammar = {"structural_tag": structural_tag}
    d: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "min_new_tokens": req.min_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "min_p": req.min_p,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
        "repetition_penalty": req.repetition_penalty,
        "stop": req.stop,
        "stop_token_ids": req.stop_token_ids,
        "stop_regex": req.stop_regex,
        "n": req.n,
        "ignore_eos": req.ignore_eos,
        "skip_special_tokens": req.skip_special_tokens,
        "spaces_between_special_tokens": req.spaces_between_special_tokens,
        "no_stop_trim": req.no_stop_trim or req.include_stop_str_in_output,
        "logit_bias": req.logit_bias,
        "sampling_seed": None if req.seed == RANDOM_SEED else req.seed,
        "json_schema": json_schema,
        "structural_tag": grammar.get("structural_tag"),
        "regex": grammar.get("regex", req.regex),
        "ebnf": grammar.get("ebnf", req.ebnf),
        "custom_params": req.custom_params,
        # vLLM's reasoning bound: the scheduler forces </think> where the prompt opened the reasoning
        "thinking_token_budget": getattr(req, "thinking_token_budget", None),
        **vocabulary_constraints(req, tokenizer),  # vLLM's allowed_token_ids / bad_words
    }
    if isinstance(req, ChatCompletionRequest):  # --sampling-defaults (sampling_defaults.py)
        for key, value in chat_defaults.items():
            if d.get(key) is None:
                d[key] = value
    if d.get("top_k") == 0:  # vLLM's "0 (or -1): consider all tokens"; also a generation_config's 0
        d["top_k"] = TOP_K_ALL
    d = {k: v for k, v in d.items() if v is not None or k == "max_new_tokens"}
    unset = unset_preferred_keys(req, preferred, chat_defaults)
    for key in unset:
        d.pop(key, None)
    for key in preferred or {}:  # sent as null: the protocol's default wins over the preferred value
        if key not in d and key not in unset:
            d[key] = _default_of(key)
    _check_openai_ranges(req)
    # Validate now so that the client gets a 400 naming the field before anything is queued.
    try:
        sp = SamplingParams.from_dict(d)
        # Grammars are accepted only where the backend applies them (grammar_enabled).
        sp.verify(vocab_size, allow_grammar=grammar_enabled)
    except ValueError as e:
        msg = str(e)
        param = _param_of(msg)
        if param in _OPENAI_NAME:  # name the field the client sent
            msg, param = _OPENAI_NAME[param] + msg[len(param) :], _OPENAI_NAME[param]
        elif param in GRAMMAR_FIELDS and grammar_field is not None and getattr(req, param, None) is None:
            # the grammar came from response_format / guided_regex / structured_outputs: name it
            path = vllm_grammar_path(req) if grammar_field != "response_format" else None
            msg, param = (path or grammar_field) + msg[len(param) :], grammar_field
        if msg.startswith(GRAMMAR_UNAVAILABLE_MSG.split("(", 1)[0]):
            # a grammar on a server without xgrammar: name the field that asked for it (the
            # tool-call grammar comes from tool_choice / strict tools, json_schema from
            # response_format), not the internal grammar kind
            param = (
                "tool_choice"
                if structural_tag is not None
                else grammar_field
                if grammar_field is not None
                else next(k for k in GRAMMAR_FIELDS if d.get(k) is not None)
            )
            msg = GRAMMAR_UNAVAILABLE_MSG.format(field=param)
        raise RequestError(msg, param=param) from None
    return d
