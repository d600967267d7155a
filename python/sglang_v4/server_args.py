"""Server arguments: one dataclass shared by ``launch_server``, ``Engine`` and every process.

The flag names follow SGLang 0.5.x ``srt/server_args.py`` (``--model-path``, ``--page-size``,
``--mem-fraction-static``, ...); ``docs/ARCHITECTURE.md`` lists the interfaces they feed.
``ServerArgs`` is resolved and validated in ``__post_init__``: the ``auto`` values of ``device``,
``dtype`` and ``chunked_prefill_size`` are replaced by concrete ones, and any bad value raises a
``ValueError`` that names the field. The object is pickled into the child processes unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any

from sglang_v4.layers.quantization import check_quantization_flag
from sglang_v4.managers.request_log import LOG_REQUESTS_FORMATS, LOG_REQUESTS_LEVELS
from sglang_v4.server_args_compat import (
    SGLangCompatArgs,
    apply_sglang_semantics,
    check_sglang_args,
)

DEVICE_CHOICES = ("auto", "cpu", "cuda")
DTYPE_CHOICES = ("auto", "float32", "bfloat16")
KV_CACHE_DTYPE_CHOICES = ("auto", "bf16", "fp8_e4m3")
#: SGLang spellings of the same KV dtypes.
KV_CACHE_DTYPE_ALIASES = {"bfloat16": "bf16"}
#: SGLang spellings of the same weight dtype / load format (``--dtype float``, ``--load-format
#: safetensors``: the loader reads safetensors checkpoints only, which is what ``auto`` means here).
DTYPE_ALIASES = {"float": "float32"}
LOAD_FORMAT_ALIASES = {"safetensors": "auto"}
#: ``--grammar-backend``: xgrammar (constrained decoding, the only implementation here) or none
#: (no constrained decoding: requests with a grammar are refused, as in SGLang).
GRAMMAR_BACKEND_CHOICES = ("xgrammar", "none")
#: ``--schedule-policy``: SGLang's policies (``sglang_v4.managers.schedule_policy`` says what each does).
SCHEDULE_POLICY_CHOICES = ("fcfs", "lpm", "random", "dfs-weight", "lof", "hrrn", "shortest-prefill-first")
#: SGLang's other ``--schedule-policy`` choices, refused with the reason.
SCHEDULE_POLICY_REFUSED = {
    "priority": "SGLang lists it but has no such policy; use --enable-priority-scheduling",
    "routing-key": "requests carry no routing_key here, so it could not order anything",
}
#: ``sglang-router`` policies for ``--dp-size`` (its ``--policy`` values).
ROUTER_POLICY_CHOICES = ("cache_aware", "round_robin", "random", "power_of_two")
LOAD_FORMAT_CHOICES = ("auto", "dummy")
LOG_LEVEL_CHOICES = ("debug", "info", "warning", "error", "critical")
#: ``--log-level`` is read as Python's ``logging`` level names are (SGLang's ``getattr(logging,
#: level.upper())``): any case, and the names ``warn`` / ``fatal``.
LOG_LEVEL_ALIASES = {"warn": "warning", "fatal": "critical"}

#: Default chunked-prefill chunk on CPU and on CUDA: the most prompt tokens one request prefills in
#: a step, and the most prompt tokens a step carries while requests are decoding (decode
#: protection: a long prompt adds at most this much to a decode step).
DEFAULT_CHUNKED_PREFILL_CPU = 2048
DEFAULT_CHUNKED_PREFILL_CUDA = 2048


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - torch always importable in this project
        return False


@dataclass
class ServerArgs(SGLangCompatArgs):  # type: ignore[misc, valid-type]
    """All runtime options (every ``--flag`` of ``python -m sglang_v4.launch_server``).

    Values after construction are resolved: ``device`` is ``"cpu"`` or ``"cuda"``; ``dtype`` is
    ``"float32"`` or ``"bfloat16"`` (``auto``: float32 on CPU, bfloat16 on CUDA);
    ``chunked_prefill_size`` is a positive token count (``-1`` disables chunking, as in SGLang).
    ``model_path=None`` means the embedded default model; ``launch_server`` / ``Engine`` replace it
    by the directory that ``sglang_v4.tools.default_model.ensure_default_model()`` returns before
    starting the child processes.

    SGLang's other server flags are accepted as the fields of ``SGLangCompatArgs``
    (:mod:`sglang_v4.server_args_compat`): backend / tuning selections are ignored (logged at
    start-up), unimplemented features that would change results are refused.

    Raises:
        ValueError: naming the offending field, e.g. ``page_size must be a positive multiple of
            128 (got 100)``, or an unsupported SGLang flag, e.g. ``enable_lora (--enable-lora
            True) is not supported: ...``.
    """

    # Model and tokenizer.
    model_path: str | None = None
    tokenizer_path: str | None = None
    skip_tokenizer_init: bool = False
    load_format: str = "auto"
    quantization: str | None = None
    context_length: int | None = None
    #: SGLang's ``--json-model-override-args``: a JSON object whose keys replace those of the
    #: model's ``config.json`` (either dialect) before it is parsed, e.g. ``{"num_hidden_layers": 2}``.
    json_model_override_args: str | None = None
    #: The model id of the APIs; of several (vLLM's ``--served-model-name a b``, or a list) the first
    #: stays here and the others go to ``served_model_aliases`` (all accepted and listed).
    served_model_name: str | list[str] | None = None
    served_model_aliases: list[str] = field(default_factory=list)
    # HTTP.
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    #: SGLang's ``--admin-api-key``: the key of the admin routes (``/flush_cache``,
    #: ``/abort_request``), which then do not accept ``api_key`` (``entrypoints/admission.py``).
    admin_api_key: str | None = None
    #: HTTPS (SGLang's ``--ssl-*``, handed to uvicorn): a PEM certificate chain and its private key
    #: (both or neither), the CA bundle that verifies client certificates, the key's password.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_keyfile_password: str | None = None
    # Device and dtypes.
    device: str = "auto"
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    enable_fp4_indexer: bool = False
    # Parallelism (docs/PARALLELISM.md).
    tp_size: int = 1
    ep_size: int = 1
    dp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    dist_timeout: int | None = None
    base_gpu_id: int = 0
    router_policy: str = "cache_aware"
    # Memory.
    page_size: int = 256
    mem_fraction_static: float | None = None
    max_total_tokens: int | None = None
    # Scheduling.
    max_running_requests: int | None = None
    #: SGLang's ``--max-queued-requests``: a request arriving when this many wait is refused with
    #: 503 "The request queue is full." (with priority scheduling, a queued request of lower
    #: priority is refused instead). None: no bound.
    max_queued_requests: int | None = None
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int | None = None
    disable_radix_cache: bool = False
    resume_interval: int = 1
    schedule_policy: str = "fcfs"
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    #: With priority scheduling, a queued request whose priority beats a running request's by more
    #: than this preempts it (SGLang's ``--priority-scheduling-preemption-threshold``).
    priority_scheduling_preemption_threshold: int = 10
    #: With priority scheduling, never preempt running requests (SGLang's flag).
    disable_priority_preemption: bool = False
    #: With priority scheduling, the priority of a request that sends none; None: the least
    #: preferred value (SGLang's ``--default-priority-value``).
    default_priority_value: int | None = None
    #: Without priority scheduling, refuse a request that sends a priority with a 503 (SGLang's).
    abort_on_priority_when_disabled: bool = False
    stream_interval: int = 1
    disable_overlap_schedule: bool = False
    # CUDA graphs.
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    #: Explicit decode batch sizes to capture (SGLang's ``--cuda-graph-bs``); None: the default buckets.
    cuda_graph_bs: list[int] | None = None
    #: Largest extend / mixed step (new tokens) replayed from a CUDA graph; 0: decode graphs only.
    cuda_graph_max_extend_tokens: int = 1024
    indexer_stream_max_bs: int = 4
    cuda_graph_warmup_ctx: int = 4096
    # Observability.
    enable_metrics: bool = False
    enable_cache_report: bool = False
    #: Directory of the uploaded and batch-result files (``/v1/files``, ``/v1/batches``); None: a
    #: temporary directory per server, removed when it stops.
    file_storage_path: str | None = None
    #: Histogram bucket bounds in seconds of ``/metrics`` (SGLang's ``--bucket-*``); None: defaults.
    bucket_time_to_first_token: list[float] | None = None
    bucket_inter_token_latency: list[float] | None = None
    bucket_e2e_request_latency: list[float] | None = None
    log_requests: bool = False
    #: ``--log-requests`` detail (0: metadata .. 3: whole input / output) and line format
    #: (``text`` / ``json``), SGLang's meanings (``sglang_v4.managers.request_log``).
    log_requests_level: int = 2
    log_requests_format: str = "text"
    #: SGLang's ``--log-requests-target``: only ``stdout`` (the server log) is implemented.
    log_requests_target: list[str] | None = None
    log_level: str = "info"
    decode_log_interval: int = 40
    # OpenAI chat API (sglang-v4 serves DeepSeek-V4 models only: the V4 parsers are the defaults).
    tool_call_parser: str | None = "deepseekv4"
    reasoning_parser: str | None = "deepseek-v4"
    chat_template: str | None = None
    #: Unset chat sampling parameters from the model's generation_config.json (``model``) or
    #: SGLang's defaults (``openai``): ``sglang_v4.entrypoints.openai.sampling_defaults``.
    sampling_defaults: str = "model"
    #: SGLang's ``--default-chat-template-kwargs``: a JSON object merged under every chat request's
    #: ``chat_template_kwargs`` (the request's keys win), e.g. ``{"thinking": true}``.
    default_chat_template_kwargs: dict[str, Any] | None = None
    #: SGLang's ``--preferred-sampling-params``: a JSON object of sampling parameters that every
    #: generate request (``/generate``, the OpenAI and Anthropic routes, ``Engine``) takes for the
    #: keys its own ``sampling_params`` leave out (``{**preferred, **request}``, as SGLang's tokenizer
    #: manager merges them); parsed to a dict by :meth:`check`.
    preferred_sampling_params: dict[str, Any] | None = None
    #: SGLang's ``--allow-auto-truncate``: a prompt longer than the longest allowed
    #: (``min(context_len, KV pool) - 1`` tokens) keeps its first tokens instead of being refused
    #: with a 400, and a ``max_new_tokens`` that does not fit in what the context leaves is cut to it.
    allow_auto_truncate: bool = False
    #: SGLang's ``--weight-version``: reported as ``meta_info.weight_version`` and in ``/get_model_info``.
    weight_version: str = "default"
    #: SGLang's ``--stream-response-default-include-usage``: streamed OpenAI responses end with the
    #: ``usage`` chunk even when the request's ``stream_options`` does not ask for it.
    stream_response_default_include_usage: bool = False
    #: SGLang's ``--incremental-streaming-output``: each streamed ``/generate`` (and ``Engine``)
    #: chunk carries only what is new since the last one (text, ``output_ids``, output logprobs)
    #: instead of everything so far.
    incremental_streaming_output: bool = False
    grammar_backend: str = "xgrammar"
    #: SGLang's ``--constrained-json-max-whitespace-cnt``: the longest whitespace run a JSON grammar
    #: (``json_schema`` / ``response_format``, tool-call arguments) allows; ``None``: 16 (SGLang
    #: leaves it unbounded, which lets a model fill its budget with whitespace).
    constrained_json_max_whitespace_cnt: int | None = None
    trust_remote_code: bool = False
    # Misc.
    random_seed: int | None = None
    skip_warmup: bool = False
    watchdog_timeout: float = 300.0
    graceful_shutdown_timeout: float = 5.0

    def __post_init__(self) -> None:
        self._split_served_model_names()
        self.dtype = DTYPE_ALIASES.get(self.dtype, self.dtype)
        self.load_format = LOAD_FORMAT_ALIASES.get(self.load_format, self.load_format)
        if self.device == "auto":
            self.device = "cuda" if _cuda_available() else "cpu"
        if self.dtype == "auto" and self.device in ("cpu", "cuda"):
            self.dtype = "float32" if self.device == "cpu" else "bfloat16"
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = (
                DEFAULT_CHUNKED_PREFILL_CPU if self.device == "cpu" else DEFAULT_CHUNKED_PREFILL_CUDA
            )
        if self.random_seed is None:
            self.random_seed = 0
        self.kv_cache_dtype = KV_CACHE_DTYPE_ALIASES.get(self.kv_cache_dtype, self.kv_cache_dtype)
        if isinstance(self.log_level, str):
            level = self.log_level.lower()
            self.log_level = LOG_LEVEL_ALIASES.get(level, level)
        apply_sglang_semantics(self)
        self.check()

    # ------------------------------------------------------------------ validation
    def check(self) -> None:
        """Validate every field; raise ``ValueError`` naming the first bad one."""

        def choice(name: str, choices: tuple[str, ...]) -> None:
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{name} must be one of {list(choices)} (got {value!r})")

        def positive_int(name: str, allow_none: bool = True) -> None:
            value = getattr(self, name)
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer (got {value!r})")

        def nonnegative_int(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (got {value!r})")

        choice("device", ("cpu", "cuda"))
        if self.dtype in ("half", "float16"):
            raise ValueError(
                f"dtype {self.dtype!r} is not supported: DeepSeek-V4 runs in bfloat16 (CUDA) or float32 (CPU); "
                "use --dtype bfloat16 or auto"
            )
        choice("dtype", ("float32", "bfloat16"))
        check_sglang_args(self)
        if self.kv_cache_dtype not in KV_CACHE_DTYPE_CHOICES:
            raise ValueError(
                f"kv_cache_dtype {self.kv_cache_dtype!r} is not supported: sglang-v4 stores the KV cache as "
                f"one of {list(KV_CACHE_DTYPE_CHOICES)} (fp8_e4m3 is DeepSeek-V4's FP8 KV format)"
            )
        if self.grammar_backend not in GRAMMAR_BACKEND_CHOICES:
            raise ValueError(
                f"grammar_backend {self.grammar_backend!r} is not supported: sglang-v4 implements constrained "
                f"decoding with xgrammar; use one of {list(GRAMMAR_BACKEND_CHOICES)}"
            )
        if self.constrained_json_max_whitespace_cnt is not None:
            from sglang_v4.sampling.grammar import check_max_whitespace_cnt

            check_max_whitespace_cnt(self.constrained_json_max_whitespace_cnt)
        if self.cuda_graph_bs is not None and (
            not isinstance(self.cuda_graph_bs, (list, tuple))
            or not self.cuda_graph_bs
            or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in self.cuda_graph_bs)
        ):
            raise ValueError(
                f"cuda_graph_bs must be a non-empty list of positive integers (got {self.cuda_graph_bs!r})"
            )
        if self.schedule_policy in SCHEDULE_POLICY_REFUSED:
            raise ValueError(
                f"schedule_policy {self.schedule_policy!r} is not supported: "
                f"{SCHEDULE_POLICY_REFUSED[self.schedule_policy]}"
            )
        choice("schedule_policy", SCHEDULE_POLICY_CHOICES)
        if self.schedule_policy == "shortest-prefill-first" and self.disable_radix_cache:
            raise ValueError(
                "schedule_policy 'shortest-prefill-first' needs the radix cache (it orders by the tokens "
                "left to prefill after the cached prefix); drop --disable-radix-cache or pick another policy"
            )
        if self.load_format not in LOAD_FORMAT_CHOICES:
            raise ValueError(
                f"load_format must be one of {list(LOAD_FORMAT_CHOICES + tuple(LOAD_FORMAT_ALIASES))} "
                f"(safetensors is read as auto; got {self.load_format!r})"
            )
        check_quantization_flag(self.quantization)
        choice("log_level", LOG_LEVEL_CHOICES)
        choice("sampling_defaults", ("model", "openai"))
        dctk = self.default_chat_template_kwargs
        if isinstance(dctk, str):
            try:
                dctk = json.loads(dctk)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"default_chat_template_kwargs must be a JSON object (got {dctk!r}: {e})"
                ) from None
        if dctk is not None and not isinstance(dctk, dict):
            raise ValueError(f"default_chat_template_kwargs must be a JSON object (got {dctk!r})")
        self.default_chat_template_kwargs = dctk
        fsp = self.file_storage_path
        if fsp is not None and (
            not isinstance(fsp, str) or not fsp or (os.path.exists(fsp) and not os.path.isdir(fsp))
        ):
            # checked here: the file store is made on the first /v1/files or /v1/batches request
            raise ValueError(f"file_storage_path must name a directory (made if missing); got {fsp!r}")
        from sglang_v4.entrypoints.openai.sampling_defaults import parse_preferred_sampling_params

        self.preferred_sampling_params = parse_preferred_sampling_params(
            self.preferred_sampling_params, skip_tokenizer_init=bool(self.skip_tokenizer_init)
        )
        if not isinstance(self.allow_auto_truncate, bool):
            raise ValueError(f"allow_auto_truncate must be a boolean (got {self.allow_auto_truncate!r})")
        if not isinstance(self.weight_version, str) or not self.weight_version:
            raise ValueError(f"weight_version must be a non-empty string (got {self.weight_version!r})")
        if self.log_requests_level not in LOG_REQUESTS_LEVELS or isinstance(self.log_requests_level, bool):
            raise ValueError(
                f"log_requests_level must be one of {list(LOG_REQUESTS_LEVELS)} (got {self.log_requests_level!r})"
            )
        choice("log_requests_format", LOG_REQUESTS_FORMATS)
        targets = self.log_requests_target
        if targets is not None and (not isinstance(targets, (list, tuple)) or set(targets) - {"stdout"}):
            raise ValueError(
                f"log_requests_target {targets!r} is not supported: request lines go to the server log "
                "(stdout) only; pass stdout or redirect the server's output"
            )
        if self.device == "cuda" and not _cuda_available():
            raise ValueError("device='cuda' was requested but CUDA is not available")
        if not isinstance(self.skip_tokenizer_init, bool):
            raise ValueError(f"skip_tokenizer_init must be a boolean (got {self.skip_tokenizer_init!r})")
        if self.model_path is not None and not isinstance(self.model_path, str):
            raise ValueError(f"model_path must be a string path (got {self.model_path!r})")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise ValueError(f"port must be an integer in [1, 65535] (got {self.port!r})")
        positive_int("page_size", allow_none=False)
        if self.page_size % 128 != 0 or self.page_size % 4 != 0:
            raise ValueError(
                f"page_size must be a positive multiple of 128 and of 4 (the HCA and CSA compression "
                f"ratios) (got {self.page_size}; the default is {ServerArgs.page_size}: SGLang's V3.2 "
                "--page-size 64 does not apply to DeepSeek-V4's compressed KV)"
            )
        if self.mem_fraction_static is not None and not 0.0 < float(self.mem_fraction_static) < 1.0:
            raise ValueError(f"mem_fraction_static must be in (0, 1) (got {self.mem_fraction_static!r})")
        positive_int("max_total_tokens")
        if self.max_total_tokens is not None and self.max_total_tokens < self.page_size:
            # SGLang rounds the token budget down to the page size: less than a page is no pool
            raise ValueError(
                f"max_total_tokens (--max-total-tokens) must be at least one page of page_size "
                f"{self.page_size} tokens (got {self.max_total_tokens}); the KV pool is rounded "
                "down to whole pages"
            )
        positive_int("max_running_requests")
        positive_int("max_queued_requests")
        positive_int("max_prefill_tokens", allow_none=False)
        for name in ("priority_scheduling_preemption_threshold", "default_priority_value"):
            value = getattr(self, name)
            if value is None and name == "default_priority_value":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < (1 << 63):
                raise ValueError(f"{name} must be a signed 64-bit integer (got {value!r})")
        positive_int("context_length")
        if self.context_length is not None and self.context_length < 2:
            raise ValueError(
                f"context_length must be at least 2 (a prompt token and a generated one) (got {self.context_length})"
            )
        positive_int("tp_size", allow_none=False)
        positive_int("stream_interval", allow_none=False)
        positive_int("resume_interval", allow_none=False)
        positive_int("cuda_graph_max_bs")
        nonnegative_int("cuda_graph_warmup_ctx")
        nonnegative_int("cuda_graph_max_extend_tokens")
        nonnegative_int("indexer_stream_max_bs")
        positive_int("decode_log_interval", allow_none=False)
        cps = self.chunked_prefill_size
        if isinstance(cps, bool) or not isinstance(cps, int) or (cps <= 0 and cps != -1):
            raise ValueError(f"chunked_prefill_size must be a positive integer or -1 (got {cps!r})")
        if isinstance(self.random_seed, bool) or not isinstance(self.random_seed, int):
            raise ValueError(f"random_seed must be an integer (got {self.random_seed!r})")
        self.model_override_args()  # raises ValueError naming json_model_override_args
        for name in (
            "bucket_time_to_first_token",
            "bucket_inter_token_latency",
            "bucket_e2e_request_latency",
        ):
            buckets = getattr(self, name)
            if buckets is not None and (
                not isinstance(buckets, (list, tuple))
                or not buckets
                or any(isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0 for b in buckets)
                or list(buckets) != sorted(set(buckets))
            ):
                raise ValueError(
                    f"{name} must be a non-empty increasing list of positive seconds (got {buckets!r})"
                )
        self._check_ssl()
        if self.api_key is not None and not isinstance(self.api_key, str):
            raise ValueError("api_key must be a string")
        if self.admin_api_key is not None and not isinstance(self.admin_api_key, str):
            raise ValueError("admin_api_key must be a string")
        if self.watchdog_timeout <= 0:
            raise ValueError(f"watchdog_timeout must be positive (got {self.watchdog_timeout!r})")
        if self.tool_call_parser is not None:
            from sglang_v4.entrypoints.openai.tool_parser import canonical_tool_call_parser

            self.tool_call_parser = canonical_tool_call_parser(self.tool_call_parser)
        if self.reasoning_parser is not None:
            from sglang_v4.entrypoints.openai.reasoning_parser import canonical_reasoning_parser

            self.reasoning_parser = canonical_reasoning_parser(self.reasoning_parser)
        if self.chat_template is not None:  # a name is checked against the tokenizer at launch
            from sglang_v4.entrypoints.chat_template import check_chat_template_arg

            check_chat_template_arg(self.chat_template)
        gst = self.graceful_shutdown_timeout
        if isinstance(gst, bool) or not isinstance(gst, (int, float)) or not 0 <= gst < float("inf"):
            raise ValueError(f"graceful_shutdown_timeout must be a number of seconds >= 0 (got {gst!r})")
        self._check_parallel(positive_int, nonnegative_int)

    def _check_ssl(self) -> None:
        """``ssl_certfile`` / ``ssl_keyfile`` come together, name files, and serve one server."""
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            missing = "ssl_keyfile" if self.ssl_certfile else "ssl_certfile"
            raise ValueError(
                f"{missing} is required with {'ssl_certfile' if self.ssl_certfile else 'ssl_keyfile'}"
            )
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs"):
            path = getattr(self, name)
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"{name} must be a PEM file (no file {path!r})")
        if self.ssl_certfile and self.dp_size > 1:
            raise ValueError(
                "ssl_certfile: HTTPS with dp_size > 1 is not supported (sglang-router talks HTTP)"
            )

    def _check_parallel(self, positive_int: Any, nonnegative_int: Any) -> None:
        """The TP / EP / DP / multi-node fields (docs/PARALLELISM.md)."""
        for name in ("ep_size", "dp_size", "nnodes"):
            positive_int(name, allow_none=False)
        nonnegative_int("node_rank")
        nonnegative_int("base_gpu_id")
        positive_int("dist_timeout")
        if self.tp_size % self.ep_size:
            raise ValueError(
                f"ep_size must divide tp_size (experts are split inside the TP group; got ep_size="
                f"{self.ep_size}, tp_size={self.tp_size})"
            )
        if self.tp_size % self.nnodes:
            raise ValueError(
                f"tp_size must be a multiple of nnodes (the same number of ranks on every node; got "
                f"tp_size={self.tp_size}, nnodes={self.nnodes})"
            )
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank must be in [0, nnodes) (got {self.node_rank}, nnodes={self.nnodes})")
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("dist_init_addr is required with nnodes > 1 (host:port of node 0's rendezvous)")
        if self.dist_init_addr is not None:
            host, _, port = str(self.dist_init_addr).rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"dist_init_addr must be host:port (got {self.dist_init_addr!r})")
        if self.dp_size > 1 and self.nnodes > 1:
            raise ValueError("dp_size > 1 runs replicas on one node: use nnodes=1 (or one router per node)")
        if self.router_policy not in ROUTER_POLICY_CHOICES:
            raise ValueError(
                f"router_policy must be one of {list(ROUTER_POLICY_CHOICES)} (got {self.router_policy!r})"
            )
        if self.device == "cuda":
            import torch

            need = self.base_gpu_id + self.dp_size * self.tp_size // self.nnodes
            have = torch.cuda.device_count()
            if need > have:
                raise ValueError(
                    f"tp_size: {self.dp_size} x {self.tp_size // self.nnodes} GPUs per node from base_gpu_id "
                    f"{self.base_gpu_id} need {need} GPUs, this node has {have}"
                )

    # ------------------------------------------------------------------ CLI
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """Add every field as ``--kebab-case`` flag to ``parser`` (defaults = dataclass defaults);
        the flags are defined in :mod:`sglang_v4.server_args_cli`."""
        from sglang_v4.server_args_cli import add_server_cli_args

        add_server_cli_args(parser)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ServerArgs:
        """Build from a parsed namespace (attributes named like the fields)."""
        names = [f.name for f in dataclasses.fields(cls)]
        return cls(**{n: getattr(args, n) for n in names if hasattr(args, n)})

    # ------------------------------------------------------------------ helpers
    def model_override_args(self) -> dict[str, Any]:
        """``json_model_override_args`` parsed: a dict of ``config.json`` keys (empty when unset).

        Raises:
            ValueError: naming ``json_model_override_args`` when it is not a JSON object.
        """
        text = self.json_model_override_args
        if text is None or text == "":
            return {}
        if isinstance(text, dict):
            return dict(text)
        try:
            value = json.loads(text)
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"json_model_override_args must be a JSON object (got {text!r}: {e})") from None
        if not isinstance(value, dict):
            raise ValueError(f"json_model_override_args must be a JSON object (got {text!r})")
        return value

    def _split_served_model_names(self) -> None:
        """A list of names (vLLM's ``--served-model-name a b``): the first is ``served_model_name``,
        the others (no repeats) ``served_model_aliases``. Raises ``ValueError`` naming the field for
        an empty list or a name that is not a non-empty string."""
        names = self.served_model_name
        if isinstance(names, (list, tuple)):
            if not names or not all(isinstance(n, str) and n.strip() for n in names):
                raise ValueError(f"served_model_name must be one or more non-empty names (got {names!r})")
            first, *rest = (n.strip() for n in names)
            self.served_model_name = first
            self.served_model_aliases = [
                n for n in dict.fromkeys([*rest, *self.served_model_aliases]) if n != first
            ]

    def served_model_names(self) -> list[str]:
        """Every id the APIs accept and ``/v1/models`` lists: the resolved name, then the aliases."""
        first = self.resolved_served_model_name()
        return [first, *(n for n in self.served_model_aliases if n != first)]

    def resolved_served_model_name(self) -> str:
        """The model id the APIs report (``/v1/models``) and accept: ``served_model_name``, else the
        last component of ``model_path`` (``/models/DeepSeek-V4-Flash/`` -> ``DeepSeek-V4-Flash``),
        else ``"default"``."""
        if self.served_model_name:
            return self.served_model_name
        if self.model_path:
            return os.path.basename(os.path.abspath(self.model_path)) or "default"  # "." is its directory
        return "default"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of all fields (the keys and ``ssl_keyfile_password`` masked)."""
        out = dataclasses.asdict(self)
        for secret in ("api_key", "admin_api_key", "ssl_keyfile_password"):
            if out.get(secret):
                out[secret] = "***"
        return out

    def url(self) -> str:
        """``http://host:port`` of the HTTP server (``https://`` with ``--ssl-certfile``)."""
        return f"{'https' if self.ssl_certfile else 'http'}://{self.host}:{self.port}"


@dataclass
class PortArgs:
    """ZMQ IPC endpoint names joining the three processes (SGLang's ``PortArgs``).

    ``tokenizer_ipc_name``: detokenizer and scheduler -> tokenizer manager (PULL in main).
    ``scheduler_input_ipc_name``: tokenizer manager -> scheduler (PULL in scheduler).
    ``detokenizer_ipc_name``: scheduler -> detokenizer (PULL in detokenizer).
    """

    tokenizer_ipc_name: str
    scheduler_input_ipc_name: str
    detokenizer_ipc_name: str
    ipc_dir: str = field(default="")

    @staticmethod
    def init_new() -> PortArgs:
        """Fresh ``ipc://`` names in a new private temp directory."""
        d = tempfile.mkdtemp(prefix="sglang_v4_ipc_")
        tag = uuid.uuid4().hex[:8]
        return PortArgs(
            tokenizer_ipc_name=f"ipc://{os.path.join(d, f'tok_{tag}')}",
            scheduler_input_ipc_name=f"ipc://{os.path.join(d, f'sched_{tag}')}",
            detokenizer_ipc_name=f"ipc://{os.path.join(d, f'detok_{tag}')}",
            ipc_dir=d,
        )
