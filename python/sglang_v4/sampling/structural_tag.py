"""The structural tags handed to xgrammar, and what they share with the grammar backend.

A ``structural_tag`` is xgrammar's structural-tag JSON (``{"type": "structural_tag", "format":
{...}}``, or SGLang's older ``{"type": "structural_tag", "structures": [{"begin", "schema",
"end"}], "triggers": [...]}``, converted by :func:`structural_tag_object`). This module builds
the ones the OpenAI routes need: :func:`after_reasoning_structural_tag` (free reasoning, then a
``json_schema`` / ``regex`` / ``ebnf`` / ``structural_tag`` answer) and
:func:`tool_call_structural_tag` (a DeepSeek DSML tool-call block: the call names, the DSML tags,
and each argument value against its JSON schema, with xgrammar's built-in ``deepseek_v4`` format,
which follows DeepSeek's reference encoder). Every JSON schema in a tag goes through
:func:`~sglang_v4.sampling.json_schema_rewrite.normalize_json_schema` and gets the whitespace
bound :data:`MAX_JSON_WHITESPACE` (or ``--constrained-json-max-whitespace-cnt``). The grammar
backend (:mod:`sglang_v4.sampling.grammar`) compiles them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from sglang_v4.sampling.json_schema_rewrite import (
    MAX_SCHEMA_DEPTH,
    check_json_schema,
    check_schema_depth,
    normalize_json_schema,
)
from sglang_v4.sampling.json_schema_structured_values import enum_values_as_schemas
from sglang_v4.sampling.json_schema_support import check_enforceable_schema, merge_all_of
from sglang_v4.sampling.regex_dialect import translate_regex
from sglang_v4.sampling.sampling_params import check_structural_tag

__all__ = [
    "EMPTY_PARAMETERS",
    "MAX_JSON_WHITESPACE",
    "after_reasoning_structural_tag",
    "answer_or_tool_calls_structural_tag",
    "check_max_whitespace_cnt",
    "clean_grammar_error",
    "first_unusable_tool_parameters",
    "normalize_tag_schemas",
    "structural_tag_object",
    "tool_call_structural_tag",
]

#: Longest run of whitespace a JSON grammar (``json_schema``, tool-call arguments) allows between
#: tokens: enough for indented JSON, and it stops a model from spending its whole budget on
#: whitespace, the known failure of unbounded JSON grammars.
MAX_JSON_WHITESPACE = 16


def check_max_whitespace_cnt(n: int) -> int:
    """``n`` as a JSON grammar's whitespace bound (SGLang's ``--constrained-json-max-whitespace-cnt``).

    Raises:
        ValueError: ``n`` is not an integer >= 1 (xgrammar needs a positive bound).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"constrained_json_max_whitespace_cnt must be an integer >= 1, got {n!r}")
    return n


#: What xgrammar's C++ errors carry besides the message: a ``[hh:mm:ss]`` log stamp, the source
#: location (``/project/cpp/regex_converter.cc:94:``) and the failed check's expression.
_XGRAMMAR_NOISE = re.compile(
    r"\[\d{1,2}:\d{2}:\d{2}\]\s*"
    r"|(?:[\w.\-]*/)*[\w.\-]+\.(?:cc|cpp|h|hpp|cu|pyx|pxi|py):\d+:\s*"
    r"|Check failed:\s*\(.*?\) is false:\s*"
)


def clean_grammar_error(error: BaseException | str) -> str:
    """The message of an xgrammar error without its log stamp, C++ source paths and check
    expressions (what the client sent and what is wrong with it stay), on one line."""
    text = _XGRAMMAR_NOISE.sub("", str(error))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " ".join(lines).rstrip() or "the grammar was rejected"


def structural_tag_object(spec: str) -> dict[str, Any]:
    """A ``structural_tag`` string as xgrammar's current form, ``{"type": "structural_tag",
    "format": {...}}``; SGLang's older ``{"structures": [{"begin", "schema", "end"}], "triggers"}``
    becomes the equivalent ``triggered_tags`` format (xgrammar's own conversion).

    Raises:
        ValueError: the string is not a structural tag (:func:`check_structural_tag`).
    """
    import xgrammar as xgr

    obj = check_structural_tag(spec)
    if "format" in obj:
        return obj
    items = [
        xgr.StructuralTagItem(begin=s["begin"], schema=json.dumps(s.get("schema", {})), end=s["end"])
        for s in obj["structures"]
    ]
    return json.loads(
        xgr.StructuralTag.from_legacy_structural_tag(items, list(obj["triggers"])).model_dump_json()
    )


