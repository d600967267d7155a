"""Build the runtime model with its weights (SGLang's ``get_model``): decide the weight format,
check up front that the weights fit the device, allocate, load or generate, log the bytes.

The weight bytes are computed exactly before anything is allocated, from the model built on the
meta device (:func:`model_weight_bytes`), so a model that cannot fit one GPU fails at once with the
number of bytes it needs instead of an out-of-memory error half-way through loading.
"""

from __future__ import annotations

import logging
import math
import time

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.scale_fmt import UE8M0
from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
from sglang_v4.layers.quantization import QuantConfig, resolve_quantization
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

from .dummy import init_dummy_weights
from .expert_format import StoredExpertFormat, expert_format_warning, stored_expert_format
from .loader import checkpoint_nbytes
from .weight_loader import load_weights_into, weight_nbytes

logger = logging.getLogger(__name__)

#: Share of a GPU's memory the weights may take (the rest: KV pool, activations, CUDA graphs).
WEIGHT_MEMORY_FRACTION = 0.9
#: Largest accepted deviation of the weights' bytes in memory from the checkpoint's, when the
#: model keeps the checkpoint's format.
CHECKPOINT_BYTES_TOLERANCE = 0.02


def model_weight_bytes(
    model_config: ModelConfig,
    dtype: torch.dtype,
    quant: QuantConfig | None,
    parallel: ParallelConfig | None = None,
) -> int:
    """Exact bytes of the model's weights (every ``state_dict`` tensor: weights, scales, tables) in
    ``dtype`` with ``quant``, from the model built on the meta device (nothing allocated); with
    ``parallel``, the bytes one rank of that TP / EP layout holds.

    Raises:
        ValueError: a layout that cannot split the model (see ``DeepseekV4ForCausalLM``).
    """
    tp = TPGroup(parallel) if parallel is not None else None
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(model_config, dtype, "meta", quant, tp)
    return weight_nbytes(model)


def check_weights_fit(need: int, free: int, total: int, label: str = "model", tp_size: int = 1) -> None:
    """Raise if ``need`` weight bytes do not fit one device.

    The weights may take at most :data:`WEIGHT_MEMORY_FRACTION` of the device's ``total`` bytes
    (the rest holds the KV pool and the forward's workspace) and no more than is ``free``.

    Raises:
        ValueError: naming the bytes needed, the bytes available and the ``--tp-size`` that would
            spread the weights thin enough (``need`` is one rank's share when ``tp_size > 1``).
    """
    budget = min(int(total * WEIGHT_MEMORY_FRACTION), int(free))
    if need <= budget:
        return
    more = max(2, 1 << math.ceil(math.log2(need * tp_size / max(1, int(total * WEIGHT_MEMORY_FRACTION)))))
    raise ValueError(
        f"{label}: the weights need {need} bytes ({need / 2**30:.1f} GiB) per GPU but one GPU offers "
        f"{budget} bytes ({budget / 2**30:.1f} GiB: {WEIGHT_MEMORY_FRACTION:g} of its {total / 2**30:.1f} GiB, "
        f"{free / 2**30:.1f} GiB free). Shard the weights over more GPUs (--tp-size {max(more, 2 * tp_size)}, "
        "with --ep-size for the experts) or use a model with fewer layers or experts (presets: "
        "flash-43l, 43 layers x 160 experts, ~94 GiB in FP8 + FP4; flash-8l-32e, 8 layers x 32 experts)."
    )


def resolve_model_quantization(
    quantization: str | None,
    model_config: ModelConfig,
    model_path: str | None,
    device_type: str,
    load_format: str = "auto",
    warn: bool = True,
) -> QuantConfig | None:
    """The weight format of the model built from ``model_path``: the routed experts' stored
    format read from the checkpoint's safetensors headers
    (:func:`~sglang_v4.model_loader.expert_format.stored_expert_format`; not with
    ``load_format="dummy"`` or without a path) and the config, resolved by
    :func:`~sglang_v4.layers.quantization.resolve_quantization`. With ``warn``, a config that
    disagrees with the stored experts is logged in one warning line naming both, and so is
    (:func:`scale_fmt_warning`) an FP8 checkpoint with exact activation scales (no
    ``scale_fmt: ue8m0``) whose linears the CUDA kernels multiply with power-of-two ones.

    Raises:
        ValueError: as :func:`~sglang_v4.layers.quantization.resolve_quantization`.
    """
    stored = (
        stored_expert_format(model_path)
        if load_format == "auto" and model_path is not None
        else StoredExpertFormat()
    )
    quant = resolve_quantization(quantization, model_config.hf, device_type, stored.fmt)
    if warn:
        for msg in (
            expert_format_warning(model_config.hf, stored),
            scale_fmt_warning(model_config, quant, device_type),
        ):
            if msg:
                logger.warning("%s", msg)
    return quant


