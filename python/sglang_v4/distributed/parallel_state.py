"""The tensor / expert parallel layout of one server and its ``torch.distributed`` groups.

Ranks (SGLang's semantics): ``--tp-size N`` ranks form one tensor-parallel group; ``--ep-size M``
(``M`` divides ``N``) splits the routed experts into ``M`` shards inside that group, and each
shard's experts are tensor-sliced over the ``N / M`` ranks that hold it (``moe_tp_size``): rank
``r`` holds expert shard ``r // moe_tp_size`` and intermediate slice ``r % moe_tp_size``. With
``M = N`` every rank holds whole experts; with ``M = 1`` every rank holds a slice of every expert.

Groups: the *device group* (NCCL on CUDA, gloo on CPU) carries the forward's collectives (the
all-reduces after the attention output projection and after the MoE, the LM head's all-gather);
NCCL collectives are captured in the decode CUDA graphs. The *CPU group* (always gloo) carries the
per-step batch broadcast from rank 0 (:meth:`TPGroup.broadcast_object`) and start-up agreements
(:meth:`TPGroup.min_int`); it waits as long as the server is idle, so its timeout is long, while
the device group's is ``--dist-timeout``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from sglang_v4.model_loader.quant import FP4_GROUP

logger = logging.getLogger(__name__)

#: How long a non-zero rank waits for rank 0's next batch (an idle server broadcasts nothing).
#: A dead rank 0 is noticed at once (the TCP connection closes); this bounds only a silent hang.
IDLE_WAIT_TIMEOUT = timedelta(days=7)


@dataclass(frozen=True)
class ParallelConfig:
    """One rank's place in the TP / EP layout (module docstring).

    Attributes:
        tp_size: ranks of the tensor-parallel group (``--tp-size``).
        tp_rank: this rank, ``0 .. tp_size - 1``.
        ep_size: expert-parallel shards inside the group (``--ep-size``; divides ``tp_size``).

    Raises:
        ValueError: a size below 1, a rank out of range, or ``ep_size`` not dividing ``tp_size``
            (naming the field).
    """

    tp_size: int = 1
    tp_rank: int = 0
    ep_size: int = 1

    def __post_init__(self) -> None:
        for name in ("tp_size", "ep_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer (got {v!r})")
        if not 0 <= self.tp_rank < self.tp_size:
            raise ValueError(f"tp_rank must be in [0, {self.tp_size}) (got {self.tp_rank})")
        if self.tp_size % self.ep_size:
            raise ValueError(
                f"ep_size must divide tp_size (experts are split inside the TP group): "
                f"got ep_size={self.ep_size}, tp_size={self.tp_size}"
            )

    @property
    def moe_tp_size(self) -> int:
        """Ranks that slice one expert shard on the intermediate dim (``tp_size / ep_size``)."""
        return self.tp_size // self.ep_size

    @property
    def ep_rank(self) -> int:
        """The expert shard this rank holds."""
        return self.tp_rank // self.moe_tp_size

    @property
    def moe_tp_rank(self) -> int:
        """This rank's intermediate slice of its expert shard."""
        return self.tp_rank % self.moe_tp_size

    @staticmethod
    def _split(n: int, parts: int, index: int, what: str) -> tuple[int, int]:
        if n % parts:
            raise ValueError(
                f"{what} ({n}) is not divisible by {parts}: cannot split it evenly over the ranks"
            )
        k = n // parts
        return index * k, (index + 1) * k

    def tp_range(self, n: int, what: str) -> tuple[int, int]:
        """``[start, stop)`` of this rank's even share of ``n`` (heads, groups, vocabulary rows...).

        Raises:
            ValueError: ``n`` not divisible by ``tp_size`` (naming ``what``).
        """
        return self._split(n, self.tp_size, self.tp_rank, what)

    def expert_range(self, n_experts: int) -> tuple[int, int]:
        """``[start, stop)`` of the routed experts this rank holds (its EP shard).

        Raises:
            ValueError: ``n_experts`` not divisible by ``ep_size``.
        """
        return self._split(n_experts, self.ep_size, self.ep_rank, "n_routed_experts (by --ep-size)")

    def moe_inter_range(self, inter: int) -> tuple[int, int]:
        """``[start, stop)`` of the routed experts' intermediate dim this rank holds.

        Raises:
            ValueError: ``inter`` not divisible by ``moe_tp_size``.
        """
        return self._split(inter, self.moe_tp_size, self.moe_tp_rank, "moe_intermediate_size (by tp/ep)")

    def describe(self) -> str:
        """E.g. ``"TP rank 1/2, EP shard 1/2 (whole experts)"``."""
        s = f"TP rank {self.tp_rank}/{self.tp_size}"
        if self.ep_size > 1:
            s += f", EP shard {self.ep_rank}/{self.ep_size}"
        if self.moe_tp_size > 1:
            s += f", expert slice {self.moe_tp_rank}/{self.moe_tp_size}"
        return s


