"""Tile choices of the FP8 block-scaled linear kernels (:mod:`sgl_kernel_v4.triton.fp8_gemm`).

Host-only integer arithmetic (imports nothing from Triton): the wrappers call these per launch, the
benchmark sweep (``benchmark/fp8_linear_sweep.py``) calls them to time each rule against tile
variants, and the tests check every config a rule can return against a float64 oracle.

Weight-only kernel at decode (``M <= 64`` tokens), two rules:

* :func:`w8a16_config_legacy`: 64-row tiles, split K until there are ~1.5 programs per SM.
* :func:`w8a16_config` (the default): the split, K step and pipeline depth that minimise a small
  streaming model (:func:`w8a16_cost`) of the busiest SM: its weight bytes over the bandwidth it can
  get (the least of its share of HBM, the bytes it keeps in flight per DRAM latency by Little's law,
  and its e4m3 decode rate), plus one latency and, with split K, the epilogue (partials written and re-read,
  an arrival atomic).
"""

from __future__ import annotations

import functools

from sgl_kernel_v4.triton._utils import cdiv

#: Shared memory a program may plan for its pipeline stages (H100/H200 allow 227 KiB per block;
#: the rest is left to Triton's epilogue and layout-conversion scratch).
SMEM_BUDGET = 200 * 1024
#: Shared memory per SM (H100/H200: 228 KiB), shared by the resident programs.
SMEM_PER_SM = 228 * 1024
#: Model constants (H200): the rate a streaming kernel reaches (the device-to-device copy rate, in
#: bytes/s), the latency of a DRAM read under load (s), the fixed cost of the split-K epilogue (s:
#: partial store, arrival atomic, an L2 round trip to read the partials back).
HBM_BPS = 4.1e12
DRAM_LATENCY_S = 1.0e-6
SPLIT_EPILOGUE_S = 0.8e-6
#: e4m3 bytes/s one SM decodes and multiplies with at least two warps per scheduler: the packed
#: decode costs 3 INT32 operations per value (6 per pair, :func:`fp8_gemm._e4m3_asm`) on a
#: 64-per-clock pipe, ~21 values per clock at ~1.9 GHz. One warp per scheduler gets half (nothing
#: hides its shared-memory and MMA waits).
DECODE_BPS_PER_SM = 40e9
#: Configs whose modelled time is within this factor of the best are ties; the simplest wins
#: (least split, 128-deep K step, stages nearest 4).
_TIE = 1.03

W8A16_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")


