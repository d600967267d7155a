"""Named DeepSeek-V4 model configurations (``config.json`` dicts).

Every preset is returned in Hugging Face's dialect (``model_type: deepseek_v4``, ``layer_types``,
``mlp_layer_types``, nested ``rope_parameters``), i.e. what ``transformers.DeepseekV4Config(**d)``
accepts and what an HF-format checkpoint's ``config.json`` holds. :func:`to_official_config`
converts a preset to DeepSeek's own dialect (legacy ``compress_ratios``, ``num_hash_layers``,
``qk_rope_head_dim``, flat YaRN ``rope_scaling``, ``quantization_config``).

Presets:

* ``tiny``: a 4-layer model with the real V4 vocabulary (129280) that has every component: one
  sliding-only layer, two CSA layers, one HCA layer, one hash-routed MoE layer, YaRN on the
  compress rope, and ``index_topk`` (16) smaller than the number of compressed entries after a
  few hundred tokens. Used by the CPU tests and as the embedded default model.
* ``flash-8l-32e``: V4-Flash per-layer shapes (hidden 4096, 64 heads x 512, ...), 8 layers with
  Flash's own first 8 ``compress_ratios`` ``[0, 0, 4, 128, 4, 128, 4, 128]``, 32 routed experts,
  one hash layer. For GPU benchmarks.
* ``flash-43l``: V4-Flash with all 43 layers and 160 routed experts, the largest single-H200
  Flash in the published FP8/FP4 weight format (its ``quantization_config`` says so; arithmetic
  in :func:`_flash_43l`). For GPU benchmarks with ``--load-format dummy``.
* ``flash`` / ``pro``: the published DeepSeek-V4-Flash (43 layers, 256 experts) and
  DeepSeek-V4-Pro (61 layers, 384 experts) configurations (``flash`` with its FP8/FP4
  ``quantization_config``). Used by the memory planner; never instantiated as weights (``flash``
  on one GPU fails up front: its weights need 145.3 GiB). Their layer schedules are the published ``compress_ratios``
  (``deepseek-ai/DeepSeek-V4-Flash`` / ``-Pro`` ``config.json``): Flash ``[0, 0]`` then
  ``4, 128`` alternating from layer 2 (layer 42 is CSA); Pro ``[128, 128]`` then ``4, 128``
  alternating from layer 2 (layer 60 is CSA), i.e. 31 HCA + 30 CSA layers. The published files
  carry one extra trailing ``0`` for the MTP layer, which :func:`to_official_config` reproduces.
"""

from __future__ import annotations

import copy
import math
from typing import Any

SLIDING = "sliding_attention"
CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"
_RATIO_OF = {SLIDING: 0, CSA: 4, HCA: 128}

V4_VOCAB_SIZE = 129280

#: DeepSeek-V4's published ``quantization_config`` (``deepseek-ai/DeepSeek-V4-Flash`` config.json):
#: FP8 e4m3 linears with ue8m0 scales per 128x128 block, dynamic activation scaling.
FP8_QUANTIZATION_CONFIG: dict[str, Any] = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128],
}


