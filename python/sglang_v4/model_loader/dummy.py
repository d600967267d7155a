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

import torch

from sglang_v4.layers.quantization import SCALE_SUFFIX

#: RMS of an e2m1 value whose 4-bit code is uniformly random: sqrt(mean(v^2)) over the 8 magnitudes.
_E2M1_UNIFORM_RMS = math.sqrt(sum(v * v for v in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)) / 8)
_FP8_SPREAD = 16.0  # e4m3 values drawn as N(0, 16^2): well inside the +-448 range
_CHUNK_ELEMS = 1 << 26  # fp32 temporaries of at most 256 MiB


@torch.no_grad()
def _dummy_fp8(weight: torch.Tensor, scale: torch.Tensor, g: torch.Generator) -> None:
    rows, cols = weight.shape
    step = max(1, _CHUNK_ELEMS // cols)
    for r0 in range(0, rows, step):
        n = min(step, rows - r0)
        t = torch.randn(n, cols, generator=g, device=weight.device, dtype=torch.float32) * _FP8_SPREAD
        weight[r0 : r0 + n].copy_(t.clamp_(-448.0, 448.0).to(torch.float8_e4m3fn))
    scale.fill_(1.0 / (_FP8_SPREAD * math.sqrt(cols)))


@torch.no_grad()
def _dummy_fp4(packed: torch.Tensor, scale: torch.Tensor, g: torch.Generator) -> None:
    packed.random_(0, 256, generator=g)
    fan_in = 2 * packed.shape[-1]
    scale.fill_(127 + round(math.log2(1.0 / (_E2M1_UNIFORM_RMS * math.sqrt(fan_in)))))


@torch.no_grad()
def init_dummy_weights(model: torch.nn.Module, seed: int = 0) -> None:
    """Deterministic random weights, generated on the weights' device (``--load-format dummy``).

    Matrices get ``N(0, 1/fan_in)`` (quantized ones the equivalent in their format, module
    docstring); 1-D norm weights are ~1; mHC scales 1; biases, sinks and position biases small;
    the hash-routing table ``tid2eid`` a random choice of distinct experts.
    """
    gen_dev = next(model.parameters()).device
    g = torch.Generator(device=gen_dev).manual_seed(seed)
    params, buffers = dict(model.named_parameters()), dict(model.named_buffers())
    for name, p in list(params.items()) + list(buffers.items()):
        base = name[: -len(SCALE_SUFFIX)]
        if name.endswith(SCALE_SUFFIX) and (base in params or base in buffers):
            continue  # a quantized weight's scale: set with its weight
        scale = buffers.get(name + SCALE_SUFFIX)
        if scale is not None and p.dtype == torch.float8_e4m3fn:
            _dummy_fp8(p, scale, g)
            continue
        if scale is not None and p.dtype == torch.uint8:
            _dummy_fp4(p, scale, g)
            continue
        if name.endswith("tid2eid"):
            vocab, k = p.shape
            n_exp = model.mc.hf.n_routed_experts
            r = torch.rand(vocab, n_exp, generator=g, device=gen_dev)
            p.copy_(r.argsort(dim=-1)[:, :k])
            continue
        if not p.is_floating_point():
            continue
        if p.dim() >= 2:
            p.copy_(
                torch.randn(p.shape, generator=g, device=gen_dev, dtype=torch.float32)
                / math.sqrt(p.shape[-1])
            )
        elif "norm" in name or name.endswith("scale"):
            p.copy_(1.0 + 0.05 * torch.randn(p.shape, generator=g, device=gen_dev))
        else:
            p.copy_(0.1 * torch.randn(p.shape, generator=g, device=gen_dev))
