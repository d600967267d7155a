"""The gathered-entry attention paths of long prefill runs (``sgl_kernel_v4.triton.attention_prefix``:
HCA entries as dense products, CSA fp8 entries decoded once) inside the model, on CUDA.

Two runners with identical dummy weights prefill the same 40,960-token prompt in 2,048-token
chunks: one with ``SGLANG_V4_HCA_DENSE_PREFIX=0`` (every token through the paged kernel, checked
against the float64 oracle by ``test_kernels_attention.py``), one with the paths on (from 32K
tokens the HCA layer's first chunk token sees 256 entries; with fp8 KV the CSA layers decode every
chunk's entries once, and with fp4 indexer keys the indexer scores every chunk over its keys decoded
once). The last-token logits of every chunk must agree to bf16 rounding (the
paths differ in summation order). bf16 and fp8 KV; with fp4 indexer keys, each decoded indexer
call against the pool path on the same inputs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from cuda_graph_testutil import PAGE, _Seq
from dsv4_testutil import CONFIGS
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_executor.model_runner import ModelRunner
from sglang_v4.server_args import ServerArgs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

PROMPT, CHUNK = 40_960, 2_048


def _runners(
    mc: ModelConfig, kv: str, names: tuple[str, ...] = ("paged", "gathered")
) -> dict[str, ModelRunner]:
    sa = ServerArgs(
        device="cuda",
        dtype="bfloat16",
        page_size=PAGE,
        max_total_tokens=PROMPT + 4096,
        max_running_requests=2,
        context_length=PROMPT + 1024,
        load_format="dummy",
        random_seed=3,
        disable_cuda_graph=True,
        indexer_stream_max_bs=0,
        kv_cache_dtype=kv.split("+")[0],
        enable_fp4_indexer=kv.endswith("+fp4"),
    )
    return {k: ModelRunner(mc, sa) for k in names}


def _prefill(runners: dict[str, ModelRunner], prompt: int, monkeypatch: pytest.MonkeyPatch):
    """Yield ``(c0, logits)`` per 2,048-token chunk: the last-token logits of each runner, the
    "paged" one with the gathered paths off."""
    seqs = {k: _Seq(r) for k, r in runners.items()}
    ids = torch.randint(0, 1000, (prompt,), generator=torch.Generator().manual_seed(1)).tolist()
    for c0 in range(0, prompt, CHUNK):
        chunk = ids[c0 : c0 + CHUNK]
        logits = {}
        for k, r in runners.items():
            monkeypatch.setenv("SGLANG_V4_HCA_DENSE_PREFIX", "0" if k == "paged" else "1")
            _, logits[k] = r.forward([seqs[k].inp(chunk)])
            seqs[k].advance(len(chunk))
        yield c0, logits


@pytest.mark.parametrize("kv", ["auto", "fp8_e4m3"])
def test_gathered_paths_match_paged_in_the_model(kv: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sgl_kernel_v4.dense_prefix import dense_prefix_segments

    mc = ModelConfig.from_dict(copy.deepcopy(CONFIGS["sliding_first"]))  # SL, CSA, HCA, CSA
    dense_chunks, diffs, bad = 0, [], []
    for c0, logits in _prefill(_runners(mc, kv), PROMPT, monkeypatch):
        dense_chunks += bool(dense_prefix_segments([CHUNK], [c0], 128))
        g, p = logits["gathered"].float(), logits["paged"].float()
        diffs.append((c0, round((g - p).abs().max().item(), 4)))
        if not torch.allclose(g, p, rtol=2e-2, atol=5e-2):
            bad.append(c0)
    assert not bad, f"chunks {bad} differ beyond bf16 rounding; max |diff| per chunk: {diffs}"
    assert dense_chunks == 4  # HCA: the chunks from 32,768 on (CSA: every chunk)


def test_fp4_indexer_decoded_calls_equal_the_pool_path_in_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8 KV + fp4 indexer keys, a 12,288-token prompt in 2,048-token chunks: every indexer call
    the model routes to the decoded copy (``indexer_decoded.indexer_topk_decoded``) returns the
    same indices as the pool path on the same inputs. (Two whole runs cannot be compared bit for
    bit: the MoE combine adds the experts' outputs with fp32 atomics, in no fixed order, and fp4
    keys tie often enough that such ulps flip a selection now and then.)"""
    from sgl_kernel_v4.triton import indexer, indexer_decoded

    mc = ModelConfig.from_dict(copy.deepcopy(CONFIGS["sliding_first"]))  # SL, CSA, HCA, CSA
    runners = _runners(mc, "fp8_e4m3+fp4", ("gathered",))  # (its start-up forwards not counted)
    original = indexer_decoded.indexer_topk_decoded
    calls = []

    def checked(*args, max_visible=None):  # args: indexer_topk's, then the segments
        got = original(*args, max_visible=max_visible)
        want = indexer.indexer_topk(*args[:-1], max_visible=max_visible)
        calls.append(bool(torch.equal(got, want)))
        return got

    monkeypatch.setattr(indexer_decoded, "indexer_topk_decoded", checked)
    topk = mc.hf.index_topk
    for c0, _ in _prefill(runners, 6 * CHUNK, monkeypatch):
        expected = len(mc.csa_layers) * sum((c + CHUNK) // 4 > topk for c in range(0, c0 + CHUNK, CHUNK))
        assert len(calls) == expected and all(calls), (c0, calls)
