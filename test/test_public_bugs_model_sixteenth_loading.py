"""A sixteenth set of public reports, checkpoint formats and MoE scaling: the e8m0 bytes 0 and
0xFF, e8m0 scales stored as ``U8``, the order of ue8m0 rounding and FP8 quantization, and a
``routed_scaling_factor`` applied once (each test names its report).

Oracles: torch's own ``float8_e8m0fnu`` -> float32 conversion (the OCP MX spec's e8m0 encoding),
float64 references written here from the documented formats (``w = q * 2 ** (byte - 127)``,
e4m3's 3 mantissa bits), the same checkpoint loaded with its scales in the official dtype, and HF
transformers' ``DeepseekV4ForCausalLM`` (fp32, tiny random weights, one cache-free forward).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, Twin, hf_logprobs, make_twin, random_ids
from safetensors import safe_open
from safetensors.torch import save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_loader.quant import (
    E8M0_DTYPE,
    FP8_DTYPE,
    dequantize_fp8_block,
    quantize_fp8_block,
    scale_to_float,
)
from sglang_v4.model_loader.weight_loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import write_checkpoint

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides


def _max_err(ours: torch.Tensor, want: torch.Tensor) -> float:
    return (ours - want).abs().max().item()


# ---------------------------------------------------------------------------------------------
# e8m0 bytes 0 and 0xFF (NVIDIA/TransformerEngine#3262)
# ---------------------------------------------------------------------------------------------


def test_transformer_engine_3262_every_e8m0_byte_decodes_as_the_spec_says() -> None:
    """NVIDIA/TransformerEngine#3262 (building an e8m0 scale by shifting the byte into the fp32
    exponent field turned code 0, ``2**-127``, into 0.0 and code 255, NaN, into +inf): the
    loader's scale decoding gives, for all 256 bytes stored as ``float8_e8m0fnu`` or as raw
    ``uint8``, exactly torch's own e8m0 conversion (byte 0 the subnormal ``2**-127``, byte 255
    NaN, the rest ``2 ** (b - 127)``)."""
    b = torch.arange(256, dtype=torch.uint8)
    want = b.view(E8M0_DTYPE).to(torch.float32)
    assert want[0].item() == 2.0**-127 and torch.isnan(want[255])
    ref64 = torch.tensor([2.0 ** (i - 127) for i in range(255)], dtype=torch.float64)
    for stored in (b.view(E8M0_DTYPE), b):
        got = scale_to_float(stored)
        assert got.dtype == torch.float32
        assert torch.equal(got[:255], want[:255])
        assert torch.equal(got[:255].double(), ref64)
        assert torch.isnan(got[255]), f"byte 0xFF decoded as {got[255].item()} ({stored.dtype})"


@pytest.fixture(scope="module")
def fp8_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An official-format checkpoint with FP8 (ue8m0-scaled) linears and FP4 routed experts."""
    out = str(tmp_path_factory.mktemp("fp8_e8m0"))
    return write_checkpoint(
        out, fmt="official", weights="fp8", seed=3262, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )


def _rewrite(src: str, dst: str, edit) -> list[str]:  # noqa: ANN001 - edit(key, tensor) -> tensor | None
    """Copy the checkpoint ``src`` to ``dst``, passing every tensor through ``edit`` (``None``:
    unchanged); returns the keys ``edit`` changed."""
    os.makedirs(dst, exist_ok=True)
    changed: list[str] = []
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not name.endswith(".safetensors"):
            with open(path, "rb") as f, open(os.path.join(dst, name), "wb") as g:
                g.write(f.read())
            continue
        with safe_open(path, "pt") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        for k, t in list(tensors.items()):
            new = edit(k, t)
            if new is not None:
                tensors[k] = new
                changed.append(k)
        save_file(tensors, os.path.join(dst, name), metadata=meta)
    return changed


def _load(path: str) -> DeepseekV4ForCausalLM:
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(path))
    load_weights_into(model, path, progress=False)
    return model


def test_transformer_engine_3262_a_nan_e8m0_scale_is_refused_at_load(fp8_dir: str, tmp_path) -> None:  # noqa: ANN001
    """NVIDIA/TransformerEngine#3262, the loading side: an FP8 weight whose ue8m0 block scale holds
    the NaN byte 0xFF would dequantize its whole 128x128 block to NaN / inf (before, silently, as
    +inf); loading such a checkpoint raises a ValueError naming the scale tensor (the intact
    files load: see the ``U8`` test below)."""
    target: list[str] = []

    def poison(key: str, t: torch.Tensor) -> torch.Tensor | None:
        if target or t.dtype != E8M0_DTYPE or t.dim() != 2 or "experts" in key:
            return None
        target.append(key)
        raw = t.contiguous().view(torch.uint8).clone()
        raw[0, 0] = 0xFF
        return raw.view(E8M0_DTYPE)

    bad = str(tmp_path / "bad")
    assert _rewrite(fp8_dir, bad, poison) == target and len(target) == 1
    with pytest.raises(ValueError, match=target[0].replace(".", r"\.")):
        _load(bad)


# ---------------------------------------------------------------------------------------------
# e8m0 scales stored as U8 (jundot/omlx#2159)
# ---------------------------------------------------------------------------------------------


