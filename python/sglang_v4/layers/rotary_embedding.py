"""Rotary tables for DeepSeek-V4's two rope types (HF ``DeepseekV4RotaryEmbedding``).

``main`` (plain RoPE, ``rope_theta``) serves sliding-only layers; ``compress`` (``compress_rope_theta``,
optionally YaRN) serves CSA/HCA attention, their compressors and the indexer. The inverse
frequencies come from transformers' own rope initialisers (``ROPE_INIT_FUNCTIONS``) so YaRN
matches the oracle exactly; V4 forces YaRN's ``attention_factor`` to 1 (see the HF config).
"""

from __future__ import annotations

import contextlib
from typing import Any

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
        # A model built on the meta device (shapes only) computes its tables on the CPU and moves
        # them: ops on meta tensors or under a meta default device run through ``torch._refs``,
        # whose first use imports ``torch._dynamo`` (~1.5 s of CPU in every process).
        meta = torch.device(device).type == "meta"
        with torch.device("cpu") if meta else contextlib.nullcontext():
            self._init_tables(hf, "cpu" if meta else device)
        if meta:
            self.inv_freq = {k: v.to(device) for k, v in self.inv_freq.items()}
            self._inv2 = self._inv2.to(device) if self._inv2 is not None else None
            self._scale2 = self._scale2.to(device)

    def _init_tables(self, hf: Any, device: torch.device | str) -> None:
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
        # both kinds stacked ([2, r/2] frequencies, [2, 1, 1] scales) for :meth:`cos_sin_many`
        self._kinds = ("main", "compress")
        same = self.inv_freq["main"].shape == self.inv_freq["compress"].shape
        self._inv2 = torch.stack([self.inv_freq[k] for k in self._kinds]) if same else None
        self._scale2 = torch.tensor([self.scaling[k] for k in self._kinds], device=device).view(2, 1, 1)

    def cos_sin(self, kind: str, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` ``[N, r/2]`` fp32 of ``positions [N]`` for rope ``kind`` (``main`` / ``compress``):
        ``cos(p * inv_freq) * scaling`` (HF ``DeepseekV4RotaryEmbedding``)."""
        freqs = positions.float().unsqueeze(-1) * self.inv_freq[kind].to(positions.device)
        s = self.scaling[kind]
        return freqs.cos() * s, freqs.sin() * s

    def cos_sin_many(
        self, positions: list[torch.Tensor]
    ) -> list[dict[str, tuple[torch.Tensor, torch.Tensor]]]:
        """:meth:`cos_sin` of both kinds for several position vectors in one pass.

        The vectors are concatenated and the tables of both kinds computed as one ``[2, N, r/2]``
        product, so a forward spends 7 device ops on its rope tables instead of 5 per
        (kind, vector). Each element is the same IEEE operation as in :meth:`cos_sin`, so the
        values are bit-identical to it; each returned table is a contiguous row slice.

        Args:
            positions: int64 vectors ``[N_i]`` on one device.

        Returns:
            per vector, ``{"main": (cos, sin), "compress": (cos, sin)}``, each ``[N_i, r/2]`` fp32.
        """
        if self._inv2 is None:  # rope dims differ between the kinds: one pass per table
            return [{k: self.cos_sin(k, p) for k in self._kinds} for p in positions]
        pos = positions[0] if len(positions) == 1 else torch.cat(positions)
        freqs = pos.float()[None, :, None] * self._inv2.to(pos.device)[:, None, :]
        scale = self._scale2.to(pos.device)
        cos, sin = freqs.cos() * scale, freqs.sin() * scale
        out, o = [], 0
        for p in positions:
            n = p.shape[0]
            out.append({k: (cos[i, o : o + n], sin[i, o : o + n]) for i, k in enumerate(self._kinds)})
            o += n
        return out
