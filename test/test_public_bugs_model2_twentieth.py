"""A twentieth set of public reports on the DeepSeek-V4 model forward under config variants a
checkpoint may carry: the tiny mask-layout config of transformers' DeepSeek-V4 fix (sliding window
8, CSA ratio 4, HCA ratio 8, ``index_topk`` 2) at every length around its boundaries, in one
ragged batch and token by token; a sliding window (4) no wider than the CSA ratio with prompts
that fill the compressed pools; index-cache fields (``index_topk_freq`` / ``index_topk_pattern``)
in a config; and the hash-routing table ``tid2eid`` stored as int32 or naming no expert (each
test names its report).

Oracles: HF transformers' ``DeepseekV4ForCausalLM`` on the same weights (teacher-forced
log-probabilities of one no-cache forward per sequence, fp32 on the CPU, within 1e-3 as
test_model_parity) and the raw tensors of the safetensors files.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from dsv4_testutil import BASE, CSA, HCA, SL, Driver, Twin, hf_logprobs, make_twin, random_ids
from safetensors import safe_open
from safetensors.torch import save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_loader.weight_loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import write_checkpoint

TOL = 1e-3

#: transformers#45892's visualisation config: window 8, CSA m = 4, HCA m' = 8, top-2 indexer.
TINY_MASK_CFG: dict[str, Any] = dict(
    BASE,
    layer_types=[SL, CSA, HCA, CSA],
    mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    sliding_window=8,
    compress_rates={CSA: 4, HCA: 8},
    index_topk=2,
)
#: 1bit-MONSTER#2245's failing fixture: a window of 4 beside the default CSA 4 / HCA 128 rates.
WINDOW_4_CFG: dict[str, Any] = dict(
    BASE, layer_types=[CSA, HCA, CSA, SL], mlp_layer_types=["hash_moe", "moe", "moe", "moe"], sliding_window=4
)
#: the published window (128) and rates (CSA 4, HCA 128), CSA layers first.
WINDOW_128_CFG: dict[str, Any] = dict(
    BASE, layer_types=[CSA, SL, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"]
)


@functools.cache
def _twin(name: str) -> Twin:
    cfg = {"tiny_mask": TINY_MASK_CFG, "window_4": WINDOW_4_CFG, "window_128": WINDOW_128_CFG}[name]
    return make_twin(name, seed=20, cfg=copy.deepcopy(cfg))


def _max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert out.shape == ref.shape
    return (out - ref).abs().max().item()


# ---------------------------------------------------------------------------------------------
# transformers#45892: the tiny mask layout (window 8, CSA 4, HCA 8, top-2)
# ---------------------------------------------------------------------------------------------


def test_transformers_45892_tiny_mask_layout_every_boundary_length_in_one_batch() -> None:
    """huggingface/transformers#45892 (the DeepSeek-V4 fix that laid out, per layer type, the
    sliding-window mask beside the compressed entries and the indexer's top-k picks, on a config
    of window 8, CSA ratio 4, HCA ratio 8 and ``index_topk`` 2): lengths below one CSA entry,
    at and past each compress boundary, past the window, and with more CSA entries than the
    top-k, all in ONE ragged batch, each give HF's log-probabilities on every position."""
    twin = _twin("tiny_mask")
    lengths = [1, 3, 4, 5, 7, 8, 9, 12, 16, 17, 33]
    seqs = [random_ids(n, seed=100 + n) for n in lengths]
    drv = Driver(twin)
    outs = drv.step([(drv.new_req(), ids) for ids in seqs])
    for ids, out in zip(seqs, outs):
        err = _max_err(out, hf_logprobs(twin, ids))
        assert err <= TOL, f"length {len(ids)}: max |dlogprob| {err}"


def test_transformers_45892_tiny_mask_layout_decode_across_window_and_entries() -> None:
    """huggingface/transformers#45892, through the paged KV: a 14-token prefill, then single-token
    decode steps and a short extend that cross the window (8), an HCA entry boundary (16) and
    CSA entries beyond ``index_topk``, agree with HF's one-shot forward over the whole sequence."""
    twin = _twin("tiny_mask")
    ids = random_ids(21, seed=45892)
    drv = Driver(twin)
    slot = drv.new_req()
    outs, pos = [], 0
    for n in (14, 1, 1, 1, 4):
        outs.append(drv.step([(slot, ids[pos : pos + n])])[0])
        pos += n
    err = _max_err(torch.cat(outs), hf_logprobs(twin, ids))
    assert err <= TOL, f"max |dlogprob| {err}"


# ---------------------------------------------------------------------------------------------
# NVIDIA/TensorRT-LLM#13442: hash layers route each token by its own id
# ---------------------------------------------------------------------------------------------


