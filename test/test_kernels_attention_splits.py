"""Split count of the paged sparse attention (op table entry 5) bounded by the layer's key count.

The split count is a function of the batch shape and of the most keys a token of the layer can
attend to (window + top-k in CSA layers, window + the page table's entry capacity in HCA layers,
the window alone in sliding-only layers), never of the actual context: a decode step at batch 1
of a CSA layer (640 keys) used to split them 64 ways (~10 keys per split, 64 partials per head
to combine). The host rule is checked on its own; the kernels (attention + combine) are checked
against a float64 oracle (``test_kernels_attention.oracle``) at split counts from 1 to 64 (the
combine merges 8 splits per step: 2 is one partial step, 64 eight steps with rescaling).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, dtypes, rel_err

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

SMS = 132  # H200


@pytest.fixture
def h200(monkeypatch: pytest.MonkeyPatch) -> None:
    """The split rule as on an H200 (132 SMs), whatever this machine is."""
    import sgl_kernel_v4.triton.attention as attn

    monkeypatch.setattr(attn, "num_sms", lambda device: SMS)


@pytest.mark.usefixtures("h200")
def test_split_count_bounded_by_key_count() -> None:
    from sgl_kernel_v4.triton.attention import MIN_KEYS_PER_SPLIT, default_num_splits

    cpu = torch.device("cpu")
    for T in (1, 2, 3, 4, 8, 16, 33, 64, 256, 2048):
        for H, block_h in ((64, 16), (64, 64), (16, 16), (12, 16)):
            n_hb = -(-H // block_h)
            old = default_num_splits(T, H, block_h, cpu)
            assert old & (old - 1) == 0 and 1 <= old <= 64
            assert old <= max(1, -(-2 * SMS // (T * n_hb)))
            for max_keys in (0, 1, 63, 64, 128, 192, 640, 1152, 8320, 10**6):
                ns = default_num_splits(T, H, block_h, cpu, max_keys)
                assert ns & (ns - 1) == 0, (T, H, max_keys, ns)
                assert ns <= max(1, max_keys // MIN_KEYS_PER_SPLIT), (T, H, max_keys, ns)
                assert ns <= old, (T, H, max_keys, ns)
                if max_keys // MIN_KEYS_PER_SPLIT >= 64:
                    assert ns == old  # a key bound above the SM bound changes nothing
    # V4 decode, 64 heads in blocks of 16: bs 1 CSA (128 + 512 keys) 32 splits of 20 keys, not 64
    # of 10; HCA at a 128k context (128 + 1024) 64, at 8k (128 + 64) 8; sliding-only 8; at bs 64
    # the SM bound (2) already rules
    assert default_num_splits(1, 64, 16, cpu) == 64
    # 132 SMs, bs 1, 4 head blocks: 66 programs wanted; bounded by keys // 16, a power of two
    assert default_num_splits(1, 64, 16, cpu, 640) == 32
    assert default_num_splits(1, 64, 16, cpu, 1152) == 64
    assert default_num_splits(1, 64, 16, cpu, 192) == 8
    assert default_num_splits(1, 64, 16, cpu, 128) == 8
    assert default_num_splits(1, 64, 16, cpu, 128 + 8192) == 64
    assert default_num_splits(64, 64, 16, cpu, 640) == default_num_splits(64, 64, 16, cpu) == 2
    assert default_num_splits(1, 64, 16, cpu, 640, min_keys_per_split=128) == 4
    for bad in (dict(T=0), dict(H=0), dict(block_h=0), dict(max_keys=-1), dict(min_keys_per_split=0)):
        args = dict(T=1, H=64, block_h=16, device=cpu, max_keys=640) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            default_num_splits(**args)  # type: ignore[arg-type]


def test_max_key_count_from_shapes() -> None:
    from sgl_kernel_v4.triton.attention import max_key_count

    r2p = torch.zeros(5, 512, dtype=torch.int32)  # 128k context in 256-token pages
    assert max_key_count(128) == 128
    assert max_key_count(128, comp_entries=torch.zeros(3, 512, dtype=torch.int64)) == 640
    # HCA, ratio 128 on 256-token pages: 2 entries per page
    assert max_key_count(128, comp_visible=torch.zeros(3), req_to_page=r2p, entries_per_page=2) == 1152
    with pytest.raises(ValueError, match="req_to_page"):
        max_key_count(128, comp_visible=torch.zeros(3))
    with pytest.raises(ValueError, match="window"):
        max_key_count(-1)


@pytest.mark.parametrize("mode", ["csa", "hca", "swa"])
@pytest.mark.parametrize("dtype", dtypes())
@pytest.mark.usefixtures("h200")
@pytest.mark.gpu
@pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton")
def test_split_counts_agree_with_reference(
    mode: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every split count (including more splits than keys, and counts that are not a multiple of
    the combine's 8-split step) matches the float64 oracle; the default count is the key-bounded
    one, derived from the arguments' shapes."""
    import sgl_kernel_v4.triton.attention as attn
    from kernels_attention_testutil import W, make_case, oracle, run

    T, H, D, n_comp = (3, 16, 64, 96) if INTERP else (5, 64, 512, 512)
    gen = torch.Generator().manual_seed(11)
    case = make_case(T, H, D, n_comp, mode, dtype, gen)
    case["q"] = case["q"] * 4  # sharp softmax: the combine's rescaling matters
    swa = case["swa"].to(DEVICE)
    comp = case["comp"].to(DEVICE) if case["comp"] is not None else None
    ref = oracle(case, case["swa"].double(), case["comp"].double() if comp is not None else None)
    tol = 1.5e-2 if dtype == torch.bfloat16 else 3e-3
    for splits in (1, 2, 8, 16, 64):
        out = torch.full(case["q"].shape, float("nan"), dtype=dtype, device=DEVICE)
        run(case, swa, comp, out=out, num_splits=splits)
        assert not torch.isnan(out).any(), f"unwritten output (splits={splits})"
        assert rel_err(out, ref) < tol, f"rel err {rel_err(out, ref)} (splits={splits})"
        assert torch.all(out[-1] == 0)  # the dead row: no key, exactly zero

    seen: list[tuple[int | None, int]] = []
    rule = attn.default_num_splits

    def spy(*args: object, **kw: object) -> int:
        ns = rule(*args, **kw)  # type: ignore[arg-type]
        seen.append((args[4] if len(args) > 4 else kw.get("max_keys"), ns))  # type: ignore[arg-type]
        return ns

    monkeypatch.setattr(attn, "default_num_splits", spy)
    out = run(case, swa, comp)
    assert rel_err(out, ref) < tol
    capacity = {"csa": n_comp, "hca": case["req_to_page"].shape[1] * case["e"], "swa": 0}[mode]
    assert seen == [(W + capacity, seen[0][1])]
    assert seen[0][1] <= max(1, (W + capacity) // attn.MIN_KEYS_PER_SPLIT)
    seen.clear()
    run(case, swa, comp, max_keys=10**6)  # an explicit bound wins
    assert seen[0][0] == 10**6
