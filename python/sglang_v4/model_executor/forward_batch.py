"""ForwardBatch and its one builder: the index metadata of one model forward.

One code path serves extend (prefill from any prefix offset, i.e. chunked prefill and prefix-cache
hits), decode (an extend of one token) and mixed batches of both: each request contributes
``n >= 1`` new tokens at positions ``prefix_len .. prefix_len + n - 1``; the tokens of all requests
are concatenated (``T = sum n``, ``B`` requests).

:class:`ForwardBatchBuilder` computes every index field once, on the host, vectorised over the
batch (:meth:`~ForwardBatchBuilder.metadata`, numpy int64), and writes it through a
:class:`MetadataLayout` either into one fresh buffer (eager forward) or, padded, into the static
buffer of a captured CUDA graph (replay; ``cuda_graph_runner.py``). Both paths share each field's
definition; only the padding differs.

Fields (all int64 on the device, ``-1`` = none; the readers in brackets):

========================  ==========  ===========================================================
field                     shape       meaning
========================  ==========  ===========================================================
``input_ids``             ``[T]``     token ids [embedding, hash-routed MoE]
``positions``             ``[T]``     absolute positions [RoPE, compressor ``position_bias``]
``token_req``             ``[T]``     each token's request row [dense expansion]
``req_pool_indices``      ``[B]``     request slots in the pool's per-request state [compressors]
``block_table``           ``[B, P]``  each request's block pages ``0 .. ceil(end / page) - 1``
                                      (SGLang's ``req_to_token`` at page granularity) [dense
                                      expansion, the source of every compressed-entry slot]
``swa_write``             ``[T]``     window-pool slot each token's KV is written to [attention]
``swa_pages``             ``[T, 2]``  window pages of the span before the token's span and of its
                                      own span (spans of ``window`` positions) [dense expansion]
``logits_indices``        ``[K]``     token rows whose logits are computed [LM head]
``<ratio>.win_rows`` ...  see :class:`CompressPlan` (per compression ratio: CSA 4, HCA 128)
``<ratio>.visible``       ``[T]``     compressed entries visible to each token [dense expansion]
========================  ==========  ===========================================================

Long context: no field is sized tokens x candidates. The visible compressed entries of a token are
the first ``visible[t]`` entries of its request, entry ``w`` living at slot
``block_table[b, w // (page / m)] * (page / m) + w % (page / m)``; the sliding-window keys of the
token at ``p`` are positions ``p - window + 1 .. p`` in its two ``swa_pages``. The current attention
and indexer kernels read dense per-token index lists instead (``[T, window]`` and ``[T, C]``); they
are produced on the device from the compact form by :func:`expand_kv_indices`, called once at the
start of the model forward, the only place where a ``tokens x candidates`` tensor exists. Kernels
that read ``block_table`` / ``swa_pages`` directly make that function disappear.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

import numpy as np
import torch

#: Fields of a :class:`CompressPlan` and of a :class:`ForwardBatch` outside its plans, in layout order.
PLAN_FIELDS = tuple(
    "win_rows win_prev win_pos win_out buf_rows ovl_rows snap_rows snap_pages visible".split()
)
BATCH_FIELDS = tuple(
    "input_ids positions token_req req_pool_indices block_table swa_write swa_pages logits_indices".split()
)
#: Value of padded entries in a static (graph) layout. Padded requests use the reserved request
#: slot 0 and write no KV (``swa_write = win_out = -1``); padded snapshots go to the reserved window
#: page 0; padded tokens see nothing (``swa_pages = -1``, ``visible = 0``).
PAD = {f: 0 for f in BATCH_FIELDS + PLAN_FIELDS} | {
    f: -1
    for f in "block_table swa_write swa_pages win_rows win_prev win_out buf_rows ovl_rows snap_rows".split()
}


@dataclass
class ReqForwardInput:
    """One request's share of a forward.

    Attributes:
        req_pool_idx: the request's slot in the pool's per-request state.
        input_ids: the ``n`` new token ids (``n >= 1``).
        prefix_len: tokens already in the KV state (the position of ``input_ids[0]``).
        block_pages: block page of every logical block ``0 .. ceil((prefix_len + n) / page_size) - 1``
            (more are ignored).
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
    """Index maps for one compression ratio ``m`` (4: CSA, 128: HCA).

    Row tables: per layer the compressor builds ``Tab = cat(state_buf[req_pool_indices] as
    [B * m, X], new_rows [T, X])`` and, for CSA, ``CaTab = cat(state_ovl[req_pool_indices] as
    [B * m, d], Tab[:, :d])``. A window ``w`` covers positions ``w*m .. w*m + m - 1``; entry ``w``
    is visible to the token at position ``t`` iff ``w < (t + 1) // m`` (HF
    ``DeepseekV4CSACompressor``). All tensors int64, ``-1`` = none.

    Attributes:
        ratio: compression ratio m.
        win_rows: ``[J, m]`` rows of ``Tab`` forming each window completed by this forward.
        win_prev: ``[J, m]`` rows of ``CaTab`` holding the previous window's Ca half (CSA; ``[0, m]``
            for HCA).
        win_pos: ``[J]`` position of each window (``w * m``), for RoPE.
        win_out: ``[J]`` flat slot of the new entry in the compressed pool
            (``page * (page_size / m) + w % (page_size / m)``).
        buf_rows: ``[B, m]`` rows of ``Tab`` forming each request's new partial window.
        ovl_rows: ``[B, m]`` rows of ``Tab`` of each request's last completed window (``-1`` rows:
            no new window, keep the old overlap state).
        snap_rows: ``[S, m]`` rows of ``Tab`` of windows that end on a block boundary (CSA resume
            snapshots; ``[0, m]`` for HCA).
        snap_pages: ``[S]`` window pages receiving those snapshots.
        visible: ``[T]`` number of the request's entries visible to each token (``(pos + 1) // m``).
        max_visible: ``C``, the width of the dense candidate lists (host int): the largest
            ``visible`` (eager) or ``ctx // m`` of the graph's context bucket.
        candidates: ``[T, C]`` dense flat slots of the visible entries (``-1`` padded), set by
            :func:`expand_kv_indices`; ``None`` in a batch fresh from the builder.
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
    visible: torch.Tensor
    max_visible: int
    candidates: torch.Tensor | None = None


@dataclass
class ForwardBatch:
    """A batch of requests' new tokens (extend, decode or mixed) for one model forward.

    Tensor fields are described in the module docstring (compact form, int64 on the device).

    Attributes:
        extend_lens / prefix_lens: per request (host lists).
        logits_counts: ``logits_counts[b]`` of the ``logits_indices`` rows belong to request ``b``
            (in order; host list).
        page_size: tokens per block page; window: positions per window page (= sliding window).
        csa / hca: :class:`CompressPlan` per ratio (``None`` if the model has no such layer).
        indexer_stream: CUDA stream on which CSA layers run their indexer branch (compressor,
            scoring, top-k), overlapping the main branch; ``None`` runs it inline. Read by
            ``DSV4Attention``; set from the runner's indexer-stream policy.
        graph_safe: the batch's tensors are the padded static buffers of a CUDA graph (or their
            eager stand-in on CPU): no layer may synchronise with the host or pick shapes from
            tensor values. Read by ``Compressor.run``.
        swa_idx: ``[T, window]`` dense window-pool slots of each token's sliding keys (``-1`` =
            none), set by :func:`expand_kv_indices`; ``None`` in a batch fresh from the builder.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    token_req: torch.Tensor
    req_pool_indices: torch.Tensor
    block_table: torch.Tensor
    swa_write: torch.Tensor
    swa_pages: torch.Tensor
    logits_indices: torch.Tensor
    extend_lens: list[int]
    prefix_lens: list[int]
    logits_counts: list[int]
    page_size: int
    window: int
    csa: CompressPlan | None = None
    hca: CompressPlan | None = None
    indexer_stream: torch.cuda.Stream | None = None
    graph_safe: bool = False
    swa_idx: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.extend_lens)


