"""Quantized KV entries are accessed no wider than their alignment, in the code compiled for sm_90.

fp8 indexer keys are 132-byte rows (128 e4m3 + an fp32 scale) and fp4 keys 68-byte rows: a row
starts 4 bytes past a 16-byte boundary as often as on one. Triton 3.6 (the GPU machine's compiler)
inferred 16-byte alignment for the row offsets ``(slot % rows_per_page) * row_stride`` of the
indexer's scoring kernel and turned the 128 contiguous key bytes into 16-byte ``cp.async`` copies:
``misaligned address`` on the H200 for every ``--kv-cache-dtype fp8_e4m3`` run without the fp4
indexer. The codec helpers now state each entry's true alignment (``aligned`` in
``sgl_kernel_v4.triton.kv_codec``; ``entry_align`` in ``sgl_kernel_v4.paged``).

These tests take the launches recorded while the interpreted fast tier ran (the session fixture
``interpreted_kernel_tier``: the quantized-codec kernel tests of :data:`RECORDED` among them, and
the compressor's quantized writes), add the fp8 attention at serving shapes recorded without
running, compile each launch that reads or writes a quantized entry for sm_90 without the
interpreter (``kernel_launch_record``), and read the PTX: every global access made by the codec
helpers is at most the entry alignment wide (the fault), and the fp8 key bytes of the scoring
kernel are read in accesses of exactly that width (the alignment statement reaches the compiler;
without it they are either 16-byte copies or single bytes, depending on the compiler).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from kernels_compile_testutil import HERE, REPRESENTATIVE, _env, record_script

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

#: the quantized-codec kernel tests whose launches are scanned (all in the interpreted tier's run)
RECORDED = [
    "test_kernels_indexer.py::test_indexer_topk_quantized_keys",
    "test_kernels_attention.py::test_paged_attention_fp8_pools",
    "test_kernels_kv_codec.py",
]

# fp8 pools at the serving shapes of flash-8l-32e (584-byte entries: 448 e4m3 + 64 bf16 + 7 scales +
# pad), recorded without running (the interpreter has no bf16 dot): decode batches of 1 and 8
# (16- and 64-key tiles of 16 heads) and a 200-token extend (32-key tiles of 64 heads)
_FP8_SERVING = """
import sys, torch
import kernel_launch_record as klr
from sgl_kernel_v4.paged import PagedRows
from sgl_kernel_v4.triton.attention import sparse_attention

def pool(n):
    return PagedRows(torch.zeros(n * 584, dtype=torch.uint8), "fp8_main", 512, 64, 64, 64 * 584, 584, n)

