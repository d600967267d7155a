"""The index metadata of a decode forward (one new token per request) in closed form.

:meth:`ForwardBatchBuilder.metadata <sglang_v4.model_executor.forward_batch.ForwardBatchBuilder.metadata>`
computes every field for any batch with ragged per-token and per-window index arithmetic. In a
decode batch every request adds exactly one token at ``p = prefix_len``, so each of those ragged
maps collapses (token ``b`` is request ``b``; a request completes at most one compression window,
the one ending at ``p``, exactly when ``(p + 1) % m == 0``) and every field is a handful of numpy
operations over ``B`` requests, with the ``[B, m]`` row template ``b * m + a`` kept across steps.
This is the per-step host cost of a decode step in the model worker (it runs before every CUDA
graph replay), so it is kept apart from the general builder; the fields and their meaning are
those of :class:`~sglang_v4.model_executor.forward_batch.CompressPlan` and the ``forward_batch``
module docstring, and ``test/test_forward_batch_candidates.py`` checks every field against the
general path.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DecodePlanner"]


class DecodePlanner:
    """Closed-form decode metadata (module docstring), with per-``(B, m)`` row templates cached.

    Args:
        page_size: tokens per block page.
        window: sliding window (positions per window page).
        ratios: ratio name (``"csa"``, ``"hca"``) -> compression ratio ``m`` (divides ``page_size``).
    """

    def __init__(self, page_size: int, window: int, ratios: dict[str, int]) -> None:
        self.page_size, self.window = int(page_size), int(window)
        self.ratios = dict(ratios)
        self._templates: dict[tuple[int, int], np.ndarray] = {}
        self._aranges: dict[int, np.ndarray] = {}
        self._bufs: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}

    def _arange(self, n: int) -> np.ndarray:
        a = self._aranges.get(n)
        if a is None:
            a = self._aranges[n] = np.arange(n, dtype=np.int64)
            a.flags.writeable = False
        return a

    def _template(self, B: int, m: int) -> np.ndarray:
        """``[B, m]`` int64 ``b * m + a`` (read-only, cached)."""
        t = self._templates.get((B, m))
        if t is None:
            t = self._arange(B)[:, None] * m + self._arange(m)[None, :]
            t.flags.writeable = False
            if len(self._templates) > 64:
                self._templates.clear()
            self._templates[(B, m)] = t
        return t

    def arrays(
        self,
        p: np.ndarray,
        input_ids: np.ndarray,
        req_pool_indices: np.ndarray,
        logits_start: np.ndarray,
        blk: np.ndarray,
        cur: np.ndarray,
        prev: np.ndarray,
        num_req_rows: int,
    ) -> tuple[dict[str, np.ndarray], dict[str, int], np.ndarray]:
        """Every field of a decode batch.

        Args:
            p: ``[B]`` int64 positions of the new tokens (``prefix_len``).
            input_ids / req_pool_indices / logits_start: ``[B]`` int64 per request.
            blk: ``[B]`` int64 block page of block ``p // page_size`` of each request.
            cur: ``[B]`` int64 window page of span ``p // window``.
            prev: ``[B]`` int64 window page of span ``p // window - 1`` where the token's window
                reaches into it (``p % window != window - 1`` and ``p >= window``), else ``-1``.
            num_req_rows: ``Bp >= B``, the rows of the compressor tables before the new tokens.

        Returns:
            ``(arrays, max_visible, logits_counts)``: the field name -> array map of
            :class:`~sglang_v4.model_executor.metadata_layout.HostMetadata` (same names, dtypes,
            shapes and values as the general path), the largest visible count per ratio, and the
            ``[B]`` logits rows per request (``1`` where ``logits_start <= 0``, else ``0``).
        """
        B = p.shape[0]
        W = self.window
        bidx = self._arange(B)
        ls = np.clip(logits_start, 0, 1)
        if ls.any():
            logits_counts = 1 - ls
            logits_indices = np.flatnonzero(logits_counts)
        else:
            logits_counts = np.ones(B, np.int64)
            logits_indices = bidx.copy()
        arrays: dict[str, np.ndarray] = {
            "input_ids": input_ids,
            "positions": p,
            "token_req": bidx.copy(),
            "req_pool_indices": req_pool_indices,
            "swa_write": cur * W + p % W,
            "swa_pages": np.stack([prev, cur], axis=1),
            "logits_indices": logits_indices,
        }
        max_visible: dict[str, int] = {}
        p1 = p + 1
        for name, m in self.ratios.items():
            plan = self._plan(m, name == "csa", p, p1, blk, cur, num_req_rows)
            max_visible[name] = int(plan["visible"].max())
            for k, v in plan.items():
                arrays[f"{name}.{k}"] = v
        return arrays, max_visible, logits_counts

    def _plan(
        self,
        m: int,
        overlap: bool,
        p: np.ndarray,
        p1: np.ndarray,
        blk: np.ndarray,
        cur: np.ndarray,
        Bp: int,
    ) -> dict[str, np.ndarray]:
        """One ratio's :class:`CompressPlan` fields. Row ``a`` of request ``b``'s windows in
        ``Tab`` is its buffered row ``b * m + a`` for positions before ``p`` and the new-token row
        ``Bp * m + b`` at ``p`` (the general path's ``tab_rows`` with ``t0[b] = b``)."""
        B = p.shape[0]
        base = Bp * m
        e = self.page_size // m
        tmpl = self._template(B, m)
        rem = p1 % m
        j = np.flatnonzero(rem == 0)  # requests whose token completes window p // m
        ws = p[j] // m
        rows = tmpl[j]  # a fancy-index copy
        rows[:, m - 1] = base + j
        out: dict[str, np.ndarray] = {
            "win_rows": rows,
            "win_prev": np.zeros((0, m), np.int64),
            "win_pos": ws * m,
            "win_out": blk[j] * e + ws % e,
        }
        buf = self._buf_rows(m, p, rem, Bp)
        ovl = np.full((B, m), -1, np.int64)
        ovl[j] = rows
        out["buf_rows"] = buf
        out["ovl_rows"] = ovl
        if overlap:
            # a request's only new window is its first: its previous Ca half is in the overlap
            # state (its own rows), none before window 1
            out["win_prev"] = np.where((ws >= 1)[:, None], tmpl[j], -1)
            at = np.flatnonzero(p1[j] % self.page_size == 0)  # windows ending a block
            out["snap_rows"] = rows[at]
            out["snap_pages"] = cur[j[at]]
        else:
            out["snap_rows"] = np.zeros((0, m), np.int64)
            out["snap_pages"] = np.zeros(0, np.int64)
        out["visible"] = p1 // m
        return out

    def _buf_rows(self, m: int, p: np.ndarray, rem: np.ndarray, Bp: int) -> np.ndarray:
        """``[B, m]`` ``buf_rows``: row ``b`` holds the rows of its new partial window, positions
        ``p - rem + 1 .. p`` (``rem = (p + 1) % m``): ``b * m + a`` for ``a < rem - 1``, the
        new-token row ``Bp * m + b`` at ``a = rem - 1``, ``-1`` after.

        Kept across steps (SGLang keeps a decode batch's tensors and only appends): row ``b``
        depends only on ``(b, p[b], Bp)``, so where the last call with the same ``B``, ``m`` and
        ``Bp`` had ``p[b] - 1`` at row ``b`` (the same request one token later, or any request at
        that position) the row changes in at most two entries, or is cleared when ``p`` starts a
        new window; every other row is computed whole. Returns a fresh array each call."""
        B = p.shape[0]
        base = Bp * m
        key = (B, m, Bp)
        last = self._bufs.get(key)
        if last is None:
            stale = self._arange(B)
            buf = np.full((B, m), -1, np.int64)
        else:
            p_last, buf = last
            adv = p == p_last + 1
            stale = None if adv.all() else np.flatnonzero(~adv)
            k = np.flatnonzero(adv & (rem >= 2)) if stale is not None else np.flatnonzero(rem >= 2)
            buf[k, rem[k] - 2] = k * m + rem[k] - 2  # the previous token's row is buffered now
            z = np.flatnonzero(adv & (rem == 0)) if stale is not None else np.flatnonzero(rem == 0)
            buf[z] = -1  # the previous token completed its window: a new one starts
        if stale is not None and stale.size:
            r1 = (rem[stale] - 1)[:, None]
            buf[stale] = np.where(self._arange(m)[None, :] < r1, self._template(B, m)[stale], -1)
        k = np.flatnonzero(rem)
        buf[k, rem[k] - 1] = base + k
        if len(self._bufs) > 64:
            self._bufs.clear()
        self._bufs[key] = (p.copy(), buf)
        return buf.copy()
