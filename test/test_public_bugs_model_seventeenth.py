"""A seventeenth set of public reports, model configs and checkpoint files: a ``config.json``
written by transformers' own ``DeepseekV4Config``, a safetensors index that names a missing
shard or a tensor its shard lacks, a stray ``.safetensors`` beside the index, FP8 blocks that do
not tile the weight, tied and untied LM heads, YaRN's ``mscale`` fields, and a BPE tokenizer's
decoding (each test names its report).

Oracles: HF transformers (``DeepseekV4Config``, ``DeepseekV4ForCausalLM.from_pretrained`` on the
same files, ``AutoTokenizer``), float64 references written here from the documented formats
(``w = q * scale`` over ``weight_block_size`` blocks, partial at the edges), and the same
checkpoint loaded cold without the edit under test.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from dsv4_testutil import CONFIGS, Driver, hf_logprobs, make_twin, random_ids
from safetensors import safe_open
from safetensors.torch import save_file
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_loader.loader import INDEX_FILE, checkpoint_files
from sglang_v4.model_loader.quant import FP8_DTYPE, dequantize_fp8_block
from sglang_v4.model_loader.weight_loader import load_weights_into
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
from sglang_v4.tools.make_checkpoint import write_checkpoint

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides


def _load(path: str) -> DeepseekV4ForCausalLM:
    """The runtime model of the checkpoint directory ``path``, loaded by the runtime loader."""
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(path))
    load_weights_into(model, path, progress=False)
    return model


def _same_state(a: DeepseekV4ForCausalLM, b: DeepseekV4ForCausalLM) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An official-format FP8 / FP4 checkpoint in three shards listed by its index."""
    out = str(tmp_path_factory.mktemp("sharded17"))
    write_checkpoint(
        out, fmt="official", weights="fp8", seed=17, config_dict=copy.deepcopy(CONFIGS["sliding_first"]),
        shard_size_mb=0.5,
    )  # fmt: skip
    shards = {v for v in json.loads(Path(out, INDEX_FILE).read_text())["weight_map"].values()}
    assert len(shards) == 3
    return out


@pytest.fixture(scope="module")
def sharded_model(sharded_dir: str) -> DeepseekV4ForCausalLM:
    return _load(sharded_dir)


# ---------------------------------------------------------------------------------------------
# a config.json written by transformers' DeepseekV4Config (sgl-project/sglang#34092)
# ---------------------------------------------------------------------------------------------


def test_sglang_34092_config_saved_by_transformers_keeps_its_layer_schedule(tmp_path: Path) -> None:
    """sgl-project/sglang#34092 and vllm-project/vllm#42741 (a ``config.json`` saved by newer
    transformers has ``compress_rates`` and nested ``rope_parameters`` instead of
    ``compress_ratios`` / ``rope_scaling``; the engine crashed reading ``compress_ratios``): a
    config written by ``DeepseekV4Config.save_pretrained`` (HF schedule, YaRN compress rope) loads,
    and its per-layer ratios, counts and both ropes are the ones transformers reads back from the
    same file."""
    from transformers import DeepseekV4Config

    cfg = copy.deepcopy(CONFIGS["hca_first_yarn"])
    cfg.pop("model_type")
    cfg["layer_types"] = [
        "sliding_attention",
        "heavily_compressed_attention",
        "compressed_sparse_attention",
    ] * 2
    cfg["mlp_layer_types"] = ["hash_moe"] + ["moe"] * 5
    cfg["num_hidden_layers"] = 6
    DeepseekV4Config(**cfg).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert "compress_ratios" not in raw and "compress_rates" in raw and "main" in raw["rope_parameters"]
    hf = DeepseekV4Config.from_pretrained(tmp_path)
    mc = ModelConfig.from_pretrained(str(tmp_path))
    rates = hf.compress_rates
    want = [0 if t == "sliding_attention" else rates[t] for t in hf.layer_types]
    assert mc.compress_ratios == want == [0, 128, 4, 0, 128, 4]
    assert (mc.sliding_layers, mc.hca_layers, mc.csa_layers) == ([0, 3], [1, 4], [2, 5])
    assert mc.hf.rope_parameters == hf.rope_parameters
    assert mc.hf.mlp_layer_types == hf.mlp_layer_types and mc.rope_dim == hf.qk_rope_head_dim


