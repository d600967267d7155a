"""A stateful fuzz of the real :class:`Scheduler`: arrivals, aborts, retraction, chunked prefill
and prefix hits, on the embedded tiny model on CPU with a deliberately small KV pool.

Public reports of the kinds it looks for: a request slot leaked when an admission fails with the
radix cache on (sgl-project/sglang#15840), an abort racing the final chunk of a chunked prefill
that still exposes the token that chunk samples (sgl-project/sglang#34112,
sgl-project/sglang#34149), a queue that never moves again after a near-capacity request
(sgl-project/sglang#39271, vllm-project/vllm#39734); and wrong tokens after a retraction or after
an eviction of the prefix cache.

The scheduler runs with 128-token pages, a 5-page pool (640 tokens: two long prompts do not fit
at once, so requests are retracted and the radix cache evicted), 96-token prefill chunks (chunk
ends fall inside pages and windows) and at most 4 running requests. The rules, driven by a seeded
walk weighted to keep the pool under pressure (the fast tier) or by hypothesis (slow tier):

* ``add``: a greedy request whose prompt is a cut of one of two shared prefixes plus a random
  suffix (prefix hits on whole pages), with a random ``max_new_tokens``, ``ignore_eos`` or not,
  and sometimes stop token ids or a stop string the model is known to produce;
* ``abort``: a queued, running or mid-chunked-prefill request (or an unknown / finished rid);
* ``step``: one to four scheduler steps, collecting the streamed outputs;
* ``flush``: ``flush_cache`` when idle, which must then leave no page in use.

Invariants after every rule, computed from the radix tree's nodes and the requests' page lists
directly (not from the allocators' or the tree's own counters, which they check): per page space
(block pages: CSA main, CSA indexer and HCA entries under one id; window pages: sliding-window KV
and the compressor overlap snapshots under one id; request slots: the live compressor state)
free + held by requests + held by the radix tree == total, no page held twice; no two live
requests share a request slot, and a running request's synced device page-table row lists its
own pages; every tree node's lock count equals the number of live requests whose locked path
passes through it, and the tree's evictable sizes are the pages of its unlocked nodes.

At the end everything is drained. Oracle: each request run alone on a fresh scheduler with an
ample pool, no chunking and no radix cache (a cold run): a request that was not aborted has its
tokens and finish reason, an aborted one streamed a prefix of its tokens and nothing it sampled
after the abort (sgl-project/sglang#34149: the outputs it had when aborted); every request got
exactly one finish and no output after it; after a flush every page is back.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from scheduler_testutil import make_scheduler
from sglang_v4.managers.io_struct import BatchTokenIDOut, TokenizedGenerateReqInput
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.mem_cache.radix_node import TreeNode
from sglang_v4.sampling.sampling_params import SamplingParams

#: Tokens per block page of the fuzzed scheduler (the smallest the model allows: its window).
PS = 128
#: Block pages of its KV pool.
POOL_PAGES = 5
#: Its ``--chunked-prefill-size`` (not a multiple of the page: chunks end inside pages).
CHUNK = 96
MAX_RUNNING = 4
MAX_NEW = 12
#: Requests alive at once (queued or running) that the ``add`` rule allows.
MAX_LIVE = 6

_rng = random.Random(25)
PREFIXES = [[_rng.randrange(100, 20000) for _ in range(420)] for _ in range(2)]
#: Prompt cuts of a prefix: none, inside a page, at / around page ends, a few tokens before one
#: (with a short suffix the decode crosses the page end: pages run out mid-decode).
CUTS = [0, 60, 120, 127, 128, 129, 250, 256, 300, 375, 400]
#: Suffix lengths (the prompt's last page partly or barely filled; repeats give whole-prompt hits).
SUFFIX_LENS = [1, 3, 17, 40]


def suffix(seed: int, n: int) -> list[int]:
    """``n`` random token ids of suffix ``seed`` (a few seeds, so prompts repeat)."""
    r = random.Random(1000 * seed + n)
    return [r.randrange(100, 20000) for _ in range(n)]


def sampling_key(params: dict[str, Any]) -> tuple:
    """A hashable form of a sampling-params dict."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))


