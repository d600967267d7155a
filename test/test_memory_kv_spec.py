"""KV kinds as spec objects: each kind defined once, spec page bytes vs the published size classes,
and the pool's per-kind access (``pool.rows``, ``pool.compressor_state``, request state).

Oracles: the published DeepSeek-V4 layer schedules and byte layouts (448 e4m3 + 64 bf16 + 7 ue8m0
+ 1 pad = 584 B per main entry; 128 e4m3 + fp32 scale = 132 B per fp8 indexer key; 64 B e2m1 + 4
ue8m0 = 68 B per fp4 key), the peers' fp8 page classes (37,440 / 8,640 / 1,728 B: pages rounded up
to the 576-byte FlashMLA row) and the package's own source (read with ``ast``) for where kinds are
spelled.
"""

from __future__ import annotations

import ast
import copy
import pathlib

import pytest
import torch
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.mem_cache.kv_spec import KVKind, PageSpace, build_kv_layout
from sglang_v4.mem_cache.memory_pool import DSV4KVPool

PKG = pathlib.Path(__file__).resolve().parents[1] / "python" / "sglang_v4"
SPEC_MODULE = PKG / "mem_cache" / "kv_spec.py"

MAIN_FP8 = 448 + 64 * 2 + 448 // 64 + 1  # 584
IDX_FP8 = 128 + 4  # 132
IDX_FP4 = 128 // 2 + 128 // 32  # 68
ROW = 576  # FlashMLA page row stride (the fp8 allocation unit)

# spellings of kinds that the spec objects replaced (pool attributes, accessors, state tensors)
RETIRED_NAMES = {
    "csa_kv",
    "csa_idx",
    "hca_kv",
    "swa_kv",
    "csa_kv_flat",
    "csa_idx_flat",
    "hca_kv_flat",
    "swa_flat",
    "snap_csa_kv",
    "snap_csa_score",
    "snap_idx_kv",
    "snap_idx_score",
    "st_csa_buf_kv",
    "st_csa_buf_score",
    "st_csa_ovl_kv",
    "st_csa_ovl_score",
    "st_idx_buf_kv",
    "st_idx_buf_score",
    "st_idx_ovl_kv",
    "st_idx_ovl_score",
    "st_hca_buf_kv",
    "st_hca_buf_score",
    "kv_dtype",
    "alloc_kind_storage",
}


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _trees() -> dict[pathlib.Path, ast.AST]:
    return {p: ast.parse(p.read_text(), str(p)) for p in sorted(PKG.rglob("*.py"))}


def test_each_kind_is_defined_once() -> None:
    assert [k.value for k in KVKind] == ["csa_main", "csa_indexer", "hca", "swa"]
    trees = _trees()
    kind_classes, spec_calls, literals, retired = [], [], [], []
    kind_values = {"csa_main", "csa_indexer", "swa"}  # ("hca" is also the HCA layer-type name)
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "KVKind":
                kind_classes.append(path)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("KVCacheSpec", "CompressorStateSpec"):
                    spec_calls.append(path)
            elif isinstance(node, ast.Constant) and node.value in kind_values and path != SPEC_MODULE:
                literals.append((path.name, node.value))
            elif isinstance(node, ast.Attribute) and node.attr in RETIRED_NAMES:
                retired.append((path.name, node.attr))
            elif isinstance(node, (ast.FunctionDef, ast.arg)):
                name = node.name if isinstance(node, ast.FunctionDef) else node.arg
                if name in RETIRED_NAMES or name == "which":
                    retired.append((path.name, name))
    assert kind_classes == [SPEC_MODULE]
    assert spec_calls and set(spec_calls) == {SPEC_MODULE}  # specs are built in one place
    assert literals == [] and retired == []


