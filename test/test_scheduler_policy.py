"""Per-step costs and budgets of the scheduler: the longest-prefix ordering does not touch the radix
tree's LRU state and falls back to FCFS past 128 queued requests; the prefill budget of a step
(``--chunked-prefill-size`` while requests decode, ``--max-prefill-tokens`` otherwise); messages
carry only new ids and the detokenizer's per-request state stays bounded; the start-up warm-up
(forced on CPU) returns every page and slot and leaves the outputs unchanged; every
``--schedule-policy`` SGLang accepts is honoured (or refused naming it) and orders the queue as
SGLang defines it.

Oracles: the tree's own ``match_prefix`` for match lengths, a snapshot of every node's LRU stamp,
the flag values, the full decode of the ids by the tokenizer, a scheduler without warm-up, SGLang's
parser's policy choices and policy definitions.
"""

from __future__ import annotations

import random

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import assert_idle, drain, make_scheduler, submit
from sglang_v4.managers.detokenizer_manager import DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length
from sglang_v4.managers.scheduler import LPM_FALLBACK_QUEUE_LEN, Scheduler
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache
from sglang_v4.model_executor.warmup import warmup_grid, warmup_kernels


def _stamps(tree: RadixCache) -> list[tuple[int, int, int]]:
    out, todo = [], [tree.root]
    while todo:
        n = todo.pop()
        out.append((n.uid, n.last_access, n.num_blocks))
        todo.extend(n.children.values())
    return sorted(out)


def test_match_prefix_len_is_read_only() -> None:
    ps = 4
    tree = RadixCache(PageAllocator(200, "b"), PageAllocator(200, "w"), page_size=ps)
    rng = random.Random(0)
    seqs = [[rng.randrange(3) for _ in range(rng.randrange(4, 40))] for _ in range(30)]
    for s in seqs:
        nb = len(s) // ps
        blocks = tree.block_alloc.alloc(nb)
        wins = tree.window_alloc.alloc(nb)
        tb, tw = tree.insert(s[: nb * ps], blocks, wins)
        tree.block_alloc.free([b for b, t in zip(blocks, tb) if t != b])
        tree.window_alloc.free([w for w, t in zip(wins, tw) if t is not None and t != w])
    queries = [[rng.randrange(3) for _ in range(rng.randrange(0, 48))] for _ in range(200)]
    before = _stamps(tree)
    lens = [tree.match_prefix_len(q) for q in queries]
    assert _stamps(tree) == before  # no stamp, no split
    assert lens == [tree.match_prefix(q).num_tokens for q in queries]


@pytest.fixture(scope="module")
def cached_sched(sched_model_dir: str) -> Scheduler:
    """A scheduler whose radix cache holds two blocks of a 600-token prompt."""
    s = make_scheduler(sched_model_dir, schedule_policy="lpm")
    submit(s, "fill", random_ids(600, seed=500), 1)
    drain(s)
    return s


def test_lpm_orders_by_cached_prefix_then_falls_back_to_fcfs(cached_sched: Scheduler) -> None:
    s = cached_sched
    from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
    from sglang_v4.managers.req import Req
    from sglang_v4.sampling.sampling_params import SamplingParams

    shared = random_ids(600, seed=500)

    def req(rid: str, ids: list[int]) -> Req:
        return Req.from_tokenized(TokenizedGenerateReqInput(rid, None, ids, SamplingParams()))

    stamps = _stamps(s.tree_cache)
    cold, half, full = (
        req("cold", random_ids(600, 501)),
        req("half", shared[:300] + [1] * 300),
        req("full", shared),
    )
    s.waiting.extend([cold, half, full])
    s._sort_waiting()
    assert [r.rid for r in s.waiting] == ["full", "half", "cold"]  # 512, 256, 0 cached tokens
    assert _stamps(s.tree_cache) == stamps  # ordering touched no LRU stamp
    s.waiting.clear()
    many = [req(f"q{i}", random_ids(300, 600 + i)) for i in range(LPM_FALLBACK_QUEUE_LEN)] + [full]
    s.waiting.extend(many)
    s._sort_waiting()
    assert list(s.waiting) == many  # 129 queued: first come first served
    s.waiting.clear()