def submit(s: Scheduler, rid: str, ids: list[int], params: dict[str, Any]) -> None:
    """Queue ``rid`` with the sampling ``params`` (normalised with the scheduler's tokenizer)."""
    sp = SamplingParams.from_dict(dict(params))
    sp.normalize(s.tokenizer)
    s.add_request(TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp))


def collect(out: BatchTokenIDOut | None, res: dict[str, dict]) -> None:
    """Append one step's message to ``res`` (per rid: ``ids``, ``finish``, ``finishes``), checking
    that nothing arrives for a request after its finish."""
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": [], "finish": None, "finishes": 0})
        assert r["finishes"] == 0, f"{rid}: output after its finish"
        r["ids"] += out.output_ids[i]
        if out.finished_reasons[i] is not None:
            r["finish"] = out.finished_reasons[i]
            r["finishes"] += 1


class ColdOracle:
    """Each (prompt, sampling params) run alone on a fresh, roomy scheduler (256-token pages, no
    chunking, no radix cache, no overlap), memoised."""

    def __init__(self, model_dir: str) -> None:
        self.s = make_scheduler(
            model_dir, max_total_tokens=16 * 256, chunked_prefill_size=-1, disable_radix_cache=True,
            disable_overlap_schedule=True,
        )  # fmt: skip
        self.memo: dict[tuple, dict] = {}

    def __call__(self, ids: list[int], params: dict[str, Any]) -> dict:
        key = (tuple(ids), sampling_key(params))
        if key not in self.memo:
            submit(self.s, "cold", ids, params)
            res: dict[str, dict] = {}
            for _ in range(1000):
                if not self.s.has_work():
                    break
                collect(self.s.step(), res)
            assert not self.s.has_work()
            self.memo[key] = res["cold"]
        return self.memo[key]


class FuzzEnv:
    """What the examples share: the model, the cold oracle, stop ids / strings the model produces,
    and one fuzzed scheduler per overlap mode (rebuilt when an example left it dirty)."""

    def __init__(self, model_dir: str) -> None:
        self.model_dir = model_dir
        self.cold = ColdOracle(model_dir)
        self._sched: dict[tuple, Scheduler] = {}

    def stop_for(self, ids: list[int], kind: str, pick: int) -> dict[str, Any]:
        """Stop params that ``ids``'s greedy run reaches: its ``pick``-th output token (``kind``
        ``"ids"``) or that token's text (``"str"``, when it decodes to visible text); ``{}`` for
        ``"none"``."""
        if kind == "none":
            return {}
        out = self.cold(ids, {"max_new_tokens": MAX_NEW, "temperature": 0, "ignore_eos": True})["ids"]
        tok = out[pick % len(out)]
        if kind == "ids":
            return {"stop_token_ids": [tok]}
        text = self.cold.s.tokenizer.decode([tok]).strip()
        return {"stop": [text[:3]]} if text and "\ufffd" not in text else {}

    def scheduler(self, overlap: bool, **kw: Any) -> Scheduler:
        """The fuzzed scheduler of this overlap mode and further ``ServerArgs`` fields ``kw``,
        idle and flushed (a new one when the last example left it busy or holding pages)."""
        key = (overlap, tuple(sorted(kw.items())))
        s = self._sched.get(key)
        if s is None or s.has_work() or not s.flush_cache() or s.pool.block_alloc.used:
            s = make_scheduler(
                self.model_dir, max_total_tokens=POOL_PAGES * PS, page_size=PS, chunked_prefill_size=CHUNK,
                max_running_requests=MAX_RUNNING, disable_overlap_schedule=not overlap, **kw,
            )  # fmt: skip
            self._sched[key] = s
        return s


def _tree_nodes(root: TreeNode) -> Iterator[TreeNode]:
    stack = list(root.children.values())
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children.values())