def normalize_tag_schemas(node: Any, max_whitespace_cnt: int) -> Any:
    """A structural tag (parsed JSON) whose formats that carry a JSON schema ``S``
    (``{"type": "json_schema", "json_schema": S}``, any ``style``; the deprecated
    ``qwen_xml_parameter``) have ``S`` passed through :func:`normalize_json_schema` and, where the
    tag sets none, ``max_whitespace_cnt`` (as every other JSON grammar: without a bound a model can
    spend its whole budget on whitespace). A ``{"type": "regex", "pattern": P}`` format has ``P``
    written in xgrammar's dialect (:func:`~sglang_v4.sampling.regex_dialect.translate_regex`, as
    the ``regex`` parameter: without it ``.`` took a newline and ``\\p{L}`` was refused when the
    regex followed the reasoning). A copy; the input is not changed.

    Raises:
        ValueError: a schema or regex that cannot be used (the message names it).
    """
    if isinstance(node, list):
        return [normalize_tag_schemas(x, max_whitespace_cnt) for x in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "regex" and isinstance(node.get("pattern"), str):
        return dict(node, pattern=translate_regex(node["pattern"], "pattern"))
    if isinstance(node.get("type"), str) and isinstance(node.get("json_schema"), (dict, bool)):
        schema = normalize_json_schema(node["json_schema"], "json_schema")
        out = dict(node, json_schema=enum_values_as_schemas(schema, "json_schema"))
        if out.get("max_whitespace_cnt") is None:
            out["max_whitespace_cnt"] = max_whitespace_cnt
        return out
    return {k: normalize_tag_schemas(v, max_whitespace_cnt) for k, v in node.items()}


def _answer_format(kind: str, spec: str, max_whitespace_cnt: int) -> dict[str, Any]:
    """The structural-tag format of an answer grammar (``kind`` and ``spec`` as
    :func:`after_reasoning_structural_tag` takes them).

    Raises:
        ValueError: as :func:`after_reasoning_structural_tag` says.
    """
    if kind == "json_schema":
        try:
            schema = json.loads(spec)
        except json.JSONDecodeError as e:
            raise ValueError(f"json_schema: invalid grammar: {e}") from None
        except RecursionError:
            raise ValueError(
                "json_schema: invalid grammar: the schema nests deeper than the "
                f"{MAX_SCHEMA_DEPTH} subschema levels supported"
            ) from None
        try:
            check_schema_depth(schema)
            check_json_schema(schema)
            schema = normalize_json_schema(merge_all_of(schema))
            check_enforceable_schema(schema)
            schema = enum_values_as_schemas(schema)
        except ValueError as e:
            raise ValueError(f"json_schema: invalid grammar: {e}") from None
        return {
            "type": "json_schema",
            "json_schema": schema,
            "max_whitespace_cnt": check_max_whitespace_cnt(max_whitespace_cnt),
        }
    if kind == "regex":
        translate_regex(spec, "regex")  # a 400 naming the construct now (written when compiled)
        return {"type": "regex", "pattern": spec}
    if kind == "ebnf":
        return {"type": "grammar", "grammar": spec}
    if kind == "structural_tag":
        try:
            return structural_tag_object(spec)["format"]
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"structural_tag: invalid grammar: {clean_grammar_error(e)}") from None
    raise ValueError(f"unknown grammar kind {kind!r}")


def after_reasoning_structural_tag(
    kind: str, spec: str, think_end: str = "</think>", max_whitespace_cnt: int = MAX_JSON_WHITESPACE
) -> str:
    """A ``structural_tag`` that leaves the reasoning free and constrains the answer after it.

    In thinking mode the prompt ends with ``<think>``: a ``json_schema`` / ``regex`` / ``ebnf``
    grammar applied from the first token would make the model write the answer as its reasoning
    (it could never close the block). As SGLang's reasoner grammar and vLLM's structured outputs
    with a reasoning parser do, the grammar starts after the end-of-reasoning marker: free text
    without ``<think>`` / ``think_end`` up to ``think_end``, then the format (the same sequence
    :func:`tool_call_structural_tag` builds with ``thinking=True``).

    Args:
        kind: ``"json_schema"``, ``"regex"``, ``"ebnf"`` or ``"structural_tag"``.
        spec: the grammar text of that field (a JSON schema as JSON text, a regex, an EBNF grammar,
            a structural tag's JSON in either form: its format follows the reasoning).
        think_end: the end-of-reasoning marker.
        max_whitespace_cnt: longest whitespace run of a ``json_schema`` answer.

    Returns:
        The JSON text for ``SamplingParams.structural_tag``.

    Raises:
        ValueError: ``kind`` is not one of the four, ``spec`` is not a structural tag
            (structural_tag), or ``spec`` is not valid JSON, not a valid
            JSON schema, or unsatisfiable as :func:`normalize_json_schema` finds (json_schema).
    """
    answer = _answer_format(kind, spec, max_whitespace_cnt)
    reasoning = {
        "type": "tag",
        "begin": "",
        "content": {"type": "any_text", "excludes": ["<think>", think_end]},
        "end": think_end,
    }
    return json.dumps(
        {"type": "structural_tag", "format": {"type": "sequence", "elements": [reasoning, answer]}}
    )


