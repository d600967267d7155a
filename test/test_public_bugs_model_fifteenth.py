"""A fifteenth set of public reports, model semantics: the rope base and YaRN amplitude of each
layer type, the interleaved RoPE and its inverse, RMSNorm weights and epsilon, the fp32
parameters of a bf16 model, the compressor's position bias, ragged batches, long decode, and a
``swiglu_limit`` of 0 (each test names its report; checkpoint loading is in
``test_public_bugs_model_fifteenth_checkpoints``).

Oracles: HF transformers' ``DeepseekV4ForCausalLM`` (fp32, tiny random weights, one cache-free
forward over the whole sequence) and float64 references written here from the published
formulas (DeepSeek's ``inference/model.py`` ``apply_rotary_emb``, ``RMSNorm``, ``Expert``). The
runtime side is the model run through :class:`dsv4_testutil.Driver` and the ops
``qnorm_rope_kv_insert`` / ``inv_rope_quant`` called directly.
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
from dsv4_testutil import CONFIGS, CSA, HCA, SL, Driver, Twin, hf_logprobs, make_twin, random_ids
from sgl_kernel_v4 import ops
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.layers.layernorm import RMSNorm
from sglang_v4.layers.rotary_embedding import RotaryTables
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

TOL = 1e-3  # max |dlogprob| against HF, fp32 both sides


def _max_err(ours: torch.Tensor, want: torch.Tensor) -> float:
    return (ours - want).abs().max().item()


def _with_state(twin: Twin, state: dict[str, torch.Tensor]) -> Twin:
    """``twin`` with ``state`` loaded into copies of both models."""
    hf = copy.deepcopy(twin.hf)
    hf.load_state_dict(state)
    ours = copy.deepcopy(twin.ours)
    ours.load_state_dict(state, strict=True)
    return Twin(twin.name, twin.cfg, twin.mc, hf, ours, state)


def _plain_cos_sin(theta: float, rdim: int, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``cos/sin(pos * theta^(-2i/r))`` ``[N, r/2]`` (DeepSeek ``precompute_freqs_cis``, no YaRN)."""
    inv = 1.0 / (theta ** (torch.arange(0, rdim, 2, dtype=torch.float64) / rdim))
    f = pos.double().unsqueeze(-1) * inv
    return f.cos(), f.sin()


def _rope64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """float64 interleaved RoPE of the trailing ``r`` channels of ``x [T, H, D]`` (``cos/sin [T, r/2]``):
    ``(x[2i], x[2i+1]) -> (x0 cos - x1 sin, x0 sin + x1 cos)`` (``model.py``'s complex product)."""
    x = x.double().clone()
    r = 2 * cos.shape[-1]
    x0, x1 = x[..., -r::2].clone(), x[..., -r + 1 :: 2].clone()
    c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
    x[..., -r::2] = x0 * c - x1 * s
    x[..., -r + 1 :: 2] = x0 * s + x1 * c
    return x


def _rms64(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    x = x.double()
    y = x / torch.sqrt(x.square().mean(-1, keepdim=True) + eps)
    return y if w is None else y * w.double()


# ---------------------------------------------------------------------------------------------
# each layer's rope base (huggingface/transformers#45910, Avarok-Cybersecurity/atlas#276)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def far_theta_twin() -> Twin:
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), rope_theta=50.0, compress_rope_theta=1.0e6)
    return make_twin("far_thetas", seed=45910, cfg=cfg)


