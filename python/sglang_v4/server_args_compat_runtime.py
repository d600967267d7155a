"""SGLang flags of runtime services sglang-v4 does not run: accepted and ignored.

Host-memory cache tiers, loader and hub options, observability exports, tokenizer workers, debug
knobs, internal ports, and the knobs of features that are absent or refused here (only read with
prefill/decode disaggregation, multimodal inputs, Mamba layers, ...: the feature's own switch is in
:mod:`sglang_v4.server_args_compat_refused`). None changes the tokens a request gets back.
"""

from __future__ import annotations

from sglang_v4.server_args_compat_flag import (
    CACHE,
    DEBUG,
    DLLM,
    EPD,
    EVICT,
    GRPC,
    HISPARSE,
    HTTP2,
    HUB,
    IGNORED,
    KT,
    LOADER,
    MAMBA,
    MM,
    OBS,
    OFFLOAD,
    OTHER_MODEL,
    PD,
    PORTS,
    REMOTE_LOAD,
    TOKENIZER,
    WEIGHT_BACKUP,
    SGLangFlag,
    json_value,
)

#: SGLang's ``--linear-attn-*-backend`` choices (the verify backend adds ``nv_cutedsl``).
LINEAR_ATTN_BACKENDS = (
    "triton",
    "cutedsl",
    "flashinfer",
    "flashkda",
    "nvidia_kda",
    "ptx_kda",
    "helion",
    "intel_xpu",
)

#: SGLang 0.5.23's ``--radix-eviction-policy`` choices (``arg_groups/choices.py``); SGLang's parser
#: exits 2 on any other value, and so does this one.
RADIX_EVICTION_POLICY_CHOICES = ("lru", "lfu", "slru", "priority", "tlru")

