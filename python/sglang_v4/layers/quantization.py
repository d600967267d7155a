"""Weight quantization of the runtime model: which weights stay FP8 / FP4 in memory, and when.

DeepSeek publishes V4 with (``config.json`` ``quantization_config``: ``quant_method: fp8``,
``fmt: e4m3``, ``scale_fmt: ue8m0``, ``weight_block_size: [128, 128]``, ``expert_dtype: fp4``):

* FP8 e4m3 weights with one scale per 128x128 block for the attention projections (``q_a``,
  ``q_b``, ``kv``, grouped ``o_a``, ``o_b``), the indexer's ``q_b`` and the shared expert
  (:data:`FP8_LINEAR_PATTERN`, HF names);
* FP4 e2m1 routed experts, two values per byte, one ue8m0 scale per 32 inputs;
* bf16 for the compressor / indexer-compressor projections, the indexer's ``weights_proj``, the
  router, the embedding and the LM head; fp32 for mHC, norms, sinks and biases.

With a :class:`QuantConfig` the layers hold exactly that: ``Linear`` a float8_e4m3fn ``weight`` plus
a float32 ``weight_scale_inv`` buffer, ``Experts`` packed uint8 ``gate_up_proj`` / ``down_proj``
plus uint8 ``*_scale_inv`` exponent buffers, and they call the FP8 / FP4 GEMMs of
``sgl_kernel_v4``. Without one, every weight is in the model dtype (the loader dequantizes).

Whether the routed experts are FP4 follows how the checkpoint stores them where its safetensors
header says so (packed FP4 or FP8 e4m3: ``model_loader/expert_format.py``), and the config's
``expert_dtype`` otherwise (:func:`resolve_quantization`). Linears a checkpoint lists in
``modules_to_not_convert`` / ``ignored_layers`` are stored unquantized on purpose: then every
linear stays in the model dtype (:func:`unconverted_modules`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: HF names of the linear weights DeepSeek publishes in FP8 (block-scaled e4m3).
FP8_LINEAR_PATTERN = re.compile(
    r"\.self_attn\.(q_a_proj|q_b_proj|kv_proj|o_a_proj|o_b_proj)\.weight$"
    r"|\.self_attn\.compressor\.indexer\.q_b_proj\.weight$"
    r"|\.mlp\.shared_experts\.(gate_proj|up_proj|down_proj)\.weight$"
)
#: HF names of the routed-expert weights DeepSeek publishes in FP4.
FP4_EXPERT_PATTERN = re.compile(r"\.mlp\.experts\.(gate_up_proj|down_proj)$")

#: ``--quantization`` values: ``fp8`` = the published V4 format (FP8 block-scaled linears, FP4
#: routed experts) kept quantized, quantizing an unquantized checkpoint on load; ``none`` =
#: dequantize an FP8/FP4 checkpoint to the model dtype on load.
QUANTIZATION_CHOICES = ("fp8", "none")
#: Scale suffix of a quantized weight in the model's state dict (HF's ``weight_scale_inv``).
SCALE_SUFFIX = "_scale_inv"
FP8_BLOCK = (128, 128)


@dataclass(frozen=True)
class QuantConfig:
    """What the model keeps quantized.

    Attributes:
        linear: ``"fp8"`` (the :data:`FP8_LINEAR_PATTERN` linears as e4m3 + 128x128 block scales)
            or ``None`` (model dtype).
        experts: ``"fp4"`` (routed experts as packed e2m1 + per-32 ue8m0 scales) or ``None``.
    """

    linear: str | None = "fp8"
    experts: str | None = "fp4"

    def describe(self) -> str:
        """A short label for logs, e.g. ``"FP8 linears + FP4 experts"``."""
        parts = []
        if self.linear:
            parts.append(f"{self.linear.upper()} linears")
        if self.experts:
            parts.append(f"{self.experts.upper()} experts")
        return " + ".join(parts) or "unquantized"


def _qc_get(qc: Any, key: str) -> Any:
    return qc.get(key) if isinstance(qc, dict) else getattr(qc, key, None)


def resolve_quantization(
    flag: str | None, hf_config: Any, device: str, stored_experts: str | None = None
) -> QuantConfig | None:
    """Decide what stays quantized in memory.

    Args:
        flag: ``--quantization``: ``None`` (from the checkpoint), ``"fp8"`` or ``"none"``.
        hf_config: the model's ``DeepseekV4Config`` (its ``quantization_config``, if any, is the
            checkpoint's; HF folds ``expert_dtype`` into it).
        device: ``"cpu"`` or ``"cuda"``.
        stored_experts: the routed experts' format as the checkpoint stores them, read from a
            safetensors header (``model_loader.expert_format.stored_expert_format``): ``"fp4"``
            (packed e2m1), ``"fp8"`` (e4m3, block-scaled) or ``None`` (a float dtype, unreadable,
            or no checkpoint: the config decides).

    Returns:
        ``None`` (every weight in the model dtype) or a :class:`QuantConfig`. ``None`` flag: the
        checkpoint's FP8 format on CUDA; on the CPU the weights are dequantized at load (the CPU
        path is the exact oracle; ``"fp8"`` runs the quantized layers through the torch
        references there). The routed experts stay FP4 where the model keeps the checkpoint's
        format and they are stored FP4, whatever ``expert_dtype`` says (also beside no
        ``quantization_config``: the linears then follow the config); FP8-stored experts stay in
        the model dtype (there is no FP8 expert kernel, and re-quantizing them to FP4 would lose
        accuracy), also under ``"fp8"``. Only where the header is not definite (``None``) does
        the config decide: ``expert_dtype: fp4`` (or, under ``"fp8"``, an unquantized config)
        gives FP4 experts, quantized on load. A checkpoint whose ``modules_to_not_convert`` /
        ``ignored_layers`` name FP8 linears (:func:`unconverted_modules`) has every linear in the
        model dtype (those stored in a float dtype are read as stored), and one naming the routed
        experts keeps them in the model dtype unless the header shows them packed FP4.
        ``quant_method`` is compared case-insensitively, as SGLang and vLLM read it.

    Raises:
        ValueError: unknown ``flag`` (:func:`check_quantization_flag`), or a checkpoint
            ``quantization_config`` that is not an object (a string such as ``"gptq"``, a number,
            a list), or a checkpoint
            quantization other than DeepSeek's FP8 (naming ``quantization_config.quant_method``:
            another method, or none given, which SGLang takes for an NVIDIA ModelOpt
            ``quant_algo`` block), a compressed-tensors ``compression_config``, an MLX
            ``quantization`` block (mlx-lm's exports), a ``weight_block_size`` that is not two
            positive integers, or an ``activation_scheme`` other than ``dynamic`` (static
            per-tensor input scales, which neither path applies). Checked with every ``flag``,
            ``"none"`` included: only DeepSeek's FP8 / FP4 formats can be dequantized at load.
            Also, naming ``hidden_size`` / ``moe_intermediate_size``, FP4 routed experts of a size
            that is not a multiple of 32 (:func:`_checked`), and ``modules_to_not_convert`` /
            ``ignored_layers`` that are not lists of strings.
    """
    check_quantization_flag(flag)
    if stored_experts not in (None, "fp4", "fp8"):
        raise ValueError(f"stored_experts: expected 'fp4', 'fp8' or None, got {stored_experts!r}")
    qc = _quantization_config(hf_config)
    if isinstance(qc, (str, bytes, int, float, list, tuple)):  # bool is an int
        raise ValueError(
            f"quantization_config: expected an object with a quant_method (DeepSeek's block FP8: "
            f'{{"quant_method": "fp8", ...}}), got {type(qc).__name__} {qc!r}'
        )
    mlx = getattr(hf_config, "quantization", None)
    if qc is None and isinstance(mlx, dict) and mlx:  # mlx-lm's block (``bits``, ``group_size``, ``mode``)
        raise ValueError(
            f"quantization: MLX-quantized weights (bits {mlx.get('bits')!r}, group_size "
            f"{mlx.get('group_size')!r}) are not supported (only DeepSeek's block FP8 "
            "quantization_config, or none)"
        )
    if qc is None and getattr(hf_config, "compression_config", None) is not None:
        raise ValueError(
            "compression_config: compressed-tensors checkpoints are not supported (only DeepSeek's "
            "block FP8 quantization_config, or none)"
        )
    method = _qc_get(qc, "quant_method") if qc is not None else None
    if qc is not None and method is None:  # SGLang reads such a block as NVIDIA ModelOpt's
        algo = _qc_get(qc, "quant_algo")
        raise ValueError(
            "quantization_config.quant_method: missing"
            + (f" (quant_algo {algo!r}: an NVIDIA ModelOpt export)" if algo else "")
            + "; only DeepSeek's block FP8 ('fp8') is supported"
        )
    # SGLang and vLLM lower-case quant_method before reading it (a hand-edited "FP8" is DeepSeek's)
    if method is not None and not (isinstance(method, str) and method.lower() == "fp8"):
        raise ValueError(
            f"quantization_config.quant_method: only DeepSeek's block FP8 ('fp8') is supported, got {method!r}"
        )
    block = _qc_get(qc, "weight_block_size") if qc is not None else None
    if block is not None and (
        not isinstance(block, (list, tuple))
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise ValueError(
            f"quantization_config.weight_block_size: expected two positive integers [rows, columns], got {block!r}"
        )
    scheme = _qc_get(qc, "activation_scheme") if qc is not None else None
    if scheme is not None and str(scheme).lower() != "dynamic":
        raise ValueError(
            f"quantization_config.activation_scheme: {scheme!r} is not supported; DeepSeek's FP8 "
            "quantizes activations dynamically (one scale per 128 channels of each token), and static "
            "per-tensor input scales are not applied"
        )
    unconverted = unconverted_modules(qc, hf_config) if qc is not None else (False, False)
    if flag == "none":
        return None
    expert_dtype = _expert_dtype(qc, hf_config)
    if stored_experts is not None:  # the header is definite: packed FP4 stays FP4, FP8 is dequantized
        experts = "fp4" if stored_experts == "fp4" else None
    elif flag == "fp8":  # an unquantized config is quantized on load
        experts = "fp4" if qc is None or expert_dtype == "fp4" else None
    else:
        experts = "fp4" if expert_dtype == "fp4" else None
    if unconverted[1] and stored_experts != "fp4":  # experts the checkpoint left unquantized
        experts = None
    if flag == "fp8":
        return _unconverted_kept(QuantConfig("fp8", experts), unconverted, hf_config)
    if device == "cpu":
        return None
    if qc is None:  # unquantized config: only experts the header shows packed FP4 stay FP4
        return _checked(QuantConfig(None, "fp4"), hf_config) if stored_experts == "fp4" else None
    linear: str | None = "fp8"
    if block is not None and tuple(int(b) for b in block) != FP8_BLOCK:
        logger.warning("FP8 block size %s is not 128x128: dequantizing the FP8 linears at load", block)
        linear = None
    return _unconverted_kept(QuantConfig(linear, experts), unconverted, hf_config)


#: ``quantization_config`` keys listing modules a quantized checkpoint stores unquantized:
#: transformers' ``modules_to_not_convert`` (``FineGrainedFP8Config``; huggingface/transformers)
#: and vLLM / SGLang ``Fp8Config``'s ``ignored_layers`` (vllm-project/vllm, sgl-project/sglang).
UNCONVERTED_KEYS = ("modules_to_not_convert", "ignored_layers")


def _fp8_module_names(hf_config: Any) -> tuple[list[str], list[str]]:
    """Module names (no ``.weight``) of the weights DeepSeek publishes quantized, in the spellings a
    ``modules_to_not_convert`` / ``ignored_layers`` entry may use: HF (``model.layers.0.self_attn.
    q_a_proj``), official (``layers.0.attn.wq_a``) and official under ``model.`` (what
    ``save_pretrained`` writes). Returns ``(FP8 linears, routed experts)``."""
    from sglang_v4.model_loader.names import hf_to_official

    linears: list[str] = []
    experts: list[str] = []
    projs = [f"self_attn.{p}" for p in ("q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj")]
    projs += ["self_attn.compressor.indexer.q_b_proj"]
    projs += [f"mlp.shared_experts.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
    for i in range(int(getattr(hf_config, "num_hidden_layers", 0) or 0)):
        for p in projs:
            hf = f"model.layers.{i}.{p}"
            linears.append(hf)
            off = hf_to_official(hf + ".weight")
            if off is not None:
                linears += [off[: -len(".weight")], "model." + off[: -len(".weight")]]
        experts += [
            f"model.layers.{i}.mlp.experts",
            f"layers.{i}.ffn.experts",
            f"model.layers.{i}.ffn.experts",
        ]
    return linears, experts


def unconverted_modules(qc: Any, hf_config: Any) -> tuple[bool, bool]:
    """Whether ``quantization_config``'s :data:`UNCONVERTED_KEYS` name any FP8 linear / the routed
    experts, i.e. the checkpoint stores some of them in a float dtype on purpose.

    An entry (a trailing ``.weight`` dropped) matches a module when one name contains the other
    or it matches as transformers' ``should_convert_module`` does (a regular expression from the
    name's start to a module boundary; vLLM's ``ignored_layers`` are prefixes): a superset of both
    projects' rules, so that a near miss keeps weights exact rather than re-quantized. ``lm_head``,
    the embedding and the router (``model.layers.0.mlp.gate``), unquantized anyway, match nothing.

    Returns:
        ``(linears, experts)``.

    Raises:
        ValueError: naming ``quantization_config.<key>`` when it is not a list of strings.
    """
    entries: list[str] = []
    for key in UNCONVERTED_KEYS:
        v = _qc_get(qc, key)
        if v is None:
            continue
        if not isinstance(v, (list, tuple)) or not all(isinstance(e, str) for e in v):
            raise ValueError(f"quantization_config.{key}: expected a list of module names, got {v!r}")
        entries += [e.removesuffix(".weight") for e in v if e.removesuffix(".weight")]
    if not entries:
        return False, False
    linears, experts = _fp8_module_names(hf_config)

    def hit(names: list[str]) -> bool:
        return any(_names_module(e, n) for e in entries for n in names)

    return hit(linears), hit(experts)


def _names_module(entry: str, name: str) -> bool:
    """Whether a not-converted ``entry`` names module ``name``: either contains the other, or
    ``entry`` as a regular expression matches ``name`` from its start up to a module boundary
    (transformers' ``should_convert_module``: ``model.layers.*.self_attn``)."""
    if entry in name or name in entry:
        return True
    try:
        return re.match(rf"(?:{entry})(?:(?<=\.)|(?=\.|$))", name) is not None
    except re.error:
        return False


def _unconverted_kept(
    quant: QuantConfig, unconverted: tuple[bool, bool], hf_config: Any
) -> QuantConfig | None:
    """``quant`` with the FP8 linears in the model dtype when the checkpoint left some of them
    unquantized (quantizing those on load would change the weights it chose to keep exact; the
    FP8 ones are dequantized exactly); ``None`` when nothing stays quantized."""
    if unconverted[0] and quant.linear is not None:
        logger.warning(
            "quantization_config lists FP8 linears as not converted (%s): keeping every FP8 linear in "
            "the model dtype (the stored FP8 ones dequantized at load)",
            "/".join(UNCONVERTED_KEYS),
        )
        quant = QuantConfig(None, quant.experts)
    if quant.linear is None and quant.experts is None:
        return None
    return _checked(quant, hf_config)


def _quantization_config(hf_config: Any) -> Any:
    """The config's ``quantization_config``, or ``None`` for none or an empty one."""
    qc = getattr(hf_config, "quantization_config", None)
    if isinstance(qc, dict) and not {k for k in qc if k != "expert_dtype"}:
        # ``"quantization_config": {}`` (nothing quantized), into which transformers'
        # ``DeepseekV4Config`` folds a top-level ``expert_dtype`` (a BF16 conversion that kept it)
        return None
    return qc


def _expert_dtype(qc: Any, hf_config: Any) -> str | None:
    """``expert_dtype`` as the config gives it (inside ``quantization_config`` or at top level)."""
    v = (_qc_get(qc, "expert_dtype") if qc is not None else None) or getattr(hf_config, "expert_dtype", None)
    return str(v).lower() if v is not None else None


def declared_expert_dtype(hf_config: Any) -> tuple[str | None, str]:
    """What the config says the routed experts are stored as, and where it says so.

    ``expert_dtype`` when given (``"fp4"`` in DeepSeek's V4 releases, ``"fp8"`` in the Base
    ones); without it, ``quantization_config.quant_method`` (``fp8`` -> ``"fp8"``, as vLLM infers
    it: FP8 repackages drop the key); with neither, ``None`` (unquantized).

    Returns:
        ``(dtype, source)``: ``dtype`` lower-case or ``None``; ``source`` a phrase for messages,
        e.g. ``"expert_dtype 'fp4'"``.
    """
    qc = _quantization_config(hf_config)
    expert_dtype = _expert_dtype(qc, hf_config)
    if expert_dtype is not None:
        return expert_dtype, f"expert_dtype {expert_dtype!r}"
    method = _qc_get(qc, "quant_method") if qc is not None else None
    if method is not None:
        m = str(method).lower()
        dtype = "fp8" if m == "fp8" else "fp4" if m in ("fp4", "nvfp4", "mxfp4") else None
        return dtype, f"no expert_dtype, quantization_config.quant_method {method!r}"
    return None, "no quantization_config"


#: Inputs per ue8m0 scale of an FP4 routed expert (``model_loader.quant.FP4_GROUP``).
FP4_EXPERT_GROUP = 32


def _checked(quant: QuantConfig, hf_config: Any) -> QuantConfig:
    """``quant``, once the routed experts' sizes fit it: FP4 experts need ``hidden_size`` and
    ``moe_intermediate_size`` divisible by :data:`FP4_EXPERT_GROUP` (both are input dims of an
    expert GEMM; DeepSeek's FP4 format has one scale per 32 inputs).

    Raises:
        ValueError: naming the first size that does not divide, before any weight is built (the
            experts' constructor raised it in the model process before).
    """
    if quant.experts == "fp4":
        for name in ("hidden_size", "moe_intermediate_size"):
            size = int(getattr(hf_config, name))
            if size % FP4_EXPERT_GROUP:
                raise ValueError(
                    f"{name}: {size} is not a multiple of {FP4_EXPERT_GROUP}, which FP4 routed experts need "
                    f"(one ue8m0 scale per {FP4_EXPERT_GROUP} inputs); pass --quantization none to keep "
                    "the experts in the model dtype"
                )
    return quant


#: Why an SGLang ``--quantization`` value other than :data:`QUANTIZATION_CHOICES` is refused.
QUANTIZATION_REFUSAL = (
    "sglang-v4 computes DeepSeek's published format ('fp8': FP8 128x128 block-scaled linears and FP4 "
    "routed experts, an unquantized checkpoint quantized on load) or the model dtype ('none'); other "
    "methods (per-channel / per-tensor FP8 such as w8a8_fp8, ModelOpt FP4 / FP8, MXFP4, AWQ, GPTQ, "
    "int8, bitsandbytes, GGUF) use weight formats and kernels it does not have"
)


def check_quantization_flag(flag: str | None) -> None:
    """``--quantization``: ``None`` (the checkpoint's) or one of :data:`QUANTIZATION_CHOICES`.

    Raises:
        ValueError: naming ``quantization`` and saying why (:data:`QUANTIZATION_REFUSAL`), e.g. for
            SGLang's ``w8a8_fp8`` or ``modelopt_fp4``.
    """
    if flag is not None and flag not in QUANTIZATION_CHOICES:
        raise ValueError(
            f"quantization {flag!r} is not supported (expected one of {list(QUANTIZATION_CHOICES)}): "
            f"{QUANTIZATION_REFUSAL}"
        )


def linear_quant(quant: QuantConfig | None) -> str | None:
    """The format of a published-FP8 linear under ``quant`` (``"fp8"`` or ``None``)."""
    return quant.linear if quant is not None else None


def expert_quant(quant: QuantConfig | None) -> str | None:
    """The format of the routed experts under ``quant`` (``"fp4"`` or ``None``)."""
    return quant.experts if quant is not None else None
