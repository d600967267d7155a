"""The messages rank 0 broadcasts to the other tensor-parallel ranks (docs/PARALLELISM.md): one
forward (:class:`ForwardStep`), a CUDA-graph capture, a weight reload, and the stop. Rank 0's
:class:`~sglang_v4.model_executor.model_runner.ModelRunner` sends them over the TP group's CPU
group; ``tp_worker_process.py`` receives and acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sglang_v4.model_executor.forward_batch import ReqForwardInput

__all__ = ["CaptureGraphs", "ForwardStep", "Shutdown", "UpdateWeights"]


@dataclass
class ForwardStep:
    """One forward, as rank 0 broadcasts it to the other tensor-parallel ranks.

    Attributes:
        reqs: the forward's per-request inputs (page ids, token ids, positions).
        state_ops: the pool's request-state operations since the last step
            (``DSV4KVPool.take_state_ops``: slot resets, resume-state loads), replayed first.
        use_graph: rank 0 replays a CUDA graph (decode or extend key) for it (every rank takes the
            same path, so the collectives pair up).
        future_ids: ``reqs`` hold future placeholders; rank 0 broadcasts the resolved input ids
            over the device group (``TPGroup.broadcast_tensor``) before the model reads them.
    """

    reqs: list[ReqForwardInput]
    state_ops: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    use_graph: bool = False
    future_ids: bool = False


@dataclass
class CaptureGraphs:
    """Rank 0 captures its CUDA graphs (decode and extend keys, each serving every context): the
    other ranks do the same, in step (the captures run collectives)."""


@dataclass
class Shutdown:
    """Rank 0 is stopping: the other ranks exit."""


@dataclass
class UpdateWeights:
    """Rank 0 reloads the weights from ``model_path`` (``/update_weights_from_disk``): every rank
    reloads its shard, agreeing on success (:func:`~sglang_v4.model_loader.weight_update.swap_weights`)."""

    model_path: str
    previous_path: str | None
