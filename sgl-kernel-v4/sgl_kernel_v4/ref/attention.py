"""Sparse attention and lightning-indexer references (paper §2.3.1 eqs. 13-18, §2.3.3).

Reference file: HF ``modeling_deepseek_v4.py`` (``eager_attention_forward`` with sinks,
``DeepseekV4IndexerScorer``, ``DeepseekV4Indexer``).

The ops of the table (:func:`sparse_attention`, :func:`indexer_topk`) read the pools through page
tables (:mod:`sgl_kernel_v4.paged`): a token's keys are computed from its position, its window
pages and its request's row of ``req_to_page``, never passed as a ``[tokens, candidates]`` list.
The references expand those keys for a bounded block of tokens at a time (at most
:data:`GATHER_BUDGET` gathered values), so host memory stays bounded at any context length; the
math on each block is the one of the gathered-list helpers below (:func:`attend_gathered`,
:func:`indexer_scores`, :func:`select_topk`).
"""

from __future__ import annotations

import torch

from ..paged import entry_slots, window_slots

#: Most values (keys x dims, or scores) a reference materialises for one block of tokens.
GATHER_BUDGET = 1 << 23


def gather_rows(flat: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather ``flat[idx]`` with ``-1`` padding.

    Args:
        flat: ``[N, d]`` (a tensor or a quantized row view that dequantizes on ``__getitem__``).
        idx: ``[T, K]`` int64, ``-1`` = none.

    Returns:
        ``(rows [T, K, d], valid [T, K] bool)``; padded rows are zeros.
    """
    valid = idx >= 0
    rows = flat[idx.clamp(min=0)]
    rows = rows.masked_fill(~valid.unsqueeze(-1), 0)
    return rows, valid


def attend_gathered(
    q: torch.Tensor, k: torch.Tensor, valid: torch.Tensor, sinks: torch.Tensor, scale: float
) -> torch.Tensor:
    """Shared-KV (MQA, K = V) attention over gathered keys with a per-head sink logit.

    ``q [T, H, D]``, ``k [T, K, D]`` (in q's dtype), ``valid [T, K]`` bool, ``sinks [H]`` fp32: one
    extra logit per head whose probability mass is dropped (HF ``eager_attention_forward``).
    Softmax in fp32. Returns ``[T, H, D]`` in q's dtype; a query with no valid key gets zeros.
    """
    T, H, _ = q.shape
    logits = torch.einsum("thd,tkd->thk", q.float(), k.float()) * scale
    logits = logits.masked_fill(~valid.unsqueeze(1), float("-inf"))
    sink = sinks.float().view(1, H, 1).expand(T, H, 1)
    combined = torch.cat([logits, sink], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = combined.softmax(dim=-1)[..., :-1]
    return torch.einsum("thk,tkd->thd", probs.to(q.dtype), k)


def sparse_attention(
    q: torch.Tensor,
    swa_kv: object,
    swa_pages: torch.Tensor,
    positions: torch.Tensor,
    window: int,
    sinks: torch.Tensor,
    scale: float,
    comp_kv: object | None = None,
    comp_entries: torch.Tensor | None = None,
    comp_visible: torch.Tensor | None = None,
    req_to_page: torch.Tensor | None = None,
    req_rows: torch.Tensor | None = None,
    token_req: torch.Tensor | None = None,
    entries_per_page: int = 1,
) -> torch.Tensor:
    """DeepSeek-V4 attention of each token over its sliding window and its compressed entries.

    Keys of token ``t`` (:mod:`sgl_kernel_v4.paged` gives the slots): the ``window`` positions
    ``p - window + 1 .. p`` of its sliding window (``swa_kv``), then, with ``comp_kv``, either
    the entries listed in ``comp_entries[t]`` (CSA: the indexer's top-k) or every entry
    ``w < comp_visible[t]`` (HCA), of its request ``token_req[t]``; plus a per-head sink logit.

    Args:
        q: ``[T, H, D]`` queries (RoPE applied).
        swa_kv: the window pool layer (``[N, D]`` float tensor or a quantized row view).
        swa_pages: ``[T, 2]`` int64 window pages of the span before each token's and of its own.
        positions: ``[T]`` int64 token positions.
        window: sliding window (positions per window page).
        sinks: ``[H]`` fp32 sink logits; scale: softmax scale (``head_dim ** -0.5``).
        comp_kv: the compressed pool layer, or ``None`` (sliding-only layer).
        comp_entries: ``[T, K]`` int64 entry indices (``-1`` = none), or ``None``.
        comp_visible: ``[T]`` int64 visible entry counts (used when ``comp_entries`` is ``None``).
        req_to_page: ``[R, P]`` page table; req_rows: ``[B]`` its row per request;
        token_req: ``[T]`` request of each token; entries_per_page: ``e`` of ``comp_kv``.

    Returns:
        ``[T, H, D]`` in q's dtype; a token with no key gets zeros.

    Raises:
        ValueError: ``comp_kv`` without its page table or entry source.
    """
    T, H, D = q.shape
    out = q.new_zeros((T, H, D))
    if T == 0:
        return out
    comp = comp_kv is not None
    if comp and (req_to_page is None or req_rows is None or token_req is None):
        raise ValueError("comp_kv: needs req_to_page, req_rows and token_req")
    if comp and comp_entries is None and comp_visible is None:
        raise ValueError("comp_kv: needs comp_entries or comp_visible")
    if comp and comp_entries is not None:
        width = comp_entries.shape[1]
    elif comp:
        assert comp_visible is not None
        width = int(comp_visible.max()) if T else 0
    else:
        width = 0
    step = max(1, GATHER_BUDGET // ((window + width) * D))
    for t0 in range(0, T, step):
        t1 = min(T, t0 + step)
        keys, masks = [], []
        rows, valid = gather_rows(swa_kv, window_slots(positions[t0:t1], swa_pages[t0:t1], window))
        keys.append(rows.to(q.dtype))
        masks.append(valid)
        if comp and width:
            assert req_to_page is not None and req_rows is not None and token_req is not None
            if comp_entries is not None:
                ent = comp_entries[t0:t1]
            else:
                assert comp_visible is not None
                n = int(comp_visible[t0:t1].max())
                ar = torch.arange(n, dtype=torch.int64, device=q.device)
                ent = torch.where(ar[None, :] < comp_visible[t0:t1, None], ar[None, :], -1)
            slots = entry_slots(req_to_page, req_rows[token_req[t0:t1]][:, None], ent, entries_per_page)
            rows, valid = gather_rows(comp_kv, slots)
            keys.append(rows.to(q.dtype))
            masks.append(valid)
        out[t0:t1] = attend_gathered(q[t0:t1], torch.cat(keys, 1), torch.cat(masks, 1), sinks, scale)
    return out


def select_topk(scores: torch.Tensor, valid: torch.Tensor, topk: int) -> torch.Tensor:
    """Top-k positions per row under the indexer's tie rule (see :func:`indexer_topk`).

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
    idx_kv_flat: object,
    candidates: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Lightning-indexer scores of gathered candidates (paper eqs. 13-17; HF
    ``DeepseekV4IndexerScorer``), batch-invariant.

    ``score[t, c] = sum_h weights[t, h] * relu(scale * q[t, h] . K[candidates[t, c]])``, computed in
    float64 from the inputs' values and rounded once to fp32. Batch invariance: which blocking the
    matmul picks depends on the batch shape (rows, candidate count), which changes a float64
    result by ~1e-16 relative; rounded to fp32 (2^-24) the score is then the same bits in any
    batch or chunk, except when the exact score lies within that ~1e-16 of an fp32 rounding
    boundary (about one score in 10^8, and it then moves by one ulp). Exact zeros (every ReLU
    off) are exact in any order. A plain fp32 matmul instead moves every score by a few ulps
    between batch shapes, which flips near-ties at the top-k boundary.

    Args:
        q: ``[T, Hi, di]`` indexer queries (RoPE applied).
        weights: ``[T, Hi]`` per-head weights (``weights_proj(x) * Hi**-0.5``).
        idx_kv_flat: ``[N, di]`` flat indexer-key pool (a tensor or a row view with ``__getitem__``).
        candidates: ``[T, C]`` int64 flat slots, ``-1`` = padding.
        scale: ``di ** -0.5``.

    Returns:
        ``[T, C]`` fp32 scores, ``-inf`` at padding.
    """
    T, C = candidates.shape
    score = torch.full((T, C), -torch.inf, dtype=torch.float32, device=q.device)
    if C == 0 or T == 0:
        return score
    valid = candidates >= 0
    keys = idx_kv_flat[candidates.clamp(min=0)].double()  # [T, C, di]
    s = torch.relu(torch.einsum("thd,tcd->thc", q.double(), keys) * scale)
    score[:] = torch.einsum("thc,th->tc", s, weights.double())
    return score.masked_fill_(~valid, -torch.inf)


def indexer_topk_gathered(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv_flat: object,
    candidates: torch.Tensor,
    topk: int,
    scale: float,
) -> torch.Tensor:
    """:func:`indexer_scores` then :func:`select_topk`: ``[T, topk]`` positions into the gathered
    ``candidates [T, C]`` (the rule of :func:`indexer_topk`)."""
    score = indexer_scores(q, weights, idx_kv_flat, candidates, scale)
    return select_topk(score, candidates >= 0, topk)


def _request_runs(token_req: torch.Tensor) -> list[tuple[int, int]]:
    """``[(t0, t1)]`` runs of consecutive tokens of the same request."""
    T = token_req.shape[0]
    if T == 0:
        return []
    cuts = (torch.nonzero(token_req[1:] != token_req[:-1]).flatten() + 1).tolist()
    return list(zip([0, *cuts], [*cuts, T]))


def indexer_topk(
    q: torch.Tensor,
    weights: torch.Tensor,
    idx_kv: object,
    visible: torch.Tensor,
    req_to_page: torch.Tensor,
    req_rows: torch.Tensor,
    token_req: torch.Tensor,
    entries_per_page: int,
    topk: int,
    scale: float,
) -> torch.Tensor:
    """Lightning-indexer scores over every visible compressed entry and top-k selection.

    Token ``t`` scores the entries ``0 .. visible[t] - 1`` of its request ``token_req[t]`` (slots
    through ``req_to_page``, :mod:`sgl_kernel_v4.paged`), as :func:`indexer_scores` (float64,
    rounded once to fp32: batch-invariant), and keeps the ``topk`` best under the **tie rule**:
    entry ``a`` beats ``b`` when ``score[a] > score[b]``, or the scores are equal and ``a < b`` (the
    earlier entry), whatever the batch or chunk. HF's ``topk`` breaks ties arbitrarily.

    A request's tokens see prefixes of one entry list: each run of its tokens is scored against
    that list once, in blocks of rows up to the block's last visible entry, each block's scores
    at most :data:`GATHER_BUDGET` values (bounded memory at any context length).

    Args:
        q: ``[T, Hi, di]`` indexer queries (RoPE applied).
        weights: ``[T, Hi]`` fp32 per-head weights (``weights_proj(x) * Hi**-0.5``).
        idx_kv: the indexer-key pool layer (``[N, di]`` tensor or quantized row view).
        visible: ``[T]`` int64 entries visible to each token (``(pos + 1) // ratio``).
        req_to_page: ``[R, P]`` page table; req_rows: ``[B]`` its row per request;
        token_req: ``[T]`` request of each token; entries_per_page: entries per block page.
        topk: entries to keep; scale: ``di ** -0.5``.

    Returns:
        ``[T, topk]`` int64 entry indices in ascending order, ``-1`` after them where a token sees
        fewer than ``topk`` entries.
    """
    T, H, _ = q.shape
    out = torch.full((T, topk), -1, dtype=torch.long, device=q.device)
    w64 = weights.double()
    vis = visible.tolist()
    for r0, r1 in _request_runs(token_req):
        n_run = max(vis[r0:r1])
        if n_run <= 0:
            continue
        row = req_rows[token_req[r0]]
        ents = torch.arange(n_run, dtype=torch.int64, device=q.device)
        slots = entry_slots(req_to_page, row, ents, entries_per_page)
        # the float64 head scores are H values per (token, entry) and the top-k selection's
        # temporaries ~40 bytes per (token, entry) whatever H: budget both (few heads, as in small
        # test models, would otherwise let the [tokens, entries] selection temporaries grow with
        # the context up to 256 tokens x every entry)
        step = max(1, min(256, GATHER_BUDGET // (max(H, 16) * n_run)))
        keys = None
        for t0 in range(r0, r1, step):
            t1 = min(r1, t0 + step)
            n = max(vis[t0:t1])
            if n <= 0:
                continue
            if keys is None or keys.shape[0] < n:
                keys = idx_kv[slots[:n_run].clamp(min=0)].double()  # [n_run, di], once per run
            s = torch.relu(torch.einsum("thd,cd->thc", q[t0:t1].double(), keys[:n]) * scale)
            score = torch.einsum("thc,th->tc", s, w64[t0:t1]).float()  # rounded once to fp32
            valid = torch.arange(n, device=q.device)[None, :] < visible[t0:t1, None]
            valid &= slots[None, :n] >= 0
            out[t0:t1] = select_topk(score, valid, topk)
    return out
