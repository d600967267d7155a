"""How one rank's weight tensor is cut out of the full (checkpoint) tensor.

A :class:`TensorShard` names, per split dimension, the ranges of the full tensor that the rank
keeps, concatenated in order (one range for a plain row / column split; two for the routed
experts' ``gate_up_proj``, whose gate and up halves are sliced alike). Shapes are *logical*: an
FP4 tensor's last dimension counts values, not packed bytes. The loader reads exactly these
regions (``model_loader/weight_loader.py``), the dummy initialiser generates them
(``model_loader/dummy.py``), and the model's table of which weight is split how lives with the
model (``DeepseekV4ForCausalLM.weight_shards``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import torch

Range = tuple[int, int]


@dataclass(frozen=True)
class TensorShard:
    """A rank's part of a tensor of logical shape ``full_shape``.

    Attributes:
        full_shape: the whole tensor's logical shape (what the checkpoint stores).
        dims: ``((dim, ((start, stop), ...)), ...)``: for each split dimension the ranges kept,
            concatenated in order; dimensions not listed are kept whole.

    Raises:
        ValueError: a range outside the dimension or empty.
    """

    full_shape: tuple[int, ...]
    dims: tuple[tuple[int, tuple[Range, ...]], ...] = ()

    def __post_init__(self) -> None:
        for d, ranges in self.dims:
            if not 0 <= d < len(self.full_shape):
                raise ValueError(f"shard dim {d} outside a tensor of shape {self.full_shape}")
            for s, e in ranges:
                if not 0 <= s < e <= self.full_shape[d]:
                    raise ValueError(f"shard range [{s}, {e}) outside dim {d} of shape {self.full_shape}")

    @staticmethod
    def split(full_shape: tuple[int, ...], dim: int, *ranges: Range) -> TensorShard:
        """The shard keeping ``ranges`` of ``dim`` (in order) and everything else."""
        return TensorShard(tuple(int(x) for x in full_shape), ((dim, tuple(ranges)),))

    def and_split(self, dim: int, *ranges: Range) -> TensorShard:
        """This shard with ``dim`` cut to ``ranges`` too."""
        return TensorShard(self.full_shape, (*self.dims, (dim, tuple(ranges))))

    def ranges(self, dim: int) -> tuple[Range, ...]:
        """The ranges kept along ``dim`` (the whole dimension when it is not split)."""
        for d, r in self.dims:
            if d == dim:
                return r
        return ((0, self.full_shape[dim]),)

    @property
    def local_shape(self) -> tuple[int, ...]:
        """The rank's tensor shape (logical)."""
        return tuple(sum(e - s for s, e in self.ranges(d)) for d in range(len(self.full_shape)))

    @property
    def is_full(self) -> bool:
        """Whether the rank keeps the whole tensor."""
        return self.local_shape == self.full_shape

    def regions(self) -> Iterator[tuple[tuple[Range, ...], tuple[int, ...]]]:
        """Every contiguous block of the shard: ``(global ranges per dim, local offset per dim)``
        (one block unless a dimension keeps several ranges)."""
        per_dim = []
        for d in range(len(self.full_shape)):
            off, items = 0, []
            for s, e in self.ranges(d):
                items.append(((s, e), off))
                off += e - s
            per_dim.append(items)
        for combo in itertools.product(*per_dim):
            yield tuple(c[0] for c in combo), tuple(c[1] for c in combo)

    def cut(self, full: torch.Tensor) -> torch.Tensor:
        """The rank's part of ``full`` (a logical, unpacked tensor of ``full_shape``)."""
        if tuple(full.shape) != self.full_shape:
            raise ValueError(f"cut: tensor of shape {tuple(full.shape)}, shard of {self.full_shape}")
        out = full
        for d, ranges in self.dims:
            out = torch.cat([out.narrow(d, s, e - s) for s, e in ranges], dim=d)
        return out
