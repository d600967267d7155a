"""SASS of the decode GEMM kernels' K loops (FP8 linears, FP4 MoE) per weight byte, by kind (no GPU).

Compiles ``fp8_gemm._w8a16_kernel`` for sm_90 with the Triton on the path (the serving machines
run 3.6) at the decode rule's tiles (``fp8_gemm._w8a16_config``) for every V4-Flash decode shape
(``fp8_linear_sweep.flash_shapes``), specialised as a launch specialises it (``M == 1`` is a
constant, integers divisible by 16 are marked so), for each decode setting (``--variants``), then
disassembles the cubin with the ``cuobjdump`` Triton bundles and counts the instructions of the K
loop (the backward branch whose body holds the MMA) by kind:

* ``mma``: HGMMA / QGMMA and their warpgroup fences; ``mem``: shared / global loads and stores,
  cp.async and its waits; ``decode``: the e4m3 weight conversion (the packed shift / mask / permute
  constants of ``fp8_gemm._e4m3_asm`` and ``fp8_words``, the ``2**120`` bf16 multiply, the GPU's
  e4m3 / fp16 conversions; the e2m1 placement masks); ``scale``: fp32 / bf16 arithmetic on the
  partial sums, scale rows and activations (the FP4 block scale's per-weight ``mul.bf16x2``, the
  fp16 variants' activation max reductions); ``sync``: barriers and fences;
  ``addr``: the rest (address, mask, loop control; uniform-datapath instructions included: they
  take issue slots too).

``--moe``: the same for the FP4 MoE's pair-mode kernels (``moe_fp4``: fused gate/up, K-split down;
bf16, the launches ``test_kernels_compile._moe_fp4_launches`` lists) for ``fused_dsplit1``
and ``fused_dsplit1_words`` (the word decode, the default); a K step's weight bytes are ``BLOCK_N x BLOCK_K / 2``
(e2m1, two per byte; the scale bytes, 1/16 of that, not counted).

Per weight byte: ``count x num_warps / (BLOCK_N x BLOCK_K)`` warp-instructions. Issue model
(H200): an SM issues at most 4 warp-instructions per cycle (one per scheduler) and, at
~4.2 TB/s over 132 SMs at ~1.98 GHz, receives ~16 weight bytes per cycle, so the loop is
issue-bound when it needs more than 0.25 warp-instructions per byte; ``issue / bw`` is that
ratio. Integer logic (LOP3, PRMT, SHF, SEL, ISETP, IADD3, LEA, PLOP3; 64 lanes per cycle per SM in
the CUDA guide's throughput table: 2 warp-instructions per cycle) is the ``alu / bw`` ratio
against the same 16 bytes per cycle. Counts, not timings.

Usage::

    PYTHONPATH=<triton 3.6>:python:sgl-kernel-v4:test python benchmark/decode_sass_count.py \\
        [--variants w8a16,w8a16_words,w8a16_words_fold] [--moe] [--out DIR]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

#: decode settings -> the kernel constexprs that select them (``fp8_linear`` passes the same)
SETTINGS: dict[str, dict[str, Any]] = {
    "w8a16": {"USE_ASM": True, "QUANT_A": False},
    "w8a16_words": {"USE_ASM": False, "QUANT_A": False, "WORDS": 1},
    "w8a16_words_fold": {"USE_ASM": False, "QUANT_A": False, "WORDS": 2},
    "w8a16_f16asm": {"USE_ASM": False, "QUANT_A": False, "F16": 2},
    "w8a8_fused": {"USE_ASM": False, "QUANT_A": True},
}
KINDS = ("mma", "mem", "decode", "scale", "sync", "addr")
_ALU = ("LOP3", "PRMT", "SHF", "SEL", "ISETP", "IADD3", "LEA", "PLOP3", "VIADD", "IMNMX", "VIMNMX")
#: operands that mark an instruction as part of the e4m3 decode
_P2_120 = "1.32922799578491587290e+36"
_DECODE_CONST = ("0x7f007f0", "0x1c001c0", "0x80008000", "0x4140", _P2_120)


def kind(text: str) -> str:
    """The kind (one of :data:`KINDS`) of one SASS instruction (predicate stripped)."""
    op = text.split()[0]
    if op.startswith(("HGMMA", "QGMMA", "HMMA", "WARPGROUP")):
        return "mma"
    if op.startswith(("LDS", "LDG", "STS", "STG", "LDGSTS", "LDSM", "LDGDEPBAR", "DEPBAR", "LDC")):
        return "mem"
    if op.startswith(("BAR", "MEMBAR", "FENCE")):
        return "sync"
    if op.startswith(("F2FP.F16.E4M3", "F2F.BF16")) or any(c in text for c in _DECODE_CONST):
        if not (op.startswith(("FMUL", "FFMA")) and _P2_120 in text):  # the scale row's 2**120
            return "decode"
    if op.startswith("IMAD.SHL") and re.search(r", 0x(4|10|40|100|1000),", text):
        return "decode"
    if op.startswith("SHF.R.U32.HI") and re.search(r"RZ, 0x[246],", text):
        return "decode"
    if op.startswith(("FFMA", "FMUL", "FADD", "HMUL2", "HFMA2", "FMNMX", "SHFL", "F2FP", "FSEL", "FSETP")):
        return "scale"
    return "addr"


def parse_sass(text: str) -> list[tuple[int, str]]:
    """``[(address, instruction)]`` of ``cuobjdump -sass`` output (predicates stripped)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip())))
    return out


