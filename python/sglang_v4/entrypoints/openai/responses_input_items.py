"""``GET /v1/responses/{id}/input_items``: the input items of a stored response as OpenAI lists
them (``client.responses.input_items.list``).

A response's input items are the items of its whole context, as OpenAI's list has them for a
response that continues another (``previous_response_id``): the previous response's input items
and output items, then this request's ``input``. Each item is in the shape of OpenAI's
``ResponseItem`` with an ``id`` (the client's when it sent one) and ``status: "completed"``: a
string ``input`` or a string ``content`` becomes one ``input_text`` part (``output_text`` for an
assistant message), ``function_call`` / ``function_call_output`` / ``custom_tool_call`` /
``custom_tool_call_output`` / ``reasoning`` items keep their fields.

An input item whose ``id`` is that of an item already in the context (an item of the stored
response chain ``previous_response_id`` names, or an earlier item of the same ``input``) is a
400, as OpenAI answers it (``Duplicate item found with id ...``, ``param: "input"``;
:func:`check_duplicate_items`): a client that resends an earlier ``function_call`` with its output
would otherwise have the call twice in the prompt. Items without an ``id`` are never duplicates.

An ``item_reference`` input item (``{"type": "item_reference", "id"}``, OpenAI's reference to an item
of a stored response) stands for that item, read from the store before anything else
(:func:`resolve_item_references`); an id no stored response holds is a 404 naming
``input[i].id``.

The list is OpenAI's cursor page: ``{"object": "list", "data", "first_id", "last_id",
"has_more"}``; ``order`` ``"desc"`` (default, newest first) or ``"asc"``, ``limit`` 1..100
(default 20), ``after`` an item id of the list (the page starts after it, in the listing order).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sglang_v4.entrypoints.openai.protocol_responses import new_item_id
from sglang_v4.entrypoints.openai.request_errors import RequestError

__all__ = [
    "check_duplicate_items",
    "input_items_of",
    "input_items_page",
    "resolve_item_references",
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
]

#: OpenAI's ``limit`` default and bound for the input-items list.
DEFAULT_LIMIT, MAX_LIMIT = 20, 100
#: Id prefixes of the item kinds (OpenAI's style).
_PREFIX = {
    "message": "msg",
    "reasoning": "rs",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
}


def _parts(content: Any, kind: str) -> list[Any]:
    """``content`` as a list of parts; a string is one ``kind`` part; ``output_text`` parts get
    their required ``annotations`` (``[]``) when the client left it out."""
    parts = [{"type": kind, "text": content}] if isinstance(content, str) else list(content)
    return [
        dict(p, annotations=[])
        if isinstance(p, dict) and p.get("type") == "output_text" and "annotations" not in p
        else p
        for p in parts
    ]


def _item(raw: Mapping[str, Any]) -> dict[str, Any]:
    """One validated input item in ``ResponseItem`` shape (id and status set)."""
    kind = raw.get("type", "message" if "role" in raw else None)
    item = dict(raw, type=kind)
    if kind == "message":
        text_kind = "output_text" if raw.get("role") == "assistant" else "input_text"
        item["content"] = _parts(raw.get("content"), text_kind)
    elif kind == "reasoning":
        item.setdefault("summary", [])
    if kind != "reasoning":
        item.setdefault("status", "completed")
    item["id"] = raw.get("id") or new_item_id(_PREFIX.get(str(kind), "item"))
    return item


def input_items_of(
    request_input: str | Sequence[Any],
    previous_items: Sequence[dict[str, Any]] = (),
    previous_output: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The input items stored with a response, oldest first.

    Args:
        request_input: the request's ``input`` (a string or a list of item objects), validated by
            :func:`~.responses_input.input_to_messages` already.
        previous_items: the input items stored with the ``previous_response_id`` response.
        previous_output: that response's ``output`` items (JSON dicts).

    Returns:
        JSON-ready item dicts in ``ResponseItem`` shape.
    """
    items = [{"role": "user", "content": request_input}] if isinstance(request_input, str) else request_input
    # a custom_tool_call output item has no status; as a listed item it has one
    output = [
        dict(o, status="completed") if o.get("type") == "custom_tool_call" and "status" not in o else o
        for o in previous_output
    ]
    return [*previous_items, *output, *(_item(i) for i in items)]


