"""Tensor-name mapping between DeepSeek's official V4 checkpoints and Hugging Face's names.

The official release (``deepseek-ai/DeepSeek-V4-Flash``) names tensors as DeepSeek's inference code
does (``layers.3.attn.wq_a.weight``, ``layers.0.ffn.experts.17.w1.weight``, ``embed.weight``,
``hc_head_fn``); HF transformers' ``deepseek_v4`` model (and our runtime, whose module names are the
HF ones) uses ``model.layers.3.self_attn.q_a_proj.weight``, packed
``model.layers.0.mlp.experts.gate_up_proj``, ``model.embed_tokens.weight``, ``model.hc_head.hc_fn``.
The renames below are the ones HF lists in ``transformers/conversion_mapping.py`` (key
``deepseek_v4``), written here as an explicit two-way table.

Routed experts are not a 1:1 rename: official ``ffn.experts.E.w1`` (gate) and ``w3`` (up), each
``[I, D]``, are stacked over E and concatenated into HF's ``mlp.experts.gate_up_proj``
``[E, 2I, D]`` (gate rows first), and ``w2`` ``[D, I]`` stacks into ``mlp.experts.down_proj``
``[E, D, I]``.

A third spelling is what ``transformers`` (5.x) itself writes: ``save_pretrained`` reverses the
conversion mapping by default (``save_original_format=True``), but that mapping's regexes were
written for the official keys, which have no ``model.`` prefix, so the reversal is partial. A
``DeepseekV4ForCausalLM`` saved that way has official layer names under ``model.``
(``model.layers.0.attn.wq_a.weight``, per-expert ``model.layers.0.ffn.experts.3.w1.weight``), the
attention ``kv_norm`` as ``model.layers.0.attn.norm.weight`` (the reverse of HF's
``.norm.`` -> ``.kv_norm.`` rename), ``head.weight`` for the LM head, and HF names for the
embedding, final norm and hyper-head (``model.embed_tokens.weight``, ``model.norm.weight``,
``model.hc_head.hc_fn``). :func:`hf_saved_to_hf` maps those names; with
``save_original_format=False`` ``save_pretrained`` writes plain HF names. With
``tie_word_embeddings`` it writes no LM head at all (the loader then uses the embedding).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Whole-name renames outside the decoder layers: (hf, official).
_TOP_LEVEL: list[tuple[str, str]] = [
    ("model.embed_tokens.weight", "embed.weight"),
    ("lm_head.weight", "head.weight"),
    ("model.norm.weight", "norm.weight"),
    ("model.hc_head.hc_fn", "hc_head_fn"),
    ("model.hc_head.hc_base", "hc_head_base"),
    ("model.hc_head.hc_scale", "hc_head_scale"),
]

# Layer-local full parameter names: (hf, official).
_LAYER_PARAMS: list[tuple[str, str]] = [
    ("self_attn.sinks", "attn.attn_sink"),
    ("self_attn.compressor.position_bias", "attn.compressor.ape"),
    ("self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"),
    ("attn_hc.fn", "hc_attn_fn"),
    ("attn_hc.base", "hc_attn_base"),
    ("attn_hc.scale", "hc_attn_scale"),
    ("ffn_hc.fn", "hc_ffn_fn"),
    ("ffn_hc.base", "hc_ffn_base"),
    ("ffn_hc.scale", "hc_ffn_scale"),
    ("mlp.gate.e_score_correction_bias", "ffn.gate.bias"),
    ("mlp.gate.tid2eid", "ffn.gate.tid2eid"),
]

# Layer-local module names (a leaf such as ``.weight`` / ``.scale`` follows): (hf, official).
_LAYER_MODULES: list[tuple[str, str]] = [
    ("input_layernorm", "attn_norm"),
    ("post_attention_layernorm", "ffn_norm"),
    ("self_attn.q_a_proj", "attn.wq_a"),
    ("self_attn.q_a_norm", "attn.q_norm"),
    ("self_attn.q_b_proj", "attn.wq_b"),
    ("self_attn.kv_proj", "attn.wkv"),
    ("self_attn.kv_norm", "attn.kv_norm"),
    ("self_attn.o_a_proj", "attn.wo_a"),
    ("self_attn.o_b_proj", "attn.wo_b"),
    ("self_attn.compressor.kv_proj", "attn.compressor.wkv"),
    ("self_attn.compressor.gate_proj", "attn.compressor.wgate"),
    ("self_attn.compressor.kv_norm", "attn.compressor.norm"),
    ("self_attn.compressor.indexer.kv_proj", "attn.indexer.compressor.wkv"),
    ("self_attn.compressor.indexer.gate_proj", "attn.indexer.compressor.wgate"),
    ("self_attn.compressor.indexer.kv_norm", "attn.indexer.compressor.norm"),
    ("self_attn.compressor.indexer.q_b_proj", "attn.indexer.wq_b"),
    ("self_attn.compressor.indexer.scorer.weights_proj", "attn.indexer.weights_proj"),
    ("mlp.gate", "ffn.gate"),
    ("mlp.shared_experts.gate_proj", "ffn.shared_experts.w1"),
    ("mlp.shared_experts.down_proj", "ffn.shared_experts.w2"),
    ("mlp.shared_experts.up_proj", "ffn.shared_experts.w3"),
]


@dataclass(frozen=True)
class _Renames:
    """One direction of the tables above: whole-name renames (``top``), then, for a name matching
    ``layer`` (groups: layer index, layer-local name), full layer-local parameters (``params``)
    and modules followed by a leaf (``modules``), written under ``prefix`` + the layer index."""

    top: dict[str, str]
    layer: re.Pattern[str]
    params: dict[str, str]
    modules: dict[str, str]
    prefix: str

    def __call__(self, name: str) -> str | None:
        if name in self.top:
            return self.top[name]
        m = self.layer.match(name)
        if m is None:
            return None
        layer, local = m.group(1), m.group(2)
        if local in self.params:
            return f"{self.prefix}{layer}.{self.params[local]}"
        if "." in local:
            mod, leaf = local.rsplit(".", 1)
            if mod in self.modules:
                return f"{self.prefix}{layer}.{self.modules[mod]}.{leaf}"
        return None


def _inverse(pairs: list[tuple[str, str]]) -> dict[str, str]:
    return {o: h for h, o in pairs}


_HF_TO_OFFICIAL = _Renames(
    dict(_TOP_LEVEL),
    re.compile(r"^model\.layers\.(\d+)\.(.+)$"),
    dict(_LAYER_PARAMS),
    dict(_LAYER_MODULES),
    "layers.",
)
_OFFICIAL_TO_HF = _Renames(
    _inverse(_TOP_LEVEL),
    re.compile(r"^layers\.(\d+)\.(.+)$"),
    _inverse(_LAYER_PARAMS),
    _inverse(_LAYER_MODULES),
    "model.layers.",
)

_OFF_EXPERT = re.compile(r"^layers\.(\d+)\.ffn\.experts\.(\d+)\.(w[123])\.(weight|scale|weight_scale_inv)$")

#: Official routed-expert projection -> (HF packed parameter, which half of gate_up; None for down).
EXPERT_PROJ = {"w1": ("gate_up_proj", 0), "w3": ("gate_up_proj", 1), "w2": ("down_proj", None)}


@dataclass(frozen=True)
class ExpertPart:
    """One official per-expert tensor: ``layers.{layer}.ffn.experts.{expert}.{proj}.{leaf}``."""

    layer: int
    expert: int
    proj: str  # "w1" (gate), "w2" (down) or "w3" (up)
    leaf: str  # "weight", "scale" or "weight_scale_inv"

    @property
    def hf_name(self) -> str:
        """The HF packed parameter this part belongs to."""
        return f"model.layers.{self.layer}.mlp.experts.{EXPERT_PROJ[self.proj][0]}"


def parse_official_expert(name: str) -> ExpertPart | None:
    """``ExpertPart`` for an official routed-expert tensor name, else ``None``."""
    m = _OFF_EXPERT.match(name)
    if m is None:
        return None
    return ExpertPart(int(m.group(1)), int(m.group(2)), m.group(3), m.group(4))


def official_to_hf(name: str) -> str | None:
    """HF name of a (non-expert) official tensor, or ``None`` if the name is not a known one.

    Scale tensors keep their leaf: ``layers.0.attn.wq_a.scale`` ->
    ``model.layers.0.self_attn.q_a_proj.scale``. Routed experts (``ffn.experts.E.wK``) are not
    handled here (see :func:`parse_official_expert`).
    """
    return _OFFICIAL_TO_HF(name)


def hf_to_official(name: str) -> str | None:
    """Official name of an HF tensor (inverse of :func:`official_to_hf`), or ``None``.

    Packed routed experts (``mlp.experts.gate_up_proj`` / ``down_proj``) have no single official
    name and give ``None``; the checkpoint writer splits them per expert.
    """
    return _HF_TO_OFFICIAL(name)


def official_expert_name(layer: int, expert: int, proj: str, leaf: str = "weight") -> str:
    """``layers.{layer}.ffn.experts.{expert}.{proj}.{leaf}``."""
    return f"layers.{layer}.ffn.experts.{expert}.{proj}.{leaf}"


_HF_TOP_NAMES = frozenset(h for h, _ in _TOP_LEVEL)
_HF_PACKED_EXPERT = re.compile(r"^model\.layers\.\d+\.mlp\.experts\.(gate_up_proj|down_proj)$")
# transformers' reverse of its ``.norm.`` -> ``.kv_norm.`` rename, applied to the attention kv_norm.
_SAVED_ATTN_NORM = re.compile(r"^(layers\.\d+\.attn\.)norm\.")


def is_hf_name(name: str) -> bool:
    """Whether ``name`` is one of HF ``DeepseekV4ForCausalLM``'s own tensor names (a weight, a
    packed routed-expert tensor, or a scale / ``weight_scale_inv`` leaf of a known module)."""
    return name in _HF_TOP_NAMES or hf_to_official(name) is not None or bool(_HF_PACKED_EXPERT.match(name))


def hf_saved_to_hf(name: str) -> str | ExpertPart | None:
    """Map a tensor name as ``transformers``' ``save_pretrained`` writes it (module docstring) to HF.

    Returns:
        The HF name (``model.layers.0.attn.norm.weight`` -> ``model.layers.0.self_attn.kv_norm.weight``,
        ``head.weight`` -> ``lm_head.weight``; HF names are returned unchanged), an
        :class:`ExpertPart` for a per-expert tensor (``model.layers.L.ffn.experts.E.wK.weight``),
        or ``None`` for an unknown name.
    """
    if is_hf_name(name):
        return name
    if name == "head.weight":
        return "lm_head.weight"
    if not name.startswith("model."):
        return None
    rest = _SAVED_ATTN_NORM.sub(r"\1kv_norm.", name[len("model.") :])
    if not rest.startswith("layers."):
        return None
    return parse_official_expert(rest) or official_to_hf(rest)
