"""Each token's keys as the kernels find them (page table + positions + visible counts) against
per-token Python-loop oracles, and the page table the builder keeps on the device.

The builder produces the compact form (a visible count per token, each token's two window pages,
the requests' rows of the device page table ``req_to_page``); the attention and indexer kernels
compute the key slots with :mod:`sgl_kernel_v4.paged`. The oracle writes each token's list from the
definition: entry ``w`` of the request is visible to the token at position ``t`` iff ``w < (t + 1) //
ratio``, and lives at flat slot ``block_pages[w // (page / ratio)] * (page / ratio) + w % (page /
ratio)``. The window keys of the token at ``t`` are positions ``t - 127 .. t``, at
``window_pages[k // 128] * 128 + k % 128`` (-1 below 0); the token writes its own at ``t``."""

from __future__ import annotations

import random
import tracemalloc

import pytest
import torch
from sgl_kernel_v4.paged import entry_slots, window_slots
from sglang_v4.mem_cache.req_to_page import ReqToPageTable
from sglang_v4.model_executor.forward_batch import ForwardBatchBuilder, ReqForwardInput, build_forward_batch

PAGE, WINDOW = 256, 128


def _req(rng: random.Random, slot: int, prefix: int, n: int) -> ReqForwardInput:
    nb = -(-(prefix + n) // PAGE)
    pages = rng.sample(range(1, 500), nb)
    lo = max(0, (prefix - WINDOW + 1) // WINDOW)
    wins = {k: rng.randrange(1, 500) for k in range(lo, (prefix + n - 1) // WINDOW + 1)}
    return ReqForwardInput(slot, [rng.randrange(5, 1000) for _ in range(n)], prefix, pages, wins, n - 1)


def _oracle(reqs: list[ReqForwardInput], ratio: int) -> list[list[int]]:
    per_page = PAGE // ratio
    rows = []
    for r in reqs:
        for i in range(len(r.input_ids)):
            t = r.prefix_len + i
            rows.append(
                [r.block_pages[w // per_page] * per_page + w % per_page for w in range((t + 1) // ratio)]
            )
    width = max((len(x) for x in rows), default=0)
    return [x + [-1] * (width - len(x)) for x in rows]


def _paged_candidates(fb, name: str) -> torch.Tensor:
    """``[T, max visible]`` slots of the visible entries as the kernels compute them."""
    plan = getattr(fb, name)
    C = int(plan.visible.max())
    col = torch.arange(C)[None, :]
    ent = torch.where(col < plan.visible[:, None], col, -1)
    rows = fb.req_pool_indices[fb.token_req][:, None]
    return entry_slots(fb.req_to_page, rows, ent, fb.page_size // plan.ratio)


@pytest.mark.parametrize("seed", range(6))
def test_candidates_match_oracle(seed: int) -> None:
    rng = random.Random(seed)
    shapes = [(0, 1), (0, 3), (255, 2), (0, 700), (1020, 5), (3, 1), (511, 130), (4095, 1)]
    reqs = [
        _req(rng, i + 1, *shapes[j]) for i, j in enumerate(rng.sample(range(len(shapes)), rng.randint(1, 5)))
    ]
    fb = build_forward_batch(reqs, PAGE, WINDOW, 4, 128, "cpu")
    for name, ratio in (("csa", 4), ("hca", 128)):
        cand = _paged_candidates(fb, name)
        assert cand.dtype == torch.int64
        assert cand.tolist() == _oracle(reqs, ratio), name
        assert getattr(fb, name).max_visible == max((r.prefix_len + len(r.input_ids)) // ratio for r in reqs)


def test_no_visible_entries_gives_width_zero() -> None:
    rng = random.Random(0)
    fb = build_forward_batch([_req(rng, 1, 0, 3)], PAGE, WINDOW, 4, 128, "cpu")
    assert tuple(_paged_candidates(fb, "hca").shape) == (3, 0)
    assert _paged_candidates(fb, "csa").tolist() == _oracle([_req(random.Random(0), 1, 0, 3)], 4)


@pytest.mark.parametrize("seed", range(4))
def test_window_index_matches_oracle(seed: int) -> None:
    rng = random.Random(100 + seed)
    shapes = [(0, 1), (0, 130), (127, 1), (128, 1), (200, 300), (1000, 3), (5, 250)]
    reqs = [
        _req(rng, i + 1, *shapes[j]) for i, j in enumerate(rng.sample(range(len(shapes)), rng.randint(1, 4)))
    ]
    fb = build_forward_batch(reqs, PAGE, WINDOW, 4, 128, "cpu")
    want_idx, want_write = [], []
    for r in reqs:
        for i in range(len(r.input_ids)):
            t = r.prefix_len + i
            want_write.append(r.window_pages[t // WINDOW] * WINDOW + t % WINDOW)
            want_idx.append(
                [
                    -1 if k < 0 else r.window_pages[k // WINDOW] * WINDOW + k % WINDOW
                    for k in range(t - WINDOW + 1, t + 1)
                ]
            )
    assert window_slots(fb.positions, fb.swa_pages, WINDOW).tolist() == want_idx
    assert fb.swa_write.tolist() == want_write


def test_metadata_is_compact_at_long_context() -> None:
    """A 2048-token extend chunk after a 65,536-token prefix (16,896 CSA candidates per token): the
    builder's host metadata is O(tokens + windows + requests), never tokens x candidates nor the
    request's whole page list (the page table lives on the device), and building it allocates
    host memory of that order (tracemalloc counts numpy's buffers)."""
    rng = random.Random(7)
    prefix, n = 65536, 2048
    reqs = [_req(rng, 1, prefix, n), _req(rng, 2, 0, 5)]
    builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu")
    tracemalloc.start()
    meta = builder.metadata(reqs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    T, B = n + 5, 2
    J = (prefix + n) // 4 - prefix // 4 + (prefix + n) // 128 - prefix // 128 + 1  # completed windows
    total = sum(a.size for a in meta.arrays.values())
    # per token: ids, positions, request, swa write, 2 window pages, logits row, 2 visible counts;
    # per window: m rows + previous half (CSA) + position + slot; per request: state rows
    assert total <= 9 * T + J * (4 + 4 + 2) + 4 * B * (4 + 128) + 16, total
    assert meta.max_visible == {"csa": (prefix + n) // 4, "hca": (prefix + n) // 128}
    assert meta.num_blocks == [-(-(prefix + n) // PAGE), 1]
    assert T * meta.max_visible["csa"] > 1000 * total  # what dense per-token lists would have cost
    assert peak < 64 * total  # int64 arrays and their temporaries, not tokens x candidates


def test_page_table_uploads_only_new_pages() -> None:
    """The device page table: a request's first forward writes its whole page list, a decode step
    within a block writes nothing, crossing a block end writes one entry; a slot reused by another
    request (``invalidate``) or a swapped page is written again; rows past the context are refused."""
    table = ReqToPageTable(num_slots=4, max_pages=8, device="cpu")
    builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu", req_to_page=table)
    pages = [5, 9, 2]
    r = ReqForwardInput(1, [3] * 600, 0, pages, {k: k + 1 for k in range(5)}, 599)
    fb = builder.build([r])
    assert fb.req_to_page is table.table
    assert table.table[1, :3].tolist() == pages and (table.table[1, 3:] == -1).all()
    dec = ReqForwardInput(1, [4], 600, pages, {3: 4, 4: 5}, 0)
    assert builder.sync_pages([dec], builder.metadata([dec])) is table.table
    assert table.sync([dec], [3]) == 0  # nothing new
    pages.append(7)  # the scheduler grows the list in place
    assert table.sync([ReqForwardInput(1, [4], 768, pages, {5: 6, 6: 7}, 0)], [4]) == 1
    assert table.table[1, :4].tolist() == pages
    pages[1] = 11  # changed in place at block 1, announced by invalidate
    table.invalidate(1, 1)
    assert table.sync([ReqForwardInput(1, [4], 769, pages, {6: 7}, 0)], [4]) == 3
    assert table.table[1, :4].tolist() == pages
    pages2 = list(pages)
    pages2[2] = 12  # the radix cache swapped block 2 into a new list: written whole
    assert table.sync([ReqForwardInput(1, [4], 770, pages2, {6: 7}, 0)], [4]) == 4
    assert table.table[1, :4].tolist() == pages2
    other = [8, 3]  # a new request in slot 1 (another list): written whole
    assert table.sync([ReqForwardInput(1, [4], 300, other, {1: 2, 2: 3}, 0)], [2]) == 2
    assert table.table[1, :2].tolist() == other
    with pytest.raises(ValueError, match="context"):
        table.sync([ReqForwardInput(2, [4], 0, list(range(1, 10)), {}, 0)], [9])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("num_req_rows", [None, 16])
def test_decode_branch_matches_general_path(
    seed: int, num_req_rows: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An all-decode batch takes the vectorised decode branch; every field (CSA and HCA plans,
    snapshots at block ends, window pages on both sides of a span boundary) equals what the
    per-request general path computes for the same batch."""
    rng = random.Random(300 + seed)
    prefixes = [0, 1, 3, 126, 127, 128, 129, 254, 255, 256, 383, 511, 1023, 4095, 4096]
    reqs = [_req(rng, i + 1, rng.choice(prefixes), 1) for i in range(rng.randint(1, 12))]
    for r in reqs:
        r.logits_start = 0
    builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu")
    fast = builder.metadata(reqs, num_req_rows)
    monkeypatch.setattr(ForwardBatchBuilder, "_decode_pages", lambda self, reqs, p: None)
    slow = builder.metadata(reqs, num_req_rows)
    assert fast.arrays.keys() == slow.arrays.keys()
    for k in slow.arrays:
        assert fast.arrays[k].dtype == slow.arrays[k].dtype, k
        assert fast.arrays[k].tolist() == slow.arrays[k].tolist(), k
    assert (fast.max_visible, fast.num_blocks, fast.extend_lens, fast.prefix_lens, fast.logits_counts) == (
        slow.max_visible,
        slow.num_blocks,
        slow.extend_lens,
        slow.prefix_lens,
        slow.logits_counts,
    )


def test_decode_branch_missing_pages_raise() -> None:
    """A decode batch missing a block page or a window page fails with the general path's error."""
    builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu")
    no_block = ReqForwardInput(1, [4], 256, [7], {1: 3, 2: 4}, 0)
    with pytest.raises(ValueError, match="1 block pages for 257 tokens"):
        builder.metadata([no_block])
    no_prev_window = ReqForwardInput(2, [4], 130, [7], {1: 3}, 0)
    with pytest.raises(ValueError, match="no window page for span 0"):
        builder.metadata([no_prev_window])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("page", [256, 512])
def test_decode_closed_form_matches_general_path_at_scale(
    seed: int, page: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The closed-form decode metadata (``decode_metadata.DecodePlanner``) of large batches at every
    window / block boundary, with requests that do not sample (``logits_start = 1``) and a padded
    ``num_req_rows``, equals the general path field by field (dtype, shape and values); the
    planner's cached row templates are reused across the batches of one builder."""
    rng = random.Random(700 + seed)
    builder = ForwardBatchBuilder(page, WINDOW, 4, 128, "cpu")
    slow_builder = ForwardBatchBuilder(page, WINDOW, 4, 128, "cpu")
    monkeypatch.setattr(slow_builder, "_decode_pages", lambda reqs, p: None)
    for _ in range(4):
        B = rng.choice([1, 2, 7, 64, 257])
        reqs = []
        for i in range(B):
            edge = rng.choice([4, 128, page, 2 * page]) * rng.randint(1, 8) + rng.choice([-2, -1, 0, 1])
            prefix = max(0, edge if rng.random() < 0.7 else rng.randrange(0, 9000))
            nb = prefix // page + 1
            lo = max(0, (prefix - WINDOW + 1) // WINDOW)
            wins = {k: rng.randrange(1, 5000) for k in range(lo, prefix // WINDOW + 1)}
            pages = rng.sample(range(1, 50000), nb)
            ls = 1 if rng.random() < 0.1 else rng.choice([0, 0, 0, -3])
            reqs.append(ReqForwardInput(i + 1, [rng.randrange(-50, 1000)], prefix, pages, wins, ls))
        rows = rng.choice([None, B + rng.randrange(0, 9)])
        fast = builder.metadata(reqs, rows)
        slow = slow_builder.metadata(reqs, rows)
        assert list(fast.arrays) == list(slow.arrays)
        for k in slow.arrays:
            assert fast.arrays[k].dtype == slow.arrays[k].dtype, k
            assert fast.arrays[k].shape == slow.arrays[k].shape, k
            assert fast.arrays[k].tolist() == slow.arrays[k].tolist(), k
        assert fast.max_visible == slow.max_visible
        assert fast.num_blocks == slow.num_blocks
        assert fast.extend_lens == slow.extend_lens
        assert fast.prefix_lens == slow.prefix_lens
        assert fast.logits_counts == slow.logits_counts
        assert fast.num_req_rows == slow.num_req_rows


@pytest.mark.parametrize("seed", range(3))
def test_incremental_decode_metadata_equals_full_rebuild(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """One builder across many decode steps (its planner keeps ``buf_rows`` from the last step
    and updates only what changed) with requests joining at random places and positions, leaving,
    and the padded row count changing: every step equals the general path built from scratch."""
    rng = random.Random(900 + seed)
    builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu")
    slow_builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu")
    monkeypatch.setattr(slow_builder, "_decode_pages", lambda reqs, p: None)
    pos: list[int] = [rng.randrange(0, 700) for _ in range(rng.randint(1, 40))]
    for _ in range(150):
        r = rng.random()
        if r < 0.08 and len(pos) > 1:  # finishes / leaves
            del pos[rng.randrange(len(pos))]
        elif r < 0.16:  # joins (after its prefill) anywhere in the batch
            pos.insert(rng.randrange(len(pos) + 1), rng.randrange(0, 700))
        elif r < 0.2:  # a retracted request comes back at a lower position
            pos[rng.randrange(len(pos))] = rng.randrange(0, 300)
        reqs = []
        for i, p in enumerate(pos):
            lo = max(0, (p - WINDOW + 1) // WINDOW)
            wins = {k: 10 * i + k + 1 for k in range(lo, p // WINDOW + 1)}
            reqs.append(ReqForwardInput(i + 1, [i], p, list(range(p // PAGE + 1)), wins, 0))
        rows = len(reqs) if rng.random() < 0.8 else len(reqs) + rng.randrange(1, 4)
        fast = builder.metadata(reqs, rows)
        slow = slow_builder.metadata(reqs, rows)
        for k in slow.arrays:
            assert fast.arrays[k].shape == slow.arrays[k].shape, k
            assert fast.arrays[k].tolist() == slow.arrays[k].tolist(), k
        fast.arrays["csa.buf_rows"][...] = -7  # a consumer writing to it does not change the next step
        fast.arrays["hca.buf_rows"][...] = -7
        pos = [p + 1 for p in pos]
