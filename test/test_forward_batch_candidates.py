"""``build_forward_batch`` candidate lists (CSA/HCA) and sliding-window indices against per-token
Python-loop oracles.

The builder produces the compact form (each request's block table row + a visible count per
token; each token's two window pages) and ``expand_kv_indices`` expands it on the device; the oracle writes each token's list from the definition: entry ``w`` of the
request is visible to the token at position ``t`` iff ``w < (t + 1) // ratio``, and lives at flat
slot ``block_pages[w // (page / ratio)] * (page / ratio) + w % (page / ratio)``; -1 pads to the
batch's longest list. The window keys of the token at ``t`` are positions ``t - 127 .. t``, at
``window_pages[k // 128] * 128 + k % 128`` (-1 below 0); the token writes its own at ``t``."""

from __future__ import annotations

import random

import pytest
import torch
from sglang_v4.model_executor.forward_batch import (
    ForwardBatchBuilder,
    ReqForwardInput,
    build_forward_batch,
    expand_kv_indices,
)

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


@pytest.mark.parametrize("seed", range(6))
def test_candidates_match_oracle(seed: int) -> None:
    rng = random.Random(seed)
    shapes = [(0, 1), (0, 3), (255, 2), (0, 700), (1020, 5), (3, 1), (511, 130), (4095, 1)]
    reqs = [
        _req(rng, i + 1, *shapes[j]) for i, j in enumerate(rng.sample(range(len(shapes)), rng.randint(1, 5)))
    ]
    fb = expand_kv_indices(build_forward_batch(reqs, PAGE, WINDOW, 4, 128, "cpu"))
    for name, ratio in (("csa", 4), ("hca", 128)):
        cand = getattr(fb, name).candidates
        assert cand.dtype == torch.int64
        assert cand.tolist() == _oracle(reqs, ratio), name


def test_no_visible_entries_gives_width_zero() -> None:
    rng = random.Random(0)
    fb = expand_kv_indices(build_forward_batch([_req(rng, 1, 0, 3)], PAGE, WINDOW, 4, 128, "cpu"))
    assert tuple(fb.hca.candidates.shape) == (3, 0)
    assert fb.csa.candidates.tolist() == _oracle([_req(random.Random(0), 1, 0, 3)], 4)


@pytest.mark.parametrize("seed", range(4))
def test_window_index_matches_oracle(seed: int) -> None:
    rng = random.Random(100 + seed)
    shapes = [(0, 1), (0, 130), (127, 1), (128, 1), (200, 300), (1000, 3), (5, 250)]
    reqs = [
        _req(rng, i + 1, *shapes[j]) for i, j in enumerate(rng.sample(range(len(shapes)), rng.randint(1, 4)))
    ]
    fb = expand_kv_indices(build_forward_batch(reqs, PAGE, WINDOW, 4, 128, "cpu"))
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
    assert fb.swa_idx.tolist() == want_idx
    assert fb.swa_write.tolist() == want_write


def test_metadata_is_compact_at_long_context() -> None:
    """A 2048-token extend chunk after a 65,536-token prefix (16,896 CSA candidates per token): the
    builder's output is O(tokens + requests x block pages + windows), never tokens x candidates
    (only ``expand_kv_indices`` makes the dense ``[T, C]`` lists, on the device)."""
    rng = random.Random(7)
    prefix, n = 65536, 2048
    reqs = [_req(rng, 1, prefix, n), _req(rng, 2, 0, 5)]
    builder = ForwardBatchBuilder(PAGE, WINDOW, 4, 128, "cpu")
    meta = builder.metadata(reqs)
    T, B = n + 5, 2
    P = -(-(prefix + n) // PAGE)
    J = (prefix + n) // 4 - prefix // 4 + (prefix + n) // 128 - prefix // 128 + 1  # completed windows
    total = sum(a.size for a in meta.arrays.values())
    # per token: ids, positions, request, swa write, 2 window pages, logits row, 2 visible counts;
    # per window: m rows + previous half (CSA) + position + slot; per request: block row + state rows
    assert total <= 9 * T + B * P + J * (4 + 4 + 2) + 4 * B * (4 + 128) + 16, total
    assert meta.max_visible == {"csa": (prefix + n) // 4, "hca": (prefix + n) // 128}
    assert T * meta.max_visible["csa"] > 1000 * total  # what the dense lists would have cost
