"""CPU tests of the op backend table ``sgl_kernel_v4.ops`` (runs in CI; no CUDA or Triton needed)."""

from __future__ import annotations

import pytest
import torch
from sgl_kernel_v4 import ops


def test_cpu_lookup_returns_reference() -> None:
    import sgl_kernel_v4.ref.attention as ref_attention
    import sgl_kernel_v4.ref.rope as ref_rope

    assert ops.get_op("sparse_attention", "cpu") is ref_attention.sparse_attention
    assert ops.get_op("inv_rope_quant", torch.device("cpu")) is ref_rope.inv_rope_quant
    for name in ops.OP_NAMES:
        assert callable(ops.get_op(name, "cpu"))


def test_unknown_op_raises() -> None:
    with pytest.raises(ValueError, match="name"):
        ops.get_op("not_an_op", "cpu")


def test_disable_flag_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import sgl_kernel_v4.ref.norm as ref_norm

    monkeypatch.setenv("SGLANG_V4_DISABLE_TRITON", "1")
    ops.set_triton_enabled(None)
    assert not ops.triton_enabled()
    assert ops.get_op("rms_norm", "cuda") is ref_norm.rms_norm  # forced reference even on CUDA
    ops.set_triton_enabled(False)
    monkeypatch.delenv("SGLANG_V4_DISABLE_TRITON")
    assert not ops.triton_enabled()
    assert ops.get_op("rms_norm", "cuda:0") is ref_norm.rms_norm
    ops.set_triton_enabled(None)


def test_dispatch_wrapper_matches_reference_on_cpu() -> None:
    import sgl_kernel_v4.ref.norm as ref_norm

    x = torch.randn(3, 16)
    w = torch.rand(16)
    assert torch.equal(ops.rms_norm(x, w, 1e-6), ref_norm.rms_norm(x, w, 1e-6))


def test_import_does_not_import_triton() -> None:
    import subprocess
    import sys

    code = (
        "import sys, sgl_kernel_v4, sgl_kernel_v4.ops, sgl_kernel_v4.triton; print('triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_quantized_pool_goes_to_the_device_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pool format (float views, uint8 byte views) is handled by the op of the inputs'
    device: quantized KV never falls back to the torch reference on CUDA."""
    calls: list[str] = []

    def fake_get_op(name: str, device: object, supported: bool = True) -> object:
        calls.append(str(torch.device(device).type))
        return lambda *a, **k: "ran"

    monkeypatch.setattr(ops, "get_op", fake_get_op)
    q = torch.zeros(1, 2, 8, device="meta")  # stands in for a CUDA tensor: the lookup sees its device
    byte_pool = torch.zeros(4, 8, dtype=torch.uint8)
    float_pool = torch.zeros(4, 8)
    pages = torch.zeros(1, 2, dtype=torch.int64)
    pos = torch.zeros(1, dtype=torch.int64)
    ops.sparse_attention(q, byte_pool, pages, pos, 128, torch.zeros(2), 1.0)
    ops.sparse_attention(q, float_pool, pages, pos, 128, torch.zeros(2), 1.0)
    ops.compress_and_insert(q, q, torch.zeros(8), pos, pos, object(), pos, 1e-6)
    assert calls == ["meta", "meta", "meta"]


def test_device_type_lookup_accepts_strings_and_devices() -> None:
    """``get_op`` keys on the device type: a ``torch.device`` and its string give the same op."""
    import sgl_kernel_v4.ref.mhc as ref_mhc

    for dev in ("cpu", torch.device("cpu"), "meta", torch.device("meta")):
        assert ops.get_op("hc_pre", dev) is ref_mhc.hc_pre
    ops.set_triton_enabled(False)
    try:
        import sgl_kernel_v4.ref.norm as ref_norm

        assert ops.get_op("rms_norm", torch.device("cuda", 0)) is ref_norm.rms_norm
    finally:
        ops.set_triton_enabled(None)


def test_host_cdiv_and_next_power_of_2_match_triton() -> None:
    """The wrappers' host helpers (plain Python; ``triton.cdiv`` is a constexpr function with a
    per-call cost) agree with Triton's own on every value a wrapper can pass."""
    triton = pytest.importorskip("triton")
    from sgl_kernel_v4.triton._utils import cdiv, next_power_of_2

    for n in list(range(0, 4200)) + [2**20 - 1, 2**20, 2**20 + 1, 3 * 2**30]:
        if n >= 1:  # triton's answer for 0 is 0 compiled and 1 under the interpreter
            assert next_power_of_2(n) == triton.next_power_of_2(n), n
        for b in (1, 2, 3, 16, 64, 128, 1000):
            assert cdiv(n, b) == triton.cdiv(n, b), (n, b)
    assert next_power_of_2(0) == 1


def test_kernel_wrappers_use_the_host_helpers() -> None:
    """No wrapper calls ``triton.cdiv`` / ``triton.next_power_of_2`` on the host (see
    ``sgl_kernel_v4.triton._utils.cdiv``): each call costs a constexpr-function dispatch."""
    import pathlib

    import sgl_kernel_v4

    pkg = pathlib.Path(sgl_kernel_v4.__file__).parent / "triton"
    bad = [
        f"{f.name}:{i}"
        for f in sorted(pkg.glob("*.py"))
        if f.name != "_utils.py"
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if "triton.cdiv(" in line or "triton.next_power_of_2(" in line
    ]
    assert bad == [], bad


def test_mhc_bf16x3_split_is_exact() -> None:
    """The mHC projection's three-term bf16 split of an fp32 weight (``split_bf16x3``) sums back to
    the weight: in float64, ``hi + mid + lo`` equals each fp32 value to within one fp32 ulp of
    the value (8 + 8 + 8 of its 24 significand bits), over seven decades of magnitude and both
    signs; bf16 terms; cached per tensor and recomputed after an in-place change."""
    pytest.importorskip("triton")
    from sgl_kernel_v4.triton.mhc import split_bf16x3

    g = torch.Generator().manual_seed(0)
    fn = torch.randn(24, 4096, generator=g) * torch.logspace(-4, 3, 4096)
    parts = split_bf16x3(fn)
    assert parts.shape == (3, 24, 4096) and parts.dtype == torch.bfloat16
    back = parts.double().sum(0)
    ulp = torch.finfo(torch.float32).eps * fn.double().abs()
    assert bool(((back - fn.double()).abs() <= ulp).all())
    assert split_bf16x3(fn) is parts  # cached
    fn.mul_(2.0)
    again = split_bf16x3(fn)
    assert again is not parts and torch.equal(again.double().sum(0), back * 2)
    with pytest.raises(ValueError, match="fn"):
        split_bf16x3(torch.ones(3, dtype=torch.int32))