def test_transformers_45910_atlas_276_each_layer_type_rotates_with_its_own_base(far_theta_twin: Twin) -> None:
    """huggingface/transformers#45910 (in a CSA / HCA layer the main query and window KV must share
    the compressed entries' base, ``compress_rope_theta``, as the reference ``model.py`` builds one
    rope per layer from its ``compress_ratio``) and Avarok-Cybersecurity/atlas#276 (a port rotated
    the sliding-only layers with the compress base; they use ``rope_theta``; the error grows with
    the position): with bases 50 and 1e6, far enough apart that swapping them changes HF's own
    output, the runtime's sliding layer uses the ``main`` table (float64 plain rope at 50) and its
    CSA / HCA layers the ``compress`` one (1e6), and the model gives HF's log-probabilities on a
    200-token prompt."""
    twin = far_theta_twin
    kinds = [layer.self_attn.rope_kind for layer in twin.ours.model.layers]
    assert kinds == ["main" if t == SL else "compress" for t in twin.cfg["layer_types"]]
    tables = RotaryTables(twin.mc, "cpu")
    pos = torch.tensor([0, 3, 64, 199])
    rdim = twin.mc.rope_dim
    for kind, theta in (("main", 50.0), ("compress", 1.0e6)):
        cos, sin = tables.cos_sin(kind, pos)
        pc, ps = _plain_cos_sin(theta, rdim, pos)
        assert _max_err(cos.double(), pc) <= 1e-4 and _max_err(sin.double(), ps) <= 1e-4
    ids = random_ids(200, seed=45910)
    want = hf_logprobs(twin, ids)
    assert _max_err(Driver(twin).run_chunked(ids, 200), want) <= TOL
    # the bases matter: HF with the two swapped is another model
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    swapped = {k: v for k, v in twin.cfg.items() if k != "model_type"}
    swapped.update(rope_theta=1.0e6, compress_rope_theta=50.0)
    hf_sw = HFModel(DeepseekV4Config(**swapped)).eval()
    hf_sw.load_state_dict(twin.state)
    with torch.no_grad():
        other = torch.log_softmax(hf_sw(torch.tensor([ids])).logits[0].float(), -1)
    assert _max_err(other, want) > 1e-2


def test_pypto_951_long_decode_keeps_each_layers_rope_profile(far_theta_twin: Twin) -> None:
    """hw-native-sys/pypto-lib#951 (DeepSeek-V4 decode used the wrong rope profile for some layers:
    short completions were right and the output drifted after ~80-100 decode tokens): a 100-token
    prompt decoded one token at a time for 36 steps (past the 128-token window and the first HCA
    entry, through 9 CSA entries), with the bases 50 / 1e6 far apart, gives at every decode step HF's
    log-probabilities of the whole sequence at that position."""
    twin = far_theta_twin
    seq = random_ids(136, seed=951)
    drv = Driver(twin)
    slot = drv.new_req()
    outs = [drv.step([(slot, seq[:100])])[0]]
    for t in range(100, 136):
        outs.append(drv.step([(slot, [seq[t]])])[0])
    drv.release(slot)
    got = torch.cat(outs)
    assert got.shape[0] == 136
    assert _max_err(got[100:], hf_logprobs(twin, seq)[100:]) <= TOL


# ---------------------------------------------------------------------------------------------
# YaRN with V3-style mscale fields: unit rope amplitude, no softmax mscale
# (Avarok-Cybersecurity/atlas#342, onnxruntime/mobius#548, huggingface/transformers#47435)
# ---------------------------------------------------------------------------------------------