def _record_steps(s: Scheduler) -> list[tuple[int, int]]:
    """(prompt tokens, decode requests) of every launched batch."""
    seen: list[tuple[int, int]] = []
    launch = s._launch

    def rec(batch):  # type: ignore[no-untyped-def]
        seen.append((sum(n for n, smp in zip(batch.extend_lens, batch.sample_flags) if not (n == 1 and smp)),
                     sum(1 for n, smp in zip(batch.extend_lens, batch.sample_flags) if n == 1 and smp)))  # fmt: skip
        launch(batch)

    s._launch = rec  # type: ignore[method-assign]
    return seen


def test_prefill_budget_protects_decode(sched_model_dir: str) -> None:
    """Chunk 128, max prefill 512: while a request decodes, a step carries at most 128 prompt
    tokens; a step without decoding requests up to 512 (chunks of at most 128 each)."""
    s = make_scheduler(sched_model_dir, chunked_prefill_size=128, max_prefill_tokens=512)
    seen = _record_steps(s)
    lens = [100, 300, 300, 300]
    for i, n in enumerate(lens):
        submit(s, f"p{i}", random_ids(n, seed=700 + i), 4)
    drain(s)
    assert seen[0] == (100 + 128 + 128 + 128, 0)  # nothing decodes yet: chunks up to 512 in all
    assert seen[1] == (128, 1)  # p0 decodes: one chunk of 128
    assert all(p <= 128 for p, d in seen if d > 0)
    assert all(p <= 512 for p, _ in seen)
    assert sum(p for p, _ in seen) == sum(lens)
    assert_idle(s)


def test_messages_carry_only_new_ids_and_detokenizer_state_stays_bounded(sched_model_dir: str) -> None:
    s = make_scheduler(sched_model_dir)
    submit(s, "s", random_ids(50, seed=800), 40, stream=True)
    dm = DetokenizerManager(s.tokenizer)
    ids, text, held = [], "", []
    while s.has_work():
        out = s.step()
        if out is None:
            continue
        assert not hasattr(out, "decode_ids")
        ids += out.output_ids[0]
        assert len(out.output_ids[0]) <= 1
        st = dm.handle_batch_token_id_out(out)
        text += st.output_strs[0]
        if "s" in dm.decode_status:
            held.append(len(dm.decode_status["s"].ids))
    assert len(ids) == 40 and max(held) < 10
    assert text == s.tokenizer.decode(ids)
    # a non-streaming request: its first token, then everything with the finish
    submit(s, "n", random_ids(50, seed=801), 30)
    msgs = []
    while s.has_work():
        out = s.step()
        if out is not None:
            msgs.append(out)
    assert [len(m.output_ids[0]) for m in msgs] == [1, 29]
    assert msgs[-1].finished_reasons[0] == finish_length(30)


def test_detokenizer_message_without_history(sched_model_dir: str) -> None:
    """The detokenizer rebuilds the text from increments alone (the scheduler never resends)."""
    s = make_scheduler(sched_model_dir)
    dm = DetokenizerManager(s.tokenizer)
    ids = s.tokenizer.encode("Hello 世界, a longer sentence with 😀 and more words.")
    out = ""
    for k, t in enumerate(ids):
        m = BatchTokenIDOut.empty()
        m.append(rid="r", finished_reason=finish_length(k + 1) if k == len(ids) - 1 else None,
                 output_ids=[t], prompt_tokens=1, completion_tokens=k + 1)  # fmt: skip
        out += dm.handle_batch_token_id_out(m).output_strs[0]
    assert out == s.tokenizer.decode(ids)


def test_warmup_grid_covers_class_boundaries() -> None:
    grid = warmup_grid(chunk=300, max_ctx=1100, window=128)
    tokens = {t for bs, t, _ in grid if bs == 1}
    assert {1, 4, 5, 16, 17, 64, 65, 127, 128, 129, 256, 257, 300} <= tokens and max(tokens) == 300
    ctxs = {c for _, _, c in grid}
    assert ctxs == {128, 133, 256, 261, 512, 517, 1024, 1029}
    assert all(t <= c for _, t, c in grid)
    assert {bs for bs, t, _ in grid if t == 1} >= {1, 2, 64}


