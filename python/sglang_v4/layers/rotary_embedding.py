"""Rotary tables for DeepSeek-V4's two rope types (HF ``DeepseekV4RotaryEmbedding``).

``main`` (plain RoPE, ``rope_theta``) serves sliding-only layers; ``compress`` (``compress_rope_theta``,
optionally YaRN) serves CSA/HCA attention, their compressors and the indexer. The inverse
frequencies come from transformers' own rope initialisers (``ROPE_INIT_FUNCTIONS``) so YaRN
matches the oracle exactly; V4 forces YaRN's ``attention_factor`` to 1 (see the HF config).
"""

from __future__ import annotations

import torch
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from sglang_v4.configs.model_config import ModelConfig


def _default_inv_freq(base: float, dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


class RotaryTables:
    """cos/sin lookup per rope type.

    ``cos_sin(kind, positions [N] int64) -> (cos [N, r/2], sin [N, r/2])`` fp32 on the positions' device.
    """

    def __init__(self, model_config: ModelConfig, device: torch.device | str) -> None:
        hf = model_config.hf
        self.inv_freq: dict[str, torch.Tensor] = {}
        self.scaling: dict[str, float] = {}
        for kind in ("main", "compress"):
            params = hf.rope_parameters[kind]
            rope_type = params.get("rope_type", "default")
            if rope_type == "default":
                dim = int(hf.head_dim * params.get("partial_rotary_factor", 1.0))
                inv, scale = _default_inv_freq(float(params["rope_theta"]), dim), 1.0
            else:
                inv, scale = ROPE_INIT_FUNCTIONS[rope_type](hf, None, layer_type=kind)
            self.inv_freq[kind] = inv.float().to(device)
            self.scaling[kind] = float(scale)

    def cos_sin(self, kind: str, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float().unsqueeze(-1) * self.inv_freq[kind].to(positions.device)
        s = self.scaling[kind]
        return freqs.cos() * s, freqs.sin() * s