_YARN_V3_STYLE = {
    "factor": 16.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


@pytest.fixture(scope="module")
def mscale_twin() -> Twin:
    cfg = dict(
        copy.deepcopy(CONFIGS["sliding_first"]),
        layer_types=[SL, CSA, HCA, HCA],
        rope_parameters={"rope_type": "yarn", **_YARN_V3_STYLE},
    )
    return make_twin("yarn_mscale_fields", seed=342, cfg=cfg)


def test_atlas_342_yarn_with_mscale_fields_keeps_unit_rope_amplitude(mscale_twin: Twin) -> None:
    """Avarok-Cybersecurity/atlas#342 (a DeepSeek-V4 port applied DeepSeek-V3's YaRN amplitude
    ``get_mscale(16, mscale) / get_mscale(16, mscale_all_dim)``, or HF's default
    ``0.1 ln(factor) + 1 = 1.277``, to the compress rope's cos / sin; the V4 reference builds them
    with ``torch.polar(ones, freqs)``): a config whose ``rope_scaling`` carries V3's ``mscale`` /
    ``mscale_all_dim`` fields, in the official dialect (``type``) and in HF's, gives a compress
    table of unit norm at every position whose frequencies YaRN moved (not the plain ones), and
    the main table stays the plain rope."""
    official = dict(copy.deepcopy(CONFIGS["sliding_first"]), layer_types=[SL, CSA, HCA, HCA])
    official["rope_scaling"] = {"type": "yarn", **_YARN_V3_STYLE}
    for mc in (ModelConfig.from_dict(official), mscale_twin.mc):
        assert mc.hf.rope_parameters["compress"].get("mscale_all_dim") == 1.0  # the fields got through
        tables = RotaryTables(mc, "cpu")
        pos = torch.arange(0, 2048, 37)
        cos, sin = tables.cos_sin("compress", pos)
        assert ((cos.double() ** 2 + sin.double() ** 2) - 1).abs().max().item() <= 1e-5
        pc, _ = _plain_cos_sin(float(mc.hf.compress_rope_theta), mc.rope_dim, pos)
        assert _max_err(cos.double(), pc) > 1e-2  # YaRN is on
        mcos, msin = tables.cos_sin("main", pos)
        pm, pms = _plain_cos_sin(float(mc.hf.rope_theta), mc.rope_dim, pos)
        assert _max_err(mcos.double(), pm) <= 1e-4 and _max_err(msin.double(), pms) <= 1e-4


def test_mobius_548_no_yarn_softmax_mscale_on_v4_attention(
    mscale_twin: Twin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnxruntime/mobius#548, huggingface/transformers#47435 and NVIDIA/Megatron-LM#1429
    (DeepSeek-V2 / V3 MLA multiply the softmax scale by ``yarn_get_mscale(factor,
    mscale_all_dim)**2`` under YaRN, a step ports dropped or computed from the wrong field;
    DeepSeek-V4's attention has no such factor: its scale is ``head_dim**-0.5`` whatever the rope
    scaling): with V3's ``mscale_all_dim = 1`` and factor 16 in the config the runtime gives HF's
    log-probabilities on a 200-token prompt, and the same runtime with V3's factor
    ``(0.1 ln 16 + 1)**2 = 1.63`` on the softmax scale does not."""
    twin = mscale_twin
    ids = random_ids(200, seed=548)
    want = hf_logprobs(twin, ids)
    assert _max_err(Driver(twin).run_chunked(ids, 200), want) <= TOL
    v3_mscale = (0.1 * 1.0 * math.log(16.0) + 1.0) ** 2
    plain = ops.sparse_attention

    def v3_scaled(q, swa, pages, positions, window, sinks, scale, **kw):  # noqa: ANN001, ANN202
        return plain(q, swa, pages, positions, window, sinks, scale * v3_mscale, **kw)

    monkeypatch.setattr(ops, "sparse_attention", v3_scaled)
    assert _max_err(Driver(twin).run_chunked(ids, 200), want) > 1e-2


# ---------------------------------------------------------------------------------------------
# interleaved RoPE on q and KV, and its inverse on the output (hw-native-sys/pypto-lib#244,
# 1CatAI/1Cat-vLLM#162, hw-native-sys/pypto-lib#536)
# ---------------------------------------------------------------------------------------------

_T, _H, _D, _R, _EPS = 5, 3, 128, 64, 1e-6


def _rope_inputs(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(_T, _H, _D, generator=g) * 2
    kv = torch.randn(_T, _D, generator=g) * 2
    w = 0.5 + torch.rand(_D, generator=g)
    pos = torch.tensor([0, 1, 7, 130, 1000])
    cos, sin = _plain_cos_sin(10000.0, _R, pos)
    return q, kv, w, cos.float(), sin.float()


def _half_split64(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The NeoX layout (``x[i]`` paired with ``x[i + r/2]``), which DeepSeek-V4 does not use."""
    x = x.double().clone()
    r, h = 2 * cos.shape[-1], cos.shape[-1]
    a, b = x[..., -r : -r + h].clone(), x[..., -h:].clone()
    c, s = cos.double().unsqueeze(1), sin.double().unsqueeze(1)
    x[..., -r : -r + h], x[..., -h:] = a * c - b * s, b * c + a * s
    return x


def test_pypto_244_query_rope_rotates_adjacent_pairs_of_the_trailing_channels() -> None:
    """hw-native-sys/pypto-lib#244 (DeepSeek-V4 decode rotated the query's rope slice as two halves;
    the reference rotates interleaved even / odd pairs ``(x[2i], x[2i+1])``): the runtime's
    ``qnorm_rope_kv_insert`` query output equals the float64 per-head unweighted RMSNorm followed
    by the interleaved rotation of the last 64 of 128 channels, and not the half-split rotation."""
    q, kv, w, cos, sin = _rope_inputs(244)
    swa = torch.zeros(8, _D)
    q_out, _ = ops.qnorm_rope_kv_insert(q, kv, w, cos, sin, swa, torch.arange(_T), _EPS)
    normed = _rms64(q, None, _EPS)
    want = _rope64(normed, cos, sin)
    assert _max_err(q_out.double(), want) <= 1e-5
    assert _max_err(q_out.double(), _half_split64(normed, cos, sin)) > 0.1
    assert _max_err(q_out[..., : _D - _R].double(), normed[..., : _D - _R]) <= 1e-5  # nope: normalised only


def test_1cat_vllm_162_kv_rope_touches_only_the_rope_channels_in_the_window_pool() -> None:
    """1CatAI/1Cat-vLLM#162 (a DeepSeek-V4 KV kernel copied all 512 channels and then overwrote
    the rope channels from another lane, leaving some rows unrotated in the KV cache): the window
    pool rows ``qnorm_rope_kv_insert`` writes equal the float64 ``rope(rmsnorm(kv) * w)`` (nope
    channels normalised only, the trailing 64 rotated by pairs), the same as the returned KV, and a
    slot of ``-1`` writes nothing."""
    q, kv, w, cos, sin = _rope_inputs(162)
    swa = torch.full((8, _D), 7.0)
    index = torch.tensor([3, 0, -1, 6, 1])
    _, kv_out = ops.qnorm_rope_kv_insert(q, kv, w, cos, sin, swa, index, _EPS)
    want = _rope64(_rms64(kv, w, _EPS).unsqueeze(1), cos, sin).squeeze(1)
    assert _max_err(kv_out.double(), want) <= 1e-5
    for t, slot in enumerate(index.tolist()):
        if slot >= 0:
            assert _max_err(swa[slot].double(), want[t]) <= 1e-5
    untouched = [s for s in range(8) if s not in index.tolist()]
    assert torch.equal(swa[untouched], torch.full((len(untouched), _D), 7.0))
    # the rope channels really moved (positions > 0): an unrotated row would differ
    assert _max_err(kv_out[1:, -_R:].double(), _rms64(kv, w, _EPS)[1:, -_R:]) > 0.1


def test_pypto_536_output_inverse_rope_is_the_conjugate_rotation() -> None:
    """hw-native-sys/pypto-lib#536 (the DeepSeek-V4 attention output's rope slice must be rotated
    back by ``-position``, ``even' = even cos + odd sin``, ``odd' = odd cos - even sin``, with the
    tables of the query's own positions): ``inv_rope_quant`` equals that float64 formula, leaves
    the nope channels alone, and undoes the forward rotation exactly."""
    q, _, _, cos, sin = _rope_inputs(536)
    got = ops.inv_rope_quant(q, cos, sin, False).double()
    want = _rope64(q, cos, -sin)
    assert _max_err(got, want) <= 1e-5
    assert torch.equal(got[..., : _D - _R].float(), q[..., : _D - _R])
    fwd = _rope64(q, cos, sin).float()
    assert _max_err(ops.inv_rope_quant(fwd, cos, sin, False).double(), q.double()) <= 1e-5
    assert _max_err(got, _rope64(q, cos, sin)) > 0.1  # not the forward rotation


# ---------------------------------------------------------------------------------------------
# RMSNorm: plain weight semantics, config epsilon everywhere (Avarok-Cybersecurity/atlas#315,
# huggingface/transformers#44261)
# ---------------------------------------------------------------------------------------------


@functools.cache
def _base_twin() -> Twin:
    return make_twin("sliding_first", seed=15)


def test_atlas_315_rmsnorm_weights_are_plain_multipliers_far_from_one() -> None:
    """Avarok-Cybersecurity/atlas#315 (DeepSeek-V4 ships plain RMSNorm weights, ``x * w / rms``,
    with values near 0.03 and some crossing zero; a port stored them as offsets from 1 in bf16 and
    lost them): the runtime's ``RMSNorm`` with such weights equals the float64 ``x * w / rms`` (no
    ``1 + w``), and with every norm weight of the model set so (decoder, attention q / kv,
    compressor, indexer, final) the runtime gives HF's log-probabilities on a 96-token prompt."""
    g = torch.Generator().manual_seed(315)
    D = 64
    norm = RMSNorm(D, 1e-6, "cpu")
    w = 0.03 + 0.02 * torch.randn(D, generator=g)
    assert (w < 0).any() and (w > 0).any()
    with torch.no_grad():
        norm.weight.copy_(w)
    x = torch.randn(7, D, generator=g)
    got = norm(x).double()
    assert _max_err(got, _rms64(x, w, 1e-6)) <= 1e-6
    assert _max_err(got, _rms64(x, 1 + w, 1e-6)) > 0.5
    twin = _base_twin()
    state = {k: v.clone() for k, v in twin.state.items()}
    n = 0
    for key in state:
        if key.endswith("norm.weight"):
            state[key] = 0.03 + 0.02 * torch.randn(state[key].shape, generator=g)
            n += 1
    assert n >= 2 * twin.mc.num_layers + 1
    small = _with_state(twin, state)
    ids = random_ids(96, seed=315)
    want = hf_logprobs(small, ids)
    assert _max_err(Driver(small).run_chunked(ids, 96), want) <= TOL
    assert _max_err(want, hf_logprobs(twin, ids)) > 1e-2


@pytest.fixture(scope="module")
def large_eps_twin() -> Twin:
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), rms_norm_eps=0.5)
    return make_twin("large_rms_norm_eps", seed=15, cfg=cfg)


