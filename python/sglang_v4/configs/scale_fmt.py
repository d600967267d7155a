"""``quantization_config.scale_fmt`` of an FP8 checkpoint: how its scales are formed.

DeepSeek's inference code reads ``scale_fmt`` to choose how the per-1x128-group activation scale of
its FP8 GEMMs (``act_quant``) is computed from the group's ``amax`` (clamped to ``>= 1e-4``):

* ``"ue8m0"`` (DeepSeek-V3.1 / V4 ``config.json``): ``amax / 448`` rounded up to a power of two,
  so the scale is one exponent byte (``float8_e8m0fnu``); the weight block scales are powers of two
  as well;
* absent or ``null`` (DeepSeek-V3): the exact ``amax / 448``. transformers'
  ``FineGrainedFP8Config`` spells this format ``"float"`` (its default, written into the
  ``config.json`` of the checkpoints it saves), which is accepted as the same format.

Any other value is refused when the config is loaded (:func:`parse_scale_fmt`). The value is carried
in :attr:`sglang_v4.configs.model_config.ModelConfig.scale_fmt`.

Which path honours it: the CPU path never quantizes activations (the FP8 weights are dequantized
at load, or multiplied weight-only by ``sgl_kernel_v4.ref.fp8_gemm.fp8_linear``), as transformers
does on a machine without a GPU (it dequantizes an FP8 checkpoint to bf16), so it stays the exact
oracle under either format. The CUDA kernels' activation-quantized (``w8a8``) GEMMs always round
the activation scales to powers of two; for a checkpoint without ``ue8m0`` the model builder logs
that once at load (``model_loader.builder.resolve_model_quantization``).
"""

from __future__ import annotations

from typing import Any

#: The ``scale_fmt`` value of power-of-two (ue8m0) scales.
UE8M0 = "ue8m0"
#: transformers' name for exact float32 scales (``FineGrainedFP8Config(scale_fmt="float")``).
FLOAT = "float"
#: Accepted ``quantization_config.scale_fmt`` values besides absent / ``null``.
SCALE_FMTS = (UE8M0, FLOAT)


def parse_scale_fmt(quantization_config: Any) -> str | None:
    """The scale format of a checkpoint's ``quantization_config``.

    Args:
        quantization_config: the config's ``quantization_config``: a dict (``config.json``), an
            object with a ``scale_fmt`` attribute (transformers' ``FineGrainedFP8Config``) or
            ``None``. A value of another type (a string such as ``"fp8"``) has no ``scale_fmt``
            here; the quantization check refuses it (``layers.quantization.resolve_quantization``).

    Returns:
        ``"ue8m0"`` (power-of-two scales) or ``None`` (exact ``amax / 448`` scales: the key absent,
        ``null``, or transformers' ``"float"``).

    Raises:
        ValueError: naming ``quantization_config.scale_fmt`` and the accepted values when it is
            anything else (another string such as ``"ue8m1"`` or ``"fp32"``, a differently cased
            ``"UE8M0"``, a number, a list). transformers' config refuses the same strings.
    """
    if quantization_config is None or isinstance(quantization_config, (str, bytes, int, float, list, tuple)):
        return None
    if isinstance(quantization_config, dict):
        fmt = quantization_config.get("scale_fmt")
    else:
        fmt = getattr(quantization_config, "scale_fmt", None)
    if fmt is None or fmt == FLOAT:
        return None
    if fmt == UE8M0:
        return UE8M0
    raise ValueError(
        f"quantization_config.scale_fmt: expected 'ue8m0' (power-of-two scales), 'float' or absent / "
        f"null (exact amax / 448 scales), got {fmt!r}"
    )


def activation_scales_pow2(scale_fmt: str | None) -> bool:
    """Whether DeepSeek's ``act_quant`` rounds the activation scales of a checkpoint with this
    (parsed, :func:`parse_scale_fmt`) ``scale_fmt`` up to powers of two: the ``pow2`` argument of
    ``sgl_kernel_v4.ref.fp8_gemm.act_quant``. ``True`` for ``"ue8m0"``, ``False`` for ``None``.

    Raises:
        ValueError: ``scale_fmt`` is neither ``"ue8m0"`` nor ``None``.
    """
    if scale_fmt not in (UE8M0, None):
        raise ValueError(f"scale_fmt: expected 'ue8m0' or None, got {scale_fmt!r}")
    return scale_fmt == UE8M0
