"""The sampler's non-finite logit handling and temperature scaling (Triton), two launches per call.

Formulas of the torch path ``sglang_v4.sampling.logprobs`` (``finite_limit`` /
``scale_by_temperature``), which stays the CPU and reference path: a NaN logit becomes ``-inf``
(probability 0); the row maximum ``m`` over the non-NaN entries gives the shift, ``m`` itself
(or 0 when it is ``-inf``) for the temperature scaling, ``+inf`` (or 0 when ``m`` is not ``+inf``)
for the bare limit; then ``(x - shift) / T`` (round-to-nearest division, as torch's) with the
``inf - inf = NaN`` of a ``+inf`` entry made 0, so the ``+inf`` entries share the probability and
every other entry of their row is ``-inf``. Same float32 operations in the same order as the
torch path: the results are bit for bit equal.

Two launches over ``[B, V / 4096]`` programs (a row spread over many SMs even for a batch of
one): the first reads each 4096-wide slice of a row for its maximum, the second takes the row's
maximum from those and reads the slice again to write the result (two passes over ``[B, V]``; the
torch path makes four or five). The output may be the input (in place): each element is read
before it is written, by the program that writes it, and the first launch has read the whole
input before the second starts. No host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

__all__ = ["finite_limit", "scale_by_temperature"]

_BLOCK = 4096


@triton.jit(do_not_specialize=["V"])
def _row_max_kernel(z_ptr, stride_z, part_ptr, V, N_PART: tl.constexpr, BLOCK: tl.constexpr):
    """Maximum over the non-NaN entries of one ``BLOCK``-wide slice of one row (``-inf`` if none)."""
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(z_ptr + row * stride_z + offs, mask=offs < V, other=float("-inf"))
    tl.store(part_ptr + row * N_PART + part, tl.max(tl.where(x != x, float("-inf"), x), axis=0))


@triton.jit(do_not_specialize=["V"])
def _shift_scale_kernel(
    z_ptr,
    stride_z,
    part_ptr,
    t_ptr,
    out_ptr,
    stride_o,
    V,
    N_PART: tl.constexpr,
    P2: tl.constexpr,
    SCALE: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The row's maximum from its slices' maxima, then ``(x - shift) / T`` of one slice."""
    row = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)
    pidx = tl.arange(0, P2)
    m = tl.max(tl.load(part_ptr + row * N_PART + pidx, mask=pidx < N_PART, other=float("-inf")), axis=0)
    if SCALE:
        shift = tl.where(m == float("-inf"), 0.0, m)
    else:
        shift = tl.where(m == float("inf"), m, 0.0)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(z_ptr + row * stride_z + offs, mask=offs < V, other=float("-inf"))
    y = tl.where(x != x, float("-inf"), x) - shift
    if SCALE:
        y = tl.math.div_rn(y, tl.load(t_ptr + row))
    tl.store(out_ptr + row * stride_o + offs, tl.where(y != y, 0.0, y), mask=offs < V)


def _launch(z: torch.Tensor, temps: torch.Tensor | None, out: torch.Tensor | None) -> torch.Tensor:
    if z.dim() != 2 or z.dtype != torch.float32 or z.stride(1) != 1:
        raise ValueError(
            f"z: expected [B, V] float32 with a contiguous last dim, got {tuple(z.shape)} {z.dtype}"
        )
    B, V = z.shape
    if temps is not None:
        if temps.dtype != torch.float32 or temps.numel() != B or temps.device != z.device:
            raise ValueError(
                f"temps: expected {B} float32 temperatures on {z.device}, got {tuple(temps.shape)}"
            )
        temps = temps.reshape(B).contiguous()
    if out is None:
        out = torch.empty_like(z, memory_format=torch.contiguous_format)
    elif out.shape != z.shape or out.dtype != z.dtype or out.stride(1) != 1 or out.device != z.device:
        raise ValueError(f"out: expected {tuple(z.shape)} float32 on {z.device} with a contiguous last dim")
    if B == 0 or V == 0:
        return out
    block = min(_BLOCK, next_power_of_2(V))
    n_part = cdiv(V, block)
    part = torch.empty((B, n_part), dtype=torch.float32, device=z.device)
    warps = max(1, min(4, block // 1024))
    _row_max_kernel[(B, n_part)](z, z.stride(0), part, V, N_PART=n_part, BLOCK=block, num_warps=warps)
    _shift_scale_kernel[(B, n_part)](
        z, z.stride(0), part, temps if temps is not None else z, out, out.stride(0), V,
        N_PART=n_part, P2=next_power_of_2(n_part), SCALE=temps is not None, BLOCK=block, num_warps=warps,
    )  # fmt: skip
    return out


def scale_by_temperature(
    z: torch.Tensor, temps: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``(finite_limit(z) - max) / T`` per row, two launches (module docstring).

    Args:
        z: ``[B, V]`` float32 logits, last dim contiguous (any row stride). NaN / ``+inf`` allowed.
        temps: ``B`` float32 positive temperatures (``[B]`` or ``[B, 1]``) on ``z``'s device.
        out: ``[B, V]`` float32 result buffer, last dim contiguous; may be ``z`` (in place).

    Returns:
        ``[B, V]`` float32 with the row maximum at 0 (or all ``-inf``), no NaN and no ``+inf``;
        bit for bit ``sglang_v4.sampling.logprobs.scale_by_temperature``.

    Raises:
        ValueError: a shape, dtype, layout or device other than the above.
    """
    return _launch(z, temps, out)


def finite_limit(z: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """NaN -> ``-inf``; in a row with ``+inf`` entries those -> 0 and the others -> ``-inf``; every
    other entry unchanged (bit for bit ``sglang_v4.sampling.logprobs.finite_limit``), two launches.

    Args:
        z: ``[B, V]`` float32, last dim contiguous (any row stride).
        out: ``[B, V]`` float32 result buffer, last dim contiguous; may be ``z`` (in place).

    Returns:
        ``[B, V]`` float32 without NaN or ``+inf``.

    Raises:
        ValueError: a shape, dtype or layout other than the above.
    """
    return _launch(z, None, out)
