"""SGLang flags sglang-v4 refuses (``UNSUPPORTED``) or honours under another name (``MAPPED``).

``UNSUPPORTED``: features whose absence would change results or the API (LoRA, multimodal servers,
disaggregation, gRPC, returned hidden states, ...); the flag parses, then validation raises a
``ValueError`` naming it. ``MAPPED``: :func:`sglang_v4.server_args_compat.apply_sglang_semantics`
sets the ``ServerArgs`` field meant, or the behaviour is already sglang-v4's.
"""

from __future__ import annotations

from sglang_v4.server_args_compat_flag import (
    LORA,
    MAPPED,
    UNSUPPORTED,
    SGLangFlag,
    json_object,
    json_value,
    nullable_str,
)

#: The refused and the mapped flags.
REFUSED_FLAGS: tuple[SGLangFlag, ...] = (
    SGLangFlag(
        "--disable-decode-cuda-graph",
        MAPPED,
        "= --disable-cuda-graph (turns off the decode and the extend graphs)",
        switch=True,
    ),
    SGLangFlag(
        "--cuda-graph-backend-decode", MAPPED, "disabled = --disable-cuda-graph; full / breakable: graphs on"
    ),
    SGLangFlag(
        "--cuda-graph-config",
        MAPPED,
        'its decode backend "disabled" = --disable-cuda-graph; other settings: sglang-v4 sizes its graphs with --cuda-graph-max-bs / --cuda-graph-bs',
        type=json_object,
    ),
    SGLangFlag(
        "--language-model-only",
        MAPPED,
        "= the behaviour here: sglang-v4 serves text only and refuses multimodal requests",
        switch=True,
    ),
    SGLangFlag(
        "--enable-response-store",
        MAPPED,
        "= the behaviour here: /v1/responses results are kept for GET /v1/responses/{id} and previous_response_id",
        switch=True,
    ),
    SGLangFlag(
        "--enable-return-hidden-states",
        UNSUPPORTED,
        "returning hidden states is not supported (requests carrying return_hidden_states are refused)",
        switch=True,
    ),
    SGLangFlag(
        "--enable-strict-thinking",
        UNSUPPORTED,
        "token filtering during the thinking phase is not implemented",
        switch=True,
    ),
    SGLangFlag(
        "--enable-return-routed-experts",
        UNSUPPORTED,
        "returning the routed experts of each token is not supported",
        switch=True,
    ),
    SGLangFlag(
        "--enable-fp32-lm-head",
        UNSUPPORTED,
        "the LM head runs in --dtype (its logits are then cast to float32); a float32 LM head is not implemented",
        switch=True,
    ),
    SGLangFlag("--enable-lora", UNSUPPORTED, LORA, switch=True),
    SGLangFlag("--lora-paths", UNSUPPORTED, LORA, nargs="*"),
    SGLangFlag("--max-lora-rank", UNSUPPORTED, LORA, type=int),
    SGLangFlag("--max-loras-per-batch", UNSUPPORTED, LORA, type=int, default=8),
    SGLangFlag("--lora-backend", UNSUPPORTED, LORA, default="csgmv"),
    SGLangFlag("--max-loaded-loras", UNSUPPORTED, LORA, type=int),
    SGLangFlag("--lora-target-modules", UNSUPPORTED, LORA, nargs="*"),
    SGLangFlag(
        "--pp-size",
        UNSUPPORTED,
        "pipeline parallelism is not supported: use --tp-size (with --nnodes across nodes)",
        type=int,
        default=1,
        aliases=("--pipeline-parallel-size",),
    ),
    SGLangFlag(
        "--gpu-id-step",
        UNSUPPORTED,
        "ranks use consecutive GPUs from --base-gpu-id; pick them with CUDA_VISIBLE_DEVICES instead",
        type=int,
        default=1,
    ),
    SGLangFlag(
        "--enable-custom-logit-processor",
        UNSUPPORTED,
        "custom logit processors are not supported (requests carrying one are refused)",
        switch=True,
    ),
    SGLangFlag(
        "--constrained-json-whitespace-pattern",
        UNSUPPORTED,
        "the JSON grammar's whitespace is xgrammar's default and cannot be changed",
    ),
    SGLangFlag(
        "--constrained-json-disable-any-whitespace",
        UNSUPPORTED,
        "the JSON grammar's whitespace is xgrammar's default and cannot be changed (bound its runs with --constrained-json-max-whitespace-cnt)",
        switch=True,
    ),
    SGLangFlag(
        "--is-embedding",
        UNSUPPORTED,
        "embedding models are not supported (sglang-v4 serves generation)",
        switch=True,
    ),
    SGLangFlag(
        "--tool-server", UNSUPPORTED, "built-in tool servers are not supported (tools run in the client)"
    ),
    SGLangFlag(
        "--enable-multimodal",
        UNSUPPORTED,
        "multimodal inputs are not supported (DeepSeek-V4 is text-only here)",
        switch=True,
    ),
    SGLangFlag(
        "--disaggregation-mode",
        UNSUPPORTED,
        "prefill/decode disaggregation is not supported: run one server that does both (omit the flag or pass null)",
        default="null",
    ),
    SGLangFlag(
        "--enable-deterministic-inference",
        UNSUPPORTED,
        "batch-invariant (deterministic) inference is not implemented: results may depend on batch composition",
        switch=True,
    ),
    SGLangFlag(
        "--quantization-param-path",
        UNSUPPORTED,
        "KV-cache scaling-factor files are not read: the fp8 KV cache computes its own scales",
        type=nullable_str,
    ),
    SGLangFlag(
        "--modelopt-quant",
        UNSUPPORTED,
        "ModelOpt quantization is not supported (--quantization picks the weight format)",
    ),
    SGLangFlag(
        "--modelopt-checkpoint-restore-path",
        UNSUPPORTED,
        "ModelOpt quantized checkpoints are not supported (--quantization picks the weight format)",
    ),
    SGLangFlag(
        "--quantize-and-serve",
        UNSUPPORTED,
        "ModelOpt quantization is not supported (--quantization picks the weight format)",
        switch=True,
    ),
    SGLangFlag(
        "--gated-launch-port",
        UNSUPPORTED,
        "gated launch (POST /gate/activate before allocating GPU memory) is not implemented: the server starts at once",
        type=int,
    ),
    SGLangFlag(
        "--fastapi-root-path",
        MAPPED,
        "= --root-path: the API's path prefix behind a reverse proxy",
        default="",
    ),
    SGLangFlag(
        "--smg-grpc-mode",
        UNSUPPORTED,
        "gRPC serving is not supported: sglang-v4 serves HTTP (OpenAI / SGLang routes)",
        switch=True,
    ),
    SGLangFlag(
        "--grpc-mode",
        UNSUPPORTED,
        "gRPC serving is not supported: sglang-v4 serves HTTP (OpenAI / SGLang routes)",
        switch=True,
    ),
    SGLangFlag(
        "--grpc-port",
        UNSUPPORTED,
        "gRPC serving is not supported: sglang-v4 serves HTTP (OpenAI / SGLang routes)",
        type=int,
    ),
    SGLangFlag(
        "--enable-http2",
        UNSUPPORTED,
        "HTTP/2 (h2c) is not served: the server speaks HTTP/1.1 (uvicorn)",
        switch=True,
    ),
    SGLangFlag(
        "--enable-ssl-refresh",
        UNSUPPORTED,
        "certificate hot-reloading is not implemented: restart the server to load new certificates",
        switch=True,
    ),
    SGLangFlag(
        "--trust-request-chat-template",
        UNSUPPORTED,
        "per-request chat-template overrides are not supported (the server template renders every request)",
        switch=True,
    ),
    SGLangFlag(
        "--hf-chat-template-name",
        UNSUPPORTED,
        "named HF chat templates are not supported: prompts use the built-in DeepSeek-V4 encoding or --chat-template FILE",
    ),
    SGLangFlag("--completion-template", UNSUPPORTED, "completion (code infill) templates are not supported"),
    SGLangFlag(
        "--return-input-ids",
        UNSUPPORTED,
        "the sglext response extension (input / output token ids on chat responses) is not supported",
        switch=True,
    ),
    SGLangFlag(
        "--return-output-ids",
        UNSUPPORTED,
        "the sglext response extension (input / output token ids on chat responses) is not supported",
        switch=True,
    ),
    SGLangFlag(
        "--enable-streaming-session", UNSUPPORTED, "streaming sessions are not supported", switch=True
    ),
    SGLangFlag(
        "--decoupled-spec-role",
        UNSUPPORTED,
        "decoupled speculative decoding (a verifier or drafter engine of another deployment) is not supported; omit the flag or pass null",
        choices=("null", "verifier", "drafter"),
        default="null",
    ),
    SGLangFlag(
        "--elastic-ep-join-mode",
        UNSUPPORTED,
        "joining a running elastic-EP deployment is not supported: each server starts on its own",
        choices=("scale", "recover"),
    ),
    SGLangFlag("--enable-lora-overlap-loading", UNSUPPORTED, LORA, switch=True),
    SGLangFlag("--lora-eviction-policy", UNSUPPORTED, LORA, choices=("lru", "fifo"), default="lru"),
    SGLangFlag("--max-lora-chunk-size", UNSUPPORTED, LORA, type=int, choices=(16, 32, 64, 128), default=16),
    SGLangFlag("--experts-shared-outer-loras", UNSUPPORTED, LORA, switch=True, negatable=True),
    SGLangFlag("--lora-use-virtual-experts", UNSUPPORTED, LORA, switch=True),
    SGLangFlag("--lora-strict-loading", UNSUPPORTED, LORA, switch=True, negatable=True, default=False),
    SGLangFlag("--lora-drain-wait-threshold", UNSUPPORTED, LORA, type=float, default=0.0),
    SGLangFlag(
        "--kt-weight-path",
        UNSUPPORTED,
        "CPU expert offload (ktransformers, with its own CPU weight format) is not supported: all experts run on the GPUs",
    ),
    SGLangFlag(
        "--dllm-algorithm",
        UNSUPPORTED,
        "diffusion LLM decoding is not supported (sglang-v4 decodes autoregressively)",
    ),
    SGLangFlag(
        "--encoder-only",
        UNSUPPORTED,
        "encoder disaggregation (a multimodal encoder-only server) is not supported",
        switch=True,
    ),
    SGLangFlag(
        "--language-only",
        UNSUPPORTED,
        "encoder disaggregation (a language-model server fed by --encoder-only servers) is not supported",
        switch=True,
    ),
    SGLangFlag(
        "--model-checksum",
        UNSUPPORTED,
        "model file checksum verification is not implemented (the checkpoint would be loaded unverified)",
        nargs="?",
        const="",
    ),
    SGLangFlag(
        "--decrypted-config-file",
        UNSUPPORTED,
        "encrypted model configs are not supported: the model directory's config.json is read",
    ),
    SGLangFlag(
        "--checkpoint-engine-wait-weights-before-ready",
        UNSUPPORTED,
        "checkpoint-engine weight delivery is not supported: weights are read from the model directory",
        switch=True,
    ),
    SGLangFlag(
        "--rl-on-policy-target",
        UNSUPPORTED,
        "matching a trainer's numerics (true on-policy RL) is not implemented",
        choices=("fsdp",),
    ),
    SGLangFlag(
        "--return-hidden-states-mode",
        UNSUPPORTED,
        "returning hidden states is not supported (requests carrying return_hidden_states are refused)",
        choices=("last", "full"),
    ),
    SGLangFlag(
        "--enable-return-indexer-topk",
        UNSUPPORTED,
        "returning the indexer's top-k indices is not supported",
        switch=True,
    ),
    SGLangFlag("--enable-mis", UNSUPPORTED, "multi-item scoring is not supported", switch=True),
    SGLangFlag(
        "--weight-cache-mode",
        UNSUPPORTED,
        "the GPU weight-cache daemon is not supported: each server loads its weights from the model directory",
        choices=("off", "daemon", "client"),
        default="off",
    ),
    SGLangFlag(
        "--forward-hooks", UNSUPPORTED, "forward hooks on the model are not supported", type=json_value
    ),
    SGLangFlag("--enable-watermark", UNSUPPORTED, "text watermarking is not implemented", switch=True),
    SGLangFlag(
        "--enable-return-aux-hidden-states",
        UNSUPPORTED,
        "returning hidden states is not supported (requests carrying return_hidden_states are refused)",
        switch=True,
    ),
)
