"""FP8 / FP4 weights on one GPU, in one call: GPU tests, kernel timings, model timings, accuracy.

Everything runs under a hard time budget (``--budget-s``); a phase is skipped when too little
time is left and the results are rewritten after every phase (``quant_bench.json``,
``quant_bench.md``), so a cut-off run keeps what it measured. Phases:

1. ``gpu_tests`` (a subprocess started at once; the timings wait for it): ``pytest -m gpu`` on the
   FP8 GEMM and FP4 MoE kernel tests, the quantized runtime vs HF test and the quantized CUDA-graph
   replay test (log: ``pytest_quant_gpu.log``).
2. ``ceilings``: device copy bandwidth (1 GiB, bytes read + written) and the bf16 GEMM rate.
3. ``fp8_gemm`` (``quant_kernels.py``): every FP8 projection of V4-Flash (q_a, q_b, kv, grouped o_a, o_b, indexer q_b,
   shared expert) at decode / prefill token counts: bf16 cuBLAS (``F.linear`` on the dequantized
   weight), the weight-only (``w8a16``) and activation-quantized (``w8a8``) Triton kernels and the
   variant ``fp8_linear`` picks; each against its copy-bandwidth roofline (weight + scale +
   activation bytes / measured copy bandwidth). Decode-sized calls are timed as CUDA-graph
   replays of back-to-back calls on rotating weight copies (no launch gaps, no L2 reuse).
4. ``moe_fp4``: the FP4 grouped MoE vs the bf16 Triton MoE (``fused_moe``) at V4-Flash expert
   shapes, with the roofline of the experts a batch touches.
5. ``flash-8l-32e``: bf16 vs FP8/FP4 dummy weights, decode ms/step at bs 1/8/32/128 (CUDA graphs;
   second stream at bs 1) and prefill 8k, each with its roofline (weight bytes actually read /
   copy bandwidth; ``model_harness.active_bytes``).
6. ``flash-43l`` (FP8/FP4 as its config says, bf16 KV): decode bs 1/16/64, prefill 8k.
7. ``accuracy``: an official FP8/FP4 checkpoint (``make_checkpoint``, tiny preset; then a
   reduced flash-shaped model if time allows) on the runtime vs HF transformers fp32 on the same
   dequantized weights, teacher-forced next-token logprob deltas (mean / p99 / max) over
   ``--acc-tokens`` tokens: dequantized bf16 (the bf16 floor), FP8/FP4 in one forward (w8a8), in
   32-token chunks (w8a16).

Usage (device)::

    PYTHONPATH=python:sgl-kernel-v4:test python benchmark/bench_quant.py --out $OUT --budget-s 500

Quick mode (``--quick``, about 3 minutes: the kernel fixes and the decode rows only): the GPU tests
that failed on the first H200 run plus the register-decode checks, then the ceilings (with the fp8
tensorwise GEMM rate), the FP8 rows at decode sizes and across the w8a16 / w8a8 crossover, the FP4
MoE rows and a reduced tile sweep; no model or accuracy phases::

    QUANT_ARGS=--quick BUDGET_S=190 bash benchmark/device/quant.sh

Dry run on the CPU (torch references, tiny shapes)::

    python benchmark/bench_quant.py --out /tmp/q --device cpu --dry-run [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_model as bm  # noqa: E402
import model_harness as mh  # noqa: E402
import quant_kernels as qk  # noqa: E402
from quant_kernels import FLASH_LINEARS, free_memory  # noqa: E402
from timing import cuda_ms  # noqa: E402

T0 = time.time()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R: dict[str, Any] = {"errors": {}, "skipped": [], "phase_s": {}}


def left(budget: float) -> float:
    return budget - (time.time() - T0)


def ceilings(device: str) -> None:
    """Copy bandwidth and bf16 GEMM rate, measured as ``bench_model`` does, and the fp8 GEMM rate
    (``torch._scaled_mm``, one scale per tensor, 8192^3 e4m3: the fp8 tensor-core ceiling the
    block-scaled kernel is compared with); placeholders on CPU."""
    if device != "cuda":
        R["ceilings"] = {"copy_tbps": 0.02, "gemm_tflops": 0.05, "method": "dry run: placeholder values"}
        return
    bm.ceilings()
    R["ceilings"] = dict(bm.RESULTS["ceilings"])
    n = 8192
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    try:
        ms = statistics.median(
            cuda_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), 10, warm=3)
        )
        R["ceilings"]["fp8_gemm_tflops"] = round(2 * n**3 / (ms * 1e-3) / 1e12, 1)
    except RuntimeError as e:  # an older torch without tensorwise fp8: the row simply lacks it
        R["ceilings"]["fp8_gemm_error"] = str(e)[:200]


# ----------------------------------------------------------------------------------------------
# whole model
# ----------------------------------------------------------------------------------------------
def bench_model_rows(
    tag: str,
    preset: str,
    quantization: str | None,
    device: str,
    dtype: str,
    decode_bs: list[int],
    prefill: list[int],
    ctx: int,
    budget: float,
) -> None:
    from sglang_v4.model_loader.loader import weight_nbytes
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    out = R.setdefault("models", {}).setdefault(tag, {"preset": preset, "quantization": quantization})
    t = time.time()
    bench = mh.Bench(
        max(ctx, max(prefill, default=0)) + 1024, preset, device, dtype, quantization=quantization
    )
    model, mc = bench.runner.model, bench.mc
    out["build_s"] = round(time.time() - t, 1)
    out["weights_gib"] = round(weight_nbytes(model) / 2**30, 3)
    out["weight_format"] = model.quant.describe() if model.quant is not None else f"{dtype} (unquantized)"
    if device == "cuda":
        out["free_gib_after_build"] = round(torch.cuda.mem_get_info()[0] / 2**30, 2)
    out["kv_capacity_tokens"] = bench.runner.max_total_tokens
    bw = qk.copy_bw(R)
    rows = out.setdefault("rows", {})
    try:
        _, src = bench.prefill(ctx)
        cuda = device == "cuda"
        for bs in decode_bs:
            if left(budget) < 20:
                R["skipped"].append(f"{tag} decode bs{bs}")
                continue
            r = bench.decode(
                src,
                ctx,
                bs,
                graphs=cuda,
                stream=cuda and bs <= 4,
                steps=20 if cuda else 2,
                warm=3 if cuda else 1,
            )
            ab = mh.active_bytes(model, mc, bs)
            r["active_gb"] = round(ab["active_gb"], 3)
            if bw:
                r["roofline_ms"] = round(ab["active_gb"] * 1e9 / bw * 1e3, 3)
                r["x_roofline"] = round(r["ms_step"] / r["roofline_ms"], 2)
            rows[f"decode bs{bs}"] = r
        with torch.device("meta"):
            meta = DeepseekV4ForCausalLM(mc, torch.bfloat16, "meta")  # logical parameter counts
        for n in prefill:
            if left(budget) < 25:
                R["skipped"].append(f"{tag} prefill {n}")
                continue
            ts = []
            for i in range(3 if cuda else 1):
                dt, (slot, blocks, wins) = bench.prefill(n, seed=i + 1)
                bench.release(slot, blocks, wins)
                if i or not cuda:
                    ts.append(dt)
            s = statistics.median(ts)
            fl = mh.prefill_flops(meta, mc, n)
            rows[f"prefill {n}"] = {
                "s": round(s, 4),
                "tok_s": round(n / s, 1),
                "tflops": round(fl / s / 1e12, 1),
            }
    finally:
        bench.__dict__.clear()
        free_memory()


# ----------------------------------------------------------------------------------------------
# accuracy
# ----------------------------------------------------------------------------------------------


def write_accuracy_checkpoints(cases: list[tuple[str, dict, int]], paths: dict[str, str]) -> None:
    """Official FP8/FP4 checkpoints (``make_checkpoint``, seed 0) of each case, CPU work only."""
    from sglang_v4.tools.make_checkpoint import write_checkpoint

    for tag, cfg, _ in cases:
        t = time.time()
        tmp = tempfile.mkdtemp(prefix="quant_acc_")
        paths[tag] = write_checkpoint(tmp, fmt="official", weights="fp8", seed=0, config_dict=cfg)
        R.setdefault("accuracy_write_s", {})[tag] = round(time.time() - t, 1)


def accuracy(tag: str, cfg: dict, path: str, n_tokens: int, device: str, dtype: str) -> None:
    """Teacher-forced next-token logprobs: runtime (three ways) vs HF fp32 on dequantized weights."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.model_executor.model_runner import ModelRunner
    from sglang_v4.model_loader.loader import load_state_dict
    from sglang_v4.server_args import ServerArgs
    from sglang_v4.tools.teacher_forcing import next_token_logprobs
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    t = time.time()
    out: dict[str, Any] = {"config": tag, "tokens": n_tokens}
    mc = ModelConfig.from_pretrained(path)
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(2, min(120000, mc.vocab_size), (n_tokens,), generator=g).tolist()
    hcfg = DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    from transformers.initialization import no_init_weights

    with torch.device(device), no_init_weights():  # weights come from the checkpoint
        hf = HFModel._from_config(hcfg, dtype=torch.float32).eval()
    hf.load_state_dict(
        {
            k: v.float() if v.is_floating_point() else v
            for k, v in load_state_dict(path, progress=False).items()
        }
    )
    hf.to(device)
    with torch.no_grad():
        ref = torch.log_softmax(hf(torch.tensor([ids], device=device)).logits[0].float(), -1)[:-1].cpu()
    ref = ref.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    del hf
    free_memory()
    runs = [("dequantized bf16 (floor)", "none", n_tokens), ("FP8/FP4, one forward (w8a8)", "fp8", n_tokens)]
    runs.append(("FP8/FP4, 32-token chunks (w8a16)", "fp8", 32))
    for label, quant, chunk in runs:
        sa = ServerArgs(
            model_path=path,
            device=device,
            dtype=dtype,
            page_size=256,
            max_total_tokens=n_tokens + 1024,
            max_running_requests=4,
            context_length=n_tokens + 512,
            quantization=quant,
            disable_cuda_graph=True,
        )
        runner = ModelRunner(mc, sa)
        d = (next_token_logprobs(runner, ids, chunk) - ref).abs()
        out[label] = {
            "mean_abs_dlogprob": round(d.mean().item(), 4),
            "p99_abs_dlogprob": round(d.quantile(0.99).item(), 4),
            "max_abs_dlogprob": round(d.max().item(), 4),
        }
        del runner
        free_memory()
    out["s"] = round(time.time() - t, 1)
    R.setdefault("accuracy", []).append(out)