@pytest.mark.parametrize("preset", ["flash", "pro"])
@pytest.mark.parametrize("fp4", [False, True])
def test_fp8_specs_reproduce_published_size_classes(preset: str, fp4: bool) -> None:
    mc = ModelConfig.from_dict(get_preset(preset))
    lay = build_kv_layout(mc, "fp8_e4m3", fp4, page_size=256)
    idx = IDX_FP4 if fp4 else IDX_FP8
    n_layers = 43 if preset == "flash" else 61
    ratios = mc.compress_ratios
    csa = tuple(i for i, r in enumerate(ratios) if r == 4)
    hca = tuple(i for i, r in enumerate(ratios) if r == 128)
    # kind -> (space, layers, tokens per entry, entry bytes, rows per page, pages per window/block,
    # published class)
    want = {
        KVKind.CSA_MAIN: (PageSpace.BLOCK, csa, 4, MAIN_FP8, 64, 1, 37_440),
        KVKind.CSA_INDEXER: (PageSpace.BLOCK, csa, 4, idx, 64, 1, 4_608 if fp4 else 8_640),
        KVKind.HCA: (PageSpace.BLOCK, hca, 128, MAIN_FP8, 2, 1, 1_728),
        KVKind.SWA: (PageSpace.WINDOW, tuple(range(n_layers)), 1, MAIN_FP8, 64, 2, 37_440),
    }
    assert set(lay.kinds) == set(KVKind)
    for kind, (space, layers, tpe, entry, rows, ppu, cls) in want.items():
        spec = lay.kinds[kind]
        assert spec.kind is kind and spec.space is space and spec.layers == layers
        assert (spec.tokens_per_entry, spec.row_bytes, spec.rows_per_page, spec.pages_per_unit) == (
            tpe,
            entry,
            rows,
            ppu,
        )
        assert spec.raw_page_bytes == rows * entry
        assert spec.aligned_page_bytes == _round_up(rows * entry, ROW) == cls
        assert spec.page_bytes == cls and spec.page_bytes % ROW == 0
        assert spec.entry.storage_dtype == torch.uint8 and spec.entry.quantized
    classes = [(c.page_bytes, set(c.kinds)) for c in lay.classes]
    assert classes == [
        (37_440, {KVKind.CSA_MAIN, KVKind.SWA}),
        (4_608 if fp4 else 8_640, {KVKind.CSA_INDEXER}),
        (1_728, {KVKind.HCA}),
    ]
    # compressor state: fp32, per layer CSA (m = 4) buffer m x 2d kv + score and overlap m x d kv +
    # score, main (d = 512) and indexer (d = 128); HCA (m' = 128) buffer m' x d kv + score
    st = lay.states
    assert set(st) == {KVKind.CSA_MAIN, KVKind.CSA_INDEXER, KVKind.HCA}
    assert st[KVKind.CSA_MAIN].request_bytes == len(csa) * (2 * 4 * 1024 + 2 * 4 * 512) * 4
    assert st[KVKind.CSA_INDEXER].request_bytes == len(csa) * (2 * 4 * 256 + 2 * 4 * 128) * 4
    assert st[KVKind.HCA].request_bytes == len(hca) * 2 * 128 * 512 * 4
    assert st[KVKind.CSA_MAIN].snapshot_bytes == len(csa) * 2 * 4 * 512 * 4
    assert st[KVKind.CSA_INDEXER].snapshot_bytes == len(csa) * 2 * 4 * 128 * 4
    assert st[KVKind.HCA].snapshot_bytes == 0
    assert lay.window_page_bytes == n_layers * 2 * 37_440 + len(csa) * 2 * 4 * (512 + 128) * 4


@pytest.fixture(scope="module")
def tiny() -> ModelConfig:
    return ModelConfig.from_dict(get_preset("tiny"))


