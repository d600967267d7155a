"""ForwardBatchBuilder: the one writer of a forward's index metadata (:mod:`.forward_batch_info`).

:class:`ForwardBatchBuilder` computes every index field once, on the host, vectorised over the
batch (:meth:`~ForwardBatchBuilder.metadata`, numpy int64; all-decode batches in closed form,
:mod:`.decode_metadata`), and writes it through a :class:`~.metadata_layout.MetadataLayout` either
into one fresh buffer (eager forward) or, padded, into the static buffer of a captured CUDA graph
(replay; ``cuda_graph_runner.py``). Both paths share each field's definition; only the padding
differs. The dataclasses (:class:`ReqForwardInput`, :class:`ForwardBatch`, :class:`CompressPlan`)
are re-exported here.
"""

from __future__ import annotations

import itertools
from operator import attrgetter

import numpy as np
import torch

from sglang_v4.mem_cache.req_to_page import ReqToPageTable
from sglang_v4.model_executor.decode_metadata import DecodePlanner
from sglang_v4.model_executor.forward_batch_info import (
    BATCH_FIELDS,
    PAD,
    PLAN_FIELDS,
    CompressPlan,
    ForwardBatch,
    ReqForwardInput,
)
from sglang_v4.model_executor.metadata_layout import HostMetadata, MetadataLayout

__all__ = [
    "BATCH_FIELDS",
    "PAD",
    "PLAN_FIELDS",
    "CompressPlan",
    "ForwardBatch",
    "ForwardBatchBuilder",
    "HostMetadata",
    "MetadataLayout",
    "ReqForwardInput",
    "build_forward_batch",
]

_PREFIX_LEN = attrgetter("prefix_len")
_INPUT_IDS = attrgetter("input_ids")
_REQ_POOL_IDX = attrgetter("req_pool_idx")
_LOGITS_START = attrgetter("logits_start")