def reduced_flash_config() -> dict:
    """V4-Flash shapes, 4 layers (sliding, sliding, CSA, HCA), 8 experts, one hash layer."""
    from sglang_v4.configs.presets import get_preset, without_quantization

    d = without_quantization(get_preset("flash-8l-32e"))
    d.update(
        num_hidden_layers=4,
        layer_types=d["layer_types"][:4],
        mlp_layer_types=d["mlp_layer_types"][:4],
        n_routed_experts=8,
    )
    return d


# ----------------------------------------------------------------------------------------------
# GPU tests
# ----------------------------------------------------------------------------------------------
#: ``--quick``: the three tests that failed on the first H200 run, the register decodes on every code,
#: and the decode / expert-mode paths of both kernels.
QUICK_TESTS = [
    "test/test_kernels_fp8_gemm.py::test_fp8_linear_vs_float64[dtype1-w8a16-300-1-4096-8192]",
    "test/test_kernels_fp8_gemm.py::test_fp8_linear_vs_float64[dtype1-w8a16-2048-1-2048-4096]",
    "test/test_kernels_fp8_gemm.py::test_act_quant_vs_float64[37-256]",
    "test/test_kernels_fp8_gemm.py::test_act_quant_vs_float64[4-384]",
    "test/test_kernels_fp8_gemm.py::test_e4m3_register_decode_every_code",
    "test/test_kernels_fp8_gemm.py::test_fp8_linear_vs_float64[dtype0-w8a16-1-1-1024-4096]",
    "test/test_kernels_fp8_gemm.py::test_w8a16_split_k[2]",
    "test/test_kernels_moe_fp4.py::test_fp4_tile_decode_every_byte[True]",
    "test/test_kernels_moe_fp4.py::test_fused_moe_fp4_vs_float64[dtype0-1-4096-2048-32-6]",
    "test/test_kernels_moe_fp4.py::test_fused_moe_fp4_vs_float64[dtype0-200-1024-512-16-6]",
]


