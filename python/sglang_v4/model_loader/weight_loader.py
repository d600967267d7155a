"""Stream a checkpoint into the runtime model, tensor by tensor, in the model's weight formats.

Reads the plan of :mod:`sglang_v4.model_loader.loader` (safetensors headers, official or HF
names, scales attached to their weights) and writes each stored tensor straight into its
destination: FP8 / FP4 weights copied as published where the model keeps them quantized
(``layers/quantization.py``: a tensor ``X`` with a sibling buffer ``X_scale_inv``), dequantized on
the destination device where it does not, quantized where the model is quantized and the
checkpoint is not. Host memory holds one stored tensor at a time.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass

import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.sharding import Range, TensorShard
from sglang_v4.layers.quantization import FP8_BLOCK, SCALE_SUFFIX

from .loader import (
    INDEX_FILE,
    _Entry,
    _Plan,
    _plan,
    _skip_summary,
    _Source,
    checkpoint_files,
    index_weight_map,
    keeps_fp32,
)
from .names import hf_to_official
from .quant import (
    E8M0_DTYPE,
    FP4_GROUP,
    FP8_DTYPE,
    check_scale,
    dequantize_fp4,
    dequantize_fp8_block,
    fp4_scale_bytes,
    quantize_fp4,
    quantize_fp8_block,
    scale_to_float,
)

logger = logging.getLogger(__name__)


def _check_shapes(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]]) -> list[str]:
    problems = []
    for name, shape in expected.items():
        if name not in found:
            problems.append(f"{name}: expected shape {list(shape)}, found missing")
        elif tuple(found[name]) != tuple(shape):
            problems.append(f"{name}: expected shape {list(shape)}, found shape {list(found[name])}")
    for name, shape in found.items():
        if name not in expected:
            problems.append(
                f"{name}: unexpected tensor in checkpoint (shape {list(shape)}), not in the model"
            )
    return problems


_LAYER = re.compile(r"model\.layers\.(\d+)\.")


def _drop_layers_beyond(plan: _Plan, expected: dict[str, tuple[int, ...]]) -> int:
    """Remove from ``plan`` the tensors of decoder layers at or beyond the model's depth and return
    how many were removed.

    A model built with fewer layers than its checkpoint holds (SGLang's
    ``--json-model-override-args '{"num_hidden_layers": N}'`` on a full checkpoint) loads the first
    ``N`` layers, as SGLang's loaders do; the depth is ``1 +`` the highest ``model.layers.{i}.``
    index among the model's own tensors (``expected``, HF names). Tensors of layers below it that
    are missing or unexpected are still reported by :func:`_check_shapes`.
    """
    depths = [int(m.group(1)) for k in expected if (m := _LAYER.match(k))]
    depth = max(depths) + 1 if depths else 0
    kept = [e for e in plan.entries if not ((m := _LAYER.match(e.name)) and int(m.group(1)) >= depth)]
    dropped = len(plan.entries) - len(kept)
    plan.entries = kept
    return dropped


@dataclass
class _Target:
    """A model tensor the loader fills: its format and, when quantized, its scale buffer."""

    name: str
    tensor: torch.Tensor
    kind: str  # "plain", "fp8" (e4m3 + float32 128x128 block scales), "fp4" (packed e2m1 + ue8m0 bytes)
    scale: torch.Tensor | None = None

    @property
    def logical_shape(self) -> tuple[int, ...]:
        t = self.tensor
        if self.kind == "fp4":
            return (*t.shape[:-1], 2 * t.shape[-1])
        return tuple(t.shape)


def _targets(state: dict[str, torch.Tensor]) -> dict[str, _Target]:
    """The loadable tensors of a model's state dict. A tensor ``X`` with a sibling
    ``X_scale_inv`` is quantized (float8_e4m3fn: FP8 block; uint8: packed FP4)."""
    out: dict[str, _Target] = {}
    for name, t in state.items():
        if name.endswith(SCALE_SUFFIX) and name[: -len(SCALE_SUFFIX)] in state:
            continue
        scale = state.get(name + SCALE_SUFFIX)
        if scale is None:
            out[name] = _Target(name, t, "plain")
        elif t.dtype == FP8_DTYPE:
            out[name] = _Target(name, t, "fp8", scale)
        elif t.dtype == torch.uint8:
            out[name] = _Target(name, t, "fp4", scale)
        else:
            raise ValueError(f"{name}: a {t.dtype} tensor with a {SCALE_SUFFIX} buffer is no known format")
    return out


def _align(src: _Source, tgt: _Target, plan: _Plan) -> list[int]:
    """Per source dim, the granularity a read must start on so that the region can be converted
    exactly: the checkpoint's FP8 blocks / FP4 scale groups, and the target's blocks when it is
    quantized here (the global block grid, so a rank quantizes exactly what one rank would)."""
    nd = len(src.shape)
    a = [1] * nd
    if src.kind in ("fp8", "scaled"):
        a[-2], a[-1] = plan.block
    elif src.kind == "fp4":
        a[-1] = FP4_GROUP
    if tgt.kind == "fp8" and nd >= 2:
        a[-2], a[-1] = math.lcm(a[-2], FP8_BLOCK[0]), math.lcm(a[-1], FP8_BLOCK[1])
    elif tgt.kind == "fp4":
        a[-1] = math.lcm(a[-1], FP4_GROUP)
    return a


def _read_region(
    src: _Source, handles: dict[str, object], plan: _Plan, cover: list[Range], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The stored tensor's (and its scale's) part covering the logical ``cover`` ranges (aligned
    as :func:`_align` says), read from the file by slices, moved to ``device``."""
    sl = [slice(s, e) for s, e in cover]
    if src.kind == "fp4":  # packed: two values per byte along the last dim
        sl[-1] = slice(cover[-1][0] // 2, cover[-1][1] // 2)
    f = handles[plan.key_file[src.key]]
    w = f.get_slice(src.key)[tuple(sl)].to(device)  # type: ignore[attr-defined]
    if src.scale is None:
        return w, None
    ssl = [slice(s, e) for s, e in cover]
    if src.kind == "fp4":
        ssl[-1] = slice(cover[-1][0] // FP4_GROUP, -(-cover[-1][1] // FP4_GROUP))
    else:
        for d, b in ((-2, plan.block[0]), (-1, plan.block[1])):
            ssl[d] = slice(cover[d][0] // b, -(-cover[d][1] // b))
    g = handles[plan.key_file[src.scale]]
    return w, g.get_slice(src.scale)[tuple(ssl)].to(device)  # type: ignore[attr-defined]


def _dequantized(src: _Source, w: torch.Tensor, scale: torch.Tensor | None, plan: _Plan) -> torch.Tensor:
    if src.kind == "plain":
        return w
    assert scale is not None
    if src.kind == "fp4":
        return dequantize_fp4(w, scale, name=src.key)
    return dequantize_fp8_block(w, scale, plan.block, name=src.key)


def _in_target_format(
    src: _Source,
    w: torch.Tensor,
    scale: torch.Tensor | None,
    plan: _Plan,
    tgt: _Target,
    dtype: torch.dtype | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A stored region in the target's format: copied as stored when the formats agree, else
    dequantized and, for a quantized target, re-quantized (on the target's device).

    Raises:
        ValueError: the stored scale holds a NaN (e8m0 byte 0xFF) or an infinity
            (:func:`~sglang_v4.model_loader.quant.check_scale`, naming the scale's key).
    """
    if scale is not None:
        check_scale(scale, src.scale or src.key)
    if tgt.kind == "fp8" and src.kind == "fp8" and w.dtype == FP8_DTYPE and plan.block == FP8_BLOCK:
        assert scale is not None
        return w, scale_to_float(scale)
    if tgt.kind == "fp4" and src.kind == "fp4":
        assert scale is not None
        return w.contiguous().view(torch.uint8), fp4_scale_bytes(scale, src.key)
    t = _dequantized(src, w, scale, plan)
    if tgt.kind == "fp8":
        q, s = quantize_fp8_block(t, FP8_BLOCK, E8M0_DTYPE)
        return q, scale_to_float(s)
    if tgt.kind == "fp4":
        q, s = quantize_fp4(t, name=src.key)
        return q.view(torch.uint8), s.view(torch.uint8)
    if tgt.name.endswith("tid2eid") and t.dtype.is_floating_point:
        t = t.round()
    if dtype is not None and t.dtype.is_floating_point and not keeps_fp32(tgt.name):
        t = t.to(dtype)
    return t, None


def _scale_span(name: str, dim_name: str, off: int, n: int, block: int) -> tuple[int, int]:
    """Block rows of the scale covering ``[off, off + n)`` of a block-scaled weight region that
    starts on a block boundary: the region must start on a block boundary or lie inside one block.

    Raises:
        ValueError: the split breaks a block (naming the weight).
    """
    if off % block == 0:
        return off // block, -(-(off + n) // block)
    if off // block == (off + n - 1) // block:
        return off // block, off // block + 1
    raise ValueError(
        f"{name}: this rank's {dim_name} [{off}, {off + n}) of a {block}-wide FP8 block-scaled weight "
        f"break a {block}x{block} block (the split must fall on block boundaries); use another "
        "--tp-size / --ep-size or --quantization none"
    )


def _load_region(
    src: _Source,
    region: list[Range],
    handles: dict[str, object],
    plan: _Plan,
    tgt: _Target,
    local: list[int],
    dtype: torch.dtype | None,
) -> None:
    """Write the logical ``region`` of a stored tensor into the target at local offsets ``local``
    (one per target dim; the target may have leading dims the source lacks, e.g. the expert index
    of an official per-expert tensor)."""
    full = src.logical_shape
    align = _align(src, tgt, plan)
    cover = [(s // a * a, min(-(-e // a) * a, n)) for (s, e), a, n in zip(region, align, full)]
    w, scale = _read_region(src, handles, plan, cover, tgt.tensor.device)
    w, scale = _in_target_format(src, w, scale, plan, tgt, dtype)
    off = [s - c0 for (s, _), (c0, _) in zip(region, cover)]
    size = [e - s for s, e in region]
    lead = len(local) - len(region)
    tidx: list[int | slice] = [local[d] for d in range(lead)]  # dims the source lacks: an index
    tidx += [slice(local[lead + d], local[lead + d] + size[d]) for d in range(len(region))]
    widx = [slice(o, o + n) for o, n in zip(off, size)]
    sidx: list[int | slice] = []
    stidx: list[int | slice] = []
    if tgt.kind == "fp4":  # the last dim is packed (2 values per byte) with a scale per 32 values
        o, lo, n = off[-1], local[-1], size[-1]
        if o % FP4_GROUP or lo % FP4_GROUP:
            raise ValueError(
                f"{tgt.name}: this rank's FP4 columns [{region[-1][0]}, {region[-1][1]}) do not start on a "
                f"{FP4_GROUP}-value scale group"
            )
        sidx = list(widx[:-1]) + [slice(o // FP4_GROUP, -(-(o + n) // FP4_GROUP))]
        stidx = list(tidx[:-1]) + [slice(lo // FP4_GROUP, -(-(lo + n) // FP4_GROUP))]
        widx[-1] = slice(o // 2, (o + n) // 2)
        tidx[-1] = slice(lo // 2, (lo + n) // 2)
    elif tgt.kind == "fp8":
        sidx, stidx = list(widx), list(tidx)
        for d, what in ((-2, "rows"), (-1, "columns")):
            b0, b1 = _scale_span(tgt.name, what, off[d], size[d], FP8_BLOCK[d])
            sidx[d] = slice(b0, b1)
            lo = local[d]
            if lo % FP8_BLOCK[d]:
                raise ValueError(
                    f"{tgt.name}: local {what} offset {lo} is not on a {FP8_BLOCK[d]}-wide FP8 block"
                )
            stidx[d] = slice(lo // FP8_BLOCK[d], lo // FP8_BLOCK[d] + (b1 - b0))
    tgt.tensor[tuple(tidx)].copy_(w[tuple(widx)])
    if tgt.kind in ("fp8", "fp4"):
        assert tgt.scale is not None and scale is not None
        tgt.scale[tuple(stidx)].copy_(scale[tuple(sidx)])


def _placements(entry: _Entry, full: tuple[int, ...]) -> list[tuple[_Source, list[Range], int]]:
    """Where each stored tensor of ``entry`` sits in the target's full logical coordinates:
    ``(source, ranges per target dim, number of leading target dims the source lacks)``. A single
    tensor covers everything; an official routed expert's ``w1`` / ``w3`` / ``w2`` cover one
    expert index and, for ``gate_up_proj``, the gate or the up rows."""
    if entry.experts is None:
        return [(entry.sources[0], [(0, n) for n in full], 0)]
    out = []
    for e, row in enumerate(entry.experts):
        off = 0
        for src in row:
            n = src.logical_shape[0]
            out.append((src, [(e, e + 1), (off, off + n), *[(0, m) for m in full[2:]]], 1))
            off += n
    return out


def _load_entry(
    entry: _Entry,
    handles: dict[str, object],
    plan: _Plan,
    tgt: _Target,
    shard: TensorShard,
    dtype: torch.dtype | None,
) -> None:
    """Write this rank's part (``shard``) of one checkpoint entry into its target."""
    places = _placements(entry, shard.full_shape)
    for granges, loffs in shard.regions():
        for src, place, lead in places:
            inter = [(max(a, p), min(b, q)) for (a, b), (p, q) in zip(granges, place)]
            if any(s >= e for s, e in inter):
                continue
            region = [(s - p, e - p) for (s, e), (p, _) in list(zip(inter, place))[lead:]]
            local = [lo + (s - a) for lo, (s, _), (a, _) in zip(loffs, inter, granges)]
            _load_region(src, region, handles, plan, tgt, local, dtype)


def _model_ties_embeddings(model: torch.nn.Module) -> bool | None:
    """``tie_word_embeddings`` of the config ``model`` was built from (a runtime model keeps its
    :class:`ModelConfig` as ``mc``, overrides applied), or ``None`` for another module (the
    checkpoint's ``config.json`` then decides)."""
    mc = getattr(model, "mc", None)
    return bool(mc.hf.tie_word_embeddings) if isinstance(mc, ModelConfig) else None


def load_weights_into(
    model: torch.nn.Module,
    model_path: str,
    dtype: torch.dtype | None = None,
    progress: bool = True,
    shards: dict[str, TensorShard] | None = None,
) -> None:
    """Stream a checkpoint into ``model`` (whose ``state_dict()`` keys are HF names), tensor by tensor.

    First checks, from the safetensors headers alone, that every weight of ``model.state_dict()``
    is in the checkpoint with the same (logical, i.e. dequantized) shape and that the checkpoint
    has no other tensor (except the decoder layers beyond the model's depth, skipped with a warning:
    see :func:`_drop_layers_beyond`; when the model's config ties the LM head to the embedding,
    a checkpoint holding only one of the two fills both, as transformers' ``tie_weights`` does);
    then reads one stored tensor at a time (a routed expert's ``w1`` / ``w3``
    / ``w2`` are written straight into their rows of the packed destination, so host memory holds
    one stored tensor, never a stacked fp32 copy), moves it to the destination's device and
    writes it in the destination's format (``layers/quantization.py``): FP8 / FP4 copied as
    published with their scales, or dequantized there (then re-quantized if the destination is
    quantized and the checkpoint is not in its format). ``dtype``, if given, is the intermediate
    dtype of floating tensors cast into plain destinations (``None``: the stored / dequantized one).

    Tensor / expert parallel: ``shards`` (default: ``model.weight_shards()`` when the model has
    it) gives, per HF name, the part of the full tensor this rank holds; the checkpoint must
    have the *full* shape and only that part is read (safetensors slices; official per-expert
    tensors of other ranks' experts are not read at all). FP8 weights are copied with the scales
    of their 128x128 blocks: a split must fall on block boundaries (or inside one block).

    Raises:
        ValueError: listing every problem, one per line, each naming the tensor, the expected
            shape and the found shape (or ``missing`` / ``unexpected``); an FP4 scale that is not
            a power of two for an FP4 destination; a split that breaks an FP8 block.
        FileNotFoundError: no checkpoint at ``model_path``.
    """
    if shards is None:
        get = getattr(model, "weight_shards", None)
        shards = get() if callable(get) else {}
    targets = _targets(model.state_dict())
    full_shapes: dict[str, tuple[int, ...]] = {}
    for k, t in targets.items():
        sh = shards.get(k)
        if sh is not None and sh.local_shape != t.logical_shape:
            raise ValueError(f"{k}: the model holds {t.logical_shape} but its shard is {sh.local_shape}")
        full_shapes[k] = sh.full_shape if sh is not None else t.logical_shape
    plan = _plan(model_path, _model_ties_embeddings(model))
    beyond = _drop_layers_beyond(plan, full_shapes)
    if beyond:
        logger.warning(
            "checkpoint %s has more decoder layers than the model (num_hidden_layers override?): "
            "skipping its %d tensors of layers >= the model's depth",
            model_path,
            beyond,
        )
    found = {e.name: e.shape for e in plan.entries}
    problems = _check_shapes(full_shapes, found)
    if problems:
        raise ValueError(f"checkpoint {model_path} does not match the model:\n  " + "\n  ".join(problems))
    if plan.skipped:
        logger.info("skipping %s", _skip_summary(plan.skipped))
    desc = f"Loading {os.path.basename(os.path.normpath(model_path))} ({plan.fmt} names)"
    t0 = time.perf_counter()
    with torch.no_grad(), ExitStack() as stack:
        handles = {
            p: stack.enter_context(safe_open(p, framework="pt"))
            for p in dict.fromkeys(plan.key_file.values())
        }
        # disable=None: tqdm turns itself off when stderr is not a TTY (no carriage returns in logs)
        requantized: list[str] = []
        for entry in tqdm(plan.entries, desc=desc, unit="tensor", disable=None if progress else True):
            tgt = targets[entry.name]
            shard = shards.get(entry.name) or TensorShard(full_shapes[entry.name])
            _load_entry(entry, handles, plan, tgt, shard, dtype)
            if tgt.kind != "plain" and any(src.kind != tgt.kind for src in entry.sources):
                requantized.append(entry.name)
    check_hash_tables(model, model_path)
    if requantized:
        logger.warning(
            "checkpoint %s: %d tensors are not stored in the format the model keeps them in (e.g. %s); "
            "quantized on load (FP8 e4m3 with 128x128 ue8m0 block scales / FP4 e2m1 with per-32 ue8m0 "
            "scales). Pass --quantization none to keep them as stored.",
            model_path,
            len(requantized),
            requantized[0],
        )
    if progress:
        logger.info("%s: %d tensors in %.1fs", desc, len(plan.entries), time.perf_counter() - t0)


def check_hash_tables(model: torch.nn.Module, model_path: str) -> None:
    """Refuse a hash-routing table ``tid2eid`` (``[vocab, num_experts_per_tok]`` int64, one row of
    expert ids per token id) holding an id that names no expert of its layer.

    Such a table comes from a checkpoint whose routed experts were pruned or re-numbered while the
    table was kept (or from a corrupt file). HF transformers indexes its experts with the table
    and fails on the first token that hits the bad row; a GPU kernel reads outside the expert
    weights. The runtime refuses the checkpoint at start-up instead of failing mid-request.

    Raises:
        ValueError: naming the tensor, the first offending token id, the id found and the valid
            range ``[0, n_routed_experts)`` (the router's rows).
    """
    for name, table in model.named_buffers():
        if not name.endswith("tid2eid"):
            continue
        n_experts = int(model.get_submodule(name.rsplit(".", 1)[0]).weight.shape[0])
        bad = (table < 0) | (table >= n_experts)
        if bool(bad.any()):
            tok, slot = (int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{name}: token {tok} is routed to expert {int(table[tok, slot])} (slot {slot}), outside "
                f"[0, {n_experts}) (n_routed_experts) in checkpoint {model_path}: the hash-routing table "
                "does not match the model's experts"
            )


def _problem_file(plan: _Plan, model_path: str, name: str, found: dict[str, _Entry]) -> str:
    """The file a checkpoint problem with HF tensor ``name`` is in: the shard holding it, else
    the shard ``model.safetensors.index.json`` lists for it (a tensor missing from its shard; the
    text says so), else the index (or the one checkpoint file)."""
    entry = found.get(name)
    if entry is not None:
        return plan.key_file[entry.sources[0].key]
    weight_map = index_weight_map(model_path)
    for stored in (name, hf_to_official(name)):
        if stored is not None and stored in weight_map:
            return os.path.join(model_path, weight_map[stored]) + f" (where {INDEX_FILE} lists {stored})"
    if weight_map:
        return os.path.join(model_path, INDEX_FILE)
    files = sorted(set(plan.key_file.values()))
    return files[0] if len(files) == 1 else model_path


def _holds_no_tensors(model_path: str) -> bool:
    """Whether every safetensors file of the checkpoint is readable and holds no tensor at all."""
    try:
        for path in checkpoint_files(model_path):
            with safe_open(path, framework="pt") as f:
                if len(f.keys()):
                    return False
    except Exception:  # noqa: BLE001 - unreadable: not "empty"; check_checkpoint names the problem
        return False
    return True


def check_checkpoint(model_path: str, model_config: ModelConfig, allow_empty: bool = False) -> None:
    """Check, from the safetensors headers alone (no tensor data read), that the checkpoint at
    ``model_path`` holds exactly the tensors the model of ``model_config`` loads, with their
    shapes: what :func:`load_weights_into` checks before copying anything, run before any process
    loads the model.

    The model's tensors and shapes come from the runtime model built on the meta device
    (unquantized, one rank: the full logical shapes a checkpoint stores); decoder layers beyond
    its depth are ignored as :func:`load_weights_into` skips them. With ``allow_empty``, a
    checkpoint whose files hold no tensor at all (a placeholder, e.g. for a scheduler that loads no
    weights) passes with a warning; :func:`load_weights_into` still refuses it.

    Raises:
        ValueError: one line naming the file and the tensor: a missing shard or a file that is not
            safetensors, a tensor stored twice, an FP8 weight without its scale, a scale of the
            wrong shape (see :func:`~sglang_v4.model_loader.loader._plan`), a tensor of another
            quantization method's layout or an integer weight without a scale
            (:mod:`~sglang_v4.model_loader.foreign_quant`); a tensor the model
            needs that is missing (with the shard the index lists for it), one with another shape
            (both shapes), or one the model does not have; with ``(and N more: ...)`` when
            several tensors are wrong.
    """
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    if allow_empty and _holds_no_tensors(model_path):
        logger.warning("checkpoint %s holds no tensors: not checked against the model", model_path)
        return
    with torch.device("meta"):
        model = DeepseekV4ForCausalLM(model_config, torch.bfloat16, "meta", None, None)
    expected = {k: t.logical_shape for k, t in _targets(model.state_dict()).items()}
    del model
    try:
        plan = _plan(model_path, bool(model_config.hf.tie_word_embeddings))
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    _drop_layers_beyond(plan, expected)
    found = {e.name: e for e in plan.entries}
    problems: list[tuple[str, str]] = []  # (file, what)
    for name, shape in expected.items():
        entry = found.get(name)
        if entry is None:
            official = hf_to_official(name) if plan.fmt == "official" else None
            also = f" (official name {official})" if official else ""
            problems.append((_problem_file(plan, model_path, name, found), f"{name}{also}: missing"))
        elif tuple(entry.shape) != tuple(shape):
            key = entry.sources[0].key
            stored = f" (stored as {key})" if key != name and entry.experts is None else ""
            problems.append(
                (
                    _problem_file(plan, model_path, name, found),
                    f"{name}{stored}: expected shape {list(shape)}, found shape {list(entry.shape)}",
                )
            )
    for name, entry in found.items():
        if name not in expected:
            problems.append(
                (
                    _problem_file(plan, model_path, name, found),
                    f"{entry.sources[0].key}: unexpected tensor (shape {list(entry.shape)}), not in the model",
                )
            )
    if problems:
        (path, what), rest = problems[0], problems[1:]
        more = f" (and {len(rest)} more: {', '.join(w.split(':')[0] for _, w in rest[:3])}{', ...' if len(rest) > 3 else ''})"
        raise ValueError(f"{path}: {what}{more if rest else ''}")


def weight_nbytes(model: torch.nn.Module) -> int:
    """Bytes of every tensor in ``model.state_dict()`` (weights, scales, tables)."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())