def test_warmup_grid_adds_each_moe_tile_class_once() -> None:
    """160 FP4 experts, top-6 (``flash-43l``): by the documented tile rule (pair mode up to
    max(6, 160 / 4) = 40 pairs, then 16 / 32 / 96 pairs per expert) the classes begin at 1, 7, 427,
    854 and 2,561 tokens; the bf16 rule (16 / 64 pairs per expert) at 1, 427, 1,707."""
    from sgl_kernel_v4.triton.moe_fp4 import tile_class_token_counts

    assert tile_class_token_counts(160, 6, 8192, fp4=True) == [1, 7, 427, 854, 2561]
    assert tile_class_token_counts(160, 6, 8192, fp4=False) == [1, 427, 1707]
    assert tile_class_token_counts(160, 6, 1000, fp4=True) == [1, 7, 427, 854]
    with pytest.raises(ValueError, match="max_tokens"):
        tile_class_token_counts(160, 6, 0, fp4=True)
    base = warmup_grid(chunk=8192, max_ctx=4096, window=128)
    grid = warmup_grid(chunk=8192, max_ctx=4096, window=128, moe_tokens=[7, 427, 854, 2561, 9000])
    added = [p for p in grid if p not in base]
    # once each, at the smallest context holding them; 9000 exceeds the chunk
    assert added == [(1, 7, 128), (1, 427, 512), (1, 854, 1024), (1, 2561, 4096)], added


def test_forced_warmup_returns_everything_and_changes_no_output(sched_model_dir: str) -> None:
    ids = random_ids(150, seed=900)
    ref = make_scheduler(sched_model_dir, chunked_prefill_size=64)
    submit(ref, "r", ids, 5, return_logprob=True)
    want = drain(ref)["r"]
    s = make_scheduler(sched_model_dir, chunked_prefill_size=64)
    stats = warmup_kernels(s.runner, s.server_args, force=True, max_context=300)
    assert stats["forwards"] > 20
    assert_idle(s)
    submit(s, "r", ids, 5, return_logprob=True)
    got = drain(s)["r"]
    assert got["ids"] == want["ids"] and got["lp"] == pytest.approx(want["lp"], abs=1e-5)