def interruptible_child() -> None:
    """``preexec_fn`` of the pytest child: SIGINT back to its default before exec. An ignored
    SIGINT is inherited across exec (a driver started from a process that ignores it, as the
    server's children do), and Python then installs no KeyboardInterrupt handler, so the
    interrupt of :func:`wait_gpu_tests` would be lost and the run killed without its summary."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_gpu_tests(out: str, device: str, quick: bool = False) -> subprocess.Popen | None:
    files = ["test/test_kernels_fp8_gemm.py", "test/test_kernels_moe_fp4.py"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if device == "cuda":
        files += [
            "test/test_quant_gpu.py",
            "test/test_gpu_cuda_graph_padding.py::test_cuda_graph_decode_matches_eager_gpu_fp8_fp4",
        ]
    else:
        env["TRITON_INTERPRET"] = "1"  # dry run: the kernels under the Triton interpreter
    opts = ["-q"]
    if quick:  # the CPU dry run checks the selection on two interpreter-sized tests
        files = QUICK_TESTS if device == "cuda" else [QUICK_TESTS[2], QUICK_TESTS[6]]
        opts = ["-v", "--timeout=60"]  # one line per test as it ends; a hung test fails alone
    cmd = [sys.executable, "-m", "pytest", *opts, "-m", "gpu", "-rfEs", "-p", "no:cacheprovider", *files]
    log = open(os.path.join(out, "pytest_quant_gpu.log"), "w")
    return subprocess.Popen(
        cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=interruptible_child
    )


def wait_gpu_tests(proc: subprocess.Popen | None, out: str, budget: float, keep_s: float = 240) -> None:
    """Wait for the tests, leaving ``keep_s`` of the budget to the timings."""
    if proc is None:
        return
    try:
        proc.wait(timeout=max(5.0, left(budget) - keep_s))
    except subprocess.TimeoutExpired:
        # SIGINT first: pytest stops and still prints the failures so far and its summary (a
        # killed run leaves only progress characters in the log)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)  # pytest's summary on a loaded machine
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        R["errors"]["gpu_tests"] = "timed out (interrupted to keep the time budget)"
    with open(os.path.join(out, "pytest_quant_gpu.log")) as f:
        tail = [ln for ln in f.read().strip().splitlines() if ln.strip()]
    R["gpu_tests"] = {"rc": proc.returncode, "summary": tail[-1] if tail else ""}


# ----------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------
def targets() -> dict[str, Any]:
    """The issue's targets, from whatever rows exist."""
    out: dict[str, Any] = {}
    m = R.get("models", {})

    def row(tag: str, name: str) -> dict:
        return m.get(tag, {}).get("rows", {}).get(name, {})

    for tag in ("flash-8l-32e fp8", "flash-43l"):
        r = row(tag, "decode bs1")
        if r.get("x_roofline"):
            out[f"{tag}: bs1 decode x roofline (target <= 1.3)"] = r["x_roofline"]
            out[f"{tag}: bs1 within 1.3x roofline"] = r["x_roofline"] <= 1.3
    a, b = row("flash-8l-32e bf16", "decode bs1"), row("flash-8l-32e fp8", "decode bs1")
    if a.get("ms_step") and b.get("ms_step"):
        out["flash-8l-32e bs1: bf16 / FP8-FP4 ms ratio (target >= 1.6)"] = round(
            a["ms_step"] / b["ms_step"], 2
        )
        out["flash-8l-32e bs1: FP8/FP4 at least 1.6x faster"] = a["ms_step"] / b["ms_step"] >= 1.6
    for bs in (8, 32, 128):
        a, b = row("flash-8l-32e bf16", f"decode bs{bs}"), row("flash-8l-32e fp8", f"decode bs{bs}")
        if a.get("ms_step") and b.get("ms_step"):
            out[f"flash-8l-32e bs{bs}: bf16 / FP8-FP4 ms ratio"] = round(a["ms_step"] / b["ms_step"], 2)
    return out


