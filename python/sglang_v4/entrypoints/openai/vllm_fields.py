"""vLLM's extra request fields (:mod:`.protocol_vllm`) mapped onto what the runtime does.

* refused with a 400 naming the field (:func:`check_vllm_fields`): the fields whose effect the
  runtime lacks and whose absence would change the output (beam search,
  ``logits_processors``, whitespace options of the JSON
  grammar, repetition-pattern stops, ``kv_transfer_params``, ``vllm_xargs``, ``prompt_embeds``,
  a per-request ``chat_template``) and invalid values of the honoured ones;
* the guided-decoding fields (``guided_json`` / ``guided_regex`` / ``guided_choice`` /
  ``guided_grammar`` / ``structural_tag``, and ``structured_outputs``) become the grammar fields of
  :class:`~sglang_v4.sampling.sampling_params.SamplingParams` (:func:`vllm_grammar`);
* ``allowed_token_ids`` and ``bad_words`` become the ``allowed_token_ids`` / ``bad_words_ids``
  fields of ``SamplingParams`` (:func:`vocabulary_constraints`;
  :mod:`sglang_v4.sampling.token_masks` applies them);
* ``truncate_prompt_tokens`` keeps the last N prompt tokens (:func:`truncation_length`);
* ``return_tokens_as_token_ids`` writes logprob tokens as ``token_id:<id>`` (:func:`token_id_text`);
* ``prompt_logprobs`` is checked and answered by :mod:`.prompt_logprobs`.

The table of every field is in ``docs/VLLM_FIELDS.md``.
"""

from __future__ import annotations

import json
from typing import Any

from sglang_v4.entrypoints.openai.request_errors import RequestError
from sglang_v4.managers.prefix_sharing import join_cache_namespace

__all__ = [
    "cache_namespace",
    "check_refused_fields",
    "check_vllm_fields",
    "special_token_edges",
    "stop_reason",
    "token_id_text",
    "truncation_length",
    "vocabulary_constraints",
    "vllm_grammar",
    "vllm_grammar_field",
    "vllm_grammar_path",
]

#: vLLM fields refused when set to anything but their "off" value, with the reason.
_REFUSED: dict[str, str] = {
    "use_beam_search": "beam search is not implemented",
    "logits_processors": "custom logits processors are not supported",
    "guided_whitespace_pattern": "the JSON grammar's whitespace pattern cannot be changed "
    "(--constrained-json-max-whitespace-cnt bounds it server-wide)",
    "max_repetition_pattern_size": "stopping on repetitive token patterns is not implemented",
    "min_repetition_pattern_size": "stopping on repetitive token patterns is not implemented",
    "repetition_min_count": "stopping on repetitive token patterns is not implemented",
    "kv_transfer_params": "disaggregated prefill/decode is not supported",
    "vllm_xargs": "no extension of this server reads vllm_xargs",
    "prompt_embeds": "prompt embeddings are not supported",
    "chat_template": "a per-request chat template is not accepted (start the server with "
    "--chat-template instead)",
}
#: ``structured_outputs`` options refused when set (same reasons as the whitespace pattern).
_REFUSED_OPTIONS = ("disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")
#: vLLM's top-level guided-decoding fields and the grammar kind each becomes.
_GUIDED = {
    "guided_json": "json_schema",
    "guided_regex": "regex",
    "guided_choice": "ebnf",
    "guided_grammar": "ebnf",
    "structural_tag": "structural_tag",
}


def _is_set(value: Any) -> bool:
    """A refused field counts as set unless it is its "off" value (None, false, 0, empty)."""
    return value is not None and value is not False and value != 0 and value != [] and value != {}


def cache_namespace(req: Any) -> str | None:
    """The prefix-cache namespace of a chat / completions request
    (:attr:`~sglang_v4.managers.io_struct.GenerateReqInput.extra_key`): vLLM's ``cache_salt``
    and SGLang's ``extra_key`` joined by
    :func:`~sglang_v4.managers.prefix_sharing.join_cache_namespace` (a tagged pair, so no two
    different pairs alias); None when neither is set. Requests of different namespaces share no
    cached prompt block (vLLM: the salt enters the first block's hash), requests of one namespace
    share them."""
    return join_cache_namespace(getattr(req, "cache_salt", None), getattr(req, "extra_key", None))