def layout_splits(
    hf: Any, tp_size: int, ep_size: int, fp4_experts: bool = False
) -> list[tuple[str, str, int, int]]:
    """Every model dimension a TP / EP layout splits, as ``(flag, name, size, parts)``: ``size``
    must be divisible by ``parts``.

    The same splits the model's layers make (:meth:`ParallelConfig.tp_range` and friends):
    ``o_groups`` and ``num_attention_heads`` (whole query heads per rank), the shared expert's ``moe_intermediate_size`` and the LM head's ``vocab_size`` over
    ``tp_size``; ``n_routed_experts`` over ``ep_size``; each expert's ``moe_intermediate_size`` over
    ``tp_size / ep_size``, in whole FP4 scale groups (``FP4_GROUP`` values) when the experts are kept in FP4
    (``fp4_experts``). ``hf`` is a model config's ``transformers`` view (``ModelConfig.hf``).
    """
    moe_tp = tp_size // ep_size
    inter = int(hf.moe_intermediate_size)
    splits = [
        ("--tp-size", "o_groups", int(hf.o_groups), tp_size),
        ("--tp-size", "num_attention_heads", int(hf.num_attention_heads), tp_size),
        ("--tp-size", "moe_intermediate_size", inter, tp_size),
        ("--tp-size", "vocab_size", int(hf.vocab_size), tp_size),
        ("--ep-size", "n_routed_experts", int(hf.n_routed_experts), ep_size),
        ("--tp-size / --ep-size", "moe_intermediate_size", inter, moe_tp),
    ]
    if fp4_experts and inter % moe_tp == 0:
        splits.append(
            (
                "--tp-size / --ep-size",
                f"FP4 experts' intermediate slice ({inter} / {moe_tp})",
                inter // moe_tp,
                FP4_GROUP,
            )
        )
    return splits


def check_parallel_layout(hf: Any, tp_size: int, ep_size: int, fp4_experts: bool = False) -> None:
    """Refuse a TP / EP layout the model cannot be split into, before any rank starts.

    Without it every rank fails while building its layers, each with its own traceback, after the
    whole group has started. Args as :func:`layout_splits`.

    Raises:
        ValueError: naming ``tp_size`` (or ``ep_size``), the model dimension that does not divide,
            and the sizes that do: the ``--ep-size`` values (with this ``tp_size``) when an expert
            split fails, the ``--tp-size`` values (with this ``ep_size``) otherwise.
    """
    for flag, name, size, parts in layout_splits(hf, tp_size, ep_size, fp4_experts):
        if size % parts == 0:
            continue
        field = "ep_size" if flag == "--ep-size" else "tp_size"
        hint = ""
        if flag != "--tp-size":
            eps = [
                e for e in range(1, tp_size + 1) if tp_size % e == 0 and _splits(hf, tp_size, e, fp4_experts)
            ]
            if eps:
                hint = f"; --ep-size values that split it (with --tp-size {tp_size}): {eps}"
        if not hint:
            fits = [t for t in range(1, 257) if t % ep_size == 0 and _splits(hf, t, ep_size, fp4_experts)]
            hint = f"; --tp-size values that split it (with --ep-size {ep_size}): {fits}" if fits else ""
        raise ValueError(
            f"{field}: --tp-size {tp_size} --ep-size {ep_size} cannot split this model: its {name} ({size}) "
            f"is not divisible by {parts} ({flag}){hint}"
        )


def _splits(hf: Any, tp_size: int, ep_size: int, fp4_experts: bool) -> bool:
    return all(size % parts == 0 for _, _, size, parts in layout_splits(hf, tp_size, ep_size, fp4_experts))