def _table(rows: list[dict], cols: list[str]) -> list[str]:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return lines


def markdown() -> str:
    env, c = R.get("env", {}), R.get("ceilings", {})
    lines = [f"# bench_quant ({env.get('gpu', '?')}, elapsed {R.get('elapsed_s')} s)", ""]
    lines.append(f"command: `{env.get('command')}`; torch {env.get('torch')}, triton {env.get('triton')}")
    if c:
        lines.append(
            f"ceilings: copy {c.get('copy_tbps')} TB/s, bf16 GEMM {c.get('gemm_tflops')} TFLOP/s, fp8 GEMM "
            f"(tensorwise) {c.get('fp8_gemm_tflops')} TFLOP/s ({c.get('method')})"
        )
    if "gpu_tests" in R:
        lines.append(
            f"GPU tests (pytest -m gpu, quantization files): rc={R['gpu_tests']['rc']} `{R['gpu_tests']['summary']}`"
        )
    if R.get("targets"):
        lines += ["", "## Targets", ""] + _table(
            [{"target": k, "value": v} for k, v in R["targets"].items()], ["target", "value"]
        )
    if R.get("fp8_gemm"):
        lines += [
            "",
            "## FP8 block-scaled linear vs bf16 cuBLAS (ms per call; roofline = bytes / copy bandwidth)",
            "",
        ]
        lines += _table(
            R["fp8_gemm"],
            ["shape", "T", "auto", "bf16_ms", "w8a16_ms", "w8a8_ms", "fp8_speedup_vs_bf16", "fp8_roofline_ms",
             "fp8_x_roofline", "bf16_x_roofline", "fp8_tflops", "fp8_fraction_of_bf16_gemm_rate",
             "w8a8_fraction_of_fp8_rate"],
        )  # fmt: skip
    if R.get("moe_fp4"):
        lines += ["", "## FP4 MoE vs bf16 Triton MoE (ms per call)", ""]
        lines += _table(
            R["moe_fp4"],
            ["E", "T", "layout", "experts_touched", "bf16_ms", "fp4_ms", "fp4_speedup_vs_bf16", "fp4_roofline_ms",
             "fp4_x_roofline", "bf16_x_roofline"],
        )  # fmt: skip
    for tag, m in R.get("models", {}).items():
        lines += [
            "",
            f"## {tag}: {m.get('weight_format')}, weights {m.get('weights_gib')} GiB, build {m.get('build_s')} s",
        ]
        extra = {k: m[k] for k in ("free_gib_after_build", "kv_capacity_tokens") if k in m}
        if extra:
            lines.append(json.dumps(extra))
        lines += [""] + _table(
            [{"row": k, **v} for k, v in m.get("rows", {}).items()],
            ["row", "ms_step", "tok_s", "replay_ms", "active_gb", "roofline_ms", "x_roofline", "s", "tflops"],
        )
    for a in R.get("accuracy", []):
        lines += [
            "",
            f"## Accuracy vs HF fp32 on the dequantized weights: {a['config']}, {a['tokens']} tokens",
            "",
        ]
        lines += _table(
            [{"runtime": k, **v} for k, v in a.items() if isinstance(v, dict)],
            ["runtime", "mean_abs_dlogprob", "p99_abs_dlogprob", "max_abs_dlogprob"],
        )
    if R.get("sweep"):
        lines += ["", "## Tile sweep (decode kernels; best configs first)", ""]
        for k, v in R["sweep"].items():
            lines.append(f"- {k}: {json.dumps(v) if not isinstance(v, list) else json.dumps(v[:3])}")
    if R["errors"]:
        lines += ["", "## errors"] + [f"- {k}: {v[-1500:]}" for k, v in R["errors"].items()]
    if R["skipped"]:
        lines += ["", "skipped (time budget): " + ", ".join(R["skipped"])]
    return "\n".join(lines) + "\n"


