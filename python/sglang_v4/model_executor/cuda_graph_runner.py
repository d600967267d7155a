"""CUDA-graph decode for the DeepSeek-V4 model runner (SGLang's ``CudaGraphRunner`` shape).

A decode step (every request adds one token) is replayed from a CUDA graph captured per key
``(bs, ctx, two_stream)``:

* ``bs``: a batch-size bucket (``1, 2, 4, 8, 12, 16, 24, 32, 48, ...`` up to ``max_bs``); the real
  batch is padded with dummy requests that use the reserved request slot 0 (``ReqSlotAllocator``
  hands out ``1..N``), block page 0 and window page 0 (``PageAllocator`` reserves id 0), with
  ``swa_write = -1`` and ``swa_idx = -1`` so they write no real KV and attend to nothing;
* ``ctx``: a power-of-two bucket ``>= max(prefix_len + 1)``; the per-ratio candidate lists
  (``[T, C]``, entry ``w`` visible to position ``t`` iff ``w < (t + 1) // ratio``) are padded with
  ``-1`` to ``C = ctx // ratio``;
* the completed windows ``J`` and the CSA block-end snapshots ``S`` (at most one of each per
  request in decode) are padded to ``bs`` with ``win_out = -1`` (not written), ``win_rows = -1``,
  ``win_pos = 0`` and snapshots to the dummy window page 0.

All index tensors of a key live in one static int64 device buffer, filled from one pinned host
buffer by a single copy per step; the model reads them through a :class:`ForwardBatch` of views.
The layers never synchronise with the host on CUDA (``Compressor.run`` merges with
``torch.where``), so the whole forward is captured, including the indexer's second stream
(``fb.extras["indexer_stream"]``, forked and joined with ``wait_stream`` inside the graph).

Graphs are captured lazily on a key's first use (one warm-up forward + one capture, on dummy
inputs that only touch slot 0 / page 0). A failed capture logs a warning and disables graphs
(eager fallback). Logits are copied inside the graph into a runner-owned ``[max_bs, vocab]``
buffer, so the graphs' memory pool (shared by all keys) keeps no per-graph outputs.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sglang_v4.model_executor.forward_batch import (
    CompressPlan,
    ForwardBatch,
    ReqForwardInput,
    build_forward_batch,
)

if TYPE_CHECKING:
    from sglang_v4.model_executor.model_runner import ModelRunner

logger = logging.getLogger(__name__)

DEFAULT_BS_BUCKETS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512)


def bs_buckets(max_bs: int) -> list[int]:
    """Batch-size buckets ``<= max_bs`` (``max_bs`` itself always included)."""
    if max_bs < 1:
        raise ValueError(f"cuda_graph_max_bs: must be >= 1, got {max_bs}")
    out = [b for b in DEFAULT_BS_BUCKETS if b < max_bs]
    return out + [max_bs]


def pick_bucket(n: int, buckets: list[int]) -> int | None:
    """Smallest bucket ``>= n`` or ``None``."""
    for b in buckets:
        if b >= n:
            return b
    return None


def dummy_request() -> ReqForwardInput:
    """A padding request: slot 0, token 0 at position 0, block page 0, window page 0."""
    return ReqForwardInput(0, [0], 0, [0], {0: 0}, 0)


@dataclasses.dataclass
class _Field:
    name: str  # "input_ids" or "csa.win_rows" ...
    offset: int
    shape: tuple[int, ...]
    pad: int  # value of padded entries


class StaticLayout:
    """Where each index tensor of a graph key lives in the flat int64 buffer.

    Args:
        bs: padded batch size (= tokens, decode).
        ctx: context bucket (candidate columns are ``ctx // ratio``).
        window: sliding window.
        ratios: ``{"csa": 4, "hca": 128}`` for the ratios present.
    """

    def __init__(self, bs: int, ctx: int, window: int, ratios: dict[str, int]) -> None:
        self.bs, self.ctx, self.window, self.ratios = bs, ctx, window, dict(ratios)
        self.fields: list[_Field] = []
        self.size = 0
        add = self._add
        add("input_ids", (bs,), 0)
        add("positions", (bs,), 0)
        add("token_req", (bs,), 0)
        add("req_pool_indices", (bs,), 0)
        add("swa_write", (bs,), -1)
        add("swa_idx", (bs, window), -1)
        add("logits_indices", (bs,), 0)
        for name, m in self.ratios.items():
            overlap = name == "csa"
            add(f"{name}.win_rows", (bs, m), -1)
            add(f"{name}.win_prev", (bs if overlap else 0, m), -1)
            add(f"{name}.win_pos", (bs,), 0)
            add(f"{name}.win_out", (bs,), -1)
            add(f"{name}.buf_rows", (bs, m), -1)
            add(f"{name}.ovl_rows", (bs, m), -1)
            add(f"{name}.snap_rows", (bs if overlap else 0, m), -1)
            add(f"{name}.snap_pages", (bs if overlap else 0,), 0)
            add(f"{name}.candidates", (bs, ctx // m), -1)

    def _add(self, name: str, shape: tuple[int, ...], pad: int) -> None:
        self.fields.append(_Field(name, self.size, shape, pad))
        self.size += int(np.prod(shape))

    def fill(self, host: np.ndarray, fb: ForwardBatch, n_real: int) -> None:
        """Write the padded batch ``fb`` (built on the host for ``bs`` requests, the first
        ``n_real`` real) into ``host[: self.size]``.

        Raises:
            ValueError: a plan is larger than the static shape (not a decode batch, or a context
                beyond ``ctx``).
        """
        for f in self.fields:
            dst = host[f.offset : f.offset + int(np.prod(f.shape))].reshape(f.shape)
            src = _get(fb, f.name)
            if f.name == "logits_indices":
                dst[:] = np.arange(self.bs, dtype=np.int64)
                continue
            a = src.numpy() if isinstance(src, torch.Tensor) else np.asarray(src)
            if a.ndim != len(f.shape) or any(s > d for s, d in zip(a.shape, f.shape)):
                raise ValueError(f"{f.name}: shape {a.shape} exceeds the static shape {f.shape}")
            dst.fill(f.pad)
            dst[tuple(slice(0, s) for s in a.shape)] = a
            if f.name in ("swa_write", "swa_idx"):
                dst[n_real:] = -1  # padding requests write and read no window KV

    def np_views(self, host: np.ndarray) -> dict[str, np.ndarray]:
        """Field name -> view of ``host`` with the field's shape."""
        return {
            f.name: host[f.offset : f.offset + int(np.prod(f.shape))].reshape(f.shape) for f in self.fields
        }

    def fill_decode(self, host: np.ndarray, reqs: list[ReqForwardInput], n_real: int, page_size: int) -> None:
        """Vectorised equivalent of ``fill(host, build_forward_batch(reqs, ...), n_real)`` for a
        padded decode batch (``len(reqs) == bs``, one token each): the same index maps as
        :func:`~sglang_v4.model_executor.forward_batch.build_forward_batch` (a decode token at
        position ``p`` completes the window ending at ``p`` iff ``(p + 1) % m == 0``; its partial
        window holds ``(p + 1) % m`` rows, the last one the new token; it sees the first
        ``(p + 1) // m`` entries), without the per-request numpy work (tested equal in
        ``test_gpu_cuda_graph_padding.py``).

        Raises:
            ValueError: not a padded decode batch, a missing block / window page, or more
                visible entries than the context bucket holds.
        """
        bs, W = self.bs, self.window
        if len(reqs) != bs or any(len(r.input_ids) != 1 for r in reqs):
            raise ValueError(f"reqs: expected {bs} one-token requests")
        v = self.np_views(host)
        pos = np.fromiter((r.prefix_len for r in reqs), np.int64, bs)
        end = pos + 1
        k = pos // W
        lo = np.maximum(0, (pos - W + 1) // W)
        cur = np.empty(bs, np.int64)
        prev = np.full(bs, -1, np.int64)
        for b, r in enumerate(reqs):
            if len(r.block_pages) < -(-int(end[b]) // page_size):
                raise ValueError(
                    f"request slot {r.req_pool_idx}: {len(r.block_pages)} block pages for {end[b]} tokens"
                )
            try:
                cur[b] = r.window_pages[int(k[b])]
                if lo[b] < k[b]:
                    prev[b] = r.window_pages[int(k[b]) - 1]
            except KeyError as e:
                raise ValueError(
                    f"request slot {r.req_pool_idx}: no window page for span {e.args[0]}"
                ) from None
        ar_b = np.arange(bs, dtype=np.int64)
        v["input_ids"][:] = np.fromiter((r.input_ids[0] for r in reqs), np.int64, bs)
        v["positions"][:] = pos
        v["token_req"][:] = ar_b
        v["req_pool_indices"][:] = np.fromiter((r.req_pool_idx for r in reqs), np.int64, bs)
        v["logits_indices"][:] = ar_b
        v["swa_write"][:] = cur * W + pos % W
        kp = pos[:, None] - (W - 1) + np.arange(W, dtype=np.int64)[None, :]
        page = np.where(kp // W == k[:, None], cur[:, None], prev[:, None])
        v["swa_idx"][:] = np.where(kp >= 0, page * W + kp % W, -1)
        v["swa_write"][n_real:] = -1
        v["swa_idx"][n_real:] = -1
        for name, m in self.ratios.items():
            overlap = name == "csa"
            per_page = page_size // m
            base = bs * m
            ar = np.arange(m, dtype=np.int64)
            own = ar_b[:, None] * m + ar[None, :]  # [bs, m] buffered rows of each request
            comp = np.nonzero(end % m == 0)[0]
            J = comp.shape[0]
            rows = own[comp].copy()
            rows[:, m - 1] = base + comp  # the window's last slot is the new token
            w = pos[comp] // m
            for key, val, pad in (
                ("win_rows", rows, -1),
                ("win_pos", w * m, 0),
                ("win_out", None, -1),
            ):
                dst = v[f"{name}.{key}"]
                dst.fill(pad)
                if val is not None:
                    dst[:J] = val
            if J:
                v[f"{name}.win_out"][:J] = [
                    reqs[int(b)].block_pages[int(ww) // per_page] * per_page + int(ww) % per_page
                    for b, ww in zip(comp, w)
                ]
            ovl = v[f"{name}.ovl_rows"]
            ovl.fill(-1)
            ovl[comp] = rows
            if overlap:
                wp = v[f"{name}.win_prev"]
                wp.fill(-1)
                wp[:J] = np.where((w >= 1)[:, None], own[comp], -1)
                snap = np.nonzero(end[comp] % page_size == 0)[0]
                sr, sp = v[f"{name}.snap_rows"], v[f"{name}.snap_pages"]
                sr.fill(-1)
                sp.fill(0)
                sr[: snap.shape[0]] = rows[snap]
                sp[: snap.shape[0]] = cur[comp[snap]]
            rem = end % m
            br = np.where(ar[None, :] < rem[:, None], own, -1)
            has = rem > 0
            br[has, rem[has] - 1] = base + ar_b[has]
            v[f"{name}.buf_rows"][:] = br
            C = self.ctx // m
            n_e = end // m
            if int(n_e.max()) > C:
                raise ValueError(f"{name}.candidates: {int(n_e.max())} visible entries exceed the static {C}")
            nb = -(-C // per_page) if C else 0
            blk = np.zeros((bs, max(nb, 1)), np.int64)
            for b, r in enumerate(reqs):
                need = min(nb, -(-int(n_e[b]) // per_page))
                if need:
                    blk[b, :need] = r.block_pages[:need]
            e = np.arange(C, dtype=np.int64)
            v[f"{name}.candidates"][:] = np.where(
                e[None, :] < n_e[:, None], blk[:, e // per_page] * per_page + e % per_page, -1
            )

    def views(self, dev_buf: torch.Tensor, base: ForwardBatch) -> ForwardBatch:
        """A :class:`ForwardBatch` whose tensors are views of ``dev_buf`` (host lists from ``base``)."""
        t: dict[str, torch.Tensor] = {}
        for f in self.fields:
            n = int(np.prod(f.shape))
            t[f.name] = dev_buf[f.offset : f.offset + n].view(f.shape)
        plans: dict[str, CompressPlan] = {}
        for name, m in self.ratios.items():
            kw = {k.split(".", 1)[1]: v for k, v in t.items() if k.startswith(name + ".")}
            plans[name] = CompressPlan(ratio=m, **kw)
        return ForwardBatch(
            input_ids=t["input_ids"],
            positions=t["positions"],
            token_req=t["token_req"],
            req_pool_indices=t["req_pool_indices"],
            extend_lens=list(base.extend_lens),
            prefix_lens=list(base.prefix_lens),
            swa_write=t["swa_write"],
            swa_idx=t["swa_idx"],
            logits_indices=t["logits_indices"],
            logits_counts=[1] * self.bs,
            csa=plans.get("csa"),
            hca=plans.get("hca"),
        )


def _get(fb: ForwardBatch, name: str) -> Any:
    if "." in name:
        plan, attr = name.split(".", 1)
        return getattr(getattr(fb, plan), attr)
    return getattr(fb, name)


class CudaGraphRunner:
    """Replays captured decode graphs for a :class:`ModelRunner` (see module docstring).

    Args:
        runner: the model runner (its ``model``, ``pool``, ``page_size``, ``mc``, ``device``).
        max_bs: largest batch replayed from a graph (``--cuda-graph-max-bs``).
        max_ctx: largest context bucket (longer decodes run eagerly).
        min_ctx: smallest context bucket.
        use_graphs: ``False`` replays the static (padded) batch eagerly instead of capturing; the
            CPU tests use it to check the padding, and it is the behaviour after a failed capture.

    Raises:
        ValueError: ``max_bs < 1``.
    """

    def __init__(
        self,
        runner: ModelRunner,
        max_bs: int,
        max_ctx: int,
        min_ctx: int = 1024,
        use_graphs: bool = True,
    ) -> None:
        self.runner = runner
        self.bs_list = bs_buckets(max_bs)
        self.max_bs = self.bs_list[-1]
        mc = runner.mc
        self.window = mc.sliding_window
        self.ratios: dict[str, int] = {}
        if mc.csa_layers:
            self.ratios["csa"] = mc.csa_ratio
        if mc.hca_layers:
            self.ratios["hca"] = mc.hca_ratio
        lcm = max([1, *self.ratios.values()])
        c = max(min_ctx, lcm)
        self.ctx_list: list[int] = []
        while True:
            self.ctx_list.append(c)
            if c >= max_ctx:
                break
            c *= 2
        self.use_graphs = use_graphs
        self.device = runner.device
        largest = StaticLayout(self.max_bs, self.ctx_list[-1], self.window, self.ratios).size
        self.dev_buf = torch.zeros(largest, dtype=torch.int64, device=self.device)
        pin = self.device.type == "cuda"
        self.host_buf = torch.zeros(largest, dtype=torch.int64, pin_memory=pin)
        self.host_np = self.host_buf.numpy()
        self.copy_done: torch.cuda.Event | None = None
        vocab = mc.vocab_size
        self.out_logits = torch.zeros(self.max_bs, vocab, dtype=torch.float32, device=self.device)
        self.graphs: dict[tuple[int, int, bool], torch.cuda.CUDAGraph] = {}
        self.static_fb: dict[tuple[int, int, bool], ForwardBatch] = {}
        self.layouts: dict[tuple[int, int], StaticLayout] = {}
        self.mempool = torch.cuda.graph_pool_handle() if (use_graphs and self.device.type == "cuda") else None
        self.failed = False
        self.num_replays = 0

    # ---- selection ------------------------------------------------------------------------
    def key_for(self, reqs: list[ReqForwardInput]) -> tuple[int, int] | None:
        """``(bs, ctx)`` bucket for a decode batch, or ``None`` if it cannot be replayed (not all
        requests add exactly one token, batch above ``max_bs``, context above the last bucket)."""
        if not reqs or any(len(r.input_ids) != 1 for r in reqs):
            return None
        bs = pick_bucket(len(reqs), self.bs_list)
        ctx = pick_bucket(max(r.prefix_len + 1 for r in reqs), self.ctx_list)
        if bs is None or ctx is None:
            return None
        return bs, ctx

    def can_run(self, reqs: list[ReqForwardInput]) -> bool:
        return not self.failed and self.key_for(reqs) is not None

    def _layout(self, bs: int, ctx: int) -> StaticLayout:
        k = (bs, ctx)
        if k not in self.layouts:
            self.layouts[k] = StaticLayout(bs, ctx, self.window, self.ratios)
        return self.layouts[k]

    @staticmethod
    def _padded(reqs: list[ReqForwardInput], bs: int) -> list[ReqForwardInput]:
        return list(reqs) + [dummy_request() for _ in range(bs - len(reqs))]

    def _host_batch(self, reqs: list[ReqForwardInput], bs: int) -> ForwardBatch:
        """The padded batch built by the generic host builder (used for the host-side lists)."""
        return build_forward_batch(
            self._padded(reqs, bs),
            self.runner.page_size,
            self.window,
            self.ratios.get("csa"),
            self.ratios.get("hca"),
            "cpu",
        )

    def _upload(self, lay: StaticLayout, reqs: list[ReqForwardInput], n_real: int) -> None:
        """Fill the pinned host buffer for the padded decode batch ``reqs`` and copy it up."""
        if self.copy_done is not None:
            self.copy_done.synchronize()  # the pinned buffer is free again
        lay.fill_decode(self.host_np, reqs, n_real, self.runner.page_size)
        self.dev_buf[: lay.size].copy_(self.host_buf[: lay.size], non_blocking=True)
        if self.device.type == "cuda":
            self.copy_done = torch.cuda.Event()
            self.copy_done.record()

    def _static(self, bs: int, ctx: int, two_stream: bool) -> ForwardBatch:
        key = (bs, ctx, two_stream)
        fb = self.static_fb.get(key)
        if fb is None:
            lay = self._layout(bs, ctx)
            base = self._host_batch([], bs)
            fb = lay.views(self.dev_buf, base)
            fb.extras["graph_safe"] = True
            if two_stream and self.runner.indexer_stream is not None:
                fb.extras["indexer_stream"] = self.runner.indexer_stream
            self.static_fb[key] = fb
        return fb

    # ---- capture / replay -----------------------------------------------------------------
    def _run_static(self, fb: ForwardBatch, bs: int) -> None:
        logits = self.runner.model(fb, self.runner.pool)
        self.out_logits[:bs].copy_(logits)

    def dummy_inputs(self, bs: int, ctx: int, two_stream: bool) -> ForwardBatch:
        """Load an all-padding batch (``bs`` dummy requests: slot 0, pages 0, no KV writes) into
        the static buffer and return the key's static batch; a forward on it (graph warm-up and
        capture) changes no real request's state."""
        lay = self._layout(bs, ctx)
        fb = self._static(bs, ctx, two_stream)
        self._upload(lay, self._padded([], bs), 0)
        return fb

    def capture(self, bs: int, ctx: int, two_stream: bool) -> None:
        """Capture the graph of key ``(bs, ctx, two_stream)`` on dummy inputs.

        Raises:
            RuntimeError: capture failed (the caller falls back to eager).
        """
        fb = self.dummy_inputs(bs, ctx, two_stream)
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):
            for _ in range(2):  # warm-up: Triton JIT, cuBLAS workspaces
                self._run_static(fb, bs)
        torch.cuda.current_stream(self.device).wait_stream(s)
        torch.cuda.synchronize(self.device)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=self.mempool):
            self._run_static(fb, bs)
        torch.cuda.synchronize(self.device)
        self.graphs[(bs, ctx, two_stream)] = g

    def capture_all(self, max_ctx: int) -> int:
        """Capture every batch-size bucket at every context bucket ``<= max_ctx`` now (server
        start-up, as SGLang captures its decode graphs), so the first requests do not stall on a
        capture; longer contexts are still captured on first use. The stream mode of each key
        follows :meth:`ModelRunner.indexer_stream_for`. A failed capture logs a warning and
        disables graphs (eager fallback), as in :meth:`replay`.

        Returns:
            the number of graphs captured by this call.
        """
        if not self.use_graphs or self.failed or self.device.type != "cuda":
            return 0
        n = 0
        for ctx in self.ctx_list:
            if ctx > max(max_ctx, self.ctx_list[0]):
                break
            for bs in self.bs_list:
                two = self.runner.indexer_stream_for(bs) is not None
                if (bs, ctx, two) in self.graphs:
                    continue
                if not self._capture_or_disable(bs, ctx, two):
                    return n
                n += 1
        return n

    def _capture_or_disable(self, bs: int, ctx: int, two_stream: bool) -> bool:
        """:meth:`capture`; on failure log a warning, disable graphs (eager fallback) and return False."""
        try:
            self.capture(bs, ctx, two_stream)
        except Exception as e:  # noqa: BLE001 - any capture failure means eager fallback
            logger.warning("CUDA graph capture failed for bs=%d ctx=%d (%s); running eagerly", bs, ctx, e)
            self.failed = True
            return False
        return True

    def replay(self, reqs: list[ReqForwardInput]) -> tuple[ForwardBatch, torch.Tensor]:
        """Run a decode batch through its graph (capturing it first if needed).

        Returns:
            ``(fb, logits)``: ``fb`` has the real requests' host lists (``extend_lens``,
            ``prefix_lens``, ``logits_counts``) and, as tensors, the key's static padded views
            (overwritten by the next step); ``logits`` ``[K, vocab]`` fp32 (a copy) of the rows
            the requests asked for.

        Raises:
            ValueError: the batch has no graph key (check :meth:`can_run` first).
        """
        key = self.key_for(reqs)
        if key is None:
            raise ValueError("replay: not a graph-replayable decode batch")
        bs, ctx = key
        two = self.runner.indexer_stream_for(bs) is not None
        gkey = (bs, ctx, two)
        use_graph = self.use_graphs and not self.failed and self.device.type == "cuda"
        if use_graph and gkey not in self.graphs:
            use_graph = self._capture_or_disable(bs, ctx, two)
        lay = self._layout(bs, ctx)
        n = len(reqs)
        self._upload(lay, self._padded(reqs, bs), n)
        static = self._static(bs, ctx, two)
        if use_graph:
            self.graphs[gkey].replay()
        else:
            self._run_static(static, bs)
        self.num_replays += 1
        rows = [b for b, r in enumerate(reqs) if r.logits_start <= 0]
        if len(rows) == n:
            logits = self.out_logits[:n].clone()
        else:
            logits = self.out_logits[torch.tensor(rows, dtype=torch.long, device=self.device)]
        out_fb = dataclasses.replace(
            static,
            extend_lens=[1] * n,
            prefix_lens=[r.prefix_len for r in reqs],
            logits_counts=[1 if r.logits_start <= 0 else 0 for r in reqs],
            extras={},
        )
        return out_fb, logits
