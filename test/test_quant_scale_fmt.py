"""``quantization_config.scale_fmt``: refused unless a known format, carried in ``ModelConfig``, and
the scale formula each format names.

Oracles: transformers' ``FineGrainedFP8Config`` (its validator accepts ``"ue8m0"`` and ``"float"``
and refuses every other string); DeepSeek's inference code's ``act_quant`` formulas, written here in
float64 (``scale_fmt: ue8m0``: ``2 ** ceil(log2(max(amax, 1e-4) / 448))``; absent: the exact
``max(amax, 1e-4) / 448``; values rounded to the nearest e4m3, ties to even: ``quant_testutil``);
transformers' behaviour on a machine without a GPU (its FP8 quantizer switches to dequantizing
the checkpoint, and ``Fp8Dequantize`` multiplies each block by its scale), so the CPU path's FP8
linear must equal ``x @ dequant(W)^T`` with no activation quantization under either format.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch
from dsv4_testutil import CONFIGS
from quant_testutil import e4m3_round64
from sgl_kernel_v4 import ops
from sgl_kernel_v4.ref.fp8_gemm import act_quant, dequant_act
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.scale_fmt import activation_scales_pow2, parse_scale_fmt
from sglang_v4.model_loader.builder import resolve_model_quantization
from sglang_v4.model_loader.quant import quantize_fp8_block
from transformers import FineGrainedFP8Config

CFG = CONFIGS["sliding_first"]
QC = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
BUILDER_LOG = "sglang_v4.model_loader.builder"
ABSENT = object()


def _raw(scale_fmt: object) -> dict:
    qc = dict(QC)
    if scale_fmt is not ABSENT:
        qc["scale_fmt"] = scale_fmt
    return {**copy.deepcopy(CFG), "quantization_config": qc}


# --------------------------------------------------------------------------- config load
BAD_STRINGS = ["ue8m1", "fp32", "UE8M0", "e8m0", "float32", ""]


@pytest.mark.parametrize("value", BAD_STRINGS + [0, 1.5, True, ["ue8m0"], {"fmt": "ue8m0"}])
def test_unknown_scale_fmt_is_refused_at_load(value: object, tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(_raw(value)))
    for load in (
        lambda: ModelConfig.from_dict(_raw(value)),
        lambda: ModelConfig.from_pretrained(str(tmp_path)),
    ):
        with pytest.raises(ValueError) as e:
            load()
        msg = str(e.value)
        assert "quantization_config.scale_fmt" in msg and "'ue8m0'" in msg and "null" in msg, msg
        assert repr(value) in msg, msg


@pytest.mark.parametrize("value", BAD_STRINGS)
def test_transformers_refuses_the_same_strings(value: str) -> None:
    """The oracle agrees: transformers' FP8 config refuses each string refused above."""
    with pytest.raises(ValueError, match="scale_fmt"):
        FineGrainedFP8Config(scale_fmt=value)


@pytest.mark.parametrize(
    ("value", "want"), [(ABSENT, None), (None, None), ("ue8m0", "ue8m0"), ("float", None)]
)
def test_accepted_scale_fmt_is_carried(value: object, want: str | None) -> None:
    mc = ModelConfig.from_dict(_raw(value))
    assert mc.scale_fmt == want
    if value is not None:  # transformers takes the same value (absent: its default "float")
        kw = {} if value is ABSENT else {"scale_fmt": value}
        hf = FineGrainedFP8Config(**kw)
        assert (hf.scale_fmt == "ue8m0") == (want == "ue8m0")
    no_qc = copy.deepcopy(CFG)
    no_qc.pop("quantization_config", None)
    assert ModelConfig.from_dict(no_qc).scale_fmt is None


def test_parse_scale_fmt_reads_objects_and_leaves_other_types_to_the_method_check() -> None:
    assert parse_scale_fmt(FineGrainedFP8Config(scale_fmt="ue8m0")) == "ue8m0"
    assert parse_scale_fmt(FineGrainedFP8Config()) is None
    assert parse_scale_fmt("fp8") is None and parse_scale_fmt(None) is None and parse_scale_fmt({}) is None
    with pytest.raises(ValueError, match="scale_fmt"):
        activation_scales_pow2("float")


# --------------------------------------------------------------------------- scale formulas
def _activations() -> torch.Tensor:
    """float32 ``[6, 640]``: groups of ordinary, tiny (amax below 1e-4), zero, exact 448 * 2**k,
    just-above-a-power-of-two and large magnitudes, and a partial last group."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 640, generator=g)
    x[0, :128] *= 1e-7  # amax clamped to 1e-4
    x[1, 128:256] = 0.0
    x[2, 256:384] = x[2, 256:384].clamp(-1, 1) * 3.0
    x[2, 300] = 448.0 * 4  # amax / 448 exactly a power of two: both formats agree
    x[3, 384:512] *= 1e3
    x[4, :128] = x[4, :128].clamp(-0.5, 0.5)
    x[4, 5] = torch.nextafter(torch.tensor(448.0 / 8), torch.tensor(1e9))  # just above 2**-3 * 448
    return x[:, :600].contiguous()  # last group 88 wide


def _scale64(x: torch.Tensor, scale_fmt: str | None) -> torch.Tensor:
    """DeepSeek's ``act_quant`` group scale in float64, ``[M, ceil(K / 128)]``."""
    cols = []
    for k0 in range(0, x.shape[1], 128):
        amax = x[:, k0 : k0 + 128].to(torch.float64).abs().amax(dim=1).clamp_min(1e-4)
        s = amax / 448.0
        cols.append(torch.pow(2.0, torch.ceil(torch.log2(s))) if scale_fmt == "ue8m0" else s)
    return torch.stack(cols, dim=1)


