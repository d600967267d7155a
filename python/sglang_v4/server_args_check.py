"""Validation of :class:`~sglang_v4.server_args.ServerArgs`: the accepted values of each flag
(choice tables, SGLang's alternative spellings) and :func:`check_server_args`, which raises a
``ValueError`` naming the first bad field.

Run by ``ServerArgs.__post_init__`` (through ``ServerArgs.check``) after the ``auto`` values are
resolved, so ``Engine(**kwargs)`` and the command line (:mod:`sglang_v4.server_args_cli`) are
refused with the same messages. A few fields are normalised while checked: the parser names to
their canonical spelling, ``root_path`` without its trailing ``/``, ``default_chat_template_kwargs``
and ``preferred_sampling_params`` from JSON text to dicts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sys
from typing import TYPE_CHECKING

from sglang_v4.layers.quantization import check_quantization_flag
from sglang_v4.managers.request_log import LOG_REQUESTS_FORMATS, LOG_REQUESTS_LEVELS
from sglang_v4.server_args_compat import check_sglang_args

if TYPE_CHECKING:
    from sglang_v4.server_args import ServerArgs

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


def strip_host_brackets(host: str) -> str:
    """``host`` without the square brackets a URL puts around an IPv6 literal (``"[::1]"`` ->
    ``"::1"``), else unchanged: sockets and uvicorn take the bare address (RFC 3986 section 3.2.2
    brackets it only inside a URL's authority)."""
    if len(host) > 2 and host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


def join_host_port(host: str, port: int | str) -> str:
    """``host:port`` as it goes after ``http://`` or ``tcp://``: an IPv6 literal (a host holding
    ``:``) in square brackets (``[::1]:30000``), as RFC 3986 section 3.2.2 requires; a name or an
    IPv4 address as is."""
    host = strip_host_brackets(host)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_host(host: str) -> str:
    """The address a client on this machine dials for a server bound to ``host``: the loopback
    for a wildcard bind (``""`` / ``0.0.0.0`` -> ``127.0.0.1``, ``::`` -> ``::1``, as SGLang's
    ``ServerArgs.url``), else ``host`` without URL brackets. A wildcard is where a socket listens,
    not an address to send to (behind an HTTP proxy it is not even local)."""
    host = strip_host_brackets(host)
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def check_dist_init_addr(addr: str) -> None:
    """``--dist-init-addr`` is ``host:port`` with ``port`` in [1, 65535]; an IPv6 host is written
    in brackets (``[2001:db8::1]:5000``, SGLang's form), since a bare one cannot be told from its
    port and ``torch.distributed`` reads it as ``tcp://{addr}``.

    Raises:
        ValueError: naming ``dist_init_addr``.
    """
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"dist_init_addr must be host:port (got {addr!r})")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3 or "]" in host[:-1]:
            raise ValueError(f"dist_init_addr must be host:port or [IPv6]:port (got {addr!r})")
    elif ":" in host:
        raise ValueError(f"dist_init_addr: an IPv6 address goes in brackets, [{host}]:{port} (got {addr!r})")