def check_refused_fields(data: dict[str, Any], fields: Any) -> None:
    """Refuse the refused vLLM fields (:data:`_REFUSED`) set in a raw request body, before it is
    validated: such a field can stand in for a required one (``prompt_embeds`` for ``prompt``), so
    the schema error of the missing one would hide the real reason.

    Args:
        data: the decoded JSON body.
        fields: the field names of the request class (its ``model_fields``); others are skipped.

    Raises:
        RequestError: 400 naming the first refused field that is set, as :func:`check_vllm_fields`.
    """
    for name, why in _REFUSED.items():
        if name in fields and _is_set(data.get(name)):
            raise RequestError(f"{name} is not supported by sglang-v4: {why}.", param=name)


def check_vllm_fields(req: Any) -> None:
    """Refuse the vLLM fields of ``req`` (a parsed chat or completions request) that the runtime
    cannot honour, and invalid values of the ones it honours.

    Raises:
        RequestError: 400, ``param`` the field: a refused field that is set (:data:`_REFUSED`), a
            refused ``structured_outputs`` option, ``truncate_prompt_tokens`` below -1 or 0,
            ``best_of`` above ``n`` on the chat route, ``thinking_token_budget`` below -1 (vLLM's
            rule: -1 is unlimited), or more than one guided-decoding constraint
            (:func:`vllm_grammar`).
    """
    for name, why in _REFUSED.items():
        value = getattr(req, name, None)
        if _is_set(value):
            raise RequestError(f"{name} is not supported by sglang-v4: {why}.", param=name)
    so = getattr(req, "structured_outputs", None)
    for option in _REFUSED_OPTIONS if so is not None else ():
        if _is_set(getattr(so, option)):
            raise RequestError(
                f"structured_outputs.{option} is not supported by sglang-v4: {_REFUSED['guided_whitespace_pattern']}.",
                param="structured_outputs",
            )
    if getattr(req, "cache_salt", None) == "":
        raise RequestError(
            "Parameter 'cache_salt' must be a non-empty string if provided.", param="cache_salt"
        )
    t = getattr(req, "truncate_prompt_tokens", None)
    if t is not None and t < 1 and t != -1:
        raise RequestError(
            f"truncate_prompt_tokens must be -1 or at least 1, got {t}.", param="truncate_prompt_tokens"
        )
    budget = getattr(req, "thinking_token_budget", None)
    if budget is not None and budget < -1:
        raise RequestError(
            f"thinking_token_budget must be -1 (unlimited) or at least 0, got {budget}.",
            param="thinking_token_budget",
        )
    best_of, n = getattr(req, "best_of", None), getattr(req, "n", None) or 1
    if best_of is not None and best_of > n and hasattr(req, "messages"):
        raise RequestError(
            "best_of greater than n is not supported on /v1/chat/completions.", param="best_of"
        )
    vllm_grammar(req)  # at most one constraint


def vocabulary_constraints(req: Any, tokenizer: Any) -> dict[str, Any]:
    """vLLM's ``allowed_token_ids`` and ``bad_words`` of ``req`` as ``SamplingParams`` fields:
    ``{"allowed_token_ids": [ids], "bad_words_ids": [[ids], ...]}`` with the unset ones left out
    (``bad_words: []`` is unset; ``allowed_token_ids: []`` is passed on, for the 400 of
    ``SamplingParams``: it would allow nothing). The bad words are tokenized with ``tokenizer`` by vLLM's rule
    (:func:`~sglang_v4.sampling.token_masks.bad_word_token_ids`); their range and the allowlist
    are checked with the other sampling parameters (``SamplingParams.verify``).

    Raises:
        RequestError: a bad word that is ``""`` or not a string (400 naming ``bad_words``), or
            bad words on a server without a tokenizer.
    """
    from sglang_v4.sampling.token_masks import bad_word_token_ids

    out: dict[str, Any] = {}
    allowed = getattr(req, "allowed_token_ids", None)
    if allowed is not None:
        out["allowed_token_ids"] = list(allowed)
    words = getattr(req, "bad_words", None)
    if words:
        if tokenizer is None:
            raise RequestError(
                "bad_words needs the tokenizer, which this server does not load.", param="bad_words"
            )
        try:
            out["bad_words_ids"] = bad_word_token_ids(tokenizer, words)
        except ValueError as e:
            raise RequestError(str(e), param="bad_words") from None
    return out


