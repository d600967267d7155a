"""GPU tests: the compressor kernels that read windows and state rows in place
(``compress_windows_and_insert``, ``advance_compressor_state``, op table 2) vs the torch reference
(the row tables ``Compressor.run`` built before) and vs the unfused ``compress_and_insert``.

Plans come from the real :class:`ForwardBatchBuilder` (decode, extend, mixed, a padded CUDA-graph
layout) plus hand-made plans whose new buffer rows, overlap rows and snapshots come from the same
request's old buffer rows at other positions (the in-place ordering). Marked ``gpu``; skipped
without CUDA + Triton (they also run under ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, rel_err
from kernels_compressor_testutil import CASES, DTYPES, Case, _batch, _clone, _compress_args, _inputs, _triton
from sgl_kernel_v4 import ops
from sgl_kernel_v4.ref import compressor_state as ref

pytestmark = KERNEL_MARKS


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_compress_windows_match_unfused_and_reference(name: str, dtype: torch.dtype) -> None:
    from sgl_kernel_v4.triton.compressor import compress_and_insert

    case = CASES[name]
    fb = _batch(case)
    plan = fb.csa if case.overlap else fb.hca
    assert plan.win_rows.shape[0] > 0
    inp = _inputs(case, fb, seed=len(name), dtype=dtype)
    gen = torch.Generator().manual_seed(7)
    N = int(plan.win_out.max()) + 3
    pools = [torch.full((N, case.d), float("nan"), device=DEVICE, dtype=dtype) for _ in range(3)]
    args = _compress_args(case, fb, inp, inp["state"], pools[0], gen)
    fused = _triton("compress_windows_and_insert")(*args)
    expect = ref.compress_windows_and_insert(*args[:14], pools[1], *args[15:])
    # the unfused path: windows gathered by the reference, then the Triton compress kernel
    kv_w, sc_w = ref.gather_windows(*args[:11])
    unfused = compress_and_insert(kv_w, sc_w, *args[11:14], pools[2], *args[15:])
    real = plan.win_out >= 0
    assert real.any()
    assert torch.equal(fused[real], unfused[real])
    assert torch.equal(pools[0].nan_to_num(7.0), pools[2].nan_to_num(7.0))
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # the reference pools in the model dtype
    assert rel_err(fused[real], expect[real]) < tol
    written = pools[1][plan.win_out[real]]
    assert torch.equal(pools[0][plan.win_out[real]], fused[real]) and rel_err(fused[real], written) < tol
    assert int((~pools[0].isnan().all(1)).sum()) == int(real.sum())


@pytest.mark.parametrize(
    "kind,fp4", [("csa_main", False), ("csa_indexer", False), ("csa_indexer", True), ("hca", False)]
)
def test_compress_windows_quantized_pools(kind: str, fp4: bool) -> None:
    """fp8 main entries, fp8 / fp4 indexer keys: the pool bytes equal the unfused path's."""
    from sgl_kernel_v4.triton.compressor import compress_and_insert
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    spec = build_kv_layout(ModelConfig.from_dict(get_preset("tiny")), "fp8_e4m3", fp4, 256).kinds[
        KVKind(kind)
    ]
    overlap = kind != "hca"
    case = Case(4 if overlap else 128, spec.entry.dim, overlap, 256, [(1, 250, 9), (2, 127, 1), (3, 0, 5)])
    fb = _batch(case)
    plan = fb.csa if overlap else fb.hca
    dtype = torch.float32 if INTERP else torch.bfloat16
    inp = _inputs(case, fb, seed=11, dtype=dtype)
    units = -(-(int(plan.win_out.max()) + 1) // spec.rows_per_unit)
    pools = [KVRowsView(spec.allocate(units * spec.pages_per_unit, DEVICE)[0], spec.entry) for _ in range(2)]
    args = list(_compress_args(case, fb, inp, inp["state"], pools[0], torch.Generator().manual_seed(1)))
    J = plan.win_rows.shape[0]
    args[12:14] = [torch.rand(J, 32).to(DEVICE), torch.rand(J, 32).to(DEVICE)]  # r = 64
    fused = _triton("compress_windows_and_insert")(*args)
    kv_w, sc_w = ref.gather_windows(*args[:11])
    unfused = compress_and_insert(kv_w, sc_w, *args[11:14], pools[1], *args[15:])
    assert torch.equal(fused, unfused)
    assert torch.equal(pools[0].storage, pools[1].storage) and pools[0].storage.any()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_advance_state_matches_reference(name: str, dtype: torch.dtype) -> None:
    case = CASES[name]
    fb = _batch(case)
    plan = fb.csa if case.overlap else fb.hca
    if case.overlap and name != "csa_decode":
        assert plan.snap_rows.shape[0] > 0  # snapshots covered
    inp = _inputs(case, fb, seed=3 * len(name), dtype=dtype)
    got, want = _clone(inp["state"]), _clone(inp["state"])
    n = inp["new"]
    head = (n["kv_new"], n["gate"], n["position_bias"], fb.positions, fb.req_pool_indices)
    tail = (plan.buf_rows, plan.ovl_rows, plan.snap_rows, plan.snap_pages)
    _triton("advance_compressor_state")(*head, *got.values(), *tail)
    ref.advance_compressor_state(*head, *want.values(), *tail)
    for k, v in got.items():
        if v is not None:
            assert torch.equal(v, want[k]), k
    assert not torch.equal(got["buf_kv"], inp["state"]["buf_kv"])


def _own_rows_plan(m: int) -> dict[str, torch.Tensor]:
    """Two requests (slots 5 and 2, B = 2) with 3 new tokens each (Tab rows 2m .. 2m + 5) whose new
    state comes from their own OLD buffer rows at other positions: buffer rows reversed, overlap
    rows and snapshots mixing old buffer rows and new rows."""
    B, base = 2, 2 * m
    own = [[b * m + i for i in range(m)] for b in range(B)]
    buf = torch.tensor([own[0][::-1], [own[1][1], -1, base + 3, own[1][0]] + [-1] * (m - 4)])
    ovl = torch.tensor([[own[0][2], base + 0, own[0][0], base + 1] + [-1] * (m - 4), [-1] * m])
    snap = torch.tensor(
        [[base + 4, own[1][3], own[1][2], own[1][1]] + [-1] * (m - 4), [own[0][1]] + [-1] * (m - 1)]
    )
    return {
        "slots": torch.tensor([5, 2]),
        "positions": torch.tensor([8, 9, 10, 20, 21, 22]),
        "buf_rows": buf,
        "ovl_rows": ovl,
        "snap_rows": snap,
        "snap_pages": torch.tensor([3, 1]),
    }


@pytest.mark.parametrize("d,overlap", [(16, True), (64, True), (32, False)])
def test_advance_reads_old_rows_of_its_own_slot(d: int, overlap: bool) -> None:
    """The in-place update reads every source (buffer, overlap and snapshot rows) from the state
    before the call, though they are rows of the slot it overwrites."""
    m = 4
    p = {k: v.to(DEVICE) for k, v in _own_rows_plan(m).items()}
    gen = torch.Generator().manual_seed(d)
    X = 2 * d if overlap else d
    R = 6

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(DEVICE)

    st = {"buf_kv": rnd(R, m, X), "buf_score": rnd(R, m, X)}
    for k in ("ovl_kv", "ovl_score", "snap_kv", "snap_score"):
        st[k] = rnd(R, m, d) if overlap else None
    head = (rnd(6, X), rnd(6, X), rnd(m, X), p["positions"], p["slots"])
    tail = (p["buf_rows"], p["ovl_rows"], p["snap_rows"], p["snap_pages"])
    got, want = _clone(st), _clone(st)
    _triton("advance_compressor_state")(*head, *got.values(), *tail)
    ref.advance_compressor_state(*head, *want.values(), *tail)
    for k, v in got.items():
        if v is not None:
            assert torch.equal(v, want[k]), k
    # an independent spot check: slot 5's new row 0 is its old row m-1, slot 2's row 1 is zero
    assert torch.equal(got["buf_kv"][5, 0], st["buf_kv"][5, m - 1])
    assert torch.equal(got["buf_kv"][2, 1], torch.zeros_like(got["buf_kv"][2, 1]))
    if overlap:
        assert torch.equal(got["ovl_kv"][5, 0], st["buf_kv"][5, 2, :d])
        assert torch.equal(got["ovl_kv"][2], st["ovl_kv"][2])  # no new window: kept
        assert torch.equal(got["snap_kv"][3, 1], st["buf_kv"][2, 3, :d])


@pytest.mark.parametrize("order", ["dup_last", "dup_first", "pads"])
def test_snapshots_naming_one_page_take_the_last(order: str) -> None:
    """Snapshots of one forward that name the same window page (a long chunk reuses a window page;
    padded graph rows all name page 0): the page holds the last one's rows, whatever the order the
    GPU runs the programs in (this failed on the H200 for the csa_extend plan, pages 21, 21)."""
    m, d = 4, 16
    p = {k: v.to(DEVICE) for k, v in _own_rows_plan(m).items()}
    base = 2 * m
    # three snapshots: new rows, then old buffer rows of slot 5, then a padded (-1) row
    p["snap_rows"] = torch.tensor(
        [[base + 0, base + 1, base + 2, -1], [0, 1, 2, 3], [-1, -1, -1, -1]], device=DEVICE
    )
    pages = {"dup_last": [3, 1, 3], "dup_first": [3, 3, 1], "pads": [0, 0, 0]}[order]
    p["snap_pages"] = torch.tensor(pages, device=DEVICE)
    gen = torch.Generator().manual_seed(7)
    R, X = 6, 2 * d

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(DEVICE)

    st = {"buf_kv": rnd(R, m, X), "buf_score": rnd(R, m, X)}
    for k in ("ovl_kv", "ovl_score", "snap_kv", "snap_score"):
        st[k] = rnd(R, m, d)
    kv_new = rnd(6, X)
    head = (kv_new, rnd(6, X), rnd(m, X), p["positions"], p["slots"])
    tail = (p["buf_rows"], p["ovl_rows"], p["snap_rows"], p["snap_pages"])
    for impl in (_triton("advance_compressor_state"), ref.advance_compressor_state):
        got = _clone(st)
        impl(*head, *got.values(), *tail)
        # the oracle, from the inputs: each page's last snapshot row
        old_slot5 = st["buf_kv"][5, :, :d]
        rows = {0: torch.cat([kv_new[:3, :d], torch.zeros(1, d, device=DEVICE)]), 1: old_slot5,
                2: torch.zeros(m, d, device=DEVICE)}  # fmt: skip
        for page in set(pages):
            last = max(i for i, pg in enumerate(pages) if pg == page)
            assert torch.equal(got["snap_kv"][page], rows[last]), (impl, page)
        untouched = [r for r in range(R) if r not in pages]
        assert torch.equal(got["snap_kv"][untouched], st["snap_kv"][untouched])


def _zero_state(m: int, d: int, overlap: bool):
    from sglang_v4.mem_cache.compressor_state import CompressorState

    X, R, Wp = (2 * d if overlap else d), 5, 200

    def z(*shape: int) -> torch.Tensor | None:
        return torch.zeros(*shape, device=DEVICE)

    ov = z if overlap else (lambda *shape: None)
    return CompressorState(
        z(R, m, X), z(R, m, X), ov(R, m, d), ov(R, m, d), ov(Wp, m, d), ov(Wp, m, d), z(4000, d)
    )


@pytest.mark.parametrize("m,d,overlap,page_size", [(4, 32, True, 16), (128, 64, False, 256)])
def test_compressor_run_triton_path_equals_torch_path(
    monkeypatch: pytest.MonkeyPatch, m: int, d: int, overlap: bool, page_size: int
) -> None:
    """A whole ``Compressor.run`` sequence (chunked extends of several requests, then decode steps)
    on the Triton ops equals the torch path: the same state bit for bit, the same pool entries
    within fp32 rounding of the pooling."""
    from sglang_v4.layers.compressor import Compressor

    torch.manual_seed(0)
    steps = [
        [(1, 0, 37), (2, 0, 20), (3, 0, 3)],
        [(1, 37, 30), (2, 20, 1), (3, 3, 14)],
        [(1, 67, 1), (2, 21, 1), (3, 17, 1)],
        [(1, 68, 1), (2, 22, 1), (3, 18, 1)],
    ]
    if not overlap:  # HCA: windows of 128
        steps = [
            [(1, 0, 300), (2, 0, 130), (3, 0, 5)],
            [(1, 300, 200), (2, 130, 1), (3, 5, 250)],
            [(1, 500, 12), (2, 131, 1), (3, 255, 1)],
            [(1, 512, 1), (2, 132, 1), (3, 256, 1)],
        ]
    comp = Compressor(48, d, m, overlap, 1e-6, torch.float32, DEVICE)
    for prm in comp.parameters():
        prm.data.normal_()
    real_get_op = ops.get_op

    def triton_get_op(name: str, device: object, supported: bool = True) -> object:
        if name in ("compress_windows_and_insert", "advance_compressor_state"):
            return _triton(name)
        return real_get_op(name, device, supported)

    states = {real_get_op: _zero_state(m, d, overlap), triton_get_op: _zero_state(m, d, overlap)}
    for step in steps:
        fb = _batch(Case(m, d, overlap, page_size, step))
        plan = fb.csa if overlap else fb.hca
        h = torch.randn(fb.positions.shape[0], 48, device=DEVICE)
        J = plan.win_rows.shape[0]
        rope = (torch.rand(J, 8, device=DEVICE), torch.rand(J, 8, device=DEVICE))
        for get_op, st in states.items():
            monkeypatch.setattr(ops, "get_op", get_op)
            comp.run(h, fb, plan, st, rope)
    monkeypatch.setattr(ops, "get_op", real_get_op)
    a, b = states[triton_get_op], states[real_get_op]
    for f in ("buf_kv", "buf_score", "ovl_kv", "ovl_score", "snap_kv", "snap_score"):
        if getattr(a, f) is not None:
            assert torch.equal(getattr(a, f), getattr(b, f)), f
    written = b.rows.abs().sum(1) > 0
    assert int(written.sum()) > (20 if overlap else 3)
    assert torch.equal(a.rows.abs().sum(1) > 0, written)
    assert rel_err(a.rows, b.rows) < 1e-5
    if overlap:
        assert b.snap_kv.abs().sum() > 0


@pytest.mark.skipif(not INTERP, reason="argument checks; run once")
def test_bad_inputs_raise() -> None:
    adv = _triton("advance_compressor_state")
    m, d = 4, 8
    z = torch.zeros
    args = [z(2, 2 * d), z(2, 2 * d), z(m, 2 * d), z(2, dtype=torch.int64), z(1, dtype=torch.int64)]
    st = [z(3, m, 2 * d), z(3, m, 2 * d), z(3, m, d), z(3, m, d), None, None]
    rows = [z(1, m, dtype=torch.int64)] * 2 + [z(0, m, dtype=torch.int64), z(0, dtype=torch.int64)]
    adv(*args, *st, *rows)
    with pytest.raises(ValueError, match="buf_rows"):
        adv(*args, *st, z(2, m, dtype=torch.int64), *rows[1:])
    with pytest.raises(ValueError, match="buf_kv"):
        adv(*args, z(3, m, d), *st[1:], *rows)
    with pytest.raises(ValueError, match="positions"):
        adv(*args[:3], z(3, dtype=torch.int64), args[4], *st, *rows)