def test_trtllm_13442_hash_layer_routes_every_token_by_its_own_id() -> None:
    """NVIDIA/TensorRT-LLM#13442 (review of a DeepSeek-V4 port: called without ``input_ids`` the
    hash-routed layers looked up ``tid2eid[0]`` for every token, "incorrect but export-friendly").
    Two requests of different tokens in one batch, one of them split over two chunks, give HF's
    log-probabilities; the same weights with every ``tid2eid`` row replaced by row 0 (what that
    fallback computes) give different ones, so the comparison sees the routing."""
    twin = _twin("tiny_mask")
    a, b = random_ids(24, seed=13442), random_ids(17, seed=13443)
    drv = Driver(twin)
    sa, sb = drv.new_req(), drv.new_req()
    first = drv.step([(sa, a[:10]), (sb, b)])
    got_a = torch.cat([first[0], drv.step([(sa, a[10:])])[0]])
    for ids, out in ((a, got_a), (b, first[1])):
        err = _max_err(out, hf_logprobs(twin, ids))
        assert err <= TOL, f"length {len(ids)}: max |dlogprob| {err}"
    state = dict(twin.state)
    key = next(k for k in state if k.endswith("tid2eid"))
    state[key] = state[key][:1].expand_as(state[key]).clone()
    row0 = DeepseekV4ForCausalLM(twin.mc)
    row0.load_state_dict(state, strict=True)
    out = Driver(Twin(name="row0", cfg=twin.cfg, mc=twin.mc, hf=twin.hf, ours=row0)).run_chunked(a, 24)
    assert _max_err(out, hf_logprobs(twin, a)) > 10 * TOL


# ---------------------------------------------------------------------------------------------
# ml-explore/mlx-lm#390: the window holds the query and sliding_window - 1 keys before it
# ---------------------------------------------------------------------------------------------


def test_mlx_lm_390_window_of_w_attends_w_tokens_including_itself() -> None:
    """ml-explore/mlx-lm#390 (a sliding-window mask let each query see one key too many: 129 for a
    window of 128, where the reference attends the query's own token and the 127 before it).
    With one sliding-only layer and ``sliding_window`` 8, the last position's log-probabilities
    depend on the last 8 tokens only: replacing the token 8 places back leaves them unchanged,
    replacing the one 7 places back changes them, and both agree with HF's on the same tokens."""
    cfg = dict(BASE, num_hidden_layers=1, layer_types=[SL], mlp_layer_types=["moe"], sliding_window=8)
    twin = make_twin("one_sliding_layer", seed=390, cfg=cfg)
    ids = random_ids(20, seed=390)
    t = len(ids) - 1

    def last_row(seq: list[int]) -> torch.Tensor:
        out = Driver(twin).run_chunked(seq, len(seq))
        assert _max_err(out, hf_logprobs(twin, seq)) <= TOL
        return out[-1]

    base = last_row(ids)
    outside = list(ids)
    outside[t - 8] = (ids[t - 8] + 1) % 1000
    inside = list(ids)
    inside[t - 7] = (ids[t - 7] + 1) % 1000
    assert (last_row(outside) - base).abs().max().item() <= 1e-6
    assert (last_row(inside) - base).abs().max().item() > 10 * TOL


# ---------------------------------------------------------------------------------------------
# 1bit-MONSTER/1bit-MONSTER#2245: a window of 4 with CSA ratio 4
# ---------------------------------------------------------------------------------------------


def test_1bit_monster_2245_window_as_narrow_as_the_csa_ratio() -> None:
    """1bit-MONSTER/1bit-MONSTER#2245 (a DeepSeek-V4 engine matched HF on a sliding-only fixture
    of window 32 but its top-1 token diverged on a compressed fixture with a window of 4: 64 tokens
    (16 CSA entries) and 160 tokens (40 CSA entries and one HCA entry)): with ``sliding_window``
    4 both prompts, in one batch, give HF's log-probabilities on every position, and so does the
    160-token prompt computed in chunks of 50."""
    twin = _twin("window_4")
    short, long = random_ids(64, seed=64), random_ids(160, seed=160)
    drv = Driver(twin)
    outs = drv.step([(drv.new_req(), short), (drv.new_req(), long)])
    for ids, out in zip((short, long), outs):
        err = _max_err(out, hf_logprobs(twin, ids))
        assert err <= TOL, f"length {len(ids)}: max |dlogprob| {err}"
    err = _max_err(Driver(twin).run_chunked(long, 50), hf_logprobs(twin, long))
    assert err <= TOL, f"chunked: max |dlogprob| {err}"


# ---------------------------------------------------------------------------------------------
# huggingface/transformers#48721: compressed entries while the window is not yet full
# ---------------------------------------------------------------------------------------------