def _choice_ebnf(choices: list[str], field: str = "guided_choice") -> str:
    """An EBNF grammar (xgrammar's dialect) whose language is exactly ``choices``: the
    alternation of their string literals, escaped as JSON strings (the escapes xgrammar's EBNF
    reads: ``\\"``, ``\\\\``, ``\\n``, ``\\uXXXX``).

    Args:
        choices: the strings.
        field: the request path they came from (``guided_choice`` or
            ``structured_outputs.choice``): what an error names (``param`` is its top-level field).

    Raises:
        RequestError: an empty list or an empty choice (400 naming ``field``).
    """
    if not choices or any(c == "" for c in choices):
        raise RequestError(
            f"{field} must be a non-empty list of non-empty strings.", param=field.split(".")[0]
        )
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def _schema_text(schema: str | dict[str, Any], field: str) -> str:
    """A JSON schema given as an object or as JSON text, as JSON text.

    Args:
        schema: the schema.
        field: the request path it came from (``guided_json``, ``structured_outputs.json``): what
            an error names (``param`` is its top-level field).

    Raises:
        RequestError: a text that is not JSON (400 naming ``field``).
    """
    if isinstance(schema, dict):
        return json.dumps(schema)
    try:
        json.loads(schema)
    except ValueError as e:
        raise RequestError(f"{field} is not valid JSON: {e}", param=field.split(".")[0]) from None
    return schema


def _constraints(req: Any) -> list[tuple[str, str, Any]]:
    """``req``'s vLLM guided-decoding constraints, in field order: ``(field, kind, value)`` with
    ``field`` the request field (``structured_outputs.<key>`` for its keys) and ``kind`` the
    ``SamplingParams`` grammar field it becomes."""
    found: list[tuple[str, str, Any]] = []
    for name, kind in _GUIDED.items():
        value = getattr(req, name, None)
        if value is not None:
            found.append((name, kind, value))
    so = getattr(req, "structured_outputs", None)
    if so is not None:
        for key, kind in (
            ("json_schema", "json_schema"),
            ("regex", "regex"),
            ("choice", "ebnf"),
            ("grammar", "ebnf"),
            ("structural_tag", "structural_tag"),
        ):
            value = getattr(so, key)
            if value is not None:
                found.append((f"structured_outputs.{'json' if key == 'json_schema' else key}", kind, value))
        if so.json_object:
            found.append(("structured_outputs.json_object", "json_schema", '{"type": "object"}'))
    return found


def vllm_grammar(req: Any) -> tuple[dict[str, str], str | None]:
    """The grammar of ``req``'s vLLM guided-decoding fields: ``({kind: spec}, field)`` with
    ``kind`` one of ``json_schema`` / ``regex`` / ``ebnf`` / ``structural_tag`` (the
    ``SamplingParams`` grammar fields) and ``field`` the request field it came from (what an
    error about it names); ``({}, None)`` without one.

    ``guided_json`` / ``structured_outputs.json``: the schema; ``json_object``: any JSON object
    (as ``response_format: {"type": "json_object"}``); ``guided_choice`` / ``choice``: an EBNF
    grammar of exactly those strings; ``guided_grammar`` / ``grammar``: EBNF as given;
    ``structural_tag``: the JSON text as given.

    Raises:
        RequestError: more than one constraint (400 naming the second), a malformed one (400
            naming its request path, e.g. ``structured_outputs.choice``), or a
            ``structured_outputs`` object that sets none (``{}``, ``{"json_object": false}``: vLLM
            refuses it too, as it names no constraint).
    """
    found = _constraints(req)
    so = getattr(req, "structured_outputs", None)
    if so is not None and not any(f.startswith("structured_outputs.") for f, _, _ in found):
        raise RequestError(
            "structured_outputs must set one constraint (json, regex, choice, grammar, "
            "json_object: true or structural_tag); leave it unset for unconstrained output.",
            param="structured_outputs",
        )
    if len(found) > 1:
        names = ", ".join(f for f, _, _ in found)
        raise RequestError(
            f"only one guided-decoding constraint can be given; got {names}.",
            param=found[1][0].split(".")[0],
        )
    if not found:
        return {}, None
    field, kind, value = found[0]
    param = field.split(".")[0]
    if field.endswith("choice"):
        return {kind: _choice_ebnf(value, field)}, param
    if kind == "json_schema":
        return {kind: _schema_text(value, field)}, param
    return {kind: value}, param


