"""The ``get_model_info`` and ``get_server_info`` answers, one builder each for the HTTP server's
routes (``/get_model_info`` / ``/model_info``, ``/get_server_info`` / ``/server_info``) and the
offline ``Engine``'s methods of the same names, plus the ``config.json`` read they start from
(:func:`read_model_config`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from sglang_v4.managers.control_struct import SchedulerReadyInfo
from sglang_v4.server_args import ServerArgs

__all__ = ["build_model_info", "build_server_info", "read_model_config"]


def read_model_config(model_path: str) -> dict[str, Any]:
    """``config.json`` of the model directory ``model_path`` as a dict; ``{}`` when it is missing
    or not JSON."""
    try:
        with open(os.path.join(model_path, "config.json"), encoding="utf-8-sig") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def build_model_info(
    server_args: ServerArgs, hf_config: dict[str, Any], context_len: int, vocab_size: int
) -> dict[str, Any]:
    """The ``get_model_info`` answer, one builder for ``/get_model_info`` (``/model_info``) and
    :meth:`Engine.get_model_info`: SGLang's fields (``model_path``, ``served_model_name``,
    ``tokenizer_path``, ``is_generation``, ``preferred_sampling_params``, ``weight_version``,
    ``load_format``, the parsers in effect (``reasoning_parser`` / ``tool_call_parser``, ``auto``
    resolved: SGLang reports what runs, not what was asked for), ``disaggregation_mode`` (always
    SGLang's ``"null"`` here: no prefill/decode split), ``has_image_understanding``,
    ``has_audio_understanding``) plus the served
    model's ``model_type`` / ``architectures`` (from ``hf_config``, its ``config.json`` with the
    overrides applied), ``context_length`` and ``vocab_size`` (tokens)."""
    return {
        "model_path": server_args.model_path,
        "served_model_name": server_args.resolved_served_model_name(),
        "tokenizer_path": server_args.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": server_args.preferred_sampling_params,
        "weight_version": server_args.weight_version,
        "load_format": server_args.load_format,
        "reasoning_parser": server_args.reasoning_parser,
        "tool_call_parser": server_args.tool_call_parser,
        "disaggregation_mode": "null",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": hf_config.get("model_type"),
        "architectures": hf_config.get("architectures"),
        "context_length": context_len,
        "vocab_size": vocab_size,
    }


async def build_server_info(
    server_args: ServerArgs, scheduler_info: SchedulerReadyInfo, tm: Any
) -> dict[str, Any]:
    """The ``get_server_info`` answer, one builder for ``/get_server_info`` and
    :meth:`Engine.get_server_info` (SGLang's shape: the server arguments, the scheduler's limits,
    its live state, also under ``internal_states``, then ``startup_time`` (seconds since the
    epoch) and ``version``).

    Raises:
        RequestError: (from the tokenizer manager) the scheduler did not answer.
    """
    from sglang_v4.version import __version__

    live = await tm.get_internal_state()
    return {
        **server_args.to_dict(),
        "max_total_num_tokens": scheduler_info.max_total_num_tokens,
        "max_req_input_len": scheduler_info.max_req_input_len,
        "context_len": scheduler_info.context_len,
        **live,
        "internal_states": [live],
        "startup_time": tm.startup_time,
        "version": __version__,
    }