# ---------------------------------------------------------------------------------------------
# safetensors index anomalies (sgl-project/sglang#32279, huggingface/huggingface_hub#4728,
# Blaizzy/mlx-vlm#1464)
# ---------------------------------------------------------------------------------------------


def _copy(src: str, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_sglang_32279_index_naming_a_missing_shard_fails_fast(sharded_dir: str, tmp_path: Path) -> None:
    """sgl-project/sglang#32279 (an interrupted download left a shard the index lists absent; the
    loader globbed the files on disk, dropped the missing one silently and served uninitialised
    weights): with shard 2 of 3 deleted, loading raises ``FileNotFoundError`` naming that shard
    before a model is built, and so does listing the checkpoint's files."""
    d = _copy(sharded_dir, tmp_path / "ckpt")
    gone = "model-00002-of-00003.safetensors"
    (d / gone).unlink()
    with pytest.raises(FileNotFoundError, match=gone):
        checkpoint_files(str(d))
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(str(d)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(FileNotFoundError, match=gone):
        load_weights_into(model, str(d), progress=False)
    after = model.state_dict()
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731 - bitwise: uninitialised NaNs compare
    assert all(torch.equal(bits(before[k]), bits(after[k])) for k in before)  # nothing copied


def _drop_tensor(path: Path, key: str) -> None:
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys() if k != key}
    save_file(tensors, str(path), metadata=meta)


def test_hf_hub_4728_index_entry_missing_from_its_shard_is_reported(sharded_dir: str, tmp_path: Path) -> None:
    """huggingface/huggingface_hub#4728 (an index listed ``mtp.fc.weight`` in a shard whose header
    lacked it, and nothing checked that the two agree): a model tensor the index lists but its
    shard does not hold makes the load fail with a ``ValueError`` naming the tensor (an FP8
    weight, whose scale is then an orphan, and a plain float32 tensor, reported missing under its
    HF name), not a model with that weight left at its initial value; the same anomaly on a multi-token-prediction tensor (``mtp.*``, never read) loads the
    same model as the intact files."""
    wm = json.loads(Path(sharded_dir, INDEX_FILE).read_text())["weight_map"]
    key = "layers.1.attn.wkv.weight"
    for name, want in ((key, key), ("layers.2.attn.attn_sink", "model.layers.2.self_attn.sinks")):
        d = _copy(sharded_dir, tmp_path / name)
        _drop_tensor(d / wm[name], name)
        with pytest.raises(ValueError) as e:
            _load(str(d))
        assert want in str(e.value), str(e.value)

    m = _copy(sharded_dir, tmp_path / "mtp")
    index = json.loads((m / INDEX_FILE).read_text())
    index["weight_map"]["mtp.0.e_proj.weight"] = wm[key]  # listed, stored nowhere
    (m / INDEX_FILE).write_text(json.dumps(index))
    _same_state(_load(str(m)), _load(sharded_dir))


def test_mlx_vlm_1464_stray_safetensors_beside_the_index_is_not_merged(
    sharded_dir: str, sharded_model: DeepseekV4ForCausalLM, tmp_path: Path
) -> None:
    """Blaizzy/mlx-vlm#1464 (issue #1329: every ``*.safetensors`` was globbed, so a stray
    ``model.safetensors`` of another export next to the indexed shards was merged in and its
    tensors clashed with the model's): with a ``model.safetensors`` and a ``consolidated.safetensors``
    holding other values for tensors of the checkpoint beside the index, the loaded model equals
    the one the index's shards alone give."""
    d = _copy(sharded_dir, tmp_path / "ckpt")
    with safe_open(str(d / "model-00001-of-00003.safetensors"), "pt") as f:
        some = {k: f.get_tensor(k) for k in list(f.keys())[:6]}
    fake = {k: torch.zeros_like(v) if v.is_floating_point() else v for k, v in some.items()}
    assert any(not torch.equal(fake[k], some[k]) for k in some)
    save_file(fake, str(d / "model.safetensors"))
    save_file(fake, str(d / "consolidated.safetensors"))
    assert [os.path.basename(p) for p in checkpoint_files(str(d))] == [
        f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)
    ]
    _same_state(_load(str(d)), sharded_model)