#: The schema of a tool defined without ``parameters`` (or with ``{}``): OpenAI's "omitting
#: ``parameters`` defines a function with an empty parameter list", so its one call is ``{}``.
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


def _with_parameters(function: dict[str, Any]) -> dict[str, Any]:
    """``function`` with :data:`EMPTY_PARAMETERS` where it has no (or empty) ``parameters``.

    xgrammar reads a missing schema as "any arguments": the model could then write parameters of
    any name, without end, that the tool does not take.
    """
    if function.get("parameters"):
        return function
    return dict(function, parameters=EMPTY_PARAMETERS)


def tool_call_structural_tag(
    tools: Sequence[dict[str, Any]],
    tool_choice: Any,
    *,
    thinking: bool,
    parallel_tool_calls: bool,
    enforce_schema: bool,
    max_whitespace_cnt: int = MAX_JSON_WHITESPACE,
    string_value_formats: dict[str, tuple[str, dict[str, Any]]] | None = None,
) -> str:
    """The ``structural_tag`` JSON that constrains a DeepSeek DSML tool-call answer.

    Args:
        tools: OpenAI ``tools`` (``[{"type": "function", "function": {"name", "parameters", "strict"}}]``);
            a function without ``parameters`` (or with ``{}``) takes none (:data:`EMPTY_PARAMETERS`).
        tool_choice: ``"auto"`` (free text, and a block only if the model starts one; the arguments
            of ``strict`` tools follow their schema), ``"required"`` (a block with at least one
            call) or ``{"type": "function", "function": {"name": NAME}}`` (exactly one call of NAME).
        thinking: the prompt ends with ``<think>``: free reasoning up to ``</think>`` comes first.
        parallel_tool_calls: more than one call may follow (else exactly one).
        enforce_schema: treat every tool as ``strict`` (arguments validate against ``parameters``);
            otherwise only ``strict: true`` tools have their arguments constrained, per function
            (OpenAI's semantics: ``strict`` absent or ``null`` is ``false``; the others' calls are
            well-formed DSML with any parameters).
        max_whitespace_cnt: longest whitespace run inside JSON argument values.
        string_value_formats: tool name -> ``(parameter, format)``: that tool's call is its one
            ``string="true"`` parameter whose raw text follows the xgrammar format (``regex`` /
            ``grammar``), in place of its JSON schema (:func:`_with_string_value`; the Responses
            API's custom tools with a grammar).

    Returns:
        The JSON text for ``SamplingParams.structural_tag``.

    Raises:
        ValueError: xgrammar rejects the tools (e.g. a named tool that is not in ``tools``).
    """
    import xgrammar as xgr

    tools = [dict(t, function=_with_parameters(t["function"])) for t in tools]
    try:
        tools = [
            dict(
                t,
                function=dict(
                    t["function"],
                    parameters=enum_values_as_schemas(
                        normalize_json_schema(
                            merge_all_of(t["function"]["parameters"]),
                            f"{t['function'].get('name')}.parameters",
                        ),
                        f"{t['function'].get('name')}.parameters",
                    ),
                ),
            )
            for t in tools
        ]
    except ValueError as e:
        raise ValueError(f"tools: cannot build the tool-call grammar: {e}") from None
    # OpenAI's ``strict`` defaults to false; xgrammar reads only an explicit ``False`` as
    # "unconstrained arguments", so a tool without the field is made ``strict: False`` here.
    tools = [
        dict(t, function=dict(t["function"], strict=enforce_schema or t["function"].get("strict") is True))
        for t in tools
    ]
    try:
        st = xgr.get_model_structural_tag(
            "deepseek_v4",
            tools=tools,
            tool_choice=tool_choice,
            reasoning="enabled" if thinking else "disabled",
            parallel_tool_calls=parallel_tool_calls,
            max_whitespace_cnt=check_max_whitespace_cnt(max_whitespace_cnt),
        )
    except (TypeError, ValueError, KeyError, RuntimeError) as e:
        raise ValueError(f"tools: cannot build the tool-call grammar: {clean_grammar_error(e)}") from None
    if not string_value_formats:
        return st.model_dump_json()
    return json.dumps(_with_string_value(json.loads(st.model_dump_json()), string_value_formats))


