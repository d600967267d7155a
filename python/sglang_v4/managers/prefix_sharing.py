"""In-batch prefix sharing: a queued request waits for the prompt blocks a running request is
still prefilling (SGLang's "in-batch prefix caching" in ``schedule_policy.py``).

Requests that arrive together with a shared prompt prefix would all be admitted cold (or on the
part of the prefix already cached) and compute the same blocks side by side. Instead, a queued
request is *held* (skipped for this step, keeping its place in the queue) while a running request
whose prompt shares more whole ``page_size`` blocks with it than that request has put into the
radix cache yet is still prefilling: once those blocks are cached the held request is admitted
and hits all of them.

Blocks are compared by chained hashes computed once per request (:func:`prompt_block_hashes`),
so a step costs one dictionary entry per prompt block of the requests still prefilling plus, per
queued request, one lookup (a request sharing no first block with them) or a binary search over
its blocks; no prompt is compared token by token. A hash collision can only delay an admission
until the colliding request's prefill ends (the hold is a scheduling choice; outputs do not depend
on it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang_v4.managers.req import Req


def prompt_block_hashes(ids: Sequence[int], page_size: int, extra_key: str | None = None) -> tuple[int, ...]:
    """Chained hashes of the whole ``page_size`` blocks of a prompt, in its cache namespace.

    Entry ``j`` stands for the prefix of ``j + 1`` blocks: ``h_j = hash((h_{j-1}, block_j))`` with
    ``h_{-1} = hash(extra_key)`` (``None`` and ``""`` are the shared namespace, as in
    :class:`~sglang_v4.mem_cache.radix_node.RadixKey`), so two prompts have equal entries up to
    the number of leading blocks they share (and different ones after, up to hash collisions).

    Args:
        ids: the prompt token ids.
        page_size: tokens per block (> 0).
        extra_key: the request's cache namespace (``cache_salt`` / ``extra_key``).

    Returns:
        ``len(ids) // page_size`` ints (Python ``hash`` values; stable within one process).

    Raises:
        ValueError: naming ``page_size`` when it is not positive.
    """
    if page_size <= 0:
        raise ValueError(f"page_size must be positive, got {page_size}")
    h = hash(extra_key or "")
    out = []
    for start in range(0, len(ids) // page_size * page_size, page_size):
        h = hash((h, tuple(ids[start : start + page_size])))
        out.append(h)
    return tuple(out)


def prompt_still_prefilling(req: Req) -> bool:
    """Whether a running ``req`` will still put prompt blocks into the radix cache: it has whole
    prompt blocks not cached yet and has not confirmed its whole prompt (``num_computed`` moves
    when a chunk's result is processed, which is when its blocks are cached). A request past its
    prompt holds nobody, whatever its tree blocks."""
    return req.num_tree_blocks < len(req.block_hashes) and req.num_computed < len(req.origin_input_ids)


class InflightPrefixIndex:
    """The prompt prefixes of running requests that are still prefilling, for one step.

    Maps each prefix hash of such a request (:attr:`Req.block_hashes`) to the most blocks any of
    them sharing that prefix has cached (``Req.num_tree_blocks``).

    Args:
        sharers: the running requests; those not :func:`prompt_still_prefilling` are skipped.
    """

    def __init__(self, sharers: Iterable[Req] = ()) -> None:
        self._cached: dict[int, int] = {}
        for req in sharers:
            if prompt_still_prefilling(req):
                self.add(req)

    def __bool__(self) -> bool:
        return bool(self._cached)

    def add(self, req: Req) -> None:
        """Index the prompt prefixes of ``req`` (running, still prefilling; e.g. just admitted),
        with the blocks it has cached. O(its prompt blocks)."""
        cached, n = self._cached, req.num_tree_blocks
        for h in req.block_hashes:
            if cached.get(h, -1) < n:
                cached[h] = n

    def holds(self, req: Req, page_size: int) -> bool:
        """Whether queued ``req`` should wait: some indexed request shares ``s`` leading blocks
        with it (``s`` capped at the blocks ``req`` can hit, ``req.max_prefix_len() // page_size``)
        and no indexed request sharing those ``s`` blocks has cached all ``s`` yet. O(1) when its
        first block is not shared, else O(log blocks)."""
        hashes, cached = req.block_hashes, self._cached
        if not hashes or hashes[0] not in cached:
            return False
        cap = min(len(hashes), req.max_prefix_len() // page_size)
        if cap <= 0:
            return False
        # the indexed prefixes are closed under taking a shorter prefix: binary-search the longest
        lo, hi = 1, cap  # hashes[lo - 1] is indexed
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hashes[mid - 1] in cached:
                lo = mid
            else:
                hi = mid - 1
        return cached[hashes[lo - 1]] < lo


#: First character of every namespace :func:`join_cache_namespace` composes (and of an escaped
#: single key): a key a client sends as it is never starts with it.
_NAMESPACE_TAG = "\x00"


def join_cache_namespace(cache_salt: str | None, extra_key: str | None) -> str | None:
    """The prefix-cache namespace of a request from vLLM's ``cache_salt`` and SGLang's
    ``extra_key`` (the value stored as
    :attr:`~sglang_v4.managers.io_struct.GenerateReqInput.extra_key`).

    One of the two set alone is the namespace as it is (a salt ``"x"`` and an ``extra_key``
    ``"x"`` name the same one, as in SGLang); neither set (``None`` or ``""``) is the shared
    namespace (``None``). Both set are joined as a tagged pair, not by string concatenation, so
    no other pair and no single key names the same namespace: ``("ab", "c")``, ``("a", "bc")``
    and ``"abc"`` are three namespaces (sgl-project/sglang#24638: concatenated keys let one
    tenant hit another's cached blocks). A single key that starts with the tag character is
    escaped with one more, so it cannot name a joined pair either. The map is injective.

    Args:
        cache_salt: vLLM's ``cache_salt`` (``None`` or ``""``: unset).
        extra_key: SGLang's ``extra_key`` (``None`` or ``""``: unset).

    Returns:
        The namespace string, or ``None`` for the shared namespace.
    """
    if cache_salt and extra_key:
        return _NAMESPACE_TAG + repr((cache_salt, extra_key))
    key = cache_salt or extra_key
    if not key:
        return None
    return _NAMESPACE_TAG + key if key.startswith(_NAMESPACE_TAG) else key