class TPGroup:
    """The collectives of one tensor-parallel rank (identity operations when ``tp_size == 1``).

    Args:
        config: this rank's layout.
        device_group: the ``torch.distributed`` group of the forward's collectives (``None`` for
            one rank).
        cpu_group: a gloo group over the same ranks for Python objects (``None`` for one rank).
    """

    def __init__(self, config: ParallelConfig, device_group: Any = None, cpu_group: Any = None) -> None:
        self.config = config
        self.size = config.tp_size
        self.rank = config.tp_rank
        self.device_group = device_group
        self.cpu_group = cpu_group
        self._nccl = device_group is not None and dist.get_backend(device_group) == "nccl"

    @property
    def is_first_rank(self) -> bool:
        """Whether this is rank 0 (the one that schedules, samples and answers)."""
        return self.rank == 0

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks, in place; returns ``x``. Capturable in a CUDA graph (NCCL)."""
        if self.size > 1:
            dist.all_reduce(x, group=self.device_group)
        return x

    def all_gather(self, x: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """Concatenate every rank's ``x`` (equal shapes) along ``dim``, in rank order."""
        if self.size == 1:
            return x
        x = x.contiguous()
        if self._nccl:
            out = torch.empty((self.size, *x.shape), dtype=x.dtype, device=x.device)
            dist.all_gather_into_tensor(out, x, group=self.device_group)
            parts = list(out.unbind(0))
        else:
            parts = [torch.empty_like(x) for _ in range(self.size)]
            dist.all_gather(parts, x, group=self.device_group)
        return torch.cat(parts, dim=dim)

    def broadcast_tensor(self, x: torch.Tensor) -> torch.Tensor:
        """Overwrite ``x`` in place with rank 0's ``x`` (same shape and dtype on every rank) over
        the device group; returns ``x``. Used for the future token ids only rank 0 can resolve."""
        if self.size > 1:
            dist.broadcast(x, src=0, group=self.device_group)
        return x

    def broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's ``obj`` on every rank (pickled over the CPU group); other ranks pass ``None``
        and block until rank 0 sends."""
        if self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.cpu_group)
        return box[0]

    def min_int(self, value: int) -> int:
        """The smallest ``value`` over the ranks (e.g. the KV budget every rank can hold)."""
        if self.size == 1:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.cpu_group)
        return int(t.item())

    def barrier(self) -> None:
        """Wait for every rank (CPU group)."""
        if self.size > 1:
            dist.barrier(group=self.cpu_group)


def init_tp_group(
    config: ParallelConfig,
    device: torch.device,
    dist_init_addr: str | None,
    timeout_s: float | None = None,
) -> TPGroup:
    """Join the TP group (``torch.distributed.init_process_group`` over TCP) and build its groups.

    Args:
        config: this rank's layout; nothing is initialised when ``tp_size == 1``.
        device: the rank's device: NCCL for CUDA, gloo for CPU.
        dist_init_addr: ``host:port`` of rank 0's rendezvous (``--dist-init-addr``).
        timeout_s: timeout of the device group's collectives (``--dist-timeout``; ``None``: torch's
            default).

    Raises:
        ValueError: no ``dist_init_addr`` for ``tp_size > 1``.
        RuntimeError: from ``torch.distributed`` (a rank that never joins times out).
    """
    if config.tp_size == 1:
        return TPGroup(config)
    if not dist_init_addr:
        raise ValueError("dist_init_addr: required for tp_size > 1 (host:port of rank 0's rendezvous)")
    backend = "nccl" if device.type == "cuda" else "gloo"
    kw: dict[str, Any] = {}
    if timeout_s:
        kw["timeout"] = timedelta(seconds=float(timeout_s))
    if backend == "nccl":
        kw["device_id"] = device
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{dist_init_addr}",
            world_size=config.tp_size,
            rank=config.tp_rank,
            **kw,
        )
    cpu_group = dist.new_group(backend="gloo", timeout=IDLE_WAIT_TIMEOUT)
    group = TPGroup(config, dist.group.WORLD, cpu_group)
    if backend == "nccl":
        # create the NCCL communicator now: a collective must run eagerly before graph capture
        group.all_reduce(torch.zeros(1, device=device))
        torch.cuda.synchronize(device)
    logger.info("Joined the TP group at %s (%s, %s)", dist_init_addr, backend, config.describe())
    return group
