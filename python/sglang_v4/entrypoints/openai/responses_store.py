"""The in-memory store of ``/v1/responses`` (responses created with ``store: true``), read by
``GET /v1/responses/{id}`` and by ``previous_response_id``.

Each entry holds the response body, the conversation it ended (chat messages: the previous
response's conversation, this request's input, this response's output as one assistant turn;
the request's ``instructions`` are left out, as OpenAI does not carry them over) and its input
items (:mod:`.responses_input_items`, read by ``GET /v1/responses/{id}/input_items``). The store is
bounded in entries and in size (the JSON length of what it holds); the least recently used
entries go first. It lives in the server process and is lost when the server stops; it is read
and written on the server's event loop only, so it takes no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["StoredResponse", "ResponseStore", "DEFAULT_MAX_ENTRIES", "DEFAULT_MAX_BYTES"]

#: Default bounds: entries, and bytes of JSON (responses + conversations).
DEFAULT_MAX_ENTRIES = 4096
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


@dataclass
class StoredResponse:
    """One stored response.

    Attributes:
        response: the response body as returned to the client (JSON-ready dict).
        messages: the conversation up to and including this response (chat messages, without the
            request's ``instructions``).
        size: bytes of JSON the entry holds (its weight against the store's bound).
        input_items: the response's input items, oldest first (``ResponseItem``-shaped dicts).
    """

    response: dict[str, Any]
    messages: list[dict[str, Any]]
    size: int
    input_items: list[dict[str, Any]] = field(default_factory=list)


class ResponseStore:
    """A bounded LRU map response id -> :class:`StoredResponse`.

    Args:
        max_entries: at most this many responses are kept (>= 1).
        max_bytes: at most this many bytes of JSON are kept; one entry larger than that is not
            stored at all.

    Raises:
        ValueError: a bound below 1.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError(f"ResponseStore bounds must be >= 1; got {max_entries}, {max_bytes}.")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(
        self,
        response_id: str,
        response: dict[str, Any],
        messages: list[dict[str, Any]],
        input_items: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Store (or replace) a response, evicting the least recently used ones over the bounds.

        Returns:
            Whether it was stored (False: it alone is larger than ``max_bytes``).
        """
        self.delete(response_id)
        items = input_items or []
        size = len(orjson.dumps(response)) + len(orjson.dumps(messages)) + len(orjson.dumps(items))
        if size > self.max_bytes:
            return False
        self._entries[response_id] = StoredResponse(response, messages, size, items)
        self.bytes += size
        while len(self._entries) > self.max_entries or self.bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= old.size
        return True

    def get(self, response_id: str) -> StoredResponse | None:
        """The stored response (marked recently used), or ``None``."""
        entry = self._entries.get(response_id)
        if entry is not None:
            self._entries.move_to_end(response_id)
        return entry

    def find_item(self, item_id: str) -> dict[str, Any] | None:
        """The stored item whose ``id`` is ``item_id`` (an output item of a stored response, or
        one of its input items; the newest response first), or ``None``. A scan of the store:
        what ``item_reference`` input items read, not a hot path."""
        for entry in reversed(self._entries.values()):
            for item in [*(entry.response.get("output") or []), *entry.input_items]:
                if isinstance(item, dict) and item.get("id") == item_id:
                    return item
        return None

    def delete(self, response_id: str) -> bool:
        """Remove a response; whether it was there."""
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self.bytes -= entry.size
        return True