def _ragged_arange(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For per-group ``counts [G]``: ``(group [N], index within the group [N])``, ``N = sum``."""
    group = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    return group, np.arange(group.shape[0], dtype=np.int64) - starts[group]


class ForwardBatchBuilder:
    """Builds the metadata of one model's forwards (the only writer of :class:`ForwardBatch`).

    Args:
        page_size: tokens per block page.
        window: sliding window (positions per window page).
        csa_ratio / hca_ratio: compression ratios present in the model (``None`` if absent).
        device: where the batch tensors live.
        req_to_page: the pool's device page table (``DSV4KVPool.req_to_page``), synced with each
            batch's new pages; ``None`` builds a fresh table per batch from its requests' whole
            page lists (tools and tests that run without a pool's table).

    Raises:
        ValueError: ``page_size`` not a multiple of a ratio.
    """

    def __init__(
        self,
        page_size: int,
        window: int,
        csa_ratio: int | None,
        hca_ratio: int | None,
        device: torch.device | str,
        req_to_page: ReqToPageTable | None = None,
    ) -> None:
        self.page_size, self.window = int(page_size), int(window)
        self.ratios = {n: int(m) for n, m in (("csa", csa_ratio), ("hca", hca_ratio)) if m is not None}
        for name, m in self.ratios.items():
            if self.page_size % m:
                raise ValueError(f"page_size: {page_size} is not a multiple of the {name} ratio {m}")
        self.device = torch.device(device)
        self.req_to_page = req_to_page
        self._decode = DecodePlanner(self.page_size, self.window, self.ratios)

    # ---- host metadata ------------------------------------------------------------------------
    def metadata(self, reqs: list[ReqForwardInput], num_req_rows: int | None = None) -> HostMetadata:
        """Every index field of the batch ``reqs`` on the host (the definitions of the module
        docstring and :class:`CompressPlan`), vectorised over tokens, requests and windows.

        Args:
            reqs: the batch (each with ``len(input_ids) >= 1``).
            num_req_rows: ``B`` of the row tables (``Tab``'s new-token rows start at ``B * m``);
                a graph passes its padded batch size. Default ``len(reqs)``.

        Raises:
            ValueError: an empty batch or request, a missing block / window page.
        """
        if not reqs:
            raise ValueError("forward batch: empty batch")
        B = len(reqs)
        Bp = B if num_req_rows is None else int(num_req_rows)
        if Bp < B:
            raise ValueError(f"num_req_rows: {Bp} < {B} requests")
        ps, W = self.page_size, self.window
        p = np.fromiter(map(_PREFIX_LEN, reqs), np.int64, B)
        lens = list(map(len, map(_INPUT_IDS, reqs)))
        pages = self._decode_pages(reqs, p) if lens.count(1) == B else None
        if pages is not None:  # every request adds one token (decode): closed form, no loop
            arrays, max_visible, counts = self._decode.arrays(
                p,
                np.fromiter([r.input_ids[0] for r in reqs], np.int64, B),
                np.fromiter(map(_REQ_POOL_IDX, reqs), np.int64, B),
                np.fromiter(map(_LOGITS_START, reqs), np.int64, B),
                *pages,
                Bp,
            )
            return HostMetadata(
                arrays=arrays,
                num_req_rows=Bp,
                extend_lens=[1] * B,
                prefix_lens=p.tolist(),
                logits_counts=counts.tolist(),
                max_visible=max_visible,
                num_blocks=(p // ps + 1).tolist(),
            )
        n = np.asarray(lens, dtype=np.int64)
        if not n.all():
            raise ValueError(f"request slot {reqs[int(np.argmin(n))].req_pool_idx}: input_ids is empty")
        end = p + n
        need = -(-end // ps)
        lo = np.maximum(0, (p - W + 1) // W)
        n_spans = (end - 1) // W - lo + 1
        span_start = np.cumsum(n_spans) - n_spans
        blk_lo = p // ps
        blk_pages, blk_start, span_pages = self._extend_pages(
            reqs, p, end, need, blk_lo, lo, n_spans, span_start
        )
        input_ids = np.fromiter(
            itertools.chain.from_iterable(r.input_ids for r in reqs), np.int64, int(n.sum())
        )
        token_req, tok_i = _ragged_arange(n)
        t0 = np.cumsum(n) - n
        pos = p[token_req] + tok_i
        span = pos // W
        cur_i = span_start[token_req] + span - lo[token_req]
        cur = span_pages[cur_i]
        prev = np.where(span - 1 >= lo[token_req], span_pages[np.maximum(cur_i - 1, 0)], -1)
        ls = np.clip(np.fromiter([r.logits_start for r in reqs], np.int64, B), 0, n)
        k_req, k_i = _ragged_arange(n - ls)
        arrays: dict[str, np.ndarray] = {
            "input_ids": input_ids,
            "positions": pos,
            "token_req": token_req,
            "req_pool_indices": np.fromiter([r.req_pool_idx for r in reqs], np.int64, B),
            "swa_write": cur * W + pos % W,
            "swa_pages": np.stack([prev, cur], axis=1),
            "logits_indices": t0[k_req] + ls[k_req] + k_i,
        }
        max_visible = {}
        for name, m in self.ratios.items():
            page_of = (blk_pages, blk_start, blk_lo)
            plan = self._plan(m, name == "csa", p, end, t0, Bp, page_of, span_pages, span_start, lo)
            plan["visible"] = (pos + 1) // m
            max_visible[name] = int(plan["visible"].max())
            arrays.update({f"{name}.{k}": v for k, v in plan.items()})
        return HostMetadata(
            arrays=arrays,
            num_req_rows=Bp,
            extend_lens=n.tolist(),
            prefix_lens=p.tolist(),
            logits_counts=(n - ls).tolist(),
            max_visible=max_visible,
            num_blocks=need.tolist(),
        )

    def _decode_pages(
        self, reqs: list[ReqForwardInput], p: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The pages a decode batch (one token per request, at positions ``p``) reads, with one
        list comprehension per page kind: ``(block page of each token's block, window page of
        its span, window page of the span before where its window reaches into it else -1)``,
        each ``[B]`` int64. ``None`` when a page is missing (the general path then raises the
        precise error)."""
        ps, W = self.page_size, self.window
        B = p.shape[0]
        cur = p // W
        cur_l = cur.tolist()
        # the window of p reaches into the span before p's own: lo = max(0, (p - W + 1) // W) < cur
        has_prev = (p >= W) & (p % W != W - 1)
        try:
            blk = np.fromiter([r.block_pages[b] for r, b in zip(reqs, (p // ps).tolist())], np.int64, B)
            cur_pages = np.fromiter([r.window_pages[k] for r, k in zip(reqs, cur_l)], np.int64, B)
            if has_prev.any():
                prev = np.fromiter(
                    [r.window_pages[k - 1] if h else -1 for r, k, h in zip(reqs, cur_l, has_prev.tolist())],
                    np.int64,
                    B,
                )
            else:
                prev = np.full(B, -1, np.int64)
        except (IndexError, KeyError):
            return None
        return blk, cur_pages, prev

    def _extend_pages(
        self,
        reqs: list[ReqForwardInput],
        p: np.ndarray,
        end: np.ndarray,
        need: np.ndarray,
        blk_lo: np.ndarray,
        lo: np.ndarray,
        n_spans: np.ndarray,
        span_start: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pages of a general batch: ``(block pages of the blocks this forward writes, flat;
        each request's start in them; window pages of the spans lo .. (end - 1) // W, flat)``
        (O(tokens), not the whole page lists).

        Raises:
            ValueError: a missing block / window page.
        """
        n_blk = need - blk_lo
        blk_start = np.cumsum(n_blk) - n_blk
        blk_pages = np.empty(int(n_blk.sum()), dtype=np.int64)
        span_pages = np.empty(int(n_spans.sum()), dtype=np.int64)
        for b, r in enumerate(reqs):
            nb = int(need[b])
            if len(r.block_pages) < nb:
                raise ValueError(
                    f"request slot {r.req_pool_idx}: {len(r.block_pages)} block pages for {end[b]} tokens"
                )
            b0 = int(blk_start[b])
            blk_pages[b0 : b0 + nb - int(blk_lo[b])] = r.block_pages[int(blk_lo[b]) : nb]
            k0, s0 = int(lo[b]), int(span_start[b])
            try:
                for i in range(int(n_spans[b])):
                    span_pages[s0 + i] = r.window_pages[k0 + i]
            except KeyError as e:
                raise ValueError(
                    f"request slot {r.req_pool_idx}: no window page for span {e.args[0]}"
                ) from None
        return blk_pages, blk_start, span_pages

    def _plan(
        self,
        m: int,
        overlap: bool,
        p: np.ndarray,
        end: np.ndarray,
        t0: np.ndarray,
        Bp: int,
        page_of: tuple[np.ndarray, np.ndarray, np.ndarray],
        span_pages: np.ndarray,
        span_start: np.ndarray,
        lo: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The window / state row tables of one ratio (:class:`CompressPlan`), numpy int64.
        ``page_of``: the block pages of the blocks the forward writes (flat), each request's
        start in them and its first such block."""
        B = p.shape[0]
        blk_pages, blk_start, blk_lo = page_of
        base = Bp * m  # Tab rows before the new tokens
        e = self.page_size // m
        ar = np.arange(m, dtype=np.int64)

        def tab_rows(b: np.ndarray, q: np.ndarray) -> np.ndarray:
            # position q of request b: its buffered partial-window row, or its new-token row
            pb = p[b][:, None]
            return np.where(q < pb, b[:, None] * m + q % m, base + t0[b][:, None] + (q - pb))

        # windows completed by this forward: w in [p // m, end // m)
        n_win = end // m - p // m
        j_req, j_i = _ragged_arange(n_win)
        ws = p[j_req] // m + j_i
        rows = tab_rows(j_req, ws[:, None] * m + ar[None, :])
        out = {
            "win_rows": rows,
            "win_prev": np.zeros((0, m), np.int64),
            "win_pos": ws * m,
            "win_out": blk_pages[blk_start[j_req] + ws // e - blk_lo[j_req]] * e + ws % e,
        }
        has = n_win > 0
        ovl = np.full((B, m), -1, np.int64)
        ovl[has] = rows[(np.cumsum(n_win) - 1)[has]]  # each request's last new window
        # the new partial window of every request: positions end - end % m .. end - 1
        rem = end % m
        q = (end - rem)[:, None] + ar[None, :]
        buf = np.where(ar[None, :] < rem[:, None], tab_rows(np.arange(B, dtype=np.int64), q), -1)
        out.update(buf_rows=buf, ovl_rows=ovl)
        if overlap:
            # the previous window's Ca half: in the overlap state (CaTab rows b*m ..) for a request's
            # first new window, else the window before it in this forward (CaTab row base + Tab row)
            first = (j_i == 0)[:, None]
            own = np.where((ws >= 1)[:, None], j_req[:, None] * m + ar[None, :], -1)
            before = base + np.roll(rows, 1, axis=0)
            out["win_prev"] = np.where(first, own, before)
            # resume snapshots of the windows that end a block, into the window page of that end
            at = np.nonzero(((ws + 1) * m) % self.page_size == 0)[0]
            span = ((ws[at] + 1) * m - 1) // self.window
            out["snap_rows"] = rows[at]
            out["snap_pages"] = span_pages[span_start[j_req[at]] + span - lo[j_req[at]]]
        else:
            out["snap_rows"] = np.zeros((0, m), np.int64)
            out["snap_pages"] = np.zeros(0, np.int64)
        return out

    # ---- writers ------------------------------------------------------------------------------
    def sync_pages(self, reqs: list[ReqForwardInput], meta: HostMetadata) -> torch.Tensor:
        """Make the page table hold every block page the batch reads; returns the table tensor.

        With the pool's table (constructor) only the pages changed since each request's last
        forward are uploaded; without one, a fresh ``[max slot + 1, max blocks]`` table is built.

        Raises:
            ValueError: as :meth:`ReqToPageTable.sync` (a request longer than the table).
        """
        table = self.req_to_page
        if table is None:
            slots = 1 + max(r.req_pool_idx for r in reqs)
            table = ReqToPageTable(slots, max(1, max(meta.num_blocks)), self.device)
        table.sync(reqs, meta.num_blocks)
        return table.table

    def build(
        self, reqs: list[ReqForwardInput], indexer_stream: torch.cuda.Stream | None = None
    ) -> ForwardBatch:
        """Eager forward: the batch's metadata in one fresh buffer on the device (one copy), and the
        page table synced (:meth:`sync_pages`).

        Raises:
            ValueError: as :meth:`metadata` and :meth:`sync_pages`.
        """
        meta = self.metadata(reqs)
        lay = MetadataLayout(
            {k: tuple(v.shape) for k, v in meta.arrays.items()},
            self.ratios,
            meta.max_visible,
            self.page_size,
            self.window,
        )
        # pinned + asynchronous on CUDA: a pageable upload would wait for the forward in flight
        host_t = torch.empty(lay.size, dtype=torch.int64, pin_memory=self.device.type == "cuda")
        lay.write(host_t.numpy(), meta)
        table = self.sync_pages(reqs, meta)
        buf = host_t.to(self.device, non_blocking=True)
        fb = lay.views(buf, meta.extend_lens, meta.prefix_lens, meta.logits_counts)
        fb.indexer_stream = indexer_stream
        fb.req_to_page = table
        return fb

    def static_layout(self, bs: int, ctx: int) -> MetadataLayout:
        """The padded layout of a decode CUDA-graph key: ``bs`` one-token requests
        (``T = B = J = S = bs``) of context at most ``ctx`` (the visible-entry bound ``ctx // m``);
        no field depends on the context, so one layout serves every context up to ``ctx``."""
        shapes: dict[str, tuple[int, ...]] = {f: (bs,) for f in BATCH_FIELDS}
        shapes.update(swa_pages=(bs, 2))
        for name, m in self.ratios.items():
            s = bs if name == "csa" else 0  # overlap state and snapshots: CSA only
            for f, shape in zip(
                PLAN_FIELDS, [(bs, m), (s, m), (bs,), (bs,), (bs, m), (bs, m), (s, m), (s,), (bs,)]
            ):
                shapes[f"{name}.{f}"] = shape
        max_visible = {name: ctx // m for name, m in self.ratios.items()}
        return MetadataLayout(
            shapes, self.ratios, max_visible, self.page_size, self.window, num_req_rows=bs, all_logits=True
        )

    def static_extend_layout(self, num_tokens: int, num_reqs: int, ctx: int) -> MetadataLayout:
        """The padded layout of an extend CUDA-graph key: at most ``num_tokens`` new tokens (``T``)
        of at most ``num_reqs`` requests (``B <= T``), each request asking for at most one logits
        row (``K = B``), every context at most ``ctx`` (the visible-entry bound ``ctx // m``).

        Bounds of the row tables (per ratio ``m``): a request adding ``n`` tokens completes at most
        ``ceil(n / m)`` windows, so ``J = min(T, (T + B (m - 1)) // m)``; it ends at most
        ``ceil(n / page_size)`` blocks, so ``S = min(J, (T + B (page_size - 1)) // page_size)``
        (CSA only). Any batch within ``T`` tokens and ``B`` requests therefore fits.

        Raises:
            ValueError: ``num_reqs`` not in ``1 .. num_tokens``.
        """
        T, B = int(num_tokens), int(num_reqs)
        if not 1 <= B <= T:
            raise ValueError(f"num_reqs: must be in 1 .. num_tokens={T}, got {B}")
        shapes: dict[str, tuple[int, ...]] = {f: (T,) for f in BATCH_FIELDS}
        shapes.update(req_pool_indices=(B,), swa_pages=(T, 2), logits_indices=(B,))
        for name, m in self.ratios.items():
            J = min(T, (T + B * (m - 1)) // m)
            S = min(J, (T + B * (self.page_size - 1)) // self.page_size) if name == "csa" else 0
            P = J if name == "csa" else 0  # win_prev: CSA only
            for f, shape in zip(
                PLAN_FIELDS, [(J, m), (P, m), (J,), (J,), (B, m), (B, m), (S, m), (S,), (T,)]
            ):
                shapes[f"{name}.{f}"] = shape
        max_visible = {name: ctx // m for name, m in self.ratios.items()}
        return MetadataLayout(shapes, self.ratios, max_visible, self.page_size, self.window, num_req_rows=B)


def build_forward_batch(
    reqs: list[ReqForwardInput],
    page_size: int,
    window: int,
    csa_ratio: int | None,
    hca_ratio: int | None,
    device: torch.device | str,
) -> ForwardBatch:
    """``ForwardBatchBuilder(page_size, window, csa_ratio, hca_ratio, device).build(reqs)``.

    Raises:
        ValueError: on an empty batch or request, or a missing block / window page.
    """
    return ForwardBatchBuilder(page_size, window, csa_ratio, hca_ratio, device).build(reqs)
