"""Tensor-parallel ranks as threads of one process: a :class:`ThreadTPGroup` per rank whose
collectives meet at a shared barrier, so N rank models can run one forward together without
starting processes (a ``gloo`` group of spawned ranks costs seconds per start).

The collectives do what ``torch.distributed`` does over a group: ``all_reduce`` sums in rank order,
``all_gather`` concatenates in rank order, ``broadcast_tensor`` / ``broadcast_object`` copy rank 0's
value. Each rank's model is built with its group and loaded with its cut of the full state dict
(``DeepseekV4ForCausalLM.weight_shards`` applied to the whole tensors, as the loader does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM


class _Meeting:
    """One rendezvous point shared by the ranks' groups: each rank posts a value, all wait, all
    read every rank's value, all wait again (so the slots can be reused)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=60)
        self.slots: list[Any] = [None] * size

    def exchange(self, rank: int, value: Any) -> list[Any]:
        self.slots[rank] = value
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        return got


class ThreadTPGroup(TPGroup):
    """A :class:`TPGroup` whose collectives run between threads (module docstring)."""

    def __init__(self, config: ParallelConfig, meeting: _Meeting) -> None:
        super().__init__(config)
        self.meeting = meeting

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.meeting.exchange(self.rank, x.clone())
        total = parts[0].clone()
        for p in parts[1:]:
            total += p
        x.copy_(total)
        return x

    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        return torch.cat(self.meeting.exchange(self.rank, x.contiguous().clone()), dim=dim)

    def broadcast_tensor(self, x: torch.Tensor) -> torch.Tensor:
        x.copy_(self.meeting.exchange(self.rank, x.clone())[0])
        return x

    def broadcast_object(self, obj: Any = None) -> Any:
        return self.meeting.exchange(self.rank, obj)[0]

    def min_int(self, value: int) -> int:
        return min(int(v) for v in self.meeting.exchange(self.rank, int(value)))

    def barrier(self) -> None:
        self.meeting.exchange(self.rank, None)


def rank_models(
    mc: ModelConfig, state: dict[str, torch.Tensor], tp_size: int, ep_size: int = 1
) -> list[DeepseekV4ForCausalLM]:
    """One fp32 model per rank of a ``tp_size`` / ``ep_size`` layout, each holding its cut of
    ``state`` (the whole model's HF-named tensors) and joined by thread collectives."""
    meeting = _Meeting(tp_size)
    models = []
    for rank in range(tp_size):
        pc = ParallelConfig(tp_size=tp_size, tp_rank=rank, ep_size=ep_size)
        m = DeepseekV4ForCausalLM(mc, tp=ThreadTPGroup(pc, meeting))
        shards = m.weight_shards()
        m.load_state_dict({k: shards[k].cut(v) if k in shards else v for k, v in state.items()}, strict=True)
        models.append(m)
    return models


def run_ranks(fns: list[Callable[[], Any]]) -> list[Any]:
    """Run ``fns[r]`` on thread ``r`` (one per rank); their results in rank order.

    Raises:
        AssertionError: a rank raised (its exception chained).
    """
    out: list[Any] = [None] * len(fns)
    err: list[BaseException] = []

    def _go(r: int) -> None:
        try:
            out[r] = fns[r]()
        except BaseException as e:  # noqa: BLE001 - reported below
            err.append(e)

    threads = [threading.Thread(target=_go, args=(r,), daemon=True) for r in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if err:
        raise AssertionError(f"a rank failed: {err[0]!r}") from err[0]
    return out
