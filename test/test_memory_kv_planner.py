"""KV byte layout, page-size classes and the KV pool planner against hand-derived arithmetic.

The expected values are computed here from the published configurations and the byte layouts
(448 e4m3 + 64 bf16 + 7 ue8m0 + 1 pad = 584 B per main entry, 128 e4m3 + fp32 scale = 132 B per
fp8 indexer key, 64 B e2m1 + 4 ue8m0 = 68 B per fp4 key), not taken from the code under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.mem_cache import kv_format as kf
from sglang_v4.mem_cache import kv_planner as kp
from sglang_v4.mem_cache import kv_spec as ks
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.tools import kv_planner

GIB = 2**30
L_1M = 1 << 20

# published DeepSeek-V4 layer schedules (config.json ``compress_ratios`` without the MTP entry)
FLASH_RATIOS = [0, 0] + [4 if i % 2 == 0 else 128 for i in range(41)]
PRO_RATIOS = [128, 128] + [4 if i % 2 == 0 else 128 for i in range(59)]

MAIN_BF16 = 512 * 2
IDX_BF16 = 128 * 2
MAIN_FP8 = 448 + 64 * 2 + 448 // 64 + 1
IDX_FP8 = 128 + 4
IDX_FP4 = 128 // 2 + 128 // 32


# a small model of the tiny-test shape: head_dim 128 (64 rope), index_head_dim 64 (at least the rope
# dim: HF's indexer rotates that many channels of each indexer head)
TINY = {
    "model_type": "deepseek_v4",
    "vocab_size": 256,
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "layer_types": [
        "sliding_attention",
        "compressed_sparse_attention",
        "heavily_compressed_attention",
        "compressed_sparse_attention",
    ],
    "num_attention_heads": 2,
    "head_dim": 128,
    "partial_rotary_factor": 0.5,
    "q_lora_rank": 32,
    "o_groups": 2,
    "o_lora_rank": 16,
    "index_n_heads": 2,
    "index_head_dim": 64,
    "index_topk": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "max_position_embeddings": 65536,
}


@pytest.fixture(scope="module")
def pro() -> ModelConfig:
    return kv_planner.load_preset_config("pro")


@pytest.fixture(scope="module")
def flash() -> ModelConfig:
    return kv_planner.load_preset_config("flash")


def _expected_total(ratios: list[int], main: int, idx: int, length: int, window: int = 128) -> int:
    n_csa, n_hca = ratios.count(4), ratios.count(128)
    return n_csa * (length // 4) * (main + idx) + n_hca * (length // 128) * main + len(ratios) * window * main


def test_presets_have_published_schedules(pro: ModelConfig, flash: ModelConfig) -> None:
    assert pro.compress_ratios == PRO_RATIOS and flash.compress_ratios == FLASH_RATIOS
    assert (len(pro.csa_layers), len(pro.hca_layers)) == (30, 31)


def test_pro_bf16_1m_is_9_62_gib(pro: ModelConfig) -> None:
    r = kp.kv_bytes_for_context(pro, "bf16", False, L_1M)
    assert r["total_kv_bytes"] == _expected_total(PRO_RATIOS, MAIN_BF16, IDX_BF16, L_1M)
    assert abs(r["total_kv_bytes"] / GIB - 9.62) / 9.62 < 0.01
    per = r["per_layer_type"]
    assert per["csa"]["bytes_per_token_per_layer"] == (MAIN_BF16 + IDX_BF16) / 4 == 320
    assert per["hca"]["bytes_per_token_per_layer"] == MAIN_BF16 / 128 == 8
    assert sum(p["total_bytes"] for p in per.values()) == r["total_kv_bytes"]


def test_v32_1m_is_83_9_gib_and_ratio(pro: ModelConfig) -> None:
    v32 = kp.v32_kv_bytes_per_token("bf16") * L_1M
    assert v32 == 61 * (576 + 128) * 2 * L_1M
    assert abs(v32 / GIB - 83.9) / 83.9 < 0.01
    v4 = kp.kv_bytes_for_context(pro, "bf16", False, L_1M)["total_kv_bytes"]
    assert 8.6 < v32 / v4 < 8.8
    # V3.2 in its own fp8 formats: 656 B fp8_ds_mla latent + 132 B (or 68 B fp4) indexer key
    assert kp.v32_kv_bytes_per_token("fp8_e4m3") == 61 * (656 + 132)
    assert kp.v32_kv_bytes_per_token("fp8_e4m3", True) == 61 * (656 + 68)


@pytest.mark.parametrize(
    ("dtype", "fp4", "main", "idx"),
    [
        ("fp8_e4m3", False, MAIN_FP8, IDX_FP8),
        ("fp8_e4m3", True, MAIN_FP8, IDX_FP4),
        ("fp32", False, 2048, 512),
    ],
)
def test_low_precision_totals(
    pro: ModelConfig, flash: ModelConfig, dtype: str, fp4: bool, main: int, idx: int
) -> None:
    for mc, ratios in ((pro, PRO_RATIOS), (flash, FLASH_RATIOS)):
        got = kp.kv_bytes_for_context(mc, dtype, fp4, L_1M)["total_kv_bytes"]
        assert got == _expected_total(ratios, main, idx, L_1M)
    # fp8 roughly halves the bf16 figure, fp4 indexer saves a bit more
    bf16 = _expected_total(PRO_RATIOS, MAIN_BF16, IDX_BF16, L_1M)
    if dtype == "fp8_e4m3":
        assert 0.45 < kp.kv_bytes_for_context(pro, dtype, fp4, L_1M)["total_kv_bytes"] / bf16 < 0.6


def test_short_context_window_only(flash: ModelConfig) -> None:
    r = kp.kv_bytes_for_context(flash, "bf16", False, 3)
    assert r["total_kv_bytes"] == 43 * 3 * MAIN_BF16
    with pytest.raises(ValueError, match="context_length"):
        kp.kv_bytes_for_context(flash, "bf16", False, -1)


def test_entry_formats_storage(pro: ModelConfig) -> None:
    f = kf.entry_formats(pro, "fp8_e4m3")
    assert (f.main.entry_bytes, f.indexer.entry_bytes) == (584, 132)
    assert f.main.storage_dtype == torch.uint8 and f.main.row_elems == 584 and f.page_align == 576
    f4 = kf.entry_formats(pro, "fp8_e4m3", fp4_indexer=True)
    assert (f4.indexer.entry_bytes, f4.indexer.storage_dtype, f4.indexer.row_elems) == (68, torch.uint8, 68)
    fb = kf.entry_formats(pro, "auto")
    assert (fb.kv_cache_dtype, fb.main.storage_dtype, fb.main.row_elems) == ("bf16", torch.bfloat16, 512)
    assert kf.normalize_kv_cache_dtype("auto", torch.float32) == "fp32"
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        kf.entry_formats(pro, "int4")


def test_entry_formats_tiny_model_matches_encoder() -> None:
    from sgl_kernel_v4.ref.kv_quant import indexer_fp4_entry_bytes, kv_fp8_entry_bytes

    tiny = ModelConfig.from_dict(TINY)
    f = kf.entry_formats(tiny, "fp8_e4m3", fp4_indexer=True)
    assert f.main.entry_bytes == kv_fp8_entry_bytes(tiny.head_dim, tiny.rope_dim)
    assert f.indexer.entry_bytes == indexer_fp4_entry_bytes(tiny.index_head_dim)


# raw page bytes of each kind for V4 shapes
def _raw_pages(idx_entry: int, main_entry: int = MAIN_FP8) -> dict[KVKind, int]:
    return {
        KVKind.CSA_MAIN: 64 * main_entry,
        KVKind.SWA: 64 * main_entry,
        KVKind.CSA_INDEXER: 64 * idx_entry,
        KVKind.HCA: 2 * main_entry,
    }


# fp32 compressor state (mirrors DSV4KVPool): per window page the CSA overlap snapshot (4 rows of kv
# and score, main 512 + indexer 128 wide); per request slot the CSA partial buffers (4 x 2*d kv +
# score) + overlap halves (4 x d kv + score), main and indexer, and the HCA buffer (128 x d kv + score)
def _snapshot_bytes(n_csa: int) -> int:
    return n_csa * 4 * 2 * (512 + 128) * 4


def _request_state_bytes(n_csa: int, n_hca: int) -> int:
    csa = 4 * (2 * 2 * 512 + 2 * 512) + 4 * (2 * 2 * 128 + 2 * 128)
    return (n_csa * csa + n_hca * 128 * 2 * 512) * 4


@pytest.mark.parametrize("name", ["flash", "pro"])
def test_fp8_page_classes_37440_8640_1728(name: str) -> None:
    mc = kv_planner.load_preset_config(name)
    lay = ks.build_kv_layout(mc, "fp8_e4m3", False, page_size=256)
    assert [c.page_bytes for c in lay.classes] == [37440, 8640, 1728]
    # each class is a multiple of the 576-byte row and the smallest one holding its largest member
    raw = _raw_pages(IDX_FP8)
    for c in lay.classes:
        assert c.page_bytes % 576 == 0
        assert c.page_bytes - 576 < max(raw[k] for k in c.kinds) <= c.page_bytes
    assert [set(c.kinds) for c in lay.classes] == [
        {KVKind.CSA_MAIN, KVKind.SWA},
        {KVKind.CSA_INDEXER},
        {KVKind.HCA},
    ]
    for k, spec in lay.kinds.items():
        assert spec.raw_page_bytes == raw[k]
    # per 256-token block and layer
    assert lay.block_bytes_per_layer(KVKind.CSA_MAIN) == 37440
    assert lay.block_bytes_per_layer(KVKind.CSA_INDEXER) == 8640
    assert lay.block_bytes_per_layer(KVKind.HCA) == 1728
    n_csa, n_hca = len(mc.csa_layers), len(mc.hca_layers)
    assert lay.block_page_bytes == n_csa * (37440 + 8640) + n_hca * 1728
    # window page: 2 SWA pages per layer (128 positions / 64) + the fp32 overlap snapshot
    assert lay.window_page_bytes == mc.num_layers * 2 * 37440 + _snapshot_bytes(n_csa)
    assert lay.request_state_bytes == _request_state_bytes(n_csa, n_hca)


def test_bf16_and_fp4_classes(pro: ModelConfig) -> None:
    for dtype, fp4 in (("bf16", False), ("fp32", False), ("fp8_e4m3", True), ("bf16", True)):
        lay = ks.build_kv_layout(pro, dtype, fp4)
        assert 1 <= len(lay.classes) <= 3
        for spec in lay.kinds.values():
            assert spec.page_bytes >= spec.raw_page_bytes
            assert spec.page_bytes % lay.formats.page_align == 0
        assert len({k.page_bytes for k in lay.kinds.values()}) == len(lay.classes)
    lay = ks.build_kv_layout(pro, "fp8_e4m3", True)
    assert lay.kinds[KVKind.CSA_INDEXER].raw_page_bytes == 64 * IDX_FP4
    assert [c.page_bytes for c in lay.classes] == [37440, 4608, 1728]  # 4,352 -> 8 x 576
    assert [c.page_bytes for c in ks.build_kv_layout(pro, "bf16").classes] == [65536, 16384, 2048]
    with pytest.raises(ValueError, match="page_size"):
        ks.build_kv_layout(pro, "bf16", False, page_size=192)


def test_plan_budget_and_fragmentation(pro: ModelConfig) -> None:
    budget = 100 * GIB
    p = kp.plan_kv_pools(pro, "fp8_e4m3", False, 256, budget_bytes=budget, context_length=L_1M)
    lay = p.layout
    blocks_per_req = L_1M // 256
    assert p.total_bytes <= budget
    assert p.total_bytes == (
        p.num_block_pages * lay.block_page_bytes
        + p.num_window_pages * lay.window_page_bytes
        + p.num_request_slots * lay.request_state_bytes
    )
    # one more request would not fit; the planned ones do (3 window pages per request slot)
    per_req = blocks_per_req * lay.block_page_bytes + 3 * lay.window_page_bytes + lay.request_state_bytes
    assert p.max_concurrency == budget // per_req
    assert p.max_concurrency * blocks_per_req <= p.num_block_pages
    assert p.num_window_pages == 3 * p.num_request_slots
    assert p.kv_capacity_tokens == p.num_block_pages * 256
    assert p.max_context == L_1M  # capped by the model
    # fragmentation: padding computed from the raw page sizes
    raw = _raw_pages(IDX_FP8)
    n_csa, n_hca, n_layers = 30, 31, 61
    pad_block = n_csa * (37440 - raw[KVKind.CSA_MAIN] + 8640 - raw[KVKind.CSA_INDEXER]) + n_hca * (
        1728 - raw[KVKind.HCA]
    )
    pad_window = n_layers * 2 * (37440 - raw[KVKind.SWA])
    assert p.fragmentation_bytes == p.num_block_pages * pad_block + p.num_window_pages * pad_window
    assert 0 < p.fragmentation_ratio < 0.05
    assert p.state_bytes == p.num_window_pages * _snapshot_bytes(
        n_csa
    ) + p.num_request_slots * _request_state_bytes(n_csa, n_hca)
    d = p.to_dict()
    json.dumps(d)
    assert d["max_concurrency"] == p.max_concurrency and "layout" in d
    # class page counts plus the fp32 state add up to the planned bytes
    assert sum(c["page_bytes"] * c["num_pages"] for c in d["classes"]) + p.state_bytes == p.total_bytes


def test_plan_max_total_tokens_and_errors(flash: ModelConfig) -> None:
    p = kp.plan_kv_pools(flash, "bf16", False, 256, max_total_tokens=100_000, context_length=8192)
    # SGLang rounds the token budget down to the page size: 390 whole pages of 256 tokens
    assert p.num_block_pages == 390 and p.kv_capacity_tokens == 99_840
    assert p.max_concurrency == p.num_block_pages // 32
    assert p.max_context == 8192  # the serving context, below the pools' 99,840 tokens
    small = kp.plan_kv_pools(flash, "bf16", False, 256, max_total_tokens=1024, context_length=8192)
    assert small.max_context == 1024  # the pools, below the serving context
    # the start-up line: no full-context (8192-token) request fits in 1024 tokens, but shorter
    # ones are served (up to 1024 tokens each); "max concurrency 0" alone read as "serves nothing"
    assert small.max_concurrency == 0
    assert (
        "max concurrency 0 at 8192 tokens (the pools' 1024 tokens hold no full-context request; "
        f"shorter requests are served, up to 1024 tokens each, sharing them, up to {small.num_request_slots} "
        "at once)"
    ) in small.summary()
    assert (
        "full-context" not in p.summary()
        and f"max concurrency {p.max_concurrency} at 8192 tokens," in p.summary()
    )
    capped = kp.plan_kv_pools(flash, "bf16", False, 256, budget_bytes=50 * GIB, max_total_tokens=4096)
    assert capped.num_block_pages == 16
    capped = kp.plan_kv_pools(flash, "bf16", False, 256, budget_bytes=50 * GIB, max_total_tokens=4351)
    assert capped.num_block_pages == 16  # rounded down under a budget too
    with pytest.raises(ValueError, match="max_total_tokens"):
        kp.plan_kv_pools(flash, "bf16", False, 256, max_total_tokens=255)
    fixed = kp.plan_kv_pools(
        flash, "bf16", False, 256, budget_bytes=GIB, context_length=4096, max_running_requests=3
    )
    assert fixed.num_request_slots == 3 and fixed.num_window_pages == 9
    with pytest.raises(ValueError, match="budget_bytes or max_total_tokens"):
        kp.plan_kv_pools(flash, "bf16")
    with pytest.raises(ValueError, match="budget_bytes"):
        kp.plan_kv_pools(flash, "bf16", budget_bytes=1000)
    with pytest.raises(ValueError, match="context_length"):
        kp.plan_kv_pools(flash, "bf16", budget_bytes=GIB, context_length=0)


def test_weights_match_published_sizes(flash: ModelConfig, pro: ModelConfig) -> None:
    wf = kv_planner.count_weights(flash)
    assert abs(wf["params"] / 284e9 - 1) < 0.01  # "284B"
    wp = kv_planner.count_weights(pro)
    assert abs(wp["params"] / 1.6e12 - 1) < 0.03  # "1.6T"
    # routed experts dominate and are stored at ~0.53 B / parameter
    assert wf["fp4"]["bytes"] == pytest.approx(wf["fp4"]["params"] * (0.5 + 1 / 32), rel=1e-6)
    assert 140 * GIB < wf["bytes"] < 160 * GIB


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run(
        [sys.executable, "-m", "sglang_v4.tools.kv_planner", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_cli_json_subprocess_pro() -> None:
    r = _cli("--preset", "pro", "--context-length", str(L_1M), "--kv-cache-dtype", "fp8_e4m3", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["total_kv_bytes"] == _expected_total(PRO_RATIOS, MAIN_FP8, IDX_FP8, L_1M)
    assert set(d["per_layer_type"]) >= {"csa", "hca"}
    assert isinstance(d["max_concurrency"], int) and d["max_concurrency"] >= 1
    assert [c["page_bytes"] for c in d["page_classes"]] == [37440, 8640, 1728]


def test_cli_v32_and_bad_args_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert kv_planner.main(["--preset", "v3.2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert abs(d["total_kv_bytes"] / GIB - 83.9) / 83.9 < 0.01
    assert "max_concurrency" in d and "per_layer_type" in d
    assert kv_planner.main(["--preset", "v3.2", "--kv-cache-dtype", "int3"]) == 2
    assert "kv_cache_dtype" in capsys.readouterr().err
    assert kv_planner.main(["--preset", "nope"]) == 2
    assert "preset" in capsys.readouterr().err
    assert kv_planner.main(["--preset", "v3.2", "--context-length", "0"]) == 2


def test_cli_model_path_text(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    args = ["--model-path", str(tmp_path), "--kv-cache-dtype", "fp8_e4m3", "--enable-fp4-indexer"]
    assert kv_planner.main([*args, "--context-length", "4096", "--gpu-memory", "1"]) == 0
    out = capsys.readouterr().out
    assert "max concurrent requests of 4,096 tokens" in out and "DeepSeek-V3.2" in out
    assert kv_planner.main(["--model-path", str(tmp_path / "missing")]) == 2


def test_encode_decode_entries_dispatch() -> None:
    from sgl_kernel_v4.ref import kv_quant as kq

    tiny = ModelConfig.from_dict(TINY)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, tiny.head_dim, generator=g)
    xi = torch.randn(7, tiny.index_head_dim, generator=g)
    f8 = kf.entry_formats(tiny, "fp8_e4m3")
    rows = kf.encode_entries(x, f8.main)
    assert rows.shape == (3, 5, 194) and rows.dtype == torch.uint8
    assert torch.equal(rows.reshape(15, -1), kq.quantize_kv_fp8(x.reshape(15, -1), rope_dim=64))
    back = kf.decode_entries(rows, f8.main)
    assert back.shape == x.shape and (back - x).abs().max() < 0.2
    assert torch.equal(kf.encode_entries(xi, f8.indexer), kq.quantize_indexer_fp8(xi))
    f4 = kf.entry_formats(tiny, "fp8_e4m3", fp4_indexer=True)
    assert torch.equal(kf.encode_entries(xi, f4.indexer), kq.quantize_indexer_fp4(xi))
    b4 = kq.quantize_indexer_fp4(xi)
    assert torch.equal(kf.decode_entries(b4, f4.indexer), kq.dequantize_indexer_fp4(b4))
    fb = kf.entry_formats(tiny, "bf16")
    assert torch.equal(kf.encode_entries(x, fb.main), x.to(torch.bfloat16))
    assert torch.equal(kf.decode_entries(x.to(torch.bfloat16), fb.main), x.to(torch.bfloat16).float())
    with pytest.raises(ValueError, match="last dim"):
        kf.encode_entries(xi, f8.main)
    with pytest.raises(ValueError, match="last dim"):
        kf.decode_entries(rows, f8.indexer)
    with pytest.raises(ValueError, match="KVKind"):
        KVKind("value")


def test_spec_allocate_padded_pages(pro: ModelConfig) -> None:
    lay = ks.build_kv_layout(pro, "fp8_e4m3")
    t = lay.kinds[KVKind.CSA_MAIN].allocate(3)
    assert t.shape == (30, 3, 64, 584) and t.dtype == torch.uint8
    assert t.stride() == (3 * 37440, 37440, 584, 1)  # page stride = size class
    assert t.untyped_storage().nbytes() == 30 * 3 * 37440
    t[:, 1] = 7
    # every byte of the storage (padding included), as a flat uint8 tensor over the same memory
    raw = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).view(30, 3, 37440)
    assert (
        (raw[:, 1, : 64 * 584] == 7).all() and (raw[:, 1, 64 * 584 :] == 0).all() and (raw[:, 0] == 0).all()
    )
    swa = lay.kinds[KVKind.SWA].allocate(4, padded=False)
    assert swa.shape == (61, 4, 64, 584) and swa.is_contiguous()
    lb = ks.build_kv_layout(pro, "bf16")
    h = lb.kinds[KVKind.HCA].allocate(2)
    assert h.shape == (31, 2, 2, 512) and h.dtype == torch.bfloat16 and h.stride()[1] * 2 == 2048
    with pytest.raises(ValueError, match="num_pages"):
        lay.kinds[KVKind.HCA].allocate(0)


def test_kv_rows_view_with_reference_ops() -> None:
    """The flat view runs the torch reference ops' indexing unchanged on fp8 / fp4 storage."""
    from sgl_kernel_v4.ref import kv_quant as kq
    from sgl_kernel_v4.ref.attention import gather_rows

    tiny = ModelConfig.from_dict(TINY)
    lay = ks.build_kv_layout(tiny, "fp8_e4m3", fp4_indexer=True)
    fmt = lay.formats
    store = lay.kinds[KVKind.CSA_MAIN].allocate(4)[0]  # one layer: [4 pages, 64, 194], padded
    view = kf.KVRowsView(store, fmt.main)
    assert view.shape == (256, 128) and view.dtype == torch.float32
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 128, generator=g)
    slots = torch.tensor([0, 63, 64, 130, 255])
    view[slots] = x.to(view.dtype)
    # bytes land in page slot // 64, row slot % 64, as quantize_kv_fp8 encodes them
    assert torch.equal(store[slots // 64, slots % 64], kq.quantize_kv_fp8(x, rope_dim=64))
    rows, valid = gather_rows(view, torch.tensor([[0, -1], [255, 64]]))
    assert rows.shape == (2, 2, 128) and valid.tolist() == [[True, False], [True, True]]
    deq = kq.dequantize_kv_fp8(kq.quantize_kv_fp8(x, rope_dim=64), rope_dim=64)
    assert torch.equal(rows[0, 0], deq[0]) and torch.equal(rows[1, 0], deq[4]) and (rows[0, 1] == 0).all()
    # flat indexer storage, fp4
    istore = torch.zeros(10, fmt.indexer.row_elems, dtype=torch.uint8)
    iv = kf.KVRowsView(istore, fmt.indexer)
    xi = torch.randn(3, tiny.index_head_dim, generator=g)
    iv[torch.tensor([1, 5, 9])] = xi
    assert torch.equal(iv[torch.tensor([5])], kq.dequantize_indexer_fp4(kq.quantize_indexer_fp4(xi[1:2])))
    # int, slice and mask indices on paged storage agree with tensor indices
    assert torch.equal(view[130], view[torch.tensor([130])][0])
    assert torch.equal(view[60:70], view[torch.arange(60, 70)])
    mask = torch.zeros(256, dtype=torch.bool)
    mask[slots] = True
    assert torch.equal(view[mask], view[slots])
    view[3] = x[0]
    assert torch.equal(store[0, 3], store[0, 0])
    with pytest.raises(ValueError, match="storage"):
        kf.KVRowsView(torch.zeros(4, 7, dtype=torch.uint8), fmt.main)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_plan_units_match_dsv4_kv_pool_tensors(dtype: str) -> None:
    """Block page / window page / request slot bytes equal the pool's own tensors (unpadded dtypes)."""
    from sglang_v4.mem_cache.memory_pool import DSV4KVPool

    tiny = ModelConfig.from_dict(TINY)
    lay = ks.build_kv_layout(tiny, dtype)
    assert all(k.page_bytes == k.raw_page_bytes for k in lay.kinds.values())  # no padding here
    torch_dtype = torch.float32 if dtype == "fp32" else torch.bfloat16
    nb, nw, nr = 3, 5, 2
    pool = DSV4KVPool(tiny, 256, nb, nw, nr, torch_dtype, "cpu")

    def nbytes(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors)

    block = [pool.storage(k) for k in (KVKind.CSA_MAIN, KVKind.CSA_INDEXER, KVKind.HCA)]
    assert nbytes(block) == (nb + 1) * lay.block_page_bytes
    states = [pool.state_storage(k) for k in (KVKind.CSA_MAIN, KVKind.CSA_INDEXER, KVKind.HCA)]
    snaps = [t for st in states for t in st.snapshot_tensors()]
    assert len(snaps) == 4  # kv and score of the CSA main and indexer overlap halves
    assert nbytes([pool.storage(KVKind.SWA), *snaps]) == (nw + 1) * lay.window_page_bytes
    live = [t for st in states for t in st.request_tensors()]
    assert len(live) == 10  # CSA main, CSA indexer: buffer + overlap, kv + score; HCA: buffer
    assert nbytes(live) == (nr + 1) * lay.request_state_bytes
    assert pool.memory_bytes() == nbytes(block) + nbytes([pool.storage(KVKind.SWA), *snaps]) + nbytes(live)