def test_transformers_44261_every_norm_uses_the_config_epsilon(large_eps_twin: Twin) -> None:
    """huggingface/transformers#44261 (DeepSeek's MLA q / kv layernorms fell back to the class
    default ``eps = 1e-6`` instead of ``config.rms_norm_eps``; any checkpoint with another value
    drifted): with ``rms_norm_eps = 0.5`` every runtime norm module carries 0.5, and the model
    gives HF's log-probabilities on a 128-token prompt, which differ from those of the same
    weights at ``1e-6``."""
    twin = large_eps_twin
    norms = [m for m in twin.ours.modules() if isinstance(m, RMSNorm)]
    assert norms and all(m.eps == 0.5 for m in norms)
    attn = twin.ours.model.layers[1].self_attn
    assert attn.eps == 0.5
    ids = random_ids(128, seed=44261)
    want = hf_logprobs(twin, ids)
    assert _max_err(Driver(twin).run_chunked(ids, 128), want) <= TOL
    assert _max_err(want, hf_logprobs(_base_twin(), ids)) > 1e-2


# ---------------------------------------------------------------------------------------------
# the compressor's position bias is fp32 and drives the window softmax (Avarok-Cybersecurity/atlas#347)
# ---------------------------------------------------------------------------------------------


def test_atlas_347_compressor_position_bias_is_fp32_and_steers_the_pooling() -> None:
    """Avarok-Cybersecurity/atlas#347 (DeepSeek-V4's compressor ``ape`` / ``position_bias`` ships
    as fp32 ``[ratio, proj_dim]``; a port read it as bf16, corrupting the per-window softmax gate
    of every CSA / HCA layer): a bf16 runtime model keeps every compressor's and indexer
    compressor's ``position_bias`` in fp32, and with position biases of a large spread
    (``N(0, 3^2)``, so one slot of each window takes most of the gate) the fp32 runtime gives HF's
    log-probabilities on a 160-token prompt, which differ from those of the original biases."""
    twin = _base_twin()
    meta = DeepseekV4ForCausalLM(twin.mc, dtype=torch.bfloat16, device="meta")
    biases = {k: v for k, v in meta.state_dict().items() if k.endswith("position_bias")}
    csa = len(twin.mc.csa_layers)
    assert len(biases) == 2 * csa + len(twin.mc.hca_layers)  # CSA: main + indexer compressor
    assert all(t.dtype == torch.float32 for t in biases.values())
    g = torch.Generator().manual_seed(347)
    state = {k: v.clone() for k, v in twin.state.items()}
    for key in biases:
        state[key] = torch.randn(state[key].shape, generator=g) * 3.0
    spread = _with_state(twin, state)
    ids = random_ids(160, seed=347)
    want = hf_logprobs(spread, ids)
    assert _max_err(Driver(spread).run_chunked(ids, 160), want) <= TOL
    assert _max_err(want, hf_logprobs(twin, ids)) > 1e-2