def check_scheduler_state(s: Scheduler) -> None:
    """The invariants of the module docstring, from the tree's nodes and the requests' pages."""
    if s.last_batch is not None and s.last_batch.result_handle is not None:
        s.last_batch.result_handle.result()  # the worker thread is done writing the page table
    tree, pool = s.tree_cache, s.pool
    live = list(s.running) + list(s.waiting)
    nodes = list(_tree_nodes(tree.root))
    tree_b = [p for n in nodes for p in n.block_pages]
    tree_w = [w for n in nodes for w in n.window_pages if w is not None]
    req_b: list[int] = []
    req_w: list[int] = []
    slots: list[int] = []
    for r in live:
        req_b += r.block_pages[r.num_tree_blocks :]
        req_w += [p for k, p in r.window_pages.items() if k not in r.tree_window_spans]
        assert set(r.block_pages[: r.num_tree_blocks]) <= set(tree_b), f"{r.rid}: tree block not in the tree"
        assert {r.window_pages[k] for k in r.tree_window_spans} <= set(tree_w), f"{r.rid}: tree window"
        if r.req_pool_idx is None:
            assert not r.block_pages and not r.window_pages and r.last_node is None, (
                f"{r.rid}: pages, no slot"
            )
        else:
            slots.append(r.req_pool_idx)
    for name, alloc, tree_pages, req_pages in (
        ("block", pool.block_alloc, tree_b, req_b),
        ("window", pool.window_alloc, tree_w, req_w),
    ):
        held = tree_pages + req_pages
        assert len(set(held)) == len(held), f"{name} page held twice"
        assert all(alloc.is_allocated(p) for p in held), f"{name} page held but free"
        assert alloc.available + len(held) == alloc.num_pages, (
            f"{name} pages: {alloc.available} free + {len(tree_pages)} tree + {len(req_pages)} requests "
            f"!= {alloc.num_pages}"
        )
    assert len(set(slots)) == len(slots), "a request slot shared by two live requests"
    assert pool.req_slots.available + len(slots) == pool.req_slots.size, "request slots leaked"
    rt = pool.req_to_page
    for r in s.running:
        k = r.req_pool_idx
        if k is not None and rt._lists[k] is r.block_pages:
            n = int(rt._synced[k])
            assert rt._host[k, :n].tolist() == r.block_pages[:n], f"{r.rid}: stale page-table row"
            assert rt.table[k, :n].tolist() == r.block_pages[:n], f"{r.rid}: stale device page-table row"
    want: dict[int, int] = {}
    for r in live:
        node = r.last_node
        if node is None:
            continue
        assert node.alive, f"{r.rid}: locked node evicted"
        while node is not tree.root:
            want[id(node)] = want.get(id(node), 0) + 1
            node = node.parent
    for n in nodes:
        assert n.lock_ref == want.get(id(n), 0), f"{n}: lock_ref, {want.get(id(n), 0)} locks pass through"
        assert n.num_windows == sum(w is not None for w in n.window_pages)
    free_b = sum(n.num_blocks for n in nodes if n.lock_ref == 0)
    free_w = sum(n.num_windows for n in nodes if n.lock_ref == 0)
    assert tree.evictable_sizes() == (free_b, free_w)
    assert tree.total_pages() == (len(tree_b), len(tree_w))