def vllm_grammar_path(req: Any) -> str | None:
    """The full request path of ``req``'s (first) vLLM guided-decoding constraint
    (``guided_regex``, ``structured_outputs.regex``), or None: what a message about its value
    names (``param`` is its top-level field, :func:`vllm_grammar_field`)."""
    found = _constraints(req)
    return found[0][0] if found else None


def vllm_grammar_field(req: Any) -> str | None:
    """The request field of ``req``'s (first) vLLM guided-decoding constraint, or None
    (:func:`vllm_grammar` without its checks)."""
    found = _constraints(req)
    return found[0][0].split(".")[0] if found else None


def truncation_length(truncate: int, context_len: int | None) -> int | None:
    """How many prompt tokens ``truncate_prompt_tokens`` keeps (the last ones, vLLM's left
    truncation), as vLLM's ``_validate_truncation_size`` reads it: ``truncate`` itself, or for -1
    the model's context length (``max_model_len``); None when -1 is given and the context length
    is unknown (nothing is cut). The kept prompt still needs room for the completion: a prompt
    that fills the context is then refused as any too-long prompt (400), as in vLLM.

    Raises:
        RequestError: 400 naming ``truncate_prompt_tokens`` when it is above the context length
            (vLLM's rule).
    """
    if truncate == -1:
        return context_len
    if context_len is not None and truncate > context_len:
        raise RequestError(
            f"truncate_prompt_tokens value ({truncate}) is greater than the context length ({context_len}); "
            "select a smaller truncation size.",
            param="truncate_prompt_tokens",
        )
    return truncate


def truncate_prompt_ids(
    ids: list[int], truncate: int, side: str | None, context_len: int | None
) -> list[int]:
    """``ids`` cut to what ``truncate_prompt_tokens`` keeps (:func:`truncation_length` tokens):
    the last ones for ``truncation_side`` ``"left"`` or unset (vLLM's default), the first ones for
    ``"right"`` (vLLM's ``truncation_side`` field); ``ids`` itself when it is no longer than that.

    Raises:
        RequestError: 400 naming ``truncate_prompt_tokens`` as :func:`truncation_length` does.
    """
    keep = truncation_length(truncate, context_len)
    if keep is None or len(ids) <= keep:
        return ids
    return ids[:keep] if side == "right" else ids[len(ids) - keep :]


def token_id_text(token_id: int) -> str:
    """A logprob token written as vLLM's ``return_tokens_as_token_ids`` writes it: ``token_id:<id>``."""
    return f"token_id:{token_id}"


def stop_reason(
    finish_reason: str | None, matched: Any, stop_token_ids: list[int] | None
) -> int | str | None:
    """vLLM's ``stop_reason`` of a choice: what ended a ``"stop"`` finish when the request named
    it -- the matched stop string, or the token id when it is one of the request's
    ``stop_token_ids``; ``None`` for an EOS finish, a length finish or a running choice (vLLM
    #2976's rule: EOS is ``finish_reason == "stop"`` with ``stop_reason`` null). A chat finish
    reported as ``"tool_calls"`` keeps the stop that ended the generation.

    Args:
        finish_reason: the choice's OpenAI ``finish_reason`` (``"stop"``, ``"tool_calls"``,
            ``"length"``, ...).
        matched: SGLang's ``matched_stop`` (a stop string, a token id, or None).
        stop_token_ids: the request's ``stop_token_ids`` (None or a list of ids).
    """
    if finish_reason not in ("stop", "tool_calls") or matched is None:
        return None
    if isinstance(matched, str):
        return matched
    return matched if matched in (stop_token_ids or ()) else None


def special_token_edges(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer adds around a text when asked to (``add_special_tokens``):
    ``(before, after)`` token ids, e.g. ``([BOS], [])`` for DeepSeek's tokenizer; found by encoding a
    probe text with and without them."""
    probe = "a"
    plain = list(getattr(e := tokenizer.encode(probe, add_special_tokens=False), "ids", e))
    full = list(getattr(f := tokenizer.encode(probe, add_special_tokens=True), "ids", f))
    for i in range(len(full) - len(plain) + 1):
        if full[i : i + len(plain)] == plain:
            return full[:i], full[i + len(plain) :]
    return [], []
