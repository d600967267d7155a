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