def torch_build_has_gpu() -> bool | None:
    """Whether the installed torch was built for a GPU, read from ``torch/version.py`` without
    importing torch (a few seconds of CPU): False when its ``cuda`` and ``hip`` are both ``None``
    (a CPU-only build, where ``torch.cuda.is_available()`` is always False), True when either is
    set, None when that cannot be told (torch not found, or the file not of that form)."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        path = os.path.join(next(iter(spec.submodule_search_locations)), "version.py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
    found: dict[str, object] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip"):
            if not isinstance(node.value, ast.Constant):
                return None
            found[target.id] = node.value.value
    if set(found) != {"cuda", "hip"}:
        return None
    return any(v is not None for v in found.values())


def cuda_available() -> bool:
    """Whether ``torch.cuda.is_available()`` (``False`` when torch cannot be imported): what
    ``device="auto"`` resolves to and ``device="cuda"`` needs.

    A process that has not imported torch yet and whose torch is a CPU-only build
    (:func:`torch_build_has_gpu` is False) gets False without importing it, so that parsing the
    server flags does not cost torch's import (the HTTP process imports it later, while the
    backend processes start)."""
    if "torch" not in sys.modules and torch_build_has_gpu() is False:
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover - torch always importable in this project
        return False


def _choice(args: ServerArgs, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(args, name)
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)} (got {value!r})")


def _check_switches(args: ServerArgs) -> None:
    """Refuse a switch (a ``bool`` field, or an SGLang switch of the compatibility table: a
    ``store_true`` flag on the command line) holding anything but ``True`` / ``False``: a keyword
    such as ``Engine(disable_cuda_graph="false")`` is a truthy string that would turn the switch on.

    Raises:
        ValueError: ``"<field> must be a boolean (got ...)"`` for the first such field.
    """
    for name in _switch_fields(type(args)):
        value = getattr(args, name)
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be a boolean (got {value!r})")


@functools.cache
def _switch_fields(cls: type) -> tuple[str, ...]:
    """The switch fields of the dataclass ``cls`` (see :func:`_check_switches`), in field order."""
    from sglang_v4.server_args_compat import SGLANG_FLAG_BY_DEST

    names = []
    for f in dataclasses.fields(cls):
        entry = SGLANG_FLAG_BY_DEST.get(f.name)
        if f.type in ("bool", bool) or (entry is not None and entry.switch):
            names.append(f.name)
    return tuple(names)


def _is_real(value: object) -> bool:
    """Whether ``value`` is an ``int`` or ``float`` (not a ``bool``, not a numeric string): what the
    flag's ``type`` gives on the command line, so a keyword of another type is refused by name."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive_int(args: ServerArgs, name: str, allow_none: bool = True) -> None:
    value = getattr(args, name)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer (got {value!r})")


