"""``GET /v1/loads``: SGLang's load report per data-parallel rank (``srt/entrypoints/v1_loads.py``,
``LoadSnapshot.to_dict`` in ``srt/managers/load_snapshot.py``, SGLang 0.5.23).

Query parameters (all optional): ``dp_rank`` (an integer: only that rank; one out of range gives an
empty ``loads``), ``include`` (comma-separated sections among ``core``, ``memory``, ``spec``,
``lora``, ``disagg``, ``queues``, ``all``; default all; another name is a 400
``{"detail": ...}`` as SGLang's), ``format`` (``prometheus``: the numbers as Prometheus gauges
``sglang_<key>{dp_rank="0"}``, sections prefixed ``sglang_<section>_``; anything else: JSON).

JSON answer: ``{"timestamp": ISO-8601 UTC, "version", "accelerator": device name or null,
"num_accelerators": devices behind one rank (tp size), "loads": [load]}``; each ``load`` has
SGLang's core keys (``timestamp`` in seconds since the epoch, ``dp_rank``, ``num_running_reqs``,
``num_waiting_reqs``, ``num_waiting_uncached_tokens``, ``num_used_tokens``, ``num_total_tokens``
= used + queued tokens, ``num_active_tokens``, ``num_prealloc_ready_tokens``,
``max_total_num_tokens``, ``max_running_requests``, ``token_usage``, ``gen_throughput`` (tokens/s),
``cache_hit_rate``, ``utilization``, ``total_prefill_uncached_tokens``,
``total_prefill_busy_us``, ``decode_moments``) and the sections this runtime has:
``disaggregation`` (``mode: "null"``: no prefill/decode disaggregation here) and ``queues``.
Without speculative decoding, LoRA or disaggregation their sections are left out and the
counters that only they move stay 0, as in SGLang; ``utilization`` is 0 as SGLang 0.5.23 reports
it (``max_running_requests_under_SLO`` is never set there). ``memory`` is left out: the KV pool
size is ``max_total_num_tokens``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sglang_v4.entrypoints.native_api import json_response
from sglang_v4.managers.tokenizer_manager import RequestError, TokenizerManager
from sglang_v4.server_args import ServerArgs
from sglang_v4.version import __version__

#: SGLang's ``LoadSnapshot.VALID_SECTIONS``.
VALID_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
#: section key in a load -> its ``include`` name
_SECTION_NAMES = {
    "memory": "memory",
    "speculative": "spec",
    "lora": "lora",
    "disaggregation": "disagg",
    "queues": "queues",
}
#: Prometheus prefix of a section (SGLang's ``_format_loads_prometheus``)
_PROM_PREFIX = {"speculative": "spec", "disaggregation": "disagg"}


def build_load(metrics: dict[str, Any], dp_rank: int = 0) -> dict[str, Any]:
    """One rank's load (every section) from ``Scheduler.get_metrics()`` (``metrics``)."""
    used = int(metrics.get("num_used_tokens", 0))
    total = used + int(metrics.get("num_waiting_tokens", 0))
    waiting = int(metrics.get("num_queue_reqs", 0))
    return {
        "timestamp": time.time(),
        "dp_rank": dp_rank,
        "num_running_reqs": int(metrics.get("num_running_reqs", 0)),
        "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": int(metrics.get("num_waiting_uncached_tokens", 0)),
        "num_used_tokens": used,
        "num_total_tokens": total,
        "num_active_tokens": total,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": int(metrics.get("max_total_num_tokens", 0)),
        "max_running_requests": int(metrics.get("max_running_requests", 0)),
        "token_usage": round(float(metrics.get("token_usage", 0.0)), 4),
        "gen_throughput": round(float(metrics.get("gen_throughput", 0.0)), 2),
        "cache_hit_rate": round(float(metrics.get("cache_hit_rate", 0.0)), 4),
        "utilization": 0.0,
        "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0,
        "decode_moments": None,
        "disaggregation": {
            "mode": "null",
            "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0,
            "decode_transfer_queue_reqs": 0,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        },
        "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
    }


def select_sections(load: dict[str, Any], include: set[str] | None) -> dict[str, Any]:
    """``load`` with only the sections ``include`` names (``None`` or ``all``: every one).

    Raises:
        ValueError: ``include`` names a section SGLang does not know (the message lists them).
    """
    if include is None or "all" in include:
        return load
    if not include <= VALID_SECTIONS:
        raise ValueError(
            f"Invalid include sections: {include - VALID_SECTIONS}. Valid options: {sorted(VALID_SECTIONS)}"
        )
    return {k: v for k, v in load.items() if k not in _SECTION_NAMES or _SECTION_NAMES[k] in include}


def prometheus_text(loads: list[dict[str, Any]]) -> str:
    """SGLang's Prometheus form of ``loads``: one gauge per number, sections' numbers as
    ``sglang_<section>_<key>``, each sample labelled with its ``dp_rank``."""
    samples: dict[str, list[tuple[int, Any]]] = {}
    for load in loads:
        rank = load["dp_rank"]
        for key, value in load.items():
            if key == "dp_rank":
                continue
            if isinstance(value, dict):
                prefix = _PROM_PREFIX.get(key, key)
                for sub, v in value.items():
                    if isinstance(v, (int, float)):
                        samples.setdefault(f"sglang_{prefix}_{sub}", []).append((rank, v))
            elif isinstance(value, (int, float)):
                samples.setdefault(f"sglang_{key}", []).append((rank, value))
    lines: list[str] = []
    for name, vals in samples.items():
        lines.append(f"# TYPE {name} gauge")
        lines += [f'{name}{{dp_rank="{rank}"}} {v}' for rank, v in vals]
    return "\n".join(lines) + "\n"


def create_loads_router(tm_or_503: Callable[[], TokenizerManager], server_args: ServerArgs) -> APIRouter:
    """The ``/v1/loads`` route (see the module docstring)."""
    router = APIRouter()

    @router.get("/v1/loads")
    async def get_loads(request: Request) -> Response:
        q = request.query_params
        raw_rank, include_raw = q.get("dp_rank"), q.get("include")
        try:
            dp_rank = int(raw_rank) if raw_rank is not None else None
        except ValueError:
            return json_response({"detail": f"dp_rank must be an integer, got {raw_rank!r}."}, 422)
        include = {s.strip() for s in include_raw.split(",")} if include_raw else None
        try:
            tm = tm_or_503()
            metrics = await tm.get_scheduler_metrics()
        except RequestError as e:
            return json_response({"detail": str(e)}, e.status_code)
        metrics.setdefault("max_total_num_tokens", tm.scheduler_info.max_total_num_tokens)
        loads = [] if dp_rank not in (None, 0) else [build_load(metrics)]
        try:  # as SGLang's, an invalid section is refused only when there is a load to select from
            loads = [select_sections(load, include) for load in loads]
        except ValueError as e:
            return json_response({"detail": str(e)}, 400)
        if q.get("format") == "prometheus":
            return Response(prometheus_text(loads), media_type="text/plain; version=0.0.4; charset=utf-8")
        return json_response(
            {
                "timestamp": datetime.now(timezone.utc).isoformat(),
                "version": __version__,
                "accelerator": _accelerator_name(server_args.device),
                "num_accelerators": int(server_args.tp_size),
                "loads": loads,
            }
        )

    return router


def _accelerator_name(device: str | None) -> str | None:
    """The device's marketing name (``torch.cuda.get_device_name``), ``None`` off CUDA."""
    if device not in (None, "auto") and not str(device).startswith("cuda"):
        return None
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None