def save(out: str) -> None:
    R["elapsed_s"] = round(time.time() - T0, 1)
    try:
        R["targets"] = targets()
        md = markdown()
    except Exception:  # noqa: BLE001 - a report bug must not lose the rows
        R["errors"]["report"] = traceback.format_exc()[-2000:]
        md = "report failed; see quant_bench.json\n"
    with open(os.path.join(out, "quant_bench.json"), "w") as f:
        json.dump(R, f, indent=1, default=str)
    with open(os.path.join(out, "quant_bench.md"), "w") as f:
        f.write(md)


def phase(name: str, need_s: float, budget: float, out: str, fn, *a, **kw) -> None:
    if left(budget) < need_s:
        R["skipped"].append(name)
        save(out)
        return
    t = time.time()
    try:
        fn(*a, **kw)
    except Exception:  # noqa: BLE001 - a failed phase must not lose the others
        R["errors"][name] = traceback.format_exc()[-3000:]
        free_memory()
    finally:
        R["phase_s"][name] = round(time.time() - t, 1)
        save(out)
        print(f"[{time.time() - T0:6.1f}s] {name} done", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--dry-run", action="store_true", help="tiny presets and shapes (the CPU check of the driver)"
    )
    ap.add_argument("--no-tests", action="store_true", help="skip the pytest phase")
    ap.add_argument(
        "--whole-model",
        action="store_true",
        help="only the whole-model rows and the accuracy runs (no kernel rows, no sweep)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="the failing-run tests + FP8 / FP4 kernel rows only (about 3 min)",
    )
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cuda, B = args.device == "cuda", args.budget_s
    dry = args.dry_run or not cuda
    dtype_name = "bfloat16" if cuda else "float32"
    dtype = torch.bfloat16 if cuda else torch.float32
    gpu, triton_version = "cpu (dry run)", None
    if cuda:
        import triton

        gpu, triton_version = torch.cuda.get_device_properties(0).name, triton.__version__
    R["env"] = {
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton_version,
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "command": " ".join(sys.argv),
    }
    save(args.out)
    proc = None if args.no_tests else start_gpu_tests(args.out, args.device, args.quick)
    if args.quick:
        return quick(args, proc, dtype)
    if dry:
        small_preset, big_preset, ctx = "tiny", "tiny", 200
        decode_bs, big_bs, prefill = [1, 2], [1, 2], [256]
        shapes = {"q_a-like": (1, 64, 256), "o_a-like (2 groups)": (2, 32, 256)}
        tokens, moe_cases, moe_tokens = [1, 8, 96], [(8, 128, 64, 2)], [1, 8]
        acc = [("tiny", None, 200)]
    else:
        small_preset, big_preset, ctx = "flash-8l-32e", "flash-43l", 960
        decode_bs, big_bs, prefill = [1, 8, 32, 128], [1, 16, 64], [8192]
        shapes, tokens = FLASH_LINEARS, [1, 32, 128, 8192]
        moe_cases, moe_tokens = [(32, 4096, 2048, 6), (160, 4096, 2048, 6)], [1, 8, 32, 128, 8192]
        acc = [("tiny", None, 1024), ("flash-shaped 4 layers 8 experts", "reduced", 1024)]
    from sglang_v4.configs.presets import get_preset

    acc_cases = [
        (label, get_preset("tiny") if which is None else reduced_flash_config(), n) for label, which, n in acc
    ]
    paths: dict[str, str] = {}
    # CPU work (checkpoint writing) overlaps the tests; every timing waits for them
    phase("accuracy checkpoints", 30, B, args.out, write_accuracy_checkpoints, acc_cases, paths)
    wait_gpu_tests(proc, args.out, B)
    save(args.out)
    phase("ceilings", 10, B, args.out, ceilings, args.device)
    crossover = {} if dry else {"q_b": [8, 64, 256, 512, 2048], "o_b": [8, 64, 256, 512, 2048]}
    if not args.whole_model:
        phase(
            "fp8_gemm", 60, B, args.out, qk.bench_fp8_gemm, R, args.device, shapes, tokens, dtype, crossover
        )
        phase("moe_fp4", 40, B, args.out, qk.bench_moe_fp4, R, args.device, moe_cases, moe_tokens, dtype)
    for tag, quant in ((f"{small_preset} bf16", "none"), (f"{small_preset} fp8", "fp8")):
        phase(tag, 40, B, args.out, bench_model_rows, tag, small_preset, quant, args.device, dtype_name,
              decode_bs, prefill, ctx, B)  # fmt: skip
    tag = big_preset if not dry else f"{big_preset} (as flash-43l)"
    phase(tag, 60, B, args.out, bench_model_rows, tag, big_preset, "fp8" if dry else None, args.device, dtype_name,
          big_bs, prefill, ctx, B)  # fmt: skip
    for label, cfg, n in acc_cases:
        if label in paths:
            phase(f"accuracy {label}", 30 if label == "tiny" else 60, B, args.out, accuracy, label, cfg,
                  paths[label], n, args.device, dtype_name)  # fmt: skip
    if not args.whole_model:
        phase("sweep", 45, B, args.out, qk.sweep, R, args.device, dtype)
    save(args.out)
    return 0


