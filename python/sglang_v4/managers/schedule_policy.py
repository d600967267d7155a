"""Waiting-queue order of ``--schedule-policy`` (SGLang's policy names and meanings).

The scheduler admits queued requests in the order :func:`order_waiting` returns, each step, while
slots, KV pages and the prefill budget allow. The policies are those of SGLang's
``srt/managers/schedule_policy.py`` (0.5.x):

* ``fcfs``: first come first served, the queue's own order (arrivals at the back, retracted
  requests at the front).
* ``lpm``: longest cached prefix first (tokens the radix cache would hit now); ties by arrival.
* ``dfs-weight``: requests grouped by the radix-tree path their cached prefix follows and visited
  depth first, the subtree that the most queued requests share first, so requests reading the
  same cached blocks run together; within a node its deeper requests come before its own, and
  requests with no cached prefix come last.
* ``hrrn``: highest response ratio next with token-based aging: the ratio grows by
  ``prefill tokens the server has computed since the request arrived / tokens it still has to
  prefill`` (the time-based ratio ``1 + wait / service`` when the prefill throughput is constant);
  a request with nothing left to prefill goes first.
* ``shortest-prefill-first``: fewest tokens left to prefill (prompt minus cached prefix) first;
  ties by arrival. It needs the radix cache (``ServerArgs`` refuses it with
  ``--disable-radix-cache``, as SGLang does at start-up).
* ``lof``: longest output first: largest ``max_new_tokens`` first; ties by arrival.
* ``random``: a shuffle, each step, with a generator seeded by ``--random-seed``.

As in SGLang, the cache-aware policies (``lpm``, ``dfs-weight``, ``hrrn``,
``shortest-prefill-first``) fall back to ``fcfs`` with the radix cache disabled, and ``lpm`` /
``hrrn`` fall back to ``fcfs`` beyond :data:`CACHE_AWARE_MAX_QUEUE` queued requests (matching
every queued prompt each step costs more than it saves). Prefix matches here are read-only: they
do not split tree nodes nor refresh LRU stamps. ``--enable-priority-scheduling`` orders by priority
first and by the policy within one priority.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sglang_v4.managers.req import Req

#: Queue length above which ``lpm`` and ``hrrn`` order first come first served (SGLang's 128).
CACHE_AWARE_MAX_QUEUE = 128
#: Policies that read the radix cache (``fcfs`` order when it is disabled).
CACHE_AWARE_POLICIES = frozenset({"lpm", "dfs-weight", "hrrn", "shortest-prefill-first"})


def _prefix_tokens(req: Req) -> Any:
    """The tokens a cache match may cover: the sequence without its last token (that one is
    always recomputed to get the next token's logits), in the request's cache namespace
    (:meth:`~sglang_v4.managers.req.Req.cache_key`)."""
    return req.cache_key(req.seq_len - 1)


def dfs_weight_order(reqs: Sequence[Req], match_path: Callable[[Sequence[int]], list[Any]]) -> list[Req]:
    """``reqs`` in ``dfs-weight`` order (module docstring).

    Args:
        reqs: queued requests, in queue order (the tie order).
        match_path: the radix-tree nodes a prefix walks through, root excluded (empty: no cached
            prefix); nodes are compared by identity.

    Returns:
        The same requests, reordered.
    """
    # a trie over the requests' node paths: key = tuple of node ids from the root
    ends: dict[tuple[int, ...], list[Req]] = {}
    weight: dict[tuple[int, ...], int] = {}
    children: dict[tuple[int, ...], list[tuple[int, ...]]] = {(): []}
    for req in reqs:
        path = tuple(id(n) for n in match_path(_prefix_tokens(req)) if n is not None)
        ends.setdefault(path, []).append(req)
        for depth in range(len(path) + 1):
            key = path[:depth]
            weight[key] = weight.get(key, 0) + 1
            if depth and key not in children:
                children[key] = []
                children[path[: depth - 1]].append(key)
    out: list[Req] = []

    def visit(key: tuple[int, ...]) -> None:
        # heaviest subtree first; sorted() is stable, so equal weights keep first-seen order
        for child in sorted(children[key], key=lambda k: -weight[k]):
            visit(child)
        out.extend(ends.get(key, ()))

    visit(())
    return out


def order_waiting(
    policy: str,
    reqs: Sequence[Req],
    *,
    radix_enabled: bool,
    match_len: Callable[[Sequence[int]], int],
    match_path: Callable[[Sequence[int]], list[Any]],
    rng: random.Random,
    prefill_tokens_done: int = 0,
    priority_sign: int | None = None,
) -> list[Req]:
    """The queue in admission order for ``policy`` (module docstring).

    Args:
        policy: a ``--schedule-policy`` value (``sglang_v4.server_args.SCHEDULE_POLICY_CHOICES``).
        reqs: the queued requests, queue order (arrivals at the back, retracted at the front).
        radix_enabled: False with ``--disable-radix-cache``: cache-aware policies order ``fcfs``.
        match_len: cached-prefix tokens of a token list (read-only radix match).
        match_path: radix-tree nodes a token list walks through (for ``dfs-weight``).
        rng: the generator of ``random`` (seeded once by the scheduler).
        prefill_tokens_done: prompt tokens the scheduler has put into batches since it started
            (``hrrn``'s clock); each request's ``arrival_prefill_tokens`` is this value when it
            was queued.
        priority_sign: None without priority scheduling; else -1 (higher ``priority`` first) or
            1 (lower first): priority is the first key, the policy's order the second.

    Returns:
        A new list holding the same requests.

    Raises:
        ValueError: naming ``schedule_policy`` for an unknown policy.
    """
    reqs = list(reqs)
    if policy in CACHE_AWARE_POLICIES and not radix_enabled:
        policy = "fcfs"
    if policy in ("lpm", "hrrn") and len(reqs) > CACHE_AWARE_MAX_QUEUE:
        policy = "fcfs"
    # requests whose last token is still being sampled have no complete sequence to match yet
    matchable = [r for r in reqs if not r.num_future]
    if policy == "fcfs":
        out = sorted(reqs, key=lambda r: r.arrival) if priority_sign is not None else reqs
    elif policy == "lpm":
        lens = {id(r): match_len(_prefix_tokens(r)) for r in matchable}
        out = sorted(reqs, key=lambda r: (-lens.get(id(r), 0), r.arrival))
    elif policy == "shortest-prefill-first":
        todo = {id(r): max(1, r.seq_len - match_len(_prefix_tokens(r))) for r in matchable}
        out = sorted(reqs, key=lambda r: (todo.get(id(r), r.seq_len), r.arrival))
    elif policy == "hrrn":

        def ratio(r: Req) -> float:
            if r.num_future:
                return 0.0
            todo = r.seq_len - match_len(_prefix_tokens(r))  # >= 1: the last token is recomputed
            return max(0, prefill_tokens_done - r.arrival_prefill_tokens) / todo

        ratios = {id(r): ratio(r) for r in reqs}
        out = sorted(reqs, key=lambda r: (-ratios[id(r)], r.arrival))
    elif policy == "dfs-weight":
        out = dfs_weight_order(matchable, match_path) + [r for r in reqs if r.num_future]
    elif policy == "lof":
        out = sorted(reqs, key=lambda r: (-r.max_new_tokens, r.arrival))
    elif policy == "random":
        out = list(reqs)
        rng.shuffle(out)
    else:
        raise ValueError(f"schedule_policy: unknown policy {policy!r}")
    if priority_sign is not None:
        out = sorted(out, key=lambda r: priority_sign * r.priority)  # stable: policy order within
    return out


#: The priority range (signed 64-bit, as SGLang's): a request sending none under priority
#: scheduling gets the least preferred end of it unless ``--default-priority-value`` says otherwise.
PRIORITY_MIN, PRIORITY_MAX = -(1 << 63), (1 << 63) - 1
#: SGLang's refusal of a request that sends a priority to a server started with
#: ``--abort-on-priority-when-disabled`` and without ``--enable-priority-scheduling`` (HTTP 503).
PRIORITY_DISABLED_MSG = (
    "Using priority is disabled for this server. Please send a new request without a priority."
)


def request_priority(
    requested: int | None, *, enabled: bool, low_values_first: bool, default: int | None
) -> int:
    """The priority a request is scheduled with (SGLang 0.5.x rules).

    Args:
        requested: the request's ``priority`` field (None: not sent).
        enabled: ``--enable-priority-scheduling``.
        low_values_first: ``--schedule-low-priority-values-first``.
        default: ``--default-priority-value`` (None: not set).

    Returns:
        ``requested`` when sent; without priority scheduling 0 (unused); else ``default``, or the
        least preferred value (:data:`PRIORITY_MIN` when higher values go first,
        :data:`PRIORITY_MAX` when lower ones do), so a request without a priority runs after every
        request with one, as in SGLang.
    """
    if requested is not None:
        return int(requested)
    if not enabled:
        return 0
    if default is not None:
        return int(default)
    return PRIORITY_MAX if low_values_first else PRIORITY_MIN


def preemption_victims(
    req: Req, running: Sequence[Req], *, priority_sign: int, threshold: int, count: int = 1
) -> list[Req]:
    """Running requests a queued ``req`` that cannot be admitted preempts (SGLang's priority
    preemption, ``--priority-scheduling-preemption-threshold``).

    Args:
        req: the queued request (the most preferred one that is blocked).
        running: the running requests.
        priority_sign: -1 (higher ``priority`` preferred) or 1 (lower preferred).
        threshold: ``req`` preempts a running request only when its priority is better by more
            than this (``priority_sign * (victim.priority - req.priority) > threshold``), so
            requests of equal or close priority never preempt each other.
        count: at most this many victims.

    Returns:
        Up to ``count`` requests, least preferred first and, among equal priorities, the most
        recent arrival first (the one that has done the least work); empty when none qualifies.
    """
    eligible = [r for r in running if priority_sign * (r.priority - req.priority) > threshold]
    eligible.sort(key=lambda r: (-priority_sign * r.priority, -r.arrival))
    return eligible[:count]


class BlockPages(Protocol):
    """What :func:`preemption_makes_room` reads of the KV cache (``CacheManager`` has it)."""

    page_size: int

    def kv_block_counts(self) -> tuple[int, int, int]:
        """``(available, evictable, used)`` block pages."""

    def prefix_match_len(self, token_ids: Any) -> int:
        """Tokens a prefix match of ``token_ids`` would hit now (read-only)."""


def pages_left(req: Req, page_size: int) -> int:
    """Block pages ``req`` lacks for its whole sequence (and for its next token if it will
    decode one): what the scheduler reserves for a running request when admitting another."""
    end = req.seq_len + (req.num_outputs + 1 < req.max_new_tokens)
    return max(0, -(-end // page_size) - len(req.block_pages))


def preemption_makes_room(
    req: Req, victims: Sequence[Req], staying: Sequence[Req], kv: BlockPages, *, upper_bound: bool = True
) -> bool:
    """Whether preempting every one of ``victims`` could give ``req`` the block pages of its
    whole sequence (vLLM's check before preempting: a request that would still not fit after
    every possible victim is gone preempts nobody; it waits for pages like any other).

    ``need + reserved <= available + evictable + freed``, in block pages: ``need`` is what
    ``req`` lacks, ``reserved`` what the ``staying`` running requests still lack for theirs
    (:func:`pages_left`), ``freed`` every block page the victims hold. With ``upper_bound``
    (the default) ``need`` leaves out a queued request's cached prefix, so the answer is an
    upper bound and a preemption that could help is never refused; without it the cached
    prefix counts as needed (it may be locked by others), a lower bound: True then means
    ``req`` fits for sure.

    Args:
        req: the blocked request (queued, or running with a prompt chunk that found no pages).
        victims: the running requests it would preempt (may be empty).
        staying: the other running requests (``req`` excluded).
        kv: the cache's page counts and read-only prefix match.
        upper_bound: as above.
    """
    ps = kv.page_size
    need = pages_left(req, ps)
    if upper_bound and req.req_pool_idx is None and req.seq_len > 1:  # queued: its cached prefix
        need = max(0, need - kv.prefix_match_len(req.cache_key(req.max_prefix_len())) // ps)
    reserved = sum(pages_left(r, ps) for r in staying)
    available, evictable, _ = kv.kv_block_counts()
    return need + reserved <= available + evictable + sum(len(r.block_pages) for r in victims)


def priority_preemption(
    blocked: Req | None,
    waiting: Sequence[Req],
    running: Sequence[Req],
    max_running: int,
    *,
    priority_sign: int,
    threshold: int,
    kv: BlockPages | None = None,
) -> tuple[Req | None, list[Req]]:
    """Who preempts whom this step (SGLang's priority preemption).

    Args:
        blocked: the request whose admission or next prompt chunk failed for KV pages last step
            (``None``: none); ignored if it awaits a future token or is neither queued nor running.
        waiting / running: the queue and the running requests.
        max_running: the running-request cap; without a ``blocked`` request, the most preferred
            queued one (earliest arrival among equals) preempts only when the cap is reached.
        priority_sign / threshold: as :func:`preemption_victims`.
        kv: the cache's page counts; when given, nobody is preempted unless preempting every
            eligible victim could make room for the blocked request, nor when it surely fits
            now without a preemption and needs no request slot (:func:`preemption_makes_room`).

    Returns:
        ``(preempting request or None, victims)``: at most one victim per step.
    """
    if blocked is not None and (blocked.num_future or (blocked not in waiting and blocked not in running)):
        blocked = None
    if blocked is None:
        ready = [r for r in waiting if not r.num_future]
        if len(running) < max_running or not ready:
            return None, []
        blocked = min(ready, key=lambda r: (priority_sign * r.priority, r.arrival))
    others = [r for r in running if r is not blocked]
    eligible = preemption_victims(
        blocked, others, priority_sign=priority_sign, threshold=threshold, count=len(others)
    )
    if eligible and kv is not None:
        staying = [r for r in others if all(r is not v for v in eligible)]
        if not preemption_makes_room(blocked, eligible, staying, kv):
            return blocked, []  # even every victim gone would not make room
        needs_slot = blocked not in running and len(running) >= max_running
        if not needs_slot and preemption_makes_room(blocked, [], others, kv, upper_bound=False):
            return blocked, []  # it fits now (pages came back since it was blocked)
    return blocked, eligible[:1]