def k_loop(ins: list[tuple[int, str]]) -> list[str]:
    """The instructions of the loop whose body holds the MMA (a backward branch's range)."""
    best: list[str] = []
    for addr, t in ins:
        m = re.match(r"BRA\S*\s+.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) <= addr:
            body = [u for a, u in ins if int(m.group(1), 16) <= a <= addr]
            if any(kind(u) == "mma" and "GMMA" in u for u in body) and len(body) > len(best):
                best = body
    return best


def _tool(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def compile_case(setting: str, cfg: dict[str, int], m1: bool) -> dict[str, Any]:
    """Compile one launch and count its K loop: counts by kind and opcode, regs, spill, smem."""
    import triton
    from sgl_kernel_v4.triton import fp8_gemm
    from test_kernels_compile import _W8A16, _attrs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = fp8_gemm._w8a16_kernel
    c = dict(cfg)
    opts = {"num_warps": c.pop("num_warps"), "num_stages": c.pop("num_stages")}
    consts = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
    consts.update(c, SUB_K=min(c["BLOCK_K"], 128), **SETTINGS[setting])
    sig = dict(_W8A16)
    names = list(sig)
    attrs = _attrs(sig)
    for n in ("stride_xg", "M"):  # K and T = 16 are multiples of 16 at these launches
        attrs[(names.index(n),)] = [["tt.divisibility", 16]]
    if m1:  # Triton makes an integer argument equal to 1 a constant
        sig["M"] = "constexpr"
        consts["M"] = 1
        del attrs[(names.index("M"),)]
    k = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                       target=GPUTarget("cuda", 90, 64), options=opts)  # fmt: skip
    return count_loop(k, opts["num_warps"], cfg["BLOCK_N"] * cfg["BLOCK_K"])


def count_loop(k: Any, warps: int, step_bytes: int) -> dict[str, Any]:
    """The K loop's counts of compiled kernel ``k`` (by kind, by opcode, integer logic), its
    registers, spill and shared memory; ``step_bytes`` weight bytes per K step."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        sass, res = (
            subprocess.run(
                [_tool("cuobjdump"), flag, f.name], capture_output=True, text=True, check=True
            ).stdout
            for flag in ("-sass", "-res-usage")
        )
    loop = k_loop(parse_sass(sass))
    regs = re.search(r"REG:(\d+)", res)
    stack = re.search(r"STACK:(\d+)", res)
    return {
        "kinds": collections.Counter(kind(t) for t in loop),
        "ops": collections.Counter(t.split()[0] for t in loop),
        "alu": sum(1 for t in loop if t.split()[0].startswith(_ALU)),
        "total": len(loop),
        "regs": int(regs.group(1)) if regs else None,
        "spill": int(stack.group(1)) if stack else None,
        "smem": k.metadata.shared,
        "warps": warps,
        "bytes": step_bytes,
    }


def moe_rows() -> list[tuple[str, str, dict[str, Any]]]:
    """``(configuration, kernel, counts)`` of the FP4 MoE pair-mode kernels (bf16): the byte decode
    (``fused_dsplit1``) and the word decode (``fused_dsplit1_words``, the default)."""
    import importlib

    import triton
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS
    from test_kernels_compile import _attrs, _moe_fp4_launches
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    out = []
    for name in ("fused_dsplit1", "fused_dsplit1_words"):
        for module, kname, sig, consts, opts, _ in _moe_fp4_launches(DECODE_VARIANTS[name], "bf16", True):
            if "BLOCK_K" not in consts:  # the partial-sum kernel: no K loop
                continue
            kernel = getattr(importlib.import_module(f"sgl_kernel_v4.triton.{module}"), kname)
            c = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
            c.update(consts)
            src = ASTSource(fn=kernel, signature=sig, constexprs=c, attrs=_attrs(sig))
            k = triton.compile(src, target=GPUTarget("cuda", 90, 64), options=opts)
            step = consts["BLOCK_N"] * consts["BLOCK_K"] // 2
            out.append((name, kname, count_loop(k, opts["num_warps"], step)))
    return out


def _row(label: str, r: dict[str, Any]) -> str:
    per_byte = r["total"] * r["warps"] / r["bytes"]
    alu = r["alu"] * r["warps"] / r["bytes"]
    return (
        f"| {label} | {r['regs']} | {r['spill']} | {r['smem']} | "
        + " | ".join(str(r["kinds"].get(k, 0)) for k in KINDS)
        + f" | {r['total']} | {per_byte:.3f} | {per_byte / 4 * 16:.2f} | {alu / 2 * 16:.2f} |"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default="w8a16,w8a16_words,w8a16_words_fold", help="settings (SETTINGS)")
    p.add_argument("--tokens", default="1,16", help="token counts (1: the M == 1 specialisation)")
    p.add_argument("--moe", action="store_true", help="also the FP4 MoE pair-mode kernels")
    p.add_argument("--out", default=None, help="also write DIR/decode_sass_count.md")
    a = p.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.join(here, "..", "test")]
    import triton
    from fp8_linear_sweep import flash_shapes
    from sgl_kernel_v4.triton.fp8_gemm import _w8a16_config

    settings = [v for v in a.variants.split(",") if v]
    bad = [v for v in settings if v not in SETTINGS]
    if bad:
        raise ValueError(f"--variants: unknown {bad}; expected some of {', '.join(SETTINGS)}")
    lines = [
        f"### `_w8a16_kernel` K loop, SASS per weight byte (Triton {triton.__version__}, sm_90)",
        "",
        "Warp-instructions per K step and warp by kind; per byte = x warps / (BLOCK_N x BLOCK_K). "
        "issue / bw: per-byte count / 4 per cycle against 16 B per SM per cycle; alu / bw: integer "
        "logic at 2 per cycle against the same.",
        "",
        "| setting | T | tiles (shapes) | regs | spill B | smem B | " + " | ".join(KINDS)
        + " | total | per byte | issue / bw | alu / bw |",
        "|---|---:|---|---:|---:|---:|" + "---:|" * (len(KINDS) + 4),
    ]  # fmt: skip
    for T in (int(t) for t in a.tokens.split(",")):
        by_cfg: dict[tuple, list[str]] = {}
        for s in flash_shapes():
            cfg = _w8a16_config(T, s["N"], s["G"], s["K"], 132, 2)
            by_cfg.setdefault(tuple(sorted(cfg.items())), []).append(s["name"])
        for setting in settings:
            for key, names in by_cfg.items():
                cfg = dict(key)
                r = compile_case(setting, cfg, T == 1)
                tiles = f"{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['SPLIT_K']} ({', '.join(names)})"
                lines.append(_row(f"{setting} | {T} | {tiles}", r))
                print(setting, T, tiles, dict(r["ops"].most_common()), file=sys.stderr)
    if a.moe:
        lines += ["", "FP4 MoE, pair mode (weight bytes: e2m1, two per byte):", "",
                  "| configuration | kernel | regs | spill B | smem B | " + " | ".join(KINDS)
                  + " | total | per byte | issue / bw | alu / bw |",
                  "|---|---|---:|---:|---:|" + "---:|" * (len(KINDS) + 4)]  # fmt: skip
        for name, kname, r in moe_rows():
            lines.append(_row(f"{name} | `{kname}`", r))
            print(name, kname, dict(r["ops"].most_common()), file=sys.stderr)
    md = "\n".join(lines) + "\n"
    print(md)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "decode_sass_count.md"), "w") as f:
            f.write(md)


if __name__ == "__main__":
    main()