def _nonnegative_int(args: ServerArgs, name: str) -> None:
    value = getattr(args, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0 (got {value!r})")


def normalize_root_path(root_path: object, name: str = "root_path") -> str:
    """``--root-path`` (SGLang's ``--fastapi-root-path``) as ASGI's ``root_path`` wants it: ``""``
    (``None``, ``""`` and ``"/"``: the root) or ``/segment[/segment...]`` without a trailing ``/``.

    Raises:
        ValueError: naming ``name`` (the field it came from): not a string, not starting with ``/``, or holding
            whitespace, ``?``, ``#`` or an empty segment (``//``).
    """
    if root_path is None:
        return ""
    if not isinstance(root_path, str):
        raise ValueError(f"{name} must be a string path such as '/my-model' (got {root_path!r})")
    path = root_path.rstrip("/")
    if not path:
        return ""
    if not path.startswith("/") or "//" in path or any(c.isspace() or c in "?#" for c in path):
        raise ValueError(
            f"{name} must be a URL path such as '/my-model': it starts with '/' and holds no "
            f"whitespace, '?', '#' or empty segment (got {root_path!r})"
        )
    return path


#: SGLang's start-up error for ``--enable-hierarchical-cache`` with ``--disable-radix-cache``.
HICACHE_WITHOUT_RADIX = (
    "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive "
    "and cannot be used at the same time. Please use only one of them."
)


def check_server_args(args: ServerArgs) -> None:
    """Validate every field of ``args`` (resolved: ``device`` is ``cpu`` / ``cuda``), normalising
    the few listed in the module docstring in place.

    Raises:
        ValueError: naming the first bad field, e.g. ``page_size must be a positive multiple of 128
            ...``, or an unsupported SGLang flag (:func:`~sglang_v4.server_args_compat.check_sglang_args`).
    """
    _check_switches(args)
    for name in ("host", "tokenizer_path", "ssl_keyfile_password"):  # type=str flags read as text
        value = getattr(args, name)
        if value is not None and not isinstance(value, str):
            # the type only: the value of ssl_keyfile_password is a secret
            raise ValueError(f"{name} must be a string (got a {type(value).__name__})")
    _choice(args, "device", ("cpu", "cuda"))
    if args.dtype in ("half", "float16"):
        raise ValueError(
            f"dtype {args.dtype!r} is not supported: DeepSeek-V4 runs in bfloat16 (CUDA) or float32 (CPU); "
            "use --dtype bfloat16 or auto"
        )
    if args.dtype not in ("float32", "bfloat16"):  # "auto" / "float" are resolved by now
        offered = list(DTYPE_CHOICES + tuple(DTYPE_ALIASES))
        raise ValueError(f"dtype must be one of {offered} (got {args.dtype!r})")
    check_sglang_args(args)
    if args.kv_cache_dtype not in KV_CACHE_DTYPE_CHOICES:
        raise ValueError(
            f"kv_cache_dtype {args.kv_cache_dtype!r} is not supported: sglang-v4 stores the KV cache as "
            f"one of {list(KV_CACHE_DTYPE_CHOICES)} (fp8_e4m3 is DeepSeek-V4's FP8 KV format)"
        )
    if args.grammar_backend not in GRAMMAR_BACKEND_CHOICES:
        raise ValueError(
            f"grammar_backend {args.grammar_backend!r} is not supported: sglang-v4 implements constrained "
            f"decoding with xgrammar; use one of {list(GRAMMAR_BACKEND_CHOICES)}"
        )
    if (
        isinstance(args.max_logprobs, bool)
        or not isinstance(args.max_logprobs, int)
        or args.max_logprobs < -1
    ):
        raise ValueError(
            f"max_logprobs must be an integer >= 0, or -1 for the vocabulary size (got {args.max_logprobs!r})"
        )
    ka = args.sse_keep_alive_interval
    if isinstance(ka, bool) or not isinstance(ka, (int, float)) or not math.isfinite(ka) or ka < 0:
        raise ValueError(
            f"sse_keep_alive_interval must be a finite number of seconds >= 0, 0 for none (got {ka!r})"
        )
    if args.constrained_json_max_whitespace_cnt is not None:
        from sglang_v4.sampling.grammar import check_max_whitespace_cnt

        check_max_whitespace_cnt(args.constrained_json_max_whitespace_cnt)
    if args.cuda_graph_bs is not None and (
        not isinstance(args.cuda_graph_bs, (list, tuple))
        or not args.cuda_graph_bs
        or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 for b in args.cuda_graph_bs)
    ):
        raise ValueError(
            f"cuda_graph_bs must be a non-empty list of positive integers (got {args.cuda_graph_bs!r})"
        )
    if args.schedule_policy in SCHEDULE_POLICY_REFUSED:
        raise ValueError(
            f"schedule_policy {args.schedule_policy!r} is not supported: "
            f"{SCHEDULE_POLICY_REFUSED[args.schedule_policy]}"
        )
    _choice(args, "schedule_policy", SCHEDULE_POLICY_CHOICES)
    if args.schedule_policy == "shortest-prefill-first" and args.disable_radix_cache:
        raise ValueError(
            "schedule_policy 'shortest-prefill-first' needs the radix cache (it orders by the tokens "
            "left to prefill after the cached prefix); drop --disable-radix-cache or pick another policy"
        )
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        # SGLang refuses the pair at start-up with this text (its hierarchical cache extends the
        # radix cache); the flag is otherwise accepted and ignored here, so keep the refusal
        raise ValueError(HICACHE_WITHOUT_RADIX)
    if args.load_format not in LOAD_FORMAT_CHOICES:
        raise ValueError(
            f"load_format must be one of {list(LOAD_FORMAT_CHOICES + tuple(LOAD_FORMAT_ALIASES))} "
            f"(safetensors is read as auto; got {args.load_format!r})"
        )
    check_quantization_flag(args.quantization)
    _choice(args, "log_level", LOG_LEVEL_CHOICES)
    _choice(args, "sampling_defaults", ("model", "openai"))
    from sglang_v4.entrypoints.openai.sampling_defaults import (
        json_object_flag,
        parse_preferred_sampling_params,
    )
    from sglang_v4.entrypoints.openai.template_kwargs import check_template_kwargs
    from sglang_v4.entrypoints.openai.thinking_switch import normalize_thinking_switches

    args.default_chat_template_kwargs = normalize_thinking_switches(
        json_object_flag("default_chat_template_kwargs", args.default_chat_template_kwargs),
        "default_chat_template_kwargs",
    )
    check_template_kwargs(args.default_chat_template_kwargs, "default_chat_template_kwargs")
    fsp = args.file_storage_path
    if fsp is not None and (
        not isinstance(fsp, str) or not fsp or (os.path.exists(fsp) and not os.path.isdir(fsp))
    ):
        # checked here: the file store is made on the first /v1/files or /v1/batches request
        raise ValueError(f"file_storage_path must name a directory (made if missing); got {fsp!r}")
    args.preferred_sampling_params = parse_preferred_sampling_params(
        args.preferred_sampling_params, skip_tokenizer_init=bool(args.skip_tokenizer_init)
    )
    if not isinstance(args.allow_auto_truncate, bool):
        raise ValueError(f"allow_auto_truncate must be a boolean (got {args.allow_auto_truncate!r})")
    if not isinstance(args.weight_version, str) or not args.weight_version:
        raise ValueError(f"weight_version must be a non-empty string (got {args.weight_version!r})")
    if args.log_requests_level not in LOG_REQUESTS_LEVELS or isinstance(args.log_requests_level, bool):
        raise ValueError(
            f"log_requests_level must be one of {list(LOG_REQUESTS_LEVELS)} (got {args.log_requests_level!r})"
        )
    _choice(args, "log_requests_format", LOG_REQUESTS_FORMATS)
    targets = args.log_requests_target
    if targets is not None and (not isinstance(targets, (list, tuple)) or set(targets) - {"stdout"}):
        raise ValueError(
            f"log_requests_target {targets!r} is not supported: request lines go to the server log "
            "(stdout) only; pass stdout or redirect the server's output"
        )
    from_sglang = bool(args.fastapi_root_path) and args.root_path == args.fastapi_root_path
    args.root_path = normalize_root_path(args.root_path, "fastapi_root_path" if from_sglang else "root_path")
    if args.device == "cuda" and not cuda_available():
        raise ValueError("device='cuda' was requested but CUDA is not available")
    if not isinstance(args.skip_tokenizer_init, bool):
        raise ValueError(f"skip_tokenizer_init must be a boolean (got {args.skip_tokenizer_init!r})")
    if args.model_path is not None and not isinstance(args.model_path, str):
        raise ValueError(f"model_path must be a string path (got {args.model_path!r})")
    if isinstance(args.port, bool) or not isinstance(args.port, int) or not 0 < args.port < 65536:
        raise ValueError(f"port must be an integer in [1, 65535] (got {args.port!r})")
    _positive_int(args, "page_size", allow_none=False)
    if args.page_size % 128 != 0 or args.page_size % 4 != 0:
        raise ValueError(
            f"page_size must be a positive multiple of 128 and of 4 (the HCA and CSA compression "
            f"ratios) (got {args.page_size}; the default is {type(args).page_size}: SGLang's V3.2 "
            "--page-size 64 does not apply to DeepSeek-V4's compressed KV)"
        )
    mfs = args.mem_fraction_static
    if mfs is not None and (not _is_real(mfs) or not 0.0 < mfs < 1.0):
        raise ValueError(f"mem_fraction_static must be a number in (0, 1) (got {mfs!r})")
    _positive_int(args, "max_total_tokens")
    if args.max_total_tokens is not None and args.max_total_tokens < args.page_size:
        # SGLang rounds the token budget down to the page size: less than a page is no pool
        raise ValueError(
            f"max_total_tokens (--max-total-tokens) must be at least one page of page_size "
            f"{args.page_size} tokens (got {args.max_total_tokens}); the KV pool is rounded "
            "down to whole pages"
        )
    _positive_int(args, "max_running_requests")
    _positive_int(args, "max_queued_requests")
    _positive_int(args, "max_prefill_tokens", allow_none=False)
    for name in ("priority_scheduling_preemption_threshold", "default_priority_value"):
        value = getattr(args, name)
        if value is None and name == "default_priority_value":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not -(1 << 63) <= value < (1 << 63):
            raise ValueError(f"{name} must be a signed 64-bit integer (got {value!r})")
    _positive_int(args, "context_length")
    if args.context_length is not None and args.context_length < 2:
        raise ValueError(
            f"context_length must be at least 2 (a prompt token and a generated one) (got {args.context_length})"
        )
    _positive_int(args, "tp_size", allow_none=False)
    _positive_int(args, "stream_interval", allow_none=False)
    _positive_int(args, "resume_interval", allow_none=False)
    _positive_int(args, "cuda_graph_max_bs")
    _nonnegative_int(args, "cuda_graph_warmup_ctx")
    _nonnegative_int(args, "cuda_graph_max_extend_tokens")
    _nonnegative_int(args, "indexer_stream_max_bs")
    _positive_int(args, "decode_log_interval", allow_none=False)
    cps = args.chunked_prefill_size
    if isinstance(cps, bool) or not isinstance(cps, int):
        raise ValueError(
            f"chunked_prefill_size must be an integer, -1 (or any value <= 0) to disable (got {cps!r})"
        )
    if cps <= 0:
        # SGLang's scheduler reads every value <= 0 as "chunking disabled" (sgl-project/sglang#8973)
        args.chunked_prefill_size = -1
    seed = args.random_seed
    # torch.manual_seed takes [-2**63, 2**64 - 1] (it raises "Overflow when unpacking long long"
    # past that, in the scheduler process after launch): refuse it here, naming the field
    if isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**64:
        raise ValueError(f"random_seed must be an integer in [-2**63, 2**64 - 1] (got {seed!r})")
    args.model_override_args()  # raises ValueError naming json_model_override_args
    for name in (
        "bucket_time_to_first_token",
        "bucket_inter_token_latency",
        "bucket_e2e_request_latency",
    ):
        buckets = getattr(args, name)
        if buckets is not None and (
            not isinstance(buckets, (list, tuple))
            or not buckets
            or any(isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0 for b in buckets)
            or list(buckets) != sorted(set(buckets))
        ):
            raise ValueError(
                f"{name} must be a non-empty increasing list of positive seconds (got {buckets!r})"
            )
    _check_ssl(args)
    if args.api_key is not None and not isinstance(args.api_key, str):
        raise ValueError("api_key must be a string")
    if args.admin_api_key is not None and not isinstance(args.admin_api_key, str):
        raise ValueError("admin_api_key must be a string")
    if not _is_real(args.watchdog_timeout) or not args.watchdog_timeout > 0:
        raise ValueError(
            f"watchdog_timeout must be a positive number of seconds (got {args.watchdog_timeout!r})"
        )
    if args.tool_call_parser is not None:
        from sglang_v4.entrypoints.openai.tool_parser import canonical_tool_call_parser

        args.tool_call_parser = canonical_tool_call_parser(args.tool_call_parser)
    if args.reasoning_parser is not None:
        from sglang_v4.entrypoints.openai.reasoning_parser import canonical_reasoning_parser

        args.reasoning_parser = canonical_reasoning_parser(args.reasoning_parser)
    if args.chat_template is not None:  # a name is checked against the tokenizer at launch
        from sglang_v4.entrypoints.chat_template import check_chat_template_arg

        check_chat_template_arg(args.chat_template)
    gst = args.graceful_shutdown_timeout
    if isinstance(gst, bool) or not isinstance(gst, (int, float)) or not 0 <= gst < float("inf"):
        raise ValueError(f"graceful_shutdown_timeout must be a number of seconds >= 0 (got {gst!r})")
    _check_parallel(args)
    from sglang_v4.server_args_choices import check_choice_fields

    check_choice_fields(args)  # a keyword (Engine, ServerArgs) gets the command line's choice check


