"""The model-directory checks that read the model config with transformers (and so import torch).

:func:`~sglang_v4.entrypoints.launcher.check_model_dir` runs them in two parts around its own
file and tokenizer checks: :func:`check_model_config` (the config parsed as DeepSeek-V4, its
architectures, the quantization, the flags that depend on the model: page size, context length,
parallel layout) before the tokenizer, :func:`check_model_weights` (the safetensors headers
against the model's tensors) after it. ``launch_server`` runs both in its prewarmed scheduler
process (:func:`check_config_in_child`, then :func:`check_weights_in_child`, each through
:meth:`~sglang_v4.entrypoints.prewarm.PrewarmedChild.call`), which imports torch and transformers to load the model anyway, while its own process loads the
tokenizer: the HTTP process then never imports torch, which saves seconds of CPU per start.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["check_config_in_child", "check_model_config", "check_model_weights", "check_weights_in_child"]


def check_model_config(
    model_path: str,
    raw: dict[str, Any],
    model_overrides: dict[str, Any] | None,
    load_format: str,
    quantization: str | None,
    page_size: int | None,
    context_length: int | None,
    tp_size: int,
    ep_size: int,
    device: str,
) -> Any:
    """The checks of ``model_path``'s config (``raw``: its ``config.json`` as read) that need the
    parsed :class:`~sglang_v4.configs.model_config.ModelConfig`, in
    :func:`~sglang_v4.entrypoints.launcher.check_model_dir`'s order; the arguments as there.

    Returns:
        The ``ModelConfig`` (``model_overrides`` applied).

    Raises:
        ValueError: as :func:`~sglang_v4.entrypoints.launcher.check_model_dir` documents for the
            config, ``architectures``, the quantization, ``page_size``, ``context_length`` and
            ``tp_size`` / ``ep_size``.
    """
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.entrypoints.launcher import (
        check_architectures,
        check_context_length,
        check_modelopt_config,
        check_page_size,
    )

    cfg = os.path.join(model_path, "config.json")
    try:
        mc = ModelConfig.from_pretrained(model_path, model_overrides)
    except ValueError as e:
        raise ValueError(f"model_path: {cfg} does not parse as a DeepSeek-V4 config: {e}") from None
    # an ``architectures`` of --json-model-override-args replaces the file's, as in SGLang
    check_architectures({**raw, **(model_overrides or {})}.get("architectures"), cfg)
    from sglang_v4.layers.quantization import resolve_quantization
    from sglang_v4.model_loader.expert_format import stored_expert_format
    from sglang_v4.model_loader.foreign_quant import check_quant_side_files

    # the routed experts' stored format (one safetensors header entry) decides theirs where definite
    stored = stored_expert_format(model_path).fmt if load_format != "dummy" else None
    try:
        resolve_quantization(quantization, mc.hf, "cuda", stored)
        quant = resolve_quantization(quantization, mc.hf, device, stored)
    except ValueError as e:
        raise ValueError(f"model_path: {cfg}: {e}") from None
    check_modelopt_config(model_path)
    check_quant_side_files(model_path)
    if page_size is not None:
        check_page_size(page_size, mc)
    if context_length is not None:
        check_context_length(context_length, mc)
    if tp_size > 1 or ep_size > 1:
        from sglang_v4.distributed.parallel_state import check_parallel_layout

        check_parallel_layout(
            mc.hf, tp_size, ep_size, fp4_experts=quant is not None and quant.experts == "fp4"
        )
    return mc


def check_model_weights(model_path: str, mc: Any, load_format: str) -> None:
    """The safetensors headers of ``model_path`` hold the tensors of ``mc`` (a ``ModelConfig``)
    with their shapes (:func:`~sglang_v4.model_loader.weight_loader.check_checkpoint`); nothing to
    check with ``load_format="dummy"`` or a scheduler class set by ``$SGLANG_V4_SCHEDULER_CLASS``
    (it loads its own weights).

    Raises:
        ValueError: naming ``model_path``, the file and the tensor.
    """
    from sglang_v4.managers.scheduler_process import SCHEDULER_CLASS_ENV

    if load_format != "dummy" and not os.environ.get(SCHEDULER_CLASS_ENV):
        from sglang_v4.model_loader.weight_loader import check_checkpoint

        try:
            check_checkpoint(model_path, mc, allow_empty=True)
        except ValueError as e:
            raise ValueError(f"model_path: {' '.join(str(e).split())}") from None


#: The ``ModelConfig`` :func:`check_config_in_child` made, for :func:`check_weights_in_child`
#: (the next call the same child answers), by model path.
_checked_configs: dict[str, Any] = {}


def check_config_in_child(model_path: str, *args: Any) -> None:
    """:func:`check_model_config` (arguments as there) in the prewarmed scheduler child; the
    ``ModelConfig`` is kept here for :func:`check_weights_in_child` instead of being sent back
    (unpickling it would import transformers in the parent)."""
    _checked_configs.pop(model_path, None)
    _checked_configs[model_path] = check_model_config(model_path, *args)


def check_weights_in_child(model_path: str, load_format: str) -> None:
    """:func:`check_model_weights` on the config :func:`check_config_in_child` kept for
    ``model_path`` (nothing to check when that call failed: its error is raised first). A call of
    its own, so that its log records reach the parent only when the parent's checks before it
    passed, as in process."""
    mc = _checked_configs.pop(model_path, None)
    if mc is not None:
        check_model_weights(model_path, mc, load_format)