@pytest.mark.parametrize("kv", ["fp32", "fp8_e4m3"])
def test_rows_map_model_layers_to_kind_slots(tiny: ModelConfig, kv: str) -> None:
    """``pool.rows(kind, layer)`` writes the storage slot of that model layer, and only it."""
    pool = DSV4KVPool(tiny, 256, 2, 2, 1, torch.float32, "cpu", kv_cache_dtype=kv)
    layers = {
        KVKind.CSA_MAIN: tiny.csa_layers,
        KVKind.CSA_INDEXER: tiny.csa_layers,
        KVKind.HCA: tiny.hca_layers,
        KVKind.SWA: list(range(tiny.num_layers)),
    }
    g = torch.Generator().manual_seed(0)
    for kind, ls in layers.items():
        for slot, layer in enumerate(ls):
            before = pool.storage(kind).clone()
            view = pool.rows(kind, layer)
            view[torch.tensor([5])] = torch.randn(1, view.shape[1], generator=g)
            changed = (pool.storage(kind) != before).flatten(1).any(1).nonzero().flatten().tolist()
            assert changed == [slot], (kind, layer)
    with pytest.raises(ValueError, match="layer 0 has no hca"):
        pool.rows(KVKind.HCA, 0)
    with pytest.raises(ValueError, match="layer 2 has no csa_main compressor"):
        pool.compressor_state(KVKind.CSA_MAIN, 2)
    no_hca = get_preset("tiny")
    no_hca["layer_types"] = ["sliding_attention", "compressed_sparse_attention"] * 2
    mc = ModelConfig.from_dict(copy.deepcopy(no_hca))
    small = DSV4KVPool(mc, 256, 2, 2, 1, torch.float32, "cpu")
    assert KVKind.HCA not in small.layout.kinds and KVKind.HCA not in small.layout.states
    with pytest.raises(ValueError, match="no hca KV"):
        small.rows(KVKind.HCA, 1)
    with pytest.raises(ValueError, match="no hca compressor"):
        small.compressor_state(KVKind.HCA, 1)


def test_compressor_state_and_request_state(tiny: ModelConfig) -> None:
    pool = DSV4KVPool(tiny, 256, 2, 3, 3, torch.float32, "cpu")
    m, d, di = tiny.csa_ratio, tiny.head_dim, tiny.index_head_dim
    layer = tiny.csa_layers[1]
    st = pool.compressor_state(KVKind.CSA_MAIN, layer)
    assert st.buf_kv.shape == (4, m, 2 * d) and st.ovl_kv is not None and st.ovl_kv.shape == (4, m, d)
    assert st.snap_kv is not None and st.snap_kv.shape == (4, m, d)  # 3 window pages + dummy
    # the views alias the pool: slot 1 of the layer's storage
    st.buf_kv[2].fill_(1.0)
    assert (pool.state_storage(KVKind.CSA_MAIN).buf_kv[1, 2] == 1.0).all()
    assert pool.state_storage(KVKind.CSA_MAIN).buf_kv[0].count_nonzero() == 0
    st.rows[torch.tensor([7])] = torch.ones(1, d)
    assert (pool.rows(KVKind.CSA_MAIN, layer)[7] == 1.0).all()
    ix = pool.compressor_state(KVKind.CSA_INDEXER, layer)
    assert ix.buf_kv.shape == (4, m, 2 * di) and ix.rows.shape[1] == di
    hca = pool.compressor_state(KVKind.HCA, tiny.hca_layers[0])
    assert hca.buf_kv.shape == (4, tiny.hca_ratio, d)
    assert hca.ovl_kv is None and hca.ovl_score is None and hca.snap_kv is None and hca.snap_score is None

    # every request tensor of every compressor: fill slots 1 and 2, snapshots of window page 3
    for kind in pool.layout.states:
        s = pool.state_storage(kind)
        for i, t in enumerate(s.request_tensors()):
            t[:, 1].fill_(10.0 + i)
            t[:, 2].fill_(20.0 + i)
        for i, t in enumerate(s.snapshot_tensors()):
            t[:, 3].fill_(30.0 + i)
    pool.copy_req_state(3, 2)
    pool.reset_req_state(2)
    pool.load_resume_state(1, 3)
    for kind in pool.layout.states:
        s = pool.state_storage(kind)
        for i, t in enumerate(s.request_tensors()):
            assert (t[:, 2] == 0).all() and (t[:, 3] == 20.0 + i).all()
        assert (s.buf_kv[:, 1] == 10.0).all() and (s.buf_score[:, 1] == 11.0).all()
        if s.spec.overlap:  # the Ca halves come from the snapshot; the partial windows stay
            assert s.ovl_kv is not None and s.ovl_score is not None
            assert (s.ovl_kv[:, 1] == 30.0).all() and (s.ovl_score[:, 1] == 31.0).all()