def answer_or_tool_calls_structural_tag(
    kind: str,
    spec: str,
    tools: Sequence[dict[str, Any]],
    *,
    thinking: bool,
    parallel_tool_calls: bool,
    think_end: str = "</think>",
    max_whitespace_cnt: int = MAX_JSON_WHITESPACE,
    string_value_formats: dict[str, tuple[str, dict[str, Any]]] | None = None,
) -> str:
    """A ``structural_tag`` for tools under ``tool_choice: "auto"`` beside the client's own
    answer grammar (``response_format`` / ``json_schema`` / ``regex`` / ``ebnf`` /
    ``structural_tag``): the answer is either that grammar's text or a DSML block of calls.

    OpenAI lets a model with tools and a ``response_format`` answer in the format or call tools.
    Constraining the whole output to the answer grammar alone makes the tool-call block
    unreachable: the calls are silently lost (vllm-project/vllm#39929). In thinking mode free
    reasoning up to ``think_end`` comes first (as :func:`after_reasoning_structural_tag`).

    Args:
        kind, spec: the answer grammar, as :func:`after_reasoning_structural_tag` takes it.
        tools: OpenAI function tools, as :func:`tool_call_structural_tag` takes them.
        thinking: the prompt ends with ``<think>``.
        parallel_tool_calls: the block may hold more than one call (else exactly one).
        think_end: the end-of-reasoning marker.
        max_whitespace_cnt: longest whitespace run of JSON (answer and arguments).
        string_value_formats: as :func:`tool_call_structural_tag` takes them.

    Returns:
        The JSON text for ``SamplingParams.structural_tag``.

    Raises:
        ValueError: the answer grammar is invalid (its message starts with ``kind``), or the
            tools cannot make a grammar (the message starts with ``tools:``).
    """
    answer = _answer_format(kind, spec, max_whitespace_cnt)
    calls = json.loads(
        tool_call_structural_tag(
            tools,
            "required",
            thinking=False,
            parallel_tool_calls=parallel_tool_calls,
            enforce_schema=False,
            max_whitespace_cnt=max_whitespace_cnt,
            string_value_formats=string_value_formats,
        )
    )["format"]
    fmt: dict[str, Any] = {"type": "or", "elements": [answer, calls]}
    if thinking:
        reasoning = {
            "type": "tag",
            "begin": "",
            "content": {"type": "any_text", "excludes": ["<think>", think_end]},
            "end": think_end,
        }
        fmt = {"type": "sequence", "elements": [reasoning, fmt]}
    return json.dumps({"type": "structural_tag", "format": fmt})


def _with_string_value(node: Any, formats: dict[str, tuple[str, dict[str, Any]]]) -> Any:
    """A copy of a tool-call structural tag (parsed JSON) in which the invoke tag of each tool
    named in ``formats`` holds exactly one parameter, ``<｜DSML｜parameter name="P"
    string="true">`` + text of the format + ``</｜DSML｜parameter>\\n`` (DeepSeek's DSML, as
    xgrammar's ``deepseek_xml`` style writes a string parameter)."""
    from sglang_v4.entrypoints.chat_encoding import DSML

    if isinstance(node, list):
        return [_with_string_value(x, formats) for x in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "tag" and isinstance(node.get("begin"), str):
        m = re.fullmatch(rf'<{DSML}invoke name="([^"]*)">\n', node["begin"])
        if m is not None and m.group(1) in formats:
            param, fmt = formats[m.group(1)]
            elements = [
                {"type": "const_string", "value": f'<{DSML}parameter name="{param}" string="true">'},
                fmt,
                {"type": "const_string", "value": f"</{DSML}parameter>\n"},
            ]
            return dict(node, content={"type": "sequence", "elements": elements})
    return {k: _with_string_value(v, formats) for k, v in node.items()}


def first_unusable_tool_parameters(parameters: Sequence[Any]) -> tuple[int, str] | None:
    """The first tool ``parameters`` schema the tool-call grammar cannot use, compiled alone.

    A tool-call grammar (:func:`tool_call_structural_tag`) holds the schemas of every constrained
    tool, and xgrammar's error about it (``Unsupported type "nope"``) does not say which tool it
    came from; this finds it. Each schema is prepared as the tool-call grammar prepares it
    (missing or ``{}``: :data:`EMPTY_PARAMETERS`; ``allOf`` merged, then normalised) and compiled
    with ``xgrammar.Grammar.from_json_schema``.

    Args:
        parameters: the ``parameters`` JSON schemas (parsed), in the order of the request's tools.

    Returns:
        ``(position in parameters, error text)`` of the first schema that does not compile, or
        ``None`` when each compiles alone.
    """
    import xgrammar as xgr

    for i, schema in enumerate(parameters):
        schema = schema or EMPTY_PARAMETERS
        try:
            prepared = normalize_json_schema(merge_all_of(schema), "parameters")
            xgr.Grammar.from_json_schema(json.dumps(prepared))
        except (RuntimeError, ValueError, TypeError) as e:
            return i, clean_grammar_error(e)
    return None