def quick(args: argparse.Namespace, proc: subprocess.Popen | None, dtype: torch.dtype) -> int:
    """``--quick``, in order of value: tests (at most until 55% of the budget), ceilings, FP4 MoE rows
    (bs 1 .. 8192, 32 experts), FP8 rows of every projection at bs 1, the q_b / o_b rows across the
    w8a16 / w8a8 crossover and at prefill, the FP4 MoE at bs 1 with 160 experts, then a reduced
    sweep if time is left. Each phase starts only if its estimate fits in what is left."""
    B, cuda = args.budget_s, args.device == "cuda"
    wait_gpu_tests(proc, args.out, B, keep_s=0.45 * B)
    save(args.out)
    phase("ceilings", 10, B, args.out, ceilings, args.device)
    if cuda:
        gemv, moe32 = (FLASH_LINEARS, [1]), ([(32, 4096, 2048, 6)], [1, 8, 32, 128, 8192])
        cross = ({n: FLASH_LINEARS[n] for n in ("q_b", "o_b")}, [64, 256, 2048, 8192])
    else:
        gemv, moe32 = ({"q_a-like": (1, 64, 256)}, [1]), ([(8, 128, 64, 2)], [1, 8])
        cross = ({"q_a-like": (1, 64, 256)}, [96])
    phase("moe_fp4", 20, B, args.out, qk.bench_moe_fp4, R, args.device, moe32[0], moe32[1], dtype)
    phase("fp8_gemm", 15, B, args.out, qk.bench_fp8_gemm, R, args.device, gemv[0], gemv[1], dtype)
    phase("fp8_gemm crossover", 20, B, args.out, qk.bench_fp8_gemm, R, args.device, cross[0], cross[1], dtype)
    if cuda:
        moe160 = ([(160, 4096, 2048, 6)], [1])
        phase("moe_fp4 160 experts", 10, B, args.out, qk.bench_moe_fp4, R, args.device, *moe160, dtype)
    phase("sweep", 40, B, args.out, qk.sweep, R, args.device, dtype, True)
    save(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