# without the overlap schedule in the slow tier: the deferral is the same policy code (the default,
# overlapped schedule sees the prefix's blocks cached one step later)
@pytest.mark.parametrize("overlap", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_requests_sharing_a_prefix_wait_for_it_to_be_cached(sched_model_dir: str, overlap: bool) -> None:
    """Six requests arriving together with the same 600-token prefix (two blocks) and their own
    40-token suffixes: the first prefills the prefix, the other five wait until its blocks are in
    the radix cache and then hit them (512 cached tokens each; admitted with it, none would hit).
    Their outputs equal those of a scheduler with the radix cache disabled (cold runs)."""
    shared = random_ids(600, seed=900)
    prompts = {f"s{i}": shared + random_ids(40, seed=910 + i) for i in range(6)}
    s = make_scheduler(sched_model_dir, disable_overlap_schedule=not overlap)
    cold = make_scheduler(sched_model_dir, disable_radix_cache=True, disable_overlap_schedule=not overlap)
    for sch in (s, cold):
        for rid, ids in prompts.items():
            submit(sch, rid, ids, 4)
    res, ref = drain(s), drain(cold)
    assert res["s0"]["cached"] == 0
    assert [res[f"s{i}"]["cached"] for i in range(1, 6)] == [512] * 5
    assert {rid: r["ids"] for rid, r in res.items()} == {rid: r["ids"] for rid, r in ref.items()}
    assert_idle(s)


def test_a_request_without_a_shared_prefix_is_not_held_back(sched_model_dir: str) -> None:
    """A queued request that shares no first block with the prompt being prefilled is admitted in
    the same step as it (the deferral is only for sharers)."""
    s = make_scheduler(sched_model_dir)
    seen = _record_steps(s)
    submit(s, "a", random_ids(600, seed=920), 2)
    submit(s, "b", random_ids(600, seed=930), 2)
    drain(s)
    assert seen[0] == (1200, 0)
    assert_idle(s)


# ---------------------------------------------------------------------------------------------
# --schedule-policy: SGLang's policies. Oracles: SGLang's own parser's choices, the policies'
# definitions in SGLang's schedule_policy (and its dfs-weight function on this tree when
# importable), the tree's own match_prefix, the max_new_tokens given.


def test_every_sglang_schedule_policy_is_accepted_or_refused_naming_it() -> None:
    from sglang_v4.server_args import ServerArgs

    accepted = []
    choices = ["lpm", "random", "fcfs", "dfs-weight", "lof"]  # SGLang 0.5's long-standing ones
    sg = pytest.importorskip("sglang.srt.server_args")
    import argparse

    p = argparse.ArgumentParser()
    sg.ServerArgs.add_cli_args(p)
    (action,) = [a for a in p._actions if "--schedule-policy" in a.option_strings]
    choices = sorted(set(choices) | set(action.choices))
    for policy in choices:
        try:
            accepted.append(ServerArgs(device="cpu", schedule_policy=policy).schedule_policy)
        except ValueError as e:
            assert str(e).startswith("schedule_policy") and policy in str(e), e
    assert {"lpm", "random", "fcfs", "dfs-weight", "lof", "hrrn", "shortest-prefill-first"} <= set(accepted)
    with pytest.raises(ValueError, match="schedule_policy 'shortest-prefill-first' needs the radix cache"):
        ServerArgs(device="cpu", schedule_policy="shortest-prefill-first", disable_radix_cache=True)
    with pytest.raises(ValueError, match="--enable-priority-scheduling"):
        ServerArgs(device="cpu", schedule_policy="priority")


@pytest.fixture(scope="module")
def two_prefixes(sched_model_dir: str) -> tuple[Scheduler, list[int], list[int]]:
    """A scheduler whose radix cache holds two 2-block prompts, A and B (one tree node each)."""
    s = make_scheduler(sched_model_dir)
    a, b = random_ids(600, seed=900), random_ids(600, seed=901)
    submit(s, "A", a, 1)
    submit(s, "B", b, 1)
    drain(s)
    return s, a, b


def _queue(s: Scheduler, reqs: list[tuple[str, list[int], int]]) -> None:
    for rid, ids, n in reqs:
        submit(s, rid, ids, n)


def _order(s: Scheduler, policy: str) -> list[str]:
    s.server_args.schedule_policy = policy
    s._sort_waiting()
    return [r.rid for r in s.waiting]


def test_dfs_weight_groups_requests_by_shared_cached_prefix(two_prefixes) -> None:  # type: ignore[no-untyped-def]
    s, a, b = two_prefixes
    tail = lambda seed: random_ids(100, seed=seed)  # noqa: E731
    _queue(s, [("x", random_ids(700, 902), 2), ("b1", b[:512] + tail(1), 2),
               ("a1", a[:512] + tail(2), 2), ("a2", a[:512] + tail(3), 2)])  # fmt: skip
    try:
        # A's subtree holds two queued requests, B's one; the request with no cached prefix last
        assert _order(s, "dfs-weight") == ["a1", "a2", "b1", "x"]
        # lpm: a1, a2 and b1 all hit 512 tokens, so they keep their arrival order
        assert _order(s, "lpm") == ["b1", "a1", "a2", "x"]
        try:  # SGLang's own ordering on this tree, where its import works (it needs torchvision)
            from sglang.srt.mem_cache.base_prefix_cache import _dfs_weight_order
        except ImportError:
            return
        waiting = list(s.waiting)
        last = [s.tree_cache.find_node(r.token_ids(0, r.seq_len - 1))[0] for r in waiting]
        ref = _dfs_weight_order(s.tree_cache.root, last, lambda n: n)
        assert _order(s, "dfs-weight") == [waiting[i].rid for i in ref]
    finally:
        s.waiting.clear()
        s.server_args.schedule_policy = "fcfs"


def test_shortest_prefill_lof_and_hrrn_orders(two_prefixes) -> None:  # type: ignore[no-untyped-def]
    s, a, _ = two_prefixes
    reqs = [("long", random_ids(700, 910), 5), ("hit", a[:512] + random_ids(300, 911), 50),
            ("short", random_ids(200, 912), 20)]  # fmt: skip
    _queue(s, reqs)
    try:
        todo = {rid: len(ids) - s.tree_cache.match_prefix(ids[:-1]).num_tokens for rid, ids, _ in reqs}
        assert todo == {"long": 700, "hit": 300, "short": 200}
        assert _order(s, "shortest-prefill-first") == sorted(todo, key=todo.__getitem__)
        assert _order(s, "lof") == ["hit", "short", "long"]  # max_new_tokens 50, 20, 5
        # hrrn: ratio = prefill tokens computed since arrival / tokens left to prefill
        by = {r.rid: r for r in s.waiting}
        long_, hit, short = by["long"], by["hit"], by["short"]
        long_.arrival_prefill_tokens, hit.arrival_prefill_tokens, short.arrival_prefill_tokens = 0, 650, 900
        s.prefill_tokens_done = 1000  # ratios: long 1000/700, hit 350/300, short 100/200
        assert _order(s, "hrrn") == ["long", "hit", "short"]
        s.prefill_tokens_done = 1400  # long 1400/700 = 2.0, hit 750/300 = 2.5, short 500/200 = 2.5
        assert _order(s, "hrrn") == ["hit", "short", "long"]  # the tie keeps arrival order
    finally:
        s.waiting.clear()
        s.server_args.schedule_policy = "fcfs"


def test_random_policy_is_a_seeded_shuffle(sched_model_dir: str) -> None:
    orders = []
    for seed in (1, 1, 2):
        s = make_scheduler(sched_model_dir, schedule_policy="random", random_seed=seed)
        _queue(s, [(f"r{i}", random_ids(20, seed=920 + i), 1) for i in range(8)])
        s._sort_waiting()
        orders.append([r.rid for r in s.waiting])
        s.waiting.clear()
    rids = [f"r{i}" for i in range(8)]
    assert all(sorted(o) == rids for o in orders)
    assert orders[0] == orders[1] and orders[0] != orders[2]  # same seed, same order
    assert orders[0] != rids or orders[2] != rids


def test_policy_decides_admission_order_end_to_end(sched_model_dir: str) -> None:
    """One request at a time (``max_running_requests=1``): they finish in policy order, every one
    completes, and hrrn's clock counts every prompt token computed."""
    lens = {"p5": 5, "p9": 9, "p7": 7}
    for policy, expect in (("lof", ["p9", "p7", "p5"]), ("fcfs", ["p5", "p9", "p7"])):
        s = make_scheduler(sched_model_dir, schedule_policy=policy, max_running_requests=1)
        _queue(s, [(rid, random_ids(30, seed=930 + i), n) for i, (rid, n) in enumerate(lens.items())])
        done: list[str] = []
        while s.has_work():
            out = s.step()
            for rid, fin in zip(out.rids if out else [], out.finished_reasons if out else []):
                if fin is not None:
                    done.append(rid)
        assert done == expect, policy
        assert s.prefill_tokens_done == 3 * 30  # no shared prefix: every prompt token computed
        assert_idle(s)


def test_warmup_runs_the_chunk_the_runner_serves(
    sched_model_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With chunking disabled (``-1``) the runner resolves the chunk to the context, capped to
    64 x ``sliding_window`` (1024 at a window of 16): the warm-up grid must reach that chunk (the
    largest prompt forward the scheduler ever runs), not a fixed 8192 that it never serves."""
    import sglang_v4.model_executor.warmup as warmup

    seen: list[int] = []

    def grid(chunk: int, *a: object, **k: object) -> list[tuple[int, int, int]]:
        seen.append(chunk)
        return []

    monkeypatch.setattr(warmup, "warmup_grid", grid)
    s = make_scheduler(
        sched_model_dir, chunked_prefill_size=-1, json_model_override_args='{"sliding_window": 16}'
    )
    mc = s.model_config
    assert mc.sliding_window == 16 and s.context_len > 64 * 16
    want = 64 * 16  # the documented cap: 64 window pages x sliding_window
    assert s.chunked_prefill_size == want
    warmup_kernels(s.runner, s.server_args, force=True, max_context=300)
    assert seen == [want]
    assert_idle(s)
