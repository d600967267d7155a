"""The MoE pair layout (``moe._align``: pairs sorted by expert in ``BLOCK_M``-row blocks) on the
Triton paths against two oracles: ``_align_torch`` (the torch op chain kept for the CPU) and a
pure-Python loop written from the contract (no sorting library, no floats).

Marked ``gpu``; skipped without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``, where
the multi-program path is run with small chunks so that many programs cooperate in seconds).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS

pytestmark = KERNEL_MARKS


@pytest.fixture(autouse=True)
def _chunks_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-launch layout even under ``SGLANG_V4_MOE_ALIGN_CHUNKS=0`` (``moe.ALIGN_CHUNKS``)."""
    from sgl_kernel_v4.triton import moe

    monkeypatch.setattr(moe, "ALIGN_CHUNKS", True)


def align_loop(ids: list[int], E: int, bm: int) -> tuple[list[int], list[int]]:
    """The layout by its definition: for each expert in order, its pair indices ascending, padded
    with the sentinel ``n`` to a multiple of ``bm`` rows, one block id per ``bm`` rows; then sentinel
    rows / expert -1 blocks up to the static bound ``ceil((n + E*(bm-1)) / bm)`` blocks. Pairs with
    ids outside ``[0, E)`` appear nowhere."""
    n = len(ids)
    per: list[list[int]] = [[] for _ in range(E)]
    for i, e in enumerate(ids):
        if 0 <= e < E:
            per[e].append(i)
    n_blocks = (n + E * (bm - 1) + bm - 1) // bm
    rows: list[int] = []
    experts: list[int] = []
    for e in range(E):
        nb = (len(per[e]) + bm - 1) // bm
        rows += per[e] + [n] * (nb * bm - len(per[e]))
        experts += [e] * nb
    assert len(experts) <= n_blocks
    rows += [n] * (n_blocks * bm - len(rows))
    experts += [-1] * (n_blocks - len(experts))
    return rows, experts


def check(ids: torch.Tensor, E: int, bm: int, block_p: int | None) -> None:
    """``_align_chunks`` (``block_p`` given) or ``_align`` equals both oracles exactly."""
    from sgl_kernel_v4.triton.moe import _align, _align_chunks, _align_torch

    dev = ids.to(DEVICE)
    if block_p is None:
        got = _align(dev, E, bm)
    else:
        got = _align_chunks(dev.reshape(-1), E, bm, block_p)
    rows, experts = align_loop(ids.reshape(-1).tolist(), E, bm)
    assert got[0].dtype == torch.int32 and got[1].dtype == torch.int32
    assert got[0].cpu().tolist() == rows
    assert got[1].cpu().tolist() == experts
    ref = _align_torch(ids, E, bm)
    assert torch.equal(got[0].cpu(), ref[0]) and torch.equal(got[1].cpu(), ref[1])