def scale_fmt_warning(model_config: ModelConfig, quant: QuantConfig | None, device_type: str) -> str | None:
    """The load-time warning for a checkpoint whose ``quantization_config`` asks for exact
    activation scales (``scale_fmt`` absent, null or ``"float"``: ``amax / 448``, DeepSeek-V3's
    format) when the model keeps FP8 linears on CUDA: the Triton ``w8a8`` GEMMs (prefill batches
    above ``W8A16_MAX_TOKENS`` tokens) round each 1x128 group's activation scale up to a power of
    two (ue8m0) whatever ``scale_fmt`` says. ``None`` otherwise: ``scale_fmt: ue8m0``, no
    ``quantization_config`` (weights quantized on load take ue8m0 scales), FP8 linears not kept,
    or the CPU path (it never quantizes activations, as transformers on CPU)."""
    qc = getattr(model_config.hf, "quantization_config", None)
    if device_type != "cuda" or quant is None or quant.linear != "fp8" or not qc:
        return None
    if model_config.scale_fmt == UE8M0:
        return None
    return (
        "quantization_config.scale_fmt is not 'ue8m0' (exact amax / 448 activation scales), but the "
        "CUDA FP8 GEMMs that quantize activations (w8a8, prefill) round each 1x128 group's activation "
        "scale up to a power of two; outputs may differ slightly from DeepSeek's reference for this "
        "checkpoint (the CPU path and --quantization none do not quantize activations)"
    )


def get_model(
    model_config: ModelConfig,
    model_path: str | None,
    device: torch.device | str,
    dtype: torch.dtype,
    load_format: str = "auto",
    quantization: str | None = None,
    seed: int = 0,
    tp: TPGroup | None = None,
) -> DeepseekV4ForCausalLM:
    """The runtime model on ``device`` with its weights.

    Args:
        model_config: parsed config (its ``quantization_config``, if any, is the checkpoint's).
        model_path: checkpoint directory (unused with ``load_format="dummy"``).
        device: ``cpu`` / ``cuda``.
        dtype: activation / unquantized-weight dtype.
        load_format: ``"auto"`` (read the checkpoint) or ``"dummy"`` (random weights on the device).
        quantization: ``--quantization`` (``None``: the checkpoint's format on CUDA, dequantized on
            CPU; ``"fp8"``; ``"none"``), see :func:`resolve_model_quantization` (the routed
            experts follow their stored format where the header is definite).
        seed: dummy-weight seed.
        tp: this rank's tensor-parallel group: the model holds, loads (or generates) and logs
            only this rank's shard (``DeepseekV4ForCausalLM.weight_shards``).

    Raises:
        ValueError: unknown ``load_format``, a missing ``model_path``, weights that do not fit
            the GPU (:func:`check_weights_fit`), or a checkpoint that does not match the model.
    """
    if load_format not in ("auto", "dummy"):
        raise ValueError(f"load_format: expected 'auto' or 'dummy', got {load_format!r}")
    if load_format == "auto" and model_path is None:
        raise ValueError("model_path: required unless load_format='dummy'")
    dev = torch.device(device)
    rank0 = tp is None or tp.config.tp_rank == 0
    quant = resolve_model_quantization(
        quantization, model_config, model_path, dev.type, load_format, warn=rank0
    )
    label = "weights" if quant is None else quant.describe()
    parallel = tp.config if tp is not None else ParallelConfig()
    need = model_weight_bytes(model_config, dtype, quant, parallel)
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        check_weights_fit(need, free, total, f"{model_path or 'model'} ({label}, {dtype})", parallel.tp_size)
    t0 = time.perf_counter()
    model = DeepseekV4ForCausalLM(model_config, dtype, dev, quant, tp)
    if load_format == "dummy":
        init_dummy_weights(model, seed)
    else:
        assert model_path is not None
        load_weights_into(model, model_path, progress=True)
    model.eval()
    have = weight_nbytes(model)
    msg = f"Weights: {have} bytes ({have / 2**30:.2f} GiB) on {dev} ({label}, {dtype}, load_format={load_format})"
    if parallel.tp_size > 1:
        msg += f" [this rank's shard: {parallel.describe()}]"
    if load_format == "auto" and parallel.tp_size == 1:
        assert model_path is not None
        ck = checkpoint_nbytes(model_path)
        ratio = have / max(1, ck)
        msg += f"; checkpoint {ck} bytes ({ck / 2**30:.2f} GiB), ratio {ratio:.4f}"
        if quant is not None and dtype == torch.bfloat16 and abs(ratio - 1) > CHECKPOINT_BYTES_TOLERANCE:
            logger.warning(
                "weights take %.4fx the checkpoint's bytes (more than %.0f%% off) while kept in its format",
                ratio,
                100 * CHECKPOINT_BYTES_TOLERANCE,
            )
    logger.info("%s; built in %.1f s", msg, time.perf_counter() - t0)
    return model