#: The ignored runtime-service flags.
RUNTIME_FLAGS: tuple[SGLangFlag, ...] = (
    SGLangFlag("--mm-attention-backend", IGNORED, "sglang-v4 serves text-only models"),
    SGLangFlag(
        "--tokenizer-mode",
        IGNORED,
        "sglang-v4 always uses the fast tokenizer (tokenizer.json)",
        default="auto",
    ),
    SGLangFlag(
        "--numa-node", IGNORED, "sglang-v4 does not pin its processes to NUMA nodes", type=int, nargs="+"
    ),
    SGLangFlag(
        "--soft-watchdog-timeout", IGNORED, "sglang-v4 has one watchdog (--watchdog-timeout)", type=float
    ),
    SGLangFlag(
        "--detokenizer-worker-num", IGNORED, "sglang-v4 runs one detokenizer process", type=int, default=1
    ),
    SGLangFlag(
        "--uvicorn-access-log-exclude-prefixes",
        IGNORED,
        "uvicorn's access lines show only with --log-level debug here, unfiltered (see --log-requests)",
        nargs="*",
    ),
    SGLangFlag("--log-level-http", IGNORED, "sglang-v4's HTTP server logs at --log-level"),
    SGLangFlag(
        "--enable-ep-moe",
        IGNORED,
        "sglang-v4 has one MoE implementation (its fused routed-expert kernels; EP is --ep-size); set --ep-size to shard whole experts",
        switch=True,
    ),
    SGLangFlag(
        "--delete-ckpt-after-loading", IGNORED, "sglang-v4 never deletes checkpoint files", switch=True
    ),
    SGLangFlag("--warmups", IGNORED, "sglang-v4 runs its own start-up warm-up (--skip-server-warmup)"),
    SGLangFlag(
        "--enable-metrics-for-all-schedulers", IGNORED, "sglang-v4 has one scheduler per server", switch=True
    ),
    SGLangFlag("--disable-outlines-disk-cache", IGNORED, "sglang-v4 does not use outlines", switch=True),
    SGLangFlag(
        "--strip-thinking-cache",
        IGNORED,
        "only what the radix cache keeps differs (outputs are the same)",
        switch=True,
    ),
    SGLangFlag(
        "--model-config-parser",
        IGNORED,
        "sglang-v4 reads the DeepSeek-V4 config.json itself (one model-config parser)",
        default="auto",
    ),
    SGLangFlag(
        "--modelopt-checkpoint-save-path", IGNORED, "only read with --modelopt-quant, which sglang-v4 refuses"
    ),
    SGLangFlag("--modelopt-export-path", IGNORED, "only read with --modelopt-quant, which sglang-v4 refuses"),
    SGLangFlag(
        "--rl-quant-profile", IGNORED, "only read with --load-format flash_rl, which sglang-v4 refuses"
    ),
    SGLangFlag(
        "--prefill-only-disable-kv-cache",
        IGNORED,
        "only read with --is-embedding, which sglang-v4 refuses",
        switch=True,
    ),
    SGLangFlag(
        "--enable-session-radix-cache",
        IGNORED,
        "only read for session requests, which sglang-v4 does not serve (--enable-streaming-session is refused)",
        switch=True,
    ),
    SGLangFlag(
        "--custom-weight-loader",
        IGNORED,
        "only read by weight updates from a custom loader, which sglang-v4 does not do (update_weights_from_disk reads safetensors)",
        nargs="*",
    ),
    SGLangFlag(
        "--sampling-mask-max-tokens",
        IGNORED,
        "sglang-v4 does not return sampling masks",
        type=int,
        default=4096,
    ),
    SGLangFlag(
        "--weight-cache-socket", IGNORED, "only read with --weight-cache-mode, which sglang-v4 refuses"
    ),
    SGLangFlag(
        "--weight-cache-timeout",
        IGNORED,
        "only read with --weight-cache-mode, which sglang-v4 refuses",
        type=int,
        default=1800,
    ),
    SGLangFlag(
        "--prefill-kv-cache-dequant-dtype",
        IGNORED,
        "only read with --kv-cache-dtype nvfp4, which sglang-v4 refuses",
        choices=("auto", "nvfp4", "fp8_e4m3"),
        default="auto",
    ),
    SGLangFlag("--watermark-config", IGNORED, "only read with --enable-watermark, which sglang-v4 refuses"),
    SGLangFlag(
        "--enable-http-worker-reuseport", IGNORED, "sglang-v4 runs one HTTP worker process", switch=True
    ),
    SGLangFlag(
        "--return-aux-hidden-state-layer-ids",
        IGNORED,
        "names the layers captured for speculative drafting or --enable-return-aux-hidden-states; neither runs here (the latter is refused)",
        type=int,
        nargs="+",
    ),
    SGLangFlag("--revision", IGNORED, HUB),
    SGLangFlag("--download-dir", IGNORED, HUB),
    SGLangFlag("--enable-hierarchical-cache", IGNORED, CACHE, switch=True, aliases=("--enable-hicache",)),
    SGLangFlag("--hicache-host-memory-fraction", IGNORED, CACHE, type=float, default=0.8),
    SGLangFlag("--hicache-ratio", IGNORED, CACHE, type=float),
    SGLangFlag("--hicache-size", IGNORED, CACHE, type=int, default=0),
    SGLangFlag("--hicache-storage-backend", IGNORED, CACHE),
    SGLangFlag("--hicache-mem-layout", IGNORED, CACHE, default="page_first"),
    SGLangFlag("--hicache-io-backend", IGNORED, CACHE, default="kernel"),
    SGLangFlag("--hicache-write-policy", IGNORED, CACHE, default="write_through"),
    SGLangFlag("--hicache-storage-prefetch-policy", IGNORED, CACHE, default="timeout"),
    SGLangFlag("--hicache-storage-backend-extra-config", IGNORED, CACHE),
    SGLangFlag("--enable-lmcache", IGNORED, CACHE, switch=True),
    SGLangFlag("--radix-cache-backend", IGNORED, CACHE),
    SGLangFlag(
        "--hicache-host-memory-mode", IGNORED, CACHE, choices=("cache", "buffer_only"), default="cache"
    ),
    SGLangFlag("--hicache-storage-prefetch-retry-poll-interval", IGNORED, CACHE, type=int, default=8),
    SGLangFlag("--hicache-storage-prefetch-retry-max-attempts", IGNORED, CACHE, type=int, default=8),
    SGLangFlag("--enable-unified-cache-external-linker", IGNORED, CACHE, switch=True),
    SGLangFlag(
        "--unified-cache-external-linker-backend",
        IGNORED,
        CACHE,
        choices=("mooncake", "mori", "dynamic"),
        default="mooncake",
    ),
    SGLangFlag("--lmcache-config-file", IGNORED, CACHE),
    SGLangFlag("--enable-flexkv", IGNORED, CACHE, switch=True),
    SGLangFlag("--flexkv-config-file", IGNORED, CACHE),
    SGLangFlag("--enable-linker-mla-dedup", IGNORED, CACHE, switch=True),
    SGLangFlag("--unified-cache-external-linker-config", IGNORED, CACHE, type=json_value),
    SGLangFlag("--enable-cudagraph-gc", IGNORED, DEBUG, switch=True),
    SGLangFlag("--enable-memory-saver", IGNORED, DEBUG, switch=True),
    SGLangFlag("--sleep-on-idle", IGNORED, DEBUG, switch=True),
    SGLangFlag("--enable-nan-detection", IGNORED, DEBUG, switch=True),
    SGLangFlag("--num-continuous-decode-steps", IGNORED, DEBUG, type=int, default=1),
    SGLangFlag("--max-micro-batch-size", IGNORED, DEBUG),
    SGLangFlag("--sm-group-num", IGNORED, DEBUG, type=int, default=8),
    SGLangFlag("--gc-warning-threshold-secs", IGNORED, DEBUG, type=float, default=0.0),
    SGLangFlag("--crash-dump-folder", IGNORED, DEBUG),
    SGLangFlag("--gc-threshold", IGNORED, DEBUG, type=int, nargs="+"),
    SGLangFlag("--scheduler-recv-interval", IGNORED, DEBUG, type=int, default=1),
    SGLangFlag("--batch-notify-size", IGNORED, DEBUG, type=int, default=16),
    SGLangFlag("--enable-profile-cuda-graph", IGNORED, DEBUG, switch=True),
    SGLangFlag("--debug-cuda-graph", IGNORED, DEBUG, switch=True),
    SGLangFlag("--enable-layerwise-nvtx-marker", IGNORED, DEBUG, switch=True),
    SGLangFlag("--kv-canary", IGNORED, DEBUG, choices=("none", "log", "raise"), default="none"),
    SGLangFlag("--kv-canary-sweep-interval", IGNORED, DEBUG, type=int, default=0),
    SGLangFlag("--debug-tensor-dump-output-folder", IGNORED, DEBUG),
    SGLangFlag("--debug-tensor-dump-layers", IGNORED, DEBUG, type=int, nargs="+"),
    SGLangFlag("--debug-tensor-dump-input-file", IGNORED, DEBUG),
    SGLangFlag("--kv-canary-real-data", IGNORED, DEBUG, choices=("none", "partial", "all"), default="none"),
    SGLangFlag("--tokenizer-worker-num", IGNORED, TOKENIZER, type=int, default=1),
    SGLangFlag("--enable-tokenizer-batch-encode", IGNORED, TOKENIZER, switch=True),
    SGLangFlag("--enable-dynamic-batch-tokenizer", IGNORED, TOKENIZER, switch=True),
    SGLangFlag(
        "--tokenizer-backend", IGNORED, TOKENIZER, choices=("huggingface", "fastokens"), default="huggingface"
    ),
    SGLangFlag("--dynamic-batch-tokenizer-batch-size", IGNORED, TOKENIZER, type=int, default=32),
    SGLangFlag("--dynamic-batch-tokenizer-batch-timeout", IGNORED, TOKENIZER, type=float, default=0.002),
    SGLangFlag("--disable-tokenizer-batch-decode", IGNORED, TOKENIZER, switch=True),
    SGLangFlag("--enable-hisparse", IGNORED, HISPARSE, switch=True),
    SGLangFlag(
        "--hisparse-config", IGNORED, HISPARSE, aliases=("--hierarchical-sparse-attention-extra-config",)
    ),
    SGLangFlag("--disaggregation-transfer-backend", IGNORED, PD, default="mooncake"),
    SGLangFlag("--disaggregation-ib-device", IGNORED, PD),
    SGLangFlag("--disaggregation-bootstrap-port", IGNORED, PD, type=int, default=8998),
    SGLangFlag("--disaggregation-decode-enable-radix-cache", IGNORED, PD, switch=True),
    SGLangFlag("--mooncake-ib-device", IGNORED, PD),
    SGLangFlag("--disaggregation-decode-enable-offload-kvcache", IGNORED, PD, switch=True),
    SGLangFlag(
        "--disaggregation-decode-retraction-backup", IGNORED, PD, choices=("cpu_tensor", "host_pool", "none")
    ),
    SGLangFlag("--disaggregation-decode-extra-slots", IGNORED, PD, type=int),
    SGLangFlag("--disaggregation-decode-polling-interval", IGNORED, PD, type=int, default=1),
    SGLangFlag("--optimistic-prefill-attempts", IGNORED, PD, type=int, default=0),
    SGLangFlag("--disaggregation-enable-kv-checksum", IGNORED, PD, switch=True),
    SGLangFlag("--enable-pd-role-switch", IGNORED, PD, switch=True),
    SGLangFlag("--disaggregation-decode-host-receive-threshold", IGNORED, PD, type=float, default=1.0),
    SGLangFlag(
        "--disaggregation-decode-allocation-policy",
        IGNORED,
        PD,
        choices=("early", "prefill_complete"),
        default="early",
    ),
    SGLangFlag("--model-loader-extra-config", IGNORED, LOADER, default="{}"),
    SGLangFlag("--weight-loader-disable-mmap", IGNORED, LOADER, switch=True),
    SGLangFlag(
        "--startup-weight-load-mode", IGNORED, LOADER, choices=("serial", "overlap"), default="serial"
    ),
    SGLangFlag("--weight-loader-prefetch-checkpoints", IGNORED, LOADER, switch=True),
    SGLangFlag("--weight-loader-prefetch-num-threads", IGNORED, LOADER, type=int, default=4),
    SGLangFlag("--weight-loader-drop-cache-after-load", IGNORED, LOADER, switch=True),
    SGLangFlag("--cpu-offload-gb", IGNORED, OFFLOAD, type=int, default=0),
    SGLangFlag("--offload-group-size", IGNORED, OFFLOAD, type=int, default=-1),
    SGLangFlag("--offload-num-in-group", IGNORED, OFFLOAD, type=int, default=1),
    SGLangFlag("--offload-prefetch-step", IGNORED, OFFLOAD, type=int, default=1),
    SGLangFlag("--offload-mode", IGNORED, OFFLOAD, default="cpu"),
    SGLangFlag("--enable-paged-experts", IGNORED, OFFLOAD, switch=True),
    SGLangFlag("--paged-experts-num-resident", IGNORED, OFFLOAD, type=int),
    SGLangFlag("--show-time-cost", IGNORED, OBS, switch=True),
    SGLangFlag("--enable-trace", IGNORED, OBS, switch=True),
    SGLangFlag("--otlp-traces-endpoint", IGNORED, OBS, default="localhost:4317"),
    SGLangFlag("--export-metrics-to-file", IGNORED, OBS, switch=True),
    SGLangFlag("--collect-tokens-histogram", IGNORED, OBS, switch=True),
    SGLangFlag("--prompt-tokens-buckets", IGNORED, OBS, nargs="+"),
    SGLangFlag("--generation-tokens-buckets", IGNORED, OBS, nargs="+"),
    SGLangFlag("--tokenizer-metrics-allowed-custom-labels", IGNORED, OBS, nargs="+"),
    SGLangFlag("--enable-mfu-metrics", IGNORED, OBS, switch=True),
    SGLangFlag("--load-snapshot-publish-interval", IGNORED, OBS, type=int, default=15),
    SGLangFlag("--tokenizer-metrics-custom-labels-header", IGNORED, OBS, default="x-custom-labels"),
    SGLangFlag("--extra-metric-labels", IGNORED, OBS, type=json_value),
    SGLangFlag("--kv-events-config", IGNORED, OBS),
    SGLangFlag("--load-publish-endpoint", IGNORED, OBS),
    SGLangFlag("--enable-forward-pass-metrics", IGNORED, OBS, switch=True),
    SGLangFlag("--forward-pass-metrics-worker-id", IGNORED, OBS, default=""),
    SGLangFlag("--forward-pass-metrics-ipc-name", IGNORED, OBS),
    SGLangFlag("--trace-modules", IGNORED, OBS, default="request"),
    SGLangFlag("--export-metrics-to-file-dir", IGNORED, OBS),
    SGLangFlag("--otlp-service-name", IGNORED, OBS),
    SGLangFlag(
        "--radix-eviction-policy",
        IGNORED,
        EVICT,
        choices=RADIX_EVICTION_POLICY_CHOICES,
        default="lru",
    ),
    SGLangFlag("--radix-eviction-policy-config", IGNORED, EVICT, type=json_value),
    SGLangFlag("--nccl-port", IGNORED, PORTS, type=int),
    SGLangFlag("--engine-info-bootstrap-port", IGNORED, PORTS, type=int, default=6789),
    SGLangFlag("--sidecar", IGNORED, GRPC),
    SGLangFlag("--sidecar-args", IGNORED, GRPC, type=json_value),
    SGLangFlag("--smg-http-sidecar-port", IGNORED, GRPC, type=int, aliases=("--grpc-http-sidecar-port",)),
    SGLangFlag("--grpc-response-timeout-secs", IGNORED, GRPC, type=int, default=300),
    SGLangFlag("--http2-max-concurrent-streams", IGNORED, HTTP2, type=int, default=200),
    SGLangFlag("--http2-initial-connection-window-size", IGNORED, HTTP2, type=int, default=1048576),
    SGLangFlag("--asr-max-buffer-seconds", IGNORED, MM, type=int, default=60),
    SGLangFlag("--asr-max-concurrent-sessions", IGNORED, MM, type=int, default=32),
    SGLangFlag("--enable-precise-embedding-interpolation", IGNORED, MM, switch=True),
    SGLangFlag("--enable-broadcast-mm-inputs-process", IGNORED, MM, switch=True),
    SGLangFlag("--enable-prefix-mm-cache", IGNORED, MM, switch=True),
    SGLangFlag("--mm-enable-dp-encoder", IGNORED, MM, switch=True, negatable=True),
    SGLangFlag("--mm-process-config", IGNORED, MM, type=json_value),
    SGLangFlag("--mm-processor-worker-num", IGNORED, MM, type=int, default=0),
    SGLangFlag("--mm-io-worker-num", IGNORED, MM, type=int, default=0),
    SGLangFlag("--allowed-media-domains", IGNORED, MM, nargs="+"),
    SGLangFlag("--media-url-max-file-size-mb", IGNORED, MM, type=int, default=64),
    SGLangFlag("--mm-preprocess-cache-size-mb", IGNORED, MM, type=int),
    SGLangFlag("--trust-mm-content-hashes", IGNORED, MM, switch=True),
    SGLangFlag("--limit-mm-data-per-request", IGNORED, MM, type=json_value),
    SGLangFlag("--enable-mm-global-cache", IGNORED, MM, switch=True),
    SGLangFlag(
        "--image-processor-backend", IGNORED, MM, choices=("auto", "torchvision", "pil"), default="auto"
    ),
    SGLangFlag("--mm-global-cache-backend", IGNORED, MM, choices=("mooncake",), default="mooncake"),
    SGLangFlag("--disable-fast-image-processor", IGNORED, MM, switch=True),
    SGLangFlag("--mm-feature-transport", IGNORED, MM, choices=("cpu", "cuda_ipc", "cuda_vmm")),
    SGLangFlag("--mamba-backend", IGNORED, MAMBA, choices=("triton", "flashinfer"), default="triton"),
    SGLangFlag("--max-mamba-cache-size", IGNORED, MAMBA, type=int),
    SGLangFlag("--mamba-ssm-dtype", IGNORED, MAMBA, choices=("float32", "bfloat16", "float16")),
    SGLangFlag("--mamba-max-states-per-path", IGNORED, MAMBA, type=int, default=-1),
    SGLangFlag("--enable-mamba-cache-stochastic-rounding", IGNORED, MAMBA, switch=True),
    SGLangFlag("--mamba-cache-philox-rounds", IGNORED, MAMBA, type=int, default=0),
    SGLangFlag("--mamba-full-memory-ratio", IGNORED, MAMBA, type=float),
    SGLangFlag(
        "--mamba-radix-cache-strategy",
        IGNORED,
        MAMBA,
        choices=("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy"),
        default="auto",
    ),
    SGLangFlag("--mamba-track-interval", IGNORED, MAMBA, type=int, default=256),
    SGLangFlag("--enable-int8-mamba-checkpoint", IGNORED, MAMBA, switch=True),
    SGLangFlag("--int8-mamba-ckpt-size", IGNORED, MAMBA, type=int),
    SGLangFlag(
        "--linear-attn-backend",
        IGNORED,
        MAMBA,
        choices=LINEAR_ATTN_BACKENDS,
        default="triton",
    ),
    SGLangFlag(
        "--linear-attn-decode-backend",
        IGNORED,
        MAMBA,
        choices=LINEAR_ATTN_BACKENDS,
    ),
    SGLangFlag(
        "--linear-attn-prefill-backend",
        IGNORED,
        MAMBA,
        choices=LINEAR_ATTN_BACKENDS,
    ),
    SGLangFlag(
        "--linear-attn-verify-backend",
        IGNORED,
        MAMBA,
        choices=(*LINEAR_ATTN_BACKENDS, "nv_cutedsl"),
    ),
    SGLangFlag("--enable-linear-replayssm", IGNORED, MAMBA, switch=True),
    SGLangFlag("--linear-replayssm-cache-len", IGNORED, MAMBA, type=int, default=16),
    SGLangFlag("--enable-linear-replayssm-spec", IGNORED, MAMBA, switch=True),
    SGLangFlag("--enable-scattered-sconv", IGNORED, OTHER_MODEL, switch=True),
    SGLangFlag("--ple-offload-embedding", IGNORED, OTHER_MODEL, switch=True, negatable=True),
    SGLangFlag("--ple-offload-backend", IGNORED, OTHER_MODEL, choices=("pinned", "file"), default="pinned"),
    SGLangFlag("--ple-offload-dir", IGNORED, OTHER_MODEL),
    SGLangFlag(
        "--qsa-indexer-dtype", IGNORED, OTHER_MODEL, choices=("auto", "bfloat16", "fp8_e4m3"), default="auto"
    ),
    SGLangFlag("--enable-megamoe-for-layernorm-sp", IGNORED, OTHER_MODEL, switch=True),
    SGLangFlag("--kt-method", IGNORED, KT, default="AMXINT4"),
    SGLangFlag("--kt-cpuinfer", IGNORED, KT, type=int),
    SGLangFlag("--kt-threadpool-count", IGNORED, KT, type=int, default=2),
    SGLangFlag("--kt-num-gpu-experts", IGNORED, KT, type=int),
    SGLangFlag("--kt-max-deferred-experts-per-token", IGNORED, KT, type=int),
    SGLangFlag("--dllm-algorithm-config", IGNORED, DLLM),
    SGLangFlag("--dllm-fdfo", IGNORED, DLLM, switch=True, negatable=True, default=True),
    SGLangFlag(
        "--encoder-transfer-backend",
        IGNORED,
        EPD,
        choices=("auto", "zmq_to_scheduler", "zmq_to_tokenizer", "mooncake"),
        default="auto",
    ),
    SGLangFlag("--encoder-urls", IGNORED, EPD, nargs="+"),
    SGLangFlag("--encoder-bootstrap-port", IGNORED, EPD, type=int, default=8997),
    SGLangFlag("--encoder-register-urls", IGNORED, EPD, nargs="+"),
    SGLangFlag("--enable-adaptive-dispatch-to-encoder", IGNORED, EPD, switch=True),
    SGLangFlag("--remote-instance-weight-loader-seed-instance-ip", IGNORED, REMOTE_LOAD),
    SGLangFlag("--remote-instance-weight-loader-seed-instance-service-port", IGNORED, REMOTE_LOAD, type=int),
    SGLangFlag(
        "--remote-instance-weight-loader-send-weights-group-ports", IGNORED, REMOTE_LOAD, type=json_value
    ),
    SGLangFlag(
        "--remote-instance-weight-loader-backend",
        IGNORED,
        REMOTE_LOAD,
        choices=("transfer_engine", "nccl", "modelexpress"),
        default="nccl",
    ),
    SGLangFlag(
        "--remote-instance-weight-loader-start-seed-via-transfer-engine", IGNORED, REMOTE_LOAD, switch=True
    ),
    SGLangFlag("--modelexpress-config", IGNORED, REMOTE_LOAD),
    SGLangFlag("--enable-weights-cpu-backup", IGNORED, WEIGHT_BACKUP, switch=True),
    SGLangFlag("--enable-draft-weights-cpu-backup", IGNORED, WEIGHT_BACKUP, switch=True),
)
