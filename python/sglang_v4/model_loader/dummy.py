"""Random weights generated on the device (``--load-format dummy``, as SGLang and vLLM call it).

Benchmarks use them instead of writing and reading a checkpoint. Quantized weights are generated
directly in their stored format: FP8 linears as e4m3 values of ``N(0, 16^2)`` with one power-of-two
block scale ``1 / (16 sqrt(fan_in))``; FP4 experts as uniformly random bytes (every e2m1 code
pair equally likely, RMS 2.93) with the power-of-two scale per 32 inputs nearest to
``1 / (2.93 sqrt(fan_in))``, so every layer's output has the scale of the unquantized
``N(0, 1/fan_in)`` weights (within a factor sqrt(2) for FP4).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable

import torch

from sglang_v4.distributed.sharding import TensorShard
from sglang_v4.layers.quantization import SCALE_SUFFIX

#: RMS of an e2m1 value whose 4-bit code is uniformly random: sqrt(mean(v^2)) over the 8 magnitudes.
_E2M1_UNIFORM_RMS = math.sqrt(sum(v * v for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)) / 8)
_FP8_SPREAD = 16.0  # e4m3 values drawn as N(0, 16^2): well inside the +-448 range
_CHUNK_ELEMS = 1 << 26  # fp32 temporaries of at most 256 MiB


def _seed(seed: int, name: str, chunk: int) -> int:
    """A generator seed per (run seed, tensor name, row chunk): values do not depend on which
    rank generates them or on the order of the tensors."""
    return (seed * 1_000_003 + zlib.crc32(name.encode()) * 65_537 + chunk) % (1 << 62)


def _generate(
    dst: torch.Tensor,
    full_shape: tuple[int, ...],
    shard: TensorShard,
    seed: int,
    name: str,
    make: Callable[[tuple[int, ...], torch.Generator], torch.Tensor],
) -> None:
    """Fill ``dst`` (this rank's part of a tensor of ``full_shape``, cut by ``shard``; storage
    coordinates) with the values of the full tensor, generated in chunks of rows along dim 0
    with one seed per chunk; only the chunks that hold this rank's rows are generated."""
    g = torch.Generator(device=dst.device)
    if not full_shape:  # a scalar
        g.manual_seed(_seed(seed, name, 0))
        dst.copy_(make((), g))
        return
    rows, per_row = full_shape[0], math.prod(full_shape[1:])
    step = max(1, _CHUNK_ELEMS // max(1, per_row))
    for k, r0 in enumerate(range(0, rows, step)):
        r1 = min(rows, r0 + step)
        if not any(s < r1 and e > r0 for s, e in shard.ranges(0)):
            continue
        g.manual_seed(_seed(seed, name, k))
        chunk = make((r1 - r0, *full_shape[1:]), g)
        for granges, loffs in shard.regions():
            (s, e), lo = granges[0], loffs[0]
            a, b = max(s, r0), min(e, r1)
            if a >= b:
                continue
            src = chunk[a - r0 : b - r0]
            idx: list[slice] = [slice(lo + a - s, lo + b - s)]
            for d in range(1, len(full_shape)):
                (ds, de), dl = granges[d], loffs[d]
                src = src.narrow(d, ds, de - ds)
                idx.append(slice(dl, dl + de - ds))
            dst[tuple(idx)].copy_(src)


def _storage_shard(shard: TensorShard, packed: bool) -> TensorShard:
    """``shard`` in storage coordinates (an FP4 tensor's last dim counts bytes, two values each)."""
    if not packed:
        return shard
    last = len(shard.full_shape) - 1
    full = (*shard.full_shape[:-1], shard.full_shape[-1] // 2)
    dims = tuple((d, tuple((s // 2, e // 2) for s, e in r) if d == last else r) for d, r in shard.dims)
    return TensorShard(full, dims)


@torch.no_grad()
def init_dummy_weights(
    model: torch.nn.Module, seed: int = 0, shards: dict[str, TensorShard] | None = None
) -> None:
    """Deterministic random weights, generated on the weights' device (``--load-format dummy``).

    Matrices get ``N(0, 1/fan_in)`` (quantized ones the equivalent in their format, module
    docstring); 1-D norm weights are ~1; mHC scales 1; biases, sinks and position biases small;
    the hash-routing table ``tid2eid`` a random choice of distinct experts.

    Tensor / expert parallel: ``shards`` (default ``model.weight_shards()``) says which part of
    each full tensor this rank holds; a rank generates only the row chunks holding its part, and
    every value is a function of ``(seed, name, chunk)`` alone, so the ranks of a TP run hold
    exactly the slices of the one-rank model's weights (``fan_in`` is the full tensor's).
    """
    if shards is None:
        get = getattr(model, "weight_shards", None)
        shards = get() if callable(get) else {}
    gen_dev = next(model.parameters()).device
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    for name, p in list(params.items()) + list(buffers.items()):
        base = name[: -len(SCALE_SUFFIX)]
        if name.endswith(SCALE_SUFFIX) and (base in params or base in buffers):
            continue  # a quantized weight's scale: set with its weight
        scale = buffers.get(name + SCALE_SUFFIX)
        packed = scale is not None and p.dtype == torch.uint8
        logical = (*p.shape[:-1], 2 * p.shape[-1]) if packed else tuple(p.shape)
        shard = shards.get(name) or TensorShard(logical)
        full = shard.full_shape
        st = _storage_shard(shard, packed)
        if scale is not None and p.dtype == torch.float8_e4m3fn:

            def fp8(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
                t = torch.randn(shape, generator=g, device=gen_dev, dtype=torch.float32) * _FP8_SPREAD
                return t.clamp_(-448.0, 448.0).to(torch.float8_e4m3fn)

            _generate(p, st.full_shape, st, seed, name, fp8)
            scale.fill_(1.0 / (_FP8_SPREAD * math.sqrt(full[-1])))
            continue
        if packed:
            assert scale is not None

            def fp4(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
                return torch.randint(0, 256, shape, generator=g, device=gen_dev, dtype=torch.uint8)

            _generate(p, st.full_shape, st, seed, name, fp4)
            scale.fill_(127 + round(math.log2(1.0 / (_E2M1_UNIFORM_RMS * math.sqrt(full[-1])))))
            continue
        if name.endswith("tid2eid"):
            vocab, k = p.shape
            n_exp = model.mc.hf.n_routed_experts

            def table(
                shape: tuple[int, ...], g: torch.Generator, n_exp: int = n_exp, k: int = k
            ) -> torch.Tensor:
                r = torch.rand(shape[0], n_exp, generator=g, device=gen_dev)
                return r.argsort(dim=-1)[:, :k]

            _generate(p, full, shard, seed, name, table)
            continue
        if not p.is_floating_point():
            continue
        if p.dim() >= 2:

            def mat(shape: tuple[int, ...], g: torch.Generator, fan_in: int = full[-1]) -> torch.Tensor:
                t = torch.randn(shape, generator=g, device=gen_dev, dtype=torch.float32)
                return t / math.sqrt(fan_in)

            make = mat
        elif "norm" in name or name.endswith("scale"):

            def make(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
                return 1.0 + 0.05 * torch.randn(shape, generator=g, device=gen_dev)

        else:

            def make(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
                return 0.1 * torch.randn(shape, generator=g, device=gen_dev)

        _generate(p, full, shard, seed, name, make)
