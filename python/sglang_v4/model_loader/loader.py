"""Read DeepSeek-V4 safetensors checkpoints into HF-named tensors.

Accepts a single ``.safetensors`` file, a directory with ``model.safetensors``, or a directory
with shards listed by ``model.safetensors.index.json``; tensor names either DeepSeek's official
ones, HF's, or the mix ``transformers``' ``save_pretrained`` writes (official layer names under
``model.``, ``head.weight``), detected from the names (see :mod:`sglang_v4.model_loader.names`). A
checkpoint without an LM head (or without an embedding) whose model ties them
(``tie_word_embeddings``: the served model's config, overrides included, else ``config.json``)
uses the other matrix for it, as HF does. A tensor stored in more than one shard (an overlay shard
that supersedes a stale copy still in a base shard) is read from the shard the index maps it to;
one the index does not settle is refused.

Two consumers:

* :func:`iter_state_dict` / :func:`load_state_dict` (the HF-named, dequantized view used by tests
  and HF comparisons): FP8 block-scaled weights and FP4 routed experts are dequantized
  (:mod:`sglang_v4.model_loader.quant`), per-expert tensors are packed into HF's ``[E, 2I, D]`` /
  ``[E, D, I]``, and the results are cast to the requested dtype except the tensors HF keeps in
  float32 (``DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict``: mHC, sinks, compressor
  position bias, router correction bias, norms) and integer tensors (``tid2eid`` stays int64).
* :func:`~sglang_v4.model_loader.weight_loader.load_weights_into` (the runtime's loader, built on
  this module's plan): streams every stored tensor into the model in the model's own format,
  keeping FP8 / FP4 weights quantized where the model holds them so (``layers/quantization.py``)
  and dequantizing on the destination device elsewhere.

``mtp.*`` tensors (the multi-token-prediction head) are skipped with one log line. Everything is
planned from the safetensors headers first (:func:`checkpoint_shapes` reads no tensor data), so
``load_weights_into`` reports every missing, mis-shaped or unexpected tensor before copying
anything.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import lru_cache

import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from .checkpoint_config import checkpoint_config, weight_block_size
from .checkpoint_files import INDEX_FILE, _shard_path, checkpoint_files, index_weight_map
from .checkpoint_files import SINGLE_FILE as SINGLE_FILE  # re-exported: the file names live there
from .foreign_quant import check_tensor_name, check_unscaled_dtype
from .names import ExpertPart, hf_saved_to_hf, official_to_hf, parse_official_expert
from .quant import FP4_GROUP, dequantize_fp4, dequantize_fp8_block

logger = logging.getLogger(__name__)

#: Tensors no model here reads: the multi-token-prediction head (official ``mtp.*``; ``model.mtp.*``
#: under an HF prefix) and rotary tables older exporters saved as buffers (SGLang's and vLLM's
#: loaders skip ``rotary_emb.inv_freq`` / ``cos_cached`` / ``sin_cached`` alike).
_SKIP_PREFIXES = ("mtp.", "model.mtp.")
_SKIP_SUFFIXES = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")


def _skipped(key: str) -> bool:
    return key.startswith(_SKIP_PREFIXES) or key.endswith(_SKIP_SUFFIXES)


_FP8_HEADER_PREFIX = "F8_"  # F8_E4M3 (V3/V4), F8_E5M2
_FLOAT_HEADERS = ("BF16", "F16", "F32", "F64")
_E8M0_HEADER = "F8_E8M0"  # ue8m0 scales (powers of two): only ever a scale
#: Bytes per element of the safetensors header dtypes.
_HEADER_BYTES = {
    "F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
}  # fmt: skip
_OFFICIAL_TOP = ("embed.weight", "head.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale")


@lru_cache(maxsize=1)
def _fp32_pattern() -> re.Pattern[str]:
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4PreTrainedModel

    mods = DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict
    return re.compile("|".join(rf"((^|\.){re.escape(m)}($|\.))" for m in mods))


def keeps_fp32(name: str) -> bool:
    """Whether HF keeps tensor ``name`` (an HF name) in float32 regardless of the model dtype.

    Same matching as transformers: a module name in ``_keep_in_fp32_modules_strict`` appearing
    as a whole dotted component of ``name``.
    """
    return _fp32_pattern().search(name) is not None


def _header_bytes(dtype: str, shape: tuple[int, ...], key: str) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    if dtype in _HEADER_BYTES:
        return n * _HEADER_BYTES[dtype]
    if dtype.startswith("F4"):  # packed float4 (two per byte), shape in bytes
        return n
    raise ValueError(f"{key}: unknown safetensors dtype {dtype!r}")


# ---------------------------------------------------------------------------------------------
# plan (headers only)
# ---------------------------------------------------------------------------------------------
@dataclass
class _Source:
    """One stored tensor plus, when quantized, its scale."""

    key: str
    header_dtype: str
    shape: tuple[int, ...]
    scale: str | None = None
    scale_shape: tuple[int, ...] | None = None
    scale_header_dtype: str | None = None

    @property
    def kind(self) -> str:
        if self.scale is None:
            return "plain"
        if self.header_dtype.startswith(_FP8_HEADER_PREFIX):
            return "fp8"
        if self.header_dtype in _FLOAT_HEADERS:
            return "scaled"  # a float weight with a block scale: multiply like FP8
        return "fp4"  # packed e2m1 (int8 / uint8 / float4_e2m1fn_x2)

    @property
    def logical_shape(self) -> tuple[int, ...]:
        if self.kind == "fp4":
            return (*self.shape[:-1], 2 * self.shape[-1])
        return self.shape


@dataclass
class _Entry:
    """One output (HF-named) tensor and the stored tensors it is built from."""

    name: str
    shape: tuple[int, ...]
    sources: list[_Source]
    # experts: list over expert index of the sources to concatenate on dim 0 (gate_up: [w1, w3])
    experts: list[list[_Source]] | None = None


@dataclass
class _Plan:
    entries: list[_Entry] = field(default_factory=list)
    key_file: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    fmt: str = "hf"
    block: tuple[int, int] = (128, 128)


def _check_scale(src: _Source, block: tuple[int, int]) -> None:
    """Raise ValueError naming ``src.key`` if its scale's header shape does not fit the weight."""
    if src.scale is None or src.scale_shape is None:
        return
    *lead, r, c = src.shape
    if src.kind == "fp4":
        want = (*lead, r, 2 * c // FP4_GROUP)
        if (2 * c) % FP4_GROUP or src.scale_shape != want:
            raise ValueError(
                f"{src.key}: FP4 scale has shape {src.scale_shape}, expected {want} for packed weight of shape "
                f"{src.shape} (one scale per {FP4_GROUP} values)"
            )
        return
    bm, bn = block
    want = (*lead, -(-r // bm), -(-c // bn))
    if src.scale_shape != want:
        raise ValueError(
            f"{src.key}: FP8 block scale has shape {src.scale_shape}, expected {want} for a weight of "
            f"shape {src.shape} with {bm}x{bn} blocks"
        )


def _scale_target(key: str, keys: set[str]) -> str | None:
    """The weight a scale tensor belongs to, or None if ``key`` is not a scale."""
    if key.endswith("_scale_inv"):
        return key[: -len("_scale_inv")]
    if key.endswith(".scale") and key[: -len(".scale")] + ".weight" in keys:
        return key[: -len(".scale")] + ".weight"
    return None


def _listed_in(model_path: str, keys: tuple[str, ...]) -> str:
    """Where a missing tensor should have been: the shard ``model.safetensors.index.json`` lists
    for the first of ``keys`` it has (saying so), else ``model_path``."""
    weight_map = index_weight_map(model_path)
    for k in keys:
        if k in weight_map:
            return f"{os.path.join(model_path, weight_map[k])} (where {INDEX_FILE} lists {k})"
    return model_path


def _scale_names(key: str) -> str:
    """The names a scale of weight ``key`` may have: HF's ``<key>_scale_inv`` and, for a
    ``.weight``, the official ``<module>.scale``."""
    names = [f"{key}_scale_inv"]
    if key.endswith(".weight"):
        names.append(key[: -len(".weight")] + ".scale")
    return " or ".join(names)


def _skip_summary(skipped: list[str]) -> str:
    """What the skipped tensors are, for the log: ``"61 mtp.* tensors (multi-token-prediction head;
    not used)"``, plus the saved rotary tables when there are some."""
    n_rot = sum(k.endswith(_SKIP_SUFFIXES) for k in skipped)
    parts = []
    if len(skipped) > n_rot:
        parts.append(f"{len(skipped) - n_rot} mtp.* tensors (multi-token-prediction head; not used)")
    if n_rot:
        parts.append(f"{n_rot} saved rotary tables (rotary_emb.*; recomputed)")
    return " and ".join(parts)


def _detect_format(keys: list[str], key_file: dict[str, str] | None = None) -> str:
    """``"official"`` (keys rooted at ``layers.`` / ``embed.weight`` ...) or ``"hf"`` (rooted at
    ``model.`` / ``lm_head.``, HF's own names or ``save_pretrained``'s; ``head.weight`` fits both).
    ``key_file`` (key -> file) lets the messages name the files of the keys they quote.

    Raises:
        ValueError: keys of both roots (two checkpoints in one directory?), or of neither.
    """
    where = key_file or {}
    official = [k for k in keys if k.startswith("layers.") or (k in _OFFICIAL_TOP and k != "head.weight")]
    hf = [k for k in keys if k.startswith(("model.", "lm_head."))]
    if official and hf:
        files = ", ".join(dict.fromkeys(where[k] for k in (official[0], hf[0]) if k in where))
        raise ValueError(
            f"{files + ': ' if files else ''}checkpoint mixes official DeepSeek names (layers.*, e.g. "
            f"{official[0]}) and HF names (model.*, e.g. {hf[0]})"
        )
    if not official and not hf and "head.weight" not in keys:
        files = ", ".join(dict.fromkeys(where[k] for k in keys[:3] if k in where))
        raise ValueError(
            f"{files + ': ' if files else ''}checkpoint tensor names are neither official DeepSeek nor "
            f"HF names (e.g. {keys[:3]})"
        )
    return "hf" if hf else "official"


def _plan(model_path: str, tie_word_embeddings: bool | None = None) -> _Plan:
    """Plan the load of the checkpoint at ``model_path`` from its safetensors headers.

    ``tie_word_embeddings``: whether the model ties its LM head to its embedding (the model's
    effective config, ``--json-model-override-args`` included); ``None`` reads it from the
    checkpoint's ``config.json`` (a view without a model config: :func:`load_state_dict`).
    """
    files = checkpoint_files(model_path)
    plan = _Plan(block=weight_block_size(model_path))
    meta: dict[str, tuple[str, tuple[int, ...]]] = {}
    weight_map = index_weight_map(model_path)
    superseded: list[str] = []  # tensors stored in several shards, settled by the index
    for path in files:
        try:
            f = safe_open(path, framework="pt")
        except Exception as e:  # safetensors' SafetensorError (bad header), OSError
            raise ValueError(
                f"{path}: not a readable safetensors file ({' '.join(str(e).split())})"
            ) from None
        with f:
            for k in f.keys():
                if k in plan.key_file:
                    # an overlay shard (the index maps the tensor to it) supersedes the stale copy
                    # a base shard still holds: the index names the copy that is read
                    listed = _shard_path(model_path, weight_map[k]) if k in weight_map else None
                    if listed == plan.key_file[k]:
                        superseded.append(k)
                        continue
                    if listed != path:
                        where = (
                            f"; {INDEX_FILE} maps it to {weight_map[k]!r}, neither of them"
                            if k in weight_map
                            else ""
                        )
                        raise ValueError(
                            f"{path}: {k}: tensor stored twice (also in {plan.key_file[k]}){where}"
                        )
                    superseded.append(k)
                try:
                    sl = f.get_slice(k)
                    meta[k] = (sl.get_dtype(), tuple(int(s) for s in sl.get_shape()))
                except Exception as e:  # a dtype this safetensors / torch does not know
                    raise ValueError(
                        f"{path}: {k}: unreadable header entry ({' '.join(str(e).split())})"
                    ) from None
                plan.key_file[k] = path
    if superseded:
        logger.info(
            "%d tensors stored in more than one shard (e.g. %s): each read from the shard %s maps it to",
            len(superseded),
            superseded[0],
            INDEX_FILE,
        )
    keys = [k for k in meta if not _skipped(k)]
    plan.skipped = [k for k in meta if _skipped(k)]
    if not keys:
        raise ValueError(f"{model_path}: checkpoint has no model tensors")
    plan.fmt = _detect_format(keys, plan.key_file)
    keyset = set(keys)
    for k in keys:  # another method's layout (GPTQ qweight, bitsandbytes absmax, ...): named first
        check_tensor_name(plan.key_file[k], k)

    scale_of: dict[str, str] = {}
    for k in keys:
        if (
            k.endswith(".scale")
            and meta[k][0] == _E8M0_HEADER
            and k[: -len(".scale")] + ".weight" not in keyset
        ):
            raise ValueError(
                f"{plan.key_file[k]}: {k}: scale tensor without its weight {k[: -len('.scale')]}.weight"
            )
        target = _scale_target(k, keyset)
        if target is None:
            continue
        if target not in keyset:
            raise ValueError(f"{plan.key_file[k]}: {k}: scale tensor without its weight {target}")
        if target in scale_of:
            raise ValueError(f"{plan.key_file[k]}: {target}: two scale tensors, {scale_of[target]} and {k}")
        scale_of[target] = k

    sources: dict[str, _Source] = {}
    for k in keys:
        if _scale_target(k, keyset) is not None:
            continue
        dt, shape = meta[k]
        s = scale_of.get(k)
        if s is None and dt.startswith(_FP8_HEADER_PREFIX) and dt != _E8M0_HEADER:
            other = k[: -len(".weight")] + ".weight_scale" if k.endswith(".weight") else None
            found = (
                f"; found {other}, a per-tensor / per-channel scale (vLLM / compressed-tensors FP8), "
                "not a block scale"
                if other in meta
                else ""
            )
            raise ValueError(
                f"{plan.key_file[k]}: {k}: {dt} weight without its block scale ({_scale_names(k)}){found}; "
                "FP8 values mean nothing without their scales"
            )
        if s is None:
            check_unscaled_dtype(plan.key_file[k], k, dt)
        sources[k] = _Source(k, dt, shape, s, meta[s][1] if s else None, meta[s][0] if s else None)
        try:
            _check_scale(sources[k], plan.block)
        except ValueError as e:
            raise ValueError(f"{plan.key_file[s or k]}: {e}") from None

    experts: dict[tuple[int, str], dict[int, dict[str, _Source]]] = {}
    stored_as: dict[str, str] = {}  # HF name -> checkpoint key
    for k, src in sources.items():
        mapped: str | ExpertPart | None
        if plan.fmt == "official":
            mapped = parse_official_expert(k) or official_to_hf(k)
        else:
            mapped = hf_saved_to_hf(k)
        if isinstance(mapped, ExpertPart):
            name = mapped.hf_name
            experts.setdefault((mapped.layer, name), {}).setdefault(mapped.expert, {})[mapped.proj] = src
            stored_as.setdefault(name, k)
            continue
        name = mapped if mapped is not None else k  # unknown: kept, reported as unexpected later
        if name in stored_as:
            raise ValueError(f"{name}: stored twice in the checkpoint, as {stored_as[name]} and as {k}")
        stored_as[name] = k
        plan.entries.append(_Entry(name, src.logical_shape, [src]))

    for (layer, name), by_expert in sorted(experts.items()):
        n = max(by_expert) + 1
        projs = ("w1", "w3") if name.endswith("gate_up_proj") else ("w2",)
        rows: list[list[_Source]] = []
        for e in range(n):
            got = by_expert.get(e, {})
            for p in projs:
                if p not in got:
                    want = f"layers.{layer}.ffn.experts.{e}.{p}.weight"
                    raise ValueError(
                        f"{_listed_in(model_path, (want, 'model.' + want))}: {name}: official expert tensor "
                        f"{want} is missing"
                    )
            rows.append([got[p] for p in projs])
        first = rows[0][0].logical_shape
        for row in rows:
            for src in row:
                if src.logical_shape != first:
                    raise ValueError(
                        f"{src.key}: expert weight shape {src.logical_shape} differs from expert 0's {first}"
                    )
        shape = (n, first[0] * len(projs), first[1])
        if any(e.name == name for e in plan.entries):
            raise ValueError(f"{name}: stored twice in the checkpoint, packed and as per-expert tensors")
        plan.entries.append(_Entry(name, shape, [s for row in rows for s in row], experts=rows))
    names = {e.name for e in plan.entries}
    pair = ("model.embed_tokens.weight", "lm_head.weight")
    tie = (
        checkpoint_config(model_path).get("tie_word_embeddings")
        if tie_word_embeddings is None
        else tie_word_embeddings
    )
    if tie and (pair[0] in names) != (pair[1] in names):
        # tied and only one of the two stored (HF's save_pretrained writes no LM head): the stored
        # one serves both, as transformers' ``tie_weights`` does; both stored: each its own
        have, missing = pair if pair[0] in names else pair[::-1]
        src = next(e for e in plan.entries if e.name == have)
        plan.entries.append(_Entry(missing, src.shape, src.sources))
    return plan


def checkpoint_shapes(model_path: str) -> dict[str, tuple[int, ...]]:
    """HF name -> shape of every tensor :func:`load_state_dict` would return (headers only).

    Raises:
        FileNotFoundError: no checkpoint at ``model_path``.
        ValueError: malformed checkpoint (see :func:`load_state_dict`).
    """
    return {e.name: e.shape for e in _plan(model_path).entries}


# ---------------------------------------------------------------------------------------------
# materialization
# ---------------------------------------------------------------------------------------------
def _out_dtype(name: str, t: torch.Tensor, dtype: torch.dtype | None) -> torch.dtype:
    if not t.dtype.is_floating_point:
        return torch.int64 if name.endswith("tid2eid") else t.dtype
    if name.endswith("tid2eid"):
        return torch.int64
    if dtype is None:
        return t.dtype
    return torch.float32 if keeps_fp32(name) else dtype


def _materialize(src: _Source, handles: dict[str, object], plan: _Plan) -> torch.Tensor:
    f = handles[plan.key_file[src.key]]
    w = f.get_tensor(src.key)  # type: ignore[attr-defined]
    kind = src.kind
    if kind == "plain":
        return w
    assert src.scale is not None
    scale = handles[plan.key_file[src.scale]].get_tensor(src.scale)  # type: ignore[attr-defined]
    if kind == "fp4":
        return dequantize_fp4(w, scale, name=src.key)
    return dequantize_fp8_block(w, scale, plan.block, name=src.key)


def iter_state_dict(
    model_path: str,
    dtype: torch.dtype | None = torch.float32,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, tensor)`` for every model tensor of a checkpoint, one at a time.

    Args:
        model_path: checkpoint directory (or one ``.safetensors`` file).
        dtype: output dtype of floating tensors, except the ones :func:`keeps_fp32` (float32);
            ``None`` keeps the stored dtype (float32 for dequantized tensors).
        device: where the yielded tensors live (dequantization itself runs on the CPU).
        progress: show a tqdm progress bar (one step per output tensor) when stderr is a terminal;
            otherwise (a log file, a pipe) one log line when done, no carriage-return updates.

    Raises:
        FileNotFoundError: no checkpoint at ``model_path``.
        ValueError: mixed or unknown naming, a scale without its weight, a scale of the wrong
            shape, incomplete or inconsistent routed experts (each message names the tensor).
    """
    t0 = time.perf_counter()
    plan = _plan(model_path)
    if plan.skipped:
        logger.info("skipping %s", _skip_summary(plan.skipped))
    with ExitStack() as stack:
        handles = {
            p: stack.enter_context(safe_open(p, framework="pt"))
            for p in dict.fromkeys(plan.key_file.values())
        }
        desc = f"Loading {os.path.basename(os.path.normpath(model_path))} ({plan.fmt} names)"
        # disable=None: tqdm turns itself off when stderr is not a TTY
        for entry in tqdm(plan.entries, desc=desc, unit="tensor", disable=None if progress else True):
            if entry.experts is None:
                t = _materialize(entry.sources[0], handles, plan)
            else:
                per_expert = []
                for row in entry.experts:
                    parts = [_materialize(s, handles, plan) for s in row]
                    parts = [p.to(parts[0].dtype) for p in parts]
                    per_expert.append(torch.cat(parts, dim=0))
                t = torch.stack(per_expert, dim=0)
            out = _out_dtype(entry.name, t, dtype)
            if entry.name.endswith("tid2eid") and t.dtype.is_floating_point:
                t = t.round()
            yield entry.name, t.to(device=device, dtype=out)
    if progress:
        logger.info("%s: %d tensors in %.1fs", desc, len(plan.entries), time.perf_counter() - t0)


def load_state_dict(
    model_path: str,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    progress: bool = True,
) -> dict[str, torch.Tensor]:
    """All model tensors of a checkpoint, HF-named, dequantized and cast (see :func:`iter_state_dict`).

    Returns:
        ``{hf_name: tensor}``; e.g. ``model.layers.0.mlp.experts.gate_up_proj`` ``[E, 2I, D]``
        (``dtype``), ``model.layers.0.attn_hc.fn`` (float32), ``model.layers.0.mlp.gate.tid2eid``
        ``[vocab, top_k]`` (int64).

    Raises:
        FileNotFoundError, ValueError: as :func:`iter_state_dict`.
    """
    return dict(iter_state_dict(model_path, dtype=dtype, device=device, progress=progress))


def checkpoint_nbytes(model_path: str) -> int:
    """Bytes of the model tensors of a checkpoint as stored (headers only; ``mtp.*`` excluded).

    Raises:
        FileNotFoundError, ValueError: as :func:`checkpoint_shapes`.
    """
    plan = _plan(model_path)
    total = 0
    for e in plan.entries:
        for src in e.sources:
            for dt, shape in ((src.header_dtype, src.shape), (src.scale_header_dtype, src.scale_shape)):
                if shape is not None and dt is not None:
                    total += _header_bytes(dt, shape, src.key)
    return total


def __getattr__(name: str):
    """``load_weights_into`` (streaming a checkpoint into a model) lives in
    :mod:`~sglang_v4.model_loader.weight_loader`; importable from here as before."""
    if name in ("load_weights_into", "weight_nbytes"):
        from . import weight_loader

        return getattr(weight_loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
