"""``false`` property schemas (the key must be absent), which xgrammar (0.2.x) refuses to compile
("Schema 'false' cannot accept any value") although JSON Schema allows them anywhere a schema
goes (``{"properties": {"legacy": false}}``). :func:`drop_false_properties` removes such a
property where the object lets no other key in (xgrammar's strict reading: only
``additionalProperties`` / ``unevaluatedProperties`` / a matching ``patternProperties`` regex
would), which means the same; elsewhere the schema is left to xgrammar's 400. ``anyOf`` /
``oneOf`` branches ``false`` are dropped by ``json_schema_rewrite`` itself.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["drop_false_properties"]


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
    closed = (
        node.get("additionalProperties", False) is False and node.get("unevaluatedProperties", False) is False
    )
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
