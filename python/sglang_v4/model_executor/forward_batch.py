"""ForwardBatch: everything one model forward needs, as flat per-token tensors and index maps.

One code path serves extend (prefill from any prefix offset, i.e. chunked prefill and prefix-cache
hits), decode (an extend of one token) and mixed batches of both: each request contributes
``n >= 1`` new tokens at positions ``prefix_len .. prefix_len + n - 1``; tokens of all requests are
concatenated (``T = sum n``). The builder runs on the host (a loop over requests, vectorised inside
each request) and produces device index tensors:

* sliding window: the flat window-pool slot each token writes its KV to, and the 128 slots of its
  window ``[pos - 127, pos]`` (``-1`` before position 0);
* per compression ratio (4 for CSA, 128 for HCA) a :class:`CompressPlan`: which windows complete in
  this forward, where their slots come from (the request's buffered partial window, the previous
  window's "Ca" half from the overlap state, or the new tokens), where the resulting entries go in
  the compressed pool, the new compressor state, and the resume snapshots to take at block ends;
* per ratio, the candidate entries each token may see (entry ``w`` is visible to position ``t`` iff
  ``w < (t + 1) // ratio``; DSV4_MODEL.md, HF ``DeepseekV4CSACompressor``).

The two per-token index maps that grow with the context, the ``[T, 128]`` window keys and the
``[T, C]`` candidates, are uploaded compactly (per token: its two window pages; per request: its
entry list, per token: its visible count) and expanded on the device (``_expand_window``,
``_expand_candidates``), so their host cost and upload size are O(T + B x C), not O(T x C).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class ReqForwardInput:
    """One request's share of a forward.

    Attributes:
        req_pool_idx: the request's slot in the pool's per-request state.
        input_ids: the ``n`` new token ids (``n >= 1``).
        prefix_len: tokens already in the KV state (the position of ``input_ids[0]``).
        block_pages: block page of every logical block ``0 .. ceil((prefix_len + n) / page_size) - 1``.
        window_pages: window page per 128-position span ``k`` (positions ``128k .. 128k+127``); must
            cover every span from ``(prefix_len - 127) // 128`` to ``(prefix_len + n - 1) // 128``.
        logits_start: chunk-relative index of the first token whose logits are needed
            (``n - 1``: only the last token; ``n``: none).
    """

    req_pool_idx: int
    input_ids: list[int]
    prefix_len: int
    block_pages: list[int]
    window_pages: dict[int, int]
    logits_start: int


@dataclass
class CompressPlan:
    """Index maps for one compression ratio (see module docstring).

    Row tables: per layer the compressor builds ``Tab = cat(state_buf[req_pool_indices] as
    [B * ratio, X], new_rows [T, X])`` and, for CSA, ``CaTab = cat(state_ovl[req_pool_indices] as
    [B * ratio, d], Tab[:, :d])``. All index tensors are int64 on the device, ``-1`` = none.

    Attributes:
        ratio: compression ratio m.
        win_rows: ``[J, m]`` rows of ``Tab`` forming each completed window.
        win_prev: ``[J, m]`` rows of ``CaTab`` holding the previous window's Ca half (CSA only).
        win_pos: ``[J]`` position of each window (``w * m``) for RoPE.
        win_out: ``[J]`` flat slot of the entry in the compressed pool (``page * m_per_page + slot``).
        buf_rows: ``[B, m]`` rows of ``Tab`` forming each request's new partial window.
        ovl_rows: ``[B, m]`` rows of ``Tab`` of each request's last completed window (``-1`` rows:
            no new window, keep the old overlap).
        snap_rows: ``[S, m]`` rows of ``Tab`` of windows that end on a block boundary (CSA only).
        snap_pages: ``[S]`` window pages receiving those snapshots.
        candidates: ``[T, C]`` flat slots of the entries visible to each token.
    """

    ratio: int
    win_rows: torch.Tensor
    win_prev: torch.Tensor
    win_pos: torch.Tensor
    win_out: torch.Tensor
    buf_rows: torch.Tensor
    ovl_rows: torch.Tensor
    snap_rows: torch.Tensor
    snap_pages: torch.Tensor
    candidates: torch.Tensor


@dataclass
class ForwardBatch:
    """A batch of requests' new tokens (extend, decode or mixed) for one model forward.

    Attributes:
        input_ids: ``[T]`` int64 token ids.
        positions: ``[T]`` int64 absolute positions.
        token_req: ``[T]`` int64 index of each token's request in the batch.
        req_pool_indices: ``[B]`` int64 pool slots.
        extend_lens / prefix_lens: per request (host lists).
        swa_write: ``[T]`` flat window-pool slot each token's KV is written to.
        swa_idx: ``[T, window]`` flat window-pool slots of each token's sliding keys (``-1`` = none).
        logits_indices: ``[K]`` token rows whose logits are computed; ``logits_counts[b]`` of them
            belong to request ``b`` (in order).
        csa / hca: :class:`CompressPlan` per ratio (``None`` if the model has no such layer).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    token_req: torch.Tensor
    req_pool_indices: torch.Tensor
    extend_lens: list[int]
    prefix_lens: list[int]
    swa_write: torch.Tensor
    swa_idx: torch.Tensor
    logits_indices: torch.Tensor
    logits_counts: list[int]
    csa: CompressPlan | None = None
    hca: CompressPlan | None = None
    extras: dict = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.extend_lens)