def _check_ssl(args: ServerArgs) -> None:
    """``ssl_certfile`` / ``ssl_keyfile`` come together, name files, and serve one server."""
    if bool(args.ssl_certfile) != bool(args.ssl_keyfile):
        missing = "ssl_keyfile" if args.ssl_certfile else "ssl_certfile"
        raise ValueError(
            f"{missing} is required with {'ssl_certfile' if args.ssl_certfile else 'ssl_keyfile'}"
        )
    for name in ("ssl_certfile", "ssl_keyfile", "ssl_ca_certs"):
        path = getattr(args, name)
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"{name} must be a PEM file (no file {path!r})")
    if args.ssl_certfile and args.dp_size > 1:
        raise ValueError("ssl_certfile: HTTPS with dp_size > 1 is not supported (sglang-router talks HTTP)")


def _check_parallel(args: ServerArgs) -> None:
    """The TP / EP / DP / multi-node fields (docs/PARALLELISM.md)."""
    for name in ("ep_size", "dp_size", "nnodes"):
        _positive_int(args, name, allow_none=False)
    _nonnegative_int(args, "node_rank")
    _nonnegative_int(args, "base_gpu_id")
    _positive_int(args, "dist_timeout")
    if args.tp_size % args.ep_size:
        raise ValueError(
            f"ep_size must divide tp_size (experts are split inside the TP group; got ep_size="
            f"{args.ep_size}, tp_size={args.tp_size})"
        )
    if args.tp_size % args.nnodes:
        raise ValueError(
            f"tp_size must be a multiple of nnodes (the same number of ranks on every node; got "
            f"tp_size={args.tp_size}, nnodes={args.nnodes})"
        )
    if args.node_rank >= args.nnodes:
        raise ValueError(f"node_rank must be in [0, nnodes) (got {args.node_rank}, nnodes={args.nnodes})")
    if args.nnodes > 1 and not args.dist_init_addr:
        raise ValueError("dist_init_addr is required with nnodes > 1 (host:port of node 0's rendezvous)")
    if args.dist_init_addr is not None:
        check_dist_init_addr(str(args.dist_init_addr))
    if args.dp_size > 1 and args.nnodes > 1:
        raise ValueError("dp_size > 1 runs replicas on one node: use nnodes=1 (or one router per node)")
    if args.dp_size > 1 and args.port + args.dp_size > 65535:
        # replica i listens on port + 1 + i (sglang_v4.entrypoints.data_parallel.replica_args)
        raise ValueError(
            f"port: dp_size={args.dp_size} replicas listen on port + 1 .. port + dp_size, so port "
            f"must be at most {65535 - args.dp_size} (got {args.port})"
        )
    if args.router_policy not in ROUTER_POLICY_CHOICES:
        raise ValueError(
            f"router_policy must be one of {list(ROUTER_POLICY_CHOICES)} (got {args.router_policy!r})"
        )
    if args.device == "cuda":
        import torch

        need = args.base_gpu_id + args.dp_size * args.tp_size // args.nnodes
        have = torch.cuda.device_count()
        if need > have:
            raise ValueError(
                f"tp_size: {args.dp_size} x {args.tp_size // args.nnodes} GPUs per node from base_gpu_id "
                f"{args.base_gpu_id} need {need} GPUs, this node has {have}"
            )