def test_omlx_2159_u8_e8m0_scales_are_exponents_not_linear_values(fp8_dir: str, tmp_path) -> None:  # noqa: ANN001
    """jundot/omlx#2159 (MX checkpoints store e8m0 block scales with safetensors dtype ``U8``; a
    loader that only decoded ``F8_E8M0`` multiplied the raw bytes in, ~1e5x too large): a block
    dequantized with ``uint8`` scales equals the float64 ``q * 2 ** (byte - 127)``, and the
    checkpoint with every ``F8_E8M0`` scale rewritten as ``U8`` loads into exactly the model the
    official dtype gives."""
    g = torch.Generator().manual_seed(2159)
    q = (torch.randn(256, 384, generator=g) * 40).clamp(-448, 448).to(FP8_DTYPE)
    sb = torch.randint(110, 135, (2, 3), generator=g, dtype=torch.uint8)
    want = q.double() * torch.pow(2.0, sb.double() - 127).repeat_interleave(128, 0).repeat_interleave(128, 1)
    for s in (sb, sb.view(E8M0_DTYPE)):
        assert torch.equal(dequantize_fp8_block(q, s).double(), want)

    u8 = str(tmp_path / "u8")
    changed = _rewrite(
        fp8_dir, u8, lambda k, t: t.contiguous().view(torch.uint8) if t.dtype == E8M0_DTYPE else None
    )
    assert any("experts" not in k for k in changed) and any("experts" in k for k in changed)
    ref, got = _load(fp8_dir).state_dict(), _load(u8).state_dict()
    assert ref.keys() == got.keys()
    for k in ref:
        assert ref[k].dtype == got[k].dtype and torch.equal(ref[k], got[k]), k


# ---------------------------------------------------------------------------------------------
# ue8m0: round the scale, then quantize with it (huggingface/transformers#46763)
# ---------------------------------------------------------------------------------------------


def test_transformers_46763_ue8m0_quantization_divides_by_the_stored_scale() -> None:
    """huggingface/transformers#46763 (the FP8 quantizer divided by ``amax / 448`` and then stored
    that scale rounded up to a power of two, so ``q * scale`` came back up to 2x too large): the
    runtime's ue8m0 FP8 quantizer (used to quantize an unquantized checkpoint on load) stores a
    power-of-two scale with ``|q| <= 448`` and ``q * scale`` within e4m3's rounding of every
    weight (float64: relative ``2**-4`` plus the subnormal step ``scale * 2**-10``), on blocks
    whose amax sits just above and below a power of two times 448."""
    g = torch.Generator().manual_seed(46763)
    w = torch.randn(256, 384, generator=g, dtype=torch.float64)
    for i, amax in enumerate((448 * 2.0**-6 * 1.01, 448 * 2.0**-6 * 0.99, 3.0, 0.05, 700.0, 1e-3)):
        r, c = divmod(i, 3)
        blk = w[r * 128 : (r + 1) * 128, c * 128 : (c + 1) * 128]
        blk *= amax / blk.abs().max()
    q, s = quantize_fp8_block(w.float(), (128, 128), E8M0_DTYPE)
    assert s.dtype == E8M0_DTYPE
    sf = s.view(torch.uint8).double()
    scale = torch.pow(2.0, sf - 127).repeat_interleave(128, 0).repeat_interleave(128, 1)
    assert q.float().abs().max().item() <= 448
    deq = q.double() * scale
    wf = w.float().double()
    bound = wf.abs() * 2.0**-4 + scale * 2.0**-10
    assert bool(((deq - wf).abs() <= bound).all()), (deq - wf).abs().div(bound).max().item()
    assert torch.equal(dequantize_fp8_block(q, s).double(), deq)


# ---------------------------------------------------------------------------------------------
# routed_scaling_factor exactly once (sgl-project/sglang#35152, kvcache-ai/sglang#86)
# ---------------------------------------------------------------------------------------------


def test_sglang_35152_routed_scaling_factor_applied_exactly_once() -> None:
    """sgl-project/sglang#35152 and kvcache-ai/sglang#86 (an epilogue multiplied the routed experts'
    output by ``routed_scaling_factor`` although the top-k weights already carried it: 2.5**2 on
    DeepSeek-V3): with ``routed_scaling_factor = 2.5`` the runtime gives HF's log-probabilities on
    a 96-token prompt, and the same weights under a config of factor ``2.5**2`` (what a double
    application computes) give HF-with-2.5 log-probabilities that differ."""
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), routed_scaling_factor=2.5)
    twin = make_twin("rsf_2_5", seed=35152, cfg=cfg)
    ids = random_ids(96, seed=35152)
    want = hf_logprobs(twin, ids)
    assert _max_err(Driver(twin).run_chunked(ids, 96), want) <= TOL
    twice = dict(copy.deepcopy(cfg), routed_scaling_factor=6.25)
    mc2 = ModelConfig.from_dict(copy.deepcopy(twice))
    other = DeepseekV4ForCausalLM(mc2)
    other.load_state_dict(twin.state, strict=True)
    doubled = Twin(twin.name, twice, mc2, twin.hf, other, twin.state)
    assert _max_err(Driver(doubled).run_chunked(ids, 96), want) > 1e-2