class SchedulerFuzz(RuleBasedStateMachine):
    """See the module docstring; ``env`` is set by the test that runs it."""

    env: FuzzEnv
    #: Further ``ServerArgs`` fields of the fuzzed scheduler.
    sched_kw: dict[str, Any] = {}

    @initialize(overlap=st.booleans())
    def setup(self, overlap: bool) -> None:
        self.s = self.env.scheduler(overlap, **self.sched_kw)
        self.res: dict[str, dict] = {}
        self.reqs: dict[str, tuple[list[int], dict[str, Any]]] = {}
        self.aborted: set[str] = set()
        self.outputs_at_abort: dict[str, int] = {}
        self.aborted_mid_prefill = 0
        self.count = 0

    def _live(self) -> list[Any]:
        return list(self.s.running) + list(self.s.waiting)

    @precondition(lambda self: len(self._live()) < MAX_LIVE)
    @rule(
        prefix=st.integers(0, 1),
        cut=st.sampled_from(CUTS),
        suffix_len=st.sampled_from(SUFFIX_LENS),
        suffix_seed=st.integers(0, 1),
        n=st.integers(1, MAX_NEW),
        ignore_eos=st.booleans(),
        stop=st.sampled_from(["none", "none", "none", "ids", "str"]),
        pick=st.integers(0, 7),
    )
    def add(
        self,
        prefix: int,
        cut: int,
        suffix_len: int,
        suffix_seed: int,
        n: int,
        ignore_eos: bool,
        stop: str,
        pick: int,
    ) -> None:
        ids = PREFIXES[prefix][:cut] + suffix(suffix_seed, suffix_len)
        params: dict[str, Any] = {"max_new_tokens": n, "temperature": 0, "ignore_eos": ignore_eos}
        params.update(self.env.stop_for(ids, stop, pick))
        rid = f"r{self.count}"
        self.count += 1
        self.reqs[rid] = (ids, params)
        submit(self.s, rid, ids, params)

    @precondition(lambda self: bool(self.reqs))
    @rule(where=st.sampled_from(["running", "waiting", "prefilling", "any"]), pick=st.integers(0, 99))
    def abort(self, where: str, pick: int) -> None:
        s = self.s
        if where == "running":
            cands = [r.rid for r in s.running]
        elif where == "waiting":
            cands = [r.rid for r in s.waiting]
        elif where == "prefilling":  # mid chunked prefill: some of the prompt computed
            cands = [r.rid for r in s.running if 0 < r.num_computed < len(r.origin_input_ids)]
        else:  # also a finished or unknown rid: must change nothing
            cands = sorted(self.reqs) + ["no-such-rid"]
        if not cands:
            return
        rid = cands[pick % len(cands)]
        for r in self._live():
            if r.rid == rid:
                self.aborted.add(rid)
                self.outputs_at_abort[rid] = len(r.output_ids)
        if any(r.rid == rid and 0 < r.num_computed < len(r.origin_input_ids) for r in s.running):
            self.aborted_mid_prefill += 1
        s.abort_request(rid)

    @rule(k=st.integers(1, 4))
    def step(self, k: int) -> None:
        for _ in range(k):
            collect(self.s.step(), self.res)

    @precondition(lambda self: not self.s.has_work())
    @rule()
    def flush(self) -> None:
        s = self.s
        assert s.flush_cache()
        assert s.pool.block_alloc.used == 0 and s.pool.window_alloc.used == 0
        assert s.pool.req_slots.available == s.pool.req_slots.size

    @invariant()
    def pages_and_locks(self) -> None:
        if hasattr(self, "s"):
            check_scheduler_state(self.s)

    def teardown(self) -> None:
        if not hasattr(self, "s"):
            return
        s = self.s
        for _ in range(5000):
            if not s.has_work():
                break
            collect(s.step(), self.res)
            check_scheduler_state(s)
        assert not s.has_work(), "requests stuck: the scheduler did not finish"
        for rid, (ids, params) in self.reqs.items():
            got = self.res.get(rid)
            assert got is not None and got["finishes"] == 1, f"{rid}: {got and got['finishes']} finishes"
            cold = self.env.cold(ids, params)
            if rid in self.aborted:
                assert got["finish"]["type"] == "abort", (rid, got["finish"])
                assert got["ids"] == cold["ids"][: len(got["ids"])], f"{rid}: aborted output not a prefix"
                n = self.outputs_at_abort[rid]
                assert len(got["ids"]) == n, f"{rid}: {len(got['ids'])} tokens streamed, {n} when aborted"
            else:
                assert got["ids"] == cold["ids"], f"{rid} ({len(ids)} prompt tokens, {params}): tokens differ"
                assert got["finish"] == cold["finish"], (rid, got["finish"], cold["finish"])
        assert s.flush_cache()
        assert s.pool.block_alloc.used == 0 and s.pool.window_alloc.used == 0
        assert s.pool.req_slots.available == s.pool.req_slots.size


