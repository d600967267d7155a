"""The ``torch.Generator`` of a request's ``sampling_seed``: one stream per 64-bit seed.

``torch.Generator(device="cpu").manual_seed(s)`` seeds a Mersenne Twister (MT19937) with the low
32 bits of ``s`` only, so seeds that differ by a multiple of ``2**32`` drew the same stream: ``0``,
``2**32`` and ``-2**63`` gave one output, ``-1`` and ``2**63 - 1`` another (the fault numpy fixed
in numpy/numpy#4676 and PyTorch Lightning met in Lightning-AI/pytorch-lightning#21399). Here a seed
outside ``[0, 2**32)`` fills the MT19937 state with the reference ``init_by_array`` of its two
32-bit halves (Matsumoto & Nishimura's ``mt19937ar.c``, the initialisation numpy's ``RandomState``
uses for an array seed), so every 64-bit seed has its own state. Seeds in ``[0, 2**32)`` keep
``manual_seed`` (the reference ``init_genrand``: the streams they always had). CUDA generators
(Philox) already use all 64 bits and are seeded with ``manual_seed`` as before.
"""

from __future__ import annotations

import torch

__all__ = ["seeded_generator", "mt19937_init_by_array"]

_N = 624  # MT19937 state words
_MASK32 = 0xFFFFFFFF
#: Byte offsets in the CPU generator's state (``CPUGeneratorImplStateLegacy``): the initial seed
#: (uint64), ``left`` and ``seeded`` (int32 each), ``next`` (uint64), then the 624 state words
#: (uint64 each, holding 32-bit values).
_SEED_OFFSET, _STATE_OFFSET = 0, 24


def _init_genrand(s: int) -> list[int]:
    """MT19937's ``init_genrand(s)`` state words for a 32-bit ``s`` (``mt19937ar.c``)."""
    mt = [s & _MASK32]
    for i in range(1, _N):
        mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & _MASK32)
    return mt


def mt19937_init_by_array(key: list[int]) -> list[int]:
    """MT19937's ``init_by_array(key)`` state words (``mt19937ar.c``, 2002 version).

    Args:
        key: non-empty list of 32-bit unsigned integers.

    Returns:
        The 624 32-bit state words (``mt[0]`` is ``0x80000000``: a non-zero state).

    Raises:
        ValueError: ``key`` is empty or holds a value outside ``[0, 2**32)``.
    """
    if not key or any(not 0 <= k <= _MASK32 for k in key):
        raise ValueError(f"key must be a non-empty list of 32-bit unsigned integers, got {key!r}")
    mt = _init_genrand(19650218)
    i, j = 1, 0
    for _ in range(max(_N, len(key))):
        mt[i] = ((mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525)) + key[j] + j) & _MASK32
        i, j = i + 1, j + 1
        if i >= _N:
            mt[0], i = mt[_N - 1], 1
        if j >= len(key):
            j = 0
    for _ in range(_N - 1):
        mt[i] = ((mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941)) - i) & _MASK32
        i += 1
        if i >= _N:
            mt[0], i = mt[_N - 1], 1
    mt[0] = 0x80000000
    return mt


def seeded_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` whose stream is a function of the whole 64-bit ``seed``.

    Args:
        seed: the request's ``sampling_seed``, in ``[-2**63, 2**64)`` (negative seeds are read as
            their two's complement, as ``manual_seed`` reads them).
        device: the generator's device.

    Returns:
        The generator. On CPU, ``seed`` in ``[0, 2**32)`` gives ``manual_seed(seed)``; any other
        seed the MT19937 state of ``init_by_array([low 32 bits, high 32 bits])`` (its
        ``initial_seed()`` is the seed's unsigned 64-bit value). Elsewhere ``manual_seed(seed)``.

    Raises:
        ValueError: ``seed`` is outside ``[-2**63, 2**64)``.
    """
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"seed must be in [-2**63, 2**64), got {seed}")
    gen = torch.Generator(device=device)
    if gen.device.type != "cpu" or 0 <= seed <= _MASK32:
        return gen.manual_seed(seed)
    u = seed % 2**64
    gen.manual_seed(0)  # valid layout and flags (left, seeded, cached normals) to overwrite
    state = gen.get_state()
    words = torch.tensor(mt19937_init_by_array([u & _MASK32, u >> 32]), dtype=torch.int64)
    end = _STATE_OFFSET + 8 * _N
    state[_STATE_OFFSET:end] = words.view(torch.uint8)  # little-endian uint64 words
    state[_SEED_OFFSET : _SEED_OFFSET + 8] = torch.tensor([u - 2**64 if u >= 2**63 else u]).view(torch.uint8)
    gen.set_state(state)
    return gen
