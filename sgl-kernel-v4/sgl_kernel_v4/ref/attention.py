"""Sparse attention and lightning-indexer references (paper §2.3.1 eqs. 13-18, §2.3.3).

Reference file: HF ``modeling_deepseek_v4.py`` (``eager_attention_forward`` with sinks,
``DeepseekV4IndexerScorer``, ``DeepseekV4Indexer``).
"""

from __future__ import annotations

import torch


def gather_rows(flat: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather ``flat[idx]`` with ``-1`` padding.

    Args:
        flat: ``[N, d]``.
        idx: ``[T, K]`` int64, ``-1`` = none.

    Returns:
        ``(rows [T, K, d], valid [T, K] bool)``; padded rows are zeros.
    """
    valid = idx >= 0
    rows = flat[idx.clamp(min=0)]
    rows = rows.masked_fill(~valid.unsqueeze(-1), 0)
    return rows, valid


def sparse_attention(
    q: torch.Tensor,
    sources: list[tuple[torch.Tensor, torch.Tensor]],
    sinks: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Shared-KV (MQA, K = V) attention over gathered keys with a per-head sink logit.

    Args:
        q: ``[T, H, D]``.
        sources: list of ``(kv_flat [N_i, D], idx [T, K_i] int64)``; the keys of query ``t`` are the
            valid rows ``kv_flat[idx[t, j]]`` of every source (``-1`` = padding).
        sinks: ``[H]`` fp32 learned sink logits: one extra logit per head whose probability mass is
            dropped from the output (HF ``eager_attention_forward``).
        scale: softmax scale (``head_dim ** -0.5``).

    Returns:
        ``[T, H, D]`` in ``q.dtype``. A query with no valid key returns zeros.
    """
    T, H, D = q.shape
    if T == 0:
        return q.new_zeros((0, H, D))
    keys, masks = [], []
    for flat, idx in sources:
        rows, valid = gather_rows(flat, idx)
        keys.append(rows.to(q.dtype))
        masks.append(valid)
    k = torch.cat(keys, dim=1)  # [T, K, D]
    valid = torch.cat(masks, dim=1)  # [T, K]
    logits = torch.einsum("thd,tkd->thk", q.float(), k.float()) * scale
    logits = logits.masked_fill(~valid.unsqueeze(1), float("-inf"))
    sink = sinks.float().view(1, H, 1).expand(T, H, 1)
    combined = torch.cat([logits, sink], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = combined.softmax(dim=-1)[..., :-1]
    out = torch.einsum("thk,tkd->thd", probs.to(q.dtype), k)
    return out


def select_topk(scores: torch.Tensor, valid: torch.Tensor, topk: int) -> torch.Tensor:
    """Top-k positions per row under the indexer's tie rule (see ``indexer_topk``).

    Entry ``a`` beats entry ``b`` when ``scores[a] > scores[b]``, or the scores are equal and
    ``a < b`` (the lower position wins). A row keeps its ``min(topk, valid count)`` best valid
    entries, written in ascending position order, ``-1`` after them.

    Args:
        scores: ``[T, C]`` any real dtype (float scores or order-preserving integer keys); a
            ``-0.0`` score equals ``+0.0``.
        valid: ``[T, C]`` bool, False = not a candidate.
        topk: entries to keep per row (``>= 1``).

    Returns:
        ``[T, topk]`` int64 positions into the row (``0..C-1``), ascending, ``-1`` padded.
    """
    T, C = scores.shape
    out = torch.full((T, topk), -1, dtype=torch.long, device=scores.device)
    if T == 0 or C == 0:
        return out
    k = min(topk, C)
    lowest = -torch.inf if scores.is_floating_point() else torch.iinfo(scores.dtype).min
    masked = scores.masked_fill(~valid, lowest)
    thr = masked.topk(k, dim=1).values[:, k - 1 :]  # the k-th largest value (tie order irrelevant)
    above = valid & (masked > thr)
    tied = valid & (masked == thr)
    # of the entries equal to the k-th value, the lowest positions fill the remaining places
    take = above | (tied & (tied.cumsum(1) <= k - above.sum(1, keepdim=True)))
    dst = torch.where(take, take.cumsum(1) - 1, k)  # ascending position order; k = discard column
    buf = torch.full((T, k + 1), -1, dtype=torch.long, device=scores.device)
    buf.scatter_(1, dst, torch.arange(C, device=scores.device).expand(T, C))
    out[:, :k] = buf[:, :k]
    return out


def indexer_scores(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: torch.Tensor,
    candidates: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Lightning-indexer scores (paper eqs. 13-17; HF ``DeepseekV4IndexerScorer``), batch-invariant.

    ``score[t, c] = sum_h weights[t, h] * relu(scale * q[t, h] . K[candidates[t, c]])``, computed in
    float64 from the inputs' values and rounded once to fp32. Batch invariance: which blocking the
    matmul picks depends on the batch shape (rows, candidate count), which changes a float64
    result by ~1e-16 relative; rounded to fp32 (2^-24) the score is then the same bits in any
    batch or chunk, except when the exact score lies within that ~1e-16 of an fp32 rounding
    boundary (about one score in 10^8, and it then moves by one ulp). Exact zeros (every ReLU
    off) are exact in any order. A plain fp32 matmul instead moves every score by a few ulps
    between batch shapes, which flips near-ties at the top-k boundary.

    Consecutive rows that read the same slot at every column they both see (one request's tokens:
    prefixes of one entry list) are scored against that key list once, each block of rows only up
    to its last visible column (about half the work of a whole causal prefill).

    Args:
        q: ``[T, Hi, di]`` indexer queries (RoPE applied).
        weights: ``[T, Hi]`` per-head weights (``weights_proj(x) * Hi**-0.5``).
        idx_kv_flat: ``[N, di]`` flat indexer-key pool (a tensor or a row view with ``__getitem__``).
        candidates: ``[T, C]`` int64 flat slots of the visible compressed entries, ``-1`` = padding.
        scale: ``di ** -0.5``.

    Returns:
        ``[T, C]`` fp32 scores, ``-inf`` at padding.
    """
    T, C = candidates.shape
    score = torch.full((T, C), -torch.inf, dtype=torch.float32, device=q.device)
    if C == 0 or T == 0:
        return score
    valid = candidates >= 0
    H = q.shape[1]
    w64 = weights.double()
    for g0, g1, row in _shared_row_groups(candidates, valid):
        # rows g0..g1 read the same slot at every column where they have one (one request's
        # tokens): score each key once per row, each block of rows up to its last visible column
        last = _last_valid_column(valid[g0:g1])
        step = max(1, min(256, (1 << 23) // (H * max(1, int(last.max()) + 1))))  # <= 8M doubles
        for t0 in range(g0, g1, step):
            t1 = min(g1, t0 + step)
            n = int(last[t0 - g0 : t1 - g0].max()) + 1
            if n == 0:
                continue
            keys = idx_kv_flat[row[:n].clamp(min=0)].double()  # [n, di]
            s = torch.relu(torch.einsum("thd,cd->thc", q[t0:t1].double(), keys) * scale)
            score[t0:t1, :n] = torch.einsum("thc,th->tc", s, w64[t0:t1])  # rounded once to fp32
    return score.masked_fill_(~valid, -torch.inf)


def _last_valid_column(valid: torch.Tensor) -> torch.Tensor:
    """``[R]`` int64 index of each row's last True column of ``valid [R, C]`` (-1 for none)."""
    cols = torch.arange(valid.shape[1], device=valid.device)
    return torch.where(valid, cols, -1).max(1).values


def _shared_row_groups(candidates: torch.Tensor, valid: torch.Tensor) -> list[tuple[int, int, torch.Tensor]]:
    """Split ``[T, C]`` candidate rows into runs of consecutive rows that agree on every column
    both have a slot in (a request's tokens see prefixes of one entry list), each with its
    combined ``[C]`` row (``-1`` where no row of the run has a slot). Rows that do not agree with
    their run's combined row are split off alone."""
    T = candidates.shape[0]
    if T > 1:
        agree = ((candidates[1:] == candidates[:-1]) | ~valid[1:] | ~valid[:-1]).all(1)
        cuts = (torch.nonzero(~agree).flatten() + 1).tolist()
    else:
        cuts = []
    out = []
    for g0, g1 in zip([0, *cuts], [*cuts, T]):
        row = candidates[g0:g1].max(0).values
        if g1 - g0 == 1 or bool(((candidates[g0:g1] == row) | ~valid[g0:g1]).all()):
            out.append((g0, g1, row))
        else:
            out.extend((t, t + 1, candidates[t]) for t in range(g0, g1))
    return out


def indexer_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: torch.Tensor,
    candidates: torch.Tensor,
    topk: int,
    scale: float,
) -> torch.Tensor:
    """Lightning-indexer scores and top-k selection (paper eqs. 13-17).

    Scores as :func:`indexer_scores`; then, per query, the ``topk`` best valid candidates under the
    **tie rule**: candidate ``a`` beats ``b`` when ``score[a] > score[b]``, or the scores are equal
    and ``a``'s position in the candidate row is lower. Positions are compressed-entry order (the
    row lists a request's visible entries in order), so among equal scores the earlier entry wins,
    whatever the row length, batch or chunk. Equivalently: the ``topk`` largest composite keys
    ``(score, -position)``. HF's ``topk`` breaks ties arbitrarily.

    Args:
        q: ``[T, Hi, di]`` indexer queries (RoPE applied).
        weights: ``[T, Hi]`` fp32 per-head weights (``weights_proj(x) * Hi**-0.5``).
        idx_kv_flat: ``[N, di]`` flat indexer-key pool.
        candidates: ``[T, C]`` int64 flat slots of the visible compressed entries, ``-1`` = padding.
        topk: number of entries to keep.
        scale: ``di ** -0.5``.

    Returns:
        ``[T, topk]`` int64 positions into ``candidates`` (``0..C-1``) in ascending order, ``-1``
        after them where a query has fewer than ``topk`` valid candidates.
    """
    score = indexer_scores(q, weights, idx_kv_flat, candidates, scale)
    return select_topk(score, candidates >= 0, topk)
