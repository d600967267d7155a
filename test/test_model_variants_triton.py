"""Config variants through the Triton kernels, on the CPU: shape limits, fallbacks and precision.

A GPU server must serve every config the runtime accepts. Some Triton kernels tile a dimension by
a power of two (RoPE / q-norm / compressor: ``head_dim = 2 * 2^k``; the compressor state: its row
width; the indexer: ``index_head_dim``; mHC: ``hc_mult``); the op wrappers of
``sgl_kernel_v4.ops`` test the call's shapes (``TRITON_SHAPE_LIMITS``) and run the torch reference
for a shape outside them. Here:

- fast: the limits and the wrappers' choice, against the kernels' own ``ValueError`` checks (the
  predicates must accept exactly what the kernels accept, for the shapes the variants produce);
  ``ieee_f32_dots`` following torch's TF32 setting;
- slow: the variants that failed on the H200 (``test_model_config_variants``' CUDA test: crashes
  on ``head_dim`` 96 / ``hc_mult`` 3, errors 0.07-20 elsewhere) run through the Triton kernels in
  the interpreter (``TRITON_INTERPRET=1``: exact fp32 products, CPU tensors; a subprocess, as the
  interpreter must be chosen before Triton is imported), Triton forced for CPU tensors by
  patching ``ops.get_op``, against HF transformers within the CPU tier's 1e-3. They agree to
  ~4e-5, so the kernels compute the variants' math: the H200's errors came from TF32 products.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from typing import Any

import pytest
import torch
from sgl_kernel_v4 import ops

HERE = os.path.dirname(os.path.abspath(__file__))
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

#: the variants whose interpreted runs are compared with HF (slow tier): the two that crashed, the
#: compile failure's shape (CSA ratio 16), the largest error (tied embeddings) and a window of 1
INTERPRETED_VARIANTS = ["head_dim_96", "hc_3_iters_1", "rates_16_4", "tie_word_embeddings", "window_1"]
#: tokens of the interpreted runs, in chunks of ``_CHUNK``: past ``index_topk`` (8) CSA entries at
#: ratio 4, and several windows at ratio 16 (the interpreter runs ~1 s per token at these shapes)
_TOKENS, _CHUNK = 40, 20


def _h200_sms(device: torch.device) -> int:
    """The H200's multiprocessor count: the interpreted runs split attention / indexer work as the
    GPU does (the CPU default of 8 would leave the split-and-combine paths unused)."""
    return 132


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device="meta")


@pytest.mark.parametrize(
    "name,args,ok",
    [
        ("apply_rope", (_meta(3, 2, 128),), True),
        ("apply_rope", (_meta(3, 2, 96),), False),
        ("apply_rope", (_meta(3, 64),), True),
        ("inv_rope_quant", (_meta(3, 3, 96),), False),
        ("qnorm_rope_kv_insert", (_meta(3, 2, 256),), True),
        ("qnorm_rope_kv_insert", (_meta(3, 2, 96),), False),
        ("compress_and_insert", (_meta(2, 8, 96),), False),
        ("compress_and_insert", (_meta(2, 8, 64),), True),
        ("indexer_topk", (_meta(3, 16, 64),), True),
        ("indexer_topk", (_meta(3, 16, 96),), False),
        ("indexer_topk", (_meta(3, 16, 8),), False),
        ("hc_pre", (_meta(3, 4, 64),), True),
        ("hc_pre", (_meta(3, 3, 64),), False),
        ("hc_pre", (_meta(3, 1, 64),), True),
        ("hc_post", (_meta(3, 64), _meta(3, 3, 64)), False),
        ("hc_post", (_meta(3, 64), _meta(3, 2, 64)), True),
        ("sparse_attention", (_meta(3, 2, 96),), True),  # any head dim (masked tiles)
        ("fused_moe", (_meta(3, 48),), True),
    ],
)
def test_triton_shape_limits(name: str, args: tuple[Any, ...], ok: bool) -> None:
    assert ops.triton_supports(name, *args) is ok


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("d,ok", [(128, True), (96, False), (64, True), (6, False), (2, True)])
def test_compressor_state_shape_limits(overlap: bool, d: int, ok: bool) -> None:
    """The compressor state rows are ``2d`` wide with overlapping windows (CSA), ``d`` (HCA); the
    window op also needs ``d = 2 * 2^k``, the state advance only a power-of-two row width."""
    X = 2 * d if overlap else d
    args = [
        _meta(5, X),
        _meta(5, X),
        _meta(4, X),
        None,
        None,
        None,
        None,
        _meta(1, 4, d) if overlap else None,
    ]
    assert ops.triton_supports("compress_windows_and_insert", *args) is ok
    assert ops.triton_supports("advance_compressor_state", *args) is (X & (X - 1) == 0)


def test_unknown_op_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="^name: unknown op"):
        ops.triton_supports("no_such_op")


def _accepts(limit_msg: str, check: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether a kernel wrapper's ``check(*args, **kwargs)`` gets past its shape limit (its
    ``ValueError`` saying ``limit_msg``); a later error (the deliberately incomplete remaining
    arguments) means it did."""
    try:
        check(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - only the limit's own ValueError counts as refusal
        return not (isinstance(e, ValueError) and limit_msg in str(e))
    return True


@needs_triton
def test_predicates_agree_with_the_kernels_checks() -> None:
    """Where a predicate says yes the Triton wrapper's own checks pass its limit, where it says no
    they raise: the predicates state the kernels' limits (head dims 2..512, ``hc_mult`` 1..8)."""
    from sgl_kernel_v4.triton import compressor as tcomp
    from sgl_kernel_v4.triton import indexer as tidx
    from sgl_kernel_v4.triton import mhc as tmhc
    from sgl_kernel_v4.triton import rope as trope

    cs, z = torch.zeros(1, 1), torch.zeros
    for D in range(2, 513, 2):
        x, kv = z(1, 1, D), z(1, 4, D)
        ok = _accepts("head dim must be", trope._check_rope, x, cs, cs)
        assert ok is ops.triton_supports("apply_rope", x) is ops.triton_supports("qnorm_rope_kv_insert", x), D
        ok = _accepts(
            "d must be", tcomp.check_entry_args, 1, D, kv.dtype, kv.device, None, cs, cs, None, None, None
        )
        assert ok is ops.triton_supports("compress_and_insert", kv), D
        ok = _accepts("head dim must be", tidx._check, x, z(1, 1), 1)
        assert ok is ops.triton_supports("indexer_topk", x), D
    for n in range(1, 9):
        x = z(1, n, 16)
        ok = _accepts("power of 2", tmhc.hc_pre, x, z(1), z(1), z(3), 1, 0.0, 0.0)
        assert ok is ops.triton_supports("hc_pre", x), n
        ok = _accepts("power of 2", tmhc.hc_post, z(1, 16), x, z(1, n), z(1, n, n), path="?")
        assert ok is ops.triton_supports("hc_post", z(1, 16), x), n


def test_wrappers_pass_the_shape_decision_to_get_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wrapper asks :func:`ops.get_op` with the predicate's answer for its arguments."""
    seen: list[tuple[str, bool]] = []

    def fake_get_op(name: str, device: object, supported: bool = True) -> object:
        seen.append((name, supported))
        return lambda *a, **k: (None, None, None)

    monkeypatch.setattr(ops, "get_op", fake_get_op)
    m = _meta
    for D in (96, 128):
        ops.apply_rope(m(2, 2, D), m(2, 8), m(2, 8))
        ops.inv_rope_quant(m(2, 2, D), m(2, 8), m(2, 8))
        ops.qnorm_rope_kv_insert(m(2, 2, D), m(2, D), m(D), m(2, 8), m(2, 8), m(4, D), m(2), 1e-6)
        ops.compress_and_insert(m(1, 4, D), m(1, 4, D), m(D), m(1, 8), m(1, 8), m(4, D), m(1), 1e-6)
        ops.indexer_topk(m(2, 16, D), m(2, 16), m(4, D), m(2), m(1, 1), m(1), m(2), 1, 8, 1.0)
    for n in (3, 4):
        ops.hc_pre(m(2, n, 16), m(1), m(1), m(3), 1, 1e-6, 1e-6)
        ops.hc_post(m(2, 16), m(2, n, 16), m(2, n), m(2, n, n))
    assert seen == [
        ("apply_rope", False), ("inv_rope_quant", False), ("qnorm_rope_kv_insert", False),
        ("compress_and_insert", False), ("indexer_topk", False),
        ("apply_rope", True), ("inv_rope_quant", True), ("qnorm_rope_kv_insert", True),
        ("compress_and_insert", True), ("indexer_topk", True),
        ("hc_pre", False), ("hc_post", False), ("hc_pre", True), ("hc_post", True),
    ]  # fmt: skip


@needs_triton
def test_unsupported_shape_gets_the_reference_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """With Triton enabled, a CUDA lookup returns the kernel for a supported shape and the torch
    reference otherwise."""
    from sgl_kernel_v4.ref import rope as ref_rope
    from sgl_kernel_v4.triton import rope as triton_rope

    monkeypatch.setattr(ops, "triton_enabled", lambda: True)
    monkeypatch.setattr(ops, "_cache", {})
    assert ops.get_op("apply_rope", "cuda", True) is triton_rope.apply_rope
    assert ops.get_op("apply_rope", "cuda", False) is ref_rope.apply_rope
    assert ops.get_op("apply_rope", "cuda") is triton_rope.apply_rope


def test_fp32_dots_follow_torch_tf32_setting() -> None:
    """IEEE fp32 products for fp32 operands unless torch allows TF32 for its own fp32 matmuls;
    other operand dtypes never (their kernels compile as with a plain ``tl.dot``)."""
    from sgl_kernel_v4.triton._utils import ieee_f32_dots

    matmul = torch.backends.cuda.matmul
    old = matmul.allow_tf32
    try:
        matmul.allow_tf32 = False
        assert ieee_f32_dots(torch.float32)
        assert not ieee_f32_dots(torch.bfloat16) and not ieee_f32_dots(torch.float16)
        matmul.allow_tf32 = True
        assert not ieee_f32_dots(torch.float32)
        torch.set_float32_matmul_precision("highest")
        assert ieee_f32_dots(torch.float32)
    finally:
        matmul.allow_tf32 = old


# ------------------------------------------------------------------------------------------------
# interpreted runs of the variants (slow: a subprocess under TRITON_INTERPRET=1)
# ------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not INTERPRETED, reason="runs under TRITON_INTERPRET=1 (the slow test below starts it)")
@pytest.mark.parametrize("name", INTERPRETED_VARIANTS)
def test_variant_through_triton_kernels_matches_hf(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime with every op's Triton kernel (the reference where the shapes call for it) on CPU
    tensors, against HF; the fallbacks are taken exactly where the variant's shapes need them."""
    import model_config_testutil as V
    from dsv4_testutil import Driver, hf_logprobs, random_ids

    fell_back: set[str] = set()
    _force_triton(monkeypatch, fell_back)
    twin = V.get_twin(name)
    ids = random_ids(_TOKENS, seed=1, vocab=twin.mc.vocab_size)
    out = Driver(twin, page_size=V._page_size(twin)).run_chunked(ids, _CHUNK)
    err = (out - hf_logprobs(twin, ids)).abs().max().item()
    assert err <= V.TOL, f"{name}: max |dlogprob| {err}"
    expected = {
        "head_dim_96": {"apply_rope", "inv_rope_quant", "qnorm_rope_kv_insert", "compress_and_insert",
                        "compress_windows_and_insert", "advance_compressor_state"},
        "hc_3_iters_1": {"hc_pre", "hc_post"},
    }.get(name, set())  # fmt: skip
    assert fell_back <= expected and ("head_dim" not in name or "qnorm_rope_kv_insert" in fell_back)
    assert fell_back >= {op for op in expected if op.startswith(("hc_", "qnorm", "inv_rope"))}


@needs_triton
@pytest.mark.slow
def test_failed_variants_match_hf_under_the_interpreter() -> None:
    """Runs :func:`test_variant_through_triton_kernels_matches_hf` under the interpreter (a few
    minutes: ~1 s per token and variant) and requires every case to pass, not skip."""
    from kernels_compile_testutil import _env

    env = _env(True)
    node = f"{os.path.basename(__file__)}::test_variant_through_triton_kernels_matches_hf"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node]
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=1800)
    out = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, out
    assert f"{len(INTERPRETED_VARIANTS)} passed" in proc.stdout, out


