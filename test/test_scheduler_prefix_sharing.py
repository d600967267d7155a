"""In-batch prefix sharing: a queued request waits while a running request still prefilling shares
more whole prompt blocks with it than are cached, then hits all of them.

Oracles: block counts worked out from how the prompts are built (a shared prefix of ``k`` whole
128-token blocks, own suffixes after it), a brute-force comparison of the prompts' token lists
for the index, and a cold run (radix cache disabled) for the greedy outputs.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.prefix_sharing import InflightPrefixIndex, prompt_block_hashes

#: The smallest block the model allows (a multiple of 128 and of the compression ratios), to keep
#: the prompts short
PAGE = 128
SHARED_BLOCKS = 4
NEW_TOKENS = 3


def _group(seed: int, suffix_seeds: list[int]) -> list[list[int]]:
    """Prompts of ``SHARED_BLOCKS`` shared whole blocks, each followed by its own 40 tokens."""
    shared = random_ids(SHARED_BLOCKS * PAGE, seed=seed)
    return [shared + random_ids(40, seed=t) for t in suffix_seeds]


PROMPTS = dict(zip(["A", "B"], _group(940, [941, 942])))
PROMPTS.update(zip(["g0r0", "g0r1", "g0r2"], _group(950, [960, 961, 962])))
PROMPTS.update(zip(["g1r0", "g1r1", "g1r2"], _group(951, [970, 971, 972])))
PROMPTS.update(zip(["abortA", "abortB"], _group(980, [981, 982])))


def _fake(ids: list[int], ps: int, *, ntb: int = 0, computed: int = 0, salt: str | None = None):  # noqa: ANN202
    """What the index reads of a request."""
    return SimpleNamespace(
        origin_input_ids=ids,
        block_hashes=prompt_block_hashes(ids, ps, salt),
        num_tree_blocks=ntb,
        num_computed=computed,
        max_prefix_len=lambda: len(ids) - 1,
    )


def _shared_blocks(a: list[int], b: list[int], ps: int) -> int:
    n = 0
    while (n + 1) * ps <= min(len(a), len(b)) and a[n * ps : (n + 1) * ps] == b[n * ps : (n + 1) * ps]:
        n += 1
    return n


def test_block_hashes_follow_shared_blocks_and_namespaces() -> None:
    ps = 4
    a = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    b = a[:8] + [0, 0, 0, 0, 0]
    ha, hb = prompt_block_hashes(a, ps), prompt_block_hashes(b, ps)
    assert (len(ha), len(hb)) == (2, 3)  # whole blocks only
    assert ha == hb[:2]
    assert prompt_block_hashes(b[:4] + [9, 9, 9, 9], ps)[1] != hb[1]
    assert prompt_block_hashes(a, ps, "") == ha  # "" is the shared namespace
    assert prompt_block_hashes(a, ps, "t")[0] != ha[0]
    with pytest.raises(ValueError, match="page_size"):
        prompt_block_hashes(a, 0)


def test_index_holds_exactly_by_the_rule_on_random_prompts() -> None:
    """Against a brute force over token lists: hold iff the deepest prefix ``s`` (capped at the
    blocks the queued request can hit) that some prefilling request shares is not fully cached by
    any prefilling request sharing it."""
    ps, rng = 4, random.Random(7)
    for _ in range(300):
        base = [rng.randrange(3) for _ in range(24)]
        prompts = [base[: rng.randrange(0, 25)] + [rng.randrange(3) for _ in range(rng.randrange(0, 12))]
                   for _ in range(5)]  # fmt: skip
        running = []
        for ids in prompts[:3]:
            nb = len(ids) // ps
            ntb = rng.randrange(0, nb + 1)
            running.append(_fake(ids, ps, ntb=ntb, computed=rng.choice([ntb * ps, len(ids)])))
        index = InflightPrefixIndex(running)
        live = [r for r in running if r.num_tree_blocks < len(r.block_hashes) and
                r.num_computed < len(r.origin_input_ids)]  # fmt: skip
        for ids in prompts[3:]:
            q = _fake(ids, ps)
            cap = (len(ids) - 1) // ps  # the last token is always computed
            shared = {id(r): min(_shared_blocks(ids, r.origin_input_ids, ps), cap) for r in live}
            s = max(shared.values(), default=0)
            want = s > 0 and max(r.num_tree_blocks for r in live if shared[id(r)] >= s) < s
            assert index.holds(q, ps) == want, (ids, [(r.origin_input_ids, r.num_tree_blocks) for r in live])


def _step(s, res: dict) -> None:  # noqa: ANN001
    """One scheduler step; its outputs appended to ``res`` (as ``scheduler_testutil.drain``)."""
    out = s.step()
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": []})
        r["ids"] += out.output_ids[i]
        r["cached"] = out.cached_tokens[i]
        r["finish"] = out.finished_reasons[i]


def _running(s, rid: str):  # noqa: ANN001, ANN202
    return next((r for r in s.running if r.rid == rid), None)


@pytest.fixture(scope="module")
def cold(sched_model_dir: str) -> dict[str, list[int]]:
    """Every prompt's greedy output with the radix cache disabled (nothing shared)."""
    s = make_scheduler(sched_model_dir, disable_radix_cache=True, page_size=PAGE)
    for rid, ids in PROMPTS.items():
        submit(s, rid, ids, NEW_TOKENS)
    return {rid: r["ids"] for rid, r in drain(s).items()}