def expand_kv_indices(fb: ForwardBatch) -> ForwardBatch:
    """The dense per-token key lists the current attention / indexer kernels read, from the
    compact form: a copy of ``fb`` with ``swa_idx`` and every plan's ``candidates`` set.

    Runs on the batch's device, inside every forward (so also inside a captured CUDA graph). This
    is the only place where a ``tokens x candidates`` tensor is made; kernels that read
    ``block_table`` / ``swa_pages`` directly remove it.

    * ``swa_idx [T, window]``: key ``j`` of the token at ``p`` is position
      ``k = p - window + 1 + j``, at slot ``page * window + k % window`` with ``page`` the token's
      own window page if ``k`` is in its span, else the page of the span before; ``-1`` where
      ``k < 0`` or the page is ``-1`` (padding).
    * ``candidates [T, C]`` per ratio ``m``: column ``c < visible[t]`` is entry ``c`` of the token's
      request, at ``block_table[b, c // e] * e + c % e`` with ``e = page_size // m``; else ``-1``.
    """
    W = fb.window
    pos = fb.positions
    ar = torch.arange(W, dtype=torch.int64, device=pos.device)
    kp = pos[:, None] - (W - 1) + ar[None, :]
    prev, cur = fb.swa_pages[:, 0:1], fb.swa_pages[:, 1:2]
    page = torch.where(kp // W == (pos // W)[:, None], cur, prev)
    swa_idx = torch.where((kp >= 0) & (page >= 0), page * W + kp % W, -1)
    plans: dict[str, CompressPlan | None] = {}
    for name in ("csa", "hca"):
        plan: CompressPlan | None = getattr(fb, name)
        if plan is not None:
            e = fb.page_size // plan.ratio
            col = torch.arange(plan.max_visible, dtype=torch.int64, device=pos.device)
            pages = fb.block_table[fb.token_req][:, col // e]
            cand = torch.where(col[None, :] < plan.visible[:, None], pages * e + col % e, -1)
            plan = dataclasses.replace(plan, candidates=cand)
        plans[name] = plan
    return dataclasses.replace(fb, swa_idx=swa_idx, csa=plans["csa"], hca=plans["hca"])


@dataclass
class HostMetadata:
    """The builder's output on the host, before it is written to a device buffer.

    Attributes:
        arrays: field name (``"input_ids"``, ``"csa.win_rows"``, ...) -> int64 numpy array in the
            shapes of the module docstring (unpadded).
        num_req_rows: ``B`` the row tables were computed for (the padded batch size in a graph).
        extend_lens / prefix_lens / logits_counts: host lists of the batch.
        max_visible: ratio name -> largest visible-entry count of any token.
    """

    arrays: dict[str, np.ndarray]
    num_req_rows: int
    extend_lens: list[int]
    prefix_lens: list[int]
    logits_counts: list[int]
    max_visible: dict[str, int]


def _ragged_arange(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For per-group ``counts [G]``: ``(group [N], index within the group [N])``, ``N = sum``."""
    group = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    return group, np.arange(group.shape[0], dtype=np.int64) - starts[group]


class MetadataLayout:
    """Where each field lives in one flat int64 buffer, and with which shape.

    An exact layout (:meth:`ForwardBatchBuilder.build`) has the metadata's own shapes; a static
    layout (:meth:`ForwardBatchBuilder.static_layout`) has the padded shapes of one CUDA-graph key,
    whatever batch it replays. :meth:`write` fills a host buffer, :meth:`views` makes the
    :class:`ForwardBatch` of a device copy of it.

    Args:
        shapes: field name -> shape, in layout order.
        ratios: ratio name (``"csa"``, ``"hca"``) -> m.
        max_visible: ratio name -> ``C`` of the dense candidates.
        page_size / window: of the model's pools.
        num_req_rows: ``B`` the row tables must be computed for (``None``: any, exact layouts).
        all_logits: logits of every token row (graphs) instead of the metadata's rows.
    """

    def __init__(
        self,
        shapes: dict[str, tuple[int, ...]],
        ratios: dict[str, int],
        max_visible: dict[str, int],
        page_size: int,
        window: int,
        num_req_rows: int | None = None,
        all_logits: bool = False,
    ) -> None:
        self.shapes = shapes
        self.ratios, self.max_visible = ratios, max_visible
        self.page_size, self.window = page_size, window
        self.num_req_rows, self.all_logits = num_req_rows, all_logits
        self.offsets: dict[str, int] = {}
        self.size = 0
        for name, shape in shapes.items():
            self.offsets[name] = self.size
            self.size += int(np.prod(shape))
        self._pad: np.ndarray | None = None
        self._host: np.ndarray | None = None  # the host buffer last written, and its field views
        self._host_views: dict[str, np.ndarray] = {}

    def _view(self, buf: np.ndarray | torch.Tensor, name: str) -> np.ndarray | torch.Tensor:
        n = int(np.prod(self.shapes[name]))
        o = self.offsets[name]
        return buf[o : o + n].reshape(self.shapes[name])

    def write(self, host: np.ndarray, meta: HostMetadata | None) -> None:
        """Write ``meta`` into ``host[: self.size]``, padding every field to its shape with
        :data:`PAD`; ``meta=None`` writes an all-padding batch (graph warm-up and capture).

        Raises:
            ValueError: ``meta`` does not fit (more tokens, requests, windows or block pages than the
                static shape, more visible entries than ``C``, or row tables computed for another
                ``B``); ``host`` is then unchanged.
        """
        if meta is not None:
            if self.num_req_rows is not None and meta.num_req_rows != self.num_req_rows:
                raise ValueError(
                    f"row tables computed for {meta.num_req_rows} requests, layout has {self.num_req_rows}"
                )
            for name, c in meta.max_visible.items():
                if c > self.max_visible[name]:
                    raise ValueError(
                        f"{name}.candidates: {c} visible entries exceed the static {self.max_visible[name]}"
                    )
            for name, a in meta.arrays.items():
                shape = self.shapes[name]
                if a.shape != shape and (a.ndim != len(shape) or any(s > d for s, d in zip(a.shape, shape))):
                    raise ValueError(f"{name}: shape {a.shape} exceeds the static shape {shape}")
        if self._host is not host:
            self._host, self._host_views = host, {name: self._view(host, name) for name in self.shapes}
        if meta is None or any(a.shape != self.shapes[k] for k, a in meta.arrays.items()):
            host[: self.size] = self._padding()
        if meta is None:
            return
        for name, a in meta.arrays.items():
            dst = self._host_views[name]
            if name == "logits_indices" and self.all_logits:
                dst[...] = self._view(self._padding(), name)
                continue
            if a.shape == dst.shape:
                dst[...] = a
            elif a.size:
                dst[tuple(slice(0, s) for s in a.shape)] = a

    def _padding(self) -> np.ndarray:
        """``[size]`` the all-padding buffer (:data:`PAD`; ``logits_indices`` of every row if
        ``all_logits``), built once."""
        if self._pad is None:
            pad = np.empty(self.size, dtype=np.int64)
            for name, shape in self.shapes.items():
                v = self._view(pad, name)
                if name == "logits_indices" and self.all_logits:
                    v[...] = np.arange(shape[0], dtype=np.int64)
                else:
                    v[...] = PAD[name.rsplit(".", 1)[-1]]
            self._pad = pad
        return self._pad

    def views(
        self,
        buf: torch.Tensor,
        extend_lens: list[int],
        prefix_lens: list[int],
        logits_counts: list[int],
    ) -> ForwardBatch:
        """A :class:`ForwardBatch` whose tensors are views of ``buf`` (a device copy of what
        :meth:`write` filled) and whose host lists are the given ones."""
        t = {name: self._view(buf, name) for name in self.shapes}
        plans = {
            name: CompressPlan(
                ratio=m,
                max_visible=self.max_visible[name],
                **{f: t[f"{name}.{f}"] for f in PLAN_FIELDS},
            )
            for name, m in self.ratios.items()
        }
        return ForwardBatch(
            **{f: t[f] for f in BATCH_FIELDS},
            extend_lens=extend_lens,
            prefix_lens=prefix_lens,
            logits_counts=logits_counts,
            page_size=self.page_size,
            window=self.window,
            csa=plans.get("csa"),
            hca=plans.get("hca"),
        )


class ForwardBatchBuilder:
    """Builds the metadata of one model's forwards (the only writer of :class:`ForwardBatch`).

    Args:
        page_size: tokens per block page.
        window: sliding window (positions per window page).
        csa_ratio / hca_ratio: compression ratios present in the model (``None`` if absent).
        device: where the batch tensors live.

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
    ) -> None:
        self.page_size, self.window = int(page_size), int(window)
        self.ratios = {n: int(m) for n, m in (("csa", csa_ratio), ("hca", hca_ratio)) if m is not None}
        for name, m in self.ratios.items():
            if self.page_size % m:
                raise ValueError(f"page_size: {page_size} is not a multiple of the {name} ratio {m}")
        self.device = torch.device(device)

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
        n = np.fromiter((len(r.input_ids) for r in reqs), np.int64, B)
        if not n.all():
            raise ValueError(f"request slot {reqs[int(np.argmin(n))].req_pool_idx}: input_ids is empty")
        p = np.fromiter((r.prefix_len for r in reqs), np.int64, B)
        end = p + n
        need = -(-end // ps)
        lo = np.maximum(0, (p - W + 1) // W)
        n_spans = (end - 1) // W - lo + 1
        span_start = np.cumsum(n_spans) - n_spans
        block_table = np.full((B, int(need.max())), -1, dtype=np.int64)
        span_pages = np.empty(int(n_spans.sum()), dtype=np.int64)
        for b, r in enumerate(reqs):
            nb = int(need[b])
            if len(r.block_pages) < nb:
                raise ValueError(
                    f"request slot {r.req_pool_idx}: {len(r.block_pages)} block pages for {end[b]} tokens"
                )
            block_table[b, :nb] = r.block_pages[:nb]
            k0, s0 = int(lo[b]), int(span_start[b])
            try:
                for i in range(int(n_spans[b])):
                    span_pages[s0 + i] = r.window_pages[k0 + i]
            except KeyError as e:
                raise ValueError(
                    f"request slot {r.req_pool_idx}: no window page for span {e.args[0]}"
                ) from None
        token_req, tok_i = _ragged_arange(n)
        t0 = np.cumsum(n) - n
        T = token_req.shape[0]
        pos = p[token_req] + tok_i
        span = pos // W
        cur_i = span_start[token_req] + span - lo[token_req]
        cur = span_pages[cur_i]
        prev = np.where(span - 1 >= lo[token_req], span_pages[np.maximum(cur_i - 1, 0)], -1)
        ls = np.clip(np.fromiter((r.logits_start for r in reqs), np.int64, B), 0, n)
        k_req, k_i = _ragged_arange(n - ls)
        arrays: dict[str, np.ndarray] = {
            "input_ids": np.fromiter(itertools.chain.from_iterable(r.input_ids for r in reqs), np.int64, T),
            "positions": pos,
            "token_req": token_req,
            "req_pool_indices": np.fromiter((r.req_pool_idx for r in reqs), np.int64, B),
            "block_table": block_table,
            "swa_write": cur * W + pos % W,
            "swa_pages": np.stack([prev, cur], axis=1),
            "logits_indices": t0[k_req] + ls[k_req] + k_i,
        }
        max_visible = {}
        for name, m in self.ratios.items():
            plan = self._plan(m, name == "csa", p, end, t0, Bp, block_table, span_pages, span_start, lo)
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
        )

    def _plan(
        self,
        m: int,
        overlap: bool,
        p: np.ndarray,
        end: np.ndarray,
        t0: np.ndarray,
        Bp: int,
        block_table: np.ndarray,
        span_pages: np.ndarray,
        span_start: np.ndarray,
        lo: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """The window / state row tables of one ratio (:class:`CompressPlan`), numpy int64."""
        B = p.shape[0]
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
            "win_out": block_table[j_req, ws // e] * e + ws % e,
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
    def build(
        self, reqs: list[ReqForwardInput], indexer_stream: torch.cuda.Stream | None = None
    ) -> ForwardBatch:
        """Eager forward: the batch's metadata in one fresh buffer on the device (one copy).

        Raises:
            ValueError: as :meth:`metadata`.
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
        buf = host_t.to(self.device, non_blocking=True)
        fb = lay.views(buf, meta.extend_lens, meta.prefix_lens, meta.logits_counts)
        fb.indexer_stream = indexer_stream
        return fb

    def static_layout(self, bs: int, ctx: int) -> MetadataLayout:
        """The padded layout of a decode CUDA-graph key: ``bs`` one-token requests of context at
        most ``ctx`` (``T = B = J = S = bs``, ``P = ceil(ctx / page_size)``, ``C = ctx // m``)."""
        P = -(-ctx // self.page_size)
        shapes: dict[str, tuple[int, ...]] = {f: (bs,) for f in BATCH_FIELDS}
        shapes.update(block_table=(bs, P), swa_pages=(bs, 2))
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
