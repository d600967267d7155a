"""GPU test: the FP8 / FP4 runtime (Triton FP8 GEMMs, FP4 MoE, bf16 activations) against HF
transformers in fp32 on the same dequantized weights, teacher-forced.

An official FP8/FP4 checkpoint (``sliding_first`` shapes: every layer type, a hash-routed layer)
is loaded three ways on CUDA: dequantized to bf16 (``--quantization none``: bf16 rounding only,
the calibration), FP8/FP4 kept and the prompt run in one 400-token forward (activation-quantized
``w8a8`` GEMMs), and FP8/FP4 in 32-token chunks (weight-only ``w8a16``). Measured on the CPU with
the torch references emulating the same arithmetic: bf16 alone moves the next-token logprobs by
0.016 on average, 1x128 fp8 activations by 0.06 (this random model has near-uniform
distributions, so these are large; the bounds below give 2-2.5x room).
"""

from __future__ import annotations

import copy

import pytest
import torch
from dsv4_testutil import CONFIGS, random_ids
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.model_loader.loader import load_state_dict
from sglang_v4.server_args import ServerArgs
from sglang_v4.tools.make_checkpoint import write_checkpoint
from sglang_v4.tools.teacher_forcing import next_token_logprobs
from transformers import DeepseekV4Config
from transformers import DeepseekV4ForCausalLM as HFModel

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PAGE = 256


def test_fp8_fp4_runtime_vs_hf_teacher_forced(tmp_path) -> None:
    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    full = ModelConfig.from_dict(copy.deepcopy(cfg)).to_dict()
    path = write_checkpoint(str(tmp_path / "c"), fmt="official", weights="fp8", seed=5, config_dict=full)
    mc = ModelConfig.from_pretrained(path)
    ids = random_ids(400, seed=77)
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
    hf.load_state_dict(
        {k: v.float() if v.is_floating_point() else v for k, v in load_state_dict(path).items()}
    )
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)[:-1]
    ref = ref.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    d = {}
    for quant, chunk in (("none", 400), ("fp8", 400), ("fp8", 32)):
        sa = ServerArgs(
            model_path=path,
            device="cuda",
            dtype="bfloat16",
            page_size=PAGE,
            max_total_tokens=4096,
            max_running_requests=4,
            context_length=2048,
            quantization=quant,
            disable_cuda_graph=True,
        )
        runner = ModelRunner(mc, sa)
        if quant == "fp8":
            sd = runner.model.state_dict()
            assert sd["model.layers.1.self_attn.q_b_proj.weight"].dtype == torch.float8_e4m3fn
            assert sd["model.layers.1.mlp.experts.gate_up_proj"].dtype == torch.uint8
        d[(quant, chunk)] = (next_token_logprobs(runner, ids, chunk) - ref).abs()
        del runner
    bf16 = d[("none", 400)].mean().item()
    assert d[("fp8", 32)].mean().item() <= 2 * bf16 + 0.01, {k: v.mean().item() for k, v in d.items()}
    assert d[("fp8", 400)].mean().item() <= 0.15, {k: v.mean().item() for k, v in d.items()}