def _plan_ratio(
    reqs: list[ReqForwardInput],
    token_offsets: list[int],
    ratio: int,
    page_size: int,
    window: int,
    with_overlap: bool,
) -> dict[str, np.ndarray]:
    """Host-side construction of a :class:`CompressPlan` for one ratio (numpy arrays)."""
    B = len(reqs)
    base = B * ratio  # Tab rows before the new tokens
    per_page = page_size // ratio
    win_rows, win_prev, win_pos, win_out = [], [], [], []
    buf_rows = np.full((B, ratio), -1, dtype=np.int64)
    ovl_rows = np.full((B, ratio), -1, dtype=np.int64)
    snap_rows, snap_pages = [], []
    cand_lists: list[np.ndarray] = []
    nvis: list[np.ndarray] = []
    ar = np.arange(ratio, dtype=np.int64)
    for b, r in enumerate(reqs):
        p, n = r.prefix_len, len(r.input_ids)
        t0 = token_offsets[b]
        end = p + n
        w_first, w_last = p // ratio, end // ratio  # new windows: w_first .. w_last - 1
        if w_last > w_first:
            ws = np.arange(w_first, w_last, dtype=np.int64)
            q = ws[:, None] * ratio + ar[None, :]  # [J_b, m] positions
            rows = np.where(q < p, b * ratio + (q % ratio), base + t0 + (q - p))
            win_rows.append(rows)
            win_pos.append(ws * ratio)
            pages = np.asarray(r.block_pages, dtype=np.int64)[ws // per_page]
            win_out.append(pages * per_page + ws % per_page)
            if with_overlap:
                prev = np.full_like(rows, -1)
                # previous window of w_first: from the overlap state if w_first >= 1
                if w_first >= 1:
                    prev[0] = b * ratio + ar
                if len(ws) > 1:
                    prev[1:] = base + rows[:-1]  # CaTab row = B*m + Tab row
                win_prev.append(prev)
                # block-end snapshots of windows completing a block
                ends = (ws + 1) * ratio
                at_boundary = ends % page_size == 0
                for j in np.nonzero(at_boundary)[0]:
                    span = (int(ends[j]) - 1) // window
                    snap_rows.append(rows[j])
                    snap_pages.append(r.window_pages[span])
            ovl_rows[b] = rows[-1]
        # new partial window
        rem = end % ratio
        if rem:
            q = (end - rem) + np.arange(rem, dtype=np.int64)
            buf_rows[b, :rem] = np.where(q < p, b * ratio + (q % ratio), base + t0 + (q - p))
        # visible entries
        n_entries = end // ratio
        ents = np.arange(n_entries, dtype=np.int64)
        if n_entries:
            pages = np.asarray(r.block_pages, dtype=np.int64)[ents // per_page]
            cand_lists.append(pages * per_page + ents % per_page)
        else:
            cand_lists.append(np.zeros(0, dtype=np.int64))
        pos = p + np.arange(n, dtype=np.int64)
        nvis.append((pos + 1) // ratio)
    # Candidates are sent compactly (one row per request + the visible count per token) and
    # expanded to [T, C] on the device (``_expand_candidates``): the [T, C] host array was
    # O(T x ctx / ratio) (134 MB for one 8k-token CSA prefill) built and copied per forward.
    C = max((int(v.max()) if len(v) else 0) for v in nvis) if nvis else 0
    cand_rows = np.full((B, C), -1, dtype=np.int64)
    for b in range(B):
        k = min(C, len(cand_lists[b]))
        cand_rows[b, :k] = cand_lists[b][:k]

    def cat(xs: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        return np.concatenate(xs, axis=0) if xs else np.zeros(shape, dtype=np.int64)

    return {
        "win_rows": cat(win_rows, (0, ratio)),
        "win_prev": cat(win_prev, (0, ratio)) if with_overlap else np.zeros((0, ratio), dtype=np.int64),
        "win_pos": cat(win_pos, (0,)),
        "win_out": cat(win_out, (0,)),
        "buf_rows": buf_rows,
        "ovl_rows": ovl_rows,
        "snap_rows": np.stack(snap_rows) if snap_rows else np.zeros((0, ratio), dtype=np.int64),
        "snap_pages": np.asarray(snap_pages, dtype=np.int64),
        "cand_rows": cand_rows,
        "cand_nvis": np.concatenate(nvis) if nvis else np.zeros(0, dtype=np.int64),
    }


def _expand_window(
    positions: torch.Tensor, cur: torch.Tensor, prev: torch.Tensor, window: int
) -> torch.Tensor:
    """``[T, window]`` sliding-window key slots on the device.

    Args:
        positions: ``[T]`` int64 token positions ``p``.
        cur / prev: ``[T]`` int64 window page of span ``p // window`` and of the span before (-1
            where no key falls in it).
        window: keys per token and positions per window page.

    Returns:
        ``[T, window]`` int64: for key ``j`` at position ``k = p - window + 1 + j``, slot
        ``page(k // window) * window + k % window``, or -1 where ``k < 0``.
    """
    kp = positions[:, None] - (window - 1) + torch.arange(window, dtype=torch.int64, device=positions.device)
    page = torch.where(kp // window == (positions // window)[:, None], cur[:, None], prev[:, None])
    return torch.where(kp >= 0, page * window + kp % window, -1)


def _expand_candidates(cand_rows: torch.Tensor, nvis: torch.Tensor, token_req: torch.Tensor) -> torch.Tensor:
    """``[T, C]`` candidates on the device from the compact form.

    Args:
        cand_rows: ``[B, C]`` int64, request ``b``'s visible entries (flat pool slots) in order, -1 padded.
        nvis: ``[T]`` int64, entries visible to each token (``(position + 1) // ratio``).
        token_req: ``[T]`` int64, each token's request.

    Returns:
        ``[T, C]`` int64: ``cand_rows[token_req[t], c]`` where ``c < nvis[t]``, else -1.
    """
    C = cand_rows.shape[1]
    col = torch.arange(C, dtype=torch.int64, device=cand_rows.device)
    return torch.where(col[None, :] < nvis[:, None], cand_rows[token_req], -1)


def build_forward_batch(
    reqs: list[ReqForwardInput],
    page_size: int,
    window: int,
    csa_ratio: int | None,
    hca_ratio: int | None,
    device: torch.device | str,
) -> ForwardBatch:
    """Build a :class:`ForwardBatch` from per-request inputs.

    Args:
        reqs: the batch (each with ``len(input_ids) >= 1``).
        page_size: tokens per logical block.
        window: sliding window (raw KV positions per window page).
        csa_ratio / hca_ratio: compression ratios present in the model (``None`` if absent).
        device: target device of the tensors.

    Raises:
        ValueError: on an empty request or a missing block / window page.
    """
    if not reqs:
        raise ValueError("build_forward_batch: empty batch")
    offsets = [0]
    ids, pos, treq, swa_write, logit_rows, logit_counts = [], [], [], [], [], []
    swa_cur: list[np.ndarray] = []
    swa_prev: list[np.ndarray] = []
    for b, r in enumerate(reqs):
        n = len(r.input_ids)
        if n == 0:
            raise ValueError(f"request slot {r.req_pool_idx}: input_ids is empty")
        need_blocks = -(-(r.prefix_len + n) // page_size)
        if len(r.block_pages) < need_blocks:
            raise ValueError(
                f"request slot {r.req_pool_idx}: {len(r.block_pages)} block pages for {r.prefix_len + n} tokens"
            )
        t0 = offsets[-1]
        offsets.append(t0 + n)
        p = np.arange(r.prefix_len, r.prefix_len + n, dtype=np.int64)
        ids.append(np.asarray(r.input_ids, dtype=np.int64))
        pos.append(p)
        treq.append(np.full(n, b, dtype=np.int64))
        lo = max(0, (r.prefix_len - window + 1) // window)
        hi = (r.prefix_len + n - 1) // window
        try:
            span_pages = np.asarray([r.window_pages[k] for k in range(lo, hi + 1)], dtype=np.int64)
        except KeyError as e:
            raise ValueError(f"request slot {r.req_pool_idx}: no window page for span {e.args[0]}") from None
        cur = span_pages[p // window - lo]
        swa_write.append(cur * window + p % window)
        # a token's window keys (positions p - window + 1 .. p) lie in its own span and the one
        # before; the [T, window] index is expanded on the device (_expand_window)
        swa_cur.append(cur)
        swa_prev.append(
            np.where(p // window - 1 >= lo, span_pages[np.clip(p // window - 1 - lo, 0, None)], -1)
        )
        ls = max(0, min(r.logits_start, n))
        logit_rows.append(t0 + np.arange(ls, n, dtype=np.int64))
        logit_counts.append(n - ls)

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x)).to(device)

    positions = t(np.concatenate(pos))
    fb = ForwardBatch(
        input_ids=t(np.concatenate(ids)),
        positions=positions,
        token_req=t(np.concatenate(treq)),
        req_pool_indices=t(np.asarray([r.req_pool_idx for r in reqs], dtype=np.int64)),
        extend_lens=[len(r.input_ids) for r in reqs],
        prefix_lens=[r.prefix_len for r in reqs],
        swa_write=t(np.concatenate(swa_write)),
        swa_idx=_expand_window(positions, t(np.concatenate(swa_cur)), t(np.concatenate(swa_prev)), window),
        logits_indices=t(np.concatenate(logit_rows)),
        logits_counts=logit_counts,
    )
    for name, ratio, overlap in (("csa", csa_ratio, True), ("hca", hca_ratio, False)):
        if ratio is None:
            continue
        arrs = _plan_ratio(reqs, offsets, ratio, page_size, window, overlap)
        cand = _expand_candidates(t(arrs.pop("cand_rows")), t(arrs.pop("cand_nvis")), fb.token_req)
        setattr(fb, name, CompressPlan(ratio=ratio, candidates=cand, **{k: t(v) for k, v in arrs.items()}))
    return fb