H, D, W, e, n = 64, 512, 128, 64, 1000
P = -(-n // e) + 1
with klr.record_launches(dry=True) as recs:
    for T in (1, 8, 200):
        for mode in ("csa", "hca"):
            sparse_attention(torch.empty(T, H, D, dtype=torch.bfloat16), pool(4 * W), torch.zeros(T, 2, dtype=torch.int64),
                             torch.full((T,), 4 * n, dtype=torch.int64), W, torch.zeros(H), 0.1, pool(P * e),
                             comp_visible=torch.full((T,), n, dtype=torch.int64),
                             req_to_page=torch.zeros(1, P, dtype=torch.int32), req_rows=torch.zeros(1, dtype=torch.int64),
                             token_req=torch.zeros(T, dtype=torch.int64), entries_per_page=e)
klr.dump(recs, sys.argv[1])
"""

_SCAN = """
import json, sys
import kernel_launch_record as klr
from sgl_kernel_v4.paged import CODECS, entry_align
names = {v: k for k, v in CODECS.items()}
for rec in klr.distinct(klr.load(sys.argv[1])):
    ce = klr.named_constexprs(rec)
    if not ce.get("CODEC"):
        continue
    dim = ce.get("D", ce.get("DI", 2 * ce.get("HALF_D", 0)))  # the compressor's rows: 2 halves
    nope = ce.get("NOPE", dim)
    codec = names[ce["CODEC"]]
    kernel = klr.compile_kernel(rec)
    widths = klr.global_access_widths(kernel.asm["ptx"], "kv_codec.py")
    print("SCAN " + json.dumps({"fn": rec["fn"].split(":")[1], "codec": codec, "dim": dim,
                                "align": entry_align(codec, dim, dim - nope), "widths": widths,
                                "shared": kernel.metadata.shared, "calls": klr.sass_calls(kernel)}))
"""


def _scan(log: str) -> list[dict]:
    """The codec launches of the recording ``log`` compiled for sm_90 (``_SCAN``), one dict each."""
    proc = subprocess.run(
        [sys.executable, "-c", _SCAN, log], cwd=HERE, env=_env(False), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return [json.loads(line[5:]) for line in proc.stdout.splitlines() if line.startswith("SCAN ")]


class _Background(threading.Thread):
    """Runs ``fn`` in a thread; :meth:`result` joins it and returns its value or raises its error."""

    def __init__(self, fn: Callable[[], list[dict]]) -> None:
        super().__init__(daemon=True)
        self.fn, self.value, self.error = fn, None, None
        self.start()

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:  # noqa: BLE001 - re-raised by result()
            self.error = e

    def result(self) -> list[dict]:
        self.join()
        if self.error is not None:
            raise self.error
        return self.value


@pytest.fixture(scope="session")
def serving_scans(tmp_path_factory) -> _Background:
    """The fp8 attention at serving shapes (``_FP8_SERVING``) recorded and scanned in the
    background: it needs nothing of the interpreted tier's run, so it overlaps the wait for it
    (requested before ``interpreted_kernel_tier``, which is session-scoped too)."""
    log = str(tmp_path_factory.mktemp("align_serving") / "launches.pkl")

    def run() -> list[dict]:
        record_script(_FP8_SERVING, log)
        return _scan(log)

    return _Background(run)


@pytest.fixture(scope="module")
def scans(
    serving_scans: _Background,
    interpreted_kernel_tier: tuple[subprocess.CompletedProcess[str], str],
    tmp_path_factory,
) -> list[dict]:
    from kernels_compile_testutil import QUANTIZED

    proc, tier_log = interpreted_kernel_tier
    assert set(RECORDED) <= set(QUANTIZED + REPRESENTATIVE), RECORDED
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    log = str(tmp_path_factory.mktemp("align") / "launches.pkl")
    shutil.copy(tier_log, log)
    out = _scan(log) + serving_scans.result()
    assert {s["codec"] for s in out} >= {"fp8_main", "fp8_indexer", "fp4_indexer"}, out
    return out


def test_codec_accesses_no_wider_than_the_entry_alignment(scans: list[dict]) -> None:
    too_wide = [
        (s["fn"], s["codec"], loc, w, s["align"])
        for s in scans
        for loc, w in s["widths"].items()
        if w > s["align"]
    ]
    assert too_wide == [], too_wide


def test_fp8_attention_at_serving_shapes_fits_shared_memory(scans: list[dict]) -> None:
    """584-byte fp8 entries of flash-8l-32e: wider loads let the pipeliner stage the 64-key entry
    tiles through shared memory (cp.async), 246 KB of the 227 KB a block may use: the H200 run of
    ``test_paged_attention_fp8_pools`` refused to launch when the entries were stated 8-byte
    aligned. The attention kernels compiled for those shapes fit."""
    from kernel_launch_record import SMEM_LIMIT

    attn = [s for s in scans if s["fn"] == "_paged_attn_kernel" and s["dim"] == 512]
    assert len(attn) >= 3, [s["fn"] for s in scans]
    over = [(s["shared"], s["widths"]) for s in attn if s["shared"] > SMEM_LIMIT]
    assert over == [], over


def test_fp8_key_bytes_read_at_their_alignment(scans: list[dict]) -> None:
    # the extend scoring launches (the keys-major kernel by default, the general one when selected)
    extend = ("_score_kernel", "_score_extend_kernel")
    score = [s for s in scans if s["fn"] in extend and s["codec"] == "fp8_indexer"]
    assert score, [s["fn"] for s in scans]
    for s in score:
        assert s["align"] == 4
        assert max(s["widths"].values()) == 4, s["widths"]


#: kernels that address a pool row per key they read: their slot arithmetic must stay inline
GATHER_KERNELS = ("_paged_attn_kernel", "_score_kernel", "_score_extend_kernel", "_score_decode_kernel")


def test_gather_kernels_call_no_subroutine(scans: list[dict]) -> None:
    """The kernels that split a slot into page and row for every key they gather do it in int32
    (``kv_codec.row_offsets``): a 64-bit division compiles to a subroutine ``CALL`` per value,
    65 of them in the sparse attention before (its time on the H200 went mostly to index
    arithmetic). Their sm_90 code has no ``CALL`` (None: ``cuobjdump`` not shipped here)."""
    gathers = [s for s in scans if s["fn"] in GATHER_KERNELS]
    assert {s["fn"] for s in gathers} >= {"_paged_attn_kernel", "_score_extend_kernel"}, [
        s["fn"] for s in scans
    ]
    calls = [(s["fn"], s["codec"], s["calls"]) for s in gathers if s["calls"]]
    assert calls == [], calls


def test_entry_align_of_the_formats() -> None:
    from sgl_kernel_v4.paged import entry_align, entry_bytes

    assert (entry_bytes("fp8_main", 512, 64), entry_align("fp8_main", 512, 64)) == (584, 8)
    assert (entry_bytes("fp8_indexer", 128), entry_align("fp8_indexer", 128)) == (132, 4)
    assert (entry_bytes("fp4_indexer", 128), entry_align("fp4_indexer", 128)) == (68, 4)
    with pytest.raises(ValueError, match="codec"):
        entry_bytes("float", 128)


def test_paged_rows_refuses_a_misaligned_quantized_layout() -> None:
    import torch
    from sgl_kernel_v4.paged import PagedRows

    st = torch.zeros(4096, dtype=torch.uint8)
    PagedRows(st, "fp8_indexer", 128, 0, 8, 132 * 8, 132, 16)
    with pytest.raises(ValueError, match="row_stride"):
        PagedRows(st, "fp8_indexer", 128, 0, 8, 130 * 8, 130, 16)
    with pytest.raises(ValueError, match="page_stride"):
        PagedRows(st, "fp8_main", 512, 64, 2, 1170, 584, 4)
    with pytest.raises(ValueError, match="storage"):
        PagedRows(st[2:], "fp4_indexer", 128, 0, 8, 68 * 8, 68, 16)
    with pytest.raises(ValueError, match="codec"):
        PagedRows(st, "fp6", 128, 0, 8, 68 * 8, 68, 16)
