"""Server arguments: one dataclass shared by ``launch_server``, ``Engine`` and every process.

The flag names follow SGLang 0.5.x ``srt/server_args.py`` (``--model-path``, ``--page-size``,
``--mem-fraction-static``, ...); ``docs/ARCHITECTURE.md`` lists the interfaces they feed.
``ServerArgs`` is resolved and validated in ``__post_init__``: the ``auto`` values of ``device``,
``dtype`` and ``chunked_prefill_size`` are replaced by concrete ones, and any bad value raises a
``ValueError`` that names the field (:mod:`sglang_v4.server_args_check`: the accepted values and
the checks). The object is pickled into the child processes unchanged. The command line of these
fields is :mod:`sglang_v4.server_args_cli`.
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

from sglang_v4.server_args_check import (  # re-exported: the CLI and other modules read them here
    DEVICE_CHOICES,
    DTYPE_ALIASES,
    DTYPE_CHOICES,
    GRAMMAR_BACKEND_CHOICES,
    KV_CACHE_DTYPE_ALIASES,
    KV_CACHE_DTYPE_CHOICES,
    LOAD_FORMAT_ALIASES,
    LOAD_FORMAT_CHOICES,
    LOG_LEVEL_ALIASES,
    LOG_LEVEL_CHOICES,
    ROUTER_POLICY_CHOICES,
    SCHEDULE_POLICY_CHOICES,
    SCHEDULE_POLICY_REFUSED,
    check_server_args,
    connect_host,
    cuda_available,
    join_host_port,
    strip_host_brackets,
)
from sglang_v4.server_args_compat import (
    REDACTED,
    SECRET_COMPAT_FIELDS,
    SGLangCompatArgs,
    apply_sglang_semantics,
)

__all__ = [
    "DEFAULT_CHUNKED_PREFILL_CPU",
    "DEFAULT_CHUNKED_PREFILL_CUDA",
    "DEVICE_CHOICES",
    "DTYPE_ALIASES",
    "DTYPE_CHOICES",
    "GRAMMAR_BACKEND_CHOICES",
    "KV_CACHE_DTYPE_ALIASES",
    "KV_CACHE_DTYPE_CHOICES",
    "LOAD_FORMAT_ALIASES",
    "LOAD_FORMAT_CHOICES",
    "LOG_LEVEL_ALIASES",
    "LOG_LEVEL_CHOICES",
    "ROUTER_POLICY_CHOICES",
    "SCHEDULE_POLICY_CHOICES",
    "SCHEDULE_POLICY_REFUSED",
    "PortArgs",
    "ServerArgs",
]

#: Default chunked-prefill chunk on CPU and on CUDA: the most prompt tokens one request prefills in
#: a step, and the most prompt tokens a step carries while requests are decoding (decode
#: protection: a long prompt adds at most this much to a decode step).
DEFAULT_CHUNKED_PREFILL_CPU = 2048
DEFAULT_CHUNKED_PREFILL_CUDA = 2048


@dataclass
class ServerArgs(SGLangCompatArgs):  # type: ignore[misc, valid-type]
    """All runtime options (every ``--flag`` of ``python -m sglang_v4.launch_server``).

    Values after construction are resolved: ``device`` is ``"cpu"`` or ``"cuda"``; ``dtype`` is
    ``"float32"`` or ``"bfloat16"`` (``auto``: float32 on CPU, bfloat16 on CUDA);
    ``chunked_prefill_size`` is a positive token count (``-1`` disables chunking; any value ``<= 0``
    is read as ``-1``, as SGLang's scheduler reads it).
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
    #: The secrets (``api_key``, ``admin_api_key``, ``ssl_keyfile_password``) are left out of the
    #: ``repr`` (a logged or printed ``ServerArgs`` shows none) and masked by :meth:`to_dict`.
    api_key: str | None = field(default=None, repr=False)
    #: SGLang's ``--admin-api-key``: the key of the admin routes (``/flush_cache``,
    #: ``/abort_request``), which then do not accept ``api_key`` (``entrypoints/admission.py``).
    admin_api_key: str | None = field(default=None, repr=False)
    #: The path prefix a reverse proxy serves the API under (vLLM's ``--root-path``, SGLang's
    #: ``--fastapi-root-path``; ASGI's ``root_path``): the routes answer both with it
    #: (``/my-model/v1/models``) and without it (a proxy that strips it), and ``/openapi.json``
    #: names it as its server. ``""``: served at the root.
    root_path: str = ""
    #: HTTPS (SGLang's ``--ssl-*``, handed to uvicorn): a PEM certificate chain and its private key
    #: (both or neither), the CA bundle that verifies client certificates, the key's password.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_keyfile_password: str | None = field(default=None, repr=False)
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
    #: SGLang's ``--enable-request-time-stats-logging``: one ``ReqTimeStats(...)`` log line per
    #: finished request with its stage durations (``sglang_v4.managers.req_time_stats``).
    enable_request_time_stats_logging: bool = False
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
    #: vLLM's ``--max-logprobs``: the most top tokens per position the OpenAI routes give
    #: (``top_logprobs`` on chat, ``logprobs`` on completions, ``prompt_logprobs`` on both); ``-1``:
    #: the vocabulary size. A request above it is a 400 naming its field
    #: (:mod:`sglang_v4.entrypoints.openai.logprob_limits`); ``/generate``'s ``top_logprobs_num``
    #: keeps SGLang's bound (the vocabulary).
    max_logprobs: int = 20
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
    #: vLLM's ``--enable-force-include-usage``: every streamed chat / completions response ends
    #: with the ``usage`` chunk and every chunk carries the usage so far (vLLM's
    #: ``should_include_usage`` returns ``(True, True)`` under it, whatever ``stream_options`` says).
    enable_force_include_usage: bool = False
    #: vLLM's ``--sse-keep-alive-interval``: seconds a streamed response may send nothing before it
    #: sends an SSE comment ``: keep-alive`` (every streaming route: ``/generate``, the OpenAI and
    #: Anthropic routes); 0, the default, sends none
    #: (:mod:`sglang_v4.entrypoints.sse_response`).
    sse_keep_alive_interval: float = 0.0
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
        if isinstance(self.host, str):  # --host [::1] (a URL's spelling) listens on ::1
            self.host = strip_host_brackets(self.host)
        self.dtype = DTYPE_ALIASES.get(self.dtype, self.dtype)
        self.load_format = LOAD_FORMAT_ALIASES.get(self.load_format, self.load_format)
        if self.device == "auto":
            self.device = "cuda" if cuda_available() else "cpu"
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
        """Validate every field; raise ``ValueError`` naming the first bad one
        (:func:`~sglang_v4.server_args_check.check_server_args`)."""
        check_server_args(self)

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
        if isinstance(names, str) and names and not names.strip():
            raise ValueError(f"served_model_name must be a non-empty name (got {names!r})")
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
        """JSON-able dict of all fields (the keys and ``ssl_keyfile_password`` masked, the
        secret-holding SGLang fields such as ``watermark_config`` shown as SGLang's
        ``"<redacted>"``)."""
        out = dataclasses.asdict(self)
        for secret in ("api_key", "admin_api_key", "ssl_keyfile_password"):
            if out.get(secret):
                out[secret] = "***"
        for secret in SECRET_COMPAT_FIELDS:
            if out.get(secret) is not None:
                out[secret] = REDACTED
        return out

    def url(self) -> str:
        """``http://host:port`` a client on this machine reaches the HTTP server at (``https://``
        with ``--ssl-certfile``), as SGLang's ``ServerArgs.url``: a wildcard ``--host`` (``""``,
        ``0.0.0.0``, ``::``) as the loopback (:func:`connect_host`), an IPv6 host in brackets
        (``http://[::1]:30000``: :func:`join_host_port`)."""
        host = join_host_port(connect_host(self.host), self.port)
        return f"{'https' if self.ssl_certfile else 'http'}://{host}"


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
