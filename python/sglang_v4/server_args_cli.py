"""The ``python -m sglang_v4.launch_server`` flags: one ``--kebab-case`` flag per
:class:`~sglang_v4.server_args.ServerArgs` field (SGLang's names and defaults), then SGLang's
other flags (:mod:`sglang_v4.server_args_compat`). Values are validated by ``ServerArgs`` itself,
so ``Engine(**kwargs)`` and the command line are refused with the same messages.
"""

from __future__ import annotations

import argparse

from sglang_v4.layers.quantization import QUANTIZATION_CHOICES
from sglang_v4.server_args import (
    DEFAULT_CHUNKED_PREFILL_CPU,
    DEFAULT_CHUNKED_PREFILL_CUDA,
    DEVICE_CHOICES,
    DTYPE_CHOICES,
    KV_CACHE_DTYPE_CHOICES,
    LOAD_FORMAT_CHOICES,
    LOG_LEVEL_CHOICES,
    ROUTER_POLICY_CHOICES,
    SCHEDULE_POLICY_CHOICES,
    ServerArgs,
)
from sglang_v4.server_args_choices import add_sglang_choices
from sglang_v4.server_args_compat import add_sglang_cli_args
from sglang_v4.utils import human_readable_int


def add_server_cli_args(parser: argparse.ArgumentParser) -> None:
    """Add every ``ServerArgs`` field to ``parser`` as a flag (defaults = the dataclass defaults),
    then SGLang's accepted-only flags; flags SGLang limits to a list of values get its list
    (:func:`~sglang_v4.server_args_choices.add_sglang_choices`)."""
    d = ServerArgs.__dataclass_fields__
    a = parser.add_argument
    a(
        "--model-path",
        "--model",
        type=str,
        default=None,
        help="HF-layout model dir; default: embedded model.",
    )
    a("--tokenizer-path", type=str, default=None, help="Tokenizer dir (default: model path).")
    a(
        "--skip-tokenizer-init",
        action="store_true",
        help="Do not load the tokenizer: requests must pass input_ids, and responses carry "
        "output_ids without text (stop strings, text prompts and the OpenAI routes are refused).",
    )
    a(
        "--load-format",
        type=str,
        default="auto",
        help=f"One of {', '.join(LOAD_FORMAT_CHOICES)} (safetensors = auto); other SGLang values are refused.",
    )
    a(
        "--quantization",
        type=str,
        default=None,
        help=f"One of {', '.join(QUANTIZATION_CHOICES)} (other SGLang methods are refused). fp8: keep FP8 block-scaled linears and FP4 routed experts (DeepSeek's published format; "
        "an unquantized checkpoint is quantized on load); none: dequantize to --dtype. Default: the "
        "checkpoint's quantization_config on CUDA, dequantized on CPU.",
    )
    a(
        "--context-length",
        type=human_readable_int,
        default=None,
        help="Max context in tokens (128k, 128Ki accepted; default: the model config's "
        "max_position_embeddings, or its max_sequence_length / seq_length / max_seq_len / "
        "model_max_length where set, as SGLang reads it; a larger value needs "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1).",
    )
    a(
        "--json-model-override-args",
        type=str,
        default=None,
        help="JSON object of config.json keys to replace before parsing, e.g. '{\"num_hidden_layers\": 2}' "
        "(with --load-format dummy: a reduced-depth model from a config-only directory).",
    )
    a(
        "--served-model-name",
        type=str,
        nargs="+",
        default=None,
        help="Model name in the APIs (default: the model directory's name). Several names (vLLM's "
        "form) are all accepted and listed by /v1/models; the first is the one reported.",
    )
    a("--host", type=str, default=d["host"].default)
    a("--port", type=int, default=d["port"].default)
    a("--api-key", type=str, default=None, help="Require 'Authorization: Bearer KEY'.")
    a(
        "--admin-api-key",
        type=str,
        default=None,
        help="Key of the admin routes (/flush_cache, /abort_request); they then refuse --api-key.",
    )
    a(
        "--root-path",
        type=str,
        default="",
        help="Path prefix of the API behind a reverse proxy (e.g. /my-model): routes answer with and without it.",
    )
    a("--ssl-certfile", type=str, default=None, help="Serve HTTPS with this PEM certificate (chain).")
    a("--ssl-keyfile", type=str, default=None, help="The certificate's PEM private key.")
    a("--ssl-ca-certs", type=str, default=None, help="PEM CA bundle that verifies client certificates.")
    a("--ssl-keyfile-password", type=str, default=None, help="Password of an encrypted --ssl-keyfile.")
    a("--device", type=str, default="auto", choices=DEVICE_CHOICES)
    a(
        "--dtype",
        type=str,
        default="auto",
        help=f"One of {', '.join(DTYPE_CHOICES)} (float = float32); half / float16 are refused.",
    )
    a(
        "--kv-cache-dtype",
        type=str,
        default="auto",
        help=f"One of {', '.join(KV_CACHE_DTYPE_CHOICES)} (bfloat16 = bf16); other SGLang values are refused.",
    )
    a(
        "--enable-fp4-indexer",
        "--enable-deepseek-v4-fp4-indexer",
        action="store_true",
        dest="enable_fp4_indexer",
        help="Store indexer keys in fp4 (68 B per key).",
    )
    a(
        "--tp-size",
        "--tensor-parallel-size",
        "--tp",
        type=int,
        default=1,
        dest="tp_size",
        help="Tensor-parallel ranks (one process per GPU, or per CPU rank with --device cpu).",
    )
    a(
        "--ep-size",
        "--expert-parallel-size",
        "--ep",
        type=int,
        default=1,
        dest="ep_size",
        help="Expert-parallel shards inside the TP group (divides --tp-size): whole routed experts "
        "per rank; 1: every rank holds a slice of every expert.",
    )
    a(
        "--dp-size",
        "--data-parallel-size",
        "--dp",
        type=int,
        default=1,
        dest="dp_size",
        help="Data-parallel replicas: N servers (each --tp-size GPUs) behind sglang-router on --port "
        "(needs the sglang-router package).",
    )
    a("--router-policy", type=str, default="cache_aware", choices=ROUTER_POLICY_CHOICES,
      help="sglang-router policy with --dp-size > 1.")  # fmt: skip
    a("--nnodes", type=int, default=1, help="Nodes of one TP group (tp_size / nnodes ranks each).")
    a("--node-rank", type=int, default=0, help="This node (0 serves HTTP; others run only TP ranks).")
    a(
        "--dist-init-addr",
        "--nccl-init-addr",
        type=str,
        default=None,
        help="host:port of rank 0's torch.distributed rendezvous.",
    )
    a("--dist-timeout", type=int, default=None, help="Seconds before a collective times out.")
    a("--base-gpu-id", type=int, default=0, help="First GPU of this server's ranks.")
    a("--page-size", type=int, default=d["page_size"].default, help="Tokens per KV block.")
    a("--mem-fraction-static", type=float, default=None)
    a(
        "--max-total-tokens",
        type=human_readable_int,
        default=None,
        help="KV pool size in tokens (e.g. 64k).",
    )
    a("--max-running-requests", type=int, default=None)
    a(
        "--max-queued-requests",
        type=int,
        default=None,
        help="Refuse a request with 503 when this many are already waiting (default: no bound).",
    )
    a(
        "--max-prefill-tokens",
        type=human_readable_int,
        default=d["max_prefill_tokens"].default,
        help="Prompt tokens a step may carry when no request is decoding (several requests' "
        "chunks at once); with decoding requests a step carries at most --chunked-prefill-size.",
    )
    a(
        "--chunked-prefill-size",
        type=int,
        default=None,
        help="Most prompt tokens of one request per step, and of a step while requests decode "
        + (
            f"(default {DEFAULT_CHUNKED_PREFILL_CUDA}; "
            if DEFAULT_CHUNKED_PREFILL_CUDA == DEFAULT_CHUNKED_PREFILL_CPU
            else f"(default {DEFAULT_CHUNKED_PREFILL_CUDA} on CUDA, {DEFAULT_CHUNKED_PREFILL_CPU} on CPU; "
        )
        + "-1, or any value <= 0 as in SGLang, disables chunking).",
    )
    a("--disable-radix-cache", action="store_true")
    a(
        "--resume-interval",
        type=int,
        default=d["resume_interval"].default,
        help="Keep a radix-cache resume state (last 128 raw KV + compressor overlap) every k blocks.",
    )
    a(
        "--schedule-policy",
        type=str,
        default="fcfs",
        help=f"Order of the waiting queue: one of {', '.join(SCHEDULE_POLICY_CHOICES)} (SGLang's).",
    )
    a(
        "--enable-priority-scheduling",
        action="store_true",
        help="Queue requests by their priority field (higher values first; ties first come first served).",
    )
    a(
        "--schedule-low-priority-values-first",
        action="store_true",
        help="With --enable-priority-scheduling: lower priority values first.",
    )
    a(
        "--priority-scheduling-preemption-threshold",
        type=int,
        default=d["priority_scheduling_preemption_threshold"].default,
        help="With --enable-priority-scheduling: a queued request that cannot be admitted (running-"
        "request cap or KV pages) preempts running requests whose priority it beats by more than this "
        "(they go back to the queue with their outputs kept).",
    )
    a(
        "--disable-priority-preemption",
        action="store_true",
        help="With --enable-priority-scheduling: never preempt running requests.",
    )
    a(
        "--default-priority-value",
        type=int,
        default=None,
        help="With --enable-priority-scheduling: the priority of requests that send none (default: "
        "the least preferred value, so they run after every request with a priority).",
    )
    a(
        "--abort-on-priority-when-disabled",
        action="store_true",
        help="Without --enable-priority-scheduling: refuse requests that send a priority (503).",
    )
    a("--stream-interval", type=int, default=1)
    a(
        "--disable-overlap-schedule",
        action="store_true",
        help="Run each step's forward in the scheduler's thread instead of overlapping it with "
        "the scheduling of the next step (overlap scheduling is on by default).",
    )
    a(
        "--cuda-graph-max-bs",
        "--cuda-graph-max-bs-decode",
        type=int,
        default=None,
        dest="cuda_graph_max_bs",
    )
    a(
        "--cuda-graph-bs",
        "--cuda-graph-bs-decode",
        type=int,
        nargs="+",
        default=None,
        dest="cuda_graph_bs",
        help="Decode batch sizes to capture as CUDA graphs (larger batches run eagerly); values above "
        "--cuda-graph-max-bs (default: --max-running-requests) are clamped to it.",
    )
    a(
        "--cuda-graph-max-extend-tokens",
        type=int,
        default=d["cuda_graph_max_extend_tokens"].default,
        help="Largest extend or mixed decode+extend step (new tokens) replayed from a CUDA graph "
        "(token buckets: powers of two from 16 up to it, captured at start-up with the decode graphs); "
        "0: decode graphs only.",
    )
    a("--disable-cuda-graph", action="store_true")
    a(
        "--cuda-graph-warmup-ctx",
        type=int,
        default=d["cuda_graph_warmup_ctx"].default,
        help="Non-zero: capture the CUDA graphs of every decode and extend key at start-up (each "
        "serves every context length); 0: capture each lazily on first use.",
    )
    a(
        "--indexer-stream-max-bs",
        type=int,
        default=d["indexer_stream_max_bs"].default,
        help="Run the CSA indexer on a second CUDA stream for forwards of at most this many tokens "
        "(0: never). Measured on H200 (benchmark/RESULTS.md): a gain at bs 1, a loss from bs 8.",
    )
    a(
        "--enable-metrics",
        action="store_true",
        help="Serve Prometheus metrics (sglang:*) at GET /metrics.",
    )
    a(
        "--enable-request-time-stats-logging",
        action="store_true",
        help="Log one line per finished request with the duration of each stage (ms).",
    )
    for name, what in (
        ("time-to-first-token", "sglang:time_to_first_token_seconds"),
        ("inter-token-latency", "sglang:inter_token_latency_seconds"),
        ("e2e-request-latency", "sglang:e2e_request_latency_seconds"),
    ):
        a(f"--bucket-{name}", type=float, nargs="+", default=None, help=f"Bucket bounds (s) of {what}.")
    a("--enable-cache-report", action="store_true")
    a(
        "--file-storage-path",
        default=None,
        help="Directory of the files of /v1/files and /v1/batches (default: a new temporary directory "
        "per server, removed at exit).",
    )
    a("--log-requests", action="store_true", help="Log every request when received and when finished.")
    a(
        "--log-requests-level",
        type=int,
        default=d["log_requests_level"].default,
        help="0: metadata; 1: and sampling params; 2: and input / output cut to 2048 chars or ids; 3: all.",
    )
    a(
        "--log-requests-format",
        type=str,
        default=d["log_requests_format"].default,
        help="text or json (one JSON object per line).",
    )
    a(
        "--log-requests-target",
        type=str,
        nargs="+",
        default=None,
        help="stdout (the server log); SGLang's directory targets are refused.",
    )
    a(
        "--log-level",
        type=str,
        default="info",
        help=f"One of {', '.join(LOG_LEVEL_CHOICES)} (any case; warn = warning, fatal = critical).",
    )
    a("--decode-log-interval", type=int, default=d["decode_log_interval"].default)
    a(
        "--tool-call-parser",
        type=str,
        default=d["tool_call_parser"].default,
        help="Parser of tool calls in chat output: deepseekv4 (DeepSeek-V4 DSML blocks; the default).",
    )
    a(
        "--reasoning-parser",
        type=str,
        default=d["reasoning_parser"].default,
        help="Splitter of reasoning_content in chat output: deepseek-v4 (the default), deepseek-r1, "
        "deepseek-v3.",
    )
    a(
        "--chat-template",
        type=str,
        default=None,
        help="A Jinja chat-template file, rendered with transformers' apply_chat_template, used "
        "instead of the built-in DeepSeek-V4 chat encoding.",
    )
    a(
        "--sampling-defaults",
        type=str,
        default=d["sampling_defaults"].default,
        help="model: chat requests' unset temperature / top_p / top_k / min_p / repetition_penalty "
        "come from the model's generation_config.json (SGLang's default); openai: SGLang's defaults.",
    )
    a(
        "--max-logprobs",
        type=int,
        default=d["max_logprobs"].default,
        help="vLLM's flag: the most top logprobs per position the OpenAI routes return (chat "
        "top_logprobs, completions logprobs, prompt_logprobs; more is a 400); -1: the vocabulary size.",
    )
    a(
        "--default-chat-template-kwargs",
        type=str,
        default=None,
        help="JSON object of chat_template_kwargs for every chat request, e.g. '{\"thinking\": true}' "
        "(a request's own keys win).",
    )
    a(
        "--preferred-sampling-params",
        type=str,
        default=None,
        help='JSON object of sampling parameters, e.g. \'{"temperature": 0.6, "top_p": 0.95}\', '
        "for every generate request that leaves them out (the request's own values win; on chat, "
        "the model's generation_config.json values of --sampling-defaults model win too).",
    )
    a(
        "--allow-auto-truncate",
        action="store_true",
        help="A prompt longer than the context allows keeps its first tokens (instead of a 400), "
        "and max_new_tokens is cut to what the context leaves, as in SGLang.",
    )
    a(
        "--incremental-streaming-output",
        "--stream-output",
        action="store_true",
        dest="incremental_streaming_output",
        help="Streamed /generate chunks carry only the new text, output_ids and output logprobs "
        "(default: everything so far). --stream-output is SGLang's older name.",
    )
    a(
        "--stream-response-default-include-usage",
        action="store_true",
        help="Streamed /v1 responses always end with a usage chunk (as with stream_options.include_usage).",
    )
    a(
        "--enable-force-include-usage",
        action="store_true",
        help="vLLM's flag: streamed chat / completions responses always end with a usage chunk and "
        "carry the usage so far on every chunk, whatever stream_options asks.",
    )
    a(
        "--sse-keep-alive-interval",
        type=float,
        default=d["sse_keep_alive_interval"].default,
        help="vLLM's flag: seconds a streamed response may stay silent before an SSE comment "
        "': keep-alive' is sent (for proxies with an idle timeout); 0 (default): none.",
    )
    a(
        "--weight-version",
        type=str,
        default=d["weight_version"].default,
        help="Reported as meta_info.weight_version.",
    )
    a(
        "--trust-remote-code",
        action="store_true",
        help="Accepted for SGLang command-line compatibility; it changes nothing here: sglang-v4 "
        "never runs code from the model directory (the model, its chat encoding and parsers are "
        "built in).",
    )
    a(
        "--grammar-backend",
        type=str,
        default=d["grammar_backend"].default,
        help="xgrammar: constrained decoding (json_schema / regex / ebnf / structural_tag); none: "
        "off, requests with a grammar are refused. SGLang's outlines / llguidance are refused.",
    )
    a(
        "--constrained-json-max-whitespace-cnt",
        type=int,
        default=None,
        help="Longest run of whitespace a JSON grammar (json_schema / response_format, tool-call "
        "arguments) allows; default 16.",
    )
    a("--random-seed", type=int, default=None)
    a(
        "--skip-server-warmup",
        "--skip-warmup",
        action="store_true",
        dest="skip_warmup",
        help="Announce ready without the start-up warm-up (kernel variants, CUDA graphs and "
        "one generation): the first requests then pay the compiles.",
    )
    a("--watchdog-timeout", type=float, default=d["watchdog_timeout"].default)
    a(
        "--graceful-shutdown-timeout",
        "--shutdown-timeout",
        type=float,
        default=d["graceful_shutdown_timeout"].default,
        help="On SIGTERM / SIGINT, stop admitting requests and let in-flight ones finish for up to "
        "this many seconds (then fail them with 503) before exiting with code 0; 0: no wait. Keep "
        "it below the supervisor's kill timeout (Kubernetes: 30s by default). --shutdown-timeout "
        "is vLLM's name of the same setting.",
    )
    add_sglang_cli_args(parser)
    add_sglang_choices(parser)