@pytest.mark.parametrize("value", [ABSENT, None, "float", "ue8m0"])
def test_activation_scales_follow_scale_fmt(value: object) -> None:
    fmt = ModelConfig.from_dict(_raw(value)).scale_fmt
    x = _activations()
    q, s = act_quant(x, pow2=activation_scales_pow2(fmt))
    s64 = _scale64(x, fmt)
    assert torch.equal(s, s64.to(torch.float32))  # exact: amax / 448 rounds once either way
    # DeepSeek's act_quant divides in float32 by the float32 scale, then rounds to e4m3; a float64
    # quotient of float32 operands rounded to float32 is that float32 quotient
    s32 = s64.to(torch.float32).to(torch.float64)
    want_q = torch.cat(
        [
            e4m3_round64((x[:, k0 : k0 + 128].to(torch.float64) / s32[:, i : i + 1]).to(torch.float32))
            for i, k0 in enumerate(range(0, x.shape[1], 128))
        ],
        dim=1,
    )
    assert torch.equal(q.to(torch.float64), want_q)
    other = _scale64(x, None if fmt == "ue8m0" else "ue8m0")
    assert not torch.equal(s64, other)  # the two formulas differ on these groups
    assert torch.equal(s64[2, 2], other[2, 2])  # and agree where amax / 448 is a power of two


# --------------------------------------------------------------------------- CPU path vs transformers
def test_transformers_dequantizes_fp8_without_a_gpu() -> None:
    """The oracle's behaviour on this machine: no GPU, so its FP8 quantizer dequantizes."""
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    assert not torch.cuda.is_available()
    qz = FineGrainedFP8HfQuantizer(FineGrainedFP8Config(scale_fmt="float"), pre_quantized=True)
    qz.validate_environment()
    assert qz.quantization_config.dequantize is True


@pytest.mark.parametrize("weight_fmt", ["ue8m0", None])
def test_cpu_fp8_linear_is_exact_under_either_scale_fmt(weight_fmt: str | None) -> None:
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    g = torch.Generator().manual_seed(5)
    w = torch.randn(256, 384, generator=g) * 0.05
    scale_dtype = torch.float8_e8m0fnu if weight_fmt == "ue8m0" else torch.float32
    q, s = quantize_fp8_block(w, (128, 128), scale_dtype)
    s32 = s.to(torch.float32)
    hf_w = Fp8Dequantize(None)._dequantize_one(q, s, torch.float64)  # transformers' dequantization
    x = _activations()[:, :384].contiguous() * 0.1
    want = x.to(torch.float64) @ hf_w.T
    got = ops.fp8_linear(x, q, s32).to(torch.float64)  # the CPU path: variant None
    err = (got - want).abs().max().item()
    tol = 2e-6 * want.abs().max().item()
    assert err <= tol, (err, tol)
    # quantizing the activations (either scale formula) would move it well past that tolerance
    for pow2 in (True, False):
        qa, sa = act_quant(x, pow2=pow2)
        quantized = dequant_act(qa, sa).to(torch.float64) @ hf_w.T
        assert (quantized - want).abs().max().item() > 100 * tol


# --------------------------------------------------------------------------- load-time warning
@pytest.mark.parametrize(
    ("value", "flag", "device", "warns"),
    [
        (ABSENT, None, "cuda", True),
        ("float", None, "cuda", True),
        (None, "fp8", "cuda", True),
        ("ue8m0", None, "cuda", False),
        (ABSENT, None, "cpu", False),  # weights dequantized at load
        (ABSENT, "fp8", "cpu", False),  # the references multiply weight-only
        (ABSENT, "none", "cuda", False),
    ],
)
def test_power_of_two_activation_scales_warn_once_on_cuda(value, flag, device, warns, caplog) -> None:
    mc = ModelConfig.from_dict(_raw(value))
    with caplog.at_level(logging.WARNING, logger=BUILDER_LOG):
        quant = resolve_model_quantization(flag, mc, None, device)
    msgs = [r.getMessage() for r in caplog.records if "scale_fmt" in r.getMessage()]
    if warns:
        assert quant is not None and quant.linear == "fp8"
        assert len(msgs) == 1 and "power of two" in msgs[0] and "\n" not in msgs[0], msgs
    else:
        assert msgs == []


def test_no_warning_for_an_unquantized_config_quantized_on_load(caplog) -> None:
    raw = copy.deepcopy(CFG)
    raw.pop("quantization_config", None)
    mc = ModelConfig.from_dict(raw)
    with caplog.at_level(logging.WARNING, logger=BUILDER_LOG):
        quant = resolve_model_quantization("fp8", mc, None, "cuda")
    assert quant is not None and quant.linear == "fp8"
    assert [r for r in caplog.records if "scale_fmt" in r.getMessage()] == []
