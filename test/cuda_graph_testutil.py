"""Shared pieces of the CUDA-graph tests: a sequence driver, a graph runner factory and the captured / replayed state readers."""

from __future__ import annotations

import copy

import numpy as np
import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_executor.forward_batch import (
    ForwardBatch,
    MetadataLayout,
    ReqForwardInput,
)
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.server_args import ServerArgs

PAGE = 128


class _Seq:
    """One request's pages and length in one runner."""

    def __init__(self, runner: ModelRunner) -> None:
        pool = runner.pool
        self.slot = pool.req_slots.alloc()
        assert self.slot is not None
        pool.reset_req_state(self.slot)
        self.blocks: list[int] = []
        self.wins: dict[int, int] = {}
        self.done = 0
        self.runner = runner

    def inp(self, ids: list[int]) -> ReqForwardInput:
        pool = self.runner.pool
        end = self.done + len(ids)
        while len(self.blocks) < -(-end // PAGE):
            self.blocks += pool.block_alloc.alloc_or_raise(1)
        lo = max(0, (self.done - 127) // 128)
        for k in range(lo, (end - 1) // 128 + 1):
            if k not in self.wins:
                self.wins[k] = pool.window_alloc.alloc_or_raise(1)[0]
        return ReqForwardInput(
            self.slot, list(ids), self.done, list(self.blocks), dict(self.wins), len(ids) - 1
        )

    def advance(self, n: int) -> None:
        self.done += n


def _runner(cfg: dict, device: str, dtype: str, **kw) -> ModelRunner:
    mc = ModelConfig.from_dict(copy.deepcopy(cfg))
    sa = ServerArgs(
        device=device,
        dtype=dtype,
        page_size=PAGE,
        max_total_tokens=4096,
        max_running_requests=8,
        context_length=2048,
        load_format="dummy",
        random_seed=3,
        **kw,
    )
    return ModelRunner(mc, sa)


def _states(r: ModelRunner) -> dict[str, torch.Tensor]:
    """Every pool tensor without the reserved page / slot 0 (the padding's scratch space)."""
    p = r.pool
    out = {}
    for kind in p.layout.kinds:
        out[kind.value] = p.storage(kind)[:, 1:].float().cpu()
    for kind in p.layout.states:
        st = p.state_storage(kind)
        for i, t in enumerate([*st.request_tensors(), *st.snapshot_tensors()]):
            out[f"{kind.value}.state{i}"] = t[:, 1:].float().cpu()
    return out


def _replayed(lay: MetadataLayout, host: np.ndarray, table: torch.Tensor) -> ForwardBatch:
    """The batch a graph of layout ``lay`` replays from ``host`` with the page table ``table``."""
    bs = lay.num_req_rows
    assert bs is not None
    fb = lay.views(torch.from_numpy(host), [1] * bs, [0] * bs, [1] * bs)
    fb.req_to_page = table
    return fb


def _field(fb: ForwardBatch, name: str) -> np.ndarray:
    obj = fb
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj.numpy()


def _canonical_rows(name: str, a: np.ndarray, num_req_rows: int, m: int) -> np.ndarray:
    """Compressor row-table indices made independent of the batch's row count ``B``: ``Tab`` rows
    ``>= B * m`` are new tokens (``B * m + t``), ``CaTab`` rows ``>= B * m`` are ``Tab`` rows."""
    base = num_req_rows * m
    field = name.rsplit(".", 1)[-1]

    def tab(x: np.ndarray) -> np.ndarray:
        return np.where(x >= base, x - base + 10**6, x)

    if field in ("win_rows", "buf_rows", "ovl_rows", "snap_rows"):
        return tab(a)
    if field == "win_prev":
        return np.where(a >= base, tab(a - base) + 10**7, a)
    return a