def test_transformers_48721_entries_are_emitted_before_the_window_fills() -> None:
    """huggingface/transformers#48721 (a DeepSeek-V4.1 port located the current token in a mask
    padded to the window's width, so while the context stayed under ``sliding_window`` (128) no
    compressed group was ever emitted). With the published window of 128, a 9-token prompt
    decoded token by token to 31 tokens (7 CSA entries at ratio 4, all within ``index_topk`` 8)
    gives HF's log-probabilities at every position; HF's one-shot forward
    attends those entries, so a runtime that skipped them would differ."""
    twin = _twin("window_128")
    ids = random_ids(31, seed=48721)
    drv = Driver(twin)
    slot = drv.new_req()
    outs = [drv.step([(slot, ids[:9])])[0]]
    outs += [drv.step([(slot, [t])])[0] for t in ids[9:]]
    err = _max_err(torch.cat(outs), hf_logprobs(twin, ids))
    assert err <= TOL, f"max |dlogprob| {err}"


# ---------------------------------------------------------------------------------------------
# NVIDIA-NeMo/Automodel#2201: a bf16 model keeps the precision-sensitive steps in fp32
# ---------------------------------------------------------------------------------------------


def test_automodel_2201_bf16_model_is_as_close_to_fp32_as_the_bf16_reference() -> None:
    """NVIDIA-NeMo/Automodel#2201 (a DeepSeek-V4 port ran the sink softmax and the router scores
    in bf16; the errors compounded over the layers against the reference). The runtime with bf16
    weights and a bf16 KV pool, over 200 tokens (sliding, CSA top-k and HCA layers), must be at
    least as close to HF's fp32 log-probabilities as HF's own model cast to bf16 is (mean
    |dlogprob| within 1.25x of the bf16 reference's, which measures what bf16 weights and
    activations alone cost), and pick HF fp32's top token at >= 90% of the positions."""
    from sglang_v4.mem_cache.memory_pool import DSV4KVPool

    twin = _twin("window_128")
    ids = random_ids(200, seed=2201)
    ref = hf_logprobs(twin, ids).double()
    hf_bf16 = copy.deepcopy(twin.hf).to(torch.bfloat16)
    with torch.no_grad():
        hb = torch.log_softmax(hf_bf16(torch.tensor([ids])).logits[0].double(), dim=-1)
    ours = DeepseekV4ForCausalLM(twin.mc, torch.bfloat16, "cpu")
    ours.load_state_dict(twin.state, strict=True)
    drv = Driver(Twin(name="bf16", cfg=twin.cfg, mc=twin.mc, hf=twin.hf, ours=ours))
    drv.pool = DSV4KVPool(twin.mc, drv.page_size, 64, 256, 4, torch.bfloat16, "cpu")
    ob = drv.run_chunked(ids, 100).double()
    ours_err, hf_err = (ob - ref).abs().mean().item(), (hb - ref).abs().mean().item()
    assert ours_err <= 1.25 * hf_err, f"bf16 runtime mean |dlogprob| {ours_err} vs bf16 HF {hf_err}"
    agree = (ob.argmax(-1) == ref.argmax(-1)).double().mean().item()
    assert agree >= 0.9, f"top-1 agreement with fp32 HF {agree}"


# ---------------------------------------------------------------------------------------------
# sgl-project/sglang#26274: index-cache fields in a config
# ---------------------------------------------------------------------------------------------


def test_sglang_26274_index_cache_fields_do_not_change_the_model() -> None:
    """sgl-project/sglang#26274 (SGLang added ``index_topk_freq`` / ``index_topk_pattern`` to its
    DeepSeek-V4 config so that CSA layers reuse an earlier layer's top-k, an approximation that
    measurably lowered accuracy). A ``config.json`` carrying those keys describes the same
    DeepSeek-V4 model (transformers' reference ignores them): every CSA layer still selects its
    own top-k, so the log-probabilities are HF's on the same weights."""
    twin = _twin("tiny_mask")
    raw = {**copy.deepcopy(TINY_MASK_CFG), "index_topk_freq": 2, "index_topk_pattern": "FS"}
    mc = ModelConfig.from_dict(raw)
    ours = DeepseekV4ForCausalLM(mc)
    ours.load_state_dict(twin.state, strict=True)
    cached = Twin(name="index_cache", cfg=raw, mc=mc, hf=twin.hf, ours=ours)
    ids = random_ids(40, seed=26274)
    err = _max_err(Driver(cached).run_chunked(ids, 40), hf_logprobs(twin, ids))
    assert err <= TOL, f"max |dlogprob| {err}"


# ---------------------------------------------------------------------------------------------
# AI-Hypercomputer/maxtext#4787: the hash-routing table's dtype and values
# ---------------------------------------------------------------------------------------------

HASH_KEY_SUFFIX = "mlp.gate.tid2eid"