# without the overlap schedule in the slow tier: the same policy code, results seen a step earlier
@pytest.mark.parametrize("overlap", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_request_arriving_mid_prefill_waits_for_every_shared_block(
    sched_model_dir: str, cold: dict[str, list[int]], overlap: bool
) -> None:
    """A's prompt is 4 shared blocks + 40 tokens, prefilled in chunks of 2 blocks. B (the same 4
    blocks + its own 40 tokens) arrives when A has cached 2 blocks: it is not admitted until A has
    cached all 4, and then hits 4 blocks (admitted at once it would hit 2 and prefill the other
    two again). Outputs equal cold runs."""
    s = make_scheduler(
        sched_model_dir, page_size=PAGE, chunked_prefill_size=2 * PAGE, disable_overlap_schedule=not overlap
    )
    res: dict = {}
    submit(s, "A", PROMPTS["A"], NEW_TOKENS)
    a = None
    for _ in range(10):
        _step(s, res)
        a = _running(s, "A")
        if a is not None and a.num_tree_blocks >= 2:
            break
    assert a is not None and a.num_tree_blocks == 2
    submit(s, "B", PROMPTS["B"], NEW_TOKENS)
    admitted_with = None  # A's cached blocks when B was admitted
    held_steps = 0
    while s.has_work():
        before = a.num_tree_blocks
        _step(s, res)
        if admitted_with is None:
            if _running(s, "B") is not None or "B" in res:
                admitted_with = before
            else:
                held_steps += 1
    assert held_steps >= 1
    assert admitted_with == SHARED_BLOCKS
    assert res["A"]["cached"] == 0 and res["B"]["cached"] == SHARED_BLOCKS * PAGE
    assert {rid: r["ids"] for rid, r in res.items()} == {rid: cold[rid] for rid in ("A", "B")}
    assert_idle(s)


def test_groups_arriving_together_hit_their_whole_shared_prompt(
    sched_model_dir: str, cold: dict[str, list[int]]
) -> None:
    """Two groups of three requests, queued at once; each group shares a 4-block prompt and each
    request has its own 40-token suffix; chunks of 2 blocks. The first request of each group
    prefills the group's prompt, the other two wait for all 4 blocks (not the first 2) and hit
    them. Outputs equal cold runs."""
    rids = [f"g{g}r{i}" for g in range(2) for i in range(3)]
    s = make_scheduler(sched_model_dir, page_size=PAGE, chunked_prefill_size=2 * PAGE)
    for rid in rids:
        submit(s, rid, PROMPTS[rid], NEW_TOKENS)
    res = drain(s)
    assert {rid: r["cached"] for rid, r in res.items()} == {
        rid: 0 if rid.endswith("r0") else SHARED_BLOCKS * PAGE for rid in rids
    }
    assert {rid: r["ids"] for rid, r in res.items()} == {rid: cold[rid] for rid in rids}
    assert_idle(s)


def test_held_request_is_admitted_when_its_sharer_is_aborted(
    sched_model_dir: str, cold: dict[str, list[int]]
) -> None:
    """A (4 shared blocks + 40 tokens) prefills one block per step. B arrives after A's second
    chunk and is held; A computes its third block and is aborted: B is admitted at the next step
    and hits the 3 blocks A completed (an aborted request's completed blocks are cached). B's
    output equals its cold run."""
    s = make_scheduler(
        sched_model_dir, page_size=PAGE, chunked_prefill_size=PAGE, disable_overlap_schedule=True
    )
    res: dict = {}
    submit(s, "abortA", PROMPTS["abortA"], NEW_TOKENS)
    _step(s, res)
    _step(s, res)
    submit(s, "abortB", PROMPTS["abortB"], NEW_TOKENS)
    _step(s, res)
    assert _running(s, "abortB") is None and [r.rid for r in s.waiting] == ["abortB"]  # held
    assert _running(s, "abortA").num_tree_blocks == 3
    s.abort_request("abortA")
    _step(s, res)
    assert _running(s, "abortB") is not None
    drain(s, res)
    assert res["abortA"]["finish"]["type"] == "abort"
    assert res["abortB"]["cached"] == 3 * PAGE
    assert res["abortB"]["ids"] == cold["abortB"]
    assert_idle(s)
