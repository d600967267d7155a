"""Where a forward's index metadata lives in one flat int64 buffer (:class:`MetadataLayout`), and the
builder's host-side output (:class:`HostMetadata`).

An exact layout has the metadata's own shapes (an eager forward); a static layout has the padded
shapes of one CUDA-graph key (:mod:`sglang_v4.model_executor.cuda_graph_runner`), whatever batch
it replays. The fields and the padding values are those of
:mod:`sglang_v4.model_executor.forward_batch_info`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from sglang_v4.model_executor.forward_batch_info import (
    BATCH_FIELDS,
    PAD,
    PLAN_FIELDS,
    CompressPlan,
    ForwardBatch,
)


@dataclass
class HostMetadata:
    """The builder's output on the host, before it is written to a device buffer.

    Attributes:
        arrays: field name (``"input_ids"``, ``"csa.win_rows"``, ...) -> int64 numpy array in the
            shapes of the module docstring (unpadded).
        num_req_rows: ``B`` the row tables were computed for (the padded batch size in a graph).
        extend_lens / prefix_lens / logits_counts: host lists of the batch.
        max_visible: ratio name -> largest visible-entry count of any token.
        num_blocks: block pages each request reads (``ceil(end / page_size)``): the page-table
            columns the forward needs synced.
    """

    arrays: dict[str, np.ndarray]
    num_req_rows: int
    extend_lens: list[int]
    prefix_lens: list[int]
    logits_counts: list[int]
    max_visible: dict[str, int]
    num_blocks: list[int]


class MetadataLayout:
    """Where each field lives in one flat int64 buffer, and with which shape.

    An exact layout (:meth:`ForwardBatchBuilder.build`) has the metadata's own shapes; a static
    layout (:meth:`ForwardBatchBuilder.static_layout`) has the padded shapes of one CUDA-graph key,
    whatever batch it replays. :meth:`write` fills a host buffer, :meth:`views` makes the
    :class:`ForwardBatch` of a device copy of it.

    Args:
        shapes: field name -> shape, in layout order.
        ratios: ratio name (``"csa"``, ``"hca"``) -> m.
        max_visible: ratio name -> the bound on ``visible`` (:attr:`CompressPlan.max_visible`).
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
            ValueError: ``meta`` does not fit (more tokens, requests or windows than the static
                shape, more visible entries than the bound, or row tables computed for another
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
                        f"{name}.visible: {c} visible entries exceed the static bound {self.max_visible[name]}"
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
