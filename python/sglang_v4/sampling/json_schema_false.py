"""``false`` property schemas (the key must be absent), which xgrammar (0.2.x) refuses to compile
("Schema 'false' cannot accept any value") although JSON Schema allows them anywhere a schema
goes (``{"properties": {"legacy": false}}``). :func:`drop_false_properties` removes such a
property where the object lets no other key in (xgrammar's strict reading: only
``additionalProperties`` / ``unevaluatedProperties`` / a matching ``patternProperties`` regex
would), which means the same; elsewhere the schema is left to xgrammar's 400. ``anyOf`` /
``oneOf`` branches ``false`` are dropped by ``json_schema_rewrite`` itself.

:func:`drop_false_pattern_properties` does the same for a ``patternProperties`` entry ``false``
(keys matching the regex must be absent, ``{"patternProperties": {"^x_": false}}``): in an object
that lets no other key in it is dropped, with the ``properties`` its regex matches; where another
``patternProperties`` regex might match the same key (not shown disjoint by length), or
``additionalProperties`` admits keys, the schema is refused by name (a ``ValueError``, HTTP 400)
instead of xgrammar's "Schema 'false' cannot accept any value".

:func:`type_untyped_key_keywords` makes a node without ``type`` that carries ``patternProperties``
/ ``propertyNames`` / ``minProperties`` / ``maxProperties`` an object node, where xgrammar
enforces them.
"""

from __future__ import annotations

import re
import re._parser as re_parser
from typing import Any

__all__ = ["drop_false_pattern_properties", "drop_false_properties", "type_untyped_key_keywords"]

#: Object keywords xgrammar ignored on a node without ``"type": "object"`` (it reads ``properties``
#: / ``required`` / ``additionalProperties`` there as an object node, but not these).
_KEY_ONLY = ("patternProperties", "propertyNames", "minProperties", "maxProperties")


def type_untyped_key_keywords(node: dict[str, Any]) -> None:
    """Give ``node`` (in place) ``"type": "object"`` where it has no ``type`` / ``const`` /
    ``enum`` / ``$ref`` and carries a keyword of :data:`_KEY_ONLY`: xgrammar left those
    unenforced there (``{"patternProperties": {"^[0-9]$": {"type": "boolean"}}}`` took ``{"1":
    "x"}``); as an object node they are enforced, and other values are not offered (a narrower,
    never wrong, reading, as xgrammar gives ``properties``)."""
    if "type" in node or any(k in node for k in ("const", "enum", "$ref")):
        return
    if any(k in node for k in _KEY_ONLY):
        node["type"] = "object"


def drop_false_properties(node: dict[str, Any], required: list[Any], path: str) -> None:
    """Remove the ``properties`` entries whose schema is ``false`` (the key must be absent) from
    ``node`` (in place) where no other keyword could let the key in; the others are left.

    Raises:
        ValueError: such a key is also ``required`` (no object satisfies the schema).
    """
    props = node.get("properties")
    if not isinstance(props, dict) or False not in props.values():
        return
    patterns = node.get("patternProperties") or {}
    closed = _closed(node)
    kept = dict(props)
    for name, sub in props.items():
        if sub is not False:
            continue
        if name in required:
            raise ValueError(
                f"{path}: required property {name!r} has the schema false, so no object satisfies the schema."
            )
        if closed and not any(_search(regex, name) for regex in patterns):
            del kept[name]
    node["properties"] = kept


def _search(regex: Any, text: str) -> bool:
    """Whether ``regex`` may match ``text`` (``re.search``; an unreadable regex may)."""
    try:
        return re.search(regex, text) is not None
    except (re.error, TypeError):
        return True


def _closed(node: dict[str, Any]) -> bool:
    """Whether ``node`` lets in no key beyond ``properties`` / ``patternProperties`` (xgrammar's
    strict reading: ``additionalProperties`` / ``unevaluatedProperties`` absent or ``false``)."""
    return (
        node.get("additionalProperties", False) is False and node.get("unevaluatedProperties", False) is False
    )


def drop_false_pattern_properties(node: dict[str, Any], required: Any, path: str) -> None:
    """Remove the ``patternProperties`` entries whose schema is ``false`` (keys matching the regex
    must be absent) from ``node`` (in place), with the ``properties`` names they match, where the
    object lets no other key in (``required``: the node's list, anything else is none);
    ``additionalProperties: false`` is made explicit when no
    ``patternProperties`` entry is left, so the object stays closed.

    Raises:
        ValueError: a ``required`` name matches such a regex (no object satisfies the schema);
            ``additionalProperties`` / ``unevaluatedProperties`` admits keys, or another
            ``patternProperties`` regex may match a key the ``false`` one matches (constrained
            decoding cannot keep those keys out).
    """
    patterns = node.get("patternProperties")
    if not isinstance(patterns, dict) or False not in patterns.values():
        return
    required = required if isinstance(required, list) else []
    banned = [k for k, v in patterns.items() if v is False]
    where = f"{path}.patternProperties"
    for regex in banned:
        for name in required:
            if isinstance(name, str) and _search(regex, name):
                raise ValueError(
                    f"{where}: required property {name!r} matches {regex!r}, whose schema is false, "
                    "so no object satisfies the schema."
                )
        if not _closed(node):
            raise ValueError(
                f"{where}: constrained decoding cannot enforce the entry {regex!r}: false (keys it "
                "matches must be absent) where additionalProperties admits other keys; remove it "
                "(or set additionalProperties to false)."
            )
        for other in (k for k, v in patterns.items() if v is not False):
            if not _disjoint(other, regex):
                raise ValueError(
                    f"{where}: constrained decoding cannot enforce the entry {regex!r}: false beside "
                    f"{other!r}, which may match the same keys; remove one of them."
                )
    kept = {k: v for k, v in patterns.items() if v is not False}
    props = node.get("properties")
    if isinstance(props, dict):
        node["properties"] = {n: s for n, s in props.items() if not any(_search(r, n) for r in banned)}
    if kept:
        node["patternProperties"] = kept
    else:
        del node["patternProperties"]
        node.setdefault("additionalProperties", False)


def _disjoint(anchored: Any, banned: Any) -> bool:
    """Whether no key matching ``anchored`` (``re.search``) can match ``banned``, shown by length:
    ``anchored`` spans the whole key (``^...$``, no top-level alternation) and its longest match
    (plus a final newline, which ``$`` lets through) is shorter than ``banned``'s shortest. An
    unreadable regex is not shown disjoint."""
    try:
        a, b = re_parser.parse(anchored), re_parser.parse(banned)
    except (re.error, TypeError):
        return False
    items = list(a)
    if not items or items[0][0] != re_parser.AT or items[-1][0] != re_parser.AT:
        return False
    if items[0][1] not in (re_parser.AT_BEGINNING, re_parser.AT_BEGINNING_STRING):
        return False
    if items[-1][1] not in (re_parser.AT_END, re_parser.AT_END_STRING):
        return False
    return a.getwidth()[1] + 1 < b.getwidth()[0]