# ---------------------------------------------------------------------------------------------
# FP8 block scales that do not tile the weight (NVIDIA/TensorRT-Model-Connect#1115,
# vllm-project/compressed-tensors#873)
# ---------------------------------------------------------------------------------------------


def _ref_block_dequant64(q: torch.Tensor, s: torch.Tensor, bm: int, bn: int) -> torch.Tensor:
    """float64 ``q * scale`` with scale ``(i, j)`` on rows ``[i*bm, (i+1)*bm)`` and columns
    ``[j*bn, (j+1)*bn)`` (the last block cut at the edge), element by block."""
    r, c = q.shape
    out = torch.empty(r, c, dtype=torch.float64)
    for i in range(s.shape[0]):
        for j in range(s.shape[1]):
            rows, cols = slice(i * bm, min((i + 1) * bm, r)), slice(j * bn, min((j + 1) * bn, c))
            out[rows, cols] = q[rows, cols].double() * float(s[i, j])
    return out


def test_trt_model_connect_1115_partial_fp8_blocks_follow_weight_block_size() -> None:
    """NVIDIA/TensorRT-Model-Connect#1115 (the FP8 block extent was derived as
    ``ceil(rows / scale_rows)``: for 1000 rows and 8 scale rows that is 125, so every scale after
    the first was applied to the wrong rows): a ``[1000, 300]`` weight with ``[8, 3]`` scales over
    128x128 blocks dequantizes exactly as the float64 reference of ``weight_block_size`` blocks,
    and differs from the shape-derived 125x100 reading."""
    g = torch.Generator().manual_seed(1115)
    q = (torch.randn(1000, 300, generator=g) * 30).clamp(-448, 448).to(FP8_DTYPE)
    s = torch.pow(2.0, torch.randint(-8, 4, (8, 3), generator=g).float())
    got = dequantize_fp8_block(q, s, (128, 128)).double()
    assert torch.equal(got, _ref_block_dequant64(q, s, 128, 128))
    assert not torch.equal(got, _ref_block_dequant64(q, s, 125, 100))
    s64 = torch.pow(2.0, torch.randint(-8, 4, (16, 5), generator=g).float())  # weight_block_size [64, 64]
    assert torch.equal(dequantize_fp8_block(q, s64, (64, 64)).double(), _ref_block_dequant64(q, s64, 64, 64))


def test_compressed_tensors_873_block_scale_of_one_column_is_not_per_channel() -> None:
    """vllm-project/compressed-tensors#873 (a block-quantized weight of at most 128 columns has
    scales shaped ``[ceil(N/128), 1]``, which a loader inferring the scheme from shapes read as
    per-channel): a ``[300, 100]`` weight with ``[3, 1]`` scales is dequantized per 128-row block
    (float64 reference), and a per-channel ``[300, 1]`` scale is refused for a block checkpoint
    with a ``ValueError`` naming the weight."""
    g = torch.Generator().manual_seed(873)
    q = (torch.randn(300, 100, generator=g) * 30).clamp(-448, 448).to(FP8_DTYPE)
    s = torch.tensor([[0.5], [4.0], [0.03125]])
    got = dequantize_fp8_block(q, s, (128, 128)).double()
    assert torch.equal(got, _ref_block_dequant64(q, s, 128, 128))
    assert torch.equal(got[128:256], q[128:256].double() * 4.0)
    with pytest.raises(ValueError, match="wq_a.weight"):
        dequantize_fp8_block(q, torch.ones(300, 1), (128, 128), name="layers.0.attn.wq_a.weight")


# ---------------------------------------------------------------------------------------------
# tied and untied LM heads (sgl-project/sglang#15398)
# ---------------------------------------------------------------------------------------------


def _hf_checkpoint(out: Path, tie: bool, seed: int) -> Path:
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), tie_word_embeddings=tie)
    write_checkpoint(str(out), fmt="hf", weights="fp32", seed=seed, config_dict=cfg)
    return out


