"""CPU tests of the kernels' default choices (no kernel runs): which tile, decode variant or MoE
layout a call without explicit options gets, and the environment variables that name the
measured alternative (each read once per process; a bad value is a ValueError naming it).

The defaults come from same-run device A/Bs recorded in benchmark/RESULTS.md; these tests pin the
rules' boundaries so a later edit cannot move them silently. The kernels' numerics are checked
against float64 oracles in the ``test_kernels_*`` files."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")


def test_extend_keys_on_m_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SGLANG_V4_ATTN_EXTEND_KEYS_ON_M``: unset or empty -> the extend tile's 4; 0/1/2/4 taken;
    anything else a ValueError naming the variable."""
    from sgl_kernel_v4.triton import attention as attn

    assert attn.EXTEND_TILE == (64, 128, 8, 1, 4)
    try:
        for value, want in (("", 4), ("0", 0), ("2", 2), (" 4 ", 4), ("1", 1)):
            monkeypatch.setenv(attn.EXTEND_KEYS_ON_M_ENV, value)
            attn.extend_keys_on_m.cache_clear()
            assert attn.extend_keys_on_m() == want
        for bad in ("3", "x", "-1", "8"):
            monkeypatch.setenv(attn.EXTEND_KEYS_ON_M_ENV, bad)
            attn.extend_keys_on_m.cache_clear()
            with pytest.raises(ValueError, match=attn.EXTEND_KEYS_ON_M_ENV):
                attn.extend_keys_on_m()
    finally:
        monkeypatch.delenv(attn.EXTEND_KEYS_ON_M_ENV, raising=False)
        attn.extend_keys_on_m.cache_clear()


@pytest.mark.parametrize(
    "tokens,want",
    [(1, "w8a16_words"), (16, "w8a16_words"), (17, "w8a16"), (64, "w8a16"), (65, "w8a8"), (2048, "w8a8")],
)
def test_fp8_choose_variant_bounds(tokens: int, want: str) -> None:
    """The word decode up to 16 tokens (faster at 1 and 16, slower at 64 on the H100), the
    weight-only kernel up to 64, the fp8 GEMM above."""
    from sgl_kernel_v4.triton import fp8_gemm

    assert fp8_gemm.WORDS_MAX_TOKENS == 16 and fp8_gemm.W8A16_MAX_TOKENS == 64
    assert fp8_gemm.choose_variant(tokens) == want


def test_moe_fp4_decode_default_is_word_form() -> None:
    """Pair mode (decode: 1 token, or at most E / 4 pairs) takes ``fused_dsplit1`` with the word
    decode; expert mode (prefill) and fp32 activations are unchanged."""
    from sgl_kernel_v4.triton.moe_fp4_tiles import DECODE_DEFAULT, DECODE_VARIANTS, _config

    assert DECODE_DEFAULT == "fused_dsplit1_words"
    words = DECODE_VARIANTS["fused_dsplit1_words"]
    assert {k: v for k, v in words.items() if k != "FP4_WORDS"} == DECODE_VARIANTS["fused_dsplit1"]
    for pairs in (6, 24, 40):  # E = 160, k = 6: pair mode up to 40 pairs
        cfg = _config(pairs, 160, 6, 2)
        assert cfg["PAIR"] == 1 and cfg["FP4_WORDS"] == 1, pairs
    assert "FP4_WORDS" not in _config(41, 160, 6, 2) and _config(41, 160, 6, 2)["PAIR"] == 0


class _Launched(Exception):
    """Raised by a stub kernel: the launch's keyword arguments (what the wrapper chose)."""


class _StubKernel:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` raises :class:`_Launched` with the
    keyword arguments, so the wrapper's choices are read without running anything."""

    def __getitem__(self, grid: object):
        def launch(*args: object, **kw: object) -> None:
            raise _Launched(kw)

        return launch


def _launch_kw(call) -> dict:
    with pytest.raises(_Launched) as info:
        call()
    return info.value.args[0]


def test_fp8_default_words_falls_back_with_a_narrow_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode-sized call that names no variant but gives a ``config`` whose K step is below the
    word decode's 128-wide block runs ``w8a16``'s decode (as it did before the word decode became
    the default); naming ``w8a16_words`` with it is still refused. Oracle: the documented rule
    (``fp8_linear``: the word decode needs whole 128-wide K blocks)."""
    import torch
    from sgl_kernel_v4.triton import fp8_gemm

    monkeypatch.setattr(fp8_gemm, "_w8a16_kernel", _StubKernel())
    monkeypatch.delenv(fp8_gemm.DECODE_VARIANT_ENV, raising=False)
    fp8_gemm.decode_variant_override.cache_clear()
    try:
        x = torch.randn(2, 256, dtype=torch.bfloat16)
        w = torch.zeros(128, 256, dtype=torch.float8_e4m3fn)
        s = torch.ones(1, 2, dtype=torch.float32)
        narrow = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
        assert _launch_kw(lambda: fp8_gemm.fp8_linear(x, w, s, config=narrow))["WORDS"] == 0
        wide = dict(narrow, BLOCK_K=128)
        assert _launch_kw(lambda: fp8_gemm.fp8_linear(x, w, s, config=wide))["WORDS"] != 0
        with pytest.raises(ValueError, match="BLOCK_K"):
            fp8_gemm.fp8_linear(x, w, s, "w8a16_words", config=narrow)
    finally:
        fp8_gemm.decode_variant_override.cache_clear()


def test_moe_fp4_explicit_config_keeps_its_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair-mode call with an explicit configuration runs the decode that configuration names:
    ``fused_dsplit1`` (no ``FP4_WORDS``) the byte decode, ``fused_dsplit1_words`` the word decode
    (``USE_ASM`` 2 off the GPU); without a config the default is the word form. Before, the
    default's ``FP4_WORDS`` leaked into every explicit configuration, so the byte form could no
    longer be chosen (the A/B sweeps and the variant tests ran the word form twice)."""
    import torch
    from sgl_kernel_v4.triton import fp4_fp8, moe_fp4

    monkeypatch.setattr(moe_fp4, "_gate_up_fp4_kernel", _StubKernel())
    monkeypatch.setattr(fp4_fp8, "default_mma", lambda: "bf16")
    T, D, inter, E, k = 1, 256, 128, 8, 2
    args = (
        torch.randn(T, D, dtype=torch.bfloat16),
        torch.zeros(E, 2 * inter, D // 2, dtype=torch.uint8),
        torch.full((E, 2 * inter, D // 32), 127, dtype=torch.uint8),
        torch.zeros(E, D, inter // 2, dtype=torch.uint8),
        torch.full((E, D, inter // 32), 127, dtype=torch.uint8),
        torch.tensor([[0, 1]]),
        torch.full((T, k), 0.5),
    )

    def use_asm(config: dict | None) -> int:
        return int(_launch_kw(lambda: moe_fp4.fused_moe_fp4(*args, 10.0, config=config))["USE_ASM"])

    variants = moe_fp4.DECODE_VARIANTS
    assert use_asm(None) == 2
    assert use_asm(dict(variants["fused_dsplit1_words"], PAIR=1)) == 2
    assert use_asm(dict(variants["fused_dsplit1"], PAIR=1)) == 0
    assert use_asm(dict(variants["baseline"], PAIR=1)) == 0