def random_ids(n: int, E: int, seed: int, invalid: float = 0.05) -> torch.Tensor:
    """``n`` int64 ids, uniform over the experts plus a share of invalid ones (-1, E, E + 7)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, E, (n,), generator=gen)
    bad = torch.rand(n, generator=gen) < invalid
    ids[bad] = torch.tensor([-1, E, E + 7])[torch.randint(0, 3, (int(bad.sum()),), generator=gen)]
    return ids


@pytest.mark.parametrize(
    "n,E,bm,block_p",
    [
        (1, 1, 16, 16),
        (37, 1, 16, 8),  # E = 1: one expert, five chunks
        (100, 8, 16, 16),
        (301, 5, 32, 32),  # n not a multiple of the chunk, a partial last chunk
        (257, 384, 16, 32),  # E = 384: more experts than pairs, most blocks empty
        (1000, 6, 128, 64),
        (4097, 32, 16, 64),  # one pair past the one-program limit
    ],
)
def test_chunks_random_ids(n: int, E: int, bm: int, block_p: int) -> None:
    check(random_ids(n, E, seed=n + E), E, bm, block_p)


@pytest.mark.parametrize(
    "case",
    ["all_on_first", "all_on_last", "all_invalid", "alternating", "int32_ids", "ids_past_int32", "two_d"],
)
def test_chunks_adversarial_ids(case: str) -> None:
    """Every pair on one expert (the stable order must span all chunks), every id invalid (only
    sentinels, every block -1), invalid ids interleaved, int32 ids, int64 ids beyond the int32
    range (invalid, not wrapped into range), a [T, k] tensor."""
    n, E, bm, block_p = 203, 7, 16, 16
    ids = torch.arange(n) % E
    if case == "all_on_first":
        ids = torch.zeros(n, dtype=torch.int64)
    elif case == "all_on_last":
        ids = torch.full((n,), E - 1)
    elif case == "all_invalid":
        ids = torch.where(torch.arange(n) % 2 == 0, -1, E)
    elif case == "alternating":
        ids = torch.where(torch.arange(n) % 2 == 0, torch.arange(n) % E, -1)
    elif case == "int32_ids":
        ids = (torch.arange(n) * 5 % (E + 1)).to(torch.int32)
    elif case == "ids_past_int32":
        ids = torch.where(torch.arange(n) % 3 == 0, 2**32 + 2, torch.arange(n) % E)
    elif case == "two_d":
        ids = random_ids(198, E, seed=1).reshape(33, 6)
        check(ids, E, bm, None)  # the wrapper flattens [T, k]
    check(ids, E, bm, block_p)


def test_align_dispatch_takes_no_torch_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above 4,096 pairs ``_align`` runs the Triton chunks, not ``_align_torch``."""
    from sgl_kernel_v4.triton import moe

    ids = random_ids(4097, 16, seed=3)
    rows, experts = align_loop(ids.tolist(), 16, 32)

    def refuse(*_: object) -> None:
        raise AssertionError("_align_torch called")

    calls = []
    real = moe._align_chunks

    def spy(*args: object, **kwargs: object) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(kwargs.get("block_p"))
        return real(*args, block_p=64)  # small chunks: seconds in the interpreter

    monkeypatch.setattr(moe, "_align_torch", refuse)
    monkeypatch.setattr(moe, "_align_chunks", spy)
    got = moe._align(ids.to(DEVICE), 16, 32)
    assert calls == [None]
    assert got[0].cpu().tolist() == rows and got[1].cpu().tolist() == experts


def test_align_chunks_bad_block_p() -> None:
    from sgl_kernel_v4.triton.moe import _align_chunks

    ids = torch.zeros(8, dtype=torch.int64, device=DEVICE)
    for bad in (0, 24, 2**20):  # 0, not a power of two, keys past int32 with E = 4000
        with pytest.raises(ValueError, match="block_p"):
            _align_chunks(ids, 4000, 16, bad)


@pytest.mark.slow
@pytest.mark.parametrize("n,E,bm", [(4097, 384, 16), (40000, 384, 16), (40000, 1, 128), (6 * 8192, 256, 32)])
def test_align_large_default_chunks(n: int, E: int, bm: int) -> None:
    """The serving path (``_align``, 1,024-pair chunks) at prefill sizes, E = 1 and 384."""
    check(random_ids(n, E, seed=n), E, bm, None)


@pytest.mark.slow
def test_align_all_pairs_on_one_expert_large() -> None:
    E = 256
    check(torch.full((24576,), 77), E, 128, None)


@pytest.mark.skipif(INTERP, reason="CUDA graphs and the compile cache need the GPU")
def test_align_chunks_cuda_graph_and_one_compile() -> None:
    """Captured in a CUDA graph and replayed on new ids of the same shape it matches the loop; batch
    sizes (pair counts) of one E and block class reuse one compiled variant of each kernel."""
    from sgl_kernel_v4.triton import moe

    E, bm = 160, 16
    for n in (5000, 6 * 1000 + 1):  # warm the variants before counting
        moe._align(random_ids(n, E, seed=n).cuda(), E, bm)

    def variants() -> int:
        kernels = (moe._align_count_kernel, moe._align_scatter_kernel)
        return sum(len(c[0]) for k in kernels for c in k.device_caches.values())

    before = variants()
    for n in (4100, 12345, 40000, 98304):
        check(random_ids(n, E, seed=n), E, bm, None)
    assert variants() == before
    static = random_ids(30000, E, seed=1).cuda()
    moe._align(static, E, bm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = moe._align(static, E, bm)
    fresh = random_ids(30000, E, seed=2)
    static.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    rows, experts = align_loop(fresh.tolist(), E, bm)
    assert out[0].cpu().tolist() == rows and out[1].cpu().tolist() == experts
