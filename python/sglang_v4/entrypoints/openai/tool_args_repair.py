"""Schema-guarded repairs of DeepSeek-V4's tool-call arguments: a spurious argument wrapper, and
a ``string="true"`` value of a parameter whose schema allows no string
(:func:`non_string_types`, :func:`coerce_string_value`).

DeepSeek-V4 (and V3.2) at times wraps a call's real arguments in one extra parameter named
``arguments`` or ``input`` (sgl-project/sglang#38924, vllm-project/vllm#41240), in three shapes::

    <｜DSML｜parameter name="arguments" string="false">{"path": "/x"}</｜DSML｜parameter>
    <｜DSML｜parameter name="arguments" string="true">{"path": "/x"}</｜DSML｜parameter>
    <｜DSML｜parameter name="arguments" string="true">ls -la</｜DSML｜parameter>   (bash's "command")

(or the invoke's JSON body ``{"arguments": {...}}``), which a client validating the call against
the tool's schema rejects. :func:`unwrap_arguments` undoes it, guarded by the schema: only when the
call has that one parameter and the tool declares no parameter of that name; the wrapped value is
used when it is a JSON object (or a string holding one) whose keys are all parameters the tool
declares (any keys when it declares none: vLLM's DeepSeek-V3.2/V4 parsers guard the unwrap the same
way), and a plain string becomes the tool's parameter when the tool has exactly one, a string one.
Anything else is left as the model wrote it.

A parameter's declared JSON types (:func:`declared_types`) are read from its ``type`` or, for a
composed schema, from the alternatives of its ``anyOf`` / ``oneOf`` (their union) or ``allOf``
(their intersection), as vLLM's DeepSeek-V3.2 parser reads them, following local ``$ref``
pointers and reading ``enum`` / ``const`` values' types (the schemas pydantic writes for
``Optional[int]`` and enum fields, as ``openai.pydantic_function_tool`` sends them). They drive two value repairs: a
``string="true"`` value of a parameter that allows no string (:func:`non_string_types`), and a
``string="false"`` value of one that allows a string (:func:`string_types`), which is read as
that string when it is no JSON value (``hello`` for ``["string", "null"]``; a JSON value, ``42``
or ``null``, stays as written, as DeepSeek's reference decoder reads a ``string="false"`` value).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from sglang_v4.entrypoints.openai.dsml_grammar import reject_constant, unique_object

__all__ = [
    "WRAPPER_KEYS",
    "coerce_string_value",
    "declared_types",
    "is_wrapper_key",
    "json_body_wraps",
    "non_string_types",
    "string_types",
    "unwrap_arguments",
]

#: The parameter names the model wraps real arguments in.
WRAPPER_KEYS = ("arguments", "input")
#: The start of a JSON object's first key (group 1: the key, once its closing quote came).
_JSON_FIRST_KEY = re.compile(r'\s*\{\s*"((?:[^"\\]|\\.)*)"\s*:')
#: A text that may still become such a start.
_JSON_KEY_PREFIX = re.compile(r'\s*(\{\s*("((?:[^"\\]|\\.)*"?\s*)?)?)?')


def _properties(schema: Any) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def is_wrapper_key(key: str, schema: Any) -> bool:
    """Whether a call's parameter ``key`` may be the spurious wrapper for a tool whose
    ``parameters`` JSON schema is ``schema`` (a wrapper name the tool does not declare)."""
    return key in WRAPPER_KEYS and key not in _properties(schema)


def json_body_wraps(text: str, schema: Any) -> bool | None:
    """Whether an invoke's JSON body, of which ``text`` is the start written so far, is a
    spurious wrapper (its first key a wrapper key, :func:`is_wrapper_key`) for a tool whose
    ``parameters`` JSON schema is ``schema``.

    Returns:
        True or False once the first key is complete (False too when ``text`` cannot start a
        JSON object with a key); None while more text must decide.
    """
    m = _JSON_FIRST_KEY.match(text)
    if m is None:
        return None if _JSON_KEY_PREFIX.fullmatch(text) is not None else False
    try:
        key = json.loads(f'"{m.group(1)}"')
    except ValueError:
        return False
    return is_wrapper_key(key, schema)


def unwrap_arguments(arguments: str, schema: Any) -> str | None:
    """The repaired ``function.arguments`` text of a call (module docstring), or ``None`` when
    there is nothing to repair.

    Args:
        arguments: the call's arguments, a JSON object text.
        schema: the tool's ``parameters`` JSON schema (``None``: none given).
    """
    try:
        args = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    if not isinstance(args, dict) or len(args) != 1:
        return None
    ((key, value),) = args.items()
    if not is_wrapper_key(key, schema):
        return None
    if isinstance(value, str):
        try:
            inner = json.loads(value)
        except (ValueError, RecursionError):
            inner = None
        if isinstance(inner, dict):
            value = inner
    if isinstance(value, dict):
        declared = _properties(schema)
        if declared and any(k not in declared for k in value):
            return None  # not the tool's arguments: the wrapper stays as written
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        strings = [
            k for k, p in _properties(schema).items() if isinstance(p, Mapping) and p.get("type") == "string"
        ]
        if len(_properties(schema)) == 1 and len(strings) == 1:
            return json.dumps({strings[0]: value}, ensure_ascii=False)
    return None


#: JSON schema ``type`` names of the values :func:`coerce_string_value` may produce
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "array": (list,),
    "object": (dict,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "string": (str,),
}


#: JSON schema ``type`` name of each JSON value's Python type (``enum`` / ``const`` values).
_VALUE_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),  # before int: a bool is an int
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (type(None), "null"),
    (list, "array"),
    (dict, "object"),
)
#: How deep ``$ref`` / ``anyOf`` / ``oneOf`` / ``allOf`` nesting is followed (a cyclic ``$ref``
#: stops here).
_MAX_SCHEMA_DEPTH = 16


def _resolve_ref(ref: Any, root: Any) -> Any:
    """The node a local JSON pointer ``ref`` (``"#/$defs/Unit"``, RFC 6901) names in ``root``,
    or ``None`` when it is not a local pointer or names nothing."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _schema_types(node: Any, root: Any, depth: int = 0) -> frozenset[str] | None:
    """The JSON types a (sub)schema ``node`` declares, or ``None`` when they are unknown: its
    ``type``; else, through a local ``$ref`` into ``root``, the target's; else the union of its
    ``anyOf`` / ``oneOf`` alternatives' types or the intersection of its ``allOf`` parts' types;
    else the types of its ``enum`` / ``const`` values (pydantic's ``Optional[int]`` is
    ``{"anyOf": [{"type": "integer"}, {"type": "null"}]}``, an enum field a ``$ref`` into
    ``$defs``)."""
    if not isinstance(node, Mapping) or depth > _MAX_SCHEMA_DEPTH:
        return None
    kind = node.get("type")
    if kind is not None:
        names = [kind] if isinstance(kind, str) else kind
        if not isinstance(names, list) or not names or not all(n in _JSON_TYPES for n in names):
            return None
        return frozenset(names)
    if "$ref" in node:
        return _schema_types(_resolve_ref(node["$ref"], root), root, depth + 1)
    for combinator in ("anyOf", "oneOf", "allOf"):
        alternatives = node.get(combinator)
        if not isinstance(alternatives, list) or not alternatives:
            continue
        sets = [_schema_types(a, root, depth + 1) for a in alternatives]
        if any(t is None for t in sets):
            return None
        if combinator == "allOf":
            return frozenset.intersection(*sets) or None  # type: ignore[arg-type]
        return frozenset.union(*sets)  # type: ignore[arg-type]
    values = (
        node["enum"] if isinstance(node.get("enum"), list) else [node["const"]] if "const" in node else None
    )
    if not values:
        return None
    return frozenset(next((n for t, n in _VALUE_TYPE_NAMES if isinstance(v, t)), "string") for v in values)