# ------------------------------------------------------------------------------------------------
# every launch of the variants' CUDA test compiles for sm_90 (slow: dry-recorded, then compiled)
# ------------------------------------------------------------------------------------------------


def _force_triton(monkeypatch: pytest.MonkeyPatch, fell_back: set[str] | None = None) -> None:
    """Triton kernels for CPU tensors (the reference where ``supported`` is False), with the H200's
    multiprocessor count for grids and splits."""

    def triton_get_op(op: str, device: object, supported: bool = True) -> Any:
        if not supported and fell_back is not None:
            fell_back.add(op)
        if supported and op in ops._TRITON_MODULES:
            return ops._load("triton", ops._TRITON_MODULES[op], op)
        return ops._load("ref", ops._REF_MODULES[op], op)

    monkeypatch.setattr(ops, "get_op", triton_get_op)
    for mod in ("attention", "indexer", "indexer_select", "mhc"):
        monkeypatch.setattr(importlib.import_module(f"sgl_kernel_v4.triton.{mod}"), "num_sms", _h200_sms)


@pytest.mark.skipif(
    not (INTERPRETED and os.environ.get("SGLANG_V4_LAUNCH_LOG")),
    reason="a recording run of the slow compile test below (TRITON_INTERPRET=1, SGLANG_V4_LAUNCH_LOG)",
)
def test_variant_forwards_for_the_launch_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA test's forwards of every variant (300 tokens in chunks of 100) with the launches
    recorded and not executed (``SGLANG_V4_LAUNCH_DRY=1``): what the H200 compiles for them."""
    import model_config_testutil as V
    from dsv4_testutil import Driver, make_twin, random_ids

    _force_triton(monkeypatch)
    for name in V.VARIANTS:
        twin = make_twin(name, seed=3, cfg=V.VARIANTS[name])
        ids = random_ids(300, seed=1, vocab=twin.mc.vocab_size)
        Driver(twin, page_size=V._page_size(twin)).run_chunked(ids, 100)


@needs_triton
@pytest.mark.slow
def test_variant_launches_compile_for_sm90(tmp_path) -> None:
    """Every distinct Triton launch of the config variants' CUDA test (fp32 operands, so the
    ``IEEE`` dots; the compressor windows of CSA ratio 16; split attention at the H200's SM count)
    compiles for sm_90 with the installed Triton (minutes: the dry recording, then ~100 compiles)."""
    from kernels_compile_testutil import _env, compile_log

    log = str(tmp_path / "launches.pkl")
    env = dict(_env(True), SGLANG_V4_LAUNCH_LOG=log, SGLANG_V4_LAUNCH_DRY="1")
    node = f"{os.path.basename(__file__)}::test_variant_forwards_for_the_launch_record"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "kernel_launch_record", node]
    proc = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    rc, report = compile_log(log)
    assert rc == 0, report
