"""Tensor / expert parallelism over ``torch.distributed``: the ranks' layout
(:class:`~sglang_v4.distributed.parallel_state.ParallelConfig`), the process groups and the
collectives the model uses (:class:`~sglang_v4.distributed.parallel_state.TPGroup`), and how each
weight is split (:mod:`sglang_v4.distributed.sharding`). See ``docs/PARALLELISM.md``."""

from .parallel_state import ParallelConfig, TPGroup, init_tp_group
from .sharding import TensorShard

__all__ = ["ParallelConfig", "TPGroup", "TensorShard", "init_tp_group"]