@pytest.fixture(scope="module")
def fuzz_env(default_model_dir: str) -> FuzzEnv:
    """The embedded model's :class:`FuzzEnv` (its cold runs memoised for the module)."""
    return FuzzEnv(default_model_dir)


def run_hypothesis(env: FuzzEnv, examples: int, steps: int) -> None:
    """Hypothesis drives :class:`SchedulerFuzz` (derandomized, no example database)."""
    SchedulerFuzz.env = env
    cfg = settings(
        max_examples=examples,
        stateful_step_count=steps,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    run_state_machine_as_test(SchedulerFuzz, settings=cfg)


def random_walk(
    env: FuzzEnv, seed: int, num_rules: int, overlap: bool, sched_kw: dict[str, Any] | None = None
) -> SchedulerFuzz:
    """The same rules and invariants driven by a seeded ``random.Random`` with weights that keep
    the pool under pressure (bursts of arrivals; hypothesis's small first examples rarely
    retract); returns the machine after its teardown (its requests and results)."""
    rng = random.Random(seed)
    SchedulerFuzz.env = env
    m = SchedulerFuzz()
    m.setup(overlap)
    for _ in range(num_rules):
        x = rng.random()
        if x < 0.35 and len(m._live()) < MAX_LIVE:
            m.add(
                prefix=rng.randrange(2), cut=rng.choice(CUTS), suffix_len=rng.choice(SUFFIX_LENS),
                suffix_seed=rng.randrange(2), n=rng.randint(1, MAX_NEW), ignore_eos=rng.random() < 0.5,
                stop=rng.choice(["none", "none", "none", "ids", "str"]), pick=rng.randrange(8),
            )  # fmt: skip
        elif x < 0.42 and m.reqs:
            m.abort(
                where=rng.choice(["running", "waiting", "prefilling", "prefilling", "any"]),
                pick=rng.randrange(100),
            )
        elif x < 0.47 and not m.s.has_work():
            m.flush()
        else:
            m.step(k=rng.randint(1, 4))
        m.pages_and_locks()
    m.teardown()
    return m


def test_scheduler_random_walk(fuzz_env: FuzzEnv) -> None:
    """A seeded walk with overlap scheduling (the fast tier). It reaches the states it is for:
    a retraction, an eviction, a prefix hit, an abort of a queued or running request and one in
    the middle of a chunked prefill (seed 1 reaches all of them in 25 rules; seed 11 did before a
    queued request waited for the pages of its whole sequence and no longer retracts)."""
    s = fuzz_env.scheduler(True)
    retractions, stats = s.num_retractions, s.tree_cache.stats()
    m = random_walk(fuzz_env, 1, 25, overlap=True)
    after = m.s.tree_cache.stats()
    assert m.s.num_retractions > retractions and after["evicted_blocks"] > stats["evicted_blocks"]
    assert after["hit_tokens"] > stats["hit_tokens"] and m.aborted and m.aborted_mid_prefill


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 9))
def test_scheduler_random_walk_long(fuzz_env: FuzzEnv, seed: int) -> None:
    """Longer walks, with and without overlap scheduling."""
    random_walk(fuzz_env, seed, 150, overlap=seed % 2 == 0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sched_kw",
    [
        {"schedule_policy": "lpm", "resume_interval": 2},
        {"disable_radix_cache": True, "stream_interval": 3},
    ],
)
def test_scheduler_random_walk_other_flags(fuzz_env: FuzzEnv, sched_kw: dict[str, Any]) -> None:
    """Longest-prefix-match ordering with resume states every second page; no radix cache (every
    request cold, more retractions) with outputs sent every third token."""
    random_walk(fuzz_env, 1, 100, overlap=True, sched_kw=sched_kw)
    random_walk(fuzz_env, 2, 100, overlap=False, sched_kw=sched_kw)


@pytest.mark.slow
def test_scheduler_stateful_fuzz_hypothesis(fuzz_env: FuzzEnv) -> None:
    """Hypothesis's examples of the machine (shrinks a failure to a short rule sequence)."""
    run_hypothesis(fuzz_env, examples=40, steps=40)
