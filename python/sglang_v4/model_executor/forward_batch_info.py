"""ForwardBatch: the index metadata of one model forward (the dataclasses and their fields).

One code path serves extend (prefill from any prefix offset, i.e. chunked prefill and prefix-cache
hits), decode (an extend of one token) and mixed batches of both: each request contributes
``n >= 1`` new tokens at positions ``prefix_len .. prefix_len + n - 1``; the tokens of all requests
are concatenated (``T = sum n``, ``B`` requests).

:class:`~sglang_v4.model_executor.forward_batch.ForwardBatchBuilder` computes every index field once, on the host, vectorised over the
batch (:meth:`~ForwardBatchBuilder.metadata`, numpy int64), and writes it through a
:class:`~sglang_v4.model_executor.metadata_layout.MetadataLayout` either into one fresh buffer (eager forward) or, padded, into the static
buffer of a captured CUDA graph (replay; ``cuda_graph_runner.py``). Both paths share each field's
definition; only the padding differs.

Fields (all int64 on the device, ``-1`` = none; the readers in brackets):

========================  ==========  ===========================================================
field                     shape       meaning
========================  ==========  ===========================================================
``input_ids``             ``[T]``     token ids [embedding, hash-routed MoE]
``positions``             ``[T]``     absolute positions [RoPE, compressor ``position_bias``,
                                      sliding-window keys]
``token_req``             ``[T]``     each token's request row [attention, indexer]
``req_pool_indices``      ``[B]``     request slots: rows of the pool's per-request state and of
                                      the page table ``req_to_page`` [compressors, attention,
                                      indexer]
``swa_write``             ``[T]``     window-pool slot each token's KV is written to [attention]
``swa_pages``             ``[T, 2]``  window pages of the span before the token's span and of its
                                      own span (spans of ``window`` positions) [attention]
``logits_indices``        ``[K]``     token rows whose logits are computed [LM head]
``<ratio>.win_rows`` ...  see :class:`CompressPlan` (per compression ratio: CSA 4, HCA 128)
``<ratio>.visible``       ``[T]``     compressed entries visible to each token [attention, indexer]
========================  ==========  ===========================================================

plus ``req_to_page [R, P]`` int32: the pool's device page table
(:class:`~sglang_v4.mem_cache.req_to_page.ReqToPageTable`, SGLang's ``req_to_token`` at page
granularity), of which a forward uploads only the rows' pages that changed.

Long context: no field is sized tokens x candidates, and no per-step host work grows with the
context. The visible compressed entries of a token are the first ``visible[t]`` entries of its
request, entry ``w`` living at slot ``req_to_page[slot, w // e] * e + w % e`` (``e = page_size /
m``); the sliding-window keys of the token at ``p`` are positions ``p - window + 1 .. p`` in its two
``swa_pages`` (:mod:`sgl_kernel_v4.paged`). The attention and indexer kernels compute those slots
themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Fields of a :class:`CompressPlan` and of a :class:`ForwardBatch` outside its plans, in layout order.
PLAN_FIELDS = tuple(
    "win_rows win_prev win_pos win_out buf_rows ovl_rows snap_rows snap_pages visible".split()
)
BATCH_FIELDS = tuple(
    "input_ids positions token_req req_pool_indices swa_write swa_pages logits_indices".split()
)
#: Value of padded entries in a static (graph) layout. Padded requests use the reserved request
#: slot 0 and write no KV (``swa_write = win_out = -1``); padded snapshots go to the reserved window
#: page 0; padded tokens see nothing (``swa_pages = -1``, ``visible = 0``).
PAD = {f: 0 for f in BATCH_FIELDS + PLAN_FIELDS} | {
    f: -1 for f in "swa_write swa_pages win_rows win_prev win_out buf_rows ovl_rows snap_rows".split()
}


@dataclass(slots=True)
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
        max_visible: a bound on ``visible`` (host int): the largest value (eager) or
            ``context // m`` of a CUDA graph's context bound; sizes the indexer's workspace.
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


@dataclass
class ForwardBatch:
    """A batch of requests' new tokens (extend, decode or mixed) for one model forward.

    Tensor fields are described in the module docstring (compact form, int64 on the device;
    ``req_to_page`` int32).

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
            tensor values (no layer reads it today: every layer is graph-safe on every batch).
        req_to_page: ``[R, P]`` int32 page table (row = request slot); ``None`` until set by the
            builder.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    token_req: torch.Tensor
    req_pool_indices: torch.Tensor
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
    req_to_page: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        """``T``: tokens of the forward."""
        return int(self.input_ids.shape[0])

    @property
    def batch_size(self) -> int:
        """``B``: requests of the forward."""
        return len(self.extend_lens)

    @property
    def is_decode(self) -> bool:
        """Every request adds one token."""
        return all(n == 1 for n in self.extend_lens)
