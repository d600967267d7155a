"""``benchmark/longctx.py``: the indexer's quadratic FLOP term against a direct sum."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmark"))

from longctx import indexer_pairs  # noqa: E402


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 255, 256, 1000, 4099])
@pytest.mark.parametrize("ratio", [4, 128])
def test_indexer_pairs_is_the_sum_of_visible_counts(n: int, ratio: int) -> None:
    assert indexer_pairs(n, ratio) == sum((t + 1) // ratio for t in range(n))


def test_indexer_pairs_is_about_n_squared_over_8_for_csa() -> None:
    n = 1 << 20
    assert abs(indexer_pairs(n, 4) / (n * n / 8) - 1) < 1e-5
