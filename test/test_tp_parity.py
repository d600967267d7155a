"""Tensor / expert parallel on CPU (gloo): N ranks give the one-rank results.

The oracle is the same scenario on one rank (``tp_size=1``, tied to HF transformers by the parity
tests): greedy tokens equal, logprobs within fp32 reassociation, through chunked prefill, prefix-cache
hits and retraction (``tp_testutil.scenario``). Every rank's replicated KV pool must end identical
(the request-state operations of rank 0 are replayed on the others).
"""

from __future__ import annotations

import copy

import pytest
from sglang_v4.tools.make_checkpoint import write_checkpoint
from tp_testutil import TP_CONFIG, run_scenario

LP_TOL = 2e-4


@pytest.fixture(scope="module")
def tp_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("tp_model")
    return write_checkpoint(str(d), fmt="hf", weights="fp32", seed=5, config_dict=copy.deepcopy(TP_CONFIG))


@pytest.fixture(scope="module")
def oracle(tp_model_dir: str) -> dict:
    res = run_scenario(tp_model_dir, 1)
    assert res["num_retractions"] > 0, "the scenario must retract"
    reqs = res["reqs"]
    assert reqs["hit1"]["cached"] == 128 and reqs["hit2"]["cached"] >= 128, "the scenario must hit the cache"
    return res


def _assert_same(got: dict, want: dict) -> None:
    assert got["num_retractions"] > 0
    for rid, w in want["reqs"].items():
        g = got["reqs"][rid]
        assert g["ids"] == w["ids"], rid
        assert g["finish"] == w["finish"], rid
        assert len(g["lp"]) == len(w["lp"])
        err = max(abs(a - b) for a, b in zip(g["lp"], w["lp"]))
        assert err <= LP_TOL, (rid, err)
    digests = got["pool_digests"]
    assert len(set(digests)) == 1, f"replicated KV pools differ across ranks: {digests}"


@pytest.mark.parametrize(
    "tp,ep", [pytest.param(2, 1, marks=pytest.mark.slow), (2, 2)], ids=["tp2", "tp2-ep2"]
)
def test_tp_matches_one_rank(tp_model_dir: str, oracle: dict, tp: int, ep: int) -> None:
    """With overlap scheduling (the default): decode inputs are future ids that only rank 0 can
    resolve, broadcast to the other ranks before each forward."""
    got = run_scenario(tp_model_dir, tp, ep_size=ep)
    assert got["overlap"], "the scenario must run the overlap scheduler"
    _assert_same(got, oracle)


@pytest.mark.slow
def test_tp2_without_overlap_matches_one_rank(tp_model_dir: str, oracle: dict) -> None:
    """``--disable-overlap-schedule``: the inline model worker, no future ids."""
    got = run_scenario(tp_model_dir, 2, disable_overlap_schedule=True)
    assert not got["overlap"]
    _assert_same(got, oracle)


@pytest.mark.slow
def test_tp4_ep2_matches_one_rank(tp_model_dir: str, oracle: dict) -> None:
    """TP 4 with 2 expert shards, each expert sliced over 2 ranks (moe_tp_size 2)."""
    _assert_same(run_scenario(tp_model_dir, 4, ep_size=2), oracle)


@pytest.mark.slow
def test_tp2_fp8_fp4_weights_match_one_rank(tmp_path_factory: pytest.TempPathFactory) -> None:
    """DeepSeek's published format kept quantized on every rank (``--quantization fp8``): FP8
    128x128 block-scaled projections split on block boundaries (or inside one block), FP4 experts
    sliced on 32-value scale groups."""
    from sglang_v4.configs.model_config import ModelConfig

    d = tmp_path_factory.mktemp("tp_model_fp8")
    cfg = ModelConfig.from_dict(copy.deepcopy(TP_CONFIG)).to_dict()
    path = write_checkpoint(str(d), fmt="official", weights="fp8", seed=6, config_dict=cfg)
    want = run_scenario(path, 1, quantization="fp8")
    _assert_same(run_scenario(path, 2, quantization="fp8"), want)
