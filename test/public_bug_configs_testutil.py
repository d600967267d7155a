"""Model configs of public bug reports shared by the DSV4 public-bug tests."""

from __future__ import annotations

from typing import Any

from dsv4_testutil import BASE, CSA, HCA, SL

YARN = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 64,
    "beta_fast": 32,
    "beta_slow": 1,
}


#: sliding, CSA and HCA layers; distinct main / compress rope bases and a flat YaRN block (which the
#: compressed layers alone take); a small ``swiglu_limit`` so that the experts' clamps bite.
REPORT_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[SL, CSA, HCA, SL],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    rope_theta=500.0,
    compress_rope_theta=20000.0,
    rope_parameters=YARN,
    swiglu_limit=0.05,
    max_position_embeddings=1024,
)