def test_automodel_2216_bf16_model_keeps_the_reference_fp32_parameters() -> None:
    """NVIDIA-NeMo/Automodel#2216 (a DeepSeek-V4 port cast the parameters the reference keeps in
    fp32, mHC, sinks, compressor position bias, router bias, norms, to the model dtype): in a
    bf16 runtime model every tensor under a module HF transformers lists in
    ``_keep_in_fp32_modules_strict`` is fp32 (integer ``tid2eid`` aside), while the projections
    are bf16."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4PreTrainedModel

    keep = set(DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict)
    meta = DeepseekV4ForCausalLM(_base_twin().mc, dtype=torch.bfloat16, device="meta")
    state = meta.state_dict()
    fp32 = {k for k in state if keep & set(k.split("."))}
    assert {s for k in fp32 for s in k.split(".") if s in keep} == keep  # every listed kind is present
    wrong = {k: state[k].dtype for k in fp32 if state[k].dtype != torch.float32}
    assert not wrong
    assert state["model.layers.0.self_attn.q_a_proj.weight"].dtype == torch.bfloat16
    assert state["lm_head.weight"].dtype == torch.bfloat16


# ---------------------------------------------------------------------------------------------
# ragged batches: no request's tokens fold into another's compressed entries
# (huggingface/transformers#45938)
# ---------------------------------------------------------------------------------------------


def test_transformers_45938_ragged_batch_compresses_each_request_alone() -> None:
    """huggingface/transformers#45938 (DeepSeek-V4's compressor pooled windows before the padding
    mask applied, folding pad tokens into compressed KV entries of a padded batch): requests of
    5, 67 and 130 tokens prefilled in one ragged batch (none a multiple of the CSA rate 4 or the
    HCA rate 128; the decode steps cross a CSA window end) and then decoded together for 3 steps
    each give HF's log-probabilities on their own unpadded sequence."""
    twin = _base_twin()
    lens = (5, 67, 130)
    prompts = [random_ids(n, seed=45938 + n) for n in lens]
    drv = Driver(twin)
    slots = [drv.new_req() for _ in lens]
    outs = drv.step(list(zip(slots, prompts)))
    seqs = [list(p) for p in prompts]
    got = [[o] for o in outs]
    for step in range(3):
        nxt = [random_ids(1, seed=4593800 + 10 * step + i)[0] for i in range(len(lens))]
        outs = drv.step([(s, [t]) for s, t in zip(slots, nxt)])
        for i, (t, o) in enumerate(zip(nxt, outs)):
            seqs[i].append(t)
            got[i].append(o)
    for i, seq in enumerate(seqs):
        assert _max_err(torch.cat(got[i]), hf_logprobs(twin, seq)) <= TOL