def with_fp8_quantization(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` plus V4's published weight format: :data:`FP8_QUANTIZATION_CONFIG` and FP4 routed
    experts (``expert_dtype: fp4``, which HF folds into the ``quantization_config``)."""
    d["quantization_config"] = copy.deepcopy(FP8_QUANTIZATION_CONFIG)
    d["expert_dtype"] = "fp4"
    return d


def without_quantization(d: dict[str, Any]) -> dict[str, Any]:
    """``d`` without ``quantization_config`` / ``expert_dtype`` (for unquantized weights)."""
    d.pop("quantization_config", None)
    d.pop("expert_dtype", None)
    return d


def _rope(partial: float, theta: float, compress_theta: float, yarn: dict[str, Any] | None) -> dict:
    """Nested ``rope_parameters`` as ``DeepseekV4Config.__post_init__`` builds them.

    The compress rope gets ``attention_factor = 1.0`` for YaRN, as HF injects for the flat form
    (the V4 reference does not multiply cos/sin by YaRN's mscale; see
    ``configuration_deepseek_v4.py``).
    """
    main = {"rope_type": "default", "rope_theta": float(theta), "partial_rotary_factor": partial}
    compress: dict[str, Any] = {"rope_theta": float(compress_theta), "partial_rotary_factor": partial}
    if yarn is not None:
        compress.update({"rope_type": "yarn", **yarn, "attention_factor": 1.0})
    else:
        compress["rope_type"] = "default"
    return {"main": main, "compress": compress}


def _base(**overrides: Any) -> dict[str, Any]:
    """Keys shared by every preset (V4-Flash values), then ``overrides``."""
    d: dict[str, Any] = {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "vocab_size": V4_VOCAB_SIZE,
        "num_key_value_heads": 1,
        "n_shared_experts": 1,
        "scoring_func": "sqrtsoftplus",
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.5,
        "swiglu_limit": 10.0,
        "sliding_window": 128,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "hc_eps": 1e-6,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_theta": 10000.0,
        "compress_rope_theta": 160000.0,
        "num_nextn_predict_layers": 1,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "initializer_range": 0.02,
        "dtype": "bfloat16",
    }
    d.update(overrides)
    return d


def _alternating(prefix: list[str], n_layers: int) -> list[str]:
    """``prefix`` then CSA / HCA alternating (CSA first), ``n_layers`` entries in all."""
    rest = [CSA if i % 2 == 0 else HCA for i in range(n_layers - len(prefix))]
    return list(prefix) + rest


def _hash_schedule(n_hash: int, n_layers: int) -> list[str]:
    return ["hash_moe"] * n_hash + ["moe"] * (n_layers - n_hash)


def _tiny() -> dict[str, Any]:
    return _base(
        hidden_size=128,
        num_hidden_layers=4,
        layer_types=[SLIDING, CSA, HCA, CSA],
        mlp_layer_types=_hash_schedule(1, 4),
        num_attention_heads=4,
        head_dim=128,
        partial_rotary_factor=0.5,
        q_lora_rank=64,
        o_groups=2,
        o_lora_rank=32,
        # 16, not 4: with 4 indexer heads ~6% of scores are exactly 0 (every ReLU off), and queries
        # then hit ties at the top-k boundary, where HF's and any other top-k may pick differently.
        index_n_heads=16,
        # 128, not 32: HF's indexer applies the full 64-dim rope to its heads, so index_head_dim
        # must be >= qk_rope_head_dim (as in V4-Flash: 128 = 64 nope + 64 rope).
        index_head_dim=128,
        index_topk=16,
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        max_position_embeddings=65536,
        # YaRN factor 16 over 4096 original positions = max_position_embeddings, the same ratio as
        # V4-Flash (16 x 65536 = 1M); transformers warns when factor and that ratio disagree.
        rope_parameters=_rope(
            0.5,
            10000.0,
            160000.0,
            {"factor": 16.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0},
        ),
        dtype="float32",
    )


_FLASH_YARN = {"factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32.0, "beta_slow": 1.0}


def _flash_shapes(n_layers: int, layer_types: list[str], n_hash: int, n_experts: int) -> dict[str, Any]:
    return _base(
        hidden_size=4096,
        num_hidden_layers=n_layers,
        layer_types=layer_types,
        mlp_layer_types=_hash_schedule(n_hash, n_layers),
        num_attention_heads=64,
        head_dim=512,
        partial_rotary_factor=64 / 512,
        q_lora_rank=1024,
        o_groups=8,
        o_lora_rank=1024,
        index_n_heads=64,
        index_head_dim=128,
        index_topk=512,
        n_routed_experts=n_experts,
        num_experts_per_tok=6,
        moe_intermediate_size=2048,
        max_position_embeddings=1048576,
        rope_parameters=_rope(64 / 512, 10000.0, 160000.0, dict(_FLASH_YARN)),
    )


def _flash_8l_32e() -> dict[str, Any]:
    return _flash_shapes(8, _alternating([SLIDING, SLIDING], 8), 1, 32)


def _flash() -> dict[str, Any]:
    return with_fp8_quantization(_flash_shapes(43, _alternating([SLIDING, SLIDING], 43), 3, 256))


def _flash_43l() -> dict[str, Any]:
    """V4-Flash, all 43 layers, every shape as published, FP8/FP4 weights, 160 routed experts.

    160 is the largest multiple of 32 whose weights leave at least 16 GiB of one H200 for the KV
    pool and the forward's workspace, counting 141 GiB x 0.9 = 126.9 GiB usable. Weight bytes,
    exact (``model_loader.builder.model_weight_bytes``, bf16 activations):

    * routed experts, FP4: per expert ``3 x 2048 x 4096 = 25,165,824`` values at 0.5 B plus one
      ue8m0 byte per 32 = 12,582,912 + 786,432 = 13,369,344 B; x 160 experts x 43 layers =
      91,981,086,720 B;
    * FP8 linears (q_a 1024x4096, q_b 32768x1024, kv 512x4096, o_a 8192x4096, o_b 4096x8192,
      shared expert 3 x 2048x4096 = 132,120,576 B per layer; the 21 CSA layers' indexer q_b
      8192x1024 adds 8,388,608 B each) = 5,857,345,536 B, plus float32 128x128 block scales
      1,430,016 B: 5,858,775,552 B;
    * bf16 (embedding and LM head 2 x 129280 x 4096, compressor projections, indexer
      weights_proj, router 160 x 4096): 2,793,668,608 B;
    * fp32 (mHC, norms, sinks, position biases, router bias): 143,031,644 B; int64 ``tid2eid``
      (3 hash layers x 129280 x 6): 18,616,320 B.

    Total 100,795,178,844 B = 93.87 GiB, leaving 33.03 GiB. With 192 experts: 119,202,673,500 B
    = 111.02 GiB, leaving 15.88 GiB (< 16). (The published 256 experts: 145.30 GiB.)
    """
    return with_fp8_quantization(_flash_shapes(43, _alternating([SLIDING, SLIDING], 43), 3, 160))


def _pro() -> dict[str, Any]:
    return _base(
        hidden_size=7168,
        num_hidden_layers=61,
        layer_types=_alternating([HCA, HCA], 61),
        mlp_layer_types=_hash_schedule(3, 61),
        num_attention_heads=128,
        head_dim=512,
        partial_rotary_factor=64 / 512,
        q_lora_rank=1536,
        o_groups=16,
        o_lora_rank=1024,
        index_n_heads=64,
        index_head_dim=128,
        index_topk=1024,
        n_routed_experts=384,
        num_experts_per_tok=6,
        moe_intermediate_size=3072,
        routed_scaling_factor=2.5,
        max_position_embeddings=1048576,
        rope_parameters=_rope(64 / 512, 10000.0, 160000.0, dict(_FLASH_YARN)),
    )


_PRESETS = {
    "tiny": _tiny,
    "flash-8l-32e": _flash_8l_32e,
    "flash-43l": _flash_43l,
    "flash": _flash,
    "pro": _pro,
}


def list_presets() -> list[str]:
    """Names accepted by :func:`get_preset`."""
    return list(_PRESETS)


def get_preset(name: str) -> dict[str, Any]:
    """The HF-dialect ``config.json`` dict of preset ``name`` (a fresh copy).

    Raises:
        ValueError: if ``name`` is not one of :func:`list_presets`.
    """
    if name not in _PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; choose one of {list_presets()}")
    return copy.deepcopy(_PRESETS[name]())


#: Rope types the official dialect carries in its flat ``rope_scaling`` (the compress rope's; the
#: runtime's ``model_config.ROPE_TYPES``: frequencies that do not depend on the sequence length).
OFFICIAL_ROPE_TYPES = ("default", "linear", "yarn", "llama3")
#: Keys of a rope's parameters that the official dialect keeps outside ``rope_scaling``.
_ROPE_OUTSIDE_SCALING = ("rope_type", "type", "rope_theta", "partial_rotary_factor")


def _official_rope(d: dict[str, Any]) -> None:
    """Replace ``d``'s ``rope_parameters`` (HF dialect) by the official rope keys, in place.

    Mapping (``transformers.DeepseekV4Config.__post_init__``): the main rope (sliding-window
    attention) is always plain RoPE at ``rope_theta``; a flat ``rope_scaling`` (official) or flat
    ``rope_parameters`` scales the compress rope only, at ``compress_rope_theta``. So

    * no ``rope_parameters``: ``d``'s ``rope_theta`` / ``compress_rope_theta`` /
      ``partial_rotary_factor`` stay as they are, no ``rope_scaling``;
    * flat (``{"rope_type": t, ...}``): ``rope_scaling = {"type": t, ...}`` with the same
      parameters (``rope_theta`` / ``partial_rotary_factor`` inside it are not read by HF and
      dropped); none for ``default``;
    * nested (``{"main": ..., "compress": ...}``): ``rope_theta`` / ``compress_rope_theta`` /
      ``partial_rotary_factor`` from them, ``rope_scaling`` from the compress rope as above.
      YaRN's ``attention_factor`` of 1.0 (which HF injects for a flat YaRN) is dropped; any
      other value is kept; a nested YaRN without one gets the value HF derives for it
      (:func:`_yarn_attention_factor`), since the flat form read back would get 1.0.

    ``partial_rotary_factor`` becomes ``qk_rope_head_dim = int(head_dim x factor)`` (transformers'
    truncation; ``None`` is no factor).

    Raises:
        ValueError: naming the field and its value: a rope type outside
            :data:`OFFICIAL_ROPE_TYPES` (``dynamic`` and ``longrope`` depend on the sequence
            length), a nested main rope that is not ``default`` (the official dialect has no
            field for it), main and compress ropes of different ``partial_rotary_factor``, or a
            ``rope_parameters`` that is not a dict.
    """
    rp = d.pop("rope_parameters", None)
    if rp is not None and not isinstance(rp, dict):
        raise ValueError(f"rope_parameters: expected a dict, got {rp!r}")
    compress: dict[str, Any] | None = rp
    if rp and isinstance(rp.get("main"), dict) and isinstance(rp.get("compress"), dict):
        main, compress = rp["main"], rp["compress"]
        main_type = main.get("rope_type", main.get("type", "default"))
        if main_type != "default":
            raise ValueError(
                f"rope_parameters.main.rope_type: {main_type!r} cannot be written in the official dialect "
                "(its rope_scaling applies to the compress rope only); expected 'default'"
            )
        given = {
            "partial_rotary_factor": d.get("partial_rotary_factor"),
            "rope_parameters.main.partial_rotary_factor": main.get("partial_rotary_factor"),
            "rope_parameters.compress.partial_rotary_factor": compress.get("partial_rotary_factor"),
        }
        partials = {v for v in given.values() if v is not None}
        if len(partials) > 1:
            raise ValueError(
                f"partial_rotary_factor: the official dialect has one qk_rope_head_dim, got {given}"
            )
        d["rope_theta"] = main["rope_theta"]
        d["compress_rope_theta"] = compress["rope_theta"]
        if partials:
            d["partial_rotary_factor"] = partials.pop()
    partial = d.pop("partial_rotary_factor", None)
    if partial is not None:  # None: transformers' default applies (as for an absent key)
        d["qk_rope_head_dim"] = int(d["head_dim"] * partial)  # DeepseekV4Config's own rounding
    if not compress:
        return
    field = "rope_parameters.compress" if compress is not rp else "rope_parameters"
    rope_type = compress.get("rope_type", compress.get("type", "default"))
    if rope_type not in OFFICIAL_ROPE_TYPES:
        raise ValueError(
            f"{field}.rope_type: {rope_type!r} is not supported; expected one of {OFFICIAL_ROPE_TYPES}"
        )
    if rope_type == "default":
        return
    scaling = {"type": rope_type}
    scaling.update({k: v for k, v in compress.items() if k not in _ROPE_OUTSIDE_SCALING})
    if rope_type == "yarn":
        if compress is not rp and scaling.get("attention_factor") is None and scaling.get("factor"):
            # a nested YaRN without one gets the factor transformers derives from ``factor`` /
            # ``mscale`` / ``mscale_all_dim``; a flat one (the official form) would get 1.0 instead
            scaling["attention_factor"] = _yarn_attention_factor(scaling)
        if scaling.get("attention_factor") == 1.0:
            del scaling["attention_factor"]
    d["rope_scaling"] = scaling


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention scale ``0.1 * mscale * ln(scale) + 1`` (1 for ``scale <= 1``; Peng et al.,
    "YaRN", as transformers' ``yarn_get_mscale``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_attention_factor(scaling: dict[str, Any]) -> float:
    """The ``attention_factor`` transformers' ``_compute_yarn_parameters`` derives for a YaRN rope
    whose parameters (``scaling``, with a ``factor``) have none: ``mscale(factor, mscale) /
    mscale(factor, mscale_all_dim)`` when both are set and non-zero, else ``mscale(factor)``."""
    factor = float(scaling["factor"])
    m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if m and m_all:
        return float(_yarn_mscale(factor, m) / _yarn_mscale(factor, m_all))
    return float(_yarn_mscale(factor))


def to_official_config(hf_config: dict[str, Any], fp8: bool = False) -> dict[str, Any]:
    """Convert an HF-dialect preset dict to DeepSeek's official ``config.json`` dialect.

    The official files (``deepseek-ai/DeepSeek-V4-Flash``) use ``compress_ratios`` (one entry per
    layer plus a trailing ``0`` per MTP layer), ``num_hash_layers``, ``qk_rope_head_dim``, a flat
    YaRN ``rope_scaling`` (``"type": "yarn"``), top-level ``rope_theta`` / ``compress_rope_theta``
    and, for FP8 weights, ``quantization_config`` (e4m3, ue8m0 scales, 128x128 blocks) with
    ``expert_dtype: "fp4"``. ``transformers.DeepseekV4Config`` folds all of these back.

    Args:
        hf_config: an HF-dialect dict (e.g. from :func:`get_preset`).
        fp8: add the FP8 / FP4 ``quantization_config`` (``False`` removes one the preset has).

    The ropes follow :func:`_official_rope` (a dict without ``rope_parameters`` keeps its
    ``rope_theta`` / ``compress_rope_theta`` and gets no ``rope_scaling``). A dict without
    ``layer_types`` / ``mlp_layer_types`` / ``partial_rotary_factor`` gets no ``compress_ratios``
    / ``num_hash_layers`` / ``qk_rope_head_dim``: transformers' defaults then apply to both.

    Raises:
        ValueError: if the MLP schedule is not ``hash_moe`` layers followed by ``moe`` layers
            (the legacy ``num_hash_layers`` cannot express anything else), a layer type is
            unknown, or the ropes have no official form (:func:`_official_rope`).
    """
    d = copy.deepcopy(hf_config)
    layer_types = d.pop("layer_types", None)
    mlp_types = d.pop("mlp_layer_types", None)
    if mlp_types is not None:
        n_hash = sum(1 for t in mlp_types if t == "hash_moe")
        if mlp_types != _hash_schedule(n_hash, len(mlp_types)):
            raise ValueError(f"mlp_layer_types: {mlp_types} is not N x hash_moe followed by moe")
        d["num_hash_layers"] = n_hash
    if layer_types is not None:
        try:
            ratios = [_RATIO_OF[t] for t in layer_types]
        except KeyError as e:
            raise ValueError(f"layer_types: unknown layer type {e.args[0]!r}") from None
        d["compress_ratios"] = ratios + [0] * int(d.get("num_nextn_predict_layers", 0))
    _official_rope(d)
    d["torch_dtype"] = d.pop("dtype", "bfloat16")  # transformers-4 name, as the official files have it
    d["topk_method"] = "noaux_tc"
    if fp8:
        d["torch_dtype"] = "bfloat16"
        with_fp8_quantization(d)
    else:
        without_quantization(d)
    return d