@pytest.fixture(scope="module")
def hash_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An HF-named fp32 checkpoint of ``TINY_MASK_CFG`` (one hash layer, 4 experts)."""
    full = ModelConfig.from_dict(copy.deepcopy(TINY_MASK_CFG)).to_dict()
    out = str(tmp_path_factory.mktemp("hash_ckpt"))
    return write_checkpoint(out, fmt="hf", weights="fp32", seed=4787, config_dict=full)


def _rewrite_table(src: str, dst: Path, edit) -> torch.Tensor:  # noqa: ANN001 - edit(table) -> table
    """Copy checkpoint ``src`` to ``dst`` with its ``tid2eid`` passed through ``edit``; returns
    the table as written."""
    dst.mkdir(parents=True, exist_ok=True)
    written = None
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not name.endswith(".safetensors"):
            (dst / name).write_bytes(Path(path).read_bytes())
            continue
        with safe_open(path, "pt") as f:
            meta = f.metadata()
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        for k in tensors:
            if k.endswith(HASH_KEY_SUFFIX):
                tensors[k] = written = edit(tensors[k]).contiguous()
        save_file(tensors, str(dst / name), metadata=meta)
    assert written is not None
    return written


def _load(path: Path) -> DeepseekV4ForCausalLM:
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(str(path)))
    load_weights_into(model, str(path), progress=False)
    return model


def test_maxtext_4787_int32_hash_table_routes_as_stored(hash_ckpt: str, tmp_path: Path) -> None:
    """AI-Hypercomputer/maxtext#4787 (a DeepSeek-V4 port's shape validation broke on the dtype of
    ``tid2eid``; checkpoints store the table as int32 or int64): a table stored as int32 is loaded
    with every entry as written (the raw safetensors tensor), and the model's log-probabilities
    equal those of the same checkpoint with an int64 table."""
    stored = _rewrite_table(hash_ckpt, tmp_path / "i32", lambda t: t.to(torch.int32))
    assert stored.dtype == torch.int32
    m32, m64 = _load(tmp_path / "i32"), _load(Path(hash_ckpt))
    key = next(k for k in m32.state_dict() if k.endswith(HASH_KEY_SUFFIX))
    assert torch.equal(m32.state_dict()[key].cpu(), stored.to(torch.int64))
    ids = random_ids(20, seed=4787)
    outs = []
    for m in (m32, m64):
        twin = Twin(name="hash", cfg=TINY_MASK_CFG, mc=m.mc, hf=None, ours=m)  # type: ignore[arg-type]
        outs.append(Driver(twin).run_chunked(ids, 20))
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("bad", [4, -1], ids=["n_routed_experts", "negative"])
def test_maxtext_4787_hash_table_naming_no_expert_is_refused_at_load(
    hash_ckpt: str, tmp_path: Path, bad: int
) -> None:
    """AI-Hypercomputer/maxtext#4787, the values: ``tid2eid`` rows are expert ids in
    ``[0, n_routed_experts)``. A table kept from a checkpoint with more experts (id 4 of 4
    experts) or holding -1 made HF fail on the first token routed through that row (and a GPU
    kernel read outside the expert weights); loading refuses it, naming the tensor, the token id
    and the expert id, before any request runs."""

    def edit(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[17, 1] = bad
        return t

    _rewrite_table(hash_ckpt, tmp_path / "bad", edit)
    with pytest.raises(
        ValueError, match=rf"tid2eid: token 17 is routed to expert {bad} \(slot 1\), outside \[0, 4\)"
    ):
        _load(tmp_path / "bad")


def test_maxtext_4787_update_to_a_bad_hash_table_rolls_back(hash_ckpt: str, tmp_path: Path) -> None:
    """AI-Hypercomputer/maxtext#4787, on ``update_weights_from_disk``: reloading a checkpoint whose
    ``tid2eid`` names expert 4 of 4 is refused and the served model gets the previous
    checkpoint's table back (the raw tensor of its safetensors file), so no request runs on it."""
    from sglang_v4.model_loader import weight_update

    class _OneRank:
        def min_int(self, v: int) -> int:
            return v

    def edit(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[3, 0] = 4
        return t

    _rewrite_table(hash_ckpt, tmp_path / "bad", edit)
    model = _load(Path(hash_ckpt))
    with pytest.raises(
        ValueError, match=r"tid2eid: token 3 is routed to expert 4.*Rolled back to the weights of"
    ):
        weight_update.swap_weights(model, _OneRank(), str(tmp_path / "bad"), hash_ckpt)
    key = next(k for k in model.state_dict() if k.endswith(HASH_KEY_SUFFIX))
    served = model.state_dict()[key].cpu()
    stored = []
    for name in sorted(os.listdir(hash_ckpt)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(hash_ckpt, name), "pt") as f:
                stored += [f.get_tensor(k) for k in f.keys() if k.endswith(HASH_KEY_SUFFIX)]
    assert len(stored) == 1 and torch.equal(served, stored[0].to(torch.int64))