def check_duplicate_items(
    request_input: str | Sequence[Any],
    previous_items: Sequence[Mapping[str, Any]] = (),
    previous_output: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Refuse an ``input`` that repeats an item of its context (module docstring).

    Args:
        request_input: the request's ``input`` (a string has no items, so no duplicates).
        previous_items: the input items stored with the ``previous_response_id`` response (the
            whole chain before it).
        previous_output: that response's ``output`` items.

    Raises:
        RequestError: 400 (``param="input"``, OpenAI's message) naming the first repeated id.
    """
    if isinstance(request_input, str):
        return
    seen = {i.get("id") for i in (*previous_items, *previous_output) if isinstance(i, Mapping)}
    seen.discard(None)
    for item in request_input:
        item_id = item.get("id") if isinstance(item, Mapping) else None
        if item_id is None:
            continue
        if item_id in seen:
            raise RequestError(
                f"Duplicate item found with id {item_id}. Remove duplicate items from your input and try again.",
                param="input",
            )
        seen.add(item_id)


def input_items_page(
    items: Sequence[dict[str, Any]], order: str | None, limit: str | None, after: str | None
) -> dict[str, Any]:
    """One page of the list (module docstring), from the query parameters as sent.

    Args:
        items: the stored input items, oldest first.
        order: ``"asc"`` / ``"desc"`` (None: ``"desc"``).
        limit: decimal text of 1..100 (None: 20).
        after: an id of ``items``; the page holds the items after it in the listing order.

    Returns:
        ``{"object": "list", "data", "first_id", "last_id", "has_more"}`` (ids None on an empty
        page).

    Raises:
        RequestError: 400 naming ``order``, ``limit`` or ``after`` (an id not in the list).
    """
    order = order or "desc"
    if order not in ("asc", "desc"):
        raise RequestError(f"order must be 'asc' or 'desc'; got {order!r}.", param="order")
    try:
        n = DEFAULT_LIMIT if limit is None else int(limit)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_LIMIT:
        raise RequestError(f"limit must be an integer from 1 to {MAX_LIMIT}; got {limit!r}.", param="limit")
    listed = list(items) if order == "asc" else list(reversed(items))
    start = 0
    if after is not None:
        ids = [i.get("id") for i in listed]
        if after not in ids:
            raise RequestError(f"after: no input item with id '{after}' in this response.", param="after")
        start = ids.index(after) + 1
    data = listed[start : start + n]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + n < len(listed),
    }


def resolve_item_references(
    items: str | Sequence[Any], find: Callable[[str], dict[str, Any] | None]
) -> str | list[Any]:
    """``items`` (a request's ``input``) with each ``item_reference`` item replaced by a copy of
    the stored item it names (``find``: the store's lookup by item id,
    :meth:`~.responses_store.ResponseStore.find_item`); other items and a string ``input`` are
    returned as they are.

    Raises:
        RequestError: 400 naming ``input[i].id`` for a reference without a non-empty string
            ``id``; 404 naming it when no stored response holds an item of that id.
    """
    if isinstance(items, str) or not any(
        isinstance(it, Mapping) and it.get("type") == "item_reference" for it in items
    ):
        return items if isinstance(items, str) else list(items)
    out: list[Any] = []
    for i, item in enumerate(items):
        if not (isinstance(item, Mapping) and item.get("type") == "item_reference"):
            out.append(item)
            continue
        ref = item.get("id")
        if not isinstance(ref, str) or not ref:
            raise RequestError(f"input[{i}].id must be a non-empty string.", param=f"input[{i}].id")
        found = find(ref)
        if found is None:
            raise RequestError(f"Item with id '{ref}' not found.", 404, param=f"input[{i}].id")
        out.append(dict(found))
    return out