def declared_types(key: str, schema: Any) -> frozenset[str] | None:
    """The JSON type names (``"string"``, ``"integer"``, ``"null"`` ...) parameter ``key`` of a
    tool whose ``parameters`` JSON schema is ``schema`` declares: its ``type`` (a name or a list
    of names), through local ``$ref`` pointers, the union of its ``anyOf`` / ``oneOf``
    alternatives' types, the intersection of its ``allOf`` parts' types, or its ``enum`` /
    ``const`` values' types (module docstring); ``None`` when unknown (no such parameter, none of
    those keywords, an alternative of unknown type, an unknown name, a remote or dangling
    ``$ref``)."""
    return _schema_types(_properties(schema).get(key), schema)


def non_string_types(key: str, schema: Any) -> frozenset[str] | None:
    """The JSON types parameter ``key`` of a tool whose ``parameters`` JSON schema is ``schema``
    declares (:func:`declared_types`), when they leave a string out; ``None`` when a string is
    allowed or the types are unknown.

    DeepSeek-V4 at times writes such a parameter with ``string="true"`` (an array as the text
    ``[{...}]``), which a client validating the call against the schema rejects
    (vllm-project/vllm#30797); :func:`coerce_string_value` repairs the value.
    """
    names = declared_types(key, schema)
    return names if names is not None and "string" not in names else None


def string_types(key: str, schema: Any) -> frozenset[str] | None:
    """The JSON types parameter ``key`` declares (:func:`declared_types`) when they allow a
    string, else ``None``: a ``string="false"`` value of such a parameter is held to its end and
    goes out as written when it is a JSON value, else as the text's JSON string (``hello`` becomes
    ``"hello"``, not a malformed block)."""
    names = declared_types(key, schema)
    return names if names is not None and "string" in names else None


def coerce_string_value(value: str, types: frozenset[str]) -> str:
    """The JSON text of a ``string="true"`` parameter value whose schema allows only ``types``
    (:func:`non_string_types`): the JSON value the text spells when it parses as one of those
    types (``"[1, 2]"`` for an array parameter becomes ``[1, 2]``), else the JSON string of the
    text as the model wrote it."""
    try:
        parsed = json.loads(value, parse_constant=reject_constant, object_pairs_hook=unique_object)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than json decodes
        return json.dumps(value, ensure_ascii=False)
    if isinstance(parsed, float) and not math.isfinite(parsed):  # "1e999": not JSON once dumped
        return json.dumps(value, ensure_ascii=False)
    ok = any(
        isinstance(parsed, _JSON_TYPES[t]) and not (isinstance(parsed, bool) and t in ("integer", "number"))
        for t in types
    )
    if not ok or (isinstance(parsed, float) and "number" not in types):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(parsed, ensure_ascii=False)