def _edit_single_shard(d: Path, edit) -> None:  # noqa: ANN001 - edit(dict) mutates the tensors
    index = json.loads((d / INDEX_FILE).read_text())
    (shard,) = set(index["weight_map"].values())
    with safe_open(str(d / shard), "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    edit(tensors)
    save_file(tensors, str(d / shard), metadata=meta)
    index["weight_map"] = {k: shard for k in tensors}
    (d / INDEX_FILE).write_text(json.dumps(index))


def test_sglang_15398_lm_head_follows_tie_word_embeddings_as_transformers_does(tmp_path: Path) -> None:
    """sgl-project/sglang#15398 (with ``tie_word_embeddings: false`` the LM head was filled from
    ``embed_tokens``): an untied checkpoint without ``lm_head.weight`` is refused with a
    ``ValueError`` naming it; a tied one stores only the embedding and serves it as the head; a
    tied config whose file holds both, with different values, keeps each (transformers' own
    rule: it does not tie them then). The heads equal those of HF's ``from_pretrained`` on the
    same files."""
    from transformers import DeepseekV4ForCausalLM as HFModel

    untied = _hf_checkpoint(tmp_path / "untied", tie=False, seed=15398)
    _edit_single_shard(untied, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(ValueError, match=r"lm_head\.weight"):
        _load(str(untied))

    tied = _hf_checkpoint(tmp_path / "tied", tie=True, seed=15398)
    both = _copy(str(tied), tmp_path / "both")
    head = torch.randn(1000, 64, generator=torch.Generator().manual_seed(15398))
    _edit_single_shard(both, lambda t: t.__setitem__("lm_head.weight", head))
    for d in (tied, both):
        ours = _load(str(d))
        hf = HFModel.from_pretrained(str(d), dtype=torch.float32)
        assert torch.equal(ours.lm_head.weight.float(), hf.lm_head.weight.detach())
        assert torch.equal(ours.model.embed_tokens.weight.float(), hf.model.embed_tokens.weight.detach())
    assert torch.equal(ours.lm_head.weight.float(), head)  # ``both``: the stored head


# ---------------------------------------------------------------------------------------------
# YaRN's mscale / mscale_all_dim (NVIDIA/Megatron-LM#1429)
# ---------------------------------------------------------------------------------------------


def test_megatron_1429_yarn_mscale_fields_scale_attention_as_hf_v4_does() -> None:
    """NVIDIA/Megatron-LM#1429 (the MLA softmax factor read ``mscale`` where the reference reads
    ``mscale_all_dim``, so configs where they differ scored attention wrongly): a V4 config whose
    YaRN block carries DeepSeek-V2-style ``mscale = 0.707`` and ``mscale_all_dim = 1.0`` gives
    HF's log-probabilities on a 160-token prompt (past the compressors' first entries), and the
    HF oracle itself differs from the plain-rope model there (the YaRN rope is in effect)."""
    cfg = copy.deepcopy(CONFIGS["hca_first_yarn"])
    cfg["rope_parameters"] = dict(cfg["rope_parameters"], mscale=0.707, mscale_all_dim=1.0)
    twin = make_twin("yarn_mscale", seed=1429, cfg=cfg)
    ids = random_ids(160, seed=1429)
    want = hf_logprobs(twin, ids)
    assert (Driver(twin).run_chunked(ids, 64) - want).abs().max().item() <= TOL
    plain = copy.deepcopy(cfg)
    plain.pop("rope_parameters")
    twin0 = make_twin("plain", seed=1429, cfg=plain)
    assert (hf_logprobs(twin0, ids) - want).abs().max().item() > 1e-3


# ---------------------------------------------------------------------------------------------
# a BPE tokenizer's decoding (huggingface/transformers#44915, deepspeedai/Megatron-DeepSpeed#326)
# ---------------------------------------------------------------------------------------------


@pytest.fixture()
def cleanup_tokenizer_dir(tmp_path: Path) -> Path:
    """The tiny V4-kind tokenizer with ``clean_up_tokenization_spaces: true`` (as Llama 3.x ship)."""
    from tokenizer_testutil import BOS, EOS, PAD, tiny_tokenizer_json

    tiny_tokenizer_json(tmp_path / "tokenizer.json")
    cfg = {
        "bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "clean_up_tokenization_spaces": True,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }  # fmt: skip
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_transformers_44915_bpe_decode_keeps_spaces_before_punctuation(cleanup_tokenizer_dir: Path) -> None:
    """huggingface/transformers#44915 (``clean_up_tokenization`` applied to byte-level BPE output
    deleted real spaces: ``"x != y"`` became ``"x!= y"``; transformers now skips it for BPE):
    with ``clean_up_tokenization_spaces: true`` in ``tokenizer_config.json`` the runtime's
    tokenizer decodes the ids of ``"x != y , a . b ? n't 'll"`` back to that exact text, as
    ``AutoTokenizer`` does on the same files."""
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from tokenizer_testutil import transformers_tokenizer

    text = "x != y , a . b ? c ! don 't n't 'll 're"
    ours, hf = get_tokenizer(str(cleanup_tokenizer_dir)), transformers_tokenizer(cleanup_tokenizer_dir)
    ids = ours.encode(text, add_special_tokens=False)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert ours.decode(ids) == hf.decode(ids) == text
    assert ours.batch_decode([ids, ids[:3]]) == hf.batch_decode([ids, ids[:3]])


def test_megatron_deepspeed_326_bos_token_id_is_the_bos_not_the_eos(cleanup_tokenizer_dir: Path) -> None:
    """deepspeedai/Megatron-DeepSpeed#326 (a tokenizer wrapper's ``bos_token_id`` returned the EOS
    id): the runtime tokenizer's BOS / EOS / pad ids are transformers' on the same files, three
    distinct ids, each decoding to its own token."""
    from sglang_v4.hf_transformers_utils import get_tokenizer
    from tokenizer_testutil import BOS, EOS, PAD, transformers_tokenizer

    ours, hf = get_tokenizer(str(cleanup_tokenizer_dir)), transformers_tokenizer(cleanup_tokenizer_dir)
    got = (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id)
    assert got == (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id)
    assert len(set(got)) == 3
    assert [ours.decode([i]) for i in got] == [BOS, EOS, PAD]


# ---------------------------------------------------------------------------------------------
# the router's correction bias stays float32 in a bf16 model (sgl-project/sglang#37133)
# ---------------------------------------------------------------------------------------------


def test_sglang_37133_correction_bias_keeps_float32_in_a_bf16_model(sharded_dir: str, tmp_path: Path) -> None:
    """sgl-project/sglang#37133 and #31213 (a bf16 model allocated ``e_score_correction_bias`` in
    bf16, so GLM-5.2's float32 biases in ``[6.817, 7.063]`` collapsed to 8 distinct values and
    98.5% of tokens picked other experts; HF keeps the tensor in float32): a checkpoint whose
    routers store such biases, loaded into a bfloat16 model, holds them as float32 and bit-equal
    to the file, while bf16 storage would have rounded them."""
    wm = json.loads(Path(sharded_dir, INDEX_FILE).read_text())["weight_map"]
    keys = [k for k in wm if k.endswith("ffn.gate.bias")]
    assert keys
    d = _copy(sharded_dir, tmp_path / "ckpt")
    n = None
    for k in keys:
        path = d / wm[k]
        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        n = tensors[k].numel()
        tensors[k] = torch.linspace(6.817, 7.063, n, dtype=torch.float64).float()
        save_file(tensors, str(path), metadata=meta)
    want = torch.linspace(6.817, 7.063, n, dtype=torch.float64).float()
    assert not torch.equal(want.bfloat16().float(), want)  # what bf16 storage would keep
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(str(d)), dtype=torch.bfloat16)
    load_weights_into(model, str(d), progress=False)
    biases = {k: v for k, v in model.state_dict().items() if k.endswith("e_score_correction_bias")}
    assert len(biases) == len(keys)
    for k, v in biases.items():
        assert v.dtype == torch.float32 and torch.equal(v, want), k


# ---------------------------------------------------------------------------------------------
# shards without the safetensors metadata block (ml-explore/mlx#743,
# foundation-model-stack/fastsafetensors#96)
# ---------------------------------------------------------------------------------------------


def test_mlx_743_shards_without_format_metadata_load_the_same_model(
    sharded_dir: str, sharded_model: DeepseekV4ForCausalLM, tmp_path: Path
) -> None:
    """ml-explore/mlx#743 and foundation-model-stack/fastsafetensors#96 (shards re-saved by other
    tools carry no ``__metadata__`` (``{"format": "pt"}`` absent, or an empty / null block) and a
    loader that read ``metadata["format"]`` refused them): the checkpoint with one shard saved
    without metadata and one with an empty metadata block loads into exactly the model of the
    original files."""
    d = _copy(sharded_dir, tmp_path / "ckpt")
    for name, meta in (("model-00001-of-00003.safetensors", None), ("model-00003-of-00003.safetensors", {})):
        with safe_open(str(d / name), "pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        save_file(tensors, str(d / name), metadata=meta)
        with safe_open(str(d / name), "pt") as f:
            assert not f.metadata()
    _same_state(_load(str(d)), sharded_model)


# ---------------------------------------------------------------------------------------------
# a shard shorter than its header declares (osaurus-ai/vmlx-swift#217)
# ---------------------------------------------------------------------------------------------


def test_vmlx_swift_217_truncated_shard_is_refused_before_any_copy(sharded_dir: str, tmp_path: Path) -> None:
    """osaurus-ai/vmlx-swift#217 (8 shards of a DeepSeek-V4-Flash upload were shorter than their
    headers declared; the memory-mapped tensors past end-of-file read as zeros or garbage, and
    ~20% of launches produced token soup): the checkpoint with its last shard cut by 1000 bytes
    is refused with a ``ValueError`` naming that shard, and the model is left as it was (no
    tensor was copied before the check)."""
    d = _copy(sharded_dir, tmp_path / "ckpt")
    cut = d / "model-00003-of-00003.safetensors"
    os.truncate(cut, cut.stat().st_size - 1000)
    model = DeepseekV4ForCausalLM(ModelConfig.from_pretrained(str(d)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match="model-00003-of-00003.safetensors"):
        load_weights_into(model, str(d), progress=False)
    bits = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731 - bitwise: uninitialised NaNs compare
    after = model.state_dict()
    assert all(torch.equal(bits(before[k]), bits(after[k])) for k in before)


# ---------------------------------------------------------------------------------------------
# the model's tie_word_embeddings, not the file's, decides the LM head (ml-explore/mlx-lm#648,
# NVIDIA/TensorRT-LLM#13664)
# ---------------------------------------------------------------------------------------------


def test_mlx_lm_648_trtllm_13664_loader_follows_the_models_tie_word_embeddings(tmp_path: Path) -> None:
    """ml-explore/mlx-lm#648 (the loader replaced the config's ``tie_word_embeddings: true`` with
    its own value and failed with ``Missing ... lm_head.weight``) and NVIDIA/TensorRT-LLM#13664
    (the loader tied a missing LM head whatever the model's config said): the tie is the served
    model's config, overrides (``--json-model-override-args``) included. A checkpoint without
    ``lm_head.weight`` whose file says ``false`` loads under the override ``true`` with the head
    equal to the embedding, as transformers' ``from_pretrained(..., tie_word_embeddings=True)``
    gives (before, the loader read the file and refused it), and passes the start-up check; a
    file saying ``true`` under the override ``false`` is refused naming ``lm_head.weight``."""
    from sglang_v4.model_loader.weight_loader import check_checkpoint
    from transformers import DeepseekV4ForCausalLM as HFModel

    d = _hf_checkpoint(tmp_path / "untied", tie=False, seed=648)
    _edit_single_shard(d, lambda t: t.pop("lm_head.weight"))
    mc = ModelConfig.from_pretrained(str(d), {"tie_word_embeddings": True})
    check_checkpoint(str(d), mc)
    ours = DeepseekV4ForCausalLM(mc)
    load_weights_into(ours, str(d), progress=False)
    hf = HFModel.from_pretrained(str(d), dtype=torch.float32, tie_word_embeddings=True)
    assert torch.equal(ours.lm_head.weight.float(), hf.lm_head.weight.detach())
    assert torch.equal(ours.lm_head.weight, ours.model.embed_tokens.weight)

    t = _hf_checkpoint(tmp_path / "tied", tie=True, seed=648)
    assert "lm_head.weight" not in json.loads((t / INDEX_FILE).read_text())["weight_map"]
    mc = ModelConfig.from_pretrained(str(t), {"tie_word_embeddings": False})
    with pytest.raises(ValueError, match=r"lm_head\.weight"):
        check_checkpoint(str(t), mc)
    with pytest.raises(ValueError, match=r"lm_head\.weight"):
        load_weights_into(DeepseekV4ForCausalLM(mc), str(t), progress=False)
