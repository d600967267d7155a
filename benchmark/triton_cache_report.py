"""What the GPU's Triton build made of our kernels: registers, spills, shared memory, pipelining.

Reads a Triton cache directory (``TRITON_CACHE_DIR`` of a run that compiled the kernels) and writes
one row per compiled variant of the named kernels: its ``num_warps`` and ``num_stages``, the registers per thread and the stack frame (spilled registers) of its cubin
(``cuobjdump -res-usage``), the shared memory of a program, and from its TTGIR the number of asynchronous
global-to-shared copies (``cp.async``: loads the software pipeliner overlaps with the loop's
products) against plain loads of 2-D tiles (waited for inside the iteration). A CPU compile for
``sm_90`` (``test/test_kernels_compile.py``) only guesses the launch-time specialisation (which
integer arguments are multiples of 16); this reads the variants the device actually built.

Usage: ``python benchmark/triton_cache_report.py --cache DIR --kernels _paged_attn_kernel,_hc_mix_kernel
[--out FILE]`` (markdown on stdout, and in ``FILE`` when given).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess


def _cuobjdump() -> str | None:
    """The ``cuobjdump`` shipped with Triton, else the one on ``PATH`` (None: neither)."""
    try:
        import triton

        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.access(tool, os.X_OK):
            return tool
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def res_usage(cubin_path: str) -> tuple[int | None, int | None]:
    """``(registers per thread, stack bytes)`` of the kernel in ``cubin_path`` from
    ``cuobjdump -res-usage`` (the stack frame holds spilled registers); ``(None, None)`` without
    the tool or the file."""
    tool = _cuobjdump()
    if tool is None or not os.path.exists(cubin_path):
        return None, None
    text = subprocess.run([tool, "-res-usage", cubin_path], capture_output=True, text=True).stdout
    reg = re.search(r"REG:(\d+)", text)
    stack = re.search(r"STACK:(\d+)", text)
    return (int(reg.group(1)) if reg else None, int(stack.group(1)) if stack else None)


def variants(cache: str, names: set[str]) -> list[dict]:
    """One dict per compiled variant of the kernels ``names`` in the Triton cache ``cache``: name,
    warps, stages, regs, stack bytes, shared bytes, async copies, plain 2-D tile loads, the 2-D tiles
    loaded and the MMA accumulator shapes (a variant's constexprs are not kept in the cache's metadata)."""
    rows = []
    for meta_path in glob.glob(os.path.join(cache, "*", "*.json")):
        base = os.path.basename(meta_path)[: -len(".json")]
        if base not in names:
            continue
        try:
            with open(meta_path) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        ttgir_path = meta_path[: -len(".json")] + ".ttgir"
        ttgir = open(ttgir_path).read() if os.path.exists(ttgir_path) else ""
        plain_2d = [
            ln for ln in ttgir.splitlines() if "tt.load" in ln and re.search(r"tensor<\d+x\d+x!tt.ptr", ln)
        ]
        tiles = sorted(
            {
                m.group(1)
                for ln in ttgir.splitlines()
                if "tt.load" in ln or "async_copy_global_to_local" in ln
                for m in [re.search(r"tensor<(\d+x\d+)x!tt.ptr<(?:\w+)>", ln)]
                if m
            }
        )
        accs = sorted(set(re.findall(r"tensor<(\d+x\d+)xf32, #mma", ttgir)))
        regs, stack = res_usage(meta_path[: -len(".json")] + ".cubin")
        rows.append(
            {
                "name": base,
                "num_warps": meta.get("num_warps"),
                "num_stages": meta.get("num_stages"),
                "tiles": tiles,
                "mma_accumulators": accs,
                "n_regs": regs,
                "stack": stack,
                "shared": meta.get("shared"),
                "async_copies": ttgir.count("async_copy_global_to_local"),
                "plain_2d_loads": len(plain_2d),
            }
        )
    return sorted(
        rows, key=lambda r: (r["name"], str(r["mma_accumulators"]), r["num_warps"] or 0, r["num_stages"] or 0)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--kernels", required=True, help="comma-separated kernel names")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = variants(a.cache, set(a.kernels.split(",")))
    lines = [
        "| kernel | warps | stages | regs | stack B | shared B | cp.async | plain 2-D loads | loaded 2-D tiles | MMA accumulators |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['name']}` | {r['num_warps']} | {r['num_stages']} | {r['n_regs']} | {r['stack']} | "
            f"{r['shared']} | {r['async_copies']} | {r['plain_2d_loads']} | {' '.join(r['tiles'])} | "
            f"{' '.join(r['mma_accumulators'])} |"
        )
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