def stages_for(stage_bytes: int, want: int) -> int:
    """The deepest pipeline up to ``want`` stages whose buffers fit :data:`SMEM_BUDGET` (at least 1)."""
    return max(1, min(want, SMEM_BUDGET // stage_bytes))


def _w8a16_bm(M: int) -> int:
    return 16 if M <= 16 else 32 if M <= 32 else 64


def _prefill_config(M: int, elem_bytes: int) -> dict[str, int]:
    bm, bn, bk = 128, 128, 128
    stage = bm * bk * elem_bytes + bn * bk
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1, "num_warps": 8,
            "num_stages": stages_for(stage, 4)}  # fmt: skip


def w8a16_config_legacy(M: int, N: int, G: int, K: int, sms: int, elem_bytes: int = 2) -> dict[str, int]:
    """The first rule: 64 weight rows per program (the MMA's register side), ``BLOCK_M`` = the token
    count rounded up to 16 (up to 64; prefill-sized calls 128x128 tiles); when the tiles cannot
    give every SM a program, split K so that there are ~1.5 programs per SM (at least two 128-deep
    steps per split, at most 16 splits). Pipeline depth from the shared memory one stage takes
    (``x`` tile in its dtype + the e4m3 tile), up to 4."""
    if M > 64:
        return _prefill_config(M, elem_bytes)
    bm, bn, bk = _w8a16_bm(M), 64, 128
    tiles = cdiv(N, bn) * G * cdiv(M, bm)
    k_tiles = cdiv(K, bk)
    split = 1
    if tiles < sms:
        split = max(1, min(16, k_tiles // 2, -(-3 * sms // (2 * tiles))))
    stage = bm * bk * elem_bytes + bn * bk
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4,
            "num_stages": stages_for(stage, 4)}  # fmt: skip


def w8a16_cost(M: int, N: int, G: int, K: int, sms: int, elem_bytes: int, cfg: dict[str, int]) -> float:
    """Modelled seconds of one weight-only launch with tiles ``cfg`` (keys :data:`W8A16_KEYS`).

    The busiest SM runs ``ceil(P / sms)`` of the ``P = tiles x SPLIT_K`` programs and streams
    their weight bytes (``BLOCK_N x BLOCK_K`` e4m3 per K step). It keeps ``min(stages - 1, steps)``
    steps in flight per resident program (residency from :data:`SMEM_PER_SM` and 16 programs per
    SM), so by Little's law it reads at most ``in flight / DRAM_LATENCY_S``, and at most its share
    ``HBM_BPS / sms`` of the bandwidth, and at most what it decodes (:data:`DECODE_BPS_PER_SM`, halved
    with one warp per scheduler). Time = one latency + bytes / that rate; split K adds
    :data:`SPLIT_EPILOGUE_S` and its fp32 partials (``SPLIT_K x M x G x N x 4`` bytes, written and
    read back) at :data:`HBM_BPS`. Activation reads (L2 hits) are not
    modelled. Model, not measurement: the GPU sweep judges it."""
    bm, bn, bk, split, stages = (cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_stages"))
    steps = cdiv(K, bk)
    per = cdiv(steps, split)
    programs = cdiv(N, bn) * G * cdiv(M, bm) * split
    stage = bm * bk * elem_bytes + bn * bk
    resident = max(1, min(16, SMEM_PER_SM // (stages * stage + 1024)))
    on_sm = cdiv(programs, sms)
    sm_bytes = on_sm * per * bn * bk
    in_flight = min(on_sm, resident) * max(1, min(stages - 1, per)) * bn * bk
    warps_per_scheduler = min(on_sm, resident) * cfg["num_warps"] / 4
    decode = DECODE_BPS_PER_SM * min(1.0, warps_per_scheduler / 2)
    rate = min(HBM_BPS / sms, in_flight / DRAM_LATENCY_S, decode)
    t = DRAM_LATENCY_S + sm_bytes / rate
    if split > 1:
        t += SPLIT_EPILOGUE_S + 2 * split * M * G * N * 4 / HBM_BPS
    return t


@functools.lru_cache(maxsize=1024)
def _w8a16_model_choice(M: int, N: int, G: int, K: int, sms: int, elem_bytes: int) -> tuple[int, ...]:
    bm, bn = _w8a16_bm(M), 64
    scored = []
    for bk in (128, 256):
        steps = cdiv(K, bk)
        stage = bm * bk * elem_bytes + bn * bk
        for split in range(1, min(16, steps) + 1):
            if cdiv(steps, cdiv(steps, split)) != split:  # a split with no K step
                continue
            for stages in range(2, stages_for(stage, 6) + 1):
                cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": 4,
                       "num_stages": stages}  # fmt: skip
                scored.append(
                    (w8a16_cost(M, N, G, K, sms, elem_bytes, cfg), split, bk, abs(stages - 4), stages)
                )
    if not scored:  # K so small that a 2-stage 128-deep step does not fit: cannot happen for M <= 64
        return (bm, bn, 128, 1, 4, 1)
    best = min(s[0] for s in scored)
    near = [s for s in scored if s[0] <= best * _TIE]
    _, split, bk, _, stages = min(near, key=lambda s: s[1:4])
    return (bm, bn, bk, split, 4, stages)


def w8a16_config(M: int, N: int, G: int, K: int, sms: int, elem_bytes: int = 2) -> dict[str, int]:
    """Tiles for the weight-only kernel ``x [M, G, K] @ W [G*N, K]^T`` on ``sms`` SMs with
    ``elem_bytes``-byte activations (keys :data:`W8A16_KEYS`).

    Decode (``M <= 64``): 64 weight rows per program (the MMA's register side, 4 warps),
    ``BLOCK_M`` = the token count rounded up to 16; the K step (128 or 256: two scale blocks),
    split-K factor (1-16, no empty split) and pipeline depth (2-6, within :data:`SMEM_BUDGET`)
    that minimise :func:`w8a16_cost`, near-ties going to the least split, then the 128-deep step,
    then the depth nearest 4. Prefill-sized calls: 128x128 tiles, no split (as
    :func:`w8a16_config_legacy`)."""
    if M > 64:
        return _prefill_config(M, elem_bytes)
    bm, bn, bk, split, warps, stages = _w8a16_model_choice(M, N, G, K, sms, elem_bytes)
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
            "num_stages": stages}  # fmt: skip


def check_w8a16_config(cfg: dict[str, int]) -> None:
    """Raise ``ValueError`` (naming ``config``) unless ``cfg`` has exactly :data:`W8A16_KEYS`, the
    block sizes are powers of two >= 16 (so ``BLOCK_K`` divides 128 or is a multiple of it: a K step
    never straddles a scale block), ``SPLIT_K`` is 1-64 and the launch options are valid."""
    if set(cfg) != set(W8A16_KEYS):
        raise ValueError(f"config: expected the keys {sorted(W8A16_KEYS)}, got {sorted(cfg)}")
    for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        v = cfg[k]
        if not isinstance(v, int) or v < 16 or v & (v - 1):
            raise ValueError(f"config: {k} must be a power of two >= 16, got {v!r}")
    if not 1 <= cfg["SPLIT_K"] <= 64:
        raise ValueError(f"config: SPLIT_K must be in 1..64, got {cfg['SPLIT_K']!r}")
    if cfg["num_warps"] not in (1, 2, 4, 8, 16) or cfg["num_stages"] < 1:
        raise ValueError(f"config: bad num_warps / num_stages {cfg['num_warps']!r} / {cfg['num_stages']!r}")


def w8a8_config(M: int, N: int) -> dict[str, int]:
    """Tiles for the fp8 x fp8 kernel (e4m3 operands: 1 B per element per stage)."""
    if M <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8, "num_stages": 4}
