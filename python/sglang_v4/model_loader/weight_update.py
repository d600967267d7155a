"""Weights of a running model: reload them from another checkpoint of the same architecture
(SGLang's ``/update_weights_from_disk``) and read a parameter back by its checkpoint name
(SGLang's ``/get_weights_by_name``).

A reload is checked before any weight is written: the new ``config.json`` must describe the
served architecture (:func:`config_mismatch`: every field of the parsed config except metadata
and the storage format), and the checkpoint's safetensors headers must hold exactly the tensors
of the model with their shapes (:func:`~sglang_v4.model_loader.weight_loader.check_checkpoint`).
Only then are the tensors streamed into the live model, in place
(:func:`~sglang_v4.model_loader.weight_loader.load_weights_into`, the start-up loader), so every
parameter keeps its storage (CUDA graphs captured on it stay valid).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.distributed.sharding import TensorShard

from .quant import dequantize_fp4, dequantize_fp8_block
from .weight_loader import _targets, check_checkpoint, load_weights_into

logger = logging.getLogger(__name__)

#: ``config.json`` fields that describe the file or training, not the computation: a new
#: checkpoint may differ in them (``quantization_config``: the loader converts formats).
_CONFIG_METADATA_KEYS = frozenset(
    {
        "_name_or_path",
        "architectures",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "quantization_config",
        "id2label",
        "label2id",
        "problem_type",
        "output_hidden_states",
        "output_attentions",
        "output_router_logits",
        "return_dict",
        "use_cache",
        "initializer_range",
        "router_aux_loss_coef",
        "router_jitter_noise",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
        "auto_map",
    }
)


def config_mismatch(
    served: ModelConfig, model_path: str, overrides: dict[str, Any] | None = None
) -> str | None:
    """Why the checkpoint at ``model_path`` cannot replace the weights of ``served``, judged from
    its ``config.json`` (read with the server's ``--json-model-override-args`` ``overrides``), or
    ``None`` when its architecture is the same.

    Compared: every field ``DeepseekV4Config`` defines (its ``to_dict()``), except
    :data:`_CONFIG_METADATA_KEYS`; keys a ``config.json`` dialect only passes through (DeepSeek's
    ``topk_method``, ``expert_dtype``, ...) are not compared, so the official and the HF files of
    one model match. The message names up to three differing fields with both values.
    """
    try:
        new = ModelConfig.from_pretrained(model_path, overrides)
    except FileNotFoundError:
        return f"model_path {model_path!r} has no config.json."
    except (OSError, ValueError) as e:
        return f"config.json of {model_path!r} is not a DeepSeek-V4 config: {e}"
    a, b = served.hf.to_dict(), new.hf.to_dict()
    keys = sorted(set(type(served.hf)().to_dict()) - _CONFIG_METADATA_KEYS)
    diff = [k for k in keys if a.get(k) != b.get(k)]
    if not diff:
        return None
    shown = ", ".join(f"{k}: {b.get(k)!r} (served: {a.get(k)!r})" for k in diff[:3])
    more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
    return (
        f"The config of {model_path!r} does not match the served model's architecture: {shown}{more}. "
        "update_weights_from_disk loads checkpoints of the same architecture only."
    )


def check_update(served: ModelConfig, model_path: str, overrides: dict[str, Any] | None = None) -> None:
    """Everything a reload from ``model_path`` is checked on before a weight is written.

    Raises:
        ValueError: the config differs (:func:`config_mismatch`), or a tensor is missing, extra,
            of another shape, or a file is unreadable (:func:`check_checkpoint`; the message
            names the file and the tensor).
    """
    why = config_mismatch(served, model_path, overrides)
    if why is not None:
        raise ValueError(why)
    check_checkpoint(model_path, served)


def reload_weights(model: torch.nn.Module, model_path: str) -> None:
    """Stream the checkpoint at ``model_path`` into ``model`` in place (this rank's shards).

    Raises:
        ValueError / FileNotFoundError / OSError: as
            :func:`~sglang_v4.model_loader.weight_loader.load_weights_into`; the model may then
            hold a mix of old and new tensors (the caller reloads the previous checkpoint).
    """
    load_weights_into(model, model_path, progress=False)


def is_sharded(model: torch.nn.Module, name: str) -> bool:
    """Whether this rank holds only part of parameter ``name`` (tensor / expert parallel)."""
    get = getattr(model, "weight_shards", None)
    shards: dict[str, TensorShard] = get() if callable(get) else {}
    sh = shards.get(name)
    return sh is not None and tuple(sh.local_shape) != tuple(sh.full_shape)


def loadable_names(model: torch.nn.Module) -> list[str]:
    """The checkpoint (HF) names of the tensors the loader fills, sorted."""
    return sorted(_targets(model.state_dict()))


def weights_by_name(
    model: torch.nn.Module, name: str, truncate_size: int = 100, tp_size: int = 1
) -> list[Any]:
    """The first ``truncate_size`` rows (entries along dim 0) of parameter ``name`` as float32
    nested lists, as SGLang's ``get_weights_by_name`` returns them (``tensor[:truncate_size]``).

    ``name`` is the checkpoint's HF name (``model.layers.0.self_attn.q_a_proj.weight``, ...);
    quantized weights (FP8 blocks, packed FP4) are returned dequantized, in their logical shape.

    Raises:
        KeyError: ``name`` is not a weight of the model (the message lists a few that are).
        ValueError: ``tp_size > 1`` and this rank holds only part of the parameter.
    """
    targets = _targets(model.state_dict())
    tgt = targets.get(name)
    if tgt is None:
        close = [n for n in sorted(targets) if name.rsplit(".", 1)[0] in n][:3] or sorted(targets)[:3]
        raise KeyError(f"name: {name!r} is not a parameter of the model (e.g. {', '.join(close)}).")
    if tp_size > 1 and is_sharded(model, name):
        raise ValueError(
            f"name: {name!r} is split over the {tp_size} tensor-parallel ranks; get_weights_by_name "
            "reads only the parameters every rank holds whole (not supported with --tp-size > 1)."
        )
    with torch.no_grad():
        t = tgt.tensor
        if tgt.kind == "fp8":
            assert tgt.scale is not None
            t = dequantize_fp8_block(t, tgt.scale)
        elif tgt.kind == "fp4":
            assert tgt.scale is not None
            t = dequantize_fp4(t, tgt.scale, name)
        rows = t[:truncate_size] if t.dim() > 0 else t
        return rows.detach().to(device="cpu", dtype=torch.float32).tolist()


def swap_weights(model: torch.nn.Module, tp: Any, model_path: str, previous_path: str | None) -> None:
    """Reload ``model`` from ``model_path`` on this rank, agreeing with the other TP ranks.

    Runs on every rank of the tensor-parallel group ``tp`` (a
    :class:`~sglang_v4.distributed.parallel_state.TPGroup`; rank 0 has already checked the
    checkpoint with :func:`check_update`): each rank reloads its shard, then the ranks take the
    minimum of their success flags (``tp.min_int``). If any rank failed, every rank reloads
    ``previous_path`` (the checkpoint served before), so the ranks never serve different weights.

    Raises:
        ValueError: the reload failed on some rank (the weights of ``previous_path`` are back;
            without ``previous_path``, a model with dummy weights, or when reloading it failed
            too, e.g. the checkpoint was deleted, they may be partly replaced, and the message
            says so).
    """
    err: Exception | None = None
    try:
        reload_weights(model, model_path)
    except Exception as e:  # noqa: BLE001 - any failure is agreed on and rolled back
        err = e
        logger.error("Reloading the weights from %s failed: %s: %s", model_path, type(e).__name__, e)
    if tp.min_int(0 if err is not None else 1) == 1:
        return
    why = f"{type(err).__name__}: {err}" if err is not None else "another tensor-parallel rank failed"
    if previous_path is None:
        raise ValueError(f"Failed to update weights: {why}. The previous weights cannot be reloaded.")
    try:
        reload_weights(model, previous_path)
    except Exception as e:  # noqa: BLE001 - the server keeps running and says what it serves
        logger.error("Rolling back to %s failed: %s: %s", previous_path, type(e).__name__, e)
        raise ValueError(
            f"Failed to update weights: {why}. Rolling back to {previous_path!r} failed too "
            f"({type(e).__name__}: {e}): the served weights may be partly replaced; update from a "
            "complete checkpoint or restart the server."
        ) from None
    raise ValueError(f"Failed to update weights: {why}. Rolled back to the weights of {previous_path!r}.")
