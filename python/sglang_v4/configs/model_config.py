"""Model configuration for DeepSeek-V4-architecture checkpoints.

A checkpoint's ``config.json`` comes in two dialects: DeepSeek's own (legacy keys
``compress_ratios``, ``num_hash_layers``, ``qk_rope_head_dim``, a flat YaRN ``rope_scaling``)
and Hugging Face's (``layer_types``, ``mlp_layer_types``, nested ``rope_parameters``). Parsing
is delegated to ``transformers.DeepseekV4Config``, which folds the legacy keys into the HF ones
(``transformers/models/deepseek_v4/configuration_deepseek_v4.py``); :class:`ModelConfig` adds
the derived quantities the runtime needs (per-layer compression ratio, counts of each layer type,
rope parameters per rope type).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

from huggingface_hub.errors import StrictDataclassError
from transformers import DeepseekV4Config

from sglang_v4.configs.rope_check import check_raw_rope_dicts, check_rope_parameters
from sglang_v4.configs.scale_fmt import parse_scale_fmt

logger = logging.getLogger(__name__)

SLIDING = "sliding_attention"
CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"

#: Router score functions the runtime computes (``sgl_kernel_v4.ops.moe_route``).
SCORING_FUNCS = ("sqrtsoftplus", "sigmoid")
#: Activations of the routed / shared experts' SwiGLU (``ops.swiglu_clamped`` / ``ops.fused_moe``
#: apply SiLU; transformers' ``ACT2FN`` maps both names to it).
HIDDEN_ACTS = ("silu", "swish")
#: ``config.json`` keys that give the model's context length, in SGLang's order of preference
#: (``CONTEXT_LENGTH_KEYS`` of its ``get_context_length``): a config that sets one of the others
#: beside ``max_position_embeddings`` (a fine-tune trained to a shorter window, a reference-style
#: ``max_seq_len``) is served with that one (sgl-project/sglang#1799).
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
#: transformers' "no limit" ``model_max_length`` (``VERY_LARGE_INTEGER``, ``int(1e30)``), which
#: tokenizer configs copied into ``config.json`` carry: such a key sets no context length.
NO_LIMIT_LENGTH = int(1e30)
#: Rope types whose inverse frequencies do not depend on the sequence length, so one table serves
#: every position of a paged cache (``dynamic`` and ``longrope`` rescale the whole sequence once it
#: outgrows ``original_max_position_embeddings``; HF recomputes them per forward).
ROPE_TYPES = ("default", "linear", "yarn", "llama3")


def check_supported(hf: DeepseekV4Config) -> None:
    """Refuse a config whose math the runtime does not compute (instead of serving wrong output).

    Fields HF transformers' ``DeepseekV4ForCausalLM`` reads and the runtime follows are checked
    here; those HF itself never reads (``n_shared_experts``, ``norm_topk_prob``,
    ``num_key_value_heads``, ``attention_bias``: HF always builds one shared expert of
    ``moe_intermediate_size``, always renormalises the routing weights and uses one K=V head) are
    ignored by both alike.

    Raises:
        ValueError: naming the field: ``scoring_func`` outside :data:`SCORING_FUNCS`,
            ``hidden_act`` outside :data:`HIDDEN_ACTS`, ``mlp_bias`` true (biased shared-expert
            linears), a ``rope_parameters`` type outside :data:`ROPE_TYPES` or a rope value that
            gives no usable table (:func:`~sglang_v4.configs.rope_check.check_rope_parameters`), ``index_head_dim``
            below the compress rope's dimension (HF's indexer rotates that many channels of each
            indexer head), a non-positive size (``num_hidden_layers`` 0 included: transformers
            builds a model of no decoder layers, which has no KV layout to serve; a context-length
            key of :data:`CONTEXT_LENGTH_KEYS` included),
            ``num_experts_per_tok`` above ``n_routed_experts``, or an ``o_groups`` that does not
            split the attention output (``num_attention_heads x head_dim`` channels per token) into
            equal groups (HF's ``o_a_proj`` reshapes it into ``o_groups`` groups; such a config
            fails there on the first token); a ``rms_norm_eps`` / ``hc_eps`` that is negative or
            not finite (the ``rsqrt(mean(x^2) + eps)`` of every RMSNorm gives NaN), a
            ``routed_scaling_factor`` that is not a finite positive number, or a NaN
            ``swiglu_limit`` (Python's ``json`` reads ``NaN`` / ``Infinity`` literals, which
            some published configs carry).
    """
    if hf.scoring_func not in SCORING_FUNCS:
        raise ValueError(
            f"scoring_func: {hf.scoring_func!r} is not supported; expected one of {SCORING_FUNCS}"
        )
    if hf.hidden_act not in HIDDEN_ACTS:
        raise ValueError(f"hidden_act: {hf.hidden_act!r} is not supported; expected one of {HIDDEN_ACTS}")
    if hf.mlp_bias:
        raise ValueError("mlp_bias: biased shared-expert projections are not supported (expected false)")
    for name in (
        "num_hidden_layers", "vocab_size", "hidden_size", "num_attention_heads", "head_dim", "q_lora_rank", "o_groups",
        "o_lora_rank", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
        "index_n_heads", "index_head_dim", "index_topk", "sliding_window", "hc_mult",
        "hc_sinkhorn_iters", "max_position_embeddings",
    ):  # fmt: skip
        v = getattr(hf, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: must be a positive integer, got {v!r}")
    for name in CONTEXT_LENGTH_KEYS[:-1]:  # the keys transformers keeps as plain attributes
        v = getattr(hf, name, None)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name}: must be a positive integer (the model's context length), got {v!r}")
    for name, low, strict in (
        ("rms_norm_eps", 0.0, False),
        ("hc_eps", 0.0, False),
        ("routed_scaling_factor", 0.0, True),
    ):
        v = getattr(hf, name)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        if not ok or v < low or (strict and v == low):
            bound = f"> {low}" if strict else f">= {low}"
            raise ValueError(f"{name}: must be a finite number {bound}, got {v!r}")
    if isinstance(hf.swiglu_limit, float) and math.isnan(hf.swiglu_limit):
        raise ValueError("swiglu_limit: must be a number (0 or below for no clamp), got nan")
    if (hf.num_attention_heads * hf.head_dim) % hf.o_groups:
        raise ValueError(
            f"o_groups: {hf.o_groups} does not divide the attention output (num_attention_heads x "
            f"head_dim = {hf.num_attention_heads} x {hf.head_dim} channels) into equal groups"
        )
    if hf.num_experts_per_tok > hf.n_routed_experts:
        raise ValueError(
            f"num_experts_per_tok: {hf.num_experts_per_tok} is more than n_routed_experts ({hf.n_routed_experts})"
        )
    for kind, t in (("csa", CSA), ("hca", HCA)):
        r = hf.compress_rates.get(t)
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"compress_rates: the {kind} rate ({t!r}) must be a positive integer, got {r!r}")
    for kind in ("main", "compress"):
        params = hf.rope_parameters[kind]
        theta_field = "rope_theta" if kind == "main" else "compress_rope_theta"
        check_rope_parameters(params, f"rope_parameters[{kind}]", theta_field)
        rope_type = params.get("rope_type", "default")
        if rope_type not in ROPE_TYPES:
            raise ValueError(
                f"rope_parameters: {kind} rope_type {rope_type!r} is not supported; expected one of {ROPE_TYPES}"
            )
        dim = int(hf.head_dim * params.get("partial_rotary_factor", 1.0))
        if dim % 2 or not 0 < dim <= hf.head_dim:
            raise ValueError(
                f"partial_rotary_factor: the {kind} rope dimension head_dim x factor = {dim} must be "
                f"even and in (0, head_dim = {hf.head_dim}]"
            )
        if kind == "compress" and CSA in hf.layer_types and dim > hf.index_head_dim:
            raise ValueError(
                f"index_head_dim: {hf.index_head_dim} is less than the compress rope dimension {dim} "
                "(the indexer rotates that many channels of each of its heads)"
            )


#: ``compress_ratios`` entries and the layer type each stands for (0: sliding window only); the
#: legacy list transformers' ``DeepseekV4Config`` folds into ``layer_types``.
COMPRESS_RATIO_TYPES = {0: SLIDING, 4: CSA, 128: HCA}
#: Keys of configs whose architecture is not DeepSeek-V4's (the DeepSeek-V4.1 layout: layers that
#: reuse another layer's compressed KV / indexer, Engram memory layers), which
#: ``DeepseekV4Config`` would silently drop; a nested ``text_config`` (a multimodal or V4.1
#: wrapper) whose fields it would not read either, leaving its defaults in their place.
FOREIGN_ARCH_KEYS = (
    "text_config",
    "kv_source_layer_ids",
    "index_source_layer_ids",
    "candidate_source_layer_id",
    "engram_layer_ids",
)


def _float_fields() -> frozenset[str]:
    """``DeepseekV4Config`` fields annotated ``float`` (or ``float | None``) only, which its strict
    validation refuses as JSON integers (huggingface_hub's ``@strict`` does not widen ``int``)."""
    out = set()
    for name, f in DeepseekV4Config.__dataclass_fields__.items():
        args = set(getattr(f.type, "__args__", (f.type,)))
        if float in args and int not in args:
            out.add(name)
    return frozenset(out)


_FLOAT_FIELDS = _float_fields()


def check_raw_config(raw: dict[str, Any]) -> None:
    """Refuse a ``config.json`` dict whose fields transformers would drop or fail on obscurely.

    Raises:
        ValueError: naming the field: a key of :data:`FOREIGN_ARCH_KEYS` (another architecture's
            config, which ``DeepseekV4Config`` would replace by its defaults), or a
            ``compress_ratios`` that is not a list of 0 / 4 / 128 (transformers raises a bare
            ``KeyError`` on another value) with at least ``num_hidden_layers`` entries (the
            trailing ones are the MTP layers').
    """
    for key in FOREIGN_ARCH_KEYS:
        if raw.get(key) is not None:
            raise ValueError(
                f"{key}: not a DeepSeek-V4 config field (a DeepSeek-V4.1 or multimodal layout); "
                "transformers' DeepseekV4Config would ignore it and build its default model instead"
            )
    ratios = raw.get("compress_ratios")
    if ratios is None or raw.get("layer_types") is not None:
        return  # transformers reads ``layer_types`` first and then ignores ``compress_ratios``
    if not isinstance(ratios, list):
        raise ValueError(f"compress_ratios: expected a list of per-layer ratios, got {ratios!r}")
    for i, r in enumerate(ratios):
        if isinstance(r, bool) or r not in COMPRESS_RATIO_TYPES:
            raise ValueError(
                f"compress_ratios[{i}]: {r!r} is not a DeepSeek-V4 compression ratio (0 = sliding window "
                f"only, 4 = CSA, 128 = HCA)"
            )
    n = raw.get("num_hidden_layers", raw.get("n_layers"))
    if isinstance(n, int) and not isinstance(n, bool) and len(ratios) < n:
        raise ValueError(
            f"compress_ratios: {len(ratios)} entries for num_hidden_layers = {n} (expected one per "
            "layer, then one per MTP layer)"
        )


def _coerce_json_numbers(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with JSON integers in float-typed fields as floats (``"routed_scaling_factor": 2``
    means 2.0; JSON does not tell the two apart, and transformers widened such annotations when
    configs on the Hub wrote them so, e.g. transformers#44877)."""
    return {
        k: float(v) if k in _FLOAT_FIELDS and isinstance(v, int) and not isinstance(v, bool) else v
        for k, v in raw.items()
    }


#: YaRN fields of DeepSeek's reference inference config -> the keys of the official ``rope_scaling``.
_REFERENCE_YARN_KEYS = {
    "rope_factor": "factor",
    "original_seq_len": "original_max_position_embeddings",
    "beta_fast": "beta_fast",
    "beta_slow": "beta_slow",
    "mscale": "mscale",
}


def _normalize_raw_config(raw: dict[str, Any]) -> dict[str, Any]:
    """Map DeepSeek's official config keys onto the names ``DeepseekV4Config`` accepts.

    The official release ships ``rope_scaling`` (YaRN) where HF expects ``rope_parameters``,
    and DeepSeek-style names for a few sizes (``dim``, ``n_layers``, ``n_heads``...); DeepSeek's
    reference inference code also names ``norm_eps``, ``rope_head_dim`` and a flat YaRN
    (``rope_factor``, ``original_seq_len``, ``beta_fast``, ``beta_slow``, ``mscale``), which
    become ``rms_norm_eps``, ``qk_rope_head_dim`` and ``rope_scaling`` (unless the file has one). Keys HF
    already knows are passed through. Unknown keys are kept; ``DeepseekV4Config`` ignores
    what it does not use. JSON integers in float fields become floats (:func:`_coerce_json_numbers`).
    """
    raw = dict(raw)
    yarn = {k: raw.pop(k) for k in _REFERENCE_YARN_KEYS if k in raw}
    if yarn and "rope_scaling" not in raw and "rope_parameters" not in raw:
        # DeepSeek's reference inference code keeps YaRN flat (``rope_factor``, ``original_seq_len``,
        # ``beta_fast`` / ``beta_slow``, ``mscale``): the official config's ``rope_scaling`` form
        scaling: dict[str, Any] = {"type": "yarn"}
        for k, v in yarn.items():
            scaling[_REFERENCE_YARN_KEYS[k]] = v
        raw["rope_scaling"] = scaling
    if "rope_scaling" in raw and "rope_parameters" not in raw:
        scaling = raw.pop("rope_scaling")
        if isinstance(scaling, dict):
            scaling = dict(scaling)
            if "type" in scaling and "rope_type" not in scaling:
                scaling["rope_type"] = scaling.pop("type")
            raw["rope_parameters"] = scaling
    aliases = {
        "dim": "hidden_size",
        "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads",
        "moe_inter_dim": "moe_intermediate_size",
        "n_activated_experts": "num_experts_per_tok",
        "route_scale": "routed_scaling_factor",
        "window_size": "sliding_window",
        "score_func": "scoring_func",
        "index_head_dim": "index_head_dim",
        "n_hash_layers": "num_hash_layers",
        "norm_eps": "rms_norm_eps",
        "rope_head_dim": "qk_rope_head_dim",
    }
    for old, new in aliases.items():
        if old in raw and new not in raw:
            raw[new] = raw.pop(old)
    for k in ("architectures", "auto_map", "torch_dtype", "transformers_version", "dtype"):
        raw.pop(k, None)
    return _coerce_json_numbers(raw)


def generation_eos_token_ids(model_path: str) -> list[int]:
    """``eos_token_id`` of ``<model_path>/generation_config.json`` as a list (an int there becomes a
    one-element list); empty when the file or the key is absent, or the file is not a JSON object
    of integer ids (logged: the file is advice, as transformers' ``GenerationConfig`` treats it).
    A leading UTF-8 byte-order mark is skipped, as for ``config.json``."""
    path = os.path.join(model_path, "generation_config.json")
    if not os.path.isfile(path):
        return []
    try:
        with open(path, encoding="utf-8-sig") as f:
            eos = json.load(f).get("eos_token_id")
    except (OSError, ValueError, AttributeError) as e:
        logger.warning("Ignoring %s (%s)", path, e)
        return []
    ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        logger.warning("Ignoring eos_token_id %r of %s: not token ids", eos, path)
        return []
    return list(ids)


#: Keys that each give a config's whole rope scaling, in one dialect or another: an override of
#: one replaces the file's others (transformers reads ``rope_scaling`` first, so a
#: ``rope_parameters`` override of an official file was dropped).
_ROPE_SCALING_KEYS = ("rope_scaling", "rope_parameters", "compress_rope_parameters", *_REFERENCE_YARN_KEYS)
#: Scalar rope keys -> (the key inside a rope's parameters, the ropes of a nested
#: ``rope_parameters`` that hold a copy of it, which transformers reads instead of the scalar).
_ROPE_SCALARS = {
    "rope_theta": ("rope_theta", ("main",)),
    "compress_rope_theta": ("rope_theta", ("compress",)),
    "partial_rotary_factor": ("partial_rotary_factor", ("main", "compress")),
}


def _override_rope(raw: dict[str, Any], overrides: dict[str, Any], out: dict[str, Any]) -> None:
    """Make the rope keys of ``overrides`` win over the file's other spellings of them, in ``out``.

    An override of a :data:`_ROPE_SCALING_KEYS` key drops the file's other such keys. An override
    of a :data:`_ROPE_SCALARS` scalar is also written into the file's copies of it: ``main`` /
    ``compress`` of a nested ``rope_parameters`` (transformers' layout), else a flat
    ``rope_parameters`` (the main rope's) and ``compress_rope_parameters`` (the compress rope's).
    Before, transformers read the file's copies and the override was silently lost.
    """
    if any(k in overrides for k in _ROPE_SCALING_KEYS):
        for k in _ROPE_SCALING_KEYS:
            if k not in overrides:
                out.pop(k, None)
        return
    params = (
        copy.deepcopy(raw.get("rope_parameters")) if isinstance(raw.get("rope_parameters"), dict) else None
    )
    cparams = raw.get("compress_rope_parameters")
    cparams = copy.deepcopy(cparams) if isinstance(cparams, dict) else None
    nested = params is not None and any(isinstance(params.get(k), dict) for k in ("main", "compress"))
    for key, (inner, kinds) in _ROPE_SCALARS.items():
        if key not in overrides:
            continue
        value = overrides[key]
        if nested:
            assert params is not None
            for kind in kinds:
                if isinstance(params.get(kind), dict):
                    params[kind][inner] = value
            continue
        if params is not None and "main" in kinds:
            params[inner] = value
        if cparams is not None and "compress" in kinds:
            cparams[inner] = value
    if params is not None:
        out["rope_parameters"] = params
    if cparams is not None:
        out["compress_rope_parameters"] = cparams


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a ``config.json`` dict, either dialect) with ``overrides`` applied; see
    :meth:`ModelConfig.from_pretrained`. ``raw`` is not modified."""
    out = {**raw, **overrides}
    _override_rope(raw, overrides, out)
    qc = raw.get("quantization_config")
    if "expert_dtype" in overrides and "quantization_config" not in overrides and isinstance(qc, dict):
        # the file's copy inside quantization_config (DeepSeek-V4.1's place) is the one read
        out["quantization_config"] = {**qc, "expert_dtype": overrides["expert_dtype"]}
    n = overrides.get("num_hidden_layers", overrides.get("n_layers"))
    if n is None:
        return out
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(
            f"json_model_override_args: num_hidden_layers must be a positive integer (got {n!r})"
        )
    n_file = raw.get("num_hidden_layers", raw.get("n_layers"))
    for key in ("layer_types", "mlp_layer_types"):
        if key not in overrides and isinstance(raw.get(key), list) and len(raw[key]) > n:
            out[key] = raw[key][:n]
    ratios = raw.get("compress_ratios")
    if "compress_ratios" not in overrides and isinstance(ratios, list) and isinstance(n_file, int):
        mtp = ratios[n_file:]  # the trailing entries of the MTP layers
        if len(ratios) > n:
            out["compress_ratios"] = ratios[:n] + mtp
    if isinstance(raw.get("num_hash_layers"), int) and "num_hash_layers" not in overrides:
        out["num_hash_layers"] = min(raw["num_hash_layers"], n)
    return out


@dataclass
class ModelConfig:
    """Runtime view of a DeepSeek-V4 config.

    Attributes:
        hf: the parsed ``transformers.DeepseekV4Config`` (the oracle's own config object).
        compress_ratios: per layer, 0 (sliding only), 4 (CSA) or 128 (HCA) — taken from
            ``hf.layer_types`` and ``hf.compress_rates``.
        csa_layers / hca_layers / sliding_layers: layer indices of each attention type.
        generation_eos_token_ids: ``eos_token_id`` of the model directory's
            ``generation_config.json`` (an int or a list there; empty without the file), see
            :attr:`eos_token_ids`.
        scale_fmt: ``quantization_config.scale_fmt``: ``"ue8m0"`` (power-of-two FP8 scales) or
            ``None`` (exact ``amax / 448`` scales, also for transformers' ``"float"`` and for no
            ``quantization_config``); another value is refused (:mod:`sglang_v4.configs.scale_fmt`).
    """

    hf: DeepseekV4Config
    compress_ratios: list[int] = field(default_factory=list)
    csa_layers: list[int] = field(default_factory=list)
    hca_layers: list[int] = field(default_factory=list)
    sliding_layers: list[int] = field(default_factory=list)
    generation_eos_token_ids: list[int] = field(default_factory=list)
    scale_fmt: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        check_supported(self.hf)
        self.scale_fmt = parse_scale_fmt(getattr(self.hf, "quantization_config", None))
        rates = self.hf.compress_rates
        self.compress_ratios = []
        for i, t in enumerate(self.hf.layer_types):
            if t == SLIDING:
                self.compress_ratios.append(0)
                self.sliding_layers.append(i)
            elif t == CSA:
                self.compress_ratios.append(int(rates[CSA]))
                self.csa_layers.append(i)
            elif t == HCA:
                self.compress_ratios.append(int(rates[HCA]))
                self.hca_layers.append(i)
            else:  # pragma: no cover - DeepseekV4Config validates layer types
                raise ValueError(f"layer_types[{i}]: unknown layer type {t!r}")

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        """Build from a ``config.json`` dict in either dialect.

        Raises:
            ValueError: if a field is invalid (``DeepseekV4Config``'s own validation,
                :func:`check_raw_config`) or describes math the runtime does not compute
                (:func:`check_supported`, a ``quantization_config.scale_fmt`` other than ``"ue8m0"``,
                ``"float"`` or absent / null: :func:`~sglang_v4.configs.scale_fmt.parse_scale_fmt`);
                the message names it.
        """
        check_raw_config(raw)
        raw = _normalize_raw_config(raw)
        check_raw_rope_dicts(raw)  # before transformers' validators divide by / compare its values
        mt = raw.pop("model_type", "deepseek_v4")
        if mt not in ("deepseek_v4", "deepseek_v4_flash"):
            raise ValueError(f"model_type: expected 'deepseek_v4', got {mt!r}")
        try:
            hf = DeepseekV4Config(**raw)
        except (TypeError, ValueError, StrictDataclassError) as e:  # a field of the wrong type / value
            raise ValueError(f"config.json: {' '.join(str(e).split())}") from e
        except KeyError as e:  # e.g. an activation name transformers' ACT2FN does not know
            raise ValueError(f"config.json: unknown value {e}") from e
        return cls(hf=hf)

    @classmethod
    def from_pretrained(cls, model_path: str, overrides: dict[str, Any] | None = None) -> ModelConfig:
        """Read ``<model_path>/config.json`` (UTF-8; a leading byte-order mark, which Windows editors
        write, is skipped: RFC 8259 section 8.1 lets a parser ignore it).

        Args:
            model_path: the model directory.
            overrides: keys that replace those of the file before parsing (SGLang's
                ``--json-model-override-args``), e.g. ``{"num_hidden_layers": 2}``. A per-layer list
                of the file (``compress_ratios``, ``layer_types``, ``mlp_layer_types``) longer than
                an overridden ``num_hidden_layers`` is cut to its first layers (plus, for
                ``compress_ratios``, the file's trailing MTP entries), so a reduced-depth model keeps
                the published layer schedule; an override of the list itself wins. A rope key
                overridden wins over the file's other spellings of it (``rope_parameters`` over a
                file's ``rope_scaling``, ``rope_theta`` over the copy in a file's nested
                ``rope_parameters``; :func:`_override_rope`).

        Raises:
            FileNotFoundError: if ``config.json`` does not exist.
            ValueError: if it is not JSON text (the message names the file), does not describe a
                DeepSeek-V4 model, or an override key makes it invalid (the message names the field).
        """
        path = os.path.join(model_path, "config.json")
        with open(path, encoding="utf-8-sig") as f:
            try:
                raw = json.load(f)
            except ValueError as e:  # not JSON (a trailing comma), or not UTF-8 text
                raise ValueError(f"{path}: not a readable JSON object ({e})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"config.json: expected a JSON object, got {type(raw).__name__}")
        check_raw_config({**raw, **(overrides or {})})  # before an override cuts the per-layer lists
        mc = cls.from_dict(apply_overrides(raw, overrides or {}))
        mc.generation_eos_token_ids = generation_eos_token_ids(model_path)
        return mc

    # ---- convenient views -----------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """Decoder layers (``num_hidden_layers``)."""
        return int(self.hf.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        """Model width ``D`` (``hidden_size``)."""
        return int(self.hf.hidden_size)

    @property
    def head_dim(self) -> int:
        """Attention head dimension (``head_dim``), RoPE part included."""
        return int(self.hf.head_dim)

    @property
    def rope_dim(self) -> int:
        """Rotary part of a head (``qk_rope_head_dim``)."""
        return int(self.hf.qk_rope_head_dim)

    @property
    def index_head_dim(self) -> int:
        """Head dimension of the CSA indexer's queries and keys (``index_head_dim``)."""
        return int(self.hf.index_head_dim)

    @property
    def sliding_window(self) -> int:
        """Tokens of the sliding-window attention every layer keeps uncompressed (``sliding_window``)."""
        return int(self.hf.sliding_window)

    @property
    def vocab_size(self) -> int:
        """Vocabulary size (``vocab_size``): rows of the embedding and of the LM head."""
        return int(self.hf.vocab_size)

    @property
    def csa_ratio(self) -> int:
        """Compression ratio ``m`` of the CSA layers (tokens per compressed entry; 4 in DeepSeek-V4)."""
        return int(self.hf.compress_rates[CSA])

    @property
    def hca_ratio(self) -> int:
        """Compression ratio ``m`` of the HCA layers (tokens per compressed entry; 128 in DeepSeek-V4)."""
        return int(self.hf.compress_rates[HCA])

    @property
    def context_length_key(self) -> str:
        """The ``config.json`` key :attr:`context_length` comes from: the first of
        :data:`CONTEXT_LENGTH_KEYS` the config sets to a length (``max_position_embeddings`` when
        it sets none of the others, or sets them to transformers' no-limit :data:`NO_LIMIT_LENGTH`)."""
        return next(
            k
            for k in CONTEXT_LENGTH_KEYS
            if k == CONTEXT_LENGTH_KEYS[-1] or getattr(self.hf, k, None) not in (None, NO_LIMIT_LENGTH)
        )

    @property
    def context_length(self) -> int:
        """The model's context length in tokens: the value of :attr:`context_length_key`
        (SGLang's ``get_context_length``; ``max_position_embeddings`` for the published configs).
        No rope factor scales it: SGLang multiplies by a flat ``rope_scaling``'s ``factor`` only
        without ``original_max_position_embeddings``, and DeepSeek-V4's ropes are nested per layer
        kind (``main`` / ``compress``), which gives it none to apply."""
        return int(getattr(self.hf, self.context_length_key))

    @property
    def eos_token_ids(self) -> list[int]:
        """The ids that end a generation: ``config.json``'s ``eos_token_id`` (an int or a list)
        followed by those of ``generation_config.json`` not already in it (SGLang's
        ``ModelConfig`` stops on the union of both)."""
        eos = self.hf.eos_token_id
        ids = [] if eos is None else [int(e) for e in eos] if isinstance(eos, (list, tuple)) else [int(eos)]
        return list(dict.fromkeys(ids + self.generation_eos_token_ids))

    def to_dict(self) -> dict[str, Any]:
        """The HF-dialect config dict (what ``config.json`` of an HF-format checkpoint holds)."""
        return self.hf.to_dict()