# ---------------------------------------------------------------------------------------------
# swiglu_limit <= 0 disables the clamp (microsoft/onnxruntime#27221, vllm-project/vllm-ascend#9438)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0.0, -1.0])
def test_onnxruntime_27221_zero_swiglu_limit_means_no_clamp(limit: float) -> None:
    """microsoft/onnxruntime#27221 (a MoE op defaulted ``swiglu_limit`` to 0 and clamped every
    activation to 0, where no limit means no clamp) and vllm-project/vllm-ascend#9438 (DeepSeek-V4
    SwiGLU clamps only for a positive limit, as the reference ``Expert.forward``'s ``limit > 0``
    guard): with ``swiglu_limit`` 0 or negative the runtime's routed and shared experts equal the
    float64 unclamped SwiGLU, and the model gives the log-probabilities of HF with no effective
    limit (``1e30``) on the same weights, not those of HF clamping at the configured value."""
    from sglang_v4.layers.moe import SparseMoeBlock

    base = copy.deepcopy(CONFIGS["sliding_first"])
    twin = make_twin(f"swiglu_limit_{limit}", seed=27221, cfg=dict(base, swiglu_limit=limit))
    block = twin.ours.model.layers[1].mlp
    assert isinstance(block, SparseMoeBlock)
    g = torch.Generator().manual_seed(27221)
    x = torch.randn(6, twin.mc.hidden_size, generator=g) * 4
    gu = x.double() @ block.shared_experts.gate_up(torch.eye(twin.mc.hidden_size)).double()
    inter = gu.shape[-1] // 2
    want = (
        torch.nn.functional.silu(gu[:, :inter]) * gu[:, inter:]
    ) @ block.shared_experts.down_proj.weight.double().t()
    assert gu[:, inter:].abs().max() > 0.5  # a clamp at 0 (or at -1) would change these
    assert _max_err(block.shared_experts(x).double(), want) <= 1e-4
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    hf_cfg = {k: v for k, v in base.items() if k != "model_type"}
    unclamped = HFModel(DeepseekV4Config(**dict(hf_cfg, swiglu_limit=1e30))).eval()
    unclamped.load_state_dict(twin.state)
    ids = random_ids(96, seed=27221)
    want_lp = hf_logprobs(Twin(twin.name, twin.cfg, twin.mc, unclamped, twin.ours, twin.state), ids)
    got = Driver(twin).run_chunked(ids, 96)
    assert _max_err(got, want_lp) <= TOL
    assert _max_err(got, hf_logprobs(twin, ids)) > 1e-2  # HF clamping at the configured value


def test_onnxruntime_27221_nan_swiglu_limit_is_refused() -> None:
    """microsoft/onnxruntime#27221, the malformed case: a NaN ``swiglu_limit`` (neither a bound nor
    "no limit") is refused when the model is built, with a ``ValueError`` naming the field."""
    cfg = dict(copy.deepcopy(CONFIGS["sliding_first"]), swiglu_limit=float("nan"))
    with pytest.raises(ValueError, match="swiglu_limit"):
        DeepseekV4ForCausalLM(ModelConfig.from_dict(cfg), device="meta")
