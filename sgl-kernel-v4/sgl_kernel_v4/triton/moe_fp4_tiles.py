"""Tile choices of the FP4 routed-expert MoE kernels (:mod:`sgl_kernel_v4.triton.moe_fp4`).

Host-only arithmetic (no Triton import at module load): the wrapper
(:func:`~sgl_kernel_v4.triton.moe_fp4.fused_moe_fp4`) calls :func:`_config` per launch, the
warm-up compiles one forward per tile class (:func:`tile_class_token_counts`), and the decode sweep
(``benchmark/moe_fp4_sweep.py``) times the named pair-mode configurations (:data:`DECODE_VARIANTS`)
side by side. The layout (pair mode or expert mode) follows from how many (token, slot) pairs share
an expert (:func:`_use_pair_mode`); a config's keys are those the wrapper's ``config`` takes.
"""

from __future__ import annotations

__all__ = ["DECODE_DEFAULT", "DECODE_VARIANTS", "tile_class_token_counts"]


def _use_pair_mode(n_pairs: int, k: int, E: int) -> bool:
    """Pair mode when the batch's pairs rarely share an expert: one token (its ``k`` ids are
    distinct), or at most ``E / 4`` pairs (each pair then meets another of its expert with
    probability under about 1/4)."""
    return n_pairs <= max(k, E // 4)


#: Pair-mode (decode) configurations by name, timed side by side by ``benchmark/moe_fp4_sweep.py``;
#: :data:`DECODE_DEFAULT` names the one :func:`_config` picks. Keys beyond the tile: ``GU_FUSED``
#: (gate and up rows interleaved in one tile, one dot per K step, twice the programs),
#: ``DOWN_SPLIT`` (0: one down program per (token, N tile) summing its ``k`` slots in registers;
#: ``s >= 1``: one per (pair, K split, N tile) writing fp32 partials, then a partial-sum kernel:
#: ``k * s`` times the programs), ``DOWN_BLOCK_N / DOWN_BLOCK_K / DOWN_STAGES / DOWN_WARPS`` (the
#: down kernel's tile when it differs from gate/up's).
DECODE_VARIANTS: dict[str, dict[str, int]] = {
    # 256-deep K steps, 3 / 6 stages: the H200 tile sweep's best at E=32, T=1 (0.100 ms vs 0.133 ms
    # for 128-deep, 4 / 8 stages; benchmark/RESULTS.md, quantized weights)
    "baseline": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3, "DOWN_STAGES": 6},
    "dsplit1": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3, "DOWN_STAGES": 4,
                "DOWN_SPLIT": 1},
    "dsplit2": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3, "DOWN_STAGES": 4,
                "DOWN_SPLIT": 2, "DOWN_BLOCK_K": 128},
    "fused": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3, "DOWN_STAGES": 6,
              "GU_FUSED": 1},
    "fused_dsplit1": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3,
                      "DOWN_STAGES": 4, "GU_FUSED": 1, "DOWN_SPLIT": 1},
    "fused_dsplit2": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3,
                      "DOWN_STAGES": 4, "GU_FUSED": 1, "DOWN_SPLIT": 2, "DOWN_BLOCK_K": 128},
    "fused_k128": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 5,
                   "DOWN_STAGES": 5, "GU_FUSED": 1, "DOWN_SPLIT": 1},
    "fused_n128": {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
                   "DOWN_STAGES": 4, "GU_FUSED": 1, "DOWN_SPLIT": 2, "DOWN_BLOCK_N": 64},
    "fused_n32": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3,
                  "DOWN_STAGES": 4, "GU_FUSED": 1, "DOWN_SPLIT": 1, "DOWN_BLOCK_N": 32},
    # fused_dsplit1's tiles with the word decode (fp4_tile.fp4_words_tile)
    "fused_dsplit1_words": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "num_warps": 4, "num_stages": 3,
                            "DOWN_STAGES": 4, "GU_FUSED": 1, "DOWN_SPLIT": 1, "FP4_WORDS": 1},
}  # fmt: skip
#: From the H200 sweep (``benchmark/moe_fp4_sweep.py``, RESULTS.md; E=160, k=6, D=4096, I=2048):
#: ``fused_dsplit1`` took 48.5 us at one token vs 94.2 us for ``baseline`` (1.94x), 1.52x at two,
#: 1.20x at four. With the word decode (``fused_dsplit1_words``) the H100 run of
#: ``moe_fp4_sweep.py --set variants`` took 47.0 / 85.4 / 160.7 us at 1 / 2 / 4 tokens against
#: 48.5 / 90.5 / 167.1 us (1.03x - 1.06x; RESULTS.md), the same outputs to 2.4e-4 of 0.19.
DECODE_DEFAULT = "fused_dsplit1_words"


def _config(n_pairs: int, E: int, k: int, elem_bytes: int) -> dict[str, int]:
    """Tiles by pairs per expert (``docs/QUANTIZATION.md``). The weight tile is the MMA's 64-row side,
    the tokens the other (``BLOCK_M``, 16 at least). Decode: 64-row weight tiles, so that the few
    touched experts still give every SM programs, and deep pipelines (``DOWN_STAGES`` for the down
    kernel, whose pair-mode grid is only ``T * D / 64`` programs) to keep enough bytes in flight;
    prefill: 128x128 tiles. fp32 activations (the interpreter, fp32 tests) take 32-deep K steps."""
    if _use_pair_mode(n_pairs, k, E):
        cfg = dict(DECODE_VARIANTS[DECODE_DEFAULT], PAIR=1)
    else:
        per_expert = n_pairs / max(E, 1)
        if per_expert <= 16:
            cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
        elif per_expert <= 32:
            cfg = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
        elif per_expert <= 96:
            cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3}
        else:
            cfg = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
        cfg.update(PAIR=0, DOWN_STAGES=cfg["num_stages"])
    if elem_bytes > 2:
        cfg.update(BLOCK_K=32, num_stages=2, DOWN_STAGES=2)
    return cfg


def tile_class_token_counts(E: int, k: int, max_tokens: int, fp4: bool) -> list[int]:
    """The smallest token count of each tile class the MoE wrapper picks for ``T`` tokens of ``k``
    experts each over ``E`` (local) experts, ``1 <= T <= max_tokens``: one dummy forward per entry
    compiles every grouped-GEMM variant serving can hit (the pair counts are runtime arguments;
    ``fp4``: :func:`~.moe_fp4.fused_moe_fp4`'s classes, else :func:`~sgl_kernel_v4.triton.moe.fused_moe`'s).

    Raises:
        ValueError: ``E``, ``k`` or ``max_tokens`` below 1."""
    from sgl_kernel_v4.triton.moe import _config as bf16_config

    if min(E, k, max_tokens) < 1:
        raise ValueError(f"E, k, max_tokens: expected >= 1, got {E}, {k}, {max_tokens}")
    out, last = [], None
    for t in range(1, max_tokens + 1):
        cfg = _config(t * k, E, k, 2) if fp4 else bf16_config(t * k, E, 2)
        key = tuple(sorted(cfg.items()))
        if key != last:
            out.append(t)
            last = key
    return out
